/* canna simulator: HCCL's C ABI (libhccl_sim.so), collectives between simulated devices.
 *
 * The behaviour is specified in README.md next to this file. Ranks meet in a POSIX shared-memory
 * segment named by the root info, so threads of one process and processes of this machine talk
 * the same way. Every collective is a task on an aclrtStream (aclsimLaunchTask of the runtime,
 * resolved at load time from libascendcl_sim.so, which is loaded first with RTLD_GLOBAL).
 */
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
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <fcntl.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <linux/futex.h>

#include "../_cdef/rt_types.h"
#include "../_cdef/rt_errors.h"
#include "../_cdef/rt_funcs.h"
#include "../_cdef/sim_funcs.h"
#include "../_cdef/hccl_types.h"
#include "../_cdef/hccl_funcs.h"
#include "../_cdef/sim_hccl_funcs.h"

#define API __attribute__((visibility("default")))

#define MAX_RANKS 64
#define ROOT_MAGIC "CANNAHC1"
#define SEG_MAGIC 0x48434332u           /* "HCC2" */
#define SLOT_MAX (4u << 20)             /* bytes of one rank's collective slot */
#define P2P_MAX (1u << 20)              /* bytes of one point-to-point channel */
#define BUF_MIN (64u << 10)
#define PART_MAX (256u << 10)          /* bytes of one rank's part of an all-reduce chunk (fits in L2) */
#define YIELD_NS (1000ull * 1000)       /* a barrier yields the CPU this long before sleeping */
#define POLL_NS (20ull * 1000 * 1000)   /* waits wake this often to look for dead peers */
#define DIRECT_MIN (1u << 20)          /* bytes from which an all-reduce reads and writes the peers' buffers */
#define DIRECT_BLOCK (16u << 10)       /* bytes of one direct reduction block (stays in L1) */
#define MAP_CACHE 32                   /* peer allocations a communicator keeps mapped */
#define CONNECT_TIMEOUT_DEFAULT 120.0   /* seconds, HCCL_CONNECT_TIMEOUT default */
#define EXEC_TIMEOUT_DEFAULT 1836.0     /* seconds, HCCL_EXEC_TIMEOUT default */

/* ------------------------------------------------------------------ errors */

static __thread char tls_msg[512];
static __thread int tls_has_msg;

static HcclResult herr(HcclResult code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static HcclResult herr(HcclResult code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tls_msg, sizeof tls_msg, fmt, ap);
    va_end(ap);
    tls_has_msg = 1;
    return code;
}

API const char *hcclsimGetLastErrorMessage(void)
{
    if (!tls_has_msg)
        return NULL;
    tls_has_msg = 0;
    return tls_msg;
}

API const char *HcclGetErrorString(HcclResult code)
{
    static const char *const names[] = {
        "success", "parameter error", "empty pointer", "memory error", "internal error",
        "not supported", "not found", "resource unavailable", "system call error", "timeout",
        "open file failure", "tcp connect failure", "roce connect failure", "tcp transfer failure",
        "roce transfer failure", "runtime error", "driver error", "profiling error", "cce error",
        "network error", "try again", "remote error", "communicator suspending", "retry failed",
        "out of memory"};
    if ((unsigned)code < sizeof names / sizeof names[0])
        return names[code];
    return "unknown HCCL error";
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* HCCL_CONNECT_TIMEOUT / HCCL_EXEC_TIMEOUT: seconds (HCCL takes integers; fractions are accepted
 * here so tests can use short timeouts). Returns 0 and *out, or HCCL_E_PARA naming the variable. */
static HcclResult env_seconds(const char *name, double dflt, double *out)
{
    const char *v = getenv(name);
    *out = dflt;
    if (!v || !*v)
        return HCCL_SUCCESS;
    char *end;
    errno = 0;
    double d = strtod(v, &end);
    if (errno || end == v || *end || !(d > 0) || d > 1e7)
        return herr(HCCL_E_PARA, "%s=%s: expected a number of seconds > 0", name, v);
    *out = d;
    return HCCL_SUCCESS;
}

/* ------------------------------------------------------------------ the shared segment */

typedef struct {
    _Atomic uint32_t written;   /* chunks written by the sender */
    _Atomic uint32_t read;      /* chunks consumed by the receiver */
    uint64_t len;               /* bytes of the chunk in flight */
    uint64_t total;             /* bytes of the whole message (checked by the receiver) */
    char pad[40];
} chan_t;

/* What a rank called, published when the ranks meet at the start of each collective: the ranks
 * compare them and all fail the call if they disagree (see check_agree). */
typedef struct {
    uint64_t seq;               /* the communicator's collectives this rank started before this one */
    uint64_t count;
    int32_t kind, dt, op;
    uint32_t root;
    /* where the buffers are, for the direct all-reduce (see run_allreduce_direct): the address
     * (for ranks of this process) and, if shareable, the place in the rank's memfd */
    uint64_t ptr[2];            /* src, dst */
    uint64_t map_off[2], map_len[2], ptr_off[2];
    uint32_t shareable[2];
    char pad[16];
} desc_t;

typedef struct {
    _Atomic uint32_t magic;
    uint32_t nranks;
    uint64_t size, slot_bytes, p2p_bytes, chan_off, slot_off, p2p_off;
    _Atomic uint32_t arrive;    /* ranks arrived at the current barrier */
    _Atomic uint32_t gen;       /* barrier generation (futex word) */
    _Atomic int32_t abort;      /* HcclResult that broke the communicator, 0 while healthy */
    _Atomic uint32_t joined;
    char abort_msg[256];
    struct {
        _Atomic int32_t pid;
        _Atomic uint32_t state; /* 0 free, 1 joined, 2 left */
    } ranks[MAX_RANKS];
    _Atomic uint32_t sleepers;  /* ranks asleep on a progress counter (wake them only then) */
    struct {
        _Atomic uint32_t step[3];   /* all-reduce steps each rank completed (futex words), see run_allreduce */
        char pad[52];
    } progress[MAX_RANKS];
    desc_t desc[2][MAX_RANKS];      /* each rank's collective, by the parity of its sequence number */
    struct {
        int32_t fd;                 /* the rank's process memfd of device memory (-1: none) */
        uint64_t ino;
        _Atomic uint32_t ok;        /* 2: it opened every other process's memfd, 1: it could not */
    } share[MAX_RANKS];
} seg_t;

enum { RANK_FREE, RANK_JOINED, RANK_LEFT };

typedef struct {
    char magic[8];
    char name[64];
} root_t;

typedef struct comm {
    uint64_t id;
    _Atomic int refs;
    uint32_t nranks, rank;
    int32_t device;
    seg_t *seg;
    size_t map_size;
    double exec_timeout;
    _Atomic int32_t async_err;
    _Atomic uint64_t ops, bytes, wait_ns, direct_ops;
    _Atomic uint64_t seq;       /* collectives this rank started */
    bool direct;                /* every rank can reach every other's device memory (see comm_init) */
    int peer_fd[MAX_RANKS];     /* the peers' memfds (-1: same process or none) */
    struct {                    /* the peers' allocations mapped here, least recently used first out */
        char *addr;
        uint64_t off, len, tick;
        uint32_t rank;
    } maps[MAP_CACHE];
    uint64_t tick;
    struct comm *next;
} comm_t;

static long futex(_Atomic uint32_t *addr, int op, uint32_t val, const struct timespec *ts)
{
    return syscall(SYS_futex, (uint32_t *)addr, op, val, ts, NULL, 0);
}

static void futex_wake_all(_Atomic uint32_t *addr) { futex(addr, FUTEX_WAKE, INT32_MAX, NULL); }

static char *slot_of(comm_t *c, uint32_t r) { return (char *)c->seg + c->seg->slot_off + (uint64_t)r * c->seg->slot_bytes; }
static chan_t *chan_of(comm_t *c, uint32_t src, uint32_t dst)
{
    return (chan_t *)((char *)c->seg + c->seg->chan_off) + (uint64_t)src * c->nranks + dst;
}
static char *chan_data(comm_t *c, uint32_t src, uint32_t dst)
{
    return (char *)c->seg + c->seg->p2p_off + ((uint64_t)src * c->nranks + dst) * c->seg->p2p_bytes;
}

/* Break the communicator for every rank (the first reason wins) and wake every waiter. */
static HcclResult seg_abort(comm_t *c, HcclResult code, const char *msg)
{
    int32_t zero = 0;
    if (atomic_compare_exchange_strong(&c->seg->abort, &zero, -1)) {
        snprintf(c->seg->abort_msg, sizeof c->seg->abort_msg, "%s", msg);
        atomic_store(&c->seg->abort, (int32_t)code);
    }
    atomic_fetch_add(&c->seg->gen, 0);
    futex_wake_all(&c->seg->gen);
    return code;
}

/* The reason the communicator is broken (sets the thread's message), or 0. */
static HcclResult seg_broken(comm_t *c)
{
    int32_t a = atomic_load(&c->seg->abort);
    if (a == 0)
        return HCCL_SUCCESS;
    while (a == -1) {   /* the message is being written */
        sched_yield();
        a = atomic_load(&c->seg->abort);
    }
    return herr((HcclResult)a, "rank %u: the communicator is broken: %s", c->rank, c->seg->abort_msg);
}

/* a process that exited (a zombie not yet reaped by its parent counts as dead) */
static bool pid_dead(int32_t pid)
{
    if (kill(pid, 0) < 0 && errno == ESRCH)
        return true;
    char path[64], buf[256];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return false;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char *p = strrchr(buf, ')');
    return p && p[1] == ' ' && (p[2] == 'Z' || p[2] == 'X');
}

/* A peer that is gone: left (HcclCommDestroy) or its process died. Aborts and returns the code. */
static HcclResult check_peers(comm_t *c)
{
    pid_t me = getpid();
    for (uint32_t r = 0; r < c->nranks; ++r) {
        if (r == c->rank)
            continue;
        uint32_t st = atomic_load(&c->seg->ranks[r].state);
        int32_t pid = atomic_load(&c->seg->ranks[r].pid);
        char msg[200];
        if (st == RANK_LEFT) {
            snprintf(msg, sizeof msg, "rank %u destroyed its communicator while rank %u waited for it", r, c->rank);
            return seg_abort(c, HCCL_E_REMOTE, msg);
        }
        if (pid > 0 && pid != me && pid_dead(pid)) {
            snprintf(msg, sizeof msg, "rank %u (process %d) died while rank %u waited for it", r, (int)pid, c->rank);
            return seg_abort(c, HCCL_E_REMOTE, msg);
        }
    }
    return HCCL_SUCCESS;
}

static HcclResult timed_out(comm_t *c, const char *what, double seconds)
{
    char msg[200];
    snprintf(msg, sizeof msg, "rank %u: %s timed out after %g s (a peer never arrived; raise %s)", c->rank, what,
             seconds, strcmp(what, "init") == 0 ? "HCCL_CONNECT_TIMEOUT" : "HCCL_EXEC_TIMEOUT");
    return seg_abort(c, HCCL_E_TIMEOUT, msg);
}

/* Every rank meets here; timeout in seconds. */
static HcclResult barrier(comm_t *c, double timeout, const char *what)
{
    seg_t *s = c->seg;
    uint32_t g = atomic_load(&s->gen);
    HcclResult rc = seg_broken(c);
    if (rc)
        return rc;
    if (atomic_fetch_add(&s->arrive, 1) == c->nranks - 1) {
        atomic_store(&s->arrive, 0);
        atomic_fetch_add(&s->gen, 1);
        futex_wake_all(&s->gen);
        return HCCL_SUCCESS;
    }
    uint64_t t0 = now_ns(), deadline = t0 + (uint64_t)(timeout * 1e9);
    /* Spin briefly, then yield the CPU for up to YIELD_NS (with a core each, ranks arrive within
     * microseconds of each other, and a futex wake-up costs tens of them), then sleep. */
    for (int spin = 0; spin < 2000 && atomic_load(&s->gen) == g; ++spin)
        cpu_relax();
    while (atomic_load(&s->gen) == g && now_ns() - t0 < YIELD_NS)
        sched_yield();
    while (atomic_load(&s->gen) == g) {
        if ((rc = seg_broken(c)))
            break;
        uint64_t t = now_ns();
        if (t >= deadline) {
            rc = timed_out(c, what, timeout);
            break;
        }
        if ((rc = check_peers(c)))
            break;
        uint64_t left = deadline - t < POLL_NS ? deadline - t : POLL_NS;
        struct timespec ts = {(time_t)(left / 1000000000ull), (long)(left % 1000000000ull)};
        futex(&s->gen, FUTEX_WAIT, g, &ts);
    }
    if (rc && atomic_load(&s->gen) != g)   /* everyone had arrived after all */
        rc = HCCL_SUCCESS;
    if (rc && atomic_load(&s->abort) > 0)
        rc = seg_broken(c);   /* the communicator's first failure, with its message */
    atomic_fetch_add(&c->wait_ns, now_ns() - t0);
    return rc;
}

/* Wait until rank r's progress counter `step` reaches `target` (wrapping compare), with the same
 * spin / yield / sleep, dead-peer and timeout rules as barrier(). */
static HcclResult wait_progress(comm_t *c, uint32_t r, int step, uint32_t target, const char *what)
{
    seg_t *s = c->seg;
    _Atomic uint32_t *w = &s->progress[r].step[step];
#define REACHED(v) ((int32_t)((v) - target) >= 0)
    if (REACHED(atomic_load(w)))
        return HCCL_SUCCESS;
    HcclResult rc = HCCL_SUCCESS;
    uint64_t t0 = now_ns(), deadline = t0 + (uint64_t)(c->exec_timeout * 1e9);
    for (int spin = 0; spin < 2000 && !REACHED(atomic_load(w)); ++spin)
        cpu_relax();
    while (!REACHED(atomic_load(w)) && now_ns() - t0 < YIELD_NS)
        sched_yield();
    for (;;) {
        uint32_t v = atomic_load(w);
        if (REACHED(v))
            break;
        if ((rc = seg_broken(c)))
            break;
        uint64_t t = now_ns();
        if (t >= deadline) {
            rc = timed_out(c, what, c->exec_timeout);
            break;
        }
        if ((rc = check_peers(c)))
            break;
        uint64_t left = deadline - t < POLL_NS ? deadline - t : POLL_NS;
        struct timespec ts = {(time_t)(left / 1000000000ull), (long)(left % 1000000000ull)};
        atomic_fetch_add(&s->sleepers, 1);
        if (!REACHED(atomic_load(w)))
            futex(w, FUTEX_WAIT, v, &ts);
        atomic_fetch_sub(&s->sleepers, 1);
    }
    if (rc && REACHED(atomic_load(w)))   /* it got there after all */
        rc = HCCL_SUCCESS;
    if (rc && atomic_load(&s->abort) > 0)
        rc = seg_broken(c);
    atomic_fetch_add(&c->wait_ns, now_ns() - t0);
    return rc;
#undef REACHED
}

/* This rank completed one more `step`: publish it and wake sleepers. */
static void post_progress(comm_t *c, int step)
{
    _Atomic uint32_t *w = &c->seg->progress[c->rank].step[step];
    atomic_fetch_add(w, 1);
    if (atomic_load(&c->seg->sleepers))
        futex_wake_all(w);
}

/* ------------------------------------------------------------------ the handle registry */

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static comm_t *g_comms;
static uint64_t g_next_id = 1;

static uintptr_t handle_of(comm_t *c) { return (uintptr_t)0x4843000000000000ull | c->id; }

/* The live communicator of a handle, with a reference (drop with comm_unref), or NULL. */
static comm_t *comm_get(HcclComm h)
{
    uintptr_t v = (uintptr_t)h;
    comm_t *found = NULL;
    pthread_mutex_lock(&g_lock);
    for (comm_t *c = g_comms; c; c = c->next)
        if (handle_of(c) == v) {
            atomic_fetch_add(&c->refs, 1);
            found = c;
            break;
        }
    pthread_mutex_unlock(&g_lock);
    return found;
}

static void comm_unref(comm_t *c)
{
    if (atomic_fetch_sub(&c->refs, 1) == 1) {
        for (int i = 0; i < MAP_CACHE; ++i)
            if (c->maps[i].addr)
                munmap(c->maps[i].addr, c->maps[i].len);
        for (uint32_t r = 0; r < c->nranks; ++r)
            if (c->peer_fd[r] >= 0)
                close(c->peer_fd[r]);
        munmap(c->seg, c->map_size);
        free(c);
    }
}

#define GET_COMM(api, h, c)                                                              \
    comm_t *c = comm_get(h);                                                             \
    if (!c)                                                                              \
        return herr(HCCL_E_PARA, "%s: unknown or destroyed communicator %p", api, (void *)(h))

/* ------------------------------------------------------------------ init / destroy */

static uint64_t round_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

static void layout(uint32_t n, uint64_t *slot, uint64_t *p2p, uint64_t *chan_off, uint64_t *slot_off,
                   uint64_t *p2p_off, uint64_t *size)
{
    uint64_t sb = (256ull << 20) / n, pb = (64ull << 20) / ((uint64_t)n * n);
    sb = sb > SLOT_MAX ? SLOT_MAX : sb < BUF_MIN ? BUF_MIN : sb;
    pb = pb > P2P_MAX ? P2P_MAX : pb < BUF_MIN ? BUF_MIN : pb;
    *slot = sb & ~4095ull;
    *p2p = pb & ~4095ull;
    *chan_off = round_up(sizeof(seg_t), 4096);
    *slot_off = round_up(*chan_off + (uint64_t)n * n * sizeof(chan_t), 4096);
    *p2p_off = *slot_off + (uint64_t)n * *slot;
    *size = *p2p_off + (uint64_t)n * n * *p2p;
}

API HcclResult HcclGetRootInfo(HcclRootInfo *rootInfo)
{
    static _Atomic uint64_t counter;
    if (!rootInfo)
        return herr(HCCL_E_PTR, "HcclGetRootInfo: rootInfo must not be NULL");
    root_t r;
    memset(rootInfo, 0, sizeof *rootInfo);
    memcpy(r.magic, ROOT_MAGIC, 8);
    uint64_t rnd = now_ns() ^ ((uint64_t)getpid() << 32) ^ (uint64_t)(uintptr_t)&r;
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        if (read(fd, &rnd, sizeof rnd) != (ssize_t)sizeof rnd)
            rnd ^= now_ns();
        close(fd);
    }
    snprintf(r.name, sizeof r.name, "/canna_hccl_%d_%llu_%016llx", (int)getpid(),
             (unsigned long long)atomic_fetch_add(&counter, 1), (unsigned long long)rnd);
    memcpy(rootInfo->internal, &r, sizeof r);
    return HCCL_SUCCESS;
}

/* open (or create) the segment and wait until its creator has laid it out */
static HcclResult seg_open(const char *name, uint32_t n, double timeout, seg_t **out, size_t *size_out)
{
    uint64_t sb, pb, co, so, po, size;
    layout(n, &sb, &pb, &co, &so, &po, &size);
    uint64_t deadline = now_ns() + (uint64_t)(timeout * 1e9);
    int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    bool creator = fd >= 0;
    if (!creator) {
        if (errno != EEXIST)
            return herr(HCCL_E_SYSCALL, "HcclCommInitRootInfo: shm_open(%s): %s", name, strerror(errno));
        fd = shm_open(name, O_RDWR | O_CLOEXEC, 0600);
        if (fd < 0)
            return herr(HCCL_E_SYSCALL, "HcclCommInitRootInfo: shm_open(%s): %s (the root info is stale: "
                        "every rank must initialize before the communicator's first rank times out)", name,
                        strerror(errno));
        struct stat st;
        for (;;) {   /* the creator sizes it right after creating it */
            if (fstat(fd, &st) < 0) {
                close(fd);
                return herr(HCCL_E_SYSCALL, "HcclCommInitRootInfo: fstat: %s", strerror(errno));
            }
            if (st.st_size > 0)
                break;
            if (now_ns() > deadline) {
                close(fd);
                return herr(HCCL_E_TIMEOUT, "HcclCommInitRootInfo: the segment %s was never laid out", name);
            }
            usleep(1000);
        }
        if ((uint64_t)st.st_size != size) {
            close(fd);
            return herr(HCCL_E_PARA, "HcclCommInitRootInfo: nRanks=%u differs from the other ranks' value", n);
        }
    } else if (ftruncate(fd, (off_t)size) < 0) {
        int e = errno;
        close(fd);
        shm_unlink(name);
        return herr(HCCL_E_MEMORY, "HcclCommInitRootInfo: cannot size the shared segment (%llu bytes): %s",
                    (unsigned long long)size, strerror(e));
    }
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) {
        if (creator)
            shm_unlink(name);
        return herr(HCCL_E_MEMORY, "HcclCommInitRootInfo: mmap: %s", strerror(errno));
    }
    seg_t *s = p;
    if (creator) {
        s->nranks = n;
        s->size = size;
        s->slot_bytes = sb;
        s->p2p_bytes = pb;
        s->chan_off = co;
        s->slot_off = so;
        s->p2p_off = po;
        atomic_store(&s->magic, SEG_MAGIC);
    } else {
        while (atomic_load(&s->magic) != SEG_MAGIC) {
            if (now_ns() > deadline) {
                munmap(p, size);
                return herr(HCCL_E_TIMEOUT, "HcclCommInitRootInfo: the segment %s was never initialized", name);
            }
            usleep(1000);
        }
        if (s->nranks != n) {
            munmap(p, size);
            return herr(HCCL_E_PARA, "HcclCommInitRootInfo: nRanks=%u differs from the other ranks' (%u)", n,
                        s->nranks);
        }
    }
    *out = s;
    *size_out = size;
    return HCCL_SUCCESS;
}

static HcclResult comm_init(uint32_t n, const HcclRootInfo *ri, uint32_t rank, int32_t device, HcclComm *out)
{
    static const char api[] = "HcclCommInitRootInfo";
    root_t r;
    memcpy(&r, ri->internal, sizeof r);
    if (memcmp(r.magic, ROOT_MAGIC, 8) != 0 || !memchr(r.name, 0, sizeof r.name) || r.name[0] != '/')
        return herr(HCCL_E_PARA, "%s: rootInfo was not made by HcclGetRootInfo", api);
    double ct, et;
    HcclResult rc = env_seconds("HCCL_CONNECT_TIMEOUT", CONNECT_TIMEOUT_DEFAULT, &ct);
    if (!rc)
        rc = env_seconds("HCCL_EXEC_TIMEOUT", EXEC_TIMEOUT_DEFAULT, &et);
    if (rc)
        return rc;
    comm_t *c = calloc(1, sizeof *c);
    if (!c)
        return herr(HCCL_E_MEMORY, "%s: out of host memory", api);
    if ((rc = seg_open(r.name, n, ct, &c->seg, &c->map_size))) {
        free(c);
        return rc;
    }
    c->nranks = n;
    c->rank = rank;
    c->device = device;
    c->exec_timeout = et;
    atomic_store(&c->refs, 1);
    uint32_t free_state = RANK_FREE;
    if (!atomic_compare_exchange_strong(&c->seg->ranks[rank].state, &free_state, RANK_JOINED)) {
        munmap(c->seg, c->map_size);
        free(c);
        return herr(HCCL_E_PARA, "%s: rank %u already joined this communicator", api, rank);
    }
    for (uint32_t k = 0; k < MAX_RANKS; ++k)
        c->peer_fd[k] = -1;
    aclsimMemShare sh;
    c->seg->share[rank].fd = aclsimMemGetShare(NULL, 0, &sh) == ACL_SUCCESS ? sh.fd : -1;
    c->seg->share[rank].ino = c->seg->share[rank].fd >= 0 ? sh.ino : 0;
    atomic_store(&c->seg->ranks[rank].pid, (int32_t)getpid());
    atomic_fetch_add(&c->seg->joined, 1);
    rc = barrier(c, ct, "init");
    if (rank == 0 || rc)
        shm_unlink(r.name);   /* every rank has it mapped (or the init failed): nothing else may join */
    if (!rc) {   /* open the other processes' memfds; the direct all-reduce needs every rank to succeed */
        bool ok = true;
        for (uint32_t k = 0; k < n; ++k) {
            int32_t pid = atomic_load(&c->seg->ranks[k].pid);
            if (k == rank || pid == (int32_t)getpid())
                continue;
            int fd = -1;
            struct stat st;
            if (c->seg->share[k].fd >= 0) {
                char path[64];
                snprintf(path, sizeof path, "/proc/%d/fd/%d", (int)pid, (int)c->seg->share[k].fd);
                fd = open(path, O_RDWR | O_CLOEXEC);
            }
            if (fd >= 0 && (fstat(fd, &st) != 0 || (uint64_t)st.st_ino != c->seg->share[k].ino)) {
                close(fd);
                fd = -1;
            }
            c->peer_fd[k] = fd;
            ok = ok && fd >= 0;
        }
        atomic_store(&c->seg->share[rank].ok, ok ? 2 : 1);
        rc = barrier(c, ct, "init");
        c->direct = true;
        for (uint32_t k = 0; k < n && !rc; ++k)
            c->direct = c->direct && atomic_load(&c->seg->share[k].ok) == 2;
    }
    if (rc) {
        atomic_store(&c->seg->ranks[rank].state, RANK_LEFT);
        comm_unref(c);
        return rc;
    }
    pthread_mutex_lock(&g_lock);
    c->id = g_next_id++;
    c->next = g_comms;
    g_comms = c;
    pthread_mutex_unlock(&g_lock);
    *out = (HcclComm)handle_of(c);
    return HCCL_SUCCESS;
}

static HcclResult check_device(const char *api, int32_t device)
{
    uint32_t count = 0;
    if (aclrtGetDeviceCount(&count) != ACL_SUCCESS)
        return herr(HCCL_E_RUNTIME, "%s: aclrtGetDeviceCount failed (is AscendCL initialized?)", api);
    if (device < 0 || (uint32_t)device >= count)
        return herr(HCCL_E_PARA, "%s: device %d out of range (%u devices)", api, device, count);
    return HCCL_SUCCESS;
}

API HcclResult HcclCommInitRootInfo(uint32_t nRanks, const HcclRootInfo *rootInfo, uint32_t rank, HcclComm *comm)
{
    static const char api[] = "HcclCommInitRootInfo";
    if (!rootInfo || !comm)
        return herr(HCCL_E_PTR, "%s: rootInfo and comm must not be NULL", api);
    if (nRanks < 1 || nRanks > MAX_RANKS)
        return herr(HCCL_E_PARA, "%s: nRanks must be in 1..%d (got %u)", api, MAX_RANKS, nRanks);
    if (rank >= nRanks)
        return herr(HCCL_E_PARA, "%s: rank %u out of range for %u ranks", api, rank, nRanks);
    int32_t dev;
    if (aclrtGetDevice(&dev) != ACL_SUCCESS)
        return herr(HCCL_E_RUNTIME, "%s: no current device on this thread (call aclrtSetDevice first)", api);
    return comm_init(nRanks, rootInfo, rank, dev, comm);
}

typedef struct {
    uint32_t n, rank;
    int32_t device;
    const HcclRootInfo *ri;
    HcclComm comm;
    HcclResult rc;
    char msg[512];
} init_job_t;

static void *init_thread(void *arg)
{
    init_job_t *j = arg;
    j->rc = comm_init(j->n, j->ri, j->rank, j->device, &j->comm);
    const char *m = j->rc ? hcclsimGetLastErrorMessage() : NULL;
    snprintf(j->msg, sizeof j->msg, "%s", m ? m : "");
    return NULL;
}

API HcclResult HcclCommInitAll(uint32_t ndev, int32_t *devices, HcclComm *comms)
{
    static const char api[] = "HcclCommInitAll";
    if (!devices || !comms)
        return herr(HCCL_E_PTR, "%s: devices and comms must not be NULL", api);
    if (ndev < 1 || ndev > MAX_RANKS)
        return herr(HCCL_E_PARA, "%s: ndev must be in 1..%d (got %u)", api, MAX_RANKS, ndev);
    HcclResult rc;
    for (uint32_t i = 0; i < ndev; ++i) {
        if ((rc = check_device(api, devices[i])))
            return rc;
        for (uint32_t k = 0; k < i; ++k)
            if (devices[k] == devices[i])
                return herr(HCCL_E_PARA, "%s: device %d is listed twice", api, devices[i]);
    }
    HcclRootInfo ri;
    if ((rc = HcclGetRootInfo(&ri)))
        return rc;
    init_job_t *jobs = calloc(ndev, sizeof *jobs);
    pthread_t *th = calloc(ndev, sizeof *th);
    if (!jobs || !th) {
        free(jobs);
        free(th);
        return herr(HCCL_E_MEMORY, "%s: out of host memory", api);
    }
    uint32_t started = 0;
    for (uint32_t i = 0; i < ndev; ++i) {
        jobs[i] = (init_job_t){.n = ndev, .rank = i, .device = devices[i], .ri = &ri};
        if (pthread_create(&th[i], NULL, init_thread, &jobs[i]) != 0)
            break;
        started++;
    }
    for (uint32_t i = 0; i < started; ++i)
        pthread_join(th[i], NULL);
    rc = started < ndev ? herr(HCCL_E_SYSCALL, "%s: cannot start a thread", api) : HCCL_SUCCESS;
    for (uint32_t i = 0; i < started && !rc; ++i)
        if (jobs[i].rc)
            rc = herr(jobs[i].rc, "%s", jobs[i].msg);
    for (uint32_t i = 0; i < started; ++i) {
        if (rc && jobs[i].rc == HCCL_SUCCESS)
            HcclCommDestroy(jobs[i].comm);
        else if (!rc)
            comms[i] = jobs[i].comm;
    }
    free(jobs);
    free(th);
    return rc;
}

API HcclResult HcclCommDestroy(HcclComm comm)
{
    comm_t *c = NULL, **pp;
    pthread_mutex_lock(&g_lock);
    for (pp = &g_comms; *pp; pp = &(*pp)->next)
        if (handle_of(*pp) == (uintptr_t)comm) {
            c = *pp;
            *pp = c->next;
            break;
        }
    pthread_mutex_unlock(&g_lock);
    if (!c)
        return herr(HCCL_E_PARA, "HcclCommDestroy: unknown or destroyed communicator %p", comm);
    atomic_store(&c->seg->ranks[c->rank].state, RANK_LEFT);
    futex_wake_all(&c->seg->gen);
    comm_unref(c);   /* queued tasks hold their own references */
    return HCCL_SUCCESS;
}

API HcclResult HcclGetRankSize(HcclComm comm, uint32_t *rankSize)
{
    if (!rankSize)
        return herr(HCCL_E_PTR, "HcclGetRankSize: rankSize must not be NULL");
    GET_COMM("HcclGetRankSize", comm, c);
    *rankSize = c->nranks;
    comm_unref(c);
    return HCCL_SUCCESS;
}

API HcclResult HcclGetRankId(HcclComm comm, uint32_t *rank)
{
    if (!rank)
        return herr(HCCL_E_PTR, "HcclGetRankId: rank must not be NULL");
    GET_COMM("HcclGetRankId", comm, c);
    *rank = c->rank;
    comm_unref(c);
    return HCCL_SUCCESS;
}

API HcclResult HcclGetCommAsyncError(HcclComm comm, HcclResult *asyncError)
{
    if (!asyncError)
        return herr(HCCL_E_PTR, "HcclGetCommAsyncError: asyncError must not be NULL");
    GET_COMM("HcclGetCommAsyncError", comm, c);
    *asyncError = (HcclResult)atomic_load(&c->async_err);
    comm_unref(c);
    return HCCL_SUCCESS;
}

API HcclResult hcclsimGetCommStats(HcclComm comm, hcclsimCommStats *stats)
{
    if (!stats)
        return herr(HCCL_E_PTR, "hcclsimGetCommStats: stats must not be NULL");
    GET_COMM("hcclsimGetCommStats", comm, c);
    stats->numOps = atomic_load(&c->ops);
    stats->bytesMoved = atomic_load(&c->bytes);
    stats->waitNs = atomic_load(&c->wait_ns);
    stats->directOps = atomic_load(&c->direct_ops);
    comm_unref(c);
    return HCCL_SUCCESS;
}

/* ------------------------------------------------------------------ data types and reductions */

static size_t dtype_size(HcclDataType t)
{
    switch (t) {
    case HCCL_DATA_TYPE_INT8: case HCCL_DATA_TYPE_UINT8: return 1;
    case HCCL_DATA_TYPE_INT16: case HCCL_DATA_TYPE_UINT16: case HCCL_DATA_TYPE_FP16:
    case HCCL_DATA_TYPE_BFP16: return 2;
    case HCCL_DATA_TYPE_INT32: case HCCL_DATA_TYPE_UINT32: case HCCL_DATA_TYPE_FP32: return 4;
    case HCCL_DATA_TYPE_INT64: case HCCL_DATA_TYPE_UINT64: case HCCL_DATA_TYPE_FP64: return 8;
    case HCCL_DATA_TYPE_INT128: return 16;
    default: return 0;
    }
}

static float half_to_float(uint16_t h)
{
    uint32_t s = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff, f;
    if (e == 0) {
        if (m == 0) {
            f = s;
        } else {
            float v = ldexpf((float)m, -24);
            return s ? -v : v;
        }
    } else if (e == 31) {
        f = s | 0x7f800000u | (m << 13);
    } else {
        f = s | ((e + 112) << 23) | (m << 13);
    }
    float out;
    memcpy(&out, &f, 4);
    return out;
}

static uint16_t float_to_half(float v)   /* round to nearest even */
{
    uint32_t f;
    memcpy(&f, &v, 4);
    uint32_t s = (f >> 16) & 0x8000, e = (f >> 23) & 0xff, m = f & 0x7fffff;
    if (e == 0xff)
        return (uint16_t)(s | 0x7c00 | (m ? 0x200 | (m >> 13) : 0));
    int ue = (int)e - 127 + 15;
    if (ue >= 31)
        return (uint16_t)(s | 0x7c00);
    if (ue <= 0) {
        if (ue < -10)
            return (uint16_t)s;
        m |= 0x800000;
        int shift = 14 - ue;
        uint32_t hm = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (hm & 1)))
            hm++;
        return (uint16_t)(s | hm);
    }
    uint32_t hm = m >> 13, rem = m & 0x1fff;
    uint32_t out = s | ((uint32_t)ue << 10) | hm;
    if (rem > 0x1000 || (rem == 0x1000 && (hm & 1)))
        out++;
    return (uint16_t)out;
}

static float bf16_to_float(uint16_t h)
{
    uint32_t f = (uint32_t)h << 16;
    float out;
    memcpy(&out, &f, 4);
    return out;
}

static uint16_t float_to_bf16(float v)
{
    uint32_t f;
    memcpy(&f, &v, 4);
    if ((f & 0x7fffffff) > 0x7f800000)
        return (uint16_t)((f >> 16) | 0x40);
    f += 0x7fff + ((f >> 16) & 1);
    return (uint16_t)(f >> 16);
}

/* One pass per further input: o = in[0] op in[1], then o = o op in[k] (the same rank order as one
 * loop over k, so the same bits), each a loop of one op the compiler vectorizes. W is the type the
 * arithmetic is done in (unsigned for types narrower than int, so products wrap instead of
 * overflowing int). o may be in[0] itself but no other input. */
#define RED_LOOP(T, W)                                                                          \
    do {                                                                                        \
        T *o = out;                                                                             \
        if (nin == 1 && (const void *)o != in[0])                                               \
            memmove(o, in[0], n * sizeof(T));                                                   \
        for (uint32_t k = 1; k < nin; ++k) {                                                    \
            const T *a = k == 1 ? (const T *)in[0] : o, *b = (const T *)in[k];                  \
            switch (op) {                                                                       \
            case HCCL_REDUCE_SUM:                                                               \
                for (uint64_t i = 0; i < n; ++i) o[i] = (T)((W)a[i] + (W)b[i]);                 \
                break;                                                                          \
            case HCCL_REDUCE_PROD:                                                              \
                for (uint64_t i = 0; i < n; ++i) o[i] = (T)((W)a[i] * (W)b[i]);                 \
                break;                                                                          \
            case HCCL_REDUCE_MAX:                                                               \
                for (uint64_t i = 0; i < n; ++i) o[i] = b[i] > a[i] ? b[i] : a[i];              \
                break;                                                                          \
            default:                                                                            \
                for (uint64_t i = 0; i < n; ++i) o[i] = b[i] < a[i] ? b[i] : a[i];              \
                break;                                                                          \
            }                                                                                   \
        }                                                                                       \
    } while (0)

#define RED_LOOP_CONV(TO, FROM)                                                                 \
    do {                                                                                        \
        uint16_t *o = out;                                                                      \
        for (uint64_t i = 0; i < n; ++i) {                                                      \
            float a = FROM(((const uint16_t *)in[0])[i]);                                       \
            for (uint32_t k = 1; k < nin; ++k) {                                                \
                float b = FROM(((const uint16_t *)in[k])[i]);                                   \
                switch (op) {                                                                   \
                case HCCL_REDUCE_SUM: a = a + b; break;                                         \
                case HCCL_REDUCE_PROD: a = a * b; break;                                        \
                case HCCL_REDUCE_MAX: a = b > a ? b : a; break;                                 \
                default: a = b < a ? b : a; break;                                              \
                }                                                                               \
            }                                                                                   \
            o[i] = TO(a);                                                                       \
        }                                                                                       \
    } while (0)

/* out[i] = in[0][i] op in[1][i] op ... (in rank order, so every rank gets the same bits). Signed
 * integer sums and products wrap (computed unsigned); max/min compare signed values. out may be
 * in[0] but no other input. Built at -O3 so the loops are vectorized (the library's -O2 is not). */
__attribute__((optimize("O3"))) static void reduce_into(void *out, const void *const *in, uint32_t nin, uint64_t n, HcclDataType t, HcclReduceOp op)
{
    bool arith = op == HCCL_REDUCE_SUM || op == HCCL_REDUCE_PROD;
    switch (t) {
    case HCCL_DATA_TYPE_INT8: if (arith) RED_LOOP(uint8_t, unsigned); else RED_LOOP(int8_t, int8_t); break;
    case HCCL_DATA_TYPE_UINT8: RED_LOOP(uint8_t, unsigned); break;
    case HCCL_DATA_TYPE_INT16: if (arith) RED_LOOP(uint16_t, unsigned); else RED_LOOP(int16_t, int16_t); break;
    case HCCL_DATA_TYPE_UINT16: RED_LOOP(uint16_t, unsigned); break;
    case HCCL_DATA_TYPE_INT32: if (arith) RED_LOOP(uint32_t, uint32_t); else RED_LOOP(int32_t, int32_t); break;
    case HCCL_DATA_TYPE_UINT32: RED_LOOP(uint32_t, uint32_t); break;
    case HCCL_DATA_TYPE_INT64: if (arith) RED_LOOP(uint64_t, uint64_t); else RED_LOOP(int64_t, int64_t); break;
    case HCCL_DATA_TYPE_UINT64: RED_LOOP(uint64_t, uint64_t); break;
    case HCCL_DATA_TYPE_FP32: RED_LOOP(float, float); break;
    case HCCL_DATA_TYPE_FP64: RED_LOOP(double, double); break;
    case HCCL_DATA_TYPE_FP16: RED_LOOP_CONV(float_to_half, half_to_float); break;
    case HCCL_DATA_TYPE_BFP16: RED_LOOP_CONV(float_to_bf16, bf16_to_float); break;
    default: break;
    }
}

static bool reducible(HcclDataType t) { return dtype_size(t) != 0 && t != HCCL_DATA_TYPE_INT128; }

/* ------------------------------------------------------------------ operations */

enum { OP_ALLREDUCE, OP_BROADCAST, OP_ALLGATHER, OP_REDUCESCATTER, OP_REDUCE, OP_ALLTOALL, OP_BARRIER, OP_P2P };

typedef struct {
    int send;          /* 1 send, 0 receive */
    char *buf;
    uint64_t bytes, done;
    uint32_t peer;
    uint32_t chunks;   /* chunks moved so far */
} p2p_t;

typedef struct {
    int kind;
    comm_t *c;
    const char *src;
    char *dst;
    uint64_t count;    /* elements: per rank for all-gather (send), reduce-scatter (recv), all-to-all (per peer) */
    HcclDataType dt;
    HcclReduceOp op;
    uint32_t root;
    bool ran;
    uint32_t np;
    p2p_t *p2p;
} op_t;

static const char *op_name(int kind)
{
    static const char *const n[] = {"HcclAllReduce", "HcclBroadcast", "HcclAllGather", "HcclReduceScatter",
                                    "HcclReduce", "HcclAlltoAll", "HcclBarrier", "HcclSend/HcclRecv"};
    return n[kind];
}

static const char *dtype_name(HcclDataType t)
{
    static const char *const n[] = {"int8", "int16", "int32", "fp16", "fp32", "int64", "uint64", "uint8",
                                    "uint16", "uint32", "fp64", "bfp16", "int128"};
    return (unsigned)t < sizeof n / sizeof n[0] ? n[t] : "?";
}

/* "HcclAllReduce(count=N, fp32, sum)": what a rank called, for the mismatch message */
static void desc_text(char *out, size_t len, const desc_t *d)
{
    static const char *const ops[] = {"sum", "prod", "max", "min"};
    const char *opn = (unsigned)d->op < 4 ? ops[d->op] : "?";
    switch (d->kind) {
    case OP_BARRIER:
        snprintf(out, len, "%s()", op_name(d->kind));
        break;
    case OP_ALLREDUCE: case OP_REDUCESCATTER:
        snprintf(out, len, "%s(count=%llu, %s, %s)", op_name(d->kind), (unsigned long long)d->count,
                 dtype_name((HcclDataType)d->dt), opn);
        break;
    case OP_REDUCE:
        snprintf(out, len, "%s(count=%llu, %s, %s, root=%u)", op_name(d->kind), (unsigned long long)d->count,
                 dtype_name((HcclDataType)d->dt), opn, d->root);
        break;
    case OP_BROADCAST:
        snprintf(out, len, "%s(count=%llu, %s, root=%u)", op_name(d->kind), (unsigned long long)d->count,
                 dtype_name((HcclDataType)d->dt), d->root);
        break;
    default:
        snprintf(out, len, "%s(count=%llu, %s)", op_name(d->kind), (unsigned long long)d->count,
                 dtype_name((HcclDataType)d->dt));
        break;
    }
}

/* The start of every collective: each rank publishes what it called, all meet, and each compares
 * every rank's call with rank 0's. Every rank reads the same descriptors, so on a disagreement
 * (kind, count, data type, op or root) all of them fail the call with HCCL_E_PARA before any data
 * moves, and the communicator stays usable. The descriptors alternate between two tables by the
 * parity of the call's sequence number: a rank can write the next call's only after every rank
 * reached this meeting, and the one after next only after every rank finished reading this one's. */
static HcclResult check_agree(op_t *o, bool *mismatch)
{
    comm_t *c = o->c;
    uint64_t seq = atomic_fetch_add(&c->seq, 1);
    desc_t *mine = &c->seg->desc[seq & 1][c->rank];
    memset(mine, 0, sizeof *mine);
    mine->seq = seq;
    mine->kind = o->kind;
    mine->count = o->count;
    mine->dt = o->kind == OP_BARRIER ? 0 : (int32_t)o->dt;
    mine->op = o->kind == OP_ALLREDUCE || o->kind == OP_REDUCE || o->kind == OP_REDUCESCATTER ? (int32_t)o->op : 0;
    mine->root = o->kind == OP_REDUCE || o->kind == OP_BROADCAST ? o->root : 0;
    if (o->kind == OP_ALLREDUCE) {
        const void *bufs[2] = {o->src, o->dst};
        uint64_t bytes = o->count * dtype_size(o->dt);
        for (int i = 0; i < 2; ++i) {
            aclsimMemShare sh;
            mine->ptr[i] = (uint64_t)(uintptr_t)bufs[i];
            if (c->direct && bytes >= DIRECT_MIN && aclsimMemGetShare(bufs[i], bytes, &sh) == ACL_SUCCESS) {
                mine->shareable[i] = 1;
                mine->map_off[i] = sh.mapOffset;
                mine->map_len[i] = sh.mapLen;
                mine->ptr_off[i] = sh.ptrOffset;
            }
        }
    }
    HcclResult rc = barrier(c, c->exec_timeout, op_name(o->kind));
    if (rc)
        return rc;
    const desc_t *d0 = &c->seg->desc[seq & 1][0];
    for (uint32_t r = 1; r < c->nranks; ++r) {
        const desc_t *d = &c->seg->desc[seq & 1][r];
        if (d->kind == d0->kind && d->count == d0->count && d->dt == d0->dt && d->op == d0->op && d->root == d0->root
            && d->seq == d0->seq)
            continue;
        char a[160], b[160];
        *mismatch = true;
        desc_text(a, sizeof a, d0);
        desc_text(b, sizeof b, d);
        if (d->seq != d0->seq)
            return herr(HCCL_E_PARA, "the ranks' collectives are out of step: rank 0 called %s as its collective "
                        "#%llu, rank %u called %s as its #%llu", a, (unsigned long long)d0->seq + 1, r, b,
                        (unsigned long long)d->seq + 1);
        return herr(HCCL_E_PARA, "the ranks called different collectives: rank 0 called %s, rank %u called %s "
                    "(every rank must make the same call)", a, r, b);
    }
    return HCCL_SUCCESS;
}

/* All-reduce as a reduce-scatter then an all-gather through the segment, pipelined in chunks. Each
 * chunk is cut in nranks parts; rank p reduces part p (in rank order, so every rank gets the same
 * bits) and the others copy its result: the ranks share the reduction instead of each reducing
 * everything. For chunk k, rank r
 *   step 0: copies the parts the others reduce (p != r) of its input into its buffer k % nbuf,
 *   step 1: (every rank's step 0 of chunk k done) reduces part r from its own input and the
 *           others' buffers into its buffer's part r, and copies the result to its output,
 *   step 2: (rank p's step 1 of chunk k done) copies each other part p from rank p's buffer.
 * Each rank counts its completed steps in the segment (progress[r].step[]) and waits only for the
 * counters it needs, never for a whole meeting. Iteration t runs step 0 of chunk t, step 1 of
 * chunk t - LAG and step 2 of chunk t - 2 LAG, so a rank may run LAG iterations ahead of the
 * others: ranks sharing a CPU switch every few chunks, not at every step. A buffer is written again
 * (step 0 of chunk k + nbuf, step 1 of chunk k + nbuf) only once every rank has read it (steps 1
 * and 2 of chunk k): nbuf > 2 LAG makes those waits refer to earlier iterations, so no rank ever
 * waits for a step the others have not reached first. A last meeting ends the operation (the next
 * one may reuse the slots). Parts are small (PART_MAX) so that what one rank writes is still in
 * cache when the others read it. */
#define LAG 3
static HcclResult run_allreduce(op_t *o)
{
    comm_t *c = o->c;
    uint32_t n = c->nranks, me = c->rank;
    size_t es = dtype_size(o->dt);
    double to = c->exec_timeout;
    const char *what = op_name(o->kind);
    uint64_t slot = c->seg->slot_bytes;
    uint64_t part = (slot / (2 * LAG + 1) / n < PART_MAX ? slot / (2 * LAG + 1) / n : PART_MAX) / 64 * 64 / es;
    uint64_t buf_bytes = part * es * n, nbuf = slot / buf_bytes;   /* nbuf >= 2 LAG + 1 */
    uint64_t chunk = part * n, moved = 0;
    uint64_t nchunks = (o->count + chunk - 1) / chunk;
    uint32_t base[3];
    for (int st = 0; st < 3; ++st)   /* every rank starts an all-reduce with the same counts */
        base[st] = atomic_load(&c->seg->progress[me].step[st]);
    HcclResult rc = HCCL_SUCCESS;
    const void *ins[MAX_RANKS];
#define CH_LEN(k) (o->count - (k) * chunk < chunk ? o->count - (k) * chunk : chunk)
#define CH_Q(k) ((CH_LEN(k) + n - 1) / n)   /* elements per part of chunk k (the last parts may be short) */
#define PART_OFF(k, p) ((k) * chunk + (uint64_t)(p) * CH_Q(k))
#define PART_LEN(k, p) ((uint64_t)(p) * CH_Q(k) >= CH_LEN(k) ? 0                                         \
                        : CH_LEN(k) - (uint64_t)(p) * CH_Q(k) < CH_Q(k) ? CH_LEN(k) - (uint64_t)(p) * CH_Q(k) \
                        : CH_Q(k))
#define PART_BUF(r, k, p) (slot_of(c, r) + ((k) % nbuf) * buf_bytes + (uint64_t)(p) * part * es)
    for (uint64_t t = 0; t < nchunks + 2 * LAG && !rc; ++t) {
        if (t < nchunks) {   /* step 0 of chunk t */
            uint64_t k = t;
            for (uint32_t p = 0; p < n && !rc; ++p)   /* rank p read this buffer's part p (chunk k - nbuf) */
                if (p != me && k >= nbuf)
                    rc = wait_progress(c, p, 1, base[1] + (uint32_t)(k - nbuf + 1), what);
            for (uint32_t p = 0; p < n && !rc; ++p)
                if (p != me && PART_LEN(k, p)) {
                    memcpy(PART_BUF(me, k, p), o->src + PART_OFF(k, p) * es, PART_LEN(k, p) * es);
                    moved += PART_LEN(k, p) * es;
                }
            if (rc)
                break;
            post_progress(c, 0);
        }
        if (t >= LAG && t - LAG < nchunks) {   /* step 1 of chunk t - LAG */
            uint64_t k = t - LAG;
            for (uint32_t p = 0; p < n && !rc; ++p) {
                if (p == me)
                    continue;
                rc = wait_progress(c, p, 0, base[0] + (uint32_t)(k + 1), what);   /* its parts of chunk k */
                if (!rc && k >= nbuf)   /* it read my result of chunk k - nbuf */
                    rc = wait_progress(c, p, 2, base[2] + (uint32_t)(k - nbuf + 1), what);
            }
            if (rc)
                break;
            uint64_t mine = PART_LEN(k, me);
            if (mine) {
                for (uint32_t r = 0; r < n; ++r)
                    ins[r] = r == me ? (const void *)(o->src + PART_OFF(k, me) * es) : PART_BUF(r, k, me);
                reduce_into(PART_BUF(me, k, me), ins, n, mine, o->dt, o->op);
                memcpy(o->dst + PART_OFF(k, me) * es, PART_BUF(me, k, me), mine * es);
                moved += (n + 1) * mine * es;
            }
            post_progress(c, 1);
        }
        if (t >= 2 * LAG && t - 2 * LAG < nchunks) {   /* step 2 of chunk t - 2 LAG */
            uint64_t k = t - 2 * LAG;
            for (uint32_t p = 0; p < n && !rc; ++p) {
                if (p == me)
                    continue;
                if ((rc = wait_progress(c, p, 1, base[1] + (uint32_t)(k + 1), what)))
                    break;
                if (PART_LEN(k, p)) {
                    memcpy(o->dst + PART_OFF(k, p) * es, PART_BUF(p, k, p), PART_LEN(k, p) * es);
                    moved += PART_LEN(k, p) * es;
                }
            }
            if (rc)
                break;
            post_progress(c, 2);
        }
    }
#undef CH_LEN
#undef CH_Q
#undef PART_OFF
#undef PART_LEN
#undef PART_BUF
    if (!rc)
        rc = barrier(c, to, what);
    atomic_fetch_add(&c->bytes, moved);
    return rc;
}
#undef LAG

/* Rank r's allocation [off, off + len) of its memfd, mapped here (cached; NULL with the thread's
 * message on failure). The offsets of a process's memfd are never reused, so a cached mapping
 * always shows the allocation it was made for (a freed one's pages are punched out of the file). */
static char *peer_map(comm_t *c, uint32_t r, uint64_t off, uint64_t len)
{
    int lru = 0;
    for (int i = 0; i < MAP_CACHE; ++i) {
        if (c->maps[i].addr && c->maps[i].rank == r && c->maps[i].off == off && c->maps[i].len == len) {
            c->maps[i].tick = ++c->tick;
            return c->maps[i].addr;
        }
        if (!c->maps[i].addr || (c->maps[lru].addr && c->maps[i].tick < c->maps[lru].tick))
            lru = i;
    }
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, c->peer_fd[r], (off_t)off);
    if (p == MAP_FAILED) {
        herr(HCCL_E_MEMORY, "rank %u cannot map rank %u's buffer (%llu bytes): %s", c->rank, r,
             (unsigned long long)len, strerror(errno));
        return NULL;
    }
    if (c->maps[lru].addr)
        munmap(c->maps[lru].addr, c->maps[lru].len);
    c->maps[lru].addr = p;
    c->maps[lru].rank = r;
    c->maps[lru].off = off;
    c->maps[lru].len = len;
    c->maps[lru].tick = ++c->tick;
    return p;
}

/* Whether the all-reduce just agreed on (descriptors of sequence number seq) goes direct: every
 * rank's buffers reachable by every other rank (same process, or shareable), and src and dst either
 * the same buffer or disjoint. The same answer on every rank (it reads the same descriptors). */
static bool direct_ok(comm_t *c, uint64_t seq)
{
    if (!c->direct || c->nranks < 2)
        return false;
    const desc_t *d = c->seg->desc[seq & 1];
    uint64_t bytes = d[0].count * dtype_size((HcclDataType)d[0].dt);
    if (bytes < DIRECT_MIN)
        return false;
    for (uint32_t r = 0; r < c->nranks; ++r) {
        uint64_t s = d[r].ptr[0], t = d[r].ptr[1];
        if (s != t && s < t + bytes && t < s + bytes)
            return false;
        for (uint32_t q = 0; q < c->nranks; ++q)
            if (atomic_load(&c->seg->ranks[q].pid) != atomic_load(&c->seg->ranks[r].pid)
                && !(d[r].shareable[0] && d[r].shareable[1]))
                return false;
    }
    return true;
}

/* All-reduce reading and writing the peers' buffers (every rank has reached the operation, so its
 * input is ready and its output free; see check_agree): rank p reduces part p of the buffers, in
 * blocks that stay in L1, from every rank's input (in rank order: every rank gets the same bits)
 * and writes the result into every rank's output. Each rank reads count and writes count elements,
 * as a copy does. A last meeting ends it (no rank returns while another still writes its output).
 * An in-place all-reduce is safe: the block of part p of a rank's buffer is read, then written,
 * only by rank p. */
static HcclResult run_allreduce_direct(op_t *o, uint64_t seq)
{
    comm_t *c = o->c;
    uint32_t n = c->nranks, me = c->rank;
    size_t es = dtype_size(o->dt);
    const desc_t *d = c->seg->desc[seq & 1];
    const char *src[MAX_RANKS];
    char *dst[MAX_RANKS];
    int32_t mypid = (int32_t)getpid();
    for (uint32_t r = 0; r < n; ++r) {
        if (r == me || atomic_load(&c->seg->ranks[r].pid) == mypid) {
            src[r] = (const char *)(uintptr_t)d[r].ptr[0];
            dst[r] = (char *)(uintptr_t)d[r].ptr[1];
            continue;
        }
        for (int i = 0; i < 2; ++i) {
            char *m = peer_map(c, r, d[r].map_off[i], d[r].map_len[i]);
            if (!m) {
                char msg[sizeof tls_msg];
                snprintf(msg, sizeof msg, "%s", tls_msg);
                return seg_abort(c, HCCL_E_MEMORY, msg);
            }
            if (i == 0)
                src[r] = m + d[r].ptr_off[0];
            else
                dst[r] = m + d[r].ptr_off[1];
        }
    }
    uint64_t q = (o->count + n - 1) / n;
    q = (q + 63) / 64 * 64;   /* parts start on a cache line */
    uint64_t lo = (uint64_t)me * q < o->count ? (uint64_t)me * q : o->count;
    uint64_t hi = lo + q < o->count ? lo + q : o->count;
    uint64_t blk = DIRECT_BLOCK / es;
    _Alignas(64) char tmp[DIRECT_BLOCK];
    const void *ins[MAX_RANKS];
    for (uint64_t off = lo; off < hi; off += blk) {
        uint64_t len = hi - off < blk ? hi - off : blk;
        for (uint32_t r = 0; r < n; ++r)
            ins[r] = src[r] + off * es;
        reduce_into(tmp, ins, n, len, o->dt, o->op);
        for (uint32_t r = 0; r < n; ++r)
            memcpy(dst[r] + off * es, tmp, len * es);
    }
    atomic_fetch_add(&c->bytes, 2 * n * (hi - lo) * es);
    HcclResult rc = barrier(c, c->exec_timeout, op_name(o->kind));
    if (!rc)
        atomic_fetch_add(&c->direct_ops, 1);
    return rc;
}

/* Collectives: per chunk, each rank writes its part into its slot, all meet, each reads what it
 * needs, all meet again (then the slots may be overwritten). */
static HcclResult run_collective(op_t *o)
{
    comm_t *c = o->c;
    uint32_t n = c->nranks, me = c->rank;
    size_t es = dtype_size(o->dt);
    double to = c->exec_timeout;
    const char *what = op_name(o->kind);
    uint64_t slot = c->seg->slot_bytes, moved = 0;
    HcclResult rc = HCCL_SUCCESS;
    const void *ins[MAX_RANKS];
    /* per-destination segments for reduce-scatter and all-to-all */
    bool segmented = o->kind == OP_REDUCESCATTER || o->kind == OP_ALLTOALL;
    uint64_t per = segmented ? (slot / n) / es : slot / es;   /* elements per step (per segment) */
    for (uint64_t off = 0; off < o->count; off += per) {
        uint64_t k = o->count - off < per ? o->count - off : per, kb = k * es;
        char *mine = slot_of(c, me);
        switch (o->kind) {
        case OP_ALLREDUCE: case OP_REDUCE: case OP_ALLGATHER:
            memcpy(mine, o->src + off * es, kb);
            moved += kb;
            break;
        case OP_BROADCAST:
            if (me == o->root) {
                memcpy(mine, o->dst + off * es, kb);
                moved += kb;
            }
            break;
        default:   /* segment d holds what goes to rank d */
            for (uint32_t d = 0; d < n; ++d)
                memcpy(mine + d * (slot / n), o->src + (d * o->count + off) * es, kb);
            moved += kb * n;
            break;
        }
        if ((rc = barrier(c, to, what)))
            break;
        switch (o->kind) {
        case OP_ALLREDUCE: case OP_REDUCE:
            if (o->kind == OP_ALLREDUCE || me == o->root) {
                for (uint32_t r = 0; r < n; ++r)
                    ins[r] = slot_of(c, r);
                reduce_into(o->dst + off * es, ins, n, k, o->dt, o->op);
                moved += kb * n;
            }
            break;
        case OP_BROADCAST:
            if (me != o->root) {
                memcpy(o->dst + off * es, slot_of(c, o->root), kb);
                moved += kb;
            }
            break;
        case OP_ALLGATHER:
            for (uint32_t r = 0; r < n; ++r)
                memcpy(o->dst + (r * o->count + off) * es, slot_of(c, r), kb);
            moved += kb * n;
            break;
        case OP_REDUCESCATTER:
            for (uint32_t r = 0; r < n; ++r)
                ins[r] = slot_of(c, r) + me * (slot / n);
            reduce_into(o->dst + off * es, ins, n, k, o->dt, o->op);
            moved += kb * n;
            break;
        default:   /* all-to-all: block s of the output comes from rank s */
            for (uint32_t r = 0; r < n; ++r)
                memcpy(o->dst + (r * o->count + off) * es, slot_of(c, r) + me * (slot / n), kb);
            moved += kb * n;
            break;
        }
        if ((rc = barrier(c, to, what)))
            break;
    }
    atomic_fetch_add(&c->bytes, moved);
    return rc;
}

/* Point-to-point: a one-chunk channel per (sender, receiver) pair; every operation of a group
 * progresses together, so a send and a receive between the same two ranks never wait on each other. */
static HcclResult run_p2p(op_t *o)
{
    comm_t *c = o->c;
    uint64_t pb = c->seg->p2p_bytes, t0 = now_ns(), deadline = t0 + (uint64_t)(c->exec_timeout * 1e9);
    uint64_t idle_since = 0, moved = 0, sleep_ns = 1000;
    HcclResult rc = HCCL_SUCCESS;
    for (;;) {
        bool all_done = true, progress = false;
        for (uint32_t i = 0; i < o->np; ++i) {
            p2p_t *p = &o->p2p[i];
            if (p->done >= p->bytes && (p->bytes > 0 || p->chunks > 0))
                continue;
            all_done = false;
            if (p->send) {
                chan_t *ch = chan_of(c, c->rank, p->peer);
                if (atomic_load(&ch->written) != atomic_load(&ch->read))
                    continue;   /* the previous chunk is still there */
                uint64_t len = p->bytes - p->done < pb ? p->bytes - p->done : pb;
                memcpy(chan_data(c, c->rank, p->peer), p->buf + p->done, len);
                ch->len = len;
                ch->total = p->bytes;
                atomic_fetch_add(&ch->written, 1);
                p->done += len;
                p->chunks++;
                moved += len;
            } else {
                chan_t *ch = chan_of(c, p->peer, c->rank);
                if (atomic_load(&ch->written) == atomic_load(&ch->read))
                    continue;
                uint64_t len = ch->len;
                if (ch->total != p->bytes || p->done + len > p->bytes) {
                    char msg[200];
                    snprintf(msg, sizeof msg, "rank %u received %llu bytes from rank %u but expected %llu", c->rank,
                             (unsigned long long)ch->total, p->peer, (unsigned long long)p->bytes);
                    rc = seg_abort(c, HCCL_E_PARA, msg);
                    goto out;
                }
                memcpy(p->buf + p->done, chan_data(c, p->peer, c->rank), len);
                atomic_fetch_add(&ch->read, 1);
                p->done += len;
                p->chunks++;
                moved += len;
            }
            progress = true;
        }
        if (all_done)
            break;
        if (progress) {
            sleep_ns = 1000;
            idle_since = 0;
            continue;
        }
        if ((rc = seg_broken(c)))
            break;
        uint64_t t = now_ns();
        if (t >= deadline) {
            rc = timed_out(c, op_name(OP_P2P), c->exec_timeout);
            break;
        }
        if (!idle_since)
            idle_since = t;
        if (t - idle_since > POLL_NS) {
            if ((rc = check_peers(c)))
                break;
            idle_since = t;
        }
        struct timespec ts = {0, (long)sleep_ns};
        nanosleep(&ts, NULL);
        if (sleep_ns < 200000)
            sleep_ns *= 2;
    }
out:
    atomic_fetch_add(&c->wait_ns, now_ns() - t0);
    atomic_fetch_add(&c->bytes, moved);
    return rc;
}

static aclError op_task(void *arg)
{
    op_t *o = arg;
    o->ran = true;
    HcclResult rc = HCCL_SUCCESS;
    bool mismatch = false;
    if (o->kind != OP_P2P) {
        rc = check_agree(o, &mismatch);
    }
    if (!rc) {
        uint64_t seq = atomic_load(&o->c->seq) - 1;   /* this operation's (check_agree took it) */
        rc = o->kind == OP_P2P ? run_p2p(o)
             : o->kind == OP_ALLREDUCE ? (direct_ok(o->c, seq) ? run_allreduce_direct(o, seq) : run_allreduce(o))
             : o->kind == OP_BARRIER ? HCCL_SUCCESS : run_collective(o);
    }
    if (rc == HCCL_SUCCESS) {
        atomic_fetch_add(&o->c->ops, 1);
        return ACL_SUCCESS;
    }
    int32_t zero = 0;
    if (!mismatch)   /* a disagreement fails the call, not the communicator */
        atomic_compare_exchange_strong(&o->c->async_err, &zero, (int32_t)rc);
    const char *m = hcclsimGetLastErrorMessage();
    char msg[600];
    snprintf(msg, sizeof msg, "%s failed with HCCL error %d (%s): %s", op_name(o->kind), (int)rc,
             HcclGetErrorString(rc), m ? m : o->c->seg->abort_msg);
    aclError code = mismatch ? ACL_ERROR_RT_PARAM_INVALID
                    : rc == HCCL_E_TIMEOUT ? ACL_ERROR_RT_COMM_OP_RETRY_FAIL : ACL_ERROR_RT_SUSPECT_REMOTE_ERROR;
    aclsimSetRecentErrMsg(code, msg);
    return code;
}

static void op_release(void *arg)
{
    op_t *o = arg;
    if (!o->ran) {   /* skipped: the stream had an earlier error; the peers must not wait for us */
        char msg[200];
        snprintf(msg, sizeof msg, "rank %u skipped %s because its stream had failed earlier", o->c->rank,
                 op_name(o->kind));
        seg_abort(o->c, HCCL_E_INTERNAL, msg);
        int32_t zero = 0;
        atomic_compare_exchange_strong(&o->c->async_err, &zero, (int32_t)HCCL_E_INTERNAL);
    }
    comm_unref(o->c);
    free(o->p2p);
    free(o);
}

static HcclResult enqueue(op_t *o, aclrtStream stream, const char *api)
{
    uint64_t cost = (uint64_t)(o->c->exec_timeout * 1e9);   /* never inline: it waits for the peers */
    aclError e = aclsimLaunchTask(stream, op_task, o, op_release, ACLSIM_ENGINE_NONE, 0, cost);
    if (e != ACL_SUCCESS) {
        const char *m = aclGetRecentErrMsg();
        HcclResult rc = herr(HCCL_E_RUNTIME, "%s: the runtime refused the task (%d): %s", api, (int)e, m ? m : "");
        comm_unref(o->c);
        free(o->p2p);
        free(o);
        return rc;
    }
    return HCCL_SUCCESS;
}

/* checks common to every operation; on success *out is a new op holding a reference to the comm */
static HcclResult op_new(const char *api, HcclComm comm, aclrtStream stream, int kind, HcclDataType dt, op_t **out)
{
    if (dt != HCCL_DATA_TYPE_RESERVED && dtype_size(dt) == 0)
        return herr(HCCL_E_PARA, "%s: unsupported data type %d", api, (int)dt);
    GET_COMM(api, comm, c);
    HcclResult rc = seg_broken(c);
    if (rc) {
        comm_unref(c);
        return rc;
    }
    int32_t sdev = -1;
    if (stream ? aclsimStreamGetDevice(stream, &sdev) != ACL_SUCCESS : aclrtGetDevice(&sdev) != ACL_SUCCESS) {
        comm_unref(c);
        return herr(HCCL_E_PARA, "%s: invalid stream %p (or no current device for a NULL stream)", api, stream);
    }
    if (sdev != c->device) {
        comm_unref(c);
        return herr(HCCL_E_PARA, "%s: the stream belongs to device %d but rank %u's communicator to device %d", api,
                    sdev, c->rank, c->device);
    }
    op_t *o = calloc(1, sizeof *o);
    if (!o) {
        comm_unref(c);
        return herr(HCCL_E_MEMORY, "%s: out of host memory", api);
    }
    o->kind = kind;
    o->c = c;
    o->dt = dt;
    *out = o;
    return HCCL_SUCCESS;
}

static void op_free(op_t *o)
{
    comm_unref(o->c);
    free(o->p2p);
    free(o);
}

static HcclResult check_buf(const char *api, op_t *o, const void *p, uint64_t bytes, const char *what)
{
    if (!p)
        return herr(HCCL_E_PTR, "%s: %s must not be NULL", api, what);
    if (aclsimCheckKernelOperand(p, bytes, o->c->device, what, NULL) != ACL_SUCCESS) {
        const char *m = aclGetRecentErrMsg();
        return herr(HCCL_E_PARA, "%s: %s", api, m ? m : what);
    }
    return HCCL_SUCCESS;
}

static HcclResult check_mul(const char *api, uint64_t count, uint64_t k, size_t es, uint64_t *bytes)
{
    if (count > UINT64_MAX / es / (k ? k : 1))
        return herr(HCCL_E_PARA, "%s: count %llu overflows", api, (unsigned long long)count);
    *bytes = count * k * es;
    return HCCL_SUCCESS;
}

static HcclResult reduction(const char *api, int kind, void *sendBuf, void *recvBuf, uint64_t count,
                            HcclDataType dt, HcclReduceOp op, uint32_t root, HcclComm comm, aclrtStream stream)
{
    if (op != HCCL_REDUCE_SUM && op != HCCL_REDUCE_PROD && op != HCCL_REDUCE_MAX && op != HCCL_REDUCE_MIN)
        return herr(HCCL_E_PARA, "%s: unknown reduce op %d", api, (int)op);
    if (dtype_size(dt) && !reducible(dt))
        return herr(HCCL_E_NOT_SUPPORT, "%s: data type %d cannot be reduced", api, (int)dt);
    op_t *o;
    HcclResult rc = op_new(api, comm, stream, kind, dt, &o);
    if (rc)
        return rc;
    size_t es = dtype_size(dt);
    uint32_t n = o->c->nranks;
    uint64_t in_b = 0, out_b = 0;
    if ((rc = check_mul(api, count, kind == OP_REDUCESCATTER ? n : 1, es, &in_b))
        || (rc = check_mul(api, count, 1, es, &out_b)))
        goto fail;
    if (kind == OP_REDUCE && root >= n) {
        rc = herr(HCCL_E_PARA, "%s: root %u out of range for %u ranks", api, root, n);
        goto fail;
    }
    if (count == 0) {
        op_free(o);
        return HCCL_SUCCESS;
    }
    if ((rc = check_buf(api, o, sendBuf, in_b, "sendBuf")))
        goto fail;
    if ((kind != OP_REDUCE || o->c->rank == root) && (rc = check_buf(api, o, recvBuf, out_b, "recvBuf")))
        goto fail;
    o->src = sendBuf;
    o->dst = recvBuf;
    o->count = count;
    o->op = op;
    o->root = root;
    return enqueue(o, stream, api);
fail:
    op_free(o);
    return rc;
}

API HcclResult HcclAllReduce(void *sendBuf, void *recvBuf, uint64_t count, HcclDataType dataType,
                             HcclReduceOp op, HcclComm comm, aclrtStream stream)
{
    return reduction("HcclAllReduce", OP_ALLREDUCE, sendBuf, recvBuf, count, dataType, op, 0, comm, stream);
}

API HcclResult HcclReduce(void *sendBuf, void *recvBuf, uint64_t count, HcclDataType dataType,
                          HcclReduceOp op, uint32_t root, HcclComm comm, aclrtStream stream)
{
    return reduction("HcclReduce", OP_REDUCE, sendBuf, recvBuf, count, dataType, op, root, comm, stream);
}

API HcclResult HcclReduceScatter(void *sendBuf, void *recvBuf, uint64_t recvCount, HcclDataType dataType,
                                 HcclReduceOp op, HcclComm comm, aclrtStream stream)
{
    return reduction("HcclReduceScatter", OP_REDUCESCATTER, sendBuf, recvBuf, recvCount, dataType, op, 0, comm,
                     stream);
}

API HcclResult HcclBroadcast(void *buf, uint64_t count, HcclDataType dataType, uint32_t root, HcclComm comm,
                             aclrtStream stream)
{
    static const char api[] = "HcclBroadcast";
    op_t *o;
    HcclResult rc = op_new(api, comm, stream, OP_BROADCAST, dataType, &o);
    if (rc)
        return rc;
    uint64_t b = 0;
    if ((rc = check_mul(api, count, 1, dtype_size(dataType), &b)))
        goto fail;
    if (root >= o->c->nranks) {
        rc = herr(HCCL_E_PARA, "%s: root %u out of range for %u ranks", api, root, o->c->nranks);
        goto fail;
    }
    if (count == 0) {
        op_free(o);
        return HCCL_SUCCESS;
    }
    if ((rc = check_buf(api, o, buf, b, "buf")))
        goto fail;
    o->dst = buf;
    o->count = count;
    o->root = root;
    return enqueue(o, stream, api);
fail:
    op_free(o);
    return rc;
}

API HcclResult HcclAllGather(void *sendBuf, void *recvBuf, uint64_t sendCount, HcclDataType dataType,
                             HcclComm comm, aclrtStream stream)
{
    static const char api[] = "HcclAllGather";
    op_t *o;
    HcclResult rc = op_new(api, comm, stream, OP_ALLGATHER, dataType, &o);
    if (rc)
        return rc;
    size_t es = dtype_size(dataType);
    uint64_t in_b = 0, out_b = 0;
    if ((rc = check_mul(api, sendCount, 1, es, &in_b)) || (rc = check_mul(api, sendCount, o->c->nranks, es, &out_b)))
        goto fail;
    if (sendCount == 0) {
        op_free(o);
        return HCCL_SUCCESS;
    }
    if ((rc = check_buf(api, o, sendBuf, in_b, "sendBuf")) || (rc = check_buf(api, o, recvBuf, out_b, "recvBuf")))
        goto fail;
    o->src = sendBuf;
    o->dst = recvBuf;
    o->count = sendCount;
    return enqueue(o, stream, api);
fail:
    op_free(o);
    return rc;
}

API HcclResult HcclAlltoAll(const void *sendBuf, uint64_t sendCount, HcclDataType sendType,
                            const void *recvBuf, uint64_t recvCount, HcclDataType recvType,
                            HcclComm comm, aclrtStream stream)
{
    static const char api[] = "HcclAlltoAll";
    if (sendType != recvType || sendCount != recvCount)
        return herr(HCCL_E_PARA, "%s: send and receive counts and types must match (%llu/%d vs %llu/%d)", api,
                    (unsigned long long)sendCount, (int)sendType, (unsigned long long)recvCount, (int)recvType);
    op_t *o;
    HcclResult rc = op_new(api, comm, stream, OP_ALLTOALL, sendType, &o);
    if (rc)
        return rc;
    uint64_t b = 0;
    if ((rc = check_mul(api, sendCount, o->c->nranks, dtype_size(sendType), &b)))
        goto fail;
    if (sendCount == 0) {
        op_free(o);
        return HCCL_SUCCESS;
    }
    if ((rc = check_buf(api, o, sendBuf, b, "sendBuf")) || (rc = check_buf(api, o, recvBuf, b, "recvBuf")))
        goto fail;
    if ((const char *)sendBuf < (const char *)recvBuf + b && (const char *)recvBuf < (const char *)sendBuf + b) {
        rc = herr(HCCL_E_PARA, "%s: sendBuf and recvBuf overlap", api);
        goto fail;
    }
    o->src = sendBuf;
    o->dst = (char *)recvBuf;
    o->count = sendCount;
    return enqueue(o, stream, api);
fail:
    op_free(o);
    return rc;
}

API HcclResult HcclBarrier(HcclComm comm, aclrtStream stream)
{
    op_t *o;
    HcclResult rc = op_new("HcclBarrier", comm, stream, OP_BARRIER, HCCL_DATA_TYPE_RESERVED, &o);
    if (rc)
        return rc;
    return enqueue(o, stream, "HcclBarrier");
}

/* ------------------------------------------------------------------ point to point and groups */

typedef struct {
    HcclComm comm;
    aclrtStream stream;
    op_t *op;
} pending_t;

static __thread int tls_group_depth;
static __thread pending_t *tls_pending;
static __thread uint32_t tls_npending, tls_cap;

static HcclResult p2p(const char *api, int send, void *buf, uint64_t count, HcclDataType dt, uint32_t peer,
                      HcclComm comm, aclrtStream stream)
{
    op_t *o;
    HcclResult rc = op_new(api, comm, stream, OP_P2P, dt, &o);
    if (rc)
        return rc;
    uint64_t b = 0;
    if ((rc = check_mul(api, count, 1, dtype_size(dt), &b)))
        goto fail;
    if (peer >= o->c->nranks || peer == o->c->rank) {
        rc = herr(HCCL_E_PARA, "%s: peer rank %u is out of range or this rank (%u of %u)", api, peer, o->c->rank,
                  o->c->nranks);
        goto fail;
    }
    if (count && (rc = check_buf(api, o, buf, b, send ? "sendBuf" : "recvBuf")))
        goto fail;
    p2p_t item = {.send = send, .buf = buf, .bytes = b, .peer = peer};
    if (tls_group_depth > 0) {   /* joins the group's task for this communicator and stream */
        for (uint32_t i = 0; i < tls_npending; ++i) {
            pending_t *pd = &tls_pending[i];
            if (pd->comm == comm && pd->stream == stream) {
                p2p_t *np = realloc(pd->op->p2p, (pd->op->np + 1) * sizeof *np);
                if (!np) {
                    rc = herr(HCCL_E_MEMORY, "%s: out of host memory", api);
                    goto fail;
                }
                pd->op->p2p = np;
                np[pd->op->np++] = item;
                op_free(o);
                return HCCL_SUCCESS;
            }
        }
        if (tls_npending == tls_cap) {
            uint32_t cap = tls_cap ? tls_cap * 2 : 8;
            pending_t *np = realloc(tls_pending, cap * sizeof *np);
            if (!np) {
                rc = herr(HCCL_E_MEMORY, "%s: out of host memory", api);
                goto fail;
            }
            tls_pending = np;
            tls_cap = cap;
        }
        if (!(o->p2p = malloc(sizeof item))) {
            rc = herr(HCCL_E_MEMORY, "%s: out of host memory", api);
            goto fail;
        }
        o->p2p[0] = item;
        o->np = 1;
        tls_pending[tls_npending++] = (pending_t){comm, stream, o};
        return HCCL_SUCCESS;
    }
    if (!(o->p2p = malloc(sizeof item))) {
        rc = herr(HCCL_E_MEMORY, "%s: out of host memory", api);
        goto fail;
    }
    o->p2p[0] = item;
    o->np = 1;
    return enqueue(o, stream, api);
fail:
    op_free(o);
    return rc;
}

API HcclResult HcclSend(void *sendBuf, uint64_t count, HcclDataType dataType, uint32_t destRank,
                        HcclComm comm, aclrtStream stream)
{
    return p2p("HcclSend", 1, sendBuf, count, dataType, destRank, comm, stream);
}

API HcclResult HcclRecv(void *recvBuf, uint64_t count, HcclDataType dataType, uint32_t srcRank,
                        HcclComm comm, aclrtStream stream)
{
    return p2p("HcclRecv", 0, recvBuf, count, dataType, srcRank, comm, stream);
}

API HcclResult HcclGroupStart(void)
{
    tls_group_depth++;
    return HCCL_SUCCESS;
}

API HcclResult HcclGroupEnd(void)
{
    if (tls_group_depth <= 0)
        return herr(HCCL_E_PARA, "HcclGroupEnd: no HcclGroupStart to end");
    if (--tls_group_depth > 0)
        return HCCL_SUCCESS;
    HcclResult rc = HCCL_SUCCESS;
    for (uint32_t i = 0; i < tls_npending; ++i) {
        HcclResult r = enqueue(tls_pending[i].op, tls_pending[i].stream, "HcclGroupEnd");
        if (r && !rc)
            rc = r;
    }
    tls_npending = 0;
    return rc;
}
