#include "net/listen.h"

#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <string.h>

static int resolve(const char *host, int port, struct sockaddr_storage *ss)
{
    memset(ss, 0, sizeof(*ss));
    if (uv_ip4_addr(host, port, (struct sockaddr_in *)ss) == 0 ||
        uv_ip6_addr(host, port, (struct sockaddr_in6 *)ss) == 0)
        return 0;
    struct addrinfo hints = {0}, *res = NULL;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    if (getaddrinfo(host, NULL, &hints, &res) != 0 || !res)
        return -EINVAL;
    size_t len = res->ai_addrlen < sizeof(*ss) ? res->ai_addrlen : sizeof(*ss);
    memcpy(ss, res->ai_addr, len);
    freeaddrinfo(res);
    if (ss->ss_family == AF_INET)
        ((struct sockaddr_in *)ss)->sin_port = htons((uint16_t)port);
    else if (ss->ss_family == AF_INET6)
        ((struct sockaddr_in6 *)ss)->sin6_port = htons((uint16_t)port);
    else
        return -EINVAL;
    return 0;
}

int kv_net_listen(uv_tcp_t *tcp, const char *host, int port, int backlog, uv_connection_cb cb)
{
    struct sockaddr_storage ss;
    if (host == NULL || port < 0 || port > 65535)
        return -EINVAL;
    int rv = resolve(host, port, &ss);
    if (rv < 0)
        return rv;
    rv = uv_tcp_bind(tcp, (const struct sockaddr *)&ss, 0);
    if (rv < 0)
        return rv;
    return uv_listen((uv_stream_t *)tcp, backlog, cb);
}

int kv_net_bound_port(uv_tcp_t *tcp)
{
    struct sockaddr_storage ss;
    int len = sizeof(ss);
    int rv = uv_tcp_getsockname(tcp, (struct sockaddr *)&ss, &len);
    if (rv < 0)
        return rv;
    if (ss.ss_family == AF_INET)
        return ntohs(((struct sockaddr_in *)&ss)->sin_port);
    if (ss.ss_family == AF_INET6)
        return ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
    return -EINVAL;
}

int kv_net_peer_addr(uv_tcp_t *tcp, char *ip, size_t ip_cap, int *port)
{
    struct sockaddr_storage ss;
    int len = sizeof(ss);
    int rc = uv_tcp_getpeername(tcp, (struct sockaddr *)&ss, &len);
    if (rc != 0)
        return rc;
    snprintf(ip, ip_cap, "?");
    *port = 0;
    if (ss.ss_family == AF_INET) {
        uv_ip4_name((struct sockaddr_in *)&ss, ip, ip_cap);
        *port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
    } else if (ss.ss_family == AF_INET6) {
        uv_ip6_name((struct sockaddr_in6 *)&ss, ip, ip_cap);
        *port = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
    }
    return 0;
}

int kv_net_peer_name(uv_tcp_t *tcp, char *buf, size_t cap)
{
    char ip[46]; /* INET6_ADDRSTRLEN */
    int port;
    int rc = kv_net_peer_addr(tcp, ip, sizeof(ip), &port);
    if (rc == 0)
        snprintf(buf, cap, "%s:%d", ip, port);
    return rc;
}
