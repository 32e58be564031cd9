#!/bin/sh
# Cross-compiles the crash programs for unwound's tests.
#
#   build.sh OUTDIR [ARCH...]      ARCH: x86_64 aarch64 arm riscv64 (default: all available)
#
# Layout: OUTDIR/ARCH/VARIANT/{crash,crashxx} unstripped (what gdb reads) and
# OUTDIR/ARCH/VARIANT/stripped/{crash,crashxx} (what the handler reads, as on
# a board), VARIANT in O0-static O0-dynamic O2-static O2-dynamic. ARM and
# RISC-V add the same four with a suffix: -notables (built with
# -fno-unwind-tables -fno-asynchronous-unwind-tables, GCC's default for C
# there) and, on ARM, -marm (A32 code; the default variants are Thumb-2, as
# Debian's armhf compiler emits): -marm, -notables, -marm-notables.
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
	modes=default tables=tables
	case $arch in
	x86_64) cross= ; extra= ;;
	aarch64) cross=aarch64-linux-gnu- ; extra= ;;
	# Stock GCC for ARM and RISC-V emits no asynchronous unwind tables for C:
	# boards that want traces build with these (docs/build-flags.md).
	arm) cross=arm-linux-gnueabihf- ; extra=-funwind-tables modes="default marm" tables="tables notables" ;;
	riscv64) cross=riscv64-linux-gnu- ; extra="-funwind-tables -fasynchronous-unwind-tables" tables="tables notables" ;;
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
		for link in static dynamic; do
			lflags=
			[ $link = static ] && lflags=-static
			for mode in $modes; do
				for tab in $tables; do
					v=$opt-$link mflags= tflags=$extra
					[ $mode = default ] || { v=$v-$mode mflags=-$mode; }
					[ $tab = tables ] || { v=$v-$tab tflags="-fno-unwind-tables -fno-asynchronous-unwind-tables"; }
					d=$out/$arch/$v
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
						$cc -g $oflags $mflags $tflags $lflags -pthread -Wl,--build-id -o "$d/$prog" "$src"
						${cross}strip --remove-section=.comment --remove-section=.note \
							-o "$d/stripped/$prog" "$d/$prog"
					done
				done
			done
		done
	done
	echo "build.sh: $arch done" >&2
done
