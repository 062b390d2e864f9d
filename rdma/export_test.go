package rdma

import "github.com/npfnic/npfnic/ibrc"

// SetTestBeforeDrain lets the external tests run f on the worker between a
// pass's taking the register path's requests and its draining completions.
func SetTestBeforeDrain(e *Engine, f func()) { e.testBeforeDrain.Store(&f) }

// PagerTasks is the number of goroutines e's pagers run (page response
// waiters): the tests' goroutine leak check.
func PagerTasks(e *Engine) int { return e.tasks.running() }

// RCRecvFaultPolicy is the receive-fault policy of e's running transport.
func RCRecvFaultPolicy(e *Engine) ibrc.FaultPolicy { return e.rc.Load().RecvFaultPolicy() }

// RCStats is the counters of e's running transport.
func RCStats(e *Engine) ibrc.Stats { return e.rc.Load().Stats() }
