/*
 * prof_int.h - inside server/prof/: the recorded stacks, the symbolizer and the encoder,
 * apart from the signal handler so that tests can drive them with stacks of their own.
 */
#ifndef KV_PROF_INT_H
#define KV_PROF_INT_H

#include <stddef.h>
#include <stdint.h>

/* What a profile recorded: samples packed in words, each [depth, pc0 .. pc(depth-1)], leaf
 * first; pc0 is the interrupted instruction, the others return addresses. */
typedef struct kv_prof_stacks {
    const uintptr_t *words;
    size_t n_words;
    uint64_t dropped;    /* samples that did not fit */
    uint64_t period_ns;  /* CPU time one sample stands for */
    int64_t start_ns;    /* CLOCK_REALTIME at start */
    int64_t duration_ns; /* wall time sampled */
} kv_prof_stacks;

/* Symbolizes and encodes st as a pprof profile (prof.h). Returns 0 or -ENOMEM. */
int kv_prof__encode(const kv_prof_stacks *st, uint8_t **pb, size_t *len);

/* ---- the loaded objects and their symbols (prof_syms.c) ---- */

typedef struct kv_prof_sym {
    uintptr_t lo, hi; /* run-time address range [lo, hi) */
    const char *name; /* in the object's mapped file */
} kv_prof_sym;

typedef struct kv_prof_obj {
    uintptr_t lo, hi;     /* the executable segment, page-aligned start */
    uint64_t file_offset; /* of lo in the file */
    uintptr_t bias;       /* load bias: run-time address = bias + ELF address */
    char *path;           /* the file ("" when none, e.g. the vDSO) */
    char build_id[41];    /* hex of NT_GNU_BUILD_ID, "" when none */
    int loaded;           /* symbols read (or tried) */
    void *map;            /* the file, mapped read-only while symbols are in use */
    size_t map_len;
    kv_prof_sym *syms; /* sorted by lo */
    size_t n_syms;
} kv_prof_obj;

typedef struct kv_prof_objs {
    kv_prof_obj *v;
    size_t n;
} kv_prof_objs;

/* Lists the process's loaded objects (dl_iterate_phdr). Symbols are read on first use.
 * Returns 0 or -ENOMEM. */
int kv_prof__objs_load(kv_prof_objs *o);
/* The object whose executable segment holds pc, or NULL. */
kv_prof_obj *kv_prof__obj_find(kv_prof_objs *o, uintptr_t pc);
/* The name of the function of obj holding pc, or NULL (no symbol table, or none covers it).
 * The name lives until kv_prof__objs_free(). */
const char *kv_prof__sym_find(kv_prof_obj *obj, uintptr_t pc);
void kv_prof__objs_free(kv_prof_objs *o);

#endif
