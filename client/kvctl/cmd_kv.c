/* kvctl put, get, del, compaction (etcdctl's put_command.go, get_command.go, del_command.go,
 * compaction_command.go). */
#include <stdio.h>
#include <stdlib.h>
#include <inttypes.h>

#include "ops.h"
#include "print_kv.h"

int kvctl_cmd_put(struct kvctl *k, int argc, char **argv)
{
    struct kvctl_put_flags f;
    kvctl_put_flags_init(&f);
    char **pos = calloc((size_t)argc + 1, sizeof(char *));
    size_t np = 0;
    struct kvctl_mem mem = {0};
    ProtobufCMessage *resp = NULL;
    Etcdserverpb__PutRequest req;
    if (!pos)
        return kvctl_fail(KVCTL_EXIT_ERROR, "out of memory");
    int rc = kvctl_parse_cmd(k, argc, argv, f.table, pos, &np);
    if (rc)
        goto out;
    rc = kvctl_put_op(np - 1, pos + 1, &f, true, &req, &mem);
    if (rc)
        goto out;
    rc = kvctl_call(k, "/etcdserverpb.KV/Put", &req.base, &etcdserverpb__put_response__descriptor,
                    &resp, k->command_timeout_ms, 0, KVCTL_EXIT_ERROR, NULL);
    if (rc)
        goto out;
    rc = kvctl_print_put(k, (Etcdserverpb__PutResponse *)resp);
out:
    if (resp)
        protobuf_c_message_free_unpacked(resp, NULL);
    kvctl_mem_free(&mem);
    free(pos);
    return rc;
}

int kvctl_cmd_get(struct kvctl *k, int argc, char **argv)
{
    struct kvctl_get_flags f;
    kvctl_get_flags_init(&f);
    char **pos = calloc((size_t)argc + 1, sizeof(char *));
    size_t np = 0;
    struct kvctl_mem mem = {0};
    ProtobufCMessage *resp = NULL;
    Etcdserverpb__RangeRequest req;
    if (!pos)
        return kvctl_fail(KVCTL_EXIT_ERROR, "out of memory");
    int rc = kvctl_parse_cmd(k, argc, argv, f.table, pos, &np);
    if (rc)
        goto out;
    rc = kvctl_get_op(np - 1, pos + 1, &f, &req, &mem);
    if (rc)
        goto out;
    rc = kvctl_call(k, "/etcdserverpb.KV/Range", &req.base,
                    &etcdserverpb__range_response__descriptor, &resp, k->command_timeout_ms,
                    KVC_IDEMPOTENT, KVCTL_EXIT_ERROR, NULL);
    if (rc)
        goto out;
    if (f.print_value_only && k->format != KVCTL_FMT_SIMPLE) {
        rc = kvctl_fail(KVCTL_EXIT_BAD_ARGS, "print-value-only is only for `--write-out=simple`");
        goto out;
    }
    rc = kvctl_print_get(k, (Etcdserverpb__RangeResponse *)resp, f.print_value_only, f.count_only);
out:
    if (resp)
        protobuf_c_message_free_unpacked(resp, NULL);
    kvctl_mem_free(&mem);
    free(pos);
    return rc;
}

int kvctl_cmd_del(struct kvctl *k, int argc, char **argv)
{
    struct kvctl_del_flags f;
    kvctl_del_flags_init(&f);
    char **pos = calloc((size_t)argc + 1, sizeof(char *));
    size_t np = 0;
    struct kvctl_mem mem = {0};
    ProtobufCMessage *resp = NULL;
    Etcdserverpb__DeleteRangeRequest req;
    if (!pos)
        return kvctl_fail(KVCTL_EXIT_ERROR, "out of memory");
    int rc = kvctl_parse_cmd(k, argc, argv, f.table, pos, &np);
    if (rc)
        goto out;
    rc = kvctl_del_op(np - 1, pos + 1, &f, &req, &mem);
    if (rc)
        goto out;
    rc = kvctl_call(k, "/etcdserverpb.KV/DeleteRange", &req.base,
                    &etcdserverpb__delete_range_response__descriptor, &resp, k->command_timeout_ms,
                    0, KVCTL_EXIT_ERROR, NULL);
    if (rc)
        goto out;
    rc = kvctl_print_del(k, (Etcdserverpb__DeleteRangeResponse *)resp);
out:
    if (resp)
        protobuf_c_message_free_unpacked(resp, NULL);
    kvctl_mem_free(&mem);
    free(pos);
    return rc;
}

int kvctl_cmd_compaction(struct kvctl *k, int argc, char **argv)
{
    bool physical = false;
    struct kvctl_flag fl[] = {
        {"physical", 0, KVCTL_FLAG_BOOL, &physical, false},
        {NULL, 0, KVCTL_FLAG_BOOL, NULL, false},
    };
    char **pos = calloc((size_t)argc + 1, sizeof(char *));
    size_t np = 0;
    ProtobufCMessage *resp = NULL;
    if (!pos)
        return kvctl_fail(KVCTL_EXIT_ERROR, "out of memory");
    int rc = kvctl_parse_cmd(k, argc, argv, fl, pos, &np);
    if (rc)
        goto out;
    if (np != 2) {
        rc = kvctl_fail(KVCTL_EXIT_BAD_ARGS, "compaction command needs 1 argument");
        goto out;
    }
    int64_t rev;
    int prc = kvctl_parse_int64(pos[1], 10, &rev);
    if (prc < 0) {
        char m[256];
        kvctl_parse_int_err(m, sizeof(m), pos[1], prc);
        rc = kvctl_fail(KVCTL_EXIT_ERROR, "%s", m);
        goto out;
    }
    Etcdserverpb__CompactionRequest req;
    etcdserverpb__compaction_request__init(&req);
    req.revision = rev;
    req.physical = physical;
    rc = kvctl_call(k, "/etcdserverpb.KV/Compact", &req.base,
                    &etcdserverpb__compaction_response__descriptor, &resp, k->command_timeout_ms, 0,
                    KVCTL_EXIT_ERROR, NULL);
    if (rc)
        goto out;
    printf("compacted revision %" PRId64 "\n", rev);
out:
    if (resp)
        protobuf_c_message_free_unpacked(resp, NULL);
    free(pos);
    return rc;
}
