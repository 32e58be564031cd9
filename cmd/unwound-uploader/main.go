// Command unwound-uploader drains the report queue to a receiver, over
// HTTP or a serial port (config [upload] and [serial]), or prints it as
// text for boards whose only UART is the console. Logs go to stderr.
//
//	unwound-uploader [--config PATH] [--transport http|serial] [--once]
//	unwound-uploader [--config PATH] dump [--remove [--wait D]]
//	unwound-uploader [--config PATH] list | show [--json] ID | drop ID...
//
// Without --once it is a daemon: it drains at start, whenever a report
// lands in the queue (inotify; polling every upload.interval without it),
// and after a failure once the backoff or Retry-After has passed.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/unwound-dev/unwound/config"
	"github.com/unwound-dev/unwound/internal/sha256"
	"github.com/unwound-dev/unwound/internal/version"
	"github.com/unwound-dev/unwound/queue"
	"github.com/unwound-dev/unwound/report/decode"
	"github.com/unwound-dev/unwound/sysctl"
	"github.com/unwound-dev/unwound/uploader"
	"github.com/unwound-dev/unwound/uploader/serialup"
	"github.com/unwound-dev/unwound/wire/armor"
	"github.com/unwound-dev/unwound/wire/serialproto"
)

func main() {
	log.SetFlags(0)
	log.SetPrefix("unwound-uploader: ")
	os.Exit(run(os.Args[1:]))
}

func usage(fs *flag.FlagSet) func() {
	return func() {
		fmt.Fprint(os.Stderr, `usage: unwound-uploader [flags]            upload the queue (daemon, or --once)
       unwound-uploader [flags] dump [--remove [--wait D]]
                        print the queue as text armor on stdout; with --remove,
                        delete the entries the host confirms (=UNWOUND-ACK lines on stdin)
       unwound-uploader [flags] list
                        the queued reports, oldest first
       unwound-uploader [flags] show [--json] ID
       unwound-uploader [flags] drop ID...
                        ID: an entry's file name, its sequence number, or 8+ hex
                        digits of the report id

flags:
`)
		fs.PrintDefaults()
	}
}

// logDrift says, at start, how the kernel's crash settings differ from
// what unwound needs: reports the uploader waits for may never come. The
// handler is looked for beside the uploader (where packages install it).
func logDrift(cfgPath string, cfg *config.Config) {
	h := ""
	if self, err := sysctl.Executable(); err == nil {
		if p := filepath.Join(filepath.Dir(self), "unwound-handler"); fileExists(p) {
			h = p
		}
	}
	for _, d := range sysctl.Check(procSys, h, cfgPath, cfg.RateLimit.MaxConcurrent) {
		log.Printf("drift: %s", d)
	}
}

// checkConfig is --check-config: every bad key with its line on stderr,
// status 1 if there is any. A missing file is fine (the defaults), one
// that cannot be read is not.
func checkConfig(path string) int {
	_, err := config.Load(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		fmt.Printf("%s: none, the defaults apply\n", path)
		return 0
	case err != nil:
		for _, l := range strings.Split(err.Error(), "\n") {
			log.Print(l)
		}
		log.Printf("%s: the keys above are ignored; the handler and the uploader use their defaults", path)
		return 1
	}
	fmt.Printf("%s: OK\n", path)
	return 0
}

// procSys is where logDrift reads the kernel's settings ("": /proc/sys;
// tests point it at a fake).
var procSys = ""

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular()
}

func run(args []string) int {
	fs := flag.NewFlagSet("unwound-uploader", flag.ContinueOnError)
	cfgPath := fs.String("config", config.DefaultPath, "config `file`")
	once := fs.Bool("once", false, "drain the queue and exit (cron, systemd timers); exit status 1 if reports remain")
	transport := fs.String("transport", "", "override upload.transport: `http` or serial")
	tries := fs.Int("tries", 3, "with --once: attempts before giving up")
	backoff := fs.Duration("backoff", time.Second, "first wait after a failed attempt; it doubles (with jitter) up to upload.interval, at most 10m")
	showVersion := fs.Bool("version", false, "print the version")
	checkOnly := fs.Bool("check-config", false, "check the config file, print each bad key with its line, and exit: status 1 if any (for a package's postinst, or CI)")
	fs.Usage = usage(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *showVersion {
		fmt.Println("unwound-uploader", version.Version)
		return 0
	}
	if *checkOnly {
		return checkConfig(*cfgPath)
	}
	cfg, err := config.LoadOrDefault(*cfgPath)
	if err != nil {
		log.Print(err)
	}
	logDrift(*cfgPath, cfg)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	daemon := !*once && fs.NArg() == 0
	qopt := queue.FromConfig(cfg.Queue)
	qopt.Check = decode.Entry
	q, err := queue.Open(cfg.Queue.Dir, qopt)
	for err != nil && daemon {
		// At boot the queue's filesystem may not be mounted yet: a daemon
		// waits for it instead of dying and being restarted in a loop.
		log.Printf("%v; waiting for it", err)
		select {
		case <-ctx.Done():
			return 0
		case <-time.After(30 * time.Second):
		}
		q, err = queue.Open(cfg.Queue.Dir, qopt)
	}
	if err != nil {
		log.Print(err)
		return 1
	}
	recoverQueue(q)
	if fs.NArg() > 0 {
		switch fs.Arg(0) {
		case "dump":
			return dump(q, fs.Args()[1:])
		case "list":
			return listQueue(q, os.Stdout)
		case "show":
			return showEntry(q, fs.Args()[1:], os.Stdout)
		case "drop":
			return dropEntries(q, fs.Args()[1:], os.Stdout)
		}
		log.Printf("unknown command %q", fs.Arg(0))
		fs.Usage()
		return 2
	}
	if *transport != "" {
		cfg.Upload.Transport = *transport
	}
	var t uploader.Transport
	switch cfg.Upload.Transport {
	case "serial":
		t = serialup.New(serialup.Config{
			Port: cfg.Serial.Port, Baud: cfg.Serial.Baud, Flow: cfg.Serial.FlowControl,
			Proto: serialproto.Options{Name: cfg.DeviceID(), RTO: rtoFromEnv(), Binary: cfg.Serial.Framing == "binary"},
			Log:   log.Printf, Announce: *once,
		})
	case "http":
		t, err = newHTTP(cfg)
		if err != nil && daemon {
			// Reports stay queued (and can be dumped) until the board is
			// configured; restarting would not change that.
			log.Printf("%v; reports stay queued until the configuration is fixed", err)
			<-ctx.Done()
			return 0
		}
		if err != nil {
			log.Print(err)
			return 1
		}
	default:
		log.Printf("--transport %q: want http or serial", cfg.Upload.Transport)
		return 2
	}
	defer t.Close()
	u := &uploader.Uploader{Queue: q, Transport: t, DeviceID: cfg.DeviceID(), Log: log.Printf}
	interval := cfg.Upload.Interval.D()
	maxWait := 10 * time.Minute
	if interval < maxWait {
		maxWait = interval
	}
	if *backoff <= 0 || *backoff > maxWait {
		log.Printf("--backoff %v: want more than 0 and at most %v", *backoff, maxWait)
		return 2
	}
	b := &uploader.Backoff{Min: *backoff, Max: maxWait}
	if *once {
		st, err := u.Once(ctx, *tries, b, time.Minute)
		log.Printf("%d delivered, %d duplicates, %d quarantined, %d bytes", st.Delivered, st.Duplicates, st.Quarantined, st.Bytes)
		if err != nil {
			log.Print(err)
			return 1
		}
		return 0
	}
	log.Printf("watching %s, transport %s", q.Dir(), cfg.Upload.Transport)
	if err := u.Run(ctx, interval, b); err != nil && !errors.Is(err, context.Canceled) {
		log.Print(err)
		return 1
	}
	return 0
}

// rtoFromEnv lets tests set the serial resend timeout (default: from the
// baud rate; one shorter than a window takes on the line causes resend storms).
func rtoFromEnv() time.Duration {
	d, _ := time.ParseDuration(os.Getenv("UNWOUND_SERIAL_RTO"))
	return d
}

// dump prints every entry as armor. With --remove it then reads the
// host's confirmations (=UNWOUND-ACK lines, as `unwound extract` prints
// them) from stdin and deletes the entries they name, if their sha256
// still matches, until all are confirmed, stdin ends or --wait passes.
func dump(q *queue.Queue, args []string) int {
	fs := flag.NewFlagSet("dump", flag.ContinueOnError)
	remove := fs.Bool("remove", false, "then delete each entry the host confirms on stdin")
	wait := fs.Duration("wait", 10*time.Minute, "with --remove: how long to wait for confirmations")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	es, err := q.List()
	if err != nil {
		log.Print(err)
		return 1
	}
	printed := map[string]string{} // name → sha256
	for _, e := range es {
		data, err := q.Read(e.Name)
		if err != nil {
			log.Print(err)
			continue
		}
		if err := armor.Write(os.Stdout, e.Name, data); err != nil {
			log.Print(err)
			return 1
		}
		printed[e.Name] = fmt.Sprintf("%x", sha256.Sum256(data))
	}
	log.Printf("%d reports printed", len(printed))
	if !*remove || len(printed) == 0 {
		return 0
	}
	log.Printf("waiting up to %v for the host's =UNWOUND-ACK lines on stdin", *wait)
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	timeout := time.After(*wait)
	removed := 0
	for len(printed) > 0 {
		var l string
		var ok bool
		select {
		case l, ok = <-lines:
		case <-timeout:
		}
		if !ok {
			break
		}
		name, sum, ok := armor.ParseAck(l)
		if !ok || printed[name] == "" {
			continue
		}
		if printed[name] != sum {
			log.Printf("%s: the host confirmed other bytes (sha256 %s); kept", name, sum)
			continue
		}
		if err := q.Remove(name); err != nil {
			log.Print(err)
			continue
		}
		delete(printed, name)
		removed++
	}
	log.Printf("%d removed, %d kept (not confirmed)", removed, len(printed))
	return 0
}

// recoverQueue stores again the whole reports left in leftover files,
// removes the temp files a dead handler left and moves entries that fail
// validation to the quarantine, saying so.
func recoverQueue(q *queue.Queue) {
	boot, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	r, err := q.Recover(strings.TrimSpace(string(boot)))
	if err != nil {
		log.Printf("queue recovery: %v", err)
	}
	for _, p := range r.Promoted {
		log.Printf("queue: %s, left by a cut store, held a whole report: stored again as %s", p[0], p[1])
	}
	for _, t := range r.TempsRemoved {
		log.Printf("queue: removed the leftover temp file %s", t)
	}
	for _, c := range r.Quarantined {
		log.Print(c)
	}
}
