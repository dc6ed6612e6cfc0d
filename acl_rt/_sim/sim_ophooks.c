/* canna simulator: hooks for the simulated op library (kernels/_sim/libopapi_sim.so), which runs
 * aclnn ops as stream tasks and reports argument errors through aclGetRecentErrMsg(). */
#include "sim.h"

SIM_API aclError aclsimSetRecentErrMsg(aclError code, const char *message)
{
    return sim_err(code, "%s", message ? message : "");
}

SIM_API aclError aclsimCheckKernelOperand(const void *ptr, uint64_t size, int32_t deviceId, const char *what,
                                          int32_t *isDevice)
{
    static const char api[] = "aclsimCheckKernelOperand";
    if (SIM_UNLIKELY(g_forked))
        return sim_forked_err(api);
    aclError rc = sim_config_ensure(api);
    if (rc)
        return rc;
    if (!what)
        what = "operand";
    int where = SIM_PTR_HOST;
    int32_t dev = -1;
    rc = sim_mem_classify(ptr, (size_t)size, what, "data", &where, &dev);
    if (rc)
        return rc;
    if (where == SIM_PTR_DEVICE) {
        if (dev != deviceId && !sim_peer_enabled(deviceId, dev))
            return sim_err(ACL_ERROR_RT_PARAM_INVALID,
                           "%s: data %p is memory of device %d, not accessible from device %d (enable peer access)",
                           what, ptr, dev, deviceId);
    } else if (g_cfg.memory_model == ACLSIM_MEMORY_DISCRETE) {
        return sim_err(ACL_ERROR_RT_PARAM_INVALID,
                       "%s: data %p is host memory, which a kernel cannot access in the discrete memory model "
                       "(CANNA_SIM_MEMORY=discrete): copy it to device memory first",
                       what, ptr);
    }
    if (isDevice)
        *isDevice = where == SIM_PTR_DEVICE;
    return ACL_SUCCESS;
}
