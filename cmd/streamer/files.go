package main

import (
	"fmt"
	"io"
	"os"
	"syscall"

	"github.com/streamer-dev/streamer/internal/filekind"
)

// maxSmallFile bounds the files the flags name for a few kilobytes of
// text (certificates, keys, a CA, a token): a bundle of hundreds of CA
// certificates is under a megabyte.
const maxSmallFile = 4 << 20

// readSmallFile reads the file that flag names, which must be a regular
// file of at most maxSmallFile bytes. Read whole, a path swapped for
// /dev/zero grew the server's memory without bound on a certificate's
// reload, and a named pipe with no writer held the reload for ever; it is
// opened without waiting for a writer, and refused.
func readSmallFile(flag, path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", flag, err)
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", flag, err)
	}
	if mode := info.Mode(); !mode.IsRegular() {
		return nil, fmt.Errorf("%s %s: %s, not a regular file", flag, path, filekind.Of(mode))
	}
	data, err := io.ReadAll(io.LimitReader(f, maxSmallFile+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", flag, err)
	}
	if len(data) > maxSmallFile {
		return nil, fmt.Errorf("%s %s: more than %d MiB, far more than such a file holds", flag, path, maxSmallFile>>20)
	}
	return data, nil
}
