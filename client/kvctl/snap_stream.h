/*
 * snap_stream: downloads Maintenance.Snapshot (a server-streaming RPC, which libkvclient has
 * no API for) over its own h2c connection into a file: each SnapshotResponse blob is written as
 * it arrives (O(one message) memory, at most KVCTL_SNAP_MAX_MSG bytes), as clientv3's
 * Snapshot reader. Single-threaded, blocking, bounded by timeout_ms.
 * Returns 0, or -1 with err (a one-line message as etcdctl would print it) filled.
 */
#ifndef KVCTL_SNAP_STREAM_H
#define KVCTL_SNAP_STREAM_H

#include <stddef.h>
#include <stdint.h>

#define KVCTL_SNAP_MAX_MSG (64u << 20)

/* endpoint: "host:port" or "http://host:port". fd: open for writing. *bytes gets the bytes
 * written (blobs, including the trailing checksum). */
int kvctl_snapshot_download(const char *endpoint, int fd, uint32_t timeout_ms, uint64_t *bytes,
                            char *err, size_t errlen);

#endif
