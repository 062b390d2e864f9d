package vfiouser_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/npfnic/npfnic"
	"github.com/npfnic/npfnic/pcie"
	"github.com/npfnic/npfnic/vdevice/hw"
	"github.com/npfnic/npfnic/vdevice/vfiouser"
)

func TestVersionNegotiation(t *testing.T) {
	for _, tc := range []struct {
		name      string
		payload   []byte
		fds       bool
		wantErrno unix.Errno // 0: success
		closes    bool
		check     func(t *testing.T, caps map[string]any)
	}{
		{name: "qemu caps", payload: vfiouser.Version{JSON: qemuCapsJSON()}.Append(nil),
			check: func(t *testing.T, caps map[string]any) {
				for _, k := range []string{"max_msg_fds", "max_data_xfer_size", "pgsizes", "max_dma_maps", "write_multiple"} {
					if _, ok := caps[k]; !ok {
						t.Errorf("reply lacks %s", k)
					}
				}
				if _, ok := caps["migration"]; ok {
					t.Error("server granted migration it does not implement")
				}
				if caps["max_msg_fds"].(float64) > 16 || caps["pgsizes"].(float64) != 4096 {
					t.Errorf("caps %v", caps)
				}
				// Each fd-backed map is one mmap: never grant more than
				// vm.max_map_count leaves (65530 by default, below the
				// 65535 QEMU proposes).
				b, err := os.ReadFile("/proc/sys/vm/max_map_count")
				if err != nil {
					t.Fatal(err)
				}
				limit, _ := strconv.ParseFloat(strings.TrimSpace(string(b)), 64)
				if got := caps["max_dma_maps"].(float64); got < 1 || got >= limit {
					t.Errorf("max_dma_maps %v, vm.max_map_count %v", got, limit)
				}
			}},
		{name: "no json", payload: []byte{0, 0, 0, 0},
			check: func(t *testing.T, caps map[string]any) {
				if len(caps) != 0 {
					t.Errorf("caps not a subset of the (empty) offer: %v", caps)
				}
			}},
		{name: "higher minor", payload: []byte{0, 0, 7, 0}},
		{name: "major 1", payload: []byte{1, 0, 0, 0}, wantErrno: unix.ENOTSUP, closes: true},
		{name: "bad json", payload: append([]byte{0, 0, 0, 0}, "{caps"...), wantErrno: unix.EINVAL, closes: true},
		{name: "wrong json type", payload: append([]byte{0, 0, 0, 0}, `{"capabilities":{"max_msg_fds":"x"}}`...), wantErrno: unix.EINVAL, closes: true},
		{name: "no 4k pages", payload: append([]byte{0, 0, 0, 0}, `{"capabilities":{"pgsizes":8192}}`...), wantErrno: unix.ENOTSUP, closes: true},
		{name: "zero xfer", payload: append([]byte{0, 0, 0, 0}, `{"capabilities":{"max_data_xfer_size":0}}`...), wantErrno: unix.EINVAL, closes: true},
		{name: "short", payload: []byte{0, 0}, wantErrno: unix.EINVAL, closes: true},
		{name: "with fd", payload: []byte{0, 0, 0, 0}, fds: true, wantErrno: unix.EINVAL},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, vfiouser.Options{})
			var fds []int
			if tc.fds {
				fds = []int{eventfd(t)}
			}
			r := f.c.call(vfiouser.CmdVersion, 0, tc.payload, fds)
			if tc.wantErrno != 0 {
				if r.Flags&vfiouser.FlagError == 0 || unix.Errno(r.Error) != tc.wantErrno {
					t.Fatalf("flags %#x errno %v want %v", r.Flags, unix.Errno(r.Error), tc.wantErrno)
				}
			} else {
				v, err := vfiouser.DecodeVersion(r.payload)
				if err != nil || v.Major != 0 || v.Minor != 0 {
					t.Fatalf("version reply %+v %v", v, err)
				}
				if r.payload[len(r.payload)-1] != 0 {
					t.Fatal("version JSON not NUL-terminated")
				}
				var doc struct {
					Capabilities map[string]any `json:"capabilities"`
				}
				if err := json.Unmarshal(v.JSON, &doc); err != nil {
					t.Fatal(err)
				}
				if tc.check != nil {
					tc.check(t, doc.Capabilities)
				}
			}
			if tc.closes {
				if _, err := f.c.recv(); !errors.Is(err, io.EOF) {
					t.Fatalf("connection not closed: %v", err)
				}
			}
		})
	}
}

func TestVersionOrdering(t *testing.T) {
	f := newFixture(t, vfiouser.Options{})
	f.c.callErr(vfiouser.CmdDeviceGetInfo, make([]byte, 16), nil, unix.EINVAL)
	f.c.negotiate()
	f.c.callErr(vfiouser.CmdVersion, []byte{0, 0, 0, 0}, nil, unix.EINVAL)
}

func TestDeviceInfoAndRegions(t *testing.T) {
	f := newFixture(t, vfiouser.Options{})
	c := f.c
	c.negotiate()

	r := c.call(vfiouser.CmdDeviceGetInfo, 0, vfiouser.DeviceInfoMsg{Argsz: 16}.Append(nil), nil)
	info, err := vfiouser.DecodeDeviceInfo(r.payload)
	if err != nil || info.Flags != vfiouser.DeviceFlagPCI|vfiouser.DeviceFlagReset || info.NumRegions != 9 || info.NumIRQs != 5 {
		t.Fatalf("device info %+v %v", info, err)
	}
	c.callErr(vfiouser.CmdDeviceGetInfo, vfiouser.DeviceInfoMsg{Argsz: 8}.Append(nil), nil, unix.EINVAL)

	wantSize := map[uint32]uint64{0: hw.RegBARSize, 2: hw.MSIXBARSize, 7: pcie.Size}
	for idx := uint32(0); idx < 9; idx++ {
		r := c.call(vfiouser.CmdGetRegionInfo, 0, vfiouser.RegionInfoMsg{Argsz: 32, Index: idx}.Append(nil), nil)
		ri, err := vfiouser.DecodeRegionInfo(r.payload)
		if err != nil || ri.Index != idx || ri.Size != wantSize[idx] || ri.Argsz != 32 {
			t.Fatalf("region %d: %+v %v", idx, ri, err)
		}
		if ri.Size != 0 && ri.Flags != vfiouser.RegionFlagRead|vfiouser.RegionFlagWrite {
			t.Fatalf("region %d flags %#x", idx, ri.Flags)
		}
		if len(r.fds) != 0 {
			t.Fatalf("region %d passed fds", idx)
		}
	}
	c.callErr(vfiouser.CmdGetRegionInfo, vfiouser.RegionInfoMsg{Argsz: 32, Index: 9}.Append(nil), nil, unix.EINVAL)
	c.callErr(vfiouser.CmdGetRegionInfo, vfiouser.RegionInfoMsg{Argsz: 16, Index: 0}.Append(nil), nil, unix.EINVAL)

	wantIRQ := []vfiouser.IRQInfoMsg{
		{Index: 0, Count: 1, Flags: vfiouser.IRQInfoEventfd | vfiouser.IRQInfoMaskable | vfiouser.IRQInfoAutomasked},
		{Index: 1, Count: 0, Flags: vfiouser.IRQInfoEventfd},
		{Index: 2, Count: hw.MSIXVectors, Flags: vfiouser.IRQInfoEventfd},
		{Index: 3, Count: 1, Flags: vfiouser.IRQInfoEventfd},
		{Index: 4, Count: 1, Flags: vfiouser.IRQInfoEventfd},
	}
	for _, w := range wantIRQ {
		r := c.call(vfiouser.CmdGetIRQInfo, 0, vfiouser.IRQInfoMsg{Argsz: 16, Index: w.Index}.Append(nil), nil)
		got, err := vfiouser.DecodeIRQInfo(r.payload)
		w.Argsz = 16
		if err != nil || got != w {
			t.Fatalf("irq info %+v, want %+v (%v)", got, w, err)
		}
	}
	c.callErr(vfiouser.CmdGetIRQInfo, vfiouser.IRQInfoMsg{Argsz: 16, Index: 5}.Append(nil), nil, unix.EINVAL)

	// The whole config space in one read, as QEMU does at realize.
	r = c.call(vfiouser.CmdRegionRead, 0, regionAccess(vfiouser.RegionConfig, 0, pcie.Size, nil), nil)
	a, err := vfiouser.DecodeRegionAccess(r.payload, true)
	if err != nil || a.Count != pcie.Size || binary.LittleEndian.Uint16(a.Data) != hw.VendorID ||
		binary.LittleEndian.Uint16(a.Data[2:]) != hw.DeviceID {
		t.Fatalf("config read: %v count %d", err, a.Count)
	}
}

func TestRegionAccess(t *testing.T) {
	f := newFixture(t, vfiouser.Options{})
	c := f.c
	c.negotiate()
	if got := c.read32(hw.RegBAR, hw.RegID); got != hw.Magic {
		t.Fatalf("ID %#x", got)
	}
	if got := c.read32(hw.RegBAR, hw.RegVersion); got != hw.InterfaceVersion {
		t.Fatalf("VERSION %#x", got)
	}
	c.write32(hw.RegBAR, hw.RegScratch, 0xcafef00d) // posted: no reply
	if got := c.read32(hw.RegBAR, hw.RegScratch); got != 0xcafef00d {
		t.Fatalf("SCRATCH %#x", got)
	}
	// Non-posted write: the reply echoes offset/region/count.
	r := c.call(vfiouser.CmdRegionWrite, 0, regionAccess(hw.RegBAR, hw.RegScratch, 4, le32(1)), nil)
	a, err := vfiouser.DecodeRegionAccess(r.payload, false)
	if err != nil || len(r.payload) != 16 || a.Offset != hw.RegScratch || a.Count != 4 {
		t.Fatalf("write reply %+v %v", a, err)
	}
	// Narrow accesses merge into the register.
	c.call(vfiouser.CmdRegionWrite, 0, regionAccess(hw.RegBAR, hw.RegScratch+2, 2, []byte{0xaa, 0xbb}), nil)
	if got := c.read32(hw.RegBAR, hw.RegScratch); got != 0xbbaa0001 {
		t.Fatalf("SCRATCH after 16-bit write %#x", got)
	}
	r = c.call(vfiouser.CmdRegionRead, 0, regionAccess(hw.RegBAR, hw.RegScratch+1, 2, nil), nil)
	if a, _ := vfiouser.DecodeRegionAccess(r.payload, true); !bytes.Equal(a.Data, []byte{0x00, 0xaa}) {
		t.Fatalf("unaligned read % x", a.Data)
	}
	// REGION_WRITE_MULTI, as QEMU coalesces posted writes.
	multi := binary.LittleEndian.AppendUint64(nil, 2)
	for _, v := range []uint32{5, 6} {
		e := vfiouser.RegionAccess{Offset: hw.RegDiagDMASeed, Region: hw.RegBAR, Count: 4}.AppendHeader(nil)
		e = append(e, le32(v)...)
		e = append(e, 0, 0, 0, 0)
		multi = append(multi, e...)
	}
	r = c.call(vfiouser.CmdRegionWriteMulti, 0, multi, nil)
	if r.Flags&vfiouser.FlagError != 0 || binary.LittleEndian.Uint64(r.payload) != 2 {
		t.Fatalf("WRITE_MULTI reply %+v", r)
	}
	if got := c.read32(hw.RegBAR, hw.RegDiagDMASeed); got != 6 {
		t.Fatalf("seed after multi %d", got)
	}

	for _, tc := range []struct {
		name    string
		cmd     vfiouser.Command
		payload []byte
		want    unix.Errno
	}{
		{"read past end", vfiouser.CmdRegionRead, regionAccess(hw.RegBAR, hw.RegBARSize-2, 4, nil), unix.EINVAL},
		{"read offset overflow", vfiouser.CmdRegionRead, regionAccess(hw.RegBAR, ^uint64(0)-1, 4, nil), unix.EINVAL},
		{"read empty region", vfiouser.CmdRegionRead, regionAccess(vfiouser.RegionBAR4, 0, 4, nil), unix.EINVAL},
		{"read no such region", vfiouser.CmdRegionRead, regionAccess(9, 0, 4, nil), unix.EINVAL},
		{"read too big", vfiouser.CmdRegionRead, regionAccess(hw.RegBAR, 0, 2<<20, nil), unix.E2BIG},
		{"read payload long", vfiouser.CmdRegionRead, append(regionAccess(hw.RegBAR, 0, 4, nil), 1), unix.EINVAL},
		{"write count mismatch", vfiouser.CmdRegionWrite, regionAccess(hw.RegBAR, 0, 8, le32(1)), unix.EINVAL},
		{"write past end", vfiouser.CmdRegionWrite, regionAccess(vfiouser.RegionConfig, pcie.Size-2, 4, le32(1)), unix.EINVAL},
		{"multi bad count", vfiouser.CmdRegionWriteMulti, binary.LittleEndian.AppendUint64(nil, 3), unix.EINVAL},
		{"multi element too long", vfiouser.CmdRegionWriteMulti, append(binary.LittleEndian.AppendUint64(nil, 1),
			append(vfiouser.RegionAccess{Region: hw.RegBAR, Count: 9}.AppendHeader(nil), make([]byte, 8)...)...), unix.EINVAL},
	} {
		t.Run(tc.name, func(t *testing.T) { c.callErr(tc.cmd, tc.payload, nil, tc.want) })
	}
	// A failing posted write is not answered; the next request still is.
	c.send(vfiouser.CmdRegionWrite, vfiouser.FlagNoReply, regionAccess(hw.RegBAR, hw.RegBARSize, 4, le32(1)), nil)
	if got := c.read32(hw.RegBAR, hw.RegID); got != hw.Magic {
		t.Fatal("server lost sync after a failed posted write")
	}
}

func TestConfigWritesReachDevice(t *testing.T) {
	f := newFixture(t, vfiouser.Options{})
	c := f.c
	c.negotiate()
	l := f.nic.Config().Layout()
	c.configWrite16(uint64(l.ATS+6), 0x8003) // Enable, STU=3
	c.configWrite16(uint64(l.PRI+4), 0x0001)
	c.configWrite16(uint64(l.PASID+6), 0x0001)
	cfg := f.nic.Config()
	if !cfg.ATSEnabled() || cfg.ATSSTU() != 3 || !cfg.PRIEnabled() || cfg.PRIStopped() || !cfg.PASIDEnabled() {
		t.Fatal("config writes did not take effect")
	}
	c.configWrite16(uint64(l.PRI+4), 0x0000)
	if cfg.PRIEnabled() || !cfg.PRIStopped() {
		t.Fatal("PRI disable did not stop")
	}
}

func TestDeviceReset(t *testing.T) {
	f := newFixture(t, vfiouser.Options{})
	c := f.c
	c.negotiate()
	c.write32(hw.RegBAR, hw.RegScratch, 42)
	c.enableBusMaster()
	r := c.call(vfiouser.CmdDeviceReset, 0, nil, nil)
	if r.Flags&vfiouser.FlagError != 0 || len(r.payload) != 0 {
		t.Fatalf("reset reply %+v", r)
	}
	if got := c.read32(hw.RegBAR, hw.RegScratch); got != 0 {
		t.Fatalf("SCRATCH after reset %d", got)
	}
	if f.nic.Config().BusMaster() {
		t.Fatal("config space not reset")
	}
	c.callErr(vfiouser.CmdDeviceReset, []byte{1}, nil, unix.EINVAL)
}

func TestDMAMapWithFD(t *testing.T) {
	f := newFixture(t, vfiouser.Options{})
	c := f.c
	c.negotiate()
	c.enableBusMaster()
	const ram = 1 << 20
	fd := memfd(t, 2*ram)
	// Guest RAM at IOVA 0x100000 backed by the second MiB of the memfd.
	if r := c.dmaMap(0x100000, ram, vfiouser.DMAFlagRead|vfiouser.DMAFlagWrite, fd, ram); r.Flags&vfiouser.FlagError != 0 {
		t.Fatalf("DMA_MAP: errno %d", r.Error)
	}
	const addr, length, seed = 0x100000 + 0x1234, 3 * 4096, 0xabcdef
	if st := c.diagDMA(addr, length, seed); st != hw.DiagDMAStatusDone {
		t.Fatalf("DMA status %d", st)
	}
	got := make([]byte, length+2)
	if _, err := unix.Pread(fd, got, ram+0x1234-1); err != nil {
		t.Fatal(err)
	}
	if got[0] != 0 || got[len(got)-1] != 0 {
		t.Fatal("DMA wrote outside its range")
	}
	for i := 0; i < length; i++ {
		if got[i+1] != hw.DiagPattern(seed, uint32(i)) {
			t.Fatalf("byte %d = %#x want %#x", i, got[i+1], hw.DiagPattern(seed, uint32(i)))
		}
	}

	// Target outside guest memory: error status, server keeps running.
	if st := c.diagDMA(0x100000+ram-16, 32, 1); st != hw.DiagDMAStatusFault {
		t.Fatalf("DMA across the end: status %d", st)
	}
	if st := c.diagDMA(0xdead0000, 16, 1); st != hw.DiagDMAStatusFault {
		t.Fatalf("DMA to unmapped: status %d", st)
	}
	if st := c.diagDMA(0x100000, 0, 1); st != hw.DiagDMAStatusBadLen {
		t.Fatalf("zero length: status %d", st)
	}

	mapPayload := func(iova, size uint64, flags uint32) []byte {
		return vfiouser.DMAMap{Argsz: 32, Flags: flags, IOVA: iova, Size: size}.Append(nil)
	}
	for _, tc := range []struct {
		name    string
		payload []byte
		fds     []int
		want    unix.Errno
	}{
		{"overlap", mapPayload(0x180000, 0x100000, 3), nil, unix.EEXIST},
		{"overlap fd", mapPayload(0x100000, 0x1000, 3), []int{fd}, unix.EEXIST},
		{"two fds", mapPayload(0x900000, 0x1000, 3), []int{fd, fd}, unix.EINVAL},
		{"bad flags", mapPayload(0x900000, 0x1000, 0x10), nil, unix.EINVAL},
		{"zero size", mapPayload(0x900000, 0, 3), nil, unix.EINVAL},
		{"wraps", mapPayload(^uint64(0)-0xfff, 0x2000, 3), nil, unix.EINVAL},
		{"short", mapPayload(0x900000, 0x1000, 3)[:24], nil, unix.EINVAL},
		{"small argsz", vfiouser.DMAMap{Argsz: 8, Flags: 3, IOVA: 0x900000, Size: 0x1000}.Append(nil), nil, unix.EINVAL},
		{"eventfd", mapPayload(0x900000, 0x1000, 3), []int{eventfd(t)}, unix.EINVAL},
		{"fd smaller than the map", mapPayload(0x900000, 0x2000, 3), []int{memfd(t, 0x1000)}, unix.EINVAL},
		{"mmap out of address space", mapPayload(0x1000000000, 1<<48, 3), []int{memfd(t, 1<<48)}, unix.ENOMEM},
	} {
		t.Run(tc.name, func(t *testing.T) { c.callErr(vfiouser.CmdDMAMap, tc.payload, tc.fds, tc.want) })
	}

	unmapPayload := func(iova, size uint64, flags uint32) []byte {
		return vfiouser.DMAUnmap{Argsz: 24, Flags: flags, IOVA: iova, Size: size}.Append(nil)
	}
	for _, tc := range []struct {
		name    string
		payload []byte
		want    unix.Errno
	}{
		{"partial", unmapPayload(0x100000, 0x1000, 0), unix.ENOENT},
		{"unknown", unmapPayload(0x500000, ram, 0), unix.ENOENT},
		{"dirty bitmap", unmapPayload(0x100000, ram, vfiouser.DMAUnmapFlagGetDirtyBitmap), unix.ENOTSUP},
		{"all with range", unmapPayload(0x100000, ram, vfiouser.DMAUnmapFlagAll), unix.EINVAL},
		{"bad flags", unmapPayload(0x100000, ram, 0x8), unix.EINVAL},
		{"short", unmapPayload(0x100000, ram, 0)[:16], unix.EINVAL},
	} {
		t.Run("unmap "+tc.name, func(t *testing.T) { c.callErr(vfiouser.CmdDMAUnmap, tc.payload, nil, tc.want) })
	}
	r := c.dmaUnmap(0x100000, ram, 0)
	if r.Flags&vfiouser.FlagError != 0 {
		t.Fatalf("unmap: errno %d", r.Error)
	}
	u, err := vfiouser.DecodeDMAUnmap(r.payload)
	if err != nil || u.IOVA != 0x100000 || u.Size != ram {
		t.Fatalf("unmap reply %+v %v", u, err)
	}
	if st := c.diagDMA(addr, 16, 1); st != hw.DiagDMAStatusFault {
		t.Fatalf("DMA after unmap: status %d", st)
	}
	// Unmap-all.
	c.dmaMap(0x200000, 0x1000, 3, fd, 0)
	c.dmaMap(0x300000, 0x1000, 3, -1, 0)
	if r := c.dmaUnmap(0, 0, vfiouser.DMAUnmapFlagAll); r.Flags&vfiouser.FlagError != 0 {
		t.Fatalf("unmap all: errno %d", r.Error)
	}
	if n := len(f.srv.Memory().Regions()); n != 0 {
		t.Fatalf("%d regions after unmap-all", n)
	}
}

func TestDMAWithoutFD(t *testing.T) {
	for _, layout := range []vfiouser.DMALayout{vfiouser.DMALayoutQEMU, vfiouser.DMALayoutSpec} {
		t.Run([]string{"qemu", "spec"}[layout], func(t *testing.T) {
			f := newFixture(t, vfiouser.Options{DMALayout: layout})
			c := f.c
			c.negotiate()
			c.enableBusMaster()
			c.remoteBase = 0xc0000
			c.remote = make([]byte, 0x20000)
			if r := c.dmaMap(0xc0000, 0x20000, 3, -1, 0); r.Flags&vfiouser.FlagError != 0 {
				t.Fatalf("DMA_MAP: errno %d", r.Error)
			}
			const length, seed = 9000, 77
			if st := c.diagDMA(0xc0000+100, length, seed); st != hw.DiagDMAStatusDone {
				t.Fatalf("status %d", st)
			}
			for i := 0; i < length; i++ {
				if c.remote[100+i] != hw.DiagPattern(seed, uint32(i)) {
					t.Fatalf("remote byte %d wrong", i)
				}
			}
			if c.remoteOps < 3 {
				t.Fatalf("only %d DMA_WRITE messages for a 3-page DMA", c.remoteOps)
			}
			// Reads go through DMA_READ answered by the client.
			mem := f.srv.Memory()
			done := make(chan error, 1)
			var v uint32
			go func() {
				var err error
				v, err = mem.ReadU32(0xc0000 + 100)
				done <- err
			}()
			// Keep servicing DMA requests while the device goroutine waits.
			for {
				select {
				case err := <-done:
					if err != nil {
						t.Fatal(err)
					}
					want := binary.LittleEndian.Uint32(c.remote[100:])
					if v != want {
						t.Fatalf("remote read %#x want %#x", v, want)
					}
					return
				default:
				}
				c.read32(hw.RegBAR, hw.RegID)
			}
		})
	}
}

func TestSetIRQs(t *testing.T) {
	f := newFixture(t, vfiouser.Options{})
	c := f.c
	c.negotiate()
	irqSet := func(index, start, count, flags uint32, data []byte) []byte {
		return vfiouser.IRQSet{Argsz: uint32(20 + len(data)), Flags: flags, Index: index, Start: start, Count: count, Data: data}.Append(nil)
	}
	efdTrig := uint32(vfiouser.IRQSetDataEventfd | vfiouser.IRQSetActionTrigger)
	var efds [hw.MSIXVectors]int
	for i := range efds {
		efds[i] = eventfd(t)
	}
	// Vector 3 fires before any eventfd exists: it must become pending and
	// fire once its eventfd arrives.
	c.write32(hw.RegBAR, hw.RegDiagIRQ, 3)
	if !f.srv.Interrupts().Pending(vfiouser.IRQMSIX, 3) {
		c.read32(hw.RegBAR, hw.RegID) // flush the posted write
	}
	if !f.srv.Interrupts().Pending(vfiouser.IRQMSIX, 3) {
		t.Fatal("vector 3 not pending")
	}
	r := c.call(vfiouser.CmdRegionRead, 0, regionAccess(hw.MSIXBAR, hw.MSIXPBAOffset, 8, nil), nil)
	if a, _ := vfiouser.DecodeRegionAccess(r.payload, true); a.Data[0] != 1<<3 {
		t.Fatalf("PBA % x", a.Data)
	}
	// Eventfds in chunks of at most four, as QEMU splits by max_msg_fds.
	for start := 0; start < hw.MSIXVectors; start += 4 {
		n := min(4, hw.MSIXVectors-start)
		r := c.call(vfiouser.CmdSetIRQs, 0, irqSet(vfiouser.IRQMSIX, uint32(start), uint32(n), efdTrig, nil), efds[start:start+n])
		if r.Flags&vfiouser.FlagError != 0 {
			t.Fatalf("SET_IRQS: errno %d", r.Error)
		}
	}
	if eventCount(efds[3], time.Second) != 1 || f.srv.Interrupts().Pending(vfiouser.IRQMSIX, 3) {
		t.Fatal("pending vector not delivered on assignment")
	}
	for v := 0; v < hw.MSIXVectors; v++ {
		c.write32(hw.RegBAR, hw.RegDiagIRQ, uint32(v))
		if n := eventCount(efds[v], 2*time.Second); n != 1 {
			t.Fatalf("vector %d: eventfd count %d", v, n)
		}
		for w := 0; w < hw.MSIXVectors; w++ {
			if w != v && eventCount(efds[w], 0) != 0 {
				t.Fatalf("DIAG_IRQ %d also fired vector %d", v, w)
			}
		}
	}
	// Loopback trigger with DATA_BOOL selects vectors 1 and 2 only.
	c.call(vfiouser.CmdSetIRQs, 0, irqSet(vfiouser.IRQMSIX, 0, 3, vfiouser.IRQSetDataBool|vfiouser.IRQSetActionTrigger, []byte{0, 1, 1}), nil)
	if eventCount(efds[0], 0) != 0 || eventCount(efds[1], time.Second) != 1 || eventCount(efds[2], time.Second) != 1 {
		t.Fatal("DATA_BOOL trigger")
	}
	// De-assign vector 5 with DATA_EVENTFD and no descriptors.
	c.call(vfiouser.CmdSetIRQs, 0, irqSet(vfiouser.IRQMSIX, 5, 1, efdTrig, nil), nil)
	c.write32(hw.RegBAR, hw.RegDiagIRQ, 5)
	c.read32(hw.RegBAR, hw.RegID)
	if eventCount(efds[5], 50*time.Millisecond) != 0 || !f.srv.Interrupts().Pending(vfiouser.IRQMSIX, 5) {
		t.Fatal("de-assigned vector still fired")
	}
	// Count 0 with DATA_NONE disables the whole index.
	c.call(vfiouser.CmdSetIRQs, 0, irqSet(vfiouser.IRQMSIX, 0, 0, vfiouser.IRQSetDataNone|vfiouser.IRQSetActionTrigger, nil), nil)
	c.write32(hw.RegBAR, hw.RegDiagIRQ, 0)
	c.read32(hw.RegBAR, hw.RegID)
	if eventCount(efds[0], 50*time.Millisecond) != 0 {
		t.Fatal("disabled index still fired")
	}

	// INTx: automasked after a trigger, pending while masked, redelivered on
	// unmask.
	intx := eventfd(t)
	c.call(vfiouser.CmdSetIRQs, 0, irqSet(vfiouser.IRQIntx, 0, 1, efdTrig, nil), []int{intx})
	c.write32(hw.RegBAR, hw.RegDiagIRQ, 0)
	if eventCount(intx, time.Second) != 1 {
		t.Fatal("INTx not delivered")
	}
	c.write32(hw.RegBAR, hw.RegDiagIRQ, 0)
	c.read32(hw.RegBAR, hw.RegID)
	if eventCount(intx, 50*time.Millisecond) != 0 {
		t.Fatal("INTx fired while automasked")
	}
	c.call(vfiouser.CmdSetIRQs, 0, irqSet(vfiouser.IRQIntx, 0, 1, vfiouser.IRQSetDataNone|vfiouser.IRQSetActionUnmask, nil), nil)
	if eventCount(intx, time.Second) != 1 {
		t.Fatal("pending INTx not delivered on unmask")
	}

	for _, tc := range []struct {
		name    string
		payload []byte
		fds     int
		want    unix.Errno
	}{
		{"two data flags", irqSet(2, 0, 1, vfiouser.IRQSetDataNone|vfiouser.IRQSetDataBool|vfiouser.IRQSetActionTrigger, []byte{1}), 0, unix.EINVAL},
		{"no action", irqSet(2, 0, 1, vfiouser.IRQSetDataNone, nil), 0, unix.EINVAL},
		{"unknown flag", irqSet(2, 0, 1, vfiouser.IRQSetDataNone|vfiouser.IRQSetActionTrigger|1<<9, nil), 0, unix.EINVAL},
		{"bad index", irqSet(9, 0, 1, vfiouser.IRQSetDataNone|vfiouser.IRQSetActionTrigger, nil), 0, unix.EINVAL},
		{"range", irqSet(2, hw.MSIXVectors-2, 3, efdTrig, nil), 3, unix.EINVAL},
		{"range overflow", irqSet(2, 0xffffffff, 2, vfiouser.IRQSetDataNone|vfiouser.IRQSetActionTrigger, nil), 0, unix.EINVAL},
		{"fd count mismatch", irqSet(2, 0, 2, efdTrig, nil), 1, unix.EINVAL},
		{"fds without eventfd flag", irqSet(2, 0, 1, vfiouser.IRQSetDataNone|vfiouser.IRQSetActionTrigger, nil), 1, unix.EINVAL},
		{"bool data short", irqSet(2, 0, 4, vfiouser.IRQSetDataBool|vfiouser.IRQSetActionTrigger, []byte{1}), 0, unix.EINVAL},
		{"mask msix", irqSet(2, 0, 1, vfiouser.IRQSetDataNone|vfiouser.IRQSetActionMask, nil), 0, unix.EINVAL},
		{"mask eventfd", irqSet(0, 0, 1, vfiouser.IRQSetDataEventfd|vfiouser.IRQSetActionMask, nil), 1, unix.ENOTSUP},
		{"count 0 with eventfd", irqSet(2, 0, 0, efdTrig, nil), 0, unix.EINVAL},
		{"short", irqSet(2, 0, 1, efdTrig, nil)[:12], 0, unix.EINVAL},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var fds []int
			for i := 0; i < tc.fds; i++ {
				fds = append(fds, eventfd(t))
			}
			c.callErr(vfiouser.CmdSetIRQs, tc.payload, fds, tc.want)
		})
	}
}

// TestMalformedFrames sends broken frames; each must get an error reply with
// the right errno or a closed connection, and the server must accept a new
// client afterwards.
func TestMalformedFrames(t *testing.T) {
	path, _, _, _ := listenServer(t)
	hdr := func(id uint16, cmd vfiouser.Command, size, flags uint32) []byte {
		b := make([]byte, vfiouser.HeaderSize)
		vfiouser.Header{ID: id, Command: cmd, Size: size, Flags: flags}.Put(b)
		return b
	}
	withPayload := func(h []byte, p []byte) []byte {
		out := append(append([]byte(nil), h...), p...)
		binary.LittleEndian.PutUint32(out[4:], uint32(len(out)))
		return out
	}
	for _, tc := range []struct {
		name      string
		frame     []byte
		fds       int
		halfClose bool       // close our write side after sending
		want      unix.Errno // 0: expect the connection to close
		closes    bool
	}{
		{name: "short header", frame: hdr(1, vfiouser.CmdDeviceGetInfo, 32, 0)[:10], halfClose: true, closes: true},
		{name: "truncated body", frame: hdr(1, vfiouser.CmdDeviceGetInfo, 32, 0), halfClose: true, closes: true},
		{name: "size below header", frame: hdr(7, vfiouser.CmdDeviceGetInfo, 8, 0), want: unix.EINVAL, closes: true},
		{name: "size above max", frame: hdr(7, vfiouser.CmdRegionWrite, 64<<20, 0), want: unix.E2BIG, closes: true},
		{name: "unknown command", frame: hdr(7, 99, 16, 0), want: unix.ENOTSUP},
		{name: "dirty pages command", frame: hdr(7, vfiouser.CmdDirtyPages, 16, 0), want: unix.ENOTSUP},
		{name: "client sends DMA_READ", frame: withPayload(hdr(7, vfiouser.CmdDMARead, 0, 0), make([]byte, 16)), want: unix.EINVAL},
		{name: "fd on GET_INFO", frame: withPayload(hdr(7, vfiouser.CmdDeviceGetInfo, 0, 0), vfiouser.DeviceInfoMsg{Argsz: 16}.Append(nil)), fds: 1, want: unix.EINVAL},
		{name: "too many fds", frame: withPayload(hdr(7, vfiouser.CmdSetIRQs, 0, 0), vfiouser.IRQSet{Argsz: 20, Flags: vfiouser.IRQSetDataEventfd | vfiouser.IRQSetActionTrigger, Index: 2, Count: 8}.Append(nil)), fds: 5, want: unix.EINVAL},
		// An unsolicited reply is dropped (read32 afterwards would see a
		// stray error reply first).
		{name: "unsolicited reply", frame: hdr(7, vfiouser.CmdDeviceGetInfo, 16, vfiouser.FlagTypeReply)},
		{name: "unsolicited error reply", frame: hdr(7, vfiouser.CmdRegionRead, 16, vfiouser.FlagTypeReply|vfiouser.FlagError)},
		{name: "unknown type", frame: hdr(7, vfiouser.CmdDeviceGetInfo, 16, 0x7), want: unix.EINVAL},
		{name: "truncated DMA_MAP", frame: withPayload(hdr(7, vfiouser.CmdDMAMap, 0, 0), make([]byte, 8)), want: unix.EINVAL},
		{name: "truncated DMA_UNMAP", frame: withPayload(hdr(7, vfiouser.CmdDMAUnmap, 0, 0), make([]byte, 20)), want: unix.EINVAL},
		{name: "truncated GET_REGION_INFO", frame: withPayload(hdr(7, vfiouser.CmdGetRegionInfo, 0, 0), make([]byte, 4)), want: unix.EINVAL},
		{name: "truncated GET_IRQ_INFO", frame: withPayload(hdr(7, vfiouser.CmdGetIRQInfo, 0, 0), make([]byte, 4)), want: unix.EINVAL},
		{name: "truncated REGION_READ", frame: withPayload(hdr(7, vfiouser.CmdRegionRead, 0, 0), make([]byte, 12)), want: unix.EINVAL},
		{name: "truncated REGION_WRITE", frame: withPayload(hdr(7, vfiouser.CmdRegionWrite, 0, 0), regionAccess(0, 8, 4, []byte{1, 2})), want: unix.EINVAL},
		{name: "truncated SET_IRQS", frame: withPayload(hdr(7, vfiouser.CmdSetIRQs, 0, 0), make([]byte, 19)), want: unix.EINVAL},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := waitNextClient(t, path)
			var fds []int
			for i := 0; i < tc.fds; i++ {
				fds = append(fds, eventfd(t))
			}
			c.sendRaw(tc.frame, fds)
			if tc.halfClose {
				c.uc.CloseWrite()
			}
			if tc.want != 0 {
				r, err := c.recv()
				if err != nil {
					t.Fatalf("no error reply: %v", err)
				}
				if r.ID != 7 || !r.IsReply() || r.Flags&vfiouser.FlagError == 0 || unix.Errno(r.Error) != tc.want {
					t.Fatalf("reply id %d flags %#x errno %v, want %v", r.ID, r.Flags, unix.Errno(r.Error), tc.want)
				}
			}
			if tc.closes {
				if _, err := c.recv(); !errors.Is(err, io.EOF) && !errors.Is(err, unix.ECONNRESET) {
					t.Fatalf("connection not closed: %v", err)
				}
			} else if got := c.read32(hw.RegBAR, hw.RegID); got != hw.Magic {
				t.Fatal("connection unusable after an error reply")
			}
			c.uc.Close()
		})
	}
	// The server survived every case and takes the next client.
	waitNextClient(t, path).read32(hw.RegBAR, hw.RegID)
}

// waitNextClient connects until the server accepts a new session (the
// previous one may still be tearing down; meanwhile it turns clients away).
func waitNextClient(t *testing.T, path string) *testClient {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		uc, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: path, Net: "unix"})
		if err != nil {
			t.Fatal(err)
		}
		c := &testClient{t: t, uc: uc}
		// A server still tearing down the previous session turns us away,
		// possibly before our VERSION is even written (EPIPE): try again.
		msg := make([]byte, vfiouser.HeaderSize)
		msg = append(msg, vfiouser.Version{JSON: qemuCapsJSON()}.Append(nil)...)
		vfiouser.Header{ID: c.nextID, Command: vfiouser.CmdVersion, Size: uint32(len(msg))}.Put(msg)
		id := c.nextID
		c.nextID++
		_, werr := uc.Write(msg)
		var r reply
		err = werr
		if err == nil {
			r, err = c.wait(id)
		}
		if err == nil && r.Flags&vfiouser.FlagError == 0 {
			t.Cleanup(func() { uc.Close() })
			return c
		}
		uc.Close()
		if time.Now().After(deadline) {
			t.Fatal("server did not accept a new client")
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func TestReconnectKeepsDeviceState(t *testing.T) {
	path, n, _, _ := listenServer(t)
	c := dial(t, path)
	c.negotiate()
	c.enableBusMaster()
	fd := memfd(t, 1<<16)
	c.dmaMap(0x10000, 1<<16, 3, fd, 0)
	efd := eventfd(t)
	c.call(vfiouser.CmdSetIRQs, 0, vfiouser.IRQSet{Argsz: 20, Flags: vfiouser.IRQSetDataEventfd | vfiouser.IRQSetActionTrigger, Index: vfiouser.IRQMSIX, Count: 1}.Append(nil), []int{efd})
	c.write32(hw.RegBAR, hw.RegScratch, 0x5a5a1234)
	if st := c.diagDMA(0x10000, 64, 9); st != hw.DiagDMAStatusDone {
		t.Fatalf("status %d", st)
	}
	// QEMU power-off: the socket just closes.
	c.uc.Close()

	c2 := waitNextClient(t, path)
	if got := c2.read32(hw.RegBAR, hw.RegScratch); got != 0x5a5a1234 {
		t.Fatalf("SCRATCH after reconnect %#x", got)
	}
	if got := c2.read32(hw.RegBAR, hw.RegDiagDMAStatus); got != hw.DiagDMAStatusDone {
		t.Fatalf("DMA status after reconnect %d", got)
	}
	if !n.Config().BusMaster() {
		t.Fatal("config space lost on reconnect")
	}
	// The old client's memory and eventfds are gone.
	if st := c2.diagDMA(0x10000, 64, 9); st != hw.DiagDMAStatusFault {
		t.Fatalf("DMA into the old client's memory: status %d", st)
	}
	c2.write32(hw.RegBAR, hw.RegDiagIRQ, 0)
	c2.read32(hw.RegBAR, hw.RegID)
	if eventCount(efd, 50*time.Millisecond) != 0 {
		t.Fatal("old client's eventfd still signalled")
	}
}

func TestSecondClientRejected(t *testing.T) {
	path, _, _, _ := listenServerOpts(t, vfiouser.Options{HandoverTimeout: 200 * time.Millisecond})
	c := dial(t, path)
	c.negotiate()
	c2 := dial(t, path)
	// The server may close the second connection before the request is
	// even written (EPIPE): that is a rejection too.
	msg := make([]byte, vfiouser.HeaderSize+4)
	vfiouser.Header{ID: 1, Command: vfiouser.CmdVersion, Size: uint32(len(msg))}.Put(msg)
	if _, _, err := c2.uc.WriteMsgUnix(msg, nil, nil); err == nil {
		if _, err := c2.recv(); err == nil {
			t.Fatal("second client served concurrently")
		}
	}
	if c.read32(hw.RegBAR, hw.RegID) != hw.Magic {
		t.Fatal("first client disturbed")
	}
}

// TestUnmapWhileDeviceDMA unmaps and remaps guest memory while diagnostic
// DMAs run on the device goroutine. Run with -race.
func TestUnmapWhileDeviceDMA(t *testing.T) {
	f := newFixture(t, vfiouser.Options{})
	c := f.c
	c.negotiate()
	c.enableBusMaster()
	const size = 1 << 20
	fd := memfd(t, size)
	c.dmaMap(0, size, 3, fd, 0)
	var faults, done int
	for i := 0; i < 40; i++ {
		c.write32(hw.RegBAR, hw.RegDiagDMAAddrLo, 0)
		c.write32(hw.RegBAR, hw.RegDiagDMALen, size)
		c.write32(hw.RegBAR, hw.RegDiagDMASeed, uint32(i))
		c.write32(hw.RegBAR, hw.RegDiagDMACtrl, hw.DiagDMACtrlStart)
		if r := c.dmaUnmap(0, size, 0); r.Flags&vfiouser.FlagError != 0 {
			t.Fatalf("unmap: errno %d", r.Error)
		}
		c.dmaMap(0, size, 3, fd, 0)
		for {
			st := c.read32(hw.RegBAR, hw.RegDiagDMAStatus)
			if st == hw.DiagDMAStatusBusy {
				continue
			}
			switch st {
			case hw.DiagDMAStatusFault:
				faults++
			case hw.DiagDMAStatusDone:
				done++
			default:
				t.Fatalf("status %d", st)
			}
			break
		}
	}
	t.Logf("done=%d faulted=%d", done, faults)
}

func TestListenAndServe(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "s.sock")

	// A stale socket (no listener) is replaced.
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false)
	l.Close()
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("stale socket not left behind: %v", err)
	}

	n, _ := npfnic.New(npfnic.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	var logs bytes.Buffer
	var mu sync.Mutex
	logger := slog.New(slog.NewTextHandler(&lockedWriter{w: &logs, mu: &mu}, nil))
	go func() { done <- vfiouser.ListenAndServe(ctx, path, n, logger) }()

	var c *testClient
	for deadline := time.Now().Add(5 * time.Second); ; {
		uc, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: path, Net: "unix"})
		if err == nil {
			c = newTestClient(t, uc)
			break
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	c.negotiate()

	// A live server owns the path: a second ListenAndServe refuses it.
	n2, _ := npfnic.New(npfnic.Options{})
	if err := vfiouser.ListenAndServe(context.Background(), path, n2, nil); err == nil {
		t.Fatal("second server took over a live socket")
	}
	// A regular file is never deleted.
	file := filepath.Join(dir, "file")
	os.WriteFile(file, []byte("x"), 0o644)
	if err := vfiouser.ListenAndServe(context.Background(), file, n2, nil); err == nil {
		t.Fatal("regular file replaced")
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("ListenAndServe: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("ListenAndServe did not stop on cancel")
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("socket not removed on shutdown")
	}
	mu.Lock()
	defer mu.Unlock()
	for _, want := range []string{"client connected", "version negotiated", "server stopped"} {
		if !bytes.Contains(logs.Bytes(), []byte(want)) {
			t.Errorf("log lacks %q:\n%s", want, logs.String())
		}
	}
}

type lockedWriter struct {
	w  io.Writer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// TestPipelinedFDs sends several messages in one write, one of them with a
// descriptor, to check that descriptors reach the right message.
func TestPipelinedFDs(t *testing.T) {
	f := newFixture(t, vfiouser.Options{})
	c := f.c
	c.negotiate()
	fd := memfd(t, 4096)
	var batch []byte
	add := func(id uint16, cmd vfiouser.Command, p []byte) {
		m := make([]byte, vfiouser.HeaderSize)
		vfiouser.Header{ID: id, Command: cmd, Size: uint32(16 + len(p))}.Put(m)
		batch = append(batch, append(m, p...)...)
	}
	add(100, vfiouser.CmdDeviceGetInfo, vfiouser.DeviceInfoMsg{Argsz: 16}.Append(nil))
	add(101, vfiouser.CmdDMAMap, vfiouser.DMAMap{Argsz: 32, Flags: 3, IOVA: 0x1000, Size: 4096}.Append(nil))
	// The fd travels with the sendmsg that starts message 101, as a client
	// attaches descriptors to the message they belong to.
	c.sendRaw(batch[:40], nil)
	c.sendRaw(batch[40:], []int{fd})
	for _, id := range []uint16{100, 101} {
		r, err := c.wait(id)
		if err != nil || r.Flags&vfiouser.FlagError != 0 {
			t.Fatalf("id %d: %v errno %d", id, err, r.Error)
		}
	}
	regs := f.srv.Memory().Regions()
	if len(regs) != 1 || regs[0].Remote {
		t.Fatalf("regions %+v: descriptor not attached to DMA_MAP", regs)
	}
}

// TestIRQFDsNeverBlock: an interrupt into an eventfd the client never reads
// (a blocking one, at its maximum count) must neither wedge the connection
// nor the next client; descriptors that are not eventfds are refused.
func TestIRQFDsNeverBlock(t *testing.T) {
	path, _, _, _ := listenServer(t)
	c := dial(t, path)
	c.negotiate()
	irqSet := func(index, count uint32) []byte {
		return vfiouser.IRQSet{Argsz: 20, Flags: vfiouser.IRQSetDataEventfd | vfiouser.IRQSetActionTrigger, Index: index, Count: count}.Append(nil)
	}
	// A blocking eventfd filled to its maximum: one more write would block.
	full, err := unix.Eventfd(0, unix.EFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(full)
	if _, err := unix.Write(full, binary.LittleEndian.AppendUint64(nil, 1<<64-2)); err != nil {
		t.Fatal(err)
	}
	pipe := make([]int, 2)
	if err := unix.Pipe2(pipe, unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(pipe[0])
	defer unix.Close(pipe[1])
	sock, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(sock[0])
	defer unix.Close(sock[1])
	for _, tc := range []struct {
		name string
		fd   int
	}{{"pipe", pipe[1]}, {"socket", sock[0]}, {"memfd", memfd(t, 4096)}} {
		t.Run(tc.name, func(t *testing.T) {
			c.callErr(vfiouser.CmdSetIRQs, irqSet(vfiouser.IRQMSIX, 1), []int{tc.fd}, unix.EINVAL)
		})
	}
	// Vector 0 becomes pending first, so the assignment itself fires.
	c.write32(hw.RegBAR, hw.RegDiagIRQ, 0)
	r := c.call(vfiouser.CmdSetIRQs, 0, irqSet(vfiouser.IRQMSIX, 1), []int{full})
	if r.Flags&vfiouser.FlagError != 0 {
		t.Fatalf("SET_IRQS: errno %d", r.Error)
	}
	for i := 0; i < 100; i++ {
		c.write32(hw.RegBAR, hw.RegDiagIRQ, 0)
	}
	done := make(chan uint32, 1)
	go func() { done <- c.read32(hw.RegBAR, hw.RegID) }()
	select {
	case id := <-done:
		if id != hw.Magic {
			t.Fatalf("ID %#x", id)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("server wedged on an eventfd at its maximum count")
	}
	c.uc.Close()
	waitNextClient(t, path).read32(hw.RegBAR, hw.RegID)
}

// TestWriteMultiNeedsNegotiation: REGION_WRITE_MULTI is refused unless
// write_multiple was negotiated.
func TestWriteMultiNeedsNegotiation(t *testing.T) {
	f := newFixture(t, vfiouser.Options{})
	c := f.c
	p := vfiouser.Version{JSON: []byte(`{"capabilities":{"max_msg_fds":16}}`)}.Append(nil)
	if r := c.call(vfiouser.CmdVersion, 0, p, nil); r.Flags&vfiouser.FlagError != 0 {
		t.Fatalf("VERSION: errno %d", r.Error)
	}
	multi := binary.LittleEndian.AppendUint64(nil, 1)
	multi = vfiouser.RegionAccess{Offset: hw.RegScratch, Region: hw.RegBAR, Count: 4}.AppendHeader(multi)
	multi = append(multi, 1, 2, 3, 4, 0, 0, 0, 0)
	c.callErr(vfiouser.CmdRegionWriteMulti, multi, nil, unix.ENOTSUP)
	if got := c.read32(hw.RegBAR, hw.RegScratch); got == 0x04030201 {
		t.Fatal("un-negotiated REGION_WRITE_MULTI was applied")
	}
}

// TestHandshakeAndStallDeadlines: a client that sends nothing, or stops
// inside a message, is dropped after the configured time and the next
// client gets the device; an idle negotiated client is not dropped.
func TestHandshakeAndStallDeadlines(t *testing.T) {
	const limit = 300 * time.Millisecond
	path, _, _, _ := listenServerOpts(t, vfiouser.Options{HandshakeTimeout: limit, StallTimeout: limit})
	getInfo := func() []byte {
		m := make([]byte, vfiouser.HeaderSize)
		m = vfiouser.DeviceInfoMsg{Argsz: 16}.Append(m)
		vfiouser.Header{ID: 1, Command: vfiouser.CmdDeviceGetInfo, Size: uint32(len(m))}.Put(m)
		return m
	}
	for _, tc := range []struct {
		name      string
		negotiate bool
		send      []byte
	}{
		{"silent client", false, nil},
		{"half a header before VERSION", false, make([]byte, 8)},
		{"half a VERSION", false, func() []byte {
			m := make([]byte, vfiouser.HeaderSize+4)
			vfiouser.Header{ID: 1, Command: vfiouser.CmdVersion, Size: 64}.Put(m)
			return m
		}()},
		{"half a header after VERSION", true, getInfo()[:10]},
		{"half a message after VERSION", true, getInfo()[:20]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The server's deadline runs from its accept, which may come
			// before dial returns: the clock starts before the dial.
			start := time.Now()
			c := dial(t, path)
			if tc.negotiate {
				c.negotiate()
			}
			if tc.send != nil {
				c.sendRaw(tc.send, nil)
			}
			// The next client queues behind the stalled one and is served
			// once it is dropped.
			next := make(chan *testClient, 1)
			go func() {
				uc, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: path, Net: "unix"})
				if err != nil {
					next <- nil
					return
				}
				next <- &testClient{t: t, uc: uc}
			}()
			if _, err := c.recv(); !errors.Is(err, io.EOF) && !errors.Is(err, unix.ECONNRESET) {
				t.Fatalf("stalled client not dropped: %v", err)
			}
			if d := time.Since(start); d < limit || d > 5*limit {
				t.Errorf("dropped after %v, want about %v", d, limit)
			}
			c2 := <-next
			if c2 == nil {
				t.Fatal("dial")
			}
			defer c2.uc.Close()
			c2.negotiate()
			c2.read32(hw.RegBAR, hw.RegID)
		})
	}
	// Idle between messages is not a stall.
	c := dial(t, path)
	c.negotiate()
	time.Sleep(3 * limit)
	if c.read32(hw.RegBAR, hw.RegID) != hw.Magic {
		t.Fatal("idle client lost its connection")
	}
}

// TestRapidReconnects: a client that reconnects right after closing (a
// guest reboot, a restarted QEMU) gets the device on the first try, every
// time.
func TestRapidReconnects(t *testing.T) {
	path, _, _, _ := listenServer(t)
	fd := memfd(t, 1<<16)
	for i := 0; i < 50; i++ {
		c := dial(t, path)
		c.negotiate()
		c.dmaMap(0x10000, 1<<16, 3, fd, 0)
		if c.read32(hw.RegBAR, hw.RegID) != hw.Magic {
			t.Fatalf("round %d: bad ID", i)
		}
		c.uc.Close()
	}
}

// TestFDWithTailOfMessage: descriptors sent with the tail of one message
// and the whole next message belong to the first one (they arrived with
// its bytes), never to the next.
func TestFDWithTailOfMessage(t *testing.T) {
	f := newFixture(t, vfiouser.Options{})
	c := f.c
	c.negotiate()
	fd := memfd(t, 4096)
	var a, b []byte
	a = vfiouser.DeviceInfoMsg{Argsz: 16}.Append(make([]byte, vfiouser.HeaderSize))
	vfiouser.Header{ID: 100, Command: vfiouser.CmdDeviceGetInfo, Size: uint32(len(a))}.Put(a)
	b = vfiouser.DMAMap{Argsz: 32, Flags: 3, IOVA: 0x1000, Size: 4096}.Append(make([]byte, vfiouser.HeaderSize))
	vfiouser.Header{ID: 101, Command: vfiouser.CmdDMAMap, Size: uint32(len(b))}.Put(b)
	c.sendRaw(a[:20], nil)
	time.Sleep(50 * time.Millisecond) // the server reads the head alone
	c.sendRaw(append(append([]byte(nil), a[20:]...), b...), []int{fd})
	r, err := c.wait(100)
	if err != nil || r.Flags&vfiouser.FlagError == 0 || unix.Errno(r.Error) != unix.EINVAL {
		t.Fatalf("GET_INFO carrying a descriptor: %v flags %#x errno %d", err, r.Flags, r.Error)
	}
	r, err = c.wait(101)
	if err != nil || r.Flags&vfiouser.FlagError != 0 {
		t.Fatalf("DMA_MAP: %v errno %d", err, r.Error)
	}
	regs := f.srv.Memory().Regions()
	if len(regs) != 1 || !regs[0].Remote {
		t.Fatalf("regions %+v: the descriptor slid to the next message", regs)
	}
}
