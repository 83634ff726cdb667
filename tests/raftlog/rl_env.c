/* rl_env: see rl_env.h. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "rl_env.h"

static void env_open(rl_env *e)
{
    cr_assert_eq(mdb_env_create(&e->env), 0);
    cr_assert_eq(mdb_env_set_maxdbs(e->env, 4), 0);
    cr_assert_eq(mdb_env_set_mapsize(e->env, (size_t)256 << 20), 0);
    /* NOSYNC: the tests simulate restarts, not power loss; keeps them fast. */
    cr_assert_eq(mdb_env_open(e->env, e->dir, MDB_NOTLS | MDB_NOSYNC, 0600), 0);
}

void rl_env_init(rl_env *e)
{
    snprintf(e->dir, sizeof e->dir, "/tmp/kv_raftlog_XXXXXX");
    cr_assert_not_null(mkdtemp(e->dir));
    env_open(e);
}

void rl_env_reopen(rl_env *e)
{
    mdb_env_close(e->env);
    env_open(e);
}

void rl_env_fini(rl_env *e)
{
    char p[128];
    if (e->env)
        mdb_env_close(e->env);
    e->env = NULL;
    snprintf(p, sizeof p, "%s/data.mdb", e->dir);
    unlink(p);
    snprintf(p, sizeof p, "%s/lock.mdb", e->dir);
    unlink(p);
    rmdir(e->dir);
}

void rl_log_open(rl_log *g)
{
    cr_assert_eq(kv_raftlog_open(&g->l, g->e.env), 0);
    g->st = kv_raftlog_storage(g->l);
}

void rl_log_init(rl_log *g)
{
    rl_env_init(&g->e);
    rl_log_open(g);
}

void rl_log_reopen(rl_log *g)
{
    kv_raftlog_close(g->l);
    rl_env_reopen(&g->e);
    rl_log_open(g);
}

void rl_log_fini(rl_log *g)
{
    kv_raftlog_close(g->l);
    rl_env_fini(&g->e);
}
