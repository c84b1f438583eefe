// Function multi-versioning for the hot loops: the same scalar source compiled twice, for AVX2
// (picked at load time when the CPU has it) and for baseline x86-64, so the build still runs on any
// x86-64. Both versions compute the same bits.
#pragma once

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define STRAIT_VECTOR_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define STRAIT_VECTOR_CLONES
#endif
