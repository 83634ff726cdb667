/* cluster: member processes of kvd or etcd on loopback, each behind a peer proxy (fn.h). */
#include "fn.h"
#include "kvt_util.h"

#include "kvclient.h"
#include "rpc.pb-c.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int64_t kv_fn_now_us(void)
{
    return kvt_now_us();
}

static void sleep_ms(uint32_t ms)
{
    kvt_sleep_ms(ms);
}

int kv_fn_cluster_init(kv_fn_cluster *c, kv_fn_target t, int n, const char *root, uint64_t seed)
{
    memset(c, 0, sizeof(*c));
    if (n < 1 || n > KV_FN_MAX_MEMBERS)
        return -EINVAL;
    c->target = t;
    c->n = n;
    snprintf(c->root, sizeof(c->root), "%s", root);
    if (t == KV_FN_TARGET_ETCD) {
        const char *e = getenv("KV_ETCD_BIN");
        snprintf(c->bin, sizeof(c->bin), "%s", e && *e ? e : "/usr/bin/etcd");
    } else {
        const char *e = getenv("KV_KVD_BIN");
        const char *b = getenv("KV_BUILD_DIR");
        if (e && *e)
            snprintf(c->bin, sizeof(c->bin), "%s", e);
        else
            snprintf(c->bin, sizeof(c->bin), "%s/server/kvd", b && *b ? b : "build");
        c->failpoints = 1;
    }
    if (access(c->bin, X_OK) != 0)
        return -ENOENT;
    /* Pick all ports first, then hold none: the small race with other processes is
     * accepted (a member that cannot bind exits and the run reports it). */
    for (int i = 0; i < n; i++) {
        kv_fn_member *m = &c->m[i];
        m->idx = i;
        snprintf(m->name, sizeof(m->name), "m%d", i);
        snprintf(m->dir, sizeof(m->dir), "%s/m%d", root, i);
        if (mkdir(m->dir, 0755) != 0 && errno != EEXIST)
            return -errno;
        char log[PATH_MAX + 16];
        snprintf(log, sizeof(log), "%s/member.log", m->dir);
        kvt_proc_init(&m->proc, log);
        uint16_t ports[3];
        for (int k = 0; k < 3; k++) {
            int r = kvt_port_free(&ports[k]);
            if (r)
                return r;
            for (int q = 0; q < k; q++)
                if (ports[q] == ports[k])
                    k--; /* retry duplicates */
        }
        m->client_port = ports[0];
        m->peer_port = ports[1];
        m->proxy_port = ports[2];
        snprintf(m->endpoint, sizeof(m->endpoint), "127.0.0.1:%u", m->client_port);
    }
    if (n > 1)
        for (int i = 0; i < n; i++) {
            int r = kvt_proxy_start(&c->m[i].proxy, c->m[i].proxy_port, c->m[i].peer_port,
                                      seed + (uint64_t)i * 7919);
            if (r)
                return r;
        }
    return 0;
}

int kv_fn_member_start(kv_fn_cluster *c, int i)
{
    kv_fn_member *m = &c->m[i];
    if (m->proc.pid)
        return 0;
    char a_data[PATH_MAX + 16], a_lc[64], a_ac[64], a_lp[64], a_iap[64], a_ic[1024];
    snprintf(a_data, sizeof(a_data), "--data-dir=%s/data", m->dir);
    snprintf(a_lc, sizeof(a_lc), "--listen-client-urls=http://127.0.0.1:%u", m->client_port);
    snprintf(a_ac, sizeof(a_ac), "--advertise-client-urls=http://127.0.0.1:%u", m->client_port);
    snprintf(a_lp, sizeof(a_lp), "--listen-peer-urls=http://127.0.0.1:%u", m->peer_port);
    uint16_t adv = c->n > 1 ? m->proxy_port : m->peer_port;
    snprintf(a_iap, sizeof(a_iap), "--initial-advertise-peer-urls=http://127.0.0.1:%u", adv);
    size_t len = (size_t)snprintf(a_ic, sizeof(a_ic), "--initial-cluster=");
    for (int k = 0; k < c->n; k++)
        len += (size_t)snprintf(a_ic + len, sizeof(a_ic) - len, "%sm%d=http://127.0.0.1:%u",
                                k ? "," : "", k, c->n > 1 ? c->m[k].proxy_port : c->m[k].peer_port);
    const char *argv[24];
    int n = 0;
    argv[n++] = c->bin;
    argv[n++] = "--name";
    argv[n++] = m->name;
    argv[n++] = a_data;
    argv[n++] = a_lc;
    argv[n++] = a_ac;
    argv[n++] = a_lp;
    argv[n++] = a_iap;
    argv[n++] = a_ic;
    argv[n++] = "--initial-cluster-state=new";
    argv[n++] = "--initial-cluster-token=kvfunctional";
    if (c->target == KV_FN_TARGET_KVD && c->failpoints)
        argv[n++] = "--enable-failpoints";
    argv[n] = NULL;
    return kvt_proc_spawn(&m->proc, argv);
}

int kv_fn_member_signal(kv_fn_cluster *c, int i, int sig)
{
    kvt_proc *p = &c->m[i].proc;
    if (!p->pid)
        return -ESRCH;
    switch (sig) {
    case SIGKILL:
        return kvt_proc_kill9(p);
    case SIGTERM:
        return kvt_proc_term(p, 10000);
    case SIGSTOP:
        return kvt_proc_pause(p);
    case SIGCONT:
        return kvt_proc_resume(p);
    default:
        return kvt_proc_signal(p, sig);
    }
}

void kv_fn_cluster_stop(kv_fn_cluster *c)
{
    for (int i = 0; i < c->n; i++) {
        if (c->m[i].proc.pid)
            kv_fn_member_signal(c, i, SIGKILL);
        kvt_proxy_stop(c->m[i].proxy);
        c->m[i].proxy = NULL;
    }
}

static int open_client(kvc_client **kc, const char *endpoint, uint32_t timeout_ms)
{
    kvc_config cfg;
    kvc_config_default(&cfg);
    const char *eps[1] = {endpoint};
    cfg.endpoints = eps;
    cfg.n_endpoints = 1;
    cfg.dial_timeout_ms = timeout_ms;
    return kvc_open(kc, &cfg, NULL);
}

/* Maintenance.Status of one member. */
static int member_status(const kv_fn_member *m, uint32_t timeout_ms, uint64_t *leader,
                         uint64_t *member_id)
{
    kvc_client *kc = NULL;
    int r = open_client(&kc, m->endpoint, timeout_ms);
    if (r)
        return r;
    Etcdserverpb__StatusRequest req = ETCDSERVERPB__STATUS_REQUEST__INIT;
    uint8_t buf[16];
    size_t len = etcdserverpb__status_request__pack(&req, buf);
    uint8_t *resp = NULL;
    size_t resp_len = 0;
    r = kvc_call_unary(kc, "/etcdserverpb.Maintenance/Status", buf, len, &resp, &resp_len,
                       timeout_ms, KVC_IDEMPOTENT, NULL);
    if (r == 0) {
        Etcdserverpb__StatusResponse *s =
            etcdserverpb__status_response__unpack(NULL, resp_len, resp);
        if (!s) {
            r = -EPROTO;
        } else {
            *leader = s->leader;
            *member_id = s->header ? s->header->member_id : 0;
            etcdserverpb__status_response__free_unpacked(s, NULL);
        }
    }
    kvc_free(resp);
    kvc_close(kc);
    return r;
}

int kv_fn_cluster_leader(kv_fn_cluster *c, uint32_t timeout_ms)
{
    for (int i = 0; i < c->n; i++) {
        kv_fn_member *m = &c->m[i];
        if (!m->proc.pid || m->proc.stopped)
            continue;
        uint64_t leader = 0, id = 0;
        if (member_status(m, timeout_ms, &leader, &id) != 0)
            continue;
        m->member_id = id;
        if (leader == 0)
            continue;
        for (int k = 0; k < c->n; k++)
            if (c->m[k].member_id == leader)
                return k;
        /* The leader's id is not known yet: ask the others. */
        for (int k = 0; k < c->n; k++) {
            uint64_t l2, id2;
            if (!c->m[k].member_id && c->m[k].proc.pid && !c->m[k].proc.stopped &&
                member_status(&c->m[k], timeout_ms, &l2, &id2) == 0) {
                c->m[k].member_id = id2;
                if (id2 == leader)
                    return k;
            }
        }
    }
    return -1;
}

static int log_head(const kv_fn_member *m, char *out, size_t cap)
{
    char path[PATH_MAX + 16];
    snprintf(path, sizeof(path), "%s/member.log", m->dir);
    FILE *f = fopen(path, "r");
    if (!f)
        return -errno;
    char line[512];
    out[0] = '\0';
    while (fgets(line, sizeof(line), f)) {
        if (strncmp(line, "===", 3) == 0)
            continue;
        line[strcspn(line, "\n")] = '\0';
        size_t l = strlen(out);
        snprintf(out + l, cap - l, "%s%s", l ? " | " : "", line);
        if (strlen(out) > cap / 2)
            break;
    }
    fclose(f);
    return 0;
}

int kv_fn_cluster_start(kv_fn_cluster *c, uint32_t timeout_ms)
{
    for (int i = 0; i < c->n; i++) {
        int r = kv_fn_member_start(c, i);
        if (r)
            return r;
    }
    int64_t deadline = kv_fn_now_us() + (int64_t)timeout_ms * 1000;
    while (kv_fn_now_us() < deadline) {
        for (int i = 0; i < c->n; i++) {
            kv_fn_member *m = &c->m[i];
            if (m->proc.pid && !kvt_proc_alive(&m->proc)) {
                log_head(m, c->start_error, sizeof(c->start_error));
                return -ENOTSUP;
            }
        }
        if (kv_fn_cluster_leader(c, 500) >= 0 && kv_fn_cluster_wait_writable(c, 2000) >= 0)
            return 0;
        sleep_ms(100);
    }
    return -ETIMEDOUT;
}

int kv_fn_cluster_wait_writable(kv_fn_cluster *c, uint32_t timeout_ms)
{
    int64_t t0 = kv_fn_now_us(), deadline = t0 + (int64_t)timeout_ms * 1000;
    while (kv_fn_now_us() < deadline) {
        for (int i = 0; i < c->n; i++) {
            kv_fn_member *m = &c->m[i];
            if (!m->proc.pid || m->proc.stopped)
                continue;
            kvc_client *kc = NULL;
            if (open_client(&kc, m->endpoint, 1000) != 0)
                continue;
            int r = kvc_put(kc, "/fn/liveness", 12, "x", 1, NULL, 1000, NULL, NULL);
            kvc_close(kc);
            if (r == 0)
                return (int)((kv_fn_now_us() - t0) / 1000);
        }
        sleep_ms(50);
    }
    return -ETIMEDOUT;
}

static int member_hash(const kv_fn_member *m, int64_t rev, uint32_t timeout_ms, kv_fn_hash_obs *o)
{
    kvc_client *kc = NULL;
    int r = open_client(&kc, m->endpoint, timeout_ms);
    if (r)
        return r;
    Etcdserverpb__HashKVRequest req = ETCDSERVERPB__HASH_KVREQUEST__INIT;
    req.revision = rev;
    uint8_t buf[32];
    size_t len = etcdserverpb__hash_kvrequest__pack(&req, buf);
    uint8_t *resp = NULL;
    size_t resp_len = 0;
    r = kvc_call_unary(kc, "/etcdserverpb.Maintenance/HashKV", buf, len, &resp, &resp_len,
                       timeout_ms, KVC_IDEMPOTENT, NULL);
    if (r == 0) {
        Etcdserverpb__HashKVResponse *h =
            etcdserverpb__hash_kvresponse__unpack(NULL, resp_len, resp);
        if (!h) {
            r = -EPROTO;
        } else {
            o->ok = 1;
            o->hash = h->hash;
            o->compact_revision = h->compact_revision;
            o->revision = rev;
            etcdserverpb__hash_kvresponse__free_unpacked(h, NULL);
        }
    }
    kvc_free(resp);
    kvc_close(kc);
    return r;
}

int kv_fn_cluster_hash(kv_fn_cluster *c, kv_fn_hash_obs *obs, uint32_t timeout_ms)
{
    /* The revision: a linearizable Range through the leader's view. Every member must have
     * applied it; a member behind answers "future revision" and is retried. */
    int64_t rev = 0;
    for (int i = 0; i < c->n && rev == 0; i++) {
        kvc_client *kc = NULL;
        if (!c->m[i].proc.pid || open_client(&kc, c->m[i].endpoint, 2000) != 0)
            continue;
        kvc_range_result rr = {0};
        if (kvc_get(kc, "/fn/liveness", 12, NULL, 2000, &rr, NULL) == 0)
            rev = rr.header.revision;
        kvc_range_result_free(&rr);
        kvc_close(kc);
    }
    for (int i = 0; i < c->n; i++) {
        obs[i] = (kv_fn_hash_obs){.member = i};
        int64_t deadline = kv_fn_now_us() + (int64_t)timeout_ms * 1000;
        while (rev > 0 && kv_fn_now_us() < deadline) {
            if (member_hash(&c->m[i], rev, 2000, &obs[i]) == 0)
                break;
            sleep_ms(100);
        }
    }
    return rev > 0 ? 0 : -EIO;
}

int kv_fn_cluster_move_leader(kv_fn_cluster *c, int from, int to, uint32_t timeout_ms)
{
    uint64_t l, id;
    if (!c->m[to].member_id) {
        if (member_status(&c->m[to], timeout_ms, &l, &id) != 0)
            return -EIO;
        c->m[to].member_id = id;
    }
    kvc_client *kc = NULL;
    int r = open_client(&kc, c->m[from].endpoint, timeout_ms);
    if (r)
        return r;
    Etcdserverpb__MoveLeaderRequest req = ETCDSERVERPB__MOVE_LEADER_REQUEST__INIT;
    req.targetid = c->m[to].member_id;
    uint8_t buf[32];
    size_t len = etcdserverpb__move_leader_request__pack(&req, buf);
    uint8_t *resp = NULL;
    size_t resp_len = 0;
    r = kvc_call_unary(kc, "/etcdserverpb.Maintenance/MoveLeader", buf, len, &resp, &resp_len,
                       timeout_ms, 0, NULL);
    kvc_free(resp);
    kvc_close(kc);
    return r;
}
