/* canna simulator: initialization, configuration, errors, the handle registry, fork, versions. */
#include "sim.h"

#include <ctype.h>
#include <unistd.h>

sim_config_t g_cfg;
atomic_int g_cfg_loaded;
atomic_int g_inited;
atomic_int g_finalizing;
volatile int g_forked;
static atomic_int g_ever_inited;
pthread_mutex_t g_state_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t g_cfg_lock = PTHREAD_MUTEX_INITIALIZER;

/* ------------------------------------------------------------------ condition helpers */

void sim_cond_init(pthread_cond_t *cv)
{
    pthread_condattr_t a;
    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    pthread_cond_init(cv, &a);
    pthread_condattr_destroy(&a);
}

void sim_deadline(struct timespec *ts, uint64_t ns_from_now)
{
    uint64_t t = sim_now_ns();
    uint64_t d = (ns_from_now > UINT64_MAX - t) ? UINT64_MAX / 2 : t + ns_from_now;
    ts->tv_sec = (time_t)(d / 1000000000ull);
    ts->tv_nsec = (long)(d % 1000000000ull);
}

int sim_cond_wait_until(pthread_cond_t *cv, pthread_mutex_t *mu, const struct timespec *deadline)
{
    if (!deadline)
        return pthread_cond_wait(cv, mu);
    return pthread_cond_timedwait(cv, mu, deadline);
}

/* ------------------------------------------------------------------ errors */

static __thread char tls_msg[SIM_MSG_MAX];
static __thread bool tls_has_msg;
static __thread char tls_msg_ret[SIM_MSG_MAX];
static __thread aclError tls_last_err;

aclError sim_err(aclError code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tls_msg, sizeof tls_msg, fmt, ap);
    va_end(ap);
    tls_has_msg = true;
    tls_last_err = code;
    return code;
}

aclError sim_forked_err(const char *api)
{
    return sim_err(ACL_ERROR_RT_NO_PERMISSION,
                   "%s: this process is a forked child of a process that initialized AscendCL; "
                   "the runtime cannot be used after fork() (use the 'spawn' start method)",
                   api);
}

void sim_err_save(sim_errsave_t *s)
{
    s->has = tls_has_msg;
    s->last = tls_last_err;
    if (s->has)
        memcpy(s->msg, tls_msg, sizeof s->msg);
    tls_has_msg = false;
}

void sim_err_restore(const sim_errsave_t *s)
{
    tls_has_msg = s->has;
    tls_last_err = s->last;
    if (s->has)
        memcpy(tls_msg, s->msg, sizeof tls_msg);
}

const char *sim_err_peek(void) { return tls_has_msg ? tls_msg : NULL; }
void sim_err_clear(void) { tls_has_msg = false; }

SIM_API const char *aclGetRecentErrMsg(void)
{
    if (!tls_has_msg)
        return NULL;
    memcpy(tls_msg_ret, tls_msg, sizeof tls_msg_ret);
    tls_has_msg = false;
    return tls_msg_ret;
}

SIM_API aclError aclrtPeekAtLastError(aclrtLastErrLevel level)
{
    SIM_ENTER("aclrtPeekAtLastError");
    if ((int)level != ACL_RT_THREAD_LEVEL)
        return sim_err(ACL_ERROR_INVALID_PARAM, "aclrtPeekAtLastError: level %d is not ACL_RT_THREAD_LEVEL", (int)level);
    return tls_last_err;
}

SIM_API aclError aclrtGetLastError(aclrtLastErrLevel level)
{
    SIM_ENTER("aclrtGetLastError");
    if ((int)level != ACL_RT_THREAD_LEVEL)
        return sim_err(ACL_ERROR_INVALID_PARAM, "aclrtGetLastError: level %d is not ACL_RT_THREAD_LEVEL", (int)level);
    aclError e = tls_last_err;
    tls_last_err = ACL_SUCCESS;
    return e;
}

/* ------------------------------------------------------------------ handle registry
 * An open-addressing hash map from handle ids to live objects under one mutex. A handle is a
 * unique id (SIM_HANDLE_BASE + 16 * n), never an object address and never reused, so nothing is
 * dereferenced before it was found here and a destroyed handle stays invalid forever. */

typedef struct reg_ent {
    uintptr_t h;   /* 0 = empty */
    sim_obj_t *o;
} reg_ent_t;

static pthread_mutex_t g_reg_lock = PTHREAD_MUTEX_INITIALIZER;
static reg_ent_t *g_reg_tab;
static size_t g_reg_cap;    /* power of two */
static size_t g_reg_count;
static uint64_t g_reg_next;

static inline size_t reg_hash(uintptr_t h)
{
    uint64_t x = (uint64_t)h;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return (size_t)x;
}

static bool reg_grow(void)
{
    size_t ncap = g_reg_cap ? g_reg_cap * 2 : 256;
    reg_ent_t *nt = calloc(ncap, sizeof *nt);
    if (!nt)
        return false;
    for (size_t i = 0; i < g_reg_cap; i++) {
        if (!g_reg_tab[i].h)
            continue;
        size_t j = reg_hash(g_reg_tab[i].h) & (ncap - 1);
        while (nt[j].h)
            j = (j + 1) & (ncap - 1);
        nt[j] = g_reg_tab[i];
    }
    free(g_reg_tab);
    g_reg_tab = nt;
    g_reg_cap = ncap;
    return true;
}

static size_t reg_find_slot(uintptr_t h)   /* caller holds the lock; returns g_reg_cap if absent */
{
    if (!g_reg_cap || !h)
        return g_reg_cap;
    size_t m = g_reg_cap - 1, j = reg_hash(h) & m;
    while (g_reg_tab[j].h) {
        if (g_reg_tab[j].h == h)
            return j;
        j = (j + 1) & m;
    }
    return g_reg_cap;
}

void sim_obj_init(sim_obj_t *o, uint32_t kind, void (*free_fn)(sim_obj_t *))
{
    o->magic = SIM_OBJ_MAGIC;
    o->kind = kind;
    atomic_init(&o->refs, 1);
    o->handle = NULL;
    o->free_fn = free_fn;
}

void sim_obj_ref(sim_obj_t *o) { atomic_fetch_add_explicit(&o->refs, 1, memory_order_relaxed); }

void sim_obj_unref(sim_obj_t *o)
{
    if (!o)
        return;
    if (atomic_fetch_sub_explicit(&o->refs, 1, memory_order_acq_rel) == 1) {
        o->magic = 0;
        o->free_fn(o);
    }
}

bool sim_reg_add(sim_obj_t *o)
{
    bool ok = false;
    pthread_mutex_lock(&g_reg_lock);
    if ((g_reg_count + 1) * 2 <= g_reg_cap || reg_grow()) {
        uintptr_t h = (uintptr_t)(SIM_HANDLE_BASE + 16 * ++g_reg_next);
        size_t m = g_reg_cap - 1, j = reg_hash(h) & m;
        while (g_reg_tab[j].h)
            j = (j + 1) & m;
        g_reg_tab[j].h = h;
        g_reg_tab[j].o = o;
        g_reg_count++;
        o->handle = (void *)h;
        sim_obj_ref(o);   /* the registry's reference */
        ok = true;
    }
    pthread_mutex_unlock(&g_reg_lock);
    return ok;
}

bool sim_reg_remove(sim_obj_t *o)
{
    bool found = false;
    pthread_mutex_lock(&g_reg_lock);
    size_t j = reg_find_slot((uintptr_t)o->handle);
    if (j < g_reg_cap && g_reg_tab[j].o == o) {
        found = true;
        size_t m = g_reg_cap - 1;
        g_reg_tab[j].h = 0;
        g_reg_tab[j].o = NULL;
        g_reg_count--;
        /* backward-shift deletion keeps probe chains intact */
        size_t i = j, k = (j + 1) & m;
        while (g_reg_tab[k].h) {
            size_t home = reg_hash(g_reg_tab[k].h) & m;
            /* the entry at k may move to the hole at i unless its home lies cyclically in (i, k] */
            bool move = (i <= k) ? (home <= i || home > k) : (home <= i && home > k);
            if (move) {
                g_reg_tab[i] = g_reg_tab[k];
                g_reg_tab[k].h = 0;
                g_reg_tab[k].o = NULL;
                i = k;
            }
            k = (k + 1) & m;
        }
    }
    pthread_mutex_unlock(&g_reg_lock);
    return found;
}

sim_obj_t *sim_reg_get(const void *h, uint32_t kind, uint32_t *kind_found)
{
    sim_obj_t *o = NULL;
    uint32_t kf = 0;
    if (!h)
        goto out;
    pthread_mutex_lock(&g_reg_lock);
    size_t j = reg_find_slot((uintptr_t)h);
    if (j < g_reg_cap) {
        sim_obj_t *c = g_reg_tab[j].o;
        if (c->kind == kind) {
            sim_obj_ref(c);
            o = c;
        } else {
            kf = c->kind;
        }
    }
    pthread_mutex_unlock(&g_reg_lock);
out:
    if (kind_found)
        *kind_found = kf;
    return o;
}

const char *sim_kind_name(uint32_t kind)
{
    switch (kind) {
    case SIM_KIND_CTX: return "a context";
    case SIM_KIND_STREAM: return "a stream";
    case SIM_KIND_EVENT: return "an event";
    default: return "an object";
    }
}

/* ------------------------------------------------------------------ configuration */

static const sim_profile_t g_profiles[] = {
    /* UB: 192 KiB per vector core on the Atlas A2 (Ascend 910B) parts; 256 KiB on the inference parts
     * (Ascend C's GetRuntimeUBSize answers these on a device) */
    {"Ascend910B1", 64ull << 30, 24, 48, 6, 192ull << 20, 192ull << 10},
    {"Ascend910B4", 32ull << 30, 20, 40, 6, 96ull << 20, 192ull << 10},
    {"Ascend310P3", 24ull << 30, 8, 7, 8, 16ull << 20, 256ull << 10},
    {"Ascend310B1", 16ull << 30, 1, 1, 4, 4ull << 20, 256ull << 10},
};

bool sim_profile_has_hbm(void) { return strncmp(g_cfg.profile->name, "Ascend910", 9) == 0; }

static const char *env_get(const char *name)
{
    const char *v = getenv(name);
    return (v && *v) ? v : NULL;
}

static bool parse_u64(const char *s, uint64_t *out, bool allow_suffix)
{
    while (isspace((unsigned char)*s))
        s++;
    if (!isdigit((unsigned char)*s))
        return false;
    errno = 0;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno)
        return false;
    uint64_t mul = 1;
    if (allow_suffix && *end) {
        switch (toupper((unsigned char)*end)) {
        case 'K': mul = 1ull << 10; end++; break;
        case 'M': mul = 1ull << 20; end++; break;
        case 'G': mul = 1ull << 30; end++; break;
        case 'T': mul = 1ull << 40; end++; break;
        default: break;
        }
        if (mul != 1 && (*end == 'i' || *end == 'I'))
            end++;
        if (mul != 1 && (*end == 'b' || *end == 'B'))
            end++;
    }
    while (isspace((unsigned char)*end))
        end++;
    if (*end)
        return false;
    if (v > UINT64_MAX / mul)
        return false;
    *out = (uint64_t)v * mul;
    return true;
}

aclError sim_config_ensure(const char *api)
{
    if (SIM_LIKELY(atomic_load_explicit(&g_cfg_loaded, memory_order_acquire)))
        return ACL_SUCCESS;
    pthread_mutex_lock(&g_cfg_lock);
    aclError rc = ACL_SUCCESS;
    if (atomic_load(&g_cfg_loaded))
        goto out;
    sim_config_t c = {1, &g_profiles[0], 0, ACLSIM_MEMORY_UNIFIED, 0};
    const char *v;
    uint64_t u;
    if ((v = env_get("CANNA_SIM_DEVICES"))) {
        if (!parse_u64(v, &u, false) || u < 1 || u > SIM_MAX_DEVICES) {
            rc = sim_err(ACL_ERROR_INVALID_PARAM, "%s: invalid CANNA_SIM_DEVICES=%s (expected 1..%d)", api, v,
                         SIM_MAX_DEVICES);
            goto out;
        }
        c.ndev = (int32_t)u;
    }
    if ((v = env_get("CANNA_SIM_SOC"))) {
        c.profile = NULL;
        for (size_t i = 0; i < sizeof g_profiles / sizeof g_profiles[0]; i++)
            if (strcmp(v, g_profiles[i].name) == 0)
                c.profile = &g_profiles[i];
        if (!c.profile) {
            rc = sim_err(ACL_ERROR_INVALID_PARAM,
                         "%s: invalid CANNA_SIM_SOC=%s (expected Ascend910B1, Ascend910B4, Ascend310P3 or Ascend310B1)",
                         api, v);
            goto out;
        }
    }
    c.hbm = c.profile->hbm;
    if ((v = env_get("CANNA_SIM_HBM_SIZE"))) {
        if (!parse_u64(v, &u, true) || u == 0 || u > SIM_MAX_HBM) {
            rc = sim_err(ACL_ERROR_INVALID_PARAM,
                         "%s: invalid CANNA_SIM_HBM_SIZE=%s (expected bytes > 0 and at most %llu = 1024T, optionally "
                         "with a K/M/G/T suffix)", api, v, (unsigned long long)SIM_MAX_HBM);
            goto out;
        }
        c.hbm = u;
    }
    if ((v = env_get("CANNA_SIM_MEMORY"))) {
        if (strcmp(v, "unified") == 0)
            c.memory_model = ACLSIM_MEMORY_UNIFIED;
        else if (strcmp(v, "discrete") == 0)
            c.memory_model = ACLSIM_MEMORY_DISCRETE;
        else {
            rc = sim_err(ACL_ERROR_INVALID_PARAM, "%s: invalid CANNA_SIM_MEMORY=%s (expected unified or discrete)", api, v);
            goto out;
        }
    }
    if ((v = env_get("CANNA_SIM_CHECK"))) {
        if (strcmp(v, "0") == 0)
            c.check = 0;
        else if (strcmp(v, "1") == 0)
            c.check = 1;
        else {
            rc = sim_err(ACL_ERROR_INVALID_PARAM, "%s: invalid CANNA_SIM_CHECK=%s (expected 0 or 1)", api, v);
            goto out;
        }
    }
    c.spin_ns = SIM_SPIN_DEFAULT_NS;
    if ((v = env_get("CANNA_SIM_THREADS"))) {
        if (!parse_u64(v, &u, false) || u < 1 || u > SIM_MAX_THREADS) {
            rc = sim_err(ACL_ERROR_INVALID_PARAM, "%s: invalid CANNA_SIM_THREADS=%s (expected 1..%d)", api, v,
                         SIM_MAX_THREADS);
            goto out;
        }
        c.threads = (uint32_t)u;
    }
    if ((v = env_get("CANNA_SIM_SPIN_US"))) {
        if (!parse_u64(v, &u, false) || u > 1000000) {
            rc = sim_err(ACL_ERROR_INVALID_PARAM, "%s: invalid CANNA_SIM_SPIN_US=%s (expected 0..1000000)", api, v);
            goto out;
        }
        c.spin_ns = u * 1000;
    }
    if ((v = env_get("CANNA_SIM_KERNEL_TIMEOUT"))) {
        char *end = NULL;
        double secs = strtod(v, &end);
        if (!end || *end != '\0' || end == v || !(secs >= 0 && secs < 1e9)) {
            rc = sim_err(ACL_ERROR_INVALID_PARAM,
                         "%s: invalid CANNA_SIM_KERNEL_TIMEOUT=%s (expected seconds, 0 <= s < 1e9; 0 = none)", api, v);
            goto out;
        }
        c.kernel_timeout_ns = (uint64_t)(secs * 1e9);
    }
    g_cfg = c;
    sim_sched_setup();
    sim_devices_setup();
    atomic_store_explicit(&g_cfg_loaded, 1, memory_order_release);
out:
    pthread_mutex_unlock(&g_cfg_lock);
    return rc;
}

/* ------------------------------------------------------------------ fork */

static void sim_atfork_child(void)
{
    if (atomic_load_explicit(&g_ever_inited, memory_order_relaxed))
        g_forked = 1;
}

__attribute__((constructor)) static void sim_ctor(void)
{
    pthread_atfork(NULL, NULL, sim_atfork_child);
}

/* ------------------------------------------------------------------ init / finalize */

SIM_API aclError aclInit(const char *configPath)
{
    if (SIM_UNLIKELY(g_forked))
        return sim_forked_err("aclInit");
    if (configPath && *configPath) {
        FILE *f = fopen(configPath, "r");
        if (!f)
            return sim_err(ACL_ERROR_INVALID_FILE, "aclInit: cannot open config file '%s': %s", configPath,
                           strerror(errno));
        fclose(f);
    }
    pthread_mutex_lock(&g_state_lock);
    aclError rc;
    if (atomic_load(&g_inited)) {
        rc = sim_err(ACL_ERROR_REPEAT_INITIALIZE, "aclInit: AscendCL is already initialized");
        goto out;
    }
    rc = sim_config_ensure("aclInit");
    if (rc != ACL_SUCCESS)
        goto out;
    for (int32_t i = 0; i < g_cfg.ndev; i++) {
        pthread_mutex_lock(&g_dev[i].mem_lock);
        g_dev[i].nmalloc_calls = 0;
        g_dev[i].nfree_calls = 0;
        pthread_mutex_unlock(&g_dev[i].mem_lock);
        atomic_store(&g_dev[i].tasks_executed, 0);
        atomic_store(&g_dev[i].tasks_inline, 0);
        atomic_store(&g_dev[i].tasks_at_sync, 0);
    }
    atomic_store(&g_ever_inited, 1);
    sim_shm_attach_process();
    atomic_store_explicit(&g_inited, 1, memory_order_release);
out:
    pthread_mutex_unlock(&g_state_lock);
    return rc;
}

SIM_API aclError aclFinalize(void)
{
    if (SIM_UNLIKELY(g_forked))
        return sim_forked_err("aclFinalize");
    if (tls_running_stream)
        return sim_err(ACL_ERROR_RT_PARAM_INVALID, "aclFinalize: cannot be called from inside a stream task");
    pthread_mutex_lock(&g_state_lock);
    if (!atomic_load(&g_inited)) {
        pthread_mutex_unlock(&g_state_lock);
        return sim_err(ACL_ERROR_REPEAT_FINALIZE, "aclFinalize: AscendCL is not initialized");
    }
    atomic_store(&g_finalizing, 1);
    sim_report_shutdown();     /* unblock blocking callbacks nobody would process */
    /* drain every stream, then invalidate every handle */
    for (int32_t i = 0; i < g_cfg.ndev; i++)
        sim_device_sync(&g_dev[i], -1, false, "aclFinalize");
    atomic_store_explicit(&g_inited, 0, memory_order_release);
    sim_devices_finalize();
    sim_workers_wait_all();
    sim_pools_stop();
    sim_report_shutdown();     /* wake aclrtProcessReport waiters: they return 100001 */
    atomic_store(&g_finalizing, 0);
    pthread_mutex_unlock(&g_state_lock);
    return ACL_SUCCESS;
}

/* ------------------------------------------------------------------ versions */

SIM_API aclError aclrtGetVersion(int32_t *majorVersion, int32_t *minorVersion, int32_t *patchVersion)
{
    if (SIM_UNLIKELY(g_forked))
        return sim_forked_err("aclrtGetVersion");
    SIM_NULL_CHECK("aclrtGetVersion", majorVersion);
    SIM_NULL_CHECK("aclrtGetVersion", minorVersion);
    SIM_NULL_CHECK("aclrtGetVersion", patchVersion);
    *majorVersion = 1;
    *minorVersion = 17;
    *patchVersion = 0;
    return ACL_SUCCESS;
}

SIM_API aclError aclsysGetVersionStr(char *pkgName, char *versionStr)
{
    if (SIM_UNLIKELY(g_forked))
        return sim_forked_err("aclsysGetVersionStr");
    SIM_NULL_CHECK("aclsysGetVersionStr", pkgName);
    SIM_NULL_CHECK("aclsysGetVersionStr", versionStr);
    static const char *const cann[] = {"runtime", "toolkit", "cann", "compiler", "opp"};
    const char *ver = NULL;
    for (size_t i = 0; i < sizeof cann / sizeof cann[0]; i++)
        if (strcmp(pkgName, cann[i]) == 0)
            ver = SIM_CANN_VERSION;
    if (strcmp(pkgName, "driver") == 0 || strcmp(pkgName, "firmware") == 0)
        ver = SIM_VERSION;
    if (!ver)
        return sim_err(ACL_ERROR_INVALID_PARAM, "aclsysGetVersionStr: unknown package name '%.64s'", pkgName);
    snprintf(versionStr, ACL_PKG_VERSION_MAX_SIZE, "%s", ver);
    return ACL_SUCCESS;
}

SIM_API const char *aclsimGetVersion(void) { return SIM_VERSION; }

SIM_API int32_t aclsimGetMemoryModel(void)
{
    SIM_CHECK_FORK("aclsimGetMemoryModel", ACLSIM_MEMORY_UNIFIED);
    if (sim_config_ensure("aclsimGetMemoryModel") != ACL_SUCCESS)
        return ACLSIM_MEMORY_UNIFIED;
    return g_cfg.memory_model;
}

SIM_API int32_t aclsimGetCheckMode(void)
{
    SIM_CHECK_FORK("aclsimGetCheckMode", 0);
    if (sim_config_ensure("aclsimGetCheckMode") != ACL_SUCCESS)
        return 0;
    return g_cfg.check;
}
