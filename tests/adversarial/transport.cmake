# adv_transport: gRPC transport under load and abuse. Owned by the
# transport area (server/grpc). Starts real kvd processes; generates load with nghttp2.
kv_add_test(adv_transport SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_transport.c
            LIBS kvit_support PkgConfig::NGHTTP2 TIMEOUT 600 COST 62)
add_dependencies(adv_transport kvd)
