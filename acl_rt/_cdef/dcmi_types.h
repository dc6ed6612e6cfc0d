/* canna: DCMI (Ascend driver management interface, libdcmi.so) types used by canna-smi.
 * @cann-headers: dcmi_interface_api.h
 *
 * The subset of the driver package's dcmi_interface_api.h that canna's monitoring reads, written
 * for canna from that header's public copies (hicann/driver src/custom/include/, torch_npu's
 * third_party/dcmi/inc/). DCMI ships with the NPU driver, not with the
 * CANN toolkit headers tools/abi_check.py reads, so these declarations are reported UNCHECKED
 * there. Every DCMI call returns int, 0 = DCMI_OK; devices are addressed as (card_id, device_id).
 * Read by cffi's cdef() and by the C compiler (the simulator exports these functions too).
 */

#define DCMI_OK 0
#define DCMI_ERR_CODE_INVALID_PARAMETER -8001
#define DCMI_ERR_CODE_OPER_NOT_PERMITTED -8002
#define DCMI_ERR_CODE_INNER_ERR -8005
#define DCMI_ERR_CODE_INVALID_DEVICE_ID -8007
#define DCMI_ERR_CODE_DEVICE_NOT_EXIST -8008
#define DCMI_ERR_CODE_NOT_READY -8012
#define DCMI_ERR_CODE_NOT_SUPPORT -8255

/* input_type of dcmi_get_device_utilization_rate (percent) */
#define DCMI_UTILIZATION_RATE_DDR 1
#define DCMI_UTILIZATION_RATE_AICORE 2
#define DCMI_UTILIZATION_RATE_AICPU 3
#define DCMI_UTILIZATION_RATE_CTRLCPU 4
#define DCMI_UTILIZATION_RATE_DDR_BANDWIDTH 5
#define DCMI_UTILIZATION_RATE_HBM 6
#define DCMI_UTILIZATION_RATE_HBM_BANDWIDTH 10
#define DCMI_UTILIZATION_RATE_VECTORCORE 12
#define DCMI_UTILIZATION_RATE_NPU 13
#define DCMI_UTILIZATION_RATE_AICUBE 14

/* memory ("Memory-Usage" in npu-smi: the chip's DDR); sizes in MB */
struct dcmi_get_memory_info_stru {
    unsigned long long memory_size;
    unsigned long long memory_available;
    unsigned int freq;
    unsigned long hugepagesize;
    unsigned long hugepages_total;
    unsigned long hugepages_free;
    unsigned int utiliza;
    unsigned char reserve[60];
};

/* HBM ("HBM-Usage" in npu-smi); sizes in MB */
struct dcmi_hbm_info {
    unsigned long long memory_size;
    unsigned int freq;
    unsigned long long memory_usage;
    int temp;
    unsigned int bandwith_util_rate;
};

struct dcmi_chip_info {
    unsigned char chip_type[32];
    unsigned char chip_name[32];
    unsigned char chip_ver[32];
    unsigned int aicore_cnt;
};

/* one process using a device; proc_mem_usage in bytes */
struct dcmi_proc_mem_info {
    int proc_id;
    unsigned long proc_mem_usage;
};
