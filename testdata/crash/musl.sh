#!/bin/sh
# Fetches Debian's musl (musl, musl-dev) for a foreign architecture and
# unpacks it under the cache, without installing anything on the host: a
# private apt state resolves the packages for the target architecture,
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

top=$cache/musl
cur=$top/$arch
if [ -s "$cur/musl-gcc.specs" ]; then
	echo "$cur"
	exit 0
fi
for t in apt-get dpkg-deb; do
	command -v $t >/dev/null 2>&1 || { echo "musl.sh: $t not found (Debian/Ubuntu host needed)" >&2; exit 1; }
done
mkdir -p "$top"
exec 9>"$top/.lock"
flock 9
if [ -s "$cur/musl-gcc.specs" ]; then
	echo "$cur"
	exit 0
fi

# A private apt: its own sources, lists, cache and an empty status file, so
# the host's apt state and dpkg database are never read or changed.
apt=$top/apt-$darch
mkdir -p "$apt/lists/partial" "$apt/cache/archives/partial" "$apt/etc/preferences.d" "$apt/etc/apt.conf.d" "$apt/dl"
: >"$apt/status"
key=/usr/share/keyrings/debian-archive-keyring.gpg
cat >"$apt/etc/sources.list" <<EOS
deb [arch=$darch signed-by=$key] http://deb.debian.org/debian bookworm main
EOS
set -- -o "APT::Architecture=$darch" -o "APT::Architectures=$darch" \
	-o "Dir::Etc::SourceList=$apt/etc/sources.list" -o "Dir::Etc::SourceParts=$apt/etc/sources.list.d" \
	-o "Dir::Etc::Preferences=$apt/etc/preferences" -o "Dir::Etc::PreferencesParts=$apt/etc/preferences.d" \
	-o "Dir::Etc::Parts=$apt/etc/apt.conf.d" \
	-o "Dir::State=$apt" -o "Dir::State::Lists=$apt/lists" -o "Dir::State::status=$apt/status" \
	-o "Dir::Cache=$apt/cache" -o "APT::Sandbox::User=root" -o "Debug::NoLocking=1"
log "apt-get update (private state in $apt)"
apt-get "$@" -qq update >&2 || { sleep 5; apt-get "$@" -qq update >&2; } ||
	log "apt-get update reported errors; resolving with the indexes it fetched"
rm -f "$apt/dl"/*.deb
(cd "$apt/dl" && apt-get "$@" -qq download musl musl-dev >&2)

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
