# The write-ahead log (docs/raftlog.md, "The WAL module"): raft entries, hard state and
# snapshot markers in preallocated, CRC-checked segment files: the raft log by default
# (--experimental-wal=false keeps it in data.mdb, server/raftlog/).
# Included from server/CMakeLists.txt; headers are included as "wal/<name>.h".
add_library(kv_wal STATIC
  ${CMAKE_CURRENT_LIST_DIR}/wal_rec.c
  ${CMAKE_CURRENT_LIST_DIR}/wal_index.c
  ${CMAKE_CURRENT_LIST_DIR}/wal_seg.c
  ${CMAKE_CURRENT_LIST_DIR}/wal_open.c
  ${CMAKE_CURRENT_LIST_DIR}/wal_write.c
  ${CMAKE_CURRENT_LIST_DIR}/wal_read.c
  ${CMAKE_CURRENT_LIST_DIR}/wal_import.c)
target_include_directories(kv_wal PUBLIC ${CMAKE_CURRENT_LIST_DIR}/..)
# kv_common for crc32c (server/common/crc32c.h), kvraft for the entry and storage types.
target_link_libraries(kv_wal PUBLIC kvraft kv_common)
