package storage

import (
	"strings"
	"testing"
	"time"
)

func TestValidate(t *testing.T) {
	cases := []struct {
		name    string
		c       Config
		wantErr string
	}{
		{"defaults", Config{}, ""},
		{"pool below tgtd's least", Config{PoolMiB: 64}, "pool 64 MiB"},
		{"limit at the guest's memory", Config{Limits: []int{1024}}, "memory limit 1024 MiB"},
		{"block past ib_iser's", Config{Blocks: []int{1 << 20}}, "block 1048576"},
		{"too many sessions", Config{Sessions: []int{9}}, "9 sessions"},
		{"short run", Config{Run: time.Millisecond}, "run 1ms"},
		{"bad receive-fault policy", Config{RecvFault: "retry"}, `receive-fault policy "retry"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.c.LogDir = t.TempDir()
			err := c.c.Validate()
			if c.wantErr == "" && err != nil || c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)) {
				t.Fatalf("Validate = %v, want %q", err, c.wantErr)
			}
		})
	}
}

// TestTable: a pinned run that did not start shows as "fails", and a
// limit where only npf ran says so.
func TestTable(t *testing.T) {
	c := Config{Limits: []int{96}, NoSessions: true}
	c.LogDir = t.TempDir()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	p := Point{"a", c.Peers[0], Pinned, 96, 1, 512 << 10}
	n := p
	n.Config = NPF
	var results []Result
	r := Result{Point: p, Round: 1}
	r.NoStart = "tgtd could not register its pool"
	results = append(results, r)
	r = Result{Point: n, Round: 1}
	r.MBps, r.RSSKiB = 5, 20<<10
	results = append(results, r)
	tab := Table(c, results)
	for _, want := range []string{"fails", "5.00", "only npf runs", "did not run: tgtd could not register"} {
		if !strings.Contains(tab, want) {
			t.Errorf("table lacks %q:\n%s", want, tab)
		}
	}
}
