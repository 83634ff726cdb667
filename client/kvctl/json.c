/* Go encoding/json-compatible JSON output for protobuf-c messages: see out.h. */
#include "common/base64.h"
#include "out.h"
#include "pb_util.h"

#include <ctype.h>
#include <inttypes.h>
#include <string.h>

static const char hexdig[] = "0123456789abcdef";

/* Decodes one UTF-8 rune at s[0..n); returns its length, or 0 if invalid. */
static size_t utf8_rune(const uint8_t *s, size_t n, uint32_t *r)
{
    uint8_t c = s[0];
    size_t len;
    uint32_t v, min;
    if (c < 0x80) {
        *r = c;
        return 1;
    } else if ((c & 0xe0) == 0xc0) {
        len = 2, v = c & 0x1f, min = 0x80;
    } else if ((c & 0xf0) == 0xe0) {
        len = 3, v = c & 0x0f, min = 0x800;
    } else if ((c & 0xf8) == 0xf0) {
        len = 4, v = c & 0x07, min = 0x10000;
    } else {
        return 0;
    }
    if (n < len)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        v = (v << 6) | (s[i] & 0x3f);
    }
    if (v < min || v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff))
        return 0;
    *r = v;
    return len;
}

void kvctl_json_string(struct kvctl_buf *b, const uint8_t *s, size_t n)
{
    kvctl_buf_putn(b, "\"", 1);
    size_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        if (c < 0x80) {
            if (c == '"' || c == '\\') {
                char e[2] = {'\\', (char)c};
                kvctl_buf_putn(b, e, 2);
            } else if (c == '\n') {
                kvctl_buf_putn(b, "\\n", 2);
            } else if (c == '\r') {
                kvctl_buf_putn(b, "\\r", 2);
            } else if (c == '\t') {
                kvctl_buf_putn(b, "\\t", 2);
            } else if (c < 0x20 || c == '<' || c == '>' || c == '&') {
                char e[6] = {'\\', 'u', '0', '0', hexdig[c >> 4], hexdig[c & 0xf]};
                kvctl_buf_putn(b, e, 6);
            } else {
                kvctl_buf_putn(b, &c, 1);
            }
            i++;
            continue;
        }
        uint32_t r;
        size_t l = utf8_rune(s + i, n - i, &r);
        if (l == 0) {
            kvctl_buf_puts(b, "\\ufffd");
            i++;
            continue;
        }
        if (r == 0x2028 || r == 0x2029)
            kvctl_buf_printf(b, "\\u%04" PRIx32, r);
        else
            kvctl_buf_putn(b, s + i, l);
        i += l;
    }
    kvctl_buf_putn(b, "\"", 1);
}

void kvctl_json_bytes(struct kvctl_buf *b, const uint8_t *s, size_t n)
{
    /* Go's encoding/json: standard alphabet, padded; encoded in chunks of 3 KiB (whole
     * 3-byte groups, so only the last chunk can carry padding) */
    char o[4096];
    kvctl_buf_putn(b, "\"", 1);
    for (size_t i = 0; i < n; i += 3072) {
        size_t m = n - i < 3072 ? n - i : 3072;
        kvctl_buf_putn(b, o, kv_b64_encode(s + i, m, KV_B64_STD, true, o));
    }
    kvctl_buf_putn(b, "\"", 1);
}

/* Go field name of a proto field: CamelCase ("response_put" -> "ResponsePut"). */
static void go_name(char *out, size_t len, const char *proto)
{
    size_t o = 0;
    bool up = true;
    for (const char *p = proto; *p && o + 1 < len; p++) {
        if (*p == '_') {
            up = true;
            continue;
        }
        out[o++] = up ? (char)toupper((unsigned char)*p) : *p;
        up = false;
    }
    out[o] = '\0';
}

/* Name of the Go interface field that holds a oneof (protobuf-c does not keep oneof names). */
static const char *oneof_go_name(const ProtobufCMessageDescriptor *d)
{
    if (strcmp(d->short_name, "ResponseOp") == 0)
        return "Response";
    if (strcmp(d->short_name, "RequestOp") == 0)
        return "Request";
    if (strcmp(d->short_name, "Compare") == 0)
        return "TargetUnion";
    return "Oneof";
}

static void scalar(struct kvctl_buf *b, const ProtobufCFieldDescriptor *f, const void *p)
{
    switch (f->type) {
    case PROTOBUF_C_TYPE_INT32:
    case PROTOBUF_C_TYPE_SINT32:
    case PROTOBUF_C_TYPE_SFIXED32:
    case PROTOBUF_C_TYPE_ENUM:
        kvctl_buf_printf(b, "%" PRId32, *(const int32_t *)p);
        break;
    case PROTOBUF_C_TYPE_INT64:
    case PROTOBUF_C_TYPE_SINT64:
    case PROTOBUF_C_TYPE_SFIXED64:
        kvctl_buf_printf(b, "%" PRId64, *(const int64_t *)p);
        break;
    case PROTOBUF_C_TYPE_UINT32:
    case PROTOBUF_C_TYPE_FIXED32:
        kvctl_buf_printf(b, "%" PRIu32, *(const uint32_t *)p);
        break;
    case PROTOBUF_C_TYPE_UINT64:
    case PROTOBUF_C_TYPE_FIXED64:
        kvctl_buf_printf(b, "%" PRIu64, *(const uint64_t *)p);
        break;
    case PROTOBUF_C_TYPE_FLOAT:
        kvctl_buf_printf(b, "%g", (double)*(const float *)p);
        break;
    case PROTOBUF_C_TYPE_DOUBLE:
        kvctl_buf_printf(b, "%g", *(const double *)p);
        break;
    case PROTOBUF_C_TYPE_BOOL:
        kvctl_buf_puts(b, *(const protobuf_c_boolean *)p ? "true" : "false");
        break;
    case PROTOBUF_C_TYPE_STRING: {
        const char *s = *(char *const *)p;
        kvctl_json_string(b, (const uint8_t *)(s ? s : ""), s ? strlen(s) : 0);
        break;
    }
    case PROTOBUF_C_TYPE_BYTES: {
        const ProtobufCBinaryData *bd = p;
        kvctl_json_bytes(b, bd->data, bd->len);
        break;
    }
    case PROTOBUF_C_TYPE_MESSAGE: {
        const ProtobufCMessage *m = *(ProtobufCMessage *const *)p;
        if (m)
            kvctl_json_message(b, m);
        else
            kvctl_buf_puts(b, "null");
        break;
    }
    }
}

/* Go's omitempty: false, 0, "", empty []byte and nil pointers are left out. */
static bool is_empty(const ProtobufCFieldDescriptor *f, const void *p)
{
    switch (f->type) {
    case PROTOBUF_C_TYPE_STRING: {
        const char *s = *(char *const *)p;
        return !s || !*s;
    }
    case PROTOBUF_C_TYPE_BYTES:
        return ((const ProtobufCBinaryData *)p)->len == 0;
    case PROTOBUF_C_TYPE_MESSAGE:
        return *(ProtobufCMessage *const *)p == NULL;
    case PROTOBUF_C_TYPE_BOOL:
        return !*(const protobuf_c_boolean *)p;
    default: {
        size_t sz = kv_pb_elem_size(f->type);
        static const uint8_t zero[8];
        return memcmp(p, zero, sz) == 0;
    }
    }
}

void kvctl_json_fields(struct kvctl_buf *b, const ProtobufCMessage *m, bool *first)
{
    const ProtobufCMessageDescriptor *d = m->descriptor;
    const char *base = (const char *)m;
    for (unsigned i = 0; i < d->n_fields; i++) {
        const ProtobufCFieldDescriptor *f = &d->fields[i];
        const void *p = base + f->offset;
        if (f->label == PROTOBUF_C_LABEL_REPEATED) {
            size_t n = *(const size_t *)(base + f->quantifier_offset);
            if (n == 0)
                continue;
            kvctl_buf_puts(b, *first ? "\"" : ",\"");
            *first = false;
            kvctl_buf_puts(b, f->name);
            kvctl_buf_puts(b, "\":[");
            const char *arr = *(char *const *)p;
            size_t es = kv_pb_elem_size(f->type);
            for (size_t j = 0; j < n; j++) {
                if (j)
                    kvctl_buf_puts(b, ",");
                scalar(b, f, arr + j * es);
            }
            kvctl_buf_puts(b, "]");
            continue;
        }
        if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) {
            uint32_t c = *(const uint32_t *)(base + f->quantifier_offset);
            if (c != f->id)
                continue;
            char gn[128];
            go_name(gn, sizeof(gn), f->name);
            kvctl_buf_printf(b, "%s\"%s\":{\"%s\":", *first ? "" : ",", oneof_go_name(d), gn);
            *first = false;
            scalar(b, f, p);
            kvctl_buf_puts(b, "}");
            continue;
        }
        if (f->label == PROTOBUF_C_LABEL_OPTIONAL && f->quantifier_offset &&
            f->type != PROTOBUF_C_TYPE_MESSAGE && f->type != PROTOBUF_C_TYPE_STRING) {
            if (!*(const protobuf_c_boolean *)(base + f->quantifier_offset))
                continue;
        }
        if (is_empty(f, p))
            continue;
        kvctl_buf_puts(b, *first ? "\"" : ",\"");
        *first = false;
        kvctl_buf_puts(b, f->name);
        kvctl_buf_puts(b, "\":");
        scalar(b, f, p);
    }
}

void kvctl_json_message(struct kvctl_buf *b, const ProtobufCMessage *m)
{
    bool first = true;
    kvctl_buf_puts(b, "{");
    kvctl_json_fields(b, m, &first);
    kvctl_buf_puts(b, "}");
}

void kvctl_go_quote(struct kvctl_buf *b, const uint8_t *s, size_t n)
{
    kvctl_buf_puts(b, "\"");
    size_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        if (c >= 0x80) {
            uint32_t r;
            size_t l = utf8_rune(s + i, n - i, &r);
            if (l == 0) {
                kvctl_buf_printf(b, "\\x%02x", c);
                i++;
            } else {
                kvctl_buf_putn(b, s + i, l);
                i += l;
            }
            continue;
        }
        switch (c) {
        case '\a':
            kvctl_buf_puts(b, "\\a");
            break;
        case '\b':
            kvctl_buf_puts(b, "\\b");
            break;
        case '\f':
            kvctl_buf_puts(b, "\\f");
            break;
        case '\n':
            kvctl_buf_puts(b, "\\n");
            break;
        case '\r':
            kvctl_buf_puts(b, "\\r");
            break;
        case '\t':
            kvctl_buf_puts(b, "\\t");
            break;
        case '\v':
            kvctl_buf_puts(b, "\\v");
            break;
        case '\\':
            kvctl_buf_puts(b, "\\\\");
            break;
        case '"':
            kvctl_buf_puts(b, "\\\"");
            break;
        default:
            if (c < 0x20 || c == 0x7f)
                kvctl_buf_printf(b, "\\x%02x", c);
            else
                kvctl_buf_putn(b, &c, 1);
        }
        i++;
    }
    kvctl_buf_puts(b, "\"");
}
