SUMMARY = "unwound's host tool, for unwound-minidebuginfo.bbclass"
DESCRIPTION = "The `unwound` command for the build host. The \
unwound-minidebuginfo class runs `unwound minidebuginfo` in do_package to \
give target binaries the MiniDebugInfo that makes on-board traces exact."
HOMEPAGE = "https://github.com/unwound-dev/unwound"
BUGTRACKER = "https://github.com/unwound-dev/unwound/issues"
SECTION = "devel"

# Sources and licences: the same as recipes-support/unwound/unwound_0.1.bb
# (host/minidebuginfo's TestYoctoRecipesAgree keeps them in step).
# unwound itself, then the modules vendored in the release tarball
# (vendor/modules.txt): BurntSushi/toml (MIT), klauspost/compress
# (BSD-3-Clause and Apache-2.0; internal/snapref BSD-3-Clause,
# zstd/internal/xxhash MIT), golang.org/x/sys (BSD-3-Clause).
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
GO_INSTALL = "${GO_IMPORT}/cmd/unwound-handler ${GO_IMPORT}/cmd/unwound-uploader"

# The release tarball made by `make dist` already holds vendor/: no network
# after do_fetch, on every release from scarthgap (no gomod:// fetcher there)
# to wrynose. It is unpacked where go.bbclass wants the sources,
# ${S}/src/${GO_IMPORT}, with its top directory stripped.
UNWOUND_SRC_SUBDIR = "${@os.path.basename(d.getVar('S'))}/src/${GO_IMPORT}"
SRC_URI = "https://github.com/unwound-dev/unwound/releases/download/v${PV}/unwound-${PV}.tar.gz;subdir=${UNWOUND_SRC_SUBDIR};striplevel=1"
# Set when v${PV} is released: sha256sum of dist/unwound-${PV}.tar.gz from
# `make dist VERSION=${PV}` at the tag (the tarball is reproducible).
SRC_URI[sha256sum] = "0000000000000000000000000000000000000000000000000000000000000000"

GO_INSTALL = "${GO_IMPORT}/cmd/unwound"

inherit go native

export GOFLAGS = "-mod=vendor"
export GOPROXY = "off"
export GO111MODULE = "on"
export GOTOOLCHAIN = "local"
CGO_ENABLED = "0"

do_compile() {
    cd ${S}/src/${GO_IMPORT}
    ${GO} build -trimpath -o ${B}/unwound-bin/ ./cmd/unwound
}
do_compile[cleandirs] = "${B}/unwound-bin"

do_install() {
    install -d ${D}${bindir}
    install -m 0755 ${B}/unwound-bin/unwound ${D}${bindir}/unwound
}
