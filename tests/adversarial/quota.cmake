# adv_quota: quota, NOSPACE/CORRUPT alarms, defragment, disk full.
kv_add_test(adv_quota SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_quota.c LIBS kvit_support
            TIMEOUT 600)
add_dependencies(adv_quota kvd)
