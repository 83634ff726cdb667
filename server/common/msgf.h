/*
 * msgf: a formatted message into a caller's optional buffer, for functions that return a
 * negative errno and say why in (msg, msglen) (bbolt/bbolt.h, mvcc/snapshot.h). Any thread.
 */
#ifndef KV_COMMON_MSGF_H
#define KV_COMMON_MSGF_H

#include <stddef.h>

/* snprintf into msg (truncated to len bytes, NUL-terminated); does nothing when msg is NULL or
 * len is 0. */
void kv_msgf(char *msg, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
