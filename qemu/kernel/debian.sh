#!/bin/sh
# Fetches one of Debian's packaged kernels for the core lab (the second
# flavour beside the minimal kernels of build.sh), without installing
# anything on the host: a private apt state (scripts/debian-apt.sh) resolves the
# flavour's meta package for the target architecture, `apt-get download`
# fetches the image package and `dpkg-deb -x` unpacks it.
#
#   qemu/kernel/debian.sh ARCH      ARCH: aarch64 (arm64) arm (armmp) x86_64 (amd64)
#
# Prints the directory holding:
#   vmlinuz   the kernel image as Debian ships it (QEMU boots it as is)
#   config    Debian's configuration
#   modules/  lib/modules/<version> (for the modules the guest must load)
#   package   the .deb it came from
# Cached in ${UNWOUND_CACHE:-$HOME/.cache/unwound}/debian-kernels/<flavour>;
# once there it is used offline. UNWOUND_DEBIAN_REFRESH=1 resolves the
# flavour again (a newer ABI is a new directory).
set -eu

arch=${1:?usage: debian.sh ARCH}
cache=${UNWOUND_CACHE:-$HOME/.cache/unwound}
case $arch in
aarch64) darch=arm64 flavour=arm64 ;;
arm) darch=armhf flavour=armmp ;;
x86_64) darch=amd64 flavour=amd64 ;;
*) echo "debian.sh: no Debian kernel flavour for $arch (aarch64 arm x86_64)" >&2; exit 2 ;;
esac
log() { echo "debian-kernel/$flavour: $*" >&2; }
# shellcheck source=scripts/debian-apt.sh
. "$(cd "$(dirname "$0")" && pwd)/../../scripts/debian-apt.sh"

top=$cache/debian-kernels
cur=$top/$flavour
dapt_cached "$top" "$cur" vmlinuz "${UNWOUND_DEBIAN_REFRESH:-}"

apt=$top/apt-$darch
debian_apt "$apt" "$darch" <<EOF
deb [arch=$darch signed-by=$debian_keyring] $debian_mirror bookworm main
deb [arch=$darch signed-by=$debian_keyring] ${debian_mirror%/debian}/debian-security bookworm-security main
EOF
dapt_update
mkdir -p "$apt/dl"

# The meta package (linux-image-arm64, ...) depends on the current ABI's
# image package, which carries the kernel and its modules.
pkg=$(dapt apt-cache show --no-all-versions "linux-image-$flavour" | sed -n 's/^Depends: //p' | tr ',' '\n' |
	sed -n 's/^ *\(linux-image-[0-9][^ ]*\).*/\1/p' | head -n 1)
[ -n "$pkg" ] || { echo "debian.sh: cannot resolve linux-image-$flavour" >&2; exit 1; }
log "downloading $pkg"
rm -f "$apt/dl"/*.deb
(cd "$apt/dl" && dapt apt-get -qq download "$pkg" >&2)
deb=$(ls "$apt/dl"/*.deb)

tmp=$top/$flavour.tmp
rm -rf "$tmp"
mkdir -p "$tmp/root"
dpkg-deb -x "$deb" "$tmp/root"
kver=$(ls "$tmp/root/lib/modules")
cp "$tmp/root/boot/vmlinuz-$kver" "$tmp/vmlinuz"
cp "$tmp/root/boot/config-$kver" "$tmp/config"
mv "$tmp/root/lib/modules/$kver" "$tmp/modules"
rm -rf "$tmp/root"
basename "$deb" >"$tmp/package"
rm -f "$deb"
rm -rf "$cur"
mv "$tmp" "$cur"
log "unpacked $(cat "$cur/package") ($kver)"
echo "$cur"
