package sysctl

import (
	"strings"
	"testing"
)

func TestPidfdSupported(t *testing.T) {
	for rel, want := range map[string]bool{
		"6.18.44-fc-v657": true,
		"6.16":            true,
		"6.16.0-rc1":      true,
		"6.15.9":          false,
		"6.12.40-yocto":   false,
		"6.1.0-37-arm64":  false,
		"7.2.0-rc1":       true,
		"7.0":             true,
		"5.19.17":         false,
		"10.1.0":          true,
		"6.17rc2":         true,
		"":                false,
		"6":               false,
		"x.y":             false,
		"6.-1":            false,
	} {
		if got := PidfdSupported(rel); got != want {
			t.Errorf("PidfdSupported(%q) = %v, want %v", rel, got, want)
		}
	}
}

func TestChoosePidfd(t *testing.T) {
	for _, tc := range []struct {
		mode, rel string
		want, bad bool
	}{
		{"on", "5.10.0", true, false},
		{"off", "6.18.0", false, false},
		{"auto", "6.18.0", true, false},
		{"auto", "6.15.0", false, false},
		{"", "6.16.1", true, false},
		{"yes", "6.18.0", false, true},
	} {
		got, err := ChoosePidfd(tc.mode, tc.rel)
		if got != tc.want || (err != nil) != tc.bad {
			t.Errorf("ChoosePidfd(%q, %q) = %v, %v", tc.mode, tc.rel, got, err)
		}
	}
	// "auto" with no release asks the running kernel.
	got, _ := ChoosePidfd("auto", "")
	if got != PidfdSupported(KernelRelease()) || KernelRelease() == "" {
		t.Errorf("auto on %q: %v", KernelRelease(), got)
	}
}

func TestPatternFor(t *testing.T) {
	const exe, cfg = "/usr/bin/unwound-handler", "/etc/unwound/unwound.toml"
	without, err1 := PatternFor(exe, cfg, false)
	with, err2 := PatternFor(exe, cfg, true)
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	if want := "|/usr/bin/unwound-handler --config /etc/unwound/unwound.toml %P %I %s %t %d %c %E %e"; without != want {
		t.Errorf("without: %q", without)
	}
	if want := "|/usr/bin/unwound-handler --config /etc/unwound/unwound.toml --pidfd=%F %P %I %s %t %d %c %E %e"; with != want {
		t.Errorf("with: %q", with)
	}
	if p, _ := Pattern(exe, cfg); p != without {
		t.Errorf("Pattern %q", p)
	}
	// The comm (%e) stays last: kernels before 5.3 split it on spaces.
	if !strings.HasSuffix(with, " %e") {
		t.Errorf("%q: %%e not last", with)
	}
	// The 127-character limit counts the pidfd argument: a path that fits
	// without it may not fit with it.
	long := "/" + strings.Repeat("d", 127-len(without)+len(exe)-1-len("/unwound-handler")) + "/unwound-handler"
	if p, err := PatternFor(long, cfg, false); err != nil || len(p) != MaxPattern {
		t.Fatalf("%d characters without: %v", len(p), err)
	}
	if _, err := PatternFor(long, cfg, true); err == nil || !strings.Contains(err.Error(), "127") {
		t.Errorf("over 127 characters with %s: %v", PidfdArg, err)
	}
	// auto then writes the line without; on refuses.
	if p, err := PatternMode(long, cfg, "auto", "6.18.0"); err != nil || strings.Contains(p, PidfdArg) {
		t.Errorf("auto, too long with the pidfd: %q %v", p, err)
	}
	if _, err := PatternMode(long, cfg, "on", "6.18.0"); err == nil {
		t.Errorf("on, too long with the pidfd: accepted")
	}
	if p, err := PatternMode(exe, cfg, "auto", "6.18.0"); err != nil || p != with {
		t.Errorf("auto on 6.18: %q %v", p, err)
	}
}

// The drift check and install take a line with and without the pidfd as
// the same handler.
func TestSameWithPidfd(t *testing.T) {
	const exe, cfg = "/usr/bin/unwound-handler", "/etc/unwound/unwound.toml"
	without, _ := PatternFor(exe, cfg, false)
	with, _ := PatternFor(exe, cfg, true)
	if !Same("/", with, without) || !Same("/", without, with) {
		t.Errorf("lines with and without %s differ", PidfdArg)
	}
	other, _ := PatternFor(exe, "/etc/other.toml", true)
	if Same("/", with, other) {
		t.Errorf("another config is the same")
	}
	if Same("/", with, strings.Replace(with, "--pidfd=%F", "--pidfd=%P", 1)) {
		t.Errorf("a different argument is the same")
	}
	for _, w := range []Want{{CorePattern: without, Root: "/"}, {CorePattern: with, Root: "/"}, {Config: cfg}} {
		for _, live := range []string{with, without} {
			if d := Drift(Values{CorePattern: live, PipeLimit: "4", SuidDumpable: "2"}, w); len(d) != 0 {
				t.Errorf("want %+v, live %q: drift %q", w, live, d)
			}
		}
	}
	if prog, c := Handler(with); prog != exe || c != cfg {
		t.Errorf("Handler(%q) = %q, %q", with, prog, c)
	}
}

func FuzzPidfdSupported(f *testing.F) {
	for _, s := range []string{"6.18.44-fc-v657", "6.16", "6.15.9", "7.2.0-rc1", "6.17rc2", "", "6", "99999999999999999999.1", "6.+16"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, rel string) {
		if PidfdSupported(rel) && !(rel[0] >= '0' && rel[0] <= '9' || rel[0] == '+' || rel[0] == '-') {
			t.Fatalf("%q taken as a release", rel)
		}
	})
}
