package hw

// RDMADoc is the contract of the RDMA interface (interface 2.4).
const RDMADoc = `The RDMA engine runs InfiniBand RC over RoCEv2 on the function's port; FEATURES.RDMA
says whether the device has it. The queues applications use are rdma_rxe's user-ABI queues (see
"RDMA queues"): the driver allocates each queue buffer in DMA-able memory contiguous in IOVA, user
space (librxe) mmaps it, and the device reads the send and receive queues and writes the
completion queues itself. What is npfnic's own: the registers below, the command queue, the event
queue and the RDMA status block.

Bring-up. The driver allocates the RDMA status block (64 bytes, 64-byte aligned), the command queue
(CMDQ_SIZE entries of 64 bytes) and the event queue (EQ_SIZE entries of 16 bytes), writes their
addresses and sizes, then RDMA_CTRL = ENABLE. RDMA_CTRL = RESET destroys every queue pair,
completion queue, memory region and GID and disables the engine; BUSY reads set until nothing it
started touches guest memory any more (see Quiesce).

Commands. The driver fills a 64-byte command (the header: opcode, flags, status =
NPFNIC_RDMA_CMD_PENDING, handle; then the opcode's fields), and moves CMDQ_TAIL. The device runs
commands in order, off the register path, writes each one's status (and QUERY_QP's results) into the
entry, then moves cmdq_head in the status block; with NPFNIC_RDMA_CMD_FLAG_EVENT it also posts a
CMD_DONE event. Objects are named by handles the driver chooses: the QPN (2..NPFNIC_RDMA_QPN_MAX,
the QP number on the wire), the CQN (0..NPFNIC_RDMA_MAX_CQ-1), the MR key (lkey = rkey, any value but
0) and the GID index (0..NPFNIC_RDMA_MAX_GID-1). DESTROY_QP and DEREG_MR complete only once no DMA
of the device uses the queue pair's queues or the region's pages: the driver may free them then.

Events. The device writes 16-byte events into the event queue, moves eq_tail in the status block,
then raises EQ_VECTOR if the driver armed it with EQ_ARM (once per arm). The driver consumes events
and returns their slots with EQ_HEAD. A completion queue posts one CQ_COMP event per CQ_ARM, when a
completion (a solicited one, or an error, if the arm asked for solicited only) lands in it after the
arm, or at once if such a completion is in its ring unconsumed (behind consumer_index) when the arm
arrives: CQ_ARM is a posted write and librxe polls the CQ right after arming, so a completion that
lands between its poll and the arm would otherwise raise no event. An event queue that overflows stops the engine's events (NPFNIC_RDMAERR_EQ_OVERFLOW).

Send queues. librxe writes the entry, moves the send queue's producer index, then calls the kernel,
whose driver writes the QPN to SQ_DOORBELL. The device fetches entries in order from its own
consumer index, moves that index as entries complete, and writes completions to the QP's send CQ.
Receive queues need no doorbell: the device takes the next entry when a message arrives.

Memory regions. The device reaches an MR's pages only through address translation: REG_MR names a
PASID whose I/O page tables map the region's virtual addresses. A page missing from them is a
translation fault like any other (page request, page response). With FLAG_IMPLICIT (interface
2.10) the region is the PASID's whole address space: an implicit on-demand paging MR, whose
pages the driver resolves as they fault. What a fault does to an RC
transfer is the RC engine's policy: a receive fault is answered with an RNR NAK and the sender
retransmits.

Untrusted queues. Every index, key, length and opcode the device reads from the user-writable rxe
queues is checked: the rings' geometry is the one registered (never the header in guest memory), a
bad entry completes with its IBV_WC error status on the CQ in its turn and moves the QP to the error
state (a QP_FATAL event), and nothing is read or written outside the registered buffers and the MR
an entry names. Another QP, and Ethernet, are not affected.

Rules the commands leave implicit. A slot must hold its entry: a send slot at least 208 + max(16 x
max_send_sge, max_inline) bytes, a receive slot 40 + 16 x max_recv_sge, a CQ slot 48 (else
CMDERR_PARAM); one slot stays empty, so a queue holds slots - 1 entries (at most MAX_QP_WR - 1 and
MAX_CQE - 1). A PD needs no command: it exists while a QP or MR names it. MODIFY_QP ignores mask bits
other than NPFNIC_RDMA_QP_ATTR_* (IB_QP_PKEY_INDEX, IB_QP_PORT, ...: one port, one P_Key); an AV
needs an IPv4-mapped dgid and a sgid_index naming an IPv4-mapped GID (else CMDERR_PARAM). Send
entries wait in the ring until the QP is in RTS. MODIFY_QP to RESET drops the work requests the
device had taken, without completions, and moves consumer_index past them; the indices are not
reset. A QP in ERR completes what is posted with IBV_WC_WR_FLUSH_ERR: send entries at SQ_DOORBELL,
receive entries whenever the engine runs. QP_FATAL comes when the device moved the QP to ERR (not
after MODIFY_QP to ERR), after QP_REQ_ERR or QP_ACCESS_ERR when the status is
IBV_WC_REM_INV_REQ_ERR or IBV_WC_REM_ACCESS_ERR. A CQ takes no completion after its CQ_ERR.
Clearing ENABLE without RESET stops the command and event queues only. Without bus mastering the
engine does nothing and drops received RoCEv2 frames.

On-demand paging (interface 2.5, FEATURES.RDMA_ODP). The I/O page tables of an MR's PASID need not
map its pages: an access to a page without a present PTE (or a write to one without write
permission) is a fault, and the device asks for the page with a page request through PRI (the
function's page request queue, as the Ethernet side's faults): PASID valid, the MR's PASID, the page
VA, R/W as the access needs, queue = the QPN's low 16 bits, desc = the QPN, kind FAULT_KIND_RC_RECV
(the responder placing a SEND or RDMA WRITE, or reading for an RDMA READ) or FAULT_KIND_RC_SEND
(the requester gathering a send's payload or scattering an RDMA READ response). One page request is
outstanding per QP, role and access at a time. What the QP does meanwhile:
  - responder, placing a SEND or WRITE: under RDMA_RECV_FAULT = RNR, the request is answered with an
    RNR NAK carrying the QP's min_rnr_timer, and the sender's retransmission is accepted once the
    page response came (also in the middle of a multi-packet message: the NAK names the faulting
    packet's PSN); under DROP, the request and what follows are dropped until the response, and the
    sender recovers by its local ACK timeout; under HOLD (interface 2.12), the request and up to 256
    that arrive behind it wait in the device and are placed, in order, once the response came (the
    sender sees a late ACK: for peers whose RNR retry count is 0), those beyond dropped;
  - responder, reading for an RDMA READ: its responses from the faulting one on, and the requests
    that arrive behind them, wait for the response;
  - requester: a send whose payload faults stalls its send queue until the response; an RDMA READ
    response whose target faults is dropped and the rest of the READ requested again.
A response Success retries the access (a fault again raises a new request); Invalid Request fails it
with the errors of an access outside the MR: IBV_WC_LOC_ACCESS_ERR at the requester, a remote access
error NAK at the responder. With PRI not enabled, or stopped, a fault fails at once in the same way,
and so does a request PRI abandons (Response Failure, PRI reset, function reset). In detail: the
requester's work request completes with IBV_WC_LOC_ACCESS_ERR in its turn (after the ones posted
before it); the responder NAKs the faulting PSN at once (the sender's work request completes with
IBV_WC_REM_ACCESS_ERR), a SEND's receive entry completes with IBV_WC_LOC_ACCESS_ERR; the QP goes to
the error state (QP_FATAL). A request PRI has no room for (credits, group index, queue space) waits
in the device, never dropped. RDMA_RECV_FAULT (bits 1:0, 3 reading back 0; bits 31:2 read 0) applies from the next fault;
RDMA_CTRL = RESET leaves it as it is, DEVICE_RESET returns it to RNR. The device does not wait for
page responses to drain before it completes an invalidation: the driver may invalidate while it
holds a request unanswered. Nor do DEREG_MR, DESTROY_QP and RESET wait for them: a response that
comes after them is harmless (no DMA follows it).

Atomics (interface 2.6, FEATURES.RDMA_ATOMIC). A send entry with IBV_WR_ATOMIC_CMP_AND_SWP or
IBV_WR_ATOMIC_FETCH_AND_ADD reads wr.wr.atomic (remote_addr, compare_add, swap, rkey) and returns the
original 8 bytes into its SGL, which must hold exactly 8 bytes (dma.length 8, not inline; else
IBV_WC_LOC_LEN_ERR); it completes with IBV_WC_COMP_SWAP or IBV_WC_FETCH_ADD, byte_len 8. Atomics count
with RDMA READs against max_rd_atomic and wait for IBV_SEND_FENCE like them. The responder executes
an atomic only on a QP whose access has RDMA_ACCESS_REMOTE_ATOMIC (else an invalid request NAK), on
8 bytes aligned to 8 (else an invalid request NAK) inside an MR registered with
RDMA_ACCESS_REMOTE_ATOMIC (else a remote access NAK). The 8 bytes are little-endian; the read, the
change and the write are one step with respect to every other atomic of the device (the guarantee
of IBV_ATOMIC_HCA, which is what the device offers: not with respect to the CPUs). The responder
remembers its last max_dest_rd_atomic READs and atomics: a duplicate atomic is answered with the
value it found the first time, never executed twice. A fault on the 8 bytes (read or write) is a
receive fault: nothing is changed, and the retransmission executes it once the page is present.

Shared receive queues (interface 2.7, FEATURES.RDMA_SRQ). CREATE_SRQ registers an rxe queue buffer of
receive entries (struct rxe_recv_wqe, as a receive queue's) that librxe posts to, for the QPs of its
PD created with FLAG_SRQ naming it. A QP takes the next entry when a message needs one, whichever QP
it is, and moves the SRQ's consumer index at once (rdma_rxe's order): a taken entry belongs to the QP,
completes on its receive CQ (flushed with it), and is no longer the SRQ's. A malformed entry completes
with its error on the QP that took it, which goes to the error state as with its own receive queue.
An SRQ is never flushed: its entries stay posted when its QPs go to the error state or are destroyed.
Its limit (below its slots), armed by CREATE_SRQ or MODIFY_SRQ, posts one SRQ_LIMIT event (and
disarms) when a QP takes an entry and fewer than limit entries are left posted, as rdma_rxe. The
event's info is the number of MODIFY_SRQ commands the SRQ had run when that limit was armed (0: the
one CREATE_SRQ armed), so that a driver that armed it again since knows the event is the old arm's
(events come from the receive path, not in order with commands). A ring that
cannot be read (outside guest memory, or once stopped) posts SRQ_ERR and gives no more entries: QPs
then answer SENDs with RNR NAKs. DESTROY_SRQ fails with CMDERR_BUSY while a QP uses it, and completes
once no DMA of the device reads its ring.

Message alarm. RDMA_MSG_ALARM = N arms a countdown of the requests the responder executes (those
messages_in counts); the one that reaches 0 posts a MSG_ALARM event (handle 0) and disarms it. A
write right after an alarm went off counts from the request that set it off: the requests executed
since count towards N (if they make N already, the next request sets it off), so gaps chain exactly
however late the driver answers. Any other write replaces the countdown, 0 cancels it, a read
returns what is left, RDMA_CTRL RESET cancels it. The driver draws synthetic receive faults per
message with it: at each alarm it arms the next gap, then evicts a page.

Counters. QUERY_STATS (handle 0, else CMDERR_HANDLE) writes the engine's counters
(NPFNIC_RDMA_STAT_*, free-running since RDMA_CTRL = RESET or DEVICE_RESET, 64 bits each,
little-endian, in NPFNIC_RDMA_STAT_NAMES order) into a buffer in guest memory: the first min(count,
NPFNIC_RDMA_STATS) of them; count 0 writes nothing. A buffer that is not 8-byte aligned or not in
guest memory fails the command with CMDERR_PARAM.`

// RDMA registers in BAR0 (BlockRDMA).
const (
	RegRDMACtrl     = 0x0a00 // RW: RDMACtrlEnable latches the registers below; RDMACtrlReset destroys every object
	RegRDMAStatusLo = 0x0a04 // RW: RDMA status block IOVA, bits 31:0 (64-byte aligned)
	RegRDMAStatusHi = 0x0a08 // RW: bits 63:32
	RegCmdqBaseLo   = 0x0a0c // RW: command queue IOVA, bits 31:0 (64-byte aligned)
	RegCmdqBaseHi   = 0x0a10 // RW: bits 63:32
	RegCmdqSize     = 0x0a14 // RW: command queue entries, power of two, RDMAQueueSizeMin..Max
	RegCmdqTail     = 0x0a18 // WO: doorbell: free-running count of commands posted
	RegEQBaseLo     = 0x0a1c // RW: event queue IOVA, bits 31:0 (16-byte aligned)
	RegEQBaseHi     = 0x0a20 // RW: bits 63:32
	RegEQSize       = 0x0a24 // RW: event queue entries, power of two, RDMAQueueSizeMin..Max
	RegEQHead       = 0x0a28 // WO: doorbell: free-running count of events consumed
	RegEQVector     = 0x0a2c // RW: MSI-X vector of the event queue
	RegEQArm        = 0x0a30 // WO: write 1: raise EQ_VECTOR once for the next event (or now, if events are pending)
	RegSQDoorbell   = 0x0a34 // WO: a QPN whose rxe send queue has new entries
	RegCQArm        = 0x0a38 // WO: CQN | RDMACQArmSolicited: post one CQ_COMP event for the next completion
	RegRDMAError    = 0x0a3c // RO: NPFNIC_RDMAERR_*, 0 none
	// RegRDMARecvFault (interface 2.5) is the responder's policy for a
	// receive fault: RDMARecvFaultRNR, RDMARecvFaultDrop or (interface
	// 2.12) RDMARecvFaultHold, in bits 1:0 (the rest reads 0; 3 reads
	// back 0, RNR), from the next fault on. RDMA_CTRL.RESET keeps it.
	RegRDMARecvFault = 0x0a40 // RW
	// RegRDMAMsgAlarm (interface 2.5): write N to have the engine post one
	// MSG_ALARM event after the responder executed N more requests (the
	// messages_in counter; right after an alarm, counted from the request
	// that set it off); 0 cancels. Reads the requests still to go.
	RegRDMAMsgAlarm = 0x0a44 // RW
	// RegRDMAPrefault (interface 2.9) is how many pages a memory region's
	// fault asks for in one page request group: the faulting page and
	// those after it that the faulting request goes on to touch (the rest
	// of its SGE, of an RDMA WRITE, of a READ's response), at most
	// RDMAMaxPrefault and the PRI allocation. 1 (the reset value): the
	// faulting page alone. A write of 0 reads back 1. RDMA_CTRL.RESET
	// keeps it.
	RegRDMAPrefault = 0x0a48 // RW
)

// RDMA values.
const (
	// RDMAVector is the reset value of EQ_VECTOR: the tenth MSI-X vector.
	RDMAVector = 9

	RDMACtrlEnable = 1 << 0 // latch the status block, command and event queue registers; heads and tails to 0
	RDMACtrlReset  = 1 << 1 // write 1: disable, destroy every QP, CQ, MR and GID, clear errors (reads back 0)
	// RDMACtrlBusy (read only) is set while the RDMA engine may still DMA:
	// enabled, or disabled with commands, queue pairs or completions still
	// touching guest memory (see Quiesce).
	RDMACtrlBusy = 1 << 31

	RDMACQArmSolicited = 1 << 31 // CQ_ARM: only a solicited completion (or an error) triggers the event

	RDMARecvFaultRNR  = 0 // RDMA_RECV_FAULT: answer a receive fault with an RNR NAK (the default)
	RDMARecvFaultDrop = 1 // RDMA_RECV_FAULT: drop the request; the sender's ACK timeout recovers
	// RDMARecvFaultHold (interface 2.12): keep the request, and up to 256
	// behind it, in the device until the page arrives, then place them:
	// for peers whose RNR retry count is 0 (tgt's iSER initiators).
	RDMARecvFaultHold = 2
	RDMARecvFaultMask = 3

	RDMAStatusAlign  = 64
	RDMAStatusSize   = 64
	RDMACmdSize      = 64
	RDMAEventSize    = 16
	RDMAQueueSizeMin = 8
	RDMAQueueSizeMax = 4096

	// Limits the device enforces (and the driver reports in query_device).
	RDMAQPNMax     = 1<<24 - 1 // QPN: 2..RDMAQPNMax, and 1 for the GSI QP (a UD QP; 0 is never one)
	RDMAMaxQP      = 256       // live queue pairs
	RDMAMaxCQ      = 256       // live completion queues
	RDMAMaxSRQ     = 256       // live shared receive queues (SRQN 0..RDMAMaxSRQ-1)
	RDMAMaxMR      = 4096      // live memory regions
	RDMAMaxMW      = 4096      // live memory windows
	RDMAMaxGID     = 16        // GID table entries
	RDMAMaxSGE     = 32        // scatter/gather entries per WQE
	RDMAMaxInline  = 256       // inline bytes per send WQE
	RDMAMaxQPWR    = 16384     // slots of a send or receive queue
	RDMAMaxCQE     = 65536     // slots of a completion queue
	RDMAMaxMRSize  = 1 << 40   // bytes of one MR
	RDMAMaxMsgSize = 1 << 31   // bytes of one message
	// RDMAMaxRdAtomic is rdma_rxe's 128 (since interface 2.9; 16
	// before): a peer that asks for as many as its own device holds, as
	// perftest's rdma_cm connections do, is answered, not refused.
	RDMAMaxRdAtomic = 128 // RDMA READs and atomics outstanding per QP, each way
	// RDMAMaxFastRegPages is the longest page list of a fast registration
	// region (ALLOC_MR's max_pages).
	RDMAMaxFastRegPages = 512
	// A fast registration's pages are 4 KiB (shift 12) to 1 GiB (30).
	RDMAFastRegMinPageShift = 12
	RDMAFastRegMaxPageShift = 30
	// RDMAMaxPrefault bounds RDMA_PREFAULT: 2 MiB of 4 KiB pages.
	RDMAMaxPrefault = 512
)

// Command opcodes (RDMACmdOpcode).
const (
	RDMACmdCreateCQ  = 1
	RDMACmdDestroyCQ = 2
	RDMACmdCreateQP  = 3
	RDMACmdModifyQP  = 4
	RDMACmdQueryQP   = 5
	RDMACmdDestroyQP = 6
	RDMACmdRegMR     = 7
	RDMACmdDeregMR   = 8
	RDMACmdAddGID    = 9
	RDMACmdDelGID    = 10
	// RDMACmdQueryStats (interface 2.5) writes the counters (RDMACounters,
	// 64 bits each, in their order) to the buffer it names.
	RDMACmdQueryStats = 11
	// Shared receive queues (interface 2.7): handle the SRQN,
	// 0..RDMAMaxSRQ-1.
	RDMACmdCreateSRQ  = 12
	RDMACmdModifySRQ  = 13
	RDMACmdDestroySRQ = 14
	// Memory windows (interface 2.8, FEATURES.RDMA_MW): ALLOC_MW's handle
	// is the window's first R_Key, DEALLOC_MW's any R_Key of it: a window
	// is known by its index, R_Key >> 8, 1..RDMAQPNMax, unique among the
	// windows.
	RDMACmdAllocMW   = 15
	RDMACmdDeallocMW = 16
	// RDMACmdResizeCQ (interface 2.8, FEATURES.RDMA_RESIZE_CQ) moves a CQ
	// to a new ring (struct npfnic_rdma_cmd_create_cq's fields): the
	// completions not consumed yet go to its first slots, its consumer
	// index is written 0 and its producer index past them; the old ring is
	// not touched once the command completed.
	RDMACmdResizeCQ = 17
	// RDMACmdAllocMR (interface 2.9, FEATURES.RDMA_FAST_REG) creates a
	// region for fast registration, free (no key reaches it) until a
	// REG_MR send entry registers it; its handle is the key, and its index
	// (key >> 8) stays the region's while REG_MR entries change the low
	// byte. DEREG_MR with the same handle destroys it.
	RDMACmdAllocMR = 18
)

// Command flags (RDMACmdFlags).
const (
	RDMACmdFlagEvent = 1 << 0 // post a CMD_DONE event once the command ran
	// RDMACmdFlagSRQ (CREATE_QP, interface 2.7): the QP takes its receives
	// from a shared receive queue; the entry is a struct
	// npfnic_rdma_cmd_create_qp_srq.
	RDMACmdFlagSRQ = 1 << 1
	// RDMACmdFlagUD and RDMACmdFlagUC (CREATE_QP, interface 2.8): the
	// QP's type is UD or UC, not RC; at most one of them.
	RDMACmdFlagUD = 1 << 2
	RDMACmdFlagUC = 1 << 3
	// RDMACmdFlagPhysical (REG_MR, interface 2.8): the region's addresses
	// are IOVAs the device reaches without translation, as the rings':
	// the kernel's DMA MR (its PD's local_dma_lkey). pasid is ignored.
	RDMACmdFlagPhysical = 1 << 4
	// RDMACmdFlagImplicit (REG_MR, interface 2.10,
	// FEATURES.RDMA_IMPLICIT_ODP): the region is the PASID's whole
	// address space, as an implicit on-demand paging MR is: va and length
	// must be 0 and access must have ACCESS_ON_DEMAND; not with
	// FLAG_PHYSICAL. An access at any address passes the region's bounds
	// check (without wrapping past 2^64) and is then translated like any
	// region's: an address the page tables do not map faults.
	RDMACmdFlagImplicit = 1 << 5
)

// Command status (RDMACmdStatus), written by the device.
const (
	RDMACmdOK          = 0
	RDMACmdErrOpcode   = 1 // unknown opcode
	RDMACmdErrHandle   = 2 // handle out of range, already in use (create) or unknown (others)
	RDMACmdErrParam    = 3 // a parameter out of range: queue geometry, sizes, access, a CQ that does not exist
	RDMACmdErrBusy     = 4 // the object is in use (a CQ with QPs attached)
	RDMACmdErrState    = 5 // a QP state transition the IB spec does not allow
	RDMACmdErrResource = 6 // the device's limit for that kind of object is reached
	// RDMACmdPending is what the driver writes into status before posting:
	// the device overwrites it.
	RDMACmdPending = 0xffffffff
)

// Event types (RDMAEventType).
const (
	RDMAEventCmdDone     = 1  // handle: the command's queue index (free-running)
	RDMAEventCQComp      = 2  // handle: CQN (armed, and a completion landed)
	RDMAEventCQErr       = 3  // handle: CQN; the CQ overran (full when a completion was due) and stopped
	RDMAEventQPFatal     = 4  // handle: QPN; the QP went to the error state (info: NPFNIC_RDMA_WC status that caused it)
	RDMAEventQPReqErr    = 5  // handle: QPN; the remote side reported an invalid request
	RDMAEventQPAccessErr = 6  // handle: QPN; the remote side reported a remote access error
	RDMAEventCommEst     = 7  // handle: QPN; first packet received in RTR
	RDMAEventMsgAlarm    = 8  // handle 0: the requests RDMA_MSG_ALARM asked for were executed (interface 2.5)
	RDMAEventSRQLimit    = 9  // handle: SRQN; fewer entries posted than its armed limit (interface 2.7); disarmed; info: the arm's MODIFY_SRQ count
	RDMAEventSRQErr      = 10 // handle: SRQN; its ring could not be read: it gives no more entries (interface 2.7)
)

// RDMA engine errors (RDMA_ERROR and the status block's error).
const (
	RDMAErrBadStatusAddr = 1 // status block outside guest memory or misaligned
	RDMAErrBadCmdq       = 2 // command queue registers invalid, or a command outside guest memory
	RDMAErrBadCmdqTail   = 3 // CMDQ_TAIL moved backwards or past the queue's size
	RDMAErrBadEQ         = 4 // event queue registers invalid, or an event outside guest memory
	RDMAErrBadEQHead     = 5 // EQ_HEAD moved past eq_tail
	RDMAErrEQOverflow    = 6 // the event queue was full when an event was due; the engine stopped posting events
)

// QP states (RDMACmdModifyQP.State, RDMACmdQueryQP results): enum
// ib_qp_state.
const (
	RDMAQPReset = 0
	RDMAQPInit  = 1
	RDMAQPRTR   = 2
	RDMAQPRTS   = 3
	RDMAQPSQD   = 4
	RDMAQPSQE   = 5
	RDMAQPErr   = 6
)

// MODIFY_QP attribute mask bits (RDMACmdModifyQP.Mask): enum ib_qp_attr_mask,
// so the driver passes the core's mask through. This is the one definition:
// package ibrc's AttrMask and the hostile tool take their values from here.
const (
	RDMAQPAttrState           = 1 << 0
	RDMAQPAttrAccessFlags     = 1 << 3
	RDMAQPAttrPKeyIndex       = 1 << 4 // ignored: one P_Key
	RDMAQPAttrPort            = 1 << 5 // ignored: one port
	RDMAQPAttrQKey            = 1 << 6 // UD QPs (interface 2.8): qkey
	RDMAQPAttrAV              = 1 << 7 // dgid, dmac, sgid_index, hop_limit, traffic_class, flow_label
	RDMAQPAttrPathMTU         = 1 << 8
	RDMAQPAttrTimeout         = 1 << 9
	RDMAQPAttrRetryCnt        = 1 << 10
	RDMAQPAttrRNRRetry        = 1 << 11
	RDMAQPAttrRQPSN           = 1 << 12
	RDMAQPAttrMaxQPRdAtomic   = 1 << 13
	RDMAQPAttrMinRNRTimer     = 1 << 15
	RDMAQPAttrSQPSN           = 1 << 16
	RDMAQPAttrMaxDestRdAtomic = 1 << 17
	RDMAQPAttrDestQPN         = 1 << 20
)

// MR access flags (RDMACmdRegMR.Access): enum ib_access_flags.
const (
	RDMAAccessLocalWrite  = 1 << 0
	RDMAAccessRemoteWrite = 1 << 1
	RDMAAccessRemoteRead  = 1 << 2
	// RDMAAccessRemoteAtomic (interface 2.6): atomics from the peer.
	RDMAAccessRemoteAtomic = 1 << 3
	// RDMAAccessMWBind (interface 2.8): memory windows may be bound to
	// the region.
	RDMAAccessMWBind   = 1 << 4
	RDMAAccessOnDemand = 1 << 6
)

// Command header, common to every opcode.
var (
	RDMACmdOpcode = u8("opcode", 0, "driver: NPFNIC_RDMA_CMD_*")
	RDMACmdFlags  = u8("flags", 1, "driver: NPFNIC_RDMA_CMD_FLAG_*")
	rdmaCmdRsvd   = le16("rsvd", 2, "reserved, zero")
	RDMACmdStatus = le32("status", 4, "device: NPFNIC_RDMA_CMD_OK or NPFNIC_RDMA_CMDERR_*; the driver writes NPFNIC_RDMA_CMD_PENDING before posting")
	RDMACmdHandle = le32("handle", 8, "driver: the QPN, CQN, MR key or GID index the command acts on")
)

// CREATE_CQ: a completion queue over an rxe queue buffer.
var (
	RDMACreateCQBuf      = le64("buf", 16, "driver: IOVA of the rxe queue buffer (struct rxe_queue_buf, 384-byte header then the slots)")
	RDMACreateCQSlots    = le32("slots", 24, "driver: slots, a power of two, 2..NPFNIC_RDMA_MAX_CQE (one stays empty)")
	RDMACreateCQLog2Elem = le32("log2_elem_size", 28, "driver: log2 of the slot size (at least 6: a 48-byte struct ib_uverbs_wc)")
)

// CREATE_QP: an RC queue pair over an rxe send queue and receive queue.
var (
	RDMACreateQPPD         = le32("pd", 12, "driver: protection domain number; the QP may use only MRs of this PD")
	RDMACreateQPSQBuf      = le64("sq_buf", 16, "driver: IOVA of the send queue's rxe queue buffer")
	RDMACreateQPSQSlots    = le32("sq_slots", 24, "driver: send queue slots, a power of two, 2..NPFNIC_RDMA_MAX_QP_WR")
	RDMACreateQPSQLog2Elem = le32("sq_log2_elem_size", 28, "driver: log2 of the send queue's slot size")
	RDMACreateQPRQBuf      = le64("rq_buf", 32, "driver: IOVA of the receive queue's rxe queue buffer")
	RDMACreateQPRQSlots    = le32("rq_slots", 40, "driver: receive queue slots, a power of two, 2..NPFNIC_RDMA_MAX_QP_WR")
	RDMACreateQPRQLog2Elem = le32("rq_log2_elem_size", 44, "driver: log2 of the receive queue's slot size")
	RDMACreateQPSendCQ     = le32("send_cqn", 48, "driver: CQ of send completions")
	RDMACreateQPRecvCQ     = le32("recv_cqn", 52, "driver: CQ of receive completions")
	RDMACreateQPMaxSendSGE = le16("max_send_sge", 56, "driver: SGEs per send WQE, 1..NPFNIC_RDMA_MAX_SGE")
	RDMACreateQPMaxRecvSGE = le16("max_recv_sge", 58, "driver: SGEs per receive WQE, 1..NPFNIC_RDMA_MAX_SGE")
	RDMACreateQPMaxInline  = le16("max_inline", 60, "driver: inline bytes per send WQE, 0..NPFNIC_RDMA_MAX_INLINE")
	RDMACreateQPSigAll     = le16("sq_sig_all", 62, "driver: 1: every send WQE completes on the CQ, whatever IBV_SEND_SIGNALED says")
)

// CREATE_QP with NPFNIC_RDMA_CMD_FLAG_SRQ: as CREATE_QP, with the SRQ in
// place of the receive queue.
var (
	RDMACreateQPSRQN = le32("srqn", 32, "driver: the SRQ the QP takes its receives from (same PD)")
)

// CREATE_SRQ: a shared receive queue over an rxe queue buffer of receive
// entries; MODIFY_SRQ arms its limit.
var (
	RDMACreateSRQPD       = le32("pd", 12, "driver: protection domain number")
	RDMACreateSRQBuf      = le64("buf", 16, "driver: IOVA of the rxe queue buffer")
	RDMACreateSRQSlots    = le32("slots", 24, "driver: slots, a power of two, 2..NPFNIC_RDMA_MAX_QP_WR")
	RDMACreateSRQLog2Elem = le32("log2_elem_size", 28, "driver: log2 of the slot size")
	RDMACreateSRQMaxSGE   = le16("max_sge", 32, "driver: SGEs per entry, 1..NPFNIC_RDMA_MAX_SGE")
	RDMACreateSRQLimit    = le32("limit", 36, "driver: the limit armed at creation (0: none), as MODIFY_SRQ's")
	RDMAModifySRQLimit    = le32("limit", 16, "driver: arm: one SRQ_LIMIT event once fewer entries than this are posted; 0 disarms")
)

// ALLOC_MW: a memory window of a PD.
var (
	RDMAAllocMWPD   = le32("pd", 12, "driver: protection domain number")
	RDMAAllocMWType = u8("type", 16, "driver: 1 or 2 (enum ib_mw_type)")
)

// MODIFY_QP: attributes as in ib_modify_qp; only those in mask apply.
var (
	RDMAModifyQPMask        = le32("mask", 12, "driver: NPFNIC_RDMA_QP_ATTR_* that apply")
	RDMAModifyQPState       = u8("state", 16, "driver: NPFNIC_RDMA_QP_* (enum ib_qp_state)")
	RDMAModifyQPPathMTU     = u8("path_mtu", 17, "driver: enum ib_mtu, 1 (256 bytes) .. 5 (4096)")
	RDMAModifyQPTimeout     = u8("timeout", 18, "driver: local ACK timeout, 4.096 us << timeout (0: none)")
	RDMAModifyQPRetryCnt    = u8("retry_cnt", 19, "driver: transport retries, 0..7")
	RDMAModifyQPRNRRetry    = u8("rnr_retry", 20, "driver: RNR retries, 0..7 (7: without limit)")
	RDMAModifyQPMinRNRTimer = u8("min_rnr_timer", 21, "driver: the RNR NAK timer this QP asks for, IB timer table index 0..31")
	RDMAModifyQPMaxRdAtomic = u8("max_rd_atomic", 22, "driver: RDMA READs this QP has outstanding, 0..NPFNIC_RDMA_MAX_RD_ATOMIC")
	RDMAModifyQPMaxDestRd   = u8("max_dest_rd_atomic", 23, "driver: RDMA READs the peer may have outstanding here")
	RDMAModifyQPAccess      = le32("access", 24, "driver: remote access of the responder (NPFNIC_RDMA_ACCESS_REMOTE_*; REMOTE_ATOMIC since 2.6)")
	RDMAModifyQPDestQPN     = le32("dest_qpn", 28, "driver: the peer's QPN")
	// A UD QP has no peer: its Q_Key takes dest_qpn's place.
	RDMAModifyQPQKey      = le32("qkey", 28, "driver, UD QPs (interface 2.8): the Q_Key its received messages must carry")
	RDMAModifyQPRQPSN     = le32("rq_psn", 32, "driver: expected PSN of the responder, 24 bits")
	RDMAModifyQPSQPSN     = le32("sq_psn", 36, "driver: first PSN of the requester, 24 bits")
	RDMAModifyQPDGID      = Field{Name: "dgid", Offset: 40, Size: 1, Count: 16, Doc: "driver: the peer's GID (an IPv4-mapped IPv6 address for RoCEv2 over IPv4)"}
	RDMAModifyQPDMAC      = Field{Name: "dmac", Offset: 56, Size: 1, Count: 6, Doc: "driver: the peer's Ethernet address (the core resolves it)"}
	RDMAModifyQPSGIDIndex = u8("sgid_index", 62, "driver: index of this port's GID the QP sends from")
	RDMAModifyQPHopLimit  = u8("hop_limit", 63, "driver: IP TTL / hop limit (0: 64)")
)

// QUERY_QP results, written by the device into the entry (offsets as in
// MODIFY_QP, with mask set to what was written).
var (
	RDMAQueryQPState = u8("state", 16, "device: the QP's state now (NPFNIC_RDMA_QP_*)")
	RDMAQueryQPSQPSN = le32("sq_psn", 36, "device: next PSN the requester will send")
	RDMAQueryQPRQPSN = le32("rq_psn", 32, "device: PSN the responder expects")
)

// REG_MR: a memory region reached through address translation.
var (
	RDMARegMRPD     = le32("pd", 12, "driver: protection domain number")
	RDMARegMRVA     = le64("va", 16, "driver: first virtual address of the region (in the PASID's address space; 0 with FLAG_IMPLICIT)")
	RDMARegMRLength = le64("length", 24, "driver: bytes, 1..NPFNIC_RDMA_MAX_MR_SIZE (0 with FLAG_IMPLICIT)")
	RDMARegMRAccess = le32("access", 32, "driver: NPFNIC_RDMA_ACCESS_*")
	RDMARegMRPASID  = le32("pasid", 36, "driver: the PASID whose I/O page tables map va (ATS must be enabled)")
)

// ALLOC_MR: a region for fast registration (kernel consumers).
var (
	RDMAAllocMRPD       = le32("pd", 12, "driver: protection domain number")
	RDMAAllocMRMaxPages = le32("max_pages", 16, "driver: the longest page list a REG_MR entry may give it, 1..NPFNIC_RDMA_MAX_FAST_REG_PAGES")
	RDMAAllocMRPages    = le64("pages", 24, "driver: IOVA of max_pages __le64 page addresses, which the device reads when a REG_MR entry of the region runs (8-byte aligned)")
)

// The REG_MR send entry (IB_WR_REG_MR, kernel consumers only): a struct
// npfnic_reg_wr in the wr.wr union of struct rxe_send_wqe, at
// RxeSendRegOffset. The region of key >> 8 (ALLOC_MR's, in the QP's PD,
// free) maps [iova, iova+length) onto its page list's first npages
// entries, each a page of 1 << page_shift bytes: iova's offset in its page
// is the offset in the first. Its keys become key, its access access.
var (
	RDMARegWRIOVA      = le64("iova", 0, "first address of the region")
	RDMARegWRLength    = le64("length", 8, "bytes, at most npages pages less iova's offset in the first")
	RDMARegWRKey       = le32("key", 16, "the region's lkey and rkey from now on: its index (key >> 8) with a new low byte")
	RDMARegWRAccess    = le32("access", 20, "NPFNIC_RDMA_ACCESS_* (REMOTE_WRITE and REMOTE_ATOMIC need LOCAL_WRITE)")
	RDMARegWRPageShift = u8("page_shift", 24, "log2 of the page size, NPFNIC_RDMA_FAST_REG_MIN_PAGE_SHIFT..MAX")
	RDMARegWRNPages    = le32("npages", 28, "page list entries used, 1..ALLOC_MR's max_pages")
)

// RxeSendRegOffset is where struct npfnic_reg_wr sits in a send entry.
const RxeSendRegOffset = 24

// RDMARegWR is struct npfnic_reg_wr.
var RDMARegWR = Layout{"reg_wr", 32, "The REG_MR member of a send entry's wr.wr union (kernel consumers; interface 2.9).",
	[]Field{RDMARegWRIOVA.Field, RDMARegWRLength.Field, RDMARegWRKey.Field, RDMARegWRAccess.Field, RDMARegWRPageShift.Field,
		{Name: "rsvd", Offset: 25, Size: 1, Count: 3, Doc: "reserved, zero"}, RDMARegWRNPages.Field},
	WrittenByDriver}

// QUERY_STATS: the engine's counters into a buffer (handle 0).
var (
	RDMAQueryStatsBuf   = le64("buf", 16, "driver: IOVA of the buffer (8-byte aligned)")
	RDMAQueryStatsCount = le32("count", 24, "driver: counters the buffer holds; the device writes the first min(count, NPFNIC_RDMA_STATS)")
)

// RDMACounter is one of the RDMA engine's counters: QUERY_STATS writes
// them in RDMACounters' order; the driver reports them under Name.
type RDMACounter struct {
	Name string // lower case, as `rdma statistic` shows it
	Doc  string
}

// RDMACounters are the counters QUERY_STATS reports, in order.
var RDMACounters = []RDMACounter{
	{"rx_frames", "RoCEv2 frames handed to the RC engine"},
	{"tx_frames", "RoCEv2 frames the RC engine sent"},
	{"messages_in", "SEND, WRITE, READ and atomic requests the responder executed"},
	{"retransmits", "request packets the requester sent again"},
	{"ack_timeouts", "local ACK timeouts that made the requester retransmit"},
	{"rnr_naks_rcvd", "RNR NAKs the requester received"},
	{"rnr_naks_no_wqe", "RNR NAKs the responder sent for a SEND that found no receive posted"},
	{"rnr_naks_fault", "RNR NAKs the responder sent for a receive fault (RDMA_RECV_FAULT = RNR)"},
	{"fault_drops", "requests the responder dropped for a receive fault (RDMA_RECV_FAULT = DROP)"},
	{"responder_faults", "faults placing SEND or WRITE data, reading READ data or changing an atomic's word (FAULT_KIND_RC_RECV)"},
	{"requester_faults", "faults gathering a send's payload or scattering a READ response (FAULT_KIND_RC_SEND)"},
	{"read_retries", "RDMA READs (and atomics) requested again after a dropped or lost response"},
	{"page_requests", "page requests raised for memory regions"},
	{"page_request_errors", "faults that failed: Invalid Request, or PRI not usable"},
	{"seq_naks_sent", "PSN sequence error NAKs the responder sent"},
	{"err_naks_sent", "remote access, invalid request and operation error NAKs the responder sent"},
	{"bad_wqes", "malformed send or receive queue entries completed with an error"},
	{"late_refused", "memory region accesses refused because the region was being deregistered"},
	{"tx_dropped", "ACKs and NAKs dropped because the port took nothing for long (RC recovers them as lost frames)"},
}

// ADD_GID: one entry of the port's GID table (RoCEv2).
var (
	RDMAAddGIDGID = Field{Name: "gid", Offset: 16, Size: 1, Count: 16, Doc: "driver: the GID, an IPv6 address (IPv4-mapped for IPv4)"}
)

// RDMACmdHeader is the header every command starts with; the opcode
// layouts below share it and say which bytes after it they use.
var rdmaCmdHeader = []Field{RDMACmdOpcode.Field, RDMACmdFlags.Field, rdmaCmdRsvd.Field, RDMACmdStatus.Field, RDMACmdHandle.Field}

// rdmaCmdTail is the reserved rest of a command from off.
func rdmaCmdTail(off int) Field {
	return Field{Name: "rsvd_tail", Offset: off, Size: 4, Count: (RDMACmdSize - off) / 4, Doc: "reserved, zero"}
}

func rdmaCmd(name, doc string, fields ...Field) Layout {
	return Layout{name, RDMACmdSize, doc, append(append([]Field(nil), rdmaCmdHeader...), fields...), WrittenPerField}
}

// The command layouts: struct npfnic_rdma_cmd (the header, then bytes
// that depend on the opcode) and one struct per opcode that uses them.
var (
	RDMACmd = rdmaCmd("rdma_cmd", "RDMA command queue entry: the header; the rest of the 64 bytes depends on the opcode.",
		le32("arg", 12, "driver: per opcode (pd, mask)").Field, Field{Name: "args", Offset: 16, Size: 8, Count: 6, Doc: "driver: per opcode; the device writes results here for QUERY_QP"})
	RDMACmdCreateCQLayout = rdmaCmd("rdma_cmd_create_cq", "NPFNIC_RDMA_CMD_CREATE_CQ and NPFNIC_RDMA_CMD_RESIZE_CQ (handle: CQN).",
		le32("rsvd2", 12, "reserved, zero").Field, RDMACreateCQBuf.Field, RDMACreateCQSlots.Field, RDMACreateCQLog2Elem.Field, rdmaCmdTail(32))
	RDMACmdCreateQPLayout = rdmaCmd("rdma_cmd_create_qp", "NPFNIC_RDMA_CMD_CREATE_QP (handle: QPN; the QP starts in RESET).",
		RDMACreateQPPD.Field, RDMACreateQPSQBuf.Field, RDMACreateQPSQSlots.Field, RDMACreateQPSQLog2Elem.Field,
		RDMACreateQPRQBuf.Field, RDMACreateQPRQSlots.Field, RDMACreateQPRQLog2Elem.Field,
		RDMACreateQPSendCQ.Field, RDMACreateQPRecvCQ.Field, RDMACreateQPMaxSendSGE.Field, RDMACreateQPMaxRecvSGE.Field,
		RDMACreateQPMaxInline.Field, RDMACreateQPSigAll.Field)
	RDMACmdCreateQPSRQLayout = rdmaCmd("rdma_cmd_create_qp_srq", "NPFNIC_RDMA_CMD_CREATE_QP with NPFNIC_RDMA_CMD_FLAG_SRQ (handle: QPN; interface 2.7): receives come from the SRQ.",
		RDMACreateQPPD.Field, RDMACreateQPSQBuf.Field, RDMACreateQPSQSlots.Field, RDMACreateQPSQLog2Elem.Field,
		RDMACreateQPSRQN.Field, Field{Name: "rsvd_rq", Offset: 36, Size: 4, Count: 3, Doc: "reserved, zero (a receive queue's geometry without FLAG_SRQ)"}, RDMACreateQPSendCQ.Field, RDMACreateQPRecvCQ.Field, RDMACreateQPMaxSendSGE.Field,
		le16("rsvd3", 58, "reserved, zero").Field, RDMACreateQPMaxInline.Field, RDMACreateQPSigAll.Field)
	RDMACmdCreateSRQLayout = rdmaCmd("rdma_cmd_create_srq", "NPFNIC_RDMA_CMD_CREATE_SRQ (handle: SRQN; interface 2.7).",
		RDMACreateSRQPD.Field, RDMACreateSRQBuf.Field, RDMACreateSRQSlots.Field, RDMACreateSRQLog2Elem.Field,
		RDMACreateSRQMaxSGE.Field, le16("rsvd2", 34, "reserved, zero").Field, RDMACreateSRQLimit.Field, rdmaCmdTail(40))
	RDMACmdAllocMWLayout = rdmaCmd("rdma_cmd_alloc_mw", "NPFNIC_RDMA_CMD_ALLOC_MW (handle: the window's R_Key; interface 2.8).",
		RDMAAllocMWPD.Field, RDMAAllocMWType.Field, Field{Name: "rsvd2", Offset: 17, Size: 1, Count: 47, Doc: "reserved, zero"})
	RDMACmdModifySRQLayout = rdmaCmd("rdma_cmd_modify_srq", "NPFNIC_RDMA_CMD_MODIFY_SRQ (handle: SRQN; interface 2.7).",
		le32("rsvd2", 12, "reserved, zero").Field, RDMAModifySRQLimit.Field, rdmaCmdTail(20))
	RDMACmdModifyQPLayout = rdmaCmd("rdma_cmd_modify_qp", "NPFNIC_RDMA_CMD_MODIFY_QP and NPFNIC_RDMA_CMD_QUERY_QP (handle: QPN). QUERY_QP: the device writes state, rq_psn and sq_psn.",
		RDMAModifyQPMask.Field, RDMAModifyQPState.Field, RDMAModifyQPPathMTU.Field, RDMAModifyQPTimeout.Field,
		RDMAModifyQPRetryCnt.Field, RDMAModifyQPRNRRetry.Field, RDMAModifyQPMinRNRTimer.Field,
		RDMAModifyQPMaxRdAtomic.Field, RDMAModifyQPMaxDestRd.Field, RDMAModifyQPAccess.Field, RDMAModifyQPDestQPN.Field,
		RDMAModifyQPRQPSN.Field, RDMAModifyQPSQPSN.Field, RDMAModifyQPDGID, RDMAModifyQPDMAC,
		RDMAModifyQPSGIDIndex.Field, RDMAModifyQPHopLimit.Field)
	RDMACmdModifyQPUDLayout = rdmaCmd("rdma_cmd_modify_qp_ud", "NPFNIC_RDMA_CMD_MODIFY_QP of a UD QP (interface 2.8): qkey in place of dest_qpn. "+
		"path_mtu is the port's MTU, which bounds its messages; the connection's fields are ignored.",
		RDMAModifyQPMask.Field, RDMAModifyQPState.Field, RDMAModifyQPPathMTU.Field, Field{Name: "rsvd_rc", Offset: 18, Size: 1, Count: 6, Doc: "ignored (RC and UC)"},
		RDMAModifyQPAccess.Field, RDMAModifyQPQKey.Field, Field{Name: "rsvd_rq_psn", Offset: 32, Size: 4, Doc: "ignored"},
		RDMAModifyQPSQPSN.Field, Field{Name: "rsvd_av", Offset: 40, Size: 1, Count: 24, Doc: "ignored: each send entry carries its address vector"})
	RDMACmdRegMRLayout = rdmaCmd("rdma_cmd_reg_mr", "NPFNIC_RDMA_CMD_REG_MR (handle: the key, lkey = rkey).",
		RDMARegMRPD.Field, RDMARegMRVA.Field, RDMARegMRLength.Field, RDMARegMRAccess.Field, RDMARegMRPASID.Field, rdmaCmdTail(40))
	RDMACmdAllocMRLayout = rdmaCmd("rdma_cmd_alloc_mr", "NPFNIC_RDMA_CMD_ALLOC_MR (handle: the region's first key; interface 2.9).",
		RDMAAllocMRPD.Field, RDMAAllocMRMaxPages.Field, le32("rsvd2", 20, "reserved, zero").Field, RDMAAllocMRPages.Field, rdmaCmdTail(32))
	RDMACmdQueryStatsLayout = rdmaCmd("rdma_cmd_query_stats", "NPFNIC_RDMA_CMD_QUERY_STATS (handle 0; interface 2.5).",
		le32("rsvd2", 12, "reserved, zero").Field, RDMAQueryStatsBuf.Field, RDMAQueryStatsCount.Field, rdmaCmdTail(28))
	RDMACmdAddGIDLayout = rdmaCmd("rdma_cmd_add_gid", "NPFNIC_RDMA_CMD_ADD_GID (handle: GID index; replaces what was there).",
		le32("rsvd2", 12, "reserved, zero").Field, RDMAAddGIDGID, rdmaCmdTail(32))
)

// Event queue entry fields (device to driver).
var (
	RDMAEventType   = u8("type", 0, "NPFNIC_RDMA_EVENT_*")
	rdmaEventRsvd8  = u8("rsvd", 1, "reserved, zero")
	rdmaEventRsvd16 = le16("rsvd2", 2, "reserved, zero")
	RDMAEventHandle = le32("handle", 4, "the CQN, QPN or command index the event is about")
	RDMAEventInfo   = le32("info", 8, "per type: the IBV_WC status that moved a QP to error")
	RDMAEventSeq    = le32("seq", 12, "free-running count of events posted, this one's")
)

// RDMAEvent is struct npfnic_rdma_event.
var RDMAEvent = Layout{"rdma_event", RDMAEventSize, "RDMA event queue entry (device to driver).",
	[]Field{RDMAEventType.Field, rdmaEventRsvd8.Field, rdmaEventRsvd16.Field, RDMAEventHandle.Field, RDMAEventInfo.Field, RDMAEventSeq.Field},
	WrittenByDevice}

// RDMA status block fields (device to driver).
var (
	RDMAStatusCmdqHead  = le32("cmdq_head", 0, "free-running count of commands run (their status written)")
	RDMAStatusEQTail    = le32("eq_tail", 4, "producer index: free-running count of events written")
	RDMAStatusError     = le32("error", 8, "NPFNIC_RDMAERR_*, 0 none")
	RDMAStatusErrorInfo = le32("error_info", 12, "the offending queue index or register value")
)

// RDMAStatus is struct npfnic_rdma_status.
var RDMAStatus = Layout{"rdma_status", RDMAStatusSize, "RDMA status block (device to driver), at NPFNIC_REG_RDMA_STATUS.",
	[]Field{RDMAStatusCmdqHead.Field, RDMAStatusEQTail.Field, RDMAStatusError.Field, RDMAStatusErrorInfo.Field, rsvd32(16, 12)},
	WrittenByDevice}

// RDMALayouts lists the structures of the RDMA interface.
var RDMALayouts = []*Layout{&RDMACmd, &RDMACmdCreateCQLayout, &RDMACmdCreateQPLayout, &RDMACmdCreateQPSRQLayout,
	&RDMACmdCreateSRQLayout, &RDMACmdModifySRQLayout, &RDMACmdAllocMWLayout, &RDMACmdModifyQPLayout, &RDMACmdModifyQPUDLayout,
	&RDMACmdRegMRLayout, &RDMACmdAllocMRLayout, &RDMARegWR, &RDMACmdQueryStatsLayout, &RDMACmdAddGIDLayout, &RDMAEvent, &RDMAStatus}

// RDMARegisters lists the RDMA registers in offset order.
var RDMARegisters = []Register{
	command("RDMA_CTRL", RegRDMACtrl, BlockRDMA, AccessRW, "NPFNIC_RDMA_CTRL_ENABLE latches the RDMA registers; write NPFNIC_RDMA_CTRL_RESET to destroy every object (reads back 0)"),
	storage("RDMA_STATUS_LO", RegRDMAStatusLo, BlockRDMA, 0, "RDMA status block IOVA, bits 31:0 (64-byte aligned)"),
	storage("RDMA_STATUS_HI", RegRDMAStatusHi, BlockRDMA, 0, "RDMA status block IOVA, bits 63:32"),
	storage("CMDQ_BASE_LO", RegCmdqBaseLo, BlockRDMA, 0, "command queue IOVA, bits 31:0 (64-byte aligned)"),
	storage("CMDQ_BASE_HI", RegCmdqBaseHi, BlockRDMA, 0, "command queue IOVA, bits 63:32"),
	storage("CMDQ_SIZE", RegCmdqSize, BlockRDMA, 0, "command queue entries: power of two, NPFNIC_RDMA_QUEUE_SIZE_MIN..MAX"),
	doorbell("CMDQ_TAIL", RegCmdqTail, BlockRDMA, "command doorbell: free-running count of commands posted"),
	storage("EQ_BASE_LO", RegEQBaseLo, BlockRDMA, 0, "event queue IOVA, bits 31:0 (16-byte aligned)"),
	storage("EQ_BASE_HI", RegEQBaseHi, BlockRDMA, 0, "event queue IOVA, bits 63:32"),
	storage("EQ_SIZE", RegEQSize, BlockRDMA, 0, "event queue entries: power of two, NPFNIC_RDMA_QUEUE_SIZE_MIN..MAX"),
	doorbell("EQ_HEAD", RegEQHead, BlockRDMA, "event consumer doorbell: free-running count of events consumed"),
	storage("EQ_VECTOR", RegEQVector, BlockRDMA, RDMAVector, "MSI-X vector of the event queue"),
	doorbell("EQ_ARM", RegEQArm, BlockRDMA, "write 1: raise EQ_VECTOR once for the next event, or at once if events are pending"),
	doorbell("SQ_DOORBELL", RegSQDoorbell, BlockRDMA, "a QPN whose rxe send queue has new entries (after librxe moved its producer index)"),
	doorbell("CQ_ARM", RegCQArm, BlockRDMA, "CQN | NPFNIC_RDMA_CQ_ARM_SOLICITED: post one CQ_COMP event for the next (solicited) completion"),
	status("RDMA_ERROR", RegRDMAError, BlockRDMA, 0, "NPFNIC_RDMAERR_*"),
	storage("RDMA_RECV_FAULT", RegRDMARecvFault, BlockRDMA, RDMARecvFaultRNR, "the responder's receive-fault policy: NPFNIC_RDMA_RECV_FAULT_RNR, _DROP or _HOLD (2.12), bits 1:0 (interface 2.5); RDMA_CTRL RESET keeps it"),
	storage("RDMA_PREFAULT", RegRDMAPrefault, BlockRDMA, 1, "pages a memory region's fault asks for at once: the faulting page and the next ones its request touches, 1..NPFNIC_RDMA_MAX_PREFAULT (writes clamped, 0 reads 1); RDMA_CTRL RESET keeps it (interface 2.9)"),
	command("RDMA_MSG_ALARM", RegRDMAMsgAlarm, BlockRDMA, AccessRW, "write N: one MSG_ALARM event after the responder executed N more requests (after an alarm: counted from the request that set it off), 0 cancels; reads the requests to go; RDMA_CTRL RESET cancels it (interface 2.5)"),
}

// RDMAValues lists the constants of the RDMA interface exported to the C
// header.
var RDMAValues = []Value{
	{"RDMA_VECTOR", RDMAVector, "reset value of NPFNIC_REG_EQ_VECTOR"},
	{"RDMA_CTRL_ENABLE", RDMACtrlEnable, "NPFNIC_REG_RDMA_CTRL: status block, command and event queues on"},
	{"RDMA_CTRL_RESET", RDMACtrlReset, "NPFNIC_REG_RDMA_CTRL: disable and destroy every object"},
	{"RDMA_CTRL_BUSY", RDMACtrlBusy, "NPFNIC_REG_RDMA_CTRL (read only): the RDMA engine may still DMA"},
	{"RDMA_CQ_ARM_SOLICITED", RDMACQArmSolicited, "NPFNIC_REG_CQ_ARM: solicited completions only"},
	{"RDMA_RECV_FAULT_RNR", RDMARecvFaultRNR, "NPFNIC_REG_RDMA_RECV_FAULT: RNR NAK (default)"},
	{"RDMA_RECV_FAULT_DROP", RDMARecvFaultDrop, "NPFNIC_REG_RDMA_RECV_FAULT: drop, the sender times out"},
	{"RDMA_RECV_FAULT_HOLD", RDMARecvFaultHold, "NPFNIC_REG_RDMA_RECV_FAULT: hold in the device until the page arrives"},
	{"RDMA_STATUS_ALIGN", RDMAStatusAlign, "alignment of the RDMA status block"},
	{"RDMA_CMD_SIZE", RDMACmdSize, "bytes of a command queue entry"},
	{"RDMA_EVENT_SIZE", RDMAEventSize, "bytes of an event queue entry"},
	{"RDMA_QUEUE_SIZE_MIN", RDMAQueueSizeMin, "smallest command or event queue"},
	{"RDMA_QUEUE_SIZE_MAX", RDMAQueueSizeMax, "largest command or event queue"},
	{"RDMA_QPN_MAX", RDMAQPNMax, "largest QPN (0 is never a QP; 1 only the GSI QP, with FEAT_RDMA_KERNEL)"},
	{"RDMA_MAX_QP", RDMAMaxQP, "live queue pairs"},
	{"RDMA_MAX_CQ", RDMAMaxCQ, "live completion queues"},
	{"RDMA_MAX_SRQ", RDMAMaxSRQ, "live shared receive queues (SRQN 0..RDMA_MAX_SRQ-1)"},
	{"RDMA_MAX_MR", RDMAMaxMR, "live memory regions"},
	{"RDMA_MAX_MW", RDMAMaxMW, "live memory windows"},
	{"RDMA_MAX_GID", RDMAMaxGID, "GID table entries"},
	{"RDMA_MAX_SGE", RDMAMaxSGE, "scatter/gather entries per WQE"},
	{"RDMA_MAX_INLINE", RDMAMaxInline, "inline bytes per send WQE"},
	{"RDMA_MAX_QP_WR", RDMAMaxQPWR, "slots of a send or receive queue"},
	{"RDMA_MAX_CQE", RDMAMaxCQE, "slots of a completion queue"},
	{"RDMA_MAX_MR_SIZE", RDMAMaxMRSize, "bytes of one memory region"},
	{"RDMA_MAX_MSG_SIZE", RDMAMaxMsgSize, "bytes of one message"},
	{"RDMA_MAX_RD_ATOMIC", RDMAMaxRdAtomic, "RDMA READs and atomics outstanding per QP"},
	{"RXE_SEND_REG_OFFSET", RxeSendRegOffset, "offset of struct npfnic_reg_wr in struct rxe_send_wqe (its wr.wr union)"},
	{"RDMA_MAX_PREFAULT", RDMAMaxPrefault, "largest value of NPFNIC_REG_RDMA_PREFAULT"},
	{"RDMA_MAX_FAST_REG_PAGES", RDMAMaxFastRegPages, "longest page list of a fast registration region"},
	{"RDMA_FAST_REG_MIN_PAGE_SHIFT", RDMAFastRegMinPageShift, "smallest page of a fast registration (4 KiB)"},
	{"RDMA_FAST_REG_MAX_PAGE_SHIFT", RDMAFastRegMaxPageShift, "largest page of a fast registration (1 GiB)"},
	{"RDMA_CMD_CREATE_CQ", RDMACmdCreateCQ, "command: create a completion queue"},
	{"RDMA_CMD_DESTROY_CQ", RDMACmdDestroyCQ, "command: destroy a completion queue (no QP may use it)"},
	{"RDMA_CMD_CREATE_QP", RDMACmdCreateQP, "command: create an RC queue pair (in RESET)"},
	{"RDMA_CMD_MODIFY_QP", RDMACmdModifyQP, "command: modify a queue pair's attributes and state"},
	{"RDMA_CMD_QUERY_QP", RDMACmdQueryQP, "command: read a queue pair's state and PSNs"},
	{"RDMA_CMD_DESTROY_QP", RDMACmdDestroyQP, "command: destroy a queue pair; it touches no memory once the command completed"},
	{"RDMA_CMD_REG_MR", RDMACmdRegMR, "command: register a memory region"},
	{"RDMA_CMD_DEREG_MR", RDMACmdDeregMR, "command: deregister a memory region; no DMA uses it once the command completed"},
	{"RDMA_CMD_ADD_GID", RDMACmdAddGID, "command: set a GID table entry"},
	{"RDMA_CMD_DEL_GID", RDMACmdDelGID, "command: clear a GID table entry"},
	{"RDMA_CMD_QUERY_STATS", RDMACmdQueryStats, "command: write the NPFNIC_RDMA_STATS counters to a buffer"},
	{"RDMA_CMD_CREATE_SRQ", RDMACmdCreateSRQ, "command: create a shared receive queue"},
	{"RDMA_CMD_MODIFY_SRQ", RDMACmdModifySRQ, "command: arm (or disarm) an SRQ's limit"},
	{"RDMA_CMD_DESTROY_SRQ", RDMACmdDestroySRQ, "command: destroy an SRQ no QP uses"},
	{"RDMA_CMD_ALLOC_MW", RDMACmdAllocMW, "command: create a memory window, bound to nothing"},
	{"RDMA_CMD_ALLOC_MR", RDMACmdAllocMR, "command: create a free region for fast registration (REG_MR send entries)"},
	{"RDMA_CMD_RESIZE_CQ", RDMACmdResizeCQ, "command: move a CQ to a new ring (as CREATE_CQ's), its pending completions first"},
	{"RDMA_CMD_DEALLOC_MW", RDMACmdDeallocMW, "command: destroy a memory window; its R_Key grants nothing from then on"},
	{"RDMA_CMD_FLAG_EVENT", RDMACmdFlagEvent, "command flag: post a CMD_DONE event"},
	{"RDMA_CMD_FLAG_SRQ", RDMACmdFlagSRQ, "CREATE_QP flag: receives from an SRQ (struct npfnic_rdma_cmd_create_qp_srq)"},
	{"RDMA_CMD_FLAG_UD", RDMACmdFlagUD, "CREATE_QP flag: an unreliable datagram QP"},
	{"RDMA_CMD_FLAG_UC", RDMACmdFlagUC, "CREATE_QP flag: an unreliable connected QP"},
	{"RDMA_CMD_FLAG_PHYSICAL", RDMACmdFlagPhysical, "REG_MR flag: IOVAs reached without translation (the kernel's DMA MR)"},
	{"RDMA_CMD_FLAG_IMPLICIT", RDMACmdFlagImplicit, "REG_MR flag: the region is the PASID's whole address space (implicit ODP)"},
	{"RDMA_CMD_OK", RDMACmdOK, "command status: done"},
	{"RDMA_CMDERR_OPCODE", RDMACmdErrOpcode, "command status: unknown opcode"},
	{"RDMA_CMDERR_HANDLE", RDMACmdErrHandle, "command status: handle out of range, in use or unknown"},
	{"RDMA_CMDERR_PARAM", RDMACmdErrParam, "command status: a parameter out of range"},
	{"RDMA_CMDERR_BUSY", RDMACmdErrBusy, "command status: the object is in use"},
	{"RDMA_CMDERR_STATE", RDMACmdErrState, "command status: QP state transition not allowed"},
	{"RDMA_CMDERR_RESOURCE", RDMACmdErrResource, "command status: the device's limit is reached"},
	{"RDMA_CMD_PENDING", RDMACmdPending, "command status the driver writes before posting"},
	{"RDMA_EVENT_CMD_DONE", RDMAEventCmdDone, "event: a command with NPFNIC_RDMA_CMD_FLAG_EVENT ran"},
	{"RDMA_EVENT_CQ_COMP", RDMAEventCQComp, "event: a completion landed in an armed CQ"},
	{"RDMA_EVENT_CQ_ERR", RDMAEventCQErr, "event: a CQ overran and stopped"},
	{"RDMA_EVENT_QP_FATAL", RDMAEventQPFatal, "event: a QP went to the error state"},
	{"RDMA_EVENT_QP_REQ_ERR", RDMAEventQPReqErr, "event: the peer reported an invalid request"},
	{"RDMA_EVENT_QP_ACCESS_ERR", RDMAEventQPAccessErr, "event: the peer reported a remote access error"},
	{"RDMA_EVENT_COMM_EST", RDMAEventCommEst, "event: a QP in RTR received its first packet"},
	{"RDMA_EVENT_MSG_ALARM", RDMAEventMsgAlarm, "event: RDMA_MSG_ALARM's count of executed requests was reached"},
	{"RDMA_EVENT_SRQ_LIMIT", RDMAEventSRQLimit, "event: an SRQ has fewer entries posted than its armed limit (now disarmed)"},
	{"RDMA_EVENT_SRQ_ERR", RDMAEventSRQErr, "event: an SRQ's ring could not be read; it gives no more entries"},
	{"RDMAERR_BAD_STATUS_ADDR", RDMAErrBadStatusAddr, "RDMA status block outside guest memory or misaligned"},
	{"RDMAERR_BAD_CMDQ", RDMAErrBadCmdq, "command queue invalid or outside guest memory"},
	{"RDMAERR_BAD_CMDQ_TAIL", RDMAErrBadCmdqTail, "CMDQ_TAIL moved backwards or too far"},
	{"RDMAERR_BAD_EQ", RDMAErrBadEQ, "event queue invalid or outside guest memory"},
	{"RDMAERR_BAD_EQ_HEAD", RDMAErrBadEQHead, "EQ_HEAD moved past eq_tail"},
	{"RDMAERR_EQ_OVERFLOW", RDMAErrEQOverflow, "the event queue overflowed; no more events"},
	{"RDMA_QP_RESET", RDMAQPReset, "QP state RESET"},
	{"RDMA_QP_INIT", RDMAQPInit, "QP state INIT"},
	{"RDMA_QP_RTR", RDMAQPRTR, "QP state RTR"},
	{"RDMA_QP_RTS", RDMAQPRTS, "QP state RTS"},
	{"RDMA_QP_SQD", RDMAQPSQD, "QP state SQD"},
	{"RDMA_QP_SQE", RDMAQPSQE, "QP state SQE"},
	{"RDMA_QP_ERR", RDMAQPErr, "QP state ERR"},
	{"RDMA_QP_ATTR_STATE", RDMAQPAttrState, "MODIFY_QP mask: state"},
	{"RDMA_QP_ATTR_ACCESS_FLAGS", RDMAQPAttrAccessFlags, "MODIFY_QP mask: access"},
	{"RDMA_QP_ATTR_PKEY_INDEX", RDMAQPAttrPKeyIndex, "MODIFY_QP mask: pkey_index (ignored: one P_Key)"},
	{"RDMA_QP_ATTR_PORT", RDMAQPAttrPort, "MODIFY_QP mask: port (ignored: one port)"},
	{"RDMA_QP_ATTR_QKEY", RDMAQPAttrQKey, "MODIFY_QP mask: qkey (UD QPs)"},
	{"RDMA_QP_ATTR_AV", RDMAQPAttrAV, "MODIFY_QP mask: dgid, dmac, sgid_index, hop_limit"},
	{"RDMA_QP_ATTR_PATH_MTU", RDMAQPAttrPathMTU, "MODIFY_QP mask: path_mtu"},
	{"RDMA_QP_ATTR_TIMEOUT", RDMAQPAttrTimeout, "MODIFY_QP mask: timeout"},
	{"RDMA_QP_ATTR_RETRY_CNT", RDMAQPAttrRetryCnt, "MODIFY_QP mask: retry_cnt"},
	{"RDMA_QP_ATTR_RNR_RETRY", RDMAQPAttrRNRRetry, "MODIFY_QP mask: rnr_retry"},
	{"RDMA_QP_ATTR_RQ_PSN", RDMAQPAttrRQPSN, "MODIFY_QP mask: rq_psn"},
	{"RDMA_QP_ATTR_MAX_QP_RD_ATOMIC", RDMAQPAttrMaxQPRdAtomic, "MODIFY_QP mask: max_rd_atomic"},
	{"RDMA_QP_ATTR_MIN_RNR_TIMER", RDMAQPAttrMinRNRTimer, "MODIFY_QP mask: min_rnr_timer"},
	{"RDMA_QP_ATTR_SQ_PSN", RDMAQPAttrSQPSN, "MODIFY_QP mask: sq_psn"},
	{"RDMA_QP_ATTR_MAX_DEST_RD_ATOMIC", RDMAQPAttrMaxDestRdAtomic, "MODIFY_QP mask: max_dest_rd_atomic"},
	{"RDMA_QP_ATTR_DEST_QPN", RDMAQPAttrDestQPN, "MODIFY_QP mask: dest_qpn"},
	{"RDMA_ACCESS_LOCAL_WRITE", RDMAAccessLocalWrite, "MR access: the device may write it for local operations"},
	{"RDMA_ACCESS_REMOTE_WRITE", RDMAAccessRemoteWrite, "MR access: RDMA WRITE from the peer"},
	{"RDMA_ACCESS_REMOTE_READ", RDMAAccessRemoteRead, "MR access: RDMA READ from the peer"},
	{"RDMA_ACCESS_REMOTE_ATOMIC", RDMAAccessRemoteAtomic, "MR and QP access: atomics from the peer (needs LOCAL_WRITE on an MR)"},
	{"RDMA_ACCESS_MW_BIND", RDMAAccessMWBind, "MR access: memory windows may be bound to it"},
	{"RDMA_ACCESS_ON_DEMAND", RDMAAccessOnDemand, "MR access: on-demand paging (pages fault in through PRI)"},
	{"FEAT_RDMA", FeatRDMA, "NPFNIC_REG_FEATURES: the RDMA engine (registers at NPFNIC_REG_RDMA_CTRL)"},
	{"FEAT_RDMA_ODP", FeatRDMAODP, "NPFNIC_REG_FEATURES: memory regions fault through PRI (on-demand paging)"},
	{"FEAT_RDMA_ATOMIC", FeatRDMAAtomic, "NPFNIC_REG_FEATURES: RC atomics (CMP_AND_SWP, FETCH_AND_ADD)"},
	{"FEAT_RDMA_SRQ", FeatRDMASRQ, "NPFNIC_REG_FEATURES: shared receive queues"},
	{"FEAT_RDMA_UD", FeatRDMAUD, "NPFNIC_REG_FEATURES: UD queue pairs"},
	{"FEAT_RDMA_UC", FeatRDMAUC, "NPFNIC_REG_FEATURES: UC queue pairs"},
	{"FEAT_RDMA_RESIZE_CQ", FeatRDMAResizeCQ, "NPFNIC_REG_FEATURES: RESIZE_CQ"},
	{"FEAT_RDMA_FAST_REG", FeatRDMAFastReg, "NPFNIC_REG_FEATURES: ALLOC_MR, REG_MR send entries, LOCAL_INV of regions"},
	{"FEAT_RDMA_IMPLICIT_ODP", FeatRDMAImplicitODP, "NPFNIC_REG_FEATURES: REG_MR's FLAG_IMPLICIT (implicit on-demand paging)"},
	{"FEAT_RDMA_MW", FeatRDMAMW, "NPFNIC_REG_FEATURES: memory windows, LOCAL_INV, SEND with Invalidate"},
	{"FEAT_RDMA_KERNEL", FeatRDMAKernel, "NPFNIC_REG_FEATURES: REG_MR's FLAG_PHYSICAL and the GSI QP 1"},
}
