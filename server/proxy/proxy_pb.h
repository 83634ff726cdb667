/*
 * proxy_pb.h - the few protobuf fields the proxy reads or writes itself, without unpacking
 * whole messages: a lease id out of LeaseKeepAliveRequest (field 1) and
 * LeaseKeepAliveResponse (field 2), a LeaseKeepAliveRequest packed from an id, and the header
 * revision of a KV answer (--experimental-serializable-ordering).
 * Pure functions, any thread. Input is untrusted: every read is bounds-checked.
 */
#ifndef KV_PROXY_PB_H
#define KV_PROXY_PB_H

#include <stddef.h>
#include <stdint.h>

/* The last value of varint field `field` in msg[0..len) (protobuf's last-one-wins), in *out;
 * 0 when absent (the proto3 default). Returns 0, or -EINVAL when the bytes are not a valid
 * message (truncated field, bad wire type, the field with a non-varint wire type). */
int kv_proxy_pb_varint_field(const uint8_t *msg, size_t len, uint32_t field, int64_t *out);
/* The revision of the ResponseHeader (field 1; its revision: field 3) of a Range, Put,
 * DeleteRange or Txn response, in *rev (0 when absent). 0, or -EINVAL as above. */
int kv_proxy_pb_header_revision(const uint8_t *msg, size_t len, int64_t *rev);
/* Packs LeaseKeepAliveRequest{ID: id} into buf (at least 11 bytes); returns its length. */
size_t kv_proxy_pb_keepalive_req(uint8_t *buf, int64_t id);

#endif
