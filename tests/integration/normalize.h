/*
 * normalize: turns etcdctl/kvctl output into a form that is equal across two servers
 * running the same sequence of operations. Only values that legitimately differ between
 * two members are replaced: ports, cluster/member ids, raft term and raft index (etcd
 * writes internal entries at bootstrap), "took" latencies, db sizes and the 3.4.x patch
 * level of the server version (kvd reports "3.4.0+kvd.<v>"; a non-3.4 version is kept). Revisions,
 * keys, values, versions and counts are kept. Table padding and rule lengths are collapsed because
 * they depend on the width of the replaced values.
 *
 * kv_it_normalize() returns a malloc'd string (caller frees) or NULL on ENOMEM.
 * kv_it_stderr_lines() returns stderr without the Go client's JSON log lines
 * ({"level":...}, retry warnings whose text is not part of the CLI's contract), normalized
 * the same way (malloc'd; etcdctl prints "Error: ..." and endpoint health there).
 */
#ifndef KV_IT_NORMALIZE_H
#define KV_IT_NORMALIZE_H

char *kv_it_normalize(const char *text);
char *kv_it_stderr_lines(const char *text);

#endif
