# kvd grpc-proxy (docs/proxy.md): a top-level layer beside the daemon. It serves clients with
# kvd's gRPC server (kv_grpc) with HTTP beside it (kv_client_http: /health, /metrics,
# pprof), /metrics on --metrics-addr with kv_http, and talks to the cluster through
# libkvclient (kvclient_static: its connection, failover and raw streams). It uses no member
# module (node, mvcc, apply, api): tests/arch/layers.txt, row "proxy".
add_library(kv_proxy STATIC
  ${CMAKE_CURRENT_LIST_DIR}/proxy.c
  ${CMAKE_CURRENT_LIST_DIR}/proxy_main.c
  ${CMAKE_CURRENT_LIST_DIR}/proxy_config.c
  ${CMAKE_CURRENT_LIST_DIR}/proxy_bridge.c
  ${CMAKE_CURRENT_LIST_DIR}/proxy_pb.c
  ${CMAKE_CURRENT_LIST_DIR}/proxy_unary.c
  ${CMAKE_CURRENT_LIST_DIR}/proxy_lease.c
  ${CMAKE_CURRENT_LIST_DIR}/proxy_watch.c
  ${CMAKE_CURRENT_LIST_DIR}/proxy_watch_up.c
  ${CMAKE_CURRENT_LIST_DIR}/proxy_cache.c
  ${CMAKE_CURRENT_LIST_DIR}/proxy_kvcache.c
  ${CMAKE_CURRENT_LIST_DIR}/proxy_ns.c
  ${CMAKE_CURRENT_LIST_DIR}/proxy_stream.c
  ${CMAKE_CURRENT_LIST_DIR}/proxy_naming.c
  ${CMAKE_CURRENT_LIST_DIR}/proxy_register.c
  ${CMAKE_CURRENT_LIST_DIR}/proxy_cluster.c
  ${CMAKE_CURRENT_LIST_DIR}/proxy_health.c)
target_include_directories(kv_proxy PUBLIC ${CMAKE_CURRENT_LIST_DIR}/..)
target_link_libraries(kv_proxy PUBLIC kv_grpc kv_http kv_client_http kv_metrics kv_tls kv_common kv_pb kvclient_static kvproto
                                      PkgConfig::UV Threads::Threads)
