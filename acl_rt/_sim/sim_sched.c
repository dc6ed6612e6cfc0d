/* canna simulator: how the simulator's threads wait and how many run the AI cores' blocks.
 *
 * Waking a sleeping thread costs tens of microseconds on a small (virtual) machine -- a futex
 * round trip measured ~40 us on the 2-core box of docs/DESIGN.md §9, against ~0.4 us between two
 * spinning threads -- so an idle thread that expects work soon spins for a bounded time
 * (CANNA_SIM_SPIN_US, default SIM_SPIN_DEFAULT_NS) before it sleeps, as CUDA's "schedule auto"
 * does. Spinning is only worth it on an idle CPU, so it is rationed:
 *
 *   - the simulator's threads that are computing (a task, a block) or spinning are counted in
 *     g_busy; a thread may start spinning only while that count stays within the CPUs this process
 *     may use (affinity mask and cgroup quota), so spinners never take a CPU a computing thread of
 *     ours needs;
 *   - a spinner that notices it was descheduled (a gap of SIM_PREEMPT_NS between two looks at the
 *     clock: another process or thread wanted its CPU) stops at once and switches spinning off for
 *     SIM_QUIET_NS: on an oversubscribed machine every wait sleeps.
 *
 * Sleeping uses futexes (sim_futex_*) for the AI-core pool and condition variables elsewhere. */
#include "sim.h"

#include <dlfcn.h>
#include <limits.h>
#include <sched.h>
#include <unistd.h>
#include <linux/futex.h>
#include <sys/syscall.h>

#define SIM_PREEMPT_NS 50000ull         /* a spinner that lost the CPU this long was preempted */
#define SIM_QUIET_NS (20ull * 1000 * 1000)   /* then nobody spins for this long */

/* The library starts threads that outlive any call into it (AI-core threads, stream workers, the
 * kernel watchdog). A loader that unloads it while they run -- cffi dlclose()s a library when its
 * Python object is collected, e.g. at interpreter shutdown -- would pull the code from under them
 * (a crash at exit). Pin it once loaded: RTLD_NODELETE keeps it mapped until the process ends. */
__attribute__((constructor)) static void sim_pin_library(void)
{
    Dl_info info;
    if (dladdr((void *)&sim_pin_library, &info) && info.dli_fname)
        (void)dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD | RTLD_NODELETE);
}

static uint32_t g_cpus = 1;
static uint32_t g_threads = 1;
static uint64_t g_spin_ns;
static _Atomic uint32_t g_busy;
static _Atomic uint32_t g_spinning;   /* of the busy threads, those spinning (waiting, not computing) */
static atomic_uint_fast64_t g_quiet_until;
static __thread uint32_t tls_busy;

/* ceil(quota / period) of a cgroup CPU limit, 0 when there is none or it cannot be read */
static uint32_t cgroup_cpu_limit(void)
{
    long long quota = -1, period = 0;
    FILE *f = fopen("/sys/fs/cgroup/cpu.max", "r");   /* cgroup v2: "max 100000" or "200000 100000" */
    if (f) {
        char q[32] = "";
        if (fscanf(f, "%31s %lld", q, &period) == 2 && strcmp(q, "max") != 0)
            quota = atoll(q);
        fclose(f);
    } else if ((f = fopen("/sys/fs/cgroup/cpu/cpu.cfs_quota_us", "r"))) {   /* cgroup v1 */
        if (fscanf(f, "%lld", &quota) != 1)
            quota = -1;
        fclose(f);
        if ((f = fopen("/sys/fs/cgroup/cpu/cpu.cfs_period_us", "r"))) {
            if (fscanf(f, "%lld", &period) != 1)
                period = 0;
            fclose(f);
        }
    }
    if (quota <= 0 || period <= 0)
        return 0;
    long long n = (quota + period - 1) / period;
    return n > 0 && n < INT_MAX ? (uint32_t)n : 0;
}

uint32_t sim_host_cpus(void)
{
    long n = 0;
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0)
        n = CPU_COUNT(&set);
    if (n <= 0)
        n = sysconf(_SC_NPROCESSORS_ONLN);
    if (n <= 0)
        n = 1;
    uint32_t lim = cgroup_cpu_limit();
    if (lim && (long)lim < n)
        n = lim;
    return n > SIM_MAX_THREADS ? SIM_MAX_THREADS : (uint32_t)n;
}

void sim_sched_setup(void)
{
    g_cpus = sim_host_cpus();
    g_threads = g_cfg.threads ? g_cfg.threads : g_cpus;
    g_spin_ns = g_cfg.spin_ns;
}

uint32_t sim_sched_cpus(void) { return g_cpus; }
uint32_t sim_sched_threads(void) { return g_threads; }
uint32_t sim_sched_busy(void) { return atomic_load_explicit(&g_busy, memory_order_relaxed); }

uint32_t sim_sched_computing(void)
{
    uint32_t b = atomic_load_explicit(&g_busy, memory_order_relaxed);
    uint32_t s = atomic_load_explicit(&g_spinning, memory_order_relaxed);
    return b > s ? b - s : 0;
}

void sim_busy_enter(void)
{
    if (tls_busy++ == 0)
        atomic_fetch_add(&g_busy, 1);
}

void sim_busy_leave(void)
{
    if (--tls_busy == 0)
        atomic_fetch_sub(&g_busy, 1);
}

bool sim_spin_start(sim_spin_t *sp)
{
    sp->reserved = false;
    if (!g_spin_ns)
        return false;
    uint64_t now = sim_now_ns();
    if (now < atomic_load_explicit(&g_quiet_until, memory_order_relaxed))
        return false;
    if (tls_busy) {   /* already counted (a caller waiting for its own blocks) */
        if (atomic_load(&g_busy) > g_cpus)
            return false;
    } else {
        uint32_t b = atomic_load(&g_busy);
        do {
            if (b >= g_cpus)
                return false;
        } while (!atomic_compare_exchange_weak(&g_busy, &b, b + 1));
        sp->reserved = true;
    }
    sp->t0 = sp->last = now;
    sp->i = 0;
    atomic_fetch_add_explicit(&g_spinning, 1, memory_order_relaxed);
    return true;
}

bool sim_spin_more(sim_spin_t *sp)
{
    sim_cpu_relax();
    if ((++sp->i & 15) != 0)
        return true;
    uint64_t now = sim_now_ns();
    if (now - sp->last > SIM_PREEMPT_NS) {   /* we lost the CPU: someone else needs it */
        atomic_store_explicit(&g_quiet_until, now + SIM_QUIET_NS, memory_order_relaxed);
        return false;
    }
    sp->last = now;
    return now - sp->t0 < g_spin_ns;
}

void sim_spin_stop(sim_spin_t *sp)
{
    atomic_fetch_sub_explicit(&g_spinning, 1, memory_order_relaxed);
    if (sp->reserved) {
        sp->reserved = false;
        atomic_fetch_sub(&g_busy, 1);
    }
}

int sim_futex_wait(_Atomic uint32_t *word, uint32_t val, const struct timespec *deadline)
{
    /* FUTEX_WAIT_BITSET takes an absolute CLOCK_MONOTONIC deadline */
    long r = syscall(SYS_futex, (uint32_t *)word, FUTEX_WAIT_BITSET_PRIVATE, val, deadline, NULL,
                     FUTEX_BITSET_MATCH_ANY);
    return r == 0 ? 0 : errno;
}

void sim_futex_wake(_Atomic uint32_t *word, int n)
{
    syscall(SYS_futex, (uint32_t *)word, FUTEX_WAKE_PRIVATE, n, NULL, NULL, 0);
}
