package images

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
)

// buildGuestTools compiles the guest-side Go programs (guestdrv/cmd/*) as
// static binaries. Go's build cache makes this cheap when nothing changed,
// and the output depends on the sources' content alone, so the initramfs
// stays cached: -trimpath leaves out where the tree is (a checkout, or the
// sources extracted from the binary), -buildvcs=false the checkout's git
// revision and whether it had changes.
func (b *Builder) buildGuestTools(ctx context.Context) (map[string]string, error) {
	done := b.begin("guest tools (guestdrv/cmd)")
	dirs, err := filepath.Glob(filepath.Join(b.opt.SourceDir, "guestdrv/cmd/*"))
	if err != nil {
		return nil, err
	}
	out := filepath.Join(b.opt.CacheDir, "tools")
	if err := os.MkdirAll(out, 0o755); err != nil {
		return nil, err
	}
	tools := map[string]string{}
	for _, d := range dirs {
		name := filepath.Base(d)
		bin := filepath.Join(out, name)
		env := []string{"CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64"}
		if err := b.run(ctx, "guest-tools", b.opt.SourceDir, env, "go", "build", "-trimpath", "-buildvcs=false", "-ldflags=-s -w", "-o", bin, "./guestdrv/cmd/"+name); err != nil {
			return nil, fmt.Errorf("build guest tool %s: %w", name, err)
		}
		tools[name] = bin
	}
	if _, ok := tools["npfnic-agent"]; !ok {
		return nil, fmt.Errorf("guestdrv/cmd/npfnic-agent is missing: the VM harness needs it in the guest")
	}
	done(fmt.Sprintf("%d tools", len(tools)))
	return tools, nil
}
