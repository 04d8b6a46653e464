package supervisor

import "testing"

// The room is kept for one request, the largest that found none: others
// fit only around it, and are refused at once, without the lock, when
// they do not and are no larger.
func TestTheRoomIsKeptForOneRequest(t *testing.T) {
	var r room
	r.queued(1)
	a, b, c := new(Future), new(Future), new(Future)
	if r.claim(1, a) {
		t.Fatal("a request of one item took the room")
	}
	if !r.claim(3, a) || r.kept() != 3 {
		t.Fatalf("no room kept: a's claim for 3 failed, or kept %d", r.kept())
	}
	if !r.fits(3, 3, 6, a) {
		t.Error("3 items of the request the room is kept for do not fit beside 3 waiting, limit 6")
	}
	if r.fits(3, 1, 6, b) || !r.refusedAtOnce(3, 1, 6) {
		t.Error("1 item of another request fits beside 3 waiting and room for 3 kept, limit 6, or is not refused at once")
	}
	if !r.fits(2, 1, 6, b) || r.refusedAtOnce(2, 1, 6) {
		t.Error("1 item of another request does not fit beside 2 waiting and room for 3 kept, limit 6")
	}
	if r.claim(3, b) || r.claim(2, b) {
		t.Error("a request no larger took the room")
	}
	if r.refusedAtOnce(6, 4, 6) {
		t.Error("a larger request is refused at once: it should take the room")
	}
	if !r.claim(4, c) || r.owner != c || r.kept() != 4 {
		t.Error("a larger request did not take the room")
	}
	r.leave(a)
	if r.kept() != 4 {
		t.Error("a request the room is no longer kept for gave it up")
	}
	r.leave(c)
	if r.kept() != 0 || r.owner != nil {
		t.Error("the room is still kept once its request left")
	}
	if r.fits(5, 2, 6, a) {
		t.Error("2 items fit beside 5 waiting, limit 6")
	}
	if r.refusedAtOnce(6, 1, 7) || !r.refusedAtOnce(7, 1, 7) {
		t.Error("a request no larger than most is not refused at once where it does not fit, or is where it does")
	}
	if r.refusedAtOnce(6, 2, 7) {
		t.Error("a request larger than most is refused at once where no room is kept: it should claim it")
	}
}

// The mean size that tells a large request comes back to the sizes of
// the requests queued, to within a small part of an item.
func TestTheMeanRequestSizeFollowsTheRequests(t *testing.T) {
	var r room
	r.queued(4)
	for range 1000 {
		r.queued(1)
	}
	if !r.large(2) || r.large(1) {
		t.Errorf("after one request of 4 items and 1000 of 1, the mean is %.3f: 2 items should be large, 1 not", float64(r.mean.Load())/1024)
	}
	for range 1000 {
		r.queued(32)
	}
	if r.large(63) || !r.large(64) {
		t.Errorf("after 1000 requests of 32 items, the mean is %.3f: 64 items should be large, 63 not", float64(r.mean.Load())/1024)
	}
}
