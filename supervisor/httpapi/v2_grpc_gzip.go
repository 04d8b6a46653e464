package httpapi

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"io"
	"sync"

	"google.golang.org/grpc/encoding"
)

// GRPCGzip is the gzip compressor the service's server should register
// (encoding.RegisterCompressor) in place of grpc-go's own: a call whose
// message is not valid gzip data is then the client's mistake, refused
// as a malformed message is (INVALID_ARGUMENT, and on a stream an answer
// to that request alone), where grpc-go ends the call INTERNAL, and with
// it the requests a stream had under way.
//
// It never fails to decompress: what it cannot read it ends with
// gzipTrailer, which the service's codec (see Codec) finds and refuses.
// The size limit stays grpc-go's, applied to what it reads.
func GRPCGzip() encoding.Compressor { return gzipCompressor{} }

type gzipCompressor struct{}

func (gzipCompressor) Name() string { return "gzip" }

var (
	gzipWriters sync.Pool // of *gzipWriter
	gzipReaders sync.Pool // of *gzipReader
)

// gzipWriter goes back to its pool when closed.
type gzipWriter struct{ *gzip.Writer }

func (gzipCompressor) Compress(w io.Writer) (io.WriteCloser, error) {
	z, ok := gzipWriters.Get().(*gzipWriter)
	if !ok {
		return &gzipWriter{Writer: gzip.NewWriter(w)}, nil
	}
	z.Reset(w)
	return z, nil
}

func (z *gzipWriter) Close() error {
	err := z.Writer.Close()
	gzipWriters.Put(z)
	return err
}

// gzipReader reads one message; when its data turns out not to be gzip, or
// cut short, it ends what it read with the trailer that says why.
type gzipReader struct {
	z      gzip.Reader
	broken bytes.Reader // the trailer, once the data failed
	failed bool
}

func (gzipCompressor) Decompress(r io.Reader) (io.Reader, error) {
	z, ok := gzipReaders.Get().(*gzipReader)
	if !ok {
		z = &gzipReader{}
	}
	z.failed = false
	if err := z.z.Reset(r); err != nil {
		z.fail(err)
	}
	return z, nil
}

func (z *gzipReader) fail(err error) {
	if errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF // no gzip header at all: an empty message
	}
	z.failed = true
	z.broken.Reset(appendGzipTrailer(nil, err.Error()))
}

func (z *gzipReader) Read(p []byte) (int, error) {
	if z.failed {
		return z.broken.Read(p)
	}
	n, err := z.z.Read(p)
	if err != nil && err != io.EOF {
		z.fail(err)
		err = nil
	}
	return n, err
}

// Close gives the reader back to its pool: grpc-go closes it once it has
// read the message.
func (z *gzipReader) Close() error {
	gzipReaders.Put(z)
	return nil
}

// gzipTrailerMark ends a message that was not valid gzip data, after the
// reason and its length (4 bytes, big-endian). A client that sends it in a
// message of its own is refused as if its gzip data were broken: it can
// only refuse its own call.
const gzipTrailerMark = "\x00streamer: not gzip\x00"

func appendGzipTrailer(dst []byte, why string) []byte {
	dst = append(dst, why...)
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(why)))
	return append(dst, gzipTrailerMark...)
}

// notGzip is why message was not valid gzip data, when it ends with the
// trailer of a gzipReader that failed.
func notGzip(message []byte) (string, bool) {
	rest, ok := bytes.CutSuffix(message, []byte(gzipTrailerMark))
	if !ok || len(rest) < 4 {
		return "", false
	}
	n := binary.BigEndian.Uint32(rest[len(rest)-4:])
	rest = rest[:len(rest)-4]
	if uint64(n) > uint64(len(rest)) {
		return "", false
	}
	return string(rest[len(rest)-int(n):]), true
}
