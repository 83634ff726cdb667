/*
 * json_pb.h - a small JSON parser/writer and the protobuf <-> JSON mapping of grpc-gateway v1
 * as etcd 3.4 configures it (jsonpb with OrigName: field names as in the .proto, e.g.
 * "create_revision"; 64-bit integers as JSON strings; bytes as standard base64; enums by name;
 * fields with their zero value omitted). Driven by protobuf-c descriptors, so it covers every
 * message of proto/.
 *
 * Bounds: the parser refuses input nested deeper than KV_JSON_MAX_DEPTH; the caller bounds the
 * input length. Input field names are matched against the proto name or its lowerCamelCase
 * JSON name; unknown fields are ignored (grpc-gateway v1 default); 64-bit and 32-bit integers
 * are accepted as numbers or strings; bytes as standard or URL-safe base64, padded or not.
 *
 * Pure functions, no threads, no globals. Errors: negative errno (-EINVAL malformed input,
 * -ENOMEM), with a message in err when given.
 */
#ifndef KV_JSON_PB_H
#define KV_JSON_PB_H

#include <protobuf-c/protobuf-c.h>

#include <stddef.h>
#include <stdint.h>

#define KV_JSON_MAX_DEPTH 64

/* A growable output buffer. */
typedef struct kv_jbuf {
    char *p;
    size_t len, cap;
    int oom; /* an append failed: the content is incomplete */
} kv_jbuf;

void kv_jbuf_put(kv_jbuf *b, const char *s, size_t n);
void kv_jbuf_puts(kv_jbuf *b, const char *s);
/* A JSON string literal (quotes and escapes added). */
void kv_jbuf_str(kv_jbuf *b, const char *s, size_t n);
void kv_jbuf_free(kv_jbuf *b);

/* Parses JSON text (in, len) into a new protobuf message of type desc; an empty or all-white
 * input gives the empty message. *out is freed with protobuf_c_message_free_unpacked(*out,
 * NULL). Returns 0, -EINVAL (err says why) or -ENOMEM. */
int kv_json_to_pb(const ProtobufCMessageDescriptor *desc, const char *in, size_t len,
                  ProtobufCMessage **out, char *err, size_t errlen);

/* The next JSON value of a stream of them (grpc-gateway decodes a unary body's first value
 * and ignores the rest; a streaming body is a sequence of request objects). *used is the
 * bytes consumed; *out NULL with 0 means only white space was left. Errors as above. */
int kv_json_to_pb_next(const ProtobufCMessageDescriptor *desc, const char *in, size_t len,
                       ProtobufCMessage **out, size_t *used, char *err, size_t errlen);

/* Appends the JSON form of m to b. */
void kv_pb_to_json(const ProtobufCMessage *m, kv_jbuf *b);

#endif
