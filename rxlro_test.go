package npfnic

import (
	"net"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"github.com/npfnic/npfnic/vdevice/hw"
	"github.com/npfnic/npfnic/vdevice/port"
)

// hostTCP4 is a TCP/IPv4 super-packet of n payload bytes as the host
// kernel hands it to a TAP reader with receive offloads, and its GSO
// request.
func hostTCP4(t *testing.T, n, mss int) ([]byte, port.GSOInfo) {
	t.Helper()
	payload := make([]byte, n)
	for i := range payload {
		payload[i] = byte(i * 7)
	}
	eth := &layers.Ethernet{SrcMAC: net.HardwareAddr{2, 0, 0, 0, 0, 1}, DstMAC: net.HardwareAddr{2, 0, 0, 0, 0, 2},
		EthernetType: layers.EthernetTypeIPv4}
	ip := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolTCP, SrcIP: net.IPv4(10, 0, 0, 1), DstIP: net.IPv4(10, 0, 0, 2)}
	tcp := &layers.TCP{SrcPort: 5201, DstPort: 40000, Seq: 1, ACK: true, Ack: 1, Window: 512}
	tcp.SetNetworkLayerForChecksum(ip)
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true},
		eth, ip, tcp, gopacket.Payload(payload)); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes(), port.GSOInfo{Type: port.GSOTCPv4, HdrLen: 54, GSOSize: mss, CsumStart: 34, CsumOffset: 16, NeedsCsum: true}
}

// TestLROUnderFaults: under a translating RX policy a super-packet goes
// whole only when every buffer of its chain translates now. When one
// would fault, it is cut into frames, and those meet the fault under the
// policy as any frame does: the probe of the chain counts no fault of its
// own. Once the page is in, the next super-packet is a chain.
func TestLROUnderFaults(t *testing.T) {
	r := newFaultRig(t, faultOpts{policy: hw.RxPolicyDrop, ringSize: 64})
	for i := uint32(0); i < 64; i++ {
		if i != 5 {
			r.as.Map(rxVA(i), r.g.AllocPage(), true)
		}
	}
	r.wr(hw.PairBase(0)+hw.PairCtrl, hw.PairCtrlEnable|hw.PairCtrlRxLRO)
	r.postRX(64)
	e := r.n.Ethernet()

	f, gso := hostTCP4(t, 20000, 1448) // 14 segments, a chain of 10
	e.ReceiveGSO(f, gso)
	ps := e.Stats().Pairs[0]
	if ps.RxLROFrames != 0 || r.qp(hw.PairStatusRxHead) != 5 {
		t.Fatalf("rx_head %d, stats %+v: want the five segments before the cold slot", r.qp(hw.PairStatusRxHead), ps)
	}
	var faults uint64
	for _, n := range r.n.ATS().Stats().Faults {
		faults += n
	}
	if ps.RxFaults == 0 || faults != ps.RxFaults {
		t.Fatalf("ATS counted %d faults, the pair %d: the chain's probe must count none", faults, ps.RxFaults)
	}

	r.as.Map(rxVA(5), r.g.AllocPage(), true)
	f, gso = hostTCP4(t, 20000, 1448)
	e.ReceiveGSO(f, gso)
	ps = e.Stats().Pairs[0]
	if ps.RxLROFrames != 1 || ps.RxLRODescs != 10 || r.qp(hw.PairStatusRxHead) != 15 {
		t.Fatalf("rx_head %d, stats %+v: want a chain of 10 from descriptor 5", r.qp(hw.PairStatusRxHead), ps)
	}
	d := r.rxDesc(5)
	if st := hw.RxDescStatus.Get(d); st != hw.RxdDone|hw.RxdCsumOK|hw.RxdGSOTCP4|10<<hw.RxdChainShift || hw.RxDescGSOSize.Get(d) != 1448 {
		t.Fatalf("first descriptor status %#x gso_size %d", st, hw.RxDescGSOSize.Get(d))
	}
	if got := r.readVA(rxVA(5), 2048); string(got[:54]) != string(f[:54]) {
		t.Fatalf("headers % x, want % x", got[:54], f[:54])
	}
}
