/*
 * prof.h - a sampling CPU profiler for --enable-pprof: for kvd what Go's runtime/pprof CPU
 * profile is for etcd (docs/pprof.md).
 *
 * How: while a profile runs, ITIMER_PROF raises SIGPROF every 1/hz s of the process's CPU
 * time, and the kernel delivers it to the thread that used that time. The handler records
 * that thread's stack with glibc's backtrace() (DWARF unwinding: Debian's libraries, built
 * without frame pointers, unwind too) into a buffer allocated at start. kv_prof_stop() stops
 * the timer, symbolizes the stacks from the loaded objects' ELF symbol tables (.symtab, else
 * .dynsym) and encodes a pprof profile (perftools profile.proto, not gzipped: `go tool pprof`
 * and `pprof` read it as is) with Go's sample types, samples/count and cpu/nanoseconds.
 *
 * Contract:
 * - At most one profile per process (the timer and SIGPROF are process-wide): a second
 *   kv_prof_start() gets -EBUSY until the first is stopped.
 * - Bounded: the stack buffer is fixed at start (buf_bytes). Samples past it are dropped,
 *   counted, and named in the profile's comments; nothing else grows while sampling.
 * - ITIMER_PROF is saved at start and restored at stop. The SIGPROF handler, installed at
 *   the first start, stays: a tick still pending on another thread at stop then finds no
 *   profile and is dropped (SIGPROF's default action would end the process). kvd has no
 *   other user of either. SA_RESTART is set, so interrupted system calls restart; a sleep
 *   (nanosleep) may end early, as with any profiler of this kind.
 * - The kernel checks CPU timers at its tick (250 Hz on Debian's kernels): a rate above it
 *   undercounts. Go's 100 Hz is the default.
 * - Threads: start and stop may be called from any thread, but not concurrently for one
 *   profile. The handler runs on whichever thread the kernel picks.
 * - Ownership: kv_prof_start() returns the profile; kv_prof_stop() and kv_prof_discard()
 *   free it.
 */
#ifndef KV_PROF_H
#define KV_PROF_H

#include <stddef.h>
#include <stdint.h>

typedef struct kv_prof kv_prof;

#define KV_PROF_DEFAULT_HZ 100               /* Go's runtime/pprof rate */
#define KV_PROF_DEFAULT_BUF_BYTES (8u << 20) /* ~ 60,000 samples of 16 frames */
#define KV_PROF_MAX_DEPTH 64

/* Starts a profile: hz in [1, 1000], buf_bytes in [4 KiB, 1 GiB]. Returns 0, -EINVAL,
 * -EBUSY (a profile is running), -ENOMEM, or -errno of sigaction/setitimer. */
int kv_prof_start(kv_prof **out, unsigned hz, size_t buf_bytes);

/* Stops p, encodes its profile into *pb (malloc'd; the caller frees it; *len its size) and
 * frees p. Returns 0 or -ENOMEM (p is freed all the same, *pb is NULL). */
int kv_prof_stop(kv_prof *p, uint8_t **pb, size_t *len);

/* Stops and frees p without encoding anything. */
void kv_prof_discard(kv_prof *p);

/* Samples taken and dropped (buffer full) so far; any thread. */
void kv_prof_counts(const kv_prof *p, uint64_t *taken, uint64_t *dropped);

#endif
