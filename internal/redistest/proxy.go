package redistest

import (
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Proxy forwards TCP connections from a loopback port of its own to a
// server, and can make the connections it holds go silent, as a firewall
// or a NAT that forgets a connection does: nothing passes either way, and
// neither end hears a reset or a close. Connections made after that pass
// again.
type Proxy struct {
	ln     net.Listener
	target string
	rate   atomic.Int64 // see Throttle
	refuse atomic.Bool  // see Refuse

	mu     sync.Mutex
	links  []*link // the connections forwarded now
	silent []*link // those Cut silenced, closed by the cleanup
	closed bool    // by the cleanup
}

// link is one forwarded connection: what the client dialled and the
// proxy's own connection to the server.
type link struct {
	client, server net.Conn
	silent         chan struct{} // closed by Cut
	closing        atomic.Bool   // set by CloseOnNextCommand
}

// StartProxy listens on a free loopback port and forwards every connection
// to s. The test's cleanup closes the port and every connection.
func StartProxy(t testing.TB, s *Server) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("redistest: proxy: %v", err)
	}
	p := &Proxy{ln: ln, target: s.Addr()}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		p.accept(&wg)
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		p.mu.Lock()
		p.closed = true
		for _, l := range append(p.links, p.silent...) {
			l.close()
		}
		p.links, p.silent = nil, nil
		p.mu.Unlock()
		wg.Wait()
	})
	return p
}

// Addr returns the proxy's address, "127.0.0.1:PORT".
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// URL returns redis://ADDR/0 for the proxy's address.
func (p *Proxy) URL() string { return "redis://" + p.Addr() + "/0" }

// Cut silences every connection forwarded now and returns how many it
// silenced: what either end sends from then on is read and dropped, and
// neither end learns that the connection is gone. They are closed only
// when the test ends.
func (p *Proxy) Cut() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, l := range p.links {
		close(l.silent)
	}
	n := len(p.links)
	p.silent = append(p.silent, p.links...)
	p.links = nil
	return n
}

// CloseOnNextCommand makes each connection forwarded now close as soon as
// its client sends anything, which is not forwarded: a command sent on one
// gets no answer but the close, as when Redis or a proxy resets a
// connection under a command. It returns how many connections it marked;
// connections made later pass as usual.
func (p *Proxy) CloseOnNextCommand() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, l := range p.links {
		l.closing.Store(true)
	}
	return len(p.links)
}

// Refuse, while on, closes each new connection as soon as it is made,
// forwarding nothing, as a server that is down does; with Cut, it cuts a
// client off from the server altogether. Off, connections pass again.
func (p *Proxy) Refuse(on bool) { p.refuse.Store(on) }

// Throttle bounds what each connection carries, each way, to
// bytesPerSecond, as a slow link would; 0 lifts the bound.
func (p *Proxy) Throttle(bytesPerSecond int64) { p.rate.Store(bytesPerSecond) }

// String names the proxy and where it forwards, for a test's messages.
func (p *Proxy) String() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return "proxy " + p.Addr() + " to " + p.target + " (" + strconv.Itoa(len(p.links)) + " connections, " + strconv.Itoa(len(p.silent)) + " cut)"
}

func (p *Proxy) accept(wg *sync.WaitGroup) {
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return // closed by the cleanup
		}
		if p.refuse.Load() {
			_ = client.Close()
			continue
		}
		server, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = client.Close()
			continue
		}
		l := &link{client: client, server: server, silent: make(chan struct{})}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			l.close()
			return
		}
		p.links = append(p.links, l)
		p.mu.Unlock()
		wg.Add(2)
		go func() {
			defer wg.Done()
			p.pipe(l, l.server, l.client)
		}()
		go func() {
			defer wg.Done()
			p.pipe(l, l.client, l.server)
		}()
	}
}

// pipe copies from src to dst until either fails, then closes the link;
// once the link is silenced it drops what it reads, and closes nothing: the
// cleanup does.
func (p *Proxy) pipe(l *link, dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && src == l.client && l.closing.Load() {
			p.drop(l) // the command goes unforwarded, and unanswered
			return
		}
		select {
		case <-l.silent:
			if err != nil {
				return
			}
			continue
		default:
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				err = werr
			}
			if rate := p.rate.Load(); rate > 0 {
				time.Sleep(time.Duration(int64(n) * int64(time.Second) / rate)) // the link's pace
			}
		}
		if err != nil {
			p.drop(l)
			return
		}
	}
}

// drop closes a link that ended by itself, and forgets it unless Cut
// silenced it meanwhile; the other direction's read then fails in turn.
func (p *Proxy) drop(l *link) {
	p.mu.Lock()
	for i, other := range p.links {
		if other == l {
			p.links = append(p.links[:i], p.links[i+1:]...)
			break
		}
	}
	p.mu.Unlock()
	l.close()
}

func (l *link) close() {
	_ = l.client.Close()
	_ = l.server.Close()
}
