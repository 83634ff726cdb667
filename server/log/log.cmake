# Leveled, optionally JSON log lines (log.h). Included from
# server/CMakeLists.txt; headers are included as "log/log.h". Depends on libc only.
add_library(kv_log STATIC ${CMAKE_CURRENT_LIST_DIR}/log_line.c ${CMAKE_CURRENT_LIST_DIR}/log_sink.c)
target_include_directories(kv_log PUBLIC ${CMAKE_CURRENT_LIST_DIR}/..)
