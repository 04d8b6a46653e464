package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/spf13/pflag"

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
	f.StringVar(&o.authTokenFile, "auth-token-file", "", "read the token of --auth-token from this file (surrounding whitespace trimmed)")
	f.StringVar(&o.tlsCert, "tls-cert", "", "serve HTTPS with this PEM certificate (chain) file; needs --tls-key; reloaded on SIGHUP")
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

// security is what the security flags resolved to before the server starts.
type security struct {
	token string       // empty: no token required
	cert  *certificate // nil: plain HTTP
	log   *slog.Logger
}

// prepare resolves the token and loads the certificate, so that a mistake
// in them stops the server before any worker starts. lookupEnv is
// os.LookupEnv outside tests.
func (o securityOptions) prepare(lookupEnv func(string) (string, bool), log *slog.Logger) (*security, error) {
	token, err := o.token(lookupEnv)
	if err != nil {
		return nil, err
	}
	s := &security{token: token, log: log}
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
		data, err := readSmallFile("--auth-token-file", o.authTokenFile)
		if err != nil {
			return "", err
		}
		if token = strings.TrimSpace(string(data)); token == "" {
			return "", fmt.Errorf("--auth-token-file %s: the file is empty", o.authTokenFile)
		}
	}
	if len(sources) > 1 {
		return "", fmt.Errorf("the API token is given by %s: give it one way only", strings.Join(sources, " and "))
	}
	if i := strings.IndexFunc(token, func(r rune) bool { return r < ' ' || r > '~' }); i >= 0 {
		// Most requests would get 401: a header cannot carry a control
		// character, browsers and Python send a header's other
		// characters as Latin-1 where curl and Go send UTF-8, and gRPC's
		// metadata carries ASCII alone.
		r, _ := utf8.DecodeRuneInString(token[i:])
		return "", fmt.Errorf("the API token of %s holds %q at byte %d, which clients do not all send alike, or at all: want printable ASCII", sources[0], r, i)
	}
	return token, nil
}

// protect puts h behind the token, when there is one.
func (s *security) protect(h http.Handler) http.Handler {
	if s.token == "" {
		return h
	}
	return httpapi.RequireToken(s.token, h)
}

// listener serves HTTPS on l when a certificate was given, and l itself
// otherwise. It warns when the API is open to other machines with no token.
func (s *security) listener(l net.Listener) net.Listener {
	if ip, ok := l.Addr().(*net.TCPAddr); ok && !ip.IP.IsLoopback() && s.token == "" {
		s.log.Warn("the API listens beyond this machine with no token: anyone who can reach it can run the model and read its stats; give --auth-token", "listen", l.Addr().String())
	}
	if s.cert == nil {
		return l
	}
	return s.cert.listen(l)
}
