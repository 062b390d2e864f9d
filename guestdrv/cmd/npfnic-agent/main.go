// Command npfnic-agent runs inside a test guest as u-root's uinit. With
// -daemon it starts itself in the background and returns, so init goes on to
// the console shell; the background copy serves the VM harness on a serial
// port (see package agent).
package main

import (
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"syscall"

	"github.com/npfnic/npfnic/guestdrv/agent"
)

func main() {
	daemon := flag.Bool("daemon", false, "start the agent in the background and return")
	tty := flag.String("tty", agent.AgentTTY, "serial port the host talks to")
	flag.Parse()

	if flag.NArg() > 0 && flag.Arg(0) == "modload" {
		s := agent.Server{ModulesDir: agent.ModulesDir, LoadOrder: agent.LoadOrderFile}
		if err := s.Modload(flag.Args()[1:]); err != nil {
			log.Fatal(err)
		}
		return
	}
	if *daemon {
		cmd := exec.Command(os.Args[0], "-tty", *tty)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		if err := cmd.Start(); err != nil {
			log.Fatalf("npfnic-agent: %v", err)
		}
		fmt.Printf("npfnic-agent: serving the host on %s (pid %d)\n", *tty, cmd.Process.Pid)
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
	log.Fatal(s.Serve(f))
}
