package broker

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// ErrUnsupportedRedis says that the Redis named cannot serve as the broker,
// whatever is retried: it runs as a cluster, or it is older than 6.2.
var ErrUnsupportedRedis = errors.New("broker: unsupported redis")

// probe asks Redis what it is, once it answers (see check), and says why
// it cannot serve: a cluster would refuse the scripts, which touch several
// keys, and a Redis before 6.2 lacks commands the nodes use (XAUTOCLAIM,
// ZMSCORE, XTRIM MINID). Its verdict stands for the process's life.
type probe struct {
	done    atomic.Bool
	verdict atomic.Pointer[error] // set when done, and the Redis cannot serve
	logged  atomic.Bool           // the verdict was logged, by a node
}

// unfit returns the verdict: why the Redis cannot serve, or nil.
func (p *probe) unfit() error {
	if v := p.verdict.Load(); v != nil {
		return *v
	}
	return nil
}

// check returns why the Redis at where cannot serve, asking it the first
// time it answers: nil while Redis does not answer, or once it was found
// fit.
func (p *probe) check(ctx context.Context, rdb redis.Cmdable, where string) error {
	if p.done.Load() {
		return p.unfit()
	}
	pipe := rdb.Pipeline()
	server := pipe.Info(ctx, "server")
	cluster := pipe.Info(ctx, "cluster")
	known := pipe.Do(ctx, append([]any{"COMMAND", "INFO"}, neededCommands...)...)
	_, _ = pipe.Exec(ctx) // each command's own error is read below
	err := cmp.Or(server.Err(), cluster.Err())
	if err != nil && !refusedCommand(err) {
		return nil // no answer: the commands that follow say why
	}
	// INFO refused (an ACL, a proxy, rename-command): what it tells goes
	// unchecked, but not the commands, which COMMAND INFO tells.
	unseen := err != nil
	var verdict error
	version := infoValue(server.Val(), "redis_version")
	missing := unknownCommands(known)
	switch {
	case !unseen && infoValue(server.Val(), "redis_mode") == "sentinel":
		verdict = fmt.Errorf("%w: redis at %s is a Sentinel, which keeps no data: name the master it watches in the URL, ?master_name=NAME, and streamer follows that master through failovers", ErrUnsupportedRedis, where)
	case !unseen && infoValue(cluster.Val(), "cluster_enabled") == "1":
		verdict = fmt.Errorf("%w: redis at %s runs as a cluster, which streamer does not support (its scripts use several keys at once): give it a Redis of its own, with replicas and Sentinel for failover", ErrUnsupportedRedis, where)
	case !unseen && olderThan(version, 6, 2):
		verdict = fmt.Errorf("%w: redis at %s is version %s; streamer needs 6.2 or later", ErrUnsupportedRedis, where, version)
	case len(missing) == 1:
		verdict = fmt.Errorf("%w: redis at %s does not know the command %s, which streamer needs (renamed away with rename-command?): give streamer a Redis that runs it", ErrUnsupportedRedis, where, missing[0])
	case len(missing) > 1:
		verdict = fmt.Errorf("%w: redis at %s does not know the commands %s, which streamer needs (renamed away with rename-command?): give streamer a Redis that runs them", ErrUnsupportedRedis, where, strings.Join(missing, ", "))
	}
	if verdict != nil {
		p.verdict.Store(&verdict)
	}
	p.done.Store(true)
	return verdict
}

// neededCommands are the commands front ends and nodes run, themselves or
// in their scripts, but for the few they serve without (TIME, INFO).
var neededCommands = []any{
	"xadd", "xreadgroup", "xread", "xack", "xdel", "xlen", "xrange", "xrevrange", "xtrim",
	"xautoclaim", "xclaim", "xpending", "xgroup", "xinfo",
	"zadd", "zrem", "zrange", "zremrangebyscore", "zmscore", "zscore", "zcount",
	"sadd", "srem", "smembers", "sismember", "hset", "hmget", "get", "set", "del", "expire", "pexpire",
	"evalsha", "eval", "script", "multi", "exec",
}

// unknownCommands returns, in capitals, the commands of neededCommands
// that known, the answer of COMMAND INFO for them, says Redis does not
// know (a nil entry): none when COMMAND was refused or went unanswered.
func unknownCommands(known *redis.Cmd) []string {
	infos, err := known.Slice()
	if err != nil || len(infos) != len(neededCommands) {
		return nil
	}
	var missing []string
	for i, info := range infos {
		if info == nil {
			missing = append(missing, strings.ToUpper(neededCommands[i].(string)))
		}
	}
	return missing
}

// infoValue returns the value of field name in an INFO reply, or "".
func infoValue(info, name string) string {
	for line := range strings.Lines(info) {
		if value, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return value
		}
	}
	return ""
}

// olderThan says whether version (as "6.0.16") is before major.minor; a
// version it cannot read is not.
func olderThan(version string, major, minor int) bool {
	parts := strings.SplitN(version, ".", 3)
	if len(parts) < 2 {
		return false
	}
	gotMajor, err1 := strconv.Atoi(parts[0])
	gotMinor, err2 := strconv.Atoi(parts[1])
	if err1 != nil || err2 != nil {
		return false
	}
	return gotMajor < major || (gotMajor == major && gotMinor < minor)
}

// ErrRefused says that Redis answers but refuses this client: the user or
// the password (WRONGPASS, NOAUTH), or the database number. Retries do not
// mend it: the URL, or Redis's configuration, must change.
var ErrRefused = errors.New("broker: redis refuses this client")

// ErrPermission says that Redis refuses the client's user a command or a
// key that streamer needs (NOPERM): its ACL lacks part of what the
// README's "Many machines" lists. Unlike ErrRefused, it is not taken for
// a mistake in the URL: the front end or node runs on, and serves once an
// operator grants it. It comes with supervisor.ErrUnavailable, from
// Start and from the requests refused for it.
var ErrPermission = errors.New("broker: redis refuses this client's user a permission")

// ErrUntrusted says that the client refuses Redis's TLS certificate: no
// CA it trusts signed it, or it does not name the host dialled.
var ErrUntrusted = errors.New("broker: redis's certificate is not trusted")

// Refusal returns err, an error of a front end's or a node's Start, as an
// ErrRefused that says what to change when Redis refused the client itself
// (or, asked for a master, the Sentinels know none of that name), as an
// ErrUntrusted when the client refused Redis's certificate, as an
// ErrUnsupportedRedis when Redis does not know a command streamer needs,
// and nil otherwise. At start, this is a mistake in the URL or the flags to report
// at once; once serving, the same refusal (a password changed on Redis, a
// certificate replaced) is an outage like any other, which ends when it
// is mended. Start returns its errors so worded already, so that
// errors.Is tells them apart; Refusal returns such an error as it is.
func Refusal(err error) error {
	for _, refused := range []error{ErrRefused, ErrUntrusted, ErrUnsupportedRedis} {
		if errors.Is(err, refused) {
			return err
		}
	}
	if cert := new(tls.CertificateVerificationError); errors.As(err, &cert) {
		if host := new(x509.HostnameError); errors.As(err, host) {
			// Through Sentinels, the host dialled is the master's address
			// as they give it, not the URL's.
			return fmt.Errorf("%w (it does not name %s, the host dialled: the URL's, or through Sentinels the master's address as they give it): %w", ErrUntrusted, host.Host, err)
		}
		return fmt.Errorf("%w (is --broker-ca the CA that signed it, or the system's?): %w", ErrUntrusted, err)
	}
	var answer redis.Error
	if !errors.As(err, &answer) {
		return nil
	}
	switch msg := answer.Error(); {
	case strings.HasPrefix(msg, "ERR unknown command"):
		// Of a Sentinel asking for a password, whose INFO the probe
		// could not read: it knows no data command.
		return fmt.Errorf("%w: it does not know a command streamer needs: is it a Sentinel (then name the master it watches, ?master_name=NAME), or a server that is not Redis 6.2 or later, or a command renamed away? %w", ErrUnsupportedRedis, err)
	case errors.Is(err, redis.Nil) && bySentinels(err):
		return fmt.Errorf("%w (the Sentinels know no master of the URL's master_name: is it the name in their sentinel monitor setting?): %w", ErrRefused, err)
	case (strings.HasPrefix(msg, "WRONGPASS") || strings.HasPrefix(msg, "NOAUTH") || strings.HasPrefix(msg, "ERR AUTH")) && bySentinels(err):
		return fmt.Errorf("%w (the Sentinels' user and password: are they the URL's sentinel_username and sentinel_password?): %w", ErrRefused, err)
	case strings.HasPrefix(msg, "WRONGPASS"), strings.HasPrefix(msg, "NOAUTH"), strings.HasPrefix(msg, "ERR AUTH"):
		return fmt.Errorf("%w (its user and password: are they those of the URL?): %w", ErrRefused, err)
	case strings.HasPrefix(msg, "ERR DB index"), strings.HasPrefix(msg, "ERR invalid DB index"):
		return fmt.Errorf("%w (its database number: Redis has as many as its setting databases, 16 unless set): %w", ErrRefused, err)
	}
	return nil
}

// bySentinels says whether err came from the Sentinels, asked for the
// master's address, rather than from the master: the client library's
// words for it, as it wraps their answers.
func bySentinels(err error) bool {
	return strings.Contains(err.Error(), "sentinels specified in configuration")
}

// Check asks the Redis cfg names, once, whether it can serve: it connects
// as a front end or a node does (with the URL's user, password and
// database, over TLS for rediss://), and asks what the server is. It
// returns what their Start would return for the same answers: nil when
// Redis serves; an error that Refusal returns as it is (ErrRefused,
// ErrUntrusted, ErrUnsupportedRedis) when no retry mends it; or one that
// is supervisor.ErrUnavailable while Redis does not answer, or refuses
// its user a permission (ErrPermission). A server checks so before its
// workers load the model, which may take minutes, so that a wrong
// password is said at once.
func Check(ctx context.Context, cfg Config) error {
	c, err := cfg.withDefaults()
	if err != nil {
		return err
	}
	rdb, where, err := connect(c, 1)
	if err != nil {
		return err
	}
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	err = rdb.Ping(ctx).Err()
	if err == nil {
		err = new(probe).check(ctx, rdb, where)
	}
	return startError(ctx, err, where)
}
