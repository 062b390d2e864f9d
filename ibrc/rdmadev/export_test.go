package rdmadev

// SetTestBeforeDrain lets the external tests run f on the worker between a
// pass's taking the register path's requests and its draining completions.
func SetTestBeforeDrain(e *Engine, f func()) { e.testBeforeDrain.Store(&f) }
