package plugin

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/streamer-dev/streamer/model/plugin/pluginpb"
)

// batchStream is one Predict stream and the goroutine that reads it. Each
// answer goes to the batch waiting for it and to no other: an answer that
// arrives while no batch waits is reported through unasked, never kept for
// the next batch, whose callers would get another batch's results.
type batchStream struct {
	stream  pluginpb.Model_PredictClient
	cancel  context.CancelFunc // ends the stream, and with it its reader
	answers chan answer        // the waiting batch's answer, or why there is none
	unasked func(error)        // called once, by the reader, on an unasked-for answer

	mu      sync.Mutex
	waiting uint64 // the id of the batch waiting for an answer; 0 when none
	ended   bool   // the reader has stopped: the next batch needs a new stream
}

// answer is what the reader got for the batch that waited.
type answer struct {
	resp *pluginpb.PredictResponse
	err  error
}

func newBatchStream(stream pluginpb.Model_PredictClient, cancel context.CancelFunc, unasked func(error)) *batchStream {
	s := &batchStream{stream: stream, cancel: cancel, answers: make(chan answer, 1), unasked: unasked}
	go s.read()
	return s
}

// read receives until the stream ends, handing each answer to the batch
// that waits for it.
func (s *batchStream) read() {
	for {
		resp, err := s.stream.Recv()
		s.mu.Lock()
		id := s.waiting
		s.waiting = 0
		if err != nil || id == 0 {
			s.ended = true
		}
		s.mu.Unlock()
		switch {
		case id != 0:
			s.answers <- answer{resp, err}
		case err == nil:
			// Said before the stream is ended, so that a batch the end
			// cuts short is taken for the plugin's crash (see callError).
			s.unasked(fmt.Errorf("%w: it sent an answer (id %d) while no batch was waiting for one", ErrProtocol, resp.GetId()))
			s.cancel()
			return
		}
		if err != nil {
			return
		}
	}
}

// expect says that batch id is about to be sent and waits for its answer.
// It reports false when the stream has ended and a new one is needed.
func (s *batchStream) expect(id uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		return false
	}
	s.waiting = id
	return true
}

// abandon ends the stream, whatever it still carries.
func (s *batchStream) abandon() {
	s.cancel()
}

// retiredLinger bounds how long a retired stream is read after its last
// batch's answer: a plugin ends it when it sees the end of the batches,
// and one that does not has it ended for it.
const retiredLinger = 30 * time.Second

// retire sends no more batches on the stream, whose batch has been
// answered, and tells the plugin so; its reader goes on until the plugin
// ends the stream (or retiredLinger has passed), and an answer it still
// gets, which no batch waits for, is the plugin's breach as on a stream
// in use. A plugin that does not echo ids has each batch on a stream of
// its own: on a shared one, an answer it sent twice, late, would be taken
// for the next batch's.
func (s *batchStream) retire() {
	_ = s.stream.CloseSend()
	time.AfterFunc(retiredLinger, s.cancel)
}
