// Command npfnic-agent runs inside a test guest as u-root's uinit: it serves
// the VM harness on a serial port (see package agent) and keeps an
// interactive shell on the console for people (npfnic boot).
package main

import (
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/npfnic/npfnic/guestdrv/agent"
)

func main() {
	tty := flag.String("tty", agent.AgentTTY, "serial port the host talks to")
	console := flag.String("console", "/dev/ttyS0", "terminal for the interactive shell (empty: none)")
	shell := flag.String("shell", "/bin/defaultsh", "interactive shell to keep running on the console")
	flag.Parse()

	if flag.NArg() > 0 && flag.Arg(0) == "modload" {
		s := agent.Server{ModulesDir: agent.ModulesDir, LoadOrder: agent.LoadOrderFile}
		if err := s.Modload(flag.Args()[1:]); err != nil {
			log.Fatal(err)
		}
		return
	}
	s := agent.Server{ModulesDir: agent.ModulesDir, LoadOrder: agent.LoadOrderFile}
	f, err := openHostPort(*tty)
	switch {
	case err == nil && *console == "":
		log.Fatal(s.Serve(f))
	case err == nil:
		fmt.Printf("npfnic-agent: serving the host on %s\n", *tty)
		go func() { log.Fatalf("npfnic-agent: %v", s.Serve(f)) }()
	case *console == "":
		log.Fatalf("npfnic-agent: %v", err)
	default:
		// A QEMU started by hand often has one serial port: the guest is
		// still worth a shell.
		fmt.Printf("npfnic-agent: no host on %s (%v): console only. To load the driver:\n"+
			"  npfnic-agent modload %s && insmod %s\n", *tty, err, strings.Join(agent.DriverDeps, " "), agent.GuestDriverPath)
	}
	// u-root's init waits for uinit: as long as we run, the guest is up.
	for {
		if err := consoleShell(*console, *shell); err != nil {
			log.Printf("npfnic-agent: console shell: %v", err)
		}
		time.Sleep(time.Second)
	}
}

// openHostPort opens the serial port the host talks to, in raw mode.
func openHostPort(tty string) (*os.File, error) {
	f, err := os.OpenFile(tty, os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, err
	}
	if err := agent.MakeRaw(int(f.Fd())); err != nil {
		f.Close()
		return nil, fmt.Errorf("raw mode on %s: %w", tty, err)
	}
	return f, nil
}

// consoleShell runs the shell as a session leader with the console as its
// controlling terminal, so job control and Ctrl-C work for the person there.
func consoleShell(console, shell string) error {
	t, err := os.OpenFile(console, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer t.Close()
	cmd := exec.Command(shell)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = t, t, t
	cmd.Dir = "/"
	cmd.Env = append(os.Environ(), "HOME=/root", "TERM=vt100")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	return cmd.Run()
}
