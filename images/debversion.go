package images

import "strings"

// CompareDebianVersions orders two Debian version strings the way dpkg does
// (epoch, then upstream version, then revision; '~' sorts before anything,
// even the end of the string). It returns -1, 0 or +1.
func CompareDebianVersions(a, b string) int {
	ea, ua, ra := splitDebianVersion(a)
	eb, ub, rb := splitDebianVersion(b)
	if c := compareNumeric(ea, eb); c != 0 {
		return c
	}
	if c := compareVersionPart(ua, ub); c != 0 {
		return c
	}
	return compareVersionPart(ra, rb)
}

func splitDebianVersion(v string) (epoch, upstream, revision string) {
	epoch = "0"
	if e, rest, ok := strings.Cut(v, ":"); ok {
		epoch, v = e, rest
	}
	if i := strings.LastIndexByte(v, '-'); i >= 0 {
		return epoch, v[:i], v[i+1:]
	}
	return epoch, v, ""
}

func compareNumeric(a, b string) int {
	a = strings.TrimLeft(a, "0")
	b = strings.TrimLeft(b, "0")
	if len(a) != len(b) {
		if len(a) < len(b) {
			return -1
		}
		return 1
	}
	return strings.Compare(a, b)
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// charOrder is dpkg's order for the non-digit parts: '~' first, then the end
// of the part, then letters, then everything else.
func charOrder(c byte) int {
	switch {
	case c == '~':
		return -1
	case c == 0:
		return 0
	case (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'):
		return int(c)
	default:
		return int(c) + 256
	}
}

func compareVersionPart(a, b string) int {
	for a != "" || b != "" {
		// Non-digit prefix.
		for (a != "" && !isDigit(a[0])) || (b != "" && !isDigit(b[0])) {
			var ca, cb byte
			if a != "" && !isDigit(a[0]) {
				ca = a[0]
			}
			if b != "" && !isDigit(b[0]) {
				cb = b[0]
			}
			if oa, ob := charOrder(ca), charOrder(cb); oa != ob {
				if oa < ob {
					return -1
				}
				return 1
			}
			if ca != 0 {
				a = a[1:]
			}
			if cb != 0 {
				b = b[1:]
			}
		}
		// Digit run.
		i, j := 0, 0
		for i < len(a) && isDigit(a[i]) {
			i++
		}
		for j < len(b) && isDigit(b[j]) {
			j++
		}
		if c := compareNumeric(a[:i], b[:j]); c != 0 {
			return c
		}
		a, b = a[i:], b[j:]
	}
	return 0
}
