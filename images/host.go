package images

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
)

// The image build runs on Debian 12 (bookworm) on x86-64, or on a
// derivative of it that uses bookworm's archive (os-release's
// DEBIAN_CODENAME=bookworm), as root and with a Go toolchain, because it
// takes from the host:
//
//   - the guest kernel: the linux-image-amd64 the host's apt index offers
//     (apt-cache, apt-get download, dpkg-deb), whose module the host's make
//     and gcc build, so the index must be bookworm's, on amd64;
//   - the Debian mirror debootstrap builds the QEMU and userland trees from:
//     the host's apt sources' bookworm (or stable) main entry, unless
//     -mirror names one; apt runs inside those trees through chroot;
//   - its own packages (host-packages.txt: debootstrap, xz-utils, make,
//     gcc, ...), which the first step installs with apt-get -t bookworm and
//     dpkg-query finds;
//   - go, which builds the guest tools and u-root's busybox.
//
// On any other host the build would fail minutes in, or build a guest
// kernel the driver was never built for; checkHost says so at the start.
var supportedHosts = "the image build needs Debian 12 (bookworm), or a derivative using bookworm's archive, on x86-64, " +
	"with " + strings.Join(hostTools[:len(hostTools)-1], ", ") + " and " + hostTools[len(hostTools)-1] +
	" (it takes the guest kernel, the Debian mirror and its own packages from the host's apt, and builds the guest tools with Go)"

// hostTools are the host programs the build runs but cannot install
// itself: on Debian, apt, dpkg, coreutils and Go are there before it.
var hostTools = []string{"apt-get", "apt-cache", "dpkg-query", "dpkg-deb", "chroot", "go"}

// host is what checkHost looks at; tests give it fakes.
type host struct {
	osRelease string // the content of os-release(5), "" when there is none
	arch      string // GOARCH
	lookPath  func(file string) (string, error)
}

// thisHost is the host the build runs on.
func thisHost() host {
	h := host{arch: runtime.GOARCH, lookPath: exec.LookPath}
	for _, p := range []string{"/etc/os-release", "/usr/lib/os-release"} {
		if b, err := os.ReadFile(p); err == nil {
			h.osRelease = string(b)
			break
		}
	}
	return h
}

// checkHost returns nil on a host the image build supports, else an
// error naming the host, what the build needs and what is missing.
func checkHost(h host) error {
	rel := parseOSRelease(h.osRelease)
	var problems []string
	if !isBookworm(rel) {
		problems = append(problems, "not bookworm")
	}
	if h.arch != "amd64" {
		problems = append(problems, "not x86-64")
	}
	var missing []string
	for _, tool := range hostTools {
		if _, err := h.lookPath(tool); err != nil {
			missing = append(missing, tool)
		}
	}
	if len(missing) > 0 {
		problems = append(problems, "missing "+strings.Join(missing, ", "))
	}
	if len(problems) == 0 {
		return nil
	}
	return fmt.Errorf("this host is %s on %s; %s: %s", osName(rel), h.arch, supportedHosts, strings.Join(problems, "; "))
}

// osName names the system of an os-release: its PRETTY_NAME, else NAME
// and VERSION_ID.
func osName(rel map[string]string) string {
	name := rel["PRETTY_NAME"]
	if name == "" {
		name = strings.TrimSpace(rel["NAME"] + " " + rel["VERSION_ID"])
	}
	if name == "" {
		name = "an unknown system (no os-release)"
	}
	return name
}

// HostOS names the system this process runs on, as os-release does.
func HostOS() string { return osName(parseOSRelease(thisHost().osRelease)) }

// isBookworm reports whether os-release describes Debian 12 or a
// derivative built on it.
func isBookworm(rel map[string]string) bool {
	if rel["ID"] == "debian" && (rel["VERSION_CODENAME"] == "bookworm" || rel["VERSION_ID"] == "12") {
		return true
	}
	return rel["DEBIAN_CODENAME"] == "bookworm"
}

// parseOSRelease reads os-release(5): KEY=value lines, the value maybe
// quoted, comments and blank lines skipped.
func parseOSRelease(content string) map[string]string {
	rel := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(content))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		key, value, ok := strings.Cut(line, "=")
		if !ok || strings.HasPrefix(line, "#") {
			continue
		}
		if len(value) >= 2 && value[0] == '\'' && value[len(value)-1] == '\'' {
			value = value[1 : len(value)-1]
		} else if uq, err := strconv.Unquote(value); err == nil && strings.HasPrefix(value, `"`) {
			value = uq
		}
		rel[key] = value
	}
	return rel
}
