#!/bin/sh
# Strips each file named as Buildroot strips it and adds MiniDebugInfo
# (.gnu_debugdata) from the debug information it had: run by the unwound
# package's target-finalize hook (BR2_PACKAGE_UNWOUND_MINIDEBUGINFO), with
# UNWOUND, OBJCOPY, XZ and STRIPCMD from the environment.
#
#   minidebuginfo.sh FILE...
#
# Files that are not ELF are skipped; a file the tool cannot handle is
# stripped all the same and reported, never fatal: the image still builds.

set -u
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
for f in "$@"; do
	if [ ! -f "$f" ] || [ -L "$f" ]; then
		continue
	fi
	magic=$(head -c 4 "$f" | od -An -c | tr -d ' ')
	[ "$magic" = '177ELF' ] || continue
	if ! "$OBJCOPY" --only-keep-debug "$f" "$tmp/debug" 2>/dev/null; then
		continue
	fi
	# shellcheck disable=SC2086 # STRIPCMD is a command with arguments
	$STRIPCMD "$f" || continue
	"$UNWOUND" minidebuginfo --objcopy "$OBJCOPY" --xz "$XZ" \
		--unstripped "$tmp/debug" --stripped "$f" ||
		echo "unwound: no MiniDebugInfo for $f" >&2
	rm -f "$tmp/debug"
done
exit 0
