package numtext

import (
	"cmp"
	"math"
	"strconv"
	"strings"
)

// IEEE 754 half precision (binary16): 1 sign bit, 5 exponent bits (bias 15)
// and 10 stored significand bits.
const (
	f16SignMask = 0x8000
	f16Inf      = 0x7c00 // the exponent bits; also +Inf
	f16Quiet    = 0x0200 // the quiet bit of a NaN
	f16MaxExp   = 15     // the largest unbiased exponent of a finite half
	f16MinExp   = -14    // the smallest unbiased exponent of a normal half
	f16Fraction = 10     // stored significand bits
)

// Float16Bits returns the bits of the IEEE 754 half-precision value nearest
// f, ties to even: one rounding, from f itself. Finite values whose rounding
// reaches 65520 or beyond become infinities, values too small for the
// smallest subnormal become zeros of f's sign, and a NaN stays a NaN with
// f's sign and the top of its payload.
func Float16Bits(f float64) uint16 {
	h, _ := roundFloat16(f)
	return h
}

// Float16Frombits returns the value of the half-precision bits h, exactly
// (every half is a float64, and a float32 too).
func Float16Frombits(h uint16) float64 {
	sign := uint64(h&f16SignMask) << 48
	exp := int(h>>f16Fraction) & 0x1f
	frac := uint64(h & 0x3ff)
	switch exp {
	case 0x1f: // infinity, or NaN with its payload
		return math.Float64frombits(sign | 0x7ff<<52 | frac<<42)
	case 0: // zero or subnormal: frac units of 2^-24
		v := math.Ldexp(float64(frac), f16MinExp-f16Fraction)
		if sign != 0 {
			v = -v // -0 too
		}
		return v
	}
	return math.Float64frombits(sign | uint64(exp-15+1023)<<52 | frac<<42)
}

// ParseFloat16 rounds the JSON number text once to the nearest half, ties
// to even, and returns its bits. finite is false when the value rounds
// beyond the largest half (65504) to an infinity. err is
// strconv.ParseFloat's: ErrRange for a text beyond even float64's range.
func ParseFloat16(text string) (h uint16, finite bool, err error) {
	f, err := strconv.ParseFloat(text, 64)
	if err != nil {
		return 0, false, err
	}
	h, tie := roundFloat16(f)
	if tie {
		h = breakTie(text, f, h)
	}
	return h, h&^f16SignMask != f16Inf, nil
}

// roundFloat16 is Float16Bits, reporting too whether f lay exactly halfway
// between two halves (the tie was broken to even).
func roundFloat16(f float64) (h uint16, tie bool) {
	b := math.Float64bits(f)
	sign := uint16(b>>48) & f16SignMask
	exp := int(b>>52) & 0x7ff
	frac := b & (1<<52 - 1)
	if exp == 0x7ff {
		if frac == 0 {
			return sign | f16Inf, false
		}
		payload := uint16(frac >> 42)
		if payload == 0 {
			payload = f16Quiet // the payload lay below what a half keeps
		}
		return sign | f16Inf | payload, false
	}
	e := exp - 1023
	switch {
	case e > f16MaxExp: // 2^16 or more (float64 subnormals have e = -1023)
		return sign | f16Inf, false
	case e < f16MinExp-f16Fraction-1: // below 2^-25: nearer zero than the smallest subnormal
		return sign, false
	}
	m := frac | 1<<52 // the significand with its leading bit
	// shift drops the bits below the half's last place: 2^(e-10) for a
	// normal half, 2^-24 for a subnormal one.
	shift := uint(52 - f16Fraction)
	if e < f16MinExp {
		shift += uint(f16MinExp - e)
	}
	q := m >> shift
	rest, halfway := m&(1<<shift-1), uint64(1)<<(shift-1)
	tie = rest == halfway
	if rest > halfway || tie && q&1 == 1 {
		q++
	}
	if e < f16MinExp {
		// q counts units of 2^-24; 1024 of them (a carry) is the smallest
		// normal half, which these bits spell too.
		return sign | uint16(q), tie
	}
	// q holds the leading bit at 2^10: adding it to the exponent one below
	// the value's carries a rounding overflow into the exponent, and from
	// 65504 into infinity.
	return sign | (uint16(e+15-1)<<f16Fraction + uint16(q)), tie
}

// breakTie decides a rounding that parsing the text to float64 left exactly
// halfway between two halves: the text may lie a little above or below that
// point (rounding twice would err there), and only a text that is the
// midpoint itself goes to the even half, which roundFloat16 chose.
func breakTie(text string, f float64, even uint16) uint16 {
	mid := math.Abs(f)
	evenAbove := math.Abs(Float16Frombits(even)) > mid
	switch compareDecimal(text, mid) {
	case 1: // above the midpoint: the half further from zero
		if !evenAbove {
			return even + 1
		}
	case -1:
		if evenAbove {
			return even - 1
		}
	}
	return even
}

// compareDecimal compares the magnitude of the JSON number text with the
// positive float64 mid, exactly and in time linear in the text (a
// rational's arithmetic would grow with the exponent a client picks): as
// normalised digit strings, mid's exact ones written out by strconv. A
// midpoint between halves has at most 30 significant digits.
func compareDecimal(text string, mid float64) int {
	digits, point := decimalDigits(text)
	midDigits, midPoint := decimalDigits(strconv.FormatFloat(mid, 'e', 40, 64))
	switch {
	case digits == "":
		return -1
	case point != midPoint:
		return cmp.Compare(point, midPoint)
	}
	return strings.Compare(digits, midDigits)
}
