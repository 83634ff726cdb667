/* kvctl tables: see table.h. */
#include "table.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#define MAX_ROW_WIDTH 30

/* Display width: one column per UTF-8 code point (East Asian wide runes are not special-cased). */
static size_t width_n(const char *s, size_t n)
{
    size_t w = 0;
    for (size_t i = 0; i < n; i++)
        if (((unsigned char)s[i] & 0xc0) != 0x80)
            w++;
    return w;
}

static size_t width(const char *s)
{
    return width_n(s, strlen(s));
}

static void free_cells(char **cells, size_t n)
{
    if (!cells)
        return;
    for (size_t i = 0; i < n; i++)
        free(cells[i]);
    free(cells);
}

static char **copy_cells(const char *const *src, size_t n)
{
    char **c = calloc(n ? n : 1, sizeof(*c));
    if (!c)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        c[i] = strdup(src[i] ? src[i] : "");
        if (!c[i]) {
            free_cells(c, n);
            return NULL;
        }
    }
    return c;
}

int kvctl_table_init(struct kvctl_table *t, const char *const *hdr, size_t ncols)
{
    memset(t, 0, sizeof(*t));
    t->ncols = ncols;
    t->hdr = copy_cells(hdr, ncols);
    return t->hdr ? 0 : -ENOMEM;
}

int kvctl_table_add(struct kvctl_table *t, const char *const *cells)
{
    if (t->nrows == t->cap) {
        size_t nc = t->cap ? t->cap * 2 : 8;
        char ***nr = realloc(t->rows, nc * sizeof(*nr));
        if (!nr)
            return -ENOMEM;
        t->rows = nr;
        t->cap = nc;
    }
    char **c = copy_cells(cells, t->ncols);
    if (!c)
        return -ENOMEM;
    t->rows[t->nrows++] = c;
    return 0;
}

void kvctl_table_free(struct kvctl_table *t)
{
    free_cells(t->hdr, t->ncols);
    for (size_t r = 0; r < t->nrows; r++)
        free_cells(t->rows[r], t->ncols);
    free(t->rows);
    memset(t, 0, sizeof(*t));
}

/* One wrapped cell: its lines, as [start,len) slices of a joined copy. */
struct cell_lines {
    char **lines;
    size_t n;
};

/*
 * tablewriter's WrapString/WrapWords: split at single spaces (newlines become spaces) and
 * break lines by minimum raggedness with limit `lim` (raised to the longest word).
 */
static int wrap(const char *s, size_t lim, struct cell_lines *out)
{
    size_t nw = 1;
    for (const char *p = s; *p; p++)
        if (*p == ' ' || *p == '\n')
            nw++;
    char **w = calloc(nw, sizeof(*w));
    size_t *wl = calloc(nw, sizeof(*wl));
    long long *cost = calloc(nw, sizeof(*cost));
    size_t *nbrk = calloc(nw, sizeof(*nbrk));
    int rc = -ENOMEM;
    if (!w || !wl || !cost || !nbrk)
        goto out;
    const char *start = s;
    size_t k = 0;
    for (const char *p = s;; p++) {
        if (*p == ' ' || *p == '\n' || *p == '\0') {
            w[k] = strndup(start, (size_t)(p - start));
            if (!w[k])
                goto out;
            if ((size_t)(p - start) > lim)
                lim = (size_t)(p - start);
            wl[k] = width(w[k]);
            k++;
            start = p + 1;
            if (*p == '\0')
                break;
        }
    }
    /* length[i][j] = runes of words i..j joined by single spaces */
    for (size_t ii = nw; ii-- > 0;) {
        size_t len_all = 0;
        for (size_t j = ii; j < nw; j++)
            len_all += wl[j] + (j > ii ? 1 : 0);
        if (len_all <= lim) {
            cost[ii] = 0;
            nbrk[ii] = nw;
            continue;
        }
        cost[ii] = INT_MAX;
        size_t lij = wl[ii]; /* length[ii][j-1] */
        for (size_t j = ii + 1; j < nw; j++) {
            long long d = (long long)lim - (long long)lij;
            long long c = d * d + cost[j];
            if (lij > lim)
                c += 100000;
            if (c < cost[ii]) {
                cost[ii] = c;
                nbrk[ii] = j;
            }
            lij += 1 + wl[j];
        }
    }
    size_t nl = 0;
    for (size_t i = 0; i < nw; i = nbrk[i])
        nl++;
    out->lines = calloc(nl, sizeof(char *));
    out->n = 0;
    if (!out->lines)
        goto out;
    for (size_t i = 0; i < nw; i = nbrk[i]) {
        struct kvctl_buf b = {0};
        for (size_t j = i; j < nbrk[i]; j++) {
            if (j > i)
                kvctl_buf_puts(&b, " ");
            kvctl_buf_puts(&b, w[j]);
        }
        if (!kvctl_buf_ok(&b)) {
            kvctl_buf_free(&b);
            goto out;
        }
        out->lines[out->n++] = b.p ? b.p : strdup("");
        if (!out->lines[out->n - 1])
            goto out;
    }
    rc = 0;
out:
    if (w)
        for (size_t i = 0; i < nw; i++)
            free(w[i]);
    free(w);
    free(wl);
    free(cost);
    free(nbrk);
    return rc;
}

static void pad_to(struct kvctl_buf *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        kvctl_buf_puts(b, " ");
}

static void print_line(struct kvctl_buf *b, const size_t *cs, size_t ncols)
{
    kvctl_buf_puts(b, "+");
    for (size_t c = 0; c < ncols; c++) {
        for (size_t i = 0; i < cs[c] + 2; i++)
            kvctl_buf_puts(b, "-");
        kvctl_buf_puts(b, "+");
    }
    kvctl_buf_puts(b, "\n");
}

static void title(struct kvctl_buf *b, const char *h)
{
    char *t = strdup(h);
    if (!t) {
        b->failed = true;
        return;
    }
    for (char *p = t; *p; p++)
        *p = (*p == '_' || *p == '.') ? ' ' : (char)toupper((unsigned char)*p);
    char *s = t;
    while (*s && isspace((unsigned char)*s))
        s++;
    size_t l = strlen(s);
    while (l && isspace((unsigned char)s[l - 1]))
        s[--l] = '\0';
    kvctl_buf_puts(b, s);
    free(t);
}

void kvctl_table_render(const struct kvctl_table *t, struct kvctl_buf *b)
{
    size_t nc = t->ncols;
    size_t *cs = calloc(nc ? nc : 1, sizeof(*cs));
    struct cell_lines *cl = calloc(t->nrows * nc + 1, sizeof(*cl));
    size_t *rs = calloc(t->nrows + 1, sizeof(*rs));
    if (!cs || !cl || !rs) {
        b->failed = true;
        goto out;
    }
    for (size_t c = 0; c < nc; c++) {
        size_t w = width(t->hdr[c]);
        cs[c] = w > MAX_ROW_WIDTH ? MAX_ROW_WIDTH : w;
    }
    for (size_t r = 0; r < t->nrows; r++) {
        for (size_t c = 0; c < nc; c++) {
            const char *s = t->rows[r][c];
            size_t w = width(s);
            if (w > MAX_ROW_WIDTH)
                w = MAX_ROW_WIDTH;
            if (cs[c] < w)
                cs[c] = w;
            struct cell_lines *L = &cl[r * nc + c];
            if (wrap(s, cs[c], L) < 0) {
                b->failed = true;
                goto out;
            }
            for (size_t i = 0; i < L->n; i++)
                if (width(L->lines[i]) > cs[c])
                    cs[c] = width(L->lines[i]);
            if (L->n > rs[r])
                rs[r] = L->n;
        }
    }
    print_line(b, cs, nc);
    kvctl_buf_puts(b, "|");
    for (size_t c = 0; c < nc; c++) {
        struct kvctl_buf h = {0};
        title(&h, t->hdr[c]);
        size_t w = width(kvctl_buf_str(&h));
        size_t gap = cs[c] > w ? cs[c] - w : 0;
        kvctl_buf_puts(b, " ");
        pad_to(b, gap / 2);
        kvctl_buf_puts(b, kvctl_buf_str(&h));
        pad_to(b, gap - gap / 2);
        kvctl_buf_puts(b, " |");
        kvctl_buf_free(&h);
    }
    kvctl_buf_puts(b, "\n");
    print_line(b, cs, nc);
    for (size_t r = 0; r < t->nrows; r++) {
        for (size_t x = 0; x < rs[r]; x++) {
            for (size_t c = 0; c < nc; c++) {
                const struct cell_lines *L = &cl[r * nc + c];
                const char *s = x < L->n ? L->lines[x] : "  ";
                size_t w = width(s);
                kvctl_buf_puts(b, "| ");
                pad_to(b, cs[c] > w ? cs[c] - w : 0);
                kvctl_buf_puts(b, s);
                kvctl_buf_puts(b, " ");
            }
            kvctl_buf_puts(b, "|\n");
        }
    }
    print_line(b, cs, nc);
out:
    if (cl) {
        for (size_t i = 0; i < t->nrows * nc; i++) {
            for (size_t j = 0; j < cl[i].n; j++)
                free(cl[i].lines[j]);
            free(cl[i].lines);
        }
    }
    free(cl);
    free(cs);
    free(rs);
}
