package npfnic

import (
	"github.com/npfnic/npfnic/ethring"
	"github.com/npfnic/npfnic/rdma"
	"github.com/npfnic/npfnic/vdevice/port"
)

// The function owns its port (Options.Wire): a port.Mux over the backend,
// into which each engine plugs its receive side and from which it takes
// its transmit Endpoint. The RC engine claims RoCEv2 frames to the
// device's GIDs (rdma.Engine.Claim); Ethernet is the default engine: it
// receives every frame no other engine claims. Neither engine sees the
// other.

// plugEngines builds the Ethernet datapath and plugs it and the RC engine
// into the function's port, then starts reading the port. Without a
// backend neither has a port and the link is down. If it fails, the port
// is not read and stays open.
func (n *NIC) plugEngines(c ethring.Config, rc *rdma.Engine) (*ethring.Engine, error) {
	if n.wire == nil {
		return ethring.New(c)
	}
	mux := port.NewMux(n.wire, n.log.With("part", "port"))
	rcEP, err := mux.Attach("rdma", rc.Claim)
	if err != nil {
		return nil, err
	}
	rcEP.Deliver(rc)
	rc.SetPort(rcEP)
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
