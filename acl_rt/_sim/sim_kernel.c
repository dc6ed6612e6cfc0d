/* canna simulator: custom kernels -- aclrtBinaryLoad*, aclrtBinaryGetFunction, the
 * aclrtLaunchKernel* family and the aclrtKernelArgs* builder -- with kernel fault isolation,
 * kernel timeouts and memcheck of kernel arguments.
 *
 * The binary format is in sim_kernel_abi.h; the behaviour is specified in README.md
 * ("Custom kernels").
 *
 * Fault isolation. A kernel block runs on an AI-core thread (aclsimParallelFor) inside a
 * sigsetjmp frame. SIGSEGV, SIGBUS, SIGFPE, SIGILL and SIGABRT are caught by a process-wide
 * handler that siglongjmp()s back to that frame when the signal hits a thread while it runs a
 * kernel block; the fault becomes the launch's asynchronous error (reported at the next
 * synchronize) and the stream stays usable. A signal on any other thread is handed to the
 * disposition that was installed before ours (Python's faulthandler, ASan, the default action):
 * our handler reinstalls it and returns, so the faulting instruction runs again under it (and a
 * signal sent with kill/raise is raised again). The handlers are (re)installed when a binary is
 * loaded and at every launch if someone replaced them meanwhile.
 *
 * Per-thread state (the jump buffer, the running block) lives in a pthread key, never in __thread
 * storage: the first touch of __thread data of a dlopen()ed library may allocate, which a signal
 * handler must not do.
 */
#include "sim.h"
#include "sim_kernel_abi.h"

#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <ucontext.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/stat.h>

/* handle kinds of this file (the registry is generic; distinct from sim.h's SIM_KIND_*) */
enum { SIM_KIND_BINARY = 0x21, SIM_KIND_FUNC = 0x22, SIM_KIND_ARGS = 0x23 };

#define SIM_MAX_BLOCKS 65535u                    /* numBlocks limit (Ascend C: blockDim in [1, 65535]) */
#define SIM_MAX_ARGS_BYTES (64u << 20)          /* sanity limit for argument blocks */
#define SIM_PARAM_HANDLE_TAG 0x5b00000000000000ull
#define SIM_ALTSTACK_SIZE (64u * 1024u)

enum { KENG_DEFAULT = 0, KENG_AIC = 1, KENG_AIV = 2 };
enum { KF_EXCEPTION, KF_TRAP, KF_TIMEOUT, KF_READ_OVERFLOW, KF_WRITE_OVERFLOW };

/* ------------------------------------------------------------------ objects */

struct sim_func;

typedef struct sim_bin {
    sim_obj_t obj;
    void *dl;
    int fd;                      /* the in-memory file dlopen()ed (kept open: its /proc path stays unique) */
    const canna_sim_binary *info;
    int32_t dev;
    uint32_t magic;              /* ACL_RT_BINARY_MAGIC_* from the load options (0: none) */
    pthread_mutex_t lock;        /* funcs, args, unloaded */
    bool unloaded;
    struct sim_func **funcs;     /* one per kernel, created on first aclrtBinaryGetFunction (owner refs) */
    sim_list_t args;             /* args handles of its functions (owner refs) */
    char name[160];              /* for messages: the file name, or "<data>" */
} sim_bin_t;

typedef struct sim_func {
    sim_obj_t obj;
    sim_bin_t *bin;              /* ref */
    const canna_sim_kernel *k;
    uint32_t args_end;           /* end of the last parameter in the argument block */
    atomic_uint_fast64_t last_ns;   /* run time of the latest launch (UINT64_MAX: never ran) */
} sim_func_t;

typedef struct sim_kargs {
    sim_obj_t obj;
    sim_func_t *f;               /* ref */
    sim_list_t link;             /* in f->bin->args */
    uint64_t seq;
    uint32_t nappended;
    bool finalized;
    uint8_t *block;              /* f->k->args_size bytes */
    bool is_ph[CANNA_SIM_MAX_PARAMS];
    void *ph_buf[CANNA_SIM_MAX_PARAMS];
    size_t ph_size[CANNA_SIM_MAX_PARAMS];
} sim_kargs_t;

static atomic_uint_fast64_t g_args_seq;

static void bin_free(sim_obj_t *o)
{
    sim_bin_t *b = (sim_bin_t *)o;
    if (b->dl)
        dlclose(b->dl);
    if (b->fd >= 0)
        close(b->fd);
    free(b->funcs);
    pthread_mutex_destroy(&b->lock);
    free(b);
}

static void func_free(sim_obj_t *o)
{
    sim_func_t *f = (sim_func_t *)o;
    sim_obj_unref(&f->bin->obj);
    free(f);
}

static void kargs_free(sim_obj_t *o)
{
    sim_kargs_t *a = (sim_kargs_t *)o;
    for (uint32_t i = 0; i < CANNA_SIM_MAX_PARAMS; i++)
        free(a->ph_buf[i]);
    free(a->block);
    sim_obj_unref(&a->f->obj);
    free(a);
}

static aclError get_obj(const void *h, uint32_t kind, const char *api, const char *what, sim_obj_t **out)
{
    if (!h)
        return sim_err(ACL_ERROR_INVALID_PARAM, "%s: %s must not be NULL", api, what);
    uint32_t kf = 0;
    sim_obj_t *o = sim_reg_get(h, kind, &kf);
    if (!o) {
        if (kf)
            return sim_err(ACL_ERROR_RT_INVALID_HANDLE, "%s: %s %p is a handle of another kind", api, what, h);
        return sim_err(ACL_ERROR_RT_INVALID_HANDLE, "%s: invalid %s %p (unknown, destroyed or unloaded)", api, what, h);
    }
    *out = o;
    return ACL_SUCCESS;
}

/* ------------------------------------------------------------------ per-thread kernel state */

struct klaunch;

typedef struct kthread {
    sigjmp_buf jb;
    volatile sig_atomic_t active;          /* 1 while a kernel block runs on this thread */
    struct klaunch *volatile launch;
    volatile int sig, code, access;        /* access: 0 unknown, 1 read, 2 write */
    volatile int gp;                       /* x86: a general-protection fault (si_addr is not the address) */
    void *volatile addr;
    void *volatile pc;
    void *volatile sp;
    void *altstack;
    void *ub;                              /* the Unified Buffer of Ascend C kernels (canna_sim_host.ub) */
    size_t ub_size;
    int quiet;                             /* the block left a wait because its launch is stopping */
} kthread_t;

static pthread_key_t g_kkey;
static pthread_once_t g_kkey_once = PTHREAD_ONCE_INIT;
static int g_intr_sig;                     /* signal interrupting timed-out blocks (0: none available) */

static const int g_fault_sigs[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
#define NFAULT_SIGS ((int)(sizeof g_fault_sigs / sizeof g_fault_sigs[0]))
static struct sigaction g_prev[NFAULT_SIGS];
static atomic_int g_chained[NFAULT_SIGS];
static pthread_mutex_t g_sig_lock = PTHREAD_MUTEX_INITIALIZER;

static void kthread_destroy(void *p)
{
    kthread_t *kt = p;
    if (kt->altstack) {
        stack_t cur;
        if (sigaltstack(NULL, &cur) == 0 && cur.ss_sp == kt->altstack) {
            stack_t off;
            memset(&off, 0, sizeof off);
            off.ss_flags = SS_DISABLE;
            sigaltstack(&off, NULL);
        }
        munmap(kt->altstack, SIM_ALTSTACK_SIZE);
    }
    if (kt->ub)
        munmap(kt->ub, kt->ub_size);
    free(kt);
}

static void kfault_handler(int sig, siginfo_t *si, void *ucv);
static int klaunch_timed_out(const struct klaunch *L);

static void kkey_init(void)
{
    pthread_key_create(&g_kkey, kthread_destroy);
    /* a real-time signal nobody else handles interrupts blocks of a timed-out launch */
    for (int s = SIGRTMAX - 1; s >= SIGRTMIN + 2; s--) {
        struct sigaction cur;
        if (sigaction(s, NULL, &cur) != 0 || (cur.sa_flags & SA_SIGINFO) || cur.sa_handler != SIG_DFL)
            continue;
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = kfault_handler;
        sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESTART | SA_NODEFER;
        sigemptyset(&sa.sa_mask);
        if (sigaction(s, &sa, NULL) == 0) {
            g_intr_sig = s;
            break;
        }
    }
}

/* the calling thread's kernel state, prepared on first use: an alternate signal stack (so a
 * kernel's stack overflow can be reported) unless the thread has one, and the fault signals and
 * the interrupt signal unblocked (the runtime's own threads start with every signal blocked) */
static kthread_t *kthread_get(void)
{
    pthread_once(&g_kkey_once, kkey_init);
    kthread_t *kt = pthread_getspecific(g_kkey);
    if (SIM_LIKELY(kt != NULL))
        return kt;
    kt = calloc(1, sizeof *kt);
    if (!kt)
        return NULL;
    stack_t cur;
    if (sigaltstack(NULL, &cur) == 0 && (cur.ss_flags & SS_DISABLE)) {
        void *st = mmap(NULL, SIM_ALTSTACK_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (st != MAP_FAILED) {
            stack_t ss;
            memset(&ss, 0, sizeof ss);
            ss.ss_sp = st;
            ss.ss_size = SIM_ALTSTACK_SIZE;
            if (sigaltstack(&ss, NULL) == 0)
                kt->altstack = st;
            else
                munmap(st, SIM_ALTSTACK_SIZE);
        }
    }
    sigset_t set;
    sigemptyset(&set);
    for (int i = 0; i < NFAULT_SIGS; i++)
        sigaddset(&set, g_fault_sigs[i]);
    if (g_intr_sig)
        sigaddset(&set, g_intr_sig);
    pthread_sigmask(SIG_UNBLOCK, &set, NULL);
    if (pthread_setspecific(g_kkey, kt) != 0) {
        kthread_destroy(kt);
        return NULL;
    }
    return kt;
}

static int fault_index(int sig)
{
    for (int i = 0; i < NFAULT_SIGS; i++)
        if (g_fault_sigs[i] == sig)
            return i;
    return -1;
}

/* a signal that is not a fault of a kernel block on this thread: give it to the disposition that
 * was installed before ours. The first time, reinstall that disposition; should our handler see
 * such a signal again before it was reinstalled by a launch (another handler that chained back to
 * us), fall back to the default action so nothing loops. */
static void chain_signal(int sig, siginfo_t *si)
{
    int i = fault_index(sig);
    if (i < 0)
        return;
    struct sigaction next = g_prev[i];
    if (atomic_exchange(&g_chained[i], 1) != 0) {
        memset(&next, 0, sizeof next);
        next.sa_handler = SIG_DFL;
        sigemptyset(&next.sa_mask);
    }
    sigaction(sig, &next, NULL);
    if (si->si_code <= 0)   /* sent by kill(), raise(), abort(): send it again */
        raise(sig);
    /* a hardware fault: returning runs the faulting instruction again under `next` */
}

static void kfault_handler(int sig, siginfo_t *si, void *ucv)
{
    int saved_errno = errno;
    kthread_t *kt = pthread_getspecific(g_kkey);   /* reads the thread descriptor, no allocation */
    if (kt && kt->active) {
        struct klaunch *L = kt->launch;
        if (sig == g_intr_sig) {
            if (!klaunch_timed_out(L)) {
                errno = saved_errno;
                return;
            }
        }
        kt->active = 0;
        kt->sig = sig;
        kt->code = si->si_code;
        kt->addr = si->si_addr;
        kt->pc = NULL;
        kt->sp = NULL;
        kt->access = 0;
        kt->gp = 0;
#if defined(__x86_64__)
        ucontext_t *uc = ucv;
        kt->pc = (void *)uc->uc_mcontext.gregs[REG_RIP];
        kt->sp = (void *)uc->uc_mcontext.gregs[REG_RSP];
        kt->gp = sig == SIGSEGV && uc->uc_mcontext.gregs[REG_TRAPNO] == 13;
        if ((sig == SIGSEGV || sig == SIGBUS) && uc->uc_mcontext.gregs[REG_TRAPNO] == 14)   /* page fault */
            kt->access = (uc->uc_mcontext.gregs[REG_ERR] & 2) ? 2 : 1;
#elif defined(__aarch64__)
        ucontext_t *uc = ucv;
        kt->pc = (void *)uc->uc_mcontext.pc;
        kt->sp = (void *)uc->uc_mcontext.sp;
#else
        (void)ucv;
#endif
        siglongjmp(kt->jb, 1);
    }
    if (sig != g_intr_sig)
        chain_signal(sig, si);
    errno = saved_errno;
}

/* install the fault handlers unless they are in place (cheap when they are: one sigaction query) */
static void handlers_ensure(void)
{
    pthread_once(&g_kkey_once, kkey_init);
    struct sigaction cur;
    if (sigaction(SIGSEGV, NULL, &cur) == 0 && (cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == kfault_handler)
        return;
    pthread_mutex_lock(&g_sig_lock);
    for (int i = 0; i < NFAULT_SIGS; i++) {
        if (sigaction(g_fault_sigs[i], NULL, &cur) != 0)
            continue;
        if ((cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == kfault_handler)
            continue;
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = kfault_handler;
        /* SA_NODEFER: the signal is not blocked while the handler runs, so leaving it with
         * siglongjmp (no mask saved by sigsetjmp: no system call per block) leaves it unblocked */
        sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;
        sigemptyset(&sa.sa_mask);
        g_prev[i] = cur;
        atomic_store(&g_chained[i], 0);
        sigaction(g_fault_sigs[i], &sa, NULL);
    }
    pthread_mutex_unlock(&g_sig_lock);
}

/* ------------------------------------------------------------------ launches */

typedef struct krunner {
    pthread_t th;
    struct krunner *next;
} krunner_t;

typedef struct kcanary {
    uintptr_t lo;
    size_t size;
    uint32_t param;
} kcanary_t;

typedef struct klaunch {
    sim_func_t *f;               /* ref */
    uint32_t nblocks;
    int engine;                  /* KENG_* */
    int32_t dev;
    uint64_t timeout_ns;         /* 0: none */
    const void *dev_args;        /* aclrtLaunchKernel*: device argument block, read when the task runs */
    size_t args_size;
    uint8_t *args;
    bool is_ph[CANNA_SIM_MAX_PARAMS];   /* placeholder slots (point at runtime copies) */
    /* run-time state */
    atomic_int abort;
    atomic_int timed_out;
    atomic_uint started;
    pthread_mutex_t lock;        /* runners, fault record */
    krunner_t *runners;
    bool faulted;
    uint32_t fblock;
    aclError fcode;
    char fmsg[SIM_MSG_MAX];
    uint64_t deadline;
    struct klaunch *wd_next;
    kcanary_t *canaries;
    uint32_t ncanaries;
    /* blocks waiting for one another (SyncAll, GroupBarrier; "Blocks that wait" below) */
    atomic_uint claim;           /* the next block to run: pool calls and helper threads claim from it */
    pthread_mutex_t bar_lock;    /* the fields below */
    pthread_cond_t bar_cv;
    uint32_t bar_waiting;        /* blocks inside kwait (some may have been released and not woken yet) */
    struct kready *polls;        /* the wait_until waiters (on their stacks) */
    uint32_t bar_done;           /* blocks that ended */
    uint32_t bar_arrived;        /* at the current SyncAll */
    uint64_t bar_gen;            /* SyncAll barriers passed */
    pthread_t *helpers;          /* threads started for blocks while others waited (joined by run_kernel) */
    uint32_t nhelpers;
} klaunch_t;

static int klaunch_timed_out(const struct klaunch *L) { return L && atomic_load(&L->timed_out); }

static aclError kcode(const klaunch_t *L, int what)
{
    bool vec = L->engine == KENG_AIV || L->f->bin->magic == ACL_RT_BINARY_MAGIC_ELF_VECTOR_CORE;
    switch (what) {
    case KF_TRAP: return vec ? ACL_ERROR_RT_VECTOR_CORE_TRAP_EXCEPTION : ACL_ERROR_RT_AICORE_TRAP_EXCEPTION;
    case KF_TIMEOUT: return vec ? ACL_ERROR_RT_VECTOR_CORE_TIMEOUT : ACL_ERROR_RT_AICORE_TIMEOUT;
    case KF_READ_OVERFLOW:
        return vec ? ACL_ERROR_RT_VECTOR_CORE_TRAP_READ_OVERFLOW : ACL_ERROR_RT_AICORE_TRAP_READ_OVERFLOW;
    case KF_WRITE_OVERFLOW:
        return vec ? ACL_ERROR_RT_VECTOR_CORE_TRAP_WRITE_OVERFLOW : ACL_ERROR_RT_AICORE_TRAP_WRITE_OVERFLOW;
    default: return vec ? ACL_ERROR_RT_VECTOR_CORE_EXCEPTION : ACL_ERROR_RT_AICORE_EXCEPTION;
    }
}

static inline size_t round64(size_t v) { return (v + 63) & ~(size_t)63; }

/* the live or freed allocation whose end [lo+size, lo+round64(size) + page) contains a (the
 * alignment slack and, in memcheck mode, the guard page after it) */
static bool alloc_before(uintptr_t a, sim_mem_info_t *mi)
{
    long ps = sysconf(_SC_PAGESIZE);
    size_t page = ps > 0 ? (size_t)ps : 4096;
    uintptr_t probes[3] = {a & ~(uintptr_t)63, (a - 1) & ~(uintptr_t)63, (a & ~(uintptr_t)(page - 1)) - 64};
    for (int i = 0; i < 3; i++) {
        if (probes[i] < 4096 || probes[i] > a)
            continue;
        sim_mem_lookup_info((void *)probes[i], mi);
        if (mi->state == SIM_MEM_NONE)
            continue;
        uintptr_t end = mi->lo + mi->size, lim = mi->lo + round64(mi->size) + page;
        if (a >= end && a < lim)
            return true;
    }
    return false;
}

static const char *mem_kind(int state)
{
    return (state == SIM_MEM_DEVICE || state == SIM_MEM_FREED_DEVICE) ? "device" : "aclrtMallocHost";
}

/* ------------------------------------------------------------------ services to kernels (canna_sim_host) */

static const char *khost_kernel_name(void)
{
    pthread_once(&g_kkey_once, kkey_init);
    kthread_t *kt = pthread_getspecific(g_kkey);
    return kt && kt->launch ? kt->launch->f->k->name : "";
}

/* the calling AI-core thread's Unified Buffer (one for every kernel binary; freed with the thread) */
static void *khost_ub(void)
{
    kthread_t *kt = kthread_get();
    if (!kt)
        return NULL;
    if (!kt->ub) {
        size_t n = (size_t)g_cfg.profile->ub;
        void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED)
            return NULL;
        kt->ub = p;
        kt->ub_size = n;
    }
    return kt->ub;
}

static int khost_gm_check(const void *p, size_t n, char *why, size_t why_size)
{
    if (n == 0)
        return 0;
    uintptr_t a = (uintptr_t)p;
    sim_mem_info_t mi;
    sim_mem_lookup_info(p, &mi);
    if (mi.state == SIM_MEM_FREED_DEVICE || mi.state == SIM_MEM_FREED_HOST) {
        snprintf(why, why_size, "use after free: %p lies in the %s allocation at %p (%zu bytes), which was freed", p,
                 mem_kind(mi.state), (void *)mi.lo, mi.size);
        return 1;
    }
    if (mi.state == SIM_MEM_DEVICE || mi.state == SIM_MEM_HOST) {
        if (a + n > mi.lo + mi.size) {
            snprintf(why, why_size, "out of bounds: [%p, +%zu bytes) ends %zu bytes past the end of the %s allocation "
                     "at %p (%zu bytes)", p, n, (size_t)(a + n - (mi.lo + mi.size)), mem_kind(mi.state),
                     (void *)mi.lo, mi.size);
            return 1;
        }
        return 0;
    }
    if (alloc_before(a, &mi)) {
        snprintf(why, why_size, "out of bounds: %p is %zu bytes past the end of the %s allocation at %p (%zu bytes)", p,
                 (size_t)(a - (mi.lo + mi.size)), mem_kind(mi.state), (void *)mi.lo, mi.size);
        return 1;
    }
    return 0;   /* memory the simulator does not track */
}

/* ------------------------------------------------------------------ blocks that wait (SyncAll, GroupBarrier)
 *
 * On a device the blocks of a launch that synchronizes are all resident on their cores at once (the
 * runtime refuses more blocks than cores for SyncAll). Here blocks run on the pool's threads, fewer
 * than the blocks: a block that starts waiting while blocks of its launch have not started yet starts
 * a helper thread that runs them (claiming from L->claim, as the pool's calls do), so the blocks it
 * waits for get to run. A wait that can never end -- every other block has ended or waits too -- is
 * a fault of the block (a KernelError naming the kernel), never a hang; a launch being stopped
 * (another block's fault, a timeout) releases its waiters quietly. */

static aclError kblock_run(klaunch_t *L, uint32_t idx, uint32_t n);
static void kblock_ended(klaunch_t *L);

static void *khelper_main(void *arg)
{
    klaunch_t *L = arg;
    sim_busy_enter();
    for (;;) {
        uint32_t idx = atomic_fetch_add_explicit(&L->claim, 1, memory_order_relaxed);
        if (idx >= L->nblocks)
            break;
        (void)kblock_run(L, idx, L->nblocks);
        kblock_ended(L);
    }
    sim_busy_leave();
    return NULL;
}

/* caller holds L->bar_lock */
static void khelper_start_locked(klaunch_t *L)
{
    if (atomic_load_explicit(&L->claim, memory_order_relaxed) >= L->nblocks)
        return;
    if (!L->helpers && !(L->helpers = calloc(L->nblocks, sizeof *L->helpers)))
        return;
    if (L->nhelpers >= L->nblocks)
        return;
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);   /* as the runtime's threads: kthread_get unblocks the fault signals */
    if (pthread_create(&L->helpers[L->nhelpers], NULL, khelper_main, L) == 0)
        L->nhelpers++;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
}

static void khelpers_join(klaunch_t *L)
{
    for (;;) {
        pthread_mutex_lock(&L->bar_lock);
        uint32_t n = L->nhelpers;
        pthread_t *h = L->helpers;
        pthread_mutex_unlock(&L->bar_lock);
        if (!n)
            return;
        pthread_join(h[n - 1], NULL);   /* helpers only start while a block waits: none starts after the last */
        pthread_mutex_lock(&L->bar_lock);
        L->nhelpers--;
        pthread_mutex_unlock(&L->bar_lock);
    }
}

typedef struct kready {
    int (*ready)(void *);
    void *ctx;
    struct kready *next;
} kready_t;

/* whether no waiting block can ever go on (caller holds L->bar_lock): every block has started and
 * has ended, or waits at the current SyncAll (bar_arrived counts exactly those: the released ones
 * were subtracted when it opened), or waits in wait_until for a condition still false */
static bool kstuck_locked(klaunch_t *L)
{
    if (atomic_load_explicit(&L->claim, memory_order_relaxed) < L->nblocks)
        return false;
    uint32_t polls = 0;
    for (kready_t *k = L->polls; k; k = k->next) {
        if (k->ready(k->ctx))
            return false;
        polls++;
    }
    return L->bar_arrived + polls + L->bar_done >= L->nblocks;
}

static uint32_t kcores(const klaunch_t *L)
{
    return L->engine == KENG_AIC ? g_cfg.profile->ai_cores : g_cfg.profile->vector_cores;
}

/* wait (holding L->bar_lock) until done(L, ctx); 0, 1 (never: why filled) or 2 (stopping) */
static int kwait_locked(klaunch_t *L, kthread_t *kt, int (*done)(klaunch_t *, void *), void *ctx, char *why,
                        size_t why_size)
{
    L->bar_waiting++;
    khelper_start_locked(L);
    pthread_cond_broadcast(&L->bar_cv);   /* a waiter may now see every block waiting */
    int r = 0;
    kt->active = 0;   /* the timeout's interrupt must not leave the block inside pthread_cond_timedwait */
    while (!done(L, ctx)) {
        if (atomic_load(&L->abort) || atomic_load(&L->timed_out)) {
            r = 2;
            break;
        }
        if (kstuck_locked(L)) {
            snprintf(why, why_size, "every other block of the %u has ended (%u) or waits too (%u)", L->nblocks,
                     L->bar_done, L->nblocks - L->bar_done - 1);
            r = 1;
            break;
        }
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 1000000;   /* what `done` reads may change without a signal (global memory): poll */
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        pthread_cond_timedwait(&L->bar_cv, &L->bar_lock, &ts);
    }
    kt->active = 1;
    L->bar_waiting--;
    return r;
}

static int kbar_passed(klaunch_t *L, void *ctx)
{
    return L->bar_gen != *(uint64_t *)ctx;
}

static int khost_sync_all(uint32_t count, char *why, size_t why_size)
{
    kthread_t *kt = kthread_get();
    klaunch_t *L = kt ? kt->launch : NULL;
    if (!L) {
        snprintf(why, why_size, "called outside a kernel block");
        return 1;
    }
    if (count == 0 || count > L->nblocks) {
        snprintf(why, why_size, "%u blocks cannot synchronize in a launch of %u blocks", count, L->nblocks);
        return 1;
    }
    if (count > kcores(L)) {
        snprintf(why, why_size, "%u blocks cannot all be resident at once: the %s has %u %s cores (the device refuses "
                 "such a launch; launch at most %u blocks)", count, g_cfg.profile->name, kcores(L),
                 L->engine == KENG_AIC ? "AI" : "vector", kcores(L));
        return 1;
    }
    pthread_mutex_lock(&L->bar_lock);
    int r = 0;
    if (++L->bar_arrived >= count) {
        L->bar_arrived = 0;
        L->bar_gen++;
        pthread_cond_broadcast(&L->bar_cv);
    } else {
        uint64_t gen = L->bar_gen;
        r = kwait_locked(L, kt, kbar_passed, &gen, why, why_size);
        if (r == 1)
            L->bar_arrived--;
    }
    pthread_mutex_unlock(&L->bar_lock);
    if (r == 2)
        kt->quiet = 1;
    return r;
}


static int kready(klaunch_t *L, void *ctx)
{
    (void)L;
    kready_t *k = ctx;
    return k->ready(k->ctx);
}

static int khost_wait_until(int (*ready)(void *ctx), void *ctx, char *why, size_t why_size)
{
    kthread_t *kt = kthread_get();
    klaunch_t *L = kt ? kt->launch : NULL;
    if (!L || !ready) {
        snprintf(why, why_size, "called outside a kernel block");
        return 1;
    }
    if (ready(ctx))
        return 0;
    if (L->nblocks > kcores(L)) {
        snprintf(why, why_size, "the %u blocks of the launch cannot all be resident at once: the %s has %u %s cores "
                 "(launch at most %u blocks)", L->nblocks, g_cfg.profile->name, kcores(L),
                 L->engine == KENG_AIC ? "AI" : "vector", kcores(L));
        return 1;
    }
    kready_t k = {ready, ctx, NULL};
    pthread_mutex_lock(&L->bar_lock);
    k.next = L->polls;
    L->polls = &k;
    int r = kwait_locked(L, kt, kready, &k, why, why_size);
    for (kready_t **pp = &L->polls; *pp; pp = &(*pp)->next)
        if (*pp == &k) {
            *pp = k.next;
            break;
        }
    pthread_mutex_unlock(&L->bar_lock);
    if (r == 2)
        kt->quiet = 1;
    return r;
}

static canna_sim_host g_khost;
static pthread_once_t g_khost_once = PTHREAD_ONCE_INIT;

static void khost_init(void)   /* the configuration is loaded (binaries load after aclInit) and fixed */
{
    g_khost.version = CANNA_SIM_HOST_VERSION;
    g_khost.check = g_cfg.check != 0;
    g_khost.ub_bytes = g_cfg.profile->ub;
    g_khost.soc_name = g_cfg.profile->name;
    g_khost.kernel_name = khost_kernel_name;
    g_khost.gm_check = khost_gm_check;
    g_khost.ub = khost_ub;
    g_khost.sync_all = khost_sync_all;
    g_khost.wait_until = khost_wait_until;
}

/* a binary that exports canna_sim_host_ gets the simulator's services (sim_kernel_abi.h) */
static void khost_bind(void *dl)
{
    const canna_sim_host **slot = dlsym(dl, CANNA_SIM_HOST_SYMBOL);
    if (!slot)
        return;
    pthread_once(&g_khost_once, khost_init);
    *slot = &g_khost;
}

/* is [p] readable? (memcheck only: a foreign pointer in the unified model) */
static bool probe_readable(const void *p)
{
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    static int fds[2] = {-1, -1};
    bool ok = true;
    pthread_mutex_lock(&mu);
    if (fds[0] >= 0 || pipe2(fds, O_CLOEXEC | O_NONBLOCK) == 0) {
        ssize_t w = write(fds[1], p, 1);
        if (w == 1) {
            char c;
            if (read(fds[0], &c, 1) < 0) { /* drained: nothing to do */ }
        } else if (errno == EFAULT) {
            ok = false;
        }
    }
    pthread_mutex_unlock(&mu);
    return ok;
}

static const char *param_name(const canna_sim_param *p) { return (p->name && p->name[0]) ? p->name : "(unnamed)"; }

/* the pointer arguments of a launch: freed memory and memory of another device are always
 * errors; in the discrete model anything but device memory is; in memcheck mode pointers past
 * the end of an allocation and inaccessible addresses are too. Memcheck also records the device
 * allocations the kernel receives, whose alignment slack is checked after the kernel ran. */
static aclError check_ptr_args(const char *api, klaunch_t *L, bool record_canaries)
{
    const canna_sim_kernel *k = L->f->k;
    bool discrete = g_cfg.memory_model == ACLSIM_MEMORY_DISCRETE, check = g_cfg.check != 0;
    for (uint32_t i = 0; i < k->num_params; i++) {
        const canna_sim_param *p = &k->params[i];
        if (!(p->flags & CANNA_SIM_PARAM_POINTER) || L->is_ph[i])
            continue;
        void *ptr;
        memcpy(&ptr, L->args + p->offset, sizeof ptr);
        if (!ptr)
            continue;   /* a NULL pointer the kernel may not use; dereferencing it is a fault */
        sim_mem_info_t mi;
        sim_mem_lookup_info(ptr, &mi);
        const char *kn = k->name;
        switch (mi.state) {
        case SIM_MEM_FREED_DEVICE:
        case SIM_MEM_FREED_HOST:
            return sim_err(ACL_ERROR_RT_PARAM_INVALID,
                           "%s: kernel '%s' parameter %u ('%s'): pointer %p lies in freed memory (the %s allocation "
                           "at %p of %zu bytes was freed)",
                           api, kn, i, param_name(p), ptr, mem_kind(mi.state), (void *)mi.lo, mi.size);
        case SIM_MEM_DEVICE:
            if (mi.dev != L->dev && !sim_peer_enabled(mi.dev, L->dev))
                return sim_err(ACL_ERROR_RT_PARAM_INVALID,
                               "%s: kernel '%s' parameter %u ('%s'): pointer %p is memory of device %d but the kernel "
                               "runs on device %d (enable peer access first)",
                               api, kn, i, param_name(p), ptr, mi.dev, L->dev);
            if (check && record_canaries && L->canaries) {
                bool dup = false;
                for (uint32_t c = 0; c < L->ncanaries; c++)
                    dup = dup || L->canaries[c].lo == mi.lo;
                if (!dup)
                    L->canaries[L->ncanaries++] = (kcanary_t){mi.lo, mi.size, i};
            }
            break;
        case SIM_MEM_HOST:
            if (discrete)
                return sim_err(ACL_ERROR_RT_PARAM_INVALID,
                               "%s: kernel '%s' parameter %u ('%s'): pointer %p is aclrtMallocHost memory; in the "
                               "discrete memory model a kernel can only access device memory",
                               api, kn, i, param_name(p), ptr);
            break;
        default: {
            sim_mem_info_t near;
            if ((discrete || check) && alloc_before((uintptr_t)ptr, &near))
                return sim_err(ACL_ERROR_RT_PARAM_INVALID,
                               "%s: kernel '%s' parameter %u ('%s'): pointer %p is out of bounds: %zu bytes past the "
                               "end of the %s allocation at %p (%zu bytes)",
                               api, kn, i, param_name(p), ptr, (size_t)((uintptr_t)ptr - (near.lo + near.size)),
                               mem_kind(near.state), (void *)near.lo, near.size);
            if (discrete)
                return sim_err(ACL_ERROR_RT_PARAM_INVALID,
                               "%s: kernel '%s' parameter %u ('%s'): pointer %p is not device memory (in the discrete "
                               "memory model a kernel can only access device memory)",
                               api, kn, i, param_name(p), ptr);
            if (check && !probe_readable(ptr))
                return sim_err(ACL_ERROR_RT_PARAM_INVALID,
                               "%s: kernel '%s' parameter %u ('%s'): pointer %p is not accessible memory (a foreign "
                               "pointer: neither a device allocation nor mapped host memory)",
                               api, kn, i, param_name(p), ptr);
        }
        }
    }
    return ACL_SUCCESS;
}

/* memcheck: the alignment slack after each device allocation passed to the kernel still holds the
 * poison pattern (bytes FF 7F from the 64-byte aligned start); restores it after reporting */
static aclError check_canaries(klaunch_t *L)
{
    aclError rc = ACL_SUCCESS;
    for (uint32_t c = 0; c < L->ncanaries; c++) {
        kcanary_t *cn = &L->canaries[c];
        if (!sim_mem_still_live((void *)cn->lo, cn->size))
            continue;   /* freed meanwhile (by another stream): nothing to check */
        uint8_t *b = (uint8_t *)cn->lo;
        size_t first = SIZE_MAX, last = 0;
        for (size_t o = cn->size; o < round64(cn->size); o++) {
            uint8_t want = (o & 1) ? 0x7F : 0xFF;
            if (b[o] != want) {
                if (first == SIZE_MAX)
                    first = o;
                last = o;
                b[o] = want;
            }
        }
        if (first != SIZE_MAX && rc == ACL_SUCCESS) {
            const canna_sim_param *p = &L->f->k->params[cn->param];
            rc = sim_err(kcode(L, KF_WRITE_OVERFLOW),
                         "kernel '%s': out-of-bounds write through parameter %u ('%s') detected after the kernel ran "
                         "(memcheck): bytes %zu..%zu past the end of the device allocation at %p (%zu bytes) were "
                         "modified (inside its alignment slack, so no guard page caught the block that wrote them)",
                         L->f->k->name, cn->param, param_name(p), first - cn->size, last - cn->size, (void *)cn->lo,
                         cn->size);
        }
    }
    return rc;
}

/* ------------------------------------------------------------------ watchdog (kernel timeouts) */

static pthread_mutex_t g_wd_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_wd_cv;
static bool g_wd_started;
static klaunch_t *g_wd_list;

static void interrupt_runners(klaunch_t *L)
{
    if (!g_intr_sig)
        return;
    pthread_mutex_lock(&L->lock);
    for (krunner_t *r = L->runners; r; r = r->next)
        pthread_kill(r->th, g_intr_sig);
    pthread_mutex_unlock(&L->lock);
}

static void *watchdog_main(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&g_wd_lock);
    for (;;) {
        uint64_t now = sim_now_ns(), next = UINT64_MAX;
        for (klaunch_t *L = g_wd_list; L; L = L->wd_next) {
            if (now >= L->deadline) {
                if (!atomic_exchange(&L->timed_out, 1))
                    atomic_store(&L->abort, 1);
                interrupt_runners(L);   /* again every 50 ms until its blocks have left */
                if (now + 50000000ull < next)
                    next = now + 50000000ull;
            } else if (L->deadline < next) {
                next = L->deadline;
            }
        }
        if (next == UINT64_MAX) {
            pthread_cond_wait(&g_wd_cv, &g_wd_lock);
        } else {
            struct timespec ts = {(time_t)(next / 1000000000ull), (long)(next % 1000000000ull)};
            pthread_cond_timedwait(&g_wd_cv, &g_wd_lock, &ts);
        }
    }
    return NULL;
}

static void watchdog_add(klaunch_t *L)
{
    pthread_mutex_lock(&g_wd_lock);
    if (!g_wd_started) {
        sim_cond_init(&g_wd_cv);
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        sigset_t all, old;
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &old);
        pthread_t th;
        g_wd_started = pthread_create(&th, &attr, watchdog_main, NULL) == 0;
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        pthread_attr_destroy(&attr);
    }
    L->wd_next = g_wd_list;
    g_wd_list = L;
    pthread_cond_signal(&g_wd_cv);
    pthread_mutex_unlock(&g_wd_lock);
}

static void watchdog_remove(klaunch_t *L)
{
    pthread_mutex_lock(&g_wd_lock);
    for (klaunch_t **pp = &g_wd_list; *pp; pp = &(*pp)->wd_next)
        if (*pp == L) {
            *pp = L->wd_next;
            break;
        }
    pthread_mutex_unlock(&g_wd_lock);
}

/* ------------------------------------------------------------------ running a launch */

static const char *sig_name(int sig)
{
    switch (sig) {
    case SIGSEGV: return "SIGSEGV";
    case SIGBUS: return "SIGBUS";
    case SIGFPE: return "SIGFPE";
    case SIGILL: return "SIGILL";
    case SIGABRT: return "SIGABRT";
    default: return "signal";
    }
}

/* the message and code of a fault of block blk (normal context, after the siglongjmp) */
static void describe_fault(klaunch_t *L, uint32_t blk, const kthread_t *kt, char *out, size_t n, aclError *code)
{
    const char *kn = L->f->k->name;
    int sig = kt->sig;
    uintptr_t a = (uintptr_t)kt->addr;
    char where[200] = "";
    int what = KF_EXCEPTION;
    if (kt->pc) {
        Dl_info di;
        memset(&di, 0, sizeof di);
        if (dladdr(kt->pc, &di) && di.dli_sname && di.dli_saddr)
            snprintf(where, sizeof where, " (pc %s+0x%lx)", di.dli_sname,
                     (unsigned long)((uintptr_t)kt->pc - (uintptr_t)di.dli_saddr));
        else if (di.dli_fbase)
            snprintf(where, sizeof where, " (pc %p, offset 0x%lx in its module)", kt->pc,
                     (unsigned long)((uintptr_t)kt->pc - (uintptr_t)di.dli_fbase));
    }
    if (sig == SIGSEGV && kt->gp) {
        snprintf(out, n, "kernel '%s' block %u of %u: SIGSEGV, general protection fault (an access through a "
                 "non-canonical or otherwise invalid pointer; the address is not reported by the CPU)%s",
                 kn, blk, L->nblocks, where);
    } else if (sig == SIGSEGV || sig == SIGBUS) {
        const char *acc = kt->access == 2 ? "write" : kt->access == 1 ? "read" : "access";
        char mem[240];
        sim_mem_info_t mi;
        sim_mem_lookup_info((void *)a, &mi);
        if (mi.state == SIM_MEM_FREED_DEVICE || mi.state == SIM_MEM_FREED_HOST) {
            snprintf(mem, sizeof mem, "use after free: it lies in the %s allocation at %p (%zu bytes), which was freed",
                     mem_kind(mi.state), (void *)mi.lo, mi.size);
        } else if (mi.state == SIM_MEM_NONE && alloc_before(a, &mi)) {
            snprintf(mem, sizeof mem, "out of bounds: %zu bytes past the end of the %s allocation at %p (%zu bytes)",
                     (size_t)(a - (mi.lo + mi.size)), mem_kind(mi.state), (void *)mi.lo, mi.size);
            if (g_cfg.check && mi.state == SIM_MEM_DEVICE)
                what = kt->access == 1 ? KF_READ_OVERFLOW : KF_WRITE_OVERFLOW;
        } else if (a < 4096) {
            snprintf(mem, sizeof mem, "NULL pointer dereference");
        } else if (kt->sp && (a > (uintptr_t)kt->sp ? a - (uintptr_t)kt->sp : (uintptr_t)kt->sp - a) < 65536) {
            snprintf(mem, sizeof mem, "stack overflow (deep recursion or large local arrays in the kernel)");
        } else if (mi.state != SIM_MEM_NONE) {
            snprintf(mem, sizeof mem, "inside the %s allocation at %p (%zu bytes)", mem_kind(mi.state), (void *)mi.lo,
                     mi.size);
        } else {
            snprintf(mem, sizeof mem, "%s", kt->code == SEGV_ACCERR ? "no access to that address" : "address not mapped");
        }
        snprintf(out, n, "kernel '%s' block %u of %u: %s, invalid %s at %p: %s%s", kn, blk, L->nblocks, sig_name(sig),
                 acc, (void *)a, mem, where);
    } else if (sig == SIGFPE) {
        snprintf(out, n, "kernel '%s' block %u of %u: SIGFPE, %s%s", kn, blk, L->nblocks,
                 kt->code == FPE_INTDIV ? "integer division by zero"
                 : kt->code == FPE_INTOVF ? "integer overflow"
                                          : "arithmetic exception",
                 where);
    } else if (sig == SIGILL || sig == SIGABRT) {
        what = KF_TRAP;
        snprintf(out, n, "kernel '%s' block %u of %u: %s, %s%s", kn, blk, L->nblocks, sig_name(sig),
                 sig == SIGILL ? "illegal instruction (a trap, e.g. __builtin_trap)" : "abort() called (a failed assert?)",
                 where);
    } else {
        what = KF_TIMEOUT;
        snprintf(out, n, "kernel '%s' exceeded its timeout of %.3f s: block %u of %u was interrupted%s", kn,
                 (double)L->timeout_ns / 1e9, blk, L->nblocks, where);
    }
    *code = kcode(L, what);
}

static void record_fault(klaunch_t *L, uint32_t blk, aclError code, const char *msg)
{
    pthread_mutex_lock(&L->lock);
    if (!L->faulted || blk < L->fblock) {
        L->faulted = true;
        L->fblock = blk;
        L->fcode = code;
        snprintf(L->fmsg, sizeof L->fmsg, "%s", msg);
    }
    pthread_mutex_unlock(&L->lock);
    atomic_store(&L->abort, 1);
}

static void kblock_ended(klaunch_t *L)
{
    pthread_mutex_lock(&L->bar_lock);
    L->bar_done++;
    if (L->bar_waiting)
        pthread_cond_broadcast(&L->bar_cv);
    pthread_mutex_unlock(&L->bar_lock);
}

static aclError kblock_run(klaunch_t *L, uint32_t idx, uint32_t n);

/* one call of the pool per block: it runs the next unclaimed block (a helper thread may have run
 * the one of this call's index) */
static aclError kblock(uint32_t pidx, uint32_t n, void *arg)
{
    (void)pidx;
    klaunch_t *L = arg;
    uint32_t idx = atomic_fetch_add_explicit(&L->claim, 1, memory_order_relaxed);
    if (idx >= L->nblocks)
        return ACL_SUCCESS;
    aclError rc = kblock_run(L, idx, n);
    kblock_ended(L);
    return rc;
}

static aclError kblock_run(klaunch_t *L, uint32_t idx, uint32_t n)
{
    if (atomic_load_explicit(&L->abort, memory_order_relaxed))
        return ACL_SUCCESS;
    kthread_t *kt = kthread_get();
    if (!kt) {
        record_fault(L, idx, ACL_ERROR_RT_RESOURCE_ALLOC_FAIL, "out of host memory for a kernel thread");
        return ACL_ERROR_RT_RESOURCE_ALLOC_FAIL;
    }
    kt->quiet = 0;
    atomic_fetch_add_explicit(&L->started, 1, memory_order_relaxed);
    krunner_t me = {pthread_self(), NULL};
    bool timed = L->timeout_ns != 0;
    if (timed) {
        pthread_mutex_lock(&L->lock);
        me.next = L->runners;
        L->runners = &me;
        pthread_mutex_unlock(&L->lock);
    }
    kt->launch = L;
    char emsg[SIM_MSG_MAX - 160];
    volatile int erc = 0;
    if (sigsetjmp(kt->jb, 0) == 0) {
        kt->active = 1;
        atomic_signal_fence(memory_order_seq_cst);
        erc = L->f->k->entry(L->args, idx, n, emsg, sizeof emsg);
        atomic_signal_fence(memory_order_seq_cst);
        kt->active = 0;
    } else {
        erc = -1;   /* a signal left the block (kt->active is 0) */
    }
    if (timed) {
        pthread_mutex_lock(&L->lock);
        for (krunner_t **pp = &L->runners; *pp; pp = &(*pp)->next)
            if (*pp == &me) {
                *pp = me.next;
                break;
            }
        pthread_mutex_unlock(&L->lock);
    }
    kt->launch = NULL;
    if (erc == 0 || (erc != -1 && kt->quiet))   /* quiet: stopped in a wait because the launch is stopping */
        return ACL_SUCCESS;
    char msg[SIM_MSG_MAX - 96];
    aclError code;
    if (erc == -1) {
        describe_fault(L, idx, kt, msg, sizeof msg, &code);
    } else {
        emsg[sizeof emsg - 1] = '\0';
        snprintf(msg, sizeof msg, "kernel '%s' block %u of %u: %s", L->f->k->name, idx, n, emsg);
        code = kcode(L, KF_TRAP);
    }
    record_fault(L, idx, code, msg);
    return code;
}

static aclError run_kernel(sim_task_t *t, sim_stream_t *s)
{
    klaunch_t *L = t->u.user.arg;
    const canna_sim_kernel *k = L->f->k;
    static const char api[] = "aclrtLaunchKernel";
    if (L->dev_args) {
        if (!sim_mem_still_live(L->dev_args, L->args_size))
            return sim_err(ACL_ERROR_RT_PARAM_INVALID,
                           "%s: kernel '%s': the device argument block at %p was freed before the kernel ran", api,
                           k->name, L->dev_args);
        memcpy(L->args, L->dev_args, L->args_size);
        aclError rc = check_ptr_args(api, L, true);
        if (rc)
            return rc;
    } else if (g_cfg.check) {
        /* memory may have been freed since the launch was queued */
        aclError rc = check_ptr_args(api, L, false);
        if (rc)
            return rc;
    }
    uint64_t t0 = sim_now_ns();
    if (L->timeout_ns) {
        L->deadline = t0 + L->timeout_ns;
        watchdog_add(L);
    }
    atomic_store(&L->claim, 0);
    L->bar_waiting = L->bar_done = L->bar_arrived = 0;
    L->polls = NULL;
    L->bar_gen = 0;
    aclError rc = aclsimParallelFor(s->dev->id, L->nblocks, kblock, L);
    khelpers_join(L);
    if (L->timeout_ns)
        watchdog_remove(L);
    atomic_store_explicit(&L->f->last_ns, sim_now_ns() - t0, memory_order_relaxed);
    if (L->faulted)
        return sim_err(L->fcode, "%s", L->fmsg);
    if (atomic_load(&L->timed_out))   /* no block was caught running when the deadline passed */
        return sim_err(kcode(L, KF_TIMEOUT), "kernel '%s' exceeded its timeout of %.3f s (%u of %u blocks started)",
                       k->name, (double)L->timeout_ns / 1e9, atomic_load(&L->started), L->nblocks);
    if (rc != ACL_SUCCESS)
        return rc;
    if (g_cfg.check && L->ncanaries)
        return check_canaries(L);
    return ACL_SUCCESS;
}

static void release_kernel(sim_task_t *t)
{
    klaunch_t *L = t->u.user.arg;
    if (!L)
        return;
    sim_obj_unref(&L->f->obj);
    pthread_mutex_destroy(&L->lock);
    pthread_mutex_destroy(&L->bar_lock);
    pthread_cond_destroy(&L->bar_cv);
    free(L->helpers);
    free(L->canaries);
    free(L->args);
    free(L);
}

/* ------------------------------------------------------------------ binaries */

/* whether [off, off + len) lies inside a file of n bytes (no overflow) */
static bool elf_fits(uint64_t off, uint64_t len, size_t n)
{
    return off <= n && len <= n - off;
}

/* The header tables and every part of the file the loader maps must lie inside the data: dlopen()
 * mmaps the segments by their offsets, and touching a page past the end of the file is SIGBUS (a
 * truncated binary would kill the process inside dlopen). Section headers are checked too (they
 * sit at the end of the file: a truncation is found even when the segments still fit). */
static aclError check_elf_extents(const char *api, const unsigned char *h, size_t n, const char *what)
{
    Elf64_Ehdr e;
    memcpy(&e, h, sizeof e);
    const char *bad = NULL;
    char detail[160] = "";
    if (e.e_phnum == 0 || e.e_phentsize != sizeof(Elf64_Phdr) || e.e_phnum >= PN_XNUM)
        bad = "its program header table is malformed";
    else if (!elf_fits(e.e_phoff, (uint64_t)e.e_phnum * sizeof(Elf64_Phdr), n))
        bad = "its program header table extends past the end of the data";
    uint64_t load_end = 0;   /* end of the previous PT_LOAD in memory (they ascend, never overlap) */
    unsigned nload = 0;
    for (unsigned i = 0; !bad && i < e.e_phnum; i++) {
        Elf64_Phdr ph;
        memcpy(&ph, h + e.e_phoff + (uint64_t)i * sizeof ph, sizeof ph);
        if (ph.p_type == PT_LOAD) {
            uint64_t a = ph.p_align;
            if (ph.p_filesz > ph.p_memsz)
                bad = "a loadable segment is larger in the file than in memory";
            else if (ph.p_memsz > (1ull << 32) || ph.p_vaddr > (1ull << 40))
                bad = "a loadable segment has an absurd size or address";
            else if (a > 1 && ((a & (a - 1)) || (ph.p_offset % a) != (ph.p_vaddr % a)))
                bad = "a loadable segment is misaligned";
            else if (nload++ && ph.p_vaddr < load_end)
                bad = "the loadable segments overlap or are out of order";
            load_end = ph.p_vaddr + ph.p_memsz;
        }
        if (bad) {
            snprintf(detail, sizeof detail, " (segment %u)", i);
        } else if (ph.p_filesz && !elf_fits(ph.p_offset, ph.p_filesz, n)) {
            bad = "a segment extends past the end of the data";
            snprintf(detail, sizeof detail, " (segment %u: bytes %llu..%llu)", i, (unsigned long long)ph.p_offset,
                     (unsigned long long)(ph.p_offset + ph.p_filesz));
        }
    }
    if (!bad && nload == 0)
        bad = "it has no loadable segment";
    if (!bad && e.e_shoff) {
        if (e.e_shentsize != sizeof(Elf64_Shdr) || e.e_shnum == 0)
            bad = "its section header table is malformed";
        else if (!elf_fits(e.e_shoff, (uint64_t)e.e_shnum * sizeof(Elf64_Shdr), n))
            bad = "its section header table extends past the end of the data";
        for (unsigned i = 0; !bad && i < e.e_shnum; i++) {
            Elf64_Shdr sh;
            memcpy(&sh, h + e.e_shoff + (uint64_t)i * sizeof sh, sizeof sh);
            if (sh.sh_type != SHT_NOBITS && sh.sh_size && !elf_fits(sh.sh_offset, sh.sh_size, n)) {
                bad = "a section extends past the end of the data";
                snprintf(detail, sizeof detail, " (section %u: bytes %llu..%llu)", i, (unsigned long long)sh.sh_offset,
                         (unsigned long long)(sh.sh_offset + sh.sh_size));
            }
        }
    }
    if (bad)
        return sim_err(ACL_ERROR_PARSE_FILE,
                       "%s: %s is a damaged ELF shared object: %s%s; the data has %zu bytes (truncated? rebuild it)",
                       api, what, bad, detail, n);
    return ACL_SUCCESS;
}

static aclError check_elf(const char *api, const unsigned char *h, size_t n, const char *what)
{
    if (n < sizeof(Elf64_Ehdr) || memcmp(h, ELFMAG, SELFMAG) != 0)
        return sim_err(ACL_ERROR_PARSE_FILE,
                       "%s: %s is not a canna simulator kernel binary (not an ELF shared object; build one from source "
                       "with kernels.RawModule)",
                       api, what);
    const Elf64_Ehdr *e = (const Elf64_Ehdr *)h;
#if defined(__x86_64__)
    const int machine = EM_X86_64;
#elif defined(__aarch64__)
    const int machine = EM_AARCH64;
#else
    const int machine = -1;
#endif
    if (h[EI_CLASS] != ELFCLASS64 || (machine >= 0 && e->e_machine != machine))
        return sim_err(ACL_ERROR_PARSE_FILE,
                       "%s: %s is an ELF file for machine %d, not for this host: a device binary built by the Ascend "
                       "toolchain cannot run on the simulator (compile the kernel's source for it instead)",
                       api, what, (int)e->e_machine);
    if (e->e_type != ET_DYN)
        return sim_err(ACL_ERROR_PARSE_FILE,
                       "%s: %s is an ELF object of type %d, not a shared object (a canna simulator binary is one)", api,
                       what, (int)e->e_type);
    return check_elf_extents(api, h, n, what);
}

static aclError validate_table(const char *api, const char *what, const canna_sim_binary *info)
{
    if (info->magic != CANNA_SIM_BINARY_MAGIC || info->version != CANNA_SIM_BINARY_VERSION)
        return sim_err(ACL_ERROR_PARSE_FILE,
                       "%s: %s has a kernel table of an unsupported format (magic 0x%x version %u; this simulator "
                       "reads version %u): rebuild it",
                       api, what, info->magic, info->version, CANNA_SIM_BINARY_VERSION);
    if (info->num_kernels > 0 && !info->kernels)
        return sim_err(ACL_ERROR_PARSE_FILE, "%s: %s has a malformed kernel table", api, what);
    for (uint32_t i = 0; i < info->num_kernels; i++) {
        const canna_sim_kernel *k = &info->kernels[i];
        if (!k->name || !k->entry || k->num_params > CANNA_SIM_MAX_PARAMS || (k->num_params && !k->params) ||
            k->args_size > SIM_MAX_ARGS_BYTES)
            return sim_err(ACL_ERROR_PARSE_FILE, "%s: %s: kernel %u of its table is malformed", api, what, i);
        for (uint32_t j = 0; j < k->num_params; j++) {
            const canna_sim_param *p = &k->params[j];
            if (p->size == 0 || p->offset + (uint64_t)p->size > k->args_size ||
                ((p->flags & CANNA_SIM_PARAM_POINTER) && p->size != sizeof(void *)))
                return sim_err(ACL_ERROR_PARSE_FILE, "%s: %s: kernel '%s' parameter %u is malformed", api, what, k->name,
                               j);
        }
    }
    return ACL_SUCCESS;
}

static aclError parse_load_options(const char *api, const aclrtBinaryLoadOptions *o, uint32_t *magic)
{
    *magic = 0;
    if (!o)
        return ACL_SUCCESS;
    if (o->numOpt > 0 && !o->options)
        return sim_err(ACL_ERROR_INVALID_PARAM, "%s: options->options is NULL but numOpt is %zu", api, o->numOpt);
    if (o->numOpt > 64)
        return sim_err(ACL_ERROR_INVALID_PARAM, "%s: options->numOpt %zu is absurd", api, o->numOpt);
    for (size_t i = 0; i < o->numOpt; i++) {
        const aclrtBinaryLoadOption *op = &o->options[i];
        switch ((int)op->type) {
        case ACL_RT_BINARY_LOAD_OPT_LAZY_LOAD:
            if (op->value.isLazyLoad > 1)
                return sim_err(ACL_ERROR_INVALID_PARAM, "%s: option %zu: isLazyLoad must be 0 or 1 (got %u)", api, i,
                               op->value.isLazyLoad);
            break;
        case ACL_RT_BINARY_LOAD_OPT_MAGIC:
            if (op->value.magic != ACL_RT_BINARY_MAGIC_ELF_AICORE &&
                op->value.magic != ACL_RT_BINARY_MAGIC_ELF_VECTOR_CORE &&
                op->value.magic != ACL_RT_BINARY_MAGIC_ELF_CUBE_CORE)
                return sim_err(ACL_ERROR_INVALID_PARAM, "%s: option %zu: unknown magic 0x%x", api, i, op->value.magic);
            *magic = op->value.magic;
            break;
        case ACL_RT_BINARY_LOAD_OPT_CPU_KERNEL_MODE:
            return sim_err(ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
                           "%s: option %zu: AI CPU kernels (ACL_RT_BINARY_LOAD_OPT_CPU_KERNEL_MODE) are not simulated",
                           api, i);
        default:
            return sim_err(ACL_ERROR_INVALID_PARAM, "%s: option %zu: unknown option type %d", api, i, (int)op->type);
        }
    }
    return ACL_SUCCESS;
}

/* write the binary to a private in-memory file (memfd; else a uniquely named temporary file) and
 * dlopen it. Every load is a module of its own: dlopen() returns an already loaded module whose
 * path matches, so a path is never reused while its module is loaded (the memfd stays open until
 * the binary is freed), and a file loaded with aclrtBinaryLoadFromFile can be rebuilt in place. */
static aclError bin_load_bytes(const char *api, const void *data, size_t length, const char *display, uint32_t magic,
                               int32_t dev, aclrtBinHandle *out)
{
    static atomic_uint_fast64_t seq;
    char what[200];
    snprintf(what, sizeof what, "%s", display);
    aclError rc = check_elf(api, data, length, what);
    if (rc)
        return rc;
    handlers_ensure();
    char path[360];
    int fd = memfd_create("canna-kernel", MFD_CLOEXEC);
    bool tmpfile = false;
    if (fd >= 0) {
        /* by pid, not /proc/self: a debugger or profiler (another process) can open it too */
        snprintf(path, sizeof path, "/proc/%ld/fd/%d", (long)getpid(), fd);
    } else {
        const char *dir = getenv("TMPDIR");
        snprintf(path, sizeof path, "%.200s/canna-kernel-%ld-%llu-XXXXXX.so", (dir && *dir) ? dir : "/tmp",
                 (long)getpid(), (unsigned long long)atomic_fetch_add(&seq, 1));
        fd = mkostemps(path, 3, O_CLOEXEC);
        tmpfile = fd >= 0;
        if (fd < 0)
            return sim_err(ACL_ERROR_WRITE_FILE, "%s: cannot create a temporary file to load %s: %s", api, display,
                           strerror(errno));
    }
    const unsigned char *p = data;
    size_t left = length;
    while (left > 0) {
        ssize_t w = write(fd, p, left);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            int e = errno;
            close(fd);
            if (tmpfile)
                unlink(path);
            return sim_err(ACL_ERROR_WRITE_FILE, "%s: cannot write %s to a temporary file: %s", api, display,
                           strerror(e));
        }
        p += w;
        left -= (size_t)w;
    }
    dlerror();
    void *dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (tmpfile) {
        unlink(path);
        close(fd);
        fd = -1;
    }
    if (!dl) {
        const char *e = dlerror();
        if (fd >= 0)
            close(fd);
        return sim_err(ACL_ERROR_PARSE_FILE, "%s: cannot load %s: %.300s", api, display, e ? e : "dlopen failed");
    }
    const canna_sim_binary *info = dlsym(dl, CANNA_SIM_BINARY_SYMBOL);
    if (!info)
        rc = sim_err(ACL_ERROR_PARSE_FILE,
                     "%s: %s is a shared object without a '%s' kernel table: not a canna simulator kernel binary "
                     "(build it from source with kernels.RawModule)",
                     api, display, CANNA_SIM_BINARY_SYMBOL);
    else
        rc = validate_table(api, display, info);
    if (!rc)
        khost_bind(dl);
    sim_bin_t *b = NULL;
    sim_func_t **funcs = NULL;
    if (!rc) {
        b = calloc(1, sizeof *b);
        funcs = calloc(info->num_kernels ? info->num_kernels : 1, sizeof *funcs);
        if (!b || !funcs)
            rc = sim_err(ACL_ERROR_RT_RESOURCE_ALLOC_FAIL, "%s: out of host memory", api);
    }
    if (rc) {
        free(b);
        free(funcs);
        dlclose(dl);
        if (fd >= 0)
            close(fd);
        return rc;
    }
    sim_obj_init(&b->obj, SIM_KIND_BINARY, bin_free);
    b->dl = dl;
    b->fd = fd;
    b->info = info;
    b->dev = dev;
    b->magic = magic;
    b->funcs = funcs;
    pthread_mutex_init(&b->lock, NULL);
    sim_list_init(&b->args);
    snprintf(b->name, sizeof b->name, "%s", display);
    if (!sim_reg_add(&b->obj)) {
        sim_obj_unref(&b->obj);
        return sim_err(ACL_ERROR_RT_RESOURCE_ALLOC_FAIL, "%s: out of host memory", api);
    }
    *out = SIM_H(b);
    sim_obj_unref(&b->obj);   /* the registry keeps it */
    return ACL_SUCCESS;
}

static aclError current_device(const char *api, int32_t *dev)
{
    sim_ctx_t *c = NULL;
    aclError rc = sim_need_ctx(api, &c);
    if (rc)
        return rc;
    *dev = c->dev->id;
    sim_obj_unref(&c->obj);
    return ACL_SUCCESS;
}

SIM_API aclError aclrtBinaryLoadFromFile(const char *binPath, aclrtBinaryLoadOptions *options, aclrtBinHandle *binHandle)
{
    static const char api[] = "aclrtBinaryLoadFromFile";
    SIM_ENTER(api);
    SIM_NULL_CHECK(api, binPath);
    SIM_NULL_CHECK(api, binHandle);
    if (binPath[0] != '/')
        return sim_err(ACL_ERROR_INVALID_PARAM, "%s: binPath must be an absolute path (got '%.200s')", api, binPath);
    uint32_t magic;
    aclError rc = parse_load_options(api, options, &magic);
    if (rc)
        return rc;
    int32_t dev;
    if ((rc = current_device(api, &dev)))
        return rc;
    int fd = open(binPath, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        int e = fd < 0 ? errno : EISDIR;
        if (fd >= 0)
            close(fd);
        return sim_err(ACL_ERROR_INVALID_FILE, "%s: cannot open '%.300s': %s", api, binPath,
                       e == EISDIR ? "not a regular file" : strerror(e));
    }
    if (st.st_size <= 0 || (uint64_t)st.st_size > (1ull << 31)) {
        close(fd);
        return sim_err(ACL_ERROR_INVALID_FILE_SIZE, "%s: '%.300s' has an invalid size (%lld bytes)", api, binPath,
                       (long long)st.st_size);
    }
    size_t n = (size_t)st.st_size, got = 0;
    unsigned char *buf = malloc(n);
    while (buf && got < n) {
        ssize_t r = read(fd, buf + got, n - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    close(fd);
    if (!buf || got != n) {
        free(buf);
        return sim_err(buf ? ACL_ERROR_INVALID_FILE : ACL_ERROR_RT_RESOURCE_ALLOC_FAIL, "%s: cannot read '%.300s'", api,
                       binPath);
    }
    char display[320];
    snprintf(display, sizeof display, "'%.300s'", binPath);
    rc = bin_load_bytes(api, buf, n, display, magic, dev, binHandle);
    free(buf);
    return rc;
}

SIM_API aclError aclrtBinaryLoadFromData(const void *data, size_t length, const aclrtBinaryLoadOptions *options,
                                         aclrtBinHandle *binHandle)
{
    static const char api[] = "aclrtBinaryLoadFromData";
    SIM_ENTER(api);
    SIM_NULL_CHECK(api, data);
    SIM_NULL_CHECK(api, binHandle);
    if (length == 0)
        return sim_err(ACL_ERROR_INVALID_PARAM, "%s: length must be > 0", api);
    uint32_t magic;
    aclError rc = parse_load_options(api, options, &magic);
    if (rc)
        return rc;
    int32_t dev;
    if ((rc = current_device(api, &dev)))
        return rc;
    return bin_load_bytes(api, data, length, "the data", magic, dev, binHandle);
}

SIM_API aclError aclrtBinaryUnLoad(aclrtBinHandle binHandle)
{
    static const char api[] = "aclrtBinaryUnLoad";
    SIM_ENTER(api);
    sim_obj_t *o;
    aclError rc = get_obj(binHandle, SIM_KIND_BINARY, api, "binary handle", &o);
    if (rc)
        return rc;
    sim_bin_t *b = (sim_bin_t *)o;
    pthread_mutex_lock(&b->lock);
    if (b->unloaded) {
        pthread_mutex_unlock(&b->lock);
        sim_obj_unref(o);
        return sim_err(ACL_ERROR_RT_INVALID_HANDLE, "%s: binary %p was already unloaded", api, binHandle);
    }
    b->unloaded = true;
    for (uint32_t i = 0; i < b->info->num_kernels; i++) {
        sim_func_t *f = b->funcs[i];
        b->funcs[i] = NULL;
        if (f) {
            if (sim_reg_remove(&f->obj))
                sim_obj_unref(&f->obj);
            sim_obj_unref(&f->obj);   /* the binary's owner reference */
        }
    }
    while (b->args.next != &b->args) {
        sim_kargs_t *a = SIM_CONTAINER(b->args.next, sim_kargs_t, link);
        sim_list_del(&a->link);
        if (sim_reg_remove(&a->obj))
            sim_obj_unref(&a->obj);
        sim_obj_unref(&a->obj);
    }
    pthread_mutex_unlock(&b->lock);
    if (sim_reg_remove(&b->obj))
        sim_obj_unref(&b->obj);
    sim_obj_unref(o);   /* queued launches keep the module mapped until they have run */
    return ACL_SUCCESS;
}

SIM_API aclError aclrtBinaryGetFunction(const aclrtBinHandle binHandle, const char *kernelName,
                                        aclrtFuncHandle *funcHandle)
{
    static const char api[] = "aclrtBinaryGetFunction";
    SIM_ENTER(api);
    SIM_NULL_CHECK(api, kernelName);
    SIM_NULL_CHECK(api, funcHandle);
    sim_obj_t *o;
    aclError rc = get_obj(binHandle, SIM_KIND_BINARY, api, "binary handle", &o);
    if (rc)
        return rc;
    sim_bin_t *b = (sim_bin_t *)o;
    const canna_sim_binary *info = b->info;
    uint32_t idx = UINT32_MAX;
    for (uint32_t i = 0; i < info->num_kernels; i++)
        if (strcmp(info->kernels[i].name, kernelName) == 0) {
            idx = i;
            break;
        }
    if (idx == UINT32_MAX) {
        char names[200] = "";
        size_t len = 0;
        for (uint32_t i = 0; i < info->num_kernels && len + 1 < sizeof names; i++) {
            int w = snprintf(names + len, sizeof names - len, "%s%s", i ? ", " : "", info->kernels[i].name);
            if (w < 0)
                break;
            len += (size_t)w;
        }
        sim_obj_unref(o);
        return sim_err(ACL_ERROR_RT_SYMBOL_NOT_FOUND, "%s: no kernel named '%.100s' in binary %s (it has: %s)", api,
                       kernelName, b->name, info->num_kernels ? names : "no kernels");
    }
    pthread_mutex_lock(&b->lock);
    if (b->unloaded) {
        pthread_mutex_unlock(&b->lock);
        sim_obj_unref(o);
        return sim_err(ACL_ERROR_RT_INVALID_HANDLE, "%s: binary %p was unloaded", api, binHandle);
    }
    sim_func_t *f = b->funcs[idx];
    if (!f) {
        f = calloc(1, sizeof *f);
        if (f) {
            sim_obj_init(&f->obj, SIM_KIND_FUNC, func_free);
            sim_obj_ref(&b->obj);
            f->bin = b;
            f->k = &info->kernels[idx];
            atomic_init(&f->last_ns, UINT64_MAX);
            for (uint32_t j = 0; j < f->k->num_params; j++) {
                uint32_t end = f->k->params[j].offset + f->k->params[j].size;
                if (end > f->args_end)
                    f->args_end = end;
            }
            if (!sim_reg_add(&f->obj)) {
                sim_obj_unref(&f->obj);
                f = NULL;
            } else {
                b->funcs[idx] = f;   /* the owner reference */
            }
        }
    }
    if (f)
        *funcHandle = SIM_H(f);
    pthread_mutex_unlock(&b->lock);
    sim_obj_unref(o);
    return f ? ACL_SUCCESS : sim_err(ACL_ERROR_RT_RESOURCE_ALLOC_FAIL, "%s: out of host memory", api);
}

static aclError get_func(const void *h, const char *api, sim_func_t **out)
{
    sim_obj_t *o;
    aclError rc = get_obj(h, SIM_KIND_FUNC, api, "function handle", &o);
    if (rc == ACL_SUCCESS)
        *out = (sim_func_t *)o;
    return rc;
}

SIM_API aclError aclrtGetFunctionName(aclrtFuncHandle funcHandle, uint32_t maxLen, char *name)
{
    static const char api[] = "aclrtGetFunctionName";
    SIM_ENTER(api);
    SIM_NULL_CHECK(api, name);
    sim_func_t *f;
    aclError rc = get_func(funcHandle, api, &f);
    if (rc)
        return rc;
    size_t len = strlen(f->k->name);
    if (len + 1 > maxLen)
        rc = sim_err(ACL_ERROR_INVALID_PARAM, "%s: maxLen %u is too small for the name (%zu bytes with its NUL)", api,
                     maxLen, len + 1);
    else
        memcpy(name, f->k->name, len + 1);
    sim_obj_unref(&f->obj);
    return rc;
}

SIM_API aclError aclrtFunctionGetParamCount(const void *func, size_t *paramCount)
{
    static const char api[] = "aclrtFunctionGetParamCount";
    SIM_ENTER(api);
    SIM_NULL_CHECK(api, paramCount);
    sim_func_t *f;
    aclError rc = get_func(func, api, &f);
    if (rc)
        return rc;
    *paramCount = f->k->num_params;
    sim_obj_unref(&f->obj);
    return ACL_SUCCESS;
}

static aclError param_of(const void *func, size_t idx, const char *api, sim_func_t **fout, const canna_sim_param **p)
{
    sim_func_t *f;
    aclError rc = get_func(func, api, &f);
    if (rc)
        return rc;
    if (idx >= f->k->num_params) {
        rc = sim_err(ACL_ERROR_INVALID_PARAM, "%s: paramIndex %zu is out of range: kernel '%s' has %u parameter%s", api,
                     idx, f->k->name, f->k->num_params, f->k->num_params == 1 ? "" : "s");
        sim_obj_unref(&f->obj);
        return rc;
    }
    *fout = f;
    *p = &f->k->params[idx];
    return ACL_SUCCESS;
}

SIM_API aclError aclrtFunctionGetParamInfo(const void *func, size_t paramIndex, size_t *paramOffset, size_t *paramSize)
{
    static const char api[] = "aclrtFunctionGetParamInfo";
    SIM_ENTER(api);
    SIM_NULL_CHECK(api, paramOffset);
    SIM_NULL_CHECK(api, paramSize);
    sim_func_t *f;
    const canna_sim_param *p;
    aclError rc = param_of(func, paramIndex, api, &f, &p);
    if (rc)
        return rc;
    *paramOffset = p->offset;
    *paramSize = p->size;
    sim_obj_unref(&f->obj);
    return ACL_SUCCESS;
}

SIM_API aclError aclsimFunctionGetParamDesc(aclrtFuncHandle funcHandle, size_t paramIndex, aclsimKernelParamDesc *desc)
{
    static const char api[] = "aclsimFunctionGetParamDesc";
    SIM_ENTER(api);
    SIM_NULL_CHECK(api, desc);
    sim_func_t *f;
    const canna_sim_param *p;
    aclError rc = param_of(funcHandle, paramIndex, api, &f, &p);
    if (rc)
        return rc;
    memset(desc, 0, sizeof *desc);
    snprintf(desc->name, sizeof desc->name, "%s", p->name ? p->name : "");
    snprintf(desc->type, sizeof desc->type, "%s", p->type ? p->type : "");
    desc->offset = p->offset;
    desc->size = p->size;
    desc->isPointer = (p->flags & CANNA_SIM_PARAM_POINTER) ? 1 : 0;
    desc->isConst = (p->flags & CANNA_SIM_PARAM_CONST) ? 1 : 0;
    sim_obj_unref(&f->obj);
    return ACL_SUCCESS;
}

/* ------------------------------------------------------------------ the argument builder */

static aclError get_kargs(const void *h, const char *api, sim_kargs_t **out)
{
    sim_obj_t *o;
    aclError rc = get_obj(h, SIM_KIND_ARGS, api, "args handle", &o);
    if (rc == ACL_SUCCESS)
        *out = (sim_kargs_t *)o;
    return rc;
}

static aclrtParamHandle param_handle(const sim_kargs_t *a, uint32_t idx)
{
    return (aclrtParamHandle)(uintptr_t)(SIM_PARAM_HANDLE_TAG | ((a->seq & 0xFFFFFFFFFFull) << 8) | idx);
}

static aclError param_index(const sim_kargs_t *a, aclrtParamHandle ph, const char *api, uint32_t *idx)
{
    uint64_t v = (uint64_t)(uintptr_t)ph;
    uint32_t i = (uint32_t)(v & 0xFF);
    if ((v & 0xFF00000000000000ull) != SIM_PARAM_HANDLE_TAG || ((v >> 8) & 0xFFFFFFFFFFull) != (a->seq & 0xFFFFFFFFFFull) ||
        i >= a->nappended)
        return sim_err(ACL_ERROR_INVALID_PARAM, "%s: paramHandle %p does not belong to this args handle", api, ph);
    *idx = i;
    return ACL_SUCCESS;
}

SIM_API aclError aclrtKernelArgsInit(aclrtFuncHandle funcHandle, aclrtArgsHandle *argsHandle)
{
    static const char api[] = "aclrtKernelArgsInit";
    SIM_ENTER(api);
    SIM_NULL_CHECK(api, argsHandle);
    sim_func_t *f;
    aclError rc = get_func(funcHandle, api, &f);
    if (rc)
        return rc;
    sim_kargs_t *a = calloc(1, sizeof *a);
    uint8_t *block = calloc(1, f->k->args_size ? f->k->args_size : 1);
    if (!a || !block) {
        free(a);
        free(block);
        sim_obj_unref(&f->obj);
        return sim_err(ACL_ERROR_RT_RESOURCE_ALLOC_FAIL, "%s: out of host memory", api);
    }
    sim_obj_init(&a->obj, SIM_KIND_ARGS, kargs_free);
    a->f = f;   /* takes the reference */
    a->block = block;
    a->seq = atomic_fetch_add(&g_args_seq, 1) + 1;
    sim_list_init(&a->link);
    sim_bin_t *b = f->bin;
    pthread_mutex_lock(&b->lock);
    bool ok = !b->unloaded && sim_reg_add(&a->obj);
    if (ok)
        sim_list_add(&b->args, &a->link);   /* the binary owns it: freed at aclrtBinaryUnLoad */
    pthread_mutex_unlock(&b->lock);
    if (!ok) {
        sim_obj_unref(&a->obj);
        return sim_err(ACL_ERROR_RT_INVALID_HANDLE, "%s: the function's binary was unloaded", api);
    }
    *argsHandle = SIM_H(a);
    return ACL_SUCCESS;
}

static aclError append_slot(sim_kargs_t *a, const char *api, size_t paramSize, bool ph, uint32_t *idx)
{
    const canna_sim_kernel *k = a->f->k;
    if (a->nappended >= k->num_params)
        return sim_err(ACL_ERROR_INVALID_PARAM, "%s: kernel '%s' has only %u parameter%s, all appended", api, k->name,
                       k->num_params, k->num_params == 1 ? "" : "s");
    uint32_t i = a->nappended;
    const canna_sim_param *p = &k->params[i];
    if (ph && !(p->flags & CANNA_SIM_PARAM_POINTER))
        return sim_err(ACL_ERROR_INVALID_PARAM, "%s: kernel '%s' parameter %u ('%s') is a %s, not a pointer: it cannot be "
                       "a placeholder", api, k->name, i, param_name(p), p->type);
    if (!ph && paramSize != p->size)
        return sim_err(ACL_ERROR_INVALID_PARAM, "%s: kernel '%s' parameter %u ('%s', %s) is %u bytes, got paramSize %zu",
                       api, k->name, i, param_name(p), p->type, p->size, paramSize);
    *idx = i;
    return ACL_SUCCESS;
}

/* aclrtKernelArgsAppend (param != NULL: copies paramSize bytes) and ..AppendPlaceHolder (param NULL) */
static aclError args_append(const char *api, aclrtArgsHandle argsHandle, const void *param, size_t paramSize,
                            aclrtParamHandle *paramHandle)
{
    sim_kargs_t *a;
    aclError rc = get_kargs(argsHandle, api, &a);
    if (rc)
        return rc;
    uint32_t i;
    pthread_mutex_lock(&a->f->bin->lock);
    rc = append_slot(a, api, paramSize, !param, &i);
    if (!rc) {
        if (param)
            memcpy(a->block + a->f->k->params[i].offset, param, paramSize);
        else
            a->is_ph[i] = true;
        a->nappended++;
        a->finalized = false;
        *paramHandle = param_handle(a, i);
    }
    pthread_mutex_unlock(&a->f->bin->lock);
    sim_obj_unref(&a->obj);
    return rc;
}

SIM_API aclError aclrtKernelArgsAppend(aclrtArgsHandle argsHandle, void *param, size_t paramSize,
                                       aclrtParamHandle *paramHandle)
{
    static const char api[] = "aclrtKernelArgsAppend";
    SIM_ENTER(api);
    SIM_NULL_CHECK(api, param);
    SIM_NULL_CHECK(api, paramHandle);
    return args_append(api, argsHandle, param, paramSize, paramHandle);
}

SIM_API aclError aclrtKernelArgsAppendPlaceHolder(aclrtArgsHandle argsHandle, aclrtParamHandle *paramHandle)
{
    static const char api[] = "aclrtKernelArgsAppendPlaceHolder";
    SIM_ENTER(api);
    SIM_NULL_CHECK(api, paramHandle);
    return args_append(api, argsHandle, NULL, sizeof(void *), paramHandle);
}

SIM_API aclError aclrtKernelArgsGetPlaceHolderBuffer(aclrtArgsHandle argsHandle, aclrtParamHandle paramHandle,
                                                     size_t dataSize, void **bufferAddr)
{
    static const char api[] = "aclrtKernelArgsGetPlaceHolderBuffer";
    SIM_ENTER(api);
    SIM_NULL_CHECK(api, bufferAddr);
    if (dataSize == 0 || dataSize > SIM_MAX_ARGS_BYTES)
        return sim_err(ACL_ERROR_INVALID_PARAM, "%s: dataSize must be in 1..%u bytes (got %zu)", api, SIM_MAX_ARGS_BYTES,
                       dataSize);
    sim_kargs_t *a;
    aclError rc = get_kargs(argsHandle, api, &a);
    if (rc)
        return rc;
    uint32_t i;
    pthread_mutex_lock(&a->f->bin->lock);
    rc = param_index(a, paramHandle, api, &i);
    if (!rc && !a->is_ph[i])
        rc = sim_err(ACL_ERROR_INVALID_PARAM, "%s: parameter %u was appended with aclrtKernelArgsAppend, not as a "
                     "placeholder", api, i);
    if (!rc) {
        if (a->ph_size[i] != dataSize) {
            void *nb = calloc(1, dataSize);
            if (!nb) {
                rc = sim_err(ACL_ERROR_RT_RESOURCE_ALLOC_FAIL, "%s: out of host memory (%zu bytes)", api, dataSize);
            } else {
                free(a->ph_buf[i]);
                a->ph_buf[i] = nb;
                a->ph_size[i] = dataSize;
            }
        }
        if (!rc) {
            *bufferAddr = a->ph_buf[i];
            a->finalized = false;
        }
    }
    pthread_mutex_unlock(&a->f->bin->lock);
    sim_obj_unref(&a->obj);
    return rc;
}

SIM_API aclError aclrtKernelArgsParaUpdate(aclrtArgsHandle argsHandle, aclrtParamHandle paramHandle, void *param,
                                           size_t paramSize)
{
    static const char api[] = "aclrtKernelArgsParaUpdate";
    SIM_ENTER(api);
    SIM_NULL_CHECK(api, param);
    sim_kargs_t *a;
    aclError rc = get_kargs(argsHandle, api, &a);
    if (rc)
        return rc;
    uint32_t i;
    pthread_mutex_lock(&a->f->bin->lock);
    rc = param_index(a, paramHandle, api, &i);
    if (!rc) {
        const canna_sim_param *p = &a->f->k->params[i];
        if (a->is_ph[i]) {   /* a placeholder: the update is its data */
            if (paramSize == 0 || paramSize > a->ph_size[i])
                rc = sim_err(ACL_ERROR_INVALID_PARAM, "%s: placeholder parameter %u holds %zu bytes, got paramSize %zu",
                             api, i, a->ph_size[i], paramSize);
            else
                memcpy(a->ph_buf[i], param, paramSize);
        } else if (paramSize != p->size) {
            rc = sim_err(ACL_ERROR_INVALID_PARAM, "%s: kernel '%s' parameter %u ('%s', %s) is %u bytes, got paramSize %zu",
                         api, a->f->k->name, i, param_name(p), p->type, p->size, paramSize);
        } else {
            memcpy(a->block + p->offset, param, paramSize);
        }
        if (!rc)
            a->finalized = false;
    }
    pthread_mutex_unlock(&a->f->bin->lock);
    sim_obj_unref(&a->obj);
    return rc;
}

SIM_API aclError aclrtKernelArgsFinalize(aclrtArgsHandle argsHandle)
{
    static const char api[] = "aclrtKernelArgsFinalize";
    SIM_ENTER(api);
    sim_kargs_t *a;
    aclError rc = get_kargs(argsHandle, api, &a);
    if (rc)
        return rc;
    pthread_mutex_lock(&a->f->bin->lock);
    const canna_sim_kernel *k = a->f->k;
    if (a->nappended != k->num_params) {
        rc = sim_err(ACL_ERROR_INVALID_PARAM, "%s: kernel '%s' has %u parameter%s but %u were appended", api, k->name,
                     k->num_params, k->num_params == 1 ? "" : "s", a->nappended);
    } else {
        for (uint32_t i = 0; i < k->num_params && !rc; i++)
            if (a->is_ph[i] && !a->ph_buf[i])
                rc = sim_err(ACL_ERROR_INVALID_PARAM, "%s: placeholder parameter %u has no buffer (call "
                             "aclrtKernelArgsGetPlaceHolderBuffer)", api, i);
        if (!rc)
            a->finalized = true;
    }
    pthread_mutex_unlock(&a->f->bin->lock);
    sim_obj_unref(&a->obj);
    return rc;
}

/* ------------------------------------------------------------------ launch */

static aclError parse_cfg(const char *api, const aclrtLaunchKernelCfg *cfg, int *engine, uint64_t *timeout_ns)
{
    *engine = KENG_DEFAULT;
    *timeout_ns = g_cfg.kernel_timeout_ns;   /* CANNA_SIM_KERNEL_TIMEOUT, read at aclInit */
    if (!cfg)
        return ACL_SUCCESS;
    if (cfg->numAttrs > 0 && !cfg->attrs)
        return sim_err(ACL_ERROR_INVALID_PARAM, "%s: cfg->attrs is NULL but numAttrs is %zu", api, cfg->numAttrs);
    if (cfg->numAttrs > 64)
        return sim_err(ACL_ERROR_INVALID_PARAM, "%s: cfg->numAttrs %zu is absurd", api, cfg->numAttrs);
    bool has_s = false, has_us = false;
    for (size_t i = 0; i < cfg->numAttrs; i++) {
        const aclrtLaunchKernelAttr *at = &cfg->attrs[i];
        switch ((int)at->id) {
        case ACL_RT_LAUNCH_KERNEL_ATTR_SCHEM_MODE:
        case ACL_RT_LAUNCH_KERNEL_ATTR_DYN_UBUF_SIZE:
        case ACL_RT_LAUNCH_KERNEL_ATTR_BLOCKDIM_OFFSET:
        case ACL_RT_LAUNCH_KERNEL_ATTR_BLOCK_TASK_PREFETCH:
        case ACL_RT_LAUNCH_KERNEL_ATTR_DATA_DUMP:
            break;   /* accepted, no effect in the simulator */
        case ACL_RT_LAUNCH_KERNEL_ATTR_ENGINE_TYPE:
            if ((int)at->value.engineType == ACL_RT_ENGINE_TYPE_AIC)
                *engine = KENG_AIC;
            else if ((int)at->value.engineType == ACL_RT_ENGINE_TYPE_AIV)
                *engine = KENG_AIV;
            else
                return sim_err(ACL_ERROR_INVALID_PARAM, "%s: attribute %zu: unknown engine type %d", api, i,
                               (int)at->value.engineType);
            break;
        case ACL_RT_LAUNCH_KERNEL_ATTR_TIMEOUT:
            has_s = true;
            if (at->value.timeout)
                *timeout_ns = (uint64_t)at->value.timeout * 1000000000ull;
            break;
        case ACL_RT_LAUNCH_KERNEL_ATTR_TIMEOUT_US: {
            has_us = true;
            uint64_t us = ((uint64_t)at->value.timeoutUs.timeoutHigh << 32) | at->value.timeoutUs.timeoutLow;
            if (us)
                *timeout_ns = us > UINT64_MAX / 2000 ? UINT64_MAX / 2 : us * 1000ull;
            break;
        }
        default:
            return sim_err(ACL_ERROR_INVALID_PARAM, "%s: attribute %zu: unknown attribute id %d", api, i, (int)at->id);
        }
    }
    if (has_s && has_us)
        return sim_err(ACL_ERROR_INVALID_PARAM,
                       "%s: ACL_RT_LAUNCH_KERNEL_ATTR_TIMEOUT and ..._TIMEOUT_US cannot be given together", api);
    return ACL_SUCCESS;
}

typedef struct launch_src {
    const void *host_args;               /* WithHostArgs */
    size_t args_size;
    const aclrtPlaceHolderInfo *ph;
    size_t nph;
    const void *dev_args;                /* aclrtLaunchKernel / V2 */
    sim_kargs_t *kargs;                  /* WithConfig */
} launch_src_t;

static aclError launch_common(const char *api, aclrtFuncHandle funcHandle, uint32_t numBlocks, aclrtStream stream,
                              const aclrtLaunchKernelCfg *cfg, const launch_src_t *src)
{
    handlers_ensure();
    sim_func_t *f;
    aclError rc = get_func(funcHandle, api, &f);
    if (rc)
        return rc;
    const canna_sim_kernel *k = f->k;
    sim_stream_t *s = NULL;
    klaunch_t *L = NULL;
    int engine;
    uint64_t timeout_ns;
    if (numBlocks == 0 || numBlocks > SIM_MAX_BLOCKS) {
        rc = sim_err(ACL_ERROR_INVALID_PARAM, "%s: kernel '%s': numBlocks must be in 1..%u (got %u)", api, k->name,
                     SIM_MAX_BLOCKS, numBlocks);
        goto fail;
    }
    if ((rc = parse_cfg(api, cfg, &engine, &timeout_ns)))
        goto fail;
    if ((rc = sim_stream_resolve(stream, api, &s)))
        goto fail;
    if (s->dev->id != f->bin->dev) {
        rc = sim_err(ACL_ERROR_RT_STREAM_CONTEXT,
                     "%s: kernel '%s' was loaded on device %d but the stream belongs to device %d (load the binary on "
                     "each device)",
                     api, k->name, f->bin->dev, s->dev->id);
        goto fail;
    }
    L = calloc(1, sizeof *L);
    if (!L)
        goto oom;
    L->f = f;
    L->nblocks = numBlocks;
    L->engine = engine;
    L->dev = s->dev->id;
    L->timeout_ns = timeout_ns;
    pthread_mutex_init(&L->lock, NULL);
    pthread_mutex_init(&L->bar_lock, NULL);
    pthread_cond_init(&L->bar_cv, NULL);
    if (g_cfg.check && k->num_params) {
        L->canaries = calloc(k->num_params, sizeof *L->canaries);
        if (!L->canaries)
            goto oom;
    }
    if (src->dev_args) {
        int where;
        int32_t adev;
        if (src->args_size < f->args_end) {
            rc = sim_err(ACL_ERROR_INVALID_PARAM, "%s: kernel '%s': argsSize %zu is smaller than its argument block (%u "
                         "bytes)", api, k->name, src->args_size, f->args_end);
            goto fail;
        }
        if ((rc = sim_mem_classify(src->dev_args, src->args_size, api, "argsData", &where, &adev)))
            goto fail;
        if (where != SIM_PTR_DEVICE) {
            rc = sim_err(ACL_ERROR_RT_PARAM_INVALID, "%s: argsData %p is not device memory (pass host arguments with "
                         "aclrtLaunchKernelWithHostArgs)", api, src->dev_args);
            goto fail;
        }
        L->dev_args = src->dev_args;
        L->args_size = src->args_size;
        if (!(L->args = malloc(src->args_size)))
            goto oom;
    } else if (src->kargs) {
        sim_kargs_t *a = src->kargs;
        pthread_mutex_lock(&f->bin->lock);
        bool fin = a->finalized;
        size_t total = k->args_size;
        for (uint32_t i = 0; i < k->num_params; i++)
            if (a->is_ph[i])
                total = (total + 7) / 8 * 8 + a->ph_size[i];
        L->args = fin ? malloc(total ? total : 1) : NULL;
        if (L->args) {
            memcpy(L->args, a->block, k->args_size);
            size_t off = k->args_size;
            for (uint32_t i = 0; i < k->num_params; i++) {
                if (!a->is_ph[i])
                    continue;
                off = (off + 7) / 8 * 8;
                memcpy(L->args + off, a->ph_buf[i], a->ph_size[i]);
                void *dp = L->args + off;
                memcpy(L->args + k->params[i].offset, &dp, sizeof dp);
                L->is_ph[i] = true;
                off += a->ph_size[i];
            }
            L->args_size = total;
        }
        pthread_mutex_unlock(&f->bin->lock);
        if (!fin) {
            rc = sim_err(ACL_ERROR_INVALID_PARAM, "%s: the args handle of kernel '%s' is not finalized (call "
                         "aclrtKernelArgsFinalize after appending or updating parameters)", api, k->name);
            goto fail;
        }
        if (!L->args)
            goto oom;
    } else {
        if (src->args_size < f->args_end || (src->args_size && !src->host_args)) {
            rc = sim_err(ACL_ERROR_INVALID_PARAM,
                         "%s: kernel '%s': hostArgs holds %zu bytes but its argument block needs %u (%u parameter%s)",
                         api, k->name, src->host_args ? src->args_size : 0, f->args_end, k->num_params,
                         k->num_params == 1 ? "" : "s");
            goto fail;
        }
        if (src->args_size > SIM_MAX_ARGS_BYTES) {
            rc = sim_err(ACL_ERROR_INVALID_PARAM, "%s: argsSize %zu is absurd", api, src->args_size);
            goto fail;
        }
        if (src->nph && !src->ph) {
            rc = sim_err(ACL_ERROR_INVALID_PARAM, "%s: placeHolderArray is NULL but placeHolderNum is %zu", api, src->nph);
            goto fail;
        }
        size_t total = src->args_size > k->args_size ? src->args_size : k->args_size;
        if (!(L->args = calloc(1, total ? total : 1)))
            goto oom;
        if (src->args_size)
            memcpy(L->args, src->host_args, src->args_size);   /* the caller may reuse hostArgs at once */
        L->args_size = total;
        for (size_t i = 0; i < src->nph; i++) {
            uint32_t ao = src->ph[i].addrOffset, dofs = src->ph[i].dataOffset;
            if ((uint64_t)ao + sizeof(void *) > src->args_size || dofs >= src->args_size) {
                rc = sim_err(ACL_ERROR_INVALID_PARAM, "%s: placeholder %zu (addrOffset %u, dataOffset %u) lies outside "
                             "the %zu bytes of hostArgs", api, i, ao, dofs, src->args_size);
                goto fail;
            }
            void *dp = L->args + dofs;
            memcpy(L->args + ao, &dp, sizeof dp);
            for (uint32_t j = 0; j < k->num_params; j++)
                if (k->params[j].offset == ao && (k->params[j].flags & CANNA_SIM_PARAM_POINTER))
                    L->is_ph[j] = true;
        }
    }
    if (!src->dev_args && (rc = check_ptr_args(api, L, true)))
        goto fail;

    sim_task_t *t = sim_task_new();
    if (!t)
        goto oom;
    t->run = run_kernel;
    t->release = release_kernel;
    t->what = k->name;
    t->u.user.arg = L;
    if (engine == KENG_AIC) {
        t->engine = ACLSIM_ENGINE_CUBE;
        t->cores = numBlocks < g_cfg.profile->ai_cores ? numBlocks : g_cfg.profile->ai_cores;
    } else {
        t->engine = ACLSIM_ENGINE_VECTOR;
        t->cores = numBlocks < g_cfg.profile->vector_cores ? numBlocks : g_cfg.profile->vector_cores;
    }
    /* run inline (on this thread, the stream being idle) when the kernel's previous launch was short;
     * a thread synchronizing the stream may run it when its previous run time is known */
    uint64_t last = atomic_load_explicit(&f->last_ns, memory_order_relaxed);
    bool small = last <= SIM_INLINE_COST_MAX_NS;
    t->steal = last != UINT64_MAX;
    t->cost_ns = last;
    rc = sim_stream_submit(s, t, small, api);   /* releases the task (and L, and f) on failure */
    sim_obj_unref(&s->obj);
    return rc;
oom:
    rc = sim_err(ACL_ERROR_RT_RESOURCE_ALLOC_FAIL, "%s: out of host memory", api);
fail:
    if (L) {
        pthread_mutex_destroy(&L->lock);
        free(L->canaries);
        free(L->args);
        free(L);
    }
    if (s)
        sim_obj_unref(&s->obj);
    sim_obj_unref(&f->obj);
    return rc;
}

SIM_API aclError aclrtLaunchKernel(aclrtFuncHandle funcHandle, uint32_t numBlocks, const void *argsData, size_t argsSize,
                                   aclrtStream stream)
{
    static const char api[] = "aclrtLaunchKernel";
    SIM_ENTER(api);
    SIM_NULL_CHECK(api, argsData);
    launch_src_t src = {.dev_args = argsData, .args_size = argsSize};
    return launch_common(api, funcHandle, numBlocks, stream, NULL, &src);
}

SIM_API aclError aclrtLaunchKernelV2(aclrtFuncHandle funcHandle, uint32_t numBlocks, const void *argsData,
                                     size_t argsSize, aclrtLaunchKernelCfg *cfg, aclrtStream stream)
{
    static const char api[] = "aclrtLaunchKernelV2";
    SIM_ENTER(api);
    SIM_NULL_CHECK(api, argsData);
    launch_src_t src = {.dev_args = argsData, .args_size = argsSize};
    return launch_common(api, funcHandle, numBlocks, stream, cfg, &src);
}

SIM_API aclError aclrtLaunchKernelWithHostArgs(aclrtFuncHandle funcHandle, uint32_t numBlocks, aclrtStream stream,
                                               aclrtLaunchKernelCfg *cfg, void *hostArgs, size_t argsSize,
                                               aclrtPlaceHolderInfo *placeHolderArray, size_t placeHolderNum)
{
    static const char api[] = "aclrtLaunchKernelWithHostArgs";
    SIM_ENTER(api);
    launch_src_t src = {.host_args = hostArgs, .args_size = argsSize, .ph = placeHolderArray, .nph = placeHolderNum};
    return launch_common(api, funcHandle, numBlocks, stream, cfg, &src);
}

SIM_API aclError aclrtLaunchKernelWithConfig(aclrtFuncHandle funcHandle, uint32_t numBlocks, aclrtStream stream,
                                             aclrtLaunchKernelCfg *cfg, aclrtArgsHandle argsHandle, void *reserve)
{
    static const char api[] = "aclrtLaunchKernelWithConfig";
    SIM_ENTER(api);
    if (reserve)
        return sim_err(ACL_ERROR_INVALID_PARAM, "%s: reserve must be NULL", api);
    sim_kargs_t *a;
    aclError rc = get_kargs(argsHandle, api, &a);
    if (rc)
        return rc;
    if (SIM_H(a->f) != funcHandle) {
        rc = sim_err(ACL_ERROR_INVALID_PARAM, "%s: argsHandle %p was created for kernel '%s', not for function %p", api,
                     argsHandle, a->f->k->name, funcHandle);
    } else {
        launch_src_t src = {.kargs = a};
        rc = launch_common(api, funcHandle, numBlocks, stream, cfg, &src);
    }
    sim_obj_unref(&a->obj);
    return rc;
}
