// Package broker spreads streamer over many machines through one Redis:
// front ends put items on a Redis stream, GPU nodes read them through a
// consumer group, batch and run them on their local workers, write each
// answer to the asking front end's reply stream and acknowledge the item.
//
// What Redis holds, under Config.Prefix (default "streamer"):
//
//	PREFIX:items         the stream of items waiting or running, oldest first
//	                     (consumer group "nodes"); an item leaves it once
//	                     answered. Its length is the shared backlog.
//	PREFIX:items:NODE    one node's own stream (same group): the requests of
//	                     callers it just answered, routed back to it by a
//	                     front end while nothing waits on PREFIX:items (and
//	                     unless it answered with no idle worker), so
//	                     that a closed loop's batch comes back to the node
//	                     that expects it. Another node adopts what is on it
//	                     once the node is gone, then deletes it.
//	PREFIX:streams       set: the node streams that exist
//	PREFIX:reply:FRONT   one front end's answers (those of one write of a
//	                     node packed in one entry of up to 256 KiB, or of one
//	                     larger answer), trimmed by the front end
//	                     as it reads them; it expires ReplyTTL after the last
//	                     answer written to it, so a dead front end's
//	                     answers go away by themselves
//	PREFIX:nodes         sorted set: every node's last heartbeat (unix ms)
//	PREFIX:leaving       sorted set: the last heartbeat of each node that
//	                     is finishing its items as it leaves: front ends
//	                     fail no call for want of a node while one beats
//	                     here, but admit nothing for it alone
//	PREFIX:poison        sorted set: the hashes of items found to crash the
//	                     model, each until its expiry (unix ms)
//	PREFIX:epoch         a random value set by the first front end to check:
//	                     when it changes or goes, Redis has lost its data,
//	                     and front ends fail the calls whose items were there;
//	                     the admission script refuses a front end that
//	                     passes another, until it has checked
//	PREFIX:room          the room kept in the shared backlog for a large
//	                     request refused, lapsing within a second unless
//	                     its front end asks again
//	PREFIX:sizes         the mean size of the requests admitted of late, in
//	                     1/1024 items, for what "large" means
//	PREFIX:model         hash: the model the nodes serve (how items are
//	                     written, the entries' layout, its name), kept by
//	                     their heartbeats
//	PREFIX:name:NODE     a live node's hold on its name, kept by its
//	                     heartbeats, so that no two live nodes share one
//
// The README's table of these keys says how long each lives.
//
// The guarantees: items are served in the order they reached Redis (a
// request routed to a node's own stream goes there only while nothing
// waits on the shared one, so it passes nobody); a node
// acknowledges an item only after its answer is written, and the items of a
// node that stops answering are claimed by another after ClaimIdle
// (XAUTOCLAIM), so every admitted item is answered; a second answer to an
// item (after a claim) is dropped by the front end. A node reads only about
// what its workers can run soon, so no node hoards the stream while another
// idles. Deadlines travel with the items: an item whose deadline passed in
// Redis is never run. An item that crashes one node's model is refused by
// every node for the quarantine's time. A call whose items Redis lost
// (restarted without its data, or failed over to a replica that lacked
// them) fails with ErrUnavailable rather than waiting for ever: a front end
// sees the epoch key change or go, or its items gone from the stream.
package broker

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/streamer-dev/streamer/supervisor"
)

// Config is what front ends and nodes share: where Redis is and how the
// keys are named. Only URL is required.
type Config struct {
	// URL is redis://[user:password@]host:port/db, or rediss:// for TLS.
	// With ?master_name=NAME, host:port is a Sentinel (more go in
	// &addr=host:port), which names the master of NAME, and the client
	// follows it through failovers. Query options that streamer sets itself
	// (timeouts, retries, the pool), a database named twice, a query that
	// does not decode, and skip_verify are refused.
	URL string
	// TLS, when not nil, replaces the TLS settings a rediss:// URL implies
	// (e.g. to trust a private CA).
	TLS *tls.Config
	// Prefix starts every key, so that several models can share one Redis.
	// Empty means "streamer".
	Prefix string
	// ClaimIdle is how long an item may stay with a node that shows no sign
	// of life before another node claims it: from MinClaimIdle (100ms) to
	// MaxClaimIdle (1h), as a live node keeps its items from claims however
	// long they run, and only a dead node's wait this long. Zero means 5s.
	ClaimIdle time.Duration
	// ReplyTTL is how long a front end's reply stream outlives the last
	// answer written to it (or the front end's last sign of life), from
	// MinReplyTTL (1s) to MaxReplyTTL (24h). It is the front end's: its
	// items carry it to the nodes, which use it for their answers, and
	// bound it by MaxReplyTTL. Zero means 1 minute.
	ReplyTTL time.Duration
	// Model names the model served, checked against the one the nodes
	// under Prefix serve (see ModelID): a node of another refuses to
	// start, and a front end that writes items otherwise too. Zero checks
	// nothing.
	Model ModelID
	// ModelVersion, when set, says the model's version now, read at every
	// beat and check in place of Model.Version: a process whose workers a
	// reload gives a new model file publishes that model's version from
	// then on.
	ModelVersion func() string
	// Logger receives the broker's events; nil discards them. The Redis
	// client library logs a few of its own (a pool that cannot dial)
	// through its logger, redis.SetLogger, which is the process's and
	// which the broker leaves as it finds it: see SendRedisLogTo.
	Logger *slog.Logger

	// skew is added to this machine's clock, for tests of machines whose
	// clocks differ (see clock).
	skew time.Duration
}

// The defaults of Config.
const (
	DefaultPrefix    = "streamer"
	DefaultClaimIdle = 5 * time.Second
	DefaultReplyTTL  = time.Minute
)

// MaxReplyTTL bounds Config.ReplyTTL, and the time to live a node gives a
// reply stream, whatever the item it answers asks for: an item written by
// hand, or by a program that shares the Redis, may ask for years, and a
// front end's answers would then outlive it for as long.
const MaxReplyTTL = 24 * time.Hour

// The other bounds of Config's times, which NewFrontEnd and NewNode
// enforce: ReplyTTL from MinReplyTTL, and ClaimIdle from MinClaimIdle to
// MaxClaimIdle (a live node keeps its items from claims however long they
// run, so only a dead node's items wait ClaimIdle, and an hour is far past
// what a caller waits).
const (
	MinReplyTTL  = time.Second
	MinClaimIdle = 100 * time.Millisecond
	MaxClaimIdle = time.Hour
)

// nodeGroup is the consumer group every node reads the items through.
const nodeGroup = "nodes"

// heartbeat is how often a node says it is alive; a node not heard from for
// nodeSilence is taken for gone.
const (
	heartbeat   = time.Second
	nodeSilence = 3 * heartbeat
)

// blockFor bounds a blocking read, and so how long a stop waits for one:
// the client cannot cut a blocking read short. A node's blocking read goes
// in a pipeline, which waits for its answer no longer than the client's
// ReadTimeout (see connect): blockFor must stay well below it.
const blockFor = 250 * time.Millisecond

// keys are the Redis keys of one prefix.
type keys struct {
	items, nodes, leaving, poison, replyPrefix, streams, epoch, model, room, sizes, names, versions string
}

// SendRedisLogTo sends the Redis client library's own messages (a pool
// that cannot dial, and the like) to log at debug level, in place of its
// default, plain text on stderr. The broker reports an outage once, in
// the log's format; these would repeat it every second. The library has
// one logger per process, so a program calls this once, as it starts.
func SendRedisLogTo(log *slog.Logger) { redis.SetLogger(redisLog{log}) }

type redisLog struct{ log *slog.Logger }

func (l redisLog) Printf(ctx context.Context, format string, v ...any) {
	l.log.DebugContext(ctx, fmt.Sprintf(format, v...), "from", "redis client")
}

// modelVersion is the model's version now (see Config.ModelVersion).
func (c *Config) modelVersion() string {
	if c.ModelVersion != nil {
		return c.ModelVersion()
	}
	return c.Model.Version
}

func newKeys(prefix string) keys {
	return keys{
		items:       prefix + ":items",
		nodes:       prefix + ":nodes",
		leaving:     prefix + ":leaving",
		poison:      prefix + ":poison",
		replyPrefix: prefix + ":reply:",
		streams:     prefix + ":streams",
		epoch:       prefix + ":epoch",
		model:       prefix + ":model",
		room:        prefix + ":room",
		sizes:       prefix + ":sizes",
		names:       prefix + ":name:",
		versions:    prefix + ":versions",
	}
}

// randomHex returns n random bytes in hexadecimal: names and values that no
// other process picks.
func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// nodeItems is the key of the named node's own stream.
func (k keys) nodeItems(node string) string { return k.items + ":" + node }

func (c *Config) withDefaults() (Config, error) {
	cfg := *c
	if cfg.URL == "" {
		return cfg, errors.New("broker: no Redis URL")
	}
	if cfg.Prefix == "" {
		cfg.Prefix = DefaultPrefix
	}
	if cfg.ClaimIdle == 0 {
		cfg.ClaimIdle = DefaultClaimIdle
	}
	if cfg.ReplyTTL == 0 {
		cfg.ReplyTTL = DefaultReplyTTL
	}
	if cfg.ClaimIdle < MinClaimIdle || cfg.ClaimIdle > MaxClaimIdle {
		return cfg, fmt.Errorf("broker: ClaimIdle %s: want %s to %s (the wait before a dead node's items are claimed; zero means %s)", cfg.ClaimIdle, MinClaimIdle, MaxClaimIdle, DefaultClaimIdle)
	}
	if cfg.ReplyTTL < MinReplyTTL || cfg.ReplyTTL > MaxReplyTTL {
		return cfg, fmt.Errorf("broker: ReplyTTL %s: want %s to %s (how long a dead front end's answers stay in Redis; zero means %s)", cfg.ReplyTTL, MinReplyTTL, MaxReplyTTL, DefaultReplyTTL)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return cfg, nil
}

// setting is a number of a config, named, for checkNegatives.
type setting struct {
	name  string
	value int64
	text  string // the value as the caller wrote it: 1s for a duration
}

// intSetting is the setting name of a count v.
func intSetting(name string, v int) setting { return setting{name, int64(v), strconv.Itoa(v)} }

// durationSetting is the setting name of a time d.
func durationSetting(name string, d time.Duration) setting {
	return setting{name, int64(d), d.String()}
}

// checkNegatives refuses the settings below zero, naming each with its
// value, as supervisor's Config does: zero means the default, and below
// it none has a meaning.
func checkNegatives(settings ...setting) error {
	var bad []string
	for _, s := range settings {
		if s.value < 0 {
			bad = append(bad, s.name+" "+s.text)
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("broker: %s must not be negative (zero means the default)", strings.Join(bad, ", "))
	}
	return nil
}

// readTimeout bounds the wait for a reply of Redis, but for a blocking
// read's block.
const readTimeout = 2 * time.Second

// connect makes the client for cfg.URL, and names its Redis for messages
// (without a password; with the database when it is not 0, so that a front
// end and nodes on different databases of one Redis can be told apart).
// Nothing is sent yet: a Redis that is down now is retried as the front end
// or node runs.
func connect(cfg Config, poolSize int) (rdb *redis.Client, where string, err error) {
	if !hasScheme(cfg.URL, "redis://") && !TLSURL(cfg.URL) {
		return nil, "", fmt.Errorf("broker: redis URL %q: the scheme must be redis:// (or rediss:// for TLS), as in redis://host:6379/0", redactURL(cfg.URL))
	}
	u, err := parseURL(cfg.URL)
	if err != nil {
		return nil, "", err
	}
	if strings.Count(u.Host, ":") > 1 && !strings.HasPrefix(u.Host, "[") {
		// url.Parse splits it at its last colon: redis://fd00::5/0 would
		// dial host fd00: on port 5, and retry for ever.
		return nil, "", fmt.Errorf("broker: redis URL %s: host %q: write an IPv6 address in brackets, as in redis://[fd00::5]:6379/0", redactURL(cfg.URL), u.Host)
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return nil, "", fmt.Errorf("broker: redis URL %s: port %s out of range", redactURL(cfg.URL), p)
		}
	}
	if err := checkQuery(u); err != nil {
		return nil, "", fmt.Errorf("broker: redis URL %s: %w", redactURL(cfg.URL), err)
	}
	if u.Query().Has("master_name") {
		return connectFailover(cfg, poolSize)
	}
	opt, err := redis.ParseURL(cfg.URL)
	if err != nil {
		return nil, "", parseError(cfg.URL, err)
	}
	if err := checkDB(cfg.URL, opt.DB); err != nil {
		return nil, "", err
	}
	if cfg.TLS != nil {
		tc := cfg.TLS.Clone()
		if tc.ServerName == "" {
			tc.ServerName, _, _ = net.SplitHostPort(opt.Addr)
		}
		opt.TLSConfig = tc
	}
	// Fail fast while Redis is down: a request must not wait for the
	// client's own retries and long timeouts.
	opt.DialTimeout = time.Second
	opt.ReadTimeout = readTimeout
	opt.WriteTimeout = 2 * time.Second
	opt.MaxRetries = -1
	opt.DialerRetries = 1 // the front end and the node retry, at their pace
	opt.PoolSize = poolSize
	opt.DisableIdentity = true
	// A command's context bounds it on the connection too: a hung Redis
	// (frozen, or cut off without a reset) fails a check in its half
	// second rather than the ReadTimeout.
	opt.ContextTimeoutEnabled = true
	where = opt.Addr
	if opt.DB != 0 {
		where += "/" + strconv.Itoa(opt.DB)
	}
	return redis.NewClient(opt), where, nil
}

// connectFailover is connect for a URL that names a master through its
// Sentinels: the client asks them for the master's address as it
// connects, and drops its connections to the old master when they
// announce a failover.
func connectFailover(cfg Config, poolSize int) (*redis.Client, string, error) {
	// As in a URL of one Redis, the user and password are those of the
	// Redis that serves (the master); the Sentinels' own, if they need
	// any, go in sentinel_username and sentinel_password. (The client
	// library reads the user information as the Sentinels'.)
	u, err := parseURL(cfg.URL)
	if err != nil {
		return nil, "", err
	}
	q := u.Query()
	if q.Has("username") || q.Has("password") {
		return nil, "", fmt.Errorf("broker: redis URL %s: give the master's user and password as for one Redis, redis://user:password@sentinel:port/0?master_name=NAME", redactURL(cfg.URL))
	}
	sentinelUser, sentinelPassword := q.Get("sentinel_username"), q.Get("sentinel_password")
	q.Del("sentinel_username")
	q.Del("sentinel_password")
	user := u.User
	u.User, u.RawQuery = nil, q.Encode()
	opt, err := redis.ParseFailoverURL(u.String())
	if err != nil {
		return nil, "", parseError(cfg.URL, err)
	}
	if err := checkDB(cfg.URL, opt.DB); err != nil {
		return nil, "", err
	}
	if opt.MasterName == "" {
		return nil, "", fmt.Errorf("broker: redis URL %s: master_name is empty", redactURL(cfg.URL))
	}
	opt.Username = user.Username()
	opt.Password, _ = user.Password()
	opt.SentinelUsername, opt.SentinelPassword = sentinelUser, sentinelPassword
	switch {
	case cfg.TLS != nil:
		// Without a ServerName, as below; with one, every certificate
		// (the Sentinels', the master's, a new master's after a
		// failover) must hold that name.
		opt.TLSConfig = cfg.TLS.Clone()
	case opt.TLSConfig != nil:
		// The client library names the first Sentinel's host here, and
		// uses these settings for every connection, to the Sentinels and
		// to the master alike. With no name, each connection checks the
		// certificate against the host it dials (tls.DialWithDialer,
		// which both of the library's dialers use, takes it from the
		// address): a Sentinel's against its own, the master's against
		// the address the Sentinels name.
		opt.TLSConfig.ServerName = ""
	}
	// The settings of connect, field for field (the two option types
	// share no part): fail fast, and let the callers retry.
	opt.DialTimeout = time.Second
	opt.ReadTimeout = readTimeout
	opt.WriteTimeout = 2 * time.Second
	opt.MaxRetries = -1
	opt.DialerRetries = 1 // the front end and the node retry, at their pace
	opt.PoolSize = poolSize
	opt.DisableIdentity = true
	opt.ContextTimeoutEnabled = true
	where := fmt.Sprintf("the master %q of sentinels %s", opt.MasterName, strings.Join(opt.SentinelAddrs, ","))
	if opt.DB != 0 {
		where = fmt.Sprintf("the master %q (database %d) of sentinels %s", opt.MasterName, opt.DB, strings.Join(opt.SentinelAddrs, ","))
	}
	return redis.NewFailoverClient(opt), where, nil
}

// checkQuery refuses what the client library would take from the query of
// u, a Redis URL, and then lose or hide: a pair whose encoding is wrong
// (url.Values drops it, and a Sentinel's password would go unsent), an
// option that streamer sets itself (see connect), which would be
// overridden, a database named both in the path and in db=, and
// skip_verify. The message names no option that follows a password in the
// query: it may be a piece of the password, cut off by an unencoded &.
func checkQuery(u *url.URL) error {
	afterPassword := false
	seen := map[string]bool{}
	for pair := range strings.SplitSeq(u.RawQuery, "&") {
		if pair == "" {
			continue // a stray &, which the client library skips too
		}
		key, value, _ := strings.Cut(pair, "=")
		name, err := url.QueryUnescape(key)
		_, valueErr := url.QueryUnescape(value)
		bad := err != nil || valueErr != nil || strings.Contains(pair, ";")
		switch {
		case bad && afterPassword:
			return errors.New("the query does not parse after a password in it: are & ; and % in the password percent-encoded?")
		case bad && err == nil:
			return fmt.Errorf("query option %s does not parse: %% must be followed by two hexadecimal digits, and ; be percent-encoded", name)
		case bad:
			return errors.New("a query option's name does not parse: % must be followed by two hexadecimal digits, and ; be percent-encoded")
		case seen[name] && name != "addr" && afterPassword:
			return errors.New("a query option is given twice (not named, as it may be a piece of a password there: is & in it percent-encoded?)")
		case seen[name] && name != "addr":
			// The client library takes one (db=, master_name=: the last),
			// and checks would judge another.
			return fmt.Errorf("query option %s is given twice; give it once (addr= alone may name several Sentinels)", name)
		}
		seen[name] = true
		// Past a password, every pair may be a piece of it.
		afterPassword = afterPassword || strings.HasSuffix(name, "password")
	}
	q := u.Query()
	for name := range q {
		if setByStreamer(name) {
			return fmt.Errorf("query option %s: streamer sets it itself (its timeouts, retries and connection pool), and would override it: leave it out", name)
		}
	}
	if !q.Has("master_name") {
		for _, name := range []string{"sentinel_username", "sentinel_password", "addr"} {
			if q.Has(name) {
				return fmt.Errorf("query option %s is for Sentinels: it goes with ?master_name=NAME, the master they name", name)
			}
		}
	}
	for _, addr := range q["addr"] {
		_, port, err := net.SplitHostPort(addr)
		if n, perr := strconv.Atoi(port); err != nil || perr != nil || n < 1 || n > 65535 {
			return fmt.Errorf("query option addr=%s: not a Sentinel's host:port with a port from 1 to 65535", addr)
		}
	}
	if q.Has("skip_verify") {
		return errors.New("query option skip_verify: streamer does not turn off the check of Redis's certificate: trust the CA that signed it instead (--broker-ca)")
	}
	if path, db := strings.Trim(u.Path, "/"), q.Get("db"); path != "" && db != "" {
		n, err := strconv.Atoi(db)
		switch {
		case err != nil:
			return fmt.Errorf("query option db=%s: not a database number", db)
		case n < 0:
			return fmt.Errorf("query option db=%s: a database number must not be negative", db)
		}
		if p, err := strconv.Atoi(path); err == nil && p != n {
			return errors.New("the database is named twice, differently: in the path and in db= in the query; name it once")
		}
	}
	return nil
}

// setByStreamer says whether name is an option of a Redis URL's query that
// connect overrides.
func setByStreamer(name string) bool {
	switch name {
	case "dial_timeout", "read_timeout", "write_timeout", "max_retries", "min_retry_backoff",
		"max_retry_backoff", "dialer_retries", "dialer_retry_timeout", "pool_size",
		"context_timeout_enabled", "disableIdentity", "identitySuffix":
		return true
	}
	return false
}

// parseError is the error of the client library, err, about s, a Redis
// URL. Where the query holds a password, an option it
// does not know may be a piece of that password cut off by an unencoded &:
// it is not named.
func parseError(s string, err error) error {
	why := strings.TrimPrefix(err.Error(), "redis: ")
	if strings.HasPrefix(why, "unexpected option") && strings.Contains(s, "password") {
		why = "unexpected option in the query (not named, as it may be a piece of a password there: is & in it percent-encoded?)"
	}
	return fmt.Errorf("broker: redis URL %s: %s", redactURL(s), why)
}

// negativeDB is the error of s, a Redis URL whose database number, db, is
// negative. (Whether a number is too high, only Redis knows: its setting
// databases.)
// checkDB refuses a database number no Redis has: a negative one, or one
// past what SELECT reads, which Redis refuses in words unlike those of a
// number past its databases (see Refusal), so that the refusal was taken
// for an outage, and retried for ever.
func checkDB(s string, db int) error {
	switch {
	case db < 0:
		return fmt.Errorf("broker: redis URL %s: database number %d: must not be negative", redactURL(s), db)
	case db > math.MaxInt32:
		return fmt.Errorf("broker: redis URL %s: database number %d: Redis has as many as its setting databases (16 unless set), and none past %d", redactURL(s), db, math.MaxInt32)
	}
	return nil
}

// unavailableError is a supervisor.ErrUnavailable whose message says what
// is unavailable (Redis, or every node) rather than the workers that
// ErrUnavailable's own text names. Its cause, when set, is the error an
// embedder may test for beside it (ErrModelMismatch, or the context's
// error of a Start whose context ended).
type unavailableError struct {
	msg   string
	cause error
}

func (e *unavailableError) Error() string { return "unavailable: " + e.msg }

func (e *unavailableError) Is(target error) bool { return target == supervisor.ErrUnavailable }

func (e *unavailableError) Unwrap() error { return e.cause }

func unavailablef(format string, args ...any) error {
	return &unavailableError{msg: fmt.Sprintf(format, args...)}
}

// permissionf is unavailablef for a permission Redis refuses: it is
// ErrPermission too.
func permissionf(format string, args ...any) error {
	return &unavailableError{msg: fmt.Sprintf(format, args...), cause: ErrPermission}
}

// startError is err, what the Start of a front end or a node of the
// Redis at where met, as Start returns it: as it is when no retry mends
// it (an unsupported Redis, another model under the prefix); as an
// ErrUnsupportedRedis when the server there does not speak the Redis
// protocol (see notRedis); as Refusal words it when Redis refuses
// the client; as ErrPermission, and supervisor.ErrUnavailable, when it
// refuses the client's user a permission; and otherwise as
// supervisor.ErrUnavailable, an outage the
// front end or node rides out by itself, wrapping err (a connection
// refused, Redis loading its data) but for a time that ran out: that one
// wraps the caller's context.DeadlineExceeded only when ctx's deadline
// passed, as a check's own time running out is not the caller's.
func startError(ctx context.Context, err error, where string) error {
	switch {
	case err == nil, errors.Is(err, ErrUnsupportedRedis), errors.Is(err, ErrModelMismatch), errors.Is(err, ErrPermission):
		return err
	}
	if wrong := notRedis(err); wrong != nil {
		// A mistake in the URL (another service's port), as a wrong
		// password is: the server answers, and no retry mends it.
		return fmt.Errorf("%w: the server at %s %s", ErrUnsupportedRedis, where, wrong)
	}
	if refused := Refusal(err); refused != nil {
		return refused
	}
	if permissionRefused(err) {
		return &unavailableError{msg: err.Error(), cause: ErrPermission}
	}
	cause := err
	if timedOut(err) {
		cause = nil
		if ended(ctx) {
			cause = cmp.Or(ctx.Err(), context.DeadlineExceeded)
		}
	}
	return &unavailableError{msg: err.Error(), cause: cause}
}

// notRedis is err, a command's failure, worded as the answer of a server
// that does not speak the Redis protocol when it is one: the client
// library could not parse its reply (an HTTP server's "HTTP/1.1 400 Bad
// Request", an SSH banner), as opposed to no answer or a connection
// refused; nil otherwise. Such a server answers every command so: before,
// a front end or node pointed at one served for ever as not ready.
func notRedis(err error) *notRedisError {
	var worded *notRedisError
	switch {
	case err == nil, errors.As(err, new(redis.Error)):
		return nil
	case errors.As(err, &worded):
		return worded
	}
	msg := err.Error()
	for _, words := range []string{"redis: can't parse", "redis: invalid reply", "redis: can't read raw reply", "redis: can't peek push notification"} {
		i := strings.Index(msg, words)
		if i < 0 {
			continue
		}
		answered := "something else"
		if q := strings.IndexByte(msg[i:], '"'); q >= 0 {
			if quoted, err := strconv.QuotedPrefix(msg[i+q:]); err == nil {
				answered, _ = strconv.Unquote(quoted)
				answered = strconv.Quote(answered)
			}
		}
		return &notRedisError{answered: answered, err: err}
	}
	return nil
}

// notRedisError is a failure that says the server does not speak the
// Redis protocol (see notRedis).
type notRedisError struct {
	answered string // what it answered, quoted
	err      error
}

func (e *notRedisError) Error() string {
	return "does not speak the Redis protocol: it answered " + e.answered + " (is that the address of a Redis server?)"
}

func (e *notRedisError) Unwrap() error { return e.err }

// ended says whether ctx is done, or its deadline has passed: the client
// library sets a connection's deadline from ctx's, so a command may fail
// for that deadline a moment before ctx itself is done.
func ended(ctx context.Context) bool {
	if ctx.Err() != nil {
		return true
	}
	deadline, ok := ctx.Deadline()
	return ok && !time.Now().Before(deadline)
}

// parseURL parses s, a Redis URL. An @ past the host (in the path, the
// query or the fragment) is refused as a URL that does not parse: it is a
// password's / ? or # left unencoded, which ended the user part early, and
// what follows it, a piece of the password, would be read as the host or
// the path, and quoted in messages.
func parseURL(s string) (*url.URL, error) {
	u, err := url.Parse(s)
	if err != nil {
		return nil, urlError(s, err)
	}
	if misread(s) {
		return nil, fmt.Errorf("broker: redis URL %s holds an @ past its host: in a password, and in the query (sentinel_username=svc%%40corp), write @ as %%40, and / ? # %% in a password percent-encoded too", redactURL(s))
	}
	if strings.Contains(s, "#") {
		// A Redis URL has no fragment: this # began a password's end,
		// which the password would lose (sentinel_password=pa#ss).
		return nil, fmt.Errorf("broker: redis URL %s holds a #: in a password, and in the query (sentinel_password=pa%%23ss), write # as %%23", redactURL(s))
	}
	return u, nil
}

// misread says whether s, a Redis URL, holds an @ past its host: a password
// that ended the user part early (see parseURL).
func misread(s string) bool {
	_, rest, _ := strings.Cut(s, "://")
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		return strings.Contains(rest[i:], "@")
	}
	return false
}

// urlError is the error of s, a Redis URL that does not parse, for err.
// The parser's words may quote a piece of the password (a port that is
// not a number, when the password holds a slash): of a URL with a user
// part, they are left out.
func urlError(s string, err error) error {
	if strings.Contains(s, "@") {
		return fmt.Errorf("broker: redis URL %s does not parse: is the port a number, and are / ? # @ %% in the password percent-encoded?", redactURL(s))
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	return fmt.Errorf("broker: redis URL %s: %v", redactURL(s), err)
}

// TLSURL reports whether url is a rediss:// URL, which Redis is reached
// over TLS by. A scheme's case does not matter (REDISS:// is one too).
func TLSURL(url string) bool { return hasScheme(url, "rediss://") }

// hasScheme reports whether url begins with scheme, in any case.
func hasScheme(url, scheme string) bool {
	return len(url) >= len(scheme) && strings.EqualFold(url[:len(scheme)], scheme)
}

// redactURL is s, a Redis URL, with its passwords (of the user, and
// sentinel_password) replaced by xxxxx, for messages. Of a URL that does
// not parse, or holds an @ past its host (see parseURL), and might hold a
// password, it keeps the scheme alone: where the password ends is
// anybody's guess.
func redactURL(s string) string {
	u, err := url.Parse(s)
	// Past a #, a password's end may follow (sentinel_password=pa#ss).
	if err != nil || misread(s) || strings.Contains(s, "#") {
		if !strings.Contains(s, "@") && !strings.Contains(s, "password") {
			return s
		}
		if i := strings.Index(s, "://"); i >= 0 {
			return s[:i+3] + "…"
		}
		return "…"
	}
	if _, err := url.ParseQuery(u.RawQuery); err != nil && strings.Contains(u.RawQuery, "password") {
		// A pair that does not parse is not in u.Query(): it would be
		// shown as it is.
		u.RawQuery = "…"
		return u.Redacted()
	}
	if q := u.Query(); q.Has("sentinel_password") || q.Has("password") {
		for k := range q {
			if !namedBeside(k) {
				// A piece of the password, cut off by an unencoded &?
				u.RawQuery = "…"
				return u.Redacted()
			}
		}
		for _, k := range []string{"sentinel_password", "password"} {
			if q.Has(k) {
				q.Set(k, "xxxxx")
			}
		}
		u.RawQuery = q.Encode()
	}
	return u.Redacted()
}

// namedBeside says whether redactURL shows the query option name beside a
// password in the query: the options of a Sentinel's URL.
func namedBeside(name string) bool {
	switch name {
	case "master_name", "addr", "sentinel_username", "sentinel_password", "password", "db", "client_name":
		return true
	}
	return false
}

// The fields of an item entry on the items stream. The header is
// "FRONT SEQ INDEX DEADLINE TTL": the front end's id (where the answer
// goes), the request's number there, the item's place in the request, its
// deadline in unix microseconds (0 for none), and the front end's
// ReplyTTL in ms (how long its answers may wait unread). One field for
// them spares Redis and the node four fields per item.
const (
	fieldHeader = "h" // the header
	fieldKey    = "k" // the batch key; absent for none
	fieldValue  = "v" // the item's bytes
)

// itemHeader is an item's header, read.
type itemHeader struct {
	front, seq, index string
	deadline          int64         // unix µs; 0 or less for none
	ttl               time.Duration // 0: the node's own ReplyTTL
}

// parseHeader reads an item's header. ok is false when it is malformed: a
// field missing, a front end's id not of the form front ends write (see
// frontID), a request number or place that is not a decimal number, or a
// deadline that is not a number. The item's front end is returned when
// its id and the request number and place read, so that it can be told;
// otherwise none, so that no reply stream is written for an id that no
// front end has (an item written by hand named "garbage", and its answer
// made the key PREFIX:reply:garbage). A TTL that is not a positive number
// leaves the node's own, and one past MaxReplyTTL is MaxReplyTTL.
func parseHeader(h string) (hd itemHeader, ok bool) {
	var deadline, ttl string
	hd.front, h, _ = strings.Cut(h, " ")
	hd.seq, h, _ = strings.Cut(h, " ")
	hd.index, h, _ = strings.Cut(h, " ")
	deadline, ttl, _ = strings.Cut(h, " ")
	if !frontID(hd.front) || !decimal(hd.seq) || !decimal(hd.index) {
		hd.front = ""
	}
	d, err := strconv.ParseInt(deadline, 10, 64)
	if t, err := strconv.ParseInt(ttl, 10, 64); err == nil && t > 0 {
		hd.ttl = time.Duration(min(t, MaxReplyTTL.Milliseconds())) * time.Millisecond
	}
	hd.deadline = d
	return hd, hd.front != "" && err == nil
}

// frontIDBytes is the length of a front end's id, in random bytes: it is
// written in lower-case hexadecimal, twice as many characters.
const frontIDBytes = 8

// frontID says whether s is of the form of a front end's id.
func frontID(s string) bool {
	if len(s) != 2*frontIDBytes {
		return false
	}
	for _, c := range []byte(s) {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// decimal says whether s is a number in decimal, as a front end writes a
// request's number and an item's place: digits alone.
func decimal(s string) bool {
	if s == "" || len(s) > 20 {
		return false
	}
	for _, c := range []byte(s) {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// The fields of an entry on a reply stream: the answering node, and its
// answers packed in one field (see answers.go), or one answer in fields of
// its own (fieldSeq, fieldIndex, and fieldOutput or fieldCode and
// fieldMessage).
const (
	fieldSeq     = "q" // one answer's request number
	fieldIndex   = "i" // one answer's place in its request
	fieldNode    = "n" // the answering node's name
	fieldWorkers = "w" // the answering node's number of workers
	fieldBusy    = "b" // "1" when the node had no idle worker as it answered
	fieldAnswers = "a" // the answers, packed
	fieldOutput  = "o" // the output's bytes, on success
	fieldCode    = "e" // the error's kind (see codes), on failure
	fieldMessage = "m" // the error's text, on failure
)

// codes name supervisor's sentinel errors on the wire, so that a front end
// answers a remote failure as a local supervisor would.
var codes = []struct {
	code string
	err  error
}{
	{"deadline", supervisor.ErrDeadline},
	{"poison", supervisor.ErrPoison},
	{"model", supervisor.ErrModel},
	{"model_failed", supervisor.ErrModelFailed},
	{"bad_request", supervisor.ErrBadRequest},
	{"too_large", supervisor.ErrTooLarge},
	{"canceled", supervisor.ErrCanceled},
}

// codeOf returns the wire code of err: its sentinel's, or model_failed.
func codeOf(err error) string {
	for _, c := range codes {
		if errors.Is(err, c.err) {
			return c.code
		}
	}
	return "model_failed"
}

// remoteError is an item's failure as a node reported it.
type remoteError struct {
	msg string
	is  error // the sentinel it wraps
}

func (e *remoteError) Error() string { return e.msg }
func (e *remoteError) Unwrap() error { return e.is }

func errorOf(code, msg string) error {
	for _, c := range codes {
		if c.code == code {
			return &remoteError{msg: msg, is: c.err}
		}
	}
	return &remoteError{msg: msg, is: supervisor.ErrModelFailed}
}

// alike returns errs with the failures that nodes reported alike, of one
// kind and text, made the one error value: a batch that failed as a whole
// gives each of its items the same error, which crosses Redis as a copy
// for each, and supervisor.FirstItemError then tells every item's failure
// from that of one, as for a local Streamer.
func alike(errs []error) []error {
	if len(errs) < 2 {
		return errs
	}
	first := map[remoteError]error{}
	out := make([]error, len(errs))
	for i, err := range errs {
		out[i] = err
		if r, ok := err.(*remoteError); ok {
			if e, seen := first[*r]; seen {
				out[i] = e
			} else {
				first[*r] = err
			}
		}
	}
	return out
}

// itemError strips the *ItemError of a one-item request: the front end
// wraps the cause again with the item's place in its own request.
func itemError(err error) error {
	if err == nil {
		return nil // most items: no errors.As, whose target escapes
	}
	var ie *supervisor.ItemError
	if errors.As(err, &ie) {
		return ie.Err
	}
	return err
}

// poisonHash names an item in the shared quarantine.
func poisonHash(key string, data []byte) string {
	h := sha256.New()
	h.Write([]byte(key))
	h.Write([]byte{0})
	h.Write(data)
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// str reads a field of an entry as go-redis hands it over.
func str(values map[string]any, field string) string {
	s, _ := values[field].(string)
	return s
}

func unixMs(t time.Time) string { return strconv.FormatInt(t.UnixMilli(), 10) }
