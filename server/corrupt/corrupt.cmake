# Corruption checks: HashKV comparisons with the peers at start and periodically, and the
# CORRUPT alarm. Above the node (its peer frames 18, 19 and proposals); beside the api.
add_library(kv_corrupt STATIC ${CMAKE_CURRENT_LIST_DIR}/corrupt_check.c)
target_link_libraries(kv_corrupt PUBLIC kv_node kv_apply kv_mvcc kv_metrics kv_common kvproto)
