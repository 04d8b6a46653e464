// Package numtexttest holds references that tests check half-precision
// code against: written the slow, plain way, independently of the code
// they check.
package numtexttest

import (
	"encoding/json"
	"math"
	"math/big"
	"strconv"
	"strings"
)

// The bits of half-precision infinity, and of the largest finite half.
const (
	HalfInf = 0x7c00
	HalfMax = 0x7bff // 65504
)

// HalfValue reads half bits: sign × 2^(e-15) × 1.f, or sign × 2^-14 × 0.f
// for subnormals. NaNs and infinities are not read.
func HalfValue(h uint16) float64 {
	exp, frac := int(h>>10)&0x1f, float64(h&0x3ff)
	v := math.Ldexp(frac, -24)
	if exp > 0 {
		v = math.Ldexp(1024+frac, exp-25)
	}
	if h&0x8000 != 0 {
		v = -v
	}
	return v
}

// NearestHalf rounds a decimal text (a JSON number) to the nearest half,
// ties to even, exactly: with big.Rat, by bisection over the finite
// halves. fits is false when the value rounds to infinity.
func NearestHalf(text string) (h uint16, fits bool) {
	var sign uint16
	if strings.HasPrefix(text, "-") {
		sign = 0x8000
	}
	switch f, _ := strconv.ParseFloat(text, 64); {
	case math.IsInf(f, 0):
		return sign | HalfInf, false
	case f == 0: // below the smallest float64, far below a half's
		return sign, true
	}
	exact, good := new(big.Rat).SetString(text)
	if !good {
		panic("not a number: " + text)
	}
	a := new(big.Rat).Abs(exact)
	rat := func(f float64) *big.Rat { return new(big.Rat).SetFloat64(f) }
	if a.Cmp(rat(65520)) >= 0 { // 65520 is halfway to 2^16, and infinity is even
		return sign | HalfInf, false
	}
	lo, hi := uint16(0), uint16(HalfMax) // the largest half at or below a lies in [lo, hi]
	for lo < hi {
		m := (lo + hi + 1) / 2
		if rat(HalfValue(m)).Cmp(a) <= 0 {
			lo = m
		} else {
			hi = m - 1
		}
	}
	if lo == HalfMax || rat(HalfValue(lo)).Cmp(a) == 0 {
		return sign | lo, true
	}
	mid := new(big.Rat).Add(rat(HalfValue(lo)), rat(HalfValue(lo+1)))
	mid.Quo(mid, big.NewRat(2, 1))
	if c := a.Cmp(mid); c > 0 || c == 0 && lo&1 == 1 {
		return sign | (lo + 1), true
	}
	return sign | lo, true
}

// IsJSONNumber reports whether text is one JSON number and nothing else,
// as encoding/json reads it: what a fuzzed text must be for the readers
// of JSON numbers to be asked about it.
func IsJSONNumber(text string) bool {
	var v any
	d := json.NewDecoder(strings.NewReader(text))
	d.UseNumber()
	if d.Decode(&v) != nil || d.More() {
		return false
	}
	n, ok := v.(json.Number)
	return ok && string(n) == text
}
