# /health under write-queue saturation and idle sockets on the metrics port (docs/LESSONS.md,
# lesson 13).
kv_add_test(adv_health SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_health.c LIBS kvit_support
            TIMEOUT 600)
add_dependencies(adv_health kvd)
