#!/bin/sh
# Fetches Debian's own prebuilt programs for a guest architecture, for
# the handler's measure on binaries nobody here built
# (handler/wild_test.go, UNWOUND_WILD=1): a few CPU-heavy programs of
# bookworm (trixie for riscv64, an official architecture from Debian 13
# on) with their libraries, stripped as Debian ships them, unpacked
# (never installed) over the libc6 that qemu/libc/get.sh fetches with its
# libc6-dbg.
#
#   scripts/wild-get.sh ARCH      ARCH: aarch64 arm riscv64 x86_64
#
# Prints a directory on stdout holding
#   root/     the packages' files and libc6's: the sysroot of qemu-user,
#             the handler and gdb
#   debug/    libc6-dbg's .build-id tree (gdb's debug-file-directory):
#             the programs' own -dbgsym packages are in debian-debug,
#             which this host cannot reach, so gdb reads them stripped
#   versions  the packages and their versions: the key of the cores made
# Cached in ${UNWOUND_CACHE:-$HOME/.cache/unwound}/wild/<arch>/; a cached
# copy is reused without asking the network. The apt state is get.sh's.
set -eu

arch=${1:?usage: wild-get.sh ARCH}
cache=${UNWOUND_CACHE:-$HOME/.cache/unwound}
here=$(cd "$(dirname "$0")" && pwd)
suite=bookworm aptdir=apt debarches="arm64 armhf amd64"
case $arch in
aarch64) debarch=arm64 ;;
arm) debarch=armhf ;;
x86_64) debarch=amd64 ;;
riscv64) debarch=riscv64 suite=trixie aptdir=apt-trixie debarches=riscv64 ;;
*) echo "wild-get.sh: unknown arch $arch (aarch64 arm riscv64 x86_64)" >&2; exit 2 ;;
esac
# The programs and every library they load; busybox and lua5.3 need no
# more than libc6 and readline. Trixie renamed the libraries whose ABI
# moved to a 64-bit time_t (…t64) and ships Python 3.13.
pkgs="sqlite3 libsqlite3-0 libtinfo6 zlib1g busybox xz-utils liblzma5 zstd
libzstd1 liblz4-1 libgcc-s1 libstdc++6 gawk libgmp10 libmpfr6 libsigsegv2 bc
lua5.3 libexpat1"
case $suite in
bookworm) pkgs="$pkgs libreadline8 python3.11-minimal libpython3.11-minimal libssl3" ;;
trixie) pkgs="$pkgs libreadline8t64 python3.13-minimal libpython3.13-minimal libssl3t64 libxxhash0" ;;
esac

dest=$cache/wild/$arch
# shellcheck source=scripts/debian-apt.sh
. "$here/debian-apt.sh"
dapt_cached "$cache/wild" "$dest" versions
libc=$("$here/../qemu/libc/get.sh" "$arch")
debian_suite "$cache/debian-libc/$aptdir" "$debarches" "$suite"

work=$(mktemp -d "$cache/wild/work.XXXXXX")
trap 'rm -rf "$work"' EXIT
cd "$work"
mkdir -p out/root
list=
for p in $pkgs; do
	list="$list $p:$debarch"
done
echo "wild/$arch: apt-get download$list" >&2
# shellcheck disable=SC2086 # one word per package
dapt apt-get download $list >&2
for d in ./*.deb; do
	dpkg-deb -x "$d" out/root
	dpkg-deb -f "$d" Package Version | tr '\n' ' ' >>out/versions
	echo >>out/versions
done
# libc6 exactly as get.sh unpacked it, so that libc6-dbg matches it.
cp -a "$libc/root/." out/root/
cp -a "$libc/debug" out/debug
echo "libc6 $(cat "$libc/version")" >>out/versions
# Bookworm is not merged-/usr (trixie is: get.sh made /lib a link to
# usr/lib, and the loop below finds every library there already): libc6 is in /lib/<triplet>, the other
# libraries in /usr/lib/<triplet>. qemu-user's -L prefix falls back to the
# host's file for a path the prefix lacks, so on an amd64 host ld.so took
# the host's /lib/x86_64-linux-gnu/libsqlite3.so.0 before the prefix's
# /usr/lib one, and neither the handler nor gdb, reading the prefix, had
# it. Every library is linked into /lib too, as a merged /usr has it.
for f in out/root/usr/lib/*-linux-gnu*/*.so*; do
	rel=${f#out/root/usr/lib/}
	[ -e "out/root/lib/$rel" ] || [ -L "out/root/lib/$rel" ] || ln -s "../../usr/lib/$rel" "out/root/lib/$rel"
done
rm -rf "$dest"
mv out "$dest"
echo "$dest"
