// Package rocev2 owns the RoCEv2 wire format of the InfiniBand transport:
// the Base Transport Header and the extended transport headers (DETH, RETH,
// AETH, ImmDt, IETH, AtomicETH, AtomicAckETH) as gopacket layers registered on UDP
// port 4791, the invariant CRC (ICRC), a builder for whole
// Ethernet/IPv4/UDP/BTH/.../payload/ICRC frames, a strict frame decoder, the
// IB RNR timer table, and pcap capture through pcapgo.
//
// Layout of a RoCEv2 frame as built and accepted here:
//
//	Ethernet (optionally 802.1Q) | IPv4 (DF, no options) | UDP dst 4791 |
//	BTH (12) | DETH (8) / RETH (16) / AETH (4) / ImmDt (4) / ... | payload | pad (0-3) | ICRC (4)
//
// The opcodes are those of the RC, UC and UD transports (IBA 9.2, Table
// 38): an opcode's top three bits name its transport, the low five its
// operation, the same operation having the same low bits in each.
//
// The ICRC is the CRC-32 of IEEE 802.3 computed over 8 bytes of 0xff (the
// LRH that RoCEv2 does not carry), the IPv4 header with TOS, TTL and header
// checksum set to all ones, the UDP header with its checksum set to all
// ones, the BTH with its byte 4 (FECN/BECN/reserved) set to all ones, and the
// rest of the packet up to the ICRC. It is sent least significant byte
// first, like the Ethernet FCS; the ICRC fields in this package hold the four
// trailer bytes read in network order, which is what Wireshark shows as
// infiniband.invariant.crc.
package rocev2

import (
	"fmt"
	"strings"

	"github.com/npfnic/npfnic/vdevice/pkthdr"
)

// UDPPort is the IANA port of RoCEv2, the one the NIC's port classifies by.
const UDPPort = pkthdr.UDPPortRoCEv2

// Opcode is the BTH OpCode: the transport (bits 7-5) and the operation.
type Opcode uint8

// RC opcodes (transport 000) and the congestion notification packet.
const (
	OpSendFirst      Opcode = 0x00
	OpSendMiddle     Opcode = 0x01
	OpSendLast       Opcode = 0x02
	OpSendLastImm    Opcode = 0x03
	OpSendOnly       Opcode = 0x04
	OpSendOnlyImm    Opcode = 0x05
	OpWriteFirst     Opcode = 0x06
	OpWriteMiddle    Opcode = 0x07
	OpWriteLast      Opcode = 0x08
	OpWriteLastImm   Opcode = 0x09
	OpWriteOnly      Opcode = 0x0a
	OpWriteOnlyImm   Opcode = 0x0b
	OpReadRequest    Opcode = 0x0c
	OpReadRespFirst  Opcode = 0x0d
	OpReadRespMiddle Opcode = 0x0e
	OpReadRespLast   Opcode = 0x0f
	OpReadRespOnly   Opcode = 0x10
	OpAck            Opcode = 0x11
	OpAtomicAck      Opcode = 0x12
	OpCompareSwap    Opcode = 0x13
	OpFetchAdd       Opcode = 0x14
	OpSendLastInv    Opcode = 0x16
	OpSendOnlyInv    Opcode = 0x17
	// OpAtomicWrite (IBA 1.5): 8 bytes written at once at an aligned
	// address, answered with a zero-length READ response.
	OpAtomicWrite      Opcode = 0x1d
	OpCNP              Opcode = 0x81
	opTransportMask    Opcode = 0xe0
	opTransportRC      Opcode = 0x00
	opTransportCNPBase Opcode = 0x80
)

// UD opcodes (transport 011): single-packet SENDs with a DETH.
const (
	OpUDSendOnly    Opcode = 0x64
	OpUDSendOnlyImm Opcode = 0x65
)

// Service is an InfiniBand transport service, the top three bits of an
// opcode (IBA 9.2).
type Service uint8

// Transport services.
const (
	ServiceRC Service = 0
	ServiceUC Service = 1
	ServiceUD Service = 3
)

var serviceNames = map[Service]string{ServiceRC: "RC", ServiceUC: "UC", ServiceUD: "UD"}

func (s Service) String() string {
	if n, ok := serviceNames[s]; ok {
		return n
	}
	return fmt.Sprintf("Service(%d)", uint8(s))
}

// Service returns the opcode's transport service.
func (o Opcode) Service() Service { return Service(o >> 5) }

// On returns the opcode of the same operation on service s: an RC
// SendOpcode or WriteOpcode as UC sends it, OpSendOnly(Imm) as UD does.
// Whether s has the operation is the caller's to know (Known tells).
func (o Opcode) On(s Service) Opcode { return o&^opTransportMask | Opcode(s)<<5 }

// OpFlags describe what an opcode carries and means.
type OpFlags uint32

// Opcode properties.
const (
	HasRETH OpFlags = 1 << iota
	HasAtomicETH
	HasAETH
	HasAtomicAckETH
	HasImmDt
	HasIETH
	HasPayload // the packet may carry payload
	First      // first packet of a message
	Middle
	Last
	Request  // requester to responder
	Response // responder to requester
	Send
	Write
	Read
	Atomic
	Ack
	CNP
	HasDETH
	AtomicWrite
)

// Only marks the single packet of a one-packet message.
const Only = First | Last

type opInfo struct {
	name  string
	flags OpFlags
}

var opTable = [256]opInfo{
	OpSendFirst:      {"RC SEND First", Request | Send | First | HasPayload},
	OpSendMiddle:     {"RC SEND Middle", Request | Send | Middle | HasPayload},
	OpSendLast:       {"RC SEND Last", Request | Send | Last | HasPayload},
	OpSendLastImm:    {"RC SEND Last with Immediate", Request | Send | Last | HasPayload | HasImmDt},
	OpSendOnly:       {"RC SEND Only", Request | Send | Only | HasPayload},
	OpSendOnlyImm:    {"RC SEND Only with Immediate", Request | Send | Only | HasPayload | HasImmDt},
	OpWriteFirst:     {"RC RDMA WRITE First", Request | Write | First | HasPayload | HasRETH},
	OpWriteMiddle:    {"RC RDMA WRITE Middle", Request | Write | Middle | HasPayload},
	OpWriteLast:      {"RC RDMA WRITE Last", Request | Write | Last | HasPayload},
	OpWriteLastImm:   {"RC RDMA WRITE Last with Immediate", Request | Write | Last | HasPayload | HasImmDt},
	OpWriteOnly:      {"RC RDMA WRITE Only", Request | Write | Only | HasPayload | HasRETH},
	OpWriteOnlyImm:   {"RC RDMA WRITE Only with Immediate", Request | Write | Only | HasPayload | HasRETH | HasImmDt},
	OpReadRequest:    {"RC RDMA READ Request", Request | Read | Only | HasRETH},
	OpReadRespFirst:  {"RC RDMA READ Response First", Response | Read | First | HasPayload | HasAETH},
	OpReadRespMiddle: {"RC RDMA READ Response Middle", Response | Read | Middle | HasPayload},
	OpReadRespLast:   {"RC RDMA READ Response Last", Response | Read | Last | HasPayload | HasAETH},
	OpReadRespOnly:   {"RC RDMA READ Response Only", Response | Read | Only | HasPayload | HasAETH},
	OpAck:            {"RC Acknowledge", Response | Ack | HasAETH},
	OpAtomicAck:      {"RC ATOMIC Acknowledge", Response | Atomic | HasAETH | HasAtomicAckETH},
	OpCompareSwap:    {"RC CmpSwap", Request | Atomic | Only | HasAtomicETH},
	OpFetchAdd:       {"RC FetchAdd", Request | Atomic | Only | HasAtomicETH},
	OpSendLastInv:    {"RC SEND Last with Invalidate", Request | Send | Last | HasPayload | HasIETH},
	OpSendOnlyInv:    {"RC SEND Only with Invalidate", Request | Send | Only | HasPayload | HasIETH},
	OpAtomicWrite:    {"RC ATOMIC WRITE", Request | AtomicWrite | Only | HasPayload | HasRETH},
	OpCNP:            {"CNP", CNP | HasPayload},
	OpUDSendOnly:     {"UD SEND Only", Request | Send | Only | HasPayload | HasDETH},
	OpUDSendOnlyImm:  {"UD SEND Only with Immediate", Request | Send | Only | HasPayload | HasDETH | HasImmDt},
}

// The UC opcodes are RC's SENDs and RDMA WRITEs (0x00-0x0b) on transport
// 001, with the same headers: UC has no READ, atomic or acknowledge.
func init() {
	for o := OpSendFirst; o <= OpWriteOnlyImm; o++ {
		rc := opTable[o]
		opTable[o.On(ServiceUC)] = opInfo{"UC" + strings.TrimPrefix(rc.name, "RC"), rc.flags}
	}
}

// Known reports whether the opcode is one this package can decode.
func (o Opcode) Known() bool { return opTable[o].name != "" }

// IsRC reports whether the opcode belongs to the RC transport.
func (o Opcode) IsRC() bool { return o.Known() && o&opTransportMask == opTransportRC }

// Flags returns the properties of the opcode (zero when unknown).
func (o Opcode) Flags() OpFlags { return opTable[o].flags }

// Has reports whether all of f are set for the opcode.
func (o Opcode) Has(f OpFlags) bool { return opTable[o].flags&f == f }

// HeaderLen is the length of the extended transport headers that follow the
// BTH for this opcode.
func (o Opcode) HeaderLen() int {
	f := o.Flags()
	n := 0
	if f&HasDETH != 0 {
		n += DETHLen
	}
	if f&HasRETH != 0 {
		n += RETHLen
	}
	if f&HasAtomicETH != 0 {
		n += AtomicETHLen
	}
	if f&HasAETH != 0 {
		n += AETHLen
	}
	if f&HasAtomicAckETH != 0 {
		n += AtomicAckETHLen
	}
	if f&HasImmDt != 0 {
		n += ImmDtLen
	}
	if f&HasIETH != 0 {
		n += IETHLen
	}
	return n
}

func (o Opcode) String() string {
	if n := opTable[o].name; n != "" {
		return n
	}
	return fmt.Sprintf("opcode(%#02x)", uint8(o))
}

// Send, Write and ReadResp opcodes by position in the message.

// SendOpcode returns the SEND opcode for a packet at the given position.
func SendOpcode(first, last, imm bool) Opcode {
	switch {
	case first && last && imm:
		return OpSendOnlyImm
	case first && last:
		return OpSendOnly
	case first:
		return OpSendFirst
	case last && imm:
		return OpSendLastImm
	case last:
		return OpSendLast
	}
	return OpSendMiddle
}

// WriteOpcode returns the RDMA WRITE opcode for a packet at the given position.
func WriteOpcode(first, last, imm bool) Opcode {
	switch {
	case first && last && imm:
		return OpWriteOnlyImm
	case first && last:
		return OpWriteOnly
	case first:
		return OpWriteFirst
	case last && imm:
		return OpWriteLastImm
	case last:
		return OpWriteLast
	}
	return OpWriteMiddle
}

// ReadRespOpcode returns the RDMA READ response opcode for a packet at the
// given position.
func ReadRespOpcode(first, last bool) Opcode {
	switch {
	case first && last:
		return OpReadRespOnly
	case first:
		return OpReadRespFirst
	case last:
		return OpReadRespLast
	}
	return OpReadRespMiddle
}
