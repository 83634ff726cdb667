#include "daemon/sd_notify.h"

#include <errno.h>
#include <stddef.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

int kv_sd_notify(const char *path, const char *state)
{
    if (path == NULL || path[0] == '\0')
        return 0;
    if (path[0] != '/' && path[0] != '@')
        return -EINVAL;
    struct sockaddr_un sa;
    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    size_t len = strlen(path);
    if (len >= sizeof(sa.sun_path))
        return -EINVAL;
    memcpy(sa.sun_path, path, len);
    if (sa.sun_path[0] == '@')
        sa.sun_path[0] = '\0'; /* abstract namespace: the length counts, no terminator */
    socklen_t salen =
        (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len + (path[0] == '/' ? 1 : 0));
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    int rc = 0;
    ssize_t n = sendto(fd, state, strlen(state), MSG_NOSIGNAL, (struct sockaddr *)&sa, salen);
    if (n < 0)
        rc = -errno;
    else if ((size_t)n != strlen(state))
        rc = -EMSGSIZE;
    close(fd);
    return rc;
}
