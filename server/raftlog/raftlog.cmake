# Durable raft log (LMDB, beside the state machine) and the raft peer message codec.
# Included from server/CMakeLists.txt; headers are included as "raftlog/<name>.h".
add_library(kv_raftlog STATIC
  ${CMAKE_CURRENT_LIST_DIR}/raftlog.c
  ${CMAKE_CURRENT_LIST_DIR}/raftlog_rec.c
  ${CMAKE_CURRENT_LIST_DIR}/raftlog_write.c
  ${CMAKE_CURRENT_LIST_DIR}/raftlog_install.c
  ${CMAKE_CURRENT_LIST_DIR}/raftlog_conf.c
  ${CMAKE_CURRENT_LIST_DIR}/msg_codec.c)
target_include_directories(kv_raftlog PUBLIC ${CMAKE_CURRENT_LIST_DIR}/..)
target_link_libraries(kv_raftlog PUBLIC kvraft kvproto kv_mvcc PkgConfig::LMDB)
