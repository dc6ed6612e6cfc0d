/* canna simulator: device and pinned host allocations, the address table, copies and memsets.
 *
 * Every allocation is its own mapping (device allocations of ACLSIM_SHARE_MIN bytes or more: of
 * the process's memfd, so peers can map them; see aclsimMemGetShare). Live allocations and the
 * most recent SIM_FREED_RING freed ranges are kept in one search tree (glibc tsearch, ordered by
 * address range) under a writer-preferring rwlock. A freed range stays reserved until it leaves the ring (normal mode:
 * pages dropped with MADV_DONTNEED, still mapped so a late access cannot crash; memcheck mode:
 * poisoned and PROT_NONE), so no other mapping can reuse its addresses while it is remembered and
 * "freed" is never reported for memory that is someone else's. */
#include "sim.h"

#include <fcntl.h>
#include <search.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

enum { REC_DEV = 1, REC_HOST = 2, REC_FREED_DEV = 3, REC_FREED_HOST = 4 };

typedef struct sim_alloc {
    uintptr_t lo, hi;     /* the user range [lo, hi) */
    void *map_base;
    size_t map_len;
    size_t size;
    uint64_t charged;     /* bytes counted against the device */
    int32_t dev;
    uint8_t kind;
    bool committed;       /* memcheck quarantine: pages still committed */
    bool shared;          /* [map_base, +file_len) maps the memfd at file_off (see aclsimMemGetShare) */
    uint64_t file_off, file_len;
} sim_alloc_t;


/* large allocations check the host's available RAM first (see do_malloc) */
#define SIM_HOST_CHECK_MIN ((uint64_t)64 << 20)
#define SIM_HOST_RESERVE ((uint64_t)256 << 20)

/* MemAvailable of /proc/meminfo in bytes; false when unknown */
static bool host_available(uint64_t *out)
{
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f)
        return false;
    char line[256];
    bool ok = false;
    while (fgets(line, sizeof line, f)) {
        unsigned long long kb;
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) {
            *out = (uint64_t)kb * 1024;
            ok = true;
            break;
        }
    }
    fclose(f);
    return ok;
}

static pthread_rwlock_t g_mem_lock;
static pthread_once_t g_mem_once = PTHREAD_ONCE_INIT;
static void *g_mem_root;
static sim_alloc_t *g_freed[SIM_FREED_RING];
static size_t g_freed_pos;
static uint64_t g_quarantine_bytes;
static size_t g_page;

#define SIM_QUARANTINE_MAX (256ull << 20)   /* committed bytes kept poisoned in memcheck mode */

static void mem_init_once(void)
{
    pthread_rwlockattr_t a;
    pthread_rwlockattr_init(&a);
    pthread_rwlockattr_setkind_np(&a, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    pthread_rwlock_init(&g_mem_lock, &a);
    pthread_rwlockattr_destroy(&a);
    long p = sysconf(_SC_PAGESIZE);
    g_page = p > 0 ? (size_t)p : 4096;
}

static inline void mem_init(void) { pthread_once(&g_mem_once, mem_init_once); }

static int rng_cmp(const void *a, const void *b)
{
    const sim_alloc_t *x = a, *y = b;
    if (x->hi <= y->lo)
        return -1;
    if (x->lo >= y->hi)
        return 1;
    return 0;   /* overlapping ranges compare equal */
}

/* caller holds g_mem_lock; some record overlapping [p, p+n) (n >= 1) or NULL */
static sim_alloc_t *mem_lookup(uintptr_t p, size_t n)
{
    sim_alloc_t key;
    key.lo = p;
    key.hi = p + (n ? n : 1);
    void **r = tfind(&key, &g_mem_root, rng_cmp);
    return r ? (sim_alloc_t *)*r : NULL;
}

static inline size_t round_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

static void poison(void *base, size_t bytes)   /* base 8-aligned, bytes a multiple of 8 */
{
    uint64_t *w = base;
    for (size_t i = 0, n = bytes / 8; i < n; i++)
        w[i] = 0x7FFF7FFF7FFF7FFFull;   /* bytes FF 7F: NaN in fp16, bf16, fp32 and fp64 */
}

/* ------------------------------------------------------------------ the shareable memfd */

/* One memfd per process holds the device allocations of at least ACLSIM_SHARE_MIN bytes, each at
 * its own file offset; offsets only grow (an offset is never reused, so a peer's cached mapping of
 * one can never show another allocation), and a freed allocation's pages are punched out of the
 * file at once (its addresses become anonymous memory, see retire_locked). */
static pthread_mutex_t g_share_lock = PTHREAD_MUTEX_INITIALIZER;
static int g_share_fd = -2;           /* -2 not tried yet, -1 unavailable */
static uint64_t g_share_ino, g_share_end;

static int share_fd_locked(void)
{
    if (g_share_fd == -2) {
        g_share_fd = -1;
        int fd = memfd_create("canna-device-memory", MFD_CLOEXEC);
        struct stat st;
        if (fd >= 0 && fstat(fd, &st) == 0) {
            g_share_fd = fd;
            g_share_ino = (uint64_t)st.st_ino;
        } else if (fd >= 0) {
            close(fd);
        }
    }
    return g_share_fd;
}

/* map `len` bytes of fresh memfd space at `at` (MAP_FIXED); false when unavailable */
static bool share_map(void *at, size_t len, uint64_t *off_out)
{
    pthread_mutex_lock(&g_share_lock);
    int fd = share_fd_locked();
    uint64_t off = g_share_end;
    bool ok = fd >= 0 && ftruncate(fd, (off_t)(off + len)) == 0 &&
              mmap(at, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, (off_t)off) != MAP_FAILED;
    if (ok)
        g_share_end = off + len;
    pthread_mutex_unlock(&g_share_lock);
    *off_out = off;
    return ok;
}

/* the allocation leaves the memfd: anonymous pages at the same addresses, the file's pages freed */
static void share_unmap(sim_alloc_t *r)
{
    if (!r->shared)
        return;
    mmap(r->map_base, r->file_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    fallocate(g_share_fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)r->file_off, (off_t)r->file_len);
    r->shared = false;
}

SIM_API aclError aclsimMemGetShare(const void *ptr, uint64_t size, aclsimMemShare *share)
{
    static const char api[] = "aclsimMemGetShare";
    SIM_NULL_CHECK(api, share);
    if (!ptr) {
        pthread_mutex_lock(&g_share_lock);
        int fd = share_fd_locked();
        share->fd = fd;
        share->ino = g_share_ino;
        pthread_mutex_unlock(&g_share_lock);
        return fd >= 0 ? ACL_SUCCESS : sim_err(ACL_ERROR_RT_PARAM_INVALID, "%s: no memfd in this process", api);
    }
    uintptr_t p = (uintptr_t)ptr;
    if (size > UINTPTR_MAX - p)
        return sim_err(ACL_ERROR_RT_PARAM_INVALID, "%s: range wraps around", api);
    mem_init();
    pthread_rwlock_rdlock(&g_mem_lock);
    sim_alloc_t *r = mem_lookup(p, size ? (size_t)size : 1);
    bool ok = r && r->kind == REC_DEV && r->shared && r->lo <= p && p + size <= r->hi;
    if (ok) {
        share->fd = g_share_fd;
        share->ino = g_share_ino;
        share->mapOffset = r->file_off;
        share->mapLen = r->file_len;
        share->ptrOffset = p - (uintptr_t)r->map_base;
    }
    pthread_rwlock_unlock(&g_mem_lock);
    return ok ? ACL_SUCCESS : sim_err(ACL_ERROR_RT_PARAM_INVALID, "%s: %p is not in a shareable device allocation", api, ptr);
}

/* map a region for `size` user bytes; returns the 64-byte-aligned user pointer. With share, the
 * pages (not the memcheck guard page) come from the memfd when it is available (r->shared). */
static void *map_region(size_t size, void **map_base, size_t *map_len, sim_alloc_t *share)
{
    size_t usable = round_up(size, 64);
    size_t len = round_up(usable, g_page);
    bool guard = g_cfg.check != 0;
    if (guard)
        len += g_page;
    void *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
        return NULL;
    char *base = m;
    if (guard) {
        /* the allocation ends (for sizes that are multiples of 64: exactly) at a PROT_NONE page */
        if (mprotect((char *)m + len - g_page, g_page, PROT_NONE) != 0) {
            munmap(m, len);
            return NULL;
        }
        base = (char *)m + len - g_page - usable;
    }
    if (share) {
        size_t data = guard ? len - g_page : len;
        uint64_t off;
        if (share_map(m, data, &off)) {
            share->shared = true;
            share->file_off = off;
            share->file_len = data;
        }
    }
    *map_base = m;
    *map_len = len;
    return base;
}

/* caller holds the write lock; drop committed quarantine pages beyond the cap, oldest first */
static void quarantine_trim_locked(void)
{
    for (size_t k = 0; k < SIM_FREED_RING && g_quarantine_bytes > SIM_QUARANTINE_MAX; k++) {
        sim_alloc_t *r = g_freed[(g_freed_pos + k) % SIM_FREED_RING];
        if (!r || !r->committed)
            continue;
        mmap(r->map_base, r->map_len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
        r->committed = false;
        g_quarantine_bytes -= r->map_len;
    }
}

/* caller holds the write lock: r becomes a remembered freed range; returns an evicted record */
static sim_alloc_t *retire_locked(sim_alloc_t *r)
{
    share_unmap(r);
    r->kind = r->kind == REC_DEV ? REC_FREED_DEV : REC_FREED_HOST;
    if (g_cfg.check) {
        poison((void *)r->lo, round_up(r->size, 64));
        mprotect(r->map_base, r->map_len, PROT_NONE);
        r->committed = true;
        g_quarantine_bytes += r->map_len;
    } else {
        madvise(r->map_base, r->map_len, MADV_DONTNEED);
    }
    sim_alloc_t *old = g_freed[g_freed_pos];
    g_freed[g_freed_pos] = r;
    g_freed_pos = (g_freed_pos + 1) % SIM_FREED_RING;
    if (old) {
        tdelete(old, &g_mem_root, rng_cmp);
        if (old->committed)
            g_quarantine_bytes -= old->map_len;
    }
    if (g_cfg.check)
        quarantine_trim_locked();
    return old;
}

/* ------------------------------------------------------------------ allocation */

static aclError check_policy(const char *api, aclrtMemMallocPolicy policy)
{
    uint32_t p = (uint32_t)policy;
    uint32_t flags = ACL_MEM_TYPE_LOW_BAND_WIDTH | ACL_MEM_TYPE_HIGH_BAND_WIDTH | ACL_MEM_ACCESS_USER_SPACE_READONLY;
    if ((p & ~flags) > ACL_MEM_MALLOC_HUGE1G_ONLY_P2P)
        return sim_err(ACL_ERROR_INVALID_PARAM, "%s: invalid memory policy 0x%x", api, p);
    return ACL_SUCCESS;
}

static aclError insert_rec(sim_alloc_t *r)
{
    pthread_rwlock_wrlock(&g_mem_lock);
    void **slot = tsearch(r, &g_mem_root, rng_cmp);
    bool ok = slot && *slot == r;
    pthread_rwlock_unlock(&g_mem_lock);
    return ok ? ACL_SUCCESS : ACL_ERROR_RT_MEMORY_ALLOCATION;
}

static aclError dev_malloc(const char *api, void **devPtr, size_t size, aclrtMemMallocPolicy policy, bool align32)
{
    SIM_ENTER(api);
    SIM_NULL_CHECK(api, devPtr);
    if (size == 0)
        return sim_err(ACL_ERROR_INVALID_PARAM, "%s: size must be > 0", api);
    aclError rc = check_policy(api, policy);
    if (rc)
        return rc;
    sim_ctx_t *c = NULL;
    rc = sim_need_ctx(api, &c);
    if (rc)
        return rc;
    sim_device_t *d = c->dev;
    sim_obj_unref(&c->obj);
    mem_init();

    uint64_t charged = 0;
    bool too_big = size > (SIZE_MAX >> 2);
    if (!too_big)
        charged = round_up(size, 32) + (align32 ? 0 : 32);
    pthread_mutex_lock(&d->mem_lock);
    if (too_big || d->used + charged > d->capacity || d->used + charged < d->used ||
        !sim_shm_charge(d->id, charged, d->capacity)) {
        /* the capacity is shared by every process of the simulated machine, as on a device */
        uint64_t used = sim_shm_used_total(d->id, d->used), cap = d->capacity;
        pthread_mutex_unlock(&d->mem_lock);
        return sim_err(ACL_ERROR_RT_MEMORY_ALLOCATION,
                       "%s: out of device memory on device %d: requested %zu bytes (%llu counted), %llu of %llu bytes "
                       "in use, %llu free",
                       api, d->id, size, (unsigned long long)charged, (unsigned long long)used,
                       (unsigned long long)cap, (unsigned long long)(cap > used ? cap - used : 0));
    }
    d->used += charged;   /* reserve */
    pthread_mutex_unlock(&d->mem_lock);

    /* device memory is host RAM here and fresh memory is written (poisoned): an allocation the host
     * cannot back would get the process killed by the OOM killer instead of failing like a device */
    uint64_t avail;
    if (size >= SIM_HOST_CHECK_MIN && host_available(&avail) && size + SIM_HOST_RESERVE > avail) {
        pthread_mutex_lock(&d->mem_lock);
        d->used -= charged;
        sim_shm_uncharge(d->id, charged);
        pthread_mutex_unlock(&d->mem_lock);
        return sim_err(ACL_ERROR_RT_MEMORY_ALLOCATION,
                       "%s: out of memory on device %d: %zu bytes requested, but the simulator backs device memory "
                       "with host RAM and only %llu bytes are available (set CANNA_SIM_HBM_SIZE to what this host "
                       "can hold)", api, d->id, size, (unsigned long long)avail);
    }

    sim_alloc_t *r = calloc(1, sizeof *r);
    void *base = r ? map_region(size, &r->map_base, &r->map_len, size >= ACLSIM_SHARE_MIN ? r : NULL) : NULL;
    if (base) {
        poison(base, round_up(size, 64));
        r->lo = (uintptr_t)base;
        r->hi = r->lo + size;
        r->size = size;
        r->charged = charged;
        r->dev = d->id;
        r->kind = REC_DEV;
        if (insert_rec(r) != ACL_SUCCESS) {
            share_unmap(r);
            munmap(r->map_base, r->map_len);
            base = NULL;
        }
    }
    pthread_mutex_lock(&d->mem_lock);
    if (!base) {
        d->used -= charged;
        sim_shm_uncharge(d->id, charged);
    } else {
        d->nallocs++;
        d->nmalloc_calls++;
        if (d->used > d->peak)
            d->peak = d->used;
    }
    pthread_mutex_unlock(&d->mem_lock);
    if (!base) {
        free(r);
        return sim_err(ACL_ERROR_RT_MEMORY_ALLOCATION, "%s: the host could not provide %zu bytes for device %d", api,
                       size, d->id);
    }
    *devPtr = base;
    return ACL_SUCCESS;
}

SIM_API aclError aclrtMalloc(void **devPtr, size_t size, aclrtMemMallocPolicy policy)
{
    return dev_malloc("aclrtMalloc", devPtr, size, policy, false);
}

SIM_API aclError aclrtMallocAlign32(void **devPtr, size_t size, aclrtMemMallocPolicy policy)
{
    return dev_malloc("aclrtMallocAlign32", devPtr, size, policy, true);
}

SIM_API aclError aclrtMallocHost(void **hostPtr, size_t size)
{
    static const char api[] = "aclrtMallocHost";
    SIM_ENTER(api);
    SIM_NULL_CHECK(api, hostPtr);
    if (size == 0)
        return sim_err(ACL_ERROR_INVALID_PARAM, "%s: size must be > 0", api);
    mem_init();
    sim_alloc_t *r = NULL;
    void *base = NULL;
    if (size <= (SIZE_MAX >> 2) && (r = calloc(1, sizeof *r)) != NULL)
        base = map_region(size, &r->map_base, &r->map_len, NULL);
    if (base) {
        r->lo = (uintptr_t)base;
        r->hi = r->lo + size;
        r->size = size;
        r->dev = -1;
        r->kind = REC_HOST;
        if (insert_rec(r) != ACL_SUCCESS) {
            munmap(r->map_base, r->map_len);
            base = NULL;
        }
    }
    if (!base) {
        free(r);
        return sim_err(ACL_ERROR_RT_MEMORY_ALLOCATION, "%s: cannot allocate %zu bytes of host memory", api, size);
    }
    *hostPtr = base;
    return ACL_SUCCESS;
}

static aclError do_free(const char *api, void *ptr, bool host)
{
    SIM_ENTER(api);
    SIM_NULL_CHECK(api, ptr);
    mem_init();
    const char *what = host ? "an aclrtMallocHost allocation" : "a device allocation";
    uintptr_t p = (uintptr_t)ptr;
    pthread_rwlock_wrlock(&g_mem_lock);
    sim_alloc_t *r = mem_lookup(p, 1);
    aclError rc = ACL_SUCCESS;
    sim_alloc_t *evicted = NULL;
    int32_t dev = -1;
    uint64_t charged = 0;
    if (!r) {
        rc = sim_err(ACL_ERROR_RT_PARAM_INVALID, "%s: %p is not %s", api, ptr, what);
    } else if (r->kind == REC_FREED_DEV || r->kind == REC_FREED_HOST) {
        if (r->lo == p && (r->kind == REC_FREED_HOST) == host)
            rc = sim_err(ACL_ERROR_RT_MEMORY_FREE, "%s: double free of %p (%zu bytes, already freed)", api, ptr, r->size);
        else
            rc = sim_err(ACL_ERROR_RT_PARAM_INVALID, "%s: %p lies in memory that was already freed", api, ptr);
    } else if (r->lo != p) {
        rc = sim_err(ACL_ERROR_RT_PARAM_INVALID, "%s: %p is not the start of %s (it is %zu bytes into the one at %p)",
                     api, ptr, what, (size_t)(p - r->lo), (void *)r->lo);
    } else if (host && r->kind != REC_HOST) {
        rc = sim_err(ACL_ERROR_RT_PARAM_INVALID, "%s: %p is device memory; free it with aclrtFree", api, ptr);
    } else if (!host && r->kind != REC_DEV) {
        rc = sim_err(ACL_ERROR_RT_PARAM_INVALID, "%s: %p was allocated by aclrtMallocHost; free it with aclrtFreeHost",
                     api, ptr);
    } else {
        dev = r->dev;
        charged = r->charged;
        evicted = retire_locked(r);
    }
    pthread_rwlock_unlock(&g_mem_lock);
    if (evicted) {
        munmap(evicted->map_base, evicted->map_len);
        free(evicted);
    }
    if (rc == ACL_SUCCESS && !host && dev >= 0) {
        sim_device_t *d = &g_dev[dev];
        pthread_mutex_lock(&d->mem_lock);
        d->used -= charged;
        sim_shm_uncharge(d->id, charged);
        d->nallocs--;
        d->nfree_calls++;
        pthread_mutex_unlock(&d->mem_lock);
    }
    return rc;
}

SIM_API aclError aclrtFree(void *devPtr) { return do_free("aclrtFree", devPtr, false); }
SIM_API aclError aclrtFreeHost(void *hostPtr) { return do_free("aclrtFreeHost", hostPtr, true); }

/* ------------------------------------------------------------------ pointer checks */

aclError sim_mem_classify(const void *ptr, size_t n, const char *api, const char *side, int *where, int32_t *dev)
{
    uintptr_t p = (uintptr_t)ptr;
    if (!ptr)
        return sim_err(ACL_ERROR_INVALID_PARAM, "%s: %s must not be NULL", api, side);
    if (p < 65536)   /* Linux never maps below vm.mmap_min_addr (64 KiB by default) */
        return sim_err(ACL_ERROR_RT_PARAM_INVALID, "%s: %s %p is not a valid address", api, side, ptr);
    if (n > UINTPTR_MAX - p)
        return sim_err(ACL_ERROR_INVALID_PARAM, "%s: %s range %p + %zu wraps around the address space", api, side, ptr, n);
    mem_init();
    pthread_rwlock_rdlock(&g_mem_lock);
    sim_alloc_t *r = mem_lookup(p, n);
    sim_alloc_t c;
    if (r)
        c = *r;
    pthread_rwlock_unlock(&g_mem_lock);
    if (!r) {
        *where = SIM_PTR_HOST;
        *dev = -1;
        return ACL_SUCCESS;
    }
    const char *kind = (c.kind == REC_DEV || c.kind == REC_FREED_DEV) ? "device allocation" : "aclrtMallocHost allocation";
    if (c.kind == REC_FREED_DEV || c.kind == REC_FREED_HOST)
        return sim_err(ACL_ERROR_RT_PARAM_INVALID,
                       "%s: %s range [%p, +%zu) lies in freed memory (the %s at %p of %zu bytes was freed)", api, side,
                       ptr, n, kind, (void *)c.lo, c.size);
    if (p < c.lo)
        return sim_err(ACL_ERROR_RT_PARAM_INVALID, "%s: %s range [%p, +%zu) starts before the %s at %p", api, side, ptr,
                       n, kind, (void *)c.lo);
    if (p + n > c.hi)
        return sim_err(ACL_ERROR_RT_PARAM_INVALID,
                       "%s: %s range [%p, +%zu) is out of bounds: it ends %zu bytes past the end of the %s at %p "
                       "(%zu bytes)",
                       api, side, ptr, n, (size_t)(p + n - c.hi), kind, (void *)c.lo, c.size);
    *where = c.kind == REC_DEV ? SIM_PTR_DEVICE : SIM_PTR_HOST;
    *dev = c.kind == REC_DEV ? c.dev : -1;
    return ACL_SUCCESS;
}

bool sim_mem_still_live(const void *ptr, size_t n)
{
    uintptr_t p = (uintptr_t)ptr;
    mem_init();
    pthread_rwlock_rdlock(&g_mem_lock);
    sim_alloc_t *r = mem_lookup(p, n);
    bool ok = r && r->kind == REC_DEV && r->lo <= p && p + n <= r->hi;
    pthread_rwlock_unlock(&g_mem_lock);
    return ok;
}

SIM_API aclError aclsimCheckDevicePointer(const void *ptr, uint64_t size, int32_t *deviceId)
{
    static const char api[] = "aclsimCheckDevicePointer";
    if (SIM_UNLIKELY(g_forked))
        return sim_forked_err(api);
    uintptr_t p = (uintptr_t)ptr;
    if (!ptr)
        return sim_err(ACL_ERROR_RT_PARAM_INVALID, "%s: NULL is not device memory", api);
    if (size > UINTPTR_MAX - p)
        return sim_err(ACL_ERROR_RT_PARAM_INVALID, "%s: range %p + %llu wraps around the address space", api, ptr,
                       (unsigned long long)size);
    mem_init();
    pthread_rwlock_rdlock(&g_mem_lock);
    sim_alloc_t *r = mem_lookup(p, size ? (size_t)size : 1);
    sim_alloc_t c;
    if (r)
        c = *r;
    pthread_rwlock_unlock(&g_mem_lock);
    if (!r)
        return sim_err(ACL_ERROR_RT_PARAM_INVALID, "%s: %p is not device memory (foreign pointer)", api, ptr);
    if (c.kind == REC_FREED_DEV || c.kind == REC_FREED_HOST)
        return sim_err(ACL_ERROR_RT_PARAM_INVALID, "%s: %p lies in freed memory (the allocation at %p of %zu bytes)", api,
                       ptr, (void *)c.lo, c.size);
    if (c.kind == REC_HOST)
        return sim_err(ACL_ERROR_RT_PARAM_INVALID, "%s: %p is host memory from aclrtMallocHost, not device memory", api,
                       ptr);
    if (p < c.lo)
        return sim_err(ACL_ERROR_RT_PARAM_INVALID, "%s: range [%p, +%llu) starts before the device allocation at %p", api,
                       ptr, (unsigned long long)size, (void *)c.lo);
    if (p + size > c.hi)
        return sim_err(ACL_ERROR_RT_PARAM_INVALID,
                       "%s: range [%p, +%llu) is out of bounds: it ends %llu bytes past the device allocation at %p "
                       "(%zu bytes)",
                       api, ptr, (unsigned long long)size, (unsigned long long)(p + size - c.hi), (void *)c.lo, c.size);
    if (deviceId)
        *deviceId = c.dev;
    return ACL_SUCCESS;
}

SIM_API aclError aclrtPointerGetAttributes(const void *ptr, aclrtPtrAttributes *attributes)
{
    static const char api[] = "aclrtPointerGetAttributes";
    SIM_ENTER(api);
    SIM_NULL_CHECK(api, ptr);
    SIM_NULL_CHECK(api, attributes);
    mem_init();
    pthread_rwlock_rdlock(&g_mem_lock);
    sim_alloc_t *r = mem_lookup((uintptr_t)ptr, 1);
    int kind = r ? r->kind : 0;
    int32_t dev = r ? r->dev : 0;
    pthread_rwlock_unlock(&g_mem_lock);
    memset(attributes, 0, sizeof *attributes);
    attributes->pageSize = (uint32_t)g_page;
    if (kind == REC_DEV) {
        attributes->location.type = ACL_MEM_LOCATION_TYPE_DEVICE;
        attributes->location.id = (uint32_t)dev;
    } else if (kind == REC_HOST) {
        attributes->location.type = ACL_MEM_LOCATION_TYPE_HOST;
    } else {
        attributes->location.type = ACL_MEM_LOCATION_TYPE_UNREGISTERED;
    }
    return ACL_SUCCESS;
}

/* ------------------------------------------------------------------ capacity and info */

SIM_API aclError aclsimSetDeviceMemoryCapacity(int32_t deviceId, uint64_t bytes)
{
    static const char api[] = "aclsimSetDeviceMemoryCapacity";
    if (SIM_UNLIKELY(g_forked))
        return sim_forked_err(api);
    aclError rc = sim_config_ensure(api);
    if (rc)
        return rc;
    if (!sim_dev_valid(deviceId))
        return sim_err(ACL_ERROR_RT_INVALID_DEVICEID, "%s: invalid device id %d", api, deviceId);
    sim_device_t *d = &g_dev[deviceId];
    pthread_mutex_lock(&d->mem_lock);
    if (bytes < d->used) {
        uint64_t used = d->used;
        pthread_mutex_unlock(&d->mem_lock);
        return sim_err(ACL_ERROR_RT_PARAM_INVALID, "%s: %llu bytes is below the %llu bytes in use on device %d", api,
                       (unsigned long long)bytes, (unsigned long long)used, deviceId);
    }
    d->capacity = bytes;
    pthread_mutex_unlock(&d->mem_lock);
    return ACL_SUCCESS;
}

SIM_API aclError aclrtGetMemInfo(aclrtMemAttr attr, size_t *free_, size_t *total)
{
    static const char api[] = "aclrtGetMemInfo";
    SIM_ENTER(api);
    if (!free_ || !total)
        return sim_err(ACL_ERROR_INVALID_PARAM, "%s: %s must not be NULL", api, free_ ? "total" : "free");
    if ((int)attr < ACL_DDR_MEM || (int)attr > ACL_MEM_P2P_HUGE1G)
        return sim_err(ACL_ERROR_INVALID_PARAM, "%s: invalid memory attribute %d", api, (int)attr);
    sim_ctx_t *c = NULL;
    aclError rc = sim_need_ctx(api, &c);
    if (rc)
        return rc;
    sim_device_t *d = c->dev;
    sim_obj_unref(&c->obj);
    pthread_mutex_lock(&d->mem_lock);
    uint64_t used = sim_shm_used_total(d->id, d->used);   /* every process of the machine */
    *total = (size_t)d->capacity;
    *free_ = (size_t)(d->capacity > used ? d->capacity - used : 0);
    pthread_mutex_unlock(&d->mem_lock);
    return ACL_SUCCESS;
}

/* ------------------------------------------------------------------ copies */

static const char *kind_name(int k)
{
    static const char *const n[] = {"ACL_MEMCPY_HOST_TO_HOST",        "ACL_MEMCPY_HOST_TO_DEVICE",
                                    "ACL_MEMCPY_DEVICE_TO_HOST",      "ACL_MEMCPY_DEVICE_TO_DEVICE",
                                    "ACL_MEMCPY_DEFAULT",             "ACL_MEMCPY_HOST_TO_BUF_TO_DEVICE",
                                    "ACL_MEMCPY_INNER_DEVICE_TO_DEVICE", "ACL_MEMCPY_INTER_DEVICE_TO_DEVICE"};
    return (k >= 0 && k < 8) ? n[k] : "?";
}

typedef struct copy_plan {
    bool noop;
    int dst_where, src_where;
} copy_plan_t;

static aclError copy_check(const char *api, void *dst, size_t destMax, const void *src, size_t count,
                           aclrtMemcpyKind kind, copy_plan_t *plan)
{
    int k = (int)kind;
    plan->noop = false;
    if (k < ACL_MEMCPY_HOST_TO_HOST || k > ACL_MEMCPY_INTER_DEVICE_TO_DEVICE)
        return sim_err(ACL_ERROR_INVALID_PARAM, "%s: invalid copy kind %d", api, k);
    if (count == 0) {
        plan->noop = true;
        return ACL_SUCCESS;
    }
    if (!dst)
        return sim_err(ACL_ERROR_INVALID_PARAM, "%s: dst must not be NULL", api);
    if (!src)
        return sim_err(ACL_ERROR_INVALID_PARAM, "%s: src must not be NULL", api);
    if (destMax < count)
        return sim_err(ACL_ERROR_INVALID_PARAM, "%s: destMax (%zu) is smaller than count (%zu)", api, destMax, count);
    int32_t ddev, sdev;
    aclError rc = sim_mem_classify(dst, count, api, "dst", &plan->dst_where, &ddev);
    if (rc)
        return rc;
    rc = sim_mem_classify(src, count, api, "src", &plan->src_where, &sdev);
    if (rc)
        return rc;
    bool dd = plan->dst_where == SIM_PTR_DEVICE, sd = plan->src_where == SIM_PTR_DEVICE;
    if (g_cfg.memory_model == ACLSIM_MEMORY_DISCRETE && k != ACL_MEMCPY_DEFAULT) {
        int need_src = -1, need_dst = -1;   /* 1 device, 0 host */
        switch (k) {
        case ACL_MEMCPY_HOST_TO_HOST: need_src = 0; need_dst = 0; break;
        case ACL_MEMCPY_HOST_TO_DEVICE:
        case ACL_MEMCPY_HOST_TO_BUF_TO_DEVICE: need_src = 0; need_dst = 1; break;
        case ACL_MEMCPY_DEVICE_TO_HOST: need_src = 1; need_dst = 0; break;
        default: need_src = 1; need_dst = 1; break;
        }
        if ((int)sd != need_src)
            return sim_err(ACL_ERROR_RT_PARAM_INVALID, "%s: kind %s needs %s memory as the source but src %p is %s memory",
                           api, kind_name(k), need_src ? "device" : "host", src, sd ? "device" : "host");
        if ((int)dd != need_dst)
            return sim_err(ACL_ERROR_RT_PARAM_INVALID,
                           "%s: kind %s needs %s memory as the destination but dst %p is %s memory", api, kind_name(k),
                           need_dst ? "device" : "host", dst, dd ? "device" : "host");
    }
    if (dd && sd && ddev != sdev && !sim_peer_enabled(ddev, sdev))
        return sim_err(ACL_ERROR_RT_PARAM_INVALID,
                       "%s: copy from device %d to device %d needs peer access (aclrtDeviceEnablePeerAccess) between "
                       "devices %d and %d",
                       api, sdev, ddev, sdev, ddev);
    return ACL_SUCCESS;
}

SIM_API aclError aclrtMemcpy(void *dst, size_t destMax, const void *src, size_t count, aclrtMemcpyKind kind)
{
    static const char api[] = "aclrtMemcpy";
    SIM_ENTER(api);
    sim_ctx_t *c = NULL;
    aclError rc = sim_need_ctx(api, &c);
    if (rc)
        return rc;
    int32_t dev = c->dev->id;
    sim_obj_unref(&c->obj);
    copy_plan_t plan;
    rc = copy_check(api, dst, destMax, src, count, kind, &plan);
    if (rc || plan.noop)
        return rc;
    sim_parallel_memmove(dev, dst, src, count);
    return ACL_SUCCESS;
}

static aclError run_copy(sim_task_t *t, sim_stream_t *s)
{
    if (t->u.copy.dst_dev && !sim_mem_still_live(t->u.copy.dst, t->u.copy.n))
        return sim_err(ACL_ERROR_RT_PARAM_INVALID, "aclrtMemcpyAsync: destination %p was freed before the copy ran",
                       t->u.copy.dst);
    if (t->u.copy.src_dev && !sim_mem_still_live(t->u.copy.src, t->u.copy.n))
        return sim_err(ACL_ERROR_RT_PARAM_INVALID, "aclrtMemcpyAsync: source %p was freed before the copy ran",
                       (void *)t->u.copy.src);
    sim_parallel_memmove(s->dev->id, t->u.copy.dst, t->u.copy.src, t->u.copy.n);
    return ACL_SUCCESS;
}

static void release_copy(sim_task_t *t) { free(t->u.copy.staging); }

SIM_API aclError aclrtMemcpyAsync(void *dst, size_t destMax, const void *src, size_t count, aclrtMemcpyKind kind,
                                  aclrtStream stream)
{
    static const char api[] = "aclrtMemcpyAsync";
    SIM_ENTER(api);
    sim_stream_t *s = NULL;
    aclError rc = sim_stream_resolve(stream, api, &s);
    if (rc)
        return rc;
    copy_plan_t plan;
    rc = copy_check(api, dst, destMax, src, count, kind, &plan);
    if (rc || plan.noop)
        goto out;
    sim_task_t *t = sim_task_new();
    void *staging = NULL;
    if (t && (int)kind == ACL_MEMCPY_HOST_TO_BUF_TO_DEVICE) {
        staging = malloc(count);
        if (staging)
            memcpy(staging, src, count);   /* the host buffer may be reused as soon as we return */
    }
    if (!t || ((int)kind == ACL_MEMCPY_HOST_TO_BUF_TO_DEVICE && !staging)) {
        free(t);
        rc = sim_err(ACL_ERROR_RT_MEMORY_ALLOCATION, "%s: out of host memory (%zu bytes)", api, count);
        goto out;
    }
    t->run = run_copy;
    t->release = release_copy;
    t->u.copy.dst = dst;
    t->u.copy.src = staging ? staging : src;
    t->u.copy.n = count;
    t->u.copy.staging = staging;
    t->u.copy.dst_dev = plan.dst_where == SIM_PTR_DEVICE;
    t->u.copy.src_dev = !staging && plan.src_where == SIM_PTR_DEVICE;
    t->steal = true;                 /* a synchronizing thread may run it: ~16 bytes per ns */
    t->cost_ns = count / 16;
    rc = sim_stream_submit(s, t, count <= SIM_INLINE_COPY_MAX, api);
out:
    sim_obj_unref(&s->obj);
    return rc;
}

/* ------------------------------------------------------------------ memset */

static aclError memset_check(const char *api, void *ptr, size_t maxCount, size_t count, int *where)
{
    if (!ptr)
        return sim_err(ACL_ERROR_INVALID_PARAM, "%s: devPtr must not be NULL", api);
    if (count > maxCount)
        return sim_err(ACL_ERROR_INVALID_PARAM, "%s: count (%zu) is larger than maxCount (%zu)", api, count, maxCount);
    if (count == 0)
        return ACL_SUCCESS;
    int32_t dev;
    aclError rc = sim_mem_classify(ptr, count, api, "devPtr", where, &dev);
    if (rc == ACL_SUCCESS && g_cfg.memory_model == ACLSIM_MEMORY_DISCRETE && *where != SIM_PTR_DEVICE)
        return sim_err(ACL_ERROR_RT_PARAM_INVALID, "%s: devPtr %p is not device memory (discrete memory model: "
                       "a PCIe card cannot set host memory)", api, ptr);
    return rc;
}

SIM_API aclError aclrtMemset(void *devPtr, size_t maxCount, int32_t value, size_t count)
{
    static const char api[] = "aclrtMemset";
    SIM_ENTER(api);
    sim_ctx_t *c = NULL;
    aclError rc = sim_need_ctx(api, &c);
    if (rc)
        return rc;
    int32_t dev = c->dev->id;
    sim_obj_unref(&c->obj);
    int where = SIM_PTR_HOST;
    rc = memset_check(api, devPtr, maxCount, count, &where);
    if (rc || count == 0)
        return rc;
    sim_parallel_memset(dev, devPtr, value & 0xFF, count);
    return ACL_SUCCESS;
}

static aclError run_memset(sim_task_t *t, sim_stream_t *s)
{
    if (t->u.set.dev && !sim_mem_still_live(t->u.set.ptr, t->u.set.n))
        return sim_err(ACL_ERROR_RT_PARAM_INVALID, "aclrtMemsetAsync: %p was freed before the memset ran", t->u.set.ptr);
    sim_parallel_memset(s->dev->id, t->u.set.ptr, t->u.set.value, t->u.set.n);
    return ACL_SUCCESS;
}

SIM_API aclError aclrtMemsetAsync(void *devPtr, size_t maxCount, int32_t value, size_t count, aclrtStream stream)
{
    static const char api[] = "aclrtMemsetAsync";
    SIM_ENTER(api);
    sim_stream_t *s = NULL;
    aclError rc = sim_stream_resolve(stream, api, &s);
    if (rc)
        return rc;
    int where = SIM_PTR_HOST;
    rc = memset_check(api, devPtr, maxCount, count, &where);
    if (rc || count == 0)
        goto out;
    sim_task_t *t = sim_task_new();
    if (!t) {
        rc = sim_err(ACL_ERROR_RT_RESOURCE_ALLOC_FAIL, "%s: out of host memory", api);
        goto out;
    }
    t->run = run_memset;
    t->u.set.ptr = devPtr;
    t->u.set.n = count;
    t->u.set.value = value & 0xFF;
    t->u.set.dev = where == SIM_PTR_DEVICE;
    t->steal = true;
    t->cost_ns = count / 32;
    rc = sim_stream_submit(s, t, count <= SIM_INLINE_COPY_MAX, api);
out:
    sim_obj_unref(&s->obj);
    return rc;
}

/* ------------------------------------------------------------------ lookups for the kernel launcher */

void sim_mem_lookup_info(const void *ptr, sim_mem_info_t *out)
{
    memset(out, 0, sizeof *out);
    out->dev = -1;
    if (!ptr)
        return;
    mem_init();
    pthread_rwlock_rdlock(&g_mem_lock);
    sim_alloc_t *r = mem_lookup((uintptr_t)ptr, 1);
    if (r) {
        static const int state[] = {0, SIM_MEM_DEVICE, SIM_MEM_HOST, SIM_MEM_FREED_DEVICE, SIM_MEM_FREED_HOST};
        out->state = r->kind <= REC_FREED_HOST ? state[r->kind] : SIM_MEM_NONE;
        out->lo = r->lo;
        out->size = r->size;
        out->dev = r->dev;
    }
    pthread_rwlock_unlock(&g_mem_lock);
    out->page = g_page;
}
