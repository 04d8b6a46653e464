package repeats

import (
	"fmt"
	"testing"
	"time"
)

// TestRepeatedLinesAreHeldBackAndCounted: the first line of a kind goes
// out at once; those within Every after it are held back, and the
// next one after that says how many were; another kind is not held back
// by the first.
func TestRepeatedLinesAreHeldBackAndCounted(t *testing.T) {
	var r Lines
	at := time.Unix(1_000_000, 0)
	steps := []struct {
		kind     string
		after    time.Duration // since the start
		log      bool
		wantHeld int
	}{
		{"a", 0, true, 0},
		{"a", time.Millisecond, false, 0},
		{"b", 2 * time.Millisecond, true, 0}, // a kind of its own
		{"a", time.Second, false, 0},
		{"a", Every - time.Millisecond, false, 0},
		{"a", Every, true, 3},
		{"a", Every + time.Second, false, 0},
		{"a", 3 * Every, true, 1},
		{"a", 5 * Every, true, 0}, // none held back since
	}
	for i, s := range steps {
		log, held := r.Note(s.kind, at.Add(s.after))
		if log != s.log || held != s.wantHeld {
			t.Errorf("step %d, %q after %s: log %v, held %d; want %v, %d", i, s.kind, s.after, log, held, s.log, s.wantHeld)
		}
	}
}

// TestLinesForgetsKindsPastItsBound: kinds are remembered up to
// Kinds; past that, those not logged of late are forgotten, so a
// process that meets many kinds does not grow without bound.
func TestLinesForgetsKindsPastItsBound(t *testing.T) {
	var r Lines
	at := time.Unix(1_000_000, 0)
	for i := range 3 * Kinds {
		if log, _ := r.Note(fmt.Sprint(i), at.Add(time.Duration(i)*Every)); !log {
			t.Fatalf("kind %d, new, was held back", i)
		}
		if len(r.seen) > Kinds {
			t.Fatalf("%d kinds remembered; want at most %d", len(r.seen), Kinds)
		}
	}
}
