package model

import "context"

// lastWordsKey is the context key of WithLastWords.
type lastWordsKey struct{}

// WithLastWords returns a copy of ctx that carries say, for the model that
// ctx opens. A runner whose model can end its worker process on its own (a
// plugin whose process died: see plugin.OpenSpec) calls it with the reason
// before the process exits, so that the supervisor learns why the worker
// died rather than its exit status alone. A worker puts it in the context
// it opens its model with; say must be safe to call from any goroutine.
func WithLastWords(ctx context.Context, say func(reason string)) context.Context {
	return context.WithValue(ctx, lastWordsKey{}, say)
}

// LastWords returns the function WithLastWords put in ctx, or one that does
// nothing when there is none (a model opened outside a worker process).
func LastWords(ctx context.Context) func(reason string) {
	if say, ok := ctx.Value(lastWordsKey{}).(func(string)); ok && say != nil {
		return say
	}
	return func(string) {}
}
