/* msg_codec: raft messages on the wire (msg_codec.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "raft.pb-c.h"
#include "raftlog/msg_codec.h"

int kv_raft_msg_encode(const struct raft_msg *m, uint8_t **out, size_t *len)
{
    Kvdraftpb__Message pm = KVDRAFTPB__MESSAGE__INIT;
    Kvdraftpb__SnapshotMeta sm = KVDRAFTPB__SNAPSHOT_META__INIT;
    Kvdraftpb__ConfState cs = KVDRAFTPB__CONF_STATE__INIT;
    Kvdraftpb__Entry *ents = NULL, **eptr = NULL;
    const struct raft_snapshot_meta *meta = &m->snapshot.meta;
    int rc = -ENOMEM;
    *out = NULL;
    *len = 0;
    if (meta->conf.n_voters > RAFT_MAX_NODES || meta->conf.n_learners > RAFT_MAX_NODES)
        return -EINVAL;
    pm.type = m->type;
    pm.reject = m->reject;
    pm.transfer = m->transfer;
    pm.from = m->from;
    pm.to = m->to;
    pm.term = m->term;
    pm.log_term = m->log_term;
    pm.index = m->index;
    pm.commit = m->commit;
    pm.reject_hint = m->reject_hint;
    pm.hint_term = m->hint_term;
    pm.ctx = m->ctx;
    if (m->n_entries) {
        ents = calloc(m->n_entries, sizeof *ents);
        eptr = calloc(m->n_entries, sizeof *eptr);
        if (!ents || !eptr)
            goto out;
        for (size_t i = 0; i < m->n_entries; i++) {
            const struct raft_entry *e = &m->entries[i];
            kvdraftpb__entry__init(&ents[i]);
            ents[i].term = e->term;
            ents[i].index = e->index;
            ents[i].type = e->type;
            ents[i].data.len = e->len;
            ents[i].data.data = (uint8_t *)e->data;
            eptr[i] = &ents[i];
        }
        pm.n_entries = m->n_entries;
        pm.entries = eptr;
    }
    if (meta->index || meta->term || meta->conf.n_voters || meta->conf.n_learners) {
        sm.index = meta->index;
        sm.term = meta->term;
        cs.n_voters = meta->conf.n_voters;
        cs.voters = (uint64_t *)meta->conf.voters;
        cs.n_learners = meta->conf.n_learners;
        cs.learners = (uint64_t *)meta->conf.learners;
        sm.conf = &cs;
        pm.snapshot = &sm;
    }
    size_t n = kvdraftpb__message__get_packed_size(&pm);
    uint8_t *buf = malloc(n ? n : 1);
    if (!buf)
        goto out;
    *len = kvdraftpb__message__pack(&pm, buf);
    *out = buf;
    rc = 0;
out:
    free(ents);
    free(eptr);
    return rc;
}

struct owned_mem {
    Kvdraftpb__Message *pm;
    struct raft_entry ents[];
};

static int conf_ids(const uint64_t *src, size_t n, uint32_t *dn, raft_id *dst)
{
    if (n > RAFT_MAX_NODES)
        return -EBADMSG;
    for (size_t i = 0; i < n; i++) {
        if (src[i] == RAFT_NONE)
            return -EBADMSG;
        dst[i] = src[i];
    }
    *dn = (uint32_t)n;
    return 0;
}

int kv_raft_msg_decode(const uint8_t *buf, size_t len, size_t max_entries, kv_raft_msg_owned *out)
{
    struct owned_mem *mem = NULL;
    struct raft_msg *m = &out->msg;
    int rc = -EBADMSG;
    memset(out, 0, sizeof *out);
    Kvdraftpb__Message *pm = kvdraftpb__message__unpack(NULL, len, buf);
    if (!pm)
        return -EBADMSG; /* protobuf-c does not tell malformed from out of memory */
    if (pm->type < RAFT_MSG_APPEND || pm->type > RAFT_MSG_TIMEOUT_NOW || !pm->from || !pm->to)
        goto fail;
    if (pm->n_entries > max_entries || (pm->n_entries && pm->type != RAFT_MSG_APPEND))
        goto fail;
    mem = malloc(sizeof *mem + pm->n_entries * sizeof mem->ents[0]);
    if (!mem) {
        rc = -ENOMEM;
        goto fail;
    }
    mem->pm = pm;
    for (size_t i = 0; i < pm->n_entries; i++) {
        const Kvdraftpb__Entry *pe = pm->entries[i];
        if (pe->type > RAFT_ENTRY_CONF || pm->index + 1 + i < pm->index ||
            pe->index != pm->index + 1 + i)
            goto fail;
        mem->ents[i] = (struct raft_entry){.term = pe->term,
                                           .index = pe->index,
                                           .type = (uint8_t)pe->type,
                                           .data = pe->data.len ? pe->data.data : NULL,
                                           .len = pe->data.len};
    }
    m->type = (uint8_t)pm->type;
    m->reject = pm->reject;
    m->transfer = pm->transfer;
    m->from = pm->from;
    m->to = pm->to;
    m->term = pm->term;
    m->log_term = pm->log_term;
    m->index = pm->index;
    m->commit = pm->commit;
    m->reject_hint = pm->reject_hint;
    m->hint_term = pm->hint_term;
    m->ctx = pm->ctx;
    m->entries = pm->n_entries ? mem->ents : NULL;
    m->n_entries = pm->n_entries;
    if (pm->snapshot) {
        struct raft_snapshot_meta *sm = &m->snapshot.meta;
        sm->index = pm->snapshot->index;
        sm->term = pm->snapshot->term;
        const Kvdraftpb__ConfState *cs = pm->snapshot->conf;
        if (cs && (conf_ids(cs->voters, cs->n_voters, &sm->conf.n_voters, sm->conf.voters) ||
                   conf_ids(cs->learners, cs->n_learners, &sm->conf.n_learners, sm->conf.learners)))
            goto fail;
    }
    out->mem_ = mem;
    return 0;
fail:
    free(mem);
    kvdraftpb__message__free_unpacked(pm, NULL);
    memset(out, 0, sizeof *out);
    return rc;
}

void kv_raft_msg_free(kv_raft_msg_owned *m)
{
    struct owned_mem *mem = m->mem_;
    if (mem) {
        kvdraftpb__message__free_unpacked(mem->pm, NULL);
        free(mem);
    }
    memset(m, 0, sizeof *m);
}
