/* The libFuzzer entry point every fuzz_*.c defines; replay_main.c calls it in
 * ordinary builds. */
#ifndef DG_TESTS_FUZZ_H
#define DG_TESTS_FUZZ_H
#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#endif
