package npfnic

import "embed"

// Source is the part of this module that the guest image build (package
// images) compiles, so that an installed npfnic builds its images outside
// a checkout: the driver's C sources and Kbuild (the module), the guest
// tools with the module's packages they import (guestdrv/agent,
// vdevice/hw), and go.mod and go.sum, which pin the tools' dependencies
// and the u-root the initramfs busybox is built from. cmd/npfnic hands it
// to images, which extracts it into the cache when the working directory
// is not inside a checkout.
//
// It is here, in a file of its own, because go:embed reaches no parent
// directory: only the module root's package sees all of these files. The
// packages' _test.go files come along (a tenth of the bytes), as embed
// patterns can leave them out only by naming every other file, and a
// file added to a guest tool would then be missing from the binary alone.
// TestSourceHoldsTheImageBuildInputs keeps the patterns in step with what
// the guest tools import.
//
//go:embed go.mod go.sum
//go:embed guestdrv/Kbuild guestdrv/*.c guestdrv/*.h guestdrv/mpi/*.c
//go:embed guestdrv/agent/*.go guestdrv/cmd/*/*.go vdevice/hw/*.go internal/blockpat/blockpat.go
var Source embed.FS
