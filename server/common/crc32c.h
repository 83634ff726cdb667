/*
 * crc32c: CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), the checksum of every
 * record the MVCC store writes, of the WAL's records and of kv_store_hash_kv. The CPU's crc32
 * instruction where it has one (x86-64 SSE4.2), else a table; no state, no allocation; the
 * same value on every platform (the on-disk format depends on it).
 */
#ifndef KV_COMMON_CRC32C_H
#define KV_COMMON_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* Continues a CRC: start with crc = 0; kv_crc32c(kv_crc32c(0, a), b) == crc of a||b.
 * buf may be NULL when len == 0. */
uint32_t kv_crc32c(uint32_t crc, const void *buf, size_t len);
/* The same, table driven on every CPU (the reference the tests compare kv_crc32c with). */
uint32_t kv_crc32c_portable(uint32_t crc, const void *buf, size_t len);

#endif
