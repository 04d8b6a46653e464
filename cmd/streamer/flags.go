package main

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// decimal is a whole-number flag read in base 10 alone: pflag's own reads
// 010 as 8 and 0x20 as 32.
type decimal[T int | int64] struct{ p *T }

func (d decimal[T]) String() string {
	if d.p == nil {
		return "0"
	}
	return strconv.FormatInt(int64(*d.p), 10)
}

func (d decimal[T]) Set(s string) error {
	v, err := strconv.ParseInt(s, 10, 64)
	switch {
	case errors.Is(err, strconv.ErrRange) || err == nil && int64(T(v)) != v:
		return errors.New("want a whole number, and this one is out of range")
	case err != nil:
		return errors.New("want a whole number")
	}
	*d.p = T(v)
	return nil
}

func (decimal[T]) Type() string { return "int" }

// intVar defines a whole-number flag with a default, read in base 10.
func intVar[T int | int64](f *pflag.FlagSet, p *T, name string, value T, usage string) {
	*p = value
	f.Var(decimal[T]{p}, name, usage)
}

// flagError says what is wrong with a flag's value in the words the other
// refusals use, `--flag "value": what is wanted`, not in those of the
// parser it came from ("strconv.ParseInt: parsing …: invalid syntax").
func flagError(_ *cobra.Command, err error) error {
	var invalid *pflag.InvalidValueError
	if !errors.As(err, &invalid) {
		return err
	}
	flag := invalid.GetFlag()
	var want string
	switch flag.Value.Type() {
	case "bool":
		want = "want true or false"
	case "duration":
		want = "want a duration with its unit, such as 250ms, 30s or 2m, of at most 2562047h"
	case "float64":
		want = "want a number"
	case "intSlice":
		want = "want whole numbers, comma-separated"
	default:
		want = errors.Unwrap(err).Error()
	}
	return fmt.Errorf("--%s %q: %s", flag.Name, invalid.GetValue(), want)
}

// lower is a flag of a few words, taken in any case (CUDA, JSON, Greedy),
// as --log-level's are.
type lower struct{ p *string }

func (l lower) String() string {
	if l.p == nil {
		return ""
	}
	return *l.p
}

func (l lower) Set(s string) error {
	*l.p = strings.ToLower(s)
	return nil
}

func (lower) Type() string { return "string" }

// lowerVar defines a flag of a few words, taken in any case.
func lowerVar(f *pflag.FlagSet, p *string, name, value, usage string) {
	*p = value
	f.Var(lower{p}, name, usage)
}
