#!/bin/sh
# Measures what MiniDebugInfo costs on flash (docs/build-flags.md): for real
# C programs cross-built from Debian's sources and for the crash fixtures,
# the bytes each way adds to the stripped program, as a share of it:
#   yocto   symbols-only MiniDebugInfo, made as poky makes it
#           (unwound minidebuginfo --symbols-only)
#   ours    unwound minidebuginfo
#   tables  rebuilt with the architecture's unwind-table flag, stripped,
#           no MiniDebugInfo
# All from the same run; prints a Markdown table.
#
#   scripts/mdi-flash-cost.sh [ARCH...]     ARCH: arm riscv64 (default both)
#
# Sources: BusyBox (Debian's, with its "static" flavour configuration, as
# qemu/busybox/get.sh builds it), lz4 (library and CLI) and SQLite's shell
# (the amalgamation, made with the host's tclsh), fetched with `apt-get
# source` through qemu/busybox/get.sh's private apt state, built with -g
# -O2 as Yocto and Buildroot build (debug information is what MiniDebugInfo
# is made from), stripped as Yocto strips. Work and sources under
# ${UNWOUND_CACHE:-~/.cache/unwound}/mdi-cost. Not part of make test.
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
cache=${UNWOUND_CACHE:-$HOME/.cache/unwound}
work=$cache/mdi-cost
[ $# -gt 0 ] || set -- arm riscv64
jobs=${UNWOUND_JOBS:-2}

mkdir -p "$work/src" "$work/bin"
log() { echo "mdi-flash-cost: $*" >&2; }

# The tool, built from this checkout.
(cd "$here" && go build -o "$work/bin/unwound" ./cmd/unwound)
unwound=$work/bin/unwound

# Sources, through get.sh's private apt state (its lists carry deb-src).
apt=$cache/busybox/apt
if [ ! -s "$apt/updated" ]; then
	"$here/qemu/busybox/get.sh" arm >/dev/null
fi
aptget() {
	apt-get -q -o Dir::State::Lists="$apt/lists" -o Dir::Cache="$apt/cache" \
		-o Dir::Etc::SourceList="$apt/etc/sources.list" -o Dir::Etc::SourceParts=/nonexistent \
		-o Dir::State::status=/dev/null -o APT::Sandbox::User=root "$@"
}
for p in busybox lz4 sqlite3; do
	if ! ls -d "$work/src/$p"-*/ >/dev/null 2>&1; then
		log "apt-get source $p"
		(cd "$work/src" && aptget source "$p" >&2)
	fi
done
for d in "$work/src"/busybox-*/; do bbsrc=$d; done
for d in "$work/src"/lz4-*/; do lz4src=$d; done
for d in "$work/src"/sqlite3-*/; do sqsrc=$d; done

# SQLite's amalgamation is made once, on the host.
if [ ! -s "$work/sqlite/sqlite3.c" ]; then
	log "sqlite3 amalgamation"
	rm -rf "$work/sqlite" && mkdir -p "$work/sqlite"
	(cd "$work/sqlite" && "$sqsrc/configure" >/dev/null && make -s sqlite3.c shell.c >&2)
fi

# build ARCH FLAVOUR CFLAGS: the unstripped programs into $work/ARCH/FLAVOUR
# (each kept once built).
build() {
	arch=$1 flavour=$2 cflags=$3
	out=$work/$arch/$flavour
	mkdir -p "$out"
	if [ ! -s "$out/busybox" ]; then
		log "$arch $flavour: busybox"
		b=$out/busybox-build
		rm -rf "$b" && mkdir -p "$b"
		cat "$bbsrc/debian/config/os/linux" "$bbsrc/debian/config/pkg/static" >"$b/.config"
		yes "" | make -s -C "$b" -f "$bbsrc/Makefile" KBUILD_SRC="$bbsrc" CROSS_COMPILE="$cross" silentoldconfig >/dev/null 2>&1
		make -s -C "$b" -j"$jobs" CROSS_COMPILE="$cross" SKIP_STRIP=y EXTRA_CFLAGS="$cflags" busybox >/dev/null 2>&1
		cp "$b/busybox_unstripped" "$out/busybox.tmp" && mv "$out/busybox.tmp" "$out/busybox"
		rm -rf "$b"
	fi
	if [ ! -s "$out/lz4" ]; then
		# The library and the CLI from lz4's own sources (Debian's
		# patches link the CLI against the system liblz4).
		log "$arch $flavour: lz4"
		# shellcheck disable=SC2086
		"${cross}gcc" $cflags -I"$lz4src/lib" -o "$out/lz4.tmp" "$lz4src"/lib/lz4.c "$lz4src"/lib/lz4hc.c \
			"$lz4src"/lib/lz4frame.c "$lz4src"/lib/xxhash.c "$lz4src"/programs/*.c -lpthread
		mv "$out/lz4.tmp" "$out/lz4"
	fi
	if [ ! -s "$out/sqlite3" ]; then
		log "$arch $flavour: sqlite3"
		# shellcheck disable=SC2086
		"${cross}gcc" $cflags -o "$out/sqlite3.tmp" "$work/sqlite/shell.c" "$work/sqlite/sqlite3.c" -lpthread -ldl -lm
		mv "$out/sqlite3.tmp" "$out/sqlite3"
	fi
}

# ways FILE: the stripped size and the three ways' sizes.
size() { wc -c <"$1" | tr -d ' '; }
pct() { awk -v a="$1" -v b="$2" 'BEGIN { printf "+%d (%.1f%%)", a - b, 100 * (a - b) / b }'; }

printf '| program | arch | stripped | Yocto MiniDebugInfo | ours | unwind tables |\n'
printf '|---|---|---:|---:|---:|---:|\n'
for arch in "$@"; do
	case $arch in
	arm) cross=arm-linux-gnueabihf- tables=-funwind-tables fx=arm ;;
	riscv64) cross=riscv64-linux-gnu- tables=-fasynchronous-unwind-tables fx=riscv64 ;;
	*) echo "mdi-flash-cost.sh: unknown arch $arch" >&2; exit 2 ;;
	esac
	export OBJCOPY=${cross}objcopy
	build "$arch" default "-g -O2"
	build "$arch" tables "-g -O2 $tables"
	# The crash fixtures (testdata/crash/build.sh): default flags
	# (-notables) against the tables builds.
	"$here/testdata/crash/build.sh" "$work/fixtures" "$fx" 2>/dev/null
	fxdir=$work/fixtures/$fx
	progs="busybox lz4 sqlite3"
	t=$work/$arch/ways
	rm -rf "$t" && mkdir -p "$t"
	row() { # NAME UNSTRIPPED UNSTRIPPED-WITH-TABLES
		name=$1
		"${cross}strip" --remove-section=.comment --remove-section=.note -o "$t/s" "$2"
		"${cross}strip" --remove-section=.comment --remove-section=.note -o "$t/tab" "$3"
		"$unwound" minidebuginfo --symbols-only --unstripped "$2" --stripped "$t/s" -o "$t/yocto"
		"$unwound" minidebuginfo --unstripped "$2" --stripped "$t/s" -o "$t/ours"
		s=$(size "$t/s")
		printf '| %s | %s | %d | %s | %s | %s |\n' "$name" "$arch" "$s" \
			"$(pct "$(size "$t/yocto")" "$s")" "$(pct "$(size "$t/ours")" "$s")" "$(pct "$(size "$t/tab")" "$s")"
	}
	for p in $progs; do
		row "$p" "$work/$arch/default/$p" "$work/$arch/tables/$p"
	done
	if [ -n "$fxdir" ] && [ -d "$fxdir" ]; then
		for v in O2-dynamic O2-static; do
			for p in crash crashxx; do
				row "fixture $p $v" "$fxdir/$v-notables/$p" "$fxdir/$v/$p"
			done
		done
	fi
done
