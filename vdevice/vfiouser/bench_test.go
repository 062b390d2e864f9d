// Benchmarks of the vfio-user message path against a raw UNIX-socket echo
// on the same machine.
//
// Run:
//
//	go test -run='^$' -bench='RegionWritePosted|RegionReadRoundTrip|UnixEchoFloor' -benchtime=2s ./vdevice/
//
// The ratio is ns/op of BenchmarkRegionReadRoundTrip (or
// BenchmarkRegionWritePosted) divided by ns/op of BenchmarkUnixEchoFloor;
// with several -count runs, benchstat shows the same ns/op side by side.
// allocs/op is process-wide, so it includes the server goroutine: the goal
// is 0 on the posted-write path.
package vfiouser_test

import (
	"context"
	"encoding/binary"
	"net"
	"os"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/npfnic/npfnic"
	"github.com/npfnic/npfnic/vdevice/hw"
	"github.com/npfnic/npfnic/vdevice/vfiouser"
)

// benchPair returns a raw blocking client fd connected to a server-side
// *net.UnixConn, the same pairing for the floor and the server benchmarks.
func benchPair(b *testing.B) (int, *net.UnixConn) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		b.Fatal(err)
	}
	f := os.NewFile(uintptr(fds[0]), "srv")
	c, err := net.FileConn(f)
	f.Close()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { unix.Close(fds[1]) })
	return fds[1], c.(*net.UnixConn)
}

func writeAll(b *testing.B, fd int, p []byte) {
	for len(p) > 0 {
		n, err := unix.Write(fd, p)
		if err != nil {
			b.Fatal(err)
		}
		p = p[n:]
	}
}

func readFull(b *testing.B, fd int, p []byte) {
	for len(p) > 0 {
		n, err := unix.Read(fd, p)
		if err != nil || n == 0 {
			b.Fatalf("read: %v", err)
		}
		p = p[n:]
	}
}

func benchServer(b *testing.B) int {
	n, err := npfnic.New(npfnic.Options{})
	if err != nil {
		b.Fatal(err)
	}
	srv, err := vfiouser.NewServer(n, vfiouser.Options{})
	if err != nil {
		b.Fatal(err)
	}
	fd, sc := benchPair(b)
	done := make(chan struct{})
	go func() {
		srv.ServeConn(context.Background(), sc)
		close(done)
	}()
	b.Cleanup(func() { sc.Close(); <-done })

	// Negotiate.
	p := vfiouser.Version{JSON: []byte(`{"capabilities":{"max_data_xfer_size":1048576}}`)}.Append(nil)
	msg := make([]byte, vfiouser.HeaderSize)
	msg = append(msg, p...)
	vfiouser.Header{ID: 1, Command: vfiouser.CmdVersion, Size: uint32(len(msg))}.Put(msg)
	writeAll(b, fd, msg)
	hdr := make([]byte, vfiouser.HeaderSize)
	readFull(b, fd, hdr)
	h, _ := vfiouser.DecodeHeader(hdr)
	rest := make([]byte, h.Size-vfiouser.HeaderSize)
	readFull(b, fd, rest)
	if h.Flags&vfiouser.FlagError != 0 {
		b.Fatal("VERSION failed")
	}
	return fd
}

func regionMsg(cmd vfiouser.Command, flags uint32, off uint64, data []byte, count uint32) []byte {
	msg := make([]byte, vfiouser.HeaderSize)
	msg = vfiouser.RegionAccess{Offset: off, Region: hw.RegBAR, Count: count}.AppendHeader(msg)
	msg = append(msg, data...)
	vfiouser.Header{ID: 2, Command: cmd, Size: uint32(len(msg)), Flags: flags}.Put(msg)
	return msg
}

// BenchmarkRegionWritePosted streams posted 4-byte BAR writes, as QEMU
// sends guest doorbells, and measures the per-message cost including the
// server's processing (a final non-posted read drains the pipeline).
func BenchmarkRegionWritePosted(b *testing.B) {
	fd := benchServer(b)
	msg := regionMsg(vfiouser.CmdRegionWrite, vfiouser.FlagNoReply, hw.RegScratch, []byte{1, 2, 3, 4}, 4)
	sync := regionMsg(vfiouser.CmdRegionRead, 0, hw.RegScratch, nil, 4)
	reply := make([]byte, vfiouser.HeaderSize+vfiouser.RegionAccessSize+4)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		writeAll(b, fd, msg)
	}
	writeAll(b, fd, sync)
	readFull(b, fd, reply)
	b.StopTimer()
	if binary.LittleEndian.Uint32(reply[32:]) != 0x04030201 {
		b.Fatal("posted writes not applied")
	}
}

// BenchmarkRegionReadRoundTrip is a synchronous BAR read: request, server
// dispatch, device handler, reply.
func BenchmarkRegionReadRoundTrip(b *testing.B) {
	fd := benchServer(b)
	msg := regionMsg(vfiouser.CmdRegionRead, 0, hw.RegID, nil, 4)
	reply := make([]byte, vfiouser.HeaderSize+vfiouser.RegionAccessSize+4)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		writeAll(b, fd, msg)
		readFull(b, fd, reply)
	}
	b.StopTimer()
	if binary.LittleEndian.Uint32(reply[32:]) != hw.Magic {
		b.Fatal("bad reply")
	}
}

// BenchmarkUnixEchoFloor is the floor: the same message sizes echoed by a Go
// goroutine on a *net.UnixConn, with no protocol work at all.
func BenchmarkUnixEchoFloor(b *testing.B) {
	fd, sc := benchPair(b)
	done := make(chan struct{})
	go func() {
		defer close(done)
		in := make([]byte, vfiouser.HeaderSize+vfiouser.RegionAccessSize)
		out := make([]byte, vfiouser.HeaderSize+vfiouser.RegionAccessSize+4)
		for {
			got := 0
			for got < len(in) {
				n, err := sc.Read(in[got:])
				if err != nil {
					return
				}
				got += n
			}
			if _, err := sc.Write(out); err != nil {
				return
			}
		}
	}()
	b.Cleanup(func() { sc.Close(); <-done })
	msg := regionMsg(vfiouser.CmdRegionRead, 0, hw.RegID, nil, 4)
	reply := make([]byte, vfiouser.HeaderSize+vfiouser.RegionAccessSize+4)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		writeAll(b, fd, msg)
		readFull(b, fd, reply)
	}
}
