package supervisor

import (
	"testing"
	"time"

	"github.com/streamer-dev/streamer/model"
)

// TestHeartbeatSilenceIsMonotonic: a worker's silence is measured on the
// streamer's monotonic clock, never from wall-clock stamps, so a step of the
// system clock cannot make every worker look dead at once. The stamp is a
// reading of that clock: a fresh one is silent for next to nothing, one a
// minute older for a minute.
func TestHeartbeatSilenceIsMonotonic(t *testing.T) {
	s, err := New(Config{Process: ProcessConfig{Model: model.Spec{Runner: "echo"}}})
	if err != nil {
		t.Fatal(err)
	}
	p := &process{sl: s.slots[0]}
	p.heard()
	if silent := p.silence(); silent < 0 || silent > time.Second {
		t.Fatalf("silence right after a message: %s", silent)
	}
	if stamp, now := p.lastHeard.Load(), s.clock(); stamp > now || now-stamp > int64(time.Second) {
		t.Fatalf("the stamp %d is not a reading of the streamer's clock (now %d)", stamp, now)
	}
	p.lastHeard.Add(-int64(time.Minute))
	if silent := p.silence(); silent < time.Minute || silent > time.Minute+time.Second {
		t.Fatalf("silence of a stamp a minute old: %s", silent)
	}
}

// A look at the clock more than stallMin after the one before counts the
// gap, less a tick, as a stall of the supervisor; looks a tick apart, or
// out of order, count nothing.
func TestStallsAreGapsBetweenLooksAtTheClock(t *testing.T) {
	var c stallClock
	at := func(d time.Duration) time.Duration { return c.stalled(int64(d)) }
	for i := 1; i <= 20; i++ {
		if got := at(time.Duration(i) * stallTick); got != 0 {
			t.Fatalf("looks a tick apart counted a stall of %s", got)
		}
	}
	const last = 20 * stallTick
	if got := at(last + 12*time.Second); got != 12*time.Second-stallTick {
		t.Errorf("a look 12s after the one before counted %s; want 12s less a tick", got)
	}
	if got := at(last + time.Second); got != 12*time.Second-stallTick {
		t.Errorf("a look out of order changed the stalls to %s", got)
	}
}

// A worker silent through a stall of its supervisor is silent for the
// time since the stall's end: what it said meanwhile may not be read yet.
func TestAWorkersSilenceThroughAStallCountsFromItsEnd(t *testing.T) {
	w := heardWatch{}
	const s = int64(time.Second)
	if got := w.silence(20*s, 0, 0); got != 20*time.Second {
		t.Fatalf("silence with no stall: %s; want 20s", got)
	}
	if got := w.silence(32*s, 19*s, 12*time.Second); got != 0 {
		t.Errorf("silence right after a 12s stall: %s; want none", got)
	}
	if got := w.silence(35*s, 19*s, 12*time.Second); got != 3*time.Second {
		t.Errorf("silence 3s after the stall: %s; want 3s", got)
	}
	if got := w.silence(35*s, 34*s, 12*time.Second); got != time.Second {
		t.Errorf("silence of a worker heard since: %s; want 1s", got)
	}
}
