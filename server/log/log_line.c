/*
 * log_line: level names, the level of a kvd log line, and its zap-style JSON encoding
 * (log.h). Pure functions; any thread.
 */
#include "log/log.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

static const char *const NAMES[] = {"debug", "info", "warn", "error", "fatal"};

const char *kv_log_level_name(kv_log_level l)
{
    return (unsigned)l < sizeof(NAMES) / sizeof(NAMES[0]) ? NAMES[l] : "info";
}

int kv_log_level_parse(const char *s, kv_log_level *out)
{
    static const struct {
        const char *name;
        kv_log_level level;
    } T[] = {{"debug", KV_LOG_DEBUG},  {"info", KV_LOG_INFO},   {"warn", KV_LOG_WARN},
             {"warning", KV_LOG_WARN}, {"error", KV_LOG_ERROR}, {"dpanic", KV_LOG_ERROR},
             {"panic", KV_LOG_ERROR},  {"fatal", KV_LOG_FATAL}};
    for (size_t i = 0; i < sizeof(T) / sizeof(T[0]); i++)
        if (strcmp(s, T[i].name) == 0) {
            *out = T[i].level;
            return 0;
        }
    return -EINVAL;
}

int kv_log_format_parse(const char *s, kv_log_format *out)
{
    if (strcmp(s, "text") == 0)
        *out = KV_LOG_TEXT;
    else if (strcmp(s, "json") == 0)
        *out = KV_LOG_JSON;
    else
        return -EINVAL;
    return 0;
}

/* After "kvd: ": level words (stripped from the message) and the phrases kept in it. */
static const struct {
    const char *prefix;
    kv_log_level level;
    int strip;
} PREFIXES[] = {
    {"debug: ", KV_LOG_DEBUG, 1},
    {"warning: ", KV_LOG_WARN, 1},
    {"error: ", KV_LOG_ERROR, 1},
    {"fatal: ", KV_LOG_FATAL, 1},
    {"refusing to start: ", KV_LOG_FATAL, 0},
    {"startup failed: ", KV_LOG_FATAL, 0},
    {"CORRUPT: ", KV_LOG_ERROR, 0},
};

kv_log_level kv_log_classify(const char *line, size_t len, size_t *msg_off)
{
    static const char KVD[] = "kvd: ";
    *msg_off = 0;
    if (len < sizeof(KVD) - 1 || memcmp(line, KVD, sizeof(KVD) - 1) != 0)
        return KV_LOG_INFO;
    size_t off = sizeof(KVD) - 1;
    *msg_off = off;
    for (size_t i = 0; i < sizeof(PREFIXES) / sizeof(PREFIXES[0]); i++) {
        size_t pl = strlen(PREFIXES[i].prefix);
        if (len - off >= pl && memcmp(line + off, PREFIXES[i].prefix, pl) == 0) {
            if (PREFIXES[i].strip)
                *msg_off = off + pl;
            return PREFIXES[i].level;
        }
    }
    return KV_LOG_INFO;
}

/* Length of the valid UTF-8 sequence at s[0..n) (RFC 3629: no overlongs, no surrogates,
 * at most U+10FFFF), or 0 if the bytes there are not one. */
static size_t utf8_seq(const unsigned char *s, size_t n)
{
    unsigned char c = s[0];
    size_t need;
    unsigned char lo = 0x80, hi = 0xbf; /* range of the second byte */
    if (c < 0x80)
        return 1;
    if (c >= 0xc2 && c <= 0xdf) {
        need = 2;
    } else if (c >= 0xe0 && c <= 0xef) {
        need = 3;
        if (c == 0xe0)
            lo = 0xa0;
        else if (c == 0xed)
            hi = 0x9f;
    } else if (c >= 0xf0 && c <= 0xf4) {
        need = 4;
        if (c == 0xf0)
            lo = 0x90;
        else if (c == 0xf4)
            hi = 0x8f;
    } else {
        return 0;
    }
    if (n < need || s[1] < lo || s[1] > hi)
        return 0;
    for (size_t i = 2; i < need; i++)
        if (s[i] < 0x80 || s[i] > 0xbf)
            return 0;
    return need;
}

typedef struct outbuf {
    char *p;
    size_t len, cap;
    int full;
} outbuf;

static void put(outbuf *o, const char *s, size_t n)
{
    if (o->full || o->cap - o->len < n) {
        o->full = 1;
        return;
    }
    memcpy(o->p + o->len, s, n);
    o->len += n;
}

static void puts_(outbuf *o, const char *s)
{
    put(o, s, strlen(s));
}

static void put_json_string(outbuf *o, const char *msg, size_t len)
{
    static const char HEX[] = "0123456789abcdef";
    const unsigned char *s = (const unsigned char *)msg;
    put(o, "\"", 1);
    for (size_t i = 0; i < len;) {
        unsigned char c = s[i];
        if (c == '"' || c == '\\') {
            char e[2] = {'\\', (char)c};
            put(o, e, 2);
            i++;
        } else if (c < 0x20) {
            const char *e = c == '\n' ? "\\n" : c == '\r' ? "\\r" : c == '\t' ? "\\t" : NULL;
            if (e) {
                put(o, e, 2);
            } else {
                char u[6] = {'\\', 'u', '0', '0', HEX[c >> 4], HEX[c & 15]};
                put(o, u, 6);
            }
            i++;
        } else {
            size_t n = utf8_seq(s + i, len - i);
            if (n == 0) {
                puts_(o, "\\ufffd");
                i++;
            } else {
                put(o, (const char *)s + i, n);
                i += n;
            }
        }
    }
    put(o, "\"", 1);
}

ssize_t kv_log_json_encode(kv_log_level level, const struct timespec *ts, const char *msg,
                           size_t len, size_t truncated, char *out, size_t cap)
{
    outbuf o = {.p = out, .cap = cap};
    struct tm tm;
    time_t sec = ts->tv_sec;
    char tbuf[64];
    if (gmtime_r(&sec, &tm) == NULL)
        memset(&tm, 0, sizeof(tm));
    snprintf(tbuf, sizeof(tbuf), "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ", tm.tm_year + 1900,
             tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
             (long)(ts->tv_nsec / 1000000));
    puts_(&o, "{\"level\":\"");
    puts_(&o, kv_log_level_name(level));
    puts_(&o, "\",\"ts\":\"");
    puts_(&o, tbuf);
    puts_(&o, "\",\"caller\":\"kvd\",\"msg\":");
    put_json_string(&o, msg, len);
    if (truncated > 0) {
        char t[48];
        snprintf(t, sizeof(t), ",\"truncated\":%zu", truncated);
        puts_(&o, t);
    }
    puts_(&o, "}\n");
    return o.full ? -ENOSPC : (ssize_t)o.len;
}
