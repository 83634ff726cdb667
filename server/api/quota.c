/* quota: admission of writes against the backend quota and the alarms (see quota.h). */
#include "api/quota.h"

#include "apply/internal_req.h"
#include "api/services.h"
#include "api/api.h"

#define KV_QUOTA_KV_OVERHEAD 256   /* etcd quota.go kvOverhead */
#define KV_QUOTA_LEASE_OVERHEAD 64 /* etcd quota.go leaseOverhead */

int kv_quota_admit(kv_api *s, kv_grpc_call *call, int field, size_t len)
{
    unsigned alarms = kv_node_alarms(s->node);
    if (alarms & (1u << KV_ALARM_CORRUPT)) {
        switch (field) {
        case KV_IREQ_PUT:
        case KV_IREQ_DELETE_RANGE:
        case KV_IREQ_TXN:
        case KV_IREQ_COMPACTION:
        case KV_IREQ_LEASE_GRANT:
        case KV_IREQ_LEASE_REVOKE:
            kv_reply_etcd_err(call, KV_ERR_CORRUPT);
            return 1;
        default:
            break;
        }
    }
    /* The raft log shares the data file (docs/ARCHITECTURE.md, "Alarms, quota and
     * defragment"): every entry a client adds, deletes included, is admitted against the
     * retained log's budget; alarms (disarm) always pass, so a member can recover. */
    if (field != KV_IREQ_ALARM && kv_node_log_admit(s->node, len) != 0) {
        kv_reply_etcd_err(call, KV_ERR_TOO_MANY_REQUESTS);
        return 1;
    }
    int64_t cost;
    switch (field) {
    case KV_IREQ_PUT:
        cost = KV_QUOTA_KV_OVERHEAD + (int64_t)len;
        break;
    case KV_IREQ_TXN:
        cost = 0;
        break;
    case KV_IREQ_LEASE_GRANT:
        cost = KV_QUOTA_LEASE_OVERHEAD;
        break;
    default:
        return 0;
    }
    int64_t quota = (int64_t)kv_store_quota(s->store);
    int full = (alarms & (1u << KV_ALARM_NOSPACE)) && field != KV_IREQ_TXN;
    /* The file's size first (O(1)); only past the quota count what the state itself holds:
     * not the pages LMDB has freed and will reuse, nor the raft log's (bounded on its own by
     * --max-raft-log-bytes; docs/ARCHITECTURE.md, "Alarms, quota and defragment"). */
    int64_t file = kv_store_db_size(s->store);
    int64_t file_max = quota + (int64_t)(kv_store_map_size((size_t)quota) - (size_t)quota) / 4;
    if (!full && (file + cost < quota ||
                  /* and the file within a quarter of the map's headroom above the quota: the
                   * rest stays free for alarms and pages readers still pin */
                  (file + cost < file_max && kv_node_state_bytes_in_use(s->node) + cost < quota)))
        return 0;
    if (!(alarms & (1u << KV_ALARM_NOSPACE)))
        kv_store_request_alarm(s->store, KV_ALARM_NOSPACE); /* proposed by the node */
    kv_reply_etcd_err(call, KV_ERR_NO_SPACE);
    return 1;
}
