package ats

// BreakDrainForTest makes c's invalidations complete without waiting for
// in-flight DMA (a broken device for the stress test's negative control).
func BreakDrainForTest(c *Context) {
	c.mu.Lock()
	c.skipDrainForTest = true
	c.mu.Unlock()
}

// BreakRecheckForTest makes c install walk results that raced with an
// invalidation (the other broken device of the negative control).
func BreakRecheckForTest(c *Context) {
	c.mu.Lock()
	c.skipRecheckForTest = true
	c.mu.Unlock()
}
