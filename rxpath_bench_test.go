package npfnic

import (
	"fmt"
	"net"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"github.com/npfnic/npfnic/vdevice/hw"
)

// BenchmarkRxPath is the device's whole receive path on its own: IPv4/UDP
// frames enter at the port's Mux, which classifies them (RoCEv2 or
// Ethernet); the Ethernet engine steers them to the pair, picks the posted
// descriptor, translates the buffer address (warm ATC) or takes it as an
// IOVA, copies the frame in, verifies the checksum, writes the descriptor
// and rx_head back and decides on the interrupt. A driver goroutine
// reposts buffers in batches as rx_head moves, as NAPI would, polling
// the status block every 20 µs (the ring holds about a millisecond).
//
// The frames are handed to the Mux inline (Dispatch, what its reader does
// with each frame read); the "pipe" mode sends them through a port.Pipe
// instead, so that the reader goroutine's wake-up per frame counts too
// (a real backend adds its own system call on top).
//
// Beside ns/op it reports frames/s and memcpy_pct: the time a plain copy
// of the same bytes into the same buffers takes, measured right after in
// the same run, as a share of the path's time (100% would be a device
// that costs nothing but the copy).
func BenchmarkRxPath(b *testing.B) {
	for _, size := range []int{64, 1500} {
		for _, mode := range []string{"iova", "translated", "translated+pipe"} {
			b.Run(fmt.Sprintf("%dB/%s", size, mode), func(b *testing.B) {
				benchRxPath(b, size, mode != "iova", mode == "translated+pipe")
			})
		}
	}
}

const (
	rxPathRing  = 1024
	rxPathBatch = 64 // the driver reposts once this many buffers are back
)

func benchRxPath(b *testing.B, size int, translated, pipe bool) {
	r := newFaultRig(b, faultOpts{noATS: !translated, policy: hw.RxPolicyPin, ringSize: rxPathRing})
	addr := make([]uint64, rxPathRing)
	bufs := make([][]byte, rxPathRing)
	for i := range addr {
		page := r.g.AllocPage()
		addr[i], bufs[i] = page, r.g.Bytes(page, 2048)
		if translated {
			addr[i] = rxVA(uint32(i))
			r.as.Map(addr[i], page, true)
		}
	}
	post := func(n uint32) {
		for range n {
			d := r.rxDesc(r.rxTail)
			hw.RxDescAddr.Put(d, addr[r.rxTail&(rxPathRing-1)])
			hw.RxDescBufLen.Put(d, 2048)
			r.rxTail++
		}
		r.wr(hw.PairBase(0)+hw.PairRxTail, r.rxTail)
	}
	post(rxPathRing)
	frame := udpBenchFrame(b, size)

	var stop atomic.Bool
	driverDone := make(chan struct{})
	go func() {
		defer close(driverDone)
		for !stop.Load() {
			done := r.qp(hw.PairStatusRxHead) - (r.rxTail - rxPathRing)
			if done < rxPathBatch {
				// Sleep rather than spin: on 2 cores a spinning driver
				// would take the CPU the path is measured on.
				time.Sleep(20 * time.Microsecond)
				continue
			}
			post(done)
		}
	}()
	dp := r.n.Ethernet()
	frames0 := dp.Stats().Pairs[0].RxFrames
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for range b.N {
		if pipe {
			r.send(frame)
		} else if !r.n.mux.Dispatch(frame) {
			b.Fatal("the Ethernet engine did not claim the frame")
		}
	}
	want := frames0 + uint64(b.N)
	for dp.Stats().Pairs[0].RxFrames < want {
		runtime.Gosched()
	}
	elapsed := time.Since(start)
	b.StopTimer()
	stop.Store(true)
	<-driverDone
	if s := dp.Stats().Pairs[0]; s.RxFaults != 0 || s.RxFrames != want {
		b.Fatalf("faults %d, frames %d: want 0 and %d", s.RxFaults, s.RxFrames, want)
	}

	copyStart := time.Now()
	for i := range b.N {
		copy(bufs[i&(rxPathRing-1)], frame)
	}
	copied := time.Since(copyStart)
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "frames/s")
	b.ReportMetric(100*copied.Seconds()/elapsed.Seconds(), "memcpy_pct")
}

// udpBenchFrame is an IPv4/UDP frame of size bytes with valid checksums,
// so that the RX checksum check runs in full.
func udpBenchFrame(b *testing.B, size int) []byte {
	const hdrs = 14 + 20 + 8
	eth := &layers.Ethernet{SrcMAC: net.HardwareAddr{2, 0, 0, 0, 0, 1}, DstMAC: net.HardwareAddr{2, 0, 0, 0, 0, 2}, EthernetType: layers.EthernetTypeIPv4}
	ip := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolUDP, SrcIP: net.IP{10, 0, 0, 1}, DstIP: net.IP{10, 0, 0, 2}}
	udp := &layers.UDP{SrcPort: 49152, DstPort: 5201}
	if err := udp.SetNetworkLayerForChecksum(ip); err != nil {
		b.Fatal(err)
	}
	payload := make([]byte, size-hdrs)
	for i := range payload {
		payload[i] = byte(i * 7)
	}
	buf := gopacket.NewSerializeBuffer()
	opts := gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}
	if err := gopacket.SerializeLayers(buf, opts, eth, ip, udp, gopacket.Payload(payload)); err != nil {
		b.Fatal(err)
	}
	if f := buf.Bytes(); len(f) != size {
		b.Fatalf("frame of %d bytes, want %d", len(f), size)
	}
	return buf.Bytes()
}
