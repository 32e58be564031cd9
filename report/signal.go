package report

import "strconv"

// Linux signal numbers that are the same on every architecture unwound
// supports (the generic and x86/arm numbering agree for these). The
// tables are arrays indexed by number, not maps: a map literal compiles
// to code that builds it at start-up (docs/design.md, "Footprint").
var signalNames = [...]string{
	1: "SIGHUP", 2: "SIGINT", 3: "SIGQUIT", 4: "SIGILL", 5: "SIGTRAP",
	6: "SIGABRT", 7: "SIGBUS", 8: "SIGFPE", 9: "SIGKILL", 10: "SIGUSR1",
	11: "SIGSEGV", 12: "SIGUSR2", 13: "SIGPIPE", 14: "SIGALRM", 15: "SIGTERM",
	16: "SIGSTKFLT", 17: "SIGCHLD", 18: "SIGCONT", 19: "SIGSTOP", 20: "SIGTSTP",
	21: "SIGTTIN", 22: "SIGTTOU", 23: "SIGURG", 24: "SIGXCPU", 25: "SIGXFSZ",
	26: "SIGVTALRM", 27: "SIGPROF", 28: "SIGWINCH", 29: "SIGIO", 30: "SIGPWR",
	31: "SIGSYS",
}

// SignalName returns "SIGSEGV" for 11, "SIG42" for unknown numbers.
func SignalName(n int) string {
	if n > 0 && n < len(signalNames) {
		return signalNames[n]
	}
	return "SIG" + strconv.Itoa(n)
}

// si_code values (include/uapi/asm-generic/siginfo.h), per signal, indexed
// by code.
var (
	illCodes  = [...]string{1: "ILL_ILLOPC", 2: "ILL_ILLOPN", 3: "ILL_ILLADR", 4: "ILL_ILLTRP", 5: "ILL_PRVOPC", 6: "ILL_PRVREG", 7: "ILL_COPROC", 8: "ILL_BADSTK", 9: "ILL_BADIADDR"}
	trapCodes = [...]string{1: "TRAP_BRKPT", 2: "TRAP_TRACE", 3: "TRAP_BRANCH", 4: "TRAP_HWBKPT", 5: "TRAP_UNK", 6: "TRAP_PERF"}
	busCodes  = [...]string{1: "BUS_ADRALN", 2: "BUS_ADRERR", 3: "BUS_OBJERR", 4: "BUS_MCEERR_AR", 5: "BUS_MCEERR_AO"}
	fpeCodes  = [...]string{1: "FPE_INTDIV", 2: "FPE_INTOVF", 3: "FPE_FLTDIV", 4: "FPE_FLTOVF", 5: "FPE_FLTUND", 6: "FPE_FLTRES", 7: "FPE_FLTINV", 8: "FPE_FLTSUB"}
	segvCodes = [...]string{1: "SEGV_MAPERR", 2: "SEGV_ACCERR", 3: "SEGV_BNDERR", 4: "SEGV_PKUERR", 5: "SEGV_ACCADI", 6: "SEGV_ADIDERR", 7: "SEGV_ADIPERR", 8: "SEGV_MTEAERR", 9: "SEGV_MTESERR", 10: "SEGV_CPERR"}
)

func codeNames(sig int) []string {
	switch sig {
	case 4:
		return illCodes[:]
	case 5:
		return trapCodes[:]
	case 7:
		return busCodes[:]
	case 8:
		return fpeCodes[:]
	case 11:
		return segvCodes[:]
	}
	return nil
}

// genericCode names the codes of signals sent by a process or the kernel,
// for every signal.
func genericCode(code int) string {
	switch code {
	case 0:
		return "SI_USER"
	case 0x80:
		return "SI_KERNEL"
	case -1:
		return "SI_QUEUE"
	case -2:
		return "SI_TIMER"
	case -3:
		return "SI_MESGQ"
	case -4:
		return "SI_ASYNCIO"
	case -5:
		return "SI_SIGIO"
	case -6:
		return "SI_TKILL"
	case -7:
		return "SI_DETHREAD"
	case -60:
		return "SI_ASYNCNL"
	}
	return ""
}

// CodeName names a si_code for a signal, "" when unknown.
func CodeName(sig, code int) string {
	if code > 0 && code < 0x80 {
		if names := codeNames(sig); code < len(names) {
			return names[code]
		}
		return ""
	}
	return genericCode(code)
}

// HasFaultAddr reports whether si_addr is meaningful for the signal and code.
func HasFaultAddr(sig, code int) bool {
	switch sig {
	case 4, 5, 7, 8, 11:
		return code > 0 && code < 0x80
	}
	return false
}

// MaskToPage keeps only the 4 KiB page of a fault address
// (handler.mask_fault_addr): enough to tell a NULL dereference or a guard
// page from a wild pointer, without the pointer's low bits.
func MaskToPage(a Hex) Hex { return a &^ 0xfff }
