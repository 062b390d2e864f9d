package ci

import (
	"errors"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

// rocePcap reads a capture of an npfnic's port (RDMAPairConfig.Pcap) with
// tshark, every UDP datagram to port 4791 decoded as RoCEv2.
type rocePcap struct {
	t      *testing.T
	tshark string
	args   []string
	frames []pcapFrame // decode's, once read
}

// pcapFrame is what tshark decoded of one frame: 0 where a field is
// absent.
type pcapFrame struct {
	number, udpDstPort uint64
	roce               bool // decoded as InfiniBand in UDP to port 4791
	opcode, destQP     uint64
	qkey               uint64 // the DETH's Q_Key
	mad                bool
	mgmtClass, attrID  uint64 // the MAD's
	malformed          bool
	severity           uint64 // the highest of its expert infos
}

// wsError is the expert severity "error" (Wireshark's PI_ERROR).
const wsError = 0x00800000

// openRoCEPcap returns pcap's reader, or skips the test (fails it when VM
// tests are required) without tshark.
func openRoCEPcap(t *testing.T, pcap string) *rocePcap {
	t.Helper()
	tshark, err := exec.LookPath("tshark")
	if err != nil {
		if required() {
			t.Fatal("tshark is missing (images installs it on the host)")
		}
		t.Skip("no tshark")
	}
	// tshark guesses at what a SEND's payload carries, and a wrong guess
	// is a malformed packet: RPC-over-RDMA claims perftest's 4-byte
	// handshake messages, and "EtherType over IB" took the 2-byte payload
	// of a SEND whose pad bytes are zero for EtherType 0x8ffd (make
	// stress-ci, once). NVMe over RDMA's dissector (Wireshark 4.0) knows a
	// multi-packet RDMA WRITE's offset from its First packet only and
	// decodes the Middle and Last packets of a log page's data as if each
	// began the page, which it then calls malformed. The payloads are the
	// programs', so these are turned off; the InfiniBand and RoCEv2
	// layers, ICRC included, and the MADs of QP 1 are all decoded.
	return &rocePcap{t: t, tshark: tshark, args: []string{"-r", pcap, "-d", "udp.port==4791,infiniband",
		"--disable-protocol", "rpcordma", "--disable-protocol", "nvme-rdma", "--disable-heuristic", "eth_over_ib"}}
}

// decode reads every frame of the capture, in one pass of tshark.
func (r *rocePcap) decode() []pcapFrame {
	r.t.Helper()
	if r.frames != nil {
		return r.frames
	}
	fields := []string{"frame.number", "udp.dstport", "infiniband.bth.opcode", "infiniband.bth.destqp",
		"infiniband.deth.q_key", "infiniband.mad.mgmtclass", "infiniband.mad.attributeid",
		"_ws.expert.severity", "_ws.malformed"}
	args := append(append([]string{}, r.args...), "-T", "fields")
	for _, f := range fields {
		args = append(args, "-e", f)
	}
	// Fields only: tshark's stderr (its warning when run as root is 11
	// words) is no frame.
	out, err := exec.Command(r.tshark, args...).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			out = ee.Stderr
		}
		r.t.Fatalf("tshark %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	r.frames = []pcapFrame{}
	for _, l := range strings.Split(string(out), "\n") {
		if strings.TrimSpace(l) == "" {
			continue
		}
		f := strings.Split(l, "\t")
		if len(f) != len(fields) {
			r.t.Fatalf("tshark: %d fields in %q, want %d", len(f), l, len(fields))
		}
		// A field that occurs more than once is a list ("a,b"); tshark
		// prints each number in its display base: 100, 0x07, 0x0010.
		num := func(i int, most bool) uint64 {
			var v uint64
			for _, s := range strings.Split(f[i], ",") {
				if s == "" {
					continue
				}
				n, err := strconv.ParseUint(s, 0, 64)
				if err != nil {
					r.t.Fatalf("tshark: %s %q in %q: %v", fields[i], s, l, err)
				}
				if !most {
					return n
				}
				v = max(v, n)
			}
			return v
		}
		r.frames = append(r.frames, pcapFrame{
			number: num(0, false), udpDstPort: num(1, false),
			roce:   f[2] != "" && num(1, false) == 4791,
			opcode: num(2, false), destQP: num(3, false), qkey: num(4, false),
			mad: f[5] != "", mgmtClass: num(5, false), attrID: num(6, false),
			severity: num(7, true), malformed: f[8] != "",
		})
	}
	return r.frames
}

// checkDecoded fails the test unless tshark decodes at least minRoCE
// frames as RoCEv2 and finds no malformed frame and no error-level expert
// warning in the capture.
func (r *rocePcap) checkDecoded(minRoCE int) {
	r.t.Helper()
	frames := r.decode()
	roce, bad := 0, 0
	for _, f := range frames {
		if f.roce {
			roce++
		}
		if f.malformed || f.severity >= wsError {
			bad++
		}
	}
	r.t.Logf("pcap: %d frames, %d RoCEv2, %d malformed or with errors", len(frames), roce, bad)
	if roce < minRoCE || bad != 0 {
		// Show what tshark objects to in the first few.
		out, _ := exec.Command(r.tshark, append(append([]string{}, r.args...), "-Y", "_ws.malformed || _ws.expert.severity >= error", "-V")...).CombinedOutput()
		r.t.Fatalf("pcap: %d frames, %d decoded as RoCEv2 (want %d), %d malformed or with expert errors; the first:\n%.8000s", len(frames), roce, minRoCE, bad, out)
	}
}

// The communication management MADs (IBA 12.6, management class 7) by
// attribute ID.
var cmAttributes = []struct {
	id   uint64
	name string
}{
	{0x10, "REQ"}, {0x11, "MRA"}, {0x12, "REJ"}, {0x13, "REP"}, {0x14, "RTU"}, {0x15, "DREQ"},
	{0x16, "DREP"}, {0x17, "SIDR_REQ"}, {0x18, "SIDR_REP"}, {0x19, "LAP"}, {0x1a, "APR"},
}

// cmMADs counts the capture's communication management MADs by name
// ("REQ", "SIDR_REP", ...), each decoded in a UD SEND to QP 1 (the GSI QP)
// with the GSI's Q_Key; any other MAD, or a CM MAD elsewhere, fails the
// test.
func (r *rocePcap) cmMADs() map[string]int {
	r.t.Helper()
	names := map[uint64]string{}
	for _, a := range cmAttributes {
		names[a.id] = a.name
	}
	n := map[string]int{}
	for _, f := range r.decode() {
		if !f.mad {
			continue
		}
		// UD SEND Only (opcode 100) to QP 1 with the GSI Q_Key.
		name, ok := names[f.attrID]
		if f.opcode != 100 || f.destQP != 1 || f.qkey != 0x80010000 || f.mgmtClass != 7 || !ok {
			r.t.Fatalf("frame %d: a MAD of class %#x, attribute %#x, in opcode %d to QP %d with Q_Key %#x: want a CM MAD (class 7) in a UD SEND Only (100) to QP 1, Q_Key 0x80010000",
				f.number, f.mgmtClass, f.attrID, f.opcode, f.destQP, f.qkey)
		}
		n[name]++
	}
	return n
}
