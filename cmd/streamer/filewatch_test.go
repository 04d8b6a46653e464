package main

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A file's change is read once it has held for a look: a file still being
// written, or a certificate whose key is not written yet, is not read; a
// file read by a SIGHUP is not read again.
func TestAChangedFileIsReadOnceItHolds(t *testing.T) {
	dir := t.TempDir()
	cert, key := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	write := func(path, text string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(cert, "cert 1")
	write(key, "key 1")
	pair := fileGroup{files: watchFiles(cert, key)}
	look := func(want bool, what string) {
		t.Helper()
		if got := pair.changed(); got != want {
			t.Fatalf("%s: changed %v, want %v", what, got, want)
		}
	}
	look(false, "nothing written")

	write(cert, "cert 2, longer")
	look(false, "the certificate just written")
	write(key, "key 2, longer")
	look(false, "the key written since the look before")
	look(true, "both held for a look")
	look(false, "nothing written since they were read")

	// Renamed into place, at the same size: another file.
	write(cert+".new", "cert 3, longer")
	if err := os.Rename(cert+".new", cert); err != nil {
		t.Fatal(err)
	}
	look(false, "a certificate renamed into place")
	look(true, "the renamed certificate held")

	// Given another owner or mode (here the same mode again), with its
	// content, size and modification time as they were: what a chown that
	// lets the server read it does.
	before, began := stampOf(key), time.Now()
	for stampOf(key) == before {
		if err := os.Chmod(key, 0o600); err != nil {
			t.Fatal(err)
		}
		if time.Since(began) > 5*time.Second {
			t.Fatal("a chmod left the key's stamp as it was")
		}
	}
	look(false, "the key's owner just changed")
	look(true, "the key's new owner held")

	// Gone: read again (and refused then), once, not at every look.
	if err := os.Remove(key); err != nil {
		t.Fatal(err)
	}
	look(false, "the key just removed")
	look(true, "the key gone for a look")
	look(false, "the key still gone")

	// A SIGHUP reads them: no look reads them again.
	write(key, "key 4")
	pair.readNow()
	look(false, "read by a SIGHUP")
	look(false, "read by a SIGHUP, a look later")

	if none := (fileGroup{}); none.changed() {
		t.Error("no files changed")
	}
}

// A read that failed is tried again at each look, though the files did
// not change (a chown, a file descriptor freed, may mend it and leave
// their stamps as they are), and logged once for each cause: a warning,
// then an error once it has lasted watchFailureGrace.
func TestAFailedReadIsTriedAgainAndLoggedOnce(t *testing.T) {
	path := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(path, []byte("token"), 0o600); err != nil {
		t.Fatal(err)
	}
	var logs strings.Builder
	log := slog.New(slog.NewTextHandler(&logs, nil))
	g := fileGroup{files: watchFiles(path)}
	lines := func() int { return strings.Count(logs.String(), "\n") }
	start := time.Now()
	denied := errors.New("permission denied")

	g.read(denied, start, log, "not reloaded", true)
	if !strings.Contains(logs.String(), `level=WARN msg="not reloaded (the files are read again every 2s until they load)" err="permission denied"`) {
		t.Errorf("the first failure: %q; want a warning", logs.String())
	}
	if !g.changed() {
		t.Fatal("a look after a failed read, the files unchanged: want them read again")
	}
	g.read(denied, start.Add(fileWatchInterval), log, "not reloaded", true)
	if lines() != 1 {
		t.Errorf("the same failure again: %q; want no new line", logs.String())
	}
	g.changed()
	g.read(denied, start.Add(watchFailureGrace), log, "not reloaded", true)
	if lines() != 2 || !strings.Contains(logs.String(), `level=ERROR msg="not reloaded for 1m0s`) {
		t.Errorf("the same failure for a minute: %q; want an error", logs.String())
	}
	g.changed()
	g.read(denied, start.Add(2*watchFailureGrace), log, "not reloaded", true)
	if lines() != 2 {
		t.Errorf("the same failure after its error: %q; want no new line", logs.String())
	}
	g.changed()
	g.read(errors.New("too many open files"), start.Add(2*watchFailureGrace), log, "not reloaded", true)
	if lines() != 3 {
		t.Errorf("another cause: %q; want a warning of it", logs.String())
	}
	g.changed()
	g.read(nil, start.Add(2*watchFailureGrace), log, "not reloaded", true)
	if g.changed() {
		t.Error("a look after a read that went well: want nothing read")
	}

	// A SIGHUP's failure is logged by its caller, as an error: the looks
	// that read the files again do not say it again.
	g.readNow()
	g.read(denied, start, log, "not reloaded", false)
	for i := 1; i <= 40; i++ {
		if !g.changed() {
			t.Fatal("a look after a SIGHUP's failed read: want the files read again")
		}
		g.read(denied, start.Add(time.Duration(i)*fileWatchInterval), log, "not reloaded", true)
	}
	if lines() != 3 {
		t.Errorf("the looks after a SIGHUP's failure: %q; want no new line", logs.String())
	}

	// Nor after a SIGHUP that failed for the cause a look warned of.
	g.read(nil, start, log, "not reloaded", true)
	g.changed()
	g.read(denied, start, log, "not reloaded", true) // a look's warning
	g.readNow()
	g.read(denied, start.Add(fileWatchInterval), log, "not reloaded", false) // a SIGHUP's error
	for i := 2; i <= 40; i++ {
		g.changed()
		g.read(denied, start.Add(time.Duration(i)*fileWatchInterval), log, "not reloaded", true)
	}
	if lines() != 4 {
		t.Errorf("the looks after a SIGHUP failed as a look did: %q; want the look's warning alone", logs.String())
	}
}
