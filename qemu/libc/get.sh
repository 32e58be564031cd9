#!/bin/sh
# Finds (or fetches) Debian's own glibc for a guest architecture and the
# debug files that match it: libc6:<debarch> and libc6-dbg:<debarch> of the
# same version, unpacked (never installed) so that the demo board runs
# exactly the libc whose build-id debug files the host symbolizes with.
# Debian 12 (bookworm) for aarch64, arm and x86_64, like the rest of the
# lab; Debian 13 (trixie) for riscv64, which bookworm does not have. A
# program linked against an older glibc runs on a newer one, so the cross
# toolchain's (bookworm's) glibc 2.36 is fine to build with for both.
#
#   qemu/libc/get.sh ARCH      ARCH: aarch64 arm riscv64 x86_64
#
# Prints a directory on stdout holding
#   root/     libc6's files (lib/<triplet>/libc.so.6, the dynamic loader, ...)
#   debug/    libc6-dbg's usr/lib/debug (a .build-id tree), for --debug-dir
#   version   the package version
# Logs go to stderr. Exit status 3: the architecture has no Debian port
# here; 1: anything else went wrong (no network, say).
#
# apt-get runs on a private state (scripts/debian-apt.sh): the host's dpkg
# configuration is never changed (no `dpkg --add-architecture`).
# Cached in ${UNWOUND_CACHE:-$HOME/.cache/unwound}/debian-libc/<arch>-<version>/
# (the apt state in apt/ for bookworm, apt-<suite>/ for another suite); a
# cached copy is reused without asking the network.
set -eu

arch=${1:?usage: get.sh ARCH}
cache=${UNWOUND_CACHE:-$HOME/.cache/unwound}

log() { echo "libc/$arch: $*" >&2; }

# Each suite has its own apt state: one sources list with both would let
# apt pick trixie's libc6 for an architecture bookworm has.
suite=bookworm
aptdir=apt
debarches="arm64 armhf amd64"
case $arch in
aarch64) debarch=arm64 ;;
arm) debarch=armhf ;;
x86_64) debarch=amd64 ;;
riscv64)
	# riscv64 is an official architecture from Debian 13 on.
	debarch=riscv64 suite=trixie aptdir=apt-trixie debarches=riscv64
	;;
*) echo "get.sh: unknown arch $arch (aarch64 arm riscv64 x86_64)" >&2; exit 2 ;;
esac

found() {
	for d in "$cache"/debian-libc/"$arch"-*/; do
		if [ -s "$d/version" ]; then
			echo "${d%/}"
			return 0
		fi
	done
	return 1
}
# shellcheck source=scripts/debian-apt.sh
. "$(cd "$(dirname "$0")" && pwd)/../../scripts/debian-apt.sh"
dapt_once "$cache/debian-libc/.lock" "" found
debian_suite "$cache/debian-libc/$aptdir" "$debarches" "$suite"

work=$(mktemp -d "$cache/debian-libc/work.XXXXXX")
trap 'rm -rf "$work"' EXIT
cd "$work"
# Both packages at one version: libc6-dbg's build-ids name that libc6 only.
ver=$(dapt apt-cache show "libc6:$debarch" 2>/dev/null | sed -n 's/^Version: //p' | head -n 1)
[ -n "$ver" ] || { echo "get.sh: no libc6:$debarch in $suite" >&2; exit 1; }
log "apt-get download libc6:$debarch=$ver libc6-dbg:$debarch=$ver"
dapt apt-get download "libc6:$debarch=$ver" "libc6-dbg:$debarch=$ver" >&2
mkdir -p out/root x
dpkg-deb -x libc6_*.deb out/root
dpkg-deb -x libc6-dbg_*.deb x
mv x/usr/lib/debug out/debug
# trixie's packages are merged-/usr: give the board its /lib all the same.
if [ ! -e out/root/lib ] && [ -d out/root/usr/lib ]; then
	ln -s usr/lib out/root/lib
fi
echo "$ver" >out/version
dest=$cache/debian-libc/$arch-$(echo "$ver" | tr ':~' '__')
rm -rf "$dest"
mv out "$dest"
echo "$dest"
