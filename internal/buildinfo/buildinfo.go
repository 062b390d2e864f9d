// Package buildinfo reads what the Go toolchain stamped into the binary
// about the source it was built from, for the places that report it
// (npfnic version, an experiment's run.json).
package buildinfo

import "runtime/debug"

// Revision is bi's VCS revision, with "+modified" when the work tree had
// changes, or "" when the build stamped none (go run, -buildvcs=false, no
// build information at all).
func Revision(bi *debug.BuildInfo) string {
	if bi == nil {
		return ""
	}
	rev, modified := "", ""
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				modified = "+modified"
			}
		}
	}
	if rev == "" {
		return ""
	}
	return rev + modified
}
