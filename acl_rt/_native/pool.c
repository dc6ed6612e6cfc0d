/* acl_rt._native: the core of canna's caching device-memory allocator (a CPython extension).
 *
 * One Pool per device. It carves user blocks out of segments obtained from aclrtMalloc and keeps
 * freed blocks cached for reuse:
 *
 *   - sizes and segments follow PyTorch's CUDA caching allocator (c10/cuda/CUDACachingAllocator):
 *     requests are rounded up to 512 B; requests <= 1 MiB ("small pool") come from 2 MiB
 *     segments, requests < 10 MiB from 20 MiB segments, larger ones from segments rounded up to
 *     2 MiB ("large pool"). A small block is split when the remainder is >= 512 B, a large block
 *     when the remainder is > 1 MiB;
 *   - free blocks live in one ordered set per pool keyed by (stream, size, address): best fit is
 *     a lower_bound (CuPy's arena and PyTorch's BlockPool do the same); a freed block is merged
 *     with its free neighbours in the segment;
 *   - stream order: a block freed on its stream S is reusable at once by later work on S. Another
 *     stream T reuses it only when S has no queued work (aclrtStreamQuery), i.e. the work that
 *     used the block has finished. Streams that also used the block (record_stream) get an event
 *     recorded at free time; the block returns to the free set only when those events have
 *     completed (polled lazily at the next allocation: never a device-wide synchronize);
 *   - statistics with PyTorch's exact schema (memory_stats keys).
 *
 * The runtime is called through function pointers the Python side takes from the loaded AscendCL
 * library (cffi's ffi.addressof), so the same code drives the simulator and a real CANN install.
 *
 * Thread safety: each pool has a mutex. The GIL is released while waiting for the mutex and around
 * runtime calls that may be slow (aclrtMalloc / aclrtFree); the pool never waits for a stream
 * while holding its mutex (a host callback on that stream may free a buffer), so waiting for work
 * is left to the caller (Python) between calls.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "current.h"

typedef int aclError;

#define K_MIN_BLOCK 512u                    /* all sizes are rounded up to this */
#define K_SMALL_SIZE (1u << 20)             /* largest "small" request: 1 MiB */
#define K_SMALL_BUFFER (2u << 20)           /* small-pool segment: 2 MiB */
#define K_LARGE_BUFFER (20u << 20)          /* segment for 1 MiB < request < 10 MiB: 20 MiB */
#define K_MIN_LARGE_ALLOC (10u << 20)       /* requests >= this get their own rounded segment */
#define K_ROUND_LARGE (2u << 20)            /* large segments are multiples of 2 MiB */

#define STREAM_ANY UINT64_MAX               /* a free block any stream may take at once */

enum { ST_ALL = 0, ST_SMALL = 1, ST_LARGE = 2 };   /* PyTorch's StatType order */

/* error kinds reported to Python (first element of the exception args) */
enum { E_RUNTIME = 1, E_LIMIT = 2, E_NOT_OWNED = 3, E_INTERIOR = 4, E_NOMEM = 5 };

/* ------------------------------------------------------------------ runtime function table */

typedef struct {
    aclError (*malloc)(void **, size_t, int);
    aclError (*free)(void *);
    aclError (*get_ctx)(void **);
    aclError (*set_ctx)(void *);
    aclError (*create_event)(void **, uint32_t);
    aclError (*record_event)(void *, void *);
    aclError (*query_event)(void *, int *);
    aclError (*destroy_event)(void *);
    aclError (*stream_query)(void *, int *);
    const char *(*recent_msg)(void);
} rt_fns;

static const char *const FN_NAMES[] = {
    "aclrtMalloc", "aclrtFree", "aclrtGetCurrentContext", "aclrtSetCurrentContext",
    "aclrtCreateEventWithFlag", "aclrtRecordEvent", "aclrtQueryEventStatus", "aclrtDestroyEvent",
    "aclrtStreamQuery", "aclGetRecentErrMsg",
};
#define N_FNS (sizeof FN_NAMES / sizeof FN_NAMES[0])

/* ------------------------------------------------------------------ statistics */

typedef struct {
    int64_t current, peak, allocated, freed;
} Stat;

static inline void stat_add(Stat *s, int64_t d)
{
    s->current += d;
    if (d > 0)
        s->allocated += d;
    else
        s->freed -= d;
    if (s->current > s->peak)
        s->peak = s->current;
}

enum {
    S_ALLOCATION, S_SEGMENT, S_ACTIVE, S_INACTIVE_SPLIT, S_ALLOCATED_BYTES, S_RESERVED_BYTES,
    S_ACTIVE_BYTES, S_INACTIVE_SPLIT_BYTES, S_REQUESTED_BYTES, N_STATS
};
static const char *const STAT_NAMES[N_STATS] = {
    "allocation", "segment", "active", "inactive_split", "allocated_bytes", "reserved_bytes",
    "active_bytes", "inactive_split_bytes", "requested_bytes",
};
static const char *const POOL_NAMES[3] = {"all", "small_pool", "large_pool"};
static const char *const METRIC_NAMES[4] = {"current", "peak", "allocated", "freed"};

typedef struct {
    Stat s[N_STATS][3];
    Stat oversize_allocations, oversize_segments;
    int64_t num_alloc_retries, num_ooms, num_sync_all_streams, num_device_alloc, num_device_free,
        num_oom_rejections;
} Stats;

/* ------------------------------------------------------------------ blocks and segments */

struct Segment;

typedef struct Block {
    uintptr_t ptr;
    size_t size;
    size_t requested;
    uint64_t stream;             /* the stream it was allocated on (free: the stream it belongs to) */
    struct Segment *seg;
    struct Block *prev, *next;   /* neighbours in the segment, by address */
    struct Block *tl, *tr;       /* treap children while in a free set */
    struct Block *hnext;         /* hash chain while allocated */
    uint32_t prio;
    uint8_t allocated, in_tree, small;
    int32_t events;              /* outstanding events (record_stream) */
    uint64_t *uses;              /* other streams that used it (record_stream) */
    uint32_t nuses, cuses;
} Block;

typedef struct Segment {
    uintptr_t base;
    size_t size;
    uint64_t stream;
    uint8_t small;
    Block *first;
    struct Segment *prev, *next;
} Segment;

typedef struct {
    void *event;
    Block *block;
} Pending;

/* ------------------------------------------------------------------ the pool object */

typedef struct {
    PyObject_HEAD
    pthread_mutex_t mu;
    rt_fns fn;
    void *ctx;
    int device;
    size_t limit;                /* 0 = none; applies to reserved bytes */
    size_t total;                /* device capacity (for early rejection), 0 = unknown */
    Block *tree[2];              /* free blocks: [0] small, [1] large */
    Block **htab;                /* allocated blocks by address */
    size_t hcap, hcount;
    Segment seg_head;            /* circular list of segments */
    Pending *pend;
    size_t npend, cpend;
    Block **deferred;            /* freed after their stream died: reusable after a device sync */
    size_t ndeferred, cdeferred;
    void **ev_cache;
    size_t nev, cev;
    Stats st;
    uint64_t version;            /* bumped by every change (for throttled publication) */
    uint32_t rng;
    int trace;                   /* record segment events for memory hooks */
    PyObject *trace_log;         /* list of (kind, size, ptr) */
    int closed;
} Pool;

static PyObject *NativeError;   /* acl_rt._native.Error(kind, code, message) */

static int raise_err(int kind, long code, const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    PyObject *args = Py_BuildValue("(ils)", kind, code, buf);
    if (args) {
        PyErr_SetObject(NativeError, args);
        Py_DECREF(args);
    }
    return -1;
}

/* --- locking (the GIL is held on entry and exit) */

static inline void pool_lock(Pool *p)
{
    if (pthread_mutex_trylock(&p->mu) != 0) {
        Py_BEGIN_ALLOW_THREADS
        pthread_mutex_lock(&p->mu);
        Py_END_ALLOW_THREADS
    }
}

static inline void pool_unlock(Pool *p) { pthread_mutex_unlock(&p->mu); }

/* --- context: runtime calls on the slow path need the pool's device context current on this
 * thread; it is restored afterwards so the caller's view (acl_rt's per-thread cache) stays true */

typedef struct {
    void *saved;
    int changed;
} CtxGuard;

static void ctx_enter(Pool *p, CtxGuard *g)
{
    g->saved = NULL;
    g->changed = 0;
    if (p->fn.get_ctx(&g->saved) != 0) {
        g->saved = NULL;
        p->fn.recent_msg();   /* drop the "no current context" message */
    }
    if (g->saved != p->ctx && p->fn.set_ctx(p->ctx) == 0)
        g->changed = 1;
}

static void ctx_leave(Pool *p, CtxGuard *g)
{
    if (g->changed && g->saved)
        p->fn.set_ctx(g->saved);
}

/* ------------------------------------------------------------------ treap of free blocks */

static inline int key_less(uint64_t s1, size_t z1, uintptr_t p1, uint64_t s2, size_t z2, uintptr_t p2)
{
    if (s1 != s2)
        return s1 < s2;
    if (z1 != z2)
        return z1 < z2;
    return p1 < p2;
}

#define BLESS(a, s, z, p) key_less((a)->stream, (a)->size, (a)->ptr, (s), (z), (p))

static Block *tr_merge(Block *a, Block *b)
{
    if (!a)
        return b;
    if (!b)
        return a;
    if (a->prio > b->prio) {
        a->tr = tr_merge(a->tr, b);
        return a;
    }
    b->tl = tr_merge(a, b->tl);
    return b;
}

/* split t into keys < k (l) and >= k (r) */
static void tr_split(Block *t, uint64_t s, size_t z, uintptr_t ptr, Block **l, Block **r)
{
    if (!t) {
        *l = *r = NULL;
        return;
    }
    if (BLESS(t, s, z, ptr)) {
        tr_split(t->tr, s, z, ptr, &t->tr, r);
        *l = t;
    } else {
        tr_split(t->tl, s, z, ptr, l, &t->tl);
        *r = t;
    }
}

static inline uint32_t rnd(Pool *p)
{
    uint32_t x = p->rng;
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    return p->rng = x;
}

static void tr_insert(Pool *p, Block *b)
{
    Block **root = &p->tree[b->small ? 0 : 1];
    Block *l, *r;
    b->tl = b->tr = NULL;
    b->prio = rnd(p);
    tr_split(*root, b->stream, b->size, b->ptr, &l, &r);
    *root = tr_merge(tr_merge(l, b), r);
    b->in_tree = 1;
}

static void tr_erase(Pool *p, Block *b)
{
    Block **pp = &p->tree[b->small ? 0 : 1];
    while (*pp && *pp != b)
        pp = BLESS(b, (*pp)->stream, (*pp)->size, (*pp)->ptr) ? &(*pp)->tl : &(*pp)->tr;
    if (*pp == b)
        *pp = tr_merge(b->tl, b->tr);
    b->tl = b->tr = NULL;
    b->in_tree = 0;
}

static Block *tr_lower_bound(Block *t, uint64_t s, size_t z, uintptr_t ptr)
{
    Block *best = NULL;
    while (t) {
        if (!BLESS(t, s, z, ptr)) {
            best = t;
            t = t->tl;
        } else {
            t = t->tr;
        }
    }
    return best;
}

/* ------------------------------------------------------------------ hash of allocated blocks */

static inline size_t hslot(Pool *p, uintptr_t ptr)
{
    uint64_t x = (uint64_t)ptr >> 9;
    x ^= x >> 31;
    x *= 0x9E3779B97F4A7C15ull;
    return (size_t)(x >> 20) & (p->hcap - 1);
}

static int h_grow(Pool *p)
{
    size_t ncap = p->hcap ? p->hcap * 2 : 1024;
    Block **nt = calloc(ncap, sizeof *nt);
    if (!nt)
        return -1;
    Block **old = p->htab;
    size_t ocap = p->hcap;
    p->htab = nt;
    p->hcap = ncap;
    for (size_t i = 0; i < ocap; i++) {
        for (Block *b = old[i], *n; b; b = n) {
            n = b->hnext;
            size_t j = hslot(p, b->ptr);
            b->hnext = nt[j];
            nt[j] = b;
        }
    }
    free(old);
    return 0;
}

static int h_insert(Pool *p, Block *b)
{
    if (p->hcount + 1 > p->hcap && h_grow(p) != 0)
        return -1;
    size_t j = hslot(p, b->ptr);
    b->hnext = p->htab[j];
    p->htab[j] = b;
    p->hcount++;
    return 0;
}

static Block *h_remove(Pool *p, uintptr_t ptr)
{
    if (!p->hcap)
        return NULL;
    Block **pp = &p->htab[hslot(p, ptr)];
    for (; *pp; pp = &(*pp)->hnext) {
        if ((*pp)->ptr == ptr) {
            Block *b = *pp;
            *pp = b->hnext;
            b->hnext = NULL;
            p->hcount--;
            return b;
        }
    }
    return NULL;
}

static Block *h_find(Pool *p, uintptr_t ptr)
{
    if (!p->hcap)
        return NULL;
    for (Block *b = p->htab[hslot(p, ptr)]; b; b = b->hnext)
        if (b->ptr == ptr)
            return b;
    return NULL;
}

/* ------------------------------------------------------------------ stats helpers */

static inline void st_upd(Pool *p, int which, int small, int64_t d)
{
    stat_add(&p->st.s[which][ST_ALL], d);
    stat_add(&p->st.s[which][small ? ST_SMALL : ST_LARGE], d);
}

static inline int is_split(const Block *b) { return b->prev != NULL || b->next != NULL; }

/* put a free block in its set (inactive-split accounting follows the set membership) */
static void free_insert(Pool *p, Block *b)
{
    tr_insert(p, b);
    if (is_split(b)) {
        st_upd(p, S_INACTIVE_SPLIT, b->small, 1);
        st_upd(p, S_INACTIVE_SPLIT_BYTES, b->small, (int64_t)b->size);
    }
}

static void free_remove(Pool *p, Block *b)
{
    tr_erase(p, b);
    if (is_split(b)) {
        st_upd(p, S_INACTIVE_SPLIT, b->small, -1);
        st_upd(p, S_INACTIVE_SPLIT_BYTES, b->small, -(int64_t)b->size);
    }
}

/* ------------------------------------------------------------------ sizes */

static inline size_t round_size(size_t n)
{
    if (n < K_MIN_BLOCK)
        return K_MIN_BLOCK;
    return (n + K_MIN_BLOCK - 1) / K_MIN_BLOCK * K_MIN_BLOCK;
}

static inline size_t segment_size(size_t n)
{
    if (n <= K_SMALL_SIZE)
        return K_SMALL_BUFFER;
    if (n < K_MIN_LARGE_ALLOC)
        return K_LARGE_BUFFER;
    return (n + K_ROUND_LARGE - 1) / K_ROUND_LARGE * K_ROUND_LARGE;
}

static inline int should_split(const Block *b, size_t n)
{
    size_t rem = b->size - n;
    if (b->small)
        return rem >= K_MIN_BLOCK;
    return rem > K_SMALL_SIZE;
}

/* ------------------------------------------------------------------ events */

static void *event_get(Pool *p)
{
    if (p->nev)
        return p->ev_cache[--p->nev];
    void *e = NULL;
    if (p->fn.create_event(&e, 1 /* ACL_EVENT_SYNC */) != 0) {
        p->fn.recent_msg();
        return NULL;
    }
    return e;
}

static void event_put(Pool *p, void *e)
{
    if (p->nev == p->cev) {
        size_t nc = p->cev ? p->cev * 2 : 16;
        void **n = realloc(p->ev_cache, nc * sizeof *n);
        if (!n) {
            p->fn.destroy_event(e);
            return;
        }
        p->ev_cache = n;
        p->cev = nc;
    }
    p->ev_cache[p->nev++] = e;
}

static int pend_push(Pool *p, void *e, Block *b)
{
    if (p->npend == p->cpend) {
        size_t nc = p->cpend ? p->cpend * 2 : 16;
        Pending *n = realloc(p->pend, nc * sizeof *n);
        if (!n)
            return -1;
        p->pend = n;
        p->cpend = nc;
    }
    p->pend[p->npend].event = e;
    p->pend[p->npend].block = b;
    p->npend++;
    return 0;
}

static int defer_push(Pool *p, Block *b)
{
    if (p->ndeferred == p->cdeferred) {
        size_t nc = p->cdeferred ? p->cdeferred * 2 : 8;
        Block **n = realloc(p->deferred, nc * sizeof *n);
        if (!n)
            return -1;
        p->deferred = n;
        p->cdeferred = nc;
    }
    p->deferred[p->ndeferred++] = b;
    return 0;
}

/* ------------------------------------------------------------------ freeing a block */

/* merge free neighbour src into dst (PyTorch's try_merge_blocks); returns bytes merged */
static size_t merge_into(Pool *p, Block *dst, Block *src)
{
    if (!src || src->allocated || src->events > 0 || !src->in_tree)
        return 0;
    /* a free block belongs to a stream: merging may not hand memory that another stream's
     * pending work may still touch to dst's stream (STREAM_ANY blocks are safe for anyone) */
    if (src->stream != dst->stream) {
        if (dst->stream == STREAM_ANY)
            dst->stream = src->stream;
        else if (src->stream != STREAM_ANY)
            return 0;
    }
    free_remove(p, src);
    if (dst->prev == src) {
        dst->ptr = src->ptr;
        dst->prev = src->prev;
        if (dst->prev)
            dst->prev->next = dst;
        if (dst->seg->first == src)
            dst->seg->first = dst;
    } else {
        dst->next = src->next;
        if (dst->next)
            dst->next->prev = dst;
    }
    size_t n = src->size;
    dst->size += n;
    free(src->uses);
    free(src);
    return n;
}

/* a block nobody uses any more returns to its free set, merged with free neighbours */
static void block_release(Pool *p, Block *b)
{
    st_upd(p, S_ACTIVE, b->small, -1);
    st_upd(p, S_ACTIVE_BYTES, b->small, -(int64_t)b->size);
    b->nuses = 0;
    merge_into(p, b, b->prev);
    merge_into(p, b, b->next);
    free_insert(p, b);
}

/* poll outstanding events (FIFO; stops at the first one still pending, as PyTorch does per
 * stream... here the list is short, so every entry is checked) */
static void process_events(Pool *p)
{
    size_t w = 0;
    for (size_t i = 0; i < p->npend; i++) {
        Pending e = p->pend[i];
        int status = 0;
        aclError rc = p->fn.query_event(e.event, &status);
        if (rc != 0) {
            p->fn.recent_msg();
            status = 1;   /* an event that cannot be queried is treated as complete */
        }
        if (status == 1) {   /* ACL_EVENT_RECORDED_STATUS_COMPLETE */
            event_put(p, e.event);
            if (--e.block->events == 0)
                block_release(p, e.block);
        } else {
            p->pend[w++] = e;
        }
    }
    p->npend = w;
}

/* ------------------------------------------------------------------ segments */

static void seg_link(Pool *p, Segment *s)
{
    s->next = &p->seg_head;
    s->prev = p->seg_head.prev;
    p->seg_head.prev->next = s;
    p->seg_head.prev = s;
}

static void seg_unlink(Segment *s)
{
    s->prev->next = s->next;
    s->next->prev = s->prev;
}

static void trace(Pool *p, const char *kind, size_t size, uintptr_t ptr)
{
    if (!p->trace || !p->trace_log)
        return;
    PyObject *t = Py_BuildValue("(snK)", kind, (Py_ssize_t)size, (unsigned long long)ptr);
    if (t) {
        PyList_Append(p->trace_log, t);
        Py_DECREF(t);
    } else {
        PyErr_Clear();
    }
}

/* aclrtFree a whole free segment (block b covers it); 0 on success */
static int release_segment(Pool *p, Block *b, aclError *rc_out)
{
    Segment *s = b->seg;
    free_remove(p, b);
    aclError rc;
    Py_BEGIN_ALLOW_THREADS
    rc = p->fn.free((void *)s->base);
    Py_END_ALLOW_THREADS
    if (rc != 0) {
        *rc_out = rc;
        free_insert(p, b);
        return -1;
    }
    p->st.num_device_free++;
    st_upd(p, S_SEGMENT, s->small, -1);
    st_upd(p, S_RESERVED_BYTES, s->small, -(int64_t)s->size);
    trace(p, "dealloc", s->size, s->base);
    seg_unlink(s);
    free(s);
    free(b->uses);
    free(b);
    return 0;
}

/* ------------------------------------------------------------------ stream idleness (per call) */

typedef struct {
    uint64_t key[16];
    int8_t idle[16];
    int n;
} IdleCache;

static int stream_idle(Pool *p, IdleCache *c, uint64_t s)
{
    if (s == STREAM_ANY)
        return 1;
    for (int i = 0; i < c->n; i++)
        if (c->key[i] == s)
            return c->idle[i];
    int status = 1;
    aclError rc = p->fn.stream_query((void *)(uintptr_t)s, &status);
    int idle;
    if (rc != 0) {
        p->fn.recent_msg();
        idle = 0;   /* unknown (destroyed?) stream: not safe to assume done */
    } else {
        idle = status == 0;   /* ACL_STREAM_STATUS_COMPLETE */
    }
    if (c->n < 16) {
        c->key[c->n] = s;
        c->idle[c->n] = (int8_t)idle;
        c->n++;
    }
    return idle;
}

/* ------------------------------------------------------------------ allocation */

static Block *find_same_stream(Pool *p, int small, size_t n, uint64_t stream)
{
    Block *b = tr_lower_bound(p->tree[small ? 0 : 1], stream, n, 0);
    if (b && b->stream == stream)
        return b;
    return NULL;
}

/* best fit among other streams' free blocks whose stream is idle (the work that used them is done) */
static Block *find_other_stream(Pool *p, int small, size_t n, uint64_t stream)
{
    Block *root = p->tree[small ? 0 : 1];
    Block *best = NULL;
    IdleCache cache;
    cache.n = 0;
    uint64_t s = 0;
    int first = 1;
    for (;;) {
        Block *b = first ? tr_lower_bound(root, 0, 0, 0) : tr_lower_bound(root, s, 0, 0);
        first = 0;
        if (!b)
            break;
        s = b->stream;
        if (s != stream) {
            Block *c = tr_lower_bound(root, s, n, 0);
            if (c && c->stream == s && (!best || c->size < best->size) && stream_idle(p, &cache, s))
                best = c;
        }
        if (s == STREAM_ANY)
            break;
        s++;   /* next stream key */
    }
    return best;
}

/* PyObject-free core of malloc; returns 0 and *out, or -1 with a Python error set */
static int pool_malloc(Pool *p, size_t req, uint64_t stream, uintptr_t *out)
{
    size_t n = round_size(req);
    int small = n <= K_SMALL_SIZE;
    CtxGuard g;
    int ctx = 0;
    if (p->npend) {
        ctx_enter(p, &g);
        ctx = 1;
        process_events(p);
    }
    Block *b = find_same_stream(p, small, n, stream);
    if (!b) {
        if (!ctx && p->tree[small ? 0 : 1]) {
            ctx_enter(p, &g);
            ctx = 1;
        }
        b = find_other_stream(p, small, n, stream);
    }
    if (b) {
        free_remove(p, b);
        b->stream = stream;
    } else {
        /* PyTorch's segment size first; when that does not fit (device or limit) a 1-10 MiB request
         * falls back to a segment rounded to 2 MiB, so a nearly full device still serves it */
        size_t seg = segment_size(n);
        size_t alt = (n + K_ROUND_LARGE - 1) / K_ROUND_LARGE * K_ROUND_LARGE;
        size_t tries[2] = {seg, alt < seg ? alt : 0};
        if (p->total && tries[0] > p->total && (!tries[1] || tries[1] > p->total)) {
            if (ctx)
                ctx_leave(p, &g);
            p->st.num_oom_rejections++;
            return raise_err(E_NOMEM, 207001, "%zu bytes is more than the device has (%zu bytes)", n, p->total);
        }
        Segment *sg = calloc(1, sizeof *sg);
        b = calloc(1, sizeof *b);
        if (!sg || !b) {
            free(sg);
            free(b);
            if (ctx)
                ctx_leave(p, &g);
            PyErr_NoMemory();
            return -1;
        }
        if (!ctx) {
            ctx_enter(p, &g);
            ctx = 1;
        }
        void *mem = NULL;
        aclError rc = 0;
        int limited = 0;
        char why[640] = "";   /* the runtime's reason for the last failed aclrtMalloc (aclGetRecentErrMsg) */
        for (int k = 0; k < 2 && tries[k]; k++) {
            seg = tries[k];
            if (p->limit && p->st.s[S_RESERVED_BYTES][ST_ALL].current + (int64_t)seg > (int64_t)p->limit) {
                limited = 1;
                continue;
            }
            limited = 0;
            Py_BEGIN_ALLOW_THREADS
            rc = p->fn.malloc(&mem, seg, 0 /* ACL_MEM_MALLOC_HUGE_FIRST */);
            Py_END_ALLOW_THREADS
            if (rc == 0)
                break;
            const char *m = p->fn.recent_msg();
            if (m && strncmp(m, "aclrtMalloc: ", 13) == 0)   /* the simulator names the API itself */
                m += 13;
            snprintf(why, sizeof why, "%s", m ? m : "");
        }
        if (limited || rc != 0 || !mem) {
            free(sg);
            free(b);
            ctx_leave(p, &g);
            if (limited)
                return raise_err(E_LIMIT, 0, "the memory limit of %zu bytes would be exceeded", p->limit);
            return raise_err(E_RUNTIME, rc, "aclrtMalloc of a %zu-byte segment failed%s%s", seg, *why ? ": " : "",
                             why);
        }
        p->st.num_device_alloc++;
        sg->base = (uintptr_t)mem;
        sg->size = seg;
        sg->stream = stream;
        sg->small = (uint8_t)small;
        sg->first = b;
        seg_link(p, sg);
        b->ptr = sg->base;
        b->size = seg;
        b->stream = stream;
        b->seg = sg;
        b->small = (uint8_t)small;
        st_upd(p, S_SEGMENT, small, 1);
        st_upd(p, S_RESERVED_BYTES, small, (int64_t)seg);
        trace(p, "alloc", seg, sg->base);
    }
    if (ctx)
        ctx_leave(p, &g);
    if (should_split(b, n)) {
        Block *rem = calloc(1, sizeof *rem);
        if (rem) {
            rem->ptr = b->ptr + n;
            rem->size = b->size - n;
            rem->stream = b->stream;
            rem->seg = b->seg;
            rem->small = b->small;
            rem->prev = b;
            rem->next = b->next;
            if (rem->next)
                rem->next->prev = rem;
            b->next = rem;
            b->size = n;
            free_insert(p, rem);
        }
    }
    b->allocated = 1;
    b->requested = req;
    b->nuses = 0;
    if (h_insert(p, b) != 0) {   /* out of host memory: give the block back */
        b->allocated = 0;
        st_upd(p, S_ACTIVE, b->small, 1);
        st_upd(p, S_ACTIVE_BYTES, b->small, (int64_t)b->size);
        block_release(p, b);
        PyErr_NoMemory();
        return -1;
    }
    st_upd(p, S_ALLOCATION, b->small, 1);
    st_upd(p, S_ALLOCATED_BYTES, b->small, (int64_t)b->size);
    st_upd(p, S_ACTIVE, b->small, 1);
    st_upd(p, S_ACTIVE_BYTES, b->small, (int64_t)b->size);
    st_upd(p, S_REQUESTED_BYTES, b->small, (int64_t)req);
    p->version++;
    *out = b->ptr;
    return 0;
}

/* free: 0, or -1 with a Python error set. stream_dead: its allocation stream was destroyed */
static int pool_free(Pool *p, uintptr_t ptr, int stream_dead)
{
    Block *b = h_remove(p, ptr);
    if (!b) {
        for (Segment *s = p->seg_head.next; s != &p->seg_head; s = s->next)
            if (ptr >= s->base && ptr < s->base + s->size)
                return raise_err(E_INTERIOR, 0, "%#lx is not an allocated block of this pool (freed before, or "
                                 "not the start of a block)", (unsigned long)ptr);
        return raise_err(E_NOT_OWNED, 0, "%#lx was not allocated by this pool", (unsigned long)ptr);
    }
    b->allocated = 0;
    st_upd(p, S_ALLOCATION, b->small, -1);
    st_upd(p, S_ALLOCATED_BYTES, b->small, -(int64_t)b->size);
    st_upd(p, S_REQUESTED_BYTES, b->small, -(int64_t)b->requested);
    p->version++;
    if (stream_dead) {
        b->stream = STREAM_ANY;
        if (defer_push(p, b) == 0)
            return 0;
    }
    if (b->nuses) {
        CtxGuard g;
        ctx_enter(p, &g);
        for (uint32_t i = 0; i < b->nuses; i++) {
            void *e = event_get(p);
            if (!e)
                continue;
            if (p->fn.record_event(e, (void *)(uintptr_t)b->uses[i]) != 0) {
                p->fn.recent_msg();
                event_put(p, e);
                continue;
            }
            if (pend_push(p, e, b) != 0) {
                event_put(p, e);
                continue;
            }
            b->events++;
        }
        ctx_leave(p, &g);
        b->nuses = 0;
        if (b->events > 0)
            return 0;
    }
    block_release(p, b);
    return 0;
}

/* ------------------------------------------------------------------ Python methods */

static PyObject *Pool_malloc(Pool *p, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "malloc(size, stream)");
        return NULL;
    }
    size_t n = PyLong_AsSize_t(args[0]);
    if (n == (size_t)-1 && PyErr_Occurred())
        return NULL;
    uint64_t s = PyLong_AsUnsignedLongLong(args[1]);
    if (s == (uint64_t)-1 && PyErr_Occurred())
        return NULL;
    if (n == 0) {
        PyErr_SetString(PyExc_ValueError, "size must be > 0");
        return NULL;
    }
    uintptr_t ptr = 0;
    pool_lock(p);
    int rc = p->closed ? raise_err(E_RUNTIME, 100001, "the pool was shut down") : pool_malloc(p, n, s, &ptr);
    pool_unlock(p);
    if (rc)
        return NULL;
    return PyLong_FromUnsignedLongLong(ptr);
}

static PyObject *Pool_free(Pool *p, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs < 1 || nargs > 2) {
        PyErr_SetString(PyExc_TypeError, "free(ptr, stream_dead=False)");
        return NULL;
    }
    uintptr_t ptr = (uintptr_t)PyLong_AsUnsignedLongLong(args[0]);
    if (ptr == (uintptr_t)-1 && PyErr_Occurred())
        return NULL;
    int dead = nargs == 2 ? PyObject_IsTrue(args[1]) : 0;
    if (dead < 0)
        return NULL;
    pool_lock(p);
    int rc = p->closed ? 0 : pool_free(p, ptr, dead);
    pool_unlock(p);
    if (rc)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *Pool_record_stream(Pool *p, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "record_stream(ptr, stream)");
        return NULL;
    }
    uintptr_t ptr = (uintptr_t)PyLong_AsUnsignedLongLong(args[0]);
    if (ptr == (uintptr_t)-1 && PyErr_Occurred())
        return NULL;
    uint64_t s = PyLong_AsUnsignedLongLong(args[1]);
    if (s == (uint64_t)-1 && PyErr_Occurred())
        return NULL;
    int rc = 0;
    pool_lock(p);
    Block *b = h_find(p, ptr);
    if (!b) {
        rc = raise_err(E_NOT_OWNED, 0, "%#lx is not an allocated block of this pool", (unsigned long)ptr);
    } else if (s != b->stream) {
        uint32_t i;
        for (i = 0; i < b->nuses && b->uses[i] != s; i++)
            ;
        if (i == b->nuses) {
            if (b->nuses == b->cuses) {
                uint32_t nc = b->cuses ? b->cuses * 2 : 4;
                uint64_t *nu = realloc(b->uses, nc * sizeof *nu);
                if (!nu) {
                    pool_unlock(p);
                    return PyErr_NoMemory();
                }
                b->uses = nu;
                b->cuses = nc;
            }
            b->uses[b->nuses++] = s;
        }
    }
    pool_unlock(p);
    if (rc)
        return NULL;
    Py_RETURN_NONE;
}

/* every free block of a tree (in-order), appended to *list */
static int collect_tree(Block *t, Block ***list, size_t *cnt, size_t *cap)
{
    if (!t)
        return 0;
    if (collect_tree(t->tl, list, cnt, cap) != 0)
        return -1;
    if (*cnt == *cap) {
        size_t nc = *cap ? *cap * 2 : 64;
        Block **nl = realloc(*list, nc * sizeof *nl);
        if (!nl)
            return -1;
        *list = nl;
        *cap = nc;
    }
    (*list)[(*cnt)++] = t;
    return collect_tree(t->tr, list, cnt, cap);
}

/* the core of release_cached (lock held, context current); assume_idle: every stream is known
 * to be idle. Returns non-zero when out of host memory. */
static int release_core(Pool *p, int assume_idle, PyObject *busy, size_t *released_out, aclError *err_out)
{
    int nomem = 0;
    size_t released = 0;
    aclError err = 0;
    IdleCache cache;
    cache.n = 0;
    Block **list = NULL;
    size_t cnt = 0, cap = 0;
    for (int t = 0; t < 2 && !nomem; t++)
        nomem = collect_tree(p->tree[t], &list, &cnt, &cap) != 0;
    if (!nomem) {
        /* retag the blocks of idle streams, then merge runs of them */
        size_t m = 0;
        for (size_t i = 0; i < cnt; i++) {
            Block *b = list[i];
            if (!assume_idle && !stream_idle(p, &cache, b->stream)) {
                PyObject *k = busy ? PyLong_FromUnsignedLongLong(b->stream) : NULL;
                if (k && busy) {
                    PySet_Add(busy, k);
                    Py_DECREF(k);
                }
                continue;
            }
            free_remove(p, b);
            b->stream = STREAM_ANY;
            list[m++] = b;
        }
        cnt = m;
        /* in address order inside each segment: merge a marked block into its marked predecessor */
        for (size_t i = 0; i < cnt; i++)
            list[i]->tl = (Block *)1;   /* mark (tl is unused outside the tree) */
        for (Segment *s = p->seg_head.next; s != &p->seg_head; s = s->next) {
            for (Block *b = s->first; b; b = b->next) {
                if (b->tl != (Block *)1)
                    continue;
                while (b->next && b->next->tl == (Block *)1) {
                    Block *n = b->next;
                    b->size += n->size;
                    b->next = n->next;
                    if (b->next)
                        b->next->prev = b;
                    free(n->uses);
                    free(n);
                }
                b->tl = NULL;
                free_insert(p, b);
            }
        }
        /* whole free segments go back to the device */
        for (Segment *s = p->seg_head.next, *nx; s != &p->seg_head; s = nx) {
            nx = s->next;
            Block *b = s->first;
            if (b && !b->prev && !b->next && b->in_tree && b->stream == STREAM_ANY) {
                size_t sz = b->size;
                if (release_segment(p, b, &err) != 0)
                    break;
                released += sz;
            }
        }
    }
    free(list);
    *released_out = released;
    *err_out = err;
    return nomem;
}

/* Release cached memory. Free blocks whose stream has no queued work (the work that used them
 * is done) become usable by any stream and are merged with each other; then every whole free
 * segment is returned with aclrtFree. device_synced: the caller has waited for the whole device,
 * so blocks freed after their stream was destroyed are safe too.
 * Returns (bytes released, set of busy stream keys holding cached blocks, list of pending event
 * handles, number of deferred blocks). */
static PyObject *Pool_release_cached(Pool *p, PyObject *arg)
{
    int synced = PyObject_IsTrue(arg);
    if (synced < 0)
        return NULL;
    size_t released = 0;
    aclError err = 0;
    int nomem;
    PyObject *busy = PySet_New(NULL), *events = PyList_New(0);
    if (!busy || !events) {
        Py_XDECREF(busy);
        Py_XDECREF(events);
        return NULL;
    }
    pool_lock(p);
    if (p->closed) {
        pool_unlock(p);
        return Py_BuildValue("(nNNn)", (Py_ssize_t)0, busy, events, (Py_ssize_t)0);
    }
    CtxGuard g;
    ctx_enter(p, &g);
    process_events(p);
    if (synced) {
        for (size_t i = 0; i < p->ndeferred; i++)
            block_release(p, p->deferred[i]);
        p->ndeferred = 0;
    }
    nomem = release_core(p, 0, busy, &released, &err);
    for (size_t i = 0; i < p->npend; i++) {
        PyObject *e = PyLong_FromVoidPtr(p->pend[i].event);
        if (e) {
            PyList_Append(events, e);
            Py_DECREF(e);
        }
    }
    size_t ndef = p->ndeferred;
    ctx_leave(p, &g);
    p->version++;
    pool_unlock(p);
    if (nomem || err) {
        Py_DECREF(busy);
        Py_DECREF(events);
        if (nomem)
            return PyErr_NoMemory();
        raise_err(E_RUNTIME, err, "aclrtFree of a cached segment failed");
        return NULL;
    }
    return Py_BuildValue("(nNNn)", (Py_ssize_t)released, busy, events, (Py_ssize_t)ndef);
}

/* the stream with this key is about to be destroyed: its free blocks become reusable by any
 * stream once the work queued on it so far has completed (an event recorded now) */
static PyObject *Pool_stream_closed(Pool *p, PyObject *arg)
{
    uint64_t s = PyLong_AsUnsignedLongLong(arg);
    if (s == (uint64_t)-1 && PyErr_Occurred())
        return NULL;
    pool_lock(p);
    if (p->closed) {
        pool_unlock(p);
        Py_RETURN_NONE;
    }
    CtxGuard g;
    ctx_enter(p, &g);
    for (int t = 0; t < 2; t++) {
        Block *b;
        while ((b = tr_lower_bound(p->tree[t], s, 0, 0)) && b->stream == s) {
            free_remove(p, b);
            b->stream = STREAM_ANY;
            void *e = event_get(p);
            int ok = 0;
            if (e) {
                if (p->fn.record_event(e, (void *)(uintptr_t)s) == 0 && pend_push(p, e, b) == 0) {
                    ok = 1;
                } else {
                    p->fn.recent_msg();
                    event_put(p, e);
                }
            }
            /* the block counts as active while it waits (block_release takes it off) */
            st_upd(p, S_ACTIVE, b->small, 1);
            st_upd(p, S_ACTIVE_BYTES, b->small, (int64_t)b->size);
            if (ok)
                b->events = 1;
            else if (defer_push(p, b) != 0)
                block_release(p, b);
        }
    }
    ctx_leave(p, &g);
    p->version++;
    pool_unlock(p);
    Py_RETURN_NONE;
}

static void dict_set_int(PyObject *d, const char *k, int64_t v)
{
    PyObject *o = PyLong_FromLongLong(v);
    if (o) {
        PyDict_SetItemString(d, k, o);
        Py_DECREF(o);
    }
}

static void dict_set_stat(PyObject *d, const char *prefix, const Stat *s)
{
    char key[96];
    const int64_t v[4] = {s->current, s->peak, s->allocated, s->freed};
    for (int m = 0; m < 4; m++) {
        snprintf(key, sizeof key, "%s.%s", prefix, METRIC_NAMES[m]);
        dict_set_int(d, key, v[m]);
    }
}

static PyObject *Pool_stats(Pool *p, PyObject *unused)
{
    (void)unused;
    PyObject *d = PyDict_New();
    if (!d)
        return NULL;
    pool_lock(p);
    Stats st = p->st;
    pool_unlock(p);
    char prefix[64];
    for (int i = 0; i < N_STATS; i++)
        for (int k = 0; k < 3; k++) {
            snprintf(prefix, sizeof prefix, "%s.%s", STAT_NAMES[i], POOL_NAMES[k]);
            dict_set_stat(d, prefix, &st.s[i][k]);
        }
    dict_set_stat(d, "oversize_allocations", &st.oversize_allocations);
    dict_set_stat(d, "oversize_segments", &st.oversize_segments);
    dict_set_int(d, "num_alloc_retries", st.num_alloc_retries);
    dict_set_int(d, "num_ooms", st.num_ooms);
    dict_set_int(d, "num_sync_all_streams", st.num_sync_all_streams);
    dict_set_int(d, "num_device_alloc", st.num_device_alloc);
    dict_set_int(d, "num_device_free", st.num_device_free);
    dict_set_int(d, "num_oom_rejections", st.num_oom_rejections);
    dict_set_int(d, "max_split_size", -1);
    if (PyErr_Occurred()) {
        Py_DECREF(d);
        return NULL;
    }
    return d;
}

/* cheap summary for publication: (version, allocated, reserved, active, requested,
 * inactive_split_bytes, peak allocated, peak reserved, allocations, segments, num_ooms,
 * num_alloc_retries, num_device_alloc, num_device_free) */
static PyObject *Pool_summary(Pool *p, PyObject *unused)
{
    (void)unused;
    pool_lock(p);
    Stats *s = &p->st;
    PyObject *r = Py_BuildValue(
        "(KLLLLLLLLLLLLL)", (unsigned long long)p->version, (long long)s->s[S_ALLOCATED_BYTES][0].current,
        (long long)s->s[S_RESERVED_BYTES][0].current, (long long)s->s[S_ACTIVE_BYTES][0].current,
        (long long)s->s[S_REQUESTED_BYTES][0].current, (long long)s->s[S_INACTIVE_SPLIT_BYTES][0].current,
        (long long)s->s[S_ALLOCATED_BYTES][0].peak, (long long)s->s[S_RESERVED_BYTES][0].peak,
        (long long)s->s[S_ALLOCATION][0].current, (long long)s->s[S_SEGMENT][0].current, (long long)s->num_ooms,
        (long long)s->num_alloc_retries, (long long)s->num_device_alloc, (long long)s->num_device_free);
    pool_unlock(p);
    return r;
}

static PyObject *Pool_reset_peaks(Pool *p, PyObject *unused)
{
    (void)unused;
    pool_lock(p);
    for (int i = 0; i < N_STATS; i++)
        for (int k = 0; k < 3; k++)
            p->st.s[i][k].peak = p->st.s[i][k].current;
    p->st.oversize_allocations.peak = p->st.oversize_allocations.current;
    p->st.oversize_segments.peak = p->st.oversize_segments.current;
    p->version++;
    pool_unlock(p);
    Py_RETURN_NONE;
}

static PyObject *Pool_reset_accumulated(Pool *p, PyObject *unused)
{
    (void)unused;
    pool_lock(p);
    for (int i = 0; i < N_STATS; i++)
        for (int k = 0; k < 3; k++)
            p->st.s[i][k].allocated = p->st.s[i][k].freed = 0;
    p->st.oversize_allocations.allocated = p->st.oversize_allocations.freed = 0;
    p->st.oversize_segments.allocated = p->st.oversize_segments.freed = 0;
    p->st.num_alloc_retries = p->st.num_ooms = p->st.num_sync_all_streams = 0;
    p->st.num_device_alloc = p->st.num_device_free = p->st.num_oom_rejections = 0;
    p->version++;
    pool_unlock(p);
    Py_RETURN_NONE;
}

/* count(event): "retry", "oom", "sync_all" */
static PyObject *Pool_count(Pool *p, PyObject *arg)
{
    const char *k = PyUnicode_AsUTF8(arg);
    if (!k)
        return NULL;
    pool_lock(p);
    if (strcmp(k, "retry") == 0)
        p->st.num_alloc_retries++;
    else if (strcmp(k, "oom") == 0)
        p->st.num_ooms++;
    else if (strcmp(k, "sync_all") == 0)
        p->st.num_sync_all_streams++;
    p->version++;
    pool_unlock(p);
    Py_RETURN_NONE;
}

static PyObject *Pool_set_limit(Pool *p, PyObject *arg)
{
    size_t v = PyLong_AsSize_t(arg);
    if (v == (size_t)-1 && PyErr_Occurred())
        return NULL;
    pool_lock(p);
    p->limit = v;
    p->version++;
    pool_unlock(p);
    Py_RETURN_NONE;
}

static PyObject *Pool_set_trace(Pool *p, PyObject *arg)
{
    int on = PyObject_IsTrue(arg);
    if (on < 0)
        return NULL;
    pool_lock(p);
    p->trace = on;
    pool_unlock(p);
    Py_RETURN_NONE;
}

/* take the logged segment events: list of (kind, size, ptr) */
static PyObject *Pool_take_trace(Pool *p, PyObject *unused)
{
    (void)unused;
    PyObject *n = PyList_New(0);
    if (!n)
        return NULL;
    pool_lock(p);
    PyObject *old = p->trace_log;
    p->trace_log = n;
    pool_unlock(p);
    return old;
}

static PyObject *block_state(const Block *b)
{
    const char *s = b->allocated ? "active_allocated" : (b->in_tree ? "inactive" : "active_pending_free");
    return Py_BuildValue("{s:K,s:n,s:n,s:s}", "address", (unsigned long long)b->ptr, "size", (Py_ssize_t)b->size,
                         "requested_size", (Py_ssize_t)(b->allocated ? b->requested : 0), "state", s);
}

/* list of segments (PyTorch's memory_snapshot layout) */
static PyObject *Pool_snapshot(Pool *p, PyObject *unused)
{
    (void)unused;
    PyObject *out = PyList_New(0);
    if (!out)
        return NULL;
    pool_lock(p);
    for (Segment *s = p->seg_head.next; s != &p->seg_head; s = s->next) {
        PyObject *blocks = PyList_New(0);
        size_t allocated = 0, active = 0, requested = 0;
        for (Block *b = s->first; b && blocks; b = b->next) {
            PyObject *bs = block_state(b);
            if (!bs || PyList_Append(blocks, bs) != 0) {
                Py_XDECREF(bs);
                Py_CLEAR(blocks);
                break;
            }
            Py_DECREF(bs);
            if (b->allocated) {
                allocated += b->size;
                requested += b->requested;
            }
            if (!b->in_tree)
                active += b->size;
        }
        PyObject *seg = blocks ? Py_BuildValue("{s:i,s:K,s:n,s:K,s:s,s:n,s:n,s:n,s:N}", "device", p->device,
                                               "address", (unsigned long long)s->base, "total_size", (Py_ssize_t)s->size,
                                               "stream", (unsigned long long)s->stream, "segment_type",
                                               s->small ? "small" : "large", "allocated_size", (Py_ssize_t)allocated,
                                               "active_size", (Py_ssize_t)active, "requested_size",
                                               (Py_ssize_t)requested, "blocks", blocks)
                               : NULL;
        if (!seg || PyList_Append(out, seg) != 0) {
            Py_XDECREF(seg);
            pool_unlock(p);
            Py_DECREF(out);
            return NULL;
        }
        Py_DECREF(seg);
    }
    pool_unlock(p);
    return out;
}

/* shut down (runtime finalize): free every segment with no live block; the others stay mapped
 * (DLPack consumers may still view them) and later frees become no-ops */
static PyObject *Pool_shutdown(Pool *p, PyObject *unused)
{
    (void)unused;
    pool_lock(p);
    if (!p->closed) {
        CtxGuard g;
        ctx_enter(p, &g);
        process_events(p);
        for (size_t i = 0; i < p->npend; i++)
            p->fn.destroy_event(p->pend[i].event);
        p->npend = 0;   /* their blocks stay (leaked to the process, like live ones) */
        for (size_t i = 0; i < p->ndeferred; i++)
            block_release(p, p->deferred[i]);
        p->ndeferred = 0;
        size_t released;
        aclError err;
        release_core(p, 1, NULL, &released, &err);
        for (size_t i = 0; i < p->nev; i++)
            p->fn.destroy_event(p->ev_cache[i]);
        p->nev = 0;
        ctx_leave(p, &g);
        p->closed = 1;
    }
    pool_unlock(p);
    Py_RETURN_NONE;
}

static PyObject *Pool_info(Pool *p, PyObject *unused)
{
    (void)unused;
    pool_lock(p);
    PyObject *r = Py_BuildValue("{s:n,s:n,s:n,s:n,s:i}", "limit", (Py_ssize_t)p->limit, "pending_events",
                                (Py_ssize_t)p->npend, "deferred", (Py_ssize_t)p->ndeferred, "cached_events",
                                (Py_ssize_t)p->nev, "closed", p->closed);
    pool_unlock(p);
    return r;
}

static PyObject *Pool_owns(Pool *p, PyObject *arg)
{
    uintptr_t ptr = (uintptr_t)PyLong_AsUnsignedLongLong(arg);
    if (ptr == (uintptr_t)-1 && PyErr_Occurred())
        return NULL;
    pool_lock(p);
    Block *b = h_find(p, ptr);
    size_t sz = b ? b->size : 0;
    pool_unlock(p);
    if (!b)
        Py_RETURN_NONE;
    return PyLong_FromSize_t(sz);
}

static int Pool_init(Pool *p, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"functions", "context", "device", "total", NULL};
    PyObject *fns;
    unsigned long long ctx;
    int dev;
    Py_ssize_t total = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OKi|n", kwlist, &fns, &ctx, &dev, &total))
        return -1;
    if (!PyDict_Check(fns)) {
        PyErr_SetString(PyExc_TypeError, "functions must be a dict {name: address}");
        return -1;
    }
    void **slots = (void **)&p->fn;
    for (size_t i = 0; i < N_FNS; i++) {
        PyObject *v = PyDict_GetItemString(fns, FN_NAMES[i]);
        if (!v) {
            PyErr_Format(PyExc_KeyError, "missing runtime function %s", FN_NAMES[i]);
            return -1;
        }
        void *a = PyLong_AsVoidPtr(v);
        if (!a) {
            if (!PyErr_Occurred())
                PyErr_Format(PyExc_ValueError, "NULL address for %s", FN_NAMES[i]);
            return -1;
        }
        slots[i] = a;
    }
    p->ctx = (void *)(uintptr_t)ctx;
    p->device = dev;
    p->total = (size_t)total;
    return 0;
}

static PyObject *Pool_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    (void)args;
    (void)kw;
    Pool *p = (Pool *)type->tp_alloc(type, 0);
    if (!p)
        return NULL;
    pthread_mutex_init(&p->mu, NULL);
    p->seg_head.next = p->seg_head.prev = &p->seg_head;
    p->rng = 0x9E3779B9u ^ (uint32_t)(uintptr_t)p;
    if (!p->rng)
        p->rng = 1;
    p->trace_log = PyList_New(0);
    if (!p->trace_log) {
        Py_DECREF(p);
        return NULL;
    }
    return (PyObject *)p;
}

static void free_tree(Block *t)
{
    if (!t)
        return;
    free_tree(t->tl);
    free_tree(t->tr);
    free(t->uses);
    free(t);
}

static void Pool_dealloc(Pool *p)
{
    /* host bookkeeping only: device memory is released by shutdown() (or stays with the process) */
    for (size_t i = 0; i < p->hcap; i++)
        for (Block *b = p->htab[i], *n; b; b = n) {
            n = b->hnext;
            free(b->uses);
            free(b);
        }
    free(p->htab);
    free_tree(p->tree[0]);
    free_tree(p->tree[1]);
    for (Segment *s = p->seg_head.next, *n; s != &p->seg_head; s = n) {
        n = s->next;
        free(s);
    }
    for (size_t i = 0; i < p->npend; i++) {
        Block *b = p->pend[i].block;
        if (b && --b->events == 0 && !b->in_tree && !b->allocated) {
            free(b->uses);
            free(b);
        }
    }
    free(p->pend);
    for (size_t i = 0; i < p->ndeferred; i++) {
        free(p->deferred[i]->uses);
        free(p->deferred[i]);
    }
    free(p->deferred);
    free(p->ev_cache);
    Py_XDECREF(p->trace_log);
    pthread_mutex_destroy(&p->mu);
    Py_TYPE(p)->tp_free((PyObject *)p);
}

static PyMethodDef Pool_methods[] = {
    {"malloc", (PyCFunction)(void (*)(void))Pool_malloc, METH_FASTCALL, "malloc(size, stream) -> ptr"},
    {"free", (PyCFunction)(void (*)(void))Pool_free, METH_FASTCALL, "free(ptr, stream_dead=False)"},
    {"record_stream", (PyCFunction)(void (*)(void))Pool_record_stream, METH_FASTCALL, "record_stream(ptr, stream)"},
    {"release_cached", (PyCFunction)Pool_release_cached, METH_O,
     "release_cached(force) -> (bytes, busy streams, pending events, deferred)"},
    {"stream_closed", (PyCFunction)Pool_stream_closed, METH_O, "stream_closed(stream)"},
    {"stats", (PyCFunction)Pool_stats, METH_NOARGS, "PyTorch-style flat statistics"},
    {"summary", (PyCFunction)Pool_summary, METH_NOARGS, "tuple of the main counters"},
    {"reset_peaks", (PyCFunction)Pool_reset_peaks, METH_NOARGS, ""},
    {"reset_accumulated", (PyCFunction)Pool_reset_accumulated, METH_NOARGS, ""},
    {"count", (PyCFunction)Pool_count, METH_O, "count('retry'|'oom'|'sync_all')"},
    {"set_limit", (PyCFunction)Pool_set_limit, METH_O, "set_limit(bytes); 0 = none"},
    {"set_trace", (PyCFunction)Pool_set_trace, METH_O, ""},
    {"take_trace", (PyCFunction)Pool_take_trace, METH_NOARGS, ""},
    {"snapshot", (PyCFunction)Pool_snapshot, METH_NOARGS, ""},
    {"shutdown", (PyCFunction)Pool_shutdown, METH_NOARGS, ""},
    {"info", (PyCFunction)Pool_info, METH_NOARGS, ""},
    {"owns", (PyCFunction)Pool_owns, METH_O, "block size of an allocated pointer, or None"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject PoolType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "acl_rt._native.Pool",
    .tp_basicsize = sizeof(Pool),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "caching device-memory pool core (see acl_rt/_pool.py)",
    .tp_new = Pool_new,
    .tp_init = (initproc)Pool_init,
    .tp_dealloc = (destructor)Pool_dealloc,
    .tp_methods = Pool_methods,
};

static PyObject *mod_round_size(PyObject *m, PyObject *arg)
{
    (void)m;
    size_t n = PyLong_AsSize_t(arg);
    if (n == (size_t)-1 && PyErr_Occurred())
        return NULL;
    return PyLong_FromSize_t(round_size(n));
}

static PyObject *mod_segment_size(PyObject *m, PyObject *arg)
{
    (void)m;
    size_t n = PyLong_AsSize_t(arg);
    if (n == (size_t)-1 && PyErr_Occurred())
        return NULL;
    return PyLong_FromSize_t(segment_size(round_size(n)));
}

static PyMethodDef mod_methods[] = {
    {"round_size", mod_round_size, METH_O, "the block size a request of n bytes gets"},
    {"segment_size", mod_segment_size, METH_O, "the segment size a new segment for n bytes gets"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moddef = {
    PyModuleDef_HEAD_INIT, "acl_rt._native", "core of canna's caching device-memory allocator; the current-stream epoch", -1, mod_methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__native(void)
{
    if (PyType_Ready(&PoolType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&moddef);
    if (!m)
        return NULL;
    NativeError = PyErr_NewException("acl_rt._native.Error", PyExc_RuntimeError, NULL);
    if (!NativeError || PyModule_AddObject(m, "Error", NativeError) < 0) {
        Py_XDECREF(NativeError);
        Py_DECREF(m);
        return NULL;
    }
    Py_INCREF(&PoolType);
    if (PyModule_AddObject(m, "Pool", (PyObject *)&PoolType) < 0) {
        Py_DECREF(&PoolType);
        Py_DECREF(m);
        return NULL;
    }
    if (current_add_to_module(m) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    PyModule_AddIntConstant(m, "E_RUNTIME", E_RUNTIME);
    PyModule_AddIntConstant(m, "E_LIMIT", E_LIMIT);
    PyModule_AddIntConstant(m, "E_NOT_OWNED", E_NOT_OWNED);
    PyModule_AddIntConstant(m, "E_INTERIOR", E_INTERIOR);
    PyModule_AddIntConstant(m, "E_NOMEM", E_NOMEM);
    PyModule_AddIntConstant(m, "SMALL_SIZE", K_SMALL_SIZE);
    PyModule_AddIntConstant(m, "MIN_BLOCK", K_MIN_BLOCK);
    return m;
}
