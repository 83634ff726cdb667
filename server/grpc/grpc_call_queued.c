/* grpc_call_queued: the per-call send-buffer gauge the Watch service bounds itself with. */
#include "grpc/grpc_internal.h"

size_t kv_grpc_call_send_queued(kv_grpc_call *c)
{
    return kv_grpc_buf_size(&c->outq);
}
