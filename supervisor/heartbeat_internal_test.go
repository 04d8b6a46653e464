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
