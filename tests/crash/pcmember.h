/*
 * pcmember: start a kvd member (any kv_it_server: a single member or one of a cluster) under
 * the powercut shim, so that a later kv_pc_replay() can take away what a power loss would.
 *
 * Contract: same as kv_it_server_start (bounded by ready_timeout_ms, 0 or a negative errno;
 * -ECHILD when the process exited, e.g. because kill_at fell inside its startup). The shim
 * tracks m->data_dir and journals into `journal` (a path outside the data dir; truncated).
 * kill_at 0: no self-cut; N: the member SIGKILLs itself as its N-th tracked file operation
 * starts. The shim applies to this start only: the caller's environment is restored (the
 * variables are set around the fork, so do not start members from two threads at once).
 * Threads: the caller's; not thread-safe (it edits the process environment).
 */
#ifndef KV_PC_MEMBER_H
#define KV_PC_MEMBER_H

#include <stdint.h>

#include "harness.h"

/* Path of libkvd_powercut.so in this build. */
const char *kv_pc_shim_path(void);

int kv_pc_member_start(kv_it_server *m, const char *journal, uint64_t kill_at,
                       uint32_t ready_timeout_ms);

#endif
