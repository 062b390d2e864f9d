package npfnic

import (
	"bytes"
	"net"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/npfnic/npfnic/internal/testutil"
	"github.com/npfnic/npfnic/pcie"
	"github.com/npfnic/npfnic/vdevice/guestmem"
	"github.com/npfnic/npfnic/vdevice/hw"
	"github.com/npfnic/npfnic/vdevice/port"
	"github.com/npfnic/npfnic/vdevice/vfiouser"
)

// ethRig is a NIC with a wire, memfd-backed guest RAM at ramIOVA (with the
// guest's own view of it) and bus mastering on: a driver's eye view
// through BAR0.
type ethRig struct {
	t    *testing.T
	n    *NIC
	irq  *fakeIRQ
	mem  *guestmem.Memory
	ram  []byte
	peer *port.PipePort
}

const ramIOVA = 0x20_0000

func newEthRig(t *testing.T, o Options) *ethRig {
	t.Helper()
	fd, err := unix.MemfdCreate("ram", unix.MFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	const size = 1 << 20
	unix.Ftruncate(fd, size)
	mem := guestmem.New()
	if err := mem.MapFD(ramIOVA, size, fd, 0, guestmem.ProtRead|guestmem.ProtWrite); err != nil {
		t.Fatal(err)
	}
	ram, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	dev, peer := port.Pipe(64)
	o.Wire, o.Mem = dev, mem
	n, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	irq := &fakeIRQ{pending: map[int]bool{}}
	n.Attach(vfiouser.Host{IRQ: irq})
	t.Cleanup(func() {
		n.Close()
		mem.UnmapAll()
		unix.Munmap(ram)
	})
	n.RegionWrite(vfiouser.RegionConfig, pcie.OffCommand, []byte{0x06, 0})
	return &ethRig{t: t, n: n, irq: irq, mem: mem, ram: ram, peer: peer}
}

func (r *ethRig) wr(off, v uint32) { wr32(r.t, r.n, hw.RegBAR, uint64(off), v) }
func (r *ethRig) rd(off uint32) uint32 {
	return rd32(r.t, r.n, hw.RegBAR, uint64(off))
}
func (r *ethRig) at(iova uint64, n int) []byte { return r.ram[iova-ramIOVA : iova-ramIOVA+uint64(n)] }

func (r *ethRig) waitFor(what string, cond func() bool) {
	r.t.Helper()
	testutil.WaitFor(r.t, what, cond, func() any { return r.n.Ethernet().Stats() })
}

func (r *ethRig) fired(v int) int {
	r.irq.mu.Lock()
	defer r.irq.mu.Unlock()
	c := 0
	for _, f := range r.irq.fired {
		if f == v {
			c++
		}
	}
	return c
}

func TestDatapathRegisters(t *testing.T) {
	mac := net.HardwareAddr{0x02, 0x11, 0x22, 0x33, 0x44, 0x55}
	r := newEthRig(t, Options{MAC: mac, QueuePairs: 2})
	for _, tc := range []struct {
		name  string
		off   uint32
		write *uint32
		want  uint32
	}{
		{"version", hw.RegVersion, nil, 2<<16 | 14},
		{"features", hw.RegFeatures, nil, hw.FeatTxCsum | hw.FeatTSO4 | hw.FeatTSO6 | hw.FeatRxCsum | hw.FeatRDMA | hw.FeatRDMAODP | hw.FeatRDMAAtomic | hw.FeatRDMASRQ | hw.FeatRDMAUD | hw.FeatRDMAUC | hw.FeatRDMAKernel | hw.FeatRDMAMW | hw.FeatRDMAResizeCQ | hw.FeatRDMAFastReg | hw.FeatRDMAImplicitODP | hw.FeatRxLRO | hw.FeatTxIRQDelay | hw.FeatNotify},
		{"features read-only", hw.RegFeatures, ptr(0), 0x3ffff},
		{"mac lo", hw.RegMACLo, nil, 0x33221102},
		{"mac hi", hw.RegMACHi, nil, 0x5544},
		{"mac read-only", hw.RegMACLo, ptr(0), 0x33221102},
		{"qp max", hw.RegPairMax, nil, 2},
		{"ctrl enable", hw.RegCtrl, ptr(hw.CtrlEnable), hw.CtrlEnable},
		{"status lo", hw.RegStatusAddrLo, ptr(0x1040), 0x1040},
		{"status hi", hw.RegStatusAddrHi, ptr(0x0), 0},
		{"misc arm write-only", hw.RegMiscIRQArm, ptr(1), 0},
		{"pair 1 tx size", hw.PairBase(1) + hw.PairTxSize, ptr(256), 256},
		{"pair 1 rx base hi", hw.PairBase(1) + hw.PairRxBaseHi, ptr(7), 7},
		{"pair 1 itr", hw.PairBase(1) + hw.PairITR, ptr(30), 30},
		{"pair 1 tail write-only", hw.PairBase(1) + hw.PairTxTail, ptr(1), 0},
		{"pair 2 not offered", hw.PairBase(2) + hw.PairTxSize, ptr(256), 0},
		{"reset self-clears and disables", hw.RegCtrl, ptr(hw.CtrlReset), 0},
		{"reset forgot the status address", hw.RegStatusAddrLo, nil, 0},
		{"reset cleared pair registers", hw.PairBase(1) + hw.PairTxSize, nil, 0},
		{"enable with reset", hw.RegCtrl, ptr(hw.CtrlReset | hw.CtrlEnable), hw.CtrlEnable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.write != nil {
				r.wr(tc.off, *tc.write)
			}
			if got := r.rd(tc.off); got != tc.want {
				t.Fatalf("got %#x want %#x", got, tc.want)
			}
		})
	}
	// A 16-bit write merges into a pair's RW register.
	r.wr(hw.PairBase(0)+hw.PairRxSize, 0x12340000)
	r.n.RegionWrite(hw.RegBAR, uint64(hw.PairBase(0)+hw.PairRxSize), []byte{0x00, 0x02})
	if got := r.rd(hw.PairBase(0) + hw.PairRxSize); got != 0x12340200 {
		t.Fatalf("narrow write: %#x", got)
	}
}

func TestNewOptions(t *testing.T) {
	for _, o := range []Options{
		{QueuePairs: hw.PairMax + 1},
		{QueuePairs: -1},
		{MAC: net.HardwareAddr{1, 2, 3, 4, 5, 6}}, // multicast
		{MAC: net.HardwareAddr{2, 2, 3}},
		{ATCCapacity: -1},
		{ATCCapacity: hw.ATCCapacityMax + 1},
		{ATSInvalidateQueueDepth: -1},
		{ATSInvalidateQueueDepth: 33},
		{PASIDWidth: -1},
		{PASIDWidth: 21},
	} {
		if n, err := New(o); err == nil {
			n.Close()
			t.Errorf("New(%+v) accepted", o)
		}
	}
	// The largest translation cache is a valid option, in force at once.
	n, err := New(Options{ATCCapacity: hw.ATCCapacityMax})
	if err != nil {
		t.Fatal(err)
	}
	if c := n.ATS().Capacity(); c != hw.ATCCapacityMax {
		t.Errorf("ATC capacity %d", c)
	}
	n.Close()
	// A failed New leaves the port to the caller, open.
	dev, peer := port.Pipe(1)
	defer peer.Close()
	if _, err := New(Options{Wire: dev, ATCCapacity: -1}); err == nil {
		t.Fatal("bad ATC capacity accepted")
	}
	if err := dev.Send(make([]byte, 60)); err != nil {
		t.Fatalf("port closed by a failed New: %v", err)
	}
	dev.Close()
	a, b := DefaultMAC("/run/a.sock"), DefaultMAC("/run/b.sock")
	if a.String() == b.String() || !bytes.Equal(a[:3], []byte{0x52, 0x54, 0}) || a[0]&2 == 0 || a[0]&1 != 0 {
		t.Fatalf("default MACs %v %v", a, b)
	}
	if DefaultMAC("/run/a.sock").String() != a.String() {
		t.Fatal("default MAC not stable")
	}
	n, err = New(Options{MACSeed: "x"})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	if n.MAC().String() != DefaultMAC("x").String() {
		t.Fatal("MACSeed ignored")
	}
}

// TestEthernetThroughBAR0 programs the datapath the way the driver does
// (BAR0 writes only, completions read from the status block) and moves a
// frame each way, with the pair's MSI-X vector.
func TestEthernetThroughBAR0(t *testing.T) {
	r := newEthRig(t, Options{QueuePairs: 2})
	const (
		status = ramIOVA + 0x0
		txRing = ramIOVA + 0x1000
		rxRing = ramIOVA + 0x2000
		txBuf  = ramIOVA + 0x3000
		rxBuf  = ramIOVA + 0x4000
	)
	qs := func(f hw.Le32) uint32 {
		return f.Get(r.at(status+uint64(hw.StatusPairOffset(1)), hw.PairStatusSize))
	}
	r.wr(hw.RegStatusAddrLo, uint32(status))
	r.wr(hw.RegStatusAddrHi, 0)
	r.waitFor("link up in the status block", func() bool { return hw.StatusLink.Get(r.at(status, 64)) == hw.LinkUp })
	r.wr(hw.RegMiscIRQArm, 1)
	r.wr(hw.RegCtrl, hw.CtrlEnable)
	q := hw.PairBase(1)
	r.wr(q+hw.PairTxBaseLo, uint32(txRing))
	r.wr(q+hw.PairTxSize, 8)
	r.wr(q+hw.PairRxBaseLo, uint32(rxRing))
	r.wr(q+hw.PairRxSize, 8)
	r.wr(q+hw.PairCtrl, hw.PairCtrlEnable)
	r.wr(q+hw.PairIRQArm, 1)
	if r.rd(q+hw.PairCtrl) != hw.PairCtrlEnable|hw.PairCtrlBusy {
		t.Fatal("pair not enabled")
	}
	// RX: one buffer, one frame from the wire.
	d := r.at(rxRing, hw.RxDescSize)
	hw.RxDescAddr.Put(d, rxBuf)
	hw.RxDescBufLen.Put(d, 2048)
	r.wr(q+hw.PairRxTail, 1)
	in := bytes.Repeat([]byte{0xab, 0xcd}, 40)
	r.peer.Send(in)
	r.waitFor("rx_head", func() bool { return qs(hw.PairStatusRxHead) == 1 })
	if hw.RxDescPktLen.Get(d) != uint16(len(in)) || hw.RxDescStatus.Get(d) != hw.RxdDone ||
		!bytes.Equal(r.at(rxBuf, len(in)), in) {
		t.Fatal("received frame")
	}
	r.waitFor("pair vector", func() bool { return r.fired(hw.PairVector(1)) == 1 })
	// TX: a frame in two segments.
	out := make([]byte, 100)
	for i := range out {
		out[i] = byte(i)
	}
	copy(r.at(txBuf, 100), out)
	t0, t1 := r.at(txRing, 16), r.at(txRing+16, 16)
	hw.TxDescAddr.Put(t0, txBuf)
	hw.TxDescLen.Put(t0, 30)
	hw.TxDescAddr.Put(t1, txBuf+30)
	hw.TxDescLen.Put(t1, 70)
	hw.TxDescFlags.Put(t1, hw.TxdEOP)
	r.wr(q+hw.PairIRQArm, 1)
	r.wr(q+hw.PairTxTail, 2)
	buf := make([]byte, 2048)
	n, err := r.peer.Recv(buf)
	if err != nil || !bytes.Equal(buf[:n], out) {
		t.Fatalf("sent frame: %v", err)
	}
	r.waitFor("tx_head", func() bool { return qs(hw.PairStatusTxHead) == 2 })
	r.waitFor("pair vector again", func() bool { return r.fired(hw.PairVector(1)) == 2 })
	// A bad doorbell: queue error, misc vector.
	r.wr(q+hw.PairTxTail, 100)
	r.waitFor("queue error", func() bool { return qs(hw.PairStatusError) == hw.QErrBadTail })
	if qs(hw.PairStatusErrorInfo) != 100 {
		t.Fatal("error_info")
	}
	r.waitFor("misc vector", func() bool { return r.fired(hw.MiscVector) == 1 })
}

// TestDatapathResets: DEVICE_RESET, bus mastering and client disconnect
// all stop the queues.
func TestDatapathResets(t *testing.T) {
	r := newEthRig(t, Options{QueuePairs: 1})
	setup := func() {
		r.wr(hw.RegStatusAddrLo, ramIOVA)
		r.wr(hw.RegStatusAddrHi, 0)
		r.wr(hw.RegCtrl, hw.CtrlEnable)
		q := hw.PairBase(0)
		r.wr(q+hw.PairTxBaseLo, ramIOVA+0x1000)
		r.wr(q+hw.PairTxSize, 8)
		r.wr(q+hw.PairRxBaseLo, ramIOVA+0x2000)
		r.wr(q+hw.PairRxSize, 8)
		r.wr(q+hw.PairCtrl, hw.PairCtrlEnable)
		d := r.at(ramIOVA+0x2000, 16)
		hw.RxDescAddr.Put(d, ramIOVA+0x4000)
		hw.RxDescBufLen.Put(d, 2048)
		r.wr(q+hw.PairRxTail, 1)
	}
	rxHead := func() uint32 { return hw.PairStatusRxHead.Get(r.at(ramIOVA+uint64(hw.StatusPairOffset(0)), 64)) }

	setup()
	r.n.RegionWrite(vfiouser.RegionConfig, pcie.OffCommand, []byte{0x02, 0}) // bus master off
	r.peer.Send(make([]byte, 60))
	r.waitFor("drop without bus mastering", func() bool { return r.n.Ethernet().Stats().RxDropsDisabled == 1 })
	r.n.RegionWrite(vfiouser.RegionConfig, pcie.OffCommand, []byte{0x06, 0})
	r.peer.Send(make([]byte, 60))
	r.waitFor("rx with bus mastering", func() bool { return rxHead() == 1 })

	if err := r.n.Reset(); err != nil {
		t.Fatal(err)
	}
	if r.rd(hw.RegCtrl) != 0 || r.rd(hw.PairBase(0)+hw.PairCtrl) != 0 || r.rd(hw.RegStatusAddrLo) != 0 {
		t.Fatal("DEVICE_RESET left the datapath configured")
	}
	if r.n.Ethernet().Stats().Pairs[0].Enabled {
		t.Fatal("pair still running after DEVICE_RESET")
	}
	r.n.RegionWrite(vfiouser.RegionConfig, pcie.OffCommand, []byte{0x06, 0})
	setup()
	r.mem.UnmapAll()
	r.n.ClientDisconnected()
	if st := r.n.Ethernet().Stats(); st.Enabled || st.Pairs[0].Enabled {
		t.Fatalf("queues running after disconnect: %+v", st)
	}
	r.peer.Send(make([]byte, 60)) // nothing to DMA into, nothing crashes
	r.waitFor("frame dropped", func() bool { return r.n.Ethernet().Stats().RxDropsDisabled == 2 })
}
