package runner

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// The experiments' list flags ("pin,drop", "16,32,64", "0,1e-4") share
// their syntax: comma-separated, blanks around items and empty items
// ignored.

// ParseList splits a comma-separated flag value.
func ParseList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// ParseInts parses "0,1,4,16"; what names an item in errors.
func ParseInts(s, what string) ([]int, error) {
	return parseEach(s, func(f string) (int, error) {
		n, err := strconv.Atoi(f)
		if err != nil {
			return 0, fmt.Errorf("bad %s %q", what, f)
		}
		return n, nil
	})
}

// ParseFloats parses "0,1e-4,0.01"; what names an item in errors.
func ParseFloats(s, what string) ([]float64, error) {
	return parseEach(s, func(f string) (float64, error) {
		v, err := strconv.ParseFloat(f, 64)
		if err != nil {
			return 0, fmt.Errorf("bad %s %q: want a number such as 0.01 or 1e-4", what, f)
		}
		return v, nil
	})
}

// ParseDurations parses "50us,2ms"; none may be negative.
func ParseDurations(s string) ([]time.Duration, error) {
	return parseEach(s, func(f string) (time.Duration, error) {
		d, err := time.ParseDuration(f)
		if err != nil {
			return 0, fmt.Errorf("bad duration %q: want a number with a unit, such as 50us or 2ms", f)
		}
		if d < 0 {
			return 0, fmt.Errorf("negative duration %v", d)
		}
		return d, nil
	})
}

func parseEach[T any](s string, parse func(string) (T, error)) ([]T, error) {
	var out []T
	for _, f := range ParseList(s) {
		v, err := parse(f)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

// NonEmpty returns xs, or an error naming what when there is none.
func NonEmpty[T any](xs []T, err error, what string) ([]T, error) {
	if err == nil && len(xs) == 0 {
		err = errors.New("no " + what)
	}
	return xs, err
}

// JoinFloats formats v for a flag's default ("1e-4,3e-4").
func JoinFloats(v []float64) string {
	s := make([]string, len(v))
	for i, f := range v {
		s[i] = strconv.FormatFloat(f, 'g', -1, 64)
	}
	return strings.Join(s, ",")
}

// JoinDurations formats v for a flag's default ("50µs,2ms").
func JoinDurations(v []time.Duration) string {
	s := make([]string, len(v))
	for i, d := range v {
		s[i] = d.String()
	}
	return strings.Join(s, ",")
}
