package broker

import (
	"testing"
	"time"
)

// A mix of versions, its end, or a front end of a version no node runs, is
// said once it has held for versionsHold, and a change that turns back
// sooner is not said at all: a Redis restarted without its data has the
// nodes' entries come back a beat apart, which read as a mix ended and
// begun again.
func TestASteadyConditionIsSaidOnceItHolds(t *testing.T) {
	var s steady
	at := time.Unix(1000, 0)
	for _, step := range []struct {
		after time.Duration
		v     bool
		said  bool
	}{
		{0, false, false},                        // as it was: nothing to say
		{time.Second, true, false},               // a mix begins
		{2 * time.Second, true, false},           // held a second
		{time.Second + versionsHold, true, true}, // held for versionsHold: said
		{versionsHold + 2*time.Second, true, false},
		{versionsHold + 3*time.Second, false, false}, // the entries come back a beat apart
		{versionsHold + 4*time.Second, true, false},  // and the mix is back: nothing said
		{3 * versionsHold, true, false},
		{3*versionsHold + time.Second, false, false}, // it ends
		{4*versionsHold + time.Second, false, true},  // and has held: said
	} {
		if got := s.note(step.v, at.Add(step.after)); got != step.said {
			t.Fatalf("at +%s, %v: said %v; want %v", step.after, step.v, got, step.said)
		}
	}
}
