// What the hand-written loops of models/ share.
#pragma once

// A loop marked SP_KERNEL gets an AVX2 clone that is picked at load time where the CPU has it
// (the build itself targets plain x86-64): the loops are memory-bound, and the wider vectors
// mostly save instructions.
#if defined(__x86_64__) && defined(__GNUC__)
#define SP_KERNEL __attribute__((target_clones("avx2", "default")))
#else
#define SP_KERNEL
#endif
