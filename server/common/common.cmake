# Lowest server layer: the gRPC status enum (status.h, header-only), the etcd error table, the
# base codecs (byteorder.h, header-only; varint.h; base64.h), CRC-32C (crc32c.h), kv_msgf
# (msgf.h), kv_env_merge (envmerge.h: a child's environment, built before the fork),
# kv_srv_client_endpoints (dns_srv.h: etcd's DNS SRV discovery, glibc's libresolv) and
# kv_go_duration_parse (go_duration.h: Go's time.ParseDuration, for etcd's durations).
# Included from server/CMakeLists.txt; headers are included as "common/<name>.h". Depends on
# nothing, so every module (mvcc, watch, api, grpc) may link it.
add_library(kv_common STATIC ${CMAKE_CURRENT_LIST_DIR}/etcd_errors.c ${CMAKE_CURRENT_LIST_DIR}/varint.c
            ${CMAKE_CURRENT_LIST_DIR}/base64.c ${CMAKE_CURRENT_LIST_DIR}/msgf.c
            ${CMAKE_CURRENT_LIST_DIR}/crc32c.c ${CMAKE_CURRENT_LIST_DIR}/envmerge.c
            ${CMAKE_CURRENT_LIST_DIR}/dns_srv.c ${CMAKE_CURRENT_LIST_DIR}/dns_srv_cluster.c
            ${CMAKE_CURRENT_LIST_DIR}/go_duration.c)
target_link_libraries(kv_common PUBLIC resolv)
target_include_directories(kv_common PUBLIC ${CMAKE_CURRENT_LIST_DIR}/..)
