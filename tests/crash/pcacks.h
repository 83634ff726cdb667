/*
 * pcacks: what the power-loss tests share (test_powercut.c, test_powercut_cluster.c): the
 * record of an acknowledged put, the seeded PRNG and seed, and the check that every
 * acknowledged put is still there, unchanged, after the power loss.
 */
#ifndef KV_PCACKS_H
#define KV_PCACKS_H

#include <stddef.h>
#include <stdint.h>

#include "rpc.pb-c.h"

/* One acknowledged put: key, value (malloc'd), the revision the server answered. */
typedef struct kv_pc_ack {
    char key[40];
    uint8_t *val;
    uint32_t vlen;
    int64_t rev;
} kv_pc_ack;

/* splitmix64 step. */
uint64_t kv_pc_rng(uint64_t *s);
/* KVD_POWERCUT_SEED if set, else one from the clock and the pid (the caller prints it). */
uint64_t kv_pc_seed(void);
/* An integer environment variable, or dflt. */
int kv_pc_env_int(const char *name, int dflt);

/* Sorts r's key-values by key (for kv_pc_check). */
void kv_pc_sort(Etcdserverpb__RangeResponse *r);
/* Checks every ack of acks[0..n_lists) (counts[i] each) against the sorted r: present, same
 * value, mod and create revision = the acknowledged one, version 1. The first missing and the
 * first changed put are described through problem(arg, text). Sets *lost and *changed. */
void kv_pc_check(Etcdserverpb__RangeResponse *r, kv_pc_ack *const *acks, const size_t *counts,
                 size_t n_lists, size_t *lost, size_t *changed,
                 void (*problem)(void *arg, const char *text), void *arg);

#endif
