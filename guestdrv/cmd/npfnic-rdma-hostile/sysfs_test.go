package main

import (
	"net/netip"
	"os"
	"path/filepath"
	"testing"
)

// writeSysfs builds a fake /sys: path → contents.
func writeSysfs(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for p, s := range files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func TestFindUverbs(t *testing.T) {
	root := writeSysfs(t, map[string]string{
		"class/infiniband_verbs/uverbs0/ibdev": "rxe0\n",
		"class/infiniband_verbs/uverbs1/ibdev": "npfnic0\n",
		"class/infiniband/npfnic0/node_type":   "1: CA\n",
	})
	if n, err := findUverbs(root, "npfnic0"); err != nil || n != "uverbs1" {
		t.Errorf("npfnic0: %q, %v", n, err)
	}
	if _, err := findUverbs(root, "mlx5_0"); err == nil {
		t.Errorf("found a device that is not there")
	}
	if d, err := defaultDevice(root); err != nil || d != "npfnic0" {
		t.Errorf("default device %q, %v", d, err)
	}
}

// TestGIDTable reads a port's GID table as the 6.1 core lays it out in
// sysfs (an unused entry's type can not be read) and picks the RoCE v2
// GID of an IPv4 address.
func TestGIDTable(t *testing.T) {
	port := "class/infiniband/npfnic0/ports/1/"
	files := map[string]string{
		port + "gids/0":                 "fe80:0000:0000:0000:5054:00ff:fe81:0001\n",
		port + "gid_attrs/types/0":      "IB/RoCE v1\n",
		port + "gids/1":                 "fe80:0000:0000:0000:5054:00ff:fe81:0001\n",
		port + "gid_attrs/types/1":      "RoCE v2\n",
		port + "gids/2":                 "0000:0000:0000:0000:0000:ffff:0a51:0001\n",
		port + "gid_attrs/types/2":      "IB/RoCE v1\n",
		port + "gids/3":                 "0000:0000:0000:0000:0000:ffff:0a51:0001\n",
		port + "gid_attrs/types/3":      "RoCE v2\n",
		port + "gids/10":                "0000:0000:0000:0000:0000:0000:0000:0000\n", // unused: no type
		port + "gids/not-a-gid":         "junk\n",
		port + "gid_attrs/types/10.bak": "RoCE v2\n",
	}
	table, err := readGIDTable(writeSysfs(t, files), "npfnic0")
	if err != nil {
		t.Fatal(err)
	}
	if len(table) != 5 || table[4].index != 10 || table[4].typ != "" || table[3].typ != "RoCE v2" {
		t.Fatalf("table %+v", table)
	}
	two := append(append([]gidEntry(nil), table...),
		gidEntry{index: 5, gid: "0000:0000:0000:0000:0000:ffff:0a52:0007", typ: "RoCE v2"})
	for _, tc := range []struct {
		name  string
		table []gidEntry
		ip    string
		index int
		bad   bool
	}{
		{"the only IPv4 address", table, "", 3, false},
		{"the address asked for", table, "10.81.0.1", 3, false},
		{"an address the port lacks", table, "10.81.0.9", 0, true},
		{"two IPv4 addresses, none asked for", two, "", 0, true},
		{"two IPv4 addresses, the second asked for", two, "10.82.0.7", 5, false},
		{"no RoCE v2 IPv4 GID", table[:3], "", 0, true},
		{"an empty table", nil, "", 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var ip netip.Addr
			if tc.ip != "" {
				ip = netip.MustParseAddr(tc.ip)
			}
			i, gid, err := pickGID(tc.table, ip)
			if tc.bad {
				if err == nil {
					t.Fatalf("picked %d", i)
				}
				return
			}
			if err != nil || i != tc.index {
				t.Fatalf("picked %d, %v; want %d", i, err, tc.index)
			}
			if a := netip.AddrFrom16(gid); !a.Is4In6() || (tc.ip != "" && a.Unmap().String() != tc.ip) {
				t.Errorf("GID %v", a)
			}
		})
	}
}

func TestOOBFields(t *testing.T) {
	g := [16]byte{10: 0xff, 11: 0xff, 12: 10, 13: 81, 15: 2}
	e, err := parseEndpoint([]string{"17", "0x123456", gidString(g)})
	if err != nil || e.qpn != 17 || e.psn != 0x123456 || e.gid != g {
		t.Fatalf("%+v, %v", e, err)
	}
	for _, bad := range [][]string{{"17", "1"}, {"x", "1", gidString(g)}, {"17", "1", "00ff"}, {"17", "1", "zz" + gidString(g)[2:]}} {
		if _, err := parseEndpoint(bad); err == nil {
			t.Errorf("parsed %q", bad)
		}
	}
	// The canary and a transfer's pattern differ at most offsets, so a
	// stray write shows.
	same := 0
	for i := range 4096 {
		if canary(mrOff+writeArea+i) == pattern(srcSeed, i) {
			same++
		}
	}
	if same > 64 {
		t.Errorf("canary and pattern agree on %d of 4096 bytes", same)
	}
}

// TestGIDNetdev reads the network device under a GID and its address
// and MTU, as the 6.1 core and class/net lay them out.
func TestGIDNetdev(t *testing.T) {
	port := "class/infiniband/rxe0/ports/1/"
	root := writeSysfs(t, map[string]string{
		port + "gid_attrs/ndevs/1": "eth0\n",
		port + "gid_attrs/ndevs/2": "../eth0\n",
		port + "gid_attrs/ndevs/3": "eth1\n",
		port + "gid_attrs/ndevs/4": "eth2\n",
		"class/net/eth0/address":   "52:54:00:81:00:02\n",
		"class/net/eth0/mtu":       "1500\n",
		"class/net/eth1/address":   "52:54:00:81:00:03\n",
		"class/net/eth1/mtu":       "jumbo\n",
		"class/net/eth2/address":   "00:00:00:00:00:00:00:00\n",
		"class/net/eth2/mtu":       "1500\n",
	})
	n, err := readGIDNetdev(root, "rxe0", 1)
	if err != nil || n.name != "eth0" || n.mac != [6]byte{0x52, 0x54, 0, 0x81, 0, 2} || n.mtu != 1500 {
		t.Errorf("GID 1: %+v, %v", n, err)
	}
	for _, i := range []int{0, 2, 3, 4} {
		if n, err := readGIDNetdev(root, "rxe0", i); err == nil {
			t.Errorf("GID %d: %+v", i, n)
		}
	}
}

func TestUnusedGID(t *testing.T) {
	v4 := gidEntry{index: 1, gid: "0000:0000:0000:0000:0000:ffff:0a51:0001", typ: "RoCE v2"}
	for _, tc := range []struct {
		name  string
		table []gidEntry
		want  int
	}{
		{"an unused entry", []gidEntry{{index: 0, gid: "fe80:0000:0000:0000:5054:00ff:fe81:0001"}, v4,
			{index: 2, gid: "0000:0000:0000:0000:0000:0000:0000:0000"}, {index: 3, gid: "0000:0000:0000:0000:0000:0000:0000:0000"}}, 2},
		{"a full table", []gidEntry{{index: 0, gid: "fe80:0000:0000:0000:5054:00ff:fe81:0001"}, v4}, 2},
		{"an index the table lacks", []gidEntry{{index: 0, gid: "fe80:0000:0000:0000:5054:00ff:fe81:0001"}, v4,
			{index: 3, gid: "fe80:0000:0000:0000:5054:00ff:fe81:0001"}}, 2},
	} {
		if got := unusedGID(tc.table); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.want)
		}
	}
}

// TestRoceMTU: iboe_get_mtu's answers for common Ethernet MTUs.
func TestRoceMTU(t *testing.T) {
	for eth, want := range map[int]int{1500: 1024, 1024 + 96: 1024, 1024 + 95: 512, 9000: 4096, 4096 + 96: 4096, 2200: 2048, 300: 0} {
		if got := roceMTU(eth); got != want {
			t.Errorf("Ethernet MTU %d: %d, want %d", eth, got, want)
		}
	}
}
