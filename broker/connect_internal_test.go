package broker

import (
	"strings"
	"testing"
)

func TestConnectNamesTheRedisItUses(t *testing.T) {
	for _, tc := range []struct{ url, where string }{
		{"redis://:pw@10.0.0.1:6379/0", "10.0.0.1:6379"},
		{"redis://10.0.0.1:26379/0?master_name=main&addr=10.0.0.2:26379", `the master "main" of sentinels 10.0.0.1:26379,10.0.0.2:26379`},
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
	} {
		_, _, err := connect(Config{URL: tc.url}, 1)
		if err == nil || !strings.Contains(err.Error(), tc.why) {
			t.Errorf("connect(%s): %v; want an error about %s", tc.url, err, tc.why)
			continue
		}
		if strings.Contains(err.Error(), "secret") {
			t.Errorf("connect(%s): %v; the error shows the password", tc.url, err)
		}
	}
}
