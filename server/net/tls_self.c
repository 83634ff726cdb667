/* tls_self.c - self-signed certificates (etcd's transport.SelfCert); see tls_self.h. */
#include "net/tls_self.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <openssl/bn.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define SAN_MAX 2048

static int mkdir_p(const char *path)
{
    char buf[1024];
    if (snprintf(buf, sizeof(buf), "%s", path) >= (int)sizeof(buf))
        return -ENAMETOOLONG;
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(buf, 0700) < 0 && errno != EEXIST)
            return -errno;
        *p = '/';
    }
    if (mkdir(buf, 0700) < 0 && errno != EEXIST)
        return -errno;
    return 0;
}

static int is_ip(const char *h)
{
    unsigned char b[16];
    return inet_pton(AF_INET, h, b) == 1 || inet_pton(AF_INET6, h, b) == 1;
}

/* "IP:1.2.3.4,DNS:name,..." from hosts, without duplicates. */
static int san_text(const char *const *hosts, size_t n, char *out, size_t cap)
{
    size_t len = 0;
    out[0] = '\0';
    for (size_t i = 0; i < n; i++) {
        int dup = 0;
        for (size_t j = 0; j < i; j++)
            dup |= strcmp(hosts[i], hosts[j]) == 0;
        if (dup || hosts[i][0] == '\0')
            continue;
        int w = snprintf(out + len, cap - len, "%s%s:%s", len ? "," : "",
                         is_ip(hosts[i]) ? "IP" : "DNS", hosts[i]);
        if (w < 0 || (size_t)w >= cap - len)
            return -E2BIG;
        len += (size_t)w;
    }
    return 0;
}

static int add_ext(X509 *crt, int nid, const char *value)
{
    X509V3_CTX ctx;
    X509V3_set_ctx_nodb(&ctx);
    X509V3_set_ctx(&ctx, crt, crt, NULL, NULL, 0);
    X509_EXTENSION *ext = X509V3_EXT_conf_nid(NULL, &ctx, nid, value);
    if (ext == NULL)
        return -EINVAL;
    int ok = X509_add_ext(crt, ext, -1);
    X509_EXTENSION_free(ext);
    return ok ? 0 : -ENOMEM;
}

/* Writes path through a temporary file and a rename, so a crash leaves the old file or the
 * whole new one. write_fn writes the PEM to f. */
static int write_pem(const char *path, int (*write_fn)(FILE *f, void *obj), void *obj)
{
    char tmp[1100];
    if (snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= (int)sizeof(tmp))
        return -ENAMETOOLONG;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        return -errno;
    FILE *f = fdopen(fd, "w");
    if (f == NULL) {
        int e = -errno;
        close(fd);
        unlink(tmp);
        return e;
    }
    int rc = write_fn(f, obj) ? 0 : -EIO;
    if (fflush(f) != 0 || fsync(fileno(f)) != 0)
        rc = -EIO;
    if (fclose(f) != 0)
        rc = -EIO;
    if (rc == 0 && rename(tmp, path) < 0)
        rc = -errno;
    if (rc < 0)
        unlink(tmp);
    return rc;
}

static int write_key(FILE *f, void *obj)
{
    return PEM_write_PrivateKey(f, obj, NULL, NULL, 0, NULL, NULL);
}

static int write_crt(FILE *f, void *obj)
{
    return PEM_write_X509(f, obj);
}

/* A random positive 128-bit serial number, as etcd's SelfCert draws. */
static int set_serial(X509 *crt)
{
    BIGNUM *bn = BN_new();
    int rc = -ENOMEM;
    if (bn == NULL)
        return rc;
    if (BN_rand(bn, 128, BN_RAND_TOP_ANY, BN_RAND_BOTTOM_ANY) == 1 &&
        BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(crt)) != NULL)
        rc = 0;
    BN_free(bn);
    return rc;
}

int kv_tls_self_cert(const char *dir, const char *const *hosts, size_t n, unsigned years, char *err,
                     size_t errlen)
{
    char cert_path[1024], key_path[1024], san[SAN_MAX];
    if (snprintf(cert_path, sizeof(cert_path), "%s/cert.pem", dir) >= (int)sizeof(cert_path) ||
        snprintf(key_path, sizeof(key_path), "%s/key.pem", dir) >= (int)sizeof(key_path)) {
        snprintf(err, errlen, "%s: path too long", dir);
        return -ENAMETOOLONG;
    }
    if (access(cert_path, F_OK) == 0 && access(key_path, F_OK) == 0)
        return 0; /* reused, as etcd: the certificate survives restarts */
    int rc = mkdir_p(dir);
    if (rc < 0) {
        snprintf(err, errlen, "cannot create %s: %s", dir, strerror(-rc));
        return rc;
    }
    rc = san_text(hosts, n, san, sizeof(san));
    if (rc < 0) {
        snprintf(err, errlen, "too many host names for a self-signed certificate");
        return rc;
    }
    EVP_PKEY *key = EVP_EC_gen("P-256");
    X509 *crt = X509_new();
    rc = -ENOMEM;
    if (key == NULL || crt == NULL)
        goto fail;
    rc = -EINVAL;
    X509_NAME *name = X509_get_subject_name(crt);
    if (X509_set_version(crt, 2) != 1 || set_serial(crt) < 0 ||
        X509_NAME_add_entry_by_txt(name, "O", MBSTRING_ASC, (const unsigned char *)"etcd", -1, -1,
                                   0) != 1 ||
        X509_set_issuer_name(crt, name) != 1 ||
        X509_gmtime_adj(X509_getm_notBefore(crt), 0) == NULL ||
        X509_time_adj_ex(X509_getm_notAfter(crt), (int)(365 * (years ? years : 1)), 0, NULL) ==
            NULL ||
        X509_set_pubkey(crt, key) != 1)
        goto fail;
    if (add_ext(crt, NID_basic_constraints, "critical,CA:FALSE") < 0 ||
        add_ext(crt, NID_key_usage, "critical,digitalSignature,keyEncipherment") < 0 ||
        add_ext(crt, NID_ext_key_usage, "serverAuth,clientAuth") < 0 ||
        (san[0] && add_ext(crt, NID_subject_alt_name, san) < 0))
        goto fail;
    if (X509_sign(crt, key, EVP_sha256()) == 0)
        goto fail;
    /* The key first: a cert.pem without its key.pem is never left behind for reuse. */
    rc = write_pem(key_path, write_key, key);
    if (rc == 0)
        rc = write_pem(cert_path, write_crt, crt);
    if (rc < 0) {
        snprintf(err, errlen, "cannot write a self-signed certificate in %s: %s", dir,
                 strerror(-rc));
        unlink(key_path);
    }
    X509_free(crt);
    EVP_PKEY_free(key);
    return rc;
fail:
    snprintf(err, errlen, "cannot make a self-signed certificate in %s", dir);
    X509_free(crt);
    EVP_PKEY_free(key);
    return rc;
}
