package hostnet

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// Link is a network interface this package created: a tap or one end of a
// veth pair. It starts in the root namespace; MoveToNamespace moves it.
type Link struct {
	name string

	mu sync.Mutex
	ns *Namespace // nil: the root namespace
	// gone is set once the link is deleted; both ends of a veth pair
	// share it, since the kernel deletes them together.
	gone *atomic.Bool
}

// Name is the interface name.
func (l *Link) Name() string { return l.name }

// Namespace is where the link is now; nil means the root namespace.
func (l *Link) Namespace() *Namespace {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ns
}

func (l *Link) String() string {
	if ns := l.Namespace(); ns != nil {
		return l.name + " in " + ns.String()
	}
	return l.name + " in the root namespace"
}

// CreateTap creates a persistent tap device in the root namespace (ip tuntap
// add ... mode tap), for QEMU's -netdev tap,ifname=NAME (or another program)
// to open by name. Delete it with Delete, or move it into a namespace whose
// Close deletes it.
func CreateTap(name string) (*Link, error) {
	if err := ValidIfname(name); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), ipTimeout)
	defer cancel()
	if _, err := ip(ctx, "tuntap", "add", "dev", name, "mode", "tap"); err != nil {
		return nil, err
	}
	return &Link{name: name, gone: new(atomic.Bool)}, nil
}

// CreateVeth creates a veth pair in the root namespace. Deleting either end
// deletes both.
func CreateVeth(name, peer string) (*Link, *Link, error) {
	for _, n := range []string{name, peer} {
		if err := ValidIfname(n); err != nil {
			return nil, nil, err
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), ipTimeout)
	defer cancel()
	if _, err := ip(ctx, "link", "add", "dev", name, "type", "veth", "peer", "name", peer); err != nil {
		return nil, nil, err
	}
	gone := new(atomic.Bool)
	return &Link{name: name, gone: gone}, &Link{name: peer, gone: gone}, nil
}

// MoveToNamespace moves the link into ns, where ns.Close deletes it. The
// kernel takes the link down and drops its addresses on the move, so
// configure it afterwards. A tap keeps the file descriptors attached to it
// (QEMU's), so a guest NIC keeps working across the move.
func MoveToNamespace(l *Link, ns *Namespace) error {
	if ns == nil {
		return errors.New("hostnet: MoveToNamespace: nil namespace")
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.gone.Load() {
		return fmt.Errorf("hostnet: link %s was deleted", l.name)
	}
	if l.ns == ns {
		return nil
	}
	if err := ns.track(nil, l); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), ipTimeout)
	defer cancel()
	if _, err := ip(ctx, append(nsArgs(l.ns), "link", "set", "dev", l.name, "netns", ns.name)...); err != nil {
		ns.untrack(l)
		return err
	}
	if l.ns != nil {
		l.ns.untrack(l)
	}
	l.ns = ns
	return nil
}

// nsArgs selects ns for an ip command.
func nsArgs(ns *Namespace) []string {
	if ns == nil {
		return nil
	}
	return []string{"-n", ns.name}
}

// ipHere runs ip for the link, in the namespace the link is in.
func (l *Link) ipHere(ctx context.Context, args ...string) error {
	ns := l.Namespace()
	if l.gone.Load() {
		return fmt.Errorf("hostnet: link %s was deleted", l.name)
	}
	_, err := ip(ctx, append(nsArgs(ns), args...)...)
	return err
}

// Up sets the link up.
func (l *Link) Up(ctx context.Context) error {
	return l.ipHere(ctx, "link", "set", "dev", l.name, "up")
}

// AddAddr adds an address with its prefix length, e.g. "10.77.1.1/24".
func (l *Link) AddAddr(ctx context.Context, cidr string) error {
	if _, err := netip.ParsePrefix(cidr); err != nil {
		return fmt.Errorf("hostnet: address %q: %w", cidr, err)
	}
	return l.ipHere(ctx, "addr", "add", cidr, "dev", l.name)
}

// SetMTU sets the link's MTU.
func (l *Link) SetMTU(ctx context.Context, mtu int) error {
	return l.ipHere(ctx, "link", "set", "dev", l.name, "mtu", strconv.Itoa(mtu))
}

// Configure adds the address cidr (if not empty) and sets the link up.
func (l *Link) Configure(ctx context.Context, cidr string) error {
	if cidr != "" {
		if err := l.AddAddr(ctx, cidr); err != nil {
			return err
		}
	}
	return l.Up(ctx)
}

// Delete removes the link wherever it is; deleting a link that is already
// gone (with its namespace, or as the peer of a deleted veth) is no error.
func (l *Link) Delete() error {
	ns := l.Namespace()
	if ns != nil {
		ns.untrack(l)
	}
	return l.delete(ns)
}

// delete removes the link from ns (where the caller believes it is).
func (l *Link) delete(ns *Namespace) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.gone.Load() {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), ipTimeout)
	defer cancel()
	_, err := ip(ctx, append(nsArgs(ns), "link", "del", "dev", l.name)...)
	if err != nil && !linkGone(ns, l.name, err) {
		return err
	}
	l.gone.Store(true)
	return nil
}

// linkGone reports whether a failed delete failed because the link (or its
// namespace) no longer exists.
func linkGone(ns *Namespace, name string, err error) bool {
	var ce *CommandError
	if errors.As(err, &ce) && (strings.Contains(ce.Stderr, "Cannot find device") || strings.Contains(ce.Stderr, "does not exist")) {
		return true
	}
	if ns == nil {
		_, statErr := os.Lstat(filepath.Join("/sys/class/net", name))
		return os.IsNotExist(statErr)
	}
	return !nsExists(ns.name)
}
