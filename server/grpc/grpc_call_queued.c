/* grpc_call_queued: the per-call send-buffer gauge the Watch service bounds itself with. */
#include "grpc/grpc_http1.h"
#include "grpc/grpc_internal.h"

size_t kv_grpc_call_send_queued(kv_grpc_call *c)
{
    if (c->local) /* an HTTP/1 gateway call: the sink's own buffer */
        return c->local->queued ? c->local->queued(c->local_arg) : 0;
    return kv_grpc_buf_size(&c->outq);
}
