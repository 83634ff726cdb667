/*
 * lmdb_verify: a complete, bounds-checked verifier of an LMDB 0.9 data file
 * (docs/corruption.md, "The data file").
 *
 * LMDB trusts its file: a page overwritten with garbage makes it follow wild page numbers and
 * node offsets (SIGSEGV/SIGBUS) or stop in an mdb_assert (abort) deep inside a cursor step,
 * where no caller can turn the fault into an error. This verifier reads the file itself, with
 * pread(2) or from a memory buffer (never through a mapping, so a short file cannot fault),
 * and checks everything LMDB would follow, from both meta pages down to every page that the
 * current meta reaches:
 *   - meta pages 0 and 1: page number, P_META, magic, data version, page size (power of two,
 *     512..65536), last page inside the data; the current meta (highest txnid) is walked,
 *     and it must sit on page txnid & 1, where LMDB's readers look for it;
 *   - every tree (free list, main database, every named database, every duplicate
 *     sub-database), depth first: page numbers in 2..last page, each page reached exactly
 *     once (no cycle, no page shared by two trees or with an overflow run), its header's page
 *     number, flags matching its level (branch above the leaf level, leaf at the depth the
 *     tree record states), lower/upper bounds, every node offset (even, inside the page,
 *     above upper), key and inline data inside the page, keys strictly ascending in the
 *     database's order (memcmp, reverse or integer keys from the stored flags) and inside
 *     the range its parent's separators give, overflow runs (P_OVERFLOW, enough pages for
 *     the value, inside the file), sub-pages (P_SUBP, fixed-size keys for DUPFIXED) and
 *     sub-database records, and the entry count each tree record states (duplicates
 *     included);
 *   - free-list records: 8-byte keys, page lists inside the file.
 * Work is O(pages reached): each page is read once (a bitmap of last page + 1 bits).
 *
 * Depends on nothing but libc (not on lmdb.h, not on kvd's store): kvd (startup, snapshot
 * install), kvctl (snapshot status/restore) and the fuzz harness all call it.
 *
 * Return: 0 when the file is sound; -EBADMSG when it is corrupt (err gets one line naming
 * the page and what is wrong); another negative errno when the check could not run (I/O,
 * memory; err says which). err is always NUL-terminated when errlen > 0.
 * Threads: any; no shared state. The file must not be written concurrently (kvd verifies
 * before LMDB opens it; a snapshot file is private to its reader).
 */
#ifndef KV_MVCC_LMDB_VERIFY_H
#define KV_MVCC_LMDB_VERIFY_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

typedef struct kv_lmdb_verify_stats {
    uint32_t psize;      /* page size */
    uint64_t txnid;      /* txnid of the meta that was walked */
    uint64_t last_pg;    /* its last page */
    uint64_t pages;      /* pages reached (tree and overflow pages) */
    uint64_t entries;    /* leaf entries, duplicates included */
    uint64_t bytes_read; /* bytes read from the file */
} kv_lmdb_verify_stats;

/* Formats "<name> is corrupt: <fmt...>" into err (errlen 0: nothing written) and returns
 * -EBADMSG: the one wording of every structure check's refusal (verify.c, lmdb_verify.c). */
int kv_lmdb_vcorrupt(char *err, size_t errlen, const char *name, const char *fmt, va_list ap);

/* Verifies the first len bytes of the open file fd (len 0: the whole file). name is used in
 * messages ("<name> is corrupt: ..."). st may be NULL. */
int kv_lmdb_verify_fd(int fd, uint64_t len, const char *name, kv_lmdb_verify_stats *st, char *err,
                      size_t errlen);

/* Opens path read-only and verifies its first len bytes (0: all). A missing file gives
 * -ENOENT. */
int kv_lmdb_verify_path(const char *path, uint64_t len, kv_lmdb_verify_stats *st, char *err,
                        size_t errlen);

/* Verifies an LMDB file image held in memory (buf, len bytes; the fuzz harness). */
int kv_lmdb_verify_mem(const uint8_t *buf, size_t len, const char *name, kv_lmdb_verify_stats *st,
                       char *err, size_t errlen);

#endif
