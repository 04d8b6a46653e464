package broker

import (
	"context"
	"errors"
	"fmt"
	"testing"
)

// TestAdmissionFailuresAreToldByTheirCause: an admission that Redis
// answered with an error is a refusal of the client's authentication
// (the protocol error of a long command on a connection not
// authenticated is one), a refused permission, an outage, or else a
// failure that the front end logs and is not ready for (see failing).
func TestAdmissionFailuresAreToldByTheirCause(t *testing.T) {
	for _, tc := range []struct {
		err                error
		auth, perm, failed bool
	}{
		{busyError("WRONGTYPE Operation against a key holding the wrong kind of value script: f45c, on @user_script:30."), false, false, true},
		{busyError("MISCONF Redis is configured to save RDB snapshots, but it's currently unable to persist to disk."), false, false, true},
		{busyError("NOAUTH Authentication required."), true, false, false},
		{busyError("WRONGPASS invalid username-password pair or user is disabled."), true, false, false},
		{busyError("ERR Protocol error: unauthenticated multibulk length"), true, false, false},
		{busyError("NOPERM this user has no permissions to run the 'evalsha' command"), false, true, false},
		{busyError("READONLY You can't write against a read only replica."), false, false, false},
		{busyError("UNBLOCKED force unblock from blocking operation, instance state changed (master -> replica?)"), false, false, false},
		{busyError("LOADING Redis is loading the dataset in memory"), false, false, false},
		{busyError("OOM command not allowed when used memory > 'maxmemory'."), false, false, false},
		{busyError("NOSCRIPT No matching script."), false, false, false},
		{busyError("EPOCH redis lost its data since the front end last checked it"), false, false, false},
		{context.DeadlineExceeded, false, false, false},
		{errors.New("NOAUTH, but not from Redis"), false, false, false},
	} {
		wrapped := fmt.Errorf("redis at here: %w", tc.err)
		if authError(wrapped) != tc.auth || permissionRefused(wrapped) != tc.perm || failing(wrapped) != tc.failed {
			t.Errorf("%v: authentication %v, permission %v, failing %v; want %v, %v, %v",
				tc.err, authError(wrapped), permissionRefused(wrapped), failing(wrapped), tc.auth, tc.perm, tc.failed)
		}
	}
}
