package main

import (
	"context"
	"flag"
	"fmt"

	"github.com/npfnic/npfnic"
	"github.com/npfnic/npfnic/images"
)

// addImageFlags registers the flags every command that needs images shares.
// The options carry the sources embedded in the binary, which the build
// uses when it runs outside a checkout.
func addImageFlags(fs *flag.FlagSet) *images.Options {
	opt := &images.Options{Source: npfnic.Source}
	fs.StringVar(&opt.CacheDir, "cache", images.DefaultCacheDir(), "image cache directory (env NPFNIC_CACHE)")
	fs.StringVar(&opt.Mirror, "mirror", "", "Debian mirror (default: the host's apt sources)")
	return opt
}

// buildImages builds (or checks) the images: the first expensive step of
// every command that boots guests, after the checks of its command line.
// Tests replace it to see that a bad command line fails before it.
var buildImages = func(ctx context.Context, opt *images.Options) (*images.Artifacts, error) {
	b, err := images.New(*opt)
	if err != nil {
		return nil, err
	}
	return b.Build(ctx)
}

func runImages(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("images", flag.ContinueOnError)
	opt := addImageFlags(fs)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: npfnic images [-cache DIR] [-mirror URL]\n\n"+
			"Builds the QEMU, kernel, driver and initramfs images, or checks that the cache holds them,\n"+
			"and prints their paths. The driver and the guest tools are built from the checkout around\n"+
			"the working directory or, outside one, from the sources in this binary. The build needs\n"+
			"Debian 12 (bookworm) on x86-64, root, and Go.\n\n")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	a, err := buildImages(ctx, opt)
	if err != nil {
		return err
	}
	fmt.Printf("qemu       %s (%s)\nkernel     %s (%s)\nvmlinux    %s\nheaders    %s\nmodule     %s\ninitramfs  %s\nrdma       %s\nconformance %s\nmpi        %s\n",
		a.QEMU.Launcher(), a.QEMU.Version, a.Kernel.Release, a.Kernel.Version, a.Kernel.Vmlinux,
		a.Kernel.Headers, a.Module, a.Initramfs, a.RDMAInitramfs, a.ConformanceInitramfs, a.MPIInitramfs)
	return nil
}
