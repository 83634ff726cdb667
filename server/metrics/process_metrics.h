/*
 * process_metrics.h - the standard Prometheus process collector's series (as etcd exports them
 * from client_golang): process_cpu_seconds_total, process_open_fds, process_max_fds,
 * process_virtual_memory_bytes, process_resident_memory_bytes, process_start_time_seconds.
 * Values are read from /proc/self at render time (Linux); where /proc cannot be read the
 * series reads 0. Registered callbacks take no state (arg NULL): nothing to free.
 */
#ifndef KV_PROCESS_METRICS_H
#define KV_PROCESS_METRICS_H

#include "metrics/metrics.h"

/* Registers the series in m. Returns 0 or the first kv_metrics_*_fn error. */
int kv_process_metrics_register(kv_metrics *m);

#endif
