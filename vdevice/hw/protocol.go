package hw

// The driver's side of the device in prose, for the datasheet
// (docs/device.md, generated with the C header by go generate). Each
// protocol is written once, as a string constant next to the registers and
// values it is about: the ones below, QuiesceDoc, OffloadsDoc and
// NetworkFaultsDoc in hw.go, and TranslationDoc, FaultHandshakeDoc and
// InvalidationDoc in translation.go. They are Markdown: paragraphs, "- "
// lists and tab-indented blocks, with C names (NPFNIC_...) and register
// names as the driver writes them.

//go:generate go run ./internal/gendatasheet -o ../../docs/device.md

// DatasheetIntro opens the datasheet.
const DatasheetIntro = `npfnic is a virtual PCIe Ethernet controller whose DMA can take page faults:
with the PCIe ATS capability enabled, buffer addresses are translated
through I/O page tables the driver owns, and a buffer that is not mapped
raises a page request the driver answers, as in Lesokhin et al., "Page Fault
Support for Network Controllers" (ASPLOS'17). QEMU runs it over vfio-user; a
Linux guest drives it with the kernel module in guestdrv.

This datasheet describes interface version %s (the changelog below says
what each version added). It is generated from the Go package vdevice/hw, which also generates the C header guestdrv/npfnic_hw.h;
both use the same names. A global register NAME is NPFNIC_REG_NAME in C, a
queue pair's register NAME is NPFNIC_PAIR_NAME (at offset NPFNIC_PAIR_BASE(q) +
NPFNIC_PAIR_NAME), a structure x is struct npfnic_x, and every constant below
is NPFNIC_ followed by its name. All multi-byte values, in registers and in
guest memory, are little-endian.`

// BringUpDoc walks through the register writes a minimal driver makes to
// send and receive, in order, with translation off.
const BringUpDoc = `The smallest driver that moves frames uses one queue pair, no translation
and no RDMA. In order:

1. Config space: enable memory space and bus mastering, and MSI-X with at
   least two vectors: NPFNIC_MISC_VECTOR, and NPFNIC_PAIR_VECTOR of pair 0.
2. Read ID (NPFNIC_MAGIC) and VERSION (major 2), then FEATURES, PAIR_MAX and
   the station address in MAC_LO and MAC_HI.
3. Write NPFNIC_CTRL_RESET to CTRL and read CTRL until NPFNIC_CTRL_BUSY is
   clear: whatever an earlier driver left running has stopped.
4. Allocate the status block (NPFNIC_STATUS_BLOCK_SIZE bytes, 64-byte
   aligned, zeroed); write its address to STATUS_ADDR_LO, then STATUS_ADDR_HI.
5. Write NPFNIC_CTRL_ENABLE to CTRL and 1 to MISC_IRQ_ARM.
6. Allocate the TX and RX rings (16-byte aligned, a power of two of
   descriptors each). For pair 0, write TX_BASE_LO, TX_BASE_HI, TX_SIZE,
   RX_BASE_LO, RX_BASE_HI, RX_SIZE and ITR, then NPFNIC_PAIR_CTRL_ENABLE to
   its CTRL and 1 to its IRQ_ARM.
7. Fill RX descriptors with buffers and write their count to RX_TAIL.
8. To send, write a frame's TX descriptors (the last with NPFNIC_TXD_EOP)
   and the new count to TX_TAIL.
9. On the pair's interrupt, read tx_head and rx_head from the pair's status
   in the status block (never a register), complete what they passed,
   refill, and write 1 to IRQ_ARM again.
10. To stop: write 0 to the pair's CTRL and read it until BUSY is clear,
    then write 0 to CTRL and read it until BUSY is clear; only then free the
    rings, the buffers and the status block.

Each step's rules are in the protocols below; the driver in guestdrv does
these steps in npfnic_main.c (probe), npfnic_eth.c (open and stop) and
npfnic_eth_txrx.c (transmit, receive, interrupts).`

// IdentityDoc describes what the function presents on PCI.
const IdentityDoc = `The function is a PCI Express endpoint with the MSI-X and power-management
capabilities and the ATS (Address Translation Services), PRI (Page Request
Interface) and PASID extended capabilities. The driver enables ATS, PASID
and PRI through their capabilities in config space (for PRI, also the
Outstanding Page Request Allocation) before it relies on translation, and
bus mastering before any DMA. A function reset (vfio-user DEVICE_RESET, FLR)
returns every register to its reset value and turns ATS, PASID and PRI off
again.`

// QueuePairDoc is how a driver brings the datapath up, moves frames and
// stops a queue pair.
const QueuePairDoc = `Bring-up. The driver checks that ID reads NPFNIC_MAGIC and that the major
number in VERSION (bits 31:16) is the one it was written for (a newer minor
only adds features an older driver may ignore), reads FEATURES, PAIR_MAX and
the station address (MAC_LO, MAC_HI), enables MSI-X with NPFNIC_MSIX_VECTORS
vectors and bus mastering, and then:

1. allocates the status block (NPFNIC_STATUS_BLOCK_SIZE bytes, 64-byte
   aligned, zeroed) and writes its address to STATUS_ADDR_LO and then
   STATUS_ADDR_HI: the write to STATUS_ADDR_HI latches it;
2. writes NPFNIC_CTRL_ENABLE to CTRL;
3. for each queue pair q it uses: writes the TX and RX ring addresses
   (16-byte aligned) and sizes (a power of two, NPFNIC_RING_SIZE_MIN to
   NPFNIC_RING_SIZE_MAX descriptors), the fault settings RX_POLICY, PASID
   and BM_SIZE if translation is on, and then NPFNIC_PAIR_CTRL_ENABLE to the
   pair's CTRL. Enabling latches all of them and sets the pair's heads and
   tails to 0; the registers may be rewritten while the pair runs without
   effect until the next enable.

Indexes. Heads and tails are free-running 32-bit counts that wrap modulo
2^32; the slot of count n is n & (SIZE - 1). The driver moves a tail by
writing the new count to the doorbell (TX_TAIL, RX_TAIL); the device
publishes its heads in the pair's struct npfnic_pair_status in the status
block. A tail that moves backwards or more than SIZE beyond the head stops
the pair with NPFNIC_QERR_BAD_TAIL; a ring outside guest memory stops it
with NPFNIC_QERR_BAD_RING, a buffer outside guest memory with
NPFNIC_QERR_BAD_DESC. The error and its detail (error, error_info) appear in
the pair's status and the misc vector fires. The driver never needs to read
a register on the datapath: under QEMU a BAR read costs about 220 µs, a
posted write about 4 µs.

Transmit. The driver writes a frame's descriptors (struct npfnic_tx_desc, at
most NPFNIC_TX_MAX_SEGS, the last with NPFNIC_TXD_EOP) and then TX_TAIL. The
device sends frames in order and advances tx_head past every descriptor it
consumed, sent or dropped; it never writes a TX descriptor back, so tx_head
is the completion. A frame shorter than NPFNIC_MIN_FRAME or longer than
NPFNIC_MAX_FRAME (NPFNIC_MAX_TSO_FRAME with TSO) is dropped and counted in
tx_drops_bad_len.

Receive. The driver fills RX descriptors (struct npfnic_rx_desc: buffer
address and size) and writes RX_TAIL. For each frame the device writes the
data, then pkt_len and status (NPFNIC_RXD_DONE and the offload bits), then
advances rx_head. Frames are spread over the enabled pairs by a hash of the
IP addresses and TCP or UDP ports, so one flow stays on one pair in order;
frames without one (ARP, for instance) go to the first enabled pair. A frame
larger than its buffer is dropped (rx_drops_too_big). When a pair has no
buffer posted, the device stops taking frames from the wire until the driver
posts one (rx_wire_stalls), so frames wait in the host's queue rather than
being lost.

Interrupts. Pair q's completions raise vector NPFNIC_PAIR_VECTOR(q); link
changes and errors raise NPFNIC_MISC_VECTOR. A vector fires once after it
was armed (IRQ_ARM or MISC_IRQ_ARM written 1) and then stays quiet until
armed again; an event while it is disarmed is remembered, so a driver that
re-arms after polling (NAPI) gets an interrupt at once if work slipped in.
ITR spaces a pair's interrupts at least that many microseconds apart.

Stop. The driver writes 0 to the pair's CTRL, or NPFNIC_CTRL_RESET to CTRL
for every pair and the status block at once, and then follows the quiesce
contract below before it frees rings, buffers or the status block.`

// DatasheetReferences closes the datasheet.
const DatasheetReferences = `- Ilya Lesokhin, Haggai Eran, Shachar Raindel, Guy Shapiro, Sagi Grimberg,
  Liran Liss, Muli Ben-Yehuda, Nadav Amit, Dan Tsafrir. "Page Fault Support
  for Network Controllers". ASPLOS'17: the network page faults, the RX
  policies and the backup ring (section 5, Figure 6).
- PCI Express Base Specification: Address Translation Services (ATS), Page
  Request Interface (PRI) and PASID, whose capabilities the function
  implements and whose response codes the page response queue uses.
- QEMU, docs/interop/vfio-user.rst: the protocol over which QEMU runs the
  device.`
