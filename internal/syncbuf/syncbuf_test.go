package syncbuf_test

import (
	"strings"
	"sync"
	"testing"

	"github.com/streamer-dev/streamer/internal/syncbuf"
)

// Writers and a reader at once (run with -race): every write is kept, whole.
func TestWritesFromManyGoroutinesAreKept(t *testing.T) {
	var b syncbuf.Buffer
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				if _, err := b.Write([]byte("line\n")); err != nil {
					t.Error(err)
				}
				_ = b.String()
			}
		})
	}
	wg.Wait()
	if got := strings.Count(b.String(), "line\n"); got != 800 {
		t.Errorf("%d lines kept, want 800", got)
	}
}
