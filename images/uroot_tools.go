//go:build tools

package images

// The initramfs busybox is compiled from the u-root module this go.mod
// requires (uRootCommands). Nothing in the build imports those commands, so
// this file, never compiled, keeps the requirement where go mod tidy sees
// it and pins the version the image cache key is made from.
import (
	_ "github.com/u-root/u-root/cmds/core/gosh"
	_ "github.com/u-root/u-root/cmds/core/init"
)
