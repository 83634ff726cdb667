/* conc_unary: one request answered as the call's response (see conc_unary.h). */
#include "api/conc_unary.h"

#include "api/services.h"
#include "api/api.h"

#include <stdlib.h>

typedef struct unary_req {
    kv_grpc_call *call; /* NULL once the call went away */
    kv_conc_answer_fn answer;
} unary_req;

static void on_done(void *arg, kv_result *res)
{
    unary_req *u = arg;
    if (u->call != NULL) {
        kv_grpc_call_set_data(u->call, NULL);
        if (res->err != KV_ERR_NONE)
            kv_reply_step_err(u->call, res->err, res->detail); /* conc_client.h */
        else
            u->answer(u->call, res);
    }
    free(u);
}

void kv_conc_unary(kv_grpc_call *call, const kv_conc_ident *id, int field,
                   const ProtobufCMessage *m, kv_conc_answer_fn answer)
{
    kv_api *s = kv_grpc_call_app(call);
    unary_req *u = calloc(1, sizeof(*u));
    if (u == NULL) {
        kv_reply_etcd_err(call, KV_ERR_REQUEST_NOMEM);
        return;
    }
    u->call = call;
    u->answer = answer;
    kv_grpc_call_set_data(call, u);
    int rc = field ? kv_conc_propose(s, id, (enum kv_ireq_field)field, m, on_done, u)
                   : kv_conc_range(s, m, on_done, u);
    if (rc < 0) { /* done does not run */
        kv_grpc_call_set_data(call, NULL);
        free(u);
        kv_result r = {0};
        kv_conc_errno_result(rc, &r);
        kv_reply_step_err(call, r.err, r.detail);
    }
}

void kv_conc_unary_cancel(kv_grpc_call *call)
{
    unary_req *u = kv_grpc_call_data(call);
    if (u)
        u->call = NULL;
}
