/* canna simulator: devices, contexts, SoC profiles, peer access, utilization, statistics. */
#include "sim.h"

sim_device_t g_dev[SIM_MAX_DEVICES];

static __thread void *tls_ctx;   /* handle of the thread's current context */

void sim_devices_setup(void)
{
    for (int32_t i = 0; i < SIM_MAX_DEVICES; i++) {
        sim_device_t *d = &g_dev[i];
        d->id = i;
        pthread_mutex_init(&d->lock, NULL);
        sim_list_init(&d->streams);
        sim_list_init(&d->events);
        sim_list_init(&d->ctxs);
        pthread_mutex_init(&d->mem_lock, NULL);
        d->capacity = g_cfg.hbm;
        pthread_mutex_init(&d->util_lock, NULL);
        d->util = d->util_local;
        pthread_mutex_init(&d->pool.lock, NULL);
    }
}

bool sim_dev_valid(int64_t id)
{
    return atomic_load_explicit(&g_cfg_loaded, memory_order_acquire) && id >= 0 && id < g_cfg.ndev;
}

bool sim_peer_enabled(int32_t a, int32_t b)
{
    return __atomic_load_n(&g_dev[a].peer[b], __ATOMIC_ACQUIRE) || __atomic_load_n(&g_dev[b].peer[a], __ATOMIC_ACQUIRE);
}

static aclError bad_dev(const char *api, int64_t id)
{
    return sim_err(ACL_ERROR_RT_INVALID_DEVICEID, "%s: invalid device id %lld (%d device%s)", api, (long long)id,
                   g_cfg.ndev, g_cfg.ndev == 1 ? "" : "s");
}

/* ------------------------------------------------------------------ contexts */

static void ctx_free(sim_obj_t *o)
{
    sim_ctx_t *c = (sim_ctx_t *)o;
    if (c->def_stream)
        sim_obj_unref(&c->def_stream->obj);
    free(c);
}

/* caller holds d->lock; returns the context with its owner reference */
static sim_ctx_t *ctx_create(sim_device_t *d, bool primary, const char *api, aclError *rc)
{
    sim_ctx_t *c = calloc(1, sizeof *c);
    if (!c) {
        *rc = sim_err(ACL_ERROR_RT_RESOURCE_ALLOC_FAIL, "%s: out of host memory", api);
        return NULL;
    }
    sim_obj_init(&c->obj, SIM_KIND_CTX, ctx_free);
    c->dev = d;
    c->primary = primary;
    sim_list_init(&c->link);
    c->def_stream = sim_stream_create(d, true, 0, 0, api, rc);
    if (!c->def_stream) {
        free(c);
        return NULL;
    }
    if (!sim_reg_add(&c->obj)) {
        sim_stream_destroy(c->def_stream, true);
        sim_obj_unref(&c->obj);
        *rc = sim_err(ACL_ERROR_RT_RESOURCE_ALLOC_FAIL, "%s: out of host memory", api);
        return NULL;
    }
    return c;
}

/* invalidate a context and its default stream; caller holds d->lock */
static void ctx_kill_locked(sim_ctx_t *c)
{
    __atomic_store_n(&c->dead, true, __ATOMIC_RELEASE);
    if (sim_reg_remove(&c->obj))
        sim_obj_unref(&c->obj);
    if (c->def_stream)
        sim_stream_destroy(c->def_stream, true);
}

static void tls_set_ctx(sim_ctx_t *c) { tls_ctx = c ? SIM_H(c) : NULL; }

void sim_ctx_clear_tls_if(sim_ctx_t *c)
{
    if (tls_ctx && tls_ctx == SIM_H(c))
        tls_ctx = NULL;
}

sim_ctx_t *sim_ctx_current(void)
{
    if (!tls_ctx)
        return NULL;
    sim_obj_t *o = sim_reg_get(tls_ctx, SIM_KIND_CTX, NULL);
    if (!o) {
        tls_set_ctx(NULL);
        return NULL;
    }
    sim_ctx_t *c = (sim_ctx_t *)o;
    if (__atomic_load_n(&c->dead, __ATOMIC_ACQUIRE)) {
        sim_obj_unref(o);
        tls_set_ctx(NULL);
        return NULL;
    }
    return c;
}

aclError sim_need_ctx(const char *api, sim_ctx_t **out)
{
    sim_ctx_t *c = sim_ctx_current();
    if (!c)
        return sim_err(ACL_ERROR_RT_CONTEXT_NULL,
                       "%s: the calling thread has no current context (call aclrtSetDevice or aclrtSetCurrentContext first)",
                       api);
    *out = c;
    return ACL_SUCCESS;
}

SIM_API aclError aclrtGetDeviceCount(uint32_t *count)
{
    SIM_ENTER_LIGHT("aclrtGetDeviceCount");
    SIM_NULL_CHECK("aclrtGetDeviceCount", count);
    *count = (uint32_t)g_cfg.ndev;
    return ACL_SUCCESS;
}

SIM_API aclError aclrtSetDevice(int32_t deviceId)
{
    static const char api[] = "aclrtSetDevice";
    SIM_ENTER(api);
    if (!sim_dev_valid(deviceId))
        return bad_dev(api, deviceId);
    sim_device_t *d = &g_dev[deviceId];
    aclError rc = ACL_SUCCESS;
    pthread_mutex_lock(&d->lock);
    if (!atomic_load(&g_inited)) {
        rc = sim_err(ACL_ERROR_UNINITIALIZE, "%s: AscendCL is not initialized (call aclInit first)", api);
        goto out;
    }
    if (!d->primary) {
        d->primary = ctx_create(d, true, api, &rc);
        if (!d->primary)
            goto out;
        d->primary_refs = 0;
    }
    d->primary_refs++;
    tls_set_ctx(d->primary);
    sim_shm_set_open(deviceId, true);
out:
    pthread_mutex_unlock(&d->lock);
    return rc;
}

SIM_API aclError aclrtResetDevice(int32_t deviceId)
{
    static const char api[] = "aclrtResetDevice";
    SIM_ENTER(api);
    if (!sim_dev_valid(deviceId))
        return bad_dev(api, deviceId);
    sim_device_t *d = &g_dev[deviceId];
    pthread_mutex_lock(&d->lock);
    if (!d->primary || d->primary_refs == 0 || --d->primary_refs > 0) {
        pthread_mutex_unlock(&d->lock);
        return ACL_SUCCESS;
    }
    sim_ctx_t *c = d->primary;
    d->primary = NULL;
    sim_shm_set_open(deviceId, false);
    pthread_mutex_unlock(&d->lock);

    sim_device_sync(d, -1, false, api);
    pthread_mutex_lock(&d->lock);
    ctx_kill_locked(c);
    pthread_mutex_unlock(&d->lock);
    sim_ctx_clear_tls_if(c);
    sim_obj_unref(&c->obj);
    return ACL_SUCCESS;
}

SIM_API aclError aclrtGetDevice(int32_t *deviceId)
{
    SIM_ENTER("aclrtGetDevice");
    SIM_NULL_CHECK("aclrtGetDevice", deviceId);
    sim_ctx_t *c = NULL;
    aclError rc = sim_need_ctx("aclrtGetDevice", &c);
    if (rc)
        return rc;
    *deviceId = c->dev->id;
    sim_obj_unref(&c->obj);
    return ACL_SUCCESS;
}

SIM_API aclError aclrtGetRunMode(aclrtRunMode *runMode)
{
    SIM_ENTER_LIGHT("aclrtGetRunMode");
    SIM_NULL_CHECK("aclrtGetRunMode", runMode);
    *runMode = g_cfg.memory_model == ACLSIM_MEMORY_DISCRETE ? ACL_HOST : ACL_DEVICE;
    return ACL_SUCCESS;
}

SIM_API const char *aclrtGetSocName(void)
{
    if (SIM_UNLIKELY(g_forked)) {
        sim_forked_err("aclrtGetSocName");
        return NULL;
    }
    if (sim_config_ensure("aclrtGetSocName") != ACL_SUCCESS)
        return NULL;
    return g_cfg.profile->name;
}

SIM_API aclError aclrtGetDeviceInfo(uint32_t deviceId, aclrtDevAttr attr, int64_t *value)
{
    static const char api[] = "aclrtGetDeviceInfo";
    SIM_ENTER(api);
    SIM_NULL_CHECK(api, value);
    if (!sim_dev_valid(deviceId))
        return bad_dev(api, deviceId);
    const sim_profile_t *p = g_cfg.profile;
    switch ((int)attr) {
    case ACL_DEV_ATTR_AICPU_CORE_NUM: *value = p->aicpus; break;
    case ACL_DEV_ATTR_AICORE_CORE_NUM: *value = p->ai_cores; break;
    case ACL_DEV_ATTR_CUBE_CORE_NUM: *value = p->ai_cores; break;
    case ACL_DEV_ATTR_VECTOR_CORE_NUM: *value = p->vector_cores; break;
    case ACL_DEV_ATTR_TOTAL_GLOBAL_MEM_SIZE: {
        sim_device_t *d = &g_dev[deviceId];
        pthread_mutex_lock(&d->mem_lock);
        *value = (int64_t)d->capacity;
        pthread_mutex_unlock(&d->mem_lock);
        break;
    }
    case ACL_DEV_ATTR_L2_CACHE_SIZE: *value = (int64_t)p->l2; break;
    case ACL_DEV_ATTR_IS_VIRTUAL: *value = 0; break;
    default:
        return sim_err(ACL_ERROR_FEATURE_UNSUPPORTED, "%s: attribute %d is not supported", api, (int)attr);
    }
    return ACL_SUCCESS;
}

SIM_API aclError aclrtQueryDeviceStatus(int32_t deviceId, aclrtDeviceStatus *deviceStatus)
{
    static const char api[] = "aclrtQueryDeviceStatus";
    SIM_ENTER(api);
    SIM_NULL_CHECK(api, deviceStatus);
    if (!sim_dev_valid(deviceId))
        return bad_dev(api, deviceId);
    *deviceStatus = ACL_RT_DEVICE_STATUS_NORMAL;
    return ACL_SUCCESS;
}

SIM_API aclError aclrtCreateContext(aclrtContext *context, int32_t deviceId)
{
    static const char api[] = "aclrtCreateContext";
    SIM_ENTER(api);
    SIM_NULL_CHECK(api, context);
    if (!sim_dev_valid(deviceId))
        return bad_dev(api, deviceId);
    sim_device_t *d = &g_dev[deviceId];
    aclError rc = ACL_SUCCESS;
    pthread_mutex_lock(&d->lock);
    if (!atomic_load(&g_inited)) {
        rc = sim_err(ACL_ERROR_UNINITIALIZE, "%s: AscendCL is not initialized (call aclInit first)", api);
        goto out;
    }
    sim_ctx_t *c = ctx_create(d, false, api, &rc);
    if (!c)
        goto out;
    sim_list_add(&d->ctxs, &c->link);   /* the list keeps the owner reference */
    tls_set_ctx(c);
    *context = SIM_H(c);
out:
    pthread_mutex_unlock(&d->lock);
    return rc;
}

static aclError get_ctx(aclrtContext h, const char *api, sim_ctx_t **out)
{
    uint32_t kf;
    sim_obj_t *o = sim_reg_get(h, SIM_KIND_CTX, &kf);
    if (!o) {
        if (kf)
            return sim_err(ACL_ERROR_RT_INVALID_HANDLE, "%s: handle %p is %s, not a context", api, h, sim_kind_name(kf));
        return sim_err(ACL_ERROR_RT_INVALID_HANDLE, "%s: invalid context handle %p (unknown or destroyed)", api, h);
    }
    *out = (sim_ctx_t *)o;
    return ACL_SUCCESS;
}

SIM_API aclError aclrtDestroyContext(aclrtContext context)
{
    static const char api[] = "aclrtDestroyContext";
    SIM_ENTER(api);
    SIM_NULL_CHECK(api, context);
    sim_ctx_t *c = NULL;
    aclError rc = get_ctx(context, api, &c);
    if (rc)
        return rc;
    if (c->primary) {
        sim_obj_unref(&c->obj);
        return sim_err(ACL_ERROR_RT_PARAM_INVALID,
                       "%s: %p is the default context of device %d; release it with aclrtResetDevice", api, context,
                       c->dev->id);
    }
    sim_device_t *d = c->dev;
    bool owner = false;
    pthread_mutex_lock(&d->lock);
    if (c->dead) {
        rc = sim_err(ACL_ERROR_RT_INVALID_HANDLE, "%s: invalid context handle %p (destroyed)", api, context);
    } else {
        ctx_kill_locked(c);
        sim_list_del(&c->link);
        owner = true;
    }
    pthread_mutex_unlock(&d->lock);
    sim_ctx_clear_tls_if(c);
    if (owner)
        sim_obj_unref(&c->obj);
    sim_obj_unref(&c->obj);
    return rc;
}

SIM_API aclError aclrtSetCurrentContext(aclrtContext context)
{
    static const char api[] = "aclrtSetCurrentContext";
    SIM_ENTER(api);
    SIM_NULL_CHECK(api, context);
    sim_ctx_t *c = NULL;
    aclError rc = get_ctx(context, api, &c);
    if (rc)
        return rc;
    tls_set_ctx(c);
    sim_obj_unref(&c->obj);
    return ACL_SUCCESS;
}

SIM_API aclError aclrtGetCurrentContext(aclrtContext *context)
{
    SIM_ENTER("aclrtGetCurrentContext");
    SIM_NULL_CHECK("aclrtGetCurrentContext", context);
    sim_ctx_t *c = NULL;
    aclError rc = sim_need_ctx("aclrtGetCurrentContext", &c);
    if (rc)
        return rc;
    *context = SIM_H(c);
    sim_obj_unref(&c->obj);
    return ACL_SUCCESS;
}

SIM_API aclError aclrtCtxGetCurrentDefaultStream(aclrtStream *stream)
{
    SIM_ENTER("aclrtCtxGetCurrentDefaultStream");
    SIM_NULL_CHECK("aclrtCtxGetCurrentDefaultStream", stream);
    sim_ctx_t *c = NULL;
    aclError rc = sim_need_ctx("aclrtCtxGetCurrentDefaultStream", &c);
    if (rc)
        return rc;
    *stream = SIM_H(c->def_stream);
    sim_obj_unref(&c->obj);
    return ACL_SUCCESS;
}

static aclError sync_device_api(const char *api, int32_t timeout)
{
    SIM_ENTER(api);
    if (timeout < -1)
        return sim_err(ACL_ERROR_INVALID_PARAM, "%s: timeout must be -1, 0 or a positive number of ms (got %d)", api,
                       timeout);
    sim_ctx_t *c = NULL;
    aclError rc = sim_need_ctx(api, &c);
    if (rc)
        return rc;
    sim_device_t *d = c->dev;
    sim_obj_unref(&c->obj);
    if (tls_running_stream && tls_running_stream->dev == d)
        return sim_err(ACL_ERROR_RT_PARAM_INVALID,
                       "%s: cannot synchronize device %d from inside one of its stream tasks (it would deadlock)", api,
                       d->id);
    return sim_device_sync(d, timeout, true, api);
}

SIM_API aclError aclrtSynchronizeDevice(void) { return sync_device_api("aclrtSynchronizeDevice", -1); }

SIM_API aclError aclrtSynchronizeDeviceWithTimeout(int32_t timeout)
{
    return sync_device_api("aclrtSynchronizeDeviceWithTimeout", timeout);
}

/* ------------------------------------------------------------------ peer access */

SIM_API aclError aclrtDeviceCanAccessPeer(int32_t *canAccessPeer, int32_t deviceId, int32_t peerDeviceId)
{
    static const char api[] = "aclrtDeviceCanAccessPeer";
    SIM_ENTER(api);
    SIM_NULL_CHECK(api, canAccessPeer);
    if (!sim_dev_valid(deviceId))
        return bad_dev(api, deviceId);
    if (!sim_dev_valid(peerDeviceId))
        return bad_dev(api, peerDeviceId);
    if (deviceId == peerDeviceId)
        return sim_err(ACL_ERROR_INVALID_PARAM, "%s: deviceId and peerDeviceId are the same (%d)", api, deviceId);
    *canAccessPeer = 1;
    return ACL_SUCCESS;
}

static aclError peer_set(const char *api, int32_t peer, uint32_t flags, bool enable)
{
    SIM_ENTER(api);
    if (enable && flags != 0)
        return sim_err(ACL_ERROR_INVALID_PARAM, "%s: flags must be 0 (got %u)", api, flags);
    sim_ctx_t *c = NULL;
    aclError rc = sim_need_ctx(api, &c);
    if (rc)
        return rc;
    sim_device_t *d = c->dev;
    sim_obj_unref(&c->obj);
    if (!sim_dev_valid(peer))
        return bad_dev(api, peer);
    if (peer == d->id)
        return sim_err(ACL_ERROR_INVALID_PARAM, "%s: peer device %d is the current device", api, peer);
    __atomic_store_n(&d->peer[peer], enable ? 1 : 0, __ATOMIC_RELEASE);
    return ACL_SUCCESS;
}

SIM_API aclError aclrtDeviceEnablePeerAccess(int32_t peerDeviceId, uint32_t flags)
{
    return peer_set("aclrtDeviceEnablePeerAccess", peerDeviceId, flags, true);
}

SIM_API aclError aclrtDeviceDisablePeerAccess(int32_t peerDeviceId)
{
    return peer_set("aclrtDeviceDisablePeerAccess", peerDeviceId, 0, false);
}

/* ------------------------------------------------------------------ utilization
 * Per engine: the exact integral of busy cores over time (core-ns), advanced at every task
 * start/end, plus a ring of 100 ms buckets receiving the same integral split at bucket
 * boundaries; the window is the last 10 full buckets plus the current partial one (1.0-1.1 s). */

void sim_util_advance(sim_util_t *u, uint64_t now)
{
    if (now <= u->last)
        return;
    uint64_t t = u->last;
    u->last = now;
    if (u->active == 0)
        return;
    u->cum_ns += (uint64_t)u->active * (now - t);
    uint64_t bnow = now / SIM_UTIL_BUCKET_NS;
    if (bnow >= SIM_UTIL_BUCKETS) {
        uint64_t min_t = (bnow - (SIM_UTIL_BUCKETS - 1)) * SIM_UTIL_BUCKET_NS;
        if (t < min_t)
            t = min_t;
    }
    while (t < now) {
        uint64_t b = t / SIM_UTIL_BUCKET_NS, end = (b + 1) * SIM_UTIL_BUCKET_NS;
        if (end > now)
            end = now;
        unsigned slot = (unsigned)(b % SIM_UTIL_BUCKETS);
        if (u->bucket_id[slot] != b) {
            u->bucket_id[slot] = b;
            u->bucket_ns[slot] = 0;
        }
        u->bucket_ns[slot] += (uint64_t)u->active * (end - t);
        t = end;
    }
}

void sim_util_begin(sim_device_t *d, int32_t engine, uint32_t cores, uint64_t now)
{
    if ((engine != ACLSIM_ENGINE_VECTOR && engine != ACLSIM_ENGINE_CUBE) || cores == 0)
        return;
    pthread_mutex_lock(&d->util_lock);
    sim_util_t *u = &d->util[engine];
    sim_util_advance(u, now);
    u->active += cores;
    pthread_mutex_unlock(&d->util_lock);
}

void sim_util_end(sim_device_t *d, int32_t engine, uint32_t cores, uint64_t now)
{
    if ((engine != ACLSIM_ENGINE_VECTOR && engine != ACLSIM_ENGINE_CUBE) || cores == 0)
        return;
    pthread_mutex_lock(&d->util_lock);
    sim_util_t *u = &d->util[engine];
    sim_util_advance(u, now);
    u->active = u->active >= cores ? u->active - cores : 0;
    pthread_mutex_unlock(&d->util_lock);
}

/* busy core-ns in the window (the last 10 full buckets and the current one) of an advanced u;
 * *window_ns gets the window's length */
long double sim_util_window(sim_util_t *u, uint64_t now, uint64_t *window_ns)
{
    uint64_t bnow = now / SIM_UTIL_BUCKET_NS;
    uint64_t bfirst = bnow >= SIM_UTIL_WINDOW_BUCKETS ? bnow - SIM_UTIL_WINDOW_BUCKETS : 0;
    uint64_t start = bfirst * SIM_UTIL_BUCKET_NS;
    long double sum = 0;
    for (unsigned i = 0; i < SIM_UTIL_BUCKETS; i++)
        if (u->bucket_id[i] >= bfirst && u->bucket_id[i] <= bnow)
            sum += (long double)u->bucket_ns[i];
    *window_ns = now > start ? now - start : 0;
    return sum;
}

SIM_API aclError aclrtGetDeviceUtilizationRate(int32_t deviceId, aclrtUtilizationInfo *utilizationInfo)
{
    static const char api[] = "aclrtGetDeviceUtilizationRate";
    SIM_ENTER(api);
    SIM_NULL_CHECK(api, utilizationInfo);
    if (!sim_dev_valid(deviceId))
        return bad_dev(api, deviceId);
    sim_device_t *d = &g_dev[deviceId];
    uint64_t now = sim_now_ns();
    /* device-wide, as on the device: every process of this simulated machine counts */
    utilizationInfo->cubeUtilization = sim_shm_util_percent(d, ACLSIM_ENGINE_CUBE, g_cfg.profile->ai_cores, now);
    utilizationInfo->vectorUtilization = sim_shm_util_percent(d, ACLSIM_ENGINE_VECTOR, g_cfg.profile->vector_cores, now);
    utilizationInfo->aicpuUtilization = 0;
    utilizationInfo->memoryUtilization = -1;
    return ACL_SUCCESS;
}

SIM_API aclError aclsimGetDeviceStats(int32_t deviceId, aclsimDeviceStats *stats)
{
    static const char api[] = "aclsimGetDeviceStats";
    if (SIM_UNLIKELY(g_forked))
        return sim_forked_err(api);
    SIM_NULL_CHECK(api, stats);
    aclError rc = sim_config_ensure(api);
    if (rc)
        return rc;
    if (!sim_dev_valid(deviceId))
        return bad_dev(api, deviceId);
    sim_device_t *d = &g_dev[deviceId];
    memset(stats, 0, sizeof *stats);
    pthread_mutex_lock(&d->mem_lock);
    stats->memTotal = d->capacity;
    stats->memUsed = d->used;
    stats->memPeak = d->peak;
    stats->numAllocs = d->nallocs;
    stats->numMallocCalls = d->nmalloc_calls;
    stats->numFreeCalls = d->nfree_calls;
    pthread_mutex_unlock(&d->mem_lock);
    pthread_mutex_lock(&d->lock);
    stats->numStreams = d->nstreams_live;
    stats->numEvents = d->nevents;
    pthread_mutex_unlock(&d->lock);
    stats->tasksExecuted = atomic_load(&d->tasks_executed);
    stats->tasksInline = atomic_load(&d->tasks_inline);
    stats->tasksAtSync = atomic_load(&d->tasks_at_sync);
    uint64_t now = sim_now_ns();
    pthread_mutex_lock(&d->util_lock);
    for (int e = 0; e < 3; e++) {
        sim_util_advance(&d->util[e], now);
        stats->busyNs[e] = d->util[e].cum_ns;
    }
    pthread_mutex_unlock(&d->util_lock);
    stats->aiCoreNum = g_cfg.profile->ai_cores;
    stats->vectorCoreNum = g_cfg.profile->vector_cores;
    stats->hostThreads = sim_sched_threads();
    return ACL_SUCCESS;
}

/* ------------------------------------------------------------------ finalize */

void sim_devices_finalize(void)
{
    for (int32_t i = 0; i < g_cfg.ndev; i++) {
        sim_device_t *d = &g_dev[i];
        sim_ctx_t *owned[1 + 64];
        size_t nowned;
        pthread_mutex_lock(&d->lock);
        do {
            nowned = 0;
            if (d->primary) {
                ctx_kill_locked(d->primary);
                owned[nowned++] = d->primary;
                d->primary = NULL;
                d->primary_refs = 0;
            }
            while (d->ctxs.next != &d->ctxs && nowned < sizeof owned / sizeof owned[0]) {
                sim_ctx_t *c = SIM_CONTAINER(d->ctxs.next, sim_ctx_t, link);
                ctx_kill_locked(c);
                sim_list_del(&c->link);
                owned[nowned++] = c;
            }
            for (size_t k = 0; k < nowned; k++)
                sim_obj_unref(&owned[k]->obj);   /* frees take no lock */
        } while (nowned);
        for (sim_list_t *n = d->streams.next; n != &d->streams;) {
            sim_stream_t *s = SIM_CONTAINER(n, sim_stream_t, link);
            n = n->next;   /* destroy may unlink s */
            sim_stream_destroy(s, true);
        }
        d->orphan_code = 0;   /* a fault of this session is not reported in the next one */
        d->orphan_more = 0;
        while (d->events.next != &d->events)
            sim_event_kill_locked(SIM_CONTAINER(d->events.next, sim_event_t, link));
        for (int p = 0; p < SIM_MAX_DEVICES; p++)
            __atomic_store_n(&d->peer[p], 0, __ATOMIC_RELEASE);
        pthread_mutex_unlock(&d->lock);
    }
}
