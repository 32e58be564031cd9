# gdb oracle for unwound's tests: walks every thread of a core with gdb's
# Python API and prints the frames as one JSON line after "ORACLE-JSON:".
#
#   gdb-multiarch -nx -batch -ex 'set sysroot SYSROOT' -x oracle.py \
#       -ex 'file BINARY' -ex 'core-file CORE' -ex 'python oracle()'
#
# Frame PCs are gdb's frame.pc(): the exact PC for frame 0 and for frames
# interrupted by a signal, the return address for the others, the same
# convention as unwound's reports. INLINE frames share their outer frame's
# PC, and TAILCALL frames are gdb's reconstruction of calls that left no
# frame on the stack (from DWARF call-site info): both are left out, since
# no unwinder can see them in the stack. SIGTRAMP frames are kept and marked.
import json

import gdb

gdb.execute("set backtrace past-main on")
gdb.execute("set backtrace past-entry on")
gdb.execute("set backtrace limit 200000")
gdb.execute("set pagination off")
gdb.execute("set confirm off")

TYPES = {
    gdb.NORMAL_FRAME: "NORMAL",
    gdb.INLINE_FRAME: "INLINE",
    gdb.SIGTRAMP_FRAME: "SIGTRAMP",
    gdb.DUMMY_FRAME: "DUMMY",
    gdb.TAILCALL_FRAME: "TAILCALL",
    gdb.ARCH_FRAME: "ARCH",
    gdb.SENTINEL_FRAME: "SENTINEL",
}


def _sp(f):
    try:
        return int(f.read_register("sp"))
    except (gdb.error, ValueError):
        return None


def walk(limit=200000):
    """gdb's frames, innermost first. gdb's guess past a table-less
    outermost frame can repeat it forever, each time one word higher
    (clang's ARM _start, with past-entry on): a frame with the previous
    one's PC and an SP at most a word above it is such a guess, not a
    call, since a real recursive call's frame holds at least a return
    address and a saved register. The walk ends there."""
    frames = []
    word = gdb.lookup_type("void").pointer().sizeof
    f = gdb.newest_frame()
    prev_pc, prev_sp = None, None
    while f is not None and len(frames) < limit:
        t = TYPES.get(f.type(), str(f.type()))
        if t not in ("INLINE", "TAILCALL"):
            pc, sp = f.pc(), _sp(f)
            if pc == prev_pc and sp is not None and prev_sp is not None and 0 <= sp - prev_sp <= word:
                break
            prev_pc, prev_sp = pc, sp
            frames.append({"pc": "0x%x" % pc, "type": t, "function": f.name()})
        try:
            f = f.older()
        except gdb.error as e:
            frames.append({"error": str(e)})
            break
    return frames


def _auxv(tag):
    for line in gdb.execute("info auxv", to_string=True).splitlines():
        f = line.split()
        if len(f) >= 3 and f[1] == tag:
            return int([x for x in f if x.startswith("0x")][-1], 16)
    return None


def _word(addr, size):
    b = bytes(gdb.selected_inferior().read_memory(addr, size))
    return int.from_bytes(b, "little")


def _pt_dynamic(hdr, binary, is64):
    """The link-time address of binary's PT_DYNAMIC segment, None when it
    has none (a static program)."""
    le = lambda b: int.from_bytes(b, "little")
    if is64:
        phoff, phentsize, phnum, vaddr = le(hdr[32:40]), le(hdr[54:56]), le(hdr[56:58]), 16
    else:
        phoff, phentsize, phnum, vaddr = le(hdr[28:32]), le(hdr[42:44]), le(hdr[44:46]), 8
    with open(binary, "rb") as f:
        f.seek(phoff)
        ph = f.read(phentsize * phnum)
    ptr = 8 if is64 else 4
    for i in range(phnum):
        p = ph[i * phentsize:(i + 1) * phentsize]
        if le(p[0:4]) == 2:  # PT_DYNAMIC
            return le(p[vaddr:vaddr + ptr])
    return None


def relocate(binary, sysroot):
    """qemu-user cores have no NT_FILE, and gdb 13 then neither relocates a
    PIE program nor finds its shared libraries. Do what the dynamic linker
    did, with gdb reading the core: the program's load bias is AT_ENTRY
    minus e_entry; the libraries come from the link map that _DYNAMIC's
    DT_DEBUG entry points at (r_debug.r_map; link_map = {l_addr, l_name,
    l_ld, l_next, l_prev})."""
    if "No shared libraries" not in gdb.execute("info sharedlibrary", to_string=True):
        return
    with open(binary, "rb") as f:
        hdr = f.read(64)
    is64 = hdr[4] == 2
    ptr = 8 if is64 else 4
    e_type = int.from_bytes(hdr[16:18], "little")
    e_entry = int.from_bytes(hdr[24:24 + ptr], "little")
    entry = _auxv("AT_ENTRY")
    if entry is None:
        return
    bias = entry - e_entry if e_type == 3 else 0
    if bias:
        gdb.execute("symbol-file -o 0x%x %s" % (bias, binary), to_string=True)
    try:
        dyn = int(gdb.parse_and_eval("(long)&_DYNAMIC"))
    except gdb.error:
        # A stripped program (Debian's) has no _DYNAMIC symbol: its
        # PT_DYNAMIC header says where the dynamic section is.
        dyn = _pt_dynamic(hdr, binary, is64)
        if dyn is None:
            return  # static
        dyn += bias
    if dyn == 0:
        return  # static, linked by mold (which defines _DYNAMIC as 0)
    rdebug = 0
    for i in range(1024):
        tag = _word(dyn + 2 * ptr * i, ptr)
        if tag == 0:
            break
        if tag == 21:  # DT_DEBUG
            rdebug = _word(dyn + 2 * ptr * i + ptr, ptr)
    lm = _word(rdebug + ptr, ptr) if rdebug else 0
    seen = set()
    while lm and lm not in seen and len(seen) < 1024:
        seen.add(lm)
        l_addr, l_name, l_next = _word(lm, ptr), _word(lm + ptr, ptr), _word(lm + 3 * ptr, ptr)
        name = gdb.selected_inferior().read_memory(l_name, 256).tobytes().split(b"\0")[0].decode()
        # The first entry is the program: glibc names it "", musl by the
        # path it was run as.
        if len(seen) > 1 and name.startswith("/"):
            gdb.execute("add-symbol-file %s -o 0x%x" % (sysroot.rstrip("/") + name, l_addr), to_string=True)
        lm = l_next


def from_mappings(binary, sysroot):
    """Some kernel cores (riscv64 with Sv57 addresses, under gdb 13) carry
    NT_FILE, yet gdb neither relocates the PIE nor loads the libraries.
    Place every file at the start of its offset-0 mapping, as NT_FILE says
    (gdb's 'info proc mappings'): the first PT_LOAD of a PIE or shared
    library is linked at 0."""
    if "No shared libraries" not in gdb.execute("info sharedlibrary", to_string=True):
        return False
    placed = False
    for line in gdb.execute("info proc mappings", to_string=True).splitlines():
        f = line.split()
        if len(f) != 5 or not f[0].startswith("0x") or int(f[3], 16) != 0:
            continue
        start, path = int(f[0], 16), f[4]
        with open(binary, "rb") as fh:
            pie = int.from_bytes(fh.read(18)[16:18], "little") == 3
        if placed is False and path.endswith(binary.split("/")[-1]):
            if pie:
                gdb.execute("symbol-file -o 0x%x %s" % (start, binary), to_string=True)
        else:
            gdb.execute("add-symbol-file %s -o 0x%x" % (sysroot.rstrip("/") + path, start), to_string=True)
        placed = True
    return placed


def oracle(binary=None, sysroot="/", mappings=False):
    if mappings:
        from_mappings(binary, sysroot)
    elif binary:
        relocate(binary, sysroot)
    inf = gdb.selected_inferior()
    crashed = gdb.selected_thread()
    crashed_lwp = crashed.ptid[1] or crashed.ptid[2] if crashed else 0
    out = []
    for th in sorted(inf.threads(), key=lambda t: t.num):
        th.switch()
        lwp = th.ptid[1] or th.ptid[2]
        out.append({"tid": lwp, "crashed": lwp == crashed_lwp, "frames": walk()})
    print("ORACLE-JSON:" + json.dumps({"threads": out}))
