# unwound: build, test and package.
#
#   make demo    boot an AArch64 QEMU board, crash a program, print the trace
#   make test    every test (what CI runs)
#   make unit    fast inner loop: unit tests and fuzz seeds, no QEMU
#   make bench   benchmarks, printed figures
#   make cross   static board binaries for every architecture into dist/
#   make size    sizes of the board binaries
#   make install DESTDIR= PREFIX=   what the Yocto and Buildroot packages run

GO        ?= go
PREFIX    ?= /usr
SYSCONFDIR?= /etc
DESTDIR   ?=
QUEUE_DIR ?= /var/lib/unwound/queue
# A release tarball (make dist) carries its version in VERSION: never ask git
# there, which would describe whatever repository the tarball sits in.
VERSION   ?= $(shell cat VERSION 2>/dev/null || git describe --tags --always --dirty 2>/dev/null || echo dev)
GO122     ?= go1.22.12
# 32-bit ARM builds default to ARMv7: GOARM=5/6 binaries call the kernel's
# user helpers and die on kernels without them (handler/kuser).
GOARM     ?= 7
export GOARM

export CGO_ENABLED = 0
LDFLAGS   := -s -w -B gobuildid -X github.com/unwound-dev/unwound/internal/version.Version=$(VERSION)
GOBUILD   := $(GO) build -trimpath -ldflags '$(LDFLAGS)'
BOARD_CMDS := $(notdir $(wildcard cmd/unwound-handler cmd/unwound-uploader))
HOST_CMDS  := unwound

# GOARCH[/GOARM] for every board target.
CROSS := arm/5 arm/6 arm/7 arm64 riscv64 amd64

.PHONY: all build cross unit test test-go122 bench bench-host size install dist deps demo test-host vet clean

all: build

deps:
	@scripts/deps.sh

build:
	$(GOBUILD) -o dist/host/ $(addprefix ./cmd/,$(BOARD_CMDS) $(HOST_CMDS))

cross:
	@set -e; for t in $(CROSS); do \
		arch=$${t%%/*}; arm=$${t#*/}; [ "$$arm" = "$$t" ] && arm=; \
		out=dist/linux-$$arch$${arm:+v$$arm}; \
		echo "cross $$out"; \
		GOOS=linux GOARCH=$$arch GOARM=$$arm $(GOBUILD) -o $$out/ $(addprefix ./cmd/,$(BOARD_CMDS)); \
	done

size: cross
	@for f in dist/linux-*/*; do printf '%9d  %s\n' $$(stat -c %s $$f) $$f; done

# staticcheck, installed once into the cache (CI keeps ~/.cache/unwound).
STATICCHECK_VERSION ?= v0.8.2
STATICCHECK := $(HOME)/.cache/unwound/bin/staticcheck-$(STATICCHECK_VERSION)

$(STATICCHECK):
	mkdir -p $(HOME)/.cache/unwound/bin/tmp
	GOBIN=$(HOME)/.cache/unwound/bin/tmp $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)
	mv $(HOME)/.cache/unwound/bin/tmp/staticcheck $@

vet: $(STATICCHECK)
	$(GO) vet ./...
	$(STATICCHECK) ./...
	@out=$$(gofmt -l $$(git ls-files '*.go')); [ -z "$$out" ] || { echo "gofmt: $$out"; exit 1; }

unit:
	$(GO) test -short ./...

# Every test: unit tests, fuzz seeds, gdb comparisons, QEMU guests for every
# architecture; then the build and tests again with the oldest Go we support.
test: deps vet cross
	$(GO) test -timeout 80m ./...
	cd host/webtest && $(GO) vet ./... && $(GO) test ./...
	$(MAKE) test-go122

test-go122:
	@grep -qx 'go 1.22' go.mod || { echo "go.mod must say 'go 1.22'"; exit 1; }
	GOTOOLCHAIN=$(GO122) $(GO) build ./...
	GOTOOLCHAIN=$(GO122) $(GO) test -short ./...

bench: deps
	$(GO) test -run '^$$' -bench . -benchmem ./...

# Opt-in, root: crash-to-reap latency of a 1 GiB, 32-thread process with
# unwound (live and stream), |/bin/true and a kernel core file as helpers,
# and (BenchmarkSocketCrashToReap, 6.16+) through the coredump socket
# server against |/bin/true and pipe live mode, with the server's RSS and
# its socket activation; swaps the host's core_pattern and restores it on
# every exit path.
bench-host: deps
	UNWOUND_TEST_HOST=1 $(GO) test -run '^$$' -bench CrashToReap -benchtime 3x ./handler

# Opt-in, root: installs the built handler as the host's core_pattern,
# crashes the x86_64 fixtures and compares with gdb, and on a 6.16+ kernel
# crashes a program under a --pidfd=%F line (TestHostPidfd), and on a
# 6.16+ kernel serves crashes through the coredump socket (@@, or @ on
# 6.16: TestHostSocket*, and handler/coredumpsock's TestHost*); restores
# the pattern on every exit path.
test-host: deps
	UNWOUND_TEST_HOST=1 $(GO) test -count=1 -run TestHost -v ./handler/...

demo: deps
	$(GO) run ./qemu/cmd/demo

# make install DESTDIR= PREFIX=/usr SYSCONFDIR=/etc QUEUE_DIR=... INIT=systemd|sysvinit|none CORE_PATTERN_PIDFD=off|on CORE_PATTERN_SOCKET=off|@@|@
# Board binaries (built here, static, for GOOS/GOARCH, or copied from
# PREBUILT=dir when a build system compiled them), the configuration, the
# queue directory (0700), and what points kernel.core_pattern at the handler
# at boot: for systemd a sysctl.d file sorting after systemd's
# 50-coredump.conf plus the uploader units; for sysvinit an init script plus
# the same file in /etc/sysctl.d (Buildroot's S02sysctl applies it). The
# core_pattern line comes from handler.CorePattern, the code behind
# `unwound-handler --core-pattern`, run on the build host.
INIT            ?= none
INITSCRIPT      ?= unwound
CORE_PIPE_LIMIT ?= 4
# on: the core_pattern line asks for the crashed process's pidfd (%F), for
# boards whose kernel is 6.16 or later (docs/kernel-modes.md); a kernel
# before 6.16 passes an empty --pidfd= and the handler runs as without.
CORE_PATTERN_PIDFD ?= off
# @@ (kernel 6.17+) or @ (6.16): core_pattern points at the coredump socket
# server on COREDUMP_SOCKET instead of the pipe (docs/kernel-modes.md); with
# INIT=systemd unwound-coredump.socket starts it, with INIT=sysvinit the init
# script. off: the pipe. The units are installed with INIT=systemd either
# way (disabled); build systems enable them with the socket.
CORE_PATTERN_SOCKET ?= off
COREDUMP_SOCKET ?= /run/unwound/coredump.sock
PREBUILT        ?=
BINDIR          := $(PREFIX)/bin
CONFIG          := $(SYSCONFDIR)/unwound/unwound.toml
SYSTEMD_UNITDIR ?= $(PREFIX)/lib/systemd/system
SYSCTLDIR       ?= $(if $(filter systemd,$(INIT)),$(PREFIX)/lib/sysctl.d,$(SYSCONFDIR)/sysctl.d)
INITDIR         ?= $(SYSCONFDIR)/init.d
# The core_pattern generator is built and run on the build host, with a go
# that builds for it: HOST_GO, run with the target variables cleared. A
# cross-compiling wrapper that exports GOARCH itself (oe-core's <target>-go,
# which a Yocto recipe gets as GO) cannot be HOST_GO; the recipe passes its
# native go. Scratch files go to INSTALL_WORK (build systems point it at
# their build directory, so nothing is written into the source tree).
HOST_GO         ?= $(GO)
HOST_GO_ENV      = GOOS= GOARCH= GOARM= GO386= GOMIPS= GOAMD64=
INSTALL_WORK    ?= build/install
SUBST            = sed -e 's|@BINDIR@|$(BINDIR)|g' -e 's|@CONFIG@|$(CONFIG)|g' \
		   -e 's|@QUEUE_DIR@|$(QUEUE_DIR)|g' -e 's|@CORE_PIPE_LIMIT@|$(CORE_PIPE_LIMIT)|g' \
		   -e 's|@SOCKET@|$(COREDUMP_SOCKET)|g' -e 's|@CORE_PATTERN_SOCKET@|$(CORE_PATTERN_SOCKET)|g'

install:
	@case "$(INIT)" in systemd|sysvinit|none) ;; \
	*) echo "make install: INIT=$(INIT): use INIT=systemd, INIT=sysvinit or INIT=none" >&2; exit 2;; esac
	@for p in "$(PREFIX)" "$(SYSCONFDIR)" "$(QUEUE_DIR)"; do \
		case "$$p" in /*) ;; *) echo "make install: '$$p' must be an absolute path" >&2; exit 2;; esac; \
		case "$$p" in *[\ \|\#\"%]*) echo "make install: '$$p' must contain no space, |, #, \" or %" >&2; exit 2;; esac; \
	done
	@mkdir -p $(INSTALL_WORK)
	@set -- $$($(HOST_GO_ENV) $(HOST_GO) env GOOS GOARCH GOHOSTOS GOHOSTARCH) && [ $$# = 4 ] || { \
		echo "make install: HOST_GO=$(HOST_GO): 'go env' failed (see above); HOST_GO must be a go for the build host" >&2; exit 1; }; \
	[ "$$1/$$2" = "$$3/$$4" ] || { \
		echo "make install: HOST_GO=$(HOST_GO) builds for $$1/$$2, not for this build host ($$3/$$4), so the core_pattern generator could not run here." >&2; \
		echo "  A cross-compiling wrapper that sets GOARCH itself (such as oe-core's <target>-go) cannot be HOST_GO: set HOST_GO to the build host's go (in a Yocto recipe, HOST_GO=\$${STAGING_BINDIR_NATIVE}/go)." >&2; exit 1; }
	$(HOST_GO_ENV) $(HOST_GO) build -o $(INSTALL_WORK)/corepattern ./packaging/corepattern
	@rc=0; $(INSTALL_WORK)/corepattern -exe $(BINDIR)/unwound-handler -config $(CONFIG) -pidfd $(CORE_PATTERN_PIDFD) -socket $(CORE_PATTERN_SOCKET) -socket-path $(COREDUMP_SOCKET) > $(INSTALL_WORK)/core_pattern || rc=$$?; \
	case $$rc in \
	0) ;; \
	3) echo "make install: no valid core_pattern for $(BINDIR)/unwound-handler with $(CONFIG) (see above): choose a shorter PREFIX or SYSCONFDIR" >&2; exit 1;; \
	*) echo "make install: $(INSTALL_WORK)/corepattern, built by HOST_GO=$(HOST_GO), did not run on this build host (exit $$rc, see above): HOST_GO must build for the build host" >&2; exit 1;; \
	esac
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(SYSCONFDIR)/unwound
ifeq ($(PREBUILT),)
	$(GOBUILD) -o $(DESTDIR)$(BINDIR)/ $(addprefix ./cmd/,$(BOARD_CMDS))
else
	install -m 0755 $(addprefix $(PREBUILT)/,$(BOARD_CMDS)) $(DESTDIR)$(BINDIR)/
endif
	sed 's|^dir = "/var/lib/unwound/queue"$$|dir = "$(QUEUE_DIR)"|' configs/unwound.toml > $(INSTALL_WORK)/unwound.toml
	@grep -qx 'dir = "$(QUEUE_DIR)"' $(INSTALL_WORK)/unwound.toml || { echo "make install: configs/unwound.toml has no [queue] dir line to set" >&2; exit 1; }
	install -m 0644 $(INSTALL_WORK)/unwound.toml $(DESTDIR)$(CONFIG)
	install -d -m 0700 $(DESTDIR)$(QUEUE_DIR)
ifneq ($(INIT),none)
	{ echo '# unwound: crash reports from unwound-handler (make install INIT=$(INIT)).'; \
	  echo '# Sorts after systemd'"'"'s 50-coredump.conf, so this core_pattern wins.'; \
	  echo '# The line is what `$(BINDIR)/unwound-handler --config $(CONFIG) --pidfd $(CORE_PATTERN_PIDFD) --socket $(CORE_PATTERN_SOCKET) --core-pattern` prints.'; \
	  echo "kernel.core_pattern = $$(cat $(INSTALL_WORK)/core_pattern)"; \
	  echo '# The kernel waits for the handler (and keeps /proc/<pid> readable) for up to'; \
	  echo '# this many dumps at once, and silently skips dumps beyond it. 0: no waiting.'; \
	  echo 'kernel.core_pipe_limit = $(CORE_PIPE_LIMIT)'; \
	  echo '# 2: also dump processes that changed credentials (daemons dropping root,'; \
	  echo '# setuid programs); the handler runs as root and keeps no memory.'; \
	  echo 'fs.suid_dumpable = 2'; } > $(INSTALL_WORK)/60-unwound.conf
	install -d $(DESTDIR)$(SYSCTLDIR)
	install -m 0644 $(INSTALL_WORK)/60-unwound.conf $(DESTDIR)$(SYSCTLDIR)/60-unwound.conf
endif
ifeq ($(INIT),systemd)
	install -d $(DESTDIR)$(SYSTEMD_UNITDIR)
	$(SUBST) packaging/systemd/unwound-coredump.socket.in > $(INSTALL_WORK)/unwound-coredump.socket
	$(SUBST) packaging/systemd/unwound-coredump.service.in > $(INSTALL_WORK)/unwound-coredump.service
	install -m 0644 $(INSTALL_WORK)/unwound-coredump.socket $(INSTALL_WORK)/unwound-coredump.service $(DESTDIR)$(SYSTEMD_UNITDIR)/
endif
ifeq ($(INIT)$(filter unwound-uploader,$(BOARD_CMDS)),systemdunwound-uploader)
	install -d $(DESTDIR)$(SYSTEMD_UNITDIR)
	$(SUBST) packaging/systemd/unwound-uploader.service.in > $(INSTALL_WORK)/unwound-uploader.service
	$(SUBST) packaging/systemd/unwound-upload-once.service.in > $(INSTALL_WORK)/unwound-upload-once.service
	install -m 0644 $(INSTALL_WORK)/unwound-uploader.service $(INSTALL_WORK)/unwound-upload-once.service \
		packaging/systemd/unwound-upload-once.timer $(DESTDIR)$(SYSTEMD_UNITDIR)/
endif
ifeq ($(INIT),sysvinit)
ifneq ($(INITSCRIPT),)
	install -d $(DESTDIR)$(INITDIR)
	$(SUBST) packaging/sysvinit/unwound.in > $(INSTALL_WORK)/unwound.init
	install -m 0755 $(INSTALL_WORK)/unwound.init $(DESTDIR)$(INITDIR)/$(INITSCRIPT)
endif
endif

# make dist [VERSION=x.y] [DISTDIR=dist]: $(DISTDIR)/unwound-$(VERSION).tar.gz, the source tree
# (tracked files as they are in the work tree) with vendor/, so it builds with
# -mod=vendor and no network (what the Yocto and Buildroot packages use).
# The fleet collector is left out (scripts/dist-prune.sh): its SQLite would
# be 95% of the tarball, and the build systems build the board binaries and
# the build-host tools only.
# Reproducible: sorted, owner 0, mtime of the last commit, gzip -n.
DIST_NAME := unwound-$(VERSION)
DISTDIR   ?= dist

dist:
	@git rev-parse --git-dir >/dev/null 2>&1 || { echo "make dist: needs a git work tree" >&2; exit 1; }
	rm -rf build/dist/$(DIST_NAME)
	mkdir -p build/dist $(DISTDIR)
	tree=$$(git stash create); git archive --format=tar --prefix=$(DIST_NAME)/ $${tree:-HEAD} | tar -x -C build/dist
	echo '$(VERSION)' > build/dist/$(DIST_NAME)/VERSION
	scripts/dist-prune.sh build/dist/$(DIST_NAME)
	cd build/dist/$(DIST_NAME) && $(GO) mod vendor
	tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@$$(git log -1 --format=%ct) \
		-C build/dist -cf - $(DIST_NAME) | gzip -n -9 > $(DISTDIR)/$(DIST_NAME).tar.gz
	rm -rf build/dist/$(DIST_NAME)
	@echo "$(DISTDIR)/$(DIST_NAME).tar.gz"

clean:
	rm -rf dist
