/*
 * agents - simulate N agents in one process (benchmark for docs/LESSONS.md, lesson 1).
 *
 * Each agent is its own kvc_client with its own connection, one lease of TTL T, one key
 * attached to the lease, and a keepalive. Clients share a few I/O threads through
 * kvc_loop_group (20,000 clients with a thread each would be 20,000 threads).
 * Reports renewals/s (expected N/(T/3)), leases lost, the simulator's CPU and its RSS per
 * agent.
 *
 *   agents [-e host:port] [-n agents] [-t ttl_s] [-d seconds] [-l loop_threads]
 *          [-s setup_threads] [-m leases_per_agent] [--slow-consumer]
 * Defaults: -e 127.0.0.1:2379 -n 100 -t 10 -d 20 -l 1 -s 8 -m 1.
 * Scheduler scale (20,000 leases on ONE client, one stream): agents -n 1 -m 20000.
 * Target run: agents -n 20000 -t 10 -d 60 -l 4  (needs ulimit -n > 20000 here and in the
 * server).
 */
#include <kvclient.h>

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

struct agent {
    kvc_client *c;
    kvc_keepalive **ka; /* leases_per_agent handles */
};

struct opts {
    const char *endpoint;
    int n, ttl, duration, loops, setup_threads, slow;
    int m; /* leases per agent (1 = the agent model; 20000 with -n 1 = scheduler scale) */
};

struct shared {
    struct opts o;
    struct agent *agents;
    kvc_loop_group **groups;
    atomic_int next;
    atomic_int next_extra;
    atomic_int setup_failed;
    atomic_llong responses;
    atomic_int lost;
    atomic_int lost_by_server; /* the server answered TTL 0 (expired or revoked there) */
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double cpu_s(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
           (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

static long rss_kb(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmRSS: %ld kB", &kb) == 1)
            break;
    if (f)
        fclose(f);
    return kb;
}

static void on_event(void *arg, const kvc_ka_event *ev)
{
    struct shared *sh = arg;
    if (ev->type == KVC_KA_RESPONSE)
        atomic_fetch_add_explicit(&sh->responses, 1, memory_order_relaxed);
    else if (ev->header.member_id != 0)
        atomic_fetch_add(&sh->lost_by_server, 1);
    else
        atomic_fetch_add(&sh->lost, 1); /* no response before the deadline */
}

static int grant_keepalive(struct shared *sh, struct agent *a, int j, int64_t *id)
{
    kvc_error e;
    kvc_lease_grant_result g;
    if (kvc_lease_grant(a->c, sh->o.ttl, 0, 0, 30000, &g, &e) != 0)
        goto fail;
    *id = g.id;
    /* --slow-consumer: queue mode and nobody ever reads (lesson 1's failure mode). */
    if (kvc_lease_keepalive(a->c, g.id, sh->o.ttl, sh->o.slow ? NULL : on_event, sh, &a->ka[j],
                            &e) != 0)
        goto fail;
    return 0;
fail:
    fprintf(stderr, "lease: %s\n", e.message);
    return -1;
}

static int setup_agent(struct shared *sh, int i)
{
    struct agent *a = &sh->agents[i];
    const char *eps[] = {sh->o.endpoint};
    kvc_config cfg;
    kvc_config_default(&cfg);
    cfg.endpoints = eps;
    cfg.n_endpoints = 1;
    cfg.loop_group = sh->groups[i % sh->o.loops];
    cfg.keepalive_queue_len = 4;
    kvc_error e;
    a->ka = calloc((size_t)sh->o.m, sizeof *a->ka);
    if (!a->ka || kvc_open(&a->c, &cfg, &e) != 0) {
        fprintf(stderr, "agent %d: cannot open\n", i);
        return -1;
    }
    int64_t id;
    if (grant_keepalive(sh, a, 0, &id) != 0)
        return -1;
    char key[32];
    snprintf(key, sizeof key, "agents/%06d", i);
    kvc_put_opts po = {.lease = id};
    if (kvc_put(a->c, key, strlen(key), "alive", 5, &po, 30000, NULL, &e) != 0) {
        fprintf(stderr, "agent %d: %s\n", i, e.message);
        return -1;
    }
    return 0;
}

static void *setup_main(void *arg)
{
    struct shared *sh = arg;
    for (;;) {
        int i = atomic_fetch_add(&sh->next, 1);
        if (i >= sh->o.n)
            break;
        if (setup_agent(sh, i) != 0)
            atomic_fetch_add(&sh->setup_failed, 1);
    }
    return NULL;
}

/* Leases 1..m-1 of every agent (only with -m > 1). */
static void *setup_extra_main(void *arg)
{
    struct shared *sh = arg;
    int per = sh->o.m - 1;
    for (;;) {
        int k = atomic_fetch_add(&sh->next_extra, 1);
        if (k >= sh->o.n * per)
            break;
        struct agent *a = &sh->agents[k / per];
        int64_t id;
        if (!a->c || grant_keepalive(sh, a, 1 + k % per, &id) != 0)
            atomic_fetch_add(&sh->setup_failed, 1);
    }
    return NULL;
}

static void totals(struct shared *sh, kvc_stats *t)
{
    memset(t, 0, sizeof *t);
    for (int i = 0; i < sh->o.n; i++) {
        if (!sh->agents[i].c)
            continue;
        kvc_stats s;
        kvc_stats(sh->agents[i].c, &s);
        t->renewals_sent += s.renewals_sent;
        t->responses_received += s.responses_received;
        t->responses_dropped += s.responses_dropped;
        t->reconnects += s.reconnects;
        t->leases_lost += s.leases_lost;
        t->leases_active += s.leases_active;
    }
}

static void usage(void)
{
    fprintf(stderr,
            "usage: agents [-e host:port] [-n agents] [-t ttl_s] [-d seconds] "
            "[-l loop_threads] [-s setup_threads] [-m leases_per_agent] [--slow-consumer]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    struct shared *sh = calloc(1, sizeof *sh);
    if (!sh)
        return 1;
    sh->o = (struct opts){"127.0.0.1:2379", 100, 10, 20, 1, 8, 0, 1};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--slow-consumer")) {
            sh->o.slow = 1;
            continue;
        }
        if (!v)
            usage();
        if (!strcmp(a, "-e"))
            sh->o.endpoint = v;
        else if (!strcmp(a, "-n"))
            sh->o.n = atoi(v);
        else if (!strcmp(a, "-t"))
            sh->o.ttl = atoi(v);
        else if (!strcmp(a, "-d"))
            sh->o.duration = atoi(v);
        else if (!strcmp(a, "-l"))
            sh->o.loops = atoi(v);
        else if (!strcmp(a, "-m"))
            sh->o.m = atoi(v);
        else if (!strcmp(a, "-s"))
            sh->o.setup_threads = atoi(v);
        else
            usage();
        i++;
    }
    if (sh->o.n <= 0 || sh->o.ttl <= 0 || sh->o.duration <= 0 || sh->o.loops <= 0 ||
        sh->o.setup_threads <= 0 || sh->o.m <= 0)
        usage();

    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
        if (rl.rlim_cur < (rlim_t)sh->o.n + 64)
            fprintf(stderr, "warning: RLIMIT_NOFILE %llu < agents + 64\n",
                    (unsigned long long)rl.rlim_cur);
    }

    long rss0 = rss_kb();
    sh->agents = calloc((size_t)sh->o.n, sizeof *sh->agents);
    sh->groups = calloc((size_t)sh->o.loops, sizeof *sh->groups);
    for (int i = 0; i < sh->o.loops; i++)
        if (kvc_loop_group_new(&sh->groups[i], NULL) != 0)
            return 1;

    double t0 = now_s();
    pthread_t *th = calloc((size_t)sh->o.setup_threads, sizeof *th);
    for (int i = 0; i < sh->o.setup_threads; i++)
        pthread_create(&th[i], NULL, setup_main, sh);
    for (int i = 0; i < sh->o.setup_threads; i++)
        pthread_join(th[i], NULL);
    if (sh->o.m > 1) {
        for (int i = 0; i < sh->o.setup_threads; i++)
            pthread_create(&th[i], NULL, setup_extra_main, sh);
        for (int i = 0; i < sh->o.setup_threads; i++)
            pthread_join(th[i], NULL);
    }
    free(th);
    double setup = now_s() - t0;
    printf("agents: %d agents x %d leases, TTL %d s, %d loop threads, setup %.1f s (%d failed)%s\n",
           sh->o.n, sh->o.m, sh->o.ttl, sh->o.loops, setup, atomic_load(&sh->setup_failed),
           sh->o.slow ? ", slow consumer (never reads)" : "");

    /* Settle one renewal period so the setup burst is not measured. */
    sleep((unsigned)(sh->o.ttl / 3 + 1));
    kvc_stats s0, s1;
    totals(sh, &s0);
    double c0 = cpu_s(), w0 = now_s();
    long rss_start = rss_kb();
    for (int el = 0; el < sh->o.duration; el += 5) {
        int step = sh->o.duration - el < 5 ? sh->o.duration - el : 5;
        sleep((unsigned)step);
        kvc_stats s;
        totals(sh, &s);
        printf("  t=%3ds renewals %llu responses %llu lost %llu reconnects %llu rss %ld kB\n",
               el + step, (unsigned long long)(s.renewals_sent - s0.renewals_sent),
               (unsigned long long)(s.responses_received - s0.responses_received),
               (unsigned long long)s.leases_lost, (unsigned long long)s.reconnects, rss_kb());
        fflush(stdout);
    }
    totals(sh, &s1);
    double wall = now_s() - w0, cpu = cpu_s() - c0;
    long rss_end = rss_kb();
    double rate = (double)(s1.renewals_sent - s0.renewals_sent) / wall;
    double expect = (double)sh->o.n * sh->o.m / ((double)sh->o.ttl / 3.0);
    printf("renewals/s        %.1f (expected N*m/(T/3) = %.1f, ratio %.2f)\n", rate, expect,
           rate / expect);
    printf("responses/s       %.1f\n",
           (double)(s1.responses_received - s0.responses_received) / wall);
    printf("responses dropped %llu\n", (unsigned long long)s1.responses_dropped);
    printf("leases lost       %llu (server answered TTL 0: %d, client deadline: %d)\n",
           (unsigned long long)s1.leases_lost, atomic_load(&sh->lost_by_server),
           atomic_load(&sh->lost));
    printf("leases active     %llu\n", (unsigned long long)s1.leases_active);
    printf("reconnects        %llu\n", (unsigned long long)s1.reconnects);
    printf("cpu               %.2f s over %.1f s = %.1f%% of one core, %.1f us per renewal\n", cpu,
           wall, 100.0 * cpu / wall, 1e6 * cpu / (double)(s1.renewals_sent - s0.renewals_sent + 1));
    printf("rss               %ld kB total, %.1f kB per agent, %.2f kB per lease (baseline %ld "
           "kB, start %ld kB)\n",
           rss_end, (double)(rss_end - rss0) / sh->o.n,
           (double)(rss_end - rss0) / ((double)sh->o.n * sh->o.m), rss0, rss_start);
    fflush(stdout);

    for (int i = 0; i < sh->o.n; i++) {
        for (int j = 0; sh->agents[i].ka && j < sh->o.m; j++)
            if (sh->agents[i].ka[j])
                kvc_keepalive_stop(sh->agents[i].ka[j]);
        free(sh->agents[i].ka);
        /* Leases are not revoked: they expire after TTL (a serial revoke of 20,000 leases
         * against a loaded server takes minutes). */
        if (sh->agents[i].c)
            kvc_close(sh->agents[i].c);
    }
    for (int i = 0; i < sh->o.loops; i++)
        kvc_loop_group_free(sh->groups[i]);
    int lost = (int)s1.leases_lost;
    free(sh->groups);
    free(sh->agents);
    free(sh);
    return lost == 0 ? 0 : 1;
}
