package model

import (
	"context"
	"errors"
	"fmt"
	"slices"
)

// Func is a Model made of a function: Predict calls it and Close does
// nothing. It lets a test or an embedder run a plain Go function as the
// model, e.g. supervisor.Config{InProcess: model.Func(fn)}.
type Func func(ctx context.Context, items [][]byte) ([][]byte, error)

// Predict calls f.
func (f Func) Predict(ctx context.Context, items [][]byte) ([][]byte, error) {
	return f(ctx, items)
}

// Close returns nil: a function holds nothing to release.
func (f Func) Close() error { return nil }

// Call runs m on one batch and checks what it answered, the same way for a
// worker process and for the in-process mode. It returns one of three
// outcomes:
//
//   - err not nil: the whole batch failed, because Predict returned an error
//     other than a fitting *ItemErrors, or answered with a number of outputs
//     other than len(items). Predict's own error is returned as it is, so
//     that errors.Is on the model's sentinels holds.
//   - itemErrs not nil: Predict returned an *ItemErrors with one entry per
//     item; itemErrs[i] is nil where the item succeeded and outputs[i] is
//     its output.
//   - otherwise every item succeeded and outputs has one entry per item.
//
// An *ItemErrors whose Errs does not have one entry per item cannot say
// which item failed, so it fails the whole batch. One that fails every
// item needs no outputs: each caller gets its item's own error, rather
// than all of them one about the missing outputs.
func Call(ctx context.Context, m Model, items [][]byte) (outputs [][]byte, itemErrs []error, err error) {
	outputs, err = m.Predict(ctx, items)
	var some *ItemErrors
	switch {
	case errors.As(err, &some) && len(some.Errs) == len(items):
		itemErrs = some.Errs
		if len(outputs) == 0 && !slices.Contains(itemErrs, nil) {
			outputs = make([][]byte, len(items))
		}
	case err != nil:
		return nil, nil, err
	}
	if len(outputs) != len(items) {
		return nil, nil, fmt.Errorf("model returned %d outputs for a batch of %d items", len(outputs), len(items))
	}
	return outputs, itemErrs, nil
}
