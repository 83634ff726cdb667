/* apply_cluster: Alarm entries (etcd applierV3backend.Alarm) and member publish / update
 * entries (etcd UpdateAttributes / ValidateConfigurationChange) on the keyspace's alarm and
 * member tables (mvcc/keyspace.h). */
#include <errno.h>
#include <stdlib.h>

#include "apply/apply_int.h"

static int add_alarm(Etcdserverpb__AlarmResponse *r, uint64_t m, uint32_t t)
{
    Etcdserverpb__AlarmMember **a = realloc(r->alarms, (r->n_alarms + 1) * sizeof *a);
    if (!a)
        return -ENOMEM;
    r->alarms = a;
    Etcdserverpb__AlarmMember *am = malloc(sizeof *am);
    if (!am)
        return -ENOMEM;
    etcdserverpb__alarm_member__init(am);
    am->memberid = m;
    am->alarm = (Etcdserverpb__AlarmType)t;
    r->alarms[r->n_alarms++] = am;
    return 0;
}

typedef struct list_ctx {
    uint32_t type; /* 0 = all */
    Etcdserverpb__AlarmResponse *resp;
} list_ctx;

static int list_fn(void *arg, uint64_t m, int t)
{
    list_ctx *l = arg;
    if (l->type != 0 && l->type != (uint32_t)t)
        return 0;
    return l->resp ? add_alarm(l->resp, m, (uint32_t)t) : 0;
}

int kv_apply_alarm(kv_actx *a, const Etcdserverpb__AlarmRequest *ar, ProtobufCMessage **msg,
                   Etcdserverpb__ResponseHeader **hdr)
{
    Etcdserverpb__AlarmResponse *resp = NULL;
    if (!a->quiet) {
        if (!(resp = malloc(sizeof *resp)))
            return -ENOMEM;
        etcdserverpb__alarm_response__init(resp);
    }
    int rc = 0;
    uint32_t type = (uint32_t)ar->alarm;
    if (ar->action != ETCDSERVERPB__ALARM_REQUEST__ALARM_ACTION__GET)
        a->res->barrier = KV_RESULT_BARRIER_ALARM; /* writes are admitted against it (apply.h) */
    switch (ar->action) {
    case ETCDSERVERPB__ALARM_REQUEST__ALARM_ACTION__GET: {
        list_ctx l = {type, resp};
        rc = kv_ks_alarm_walk(a->ks, list_fn, &l); /* also quiet: it verifies the records */
        break;
    }
    case ETCDSERVERPB__ALARM_REQUEST__ALARM_ACTION__ACTIVATE:
        if (type == KV_ALARM_NONE)
            break; /* as etcd: nothing to activate */
        rc = kv_ks_alarm_activate(a->ks, ar->memberid, type > KV_ALARM_CORRUPT ? -1 : (int)type);
        if (rc == -EINVAL) {
            kv_apply_err_detail(a->res, KV_ERR_UNKNOWN_ALARM, " %u", type);
            rc = 1;
        } else if (rc == -EMLINK) {
            kv_apply_err_detail(a->res, KV_ERR_TOO_MANY_ALARMS, " (limit %d)", KV_KS_MAX_ALARMS);
            rc = 1;
        } else if (rc == 0 && resp) { /* also when already active: etcd answers with it */
            rc = add_alarm(resp, ar->memberid, type);
        }
        break;
    case ETCDSERVERPB__ALARM_REQUEST__ALARM_ACTION__DEACTIVATE:
        rc = kv_ks_alarm_deactivate(a->ks, ar->memberid, (int)type);
        if (rc == -ENOENT)
            rc = 0; /* as etcd: nothing to answer */
        else if (rc == 0 && resp)
            rc = add_alarm(resp, ar->memberid, type);
        break;
    default:
        break; /* etcd answers nothing for an unknown action */
    }
    if (rc == 0 && resp && !(resp->header = kv_apply_header(kv_ks_rev(a->ks))))
        rc = -ENOMEM;
    if (rc) {
        if (resp)
            protobuf_c_message_free_unpacked(&resp->base, NULL);
        return rc;
    }
    if (resp) {
        *msg = &resp->base;
        *hdr = resp->header;
    }
    return 0;
}

/* Member list response: each stored kvdpb.Member record decodes as an etcdserverpb.Member
 * (same field numbers). */
static int add_member(void *arg, const uint8_t *rec, size_t len)
{
    Etcdserverpb__MemberUpdateResponse *r = arg;
    Etcdserverpb__Member **n = realloc(r->members, (r->n_members + 1) * sizeof *n);
    if (!n)
        return -ENOMEM;
    r->members = n;
    if (!(n[r->n_members] = etcdserverpb__member__unpack(NULL, len, rec)))
        return -ENOMEM;
    r->n_members++;
    return 0;
}

int kv_apply_members(kv_actx *a, const Kvdpb__InternalRequest *ir, ProtobufCMessage **msg,
                     Etcdserverpb__ResponseHeader **hdr)
{
    int rc;
    if (ir->request_case == KVDPB__INTERNAL_REQUEST__REQUEST_MEMBER_PUBLISH) {
        const Kvdpb__Member *m = ir->member_publish;
        rc = kv_ks_member_publish(a->ks, m->id, m->name, m->client_urls, m->n_client_urls,
                                  m->peer_urls, m->n_peer_urls);
    } else {
        const Kvdpb__MemberUpdate *u = ir->member_update;
        rc = kv_ks_member_update(a->ks, u->id, u->peer_urls, u->n_peer_urls);
    }
    switch (rc) {
    case 0:
        break;
    case -EINVAL:
        kv_apply_err(a->res, KV_ERR_MEMBER_BAD_URLS);
        return 1;
    case -ENOENT:
        kv_apply_err(a->res, KV_ERR_MEMBER_NOT_FOUND);
        return 1;
    case -EADDRINUSE:
        kv_apply_err(a->res, KV_ERR_PEER_URL_EXIST);
        return 1;
    default:
        return rc;
    }
    if (a->quiet)
        return 0;
    Etcdserverpb__MemberUpdateResponse *r = malloc(sizeof *r);
    if (!r)
        return -ENOMEM;
    etcdserverpb__member_update_response__init(r);
    if (!(r->header = kv_apply_header(kv_ks_rev(a->ks))))
        rc = -ENOMEM;
    else
        rc = kv_ks_member_walk(a->ks, add_member, r);
    if (rc) {
        protobuf_c_message_free_unpacked(&r->base, NULL);
        return rc;
    }
    *msg = &r->base;
    *hdr = r->header;
    return 0;
}
