# MVCC store on LMDB and its keyspace operations (the applier is server/apply/). Included from server/CMakeLists.txt;
# headers are included as "mvcc/<name>.h". Links downward only: the lease table
# (kv_lease_table, lease/lease.cmake), the bbolt writer, the protobuf wire helpers (kv_pb) and
# kv_common.
add_library(kv_mvcc STATIC
  ${CMAKE_CURRENT_LIST_DIR}/record.c
  ${CMAKE_CURRENT_LIST_DIR}/index.c
  ${CMAKE_CURRENT_LIST_DIR}/longkey.c
  ${CMAKE_CURRENT_LIST_DIR}/write.c
  ${CMAKE_CURRENT_LIST_DIR}/range.c
  ${CMAKE_CURRENT_LIST_DIR}/compact.c
  ${CMAKE_CURRENT_LIST_DIR}/events.c
  ${CMAKE_CURRENT_LIST_DIR}/keyspace.c
  ${CMAKE_CURRENT_LIST_DIR}/store.c
  ${CMAKE_CURRENT_LIST_DIR}/identity_meta.c
  ${CMAKE_CURRENT_LIST_DIR}/verify.c
  ${CMAKE_CURRENT_LIST_DIR}/lmdb_verify.c
  ${CMAKE_CURRENT_LIST_DIR}/alarm.c
  ${CMAKE_CURRENT_LIST_DIR}/members.c
  ${CMAKE_CURRENT_LIST_DIR}/defrag.c
  ${CMAKE_CURRENT_LIST_DIR}/snapshot.c
  ${CMAKE_CURRENT_LIST_DIR}/snapshot_bbolt.c
  ${CMAKE_CURRENT_LIST_DIR}/snapshot_import.c
  ${CMAKE_CURRENT_LIST_DIR}/install.c
  ${CMAKE_CURRENT_LIST_DIR}/auth_store.c)
target_include_directories(kv_mvcc PUBLIC ${CMAKE_CURRENT_LIST_DIR}/..)
target_link_libraries(kv_mvcc PUBLIC kvproto PkgConfig::LMDB PkgConfig::OPENSSL
                      kv_lease_table kv_bbolt)
# gRPC status codes and the etcd error table (server/common/common.cmake).
target_link_libraries(kv_mvcc PUBLIC kv_common kv_pb)
