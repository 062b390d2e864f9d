//go:build !npfnic_notrace

package trace

// Compiled is false in a build with the tag npfnic_notrace, which removes
// every hook (the baseline of the trace's cost on the fast path).
const Compiled = true
