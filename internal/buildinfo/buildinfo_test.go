package buildinfo

import (
	"runtime/debug"
	"testing"
)

func TestRevision(t *testing.T) {
	for _, tc := range []struct {
		name     string
		bi       *debug.BuildInfo
		settings []debug.BuildSetting
		want     string
	}{
		{name: "no build information"},
		{name: "no VCS stamp", bi: &debug.BuildInfo{}},
		{name: "clean", bi: &debug.BuildInfo{Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "abc"}, {Key: "vcs.modified", Value: "false"}}}, want: "abc"},
		{name: "modified", bi: &debug.BuildInfo{Settings: []debug.BuildSetting{{Key: "vcs.modified", Value: "true"}, {Key: "vcs.revision", Value: "abc"}}}, want: "abc+modified"},
		{name: "modified without a revision", bi: &debug.BuildInfo{Settings: []debug.BuildSetting{{Key: "vcs.modified", Value: "true"}}}},
	} {
		if got := Revision(tc.bi); got != tc.want {
			t.Errorf("%s: Revision = %q, want %q", tc.name, got, tc.want)
		}
	}
}
