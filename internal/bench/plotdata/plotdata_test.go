package plotdata

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestRoundTrip(t *testing.T) {
	want := Data{
		Points:     []Point{{At: -3 * time.Millisecond, Latency: 5 * time.Millisecond}, {At: time.Second, Latency: time.Microsecond}},
		BatchSizes: map[int]uint64{1: 7, 64: 1 << 40},
	}
	var buf bytes.Buffer
	if err := Write(&buf, want); err != nil {
		t.Fatal(err)
	}
	got, err := Read(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("read %+v; want %+v", got, want)
	}
}

func TestReadRefusesOtherBytes(t *testing.T) {
	for _, input := range []string{"", "PNG\x00not gob", "\x03\xff\x82"} {
		if _, err := Read(strings.NewReader(input)); err == nil || !strings.Contains(err.Error(), "read plot data") {
			t.Errorf("Read(%q) = %v; want an error that says read plot data", input, err)
		}
	}
}

// FuzzRead holds the decoder to returning, on any bytes, data or an error.
func FuzzRead(f *testing.F) {
	var buf bytes.Buffer
	_ = Write(&buf, Data{Points: []Point{{At: 1, Latency: 2}}, BatchSizes: map[int]uint64{3: 4}})
	f.Add(buf.Bytes())
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, input []byte) {
		_, _ = Read(bytes.NewReader(input))
	})
}
