package builtin_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/streamer-dev/streamer/model"
	"github.com/streamer-dev/streamer/model/builtin"
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
		{"chaos:crash-every=2", true, ""},
		{"chaos:crash-every=0", true, `option crash-every: "0" is not a count of batches`},
		{"chaos:crash-every=x", true, "option crash-every"},
		{"model.onnx", false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, ok, err := builtin.Parse(tt.name)
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

// open parses name as the serve command would and opens it as a worker would.
func open(name string) (model.Model, error) {
	spec, ok, err := builtin.Parse(name)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, errors.New(name + " is not a built-in")
	}
	return builtin.Open(spec)
}

// A spec travels as JSON to the worker: what the worker opens must be what
// was parsed, and a setting the runner does not know fails it by name.
func TestSpecsSurviveTheTripAndRefuseUnknownSettings(t *testing.T) {
	spec, _, err := builtin.Parse("chaos:reject=nope,delay=3ms,stdout")
	if err != nil {
		t.Fatal(err)
	}
	var back model.Spec
	raw, _ := json.Marshal(spec)
	if err := json.Unmarshal(raw, &back); err != nil {
		t.Fatal(err)
	}
	m, err := builtin.Open(back)
	if err != nil {
		t.Fatal(err)
	}
	c := m.(*builtin.Chaos)
	if c.Reject != "nope" || c.Delay != 3*time.Millisecond || !c.Stdout || c.Crash != "" {
		t.Fatalf("opened %+v from %s", c, raw)
	}
	sleep, _, _ := builtin.Parse("sleep:10ms,100us")
	if s, err := builtin.Open(sleep); err != nil || s.(builtin.Sleep).Cost(10) != 11*time.Millisecond {
		t.Fatalf("sleep from %s: %v, %v", sleep, s, err)
	}
	for _, bad := range []model.Spec{
		{Runner: "sleep", Settings: json.RawMessage(`{"fixed":1,"perItem":2}`)},
		{Runner: "echo", Settings: json.RawMessage(`{"loud":true}`)},
		{Runner: "chaos", Settings: json.RawMessage(`{"crash":`)},
		{Runner: "sleep", Settings: json.RawMessage(`{"fixed":-1}`)},
	} {
		if _, err := builtin.Open(bad); !errors.Is(err, model.ErrBadSettings) {
			t.Errorf("%s: got %v, want ErrBadSettings", bad, err)
		}
	}
	if _, err := builtin.Open(model.Spec{Runner: "onnx"}); !errors.Is(err, model.ErrUnknownModel) {
		t.Errorf("onnx is no built-in: got %v", err)
	}
}

func TestSleepCostsWhatItSays(t *testing.T) {
	m, err := open("sleep:2ms,1ms")
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
	m, err := open("chaos:reject=nope")
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
	if _, err := open("chaos:init-fail"); err == nil || !strings.Contains(err.Error(), "init failed") {
		t.Fatalf("got %v", err)
	}
}
