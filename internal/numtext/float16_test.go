package numtext_test

import (
	"errors"
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/streamer-dev/streamer/internal/numtext"
	"github.com/streamer-dev/streamer/internal/numtext/numtexttest"
)

const (
	halfInf = numtexttest.HalfInf
	halfMax = numtexttest.HalfMax
)

// TestFloat16RoundTrip: every half widens exactly and rounds back to
// itself, NaNs with their sign and payload.
func TestFloat16RoundTrip(t *testing.T) {
	for h := range 1 << 16 {
		f := numtext.Float16Frombits(uint16(h))
		if back := numtext.Float16Bits(f); back != uint16(h) {
			t.Fatalf("%#04x → %v → %#04x", h, f, back)
		}
		if isNaN := h&halfInf == halfInf && h&0x3ff != 0; isNaN != math.IsNaN(f) {
			t.Fatalf("%#04x widens to %v", h, f)
		}
		if float64(float32(f)) != f && !math.IsNaN(f) {
			t.Fatalf("%#04x widens to %v, which a float32 does not hold", h, f)
		}
	}
}

func TestFloat16BitsRoundsToNearestEven(t *testing.T) {
	tests := []struct {
		f    float64
		want uint16
	}{
		{1, 0x3c00},
		{-2, 0xc000},
		{0, 0},
		{math.Copysign(0, -1), 0x8000},
		{1 + 1.0/2048, 0x3c00},               // halfway between 1 and the next: to even, 1
		{1 + 3.0/2048, 0x3c02},               // halfway between 0x3c01 and 0x3c02: to even
		{1 + 1.0/2048 + 1.0/(1<<20), 0x3c01}, // past halfway: up
		{65504, halfMax},                     // the largest half
		{65519.99, halfMax},                  // below halfway to 65536: down
		{65520, halfInf},                     // halfway to 65536, ties to even: infinite
		{-1e6, 0xfc00},
		{math.Inf(1), halfInf},
		{math.Inf(-1), 0xfc00},
		{6.103515625e-05, 0x0400},         // the smallest normal
		{5.960464477539063e-08, 0x0001},   // the smallest subnormal, 2^-24
		{math.Ldexp(1, -25), 0},           // halfway between 0 and 2^-24: to even, 0
		{math.Ldexp(3, -26), 0x0001},      // past halfway: up
		{math.Ldexp(3, -25), 0x0002},      // halfway between 1 and 2 units: to even, 2
		{math.Ldexp(5, -25), 0x0002},      // halfway between 2 and 3 units: to even, 2
		{math.Ldexp(1023.5, -24), 0x0400}, // the largest subnormal rounds up into the normals
		{1e-300, 0},
		{-5e-324, 0x8000},
		{math.Float64frombits(0x7ff8000000000000), 0x7e00}, // the quiet NaN
		{math.Float64frombits(0xfff0100000000000), 0xfc04}, // a signalling NaN keeps its top payload bits
		{math.Float64frombits(0x7ff0000000000001), 0x7e00}, // a payload below what a half keeps: still a NaN
	}
	for _, tt := range tests {
		if got := numtext.Float16Bits(tt.f); got != tt.want {
			t.Errorf("Float16Bits(%v) = %#04x, want %#04x", tt.f, got, tt.want)
		}
	}
}

// TestFloat16BitsIsNearest checks the rounding against the two halves
// around values between every pair of neighbours.
func TestFloat16BitsIsNearest(t *testing.T) {
	for h := uint16(0); h < halfMax; h++ {
		lo, hi := numtext.Float16Frombits(h), numtext.Float16Frombits(h+1)
		for _, frac := range []float64{0.25, 0.4999, 0.5, 0.5001, 0.75} {
			f := lo + (hi-lo)*frac
			want := h
			if frac > 0.5 || frac == 0.5 && h&1 == 1 {
				want = h + 1
			}
			if got := numtext.Float16Bits(f); got != want {
				t.Fatalf("Float16Bits(%v) (%v of the way from %#04x) = %#04x, want %#04x", f, frac, h, got, want)
			}
		}
	}
}

func TestParseFloat16RoundsOnceFromTheText(t *testing.T) {
	tests := []struct {
		text   string
		want   uint16 // ignored when not finite
		finite bool
	}{
		{"1", 0x3c00, true}, {"-2", 0xc000, true}, {"0.1", 0x2e66, true}, {"1e0", 0x3c00, true}, {"-0", 0x8000, true}, {"0.0", 0, true},
		{"65504", halfMax, true}, {"65519", halfMax, true}, {"65519.999999999999999", halfMax, true}, {"-65519.999999999999999", 0xfbff, true},
		{"65520", 0, false}, {"-65520", 0, false}, {"1e5", 0, false},
		{"1e-30", 0, true}, {"-1e-400", 0x8000, true}, {"6e-8", 0x0001, true},
		// Texts that float64 rounds onto a midpoint between halves: rounding
		// twice would go to the even half; the text says otherwise.
		{"1.0004882812500001", 0x3c01, true},
		{"1.000488281250000000000001", 0x3c01, true},
		{"1.00048828124999999", 0x3c00, true},
		{"1.00048828125", 0x3c00, true}, // the midpoint itself: to even
		{"1.00146484375", 0x3c02, true}, // the midpoint between 0x3c01 and 0x3c02: to even, upwards
		{"1.001464843749999999", 0x3c01, true},
		{"2.98023223876953125e-8", 0, true}, // halfway to the smallest subnormal
		{"2.980232238769531250000001e-8", 0x0001, true},
		{"-2.9802322387695312e-8", 0x8000, true},
		{"100048828125e-11", 0x3c00, true},
		{"0.000000000000000000000000000000000000100048828125e37", 0x3c00, true},
		{"1.00048828125" + strings.Repeat("0", 100000) + "1", 0x3c01, true}, // long texts cost linear time
		{"-1.00048828125" + strings.Repeat("0", 100000) + "1E-0000000000000000000000", 0xbc01, true},
		{"6550.4e1", halfMax, true},
	}
	for _, tt := range tests {
		name := tt.text
		if len(name) > 40 {
			name = name[:20] + "..." + name[len(name)-20:]
		}
		got, finite, err := numtext.ParseFloat16(tt.text)
		if err != nil || finite != tt.finite || finite && got != tt.want {
			t.Errorf("ParseFloat16(%s) = %#04x, %v, %v; want %#04x, %v", name, got, finite, err, tt.want, tt.finite)
		}
		if ref, fits := numtexttest.NearestHalf(tt.text); fits != tt.finite || fits && ref != tt.want {
			t.Errorf("%s: the reference rounds to %#04x (finite %v); the table says %#04x (finite %v)", name, ref, fits, tt.want, tt.finite)
		}
	}
	for _, text := range []string{"1e400", "-1e99999", "0.1e10000000"} {
		if _, _, err := numtext.ParseFloat16(text); !errors.Is(err, strconv.ErrRange) {
			t.Errorf("ParseFloat16(%s): error %v, want ErrRange", text, err)
		}
	}
}

// TestParseFloat16AllocatesOnlyForTies: only a text that float64 puts on a
// midpoint between halves costs the exact comparison and its strings, so
// the FP16 inputs of a request cost no garbage.
func TestParseFloat16AllocatesOnlyForTies(t *testing.T) {
	for _, text := range []string{"0.1", "-65504", "6e-8", "1.0004882812500002"} {
		if allocs := testing.AllocsPerRun(100, func() {
			if _, _, err := numtext.ParseFloat16(text); err != nil {
				t.Fatal(err)
			}
		}); allocs != 0 {
			t.Errorf("ParseFloat16(%s): %v allocations, want none", text, allocs)
		}
	}
}

// FuzzParseFloat16 holds ParseFloat16's rounding of JSON numbers against
// numtexttest.NearestHalf's exact one.
func FuzzParseFloat16(f *testing.F) {
	for _, seed := range []string{"1", "-0", "0.1", "65504", "65519.999999999999999", "65520", "1.0004882812500001",
		"2.98023223876953125e-8", "6.1e-5", "1e-400", "-3.5E+2", "123456789012345678901234567890e-30", "0.1e10000000", "100048828125e-11"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, text string) {
		if len(text) > 64 || !numtexttest.IsJSONNumber(text) {
			return // bounded: the reference's exact arithmetic grows with the exponent
		}
		got, finite, err := numtext.ParseFloat16(text)
		want, fits := numtexttest.NearestHalf(text)
		switch {
		case !fits && finite:
			t.Fatalf("%s: read as %#04x; it rounds to infinity", text, got)
		case fits && (err != nil || !finite || got != want):
			t.Fatalf("%s: %#04x, %v, %v; want %#04x", text, got, finite, err, want)
		}
	})
}
