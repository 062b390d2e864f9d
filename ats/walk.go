package ats

import (
	"fmt"

	"github.com/npfnic/npfnic/vdevice/hw"
)

// FaultKind says why a translation could not be made.
type FaultKind uint8

// Fault kinds. The first two are resolved by a page request; the others
// make the operation fail.
const (
	FaultNotPresent   FaultKind = iota + 1 // an entry on the walk has P clear: page request
	FaultWriteProtect                      // write to a page without W at every level: page request with write access
	FaultPASID                             // PASID out of range, its entry not valid, PASID disabled, or no PASID table
	FaultAddress                           // VA beyond 48 bits, address wrap, or a bad length
	FaultTable                             // the PASID table, a page table or the page lies outside guest memory
	FaultReserved                          // reserved bits set in a present entry
	FaultDisabled                          // an access that must translate (AccessTranslated) with ATS disabled
	numFaultKinds
)

func (k FaultKind) String() string {
	switch k {
	case FaultNotPresent:
		return "not present"
	case FaultWriteProtect:
		return "write to read-only page"
	case FaultPASID:
		return "PASID not valid"
	case FaultAddress:
		return "address out of range"
	case FaultTable:
		return "translation structure outside guest memory"
	case FaultReserved:
		return "reserved bits set"
	case FaultDisabled:
		return "translation disabled"
	}
	return "unknown"
}

// Resolvable reports whether a page request can resolve the fault.
func (k FaultKind) Resolvable() bool { return k == FaultNotPresent || k == FaultWriteProtect }

// Fault is a translation that could not be made.
type Fault struct {
	Kind  FaultKind
	PASID uint32
	VA    uint64 // the first faulting byte
	Write bool
	// Pages lists, for a resolvable fault, every page of the access that
	// needs a page request (4 KiB aligned VAs, ascending; the first is VA's
	// page): one page request group resolves the whole access.
	Pages []uint64
	// Level is where the walk stopped: 4..1 for page-table levels, 0 for
	// the PASID entry, -1 for the page itself (FaultTable on the leaf's
	// target) or when no entry was read.
	Level int
	Entry uint64 // IOVA of the entry that stopped the walk (Level >= 0)
	Err   error  // the guestmem error for FaultTable
}

func (f *Fault) Error() string {
	op := "read"
	if f.Write {
		op = "write"
	}
	s := fmt.Sprintf("ats: %s of pasid %d va %#x: %s", op, f.PASID, f.VA, f.Kind)
	switch {
	case f.Level > 0:
		s += fmt.Sprintf(" (level %d entry at iova %#x)", f.Level, f.Entry)
	case f.Level == 0:
		s += fmt.Sprintf(" (PASID entry at iova %#x)", f.Entry)
	case f.Kind == FaultTable:
		s += fmt.Sprintf(" (page at iova %#x)", f.Entry)
	}
	if f.Err != nil {
		s += ": " + f.Err.Error()
	}
	return s
}

func (f *Fault) Unwrap() error { return f.Err }

// NeedsPageRequest reports whether a page request for f.Pages can resolve
// the fault; otherwise the operation must complete with an error.
func (f *Fault) NeedsPageRequest() bool { return f.Kind.Resolvable() }

// walkResult is a translation read from the page tables.
type walkResult struct {
	frame uint64 // IOVA of the page
	write bool   // W at every level
}

// walk translates the page at va for pasid through table t. It reads guest
// memory only through guestmem (through the table's ATS instance when it
// has one), so any table address is safe: one outside guest memory is
// FaultTable.
func (c *Context) walk(t pasidTable, pasid uint32, va uint64) (walkResult, *Fault) {
	c.walks.Add(1)
	if !t.valid || uint64(pasid) >= t.entries {
		return walkResult{}, &Fault{Kind: FaultPASID, PASID: pasid, VA: va, Level: -1}
	}
	if t.dma != nil {
		if !t.dma.Begin() {
			// ATS_CTRL was reset or disabled since the table was latched:
			// the driver may already have freed it.
			return walkResult{}, &Fault{Kind: FaultPASID, PASID: pasid, VA: va, Level: -1}
		}
		defer t.dma.End()
	}
	ea := t.base + uint64(pasid)*hw.PASIDEntrySize + uint64(hw.PASIDEntryRoot.Offset)
	root, err := t.readU64(c, ea)
	if err != nil {
		return walkResult{}, &Fault{Kind: FaultTable, PASID: pasid, VA: va, Level: 0, Entry: ea, Err: err}
	}
	if root&hw.PASIDEntryValid == 0 {
		return walkResult{}, &Fault{Kind: FaultPASID, PASID: pasid, VA: va, Level: 0, Entry: ea}
	}
	if root&hw.PTEReservedMask != 0 {
		return walkResult{}, &Fault{Kind: FaultReserved, PASID: pasid, VA: va, Level: 0, Entry: ea}
	}
	table := root & hw.PTEAddrMask
	write := true
	for level := hw.XlatLevels; level >= 1; level-- {
		shift := pageShift + uint(level-1)*hw.XlatLevelBits
		idx := va >> shift & (hw.XlatPTEEntries - 1)
		ea = table + idx*hw.PTESize
		pte, err := t.readU64(c, ea)
		if err != nil {
			return walkResult{}, &Fault{Kind: FaultTable, PASID: pasid, VA: va, Level: level, Entry: ea, Err: err}
		}
		// Like x86, a non-present entry's other bits belong to software.
		if pte&hw.PTEPresent == 0 {
			return walkResult{}, &Fault{Kind: FaultNotPresent, PASID: pasid, VA: va, Level: level, Entry: ea}
		}
		if pte&hw.PTEReservedMask != 0 {
			return walkResult{}, &Fault{Kind: FaultReserved, PASID: pasid, VA: va, Level: level, Entry: ea}
		}
		write = write && pte&hw.PTEWrite != 0
		table = pte & hw.PTEAddrMask
	}
	// The leaf must name guest memory: probe one byte, so a bad leaf is a
	// defined translation fault rather than a failed copy later (and is
	// never cached).
	var probe [1]byte
	if err := t.read(c, table, probe[:]); err != nil {
		return walkResult{}, &Fault{Kind: FaultTable, PASID: pasid, VA: va, Level: -1, Entry: table, Err: err}
	}
	return walkResult{frame: table, write: write}, nil
}
