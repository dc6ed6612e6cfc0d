/* canna simulator: private header shared by every source of libascendcl_sim.so.
 *
 * The behaviour implemented here is specified in README.md next to this file.
 * Declarations of the exported API come from ../_cdef (our own ABI text) or, with
 * -DCANNA_WITH_CANN_HEADERS, from CANN's real headers followed by our prototypes, so the
 * compiler checks that both agree.
 *
 * Locking order (outer to inner; never take an outer lock while holding an inner one):
 *   g_state_lock > device lock > stream lock > event lock > report lock
 *   the handle registry lock, the memory-table lock, device mem_lock / util_lock, the worker
 *   count lock and pool locks are leaves (nothing else is acquired while holding them, except
 *   that sim_mem free takes mem_lock after the table lock, and that mem_lock / util_lock holders
 *   may take the cross-process lock of the shared segment, sim_shm.c, the innermost of all).
 * Objects are freed only by sim_obj_unref() and their free functions take no lock.
 */
#ifndef CANNA_SIM_H
#define CANNA_SIM_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif

#include <stdint.h>
#include <stddef.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <time.h>
#include <pthread.h>

#ifdef CANNA_WITH_CANN_HEADERS
#include <acl/acl.h>
#include <acl/error_codes/rt_error_codes.h>
#else
#include "../_cdef/rt_types.h"
#include "../_cdef/rt_errors.h"
#endif
#include "../_cdef/rt_funcs.h"
#include "../_cdef/sim_funcs.h"
#include "../_cdef/dcmi_types.h"
#include "../_cdef/dcmi_funcs.h"
#include "../_cdef/sim_mon_funcs.h"

#define SIM_API __attribute__((visibility("default")))
#define SIM_LIKELY(x) __builtin_expect(!!(x), 1)
#define SIM_UNLIKELY(x) __builtin_expect(!!(x), 0)

#define SIM_VERSION "0.1.0"
#define SIM_CANN_VERSION "9.1.0"
#define SIM_MAX_DEVICES 64
#define SIM_MAX_STREAMS_PER_DEVICE 1984
#define SIM_MSG_MAX 512
#define SIM_WORKER_IDLE_NS (2000ull * 1000 * 1000)   /* a stream worker exits after ~2 s idle */
#define SIM_INLINE_COPY_MAX (1024u * 1024u)          /* memcpy/memset inline threshold (bytes) */
#define SIM_INLINE_COST_MAX_NS 100000u                /* aclsimLaunchTask / kernel inline threshold */
#define SIM_FREED_RING 4096                           /* remembered freed ranges */
#define SIM_UTIL_BUCKET_NS (100ull * 1000 * 1000)     /* utilization bucket width: 100 ms */
#define SIM_UTIL_BUCKETS 16                           /* ring of buckets (window uses ~11) */
#define SIM_UTIL_WINDOW_BUCKETS 10                    /* full buckets in the ~1 s window */
#define SIM_MAX_THREADS 1024                          /* CANNA_SIM_THREADS limit */
#define SIM_MAX_HBM (1ull << 50)                      /* CANNA_SIM_HBM_SIZE limit: 1 PiB = 1024T */
#define SIM_SPIN_DEFAULT_NS 100000u                   /* CANNA_SIM_SPIN_US default: 100 us */
#define SIM_KICK_DELAY_NS 30000u                      /* a deferred worker wake-up waits this long */
#define SIM_WAKE_MIN_NS 100000u                       /* wake a sleeping AI-core thread for this much work */

/* ------------------------------------------------------------------ small helpers */

static inline uint64_t sim_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline void sim_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield" ::: "memory");
#endif
}

/* intrusive doubly-linked list */
typedef struct sim_list {
    struct sim_list *prev, *next;
} sim_list_t;

static inline void sim_list_init(sim_list_t *h) { h->prev = h->next = h; }
static inline void sim_list_add(sim_list_t *h, sim_list_t *n)
{
    n->prev = h->prev;
    n->next = h;
    h->prev->next = n;
    h->prev = n;
}
static inline void sim_list_del(sim_list_t *n)
{
    n->prev->next = n->next;
    n->next->prev = n->prev;
    n->prev = n->next = n;
}
#define SIM_CONTAINER(ptr, type, member) ((type *)((char *)(ptr) - offsetof(type, member)))

void sim_cond_init(pthread_cond_t *cv);          /* CLOCK_MONOTONIC condition variable */
/* absolute CLOCK_MONOTONIC deadline `ms` from now */
void sim_deadline(struct timespec *ts, uint64_t ns_from_now);
int sim_cond_wait_until(pthread_cond_t *cv, pthread_mutex_t *mu, const struct timespec *deadline);

/* ------------------------------------------------------------------ configuration */

typedef struct sim_profile {
    const char *name;
    uint64_t hbm;
    uint32_t ai_cores;
    uint32_t vector_cores;
    uint32_t aicpus;
    uint64_t l2;
    uint64_t ub;          /* Unified Buffer of one vector core, bytes (Ascend C's TPipe::InitBuffer limit) */
} sim_profile_t;

typedef struct sim_config {
    int32_t ndev;
    const sim_profile_t *profile;
    uint64_t hbm;
    int32_t memory_model;   /* ACLSIM_MEMORY_* */
    int32_t check;          /* 1 = memcheck */
    uint32_t threads;       /* CANNA_SIM_THREADS: threads running one launch's blocks (0 = the CPUs) */
    uint64_t spin_ns;       /* CANNA_SIM_SPIN_US: how long an idle thread spins before sleeping */
    uint64_t kernel_timeout_ns;   /* CANNA_SIM_KERNEL_TIMEOUT: default custom-kernel timeout (0 = none) */
} sim_config_t;

extern sim_config_t g_cfg;
extern atomic_int g_cfg_loaded;
extern atomic_int g_inited;        /* 1 between aclInit and aclFinalize */
extern atomic_int g_finalizing;    /* 1 while aclFinalize tears down */
extern volatile int g_forked;      /* set in a forked child of an initialized process */
extern pthread_mutex_t g_state_lock;

/* load the configuration from the environment once (first aclInit or first aclsim* call) */
aclError sim_config_ensure(const char *api);

/* ------------------------------------------------------------------ errors */

aclError sim_err(aclError code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
aclError sim_forked_err(const char *api);
/* save / restore the calling thread's recent error (around tasks run inline) */
typedef struct sim_errsave {
    bool has;
    aclError last;
    char msg[SIM_MSG_MAX];
} sim_errsave_t;
void sim_err_save(sim_errsave_t *s);
void sim_err_restore(const sim_errsave_t *s);
/* the thread's pending message (NULL if none), without clearing */
const char *sim_err_peek(void);
void sim_err_clear(void);

#define SIM_CHECK_FORK(api, failret)                         \
    do {                                                     \
        if (SIM_UNLIKELY(g_forked)) {                        \
            sim_forked_err(api);                             \
            return failret;                                  \
        }                                                    \
    } while (0)

#define SIM_ENTER(api)                                                               \
    do {                                                                             \
        if (SIM_UNLIKELY(g_forked))                                                  \
            return sim_forked_err(api);                                              \
        if (SIM_UNLIKELY(!atomic_load_explicit(&g_inited, memory_order_acquire)))     \
            return sim_err(ACL_ERROR_UNINITIALIZE,                                   \
                           "%s: AscendCL is not initialized (call aclInit first)", api); \
    } while (0)

/* queries that answer from the configuration alone (device count, run mode, SoC name): they work
 * before aclInit, as torch_npu's device_count() expects of aclrtGetDeviceCount, so a process that
 * only asked them can still fork */
#define SIM_ENTER_LIGHT(api)                                                         \
    do {                                                                             \
        if (SIM_UNLIKELY(g_forked))                                                  \
            return sim_forked_err(api);                                              \
        aclError rc_light_ = sim_config_ensure(api);                                 \
        if (rc_light_)                                                               \
            return rc_light_;                                                        \
    } while (0)

#define SIM_NULL_CHECK(api, p)                                                       \
    do {                                                                             \
        if (SIM_UNLIKELY((p) == NULL))                                               \
            return sim_err(ACL_ERROR_INVALID_PARAM, "%s: %s must not be NULL", api, #p); \
    } while (0)

/* ------------------------------------------------------------------ handle registry */

enum { SIM_KIND_CTX = 1, SIM_KIND_STREAM = 2, SIM_KIND_EVENT = 3 };
#define SIM_OBJ_MAGIC 0x43414e4eu  /* "CANN" */
#define SIM_HANDLE_BASE 0x5a00000000000000ull   /* non-canonical on x86-64 and arm64: never a real address */
#define SIM_H(o) ((o)->obj.handle)

typedef struct sim_obj {
    uint32_t magic;
    uint32_t kind;
    atomic_int refs;
    void *handle;   /* the value the user sees: a unique, never reused, non-dereferenceable id */
    void (*free_fn)(struct sim_obj *);
} sim_obj_t;

void sim_obj_init(sim_obj_t *o, uint32_t kind, void (*free_fn)(sim_obj_t *));
void sim_obj_ref(sim_obj_t *o);
void sim_obj_unref(sim_obj_t *o);
/* register o under a fresh handle (o->handle); the registry takes a reference */
bool sim_reg_add(sim_obj_t *o);
bool sim_reg_remove(sim_obj_t *o);   /* true if it was registered (drop the registry's ref yourself) */
/* look a handle up; returns a new reference or NULL. *kind_found = kind of a live handle of another kind (0 if unknown)
 * Handles are ids, not object addresses, so a destroyed handle never becomes valid again. */
sim_obj_t *sim_reg_get(const void *h, uint32_t kind, uint32_t *kind_found);
const char *sim_kind_name(uint32_t kind);

/* ------------------------------------------------------------------ devices */

typedef struct sim_util {
    uint64_t cum_ns;                       /* core-ns integral up to `last` */
    uint64_t last;                         /* time of the last advance */
    uint32_t active;                       /* cores busy now */
    uint64_t bucket_id[SIM_UTIL_BUCKETS];
    uint64_t bucket_ns[SIM_UTIL_BUCKETS];
} sim_util_t;

struct sim_pfjob;
typedef struct sim_pool {
    pthread_mutex_t lock;          /* the job list, starting and stopping */
    struct sim_pfjob *jobs;        /* jobs that may have unclaimed blocks (FIFO) */
    struct sim_pfjob *jobs_tail;
    _Atomic uint32_t work_gen;     /* bumped when a job is queued or the pool stops (futex word) */
    _Atomic uint32_t sleepers;     /* pool threads asleep on work_gen */
    _Atomic uint32_t done_gen;     /* bumped when a job completes (futex word) */
    _Atomic uint32_t done_waiters; /* callers asleep on done_gen */
    atomic_int stop;
    pthread_t *threads;
    uint32_t nthreads;
    bool started;
    /* deferred wake-ups of stream workers (sim_pool_defer_wake), under lock */
    uint32_t idle_spinners;        /* pool threads spinning for work: they also deliver wake-ups */
    struct sim_stream *kicks;      /* streams whose worker is to be woken (each holds a reference) */
    atomic_uint_fast64_t kick_first;   /* when the oldest pending wake-up was deferred (0: none) */
} sim_pool_t;

struct sim_ctx;
struct sim_stream;

typedef struct sim_device {
    int32_t id;
    pthread_mutex_t lock;            /* contexts, stream/event lists, peer flags */
    struct sim_ctx *primary;
    uint32_t primary_refs;
    sim_list_t streams;              /* live and draining streams (list holds a ref) */
    uint32_t nstreams_live;
    sim_list_t events;
    uint32_t nevents;
    sim_list_t ctxs;                 /* non-primary contexts */
    uint8_t peer[SIM_MAX_DEVICES];   /* peer[p]: this device enabled access to p */

    pthread_mutex_t mem_lock;        /* memory accounting */
    uint64_t capacity, used, peak, nallocs, nmalloc_calls, nfree_calls;

    pthread_mutex_t util_lock;
    sim_util_t *util;                /* [3]: util_local, or this process's slot of the shared segment */
    sim_util_t util_local[3];

    atomic_uint_fast64_t tasks_executed;
    atomic_uint_fast64_t tasks_inline;
    atomic_uint_fast64_t tasks_at_sync;

    sim_pool_t pool;

    /* the first sticky error of a stream destroyed before anyone took it (under lock): reported by
     * the next aclrtSynchronizeDevice; orphan_more counts later ones */
    aclError orphan_code;
    uint32_t orphan_more;
    char orphan_msg[SIM_MSG_MAX];
} sim_device_t;

extern sim_device_t g_dev[SIM_MAX_DEVICES];

void sim_devices_setup(void);   /* once, when the configuration is loaded */
bool sim_dev_valid(int64_t id);
bool sim_peer_enabled(int32_t a, int32_t b);
void sim_util_begin(sim_device_t *d, int32_t engine, uint32_t cores, uint64_t now);
void sim_util_end(sim_device_t *d, int32_t engine, uint32_t cores, uint64_t now);

typedef struct sim_ctx {
    sim_obj_t obj;
    sim_device_t *dev;
    struct sim_stream *def_stream;   /* ref held */
    bool primary;
    bool dead;
    sim_list_t link;
} sim_ctx_t;

/* the calling thread's current context with a new reference, or NULL */
sim_ctx_t *sim_ctx_current(void);
/* as above, failing with 107002 naming api */
aclError sim_need_ctx(const char *api, sim_ctx_t **out);
void sim_ctx_clear_tls_if(sim_ctx_t *c);

/* tear-down helpers used by aclFinalize */
void sim_devices_finalize(void);
void sim_pools_stop(void);

/* ------------------------------------------------------------------ streams and tasks */

typedef struct sim_stream {
    sim_obj_t obj;
    sim_device_t *dev;
    sim_list_t link;          /* in dev->streams, under dev->lock */
    bool listed;
    bool is_default;
    bool counted;             /* counted in dev->nstreams_live */
    uint32_t priority, flags;

    pthread_mutex_t lock;
    pthread_cond_t cv_work;   /* worker waits for work / for an inline task to finish */
    pthread_cond_t cv_done;   /* synchronizers wait for completion */
    struct sim_task *head, *tail;
    atomic_uint_fast64_t enq_seq;
    atomic_uint_fast64_t done_seq;
    bool running;             /* a task is executing (worker or inline) */
    char running_what[64];    /* the running task's kernel name ("" for other tasks), under lock */
    bool worker_alive;
    bool worker_sleeping;
    bool dead;                /* destroyed: no new tasks; worker exits when drained */
    int waiters;

    atomic_int err_code;      /* sticky asynchronous error (0 = none) */
    char err_msg[SIM_MSG_MAX];
    uint64_t err_id;

    bool subscribed;          /* aclrtSubscribeReport */
    uint64_t sub_tid;

    struct sim_stream *kick_next;   /* in dev->pool.kicks, under the pool lock */
    bool kick_pending;              /* under the pool lock */
} sim_stream_t;

typedef struct sim_event {
    sim_obj_t obj;
    sim_device_t *dev;
    sim_list_t link;
    bool listed;
    uint32_t flags;
    bool timing;
    pthread_mutex_t lock;
    pthread_cond_t cv;
    uint64_t recorded_gen;    /* bumped by every aclrtRecordEvent / aclrtResetEvent call */
    uint64_t completed_gen;   /* the latest record/reset that executed */
    uint64_t ts_ns;
    bool has_ts;              /* completed state is "recorded" with a timestamp */
    sim_stream_t *err_stream; /* stream that had a sticky error when the record executed (ref) */
    uint64_t err_id;
    const sim_stream_t *rec_stream;  /* stream of the latest record (compared only, never dereferenced) */
} sim_event_t;

typedef struct sim_task sim_task_t;
typedef aclError (*sim_task_run_fn)(sim_task_t *t, sim_stream_t *s);
typedef void (*sim_task_rel_fn)(sim_task_t *t);

struct sim_task {
    sim_task_t *next;
    uint64_t seq;
    bool control;        /* control tasks run even after a sticky error */
    bool launch_failed;  /* submit failed: release must not call user callbacks */
    bool skipped;
    bool steal;          /* a synchronizing thread may run it (cost_ns is a run-time estimate) */
    uint64_t cost_ns;
    int32_t engine;
    uint32_t cores;
    const char *what;    /* a kernel launch: the kernel's name (valid while the task lives); else NULL */
    sim_task_run_fn run;
    sim_task_rel_fn release;   /* always called exactly once (frees payload) */
    sim_task_rel_fn on_enqueue; /* called under the stream lock once the task is sure to run */
    union {
        struct { aclsimTaskFn fn; void *arg; aclsimReleaseFn rel; } user;
        struct { uint64_t us; } delay;
        struct { aclError code; char *msg; } fault;
        struct { void *dst; const void *src; size_t n; void *staging; bool dst_dev, src_dev; } copy;
        struct { void *ptr; size_t n; int value; bool dev; } set;
        struct { sim_event_t *ev; uint64_t gen; } ev;
        struct { aclrtHostFunc fn; void *args; } host;
        struct { aclrtCallback fn; void *data; int block; uint64_t tid; } cb;
    } u;
};

extern __thread sim_stream_t *tls_running_stream;
/* cost estimate (ns) of the task the calling thread runs; UINT64_MAX: unknown, or not in a task */
extern __thread uint64_t tls_task_cost_ns;
/* aclsimSetLaunchWaited: the calling thread waits for what it launches, so a task it submits to
 * an idle stream runs on it at once whatever its cost (no handoff to the stream's worker) */
extern __thread int32_t tls_launch_waited;

/* resolve a stream handle (NULL = current context's default stream); returns a reference */
aclError sim_stream_resolve(aclrtStream h, const char *api, sim_stream_t **out);
/* create a stream (caller holds d->lock); returns it with one reference for the caller */
sim_stream_t *sim_stream_create(sim_device_t *d, bool is_default, uint32_t prio, uint32_t flags,
                                const char *api, aclError *rc);
/* invalidate the handle; queued work still drains (caller keeps its own reference).
 * dev_locked: the caller holds s->dev->lock. */
void sim_stream_destroy(sim_stream_t *s, bool dev_locked);
/* invalidate an event handle and unlist it; caller holds e->dev->lock */
void sim_event_kill_locked(sim_event_t *e);
sim_task_t *sim_task_new(void);
/* queue t on s (or run it inline when `small` and the stream is idle). On failure t is released
 * with launch_failed set and the error code is returned. */
aclError sim_stream_submit(sim_stream_t *s, sim_task_t *t, bool small, const char *api);
/* wait for everything queued before the call; timeout_ms -1 = forever. report: take the sticky error */
aclError sim_stream_sync(sim_stream_t *s, int64_t timeout_ms, bool report, const char *api,
                         aclError timeout_code);
/* wait until every stream of the device is drained; report: first sticky error */
aclError sim_device_sync(sim_device_t *d, int64_t timeout_ms, bool report, const char *api);
void sim_stream_set_fault(sim_stream_t *s, aclError code, const char *msg);
/* take and clear the sticky error (0 if none) */
aclError sim_stream_take_error(sim_stream_t *s, const char *api);
void sim_workers_wait_all(void);
void sim_report_shutdown(void);
/* caller holds s->lock and the worker sleeps with work queued: when a pool thread of the device is
 * spinning idle, leave the wake-up to it (sim_stream_kick after SIM_KICK_DELAY_NS, unless a thread
 * synchronizing the stream runs the work first) and return true; false: wake the worker yourself */
bool sim_pool_defer_wake(sim_stream_t *s);
/* wake s's worker if it sleeps with work queued and nothing running; drops the kick's reference */
void sim_stream_kick(sim_stream_t *s);

/* ------------------------------------------------------------------ scheduling (sim_sched.c) */

void sim_sched_setup(void);          /* once, when the configuration is loaded */
uint32_t sim_host_cpus(void);        /* CPUs this process may use (affinity, cgroup quota) */
uint32_t sim_sched_cpus(void);
uint32_t sim_sched_threads(void);    /* threads running one launch's blocks, the caller included */
uint32_t sim_sched_busy(void);       /* the simulator's threads computing or spinning now */
uint32_t sim_sched_computing(void);  /* of those, the ones computing (not spinning) */
/* the calling thread computes (a task, blocks): counted in the busy threads (nests) */
void sim_busy_enter(void);
void sim_busy_leave(void);
/* a bounded spin: start (false: do not spin, sleep at once), more (pause; false: stop now), stop */
typedef struct sim_spin {
    uint64_t t0, last;
    uint32_t i;
    bool reserved;
} sim_spin_t;
bool sim_spin_start(sim_spin_t *sp);
bool sim_spin_more(sim_spin_t *sp);
void sim_spin_stop(sim_spin_t *sp);
/* futex wait while *word == val (deadline: absolute CLOCK_MONOTONIC, NULL = forever); 0 or errno */
int sim_futex_wait(_Atomic uint32_t *word, uint32_t val, const struct timespec *deadline);
void sim_futex_wake(_Atomic uint32_t *word, int n);
/* memmove / memset of n bytes, spread over device dev's AI-core threads when large (sim_pool.c) */
void sim_parallel_memmove(int32_t dev, void *dst, const void *src, size_t n);
void sim_parallel_memset(int32_t dev, void *dst, int value, size_t n);

/* ------------------------------------------------------------------ memory */

enum { SIM_PTR_HOST = 0, SIM_PTR_DEVICE = 1 };
/* classify [p, p+n) for a copy/memset; returns 0 and *where (SIM_PTR_*) and *dev, or an error
 * (message mentions api and side) */
aclError sim_mem_classify(const void *p, size_t n, const char *api, const char *side,
                          int *where, int32_t *dev);
/* true when [p, p+n) is still inside a live device allocation (tasks revalidate at run time) */
bool sim_mem_still_live(const void *p, size_t n);

/* what ptr points into (for the kernel launcher's checks and fault reports): state SIM_MEM_*,
 * and for an allocation its user range [lo, lo + size) and device (-1 for host memory) */
enum { SIM_MEM_NONE = 0, SIM_MEM_DEVICE = 1, SIM_MEM_HOST = 2, SIM_MEM_FREED_DEVICE = 3, SIM_MEM_FREED_HOST = 4 };
typedef struct sim_mem_info {
    int state;
    uintptr_t lo;
    size_t size;
    int32_t dev;
    size_t page;   /* the page size */
} sim_mem_info_t;
void sim_mem_lookup_info(const void *ptr, sim_mem_info_t *out);

/* ------------------------------------------------------------------ processes (sim_shm.c) */

/* attach to the machine's shared segment and claim this process's slot (at aclInit; idempotent) */
void sim_shm_attach_process(void);
/* attach without a slot (monitoring: DCMI and aclsim* readers); false when there is no segment */
bool sim_shm_attach_reader(void);
/* count `bytes` of device `dev` against this process, failing (false) when the machine's devices
 * would exceed `capacity` in total; called with the device's mem_lock held */
bool sim_shm_charge(int32_t dev, uint64_t bytes, uint64_t capacity);
void sim_shm_uncharge(int32_t dev, uint64_t bytes);
/* bytes of device `dev` in use by every live process of the machine (`local` without a segment) */
uint64_t sim_shm_used_total(int32_t dev, uint64_t local);
void sim_shm_set_open(int32_t dev, bool open);
/* device-wide utilization in percent of engine `engine` over the last ~1 s, all processes */
int32_t sim_shm_util_percent(sim_device_t *d, int32_t engine, uint32_t cores, uint64_t now);
/* helpers of sim_device.c used by sim_shm.c */
void sim_util_advance(sim_util_t *u, uint64_t now);
long double sim_util_window(sim_util_t *u, uint64_t now, uint64_t *window_ns);
bool sim_profile_has_hbm(void);
/* for sim_dcmi.c: the machine-wide view (attaching as a reader when needed) */
uint64_t sim_shm_device_used(int32_t dev);
int32_t sim_shm_device_util(int32_t dev, int32_t engine);

#endif /* CANNA_SIM_H */
