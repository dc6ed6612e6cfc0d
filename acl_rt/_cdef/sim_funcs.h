/* canna: functions only the simulator exports (docs/DESIGN.md §3.4).
 *
 * Real CANN has none of these. Only acl_rt calls them, and only when the simulator
 * backend is loaded (acl_rt.backend_info()["simulator"] is True). Read by cffi's cdef()
 * and by the C compiler.
 */

#define ACLSIM_MEMORY_UNIFIED 0
#define ACLSIM_MEMORY_DISCRETE 1

/* engines a task occupies, for utilization accounting */
#define ACLSIM_ENGINE_NONE 0
#define ACLSIM_ENGINE_VECTOR 1
#define ACLSIM_ENGINE_CUBE 2

typedef aclError (*aclsimTaskFn)(void *arg);
typedef void (*aclsimReleaseFn)(void *arg);
typedef aclError (*aclsimBlockFn)(uint32_t blockIdx, uint32_t numBlocks, void *arg);

typedef struct aclsimDeviceStats {
    uint64_t memTotal;          /* bytes, the capacity of the device (after aclsimSetDeviceMemoryCapacity) */
    uint64_t memUsed;           /* bytes counted against the capacity by live aclrtMalloc* allocations */
    uint64_t memPeak;           /* bytes, high-water mark of memUsed */
    uint64_t numAllocs;         /* live device allocations */
    uint64_t numMallocCalls;    /* successful aclrtMalloc* calls since aclInit */
    uint64_t numFreeCalls;      /* successful aclrtFree calls since aclInit */
    uint64_t numStreams;        /* live streams, default streams included */
    uint64_t numEvents;         /* live events */
    uint64_t tasksExecuted;     /* stream tasks run to completion (inline ones included) */
    uint64_t tasksInline;       /* of which ran on the calling thread because the stream was idle */
    uint64_t busyNs[3];         /* core-nanoseconds spent per engine (index ACLSIM_ENGINE_*) */
    uint32_t aiCoreNum;         /* cores of the SoC profile */
    uint32_t vectorCoreNum;
    uint64_t tasksAtSync;       /* of which ran on a thread synchronizing their stream (not at launch) */
    uint32_t hostThreads;       /* host threads running one launch's blocks, the launching one included
                                 * (CANNA_SIM_THREADS): how many blocks really run at once */
} aclsimDeviceStats;

/* the simulator's own version, e.g. "0.1.0" (aclsysGetVersionStr reports the CANN version it emulates) */
const char *aclsimGetVersion(void);
/* ACLSIM_MEMORY_UNIFIED or ACLSIM_MEMORY_DISCRETE (CANNA_SIM_MEMORY, read at aclInit) */
int32_t aclsimGetMemoryModel(void);
/* 1 when memcheck (CANNA_SIM_CHECK=1) is on */
int32_t aclsimGetCheckMode(void);
/* set a device's memory capacity in bytes; fails with ACL_ERROR_RT_PARAM_INVALID below current use */
aclError aclsimSetDeviceMemoryCapacity(int32_t deviceId, uint64_t bytes);
aclError aclsimGetDeviceStats(int32_t deviceId, aclsimDeviceStats *stats);

/* enqueue a task that keeps the stream busy for `microseconds` (engine/numCores: what it occupies) */
aclError aclsimLaunchDelay(aclrtStream stream, uint64_t microseconds, int32_t engine, uint32_t numCores);
/* enqueue a task that fails with `code` (an asynchronous error, reported at the next synchronize) */
aclError aclsimLaunchFault(aclrtStream stream, aclError code, const char *message);

/* waited != 0: the calling thread will wait for the work it launches from now on (until it sets 0
 * again), so a task it launches on an idle stream runs on it at once, whatever the task's cost,
 * instead of being handed to the stream's worker thread (legal: an asynchronous launch may finish
 * before it returns; what would only add a thread handoff before the caller's wait). Per thread;
 * *previous (may be NULL) gets the setting it replaces. canna's per-call fast paths set it around a
 * launch they synchronize at once. */
aclError aclsimSetLaunchWaited(int32_t waited, int32_t *previous);
/* for the simulator's op and kernel libraries: enqueue fn(arg) on `stream`, in order. release(arg),
 * if not NULL, is called exactly once after fn ran or was skipped. costNs is an estimate of the run
 * time; small tasks may run inline on the calling thread when the stream is idle. */
aclError aclsimLaunchTask(aclrtStream stream, aclsimTaskFn fn, void *arg, aclsimReleaseFn release,
                          int32_t engine, uint32_t numCores, uint64_t costNs);
/* run fn(i, numBlocks, arg) for i in [0, numBlocks) on the device's AI-core threads and wait; the
 * result is the first non-zero block result. Callable from inside a task. */
aclError aclsimParallelFor(int32_t deviceId, uint32_t numBlocks, aclsimBlockFn fn, void *arg);
/* Exported by the simulator's op library (kernels/_sim): the BLAS its matrix products use and where
 * it was found -- "MKL (loaded in the process: libtorch_cpu.so): <version>", "scipy-openblas64
 * (loaded in the process): <config>", ... -- or why there is none. Decided at the first product
 * (this call decides it when none ran yet): $CANNA_SIM_BLAS, else an MKL already loaded (its own
 * runtime, or PyTorch's CPU library, which carries it), else the OpenBLAS acl_rt loads. */
const char *aclnnsimGetBlasName(void);
/* A host thread team lent to the simulator by the program that owns the threads (a framework's
 * intra-op pool): team(ctx, maxThreads, work, job) calls work(job) on up to maxThreads threads at
 * once, the calling thread included, and returns once every call has returned. Each work(job) call
 * runs blocks until none is left, so one call on the calling thread alone is valid too. */
typedef void (*aclsimHostWorkFn)(void *job);
typedef void (*aclsimHostTeamFn)(void *ctx, uint32_t maxThreads, aclsimHostWorkFn work, void *job);
/* team != NULL: the blocks of an aclsimParallelFor called on this thread -- a task it runs inline,
 * while synchronizing or as a waited launch -- are spread over `team` instead of the simulator's
 * AI-core thread pool, so a framework and the simulator share one set of threads rather than
 * contending for the CPUs; NULL: the pool again. Blocks started on a stream's worker thread use the
 * pool whatever this thread set. Per thread; *prevTeam / *prevCtx (may be NULL) get the setting
 * it replaces. */
aclError aclsimSetHostTeam(aclsimHostTeamFn team, void *ctx, aclsimHostTeamFn *prevTeam, void **prevCtx);
/* 0 when [ptr, ptr+size) lies inside one live device allocation (its device in *deviceId);
 * ACL_ERROR_RT_PARAM_INVALID with a message naming the problem (freed, out of bounds, foreign) otherwise */
aclError aclsimCheckDevicePointer(const void *ptr, uint64_t size, int32_t *deviceId);
/* Device allocations of at least ACLSIM_SHARE_MIN bytes live in this process's memfd, so another
 * process of this machine may map them (HCCL's collectives between processes read and write the
 * peers' buffers directly). */
#define ACLSIM_SHARE_MIN 1048576
typedef struct aclsimMemShare {
    int32_t fd;             /* the process's memfd (open it as /proc/<pid>/fd/<fd>) */
    uint64_t ino;           /* its inode number (st_ino), to tell it from another file */
    uint64_t mapOffset;     /* file offset of the allocation's first page */
    uint64_t mapLen;        /* bytes of the allocation's pages (a multiple of the page size) */
    uint64_t ptrOffset;     /* ptr - the start of those pages */
} aclsimMemShare;
/* where [ptr, ptr+size) lives in the memfd: 0, or ACL_ERROR_RT_PARAM_INVALID when it is not inside
 * one live memfd-backed device allocation (a small or host allocation, host memory). ptr NULL:
 * only fd and ino (the memfd is created if needed). */
aclError aclsimMemGetShare(const void *ptr, uint64_t size, aclsimMemShare *share);
/* the stream's device id (for op libraries) */
aclError aclsimStreamGetDevice(aclrtStream stream, int32_t *deviceId);

/* for the simulator's op library (kernels/_sim): set the calling thread's recent error (code and
 * the message aclGetRecentErrMsg() returns next); returns `code` */
aclError aclsimSetRecentErrMsg(aclError code, const char *message);
/* 0 when a kernel on device `deviceId` may access [ptr, ptr+size): inside a live allocation of that
 * device (or of a peer with access enabled), or, in the unified memory model, host memory outside
 * every allocation record. *isDevice (if not NULL) tells which. ACL_ERROR_RT_PARAM_INVALID with a
 * message naming `what` otherwise (freed, out of bounds, host memory in the discrete model). */
aclError aclsimCheckKernelOperand(const void *ptr, uint64_t size, int32_t deviceId, const char *what,
                                  int32_t *isDevice);

/* custom kernels (acl_rt/_sim/sim_kernel.c, README "Custom kernels"): what the simulator binary
 * says about parameter paramIndex of a kernel (name and C type as written in the source, offset and
 * size in the argument block, isPointer: a GM pointer, isConst: a pointer to const data) */
typedef struct aclsimKernelParamDesc {
    char name[64];
    char type[64];
    uint64_t offset;
    uint64_t size;
    uint32_t isPointer;
    uint32_t isConst;
} aclsimKernelParamDesc;
aclError aclsimFunctionGetParamDesc(aclrtFuncHandle funcHandle, size_t paramIndex, aclsimKernelParamDesc *desc);
