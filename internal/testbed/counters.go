package testbed

import (
	"fmt"
	"strconv"
	"strings"
)

// ParseEthtoolStats reads the output of ethtool -S: "name: value" lines
// after the "NIC statistics:" header. Non-numeric values are skipped.
func ParseEthtoolStats(out string) map[string]uint64 {
	stats := map[string]uint64{}
	for _, line := range strings.Split(out, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
		if err != nil {
			continue
		}
		stats[strings.TrimSpace(k)] = n
	}
	return stats
}

// ParseSNMP reads /proc/net/snmp (or /proc/net/netstat): pairs of lines
// "Proto: Name1 Name2 ..." / "Proto: v1 v2 ...", returned as
// "Proto.Name" -> value (Tcp.RetransSegs, TcpExt.TCPTimeouts, ...).
func ParseSNMP(data string) (map[string]int64, error) {
	out := map[string]int64{}
	lines := strings.Split(strings.TrimSpace(data), "\n")
	for i := 0; i+1 < len(lines); i += 2 {
		hp, hdr, ok1 := strings.Cut(lines[i], ":")
		vp, vals, ok2 := strings.Cut(lines[i+1], ":")
		if !ok1 || !ok2 || hp != vp {
			return nil, fmt.Errorf("snmp: line %d and %d do not pair up: %q / %q", i+1, i+2, lines[i], lines[i+1])
		}
		names, values := strings.Fields(hdr), strings.Fields(vals)
		if len(names) != len(values) {
			return nil, fmt.Errorf("snmp: %s has %d names and %d values", hp, len(names), len(values))
		}
		for j, n := range names {
			v, err := strconv.ParseInt(values[j], 10, 64)
			if err != nil {
				return nil, fmt.Errorf("snmp: %s.%s: bad value %q", hp, n, values[j])
			}
			out[hp+"."+n] = v
		}
	}
	return out, nil
}
