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
# The crash matrix (issue 16) adds variants named CC-LD-FLAGS-LINK[-musl],
# built for each name listed in $VARIANTS (space-separated; testkit/fixture
# passes the lab's slice, or the whole matrix with UNWOUND_MATRIX=full):
#   CC     gcc, clang
#   LD     bfd (GNU ld as the toolchain sets it up), sep / nosep (GNU ld with
#          -z separate-code / -z noseparate-code), lld, mold, gold
#   FLAGS  default (-O2 and nothing else: the toolchain's own unwind-table
#          and frame-pointer defaults), tables (-O2 -funwind-tables
#          -fasynchronous-unwind-tables), fp (-O0 -fno-omit-frame-pointer),
#          notables (-O2 -fomit-frame-pointer -fno-asynchronous-unwind-tables
#          -fno-unwind-tables: the program's own code without tables, on
#          every arch; libc keeps its own), marm (-O2 -marm: A32 code, ARM
#          only; the other FLAGS give Thumb-2 there, Debian's default)
#   LINK   dynamic, static
#   -musl  against musl instead of glibc (C only: crashxx is not built):
#          x86_64 with Debian's musl-tools, aarch64 and arm with Debian's
#          musl-dev for that architecture, unpacked by musl.sh under the
#          cache (never installed) and used through a gcc specs file
# A combination the toolchains here cannot build (lld 14 cannot link
# RISC-V objects that need relaxation; Debian has no riscv64 musl) is
# skipped with a message: its directory is not created.
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

# The -fuse-ld=lld|mold of a cross gcc looks for ld.lld / ld.mold in its
# own program path: -B adds this one.
ldbin=$out/.ldbin
mkdir -p "$ldbin"
for l in lld mold; do
	p=$(command -v "ld.$l" || command -v "$l" || true)
	[ -z "$p" ] || ln -sf "$p" "$ldbin/ld.$l"
done

# matrix ARCH CROSS builds the $VARIANTS of the crash matrix for ARCH.
matrix() {
	arch=$1 cross=$2
	case $arch in
	x86_64) triple=x86_64-linux-gnu ;;
	aarch64) triple=aarch64-linux-gnu ;;
	arm) triple=arm-linux-gnueabihf ;;
	riscv64) triple=riscv64-linux-gnu ;;
	esac
	for v in ${VARIANTS:-}; do
		# shellcheck disable=SC2046
		set -- $(echo "$v" | tr - ' ')
		if [ $# -lt 4 ]; then
			echo "build.sh: bad variant $v" >&2
			exit 2
		fi
		vcc=$1 vld=$2 vflags=$3 vlink=$4 vlibc=${5:-glibc}
		case $vflags in
		default) fl="-O2" ;;
		tables) fl="-O2 -funwind-tables -fasynchronous-unwind-tables" ;;
		fp) fl="-O0 -fno-omit-frame-pointer" ;;
		notables) fl="-O2 -fomit-frame-pointer -fno-asynchronous-unwind-tables -fno-unwind-tables" ;;
		marm)
			if [ "$arch" != arm ]; then
				echo "build.sh: -marm is ARM's, skipping $v" >&2
				continue
			fi
			fl="-O2 -marm" ;;
		*) echo "build.sh: bad flags in $v" >&2; exit 2 ;;
		esac
		case $vld in
		bfd) fl="$fl -fuse-ld=bfd" ;;
		sep) fl="$fl -fuse-ld=bfd -Wl,-z,separate-code" ;;
		nosep) fl="$fl -fuse-ld=bfd -Wl,-z,noseparate-code" ;;
		lld | mold | gold) fl="$fl -fuse-ld=$vld" ;;
		ibt)
			if [ "$arch" != x86_64 ]; then
				echo "build.sh: -z ibtplt is x86_64's, skipping $v" >&2
				continue
			fi
			fl="$fl -fuse-ld=bfd -Wl,-z,ibtplt" ;;
		ehbias)
			mode=-pie
			[ "$vlink" = static ] && mode=-static
			lds=$out/$arch/ehbias$mode.lds
			mkdir -p "$out/$arch"
			# The default script between its ===== lines, with the
			# gap before the first unwind table section.
			${cross}ld $mode --verbose | awk '
				/^=====/ { n++; next }
				n != 1 { next }
				!done && /^  \.(ARM\.exidx|eh_frame_hdr) / { print "  . = . + 0x200000;"; done = 1 }
				{ print }' >"$lds"
			fl="$fl -fuse-ld=bfd -Wl,-T,$lds" ;;
		*) echo "build.sh: bad linker in $v" >&2; exit 2 ;;
		esac
		[ "$vlink" = static ] && fl="$fl -static"
		progs="crash crashxx"
		case $vcc-$vlibc in
		gcc-glibc) cc="${cross}gcc -B$ldbin" cxx="${cross}g++ -B$ldbin" ;;
		clang-glibc) cc="clang --target=$triple" cxx="clang++ --target=$triple" ;;
		gcc-musl)
			progs=crash cxx=
			if [ "$arch" = x86_64 ]; then
				if ! command -v musl-gcc >/dev/null 2>&1; then
					echo "build.sh: musl-gcc not installed (musl-tools), skipping $v" >&2
					continue
				fi
				cc="musl-gcc -B$ldbin"
			elif mroot=$("$here/musl.sh" "$arch"); then
				cc="${cross}gcc -B$ldbin -specs $mroot/musl-gcc.specs"
				# libgcc's outline atomics need glibc's __getauxval.
				[ "$arch" = aarch64 ] && cc="$cc -mno-outline-atomics"
			else
				echo "build.sh: no musl for $arch (musl.sh failed), skipping $v" >&2
				continue
			fi ;;
		*) echo "build.sh: skipping $v (no $vcc for $vlibc)" >&2; continue ;;
		esac
		if [ "$arch-$vld" = riscv64-lld ]; then
			echo "build.sh: ld.lld cannot link RISC-V objects that need relaxation, skipping $v" >&2
			continue
		fi
		d=$out/$arch/$v
		for prog in $progs; do
			case $prog in
			crash) c=$cc src=$here/crash.c ;;
			crashxx) c=$cxx src=$here/crashxx.cc ;;
			esac
			if [ -f "$d/stripped/$prog" ] && [ "$d/stripped/$prog" -nt "$src" ] && [ "$d/stripped/$prog" -nt "$0" ]; then
				continue
			fi
			mkdir -p "$d/stripped"
			# shellcheck disable=SC2086
			if ! $c -g $fl -pthread -Wl,--build-id -o "$d/$prog.tmp" "$src" 2>"$d/$prog.log"; then
				echo "build.sh: $arch $v $prog does not build here, skipping:" >&2
				cat "$d/$prog.log" >&2
				rm -rf "$d"
				break
			fi
			mv "$d/$prog.tmp" "$d/$prog"
			rm -f "$d/$prog.log"
			${cross}strip --remove-section=.comment --remove-section=.note \
				-o "$d/stripped/$prog" "$d/$prog"
		done
	done
}

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
	matrix "$arch" "$cross"
	echo "build.sh: $arch done" >&2
done
