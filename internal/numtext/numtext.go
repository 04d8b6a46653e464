// Package numtext reads JSON numbers' text exactly into tensor elements:
// whole numbers for integer types digit by digit, and halves rounded once
// from the text. Going through a float64 first would round twice, and a
// float64 holds neither every 64-bit integer nor every decimal's distance
// from a midpoint between two halves.
//
// Every text it reads is a JSON number (as a JSON scanner has validated
// it): an optional minus sign, digits, an optional fraction and an
// optional exponent.
package numtext

import (
	"strings"
)

// maxWholeDigits bounds the digits WholeDigits writes out: past 20, no
// 64-bit integer holds the number.
const maxWholeDigits = 20

// zeros pads the digits of a whole number out to its point.
const zeros = "00000000000000000000" // maxWholeDigits of them

// WholeDigits reads the JSON number text exactly: whole reports whether it
// is a whole number (1.0, 2e3 and -0.0 are; 1.0000000000000000001 and 1e-400
// are not), and then digits is it written as an integer ("-" and its
// digits, "0" for any zero) for strconv.ParseInt or ParseUint, unless huge
// says it has more than 20 digits, more than any 64-bit integer has.
func WholeDigits(text string) (digits string, whole, huge bool) {
	significant, point := decimalDigits(text)
	switch {
	case significant == "":
		return "0", true, false
	case point < len(significant):
		return "", false, false // a digit after the point is not zero
	case point > maxWholeDigits:
		return "", true, true
	}
	sign := ""
	if text[0] == '-' {
		sign = "-"
	}
	return sign + significant + zeros[:point-len(significant)], true, false
}

// decimalDigits normalises the JSON number text, sign ignored, to its
// significant digits (no leading or trailing zeros; "" for zero) and the
// place of the decimal point among them: the value is 0.digits × 10^point.
func decimalDigits(text string) (digits string, point int) {
	text = strings.TrimPrefix(text, "-")
	mantissa, exponent := text, ""
	if i := strings.IndexAny(text, "eE"); i >= 0 {
		mantissa, exponent = text[:i], text[i+1:]
	}
	whole, frac, _ := strings.Cut(mantissa, ".")
	all := whole + frac
	trimmed := strings.TrimLeft(all, "0")
	digits = strings.TrimRight(trimmed, "0")
	if digits == "" {
		return "", 0
	}
	return digits, len(whole) - (len(all) - len(trimmed)) + exponentOf(exponent)
}

// maxExponent bounds the exponents exponentOf reads. Only a text with as
// many zeros as the exponent is large could bring a number back from
// beyond it to where an answer here depends on the exponent (a whole
// number of at most 20 digits, a half), and no request body is that long.
const maxExponent = 1_000_000_000

// exponentOf reads a JSON number's exponent ("+12", "-3", "007"),
// saturating at ±maxExponent so that a client's long exponent cannot
// overflow it.
func exponentOf(text string) int {
	sign := 1
	switch {
	case strings.HasPrefix(text, "-"):
		sign, text = -1, text[1:]
	case strings.HasPrefix(text, "+"):
		text = text[1:]
	}
	e := 0
	for _, c := range []byte(text) {
		if e >= maxExponent/10 {
			return sign * maxExponent
		}
		e = 10*e + int(c-'0')
	}
	return sign * e
}
