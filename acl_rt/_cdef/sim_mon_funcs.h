/* canna: simulator-only monitoring functions (DESIGN.md §3.4; not in real CANN).
 *
 * Processes using simulated devices of one "machine" (same SoC, capacity, device count, memory
 * model and CANNA_SIM_MACHINE) share a POSIX shared-memory segment in which each publishes its
 * per-device usage; see acl_rt/_sim/README.md, "Processes and monitoring". These functions read it
 * without aclInit. Read by cffi's cdef() and by the C compiler.
 */

typedef struct aclsimProcessInfo {
    int32_t pid;
    int32_t deviceId;
    uint64_t startTime;     /* clock ticks since boot (/proc/<pid>/stat field 22): pid + startTime name one process */
    uint64_t memUsed;       /* bytes of device memory counted against the device */
    uint64_t memPeak;       /* bytes, high-water mark of memUsed */
    uint64_t busyNs[3];     /* core-nanoseconds of work per engine (index ACLSIM_ENGINE_*) */
    int32_t utilization;    /* percent of the device's AI cores this process kept busy in the last ~1 s */
    int32_t deviceOpen;     /* 1 while the process holds the device (aclrtSetDevice) */
    char name[32];          /* process name (/proc/<pid>/comm) */
} aclsimProcessInfo;

/* the processes using device deviceId (or any device with deviceId -1), live ones only (dead ones
 * are reaped); at most maxCount entries, *count gets the number of processes found (may exceed
 * maxCount: call again with a larger buffer) */
aclError aclsimGetProcessInfo(int32_t deviceId, aclsimProcessInfo *infos, uint32_t maxCount, uint32_t *count);
/* the shared-memory segment's path (or "" when processes are not shared), into buf of len bytes */
aclError aclsimGetMachineName(char *buf, uint32_t len);
