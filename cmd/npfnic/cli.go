package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// The conventions every command follows (package main's run, exit):
// -h, -help and --help print the usage on stdout and exit 0; a command
// line the command cannot take (an unknown flag, a bad value, an argument
// it does not take) prints the error and a one-line hint on stderr and
// exits 2; a run that fails exits 1.

// usageError is a command line the command cannot take: exit status 2,
// with a hint to -h.
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

// usageErrorf makes a usageError.
func usageErrorf(format string, args ...any) error {
	return &usageError{fmt.Errorf(format, args...)}
}

// badUsage marks err, a check of the command line that failed, as a
// usageError; nil stays nil.
func badUsage(err error) error {
	if err == nil || errors.As(err, new(*usageError)) {
		return err
	}
	return &usageError{err}
}

// errUsageShown is the status of a command line that names no command:
// the usage went to stderr, and the exit status is 2.
var errUsageShown = errors.New("usage shown")

// pathError is an error of a command below the top level ("exp rnr"),
// which names it in the message and the hint.
type pathError struct {
	path string
	err  error
}

func (e *pathError) Error() string { return e.path + ": " + e.err.Error() }
func (e *pathError) Unwrap() error { return e.err }

// parseFlags parses the flags of a command that takes no positional
// argument. The flag package stops at the first argument that is not a
// flag: that argument and everything after it, flags included, are
// refused, naming them.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return leftovers(fs.Args())
	}
	return nil
}

// parse is fs.Parse with the conventions: -h prints the usage on stdout
// and returns flag.ErrHelp; a bad flag is a usageError (the flag
// package's own message, without the usage).
func parse(fs *flag.FlagSet, args []string) error {
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	fs.SetOutput(stderr)
	if errors.Is(err, flag.ErrHelp) {
		fs.SetOutput(stdout)
		fs.Usage()
		return flag.ErrHelp
	}
	if err != nil {
		return &usageError{err}
	}
	return nil
}

// parseArgs parses the flags of a command that takes positional
// arguments and returns those. Flags may come after them too (the flag
// package alone stops at the first argument); "--" ends the flags.
func parseArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := parse(fs, args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if i := len(args) - len(rest) - 1; i >= 0 && args[i] == "--" {
			return append(pos, rest...), nil
		}
		pos, args = append(pos, rest[0]), rest[1:]
	}
}

// leftovers is the error of arguments a command that takes flags only
// was given: the first argument that is not a flag and all after it.
func leftovers(args []string) error {
	var flags []string
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = fmt.Sprintf("%q", a)
		if i > 0 && len(a) > 1 && a[0] == '-' {
			flags = append(flags, a)
		}
	}
	s := ""
	if len(args) > 1 {
		s = "s"
	}
	msg := fmt.Sprintf("unexpected argument%s %s: the command takes flags only", s, strings.Join(q, " "))
	if len(flags) > 0 {
		msg += fmt.Sprintf("; flags after an argument are refused, not read (%s)", strings.Join(flags, " "))
	}
	return usageErrorf("%s", msg)
}

// checkOutDir checks that the output folder flagName names can be made
// (or is there) and written, without making it: the nearest folder of
// dir that exists must be a folder the command can create files in.
func checkOutDir(flagName, dir string) error {
	if dir == "" {
		return usageErrorf("%s: empty", flagName)
	}
	p := filepath.Clean(dir)
	for {
		fi, err := os.Stat(p)
		if err == nil && !fi.IsDir() {
			return usageErrorf("%s %s: %s is not a directory", flagName, dir, p)
		}
		if err == nil {
			break
		}
		if !errors.Is(err, os.ErrNotExist) || filepath.Dir(p) == p {
			return usageErrorf("%s %s: %v", flagName, dir, err)
		}
		p = filepath.Dir(p)
	}
	return checkWritable(flagName, dir, p)
}

// checkWritable checks that files can be created in the folder dir,
// which is what flagName's value arg needs.
func checkWritable(flagName, arg, dir string) error {
	f, err := os.CreateTemp(dir, ".npfnic-check-*")
	if err != nil {
		return usageErrorf("%s %s: cannot write in %s: %v", flagName, arg, dir, unwrapPath(err, dir))
	}
	f.Close()
	os.Remove(f.Name())
	return nil
}

// checkOutFile checks that file, which flagName names and the command
// writes at its end, can be created: its directory exists and is
// writable.
func checkOutFile(flagName, file string) error {
	dir := filepath.Dir(file)
	if fi, err := os.Stat(dir); err != nil {
		return usageErrorf("%s %s: %v", flagName, file, err)
	} else if !fi.IsDir() {
		return usageErrorf("%s %s: %s is not a directory", flagName, file, dir)
	}
	return checkWritable(flagName, file, dir)
}

// unwrapPath is the cause of err when err is about path, which the
// message names already.
func unwrapPath(err error, path string) error {
	var pe *os.PathError
	if errors.As(err, &pe) && (pe.Path == path || strings.HasPrefix(pe.Path, path+"/")) {
		return pe.Err
	}
	return err
}
