package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/npfnic/npfnic/vdevice/hw"
)

func readHexFile(path string) (uint64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.ParseUint(strings.TrimSpace(string(b)), 0, 32)
}

// findDevices lists the BDFs whose vendor and device IDs are npfnic's.
func findDevices() ([]string, error) {
	ents, err := os.ReadDir(sysfsPCI)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		dir := filepath.Join(sysfsPCI, e.Name())
		v, err1 := readHexFile(filepath.Join(dir, "vendor"))
		d, err2 := readHexFile(filepath.Join(dir, "device"))
		if err1 == nil && err2 == nil && v == hw.VendorID && d == hw.DeviceID {
			out = append(out, e.Name())
		}
	}
	sort.Strings(out)
	return out, nil
}

// barMap is a mapping of one BAR through sysfs resourceN.
type barMap struct {
	mem []byte
}

func openBAR(bdf string, bar int) (*barMap, error) {
	path := filepath.Join(sysfsPCI, bdf, fmt.Sprintf("resource%d", bar))
	f, err := os.OpenFile(path, os.O_RDWR|os.O_SYNC, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if fi.Size() == 0 {
		return nil, fmt.Errorf("%s has size 0", path)
	}
	mem, err := unix.Mmap(int(f.Fd()), 0, int(fi.Size()), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mmap %s: %w", path, err)
	}
	return &barMap{mem: mem}, nil
}

func (b *barMap) close() { unix.Munmap(b.mem) }

func (b *barMap) reg(off uint32) (*uint32, error) {
	if off%4 != 0 || uint64(off)+4 > uint64(len(b.mem)) {
		return nil, fmt.Errorf("offset %#x outside the %d-byte BAR", off, len(b.mem))
	}
	return (*uint32)(unsafe.Pointer(&b.mem[off])), nil
}

// read32 and write32 use atomic accesses so each is exactly one 32-bit
// load or store to the device.
func (b *barMap) read32(off uint32) (uint32, error) {
	p, err := b.reg(off)
	if err != nil {
		return 0, err
	}
	return atomic.LoadUint32(p), nil
}

func (b *barMap) write32(off, v uint32) error {
	p, err := b.reg(off)
	if err != nil {
		return err
	}
	atomic.StoreUint32(p, v)
	return nil
}

// enableBusMaster enables the function (memory decoding) through sysfs and
// sets Bus Master Enable in the Command register, which pci_enable_device
// leaves alone.
func enableBusMaster(bdf string) error {
	dir := filepath.Join(sysfsPCI, bdf)
	// A bound driver has enabled the function already, and sysfs then
	// refuses the write (EBUSY): only enable a function nobody enabled.
	if cur, err := os.ReadFile(filepath.Join(dir, "enable")); err == nil && strings.TrimSpace(string(cur)) != "0" {
		// already enabled
	} else if err := os.WriteFile(filepath.Join(dir, "enable"), []byte("1"), 0); err != nil {
		return fmt.Errorf("enable %s: %w", bdf, err)
	}
	f, err := os.OpenFile(filepath.Join(dir, "config"), os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	var b [2]byte
	if _, err := f.ReadAt(b[:], 4); err != nil {
		return fmt.Errorf("read command register: %w", err)
	}
	cmd := binary.LittleEndian.Uint16(b[:]) | 0x6 // memory space, bus master
	binary.LittleEndian.PutUint16(b[:], cmd)
	if _, err := f.WriteAt(b[:], 4); err != nil {
		return fmt.Errorf("write command register: %w", err)
	}
	return nil
}

var statusNames = map[uint32]string{
	hw.DiagDMAStatusIdle:     "idle",
	hw.DiagDMAStatusBusy:     "busy",
	hw.DiagDMAStatusDone:     "done",
	hw.DiagDMAStatusFault:    "fault (target outside guest memory)",
	hw.DiagDMAStatusBadLen:   "bad length",
	hw.DiagDMAStatusNoMaster: "bus mastering disabled",
}

func statusName(s uint32) string {
	if n, ok := statusNames[s]; ok {
		return n
	}
	return fmt.Sprintf("unknown status %d", s)
}

// dmaTest runs the device's diagnostic DMA into a locked, physically
// contiguous buffer and checks every byte against hw.DiagPattern.
func dmaTest(bdf string, length, seed uint32) error {
	if length > hw.DiagDMAMaxLen {
		return fmt.Errorf("length %d above the device limit %d", length, hw.DiagDMAMaxLen)
	}
	if err := enableBusMaster(bdf); err != nil {
		return err
	}
	buf, phys, err := allocDMABuffer(int(length))
	if err != nil {
		return err
	}
	defer unix.Munmap(buf)
	// Fill with the complement of the expected bytes so that a DMA that
	// writes nothing can not pass.
	for i := range buf[:length] {
		buf[i] = ^hw.DiagPattern(seed, uint32(i))
	}
	bar, err := openBAR(bdf, hw.RegBAR)
	if err != nil {
		return err
	}
	defer bar.close()
	if id, err := bar.read32(hw.RegID); err != nil || id != hw.Magic {
		return fmt.Errorf("%s is not an npfnic (ID register %#x)", bdf, id)
	}
	for _, w := range []struct{ off, v uint32 }{
		{hw.RegDiagDMAAddrLo, uint32(phys)},
		{hw.RegDiagDMAAddrHi, uint32(phys >> 32)},
		{hw.RegDiagDMALen, length},
		{hw.RegDiagDMASeed, seed},
		{hw.RegDiagDMACtrl, hw.DiagDMACtrlStart},
	} {
		if err := bar.write32(w.off, w.v); err != nil {
			return err
		}
	}
	status := uint32(hw.DiagDMAStatusBusy)
	for deadline := time.Now().Add(10 * time.Second); status == hw.DiagDMAStatusBusy; {
		if time.Now().After(deadline) {
			return errors.New("DMA did not finish within 10 s")
		}
		time.Sleep(time.Millisecond)
		if status, err = bar.read32(hw.RegDiagDMAStatus); err != nil {
			return err
		}
	}
	if status != hw.DiagDMAStatusDone {
		return fmt.Errorf("DMA to %#x failed: %s", phys, statusName(status))
	}
	bad, first := verifyPattern(buf[:length], seed)
	if bad != 0 {
		return fmt.Errorf("DMA to %#x: %d of %d bytes wrong, first at offset %d (got %#02x want %#02x)",
			phys, bad, length, first, buf[first], hw.DiagPattern(seed, uint32(first)))
	}
	fmt.Printf("dmatest OK: %d bytes at guest-physical %#x, seed %#x\n", length, phys, seed)
	return nil
}

// verifyPattern counts bytes that differ from the pattern and returns the
// first bad offset (-1 if none).
func verifyPattern(b []byte, seed uint32) (bad, first int) {
	first = -1
	for i, v := range b {
		if v != hw.DiagPattern(seed, uint32(i)) {
			if first < 0 {
				first = i
			}
			bad++
		}
	}
	return bad, first
}
