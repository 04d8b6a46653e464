package supervisor

import (
	"testing"
	"time"
)

// The room kept for a refused request lapses RoomHold after the last
// refusal that asked for it, when its caller did not come back; a larger
// request refused takes it over, a smaller one does not.
func TestRoomKeptLapses(t *testing.T) {
	var r room
	now := int64(0)
	clock := func() int64 { return now }
	r.refused(3, now)
	if r.fits(3, 1, 6, clock) {
		t.Fatal("1 item fits beside 3 waiting with room for 3 kept, limit 6")
	}
	if !r.fits(3, 1, 7, clock) {
		t.Fatal("1 item does not fit beside 3 waiting with room for 3 kept, limit 7")
	}
	r.refused(2, now)
	if r.kept() != 3 {
		t.Fatalf("room for %d after a smaller refusal, want 3", r.kept())
	}
	now += int64(time.Second)
	r.refused(4, now)
	if r.kept() != 4 {
		t.Fatalf("room for %d after a larger refusal, want 4", r.kept())
	}
	now += int64(RoomHold)
	if r.fits(3, 1, 6, clock) != false || r.kept() != 4 {
		t.Fatalf("the room lapsed at its hold, not past it: kept %d", r.kept())
	}
	now++
	if !r.fits(3, 1, 6, clock) || r.kept() != 0 {
		t.Fatalf("the room did not lapse RoomHold after its last refusal: kept %d", r.kept())
	}
	r.refused(3, now)
	r.admitted(2)
	if r.kept() != 3 {
		t.Fatal("a smaller request admitted took the room")
	}
	r.admitted(5)
	if r.kept() != 0 {
		t.Fatal("a request as large admitted left the room kept")
	}
	if r.fits(5, 2, 6, clock) {
		t.Fatal("2 items fit beside 5 waiting, limit 6")
	}
}
