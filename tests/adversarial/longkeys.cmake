# Area "longkeys": keys longer than LMDB's 511-byte limit through etcdctl,
# kvd against a real etcd (key order of get --prefix, ranges, txn, lease revoke, watch).
kv_add_test(adv_longkeys SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_longkeys.c LIBS kvit_support
            TIMEOUT 600)
add_dependencies(adv_longkeys kvd)
