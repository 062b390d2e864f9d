package npfnic

import (
	"github.com/npfnic/npfnic/ethring"
	"github.com/npfnic/npfnic/vdevice/port"
)

// The function owns its port (Options.Wire): a port.Mux over the backend,
// into which each engine plugs its receive side and from which it takes
// its transmit Endpoint. Ethernet is the default engine: it receives every
// frame no other engine claims. The RC engine will plug in beside it with
// a claim for RoCEv2; neither engine sees the other.

// plugEthernet builds the Ethernet datapath on the function's port and
// starts reading the port. Without a backend the datapath has no port and
// its link is down. If it fails, the port is not read and stays open.
func (n *NIC) plugEthernet(c ethring.Config) (*ethring.Datapath, error) {
	if n.wire == nil {
		return ethring.New(c)
	}
	mux := port.NewMux(n.wire, n.log.With("part", "port"))
	ep, err := mux.Attach("ethernet", nil)
	if err != nil {
		return nil, err
	}
	c.Port = ep
	dp, err := ethring.New(c)
	if err != nil {
		return nil, err
	}
	ep.Deliver(dp)
	if err := mux.Start(); err != nil {
		dp.Close()
		return nil, err
	}
	n.mux = mux
	return dp, nil
}

// closePort closes the backend, through the Mux if one reads it. Close the
// engines first.
func (n *NIC) closePort() error {
	if n.mux != nil {
		return n.mux.Close()
	}
	if n.wire != nil {
		return n.wire.Close()
	}
	return nil
}
