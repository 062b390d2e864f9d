package main

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// findUverbs returns the uverbsN node whose ibdev is dev
// (/sys/class/infiniband_verbs/uverbsN/ibdev).
func findUverbs(sysfs, dev string) (string, error) {
	dirs, _ := filepath.Glob(filepath.Join(sysfs, "class", "infiniband_verbs", "uverbs*"))
	var seen []string
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, "ibdev"))
		if err != nil {
			continue
		}
		name := strings.TrimSpace(string(b))
		if name == dev {
			return filepath.Base(d), nil
		}
		seen = append(seen, name)
	}
	return "", fmt.Errorf("no uverbs device for %q (found %v)", dev, seen)
}

// defaultDevice is the only ibverbs device, if there is one.
func defaultDevice(sysfs string) (string, error) {
	dirs, _ := filepath.Glob(filepath.Join(sysfs, "class", "infiniband", "*"))
	if len(dirs) != 1 {
		return "", fmt.Errorf("%d ibverbs devices: name one with -d", len(dirs))
	}
	return filepath.Base(dirs[0]), nil
}

// gidEntry is one entry of a port's GID table: its index, the GID as
// sysfs prints it, and its type ("RoCE v2", "IB/RoCE v1"; empty when the
// entry is unused and the type file can not be read).
type gidEntry struct {
	index int
	gid   string
	typ   string
}

// readGIDTable reads port 1's GID table of dev:
// ports/1/gids/N and ports/1/gid_attrs/types/N.
func readGIDTable(sysfs, dev string) ([]gidEntry, error) {
	port := filepath.Join(sysfs, "class", "infiniband", dev, "ports", "1")
	names, err := os.ReadDir(filepath.Join(port, "gids"))
	if err != nil {
		return nil, err
	}
	var t []gidEntry
	for _, n := range names {
		i, err := strconv.Atoi(n.Name())
		if err != nil {
			continue
		}
		g, err := os.ReadFile(filepath.Join(port, "gids", n.Name()))
		if err != nil {
			continue
		}
		typ, _ := os.ReadFile(filepath.Join(port, "gid_attrs", "types", n.Name())) // EINVAL for unused entries
		t = append(t, gidEntry{index: i, gid: strings.TrimSpace(string(g)), typ: strings.TrimSpace(string(typ))})
	}
	sort.Slice(t, func(a, b int) bool { return t[a].index < t[b].index })
	return t, nil
}

// pickGID finds the RoCE v2 GID of an IPv4 address: ip's, or, when ip is
// not valid, the only IPv4 address's in the table.
func pickGID(table []gidEntry, ip netip.Addr) (int, [16]byte, error) {
	found := -1
	var gid [16]byte
	var v4 []string
	for _, e := range table {
		a, err := netip.ParseAddr(e.gid)
		if err != nil || e.typ != "RoCE v2" || !a.Is4In6() {
			continue
		}
		if ip.IsValid() && a.Unmap() != ip {
			continue
		}
		v4 = append(v4, a.Unmap().String())
		if found < 0 {
			found, gid = e.index, a.As16()
		}
	}
	switch {
	case found < 0 && ip.IsValid():
		return 0, gid, fmt.Errorf("no RoCE v2 GID of %s in the GID table", ip)
	case found < 0:
		return 0, gid, errors.New("no RoCE v2 GID of an IPv4 address in the GID table")
	case len(v4) > 1 && !ip.IsValid():
		return 0, gid, fmt.Errorf("RoCE v2 GIDs of several IPv4 addresses (%v): choose one with -ip", v4)
	}
	return found, gid, nil
}
