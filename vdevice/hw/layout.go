package hw

import "encoding/binary"

// Field is one member of a structure shared with the driver in guest
// memory. Offsets are written here once: the generator emits the C struct
// and offsetof/sizeof assertions from them, and the device reads and writes
// guest memory through the same values (Le16/Le32/Le64 accessors), so the
// two sides cannot drift apart.
type Field struct {
	Name   string
	Offset int
	Size   int     // bytes of one element
	Count  int     // 0: scalar; n > 0: array of n; -1: flexible array member
	Elem   *Layout // element struct for struct arrays; nil for __leN
	Doc    string
	// CType is the C type of a field of an ABILayout (a structure another
	// component defines); empty in npfnic's own layouts, whose types
	// follow from Size and Elem.
	CType string
}

// U8 is an 8-bit field (C __u8).
type U8 struct{ Field }

// Le16 is a little-endian 16-bit field (C __le16).
type Le16 struct{ Field }

// Le32 is a little-endian 32-bit field (C __le32).
type Le32 struct{ Field }

// Le64 is a little-endian 64-bit field (C __le64).
type Le64 struct{ Field }

// Be32 is a big-endian 32-bit field (C __be32): a value in network byte
// order, such as immediate data.
type Be32 struct{ Field }

// Get decodes the field from b, which holds the whole structure.
func (f U8) Get(b []byte) uint8 { return b[f.Offset] }

// Put encodes v into the field of b.
func (f U8) Put(b []byte, v uint8) { b[f.Offset] = v }

// Get decodes the field from b, which holds the whole structure.
func (f Le16) Get(b []byte) uint16 { return binary.LittleEndian.Uint16(b[f.Offset:]) }

// Put encodes v into the field of b.
func (f Le16) Put(b []byte, v uint16) { binary.LittleEndian.PutUint16(b[f.Offset:], v) }

// Get decodes the field from b, which holds the whole structure.
func (f Le32) Get(b []byte) uint32 { return binary.LittleEndian.Uint32(b[f.Offset:]) }

// Put encodes v into the field of b.
func (f Le32) Put(b []byte, v uint32) { binary.LittleEndian.PutUint32(b[f.Offset:], v) }

// Get decodes the field from b, which holds the whole structure.
func (f Le64) Get(b []byte) uint64 { return binary.LittleEndian.Uint64(b[f.Offset:]) }

// Put encodes v into the field of b.
func (f Le64) Put(b []byte, v uint64) { binary.LittleEndian.PutUint64(b[f.Offset:], v) }

// Get decodes the field from b, which holds the whole structure.
func (f Be32) Get(b []byte) uint32 { return binary.BigEndian.Uint32(b[f.Offset:]) }

// Put encodes v into the field of b.
func (f Be32) Put(b []byte, v uint32) { binary.BigEndian.PutUint32(b[f.Offset:], v) }

func u8(name string, off int, doc string) U8 {
	return U8{Field{Name: name, Offset: off, Size: 1, Doc: doc}}
}
func le16(name string, off int, doc string) Le16 {
	return Le16{Field{Name: name, Offset: off, Size: 2, Doc: doc}}
}
func le32(name string, off int, doc string) Le32 {
	return Le32{Field{Name: name, Offset: off, Size: 4, Doc: doc}}
}
func le64(name string, off int, doc string) Le64 {
	return Le64{Field{Name: name, Offset: off, Size: 8, Doc: doc}}
}

// rsvd32 is a reserved array of n __le32 (the device writes zeros, the
// driver must ignore it).
func rsvd32(off, n int) Field {
	return Field{Name: "rsvd", Offset: off, Size: 4, Count: n, Doc: "reserved, zero"}
}

// Layout is a structure shared with the driver: C struct npfnic_<Name>.
type Layout struct {
	Name   string
	Size   int // sizeof; a flexible array member adds nothing
	Doc    string
	Fields []Field
	Writer Side
}

// Side is who writes a shared structure.
type Side uint8

const (
	WrittenByDriver Side = iota + 1 // the device only reads it
	WrittenByDevice                 // the driver only reads it
	// WrittenPerField: each field's Doc starts with "driver: " or
	// "device: ", its writer (reserved fields: "reserved").
	WrittenPerField
)

// Structure sizes in bytes.
const (
	TxDescSize       = 16
	RxDescSize       = 16
	PairStatusSize   = 64
	StatusHeaderSize = 64 // struct npfnic_status_block without the pairs
	PairNotifySize   = 16
)

// TX descriptor fields. The device never writes a TX descriptor back:
// qp_status.tx_head is the completion. mss, csum_start and csum_offset
// (interface 2.1, reserved zero before) are read from the first descriptor
// of a frame only, with its offload flags.
var (
	TxDescAddr       = le64("addr", 0, "guest address of the segment")
	TxDescLen        = le16("len", 8, "segment length in bytes")
	TxDescFlags      = le16("flags", 10, "NPFNIC_TXD_*")
	TxDescMSS        = le16("mss", 12, "first descriptor, TSO: TCP payload bytes per segment")
	TxDescCsumStart  = u8("csum_start", 14, "first descriptor, CSUM/TSO: checksum start (TSO: TCP header)")
	TxDescCsumOffset = u8("csum_offset", 15, "first descriptor, CSUM: checksum field offset from csum_start")
)

// TxDesc is struct npfnic_tx_desc.
var TxDesc = Layout{"tx_desc", TxDescSize,
	"TX descriptor: one segment of a frame; NPFNIC_TXD_EOP marks the last. Offload flags and fields count in the first one.",
	[]Field{TxDescAddr.Field, TxDescLen.Field, TxDescFlags.Field, TxDescMSS.Field, TxDescCsumStart.Field, TxDescCsumOffset.Field}, WrittenByDriver}

// RX descriptor fields.
var (
	RxDescAddr   = le64("addr", 0, "driver: guest address of the buffer")
	RxDescBufLen = le16("buf_len", 8, "driver: buffer size in bytes")
	RxDescPktLen = le16("pkt_len", 10, "device: frame length")
	RxDescStatus = le16("status", 12, "device: NPFNIC_RXD_*")
	// RxDescGSOSize (interface 2.11, reserved zero before) is written in
	// the first descriptor of a chain, 0 in every other descriptor.
	RxDescGSOSize = le16("gso_size", 14, "device: first descriptor of a chain: TCP payload bytes per segment; 0 otherwise")
)

// RxDesc is struct npfnic_rx_desc.
var RxDesc = Layout{"rx_desc", RxDescSize,
	"RX descriptor: one buffer, one frame, or one buffer of a chain (large receive). The device writes pkt_len, status and gso_size, then advances rx_head.",
	[]Field{RxDescAddr.Field, RxDescBufLen.Field, RxDescPktLen.Field, RxDescStatus.Field, RxDescGSOSize.Field}, WrittenPerField}

// Per-pair status fields (device to driver).
var (
	PairStatusTxHead        = le32("tx_head", 0, "free-running count of TX descriptors consumed (frames sent or dropped)")
	PairStatusRxHead        = le32("rx_head", 4, "free-running count of RX descriptors filled")
	PairStatusError         = le32("error", 8, "NPFNIC_QERR_*, 0 none; the pair stopped")
	PairStatusErrorInfo     = le32("error_info", 12, "ring index of the offending descriptor, or the bad tail value")
	PairStatusRxDropsNoBuf  = le32("rx_drops_no_buf", 16, "frames dropped: no RX buffer posted")
	PairStatusRxDropsTooBig = le32("rx_drops_too_big", 20, "frames dropped: larger than the posted buffer")
	PairStatusTxDropsBadLen = le32("tx_drops_bad_len", 24, "TX frames dropped: bad length, too many segments or a bad offload request")
	PairStatusTxTSOFrames   = le32("tx_tso_frames", 28, "TSO super-packets segmented")
	PairStatusRxWireStalls  = le32("rx_wire_stalls", 32, "times RX stopped taking frames from the wire for lack of buffers")
	// Interface 2.2: network page faults.
	PairStatusRxFaults      = le32("rx_faults", 36, "RX buffer translation faults")
	PairStatusRxBackup      = le32("rx_backup", 40, "frames stored in the backup ring")
	PairStatusRxFaultDrops  = le32("rx_fault_drops", 44, "frames dropped on a fault (drop/pin policy, bitmap or backup ring exhausted)")
	PairStatusTxFaults      = le32("tx_faults", 48, "TX buffer faults (the pair stalled for a page response)")
	PairStatusTxFaultErrors = le32("tx_fault_errors", 52, "TX frames dropped: a buffer that can not be translated")
	PairStatusRxHeadOffset  = le32("rx_head_offset", 56, "backup policy: head_offset, descriptors past rx_head already used")
	PairStatusRxBmIndex     = le32("rx_bm_index", 60, "backup policy: bm_index, the bitmap index of rx_head")
)

// PairStatus is struct npfnic_pair_status.
var PairStatus = Layout{"pair_status", PairStatusSize,
	"Status of one queue pair, written by the device into the status block.",
	[]Field{PairStatusTxHead.Field, PairStatusRxHead.Field, PairStatusError.Field, PairStatusErrorInfo.Field,
		PairStatusRxDropsNoBuf.Field, PairStatusRxDropsTooBig.Field, PairStatusTxDropsBadLen.Field,
		PairStatusTxTSOFrames.Field, PairStatusRxWireStalls.Field, PairStatusRxFaults.Field, PairStatusRxBackup.Field,
		PairStatusRxFaultDrops.Field, PairStatusTxFaults.Field, PairStatusTxFaultErrors.Field,
		PairStatusRxHeadOffset.Field, PairStatusRxBmIndex.Field}, WrittenByDevice}

// Notify area fields (interface 2.14, NotifyDoc).
var (
	PairNotifyRxTail = le32("rx_tail", 0, "driver: free-running count of RX buffers posted, as NPFNIC_PAIR_RX_TAIL")
	PairNotifyIRQArm = le32("irq_arm", 4, "driver: free-running count of arms; each new value arms the pair's vector once")
	PairNotifyRxKick = le32("rx_kick", 8, "device: 1 while the device waits for an NPFNIC_PAIR_RX_TAIL doorbell")
)

// PairNotify is struct npfnic_pair_notify.
var PairNotify = Layout{"pair_notify", PairNotifySize,
	"Notify area of one queue pair (NPFNIC_FEAT_NOTIFY), at NPFNIC_PAIR_NOTIFY_LO/HI: what the driver would otherwise write to RX_TAIL and IRQ_ARM.",
	[]Field{PairNotifyRxTail.Field, PairNotifyIRQArm.Field, PairNotifyRxKick.Field, rsvd32(12, 1)}, WrittenPerField}

// Status block header fields.
var (
	StatusLink  = le32("link", 0, "NPFNIC_LINK_UP")
	StatusError = le32("error", 4, "NPFNIC_DEVERR_*, 0 none")
	// Interface 2.2: the backup ring.
	StatusBackupHead = le32("backup_head", 8, "free-running count of backup entries filled")
	StatusBackupFull = le32("backup_full", 12, "faulting frames dropped because the backup ring had no buffer")
	StatusTailEvents = le32("tail_events", 16, "RX_TAIL_IRQ interrupts raised")
)

// StatusBlock is struct npfnic_status_block: the 64-byte header followed
// by NPFNIC_PAIR_MAX struct npfnic_pair_status (the flexible array pair[]), in
// all NPFNIC_STATUS_BLOCK_SIZE bytes written by the device.
var StatusBlock = Layout{"status_block", StatusHeaderSize,
	"Status block (device to driver), at NPFNIC_REG_STATUS_ADDR; NPFNIC_STATUS_BLOCK_SIZE bytes in all.",
	[]Field{StatusLink.Field, StatusError.Field, StatusBackupHead.Field, StatusBackupFull.Field,
		StatusTailEvents.Field, rsvd32(20, 11),
		{Name: "pair", Offset: StatusHeaderSize, Size: PairStatusSize, Count: -1, Elem: &PairStatus, Doc: "NPFNIC_PAIR_MAX entries"}}, WrittenByDevice}

// Layouts lists the shared structures, each after the ones it contains.
var Layouts = []*Layout{&TxDesc, &RxDesc, &PairStatus, &StatusBlock, &BackupDesc, &PairNotify}

// StatusPairOffset is the offset of pair q's struct npfnic_pair_status in the
// status block.
func StatusPairOffset(q int) int { return StatusHeaderSize + q*PairStatusSize }
