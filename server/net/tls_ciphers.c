/* tls_ciphers.c - etcd's --cipher-suites (Go names) as an OpenSSL cipher list; see tls.h. */
#include "net/tls.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

typedef struct go_suite {
    const char *go;      /* crypto/tls name (tls.CipherSuites/InsecureCipherSuites) */
    const char *openssl; /* OpenSSL's name; "" for TLS 1.3 suites (not configurable in Go) */
} go_suite;

static const go_suite SUITES[] = {
    {"TLS_RSA_WITH_RC4_128_SHA", "RC4-SHA"},
    {"TLS_RSA_WITH_3DES_EDE_CBC_SHA", "DES-CBC3-SHA"},
    {"TLS_RSA_WITH_AES_128_CBC_SHA", "AES128-SHA"},
    {"TLS_RSA_WITH_AES_256_CBC_SHA", "AES256-SHA"},
    {"TLS_RSA_WITH_AES_128_CBC_SHA256", "AES128-SHA256"},
    {"TLS_RSA_WITH_AES_128_GCM_SHA256", "AES128-GCM-SHA256"},
    {"TLS_RSA_WITH_AES_256_GCM_SHA384", "AES256-GCM-SHA384"},
    {"TLS_ECDHE_ECDSA_WITH_RC4_128_SHA", "ECDHE-ECDSA-RC4-SHA"},
    {"TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA", "ECDHE-ECDSA-AES128-SHA"},
    {"TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA", "ECDHE-ECDSA-AES256-SHA"},
    {"TLS_ECDHE_RSA_WITH_RC4_128_SHA", "ECDHE-RSA-RC4-SHA"},
    {"TLS_ECDHE_RSA_WITH_3DES_EDE_CBC_SHA", "ECDHE-RSA-DES-CBC3-SHA"},
    {"TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA", "ECDHE-RSA-AES128-SHA"},
    {"TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA", "ECDHE-RSA-AES256-SHA"},
    {"TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256", "ECDHE-ECDSA-AES128-SHA256"},
    {"TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256", "ECDHE-RSA-AES128-SHA256"},
    {"TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", "ECDHE-RSA-AES128-GCM-SHA256"},
    {"TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256", "ECDHE-ECDSA-AES128-GCM-SHA256"},
    {"TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384", "ECDHE-RSA-AES256-GCM-SHA384"},
    {"TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384", "ECDHE-ECDSA-AES256-GCM-SHA384"},
    {"TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256", "ECDHE-RSA-CHACHA20-POLY1305"},
    {"TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256", "ECDHE-ECDSA-CHACHA20-POLY1305"},
    /* etcd's own aliases (pkg/tlsutil) */
    {"TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305", "ECDHE-RSA-CHACHA20-POLY1305"},
    {"TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305", "ECDHE-ECDSA-CHACHA20-POLY1305"},
    {"TLS_AES_128_GCM_SHA256", ""},
    {"TLS_AES_256_GCM_SHA384", ""},
    {"TLS_CHACHA20_POLY1305_SHA256", ""},
};

int kv_tls_cipher_list(const char *go_names, char *out, size_t cap, char *err, size_t errlen)
{
    size_t len = 0;
    if (cap == 0)
        return -EINVAL;
    out[0] = '\0';
    for (const char *p = go_names; p && *p;) {
        const char *end = strchr(p, ',');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        while (n > 0 && (*p == ' ' || *p == '\t')) {
            p++;
            n--;
        }
        while (n > 0 && (p[n - 1] == ' ' || p[n - 1] == '\t'))
            n--;
        if (n > 0) {
            const go_suite *hit = NULL;
            for (size_t i = 0; i < sizeof(SUITES) / sizeof(SUITES[0]) && !hit; i++)
                if (strlen(SUITES[i].go) == n && memcmp(SUITES[i].go, p, n) == 0)
                    hit = &SUITES[i];
            if (hit == NULL) {
                snprintf(err, errlen, "unexpected TLS cipher suite \"%.*s\"",
                         (int)(n > 80 ? 80 : n), p);
                return -EINVAL;
            }
            if (hit->openssl[0]) {
                int w = snprintf(out + len, cap - len, "%s%s", len ? ":" : "", hit->openssl);
                if (w < 0 || (size_t)w >= cap - len) {
                    snprintf(err, errlen, "--cipher-suites: too many cipher suites");
                    return -EINVAL;
                }
                len += (size_t)w;
            }
        }
        if (end == NULL)
            break;
        p = end + 1;
    }
    return 0;
}
