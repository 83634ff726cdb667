/*
 * test_sim.c - randomized simulated-cluster runs (see sim.h).
 *
 * RAFT_SIM_SEEDS=<n>  number of seeds (default 10000), starting at
 *                     RAFT_SIM_SEED_START (default 1).
 * RAFT_SIM_SEED=<n>   replay one seed (RAFT_SIM_TRACE=1 prints a trace).
 * Every failure prints its seed and the replay command.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>

#include "sim.h"

static unsigned long long env_ull(const char *name, unsigned long long def)
{
    const char *v = getenv(name);
    return v && *v ? strtoull(v, NULL, 10) : def;
}

Test(raft_sim, random_seeds, .timeout = 0)
{
    const char *one = getenv("RAFT_SIM_SEED");
    unsigned long long first =
        one ? env_ull("RAFT_SIM_SEED", 1) : env_ull("RAFT_SIM_SEED_START", 1);
    unsigned long long count = one ? 1 : env_ull("RAFT_SIM_SEEDS", 10000);
    bool trace = getenv("RAFT_SIM_TRACE") != NULL;
    const char *bd = getenv("KV_BUILD_DIR");
    unsigned failures = 0;
    for (unsigned long long s = first; s < first + count; s++) {
        char err[256];
        if (sim_run_random(s, err, sizeof(err), trace) != 0) {
            failures++;
            fprintf(stderr,
                    "raft sim seed %llu FAILED: %s\n  replay: RAFT_SIM_SEED=%llu "
                    "RAFT_SIM_TRACE=1 %s/tests/raft/raft_sim_test\n",
                    s, err, s, bd ? bd : "build");
            if (failures >= 10)
                break;
        }
    }
    cr_assert_eq(failures, 0, "%u simulated seeds failed (see stderr)", failures);
}
