/* canna: types of the aclnn operator API (the op libraries: libnnopbase + libopapi*).
 *
 * @cann-headers: acl/acl.h aclnn/acl_meta.h aclnn/aclnn_base.h
 *
 * Where each declaration comes from (facts of the ABI, written for canna, never copied text):
 *  - the opaque handles aclTensor, aclScalar, aclIntArray, aclFloatArray, aclBoolArray,
 *    aclTensorList, aclScalarList, aclOpExecutor and `typedef int32_t aclnnStatus`:
 *    CANN's aclnn/acl_meta.h (hicann/opbase include/nnopbase/aclnn/acl_meta.h at aa3cd74b),
 *  - aclDataType and aclFormat with their exact values: AscendCL's acl/acl_base_rt.h
 *    (interface 1.17.0, hicann/runtime include/external/acl/). These two are checked against the
 *    torch-npu wheel's headers by tests/test_abi.py; the aclnn handles need aclnn/acl_meta.h,
 *    which the wheel does not ship, so the ABI test reports them UNCHECKED.
 *
 * Read by cffi's cdef() and by the C compiler (kernels/_sim includes it): no preprocessor
 * conditionals, integer-only #defines.
 */

typedef struct aclOpExecutor aclOpExecutor;
typedef struct aclTensor aclTensor;
typedef struct aclScalar aclScalar;
typedef struct aclIntArray aclIntArray;
typedef struct aclFloatArray aclFloatArray;
typedef struct aclBoolArray aclBoolArray;
typedef struct aclTensorList aclTensorList;
typedef struct aclScalarList aclScalarList;
typedef int32_t aclnnStatus;

typedef enum {
    ACL_DT_UNDEFINED = -1,
    ACL_FLOAT = 0,
    ACL_FLOAT16 = 1,
    ACL_INT8 = 2,
    ACL_INT32 = 3,
    ACL_UINT8 = 4,
    ACL_INT16 = 6,
    ACL_UINT16 = 7,
    ACL_UINT32 = 8,
    ACL_INT64 = 9,
    ACL_UINT64 = 10,
    ACL_DOUBLE = 11,
    ACL_BOOL = 12,
    ACL_STRING = 13,
    ACL_COMPLEX64 = 16,
    ACL_COMPLEX128 = 17,
    ACL_BF16 = 27,
    ACL_INT4 = 29,
    ACL_UINT1 = 30,
    ACL_COMPLEX32 = 33,
    ACL_HIFLOAT8 = 34,
    ACL_FLOAT8_E5M2 = 35,
    ACL_FLOAT8_E4M3FN = 36,
    ACL_FLOAT8_E8M0 = 37,
    ACL_FLOAT6_E3M2 = 38,
    ACL_FLOAT6_E2M3 = 39,
    ACL_FLOAT4_E2M1 = 40,
    ACL_FLOAT4_E1M2 = 41
} aclDataType;

typedef enum {
    ACL_FORMAT_UNDEFINED = -1,
    ACL_FORMAT_NCHW = 0,
    ACL_FORMAT_NHWC = 1,
    ACL_FORMAT_ND = 2,
    ACL_FORMAT_NC1HWC0 = 3,
    ACL_FORMAT_FRACTAL_Z = 4,
    ACL_FORMAT_NC1HWC0_C04 = 12,
    ACL_FORMAT_HWCN = 16,
    ACL_FORMAT_NDHWC = 27,
    ACL_FORMAT_FRACTAL_NZ = 29,
    ACL_FORMAT_NCDHW = 30,
    ACL_FORMAT_NDC1HWC0 = 32,
    ACL_FRACTAL_Z_3D = 33,
    ACL_FORMAT_NC = 35,
    ACL_FORMAT_NCL = 47,
    ACL_FORMAT_FRACTAL_NZ_C0_16 = 50,
    ACL_FORMAT_FRACTAL_NZ_C0_32 = 51,
    ACL_FORMAT_FRACTAL_NZ_C0_2 = 52,
    ACL_FORMAT_FRACTAL_NZ_C0_4 = 53,
    ACL_FORMAT_FRACTAL_NZ_C0_8 = 54
} aclFormat;
