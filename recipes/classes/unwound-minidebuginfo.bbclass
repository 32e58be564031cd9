# unwound-minidebuginfo: give every target ELF executable and shared
# library a .gnu_debugdata section (MiniDebugInfo) that makes unwound's
# on-board traces exact on stripped binaries: the FUNC symbols .dynsym
# lacks, as poky's "minidebuginfo" DISTRO_FEATURE keeps, plus the
# .debug_frame entries for code that no loaded table (.eh_frame,
# .ARM.exidx) covers. That is what 32-bit ARM and RISC-V C code built
# with default flags needs. See docs/minidebuginfo.md in unwound.
#
# Use, in local.conf or a distro .conf:
#   INHERIT += "unwound-minidebuginfo"
#
# It runs in do_package after poky has stripped the files and split their
# debug information (and, with DISTRO_FEATURES "minidebuginfo", after
# poky's own .gnu_debugdata, which it replaces: ours holds the same
# symbols). The -dbg packages are left as they are. The work is done by
# `unwound minidebuginfo` from unwound-tools-native, with the target's
# objcopy and xz-native.

UNWOUND_MDI_DEPENDS ?= "unwound-tools-native:do_populate_sysroot xz-native:do_populate_sysroot"
# Set to "1" in a recipe to leave its files alone.
UNWOUND_MDI_SKIP ?= "0"
# Go programs (recipes inheriting go) are left alone unless set to "1":
# their .debug_frame is large and Go crashes rarely reach core_pattern
# (the runtime exits on a fault unless GOTRACEBACK=crash).
UNWOUND_MDI_GO ?= "0"

python () {
    if (bb.data.inherits_class('native', d) or bb.data.inherits_class('nativesdk', d) or
            bb.data.inherits_class('cross', d) or bb.data.inherits_class('crosssdk', d) or
            bb.data.inherits_class('cross-canadian', d)):
        return
    if d.getVar('PN').startswith('unwound-tools') or not d.getVar('PACKAGES'):
        return
    if bb.data.inherits_class('go', d) and d.getVar('UNWOUND_MDI_GO') != '1':
        return
    d.appendVarFlag('do_package', 'depends', ' ' + d.getVar('UNWOUND_MDI_DEPENDS'))
    d.prependVar('PACKAGESPLITFUNCS', 'unwound_minidebuginfo ')
}

def unwound_mdi_pairs(dvar, dv):
    """(stripped, debug file) for every regular ELF file of PKGD that has a
    split debug file, once per inode; the paths follow poky's
    PACKAGE_DEBUG_SPLIT_STYLE layout (oe.package.package_debug_vars)."""
    import os, stat
    pairs, seen = [], set()
    for root, dirs, files in os.walk(dvar):
        rel = root[len(dvar):]
        if dv["dir"] and (rel.endswith(dv["dir"]) or (dv["dir"] + "/") in rel + "/"):
            continue
        if dv["libdir"] and (rel + "/").startswith(dv["libdir"] + "/"):
            continue
        if dv["staticlibdir"] and (rel + "/").startswith(dv["staticlibdir"] + "/"):
            continue
        for f in files:
            path = os.path.join(root, f)
            st = os.lstat(path)
            if not stat.S_ISREG(st.st_mode) or (st.st_dev, st.st_ino) in seen:
                continue
            with open(path, 'rb') as fh:
                if fh.read(4) != b'\x7fELF':
                    continue
            src = path[len(dvar):]
            debug = dvar + dv["libdir"] + os.path.dirname(src) + dv["dir"] + "/" + os.path.basename(src) + dv["append"]
            if not os.path.exists(debug):
                continue
            seen.add((st.st_dev, st.st_ino))
            pairs.append((path, debug))
    return sorted(pairs)

def unwound_mdi_run(pairs, tool, objcopy, extra=[]):
    """Runs the tool on each pair; returns the errors, one line each. A file
    that is not an executable or library, or has nothing to add, is left
    alone by the tool (exit 0)."""
    import subprocess
    errors = []
    for stripped, debug in pairs:
        cmd = [tool, 'minidebuginfo', '--objcopy', objcopy] + extra + ['--unstripped', debug, '--stripped', stripped]
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True)
        if p.returncode != 0:
            errors.append('%s: %s' % (stripped, p.stdout.strip()))
    return errors

python unwound_minidebuginfo () {
    import oe.package
    if d.getVar('UNWOUND_MDI_SKIP') == '1':
        return
    if d.getVar('INHIBIT_PACKAGE_STRIP') == '1' or d.getVar('INHIBIT_PACKAGE_DEBUG_SPLIT') == '1':
        return
    dvar = d.getVar('PKGD')
    pairs = unwound_mdi_pairs(dvar, oe.package.package_debug_vars(d))
    extra = ['--go'] if d.getVar('UNWOUND_MDI_GO') == '1' else []
    for e in unwound_mdi_run(pairs, 'unwound', d.getVar('OBJCOPY'), extra):
        bb.warn('unwound-minidebuginfo: %s' % e)
}
