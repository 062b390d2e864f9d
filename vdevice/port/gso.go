package port

// GSOType is the kind of segmentation a GSO send asks the port to do.
type GSOType uint8

// GSO types (the virtio_net_hdr gso_type values the TAP understands).
const (
	GSONone  GSOType = 0 // no segmentation; NeedsCsum may still be set
	GSOTCPv4 GSOType = 1 // VIRTIO_NET_HDR_GSO_TCPV4
	GSOTCPv6 GSOType = 4 // VIRTIO_NET_HDR_GSO_TCPV6

	// GSOECN is or-ed into a TCP type when the super-packet has CWR set
	// (VIRTIO_NET_HDR_GSO_ECN): the first segment keeps CWR.
	GSOECN GSOType = 0x80
)

// GSOInfo describes a frame handed to a port whole for the host to
// segment and checksum (the virtio_net_hdr fields).
type GSOInfo struct {
	Type       GSOType
	HdrLen     int  // Ethernet + IP + TCP header bytes, copied into every segment
	GSOSize    int  // payload bytes per segment (the TCP mss)
	CsumStart  int  // offset of the transport header
	CsumOffset int  // offset of the checksum field from CsumStart
	NeedsCsum  bool // the checksum field holds the pseudo-header sum; fold in the rest
}

// GSOSender is a Sender that can also take a TCP super-packet (or a frame
// whose checksum is still partial) whole and have the host kernel segment
// and checksum it, as QEMU does with a TAP opened with IFF_VNET_HDR.
//
// CanGSO reports whether SendGSO works right now (a wrapper such as Pcap
// or a Mux Endpoint implements the method set whatever it wraps and
// answers for its inner port). SendGSO is safe for concurrent use, like
// Send, and does not keep frame.
type GSOSender interface {
	Sender
	CanGSO() bool
	SendGSO(frame []byte, gso GSOInfo) error
}

// GSOPort is a Port that takes GSO sends (the TAP, Pcap).
type GSOPort interface {
	Port
	GSOSender
}

// AsGSO returns s as a GSOSender if it can take GSO sends now.
func AsGSO(s Sender) (GSOSender, bool) {
	g, ok := s.(GSOSender)
	if !ok || !g.CanGSO() {
		return nil, false
	}
	return g, true
}

// RecvGSOPort is a Port that can also deliver what a host kernel hands a
// NIC with receive offloads (QEMU's virtio-net negotiates the same with
// TUNSETOFFLOAD): TCP super-packets up to 64 KiB with their segmentation
// still to do, and frames whose transport checksum is only the
// pseudo-header sum (GSOInfo.NeedsCsum). A host that may send super-packets
// needs a queue slot per super-packet instead of per segment, so a reader
// that holds back (an engine waiting for RX buffers) leaves the host's
// TCP a window's worth of queue instead of dropping at the TAP.
//
// EnableRecvGSO switches the offloads on; until then RecvGSO behaves as
// Recv. Call it before the first RecvGSO. RecvGSO is Recv that also
// returns the frame's GSOInfo (the zero GSOInfo for a finished frame).
type RecvGSOPort interface {
	Port
	EnableRecvGSO() error
	RecvGSO(buf []byte) (int, GSOInfo, error)
}

// GSOReceiver is a Receiver that can finish what a RecvGSOPort delivers:
// segment a super-packet as gso describes, or complete a partial checksum,
// before the frames go on as if received one by one. The GSOInfo comes
// from the host kernel, so it checks it against the frame.
type GSOReceiver interface {
	Receiver
	ReceiveGSO(frame []byte, gso GSOInfo)
}

// Finished reports whether a received frame needs nothing more: no
// segmentation and no checksum to complete.
func (g GSOInfo) Finished() bool { return g.Type == GSONone && !g.NeedsCsum }
