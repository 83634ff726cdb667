# Lowest server layer: the gRPC status enum (status.h, header-only) and the etcd error table.
# Included from server/CMakeLists.txt; headers are included as "common/<name>.h". Depends on
# nothing, so every module (mvcc, watch, api, grpc) may link it.
add_library(kv_common STATIC ${CMAKE_CURRENT_LIST_DIR}/etcd_errors.c)
target_include_directories(kv_common PUBLIC ${CMAKE_CURRENT_LIST_DIR}/..)
