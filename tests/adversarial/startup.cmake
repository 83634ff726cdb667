# Issue 8 (Hardening), startup area: D2 (data dir lock), D11 (persisted identity), D10 (corrupt
# data file at startup).
kv_add_test(adv_startup SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_startup.c LIBS kvit_support
            TIMEOUT 600)
add_dependencies(adv_startup kvd)
