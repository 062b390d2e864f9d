package hostnet

import (
	"errors"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
)

func TestUniqueName(t *testing.T) {
	seen := map[string]bool{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 50 {
				n, err := UniqueName("abcde")
				if err != nil {
					t.Error(err)
					return
				}
				if err := ValidIfname(n); err != nil {
					t.Error(err)
				}
				mu.Lock()
				if seen[n] {
					t.Errorf("name %s handed out twice", n)
				}
				seen[n] = true
				mu.Unlock()
				pid, ok := ownerPid("abcde", n)
				if !ok || pid != os.Getpid() {
					t.Errorf("ownerPid(%q) = %d, %v; want %d", n, pid, ok, os.Getpid())
				}
			}
		}()
	}
	wg.Wait()
}

func TestUniqueNameFitsWithLargestPid(t *testing.T) {
	// The largest pid Linux allows (4194304) and a large counter still fit.
	name := "abcde" + strconv.FormatInt(4194304, 36) + nameSep + strconv.FormatUint(46655, 36)
	if len(name) > MaxIfnameLen {
		t.Fatalf("%q is %d bytes, more than %d", name, len(name), MaxIfnameLen)
	}
}

func TestUniqueNameRejectsBadPrefixes(t *testing.T) {
	for _, p := range []string{"", "toolong", "Ab", "1a", "a-b", "a/b", "a b"} {
		if _, err := UniqueName(p); err == nil {
			t.Errorf("UniqueName(%q) succeeded", p)
		}
	}
	for _, p := range []string{"a", "dp", "dp9", "z0z0z"} {
		if _, err := UniqueName(p); err != nil {
			t.Errorf("UniqueName(%q): %v", p, err)
		}
	}
}

func TestOwnerPid(t *testing.T) {
	for _, tt := range []struct {
		prefix, name string
		pid          int
		ok           bool
	}{
		{"dp", "dp1k3-7", 1*36*36 + 20*36 + 3, true},
		{"dp", "dp1k3-", 0, false},
		{"dp", "dp-7", 0, false},
		{"dp", "dq1k3-7", 0, false},
		{"dp", "dp1k3", 0, false},
		{"dp", "dp1k3-7!", 0, false},
		{"dp", "eth0", 0, false},
	} {
		pid, ok := ownerPid(tt.prefix, tt.name)
		if pid != tt.pid || ok != tt.ok {
			t.Errorf("ownerPid(%q, %q) = %d, %v; want %d, %v", tt.prefix, tt.name, pid, ok, tt.pid, tt.ok)
		}
	}
}

func TestValidIfname(t *testing.T) {
	for _, n := range []string{"", "0123456789abcdef", "a/b", "a:b", "a b", ".", ".."} {
		if ValidIfname(n) == nil {
			t.Errorf("ValidIfname(%q) accepted", n)
		}
	}
	for _, n := range []string{"tap0", "0123456789abcde", "dp1k3-7", "veth_a.1"} {
		if err := ValidIfname(n); err != nil {
			t.Errorf("ValidIfname(%q): %v", n, err)
		}
	}
}

const procNetTCP6 = `  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000000000000000000000000000:1451 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 31337 1 0000000000000000 100 0 0 10 0
   1: 0000000000000000FFFF00000100007F:2BCB 0000000000000000FFFF00000100007F:D431 01 00000000:00000000 00:00000000 00000000     0        0 31338 1 0000000000000000 20 4 30 10 -1
`

const procNetTCP = `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000:2BCB 00000000:0000 0A 00000000:00000000 00:00000000 00000000   100        0 1234 1 0000000000000000 100 0 0 10 0
   1: 0100007F:0016 0100007F:A1B2 01 00000000:00000000 02:0009E2C4 00000000     0        0 5678 2 0000000000000000 20 4 1 10 -1
`

func TestListeningPorts(t *testing.T) {
	p, err := ListeningPorts([]byte(procNetTCP6))
	if err != nil {
		t.Fatal(err)
	}
	if !p[5201] || len(p) != 1 {
		t.Errorf("tcp6: got %v, want only 5201 (11211 is an established connection there)", p)
	}
	p, err = ListeningPorts([]byte(procNetTCP))
	if err != nil {
		t.Fatal(err)
	}
	if !p[11211] || p[22] || len(p) != 1 {
		t.Errorf("tcp: got %v, want only 11211", p)
	}
	for _, bad := range []string{"", "hello\nworld\n"} {
		if _, err := ListeningPorts([]byte(bad)); err == nil {
			t.Errorf("ListeningPorts(%q) accepted", bad)
		}
	}
}

func TestCommandErrorShowsOutput(t *testing.T) {
	e := &CommandError{Argv: []string{"iperf3", "-c", "x"}, Where: "netns a", Stderr: "unable to connect", Err: errors.New("exit status 1")}
	for _, want := range []string{"iperf3 -c x", "netns a", "exit status 1", "unable to connect"} {
		if !strings.Contains(e.Error(), want) {
			t.Errorf("%q lacks %q", e.Error(), want)
		}
	}
}

func TestLockedBufferKeepsNewest(t *testing.T) {
	var b lockedBuffer
	chunk := strings.Repeat("a", 1000) + "\n"
	for range maxKeep/len(chunk) + 10 {
		b.Write([]byte(chunk))
	}
	b.Write([]byte("last words\n"))
	s := b.String()
	if len(s) > maxKeep {
		t.Errorf("kept %d bytes, more than %d", len(s), maxKeep)
	}
	if !strings.HasSuffix(s, "last words\n") {
		t.Errorf("lost the newest output")
	}
}
