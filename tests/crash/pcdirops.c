/*
 * pcdirops: runs a script of file and directory operations, for crash_powercut_model (which
 * runs it under the powercut shim). Usage: pcdirops OP... with OP one of
 *   create:NAME  mkdir:NAME  rmdir:NAME  unlink:NAME  rename:OLD:NEW  link:OLD:NEW
 *   write:NAME:TEXT (at offset 0, no truncation)  fsync:NAME (a file or a directory)
 * Names are relative to the working directory. Exits 0, or 1 naming the failed operation.
 */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

static int run(char *op)
{
    char *a = strchr(op, ':');
    if (!a)
        return -1;
    *a++ = '\0';
    char *b = strchr(a, ':');
    if (b)
        *b++ = '\0';
    int fd, rc = 0;
    if (!strcmp(op, "create")) {
        if ((fd = open(a, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600)) < 0)
            return -1;
        return close(fd);
    }
    if (!strcmp(op, "write") && b) {
        if ((fd = open(a, O_WRONLY | O_CLOEXEC)) < 0)
            return -1;
        rc = pwrite(fd, b, strlen(b), 0) == (ssize_t)strlen(b) ? 0 : -1;
        close(fd);
        return rc;
    }
    if (!strcmp(op, "fsync")) {
        if ((fd = open(a, O_RDONLY | O_CLOEXEC)) < 0)
            return -1;
        rc = fsync(fd);
        close(fd);
        return rc;
    }
    if (!strcmp(op, "mkdir"))
        return mkdir(a, 0700);
    if (!strcmp(op, "rmdir"))
        return rmdir(a);
    if (!strcmp(op, "unlink"))
        return unlink(a);
    if (!strcmp(op, "rename") && b)
        return rename(a, b);
    if (!strcmp(op, "link") && b)
        return link(a, b);
    return -1;
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        char op[1024];
        snprintf(op, sizeof op, "%s", argv[i]);
        if (run(op)) {
            perror(argv[i]);
            return 1;
        }
    }
    return 0;
}
