/* apply_conf: a raft configuration change as it applies (apply.h kv_store_member_change):
 * the members table's plain result (kv_store_member_conf_change) mapped to etcd's errors. */
#include <errno.h>
#include <string.h>

#include "apply/apply_int.h"
#include "mvcc/members.h"

int kv_store_member_change(kv_store *s, kv_store_batch *b, int op, uint64_t id,
                           const uint8_t *record, size_t len, kv_result *res)
{
    memset(res, 0, sizeof(*res));
    int refused = 0;
    int rc = kv_store_member_conf_change(s, b, op, id, record, len, &refused);
    if (rc)
        return rc;
    switch (refused) {
    case 0:
        break;
    case -ENOENT: /* also an id removed before (etcd ErrIDRemoved answers the same) */
        kv_apply_err(res, KV_ERR_MEMBER_NOT_FOUND);
        break;
    case -EEXIST:
        kv_apply_err(res, KV_ERR_MEMBER_EXIST);
        break;
    case -EADDRINUSE:
        kv_apply_err(res, KV_ERR_PEER_URL_EXIST);
        break;
    case -EMLINK:
        kv_apply_err(res, KV_ERR_TOO_MANY_LEARNERS);
        break;
    case -EALREADY:
        kv_apply_err(res, KV_ERR_MEMBER_NOT_LEARNER);
        break;
    case -EDQUOT:
        kv_apply_err_detail(res, KV_ERR_TOO_MANY_MEMBERS, " (limit %d)", KV_MEMBERS_MAX);
        break;
    case -EINVAL:
        kv_apply_err(res, KV_ERR_MEMBER_BAD_URLS);
        break;
    default:
        kv_apply_err(res, KV_ERR_REQUEST_INTERNAL);
        break;
    }
    return 0;
}
