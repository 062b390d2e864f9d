package trace

// Accesses counts what a stretch of the trace cost the driver in round
// trips to the device, beside the frames it moved: the data path should
// take no BAR read per frame or per interrupt (issue 28), and as few
// doorbells and interrupts as batching allows.
type Accesses struct {
	RxFrames, TxFrames uint64 // Ethernet frames received into descriptors, and sent (TSO segments each)
	BARReads           uint64 // RegRead: the driver read BAR0
	Doorbells          uint64 // Doorbell: the driver wrote a doorbell register
	IRQs               uint64 // interrupts raised
}

// CountAccesses counts events' frames, BAR reads, doorbells and interrupts.
func CountAccesses(events []Event) Accesses {
	var a Accesses
	for _, e := range events {
		switch e.Kind {
		case RxFrame:
			a.RxFrames++
		case TxFrame:
			a.TxFrames++
		case RegRead:
			a.BARReads++
		case Doorbell:
			a.Doorbells++
		case IRQ:
			a.IRQs++
		}
	}
	return a
}

// PerThousandFrames is n per 1000 frames either way (0 without frames).
func (a Accesses) PerThousandFrames(n uint64) float64 {
	frames := a.RxFrames + a.TxFrames
	if frames == 0 {
		return 0
	}
	return float64(n) * 1000 / float64(frames)
}
