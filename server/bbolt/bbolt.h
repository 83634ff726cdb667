/*
 * bbolt: etcd's database file format (go.etcd.io/bbolt 1.3, as etcd 3.4 writes it), written
 * and read in C for snapshots that move between etcd and kvd (docs/snapshots.md).
 *
 * Format (all integers little-endian, as bbolt on amd64/arm64):
 *   page header (16): id u64 | flags u16 (0x01 branch, 0x02 leaf, 0x04 meta, 0x10 freelist) |
 *                     count u16 | overflow u32 (pages after this one that the page spans)
 *   meta (after the header of pages 0 and 1, 64 bytes): magic 0xED0CDAED u32 | version 2 u32 |
 *        page size u32 | flags u32 | root bucket (root pgid u64, sequence u64) | freelist pgid
 *        u64 | pgid u64 (pages in the file) | txid u64 | checksum u64 = FNV-1a 64 of the 56
 *        bytes before it. The valid meta with the highest txid is the current one.
 *   leaf element (16): flags u32 (0x01: the value is a bucket) | pos u32 (from the element to
 *        its key; the value follows the key) | ksize u32 | vsize u32
 *   branch element (16): pos u32 | ksize u32 | child pgid u64; its key is the child's first.
 *   bucket value: root pgid u64 | sequence u64, and when root is 0 an inline leaf page.
 *   freelist: count u16 ids (u64 each; count 0xFFFF: the first u64 is the real count).
 *
 * Writer: bulk-loads sorted keys bottom-up: full pages (no free space), an empty freelist,
 * every bucket on pages of its own (never inline). Memory: per open bucket one page being
 * filled per tree level (plus the one element that does not fit it); written pages go to the
 * file through a buffer of KV_BB_WBUF bytes. Pages 0-2 are written by kv_bb_writer_finish
 * (pwrite), so fd must be a regular file opened for writing at offset 0.
 *
 * Reader: reads from an fd with bounds checks on every page, element and length: a corrupt
 * or truncated file gives -EBADMSG with a message, never a fault. Memory: one page (with its
 * overflow) per tree level of the walk.
 *
 * Threads: an object is used by one thread at a time. Return values: 0 or a negative errno.
 */
#ifndef KV_BBOLT_H
#define KV_BBOLT_H

#include <stddef.h>
#include <stdint.h>

#define KV_BB_PAGE_SIZE 4096
#define KV_BB_MAX_DEPTH 8 /* nested buckets; etcd uses 1 */
#define KV_BB_WBUF (1u << 20)
#define KV_BB_MAX_KEY 32768
#define KV_BB_MAX_VALUE ((1u << 31) - 2)

typedef struct kv_bb_writer kv_bb_writer;

/* A writer to fd (page size KV_BB_PAGE_SIZE). */
int kv_bb_writer_new(kv_bb_writer **out, int fd);
/* Opens a bucket inside the current one (the root at first). Its name must sort after the
 * previous key of the current bucket (-EINVAL otherwise, and past KV_BB_MAX_DEPTH). */
int kv_bb_bucket_begin(kv_bb_writer *w, const void *name, size_t nlen);
/* Adds key -> value to the current bucket; keys strictly increasing (memcmp order, a prefix
 * first), 1..KV_BB_MAX_KEY bytes (-EINVAL otherwise). */
int kv_bb_put(kv_bb_writer *w, const void *key, size_t klen, const void *val, size_t vlen);
/* Closes the current bucket (writes its pages). */
int kv_bb_bucket_end(kv_bb_writer *w);
/* Closes the root bucket, writes the freelist and both meta pages; *size gets the file size.
 * Every bucket must be closed. */
int kv_bb_writer_finish(kv_bb_writer *w, int64_t *size);
void kv_bb_writer_free(kv_bb_writer *w);

/* FNV-1a 64 (bbolt's meta checksum). */
uint64_t kv_bb_fnv64a(const void *p, size_t n);

/* ---- reader ---- */
typedef struct kv_bb_reader kv_bb_reader;

/* Opens the first len bytes of fd as a bbolt file (len: without etcd's SHA-256 trailer).
 * -EBADMSG (msg says why): no valid meta page, unknown version, a page size out of range. */
int kv_bb_reader_open(kv_bb_reader **out, int fd, int64_t len, char *msg, size_t msglen);
void kv_bb_reader_free(kv_bb_reader *r);
/* Page size and pages in use (meta pgid) of the current meta. */
uint32_t kv_bb_page_size(const kv_bb_reader *r);
uint64_t kv_bb_pages(const kv_bb_reader *r);

/* Walks a bucket: path = names of nested buckets from the root (n 0 = the root bucket).
 * fn gets each key in order; is_bucket is 1 for a nested bucket (value = its 16-byte header
 * and inline page). Pointers are valid during the call. fn's non-zero return stops the walk
 * and is returned. -ENOENT: a bucket of path is missing. -EBADMSG: corrupt (msg). */
typedef int (*kv_bb_visit_fn)(void *arg, const uint8_t *key, size_t klen, const uint8_t *val,
                              size_t vlen, int is_bucket);
int kv_bb_walk(kv_bb_reader *r, const char *const *path, size_t n, kv_bb_visit_fn fn, void *arg,
               char *msg, size_t msglen);

#endif
