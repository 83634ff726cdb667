# Auth building blocks with no server state: key-range permission checks
# (auth_perm), password hashes (auth_hash), simple tokens (auth_tokens). Included from
# server/CMakeLists.txt; headers are included as "auth/<name>.h". The services that use them
# are server/api/service_auth.c, auth_srv.c and auth_gate.c (in kv_api).
add_library(kv_auth STATIC
  ${CMAKE_CURRENT_LIST_DIR}/auth_perm.c
  ${CMAKE_CURRENT_LIST_DIR}/auth_hash.c
  ${CMAKE_CURRENT_LIST_DIR}/auth_fairq.c
  ${CMAKE_CURRENT_LIST_DIR}/auth_tokens.c
  ${CMAKE_CURRENT_LIST_DIR}/auth_jwt.c)
target_include_directories(kv_auth PUBLIC ${CMAKE_CURRENT_LIST_DIR}/..)
target_link_libraries(kv_auth PUBLIC kv_common PkgConfig::OPENSSL crypt) # crypt: bcrypt of etcd snapshots
