#!/bin/sh
# Finds (or fetches) a static BusyBox for the image tests' guests: the shell,
# init and the applets an embedded board's init scripts use.
#
#   qemu/busybox/get.sh ARCH      ARCH: aarch64 arm riscv64 x86_64
#
# Prints the path of the busybox binary on stdout; logs go to stderr.
#
# aarch64, arm (armhf) and x86_64 use Debian bookworm's busybox-static
# package, downloaded with apt-get on a private apt state
# (scripts/debian-apt.sh): the host's dpkg configuration is never changed
# (no `dpkg --add-architecture`). Bookworm has no riscv64
# port, so for riscv64 the same Debian source package (`apt-get source
# busybox`, with Debian's patches) is cross-built with riscv64-linux-gnu-gcc
# and Debian's own "static" flavour configuration.
#
# Cached in ${UNWOUND_CACHE:-$HOME/.cache/unwound}/busybox/<arch>-<version>/,
# serialised with a lock.
set -eu

arch=${1:?usage: get.sh ARCH}
cache=${UNWOUND_CACHE:-$HOME/.cache/unwound}
suite=bookworm

log() { echo "busybox/$arch: $*" >&2; }

case $arch in
aarch64) debarch=arm64 ;;
arm) debarch=armhf ;;
x86_64) debarch=amd64 ;;
riscv64) debarch=riscv64 cross=riscv64-linux-gnu- ;;
*) echo "get.sh: unknown arch $arch (aarch64 arm riscv64 x86_64)" >&2; exit 2 ;;
esac

# A found binary is reused without asking the network.
for f in "$cache"/busybox/"$arch"-*/busybox; do
	if [ -s "$f" ]; then
		echo "$f"
		exit 0
	fi
done

mkdir -p "$cache/busybox"
exec 9>"$cache/busybox/.lock"
flock 9
for f in "$cache"/busybox/"$arch"-*/busybox; do
	if [ -s "$f" ]; then
		echo "$f"
		exit 0
	fi
done

# shellcheck source=scripts/debian-apt.sh
. "$(cd "$(dirname "$0")" && pwd)/../../scripts/debian-apt.sh"
debian_apt "$cache/busybox/apt" "arm64 armhf amd64" <<EOF
deb [arch=arm64,armhf,amd64 signed-by=$debian_keyring] $debian_mirror $suite main
deb-src [signed-by=$debian_keyring] $debian_mirror $suite main
EOF
dapt_update

work=$(mktemp -d "$cache/busybox/work.XXXXXX")
trap 'rm -rf "$work"' EXIT
cd "$work"

if [ "$debarch" != riscv64 ]; then
	log "apt-get download busybox-static:$debarch"
	dapt apt-get download "busybox-static:$debarch" >&2
	deb=$(ls busybox-static_*.deb)
	ver=$(dpkg-deb -f "$deb" Version | tr ':~' '__')
	dpkg-deb -x "$deb" x
	out=$cache/busybox/$arch-$ver
	mkdir -p "$out"
	cp x/bin/busybox "$out/busybox.tmp"
	mv "$out/busybox.tmp" "$out/busybox"
	echo "$out/busybox"
	exit 0
fi

command -v "${cross}gcc" >/dev/null 2>&1 || { echo "get.sh: ${cross}gcc not installed (make deps)" >&2; exit 1; }
command -v dpkg-source >/dev/null 2>&1 || { echo "get.sh: dpkg-source not installed (apt-get install dpkg-dev)" >&2; exit 1; }
log "apt-get source busybox (Debian has no riscv64 binary package in $suite)"
dapt apt-get source --download-only busybox >&2
dsc=$(ls busybox_*.dsc)
ver=$(sed -n 's/^Version: //p' "$dsc" | tr ':~' '__')
dpkg-source -x "$dsc" src >&2
b=$work/src/b/static
mkdir -p "$b"
cat src/debian/config/os/linux src/debian/config/pkg/static >"$b/.config"
log "cross-building busybox $ver (Debian's static flavour) with ${cross}gcc"
yes "" | make -s -C "$b" -f "$work/src/Makefile" KBUILD_SRC="$work/src" CROSS_COMPILE="$cross" silentoldconfig >&2
make -s -C "$b" -j"${UNWOUND_BUSYBOX_JOBS:-2}" CROSS_COMPILE="$cross" SKIP_STRIP=y \
	BB_EXTRA_VERSION="Debian $ver cross-built for unwound" busybox >&2
out=$cache/busybox/$arch-$ver
mkdir -p "$out"
"${cross}strip" -o "$out/busybox.tmp" "$b/busybox"
mv "$out/busybox.tmp" "$out/busybox"
echo "$out/busybox"
