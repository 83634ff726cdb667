# Transport layer (owned by the transport module): included from server/CMakeLists.txt.
# Targets: kv_metrics (Prometheus registry), kv_grpc (gRPC/h2c server), kv_http (HTTP/1.1
# /metrics + /health, and /debug/pprof/ with kv_prof). Users include "metrics/metrics.h", "grpc/grpc_server.h",
# "http/http_server.h".
add_library(kv_metrics STATIC ${CMAKE_CURRENT_LIST_DIR}/metrics/metrics.c
  ${CMAKE_CURRENT_LIST_DIR}/metrics/process_metrics.c)
target_include_directories(kv_metrics PUBLIC ${CMAKE_CURRENT_LIST_DIR})
target_link_libraries(kv_metrics PUBLIC m)

# Listener setup shared by the gRPC and HTTP servers.
add_library(kv_net STATIC ${CMAKE_CURRENT_LIST_DIR}/net/listen.c ${CMAKE_CURRENT_LIST_DIR}/net/accept_gate.c)
target_include_directories(kv_net PUBLIC ${CMAKE_CURRENT_LIST_DIR})
target_link_libraries(kv_net PUBLIC PkgConfig::UV)

# TLS over OpenSSL memory BIOs, shared by the gRPC server and the peer transport.
add_library(kv_tls STATIC ${CMAKE_CURRENT_LIST_DIR}/net/tls.c
  ${CMAKE_CURRENT_LIST_DIR}/net/tls_ciphers.c ${CMAKE_CURRENT_LIST_DIR}/net/tls_self.c)
target_include_directories(kv_tls PUBLIC ${CMAKE_CURRENT_LIST_DIR})
target_link_libraries(kv_tls PUBLIC PkgConfig::OPENSSL)

add_library(kv_grpc STATIC
  ${CMAKE_CURRENT_LIST_DIR}/grpc/grpc_wire.c
  ${CMAKE_CURRENT_LIST_DIR}/grpc/grpc_io.c
  ${CMAKE_CURRENT_LIST_DIR}/grpc/grpc_call.c
  ${CMAKE_CURRENT_LIST_DIR}/grpc/grpc_conn.c
  ${CMAKE_CURRENT_LIST_DIR}/grpc/grpc_h2mem.c
  ${CMAKE_CURRENT_LIST_DIR}/grpc/grpc_server.c
  ${CMAKE_CURRENT_LIST_DIR}/grpc/grpc_metrics.c
  ${CMAKE_CURRENT_LIST_DIR}/grpc/grpc_call_queued.c
  ${CMAKE_CURRENT_LIST_DIR}/grpc/grpc_tls.c
  ${CMAKE_CURRENT_LIST_DIR}/grpc/grpc_local.c
  ${CMAKE_CURRENT_LIST_DIR}/grpc/grpc_h2raw.c)
target_include_directories(kv_grpc PUBLIC ${CMAKE_CURRENT_LIST_DIR})
target_link_libraries(kv_grpc PUBLIC kv_metrics kv_net kv_tls PkgConfig::UV PkgConfig::NGHTTP2)
target_link_libraries(kv_grpc PUBLIC kv_common) # common/status.h: the gRPC status enum

add_library(kv_http STATIC ${CMAKE_CURRENT_LIST_DIR}/http/http_server.c
            ${CMAKE_CURRENT_LIST_DIR}/http/pprof_http.c)
target_include_directories(kv_http PUBLIC ${CMAKE_CURRENT_LIST_DIR})
target_link_libraries(kv_http PUBLIC kv_metrics kv_net kv_tls kv_prof PkgConfig::UV)

# HTTP/1.1 on the client port (/health, /version, /metrics, grpc-gateway JSON API), installed
# on kv_grpc servers through grpc/grpc_http1.h.
add_library(kv_client_http STATIC
  ${CMAKE_CURRENT_LIST_DIR}/http/client_http.c
  ${CMAKE_CURRENT_LIST_DIR}/http/gateway.c
  ${CMAKE_CURRENT_LIST_DIR}/http/json_pb.c
  ${CMAKE_CURRENT_LIST_DIR}/http/json_pb_write.c)
target_include_directories(kv_client_http PUBLIC ${CMAKE_CURRENT_LIST_DIR})
target_link_libraries(kv_client_http PUBLIC kv_grpc kv_http kv_metrics kvproto PkgConfig::UV)
