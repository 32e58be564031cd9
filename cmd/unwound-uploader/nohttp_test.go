package main

import (
	"strings"
	"testing"

	"github.com/unwound-dev/unwound/testkit/testbin"
	"github.com/unwound-dev/unwound/testkit/testutil"
)

// TestNoHTTPBuild: -tags unwound_nohttp builds a serial-only uploader that
// links no net/http (the board binary's size budget), and the default
// build has it.
func TestNoHTTPBuild(t *testing.T) {
	for _, tc := range []struct {
		tags string
		http bool
	}{{"unwound_nohttp", false}, {"", true}} {
		out := testutil.Run(t, "go", "list", "-deps", "-tags", tc.tags, ".")
		deps := "\n" + string(out)
		if got := strings.Contains(deps, "\nnet/http\n"); got != tc.http {
			t.Errorf("-tags %q: net/http linked: %v, want %v", tc.tags, got, tc.http)
		}
		if !strings.Contains(deps, "\ngo.bug.st/serial\n") {
			t.Errorf("-tags %q: no serial transport", tc.tags)
		}
	}
	if testing.Short() {
		return
	}
	testbin.Build(t, "unwound-uploader", "unwound_nohttp")
}
