package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/streamer-dev/streamer/internal/filestamp"
)

// fileWatchInterval is how often serve looks whether the files of its
// certificate and token changed on disk.
const fileWatchInterval = 2 * time.Second

// fileStamp tells one version of a file from the next without reading
// it (see filestamp.Of), whether it was written in place, renamed into
// place, swapped behind a link (as Kubernetes updates a mounted Secret),
// or given another owner; or it is why Stat failed.
type fileStamp string

func stampOf(path string) fileStamp {
	info, err := os.Stat(path)
	if err != nil {
		return fileStamp("\x00" + err.Error())
	}
	if stamp, ok := filestamp.Of(info); ok {
		return fileStamp(stamp)
	}
	// No change time here: the size, time and mode are the best there is.
	return fileStamp(fmt.Sprintf("%d:%d:%v", info.Size(), info.ModTime().UnixNano(), info.Mode()))
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

// unread is the stamp of files whose last read failed: none that Stat
// gives, so that the next look reads them again.
const unread fileStamp = "\x01unread"

// fileGroup is files read together (a certificate and its key), and how
// their last read went.
type fileGroup struct {
	files  []*watchedFile
	failed string    // why the last read failed; "": it did not
	since  time.Time // since when it has failed so
	loud   bool      // the failure was logged as an error
}

// readNow stamps the files as read now, by a SIGHUP: call it before they
// are read. A change after the stamp is read again at the next looks.
func (g *fileGroup) readNow() {
	for _, f := range g.files {
		f.loaded = stampOf(f.path)
		f.seen = f.loaded
	}
}

// changed looks at the files and says whether they are to be read again:
// one of them differs from what was read last, and none changed since the
// look before, so that a file still being written, or a certificate whose
// key follows within a look, is not read. It then takes them as read.
func (g *fileGroup) changed() bool {
	held, differ := true, false
	for _, f := range g.files {
		now := stampOf(f.path)
		held = held && now == f.seen
		differ = differ || now != f.loaded
		f.seen = now
	}
	if !held || !differ {
		return false
	}
	for _, f := range g.files {
		f.loaded = f.seen
	}
	return true
}

// watchFailureGrace is how long the reads of changed files may fail, each
// look, before the log says so as an error: a key written a few seconds
// after its certificate fails one read, and is no incident.
const watchFailureGrace = time.Minute

// read records how a read of the files that began at now went. One that
// failed is tried again at each look, as what mends it may leave their
// stamps as they are (a chown, a file descriptor freed), and is logged
// once for each cause: when a look found it, as a warning, and as an
// error once it has lasted watchFailureGrace; when a SIGHUP did (byLook
// false), as an error at once, by the caller.
func (g *fileGroup) read(err error, now time.Time, log *slog.Logger, what string, byLook bool) {
	if err == nil {
		g.failed, g.loud = "", false
		return
	}
	for _, f := range g.files {
		f.loaded = unread
	}
	switch {
	case err.Error() != g.failed:
		g.failed, g.since, g.loud = err.Error(), now, !byLook
		if byLook {
			log.Warn(what+readAgain, "err", err)
		}
	case !byLook:
		g.loud = true // its caller said it as an error
	case !g.loud && now.Sub(g.since) >= watchFailureGrace:
		g.loud = true
		log.Error(what+fmt.Sprintf(" for %s", now.Sub(g.since).Round(time.Second))+readAgain, "err", err)
	}
}

// readAgain ends what the log says of files that failed to load.
var readAgain = fmt.Sprintf(" (the files are read again every %s until they load)", fileWatchInterval)

// watch reads the certificate's and the token's files again once they
// change on disk, looking every fileWatchInterval until ctx ends: a
// certificate renewed every few weeks, or hours, is served without a
// SIGHUP, which would reload the workers and their model too.
func (s *security) watch(ctx context.Context) {
	if len(s.pair.files) == 0 && len(s.tokenFiles.files) == 0 {
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
			s.look(time.Now())
		}
	}()
}

// look reads again the files that changed and have held since the look
// before, and those whose last read failed.
func (s *security) look(now time.Time) {
	s.filesMu.Lock()
	defer s.filesMu.Unlock()
	if s.pair.changed() {
		if s.pair.failed == "" {
			s.log.Info("TLS certificate files changed on disk: reading them again", "cert", s.pair.files[0].path, "key", s.pair.files[1].path)
		}
		s.pair.read(s.cert.swap(), now, s.log, certNotReloaded, true)
	}
	if s.tokenFiles.changed() {
		if s.tokenFiles.failed == "" {
			s.log.Info("API token file changed on disk: reading it again", "file", s.tokenFile)
		}
		s.tokenFiles.read(s.swapToken(), now, s.log, tokenNotReloaded, true)
	}
}
