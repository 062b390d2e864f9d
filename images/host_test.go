package images

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

const (
	debian12 = `PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"
NAME="Debian GNU/Linux"
VERSION_ID="12"
VERSION="12 (bookworm)"
VERSION_CODENAME=bookworm
ID=debian
`
	debian13 = `PRETTY_NAME="Debian GNU/Linux 13 (trixie)"
NAME="Debian GNU/Linux"
VERSION_ID="13"
VERSION_CODENAME=trixie
ID=debian
`
	lmde6 = `# Linux Mint Debian Edition: DEBIAN_CODENAME=bookworm below
NAME="LMDE"
VERSION="6 (faye)"
ID=linuxmint
ID_LIKE=debian
PRETTY_NAME='LMDE 6 (faye)'
VERSION_ID="6"
VERSION_CODENAME=faye
DEBIAN_CODENAME=bookworm
`
	ubuntu2404 = `PRETTY_NAME="Ubuntu 24.04.1 LTS"
NAME="Ubuntu"
VERSION_ID="24.04"
VERSION_CODENAME=noble
ID=ubuntu
ID_LIKE=debian
UBUNTU_CODENAME=noble
`
	fedora40 = `NAME="Fedora Linux"
VERSION="40 (Workstation Edition)"
ID=fedora
VERSION_ID=40
PRETTY_NAME="Fedora Linux 40 (Workstation Edition)"
`
)

// pathWith is a fake PATH lookup that finds exactly tools.
func pathWith(tools ...string) func(string) (string, error) {
	return func(file string) (string, error) {
		if slices.Contains(tools, file) {
			return "/usr/bin/" + file, nil
		}
		return "", errors.New("executable file not found in $PATH")
	}
}

// TestCheckHost: Debian 12 and bookworm's derivatives on x86-64 with the
// tools pass; any other system, architecture or a missing tool fails at
// once with an error naming the host, the supported hosts and every
// problem.
func TestCheckHost(t *testing.T) {
	allTools := pathWith(hostTools...)
	debianTools := pathWith("apt-get", "apt-cache", "dpkg-query", "dpkg-deb", "chroot")
	tests := []struct {
		name      string
		h         host
		wantError []string // substrings; none: supported
	}{
		{name: "Debian 12", h: host{debian12, "amd64", allTools}},
		{name: "Debian 12 without a codename", h: host{"ID=debian\nVERSION_ID=\"12\"\n", "amd64", allTools}},
		{name: "a bookworm derivative", h: host{lmde6, "amd64", allTools}},
		{name: "Debian 12 without Go", h: host{debian12, "amd64", debianTools},
			wantError: []string{"this host is Debian GNU/Linux 12 (bookworm) on amd64", ": missing go"}},
		{name: "Debian 12 on arm64", h: host{debian12, "arm64", allTools},
			wantError: []string{"on arm64;", ": not x86-64"}},
		{name: "Debian 13", h: host{debian13, "amd64", allTools},
			wantError: []string{"this host is Debian GNU/Linux 13 (trixie) on amd64", ": not bookworm"}},
		{name: "Ubuntu with apt and dpkg", h: host{ubuntu2404, "amd64", allTools},
			wantError: []string{"this host is Ubuntu 24.04.1 LTS", ": not bookworm"}},
		{name: "Fedora", h: host{fedora40, "amd64", pathWith("chroot", "go")},
			wantError: []string{"this host is Fedora Linux 40 (Workstation Edition) on amd64",
				": not bookworm; missing apt-get, apt-cache, dpkg-query, dpkg-deb"}},
		{name: "no os-release", h: host{"", "amd64", allTools},
			wantError: []string{"this host is an unknown system (no os-release)", ": not bookworm"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := checkHost(tt.h)
			if len(tt.wantError) == 0 {
				if err != nil {
					t.Fatalf("checkHost: %v; want a supported host", err)
				}
				return
			}
			if err == nil {
				t.Fatal("checkHost accepted the host")
			}
			msg := err.Error()
			for _, want := range append(tt.wantError, "needs Debian 12 (bookworm)", "on x86-64", "chroot and go") {
				if !strings.Contains(msg, want) {
					t.Errorf("checkHost: %q\nwant it to say %q", msg, want)
				}
			}
		})
	}
}

func TestParseOSRelease(t *testing.T) {
	rel := parseOSRelease(lmde6 + "QUOTED=\"a \\\"b\\\" c\"\nnot a pair\n")
	want := map[string]string{"NAME": "LMDE", "PRETTY_NAME": "LMDE 6 (faye)", "ID_LIKE": "debian",
		"DEBIAN_CODENAME": "bookworm", "QUOTED": `a "b" c`}
	for k, v := range want {
		if rel[k] != v {
			t.Errorf("%s = %q, want %q", k, rel[k], v)
		}
	}
	if len(rel) != 9 {
		t.Errorf("parsed %d keys (%v), want the 8 of LMDE's file and QUOTED: no comment, no line without =", len(rel), rel)
	}
}
