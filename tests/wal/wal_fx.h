/* Test fixture for the WAL (server/wal/): a temp dir, deterministic entries, and a record
 * walker that parses segment files independently of the module (for corrupting them). */
#ifndef KV_TEST_WAL_FX_H
#define KV_TEST_WAL_FX_H

#include <stddef.h>
#include <stdint.h>

#include "wal/wal.h"

typedef struct wfx {
    char dir[320];  /* the WAL dir (inside a fresh temp dir) */
    char root[256]; /* the temp dir (kvt_tmpdir: $TMPDIR, KV_TEST_KEEP_DIRS=1 keeps it) */
    kv_wal *w;
    char err[512];
} wfx;

void wfx_init(wfx *f);
void wfx_fini(wfx *f);
/* Opens f->w (asserts success). seg_bytes/tail_bytes 0: defaults. */
void wfx_open(wfx *f, uint64_t seg_bytes, size_t tail_bytes);
/* Opens and returns the status (f->w set on success, f->err the message). */
int wfx_try_open(wfx *f, uint64_t seg_bytes, size_t tail_bytes);
void wfx_close(wfx *f);

/* The deterministic payload of entry (index, term): length and bytes. */
size_t wfx_len(uint64_t index, uint64_t term);
void wfx_fill(uint8_t *buf, uint64_t index, uint64_t term);
/* Appends [lo, hi) of term t (conf entries every conf_every-th index; 0: none) and syncs. */
void wfx_append(wfx *f, uint64_t lo, uint64_t hi, uint64_t term, uint64_t conf_every);
/* Asserts the vtable returns entries [lo, hi) with term t and the deterministic payloads. */
void wfx_check(wfx *f, uint64_t lo, uint64_t hi, uint64_t term);

/* The segment files of f->dir sorted by name (names into names[k], up to max); count. */
size_t wfx_segments(wfx *f, char names[][64], size_t max);
/* Offsets of the records of a segment file (up to max), walking the headers; count. */
size_t wfx_records(wfx *f, const char *name, uint64_t *offs, size_t max);
/* Highest entry index recorded in a segment file (0: none). */
uint64_t wfx_max_index(wfx *f, const char *name);
/* A torn write of the record at off: the sectors (512 B) after the one it starts in never
 * reached the disk, so its bytes from the first sector boundary past its header read as
 * zeros (asserts the record crosses one). Returns that boundary. */
uint64_t wfx_tear(wfx *f, const char *name, uint64_t off);
/* Zeroes [off, end) of the file. */
void wfx_zero(wfx *f, const char *name, uint64_t off, uint64_t end);
/* XORs one byte of the file at off. */
void wfx_flip(wfx *f, const char *name, uint64_t off);
void wfx_pwrite(wfx *f, const char *name, uint64_t off, const void *buf, size_t len);

#endif
