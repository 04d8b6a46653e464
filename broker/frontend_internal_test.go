package broker

import (
	"slices"
	"testing"
)

// A round trip of admissions carries up to admitTripBytes, in runs of the
// script of up to admitChunk items and admitChunkBytes; a request larger
// than a bound goes alone.
func TestAdmissionsAreSplitByItemsAndBytes(t *testing.T) {
	// sized makes a call of n items of size bytes each (their header
	// counted: see callBytes).
	sized := func(n, size int) *call {
		c := &call{items: make([][]byte, n)}
		for i := range c.items {
			c.items[i] = make([]byte, size-32)
		}
		return c
	}
	const mib = 1 << 20
	for _, tc := range []struct {
		name  string
		calls []*call
		want  [][]int // the calls of each round trip, by chunk
	}{
		{"small requests, one chunk", []*call{sized(1, 100), sized(2, 100), sized(3, 100)}, [][]int{{3}}},
		{"a chunk's items", []*call{sized(admitChunk-1, 100), sized(2, 100), sized(1, 100)}, [][]int{{1, 2}}},
		{"a chunk's bytes", []*call{sized(1, mib/2), sized(1, mib/2), sized(1, mib/2)}, [][]int{{2, 1}}},
		{"a round trip's bytes", []*call{sized(1, mib), sized(1, mib), sized(1, mib), sized(1, mib), sized(1, mib)}, [][]int{{1, 1, 1, 1}, {1}}},
		{"a request larger than a chunk goes alone", []*call{sized(1, 100), sized(1, 2*mib), sized(1, 100)}, [][]int{{1, 1, 1}}},
		{"a request larger than a round trip goes alone", []*call{sized(1, 100), sized(1, 5*mib), sized(1, 100)}, [][]int{{1}, {1}, {1}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got [][]int
			for batch := tc.calls; len(batch) > 0; {
				var chunks [][]*call
				chunks, batch = nextTrip(batch)
				var trip []int
				for _, chunk := range chunks {
					trip = append(trip, len(chunk))
				}
				got = append(got, trip)
			}
			if !slices.EqualFunc(got, tc.want, slices.Equal) {
				t.Errorf("round trips of chunks of %v calls; want %v", got, tc.want)
			}
		})
	}
}
