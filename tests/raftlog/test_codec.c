/* msg_codec: raft_msg <-> kvdraftpb.Message round trips, bounds, truncated and garbage input. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "raft.pb-c.h"
#include "raftlog/msg_codec.h"

static const char *payload[3] = {"alpha", "", "a somewhat longer entry payload"};

/* A message of type t with every field set (entries only on APPEND, meta on SNAPSHOT). */
static struct raft_msg sample(uint8_t t, struct raft_entry *ents)
{
    struct raft_msg m;
    memset(&m, 0, sizeof m);
    m.type = t;
    m.reject = t % 2 == 0;
    m.transfer = t == RAFT_MSG_VOTE || t == RAFT_MSG_PREVOTE;
    m.from = 3;
    m.to = 0xffffffffffffff01ull;
    m.term = 77 + t;
    m.log_term = 76;
    m.index = 1000;
    m.commit = 990;
    m.reject_hint = 995;
    m.hint_term = 70;
    m.ctx = 0x123456789abcdefull;
    if (t == RAFT_MSG_APPEND) {
        for (size_t i = 0; i < 3; i++)
            ents[i] = (struct raft_entry){.term = 76 + i / 2,
                                          .index = 1001 + i,
                                          .type = i == 2 ? RAFT_ENTRY_CONF : RAFT_ENTRY_NORMAL,
                                          .data = payload[i],
                                          .len = strlen(payload[i])};
        m.entries = ents;
        m.n_entries = 3;
    }
    if (t == RAFT_MSG_SNAPSHOT) {
        m.snapshot.meta.index = 5000;
        m.snapshot.meta.term = 9;
        m.snapshot.meta.conf.n_voters = 3;
        for (uint32_t i = 0; i < 3; i++)
            m.snapshot.meta.conf.voters[i] = i + 1;
        m.snapshot.meta.conf.n_learners = 2;
        m.snapshot.meta.conf.learners[0] = 7;
        m.snapshot.meta.conf.learners[1] = 8;
    }
    return m;
}

static void assert_same(const struct raft_msg *a, const struct raft_msg *b)
{
    cr_assert_eq(a->type, b->type);
    cr_assert_eq(a->reject, b->reject);
    cr_assert_eq(a->transfer, b->transfer);
    cr_assert_eq(a->from, b->from);
    cr_assert_eq(a->to, b->to);
    cr_assert_eq(a->term, b->term);
    cr_assert_eq(a->log_term, b->log_term);
    cr_assert_eq(a->index, b->index);
    cr_assert_eq(a->commit, b->commit);
    cr_assert_eq(a->reject_hint, b->reject_hint);
    cr_assert_eq(a->hint_term, b->hint_term);
    cr_assert_eq(a->ctx, b->ctx);
    cr_assert_eq(a->n_entries, b->n_entries);
    for (size_t i = 0; i < a->n_entries; i++) {
        const struct raft_entry *x = &a->entries[i], *y = &b->entries[i];
        cr_assert(x->term == y->term && x->index == y->index && x->type == y->type);
        cr_assert_eq(x->len, y->len);
        if (x->len)
            cr_assert_arr_eq(x->data, y->data, x->len);
    }
    const struct raft_snapshot_meta *s = &a->snapshot.meta, *t = &b->snapshot.meta;
    cr_assert(s->index == t->index && s->term == t->term);
    cr_assert(s->conf.n_voters == t->conf.n_voters && s->conf.n_learners == t->conf.n_learners);
    cr_assert_arr_eq(s->conf.voters, t->conf.voters, s->conf.n_voters * sizeof(raft_id));
    cr_assert_arr_eq(s->conf.learners, t->conf.learners, s->conf.n_learners * sizeof(raft_id));
    cr_assert_null(b->snapshot.data);
    cr_assert_eq(b->snapshot.len, 0);
}

Test(raft_codec, round_trip_every_type)
{
    for (uint8_t t = RAFT_MSG_APPEND; t <= RAFT_MSG_TIMEOUT_NOW; t++) {
        struct raft_entry ents[3];
        struct raft_msg m = sample(t, ents);
        uint8_t *buf;
        size_t len;
        kv_raft_msg_owned d;
        cr_assert_eq(kv_raft_msg_encode(&m, &buf, &len), 0);
        cr_assert_eq(kv_raft_msg_decode(buf, len, 16, &d), 0, "type %u", t);
        memset(buf, 0xaa, len); /* the decoded message must not point into buf */
        free(buf);
        assert_same(&m, &d.msg);
        kv_raft_msg_free(&d);
        kv_raft_msg_free(&d); /* zeroed: a no-op */
    }
}

Test(raft_codec, minimal_message_round_trips)
{
    struct raft_msg m = {.type = RAFT_MSG_HEARTBEAT, .from = 1, .to = 2};
    uint8_t *buf;
    size_t len;
    kv_raft_msg_owned d;
    cr_assert_eq(kv_raft_msg_encode(&m, &buf, &len), 0);
    cr_assert_eq(kv_raft_msg_decode(buf, len, 0, &d), 0);
    assert_same(&m, &d.msg);
    cr_assert_null(d.msg.entries);
    kv_raft_msg_free(&d);
    free(buf);
}

/* Packs a hand-made protobuf message and decodes it. */
static int decode_pm(Kvdraftpb__Message *pm, size_t max_entries)
{
    size_t n = kvdraftpb__message__get_packed_size(pm);
    uint8_t *buf = malloc(n + 1);
    cr_assert_not_null(buf);
    kvdraftpb__message__pack(pm, buf);
    kv_raft_msg_owned d;
    int rc = kv_raft_msg_decode(buf, n, max_entries, &d);
    free(buf);
    if (rc == 0)
        kv_raft_msg_free(&d);
    else
        cr_assert_null(d.mem_);
    return rc;
}

Test(raft_codec, bounds_and_validation)
{
    Kvdraftpb__Message pm = KVDRAFTPB__MESSAGE__INIT;
    Kvdraftpb__Entry e[4], *ep[4];
    for (int i = 0; i < 4; i++) {
        kvdraftpb__entry__init(&e[i]);
        e[i].term = 2;
        e[i].index = 11 + i;
        ep[i] = &e[i];
    }
    pm.type = RAFT_MSG_APPEND;
    pm.from = 1;
    pm.to = 2;
    pm.index = 10;
    pm.entries = ep;
    pm.n_entries = 4;
    cr_assert_eq(decode_pm(&pm, 4), 0);
    cr_assert_eq(decode_pm(&pm, 3), -EBADMSG); /* max_entries */
    e[2].index = 14;                           /* not contiguous */
    cr_assert_eq(decode_pm(&pm, 4), -EBADMSG);
    e[2].index = 13;
    pm.index = 11; /* entries must follow index */
    cr_assert_eq(decode_pm(&pm, 4), -EBADMSG);
    pm.index = 10;
    e[1].type = 2; /* unknown entry type */
    cr_assert_eq(decode_pm(&pm, 4), -EBADMSG);
    e[1].type = RAFT_ENTRY_CONF;
    cr_assert_eq(decode_pm(&pm, 4), 0);
    pm.type = RAFT_MSG_HEARTBEAT; /* entries only on APPEND */
    cr_assert_eq(decode_pm(&pm, 4), -EBADMSG);
    pm.type = RAFT_MSG_APPEND;
    pm.index = UINT64_MAX; /* index wrap */
    e[0].index = 0;
    pm.n_entries = 1;
    cr_assert_eq(decode_pm(&pm, 4), -EBADMSG);
    pm.n_entries = 0;
    cr_assert_eq(decode_pm(&pm, 4), 0);

    pm.type = 0;
    cr_assert_eq(decode_pm(&pm, 4), -EBADMSG);
    pm.type = RAFT_MSG_TIMEOUT_NOW + 1;
    cr_assert_eq(decode_pm(&pm, 4), -EBADMSG);
    pm.type = RAFT_MSG_SNAPSHOT;
    pm.from = 0;
    cr_assert_eq(decode_pm(&pm, 4), -EBADMSG);
    pm.from = 1;
    pm.to = 0;
    cr_assert_eq(decode_pm(&pm, 4), -EBADMSG);
    pm.to = 2;

    Kvdraftpb__SnapshotMeta sm = KVDRAFTPB__SNAPSHOT_META__INIT;
    Kvdraftpb__ConfState cs = KVDRAFTPB__CONF_STATE__INIT;
    uint64_t ids[RAFT_MAX_NODES + 1];
    for (size_t i = 0; i <= RAFT_MAX_NODES; i++)
        ids[i] = i + 1;
    sm.conf = &cs;
    pm.snapshot = &sm;
    cs.voters = ids;
    cs.n_voters = RAFT_MAX_NODES;
    cr_assert_eq(decode_pm(&pm, 4), 0);
    cs.n_voters = RAFT_MAX_NODES + 1;
    cr_assert_eq(decode_pm(&pm, 4), -EBADMSG);
    cs.n_voters = 0;
    cs.learners = ids;
    cs.n_learners = RAFT_MAX_NODES + 1;
    cr_assert_eq(decode_pm(&pm, 4), -EBADMSG);
    cs.n_learners = 2;
    ids[1] = 0; /* a zero id */
    cr_assert_eq(decode_pm(&pm, 4), -EBADMSG);

    /* encode refuses what cannot be a configuration */
    struct raft_msg m = {.type = RAFT_MSG_SNAPSHOT, .from = 1, .to = 2};
    m.snapshot.meta.conf.n_voters = RAFT_MAX_NODES + 1;
    uint8_t *buf = (uint8_t *)&m;
    size_t len = 1;
    cr_assert_eq(kv_raft_msg_encode(&m, &buf, &len), -EINVAL);
    cr_assert_null(buf);
}

static bool prefix_ok(const uint8_t *buf, size_t len)
{
    kv_raft_msg_owned d;
    int rc = kv_raft_msg_decode(buf, len, 16, &d);
    if (rc == -EBADMSG)
        return true;
    if (rc != 0)
        return false;
    /* a cut at a field boundary is a valid, shorter message: it re-encodes to the prefix */
    uint8_t *again;
    size_t n;
    cr_assert_eq(kv_raft_msg_encode(&d.msg, &again, &n), 0);
    bool same = n == len && memcmp(again, buf, len) == 0;
    free(again);
    kv_raft_msg_free(&d);
    return same;
}

Test(raft_codec, truncated_inputs)
{
    size_t bad = 0;
    for (uint8_t t = RAFT_MSG_APPEND; t <= RAFT_MSG_TIMEOUT_NOW; t++) {
        struct raft_entry ents[3];
        struct raft_msg m = sample(t, ents);
        uint8_t *buf;
        size_t len;
        cr_assert_eq(kv_raft_msg_encode(&m, &buf, &len), 0);
        for (size_t k = 0; k < len; k++) {
            uint8_t *cut = malloc(k + 1); /* exact size: ASan sees reads past the cut */
            memcpy(cut, buf, k);
            cr_assert(prefix_ok(cut, k), "type %u cut at %zu", t, k);
            kv_raft_msg_owned d;
            if (kv_raft_msg_decode(cut, k, 16, &d) == -EBADMSG)
                bad++;
            else
                kv_raft_msg_free(&d);
            free(cut);
        }
        free(buf);
    }
    cr_assert_gt(bad, 100); /* most cuts are not valid messages */
}

static uint64_t xs(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

Test(raft_codec, garbage_inputs)
{
    uint64_t s = 0x2545f4914f6cdd1dull;
    struct raft_entry ents[3];
    struct raft_msg m = sample(RAFT_MSG_APPEND, ents);
    uint8_t *good;
    size_t glen;
    cr_assert_eq(kv_raft_msg_encode(&m, &good, &glen), 0);
    for (int it = 0; it < 20000; it++) {
        uint8_t buf[256];
        size_t len;
        if (it % 2) { /* random bytes */
            len = xs(&s) % sizeof buf;
            for (size_t i = 0; i < len; i++)
                buf[i] = (uint8_t)xs(&s);
        } else { /* a valid message with a few bytes mutated */
            len = glen;
            memcpy(buf, good, len);
            for (int k = 0; k < 3; k++)
                buf[xs(&s) % len] = (uint8_t)xs(&s);
        }
        kv_raft_msg_owned d;
        int rc = kv_raft_msg_decode(buf, len, 8, &d);
        cr_assert(rc == 0 || rc == -EBADMSG);
        if (rc)
            continue;
        const struct raft_msg *x = &d.msg;
        cr_assert(x->type >= RAFT_MSG_APPEND && x->type <= RAFT_MSG_TIMEOUT_NOW);
        cr_assert(x->from && x->to && x->n_entries <= 8);
        for (size_t i = 0; i < x->n_entries; i++)
            cr_assert_eq(x->entries[i].index, x->index + 1 + i);
        cr_assert(x->snapshot.meta.conf.n_voters <= RAFT_MAX_NODES &&
                  x->snapshot.meta.conf.n_learners <= RAFT_MAX_NODES);
        kv_raft_msg_free(&d);
    }
    free(good);
}
