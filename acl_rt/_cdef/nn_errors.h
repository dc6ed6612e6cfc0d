/* canna: aclnn status codes (aclnnStatus values returned by every aclnn* / aclCreate* call).
 *
 * @cann-headers: acl/acl.h aclnn/opdev/op_errno.h
 *
 * Names and values are facts of CANN's aclnn/opdev/op_errno.h (hicann/opbase
 * include/nnopbase/opdev/op_errno.h at aa3cd74b, installed as include/aclnn/opdev/op_errno.h;
 * docs/en/api/nnopbase/opdev/aclnn_return_code/aclnn_return_codes.md).
 * The detail text of a failure comes from aclGetRecentErrMsg(). The torch-npu wheel does not
 * ship op_errno.h, so tests/test_abi.py reports these as UNCHECKED. acl_rt._errors reads this
 * file to name codes.
 */

#define ACLNN_SUCCESS                                 0
#define ACLNN_ERR_PARAM_NULLPTR                       161001
#define ACLNN_ERR_PARAM_INVALID                       161002
#define ACLNN_ERR_RUNTIME_ERROR                       361001
#define ACLNN_ERR_INNER                               561000
#define ACLNN_ERR_INNER_INFERSHAPE_ERROR              561001
#define ACLNN_ERR_INNER_TILING_ERROR                  561002
#define ACLNN_ERR_INNER_FIND_KERNEL_ERROR             561003
#define ACLNN_ERR_INNER_CREATE_EXECUTOR               561101
#define ACLNN_ERR_INNER_NOT_TRANS_EXECUTOR            561102
#define ACLNN_ERR_INNER_NULLPTR                       561103
#define ACLNN_ERR_INNER_WRONG_ATTR_INFO_SIZE          561104
#define ACLNN_ERR_INNER_KEY_CONFLICT                  561105
#define ACLNN_ERR_INNER_INVALID_IMPL_MODE             561106
#define ACLNN_ERR_INNER_OPP_PATH_NOT_FOUND            561107
#define ACLNN_ERR_INNER_LOAD_JSON_FAILED              561108
#define ACLNN_ERR_INNER_JSON_VALUE_NOT_FOUND          561109
#define ACLNN_ERR_INNER_JSON_FORMAT_INVALID           561110
#define ACLNN_ERR_INNER_JSON_DTYPE_INVALID            561111
#define ACLNN_ERR_INNER_OPP_KERNEL_PKG_NOT_FOUND      561112
#define ACLNN_ERR_INNER_OP_FILE_INVALID               561113
#define ACLNN_ERR_INNER_ATTR_NUM_OUT_OF_BOUND         561114
#define ACLNN_ERR_INNER_ATTR_LEN_NOT_ENOUGH           561115
#define ACLNN_ERR_INNER_INPUT_NUM_IN_JSON_TOO_LARGE   561116
#define ACLNN_ERR_INNER_INPUT_JSON_IS_NULL            561117
#define ACLNN_ERR_INNER_STATIC_WORKSPACE_INVALID      561118
#define ACLNN_ERR_INNER_STATIC_BLOCK_DIM_INVALID      561119
