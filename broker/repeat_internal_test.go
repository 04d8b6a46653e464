package broker

import (
	"errors"
	"testing"

	"github.com/redis/go-redis/v9"
)

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
