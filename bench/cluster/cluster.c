/* cluster: see cluster.h. */
#include "cluster.h"
#include "grpc_raw.h"
#include "kvt_util.h"
#include "rpc.pb-c.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static int port_taken(const kv_bc_cluster *c, int upto, uint16_t p)
{
    for (int i = 0; i < upto; i++)
        if (c->m[i].client_port == p || c->m[i].peer_port == p || c->m[i].metrics_port == p)
            return 1;
    return 0;
}

/* Three free ports for member i, distinct from each other and from members [0, i]. */
static int pick_ports(kv_bc_cluster *c, int i)
{
    uint16_t p[3];
    for (int k = 0; k < 3; k++) {
        int tries = 0;
        do {
            int rc = kvt_port_free(&p[k]);
            if (rc)
                return rc;
            if (++tries > 100)
                return -EADDRINUSE;
        } while (port_taken(c, i, p[k]) || (k > 0 && p[k] == p[0]) || (k > 1 && p[k] == p[1]));
    }
    c->m[i].client_port = p[0];
    c->m[i].peer_port = p[1];
    c->m[i].metrics_port = p[2];
    return 0;
}

/* Starts member m (argv[0] absolute), stdout and stderr appended to its log. */
static int spawn(kv_bc_member *m, const char *const *argv)
{
    kvt_proc_init(&m->proc, m->log_path);
    m->proc.no_banner = 1; /* the log's first lines are the member's (see log_head) */
    return kvt_proc_spawn(&m->proc, argv);
}

int kv_bc_answers_range(uint16_t port, int *status)
{
    /* RangeRequest{key="kvbc-ready"}: field 1 (bytes) */
    static const uint8_t req[] = {0x0a, 10, 'k', 'v', 'b', 'c', '-', 'r', 'e', 'a', 'd', 'y'};
    kv_it_grpc *g = NULL;
    if (kv_it_grpc_open(&g, "127.0.0.1", port, 500))
        return 0;
    uint8_t *resp = NULL;
    size_t rl = 0;
    *status = -1;
    int rc = kv_it_grpc_call(g, "/etcdserverpb.KV/Range", req, sizeof(req), &resp, &rl, 1000,
                             status, NULL, 0);
    free(resp);
    kv_it_grpc_close(g);
    return rc == 0;
}

/* First non-empty lines of a member's log, joined with " | ", into buf. */
static void log_head(const kv_bc_member *m, char *buf, size_t cap)
{
    buf[0] = 0;
    FILE *f = fopen(m->log_path, "r");
    if (!f)
        return;
    char line[512];
    size_t used = 0;
    for (int n = 0; n < 4 && fgets(line, sizeof(line), f);) {
        line[strcspn(line, "\r\n")] = 0;
        if (!line[0])
            continue;
        int w = snprintf(buf + used, cap - used, "%s%s", n ? " | " : "", line);
        if (w < 0 || (size_t)w >= cap - used)
            break;
        used += (size_t)w;
        n++;
    }
    fclose(f);
}

static int start_members(kv_bc_cluster *c, const char *extra, char *why, size_t why_cap)
{
    char words[512] = "";
    const char *ex[KV_BC_MAX_EXTRA];
    int n_ex = 0;
    if (extra) {
        if (strlen(extra) >= sizeof(words)) {
            snprintf(why, why_cap, "extra arguments too long");
            return -E2BIG;
        }
        snprintf(words, sizeof(words), "%s", extra);
        char *save = NULL;
        for (char *t = strtok_r(words, " \t", &save); t; t = strtok_r(NULL, " \t", &save)) {
            if (n_ex == KV_BC_MAX_EXTRA) {
                snprintf(why, why_cap, "more than %d extra arguments", KV_BC_MAX_EXTRA);
                return -E2BIG;
            }
            ex[n_ex++] = t;
        }
    }
    const char *ps = c->peer_cert_dir[0] ? "https" : "http"; /* peer URL scheme */
    char initial[KV_BC_MAX_MEMBERS * 48] = "";
    size_t used = 0;
    for (int i = 0; i < c->n; i++)
        used += (size_t)snprintf(initial + used, sizeof(initial) - used, "%s%s=%s://127.0.0.1:%u",
                                 i ? "," : "", c->m[i].name, ps, c->m[i].peer_port);
    char a_ic[sizeof(initial) + 32];
    snprintf(a_ic, sizeof(a_ic), "--initial-cluster=%s", initial);
    char a_tok[64];
    snprintf(a_tok, sizeof(a_tok), "--initial-cluster-token=kvbc-%ld", (long)getpid());
    /* Peer TLS flags (etcd's): the same certificate for both ends of a peer connection. */
    char a_pc[1100], a_pk[1100], a_pca[1100];
    const char *tls_args[4] = {a_pc, a_pk, a_pca, "--peer-client-cert-auth"};
    int n_tls = 0;
    if (c->peer_cert_dir[0]) {
        snprintf(a_pc, sizeof(a_pc), "--peer-cert-file=%s/server.pem", c->peer_cert_dir);
        snprintf(a_pk, sizeof(a_pk), "--peer-key-file=%s/server-key.pem", c->peer_cert_dir);
        snprintf(a_pca, sizeof(a_pca), "--peer-trusted-ca-file=%s/ca.pem", c->peer_cert_dir);
        n_tls = 4;
    }
    for (int i = 0; i < c->n; i++) {
        kv_bc_member *m = &c->m[i];
        char a_name[32], a_data[1200], a_lc[96], a_ac[96], a_lp[96], a_iap[96], a_lm[96];
        snprintf(a_name, sizeof(a_name), "--name=%s", m->name);
        snprintf(a_data, sizeof(a_data), "--data-dir=%s", m->data_dir);
        snprintf(a_lc, sizeof(a_lc), "--listen-client-urls=http://127.0.0.1:%u", m->client_port);
        snprintf(a_ac, sizeof(a_ac), "--advertise-client-urls=http://127.0.0.1:%u", m->client_port);
        snprintf(a_lp, sizeof(a_lp), "--listen-peer-urls=%s://127.0.0.1:%u", ps, m->peer_port);
        snprintf(a_iap, sizeof(a_iap), "--initial-advertise-peer-urls=%s://127.0.0.1:%u", ps,
                 m->peer_port);
        snprintf(a_lm, sizeof(a_lm), "--listen-metrics-urls=http://127.0.0.1:%u", m->metrics_port);
        const char *argv[12 + 4 + KV_BC_MAX_EXTRA] = {
            c->bin, a_name, a_data, a_lc, a_ac,
            a_lp,   a_iap,  a_lm,   a_ic, "--initial-cluster-state=new",
            a_tok};
        int na = 11;
        for (int k = 0; k < n_tls; k++)
            argv[na++] = tls_args[k];
        for (int k = 0; k < n_ex; k++)
            argv[na++] = ex[k];
        argv[na] = NULL;
        int rc = spawn(m, argv);
        if (rc) {
            snprintf(why, why_cap, "fork %s: %s", m->name, strerror(-rc));
            return rc;
        }
    }
    return 0;
}

/* Waits until every member is ready; -ECHILD (a member exited) or -ETIMEDOUT. */
static int wait_ready(kv_bc_cluster *c, uint32_t timeout_ms, char *why, size_t why_cap)
{
    uint64_t deadline = kvt_now_ms() + timeout_ms;
    int ready[KV_BC_MAX_MEMBERS] = {0};
    int n_ready = 0;
    while (n_ready < c->n) {
        for (int i = 0; i < c->n; i++) {
            kv_bc_member *m = &c->m[i];
            if (m->proc.pid > 0 && !kvt_proc_alive(&m->proc)) {
                char head[700];
                log_head(m, head, sizeof(head));
                snprintf(why, why_cap, "member %s exited; its log: %s", m->name, head);
                return -ECHILD;
            }
            int st;
            if (!ready[i] && kv_bc_answers_range(m->client_port, &st)) {
                ready[i] = 1;
                n_ready++;
            }
        }
        if (n_ready == c->n)
            break;
        if (kvt_now_ms() >= deadline) {
            char missing[KV_BC_MAX_MEMBERS * 8] = "";
            size_t used = 0;
            for (int i = 0; i < c->n; i++)
                if (!ready[i])
                    used += (size_t)snprintf(missing + used, sizeof(missing) - used, "%s%s",
                                             used ? "," : "", c->m[i].name);
            snprintf(why, why_cap,
                     "%d of %d members answered a linearizable Range within %u ms (not: %s; "
                     "logs in %s unless it is removed, KV_TEST_KEEP_DIRS=1 keeps it)",
                     n_ready, c->n, timeout_ms, missing, c->dir);
            return -ETIMEDOUT;
        }
        kvt_sleep_ms(100);
    }
    return 0;
}

int kv_bc_cluster_start(kv_bc_cluster *c, kv_it_kind kind, int n, const char *extra,
                        uint32_t timeout_ms, char *why, size_t why_cap)
{
    return kv_bc_cluster_start_tls(c, kind, n, extra, NULL, timeout_ms, why, why_cap);
}

int kv_bc_cluster_start_tls(kv_bc_cluster *c, kv_it_kind kind, int n, const char *extra,
                            const char *peer_cert_dir, uint32_t timeout_ms, char *why,
                            size_t why_cap)
{
    int rc;
    memset(c, 0, sizeof(*c));
    why[0] = 0;
    c->kind = kind;
    if (peer_cert_dir) {
        if (!peer_cert_dir[0] || strlen(peer_cert_dir) >= sizeof(c->peer_cert_dir)) {
            snprintf(why, why_cap, "peer certificate directory empty or too long");
            return -EINVAL;
        }
        snprintf(c->peer_cert_dir, sizeof(c->peer_cert_dir), "%s", peer_cert_dir);
    }
    if (n < 1 || n > KV_BC_MAX_MEMBERS) {
        snprintf(why, why_cap, "members must be 1..%d", KV_BC_MAX_MEMBERS);
        return -EINVAL;
    }
    if ((rc = kv_it_server_bin(kind, c->bin, sizeof(c->bin)))) {
        snprintf(why, why_cap, "%s binary %s not found", kv_it_kind_name(kind), c->bin);
        return rc;
    }
    char prefix[32];
    kvt_tmpdir d;
    snprintf(prefix, sizeof(prefix), "kvbc-%s", kv_it_kind_name(kind));
    if ((rc = kvt_tmpdir_create(&d, prefix)) == 0 && strlen(d.path) >= 900) {
        kvt_tmpdir_destroy(&d);
        rc = -ENAMETOOLONG;
    }
    if (rc) {
        snprintf(why, why_cap, "temp dir: %s", strerror(-rc));
        return rc;
    }
    snprintf(c->dir, sizeof(c->dir), "%s", d.path);
    c->n = n;
    for (int i = 0; i < n; i++) {
        kv_bc_member *m = &c->m[i];
        char dir[sizeof(c->dir)];
        memcpy(dir, c->dir, sizeof(dir));
        snprintf(m->name, sizeof(m->name), "m%d", i + 1);
        snprintf(m->data_dir, sizeof(m->data_dir), "%s/m%d.data", dir, i + 1);
        snprintf(m->log_path, sizeof(m->log_path), "%s/m%d.log", dir, i + 1);
        if ((rc = pick_ports(c, i))) {
            snprintf(why, why_cap, "no free ports: %s", strerror(-rc));
            return rc;
        }
        snprintf(m->endpoint, sizeof(m->endpoint), "127.0.0.1:%u", m->client_port);
        c->endpoints[i] = m->endpoint;
    }
    if ((rc = start_members(c, extra, why, why_cap)) ||
        (rc = wait_ready(c, timeout_ms, why, why_cap))) {
        for (int i = 0; i < n; i++)
            kvt_proc_term(&c->m[i].proc, 0);
        return rc;
    }
    for (int i = 0; i < n; i++)
        c->pids[i] = c->m[i].proc.pid;
    return 0;
}

int kv_bc_leader(const kv_bc_cluster *c)
{
    for (int i = 0; i < c->n; i++) {
        kv_it_grpc *g = NULL;
        if (kv_it_grpc_open(&g, "127.0.0.1", c->m[i].client_port, 1000))
            continue;
        uint8_t *resp = NULL;
        size_t rl = 0;
        int status = -1, is_leader = 0;
        /* StatusRequest has no fields: an empty message. */
        if (kv_it_grpc_call(g, "/etcdserverpb.Maintenance/Status", NULL, 0, &resp, &rl, 2000,
                            &status, NULL, 0) == 0) {
            Etcdserverpb__StatusResponse *sr =
                etcdserverpb__status_response__unpack(NULL, rl, resp);
            if (sr && sr->header && sr->leader != 0 && sr->leader == sr->header->member_id)
                is_leader = 1;
            if (sr)
                etcdserverpb__status_response__free_unpacked(sr, NULL);
        }
        free(resp);
        kv_it_grpc_close(g);
        if (is_leader)
            return i;
    }
    return -ENOENT;
}

int kv_bc_cluster_alive(kv_bc_cluster *c)
{
    int alive = 0;
    for (int i = 0; i < c->n; i++)
        alive += kvt_proc_alive(&c->m[i].proc);
    return alive;
}

void kv_bc_cluster_destroy(kv_bc_cluster *c)
{
    for (int i = 0; i < c->n; i++) /* all at once: members shut down in parallel */
        kvt_proc_signal(&c->m[i].proc, SIGTERM);
    for (int i = 0; i < c->n; i++)
        kvt_proc_term(&c->m[i].proc, 5000);
    if (c->dir[0]) {
        kvt_tmpdir d;
        snprintf(d.path, sizeof(d.path), "%s", c->dir);
        kvt_tmpdir_destroy(&d); /* kept with KV_TEST_KEEP_DIRS=1 */
    }
    c->dir[0] = 0;
}

int kv_bc_metric_sum(const kv_bc_cluster *c, const char *name, double *sum)
{
    double total = 0;
    int found = 0;
    *sum = 0;
    for (int i = 0; i < c->n; i++) {
        int status = 0;
        char *body = NULL;
        int rc = kv_it_http_get(c->m[i].metrics_port, "/metrics", 3000, &status, &body);
        if (rc == 0 && status != 200)
            rc = -EPROTO;
        double v = 0;
        if (rc == 0 && kv_it_metric_sum(body, name, NULL, &v, NULL) == 0) {
            total += v;
            found++;
        }
        free(body);
        if (rc)
            return rc;
    }
    if (!found)
        return -ENOENT;
    *sum = total;
    return 0;
}

/* Port of "addr:port" (IPv4 or [IPv6]:port); 0 if unparsable. */
static uint16_t port_of(const char *s)
{
    const char *colon = strrchr(s, ':');
    if (!colon)
        return 0;
    long v = strtol(colon + 1, NULL, 10);
    return v > 0 && v < 65536 ? (uint16_t)v : 0;
}

static void remember(kv_bc_cluster *c, uint32_t key)
{
    for (int i = 0; i < c->n_conns; i++)
        if (c->conns[i] == key)
            return;
    if (c->n_conns == KV_BC_MAX_CONNS) {
        c->conns_overflow = 1;
        return;
    }
    c->conns[c->n_conns++] = key;
}

int kv_bc_peer_sample(kv_bc_cluster *c)
{
    /* Columns with a state filter: Recv-Q Send-Q Local:Port Peer:Port [Process]. A
     * loopback connection appears twice (one line per end); count the accepting end. */
    FILE *f = popen("ss -tnH state established 2>/dev/null", "r");
    if (!f)
        return -errno;
    char line[512];
    int count = 0;
    while (fgets(line, sizeof(line), f)) {
        char rq[32], sq[32], local[128], peer[128];
        if (sscanf(line, "%31s %31s %127s %127s", rq, sq, local, peer) != 4)
            continue;
        uint16_t lp = port_of(local), pp = port_of(peer);
        for (int i = 0; i < c->n; i++)
            if (lp && lp == c->m[i].peer_port) {
                count++;
                remember(c, (uint32_t)lp << 16 | pp);
            }
    }
    int st = pclose(f);
    if (st == -1 || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
        return -ECHILD;
    c->samples++;
    c->last_established = count;
    if (count > c->max_established)
        c->max_established = count;
    return count;
}
