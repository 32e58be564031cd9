#!/bin/sh
# Regenerates the real reports the Sentry tests convert: testdata/crash/crash.c
# built for the host, crashed by the kernel with a core file written (the
# host's core_pattern must write files: "core"), and the handler run offline
# on each core. The host's boot and device ids are blanked; the reports are
# kept as zstd -19 frames of the handler's JSON.
#
#   nullwrite.json.zst    SIGSEGV at 0x0, one thread
#   threads.json.zst      SIGSEGV in one of four threads
#   sighandler.json.zst   SIGSEGV inside a signal handler: a signal frame mid-stack
#   recursion.json.zst    stack overflow: frames elided from the middle
#
# Needs gcc and zstd; run from anywhere.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../../.." && pwd)
# shellcheck source=scripts/mkreports.sh
. "$repo/scripts/mkreports.sh"
for s in nullwrite threads sighandler recursion; do
	mkdir "$s"
	(cd "$s" && sh -c "ulimit -c unlimited; exec ../crash $s" >/dev/null 2>&1) || true
	core=$(ls "$s"/core* | head -n 1)
	./unwound-handler --core-file "$core" --exe ./crash --print-json | scrub >"$here/$s.json.zst"
done
