// Command gendatasheet writes the npfnic datasheet (docs/device.md) from
// package hw.
//
//	go run ./vdevice/hw/internal/gendatasheet -o docs/device.md
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/npfnic/npfnic/vdevice/hw/internal/datasheet"
)

func main() {
	out := flag.String("o", "", "output file (default stdout)")
	flag.Parse()
	data := datasheet.Render()
	if *out == "" {
		os.Stdout.Write(data)
		return
	}
	if err := os.WriteFile(*out, data, 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "gendatasheet:", err)
		os.Exit(1)
	}
}
