package hostnet

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"time"

	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
)

// PingResult is what Ping measured.
type PingResult struct {
	Sent, Received int
	RTTs           []time.Duration
}

// Ping sends count ICMP echo requests to an IPv4 address from inside the
// namespace, one every interval, and waits up to timeout for each reply.
// It needs no ping binary (the host may have none). It fails only if the
// socket cannot be opened or ctx ends; a lost reply shows in the result.
func (ns *Namespace) Ping(ctx context.Context, addr string, count int, interval, timeout time.Duration) (PingResult, error) {
	var res PingResult
	dst, err := netip.ParseAddr(addr)
	if err != nil || !dst.Is4() {
		return res, fmt.Errorf("hostnet: Ping %q: want an IPv4 address", addr)
	}
	var conn *icmp.PacketConn
	if err := ns.Do(func() error {
		var err error
		conn, err = icmp.ListenPacket("ip4:icmp", "0.0.0.0")
		return err
	}); err != nil {
		return res, fmt.Errorf("hostnet: ICMP socket in %s: %w", ns, err)
	}
	defer conn.Close()
	id := os.Getpid() & 0xffff
	buf := make([]byte, 1500)
	for seq := 1; seq <= count; seq++ {
		if seq > 1 {
			select {
			case <-ctx.Done():
				return res, ctx.Err()
			case <-time.After(interval):
			}
		}
		msg := icmp.Message{Type: ipv4.ICMPTypeEcho, Body: &icmp.Echo{ID: id, Seq: seq, Data: []byte("npfnic hostnet ping")}}
		wb, err := msg.Marshal(nil)
		if err != nil {
			return res, err
		}
		start := time.Now()
		if _, err := conn.WriteTo(wb, &net.IPAddr{IP: dst.AsSlice()}); err != nil {
			return res, fmt.Errorf("hostnet: ping %s from %s: %w", addr, ns, err)
		}
		res.Sent++
		deadline := start.Add(timeout)
		if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
			deadline = dl
		}
		if err := conn.SetReadDeadline(deadline); err != nil {
			return res, err
		}
		for {
			n, peer, err := conn.ReadFrom(buf)
			if err != nil {
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() {
					if ctx.Err() != nil {
						return res, ctx.Err()
					}
					break // lost
				}
				return res, err
			}
			reply, err := icmp.ParseMessage(1, buf[:n]) // 1: ICMP for IPv4
			if err != nil || reply.Type != ipv4.ICMPTypeEchoReply {
				continue
			}
			echo, ok := reply.Body.(*icmp.Echo)
			if !ok || echo.ID != id || echo.Seq != seq || peer.String() != dst.String() {
				continue // someone else's, or a late reply
			}
			res.Received++
			res.RTTs = append(res.RTTs, time.Since(start))
			break
		}
	}
	return res, nil
}
