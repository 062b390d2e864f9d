package images

import (
	"bufio"
	"context"
	_ "embed"
	"fmt"
	"os/exec"
	"strings"
)

//go:embed host-packages.txt
var hostPackagesList string

// HostPackages lists the Debian packages the host needs (builds and tests).
func HostPackages() []string {
	var pkgs []string
	sc := bufio.NewScanner(strings.NewReader(hostPackagesList))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = strings.TrimSpace(line[:i])
		}
		if line != "" {
			pkgs = append(pkgs, line)
		}
	}
	return pkgs
}

// missingPackages asks dpkg which of pkgs are not installed.
func missingPackages(ctx context.Context, pkgs []string) []string {
	var missing []string
	for _, p := range pkgs {
		out, err := exec.CommandContext(ctx, "dpkg-query", "-W", "-f=${db:Status-Status}", p).Output()
		if err != nil || strings.TrimSpace(string(out)) != "installed" {
			missing = append(missing, p)
		}
	}
	return missing
}

// hostPackages installs what the host lacks, pinned to bookworm like the host.
func (b *Builder) hostPackages(ctx context.Context) error {
	done := b.begin("host packages")
	missing := missingPackages(ctx, HostPackages())
	if len(missing) == 0 {
		done("all installed")
		return nil
	}
	if err := requireRoot("install " + strings.Join(missing, " ")); err != nil {
		return err
	}
	if err := b.aptUpdate(ctx); err != nil {
		return err
	}
	fmt.Fprintf(b.out, "      installing %s\n", strings.Join(missing, " "))
	args := append([]string{"install", "-y", "--no-install-recommends", "-t", "bookworm"}, missing...)
	if err := b.run(ctx, "host-packages", "", []string{"DEBIAN_FRONTEND=noninteractive"}, "apt-get", args...); err != nil {
		return fmt.Errorf("install host packages %s: %w", strings.Join(missing, " "), err)
	}
	done("installed " + strings.Join(missing, " "))
	return nil
}
