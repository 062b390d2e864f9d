package rocev2

import (
	"fmt"
	"time"
)

// Syndrome is the AETH syndrome byte: bit 7 reserved, bits 6-5 the type
// (ACK, RNR NAK, NAK), bits 4-0 the credit count, RNR timer or NAK code.
type Syndrome uint8

// Syndrome types (bits 6-5).
const (
	SynACK    Syndrome = 0x00
	SynRNRNAK Syndrome = 0x20
	SynNAK    Syndrome = 0x60
	synType   Syndrome = 0x60
	synValue  Syndrome = 0x1f
)

// NAK codes (syndrome bits 4-0 when the type is NAK).
const (
	NAKPSNSeqError    uint8 = 0
	NAKInvalidRequest uint8 = 1
	NAKRemoteAccess   uint8 = 2
	NAKRemoteOp       uint8 = 3
	NAKInvalidRDReq   uint8 = 4
)

// CreditsInvalid is the ACK credit count meaning "no end-to-end credit
// information" (the responder does not limit the requester).
const CreditsInvalid uint8 = 0x1f

// ACKSyndrome returns an ACK syndrome with the given credit count.
func ACKSyndrome(credits uint8) Syndrome { return SynACK | Syndrome(credits)&synValue }

// RNRNAKSyndrome returns an RNR NAK syndrome carrying a 5-bit timer code.
func RNRNAKSyndrome(timer uint8) Syndrome { return SynRNRNAK | Syndrome(timer)&synValue }

// NAKSyndrome returns a NAK syndrome with the given code.
func NAKSyndrome(code uint8) Syndrome { return SynNAK | Syndrome(code)&synValue }

// IsACK, IsRNRNAK and IsNAK classify the syndrome; Reserved reports a
// syndrome whose type is the reserved 10b or whose bit 7 is set.
func (s Syndrome) IsACK() bool    { return s&0x80 == 0 && s&synType == SynACK }
func (s Syndrome) IsRNRNAK() bool { return s&0x80 == 0 && s&synType == SynRNRNAK }
func (s Syndrome) IsNAK() bool    { return s&0x80 == 0 && s&synType == SynNAK }
func (s Syndrome) Reserved() bool { return s&0x80 != 0 || s&synType == 0x40 }

// Value returns bits 4-0: credits, RNR timer code or NAK code.
func (s Syndrome) Value() uint8 { return uint8(s & synValue) }

func (s Syndrome) String() string {
	switch {
	case s.Reserved():
		return fmt.Sprintf("reserved(%#02x)", uint8(s))
	case s.IsACK():
		return fmt.Sprintf("ACK(credits=%d)", s.Value())
	case s.IsRNRNAK():
		return fmt.Sprintf("RNR-NAK(timer=%d:%v)", s.Value(), RNRTimer(s.Value()))
	}
	names := [...]string{"PSN-sequence-error", "invalid-request", "remote-access-error", "remote-operational-error", "invalid-RD-request"}
	if int(s.Value()) < len(names) {
		return "NAK(" + names[s.Value()] + ")"
	}
	return fmt.Sprintf("NAK(code=%d)", s.Value())
}

// rnrTimerMicros is the IBA table of minimum RNR NAK timer values
// (IBA Vol 1, 9.7.5.2.8 and the AETH encoding), in microseconds, indexed by
// the 5-bit code. Code 0 is the longest, 655.36 ms.
var rnrTimerMicros = [32]int64{
	655360, 10, 20, 30, 40, 60, 80, 120,
	160, 240, 320, 480, 640, 960, 1280, 1920,
	2560, 3840, 5120, 7680, 10240, 15360, 20480, 30720,
	40960, 61440, 81920, 122880, 163840, 245760, 327680, 491520,
}

// RNRTimer returns the duration of a 5-bit RNR timer code (only the low 5
// bits are used).
func RNRTimer(code uint8) time.Duration {
	return time.Duration(rnrTimerMicros[code&0x1f]) * time.Microsecond
}

// RNRTimerCode returns the smallest code whose timer is at least d
// (0.01 ms at the least, code 0's 655.36 ms at the most).
func RNRTimerCode(d time.Duration) uint8 {
	best := uint8(0)
	for c := uint8(1); c < 32; c++ {
		if RNRTimer(c) >= d {
			return c
		}
	}
	return best
}

// LocalAckTimeout returns the local ACK timeout encoded by the 5-bit QP
// attribute: 4.096 µs × 2^t; t = 0 means infinite (returned as 0).
func LocalAckTimeout(t uint8) time.Duration {
	t &= 0x1f
	if t == 0 {
		return 0
	}
	return time.Duration(4096<<t) * time.Nanosecond
}
