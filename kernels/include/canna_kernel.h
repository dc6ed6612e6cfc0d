/* canna_kernel.h -- the dialect of canna's custom kernels (DESIGN.md §3.3).
 *
 * A kernel is a C or C++ function marked CANNA_KERNEL, returning void, whose parameters are GM
 * pointers (GM_ADDR, or any `T *`) and scalars of fixed-width types. It runs once per block;
 * GetBlockIdx() is the block's index in [0, GetBlockNum()):
 *
 *     #include "canna_kernel.h"
 *     CANNA_KERNEL void add_custom(GM_ADDR x, GM_ADDR y, GM_ADDR z, uint32_t n) {
 *         uint32_t per = (n + GetBlockNum() - 1) / GetBlockNum(), lo = GetBlockIdx() * per;
 *         for (uint32_t i = lo; i < n && i < lo + per; ++i)
 *             ((float *)z)[i] = ((float *)x)[i] + ((float *)y)[i];
 *     }
 *
 * Two targets:
 *   - canna's simulator (any host C/C++ compiler): the kernel is host code; canna's kernel compiler
 *     (kernels.RawModule) adds an entry that unpacks the argument block and sets the block index.
 *   - a real Ascend device (the Ascend toolchain, bisheng/ccec, which defines __CCE_AICORE__ or
 *     __CCE_KT_TEST__; or -DCANNA_TARGET_ASCEND): CANNA_KERNEL is Ascend C's
 *     `extern "C" __global__ __aicore__` and the rest comes from Ascend C's kernel_operator.h.
 *     This mapping is not exercised by canna's CI (no Ascend toolchain there).
 *
 * Valid as C (C99 or later) and C++ (C++11 or later).
 */
#ifndef CANNA_KERNEL_H
#define CANNA_KERNEL_H

#if defined(__CCE_AICORE__) || defined(__CCE_KT_TEST__) || defined(CANNA_TARGET_ASCEND)
/* ---------------------------------------------------------------- Ascend device (untested here) */
#include "kernel_operator.h"
#ifndef CANNA_KERNEL
#define CANNA_KERNEL extern "C" __global__ __aicore__
#endif
#define CANNA_DEVICE __aicore__ inline
using AscendC::GetBlockIdx;
using AscendC::GetBlockNum;
#define CANNA_TARGET_DEVICE 1

#else
/* ---------------------------------------------------------------- canna's simulator (host code) */
#include <stddef.h>
#include <stdint.h>
#ifndef __cplusplus
#include <stdbool.h>
#endif

#define CANNA_TARGET_SIM 1

/* Ascend C's address-space and function qualifiers mean nothing on the host */
#ifndef __gm__
#define __gm__
#endif
#ifndef __aicore__
#define __aicore__
#endif
#ifndef __global__
#define __global__
#endif

/* a pointer to global (device) memory, as in Ascend C */
#ifndef GM_ADDR
#define GM_ADDR __gm__ uint8_t *
#endif

#ifdef __cplusplus
#define CANNA_EXTERN_C extern "C"
#define CANNA_INLINE_ inline
#else
#define CANNA_EXTERN_C
#define CANNA_INLINE_ static inline
#endif

/* kernels are unmangled C symbols (extern "C" in C++), as with Ascend C's extern "C" __global__;
 * exported so fault reports and debuggers can name them */
#define CANNA_KERNEL CANNA_EXTERN_C __attribute__((visibility("default")))
/* helper functions called from kernels */
#define CANNA_DEVICE CANNA_INLINE_

/* half precision where the host compiler has it (GCC >= 12 and Clang on x86-64 and arm64) */
#if defined(__FLT16_MAX__) && !defined(CANNA_NO_HALF)
typedef _Float16 half;
typedef _Float16 float16_t;
#endif
#if defined(__BFLT16_MAX__) && !defined(CANNA_NO_HALF)
typedef __bf16 bfloat16_t;
#endif

/* The running block's index and the launch's block count: set by the entry canna's kernel
 * compiler generates, per thread (blocks run concurrently on the simulated AI cores). Defined
 * (hidden, one per kernel binary) by CANNA_SIM_DEFINE_BLOCK_STATE in that generated entry. */
#ifdef __cplusplus
extern "C" {
#endif
extern __thread uint32_t canna_sim_block_idx_ __attribute__((visibility("hidden")));
extern __thread uint32_t canna_sim_block_num_ __attribute__((visibility("hidden")));
#ifdef __cplusplus
}
#endif
/* the simulator's services to kernels (a `const canna_sim_host *`, acl_rt/_sim/sim_kernel_abi.h),
 * set by the simulator when it loads the binary; NULL when loaded by something else */
#ifdef __cplusplus
extern "C" {
#endif
extern const void *canna_sim_host_ __attribute__((visibility("default")));
#ifdef __cplusplus
}
#endif
#define CANNA_SIM_DEFINE_BLOCK_STATE                                                     \
    __attribute__((visibility("hidden"))) __thread uint32_t canna_sim_block_idx_;      \
    __attribute__((visibility("hidden"))) __thread uint32_t canna_sim_block_num_;      \
    __attribute__((visibility("default"))) const void *canna_sim_host_ = 0;

#ifdef __cplusplus
/* A device fault a kernel's own checks found (kernel_operator.h's DataCopy alignment, queue
 * discipline, Unified Buffer bounds...): thrown, caught by the generated entry, reported as the
 * block's fault (a KernelError at the next synchronize) with this message. */
struct canna_sim_fault_ {
    char msg[320];
};
#endif

/* as Ascend C: int64_t results */
CANNA_INLINE_ int64_t GetBlockIdx(void) { return (int64_t)canna_sim_block_idx_; }
CANNA_INLINE_ int64_t GetBlockNum(void) { return (int64_t)canna_sim_block_num_; }

#ifdef __cplusplus
/* source compatibility with Ascend C code that spells AscendC::GetBlockIdx() */
namespace AscendC {
using ::GetBlockIdx;
using ::GetBlockNum;
}
#endif

#endif /* target */
#endif /* CANNA_KERNEL_H */
