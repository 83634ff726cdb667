/*
 * srv_boot: a member's initial cluster from DNS SRV records (etcd's --discovery-srv,
 * --discovery-srv-name; README.md "A cluster" and the --discovery-srv flag). The lookup
 * itself is common/dns_srv.h's kv_srv_cluster; this step matches the result against the
 * member's own name and fills the config as --initial-cluster would have.
 *
 * Runs once at startup, after the flags are parsed and before anything reads the initial
 * cluster (identity, peers). Blocking (DNS). Main thread.
 */
#ifndef KV_SRV_BOOT_H
#define KV_SRV_BOOT_H

#include "daemon/config.h"

#include <stddef.h>

/* With cfg->discovery_srv set: replaces cfg's initial cluster with the discovered one (and,
 * when it has https:// peers and there is no --peer-trusted-ca-file, sets
 * cfg->peer_server_name to the domain, as etcd does) and writes it to *found (a one-line
 * summary for the log, caller's buffer). 0 (also without the flag: nothing done, found ""),
 * or a negative errno with etcd's message in err: the lookup errors, or "cannot find local
 * etcd member "<name>" in SRV records". */
int kv_srv_boot(kv_config *cfg, char *found, size_t found_cap, char *err, size_t errlen);

#endif
