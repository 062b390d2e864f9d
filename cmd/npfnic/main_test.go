package main

import (
	"context"
	"errors"
	"flag"
	"slices"
	"testing"
)

// TestCommandTables: every name is listed once and in help's order, and
// each subcommand is reached through the dispatch and answers -h with its
// flags (flag.ErrHelp), without doing anything else.
func TestCommandTables(t *testing.T) {
	for _, tc := range []struct {
		table string
		cmds  []command
		run   func(name string) error
	}{
		{"commands", commands, func(name string) error {
			c, ok := lookup(commands, name)
			if !ok {
				return errors.New("not found")
			}
			return c.run(context.Background(), []string{"-h"})
		}},
		{"experiments", experiments, func(name string) error {
			return runExp(context.Background(), []string{name, "-h"})
		}},
	} {
		var names []string
		for _, c := range tc.cmds {
			names = append(names, c.name)
			if c.run == nil || c.summary == "" {
				t.Errorf("%s: %q has no run function or no summary", tc.table, c.name)
			}
			if err := tc.run(c.name); !errors.Is(err, flag.ErrHelp) {
				t.Errorf("%s: %s -h: %v, want flag.ErrHelp", tc.table, c.name, err)
			}
		}
		if !slices.IsSorted(names) || len(slices.Compact(slices.Clone(names))) != len(names) {
			t.Errorf("%s: names %v: want each once, sorted", tc.table, names)
		}
	}
	if _, ok := lookup(commands, "nope"); ok {
		t.Error("lookup found a command that does not exist")
	}
	if err := runExp(context.Background(), []string{"nope"}); err == nil || errors.Is(err, flag.ErrHelp) {
		t.Errorf("exp nope: %v, want an unknown-experiment error", err)
	}
}
