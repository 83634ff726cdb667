/*
 * common/dns_srv.h without DNS: kv_srv_keep_secure, etcd's ValidateSecureEndpoints (the
 * lookups themselves are tested against a DNS responder in kvctl_srv_test and
 * proxy_discovery). http:// endpoints are "insecure"; an https:// one whose port listens is
 * kept, one whose port refuses is dropped with Go's dial error; the order of the kept ones is
 * kept.
 */
#include "common/dns_srv.h"

#include <criterion/criterion.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* A listening socket on 127.0.0.1; its port in *port. */
static int listener(unsigned *port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    cr_assert(fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 && listen(fd, 4) == 0);
    socklen_t l = sizeof a;
    cr_assert_eq(getsockname(fd, (struct sockaddr *)&a, &l), 0);
    *port = ntohs(a.sin_port);
    return fd;
}

Test(dns_srv, keep_secure_keeps_reachable_https_endpoints_in_order)
{
    unsigned p1, p2, dead;
    int l1 = listener(&p1), l2 = listener(&p2), l3 = listener(&dead);
    close(l3);                            /* nothing listens there now: connection refused */
    char **eps = malloc(4 * sizeof *eps); /* owned as kv_srv_client_endpoints returns them */
    for (int i = 0; i < 4; i++)
        eps[i] = malloc(64);
    snprintf(eps[0], 64, "https://127.0.0.1:%u", p2);
    snprintf(eps[1], 64, "http://127.0.0.1:%u", p1);
    snprintf(eps[2], 64, "https://127.0.0.1:%u", dead);
    snprintf(eps[3], 64, "https://localhost:%u", p1);
    char why[1024], want[512];
    size_t kept = kv_srv_keep_secure(eps, 4, 2000, why, sizeof why);
    cr_assert_eq(kept, 2, "%s", why);
    char e0[64], e1[64];
    snprintf(e0, sizeof e0, "https://127.0.0.1:%u", p2);
    snprintf(e1, sizeof e1, "https://localhost:%u", p1);
    cr_expect_str_eq(eps[0], e0);
    cr_expect_str_eq(eps[1], e1);
    snprintf(want, sizeof want,
             "\"http://127.0.0.1:%u\" is insecure,\"https://127.0.0.1:%u\" failed to dial (dial "
             "tcp 127.0.0.1:%u: connect: connection refused)",
             p1, dead, dead);
    cr_expect_str_eq(why, want);
    kv_srv_endpoints_free(eps, kept);
    close(l1);
    close(l2);
}

Test(dns_srv, keep_secure_with_nothing_to_drop_says_nothing)
{
    unsigned p;
    int l = listener(&p);
    char **eps = malloc(sizeof *eps);
    eps[0] = malloc(64);
    snprintf(eps[0], 64, "https://[::ffff:127.0.0.1]:%u", p);
    char why[256] = "x";
    cr_assert_eq(kv_srv_keep_secure(eps, 1, 2000, why, sizeof why), 1, "%s", why);
    cr_expect_str_eq(why, "");
    kv_srv_endpoints_free(eps, 1);
    close(l);
}
