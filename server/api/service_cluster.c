/*
 * service_cluster: etcdserverpb.Cluster. MemberList answers from the configured membership
 * (a single member until the raft transport is wired in); changes are not implemented yet.
 */
#include "api/services.h"
#include "mvcc/pb_strip.h"
#include "rpc.pb-c.h"
#include "server.h"

#include <stdlib.h>
#include <string.h>

static void on_member_list(kv_grpc_call *call, const uint8_t *msg, size_t len)
{
    kv_server *s = kv_grpc_call_app(call);
    const kv_config *cfg = s->cfg;
    Etcdserverpb__MemberListRequest *req = (Etcdserverpb__MemberListRequest *)kv_pb_unpack(
        &etcdserverpb__member_list_request__descriptor, msg, len);
    if (req == NULL) {
        kv_reply_error(call, 13, "grpc: error unmarshalling request: malformed protobuf");
        return;
    }
    etcdserverpb__member_list_request__free_unpacked(req, NULL);

    Etcdserverpb__Member members[KV_MAX_MEMBERS];
    Etcdserverpb__Member *mp[KV_MAX_MEMBERS];
    char *peer_urls[KV_MAX_MEMBERS][KV_MAX_MEMBERS];
    char *client_urls[KV_MAX_URLS];
    for (size_t i = 0; i < cfg->n_advertise_client; i++)
        client_urls[i] = (char *)cfg->advertise_client[i].text;

    size_t n = 0;
    for (size_t i = 0; i < cfg->n_initial_cluster; i++) {
        const char *name = cfg->initial_cluster[i].name;
        int seen = 0;
        for (size_t j = 0; j < i; j++)
            seen |= strcmp(cfg->initial_cluster[j].name, name) == 0;
        if (seen)
            continue;
        Etcdserverpb__Member *m = &members[n];
        etcdserverpb__member__init(m);
        m->id = s->id.member_ids[n];
        m->name = (char *)name;
        size_t np = 0;
        for (size_t j = i; j < cfg->n_initial_cluster; j++)
            if (strcmp(cfg->initial_cluster[j].name, name) == 0)
                peer_urls[n][np++] = (char *)cfg->initial_cluster[j].url.text;
        m->peerurls = peer_urls[n];
        m->n_peerurls = np;
        if (m->id == s->id.member_id) { /* only started members advertise client URLs */
            m->clienturls = client_urls;
            m->n_clienturls = cfg->n_advertise_client;
        }
        mp[n] = m;
        n++;
    }

    Etcdserverpb__MemberListResponse r = ETCDSERVERPB__MEMBER_LIST_RESPONSE__INIT;
    Etcdserverpb__ResponseHeader h = ETCDSERVERPB__RESPONSE_HEADER__INIT;
    const kv_header_info *hi = kv_node_header(s->node);
    h.cluster_id = hi->cluster_id;
    h.member_id = hi->member_id;
    h.raft_term = hi->raft_term; /* etcd's MemberList header carries no revision */
    r.header = &h;
    r.members = mp;
    r.n_members = n;

    kv_reply_message(call, &r.base);
}

const kv_grpc_method kv_service_cluster[] = {
    {"/etcdserverpb.Cluster/MemberList", 0, on_member_list, NULL, NULL},
};
const size_t kv_service_cluster_len = sizeof(kv_service_cluster) / sizeof(kv_service_cluster[0]);
