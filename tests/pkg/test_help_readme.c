/*
 * `kvd --help` and the README agree: the flags of the README's "## Flags"
 * table and the flags `kvd --help` lists are the same set, and every KVD_* variable of the
 * sample environment file packaging/kvd.default names a flag (a misspelt variable would be
 * ignored silently).
 */
#include "kvt_proc.h"

#include <criterion/criterion.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAXF 256

struct flags {
    char name[MAXF][64];
    size_t n;
};

static void add(struct flags *f, const char *p, size_t len)
{
    if (len == 0 || len >= sizeof(f->name[0]) || f->n == MAXF)
        return;
    char n[64];
    memcpy(n, p, len);
    n[len] = '\0';
    if (strcmp(n, "help") == 0 || strcmp(n, "version") == 0)
        return;
    for (size_t i = 0; i < f->n; i++)
        if (strcmp(f->name[i], n) == 0)
            return;
    snprintf(f->name[f->n++], sizeof(f->name[0]), "%s", n);
}

static int has(const struct flags *f, const char *n)
{
    for (size_t i = 0; i < f->n; i++)
        if (strcmp(f->name[i], n) == 0)
            return 1;
    return 0;
}

/* Adds every "--name" in s[0..len). */
static void scan(struct flags *f, const char *s, size_t len)
{
    for (size_t i = 0; i + 2 < len; i++) {
        if (s[i] != '-' || s[i + 1] != '-' || (i > 0 && s[i - 1] == '-') ||
            !islower((unsigned char)s[i + 2]))
            continue;
        size_t j = i + 2;
        while (j < len &&
               (islower((unsigned char)s[j]) || isdigit((unsigned char)s[j]) || s[j] == '-'))
            j++;
        add(f, s + i + 2, j - i - 2);
        i = j;
    }
}

static char *slurp(const char *path)
{
    FILE *fp = fopen(path, "r");
    cr_assert(fp, "cannot open %s", path);
    char *buf = NULL;
    size_t cap = 0;
    cr_assert_neq(getdelim(&buf, &cap, '\0', fp), -1);
    fclose(fp);
    return buf;
}

static void help_flags(struct flags *f)
{
    const char *b = getenv("KV_BUILD_DIR");
    cr_assert(b && *b);
    char kvd[4096];
    snprintf(kvd, sizeof(kvd), "%s/server/kvd", b);
    cr_assert_eq(access(kvd, X_OK), 0, "%s not built", kvd);
    const char *argv[] = {kvd, "--help", NULL};
    kvt_cmd_result r;
    cr_assert_eq(kvt_run(argv, NULL, NULL, 0, 30000, &r), 0);
    cr_assert_eq(r.exit_code, 0);
    /* flag lines: "  --name ..." and "  --a | --b"; descriptions may quote other flags */
    for (char *line = r.out; line && *line;) {
        char *nl = strchr(line, '\n');
        size_t len = nl ? (size_t)(nl - line) : strlen(line);
        if (len > 4 && line[0] == ' ' && line[1] == ' ' && line[2] == '-' && line[3] == '-') {
            /* the flag column: up to the first run of two spaces after the flags */
            size_t end = 2;
            while (end < len && !(line[end] == ' ' && end + 1 < len && line[end + 1] == ' '))
                end++;
            scan(f, line, end);
        }
        line = nl ? nl + 1 : NULL;
    }
    kvt_cmd_result_free(&r);
}

static void readme_flags(struct flags *f)
{
    const char *src = getenv("KV_SOURCE_DIR");
    cr_assert(src && *src);
    char path[4096];
    snprintf(path, sizeof(path), "%s/README.md", src);
    char *s = slurp(path);
    char *sec = strstr(s, "\n## Flags\n");
    cr_assert(sec, "README has no \"## Flags\" section");
    char *end = strstr(sec + 1, "\n## ");
    /* table rows: "| `--flag`[, `--alias`] | default | meaning |": the first column */
    for (char *line = sec + 1; line && (!end || line < end);) {
        char *nl = strchr(line, '\n');
        if (line[0] == '|') {
            char *bar = strchr(line + 1, '|');
            if (bar && (!nl || bar < nl))
                scan(f, line + 1, (size_t)(bar - line - 1));
        }
        line = nl ? nl + 1 : NULL;
    }
    free(s);
}

Test(help_readme, kvd_help_lists_exactly_the_readme_flags)
{
    static struct flags help, readme;
    help_flags(&help);
    readme_flags(&readme);
    cr_assert_gt(help.n, 20, "parsed only %zu flags from kvd --help", help.n);
    cr_assert_gt(readme.n, 20, "parsed only %zu flags from the README", readme.n);
    for (size_t i = 0; i < readme.n; i++)
        cr_expect(has(&help, readme.name[i]), "README lists --%s, kvd --help does not",
                  readme.name[i]);
    for (size_t i = 0; i < help.n; i++)
        cr_expect(has(&readme, help.name[i]),
                  "kvd --help lists --%s, the README's Flags table "
                  "does not",
                  help.name[i]);
}

Test(help_readme, sample_environment_file_names_real_flags)
{
    static struct flags help;
    help_flags(&help);
    const char *src = getenv("KV_SOURCE_DIR");
    cr_assert(src && *src);
    char path[4096];
    snprintf(path, sizeof(path), "%s/packaging/kvd.default", src);
    char *s = slurp(path);
    size_t nvars = 0;
    for (char *line = s; line && *line;) {
        char *nl = strchr(line, '\n');
        char *p = line[0] == '#' ? line + 1 : line;
        if (strncmp(p, "KVD_", 4) == 0 && strncmp(p, "KVD_OPTS=", 9) != 0) {
            char flag[64];
            size_t k = 0;
            for (p += 4; *p && *p != '=' && k + 1 < sizeof(flag); p++)
                flag[k++] = *p == '_' ? '-' : (char)tolower((unsigned char)*p);
            flag[k] = '\0';
            cr_expect(has(&help, flag), "kvd.default sets KVD_%.*s: no flag --%s",
                      (int)strcspn(line + (line[0] == '#') + 4, "="), line + (line[0] == '#') + 4,
                      flag);
            nvars++;
        }
        line = nl ? nl + 1 : NULL;
    }
    cr_expect_gt(nvars, 5);
    free(s);
}
