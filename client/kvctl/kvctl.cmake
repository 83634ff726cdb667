# kvctl: the etcdctl 3.4-compatible command-line client (included by client/CMakeLists.txt).
# Built as ${CMAKE_BINARY_DIR}/client/kvctl, where the integration tests look for it.
set(KVCTL_DIR ${CMAKE_CURRENT_LIST_DIR})
add_executable(kvctl
  ${KVCTL_DIR}/main.c
  ${KVCTL_DIR}/flags.c
  ${KVCTL_DIR}/buf.c
  ${KVCTL_DIR}/json.c
  ${KVCTL_DIR}/gofmt.c
  ${KVCTL_DIR}/table.c
  ${KVCTL_DIR}/rpc.c
  ${KVCTL_DIR}/ops.c
  ${KVCTL_DIR}/print_kv.c
  ${KVCTL_DIR}/print_fields.c
  ${KVCTL_DIR}/usage.c
  ${KVCTL_DIR}/cmd_kv.c
  ${KVCTL_DIR}/cmd_txn.c
  ${KVCTL_DIR}/cmd_cluster.c
  ${KVCTL_DIR}/cmd_member.c
  ${KVCTL_DIR}/cmd_lease.c
  ${KVCTL_DIR}/cmd_watch.c
  ${KVCTL_DIR}/cmd_lock.c
  ${KVCTL_DIR}/cmd_elect.c
  ${KVCTL_DIR}/session.c
  ${KVCTL_DIR}/spawn.c
  ${KVCTL_DIR}/cmd_snapshot.c
  ${KVCTL_DIR}/cmd_auth.c)
target_include_directories(kvctl PRIVATE ${KVCTL_DIR} ${KVCTL_DIR}/../include)
target_compile_definitions(kvctl PRIVATE KVCTL_VERSION="${PROJECT_VERSION}")
target_link_libraries(kvctl PRIVATE kvclient_static kvproto Threads::Threads m)
# snapshot status/restore read kvd's store format (server/mvcc/snapshot.h)
target_link_libraries(kvctl PRIVATE kv_mvcc)
