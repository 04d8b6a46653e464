// Package sdk is what a streamer model plugin is written with. A plugin is a
// program of its own: a streamer worker starts one copy of it per worker
// process, with the worker's CUDA_VISIBLE_DEVICES, calls Init once and then
// Predict once per batch. The plugin author implements Model and calls Serve
// from main; the SDK does the rest (the go-plugin handshake, the gRPC server,
// routing the plugin's output into the server log).
//
// Items arrive as msgpack bytes: a JSON item posted to streamer's HTTP API,
// say the string "Happy birthday to [MASK].", arrives as the msgpack encoding
// of that string. Item.Decode turns an item into a Go value; OK encodes an
// output, which the HTTP API hands back to the client as JSON; Fail fails one
// item while its batch-mates keep their answers.
//
// A complete plugin that answers each string with its length in characters:
//
//	package main
//
//	import (
//		"context"
//		"unicode/utf8"
//
//		"github.com/streamer-dev/streamer/model/plugin/sdk"
//	)
//
//	type runeCount struct{}
//
//	func (runeCount) Init(ctx context.Context, cfg sdk.Config) (sdk.Info, error) {
//		return sdk.Info{Name: "runecount", Device: "cpu"}, nil
//	}
//
//	func (runeCount) Predict(ctx context.Context, items []sdk.Item) ([]sdk.Result, error) {
//		results := make([]sdk.Result, len(items))
//		for i, item := range items {
//			var text string
//			if err := item.Decode(&text); err != nil {
//				results[i] = sdk.Fail(err)
//				continue
//			}
//			results[i] = sdk.OK(utf8.RuneCountInString(text))
//		}
//		return results, nil
//	}
//
//	func main() {
//		sdk.Serve(runeCount{})
//	}
//
// Build it and serve it with two workers:
//
//	go build -o bin/runecount ./runecount
//	streamer serve --plugin bin/runecount --workers 2
//	curl -d '{"inputs": ["héllo", 42]}' localhost:5005/predict
//
// The answer is 422, naming item 1: 42 is not a string, and a request of
// several items fails whole when one fails. `{"inputs": ["héllo"]}` alone
// is answered `{"outputs":[5]}`.
//
// What a plugin must know:
//
//   - Load the model in Init, not in main: the worker gives the handshake
//     that Serve performs nine tenths of the server's --init-timeout (a
//     Go program embedding the worker may give it as little as
//     plugin.DefaultStartTimeout, 5 s), and Init the whole of it.
//   - Write logs to stderr (or stdout, which Serve points at stderr once Init
//     is called): the server log shows each line tagged with the worker's
//     slot. Print nothing on stdout before Serve.
//   - Predict is called one batch at a time. A panic or an exit in the
//     plugin is a crash of its worker: it is restarted, the batch is retried
//     elsewhere and an item that keeps crashing is refused. Return an error
//     from Predict only when the whole batch cannot run.
//   - The plugin dies with its worker; if the model implements io.Closer,
//     Close is called when the worker stops it cleanly.
//
// The contract under the SDK, for plugins in other languages, is documented
// in package pluginpb.
package sdk

import (
	"context"
	"errors"
	"fmt"
	"reflect"

	"github.com/vmihailenco/msgpack/v5"
)

// Model is what a plugin implements.
type Model interface {
	// Init loads the model. It is called once, before any Predict, with the
	// settings given on the server's command line. The returned Info names
	// the model in the server's logs and ready messages. An error fails the
	// worker's start and is shown in the server log.
	Init(ctx context.Context, cfg Config) (Info, error)
	// Predict runs one batch. It returns exactly one Result per item,
	// results[i] answering items[i]; a Result made by Fail fails that item
	// alone. An error fails every item of the batch with its message. Items
	// are only valid during the call.
	Predict(ctx context.Context, items []Item) ([]Result, error)
}

// Config is what Init is given.
type Config struct {
	// Args are the server's --plugin-arg key=value settings.
	Args map[string]string
	// Device is "cpu" or "cuda". With "cuda", use device 0: the plugin
	// inherits its worker's CUDA_VISIBLE_DEVICES, in which the card of the
	// worker's slot is the only one, or the first.
	Device string
}

// Arg returns the --plugin-arg named key, or def when it was not given.
func (c Config) Arg(key, def string) string {
	if v, ok := c.Args[key]; ok {
		return v
	}
	return def
}

// Info describes a model that Init loaded.
type Info struct {
	// Name names the model, e.g. "fillmask".
	Name string
	// Device says where it runs, e.g. "cpu" or "cuda:0".
	Device string
}

// Item is one sample of a batch: one msgpack-encoded value.
type Item []byte

// Decode decodes the item into v, which must be a pointer: a string item
// decodes into a *string, a JSON object into a *map[string]any or a pointer
// to a struct with msgpack tags, an array into a pointer to a slice. A null
// item (JSON null) decodes only into what can be nil (a pointer, map, slice
// or interface): into a string, number, bool or struct it is an error, not
// the zero value that msgpack would leave there.
func (it Item) Decode(v any) error {
	if len(it) == 1 && it[0] == msgpackNil && !nilable(v) {
		return fmt.Errorf("item is null, which does not decode into %T", v)
	}
	if err := msgpack.Unmarshal(it, v); err != nil {
		return fmt.Errorf("item does not decode into %T: %w", v, err)
	}
	return nil
}

// msgpackNil is the encoding of nil (JSON null).
const msgpackNil = 0xc0

// nilable says whether v points to something that can be nil.
func nilable(v any) bool {
	t := reflect.TypeOf(v)
	if t == nil || t.Kind() != reflect.Pointer {
		return true // msgpack.Unmarshal refuses it with its own error
	}
	switch t.Elem().Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Interface:
		return true
	}
	return false
}

// Result answers one item: an encoded output, or the item's error. A
// Result with neither is a bug of the plugin's, and fails its whole batch.
type Result struct {
	// Output is the msgpack-encoded answer; OK fills it.
	Output []byte
	// Err, when not nil, fails this item alone.
	Err error
}

// OK encodes v with msgpack as an item's answer. A value msgpack cannot
// encode becomes the item's error.
func OK(v any) Result {
	b, err := Encode(v)
	if err != nil {
		return Result{Err: err}
	}
	return Result{Output: b}
}

// Fail fails one item with err; its batch-mates keep their answers.
func Fail(err error) Result {
	if err == nil {
		err = errors.New("item failed")
	}
	return Result{Err: err}
}

// Failf fails one item with a formatted message.
func Failf(format string, args ...any) Result {
	return Result{Err: fmt.Errorf(format, args...)}
}

// Encode returns the msgpack encoding of v, the form outputs travel in.
func Encode(v any) ([]byte, error) {
	b, err := msgpack.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encode output %T: %w", v, err)
	}
	return b, nil
}
