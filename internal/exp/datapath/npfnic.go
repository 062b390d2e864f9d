package datapath

import (
	"errors"

	"github.com/npfnic/npfnic/ci/vm"
)

// ErrNoNPFNICWire says this build cannot serve npfnic with an Ethernet port.
var ErrNoNPFNICWire = errors.New("npfnic's Ethernet datapath is not in this build: ci/vm.InProcessServer takes no wire spec yet (ethring, ethring/wire, vdevice/nic)")

// InProcessNPFNIC serves the npfnic device inside this process over
// vfio-user, its Ethernet port on wire ("tap:IFNAME": the device's TAP
// backend opens the tap the run created, before it moves into the
// namespace, just as QEMU opens it for e1000e and virtio).
func InProcessNPFNIC(wire string) (vm.DeviceServer, error) {
	_ = wire
	return nil, ErrNoNPFNICWire
}
