package workload

import (
	"fmt"
	"strconv"
	"strings"
)

// The overcommit workload (seed 000's Table 5, §6.1): several RDMA servers
// in one guest, npfnic-overcommit (guestdrv/mpi/overcommit.c), each
// registering a region larger than its working set, which a client in the
// peer guest RDMA WRITEs into. Pinned, a region costs the guest all of its
// pages at registration; on demand, the pages the NIC faults in.

// OvercommitReg is how the servers register their regions.
type OvercommitReg string

const (
	// OvercommitPinned registers as ibv_reg_mr does by default: every page
	// of the region pinned.
	OvercommitPinned OvercommitReg = "pinned"
	// OvercommitODP asks for an on-demand region (IBV_ACCESS_ON_DEMAND,
	// explicit ODP).
	OvercommitODP OvercommitReg = "odp"
	// OvercommitODPAll registers as OvercommitPinned with npfnic.ko's
	// odp=all: the unmodified server's region is on demand (transparent
	// ODP).
	OvercommitODPAll OvercommitReg = "odp-all"
)

// OvercommitRegs are the three, pinning first.
var OvercommitRegs = []OvercommitReg{OvercommitPinned, OvercommitODP, OvercommitODPAll}

// ParseOvercommitReg reads pinned, odp or odp-all.
func ParseOvercommitReg(s string) (OvercommitReg, error) {
	for _, r := range OvercommitRegs {
		if string(r) == s {
			return r, nil
		}
	}
	return "", fmt.Errorf("registration %q: want pinned, odp or odp-all", s)
}

// OvercommitServer is one npfnic-overcommit server.
type OvercommitServer struct {
	Dev        string
	GIDIndex   int
	Port       int
	Region, WS int64 // bytes registered, bytes the client writes
	ODP        bool  // -odp: IBV_ACCESS_ON_DEMAND
}

// Args is its command line.
func (s OvercommitServer) Args() []string {
	a := []string{"npfnic-overcommit", "-d", s.Dev, "-g", strconv.Itoa(s.GIDIndex), "-serve", strconv.Itoa(s.Port),
		"-region", strconv.FormatInt(s.Region, 10), "-ws", strconv.FormatInt(s.WS, 10)}
	if s.ODP {
		a = append(a, "-odp")
	}
	return a
}

// OvercommitClient is one npfnic-overcommit client.
type OvercommitClient struct {
	Dev      string
	GIDIndex int
	Server   string // HOST:PORT
	Size     int    // bytes per WRITE
	Depth    int    // WRITEs outstanding
	// Warmup is how many untimed passes over the working set come first,
	// Seconds how long the timed run lasts after them (0: none).
	Warmup  int
	Seconds float64
}

// Args is its command line.
func (c OvercommitClient) Args() []string {
	return []string{"npfnic-overcommit", "-d", c.Dev, "-g", strconv.Itoa(c.GIDIndex), "-c", c.Server,
		"-size", strconv.Itoa(c.Size), "-depth", strconv.Itoa(c.Depth), "-warmup", strconv.Itoa(c.Warmup),
		"-t", strconv.FormatFloat(c.Seconds, 'f', -1, 64)}
}

// OvercommitServerState is what a server's output says of it so far.
type OvercommitServerState struct {
	Registered bool   // its region is registered
	Listening  bool   // and it waits for its client
	PID        int    // its process, once listening
	Failed     string // "register failed: ..." if it could not register
}

// ParseOvercommitServer reads a server's output.
func ParseOvercommitServer(out string) OvercommitServerState {
	var s OvercommitServerState
	for _, l := range strings.Split(out, "\n") {
		l = strings.TrimSpace(l)
		switch {
		case strings.HasPrefix(l, "registered "):
			s.Registered = true
		case strings.HasPrefix(l, "listening "):
			s.Listening = true
			s.PID, _ = strconv.Atoi(fieldsKV(strings.Fields(l)[1:])["pid"])
		case strings.HasPrefix(l, "register failed:"):
			s.Failed = l
		}
	}
	return s
}

// ParseOvercommitClient reads a client's result: its MB/s (10^6 bytes).
func ParseOvercommitClient(out string) (float64, error) {
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) == 0 || f[0] != "result" {
			continue
		}
		kv := fieldsKV(f[1:])
		v, err := strconv.ParseFloat(kv["MBps"], 64)
		if err != nil || v < 0 {
			return 0, fmt.Errorf("npfnic-overcommit line %q: no MBps", l)
		}
		return v, nil
	}
	return 0, fmt.Errorf("npfnic-overcommit printed no result:\n%s", out)
}
