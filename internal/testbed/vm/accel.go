package vm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/npfnic/npfnic/images"
)

// Accel is how QEMU runs a guest's CPUs: KVM (the host's hardware
// virtualization, with -cpu host) or TCG (QEMU's binary translator, about
// an order of magnitude slower). AccelAuto picks KVM where a guest boots
// under it (ProbeKVM) and TCG elsewhere.
type Accel string

// The accelerator settings; the zero value is the environment's setting
// (AccelEnv), else auto.
const (
	AccelAuto Accel = "auto"
	AccelKVM  Accel = "kvm"
	AccelTCG  Accel = "tcg"
)

// AccelEnv names the environment variable that sets the accelerator of
// guests whose Config leaves it empty (the VM tests in ci/): kvm, tcg or
// auto, the default.
const AccelEnv = "NPFNIC_ACCEL"

// AccelHelp describes the settings, for flags.
const AccelHelp = "the guests' `accelerator`: kvm (an error where KVM does not work), tcg, or auto (KVM where a probe guest boots under it, else TCG)"

// ParseAccel reads a setting: kvm, tcg or auto ("" is auto). Its error
// lists the settings; the caller names what was wrong.
func ParseAccel(s string) (Accel, error) {
	switch a := Accel(strings.ToLower(strings.TrimSpace(s))); a {
	case "":
		return AccelAuto, nil
	case AccelAuto, AccelKVM, AccelTCG:
		return a, nil
	}
	return "", errors.New("want kvm, tcg or auto")
}

// String is "KVM" or "TCG" for an accelerator, the setting itself for
// auto (and "" for the zero value).
func (a Accel) String() string {
	switch a {
	case AccelKVM:
		return "KVM"
	case AccelTCG:
		return "TCG"
	}
	return string(a)
}

// Set implements flag.Value: -accel kvm|tcg|auto.
func (a *Accel) Set(s string) error {
	v, err := ParseAccel(s)
	if err != nil {
		return err
	}
	*a = v
	return nil
}

// EnvAccel is the setting of $NPFNIC_ACCEL, auto if it is unset.
func EnvAccel() (Accel, error) {
	a, err := ParseAccel(os.Getenv(AccelEnv))
	if err != nil {
		return "", fmt.Errorf("$%s %q: %w", AccelEnv, os.Getenv(AccelEnv), err)
	}
	return a, nil
}

// ResolveAccel turns a setting into the accelerator a guest boots with,
// KVM or TCG. tcg needs nothing; kvm and auto run the KVM probe
// (ProbeKVM, once per process and images, its result kept in the image
// cache): kvm is an error where KVM does not work, auto falls back to TCG
// and says why in a one-line notice on stderr, once per process. The
// zero value is $NPFNIC_ACCEL's setting, else auto.
func ResolveAccel(ctx context.Context, img *images.Artifacts, want Accel) (Accel, error) {
	if want == "" {
		var err error
		if want, err = EnvAccel(); err != nil {
			return "", err
		}
	}
	switch want {
	case AccelTCG:
		return AccelTCG, nil
	case AccelKVM, AccelAuto:
	default:
		return "", fmt.Errorf("accelerator %q: want kvm, tcg or auto", string(want))
	}
	if img == nil {
		return "", fmt.Errorf("accelerator %s: the KVM probe needs the guest images", string(want))
	}
	p, err := ProbeKVM(ctx, img, false)
	if err != nil {
		return "", err
	}
	if p.Works {
		return AccelKVM, nil
	}
	if want == AccelKVM {
		return "", fmt.Errorf("KVM does not work on this host: %s%s", p.Reason, p.origin())
	}
	notice.once(p, func() {
		fmt.Fprintf(notice.out, "npfnic: using TCG, not KVM: %s%s\n", p.Reason, p.origin())
	})
	return AccelTCG, nil
}

// notice is where ResolveAccel says, once per probe, why it fell back to
// TCG.
var notice = &noticeBoard{out: os.Stderr, said: map[string]bool{}}

type noticeBoard struct {
	mu   sync.Mutex
	out  io.Writer
	said map[string]bool
}

// once runs say the first time it is called for p's probe.
func (n *noticeBoard) once(p KVMProbe, say func()) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.said[p.key] {
		n.said[p.key] = true
		say()
	}
}

// machineArgs are QEMU's machine, memory and CPU arguments for a guest of
// memMiB and cpus under accel (KVM or TCG). The guest's RAM is a shared
// memfd, so that vfio-user DMA maps carry its file descriptor; KVM guests
// get the host's CPU model, TCG guests QEMU's default.
func machineArgs(accel Accel, memMiB, cpus int) []string {
	mem := strconv.Itoa(memMiB) + "M"
	args := []string{
		"-machine", "q35,accel=" + string(accel) + ",memory-backend=mem",
		"-object", "memory-backend-memfd,id=mem,size=" + mem + ",share=on",
		"-m", mem, "-smp", strconv.Itoa(cpus),
	}
	if accel == AccelKVM {
		args = append(args, "-cpu", "host")
	}
	return args
}

// origin says where a probe's verdict comes from, for messages.
func (p KVMProbe) origin() string {
	if p.FromCache {
		return fmt.Sprintf(" (probed %s, cached in %s; delete it to probe again)", p.At.Local().Format(time.DateTime), p.CacheFile)
	}
	return fmt.Sprintf(" (probed in %.1fs)", p.Took.Seconds())
}
