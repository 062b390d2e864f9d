package hostnet

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
)

// MaxIfnameLen is the longest Linux interface name (IFNAMSIZ - 1).
const MaxIfnameLen = 15

// MaxPrefixLen is the longest prefix UniqueName accepts: prefix, the
// process id and a per-process counter, all in base 36, stay within
// MaxIfnameLen.
const MaxPrefixLen = 5

// nameSep separates the owner's process id from the counter in a name.
const nameSep = "-"

var nameCounter atomic.Uint64

// UniqueName returns a name for a network namespace or an interface that
// no other live user of this package holds: prefix, this process's id and
// a counter, e.g. "dp1k3-7". Names that already exist (a leftover of a dead
// process that had the same id) are skipped. The result is a valid
// interface name (at most MaxIfnameLen bytes); prefix must be 1 to
// MaxPrefixLen lower-case letters or digits, starting with a letter.
func UniqueName(prefix string) (string, error) {
	if err := checkPrefix(prefix); err != nil {
		return "", err
	}
	pid := strconv.FormatInt(int64(os.Getpid()), 36)
	for range 1000 {
		n := nameCounter.Add(1)
		name := prefix + pid + nameSep + strconv.FormatUint(n, 36)
		if len(name) > MaxIfnameLen {
			return "", fmt.Errorf("hostnet: name %q longer than %d bytes (prefix %q too long or too many names)", name, MaxIfnameLen, prefix)
		}
		if !nameInUse(name) {
			return name, nil
		}
	}
	return "", errors.New("hostnet: 1000 candidate names all in use")
}

func checkPrefix(prefix string) error {
	if prefix == "" || len(prefix) > MaxPrefixLen {
		return fmt.Errorf("hostnet: name prefix %q: want 1 to %d characters", prefix, MaxPrefixLen)
	}
	for i, c := range prefix {
		letter := c >= 'a' && c <= 'z'
		if !letter && (i == 0 || c < '0' || c > '9') {
			return fmt.Errorf("hostnet: name prefix %q: want lower-case letters and digits, starting with a letter", prefix)
		}
	}
	return nil
}

// ValidIfname reports whether name is usable as a Linux interface name.
func ValidIfname(name string) error {
	if name == "" || len(name) > MaxIfnameLen {
		return fmt.Errorf("hostnet: interface name %q: want 1 to %d bytes", name, MaxIfnameLen)
	}
	if name == "." || name == ".." || strings.ContainsAny(name, "/: \t\n") {
		return fmt.Errorf("hostnet: interface name %q: contains '/', ':' or white space", name)
	}
	return nil
}

// nameInUse reports whether name is a namespace or a root-namespace interface.
func nameInUse(name string) bool {
	for _, p := range []string{filepath.Join(NetnsDir, name), filepath.Join("/sys/class/net", name)} {
		if _, err := os.Lstat(p); err == nil {
			return true
		}
	}
	return false
}

// ownerPid extracts the process id from a name UniqueName made with prefix.
func ownerPid(prefix, name string) (int, bool) {
	rest, ok := strings.CutPrefix(name, prefix)
	if !ok {
		return 0, false
	}
	pid36, ctr, ok := strings.Cut(rest, nameSep)
	if !ok || pid36 == "" || ctr == "" {
		return 0, false
	}
	if _, err := strconv.ParseUint(ctr, 36, 64); err != nil {
		return 0, false
	}
	pid, err := strconv.ParseInt(pid36, 36, 32)
	if err != nil || pid <= 0 {
		return 0, false
	}
	return int(pid), true
}

// processAlive reports whether a process with this id exists.
func processAlive(pid int) bool {
	_, err := os.Stat("/proc/" + strconv.Itoa(pid))
	return err == nil
}
