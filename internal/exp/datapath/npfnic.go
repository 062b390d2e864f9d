package datapath

import (
	"github.com/npfnic/npfnic/internal/testbed/vm"
)

// InProcessNPFNIC serves the npfnic device inside this process over
// vfio-user, its Ethernet port on wire ("tap:IFNAME": the device's TAP
// backend opens the tap the run created while it is still in the root
// namespace, just as QEMU opens it for e1000e and virtio-net; the tap then
// moves into the run's namespace with the device still attached).
func InProcessNPFNIC(wire string) (vm.DeviceServer, error) {
	return vm.InProcessServer{Wire: wire}, nil
}
