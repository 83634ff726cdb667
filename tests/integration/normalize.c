/* normalize: see normalize.h. */
#include "normalize.h"

#include <regex.h>
#include <stdlib.h>
#include <string.h>

typedef struct rule {
    const char *re;
    const char *rep; /* \1..\9 refer to groups */
} rule;

static const rule rules[] = {
    {"127\\.0\\.0\\.1:[0-9]+", "127.0.0.1:PORT"},
    {"\"(cluster_id|member_id|raft_term|leader|raftIndex|raftTerm|raftAppliedIndex|dbSize|"
     "dbSizeInUse|ID)\":[0-9]+",
     "\"\\1\":N"},
    {"\"took\":\"[^\"]*\"", "\"took\":\"T\""},
    {"took = [^ \n]+", "took = T"},
    /* server version in endpoint status: any 3.4.x (kvd reports "3.4.0+kvd.<version>");
     * anything that is not 3.4.x still shows up as a difference */
    {"\"version\":\"3\\.4\\.[0-9]+[^\"]*\"", "\"version\":\"3.4.x\""},
    {", 3\\.4\\.[0-9]+[^ ,]*, ", ", 3.4.x, "},
    {"\\| +3\\.4\\.[0-9]+[^ |]* +\\|", "| 3.4.x |"},
    {"\\<[0-9a-f]{12,16}\\>", "MEMBERID"},
    {"[0-9.]+ (B|kB|MB|GB)\\>", "DBSIZE"},
    /* collapse table padding and rules */
    {" {2,}", " "},
    {"-{2,}", "-"},
    /* endpoint status, simple: leader, learner, term, index, applied index */
    {"(true|false), (true|false), [0-9]+, [0-9]+, [0-9]+,", "\\1, \\2, TERM, INDEX, INDEX,"},
    /* endpoint status, table */
    {"\\| (true|false) \\| (true|false) \\| [0-9]+ \\| [0-9]+ \\| [0-9]+ \\|",
     "| \\1 | \\2 | TERM | INDEX | INDEX |"},
};

static int append(char **buf, size_t *len, size_t *cap, const char *s, size_t n)
{
    if (*len + n + 1 > *cap) {
        size_t c = *cap ? *cap * 2 : 256;
        while (c < *len + n + 1)
            c *= 2;
        char *p = realloc(*buf, c);
        if (!p)
            return -1;
        *buf = p;
        *cap = c;
    }
    memcpy(*buf + *len, s, n);
    *len += n;
    (*buf)[*len] = 0;
    return 0;
}

static char *apply(const char *in, const rule *r)
{
    regex_t re;
    if (regcomp(&re, r->re, REG_EXTENDED))
        return NULL;
    char *out = NULL;
    size_t len = 0, cap = 0;
    const char *p = in;
    regmatch_t m[10];
    int flags = 0;
    int bad = append(&out, &len, &cap, "", 0);
    while (!bad && regexec(&re, p, 10, m, flags) == 0) {
        if (m[0].rm_eo == m[0].rm_so) { /* empty match: copy one char */
            if (!*p)
                break;
            bad |= append(&out, &len, &cap, p, 1);
            p++;
            flags = REG_NOTBOL;
            continue;
        }
        bad |= append(&out, &len, &cap, p, (size_t)m[0].rm_so);
        for (const char *s = r->rep; *s && !bad; s++) {
            if (s[0] == '\\' && s[1] >= '1' && s[1] <= '9') {
                int g = s[1] - '0';
                if (m[g].rm_so >= 0)
                    bad |=
                        append(&out, &len, &cap, p + m[g].rm_so, (size_t)(m[g].rm_eo - m[g].rm_so));
                s++;
            } else {
                bad |= append(&out, &len, &cap, s, 1);
            }
        }
        p += m[0].rm_eo;
        flags = REG_NOTBOL;
    }
    if (!bad)
        bad |= append(&out, &len, &cap, p, strlen(p));
    regfree(&re);
    if (bad) {
        free(out);
        return NULL;
    }
    return out;
}

char *kv_it_normalize(const char *text)
{
    char *cur = strdup(text ? text : "");
    for (size_t i = 0; cur && i < sizeof(rules) / sizeof(rules[0]); i++) {
        char *next = apply(cur, &rules[i]);
        free(cur);
        cur = next;
    }
    return cur;
}

char *kv_it_stderr_lines(const char *text)
{
    char *out = NULL;
    size_t len = 0, cap = 0;
    if (append(&out, &len, &cap, "", 0))
        return NULL;
    const char *p = text ? text : "";
    while (*p) {
        const char *eol = strchr(p, '\n');
        size_t ll = eol ? (size_t)(eol - p) : strlen(p);
        if (ll > 0 && strncmp(p, "{\"level\":", 9) != 0) {
            if (append(&out, &len, &cap, p, ll) || append(&out, &len, &cap, "\n", 1)) {
                free(out);
                return NULL;
            }
        }
        p += ll + (eol ? 1 : 0);
    }
    char *norm = kv_it_normalize(out);
    free(out);
    return norm;
}
