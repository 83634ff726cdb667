# The api: the client port's gRPC services (etcd's KV, Lease, Watch, Maintenance, Cluster,
# Auth, Election, Lock, Health), the one mapping of errors to gRPC statuses (services.c) and
# the services' helpers. It sees its member only through kv_api (api/api.h): it includes no
# daemon header. Above node, lease, watch and auth; below the daemon.
add_library(kv_api STATIC
  ${CMAKE_CURRENT_LIST_DIR}/auth_gate.c
  ${CMAKE_CURRENT_LIST_DIR}/auth_srv.c
  ${CMAKE_CURRENT_LIST_DIR}/auto_compact.c
  ${CMAKE_CURRENT_LIST_DIR}/conc_acquire.c
  ${CMAKE_CURRENT_LIST_DIR}/conc_client.c
  ${CMAKE_CURRENT_LIST_DIR}/conc_observe.c
  ${CMAKE_CURRENT_LIST_DIR}/conc_unary.c
  ${CMAKE_CURRENT_LIST_DIR}/conc_util.c
  ${CMAKE_CURRENT_LIST_DIR}/conc_watch.c
  ${CMAKE_CURRENT_LIST_DIR}/member_urls.c
  ${CMAKE_CURRENT_LIST_DIR}/move_leader.c
  ${CMAKE_CURRENT_LIST_DIR}/quota.c
  ${CMAKE_CURRENT_LIST_DIR}/read_req.c
  ${CMAKE_CURRENT_LIST_DIR}/require_leader.c
  ${CMAKE_CURRENT_LIST_DIR}/service_auth.c
  ${CMAKE_CURRENT_LIST_DIR}/service_auth_read.c
  ${CMAKE_CURRENT_LIST_DIR}/service_cluster.c
  ${CMAKE_CURRENT_LIST_DIR}/service_election.c
  ${CMAKE_CURRENT_LIST_DIR}/service_health.c
  ${CMAKE_CURRENT_LIST_DIR}/service_kv.c
  ${CMAKE_CURRENT_LIST_DIR}/service_lease.c
  ${CMAKE_CURRENT_LIST_DIR}/service_lock.c
  ${CMAKE_CURRENT_LIST_DIR}/service_maintenance.c
  ${CMAKE_CURRENT_LIST_DIR}/service_watch.c
  ${CMAKE_CURRENT_LIST_DIR}/services.c
  ${CMAKE_CURRENT_LIST_DIR}/snapshot_stream.c)
target_link_libraries(kv_api PUBLIC kv_node kv_lease kv_watch kv_auth kv_apply kv_mvcc kv_peer kv_grpc
                                    kv_metrics kv_common kvproto PkgConfig::UV PkgConfig::OPENSSL)
