package broker

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestRepeatedLinesAreHeldBackAndCounted: the first line of a kind goes
// out at once; those within repeatEvery after it are held back, and the
// next one after that says how many were; another kind is not held back
// by the first.
func TestRepeatedLinesAreHeldBackAndCounted(t *testing.T) {
	var r repeats
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
		{"a", repeatEvery - time.Millisecond, false, 0},
		{"a", repeatEvery, true, 3},
		{"a", repeatEvery + time.Second, false, 0},
		{"a", 3 * repeatEvery, true, 1},
		{"a", 5 * repeatEvery, true, 0}, // none held back since
	}
	for i, s := range steps {
		log, held := r.note(s.kind, at.Add(s.after))
		if log != s.log || held != s.wantHeld {
			t.Errorf("step %d, %q after %s: log %v, held %d; want %v, %d", i, s.kind, s.after, log, held, s.log, s.wantHeld)
		}
	}
}

// TestRepeatsForgetsKindsPastItsBound: kinds are remembered up to
// repeatKinds; past that, those not logged of late are forgotten, so a
// process that meets many kinds does not grow without bound.
func TestRepeatsForgetsKindsPastItsBound(t *testing.T) {
	var r repeats
	at := time.Unix(1_000_000, 0)
	for i := range 3 * repeatKinds {
		if log, _ := r.note(fmt.Sprint(i), at.Add(time.Duration(i)*repeatEvery)); !log {
			t.Fatalf("kind %d, new, was held back", i)
		}
		if len(r.seen) > repeatKinds {
			t.Fatalf("%d kinds remembered; want at most %d", len(r.seen), repeatKinds)
		}
	}
}

// TestRepeatKindsLeaveNumbersOut: "write 12 answers" and "write 3
// answers" failing alike are one kind; another error Redis answered is
// another.
func TestRepeatKindsLeaveNumbersOut(t *testing.T) {
	wrongType := redis.Error(busyError("WRONGTYPE Operation against a key holding the wrong kind of value"))
	other := redis.Error(busyError("ERR something else"))
	if repeatKind("write 12 answers", wrongType) != repeatKind("write 3 answers", wrongType) {
		t.Error("two writes of answers refused alike are two kinds")
	}
	if repeatKind("read items", wrongType) == repeatKind("read items", other) {
		t.Error("a read refused for two reasons is one kind")
	}
	if repeatKind("read items", errors.New("x")) == repeatKind("claim items", errors.New("x")) {
		t.Error("two things failing are one kind")
	}
}
