/* wal_rec: the framing of one WAL record (wal.h: type, length, CRC32C) and the snapshot
 * marker's payload. Pure functions, any thread. */
#include <errno.h>
#include <string.h>

#include "common/crc32c.h"
#include "wal/wal_int.h"

void kv_wal_rec_seal(uint8_t *hdr, uint8_t type, uint32_t len)
{
    hdr[0] = type;
    hdr[1] = hdr[2] = hdr[3] = 0;
    kv_put_be32(hdr + 4, len);
    uint32_t crc = kv_crc32c(0, hdr, 8);
    crc = kv_crc32c(crc, hdr + KV_WAL_HDR, len);
    kv_put_be32(hdr + 8, crc);
}

int kv_wal_rec_check(const uint8_t *buf, uint64_t avail, uint8_t *type, uint32_t *len)
{
    static const uint8_t zero[KV_WAL_HDR];
    if (avail < KV_WAL_HDR) {
        for (uint64_t i = 0; i < avail; i++)
            if (buf[i])
                return -EBADMSG;
        return 1;
    }
    if (!memcmp(buf, zero, KV_WAL_HDR))
        return 1;
    *type = buf[0];
    *len = kv_be32(buf + 4);
    if (buf[1] || buf[2] || buf[3] || *type < KV_WAL_REC_ENTRY || *type > KV_WAL_REC_SNAPSHOT)
        return -EBADMSG;
    if ((uint64_t)*len > avail - KV_WAL_HDR)
        return -EBADMSG;
    uint32_t crc = kv_crc32c(0, buf, 8);
    crc = kv_crc32c(crc, buf + KV_WAL_HDR, *len);
    return crc == kv_be32(buf + 8) ? 0 : -EBADMSG;
}

size_t kv_wal_snap_size(const struct raft_snapshot_meta *m)
{
    return 16 + 4 + 8 * (size_t)m->conf.n_voters + 4 + 8 * (size_t)m->conf.n_learners;
}

void kv_wal_snap_put(uint8_t *p, const struct raft_snapshot_meta *m)
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

int kv_wal_snap_get(const uint8_t *p, uint32_t len, struct raft_snapshot_meta *m)
{
    memset(m, 0, sizeof *m);
    if (len < 24)
        return -EBADMSG;
    m->index = kv_be64(p);
    m->term = kv_be64(p + 8);
    uint32_t nv = kv_be32(p + 16);
    if (nv > RAFT_MAX_NODES || len < 24 + 8 * (size_t)nv)
        return -EBADMSG;
    const uint8_t *q = p + 20;
    for (uint32_t i = 0; i < nv; i++, q += 8)
        m->conf.voters[i] = kv_be64(q);
    uint32_t nl = kv_be32(q);
    q += 4;
    if (nl > RAFT_MAX_NODES || len != 24 + 8 * (size_t)nv + 8 * (size_t)nl)
        return -EBADMSG;
    for (uint32_t i = 0; i < nl; i++, q += 8)
        m->conf.learners[i] = kv_be64(q);
    m->conf.n_voters = nv;
    m->conf.n_learners = nl;
    return 0;
}
