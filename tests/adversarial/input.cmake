# Area "input": nested Txn and integer extremes against a real member.
# txn_wire.c hand-encodes deep TxnRequests (also used by tests/mvcc/test_pb_scan.c).
kv_add_test(adv_input
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_input.c ${CMAKE_CURRENT_LIST_DIR}/txn_wire.c
  LIBS kvit_support kv_common
  TIMEOUT 600)
target_include_directories(adv_input PRIVATE ${CMAKE_CURRENT_LIST_DIR})
add_dependencies(adv_input kvd)
