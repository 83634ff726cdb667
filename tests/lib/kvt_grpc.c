/* kvt_grpc: see kvt_grpc.h. */
#include "kvt_grpc.h"

#include <errno.h>
#include <stdlib.h>

int kvt_grpc_unary_msg(kv_it_grpc *c, const char *method, const ProtobufCMessage *m,
                       uint32_t timeout_ms, char *msg, size_t cap)
{
    size_t n = protobuf_c_message_get_packed_size(m);
    uint8_t *buf = malloc(n + 1);
    if (!buf)
        return -ENOMEM;
    protobuf_c_message_pack(m, buf);
    uint8_t *resp = NULL;
    size_t rlen = 0;
    int status = -1;
    if (msg && cap)
        msg[0] = 0;
    int rc = kv_it_grpc_call(c, method, buf, n, &resp, &rlen, timeout_ms, &status, msg, cap);
    free(buf);
    free(resp);
    if (rc < 0)
        return rc;
    return rc == 0 ? 0 : status;
}
