# bbolt file format (etcd's snapshots): a bulk-loading writer and a checked reader
# (server/bbolt/bbolt.h). No dependencies.
add_library(kv_bbolt STATIC ${CMAKE_CURRENT_LIST_DIR}/bbolt_write.c
            ${CMAKE_CURRENT_LIST_DIR}/bbolt_read.c)
target_include_directories(kv_bbolt PUBLIC ${CMAKE_CURRENT_LIST_DIR}/..)
