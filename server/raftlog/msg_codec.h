/*
 * msg_codec: struct raft_msg <-> kvdraftpb.Message (proto/raft.proto), the wire form of raft
 * messages between members. A SNAPSHOT message carries only the snapshot meta: the state
 * itself is streamed separately (decoded messages have snapshot.data NULL, len 0).
 *
 * No state; any thread. Errors: 0 or negative errno.
 */
#ifndef KV_RAFTLOG_MSG_CODEC_H
#define KV_RAFTLOG_MSG_CODEC_H

#include <stddef.h>
#include <stdint.h>

#include "raft/raft.h"

/* Encodes m (entries + data + snapshot meta) into a malloc'd buffer (*out, *len; the caller
 * frees it). -EINVAL if a conf size exceeds RAFT_MAX_NODES, -ENOMEM. */
int kv_raft_msg_encode(const struct raft_msg *m, uint8_t **out, size_t *len);

/* A decoded message that owns its memory (the entries array and the unpacked protobuf that
 * the entry data points into). */
typedef struct kv_raft_msg_owned {
    struct raft_msg msg;
    void *mem_;
} kv_raft_msg_owned;

/* Decodes buf[0..len) (borrowed; nothing points into it afterwards). Validates: a
 * well-formed protobuf, type in RAFT_MSG_APPEND..RAFT_MSG_TIMEOUT_NOW, from and to non-zero,
 * entries only on APPEND, n_entries <= max_entries, entries contiguous and increasing from
 * index + 1, entry types NORMAL or CONF, conf sizes <= RAFT_MAX_NODES with non-zero ids
 * -> else -EBADMSG (out zeroed). -ENOMEM. On success free with kv_raft_msg_free. */
int kv_raft_msg_decode(const uint8_t *buf, size_t len, size_t max_entries, kv_raft_msg_owned *out);
/* Releases what decode allocated; m may be zeroed (then a no-op). */
void kv_raft_msg_free(kv_raft_msg_owned *m);

#endif
