package model_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/streamer-dev/streamer/model"
)

func TestParseBuiltin(t *testing.T) {
	tests := []struct {
		name    string
		builtin bool
		wantErr string
	}{
		{"echo", true, ""},
		{"", true, ""},
		{"echo:x", true, "echo takes no arguments"},
		{"sleep:10ms,100us", true, ""},
		{"sleep:10ms", true, "FIXED,PER_ITEM"},
		{"sleep:ten,1us", true, `fixed cost "ten"`},
		{"sleep:1ms,-1us", true, "per-item cost"},
		{"chaos:crash=boom,hang=zz,init-delay=1ms", true, ""},
		{"chaos:explode=1", true, `unknown option "explode"`},
		{"chaos:delay=soon", true, "option delay"},
		{"model.onnx", false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, ok, err := model.ParseBuiltin(tt.name)
			if ok != tt.builtin {
				t.Fatalf("built-in = %v, want %v", ok, tt.builtin)
			}
			if tt.wantErr == "" && err != nil {
				t.Fatalf("unexpected error %v", err)
			}
			if tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestSleepCostsWhatItSays(t *testing.T) {
	m, _, err := model.OpenBuiltin("sleep:2ms,1ms")
	if err != nil {
		t.Fatal(err)
	}
	items := [][]byte{{1}, {2}, {3}}
	start := time.Now()
	out, err := m.Predict(context.Background(), items)
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < 5*time.Millisecond {
		t.Fatalf("a batch of 3 took %s, want at least 2ms + 3×1ms", took)
	}
	if len(out) != 3 || out[2][0] != 3 {
		t.Fatalf("sleep must echo its items, got %v", out)
	}
}

func TestChaosRejectFailsOnlyThatItem(t *testing.T) {
	m, _, err := model.OpenBuiltin("chaos:reject=nope")
	if err != nil {
		t.Fatal(err)
	}
	good, _ := msgpack.Marshal("fine")
	bad, _ := msgpack.Marshal("nope")
	out, err := m.Predict(context.Background(), [][]byte{good, bad})
	var itemErrs *model.ItemErrors
	if !errors.As(err, &itemErrs) {
		t.Fatalf("got %v, want *model.ItemErrors", err)
	}
	if itemErrs.Errs[0] != nil || itemErrs.Errs[1] == nil || !strings.Contains(itemErrs.Errs[1].Error(), "rejected") {
		t.Fatalf("item errors %v", itemErrs.Errs)
	}
	if string(out[0]) != string(good) {
		t.Fatalf("the good item must still be answered, got %q", out[0])
	}
}

func TestChaosInitFail(t *testing.T) {
	if _, _, err := model.OpenBuiltin("chaos:init-fail"); err == nil || !strings.Contains(err.Error(), "init failed") {
		t.Fatalf("got %v", err)
	}
}
