package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"

	"github.com/streamer-dev/streamer/internal/repeats"
	"github.com/streamer-dev/streamer/supervisor/httpapi"
)

// envAuthToken is the environment variable that may hold the API token, so
// that it need not show in the process list as --auth-token would.
const envAuthToken = "STREAMER_AUTH_TOKEN"

// securityOptions are the flags of streamer serve that guard the API: a
// bearer token and HTTPS.
type securityOptions struct {
	authToken     secretFlag
	authTokenFile string
	tlsCert       string
	tlsKey        string
}

func addSecurityFlags(f *pflag.FlagSet, o *securityOptions) {
	f.Var(&o.authToken, "auth-token", "require the header Authorization: Bearer TOKEN on every endpoint but the health routes (/healthz, /readyz, /v2/health/live, /v2/health/ready) and the status page / (also $"+envAuthToken+" or --auth-token-file, which keep it out of the process list)")
	f.StringVar(&o.authTokenFile, "auth-token-file", "", "read the token of --auth-token from this file (surrounding whitespace trimmed); read again when it changes, and on SIGHUP")
	f.StringVar(&o.tlsCert, "tls-cert", "", "serve HTTPS with this PEM certificate (chain) file; needs --tls-key; reloaded when it or the key changes, and on SIGHUP")
	f.StringVar(&o.tlsKey, "tls-key", "", "the PEM private key of --tls-cert")
}

// secretFlag is a string flag that remembers whether it was given, so that
// an empty value given on purpose is refused rather than taken for none, and
// that never prints its value in help or errors.
type secretFlag struct {
	value string
	set   bool
}

func (s *secretFlag) Set(v string) error { s.value, s.set = v, true; return nil }
func (s *secretFlag) String() string     { return "" }
func (s *secretFlag) Type() string       { return "string" }

// security is what the security flags resolved to before the server
// starts, and what a change on disk or SIGHUP reads again: the token's
// file and the certificate (see watch and reload).
type security struct {
	token     *httpapi.Token // nil: no token required
	tokenFile string         // the token's file, read again when it changes and on SIGHUP; "": the token came otherwise
	cert      *certificate   // nil: plain HTTP
	log       *slog.Logger

	// The files read again when they change (see watch), or on SIGHUP:
	// the certificate and its key, and the token's; each without files
	// when not given.
	filesMu          sync.Mutex
	pair, tokenFiles fileGroup

	// The requests and gRPC calls refused for the token, counted for
	// /metrics and logged, held back as they repeat: a client guessing
	// the token shows.
	refusedHTTP, refusedGRPC atomic.Uint64
	refusals                 repeats.Lines
}

// prepare resolves the token and loads the certificate, so that a mistake
// in them stops the server before any worker starts. lookupEnv is
// os.LookupEnv outside tests.
func (o securityOptions) prepare(lookupEnv func(string) (string, bool), log *slog.Logger) (*security, error) {
	s := &security{tokenFile: o.authTokenFile, log: log}
	// Stamped before they are read: a change meanwhile is read again.
	if o.authTokenFile != "" {
		s.tokenFiles.files = watchFiles(o.authTokenFile)
	}
	if o.tlsCert != "" && o.tlsKey != "" {
		s.pair.files = watchFiles(o.tlsCert, o.tlsKey)
	}
	token, err := o.token(lookupEnv)
	if err != nil {
		return nil, err
	}
	if token != "" {
		s.token = httpapi.NewToken(token)
		s.token.Refused = func(remote string, carried bool) { s.refused(&s.refusedHTTP, "HTTP request", remote, carried) }
		s.warnShort(token)
	}
	switch {
	case o.tlsCert == "" && o.tlsKey == "":
	case o.tlsCert == "" || o.tlsKey == "":
		return nil, errors.New("--tls-cert and --tls-key go together: give both to serve HTTPS, or neither")
	default:
		if s.cert, err = newCertificate(o.tlsCert, o.tlsKey, log); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// token returns the API token, trimmed of surrounding whitespace (which no
// client could send), from whichever one source gives it; empty when none
// does.
func (o securityOptions) token(lookupEnv func(string) (string, bool)) (string, error) {
	var sources []string
	var token string
	if o.authToken.set {
		sources = append(sources, "--auth-token")
		if token = strings.TrimSpace(o.authToken.value); token == "" {
			return "", errors.New("--auth-token is empty: give a token, or leave the flag out to serve without one")
		}
	}
	if v, ok := lookupEnv(envAuthToken); ok {
		sources = append(sources, "$"+envAuthToken)
		if token = strings.TrimSpace(v); token == "" {
			return "", fmt.Errorf("$%s is set but empty: give a token, or unset it to serve without one", envAuthToken)
		}
	}
	if o.authTokenFile != "" {
		sources = append(sources, "--auth-token-file")
		var err error
		if token, err = tokenFromFile(o.authTokenFile); err != nil {
			return "", err
		}
	}
	if len(sources) > 1 {
		return "", fmt.Errorf("the API token is given by %s: give it one way only", strings.Join(sources, " and "))
	}
	if len(sources) == 0 {
		return "", nil
	}
	return token, checkToken(sources[0], token)
}

// tokenFromFile reads the token of --auth-token-file from path, trimmed.
func tokenFromFile(path string) (string, error) {
	data, err := readSmallFile("--auth-token-file", path)
	if err != nil {
		return "", err
	}
	token := strings.TrimSpace(string(data))
	if token == "" {
		return "", fmt.Errorf("--auth-token-file %s: the file is empty", path)
	}
	return token, nil
}

// checkToken refuses a token, given by source, that clients would not all
// send alike.
func checkToken(source, token string) error {
	if i := strings.IndexFunc(token, func(r rune) bool { return r < ' ' || r > '~' }); i >= 0 {
		// Most requests would get 401: a header cannot carry a control
		// character, browsers and Python send a header's other
		// characters as Latin-1 where curl and Go send UTF-8, and gRPC's
		// metadata carries ASCII alone.
		r, _ := utf8.DecodeRuneInString(token[i:])
		return fmt.Errorf("the API token of %s holds %q at byte %d, which clients do not all send alike, or at all: want printable ASCII", source, r, i)
	}
	return nil
}

// shortToken is the length under which a token is said to be short: 16
// random characters are 64 bits or more, out of reach of guesses sent to a
// server; fewer may not be.
const shortToken = 16

// warnShort warns when token is short enough to be guessed.
func (s *security) warnShort(token string) {
	if len(token) < shortToken {
		s.log.Warn(fmt.Sprintf("the API token is %d characters long: a short one can be guessed; use %d random characters or more (openssl rand -hex 16 makes 32)", len(token), shortToken))
	}
}

// reload reads again, on SIGHUP, the files the server was started with:
// the certificate's, and the token's. One that fails to load leaves the
// one in use, and the log says why.
func (s *security) reload() {
	s.filesMu.Lock()
	defer s.filesMu.Unlock()
	now := time.Now()
	if s.cert != nil {
		s.pair.readNow()
		err := s.cert.swap()
		if err != nil {
			s.log.Error(certNotReloaded+readAgain, "err", err)
		}
		s.pair.read(err, now, s.log, certNotReloaded, false)
	}
	if s.token != nil && s.tokenFile != "" {
		s.tokenFiles.readNow()
		err := s.swapToken()
		if err != nil {
			s.log.Error(tokenNotReloaded+readAgain, "err", err)
		}
		s.tokenFiles.read(err, now, s.log, tokenNotReloaded, false)
	}
}

// tokenNotReloaded is what the log says of a token file that failed to
// load.
const tokenNotReloaded = "API token not reloaded; still requiring the previous one"

// swapToken reads the token's file again, if the token came from one,
// and returns why it failed to, if it did: the token required so far
// stays then.
func (s *security) swapToken() error {
	if s.token == nil || s.tokenFile == "" {
		return nil
	}
	token, err := tokenFromFile(s.tokenFile)
	if err == nil {
		err = checkToken("--auth-token-file", token)
	}
	switch {
	case err != nil:
		return err
	case s.token.Matches(token):
		s.log.Info("API token file read again: the token is the same", "file", s.tokenFile)
	default:
		s.token.Set(token)
		s.log.Info("API token reloaded: requests from now on need the new one", "file", s.tokenFile)
		s.warnShort(token)
	}
	return nil
}

// refused counts, in count, a request (or call) refused for the token, and
// logs it, at once and then now and then: which client sent no token, or a
// wrong one.
func (s *security) refused(count *atomic.Uint64, what, remote string, carried bool) {
	count.Add(1)
	why := what + " refused: no token"
	if carried {
		why = what + " refused: a wrong token"
	}
	s.refusals.Log(s.log, slog.LevelWarn, why, why, "remote", remote)
}

// collectors are the metrics of several collectors, served as one.
type collectors []prometheus.Collector

func (c collectors) Describe(ch chan<- *prometheus.Desc) {
	for _, one := range c {
		one.Describe(ch)
	}
}

func (c collectors) Collect(ch chan<- prometheus.Metric) {
	for _, one := range c {
		one.Collect(ch)
	}
}

// The metric of the refusals, served on /metrics beside the API's.
var unauthorizedDesc = prometheus.NewDesc("streamer_unauthorized_total",
	"Requests refused 401 (HTTP) and calls refused Unauthenticated (gRPC) for a missing or wrong --auth-token, by protocol: http or grpc. They are counted in no other metric.",
	[]string{"protocol"}, nil)

// Describe sends the description of the refusals' metric.
func (s *security) Describe(ch chan<- *prometheus.Desc) { ch <- unauthorizedDesc }

// Collect sends the refusals' counts, read when /metrics is scraped.
func (s *security) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(unauthorizedDesc, prometheus.CounterValue, float64(s.refusedHTTP.Load()), "http")
	ch <- prometheus.MustNewConstMetric(unauthorizedDesc, prometheus.CounterValue, float64(s.refusedGRPC.Load()), "grpc")
}

// protect puts h behind the token, when there is one.
func (s *security) protect(h http.Handler) http.Handler {
	if s.token == nil {
		return h
	}
	return s.token.Guard(h)
}

// listener serves HTTPS on l when a certificate was given, and l itself
// otherwise. It warns when the API is open to other machines with no token.
func (s *security) listener(l net.Listener) net.Listener {
	if ip, ok := l.Addr().(*net.TCPAddr); ok && !ip.IP.IsLoopback() && s.token == nil {
		s.log.Warn("the API listens beyond this machine with no token: anyone who can reach it can run the model and read its stats; give --auth-token", "listen", l.Addr().String())
	}
	if s.cert == nil {
		return l
	}
	return s.cert.listen(l)
}
