# shellcheck shell=sh
# The common part of the scripts that regenerate real reports for tests
# (host/sentry/testdata/mkreports.sh, report/zstdenc/testdata/mkreports.sh).
# Sourced, with repo set to the repository's root; POSIX sh. It makes a
# temporary directory (removed on exit) and works there: it builds
# ./unwound-handler and ./crash (testdata/crash/crash.c, gcc -O1 -g), and
# defines
#
#   scrub      blanks the host's boot and device ids in the handler's JSON
#              on stdin and writes it as the tests keep it: a zstd -19 frame

: "${repo:?set repo before sourcing mkreports.sh}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp" || exit
(cd "$repo" && go build -o "$tmp/unwound-handler" ./cmd/unwound-handler)
gcc -O1 -g -pthread -o crash "$repo/testdata/crash/crash.c"

scrub() {
	sed -E 's/"(boot_id|device_id)": *"[^"]*"/"\1": "00000000000000000000000000000000"/g' | zstd -q -19 -c
}
