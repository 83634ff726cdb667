/*
 * fuzz_raft_msg - the raft peer message codec of server/raftlog/msg_codec.c.
 *
 * Input: byte 0 is max_entries (0..255), the rest is a kvdraftpb.Message as it arrives from a
 * peer. Invariants checked (abort on violation): decode returns 0 or -EBADMSG; an accepted
 * message satisfies every documented bound (type range, non-zero from/to, entries only on
 * APPEND, at most max_entries, contiguous from index + 1, entry types, conf sizes and
 * non-zero ids); it re-encodes, and decoding that again gives the same message (fields,
 * entries and their data).
 */
#include "fuzz.h"
#include "raftlog/msg_codec.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static void check_bounds(const struct raft_msg *m, size_t max_entries)
{
    if (m->type < RAFT_MSG_APPEND || m->type > RAFT_MSG_TIMEOUT_NOW || !m->from || !m->to)
        abort();
    if (m->n_entries > max_entries || (m->n_entries && m->type != RAFT_MSG_APPEND))
        abort();
    for (size_t i = 0; i < m->n_entries; i++)
        if (m->entries[i].index != m->index + 1 + i || m->entries[i].type > RAFT_ENTRY_CONF)
            abort();
    const struct raft_conf *c = &m->snapshot.meta.conf;
    if (c->n_voters > RAFT_MAX_NODES || c->n_learners > RAFT_MAX_NODES)
        abort();
    for (uint32_t i = 0; i < c->n_voters; i++)
        if (!c->voters[i])
            abort();
    for (uint32_t i = 0; i < c->n_learners; i++)
        if (!c->learners[i])
            abort();
}

static void check_same(const struct raft_msg *a, const struct raft_msg *b)
{
    if (a->type != b->type || a->reject != b->reject || a->transfer != b->transfer ||
        a->from != b->from || a->to != b->to || a->term != b->term || a->log_term != b->log_term ||
        a->index != b->index || a->commit != b->commit || a->reject_hint != b->reject_hint ||
        a->hint_term != b->hint_term || a->ctx != b->ctx || a->n_entries != b->n_entries)
        abort();
    for (size_t i = 0; i < a->n_entries; i++) {
        const struct raft_entry *x = &a->entries[i], *y = &b->entries[i];
        if (x->term != y->term || x->index != y->index || x->type != y->type || x->len != y->len ||
            (x->len && memcmp(x->data, y->data, x->len)))
            abort();
    }
    if (memcmp(&a->snapshot.meta, &b->snapshot.meta, sizeof a->snapshot.meta))
        abort();
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    size_t max_entries = data[0];
    kv_raft_msg_owned d, d2;
    int rc = kv_raft_msg_decode(data + 1, size - 1, max_entries, &d);
    if (rc == -EBADMSG) {
        if (d.mem_)
            abort();
        return 0;
    }
    if (rc != 0)
        abort();
    check_bounds(&d.msg, max_entries);
    uint8_t *buf;
    size_t len;
    if (kv_raft_msg_encode(&d.msg, &buf, &len) != 0)
        abort();
    if (kv_raft_msg_decode(buf, len, max_entries, &d2) != 0)
        abort();
    free(buf); /* d2 must not point into buf */
    check_same(&d.msg, &d2.msg);
    kv_raft_msg_free(&d2);
    kv_raft_msg_free(&d);
    return 0;
}
