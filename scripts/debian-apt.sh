# shellcheck shell=sh
# A private apt state, for the scripts that fetch Debian packages for the
# tests and the demo (qemu/kernel/debian.sh, qemu/busybox/get.sh,
# qemu/libc/get.sh, testdata/crash/musl.sh): its own sources list, lists,
# package cache, architectures and an empty dpkg status, so the host's apt
# state and dpkg database are never read or changed (no `dpkg
# --add-architecture`). The host's apt.conf.d still applies: a proxy set
# there is used. Sourced; POSIX sh.
#
#   debian_apt DIR "DEBARCH..." <<EOF    sets up DIR; the sources list is
#   deb [arch=...] ... main              read from stdin, the first
#   EOF                                  architecture is the default one
#   debian_suite DIR "DEBARCH..." SUITE  debian_apt with SUITE's main for
#                                        those architectures as the one
#                                        source, then dapt_update
#   dapt apt-get|apt-cache ARGS...       runs the tool on that state
#   dapt_update                          fetches the lists, at most daily
#   dapt_once LOCK REFRESH CHECK...      exits when CHECK finds the cache,
#                                        else locks LOCK for the rest of the
#                                        script
#   dapt_cached TOP DIR FILE [REFRESH]   the same for DIR/FILE, lock TOP/.lock
#
# UNWOUND_DEBIAN_MIRROR overrides the mirror the callers write in their
# sources (debian_mirror).

# shellcheck disable=SC2034 # used by the scripts that source this
debian_mirror=${UNWOUND_DEBIAN_MIRROR:-http://deb.debian.org/debian}
# shellcheck disable=SC2034
debian_keyring=/usr/share/keyrings/debian-archive-keyring.gpg

debian_apt() {
	dapt_dir=$1
	dapt_arches=$2
	dapt_default=${2%% *}
	for t in apt-get apt-cache dpkg-deb; do
		command -v "$t" >/dev/null 2>&1 || {
			echo "$t not found: fetching Debian packages needs a Debian or Ubuntu host" >&2
			return 1
		}
	done
	mkdir -p "$dapt_dir/lists/partial" "$dapt_dir/cache/archives/partial" \
		"$dapt_dir/etc/preferences.d" "$dapt_dir/etc/sources.list.d"
	: >"$dapt_dir/status"
	cat >"$dapt_dir/etc/sources.list.tmp"
	# A changed sources list makes the lists stale.
	if ! cmp -s "$dapt_dir/etc/sources.list.tmp" "$dapt_dir/etc/sources.list"; then
		rm -f "$dapt_dir/updated"
	fi
	mv "$dapt_dir/etc/sources.list.tmp" "$dapt_dir/etc/sources.list"
}

# debian_suite DIR "DEBARCH..." SUITE is the private state most fetch
# scripts want: one suite's main component for their architectures,
# lists fetched.
debian_suite() {
	debian_apt "$1" "$2" <<EOF
deb [arch=$(echo "$2" | tr ' ' ,) signed-by=$debian_keyring] $debian_mirror $3 main
EOF
	dapt_update
}

dapt() {
	dapt_tool=$1
	shift
	dapt_archopts=
	for a in $dapt_arches; do
		dapt_archopts="$dapt_archopts -o APT::Architectures::=$a"
	done
	# shellcheck disable=SC2086 # dapt_archopts: words without spaces
	"$dapt_tool" -q -o "APT::Architecture=$dapt_default" $dapt_archopts \
		-o "Dir::State=$dapt_dir" -o "Dir::State::Lists=$dapt_dir/lists" \
		-o "Dir::State::status=$dapt_dir/status" -o "Dir::Cache=$dapt_dir/cache" \
		-o "Dir::Etc::SourceList=$dapt_dir/etc/sources.list" \
		-o "Dir::Etc::SourceParts=$dapt_dir/etc/sources.list.d" \
		-o "Dir::Etc::Preferences=$dapt_dir/etc/preferences" \
		-o "Dir::Etc::PreferencesParts=$dapt_dir/etc/preferences.d" \
		-o Acquire::IndexTargets::deb::DEP-11::DefaultEnabled=false \
		-o Acquire::IndexTargets::deb::DEP-11-icons::DefaultEnabled=false \
		-o Acquire::IndexTargets::deb::DEP-11-icons-small::DefaultEnabled=false \
		-o APT::Sandbox::User=root -o Debug::NoLocking=1 "$@"
}

# dapt_update fetches the lists unless a complete update is less than a
# day old. A mirror caught mid-sync fails an index: it retries once, then
# goes on with the lists it has, if any, without stamping them fresh; it
# fails when there are none (no network, say).
dapt_update() {
	if [ -s "$dapt_dir/updated" ] && [ -z "$(find "$dapt_dir/updated" -mmin +1440)" ]; then
		return 0
	fi
	echo "apt-get update (private state in $dapt_dir)" >&2
	rm -f "$dapt_dir/updated"
	if dapt apt-get -qq update --error-on=any >&2 ||
		{ sleep 5 && dapt apt-get -qq update --error-on=any >&2; }; then
		date >"$dapt_dir/updated"
		return 0
	fi
	if ls "$dapt_dir/lists/"*_Packages* >/dev/null 2>&1; then
		echo "apt-get update reported errors; resolving with the lists it has" >&2
		return 0
	fi
	echo "apt-get update failed and no lists are cached: is deb.debian.org reachable?" >&2
	return 1
}

# dapt_once LOCK REFRESH CHECK... is the cache check of a fetch script:
# when REFRESH is empty and the command CHECK succeeds (it prints what is
# cached), the script exits. Else it takes the lock file LOCK, held until
# the script exits, and checks again: a concurrent run may have fetched
# it meanwhile.
dapt_once() {
	dapt_lock=$1
	dapt_refresh=$2
	shift 2
	if [ -z "$dapt_refresh" ] && "$@"; then
		exit 0
	fi
	mkdir -p "$(dirname "$dapt_lock")"
	exec 9>"$dapt_lock"
	flock 9
	if [ -z "$dapt_refresh" ] && "$@"; then
		exit 0
	fi
}

# dapt_cached TOP DIR FILE [REFRESH] is dapt_once for a cache at a fixed
# place: DIR/FILE there means DIR is cached; the lock is TOP/.lock.
dapt_cached() {
	dapt_once "$1/.lock" "${4:-}" dapt_dir_has "$2" "$3"
}
dapt_dir_has() { [ -s "$1/$2" ] && echo "$1"; }
