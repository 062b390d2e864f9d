package hostnet

import (
	"context"
	"errors"
	"os"
	"strings"
)

// ReapStale deletes the namespaces and root-namespace links that
// UniqueName(prefix) named for a process that no longer runs: what a
// killed test or experiment could not clean up. Names of live processes,
// and names this package did not make, are left alone. It returns what it
// deleted.
func ReapStale(prefix string) ([]string, error) {
	if err := checkPrefix(prefix); err != nil {
		return nil, err
	}
	var reaped []string
	var errs []error
	stale := func(name string) bool {
		pid, ok := ownerPid(prefix, name)
		return ok && pid != os.Getpid() && !processAlive(pid)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*ipTimeout)
	defer cancel()
	if ents, err := os.ReadDir(NetnsDir); err == nil {
		for _, e := range ents {
			if !stale(e.Name()) {
				continue
			}
			if _, err := ip(ctx, "netns", "delete", e.Name()); err != nil {
				errs = append(errs, err)
				continue
			}
			reaped = append(reaped, "netns "+e.Name())
		}
	}
	ents, err := os.ReadDir("/sys/class/net")
	if err != nil {
		return reaped, errors.Join(append(errs, err)...)
	}
	for _, e := range ents {
		if !stale(e.Name()) {
			continue
		}
		if _, err := ip(ctx, "link", "del", "dev", e.Name()); err != nil {
			if !strings.Contains(err.Error(), "Cannot find device") {
				errs = append(errs, err)
			}
			continue
		}
		reaped = append(reaped, "link "+e.Name())
	}
	return reaped, errors.Join(errs...)
}
