/* json_pb_write.c - the JSON writer and protobuf -> JSON (jsonpb, OrigName) (json_pb.h). */
#include "http/json_pb.h"
#include "http/json_pb_int.h"

#include "common/base64.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- output buffer ---- */

void kv_jbuf_put(kv_jbuf *b, const char *s, size_t n)
{
    if (b->oom)
        return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 256;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

void kv_jbuf_puts(kv_jbuf *b, const char *s)
{
    kv_jbuf_put(b, s, strlen(s));
}

void kv_jbuf_str(kv_jbuf *b, const char *s, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    kv_jbuf_put(b, "\"", 1);
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        /* Go's encoding/json escapes control characters and <, >, & (HTML-safe). */
        if (ch >= 0x20 && ch != '"' && ch != '\\' && ch != '<' && ch != '>' && ch != '&')
            continue;
        kv_jbuf_put(b, s + run, i - run);
        run = i + 1;
        char e[7];
        switch (ch) {
        case '"':
            kv_jbuf_put(b, "\\\"", 2);
            break;
        case '\\':
            kv_jbuf_put(b, "\\\\", 2);
            break;
        case '\n':
            kv_jbuf_put(b, "\\n", 2);
            break;
        case '\r':
            kv_jbuf_put(b, "\\r", 2);
            break;
        case '\t':
            kv_jbuf_put(b, "\\t", 2);
            break;
        default:
            e[0] = '\\', e[1] = 'u', e[2] = '0', e[3] = '0', e[4] = hex[ch >> 4],
            e[5] = hex[ch & 15];
            kv_jbuf_put(b, e, 6);
            break;
        }
    }
    kv_jbuf_put(b, s + run, n - run);
    kv_jbuf_put(b, "\"", 1);
}

void kv_jbuf_free(kv_jbuf *b)
{
    free(b->p);
    memset(b, 0, sizeof(*b));
}
/* ---- base64 ---- */

/* Standard, padded: Go's encoding/json for []byte. Encoded 48 bytes (64 characters) at a time;
 * only the last piece can be padded. */
static void put_base64(kv_jbuf *b, const uint8_t *d, size_t n)
{
    char q[64];
    kv_jbuf_put(b, "\"", 1);
    for (size_t i = 0; i < n; i += 48) {
        size_t k = n - i < 48 ? n - i : 48;
        kv_jbuf_put(b, q, kv_b64_encode(d + i, k, KV_B64_STD, true, q));
    }
    kv_jbuf_put(b, "\"", 1);
}
/* ---- protobuf -> JSON ---- */

static int is_zero(const ProtobufCFieldDescriptor *f, const void *v)
{
    switch (f->type) {
    case PROTOBUF_C_TYPE_STRING: {
        const char *s = *(char *const *)v;
        return s == NULL || s[0] == '\0';
    }
    case PROTOBUF_C_TYPE_BYTES:
        return ((const ProtobufCBinaryData *)v)->len == 0;
    case PROTOBUF_C_TYPE_MESSAGE:
        return *(void *const *)v == NULL;
    default: {
        static const uint8_t zero[8];
        return memcmp(v, zero, kv_pb_elem_size(f->type)) == 0;
    }
    }
}

static void put_value(const ProtobufCFieldDescriptor *f, const void *v, kv_jbuf *b)
{
    char num[48];
    switch (f->type) {
    case PROTOBUF_C_TYPE_INT32:
    case PROTOBUF_C_TYPE_SINT32:
    case PROTOBUF_C_TYPE_SFIXED32:
        snprintf(num, sizeof(num), "%" PRId32, *(const int32_t *)v);
        kv_jbuf_puts(b, num);
        break;
    case PROTOBUF_C_TYPE_UINT32:
    case PROTOBUF_C_TYPE_FIXED32:
        snprintf(num, sizeof(num), "%" PRIu32, *(const uint32_t *)v);
        kv_jbuf_puts(b, num);
        break;
    case PROTOBUF_C_TYPE_INT64:
    case PROTOBUF_C_TYPE_SINT64:
    case PROTOBUF_C_TYPE_SFIXED64:
        snprintf(num, sizeof(num), "\"%" PRId64 "\"", *(const int64_t *)v);
        kv_jbuf_puts(b, num);
        break;
    case PROTOBUF_C_TYPE_UINT64:
    case PROTOBUF_C_TYPE_FIXED64:
        snprintf(num, sizeof(num), "\"%" PRIu64 "\"", *(const uint64_t *)v);
        kv_jbuf_puts(b, num);
        break;
    case PROTOBUF_C_TYPE_FLOAT:
        snprintf(num, sizeof(num), "%.9g", (double)*(const float *)v);
        kv_jbuf_puts(b, num);
        break;
    case PROTOBUF_C_TYPE_DOUBLE:
        snprintf(num, sizeof(num), "%.17g", *(const double *)v);
        kv_jbuf_puts(b, num);
        break;
    case PROTOBUF_C_TYPE_BOOL:
        kv_jbuf_puts(b, *(const protobuf_c_boolean *)v ? "true" : "false");
        break;
    case PROTOBUF_C_TYPE_ENUM: {
        int e = *(const int *)v;
        const ProtobufCEnumValue *ev = protobuf_c_enum_descriptor_get_value(f->descriptor, e);
        if (ev) {
            kv_jbuf_str(b, ev->name, strlen(ev->name));
        } else {
            snprintf(num, sizeof(num), "%d", e);
            kv_jbuf_puts(b, num);
        }
        break;
    }
    case PROTOBUF_C_TYPE_STRING: {
        const char *s = *(char *const *)v;
        kv_jbuf_str(b, s ? s : "", s ? strlen(s) : 0);
        break;
    }
    case PROTOBUF_C_TYPE_BYTES: {
        const ProtobufCBinaryData *d = v;
        put_base64(b, d->data, d->len);
        break;
    }
    case PROTOBUF_C_TYPE_MESSAGE: {
        const ProtobufCMessage *m = *(void *const *)v;
        if (m)
            kv_pb_to_json(m, b);
        else
            kv_jbuf_puts(b, "null");
        break;
    }
    }
}

void kv_pb_to_json(const ProtobufCMessage *m, kv_jbuf *b)
{
    const ProtobufCMessageDescriptor *d = m->descriptor;
    const char *base = (const char *)m;
    int first = 1;
    kv_jbuf_put(b, "{", 1);
    for (unsigned i = 0; i < d->n_fields; i++) {
        const ProtobufCFieldDescriptor *f = &d->fields[i];
        const void *v = base + f->offset;
        size_t n = 1;
        if (f->label == PROTOBUF_C_LABEL_REPEATED) {
            n = *(const size_t *)(base + f->quantifier_offset);
            if (n == 0)
                continue;
        } else if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) {
            if (*(const uint32_t *)(base + f->quantifier_offset) != f->id)
                continue;
        } else if (f->label == PROTOBUF_C_LABEL_OPTIONAL) {
            if (f->type == PROTOBUF_C_TYPE_STRING || f->type == PROTOBUF_C_TYPE_MESSAGE) {
                if (*(void *const *)v == NULL)
                    continue;
            } else if (!*(const protobuf_c_boolean *)(base + f->quantifier_offset)) {
                continue;
            }
        } else if (f->label == PROTOBUF_C_LABEL_NONE && is_zero(f, v)) {
            continue;
        }
        if (!first)
            kv_jbuf_put(b, ",", 1);
        first = 0;
        kv_jbuf_str(b, f->name, strlen(f->name));
        kv_jbuf_put(b, ":", 1);
        if (f->label == PROTOBUF_C_LABEL_REPEATED) {
            const char *arr = *(char *const *)v;
            size_t es = kv_pb_elem_size(f->type);
            kv_jbuf_put(b, "[", 1);
            for (size_t k = 0; k < n; k++) {
                if (k)
                    kv_jbuf_put(b, ",", 1);
                put_value(f, arr + k * es, b);
            }
            kv_jbuf_put(b, "]", 1);
        } else {
            put_value(f, v, b);
        }
    }
    kv_jbuf_put(b, "}", 1);
}
