package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/npfnic/npfnic/internal/buildinfo"
)

// runVersion is "npfnic version" (and --version): one line with the
// module's version, the VCS revision it was built from and the Go
// version.
func runVersion(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("version", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: npfnic version\n\nPrints the module version, the VCS revision (with \"+modified\" when the\n"+
			"work tree had changes) and the Go version the binary was built with, on one line.\n")
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	bi, _ := debug.ReadBuildInfo()
	fmt.Fprintln(stdout, versionLine(bi))
	return nil
}

// versionLine formats bi (nil: no build information) as
// "npfnic MODULE VERSION rev REVISION[+modified] GOVERSION".
func versionLine(bi *debug.BuildInfo) string {
	if bi == nil {
		return "npfnic (no build information) " + runtime.Version()
	}
	path, version := bi.Main.Path, bi.Main.Version
	if path == "" {
		path = "github.com/npfnic/npfnic"
	}
	if version == "" {
		version = "(devel)"
	}
	rev := cmp.Or(buildinfo.Revision(bi), "unknown")
	goVersion := bi.GoVersion
	if goVersion == "" {
		goVersion = runtime.Version()
	}
	return fmt.Sprintf("npfnic %s %s rev %s %s", path, version, rev, goVersion)
}
