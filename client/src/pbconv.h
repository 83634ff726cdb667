/*
 * pbconv.h - conversions from decoded etcd protobuf messages to the public kvc_* structs,
 * shared by the typed calls (kv.c, lease.c) and the streams (watch.c, keepalive.c).
 *
 * The results borrow: kvc_kv's key and value point into the message, which must outlive
 * them. Pure functions, any thread. Internal to libkvclient (not exported).
 */
#ifndef KVC_PBCONV_H
#define KVC_PBCONV_H

#include "kvclient.h"
#include "rpc.pb-c.h"

/* *h = the header ph, or all zero when ph is NULL. */
void kvc_header_from(kvc_header *h, const Etcdserverpb__ResponseHeader *ph);
/* *o = the key-value k (borrowing its bytes), or all zero when k is NULL. */
void kvc_kv_from(kvc_kv *o, const Mvccpb__KeyValue *k);

#endif
