package broker

import (
	"context"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/streamer-dev/streamer/internal/redistest"
)

// TestAKeyOfAnotherTypeIsReplacedSayingWhatItHeld: mend replaces a key of
// any other type with a stream and its group, describing what it held, a
// few values cut short; a key of the right type, or none, it leaves as it
// is; and wrongTypes names the keys of another type.
func TestAKeyOfAnotherTypeIsReplacedSayingWhatItHeld(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	ctx := context.Background()
	long := strings.Repeat("x", 100)
	for _, tc := range []struct {
		name string
		make []string // the command that makes the key "k"
		want string
	}{
		{"string", []string{"SET", "k", "hello"}, `a string of 5 bytes: "hello"`},
		{"long string", []string{"SET", "k", long}, `a string of 100 bytes: "` + long[:64] + `" …`},
		{"hash", []string{"HSET", "k", "zz", "b"}, `a hash of 1 field: "zz" "b"`},
		{"set", []string{"SADD", "k", "m"}, `a set of 1 member: "m"`},
		{"zset", []string{"ZADD", "k", "1", "a", "2", "b", "3", "c", "4", "d", "5", "e"}, `a zset of 5 members: "a" "1" "b" "2" "c" "3" "d" "4" …`},
		{"list", []string{"RPUSH", "k", "one", "two"}, `a list of 2 elements: "one" "two"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rs.Do(t, "DEL", "k")
			rs.Do(t, tc.make...)
			if got := wrongTypes(ctx, rdb, keyType{"k", typeStream}, keyType{"right", typeStream}); got != "k holds "+article(tc.name[strings.LastIndex(tc.name, " ")+1:])+", where streamer keeps a stream" {
				t.Errorf("wrongTypes: %q", got)
			}
			m, err := mend(ctx, rdb, "k", typeStream, nodeGroup)
			if err != nil || !m.replaced(typeStream) || m.String() != tc.want {
				t.Fatalf("mend: %q (replaced %v), %v; want %q", m, m.replaced(typeStream), err, tc.want)
			}
			if typ := rs.Do(t, "TYPE", "k"); typ != "stream" {
				t.Fatalf("the key is a %s once mended; want a stream", typ)
			}
			rs.Do(t, "XADD", "k", "*", "f", "v")
			if got := rs.Do(t, "XREADGROUP", "GROUP", nodeGroup, "c", "STREAMS", "k", ">"); !strings.Contains(got, "f") {
				t.Errorf("a read through the group made anew: %q", got)
			}
		})
	}
	for _, key := range []string{"k", "none"} {
		m, err := mend(ctx, rdb, key, typeStream, nodeGroup)
		if err != nil || m.replaced(typeStream) {
			t.Errorf("mend of %s, a stream or no key: %+v, %v; want it left as it is", key, m, err)
		}
	}
	if typ := rs.Do(t, "TYPE", "none"); typ != "none" {
		t.Errorf("mend made the key it found missing: a %s", typ)
	}
}
