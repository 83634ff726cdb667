/*
 * ops_space: disk space a member must never lose to its own bookkeeping, against real kvd
 * processes.
 *  - defrag_tmp_removed_at_start: a defragment killed during its copy leaves
 *    <data>/defrag.tmp/data.mdb (a partial copy as large as the data); the next start
 *    removes it and logs it, and the data is intact.
 */
#include <criterion/criterion.h>
#include <criterion/logging.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "grpc_raw.h"
#include "harness.h"
#include "rpc.pb-c.h"

#define READY_MS 60000

static kv_it_server *srv;
static char ctl_bin[PATH_MAX];

static void start_with(const char *const *extra)
{
    srv = calloc(1, sizeof(*srv));
    cr_assert(srv);
    int rc = kv_it_server_init(srv, KV_IT_KVD, extra);
    cr_assert_eq(rc, 0, "init kvd (%s): %d", srv->bin, rc);
    cr_assert_eq(kv_it_etcdctl_bin(ctl_bin, sizeof(ctl_bin)), 0, "etcdctl: %s", ctl_bin);
    cr_assert_eq(kv_it_server_start(srv, READY_MS), 0, "kvd did not start");
}

static void teardown(void)
{
    if (srv) {
        kv_it_server_stop(srv, 5000);
        kv_it_server_destroy(srv);
        free(srv);
        srv = NULL;
    }
}

TestSuite(ops_space, .fini = teardown, .timeout = 600);

static kv_it_grpc *conn(void)
{
    kv_it_grpc *c = NULL;
    cr_assert_eq(kv_it_grpc_open(&c, "127.0.0.1", srv->client_port, 5000), 0);
    return c;
}

/* One unary call; returns the grpc status (0 = OK), msg gets the message. Transport errors
 * (the member went away) return -1. */
static int call(kv_it_grpc *c, const char *method, const ProtobufCMessage *m, char *msg, size_t cap)
{
    size_t n = protobuf_c_message_get_packed_size(m);
    uint8_t *buf = malloc(n + 1);
    cr_assert(buf);
    protobuf_c_message_pack(m, buf);
    uint8_t *resp = NULL;
    size_t rlen = 0;
    int status = -1;
    msg[0] = 0;
    int rc = kv_it_grpc_call(c, method, buf, n, &resp, &rlen, 30000, &status, msg, cap);
    free(buf);
    free(resp);
    if (rc != 0 && rc != KV_IT_GRPC_STATUS) {
        snprintf(msg, cap, "transport error %d", rc);
        return -1;
    }
    return rc == 0 ? 0 : status;
}

static int put(kv_it_grpc *c, const char *k, const char *v, char *msg, size_t cap)
{
    Etcdserverpb__PutRequest p = ETCDSERVERPB__PUT_REQUEST__INIT;
    p.key.data = (uint8_t *)k;
    p.key.len = strlen(k);
    p.value.data = (uint8_t *)v;
    p.value.len = strlen(v);
    return call(c, "/etcdserverpb.KV/Put", &p.base, msg, cap);
}

/* Value of key k through a serializable-or-not Range: 1 and val if found, 0 if not. */
static int get(kv_it_grpc *c, const char *k, char *val, size_t cap)
{
    Etcdserverpb__RangeRequest r = ETCDSERVERPB__RANGE_REQUEST__INIT;
    r.key.data = (uint8_t *)k;
    r.key.len = strlen(k);
    size_t n = etcdserverpb__range_request__get_packed_size(&r);
    uint8_t buf[256], *resp = NULL;
    cr_assert(n <= sizeof(buf));
    etcdserverpb__range_request__pack(&r, buf);
    size_t rlen = 0;
    int status = -1;
    char msg[256];
    int rc = kv_it_grpc_call(c, "/etcdserverpb.KV/Range", buf, n, &resp, &rlen, 30000, &status, msg,
                             sizeof(msg));
    cr_assert_eq(rc, 0, "Range %s: %d %d %s", k, rc, status, msg);
    Etcdserverpb__RangeResponse *rr = etcdserverpb__range_response__unpack(NULL, rlen, resp);
    free(resp);
    cr_assert(rr);
    int found = rr->n_kvs == 1;
    if (found)
        snprintf(val, cap, "%.*s", (int)rr->kvs[0]->value.len,
                 (const char *)rr->kvs[0]->value.data);
    etcdserverpb__range_response__free_unpacked(rr, NULL);
    return found;
}

Test(ops_space, defrag_tmp_removed_at_start)
{
    start_with(NULL);
    kv_it_grpc *c = conn();
    char msg[256], val[64];
    cr_assert_eq(put(c, "/space/k", "kept", msg, sizeof(msg)), 0, "%s", msg);
    kv_it_grpc_close(c);
    cr_assert_eq(kv_it_server_kill9(srv), 0);

    /* What a defragment killed mid-copy leaves: defrag.tmp/data.mdb, 8 MiB here. */
    char tmpdir[PATH_MAX + 16], tmpfile[PATH_MAX + 32];
    snprintf(tmpdir, sizeof(tmpdir), "%s/defrag.tmp", srv->data_dir);
    snprintf(tmpfile, sizeof(tmpfile), "%s/data.mdb", tmpdir);
    cr_assert(mkdir(tmpdir, 0700) == 0 || errno == EEXIST, "mkdir %s: %s", tmpdir, strerror(errno));
    int fd = open(tmpfile, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    cr_assert_geq(fd, 0);
    static char chunk[1 << 16];
    memset(chunk, 0x5a, sizeof(chunk));
    for (int i = 0; i < 128; i++)
        cr_assert_eq(write(fd, chunk, sizeof(chunk)), (ssize_t)sizeof(chunk));
    close(fd);

    cr_assert_eq(kv_it_server_start(srv, READY_MS), 0, "kvd did not restart");
    struct stat sb;
    int left = stat(tmpdir, &sb) == 0;
    char *log = NULL;
    cr_assert_eq(kv_it_server_log(srv, &log), 0);
    cr_assert_not(left, "%s is still there after the restart; log:\n%s", tmpdir, log);
    cr_assert_not_null(strstr(log, "defrag.tmp (8388608 bytes)"), "the removal is not logged:\n%s",
                       log);
    free(log);
    c = conn();
    cr_assert_eq(get(c, "/space/k", val, sizeof(val)), 1);
    cr_assert_str_eq(val, "kept");
    cr_assert_eq(put(c, "/space/k2", "after", msg, sizeof(msg)), 0, "%s", msg);
    kv_it_grpc_close(c);
}
