#!/bin/sh
# Fetches a systemd guest for qemu/systemd_test.go (UNWOUND_LAB_SYSTEMD=1):
# Debian unstable's arm64 kernel and a root tree unpacked from systemd,
# systemd-coredump, busybox-static and their dependency closure, without
# touching the host's apt or dpkg state: a private apt state
# (scripts/debian-apt.sh) with an empty dpkg status resolves the closure,
# `apt-get install --download-only` fetches it into a directory of its
# own and `dpkg-deb -x` unpacks each package. No maintainer script runs:
# the test does by hand what the guest needs of them.
#
#   qemu/systemd/get.sh
#
# Prints the directory holding:
#   vmlinuz    the kernel as Debian ships it (QEMU boots it as is)
#   root/      the unpacked packages, merged-/usr (bin, sbin, lib -> usr/)
#   versions   "systemd VERSION" and "kernel PACKAGE VERSION"
# Cached in ${UNWOUND_CACHE:-$HOME/.cache/unwound}/systemd-guest/, keyed
# by the systemd and kernel package versions; once there it is used
# offline. UNWOUND_SYSTEMD_REFRESH=1 resolves the versions again.
set -eu

cache=${UNWOUND_CACHE:-$HOME/.cache/unwound}
top=$cache/systemd-guest
log() { echo "systemd-guest: $*" >&2; }

current() {
	[ -s "$top/current" ] || return 1
	d=$top/$(cat "$top/current")
	[ -f "$d/.done" ] || return 1
	echo "$d"
}
# shellcheck source=scripts/debian-apt.sh
. "$(cd "$(dirname "$0")" && pwd)/../../scripts/debian-apt.sh"
dapt_once "$top/.lock" "${UNWOUND_SYSTEMD_REFRESH:-}" current
apt=$top/apt-arm64
debian_suite "$apt" arm64 sid

version() { dapt apt-cache show --no-all-versions "$1" | sed -n 's/^Version: //p' | head -n 1; }
# The meta package depends on the current ABI's image package.
kpkg=$(dapt apt-cache show --no-all-versions linux-image-arm64 | sed -n 's/^Depends: //p' | tr ',' '\n' |
	sed -n 's/^ *\(linux-image-[0-9][^ ]*\).*/\1/p' | head -n 1)
[ -n "$kpkg" ] || { echo "get.sh: cannot resolve linux-image-arm64" >&2; exit 1; }
# From 7.x the image package is split: linux-binary-* carries vmlinuz,
# linux-modules-* the modules. Older ones carry both themselves.
bpkg=$(dapt apt-cache show --no-all-versions "$kpkg" | sed -n 's/^Depends: //p' | tr ',' '\n' |
	sed -n 's/^ *\(linux-binary-[0-9][^ ]*\).*/\1/p' | head -n 1)
[ -n "$bpkg" ] && kpkg=$bpkg
kver=$(version "$kpkg")
sver=$(version systemd)
if [ -z "$kver" ] || [ -z "$sver" ]; then
	echo "get.sh: no version for $kpkg or systemd" >&2
	exit 1
fi
key=systemd-$sver-$kpkg-$kver
dir=$top/$key
if [ -f "$dir/.done" ]; then
	echo "$key" >"$top/current"
	echo "$dir"
	exit 0
fi

tmp=$dir.tmp
rm -rf "$tmp"
mkdir -p "$tmp/debs/partial" "$tmp/root" "$tmp/kernel"
log "downloading systemd $sver and its dependencies (arm64)"
# The empty private status makes this the whole closure. Recommends stay
# out; libkmod2, libzstd1, libseccomp2 and libacl1 are ones systemd
# loads when present (dlopen) and a board's image would carry.
dapt apt-get -qq -y install --download-only --no-install-recommends \
	-o Dir::Cache::archives="$tmp/debs" \
	systemd systemd-coredump busybox-static libkmod2 libzstd1 libseccomp2 libacl1 >&2
log "downloading $kpkg $kver"
(cd "$tmp/kernel" && dapt apt-get -qq download "$kpkg=$kver" >&2)

for deb in "$tmp"/debs/*.deb; do
	dpkg-deb -x "$deb" "$tmp/root"
	dpkg-deb -f "$deb" Package Version | sed "s/^[^:]*: //" | paste -sd' ' >>"$tmp/packages"
done
# The kernel alone, not its modules: the guest needs none (no disk, the
# PL011 console, unix sockets and tmpfs are built in).
# It is /usr/lib/modules/VERSION/vmlinuz from 7.x, /boot/vmlinuz-VERSION before.
dpkg-deb -x "$tmp"/kernel/*.deb "$tmp/kernel/x"
vmlinuz=$(find "$tmp/kernel/x" -type f \( -name vmlinuz -o -name 'vmlinuz-*' \) | head -n 1)
[ -n "$vmlinuz" ] || { echo "get.sh: no vmlinuz in $kpkg" >&2; exit 1; }
mv "$vmlinuz" "$tmp/vmlinuz"
rm -rf "$tmp/kernel" "$tmp/debs"

# Merged /usr, as Debian's base-files makes it.
r=$tmp/root
for d in bin sbin lib; do
	mkdir -p "$r/usr/$d"
	if [ -d "$r/$d" ] && [ ! -L "$r/$d" ]; then
		cp -a "$r/$d/." "$r/usr/$d/"
		rm -rf "${r:?}/$d"
	fi
	ln -sfn "usr/$d" "$r/$d"
done
rm -rf "$r/usr/share/doc" "$r/usr/share/man" "$r/usr/share/locale" "$r/usr/share/zsh" \
	"$r/usr/share/bash-completion" "$r/usr/share/lintian"
{
	echo "systemd $sver"
	echo "kernel $kpkg $kver"
} >"$tmp/versions"
touch "$tmp/.done"
rm -rf "$dir"
mv "$tmp" "$dir"
echo "$key" >"$top/current"
log "unpacked $key ($(du -sh "$dir/root" | cut -f1) root)"
echo "$dir"
