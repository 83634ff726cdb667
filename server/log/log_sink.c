/*
 * log_sink: splits the bytes written to kvd's stderr into lines, filters them by level and
 * writes them as text or JSON (log.h); the stdio cookie stream that feeds it.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "log/log.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int kv_log_sink_open(kv_log_sink *sink, kv_log_format format, kv_log_level min_level,
                     const char *output, char *err, size_t errlen)
{
    memset(sink, 0, sizeof(*sink));
    sink->format = format;
    sink->min_level = min_level;
    if (output == NULL || output[0] == '\0' || strcmp(output, "stderr") == 0 ||
        strcmp(output, "default") == 0) {
        sink->fd = STDERR_FILENO;
    } else if (strcmp(output, "stdout") == 0) {
        sink->fd = STDOUT_FILENO;
    } else {
        int fd = open(output, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
        if (fd < 0) {
            int e = errno;
            snprintf(err, errlen, "--log-outputs: cannot open %s: %s", output, strerror(e));
            return -e;
        }
        sink->fd = fd;
        sink->own_fd = 1;
    }
    return 0;
}

static void write_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return; /* nowhere to report a failing log output */
        p += w;
        n -= (size_t)w;
    }
}

/* Bytes at the end of line[0..len) that start a UTF-8 sequence cut off by truncation. */
static size_t cut_tail(const char *line, size_t len)
{
    for (size_t back = 1; back <= 3 && back <= len; back++) {
        unsigned char c = (unsigned char)line[len - back];
        if ((c & 0xc0) == 0x80)
            continue; /* continuation byte: look further back */
        size_t need = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc0 ? 2 : 1;
        return need > back ? back : 0;
    }
    return 0;
}

/* Emits line[0..len) (no newline), which lost `dropped` bytes to truncation. */
static void emit(kv_log_sink *s, int partial)
{
    size_t off;
    kv_log_level lv = kv_log_classify(s->line, s->len, &off);
    if (lv < s->min_level)
        return;
    if (s->format == KV_LOG_TEXT) {
        memcpy(s->out, s->line, s->len);
        size_t n = s->len;
        if (!partial)
            s->out[n++] = '\n';
        write_all(s->fd, s->out, n);
        return;
    }
    if (s->len == 0 && s->dropped == 0)
        return; /* blank line */
    size_t len = s->len, dropped = s->dropped;
    if (dropped > 0) {
        size_t cut = cut_tail(s->line, len);
        len -= cut;
        dropped += cut;
    }
    if (off > len)
        off = len;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ssize_t n =
        kv_log_json_encode(lv, &ts, s->line + off, len - off, dropped, s->out, sizeof(s->out));
    if (n > 0)
        write_all(s->fd, s->out, (size_t)n);
}

static void reset(kv_log_sink *s)
{
    s->len = 0;
    s->dropped = 0;
    s->overflowed = 0;
    s->passing = 0;
}

void kv_log_sink_write(kv_log_sink *s, const char *buf, size_t len)
{
    while (len > 0) {
        const char *nl = memchr(buf, '\n', len);
        size_t chunk = nl ? (size_t)(nl - buf) : len;
        if (s->overflowed && s->format == KV_LOG_TEXT) {
            /* the line's start was written (or dropped): stream the rest the same way */
            if (s->passing)
                write_all(s->fd, buf, nl ? chunk + 1 : chunk);
        } else {
            size_t room = sizeof(s->line) - s->len;
            size_t keep = chunk < room ? chunk : room;
            memcpy(s->line + s->len, buf, keep);
            s->len += keep;
            if (keep < chunk) {
                if (s->format == KV_LOG_TEXT) {
                    /* pass the line through in pieces rather than cut it */
                    size_t off;
                    s->passing = kv_log_classify(s->line, s->len, &off) >= s->min_level;
                    if (s->passing) {
                        write_all(s->fd, s->line, s->len);
                        write_all(s->fd, buf + keep, nl ? chunk - keep + 1 : chunk - keep);
                    }
                    s->len = 0;
                } else {
                    s->dropped += chunk - keep;
                }
                s->overflowed = 1;
            }
        }
        if (!nl)
            return;
        if (!(s->overflowed && s->format == KV_LOG_TEXT))
            emit(s, 0);
        reset(s);
        buf = nl + 1;
        len -= chunk + 1;
    }
}

void kv_log_sink_flush(kv_log_sink *s)
{
    if (s->overflowed && s->format == KV_LOG_TEXT) {
        reset(s);
        return; /* already streamed */
    }
    if (s->len > 0 || s->dropped > 0)
        emit(s, 1);
    reset(s);
}

void kv_log_sink_close(kv_log_sink *s)
{
    kv_log_sink_flush(s);
    if (s->own_fd && s->fd >= 0)
        close(s->fd);
    s->fd = -1;
    s->own_fd = 0;
}

static ssize_t cookie_write(void *c, const char *buf, size_t size)
{
    kv_log_sink_write(c, buf, size);
    return (ssize_t)size;
}

static int cookie_close(void *c)
{
    kv_log_sink_close(c);
    return 0;
}

FILE *kv_log_stream(kv_log_sink *sink)
{
    cookie_io_functions_t io = {
        .read = NULL, .write = cookie_write, .seek = NULL, .close = cookie_close};
    FILE *f = fopencookie(sink, "w", io);
    if (f == NULL)
        return NULL;
    if (setvbuf(f, NULL, _IOLBF, BUFSIZ) != 0) {
        int e = errno;
        fclose(f);
        errno = e;
        return NULL;
    }
    return f;
}

int kv_log_install(kv_log_sink *sink)
{
    FILE *f = kv_log_stream(sink);
    if (f == NULL)
        return -errno;
    fflush(stderr);
    stderr = f;
    return 0;
}
