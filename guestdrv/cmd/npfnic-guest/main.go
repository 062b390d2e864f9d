// Command npfnic-guest pokes the npfnic device from inside a Linux guest
// without a driver: it finds the function in sysfs, reads and writes BAR0
// registers through the resource0 mapping, and runs the device's
// diagnostic DMA into a locked buffer whose guest-physical address it gets
// from /proc/self/pagemap. It runs as root.
//
// Build statically for the initramfs:
//
//	CGO_ENABLED=0 go build ./guestdrv/cmd/npfnic-guest
//
// Usage:
//
//	npfnic-guest find
//	npfnic-guest bar read  BDF OFFSET
//	npfnic-guest bar write BDF OFFSET VALUE
//	npfnic-guest dmatest   BDF LEN SEED
//	npfnic-guest tcp-send  HOST:PORT FILE
//	npfnic-guest tcp-recv  [HOST]:PORT FILE
//	npfnic-guest zram-swap MIB
//	npfnic-guest pageout   PID INTERVAL_MS DURATION_MS
//	npfnic-guest rsh-serve ADDR
//	npfnic-guest rsh       HOST COMMAND...
package main

import (
	"errors"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"
)

const usage = `usage:
  npfnic-guest find
  npfnic-guest bar read  BDF OFFSET
  npfnic-guest bar write BDF OFFSET VALUE
  npfnic-guest dmatest   BDF LEN SEED
  npfnic-guest tcp-send  HOST:PORT FILE      send FILE over one TCP connection
  npfnic-guest tcp-recv  [HOST]:PORT FILE    accept one connection, store it in FILE
  npfnic-guest zram-swap MIB                 swap on a zram disk of MIB (zram loaded)
  npfnic-guest pageout   PID INTERVAL_MS DURATION_MS
                                             page PID's anonymous memory out, again
                                             every INTERVAL_MS for DURATION_MS (0: once)
  npfnic-guest randread BS JOBS WARM_MS RUN_MS DEVICE...
                                             O_DIRECT random reads of BS bytes, JOBS readers
                                             per device, each block checked (randread.go)
  npfnic-guest fill-pattern FILE MIB         write MIB MiB of the pattern randread checks
  npfnic-guest rsh-serve ADDR                run the commands rsh sends to ADDR (HOST[:PORT])
  npfnic-guest rsh       HOST COMMAND...     run COMMAND on HOST's rsh-serve, as ssh would
                                             (Open MPI's plm_rsh_agent; rsh.go)
BDF is a PCI address such as 0000:01:00.0; numbers accept 0x prefixes.`

// sysfsPCI is where PCI functions appear; a variable for tests.
var sysfsPCI = "/sys/bus/pci/devices"

// command is a parsed command line.
type command struct {
	name   string // find, bar-read, bar-write, dmatest
	bdf    string
	offset uint32
	value  uint32
	length uint32
	seed   uint32
	addr   string // tcp-send, tcp-recv
	file   string
	argv   []string      // rsh
	pid    int           // pageout
	bs     int           // randread
	jobs   int           // randread
	warm   time.Duration // randread
	devs   []string      // randread
	every  time.Duration // pageout
	total  time.Duration // pageout
}

var bdfRE = regexp.MustCompile(`^([0-9a-f]{4}:)?[0-9a-f]{2}:[0-1][0-9a-f]\.[0-7]$`)

// parseBDF normalises a PCI address to the domain-qualified sysfs name.
func parseBDF(s string) (string, error) {
	s = strings.ToLower(s)
	if !bdfRE.MatchString(s) {
		return "", fmt.Errorf("bad PCI address %q (want DDDD:BB:DD.F)", s)
	}
	if len(s) == 7 {
		s = "0000:" + s
	}
	return s, nil
}

func parseU32(what, s string) (uint32, error) {
	v, err := strconv.ParseUint(s, 0, 32)
	if err != nil {
		return 0, fmt.Errorf("bad %s %q: %v", what, s, err)
	}
	return uint32(v), nil
}

func parseCommand(args []string) (command, error) {
	if len(args) == 0 {
		return command{}, errors.New("no command")
	}
	var c command
	var err error
	need := func(n int) error {
		if len(args) != n {
			return fmt.Errorf("%s: want %d arguments, got %d", strings.Join(args[:min(2, len(args))], " "), n-1, len(args)-1)
		}
		return nil
	}
	switch args[0] {
	case "find":
		if err := need(1); err != nil {
			return c, err
		}
		c.name = "find"
		return c, nil
	case "bar":
		if len(args) < 2 {
			return c, errors.New("bar: want read or write")
		}
		switch args[1] {
		case "read":
			c.name = "bar-read"
			if err := need(4); err != nil {
				return c, err
			}
		case "write":
			c.name = "bar-write"
			if err := need(5); err != nil {
				return c, err
			}
			if c.value, err = parseU32("value", args[4]); err != nil {
				return c, err
			}
		default:
			return c, fmt.Errorf("bar: unknown operation %q", args[1])
		}
		if c.bdf, err = parseBDF(args[2]); err != nil {
			return c, err
		}
		if c.offset, err = parseU32("offset", args[3]); err != nil {
			return c, err
		}
		if c.offset%4 != 0 {
			return c, fmt.Errorf("offset %#x is not 32-bit aligned", c.offset)
		}
		return c, nil
	case "dmatest":
		c.name = "dmatest"
		if err := need(4); err != nil {
			return c, err
		}
		if c.bdf, err = parseBDF(args[1]); err != nil {
			return c, err
		}
		if c.length, err = parseU32("length", args[2]); err != nil {
			return c, err
		}
		if c.length == 0 {
			return c, errors.New("length must be > 0")
		}
		if c.seed, err = parseU32("seed", args[3]); err != nil {
			return c, err
		}
		return c, nil
	case "tcp-send", "tcp-recv":
		c.name = args[0]
		if err := need(3); err != nil {
			return c, err
		}
		c.addr, c.file = args[1], args[2]
		return c, nil
	case "rsh-serve":
		c.name = args[0]
		if err := need(2); err != nil {
			return c, err
		}
		c.addr = args[1]
		return c, nil
	case "rsh":
		c.name = args[0]
		if len(args) < 3 {
			return c, errors.New("rsh: want HOST COMMAND...")
		}
		c.addr, c.argv = args[1], args[2:]
		return c, nil
	case "zram-swap":
		c.name = args[0]
		if err := need(2); err != nil {
			return c, err
		}
		if c.length, err = parseU32("size in MiB", args[1]); err != nil {
			return c, err
		}
		return c, nil
	case "randread":
		c.name = args[0]
		if len(args) < 6 {
			return c, fmt.Errorf("randread: want BS JOBS WARM_MS RUN_MS DEVICE..., got %d arguments", len(args)-1)
		}
		var v [4]uint32
		for i, what := range []string{"block size", "jobs", "warm-up", "run time"} {
			if v[i], err = parseU32(what, args[1+i]); err != nil {
				return c, err
			}
		}
		c.bs, c.jobs = int(v[0]), int(v[1])
		c.warm, c.total = time.Duration(v[2])*time.Millisecond, time.Duration(v[3])*time.Millisecond
		c.devs = args[5:]
		return c, nil
	case "fill-pattern":
		c.name = args[0]
		if err := need(3); err != nil {
			return c, err
		}
		c.file = args[1]
		if c.length, err = parseU32("size in MiB", args[2]); err != nil {
			return c, err
		}
		return c, nil
	case "pageout":
		c.name = args[0]
		if err := need(4); err != nil {
			return c, err
		}
		var v [3]uint32
		for i, what := range []string{"pid", "interval", "duration"} {
			if v[i], err = parseU32(what, args[1+i]); err != nil {
				return c, err
			}
		}
		if v[0] == 0 {
			return c, errors.New("pageout: pid 0")
		}
		c.pid, c.every, c.total = int(v[0]), time.Duration(v[1])*time.Millisecond, time.Duration(v[2])*time.Millisecond
		return c, nil
	}
	return c, fmt.Errorf("unknown command %q", args[0])
}

func main() {
	c, err := parseCommand(os.Args[1:])
	if err != nil {
		fmt.Fprintf(os.Stderr, "npfnic-guest: %v\n%s\n", err, usage)
		os.Exit(2)
	}
	if c.name == "rsh" {
		status, err := rshRun(c.addr, c.argv, os.Stdout, os.Stderr)
		if err != nil {
			fmt.Fprintf(os.Stderr, "npfnic-guest rsh: %v\n", err)
			os.Exit(255) // ssh's status for its own failures
		}
		os.Exit(status)
	}
	if err := run(c); err != nil {
		fmt.Fprintf(os.Stderr, "npfnic-guest: %v\n", err)
		os.Exit(1)
	}
}

func run(c command) error {
	switch c.name {
	case "find":
		bdfs, err := findDevices()
		if err != nil {
			return err
		}
		if len(bdfs) == 0 {
			return errors.New("no npfnic device found")
		}
		for _, b := range bdfs {
			fmt.Println(b)
		}
		return nil
	case "bar-read":
		bar, err := openBAR(c.bdf, 0)
		if err != nil {
			return err
		}
		defer bar.close()
		v, err := bar.read32(c.offset)
		if err != nil {
			return err
		}
		fmt.Printf("0x%08x\n", v)
		return nil
	case "bar-write":
		bar, err := openBAR(c.bdf, 0)
		if err != nil {
			return err
		}
		defer bar.close()
		return bar.write32(c.offset, c.value)
	case "dmatest":
		return dmaTest(c.bdf, c.length, c.seed)
	case "tcp-send":
		return tcpSend(c.addr, c.file, os.Stdout)
	case "tcp-recv":
		return tcpRecv(c.addr, c.file, os.Stdout)
	case "rsh-serve":
		return rshServe(c.addr)
	case "zram-swap":
		return zramSwap(c.length)
	case "pageout":
		return pageout(c.pid, c.every, c.total)
	case "randread":
		return randRead(c.bs, c.jobs, c.warm, c.total, c.devs, os.Stdout)
	case "fill-pattern":
		return fillPattern(c.file, int(c.length))
	}
	return fmt.Errorf("unknown command %q", c.name)
}
