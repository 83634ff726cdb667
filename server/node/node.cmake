# The node: one member's raft driver and ordered write path (proposals, group commit, the
# ready loop, apply, snapshots, ReadIndex) and the reader pool. Above apply, mvcc, raftlog,
# wal and the peer transport; below lease, watch, corrupt and the api.
add_library(kv_node STATIC
  ${CMAKE_CURRENT_LIST_DIR}/node.c
  ${CMAKE_CURRENT_LIST_DIR}/node_ready.c
  ${CMAKE_CURRENT_LIST_DIR}/node_apply.c
  ${CMAKE_CURRENT_LIST_DIR}/node_peer.c
  ${CMAKE_CURRENT_LIST_DIR}/node_conf.c
  ${CMAKE_CURRENT_LIST_DIR}/node_snap.c
  ${CMAKE_CURRENT_LIST_DIR}/node_log.c
  ${CMAKE_CURRENT_LIST_DIR}/disk_failpoint.c
  ${CMAKE_CURRENT_LIST_DIR}/read_pool.c)
target_include_directories(kv_node PUBLIC ${CMAKE_CURRENT_LIST_DIR}/..)
target_link_libraries(kv_node PUBLIC kv_apply kv_mvcc kv_raftlog kv_wal kv_peer kv_metrics kv_common
                                     kvraft kvproto PkgConfig::UV)
