package main

import (
	"errors"
	"fmt"
	"net"
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

// unusedGID is a source GID index that names no GID of the port: the
// lowest index whose entry holds no GID or that the table lacks (past its
// end), 255 if there is none.
func unusedGID(table []gidEntry) int {
	used := make(map[int]bool, len(table))
	for _, e := range table {
		a, err := netip.ParseAddr(e.gid)
		used[e.index] = err != nil || !a.IsUnspecified()
	}
	for i := range 255 {
		if !used[i] {
			return i
		}
	}
	return 255
}

// netdev is the network device under a GID: its name, Ethernet address
// and MTU.
type netdev struct {
	name string
	mac  [6]byte
	mtu  int
}

// readGIDNetdev reads the network device of port 1's GID index of dev
// (ports/1/gid_attrs/ndevs/N) and, from class/net, its address and MTU.
func readGIDNetdev(sysfs, dev string, index int) (netdev, error) {
	b, err := os.ReadFile(filepath.Join(sysfs, "class", "infiniband", dev, "ports", "1", "gid_attrs", "ndevs", strconv.Itoa(index)))
	if err != nil {
		return netdev{}, err
	}
	n := netdev{name: strings.TrimSpace(string(b))}
	if n.name == "" || strings.ContainsRune(n.name, '/') {
		return netdev{}, fmt.Errorf("GID %d of %s: network device %q", index, dev, n.name)
	}
	dir := filepath.Join(sysfs, "class", "net", n.name)
	if b, err = os.ReadFile(filepath.Join(dir, "address")); err != nil {
		return netdev{}, err
	}
	addr, err := net.ParseMAC(strings.TrimSpace(string(b)))
	if err != nil || len(addr) != 6 {
		return netdev{}, fmt.Errorf("%s: address %q", n.name, strings.TrimSpace(string(b)))
	}
	copy(n.mac[:], addr)
	if b, err = os.ReadFile(filepath.Join(dir, "mtu")); err != nil {
		return netdev{}, err
	}
	if n.mtu, err = strconv.Atoi(strings.TrimSpace(string(b))); err != nil || n.mtu <= 0 {
		return netdev{}, fmt.Errorf("%s: MTU %q", n.name, strings.TrimSpace(string(b)))
	}
	return n, nil
}

// roceMTU is the IB MTU in bytes of a RoCE port on an Ethernet MTU, as
// the kernel's iboe_get_mtu finds it (the port's active MTU, which bounds
// a UD message): the largest of 256 to 4096 that fits with the GRH, UDP,
// BTH, XRC, AtomicETH and ICRC bytes; 0 if none does.
func roceMTU(ethMTU int) int {
	room := ethMTU - (40 + 8 + 12 + 4 + 28 + 4)
	for m := 4096; m >= 256; m /= 2 {
		if room >= m {
			return m
		}
	}
	return 0
}
