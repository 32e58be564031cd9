################################################################################
#
# unwound
#
################################################################################

UNWOUND_VERSION = 0.1
UNWOUND_SITE = https://github.com/unwound-dev/unwound/releases/download/v$(UNWOUND_VERSION)
UNWOUND_LICENSE = Apache-2.0, BSD-3-Clause, MIT
UNWOUND_LICENSE_FILES = \
	LICENSE \
	vendor/github.com/BurntSushi/toml/COPYING \
	vendor/github.com/klauspost/compress/LICENSE \
	vendor/github.com/klauspost/compress/internal/snapref/LICENSE \
	vendor/github.com/klauspost/compress/zstd/internal/xxhash/LICENSE.txt \
	vendor/golang.org/x/sys/LICENSE \
	vendor/go.bug.st/serial/LICENSE \
	vendor/github.com/creack/goselect/LICENSE \
	vendor/github.com/ianlancetaylor/demangle/LICENSE \
	vendor/github.com/ulikunitz/xz/LICENSE

# The release tarball (make dist) already carries vendor/: Buildroot's go
# download post-processing leaves it as it is, and nothing is fetched later.
UNWOUND_GOMOD = github.com/unwound-dev/unwound
UNWOUND_BUILD_TARGETS = cmd/unwound-handler cmd/unwound-uploader

# Static binaries, whatever the toolchain: no cgo (the golang-package
# infrastructure sets CGO_ENABLED=1 whenever the toolchain can; UNWOUND_GO_ENV
# comes after it on the command line and wins). -B gobuildid: a GNU build ID
# (Go before 1.24 writes none). Buildroot strips the binaries itself.
UNWOUND_GO_ENV = CGO_ENABLED=0
UNWOUND_LDFLAGS = -B gobuildid -X github.com/unwound-dev/unwound/internal/version.Version=$(UNWOUND_VERSION)

ifeq ($(BR2_INIT_SYSTEMD),y)
UNWOUND_INIT = systemd
else ifeq ($(BR2_INIT_BUSYBOX)$(BR2_INIT_SYSV),y)
UNWOUND_INIT = sysvinit
else
UNWOUND_INIT = none
endif

# The repository's own make install lays out the target: the binaries built
# above (PREBUILT), the configuration, the queue directory and
# 60-unwound.conf, whose core_pattern line is computed on the host by
# handler.CorePattern. The init script comes from this directory
# (UNWOUND_INSTALL_INIT_SYSV), so make install is told not to install one.
define UNWOUND_INSTALL_TARGET_CMDS
	$(HOST_GO_HOST_ENV) $(MAKE) -C $(@D) install \
		GO=$(GO_BIN) \
		DESTDIR=$(TARGET_DIR) \
		PREFIX=/usr \
		SYSCONFDIR=/etc \
		QUEUE_DIR=$(call qstrip,$(BR2_PACKAGE_UNWOUND_QUEUE_DIR)) \
		INIT=$(UNWOUND_INIT) \
		INITSCRIPT= \
		CORE_PATTERN_PIDFD=$(if $(BR2_PACKAGE_UNWOUND_PIDFD),on,off) \
		CORE_PATTERN_SOCKET=$(if $(BR2_PACKAGE_UNWOUND_SOCKET),@@,off) \
		PREBUILT=$(@D)/bin \
		BOARD_CMDS="unwound-handler unwound-uploader"
endef

# With the socket server, the script's SOCKET=off becomes auto: @@ or @,
# whichever the running kernel takes.
define UNWOUND_INSTALL_INIT_SYSV
	$(INSTALL) -D -m 0755 $(UNWOUND_PKGDIR)/S50unwound \
		$(TARGET_DIR)/etc/init.d/S50unwound
	$(if $(BR2_PACKAGE_UNWOUND_SOCKET),$(SED) 's/^SOCKET=off$$/SOCKET=auto/' $(TARGET_DIR)/etc/init.d/S50unwound)
endef

# Buildroot enables systemd units with `systemctl preset-all` when it makes
# the image; this preset sorts before the catch-all ones.
define UNWOUND_INSTALL_INIT_SYSTEMD
	mkdir -p $(TARGET_DIR)/usr/lib/systemd/system-preset
	printf 'enable unwound-uploader.service\n$(if $(BR2_PACKAGE_UNWOUND_SOCKET),enable unwound-coredump.socket\n)' \
		> $(TARGET_DIR)/usr/lib/systemd/system-preset/50-unwound.preset
endef

# MiniDebugInfo (docs/minidebuginfo.md): before Buildroot's strip, in a
# target-finalize hook, every file it would strip is stripped the same way
# by minidebuginfo.sh, which first keeps its debug information aside and
# then adds .gnu_debugdata with unwound's host tool. Buildroot's own strip
# then finds nothing left to remove (strip keeps .gnu_debugdata).
ifeq ($(BR2_PACKAGE_UNWOUND_MINIDEBUGINFO),y)
UNWOUND_DEPENDENCIES += host-unwound host-xz
define UNWOUND_MINIDEBUGINFO
	$(STRIP_FIND_CMD) | \
		$(HOST_MAKE_ENV) \
		UNWOUND=$(HOST_DIR)/bin/unwound \
		OBJCOPY=$(TARGET_OBJCOPY) \
		XZ=$(HOST_DIR)/bin/xz \
		STRIPCMD="$(STRIPCMD)" \
		xargs -0 -r $(SHELL) $(UNWOUND_PKGDIR)/minidebuginfo.sh
endef
UNWOUND_TARGET_FINALIZE_HOOKS += UNWOUND_MINIDEBUGINFO
endif

# The host tool: `unwound minidebuginfo`, for the hook above.
HOST_UNWOUND_GOMOD = $(UNWOUND_GOMOD)
HOST_UNWOUND_BUILD_TARGETS = cmd/unwound
HOST_UNWOUND_GO_ENV = CGO_ENABLED=0

$(eval $(golang-package))
$(eval $(host-golang-package))
