// Package hw is the single definition of the npfnic hardware interface as
// the guest driver sees it: PCI identity, BAR layout, register offsets and
// values, and the diagnostic DMA pattern. The C header the Linux driver
// includes (guestdrv/npfnic_hw.h) is generated from the tables in this
// package by `go generate ./vdevice/hw`; a test fails when it is stale.
//
// To add a register: add its constant below and a row to Registers in
// register.go (or PairRegisters for a per-queue-pair register,
// TranslationRegisters for ATS and PRI; and, for named values, a row to
// Values); the row says what a write does, the partial-write rule, the reset
// value and the owning block, and Lookup decodes BAR0 offsets through it.
// Then run go generate. Structures the device and the driver share
// in guest memory (descriptors, the status block) are Layout tables in
// layout.go: the C structs are generated from them and the device encodes
// and decodes guest memory through the same Field offsets. The rdma_rxe user
// ABI of the RDMA queues (rxe.go) is Linux's, not npfnic's: ABILayout tables
// checked against the guest kernel's uapi headers and described in the
// datasheet, but not generated into the C header (the driver includes the
// kernel's own).
package hw

//go:generate go run ./internal/genheader -o ../../guestdrv/npfnic_hw.h

// PCI identity.
const (
	VendorID       = 0x4e50 // "NP"
	DeviceID       = 0x4e46 // "NF"
	Revision       = 1
	ClassCode      = 0x020000 // network controller, Ethernet
	SubsysVendorID = VendorID
	SubsysID       = 0x0001
)

// BAR layout. BAR0 is the register file; the MSI-X table and PBA live in
// their own BAR so the register file never overlaps what QEMU emulates.
const (
	RegBAR          = 0 // 64-bit, non-prefetchable
	RegBARSize      = 64 << 10
	MSIXBAR         = 2 // 64-bit, non-prefetchable
	MSIXBARSize     = 4096
	MSIXTableOffset = 0x000
	MSIXPBAOffset   = 0x800
	// MSIXVectors is the number of MSI-X vectors the function exposes.
	MSIXVectors = 10
	// DiagEchoVector fires for DIAG_ECHO_CTRL rounds (interface 2.2).
	DiagEchoVector = 8
	// DiagEchoMax bounds one DIAG_ECHO_CTRL run.
	DiagEchoMax = 1 << 16
	// DiagEchoGapMax bounds DIAG_ECHO_GAP (one second).
	DiagEchoGapMax = 1000000
)

// Identification values.
const (
	// Magic is the value of REG_ID ("NFPN" in little-endian bytes).
	Magic = 0x4e50464e
	// InterfaceVersion is REG_VERSION: major in bits 31:16, minor in 15:0.
	// Bump the major for incompatible register changes, the minor for
	// additions an older driver can ignore, and say what changed in
	// InterfaceChanges.
	InterfaceVersion = 2<<16 | 14
)

// InterfaceChange is what one interface version added or changed.
type InterfaceChange struct {
	Major, Minor int
	Changes      string
}

// InterfaceChanges is the interface's changelog, oldest first; its last
// entry is InterfaceVersion (a test keeps them in step).
var InterfaceChanges = []InterfaceChange{
	{2, 0, "the Ethernet datapath: queue pairs with TX and RX rings, the status block, per-pair interrupts and moderation (ITR), the diagnostic DMA and interrupts"},
	{2, 1, "offloads: FEATURES, TX checksum and TSO, RX checksum status; the counters tx_tso_frames and rx_wire_stalls"},
	{2, 2, "network page faults: ATS, PRI and PASID, the per-pair RX policy, the rNPF bitmap, the resolve and tail-interrupt doorbells, the backup ring, the fault counters"},
	{2, 3, "the quiesce contract: BUSY bits in every control register of an engine that DMAs, LATE_DMA"},
	{2, 4, "RDMA (FEATURES.RDMA): the RDMA register block, command and event queues, rdma_rxe's user-ABI queues, a tenth vector"},
	{2, 5, "on-demand paging for RDMA (FEATURES.RDMA_ODP): page requests for memory regions, RDMA_RECV_FAULT, RDMA_MSG_ALARM, QUERY_STATS"},
	{2, 6, "RC atomics (FEATURES.RDMA_ATOMIC): RDMA_ACCESS_REMOTE_ATOMIC for QPs and MRs, rxe's atomic send entries and completions"},
	{2, 7, "shared receive queues (FEATURES.RDMA_SRQ): CREATE_SRQ, MODIFY_SRQ, DESTROY_SRQ, CREATE_QP's FLAG_SRQ, the SRQ_LIMIT and SRQ_ERR events"},
	{2, 8, "UD and UC queue pairs (FEATURES.RDMA_UD, RDMA_UC): CREATE_QP's FLAG_UD and FLAG_UC, MODIFY_QP's qkey and QP_ATTR_QKEY, the UD member of the rxe send entry; for kernel consumers (FEATURES.RDMA_KERNEL), REG_MR's FLAG_PHYSICAL and QP 1 (GSI); memory windows (FEATURES.RDMA_MW): ALLOC_MW, DEALLOC_MW, ACCESS_MW_BIND, the BIND_MW, LOCAL_INV and SEND_WITH_INV entries; RESIZE_CQ (FEATURES.RDMA_RESIZE_CQ)"},
	{2, 9, "fast registration for kernel consumers (FEATURES.RDMA_FAST_REG): ALLOC_MR, the REG_MR send entry (struct npfnic_reg_wr), LOCAL_INV and SEND with Invalidate of such a region; RDMA_MAX_RD_ATOMIC 128, rdma_rxe's, not 16; RDMA_PREFAULT, whole-request prefault of memory regions' faults"},
	{2, 10, "implicit on-demand paging (FEATURES.RDMA_IMPLICIT_ODP): REG_MR's FLAG_IMPLICIT, one region over the PASID's whole address space"},
	{2, 11, "large receive (FEATURES.RX_LRO): PAIR_CTRL's RX_LRO, a TCP super-packet received whole over a chain of RX descriptors (RXD_GSO_TCP4, RXD_GSO_TCP6, RXD_CONT, the chain length in status bits 15:8, gso_size in the first descriptor)"},
	{2, 12, "RDMA_RECV_FAULT_HOLD: a receive fault held in the device until its page arrives, for peers that cannot take an RNR NAK"},
	{2, 13, "lazy TX completion interrupts (FEATURES.TX_IRQ_DELAY): PAIR_TX_IRQ_DELAY holds an interrupt that only TX completions ask for until an RX completion comes or the delay ends"},
	{2, 14, "notification in memory (FEATURES.NOTIFY): PAIR_NOTIFY_LO/HI, struct npfnic_pair_notify; the RX tail and the interrupt arm written to memory the device reads, a doorbell only when the device asks for one (rx_kick); QERR_BAD_NOTIFY"},
}

// Register offsets in BAR0. All registers are 32 bits wide.
const (
	RegID            = 0x0000 // RO: Magic
	RegVersion       = 0x0004 // RO: InterfaceVersion
	RegScratch       = 0x0008 // RW: reads back the last value written
	RegDiagIRQ       = 0x0010 // WO: writing N fires MSI-X vector N
	RegDiagEchoGap   = 0x0018 // RW: microseconds the device waits before each DIAG_ECHO round (0: none)
	RegDiagDMAAddrLo = 0x0020 // RW: DMA target IOVA, bits 31:0
	RegDiagDMAAddrHi = 0x0024 // RW: DMA target IOVA, bits 63:32
	RegDiagDMALen    = 0x0028 // RW: byte count (1..DiagDMAMaxLen)
	RegDiagDMASeed   = 0x002c // RW: pattern seed
	RegDiagDMACtrl   = 0x0030 // WO: write DiagDMACtrlStart to start
	RegDiagDMAStatus = 0x0034 // RO: DiagDMAStatus*
	RegDiagEchoCtrl  = 0x0038 // WO: write N: run N interrupt/doorbell echo rounds on DiagEchoVector
	RegDiagEcho      = 0x003c // RW: the driver writes the round number it was interrupted for; reads rounds done

	RegCtrl         = 0x0040 // RW: CtrlEnable; CtrlReset (self-clearing)
	RegStatusAddrLo = 0x0044 // RW: status block address, bits 31:0
	RegStatusAddrHi = 0x0048 // RW: bits 63:32; writing it latches the address
	RegMACLo        = 0x004c // RO: MAC bytes 0..3 (byte 0 in bits 7:0)
	RegMACHi        = 0x0050 // RO: MAC bytes 4..5 in bits 15:0
	RegPairMax      = 0x0054 // RO: PairMax
	RegMiscIRQArm   = 0x0058 // WO: write 1 to arm the misc vector once
	RegFeatures     = 0x005c // RO: Feat* offloads the device implements
	RegLateDMA      = 0x0060 // RO: late DMA writes the device refused since reset (interface 2.3; always 0 unless the device is broken)

	// Backup ring (interface 2.2): one per function, owned by the driver's
	// fault handling (the IOprovider), addressed by IOVA (never translated,
	// never faulting).
	RegBackupBaseLo = 0x0900 // RW: backup ring IOVA, bits 31:0 (32-byte aligned)
	RegBackupBaseHi = 0x0904 // RW: bits 63:32
	RegBackupSize   = 0x0908 // RW: entries, power of two, RingSizeMin..RingSizeMax
	RegBackupTail   = 0x090c // WO: doorbell, free-running count of backup buffers posted
	RegBackupCtrl   = 0x0910 // RW: BackupCtrlEnable latches base and size, head and tail to 0
	RegBackupVector = 0x0914 // RW: MSI-X vector of backup-ring and RX-tail events
)

// Queue pair register blocks: pair q's registers are at PairBase(q) plus the
// QP* offsets below.
const (
	PairRegBase   = 0x1000
	PairRegStride = 0x100

	PairTxBaseLo  = 0x00 // RW: TX ring guest address, bits 31:0
	PairTxBaseHi  = 0x04 // RW: bits 63:32
	PairTxSize    = 0x08 // RW: TX ring entries (power of two, RingSizeMin..RingSizeMax)
	PairTxTail    = 0x0c // WO: TX doorbell, free-running count of descriptors posted
	PairRxBaseLo  = 0x10 // RW: RX ring guest address, bits 31:0
	PairRxBaseHi  = 0x14 // RW: bits 63:32
	PairRxSize    = 0x18 // RW: RX ring entries
	PairRxTail    = 0x1c // WO: RX doorbell, free-running count of buffers posted
	PairCtrl      = 0x20 // RW: PairCtrlEnable
	PairIRQArm    = 0x24 // WO: write 1 to arm the pair's vector once
	PairITR       = 0x28 // RW: minimum microseconds between two interrupts of the pair
	PairRxPolicy  = 0x2c // RW: RxPolicy*, latched at enable (interface 2.2)
	PairPASID     = 0x30 // RW: PASID of the pair's buffers, latched at enable
	PairBmSize    = 0x34 // RW: rNPF bitmap size (power of two, 1..BmSizeMax), latched at enable
	PairRxResolve = 0x38 // WO: resolve_rNPFs: the bitmap index (free-running) of a resolved rNPF; ignored unless it names a pending rNPF whose descriptor is posted (NetworkFaultsDoc)
	PairRxTailIRQ = 0x3c // WO: write 1: raise the backup vector once when RX_TAIL next moves
	// PairTxIRQDelay (FEATURES.TX_IRQ_DELAY): a TX completion alone holds
	// the pair's interrupt back this many microseconds (TxIRQDelayDoc).
	PairTxIRQDelay = 0x40 // RW: microseconds a TX completion may wait for an RX one (0 = none)
	// PairNotifyLo/Hi (FEATURES.NOTIFY): the pair's notify area
	// (NotifyDoc), latched at enable; 0 = none.
	PairNotifyLo = 0x44 // RW: guest address of struct npfnic_pair_notify, bits 31:0 (16-byte aligned)
	PairNotifyHi = 0x48 // RW: bits 63:32
)

// PairBase is the BAR0 offset of queue pair q's register block.
func PairBase(q int) uint32 { return PairRegBase + uint32(q)*PairRegStride }

// PairBaseC is the C macro body of PairBase.
const PairBaseC = "(0x1000 + (q) * 0x100)"

// PairVector is the MSI-X vector of queue pair q (TX and RX completions).
func PairVector(q int) int { return 1 + q }

// PairVectorC is the C macro body of PairVector.
const PairVectorC = "(1 + (q))"

// Datapath values.
const (
	// PairMax is the number of queue pairs (REG_PAIR_MAX). Registers for all of
	// them exist; a device may be built with fewer enabled (npfnic.Options).
	PairMax = 4

	CtrlEnable = 1 << 0 // datapath on
	CtrlReset  = 1 << 1 // write 1: disable every queue, forget the status block, clear errors
	// CtrlBusy (read only) is set while the datapath may still DMA: the
	// status block or any pair. After CTRL_RESET it clears once all of
	// them quiesced (see Quiesce).
	CtrlBusy = 1 << 31

	PairCtrlEnable = 1 << 0 // set: latch bases/sizes, heads and tails to 0; clear: stop
	// PairCtrlRxLRO (interface 2.11, FEATURES.RX_LRO): TCP super-packets
	// from the host may arrive whole, as RX descriptor chains (LargeReceiveDoc).
	// It takes effect at every write of PAIR_CTRL, enabled or not.
	PairCtrlRxLRO = 1 << 1
	// PairCtrlBusy (read only) is set from enable until the pair was disabled
	// (or reset) and every DMA it started has ended (see Quiesce).
	PairCtrlBusy = 1 << 31

	MiscVector = 0 // link change, device or queue error

	// StatusBlockAlign is the required alignment of the status block.
	StatusBlockAlign = 64
	// StatusBlockSize is the header plus PairMax per-pair parts.
	StatusBlockSize = 64 + 64*PairMax

	LinkUp = 1 << 0 // status block link bit

	DevErrBadStatusAddr = 1 // status block not writable guest memory (or misaligned)
	DevErrBadBackupRing = 2 // backup ring invalid or outside guest memory, or BACKUP_TAIL moved badly; the backup ring stopped

	QErrBadRing = 1 // ring base/size invalid or ring outside guest memory
	QErrBadDesc = 2 // a descriptor's buffer outside guest memory
	QErrBadTail = 3 // tail moved backwards or more than SIZE beyond the head
	// QErrBadNotify (interface 2.14): the notify area is misaligned or
	// not writable guest memory.
	QErrBadNotify = 4

	RingSizeMin = 8
	RingSizeMax = 4096

	// PairNotifyAlign is the alignment of struct npfnic_pair_notify.
	PairNotifyAlign = 16

	TxdEOP  = 1 << 0 // last descriptor of the frame
	TxdCsum = 1 << 1 // first descriptor: checksum from csum_start, stored at csum_start+csum_offset
	TxdTSO4 = 1 << 2 // first descriptor: TCP/IPv4 super-packet, segmented at mss
	TxdTSO6 = 1 << 3 // first descriptor: TCP/IPv6 super-packet, segmented at mss

	RxdDone   = 1 << 0 // descriptor filled by the device
	RxdCsumOK = 1 << 1 // the device verified the frame's TCP or UDP checksum
	RxdError  = 1 << 2 // no frame: the buffer's translation failed for good (Invalid Request or a bad mapping)

	// Large receive (interface 2.11, LargeReceiveDoc).
	RxdGSOTCP4 = 1 << 3 // first descriptor of a chain: a TCP/IPv4 super-packet, gso_size bytes a segment
	RxdGSOTCP6 = 1 << 4 // first descriptor of a chain: a TCP/IPv6 super-packet
	RxdCont    = 1 << 5 // a continuation descriptor of a chain (never the first)
	// RxdChainShift and RxdChainMask: the first descriptor's status bits
	// 15:8 hold the number of descriptors of its chain (0: one, as before
	// 2.11).
	RxdChainShift = 8
	RxdChainMask  = 0xff << RxdChainShift
	// RxChainMax bounds the descriptors of one chain.
	RxChainMax = 64

	TxMaxSegs = 18
	MinFrame  = 14   // an Ethernet header
	MaxFrame  = 1518 // without FCS
	// MaxTSOFrame bounds a gathered TSO super-packet: 64 KiB of IP
	// datagram plus an Ethernet header with one VLAN tag.
	MaxTSOFrame = 65536 + 18
	// TSOMaxMSS is the largest mss a TSO frame may ask for.
	TSOMaxMSS = 9000
)

// OffloadsDoc is the contract of the offloads (interface 2.1).
const OffloadsDoc = `FEATURES reports the offloads the device implements. A driver uses a TX
offload by setting its flag in the first descriptor of a frame, and reads
NPFNIC_RXD_CSUM_OK in RX descriptors. A driver written for 2.0 leaves the
new descriptor fields zero and ignores the new status bits, so it keeps
working unchanged.

TX checksum (NPFNIC_TXD_CSUM) has Linux CHECKSUM_PARTIAL semantics: the
device computes the 16-bit ones' complement sum of the frame from byte
csum_start to its end (the driver's stack seeded the pseudo-header sum into
the checksum field) and stores it, folded and complemented, at csum_start +
csum_offset; a zero result is stored as 0xffff for UDP, as is otherwise. A
frame whose checksum field does not lie inside it is dropped
(tx_drops_bad_len).

TSO (NPFNIC_TXD_TSO4, NPFNIC_TXD_TSO6) marks the gathered frame (up to
NPFNIC_MAX_TSO_FRAME bytes) as one TCP super-packet over Ethernet (with at
most one VLAN tag) and IPv4 or IPv6 (no extension headers other than
hop-by-hop and destination options); csum_start is the offset of the TCP
header. The device cuts the TCP payload into segments of at most mss bytes
and sends each as a frame with the headers copied, the IPv4 total length or
IPv6 payload length set, the IPv4 ID incremented per segment and the IPv4
header checksum recomputed, the sequence number advanced, FIN and PSH on the
last segment only, CWR on the first only, and the whole TCP checksum
computed (TSO implies NPFNIC_TXD_CSUM). A TSO frame with mss 0 or above
NPFNIC_TSO_MAX_MSS, headers that do not parse as such, csum_start not at the
TCP header, both TSO flags, or a length above NPFNIC_MAX_TSO_FRAME is
dropped and counted in tx_drops_bad_len; it is not a queue error.

RX checksum (NPFNIC_RXD_CSUM_OK): the frame is IPv4 or IPv6 (not a fragment)
carrying TCP or UDP, and the device verified that its checksum is correct.
Frames the device cannot verify, and frames whose checksum is wrong, come
without the bit: the device never drops a frame for its checksum.`

// LargeReceiveDoc is the contract of large receive (interface 2.11).
const LargeReceiveDoc = `With NPFNIC_FEAT_RX_LRO in FEATURES, a driver that sets
NPFNIC_PAIR_CTRL_RX_LRO in a pair's CTRL (with NPFNIC_PAIR_CTRL_ENABLE, at
enable or at any later write: the bit takes effect at every write) may
receive a TCP super-packet whole, the way the host kernel handed it to the
device (QEMU's virtio-net hands its guest the same with mergeable receive
buffers): one frame of up to NPFNIC_MAX_TSO_FRAME bytes spread over a chain
of consecutive RX descriptors. A driver that leaves the bit clear receives
every frame in one descriptor, as before 2.11.

A chain is n descriptors (2 <= n <= NPFNIC_RX_CHAIN_MAX, or 1 for a
super-packet that fits one buffer) from head on; the frame fills each
buffer to its buf_len in order, the last one partly, and each descriptor's
pkt_len says how many bytes its buffer holds. The first descriptor's status
has NPFNIC_RXD_DONE, NPFNIC_RXD_CSUM_OK, NPFNIC_RXD_GSO_TCP4 or
NPFNIC_RXD_GSO_TCP6, and n in bits 15:8 (NPFNIC_RXD_CHAIN_SHIFT); its
gso_size holds the TCP payload bytes per segment the sender used (the mss).
Each other descriptor of the chain has NPFNIC_RXD_DONE | NPFNIC_RXD_CONT and
gso_size 0. The first buffer holds at least the Ethernet, IP and TCP
headers. rx_head moves past the whole chain at once, never into it.

The frame is finished as the host kernel's segmentation would finish each
segment: the IPv4 header checksum and the whole TCP checksum are computed
once over the super-packet and stored (hence NPFNIC_RXD_CSUM_OK), the IP
lengths cover the whole datagram; the sequence number, flags and options
are the first segment's, with PSH and FIN as the last segment's. The
driver hands it up as GRO would hand up the segments merged: one skb with
gso_size and SKB_GSO_TCPV4 or SKB_GSO_TCPV6.

The device sends a super-packet as a chain only when all of these hold, and
otherwise cuts it into frames of at most NPFNIC_MAX_FRAME bytes as without
the bit: the super-packet is TCP over IPv4 or IPv6 as TSO accepts it, its
IP length is the frame's, n descriptors are posted (the device waits for
them as for one buffer, unless the ring can never hold the chain: n above
NPFNIC_RX_CHAIN_MAX or every descriptor posted and still too few bytes),
the first buffer holds the headers, no buffer has buf_len 0, and no rNPF
is pending on the pair (head_offset 0 under NPFNIC_RX_POLICY_BACKUP). Under
a translating RX policy every buffer of the chain must translate at once:
when one would fault, the device cuts the super-packet into frames instead,
and those take the fault under the pair's RX policy as any frame does (a
page request, a drop, the backup ring). A chain never takes a fault: this
is the simple first step, and a super-packet that meets one cold buffer
pays for all its segments. Since the device waits for a chain's
descriptors, a driver that sets the bit posts buffers back as it consumes
them, and never keeps part of its ring unposted for good.`

// TxIRQDelayDoc is the contract of lazy TX completion interrupts
// (interface 2.13).
const TxIRQDelayDoc = `With NPFNIC_FEAT_TX_IRQ_DELAY in FEATURES, a pair's TX_IRQ_DELAY
(microseconds, 0 after reset) makes TX completions lazy. A TX completion
still moves tx_head in the status block at once, but the interrupt it asks
for waits until an RX completion (or an error) asks for one too, or until
TX_IRQ_DELAY has passed since the first such TX completion, whichever comes
first; ITR and IRQ_ARM apply as before. A request/response exchange then
takes one interrupt, for the next request, and the driver reclaims the
response's TX descriptors in the poll that interrupt starts. Once the TX
descriptors completed since the pair's last interrupt reach half of the TX
ring, a TX completion asks for its interrupt at once, so a driver that
stops its queue on a nearly full ring is not held up by the delay. With
TX_IRQ_DELAY 0 every completion asks for its interrupt at once, as before
2.13.`

// NotifyDoc is the contract of notification in memory (interface 2.14).
const NotifyDoc = `Under QEMU every register write is a message to the device's server,
a few microseconds of the vCPU each: after each poll a driver wrote the
RX tail and IRQ_ARM. With NPFNIC_FEAT_NOTIFY in FEATURES, a driver may
give a pair a notify area instead: struct npfnic_pair_notify,
NPFNIC_PAIR_NOTIFY_SIZE bytes, NPFNIC_PAIR_NOTIFY_ALIGN-aligned, zeroed,
its address written to PAIR_NOTIFY_LO/HI before PAIR_CTRL enables the
pair (0, the reset value, is none). The device latches it at enable,
under every RX policy but NPFNIC_RX_POLICY_BACKUP (whose tail events hang
on RX_TAIL doorbells); an area the device can not write stops the pair
with NPFNIC_QERR_BAD_NOTIFY.

rx_tail is the RX tail as RX_TAIL would carry it. Whenever the device
finds too few RX buffers posted, it reads rx_tail, checks it as it
checks RX_TAIL (NPFNIC_QERR_BAD_TAIL otherwise) and takes the buffers.
If there are still too few, it sets rx_kick to 1, reads rx_tail once
more, and if that did not help it waits for an RX_TAIL doorbell as
before; rx_kick goes back to 0 when the device next finds buffers. The
driver stores rx_tail, issues a full barrier, reads rx_kick, and rings
RX_TAIL only if rx_kick is 1: one of the two sees the other's store.
Since RX_TAIL is a posted write, it may reach the device after the device
read a newer rx_tail: an RX_TAIL behind the device's tail but not behind
rx_head is then ignored, where without a notify area it is BAD_TAIL.

irq_arm is a free-running count the driver increments instead of writing
IRQ_ARM: the device treats each new value as one IRQ_ARM write. It reads
irq_arm, after a full barrier, when a completion asks for an interrupt
while the vector is disarmed; that completion is already in the status
block. Unlike IRQ_ARM, an arm stored while completions are outstanding
does not fire for them: the driver stores irq_arm, issues a full
barrier, and then looks at the status block (rx_head, tx_head) for work
that came in before, and polls it itself. Queue errors are reported on
the misc vector, as always. IRQ_ARM keeps working with a notify area; a
pair is armed at enable by IRQ_ARM.`

// Offloads (interface 2.1): the FEATURES bits; see OffloadsDoc.
const (
	FeatTxCsum = 1 << 0 // TxdCsum
	FeatTSO4   = 1 << 1 // TxdTSO4
	FeatTSO6   = 1 << 2 // TxdTSO6
	FeatRxCsum = 1 << 3 // RxdCsumOK
	// FeatRDMA (interface 2.4): the RDMA engine (rdma.go) runs; without it
	// the RDMA registers read 0 and ignore writes.
	FeatRDMA = 1 << 4
	// FeatRDMAODP (interface 2.5): a memory region's missing page is a
	// page request through PRI, resolved or refused by the page response
	// (RDMADoc, "On-demand paging").
	FeatRDMAODP = 1 << 5
	// FeatRDMAAtomic (interface 2.6): RC atomics, CMP_AND_SWP and
	// FETCH_AND_ADD, both ways (RDMADoc, "Atomics").
	FeatRDMAAtomic = 1 << 6
	// FeatRDMASRQ (interface 2.7): shared receive queues (RDMADoc,
	// "Shared receive queues").
	FeatRDMASRQ = 1 << 7
	// FeatRDMAUD and FeatRDMAUC (interface 2.8): unreliable datagram and
	// unreliable connected QPs (RDMADoc, "UD and UC queue pairs").
	FeatRDMAUD = 1 << 8
	FeatRDMAUC = 1 << 9
	// FeatRDMAKernel (interface 2.8): what kernel consumers need: REG_MR's
	// FLAG_PHYSICAL (the DMA MR of their local_dma_lkey) and QP 1, the
	// GSI QP, as a UD QP (RDMADoc, "Kernel consumers").
	FeatRDMAKernel = 1 << 10
	// FeatRDMAMW (interface 2.8): memory windows of types 1 and 2,
	// LOCAL_INV and SEND with Invalidate (RDMADoc, "Memory windows").
	FeatRDMAMW = 1 << 11
	// FeatRDMAResizeCQ (interface 2.8): RESIZE_CQ.
	FeatRDMAResizeCQ = 1 << 12
	// FeatRDMAFastReg (interface 2.9): fast registration for kernel
	// consumers: ALLOC_MR, the REG_MR send entry, LOCAL_INV and SEND with
	// Invalidate of such a region (RDMADoc, "Fast registration").
	FeatRDMAFastReg = 1 << 13
	// FeatRDMAImplicitODP (interface 2.10): REG_MR's FLAG_IMPLICIT, a
	// region over the whole address space of its PASID, whose pages all
	// fault in on demand (RDMADoc, "Memory regions").
	FeatRDMAImplicitODP = 1 << 14
	// FeatRxLRO (interface 2.11): large receive, PAIR_CTRL_RX_LRO
	// (LargeReceiveDoc).
	FeatRxLRO = 1 << 15
	// FeatTxIRQDelay: PAIR_TX_IRQ_DELAY, lazy TX completion interrupts
	// (TxIRQDelayDoc).
	FeatTxIRQDelay = 1 << 16
	// FeatNotify (interface 2.14): PAIR_NOTIFY_LO/HI, the RX tail and
	// the interrupt arm in memory (NotifyDoc).
	FeatNotify = 1 << 17

	// Features is REG_FEATURES of this device.
	Features = FeatTxCsum | FeatTSO4 | FeatTSO6 | FeatRxCsum | FeatRDMA | FeatRDMAODP | FeatRDMAAtomic | FeatRDMASRQ |
		FeatRDMAUD | FeatRDMAUC | FeatRDMAKernel | FeatRDMAMW |
		FeatRDMAResizeCQ | FeatRDMAFastReg | FeatRDMAImplicitODP | FeatRxLRO | FeatTxIRQDelay | FeatNotify
)

// Register values.
const (
	DiagDMACtrlStart = 1
	// DiagDMACtrlAbort stops a running diagnostic DMA (interface 2.3):
	// the status stays Busy until no further byte will be written, then
	// reads Aborted.
	DiagDMACtrlAbort = 2

	DiagDMAStatusIdle     = 0 // never started since reset
	DiagDMAStatusBusy     = 1 // running
	DiagDMAStatusDone     = 2 // all bytes written
	DiagDMAStatusFault    = 3 // target not inside guest memory (no byte outside it was written)
	DiagDMAStatusBadLen   = 4 // LEN is 0 or above DiagDMAMaxLen
	DiagDMAStatusNoMaster = 5 // bus mastering disabled in the Command register
	DiagDMAStatusAborted  = 6 // stopped by DiagDMACtrlAbort or a reset; no byte will be written any more (interface 2.3)

	// DiagDMAMaxLen bounds one diagnostic DMA.
	DiagDMAMaxLen = 1 << 20
)

// DiagPattern is byte i of the diagnostic DMA pattern for seed: a cheap
// integer hash (all arithmetic modulo 2^32) so that a byte written at the
// wrong offset, or with the wrong seed, almost surely differs. The C header
// carries the same function; keep both in step (the header test checks).
func DiagPattern(seed, i uint32) uint8 {
	x := seed + i*0x9e3779b1
	x ^= x >> 16
	x *= 0x85ebca6b
	x ^= x >> 13
	return uint8(x)
}

// DiagPatternC is the C body of DiagPattern, emitted into the header.
const DiagPatternC = `static inline unsigned char npfnic_diag_pattern(unsigned int seed, unsigned int i)
{
	unsigned int x = seed + i * 0x9e3779b1u;

	x ^= x >> 16;
	x *= 0x85ebca6bu;
	x ^= x >> 13;
	return (unsigned char)x;
}`

// Macro is a function-like C macro with its Go counterpart named in Doc.
type Macro struct {
	Name   string // C name suffix: NPFNIC_<Name>
	Params string
	Body   string
	Doc    string
}

// Macros lists the function-like macros of the header.
var Macros = []Macro{
	{"PAIR_BASE", "q", PairBaseC, "BAR0 offset of queue pair q's registers (hw.PairBase)"},
	{"PAIR_VECTOR", "q", PairVectorC, "MSI-X vector of queue pair q (hw.PairVector)"},
	{"STATUS_PAIR_OFFSET", "q", "(64 + (q) * 64)", "offset of struct npfnic_pair_status q in the status block"},
}

// Value is a named constant exported to C as NPFNIC_<Name>.
type Value struct {
	Name  string
	Value uint64
	Doc   string
}

// Values lists the constants exported to the C header besides registers.
var Values = []Value{
	{"PCI_VENDOR_ID", VendorID, ""},
	{"PCI_DEVICE_ID", DeviceID, ""},
	{"PCI_REVISION", Revision, ""},
	{"PCI_CLASS", ClassCode, "base class, sub class, prog-if"},
	{"REG_BAR", RegBAR, "BAR holding the register file"},
	{"REG_BAR_SIZE", RegBARSize, ""},
	{"MSIX_BAR", MSIXBAR, "BAR holding the MSI-X table and PBA"},
	{"MSIX_TABLE_OFFSET", MSIXTableOffset, ""},
	{"MSIX_PBA_OFFSET", MSIXPBAOffset, ""},
	{"MSIX_VECTORS", MSIXVectors, ""},
	{"DIAG_ECHO_VECTOR", DiagEchoVector, "MSI-X vector of the DIAG_ECHO rounds"},
	{"DIAG_ECHO_MAX", DiagEchoMax, "most rounds one DIAG_ECHO_CTRL write runs"},
	{"DIAG_ECHO_GAP_MAX", DiagEchoGapMax, "largest NPFNIC_REG_DIAG_ECHO_GAP (microseconds)"},
	{"MAGIC", Magic, "value of NPFNIC_REG_ID"},
	{"INTERFACE_VERSION", InterfaceVersion, "value of NPFNIC_REG_VERSION"},
	{"DIAG_DMA_CTRL_START", DiagDMACtrlStart, "start; ignored while NPFNIC_DIAG_DMA_STATUS_BUSY"},
	{"DIAG_DMA_CTRL_ABORT", DiagDMACtrlAbort, "stop a running DMA; BUSY until no byte will be written"},
	{"DIAG_DMA_STATUS_IDLE", DiagDMAStatusIdle, ""},
	{"DIAG_DMA_STATUS_BUSY", DiagDMAStatusBusy, ""},
	{"DIAG_DMA_STATUS_DONE", DiagDMAStatusDone, ""},
	{"DIAG_DMA_STATUS_FAULT", DiagDMAStatusFault, "target outside guest memory"},
	{"DIAG_DMA_STATUS_BAD_LEN", DiagDMAStatusBadLen, ""},
	{"DIAG_DMA_STATUS_NO_MASTER", DiagDMAStatusNoMaster, "bus mastering disabled"},
	{"DIAG_DMA_STATUS_ABORTED", DiagDMAStatusAborted, "aborted; no byte will be written any more"},
	{"DIAG_DMA_MAX_LEN", DiagDMAMaxLen, ""},
	{"PAIR_MAX", PairMax, "number of queue pairs"},
	{"CTRL_ENABLE", CtrlEnable, "NPFNIC_REG_CTRL: datapath on"},
	{"CTRL_RESET", CtrlReset, "NPFNIC_REG_CTRL: reset the datapath"},
	{"PAIR_CTRL_ENABLE", PairCtrlEnable, "NPFNIC_PAIR_CTRL: pair enabled"},
	{"PAIR_CTRL_BUSY", PairCtrlBusy, "NPFNIC_PAIR_CTRL (read only): the pair may still DMA"},
	{"CTRL_BUSY", CtrlBusy, "NPFNIC_REG_CTRL (read only): the datapath may still DMA"},
	{"BACKUP_CTRL_BUSY", BackupCtrlBusy, "NPFNIC_REG_BACKUP_CTRL (read only): the backup ring may still DMA"},
	{"QUIESCE_TIMEOUT_MS", QuiesceTimeoutMS, "how long a driver waits for a BUSY bit to clear before it gives the memory up for lost"},
	{"MISC_VECTOR", MiscVector, "MSI-X vector for link changes and errors"},
	{"STATUS_BLOCK_ALIGN", StatusBlockAlign, ""},
	{"STATUS_BLOCK_SIZE", StatusBlockSize, "header + NPFNIC_PAIR_MAX * struct npfnic_pair_status"},
	{"LINK_UP", LinkUp, "npfnic_status_block.link"},
	{"DEVERR_BAD_STATUS_ADDR", DevErrBadStatusAddr, "status block outside guest memory or misaligned"},
	{"QERR_BAD_RING", QErrBadRing, "ring base/size invalid or ring outside guest memory"},
	{"QERR_BAD_DESC", QErrBadDesc, "a descriptor's buffer outside guest memory"},
	{"QERR_BAD_TAIL", QErrBadTail, "tail moved backwards or more than SIZE beyond the head"},
	{"QERR_BAD_NOTIFY", QErrBadNotify, "the notify area misaligned or not writable guest memory"},
	{"PAIR_NOTIFY_ALIGN", PairNotifyAlign, "alignment of struct npfnic_pair_notify"},
	{"RING_SIZE_MIN", RingSizeMin, ""},
	{"RING_SIZE_MAX", RingSizeMax, ""},
	{"TXD_EOP", TxdEOP, "npfnic_tx_desc.flags: last descriptor of the frame"},
	{"TXD_CSUM", TxdCsum, "first descriptor: CHECKSUM_PARTIAL at csum_start/csum_offset"},
	{"TXD_TSO4", TxdTSO4, "first descriptor: TCP/IPv4 super-packet, segments of mss bytes"},
	{"TXD_TSO6", TxdTSO6, "first descriptor: TCP/IPv6 super-packet, segments of mss bytes"},
	{"RXD_DONE", RxdDone, "npfnic_rx_desc.status: filled by the device"},
	{"RXD_CSUM_OK", RxdCsumOK, "npfnic_rx_desc.status: TCP/UDP checksum verified correct"},
	{"TX_MAX_SEGS", TxMaxSegs, "descriptors per TX frame"},
	{"MIN_FRAME", MinFrame, "shortest frame sent (an Ethernet header)"},
	{"MAX_FRAME", MaxFrame, "longest frame, without FCS"},
	{"MAX_TSO_FRAME", MaxTSOFrame, "longest TSO super-packet gathered (64 KiB + Ethernet and VLAN header)"},
	{"TSO_MAX_MSS", TSOMaxMSS, "largest mss of a TSO frame"},
	{"FEAT_TX_CSUM", FeatTxCsum, "NPFNIC_REG_FEATURES: NPFNIC_TXD_CSUM"},
	{"FEAT_TSO4", FeatTSO4, "NPFNIC_REG_FEATURES: NPFNIC_TXD_TSO4"},
	{"FEAT_TSO6", FeatTSO6, "NPFNIC_REG_FEATURES: NPFNIC_TXD_TSO6"},
	{"FEAT_RX_CSUM", FeatRxCsum, "NPFNIC_REG_FEATURES: NPFNIC_RXD_CSUM_OK"},
	{"RXD_ERROR", RxdError, "npfnic_rx_desc.status: no frame; the buffer could not be translated (pkt_len 0)"},
	{"FEAT_RX_LRO", FeatRxLRO, "NPFNIC_REG_FEATURES: large receive (NPFNIC_PAIR_CTRL_RX_LRO)"},
	{"FEAT_TX_IRQ_DELAY", FeatTxIRQDelay, "NPFNIC_REG_FEATURES: lazy TX completion interrupts (NPFNIC_PAIR_TX_IRQ_DELAY)"},
	{"FEAT_NOTIFY", FeatNotify, "NPFNIC_REG_FEATURES: the RX tail and the interrupt arm in memory (NPFNIC_PAIR_NOTIFY_LO/HI)"},
	{"PAIR_CTRL_RX_LRO", PairCtrlRxLRO, "NPFNIC_PAIR_CTRL: TCP super-packets may arrive whole, as descriptor chains"},
	{"RXD_GSO_TCP4", RxdGSOTCP4, "npfnic_rx_desc.status, first of a chain: TCP/IPv4 super-packet of gso_size segments"},
	{"RXD_GSO_TCP6", RxdGSOTCP6, "npfnic_rx_desc.status, first of a chain: TCP/IPv6 super-packet of gso_size segments"},
	{"RXD_CONT", RxdCont, "npfnic_rx_desc.status: a continuation descriptor of a chain"},
	{"RXD_CHAIN_SHIFT", RxdChainShift, "npfnic_rx_desc.status, first of a chain: descriptors in the chain, at bits 15:8 (0: one)"},
	{"RXD_CHAIN_MASK", RxdChainMask, ""},
	{"RX_CHAIN_MAX", RxChainMax, "most descriptors in one chain"},
	{"RX_POLICY_PIN", RxPolicyPin, "NPFNIC_PAIR_RX_POLICY: buffers pre-mapped; a fault drops the frame"},
	{"RX_POLICY_DROP", RxPolicyDrop, "NPFNIC_PAIR_RX_POLICY: a faulting frame is dropped, its page requested"},
	{"RX_POLICY_BACKUP", RxPolicyBackup, "NPFNIC_PAIR_RX_POLICY: a faulting frame goes to the backup ring (Lesokhin et al., ASPLOS'17, Figure 6)"},
	{"BM_SIZE_MAX", BmSizeMax, "largest rNPF bitmap"},
	{"BACKUP_CTRL_ENABLE", BackupCtrlEnable, "NPFNIC_REG_BACKUP_CTRL: backup ring on"},
	{"BACKUP_VECTOR_DEFAULT", BackupVectorDefault, "reset value of NPFNIC_REG_BACKUP_VECTOR"},
	{"BKD_DONE", BkdDone, "npfnic_backup_desc.status: filled by the device"},
	{"BKD_CSUM_OK", BkdCsumOK, "npfnic_backup_desc.status: TCP/UDP checksum verified correct"},
	{"DEVERR_BAD_BACKUP_RING", DevErrBadBackupRing, "backup ring base/size invalid, outside guest memory, or a bad BACKUP_TAIL"},
}

// QuiesceDoc is the contract between the driver and the device for
// taking memory back (interface 2.3).
const QuiesceDoc = `Every engine that DMAs has a control register with a read-only BUSY bit (bit
31): a queue pair's CTRL, CTRL, BACKUP_CTRL, ATS_CTRL and PRI_CTRL; the
diagnostic DMA reports the same through DIAG_DMA_STATUS (BUSY until no byte
will be written). To stop an engine the driver writes its disable (or reset)
and then reads the control register until BUSY is clear. From the read that
shows it clear on, the device never reads or writes that engine's memory
again (rings, buffers, status block, queue entries, page tables), raises
none of its interrupts, and the driver may free it.

The write that stops an engine returns at once; the device clears BUSY when
the work it had started (one frame, one queue entry) has ended, so the
handshake depends on no timing. A BUSY bit that is still set after
NPFNIC_QUIESCE_TIMEOUT_MS milliseconds means the device is wedged on guest
memory (a vfio-user client that stopped answering DMA): the driver then
leaks that memory rather than free it. A function reset (vfio-user
DEVICE_RESET, PCIe FLR) and a client disconnect stop every engine the same
way before the device answers.

LATE_DMA counts writes the device's late-DMA detector refused: writes by an
engine after it reported quiesced, or into memory a driver model fenced in
tests. It is always 0 on a correct device.`

// QuiesceTimeoutMS is how long a driver waits for a BUSY bit to clear
// before it gives the memory up for lost (see QuiesceDoc).
const QuiesceTimeoutMS = 2000

// NetworkFaultsDoc is how the Ethernet queues take network page faults
// (interface 2.2): translated buffers, TX stalls, the RX policies and the
// backup ring.
const NetworkFaultsDoc = `With the PCIe ATS capability enabled, every TX and RX buffer address in a
pair's descriptors is a VA in the address space of the pair's PASID (its
PASID register; 0 without the PASID capability), translated through the I/O
page tables (see Address translation). The descriptor rings, the status
blocks and the backup ring stay IOVAs: they are the driver's own pinned
memory. With ATS disabled, buffer addresses are IOVAs as before.

A TX buffer that faults stalls its pair on that descriptor (the data is
local): the device sends a page request (NPFNIC_FAULT_KIND_TX_BUF) and
resumes the same frame after a Success response; after Invalid Request, or a
fault no page request can resolve, it drops the frame (tx_fault_errors).

An RX buffer that faults is handled by the pair's RX policy (RX_POLICY):

- NPFNIC_RX_POLICY_PIN: the driver mapped every buffer beforehand; a fault
  drops the frame (rx_fault_drops) and requests the page, as drop does.
- NPFNIC_RX_POLICY_DROP: the frame is dropped (rx_fault_drops), the
  descriptor stays where it is and a page request (NPFNIC_FAULT_KIND_RX_BUF,
  desc = the descriptor's free-running index) asks for the page; later
  frames that fault on the same descriptor before the response do not repeat
  the request.
- NPFNIC_RX_POLICY_BACKUP: the backup ring of Lesokhin et al., ASPLOS'17,
  section 5 and Figure 6. The device keeps head (rx_head, what the driver
  may consume), head_offset and bm_index, and a bitmap of BM_SIZE bits. A
  frame goes to descriptor head + head_offset when that descriptor is posted
  and its buffer translates; then head moves only if head_offset is 0, else
  head_offset grows. Otherwise, if head_offset < BM_SIZE and the backup ring
  has a buffer, the frame goes to the backup ring with {queue, desc = head +
  head_offset, bm_index = bm_index + head_offset}, that bit is set,
  head_offset grows, a page request is sent when the buffer faulted (best
  effort: none when PRI has no room; the backup entry is the notification
  that counts) and the backup vector fires. Otherwise the frame is dropped
  (rx_fault_drops). The driver, having placed the frame in its original
  buffer and written that descriptor's pkt_len and status, writes the
  entry's bm_index to the pair's RX_RESOLVE: the device clears the bit and
  moves head (and bm_index) past every leading resolved entry, publishes
  rx_head and raises the pair's vector. The device ignores an RX_RESOLVE
  that names no pending rNPF, and counts it (rx_bad_resolves in the
  device's statistics): an index whose offset from bm_index is not below
  both head_offset and BM_SIZE (head_offset also counts frames placed
  directly past the oldest rNPF, and such an offset would alias onto a
  pending rNPF's bit), one whose bit is already clear, and one whose
  descriptor (head + offset) is not posted yet, at or beyond RX_TAIL: the
  driver can not have placed that frame, and head moved past the tail would
  make the next RX_TAIL fail the queue. Such a write changes nothing, and is
  not deferred: the driver writes it again once RX_TAIL passed the
  descriptor. A frame with no descriptor posted
  while head_offset is 0 is held or dropped as without faults. An rNPF's
  descriptor may lie beyond RX_TAIL (the ring was full while the driver saw
  nothing): the driver waits for its tail to pass it, using the pair's
  RX_TAIL_IRQ to learn when the tail moves.

The backup ring is one ring of struct npfnic_backup_desc per function,
addressed by IOVA (never translated, never faulting). The driver posts
buffers (addr, buf_len) and moves BACKUP_TAIL; BACKUP_CTRL enable latches
BACKUP_BASE and BACKUP_SIZE and zeroes head and tail; the device fills
entries in order, publishes backup_head in the status block and raises
BACKUP_VECTOR. Frames lost because the ring had no buffer are counted in
backup_full.

A descriptor whose buffer can never translate (Invalid Request, bad PASID, a
table outside guest memory) completes with NPFNIC_RXD_ERROR and pkt_len 0 in
place of a frame.`

// Network page faults on the Ethernet queues (interface 2.2): the RX
// policies, the rNPF bitmap and the backup ring; see NetworkFaultsDoc.
const (
	RxPolicyPin    = 0
	RxPolicyDrop   = 1
	RxPolicyBackup = 2

	// BmSizeMax bounds PAIR_BM_SIZE.
	BmSizeMax = 4096

	BackupCtrlEnable    = 1 << 0
	BackupCtrlBusy      = 1 << 31 // read only: the backup ring may still DMA (see Quiesce)
	BackupVectorDefault = 7

	BkdDone   = 1 << 0 // backup descriptor filled by the device
	BkdCsumOK = 1 << 1 // TCP/UDP checksum verified
)

// BackupDescSize is the size of struct npfnic_backup_desc.
const BackupDescSize = 32

// Backup ring descriptor fields. The driver posts buffers (addr, buf_len);
// the device fills the rest for a frame whose RX buffer faulted.
var (
	BackupDescAddr    = le64("addr", 0, "driver: IOVA of the buffer")
	BackupDescBufLen  = le16("buf_len", 8, "driver: buffer size in bytes")
	BackupDescPktLen  = le16("pkt_len", 10, "device: frame length")
	BackupDescStatus  = le16("status", 12, "device: NPFNIC_BKD_*")
	BackupDescQueue   = le16("queue", 14, "device: queue pair whose RX buffer faulted (ring id)")
	BackupDescDesc    = le32("desc", 16, "device: free-running index of the faulting RX descriptor")
	BackupDescBmIndex = le32("bm_index", 20, "device: free-running bitmap index, written back to PAIR_RX_RESOLVE")
	BackupDescStamp   = le64("stamp", 24, "device: clock (ns) when the fault was detected")
)

// BackupDesc is struct npfnic_backup_desc.
var BackupDesc = Layout{"backup_desc", BackupDescSize,
	"Backup ring entry: a frame whose RX buffer faulted, with where it belongs.",
	[]Field{BackupDescAddr.Field, BackupDescBufLen.Field, BackupDescPktLen.Field, BackupDescStatus.Field,
		BackupDescQueue.Field, BackupDescDesc.Field, BackupDescBmIndex.Field, BackupDescStamp.Field}, WrittenPerField}
