package main

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/streamer-dev/streamer/model"
	"github.com/streamer-dev/streamer/model/plugin"
)

// TestServedAsAPlugin builds the example and runs it as streamer's workers
// do: as a plugin process, through the plugin host.
func TestServedAsAPlugin(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "fillmask")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	corpus := filepath.Join(dir, "corpus.txt")
	if err := os.WriteFile(corpus, []byte("Happy birthday to grandma. Happy birthday to grandma. Happy birthday to you."), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		args  map[string]string
		items []any
		want  []any // nil where the item must fail
	}{
		{"built-in corpus", nil,
			[]any{"Happy birthday to [MASK].", "The [MASK] barked at the postman.", "The sun rises in the [MASK].", "no mask here", 42, nil},
			[]any{"you", "dog", "east", nil, nil, nil}},
		{"another corpus", map[string]string{"corpus": corpus},
			[]any{"Happy birthday to [MASK]."},
			[]any{"grandma"}},
		{"top words", map[string]string{"corpus": corpus, "top": "2"},
			[]any{"Happy birthday to [MASK]."},
			[]any{[]any{"grandma", "you"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			m, err := plugin.Open(ctx, plugin.Config{Path: bin, Args: tt.args})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			items := make([][]byte, len(tt.items))
			for i, v := range tt.items {
				items[i], _ = msgpack.Marshal(v)
			}
			outs, err := m.Predict(ctx, items)
			var itemErrs *model.ItemErrors
			if err != nil && !errors.As(err, &itemErrs) {
				t.Fatalf("Predict: %v", err)
			}
			for i, want := range tt.want {
				if want == nil {
					if itemErrs == nil || itemErrs.Errs[i] == nil {
						t.Errorf("item %v: want an error", tt.items[i])
					} else if _, text := tt.items[i].(string); !text && !strings.Contains(itemErrs.Errs[i].Error(), "want a sentence") {
						t.Errorf("item %v: %v, want an error saying a sentence is wanted", tt.items[i], itemErrs.Errs[i])
					}
					continue
				}
				var got any
				if err := msgpack.Unmarshal(outs[i], &got); err != nil {
					t.Fatalf("output %d: %v", i, err)
				}
				if list, ok := got.([]any); ok { // top=K: keep the words
					for j, g := range list {
						list[j] = g.(map[string]any)["word"]
					}
				}
				if !reflect.DeepEqual(got, want) {
					t.Errorf("fill %q = %v, want %v", tt.items[i], got, want)
				}
			}
			if itemErrs != nil {
				for i, err := range itemErrs.Errs {
					if err != nil && !strings.Contains(err.Error(), "[MASK]") {
						t.Errorf("item %v: error %q does not say what is expected", tt.items[i], err)
					}
				}
			}
		})
	}
}
