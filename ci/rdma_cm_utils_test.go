package ci

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/npfnic/npfnic/internal/testbed"
)

// The rest of rdmacm-utils on the wire (rdma_cm_test.go runs rping,
// ucmatose and udaddy): rdma_server and rdma_client, rdma_xserver and
// rdma_xclient, the rsockets programs rstream, riostream and rcopy, and
// cmtime. XRC (rdma_xserver -c x) is offered neither by npfnic nor by
// rdma_rxe: xrcRefused checks that it fails the same way on both. udpong
// (rsockets datagrams) is not in the RDMA image; copied into the guests it
// fails before sending anything, "rconnect: No such file or directory",
// on an rdma_rxe guest talking to itself as with npfnic.

// cmDaemons are the servers that serve until they are killed: cmRun ends
// them once their client exited 0.
var cmDaemons = map[string]bool{"rcopy": true, "cmtime": true}

// rdmaServer is rdma_server and rdma_client (one 16-byte SEND each way,
// inline where the QP allows) or, x, rdma_xserver and rdma_xclient over
// RC (-c r: one inline SEND to the server).
func rdmaServer(x bool) cmSide {
	return func(g *testbed.RDMAGuest, server string) []string {
		switch {
		case server == "" && x:
			return []string{"rdma_xserver", "-c", "r", "-p", "7472"}
		case server == "":
			return []string{"rdma_server", "-s", g.IP, "-p", "7471"}
		case x:
			return []string{"rdma_xclient", "-s", server, "-c", "r", "-p", "7472"}
		}
		return []string{"rdma_client", "-s", server, "-p", "7471"}
	}
}

// rsock is rstream or riostream (rsockets; riostream's data moves by
// riowrite into the peer's riomap'ed buffer): count transfers of size
// bytes from the client, then count back, each -T option in opts given
// to both sides (v: the receiver checks every byte; b: blocking calls;
// the default is nonblocking calls) but a (poll before each call), given
// to the server only: an rstream client polling takes the server's
// disconnect, when it comes with data not yet read, for an error (its
// do_poll, which riostream shares, returns POLLHUP, exit 16): 2 runs of
// 3 on an rdma_rxe guest talking to itself.
func rsock(prog string, size, count int, opts ...string) cmSide {
	return func(g *testbed.RDMAGuest, server string) []string {
		a := []string{prog, "-S", strconv.Itoa(size), "-C", strconv.Itoa(count), "-I", "1", "-p", "7473"}
		for _, o := range opts {
			if o != "a" || server == "" {
				a = append(a, "-T", o)
			}
		}
		if server == "" {
			return append(a, "-b", g.IP)
		}
		return append(a, "-s", server)
	}
}

// cmtime: conns connections set up and torn down at once by the client,
// each step timed; the server accepts until it is killed.
func cmtime(conns int) cmSide {
	return func(g *testbed.RDMAGuest, server string) []string {
		if server == "" {
			return []string{"cmtime", "-b", g.IP, "-p", "7474"}
		}
		return []string{"cmtime", "-s", server, "-c", strconv.Itoa(conns), "-p", "7474"}
	}
}

// cmUtil runs side between server and client (cmRun) and checks what
// both sides printed; it returns the outputs.
func cmUtil(t *testing.T, server, client *testbed.RDMAGuest, side cmSide) (string, string) {
	t.Helper()
	start := time.Now()
	so, co, err := cmRun(server, client, side)
	if err != nil {
		t.Fatal(err)
	}
	cargs := side(client, server.IP)
	run := fmt.Sprintf("%s, %s server, %s client", strings.Join(cargs, " "), server.Kind, client.Kind)
	if sargs := strings.Join(side(server, ""), " "); strings.Contains(sargs, "-T a") {
		run = fmt.Sprintf("%s (server %s)", run, sargs)
	}
	for who, out := range map[string]string{"server": so, "client": co} {
		ok := true
		switch cargs[0] {
		case "rdma_client", "rdma_xclient":
			ok = strings.Contains(out, ": end 0")
		case "rstream", "riostream":
			// One row, "custom", of count transfers each way.
			ok = strings.Contains(out, "\ncustom ") && !strings.Contains(out, "verification failed")
		case "cmtime":
			// The server is killed: its output is its own.
			ok = who == "server" || (strings.Contains(out, "\nconnect ") && strings.Contains(out, "\ndisconnect ") &&
				!strings.Contains(out, "error") && !strings.Contains(out, "fail"))
		case "rcopy":
			ok = strings.Contains(out, "closing...done")
		}
		if !ok || strings.Contains(out, "failing connection request") {
			t.Fatalf("%s: the %s's output:\n%s\nthe other side's:\n%s", run, who, out, map[bool]string{true: co, false: so}[who == "server"])
		}
	}
	took := fmt.Sprintf("ok in %.1fs", time.Since(start).Seconds())
	if m := regexp.MustCompile(`(?m)^connect *: +(\S+) +(\S+) +(\S+) +(\S+)$`).FindStringSubmatch(co); m != nil {
		took += fmt.Sprintf(", cmtime's connect step %s ms in all (slowest %s ms, fastest %s µs, %s µs a connection)", m[1], m[2], m[3], m[4])
	}
	t.Logf("%s: %s", run, took)
	return so, co
}

// rcopyFile copies a file of size random bytes (made in the client guest:
// the agent's serial port moves some kB/s) from client to server with
// rcopy and compares the copy's SHA-256 with the original's.
func rcopyFile(t *testing.T, server, client *testbed.RDMAGuest, size int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sum := func(g *testbed.RDMAGuest, script string) string {
		t.Helper()
		out, err := g.Shell(ctx, script)
		if err != nil {
			t.Fatal(err)
		}
		f := strings.Fields(out)
		if len(f) == 0 || len(f[0]) != 64 {
			t.Fatalf("%s on %s: %q", script, g.Kind, out)
		}
		return f[0]
	}
	want := sum(client, fmt.Sprintf("head -c %d /dev/urandom >/tmp/rcopy.src && sha256sum /tmp/rcopy.src", size))
	if _, err := server.Shell(ctx, "rm -f /tmp/rcopy.dst"); err != nil {
		t.Fatal(err)
	}
	cmUtil(t, server, client, func(g *testbed.RDMAGuest, srv string) []string {
		if srv == "" {
			return []string{"rcopy", "-p", "7475"}
		}
		return []string{"rcopy", "/tmp/rcopy.src", srv + ":/tmp/rcopy.dst", "-p", "7475"}
	})
	if got := sum(server, "sha256sum /tmp/rcopy.dst"); got != want {
		t.Fatalf("rcopy of %d bytes, %s server, %s client: the copy's SHA-256 is %s, the original's %s", size, server.Kind, client.Kind, got, want)
	}
	t.Logf("rcopy of %d bytes (%s server, %s client): SHA-256 %s… on both sides", size, server.Kind, client.Kind, want[:16])
}

// xrcRefused runs rdma_xserver -c x (XRC, which neither npfnic nor
// rdma_rxe offers) on server and rdma_xclient -c x on client: the client
// must fail to create its XRC QP, with the message rdma_rxe gives, and
// leave nothing behind; the server, which waited in vain, is killed.
func xrcRefused(t *testing.T, server, client *testbed.RDMAGuest) {
	t.Helper()
	so, co, err := cmRun(server, client, func(g *testbed.RDMAGuest, srv string) []string {
		if srv == "" {
			return []string{"rdma_xserver", "-c", "x", "-p", "7476"}
		}
		return []string{"rdma_xclient", "-s", srv, "-c", "x", "-p", "7476"}
	})
	if err == nil || !strings.Contains(co, "rdma_create_ep: Operation not supported") || !strings.Contains(co, "end -1") ||
		strings.Contains(so, "end") {
		t.Fatalf("rdma_xclient -c x, %s server, %s client: %v\nserver:\n%s\nclient:\n%s", server.Kind, client.Kind, err, so, co)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, g := range []*testbed.RDMAGuest{server, client} {
		res, err := g.Shell(ctx, "rdma resource show qp; rdma resource show cm_id")
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(res, "rdma_x") {
			t.Fatalf("rdma_xclient -c x, %s server, %s client: left on %s:\n%s", server.Kind, client.Kind, g.Kind, res)
		}
	}
	t.Logf("rdma_xclient -c x (%s server, %s client): refused, rdma_create_ep: Operation not supported", server.Kind, client.Kind)
}

// cmUtilsMatrix runs each of these programs with a as server and b as
// client, then the other way: rdma_server, rdma_xserver over RC,
// rstream and riostream with nonblocking, blocking and polling calls, the
// receiver checking every byte, rcopy of a 1 MiB file, cmtime with 10
// connections, and the XRC refusal (xrcRefused). It returns the rdma_cm
// connections made.
func cmUtilsMatrix(t *testing.T, a, b *testbed.RDMAGuest) int {
	conns := 0
	for _, sc := range [][2]*testbed.RDMAGuest{{a, b}, {b, a}} {
		server, client := sc[0], sc[1]
		cmUtil(t, server, client, rdmaServer(false))
		cmUtil(t, server, client, rdmaServer(true))
		for _, prog := range []string{"rstream", "riostream"} {
			cmUtil(t, server, client, rsock(prog, 4096, 100, "v"))
			cmUtil(t, server, client, rsock(prog, 65536, 20, "b", "v"))
			cmUtil(t, server, client, rsock(prog, 1000, 100, "a", "v"))
		}
		rcopyFile(t, server, client, 1<<20+123)
		cmUtil(t, server, client, cmtime(10))
		xrcRefused(t, server, client)
		conns += 2 + 6 + 1 + 10
	}
	return conns
}

// cmUtilsWithRxe: make test runs rdma_server, rstream and riostream
// (each byte checked) and rcopy once, npfnic serving rdma_rxe (about 3 s
// under TCG); make vmtest-full the whole of cmUtilsMatrix. It returns the
// rdma_cm connections made.
func cmUtilsWithRxe(t *testing.T, npf, rxe *testbed.RDMAGuest) int {
	if fullVMTests() {
		return cmUtilsMatrix(t, npf, rxe)
	}
	cmUtil(t, npf, rxe, rdmaServer(false))
	cmUtil(t, npf, rxe, rsock("rstream", 4096, 100, "v"))
	cmUtil(t, npf, rxe, rsock("riostream", 4096, 100, "v"))
	rcopyFile(t, npf, rxe, 1<<20+123)
	return 4
}
