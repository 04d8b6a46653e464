package httpapi

import (
	"bytes"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/streamer-dev/streamer/supervisor"
)

// This file reads compressed request bodies: Content-Encoding gzip, and
// deflate, as tritonclient sends them (request_compression_algorithm) and
// as Triton takes them, on /predict and the v2 inference route. The body
// limit bounds the body both as sent and decompressed.

// contentCoding is how a request body is compressed.
type contentCoding uint8

const (
	identity contentCoding = iota // not compressed
	gzipCoding
	deflateCoding // zlib-wrapped (RFC 1950) as HTTP has it, or raw (RFC 1951)
)

func (c contentCoding) String() string {
	switch c {
	case gzipCoding:
		return "gzip"
	case deflateCoding:
		return "deflate"
	}
	return "identity"
}

// acceptedCodings is the Accept-Encoding header of the 415 answer to a
// content coding the server does not read (RFC 7694), which tells it from
// a 415 for the content type.
const acceptedCodings = "gzip, deflate"

// codingOf reads the request's Content-Encoding: none, or identity, is a
// body as it is; gzip (or x-gzip) and deflate are read; anything else, or
// a body compressed twice, is refused with 415.
func codingOf(header http.Header) (contentCoding, error) {
	values, ok := header["Content-Encoding"]
	if !ok {
		return identity, nil
	}
	coding := identity
	for _, v := range values {
		for rest := v; rest != ""; {
			var token string
			token, rest, _ = strings.Cut(rest, ",")
			token = strings.TrimSpace(token)
			var c contentCoding
			switch {
			case token == "", strings.EqualFold(token, "identity"):
				continue
			case strings.EqualFold(token, "gzip"), strings.EqualFold(token, "x-gzip"):
				c = gzipCoding
			case strings.EqualFold(token, "deflate"):
				c = deflateCoding
			default:
				return 0, unsupportedCoding(values, "is not supported")
			}
			if coding != identity {
				return 0, unsupportedCoding(values, "compresses the body twice, which is not supported")
			}
			coding = c
		}
	}
	return coding, nil
}

func unsupportedCoding(values []string, problem string) error {
	return &requestError{
		status:         http.StatusUnsupportedMediaType,
		msg:            "Content-Encoding " + strconv.Quote(strings.Join(values, ", ")) + " " + problem + "; send the body compressed once with gzip or deflate, or uncompressed",
		acceptEncoding: true,
	}
}

// inflater decompresses request bodies. It is pooled with its
// decompressors, whose windows and tables are most of what decompressing
// a small body costs.
type inflater struct {
	src   bytes.Reader
	gzip  gzip.Reader
	zlib  io.ReadCloser // made for the first zlib body, reset for the next
	flate io.ReadCloser // made for the first raw deflate body, reset for the next
}

// reader resets a decompressor of coding over src and returns it.
func (inf *inflater) reader(coding contentCoding, src []byte) (io.Reader, error) {
	inf.src.Reset(src)
	switch {
	case coding == gzipCoding:
		return &inf.gzip, inf.gzip.Reset(&inf.src)
	case !zlibHeader(src):
		if inf.flate == nil {
			inf.flate = flate.NewReader(&inf.src)
			return inf.flate, nil
		}
		return inf.flate, inf.flate.(flate.Resetter).Reset(&inf.src, nil)
	case inf.zlib == nil:
		var err error
		inf.zlib, err = zlib.NewReader(&inf.src)
		return inf.zlib, err
	}
	return inf.zlib, inf.zlib.(zlib.Resetter).Reset(&inf.src, nil)
}

// zlibHeader reports whether data starts with a zlib header (RFC 1950):
// the method deflate, a window of at most 32 KiB, and a check that makes
// the first two bytes a multiple of 31. Raw deflate data never starts so
// as encoders write it: its first byte would open a stored block (the
// method's 8 in the low bits makes BTYPE 00) with a bit of the padding
// after the block header set, where encoders write zeros.
func zlibHeader(data []byte) bool {
	return len(data) >= 2 && data[0]&0x0f == 8 && data[0]>>4 <= 7 && (uint16(data[0])<<8|uint16(data[1]))%31 == 0
}

// decompress writes src, a body compressed with coding, into dst, refusing
// one that decompresses to more than maxBody bytes: the limit holds for
// what the body holds, not for how well it compresses.
func (h *handler) decompress(coding contentCoding, src []byte, dst *bytes.Buffer) error {
	inf := h.inflaters.Get().(*inflater)
	defer func() {
		inf.src.Reset(nil) // the pool keeps no body alive
		h.inflaters.Put(inf)
	}()
	r, err := inf.reader(coding, src)
	if err != nil {
		return corruptBody(coding, err)
	}
	n, err := dst.ReadFrom(io.LimitReader(r, h.maxBody+1))
	switch {
	case err != nil:
		return corruptBody(coding, err)
	case n > h.maxBody:
		return &requestError{
			status: http.StatusRequestEntityTooLarge,
			msg: "request body is larger than the limit of " + strconv.FormatInt(h.maxBody, 10) +
				" bytes once decompressed (Content-Encoding " + coding.String() + "): the limit applies to the body after decompression",
		}
	case inf.src.Len() > 0:
		return corruptBody(coding, errors.New(strconv.Itoa(inf.src.Len())+" bytes follow the end of the compressed data"))
	}
	return nil
}

// corruptBody refuses a body that is not what its Content-Encoding says.
func corruptBody(coding contentCoding, err error) error {
	if err == io.EOF {
		err = io.ErrUnexpectedEOF // no compressed data at all
	}
	return badRequest("the body is not valid " + coding.String() + " data, as its Content-Encoding says it is: " + err.Error())
}

// inflatedBudget bounds the bytes of compressed bodies, once decompressed,
// that the requests in progress hold: at least 1 GiB, and 16 times the
// body limit. A client sends a few kilobytes of gzip that decompress to
// --max-body, megabytes the server holds until the model answers, in the
// body and in the items made of it: without a bound, a few hundred such
// requests fill the server's memory for the price of a web page. A body
// sent uncompressed costs its client its bytes, and the queue's bound
// holds them.
func inflatedBudget(maxBody int64) int64 {
	if maxBody > math.MaxInt64/16 {
		return math.MaxInt64
	}
	return max(1<<30, 16*maxBody)
}

// budget counts bytes held against a bound.
type budget struct {
	held  atomic.Int64
	bound int64
}

// take counts n bytes more, unless that would pass the bound: it reports
// whether it did.
func (b *budget) take(n int64) bool {
	if b.held.Add(n) > b.bound {
		b.held.Add(-n)
		return false
	}
	return true
}

// give counts n bytes taken as held no longer.
func (b *budget) give(n int64) { b.held.Add(-n) }

// inflatedFull refuses a compressed body whose bytes, decompressed, would
// pass the inflated budget: 429, as for a full queue, which it is a
// bound of too.
func inflatedFull(bound int64) error {
	return fmt.Errorf("%w: the requests in progress hold %d MiB of decompressed bodies, the most the server holds; send this one again later, or uncompressed", supervisor.ErrOverloaded, bound>>20)
}
