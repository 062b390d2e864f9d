package testbed

import (
	"strings"
	"testing"
)

func TestParseRandRead(t *testing.T) {
	cases := []struct {
		out     string
		mbps    float64
		ios     int64
		wantErr string
	}{
		{"randread bs 524288 jobs 2 devices 1 warm_bytes 1048576 bytes 40370176 ms 4000 ios 77\n", 10.0925, 77, ""},
		{"randread bs 65536 jobs 2 devices 4 warm_bytes 0 bytes 0 ms 0 ios 0", 0, 0, "measured for 0 ms"},
		{"npfnic-guest: /dev/sda at 0: short read", 0, 0, "no randread line"},
	}
	for _, c := range cases {
		mbps, ios, err := ParseRandRead(c.out)
		if c.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("ParseRandRead(%q) = %v, want an error with %q", c.out, err, c.wantErr)
			}
			continue
		}
		if err != nil || ios != c.ios || mbps < c.mbps-0.001 || mbps > c.mbps+0.001 {
			t.Errorf("ParseRandRead(%q) = %v, %d, %v; want %v, %d", c.out, mbps, ios, err, c.mbps, c.ios)
		}
	}
}

func TestParseKeyValues(t *testing.T) {
	kv := ParseKeyValues("Name:\ttgtd\nVmHWM:\t  140288 kB\nVmRSS:\t  137216 kB\nanon 138412032\nfile 54525952\noom_kill 0\ncurrent 193986560\n")
	want := map[string]int64{"VmHWM": 140288, "VmRSS": 137216, "anon": 138412032, "file": 54525952, "oom_kill": 0, "current": 193986560}
	for k, v := range want {
		if got, ok := kv[k]; !ok || got != v {
			t.Errorf("%s = %d (%v), want %d", k, got, ok, v)
		}
	}
	if _, ok := kv["Name"]; ok {
		t.Error("a line without a number was read")
	}
}

func TestStorageCgroupScript(t *testing.T) {
	for _, c := range []struct {
		mib  int
		want string
	}{{96, "echo -n 96M > "}, {0, "echo -n max > "}} {
		s := storageCgroupScript(c.mib)
		if !strings.Contains(s, c.want) || !strings.Contains(s, `= "`+maxBytes(c.mib)+`"`) {
			t.Errorf("storageCgroupScript(%d) lacks %q or its check:\n%s", c.mib, c.want, s)
		}
	}
	if maxBytes(96) != "100663296" {
		t.Errorf("maxBytes(96) = %s", maxBytes(96))
	}
}
