/*
 * tls_fixture.h - shared helpers of the TLS tests: test certificates generated at
 * test time with the openssl CLI (gen_certs.sh) into a temp dir, one kvd member with an https
 * client port, etcdctl runs, metrics. Single-threaded (one Criterion test at a time).
 */
#ifndef TLS_FIXTURE_H
#define TLS_FIXTURE_H

#include <stddef.h>
#include <stdint.h>

#include "kvt_proc.h"
#include "kvt_util.h"

typedef struct tls_fx {
    kvt_tmpdir dir;
    char certs[4096]; /* <dir>/certs */
    uint16_t client_port, peer_port, metrics_port;
    kvt_proc kvd;
    char url[64];        /* https://127.0.0.1:<client_port> */
    char paths[8][4200]; /* tls_fx_path results (ring) */
    unsigned next_path;
    int no_cert;     /* 1: tls_fx_start passes no --cert-file/--key-file (--auto-tls tests) */
    int keep_ports;  /* 1: tls_fx_start reuses the ports of the last start (a restart) */
    const char *bin; /* the member's binary (borrowed); NULL: kvd (tls_fx_kvd_bin) */
} tls_fx;

/* The kvd binary ($KV_KVD_BIN, else $KV_BUILD_DIR/server/kvd). */
const char *tls_fx_kvd_bin(char *buf, size_t cap);
/* Creates the temp dir and the certificates (ca, server, client, ca2, other: gen_certs.sh). */
int tls_fx_certs(tls_fx *f, const char *prefix);
/* Path of a certificate file in f->certs (a ring in f: up to 8 live results). */
const char *tls_fx_path(tls_fx *f, const char *name);
/* Starts one kvd member with an https client port and the TLS flags given (NULL-terminated,
 * e.g. "--client-cert-auth"; "@ca.pem" stands for that file in f->certs), waits until /health
 * answers 200. */
int tls_fx_start(tls_fx *f, const char *const *extra);
/* Kills kvd, removes the temp dir. */
void tls_fx_destroy(tls_fx *f);
/* etcdctl (ETCDCTL_API=3) against f->url with the given arguments (NULL-terminated). */
int tls_fx_ctl(tls_fx *f, kvt_cmd_result *res, const char *const *args);
/* Value of a metric sample of the member (-1 if unreadable). */
double tls_fx_metric(tls_fx *f, const char *series);
/* 1 if the member's log contains needle, waiting up to 5 s for it: kvd may write a line
 * after the event the test saw (e.g. a connection's line when its handle is freed, after the
 * close the client read). */
int tls_fx_log_has(tls_fx *f, const char *needle);
/* openssl s_client to 127.0.0.1:port over TLS 1.2 offering only `cipher` (OpenSSL's name):
 * 1 if the handshake completed with it, else 0. */
int tls_fx_handshake_with(uint16_t port, const char *cipher);

#endif
