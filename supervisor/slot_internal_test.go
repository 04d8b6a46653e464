package supervisor

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/streamer-dev/streamer/model"
)

func TestPipeErrors(t *testing.T) {
	if err := pipeError(""); err != nil {
		t.Errorf(`pipeError("") = %v, want nil`, err)
	}
	if err := pipeError("model failed to load"); err == nil || err.Error() != "model failed to load" {
		t.Errorf("pipeError kept %v, want the text", err)
	}
	if errs := pipeErrors(nil); errs != nil {
		t.Errorf("pipeErrors(nil) = %v, want nil: no item errors at all", errs)
	}
	errs := pipeErrors([]string{"", "bad shape"})
	if len(errs) != 2 || errs[0] != nil || errs[1] == nil || errs[1].Error() != "bad shape" {
		t.Errorf("pipeErrors = %v, want [nil, bad shape]", errs)
	}
}

// An item whose caller's context ran out of time is dropped as expired,
// even when the clock read before the drop was short of its deadline: its
// caller got a deadline error, not a cancellation (before, it was counted
// canceled, and its HTTP caller got 499 rather than 504).
func TestAnItemWhoseContextRanOutIsExpired(t *testing.T) {
	s, err := New(Config{InProcess: model.Func(func(_ context.Context, items [][]byte) ([][]byte, error) { return items, nil })})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(-time.Millisecond)
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	f := newFuture(1)
	f.ctx, f.deadline = ctx, deadline
	s.drop(item{fut: f}, deadline.Add(-time.Millisecond))
	if _, err := f.Result(context.Background()); !errors.Is(err, ErrDeadline) {
		t.Errorf("the item was answered %v; want ErrDeadline", err)
	}
	if st := s.Stats(); st.Expired != 1 || st.Canceled != 0 || st.Failed != 1 || st.Answered != 1 {
		t.Errorf("counted answered %d, failed %d, expired %d, canceled %d; want 1, 1, 1, 0", st.Answered, st.Failed, st.Expired, st.Canceled)
	}
}
