/*
 * auth_flood: a login flood against one server (kvd or etcd) for the auth tests and
 * bench/auth: n_flood connections each keep one Authenticate with a wrong password in
 * flight (a new one as soon as the last is answered), and every interval_ms a legitimate
 * client opens a NEW connection (as etcdctl does) and authenticates with the right password,
 * waiting at most login_timeout_ms. No Criterion here: plain return codes, one thread, poll.
 */
#ifndef KV_TESTS_AUTH_FLOOD_H
#define KV_TESTS_AUTH_FLOOD_H

#include <stddef.h>
#include <stdint.h>

typedef struct af_opts {
    uint16_t port;             /* client port on 127.0.0.1 */
    const char *flood_user;    /* the user the flood targets */
    const char *flood_pw;      /* its wrong password */
    const char *user, *pw;     /* the legitimate login */
    int n_flood;               /* flood connections */
    int n_logins;              /* legitimate logins */
    uint32_t warmup_ms;        /* flood alone before the first login */
    uint32_t interval_ms;      /* between legitimate logins */
    uint32_t login_timeout_ms; /* a login not answered OK by then failed */
} af_opts;

typedef struct af_result {
    int logins_ok;          /* legitimate logins answered with a token in time */
    int logins_refused;     /* answered "too many requests" */
    int logins_other;       /* other error, transport failure or timeout */
    uint64_t login_max_ms;  /* slowest successful login */
    uint64_t login_sum_ms;  /* sum over successful logins */
    uint64_t flood_answers; /* flood calls answered (any status) */
    uint64_t flood_failed;  /* ... of which "authentication failed" (a hash was spent) */
    int flood_conns;        /* flood connections that opened */
} af_result;

/* Runs the flood and the logins; 0, or negative errno if the flood could not be set up. */
int af_run(const af_opts *o, af_result *r);

#endif
