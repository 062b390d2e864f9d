package hostnet

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"time"
)

// SendUDP sends count datagrams of size bytes to addr:port from inside the
// namespace, one every gap, and returns how many the kernel accepted. It
// waits for no reply: it is for filling a receiver's ring (every frame
// takes a slot whether or not anything listens), not for measuring. A
// gap of 0 sends as fast as the socket takes them.
func (ns *Namespace) SendUDP(ctx context.Context, addr string, port, count, size int, gap time.Duration) (int, error) {
	dst, err := netip.ParseAddr(addr)
	if err != nil || !dst.Is4() {
		return 0, fmt.Errorf("hostnet: SendUDP %q: want an IPv4 address", addr)
	}
	if port <= 0 || port > 65535 || size < 0 || size > 65507 {
		return 0, fmt.Errorf("hostnet: SendUDP: port %d or size %d out of range", port, size)
	}
	// Unconnected, so that the ICMP unreachable a closed port answers
	// with is never reported on (and never refuses) a later write.
	var conn net.PacketConn
	if err := ns.Do(func() error {
		var err error
		conn, err = net.ListenPacket("udp4", "0.0.0.0:0")
		return err
	}); err != nil {
		return 0, fmt.Errorf("hostnet: UDP socket in %s: %w", ns, err)
	}
	defer conn.Close()
	to := net.UDPAddrFromAddrPort(netip.AddrPortFrom(dst, uint16(port)))
	payload := make([]byte, size)
	sent := 0
	for i := 0; i < count; i++ {
		if err := ctx.Err(); err != nil {
			return sent, err
		}
		if i > 0 && gap > 0 {
			time.Sleep(gap)
		}
		if _, err := conn.WriteTo(payload, to); err != nil {
			return sent, fmt.Errorf("hostnet: UDP to %s:%d from %s: %w", addr, port, ns, err)
		}
		sent++
	}
	return sent, nil
}
