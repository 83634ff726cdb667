/*
 * tls.h - TLS over OpenSSL memory BIOs, between a libuv stream and nghttp2's mem_recv/mem_send.
 *
 * The layer never touches a socket: the transport feeds the ciphertext it read into
 * kv_tls_conn_recv() (plaintext comes out through a callback), hands nghttp2's output to
 * kv_tls_conn_write(), and drains the ciphertext to put on the wire with kv_tls_conn_out_read()
 * / kv_tls_conn_drain(). Handshakes therefore never block the loop; the transport bounds how
 * long one may take (gRPC: handshake_timeout_ms, default 10 s; peers: 5 PING intervals).
 *
 * Policy: TLS 1.2 and 1.3 only; TLS 1.2 ciphers ECDHE with AES-GCM or CHACHA20-POLY1305
 * (no aNULL/eNULL, no CBC, no RSA key exchange; TLS 1.3 suites are OpenSSL's defaults);
 * ALPN "h2" (a server selects it when offered, a client offers it; kv_tls_conn_http1() makes
 * one server connection select "http/1.1" instead).
 *
 * Certificate reload (etcd's approach): a server or client context stats its certificate, key
 * and CA files when a new connection is created (at most once per second) and, if any changed,
 * loads them into a fresh SSL_CTX that new connections use. Established connections keep the
 * SSL_CTX they started with (OpenSSL reference counts it), so nothing is dropped. A reload
 * that fails (e.g. a half-written key) is logged and the previous certificate stays in use.
 *
 * Plain HTTP on a TLS server port: a first byte that is not a TLS handshake record and looks
 * like HTTP ("PRI *" h2c preface, GET, POST, ...) is answered with Go's net/http text
 * "HTTP/1.0 400 Bad Request ... Client sent an HTTP request to an HTTPS server." (as etcd),
 * logged, counted as a failed handshake, and recv returns -EPROTO.
 *
 * Threads: a kv_tls_ctx may be shared by connections of one thread; its reference count and
 * reload check are not atomic, so use one context per thread (kvd: the loop thread).
 * Ownership: kv_tls_conn_new() takes a reference on the context; kv_tls_conn_free() drops it.
 * Metrics/logs: on_handshake(0) and a log line also for a connection freed before its
 * handshake completed (closed early, or the transport's handshake timeout).
 * Errors: 0 or a negative errno (-ENOMEM, -EINVAL, -EPROTO handshake/record failure,
 * -ECONNRESET the peer sent close_notify, -ENOBUFS too much plaintext queued before the
 * handshake completed).
 */
#ifndef KV_NET_TLS_H
#define KV_NET_TLS_H

#include <stddef.h>
#include <stdint.h>

typedef struct kv_tls_ctx kv_tls_ctx;
typedef struct kv_tls_conn kv_tls_conn;

#define KV_TLS_PENDING_MAX (256 * 1024) /* plaintext held until the handshake completes */

typedef struct kv_tls_options {
    const char *cert_file;        /* PEM certificate chain; required for a server, optional (client
                                     certificate) for a client */
    const char *key_file;         /* PEM private key of cert_file */
    const char *ca_file;          /* PEM CA bundle: a server verifies client certificates with it,
                                     a client the server's (NULL: the system store for a client) */
    int server;                   /* 1 accepts, 0 dials */
    int verify_peer;              /* server: require and verify a client certificate (mutual TLS,
                                     --client-cert-auth); ignored for a client (always verifies) */
    int insecure_skip_verify;     /* client: do not verify the server's certificate */
    const char *crl_file;         /* server with verify_peer: PEM/DER CRLs; a client certificate
                                     whose serial one lists is refused (etcd's --client-crl-file,
                                     --peer-crl-file); reloaded with the other files. NULL: none */
    const char *ciphers;          /* OpenSSL TLS 1.2 cipher list (kv_tls_cipher_list); NULL: the
                                     policy above. TLS 1.3 suites stay OpenSSL's, as Go's */
    const char *allowed_cn;       /* the verified peer certificate's CN must equal it (etcd's
                                     --peer-cert-allowed-cn), both directions. NULL: any */
    const char *allowed_hostname; /* the verified peer certificate must be valid for this host
                                     name or IP (--peer-cert-allowed-hostname). NULL: any */
    const char *server_name;      /* client: the name every server certificate is verified
                                     against (and the SNI name), in place of each connection's
                                     verify_host (Go's tls.Config.ServerName). NULL: the
                                     dialed host */
    const char *label;            /* for log lines, e.g. "client" or "peer" (copied) */
    /* Called once per connection whose handshake completed (ok 1) or failed (ok 0). May be
     * NULL. */
    void (*on_handshake)(void *arg, int ok);
    /* One log line (no newline). May be NULL: no logging. Rate-limited by the context. */
    void (*log)(void *arg, const char *line);
    void *arg;
    void (*free_arg)(void *arg); /* called when the context is freed; may be NULL; if
                                  * kv_tls_ctx_new fails, arg stays the caller's */
} kv_tls_options;

/* Creates a context and loads the files. err (errlen) gets a one-line reason on failure.
 * Returns 0, -EINVAL (missing/unreadable/mismatched files) or -ENOMEM. */
int kv_tls_ctx_new(kv_tls_ctx **out, const kv_tls_options *o, char *err, size_t errlen);
/* Translates etcd's --cipher-suites (comma-separated Go names, e.g.
 * TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256) into an OpenSSL cipher list in out (cap bytes).
 * Go's TLS 1.3 names are accepted and leave the list unchanged, as in Go. Returns 0, or
 * -EINVAL with etcd's message ("unexpected TLS cipher suite \"X\"") in err; "" gives "". */
int kv_tls_cipher_list(const char *go_names, char *out, size_t cap, char *err, size_t errlen);

/* Takes one more reference. */
void kv_tls_ctx_ref(kv_tls_ctx *x);
/* Drops the caller's reference (connections hold their own). NULL is a no-op. */
void kv_tls_ctx_unref(kv_tls_ctx *x);
/* Forces the next kv_tls_conn_new to re-check the files (e.g. on SIGHUP). */
void kv_tls_ctx_recheck(kv_tls_ctx *x);

/* A connection. who: the remote party for log lines (copied, e.g. "127.0.0.1:5000").
 * verify_host (clients only, may be NULL): the host name or IP literal the server's
 * certificate must match (and the SNI name for a host name), unless the context has a
 * server_name, which then takes its place. */
int kv_tls_conn_new(kv_tls_ctx *x, const char *who, const char *verify_host, kv_tls_conn **out);
void kv_tls_conn_free(kv_tls_conn *t);
/* Server, before the first recv: this connection speaks HTTP/1.1 only (the metrics
 * listener), so ALPN selects "http/1.1" when offered and never "h2". */
void kv_tls_conn_http1(kv_tls_conn *t);
/* Client: starts the handshake (ClientHello into the output). Returns 0 or -EPROTO. */
int kv_tls_conn_start(kv_tls_conn *t);
/* Feeds ciphertext read from the socket; each decrypted chunk is passed to on_plain (whose
 * non-zero return stops and is returned). Output (handshake, alerts) is left to drain. */
int kv_tls_conn_recv(kv_tls_conn *t, const uint8_t *in, size_t len,
                     int (*on_plain)(void *arg, const uint8_t *p, size_t n), void *arg);
/* Encrypts plaintext (held until the handshake completes, up to KV_TLS_PENDING_MAX). */
int kv_tls_conn_write(kv_tls_conn *t, const uint8_t *p, size_t len);
/* Ciphertext waiting to be written. */
size_t kv_tls_conn_out_pending(const kv_tls_conn *t);
/* Moves up to cap bytes of waiting ciphertext into buf; returns the count. */
size_t kv_tls_conn_out_read(kv_tls_conn *t, uint8_t *buf, size_t cap);
/* Passes all waiting ciphertext to emit (one call, which must take it all), then drops it.
 * Returns emit's result (0 when nothing was waiting). */
int kv_tls_conn_drain(kv_tls_conn *t, int (*emit)(void *arg, const uint8_t *p, size_t n),
                      void *arg);
/* 1 once the handshake completed. */
int kv_tls_conn_established(const kv_tls_conn *t);
/* The verified peer certificate's subject CN ("" if none). Valid while t is. */
const char *kv_tls_conn_peer_cn(const kv_tls_conn *t);
/* The last failure reason ("" if none). Valid while t is. */
const char *kv_tls_conn_error(const kv_tls_conn *t);

#endif
