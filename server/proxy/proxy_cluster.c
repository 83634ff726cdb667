/*
 * proxy_cluster.c - Cluster.MemberList through the proxy (etcd 3.4's clusterProxy,
 * proxy/grpcproxy/cluster.go; docs/proxy.md, "Registration").
 *
 * - No --advertise-client-url: forwarded like any unary call (proxy_unary.c).
 * - --advertise-client-url without --resolver-prefix: answered here with one member, this
 *   proxy: Name = the host name, ClientURLs = [advertise URL].
 * - With --resolver-prefix too: the members are the proxies registered under <prefix>/:
 *   one Member per distinct Addr (the last key wins, as etcd's map), Name from its
 *   Metadata, ClientURLs [Addr], in key order. Records that do not decode as a naming.Update
 *   are skipped (as etcd's resolver); one whose Metadata does not decode fails the call with
 *   UNKNOWN (as etcd's clusterProxy). None registered, or the registry cannot be read (no
 *   member reachable): this proxy alone, as etcd answers before its resolver has fetched.
 *   etcd keeps the registry current with a watch; kvd reads it at each MemberList with a
 *   serializable range of the prefix (etcd's resolver's first read), so the answer is
 *   never staler than the member's, and nothing is kept between calls.
 * Answers carry what etcd's carry: no header, Member ID 0, no peer URLs.
 *
 * Bound: --max-resolver-members. The range asks for at most that many + 1 keys; more keys
 * registered under the prefix answer RESOURCE_EXHAUSTED "etcdserver: too many requests"
 * (kvd_proxy_refused_total{reason="resolver_members"}). Ranges in flight count in
 * --max-pending-requests (kvd_proxy_unary_pending).
 *
 * Threads: the loop, except range_io (libkvclient's I/O thread), which only posts a bridge
 * event. Ownership: kv_proxy_cluster is owned by kv_proxy (kv_proxy_cluster_free); one op
 * per range in flight, freed by the loop on its KV_PROXY_EV_CLUSTER event; a cancelled
 * client call only clears op->call.
 */
#include "proxy/proxy_int.h"
#include "proxy/proxy_naming.h"

#include "common/etcd_errors.h"

#include "rpc.pb-c.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define RANGE_PATH "/etcdserverpb.KV/Range"

struct kv_proxy_cluster {
    char host[256];
    uint8_t *range; /* the packed RangeRequest of the registry */
    size_t range_len;
    kv_metric *m_members, *m_local;
};

typedef struct op {
    kv_proxy *p;
    kv_grpc_call *call; /* NULL once the client went away */
} op;

typedef struct member {
    char *addr, *meta;
} member;

static int send_members(kv_grpc_call *call, Etcdserverpb__Member **ms, size_t n)
{
    Etcdserverpb__MemberListResponse r = ETCDSERVERPB__MEMBER_LIST_RESPONSE__INIT;
    r.members = ms;
    r.n_members = n;
    size_t len = etcdserverpb__member_list_response__get_packed_size(&r);
    uint8_t *b = malloc(len ? len : 1);
    if (!b)
        return kv_grpc_call_finish(call, KV_GRPC_RESOURCE_EXHAUSTED,
                                   kv_etcd_err_msg(KV_ERR_TOO_MANY_REQUESTS));
    etcdserverpb__member_list_response__pack(&r, b);
    int rc = kv_grpc_call_send(call, b, len);
    free(b);
    if (rc < 0)
        return kv_grpc_call_finish(call, KV_GRPC_RESOURCE_EXHAUSTED,
                                   "kvd grpc-proxy: response does not fit the client's buffers");
    return kv_grpc_call_finish(call, KV_GRPC_OK, NULL);
}

/* This proxy alone: etcd's answer without a prefix, or with none registered. */
static int answer_self(kv_proxy *p, kv_grpc_call *call)
{
    kv_proxy_cluster *k = p->cluster;
    Etcdserverpb__Member m = ETCDSERVERPB__MEMBER__INIT;
    Etcdserverpb__Member *mp = &m;
    char *url = (char *)p->cfg->advertise_client_url;
    m.name = k->host;
    m.clienturls = &url;
    m.n_clienturls = 1;
    kv_metric_inc(k->m_local);
    return send_members(call, &mp, 1);
}

static void free_members(member *ms, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(ms[i].addr);
        free(ms[i].meta);
    }
    free(ms);
}

/* The registry's RangeResponse -> the client's answer. */
static void answer_registry(kv_proxy *p, kv_grpc_call *call, const uint8_t *b, size_t len)
{
    kv_proxy_cluster *k = p->cluster;
    Etcdserverpb__RangeResponse *rr = etcdserverpb__range_response__unpack(NULL, len, b);
    if (!rr) {
        answer_self(p, call);
        return;
    }
    if (rr->count > (int64_t)p->cfg->max_resolver_members ||
        rr->n_kvs > p->cfg->max_resolver_members) {
        fprintf(stderr,
                "kvd grpc-proxy: warning: MemberList: %lld proxies registered under \"%s/\", "
                "more than --max-resolver-members=%u\n",
                (long long)rr->count, p->cfg->resolver_prefix, p->cfg->max_resolver_members);
        etcdserverpb__range_response__free_unpacked(rr, NULL);
        kv_proxy_refuse(p, call, KV_PROXY_REFUSED_RESOLVER_MEMBERS);
        return;
    }
    member *ms = calloc(rr->n_kvs ? rr->n_kvs : 1, sizeof *ms);
    Etcdserverpb__Member *pm = calloc(rr->n_kvs ? rr->n_kvs : 1, sizeof *pm);
    Etcdserverpb__Member **pp = calloc(rr->n_kvs ? rr->n_kvs : 1, sizeof *pp);
    char **names = calloc(rr->n_kvs ? rr->n_kvs : 1, sizeof *names);
    size_t n = 0, named = 0;
    const char *bad = NULL;
    if (!ms || !pm || !pp || !names) {
        kv_grpc_call_finish(call, KV_GRPC_RESOURCE_EXHAUSTED,
                            kv_etcd_err_msg(KV_ERR_TOO_MANY_REQUESTS));
        goto out;
    }
    for (size_t i = 0; i < rr->n_kvs; i++) {
        member m;
        if (kv_proxy_naming_decode(rr->kvs[i]->value.data, rr->kvs[i]->value.len, &m.addr,
                                   &m.meta) < 0)
            continue; /* etcd's resolver skips what it cannot unmarshal */
        size_t j = 0;
        while (j < n && strcmp(ms[j].addr, m.addr) != 0)
            j++;
        if (j < n) { /* one map entry per Addr: the later record wins */
            free(ms[j].addr);
            free(ms[j].meta);
        } else {
            n++;
        }
        ms[j] = m;
    }
    for (; named < n; named++) {
        if (!ms[named].meta || kv_proxy_naming_meta_name(ms[named].meta, &names[named]) < 0) {
            bad = ms[named].addr;
            break;
        }
        Etcdserverpb__Member init = ETCDSERVERPB__MEMBER__INIT;
        pm[named] = init;
        pm[named].name = names[named];
        pm[named].clienturls = &ms[named].addr;
        pm[named].n_clienturls = 1;
        pp[named] = &pm[named];
    }
    kv_metric_set(k->m_members, (double)n);
    if (bad) {
        char msg[512];
        snprintf(msg, sizeof msg,
                 "kvd grpc-proxy: the registration of \"%.200s\" under \"%.200s/\" has no "
                 "{\"name\": ...} metadata",
                 bad, p->cfg->resolver_prefix);
        kv_grpc_call_finish(call, KV_GRPC_UNKNOWN, msg);
    } else if (n == 0) {
        answer_self(p, call);
    } else {
        send_members(call, pp, n);
    }
out:
    if (names)
        for (size_t i = 0; i < named; i++)
            free(names[i]);
    free(names);
    free(pp);
    free(pm);
    if (ms)
        free_members(ms, n);
    etcdserverpb__range_response__free_unpacked(rr, NULL);
}

static void range_io(void *arg, int status, const kvc_error *err, uint8_t *resp, size_t len)
{
    op *o = arg;
    int code = status == 0 ? 0 : err ? err->code : -status;
    kv_proxy_bridge_post_reply(&o->p->bridge, KV_PROXY_EV_CLUSTER, o, code,
                               err ? err->message : NULL, resp, len, kvc_free);
}

void kv_proxy_cluster_on_event(kv_proxy *p, kv_proxy_ev *ev)
{
    op *o = ev->target;
    p->unary_pending--;
    kv_metric_set(p->m_unary_pending, p->unary_pending);
    if (o->call) {
        kv_grpc_call_set_data(o->call, NULL);
        if (ev->code == 0) {
            answer_registry(p, o->call, ev->buf, ev->len);
        } else {
            fprintf(stderr, "kvd grpc-proxy: warning: MemberList: reading \"%s/\": %s\n",
                    p->cfg->resolver_prefix, (const char *)ev->buf);
            answer_self(p, o->call); /* etcd: "not fetched yet" */
        }
    }
    free(o);
    kv_proxy_ev_free(ev);
}

void kv_proxy_cluster_on_message(kv_grpc_call *call, const uint8_t *msg, size_t len)
{
    kv_proxy *p = kv_grpc_call_app(call);
    if (!p->cfg->advertise_client_url) {
        kv_proxy_unary_on_message(call, msg, len);
        return;
    }
    if (!p->cfg->resolver_prefix) {
        answer_self(p, call);
        return;
    }
    if (p->unary_pending >= p->cfg->max_pending_requests) {
        kv_proxy_refuse(p, call, KV_PROXY_REFUSED_PENDING_REQUESTS);
        return;
    }
    op *o = calloc(1, sizeof *o);
    if (!o) {
        kv_grpc_call_finish(call, KV_GRPC_RESOURCE_EXHAUSTED,
                            kv_etcd_err_msg(KV_ERR_TOO_MANY_REQUESTS));
        return;
    }
    o->p = p;
    o->call = call;
    kvc_error e;
    kvc_call_md md;
    kv_proxy_call_md(call, &md); /* the client's token reads the registry as itself */
    int rc = kvc_call_unary_md_async(p->up, RANGE_PATH, p->cluster->range, p->cluster->range_len,
                                     kv_proxy_call_timeout(p, call), KVC_IDEMPOTENT, &md, range_io,
                                     o, &e);
    if (rc != 0) {
        free(o);
        if (-rc == KVC_RESOURCE_EXHAUSTED)
            kv_proxy_refuse(p, call, KV_PROXY_REFUSED_PENDING_REQUESTS);
        else
            answer_self(p, call);
        return;
    }
    kv_grpc_call_set_data(call, o);
    p->unary_pending++;
    kv_metric_set(p->m_unary_pending, p->unary_pending);
}

void kv_proxy_cluster_on_cancel(kv_grpc_call *call)
{
    kv_proxy *p = kv_grpc_call_app(call);
    if (!p->cfg->advertise_client_url) {
        kv_proxy_unary_on_cancel(call);
        return;
    }
    op *o = kv_grpc_call_data(call);
    if (o)
        o->call = NULL; /* freed when its range completes */
}

int kv_proxy_cluster_init(kv_proxy *p)
{
    const kv_proxy_config *cfg = p->cfg;
    if (!cfg->advertise_client_url)
        return 0;
    kv_proxy_cluster *k = calloc(1, sizeof *k);
    if (!k)
        return -ENOMEM;
    if (gethostname(k->host, sizeof k->host - 1) != 0)
        k->host[0] = 0;
    if (cfg->resolver_prefix) {
        /* etcd's resolver: Get(prefix + "/", WithPrefix(), WithSerializable()), through the
         * namespaced client: <namespace><prefix>/ on the members */
        const char *ns = cfg->ns ? cfg->ns : "";
        size_t pl = strlen(ns) + strlen(cfg->resolver_prefix) + 1;
        uint8_t *key = malloc(pl + 1), *end = malloc(pl + 1);
        if (!key || !end) {
            free(key);
            free(end);
            free(k);
            return -ENOMEM;
        }
        snprintf((char *)key, pl + 1, "%s%s/", ns, cfg->resolver_prefix);
        memcpy(end, key, pl);
        end[pl - 1]++; /* '/' + 1: the prefix's end */
        Etcdserverpb__RangeRequest q = ETCDSERVERPB__RANGE_REQUEST__INIT;
        q.key.data = key;
        q.key.len = pl;
        q.range_end.data = end;
        q.range_end.len = pl;
        q.limit = (int64_t)cfg->max_resolver_members + 1;
        q.serializable = 1;
        k->range_len = etcdserverpb__range_request__get_packed_size(&q);
        k->range = malloc(k->range_len);
        if (k->range)
            etcdserverpb__range_request__pack(&q, k->range);
        free(key);
        free(end);
        if (!k->range) {
            free(k);
            return -ENOMEM;
        }
    }
    kv_metrics *m = p->metrics;
    k->m_members = kv_metrics_gauge(m, "kvd_proxy_resolver_members",
                                    "Proxies registered under --resolver-prefix at the last "
                                    "MemberList (bound: --max-resolver-members).",
                                    NULL);
    k->m_local = kv_metrics_counter(m, "kvd_proxy_memberlist_self_total",
                                    "MemberList calls answered with this proxy alone.", NULL);
    p->cluster = k;
    return 0;
}

void kv_proxy_cluster_free(kv_proxy *p)
{
    kv_proxy_cluster *k = p->cluster;
    if (!k)
        return;
    free(k->range);
    free(k);
    p->cluster = NULL;
}
