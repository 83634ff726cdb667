/*
 * endpoint.c - parse and resolve endpoint strings: "host:port", "http://host:port",
 * "[v6]:port". Resolution happens once, in kvc_open (getaddrinfo, first address).
 */
#include "internal.h"

#include <ctype.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int kvc_endpoint_parse(struct kvc_endpoint *ep, const char *s, kvc_error *err)
{
    char host[256], port[8];
    memset(ep, 0, sizeof *ep);
    if (!s || !*s)
        return kvc_fail(err, KVC_INVALID_ARGUMENT, "kvclient: empty endpoint");
    snprintf(ep->text, sizeof ep->text, "%s", s);
    const char *p = s;
    if (strncmp(p, "http://", 7) == 0) {
        p += 7;
    } else if (strncmp(p, "https://", 8) == 0) {
        p += 8;
        ep->tls = 1;
    } else if (strstr(p, "://")) {
        return kvc_fail(err, KVC_INVALID_ARGUMENT,
                        "kvclient: bad endpoint '%s': only http:// and https:// are supported", s);
    }
    size_t n = strlen(p);
    while (n > 0 && p[n - 1] == '/')
        n--;
    const char *colon;
    size_t hlen;
    if (n > 0 && p[0] == '[') {
        const char *rb = memchr(p, ']', n);
        if (!rb || rb + 1 >= p + n || rb[1] != ':')
            return kvc_fail(err, KVC_INVALID_ARGUMENT,
                            "kvclient: bad endpoint '%s': expected [ipv6]:port", s);
        hlen = (size_t)(rb - p - 1);
        if (hlen == 0 || hlen >= sizeof host)
            return kvc_fail(err, KVC_INVALID_ARGUMENT, "kvclient: bad endpoint '%s'", s);
        memcpy(host, p + 1, hlen);
        colon = rb + 1;
    } else {
        colon = NULL;
        for (size_t i = 0; i < n; i++)
            if (p[i] == ':')
                colon = p + i;
        if (!colon)
            return kvc_fail(err, KVC_INVALID_ARGUMENT,
                            "kvclient: bad endpoint '%s': expected host:port", s);
        hlen = (size_t)(colon - p);
        if (hlen == 0 || hlen >= sizeof host)
            return kvc_fail(err, KVC_INVALID_ARGUMENT, "kvclient: bad endpoint '%s': missing host",
                            s);
        memcpy(host, p, hlen);
    }
    host[hlen] = '\0';
    snprintf(ep->host, sizeof ep->host, "%s", host);
    for (size_t i = 0; i < hlen; i++)
        if (isspace((unsigned char)host[i]) || host[i] == '/' || host[i] == '@')
            return kvc_fail(err, KVC_INVALID_ARGUMENT, "kvclient: bad endpoint '%s': invalid host",
                            s);
    size_t plen = (size_t)(p + n - colon - 1);
    if (plen == 0 || plen > 5)
        return kvc_fail(err, KVC_INVALID_ARGUMENT, "kvclient: bad endpoint '%s': bad port", s);
    memcpy(port, colon + 1, plen);
    port[plen] = '\0';
    long pv = 0;
    for (size_t i = 0; i < plen; i++) {
        if (!isdigit((unsigned char)port[i]))
            return kvc_fail(err, KVC_INVALID_ARGUMENT, "kvclient: bad endpoint '%s': bad port", s);
        pv = pv * 10 + (port[i] - '0');
    }
    if (pv < 1 || pv > 65535)
        return kvc_fail(err, KVC_INVALID_ARGUMENT, "kvclient: bad endpoint '%s': port out of range",
                        s);
    if (strchr(host, ':'))
        snprintf(ep->authority, sizeof ep->authority, "[%s]:%ld", host, pv);
    else
        snprintf(ep->authority, sizeof ep->authority, "%s:%ld", host, pv);

    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    int rc = getaddrinfo(host, port, &hints, &res);
    if (rc != 0 || !res)
        return kvc_fail(err, KVC_INVALID_ARGUMENT,
                        "kvclient: bad endpoint '%s': cannot resolve host '%s': %s", s, host,
                        gai_strerror(rc));
    memcpy(&ep->addr, res->ai_addr, res->ai_addrlen);
    freeaddrinfo(res);
    return 0;
}
