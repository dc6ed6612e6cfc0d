/* canna simulator: the DCMI functions npu-smi-like monitors use (libdcmi.so on a real install).
 *
 * They need no aclInit and no context: a monitoring process loads the simulator library, calls
 * dcmi_init and reads the simulated machine through the segment shared by the processes using it
 * (sim_shm.c), exactly as DCMI reads the driver. One card per device, device_id 0 on each card,
 * logic id = card id = AscendCL device id. Sizes in MB where DCMI uses MB. What a simulator cannot
 * know (temperature, power) is DCMI_ERR_CODE_NOT_SUPPORT, which monitors show as NA; an HBM SoC
 * profile (Ascend910*) reports its memory as HBM, the others as DDR ("Memory-Usage").
 */
#include "sim.h"

#define MB (1ull << 20)

static int dcmi_ready(void)
{
    if (SIM_UNLIKELY(g_forked))
        return DCMI_ERR_CODE_OPER_NOT_PERMITTED;
    if (sim_config_ensure("dcmi_init") != ACL_SUCCESS)
        return DCMI_ERR_CODE_NOT_READY;
    return DCMI_OK;
}

/* checks the library is ready, the device ids, then that the output pointer `out` is not NULL */
static int dcmi_dev(int card_id, int device_id, const void *out)
{
    int rc = dcmi_ready();
    if (rc)
        return rc;
    if (card_id < 0 || card_id >= g_cfg.ndev || device_id != 0)
        return DCMI_ERR_CODE_INVALID_DEVICE_ID;
    return out ? DCMI_OK : DCMI_ERR_CODE_INVALID_PARAMETER;
}

SIM_API int dcmi_init(void)
{
    int rc = dcmi_ready();
    if (rc)
        return rc;
    sim_shm_attach_reader();
    return DCMI_OK;
}

SIM_API int dcmi_get_card_num_list(int *card_num, int *card_list, int list_len)
{
    int rc = dcmi_ready();
    if (rc)
        return rc;
    if (!card_num || (list_len > 0 && !card_list) || list_len < 0)
        return DCMI_ERR_CODE_INVALID_PARAMETER;
    for (int i = 0; i < g_cfg.ndev && i < list_len; i++)
        card_list[i] = i;
    *card_num = g_cfg.ndev;
    return DCMI_OK;
}

SIM_API int dcmi_get_device_num_in_card(int card_id, int *device_num)
{
    int rc = dcmi_dev(card_id, 0, device_num);
    if (rc)
        return rc;
    *device_num = 1;
    return DCMI_OK;
}

SIM_API int dcmi_get_device_logic_id(int *device_logic_id, int card_id, int device_id)
{
    int rc = dcmi_dev(card_id, device_id, device_logic_id);
    if (rc)
        return rc;
    *device_logic_id = card_id;
    return DCMI_OK;
}

SIM_API int dcmi_get_card_id_device_id_from_logicid(int *card_id, int *device_id, unsigned int device_logic_id)
{
    int rc = dcmi_ready();
    if (rc)
        return rc;
    if (!card_id || !device_id)
        return DCMI_ERR_CODE_INVALID_PARAMETER;
    if (device_logic_id >= (unsigned)g_cfg.ndev)
        return DCMI_ERR_CODE_INVALID_DEVICE_ID;
    *card_id = (int)device_logic_id;
    *device_id = 0;
    return DCMI_OK;
}

static unsigned mem_percent(int dev)
{
    uint64_t cap = g_dev[dev].capacity, used = sim_shm_device_used(dev);
    return cap ? (unsigned)((used * 100 + cap / 2) / cap) : 0;
}

SIM_API int dcmi_get_device_utilization_rate(int card_id, int device_id, int input_type, unsigned int *utilization_rate)
{
    int rc = dcmi_dev(card_id, device_id, utilization_rate);
    if (rc)
        return rc;
    int32_t v;
    switch (input_type) {
    case DCMI_UTILIZATION_RATE_AICORE:
    case DCMI_UTILIZATION_RATE_NPU: {
        int32_t c = sim_shm_device_util(card_id, ACLSIM_ENGINE_CUBE);
        int32_t x = sim_shm_device_util(card_id, ACLSIM_ENGINE_VECTOR);
        v = c > x ? c : x;
        break;
    }
    case DCMI_UTILIZATION_RATE_AICUBE: v = sim_shm_device_util(card_id, ACLSIM_ENGINE_CUBE); break;
    case DCMI_UTILIZATION_RATE_VECTORCORE: v = sim_shm_device_util(card_id, ACLSIM_ENGINE_VECTOR); break;
    case DCMI_UTILIZATION_RATE_AICPU: v = 0; break;
    case DCMI_UTILIZATION_RATE_HBM:
        if (!sim_profile_has_hbm())
            return DCMI_ERR_CODE_NOT_SUPPORT;
        v = (int32_t)mem_percent(card_id);
        break;
    case DCMI_UTILIZATION_RATE_DDR:
        if (sim_profile_has_hbm())
            return DCMI_ERR_CODE_NOT_SUPPORT;
        v = (int32_t)mem_percent(card_id);
        break;
    default:
        return DCMI_ERR_CODE_NOT_SUPPORT;
    }
    if (v < 0)
        return DCMI_ERR_CODE_NOT_SUPPORT;
    *utilization_rate = (unsigned)v;
    return DCMI_OK;
}

SIM_API int dcmi_get_device_memory_info_v3(int card_id, int device_id, struct dcmi_get_memory_info_stru *memory_info)
{
    int rc = dcmi_dev(card_id, device_id, memory_info);
    if (rc)
        return rc;
    if (sim_profile_has_hbm())
        return DCMI_ERR_CODE_NOT_SUPPORT;   /* the device memory is HBM: see dcmi_get_device_hbm_info */
    uint64_t cap = g_dev[card_id].capacity, used = sim_shm_device_used(card_id);
    memset(memory_info, 0, sizeof *memory_info);
    memory_info->memory_size = cap / MB;
    memory_info->memory_available = (cap > used ? cap - used : 0) / MB;
    memory_info->utiliza = mem_percent(card_id);
    return DCMI_OK;
}

SIM_API int dcmi_get_device_hbm_info(int card_id, int device_id, struct dcmi_hbm_info *hbm_info)
{
    int rc = dcmi_dev(card_id, device_id, hbm_info);
    if (rc)
        return rc;
    if (!sim_profile_has_hbm())
        return DCMI_ERR_CODE_NOT_SUPPORT;
    memset(hbm_info, 0, sizeof *hbm_info);
    hbm_info->memory_size = g_dev[card_id].capacity / MB;
    hbm_info->memory_usage = (sim_shm_device_used(card_id) + MB - 1) / MB;
    return DCMI_OK;
}

SIM_API int dcmi_get_device_temperature(int card_id, int device_id, int *temperature)
{
    int rc = dcmi_dev(card_id, device_id, temperature);
    if (rc)
        return rc;
    return DCMI_ERR_CODE_NOT_SUPPORT;
}

SIM_API int dcmi_get_device_power_info(int card_id, int device_id, int *power)
{
    int rc = dcmi_dev(card_id, device_id, power);
    if (rc)
        return rc;
    return DCMI_ERR_CODE_NOT_SUPPORT;
}

SIM_API int dcmi_get_device_health(int card_id, int device_id, unsigned int *health)
{
    int rc = dcmi_dev(card_id, device_id, health);
    if (rc)
        return rc;
    *health = 0;   /* OK */
    return DCMI_OK;
}

SIM_API int dcmi_get_device_chip_info(int card_id, int device_id, struct dcmi_chip_info *chip_info)
{
    int rc = dcmi_dev(card_id, device_id, chip_info);
    if (rc)
        return rc;
    memset(chip_info, 0, sizeof *chip_info);
    const char *name = g_cfg.profile->name;
    if (strncmp(name, "Ascend", 6) == 0)
        name += 6;
    snprintf((char *)chip_info->chip_type, sizeof chip_info->chip_type, "Ascend");
    snprintf((char *)chip_info->chip_name, sizeof chip_info->chip_name, "%s", name);
    snprintf((char *)chip_info->chip_ver, sizeof chip_info->chip_ver, "V1");
    chip_info->aicore_cnt = g_cfg.profile->ai_cores;
    return DCMI_OK;
}

SIM_API int dcmi_get_device_resource_info(int card_id, int device_id, struct dcmi_proc_mem_info *proc_info,
                                          int *proc_num)
{
    int rc = dcmi_dev(card_id, device_id, proc_info);
    if (rc)
        return rc;
    if (!proc_num)
        return DCMI_ERR_CODE_INVALID_PARAMETER;
    uint32_t cap = *proc_num > 0 ? (uint32_t)*proc_num : 32u;
    aclsimProcessInfo buf[64];
    uint32_t n = 0;
    if (aclsimGetProcessInfo(card_id, buf, 64, &n) != ACL_SUCCESS) {
        aclGetRecentErrMsg();
        return DCMI_ERR_CODE_INNER_ERR;
    }
    uint32_t k = 0;
    for (uint32_t i = 0; i < n && i < 64 && k < cap; i++) {
        proc_info[k].proc_id = buf[i].pid;
        proc_info[k].proc_mem_usage = (unsigned long)buf[i].memUsed;
        k++;
    }
    *proc_num = (int)k;
    return DCMI_OK;
}
