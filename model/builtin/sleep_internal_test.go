package builtin

import (
	"context"
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
	for range 40 {
		if _, err := m.Predict(context.Background(), [][]byte{{1}}); err != nil {
			t.Fatal(err)
		}
	}
	// Below the cap, not below some figure: how late the kernel wakes a
	// sleeper is the machine's (1.7 ms on the mean, once, on a loaded
	// one); a model that stopped measuring stays at the cap exactly.
	if early := time.Duration(m.wakeEarly.Load()); early >= maxWakeEarly {
		t.Fatalf("after 40 batches the model still wakes %v early, its cap, for a 1ms cost; it should have learnt the kernel's real lateness", early)
	}
}
