/*
 * pbconv.c - protobuf message -> public struct conversions (contract in pbconv.h).
 */
#include "pbconv.h"

#include <string.h>

void kvc_header_from(kvc_header *h, const Etcdserverpb__ResponseHeader *ph)
{
    memset(h, 0, sizeof *h);
    if (!ph)
        return;
    h->cluster_id = ph->cluster_id;
    h->member_id = ph->member_id;
    h->revision = ph->revision;
    h->raft_term = ph->raft_term;
}

void kvc_kv_from(kvc_kv *o, const Mvccpb__KeyValue *k)
{
    memset(o, 0, sizeof *o);
    if (!k)
        return;
    o->key = k->key.data;
    o->key_len = k->key.len;
    o->value = k->value.data;
    o->value_len = k->value.len;
    o->create_revision = k->create_revision;
    o->mod_revision = k->mod_revision;
    o->version = k->version;
    o->lease = k->lease;
}
