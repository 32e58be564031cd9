#!/bin/sh
# Regenerates the kernel cores of the crash programs (testdata/crash) for
# every architecture of the core lab, and armhf programs on the arm64
# kernel, each with the sysroot of target libraries its cores name: real
# kernel cores (NT_FILE, NT_SIGINFO, the vDSO, the kernel's signal frames),
# not qemu-user ones, for unit tests and gdb comparisons.
#
#   scripts/lab-cores.sh OUTDIR [LABEL...]
#
# LABEL: aarch64 arm riscv64 x86_64 arm-on-aarch64 (default: all), plus
# debian-aarch64 debian-arm debian-x86_64 for Debian's packaged kernels.
# Each OUTDIR/LABEL is a `go run ./qemu/cmd/lab --copy-sysroot` output:
#   cores/VARIANT/PROG-SCENARIO.core   the kernel's core (save_core_dir)
#   reports/VARIANT/PROG-SCENARIO.json.zst   the live report of the same crash
#   bin/VARIANT/PROG                   unstripped (gdb reads it)
#   root/                              the guest's layout: root/bin (stripped
#                                      programs), root/lib (copied libraries)
#   manifest.json                      every crash, kernel, boot time
# Offline checks:
#   unwound-handler --core-file OUT/arm/cores/O2-dynamic/crash-sighandler.core --sysroot OUT/arm/root --print-json
#   gdb-multiarch -batch -ex 'set sysroot OUT/arm/root' -ex 'file OUT/arm/bin/O2-dynamic/crash' \
#       -ex 'core-file OUT/arm/cores/O2-dynamic/crash-sighandler.core' -ex bt
set -eu
out=${1:?usage: lab-cores.sh OUTDIR [LABEL...]}
shift
[ $# -gt 0 ] || set -- aarch64 arm riscv64 x86_64 arm-on-aarch64
cd "$(dirname "$0")/.."
mkdir -p "$out"
for label in "$@"; do
	flags=
	case $label in
	debian-*) flags=--debian a=${label#debian-} ;;
	*) a=$label ;;
	esac
	case $a in
	arm-on-aarch64) set -- --arch arm --kernel-arch aarch64 ;;
	aarch64 | arm | riscv64 | x86_64) set -- --arch "$a" ;;
	*) echo "lab-cores.sh: unknown label $label" >&2; exit 2 ;;
	esac
	echo "lab-cores.sh: $label" >&2
	# shellcheck disable=SC2086
	go run ./qemu/cmd/lab "$@" $flags --copy-sysroot --out "$out/$label"
done
