# bbolt file format (etcd's snapshots): a bulk-loading writer and a checked reader
# (server/bbolt/bbolt.h). Depends only on kv_common (byte order, messages).
add_library(kv_bbolt STATIC ${CMAKE_CURRENT_LIST_DIR}/bbolt_write.c
            ${CMAKE_CURRENT_LIST_DIR}/bbolt_read.c)
target_include_directories(kv_bbolt PUBLIC ${CMAKE_CURRENT_LIST_DIR}/..)
target_link_libraries(kv_bbolt PUBLIC kv_common)
