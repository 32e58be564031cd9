#!/bin/sh
# Leaves the fleet collector out of a release tree (make dist).
#
#   dist-prune.sh TREE
#
# The release tarball is what Yocto and Buildroot build from: the board
# binaries, and the build-host tools (unwound minidebuginfo, symbolize).
# The collector (unwound serve, crashes, sentry) stores into SQLite through
# a pure-Go driver whose sources are over 200 MB: vendored, they would be
# 95% of the tarball and of every build's download. Its packages and the
# command files that register it go; go mod vendor then vendors what the
# rest imports. The unwound built from the tree says so when asked for a
# fleet command.
set -eu
tree=${1:?usage: dist-prune.sh TREE}
cd "$tree"
rm -rf host/collector host/web host/webtest host/loadtest host/sentry host/signature
# The tests' reader of a collector's database goes with it.
rm -rf testkit/collectortest
rm -f cmd/unwound/serve.go cmd/unwound/crashes.go cmd/unwound/sentry.go
# make demo ends in a collector; the demo is the git tree's, not a build's.
rm -rf qemu/cmd/demo
# The commands' tests run the binaries end to end, the fleet's among them;
# other tests that import the collector go too: the tree is for builds.
rm -f cmd/*/*_test.go
pat='"github.com/unwound-dev/unwound/host/(collector|web|sentry|signature)"'
grep -rlE --include='*_test.go' "$pat" . | xargs -r rm -f
left=$(grep -rlE --include='*.go' "$pat" . || true)
if [ -n "$left" ]; then
	echo "dist-prune: still importing the collector: $left" >&2
	exit 1
fi
