# The daemon: one member's process. Flags and config file, DNS SRV bootstrap, identity, the data dir's lock and
# layout, TLS setup, the initial membership, sd_notify, crash reports, the member-level etcd
# series, and server.c, which starts and stops the core (node, peers, leases, reader pool,
# watch hub, corruption checks, auth) and fills the api's context. The top layer: it may use
# every module; nothing below includes a daemon header. main.c is the kvd executable's.
add_library(kv_daemon STATIC
  ${CMAKE_CURRENT_LIST_DIR}/config.c
  ${CMAKE_CURRENT_LIST_DIR}/config_file.c
  ${CMAKE_CURRENT_LIST_DIR}/tls_auto.c
  ${CMAKE_CURRENT_LIST_DIR}/tls_setup.c
  ${CMAKE_CURRENT_LIST_DIR}/datadir_lock.c
  ${CMAKE_CURRENT_LIST_DIR}/identity.c
  ${CMAKE_CURRENT_LIST_DIR}/initial_cluster.c
  ${CMAKE_CURRENT_LIST_DIR}/members_boot.c
  ${CMAKE_CURRENT_LIST_DIR}/members_join.c
  ${CMAKE_CURRENT_LIST_DIR}/srv_boot.c
  ${CMAKE_CURRENT_LIST_DIR}/sd_notify.c
  ${CMAKE_CURRENT_LIST_DIR}/crash_report.c
  ${CMAKE_CURRENT_LIST_DIR}/etcd_datadir.c
  ${CMAKE_CURRENT_LIST_DIR}/etcd_metrics.c
  ${CMAKE_CURRENT_LIST_DIR}/heap_trim.c
  ${CMAKE_CURRENT_LIST_DIR}/server.c)
target_link_libraries(kv_daemon PUBLIC kv_api kv_corrupt kv_lease kv_node kv_client_http kv_http
                                       kv_log kv_auth kv_metrics kv_mvcc kv_peer kv_common kvproto
                                       PkgConfig::UV PkgConfig::OPENSSL)

add_executable(kvd ${CMAKE_CURRENT_LIST_DIR}/main.c ${CMAKE_CURRENT_LIST_DIR}/../gateway/l4_gateway.c)
target_link_libraries(kvd PRIVATE kv_daemon kv_proxy)
# -rdynamic: the crash report's frames name kvd's functions even in the stripped package
set_target_properties(kvd PROPERTIES ENABLE_EXPORTS ON)
target_compile_definitions(kvd PRIVATE KVD_VERSION="${PROJECT_VERSION}")
