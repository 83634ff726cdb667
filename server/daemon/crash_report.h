/*
 * crash_report: what kvd leaves behind when it dies of a fatal signal.
 *
 * On SIGSEGV, SIGBUS, SIGFPE, SIGILL or SIGABRT (an abort() of kvd's own fatal paths, a
 * libuv/LMDB assertion, glibc's heap checks) the handler writes one line to file descriptor 2
 *   kvd: fatal: signal 11 (SIGSEGV) at address 0x7ffd2c1e8ff8; stack follows (addr2line ...)
 * ("sent by pid N" instead of the address for a signal sent by kill(2), raise(3), abort(3))
 * then one frame per line (backtrace_symbols_fd(3): "kvd(+0x1a2b3)[0x55...]"; frame pointers
 * are kept in every build, so the walk reaches main), then restores the default action and
 * raises the signal again: the process still dies of it (exit status, core dump) as before.
 * Fd 2 is the process's stderr, which --log-outputs=stderr and every test launcher capture;
 * the handler does not go through the leveled log stream, whose buffers a crash may have
 * damaged. The handler runs on an alternate signal stack, so a stack overflow is reported too.
 *
 * Under AddressSanitizer the sanitizer's own handlers report better (source lines, the
 * allocation history): kv_crash_report_install() then installs nothing and returns 1.
 *
 * Threads: install once from main() before other threads start; the handler runs on whichever
 * thread faulted and uses only async-signal-safe calls (backtrace(3) is loaded at install, so
 * it does not allocate in the handler). Ownership: the alternate stack is allocated once and
 * kept for the life of the process.
 */
#ifndef KV_CRASH_REPORT_H
#define KV_CRASH_REPORT_H

/* Returns 0 (installed), 1 (sanitizer build: nothing installed) or a negative errno. */
int kv_crash_report_install(void);

#endif
