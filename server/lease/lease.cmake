# Lease module: persistence table (LMDB) and the lessor (expiry heap, keepalives, checkpoints).
# Included from server/CMakeLists.txt; headers are included as "lease/<name>.h".
add_library(kv_lease_table STATIC ${CMAKE_CURRENT_LIST_DIR}/lease_table.c)
target_include_directories(kv_lease_table PUBLIC ${CMAKE_CURRENT_LIST_DIR}/..)
target_link_libraries(kv_lease_table PUBLIC kvproto kv_common PkgConfig::LMDB)

add_library(kv_lessor STATIC ${CMAKE_CURRENT_LIST_DIR}/lessor.c ${CMAKE_CURRENT_LIST_DIR}/lease_heap.c
            ${CMAKE_CURRENT_LIST_DIR}/lease_map.c)
target_include_directories(kv_lessor PUBLIC ${CMAKE_CURRENT_LIST_DIR}/..)
target_link_libraries(kv_lessor PUBLIC kv_lease_table PkgConfig::UV)
