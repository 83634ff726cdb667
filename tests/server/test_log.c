/*
 * server/log: level of a line, the zap-style JSON encoding (escapes,
 * invalid UTF-8, timestamps), the sink's filtering, partial and overlong lines, and the
 * stdio cookie stream. The sink writes into a pipe read back here.
 */
#include "log/log.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A sink whose output is a pipe (non-blocking read end). */
typedef struct piped {
    kv_log_sink *sink;
    int rd;
} piped;

static piped piped_open(kv_log_format f, kv_log_level min)
{
    piped p;
    int fds[2];
    cr_assert_eq(pipe(fds), 0);
    fcntl(fds[0], F_SETFL, O_NONBLOCK);
    fcntl(fds[1], F_SETPIPE_SZ, 1 << 20);
    p.sink = malloc(sizeof(*p.sink));
    cr_assert_not_null(p.sink);
    char err[256];
    cr_assert_eq(kv_log_sink_open(p.sink, f, min, "stderr", err, sizeof(err)), 0);
    p.sink->fd = fds[1];
    p.sink->own_fd = 1; /* closed by kv_log_sink_close() */
    p.rd = fds[0];
    return p;
}

/* Everything written so far (caller frees). */
static char *drain(piped *p)
{
    size_t cap = 1 << 20, len = 0;
    char *buf = malloc(cap + 1);
    cr_assert_not_null(buf);
    for (;;) {
        ssize_t n = read(p->rd, buf + len, cap - len);
        if (n <= 0)
            break;
        len += (size_t)n;
    }
    buf[len] = '\0';
    return buf;
}

static void piped_close(piped *p)
{
    kv_log_sink_close(p->sink);
    close(p->rd);
    free(p->sink);
}

Test(log, levels_parse_and_name)
{
    kv_log_level l;
    cr_assert_eq(kv_log_level_parse("debug", &l), 0);
    cr_assert_eq(l, KV_LOG_DEBUG);
    cr_assert_eq(kv_log_level_parse("warn", &l), 0);
    cr_assert_eq(l, KV_LOG_WARN);
    cr_assert_eq(kv_log_level_parse("error", &l), 0);
    cr_assert_eq(l, KV_LOG_ERROR);
    cr_assert_eq(kv_log_level_parse("panic", &l), 0); /* etcd/zap names */
    cr_assert_eq(l, KV_LOG_ERROR);
    cr_assert_eq(kv_log_level_parse("verbose", &l), -EINVAL);
    cr_assert_eq(kv_log_level_parse("", &l), -EINVAL);
    cr_assert_str_eq(kv_log_level_name(KV_LOG_WARN), "warn");
    cr_assert_str_eq(kv_log_level_name(KV_LOG_FATAL), "fatal");
    kv_log_format f;
    cr_assert_eq(kv_log_format_parse("json", &f), 0);
    cr_assert_eq(f, KV_LOG_JSON);
    cr_assert_eq(kv_log_format_parse("zap", &f), -EINVAL);
}

static void check_class(const char *line, kv_log_level want, const char *msg)
{
    size_t off = 99;
    kv_log_level l = kv_log_classify(line, strlen(line), &off);
    cr_expect_eq(l, want, "level of \"%s\": %d, want %d", line, l, want);
    cr_expect_str_eq(line + off, msg, "message of \"%s\"", line);
}

Test(log, level_from_the_line_prefix)
{
    check_class("kvd: ready to serve client requests", KV_LOG_INFO,
                "ready to serve client requests");
    check_class("kvd: debug: x", KV_LOG_DEBUG, "x");
    check_class("kvd: warning: raft inbox full", KV_LOG_WARN, "raft inbox full");
    check_class("kvd: error: snapshot failed: EIO", KV_LOG_ERROR, "snapshot failed: EIO");
    check_class("kvd: fatal: cannot reopen", KV_LOG_FATAL, "cannot reopen");
    /* phrases tests and operators match stay in the message */
    check_class("kvd: refusing to start: bad", KV_LOG_FATAL, "refusing to start: bad");
    check_class("kvd: startup failed: EIO", KV_LOG_FATAL, "startup failed: EIO");
    check_class("kvd: CORRUPT: record", KV_LOG_ERROR, "CORRUPT: record");
    /* not kvd's: info, whole line */
    check_class("mdb.c:123: assertion", KV_LOG_INFO, "mdb.c:123: assertion");
    check_class("warning: x", KV_LOG_INFO, "warning: x");
    check_class("kvd:", KV_LOG_INFO, "kvd:");
    check_class("kvd: warning:x", KV_LOG_INFO, "warning:x"); /* the word needs ": " */
    check_class("", KV_LOG_INFO, "");
}

static char *enc(kv_log_level lv, const char *msg, size_t len, size_t truncated)
{
    static char out[KV_LOG_JSON_MAX];
    struct timespec ts = {.tv_sec = 1764558245, .tv_nsec = 678999999}; /* 2025-12-01 03:04:05 */
    ssize_t n = kv_log_json_encode(lv, &ts, msg, len, truncated, out, sizeof(out) - 1);
    cr_assert_gt(n, 0);
    out[n] = '\0';
    cr_assert_eq(strlen(out), (size_t)n);
    return out;
}

Test(log, json_object_is_zap_shaped)
{
    cr_assert_str_eq(enc(KV_LOG_WARN, "raft inbox full", 15, 0),
                     "{\"level\":\"warn\",\"ts\":\"2025-12-01T03:04:05.678Z\",\"caller\":\"kvd\","
                     "\"msg\":\"raft inbox full\"}\n");
    cr_assert_str_eq(enc(KV_LOG_INFO, "", 0, 5),
                     "{\"level\":\"info\",\"ts\":\"2025-12-01T03:04:05.678Z\",\"caller\":\"kvd\","
                     "\"msg\":\"\",\"truncated\":5}\n");
}

static const char *msg_of(const char *obj)
{
    const char *m = strstr(obj, "\"msg\":");
    cr_assert_not_null(m, "%s", obj);
    return m + 6;
}

Test(log, json_escapes_quotes_controls_and_invalid_utf8)
{
    const char in[] = "a\"b\\c\td\re\x01\x1f/\x7f";
    cr_assert_str_eq(msg_of(enc(KV_LOG_INFO, in, sizeof(in) - 1, 0)),
                     "\"a\\\"b\\\\c\\td\\re\\u0001\\u001f/\x7f\"}\n");
    /* valid UTF-8 passes through: 2, 3 and 4 byte sequences */
    const char utf[] = "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80";
    cr_assert_str_eq(msg_of(enc(KV_LOG_INFO, utf, sizeof(utf) - 1, 0)),
                     "\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\"}\n");
    /* stray continuation, overlong, surrogate, > U+10FFFF, cut sequence, 0xff */
    const char bad[] = "\x80|\xc0\xaf|\xed\xa0\x80|\xf4\x90\x80\x80|\xe2\x82|\xff";
    cr_assert_str_eq(msg_of(enc(KV_LOG_INFO, bad, sizeof(bad) - 1, 0)),
                     "\"\\ufffd|\\ufffd\\ufffd|\\ufffd\\ufffd\\ufffd|\\ufffd\\ufffd\\ufffd\\ufffd|"
                     "\\ufffd\\ufffd|\\ufffd\"}\n");
    /* an embedded NUL is a control character, not the end */
    cr_assert_str_eq(msg_of(enc(KV_LOG_INFO, "x\0y", 3, 0)), "\"x\\u0000y\"}\n");
}

Test(log, json_encode_reports_a_short_buffer)
{
    char out[40];
    struct timespec ts = {0};
    cr_assert_eq(kv_log_json_encode(KV_LOG_INFO, &ts, "hello", 5, 0, out, sizeof(out)), -ENOSPC);
    /* the worst case fits KV_LOG_JSON_MAX */
    static char worst[KV_LOG_LINE_MAX];
    memset(worst, 0x01, sizeof(worst));
    static char big[KV_LOG_JSON_MAX];
    cr_assert_gt(
        kv_log_json_encode(KV_LOG_FATAL, &ts, worst, sizeof(worst), 123456789, big, sizeof(big)),
        0);
}

Test(log, json_sink_filters_and_strips_the_prefix)
{
    piped p = piped_open(KV_LOG_JSON, KV_LOG_WARN);
    const char in[] = "kvd: ready\nkvd: warning: inbox full\nkvd: debug: noise\n"
                      "kvd: error: \"quoted\"\nkvd: refusing to start: corrupt\n\n";
    kv_log_sink_write(p.sink, in, sizeof(in) - 1);
    char *out = drain(&p);
    char *l1 = out, *l2 = strchr(l1, '\n') + 1, *l3 = strchr(l2, '\n') + 1;
    cr_assert_eq(strchr(l3, '\n')[1], '\0', "exactly three lines:\n%s", out);
    cr_expect(strncmp(l1, "{\"level\":\"warn\",\"ts\":\"", 22) == 0, "%s", l1);
    cr_expect(strstr(l1, "\"caller\":\"kvd\",\"msg\":\"inbox full\"}\n") != NULL, "%s", l1);
    cr_expect(strncmp(l2, "{\"level\":\"error\"", 16) == 0, "%s", l2);
    cr_expect(strstr(l2, "\"msg\":\"\\\"quoted\\\"\"}") != NULL, "%s", l2);
    cr_expect(strncmp(l3, "{\"level\":\"fatal\"", 16) == 0, "%s", l3);
    cr_expect(strstr(l3, "\"msg\":\"refusing to start: corrupt\"}") != NULL, "%s", l3);
    /* the timestamp: RFC 3339, milliseconds, UTC */
    const char *ts = l1 + 22;
    cr_expect(ts[4] == '-' && ts[7] == '-' && ts[10] == 'T' && ts[13] == ':' && ts[16] == ':' &&
                  ts[19] == '.' && ts[23] == 'Z' && ts[24] == '"',
              "ts %.30s", ts);
    free(out);
    piped_close(&p);
}

Test(log, partial_lines_are_joined_and_flushed)
{
    piped p = piped_open(KV_LOG_JSON, KV_LOG_DEBUG);
    kv_log_sink_write(p.sink, "kvd: war", 8);
    kv_log_sink_write(p.sink, "ning: a", 7);
    char *out = drain(&p);
    cr_assert_str_eq(out, "", "a partial line is held");
    free(out);
    kv_log_sink_write(p.sink, "b\nkvd: c", 8);
    out = drain(&p);
    cr_expect(strstr(out, "\"level\":\"warn\"") && strstr(out, "\"msg\":\"ab\"}\n"), "%s", out);
    cr_expect(strstr(out, "\"msg\":\"c\"") == NULL, "%s", out);
    free(out);
    kv_log_sink_flush(p.sink); /* at exit: the rest is a line of its own */
    out = drain(&p);
    cr_expect(strstr(out, "\"level\":\"info\"") && strstr(out, "\"msg\":\"c\"}\n"), "%s", out);
    free(out);
    piped_close(&p);
}

Test(log, overlong_json_lines_are_bounded)
{
    piped p = piped_open(KV_LOG_JSON, KV_LOG_DEBUG);
    size_t n = 3 * KV_LOG_LINE_MAX + 7;
    char *big = malloc(n + 1);
    memcpy(big, "kvd: error: ", 12);
    memset(big + 12, 'x', n - 12);
    /* a 2-byte character straddling the cut: not split into two invalid bytes */
    big[KV_LOG_LINE_MAX - 1] = '\xc3';
    big[KV_LOG_LINE_MAX] = '\xa9';
    big[n] = '\n';
    for (size_t off = 0; off <= n; off += 1000) /* in pieces, as stdio hands them over */
        kv_log_sink_write(p.sink, big + off, (n + 1 - off) < 1000 ? n + 1 - off : 1000);
    kv_log_sink_write(p.sink, "kvd: next\n", 10);
    char *out = drain(&p);
    char *nl = strchr(out, '\n');
    cr_assert_not_null(nl);
    size_t kept = KV_LOG_LINE_MAX - 1 - 12; /* the x's before the cut character */
    char want[64];
    snprintf(want, sizeof(want), "\",\"truncated\":%zu}\n", n - 12 - kept);
    cr_expect(strncmp(nl - strlen(want) + 1, want, strlen(want)) == 0, "tail %.60s", nl - 60);
    cr_expect(strstr(out, "\\ufffd") == NULL, "the cut made invalid UTF-8");
    cr_expect_lt((size_t)(nl - out), (size_t)KV_LOG_LINE_MAX + 200);
    cr_expect(strstr(nl + 1, "\"msg\":\"next\"}\n") != NULL, "the next line: %s", nl + 1);
    free(out);
    free(big);
    piped_close(&p);
}

Test(log, text_passes_lines_unchanged_and_filters)
{
    piped p = piped_open(KV_LOG_TEXT, KV_LOG_INFO);
    const char in[] = "kvd: debug: hidden\nkvd: ready\nkvd: warning: w\nplain\n";
    kv_log_sink_write(p.sink, in, sizeof(in) - 1);
    char *out = drain(&p);
    cr_assert_str_eq(out, "kvd: ready\nkvd: warning: w\nplain\n");
    free(out);
    /* overlong text lines are passed through whole, or dropped whole */
    size_t n = 2 * KV_LOG_LINE_MAX;
    char *big = malloc(n + 1);
    memset(big, 'y', n);
    memcpy(big, "kvd: debug: ", 12);
    big[n] = '\n';
    kv_log_sink_write(p.sink, big, n + 1);
    kv_log_sink_write(p.sink, "kvd: a\n", 7);
    out = drain(&p);
    cr_assert_str_eq(out, "kvd: a\n");
    free(out);
    memcpy(big, "kvd: error: ", 12);
    kv_log_sink_write(p.sink, big, n / 2);
    kv_log_sink_write(p.sink, big + n / 2, n / 2 + 1);
    out = drain(&p);
    cr_assert_eq(strlen(out), n + 1);
    cr_assert(memcmp(out, big, n + 1) == 0);
    free(out);
    free(big);
    piped_close(&p);
}

Test(log, the_stdio_stream_writes_line_by_line)
{
    piped p = piped_open(KV_LOG_JSON, KV_LOG_INFO);
    FILE *f = kv_log_stream(p.sink);
    cr_assert_not_null(f);
    fprintf(f, "kvd: warning: %s %d", "disk", 5);
    char *out = drain(&p);
    cr_assert_str_eq(out, "");
    free(out);
    fprintf(f, "%%\nkvd: tail");
    out = drain(&p); /* line buffered: the complete line is out without fflush */
    cr_expect(strstr(out, "\"msg\":\"disk 5%\"}\n") != NULL, "%s", out);
    free(out);
    int rd = p.rd;
    p.sink->own_fd = 1;
    cr_assert_eq(fclose(f), 0); /* flushes the partial line and closes the sink */
    out = drain(&p);
    cr_expect(strstr(out, "\"msg\":\"tail\"}\n") != NULL, "%s", out);
    free(out);
    close(rd);
    free(p.sink);
}

Test(log, outputs_stdout_and_files)
{
    kv_log_sink *s = malloc(sizeof(*s));
    char err[256];
    cr_assert_eq(kv_log_sink_open(s, KV_LOG_TEXT, KV_LOG_INFO, "stdout", err, sizeof(err)), 0);
    cr_assert_eq(s->fd, 1);
    kv_log_sink_close(s);
    char path[] = "/tmp/kvd-log-XXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    close(fd);
    cr_assert_eq(kv_log_sink_open(s, KV_LOG_TEXT, KV_LOG_INFO, path, err, sizeof(err)), 0);
    kv_log_sink_write(s, "kvd: one\n", 9);
    kv_log_sink_close(s);
    cr_assert_eq(kv_log_sink_open(s, KV_LOG_TEXT, KV_LOG_INFO, path, err, sizeof(err)), 0);
    kv_log_sink_write(s, "kvd: two\n", 9); /* appended */
    kv_log_sink_close(s);
    FILE *f = fopen(path, "r");
    char buf[64] = {0};
    cr_assert_eq(fread(buf, 1, sizeof(buf) - 1, f), 18);
    fclose(f);
    cr_expect_str_eq(buf, "kvd: one\nkvd: two\n");
    unlink(path);
    int rc =
        kv_log_sink_open(s, KV_LOG_TEXT, KV_LOG_INFO, "/nonexistent/dir/log", err, sizeof(err));
    cr_expect_eq(rc, -ENOENT);
    cr_expect(strstr(err, "--log-outputs") != NULL, "%s", err);
    free(s);
}
