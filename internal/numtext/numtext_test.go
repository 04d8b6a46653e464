package numtext_test

import (
	"math/big"
	"strconv"
	"testing"

	"github.com/streamer-dev/streamer/internal/numtext"
)

func TestWholeDigits(t *testing.T) {
	tests := []struct {
		text        string
		digits      string
		whole, huge bool
	}{
		{"1.0", "1", true, false},
		{"2e3", "2000", true, false},
		{"-0.0", "0", true, false},
		{"0e-7", "0", true, false},
		{"9007199254740993.0", "9007199254740993", true, false},
		{"9223372036854775807.0", "9223372036854775807", true, false},
		{"-9223372036854775808E+0", "-9223372036854775808", true, false},
		{"18446744073709551615.000", "18446744073709551615", true, false},
		{"1.8446744073709551616e19", "18446744073709551616", true, false}, // 20 digits: ParseUint refuses it
		{"0.012345e3", "", false, false},
		{"1.0000000000000000001", "", false, false},
		{"9007199254740993.5", "", false, false},
		{"1e-400", "", false, false},
		{"1e-99999999999999999999", "", false, false},
		{"1e20", "", true, true},
		{"1e99999999999999999999", "", true, true},
		{"0.0000000001e10", "1", true, false},
		{"123", "123", true, false},
	}
	for _, tt := range tests {
		digits, whole, huge := numtext.WholeDigits(tt.text)
		if whole != tt.whole || huge != tt.huge || whole && !huge && digits != tt.digits {
			t.Errorf("WholeDigits(%q) = %q, whole %v, huge %v; want %q, %v, %v", tt.text, digits, whole, huge, tt.digits, tt.whole, tt.huge)
		}
	}
}

// FuzzWholeDigits holds WholeDigits against math/big's exact reading of
// the same number, for JSON numbers built of a sign, digits, a fraction
// and a bounded exponent (big.Rat would spend seconds on a huge one).
func FuzzWholeDigits(f *testing.F) {
	f.Add(false, "1", "0", int16(0))
	f.Add(true, "92233720368547758", "07", int16(2))
	f.Add(false, "0", "000", int16(-5))
	f.Add(false, "1", "0000000000000000001", int16(0))
	f.Add(false, "12", "30", int16(-1))
	f.Fuzz(func(t *testing.T, neg bool, intPart, frac string, exponent int16) {
		if intPart == "" || !isDigits(intPart) || !isDigits(frac) || len(intPart) > 1 && intPart[0] == '0' {
			return
		}
		text := intPart + "." + frac
		if frac == "" {
			text = intPart + "e" + strconv.Itoa(int(exponent))
		} else if exponent != 0 {
			text += "E" + strconv.Itoa(int(exponent))
		}
		if neg {
			text = "-" + text
		}
		exact, ok := new(big.Rat).SetString(text)
		if !ok {
			t.Fatalf("math/big does not read %q", text)
		}
		digits, whole, huge := numtext.WholeDigits(text)
		if whole != exact.IsInt() {
			t.Fatalf("WholeDigits(%q) whole = %v, math/big says %v", text, whole, exact.IsInt())
		}
		if !whole {
			return
		}
		num := exact.Num()
		if tooMany := len(new(big.Int).Abs(num).String()) > 20; huge != tooMany {
			t.Fatalf("WholeDigits(%q) huge = %v, math/big says %s", text, huge, num)
		}
		if !huge && digits != num.String() {
			t.Fatalf("WholeDigits(%q) = %s, math/big says %s", text, digits, num)
		}
	})
}

func isDigits(s string) bool {
	for _, c := range []byte(s) {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}
