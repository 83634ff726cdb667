/*
 * kvctl test harness: runs a scenario (a list of shell steps) once with kvctl and once with
 * etcdctl, each time against a FRESH server started on the same ports with the same name (so
 * member and cluster IDs, revisions and raft indexes line up), and compares what each step
 * printed (stdout, the "Error: ..." lines of stderr, exit status) after normalising the fields
 * that legitimately differ between two runs.
 *
 * Server under test: env KV_TEST_SERVER=etcd|kvd; default kvd when $KV_BUILD_DIR/server/kvd
 * exists, else /usr/bin/etcd. The kvctl binary is $KV_BUILD_DIR/client/kvctl.
 *
 * Step scripts run under /bin/sh with:
 *   $CTL   the tool with --endpoints set ("<kvctl|etcdctl> --endpoints=127.0.0.1:<port>")
 *   $TOOL  the bare tool binary,   $EP the client endpoint,   $W a per-run scratch directory.
 * A step that grants a lease must append its hex id to $W/leases (lease ids differ per run and
 * are normalised to <lease1>, <lease2>, ...).
 *
 * Ownership: everything returned is heap memory owned by the caller (free()).
 */
#ifndef KVCTL_TEST_HARNESS_H
#define KVCTL_TEST_HARNESS_H

#include <stdbool.h>
#include <stddef.h>

/* Normalisations a step asks for. */
enum {
    H_NORM_TOOK = 1 << 0,  /* Go durations (endpoint health took) -> <d> */
    H_NORM_TABLE = 1 << 1, /* collapse runs of ' ' and '-' (table widths follow <d>) */
    H_NORM_TTL = 1 << 2,   /* remaining TTLs (timetolive) -> <ttl> */
    H_NORM_DB = 1 << 3,    /* db sizes and raft indexes (endpoint status) -> <n> */
};

struct h_step {
    const char *sh;
    unsigned norm;
};

struct h_out {
    char *out;  /* stdout */
    char *err;  /* stderr lines starting with "Error:" or free text, minus Go log lines */
    int status; /* exit status, or 128+signal */
};

/* Skips the current test (criterion) when etcdctl or a server binary is missing. */
void h_require_tools(void);

/* Path of the kvctl binary (static storage). */
const char *h_kvctl(void);

/* Runs steps with tool `tool` ("kvctl" or "etcdctl") against a fresh server; fills outs[n]. */
void h_run_scenario(const char *tool, const struct h_step *steps, size_t n, struct h_out *outs);

/* Runs a scenario with both tools and expects identical normalised results, step by step. */
void h_compare(const struct h_step *steps, size_t n);

/* Normalises s in place according to flags and the lease ids in lease_ids (one per line). */
char *h_normalise(char *s, unsigned flags, const char *lease_ids);

/* Rewrites etcdctl's self-references (USAGE lines, `unknown command "x" for "etcdctl"`,
 * "Run 'etcdctl --help'") to kvctl's own name, in place of s (which it frees). */
char *h_own_name(char *s);

void h_out_free(struct h_out *o);

#endif
