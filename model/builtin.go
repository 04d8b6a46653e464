package model

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/vmihailenco/msgpack/v5"
)

// OpenBuiltin opens the built-in model that name selects. It reports false
// when name is not a built-in, so the caller can try other runners.
//
// The built-ins are:
//
//	echo                 each output is its input
//	sleep:FIXED,PER_ITEM a batch of n items takes FIXED + n×PER_ITEM; outputs echo inputs
//	chaos:OPTS           echo that misbehaves on purpose, for tests (see ParseChaos)
func OpenBuiltin(name string) (Model, bool, error) {
	m, ok, err := ParseBuiltin(name)
	if !ok || err != nil {
		return m, ok, err
	}
	if c, isChaos := m.(*Chaos); isChaos {
		if err := c.init(); err != nil {
			return nil, true, fmt.Errorf("model %q: %w", name, err)
		}
	}
	return m, true, nil
}

// ParseBuiltin reads a built-in model's name and arguments without
// initialising it, so a supervisor can check a --model value before it
// starts any worker. It reports false when name is not a built-in.
func ParseBuiltin(name string) (Model, bool, error) {
	kind, args, _ := strings.Cut(name, ":")
	switch kind {
	case "", "echo":
		if args != "" {
			return nil, true, fmt.Errorf("model %q: echo takes no arguments", name)
		}
		return Echo{}, true, nil
	case "sleep":
		m, err := ParseSleep(args)
		if err != nil {
			return nil, true, fmt.Errorf("model %q: %w", name, err)
		}
		return m, true, nil
	case "chaos":
		m, err := ParseChaos(args)
		if err != nil {
			return nil, true, fmt.Errorf("model %q: %w", name, err)
		}
		return m, true, nil
	}
	return nil, false, nil
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
	Fixed   time.Duration
	PerItem time.Duration
	// wakeEarly is how long before the end of a batch Predict asks the
	// kernel to wake it, in nanoseconds: a running mean of how late the
	// kernel has woken it. Nil in a Sleep not made by ParseSleep.
	wakeEarly *atomic.Int64
}

// ParseSleep reads "FIXED,PER_ITEM", e.g. "10ms,100us".
func ParseSleep(args string) (Sleep, error) {
	fixed, perItem, ok := strings.Cut(args, ",")
	if !ok {
		return Sleep{}, errors.New("sleep wants FIXED,PER_ITEM, e.g. sleep:10ms,100us")
	}
	f, err := time.ParseDuration(fixed)
	if err != nil || f < 0 {
		return Sleep{}, fmt.Errorf("sleep: fixed cost %q is not a duration", fixed)
	}
	p, err := time.ParseDuration(perItem)
	if err != nil || p < 0 {
		return Sleep{}, fmt.Errorf("sleep: per-item cost %q is not a duration", perItem)
	}
	return Sleep{Fixed: f, PerItem: p, wakeEarly: new(atomic.Int64)}, nil
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
	Crash     string        // exit the process with status 3
	Panic     string        // panic
	Hang      string        // never return
	Reject    string        // fail that item alone
	InitExit  bool          // exit with status 4 while initialising
	InitFail  bool          // report an initialisation error
	InitDelay time.Duration // take this long to initialise
	Delay     time.Duration // take this long for every batch
	Stdout    bool          // print noise on stdout for every batch

	triggers map[string]string // encoded trigger → action
}

// ParseChaos reads comma-separated options: crash=S, panic=S, hang=S,
// reject=S, init-exit, init-fail, init-delay=D, delay=D, stdout.
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
		default:
			return nil, fmt.Errorf("chaos: unknown option %q", key)
		}
		if err != nil {
			return nil, fmt.Errorf("chaos: option %s: %w", key, err)
		}
	}
	return c, nil
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
		return items, &ItemErrors{Errs: errs}
	}
	return items, nil
}

// Close does nothing.
func (c *Chaos) Close() error { return nil }

// Describe names the model.
func (c *Chaos) Describe() string { return "chaos" }
