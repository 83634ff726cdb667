# The watch hub: watchers, their index and streams, fed with committed revisions read back
# from the store. Above mvcc; the api's Watch service drives it.
add_library(kv_watch STATIC
  ${CMAKE_CURRENT_LIST_DIR}/watch_hub.c
  ${CMAKE_CURRENT_LIST_DIR}/watch_index.c
  ${CMAKE_CURRENT_LIST_DIR}/watch_stream.c
  ${CMAKE_CURRENT_LIST_DIR}/watch_failpoint.c)
target_include_directories(kv_watch PUBLIC ${CMAKE_CURRENT_LIST_DIR}/..)
target_link_libraries(kv_watch PUBLIC kv_mvcc kv_metrics kv_pb kv_common kvproto PkgConfig::UV)
