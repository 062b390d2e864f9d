package coldring

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/npfnic/npfnic/internal/report"
)

// Every figure the experiment writes has its SVG, the palette's colours
// only, and a range wherever rounds ran.
func TestFigures(t *testing.T) {
	ahead := append(zeroResults(),
		aheadRun(64, 0, 2.6, 64, 0), aheadRun(64, 0, 2.4, 64, 0), aheadRun(64, 16, 2.2, 4, 60), aheadRun(64, 16, 2.1, 4, 60),
		aheadRun(256, 0, 3.1, 256, 0), aheadRun(256, 16, 2.3, 16, 240))
	for _, tc := range []struct {
		name    string
		c       Config
		results []Result
		figures []string
	}{
		{"fault_ahead=0 arms", Config{Rounds: 3, Policies: []string{"pin", "drop", "backup"}, FaultAheadZero: []string{"drop"}, Cap: 20 * time.Second},
			zeroResults(), []string{"cold-ring.png"}},
		{"with part (c)", Config{Rounds: 3, Policies: []string{"pin", "drop", "backup"}, FaultAheadZero: []string{"drop"}, FaultAhead: []int{0, 16}, Cap: 20 * time.Second},
			ahead, []string{"cold-ring-ahead.png", "cold-ring.png"}},
	} {
		dir := t.TempDir()
		files, err := WriteOutputs(dir, tc.c, tc.results)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		var pngs []string
		for _, f := range files {
			if strings.HasSuffix(f, ".png") {
				pngs = append(pngs, filepath.Base(f))
				if err := report.CheckFigure(f); err != nil {
					t.Errorf("%s: %v", tc.name, err)
				}
			}
		}
		if strings.Join(pngs, " ") != strings.Join(tc.figures, " ") {
			t.Errorf("%s: figures %v, want %v", tc.name, pngs, tc.figures)
		}
	}
}

// Part (a) keeps each second's spread over the rounds, for its band.
func TestStartupSpread(t *testing.T) {
	st := Startup(zeroResults())
	pin := st[0]
	if pin.Policy != "pin" || len(pin.Lo) != 4 || len(pin.Hi) != 4 {
		t.Fatalf("pin: %+v", pin)
	}
	// Rounds scale the bins by 0.9, 1 and 1.1.
	for i, v := range pin.Bins {
		if lo, hi := pin.Lo[i], pin.Hi[i]; abs(lo-0.9*v) > 1e-9 || abs(hi-1.1*v) > 1e-9 {
			t.Errorf("second %d: %v in %v..%v, want 0.9x..1.1x", i+1, v, lo, hi)
		}
	}
}

func abs(x float64) float64 { return max(x, -x) }
