package builtin

import (
	"context"
	"strings"
	"testing"
	"time"
)

// A mean pushed to its cap by very late wake-ups must come down again: the
// model keeps sleeping part of each batch, so it keeps measuring, rather
// than spinning through whole batches from then on.
func TestSleepRecoversFromAVeryLateWakeUp(t *testing.T) {
	m, err := ParseSleep("1ms,0s")
	if err != nil {
		t.Fatal(err)
	}
	m.wakeEarly.Store(int64(maxWakeEarly))
	// Below the cap, not below some figure: how late the kernel wakes a
	// sleeper is the machine's (1.7 ms on the mean, once, on a loaded
	// one, and at the cap for 40 batches in a row, once, beside the race
	// detector's tests). A model that stopped measuring stays at the cap
	// exactly, however long it runs: up to 2 000 batches are given for
	// the mean to come down.
	const batches = 2000
	for i := range batches {
		if _, err := m.Predict(context.Background(), [][]byte{{1}}); err != nil {
			t.Fatal(err)
		}
		if i >= 40 && time.Duration(m.wakeEarly.Load()) < maxWakeEarly {
			return
		}
	}
	t.Fatalf("after %d batches the model still wakes %v early, its cap, for a 1ms cost; it should have learnt the kernel's real lateness", batches, time.Duration(m.wakeEarly.Load()))
}

// TestParseSleepNamesWhatIsWrong: a cost that is no duration, and one that
// is negative, are each called what they are.
func TestParseSleepNamesWhatIsWrong(t *testing.T) {
	for args, want := range map[string]string{
		"abc,0s":  `sleep: fixed cost "abc" is not a duration`,
		"-1s,0s":  `sleep: fixed cost "-1s" is negative`,
		"1ms,-1s": `sleep: per-item cost "-1s" is negative`,
		"10ms":    "sleep wants FIXED,PER_ITEM",
	} {
		if _, err := ParseSleep(args); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseSleep(%q): %v; want %q", args, err, want)
		}
	}
}
