/*
 * prof_encode: recorded stacks -> a pprof profile (perftools profile.proto, the format Go's
 * runtime/pprof writes and `go tool pprof` reads). Field numbers, from profile.proto:
 *   Profile   1 sample_type, 2 sample, 3 mapping, 4 location, 5 function, 6 string_table,
 *             9 time_nanos, 10 duration_nanos, 11 period_type, 12 period, 13 comment
 *   ValueType 1 type, 2 unit (string table indices)
 *   Sample    1 location_id (packed, leaf first), 2 value (packed)
 *   Mapping   1 id, 2 memory_start, 3 memory_limit, 4 file_offset, 5 filename, 6 build_id,
 *             7 has_functions
 *   Location  1 id, 2 mapping_id, 3 address, 4 line
 *   Line      1 function_id, 2 line
 *   Function  1 id, 2 name, 3 system_name, 4 filename
 * Identical stacks are one sample with their count; every pc is one location, and every
 * (name, file) one function. A pc no symbol covers gets a location without a line: pprof
 * prints its address. Non-leaf pcs are return addresses: the location is pc - 1, inside
 * the call, as pprof expects of a symbolized profile.
 */
#include "prof/prof.h"
#include "prof/prof_int.h"

#include "common/fnv.h"
#include "common/mix64.h"
#include "common/varint.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- a protobuf writer ---- */

typedef struct pbw {
    uint8_t *p;
    size_t len, cap;
    int oom;
} pbw;

static void pbw_put(pbw *w, const void *src, size_t n)
{
    if (w->oom || n == 0) /* n == 0: src may be NULL (an empty buffer) */
        return;
    if (w->len + n > w->cap) {
        size_t c = w->cap ? w->cap : 4096;
        while (c < w->len + n)
            c *= 2;
        uint8_t *p = realloc(w->p, c);
        if (!p) {
            w->oom = 1;
            return;
        }
        w->p = p;
        w->cap = c;
    }
    memcpy(w->p + w->len, src, n);
    w->len += n;
}

static void pbw_varint(pbw *w, uint64_t v)
{
    uint8_t b[KV_VARINT_MAX];
    pbw_put(w, b, kv_varint_put(b, v));
}

static void pbw_uint(pbw *w, uint32_t field, uint64_t v)
{
    if (v == 0)
        return; /* proto3: the default is not written */
    pbw_varint(w, (uint64_t)field << 3);
    pbw_varint(w, v);
}

static void pbw_bytes(pbw *w, uint32_t field, const void *p, size_t n)
{
    pbw_varint(w, ((uint64_t)field << 3) | 2);
    pbw_varint(w, n);
    pbw_put(w, p, n);
}

/* Appends sub as field `field` of w, and empties sub. */
static void pbw_msg(pbw *w, uint32_t field, pbw *sub)
{
    if (sub->oom)
        w->oom = 1;
    pbw_bytes(w, field, sub->p, sub->len);
    sub->len = 0;
}

/* ---- hash maps (open addressing, power-of-two sizes, grown at half full) ---- */

typedef struct u64map {
    uint64_t *keys; /* key + 1; 0 = empty */
    uint64_t *vals;
    size_t cap, n;
} u64map;

static int u64map_grow(u64map *m)
{
    size_t cap = m->cap ? m->cap * 2 : 1024;
    uint64_t *k = calloc(cap, sizeof(*k)), *v = calloc(cap, sizeof(*v));
    if (!k || !v) {
        free(k);
        free(v);
        return -ENOMEM;
    }
    for (size_t i = 0; i < m->cap; i++) {
        if (!m->keys[i])
            continue;
        size_t j = kv_mix64(m->keys[i]) & (cap - 1);
        while (k[j])
            j = (j + 1) & (cap - 1);
        k[j] = m->keys[i];
        v[j] = m->vals[i];
    }
    free(m->keys);
    free(m->vals);
    m->keys = k;
    m->vals = v;
    m->cap = cap;
    return 0;
}

/* The value slot of key; *fresh says it was just added (value 0). NULL on -ENOMEM. */
static uint64_t *u64map_slot(u64map *m, uint64_t key, int *fresh)
{
    if ((m->n + 1) * 2 > m->cap && u64map_grow(m) != 0)
        return NULL;
    key++;
    size_t j = kv_mix64(key) & (m->cap - 1);
    while (m->keys[j] && m->keys[j] != key)
        j = (j + 1) & (m->cap - 1);
    *fresh = !m->keys[j];
    if (*fresh) {
        m->keys[j] = key;
        m->n++;
    }
    return &m->vals[j];
}

static void u64map_free(u64map *m)
{
    free(m->keys);
    free(m->vals);
}

/* The string table: strings borrowed (they outlive the encoding), deduplicated by content. */
typedef struct strtab {
    const char **v;
    size_t n, vcap;
    u64map idx;   /* FNV-1a of the string -> index + 1 of the first with that hash */
    size_t *next; /* chains of equal hashes */
} strtab;

static int64_t str_index(strtab *t, const char *s)
{
    uint64_t h = kv_fnv1a64(s, strlen(s));
    int fresh;
    uint64_t *slot = u64map_slot(&t->idx, h, &fresh);
    if (!slot)
        return -1;
    for (uint64_t i = fresh ? 0 : *slot; i; i = t->next[i - 1])
        if (strcmp(t->v[i - 1], s) == 0)
            return (int64_t)(i - 1);
    if (t->n == t->vcap) {
        size_t c = t->vcap ? t->vcap * 2 : 256;
        const char **v = realloc(t->v, c * sizeof(*v));
        size_t *nx = v ? realloc(t->next, c * sizeof(*nx)) : NULL;
        if (v)
            t->v = v;
        if (!nx)
            return -1;
        t->next = nx;
        t->vcap = c;
    }
    t->v[t->n] = s;
    t->next[t->n] = fresh ? 0 : *slot;
    *slot = ++t->n;
    return (int64_t)(t->n - 1);
}

/* ---- the encoder ---- */

typedef struct enc {
    const kv_prof_stacks *st;
    kv_prof_objs objs;
    strtab strs;
    u64map stacks;     /* stack hash -> index + 1 into the stack list */
    size_t *stack_off; /* word offset of each distinct stack */
    uint64_t *stack_count;
    size_t *stack_next; /* chains of equal hashes */
    size_t n_stacks;
    u64map locs;  /* pc -> location id */
    u64map funcs; /* name index << 32 | file index -> function id */
    pbw out, sub, sub2;
    uint64_t n_locs, n_funcs;
} enc;

static int same_stack(const uintptr_t *w, size_t a, size_t b)
{
    return w[a] == w[b] && memcmp(&w[a + 1], &w[b + 1], w[a] * sizeof(uintptr_t)) == 0;
}

static int add_stack(enc *e, size_t off)
{
    const uintptr_t *w = e->st->words;
    uint64_t h = kv_fnv1a64(&w[off], (w[off] + 1) * sizeof(uintptr_t));
    int fresh;
    uint64_t *slot = u64map_slot(&e->stacks, h, &fresh);
    if (!slot)
        return -ENOMEM;
    for (uint64_t i = fresh ? 0 : *slot; i; i = e->stack_next[i - 1])
        if (same_stack(w, e->stack_off[i - 1], off)) {
            e->stack_count[i - 1]++;
            return 0;
        }
    size_t n = e->n_stacks; /* arrays sized for the worst case up front */
    e->stack_off[n] = off;
    e->stack_count[n] = 1;
    e->stack_next[n] = fresh ? 0 : *slot;
    *slot = ++e->n_stacks;
    return 0;
}

static uint64_t function_id(enc *e, const char *name, const char *file)
{
    int64_t ni = str_index(&e->strs, name), fi = str_index(&e->strs, file);
    if (ni < 0 || fi < 0)
        return 0;
    int fresh;
    uint64_t *slot = u64map_slot(&e->funcs, ((uint64_t)ni << 32) | (uint64_t)fi, &fresh);
    if (!slot)
        return 0;
    if (!fresh)
        return *slot;
    *slot = ++e->n_funcs;
    pbw_uint(&e->sub, 1, *slot);
    pbw_uint(&e->sub, 2, (uint64_t)ni);
    pbw_uint(&e->sub, 3, (uint64_t)ni);
    pbw_uint(&e->sub, 4, (uint64_t)fi);
    pbw_msg(&e->sub2, 5, &e->sub); /* functions gather in sub2, written after the rest */
    return *slot;
}

/* The location id of pc (written on first sight); 0 on -ENOMEM. */
static uint64_t location_id(enc *e, uintptr_t pc)
{
    int fresh;
    uint64_t *slot = u64map_slot(&e->locs, pc, &fresh);
    if (!slot)
        return 0;
    if (!fresh)
        return *slot;
    uint64_t id = ++e->n_locs;
    *slot = id;
    kv_prof_obj *ob = kv_prof__obj_find(&e->objs, pc);
    const char *name = ob ? kv_prof__sym_find(ob, pc) : NULL;
    uint64_t fid = name ? function_id(e, name, ob->path) : 0;
    pbw loc = {0};
    pbw_uint(&loc, 1, id);
    pbw_uint(&loc, 2, ob ? (uint64_t)(ob - e->objs.v) + 1 : 0);
    pbw_uint(&loc, 3, pc);
    if (fid) {
        pbw line = {0};
        pbw_uint(&line, 1, fid);
        pbw_msg(&loc, 4, &line);
        free(line.p);
        if (line.oom)
            loc.oom = 1;
    }
    pbw_msg(&e->out, 4, &loc);
    free(loc.p);
    return e->out.oom ? 0 : id;
}

static void value_type(enc *e, uint32_t field, const char *type, const char *unit)
{
    pbw_uint(&e->sub, 1, (uint64_t)str_index(&e->strs, type));
    pbw_uint(&e->sub, 2, (uint64_t)str_index(&e->strs, unit));
    pbw_msg(&e->out, field, &e->sub);
}

static int encode(enc *e)
{
    const kv_prof_stacks *st = e->st;
    if (str_index(&e->strs, "") != 0) /* string_table[0] is "" */
        return -ENOMEM;
    value_type(e, 1, "samples", "count");
    value_type(e, 1, "cpu", "nanoseconds");
    /* distinct stacks and their counts */
    size_t max_stacks = st->n_words / 2 + 1;
    e->stack_off = malloc(max_stacks * sizeof(size_t));
    e->stack_count = malloc(max_stacks * sizeof(uint64_t));
    e->stack_next = malloc(max_stacks * sizeof(size_t));
    if (!e->stack_off || !e->stack_count || !e->stack_next)
        return -ENOMEM;
    for (size_t at = 0; at < st->n_words; at += 1 + st->words[at])
        if (add_stack(e, at) != 0)
            return -ENOMEM;
    /* samples (their locations written as first seen) */
    uint64_t ids[KV_PROF_MAX_DEPTH];
    for (size_t i = 0; i < e->n_stacks; i++) {
        const uintptr_t *w = &st->words[e->stack_off[i]];
        size_t depth = w[0] < KV_PROF_MAX_DEPTH ? w[0] : KV_PROF_MAX_DEPTH;
        for (size_t k = 0; k < depth; k++) {
            uintptr_t pc = w[1 + k] - (k > 0 && w[1 + k] > 0);
            if (!(ids[k] = location_id(e, pc)))
                return -ENOMEM;
        }
        pbw packed = {0};
        for (size_t k = 0; k < depth; k++)
            pbw_varint(&packed, ids[k]);
        pbw_bytes(&e->sub, 1, packed.p, packed.len);
        packed.len = 0;
        pbw_varint(&packed, e->stack_count[i]);
        pbw_varint(&packed, e->stack_count[i] * st->period_ns);
        pbw_bytes(&e->sub, 2, packed.p, packed.len);
        if (packed.oom)
            e->sub.oom = 1;
        free(packed.p);
        pbw_msg(&e->out, 2, &e->sub);
    }
    /* mappings */
    for (size_t i = 0; i < e->objs.n; i++) {
        const kv_prof_obj *ob = &e->objs.v[i];
        pbw_uint(&e->sub, 1, i + 1);
        pbw_uint(&e->sub, 2, ob->lo);
        pbw_uint(&e->sub, 3, ob->hi);
        pbw_uint(&e->sub, 4, ob->file_offset);
        pbw_uint(&e->sub, 5, (uint64_t)str_index(&e->strs, ob->path));
        pbw_uint(&e->sub, 6, (uint64_t)str_index(&e->strs, ob->build_id));
        pbw_uint(&e->sub, 7, ob->n_syms > 0);
        pbw_msg(&e->out, 3, &e->sub);
    }
    /* functions */
    pbw_put(&e->out, e->sub2.p, e->sub2.len);
    if (e->sub2.oom)
        e->out.oom = 1;
    /* the header fields */
    char note[96];
    snprintf(note, sizeof(note), "kvd: %" PRIu64 " samples dropped (profile buffer full)",
             st->dropped);
    int64_t note_idx = st->dropped ? str_index(&e->strs, note) : 0;
    int64_t t_idx = str_index(&e->strs, "cpu"), u_idx = str_index(&e->strs, "nanoseconds");
    if (note_idx < 0 || t_idx < 0 || u_idx < 0)
        return -ENOMEM;
    for (size_t i = 0; i < e->strs.n; i++)
        pbw_bytes(&e->out, 6, e->strs.v[i], strlen(e->strs.v[i]));
    pbw_uint(&e->out, 9, (uint64_t)st->start_ns);
    pbw_uint(&e->out, 10, (uint64_t)st->duration_ns);
    pbw_uint(&e->sub, 1, (uint64_t)t_idx);
    pbw_uint(&e->sub, 2, (uint64_t)u_idx);
    pbw_msg(&e->out, 11, &e->sub);
    pbw_uint(&e->out, 12, st->period_ns);
    if (note_idx > 0)
        pbw_uint(&e->out, 13, (uint64_t)note_idx); /* repeated int64, one unpacked value */
    return e->out.oom || e->sub.oom ? -ENOMEM : 0;
}

int kv_prof__encode(const kv_prof_stacks *st, uint8_t **pb, size_t *len)
{
    *pb = NULL;
    *len = 0;
    enc e;
    memset(&e, 0, sizeof(e));
    e.st = st;
    int rc = kv_prof__objs_load(&e.objs);
    if (rc == 0)
        rc = encode(&e);
    if (rc == 0) {
        *pb = e.out.p;
        *len = e.out.len;
        e.out.p = NULL;
    }
    free(e.out.p);
    free(e.sub.p);
    free(e.sub2.p);
    free(e.stack_off);
    free(e.stack_count);
    free(e.stack_next);
    u64map_free(&e.stacks);
    u64map_free(&e.locs);
    u64map_free(&e.funcs);
    u64map_free(&e.strs.idx);
    free(e.strs.v);
    free(e.strs.next);
    kv_prof__objs_free(&e.objs);
    return rc;
}
