/* kvctl `-w fields` printers: see print_fields.h. */
#include "print_fields.h"

#include <inttypes.h>
#include <string.h>

static void quoted(struct kvctl_buf *b, const char *name, const void *s, size_t n)
{
    kvctl_buf_printf(b, "\"%s\" : ", name);
    kvctl_go_quote(b, s, n);
    kvctl_buf_puts(b, "\n");
}

static void quoted_str(struct kvctl_buf *b, const char *name, const char *s)
{
    quoted(b, name, s ? s : "", s ? strlen(s) : 0);
}

static const char *tf(bool v)
{
    return v ? "true" : "false";
}

void kvctl_fields_header(struct kvctl_buf *b, uint64_t cluster, uint64_t member, int64_t rev,
                         uint64_t term)
{
    kvctl_buf_printf(b,
                     "\"ClusterID\" : %" PRIu64 "\n\"MemberID\" : %" PRIu64
                     "\n\"Revision\" : %" PRId64 "\n\"RaftTerm\" : %" PRIu64 "\n",
                     cluster, member, rev, term);
}

void kvctl_fields_pb_header(struct kvctl_buf *b, const Etcdserverpb__ResponseHeader *h)
{
    if (h)
        kvctl_fields_header(b, h->cluster_id, h->member_id, h->revision, h->raft_term);
    else
        kvctl_fields_header(b, 0, 0, 0, 0);
}

static void kv(struct kvctl_buf *b, const char *pfx, const Mvccpb__KeyValue *kv)
{
    char name[64];
    snprintf(name, sizeof(name), "%sKey", pfx);
    quoted(b, name, kv->key.data, kv->key.len);
    kvctl_buf_printf(b,
                     "\"%sCreateRevision\" : %" PRId64 "\n\"%sModRevision\" : %" PRId64
                     "\n\"%sVersion\" : %" PRId64 "\n",
                     pfx, kv->create_revision, pfx, kv->mod_revision, pfx, kv->version);
    snprintf(name, sizeof(name), "%sValue", pfx);
    quoted(b, name, kv->value.data, kv->value.len);
    kvctl_buf_printf(b, "\"%sLease\" : %" PRId64 "\n", pfx, kv->lease);
}

void kvctl_fields_put(struct kvctl_buf *b, const Etcdserverpb__PutResponse *r)
{
    kvctl_fields_pb_header(b, r->header);
    if (r->prev_kv)
        kv(b, "Prev", r->prev_kv);
}

void kvctl_fields_get(struct kvctl_buf *b, const Etcdserverpb__RangeResponse *r)
{
    kvctl_fields_pb_header(b, r->header);
    for (size_t i = 0; i < r->n_kvs; i++)
        kv(b, "", r->kvs[i]);
    kvctl_buf_printf(b, "\"More\" : %s\n\"Count\" : %" PRId64 "\n", tf(r->more), r->count);
}

void kvctl_fields_del(struct kvctl_buf *b, const Etcdserverpb__DeleteRangeResponse *r)
{
    kvctl_fields_pb_header(b, r->header);
    kvctl_buf_printf(b, "\"Deleted\" : %" PRId64 "\n", r->deleted);
    for (size_t i = 0; i < r->n_prev_kvs; i++)
        kv(b, "Prev", r->prev_kvs[i]);
}

void kvctl_fields_txn(struct kvctl_buf *b, const Etcdserverpb__TxnResponse *r)
{
    kvctl_fields_pb_header(b, r->header);
    kvctl_buf_printf(b, "\"Succeeded\" : %s\n", tf(r->succeeded));
    for (size_t i = 0; i < r->n_responses; i++) {
        const Etcdserverpb__ResponseOp *op = r->responses[i];
        switch (op->response_case) {
        case ETCDSERVERPB__RESPONSE_OP__RESPONSE_RESPONSE_DELETE_RANGE:
            kvctl_fields_del(b, op->response_delete_range);
            break;
        case ETCDSERVERPB__RESPONSE_OP__RESPONSE_RESPONSE_PUT:
            kvctl_fields_put(b, op->response_put);
            break;
        case ETCDSERVERPB__RESPONSE_OP__RESPONSE_RESPONSE_RANGE:
            kvctl_fields_get(b, op->response_range);
            break;
        default:
            kvctl_buf_puts(b, "\"Unknown\" : \"&ResponseOp_ResponseTxn{}\"\n");
            break;
        }
    }
}

void kvctl_fields_members(struct kvctl_buf *b, const Etcdserverpb__MemberListResponse *r)
{
    kvctl_fields_pb_header(b, r->header);
    for (size_t i = 0; i < r->n_members; i++) {
        const Etcdserverpb__Member *m = r->members[i];
        kvctl_buf_printf(b, "\"ID\" : %" PRIu64 "\n", m->id);
        quoted_str(b, "Name", m->name);
        for (size_t j = 0; j < m->n_peerurls; j++)
            quoted_str(b, "PeerURL", m->peerurls[j]);
        for (size_t j = 0; j < m->n_clienturls; j++)
            quoted_str(b, "ClientURL", m->clienturls[j]);
        kvctl_buf_printf(b, "\"IsLearner\" : %s\n\n", tf(m->islearner));
    }
}

void kvctl_fields_status(struct kvctl_buf *b, const char *ep, const Etcdserverpb__StatusResponse *r)
{
    kvctl_fields_pb_header(b, r->header);
    quoted_str(b, "Version", r->version);
    kvctl_buf_printf(b,
                     "\"DBSize\" : %" PRId64 "\n\"Leader\" : %" PRIu64 "\n\"IsLearner\" : %s\n"
                     "\"RaftIndex\" : %" PRIu64 "\n\"RaftTerm\" : %" PRIu64
                     "\n\"RaftAppliedIndex\" : %" PRIu64 "\n\"Errors\" : [",
                     r->dbsize, r->leader, tf(r->islearner), r->raftindex, r->raftterm,
                     r->raftappliedindex);
    for (size_t i = 0; i < r->n_errors; i++)
        kvctl_buf_printf(b, "%s%s", i ? " " : "", r->errors[i]);
    kvctl_buf_puts(b, "]\n");
    quoted_str(b, "Endpoint", ep);
    kvctl_buf_puts(b, "\n");
}

void kvctl_fields_health(struct kvctl_buf *b, const char *ep, bool health, const char *took,
                         const char *error)
{
    quoted_str(b, "Endpoint", ep);
    kvctl_buf_printf(b, "\"Health\" : %s\n\"Took\" : %s\n\"Error\" : %s\n\n", tf(health), took,
                     error);
}

void kvctl_fields_ttl(struct kvctl_buf *b, const Etcdserverpb__LeaseTimeToLiveResponse *r)
{
    kvctl_fields_pb_header(b, r->header);
    kvctl_buf_printf(b,
                     "\"ID\" : %" PRId64 "\n\"TTL\" : %" PRId64 "\n\"GrantedTTL\" : %" PRId64 "\n",
                     r->id, r->ttl, r->grantedttl);
    for (size_t i = 0; i < r->n_keys; i++)
        quoted(b, "Key", r->keys[i].data, r->keys[i].len);
}

void kvctl_fields_leases(struct kvctl_buf *b, const Etcdserverpb__LeaseLeasesResponse *r)
{
    kvctl_fields_pb_header(b, r->header);
    for (size_t i = 0; i < r->n_leases; i++)
        kvctl_buf_printf(b, "\"ID\" : %" PRId64 "\n", r->leases[i]->id);
}

void kvctl_fields_id_ttl(struct kvctl_buf *b, int64_t id, int64_t ttl)
{
    kvctl_buf_printf(b, "\"ID\" : %" PRId64 "\n\"TTL\" : %" PRId64 "\n", id, ttl);
}

void kvctl_fields_kv(struct kvctl_buf *b, const char *pfx, const Mvccpb__KeyValue *k)
{
    kv(b, pfx, k);
}
