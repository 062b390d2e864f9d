package main

import (
	"bufio"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"
)

// The out-of-band channel between client and server: one TCP connection
// of text lines, as ibv_rc_pingpong exchanges its QP numbers, PSNs and
// GIDs. The client asks, the server answers each line with one line:
//
//	QP qpn psn gid         a fresh server QP connected to the client's;
//	                       answer QP qpn psn gid rkey addr length (its MR)
//	SEND length seed       the server SENDs length bytes of pattern(seed)
//	                       from its MR; answer SENT status
//	RECV length seed       the server's first receive completed with
//	                       length bytes of pattern(seed); answer OK
//	CHECK offset length seed  the server's MR holds pattern(seed) there
//	                       (an RDMA WRITE landed); answer OK, and the
//	                       bytes become canary again
//	CANARY                 every byte of the server's buffer, in and
//	                       around its MR, is canary; answer OK
//	UDQP                   a fresh server UD QP beside the RC QP (until
//	                       the next QP request), receives posted; answer
//	                       UDQP qpn qkey mac (of the GID's network device)
//	UDRECV length seed srcqp  the UD QP's next receive entry took a SEND
//	                       of length bytes of pattern(seed) from the
//	                       client's QP srcqp, after the GRH area; answer OK
//	UDNONE                 neither the UD QP nor the RC QP received
//	                       anything more; answer OK
//	BYE                    the session ends
//
// A request the server can not satisfy is answered ERR and a reason.

// The memory layout both sides use: a buffer of bufSize bytes, whose
// [mrOff, mrOff+mrLen) is the memory region; neither end of the region is
// page aligned, so the bytes around it share its pages and a write a
// device lets past the region's end lands there.
const (
	bufSize = 5 * 4096
	mrOff   = 512
	mrLen   = 16384

	// Areas of the region (offsets in the region).
	recvArea  = 0     // the server's receive buffers, 4 of recvSize
	recvSize  = 1024  //
	writeArea = 4096  // target of RDMA WRITEs and READs
	srcArea   = 8192  // what a side SENDs or WRITEs from
	scratch   = 12288 // the client's receive buffers; the server's last 4 KiB
)

// canary is the byte at offset off of an untouched buffer.
func canary(off int) byte { return byte(off*7 + off>>8 + 0x5c) }

// pattern is byte i of a transfer's data.
func pattern(seed, i int) byte { return byte(seed*29 + i*13 + 1) }

func fillCanary(b []byte, base int) {
	for i := range b {
		b[i] = canary(base + i)
	}
}

func fillPattern(b []byte, seed int) {
	for i := range b {
		b[i] = pattern(seed, i)
	}
}

// firstNot returns the first offset in b that is not want(base+i), or -1.
func firstNot(b []byte, base int, want func(int) byte) int {
	for i, c := range b {
		if c != want(base+i) {
			return i
		}
	}
	return -1
}

type oob struct {
	c net.Conn
	r *bufio.Reader
}

func newOOB(c net.Conn) *oob { return &oob{c: c, r: bufio.NewReader(c)} }

// dialOOB connects to the server, again while it is not listening yet.
func dialOOB(addr string, wait time.Duration) (*oob, error) {
	deadline := time.Now().Add(wait)
	for {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err == nil {
			return newOOB(c), nil
		}
		if time.Now().After(deadline) {
			return nil, err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (o *oob) send(format string, args ...any) error {
	_, err := fmt.Fprintf(o.c, format+"\n", args...)
	return err
}

func (o *oob) recv() ([]string, error) {
	l, err := o.r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	f := strings.Fields(l)
	if len(f) == 0 {
		return nil, errors.New("oob: empty line")
	}
	return f, nil
}

// call sends a request and returns the answer's fields; ERR is an error.
func (o *oob) call(format string, args ...any) ([]string, error) {
	if err := o.send(format, args...); err != nil {
		return nil, err
	}
	f, err := o.recv()
	if err != nil {
		return nil, err
	}
	if f[0] == "ERR" {
		return nil, errors.New(strings.Join(f[1:], " "))
	}
	return f, nil
}

func gidString(g [16]byte) string { return hex.EncodeToString(g[:]) }

func parseGID(s string) ([16]byte, error) {
	var g [16]byte
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != 16 {
		return g, fmt.Errorf("bad GID %q", s)
	}
	copy(g[:], b)
	return g, nil
}

// parseUints parses decimal or 0x-prefixed numbers.
func parseUints(f []string) ([]uint64, error) {
	out := make([]uint64, len(f))
	for i, s := range f {
		v, err := strconv.ParseUint(s, 0, 64)
		if err != nil {
			return nil, fmt.Errorf("bad number %q", s)
		}
		out[i] = v
	}
	return out, nil
}

// parseEndpoint reads "qpn psn gid".
func parseEndpoint(f []string) (endpoint, error) {
	if len(f) < 3 {
		return endpoint{}, fmt.Errorf("endpoint %q", f)
	}
	n, err := parseUints(f[:2])
	if err != nil {
		return endpoint{}, err
	}
	g, err := parseGID(f[2])
	return endpoint{qpn: uint32(n[0]), psn: uint32(n[1]), gid: g}, err
}
