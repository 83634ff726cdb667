# Area "read": heavy reads off the loop, batched compaction.
# Reuses the lease integration helpers (ka_stream: a LeaseKeepAlive stream client) by path.
set(KV_ADV_READ_LI ${CMAKE_CURRENT_LIST_DIR}/../leaseint)
kv_add_test(adv_read
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_read.c ${KV_ADV_READ_LI}/ka_stream.c
          ${KV_ADV_READ_LI}/leaseint_util.c
  LIBS kvit_support PkgConfig::NGHTTP2 Threads::Threads
  TIMEOUT 600)
target_include_directories(adv_read PRIVATE ${KV_ADV_READ_LI})
add_dependencies(adv_read kvd)
set_tests_properties(adv_read PROPERTIES RUN_SERIAL TRUE) # asserts a latency bound: no other test may share the 2 cores
