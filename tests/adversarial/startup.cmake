# Startup hardening: data dir lock, persisted identity, corrupt data file at startup.
kv_add_test(adv_startup SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_startup.c LIBS kvit_support
            TIMEOUT 600)
add_dependencies(adv_startup kvd)
