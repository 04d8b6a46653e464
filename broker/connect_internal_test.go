package broker

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestConnectNamesTheRedisItUses(t *testing.T) {
	for _, tc := range []struct{ url, where string }{
		{"redis://:pw@10.0.0.1:6379/0", "10.0.0.1:6379"},
		{"redis://10.0.0.1:6379", "10.0.0.1:6379"},
		{"redis://:pw@10.0.0.1:6379/1", "10.0.0.1:6379/1"},
		{"rediss://10.0.0.1:6379?db=12", "10.0.0.1:6379/12"},
		{"redis://10.0.0.1:26379/0?master_name=main&addr=10.0.0.2:26379", `the master "main" of sentinels 10.0.0.1:26379,10.0.0.2:26379`},
		{"redis://10.0.0.1:26379/3?master_name=main", `the master "main" (database 3) of sentinels 10.0.0.1:26379`},
	} {
		rdb, where, err := connect(Config{URL: tc.url}, 1)
		if err != nil {
			t.Errorf("connect(%s): %v", tc.url, err)
			continue
		}
		_ = rdb.Close()
		if where != tc.where {
			t.Errorf("connect(%s) names it %q, want %q", tc.url, where, tc.where)
		}
	}
}

func TestConnectRefusesBadURLsSayingWhy(t *testing.T) {
	for _, tc := range []struct{ url, why string }{
		{"http://10.0.0.1:6379/0", "scheme"},
		{"redis://:secret@10.0.0.1:26379/0?master_name=", "master_name is empty"},
		{"redis://10.0.0.1:26379/x?master_name=main", "database number"},
		{"redis://10.0.0.1:26379/0?master_name=main&colour=blue", "colour"},
		{"redis://user:secret@10.0.0.1:abc/0", "is the port a number"},
		{"redis://user:se/cret@10.0.0.1:6379/0", "is the port a number"},
		{"redis://user:secret@10.0.0.1:99999/0", "port 99999 out of range"},
		{"redis://user:se%zzret@10.0.0.1:6379/0", "percent-encoded"},
		{"redis://10.0.0.1:abc/0", "invalid port"},
		{"10.0.0.1:6379", "the scheme must be redis://"},
		{" redis://10.0.0.1:6379/0", "the scheme must be redis://"},
		{"redis://:secret@10.0.0.1:6379/x", "database number"},
		{"redis://:secret@10.0.0.1:6379/-1", "database number -1: must not be negative"},
		{"redis://10.0.0.1:6379?db=-2", "database number -2: must not be negative"},
		{"redis://10.0.0.1:26379/-1?master_name=main", "database number -1: must not be negative"},
		// Refused by Redis in other words than a number past its
		// databases: taken for an outage, and retried for ever.
		{"redis://:secret@10.0.0.1:6379/2147483648", "database number 2147483648: Redis has as many as its setting databases"},
		{"redis://10.0.0.1:26379/2147483648?master_name=main", "database number 2147483648: Redis has as many"},
		// Split at the last colon: host fd00: on port 5, retried for ever.
		{"redis://:secret@fd00::5/0", `host "fd00::5": write an IPv6 address in brackets, as in redis://[fd00::5]:6379/0`},
		{"redis://2001:db8::10:6379/0?master_name=main", "write an IPv6 address in brackets"},
		{"redis://10.0.0.1:26379/0?master_name=m&sentinel_password=abc#secret", "write # as %23"},
		{"redis://:abc@10.0.0.1:6379/0#secret", "write # as %23"},
	} {
		_, _, err := connect(Config{URL: tc.url}, 1)
		if err == nil || !strings.Contains(err.Error(), tc.why) {
			t.Errorf("connect(%s): %v; want an error about %s", tc.url, err, tc.why)
			continue
		}
		if strings.Contains(err.Error(), "secret") || strings.Contains(err.Error(), "se/") {
			t.Errorf("connect(%s): %v; the error shows the password", tc.url, err)
		}
	}
}

// TestConnectShowsNoPieceOfAPassword: a URL whose password holds a
// character that ends the user part early (/ ? # @, unencoded) or a bad
// escape is refused, and no piece of the password shows in the error.
func TestConnectShowsNoPieceOfAPassword(t *testing.T) {
	pieces := []string{"Alpha", "Bravo", "Charlie", "7391"}
	for _, url := range []string{
		"redis://u:Alpha@Bravo/Charlie@127.0.0.1:16390/0",
		"redis://u:Alpha@Bravo/0@127.0.0.1:6379",
		"redis://u:Alpha@Bravo/Charlie@127.0.0.1:6379/0?master_name=main",
		"rediss://:Alpha@Bravo?Charlie@127.0.0.1:6379/0",
		"redis://u:Alpha/Bravo@127.0.0.1:6379/0",
		"redis://u:7391/Bravo@127.0.0.1:6379/0",
		"redis://u:7391?Bravo@127.0.0.1:6379/0",
		"redis://u:7391#Bravo@127.0.0.1:6379/0",
		"redis://u:Alpha#Bravo@127.0.0.1:6379/0",
		"redis://u:Alpha%zzBravo@127.0.0.1:6379/0",
		"redis://:Alpha/Bravo@127.0.0.1:6379/0?master_name=main",
	} {
		rdb, _, err := connect(Config{URL: url}, 1)
		if err == nil {
			_ = rdb.Close()
			t.Errorf("connect(%s) took it; want it refused, as its password ends the user part early", url)
			continue
		}
		for _, piece := range pieces {
			if strings.Contains(err.Error(), piece) {
				t.Errorf("connect(%s): %v; the error shows %q, a piece of the password", url, err, piece)
			}
		}
	}
}

// TestConnectRefusesQueryOptionsItWouldLose: an option that the client
// would take from the query and then lose (one streamer sets itself, a
// pair that does not decode), a database named twice, and skip_verify are
// refused, naming the option; a db= alone, or the same as the path's, is
// taken.
func TestConnectRefusesQueryOptionsItWouldLose(t *testing.T) {
	for _, tc := range []struct{ url, why string }{
		{"redis://10.0.0.1:6379/0?read_timeout=30s", "query option read_timeout: streamer sets it itself"},
		{"redis://10.0.0.1:6379/0?pool_size=1", "query option pool_size: streamer sets it itself"},
		{"redis://10.0.0.1:6379/0?max_retries=5", "query option max_retries: streamer sets it itself"},
		{"redis://10.0.0.1:6379/0?dial_timeout=1s&write_timeout=1s", "streamer sets it itself"},
		{"redis://10.0.0.1:26379/0?master_name=main&read_timeout=30s", "query option read_timeout: streamer sets it itself"},
		{"redis://10.0.0.1:26379/0?master_name=main&context_timeout_enabled=false", "query option context_timeout_enabled"},
		{"redis://10.0.0.1:6379/0?db=5", "the database is named twice"},
		{"redis://10.0.0.1:26379/0?master_name=main&db=5", "the database is named twice"},
		{"redis://10.0.0.1:6379/0?db=abc", "query option db=abc: not a database number"},
		{"redis://10.0.0.1:6379/0?db=-1", "query option db=-1: a database number must not be negative"},
		{"redis://10.0.0.1:26379/0?master_name=main&sentinel_password=se%zzcret", "query option sentinel_password does not parse"},
		{"redis://10.0.0.1:26379/0?master_name=main&sentinel_password=se;cret", "query option sentinel_password does not parse"},
		{"redis://10.0.0.1:26379/0?master_name=main&sentinel_password=se&cr%zzet", "the query does not parse after a password"},
		{"redis://10.0.0.1:26379/0?master_name=main&sentinel_password=s&e&cret=%zz", "the query does not parse after a password"},
		{"redis://10.0.0.1:26379/0?master_name=main&sentinel_password=se&cret", "unexpected option in the query (not named"},
		{"redis://10.0.0.1:6379/0?client_name=a%zz", "query option client_name does not parse"},
		{"rediss://10.0.0.1:6379/0?skip_verify=true", "query option skip_verify: streamer does not turn off the check"},
		{"rediss://10.0.0.1:26379/0?master_name=main&skip_verify=true", "query option skip_verify"},
		{"redis://10.0.0.1:26379/0?master_name=main&sentinel_username=svc@corp", "holds an @ past its host: in a password, and in the query"},
		// Given twice: the client takes the last, the checks the first.
		{"redis://10.0.0.1:6379/1?db=1&db=2", "query option db is given twice"},
		{"redis://10.0.0.1:26379/0?master_name=a&master_name=b", "query option master_name is given twice"},
		{"redis://10.0.0.1:26379/0?master_name=main&sentinel_password=se&cret&cret", "a query option is given twice (not named"},
		// Sentinels' options without a master to name.
		{"redis://10.0.0.1:6379/0?sentinel_password=secret", "query option sentinel_password is for Sentinels: it goes with ?master_name=NAME"},
		{"redis://10.0.0.1:6379/0?sentinel_username=svc", "query option sentinel_username is for Sentinels"},
		{"redis://10.0.0.1:6379/0?addr=10.0.0.2:26379", "query option addr is for Sentinels"},
		{"redis://10.0.0.1:26379/0?master_name=main&addr=10.0.0.2:99999", "query option addr=10.0.0.2:99999: not a Sentinel's host:port"},
		{"redis://10.0.0.1:26379/0?master_name=main&addr=10.0.0.2", "query option addr=10.0.0.2: not a Sentinel's host:port"},
	} {
		_, _, err := connect(Config{URL: tc.url}, 1)
		if err == nil || !strings.Contains(err.Error(), tc.why) {
			t.Errorf("connect(%s): %v; want an error saying %q", tc.url, err, tc.why)
			continue
		}
		if strings.Contains(err.Error(), "cret") {
			t.Errorf("connect(%s): %v; the error shows a piece of the password", tc.url, err)
		}
	}
	for url, db := range map[string]int{
		"redis://10.0.0.1:6379?db=5":                      5,
		"redis://10.0.0.1:6379/5?db=5":                    5,
		"redis://10.0.0.1:26379?master_name=main&db=3":    3,
		"redis://10.0.0.1:6379/2?client_name=streamer-a1": 2,
		"redis://10.0.0.1:6379/4?&&":                      4, // stray &s: no option given twice
		"redis://10.0.0.1:6379/0?db=00":                   0, // the same number, written otherwise
		"Redis://10.0.0.1:6379/6":                         6, // a scheme's case does not matter
		"REDIS://10.0.0.1:6379/7":                         7,
	} {
		rdb, _, err := connect(Config{URL: url}, 1)
		if err != nil {
			t.Errorf("connect(%s): %v; want it taken", url, err)
			continue
		}
		if got := rdb.Options().DB; got != db {
			t.Errorf("connect(%s) uses database %d; want %d", url, got, db)
		}
		_ = rdb.Close()
	}
}

func TestRedactURLHidesThePasswords(t *testing.T) {
	for in, want := range map[string]string{
		"redis://user:secret@h:1/0":                               "redis://user:xxxxx@h:1/0",
		"redis://:secret@h:1/0?a=b":                               "redis://:xxxxx@h:1/0?a=b",
		"redis://h:1/0?master_name=m&sentinel_password=secret":    "redis://h:1/0?master_name=m&sentinel_password=xxxxx",
		"rediss://user:p@ss@h:abc/0":                              "rediss://…",
		"redis://u:pa/ss@h:1/0":                                   "redis://…",
		"redis://h:abc/0?sentinel_password=secret":                "redis://…",
		"redis://user@h:1/0":                                      "redis://user@h:1/0",
		"redis://h:1/0":                                           "redis://h:1/0",
		"10.0.0.1:6379":                                           "10.0.0.1:6379",
		"redis://u:se%zz@h/0?master_name=m":                       "redis://…",
		"redis://u:my@secret/word@h:1/0":                          "redis://…",
		"redis://h:1/0?master_name=m&sentinel_password=se%zz":     "redis://h:1/0?…",
		"redis://h:1/0?master_name=m&sentinel_password=se&cret":   "redis://h:1/0?…",
		"redis://h:1/0?master_name=m&sentinel_password=se#cret":   "redis://…",
		"redis://h:99999/0?master_name=&sentinel_password=a#cret": "redis://…",
		"redis://h:1/0#frag":                                      "redis://h:1/0#frag",
	} {
		if got := redactURL(in); got != want {
			t.Errorf("redactURL(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestAFailoverURLsUserIsTheMastersAndTheSentinelsHaveTheirOwn(t *testing.T) {
	rdb, _, err := connect(Config{URL: "redis://app:secret@10.0.0.1:26379/0?master_name=main&sentinel_password=watch"}, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	// The failover client's options are those of the master's connections.
	if o := rdb.Options(); o.Username != "app" || o.Password != "secret" {
		t.Errorf("the master's user and password: %q, %q; want app, secret", o.Username, o.Password)
	}
	_, _, err = connect(Config{URL: "redis://10.0.0.1:26379/0?master_name=main&password=secret"}, 1)
	if err == nil || !strings.Contains(err.Error(), "give the master's user and password as for one Redis") || strings.Contains(err.Error(), "secret") {
		t.Errorf("a master password in the query: %v; want it refused, saying where it goes, without showing it", err)
	}
}

// TestAnUntrustedCertificateSaysWhy: Refusal says what to check for a
// certificate refused: the CA when no CA trusted signed it, and the name
// dialled when the certificate does not hold it, which through Sentinels is
// the master's address as they give it, not the URL's host.
func TestAnUntrustedCertificateSaysWhy(t *testing.T) {
	for _, c := range []struct {
		name string
		err  error
		want string
	}{
		{"another CA", &tls.CertificateVerificationError{Err: x509.UnknownAuthorityError{}}, "is --broker-ca the CA that signed it"},
		{"another name", &tls.CertificateVerificationError{Err: x509.HostnameError{Certificate: &x509.Certificate{}, Host: "127.0.0.1"}}, "it does not name 127.0.0.1, the host dialled"},
	} {
		err := Refusal(fmt.Errorf("redis at the master %q of sentinels localhost:26379: %w", "main", c.err))
		if !errors.Is(err, ErrUntrusted) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v; want ErrUntrusted saying %q", c.name, err, c.want)
		}
	}
}

// A rediss:// URL in any case is reached over TLS, as --broker-ca takes it.
func TestConnectTakesTheTLSSchemeInAnyCase(t *testing.T) {
	for _, url := range []string{"rediss://10.0.0.1:6379/0", "REDISS://10.0.0.1:6379/0", "Rediss://10.0.0.1:6379/0"} {
		rdb, _, err := connect(Config{URL: url}, 1)
		if err != nil {
			t.Errorf("connect(%s): %v; want it taken", url, err)
			continue
		}
		if rdb.Options().TLSConfig == nil || !TLSURL(url) {
			t.Errorf("connect(%s) does not use TLS (TLSURL %v)", url, TLSURL(url))
		}
		_ = rdb.Close()
	}
	if TLSURL("redis://10.0.0.1:6379/0") {
		t.Error("TLSURL takes redis:// for TLS")
	}
}

// FuzzConnectHidesThePassword: whatever surrounds a password in a Redis
// URL, unencoded characters included, no error of connect and no name it
// gives its Redis shows the password.
func FuzzConnectHidesThePassword(f *testing.F) {
	for _, seed := range [][2]string{{"", ""}, {"a", "#b"}, {"a/", "?b"}, {"%zz", ""}, {"a&", "=b"}, {"", "@x"}} {
		f.Add(seed[0], seed[1], false)
		f.Add(seed[0], seed[1], true)
	}
	const secret = "Zx7Qsecret"
	f.Fuzz(func(t *testing.T, before, after string, sentinel bool) {
		password := before + secret + after
		url := "redis://u:" + password + "@127.0.0.1:6379/0"
		if sentinel {
			url = "redis://127.0.0.1:26379/0?master_name=m&sentinel_password=" + password
		}
		rdb, where, err := connect(Config{URL: url}, 1)
		if rdb != nil {
			_ = rdb.Close()
		}
		if err != nil && strings.Contains(err.Error(), secret) || strings.Contains(where, secret) {
			t.Errorf("connect(%q): %q %v; shows the password", url, where, err)
		}
	})
}
