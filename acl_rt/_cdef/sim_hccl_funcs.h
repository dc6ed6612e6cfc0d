/* canna: functions only the simulated HCCL (acl_rt/_sim_hccl, libhccl_sim.so) exports.
 * Real CANN has none of these; acl_rt calls them only when the simulator is loaded. */

typedef struct hcclsimCommStats {
    uint64_t numOps;        /* collectives and point-to-point calls run to completion on this rank */
    uint64_t bytesMoved;    /* bytes this rank read and wrote (the shared segment, the peers' buffers) */
    uint64_t waitNs;        /* nanoseconds this rank spent waiting for its peers */
    uint64_t directOps;     /* all-reduces that read and wrote the peers' buffers directly */
} hcclsimCommStats;

/* the one-line message of the calling thread's last failed Hccl* call (NULL when none; reading clears it) */
const char *hcclsimGetLastErrorMessage(void);
HcclResult hcclsimGetCommStats(HcclComm comm, hcclsimCommStats *stats);
