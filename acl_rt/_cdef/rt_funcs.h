/* canna: AscendCL runtime function prototypes (the subset canna uses).
 *
 * Exact prototypes of AscendCL's public runtime API (acl_rt.h / acl_base_rt.h,
 * interface 1.17.0), written for canna from the CANN 9.1 runtime API reference
 * and checked against the real headers by tests/test_abi.py. Symbols marked
 * "optional" are absent from older CANN releases; acl_rt resolves every symbol
 * lazily, so a missing one fails only when called.
 *
 * Read by cffi's cdef() and by the C compiler (the simulator defines them all).
 */

/* lifecycle, versions, errors */
aclError aclInit(const char *configPath);
aclError aclFinalize(void);
const char *aclGetRecentErrMsg(void);
aclError aclrtGetVersion(int32_t *majorVersion, int32_t *minorVersion, int32_t *patchVersion);
aclError aclsysGetVersionStr(char *pkgName, char *versionStr);               /* optional (8.5+) */
aclError aclrtPeekAtLastError(aclrtLastErrLevel level);                      /* optional */
aclError aclrtGetLastError(aclrtLastErrLevel level);                         /* optional */

/* devices and contexts */
aclError aclrtGetDeviceCount(uint32_t *count);
aclError aclrtSetDevice(int32_t deviceId);
aclError aclrtResetDevice(int32_t deviceId);
aclError aclrtGetDevice(int32_t *deviceId);
aclError aclrtGetRunMode(aclrtRunMode *runMode);
const char *aclrtGetSocName(void);
aclError aclrtGetDeviceInfo(uint32_t deviceId, aclrtDevAttr attr, int64_t *value);
aclError aclrtQueryDeviceStatus(int32_t deviceId, aclrtDeviceStatus *deviceStatus);
aclError aclrtCreateContext(aclrtContext *context, int32_t deviceId);
aclError aclrtDestroyContext(aclrtContext context);
aclError aclrtSetCurrentContext(aclrtContext context);
aclError aclrtGetCurrentContext(aclrtContext *context);
aclError aclrtCtxGetCurrentDefaultStream(aclrtStream *stream);               /* optional */
aclError aclrtSynchronizeDevice(void);
aclError aclrtSynchronizeDeviceWithTimeout(int32_t timeout);
aclError aclrtDeviceCanAccessPeer(int32_t *canAccessPeer, int32_t deviceId, int32_t peerDeviceId);
aclError aclrtDeviceEnablePeerAccess(int32_t peerDeviceId, uint32_t flags);
aclError aclrtDeviceDisablePeerAccess(int32_t peerDeviceId);
aclError aclrtGetDeviceUtilizationRate(int32_t deviceId, aclrtUtilizationInfo *utilizationInfo);

/* streams */
aclError aclrtCreateStream(aclrtStream *stream);
aclError aclrtCreateStreamWithConfig(aclrtStream *stream, uint32_t priority, uint32_t flag);
aclError aclrtDestroyStream(aclrtStream stream);
aclError aclrtDestroyStreamForce(aclrtStream stream);                        /* optional */
aclError aclrtSynchronizeStream(aclrtStream stream);
aclError aclrtSynchronizeStreamWithTimeout(aclrtStream stream, int32_t timeout);
aclError aclrtStreamQuery(aclrtStream stream, aclrtStreamStatus *status);
aclError aclrtStreamWaitEvent(aclrtStream stream, aclrtEvent event);

/* events */
aclError aclrtCreateEvent(aclrtEvent *event);
aclError aclrtCreateEventWithFlag(aclrtEvent *event, uint32_t flag);
aclError aclrtRecordEvent(aclrtEvent event, aclrtStream stream);
aclError aclrtResetEvent(aclrtEvent event, aclrtStream stream);
aclError aclrtSynchronizeEvent(aclrtEvent event);
aclError aclrtSynchronizeEventWithTimeout(aclrtEvent event, int32_t timeout);   /* optional */
aclError aclrtQueryEventStatus(aclrtEvent event, aclrtEventRecordedStatus *status);
aclError aclrtEventElapsedTime(float *ms, aclrtEvent startEvent, aclrtEvent endEvent);
aclError aclrtEventGetTimestamp(aclrtEvent event, uint64_t *timestamp);      /* optional */
aclError aclrtDestroyEvent(aclrtEvent event);

/* host callbacks */
aclError aclrtLaunchHostFunc(aclrtStream stream, aclrtHostFunc fn, void *args);   /* optional */
aclError aclrtSubscribeReport(uint64_t threadId, aclrtStream stream);
aclError aclrtLaunchCallback(aclrtCallback fn, void *userData, aclrtCallbackBlockType blockType, aclrtStream stream);
aclError aclrtProcessReport(int32_t timeout);
aclError aclrtUnSubscribeReport(uint64_t threadId, aclrtStream stream);

/* memory */
aclError aclrtMalloc(void **devPtr, size_t size, aclrtMemMallocPolicy policy);
aclError aclrtMallocAlign32(void **devPtr, size_t size, aclrtMemMallocPolicy policy);
aclError aclrtMallocHost(void **hostPtr, size_t size);
aclError aclrtFree(void *devPtr);
aclError aclrtFreeHost(void *hostPtr);
aclError aclrtMemset(void *devPtr, size_t maxCount, int32_t value, size_t count);
aclError aclrtMemsetAsync(void *devPtr, size_t maxCount, int32_t value, size_t count, aclrtStream stream);
aclError aclrtMemcpy(void *dst, size_t destMax, const void *src, size_t count, aclrtMemcpyKind kind);
aclError aclrtMemcpyAsync(void *dst, size_t destMax, const void *src, size_t count, aclrtMemcpyKind kind, aclrtStream stream);
aclError aclrtGetMemInfo(aclrtMemAttr attr, size_t *free, size_t *total);
aclError aclrtPointerGetAttributes(const void *ptr, aclrtPtrAttributes *attributes);   /* optional */

/* kernel loading and launch (optional: aclrtBinaryLoadFromFile, aclrtKernelArgs* and
 * aclrtLaunchKernelWithConfig since CANN 8.2; aclrtBinaryLoadFromData, aclrtLaunchKernelV2 and
 * aclrtLaunchKernelWithHostArgs since 8.5; see AscendCL's "Kernel loading and execution" API reference,
 * hicann/runtime docs/zh/api_ref/14_Kernel_loading_and_execution.md) */
aclError aclrtBinaryLoadFromFile(const char *binPath, aclrtBinaryLoadOptions *options, aclrtBinHandle *binHandle);   /* optional */
aclError aclrtBinaryLoadFromData(const void *data, size_t length, const aclrtBinaryLoadOptions *options, aclrtBinHandle *binHandle);   /* optional */
aclError aclrtBinaryUnLoad(aclrtBinHandle binHandle);
aclError aclrtBinaryGetFunction(const aclrtBinHandle binHandle, const char *kernelName, aclrtFuncHandle *funcHandle);
aclError aclrtLaunchKernel(aclrtFuncHandle funcHandle, uint32_t numBlocks, const void *argsData, size_t argsSize, aclrtStream stream);
aclError aclrtLaunchKernelV2(aclrtFuncHandle funcHandle, uint32_t numBlocks, const void *argsData, size_t argsSize, aclrtLaunchKernelCfg *cfg, aclrtStream stream);   /* optional */
aclError aclrtLaunchKernelWithHostArgs(aclrtFuncHandle funcHandle, uint32_t numBlocks, aclrtStream stream, aclrtLaunchKernelCfg *cfg, void *hostArgs, size_t argsSize, aclrtPlaceHolderInfo *placeHolderArray, size_t placeHolderNum);   /* optional */
aclError aclrtLaunchKernelWithConfig(aclrtFuncHandle funcHandle, uint32_t numBlocks, aclrtStream stream, aclrtLaunchKernelCfg *cfg, aclrtArgsHandle argsHandle, void *reserve);   /* optional */
aclError aclrtKernelArgsInit(aclrtFuncHandle funcHandle, aclrtArgsHandle *argsHandle);   /* optional */
aclError aclrtKernelArgsAppend(aclrtArgsHandle argsHandle, void *param, size_t paramSize, aclrtParamHandle *paramHandle);   /* optional */
aclError aclrtKernelArgsAppendPlaceHolder(aclrtArgsHandle argsHandle, aclrtParamHandle *paramHandle);   /* optional */
aclError aclrtKernelArgsGetPlaceHolderBuffer(aclrtArgsHandle argsHandle, aclrtParamHandle paramHandle, size_t dataSize, void **bufferAddr);   /* optional */
aclError aclrtKernelArgsParaUpdate(aclrtArgsHandle argsHandle, aclrtParamHandle paramHandle, void *param, size_t paramSize);   /* optional */
aclError aclrtKernelArgsFinalize(aclrtArgsHandle argsHandle);   /* optional */
aclError aclrtGetFunctionName(aclrtFuncHandle funcHandle, uint32_t maxLen, char *name);   /* optional */
aclError aclrtFunctionGetParamCount(const void *func, size_t *paramCount);   /* optional */
aclError aclrtFunctionGetParamInfo(const void *func, size_t paramIndex, size_t *paramOffset, size_t *paramSize);   /* optional */
