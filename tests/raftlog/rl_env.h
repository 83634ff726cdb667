/* rl_env: a throw-away LMDB environment in a temp directory for the raftlog tests. */
#ifndef KV_TESTS_RL_ENV_H
#define KV_TESTS_RL_ENV_H

#include <lmdb.h>

#include "raftlog/raftlog.h"

typedef struct rl_env {
    char dir[64];
    MDB_env *env;
} rl_env;

/* Creates the directory and opens the environment (asserts on failure). */
void rl_env_init(rl_env *e);
/* Closes and reopens the environment over the same directory. */
void rl_env_reopen(rl_env *e);
/* Closes the environment and removes the directory. */
void rl_env_fini(rl_env *e);

/* A raft log over a fresh rl_env and its storage vtable: the fixture of the raftlog tests. */
typedef struct rl_log {
    rl_env e;
    kv_raftlog *l;
    const struct raft_storage *st;
} rl_log;

/* Creates the environment and opens the log (asserts on failure). */
void rl_log_init(rl_log *g);
/* Opens the log over the (open) environment again, e.g. after a test changed its databases. */
void rl_log_open(rl_log *g);
/* Closes the log, reopens the environment and the log. */
void rl_log_reopen(rl_log *g);
/* Closes the log and removes the environment. */
void rl_log_fini(rl_log *g);

#endif
