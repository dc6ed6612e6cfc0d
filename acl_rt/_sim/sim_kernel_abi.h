/* canna simulator: the format of a simulator kernel "binary" (README.md, "Custom kernels").
 *
 * A simulator binary is a host shared object (ELF ET_DYN for the host machine) that exports one
 * data symbol, CANNA_SIM_BINARY_SYMBOL, of type canna_sim_binary: a table of its kernels with, for
 * each, an entry function and the layout of its argument block. aclrtBinaryLoadFromFile /
 * aclrtBinaryLoadFromData dlopen it and read the table; aclrtLaunchKernel* call the entry of each
 * block on the device's AI-core threads.
 *
 * The entry of a kernel unpacks the argument block -- the kernel's parameters in declaration order,
 * laid out like a C struct of them (natural alignment, GM pointers 8 bytes), the block the real
 * device takes too -- sets the values GetBlockIdx()/GetBlockNum() return on the calling thread, and
 * calls the kernel. It returns 0, or non-zero after writing a message to msg (a C++ exception that
 * escaped the kernel, for instance).
 *
 * canna's kernel compiler (kernels/_compiler.py) generates the entry and the table from the
 * kernel's source; this header is included by that generated code and by sim_kernel.c. Plain C,
 * valid as C++.
 */
#ifndef CANNA_SIM_KERNEL_ABI_H
#define CANNA_SIM_KERNEL_ABI_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CANNA_SIM_BINARY_SYMBOL "canna_sim_module"
#define CANNA_SIM_BINARY_MAGIC 0x4d49534eu   /* "NSIM" */
#define CANNA_SIM_BINARY_VERSION 1u
#define CANNA_SIM_MAX_PARAMS 128u            /* AscendCL's aclrtKernelArgsAppend limit */

/* canna_sim_param.flags */
#define CANNA_SIM_PARAM_POINTER 1u   /* a GM pointer (8 bytes) */
#define CANNA_SIM_PARAM_CONST 2u     /* ... to const data (the kernel promises not to write through it) */

typedef struct canna_sim_param {
    const char *name;     /* as written in the source ("" when unnamed) */
    const char *type;     /* the C type as written in the source, e.g. "GM_ADDR", "uint32_t" */
    uint32_t offset;      /* byte offset in the argument block */
    uint32_t size;        /* bytes */
    uint32_t align;       /* bytes */
    uint32_t flags;       /* CANNA_SIM_PARAM_* */
} canna_sim_param;

/* run block blockIdx of numBlocks with the argument block args; 0, or non-zero with msg filled */
typedef int (*canna_sim_entry_fn)(const void *args, uint32_t blockIdx, uint32_t numBlocks, char *msg,
                                  size_t msgSize);

typedef struct canna_sim_kernel {
    const char *name;             /* the kernel's name (aclrtBinaryGetFunction) */
    canna_sim_entry_fn entry;
    const canna_sim_param *params;
    uint32_t num_params;
    uint32_t args_size;           /* sizeof the argument struct (trailing padding included) */
} canna_sim_kernel;

typedef struct canna_sim_binary {
    uint32_t magic;               /* CANNA_SIM_BINARY_MAGIC */
    uint32_t version;             /* CANNA_SIM_BINARY_VERSION */
    uint32_t num_kernels;
    uint32_t reserved;
    const canna_sim_kernel *kernels;
    const char *producer;         /* free text: the compiler and options that built it */
} canna_sim_binary;

/* Services of the simulator to the kernels of a binary (optional). A binary that exports the data
 * symbol CANNA_SIM_HOST_SYMBOL, a `const canna_sim_host *`, gets it set at load, before any launch:
 * kernel_operator.h (Ascend C for the simulator) reads the SoC's Unified Buffer size and checks
 * global-memory ranges through it. Fields may be added at the end (version grows). */
#define CANNA_SIM_HOST_SYMBOL "canna_sim_host_"
#define CANNA_SIM_HOST_VERSION 2u

typedef struct canna_sim_host {
    uint32_t version;             /* CANNA_SIM_HOST_VERSION */
    uint32_t check;               /* 1 under CANNA_SIM_CHECK=1 (memcheck) */
    uint64_t ub_bytes;            /* Unified Buffer of one vector core of the SoC profile, bytes */
    const char *soc_name;         /* the SoC profile (aclrtGetSocName) */
    /* the running kernel's name on the calling thread ("" outside a kernel block) */
    const char *(*kernel_name)(void);
    /* 0 when [p, p + n) may be accessed: inside one live device allocation, or memory the simulator
     * does not track (host memory in the unified model); otherwise 1 with why (text) filled */
    int (*gm_check)(const void *p, size_t n, char *why, size_t why_size);
    /* the calling thread's Unified Buffer, ub_bytes long (page aligned; the same for every binary on
     * that thread, freed when the thread ends); NULL when out of memory */
    void *(*ub)(void);
    /* version 2: waiting for the other blocks of the launch (Ascend C's SyncAll, GroupBarrier).
     * sync_all: the calling block arrives at the launch's barrier of `count` blocks and returns when
     * `count` blocks have arrived. wait_until: returns when ready(ctx) is non-zero (ready reads state
     * other blocks write, e.g. global memory; it is polled). Blocks that wait are replaced on the
     * host, so every block of the launch gets to run. Both return 0; 1 with why filled when the wait
     * can never end (count exceeds the cores that can be resident, or every other block has ended
     * or waits); 2 when the launch is being stopped (another block faulted, a timeout): the block
     * must then end at once (its fault is not reported). */
    int (*sync_all)(uint32_t count, char *why, size_t why_size);
    int (*wait_until)(int (*ready)(void *ctx), void *ctx, char *why, size_t why_size);
} canna_sim_host;

#ifdef __cplusplus
}
#endif

#endif /* CANNA_SIM_KERNEL_ABI_H */
