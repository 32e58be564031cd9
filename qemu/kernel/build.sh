#!/bin/sh
# Builds a minimal kernel for the core lab from Debian's linux-source-6.1:
# `make tinyconfig`, then fragments/common.fragment + fragments/<arch>.fragment
# (+ any extra fragment files given) merged with merge_config.sh, then a check
# that every fragment option survived (merge_config only warns).
#
#   qemu/kernel/build.sh ARCH [EXTRA.fragment...]    ARCH: aarch64 arm riscv64 x86_64
#
# UNWOUND_KERNEL=7 builds from the newest linux-source-7.x of Debian's
# unstable suite instead, fetched by source.sh into the cache (never
# installed on the host): the same fragments, with the option names
# fragments/7.renames lists changed, plus fragments/7.fragment. Unset (or
# 6.1) is the host's linux-source-6.1, with the cache keys as before.
#
# Prints the path of the kernel image on stdout (logs go to stderr and to
# build.log beside the image). Output is cached in
#   ${UNWOUND_CACHE:-$HOME/.cache/unwound}/kernels/<arch>-<key>/{Image,zImage,bzImage}
# (<arch>-k7-<key> for UNWOUND_KERNEL=7) where <key> hashes the source
# package version, the fragments and the compilers' versions. Builds are serialised machine-wide with a lock (kernel
# builds use every core). Installs the Debian packages it needs when run as root.
set -eu

arch=${1:?usage: build.sh ARCH [EXTRA.fragment...]}
shift
here=$(cd "$(dirname "$0")" && pwd)
cache=${UNWOUND_CACHE:-$HOME/.cache/unwound}
jobs=${UNWOUND_KERNEL_JOBS:-2}

series=${UNWOUND_KERNEL:-6.1}
case $series in
6.1) srcpkg=linux-source-6.1 ;;
7) srcpkg= ;;
*) echo "build.sh: UNWOUND_KERNEL=$series: 6.1 or 7" >&2; exit 2 ;;
esac

log() { echo "kernel/$arch: $*" >&2; }

case $arch in
aarch64) karch=arm64 cross=aarch64-linux-gnu- image=arch/arm64/boot/Image pkgs="gcc-aarch64-linux-gnu gcc-arm-linux-gnueabihf" ;;
arm) karch=arm cross=arm-linux-gnueabihf- image=arch/arm/boot/zImage pkgs=gcc-arm-linux-gnueabihf ;;
riscv64) karch=riscv cross=riscv64-linux-gnu- image=arch/riscv/boot/Image pkgs=gcc-riscv64-linux-gnu ;;
x86_64)
	karch=x86_64 image=arch/x86/boot/bzImage
	if [ "$(uname -m)" = x86_64 ]; then cross= pkgs=; else cross=x86_64-linux-gnu- pkgs=gcc-x86-64-linux-gnu; fi
	;;
*) echo "build.sh: unknown arch $arch (aarch64 arm riscv64 x86_64)" >&2; exit 2 ;;
esac

need=""
for p in $srcpkg gcc make bc bison flex libelf-dev libssl-dev xz-utils $pkgs; do
	dpkg -s "$p" >/dev/null 2>&1 || need="$need $p"
done
if [ -n "$need" ]; then
	if [ "$(id -u)" != 0 ]; then
		echo "build.sh: missing packages:$need (run as root or install them)" >&2
		exit 1
	fi
	log "installing$need"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq >&2
	# shellcheck disable=SC2086
	apt-get install -y -qq --no-install-recommends $need >&2
fi

frags="$here/fragments/common.fragment $here/fragments/$arch.fragment"
for f in "$@"; do
	[ -f "$f" ] || { echo "build.sh: no fragment $f" >&2; exit 2; }
	frags="$frags $(cd "$(dirname "$f")" && pwd)/$(basename "$f")"
done

# fragtext prints the fragments as merged: for 7.x with the renamed
# options of fragments/7.renames ("OLD NEW" lines) and 7.fragment last.
renames=
if [ "$series" != 6.1 ]; then
	frags="$frags $here/fragments/$series.fragment"
	renames=$(sed -n 's/^\(CONFIG_[A-Za-z0-9_]*\)[[:space:]][[:space:]]*\(CONFIG_[A-Za-z0-9_]*\).*/s|^\1=|\2=|/p' "$here/fragments/$series.renames")
fi
# shellcheck disable=SC2086
fragtext() { if [ -n "$renames" ]; then cat $frags | sed "$renames"; else cat $frags; fi; }

if [ "$series" = 6.1 ]; then
	srcver=$(dpkg-query -W -f '${Version}' linux-source-6.1)
	src=$cache/src/linux-source-6.1-$srcver
	keysrc=$srcver
	outname=$arch
else
	got=$("$here/source.sh" "$series")
	srcver=$(echo "$got" | sed -n 1p)
	src=$(echo "$got" | sed -n 2p)
	[ -f "$src/.unwound-extracted" ] || { echo "build.sh: source.sh gave no tree" >&2; exit 1; }
	keysrc="$(basename "$src") $srcver"
	outname=$arch-k$series
fi
ccver=$( { "${cross}gcc" --version | head -n 1; [ "$arch" != aarch64 ] || arm-linux-gnueabihf-gcc --version | head -n 1; } )
# recipe=N: bump when this script changes what it builds.
# shellcheck disable=SC2086
key=$( { echo "recipe=1 arch=$arch src=$keysrc"; echo "$ccver"; fragtext; } | sha256sum | cut -c1-16)
out=$cache/kernels/$outname-$key
kimg=$out/$(basename "$image")

if [ -s "$kimg" ]; then
	echo "$kimg"
	exit 0
fi

mkdir -p "$cache/kernels" "$cache/src"
exec 9>"$cache/kernels/.build.lock"
log "waiting for the kernel build lock"
flock 9
if [ -s "$kimg" ]; then # built by someone else while we waited
	echo "$kimg"
	exit 0
fi

if [ "$series" = 6.1 ] && [ ! -f "$src/.unwound-extracted" ]; then
	log "extracting /usr/src/linux-source-6.1.tar.xz"
	rm -rf "$src" "$src.tmp"
	mkdir -p "$src.tmp"
	tar -C "$src.tmp" --strip-components=1 -xJf /usr/src/linux-source-6.1.tar.xz
	touch "$src.tmp/.unwound-extracted"
	mv "$src.tmp" "$src"
fi

build=$cache/kbuild/$outname-$key
rm -rf "$build"
mkdir -p "$build"
if [ -n "$renames" ]; then
	# merge_config.sh reads files: the renamed fragments, in order.
	fragtext >"$build/fragments.config"
	frags=$build/fragments.config
fi
start=$(date +%s)
# CONFIG_COMPAT_VDSO (the 32-bit vDSO for armhf programs) needs an arm compiler.
compat=
[ "$arch" != aarch64 ] || compat=CROSS_COMPILE_COMPAT=arm-linux-gnueabihf-
# shellcheck disable=SC2086
mk() { make -C "$src" O="$build" ARCH="$karch" CROSS_COMPILE="$cross" $compat "$@"; }

log "configuring in $build"
{
	mk tinyconfig
	# shellcheck disable=SC2086
	(cd "$build" && ARCH=$karch CROSS_COMPILE=$cross "$src/scripts/kconfig/merge_config.sh" -m -O "$build" "$build/.config" $frags)
	mk olddefconfig
} >"$build/config.log" 2>&1 || { tail -n 30 "$build/config.log" >&2; exit 1; }

# Every option of every fragment must be in the final .config as written:
# merge_config.sh and olddefconfig silently drop options whose dependencies
# are not met.
missing=""
# shellcheck disable=SC2086
for line in $(cat $frags | sed -n 's/^\(CONFIG_[A-Za-z0-9_]*=.*\)$/\1/p'); do
	opt=${line%%=*}
	val=${line#*=}
	if [ "$val" = n ]; then
		! grep -q "^$opt=" "$build/.config" || missing="$missing $line"
	else
		grep -qxF "$line" "$build/.config" || missing="$missing $line(got:$(grep "^$opt=" "$build/.config" || echo unset))"
	fi
done
if [ -n "$missing" ]; then
	echo "build.sh: fragment options lost in the merge (unmet dependencies?):" >&2
	for m in $missing; do echo "  $m" >&2; done
	exit 1
fi

log "building (make -j$jobs), log in $build/build.log"
if ! mk -j"$jobs" >"$build/build.log" 2>&1; then
	tail -n 40 "$build/build.log" >&2
	exit 1
fi

mkdir -p "$out.tmp"
cp "$build/$image" "$build/.config" "$out.tmp/"
cp "$build/.config" "$out.tmp/config"
rm -f "$out.tmp/.config"
mv "$build/build.log" "$out.tmp/build.log"
echo "$(($(date +%s) - start))" >"$out.tmp/build-seconds"
rm -rf "$out"
mv "$out.tmp" "$out"
rm -rf "$build"
log "built in $(cat "$out/build-seconds")s: $kimg"
echo "$kimg"
