# The applier: decodes kvdpb.InternalRequest log entries, runs the MVCC keyspace
# operations (mvcc/keyspace.h) and builds the etcdserverpb responses for local waiters.
# Included from server/CMakeLists.txt; headers are included as "apply/<name>.h".
add_library(kv_apply STATIC
  ${CMAKE_CURRENT_LIST_DIR}/applier.c
  ${CMAKE_CURRENT_LIST_DIR}/apply_kv.c
  ${CMAKE_CURRENT_LIST_DIR}/apply_lease.c
  ${CMAKE_CURRENT_LIST_DIR}/apply_cluster.c
  ${CMAKE_CURRENT_LIST_DIR}/apply_gate.c
  ${CMAKE_CURRENT_LIST_DIR}/apply_check.c
  ${CMAKE_CURRENT_LIST_DIR}/apply_conf.c
  ${CMAKE_CURRENT_LIST_DIR}/apply_range.c
  ${CMAKE_CURRENT_LIST_DIR}/apply_auth.c
  ${CMAKE_CURRENT_LIST_DIR}/apply_authn.c
  ${CMAKE_CURRENT_LIST_DIR}/apply_perm.c
  ${CMAKE_CURRENT_LIST_DIR}/request_check.c
  ${CMAKE_CURRENT_LIST_DIR}/internal_req.c)
target_include_directories(kv_apply PUBLIC ${CMAKE_CURRENT_LIST_DIR}/..)
target_link_libraries(kv_apply PUBLIC kv_mvcc kv_common kvproto)
# apply_authn.c: kv_auth_pwtag; apply_perm.c (etcd's lease permission check at apply): the
# pure key-range check of server/auth (auth_perm.h).
target_link_libraries(kv_apply PUBLIC kv_auth)
# The entry points keep their historic names (kv_store_apply, kv_store_range, ...; declared in
# apply/apply.h). A program that applies entries links kv_apply; kv_mvcc never links upward.
# internal_req.c: the encoder of the log entries this layer decodes (kvdpb.InternalRequest).
