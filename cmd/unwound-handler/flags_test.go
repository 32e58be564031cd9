package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"strings"
	"testing"
)

// The handler's option parser against the flag package it replaced: the
// same options, values, remaining arguments, errors and help text for
// every argument list below.

func mainValues(o mainOptions, args func() []string) func() string {
	return func() string {
		return fmt.Sprint(*o.config, *o.coreFile, *o.exe, *o.sysroot, *o.pattern, *o.printJSON, *o.version, *o.pidfd, *o.socket, *o.serve, args())
	}
}

// stdMain and ourMain define the top-level options of main.go.
func stdMain(out *bytes.Buffer) (*flag.FlagSet, func() string) {
	fs := flag.NewFlagSet("unwound-handler", flag.ContinueOnError)
	fs.SetOutput(out)
	o := defineMain(fs)
	fs.Usage = func() { mainUsage(fs.Output(), fs.PrintDefaults) }
	return fs, mainValues(o, fs.Args)
}

func ourMain(out *bytes.Buffer) (*flagSet, func() string) {
	fs := newFlagSet("unwound-handler", out)
	o := defineMain(fs)
	fs.usage = func() { mainUsage(fs.out, fs.PrintDefaults) }
	return fs, mainValues(o, fs.Args)
}

// stdInstall and ourInstall define install's (or uninstall's) options,
// with the default usage ("Usage of ...").
func stdInstall(out *bytes.Buffer, cmd string) (*flag.FlagSet, func() string) {
	fs := flag.NewFlagSet("unwound-handler "+cmd, flag.ContinueOnError)
	fs.SetOutput(out)
	root, force, cfg, limit, pidfd, socket := defineInstall(fs, cmd, "/etc/u.toml")
	return fs, func() string { return fmt.Sprint(*root, *force, *cfg, *limit, *pidfd, *socket, fs.Args()) }
}

func ourInstall(out *bytes.Buffer, cmd string) (*flagSet, func() string) {
	fs := newFlagSet("unwound-handler "+cmd, out)
	root, force, cfg, limit, pidfd, socket := defineInstall(fs, cmd, "/etc/u.toml")
	return fs, func() string { return fmt.Sprint(*root, *force, *cfg, *limit, *pidfd, *socket, fs.Args()) }
}

func TestFlagsMatchPackageFlag(t *testing.T) {
	for _, args := range []string{
		"",
		"1 2 3 4 5 6 !bin!crash crash",
		"--config /etc/x.toml 1 2 3",
		"-config=/etc/x.toml --core-pattern",
		"--core-pattern=false --version=1 x",
		"--core-pattern=maybe",
		"--core-file - --sysroot /sys --print-json",
		"--config",
		"--nope",
		"-h",
		"--help",
		"-help=1",
		"---config x",
		"-=x",
		"- x",
		"-- --config x",
		"x --config y",
		"--root /mnt --force --core-pipe-limit 8",
		"--core-pipe-limit=0x10 --force=f -3",
		"--core-pipe-limit -7 --config=/c",
		"--core-pipe-limit nine",
		"--core-pipe-limit 99999999999999999999",
		"--force=yes",
		"--root",
		"--root= extra",
		"-force -root=/a -root=/b",
		"--config /c --pidfd=3 1 2 3",
		"--config /c --pidfd= 1 2 3",
		"--pidfd on --core-pattern",
		"--pidfd",
	} {
		argv := strings.Fields(args)
		var so, oo bytes.Buffer
		sfs, sv := stdMain(&so)
		ofs, ov := ourMain(&oo)
		compareParse(t, "main "+args, sfs.Parse(argv), ofs.Parse(argv), sv(), ov(), so.String(), oo.String())

		for _, cmd := range []string{"install", "uninstall"} {
			so.Reset()
			oo.Reset()
			sfi, svi := stdInstall(&so, cmd)
			ofi, ovi := ourInstall(&oo, cmd)
			compareParse(t, cmd+" "+args, sfi.Parse(argv), ofi.Parse(argv), svi(), ovi(), so.String(), oo.String())
		}
	}
}

func compareParse(t *testing.T, what string, stdErr, ourErr error, stdVals, ourVals, stdOut, ourOut string) {
	t.Helper()
	if errors.Is(stdErr, flag.ErrHelp) != errors.Is(ourErr, errHelp) || fmt.Sprint(stdErr) != fmt.Sprint(ourErr) && !errors.Is(stdErr, flag.ErrHelp) {
		t.Errorf("%s: error %v, flag says %v", what, ourErr, stdErr)
	}
	if stdErr == nil && stdVals != ourVals {
		t.Errorf("%s: values %s, flag says %s", what, ourVals, stdVals)
	}
	if stdOut != ourOut {
		t.Errorf("%s: printed\n%s\nflag prints\n%s", what, ourOut, stdOut)
	}
}

// The real help text is what the flag package printed.
func TestHelpText(t *testing.T) {
	var so, oo bytes.Buffer
	sfs, _ := stdMain(&so)
	sfs.Usage()
	ofs, _ := ourMain(&oo)
	ofs.showUsage()
	if so.String() != oo.String() || !strings.Contains(oo.String(), "  -config file\n    \tconfiguration file (default \"/etc/unwound/unwound.toml\")\n") {
		t.Errorf("help:\n%s\nflag's:\n%s", oo.String(), so.String())
	}
}
