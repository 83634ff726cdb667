/*
 * sd_notify: systemd's readiness protocol without libsystemd.
 *
 * A service started with Type=notify gets $NOTIFY_SOCKET, the path of a unix datagram socket
 * ("@name" for the abstract namespace). kvd sends "READY=1" there once it serves client
 * requests and "STOPPING=1" when it starts shutting down (see kvd.service, packaging/).
 *
 * Threads: any; no state is kept (one socket per call). Ownership: nothing retained.
 */
#ifndef KV_SD_NOTIFY_H
#define KV_SD_NOTIFY_H

/* Sends state (e.g. "READY=1\nSTATUS=...") as one datagram to the unix socket at path.
 * path NULL or "" (not started by systemd): does nothing and returns 0. Returns 0 when sent,
 * -EINVAL for a path that is not absolute or abstract or too long, or the negative errno of
 * socket()/sendto(). */
int kv_sd_notify(const char *path, const char *state);

#endif
