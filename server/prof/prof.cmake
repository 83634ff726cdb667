# kv_prof: the sampling CPU profiler behind --enable-pprof (prof.h): SIGPROF + backtrace(),
# symbolized from the loaded objects' ELF symbol tables, encoded as pprof's protobuf. Depends
# on common only (the FNV hash); the HTTP endpoints are http/pprof_http.c.
add_library(kv_prof STATIC ${CMAKE_CURRENT_LIST_DIR}/prof_sample.c
            ${CMAKE_CURRENT_LIST_DIR}/prof_syms.c ${CMAKE_CURRENT_LIST_DIR}/prof_encode.c)
target_include_directories(kv_prof PUBLIC ${CMAKE_CURRENT_LIST_DIR}/..)
target_link_libraries(kv_prof PUBLIC kv_common ${CMAKE_DL_LIBS})
