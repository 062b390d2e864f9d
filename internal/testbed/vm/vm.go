// Package vm is the VM harness: it boots a Linux guest in QEMU (q35, KVM
// where it works and TCG elsewhere, memfd-shared RAM so vfio-user DMA maps
// carry file descriptors) with any
// number of npfnic devices and QEMU NICs, drives the guest through the agent
// on its second serial port, speaks QMP to QEMU, and keeps the console log
// and the QMP transcript so a failure can be read afterwards. Several VMs can
// run at once.
package vm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/npfnic/npfnic/guestdrv/agent"
	"github.com/npfnic/npfnic/images"
	"github.com/npfnic/npfnic/internal/testbed/child"
)

// NPFNIC is one npfnic device on its own PCIe root port.
type NPFNIC struct {
	// Server serves the device's vfio-user socket; nil uses the default
	// (Config.DefaultServer).
	Server DeviceServer
	// Socket, if set, is a vfio-user socket served by someone else (a
	// server that outlives this VM); no server is started for it.
	Socket string
}

// QEMUNIC is one of QEMU's own NICs, for side-by-side comparisons and peers.
type QEMUNIC struct {
	Model  string // "e1000e", "virtio-net-pci"
	Netdev Netdev
	MAC    string // optional
}

// Netdev is a QEMU network backend.
type Netdev struct {
	// Kind is "user", "tap" or "stream".
	Kind string
	// Ifname is the host tap device (tap).
	Ifname string
	// Path is the unix socket (stream); Server makes QEMU listen on it.
	Path   string
	Server bool
	// Extra options appended verbatim (e.g. "hostfwd=tcp::2222-:22" for user).
	Extra string
}

// Config describes a guest.
type Config struct {
	Name      string
	Images    *images.Artifacts
	Variant   images.Variant // default base
	MemoryMiB int            // default 1024
	CPUs      int            // default 1
	// Accel is kvm, tcg or auto (ResolveAccel); default $NPFNIC_ACCEL,
	// else auto.
	Accel   Accel
	NPFNICs []NPFNIC
	NICs    []QEMUNIC
	// DefaultServer serves npfnic devices that name no server.
	DefaultServer DeviceServer
	// Append is added to the kernel command line.
	Append string
	// LogDir keeps console, QMP transcript and server logs; default a new
	// directory under os.TempDir().
	LogDir string
	// Console, if set, receives the console output as it happens.
	Console io.Writer
	// Interactive puts the guest console on this process's terminal
	// (Ctrl-A X quits QEMU), for npfnic boot.
	Interactive bool
	// AllowReboot lets a guest reboot instead of QEMU exiting.
	AllowReboot bool
	// BootTimeout bounds the wait for the agent; default 180 s (a TCG
	// guest on a loaded host; under KVM it boots in a few seconds).
	BootTimeout time.Duration
	// ExtraArgs are appended to QEMU's command line.
	ExtraArgs []string
}

// VM is a running guest.
type VM struct {
	cfg       Config
	accel     Accel
	cmd       *exec.Cmd
	sockDir   string
	logDir    string
	agent     *agent.Client
	qmp       *qmpConn
	stops     []func() error
	exited    chan struct{}
	exitErr   error
	closeOnce sync.Once
	stderr    bytes.Buffer
}

// Result is what a guest command did.
type Result struct {
	Exit     int
	Stdout   string
	Stderr   string
	TimedOut bool
}

// Start boots a guest and returns once its agent answers.
func Start(ctx context.Context, cfg Config) (*VM, error) {
	if cfg.Images == nil {
		return nil, errors.New("vm: Config.Images is required (images.Builder.Build)")
	}
	if cfg.Name == "" {
		cfg.Name = "guest"
	}
	if cfg.Variant == "" {
		cfg.Variant = images.VariantBase
	}
	if cfg.MemoryMiB == 0 {
		cfg.MemoryMiB = 1024
	}
	if cfg.CPUs == 0 {
		cfg.CPUs = 1
	}
	if cfg.BootTimeout == 0 {
		cfg.BootTimeout = 180 * time.Second
	}
	accel, err := ResolveAccel(ctx, cfg.Images, cfg.Accel)
	if err != nil {
		return nil, err
	}
	v := &VM{cfg: cfg, accel: accel, exited: make(chan struct{})}
	// Unix socket paths are limited to 108 bytes: keep them short.
	reapSockDirs()
	if v.sockDir, err = os.MkdirTemp("", sockDirPrefix()); err != nil {
		return nil, err
	}
	v.logDir = cfg.LogDir
	if v.logDir == "" {
		if v.logDir, err = os.MkdirTemp("", "npfnic-"+cfg.Name+"-logs-"); err != nil {
			return nil, err
		}
	}
	if err := os.MkdirAll(v.logDir, 0o755); err != nil {
		return nil, err
	}
	register(v)
	if err := v.start(ctx); err != nil {
		v.Kill()
		return nil, err
	}
	return v, nil
}

func (v *VM) path(name string) string { return filepath.Join(v.sockDir, name) }

// Accel is the accelerator the guest runs under: KVM or TCG.
func (v *VM) Accel() Accel { return v.accel }

// ConsoleLog is the file holding everything the guest printed on its console.
func (v *VM) ConsoleLog() string { return filepath.Join(v.logDir, "console.log") }

// QMPLog is the transcript of every QMP command, response and event.
func (v *VM) QMPLog() string { return filepath.Join(v.logDir, "qmp.log") }

// LogDir holds the console log, the QMP transcript, QEMU's stderr and device server logs.
func (v *VM) LogDir() string { return v.logDir }

func (v *VM) start(ctx context.Context) error {
	img := v.cfg.Images
	sockets := make([]string, len(v.cfg.NPFNICs))
	for i, d := range v.cfg.NPFNICs {
		sockets[i] = d.Socket
		if sockets[i] == "" {
			sockets[i] = v.path(fmt.Sprintf("npfnic%d.sock", i))
			if err := v.startServer(ctx, i, d.Server, sockets[i]); err != nil {
				return err
			}
		}
	}
	args, err := v.qemuArgs(sockets)
	if err != nil {
		return err
	}
	v.cmd = img.QEMU.Command(context.Background(), args...)
	if v.cfg.Interactive {
		v.cmd.Stdin, v.cmd.Stdout = os.Stdin, os.Stdout
		v.cmd.Stderr = io.MultiWriter(os.Stderr, &v.stderr)
	} else {
		v.cmd.Stderr = &v.stderr
	}
	if err := os.WriteFile(filepath.Join(v.logDir, "qemu-cmdline.txt"), []byte(strings.Join(v.cmd.Args, " \\\n  ")+"\n"), 0o644); err != nil {
		return err
	}
	// QEMU dies with this process (SIGKILL: its guest is disposable);
	// an interactive QEMU stays in the terminal's foreground group.
	if err := child.Start(v.cmd, syscall.SIGKILL, !v.cfg.Interactive); err != nil {
		return fmt.Errorf("start QEMU: %w", err)
	}
	go func() {
		err := v.cmd.Wait()
		v.exitErr = err
		_ = os.WriteFile(filepath.Join(v.logDir, "qemu-stderr.log"), v.stderr.Bytes(), 0o644)
		close(v.exited)
	}()

	if !v.cfg.Interactive {
		conn, err := v.dial(ctx, v.path("console.sock"))
		if err != nil {
			return err
		}
		go v.captureConsole(conn)
	}
	if err := v.waitSocket(ctx, v.path("qmp.sock")); err != nil {
		return err
	}
	if v.qmp, err = newQMP(v.path("qmp.sock"), v.QMPLog()); err != nil {
		return v.deathError(fmt.Errorf("QMP: %w", err))
	}
	aconn, err := v.dial(ctx, v.path("agent.sock"))
	if err != nil {
		return err
	}
	v.agent = agent.NewClient(aconn)
	return v.waitAgent(ctx)
}

// qemuArgs is QEMU's command line for the guest, whose npfnic devices
// are served on sockets.
func (v *VM) qemuArgs(sockets []string) ([]string, error) {
	img := v.cfg.Images
	initrd := img.Initramfs
	switch v.cfg.Variant {
	case images.VariantRDMA:
		initrd = img.RDMAInitramfs
	case images.VariantConformance:
		initrd = img.ConformanceInitramfs
	case images.VariantMPI:
		initrd = img.MPIInitramfs
	}
	args := []string{"-name", v.cfg.Name}
	args = append(args, machineArgs(v.accel, v.cfg.MemoryMiB, v.cfg.CPUs)...)
	// no_timer_check: on a starved host a TCG vCPU can miss the IO-APIC
	// timer check's few ticks, and the kernel panics at boot ("IO-APIC +
	// timer doesn't work!"; seen here at load 18). The timer works; the
	// check only cannot tell under TCG, so it is skipped, as cloud images
	// do for their VMs.
	args = append(args,
		"-nodefaults", "-display", "none", "-vga", "none",
		"-kernel", img.Kernel.Vmlinux, "-initrd", initrd,
		"-append", strings.TrimSpace("console=ttyS0 panic=-1 no_timer_check "+v.cfg.Append),
		"-chardev", "socket,id=agent,path="+v.path("agent.sock")+",server=on,wait=off",
		"-qmp", "unix:"+v.path("qmp.sock")+",server=on,wait=off",
	)
	if v.cfg.Interactive {
		args = append(args, "-chardev", "stdio,id=con,mux=on,signal=off,logfile="+v.ConsoleLog())
	} else {
		args = append(args, "-chardev", "socket,id=con,path="+v.path("console.sock")+",server=on,wait=on")
	}
	args = append(args, "-serial", "chardev:con", "-serial", "chardev:agent")
	if !v.cfg.AllowReboot {
		args = append(args, "-no-reboot")
	}
	port := 0
	rootPort := func() string {
		port++
		id := fmt.Sprintf("rp%d", port)
		args = append(args, "-device", fmt.Sprintf("pcie-root-port,id=%s,chassis=%d,slot=%d", id, port, port))
		return id
	}
	for i, sock := range sockets {
		bus := rootPort()
		dev, _ := json.Marshal(map[string]any{
			"driver": "vfio-user-pci", "id": fmt.Sprintf("npfnic%d", i), "bus": bus,
			"socket": map[string]string{"type": "unix", "path": sock},
		})
		args = append(args, "-device", string(dev))
	}
	for i, n := range v.cfg.NICs {
		id := fmt.Sprintf("net%d", i)
		nd, err := n.Netdev.arg(id)
		if err != nil {
			return nil, err
		}
		dev := fmt.Sprintf("%s,netdev=%s,bus=%s", n.Model, id, rootPort())
		if n.MAC != "" {
			dev += ",mac=" + n.MAC
		}
		args = append(args, "-netdev", nd, "-device", dev)
	}
	return append(args, v.cfg.ExtraArgs...), nil
}

func (v *VM) startServer(ctx context.Context, i int, srv DeviceServer, sock string) error {
	if srv == nil {
		srv = v.cfg.DefaultServer
	}
	if srv == nil {
		return fmt.Errorf("npfnic device %d has no server and Config.DefaultServer is nil", i)
	}
	logf, err := os.Create(filepath.Join(v.logDir, fmt.Sprintf("npfnic%d-server.log", i)))
	if err != nil {
		return err
	}
	stop, err := srv.Start(ctx, sock, logf)
	if err != nil {
		logf.Close()
		return fmt.Errorf("start npfnic device server %d: %w", i, err)
	}
	v.stops = append(v.stops, func() error { err := stop(); logf.Close(); return err })
	return nil
}

func (n Netdev) arg(id string) (string, error) {
	var s string
	switch n.Kind {
	case "user":
		s = "user,id=" + id
	case "tap":
		if n.Ifname == "" {
			return "", errors.New("tap netdev needs Ifname")
		}
		s = "tap,id=" + id + ",ifname=" + n.Ifname + ",script=no,downscript=no"
	case "stream":
		if n.Path == "" {
			return "", errors.New("stream netdev needs Path")
		}
		s = fmt.Sprintf("stream,id=%s,server=%v,addr.type=unix,addr.path=%s", id, onOff(n.Server), n.Path)
	default:
		return "", fmt.Errorf("unknown netdev kind %q (user, tap, stream)", n.Kind)
	}
	if n.Extra != "" {
		s += "," + n.Extra
	}
	return s, nil
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

// waitSocket waits for QEMU to create one of its server sockets.
func (v *VM) waitSocket(ctx context.Context, path string) error {
	exited := make(chan error, 1)
	go func() {
		select {
		case <-v.exited:
			exited <- v.exitErr
		case <-ctx.Done():
		}
	}()
	if err := waitSocket(ctx, path, exited); err != nil {
		return v.deathError(err)
	}
	return nil
}

// dial connects to one of QEMU's server sockets, waiting for QEMU to create it.
func (v *VM) dial(ctx context.Context, path string) (net.Conn, error) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.Dial("unix", path)
		if err == nil {
			return c, nil
		}
		select {
		case <-v.exited:
			return nil, v.deathError(nil)
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("QEMU did not open %s within 30 s: %w", path, err)
		}
	}
}

func (v *VM) captureConsole(conn net.Conn) {
	f, err := os.Create(v.ConsoleLog())
	if err != nil {
		return
	}
	defer f.Close()
	var w io.Writer = f
	if v.cfg.Console != nil {
		w = io.MultiWriter(f, v.cfg.Console)
	}
	_, _ = io.Copy(w, conn)
}

// WaitReady waits until the guest agent answers, e.g. after a reboot.
func (v *VM) WaitReady(ctx context.Context) error { return v.waitAgent(ctx) }

// Reboot resets the guest the hard way (sysrq b: no shutdown, the
// machine reset QEMU turns into a DEVICE_RESET of every vfio-user device)
// and returns once the new boot's agent answers. Needs Config.AllowReboot:
// without it QEMU exits, which Reboot reports.
func (v *VM) Reboot(ctx context.Context) error {
	const marker = "/tmp/before-reboot"
	if r, err := v.Run(ctx, "touch "+marker); err != nil || r.Exit != 0 {
		return fmt.Errorf("reboot: mark the old boot: %v %s", err, r.Stderr)
	}
	rctx, rcancel := context.WithTimeout(ctx, 3*time.Second)
	_, _ = v.Run(rctx, "echo b > /proc/sysrq-trigger") // the guest dies mid-command
	rcancel()
	for {
		if err := v.WaitReady(ctx); err != nil {
			return fmt.Errorf("after reboot: %w", err)
		}
		// An answer to a ping sent before the reset may come from the
		// old boot: this is the new one once the marker is gone.
		r, err := v.Run(ctx, "test -e "+marker) // gosh's test: there is no test program
		if err != nil {
			return fmt.Errorf("after reboot: %w", err)
		}
		if r.Exit != 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the guest did not reboot: %w", ctx.Err())
		case <-v.exited:
			return v.deathError(errors.New("reboot"))
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// waitAgent pings until the guest agent answers: the guest has booted.
func (v *VM) waitAgent(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, v.cfg.BootTimeout)
	defer cancel()
	for {
		pctx, pcancel := context.WithTimeout(ctx, time.Second)
		_, err := v.agent.Call(pctx, agent.Request{Op: agent.OpPing})
		pcancel()
		if err == nil {
			return nil
		}
		select {
		case <-v.exited:
			return v.deathError(nil)
		case <-v.agent.Done():
			return v.deathError(fmt.Errorf("agent connection lost during boot"))
		default:
		}
		if ctx.Err() != nil {
			return fmt.Errorf("guest %s did not boot within %s (agent silent)\n%s", v.cfg.Name, v.cfg.BootTimeout, v.consoleTail())
		}
	}
}

// deathError describes a QEMU that exited, with its stderr and console tail.
func (v *VM) deathError(cause error) error {
	select {
	case <-v.exited:
	case <-time.After(2 * time.Second):
		if cause != nil {
			return fmt.Errorf("%w\n%s", cause, v.consoleTail())
		}
	}
	msg := fmt.Sprintf("QEMU for guest %s exited (%v)", v.cfg.Name, v.exitErr)
	if cause != nil {
		msg = cause.Error() + ": " + msg
	}
	if s := strings.TrimSpace(v.stderr.String()); s != "" {
		msg += "\n--- QEMU stderr ---\n" + lastLines(s, 15)
	}
	return errors.New(msg + "\n" + v.consoleTail())
}

func (v *VM) consoleTail() string {
	b, _ := os.ReadFile(v.ConsoleLog())
	return fmt.Sprintf("--- console tail (%s; QMP transcript %s) ---\n%s", v.ConsoleLog(), v.QMPLog(), lastLines(string(b), 30))
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// Exited is closed when QEMU has exited.
func (v *VM) Exited() <-chan struct{} { return v.exited }

// call sends one agent request, failing fast (with the console tail) if QEMU dies.
func (v *VM) call(ctx context.Context, req agent.Request) (agent.Response, error) {
	type result struct {
		resp agent.Response
		err  error
	}
	ch := make(chan result, 1)
	go func() {
		r, err := v.agent.Call(ctx, req)
		ch <- result{r, err}
	}()
	what := fmt.Errorf("guest request %s %q", req.Op, strings.Join(req.Argv, " "))
	select {
	case r := <-ch:
		if r.err != nil && ctx.Err() == nil {
			// A lost agent usually means QEMU is going down: say so.
			select {
			case <-v.exited:
				return r.resp, v.deathError(what)
			case <-time.After(3 * time.Second):
			}
		}
		return r.resp, r.err
	case <-v.exited:
		return agent.Response{}, v.deathError(what)
	}
}

// Exec runs a program in the guest and returns its output and exit status;
// a non-zero exit is not an error (look at Result.Exit), a lost guest is.
func (v *VM) Exec(ctx context.Context, argv ...string) (Result, error) {
	return v.ExecWithin(ctx, 0, argv...)
}

// ExecWithin is Exec with the program killed by the guest's agent after
// limit (0: at ctx's deadline), which then returns what it printed with
// TimedOut set. A limit short of ctx's deadline leaves time for that
// answer: a program that hangs is reported with its output, rather than
// as the context's error alone.
func (v *VM) ExecWithin(ctx context.Context, limit time.Duration, argv ...string) (Result, error) {
	req := agent.Request{Op: agent.OpRun, Argv: argv}
	if dl, ok := ctx.Deadline(); ok && (limit <= 0 || time.Until(dl) < limit) {
		limit = time.Until(dl)
	}
	if limit > 0 {
		req.Timeout = max(limit.Milliseconds(), 1)
	}
	resp, err := v.call(ctx, req)
	if err != nil {
		return Result{}, err
	}
	return Result{Exit: resp.Exit, Stdout: string(resp.Stdout), Stderr: string(resp.Stderr), TimedOut: resp.TimedOut}, nil
}

// Output runs a program in the guest that must succeed and returns its
// standard output; a non-zero exit or a timeout is an error that carries
// what the program printed.
func (v *VM) Output(ctx context.Context, argv ...string) (string, error) {
	r, err := v.Exec(ctx, argv...)
	if err != nil {
		return "", err
	}
	if r.Exit != 0 || r.TimedOut {
		return r.Stdout, fmt.Errorf("guest %s: exit %d (timed out: %v): %s%s", strings.Join(argv, " "), r.Exit, r.TimedOut, r.Stdout, r.Stderr)
	}
	return r.Stdout, nil
}

// Signal sends sig to every process of the guest whose command name
// (/proc/PID/comm) is program and returns their process ids. It runs one
// pidof and one kill: a loop that read every process's comm from the
// shell took longer than 30 s in a guest whose one vCPU a busy-polling
// ibverbs program held, on a loaded host. The signal goes by number:
// u-root's kill knows SIGKILL and 9, not KILL. A process that ended
// between the two is no error.
func (v *VM) Signal(ctx context.Context, program string, sig syscall.Signal) ([]string, error) {
	if program == "" || strings.ContainsAny(program, " \t\n'\"$`\\;&|<>*?/") {
		return nil, fmt.Errorf("vm: signal %q: want a plain program name", program)
	}
	r, err := v.Run(ctx, fmt.Sprintf("p=$(pidof %s); if [ -n \"$p\" ]; then echo $p; kill -%d $p || true; fi", program, int(sig)))
	if err != nil {
		return nil, err
	}
	if r.Exit != 0 || r.TimedOut {
		return nil, fmt.Errorf("vm: signal %s to %s: exit %d (timed out: %v): %s%s", sig, program, r.Exit, r.TimedOut, r.Stdout, r.Stderr)
	}
	return strings.Fields(r.Stdout), nil
}

// Run runs a shell script (u-root's gosh) in the guest.
func (v *VM) Run(ctx context.Context, script string) (Result, error) {
	return v.Exec(ctx, "/bin/sh", "-c", script)
}

// Put writes a file into the guest.
func (v *VM) Put(ctx context.Context, guestPath string, data []byte, mode os.FileMode) error {
	_, err := v.call(ctx, agent.Request{Op: agent.OpPut, Path: guestPath, Data: data, Mode: uint32(mode.Perm())})
	return err
}

// Get reads a file from the guest.
func (v *VM) Get(ctx context.Context, guestPath string) ([]byte, error) {
	resp, err := v.call(ctx, agent.Request{Op: agent.OpGet, Path: guestPath})
	return resp.Data, err
}

// LoadModules loads kernel modules shipped in the image, dependencies first.
func (v *VM) LoadModules(ctx context.Context, names ...string) error {
	_, err := v.call(ctx, agent.Request{Op: agent.OpModload, Modules: names})
	return err
}

// LoadDriver loads the npfnic driver module with the given parameters,
// after the modules it links against (agent.DriverDeps).
func (v *VM) LoadDriver(ctx context.Context, params string) error {
	if err := v.LoadModules(ctx, agent.DriverDeps...); err != nil {
		return fmt.Errorf("the npfnic driver's dependencies: %w", err)
	}
	r, err := v.Exec(ctx, "insmod", agent.GuestDriverPath, params)
	if err != nil {
		return err
	}
	if r.Exit != 0 {
		return fmt.Errorf("insmod npfnic.ko %s: exit %d: %s%s", params, r.Exit, r.Stdout, r.Stderr)
	}
	return nil
}

// QMP runs one QMP command (raw JSON arguments allowed) and returns its "return" value.
func (v *VM) QMP(ctx context.Context, command string, arguments any) (json.RawMessage, error) {
	return v.qmp.run(ctx, command, arguments)
}

// Shutdown powers the guest off and stops QEMU and the device servers.
func (v *VM) Shutdown(ctx context.Context) error {
	var err error
	select {
	case <-v.exited:
	default:
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, _ = v.Exec(sctx, "/bin/sync")
		cancel()
		if v.qmp != nil {
			qctx, qcancel := context.WithTimeout(ctx, 5*time.Second)
			_, _ = v.qmp.run(qctx, "quit", nil)
			qcancel()
		}
		select {
		case <-v.exited:
		case <-time.After(15 * time.Second):
			err = fmt.Errorf("QEMU did not quit within 15 s; killed")
		}
	}
	v.Kill()
	return err
}

// QEMUPid is the process id of the VM's QEMU (0 before it started).
func (v *VM) QEMUPid() int {
	if v.cmd == nil || v.cmd.Process == nil {
		return 0
	}
	return v.cmd.Process.Pid
}

// Kill stops QEMU at once and releases everything the VM holds.
func (v *VM) Kill() {
	v.closeOnce.Do(func() {
		if v.cmd != nil && v.cmd.Process != nil {
			_ = v.cmd.Process.Kill()
			<-v.exited
		}
		if v.agent != nil {
			v.agent.Close()
		}
		if v.qmp != nil {
			v.qmp.close()
		}
		for _, stop := range v.stops {
			_ = stop()
		}
		_ = os.RemoveAll(v.sockDir)
		unregister(v)
	})
}
