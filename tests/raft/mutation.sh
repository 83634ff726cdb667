#!/bin/sh
# mutation.sh - build the raft core + simulator once per injected bug
# (RAFT_MUTATION=1..N, see raft/src/internal.h) and report the first seed of
# the simulated cluster that catches each mutant.  Not a ctest test.
#
#   tests/raft/mutation.sh [seeds=30000] [builddir=build-raft-mut]
#
# Each mutant is also run against the unit tests (test_unit.c, Criterion) and
# the failing unit tests are listed.
# Exit status 0 iff every mutant was caught by the simulation or a unit test.  Compiles directly with cc so it
# does not depend on the rest of the tree configuring.
set -u
SEEDS=${1:-30000}
SRC=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${2:-$SRC/build-raft-mut}
CC=${CC:-cc}
mkdir -p "$OUT"
NAMES="1:commit-previous-term-by-counting 2:skip-persisting-vote 3:no-log-up-to-date-check-in-vote 4:follower-keeps-conflicting-suffix 5:read-index-without-heartbeat-quorum 6:concurrent-config-changes"
status=0
for entry in $NAMES; do
    m=${entry%%:*}
    name=${entry#*:}
    bin="$OUT/raft_sim_mut$m"
    if ! $CC -std=c11 -O2 -g -Wall -Wextra -Werror -D_GNU_SOURCE -DRAFT_MUTATION="$m" \
        -I"$SRC/raft/include" "$SRC"/raft/src/*.c "$SRC/tests/raft/sim.c" \
        "$SRC/tests/raft/raft_sim_main.c" -o "$bin"; then
        echo "mutation $m ($name): BUILD FAILED"
        status=1
        continue
    fi
    ubin="$OUT/raft_unit_mut$m"
    unit="unit tests not built"
    if $CC -std=c11 -O2 -g -D_GNU_SOURCE -DRAFT_MUTATION="$m" -I"$SRC/raft/include" \
        "$SRC"/raft/src/*.c "$SRC/tests/raft/sim.c" "$SRC/tests/raft/test_unit.c" \
        -lcriterion -o "$ubin" 2>/dev/null; then
        unit=$("$ubin" --jobs 1 2>&1 | sed -n 's/^\[FAIL\] \([^:]*::[^:]*\):.*/\1/p' | sort -u | tr '\n' ' ')
        [ -n "$unit" ] || unit="none"
    fi
    res=$("$bin" 1 "$SEEDS" | tail -n 1)
    case "$res" in
    "seed "*) echo "mutation $m ($name): sim CAUGHT by $res; failing unit tests: $unit" ;;
    *)
        echo "mutation $m ($name): sim NOT caught in $SEEDS seeds; failing unit tests: $unit"
        [ "$unit" != "none" ] && [ "$unit" != "unit tests not built" ] || status=1
        ;;
    esac
done
exit $status
