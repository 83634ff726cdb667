/*
 * etcd_metrics.h - the member-level series etcd 3.4 exports under its own names
 * (docs/metrics.md "Member"): etcd_server_id, etcd_server_version, etcd_cluster_version,
 * etcd_server_quota_backend_bytes, etcd_mvcc_db_total_size_in_bytes,
 * etcd_mvcc_db_total_size_in_use_in_bytes and etcd_debugging_mvcc_keys_total, computed from
 * the store at scrape time. The other etcd series live next to what they count (node, peer,
 * gRPC, client HTTP).
 *
 * Loop thread only. start after s->store and s->metrics are set; stop before the store
 * closes (it detaches every callback).
 */
#ifndef KV_ETCD_METRICS_H
#define KV_ETCD_METRICS_H

#include "common/version.h"
#include "daemon/server.h"

int kv_etcd_metrics_start(kv_server *s);
void kv_etcd_metrics_stop(kv_server *s);

#endif
