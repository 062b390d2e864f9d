package hw

// Translation interface: the registers and guest-memory formats of address
// translation (ATS with a device-side ATC, package ats) and of the page
// request interface (PRI, package pri). Everything the driver and the
// device share for network page faults is defined here once; the C header
// carries it (NPFNIC_ATS_*, NPFNIC_PRI_*, struct npfnic_pasid_entry, ...).
// TranslationDoc, FaultHandshakeDoc and InvalidationDoc say how the driver
// uses them.

// TranslationDoc describes the address spaces, the I/O page tables, the
// PASID table and the teardown of translation.
const TranslationDoc = `Address spaces. "IOVA" is the address space the device's DMA uses without
translation: what QEMU mapped for the device (guest physical addresses on
q35). "VA" is an address inside one PASID's I/O address space, translated by
the page tables below when the PCIe ATS capability is enabled; with ATS
disabled, descriptors carry IOVAs and nothing is translated. Every structure
of translation and page requests (the PASID table, the page tables, the
three queues, the status blocks and invalidation completion words) is
addressed by IOVA: the translation machinery itself never takes a page
fault.

I/O page tables (one per PASID), x86-64 style: 4 levels of 512 64-bit
entries, each table one 4 KiB page (4 KiB aligned), 48-bit VAs, 4 KiB pages
only. VA bits 47:39 index level 4 (the root), 38:30 level 3, 29:21 level 2,
20:12 level 1 (the leaf table); bits 11:0 are the offset in the page. VA
bits 63:48 must be zero. An entry is:

	bit 0      P: present; when clear the device ignores every other bit
	bit 1      W: writable; a page is writable only if W is set at all four levels
	bits 11:2  ignored (free for the driver)
	bits 51:12 IOVA of the next table, or of the page at level 1
	bits 63:52 reserved: must be zero in a present entry

The device only reads page tables (it keeps no accessed or dirty bits). A
driver that clears P or W, or changes an address, must invalidate the VA
range through the invalidation queue and wait for the completion before it
reuses the old page; a driver that sets P or W needs no invalidation (the
device does not cache non-present translations, and re-walks before
reporting a write fault on a cached read-only translation).

PASID table: PASID_TABLE_SIZE entries of struct npfnic_pasid_entry, 4 KiB
aligned, indexed by PASID. Without the PCIe PASID capability enabled only
PASID 0 is used. An entry's root field has V (bit 0) and, in bits 51:12, the
IOVA of the PASID's level-4 table; bits 63:52 are reserved (zero). Changing
a valid entry requires an NPFNIC_INV_OP_PASID invalidation.

The ATS and PRI registers (base, size, vector) take effect when the block's
CTRL enable is written 1: they are latched then. Doorbells are posted
writes, so the driver never needs to read a register on the fault path: the
device reports its indexes and errors in the block's status block (struct
npfnic_ats_status, struct npfnic_pri_status: 64 bytes, 64-byte aligned,
zeroed by the driver before it enables the block).

Teardown (interface 2.3, see Quiesce). ATS_CTRL and PRI_CTRL read BUSY (bit
31) from ENABLE until, after a write of 0 or RESET, the block has finished
the unit it had started: for ATS a page-table walk, an invalidation
descriptor with its head update, or a WAIT completion and its interrupt; for
PRI a page request group's entries with prq_tail and the interrupt, or one
page response with prspq_head. From the read that shows BUSY clear on, the
device reads no PASID or page table, writes no status block, completion word
or queue entry and raises no translation interrupt until ENABLE is written
again, so the driver may free them. A function reset also takes the ATS,
PASID and PRI Enable bits again from config space (off after DEVICE_RESET).`

// FaultHandshakeDoc is the page request and page response protocol.
const FaultHandshakeDoc = `Setup. The driver allocates the page request queue (PRQ: PRQ_SIZE entries of
struct npfnic_page_req, 32-byte aligned), the page response queue (PRSPQ:
PRSPQ_SIZE entries of struct npfnic_page_resp, 16-byte aligned; both sizes a
power of two, NPFNIC_XLAT_QUEUE_SIZE_MIN to NPFNIC_XLAT_QUEUE_SIZE_MAX) and
the PRI status block, writes their addresses, sizes and PRQ_VECTOR, enables
PRI in config space (Enable, and the Outstanding Page Request Allocation)
and writes NPFNIC_PRI_CTRL_ENABLE to PRI_CTRL.

Request. A translation that a page request can resolve (page not present,
write to a read-only page) becomes a page request group: one PRQ entry per
page, each with the page's VA, the PASID (with NPFNIC_PRQ_PASID_VALID), the
group's index prgi, the access (NPFNIC_PRQ_READ, NPFNIC_PRQ_WRITE) and
NPFNIC_PRQ_LAST on the group's last entry, and the NIC context the driver
may batch by: the queue, the descriptor's free-running index, the kind
(NPFNIC_FAULT_KIND_*) and the device's clock when it detected the fault. The
device writes the entries, then prq_tail in the PRI status block, then
raises PRQ_VECTOR. A group of n pages takes n credits of the Outstanding
Page Request Allocation and one of NPFNIC_PRGI_MAX group indexes until its
response arrives; a TX fault that finds none waits for them, an RX fault
never waits: when PRI has no room, no request is sent for that frame.

Response. The driver reads entries from its head up to prq_tail, returns the
slots with PRQ_HEAD (the free-running count of entries consumed), makes the
pages resident and maps them in the I/O page tables, and then answers each
group once with a struct npfnic_page_resp (pasid, prgi, code) in the PRSPQ,
moving PRSPQ_TAIL. The device consumes responses in order (prspq_head in the
status block). The code says what the device does:

- NPFNIC_PRSP_SUCCESS: the pages are resident; the device walks the page
  tables again and retries (a stalled TX frame resumes).
- NPFNIC_PRSP_INVALID_REQUEST: the operation completes with an error (a TX
  frame is dropped and counted in tx_fault_errors, an RX descriptor
  completes with NPFNIC_RXD_ERROR).
- NPFNIC_PRSP_RESPONSE_FAILURE: catastrophic. PRI sets Response Failure in
  its capability, abandons every outstanding group and stops (Stopped) until
  software disables and re-enables it.

A response that matches no outstanding group is counted in the status
block's unexpected field, sets UPRGI in the PRI capability and is otherwise
ignored. A PRQ_HEAD that moves backwards or past the entries produced stops
the queue with NPFNIC_PRIERR_BAD_HEAD, a PRSPQ_TAIL that moves backwards or
more than SIZE ahead with NPFNIC_PRIERR_BAD_TAIL; error and error_info are
in the status block and PRI_ERROR.`

// InvalidationDoc is the invalidation protocol with its completion.
const InvalidationDoc = `Setup. The driver allocates the ATS status block, the PASID table and the
invalidation queue (INVQ_SIZE entries of struct npfnic_inv_desc, 32-byte
aligned, a power of two between NPFNIC_XLAT_QUEUE_SIZE_MIN and
NPFNIC_XLAT_QUEUE_SIZE_MAX), writes their addresses and sizes and
INVQ_VECTOR, enables ATS (and PASID) in config space and writes
NPFNIC_ATS_CTRL_ENABLE to ATS_CTRL.

Posting. The driver writes descriptors and moves INVQ_TAIL; the device runs
them in order and publishes invq_head in the ATS status block:

- NPFNIC_INV_OP_RANGE drops the translations of pasid for the pages addr (4
  KiB aligned) to addr + pages * 4096;
- NPFNIC_INV_OP_PASID drops every translation of pasid (also needed after
  changing its PASID table entry);
- NPFNIC_INV_OP_ALL drops every translation;
- NPFNIC_INV_OP_WAIT writes data to the 32-bit completion word at IOVA addr
  (4-byte aligned) once every descriptor before it has completed, and with
  NPFNIC_INV_FLAG_IRQ then raises INVQ_VECTOR.

Completion. An invalidation completes only when no DMA uses a translation it
dropped: the device removes the translations first, so no new access can
find them, and then waits for the accesses already holding them. So once the
driver sees a WAIT's completion word, the device is not using, and will
never use, any translation dropped before it, and the driver may reuse the
old pages. The guarantee is structural, not timed.

Errors. An unknown op, a misaligned address, an empty or overflowing range
halts the queue with NPFNIC_ATSERR_BAD_INV_DESC (error_info: the
descriptor's index); a completion word that cannot be written halts it with
NPFNIC_ATSERR_BAD_WAIT_ADDR; an INVQ_TAIL that moves backwards or more than
SIZE ahead sets NPFNIC_ATSERR_BAD_TAIL. The error is in the status block and
ATS_ERROR; a halted queue runs again after ATS_CTRL is disabled and enabled.`

// Translation page geometry.
const (
	XlatPageShift  = 12
	XlatPageSize   = 1 << XlatPageShift
	XlatLevels     = 4
	XlatLevelBits  = 9
	XlatVABits     = 48
	XlatPTEEntries = 1 << XlatLevelBits
	PTESize        = 8

	PTEPresent      = 1 << 0
	PTEWrite        = 1 << 1
	PTEAddrMask     = 0x000f_ffff_ffff_f000 // bits 51:12
	PTEReservedMask = 0xfff0_0000_0000_0000 // bits 63:52

	PASIDEntrySize  = 16
	PASIDEntryValid = 1 << 0
	// PASIDTableMax is the largest PASID table (20-bit PASIDs).
	PASIDTableMax = 1 << 20
)

// Translation registers in BAR0 (32 bits each). The ATS block is
// 0x0800-0x083f (package ats), the PRI block 0x0840-0x087f (package pri).
// Base and size registers take effect when the block's CTRL.ENABLE is
// written 1 (they are latched then); doorbells are posted writes, so the
// driver never needs to read a register on the fault path: the device
// reports its indexes and errors in the block's status block.
const (
	XlatRegBase = 0x0800
	XlatRegEnd  = 0x0880

	RegATSCtrl        = 0x0800 // RW: ATSCtrlEnable; ATSCtrlReset (self-clearing)
	RegATSStatusLo    = 0x0804 // RW: ATS status block IOVA, bits 31:0 (64-byte aligned)
	RegATSStatusHi    = 0x0808 // RW: bits 63:32
	RegPASIDTableLo   = 0x080c // RW: PASID table IOVA, bits 31:0 (4 KiB aligned)
	RegPASIDTableHi   = 0x0810 // RW: bits 63:32
	RegPASIDTableSize = 0x0814 // RW: PASID table entries, power of two, 1..PASIDTableMax
	RegInvqBaseLo     = 0x0818 // RW: invalidation queue IOVA, bits 31:0 (32-byte aligned)
	RegInvqBaseHi     = 0x081c // RW: bits 63:32
	RegInvqSize       = 0x0820 // RW: invalidation queue entries, power of two
	RegInvqTail       = 0x0824 // WO: doorbell, free-running count of descriptors posted
	RegInvqVector     = 0x0828 // RW: MSI-X vector of NPFNIC_INV_WAIT_IRQ
	RegATSError       = 0x082c // RO: NPFNIC_ATSERR_*, also in the status block
	RegATCHits        = 0x0830 // RO: ATC lookups that hit (pages, low 32 bits, interface 2.2)
	RegATCMisses      = 0x0834 // RO: ATC lookups that missed (pages, low 32 bits)
	RegATCCapacity    = 0x0838 // RW: ATC entries (4 KiB pages), 1..ATCCapacityMax; 0 restores the device default
	ATSRegEnd         = 0x0840 // end of the ATS register block
	RegPRICtrl        = 0x0840 // RW: PRICtrlEnable; PRICtrlReset (self-clearing)
	RegPRIStatusLo    = 0x0844 // RW: PRI status block IOVA, bits 31:0 (64-byte aligned)
	RegPRIStatusHi    = 0x0848 // RW: bits 63:32
	RegPRQBaseLo      = 0x084c // RW: page request queue IOVA, bits 31:0 (32-byte aligned)
	RegPRQBaseHi      = 0x0850 // RW: bits 63:32
	RegPRQSize        = 0x0854 // RW: page request queue entries, power of two
	RegPRQHead        = 0x0858 // WO: consumer doorbell, free-running count of requests consumed
	RegPRQVector      = 0x085c // RW: MSI-X vector raised after page requests are queued
	RegPRSPQBaseLo    = 0x0860 // RW: page response queue IOVA, bits 31:0 (16-byte aligned)
	RegPRSPQBaseHi    = 0x0864 // RW: bits 63:32
	RegPRSPQSize      = 0x0868 // RW: page response queue entries, power of two
	RegPRSPQTail      = 0x086c // WO: doorbell, free-running count of responses posted
	RegPRIError       = 0x0870 // RO: NPFNIC_PRIERR_*, also in the status block
	PRIRegEnd         = 0x0880 // end of the PRI register block
)

// Translation register values.
const (
	XlatQueueSizeMin    = 8
	ATCCapacityMax      = 1 << 16
	XlatQueueSizeMax    = 4096
	XlatStatusAlign     = 64
	PRQVectorDefault    = 5 // reset value of PRQ_VECTOR
	InvqVectorDefault   = 6 // reset value of INVQ_VECTOR
	ATSCtrlEnable       = 1 << 0
	ATSCtrlReset        = 1 << 1
	ATSCtrlBusy         = 1 << 31 // read only: ATS may still DMA (status block, invalidation completions, walks; see Quiesce)
	PRICtrlEnable       = 1 << 0
	PRICtrlReset        = 1 << 1
	PRICtrlBusy         = 1 << 31 // read only: PRI may still DMA (page request queue, response reads, status block; see Quiesce)
	ATSErrBadStatusAddr = 1       // status block outside guest memory or misaligned
	ATSErrBadPASIDTable = 2       // PASID table misaligned, bad size, or outside guest memory
	ATSErrBadInvq       = 3       // invalidation queue base/size invalid or outside guest memory
	ATSErrBadInvDesc    = 4       // unknown op, bad alignment, empty or overflowing range; queue halted
	ATSErrBadWaitAddr   = 5       // a completion word could not be written; queue halted
	ATSErrBadTail       = 6       // INVQ_TAIL moved backwards or more than SIZE ahead
	PRIErrBadStatusAddr = 1       // status block outside guest memory or misaligned
	PRIErrBadPRQ        = 2       // page request queue base/size invalid or outside guest memory
	PRIErrBadPRSPQ      = 3       // page response queue base/size invalid or outside guest memory
	PRIErrBadHead       = 4       // PRQ_HEAD moved backwards or past the produced entries
	PRIErrBadTail       = 5       // PRSPQ_TAIL moved backwards or more than SIZE ahead
)

// Invalidation descriptor ops and flags (struct npfnic_inv_desc).
const (
	InvOpRange = 1 // drop translations of pasid for pages [addr, addr + pages*4096)
	InvOpPASID = 2 // drop every translation of pasid (also after changing its PASID entry)
	InvOpAll   = 3 // drop every translation
	InvOpWait  = 4 // completion marker: write data to addr once everything before it completed

	InvFlagIRQ = 1 << 0 // InvOpWait: raise INVQ_VECTOR after writing the completion
)

// Page request flags, fault kinds and page response codes (the codes are
// the PCIe PRG Response Codes).
const (
	PRQRead       = 1 << 0 // read access requested
	PRQWrite      = 1 << 1 // write access requested
	PRQLast       = 1 << 2 // last request of its page request group
	PRQPASIDValid = 1 << 3 // pasid is meaningful

	FaultKindRxBuf  = 1 // RX buffer: the frame went to the backup ring or was dropped
	FaultKindTxBuf  = 2 // TX buffer: the queue is stalled until the response
	FaultKindRxDesc = 3 // the RX descriptor ring itself
	FaultKindTxDesc = 4 // the TX descriptor ring itself
	FaultKindRCRecv = 5 // RC receive WQE buffer: an RNR NAK was sent
	FaultKindRCSend = 6 // RC send / RDMA source or target buffer

	PRSPSuccess         = 0x0 // pages resident: the device retries
	PRSPInvalidRequest  = 0x1 // the operation completes with an error
	PRSPResponseFailure = 0xf // catastrophic: PRI stops (Response Failure, Stopped)
	PRSPPASIDValid      = 1 << 0

	// PRGIMax is the number of page request group indexes (9 bits).
	PRGIMax = 512
)

// Structure sizes in bytes.
const (
	InvDescSize   = 32
	PageReqSize   = 32
	PageRespSize  = 16
	ATSStatusSize = 64
	PRIStatusSize = 64
)

// PASID table entry fields.
var PASIDEntryRoot = le64("root", 0, "NPFNIC_PASID_ENTRY_VALID | IOVA of the level-4 table")

// PASIDEntry is struct npfnic_pasid_entry.
var PASIDEntry = Layout{"pasid_entry", PASIDEntrySize,
	"PASID table entry (driver-owned, read by the device).",
	[]Field{PASIDEntryRoot.Field, {Name: "rsvd", Offset: 8, Size: 8, Doc: "reserved, zero"}}, WrittenByDriver}

// Invalidation descriptor fields (driver to device).
var (
	InvDescOp    = le16("op", 0, "NPFNIC_INV_OP_*")
	InvDescFlags = le16("flags", 2, "NPFNIC_INV_FLAG_*")
	InvDescPASID = le32("pasid", 4, "RANGE, PASID: the address space")
	InvDescAddr  = le64("addr", 8, "RANGE: first VA (4 KiB aligned); WAIT: IOVA of the 32-bit completion word (4-byte aligned)")
	InvDescPages = le64("pages", 16, "RANGE: number of 4 KiB pages, at least 1")
	InvDescData  = le32("data", 24, "WAIT: value the device writes to the completion word")
	invDescRsvd  = le32("rsvd", 28, "reserved, zero")
)

// InvDesc is struct npfnic_inv_desc.
var InvDesc = Layout{"inv_desc", InvDescSize,
	"Invalidation queue entry. Entries run in order; a WAIT entry completes only after every translation dropped before it is no longer used by any DMA.",
	[]Field{InvDescOp.Field, InvDescFlags.Field, InvDescPASID.Field, InvDescAddr.Field, InvDescPages.Field, InvDescData.Field, invDescRsvd.Field}, WrittenByDriver}

// Page request fields (device to driver).
var (
	PageReqAddr  = le64("addr", 0, "VA of the page (4 KiB aligned)")
	PageReqPASID = le32("pasid", 8, "valid with NPFNIC_PRQ_PASID_VALID")
	PageReqPRGI  = le16("prgi", 12, "page request group index, 0..NPFNIC_PRGI_MAX-1")
	PageReqFlags = le16("flags", 14, "NPFNIC_PRQ_READ/WRITE/LAST/PASID_VALID")
	PageReqQueue = le16("queue", 16, "NIC queue (queue pair or QP) that faulted")
	PageReqKind  = le16("kind", 18, "NPFNIC_FAULT_KIND_*")
	PageReqDesc  = le32("desc", 20, "free-running index of the faulting descriptor in that queue")
	PageReqStamp = le64("stamp", 24, "device clock (ns) when the fault was detected")
)

// PageReq is struct npfnic_page_req.
var PageReq = Layout{"page_req", PageReqSize,
	"Page request queue entry: one page of a page request group; the group's last entry has NPFNIC_PRQ_LAST.",
	[]Field{PageReqAddr.Field, PageReqPASID.Field, PageReqPRGI.Field, PageReqFlags.Field, PageReqQueue.Field, PageReqKind.Field, PageReqDesc.Field, PageReqStamp.Field}, WrittenByDevice}

// Page response fields (driver to device).
var (
	PageRespPASID = le32("pasid", 0, "the group's PASID (with NPFNIC_PRSP_PASID_VALID)")
	PageRespPRGI  = le16("prgi", 4, "page request group index being answered")
	PageRespCode  = le16("code", 6, "NPFNIC_PRSP_SUCCESS, _INVALID_REQUEST or _RESPONSE_FAILURE")
	PageRespFlags = le32("flags", 8, "NPFNIC_PRSP_PASID_VALID")
	pageRespRsvd  = le32("rsvd", 12, "reserved, zero")
)

// PageResp is struct npfnic_page_resp.
var PageResp = Layout{"page_resp", PageRespSize,
	"Page response queue entry: answers a whole page request group.",
	[]Field{PageRespPASID.Field, PageRespPRGI.Field, PageRespCode.Field, PageRespFlags.Field, pageRespRsvd.Field}, WrittenByDriver}

// ATS status block fields (device to driver).
var (
	ATSStatusInvqHead  = le32("invq_head", 0, "free-running count of invalidation descriptors consumed")
	ATSStatusError     = le32("error", 4, "NPFNIC_ATSERR_*, 0 none")
	ATSStatusErrorInfo = le32("error_info", 8, "index of the offending descriptor, or the bad tail value")
)

// ATSStatus is struct npfnic_ats_status.
var ATSStatus = Layout{"ats_status", ATSStatusSize,
	"ATS status block (device to driver), at NPFNIC_REG_ATS_STATUS.",
	[]Field{ATSStatusInvqHead.Field, ATSStatusError.Field, ATSStatusErrorInfo.Field, rsvd32(12, 13)}, WrittenByDevice}

// PRI status block fields (device to driver).
var (
	PRIStatusPRQTail    = le32("prq_tail", 0, "producer index: free-running count of page requests written")
	PRIStatusPRSPQHead  = le32("prspq_head", 4, "free-running count of page responses consumed")
	PRIStatusError      = le32("error", 8, "NPFNIC_PRIERR_*, 0 none")
	PRIStatusErrorInfo  = le32("error_info", 12, "the bad index value")
	PRIStatusUnexpected = le32("unexpected", 16, "responses that matched no outstanding group")
)

// PRIStatus is struct npfnic_pri_status.
var PRIStatus = Layout{"pri_status", PRIStatusSize,
	"PRI status block (device to driver), at NPFNIC_REG_PRI_STATUS.",
	[]Field{PRIStatusPRQTail.Field, PRIStatusPRSPQHead.Field, PRIStatusError.Field, PRIStatusErrorInfo.Field,
		PRIStatusUnexpected.Field, rsvd32(20, 11)}, WrittenByDevice}

// TranslationLayouts lists the structures of the translation interface.
var TranslationLayouts = []*Layout{&PASIDEntry, &InvDesc, &PageReq, &PageResp, &ATSStatus, &PRIStatus}

// TranslationRegisters lists the ATS and PRI registers in offset order.
var TranslationRegisters = []Register{
	command("ATS_CTRL", RegATSCtrl, BlockATS, AccessRW, "NPFNIC_ATS_CTRL_ENABLE latches the ATS registers; write NPFNIC_ATS_CTRL_RESET to reset (reads back 0)"),
	storage("ATS_STATUS_LO", RegATSStatusLo, BlockATS, 0, "ATS status block IOVA, bits 31:0 (64-byte aligned)"),
	storage("ATS_STATUS_HI", RegATSStatusHi, BlockATS, 0, "ATS status block IOVA, bits 63:32"),
	storage("PASID_TABLE_LO", RegPASIDTableLo, BlockATS, 0, "PASID table IOVA, bits 31:0 (4 KiB aligned)"),
	storage("PASID_TABLE_HI", RegPASIDTableHi, BlockATS, 0, "PASID table IOVA, bits 63:32"),
	storage("PASID_TABLE_SIZE", RegPASIDTableSize, BlockATS, 0, "PASID table entries: power of two, 1..NPFNIC_PASID_TABLE_MAX"),
	storage("INVQ_BASE_LO", RegInvqBaseLo, BlockATS, 0, "invalidation queue IOVA, bits 31:0 (32-byte aligned)"),
	storage("INVQ_BASE_HI", RegInvqBaseHi, BlockATS, 0, "invalidation queue IOVA, bits 63:32"),
	storage("INVQ_SIZE", RegInvqSize, BlockATS, 0, "invalidation queue entries: power of two, NPFNIC_XLAT_QUEUE_SIZE_MIN..MAX"),
	doorbell("INVQ_TAIL", RegInvqTail, BlockATS, "invalidation doorbell: free-running count of descriptors posted"),
	storage("INVQ_VECTOR", RegInvqVector, BlockATS, InvqVectorDefault, "MSI-X vector for NPFNIC_INV_FLAG_IRQ"),
	status("ATS_ERROR", RegATSError, BlockATS, 0, "NPFNIC_ATSERR_*"),
	status("ATC_HITS", RegATCHits, BlockATS, 0, "ATC lookups that hit, in pages (low 32 bits)"),
	status("ATC_MISSES", RegATCMisses, BlockATS, 0, "ATC lookups that missed, in pages (low 32 bits)"),
	storage("ATC_CAPACITY", RegATCCapacity, BlockATS, 0, "ATC entries, 1..NPFNIC_ATC_CAPACITY_MAX; write 0 for the device default; reads the capacity in force").resetVaries("the device's default (npfnic serve --atc-entries)"),
	command("PRI_CTRL", RegPRICtrl, BlockPRI, AccessRW, "NPFNIC_PRI_CTRL_ENABLE latches the PRI registers; write NPFNIC_PRI_CTRL_RESET to reset (reads back 0)"),
	storage("PRI_STATUS_LO", RegPRIStatusLo, BlockPRI, 0, "PRI status block IOVA, bits 31:0 (64-byte aligned)"),
	storage("PRI_STATUS_HI", RegPRIStatusHi, BlockPRI, 0, "PRI status block IOVA, bits 63:32"),
	storage("PRQ_BASE_LO", RegPRQBaseLo, BlockPRI, 0, "page request queue IOVA, bits 31:0 (32-byte aligned)"),
	storage("PRQ_BASE_HI", RegPRQBaseHi, BlockPRI, 0, "page request queue IOVA, bits 63:32"),
	storage("PRQ_SIZE", RegPRQSize, BlockPRI, 0, "page request queue entries: power of two, NPFNIC_XLAT_QUEUE_SIZE_MIN..MAX"),
	doorbell("PRQ_HEAD", RegPRQHead, BlockPRI, "page request consumer doorbell: free-running count of entries consumed"),
	storage("PRQ_VECTOR", RegPRQVector, BlockPRI, PRQVectorDefault, "MSI-X vector raised when page requests are queued"),
	storage("PRSPQ_BASE_LO", RegPRSPQBaseLo, BlockPRI, 0, "page response queue IOVA, bits 31:0 (16-byte aligned)"),
	storage("PRSPQ_BASE_HI", RegPRSPQBaseHi, BlockPRI, 0, "page response queue IOVA, bits 63:32"),
	storage("PRSPQ_SIZE", RegPRSPQSize, BlockPRI, 0, "page response queue entries: power of two, NPFNIC_XLAT_QUEUE_SIZE_MIN..MAX"),
	doorbell("PRSPQ_TAIL", RegPRSPQTail, BlockPRI, "page response doorbell: free-running count of responses posted"),
	status("PRI_ERROR", RegPRIError, BlockPRI, 0, "NPFNIC_PRIERR_*"),
}

// TranslationValues lists the constants of the translation interface
// exported to the C header.
var TranslationValues = []Value{
	{"XLAT_PAGE_SHIFT", XlatPageShift, "translation granule: 4 KiB pages"},
	{"XLAT_LEVELS", XlatLevels, "page table levels"},
	{"XLAT_LEVEL_BITS", XlatLevelBits, "VA bits per level (512 entries per table)"},
	{"XLAT_VA_BITS", XlatVABits, "VA bits 63:48 must be zero"},
	{"PTE_PRESENT", PTEPresent, "page table entry: present"},
	{"PTE_WRITE", PTEWrite, "page table entry: writable (needed at every level)"},
	{"PTE_ADDR_MASK", PTEAddrMask, "page table entry: IOVA of the next table or page"},
	{"PTE_RESERVED_MASK", PTEReservedMask, "page table entry: must be zero when present"},
	{"PASID_ENTRY_VALID", PASIDEntryValid, "npfnic_pasid_entry.root: valid"},
	{"PASID_TABLE_MAX", PASIDTableMax, "largest PASID table"},
	{"ATC_CAPACITY_MAX", ATCCapacityMax, "largest NPFNIC_REG_ATC_CAPACITY"},
	{"XLAT_QUEUE_SIZE_MIN", XlatQueueSizeMin, "smallest invalidation / page request / page response queue"},
	{"XLAT_QUEUE_SIZE_MAX", XlatQueueSizeMax, "largest invalidation / page request / page response queue"},
	{"XLAT_STATUS_ALIGN", XlatStatusAlign, "alignment of the ATS and PRI status blocks"},
	{"PRQ_VECTOR_DEFAULT", PRQVectorDefault, "reset value of NPFNIC_REG_PRQ_VECTOR"},
	{"INVQ_VECTOR_DEFAULT", InvqVectorDefault, "reset value of NPFNIC_REG_INVQ_VECTOR"},
	{"ATS_CTRL_ENABLE", ATSCtrlEnable, "NPFNIC_REG_ATS_CTRL: PASID table and invalidation queue on"},
	{"ATS_CTRL_RESET", ATSCtrlReset, "NPFNIC_REG_ATS_CTRL: disable, drop every translation, clear errors"},
	{"ATS_CTRL_BUSY", ATSCtrlBusy, "NPFNIC_REG_ATS_CTRL (read only): ATS may still DMA"},
	{"PRI_CTRL_BUSY", PRICtrlBusy, "NPFNIC_REG_PRI_CTRL (read only): PRI may still DMA"},
	{"PRI_CTRL_ENABLE", PRICtrlEnable, "NPFNIC_REG_PRI_CTRL: page request and response queues on"},
	{"PRI_CTRL_RESET", PRICtrlReset, "NPFNIC_REG_PRI_CTRL: disable the queues, clear errors"},
	{"ATSERR_BAD_STATUS_ADDR", ATSErrBadStatusAddr, "ATS status block outside guest memory or misaligned"},
	{"ATSERR_BAD_PASID_TABLE", ATSErrBadPASIDTable, "PASID table misaligned, bad size or outside guest memory"},
	{"ATSERR_BAD_INVQ", ATSErrBadInvq, "invalidation queue base/size invalid or outside guest memory"},
	{"ATSERR_BAD_INV_DESC", ATSErrBadInvDesc, "bad invalidation descriptor; the queue halted"},
	{"ATSERR_BAD_WAIT_ADDR", ATSErrBadWaitAddr, "completion word not writable; the queue halted"},
	{"ATSERR_BAD_TAIL", ATSErrBadTail, "INVQ_TAIL moved backwards or more than SIZE ahead"},
	{"PRIERR_BAD_STATUS_ADDR", PRIErrBadStatusAddr, "PRI status block outside guest memory or misaligned"},
	{"PRIERR_BAD_PRQ", PRIErrBadPRQ, "page request queue base/size invalid or outside guest memory"},
	{"PRIERR_BAD_PRSPQ", PRIErrBadPRSPQ, "page response queue base/size invalid or outside guest memory"},
	{"PRIERR_BAD_HEAD", PRIErrBadHead, "PRQ_HEAD moved backwards or past the produced entries"},
	{"PRIERR_BAD_TAIL", PRIErrBadTail, "PRSPQ_TAIL moved backwards or more than SIZE ahead"},
	{"INV_OP_RANGE", InvOpRange, "npfnic_inv_desc.op: drop pages [addr, addr + pages * 4096) of pasid"},
	{"INV_OP_PASID", InvOpPASID, "npfnic_inv_desc.op: drop every translation of pasid"},
	{"INV_OP_ALL", InvOpAll, "npfnic_inv_desc.op: drop every translation"},
	{"INV_OP_WAIT", InvOpWait, "npfnic_inv_desc.op: write data to addr once all earlier entries completed"},
	{"INV_FLAG_IRQ", InvFlagIRQ, "npfnic_inv_desc.flags (WAIT): raise NPFNIC_REG_INVQ_VECTOR"},
	{"PRQ_READ", PRQRead, "npfnic_page_req.flags: read access"},
	{"PRQ_WRITE", PRQWrite, "npfnic_page_req.flags: write access"},
	{"PRQ_LAST", PRQLast, "npfnic_page_req.flags: last request of the group"},
	{"PRQ_PASID_VALID", PRQPASIDValid, "npfnic_page_req.flags: pasid valid"},
	{"FAULT_KIND_RX_BUF", FaultKindRxBuf, "RX buffer (frame steered to the backup ring or dropped)"},
	{"FAULT_KIND_TX_BUF", FaultKindTxBuf, "TX buffer (queue stalled)"},
	{"FAULT_KIND_RX_DESC", FaultKindRxDesc, "RX descriptor ring"},
	{"FAULT_KIND_TX_DESC", FaultKindTxDesc, "TX descriptor ring"},
	{"FAULT_KIND_RC_RECV", FaultKindRCRecv, "RC receive WQE buffer (RNR NAK sent)"},
	{"FAULT_KIND_RC_SEND", FaultKindRCSend, "RC send or RDMA buffer"},
	{"PRSP_SUCCESS", PRSPSuccess, "npfnic_page_resp.code: pages resident, retry"},
	{"PRSP_INVALID_REQUEST", PRSPInvalidRequest, "npfnic_page_resp.code: fail the operation"},
	{"PRSP_RESPONSE_FAILURE", PRSPResponseFailure, "npfnic_page_resp.code: stop PRI"},
	{"PRSP_PASID_VALID", PRSPPASIDValid, "npfnic_page_resp.flags: pasid valid"},
	{"PRGI_MAX", PRGIMax, "number of page request group indexes"},
}
