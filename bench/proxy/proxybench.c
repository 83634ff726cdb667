/*
 * proxybench - agents with their own connections through P grpc-proxies in front of a
 * 3-member cluster, kvd (`kvd grpc-proxy start`) vs etcd 3.4 (`etcd grpc-proxy start`) in one
 * run. See bench/README.md, "Proxy (bench/proxy)".
 *
 *   proxybench [-k kvd|etcd|both] [-n agents] [-p proxies] [-L load_procs] [-t ttl_s]
 *              [-d window_s] [-l loop_threads] [-r repeats] [-i idle_put_s]
 *              [-N load_nice] [-Q proxy_nice] [-C members_cpu,others_cpu] [-P flag]
 *   proxybench load --endpoints=a,b,.. -n N -o offset -t ttl -l loops [-N nice] [-C cpu]
 *                                                                       (internal mode)
 *
 * Per server kind: a 3-member cluster (bench/cluster), P proxies each with --endpoints of all
 * three members, an ordinary client putting 20/s to the leader for idle_put_s (idle p99),
 * then L load processes (this binary, mode "load", RLIMIT_NOFILE raised to the hard limit)
 * each with N/L agents (own kvc_client, own lease of TTL t, one key on it, keepalive at
 * TTL/3) spread over the proxies round-robin. After every load process is READY and one
 * renewal period has passed, a window of d seconds measures: renewals answered (agents),
 * CPU (utime+stime of /proc/<pid>/stat) of the leader, the followers and the proxies, the
 * proxies' VmRSS against their idle VmRSS, the members' grpc_server_started_total
 * {grpc_method="LeaseKeepAlive"} delta (upstream keepalive streams opened; / P), the kvd
 * proxy's kvd_proxy_upstream_keepalive_streams gauge, and the ordinary client's put p99.
 * Renewal latency at the agent: libkvclient renews TTL/3 after each answer, so the interval
 * between two answers of one lease minus TTL/3 is that renewal's send->answer time (1 ms
 * buckets). Leases lost: KVC_KA_LOST events (server answered TTL 0 or no answer before the
 * deadline) plus agents whose setup failed, over the whole run.
 */
#include "cluster.h"
#include "pb_common.h"
#include "grpc_raw.h"
#include "harness.h"
#include "kvt_proc.h"
#include "kvt_util.h"

#include <kvclient.h>

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#define PB_MAX_PROXIES 8
#define PB_MAX_LOADS 16
#define PB_HIST_MS 30000 /* latency buckets of 1 ms */
#define PB_MAX_PUTS 20000
#define PB_PUT_PERIOD_MS 50

/* ---------------------------------------------------------------- common helpers */

/* Pins every thread of process pid (0: this one) to CPU cpu; threads it starts later inherit
 * the mask of the thread that starts them. 0 or a negative errno. */
static int pb_pin(pid_t pid, int cpu)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/task", pid ? (int)pid : (int)getpid());
    DIR *d = opendir(path);
    if (!d)
        return -errno;
    int rc = 0, n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        int tid = atoi(e->d_name);
        if (tid <= 0)
            continue;
        if (sched_setaffinity(tid, sizeof set, &set) != 0 && errno != ESRCH)
            rc = -errno;
        n++;
    }
    closedir(d);
    return rc ? rc : n ? 0 : -ESRCH;
}

static void pb_raise_nofile(int need)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return;
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
    if (need > 0 && rl.rlim_cur < (rlim_t)need)
        fprintf(stderr, "warning: RLIMIT_NOFILE hard limit %llu < %d needed\n",
                (unsigned long long)rl.rlim_cur, need);
}

/* ---------------------------------------------------------------- load mode */

struct pb_load;

struct pb_agent {
    kvc_client *c;
    kvc_keepalive *ka;
    struct pb_load *ld;
    uint64_t last_ms; /* last answer (written on the agent's I/O thread only) */
};

struct pb_load {
    const char *eps[PB_MAX_PROXIES];
    int n_eps, n, offset, ttl, loops, setup_threads;
    struct pb_agent *agents;
    kvc_loop_group **groups;
    atomic_int next;
    atomic_int setup_failed;
    atomic_int recording;
    atomic_llong responses;
    atomic_int lost;
    atomic_int lost_by_server; /* of lost: the server answered TTL 0 (else: no answer in time) */
    atomic_uint hist[PB_HIST_MS];
};

static void pb_on_event(void *arg, const kvc_ka_event *ev)
{
    struct pb_agent *a = arg;
    struct pb_load *ld = a->ld;
    if (ev->type != KVC_KA_RESPONSE) {
        atomic_fetch_add(&ld->lost, 1);
        if (ev->header.member_id != 0)
            atomic_fetch_add(&ld->lost_by_server, 1);
        return;
    }
    uint64_t now = pb_now_ms();
    atomic_fetch_add_explicit(&ld->responses, 1, memory_order_relaxed);
    if (a->last_ms && atomic_load_explicit(&ld->recording, memory_order_relaxed)) {
        int64_t lat = (int64_t)(now - a->last_ms) - (int64_t)ld->ttl * 1000 / 3;
        if (lat < 0)
            lat = 0;
        if (lat >= PB_HIST_MS)
            lat = PB_HIST_MS - 1;
        atomic_fetch_add_explicit(&ld->hist[lat], 1, memory_order_relaxed);
    }
    a->last_ms = now;
}

static int pb_setup_agent(struct pb_load *ld, int i)
{
    struct pb_agent *a = &ld->agents[i];
    const char *eps[1] = {ld->eps[(ld->offset + i) % ld->n_eps]};
    kvc_config cfg;
    kvc_config_default(&cfg);
    cfg.endpoints = eps;
    cfg.n_endpoints = 1;
    cfg.loop_group = ld->groups[i % ld->loops];
    kvc_error e;
    a->ld = ld;
    if (kvc_open(&a->c, &cfg, &e) != 0) {
        fprintf(stderr, "agent %d: open: %s\n", i, e.message);
        return -EIO;
    }
    kvc_lease_grant_result g;
    if (kvc_lease_grant(a->c, ld->ttl, 0, 0, 30000, &g, &e) != 0) {
        fprintf(stderr, "agent %d: grant: %s\n", i, e.message);
        return -EIO;
    }
    char key[32];
    snprintf(key, sizeof key, "pb/%07d", ld->offset + i);
    kvc_put_opts po = {.lease = g.id};
    if (kvc_put(a->c, key, strlen(key), "alive", 5, &po, 30000, NULL, &e) != 0) {
        fprintf(stderr, "agent %d: put: %s\n", i, e.message);
        return -EIO;
    }
    if (kvc_lease_keepalive(a->c, g.id, ld->ttl, pb_on_event, a, &a->ka, &e) != 0) {
        fprintf(stderr, "agent %d: keepalive: %s\n", i, e.message);
        return -EIO;
    }
    return 0;
}

static void *pb_setup_main(void *arg)
{
    struct pb_load *ld = arg;
    for (;;) {
        int i = atomic_fetch_add(&ld->next, 1);
        if (i >= ld->n)
            break;
        if (pb_setup_agent(ld, i) != 0)
            atomic_fetch_add(&ld->setup_failed, 1);
    }
    return NULL;
}

static int pb_split_eps(char *list, const char **eps, int cap)
{
    int n = 0;
    char *save = NULL;
    for (char *t = strtok_r(list, ",", &save); t && n < cap; t = strtok_r(NULL, ",", &save))
        eps[n++] = t;
    return n;
}

static int pb_load_main(int argc, char **argv)
{
    struct pb_load *ld = calloc(1, sizeof *ld);
    if (!ld)
        return 1;
    ld->ttl = 30;
    ld->loops = 2;
    ld->setup_threads = 16;
    char *eplist = NULL;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strncmp(a, "--endpoints=", 12)) {
            eplist = argv[i] + 12;
            continue;
        }
        if (!v)
            return 2;
        if (!strcmp(a, "-n"))
            ld->n = atoi(v);
        else if (!strcmp(a, "-o"))
            ld->offset = atoi(v);
        else if (!strcmp(a, "-t"))
            ld->ttl = atoi(v);
        else if (!strcmp(a, "-l"))
            ld->loops = atoi(v);
        else if (!strcmp(a, "-N")) {
            /* the agents' machines: on this shared box, below the members and proxies */
            if (setpriority(PRIO_PROCESS, 0, atoi(v)) != 0)
                return 1;
        } else if (!strcmp(a, "-C")) { /* before any thread: they all inherit it */
            if (atoi(v) >= 0 && pb_pin(0, atoi(v)) != 0)
                return 1;
        } else
            return 2;
        i++;
    }
    if (!eplist || ld->n <= 0 || ld->loops <= 0 || ld->ttl <= 0)
        return 2;
    ld->n_eps = pb_split_eps(eplist, ld->eps, PB_MAX_PROXIES);
    pb_raise_nofile(ld->n + 64);

    /* SIGUSR1: start the window; SIGUSR2: end it and print. Blocked before any thread. */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGUSR1);
    sigaddset(&set, SIGUSR2);
    pthread_sigmask(SIG_BLOCK, &set, NULL);

    ld->agents = calloc((size_t)ld->n, sizeof *ld->agents);
    ld->groups = calloc((size_t)ld->loops, sizeof *ld->groups);
    if (!ld->agents || !ld->groups)
        return 1;
    for (int i = 0; i < ld->loops; i++)
        if (kvc_loop_group_new(&ld->groups[i], NULL) != 0)
            return 1;
    uint64_t t0 = pb_now_ms();
    pthread_t th[16];
    for (int i = 0; i < ld->setup_threads; i++)
        pthread_create(&th[i], NULL, pb_setup_main, ld);
    for (int i = 0; i < ld->setup_threads; i++)
        pthread_join(th[i], NULL);
    printf("READY agents=%d setup_failed=%d setup_ms=%llu\n", ld->n, atomic_load(&ld->setup_failed),
           (unsigned long long)(pb_now_ms() - t0));
    fflush(stdout);

    long long r0 = 0;
    for (;;) {
        int sig = 0;
        if (sigwait(&set, &sig) != 0)
            continue;
        if (sig == SIGUSR1) {
            r0 = atomic_load(&ld->responses);
            atomic_store(&ld->recording, 1);
        } else if (sig == SIGUSR2) {
            atomic_store(&ld->recording, 0);
            break;
        }
    }
    long long r1 = atomic_load(&ld->responses);
    kvc_stats t = {0};
    for (int i = 0; i < ld->n; i++) {
        if (!ld->agents[i].c)
            continue;
        kvc_stats s;
        kvc_stats(ld->agents[i].c, &s);
        t.leases_lost += s.leases_lost;
        t.reconnects += s.reconnects;
    }
    printf("RESULT responses=%lld lost=%d setup_failed=%d kvc_lost=%llu reconnects=%llu "
           "lost_by_server=%d\n",
           r1 - r0, atomic_load(&ld->lost), atomic_load(&ld->setup_failed),
           (unsigned long long)t.leases_lost, (unsigned long long)t.reconnects,
           atomic_load(&ld->lost_by_server));
    for (int i = 0; i < PB_HIST_MS; i++) {
        unsigned c = atomic_load(&ld->hist[i]);
        if (c)
            printf("H %d %u\n", i, c);
    }
    printf("END\n");
    fflush(stdout);
    _exit(0); /* leases are left to expire; closing 20,000 clients is not measured */
}

/* ---------------------------------------------------------------- orchestrator */

struct pb_opts {
    int both, n, p, loads, ttl, window, loops, repeats, idle_s;
    int load_nice;  /* -N: nice value of the load processes (0) */
    int proxy_nice; /* -Q: nice value of the proxies (0) */
    /* -C m,o: the members and this process (the ordinary putter) on CPU m, the proxies and
     * the load processes on CPU o (-1: no pinning) */
    int cpu_members, cpu_others;
    const char *proxy_flag; /* -P: one more flag for kvd's proxies (e.g. --renewal-batch-delay) */
    kv_it_kind kind;
    char self[PATH_MAX];
};

/* Ordinary client: puts at 1000/PB_PUT_PERIOD_MS per second, latencies in us. */
struct pb_putter {
    kvc_client *c;
    pthread_t th;
    atomic_int stop;
    int n;
    uint64_t lat[PB_MAX_PUTS];
    int errors;
};

struct pb_result {
    int ok;
    long long lost, renewals;
    double renew_per_s, p50_ms, p99_ms;
    double us_leader, us_followers, us_proxies; /* CPU us per renewal */
    double streams_members, streams_gauge;      /* upstream keepalive streams per proxy */
    double rss_kib_per_conn;
    double put_p99_idle_ms, put_p99_load_ms;
    long long reconnects;
    long long lost_by_server; /* of lost: answered TTL 0 by the server */
    long long setup_failed;   /* of lost: agents whose lease grant or put failed */
};

static void *pb_putter_main(void *arg)
{
    struct pb_putter *pt = arg;
    char val[64];
    memset(val, 'v', sizeof val);
    uint64_t next = pb_now_ms();
    while (!atomic_load(&pt->stop) && pt->n < PB_MAX_PUTS) {
        kvc_error e;
        uint64_t t0 = pb_now_us();
        if (kvc_put(pt->c, "pb-ordinary", 11, val, sizeof val, NULL, 5000, NULL, &e) != 0)
            pt->errors++;
        pt->lat[pt->n++] = pb_now_us() - t0;
        next += PB_PUT_PERIOD_MS;
        uint64_t now = pb_now_ms();
        if (next > now)
            kvt_sleep_ms((uint32_t)(next - now));
        else
            next = now;
    }
    return NULL;
}

static int pb_cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static int pb_put_phase_start(struct pb_putter *pt)
{
    atomic_store(&pt->stop, 0);
    pt->n = 0;
    pt->errors = 0;
    return -pthread_create(&pt->th, NULL, pb_putter_main, pt);
}

static double pb_put_phase_end(struct pb_putter *pt)
{
    atomic_store(&pt->stop, 1);
    pthread_join(pt->th, NULL);
    if (pt->n == 0)
        return -1;
    qsort(pt->lat, (size_t)pt->n, sizeof pt->lat[0], pb_cmp_u64);
    int k = (int)(0.99 * (pt->n - 1));
    return (double)pt->lat[k] / 1000.0;
}

static double pb_members_ka_started(const kv_bc_cluster *c)
{
    double total = 0;
    for (int i = 0; i < c->n; i++) {
        double v;
        if (pb_metric(c->m[i].metrics_port, "grpc_server_started_total",
                      "grpc_method=\"LeaseKeepAlive\"", &v) == 0)
            total += v;
    }
    return total;
}

/* Waits until every load process's log has a line starting with word; -ETIMEDOUT/-ECHILD. */
static int pb_wait_logs(kvt_proc *ld, int n, const char *word, uint32_t timeout_ms)
{
    uint64_t deadline = kvt_now_ms() + timeout_ms;
    for (;;) {
        int found = 0;
        for (int i = 0; i < n; i++) {
            FILE *f = fopen(ld[i].log_path, "r");
            char line[512];
            int has = 0;
            while (f && fgets(line, sizeof line, f))
                if (!strncmp(line, word, strlen(word)))
                    has = 1;
            if (f)
                fclose(f);
            if (!has && ld[i].pid > 0 && !kvt_proc_alive(&ld[i]))
                return -ECHILD;
            found += has;
        }
        if (found == n)
            return 0;
        if (kvt_now_ms() > deadline)
            return -ETIMEDOUT;
        kvt_sleep_ms(200);
    }
}

static void pb_parse_load(const char *path, struct pb_result *r, uint64_t *hist)
{
    FILE *f = fopen(path, "r");
    char line[512];
    while (f && fgets(line, sizeof line, f)) {
        long long resp, kl, rc;
        int lost, sf, ms, lbs = 0;
        unsigned cnt;
        if (sscanf(line,
                   "RESULT responses=%lld lost=%d setup_failed=%d kvc_lost=%lld "
                   "reconnects=%lld lost_by_server=%d",
                   &resp, &lost, &sf, &kl, &rc, &lbs) >= 5) {
            r->renewals += resp;
            r->lost += lost + sf;
            r->setup_failed += sf;
            r->lost_by_server += lbs;
            r->reconnects += rc;
        } else if (sscanf(line, "H %d %u", &ms, &cnt) == 2 && ms >= 0 && ms < PB_HIST_MS) {
            hist[ms] += cnt;
        }
    }
    if (f)
        fclose(f);
}

static double pb_hist_q(const uint64_t *hist, double q)
{
    uint64_t total = 0, acc = 0;
    for (int i = 0; i < PB_HIST_MS; i++)
        total += hist[i];
    if (!total)
        return -1;
    for (int i = 0; i < PB_HIST_MS; i++) {
        acc += hist[i];
        if ((double)acc >= q * (double)total)
            return i;
    }
    return PB_HIST_MS;
}

static int pb_run_one(const struct pb_opts *o, kv_it_kind kind, struct pb_result *r)
{
    memset(r, 0, sizeof *r);
    kv_bc_cluster *c = calloc(1, sizeof *c);
    struct pb_proxy *px = calloc(PB_MAX_PROXIES, sizeof *px);
    kvt_proc *lp = calloc(PB_MAX_LOADS, sizeof *lp);
    struct pb_putter *pt = calloc(1, sizeof *pt);
    uint64_t *hist = calloc(PB_HIST_MS, sizeof *hist);
    int rc = -ENOMEM;
    if (!c || !px || !lp || !pt || !hist)
        goto out;
    int leader;
    if ((rc = pb_cluster_and_proxies(c, kind, px, o->p, o->proxy_flag, &leader)))
        goto out;
    /* -Q: the proxies' machines; on this shared box, below the members */
    for (int i = 0; i < o->p && o->proxy_nice; i++)
        if (setpriority(PRIO_PROCESS, (id_t)px[i].proc.pid, o->proxy_nice) != 0)
            fprintf(stderr, "proxybench: setpriority(proxy %d): %s\n", i, strerror(errno));
    /* -C: the members on a CPU of their own, as on machines of their own */
    for (int i = 0; i < c->n && o->cpu_members >= 0; i++)
        if ((rc = pb_pin(c->m[i].proc.pid, o->cpu_members)))
            goto pin_failed;
    for (int i = 0; i < o->p && o->cpu_others >= 0; i++)
        if ((rc = pb_pin(px[i].proc.pid, o->cpu_others)))
            goto pin_failed;

    /* Ordinary client on the leader, idle phase. */
    if ((rc = pb_client(c->m[leader].endpoint, NULL, &pt->c)))
        goto out;
    if ((rc = pb_put_phase_start(pt)))
        goto out;
    kvt_sleep_ms((uint32_t)o->idle_s * 1000);
    r->put_p99_idle_ms = pb_put_phase_end(pt);

    long rss_idle[PB_MAX_PROXIES];
    for (int i = 0; i < o->p; i++)
        rss_idle[i] = kvt_proc_rss_kib(px[i].proc.pid);
    double ka0 = pb_members_ka_started(c);

    /* Load processes. */
    char eparg[PB_MAX_PROXIES * 64 + 16];
    size_t used = (size_t)snprintf(eparg, sizeof eparg, "--endpoints=");
    for (int i = 0; i < o->p; i++)
        used += (size_t)snprintf(eparg + used, sizeof eparg - used, "%s%s", i ? "," : "", px[i].ep);
    int per = o->n / o->loads;
    for (int i = 0; i < o->loads; i++) {
        char a_n[16], a_o[16], a_t[16], a_l[16], a_nice[16], a_cpu[16], log[PATH_MAX];
        snprintf(a_n, sizeof a_n, "%d", i == o->loads - 1 ? o->n - per * i : per);
        snprintf(a_o, sizeof a_o, "%d", per * i);
        snprintf(a_t, sizeof a_t, "%d", o->ttl);
        snprintf(a_l, sizeof a_l, "%d", o->loops);
        snprintf(a_nice, sizeof a_nice, "%d", o->load_nice);
        snprintf(a_cpu, sizeof a_cpu, "%d", o->cpu_others);
        snprintf(log, sizeof log, "%s/load%d.log", c->dir, i + 1);
        const char *argv[] = {o->self, "load", eparg, "-n", a_n,    "-o", a_o,   "-t",
                              a_t,     "-l",   a_l,   "-N", a_nice, "-C", a_cpu, NULL};
        kvt_proc_init(&lp[i], log);
        if ((rc = kvt_proc_spawn(&lp[i], argv)))
            goto out;
    }
    if ((rc = pb_wait_logs(lp, o->loads, "READY", 120000u + (uint32_t)o->n * 10u))) {
        fprintf(stderr, "load processes not ready: %s (logs in %s)\n", strerror(-rc), c->dir);
        goto out;
    }
    kvt_sleep_ms((uint32_t)(o->ttl * 1000 / 3 + 1000)); /* one renewal period settles */

    /* Window. */
    double cpu0[3], cpu1[3], pcpu0[PB_MAX_PROXIES], pcpu1[PB_MAX_PROXIES];
    if ((rc = pb_put_phase_start(pt)))
        goto out;
    for (int i = 0; i < o->loads; i++)
        kvt_proc_signal(&lp[i], SIGUSR1);
    uint64_t w0 = kvt_now_ms();
    for (int i = 0; i < 3; i++)
        cpu0[i] = pb_cpu_s(c->m[i].proc.pid);
    for (int i = 0; i < o->p; i++)
        pcpu0[i] = pb_cpu_s(px[i].proc.pid);
    kvt_sleep_ms((uint32_t)o->window * 1000);
    for (int i = 0; i < 3; i++)
        cpu1[i] = pb_cpu_s(c->m[i].proc.pid);
    for (int i = 0; i < o->p; i++)
        pcpu1[i] = pb_cpu_s(px[i].proc.pid);
    for (int i = 0; i < o->loads; i++)
        kvt_proc_signal(&lp[i], SIGUSR2);
    double wall = (double)(kvt_now_ms() - w0) / 1000.0;
    r->put_p99_load_ms = pb_put_phase_end(pt);
    double rss_sum = 0;
    for (int i = 0; i < o->p; i++) {
        double conns = (double)o->n / o->p;
        rss_sum += (double)(kvt_proc_rss_kib(px[i].proc.pid) - rss_idle[i]) / conns;
        double g = 0;
        if (kind == KV_IT_KVD &&
            pb_metric(px[i].mport, "kvd_proxy_upstream_keepalive_streams", NULL, &g) == 0)
            r->streams_gauge += g / o->p;
        else
            r->streams_gauge = -1;
    }
    r->rss_kib_per_conn = rss_sum / o->p;
    r->streams_members = (pb_members_ka_started(c) - ka0) / o->p;

    if ((rc = pb_wait_logs(lp, o->loads, "END", 60000))) {
        fprintf(stderr, "load processes gave no result: %s\n", strerror(-rc));
        goto out;
    }
    for (int i = 0; i < o->loads; i++)
        pb_parse_load(lp[i].log_path, r, hist);
    double ren = r->renewals > 0 ? (double)r->renewals : 1;
    r->renew_per_s = (double)r->renewals / wall;
    r->p50_ms = pb_hist_q(hist, 0.50);
    r->p99_ms = pb_hist_q(hist, 0.99);
    double fol = 0, pro = 0;
    for (int i = 0; i < 3; i++)
        if (i != leader)
            fol += cpu1[i] - cpu0[i];
    for (int i = 0; i < o->p; i++)
        pro += pcpu1[i] - pcpu0[i];
    r->us_leader = 1e6 * (cpu1[leader] - cpu0[leader]) / ren;
    r->us_followers = 1e6 * fol / 2 / ren; /* per follower */
    r->us_proxies = 1e6 * pro / ren;       /* all proxies together */
    r->ok = 1;
    rc = 0;
    goto out;
pin_failed:
    fprintf(stderr, "proxybench: sched_setaffinity: %s\n", strerror(-rc));
out:
    for (int i = 0; lp && i < PB_MAX_LOADS; i++)
        kvt_proc_term(&lp[i], 2000);
    for (int i = 0; px && i < PB_MAX_PROXIES; i++)
        kvt_proc_term(&px[i].proc, 3000);
    if (pt && pt->c)
        kvc_close(pt->c);
    if (c)
        kv_bc_cluster_destroy(c);
    free(c);
    free(px);
    free(lp);
    free(pt);
    free(hist);
    return rc;
}

static void pb_usage(void)
{
    fprintf(stderr, "usage: proxybench [-k kvd|etcd|both] [-n agents] [-p proxies] "
                    "[-L load_procs] [-t ttl_s] [-d window_s] [-l loop_threads] "
                    "[-r repeats] [-i idle_put_s] [-N load_nice] [-Q proxy_nice] "
                    "[-C members_cpu,others_cpu] [-P kvd_proxy_flag]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "load"))
        return pb_load_main(argc, argv);
    struct pb_opts o = {.both = 1,
                        .n = 200,
                        .p = 1,
                        .loads = 1,
                        .ttl = 30,
                        .window = 30,
                        .loops = 2,
                        .repeats = 1,
                        .idle_s = 10,
                        .cpu_members = -1,
                        .cpu_others = -1};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v)
            pb_usage();
        if (!strcmp(a, "-k")) {
            o.both = !strcmp(v, "both");
            o.kind = !strcmp(v, "etcd") ? KV_IT_ETCD : KV_IT_KVD;
        } else if (!strcmp(a, "-n"))
            o.n = atoi(v);
        else if (!strcmp(a, "-p"))
            o.p = atoi(v);
        else if (!strcmp(a, "-L"))
            o.loads = atoi(v);
        else if (!strcmp(a, "-t"))
            o.ttl = atoi(v);
        else if (!strcmp(a, "-d"))
            o.window = atoi(v);
        else if (!strcmp(a, "-l"))
            o.loops = atoi(v);
        else if (!strcmp(a, "-r"))
            o.repeats = atoi(v);
        else if (!strcmp(a, "-i"))
            o.idle_s = atoi(v);
        else if (!strcmp(a, "-N"))
            o.load_nice = atoi(v);
        else if (!strcmp(a, "-Q"))
            o.proxy_nice = atoi(v);
        else if (!strcmp(a, "-P"))
            o.proxy_flag = v;
        else if (!strcmp(a, "-C")) {
            if (sscanf(v, "%d,%d", &o.cpu_members, &o.cpu_others) != 2 || o.cpu_members < 0 ||
                o.cpu_others < 0 || o.cpu_members >= sysconf(_SC_NPROCESSORS_ONLN) ||
                o.cpu_others >= sysconf(_SC_NPROCESSORS_ONLN))
                pb_usage();
        } else
            pb_usage();
        i++;
    }
    if (o.n <= 0 || o.p < 1 || o.p > PB_MAX_PROXIES || o.loads < 1 || o.loads > PB_MAX_LOADS ||
        o.ttl < 3 || o.window < 1 || o.loops < 1 || o.repeats < 1 || o.repeats > 16 || o.idle_s < 1)
        pb_usage();
    ssize_t sl = readlink("/proc/self/exe", o.self, sizeof o.self - 1);
    if (sl <= 0)
        return 1;
    o.self[sl] = 0;
    if (o.cpu_members >= 0 && pb_pin(0, o.cpu_members) != 0) /* the ordinary putter */
        return 1;
    pb_raise_nofile(0);
    struct rlimit rl;
    getrlimit(RLIMIT_NOFILE, &rl);
    if ((rlim_t)(o.n / o.loads + 64) > rl.rlim_max || (rlim_t)(o.n / o.p + 64) > rl.rlim_max)
        fprintf(stderr,
                "warning: RLIMIT_NOFILE hard limit %llu < agents per load process or per "
                "proxy (+64); raise -L / -p or scale down\n",
                (unsigned long long)rl.rlim_max);

    kv_it_kind kinds[2] = {KV_IT_KVD, KV_IT_ETCD};
    int nk = o.both ? 2 : 1;
    if (!o.both)
        kinds[0] = o.kind;
    struct pb_result res[2][16];
    memset(res, 0, sizeof res);
    for (int rep = 0; rep < o.repeats; rep++)
        for (int k = 0; k < nk; k++) {
            struct pb_result *r = &res[k][rep];
            int rc = pb_run_one(&o, kinds[k], r);
            printf("# %s run %d: %s; renewals %lld (%.1f/s), lost %lld (setup failed: %lld; "
                   "server answered TTL 0: %lld), reconnects %lld\n",
                   kv_it_kind_name(kinds[k]), rep + 1, rc ? strerror(-rc) : "ok", r->renewals,
                   r->renew_per_s, r->lost, r->setup_failed, r->lost_by_server, r->reconnects);
            fflush(stdout);
        }

    printf("\nproxybench: %d agents, %d proxies, %d load processes, TTL %d s, window %d s, "
           "%d repeat(s) (medians)\n",
           o.n, o.p, o.loads, o.ttl, o.window, o.repeats);
    static const struct {
        const char *name;
        size_t off;
    } rows[] = {
        {"leases lost", 0},
        {"renewals answered/s", offsetof(struct pb_result, renew_per_s)},
        {"renewal latency p50 (ms)", offsetof(struct pb_result, p50_ms)},
        {"renewal latency p99 (ms)", offsetof(struct pb_result, p99_ms)},
        {"CPU us/renewal leader", offsetof(struct pb_result, us_leader)},
        {"CPU us/renewal per follower", offsetof(struct pb_result, us_followers)},
        {"CPU us/renewal proxies (sum)", offsetof(struct pb_result, us_proxies)},
        {"upstream KA streams/proxy (members)", offsetof(struct pb_result, streams_members)},
        {"upstream KA streams/proxy (gauge)", offsetof(struct pb_result, streams_gauge)},
        {"proxy RSS KiB per agent conn", offsetof(struct pb_result, rss_kib_per_conn)},
        {"ordinary put p99 idle (ms)", offsetof(struct pb_result, put_p99_idle_ms)},
        {"ordinary put p99 loaded (ms)", offsetof(struct pb_result, put_p99_load_ms)},
    };
    printf("%-37s %12s %12s %8s\n", "", "kvd", "etcd", "kvd/etcd");
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        double v[2] = {-1, -1};
        for (int k = 0; k < nk; k++) {
            int slot = kinds[k] == KV_IT_KVD ? 0 : 1;
            if (i == 0) { /* leases lost: a count, summed over repeats */
                long long s = 0;
                for (int rep = 0; rep < o.repeats; rep++)
                    s += res[k][rep].lost;
                v[slot] = (double)s;
            } else {
                v[slot] = pb_median(res[k], sizeof res[k][0], o.repeats, rows[i].off);
            }
        }
        char ratio[16] = "-";
        if (v[0] >= 0 && v[1] > 0)
            snprintf(ratio, sizeof ratio, "%.2f", v[0] / v[1]);
        printf("%-37s %12.2f %12.2f %8s\n", rows[i].name, v[0], v[1], ratio);
    }
    return 0;
}
