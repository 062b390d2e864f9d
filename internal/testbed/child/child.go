// Package child starts the processes the test harness and the experiments
// run beside a guest (QEMU, device servers, host-side tools) so that they
// die with the process that started them: each gets a parent-death signal,
// and a process group of its own unless it must share the terminal.
//
// Linux sends the parent-death signal when the *thread* that forked the
// child exits, not the process, and Go ends threads: a goroutine that exits
// while locked to its thread (hostnet.Namespace.Do does so on purpose)
// takes its thread along, and any child that thread forked earlier would
// be killed with it. So every child is forked from one thread that lives
// as long as the process.
package child

import (
	"os/exec"
	"runtime"
	"sync"
	"syscall"
)

type startReq struct {
	cmd  *exec.Cmd
	done chan error
}

var (
	once   sync.Once
	starts chan startReq
)

// Start starts cmd so that it receives sig when this process dies; own
// puts it in a process group of its own (leave it false for a child that
// reads this process's terminal).
func Start(cmd *exec.Cmd, sig syscall.Signal, own bool) error {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = sig
	cmd.SysProcAttr.Setpgid = own
	once.Do(func() {
		starts = make(chan startReq)
		go func() {
			// Never unlocked and never returns: the thread lives as
			// long as the process.
			runtime.LockOSThread()
			for r := range starts {
				r.done <- r.cmd.Start()
			}
		}()
	})
	done := make(chan error, 1)
	starts <- startReq{cmd, done}
	return <-done
}
