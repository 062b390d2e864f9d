package ibrc_test

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/npfnic/npfnic/ibrc"
	"github.com/npfnic/npfnic/ibrc/rocev2"
)

// needTool skips when a host tool is missing, unless NPFNIC_REQUIRE_TOOLS=1.
func needTool(t *testing.T, name, pkg string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err == nil {
		return p
	}
	if os.Getenv("NPFNIC_REQUIRE_TOOLS") == "1" {
		t.Fatalf("%s not found: install the Debian package %s (listed in images/host-packages.txt)", name, pkg)
	}
	t.Skipf("%s not found (Debian package %s); set NPFNIC_REQUIRE_TOOLS=1 to make this a failure", name, pkg)
	return ""
}

// recorder keeps every frame the engines send, in order, for comparison
// with what tshark decodes from the pcap.
type recorder struct {
	pw     *rocev2.PcapWriter
	frames [][]byte
}

func (r *recorder) WriteFrame(ts time.Time, f []byte) error {
	r.frames = append(r.frames, append([]byte(nil), f...))
	return r.pw.WriteFrame(ts, f)
}

// TestWireConformance runs a conversation with SENDs, RDMA WRITE with
// immediate, a multi-packet RDMA READ, an RNR NAK for a receive fault, an
// RNR NAK for a missing receive WQE, a lost packet (PSN sequence error NAK)
// and an R_Key violation (remote access error NAK), captures it with
// pcapgo, and checks that tshark decodes every frame as InfiniBand over
// RoCEv2 with the opcode, QPN, PSN and AETH the engine sent, the ICRC the
// independent computation gives, and no malformed-packet or warning-level
// expert info.
func TestWireConformance(t *testing.T) {
	tshark := needTool(t, "tshark", "tshark")
	var pcap bytes.Buffer
	pw, err := rocev2.NewPcapWriter(&pcap)
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{pw: pw}
	armed := false // drop the next data packet from A, once
	o := opts{capture: rec, minRNR: 5, rnr: 7, retry: 7, psnA: 1<<24 - 4, link: linkDropFirst(func(f []byte) bool {
		if armed && len(f) > 1000 {
			armed = false
			return true
		}
		return false
	})}
	w := newWorld(t, o)
	fill(w.a.at(0, 64<<10), 1)
	fill(w.b.at(1<<20, 64<<10), 2)
	w.b.mem.Evict(memBase+4096, 1) // the first receive buffer's second page faults
	w.b.qp.PostRecv(ibrc.RecvWR{ID: 1, SGL: w.b.sge(0, 8192)})
	w.a.qp.PostSend(ibrc.SendWR{ID: 1, Opcode: ibrc.WRSend, Flags: ibrc.SendSignaled, SGL: w.a.sge(0, 5000)})
	w.a.qp.PostSend(ibrc.SendWR{ID: 2, Opcode: ibrc.WRWriteImm, Flags: ibrc.SendSignaled, SGL: w.a.sge(0, 3000),
		RemoteAddr: memBase + 65536, RKey: w.b.mr.RKey(), Imm: 0x01020304})
	w.a.qp.PostSend(ibrc.SendWR{ID: 3, Opcode: ibrc.WRRead, Flags: ibrc.SendSignaled, SGL: w.a.sge(1<<20, 4000),
		RemoteAddr: memBase + 1<<20, RKey: w.b.mr.RKey()})
	w.a.qp.PostSend(ibrc.SendWR{ID: 4, Opcode: ibrc.WRSendImm, Flags: ibrc.SendSignaled, SGL: w.a.sge(0, 17), Imm: 5})
	// The WRITE with immediate and the last SEND find no receive WQE at
	// first: post them late.
	w.settle(200 * time.Microsecond)
	w.b.qp.PostRecv(ibrc.RecvWR{ID: 2, SGL: w.b.sge(0, 8192)})
	w.b.qp.PostRecv(ibrc.RecvWR{ID: 3, SGL: w.b.sge(0, 8192)})
	w.run(time.Second, func() bool { return len(w.a.wcs) == 4 })
	// A lost first packet: the second draws a PSN sequence error NAK.
	armed = true
	w.b.qp.PostRecv(ibrc.RecvWR{ID: 4, SGL: w.b.sge(0, 8192)})
	w.a.qp.PostSend(ibrc.SendWR{ID: 40, Opcode: ibrc.WRSend, SGL: w.a.sge(0, 2000)})
	w.a.qp.PostSend(ibrc.SendWR{ID: 5, Opcode: ibrc.WRWrite, Flags: ibrc.SendSignaled, SGL: w.a.sge(0, 10),
		RemoteAddr: memBase, RKey: 0xdead00})
	w.run(time.Second, func() bool { return len(w.a.wcs) == 5 && len(w.b.rwcs) == 4 })
	for i, c := range w.a.wcs[:4] {
		if c.Status != ibrc.WCSuccess {
			t.Fatalf("completion %d: %+v", i, c)
		}
	}
	if w.a.wcs[4].Status != ibrc.WCRemAccessErr {
		t.Fatalf("R_Key violation completed with %v", w.a.wcs[4].Status)
	}
	sb := w.b.e.Stats()
	if sb.RNRNakFault == 0 || sb.RNRNakNoWQE == 0 || sb.SeqNakSent == 0 || sb.ErrNakSent != 1 {
		t.Fatalf("scenario did not exercise the NAKs: %+v", sb)
	}

	file := filepath.Join(t.TempDir(), "rc.pcap")
	if err := os.WriteFile(file, pcap.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if os.Getenv("NPFNIC_KEEP_PCAP") != "" {
		os.WriteFile(os.Getenv("NPFNIC_KEEP_PCAP"), pcap.Bytes(), 0o644)
	}
	fields := []string{"frame.number", "frame.protocols", "infiniband.bth.opcode", "infiniband.bth.destqp",
		"infiniband.bth.psn", "infiniband.bth.a", "infiniband.aeth.syndrome", "infiniband.aeth.syndrome.timer",
		"infiniband.aeth.msn", "infiniband.reth.r_key", "infiniband.reth.dmalen", "infiniband.invariant.crc",
		"_ws.malformed", "_ws.expert.severity"}
	args := []string{"-r", file, "-n", "-T", "fields", "-E", "separator=|", "-E", "occurrence=f"}
	for _, f := range fields {
		args = append(args, "-e", f)
	}
	cmd := exec.Command(tshark, args...)
	cmd.Env = append(os.Environ(), "HOME="+t.TempDir()) // no user preferences
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("tshark: %v\n%s", err, out)
	}
	dec := rocev2.NewDecoder()
	sc := bufio.NewScanner(bytes.NewReader(out))
	n := 0
	opcodes := map[rocev2.Opcode]int{}
	var sawRNRTimer bool
	for sc.Scan() {
		col := strings.Split(sc.Text(), "|")
		if len(col) != len(fields) {
			t.Fatalf("tshark line %q", sc.Text())
		}
		if n >= len(rec.frames) {
			t.Fatalf("tshark shows more frames than were captured")
		}
		f := rec.frames[n]
		n++
		p, err := dec.Decode(f)
		if err != nil {
			t.Fatalf("frame %d: own decoder: %v", n, err)
		}
		where := fmt.Sprintf("frame %d (%v PSN %d)", n, p.BTH.Opcode, p.BTH.PSN)
		if !strings.HasSuffix(col[1], "eth:ethertype:ip:udp:infiniband") && !strings.Contains(col[1], "udp:infiniband") {
			t.Errorf("%s: protocols %q, want InfiniBand over UDP", where, col[1])
		}
		num := func(i int) uint64 {
			v, err := strconv.ParseUint(strings.TrimPrefix(col[i], "0x"), map[bool]int{true: 16, false: 10}[strings.HasPrefix(col[i], "0x")], 64)
			if err != nil {
				t.Fatalf("%s: field %s = %q", where, fields[i], col[i])
			}
			return v
		}
		if num(2) != uint64(p.BTH.Opcode) || num(3) != uint64(p.BTH.DestQP) || num(4) != uint64(p.BTH.PSN) {
			t.Errorf("%s: tshark opcode %s QP %s PSN %s", where, col[2], col[3], col[4])
		}
		if (col[5] == "1" || col[5] == "True") != p.BTH.AckReq {
			t.Errorf("%s: AckReq %q", where, col[5])
		}
		opcodes[p.BTH.Opcode]++
		if p.BTH.Opcode.Has(rocev2.HasAETH) {
			if num(6) != uint64(p.AETH.Syndrome) || num(8) != uint64(p.AETH.MSN) {
				t.Errorf("%s: tshark syndrome %s MSN %s, sent %v MSN %d", where, col[6], col[8], p.AETH.Syndrome, p.AETH.MSN)
			}
			if p.AETH.Syndrome.IsRNRNAK() {
				if num(7) != uint64(p.AETH.Syndrome.Value()) || p.AETH.Syndrome.Value() != 5 {
					t.Errorf("%s: RNR NAK timer %s, want 5 (0.06 ms)", where, col[7])
				}
				sawRNRTimer = true
			}
		}
		if p.BTH.Opcode.Has(rocev2.HasRETH) && (num(9) != uint64(p.RETH.RKey) || num(10) != uint64(p.RETH.DMALength)) {
			t.Errorf("%s: RETH %s %s", where, col[9], col[10])
		}
		ipLen := int(p.IPv4.Length)
		want := independentICRC(f[14 : 14+ipLen-4])
		if num(11) != uint64(want) || p.BTH.ICRC != want {
			t.Errorf("%s: ICRC tshark %s, frame %#08x, independent %#08x", where, col[11], p.BTH.ICRC, want)
		}
		if col[12] != "" {
			t.Errorf("%s: tshark reports a malformed packet", where)
		}
		if col[13] != "" {
			// Expert severities: chat 2097152, note 4194304, warn 6291456, error 8388608.
			if sev, _ := strconv.Atoi(col[13]); sev >= 6291456 {
				t.Errorf("%s: tshark expert info of severity %s", where, col[13])
			}
		}
	}
	if n != len(rec.frames) {
		t.Fatalf("tshark decoded %d frames, %d captured", n, len(rec.frames))
	}
	for _, op := range []rocev2.Opcode{rocev2.OpSendFirst, rocev2.OpSendLast, rocev2.OpWriteLastImm, rocev2.OpReadRequest,
		rocev2.OpReadRespFirst, rocev2.OpReadRespLast, rocev2.OpSendOnlyImm, rocev2.OpAck, rocev2.OpWriteOnly} {
		if opcodes[op] == 0 {
			t.Errorf("no %v in the capture", op)
		}
	}
	if !sawRNRTimer {
		t.Error("no RNR NAK in the capture")
	}
	t.Logf("%d frames decoded by tshark: %v", n, opcodes)
}

// independentICRC recomputes the ICRC without the package: the masked
// pseudo-packet through a bitwise CRC-32 (see rocev2's test vectors).
func independentICRC(ipPkt []byte) uint32 {
	buf := append(bytes.Repeat([]byte{0xff}, 8), ipPkt...)
	ip := buf[8:]
	ip[1], ip[8], ip[10], ip[11] = 0xff, 0xff, 0xff, 0xff
	ip[26], ip[27] = 0xff, 0xff
	ip[32] = 0xff
	crc := ^uint32(0)
	for _, b := range buf {
		crc ^= uint32(b)
		for i := 0; i < 8; i++ {
			crc = crc>>1 ^ 0xedb88320&-(crc&1)
		}
	}
	crc = ^crc
	return uint32(byte(crc))<<24 | uint32(byte(crc>>8))<<16 | uint32(byte(crc>>16))<<8 | uint32(byte(crc>>24))
}
