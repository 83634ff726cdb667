/* cluster: member processes of kvd or etcd on loopback, each behind a peer proxy (fn.h). */
#include "fn.h"
#include "fncluster.h"
#include "kvt_util.h"

#include "kvclient.h"
#include "rpc.pb-c.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
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
    if (t == KV_FN_TARGET_ETCD) {
        const char *e = getenv("KV_ETCDCTL_BIN");
        snprintf(c->ctl, sizeof(c->ctl), "%s", e && *e ? e : "/usr/bin/etcdctl");
    } else {
        const char *b = getenv("KV_BUILD_DIR");
        snprintf(c->ctl, sizeof(c->ctl), "%s/client/kvctl", b && *b ? b : "build");
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
        uint16_t ports[4];
        for (int k = 0; k < 4; k++) {
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
        m->metrics_port = ports[3];
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
    char a_data[PATH_MAX + 16], a_lc[64], a_ac[64], a_lp[64], a_iap[64], a_ic[1024], a_lm[64],
        a_sc[48];
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
    argv[n++] = m->existing ? "--initial-cluster-state=existing" : "--initial-cluster-state=new";
    argv[n++] = "--initial-cluster-token=kvfunctional";
    if (c->target == KV_FN_TARGET_KVD && c->failpoints)
        argv[n++] = "--enable-failpoints";
    if (c->target == KV_FN_TARGET_KVD) {
        snprintf(a_lm, sizeof(a_lm), "--listen-metrics-urls=http://127.0.0.1:%u", m->metrics_port);
        argv[n++] = a_lm;
    }
    if (c->snapshot_count) {
        snprintf(a_sc, sizeof(a_sc), "--snapshot-count=%" PRIu64, c->snapshot_count);
        argv[n++] = a_sc;
    }
    argv[n] = NULL;
    return m->env ? kvt_proc_spawn_env(&m->proc, argv, m->env) : kvt_proc_spawn(&m->proc, argv);
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
    kv_fn_proxies_stop(c);
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
static int member_status_ex(const kv_fn_member *m, uint32_t timeout_ms, uint64_t *leader,
                            uint64_t *member_id, uint64_t *raft_index)
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
            if (raft_index)
                *raft_index = s->raftindex;
            etcdserverpb__status_response__free_unpacked(s, NULL);
        }
    }
    kvc_free(resp);
    kvc_close(kc);
    return r;
}

static int member_status(const kv_fn_member *m, uint32_t timeout_ms, uint64_t *leader,
                         uint64_t *member_id)
{
    return member_status_ex(m, timeout_ms, leader, member_id, NULL);
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

/* ---- fncluster.h: member replacement, snapshots, metrics ---- */

int kv_fn_member_status(kv_fn_cluster *c, int i, uint32_t timeout_ms, uint64_t *leader,
                        uint64_t *raft_index)
{
    kv_fn_member *m = &c->m[i];
    if (!m->proc.pid || m->proc.stopped)
        return -ESRCH;
    uint64_t l = 0, id = 0, ri = 0;
    int r = member_status_ex(m, timeout_ms, &l, &id, &ri);
    if (r)
        return r;
    m->member_id = id;
    if (leader)
        *leader = l;
    if (raft_index)
        *raft_index = ri;
    return 0;
}

uint64_t kv_fn_cluster_raft_index(kv_fn_cluster *c, uint32_t timeout_ms)
{
    uint64_t best = 0;
    for (int i = 0; i < c->n; i++) {
        uint64_t ri = 0;
        if (kv_fn_member_status(c, i, timeout_ms, NULL, &ri) == 0 && ri > best)
            best = ri;
    }
    return best;
}

/* One unary Cluster call through member `via`; the response is unpacked by the caller. */
static int cluster_call(kv_fn_cluster *c, int via, const char *method, const uint8_t *req,
                        size_t len, uint8_t **resp, size_t *resp_len, uint32_t timeout_ms,
                        char *err, size_t errlen)
{
    kvc_client *kc = NULL;
    int r = open_client(&kc, c->m[via].endpoint, timeout_ms);
    if (r) {
        snprintf(err, errlen, "m%d: cannot connect (%d)", via, r);
        return r;
    }
    kvc_error e;
    memset(&e, 0, sizeof(e));
    r = kvc_call_unary(kc, method, req, len, resp, resp_len, timeout_ms, 0, &e);
    if (r)
        snprintf(err, errlen, "m%d: code %d %s", via, e.code, e.message);
    kvc_close(kc);
    return r;
}

int kv_fn_cluster_member_remove(kv_fn_cluster *c, int i, uint32_t timeout_ms, char *err,
                                size_t errlen)
{
    if (!c->m[i].member_id)
        return -EINVAL;
    Etcdserverpb__MemberRemoveRequest req = ETCDSERVERPB__MEMBER_REMOVE_REQUEST__INIT;
    req.id = c->m[i].member_id;
    uint8_t buf[32];
    size_t len = etcdserverpb__member_remove_request__pack(&req, buf);
    int64_t deadline = kv_fn_now_us() + (int64_t)timeout_ms * 1000;
    int r = -ETIMEDOUT;
    while (kv_fn_now_us() < deadline) {
        for (int v = 0; v < c->n; v++) {
            if (v == i || !c->m[v].proc.pid || c->m[v].proc.stopped)
                continue;
            uint8_t *resp = NULL;
            size_t rl = 0;
            r = cluster_call(c, v, "/etcdserverpb.Cluster/MemberRemove", buf, len, &resp, &rl, 3000,
                             err, errlen);
            kvc_free(resp);
            if (r == 0) {
                c->m[i].member_id = 0;
                return 0;
            }
        }
        sleep_ms(200);
    }
    return r;
}

int kv_fn_cluster_member_add(kv_fn_cluster *c, int i, uint32_t timeout_ms, char *err, size_t errlen)
{
    /* kvd derives a member id from its peer URLs and the cluster token, and a removed id
     * never comes back (etcd's ErrIDRemoved): the member rejoins on a fresh proxy port,
     * i.e. a new peer URL, for both targets. */
    if (c->n > 1) {
        uint16_t port = 0;
        kvt_proxy *np = NULL;
        int r = kvt_port_free(&port);
        if (r == 0)
            r = kvt_proxy_start(&np, port, c->m[i].peer_port, (uint64_t)port * 7919 + (uint64_t)i);
        if (r) {
            snprintf(err, errlen, "no new proxy port (%d)", r);
            return r;
        }
        kvt_proxy_stop(c->m[i].proxy);
        c->m[i].proxy = np;
        c->m[i].proxy_port = port;
    }
    char url[64];
    snprintf(url, sizeof(url), "http://127.0.0.1:%u",
             c->n > 1 ? c->m[i].proxy_port : c->m[i].peer_port);
    char *urls[1] = {url};
    Etcdserverpb__MemberAddRequest req = ETCDSERVERPB__MEMBER_ADD_REQUEST__INIT;
    req.n_peerurls = 1;
    req.peerurls = urls;
    uint8_t buf[128];
    size_t len = etcdserverpb__member_add_request__pack(&req, buf);
    int64_t deadline = kv_fn_now_us() + (int64_t)timeout_ms * 1000;
    int r = -ETIMEDOUT;
    while (kv_fn_now_us() < deadline) {
        for (int v = 0; v < c->n; v++) {
            if (v == i || !c->m[v].proc.pid || c->m[v].proc.stopped)
                continue;
            uint8_t *resp = NULL;
            size_t rl = 0;
            r = cluster_call(c, v, "/etcdserverpb.Cluster/MemberAdd", buf, len, &resp, &rl, 3000,
                             err, errlen);
            if (r == 0) {
                Etcdserverpb__MemberAddResponse *a =
                    etcdserverpb__member_add_response__unpack(NULL, rl, resp);
                if (a && a->member) {
                    c->m[i].member_id = a->member->id;
                    c->m[i].existing = 1;
                } else {
                    r = -EPROTO;
                }
                if (a)
                    etcdserverpb__member_add_response__free_unpacked(a, NULL);
            }
            kvc_free(resp);
            if (r == 0)
                return 0;
        }
        sleep_ms(200);
    }
    return r;
}

int kv_fn_member_wipe(kv_fn_cluster *c, int i)
{
    if (c->m[i].proc.pid)
        return -EBUSY;
    char d[PATH_MAX + 8];
    snprintf(d, sizeof(d), "%s/data", c->m[i].dir);
    return kvt_rmtree(d);
}

static int run_ctl(const char *const *argv, char *err, size_t errlen)
{
    kvt_cmd_result res;
    memset(&res, 0, sizeof(res));
    const char *env[] = {"ETCDCTL_API=3", NULL};
    int r = kvt_run(argv, env, NULL, 0, 60000, &res);
    if (r == 0 && (res.exit_code != 0 || res.timed_out)) {
        if (err)
            snprintf(err, errlen, "%s %s exit %d: %.200s", argv[0], argv[2], res.exit_code,
                     res.err ? res.err : "");
        r = -EIO;
    }
    kvt_cmd_result_free(&res);
    return r;
}

int kv_fn_member_snapshot_save(kv_fn_cluster *c, int i, const char *path, char *err, size_t errlen)
{
    char ep[64];
    snprintf(ep, sizeof(ep), "--endpoints=%s", c->m[i].endpoint);
    const char *argv[] = {c->ctl, ep, "snapshot", "save", path, NULL};
    return run_ctl(argv, err, errlen);
}

int kv_fn_member_snapshot_restore(kv_fn_cluster *c, int i, const char *path, char *err,
                                  size_t errlen)
{
    kv_fn_member *m = &c->m[i];
    char a_data[PATH_MAX + 16], a_name[32], a_ic[1024], a_iap[80];
    snprintf(a_data, sizeof(a_data), "--data-dir=%s/data", m->dir);
    snprintf(a_name, sizeof(a_name), "--name=%s", m->name);
    size_t len = (size_t)snprintf(a_ic, sizeof(a_ic), "--initial-cluster=");
    for (int k = 0; k < c->n; k++)
        len += (size_t)snprintf(a_ic + len, sizeof(a_ic) - len, "%sm%d=http://127.0.0.1:%u",
                                k ? "," : "", k, c->n > 1 ? c->m[k].proxy_port : c->m[k].peer_port);
    snprintf(a_iap, sizeof(a_iap), "--initial-advertise-peer-urls=http://127.0.0.1:%u",
             c->n > 1 ? m->proxy_port : m->peer_port);
    const char *argv[] = {c->ctl, "snapshot", "restore", path,
                          a_data, a_name,     a_ic,      "--initial-cluster-token=kvfunctional",
                          a_iap,  NULL};
    int r = run_ctl(argv, err, errlen);
    if (r == 0) {
        m->existing = 0;
        m->member_id = 0;
    }
    return r;
}

/* GET <path> over HTTP/1.0; *out is malloc'd and NUL-terminated. */
static int http_get_metrics(uint16_t port, const char *path, char **out)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    struct timeval tv = {.tv_sec = 3};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int r = 0;
    char *buf = NULL;
    size_t n = 0, cap = 0;
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
        r = -errno;
        goto out;
    }
    char req[256];
    int rl = snprintf(req, sizeof(req), "GET %s HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n", path);
    if (rl <= 0 || (size_t)rl >= sizeof(req) || send(fd, req, (size_t)rl, MSG_NOSIGNAL) != rl) {
        r = -EIO;
        goto out;
    }
    for (;;) {
        if (cap - n < 4096) {
            if (cap >= (8u << 20)) {
                r = -EFBIG;
                goto out;
            }
            size_t nc = cap ? cap * 2 : 65536;
            char *nb = realloc(buf, nc + 1);
            if (!nb) {
                r = -ENOMEM;
                goto out;
            }
            buf = nb;
            cap = nc;
        }
        ssize_t k = recv(fd, buf + n, cap - n, 0);
        if (k < 0) {
            r = -errno;
            goto out;
        }
        if (k == 0)
            break;
        n += (size_t)k;
    }
    if (!buf) {
        r = -EIO;
        goto out;
    }
    buf[n] = '\0';
    *out = buf;
    buf = NULL;
out:
    free(buf);
    close(fd);
    return r;
}

/* Sum of the samples named in names on the metrics page served on port at path. */
static int64_t metric_sum(uint16_t port, const char *path, const char *const *names)
{
    char *page = NULL;
    int r = http_get_metrics(port, path, &page);
    if (r)
        return r;
    double sum = 0;
    for (char *line = page; line && *line;) {
        char *nl = strchr(line, '\n');
        if (nl)
            *nl = '\0';
        if (line[0] != '#')
            for (size_t k = 0; names[k]; k++) {
                size_t l = strlen(names[k]);
                if (strncmp(line, names[k], l) == 0 && (line[l] == ' ' || line[l] == '{')) {
                    const char *sp = strrchr(line, ' ');
                    if (sp)
                        sum += strtod(sp + 1, NULL);
                }
            }
        line = nl ? nl + 1 : NULL;
    }
    free(page);
    return (int64_t)sum;
}

int64_t kv_fn_member_metric(kv_fn_cluster *c, int i, const char *const *names)
{
    kv_fn_member *m = &c->m[i];
    if (!m->proc.pid || m->proc.stopped)
        return -ESRCH;
    return metric_sum(c->target == KV_FN_TARGET_KVD ? m->metrics_port : m->client_port, "/metrics",
                      names);
}

int64_t kv_fn_proxy_metric(kv_fn_cluster *c, int i, const char *const *names)
{
    if (i < 0 || i >= c->n_proxies || !c->gp[i].proc.pid)
        return -ESRCH;
    /* etcd 3.4's proxy serves a member's page (fetched upstream) on /metrics, and Debian's
     * 3.4.23 has no page of its own: nothing to read. */
    if (c->target == KV_FN_TARGET_ETCD)
        return -ENOTSUP;
    return metric_sum(c->gp[i].metrics_port, "/metrics", names);
}
