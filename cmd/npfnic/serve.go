package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/npfnic/npfnic/vdevice"
	"github.com/npfnic/npfnic/vdevice/nic"
)

// runServe implements `npfnic serve --socket PATH`: it serves one npfnic
// function over vfio-user to one client after another until ctx is
// cancelled (SIGINT/SIGTERM in main), then removes the socket.
func runServe(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	socket := fs.String("socket", "", "path of the vfio-user UNIX socket to create (required)")
	level := fs.String("log-level", "info", "log level: debug, info, warn or error")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: npfnic serve --socket PATH [--log-level LEVEL]\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return fmt.Errorf("serve: unexpected arguments %q", fs.Args())
	}
	if *socket == "" {
		fs.Usage()
		return errors.New("serve: --socket is required")
	}
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(strings.ToLower(*level))); err != nil {
		return fmt.Errorf("serve: bad --log-level %q", *level)
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lv}))
	dev, err := nic.New(nic.Options{Logger: logger})
	if err != nil {
		return err
	}
	return vdevice.ListenAndServe(ctx, *socket, dev, logger)
}
