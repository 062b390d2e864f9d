//go:build npfnic_notrace

package trace

// Compiled is false in this build: every hook is dead code.
const Compiled = false
