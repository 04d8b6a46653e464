package model_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/streamer-dev/streamer/model"
)

var errShape = errors.New("wrong shape")

func TestCall(t *testing.T) {
	items := [][]byte{[]byte("a"), []byte("b")}
	outputs := [][]byte{[]byte("A"), []byte("B")}
	tests := []struct {
		name        string
		fn          model.Func
		wantOutputs [][]byte
		wantItemErr []error
		wantErr     string // substring; "" for none
		wantErrIs   error
	}{
		{
			name:        "every item answered",
			fn:          func(context.Context, [][]byte) ([][]byte, error) { return outputs, nil },
			wantOutputs: outputs,
		},
		{
			name: "whole batch fails with the model's own error",
			fn: func(context.Context, [][]byte) ([][]byte, error) {
				return nil, fmt.Errorf("load weights: %w", errShape)
			},
			wantErr:   "load weights: wrong shape",
			wantErrIs: errShape,
		},
		{
			name: "some items fail",
			fn: func(context.Context, [][]byte) ([][]byte, error) {
				return [][]byte{nil, []byte("B")}, &model.ItemErrors{Errs: []error{errShape, nil}}
			},
			wantOutputs: [][]byte{nil, []byte("B")},
			wantItemErr: []error{errShape, nil},
		},
		{
			name: "wrapped item errors are found",
			fn: func(context.Context, [][]byte) ([][]byte, error) {
				return outputs, fmt.Errorf("batch: %w", &model.ItemErrors{Errs: []error{nil, errShape}})
			},
			wantOutputs: outputs,
			wantItemErr: []error{nil, errShape},
		},
		{
			name: "item errors of the wrong length fail the batch",
			fn: func(context.Context, [][]byte) ([][]byte, error) {
				return outputs, &model.ItemErrors{Errs: []error{errShape}}
			},
			wantErr: "item 0: wrong shape",
		},
		{
			name: "every item fails, with no outputs",
			fn: func(context.Context, [][]byte) ([][]byte, error) {
				return nil, &model.ItemErrors{Errs: []error{errShape, errShape}}
			},
			wantOutputs: [][]byte{nil, nil},
			wantItemErr: []error{errShape, errShape},
		},
		{
			name: "no outputs while an item succeeds",
			fn: func(context.Context, [][]byte) ([][]byte, error) {
				return nil, &model.ItemErrors{Errs: []error{errShape, nil}}
			},
			wantErr: "model returned 0 outputs for a batch of 2 items",
		},
		{
			name:    "too few outputs",
			fn:      func(context.Context, [][]byte) ([][]byte, error) { return outputs[:1], nil },
			wantErr: "model returned 1 outputs for a batch of 2 items",
		},
		{
			name: "too many outputs with item errors",
			fn: func(context.Context, [][]byte) ([][]byte, error) {
				return append(outputs, nil), &model.ItemErrors{Errs: []error{errShape, nil}}
			},
			wantErr: "model returned 3 outputs for a batch of 2 items",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, itemErrs, err := model.Call(context.Background(), tt.fn, items)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one saying %q", err, tt.wantErr)
				}
				if tt.wantErrIs != nil && !errors.Is(err, tt.wantErrIs) {
					t.Errorf("err = %v does not wrap %v", err, tt.wantErrIs)
				}
				if out != nil || itemErrs != nil {
					t.Errorf("outputs %q and item errors %v alongside a batch error, want none", out, itemErrs)
				}
				return
			}
			if err != nil {
				t.Fatalf("err = %v, want nil", err)
			}
			if !reflect.DeepEqual(out, tt.wantOutputs) {
				t.Errorf("outputs = %q, want %q", out, tt.wantOutputs)
			}
			if len(itemErrs) != len(tt.wantItemErr) {
				t.Fatalf("item errors = %v, want %v", itemErrs, tt.wantItemErr)
			}
			for i := range itemErrs {
				if !errors.Is(itemErrs[i], tt.wantItemErr[i]) || (itemErrs[i] == nil) != (tt.wantItemErr[i] == nil) {
					t.Errorf("item error %d = %v, want %v", i, itemErrs[i], tt.wantItemErr[i])
				}
			}
		})
	}
}

func TestCallPassesContextAndItems(t *testing.T) {
	type key struct{}
	ctx := context.WithValue(context.Background(), key{}, "v")
	items := [][]byte{[]byte("x")}
	var gotCtx context.Context
	var gotItems [][]byte
	fn := model.Func(func(ctx context.Context, items [][]byte) ([][]byte, error) {
		gotCtx, gotItems = ctx, items
		return items, nil
	})
	if _, _, err := model.Call(ctx, fn, items); err != nil {
		t.Fatal(err)
	}
	if gotCtx.Value(key{}) != "v" || !reflect.DeepEqual(gotItems, items) {
		t.Errorf("Predict got context %v and items %q, want the caller's", gotCtx, gotItems)
	}
}

func TestFuncCloseReturnsNil(t *testing.T) {
	var m model.Model = model.Func(func(context.Context, [][]byte) ([][]byte, error) { return nil, nil })
	if err := m.Close(); err != nil {
		t.Errorf("Close = %v, want nil", err)
	}
}

// A runner's free-form arguments may hold secrets: logs and the API show
// their keys only. Other settings show as they are.
func TestPublicSettingsHideTheArgsValues(t *testing.T) {
	spec, err := model.NewSpec("plugin", map[string]any{"path": "/bin/m", "args": map[string]string{"api_key": "hunter2", "mode": "fast"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, shown := range []string{string(spec.PublicSettings()), spec.String()} {
		if strings.Contains(shown, "hunter2") || strings.Contains(shown, "fast") || !strings.Contains(shown, `"api_key":"…"`) || !strings.Contains(shown, "/bin/m") {
			t.Errorf("shown as %s; want the args' keys, not their values, and the path", shown)
		}
	}
	plain, _ := model.NewSpec("sleep", map[string]int{"fixed": 10})
	if got := plain.String(); got != `sleep {"fixed":10}` {
		t.Errorf("String() = %s; want the settings as they are", got)
	}
}

// Nil tells a model that is there from one whose first Predict would panic.
func TestNil(t *testing.T) {
	var noFunc model.Func
	var noPointer *struct{ model.Func }
	for _, c := range []struct {
		name string
		m    model.Model
		want bool
	}{
		{"nil", nil, true}, {"a nil Func", noFunc, true}, {"a nil pointer", noPointer, true},
		{"a Func", model.Func(func(context.Context, [][]byte) ([][]byte, error) { return nil, nil }), false},
		{"a pointer", &struct{ model.Func }{}, false},
	} {
		if got := model.Nil(c.m); got != c.want {
			t.Errorf("Nil(%s) = %v, want %v", c.name, got, c.want)
		}
	}
}
