/*
 * raft_sim_main.c - command-line driver for the simulated cluster, used by
 * mutation.sh and for replaying seeds with a trace.
 *
 *   raft_sim [first_seed] [count]      run seeds, stop at the first failure
 *   RAFT_SIM_TRACE=1 raft_sim <seed> 1 print a trace of one seed
 *
 * Exit status: 0 all passed, 1 a seed failed (its number is printed).
 */
#include "sim.h"

#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    unsigned long long first = argc > 1 ? strtoull(argv[1], NULL, 10) : 1;
    unsigned long long count = argc > 2 ? strtoull(argv[2], NULL, 10) : 1000;
    bool trace = getenv("RAFT_SIM_TRACE") != NULL;
    for (unsigned long long s = first; s < first + count; s++) {
        char err[256];
        if (sim_run_random(s, err, sizeof(err), trace) != 0) {
            printf("seed %llu FAILED: %s\n", s, err);
            return 1;
        }
    }
    printf("%llu seeds passed\n", count);
    return 0;
}
