/* canna: the aclnn operator API: the meta API (libnnopbase) and the two-phase op calls (libopapi*).
 *
 * @cann-headers: acl/acl.h aclnn/acl_meta.h aclnn/aclnn_base.h aclnnop/aclnn_adaptive_avg_pool2d.h aclnnop/aclnn_adaptive_avg_pool2d_backward.h aclnnop/aclnn_add.h aclnnop/aclnn_addmm.h aclnnop/aclnn_amax.h aclnnop/aclnn_apply_adam_w_v2.h aclnnop/aclnn_batch_matmul.h aclnnop/aclnn_batch_norm.h aclnnop/aclnn_batch_norm_backward.h aclnnop/aclnn_batch_norm_stats.h aclnnop/aclnn_cast.h aclnnop/aclnn_cat.h aclnnop/aclnn_constant_pad_nd.h aclnnop/aclnn_convolution.h aclnnop/aclnn_convolution_backward.h aclnnop/aclnn_copy.h aclnnop/aclnn_cos.h aclnnop/aclnn_cross_entropy_loss.h aclnnop/aclnn_cross_entropy_loss_grad.h aclnnop/aclnn_div.h aclnnop/aclnn_dropout_do_mask.h aclnnop/aclnn_dropout_gen_mask_v2.h aclnnop/aclnn_embedding.h aclnnop/aclnn_embedding_dense_backward.h aclnnop/aclnn_exp.h aclnnop/aclnn_flash_attention_score.h aclnnop/aclnn_flash_attention_score_grad.h aclnnop/aclnn_fused_sgd.h aclnnop/aclnn_gather.h aclnnop/aclnn_gelu.h aclnnop/aclnn_gelu_backward.h aclnnop/aclnn_gelu_backward_v2.h aclnnop/aclnn_gelu_v2.h aclnnop/aclnn_hardsigmoid.h aclnnop/aclnn_hardsigmoid_backward.h aclnnop/aclnn_hardswish.h aclnnop/aclnn_hardswish_backward.h aclnnop/aclnn_layer_norm.h aclnnop/aclnn_layer_norm_backward.h aclnnop/aclnn_log.h aclnnop/aclnn_logical_not.h aclnnop/aclnn_logsoftmax.h aclnnop/aclnn_logsoftmax_backward.h aclnnop/aclnn_matmul.h aclnnop/aclnn_max_pool2d_with_indices.h aclnnop/aclnn_max_pool2d_with_indices_backward.h aclnnop/aclnn_mean.h aclnnop/aclnn_mm.h aclnnop/aclnn_mse_loss.h aclnnop/aclnn_mse_loss_backward.h aclnnop/aclnn_mul.h aclnnop/aclnn_neg.h aclnnop/aclnn_nll_loss.h aclnnop/aclnn_nll_loss2d.h aclnnop/aclnn_nll_loss2d_backward.h aclnnop/aclnn_nll_loss_backward.h aclnnop/aclnn_pow.h aclnnop/aclnn_reduce_sum.h aclnnop/aclnn_relu.h aclnnop/aclnn_rms_norm.h aclnnop/aclnn_rms_norm_grad.h aclnnop/aclnn_rsqrt.h aclnnop/aclnn_scatter_add.h aclnnop/aclnn_sigmoid.h aclnnop/aclnn_sigmoid_backward.h aclnnop/aclnn_silu.h aclnnop/aclnn_silu_backward.h aclnnop/aclnn_sin.h aclnnop/aclnn_softmax.h aclnnop/aclnn_softmax_backward.h aclnnop/aclnn_sqrt.h aclnnop/aclnn_sub.h aclnnop/aclnn_tanh.h aclnnop/aclnn_tanh_backward.h aclnnop/aclnn_threshold_backward.h
 *
 * Exact prototypes of CANN's aclnn API, written for canna (the parameter lists are facts of the
 * ABI; no header text is copied). Where each one comes from:
 *  - meta API (aclCreateTensor & co., aclGet*, executor reuse, aclnnInit/aclnnFinalize):
 *    CANN's aclnn/acl_meta.h and aclnn/aclnn_base.h, hicann/opbase aa3cd74b
 *    (include/nnopbase/aclnn/, docs/en/api/nnopbase/aclnn/ pages);
 *  - math ops (libopapi_math): hicann/ops-math c4193324, math/<op>/op_api/aclnn_<op>.h and
 *    conversion/view_copy/op_api/aclnn_copy.h;
 *  - nn ops (libopapi_nn): hicann/ops-nn e5c3fa93, <family>/<op>/op_api/aclnn_<op>.h; for the ops
 *    whose header is generated at build time (RmsNorm, RmsNormGrad, CrossEntropyLoss,
 *    CrossEntropyLossGrad) the prototype in the op's docs/aclnn<Op>.md of the same commit;
 *  - the op each framework call maps to follows torch_npu's op-plugin (Ascend/op-plugin 517f2e7d,
 *    op_plugin/ops/opapi/ sources, EXEC_NPU_CMD(aclnnXxx, ...) call sites): linear -> aclnnAddmm
 *    (or aclnnMm without bias) on the transposed weight, gelu -> aclnnGeluV2 (approximate 0 none,
 *    1 tanh), gelu backward -> aclnnGeluBackwardV2 ("none"/"tanh"), relu backward ->
 *    aclnnThresholdBackward, cross entropy -> aclnnLogSoftmax + aclnnNLLLoss (or the fused
 *    aclnnCrossEntropyLoss).
 * The library each symbol lives in (CANN's header-to-library table in the AscendCL API reference): the meta API in libnnopbase.so, the ops in
 * libopapi.so (all-in-one) or the split libopapi_math.so / libopapi_nn.so; canna's simulator
 * exports all of them from kernels/_sim/libopapi_sim.so. The torch-npu wheel ships no aclnn
 * headers, so tests/test_abi.py reports every declaration here as UNCHECKED.
 *
 * Two-phase calling pattern: aclnnXxxGetWorkspaceSize(..., &workspaceSize, &executor) validates
 * the arguments and builds an executor; aclnnXxx(workspace, workspaceSize, executor, stream)
 * queues the work on the stream (asynchronous) and consumes the executor, unless
 * aclSetAclOpExecutorRepeatable(executor) was called right after phase 1 (then the caller
 * destroys it with aclDestroyAclOpExecutor). Read by cffi's cdef() and by the C compiler.
 */

/* ---- meta API: aclnn/acl_meta.h (libnnopbase) ---- */
aclTensor *aclCreateTensor(const int64_t *viewDims, uint64_t viewDimsNum, aclDataType dataType,
    const int64_t *stride, int64_t offset, aclFormat format, const int64_t *storageDims,
    uint64_t storageDimsNum, void *tensorData);
aclScalar *aclCreateScalar(void *value, aclDataType dataType);
aclIntArray *aclCreateIntArray(const int64_t *value, uint64_t size);
aclFloatArray *aclCreateFloatArray(const float *value, uint64_t size);
aclBoolArray *aclCreateBoolArray(const bool *value, uint64_t size);
aclTensorList *aclCreateTensorList(const aclTensor *const *value, uint64_t size);
aclScalarList *aclCreateScalarList(const aclScalar *const *value, uint64_t size);
aclnnStatus aclDestroyTensor(const aclTensor *tensor);
aclnnStatus aclDestroyScalar(const aclScalar *scalar);
aclnnStatus aclDestroyIntArray(const aclIntArray *array);
aclnnStatus aclDestroyFloatArray(const aclFloatArray *array);
aclnnStatus aclDestroyBoolArray(const aclBoolArray *array);
aclnnStatus aclDestroyTensorList(const aclTensorList *array);
aclnnStatus aclDestroyScalarList(const aclScalarList *array);
aclnnStatus aclGetViewShape(const aclTensor *tensor, int64_t **viewDims, uint64_t *viewDimsNum);
aclnnStatus aclGetStorageShape(const aclTensor *tensor, int64_t **storageDims, uint64_t *storageDimsNum);
aclnnStatus aclGetViewStrides(const aclTensor *tensor, int64_t **stridesValue, uint64_t *stridesNum);
aclnnStatus aclGetViewOffset(const aclTensor *tensor, int64_t *offset);
aclnnStatus aclGetFormat(const aclTensor *tensor, aclFormat *format);
aclnnStatus aclGetDataType(const aclTensor *tensor, aclDataType *dataType);
aclnnStatus aclGetIntArraySize(const aclIntArray *array, uint64_t *size);
aclnnStatus aclGetFloatArraySize(const aclFloatArray *array, uint64_t *size);
aclnnStatus aclGetBoolArraySize(const aclBoolArray *array, uint64_t *size);
aclnnStatus aclGetTensorListSize(const aclTensorList *tensorList, uint64_t *size);
aclnnStatus aclGetScalarListSize(const aclScalarList *scalarList, uint64_t *size);
aclnnStatus aclInitTensor(aclTensor *tensor, const int64_t *viewDims, uint64_t viewDimsNum,
    aclDataType dataType, const int64_t *stride, int64_t offset, aclFormat format,
    const int64_t *storageDims, uint64_t storageDimsNum, void *tensorDataAddr);
aclnnStatus aclSetAclOpExecutorRepeatable(aclOpExecutor *executor);
aclnnStatus aclDestroyAclOpExecutor(aclOpExecutor *executor);
aclnnStatus aclSetInputTensorAddr(aclOpExecutor *executor, const size_t index, aclTensor *tensor,
    void *addr);
aclnnStatus aclSetOutputTensorAddr(aclOpExecutor *executor, const size_t index, aclTensor *tensor,
    void *addr);
aclnnStatus aclSetTensorAddr(aclOpExecutor *executor, const size_t index, aclTensor *tensor, void *addr);
aclnnStatus aclSetRawTensorAddr(aclTensor *tensor, void *addr);
aclnnStatus aclGetRawTensorAddr(const aclTensor *tensor, void **addr);

/* ---- aclnn/aclnn_base.h (libnnopbase) ---- */
aclnnStatus aclnnInit(const char *configPath);
aclnnStatus aclnnFinalize(void);

/* ---- ops: aclnnop/aclnn_<op>.h ----
 * cubeMathType (matmul-class ops): 0 KEEP_DTYPE, 1 ALLOW_FP32_DOWN_PRECISION, 2 USE_FP16,
 * 3 USE_HF32 (OPS-NN aclnnMatmul.md). reduction (NLLLoss*): 0 none, 1 mean, 2 sum. */
/* aclnnop/aclnn_add.h (libopapi_math) */
aclnnStatus aclnnAddGetWorkspaceSize(const aclTensor *self, const aclTensor *other,
    const aclScalar *alpha, aclTensor *out, uint64_t *workspaceSize, aclOpExecutor **executor);
aclnnStatus aclnnAdd(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    aclrtStream stream);
/* aclnnop/aclnn_add.h (libopapi_math) */
aclnnStatus aclnnAddsGetWorkspaceSize(const aclTensor *self, const aclScalar *other,
    const aclScalar *alpha, aclTensor *out, uint64_t *workspaceSize, aclOpExecutor **executor);
aclnnStatus aclnnAdds(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    aclrtStream stream);
/* aclnnop/aclnn_sub.h (libopapi_math) */
aclnnStatus aclnnSubGetWorkspaceSize(const aclTensor *self, const aclTensor *other,
    const aclScalar *alpha, aclTensor *out, uint64_t *workspaceSize, aclOpExecutor **executor);
aclnnStatus aclnnSub(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    aclrtStream stream);
/* aclnnop/aclnn_sub.h (libopapi_math) */
aclnnStatus aclnnSubsGetWorkspaceSize(const aclTensor *self, const aclScalar *other,
    const aclScalar *alpha, aclTensor *out, uint64_t *workspaceSize, aclOpExecutor **executor);
aclnnStatus aclnnSubs(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    aclrtStream stream);
/* aclnnop/aclnn_mul.h (libopapi_math) */
aclnnStatus aclnnMulGetWorkspaceSize(const aclTensor *self, const aclTensor *other, aclTensor *out,
    uint64_t *workspaceSize, aclOpExecutor **executor);
aclnnStatus aclnnMul(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    aclrtStream stream);
/* aclnnop/aclnn_mul.h (libopapi_math) */
aclnnStatus aclnnMulsGetWorkspaceSize(const aclTensor *self, const aclScalar *other, aclTensor *out,
    uint64_t *workspaceSize, aclOpExecutor **executor);
aclnnStatus aclnnMuls(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    aclrtStream stream);
/* aclnnop/aclnn_div.h (libopapi_math) */
aclnnStatus aclnnDivGetWorkspaceSize(const aclTensor *self, const aclTensor *other, aclTensor *out,
    uint64_t *workspaceSize, aclOpExecutor **executor);
aclnnStatus aclnnDiv(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    aclrtStream stream);
/* aclnnop/aclnn_div.h (libopapi_math) */
aclnnStatus aclnnDivsGetWorkspaceSize(const aclTensor *self, const aclScalar *other, aclTensor *out,
    uint64_t *workspaceSize, aclOpExecutor **executor);
aclnnStatus aclnnDivs(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    aclrtStream stream);
/* aclnnop/aclnn_neg.h (libopapi_math) */
aclnnStatus aclnnNegGetWorkspaceSize(const aclTensor *self, aclTensor *out, uint64_t *workspaceSize,
    aclOpExecutor **executor);
aclnnStatus aclnnNeg(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    const aclrtStream stream);
/* aclnnop/aclnn_abs.h (libopapi_math) */
aclnnStatus aclnnAbsGetWorkspaceSize(const aclTensor *self, aclTensor *out, uint64_t *workspaceSize,
    aclOpExecutor **executor);
aclnnStatus aclnnAbs(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    aclrtStream stream);
/* aclnnop/aclnn_sign.h (libopapi_math) */
aclnnStatus aclnnSignGetWorkspaceSize(const aclTensor *self, aclTensor *out, uint64_t *workspaceSize,
    aclOpExecutor **executor);
aclnnStatus aclnnSign(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    aclrtStream stream);
/* aclnnop/aclnn_exp.h (libopapi_math) */
aclnnStatus aclnnExpGetWorkspaceSize(const aclTensor *self, aclTensor *out, uint64_t *workspaceSize,
    aclOpExecutor **executor);
aclnnStatus aclnnExp(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    aclrtStream stream);
/* aclnnop/aclnn_log.h (libopapi_math) */
aclnnStatus aclnnLogGetWorkspaceSize(const aclTensor *self, aclTensor *out, uint64_t *workspaceSize,
    aclOpExecutor **executor);
aclnnStatus aclnnLog(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    aclrtStream stream);
/* aclnnop/aclnn_sqrt.h (libopapi_math) */
aclnnStatus aclnnSqrtGetWorkspaceSize(const aclTensor *self, aclTensor *out, uint64_t *workspaceSize,
    aclOpExecutor **executor);
aclnnStatus aclnnSqrt(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    aclrtStream stream);
/* aclnnop/aclnn_pow.h (libopapi_math) */
aclnnStatus aclnnPowTensorScalarGetWorkspaceSize(const aclTensor *self, const aclScalar *exponent,
    const aclTensor *out, uint64_t *workspaceSize, aclOpExecutor **executor);
aclnnStatus aclnnPowTensorScalar(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    const aclrtStream stream);
/* aclnnop/aclnn_relu.h (libopapi_nn) */
aclnnStatus aclnnReluGetWorkspaceSize(const aclTensor *self, const aclTensor *out,
    uint64_t *workspaceSize, aclOpExecutor **executor);
aclnnStatus aclnnRelu(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    const aclrtStream stream);
/* aclnnop/aclnn_gelu.h (libopapi_nn) */
aclnnStatus aclnnGeluGetWorkspaceSize(const aclTensor *self, aclTensor *out, uint64_t *workspaceSize,
    aclOpExecutor **executor);
aclnnStatus aclnnGelu(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    const aclrtStream stream);
/* aclnnop/aclnn_gelu_v2.h (libopapi_nn) */
aclnnStatus aclnnGeluV2GetWorkspaceSize(const aclTensor *x, int64_t approximate, aclTensor *y,
    uint64_t *workspaceSize, aclOpExecutor **executor);
aclnnStatus aclnnGeluV2(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    const aclrtStream stream);
/* aclnnop/aclnn_silu.h (libopapi_nn) */
aclnnStatus aclnnSiluGetWorkspaceSize(const aclTensor *self, aclTensor *out, uint64_t *workspaceSize,
    aclOpExecutor **executor);
aclnnStatus aclnnSilu(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    aclrtStream stream);
/* aclnnop/aclnn_sigmoid.h (libopapi_nn) */
aclnnStatus aclnnSigmoidGetWorkspaceSize(const aclTensor *self, aclTensor *out, uint64_t *workspaceSize,
    aclOpExecutor **executor);
aclnnStatus aclnnSigmoid(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    const aclrtStream stream);
/* aclnnop/aclnn_tanh.h (libopapi_math) */
aclnnStatus aclnnTanhGetWorkspaceSize(const aclTensor *self, aclTensor *out, uint64_t *workspaceSize,
    aclOpExecutor **executor);
aclnnStatus aclnnTanh(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    const aclrtStream stream);
/* aclnnop/aclnn_softmax.h (libopapi_nn) */
aclnnStatus aclnnSoftmaxGetWorkspaceSize(const aclTensor *self, int64_t dim, aclTensor *out,
    uint64_t *workspaceSize, aclOpExecutor **executor);
aclnnStatus aclnnSoftmax(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    aclrtStream stream);
/* aclnnop/aclnn_logsoftmax.h (libopapi_nn) */
aclnnStatus aclnnLogSoftmaxGetWorkspaceSize(const aclTensor *self, int64_t dim, aclTensor *out,
    uint64_t *workspaceSize, aclOpExecutor **executor);
aclnnStatus aclnnLogSoftmax(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    aclrtStream stream);
/* aclnnop/aclnn_layer_norm.h (libopapi_nn) */
aclnnStatus aclnnLayerNormGetWorkspaceSize(const aclTensor *input, const aclIntArray *normalizedShape,
    const aclTensor *weightOptional, const aclTensor *biasOptional, double eps, aclTensor *out,
    aclTensor *meanOutOptional, aclTensor *rstdOutOptional, uint64_t *workspaceSize,
    aclOpExecutor **executor);
aclnnStatus aclnnLayerNorm(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    aclrtStream stream);
/* aclnnop/aclnn_rms_norm.h (libopapi_nn) */
aclnnStatus aclnnRmsNormGetWorkspaceSize(const aclTensor *x, const aclTensor *gamma, double epsilon,
    const aclTensor *yOut, const aclTensor *rstdOut, uint64_t *workspaceSize, aclOpExecutor **executor);
aclnnStatus aclnnRmsNorm(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    aclrtStream stream);
/* aclnnop/aclnn_matmul.h (libopapi_nn) */
aclnnStatus aclnnMatmulGetWorkspaceSize(const aclTensor *self, const aclTensor *mat2, aclTensor *out,
    int8_t cubeMathType, uint64_t *workspaceSize, aclOpExecutor **executor);
aclnnStatus aclnnMatmul(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    aclrtStream stream);
/* aclnnop/aclnn_mm.h (libopapi_nn) */
aclnnStatus aclnnMmGetWorkspaceSize(const aclTensor *self, const aclTensor *mat2, aclTensor *out,
    int8_t cubeMathType, uint64_t *workspaceSize, aclOpExecutor **executor);
aclnnStatus aclnnMm(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    aclrtStream stream);
/* aclnnop/aclnn_batch_matmul.h (libopapi_nn) */
aclnnStatus aclnnBatchMatMulGetWorkspaceSize(const aclTensor *self, const aclTensor *mat2,
    aclTensor *out, int8_t cubeMathType, uint64_t *workspaceSize, aclOpExecutor **executor);
aclnnStatus aclnnBatchMatMul(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    aclrtStream stream);
/* aclnnop/aclnn_addmm.h (libopapi_nn) */
aclnnStatus aclnnAddmmGetWorkspaceSize(const aclTensor *self, const aclTensor *mat1,
    const aclTensor *mat2, const aclScalar *beta, const aclScalar *alpha, aclTensor *out,
    int8_t cubeMathType, uint64_t *workspaceSize, aclOpExecutor **executor);
aclnnStatus aclnnAddmm(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    aclrtStream stream);
/* aclnnop/aclnn_reduce_sum.h (libopapi_math) */
aclnnStatus aclnnReduceSumGetWorkspaceSize(const aclTensor *self, const aclIntArray *dims,
    bool keepDims, aclDataType dtype, aclTensor *out, uint64_t *workspaceSize,
    aclOpExecutor **executor);
aclnnStatus aclnnReduceSum(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    aclrtStream stream);
/* aclnnop/aclnn_mean.h (libopapi_math) */
aclnnStatus aclnnMeanGetWorkspaceSize(const aclTensor *self, const aclIntArray *dim, bool keepDim,
    aclDataType dtype, aclTensor *out, uint64_t *workspaceSize, aclOpExecutor **executor);
aclnnStatus aclnnMean(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    aclrtStream stream);
/* aclnnop/aclnn_amax.h (libopapi_math) */
aclnnStatus aclnnAmaxGetWorkspaceSize(const aclTensor *self, const aclIntArray *dim, bool keepDim,
    aclTensor *out, uint64_t *workspaceSize, aclOpExecutor **executor);
aclnnStatus aclnnAmax(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    aclrtStream stream);
/* aclnnop/aclnn_eq_tensor.h (libopapi_math) */
aclnnStatus aclnnEqTensorGetWorkspaceSize(const aclTensor *self, const aclTensor *other, aclTensor *out,
    uint64_t *workspaceSize, aclOpExecutor **executor);
aclnnStatus aclnnEqTensor(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    aclrtStream stream);
/* aclnnop/aclnn_eq_scalar.h (libopapi_math) */
aclnnStatus aclnnEqScalarGetWorkspaceSize(const aclTensor *self, const aclScalar *other, aclTensor *out,
    uint64_t *workspaceSize, aclOpExecutor **executor);
aclnnStatus aclnnEqScalar(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    aclrtStream stream);
/* aclnnop/aclnn_ne_tensor.h (libopapi_math) */
aclnnStatus aclnnNeTensorGetWorkspaceSize(const aclTensor *self, const aclTensor *other, aclTensor *out,
    uint64_t *workspaceSize, aclOpExecutor **executor);
aclnnStatus aclnnNeTensor(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    aclrtStream stream);
/* aclnnop/aclnn_ne_scalar.h (libopapi_math) */
aclnnStatus aclnnNeScalarGetWorkspaceSize(const aclTensor *self, const aclScalar *other, aclTensor *out,
    uint64_t *workspaceSize, aclOpExecutor **executor);
aclnnStatus aclnnNeScalar(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    aclrtStream stream);
/* aclnnop/aclnn_lt_tensor.h (libopapi_math) */
aclnnStatus aclnnLtTensorGetWorkspaceSize(const aclTensor *self, const aclTensor *other, aclTensor *out,
    uint64_t *workspaceSize, aclOpExecutor **executor);
aclnnStatus aclnnLtTensor(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    aclrtStream stream);
/* aclnnop/aclnn_lt_scalar.h (libopapi_math) */
aclnnStatus aclnnLtScalarGetWorkspaceSize(const aclTensor *self, const aclScalar *other, aclTensor *out,
    uint64_t *workspaceSize, aclOpExecutor **executor);
aclnnStatus aclnnLtScalar(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    aclrtStream stream);
/* aclnnop/aclnn_le_tensor.h (libopapi_math) */
aclnnStatus aclnnLeTensorGetWorkspaceSize(const aclTensor *self, const aclTensor *other, aclTensor *out,
    uint64_t *workspaceSize, aclOpExecutor **executor);
aclnnStatus aclnnLeTensor(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    aclrtStream stream);
/* aclnnop/aclnn_le_scalar.h (libopapi_math) */
aclnnStatus aclnnLeScalarGetWorkspaceSize(const aclTensor *self, const aclScalar *other, aclTensor *out,
    uint64_t *workspaceSize, aclOpExecutor **executor);
aclnnStatus aclnnLeScalar(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    aclrtStream stream);
/* aclnnop/aclnn_gt_tensor.h (libopapi_math) */
aclnnStatus aclnnGtTensorGetWorkspaceSize(const aclTensor *self, const aclTensor *other, aclTensor *out,
    uint64_t *workspaceSize, aclOpExecutor **executor);
aclnnStatus aclnnGtTensor(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    aclrtStream stream);
/* aclnnop/aclnn_gt_scalar.h (libopapi_math) */
aclnnStatus aclnnGtScalarGetWorkspaceSize(const aclTensor *self, const aclScalar *other, aclTensor *out,
    uint64_t *workspaceSize, aclOpExecutor **executor);
aclnnStatus aclnnGtScalar(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    aclrtStream stream);
/* aclnnop/aclnn_ge_tensor.h (libopapi_math) */
aclnnStatus aclnnGeTensorGetWorkspaceSize(const aclTensor *self, const aclTensor *other, aclTensor *out,
    uint64_t *workspaceSize, aclOpExecutor **executor);
aclnnStatus aclnnGeTensor(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    aclrtStream stream);
/* aclnnop/aclnn_ge_scalar.h (libopapi_math) */
aclnnStatus aclnnGeScalarGetWorkspaceSize(const aclTensor *self, const aclScalar *other, aclTensor *out,
    uint64_t *workspaceSize, aclOpExecutor **executor);
aclnnStatus aclnnGeScalar(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    aclrtStream stream);
/* aclnnop/aclnn_maximum.h (libopapi_math) */
aclnnStatus aclnnMaximumGetWorkspaceSize(const aclTensor *self, const aclTensor *other, aclTensor *out,
    uint64_t *workspaceSize, aclOpExecutor **executor);
aclnnStatus aclnnMaximum(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    aclrtStream stream);
/* aclnnop/aclnn_minimum.h (libopapi_math) */
aclnnStatus aclnnMinimumGetWorkspaceSize(const aclTensor *self, const aclTensor *other, aclTensor *out,
    uint64_t *workspaceSize, aclOpExecutor **executor);
aclnnStatus aclnnMinimum(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    aclrtStream stream);
/* aclnnop/aclnn_s_where.h (libopapi_math) */
aclnnStatus aclnnSWhereGetWorkspaceSize(const aclTensor *condition, const aclTensor *self,
    const aclTensor *other, aclTensor *out, uint64_t *workspaceSize, aclOpExecutor **executor);
aclnnStatus aclnnSWhere(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    aclrtStream stream);
/* aclnnop/aclnn_cumsum.h (libopapi_math) */
aclnnStatus aclnnCumsumGetWorkspaceSize(const aclTensor *self, int64_t dim, aclDataType dtype,
    aclTensor *out, uint64_t *workspaceSize, aclOpExecutor **executor);
aclnnStatus aclnnCumsum(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    aclrtStream stream);
aclnnStatus aclnnCumsumV2GetWorkspaceSize(const aclTensor *self, int64_t dim, bool exclusive,
    bool reverse, aclTensor *out, uint64_t *workspaceSize, aclOpExecutor **executor);
aclnnStatus aclnnCumsumV2(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    aclrtStream stream);
/* aclnnop/aclnn_all.h (libopapi_math) */
aclnnStatus aclnnAllGetWorkspaceSize(const aclTensor *self, const aclIntArray *dim, bool keepdim,
    aclTensor *out, uint64_t *workspaceSize, aclOpExecutor **executor);
aclnnStatus aclnnAll(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    aclrtStream stream);
/* aclnnop/aclnn_any.h (libopapi_math) */
aclnnStatus aclnnAnyGetWorkspaceSize(const aclTensor *self, const aclIntArray *dim, bool keepdim,
    aclTensor *out, uint64_t *workspaceSize, aclOpExecutor **executor);
aclnnStatus aclnnAny(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    aclrtStream stream);
/* aclnnop/aclnn_cast.h (libopapi_math) */
aclnnStatus aclnnCastGetWorkspaceSize(const aclTensor *self, const aclDataType dtype, aclTensor *out,
    uint64_t *workspaceSize, aclOpExecutor **executor);
aclnnStatus aclnnCast(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    aclrtStream stream);
/* aclnnop/aclnn_copy.h (libopapi_math) */
aclnnStatus aclnnInplaceCopyGetWorkspaceSize(aclTensor *selfRef, const aclTensor *src,
    uint64_t *workspaceSize, aclOpExecutor **executor);
aclnnStatus aclnnInplaceCopy(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    const aclrtStream stream);
/* aclnnop/aclnn_convolution.h (libopapi_nn) */
aclnnStatus aclnnConvolutionGetWorkspaceSize(const aclTensor *input, const aclTensor *weight,
    const aclTensor *bias, const aclIntArray *stride, const aclIntArray *padding,
    const aclIntArray *dilation, bool transposed, const aclIntArray *outputPadding,
    const int64_t groups, aclTensor *output, int8_t cubeMathType, uint64_t *workspaceSize,
    aclOpExecutor **executor);
aclnnStatus aclnnConvolution(void *workspace, const uint64_t workspaceSize, aclOpExecutor *executor,
    aclrtStream stream);
/* aclnnop/aclnn_max_pool2d_with_indices.h (libopapi_nn) */
aclnnStatus aclnnMaxPool2dWithIndicesGetWorkspaceSize(const aclTensor *self,
    const aclIntArray *kernelSize, const aclIntArray *stride, const aclIntArray *padding,
    const aclIntArray *dilation, bool ceilMode, aclTensor *out, aclTensor *indices,
    uint64_t *workspaceSize, aclOpExecutor **executor);
aclnnStatus aclnnMaxPool2dWithIndices(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    aclrtStream stream);
/* aclnnop/aclnn_nll_loss.h (libopapi_nn) */
aclnnStatus aclnnNLLLossGetWorkspaceSize(const aclTensor *self, const aclTensor *target,
    const aclTensor *weight, int64_t reduction, int64_t ignoreIndex, aclTensor *out,
    aclTensor *totalWeightOut, uint64_t *workspaceSize, aclOpExecutor **executor);
aclnnStatus aclnnNLLLoss(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    aclrtStream stream);
/* aclnnop/aclnn_nll_loss2d.h (libopapi_nn) */
aclnnStatus aclnnNLLLoss2dGetWorkspaceSize(const aclTensor *self, const aclTensor *target,
    const aclTensor *weight, int64_t reduction, int64_t ignoreIndex, aclTensor *out,
    aclTensor *totalWeightOut, uint64_t *workspaceSize, aclOpExecutor **executor);
aclnnStatus aclnnNLLLoss2d(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    aclrtStream stream);
/* aclnnop/aclnn_cross_entropy_loss.h (libopapi_nn) */
aclnnStatus aclnnCrossEntropyLossGetWorkspaceSize(const aclTensor *input, const aclTensor *target,
    const aclTensor *weightOptional, char *reductionOptional, int64_t ignoreIndex,
    double labelSmoothing, double lseSquareScaleForZloss, bool returnZloss, const aclTensor *lossOut,
    const aclTensor *logProbOut, const aclTensor *zlossOut, const aclTensor *lseForZlossOut,
    uint64_t *workspaceSize, aclOpExecutor **executor);
aclnnStatus aclnnCrossEntropyLoss(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    aclrtStream stream);
/* aclnnop/aclnn_threshold_backward.h (libopapi_nn) */
aclnnStatus aclnnThresholdBackwardGetWorkspaceSize(const aclTensor *gradOutput, const aclTensor *self,
    const aclScalar *threshold, aclTensor *out, uint64_t *workspaceSize, aclOpExecutor **executor);
aclnnStatus aclnnThresholdBackward(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    const aclrtStream stream);
/* aclnnop/aclnn_gelu_backward.h (libopapi_nn) */
aclnnStatus aclnnGeluBackwardGetWorkspaceSize(const aclTensor *gradOutput, const aclTensor *self,
    const aclTensor *gradInput, uint64_t *workspaceSize, aclOpExecutor **executor);
aclnnStatus aclnnGeluBackward(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    const aclrtStream stream);
/* aclnnop/aclnn_gelu_backward_v2.h (libopapi_nn) */
aclnnStatus aclnnGeluBackwardV2GetWorkspaceSize(const aclTensor *gradOutput, const aclTensor *self,
    char *approximate, aclTensor *gradInput, uint64_t *workspaceSize, aclOpExecutor **executor);
aclnnStatus aclnnGeluBackwardV2(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    const aclrtStream stream);
/* aclnnop/aclnn_silu_backward.h (libopapi_nn) */
aclnnStatus aclnnSiluBackwardGetWorkspaceSize(const aclTensor *gradOutput, const aclTensor *self,
    aclTensor *gradInput, uint64_t *workspaceSize, aclOpExecutor **executor);
aclnnStatus aclnnSiluBackward(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    aclrtStream stream);
/* aclnnop/aclnn_sigmoid_backward.h (libopapi_nn) */
aclnnStatus aclnnSigmoidBackwardGetWorkspaceSize(const aclTensor *gradOutput, const aclTensor *output,
    aclTensor *gradInput, uint64_t *workspaceSize, aclOpExecutor **executor);
aclnnStatus aclnnSigmoidBackward(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    const aclrtStream stream);
/* aclnnop/aclnn_tanh_backward.h (libopapi_math) */
aclnnStatus aclnnTanhBackwardGetWorkspaceSize(const aclTensor *gradOutput, const aclTensor *output,
    aclTensor *gradInput, uint64_t *workspaceSize, aclOpExecutor **executor);
aclnnStatus aclnnTanhBackward(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    const aclrtStream stream);
/* aclnnop/aclnn_softmax_backward.h (libopapi_nn) */
aclnnStatus aclnnSoftmaxBackwardGetWorkspaceSize(const aclTensor *gradOutput, const aclTensor *output,
    int64_t dim, aclTensor *out, uint64_t *workspaceSize, aclOpExecutor **executor);
aclnnStatus aclnnSoftmaxBackward(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    aclrtStream stream);
/* aclnnop/aclnn_logsoftmax_backward.h (libopapi_nn) */
aclnnStatus aclnnLogSoftmaxBackwardGetWorkspaceSize(const aclTensor *gradOutput,
    const aclTensor *output, int64_t dim, aclTensor *out, uint64_t *workspaceSize,
    aclOpExecutor **executor);
aclnnStatus aclnnLogSoftmaxBackward(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    aclrtStream stream);
/* aclnnop/aclnn_layer_norm_backward.h (libopapi_nn) */
aclnnStatus aclnnLayerNormBackwardGetWorkspaceSize(const aclTensor *gradOut, const aclTensor *input,
    const aclIntArray *normalizedShape, const aclTensor *mean, const aclTensor *rstd,
    const aclTensor *weightOptional, const aclTensor *biasOptional, const aclBoolArray *outputMask,
    aclTensor *gradInputOut, aclTensor *gradWeightOut, aclTensor *gradBiasOut, uint64_t *workspaceSize,
    aclOpExecutor **executor);
aclnnStatus aclnnLayerNormBackward(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    aclrtStream stream);
/* aclnnop/aclnn_rms_norm_grad.h (libopapi_nn) */
aclnnStatus aclnnRmsNormGradGetWorkspaceSize(const aclTensor *dy, const aclTensor *x,
    const aclTensor *rstd, const aclTensor *gamma, const aclTensor *dxOut, const aclTensor *dgammaOut,
    uint64_t *workspaceSize, aclOpExecutor **executor);
aclnnStatus aclnnRmsNormGrad(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    aclrtStream stream);
/* aclnnop/aclnn_convolution_backward.h (libopapi_nn) */
aclnnStatus aclnnConvolutionBackwardGetWorkspaceSize(const aclTensor *gradOutput,
    const aclTensor *input, const aclTensor *weight, const aclIntArray *biasSizes,
    const aclIntArray *stride, const aclIntArray *padding, const aclIntArray *dilation, bool transposed,
    const aclIntArray *outputPadding, int groups, const aclBoolArray *outputMask, int8_t cubeMathType,
    aclTensor *gradInput, aclTensor *gradWeight, aclTensor *gradBias, uint64_t *workspaceSize,
    aclOpExecutor **executor);
aclnnStatus aclnnConvolutionBackward(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    const aclrtStream stream);
/* aclnnop/aclnn_max_pool2d_with_indices_backward.h (libopapi_nn) */
aclnnStatus aclnnMaxPool2dWithIndicesBackwardGetWorkspaceSize(const aclTensor *gradOutput,
    const aclTensor *self, const aclTensor *indices, const aclIntArray *kernelSize,
    const aclIntArray *stride, const aclIntArray *padding, const aclIntArray *dilation, bool ceilMode,
    aclTensor *gradInput, uint64_t *workspaceSize, aclOpExecutor **executor);
aclnnStatus aclnnMaxPool2dWithIndicesBackward(void *workspace, uint64_t workspaceSize,
    aclOpExecutor *executor, aclrtStream stream);
/* aclnnop/aclnn_nll_loss_backward.h (libopapi_nn) */
aclnnStatus aclnnNLLLossBackwardGetWorkspaceSize(const aclTensor *gradOutput, const aclTensor *self,
    const aclTensor *target, const aclTensor *weight, int64_t reduction, int64_t ignoreIndex,
    const aclTensor *totalWeight, aclTensor *out, uint64_t *workspaceSize, aclOpExecutor **executor);
aclnnStatus aclnnNLLLossBackward(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    aclrtStream stream);
/* aclnnop/aclnn_nll_loss2d_backward.h (libopapi_nn) */
aclnnStatus aclnnNLLLoss2dBackwardGetWorkspaceSize(const aclTensor *gradOutput, const aclTensor *self,
    const aclTensor *target, const aclTensor *weight, int64_t reduction, int64_t ignoreIndex,
    aclTensor *totalWeight, aclTensor *out, uint64_t *workspaceSize, aclOpExecutor **executor);
aclnnStatus aclnnNLLLoss2dBackward(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    aclrtStream stream);
/* aclnnop/aclnn_cross_entropy_loss_grad.h (libopapi_nn) */
aclnnStatus aclnnCrossEntropyLossGradGetWorkspaceSize(const aclTensor *gradLoss,
    const aclTensor *logProb, const aclTensor *target, const aclTensor *weightOptional,
    const aclTensor *gradZlossOptional, const aclTensor *lseForZlossOptional, char *reductionOptional,
    int64_t ignoreIndex, double labelSmoothing, double lseSquareScaleForZloss, const aclTensor *out,
    uint64_t *workspaceSize, aclOpExecutor **executor);
aclnnStatus aclnnCrossEntropyLossGrad(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    aclrtStream stream);
/* --- optimizer family (kernels/_sim/op_optim.c; hiascend.com aclnn API "aclnnApplyAdamWV2",
 * hicann ops-nn optim/fused_sgd/docs/aclnnFusedSgd.md) --- */
/* aclnnop/aclnn_apply_adam_w_v2.h (libopapi_nn) */
aclnnStatus aclnnApplyAdamWV2GetWorkspaceSize(aclTensor *varRef, aclTensor *mRef, aclTensor *vRef,
    aclTensor *maxGradNormOptionalRef, const aclTensor *grad, const aclTensor *step, float lr, float beta1,
    float beta2, float weightDecay, float eps, bool amsgrad, bool maximize, uint64_t *workspaceSize,
    aclOpExecutor **executor);
aclnnStatus aclnnApplyAdamWV2(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    aclrtStream stream);
/* aclnnop/aclnn_fused_sgd.h (libopapi_nn) */
aclnnStatus aclnnFusedSgdGetWorkspaceSize(const aclTensorList *paramsRef, const aclTensorList *gradsRef,
    const aclTensorList *momentumBufferListOptionalRef, const aclTensor *gradScaleOptional, float weightDecay,
    float momentum, float lr, float dampening, bool nesterov, bool maximize, bool isFirstStep,
    uint64_t *workspaceSize, aclOpExecutor **executor);
aclnnStatus aclnnFusedSgd(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    aclrtStream stream);

/* ---- issue 14, model ops (batch norm, adaptive pooling, embedding, cat, pad, gather): prototypes from
 * hicann/ops-nn e5c3fa93 (norm/batch_norm_v3, norm/batch_norm_grad_v3, pooling/adaptive_avg_pool2d,
 * pooling/adaptive_avg_pool2d_grad, index/embedding, index/embedding_dense_grad_v2,
 * index/gather_elements_v2, index/scatter_elements_v2: op_api/aclnn_<op>.h) and hicann/ops-math c4193324
 * (conversion/concat_d, conversion/pad_v3: op_api/aclnn_<op>.h). Simulated in kernels/_sim/op_batchnorm.c,
 * op_adaptive_pool.c, op_index.c, op_concat_pad.c. ---- */
/* aclnnop/aclnn_batch_norm.h (libopapi_nn) */
aclnnStatus aclnnBatchNormGetWorkspaceSize(const aclTensor *input, const aclTensor *weight,
    const aclTensor *bias, aclTensor *runningMean, aclTensor *runningVar, bool training, double momentum,
    double eps, aclTensor *output, aclTensor *saveMean, aclTensor *saveInvstd, uint64_t *workspaceSize,
    aclOpExecutor **executor);
aclnnStatus aclnnBatchNorm(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    aclrtStream stream);
/* aclnnop/aclnn_batch_norm_backward.h (libopapi_nn) */
aclnnStatus aclnnBatchNormBackwardGetWorkspaceSize(const aclTensor *gradOut, const aclTensor *input,
    const aclTensor *weight, const aclTensor *runningMean, const aclTensor *runningVar,
    const aclTensor *saveMean, const aclTensor *saveInvstd, bool training, double eps,
    const aclBoolArray *outputMask, aclTensor *gradInput, aclTensor *gradWeight, aclTensor *gradBias,
    uint64_t *workspaceSize, aclOpExecutor **executor);
aclnnStatus aclnnBatchNormBackward(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    const aclrtStream stream);
/* aclnnop/aclnn_batch_norm_stats.h (libopapi_math; hicann/ops-math math/reduce_std_with_mean) */
aclnnStatus aclnnBatchNormStatsGetWorkspaceSize(const aclTensor *input, double eps, aclTensor *mean,
    aclTensor *invstd, uint64_t *workspaceSize, aclOpExecutor **executor);
aclnnStatus aclnnBatchNormStats(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    const aclrtStream stream);
/* aclnnop/aclnn_adaptive_avg_pool2d.h (libopapi_nn) */
aclnnStatus aclnnAdaptiveAvgPool2dGetWorkspaceSize(const aclTensor *self, const aclIntArray *outputSize,
    aclTensor *out, uint64_t *workspaceSize, aclOpExecutor **executor);
aclnnStatus aclnnAdaptiveAvgPool2d(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    const aclrtStream stream);
/* aclnnop/aclnn_adaptive_avg_pool2d_backward.h (libopapi_nn) */
aclnnStatus aclnnAdaptiveAvgPool2dBackwardGetWorkspaceSize(const aclTensor *gradOutput,
    const aclTensor *self, aclTensor *out, uint64_t *workspaceSize, aclOpExecutor **executor);
aclnnStatus aclnnAdaptiveAvgPool2dBackward(void *workspace, uint64_t workspaceSize,
    aclOpExecutor *executor, const aclrtStream stream);
/* aclnnop/aclnn_embedding.h (libopapi_nn) */
aclnnStatus aclnnEmbeddingGetWorkspaceSize(const aclTensor *weight, const aclTensor *indices,
    const aclTensor *out, uint64_t *workspaceSize, aclOpExecutor **executor);
aclnnStatus aclnnEmbedding(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    const aclrtStream stream);
/* aclnnop/aclnn_embedding_dense_backward.h (libopapi_nn) */
aclnnStatus aclnnEmbeddingDenseBackwardGetWorkspaceSize(const aclTensor *grad, const aclTensor *indices,
    uint64_t numWeights, uint64_t paddingIdx, bool scaleGradByFreq, const aclTensor *out,
    uint64_t *workspaceSize, aclOpExecutor **executor);
aclnnStatus aclnnEmbeddingDenseBackward(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    const aclrtStream stream);
/* aclnnop/aclnn_gather.h (libopapi_nn) */
aclnnStatus aclnnGatherGetWorkspaceSize(const aclTensor *self, const int64_t dim, const aclTensor *index,
    aclTensor *out, uint64_t *workspaceSize, aclOpExecutor **executor);
aclnnStatus aclnnGather(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    const aclrtStream stream);
/* aclnnop/aclnn_scatter_add.h (libopapi_nn) */
aclnnStatus aclnnScatterAddGetWorkspaceSize(const aclTensor *self, int64_t dim, const aclTensor *index,
    const aclTensor *src, aclTensor *out, uint64_t *workspaceSize, aclOpExecutor **executor);
aclnnStatus aclnnScatterAdd(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    const aclrtStream stream);
/* aclnnop/aclnn_cat.h (libopapi_math) */
aclnnStatus aclnnCatGetWorkspaceSize(const aclTensorList *tensors, int64_t dim, aclTensor *out,
    uint64_t *workspaceSize, aclOpExecutor **executor);
aclnnStatus aclnnCat(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    const aclrtStream stream);
/* aclnnop/aclnn_constant_pad_nd.h (libopapi_math) */
aclnnStatus aclnnConstantPadNdGetWorkspaceSize(const aclTensor *self, const aclIntArray *pad,
    const aclScalar *value, aclTensor *out, uint64_t *workspaceSize, aclOpExecutor **executor);
aclnnStatus aclnnConstantPadNd(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    aclrtStream stream);

/* --- issue 14, activations, dropout and MSE loss (hiascend.com aclnn pages of each op: aclnnHardswish,
 * aclnnHardswishBackward, aclnnHardsigmoid, aclnnHardsigmoidBackward, aclnnRsqrt, aclnnSin, aclnnCos,
 * aclnnDropoutGenMaskV2, aclnnDropoutDoMask, aclnnMseLoss, aclnnMseLossBackward) --- */
/* aclnnop/aclnn_hardswish.h (libopapi_nn) */
aclnnStatus aclnnHardswishGetWorkspaceSize(const aclTensor *self, aclTensor *out, uint64_t *workspaceSize,
    aclOpExecutor **executor);
aclnnStatus aclnnHardswish(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    aclrtStream stream);
/* aclnnop/aclnn_hardswish_backward.h (libopapi_nn) */
aclnnStatus aclnnHardswishBackwardGetWorkspaceSize(const aclTensor *gradOutput, const aclTensor *self,
    aclTensor *out, uint64_t *workspaceSize, aclOpExecutor **executor);
aclnnStatus aclnnHardswishBackward(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    const aclrtStream stream);
/* aclnnop/aclnn_hardsigmoid.h (libopapi_nn) */
aclnnStatus aclnnHardsigmoidGetWorkspaceSize(const aclTensor *self, aclTensor *out, uint64_t *workspaceSize,
    aclOpExecutor **executor);
aclnnStatus aclnnHardsigmoid(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    aclrtStream stream);
/* aclnnop/aclnn_hardsigmoid_backward.h (libopapi_nn) */
aclnnStatus aclnnHardsigmoidBackwardGetWorkspaceSize(const aclTensor *gradOutput, const aclTensor *self,
    aclTensor *out, uint64_t *workspaceSize, aclOpExecutor **executor);
aclnnStatus aclnnHardsigmoidBackward(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    aclrtStream stream);
/* aclnnop/aclnn_rsqrt.h (libopapi_math) */
aclnnStatus aclnnRsqrtGetWorkspaceSize(const aclTensor *self, aclTensor *out, uint64_t *workspaceSize,
    aclOpExecutor **executor);
aclnnStatus aclnnRsqrt(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor, aclrtStream stream);
/* aclnnop/aclnn_reciprocal.h (libopapi_math; hiascend.com aclnn page "aclnnReciprocal") */
aclnnStatus aclnnReciprocalGetWorkspaceSize(const aclTensor *self, aclTensor *out, uint64_t *workspaceSize,
    aclOpExecutor **executor);
aclnnStatus aclnnReciprocal(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    aclrtStream stream);
/* aclnnop/aclnn_sin.h (libopapi_math) */
aclnnStatus aclnnSinGetWorkspaceSize(const aclTensor *self, aclTensor *out, uint64_t *workspaceSize,
    aclOpExecutor **executor);
aclnnStatus aclnnSin(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor, aclrtStream stream);
/* aclnnop/aclnn_cos.h (libopapi_math) */
aclnnStatus aclnnCosGetWorkspaceSize(const aclTensor *self, aclTensor *out, uint64_t *workspaceSize,
    aclOpExecutor **executor);
aclnnStatus aclnnCos(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor, aclrtStream stream);
/* aclnnop/aclnn_dropout_gen_mask_v2.h (libopapi_math): out is a uint8 bit mask of
 * align(numel(shape), 128) / 8 bytes, bit i (LSB first) set = element i kept */
aclnnStatus aclnnDropoutGenMaskV2GetWorkspaceSize(const aclIntArray *shape, double prob, int64_t seed,
    int64_t offset, aclDataType probDataType, aclTensor *out, uint64_t *workspaceSize,
    aclOpExecutor **executor);
aclnnStatus aclnnDropoutGenMaskV2(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    aclrtStream stream);
/* aclnnop/aclnn_dropout_do_mask.h (libopapi_math) */
aclnnStatus aclnnDropoutDoMaskGetWorkspaceSize(const aclTensor *self, const aclTensor *mask, double prob,
    aclTensor *out, uint64_t *workspaceSize, aclOpExecutor **executor);
aclnnStatus aclnnDropoutDoMask(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    aclrtStream stream);
/* aclnnop/aclnn_mse_loss.h (libopapi_nn): reduction 0 none, 1 mean, 2 sum */
aclnnStatus aclnnMseLossGetWorkspaceSize(const aclTensor *self, const aclTensor *target, int64_t reduction,
    aclTensor *out, uint64_t *workspaceSize, aclOpExecutor **executor);
aclnnStatus aclnnMseLoss(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor, aclrtStream stream);
/* aclnnop/aclnn_mse_loss_backward.h (libopapi_nn) */
aclnnStatus aclnnMseLossBackwardGetWorkspaceSize(const aclTensor *gradOutput, const aclTensor *self,
    const aclTensor *target, int64_t reduction, aclTensor *out, uint64_t *workspaceSize,
    aclOpExecutor **executor);
aclnnStatus aclnnMseLossBackward(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    aclrtStream stream);

/* attention family (kernels/_sim/op_attention.c). FlashAttentionScore / FlashAttentionScoreGrad:
 * hiascend.com CANN 8.x aclnn API pages "aclnnFlashAttentionScore" and "aclnnFlashAttentionScoreGrad"
 * (aclnnop/aclnn_flash_attention_score.h, aclnnop/aclnn_flash_attention_score_grad.h, libopapi);
 * LogicalNot: hicann/ops-math math/logical_not/op_api/aclnn_logical_not.h (libopapi_math). */
aclnnStatus aclnnFlashAttentionScoreGetWorkspaceSize(const aclTensor *query, const aclTensor *key,
    const aclTensor *value, const aclTensor *realShiftOptional, const aclTensor *dropMaskOptional,
    const aclTensor *paddingMaskOptional, const aclTensor *attenMaskOptional, const aclIntArray *prefixOptional,
    double scaleValue, double keepProb, int64_t preTokens, int64_t nextTokens, int64_t headNum, char *inputLayout,
    int64_t innerPrecise, int64_t sparseMode, const aclTensor *softmaxMaxOut, const aclTensor *softmaxSumOut,
    const aclTensor *softmaxOutOut, const aclTensor *attentionOutOut, uint64_t *workspaceSize,
    aclOpExecutor **executor);
aclnnStatus aclnnFlashAttentionScore(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    const aclrtStream stream);
aclnnStatus aclnnFlashAttentionScoreGradGetWorkspaceSize(const aclTensor *query, const aclTensor *keyIn,
    const aclTensor *value, const aclTensor *dy, const aclTensor *pseShiftOptional, const aclTensor *dropMaskOptional,
    const aclTensor *paddingMaskOptional, const aclTensor *attenMaskOptional, const aclTensor *softmaxMaxOptional,
    const aclTensor *softmaxSumOptional, const aclTensor *softmaxInOptional, const aclTensor *attentionInOptional,
    const aclIntArray *prefixOptional, double scaleValue, double keepProb, int64_t preTokens, int64_t nextTokens,
    int64_t headNum, char *inputLayout, int64_t innerPrecise, int64_t sparseMode, const aclTensor *dqOut,
    const aclTensor *dkOut, const aclTensor *dvOut, const aclTensor *dpseOut, uint64_t *workspaceSize,
    aclOpExecutor **executor);
aclnnStatus aclnnFlashAttentionScoreGrad(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    const aclrtStream stream);
aclnnStatus aclnnLogicalNotGetWorkspaceSize(const aclTensor *self, aclTensor *out, uint64_t *workspaceSize,
    aclOpExecutor **executor);
aclnnStatus aclnnLogicalNot(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor, aclrtStream stream);
