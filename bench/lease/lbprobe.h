/*
 * lbprobe: the put-latency probe and the peer-connection counter of leasebench.
 *
 * The probe is one thread with one blocking gRPC connection (tests/lib/grpc_raw.h) to one
 * member: it sends a Put of a small key (outside leasebench's "lb/" prefix, no lease) every
 * interval_ms on a fixed schedule (a late call is followed at once by the next one, no
 * catch-up burst) and records each call's latency. When peer ports are given it also counts,
 * once a second, the TCP connections between the members' peer ports from /proc/net/tcp{,6}:
 * ESTABLISHED (one per connection: the accepting end, whose local port is a peer port),
 * TIME-WAIT (either end), and the distinct established connections seen over the run.
 *
 * Contract:
 * - lb_probe_start() starts the thread; lb_probe_stop() joins it. Between the two only the
 *   probe thread touches the struct; read the results after lb_probe_stop().
 * - lb_probe_free() releases the latency array. Functions return 0 or a negative errno.
 */
#ifndef LB_PROBE_H
#define LB_PROBE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define LB_PROBE_MAX_PEERS 8
#define LB_PROBE_MAX_CONNS 4096

typedef struct lb_peer_stats {
    int samples;
    int est_max, est_last, tw_max;
    int n_distinct; /* distinct established connections seen (server port << 16 | client port) */
    int n_first;    /* of them, established at the first sample; n_distinct - n_first were
                     * opened after it (a lower bound: one opened and closed between two
                     * samples is missed) */
    int overflow;
    uint32_t seen[LB_PROBE_MAX_CONNS];
} lb_peer_stats;

typedef struct lb_probe {
    /* set by the caller before lb_probe_start() */
    uint16_t port; /* client port of the probed member; 0 = no puts, peer counting only */
    uint32_t interval_ms;
    uint16_t peer_ports[LB_PROBE_MAX_PEERS];
    int n_peer; /* 0 = no peer counting */
    /* results */
    double *lat_ms;
    size_t n_lat, cap_lat;
    uint64_t errors;
    char first_error[128];
    lb_peer_stats peers;
    /* internal */
    pthread_t th;
    atomic_int stop;
    int running;
} lb_probe;

int lb_probe_start(lb_probe *p);
void lb_probe_stop(lb_probe *p);
void lb_probe_free(lb_probe *p);

/* Percentile q (0..1) of the recorded latencies in ms (sorts them); -1 when none. */
double lb_probe_pct(lb_probe *p, double q);

/* One sample of the peer connections into st (see above). */
int lb_peer_sample(const uint16_t *ports, int n, lb_peer_stats *st);

#endif
