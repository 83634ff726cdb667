/* kvctl_buf: see out.h. */
#include "out.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

static bool reserve(struct kvctl_buf *b, size_t extra)
{
    if (b->failed)
        return false;
    if (b->len + extra + 1 <= b->cap)
        return true;
    size_t nc = b->cap ? b->cap : 256;
    while (nc < b->len + extra + 1)
        nc *= 2;
    char *np = realloc(b->p, nc);
    if (!np) {
        b->failed = true;
        return false;
    }
    b->p = np;
    b->cap = nc;
    return true;
}

void kvctl_buf_putn(struct kvctl_buf *b, const void *s, size_t n)
{
    if (!reserve(b, n))
        return;
    if (n) /* s may be NULL for an empty protobuf bytes field */
        memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

void kvctl_buf_puts(struct kvctl_buf *b, const char *s)
{
    kvctl_buf_putn(b, s, strlen(s));
}

void kvctl_buf_printf(struct kvctl_buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0 || !reserve(b, (size_t)n))
        return;
    va_start(ap, fmt);
    vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

bool kvctl_buf_ok(const struct kvctl_buf *b)
{
    return !b->failed;
}

const char *kvctl_buf_str(struct kvctl_buf *b)
{
    return b->p ? b->p : "";
}

void kvctl_buf_reset(struct kvctl_buf *b)
{
    b->len = 0;
    if (b->p)
        b->p[0] = '\0';
}

void kvctl_buf_free(struct kvctl_buf *b)
{
    free(b->p);
    b->p = NULL;
    b->len = b->cap = 0;
    b->failed = false;
}

int kvctl_buf_write(const struct kvctl_buf *b, FILE *f)
{
    if (b->len && fwrite(b->p, 1, b->len, f) != b->len)
        return -EIO;
    return 0;
}
