/*
 * cluster_require_leader: etcd's WithRequireLeader ("hasleader: true" request metadata,
 * server/api/require_leader.h) on a follower cut off from its peers (the partition failpoint:
 * its peer frames are dropped, connections stay up), through libkvclient's per-call metadata
 * (kvc_call_md.require_leader):
 *   - before the cut, a hasleader Range is served;
 *   - once the follower has lost its leader, a hasleader Range is answered at once with
 *     UNAVAILABLE "etcdserver: no leader" (not left waiting for a ReadIndex);
 *   - a Watch stream opened with hasleader is ended with the same status within a few
 *     election timeouts; a Watch stream without it stays open (etcd's behaviour);
 *   - after the heal, hasleader calls are served again.
 * kvd only: the partition failpoint is kvd's.
 */
#include "cl_util.h"
#include "kvclient.h"
#include "kvt_kvc.h"
#include "kvt_util.h"
#include "rpc.pb-c.h"

#include <criterion/criterion.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static kvt_cluster g_c;

static void fini(void)
{
    kvt_cluster_destroy(&g_c);
}

/* A client talking to member i only. */
static kvc_client *client_only(int i)
{
    return kvt_kvc_open(g_c.m[i].endpoint);
}

/* One completion slot, filled on libkvclient's I/O thread. */
typedef struct slot {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done, status, msgs;
    char message[256];
} slot;

static void slot_init(slot *s)
{
    memset(s, 0, sizeof *s);
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
}

static void slot_end(slot *s, int status, const kvc_error *err)
{
    pthread_mutex_lock(&s->mu);
    s->done = 1;
    s->status = status;
    snprintf(s->message, sizeof s->message, "%s", err ? err->message : "");
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

/* Waits up to timeout_ms for the slot; 1 when done. */
static int slot_wait(slot *s, uint32_t timeout_ms)
{
    uint64_t end = kvt_now_ms() + timeout_ms;
    pthread_mutex_lock(&s->mu);
    while (!s->done && kvt_now_ms() < end) {
        pthread_mutex_unlock(&s->mu);
        kvt_sleep_ms(20);
        pthread_mutex_lock(&s->mu);
    }
    int d = s->done;
    pthread_mutex_unlock(&s->mu);
    return d;
}

static void on_unary(void *arg, int status, const kvc_error *err, uint8_t *resp, size_t len)
{
    (void)len;
    kvc_free(resp);
    slot_end(arg, status, err);
}

/* A linearizable Range of "rl" through c with hasleader; its status, message in *msg. */
static int range_hasleader(kvc_client *c, char *msg, size_t cap)
{
    Etcdserverpb__RangeRequest r = ETCDSERVERPB__RANGE_REQUEST__INIT;
    r.key = (ProtobufCBinaryData){2, (uint8_t *)"rl"};
    uint8_t buf[32];
    size_t len = etcdserverpb__range_request__pack(&r, buf);
    kvc_call_md md = {.auth_token = NULL, .require_leader = 1};
    slot s;
    slot_init(&s);
    kvc_error err;
    int rc = kvc_call_unary_md_async(c, "/etcdserverpb.KV/Range", buf, len, 3000, 0, &md, on_unary,
                                     &s, &err);
    cr_assert_eq(rc, 0, "queue: %s", err.message);
    cr_assert(slot_wait(&s, 10000), "the Range never completed");
    snprintf(msg, cap, "%s", s.message);
    return s.status;
}

static void on_watch_msg(void *arg, const uint8_t *msg, size_t len)
{
    (void)msg;
    (void)len;
    slot *s = arg;
    pthread_mutex_lock(&s->mu);
    s->msgs++;
    pthread_mutex_unlock(&s->mu);
}

static void on_watch_end(void *arg, int status, const kvc_error *err)
{
    slot_end(arg, status, err);
}

/* A Watch stream on "rl" (require_leader as given) whose Created response arrived. */
static kvc_bidi *watch_open(kvc_client *c, int require_leader, slot *s)
{
    slot_init(s);
    kvc_call_md md = {.auth_token = NULL, .require_leader = require_leader};
    kvc_bidi *b = NULL;
    kvc_error err;
    cr_assert_eq(kvc_bidi_open_md(c, "/etcdserverpb.Watch/Watch", 0, &md, on_watch_msg,
                                  on_watch_end, s, &b, &err),
                 0, "open: %s", err.message);
    Etcdserverpb__WatchCreateRequest cr = ETCDSERVERPB__WATCH_CREATE_REQUEST__INIT;
    cr.key = (ProtobufCBinaryData){2, (uint8_t *)"rl"};
    Etcdserverpb__WatchRequest w = ETCDSERVERPB__WATCH_REQUEST__INIT;
    w.request_union_case = ETCDSERVERPB__WATCH_REQUEST__REQUEST_UNION_CREATE_REQUEST;
    w.create_request = &cr;
    uint8_t buf[64];
    size_t len = etcdserverpb__watch_request__pack(&w, buf);
    cr_assert_eq(kvc_bidi_send(b, buf, len, &err), 0, "send: %s", err.message);
    for (int i = 0; i < 500; i++) {
        pthread_mutex_lock(&s->mu);
        int got = s->msgs, done = s->done;
        pthread_mutex_unlock(&s->mu);
        cr_assert(!done, "watch ended: %d %s", s->status, s->message);
        if (got > 0)
            return b;
        kvt_sleep_ms(20);
    }
    cr_assert_fail("no Created response");
    return NULL;
}

Test(cluster_require_leader, isolated_follower_refuses_and_ends_hasleader_streams, .fini = fini,
     .timeout = 180)
{
    if (kvt_target_from_env() != KV_TEST_SERVER_KVD)
        cr_skip_test("the partition failpoint is kvd's");
    cr_assert_eq(cl_start(&g_c, 3, 0), 0);
    int l = kvt_cluster_wait_leader(&g_c, 10000, NULL);
    cr_assert_geq(l, 0);
    int f = (l + 1) % 3;
    /* two clients on the follower alone: a refused call makes libkvclient drop its
     * connection (failover), which must not be what ends the streams */
    kvc_client *c = client_only(f), *cs = client_only(f);
    char msg[256];
    int st = range_hasleader(c, msg, sizeof msg);
    cr_assert_eq(st, 0, "hasleader Range with a leader: %d %s", st, msg);

    slot sa, sb;
    kvc_bidi *a = watch_open(cs, 1, &sa);
    kvc_bidi *b = watch_open(cs, 0, &sb);

    cr_assert_eq(kvt_member_partition(&g_c, f, 1), 0);
    uint64_t t0 = kvt_now_ms();
    /* unary: refused once the follower has no leader (after about an election timeout) */
    uint64_t refused_at = 0;
    while (kvt_now_ms() - t0 < 15000) {
        st = range_hasleader(c, msg, sizeof msg);
        if (st == -KVC_UNAVAILABLE && strcmp(msg, "etcdserver: no leader") == 0) {
            refused_at = kvt_now_ms() - t0;
            break;
        }
        kvt_sleep_ms(100);
    }
    cr_assert(refused_at, "hasleader Range never refused: last %d %s", st, msg);
    /* the hasleader stream ends: 3 checks of one election timeout each without a leader */
    cr_assert(slot_wait(&sa, 15000), "the hasleader watch stream was not ended");
    uint64_t ended_at = kvt_now_ms() - t0;
    cr_assert_eq(sa.status, -KVC_UNAVAILABLE, "status %d %s", sa.status, sa.message);
    cr_assert_str_eq(sa.message, "etcdserver: no leader");
    /* the plain stream is left open */
    kvt_sleep_ms(2 * CL_ELECTION_MS);
    pthread_mutex_lock(&sb.mu);
    int b_done = sb.done;
    pthread_mutex_unlock(&sb.mu);
    cr_assert(!b_done, "a watch without hasleader was ended: %d %s", sb.status, sb.message);
    cr_assert_geq(cl_metric(&g_c, f, "kvd_require_leader_streams_ended_total"), 1);
    fprintf(stderr,
            "  isolated follower: hasleader Range refused after %llu ms, hasleader watch "
            "ended after %llu ms (election timeout %u ms)\n",
            (unsigned long long)refused_at, (unsigned long long)ended_at, CL_ELECTION_MS);

    cr_assert_eq(kvt_member_partition(&g_c, f, 0), 0);
    uint64_t t1 = kvt_now_ms();
    while (kvt_now_ms() - t1 < 15000) {
        st = range_hasleader(c, msg, sizeof msg);
        if (st == 0)
            break;
        kvt_sleep_ms(100);
    }
    cr_assert_eq(st, 0, "hasleader Range after the heal: %d %s", st, msg);
    kvc_bidi_free(a);
    kvc_bidi_free(b);
    kvc_close(cs);
    kvc_close(c);
}
