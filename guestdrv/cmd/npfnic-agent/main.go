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
	f, err := os.OpenFile(*tty, os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		log.Fatalf("npfnic-agent: %v", err)
	}
	if err := agent.MakeRaw(int(f.Fd())); err != nil {
		log.Fatalf("npfnic-agent: raw mode on %s: %v", *tty, err)
	}
	s := agent.Server{ModulesDir: agent.ModulesDir, LoadOrder: agent.LoadOrderFile}
	fmt.Printf("npfnic-agent: serving the host on %s\n", *tty)
	if *console == "" {
		log.Fatal(s.Serve(f))
	}
	go func() { log.Fatalf("npfnic-agent: %v", s.Serve(f)) }()
	// u-root's init waits for uinit: as long as we run, the guest is up.
	for {
		if err := consoleShell(*console, *shell); err != nil {
			log.Printf("npfnic-agent: console shell: %v", err)
		}
		time.Sleep(time.Second)
	}
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
