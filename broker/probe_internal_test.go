package broker

import "testing"

func TestOlderThan(t *testing.T) {
	for _, tc := range []struct {
		version string
		want    bool
	}{
		{"5.0.14", true}, {"6.0.16", true}, {"6.2.0", false}, {"6.2.14", false},
		{"7.0.15", false}, {"10.1.0", false}, {"", false}, {"garbage", false}, {"x.y.z", false},
	} {
		if got := olderThan(tc.version, 6, 2); got != tc.want {
			t.Errorf("olderThan(%q, 6, 2) = %v, want %v", tc.version, got, tc.want)
		}
	}
}
