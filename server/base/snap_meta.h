/*
 * snap_meta (server/base/, header-only): the byte layout of a raft snapshot's meta, shared by
 * the WAL's snapshot record (wal/wal_rec.c) and the "snap" record of the log kept in LMDB
 * (raftlog/raftlog_rec.c, --experimental-wal=false):
 *
 *   be64 index, be64 term, be32 n_voters, n_voters x be64, be32 n_learners, n_learners x be64
 *
 * Pure functions, any thread. The checksum is the caller's (each record carries its own).
 */
#ifndef KV_BASE_SNAP_META_H
#define KV_BASE_SNAP_META_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "common/byteorder.h"
#include "raft/raft.h"

#define KV_SNAP_META_MAX (8 + 8 + 4 + 8 * RAFT_MAX_NODES + 4 + 8 * RAFT_MAX_NODES)

/* The encoded size of m. */
static inline size_t kv_snap_meta_size(const struct raft_snapshot_meta *m)
{
    return 16 + 4 + 8 * (size_t)m->conf.n_voters + 4 + 8 * (size_t)m->conf.n_learners;
}

/* Encodes m at p. Preconditions: both counts are at most RAFT_MAX_NODES, p holds
 * kv_snap_meta_size(m) bytes. */
static inline void kv_snap_meta_put(uint8_t *p, const struct raft_snapshot_meta *m)
{
    kv_put_be64(p, m->index);
    kv_put_be64(p + 8, m->term);
    p += 16;
    kv_put_be32(p, m->conf.n_voters);
    p += 4;
    for (uint32_t i = 0; i < m->conf.n_voters; i++, p += 8)
        kv_put_be64(p, m->conf.voters[i]);
    kv_put_be32(p, m->conf.n_learners);
    p += 4;
    for (uint32_t i = 0; i < m->conf.n_learners; i++, p += 8)
        kv_put_be64(p, m->conf.learners[i]);
}

/* Decodes exactly len bytes at p into *m: 0, or -EBADMSG (too short, bytes left over, or a
 * count above RAFT_MAX_NODES), *m zeroed then. */
static inline int kv_snap_meta_get(const uint8_t *p, size_t len, struct raft_snapshot_meta *m)
{
    memset(m, 0, sizeof *m);
    if (len < 24)
        return -EBADMSG;
    uint32_t nv = kv_be32(p + 16);
    if (nv > RAFT_MAX_NODES || len < 24 + 8 * (size_t)nv)
        return -EBADMSG;
    uint32_t nl = kv_be32(p + 20 + 8 * (size_t)nv);
    if (nl > RAFT_MAX_NODES || len != 24 + 8 * (size_t)nv + 8 * (size_t)nl)
        return -EBADMSG;
    m->index = kv_be64(p);
    m->term = kv_be64(p + 8);
    const uint8_t *q = p + 20;
    for (uint32_t i = 0; i < nv; i++, q += 8)
        m->conf.voters[i] = kv_be64(q);
    q += 4;
    for (uint32_t i = 0; i < nl; i++, q += 8)
        m->conf.learners[i] = kv_be64(q);
    m->conf.n_voters = nv;
    m->conf.n_learners = nl;
    return 0;
}

#endif
