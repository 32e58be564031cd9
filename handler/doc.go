// Package handler is the core_pattern program: it turns one crash piped
// by the kernel (or one core file, offline) into a report in the queue.
//
// Every crash goes through one pipeline, whatever brought it: an input
// mode builds an input value (input.go: the kernel's pipe, a core file,
// a core on stdin), and pipeline admits, unwinds, assembles, stores and
// logs. Its files follow the phases of a crash:
//
//   - kernel: RunKernel, the entry point the kernel starts: config, the
//     kernel's arguments, the pipe's input, then the pipeline.
//   - input: the input modes, one constructor each; where a new one goes.
//   - pipeline: admission (admit), the dump-mode policy, the work
//     (unwindHere), release, store; reading the core's headers.
//   - supervise: the pipeline's work in a parent that reads the notes and
//     re-executes the handler as a child for the rest, writing a
//     registers-only report when the child dies (RunChild is that child).
//   - offline: Offline, a core on disk or stdin, modules from a sysroot.
//   - pipe: the core pipe, read with a deadline, skipped by splice,
//     teed into save_core_dir.
//   - proc: what /proc/<pid> says while the process is held: maps,
//     thread names and ids, namespaces, preopened files, status.
//   - live and capture: the memory to unwind, live from /proc/<pid>/mem
//     within the freeze budget or captured from the core stream (stack
//     windows, code pages, the vDSO); mem holds the readers over them.
//   - crash: the state of one crash (env, process, image, outcome) and
//     the unwinding of its threads.
//   - assemble: the one report assembler, every mode's.
//   - privacy: what a report may say about addresses.
//   - store: the report written into the queue, losses counted.
//
// The subpackages hold what these phases use: admit, install, kuser and
// sysctl (the system around the handler), coredump, elf and module (the
// inputs) and unwind (the unwinder, with its per-architecture tables).
package handler
