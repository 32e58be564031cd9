#!/bin/sh
# Fetches the newest linux-source-SERIES.x package of Debian's unstable
# suite for build.sh (UNWOUND_KERNEL=SERIES), without installing anything on
# the host: a private apt state (scripts/debian-apt.sh) finds the package,
# `apt-get download` fetches it and `dpkg-deb -x` takes the tarball out of
# it, which is then extracted.
#
#   qemu/kernel/source.sh SERIES     SERIES: the major version, e.g. 7
#
# Prints two lines: the package's version (e.g. 7.2.13-1, part of
# build.sh's cache key) and the extracted tree. Cached in
# ${UNWOUND_CACHE:-$HOME/.cache/unwound}/src/:
#   linux-source-SERIES-current           the version in use
#   linux-source-X.Y_VERSION_all.deb       the package it came from
#   linux-source-X.Y-VERSION/              the tree (Debian's patches applied)
# Once there it is used offline. UNWOUND_KERNEL_REFRESH=1 resolves the
# newest version again (a newer one is a new tree and a new cache key).
set -eu

series=${1:?usage: source.sh SERIES}
case $series in
*[!0-9]* | '') echo "source.sh: SERIES is a major version number, not $series" >&2; exit 2 ;;
esac
cache=${UNWOUND_CACHE:-$HOME/.cache/unwound}
top=$cache/src
cur=$top/linux-source-$series-current
log() { echo "kernel-source/$series: $*" >&2; }

current() {
	[ -s "$cur" ] || return 1
	ver=$(cat "$cur")
	set -- "$top"/linux-source-"$series".*-"$ver"/.unwound-extracted
	[ -f "$1" ] || return 1
	echo "$ver"
	dirname "$1"
}

# shellcheck source=scripts/debian-apt.sh
. "$(cd "$(dirname "$0")" && pwd)/../../scripts/debian-apt.sh"
dapt_once "$top/.lock-$series" "${UNWOUND_KERNEL_REFRESH:-}" current
# linux-source-* is Architecture: all; any architecture's index lists it.
apt=$top/apt-sid
debian_suite "$apt" amd64 sid
# The newest series package (7.2 before 7.10: sort by version).
pkg=$(dapt apt-cache search --names-only "^linux-source-$series\.[0-9]+\$" | cut -d' ' -f1 | sort -V | tail -n 1)
[ -n "$pkg" ] || { echo "source.sh: no linux-source-$series.x in Debian unstable" >&2; exit 1; }
ver=$(dapt apt-cache show --no-all-versions "$pkg" | sed -n 's/^Version: //p' | head -n 1)
[ -n "$ver" ] || { echo "source.sh: no version for $pkg" >&2; exit 1; }
tree=$top/$pkg-$ver
if [ -f "$tree/.unwound-extracted" ]; then
	echo "$ver" >"$cur"
	current
	exit 0
fi

deb=$top/${pkg}_${ver}_all.deb
if [ ! -s "$deb" ]; then
	log "downloading $pkg $ver"
	mkdir -p "$apt/dl"
	rm -f "$apt/dl"/*.deb
	(cd "$apt/dl" && dapt apt-get -qq download "$pkg=$ver" >&2)
	mv "$apt/dl"/*.deb "$deb.tmp"
	mv "$deb.tmp" "$deb"
fi

log "extracting $(basename "$deb")"
rm -rf "$tree" "$tree.tmp"
mkdir -p "$tree.tmp/deb"
dpkg-deb -x "$deb" "$tree.tmp/deb"
tarball=$(ls "$tree.tmp/deb/usr/src/$pkg".tar.*)
mkdir -p "$tree.tmp/src"
tar -C "$tree.tmp/src" --strip-components=1 -xaf "$tarball"
mv "$tree.tmp/src" "$tree"
rm -rf "$tree.tmp"
echo "$ver" >"$tree/.unwound-extracted"
echo "$ver" >"$cur"
log "extracted $pkg $ver in $tree"
current
