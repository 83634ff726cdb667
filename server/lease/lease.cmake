# Lease module: persistence table (LMDB) and the lessor (expiry heap, keepalives, checkpoints).
# Included from server/CMakeLists.txt; headers are included as "lease/<name>.h".
add_library(kv_lease_table STATIC ${CMAKE_CURRENT_LIST_DIR}/lease_table.c)
target_include_directories(kv_lease_table PUBLIC ${CMAKE_CURRENT_LIST_DIR}/..)
target_link_libraries(kv_lease_table PUBLIC kvproto kv_common PkgConfig::LMDB)

add_library(kv_lessor STATIC ${CMAKE_CURRENT_LIST_DIR}/lessor.c ${CMAKE_CURRENT_LIST_DIR}/lease_heap.c
            ${CMAKE_CURRENT_LIST_DIR}/lease_map.c)
target_include_directories(kv_lessor PUBLIC ${CMAKE_CURRENT_LIST_DIR}/..)
target_link_libraries(kv_lessor PUBLIC kv_lease_table PkgConfig::UV)

# The lease module's member side, one layer up (above the node, below the api): the lessor's
# wiring to the node and the store (leases.c), renewals and TimeToLive queries forwarded from a
# follower to the leader (lease_fwd.c) and the leader's answers (lease_fwd_serve.c). Its API
# names no gRPC type and no peer frame (lease_fwd.h).
add_library(kv_lease STATIC ${CMAKE_CURRENT_LIST_DIR}/leases.c ${CMAKE_CURRENT_LIST_DIR}/lease_fwd.c
            ${CMAKE_CURRENT_LIST_DIR}/lease_fwd_serve.c)
target_link_libraries(kv_lease PUBLIC kv_lessor kv_node kv_apply kv_metrics kvproto PkgConfig::UV)
