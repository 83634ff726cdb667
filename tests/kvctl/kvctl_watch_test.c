/*
 * kvctl vs etcdctl 3.4 for watch, lock and elect: each scenario runs
 * once with each tool against a fresh server (see harness.h) and the outputs must match.
 * History is replayed with --rev so event output does not depend on timing; the steps that
 * wait for another process poll for its output (bounded) instead of sleeping blindly.
 * Against a kvd without the Watch service, etcdctl and kvctl both report the
 * UNIMPLEMENTED Watch ("watch was canceled (...)") and the comparison of the event lines
 * fails: expected until the merge.
 */
#include <criterion/criterion.h>

#include "harness.h"

#define N(a) (sizeof(a) / sizeof((a)[0]))

/* Polls up to 10 s for a pattern in a file. */
#define WAIT_FOR(pat, file)                                                                        \
    "for i in $(seq 100); do grep -q '" pat "' " file " 2>/dev/null && break; sleep 0.1; done; "

/* Runs watch command line `cmd` (a string literal) in the background as job `i`: its
 * stdout, stderr and exit status end up in $W/o<i>, $W/e<i>. The jobs of one step run
 * concurrently, so the step costs one timeout, not one per watch. */
#define JOB(i, cmd) "(timeout 3 " cmd " > $W/o" #i " 2> $W/e" #i "; echo rc=$? >> $W/o" #i ") & "
#define SHOW(n)                                                                                    \
    "wait; for i in $(seq " #n "); do echo \"== $i\"; cat $W/o$i; echo '-- stderr'; "              \
    "cat $W/e$i; done"

Test(kvctl_watch, history_and_formats)
{
    static const struct h_step steps[] = {
        {"$CTL put wk 1 && $CTL put wk2 2 && $CTL del wk && $CTL put wk 'x y' && $CTL put wl 9", 0},
        {JOB(1, "$CTL watch wk --rev 1") JOB(2, "$CTL watch wk --rev 1 --prev-kv")
             JOB(3, "$CTL watch wk --prefix --rev 1") JOB(4, "$CTL watch wk wl --rev 3")
                 JOB(5, "$CTL watch '' --prefix --rev 5 -w json")
                     JOB(6, "$CTL watch wk --rev 4 --prev-kv -w fields")
                         JOB(7, "$CTL watch wk --rev 2 --hex") JOB(8, "$CTL watch wk -w table")
                             JOB(9, "$CTL watch wk --rev 2 -w table")
                                 JOB(10, "env ETCDCTL_WATCH_KEY=wk $CTL watch --rev 5")
                                     JOB(11, "$CTL watch wk --rev 1 -- sh -c 'echo "
                                             "$ETCD_WATCH_EVENT_TYPE $ETCD_WATCH_KEY "
                                             "$ETCD_WATCH_VALUE $ETCD_WATCH_REVISION'")
                                         JOB(12, "$CTL watch wk --rev 2 -w protobuf")
                                             SHOW(12) " | od -c",
         0},
        {"$CTL compaction 4 >/dev/null; " JOB(1, "$CTL watch wk --rev 2")
             JOB(2, "$CTL watch wk --rev 2 -w json") JOB(3, "$CTL watch wk --rev 4") SHOW(3),
         0},
    };
    h_compare(steps, N(steps));
}

Test(kvctl_watch, bad_arguments)
{
    static const struct h_step steps[] = {
        {"$CTL watch", 0},
        {"$CTL watch a b --prefix", 0},
        {"$CTL watch a --", 0},
        {"ETCDCTL_WATCH_KEY=a $CTL watch b", 0},
        {"ETCDCTL_WATCH_RANGE_END=b $CTL watch a", 0},
        {"$CTL watch a --rev x", 0},
    };
    h_compare(steps, N(steps));
}

Test(kvctl_watch, live_events_and_interactive)
{
    static const struct h_step steps[] = {
        /* a live watcher sees puts made after it started */
        {"$CTL watch live --prefix > $W/o 2>&1 & p=$!; sleep 1; $CTL put live/a 1 >/dev/null; "
         "$CTL del live/a >/dev/null; " WAIT_FOR("DELETE", "$W/o") "kill $p; cat $W/o",
         0},
        /* interactive: watch lines, invalid lines, progress, then EOF (exit 3) */
        {"(echo 'watch wk --rev 1'; echo 'bogus x'; echo ''; echo 'watch'; "
         "echo 'watch b c --prefix'; sleep 1) | $CTL watch -i",
         0},
        {"$CTL put wk v >/dev/null; (echo 'watch wk'; sleep 1; echo progress; sleep 1) | "
         "$CTL watch -i",
         0},
    };
    h_compare(steps, N(steps));
}

Test(kvctl_lock, lock_and_exec)
{
    static const struct h_step steps[] = {
        {"$CTL lock L -- sh -c 'echo ${ETCD_LOCK_KEY#L/} >> $W/leases; echo $ETCD_LOCK_KEY "
         "$ETCD_LOCK_REV'",
         0},
        {"$CTL lock L -- false", 0},
        /* no such command: etcdctl's exec.LookPath error alone, exit 1 (client/kvctl/spawn.c) */
        {"$CTL lock L -- no-such-command-kvt; echo rc=$?", 0},
        {"$CTL put wx 1 >/dev/null; $CTL watch wx --rev 1 -- no-such-command-kvt; echo rc=$?", 0},
        /* a path is started without a search: os.StartProcess's error, the errno as Go spells
         * it (no such file, a file without the exec bit) */
        {"$CTL lock L -- /no/such-command-kvt; echo rc=$?; $CTL lock L -- /etc/hostname; echo "
         "rc=$?",
         0},
        {"$CTL watch wx --rev 1 -- /no/such-command-kvt; echo rc=$?; "
         "$CTL watch wx --rev 1 -- /etc/hostname; echo rc=$?",
         0},
        /* a command killed by a signal: Go's ExitError text */
        {"$CTL lock L -- sh -c 'kill -TERM $$'; echo rc=$?; "
         "$CTL watch wx --rev 1 -- sh -c 'kill -KILL $$'; echo rc=$?",
         0},
        {"$CTL lock", 0},
        /* the holder prints its key and releases it on SIGINT */
        {"$CTL lock L2 > $W/o 2>&1 & p=$!; " WAIT_FOR(
             "L2/", "$W/o") "head -1 $W/o | cut -d/ -f2 "
                            ">> $W/leases; $CTL get L2 --prefix --keys-only | cut -d/ -f1; kill "
                            "-INT $p; wait $p; "
                            "echo rc=$?; cat $W/o; $CTL get L2 --prefix --count-only 2>/dev/null | "
                            "grep -c L2",
         0},
        /* an older key under the prefix blocks the lock until it is deleted */
        {"$CTL put L3/0 x >/dev/null; $CTL lock L3 -- echo locked > $W/o 2>&1 & p=$!; sleep 1; "
         "echo before:; cat $W/o; $CTL del L3/0 >/dev/null; " WAIT_FOR(
             "locked", "$W/o") "wait $p; echo rc=$?; cat $W/o",
         0},
    };
    h_compare(steps, N(steps));
}

Test(kvctl_elect, campaign_observe_resign)
{
    static const struct h_step steps[] = {
        {"$CTL elect", 0},
        {"$CTL elect x", 0},
        {"$CTL elect -l x y", 0},
        {"$CTL put E/0 p0 >/dev/null; timeout 2 $CTL elect -l E; echo rc=$?", 0},
        /* p1 waits behind E/0, wins when it is deleted, resigns on SIGINT */
        {"$CTL elect E p1 > $W/o 2>&1 & p=$!; sleep 1; echo before:; cat $W/o; "
         "$CTL del E/0 >/dev/null; " WAIT_FOR(
             "p1",
             "$W/o") "head -1 $W/o | cut -d/ -f2 >> "
                     "$W/leases; cat $W/o; kill -INT $p; wait $p; echo rc=$?; $CTL get E --prefix",
         0},
        /* an observer follows the leader */
        {"timeout 4 $CTL elect -l E > $W/l 2>&1 & sleep 1; $CTL put E/1 a >/dev/null; "
         "$CTL put E/1 b >/dev/null; $CTL del E/1 >/dev/null; $CTL put E/2 c >/dev/null; "
         "wait; cat $W/l",
         0},
    };
    h_compare(steps, N(steps));
}
