/* wal_rec: the framing of one WAL record (wal.h: type, length, CRC32C); the snapshot marker's
 * payload is base/snap_meta.h's. Pure functions, any thread. */
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
