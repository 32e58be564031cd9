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


def walk(limit=200000):
    frames = []
    f = gdb.newest_frame()
    while f is not None and len(frames) < limit:
        t = TYPES.get(f.type(), str(f.type()))
        if t not in ("INLINE", "TAILCALL"):
            frames.append({"pc": "0x%x" % f.pc(), "type": t, "function": f.name()})
        try:
            f = f.older()
        except gdb.error as e:
            frames.append({"error": str(e)})
            break
    return frames


def oracle():
    inf = gdb.selected_inferior()
    crashed = gdb.selected_thread()
    crashed_lwp = crashed.ptid[1] or crashed.ptid[2] if crashed else 0
    out = []
    for th in sorted(inf.threads(), key=lambda t: t.num):
        th.switch()
        lwp = th.ptid[1] or th.ptid[2]
        out.append({"tid": lwp, "crashed": lwp == crashed_lwp, "frames": walk()})
    print("ORACLE-JSON:" + json.dumps({"threads": out}))
