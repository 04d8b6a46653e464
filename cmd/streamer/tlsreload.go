package main

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// certificate is the server's TLS certificate, read from its files at
// start, and again when they change and on SIGHUP (see security.watch,
// hangups). Connections already open keep the certificate they were made
// with; new ones get the latest that loaded.
type certificate struct {
	certFile, keyFile string
	log               *slog.Logger
	current           atomic.Pointer[tls.Certificate]

	mu      sync.Mutex
	pending *time.Timer // swaps in a certificate loaded before its dates; nil: none
}

// newCertificate loads the pair of files, failing with an error that names
// the file at fault.
func newCertificate(certFile, keyFile string, log *slog.Logger) (*certificate, error) {
	c := &certificate{certFile: certFile, keyFile: keyFile, log: log}
	cert, err := c.load()
	if err != nil {
		return nil, err
	}
	c.current.Store(cert)
	return c, nil
}

// load reads and parses both files. tls.LoadX509KeyPair would do it, but
// its parse errors do not say which file they are about.
func (c *certificate) load() (*tls.Certificate, error) {
	certPEM, err := readSmallFile("--tls-cert", c.certFile)
	if err != nil {
		return nil, err
	}
	keyPEM, err := readSmallFile("--tls-key", c.keyFile)
	if err != nil {
		return nil, err
	}
	if err := wholePEM(certPEM); err != nil {
		return nil, fmt.Errorf("--tls-cert %s: %w", c.certFile, err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("--tls-cert %s, --tls-key %s: %w", c.certFile, c.keyFile, err)
	}
	return &cert, nil
}

// wholePEM checks that data holds no PEM block cut short or malformed
// after its last whole one. tls.X509KeyPair stops at the first block it
// cannot read: a chain file still being written when a SIGHUP came would
// load as its leaf alone, which clients that need the intermediate
// refuse, while the log said the certificate was reloaded.
func wholePEM(data []byte) error {
	rest := data
	for {
		block, next := pem.Decode(rest)
		if block == nil {
			break
		}
		rest = next
	}
	if bytes.Contains(rest, []byte("-----BEGIN")) {
		return errors.New("a PEM block in it is cut short or malformed (a file still being written? write it whole, then rename it into place)")
	}
	return nil
}

// certNotReloaded is what the log says of a pair that failed to load.
const certNotReloaded = "TLS certificate not reloaded; still serving the previous one"

// swap swaps in the certificate the files hold now, and returns why they
// failed to load, if they did: the one served so far stays then, and
// so does one waiting for its dates. So it does, and the log says why,
// when the one served is in its dates and the new one is not, which no
// client that checks them would accept: an expired one is refused, and
// one not valid yet (issued by a machine whose clock is ahead) is
// swapped in once it is. Out of date both, the new one is served, as at
// the start.
func (c *certificate) swap() error {
	cert, err := c.load()
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pending != nil {
		c.pending.Stop() // the files hold another one now
		c.pending = nil
	}
	now := time.Now()
	served := c.current.Load().Leaf
	if dates := outOfDate(cert.Leaf, now); dates != nil && outOfDate(served, now) == nil {
		if now.After(cert.Leaf.NotAfter) {
			c.log.Error("TLS certificate not reloaded: "+dates.Error()+"; still serving the previous one", append([]any{"cert", c.certFile}, describeLeaf(served)...)...)
			return nil
		}
		c.log.Warn("TLS certificate loaded, not served yet: "+dates.Error()+"; serving the previous one until then", append([]any{"cert", c.certFile}, describeLeaf(cert.Leaf)...)...)
		var timer *time.Timer
		timer = time.AfterFunc(cert.Leaf.NotBefore.Sub(now), func() {
			c.mu.Lock()
			defer c.mu.Unlock()
			if c.pending != timer {
				return // a later reload came first
			}
			c.pending = nil
			c.current.Store(cert)
			c.log.Info("TLS certificate reloaded: it is valid from now", append([]any{"cert", c.certFile}, describeLeaf(cert.Leaf)...)...)
		})
		c.pending = timer
		return nil
	}
	c.current.Store(cert)
	c.log.Info("TLS certificate reloaded", append([]any{"cert", c.certFile}, describeLeaf(cert.Leaf)...)...)
	c.warnOutOfDate(cert.Leaf)
	return nil
}

// warnOutOfDate says in the log when the certificate is served out of its
// dates, which every client that checks them refuses: served all the same,
// as the operator may be about to replace it, but not without a word.
func (c *certificate) warnOutOfDate(leaf *x509.Certificate) {
	if err := outOfDate(leaf, time.Now()); err != nil {
		c.log.Warn("TLS certificate out of date: clients that check it refuse it", "cert", c.certFile, "err", err)
	}
}

// outOfDate says why leaf is not valid at now, or nil.
func outOfDate(leaf *x509.Certificate, now time.Time) error {
	switch {
	case leaf == nil:
		return nil
	case now.After(leaf.NotAfter):
		return fmt.Errorf("it expired %s ago, at %s", now.Sub(leaf.NotAfter).Round(time.Second), leaf.NotAfter.UTC().Format(time.RFC3339))
	case now.Before(leaf.NotBefore):
		return fmt.Errorf("it is valid from %s, in %s", leaf.NotBefore.UTC().Format(time.RFC3339), leaf.NotBefore.Sub(now).Round(time.Second))
	}
	return nil
}

// describeLeaf gives the log attributes that tell one certificate from the
// next: its serial number and expiry.
func describeLeaf(leaf *x509.Certificate) []any {
	if leaf == nil { // parsed lazily under GODEBUG=x509keypairleaf=0
		return nil
	}
	return []any{"serial", leaf.SerialNumber.String(), "not_after", leaf.NotAfter}
}

// listen serves TLS on l with the current certificate: the one a
// connection's handshake finds, so that a reload (see security.watch, hangups)
// takes effect for the connections made after it.
func (c *certificate) listen(l net.Listener) net.Listener {
	c.log.Info("serving HTTPS", append([]any{"cert", c.certFile}, describeLeaf(c.current.Load().Leaf)...)...)
	c.warnOutOfDate(c.current.Load().Leaf)
	return httpsListener{tls.NewListener(l, c.config())}
}

// httpsListener hands out TLS connections that tell a client speaking
// plain HTTP to them so. net/http does that only on a connection it sees
// as a *tls.Conn, which the connection cap's wrapper hides from it.
type httpsListener struct{ net.Listener }

func (l httpsListener) Accept() (net.Conn, error) {
	conn, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &httpsConn{Conn: conn.(*tls.Conn)}, nil
}

// httpsConn is a TLS connection whose handshake, on finding a plain HTTP
// request where a TLS record should be, answers 400 in plain HTTP and
// closes the connection.
type httpsConn struct{ *tls.Conn }

// plainHTTPAnswer is the answer to a plain HTTP request on the TLS port.
const plainHTTPAnswer = "HTTP/1.0 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n" +
	"this port serves HTTPS: send the request to https://\n"

func (c *httpsConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	var header tls.RecordHeaderError
	if err != nil && errors.As(err, &header) && header.Conn != nil && looksLikeHTTP(header.RecordHeader[:]) {
		_ = header.Conn.SetWriteDeadline(time.Now().Add(time.Second))
		_, _ = io.WriteString(header.Conn, plainHTTPAnswer)
		_ = header.Conn.Close()
	}
	return n, err
}

// looksLikeHTTP reports whether the first five bytes of a connection are
// those of a plain HTTP request's method.
func looksLikeHTTP(start []byte) bool {
	for _, method := range []string{"GET /", "HEAD ", "POST ", "PUT /", "DELET", "OPTIO", "PATCH"} {
		if string(start) == method {
			return true
		}
	}
	return false
}

// config is the TLS configuration of a server of the current certificate:
// the one a connection's handshake finds.
func (c *certificate) config() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return c.current.Load(), nil
		},
	}
}
