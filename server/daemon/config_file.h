/*
 * config_file: etcd's YAML configuration file (`--config-file`, etcd.conf.yml) read into
 * kvd's flags (README.md, "Flags").
 *
 * etcd 3.4 reads a flat YAML map whose keys are its flag names ("name", "data-dir",
 * "listen-client-urls", "heartbeat-interval", ...) plus two nested maps,
 * "client-transport-security" and "peer-transport-security", whose keys become --cert-file,
 * --key-file, --client-cert-auth, --trusted-ca-file, --auto-tls, --client-crl-file (client)
 * and their --peer-* forms (--peer-crl-file). This reader accepts that subset of YAML:
 * "key: value" lines, comments, blank lines, single- or double-quoted scalars, null values
 * (empty, "~", "null": the key is left at its default, as etcd), one level of nesting for
 * the two sections, and sequences
 * (flow "[a, b]" or block "- a" lines; a flow item may not itself hold a comma), joined with
 * commas as etcd joins URL lists. Anchors, aliases, tags, block scalars and flow maps are
 * refused (quote such text). A key that is no kvd flag is reported on stderr and ignored, as
 * etcd's YAML decoding ignores unknown fields.
 *
 * Durations: etcd decodes the file through JSON into Go's time.Duration, so a plain number for
 * one of its duration keys (grpc-keepalive-min-time: 5000000000) is nanoseconds; it is passed
 * on as milliseconds ("5000ms", "0.5ms"). A value with a unit ("5s") is taken as on the command
 * line; so are kvd's own duration keys (a plain number: milliseconds). heartbeat-interval and
 * election-timeout are plain integers of milliseconds, as in etcd.
 *
 * Output: args[0..*n) are malloc'd "--flag=value" strings for kv_config_parse(); free them
 * with kv_config_file_free(). Errors name the file and the line. The file is bounded to
 * KV_CONFIG_FILE_MAX bytes. Main thread, before the server starts.
 */
#ifndef KV_CONFIG_FILE_H
#define KV_CONFIG_FILE_H

#include <stddef.h>

#define KV_CONFIG_FILE_MAX (1u << 20)

/* known(name): 0 if --name is no kvd flag; KV_CONFIG_FILE_DURATION if it is one of etcd's
 * time.Duration keys; KV_CONFIG_FILE_BOOL if it takes true or false (YAML 1.1's yes, no, on,
 * off, y, n are read as those, as etcd's YAML decoder does); else KV_CONFIG_FILE_FLAG
 * (config.c: kv_config_flag_known). */
#define KV_CONFIG_FILE_FLAG 1
#define KV_CONFIG_FILE_DURATION 2
#define KV_CONFIG_FILE_BOOL 3
int kv_config_file_read(const char *path, int (*known)(const char *name), char ***args, int *n,
                        char *err, size_t errlen);
void kv_config_file_free(char **args, int n);

#endif
