/* canna simulator: the simulated machine shared by processes (device memory capacity, per-process
 * usage, utilization), in a POSIX shared-memory segment.
 *
 * On a real NPU the driver knows every process using a device: device memory is one capacity for
 * all of them, and npu-smi (DCMI) lists them with their memory. The simulator mirrors that with a
 * segment under /dev/shm named after the machine's configuration (SoC, capacity, device count,
 * memory model, CANNA_SIM_MACHINE and the user id), so differently configured processes are
 * different machines. It holds one slot per process: pid, start time (pid + start time name one
 * process even when pids are reused), name, and per device the bytes counted against the device,
 * whether the process holds the device, and the utilization accounting of its tasks (the slot's
 * sim_util_t is the process's own accounting: stream workers write it directly).
 *
 * A process-shared robust mutex serializes slot claims and capacity charges (a process that dies
 * holding it does not block the others). A slot is released at exit, and reaped by any process
 * that finds its owner dead (charging, listing, attaching). The last process to leave unlinks the
 * segment. Without /dev/shm (or on any failure) the simulator silently falls back to per-process
 * accounting, exactly the behaviour before this file existed.
 */
#include "sim.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define SHM_MAGIC 0x314d48534e4e4143ull   /* "CANNSHM1" */
#define SHM_VERSION 1u
#define SHM_SLOTS 128u
#define SHM_NAME_MAX 32

enum { SLOT_FREE = 0, SLOT_ACTIVE = 1 };

typedef struct shm_dev {
    uint64_t used;
    uint64_t peak;
    uint32_t open;
    uint32_t pad;
    sim_util_t util[3];
} shm_dev_t;

typedef struct shm_slot {
    uint32_t state;
    int32_t pid;
    uint64_t starttime;
    char name[SHM_NAME_MAX];
    uint64_t pad[4];
    shm_dev_t dev[];   /* ndev entries */
} shm_slot_t;

typedef struct shm_hdr {
    uint64_t magic;
    uint32_t version;
    uint32_t nslots;
    uint32_t ndev;
    uint32_t slot_size;
    uint32_t ready;         /* set (release) once the creator initialized everything */
    uint32_t dead;          /* the last process left and unlinked the name: do not use */
    char config[192];
    pthread_mutex_t lock;
    uint64_t used_total[SIM_MAX_DEVICES];   /* sum of the live slots' used (recomputed after a crash) */
} shm_hdr_t;

static pthread_mutex_t g_shm_local = PTHREAD_MUTEX_INITIALIZER;
static shm_hdr_t *g_hdr;        /* mapped segment, or NULL */
static size_t g_map_len;
static shm_slot_t *g_slot;      /* this process's slot, or NULL */
static int g_slot_idx = -1;
static pid_t g_owner_pid;
static char g_path[256];
static bool g_tried;

static size_t slot_size(uint32_t ndev)
{
    size_t s = sizeof(shm_slot_t) + (size_t)ndev * sizeof(shm_dev_t);
    return (s + 63) / 64 * 64;
}

static inline shm_slot_t *slot_at(shm_hdr_t *h, uint32_t i)
{
    size_t off = (sizeof(shm_hdr_t) + 63) / 64 * 64 + (size_t)i * h->slot_size;
    return (shm_slot_t *)((char *)h + off);
}

static size_t segment_size(uint32_t ndev)
{
    return (sizeof(shm_hdr_t) + 63) / 64 * 64 + SHM_SLOTS * slot_size(ndev);
}

/* ------------------------------------------------------------------ process identity */

static uint64_t proc_starttime(pid_t pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = 0;
    char *p = strrchr(buf, ')');
    if (!p)
        return 0;
    p += 2;   /* field 3 (state) */
    for (int field = 3; field < 22 && *p; field++) {
        p = strchr(p, ' ');
        if (!p)
            return 0;
        p++;
    }
    return strtoull(p, NULL, 10);
}

static void proc_name(pid_t pid, char *out, size_t len)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/comm", (int)pid);
    out[0] = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    ssize_t n = read(fd, out, len - 1);
    close(fd);
    if (n < 0)
        n = 0;
    out[n] = 0;
    char *nl = strchr(out, '\n');
    if (nl)
        *nl = 0;
}

/* the slot's process is gone (or the pid now names another process) */
static bool slot_dead(const shm_slot_t *s)
{
    if (kill(s->pid, 0) != 0 && errno == ESRCH)
        return true;
    uint64_t st = proc_starttime(s->pid);
    return st != 0 && s->starttime != 0 && st != s->starttime;
}

/* ------------------------------------------------------------------ the lock */

static void shm_lock(shm_hdr_t *h)
{
    int rc = pthread_mutex_lock(&h->lock);
    if (rc == EOWNERDEAD) {
        /* a process died holding the lock: the slots are the truth, recompute the totals */
        for (uint32_t d = 0; d < h->ndev; d++) {
            uint64_t t = 0;
            for (uint32_t i = 0; i < h->nslots; i++) {
                shm_slot_t *s = slot_at(h, i);
                if (s->state == SLOT_ACTIVE)
                    t += s->dev[d].used;
            }
            h->used_total[d] = t;
        }
        pthread_mutex_consistent(&h->lock);
    }
}

static void shm_unlock(shm_hdr_t *h) { pthread_mutex_unlock(&h->lock); }

/* caller holds the lock; frees the slots of dead processes; returns how many */
static int reap_locked(shm_hdr_t *h)
{
    int n = 0;
    for (uint32_t i = 0; i < h->nslots; i++) {
        shm_slot_t *s = slot_at(h, i);
        if (s->state != SLOT_ACTIVE || (g_slot == s) || !slot_dead(s))
            continue;
        for (uint32_t d = 0; d < h->ndev; d++)
            h->used_total[d] -= s->dev[d].used <= h->used_total[d] ? s->dev[d].used : h->used_total[d];
        memset(s, 0, h->slot_size);
        __atomic_store_n(&s->state, SLOT_FREE, __ATOMIC_RELEASE);
        n++;
    }
    return n;
}

/* ------------------------------------------------------------------ attaching */

static uint64_t fnv1a(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 0x100000001b3ull;
    }
    return h;
}

static void make_config(char *buf, size_t len)
{
    const char *machine = getenv("CANNA_SIM_MACHINE");
    snprintf(buf, len, "v%u|%s|%llu|%d|%s|%s", SHM_VERSION, g_cfg.profile->name, (unsigned long long)g_cfg.hbm,
             g_cfg.ndev, g_cfg.memory_model == ACLSIM_MEMORY_DISCRETE ? "discrete" : "unified",
             machine && *machine ? machine : "default");
}

static void sleep_ms(int ms)
{
    struct timespec ts = {0, ms * 1000000L};
    nanosleep(&ts, NULL);
}

/* map the segment of this machine (creating it); caller holds g_shm_local */
static bool map_segment(void)
{
    if (g_hdr)
        return true;
    if (g_tried)
        return false;
    g_tried = true;
    if (!atomic_load(&g_cfg_loaded))
        return false;
    const char *off = getenv("CANNA_SIM_SHARED");
    if (off && strcmp(off, "0") == 0)
        return false;
    char cfg[192];
    make_config(cfg, sizeof cfg);
    snprintf(g_path, sizeof g_path, "/dev/shm/canna-sim-%u-%016llx", (unsigned)getuid(),
             (unsigned long long)fnv1a(cfg));
    size_t len = segment_size((uint32_t)g_cfg.ndev);
    for (int attempt = 0; attempt < 3; attempt++) {
        bool creator = false;
        int fd = open(g_path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (fd >= 0) {
            creator = true;
            if (ftruncate(fd, (off_t)len) != 0) {
                close(fd);
                unlink(g_path);
                return false;
            }
        } else if (errno == EEXIST) {
            fd = open(g_path, O_RDWR | O_CLOEXEC);
            if (fd < 0)
                return false;
            struct stat st;
            for (int i = 0; i < 200 && fstat(fd, &st) == 0 && (size_t)st.st_size < len; i++)
                sleep_ms(5);   /* the creator has not sized it yet */
            if (fstat(fd, &st) != 0 || (size_t)st.st_size != len) {
                close(fd);
                return false;   /* another layout: do not share */
            }
        } else {
            return false;
        }
        void *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        close(fd);
        if (m == MAP_FAILED) {
            if (creator)
                unlink(g_path);
            return false;
        }
        shm_hdr_t *h = m;
        if (creator) {
            h->magic = SHM_MAGIC;
            h->version = SHM_VERSION;
            h->nslots = SHM_SLOTS;
            h->ndev = (uint32_t)g_cfg.ndev;
            h->slot_size = (uint32_t)slot_size((uint32_t)g_cfg.ndev);
            snprintf(h->config, sizeof h->config, "%s", cfg);
            pthread_mutexattr_t a;
            pthread_mutexattr_init(&a);
            pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
            pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
            pthread_mutex_init(&h->lock, &a);
            pthread_mutexattr_destroy(&a);
            __atomic_store_n(&h->ready, 1, __ATOMIC_RELEASE);
        } else {
            for (int i = 0; i < 200 && !__atomic_load_n(&h->ready, __ATOMIC_ACQUIRE); i++)
                sleep_ms(5);
            if (!__atomic_load_n(&h->ready, __ATOMIC_ACQUIRE) || h->magic != SHM_MAGIC || h->version != SHM_VERSION ||
                h->ndev != (uint32_t)g_cfg.ndev || h->slot_size != slot_size((uint32_t)g_cfg.ndev) ||
                strcmp(h->config, cfg) != 0) {
                munmap(m, len);
                return false;
            }
        }
        shm_lock(h);
        bool dead = h->dead;
        shm_unlock(h);
        if (dead) {   /* its last user unlinked it while we opened it: start over */
            munmap(m, len);
            continue;
        }
        g_hdr = h;
        g_map_len = len;
        return true;
    }
    return false;
}

bool sim_shm_attach_reader(void)
{
    if (sim_config_ensure("dcmi") != ACL_SUCCESS)
        return false;
    pthread_mutex_lock(&g_shm_local);
    bool ok = map_segment();
    pthread_mutex_unlock(&g_shm_local);
    return ok;
}

static void release_slot(void);

void sim_shm_attach_process(void)
{
    pthread_mutex_lock(&g_shm_local);
    if (g_slot || !map_segment()) {
        pthread_mutex_unlock(&g_shm_local);
        return;
    }
    shm_hdr_t *h = g_hdr;
    pid_t pid = getpid();
    shm_lock(h);
    if (h->dead) {   /* cannot happen while mapped by a process holding a slot; be safe */
        shm_unlock(h);
        pthread_mutex_unlock(&g_shm_local);
        return;
    }
    reap_locked(h);
    shm_slot_t *s = NULL;
    for (uint32_t i = 0; i < h->nslots && !s; i++) {
        shm_slot_t *c = slot_at(h, i);
        if (c->state == SLOT_FREE) {
            s = c;
            g_slot_idx = (int)i;
        }
    }
    if (s) {
        memset(s, 0, h->slot_size);
        s->pid = (int32_t)pid;
        s->starttime = proc_starttime(pid);
        proc_name(pid, s->name, sizeof s->name);
        /* carry over what this process already counted (memory that survived an aclFinalize) */
        for (int32_t d = 0; d < g_cfg.ndev; d++) {
            pthread_mutex_lock(&g_dev[d].mem_lock);
            s->dev[d].used = g_dev[d].used;
            s->dev[d].peak = g_dev[d].used;
            h->used_total[d] += g_dev[d].used;
            pthread_mutex_unlock(&g_dev[d].mem_lock);
        }
        __atomic_store_n(&s->state, SLOT_ACTIVE, __ATOMIC_RELEASE);
        g_slot = s;
        g_owner_pid = pid;
    }
    shm_unlock(h);
    if (s) {
        /* from now on the process's utilization accounting lives in its slot */
        for (int32_t d = 0; d < g_cfg.ndev; d++) {
            sim_device_t *dv = &g_dev[d];
            pthread_mutex_lock(&dv->util_lock);
            memcpy(s->dev[d].util, dv->util_local, sizeof dv->util_local);
            dv->util = s->dev[d].util;
            pthread_mutex_unlock(&dv->util_lock);
        }
        static bool registered;
        if (!registered) {
            registered = true;
            atexit(release_slot);
        }
    }
    pthread_mutex_unlock(&g_shm_local);
}

/* at exit: give the slot back (its utilization accounting returns to process memory first, so a
 * stream worker still running never writes into a slot another process may claim) */
static void release_slot(void)
{
    if (g_forked || getpid() != g_owner_pid)
        return;   /* a forked child never touches its parent's slot */
    pthread_mutex_lock(&g_shm_local);
    shm_slot_t *s = g_slot;
    shm_hdr_t *h = g_hdr;
    if (!s || !h) {
        pthread_mutex_unlock(&g_shm_local);
        return;
    }
    for (int32_t d = 0; d < g_cfg.ndev; d++) {
        sim_device_t *dv = &g_dev[d];
        pthread_mutex_lock(&dv->util_lock);
        memcpy(dv->util_local, s->dev[d].util, sizeof dv->util_local);
        dv->util = dv->util_local;
        pthread_mutex_unlock(&dv->util_lock);
    }
    for (int32_t d = 0; d < g_cfg.ndev; d++)
        pthread_mutex_lock(&g_dev[d].mem_lock);
    shm_lock(h);
    for (uint32_t d = 0; d < h->ndev; d++)
        h->used_total[d] -= s->dev[d].used <= h->used_total[d] ? s->dev[d].used : h->used_total[d];
    memset(s, 0, h->slot_size);
    __atomic_store_n(&s->state, SLOT_FREE, __ATOMIC_RELEASE);
    g_slot = NULL;
    reap_locked(h);
    bool others = false;
    for (uint32_t i = 0; i < h->nslots && !others; i++)
        others = slot_at(h, i)->state == SLOT_ACTIVE;
    if (!others) {
        h->dead = 1;
        unlink(g_path);
    }
    shm_unlock(h);
    for (int32_t d = g_cfg.ndev - 1; d >= 0; d--)
        pthread_mutex_unlock(&g_dev[d].mem_lock);
    /* the mapping stays: late frees read g_slot == NULL and only update local counters */
    pthread_mutex_unlock(&g_shm_local);
}

/* ------------------------------------------------------------------ capacity */

bool sim_shm_charge(int32_t dev, uint64_t bytes, uint64_t capacity)
{
    shm_hdr_t *h = g_hdr;
    shm_slot_t *s = g_slot;
    if (!h || !s)
        return true;   /* per-process accounting only (the caller checked its own capacity) */
    shm_lock(h);
    if (h->used_total[dev] + bytes > capacity && reap_locked(h) == 0) {
        shm_unlock(h);
        return false;
    }
    if (h->used_total[dev] + bytes > capacity) {
        shm_unlock(h);
        return false;
    }
    s->dev[dev].used += bytes;
    if (s->dev[dev].used > s->dev[dev].peak)
        s->dev[dev].peak = s->dev[dev].used;
    h->used_total[dev] += bytes;
    shm_unlock(h);
    return true;
}

void sim_shm_uncharge(int32_t dev, uint64_t bytes)
{
    shm_hdr_t *h = g_hdr;
    shm_slot_t *s = g_slot;
    if (!h || !s)
        return;
    shm_lock(h);
    s->dev[dev].used -= bytes <= s->dev[dev].used ? bytes : s->dev[dev].used;
    h->used_total[dev] -= bytes <= h->used_total[dev] ? bytes : h->used_total[dev];
    shm_unlock(h);
}

uint64_t sim_shm_used_total(int32_t dev, uint64_t local)
{
    shm_hdr_t *h = g_hdr;
    if (!h || !g_slot)
        return local;
    shm_lock(h);
    reap_locked(h);
    uint64_t t = h->used_total[dev];
    shm_unlock(h);
    return t;
}

void sim_shm_set_open(int32_t dev, bool open)
{
    shm_slot_t *s = g_slot;
    if (s)
        __atomic_store_n(&s->dev[dev].open, open ? 1u : 0u, __ATOMIC_RELAXED);
}

/* ------------------------------------------------------------------ utilization */

/* busy core-ns of one slot's engine in the window (on a copy: never writes another process's data) */
static long double slot_window(const sim_util_t *u, uint64_t now, uint64_t *window_ns)
{
    sim_util_t c;
    memcpy(&c, u, sizeof c);
    sim_util_advance(&c, now);
    return sim_util_window(&c, now, window_ns);
}

static int32_t pct(long double busy, uint64_t window_ns, uint32_t cores)
{
    if (cores == 0)
        return -1;
    if (window_ns == 0)
        return 0;
    long double p = busy * 100.0L / ((long double)window_ns * (long double)cores);
    if (p < 0)
        p = 0;
    if (p > 100)
        p = 100;
    return (int32_t)(p + 0.5L);
}

int32_t sim_shm_util_percent(sim_device_t *d, int32_t engine, uint32_t cores, uint64_t now)
{
    uint64_t win = 0;
    long double busy;
    pthread_mutex_lock(&d->util_lock);
    sim_util_advance(&d->util[engine], now);
    busy = sim_util_window(&d->util[engine], now, &win);
    pthread_mutex_unlock(&d->util_lock);
    shm_hdr_t *h = g_hdr;
    if (h) {
        shm_lock(h);
        for (uint32_t i = 0; i < h->nslots; i++) {
            shm_slot_t *s = slot_at(h, i);
            if (s->state != SLOT_ACTIVE || s == g_slot || (uint32_t)d->id >= h->ndev)
                continue;
            uint64_t w2;
            busy += slot_window(&s->dev[d->id].util[engine], now, &w2);
        }
        shm_unlock(h);
    }
    return pct(busy, win, cores);
}

/* ------------------------------------------------------------------ monitoring API */

static void fill_info(aclsimProcessInfo *o, const shm_slot_t *s, int32_t dev, uint64_t now, bool own)
{
    memset(o, 0, sizeof *o);
    o->pid = s->pid;
    o->deviceId = dev;
    o->startTime = s->starttime;
    o->memUsed = s->dev[dev].used;
    o->memPeak = s->dev[dev].peak;
    o->deviceOpen = (int32_t)s->dev[dev].open;
    snprintf(o->name, sizeof o->name, "%s", s->name);
    long double busy = 0;
    uint64_t win = 0;
    for (int e = ACLSIM_ENGINE_VECTOR; e <= ACLSIM_ENGINE_CUBE; e++) {
        sim_util_t c;
        if (own)
            pthread_mutex_lock(&g_dev[dev].util_lock);
        memcpy(&c, &s->dev[dev].util[e], sizeof c);
        if (own)
            pthread_mutex_unlock(&g_dev[dev].util_lock);
        sim_util_advance(&c, now);
        o->busyNs[e] = c.cum_ns;
        long double b = sim_util_window(&c, now, &win);
        uint32_t cores = e == ACLSIM_ENGINE_CUBE ? g_cfg.profile->ai_cores : g_cfg.profile->vector_cores;
        long double share = cores ? b / cores : 0;
        if (share > busy)
            busy = share;
    }
    o->utilization = pct(busy, win, 1);
}

SIM_API aclError aclsimGetProcessInfo(int32_t deviceId, aclsimProcessInfo *infos, uint32_t maxCount, uint32_t *count)
{
    static const char api[] = "aclsimGetProcessInfo";
    if (SIM_UNLIKELY(g_forked))
        return sim_forked_err(api);
    SIM_NULL_CHECK(api, count);
    if (maxCount && !infos)
        return sim_err(ACL_ERROR_INVALID_PARAM, "%s: infos must not be NULL when maxCount > 0", api);
    aclError rc = sim_config_ensure(api);
    if (rc)
        return rc;
    if (deviceId != -1 && !sim_dev_valid(deviceId))
        return sim_err(ACL_ERROR_RT_INVALID_DEVICEID, "%s: invalid device id %d (%d device%s)", api, deviceId,
                       g_cfg.ndev, g_cfg.ndev == 1 ? "" : "s");
    uint32_t n = 0;
    uint64_t now = sim_now_ns();
    int32_t lo = deviceId == -1 ? 0 : deviceId, hi = deviceId == -1 ? g_cfg.ndev - 1 : deviceId;
    if (sim_shm_attach_reader()) {
        shm_hdr_t *h = g_hdr;
        shm_lock(h);
        reap_locked(h);
        for (uint32_t i = 0; i < h->nslots; i++) {
            shm_slot_t *s = slot_at(h, i);
            if (s->state != SLOT_ACTIVE)
                continue;
            for (int32_t d = lo; d <= hi; d++) {
                if (!s->dev[d].open && !s->dev[d].used)
                    continue;
                if (n < maxCount)
                    fill_info(&infos[n], s, d, now, s == g_slot);
                n++;
            }
        }
        shm_unlock(h);
    } else {
        /* no shared segment: this process alone */
        for (int32_t d = lo; d <= hi; d++) {
            sim_device_t *dv = &g_dev[d];
            pthread_mutex_lock(&dv->mem_lock);
            uint64_t used = dv->used, peak = dv->peak;
            pthread_mutex_unlock(&dv->mem_lock);
            if (!used)
                continue;
            if (n < maxCount) {
                aclsimProcessInfo *o = &infos[n];
                memset(o, 0, sizeof *o);
                o->pid = (int32_t)getpid();
                o->deviceId = d;
                o->startTime = proc_starttime(getpid());
                o->memUsed = used;
                o->memPeak = peak;
                o->deviceOpen = 1;
                proc_name(getpid(), o->name, sizeof o->name);
            }
            n++;
        }
    }
    *count = n;
    return ACL_SUCCESS;
}

SIM_API aclError aclsimGetMachineName(char *buf, uint32_t len)
{
    static const char api[] = "aclsimGetMachineName";
    SIM_NULL_CHECK(api, buf);
    if (len == 0)
        return sim_err(ACL_ERROR_INVALID_PARAM, "%s: len must be > 0", api);
    bool ok = sim_shm_attach_reader();
    snprintf(buf, len, "%s", ok ? g_path : "");
    return ACL_SUCCESS;
}

/* ------------------------------------------------------------------ for sim_dcmi.c */

/* device memory in use on `dev` by every live process (the local count without a segment) */
uint64_t sim_shm_device_used(int32_t dev)
{
    if (sim_shm_attach_reader()) {
        shm_hdr_t *h = g_hdr;
        shm_lock(h);
        reap_locked(h);
        uint64_t t = h->used_total[dev];
        shm_unlock(h);
        return t;
    }
    sim_device_t *d = &g_dev[dev];
    pthread_mutex_lock(&d->mem_lock);
    uint64_t u = d->used;
    pthread_mutex_unlock(&d->mem_lock);
    return u;
}

/* device-wide utilization for a monitor (no slot of its own) */
int32_t sim_shm_device_util(int32_t dev, int32_t engine)
{
    sim_shm_attach_reader();
    uint32_t cores = engine == ACLSIM_ENGINE_CUBE ? g_cfg.profile->ai_cores : g_cfg.profile->vector_cores;
    return sim_shm_util_percent(&g_dev[dev], engine, cores, sim_now_ns());
}
