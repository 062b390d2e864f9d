package npfnic

import (
	"strings"
	"time"

	"github.com/npfnic/npfnic/vdevice/hw"
)

// quiescePoll is how often waitQuiesced looks at the engines.
const quiescePoll = 100 * time.Microsecond

// waitQuiesced waits until every engine stopped by a reset has quiesced:
// the datapath, the ATS and PRI instances and the diagnostic DMA. It gives
// up after hw.QuiesceTimeoutMS and logs which engines were still busy: a
// unit may be waiting for the very client whose request is being answered
// (remote DMA over the same socket), and the answer must not deadlock.
func (n *NIC) waitQuiesced(why string) bool {
	deadline := time.Now().Add(hw.QuiesceTimeoutMS * time.Millisecond)
	for {
		busy := n.busyEngines()
		if len(busy) == 0 {
			return true
		}
		if time.Now().After(deadline) {
			n.log.Warn("engines still busy after a reset; answering anyway", "reset", why,
				"busy", strings.Join(busy, ","), "timeout_ms", hw.QuiesceTimeoutMS)
			return false
		}
		time.Sleep(quiescePoll)
	}
}

// busyEngines names the engines that may still DMA.
func (n *NIC) busyEngines() []string {
	var busy []string
	if n.dp.Busy() {
		busy = append(busy, "datapath")
	}
	if n.rdma.Busy() {
		busy = append(busy, "rdma")
	}
	if !n.xlat.Quiesced() {
		busy = append(busy, "ats")
	}
	if !n.pri.Quiesced() {
		busy = append(busy, "pri")
	}
	if !n.diagQuiesced() {
		busy = append(busy, "diag-dma")
	}
	return busy
}
