// Package builtin holds the models built into streamer: echo, sleep (a
// stand-in with a known cost, for benchmarks) and chaos (misbehaviour on
// purpose, for tests). Each is its own settings type.
package builtin

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/streamer-dev/streamer/model"
)

// The runner names of the built-ins, as a model.Spec carries them.
const (
	RunnerEcho  = "echo"
	RunnerSleep = "sleep"
	RunnerChaos = "chaos"
)

// Handles reports whether runner names a built-in.
func Handles(runner string) bool {
	return runner == RunnerEcho || runner == RunnerSleep || runner == RunnerChaos
}

// Parse reads a built-in model's name and arguments, as streamer serve's
// model flag takes them, into its Spec, without initialising anything. It
// reports false when name is not a built-in, so the caller can try other
// runners. The built-ins are:
//
//	echo                 each output is its input
//	sleep:FIXED,PER_ITEM a batch of n items takes FIXED + n×PER_ITEM; outputs echo inputs
//	chaos:OPTS           echo that misbehaves on purpose, for tests (see ParseChaos)
func Parse(name string) (model.Spec, bool, error) {
	kind, args, _ := strings.Cut(name, ":")
	switch kind {
	case "", RunnerEcho:
		if args != "" {
			return model.Spec{}, true, fmt.Errorf("model %q: echo takes no arguments", name)
		}
		return EchoSpec(), true, nil
	case RunnerSleep:
		m, err := ParseSleep(args)
		if err != nil {
			return model.Spec{}, true, fmt.Errorf("model %q: %w", name, err)
		}
		return m.Spec(), true, nil
	case RunnerChaos:
		m, err := ParseChaos(args)
		if err != nil {
			return model.Spec{}, true, fmt.Errorf("model %q: %w", name, err)
		}
		return m.Spec(), true, nil
	}
	return model.Spec{}, false, nil
}

// Open initialises the built-in model spec names.
func Open(spec model.Spec) (model.Model, error) {
	m, err := decode(spec)
	if err != nil {
		return nil, err
	}
	if c, ok := m.(*Chaos); ok {
		if err := c.init(); err != nil {
			return nil, fmt.Errorf("model %s: %w", spec, err)
		}
	}
	return m, nil
}

// Check reads spec's settings as Open does, without initialising the model.
func Check(spec model.Spec) error {
	_, err := decode(spec)
	return err
}

func decode(spec model.Spec) (model.Model, error) {
	switch spec.Runner {
	case RunnerEcho:
		if err := spec.Decode(&struct{}{}); err != nil {
			return nil, err
		}
		return Echo{}, nil
	case RunnerSleep:
		var m Sleep
		if err := spec.Decode(&m); err != nil {
			return nil, err
		}
		if m.Fixed < 0 || m.PerItem < 0 {
			return nil, fmt.Errorf("%w for sleep: costs must not be negative", model.ErrBadSettings)
		}
		return NewSleep(m.Fixed, m.PerItem), nil
	case RunnerChaos:
		c := &Chaos{}
		if err := spec.Decode(c); err != nil {
			return nil, err
		}
		return c, nil
	}
	return nil, fmt.Errorf("%w: %q is not a built-in runner", model.ErrUnknownModel, spec.Runner)
}

// EchoSpec is the Spec of the echo model.
func EchoSpec() model.Spec { return model.Spec{Runner: RunnerEcho} }

// specOf encodes settings that cannot fail to encode (durations, strings
// and booleans) as the Spec of runner.
func specOf(runner string, settings any) model.Spec {
	spec, err := model.NewSpec(runner, settings)
	if err != nil {
		panic(fmt.Sprintf("builtin: encode %s settings: %v", runner, err))
	}
	return spec
}

// Echo answers each item with the item itself.
type Echo struct{}

// Predict returns the items as outputs.
func (Echo) Predict(_ context.Context, items [][]byte) ([][]byte, error) {
	return items, nil
}

// Close does nothing.
func (Echo) Close() error { return nil }

// Describe names the model.
func (Echo) Describe() string { return "echo" }

// Sleep stands in for a GPU model with a known cost: a batch of n items takes
// Fixed + n×PerItem, and each output is its input.
type Sleep struct {
	Fixed   time.Duration `json:"fixed"`
	PerItem time.Duration `json:"per_item"`
	// wakeEarly is how long before the end of a batch Predict asks the
	// kernel to wake it, in nanoseconds: a running mean of how late the
	// kernel has woken it. Nil in a Sleep not made by NewSleep.
	wakeEarly *atomic.Int64
}

// ParseSleep reads "FIXED,PER_ITEM", e.g. "10ms,100us".
func ParseSleep(args string) (Sleep, error) {
	fixed, perItem, ok := strings.Cut(args, ",")
	if !ok {
		return Sleep{}, errors.New("sleep wants FIXED,PER_ITEM, e.g. sleep:10ms,100us")
	}
	f, err := sleepCost("fixed cost", fixed)
	if err != nil {
		return Sleep{}, err
	}
	p, err := sleepCost("per-item cost", perItem)
	if err != nil {
		return Sleep{}, err
	}
	return NewSleep(f, p), nil
}

// sleepCost reads one of the sleep model's costs, what, from text.
func sleepCost(what, text string) (time.Duration, error) {
	d, err := time.ParseDuration(text)
	switch {
	case err != nil:
		return 0, fmt.Errorf("sleep: %s %q is not a duration", what, text)
	case d < 0:
		return 0, fmt.Errorf("sleep: %s %q is negative", what, text)
	}
	return d, nil
}

// NewSleep is the sleep model with those costs.
func NewSleep(fixed, perItem time.Duration) Sleep {
	return Sleep{Fixed: fixed, PerItem: perItem, wakeEarly: new(atomic.Int64)}
}

// Spec is the Spec that opens this model in a worker.
func (s Sleep) Spec() model.Spec {
	return specOf(RunnerSleep, Sleep{Fixed: s.Fixed, PerItem: s.PerItem})
}

// Cost is how long a batch of n items takes.
func (s Sleep) Cost(n int) time.Duration { return s.Fixed + time.Duration(n)*s.PerItem }

// maxWakeEarly bounds the time Predict spends spinning per batch.
const maxWakeEarly = 2 * time.Millisecond

// Predict takes Cost(len(items)) and echoes the items.
//
// It blocks its thread in the kernel, as a call into a GPU runtime would,
// and then spins to the exact end. The kernel wakes a sleeper late (by
// 0.2–0.4 ms on a busy virtual machine, over 2% of a 16 ms batch), and a
// model that overran its cost by that much would put the limit it is
// measured against out of reach of any batcher. So it asks to be woken that
// much early, by the running mean of how late it was woken before, and
// spins the rest: a batch costs its time plus, at most, a spin of
// maxWakeEarly in CPU.
func (s Sleep) Predict(ctx context.Context, items [][]byte) ([][]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	cost := s.Cost(len(items))
	start := time.Now()
	end := start.Add(cost)
	var early time.Duration
	if s.wakeEarly != nil {
		early = time.Duration(s.wakeEarly.Load())
	}
	// Never more than half the cost early: the sleep must stay long enough
	// to keep measuring, or a mean pushed up by one very late wake-up would
	// leave the model spinning through every batch.
	if nap := cost - min(early, cost/2); nap > 0 {
		if err := nanosleep(nap); err != nil {
			return nil, err
		}
		if s.wakeEarly != nil {
			// How late the kernel woke us, folded into the mean at 1/8.
			late := time.Since(start) - nap
			early += (late - early) / 8
			s.wakeEarly.Store(int64(min(max(early, 0), maxWakeEarly)))
		}
	}
	for time.Now().Before(end) {
	}
	return items, nil
}

// Close does nothing.
func (Sleep) Close() error { return nil }

// Describe names the model and its cost.
func (s Sleep) Describe() string { return fmt.Sprintf("sleep:%s,%s", s.Fixed, s.PerItem) }

// Chaos echoes its items but misbehaves on purpose when it sees a trigger
// item (a msgpack string equal to the trigger), so that tests can crash, hang
// or upset a real worker process through the real binary.
type Chaos struct {
	Crash     string        `json:"crash,omitempty"`      // exit the process with status 3
	Panic     string        `json:"panic,omitempty"`      // panic
	Hang      string        `json:"hang,omitempty"`       // never return
	Reject    string        `json:"reject,omitempty"`     // fail that item alone
	InitExit  bool          `json:"init_exit,omitempty"`  // exit with status 4 while initialising
	InitFail  bool          `json:"init_fail,omitempty"`  // report an initialisation error
	InitDelay time.Duration `json:"init_delay,omitempty"` // take this long to initialise
	Delay     time.Duration `json:"delay,omitempty"`      // take this long for every batch
	Stdout    bool          `json:"stdout,omitempty"`     // print noise on stdout for every batch
	// CrashEvery exits the process with status 3 on every CrashEvery-th
	// batch it runs, whatever the items: a model that crashes at random,
	// which no item explains.
	CrashEvery int `json:"crash_every,omitempty"`

	triggers map[string]string // encoded trigger → action
	batches  *atomic.Int64     // run by this process; set by init
}

// ParseChaos reads comma-separated options: crash=S, panic=S, hang=S,
// reject=S, init-exit, init-fail, init-delay=D, delay=D, stdout,
// crash-every=N.
func ParseChaos(args string) (*Chaos, error) {
	c := &Chaos{}
	for opt := range strings.SplitSeq(args, ",") {
		if opt == "" {
			continue
		}
		key, val, _ := strings.Cut(opt, "=")
		var err error
		switch key {
		case "crash":
			c.Crash = val
		case "panic":
			c.Panic = val
		case "hang":
			c.Hang = val
		case "reject":
			c.Reject = val
		case "init-exit":
			c.InitExit = true
		case "init-fail":
			c.InitFail = true
		case "init-delay":
			c.InitDelay, err = time.ParseDuration(val)
		case "delay":
			c.Delay, err = time.ParseDuration(val)
		case "stdout":
			c.Stdout = true
		case "crash-every":
			c.CrashEvery, err = strconv.Atoi(val)
			if err == nil && c.CrashEvery < 1 {
				err = fmt.Errorf("%q is not a count of batches", val)
			}
		default:
			return nil, fmt.Errorf("chaos: unknown option %q", key)
		}
		if err != nil {
			return nil, fmt.Errorf("chaos: option %s: %w", key, err)
		}
	}
	return c, nil
}

// Spec is the Spec that opens this model in a worker.
func (c *Chaos) Spec() model.Spec {
	settings := *c
	settings.triggers, settings.batches = nil, nil
	return specOf(RunnerChaos, &settings)
}

func (c *Chaos) init() error {
	time.Sleep(c.InitDelay)
	if c.InitExit {
		fmt.Fprintln(os.Stderr, "chaos: exiting during init as asked")
		os.Exit(4)
	}
	if c.InitFail {
		return errors.New("chaos: init failed as asked")
	}
	c.triggers = map[string]string{}
	c.batches = new(atomic.Int64)
	for action, trigger := range map[string]string{"crash": c.Crash, "panic": c.Panic, "hang": c.Hang, "reject": c.Reject} {
		if trigger == "" {
			continue
		}
		b, err := msgpack.Marshal(trigger)
		if err != nil {
			return err
		}
		c.triggers[string(b)] = action
	}
	return nil
}

// Predict echoes the items unless one of them is a trigger.
func (c *Chaos) Predict(ctx context.Context, items [][]byte) ([][]byte, error) {
	if c.Stdout {
		fmt.Printf("chaos: a batch of %d items\n", len(items))
	}
	if c.Delay > 0 {
		time.Sleep(c.Delay)
	}
	if c.CrashEvery > 0 && c.batches != nil && c.batches.Add(1)%int64(c.CrashEvery) == 0 {
		n := c.batches.Load()
		fmt.Fprintf(os.Stderr, "chaos: crashing on batch %d, as on every %d-th\n", n, c.CrashEvery)
		os.Exit(3)
	}
	var errs []error
	for i, it := range items {
		switch c.triggers[string(it)] {
		case "crash":
			fmt.Fprintln(os.Stderr, "chaos: crashing on a trigger item")
			os.Exit(3)
		case "panic":
			panic("chaos: panic on a trigger item")
		case "hang":
			for {
				time.Sleep(time.Hour)
			}
		case "reject":
			if errs == nil {
				errs = make([]error, len(items))
			}
			errs[i] = fmt.Errorf("chaos: item %q rejected", c.Reject)
		}
	}
	if errs != nil {
		return items, &model.ItemErrors{Errs: errs}
	}
	return items, nil
}

// Close does nothing.
func (c *Chaos) Close() error { return nil }

// Describe names the model.
func (c *Chaos) Describe() string { return "chaos" }
