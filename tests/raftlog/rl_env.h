/* rl_env: a throw-away LMDB environment in a temp directory for the raftlog tests. */
#ifndef KV_TESTS_RL_ENV_H
#define KV_TESTS_RL_ENV_H

#include <lmdb.h>

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

#endif
