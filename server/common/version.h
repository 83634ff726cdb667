/*
 * version: the one place that says which etcd version kvd reports (Maintenance.Status'
 * version, the /version document's "etcdserver" and "etcdcluster", etcd_server_version and
 * etcd_cluster_version). kvd speaks etcd 3.4's API; the "+kvd.<version>" suffix keeps it
 * honest that the server is not etcd (docs/metrics.md, "Server").
 */
#ifndef KV_COMMON_VERSION_H
#define KV_COMMON_VERSION_H

/* The version kvd reports as etcd's server version. */
#define KV_ETCD_SERVER_VERSION "3.4.0+kvd.0.1.0"
/* The cluster version, as etcd's version.Cluster() (major.minor). */
#define KV_ETCD_CLUSTER_VERSION "3.4"

#endif
