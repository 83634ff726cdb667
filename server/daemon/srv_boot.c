/* srv_boot: the initial cluster from DNS SRV records (see srv_boot.h). */
#include "daemon/srv_boot.h"

#include "common/dns_srv.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int kv_srv_boot(kv_config *cfg, char *found, size_t found_cap, char *err, size_t errlen)
{
    if (found_cap)
        found[0] = '\0';
    if (!cfg->discovery_srv[0])
        return 0;
    kv_srv_self self[KV_MAX_URLS];
    for (size_t i = 0; i < cfg->n_advertise_peer && i < KV_MAX_URLS; i++)
        self[i] = (kv_srv_self){.host = cfg->advertise_peer[i].host,
                                .port = (unsigned)cfg->advertise_peer[i].port,
                                .tls = cfg->advertise_peer[i].tls};
    char *list = NULL;
    int rc = kv_srv_cluster(cfg->discovery_srv, cfg->discovery_srv_name, cfg->name, self,
                            cfg->n_advertise_peer, &list, err, errlen);
    if (rc < 0)
        return rc;
    rc = kv_config_set_cluster(cfg, list, err, errlen);
    if (rc == 0) {
        bool mine = false, https = false;
        for (size_t i = 0; i < cfg->n_initial_cluster; i++) {
            mine |= strcmp(cfg->initial_cluster[i].name, cfg->name) == 0;
            https |= cfg->initial_cluster[i].url.tls != 0;
        }
        /* etcd: with https peers and no trusted CA, peers are verified against the domain */
        if (https && !cfg->peer_trusted_ca_file[0])
            snprintf(cfg->peer_server_name, sizeof cfg->peer_server_name, "%s", cfg->discovery_srv);
        if (!mine) {
            snprintf(err, errlen, "cannot find local etcd member \"%s\" in SRV records", cfg->name);
            rc = -ENOENT;
        }
    }
    if (rc == 0)
        snprintf(found, found_cap, "%s", list);
    free(list);
    return rc;
}
