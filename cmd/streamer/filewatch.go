package main

import (
	"context"
	"os"
	"time"
)

// fileWatchInterval is how often serve looks whether the files of its
// certificate and token changed on disk.
const fileWatchInterval = 2 * time.Second

// fileStamp is what os.Stat says of a file: enough to tell one version of
// it from the next, whether it was written in place, renamed into place,
// or swapped behind a link (as Kubernetes updates a mounted Secret).
type fileStamp struct {
	info os.FileInfo // nil: Stat failed
	err  string      // why Stat failed
}

func stampOf(path string) fileStamp {
	info, err := os.Stat(path)
	if err != nil {
		return fileStamp{err: err.Error()}
	}
	return fileStamp{info: info}
}

func (a fileStamp) same(b fileStamp) bool {
	if a.info == nil || b.info == nil {
		return a.info == nil && b.info == nil && a.err == b.err
	}
	return os.SameFile(a.info, b.info) && a.info.ModTime().Equal(b.info.ModTime()) &&
		a.info.Size() == b.info.Size() && a.info.Mode() == b.info.Mode()
}

// watchedFile is one file of the certificate's or the token's: as it was
// when last read, and as the last look found it.
type watchedFile struct {
	path         string
	loaded, seen fileStamp
}

// watchFiles stamps the files at paths as read now: call it before they
// are read.
func watchFiles(paths ...string) []*watchedFile {
	files := make([]*watchedFile, len(paths))
	for i, path := range paths {
		now := stampOf(path)
		files[i] = &watchedFile{path: path, loaded: now, seen: now}
	}
	return files
}

// readNow stamps files as read now, by a SIGHUP: call it before they are
// read. A change after the stamp is read again at the next looks.
func readNow(files []*watchedFile) {
	for _, f := range files {
		f.loaded = stampOf(f.path)
		f.seen = f.loaded
	}
}

// changed looks at files and says whether they are to be read again: one
// of them differs from what was read last, and none changed since the
// look before, so that a file still being written, or a certificate whose
// key is not written yet, is not read. It then takes them as read.
func changed(files []*watchedFile) bool {
	held, differ := true, false
	for _, f := range files {
		now := stampOf(f.path)
		held = held && now.same(f.seen)
		differ = differ || !now.same(f.loaded)
		f.seen = now
	}
	if !held || !differ {
		return false
	}
	for _, f := range files {
		f.loaded = f.seen
	}
	return true
}

// watch reads the certificate's and the token's files again once they
// change on disk, looking every fileWatchInterval until ctx ends: a
// certificate renewed every few weeks, or hours, is served without a
// SIGHUP, which would reload the workers and their model too.
func (s *security) watch(ctx context.Context) {
	if len(s.pair) == 0 && len(s.tokenFiles) == 0 {
		return
	}
	go func() {
		t := time.NewTicker(fileWatchInterval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			s.look()
		}
	}()
}

// look reads again the files that changed and have held since the look
// before.
func (s *security) look() {
	s.filesMu.Lock()
	defer s.filesMu.Unlock()
	if changed(s.pair) {
		s.log.Info("TLS certificate files changed on disk: reading them again", "cert", s.pair[0].path, "key", s.pair[1].path)
		s.cert.reload()
	}
	if changed(s.tokenFiles) {
		s.log.Info("API token file changed on disk: reading it again", "file", s.tokenFile)
		s.reloadToken()
	}
}
