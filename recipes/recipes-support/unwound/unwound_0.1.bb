SUMMARY = "On-device crash reporter: core_pattern handler that unwinds on the board, and its uploader"
DESCRIPTION = "unwound-handler is the kernel's core_pattern helper: it unwinds every \
thread of a crashed process on the device and queues a small report holding \
only program counters and module identities. unwound-uploader drains the \
queue over HTTP or a serial port."
HOMEPAGE = "https://github.com/unwound-dev/unwound"
BUGTRACKER = "https://github.com/unwound-dev/unwound/issues"
SECTION = "devel"

# unwound itself (Apache-2.0), then the 7 modules vendored in the release
# tarball (vendor/modules.txt): BurntSushi/toml (MIT), klauspost/compress
# (BSD-3-Clause and Apache-2.0; internal/snapref BSD-3-Clause,
# zstd/internal/xxhash MIT), golang.org/x/sys (BSD-3-Clause),
# go.bug.st/serial (BSD-3-Clause), creack/goselect (MIT),
# ianlancetaylor/demangle (BSD-3-Clause), ulikunitz/xz (BSD-3-Clause).
LICENSE = "Apache-2.0 & BSD-3-Clause & MIT"
LIC_FILES_CHKSUM = "\
    file://src/${GO_IMPORT}/LICENSE;md5=3b83ef96387f14655fc854ddc3c6bd57 \
    file://src/${GO_IMPORT}/vendor/github.com/BurntSushi/toml/COPYING;md5=9e24c0e2a784c1d1fcabb279f4f107e0 \
    file://src/${GO_IMPORT}/vendor/github.com/klauspost/compress/LICENSE;md5=d0fd9ebda39468b51ff4539c9fbb13a8 \
    file://src/${GO_IMPORT}/vendor/github.com/klauspost/compress/internal/snapref/LICENSE;md5=b8b79c7d4cda128290b98c6a21f9aac6 \
    file://src/${GO_IMPORT}/vendor/github.com/klauspost/compress/zstd/internal/xxhash/LICENSE.txt;md5=802da049c92a99b4387d3f3d91b00fa9 \
    file://src/${GO_IMPORT}/vendor/golang.org/x/sys/LICENSE;md5=7998cb338f82d15c0eff93b7004d272a \
    file://src/${GO_IMPORT}/vendor/go.bug.st/serial/LICENSE;md5=6067cc6529e21146d9c556ee2f680c27 \
    file://src/${GO_IMPORT}/vendor/github.com/creack/goselect/LICENSE;md5=53145d9bb75251a18e111de5d23803e6 \
    file://src/${GO_IMPORT}/vendor/github.com/ianlancetaylor/demangle/LICENSE;md5=81729dc66d48cba483290ca39318923d \
    file://src/${GO_IMPORT}/vendor/github.com/ulikunitz/xz/LICENSE;md5=3c82255323cf3d48815acdbf9068b715 \
"

GO_IMPORT = "github.com/unwound-dev/unwound"

# The release tarball made by `make dist` already holds vendor/: no network
# after do_fetch, on every release from scarthgap (no gomod:// fetcher there)
# to wrynose. It is unpacked where go.bbclass wants the sources,
# ${S}/src/${GO_IMPORT}, with its top directory stripped.
UNWOUND_SRC_SUBDIR = "${@os.path.basename(d.getVar('S'))}/src/${GO_IMPORT}"
SRC_URI = "https://github.com/unwound-dev/unwound/releases/download/v${PV}/unwound-${PV}.tar.gz;subdir=${UNWOUND_SRC_SUBDIR};striplevel=1"
# Set when v${PV} is released: sha256sum of dist/unwound-${PV}.tar.gz from
# `make dist VERSION=${PV}` at the tag (the tarball is reproducible).
SRC_URI[sha256sum] = "0000000000000000000000000000000000000000000000000000000000000000"

# What sets kernel.core_pattern at boot: a sysctl.d file sorting after
# systemd's 50-coredump.conf with systemd; an init script writing /proc/sys
# with sysvinit (which applies only /etc/sysctl.conf). With both in
# DISTRO_FEATURES, systemd's: the init script is then not installed, so the
# classes follow UNWOUND_INIT (set before the inherit): update-rc.d's
# postinst would run update-rc.d on a script that is not there.
UNWOUND_INIT ?= "${@bb.utils.contains('DISTRO_FEATURES', 'systemd', 'systemd', \
    bb.utils.contains('DISTRO_FEATURES', 'sysvinit', 'sysvinit', 'none', d), d)}"

inherit go ${@'systemd' if d.getVar('UNWOUND_INIT') == 'systemd' else ''} \
    ${@'update-rc.d' if d.getVar('UNWOUND_INIT') == 'sysvinit' else ''}

# make install builds and runs its core_pattern generator on the build host
# with HOST_GO: the native go, since ${GO} (oe-core's cross wrapper) exports
# the target's GOARCH.
DEPENDS += "go-native"

# The queue of reports. It must be on persistent storage: with the
# read-only-rootfs image feature /var/lib is a tmpfs and reports would be lost
# at every reboot (the handler refuses a volatile queue unless told to allow
# it). Point it at a persistent partition there, e.g. in local.conf:
#   UNWOUND_QUEUE_DIR:pn-unwound = "/data/unwound/queue"
UNWOUND_QUEUE_DIR ?= "/var/lib/unwound/queue"

# "on" when the image's kernel is 6.16 or later: the core_pattern line then
# asks for the crashed process's pidfd (%F), which guards /proc/<pid>
# against a reused pid (docs/kernel-modes.md). An older kernel passes an
# empty --pidfd= and the handler runs as with "off".
UNWOUND_PIDFD ?= "off"

# "@@" when the image's kernel is 6.17 or later ("@" for 6.16): core_pattern
# points at the coredump socket server instead of the pipe, so no process is
# forked per crash. With systemd, unwound-coredump.socket is enabled and
# starts the server on the first crash, ordered after systemd 262's
# systemd-coredump-register.service; with sysvinit the init script starts it
# (docs/kernel-modes.md). "off": the pipe.
UNWOUND_SOCKET ?= "off"
UNWOUND_SOCKET_UNITS = "${@'' if d.getVar('UNWOUND_SOCKET') == 'off' else 'unwound-coredump.socket'}"

# Static binaries: no cgo, no PIE (fails without cgo on arm and riscv64),
# no shared Go runtime. Not stripped here: the -dbg package gets the symbols.
# do_compile and do_install are the recipe's own (go.bbclass's `go install`
# of GO_INSTALL is not used), so GO_INSTALL and GO_LINKSHARED are not set.
# Go before 1.24 writes no GNU build ID: -B gobuildid derives one from the
# Go build ID, so the -dbg package and debuginfod can match the binaries.
CGO_ENABLED = "0"
GOBUILDFLAGS:remove = "-buildmode=pie"
GO_EXTRA_LDFLAGS = "-B gobuildid -X ${GO_IMPORT}/internal/version.Version=${PV}"
export GOFLAGS = "-mod=vendor"
export GOPROXY = "off"
export GO111MODULE = "on"
export GOTOOLCHAIN = "local"

do_compile() {
    cd ${S}/src/${GO_IMPORT}
    ${GO} build ${GOBUILDFLAGS} -o ${B}/unwound-bin/ \
        ./cmd/unwound-handler ./cmd/unwound-uploader
}
do_compile[cleandirs] += "${B}/unwound-bin"

# The repository's own `make install` lays out the board: binaries (the ones
# built above, PREBUILT=), configuration, queue directory, and the
# core_pattern line computed by handler.CorePattern on the build host. The
# sysctl.d file goes to ${nonarch_libdir}/sysctl.d with systemd and to
# ${sysconfdir}/sysctl.d with sysvinit (the Makefile's defaults).
do_install() {
    oe_runmake -C ${S}/src/${GO_IMPORT} install \
        GO="${GO}" \
        HOST_GO="${STAGING_BINDIR_NATIVE}/go" \
        INSTALL_WORK=${B}/install-work \
        DESTDIR=${D} \
        PREFIX=${prefix} \
        SYSCONFDIR=${sysconfdir} \
        QUEUE_DIR=${UNWOUND_QUEUE_DIR} \
        INIT=${UNWOUND_INIT} \
        CORE_PATTERN_PIDFD=${UNWOUND_PIDFD} \
        CORE_PATTERN_SOCKET=${UNWOUND_SOCKET} \
        PREBUILT=${B}/unwound-bin \
        BOARD_CMDS="unwound-handler unwound-uploader" \
        SYSTEMD_UNITDIR=${systemd_system_unitdir} \
        INITDIR=${sysconfdir}/init.d \
        INITSCRIPT=unwound
}

SYSTEMD_SERVICE:${PN} = "unwound-uploader.service ${UNWOUND_SOCKET_UNITS}"
SYSTEMD_AUTO_ENABLE:${PN} = "enable"
INITSCRIPT_NAME = "unwound"
INITSCRIPT_PARAMS = "defaults 25 75"

CONFFILES:${PN} = "${sysconfdir}/unwound/unwound.toml"
FILES:${PN} += "\
    ${nonarch_libdir}/sysctl.d/60-unwound.conf \
    ${sysconfdir}/sysctl.d/60-unwound.conf \
    ${systemd_system_unitdir}/unwound-upload-once.service \
    ${systemd_system_unitdir}/unwound-upload-once.timer \
    ${systemd_system_unitdir}/unwound-coredump.socket \
    ${systemd_system_unitdir}/unwound-coredump.service \
    ${UNWOUND_QUEUE_DIR} \
"
