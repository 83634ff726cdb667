/*
 * log: kvd's log lines, leveled and optionally structured.
 *
 * Call sites stay plain `fprintf(stderr, "kvd: ...\n")`. The level comes from the line's
 * prefix (kv_log_classify()):
 *   "kvd: debug: ..."    debug
 *   "kvd: ..."           info (any other kvd line, and lines that are not kvd's)
 *   "kvd: warning: ..."  warn
 *   "kvd: error: ..."    error
 *   "kvd: fatal: ..."    fatal (kvd exits or stops serving)
 * and, kept in the message because tests and operators match them, "kvd: refusing to
 * start: ..." and "kvd: startup failed: ..." are fatal, "kvd: CORRUPT: ..." is an error.
 *
 * main() owns a kv_log_sink and, with kv_log_install(), replaces the process's stderr stream
 * with a stdio cookie stream (fopencookie) feeding it: each complete line is filtered by
 * --log-level and written, unchanged (--log-format text) or as one zap-style JSON object
 * (--log-format json, as etcd's zap logger):
 *   {"level":"info","ts":"2026-12-01T03:04:05.678Z","caller":"kvd","msg":"..."}
 * to --log-outputs (stderr, stdout or a file). A line is written with one write(2).
 *
 * Threads: the sink is driven through the stdio stream, whose lock serialises writers; the
 * kv_log_sink_* functions themselves are not thread-safe. No globals: the sink's memory is
 * the caller's and must outlive the stream (main() keeps it static, as exit() flushes
 * stderr after main() returns).
 */
#ifndef KV_LOG_H
#define KV_LOG_H

#include <stddef.h>
#include <stdio.h>
#include <sys/types.h>
#include <time.h>

typedef enum kv_log_level {
    KV_LOG_DEBUG = 0,
    KV_LOG_INFO,
    KV_LOG_WARN,
    KV_LOG_ERROR,
    KV_LOG_FATAL,
} kv_log_level;

typedef enum kv_log_format {
    KV_LOG_TEXT = 0,
    KV_LOG_JSON,
} kv_log_format;

/* Longest line kept whole: beyond it, text lines are passed through in pieces and JSON
 * messages are cut (the object then carries "truncated":<bytes dropped>). */
#define KV_LOG_LINE_MAX 8192
/* Room for one encoded JSON object of a KV_LOG_LINE_MAX message (\uXXXX = 6 bytes/byte). */
#define KV_LOG_JSON_MAX (6 * KV_LOG_LINE_MAX + 256)

/* "debug", "info", "warn" (also "warning"), "error", and zap's "dpanic", "panic" (as error)
 * and "fatal", as etcd's --log-level accepts. 0 or -EINVAL. */
int kv_log_level_parse(const char *s, kv_log_level *out);
/* "text" or "json". 0 or -EINVAL. */
int kv_log_format_parse(const char *s, kv_log_format *out);
/* zap's level name: "debug", "info", "warn", "error", "fatal". */
const char *kv_log_level_name(kv_log_level l);

/* The level of line[0..len) (no newline); *msg_off receives where the message starts once
 * "kvd: " and a level word are skipped. */
kv_log_level kv_log_classify(const char *line, size_t len, size_t *msg_off);

/* Encodes one JSON object plus '\n' into out (cap >= KV_LOG_JSON_MAX for any msg of at
 * most KV_LOG_LINE_MAX bytes). msg is escaped as a JSON string: '"', '\\', control
 * characters, and bytes that are not valid UTF-8 (each becomes U+FFFD). truncated > 0 adds
 * "truncated":<truncated>. Returns the length, or -ENOSPC if cap is too small. */
ssize_t kv_log_json_encode(kv_log_level level, const struct timespec *ts, const char *msg,
                           size_t len, size_t truncated, char *out, size_t cap);

typedef struct kv_log_sink {
    kv_log_format format;
    kv_log_level min_level; /* lines below it are dropped */
    int fd;                 /* where lines go */
    int own_fd;             /* fd was opened by kv_log_sink_open() (a file) */
    /* the current line */
    char line[KV_LOG_LINE_MAX];
    size_t len;
    size_t dropped; /* bytes of the current line not kept (JSON) */
    int passing;    /* text: the line overflowed; 1 = its rest is written, 0 = dropped */
    int overflowed; /* the current line overflowed line[] */
    char out[KV_LOG_JSON_MAX];
} kv_log_sink;

/* Sets up sink for format/min_level writing to output: "stderr" or "default" (fd 2),
 * "stdout" (fd 1), or a file path (created 0644, appended). err gets a message on error.
 * Returns 0 or negative errno. */
int kv_log_sink_open(kv_log_sink *sink, kv_log_format format, kv_log_level min_level,
                     const char *output, char *err, size_t errlen);
/* Feeds bytes; complete lines are emitted. Never fails (output errors are dropped). */
void kv_log_sink_write(kv_log_sink *sink, const char *buf, size_t len);
/* Emits a pending partial line as a line of its own. */
void kv_log_sink_flush(kv_log_sink *sink);
/* Flushes and closes an owned fd. */
void kv_log_sink_close(kv_log_sink *sink);

/* A line-buffered stdio stream writing into sink (fopencookie); closing it flushes and
 * closes the sink. NULL on error (errno set). */
FILE *kv_log_stream(kv_log_sink *sink);

/* main(): replaces stderr by kv_log_stream(sink). The previous stderr FILE is left open
 * (fd 2 stays valid for code that writes to it directly). 0 or negative errno. */
int kv_log_install(kv_log_sink *sink);

#endif
