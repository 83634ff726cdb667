/*
 * kvctl `-w fields` printers: etcdctl 3.4's printer_fields.go ("Name" : value lines).
 *
 * Every function appends to b (the caller writes it out); nothing is retained. Lease and
 * keepalive responses come as plain values because kvctl reads some of them through
 * libkvclient's typed API.
 */
#ifndef KVCTL_PRINT_FIELDS_H
#define KVCTL_PRINT_FIELDS_H

#include "out.h"
#include "rpc.pb-c.h"

void kvctl_fields_header(struct kvctl_buf *b, uint64_t cluster, uint64_t member, int64_t rev,
                         uint64_t term);
void kvctl_fields_pb_header(struct kvctl_buf *b, const Etcdserverpb__ResponseHeader *h);
void kvctl_fields_put(struct kvctl_buf *b, const Etcdserverpb__PutResponse *r);
void kvctl_fields_get(struct kvctl_buf *b, const Etcdserverpb__RangeResponse *r);
void kvctl_fields_del(struct kvctl_buf *b, const Etcdserverpb__DeleteRangeResponse *r);
void kvctl_fields_txn(struct kvctl_buf *b, const Etcdserverpb__TxnResponse *r);
void kvctl_fields_members(struct kvctl_buf *b, const Etcdserverpb__MemberListResponse *r);
/* One endpoint of `endpoint status`. */
void kvctl_fields_status(struct kvctl_buf *b, const char *ep,
                         const Etcdserverpb__StatusResponse *r);
/* One endpoint of `endpoint health`. */
void kvctl_fields_health(struct kvctl_buf *b, const char *ep, bool health, const char *took,
                         const char *error);
void kvctl_fields_ttl(struct kvctl_buf *b, const Etcdserverpb__LeaseTimeToLiveResponse *r);
void kvctl_fields_leases(struct kvctl_buf *b, const Etcdserverpb__LeaseLeasesResponse *r);
/* One key-value as the KV printers show it; pfx "" or "Prev" (watch events). */
void kvctl_fields_kv(struct kvctl_buf *b, const char *pfx, const Mvccpb__KeyValue *k);
/* grant and keep-alive: header, "ID", "TTL". */
void kvctl_fields_id_ttl(struct kvctl_buf *b, int64_t id, int64_t ttl);

#endif
