package main

import (
	"os"
	"path/filepath"
	"testing"
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
	pair := watchFiles(cert, key)
	look := func(want bool, what string) {
		t.Helper()
		if got := changed(pair); got != want {
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

	// Gone: read again (and refused then), once, not at every look.
	if err := os.Remove(key); err != nil {
		t.Fatal(err)
	}
	look(false, "the key just removed")
	look(true, "the key gone for a look")
	look(false, "the key still gone")

	// A SIGHUP reads them: no look reads them again.
	write(key, "key 4")
	readNow(pair)
	look(false, "read by a SIGHUP")
	look(false, "read by a SIGHUP, a look later")

	if changed(nil) {
		t.Error("no files changed")
	}
}
