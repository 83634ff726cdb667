# Peer transport (member-to-member HTTP/2): included from server/CMakeLists.txt.
# Target kv_peer; users include "peer/peer_net.h".
add_library(kv_peer STATIC
  ${CMAKE_CURRENT_LIST_DIR}/peer_net.c
  ${CMAKE_CURRENT_LIST_DIR}/peer_dns.c
  ${CMAKE_CURRENT_LIST_DIR}/peer_conn.c
  ${CMAKE_CURRENT_LIST_DIR}/peer_session.c
  ${CMAKE_CURRENT_LIST_DIR}/peer_snap.c
  ${CMAKE_CURRENT_LIST_DIR}/peer_prio.c
  ${CMAKE_CURRENT_LIST_DIR}/peer_tls.c
  ${CMAKE_CURRENT_LIST_DIR}/peer_h1.c
  ${CMAKE_CURRENT_LIST_DIR}/peer_delay.c)
target_include_directories(kv_peer PUBLIC ${CMAKE_CURRENT_LIST_DIR}/..)
target_link_libraries(kv_peer PUBLIC kv_metrics kv_net kv_tls PkgConfig::UV PkgConfig::NGHTTP2)
