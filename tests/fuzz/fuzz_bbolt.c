/*
 * fuzz_bbolt: etcd 3.4 snapshots (bbolt files) as `kvctl snapshot status|restore` read them
 * (server/bbolt/bbolt.h, mvcc/snapshot.h; docs/snapshots.md).
 *
 * Input: the bytes of a snapshot file (without etcd's SHA-256 trailer). The committed corpus
 * holds a snapshot etcd 3.4 saved (keys with several revisions, a delete, a compaction, a
 * lease, auth users and roles), one kvd wrote, and damaged copies of them.
 * Each input is written to a temporary file and read by kv_bbolt_snapshot_status; when that
 * accepts it, kv_bbolt_restore_dir turns it into a data dir, which is then removed.
 * Invariants: neither crashes, hangs or reads out of bounds (ASan); a refusal comes with a
 * message; a refused restore leaves no data dir.
 */
#include "fuzz.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mvcc/snapshot.h"

typedef struct bb_fuzz {
    char dir[256];
    char file[300];
    char data[300];
} bb_fuzz;

static bb_fuzz *g_bf;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    g_bf = calloc(1, sizeof(*g_bf));
    if (g_bf == NULL)
        abort();
    snprintf(g_bf->dir, sizeof g_bf->dir, "/tmp/fuzz_bbolt.XXXXXX");
    if (mkdtemp(g_bf->dir) == NULL)
        abort();
    snprintf(g_bf->file, sizeof g_bf->file, "%s/snap.db", g_bf->dir);
    snprintf(g_bf->data, sizeof g_bf->data, "%s/restored", g_bf->dir);
    return 0;
}

static void rm_data(const char *dir)
{
    char p[400];
    static const char *const files[] = {"data.mdb", "lock.mdb"};
    for (size_t i = 0; i < 2; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, files[i]);
        unlink(p);
    }
    rmdir(dir);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (g_bf == NULL)
        LLVMFuzzerInitialize(NULL, NULL);
    if (size > (8u << 20))
        return 0;
    int fd = open(g_bf->file, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        abort();
    if (size && write(fd, data, size) != (ssize_t)size)
        abort();
    close(fd);
    kv_snapshot_status st;
    char msg[512] = "";
    int rc = kv_bbolt_snapshot_status(g_bf->file, (int64_t)size, &st, msg, sizeof msg);
    if (rc != 0) {
        if (msg[0] == '\0')
            abort(); /* a refusal says why */
        return 0;
    }
    msg[0] = '\0';
    rc = kv_bbolt_restore_dir(g_bf->file, (int64_t)size, g_bf->data, msg, sizeof msg);
    if (rc != 0) {
        if (msg[0] == '\0' || access(g_bf->data, F_OK) == 0)
            abort(); /* a refusal says why and leaves nothing behind */
        return 0;
    }
    rm_data(g_bf->data);
    return 0;
}
