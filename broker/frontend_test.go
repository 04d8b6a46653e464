package broker_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/streamer-dev/streamer/broker"
	"github.com/streamer-dev/streamer/internal/redistest"
	"github.com/streamer-dev/streamer/internal/syncbuf"
	"github.com/streamer-dev/streamer/model"
	"github.com/streamer-dev/streamer/supervisor"
)

// A full backlog refuses requests unread (Full: 429, come back later) only
// while the front end could otherwise serve them: with Redis down, or no
// node heard from, a request is refused for that (503, naming Redis or the
// want of a node), as the backlog seen last says nothing then.
func TestAFullBacklogIsNotFullWhileTheFrontEndCannotServe(t *testing.T) {
	for _, tc := range []struct {
		name   string
		heard  time.Duration // when a node was last heard from, from now
		outage func(*redistest.Server)
		want   func(*redistest.Server) string // in the error of a request during the outage
	}{
		{
			name:   "redis down",
			heard:  time.Hour, // alive for good
			outage: func(rs *redistest.Server) { rs.Kill() },
			want:   func(rs *redistest.Server) string { return "redis at " + rs.Addr() + " does not serve" },
		},
		{
			name:   "no node",
			heard:  0, // and never again
			outage: func(*redistest.Server) {},
			want:   func(*redistest.Server) string { return "no node is alive on redis" },
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rs := redistest.Start(t, redistest.Options{})
			heardFrom(t, rs, time.Now().Add(tc.heard))
			// The backlog's two items, of another front end.
			for i := range 2 {
				rs.Do(t, "XADD", "streamer:items", "*", "h", nobody+" 1 "+strconv.Itoa(i)+" 0 60000", "v", "x")
			}
			fe := startFront(t, rs, func(c *broker.FrontEndConfig) { c.MaxBacklog = 2 })
			// A request refused: the front end knows the size of those
			// it carries, no larger than most (a front end that has sent
			// none reads them, to learn it: see FrontEnd.Full).
			eventually(t, "the front end ready, having seen the backlog full", func() bool { return fe.Ready() && fe.FullSeen() != 0 })
			if fe.FullWhenSeen() {
				t.Error("Full before the front end sent any request: it would refuse every request unread, never learning their size")
			}
			if _, err := predict(t, fe, "first"); !errors.Is(err, supervisor.ErrOverloaded) {
				t.Fatalf("a request with the backlog full: %v; want ErrOverloaded", err)
			}
			eventually(t, "the front end ready, with its backlog full", func() bool { return fe.Ready() && fe.FullWhenSeen() })
			tc.outage(rs)
			eventually(t, "the front end not ready", func() bool { return !fe.Ready() })
			if fe.FullWhenSeen() {
				t.Error("Full while the front end cannot serve: requests are told to come back for room (429) rather than why they cannot be served")
			}
			if _, err := predict(t, fe, "x"); !errors.Is(err, supervisor.ErrUnavailable) || !strings.Contains(err.Error(), tc.want(rs)) {
				t.Errorf("a request: %v; want ErrUnavailable saying %q", err, tc.want(rs))
			}
		})
	}
}

// A front end on another database than its nodes' sees none alive, and
// says which database it looked in: the address alone would hide the
// mistake.
func TestAFrontEndNamesTheDatabaseItFindsNoNodeIn(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	startNode(t, rs, newRecorder(), 4, nil) // on database 0
	fe := startFront(t, rs, func(c *broker.FrontEndConfig) { c.URL = "redis://" + rs.Addr() + "/1" })
	want := "no node is alive on redis at " + rs.Addr() + "/1,"
	eventually(t, "the front end to say it finds no node", func() bool {
		err := fe.NotReady()
		return err != nil && strings.Contains(err.Error(), "no node is alive")
	})
	if err := fe.NotReady(); !strings.Contains(err.Error(), want) {
		t.Errorf("NotReady: %v; want it to say %q", err, want)
	}
	if _, err := predict(t, fe, "x"); !errors.Is(err, supervisor.ErrUnavailable) || !strings.Contains(err.Error(), want) {
		t.Errorf("a request: %v; want ErrUnavailable saying %q", err, want)
	}
}

// A front end whose user may not run the admission script (an ACL without
// the scripting commands) could admit no request: it says so from its
// first check, before any request, is not ready, logs it once, refuses
// requests naming the refusal, and takes them again once the user may;
// and says so again within seconds when the permission is taken away.
// A command refused inside the script (XADD) is found out as well.
func TestAFrontEndRedisWillNotLetAdmitIsNotReady(t *testing.T) {
	for _, tc := range []struct {
		name, less, grant, says string
	}{
		{"no scripts", "-@scripting", "+@scripting", "NOPERM"},
		{"no XADD inside the script", "-xadd", "+xadd", "can't run this command"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rs := redistest.Start(t, redistest.Options{})
			fakeGroup(t, rs)
			var logs syncbuf.Buffer
			fe, err := broker.NewFrontEnd(broker.FrontEndConfig{Config: broker.Config{
				URL: limitedUser(t, rs, "front", tc.less), Logger: slog.New(slog.NewTextHandler(&logs, nil)),
			}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = fe.Close(context.Background()) })
			refused := func(err error) bool {
				return err != nil && strings.Contains(err.Error(), "refuses this front end's admissions") && strings.Contains(err.Error(), tc.says)
			}
			// Its start says so, as a permission refused, which an
			// operator may grant: the front end runs on.
			if err := fe.Start(context.Background()); !refused(err) || !errors.Is(err, broker.ErrPermission) || !errors.Is(err, supervisor.ErrUnavailable) {
				t.Errorf("the start of a front end whose admissions Redis refuses: %v; want ErrPermission and ErrUnavailable, naming the refusal", err)
			}
			eventually(t, "the front end says Redis refuses its admissions", func() bool { return refused(fe.NotReady()) })
			if !fe.FrontEndStats().RedisUp {
				t.Error("redis is taken for down; it serves, and refuses a permission")
			}
			for range 2 {
				if _, err := predict(t, fe, "refused"); !errors.Is(err, supervisor.ErrUnavailable) || !errors.Is(err, broker.ErrPermission) || !refused(err) {
					t.Errorf("a request while admissions are refused: %v; want ErrUnavailable and ErrPermission, naming the refusal", err)
				}
			}
			if got := strings.Count(logs.String(), "redis refuses this front end's admissions"); got != 1 {
				t.Errorf("the refusal logged %d times; want once:\n%s", got, logs.String())
			}
			rs.Do(t, "ACL", "SETUSER", "front", tc.grant)
			eventually(t, "front end ready once the user may", fe.Ready)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() {
				_, err := fe.Predict(ctx, [][]byte{[]byte("admitted")})
				done <- err
			}()
			onStream(t, rs, 1, "the request admitted") // no node answers it
			cancel()
			<-done
			// Taken away from a front end that admits, it is found out
			// before any request fails.
			rs.Do(t, "ACL", "SETUSER", "front", tc.less)
			eventually(t, "the front end says Redis refuses its admissions again", func() bool { return refused(fe.NotReady()) })
		})
	}
}

// A user with the permissions the README lists (and no more: no other
// keys, no dangerous commands) runs a front end and a node: requests are
// answered, and the model check is on.
//
// So does one whose ACL names the keys of the README's table one by one
// rather than PREFIX:*: no check touches a key the table leaves out.
func TestTheREADMEsRedisUserServes(t *testing.T) {
	t.Run("the prefix", func(t *testing.T) { readmeUserServes(t, "~streamer:*") })
	t.Run("the keys of the table", func(t *testing.T) {
		readmeUserServes(t, "~streamer:items", "~streamer:items:*", "~streamer:streams", "~streamer:reply:*",
			"~streamer:nodes", "~streamer:leaving", "~streamer:poison", "~streamer:epoch", "~streamer:room",
			"~streamer:sizes", "~streamer:model", "~streamer:name:*", "~streamer:versions")
	})
}

func readmeUserServes(t *testing.T, keys ...string) {
	rs := redistest.Start(t, redistest.Options{})
	rs.Do(t, append(append([]string{"ACL", "SETUSER", "streamer", "on", ">pw"}, keys...),
		"+@stream", "+@sortedset", "+@set", "+@hash", "+@string", "+@keyspace", "+@scripting",
		"+@connection", "+@transaction", "-@dangerous", "+time", "+info")...)
	u, err := url.Parse(rs.URL())
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword("streamer", "pw")
	var logs syncbuf.Buffer
	model := broker.ModelID{Wire: "generic", Name: "recorder"}
	startNode(t, rs, newRecorder(), 4, func(c *broker.NodeConfig) {
		c.URL, c.Model = u.String(), model
		c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	})
	fe := startFront(t, rs, func(c *broker.FrontEndConfig) {
		c.URL, c.Model = u.String(), model
		c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	})
	eventually(t, "front end ready", fe.Ready)
	if out, err := predict(t, fe, "hi"); err != nil || string(out[0]) != "hi" {
		t.Fatalf("through the README's user: %q, %v", out, err)
	}
	if rs.Do(t, "EXISTS", "streamer:model") != "1" {
		t.Error("the model's key is not there: the model check is off")
	}
	for _, refused := range []string{"NOPERM", "lacks a permission", "refuses"} {
		if strings.Contains(logs.String(), refused) {
			t.Errorf("the log says %q:\n%s", refused, logs.String())
		}
	}
}

// A front end whose model has another name than the nodes' (the same
// way of writing items) serves, as only how items are written must agree,
// but says so once in its log, naming both: its clients see its name.
func TestAFrontEndOfAnotherModelNameSaysSo(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	startNode(t, rs, newRecorder(), 4, func(c *broker.NodeConfig) {
		c.Model = broker.ModelID{Wire: "generic", Name: "sleep", Label: "sleep:5ms,0s"}
	})
	var logs syncbuf.Buffer
	fe := startFront(t, rs, func(c *broker.FrontEndConfig) {
		c.Model = broker.ModelID{Wire: "generic", Name: "echo", Label: "echo"}
		c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	})
	eventually(t, "front end ready", fe.Ready)
	if out, err := predict(t, fe, "hi"); err != nil || string(out[0]) != "hi" {
		t.Fatalf("a request: %q, %v; want its answer", out, err)
	}
	eventually(t, "the front end to say the names differ", func() bool {
		return strings.Contains(logs.String(), "another name than this front end's")
	})
	line := lastLogLine(logs.String(), "another name than this front end's")
	if !strings.Contains(line, "level=WARN") || !strings.Contains(line, `sleep:5ms,0s`) || !strings.Contains(line, `echo`) || !strings.Contains(line, "--model") {
		t.Errorf("the warning %q; want both models named, and --model", line)
	}
	// Once, though every check reads the model: checks go on, as the
	// front end counts a second node.
	startNode(t, rs, newRecorder(), 4, func(c *broker.NodeConfig) {
		c.Model = broker.ModelID{Wire: "generic", Name: "sleep", Label: "sleep:5ms,0s"}
	})
	eventually(t, "the front end to count two nodes", func() bool { return fe.FrontEndStats().Nodes == 2 })
	if n := strings.Count(logs.String(), "another name than this front end's"); n != 1 {
		t.Errorf("the warning logged %d times; want once:\n%s", n, logs.String())
	}
}

// TestAnotherLayoutUnderThePrefixTakesNoPart: under a prefix whose model
// was kept by nodes of another version of streamer, one that lays out its
// entries otherwise (or one from before layouts were numbered), a node and
// a front end of this version take no part and say why, naming the
// version and how to mend it. The same model of this layout serves.
func TestAnotherLayoutUnderThePrefixTakesNoPart(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	mine := broker.ModelID{Wire: "generic", Name: "echo", Label: "echo"}
	// The model key as other nodes keep it, for a minute: its wire field
	// ends with the entries' layout, but for versions from before layouts
	// were numbered.
	keep := func(wire string) {
		rs.Do(t, "DEL", "streamer:model")
		rs.Do(t, "HSET", "streamer:model", "wire", wire, "name", "echo", "label", "echo")
		rs.Do(t, "PEXPIRE", "streamer:model", "60000")
	}
	for _, tc := range []struct {
		name, wire, want string
	}{
		{"from before layouts were numbered", "generic", `the nodes' entries are laid out by an older version of streamer, of no layout number, this `},
		{"of another layout", "generic @layout 0", `the nodes' entries are laid out by another version of streamer, as layout "0", this `},
	} {
		t.Run(tc.name, func(t *testing.T) {
			keep(tc.wire)
			_, err := startNodeFailing(t, broker.NodeConfig{
				Config:   broker.Config{URL: rs.URL(), Model: mine},
				Streamer: startStreamer(t, supervisor.Config{InProcess: echoItems, Workers: 1, BatchSize: 4}),
			})
			if !errors.Is(err, broker.ErrVersionMismatch) || !errors.Is(err, broker.ErrModelMismatch) {
				t.Fatalf("a node's start: %v; want ErrVersionMismatch, which is ErrModelMismatch too", err)
			}
			for _, want := range []string{tc.want, "must run one version of streamer: upgrade them together (the prefix keeps the model of the nodes there 30s after the last one has gone), or run the new version under another key prefix (--stream-prefix"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("a node's start: %v; want it to say %q", err, want)
				}
			}
			if strings.Contains(err.Error(), "model is named") || strings.Contains(err.Error(), "write items as") {
				t.Errorf("a node's start: %v; want the layout alone named as differing", err)
			}
			fe, err := broker.NewFrontEnd(broker.FrontEndConfig{Config: broker.Config{URL: rs.URL(), Model: mine}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = fe.Close(context.Background()) })
			err = fe.Start(context.Background())
			if !errors.Is(err, broker.ErrVersionMismatch) || !errors.Is(err, broker.ErrModelMismatch) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "must run one version of streamer") || strings.Contains(err.Error(), "--model") {
				t.Errorf("a front end's start: %v; want ErrVersionMismatch naming the layout and the version, not the model", err)
			}
			if fe.Ready() {
				t.Error("the front end is ready, though the nodes lay out entries otherwise")
			}
		})
	}
	t.Run("of this layout", func(t *testing.T) {
		keep(broker.LayoutWire("generic"))
		startNode(t, rs, echoItems, 4, func(c *broker.NodeConfig) { c.Model = mine })
		fe := startFront(t, rs, func(c *broker.FrontEndConfig) { c.Model = mine })
		answersEventually(t, fe, "hi", "a request answered under a model of this layout")
	})
	t.Run("kept by a node of this version", func(t *testing.T) {
		rs.Do(t, "DEL", "streamer:model")
		startNode(t, rs, echoItems, 4, func(c *broker.NodeConfig) { c.Model = mine })
		// Versions from before layouts were numbered compare the wire
		// field alone with their own wire ("generic"): they refuse it.
		if got, want := rs.Do(t, "HGET", "streamer:model", "wire"), "generic @layout "+broker.EntryLayout; got != want {
			t.Errorf("the model key's wire: %q; want %q", got, want)
		}
	})
}

// A Redis that may evict keys when full would delete streamer's items and
// answers: a front end says so in its log, naming the policy; on Redis's
// default, noeviction, it says nothing.
func TestAFrontEndWarnsOfARedisThatMayEvictItsKeys(t *testing.T) {
	for _, policy := range []string{"allkeys-lru", "volatile-ttl", "noeviction"} {
		t.Run(policy, func(t *testing.T) {
			rs := redistest.Start(t, redistest.Options{})
			rs.Do(t, "CONFIG", "SET", "maxmemory-policy", policy)
			fakeNode(t, rs)
			var logs syncbuf.Buffer
			fe := startFront(t, rs, func(c *broker.FrontEndConfig) {
				c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
			})
			eventually(t, "front end ready", fe.Ready)
			warned := strings.Contains(logs.String(), "redis may evict keys when it is full (maxmemory-policy "+policy+")")
			if want := policy != "noeviction"; warned != want {
				t.Errorf("warned %v; want %v:\n%s", warned, want, logs.String())
			}
		})
	}
}

// A front end whose user may not run INFO cannot see the policy: it says
// so, once. Before, the README's warnings of a Redis that may evict were
// off without a word.
func TestAFrontEndSaysItCannotSeeThePolicy(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	rs.Do(t, "CONFIG", "SET", "maxmemory-policy", "allkeys-lru")
	rs.Do(t, "ACL", "SETUSER", "noinfo", "on", ">pw", "~*", "&*", "+@all", "-info")
	fakeNode(t, rs)
	var logs syncbuf.Buffer
	fe := startFront(t, rs, func(c *broker.FrontEndConfig) {
		c.URL = "redis://noinfo:pw@" + rs.Addr() + "/0"
		c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	})
	eventually(t, "front end ready", fe.Ready)
	broker.LookAtEviction(fe)
	broker.LookAtEviction(fe)
	if got := strings.Count(logs.String(), "redis refuses INFO: streamer cannot see whether redis may evict its keys"); got != 1 {
		t.Errorf("said %d times that it cannot see the policy; want once:\n%s", got, logs.String())
	}
}

// Keys evicted under a policy that evicts, set for less than the time
// between two looks at it, are told of too: the front end follows Redis's
// count of keys evicted, and logs an error when it grew since its last
// look.
func TestAFrontEndTellsOfKeysEvictedBetweenItsLooks(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	fakeNode(t, rs)
	var logs syncbuf.Buffer
	fe := startFront(t, rs, func(c *broker.FrontEndConfig) {
		c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	})
	eventually(t, "front end ready", fe.Ready)
	const told = "redis evicted keys since the last look"
	broker.LookAtEviction(fe)
	if strings.Contains(logs.String(), told) {
		t.Fatalf("told of evictions before any:\n%s", logs.String())
	}
	// Keys of a time to live of their own, evicted by volatile-random
	// once memory is below what Redis uses; then the policy is put back.
	value := strings.Repeat("x", 10<<10)
	for i := range 100 {
		rs.Do(t, "SET", "junk:"+strconv.Itoa(i), value, "EX", "3600")
	}
	used := rs.InfoInt(t, "memory", "used_memory")
	rs.Do(t, "CONFIG", "SET", "maxmemory-policy", "volatile-random")
	rs.Do(t, "CONFIG", "SET", "maxmemory", strconv.FormatInt(used-(512<<10), 10))
	rs.Do(t, "SET", "junk:last", "x", "EX", "3600") // a write evicts
	evicted := rs.InfoInt(t, "stats", "evicted_keys")
	rs.Do(t, "CONFIG", "SET", "maxmemory", "0")
	rs.Do(t, "CONFIG", "SET", "maxmemory-policy", "noeviction")
	if evicted == 0 {
		t.Fatal("redis evicted no keys; the test needs some")
	}
	broker.LookAtEviction(fe)
	if got := logs.String(); !strings.Contains(got, told) || !strings.Contains(got, "evicted="+strconv.FormatInt(evicted, 10)) {
		t.Errorf("after redis evicted %d keys, the front end's log says:\n%s", evicted, got)
	}
}

// heardFrom makes front ends see a node last heard from at when.
func heardFrom(t *testing.T, rs *redistest.Server, when time.Time) {
	rs.Do(t, "ZADD", "streamer:nodes", strconv.FormatInt(when.UnixMilli(), 10), "elsewhere")
}

// A front end whose user Redis does not let read the answers (an ACL
// without XREAD) could answer no caller: it logs the refusal once, says it
// is not ready and why, refuses new requests with that, fails those
// waiting once it lasts past the outage, and serves again by itself once a
// read goes through.
func TestAFrontEndRedisWillNotLetReadItsAnswersIsNotReady(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	rec := newRecorder()
	rec.hold["held"] = true
	startNode(t, rs, rec, 4, nil)
	var logs syncbuf.Buffer
	fe := startFront(t, rs, func(c *broker.FrontEndConfig) {
		c.URL = limitedUser(t, rs, "front")
		c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	})
	eventually(t, "front end ready", fe.Ready)
	waiting := predictLater(t, fe, "held")
	eventually(t, "the node runs the item", func() bool { return rec.runs("held") == 1 })

	rs.Do(t, "ACL", "SETUSER", "front", "-xread")
	eventually(t, "the front end says Redis refuses its reads", func() bool {
		err := fe.NotReady()
		return err != nil && strings.Contains(err.Error(), "NOPERM") && !fe.Ready()
	})
	close(rec.release) // its answer waits, unread
	if a := answerWithin(t, waiting, 15*time.Second, "the waiting request still waits 15s after its answers could no longer be read"); !errors.Is(a.err, supervisor.ErrUnavailable) || !strings.Contains(a.err.Error(), "NOPERM") {
		t.Errorf("the request waiting as reads were refused: %q, %v; want ErrUnavailable naming the refusal", a.out, a.err)
	}
	if _, err := predict(t, fe, "new"); !errors.Is(err, supervisor.ErrUnavailable) || !strings.Contains(err.Error(), "NOPERM") {
		t.Errorf("a request while reads are refused: %v; want ErrUnavailable naming the refusal", err)
	}
	eventually(t, "three reads refused", func() bool { return rejectedCalls(t, rs, "xread") >= 3 })
	if got := strings.Count(logs.String(), "redis refuses this front end's reads"); got != 1 {
		t.Errorf("the refusal logged %d times; want once:\n%s", got, logs.String())
	}

	rs.Do(t, "ACL", "SETUSER", "front", "+xread")
	eventually(t, "front end ready once its reads go through", fe.Ready)
	answersEventually(t, fe, "after", "served again")
}

// A front end whose user Redis does not let trim the reply stream serves
// all the same (the nodes bound the stream), and logs the refusal once,
// not at each trim.
func TestARefusedTrimOfTheRepliesIsLoggedOnce(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	startNode(t, rs, newRecorder(), 4, nil)
	var logs syncbuf.Buffer
	fe := startFront(t, rs, func(c *broker.FrontEndConfig) {
		c.URL = limitedUser(t, rs, "front", "-xtrim")
		c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	})
	eventually(t, "front end ready", fe.Ready)
	// A trim follows the answers read a second after the last.
	deadline := time.Now().Add(20 * time.Second)
	for rejectedCalls(t, rs, "xtrim") < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("after 20s of requests, %d trims refused; want 2", rejectedCalls(t, rs, "xtrim"))
		}
		if out, err := predict(t, fe, "x"); err != nil || string(out[0]) != "x" {
			t.Fatalf("a request while trims are refused: %q, %v; want its answer", out, err)
		}
	}
	if got := strings.Count(logs.String(), "redis refuses to trim"); got != 1 || !strings.Contains(logs.String(), "NOPERM") {
		t.Errorf("the refused trims logged %d times; want once, with Redis's error:\n%s", got, logs.String())
	}
}

// limitedUser makes a Redis user name, with every permission but those
// taken away by the ACL rules less (as "-xtrim"), and returns a URL of
// rs for it.
func limitedUser(t *testing.T, rs *redistest.Server, name string, less ...string) string {
	t.Helper()
	rs.Do(t, append([]string{"ACL", "SETUSER", name, "on", ">pw", "~*", "&*", "+@all"}, less...)...)
	u, err := url.Parse(rs.URL())
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(name, "pw")
	return u.String()
}

// itemsAdded is how many items were ever put on the shared stream, as
// Redis counts them (XINFO STREAM's entries-added; the front end's probe
// of its permissions runs XADD elsewhere).
func itemsAdded(t *testing.T, rs *redistest.Server) int {
	t.Helper()
	lines := strings.Split(rs.Do(t, "XINFO", "STREAM", "streamer:items"), "\n")
	for i, line := range lines {
		if line == "entries-added" && i+1 < len(lines) {
			n, err := strconv.Atoi(lines[i+1])
			if err != nil {
				t.Fatalf("entries-added %q: %v", lines[i+1], err)
			}
			return n
		}
	}
	t.Fatalf("XINFO STREAM streamer:items has no entries-added:\n%s", strings.Join(lines, "\n"))
	return 0
}

// rejectedCalls is how many calls of command Redis refused, as
// INFO commandstats counts them.
func rejectedCalls(t *testing.T, rs *redistest.Server, command string) int {
	t.Helper()
	return commandStat(t, rs, command, "rejected_calls")
}

// commandStat is the field of command's line in INFO commandstats ("calls",
// "rejected_calls"), 0 before the command's first call.
func commandStat(t *testing.T, rs *redistest.Server, command, field string) int {
	t.Helper()
	for line := range strings.Lines(rs.Do(t, "INFO", "commandstats")) {
		if rest, ok := strings.CutPrefix(line, "cmdstat_"+command+":"); ok {
			for kv := range strings.SplitSeq(strings.TrimSpace(rest), ",") {
				if n, ok := strings.CutPrefix(kv, field+"="); ok {
					got, _ := strconv.Atoi(n)
					return got
				}
			}
		}
	}
	return 0
}

// Large items are admitted in round trips of a bounded size, each of which
// goes through within the client's timeouts on a slow link: admitted in
// one round trip of all their bytes, requests sent together timed out
// there, and every one failed with 503.
func TestLargeItemsAreAdmittedInRoundTripsOfBoundedSize(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	proxy := redistest.StartProxy(t, rs)
	// The model answers with the item's size: only the admissions are large.
	sizes := model.Func(func(_ context.Context, items [][]byte) ([][]byte, error) {
		out := make([][]byte, len(items))
		for i, it := range items {
			out[i] = strconv.AppendInt(nil, int64(len(it)), 10)
		}
		return out, nil
	})
	startNode(t, rs, sizes, 4, nil)
	fe := startFront(t, rs, func(c *broker.FrontEndConfig) { c.URL = proxy.URL() })
	eventually(t, "front end ready", fe.Ready)
	// 32 requests of 1 MiB on a link of 8 MiB/s: 4 s in one round trip,
	// twice what one may take.
	proxy.Throttle(8 << 20)
	item := bytes.Repeat([]byte{'x'}, 1<<20)
	var wg sync.WaitGroup
	errs := make(chan error, 32)
	for range 32 {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			out, err := fe.Predict(ctx, [][]byte{item})
			if want := strconv.Itoa(len(item)); err == nil && string(out[0]) != want {
				err = fmt.Errorf("answer %q; want %s, the item's size", out[0], want)
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("a request of a large item: %v", err)
		}
	}
}

// An admission that got no answer, as Redis stalled (a slow disk, a long
// script) while it waited in its socket, fails its request; Redis runs it
// as it resumes, and its item is then found on the stream by its header
// and withdrawn, so that no node runs it for nobody. (A Redis paused by
// CLIENT PAUSE drops the command of a client that left meanwhile, and
// runs nothing.)
func TestTheItemsOfAnAdmissionThatGotNoAnswerAreWithdrawn(t *testing.T) {
	rs, fe := frontWithoutNodes(t, nil)
	// Requests given up, whose admissions and withdrawal leave connections
	// in the pool: the admission goes on one, rather than on a new one
	// that Redis would not greet during its stall.
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			defer cancel()
			_, _ = fe.Predict(ctx, [][]byte{[]byte("given up")})
		})
	}
	wg.Wait()
	// Withdrawals are counted once the script's answer is in, after Redis
	// has the items gone.
	eventually(t, "the requests given up withdrawn", func() bool {
		return rs.Do(t, "XLEN", "streamer:items") == "0" && fe.FrontEndStats().Withdrawn == uint64(itemsAdded(t, rs))
	})
	admitted, added := commandStat(t, rs, "evalsha", "calls"), itemsAdded(t, rs)
	withdrawn := uint64(added)
	// Past the admission's 2 s, with room for the request to reach Redis,
	// and short of the 5 s after which Redis answers BUSY to others.
	stall := 4 * time.Second
	started := time.Now()
	stalled := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, err := rs.DoErr(ctx, "EVAL", `local function now() local t = redis.call('TIME') return t[1] * 1000000 + t[2] end
local from = now()
while now() - from < tonumber(ARGV[1]) do end`, "0", strconv.FormatInt(stall.Microseconds(), 10))
		stalled <- err
	}()
	eventually(t, "Redis stalled", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		_, err := rs.DoErr(ctx, "PING")
		return err != nil
	})
	later := predictLater(t, fe, "x")
	if late := time.Since(started); late > stall-2500*time.Millisecond {
		t.Fatalf("the request came %s into Redis's stall of %s: too late for its admission to go unanswered", late, stall)
	}
	if a := <-later; !errors.Is(a.err, supervisor.ErrUnavailable) {
		t.Fatalf("a request whose admission Redis held: %q, %v; want ErrUnavailable", a.out, a.err)
	}
	if err := <-stalled; err != nil {
		t.Fatalf("the stall: %v", err)
	}
	if got := commandStat(t, rs, "evalsha", "calls"); got <= admitted {
		t.Fatalf("%d admissions after the stall, as before it: the request's never reached Redis", got)
	}
	eventually(t, "the item put on the stream as Redis resumed, and withdrawn", func() bool {
		return itemsAdded(t, rs) == added+1 && rs.Do(t, "XLEN", "streamer:items") == "0" &&
			fe.FrontEndStats().Withdrawn == withdrawn+1
	})
}

// TestCallsGivenUpTogetherAreWithdrawnOverFewConnections: when many callers
// leave at once (a load balancer that drops its connections), their items
// are withdrawn in a few round trips over a connection or two, rather than
// one withdrawal each at once, which would take every connection of the
// front end's pool (new ones dialled for them) and hold up its checks and
// admissions behind them.
func TestCallsGivenUpTogetherAreWithdrawnOverFewConnections(t *testing.T) {
	rs, fe := frontWithoutNodes(t, nil)
	const callers = 300
	ctx, leave := context.WithCancel(context.Background())
	defer leave()
	var wg sync.WaitGroup
	for i := range callers {
		wg.Go(func() { _, _ = fe.Predict(ctx, [][]byte{[]byte(strconv.Itoa(i))}) })
	}
	onStream(t, rs, callers, "every caller's item on the stream")
	dialled := connectionsReceived(t, rs)
	leave()
	wg.Wait()
	// Counted once Redis has answered the withdrawal, just after the
	// stream is found empty.
	eventually(t, "every item withdrawn, and counted", func() bool {
		return rs.Do(t, "XLEN", "streamer:items") == "0" && fe.FrontEndStats().Withdrawn >= callers
	})
	// Two at most, and one more for the client's pool of lone commands,
	// which may hold none yet (the checks and admissions go through
	// pipelines, whose connections are apart); and a few more on a loaded
	// machine, where a command that ran out of time drops its connection
	// (4 seen under the race detector at a load average of 8). One
	// withdrawal each would take the whole pool of 32.
	if n := connectionsReceived(t, rs) - dialled - 1; n > 8 { // -1: this look's own
		t.Errorf("the front end dialled %d connections to withdraw the items of %d callers who left together; want 8 at most, of a pool of 32", n, callers)
	}
	if w := fe.FrontEndStats().Withdrawn; w != callers {
		t.Errorf("%d items withdrawn; want %d", w, callers)
	}
}

// connectionsReceived is how many connections rs has accepted since it
// started (this look's included).
func connectionsReceived(t *testing.T, rs *redistest.Server) int {
	t.Helper()
	return int(rs.InfoInt(t, "stats", "total_connections_received"))
}

// TestAnAnswerLongerToReadThanAReadsBoundComesBack: one answer so large
// that reading it over the front end's link takes longer than a read of
// answers is given at first (3 MiB at 1 MiB/s, against 2.25 s) comes back
// all the same: a read that runs out of time is made again with more.
// Before, it was made again with as much, for ever, and no answer after
// that entry ever reached the front end's callers.
func TestAnAnswerLongerToReadThanAReadsBoundComesBack(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	proxy := redistest.StartProxy(t, rs)
	const size = 3 << 20
	large := model.Func(func(_ context.Context, items [][]byte) ([][]byte, error) {
		out := make([][]byte, len(items))
		for i := range items {
			out[i] = bytes.Repeat([]byte{'y'}, size)
		}
		return out, nil
	})
	startNode(t, rs, large, 1, nil)
	fe := startFront(t, rs, func(c *broker.FrontEndConfig) { c.URL = proxy.URL() })
	eventually(t, "front end ready", fe.Ready)
	proxy.Throttle(1 << 20)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := fe.Predict(ctx, [][]byte{[]byte("x")})
	if err != nil || len(out) != 1 || len(out[0]) != size {
		t.Fatalf("the large answer: %d outputs, %v; want one of %d bytes", len(out), err, size)
	}
	if got, err := fe.Predict(ctx, [][]byte{[]byte("x")}); err != nil || len(got) != 1 || len(got[0]) != size {
		t.Errorf("the next large answer: %d outputs, %v; want one of %d bytes", len(got), err, size)
	}
}

// The answers a front end has read leave its reply stream, the last one
// too: an idle front end keeps no caller's answer in Redis.
func TestReadAnswersLeaveTheReplyStream(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	startNode(t, rs, newRecorder(), 4, nil)
	fe := startFront(t, rs, nil)
	eventually(t, "front end ready", fe.Ready)
	answersEventually(t, fe, "secret", "the one request")
	keys := strings.Fields(rs.Do(t, "KEYS", "streamer:reply:*"))
	if len(keys) != 1 {
		t.Fatalf("reply streams %q; want the front end's one", keys)
	}
	eventually(t, "the reply stream emptied of the answer read", func() bool { return rs.Do(t, "XLEN", keys[0]) == "0" })
}

// A request with an item over MaxItemBytes is refused whole, naming the
// item, before any of its items enters Redis: no node could run it, and
// the others would run for nothing.
func TestAnItemTooLargeIsRefusedBeforeRedis(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	heardFrom(t, rs, time.Now().Add(time.Hour))
	fe := startFront(t, rs, func(c *broker.FrontEndConfig) { c.MaxItemBytes = 10 })
	eventually(t, "front end ready", fe.Ready)
	_, err := predict(t, fe, "a", strings.Repeat("y", 11), "b")
	var itemErr *supervisor.ItemError
	if !errors.As(err, &itemErr) || itemErr.Index != 1 || !errors.Is(err, supervisor.ErrTooLarge) || !strings.Contains(err.Error(), "the item is 11 bytes encoded; the most one batch may carry is 10") {
		t.Fatalf("a request with an item too large: %v; want ErrTooLarge for item 1, naming its size and the bound", err)
	}
	if n := rs.Do(t, "XLEN", "streamer:items"); n != "0" {
		t.Errorf("%s items on the stream; want none", n)
	}
	if st := fe.Stats(); st.Rejected != 3 || st.Submitted != 0 {
		t.Errorf("rejected %d, submitted %d; want the 3 items rejected", st.Rejected, st.Submitted)
	}
}

// A request whose caller left before it came is refused before Redis, as
// a Streamer refuses it: it used to reach the writer about half the time,
// and a node ran items nobody waited for.
func TestARequestWhoseCallerLeftIsRefusedBeforeRedis(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	heardFrom(t, rs, time.Now().Add(time.Hour))
	fe := startFront(t, rs, nil)
	eventually(t, "front end ready", fe.Ready)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	const calls = 50
	for range calls {
		_, err := fe.Predict(ctx, [][]byte{[]byte("a")})
		if !errors.Is(err, supervisor.ErrCanceled) || !strings.Contains(err.Error(), "the caller left before the request was queued") {
			t.Fatalf("a request whose caller left: %v; want ErrCanceled, before the request was queued", err)
		}
	}
	if n := rs.Do(t, "XLEN", "streamer:items"); n != "0" {
		t.Errorf("%s items on the stream; want none", n)
	}
	// Its items count as the request does, canceled, as a Streamer's.
	if st := fe.Stats(); st.Canceled != calls || st.Submitted != calls || st.Answered != calls || st.Rejected != 0 {
		t.Errorf("canceled %d, submitted %d, answered %d, rejected %d; want the %d items canceled", st.Canceled, st.Submitted, st.Answered, st.Rejected, calls)
	}
}

// A Close made while Start runs, before its check, during it or after it,
// neither panics nor races: Start returns nil, or ErrShuttingDown when the
// Close came first or overtook its check (against a Redis that does not
// serve, the check's own error may come first), and Close returns once
// every goroutine Start ran has stopped.
func TestAFrontEndClosedAsItStartsStops(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	stopped := redistest.Start(t, redistest.Options{})
	stopped.Kill()
	for _, tc := range []struct {
		name  string
		url   string
		other error // an error Start may return besides ErrShuttingDown
	}{
		{"redis serving", rs.URL(), nil},
		{"redis stopped", stopped.URL(), supervisor.ErrUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for i := range 40 {
				fe, err := broker.NewFrontEnd(broker.FrontEndConfig{Config: broker.Config{URL: tc.url}})
				if err != nil {
					t.Fatal(err)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				started := make(chan error, 1)
				go func() { started <- fe.Start(ctx) }()
				for range i % 4 { // Close at another point of Start each time
					runtime.Gosched()
				}
				if err := fe.Close(ctx); err != nil {
					t.Errorf("Close %d: %v; want nil", i, err)
				}
				err = <-started
				if err != nil && !errors.Is(err, supervisor.ErrShuttingDown) && (tc.other == nil || !errors.Is(err, tc.other)) {
					t.Errorf("Start %d, closed as it ran: %v; want nil or ErrShuttingDown", i, err)
				}
				cancel()
			}
		})
	}
}

// A request failed as a whole (by Close, or by an outage) after some of
// its items were answered returns their outputs, with an
// *supervisor.ItemError for the first item left unanswered that wraps
// the failure, as a Streamer answers the items a Shutdown leaves pending.
// Before, it came back as the bare failure, without the outputs.
func TestARequestFailedWholeKeepsTheAnswersItGot(t *testing.T) {
	for _, tc := range []struct {
		name string
		fail func(*redistest.Server, *broker.FrontEnd)
		want error
	}{
		{"closed", func(_ *redistest.Server, fe *broker.FrontEnd) {
			ctx, cancel := context.WithCancel(context.Background())
			cancel() // no wait for the answers
			_ = fe.Close(ctx)
		}, supervisor.ErrShuttingDown},
		{"redis gone", func(rs *redistest.Server, _ *broker.FrontEnd) { rs.Kill() }, supervisor.ErrUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rs := redistest.Start(t, redistest.Options{})
			held := newRecorder()
			held.hold["slow"] = true
			defer close(held.release)
			// Two workers, a batch each: "fast" is answered while "slow"
			// runs.
			startNodeOn(t, rs, supervisor.Config{InProcess: held, Workers: 2, BatchSize: 1, MaxLatency: time.Millisecond}, nil)
			fe := startFront(t, rs, func(c *broker.FrontEndConfig) { c.Outage = 300 * time.Millisecond })
			eventually(t, "front end ready", fe.Ready)
			later := predictLater(t, fe, "slow", "fast")
			eventually(t, "the fast item answered, the slow one running", func() bool {
				return fe.Stats().Answered == 1 && held.runs("slow") == 1
			})
			tc.fail(rs, fe)
			a := answerWithin(t, later, 10*time.Second, "the request still waits 10s after it failed")
			var ie *supervisor.ItemError
			if !errors.As(a.err, &ie) || ie.Index != 0 || ie.Every || !errors.Is(a.err, tc.want) {
				t.Errorf("the request's error: %#v (%v); want an ItemError for item 0, not Every, wrapping %v", a.err, a.err, tc.want)
			}
			if len(a.out) != 2 || a.out[0] != nil || string(a.out[1]) != "fast" {
				t.Errorf("the request's outputs: %q; want none for item 0 and \"fast\" for item 1", a.out)
			}
		})
	}
}

// A request whose keys do not match its items (ErrBadRequest) counts its
// items as rejected, as a Streamer counts them.
func TestARequestWithMismatchedKeysCountsAsRejected(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	fe := startFront(t, rs, nil)
	st := startStreamer(t, supervisor.Config{InProcess: newRecorder(), Workers: 1, BatchSize: 4})
	req := supervisor.Request{Items: [][]byte{[]byte("a"), []byte("b")}, Keys: []string{"k"}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, tc := range []struct {
		name    string
		predict func(context.Context, supervisor.Request) ([][]byte, error)
		stats   func() supervisor.Stats
	}{
		{"a Streamer", st.PredictRequest, st.Stats},
		{"a front end", fe.PredictRequest, fe.Stats},
	} {
		if _, err := tc.predict(ctx, req); !errors.Is(err, supervisor.ErrBadRequest) {
			t.Errorf("%s: a request of 2 items and 1 key: %v; want ErrBadRequest", tc.name, err)
		}
		if got := tc.stats().Rejected; got != 2 {
			t.Errorf("%s: %d items rejected after a request of 2 items and 1 key; want 2", tc.name, got)
		}
	}
}

// The model key's label names a model that runs: after a rolling
// upgrade (the same way of writing items, the same name, another
// version), a mismatch's message named the first node's model for as long
// as any node beat, though none ran it any more.
func TestTheModelsLabelIsALiveNodes(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	version := func(label string) func(*broker.NodeConfig) {
		return func(c *broker.NodeConfig) { c.Model = broker.ModelID{Wire: "generic", Name: "sleep", Label: label} }
	}
	old := startNode(t, rs, newRecorder(), 4, version("sleep:10ms,100us"))
	if got := rs.Do(t, "HGET", "streamer:model", "label"); got != "sleep:10ms,100us" {
		t.Fatalf("the model's label is %q; want the first node's", got)
	}
	startNode(t, rs, newRecorder(), 4, version("sleep:10ms,200us"))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := old.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the label to name the model still running", func() bool {
		return rs.Do(t, "HGET", "streamer:model", "label") == "sleep:10ms,200us"
	})
}

// TestAFrontEndKeepsNoRequestOnceAnswered: once a request is answered and
// its caller has dropped it, nothing of it is left in the front end, its
// items and answers included. Its writer kept the last admissions it sent
// (up to 256 requests, a review measured 160 MB after a burst of 4 MB
// items) until newer ones took their places, for as long as it stayed
// idle.
func TestAFrontEndKeepsNoRequestOnceAnswered(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	startNode(t, rs, newRecorder(), 4, nil)
	fe := startFront(t, rs, nil)
	eventually(t, "front end ready", fe.Ready)

	var freed atomic.Int32
	func() {
		item := bytes.Repeat([]byte("x"), 1<<20)
		runtime.AddCleanup(&item[0], func(struct{}) { freed.Add(1) }, struct{}{})
		out, err := fe.Predict(context.Background(), [][]byte{item})
		if err != nil || len(out) != 1 || !bytes.Equal(out[0], item) {
			t.Fatalf("the item's answer: %d outputs, %v", len(out), err)
		}
		runtime.AddCleanup(&out[0][0], func(struct{}) { freed.Add(1) }, struct{}{})
	}()
	eventually(t, "the request's item and its answer to be collected", func() bool {
		runtime.GC()
		return freed.Load() == 2
	})
}
