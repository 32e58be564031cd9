#!/bin/sh
# Fetches Debian's musl (musl, musl-dev) for a foreign architecture and
# unpacks it under the cache, without installing anything on the host: a
# private apt state (scripts/debian-apt.sh) resolves the packages for the
# target architecture,
# `apt-get download` fetches them and `dpkg-deb -x` unpacks them (as
# qemu/kernel/debian.sh does for kernels). It writes a gcc specs file that
# points the architecture's cross gcc at that musl, as Debian's musl-gcc
# does for the host's (with libc once more after libgcc: ARM's libgcc
# calls raise).
#
#   testdata/crash/musl.sh ARCH     ARCH: aarch64 (arm64) arm (armhf)
#
# Prints the root holding usr/include/TRIPLE, usr/lib/TRIPLE (crt files,
# libc.a, libc.so), lib/ld-musl-*.so.1 and musl-gcc.specs. Cached in
# ${UNWOUND_CACHE:-$HOME/.cache/unwound}/musl/ARCH; once there it is used
# offline.
set -eu

arch=${1:?usage: musl.sh ARCH}
cache=${UNWOUND_CACHE:-$HOME/.cache/unwound}
case $arch in
aarch64) darch=arm64 triple=aarch64-linux-musl loader=ld-musl-aarch64.so.1 ;;
arm) darch=armhf triple=arm-linux-musleabihf loader=ld-musl-armhf.so.1 ;;
*) echo "musl.sh: no foreign musl for $arch (aarch64 arm; x86_64 uses musl-tools)" >&2; exit 2 ;;
esac
log() { echo "musl/$arch: $*" >&2; }
# shellcheck source=scripts/debian-apt.sh
. "$(cd "$(dirname "$0")" && pwd)/../../scripts/debian-apt.sh"

top=$cache/musl
cur=$top/$arch
dapt_cached "$top" "$cur" musl-gcc.specs

apt=$top/apt-$darch
debian_apt "$apt" "$darch" <<EOS
deb [arch=$darch signed-by=$debian_keyring] $debian_mirror bookworm main
EOS
dapt_update
mkdir -p "$apt/dl"
rm -f "$apt/dl"/*.deb
(cd "$apt/dl" && dapt apt-get -qq download musl musl-dev >&2)

tmp=$top/$arch.tmp
rm -rf "$tmp"
mkdir -p "$tmp"
for deb in "$apt/dl"/*.deb; do
	dpkg-deb -x "$deb" "$tmp"
	basename "$deb" >>"$tmp/packages"
done
rm -f "$apt/dl"/*.deb
[ -f "$tmp/usr/lib/$triple/libc.a" ] || { echo "musl.sh: no usr/lib/$triple/libc.a in the packages" >&2; exit 1; }
# The loader and the linker's libc.so are absolute links to
# lib/TRIPLE/libc.so on the target: make them relative, so they resolve
# inside this root.
rm -f "$tmp/lib/$loader" "$tmp/usr/lib/$triple/libc.so"
ln -s "$triple/libc.so" "$tmp/lib/$loader"
ln -s "../../../lib/$triple/libc.so" "$tmp/usr/lib/$triple/libc.so"
inc=$cur/usr/include/$triple lib=$cur/usr/lib/$triple
cat >"$tmp/musl-gcc.specs" <<EOS
%rename cpp_options old_cpp_options

*cpp_options:
-nostdinc -isystem $inc -isystem include%s %(old_cpp_options)

*cc1:
%(cc1_cpu) -nostdinc -isystem $inc -isystem include%s

*link_libgcc:
-L$lib -L .%s

*libgcc:
libgcc.a%s %:if-exists(libgcc_eh.a%s) -lc libgcc.a%s

*startfile:
%{!shared: $lib/Scrt1.o} $lib/crti.o crtbeginS.o%s

*endfile:
crtendS.o%s $lib/crtn.o

*link:
-dynamic-linker /lib/$loader -nostdlib %{shared:-shared} %{static:-static} %{rdynamic:-export-dynamic}
EOS
rm -rf "$cur"
mv "$tmp" "$cur"
log "unpacked $(tr '\n' ' ' <"$cur/packages")"
echo "$cur"
