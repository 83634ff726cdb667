# Protobuf wire-format helpers (no protobuf-c): field walks, bounded pre-scans, stripping a
# field from packed bytes; etcd's watch fragment cut (protobuf-c sizes). Below mvcc and apply; needs only kv_common.
add_library(kv_pb STATIC ${CMAKE_CURRENT_LIST_DIR}/pb_wire.c ${CMAKE_CURRENT_LIST_DIR}/pb_scan.c
                         ${CMAKE_CURRENT_LIST_DIR}/pb_strip.c
                         ${CMAKE_CURRENT_LIST_DIR}/pb_fragment.c)
target_include_directories(kv_pb PUBLIC ${CMAKE_CURRENT_LIST_DIR}/..)
target_link_libraries(kv_pb PUBLIC kvproto) # protobuf-c (pb_strip.h)
