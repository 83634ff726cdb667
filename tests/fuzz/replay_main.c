/*
 * replay_main.c - standalone main() for the fuzz harnesses: runs every file named on the
 * command line (directories: every regular file inside, in name order) through
 * LLVMFuzzerTestOneInput once. A crash or sanitizer report fails the run; so does an empty
 * corpus (a replay that tests nothing must not pass). Exit 0 = all inputs ran.
 */
#include "fuzz.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int run_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
        return -1;
    }
    size_t cap = 4096, len = 0;
    uint8_t *buf = malloc(cap);
    int rc = 0;
    while (buf != NULL) {
        size_t n = fread(buf + len, 1, cap - len, f);
        len += n;
        if (len < cap)
            break;
        cap *= 2;
        uint8_t *nb = realloc(buf, cap);
        if (nb == NULL) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = nb;
    }
    if (buf == NULL || ferror(f)) {
        fprintf(stderr, "replay: cannot read %s\n", path);
        rc = -1;
    } else {
        /* An exact-size copy so ASan catches reads past the input's end. */
        uint8_t *exact = malloc(len ? len : 1);
        if (exact == NULL) {
            rc = -1;
        } else {
            memcpy(exact, buf, len);
            LLVMFuzzerTestOneInput(exact, len);
            free(exact);
        }
    }
    free(buf);
    fclose(f);
    return rc;
}

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int run_dir(const char *dir, size_t *count)
{
    DIR *d = opendir(dir);
    if (d == NULL) {
        fprintf(stderr, "replay: %s: %s\n", dir, strerror(errno));
        return -1;
    }
    char **names = NULL;
    size_t n = 0, cap = 0;
    int rc = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 64;
            char **nn = realloc(names, cap * sizeof(*nn));
            if (nn == NULL) {
                rc = -1;
                goto out;
            }
            names = nn;
        }
        size_t l = strlen(dir) + strlen(e->d_name) + 2;
        names[n] = malloc(l);
        if (names[n] == NULL) {
            rc = -1;
            goto out;
        }
        snprintf(names[n], l, "%s/%s", dir, e->d_name);
        n++;
    }
    qsort(names, n, sizeof(*names), cmp_names);
    for (size_t i = 0; i < n && rc == 0; i++) {
        struct stat st;
        if (stat(names[i], &st) != 0 || !S_ISREG(st.st_mode))
            continue;
        rc = run_file(names[i]);
        (*count)++;
    }
out:
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
    closedir(d);
    return rc;
}

int main(int argc, char **argv)
{
    size_t count = 0;
    if (LLVMFuzzerInitialize(&argc, &argv) != 0)
        return 1;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) != 0) {
            fprintf(stderr, "replay: %s: %s\n", argv[i], strerror(errno));
            return 1;
        }
        int rc = S_ISDIR(st.st_mode) ? run_dir(argv[i], &count) : run_file(argv[i]);
        if (rc == 0 && !S_ISDIR(st.st_mode))
            count++;
        if (rc != 0)
            return 1;
    }
    if (count == 0) {
        fprintf(stderr, "replay: no inputs\n");
        return 1;
    }
    printf("replay: %zu inputs ran\n", count);
    return 0;
}
