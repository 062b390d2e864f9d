package images

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// AptSource is one Debian archive entry from the host's apt configuration.
type AptSource struct {
	URI        string
	Suites     []string
	Components []string
}

// HostAptDirs are where apt keeps its source lists on a Debian host.
var HostAptDirs = []string{"/etc/apt/sources.list", "/etc/apt/sources.list.d"}

// DebianMirror returns the URI of the Debian main archive configured on the host
// (the entry that carries a bookworm suite other than bookworm-security), so the
// image builder uses the same mirror as the host instead of a hard-coded one.
func DebianMirror(paths ...string) (string, error) {
	if len(paths) == 0 {
		paths = HostAptDirs
	}
	var sources []AptSource
	for _, p := range paths {
		files := []string{p}
		if fi, err := os.Stat(p); err == nil && fi.IsDir() {
			lists, _ := filepath.Glob(filepath.Join(p, "*.list"))
			debs, _ := filepath.Glob(filepath.Join(p, "*.sources"))
			files = append(lists, debs...)
		}
		for _, f := range files {
			fh, err := os.Open(f)
			if err != nil {
				continue
			}
			var parsed []AptSource
			if strings.HasSuffix(f, ".sources") {
				parsed, err = ParseDeb822Sources(fh)
			} else {
				parsed, err = ParseOneLineSources(fh)
			}
			fh.Close()
			if err != nil {
				return "", fmt.Errorf("parse %s: %w", f, err)
			}
			sources = append(sources, parsed...)
		}
	}
	if m := pickDebianMirror(sources); m != "" {
		return m, nil
	}
	return "", fmt.Errorf("no Debian archive with a bookworm suite in %s: the image builder takes its mirror from the host's apt sources", strings.Join(paths, ", "))
}

func pickDebianMirror(sources []AptSource) string {
	for _, s := range sources {
		for _, suite := range s.Suites {
			if suite == "bookworm" || suite == "stable" {
				if hasComponent(s.Components, "main") {
					return strings.TrimRight(s.URI, "/")
				}
			}
		}
	}
	return ""
}

func hasComponent(cs []string, want string) bool {
	for _, c := range cs {
		if c == want {
			return true
		}
	}
	return false
}

// ParseOneLineSources parses the classic "deb [opts] URI suite comp..." format.
func ParseOneLineSources(r io.Reader) ([]AptSource, error) {
	var out []AptSource
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = strings.TrimSpace(line[:i])
		}
		if line == "" {
			continue
		}
		fields := strings.Fields(line)
		if fields[0] != "deb" {
			continue // deb-src and anything else carry no binaries
		}
		fields = fields[1:]
		if len(fields) > 0 && strings.HasPrefix(fields[0], "[") {
			// Options may contain spaces: skip to the closing bracket.
			for len(fields) > 0 {
				f := fields[0]
				fields = fields[1:]
				if strings.HasSuffix(f, "]") {
					break
				}
			}
		}
		if len(fields) < 2 {
			return nil, fmt.Errorf("malformed source line %q", sc.Text())
		}
		out = append(out, AptSource{URI: fields[0], Suites: []string{fields[1]}, Components: fields[2:]})
	}
	return out, sc.Err()
}

// ParseDeb822Sources parses the deb822 ".sources" format (stanzas of Key: value).
func ParseDeb822Sources(r io.Reader) ([]AptSource, error) {
	var out []AptSource
	for _, st := range parseStanzas(r) {
		if types := strings.Fields(st["Types"]); !contains(types, "deb") {
			continue
		}
		if st["Enabled"] == "no" {
			continue
		}
		for _, uri := range strings.Fields(st["URIs"]) {
			out = append(out, AptSource{
				URI:        uri,
				Suites:     strings.Fields(st["Suites"]),
				Components: strings.Fields(st["Components"]),
			})
		}
	}
	return out, nil
}

func contains(xs []string, want string) bool {
	for _, x := range xs {
		if x == want {
			return true
		}
	}
	return false
}

// parseStanzas splits RFC-822-style control data (apt-cache show, deb822
// sources) into stanzas; continuation lines are folded into their field.
func parseStanzas(r io.Reader) []map[string]string {
	var out []map[string]string
	cur := map[string]string{}
	last := ""
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), 4*1024*1024)
	flush := func() {
		if len(cur) > 0 {
			out = append(out, cur)
		}
		cur = map[string]string{}
		last = ""
	}
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.TrimSpace(line) == "":
			flush()
		case strings.HasPrefix(line, "#"):
		case line[0] == ' ' || line[0] == '\t':
			if last != "" {
				cur[last] += "\n" + strings.TrimSpace(line)
			}
		default:
			k, v, ok := strings.Cut(line, ":")
			if !ok {
				continue
			}
			last = strings.TrimSpace(k)
			cur[last] = strings.TrimSpace(v)
		}
	}
	flush()
	return out
}

// KernelPackage is the versioned image package a metapackage points to.
type KernelPackage struct {
	Meta    string // e.g. linux-image-amd64
	Version string // the metapackage version chosen
	ABI     string // e.g. 6.1.0-56-amd64
}

// SelectKernel picks, from "apt-cache show META" output, the highest version of
// the metapackage and the linux-image-ABI package it depends on.
func SelectKernel(meta string, aptCacheShow io.Reader) (KernelPackage, error) {
	var best KernelPackage
	for _, st := range parseStanzas(aptCacheShow) {
		if st["Package"] != meta {
			continue
		}
		ver := st["Version"]
		abi := ""
		for _, dep := range strings.Split(st["Depends"], ",") {
			name := strings.TrimSpace(dep)
			if i := strings.IndexAny(name, " (|"); i >= 0 {
				name = name[:i]
			}
			if strings.HasPrefix(name, "linux-image-") && name != meta {
				abi = strings.TrimPrefix(name, "linux-image-")
				break
			}
		}
		if abi == "" || ver == "" {
			continue
		}
		if best.Version == "" || CompareDebianVersions(ver, best.Version) > 0 {
			best = KernelPackage{Meta: meta, Version: ver, ABI: abi}
		}
	}
	if best.ABI == "" {
		return best, fmt.Errorf("apt knows no %s that depends on a linux-image-<ABI> package (is the apt index up to date?)", meta)
	}
	return best, nil
}
