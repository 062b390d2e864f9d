package datapath

import (
	"github.com/npfnic/npfnic/internal/testbed/vm"
	"github.com/npfnic/npfnic/vdevice/trace"
)

// InProcessNPFNIC serves the npfnic device inside this process over
// vfio-user, its Ethernet port on wire ("tap:IFNAME": the device's TAP
// backend opens the tap the run created while it is still in the root
// namespace, just as QEMU opens it for e1000e and virtio-net; the tap then
// moves into the run's namespace with the device still attached),
// recording its events into tr (nil: none).
func InProcessNPFNIC(wire string, tr *trace.Recorder) (vm.DeviceServer, error) {
	return vm.InProcessServer{Wire: wire, Trace: tr}, nil
}
