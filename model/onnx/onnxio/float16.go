package onnxio

import "github.com/streamer-dev/streamer/internal/numtext"

// Float16Bits returns the bits of the IEEE 754 half-precision value nearest
// f, ties to even: one rounding, from f itself. Finite values whose rounding
// reaches 65520 or beyond become infinities, values too small for the
// smallest subnormal become zeros of f's sign, and a NaN stays a NaN with
// f's sign and the top of its payload. Go programs that build float16
// tensors for EncodeItem or a msgpack tensor map may use it.
func Float16Bits(f float64) uint16 {
	return numtext.Float16Bits(f)
}

// Float16Frombits returns the value of the half-precision bits h, exactly
// (every half is a float64). It reads the float16 outputs DecodeOutput
// returns.
func Float16Frombits(h uint16) float64 {
	return numtext.Float16Frombits(h)
}
