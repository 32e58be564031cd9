#!/bin/sh
# Regenerates the real reports the encoder's tests compress: the handler,
# run offline on cores that gdb's gcore took (no core_pattern involved),
# prints them; they are kept as zstd -19 frames of the indented JSON, with
# the host's boot and device ids blanked.
#
#   threads64.json.zst       threads64.c: 64 threads parked in recursions
#   crash-threads.json.zst   testdata/crash/crash.c threads: a crash
#
# Needs gcc, gdb, zstd and root (or ptrace rights); run from anywhere.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../../.." && pwd)
# shellcheck source=scripts/mkreports.sh
. "$repo/scripts/mkreports.sh"
gcc -O1 -g -pthread -o threads64 "$here/threads64.c" -lm

./threads64 >ready &
pid=$!
while [ ! -s ready ]; do sleep 0.1; done
gdb -p "$pid" -batch -ex "gcore core.threads64" >/dev/null 2>&1
kill "$pid"
./unwound-handler --core-file core.threads64 --exe ./threads64 --print-json | scrub >"$here/threads64.json.zst"
rm core.threads64

gdb -batch -ex run -ex "gcore core.crash" --args ./crash threads >/dev/null 2>&1
./unwound-handler --core-file core.crash --exe ./crash --print-json | scrub >"$here/crash-threads.json.zst"
