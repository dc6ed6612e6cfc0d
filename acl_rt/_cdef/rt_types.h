/* canna: AscendCL runtime types, enums and structs (the subset canna uses).
 *
 * Written for canna from the facts in AscendCL's public runtime headers
 * (acl_base_rt.h, acl_rt.h; interface version 1.17.0 = CANN 9.1.0) and the
 * CANN 9.1 runtime API reference. Values are checked against
 * the real headers by tests/test_abi.py.
 *
 * This text is read by two consumers: cffi's cdef() (Python, ABI mode) and the
 * C compiler (the simulator in acl_rt/_sim includes it). It must stay valid for
 * both: no preprocessor conditionals, no "..." cffi shortcuts, integer-only
 * #defines without suffixes.
 */

typedef int aclError;
typedef uint16_t aclFloat16;

typedef void *aclrtStream;
typedef void *aclrtEvent;
typedef void *aclrtContext;

#define ACL_SUCCESS 0

/* aclrtCreateEventWithFlag flags */
#define ACL_EVENT_SYNC 1
#define ACL_EVENT_CAPTURE_STREAM_PROGRESS 2
#define ACL_EVENT_TIME_LINE 8
#define ACL_EVENT_DEVICE_USE_ONLY 16
#define ACL_EVENT_EXTERNAL 32
#define ACL_EVENT_IPC 64

/* aclrtCreateStreamWithConfig flags */
#define ACL_STREAM_FAST_LAUNCH 1
#define ACL_STREAM_FAST_SYNC 2
#define ACL_STREAM_PERSISTENT 4
#define ACL_STREAM_HUGE 8
#define ACL_STREAM_CPU_SCHEDULE 16
#define ACL_STREAM_DEVICE_USE_ONLY 32

/* aclsysGetVersionStr output buffer size */
#define ACL_PKG_VERSION_MAX_SIZE 128

typedef enum aclrtRunMode {
    ACL_DEVICE = 0,
    ACL_HOST = 1
} aclrtRunMode;

typedef enum aclrtEventRecordedStatus {
    ACL_EVENT_RECORDED_STATUS_NOT_READY = 0,
    ACL_EVENT_RECORDED_STATUS_COMPLETE = 1
} aclrtEventRecordedStatus;

typedef enum aclrtStreamStatus {
    ACL_STREAM_STATUS_COMPLETE = 0,
    ACL_STREAM_STATUS_NOT_READY = 1,
    ACL_STREAM_STATUS_RESERVED = 0xFFFF
} aclrtStreamStatus;

typedef enum aclrtCallbackBlockType {
    ACL_CALLBACK_NO_BLOCK = 0,
    ACL_CALLBACK_BLOCK = 1
} aclrtCallbackBlockType;

typedef enum aclrtMemcpyKind {
    ACL_MEMCPY_HOST_TO_HOST = 0,
    ACL_MEMCPY_HOST_TO_DEVICE = 1,
    ACL_MEMCPY_DEVICE_TO_HOST = 2,
    ACL_MEMCPY_DEVICE_TO_DEVICE = 3,
    ACL_MEMCPY_DEFAULT = 4,
    ACL_MEMCPY_HOST_TO_BUF_TO_DEVICE = 5,
    ACL_MEMCPY_INNER_DEVICE_TO_DEVICE = 6,
    ACL_MEMCPY_INTER_DEVICE_TO_DEVICE = 7
} aclrtMemcpyKind;

typedef enum aclrtMemMallocPolicy {
    ACL_MEM_MALLOC_HUGE_FIRST = 0,
    ACL_MEM_MALLOC_HUGE_ONLY = 1,
    ACL_MEM_MALLOC_NORMAL_ONLY = 2,
    ACL_MEM_MALLOC_HUGE_FIRST_P2P = 3,
    ACL_MEM_MALLOC_HUGE_ONLY_P2P = 4,
    ACL_MEM_MALLOC_NORMAL_ONLY_P2P = 5,
    ACL_MEM_MALLOC_HUGE1G_ONLY = 6,
    ACL_MEM_MALLOC_HUGE1G_ONLY_P2P = 7,
    ACL_MEM_TYPE_LOW_BAND_WIDTH = 0x0100,
    ACL_MEM_TYPE_HIGH_BAND_WIDTH = 0x1000,
    ACL_MEM_ACCESS_USER_SPACE_READONLY = 0x100000
} aclrtMemMallocPolicy;

typedef enum aclrtMemAttr {
    ACL_DDR_MEM = 0,
    ACL_HBM_MEM = 1,
    ACL_DDR_MEM_HUGE = 2,
    ACL_DDR_MEM_NORMAL = 3,
    ACL_HBM_MEM_HUGE = 4,
    ACL_HBM_MEM_NORMAL = 5,
    ACL_DDR_MEM_P2P_HUGE = 6,
    ACL_DDR_MEM_P2P_NORMAL = 7,
    ACL_HBM_MEM_P2P_HUGE = 8,
    ACL_HBM_MEM_P2P_NORMAL = 9,
    ACL_HBM_MEM_HUGE1G = 10,
    ACL_HBM_MEM_P2P_HUGE1G = 11,
    ACL_MEM_NORMAL = 12,
    ACL_MEM_HUGE = 13,
    ACL_MEM_HUGE1G = 14,
    ACL_MEM_P2P_NORMAL = 15,
    ACL_MEM_P2P_HUGE = 16,
    ACL_MEM_P2P_HUGE1G = 17
} aclrtMemAttr;

typedef enum {
    ACL_DEV_ATTR_AICPU_CORE_NUM = 1,
    ACL_DEV_ATTR_AICORE_CORE_NUM = 101,
    ACL_DEV_ATTR_CUBE_CORE_NUM = 102,
    ACL_DEV_ATTR_VECTOR_CORE_NUM = 201,
    ACL_DEV_ATTR_TOTAL_GLOBAL_MEM_SIZE = 301,
    ACL_DEV_ATTR_L2_CACHE_SIZE = 302,
    ACL_DEV_ATTR_IS_VIRTUAL = 501
} aclrtDevAttr;

typedef enum aclrtLastErrLevel {
    ACL_RT_THREAD_LEVEL = 0
} aclrtLastErrLevel;

typedef enum aclrtDeviceStatus {
    ACL_RT_DEVICE_STATUS_NORMAL = 0,
    ACL_RT_DEVICE_STATUS_ABNORMAL = 1,
    ACL_RT_DEVICE_STATUS_END = 0xFFFF
} aclrtDeviceStatus;

typedef enum aclrtMemLocationType {
    ACL_MEM_LOCATION_TYPE_HOST = 0,
    ACL_MEM_LOCATION_TYPE_DEVICE = 1,
    ACL_MEM_LOCATION_TYPE_UNREGISTERED = 2,
    ACL_MEM_LOCATION_TYPE_HOST_NUMA = 4
} aclrtMemLocationType;

typedef struct aclrtMemLocation {
    uint32_t id;
    aclrtMemLocationType type;
} aclrtMemLocation;

typedef struct aclrtPtrAttributes {
    aclrtMemLocation location;
    uint32_t pageSize;
    uint32_t rsv[4];
} aclrtPtrAttributes;

typedef struct aclrtUtilizationExtendInfo aclrtUtilizationExtendInfo;

/* Percentages; -1 where the hardware has no such unit or the value is unsupported
 * (memoryUtilization is always -1 on the device, per the AscendCL docs). */
typedef struct aclrtUtilizationInfo {
    int32_t cubeUtilization;
    int32_t vectorUtilization;
    int32_t aicpuUtilization;
    int32_t memoryUtilization;
    aclrtUtilizationExtendInfo *utilizationExtend;
} aclrtUtilizationInfo;

typedef void (*aclrtCallback)(void *userData);
typedef void (*aclrtHostFunc)(void *args);

/* ---- kernel loading and launch (acl_rt.h; hicann/runtime docs/zh/api_ref/14_Kernel_loading_and_execution.md) ---- */

typedef void *aclrtBinHandle;
typedef void *aclrtFuncHandle;
typedef void *aclrtArgsHandle;
typedef void *aclrtParamHandle;

/* aclrtBinaryLoadOptionValue.magic values */
#define ACL_RT_BINARY_MAGIC_ELF_AICORE 0x43554245
#define ACL_RT_BINARY_MAGIC_ELF_VECTOR_CORE 0x41415246
#define ACL_RT_BINARY_MAGIC_ELF_CUBE_CORE 0x41494343

typedef enum aclrtBinaryLoadOptionType {
    ACL_RT_BINARY_LOAD_OPT_LAZY_LOAD = 1,
    ACL_RT_BINARY_LOAD_OPT_LAZY_MAGIC = 2,
    ACL_RT_BINARY_LOAD_OPT_MAGIC = 2,
    ACL_RT_BINARY_LOAD_OPT_CPU_KERNEL_MODE = 3
} aclrtBinaryLoadOptionType;

typedef union aclrtBinaryLoadOptionValue {
    uint32_t isLazyLoad;
    uint32_t magic;
    int32_t cpuKernelMode;
    uint32_t rsv[4];
} aclrtBinaryLoadOptionValue;

typedef struct {
    aclrtBinaryLoadOptionType type;
    aclrtBinaryLoadOptionValue value;
} aclrtBinaryLoadOption;

typedef struct aclrtBinaryLoadOptions {
    aclrtBinaryLoadOption *options;
    size_t numOpt;
} aclrtBinaryLoadOptions;

typedef enum {
    ACL_RT_ENGINE_TYPE_AIC = 0,
    ACL_RT_ENGINE_TYPE_AIV = 1
} aclrtEngineType;

typedef enum aclrtLaunchKernelAttrId {
    ACL_RT_LAUNCH_KERNEL_ATTR_SCHEM_MODE = 1,
    ACL_RT_LAUNCH_KERNEL_ATTR_DYN_UBUF_SIZE = 2,
    ACL_RT_LAUNCH_KERNEL_ATTR_ENGINE_TYPE = 3,
    ACL_RT_LAUNCH_KERNEL_ATTR_BLOCKDIM_OFFSET = 4,
    ACL_RT_LAUNCH_KERNEL_ATTR_BLOCK_TASK_PREFETCH = 5,
    ACL_RT_LAUNCH_KERNEL_ATTR_DATA_DUMP = 6,
    ACL_RT_LAUNCH_KERNEL_ATTR_TIMEOUT = 7,
    ACL_RT_LAUNCH_KERNEL_ATTR_TIMEOUT_US = 8
} aclrtLaunchKernelAttrId;

typedef struct {
    uint32_t timeoutLow;
    uint32_t timeoutHigh;
} aclrtTimeoutUs;

/* (CANN also has a deprecated alias member, localMemorySize, of dynUBufSize) */
typedef union aclrtLaunchKernelAttrValue {
    uint8_t schemMode;
    uint32_t dynUBufSize;
    aclrtEngineType engineType;
    uint32_t blockDimOffset;
    uint8_t isBlockTaskPrefetch;
    uint8_t isDataDump;
    uint16_t timeout;            /* seconds */
    aclrtTimeoutUs timeoutUs;    /* microseconds, split in two 32-bit halves */
    uint32_t rsv[4];
} aclrtLaunchKernelAttrValue;

typedef struct aclrtLaunchKernelAttr {
    aclrtLaunchKernelAttrId id;
    aclrtLaunchKernelAttrValue value;
} aclrtLaunchKernelAttr;

typedef struct aclrtLaunchKernelCfg {
    aclrtLaunchKernelAttr *attrs;
    size_t numAttrs;
} aclrtLaunchKernelCfg;

/* aclrtLaunchKernelWithHostArgs: the pointer at hostArgs+addrOffset is set to the device copy of
 * the data at hostArgs+dataOffset */
typedef struct {
    uint32_t addrOffset;
    uint32_t dataOffset;
} aclrtPlaceHolderInfo;
