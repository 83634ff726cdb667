/* json_pb.c - JSON -> protobuf-c messages, grpc-gateway v1 style (see json_pb.h). */
#include "http/json_pb.h"
#include "http/json_pb_int.h"

#include "common/base64.h"
#include "common/hex.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- base64 ---- */

/* Decodes standard or URL-safe base64, padded or not. Returns 0 or -EINVAL (*bad: the
 * offending input byte, as Go's "illegal base64 data at input byte N") / -ENOMEM. */
static int decode_base64(const char *s, size_t n, ProtobufCBinaryData *out, size_t *bad)
{
    uint8_t *d = malloc(kv_b64_decoded_max(n) + 1);
    if (!d)
        return -ENOMEM;
    size_t o = 0;
    int rc = kv_b64_decode(s, n, KV_B64_DEC_STD | KV_B64_DEC_URL | KV_B64_DEC_PAD, d, &o, bad);
    if (rc || o == 0) {
        free(d);
        d = NULL;
    }
    if (rc)
        return rc;
    out->data = d;
    out->len = o;
    return 0;
}
/* ---- JSON -> protobuf ---- */

typedef struct jparser {
    const char *p, *end;
    int depth;
    char *err;
    size_t errlen;
} jparser;

static int fail(jparser *ps, const char *what)
{
    if (ps->err && !ps->err[0])
        snprintf(ps->err, ps->errlen, "%s", what);
    return -EINVAL;
}

static void ws(jparser *ps)
{
    while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r'))
        ps->p++;
}

static int lit(jparser *ps, const char *w)
{
    size_t n = strlen(w);
    if ((size_t)(ps->end - ps->p) >= n && memcmp(ps->p, w, n) == 0) {
        ps->p += n;
        return 1;
    }
    return 0;
}

static size_t put_utf8(char *o, unsigned cp)
{
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xC0 | (cp >> 6));
        o[1] = (char)(0x80 | (cp & 63));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | (cp >> 12));
        o[1] = (char)(0x80 | ((cp >> 6) & 63));
        o[2] = (char)(0x80 | (cp & 63));
        return 3;
    }
    o[0] = (char)(0xF0 | (cp >> 18));
    o[1] = (char)(0x80 | ((cp >> 12) & 63));
    o[2] = (char)(0x80 | ((cp >> 6) & 63));
    o[3] = (char)(0x80 | (cp & 63));
    return 4;
}

/* A JSON string at ps->p: decoded into a new NUL-terminated buffer (*out, *n). */
static int parse_string(jparser *ps, char **out, size_t *n)
{
    if (ps->p >= ps->end || *ps->p != '"')
        return fail(ps, "expected a string");
    ps->p++;
    const char *s = ps->p;
    while (ps->p < ps->end && *ps->p != '"') {
        if (*ps->p == '\\' && ps->p + 1 < ps->end)
            ps->p++;
        ps->p++;
    }
    if (ps->p >= ps->end)
        return fail(ps, "unterminated string");
    size_t raw = (size_t)(ps->p - s);
    ps->p++;
    char *o = malloc(raw + 1);
    if (!o)
        return -ENOMEM;
    size_t k = 0;
    for (size_t i = 0; i < raw; i++) {
        if (s[i] != '\\') {
            if ((unsigned char)s[i] < 0x20) {
                free(o);
                return fail(ps, "invalid character in string literal");
            }
            o[k++] = s[i];
            continue;
        }
        i++;
        switch (s[i]) {
        case '"':
        case '\\':
        case '/':
            o[k++] = s[i];
            break;
        case 'b':
            o[k++] = '\b';
            break;
        case 'f':
            o[k++] = '\f';
            break;
        case 'n':
            o[k++] = '\n';
            break;
        case 'r':
            o[k++] = '\r';
            break;
        case 't':
            o[k++] = '\t';
            break;
        case 'u': {
            uint32_t cp, lo;
            if (i + 4 >= raw + 0 || kv_hex4(s + i + 1, &cp) != 0) {
                free(o);
                return fail(ps, "invalid \\u escape");
            }
            i += 4;
            if (cp >= 0xD800 && cp < 0xDC00 && i + 6 < raw && s[i + 1] == '\\' && s[i + 2] == 'u' &&
                kv_hex4(s + i + 3, &lo) == 0 && lo >= 0xDC00 && lo < 0xE000) {
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                i += 6;
            } else if (cp >= 0xD800 && cp < 0xE000) {
                cp = 0xFFFD;
            }
            /* every escape is >= 6 raw bytes and yields <= 4 */
            k += put_utf8(o + k, cp);
            break;
        }
        default:
            free(o);
            return fail(ps, "invalid escape in string literal");
        }
    }
    o[k] = '\0';
    *out = o;
    *n = k;
    return 0;
}

static int skip_value(jparser *ps);

static int skip_container(jparser *ps, char close, int is_obj)
{
    if (++ps->depth > KV_JSON_MAX_DEPTH)
        return fail(ps, "JSON nested too deeply");
    ps->p++;
    ws(ps);
    if (ps->p < ps->end && *ps->p == close) {
        ps->p++;
        ps->depth--;
        return 0;
    }
    for (;;) {
        int rc;
        if (is_obj) {
            char *k;
            size_t kn;
            if ((rc = parse_string(ps, &k, &kn)) != 0)
                return rc;
            free(k);
            ws(ps);
            if (!lit(ps, ":"))
                return fail(ps, "expected ':'");
        }
        if ((rc = skip_value(ps)) != 0)
            return rc;
        ws(ps);
        if (lit(ps, ","))
            continue;
        if (ps->p < ps->end && *ps->p == close) {
            ps->p++;
            ps->depth--;
            return 0;
        }
        return fail(ps, "expected ',' or end of container");
    }
}

/* A number token: [-+0-9.eE]+ copied into buf. */
static int number_token(jparser *ps, char *buf, size_t cap)
{
    size_t n = 0;
    while (ps->p < ps->end && strchr("-+0123456789.eE", *ps->p) && *ps->p) {
        if (n + 1 >= cap)
            return fail(ps, "number too long");
        buf[n++] = *ps->p++;
    }
    buf[n] = '\0';
    return n ? 0 : fail(ps, "invalid value");
}

static int skip_value(jparser *ps)
{
    char tmp[64];
    ws(ps);
    if (ps->p >= ps->end)
        return fail(ps, "unexpected EOF");
    switch (*ps->p) {
    case '{':
        return skip_container(ps, '}', 1);
    case '[':
        return skip_container(ps, ']', 0);
    case '"': {
        char *s;
        size_t n;
        int rc = parse_string(ps, &s, &n);
        if (rc == 0)
            free(s);
        return rc;
    }
    default:
        if (lit(ps, "true") || lit(ps, "false") || lit(ps, "null"))
            return 0;
        return number_token(ps, tmp, sizeof(tmp));
    }
}

/* Frees whatever a singular field (or a repeated field's array) holds; leaves it zero. */
static void clear_field(const ProtobufCFieldDescriptor *f, char *base)
{
    void *v = base + f->offset;
    if (f->label == PROTOBUF_C_LABEL_REPEATED) {
        size_t *n = (size_t *)(base + f->quantifier_offset);
        char *arr = *(char **)v;
        for (size_t k = 0; arr && k < *n; k++) {
            if (f->type == PROTOBUF_C_TYPE_STRING)
                free(((char **)arr)[k]);
            else if (f->type == PROTOBUF_C_TYPE_BYTES)
                free(((ProtobufCBinaryData *)arr)[k].data);
            else if (f->type == PROTOBUF_C_TYPE_MESSAGE)
                protobuf_c_message_free_unpacked(((ProtobufCMessage **)arr)[k], NULL);
        }
        free(arr);
        *(char **)v = NULL;
        *n = 0;
        return;
    }
    if (f->type == PROTOBUF_C_TYPE_STRING) {
        char *s = *(char **)v;
        if (s && s != (const char *)f->default_value && s != protobuf_c_empty_string)
            free(s);
        *(const char **)v =
            f->default_value ? (const char *)f->default_value
                             : (f->label == PROTOBUF_C_LABEL_NONE ? protobuf_c_empty_string : NULL);
    } else if (f->type == PROTOBUF_C_TYPE_BYTES) {
        ProtobufCBinaryData *d = v;
        if (d->data &&
            (!f->default_value || d->data != ((const ProtobufCBinaryData *)f->default_value)->data))
            free(d->data);
        d->data = NULL;
        d->len = 0;
    } else if (f->type == PROTOBUF_C_TYPE_MESSAGE) {
        if (*(ProtobufCMessage **)v)
            protobuf_c_message_free_unpacked(*(ProtobufCMessage **)v, NULL);
        *(void **)v = NULL;
    } else {
        memset(v, 0, kv_pb_elem_size(f->type));
    }
}

static int parse_message(jparser *ps, const ProtobufCMessageDescriptor *d, ProtobufCMessage **out);

static int parse_int(jparser *ps, const char *tok, int is_signed, int64_t *s, uint64_t *u)
{
    char *e;
    errno = 0;
    if (is_signed)
        *s = strtoll(tok, &e, 10);
    else {
        if (tok[0] == '-')
            return fail(ps, "negative value for an unsigned field");
        *u = strtoull(tok, &e, 10);
    }
    if (errno || *e || e == tok)
        return fail(ps, "invalid integer");
    return 0;
}

/* One value of field f into dst (an element of its type). */
static int parse_field_value(jparser *ps, const ProtobufCFieldDescriptor *f, void *dst)
{
    char tok[64];
    char *str = NULL;
    size_t slen = 0;
    int rc;
    ws(ps);
    if (ps->p >= ps->end)
        return fail(ps, "unexpected EOF");
    switch (f->type) {
    case PROTOBUF_C_TYPE_MESSAGE:
        return parse_message(ps, f->descriptor, (ProtobufCMessage **)dst);
    case PROTOBUF_C_TYPE_STRING:
        if ((rc = parse_string(ps, &str, &slen)) != 0)
            return rc;
        *(char **)dst = str;
        return 0;
    case PROTOBUF_C_TYPE_BYTES:
        if ((rc = parse_string(ps, &str, &slen)) != 0)
            return rc;
        size_t bad = 0;
        rc = decode_base64(str, slen, dst, &bad);
        free(str);
        if (rc == -EINVAL) {
            char m[64];
            snprintf(m, sizeof(m), "illegal base64 data at input byte %zu", bad);
            return fail(ps, m);
        }
        return rc;
    case PROTOBUF_C_TYPE_BOOL:
        if (lit(ps, "true"))
            *(protobuf_c_boolean *)dst = 1;
        else if (lit(ps, "false"))
            *(protobuf_c_boolean *)dst = 0;
        else
            return fail(ps, "invalid bool");
        return 0;
    case PROTOBUF_C_TYPE_ENUM:
        if (*ps->p == '"') {
            if ((rc = parse_string(ps, &str, &slen)) != 0)
                return rc;
            const ProtobufCEnumValue *ev =
                protobuf_c_enum_descriptor_get_value_by_name(f->descriptor, str);
            free(str);
            if (!ev)
                return fail(ps, "unknown enum value");
            *(int *)dst = ev->value;
            return 0;
        }
        break;
    default:
        break;
    }
    /* numbers: bare or quoted */
    if (*ps->p == '"') {
        if ((rc = parse_string(ps, &str, &slen)) != 0)
            return rc;
        if (slen >= sizeof(tok)) {
            free(str);
            return fail(ps, "number too long");
        }
        memcpy(tok, str, slen + 1);
        free(str);
        if (!strchr("-0123456789", tok[0]) || !tok[0]) { /* Go: json.Unmarshal of the text */
            char m[64];
            if (tok[0])
                snprintf(m, sizeof(m), "invalid character '%c' looking for beginning of value",
                         tok[0]);
            else
                snprintf(m, sizeof(m), "unexpected end of JSON input");
            return fail(ps, m);
        }
    } else if ((rc = number_token(ps, tok, sizeof(tok))) != 0) {
        return rc;
    }
    int64_t s = 0;
    uint64_t u = 0;
    switch (f->type) {
    case PROTOBUF_C_TYPE_INT32:
    case PROTOBUF_C_TYPE_SINT32:
    case PROTOBUF_C_TYPE_SFIXED32:
    case PROTOBUF_C_TYPE_ENUM:
        if ((rc = parse_int(ps, tok, 1, &s, &u)) != 0)
            return rc;
        if (s < INT32_MIN || s > INT32_MAX)
            return fail(ps, "value out of range for int32");
        if (f->type == PROTOBUF_C_TYPE_ENUM)
            *(int *)dst = (int)s;
        else
            *(int32_t *)dst = (int32_t)s;
        return 0;
    case PROTOBUF_C_TYPE_UINT32:
    case PROTOBUF_C_TYPE_FIXED32:
        if ((rc = parse_int(ps, tok, 0, &s, &u)) != 0)
            return rc;
        if (u > UINT32_MAX)
            return fail(ps, "value out of range for uint32");
        *(uint32_t *)dst = (uint32_t)u;
        return 0;
    case PROTOBUF_C_TYPE_INT64:
    case PROTOBUF_C_TYPE_SINT64:
    case PROTOBUF_C_TYPE_SFIXED64:
        if ((rc = parse_int(ps, tok, 1, &s, &u)) != 0)
            return rc;
        *(int64_t *)dst = s;
        return 0;
    case PROTOBUF_C_TYPE_UINT64:
    case PROTOBUF_C_TYPE_FIXED64:
        if ((rc = parse_int(ps, tok, 0, &s, &u)) != 0)
            return rc;
        *(uint64_t *)dst = u;
        return 0;
    case PROTOBUF_C_TYPE_FLOAT:
    case PROTOBUF_C_TYPE_DOUBLE: {
        char *e;
        double v = strtod(tok, &e);
        if (*e)
            return fail(ps, "invalid number");
        if (f->type == PROTOBUF_C_TYPE_FLOAT)
            *(float *)dst = (float)v;
        else
            *(double *)dst = v;
        return 0;
    }
    default:
        return fail(ps, "unsupported field type");
    }
}

/* lowerCamelCase JSON name of a proto field name: "create_revision" -> "createRevision". */
static int name_matches(const char *proto, const char *key)
{
    if (strcmp(proto, key) == 0)
        return 1;
    const char *p = proto, *k = key;
    while (*p && *k) {
        if (*p == '_' && p[1]) {
            p++;
            if ((*p >= 'a' && *p <= 'z' ? *p - 32 : *p) != *k)
                return 0;
        } else if (*p != *k) {
            return 0;
        }
        p++, k++;
    }
    return *p == '\0' && *k == '\0';
}

static int parse_repeated(jparser *ps, const ProtobufCFieldDescriptor *f, char *base)
{
    size_t es = kv_pb_elem_size(f->type), n = 0, cap = 0;
    char *arr = NULL;
    int rc = 0;
    if (++ps->depth > KV_JSON_MAX_DEPTH)
        return fail(ps, "JSON nested too deeply");
    ps->p++; /* '[' */
    ws(ps);
    if (ps->p < ps->end && *ps->p == ']') {
        ps->p++;
        goto done;
    }
    for (;;) {
        if (n == cap) {
            size_t nc = cap ? cap * 2 : 4;
            char *na = realloc(arr, nc * es);
            if (!na) {
                rc = -ENOMEM;
                break;
            }
            arr = na;
            cap = nc;
        }
        memset(arr + n * es, 0, es);
        ws(ps);
        /* protobuf has no null element: a message element must be an object (protobuf-c
         * would follow a NULL element when it packs the request) */
        if (f->type == PROTOBUF_C_TYPE_MESSAGE && ps->end - ps->p >= 4 &&
            memcmp(ps->p, "null", 4) == 0) {
            *(char **)(base + f->offset) = arr;
            *(size_t *)(base + f->quantifier_offset) = n;
            return fail(ps, "null element in a repeated message field");
        }
        /* each element is stored right away so an error frees what was parsed */
        *(char **)(base + f->offset) = arr;
        *(size_t *)(base + f->quantifier_offset) = n;
        if ((rc = parse_field_value(ps, f, arr + n * es)) != 0) {
            /* a partly parsed element may hold memory: count it so it is freed */
            if (f->type == PROTOBUF_C_TYPE_STRING || f->type == PROTOBUF_C_TYPE_BYTES ||
                f->type == PROTOBUF_C_TYPE_MESSAGE)
                *(size_t *)(base + f->quantifier_offset) = n + 1;
            return rc;
        }
        n++;
        *(size_t *)(base + f->quantifier_offset) = n;
        ws(ps);
        if (lit(ps, ","))
            continue;
        if (lit(ps, "]"))
            break;
        return fail(ps, "expected ',' or ']'");
    }
    if (rc != 0) {
        return rc;
    }
done:
    ps->depth--;
    *(char **)(base + f->offset) = arr;
    *(size_t *)(base + f->quantifier_offset) = n;
    return 0;
}

static int parse_message(jparser *ps, const ProtobufCMessageDescriptor *d, ProtobufCMessage **out)
{
    ws(ps);
    if (lit(ps, "null")) {
        *out = NULL;
        return 0;
    }
    if (ps->p >= ps->end || *ps->p != '{') {
        if (ps->depth == 0 && ps->p < ps->end) { /* Go's message for the top-level value */
            const char *t = *ps->p == '['                      ? "array"
                            : *ps->p == '"'                    ? "string"
                            : (*ps->p == 't' || *ps->p == 'f') ? "bool"
                                                               : "number";
            char m[96];
            snprintf(m, sizeof(m),
                     "json: cannot unmarshal %s into Go value of type map[string]json.RawMessage",
                     t);
            return fail(ps, m);
        }
        return fail(ps, "expected an object");
    }
    if (++ps->depth > KV_JSON_MAX_DEPTH)
        return fail(ps, "JSON nested too deeply");
    ps->p++;
    ProtobufCMessage *m = malloc(d->sizeof_message);
    if (!m)
        return -ENOMEM;
    protobuf_c_message_init(d, m);
    *out = m; /* the caller frees it on error */
    char *base = (char *)m;
    ws(ps);
    if (lit(ps, "}")) {
        ps->depth--;
        return 0;
    }
    for (;;) {
        char *key;
        size_t kn;
        int rc;
        ws(ps);
        if ((rc = parse_string(ps, &key, &kn)) != 0)
            return rc;
        const ProtobufCFieldDescriptor *f = NULL;
        for (unsigned i = 0; i < d->n_fields && !f; i++)
            if (name_matches(d->fields[i].name, key))
                f = &d->fields[i];
        free(key);
        ws(ps);
        if (!lit(ps, ":"))
            return fail(ps, "expected ':'");
        ws(ps);
        if (!f) {
            if ((rc = skip_value(ps)) != 0) /* unknown fields are ignored */
                return rc;
        } else if (lit(ps, "null")) {
            /* null: the field keeps its default */
        } else {
            if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) {
                uint32_t *c = (uint32_t *)(base + f->quantifier_offset);
                for (unsigned i = 0; *c && i < d->n_fields; i++)
                    if (d->fields[i].id == *c)
                        clear_field(&d->fields[i], base);
                *c = 0;
            } else {
                clear_field(f, base);
            }
            if (f->label == PROTOBUF_C_LABEL_REPEATED) {
                if (ps->p >= ps->end || *ps->p != '[')
                    return fail(ps, "expected an array");
                rc = parse_repeated(ps, f, base);
            } else {
                rc = parse_field_value(ps, f, base + f->offset);
                if (rc == 0 && (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF))
                    *(uint32_t *)(base + f->quantifier_offset) = f->id;
                else if (rc == 0 && f->label == PROTOBUF_C_LABEL_OPTIONAL &&
                         f->type != PROTOBUF_C_TYPE_STRING && f->type != PROTOBUF_C_TYPE_MESSAGE)
                    *(protobuf_c_boolean *)(base + f->quantifier_offset) = 1;
                else if (rc != 0 && (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF))
                    *(uint32_t *)(base + f->quantifier_offset) = f->id; /* freed with m */
            }
            if (rc != 0)
                return rc;
        }
        ws(ps);
        if (lit(ps, ","))
            continue;
        if (lit(ps, "}"))
            break;
        return fail(ps, "expected ',' or '}'");
    }
    ps->depth--;
    return 0;
}

int kv_json_to_pb(const ProtobufCMessageDescriptor *desc, const char *in, size_t len,
                  ProtobufCMessage **out, char *err, size_t errlen)
{
    jparser ps = {in, in + len, 0, err, errlen};
    if (err && errlen)
        err[0] = '\0';
    *out = NULL;
    ws(&ps);
    ProtobufCMessage *m = NULL;
    int rc;
    if (ps.p == ps.end) { /* an empty body is the empty request (grpc-gateway: io.EOF) */
        m = malloc(desc->sizeof_message);
        if (!m)
            return -ENOMEM;
        protobuf_c_message_init(desc, m);
        *out = m;
        return 0;
    }
    rc = parse_message(&ps, desc, &m);
    if (rc == 0) {
        ws(&ps);
        if (ps.p != ps.end)
            rc = fail(&ps, "invalid character after top-level value");
    }
    if (rc == 0 && m == NULL) { /* "null" */
        m = malloc(desc->sizeof_message);
        if (!m)
            return -ENOMEM;
        protobuf_c_message_init(desc, m);
    }
    if (rc != 0) {
        if (m)
            protobuf_c_message_free_unpacked(m, NULL);
        return rc;
    }
    *out = m;
    return 0;
}

int kv_json_to_pb_next(const ProtobufCMessageDescriptor *desc, const char *in, size_t len,
                       ProtobufCMessage **out, size_t *used, char *err, size_t errlen)
{
    jparser ps = {in, in + len, 0, err, errlen};
    if (err && errlen)
        err[0] = '\0';
    *out = NULL;
    ws(&ps);
    if (ps.p == ps.end) {
        *used = len;
        return 0;
    }
    ProtobufCMessage *m = NULL;
    int rc = parse_message(&ps, desc, &m);
    if (rc == 0 && m == NULL) { /* "null" */
        m = malloc(desc->sizeof_message);
        if (!m)
            return -ENOMEM;
        protobuf_c_message_init(desc, m);
    }
    if (rc != 0) {
        if (m)
            protobuf_c_message_free_unpacked(m, NULL);
        return rc;
    }
    *out = m;
    *used = (size_t)(ps.p - in);
    return 0;
}
