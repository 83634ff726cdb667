/*
 * proxy.h - `kvd grpc-proxy start`: etcd's gRPC proxy (etcd 3.4 op-guide/grpc_proxy.md) in
 * front of a kvd or etcd cluster. Design, bounds and what is not done: docs/proxy.md.
 *
 * - Clients (etcdctl, clientv3, libkvclient, kvctl) connect to --listen-addr and speak etcd's
 *   gRPC API unchanged; kvd's own gRPC server (server/grpc) serves them.
 * - Upstream: ONE libkvclient connection (client/include/kvclient.h) to --endpoints, with its
 *   failover between them. Unary calls go up as raw bytes; all clients' LeaseKeepAlive
 *   streams fold into one upstream stream; Watch streams are relayed one to one.
 * - Threads: the caller's thread runs the proxy's libuv loop; libkvclient runs one I/O
 *   thread; they meet only in the bridge (proxy_bridge.h).
 */
#ifndef KV_PROXY_H
#define KV_PROXY_H

/* argv[0] is "grpc-proxy", argv[1] must be "start". Runs until SIGINT/SIGTERM; returns the
 * process exit code (0, or 2 for bad flags / a failed start, with the reason on stderr). */
int kv_proxy_main(int argc, char **argv);

#endif
