/*
 * fuzz.h - the libFuzzer entry points every harness in tests/fuzz/ defines.
 *
 * A harness is linked two ways (tests/fuzz/CMakeLists.txt):
 * - with -fsanitize=fuzzer (clang, -DKV_FUZZ=ON): libFuzzer provides main() and mutates;
 * - with replay_main.c (any compiler, every build): main() replays the committed corpus once,
 *   so each corpus input (including crash reproducers) is a ctest regression test.
 * Harnesses keep their process-wide state (an in-process kvd, a temp store) in one static
 * pointer: libFuzzer's C API gives them no other place for it. Threads: libFuzzer's thread.
 */
#ifndef KV_FUZZ_H
#define KV_FUZZ_H

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

#endif
