// Command genheader writes the npfnic C header from package hw.
//
//	go run ./vdevice/hw/internal/genheader -o guestdrv/npfnic_hw.h
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/npfnic/npfnic/vdevice/hw/internal/cheader"
)

func main() {
	out := flag.String("o", "", "output file (default stdout)")
	flag.Parse()
	data := cheader.Render()
	if *out == "" {
		os.Stdout.Write(data)
		return
	}
	if err := os.WriteFile(*out, data, 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "genheader:", err)
		os.Exit(1)
	}
}
