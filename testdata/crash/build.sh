#!/bin/sh
# Cross-compiles the crash programs for unwound's tests.
#
#   build.sh OUTDIR [ARCH...]      ARCH: x86_64 aarch64 arm riscv64 (default: all available)
#
# Layout: OUTDIR/ARCH/VARIANT/{crash,crashxx} unstripped (what gdb reads) and
# OUTDIR/ARCH/VARIANT/stripped/{crash,crashxx} (what the handler reads, as on
# a board), VARIANT in O0-static O0-dynamic O2-static O2-dynamic. For arm,
# whose compiler makes Thumb-2 code by default (Debian armhf), also
# O0-dynamic-marm and O2-dynamic-marm: the programs in ARM state, calling
# the Thumb libc through interworking.
#
# Stripping follows Yocto's runstrip (meta/lib/oe/package.py): executables
# get `strip --remove-section=.comment --remove-section=.note`, which drops
# .symtab and .debug_* but keeps .eh_frame, .eh_frame_hdr, .ARM.exidx and
# the .note.gnu.build-id section. Buildroot's default strip is the same in
# effect for unwinding (it also keeps the unwind tables).
set -eu
out=${1:?usage: build.sh OUTDIR [ARCH...]}
shift
here=$(cd "$(dirname "$0")" && pwd)
[ $# -gt 0 ] || set -- x86_64 aarch64 arm riscv64

for arch in "$@"; do
	case $arch in
	x86_64) cross= ; extra= ;;
	aarch64) cross=aarch64-linux-gnu- ; extra= ;;
	# Stock GCC for ARM and RISC-V emits no asynchronous unwind tables for C:
	# boards that want traces build with these (docs/build-flags.md).
	arm) cross=arm-linux-gnueabihf- ; extra=-funwind-tables ;;
	riscv64) cross=riscv64-linux-gnu- ; extra="-funwind-tables -fasynchronous-unwind-tables" ;;
	*) echo "build.sh: unknown arch $arch" >&2; exit 2 ;;
	esac
	if ! command -v "${cross}gcc" >/dev/null 2>&1 || ! command -v "${cross}g++" >/dev/null 2>&1; then
		echo "build.sh: ${cross}gcc/g++ not installed, skipping $arch" >&2
		continue
	fi
	for opt in O0 O2; do
		case $opt in
		O0) oflags="-O0 -fno-omit-frame-pointer" ;;
		O2) oflags="-O2 -fomit-frame-pointer" ;;
		esac
		variants="static dynamic"
		[ "$arch" = arm ] && variants="$variants dynamic-marm"
		for link in $variants; do
			lflags=
			[ $link = static ] && lflags=-static
			[ $link = dynamic-marm ] && lflags=-marm
			d=$out/$arch/$opt-$link
			mkdir -p "$d/stripped"
			for prog in crash crashxx; do
				case $prog in
				crash) cc=${cross}gcc src=$here/crash.c ;;
				crashxx) cc=${cross}g++ src=$here/crashxx.cc ;;
				esac
				if [ -f "$d/stripped/$prog" ] && [ "$d/stripped/$prog" -nt "$src" ] && [ "$d/stripped/$prog" -nt "$0" ]; then
					continue
				fi
				# shellcheck disable=SC2086
				$cc -g $oflags $extra $lflags -pthread -Wl,--build-id -o "$d/$prog" "$src"
				${cross}strip --remove-section=.comment --remove-section=.note \
					-o "$d/stripped/$prog" "$d/$prog"
			done
		done
	done
	echo "build.sh: $arch done" >&2
done
