#!/bin/sh
# Fetches one of Debian's packaged kernels for the core lab (the second
# flavour beside the minimal kernels of build.sh), without installing
# anything on the host: a private apt state under the cache resolves the
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

top=$cache/debian-kernels
cur=$top/$flavour
if [ -s "$cur/vmlinuz" ] && [ -z "${UNWOUND_DEBIAN_REFRESH:-}" ]; then
	echo "$cur"
	exit 0
fi
for t in apt-get dpkg-deb; do
	command -v $t >/dev/null 2>&1 || { echo "debian.sh: $t not found (Debian/Ubuntu host needed)" >&2; exit 1; }
done

mkdir -p "$top"
exec 9>"$top/.lock"
flock 9
if [ -s "$cur/vmlinuz" ] && [ -z "${UNWOUND_DEBIAN_REFRESH:-}" ]; then
	echo "$cur"
	exit 0
fi

# A private apt: its own sources, lists, cache and an empty status file, so
# the host's apt state and dpkg database are never read or changed.
apt=$top/apt-$darch
mkdir -p "$apt/lists/partial" "$apt/cache/archives/partial" "$apt/etc/preferences.d" "$apt/etc/apt.conf.d" "$apt/dl"
: >"$apt/status"
key=/usr/share/keyrings/debian-archive-keyring.gpg
cat >"$apt/etc/sources.list" <<EOF
deb [arch=$darch signed-by=$key] http://deb.debian.org/debian bookworm main
deb [arch=$darch signed-by=$key] http://deb.debian.org/debian-security bookworm-security main
EOF
set -- -o "APT::Architecture=$darch" -o "APT::Architectures=$darch" \
	-o "Dir::Etc::SourceList=$apt/etc/sources.list" -o "Dir::Etc::SourceParts=$apt/etc/sources.list.d" \
	-o "Dir::Etc::Preferences=$apt/etc/preferences" -o "Dir::Etc::PreferencesParts=$apt/etc/preferences.d" \
	-o "Dir::Etc::Parts=$apt/etc/apt.conf.d" \
	-o "Dir::State=$apt" -o "Dir::State::Lists=$apt/lists" -o "Dir::State::status=$apt/status" \
	-o "Dir::Cache=$apt/cache" -o "APT::Sandbox::User=root" -o "Debug::NoLocking=1"
log "apt-get update (private state in $apt)"
# A mirror caught mid-sync fails one index: retry once, then go on with
# what was fetched (the package must still resolve below).
apt-get "$@" -qq update >&2 || { sleep 5; apt-get "$@" -qq update >&2; } ||
	log "apt-get update reported errors; resolving with the indexes it fetched"

# The meta package (linux-image-arm64, ...) depends on the current ABI's
# image package, which carries the kernel and its modules.
pkg=$(apt-cache "$@" show --no-all-versions "linux-image-$flavour" | sed -n 's/^Depends: //p' | tr ',' '\n' |
	sed -n 's/^ *\(linux-image-[0-9][^ ]*\).*/\1/p' | head -n 1)
[ -n "$pkg" ] || { echo "debian.sh: cannot resolve linux-image-$flavour" >&2; exit 1; }
log "downloading $pkg"
rm -f "$apt/dl"/*.deb
(cd "$apt/dl" && apt-get "$@" -qq download "$pkg" >&2)
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
