package report

import (
	"math"
	"slices"
)

// Experiments summarize their rounds the same way: the median, and the
// smallest and largest value as the spread (with a handful of rounds on a
// shared host, a standard deviation would claim more than the data holds).

// Median of xs: the middle value, or the mean of the two middle ones; 0
// for none.
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// Spread is the smallest and largest of xs; NaN, NaN for none.
func Spread(xs []float64) (lo, hi float64) {
	if len(xs) == 0 {
		return math.NaN(), math.NaN()
	}
	return slices.Min(xs), slices.Max(xs)
}

// Group splits xs by key, the keys in the order they first appear: the
// rounds of each configuration, in the order the configurations ran.
func Group[K comparable, T any](xs []T, key func(T) K) (keys []K, groups map[K][]T) {
	groups = map[K][]T{}
	for _, x := range xs {
		k := key(x)
		if _, ok := groups[k]; !ok {
			keys = append(keys, k)
		}
		groups[k] = append(groups[k], x)
	}
	return keys, groups
}
