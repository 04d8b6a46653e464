package main

import (
	"crypto/x509"
	"strings"
	"testing"
	"time"
)

// A certificate served out of its dates is said so, with when it expired
// or when it begins.
func TestOutOfDate(t *testing.T) {
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	leaf := &x509.Certificate{NotBefore: now.Add(-24 * time.Hour), NotAfter: now.Add(24 * time.Hour)}
	if err := outOfDate(leaf, now); err != nil {
		t.Errorf("a certificate within its dates: %v", err)
	}
	for _, c := range []struct {
		at   time.Time
		want string
	}{
		{now.Add(25 * time.Hour), "it expired 1h0m0s ago, at 2026-12-08T12:00:00Z"},
		{now.Add(-25 * time.Hour), "it is valid from 2026-12-06T12:00:00Z, in 1h0m0s"},
	} {
		if err := outOfDate(leaf, c.at); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("at %s: %v, want %q", c.at, err, c.want)
		}
	}
	if err := outOfDate(nil, now); err != nil {
		t.Errorf("no leaf parsed: %v, want nil", err)
	}
}
