/*
 * kvctl KV printers: etcdctl's simple and json printers for Range/Put/DeleteRange/Txn
 * responses (etcdctl/ctlv3/command/printer_simple.go, printer_json.go).
 *
 * Each function prints to stdout and returns an exit status: 0, or KVCTL_EXIT_BAD_FEATURE after
 * "Error: <format> not supported as output format" for formats etcdctl has no printer for.
 * `value_only` is get's --print-value-only.
 */
#ifndef KVCTL_PRINT_KV_H
#define KVCTL_PRINT_KV_H

#include "kvctl.h"
#include "rpc.pb-c.h"

int kvctl_print_put(const struct kvctl *k, const Etcdserverpb__PutResponse *r);
int kvctl_print_get(const struct kvctl *k, const Etcdserverpb__RangeResponse *r, bool value_only,
                    bool count_only);
int kvctl_print_del(const struct kvctl *k, const Etcdserverpb__DeleteRangeResponse *r);
int kvctl_print_txn(const struct kvctl *k, const Etcdserverpb__TxnResponse *r);
/* Any message as one line of JSON (Go's json.Marshal of the etcd struct). Returns 0 or -EIO. */
int kvctl_print_json(const ProtobufCMessage *m);
/* Any message in protobuf wire format, unframed (etcdctl's -w protobuf). Returns 0 or -errno. */
int kvctl_print_pb(const ProtobufCMessage *m);

#endif
