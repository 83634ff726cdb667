/*
 * kvctl: the command-line client, a byte-for-byte stand-in for `etcdctl` 3.4 (ETCDCTL_API=3)
 * for the commands it implements.
 *
 * Contract shared by the kvctl sources:
 * - Every command is `int cmd(struct kvctl *k, int argc, char **argv)` and returns the process
 *   exit status (KVCTL_EXIT_*), after printing its output to stdout/stderr exactly as etcdctl does.
 * - Errors go to stderr as one line "Error: <message>" (kvctl_fail()).
 * - Nothing here is thread-safe; kvctl is single-threaded.
 */
#ifndef KVCTL_H
#define KVCTL_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

#include <protobuf-c/protobuf-c.h>

#include "kvclient.h"
#include "flags.h"

/* Exit codes, as etcdctl's (etcdctl/ctlv3/command/error.go). */
enum {
    KVCTL_EXIT_SUCCESS = 0,
    KVCTL_EXIT_ERROR = 1,
    KVCTL_EXIT_BAD_CONNECTION = 2,
    KVCTL_EXIT_INVALID_INPUT = 3,
    KVCTL_EXIT_BAD_FEATURE = 4,
    KVCTL_EXIT_INTERRUPTED = 5,
    KVCTL_EXIT_IO = 6,
    KVCTL_EXIT_BAD_ARGS = 128,
    /* not a process status: "help was printed, stop here" (main() exits 0) */
    KVCTL_EXIT_HELP = 256,
};

enum kvctl_format {
    KVCTL_FMT_SIMPLE,
    KVCTL_FMT_JSON,
    KVCTL_FMT_TABLE,
    KVCTL_FMT_FIELDS,
    KVCTL_FMT_PROTOBUF,
};

#define KVCTL_MAX_ENDPOINTS 64

/* Global state of one kvctl run; lives in main()'s frame. */
struct kvctl {
    char *endpoints[KVCTL_MAX_ENDPOINTS]; /* owned (strdup): --endpoints, or as discovered */
    size_t n_endpoints;
    /* --endpoints as given, when --discovery-srv replaced endpoints (else 0): etcdctl's
     * endpoint health/status/hashkv without --cluster read the flag itself. Owned. */
    char *flag_endpoints[KVCTL_MAX_ENDPOINTS];
    size_t n_flag_endpoints;
    uint32_t dial_timeout_ms;
    uint32_t command_timeout_ms;
    enum kvctl_format format;
    const char *format_name; /* as given on the command line */
    bool hex;
    kvc_client *client; /* opened lazily by kvctl_client(); closed by main() */

    /* Raw global flag values (owned by argv/environment) and their flag table. */
    char raw_endpoints[KVCTL_SLICE_MAX];
    const char *raw_write_out;
    const char *raw_cert, *raw_key, *raw_cacert, *raw_user, *raw_password, *raw_discovery;
    const char *raw_discovery_name;
    uint32_t keepalive_time_ms, keepalive_timeout_ms;
    bool help, debug, insecure_transport, insecure_discovery, insecure_skip_verify;
    struct kvctl_flag *global_flags;
};

/* The name servers' certificates must match: the --discovery-srv domain when insecure
 * discovery is off (etcdctl's secureCfg serverName), else NULL (each endpoint's host). */
const char *kvctl_srv_server_name(const struct kvctl *k);

/*
 * Parses a command's argv (argv[0] is the first word after the program name) against the
 * command's flags plus the global flags, applies ETCDCTL_* environment variables and fills
 * the global settings of k. pos receives positional words (command words included) and must
 * have room for argc entries. Returns 0, or the exit status after printing the error.
 */
int kvctl_parse_cmd(struct kvctl *k, int argc, char **argv, struct kvctl_flag *cmd_flags,
                    char **pos, size_t *n_pos);

/* Reports a command-line flag error as etcdctl does (usage on stdout, the error twice on
 * stderr) for the command named by argv. Returns KVCTL_EXIT_ERROR. */
int kvctl_flag_error(int argc, char **argv, const char *msg);

/* A group command ("lease", "member", "endpoint") without a known subcommand: prints the
 * group's help and returns KVCTL_EXIT_HELP, or fails with KVCTL_EXIT_BAD_FEATURE for an
 * etcdctl subcommand kvctl lacks ("member add"). word may be NULL. */
int kvctl_group_help(const char *group, const char *word);

/* Prefix-matches `word` against names (cobra's EnablePrefixMatching); -1 if none/ambiguous. */
int kvctl_match(const char *word, const char *const *names, size_t n);

/* Prints "Error: <fmt...>" + newline to stderr and returns `code` (to be returned as exit status).
 */
int kvctl_fail(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The "table not supported as output format" style error for commands lacking a printer.
 * Returns KVCTL_EXIT_BAD_FEATURE. */
int kvctl_unsupported_format(const struct kvctl *k);

/* Returns the shared client, opening it on first use; NULL after printing an error to stderr
 * and storing the exit status in *exit_code. */
kvc_client *kvctl_client(struct kvctl *k, int *exit_code);

/* Opens a client for a single endpoint (endpoint health/status). Caller closes with kvc_close(). */
int kvctl_open_one(const struct kvctl *k, const char *endpoint, kvc_client **out, kvc_error *err);

/*
 * One unary RPC: packs `req`, calls `method` ("/etcdserverpb.KV/Range"), unpacks the reply with
 * `resp_desc` into *resp (caller frees with protobuf_c_message_free_unpacked(*resp, NULL)).
 * Returns 0, or -1 with *err filled (err->code = gRPC status; -1 for a local failure).
 */
int kvctl_rpc(kvc_client *c, const char *method, const ProtobufCMessage *req,
              const ProtobufCMessageDescriptor *resp_desc, ProtobufCMessage **resp,
              uint32_t timeout_ms, int flags, kvc_error *err);

/* The message etcdctl prints for an RPC error (e.g. "etcdserver: requested lease not found",
 * "context deadline exceeded", "rpc error: code = Unavailable desc = ..."). Writes into buf. */
const char *kvctl_err_text(const kvc_error *err, char *buf, size_t len);

/* grpc-go's name of a gRPC status code ("DeadlineExceeded"); "Unknown" if out of range. */
const char *kvctl_code_name(int code);

/* kvctl_rpc on the shared client; on failure prints "Error: <text>" (or "Error: <wrap> (<text>)")
 * and returns fail_code. Returns 0 on success (*resp as for kvctl_rpc). */
int kvctl_call(struct kvctl *k, const char *method, const ProtobufCMessage *req,
               const ProtobufCMessageDescriptor *rd, ProtobufCMessage **resp, uint32_t timeout,
               int flags, int fail_code, const char *wrap);

/* Commands. */
int kvctl_cmd_put(struct kvctl *k, int argc, char **argv);
int kvctl_cmd_get(struct kvctl *k, int argc, char **argv);
int kvctl_cmd_del(struct kvctl *k, int argc, char **argv);
int kvctl_cmd_txn(struct kvctl *k, int argc, char **argv);
int kvctl_cmd_compaction(struct kvctl *k, int argc, char **argv);
int kvctl_cmd_endpoint(struct kvctl *k, int argc, char **argv);
int kvctl_cmd_member(struct kvctl *k, int argc, char **argv);
int kvctl_cmd_lease(struct kvctl *k, int argc, char **argv);
int kvctl_cmd_watch(struct kvctl *k, int argc, char **argv);
int kvctl_cmd_lock(struct kvctl *k, int argc, char **argv);
int kvctl_cmd_elect(struct kvctl *k, int argc, char **argv);
int kvctl_cmd_snapshot(struct kvctl *k, int argc, char **argv);
/* auth enable|disable, user ..., role ... (cmd_auth.c) */
int kvctl_cmd_auth(struct kvctl *k, int argc, char **argv);
int kvctl_cmd_user(struct kvctl *k, int argc, char **argv);
int kvctl_cmd_role(struct kvctl *k, int argc, char **argv);

#endif
