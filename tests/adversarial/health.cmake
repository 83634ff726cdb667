# Issue 8 (Hardening), health area: D7 (/health under write-queue saturation and idle sockets
# on the metrics port).
kv_add_test(adv_health SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_health.c LIBS kvit_support
            TIMEOUT 600)
add_dependencies(adv_health kvd)
