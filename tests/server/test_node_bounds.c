/* The node's raft inbox bounds (--max-raft-inbox-messages, --max-raft-inbox-bytes): raft
 * messages from peers wait in the inbox while the node cannot step them (here: the apply-path
 * stall failpoint); past either bound they are dropped and counted by bound, and one message is
 * always taken into an empty inbox, whatever its size. In-process: one node of a 3-voter
 * configuration without a transport; messages are fed with kv_node_on_peer_message. */
#include "node/node.h"
#include "peer/peer_frames.h"
#include "raft/raft.h"
#include "raftlog/msg_codec.h"
#include "kvt_util.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PEER_T_RAFT ((uint32_t)KV_PEER_T_RAFT) /* peer/peer_frames.h */

typedef struct bfx {
    char dir[64];
    uv_loop_t loop;
    kv_store *store;
    kv_metrics *metrics;
    kv_node *node;
} bfx;

static void bfx_open(bfx *f, uint32_t max_msgs, size_t max_bytes)
{
    snprintf(f->dir, sizeof(f->dir), "/tmp/kvd-nbounds-XXXXXX");
    cr_assert_not_null(mkdtemp(f->dir));
    kv_store_config sc;
    kv_store_config_default(&sc);
    sc.dir = f->dir;
    sc.quota_bytes = 64u << 20;
    cr_assert_eq(kv_store_open(&f->store, &sc), 0);
    cr_assert_eq(uv_loop_init(&f->loop), 0);
    cr_assert_eq(kv_metrics_new(&f->metrics, 0), 0);
    static const uint64_t voters[] = {2, 3, 4};
    kv_header_info hdr = {.cluster_id = 1, .member_id = 2, .raft_term = 1};
    kv_node_config nc = {.voters = voters,
                         .n_voters = 3,
                         .election_ms = 60000, /* no campaign during the test */
                         .max_inbox_msgs = max_msgs,
                         .max_inbox_bytes = max_bytes};
    cr_assert_eq(kv_node_init(&f->node, &f->loop, f->store, &nc, &hdr, f->metrics), 0);
    for (int i = 0; i < 10; i++)
        uv_run(&f->loop, UV_RUN_NOWAIT);
}

static void bfx_close(bfx *f)
{
    kv_node_close(f->node);
    uv_run(&f->loop, UV_RUN_DEFAULT);
    cr_assert_eq(uv_loop_close(&f->loop), 0);
    kv_metrics_free(f->metrics);
    kv_store_close(f->store);
    cr_assert_eq(kvt_rmtree(f->dir), 0);
}

/* Value of the sample `series` (name plus exact labels) in the rendered registry. */
static double metric(bfx *f, const char *series)
{
    char *text = NULL;
    size_t len = 0;
    cr_assert_eq(kv_metrics_render(f->metrics, &text, &len), 0);
    char pat[160];
    snprintf(pat, sizeof(pat), "\n%s ", series);
    const char *p = strstr(text, pat);
    cr_assert_not_null(p, "no sample %s", series);
    double v = strtod(p + strlen(pat), NULL);
    free(text);
    return v;
}

/* Feeds an APPEND from member 3 with one entry of data_len bytes (prev index 100 does not
 * match this member's log: stepped later, it is only rejected). Returns the wire size. */
static size_t feed_append(bfx *f, size_t data_len)
{
    static uint8_t data[64 << 10];
    cr_assert_leq(data_len, sizeof(data));
    memset(data, 'd', data_len);
    struct raft_entry e = {
        .term = 1, .index = 101, .type = RAFT_ENTRY_NORMAL, .data = data, .len = data_len};
    struct raft_msg m;
    memset(&m, 0, sizeof(m));
    m.type = RAFT_MSG_APPEND;
    m.from = 3;
    m.to = 2;
    m.term = 1;
    m.index = 100;
    m.log_term = 1;
    m.entries = &e;
    m.n_entries = 1;
    uint8_t *buf = NULL;
    size_t len = 0;
    cr_assert_eq(kv_raft_msg_encode(&m, &buf, &len), 0);
    kv_node_on_peer_message(f->node, 3, PEER_T_RAFT, buf, len);
    free(buf);
    return len;
}

static void feed_heartbeat(bfx *f)
{
    struct raft_msg m;
    memset(&m, 0, sizeof(m));
    m.type = RAFT_MSG_HEARTBEAT;
    m.from = 3;
    m.to = 2;
    m.term = 1;
    uint8_t *buf = NULL;
    size_t len = 0;
    cr_assert_eq(kv_raft_msg_encode(&m, &buf, &len), 0);
    kv_node_on_peer_message(f->node, 3, PEER_T_RAFT, buf, len);
    free(buf);
}

Test(node_bounds, inbox_bounded_in_messages)
{
    bfx f;
    bfx_open(&f, 4, 64u << 20);
    kv_node_set_stalled(f.node, 1);
    for (int i = 0; i < 10; i++)
        feed_heartbeat(&f);
    cr_assert_eq(metric(&f, "kvd_raft_inbox_messages"), 4);
    cr_assert_eq(metric(&f, "kvd_raft_inbox_dropped_total"), 6);
    cr_assert_eq(metric(&f, "kvd_raft_inbox_dropped_by_bound_total{bound=\"messages\"}"), 6);
    cr_assert_eq(metric(&f, "kvd_raft_inbox_dropped_by_bound_total{bound=\"bytes\"}"), 0);
    cr_assert_eq(metric(&f, "kvd_raft_inbox_messages_peak"), 4);
    /* resumed: the inbox is stepped and empties; room again */
    kv_node_set_stalled(f.node, 0);
    for (int i = 0; i < 50; i++)
        uv_run(&f.loop, UV_RUN_NOWAIT);
    cr_assert_eq(metric(&f, "kvd_raft_inbox_messages"), 0);
    cr_assert_eq(metric(&f, "kvd_raft_inbox_bytes"), 0);
    kv_node_set_stalled(f.node, 1);
    for (int i = 0; i < 4; i++)
        feed_heartbeat(&f);
    cr_assert_eq(metric(&f, "kvd_raft_inbox_dropped_total"), 6);
    kv_node_set_stalled(f.node, 0);
    bfx_close(&f);
}

Test(node_bounds, inbox_bounded_in_bytes_one_message_always_fits)
{
    bfx f;
    bfx_open(&f, 4096, 4000);
    kv_node_set_stalled(f.node, 1);
    /* one message larger than the whole bound is taken into the empty inbox */
    size_t big = feed_append(&f, 10000);
    cr_assert_gt(big, 4000);
    cr_assert_eq(metric(&f, "kvd_raft_inbox_messages"), 1);
    cr_assert_eq(metric(&f, "kvd_raft_inbox_bytes"), (double)big);
    (void)feed_append(&f, 10);
    cr_assert_eq(metric(&f, "kvd_raft_inbox_dropped_by_bound_total{bound=\"bytes\"}"), 1);
    kv_node_set_stalled(f.node, 0);
    for (int i = 0; i < 50; i++)
        uv_run(&f.loop, UV_RUN_NOWAIT);
    cr_assert_eq(metric(&f, "kvd_raft_inbox_bytes"), 0);
    /* 1 KiB appends: three fit in 4000 bytes, the rest is dropped by the byte bound */
    kv_node_set_stalled(f.node, 1);
    size_t one = 0;
    for (int i = 0; i < 10; i++)
        one = feed_append(&f, 1024);
    size_t fit = 4000 / one;
    cr_assert_eq(metric(&f, "kvd_raft_inbox_messages"), (double)fit);
    cr_assert_eq(metric(&f, "kvd_raft_inbox_bytes"), (double)(fit * one));
    cr_assert_eq(metric(&f, "kvd_raft_inbox_dropped_by_bound_total{bound=\"bytes\"}"),
                 (double)(1 + 10 - fit));
    cr_assert_eq(metric(&f, "kvd_raft_inbox_dropped_by_bound_total{bound=\"messages\"}"), 0);
    cr_assert_eq(metric(&f, "kvd_raft_inbox_bytes_peak"), (double)big);
    kv_node_set_stalled(f.node, 0);
    bfx_close(&f);
}
