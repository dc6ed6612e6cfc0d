/* canna: the DLPack C ABI, written for canna from the DLPack specification
 * (dmlc/dlpack include/dlpack/dlpack.h, v1.3 as shipped in torch 2.13, with its C exchange API).
 *
 * Only what canna needs. The layouts are ABI facts (offsets checked by static asserts below on
 * LP64); every name and comment here is canna's own. Do not include the upstream dlpack.h next
 * to this file: both define the same type names.
 */
#ifndef CANNA_DLPACK_ABI_H
#define CANNA_DLPACK_ABI_H

#include <stddef.h>
#include <stdint.h>

/* the version canna writes into versioned capsules: ABI major 1, minor 3 (v1.3) */
#define CANNA_DLPACK_MAJOR 1
#define CANNA_DLPACK_MINOR 3

/* DLManagedTensorVersioned.flags bits */
#define CANNA_DLPACK_FLAG_READ_ONLY (UINT64_C(1) << 0)
#define CANNA_DLPACK_FLAG_IS_COPIED (UINT64_C(1) << 1)
#define CANNA_DLPACK_FLAG_SUBBYTE_PADDED (UINT64_C(1) << 2)

/* device types (DLDeviceType values; the enum is 4 bytes on every ABI we build for) */
enum {
    kDLCPU = 1,
    kDLCUDA = 2,
    kDLCUDAHost = 3,
    kDLOpenCL = 4,
    kDLVulkan = 7,
    kDLMetal = 8,
    kDLVPI = 9,
    kDLROCM = 10,
    kDLROCMHost = 11,
    kDLExtDev = 12,     /* what torch_npu uses for Ascend memory */
    kDLCUDAManaged = 13,
    kDLOneAPI = 14,
    kDLWebGPU = 15,
    kDLHexagon = 16,
    kDLMAIA = 17,
    kDLTrn = 18,
    kDLTPU = 19,        /* dlpack main, unreleased */
    kDLTPUHost = 20,    /* dlpack main, unreleased */
    kDLAscend = 21,     /* dlpack main, unreleased (PR #189) */
};
typedef int32_t DLDeviceType;

/* type codes (DLDataTypeCode values, stored in a uint8_t) */
enum {
    kDLInt = 0,
    kDLUInt = 1,
    kDLFloat = 2,
    kDLOpaqueHandle = 3,
    kDLBfloat = 4,
    kDLComplex = 5,
    kDLBool = 6,
    /* 7..17: float8 / float6 / float4 variants (v1.1); 18: bfloat16 complex (main) */
};

typedef struct {
    uint32_t major;
    uint32_t minor;
} DLPackVersion;

typedef struct {
    DLDeviceType device_type;
    int32_t device_id;
} DLDevice;

typedef struct {
    uint8_t code;    /* a type code above */
    uint8_t bits;    /* bits of one lane */
    uint16_t lanes;  /* vector lanes; 1 for every framework canna talks to */
} DLDataType;

typedef struct {
    void *data;           /* base address; NULL allowed when the tensor has no elements */
    DLDevice device;
    int32_t ndim;
    DLDataType dtype;
    int64_t *shape;       /* ndim entries; may be NULL when ndim == 0 */
    int64_t *strides;     /* in elements, signed; NULL = compact row-major (before v1.2) */
    uint64_t byte_offset; /* the first element is at (char *)data + byte_offset */
} DLTensor;

/* legacy managed tensor, in a capsule named "dltensor" */
typedef struct DLManagedTensor {
    DLTensor dl_tensor;
    void *manager_ctx;
    void (*deleter)(struct DLManagedTensor *self);   /* frees self too; may be NULL */
} DLManagedTensor;

/* versioned managed tensor, in a capsule named "dltensor_versioned"; everything up to and
 * including `flags` keeps its offset across major versions */
typedef struct DLManagedTensorVersioned {
    DLPackVersion version;
    void *manager_ctx;
    void (*deleter)(struct DLManagedTensorVersioned *self);
    uint64_t flags;
    DLTensor dl_tensor;
} DLManagedTensorVersioned;

/* the C exchange API (DLPack 1.3): a process-lifetime table found as the PyCapsule
 * "dlpack_exchange_api" in type(x).__dlpack_c_exchange_api__ */
typedef struct DLPackExchangeAPIHeader {
    DLPackVersion version;
    struct DLPackExchangeAPIHeader *prev_api;
} DLPackExchangeAPIHeader;

typedef struct {
    DLPackExchangeAPIHeader header;
    int (*managed_tensor_allocator)(DLTensor *prototype, DLManagedTensorVersioned **out, void *error_ctx,
                                    void (*set_error)(void *error_ctx, const char *kind, const char *message));
    int (*managed_tensor_from_py_object_no_sync)(void *py_object, DLManagedTensorVersioned **out);
    int (*managed_tensor_to_py_object_no_sync)(DLManagedTensorVersioned *tensor, void **out_py_object);
    int (*dltensor_from_py_object_no_sync)(void *py_object, DLTensor *out);
    int (*current_work_stream)(DLDeviceType device_type, int32_t device_id, void **out_current_stream);
} DLPackExchangeAPI;

#if defined(__x86_64__) || defined(__aarch64__)
_Static_assert(sizeof(DLTensor) == 48, "DLTensor layout");
_Static_assert(offsetof(DLTensor, byte_offset) == 40, "DLTensor layout");
_Static_assert(sizeof(DLManagedTensor) == 64, "DLManagedTensor layout");
_Static_assert(offsetof(DLManagedTensor, deleter) == 56, "DLManagedTensor layout");
_Static_assert(sizeof(DLManagedTensorVersioned) == 80, "DLManagedTensorVersioned layout");
_Static_assert(offsetof(DLManagedTensorVersioned, flags) == 24, "DLManagedTensorVersioned layout");
_Static_assert(offsetof(DLManagedTensorVersioned, dl_tensor) == 32, "DLManagedTensorVersioned layout");
_Static_assert(sizeof(DLPackExchangeAPI) == 56, "DLPackExchangeAPI layout");
#endif

#endif
