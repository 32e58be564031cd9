#!/bin/sh
# Installs the Debian packages the build, the tests and the demo need.
# Idempotent: installs only what is missing. Needs root for apt-get.
# The last two lines: Buildroot's utils/check-package (python3-magic,
# flake8, shellcheck) and bitbake's host tools, for packaging/build_test.go.
# libc6-dbg and llvm (llvm-symbolizer): host/symbolize's tests and benchmarks;
# chromium drives the collector page's browser test (host/webtest).
set -eu
pkgs="gcc g++ make git zstd gcc-aarch64-linux-gnu g++-aarch64-linux-gnu
gcc-arm-linux-gnueabihf g++-arm-linux-gnueabihf gcc-riscv64-linux-gnu g++-riscv64-linux-gnu
binutils-multiarch gdb-multiarch qemu-user qemu-system-arm qemu-system-misc qemu-system-x86
qemu-system-data socat linux-source-6.1 bc bison flex libelf-dev libssl-dev cpio xz-utils
e2fsprogs dosfstools device-tree-compiler clang lld mold musl-tools libc6-dbg llvm
python3-magic flake8 shellcheck chromium
gawk chrpath diffstat lz4 rsync texinfo locales file python3-git python3-jinja2 python3-subunit python3-pexpect"
missing=""
for p in $pkgs; do
	dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
if [ "$(id -u)" != 0 ]; then
	echo "deps: missing packages:$missing; run as root or install them" >&2
	exit 1
fi
echo "deps: installing$missing"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# shellcheck disable=SC2086
apt-get install -y -qq --no-install-recommends $missing >/dev/null
