/*
 * kvctl output helpers: a growable text buffer, Go encoding/json-compatible string/bytes
 * encoding, a generic protobuf-c -> JSON marshaller that reproduces what Go's json.Marshal
 * prints for etcd's gogo-generated structs (field names from the proto, omitempty everywhere,
 * []byte as base64, 64-bit integers as numbers), and Go formatting helpers
 * (humanize.Bytes, time.Duration.String).
 *
 * Ownership: a kvctl_buf owns its memory; release it with kvctl_buf_free(). On allocation
 * failure the buffer is marked failed and further appends are ignored (kvctl_buf_ok() reports).
 */
#ifndef KVCTL_OUT_H
#define KVCTL_OUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <protobuf-c/protobuf-c.h>

struct kvctl_buf {
    char *p;
    size_t len;
    size_t cap;
    bool failed;
};

void kvctl_buf_putn(struct kvctl_buf *b, const void *s, size_t n);
void kvctl_buf_puts(struct kvctl_buf *b, const char *s);
void kvctl_buf_printf(struct kvctl_buf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
bool kvctl_buf_ok(const struct kvctl_buf *b);
/* NUL-terminated view of the contents ("" when empty). */
const char *kvctl_buf_str(struct kvctl_buf *b);
void kvctl_buf_reset(struct kvctl_buf *b);
void kvctl_buf_free(struct kvctl_buf *b);
/* Writes the contents to `f`; returns 0 or -EIO. */
int kvctl_buf_write(const struct kvctl_buf *b, FILE *f);

/* A JSON string literal for s[0..n), escaped as Go's encoding/json does (HTML-safe). */
void kvctl_json_string(struct kvctl_buf *b, const uint8_t *s, size_t n);
/* A JSON string holding base64 (std, padded) of s[0..n), as Go encodes []byte. */
void kvctl_json_bytes(struct kvctl_buf *b, const uint8_t *s, size_t n);
/* Go's %q (strconv.Quote) of s[0..n): printable UTF-8 kept, escapes for the rest. */
void kvctl_go_quote(struct kvctl_buf *b, const uint8_t *s, size_t n);
/* The whole message as a JSON object. */
void kvctl_json_message(struct kvctl_buf *b, const ProtobufCMessage *m);
/* The message's non-empty fields as `"name":value` pairs, comma separated, no braces; *first
 * tracks whether a comma is needed (Go's inlining of an embedded *ResponseHeader). */
void kvctl_json_fields(struct kvctl_buf *b, const ProtobufCMessage *m, bool *first);

/* github.com/dustin/go-humanize Bytes(): "20 kB", "1.5 MB", "9 B". */
void kvctl_humanize_bytes(char *buf, size_t len, uint64_t n);
/* Go's time.Duration(ns).String(): "1.2ms", "3.187973ms", "5.000416377s", "850µs". */
void kvctl_go_duration(char *buf, size_t len, int64_t ns);

#endif
