package main

import (
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"net/netip"

	"github.com/npfnic/npfnic/vdevice/hw"
)

// The UD cases: SENDs from UD QPs of the client's to the server's UD QP
// (or to QPs that are none), their destination in the entry as librxe
// copies an address handle's vector there (ah_num 0). An entry the
// device can not send fails its QP, which flushes the good SEND behind
// it; then a fresh QP's SEND must be the first the server receives, and
// the only one. A SEND the server's side must drop completes SUCCESS at
// the sender all the same; the good SEND behind it takes the server's
// receive entry the dropped one would have.

// udPeer is the server's UD QP, as its UDQP answer gives it, and the
// server's GID (its RC QP's).
type udPeer struct {
	qpn, qkey uint32
	mac       [6]byte
	gid       [16]byte
}

// udMsg is the length of a well-formed UD SEND, and udOdd that of the
// hostile one before it: the server tells them apart by byte_len.
const (
	udMsg = 256
	udOdd = 128
)

// rxeNetworkTypeIPv6 is RXE_NETWORK_TYPE_IPV6, an address vector whose
// GIDs are IPv6 addresses.
const rxeNetworkTypeIPv6 = 2

// udSetup asks the server for its UD QP and creates the client's, with
// a random Q_Key of its own.
func (e *caseEnv) udSetup() (*qp, error) {
	f, err := e.o.call("UDQP")
	if err != nil {
		return nil, fmt.Errorf("server UD QP: %w", err)
	}
	if len(f) != 4 {
		return nil, fmt.Errorf("server UD QP answer %q", f)
	}
	n, err := parseUints(f[1:3])
	mac, merr := hex.DecodeString(f[3])
	if err != nil || merr != nil || len(mac) != 6 {
		return nil, fmt.Errorf("server UD QP answer %q", f)
	}
	e.udp = &udPeer{qpn: uint32(n[0]), qkey: uint32(n[1]), mac: [6]byte(mac), gid: e.rgid}
	return e.newUD(rand.Uint32()&0x7fff_ffff | 1)
}

// newUD creates a UD QP of the case's, ready to send, whose own Q_Key
// (what it receives with, and sends with when an entry's Q_Key has the
// controlled bit) is qkey.
func (e *caseEnv) newUD(qkey uint32) (*qp, error) {
	q, err := e.v.createQPKind(e.user(4+len(e.more)), e.pd, e.scq, e.rcq,
		qpCaps{maxSendWR: 8, maxRecvWR: 4, maxSendSGE: 2, maxRecvSGE: 1}, qpKind{typ: qptUD})
	if err != nil {
		return nil, err
	}
	e.more = append(e.more, q)
	return q, e.v.readyUD(q, qkey, rand.Uint32()&0xffffff)
}

// udTo is a well-formed, signaled UD SEND of length bytes of the source
// area to the server's UD QP.
func (e *caseEnv) udTo(length int) sendWQE {
	p := e.udp
	return sendWQE{opcode: hw.IBVWRSend, flags: hw.IBVSendSignaled, sgl: []sge{e.lsge(srcArea, length)},
		ud: &udDest{qpn: p.qpn, qkey: p.qkey, sgid: e.gid, av: hw.RxeAV{NetworkType: hw.RxeNetworkTypeIPv4, DMAC: p.mac,
			DGID: p.gid, SGIDIndex: e.sgid, HopLimit: 64}}}.sum()
}

// udPeerGot asks the server whether its next receive entry took a
// well-formed SEND of the client's QP srcQP (what it says) and nothing
// else arrived.
func (e *caseEnv) udPeerGot(what string, srcQP uint32) string {
	if _, err := e.o.call("UDRECV %d %d %d", udMsg, srcSeed, srcQP); err != nil {
		return "peer: " + err.Error()
	}
	if _, err := e.o.call("UDNONE"); err != nil {
		return "peer got " + what + ", then: " + err.Error()
	}
	return "peer got " + what + ", nothing else"
}

// udProbe SENDs from a fresh UD QP after a case's QP failed: the server
// must receive that SEND first, and only it.
func (e *caseEnv) udProbe() string {
	q, err := e.newUD(rand.Uint32()&0x7fff_ffff | 1)
	if err != nil {
		return "next QP: " + err.Error()
	}
	w := e.udTo(udMsg)
	w.id = 3
	if err := e.postOn(q, w); err != nil {
		return "next QP: " + err.Error()
	}
	return "next QP's SEND " + e.completions(e.scq.q, 1, 3) + ", " + e.udPeerGot("it", q.qpn)
}

const udProbeWant = "next QP's SEND SUCCESS, peer got it, nothing else"

// udLocalCase posts a hostile UD SEND and a good one behind it: the
// first completes with want, the second is flushed, and the server
// receives neither (udProbe).
func udLocalCase(name string, want uint32, rxe string, bad func(e *caseEnv, w sendWQE) sendWQE) hostileCase {
	return hostileCase{name: name, want: statusName(want) + " WR_FLUSH_ERR; " + udProbeWant, rxe: rxe, run: func(e *caseEnv) (string, error) {
		q, err := e.udSetup()
		if err != nil {
			return "", err
		}
		w, n := bad(e, e.udTo(udOdd)), e.udTo(udMsg)
		w.id, n.id = 1, 2
		if err := e.postOn(q, w, n); err != nil {
			return "", err
		}
		return e.completions(e.scq.q, 2, 1, 2) + "; " + e.udProbe(), nil
	}}
}

// udDropCase posts a UD SEND the server's side must drop and a good one
// behind it, from a QP whose Q_Key is qkey (0: a random one): both
// complete SUCCESS, and the good one takes the server's first receive.
func udDropCase(name string, qkey uint32, rxe string, bad func(e *caseEnv, w sendWQE) sendWQE) hostileCase {
	return hostileCase{name: name, want: "SUCCESS×2; peer got the second, nothing else", rxe: rxe, run: func(e *caseEnv) (string, error) {
		q, err := e.udSetup()
		if err != nil {
			return "", err
		}
		if qkey != 0 {
			if q, err = e.newUD(qkey); err != nil {
				return "", err
			}
		}
		w, n := bad(e, e.udTo(udOdd)), e.udTo(udMsg)
		w.id, n.id = 1, 2
		if err := e.postOn(q, w, n); err != nil {
			return "", err
		}
		return e.completions(e.scq.q, 2, 1, 2) + "; " + e.udPeerGot("the second", q.qpn), nil
	}}
}

// notV4Mapped is a GID that is no IPv4 address (2001:db8::1).
var notV4Mapped = netip.MustParseAddr("2001:db8::1").As16()

// udCases are the UD cases, in the order they run.
var udCases = []hostileCase{
	{name: "ud-good", want: "SUCCESS; peer got it, nothing else", run: func(e *caseEnv) (string, error) {
		q, err := e.udSetup()
		if err != nil {
			return "", err
		}
		w := e.udTo(udMsg)
		w.id = 1
		if err := e.postOn(q, w); err != nil {
			return "", err
		}
		return e.completions(e.scq.q, 1, 1) + "; " + e.udPeerGot("it", q.qpn), nil
	}},
	// Address vectors the device can not send to.
	udLocalCase("ud-bad-sgid-index", hw.IBVWCLocQPOpErr, "", func(e *caseEnv, w sendWQE) sendWQE {
		w.ud.av.SGIDIndex = e.noGID
		return w
	}),
	udLocalCase("ud-ah-num", hw.IBVWCLocQPOpErr, "", func(e *caseEnv, w sendWQE) sendWQE {
		w.ud.ahNum = 0x5a5a5a
		return w
	}),
	udLocalCase("ud-ipv6-network-type", hw.IBVWCLocQPOpErr, "", func(e *caseEnv, w sendWQE) sendWQE {
		w.ud.av.NetworkType = rxeNetworkTypeIPv6
		return w
	}),
	udLocalCase("ud-dgid-not-v4mapped", hw.IBVWCLocQPOpErr, "SUCCESS×2; the first never reaches the server (it routes by the vector's IPv4 socket address, not the DGID)", func(e *caseEnv, w sendWQE) sendWQE {
		w.ud.av.DGID = notV4Mapped
		return w
	}),
	udLocalCase("ud-qpn-over-24-bits", hw.IBVWCLocQPOpErr, "SUCCESS×2; sends the first to the QPN's low 24 bits, the server's QP", func(e *caseEnv, w sendWQE) sendWQE {
		w.ud.qpn |= 1 << 24 // the server's QPN, were it masked
		return w
	}),
	// Work a UD QP does not do.
	udLocalCase("ud-write-opcode", hw.IBVWCLocQPOpErr, "", func(e *caseEnv, w sendWQE) sendWQE {
		w.opcode = hw.IBVWRRDMAWrite
		return w
	}),
	// A message over the port's MTU: no packet and no error (IBA
	// C10-93.1.1, as rdma_rxe does it).
	udDropCase("ud-over-mtu", 0, "", func(e *caseEnv, w sendWQE) sendWQE {
		return sendWQE{opcode: w.opcode, flags: w.flags, ud: w.ud, sgl: []sge{e.lsge(srcArea, e.mtu+1)}}.sum()
	}),
	// SENDs the server's side drops.
	udDropCase("ud-wrong-qkey", 0, "", func(e *caseEnv, w sendWQE) sendWQE {
		w.ud.qkey ^= 0x5a5a
		return w
	}),
	// The GSI QP, with its Q_Key: the client's QP has it as its own and
	// the entry asks for the QP's own (the controlled bit), so the SEND
	// passes a GSI QP's Q_Key check and, where the peer's kernel has one
	// (rdma_rxe's does), reaches its MAD layer, which must drop garbage.
	udDropCase("ud-to-qp1", gsiQKey, "", func(e *caseEnv, w sendWQE) sendWQE {
		w.ud.qpn, w.ud.qkey = 1, controlledQKey
		return w
	}),
	udDropCase("ud-to-qp0", 0, "", func(e *caseEnv, w sendWQE) sendWQE {
		w.ud.qpn = 0
		return w
	}),
	udDropCase("ud-to-rc-qpn", 0, "", func(e *caseEnv, w sendWQE) sendWQE {
		w.ud.qpn = e.rqpn
		return w
	}),
}
