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
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
GO122     ?= go1.22.12

export CGO_ENABLED = 0
LDFLAGS   := -s -w -X github.com/unwound-dev/unwound/handler.Version=$(VERSION)
GOBUILD   := $(GO) build -trimpath -ldflags '$(LDFLAGS)'
BOARD_CMDS := $(notdir $(wildcard cmd/unwound-handler cmd/unwound-uploader))
HOST_CMDS  := unwound

# GOARCH[/GOARM] for every board target.
CROSS := arm/5 arm/6 arm/7 arm64 riscv64 amd64

.PHONY: all build cross unit test test-go122 bench size install deps demo test-host vet clean

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

vet:
	$(GO) vet ./...
	@out=$$(gofmt -l $$(git ls-files '*.go')); [ -z "$$out" ] || { echo "gofmt: $$out"; exit 1; }

unit:
	$(GO) test -short ./...

# Every test: unit tests, fuzz seeds, gdb comparisons, QEMU guests for every
# architecture; then the build and tests again with the oldest Go we support.
test: deps vet
	$(GO) test -timeout 80m ./...
	$(MAKE) test-go122

test-go122:
	@grep -qx 'go 1.22' go.mod || { echo "go.mod must say 'go 1.22'"; exit 1; }
	GOTOOLCHAIN=$(GO122) $(GO) build ./...
	GOTOOLCHAIN=$(GO122) $(GO) test -short ./...

bench: deps
	$(GO) test -run '^$$' -bench . -benchmem ./...

# Opt-in, root: installs the built handler as the host's core_pattern,
# crashes the x86_64 fixtures and compares with gdb; restores the pattern on
# every exit path.
test-host: deps
	UNWOUND_TEST_HOST=1 $(GO) test -count=1 -run TestHost -v ./handler/...

demo: deps
	$(GO) run ./qemu/cmd/demo

install:
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(SYSCONFDIR)/unwound
	$(GOBUILD) -o $(DESTDIR)$(PREFIX)/bin/ $(addprefix ./cmd/,$(BOARD_CMDS))
	install -m 0644 configs/unwound.toml $(DESTDIR)$(SYSCONFDIR)/unwound/unwound.toml
	install -d -m 0700 $(DESTDIR)$(QUEUE_DIR)

clean:
	rm -rf dist
