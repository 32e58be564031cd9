#!/bin/sh
# Regenerates the MiniDebugInfo fixtures of minidebuginfo_test.go:
#   mdi-$arch         stripped as Yocto and Buildroot strip
#   mdi-$arch.yocto   + symbols-only MiniDebugInfo, made as poky makes it
#   mdi-$arch.frame   + MiniDebugInfo that also carries .debug_frame
# The programs are tiny (no libc) so the fixtures stay a few KB.
set -eu
cd "$(dirname "$0")"
for cross in arm-linux-gnueabihf riscv64-linux-gnu; do
	arch=${cross%%-*}
	t=$(mktemp -d)
	"$cross-gcc" -g -O1 -nostdlib -static -o "$t/full" mdi.c
	"$cross-objcopy" --only-keep-debug "$t/full" "$t/debug"
	"$cross-strip" --remove-section=.comment --remove-section=.note -o "mdi-$arch" "$t/full"
	# poky's inject_minidebuginfo: FUNC symbols not in .dynsym, all
	# section contents but allocated ones dropped, xz at its default.
	"$cross-nm" -D --format=posix --defined-only "mdi-$arch" 2>/dev/null | awk '{print $1}' | sort -u >"$t/dyn"
	"$cross-nm" --format=sysv --defined-only "$t/debug" | awk -F'|' '$4 ~ /FUNC/ {gsub(/ /, "", $1); print $1}' | sort -u | comm -23 - "$t/dyn" >"$t/keep"
	"$cross-objcopy" -S --remove-section=.comment --keep-symbols="$t/keep" "$t/debug" "$t/mini"
	"$cross-objcopy" -S --remove-section=.comment --keep-section=.debug_frame --keep-symbols="$t/keep" "$t/debug" "$t/mini-frame"
	xz -k "$t/mini" "$t/mini-frame"
	"$cross-objcopy" --add-section .gnu_debugdata="$t/mini.xz" "mdi-$arch" "mdi-$arch.yocto"
	"$cross-objcopy" --add-section .gnu_debugdata="$t/mini-frame.xz" "mdi-$arch" "mdi-$arch.frame"
	rm -r "$t"
done
