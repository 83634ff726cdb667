/* pb_strip: see pb_strip.h. */
#include "pb/pb_strip.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "pb/pb_wire.h"

/* Field lookup with a one-entry cache: floods repeat one tag. */
typedef struct known_cache {
    uint32_t tag;
    bool valid, known;
} known_cache;

static bool is_known(const ProtobufCMessageDescriptor *d, known_cache *c, uint32_t tag)
{
    if (!c->valid || c->tag != tag) {
        c->tag = tag;
        c->known = protobuf_c_message_descriptor_get_field(d, tag) != NULL;
        c->valid = true;
    }
    return c->known;
}

/* One pass: counts the unknown fields and, when out != NULL, copies the known ones there.
 * Returns the count, -1 if malformed; *out_len gets the bytes copied. */
static long filter(const ProtobufCMessageDescriptor *d, const uint8_t *buf, size_t len,
                   uint8_t *out, size_t *out_len)
{
    long unknown = 0;
    size_t n = 0;
    known_cache c = {0, false, false};
    if (buf && len) {
        for (const uint8_t *p = buf, *end = buf + len; p < end;) {
            kv_pb_field f;
            size_t used = kv_pb_read_field(p, end, &f);
            if (!used)
                return -1;
            if (!is_known(d, &c, f.tag)) {
                unknown++;
            } else if (out) {
                memcpy(out + n, p, used);
                n += used;
            }
            p += used;
        }
    }
    if (out_len)
        *out_len = n;
    return unknown;
}

long kv_pb_count_unknown(const ProtobufCMessageDescriptor *d, const uint8_t *buf, size_t len)
{
    return filter(d, buf, len, NULL, NULL);
}

size_t kv_pb_strip_unknown(const ProtobufCMessageDescriptor *d, const uint8_t *buf, size_t len,
                           uint8_t *out)
{
    size_t n = 0;
    filter(d, buf, len, out, &n);
    return n;
}

ProtobufCMessage *kv_pb_unpack(const ProtobufCMessageDescriptor *d, const uint8_t *buf, size_t len)
{
    if (len < KV_PB_STRIP_MIN_LEN) /* at most len / 2 fields: cheap enough as they are */
        return protobuf_c_message_unpack(d, NULL, len, buf);
    uint8_t *tmp = malloc(len);
    if (!tmp)
        return NULL;
    size_t n = 0;
    long unknown = filter(d, buf, len, tmp, &n);
    ProtobufCMessage *m = unknown > KV_PB_UNKNOWN_KEEP
                              ? protobuf_c_message_unpack(d, NULL, n, tmp)
                              : protobuf_c_message_unpack(d, NULL, len, buf); /* or malformed */
    free(tmp);
    return m;
}
