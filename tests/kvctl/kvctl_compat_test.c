/*
 * kvctl vs etcdctl 3.4: every command, flag and output format kvctl supports is run with both
 * tools against identical fresh servers; stdout, stderr ("Error: ..." lines) and exit status
 * must match byte for byte after normalising lease ids, latencies and (for endpoint status) db
 * sizes and raft indexes. See harness.h.
 */
#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

#define N(a) (sizeof(a) / sizeof((a)[0]))

/* Builds steps "$CTL <args> -w <fmt>" for each args x fmt; the strings are heap-allocated
 * (free_steps()). */
static size_t cross(struct h_step *out, size_t at, const char *const *args, size_t n,
                    const char *const *fmts, size_t nf, unsigned norm)
{
    for (size_t i = 0; i < n; i++) {
        for (size_t f = 0; f < nf; f++) {
            char *s = NULL;
            cr_assert(asprintf(&s, "$CTL %s -w %s", args[i], fmts[f]) > 0);
            out[at].sh = s;
            out[at].norm = norm;
            at++;
        }
    }
    return at;
}

/* Frees the heap-allocated step strings in steps[from..n). */
static void free_steps(struct h_step *steps, size_t from, size_t n)
{
    for (size_t i = from; i < n; i++)
        free((char *)steps[i].sh);
}

static const char *const all_fmts[] = {"simple", "json", "table"};
static const char *const text_fmts[] = {"simple", "json", "fields"};

/* Binary protobuf output is compared as hex. */
#define PB(cmd) "$CTL " cmd " -w protobuf > $W/pb; s=$?; od -An -tx1 $W/pb; exit $s"

Test(kvctl, put)
{
    static const struct h_step steps[] = {
        {"$CTL put foo bar", 0},
        {"$CTL put foo bar -w json", 0},
        {"$CTL put foo bar -w table", 0},
        {"$CTL put foo baz --prev-kv", 0},
        {"$CTL put foo qux --prev-kv -w json", 0},
        {"$CTL put foo --ignore-value --prev-kv", 0},
        {"$CTL put foo --ignore-value --prev-kv -w json", 0},
        {"printf 'from stdin\\nline 2\\n' | $CTL put fromstdin", 0},
        {"$CTL get fromstdin -w json", 0},
        {"$CTL put nostdin", 0},
        {"$CTL put", 0},
        {"$CTL put a b --ignore-value", 0},
        {"$CTL put a b --lease=zz", 0},
        {"$CTL put a b --lease=1234", 0},
        {"$CTL put a b --lease=1234 -w json", 0},
        {"$CTL put -- k -dashvalue", 0},
        {"$CTL get k", 0},
        {"$CTL put '' v", 0},
        {"$CTL put 'sp ace' 'a\"b<&>\\'", 0},
        {"$CTL get 'sp ace'", 0},
        {"$CTL get 'sp ace' -w json", 0},
        {"$CTL put bin \"$(printf 'x\\001\\377y')\"", 0},
        {"$CTL get bin --hex", 0},
        {"$CTL get bin --hex -w json", 0},
        {"$CTL put foo again --ignore-lease -w json", 0},
        {"$CTL put foo f1 -w fields", 0},
        {"$CTL put foo 'f\\2\"' --prev-kv -w fields", 0},
        {PB("put foo p1 --prev-kv"), 0},
    };
    h_compare(steps, N(steps));
}

Test(kvctl, get)
{
    static const char *const args[] = {
        "get a",
        "get a c",
        "get a --prefix",
        "get '' --prefix",
        "get b --from-key",
        "get '' --from-key",
        "get '' --prefix --limit 2",
        "get '' --prefix --limit=1 --keys-only",
        "get a --rev 2",
        "get a --rev=3",
        "get '' --prefix --keys-only",
        "get '' --prefix --sort-by=VALUE",
        "get '' --prefix --sort-by=value --order=DESCEND",
        "get '' --prefix --sort-by=CREATE --order=ASCEND",
        "get '' --prefix --sort-by=MODIFY --order=descend",
        "get '' --prefix --sort-by=VERSION --order=DESCEND",
        "get '' --prefix --sort-by=KEY --order=DESCEND",
        "get '' --prefix --order=DESCEND",
        "get '' --prefix --consistency=s",
        "get '' --prefix --consistency=l --hex",
        "get missing",
        "get a --print-value-only",
        "get '' --prefix --print-value-only",
    };
    static const char *const errs[] = {
        "$CTL get",
        "$CTL get a c --prefix",
        "$CTL get a --from-key x",
        "$CTL get a --prefix --from-key",
        "$CTL get a --consistency=x",
        "$CTL get a --order=UP",
        "$CTL get a --sort-by=SIZE",
        "$CTL get a --print-value-only -w json",
        "$CTL get a -w table",
        "$CTL get ''",
        "$CTL get a --rev 1000",
        "$CTL get a --limit=-1 -w json",
    };
    static const char *const setup[] = {
        "$CTL put a 1",  "$CTL put b 2",  "$CTL put c 3",
        "$CTL put ab x", "$CTL put b 22", "$CTL put abc z",
    };
    static const char *const pbs[] = {
        PB("get a"),
        PB("get '' --prefix --limit 2"),
        PB("put a 5 --prev-kv"),
        PB("del ab --prev-kv"),
        PB("get a --rev=1000"),
    };
    struct h_step steps[N(setup) + N(args) * N(text_fmts) + N(errs) + N(pbs)];
    size_t n = 0;
    for (size_t i = 0; i < N(setup); i++)
        steps[n++] = (struct h_step){setup[i], 0};
    size_t from = n;
    n = cross(steps, n, args, N(args), text_fmts, N(text_fmts), 0);
    size_t to = n;
    for (size_t i = 0; i < N(errs); i++)
        steps[n++] = (struct h_step){errs[i], 0};
    for (size_t i = 0; i < N(pbs); i++)
        steps[n++] = (struct h_step){pbs[i], 0};
    h_compare(steps, n);
    free_steps(steps, from, to);
}

Test(kvctl, del)
{
    static const struct h_step steps[] = {
        {"for k in a b c d ab abc x1 x2 y z; do $CTL put $k v$k >/dev/null; done", 0},
        {"$CTL del a", 0},
        {"$CTL del a -w json", 0},
        {"$CTL del b --prev-kv", 0},
        {"$CTL del c --prev-kv -w json", 0},
        {"$CTL del ab --prefix --prev-kv", 0},
        {"$CTL del x1 x3 -w json", 0},
        {"$CTL del y --from-key --prev-kv -w json", 0},
        {"$CTL del d -w table", 0},
        {"$CTL get '' --prefix", 0},
        {"$CTL put q 1 >/dev/null; $CTL del '' --prefix", 0},
        {"$CTL put q 1 >/dev/null; $CTL del '' --from-key -w json", 0},
        {"$CTL del", 0},
        {"$CTL del a b c", 0},
        {"$CTL del a b --prefix", 0},
        {"$CTL del a --prefix --from-key", 0},
        {"$CTL del ''", 0},
        {"$CTL put d1 x >/dev/null; $CTL del d1 --prev-kv -w fields", 0},
        {"$CTL put d1 x >/dev/null; " PB("del d --prefix --prev-kv"), 0},
    };
    h_compare(steps, N(steps));
}

Test(kvctl, txn)
{
    static const char *const txns[] = {
        /* success path with every op kind */
        "printf 'value(\"k1\") = \"v1\"\\n\\nput k2 v2\\nget k1\\ndel k9 --prev-kv\\nget k "
        "--prefix\\n\\nput k3 v3\\n\\n' | $CTL txn",
        /* failure path */
        "printf 'value(\"k1\") != \"v1\"\\n\\nput k2 v2\\n\\nput k3 v3 --prev-kv\\nget "
        "\"k1\"\\ndel k2 --prev-kv\\n\\n' | $CTL txn",
        /* every compare target and operator */
        "printf 'mod(\"k1\") > \"1\"\\ncreate(\"k1\") < \"100000\"\\nver(\"k1\") = "
        "\"1\"\\nc(\"k2\") != \"0\"\\nm(\"k3\") = \"0\"\\nversion(\"nokey\") = \"0\"\\nval(\"k1\") "
        "= \"v1\"\\n\\nget k --prefix --keys-only --limit=1\\nput \"sp ace\" \"x "
        "y\"\\nget \"sp ace\"\\nget k --prefix --sort-by=VALUE --order=DESCEND "
        "--keys-only\\n\\n\\n' "
        "| $CTL txn",
        /* empty txn */
        "printf '\\n\\n\\n' | $CTL txn",
        /* leading and trailing spaces are trimmed */
        "printf '  value(\"k1\") = \"v1\"  \\n   \\n  put k4 v4  \\n\\n\\n' | $CTL txn",
    };
    static const char *const bad[] = {
        "printf 'value(\"k1\") = \"v1\"\\n\\n' | $CTL txn",          /* EOF */
        "printf '' | $CTL txn",                                      /* EOF */
        "printf 'bogus\\n\\n\\n\\n' | $CTL txn",                     /* malformed */
        "printf 'value(\"k1) = \"v1\"\\n\\n\\n\\n' | $CTL txn",      /* malformed */
        "printf 'size(\"k1\") = \"1\"\\n\\n\\n\\n' | $CTL txn",      /* unknown target */
        "printf 'version(\"k1\") = \"x\"\\n\\n\\n\\n' | $CTL txn",   /* bad number */
        "printf '\\nfoo bar\\n\\n\\n' | $CTL txn",                   /* unknown op */
        "printf '\\nput\\n\\n\\n' | $CTL txn",                       /* too short */
        "printf '\\nput k\\n\\n\\n' | $CTL txn",                     /* no value */
        "printf '\\nget k --prefix --from-key\\n\\n\\n' | $CTL txn", /* get validation */
        "printf '\\nput k2 a\\ndel k2\\n\\n\\n' | $CTL txn",         /* duplicate key */
        "printf '\\n\\n\\n' | $CTL txn -w table",                    /* no table printer */
        "$CTL txn extra",
        "printf 'value(\"k1\") = \"v1\"\\n' | $CTL txn", /* no newline at end */
    };
    struct h_step steps[1 + N(txns) * 6 + N(bad)];
    size_t n = 0;
    steps[n++] = (struct h_step){"$CTL put k1 v1", 0};
    for (size_t i = 0; i < N(txns); i++) {
        static const char *const suffix[] = {
            "", " -w json", " -i", " -i -w json", " -w fields", " -w protobuf | od -An -tx1"};
        for (size_t s = 0; s < 6; s++) {
            char *sh = NULL;
            cr_assert(asprintf(&sh, "%s%s", txns[i], suffix[s]) > 0);
            steps[n++] = (struct h_step){sh, 0};
        }
    }
    size_t to = n;
    for (size_t i = 0; i < N(bad); i++)
        steps[n++] = (struct h_step){bad[i], 0};
    h_compare(steps, n);
    free_steps(steps, 1, to);
}

Test(kvctl, compaction)
{
    static const struct h_step steps[] = {
        {"for v in 1 2 3 4 5; do $CTL put a $v >/dev/null; done", 0},
        {"$CTL compaction 3", 0},
        {"$CTL compaction 3", 0},
        {"$CTL get a --rev=2", 0},
        {"$CTL get a --rev=3 -w json", 0},
        {"$CTL compaction 4 --physical -w json", 0},
        {"$CTL compaction 5 -w table", 0},
        {"$CTL compaction 1000", 0},
        {"$CTL compaction x", 0},
        {"$CTL compaction", 0},
        {"$CTL compaction 1 2", 0},
    };
    h_compare(steps, N(steps));
}

Test(kvctl, cluster)
{
    static const char *const cmds[] = {"member list", "endpoint status", "endpoint health",
                                       "endpoint status --cluster", "endpoint health --cluster"};
    static const unsigned norms[] = {0, H_NORM_DB, H_NORM_TOOK | H_NORM_TABLE, H_NORM_DB,
                                     H_NORM_TOOK | H_NORM_TABLE};
    static const char *const more_fmts[] = {"fields", "protobuf | od -An -tx1"};
    struct h_step steps[N(cmds) * 5 + 8];
    size_t n = 0;
    for (size_t i = 0; i < N(cmds); i++)
        n = cross(steps, n, &cmds[i], 1, all_fmts, N(all_fmts), norms[i]);
    n = cross(steps, n, &cmds[0], 1, more_fmts, N(more_fmts), 0);
    n = cross(steps, n, &cmds[1], 1, more_fmts, 1, H_NORM_DB);
    n = cross(steps, n, &cmds[2], 1, more_fmts, N(more_fmts), H_NORM_TOOK);
    size_t to = n;
    steps[n++] = (struct h_step){"$TOOL --endpoints=$EP,$EP endpoint status -w table", H_NORM_DB};
    steps[n++] =
        (struct h_step){"$TOOL --endpoints=$EP --endpoints=$EP endpoint status", H_NORM_DB};
    steps[n++] = (struct h_step){"$TOOL --endpoints $EP,$EP endpoint health -w json", H_NORM_TOOK};
    steps[n++] = (struct h_step){"ETCDCTL_ENDPOINTS=$EP $TOOL member list", 0};
    steps[n++] = (struct h_step){"$CTL member list -w fields2", 0};
    steps[n++] = (struct h_step){"$CTL endpoint st", H_NORM_DB};
    steps[n++] =
        (struct h_step){"$CTL put x y >/dev/null; $CTL endpoint status -w json", H_NORM_DB};
    steps[n++] = (struct h_step){"$CTL endpoint status", H_NORM_DB};
    h_compare(steps, n);
    free_steps(steps, 0, to);
}

Test(kvctl, unreachable, .timeout = 120)
{
    static const struct h_step steps[] = {
        {"$TOOL --endpoints=127.0.0.1:1 --dial-timeout=1s --command-timeout=1s get a", 0},
        {"$TOOL --endpoints=127.0.0.1:1 --dial-timeout=1s --command-timeout=1s put a b", 0},
        {"$TOOL --endpoints=127.0.0.1:1 --dial-timeout=1s --command-timeout=1s member list", 0},
        {"$TOOL --endpoints=127.0.0.1:1 --dial-timeout=1s --command-timeout=1s endpoint health",
         H_NORM_TOOK},
        {"$TOOL --endpoints=127.0.0.1:1 --dial-timeout=1s --command-timeout=1s endpoint health "
         "-w json",
         H_NORM_TOOK},
        {"$TOOL --endpoints=127.0.0.1:1 --dial-timeout=1s --command-timeout=1s endpoint status", 0},
        {"$TOOL --endpoints=127.0.0.1:1 --dial-timeout=1s --command-timeout=1s endpoint status "
         "-w json",
         0},
        {"$TOOL --endpoints=127.0.0.1:1 --dial-timeout=1s --command-timeout=1s endpoint status "
         "-w table",
         0},
        {"$TOOL --endpoints=127.0.0.1:1,$EP --dial-timeout=1s --command-timeout=1s endpoint "
         "health -w table",
         H_NORM_TOOK | H_NORM_TABLE},
    };
    h_compare(steps, N(steps));
}

#define GRANT_SIMPLE(ttl)                                                                          \
    "$CTL lease grant " ttl " > $W/g; s=$?; cat $W/g; cut -d' ' -f2 $W/g >> $W/leases; exit $s"
#define GRANT_JSON(ttl)                                                                            \
    "$CTL lease grant " ttl " -w json > $W/g; s=$?; cat $W/g; "                                    \
    "printf '%016x\\n' $(sed -E 's/.*\"ID\":([0-9]+).*/\\1/' $W/g) >> $W/leases; exit $s"
#define L1 "$(sed -n 1p $W/leases)"
#define L2 "$(sed -n 2p $W/leases)"

Test(kvctl, lease)
{
    static const struct h_step steps[] = {
        {GRANT_SIMPLE("1000"), 0},
        {GRANT_JSON("1000"), 0},
        {"$CTL put k1 v1 --lease=" L1, 0},
        {"$CTL put k2 v2 --lease=" L2 " -w json",
         0}, /* one key per lease: etcd lists attached keys in map order */
        {"$CTL put k3 v3 --lease=" L2, 0},
        {"$CTL get k --prefix -w json", 0},
        {"$CTL lease timetolive " L1, H_NORM_TTL},
        {"$CTL lease timetolive " L1 " -w json", H_NORM_TTL},
        {"$CTL lease timetolive " L1 " -w table", H_NORM_TTL},
        {"$CTL lease timetolive " L1 " --keys", H_NORM_TTL},
        {"$CTL lease timetolive --keys " L1 " -w json", H_NORM_TTL},
        {"$CTL lease timetolive 1234", 0},
        {"$CTL lease timetolive 1234 --keys -w json", 0},
        {"$CTL lease list", 0},
        {"$CTL lease list -w json", 0},
        {"$CTL lease list -w table", 0},
        {"$CTL lease keep-alive --once " L1, 0},
        {"$CTL lease keep-alive --once " L1 " -w json", 0},
        {"$CTL lease keep-alive --once " L1 " -w table", 0},
        {"$CTL lease keep-alive --once 1234", 0},
        {"$CTL lease keep-alive --once zz", 0},
        {"$CTL put k1 v1b --ignore-lease -w json", 0},
        {"$CTL put k3 v3b -w json", 0},
        {"$CTL lease timetolive " L2 " --keys", H_NORM_TTL},
        {"$CTL lease revoke " L1, 0},
        {"$CTL get k --prefix", 0},
        {"$CTL lease revoke " L1, 0},
        {"$CTL lease revoke " L2 " -w json", 0},
        {"$CTL lease timetolive " L1 " --keys -w json", 0},
        {"$CTL lease timetolive " L1, 0},
        {"$CTL lease list", 0},
        {"$CTL lease list -w json", 0},
        {"$CTL lease revoke 1234 -w json", 0},
        {"$CTL lease revoke zz", 0},
        {"$CTL lease revoke", 0},
        {"$CTL lease revoke 1 2", 0},
        {"$CTL lease grant", 0},
        {"$CTL lease grant x", 0},
        {"$CTL lease timetolive", 0},
        {"$CTL lease keep-alive", 0},
        {"$CTL put k5 v --lease=" L1, 0},
        {GRANT_SIMPLE("1000"), 0},
        {"$CTL put k6 v --lease=$(sed -n 3p $W/leases) >/dev/null; $CTL lease timetolive "
         "$(sed -n 3p $W/leases) --keys -w fields",
         H_NORM_TTL},
        {"$CTL lease keep-alive --once $(sed -n 3p $W/leases) -w fields", 0},
        {"$CTL lease list -w fields", 0},
        {PB("lease list"), 0},
        {PB("lease keep-alive --once $(sed -n 3p $W/leases)"), 0},
        {PB("lease timetolive $(sed -n 3p $W/leases)"), 0},
        {"$CTL lease revoke $(sed -n 3p $W/leases) -w fields", 0},
        {"$CTL lease grant 100 -w fields | grep -v '\"ID\"'", 0},
        {"$CTL lease grant 100 -w table", 0},
    };
    h_compare(steps, N(steps));
}

Test(kvctl, keepalive_stream, .timeout = 120)
{
    static const struct h_step steps[] = {
        {GRANT_SIMPLE("6"), 0},
        /* keep the lease alive in the background, revoke it, and compare the distinct lines */
        {"($CTL lease keep-alive " L1 " > $W/ka; echo rc=$? >> $W/ka) & sleep 2.5; "
         "$CTL lease revoke " L1 " >/dev/null; wait; sort -u $W/ka",
         0},
        {GRANT_SIMPLE("6"), 0},
        {"($CTL lease keep-alive " L2 " -w json > $W/ka; echo rc=$? >> $W/ka) & sleep 2.5; "
         "$CTL lease revoke " L2 " >/dev/null; wait; "
         /* the term too: a fresh member's first election can take two terms when its vote's
          * flush is slow (a loaded machine), and the two tools run on two fresh members */
         "sed -E 's/\"(revision|raft_term)\":[0-9]+,//g' $W/ka | "
         "sort -u",
         0},
        /* an unknown lease ends at once */
        {"$CTL lease keep-alive 1234", 0},
    };
    h_compare(steps, N(steps));
}

Test(kvctl, errors)
{
    static const struct h_step steps[] = {
        {"$CTL bogus", 0},
        {"$CTL get a -w xml", 0},
        {"$CTL put a b -w protobuf2", 0},
        {"$CTL lease timetolive 1234 -w yaml", 0},
        {"$CTL put a b c -w json", 0},
        {"$CTL get a --bogus", 0},
        {"$CTL get a --limit=x", 0},
        {"$CTL lease grant -5", 0},
        {"$CTL put --lease", 0},
        {"$CTL txn -x", 0},
        {"$CTL lease list --keys", 0},
        {"$CTL get --help", 0},
        {"$CTL put -h", 0},
        {"$CTL del --help", 0},
        {"$CTL txn --help", 0},
        {"$CTL compaction --help", 0},
        {"$CTL endpoint health --help", 0},
        {"$CTL endpoint status --help", 0},
        {"$CTL member list --help", 0},
        {"$CTL lease grant --help", 0},
        {"$CTL lease revoke --help", 0},
        {"$CTL lease timetolive --help", 0},
        {"$CTL lease list --help", 0},
        {"$CTL lease keep-alive --help", 0},
        {"$CTL lease", 0},
        {"$CTL lease foo", 0},
        {"$CTL lease --bogus", 0},
        {"$CTL lease -h", 0},
        {"ETCDCTL_WRITE_OUT=json $CTL put a b", 0},
        {"ETCDCTL_HEX=true $CTL get a", 0},
        {"ETCDCTL_COMMAND_TIMEOUT=x $CTL get a", 0},
    };
    h_compare(steps, N(steps));
}
