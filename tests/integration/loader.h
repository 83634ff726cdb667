/*
 * loader: writes many keys into a server quickly and reads them back, for the durability
 * tests and kvbench. Keys are "<prefix><index, 8 digits>", values are value_size bytes
 * derived from the index and a seed (kv_it_loader_value), so a reader can check them.
 *
 * Contract: bounded by per-call timeouts; uses kv_it_rpc (libkvclient when available).
 * Each thread owns one connection. Returns 0 or a negative errno-style code / the first
 * error, with its text in errbuf.
 */
#ifndef KV_IT_LOADER_H
#define KV_IT_LOADER_H

#include <stddef.h>
#include <stdint.h>

typedef struct kv_it_load_opts {
    const char *endpoint; /* "127.0.0.1:<port>" */
    const char *prefix;
    uint32_t n_keys;
    uint32_t value_size; /* >= 1 */
    uint32_t seed;
    uint32_t threads; /* >= 1 */
    uint32_t batch;   /* puts per Txn; 1 = plain Put calls */
    uint32_t timeout_ms;
    uint8_t *acked; /* optional: n_keys flags, set to 1 when a key's write was acknowledged */
} kv_it_load_opts;

/* Fills buf with the value of key index i (value_size bytes). */
void kv_it_loader_value(uint32_t seed, uint32_t i, char *buf, size_t value_size);

/* Writes keys [0, n_keys). *n_acked (optional) receives the number acknowledged. */
int kv_it_load(const kv_it_load_opts *o, uint32_t *n_acked, char *errbuf, size_t errcap);

/* Reads the whole prefix back in pages and checks every key that acked[] marks (or every
 * key if acked is NULL) is present with its value. *missing and *wrong receive counts;
 * *present the number of keys found under the prefix. */
int kv_it_verify(const kv_it_load_opts *o, uint32_t *present, uint32_t *missing, uint32_t *wrong,
                 char *errbuf, size_t errcap);

#endif
