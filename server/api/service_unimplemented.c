/*
 * service_unimplemented: methods of the etcd v3 API that kvd does not serve yet. Each answers
 * gRPC UNIMPLEMENTED (12) with a message naming the method, so a client sees exactly what is
 * missing rather than a hang or a generic error.
 */
#include "api/services.h"

#include <stdio.h>

static void finish_unimplemented(kv_grpc_call *call)
{
    char msg[160];
    snprintf(msg, sizeof(msg), "kvd: %s is not implemented yet", kv_grpc_call_method(call));
    kv_reply_error(call, KV_GRPC_UNIMPLEMENTED, msg);
}

static void on_message(kv_grpc_call *call, const uint8_t *msg, size_t len)
{
    (void)msg;
    (void)len;
    finish_unimplemented(call);
}

#define UNARY(path)                                                                                \
    {                                                                                              \
        path, 0, on_message, NULL, NULL                                                            \
    }

const kv_grpc_method kv_service_unimplemented[] = {
    UNARY("/etcdserverpb.Auth/AuthEnable"),
    UNARY("/etcdserverpb.Auth/AuthDisable"),       UNARY("/etcdserverpb.Auth/Authenticate"),
};
const size_t kv_service_unimplemented_len =
    sizeof(kv_service_unimplemented) / sizeof(kv_service_unimplemented[0]);
