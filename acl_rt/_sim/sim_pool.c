/* canna simulator: the per-device pool of AI-core threads behind aclsimParallelFor.
 *
 * A pool has CANNA_SIM_THREADS - 1 threads (default: the CPUs this process may use, minus one):
 * the thread calling aclsimParallelFor -- a stream worker, or the thread that runs a task inline or
 * while synchronizing -- runs blocks of its own job too, so together they fill the CPUs, and a job
 * always completes even when every pool thread is busy with other jobs, the pool is stopping, or
 * there is no pool thread at all.
 *
 * A job lives on its caller's stack. Blocks are claimed with an atomic counter (no lock per
 * block), so a job may have many more blocks than threads at little cost: that balances the load
 * when a thread starts late or loses its CPU. The job list is under the pool lock; a pool thread
 * takes a job from it (counting itself in the job's `pending`) and the caller removes its job from
 * the list before waiting for `pending` to reach zero, so no pool thread can touch the job after
 * the caller returns.
 *
 * Idle pool threads spin for a while before sleeping (sim_sched.c decides whether spinning is
 * worth it); a caller wakes sleeping ones with a futex only when it has blocks to spare. A call
 * from a pool thread (a block that itself calls aclsimParallelFor) runs its blocks serially on that
 * thread, so pool threads never wait for each other. */
#include "sim.h"

#include <signal.h>
#include <unistd.h>

typedef struct sim_pfjob {
    struct sim_pfjob *next;        /* in pool->jobs, under pool->lock */
    bool queued;                   /* under pool->lock */
    aclsimBlockFn fn;
    void *arg;
    uint32_t n;
    atomic_uint_fast64_t next_block;   /* next unclaimed block (may run past n) */
    _Atomic uint32_t pending;      /* blocks not finished + pool threads holding the job */
    aclError rc;                   /* result of the lowest failing block (under pool->lock) */
    uint32_t rc_idx;
    sim_pool_t *pool;              /* (a host team's threads run it) */
} sim_pfjob_t;

static __thread bool tls_in_pool;
/* aclsimSetHostTeam: the thread team this thread's jobs run on instead of the pool (NULL: the pool) */
static __thread aclsimHostTeamFn tls_team;
static __thread void *tls_team_ctx;

/* caller holds pool->lock */
static void dequeue_locked(sim_pool_t *pool, sim_pfjob_t *j)
{
    if (!j->queued)
        return;
    sim_pfjob_t **pp = &pool->jobs, *prev = NULL;
    while (*pp && *pp != j) {
        prev = *pp;
        pp = &(*pp)->next;
    }
    if (*pp) {
        *pp = j->next;
        if (pool->jobs_tail == j)
            pool->jobs_tail = prev;
    }
    j->queued = false;
}

/* one unit of j->pending is done; the last one tells the waiting callers (j is not touched after
 * the decrement: its caller may return as soon as it sees zero) */
static void job_release(sim_pool_t *pool, sim_pfjob_t *j)
{
    if (atomic_fetch_sub(&j->pending, 1) == 1) {
        atomic_fetch_add(&pool->done_gen, 1);
        if (atomic_load(&pool->done_waiters))
            sim_futex_wake(&pool->done_gen, INT32_MAX);
    }
}

/* run block idx of j: the job keeps the result of its lowest failing block */
static void run_block(sim_pool_t *pool, sim_pfjob_t *j, uint64_t idx)
{
    aclError rc = j->fn((uint32_t)idx, j->n, j->arg);
    if (SIM_UNLIKELY(rc != ACL_SUCCESS)) {
        pthread_mutex_lock(&pool->lock);
        if (j->rc == ACL_SUCCESS || idx < j->rc_idx) {
            j->rc = rc;
            j->rc_idx = (uint32_t)idx;
        }
        pthread_mutex_unlock(&pool->lock);
    }
    job_release(pool, j);
}

/* claim and run blocks of j until none is left */
static void claim_blocks(sim_pool_t *pool, sim_pfjob_t *j)
{
    for (;;) {
        uint64_t idx = atomic_fetch_add_explicit(&j->next_block, 1, memory_order_relaxed);
        if (idx >= j->n)
            break;
        run_block(pool, j, idx);
    }
}

/* ... and take j off the pool's list (nobody can pick it up any more) */
static void run_blocks(sim_pool_t *pool, sim_pfjob_t *j)
{
    claim_blocks(pool, j);
    pthread_mutex_lock(&pool->lock);
    dequeue_locked(pool, j);
    pthread_mutex_unlock(&pool->lock);
}

/* ------------------------------------------------------------------ deferred worker wake-ups */

bool sim_pool_defer_wake(sim_stream_t *s)
{
    sim_pool_t *pool = &s->dev->pool;
    bool deferred = false;
    pthread_mutex_lock(&pool->lock);
    if (pool->idle_spinners && !atomic_load(&pool->stop)) {
        if (!s->kick_pending) {
            s->kick_pending = true;
            sim_obj_ref(&s->obj);
            s->kick_next = pool->kicks;
            pool->kicks = s;
            if (!atomic_load_explicit(&pool->kick_first, memory_order_relaxed))
                atomic_store_explicit(&pool->kick_first, sim_now_ns(), memory_order_relaxed);
        }
        deferred = true;
    }
    pthread_mutex_unlock(&pool->lock);
    return deferred;
}

/* caller holds pool->lock: detach every pending wake-up */
static sim_stream_t *kicks_take_locked(sim_pool_t *pool)
{
    sim_stream_t *l = pool->kicks;
    pool->kicks = NULL;
    atomic_store_explicit(&pool->kick_first, 0, memory_order_relaxed);
    for (sim_stream_t *s = l; s; s = s->kick_next)
        s->kick_pending = false;
    return l;
}

static void kicks_deliver(sim_stream_t *l)
{
    while (l) {
        sim_stream_t *next = l->kick_next;
        sim_stream_kick(l);
        l = next;
    }
}

/* ------------------------------------------------------------------ pool threads */

/* wake up to `want` sleeping pool threads, no more than there are CPUs not computing for us to run
 * them. Spinning threads do not count: a spinner gives its CPU up within CANNA_SIM_SPIN_US, and a
 * job's threads are chosen once, at its start (counting them made a job that started while a
 * synchronizing thread spun run all its blocks on one thread) */
static void wake_sleepers(sim_pool_t *pool, uint32_t want, uint32_t nthreads)
{
    uint32_t sleepers = atomic_load(&pool->sleepers);
    if (!sleepers)
        return;
    uint32_t busy = sim_sched_computing(), cpus = sim_sched_cpus();
    uint32_t room = busy < cpus ? cpus - busy : 0;
    if (want > nthreads)
        want = nthreads;
    if (want > room)
        want = room;
    if (want > sleepers)
        want = sleepers;
    if (want)
        sim_futex_wake(&pool->work_gen, (int)want);
}

/* the caller's first blocks of a job estimated short: run them one by one, measuring, until the
 * blocks left look worth SIM_WAKE_MIN_NS of work; returns how many are left then (0: none, the
 * job ran here) */
static uint64_t run_blocks_timed(sim_pool_t *pool, sim_pfjob_t *j)
{
    uint64_t t0 = sim_now_ns(), ran = 0;
    for (;;) {
        uint64_t idx = atomic_fetch_add_explicit(&j->next_block, 1, memory_order_relaxed);
        if (idx >= j->n)
            return 0;
        run_block(pool, j, idx);
        ran++;
        uint64_t claimed = atomic_load_explicit(&j->next_block, memory_order_relaxed);
        if (claimed >= j->n)
            return 0;
        uint64_t left = j->n - claimed, per = (sim_now_ns() - t0) / ran;
        if (left * per >= SIM_WAKE_MIN_NS)
            return left;
    }
}

static void *pool_thread(void *arg)
{
    sim_pool_t *pool = arg;
    tls_in_pool = true;
    for (;;) {
        uint32_t seen = atomic_load(&pool->work_gen);
        pthread_mutex_lock(&pool->lock);
        sim_pfjob_t *j = pool->jobs;
        if (j)
            atomic_fetch_add(&j->pending, 1);   /* the caller waits for us to let go of j */
        bool stop = atomic_load(&pool->stop);
        pthread_mutex_unlock(&pool->lock);
        if (j) {
            sim_busy_enter();
            run_blocks(pool, j);
            job_release(pool, j);
            sim_busy_leave();
            continue;
        }
        if (stop)
            break;
        /* idle: spin a while for the next job (delivering deferred worker wake-ups when they are
         * due), then sleep until one is queued */
        sim_spin_t sp;
        if (sim_spin_start(&sp)) {
            pthread_mutex_lock(&pool->lock);
            pool->idle_spinners++;
            pthread_mutex_unlock(&pool->lock);
            while (atomic_load_explicit(&pool->work_gen, memory_order_acquire) == seen && sim_spin_more(&sp)) {
                uint64_t k = atomic_load_explicit(&pool->kick_first, memory_order_relaxed);
                if (k && sim_now_ns() - k >= SIM_KICK_DELAY_NS) {
                    pthread_mutex_lock(&pool->lock);
                    sim_stream_t *l = kicks_take_locked(pool);
                    pthread_mutex_unlock(&pool->lock);
                    kicks_deliver(l);
                }
            }
            pthread_mutex_lock(&pool->lock);
            pool->idle_spinners--;
            sim_stream_t *l = kicks_take_locked(pool);   /* nobody would deliver them now */
            pthread_mutex_unlock(&pool->lock);
            kicks_deliver(l);
            sim_spin_stop(&sp);
        }
        if (atomic_load(&pool->work_gen) != seen)
            continue;
        atomic_fetch_add(&pool->sleepers, 1);
        if (atomic_load(&pool->work_gen) == seen)
            sim_futex_wait(&pool->work_gen, seen, NULL);
        atomic_fetch_sub(&pool->sleepers, 1);
    }
    return NULL;
}

/* caller holds pool->lock */
static void pool_start_locked(sim_pool_t *pool)
{
    if (pool->started || atomic_load(&pool->stop))
        return;
    pool->started = true;
    uint32_t n = sim_sched_threads() - 1;   /* the caller of each job is the other thread */
    if (!n)
        return;
    pool->threads = calloc(n, sizeof(pthread_t));
    if (!pool->threads)
        return;
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    for (uint32_t i = 0; i < n; i++) {
        if (pthread_create(&pool->threads[pool->nthreads], NULL, pool_thread, pool) != 0)
            break;
        pool->nthreads++;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
}

void sim_pools_stop(void)
{
    if (!atomic_load(&g_cfg_loaded))
        return;
    for (int32_t i = 0; i < g_cfg.ndev; i++) {
        sim_pool_t *pool = &g_dev[i].pool;
        pthread_mutex_lock(&pool->lock);
        if (!pool->started) {
            pthread_mutex_unlock(&pool->lock);
            continue;
        }
        atomic_store(&pool->stop, 1);
        pthread_t *th = pool->threads;
        uint32_t n = pool->nthreads;
        pthread_mutex_unlock(&pool->lock);
        atomic_fetch_add(&pool->work_gen, 1);   /* spinners see it; sleepers are woken */
        sim_futex_wake(&pool->work_gen, INT32_MAX);
        for (uint32_t k = 0; k < n; k++)
            pthread_join(th[k], NULL);
        pthread_mutex_lock(&pool->lock);
        free(pool->threads);
        pool->threads = NULL;
        pool->nthreads = 0;
        pool->started = false;
        atomic_store(&pool->stop, 0);   /* restarted lazily after the next aclInit */
        pthread_mutex_unlock(&pool->lock);
    }
}

/* a job's failure: the lowest failing block's code, with its index */
static aclError blocks_failed(const char *api, aclError rc, uint32_t idx, uint32_t n)
{
    return sim_err(rc, "%s: block %u of %u failed with error %d", api, idx, n, rc);
}

/* ------------------------------------------------------------------ a lent host team */

SIM_API aclError aclsimSetHostTeam(aclsimHostTeamFn team, void *ctx, aclsimHostTeamFn *prevTeam, void **prevCtx)
{
    if (prevTeam)
        *prevTeam = tls_team;
    if (prevCtx)
        *prevCtx = tls_team_ctx;
    tls_team = team;
    tls_team_ctx = team ? ctx : NULL;
    return ACL_SUCCESS;
}

/* one team thread's share of a job: blocks until none is left. A block that itself calls
 * aclsimParallelFor runs its blocks serially on that thread (as on a pool thread). */
static void team_work(void *arg)
{
    sim_pfjob_t *j = arg;
    bool was = tls_in_pool;
    tls_in_pool = true;
    sim_busy_enter();
    claim_blocks(j->pool, j);
    sim_busy_leave();
    tls_in_pool = was;
}

/* the job on this thread's team: the first blocks here (timed, unless the task is known to be long),
 * the rest over the team once they look worth it, what the team left here too */
static void team_run(sim_pfjob_t *j)
{
    uint64_t left = tls_task_cost_ns >= SIM_WAKE_MIN_NS ? j->n : run_blocks_timed(j->pool, j);
    if (left > 1)
        tls_team(tls_team_ctx, (uint32_t)left, team_work, j);
    team_work(j);   /* (none left, unless the team ran no call) */
}

SIM_API aclError aclsimParallelFor(int32_t deviceId, uint32_t numBlocks, aclsimBlockFn fn, void *arg)
{
    static const char api[] = "aclsimParallelFor";
    if (SIM_UNLIKELY(g_forked))
        return sim_forked_err(api);
    SIM_NULL_CHECK(api, fn);
    if (numBlocks == 0)
        return sim_err(ACL_ERROR_INVALID_PARAM, "%s: numBlocks must be > 0", api);
    aclError rc = sim_config_ensure(api);
    if (rc)
        return rc;
    if (!sim_dev_valid(deviceId))
        return sim_err(ACL_ERROR_RT_INVALID_DEVICEID, "%s: invalid device id %d", api, deviceId);
    sim_pool_t *pool = &g_dev[deviceId].pool;
    bool queued = false, lazy_wake = false;
    uint32_t nthreads = 0;
    sim_pfjob_t job;
    bool spread = numBlocks > 1 && !tls_in_pool;   /* (a call from a block runs serially) */
    bool team = spread && tls_team, pooled = spread && !team && sim_sched_threads() > 1;
    if (team || pooled) {
        memset(&job, 0, sizeof job);
        job.fn = fn;
        job.arg = arg;
        job.n = numBlocks;
        job.pool = pool;
        atomic_init(&job.next_block, 0);
        atomic_init(&job.pending, numBlocks);
    }
    if (team) {
        sim_busy_enter();
        team_run(&job);
        sim_busy_leave();
        return job.rc != ACL_SUCCESS ? blocks_failed(api, job.rc, job.rc_idx, numBlocks) : ACL_SUCCESS;
    }
    if (pooled) {
        pthread_mutex_lock(&pool->lock);
        if (atomic_load(&g_inited))
            pool_start_locked(pool);
        if (pool->nthreads > 0 && !atomic_load(&pool->stop)) {
            job.queued = queued = true;
            if (pool->jobs_tail)
                pool->jobs_tail->next = &job;
            else
                pool->jobs = &job;
            pool->jobs_tail = &job;
        }
        nthreads = pool->nthreads;
        pthread_mutex_unlock(&pool->lock);
        if (queued) {
            sim_busy_enter();
            atomic_fetch_add(&pool->work_gen, 1);   /* spinning pool threads take it at once */
            /* sleeping ones take 4-10 us of this thread to wake and tens of us to arrive: worth it
             * only for a task estimated long enough (or of unknown length); otherwise decide once
             * the first blocks have shown how long the rest will take */
            if (tls_task_cost_ns >= SIM_WAKE_MIN_NS)
                wake_sleepers(pool, numBlocks - 1, nthreads);
            else
                lazy_wake = true;
        }
    }
    if (!queued) {   /* serially on this thread */
        aclError first = ACL_SUCCESS;
        uint32_t first_idx = 0;
        sim_busy_enter();
        for (uint32_t i = 0; i < numBlocks; i++) {
            aclError r = fn(i, numBlocks, arg);
            if (r != ACL_SUCCESS && first == ACL_SUCCESS) {
                first = r;
                first_idx = i;
            }
        }
        sim_busy_leave();
        if (first != ACL_SUCCESS && numBlocks > 1)   /* as when the blocks are spread (one block: its own message) */
            return blocks_failed(api, first, first_idx, numBlocks);
        return first;
    }
    if (lazy_wake) {
        uint64_t left = run_blocks_timed(pool, &job);
        if (left)
            wake_sleepers(pool, (uint32_t)(left < nthreads ? left : nthreads), nthreads);
    }
    run_blocks(pool, &job);   /* and takes the job off the list: nobody can pick it up any more */
    /* wait for the blocks other threads are running (and for them to let go of the job) */
    if (atomic_load(&job.pending)) {
        sim_spin_t sp;
        if (sim_spin_start(&sp)) {
            while (atomic_load_explicit(&job.pending, memory_order_acquire) && sim_spin_more(&sp))
                ;
            sim_spin_stop(&sp);
        }
        while (atomic_load(&job.pending)) {
            uint32_t g = atomic_load(&pool->done_gen);
            atomic_fetch_add(&pool->done_waiters, 1);
            if (atomic_load(&job.pending))
                sim_futex_wait(&pool->done_gen, g, NULL);
            atomic_fetch_sub(&pool->done_waiters, 1);
        }
    }
    sim_busy_leave();
    return job.rc != ACL_SUCCESS ? blocks_failed(api, job.rc, job.rc_idx, numBlocks) : ACL_SUCCESS;
}

/* ------------------------------------------------------------------ large copies and fills */

/* Copies and fills of at least 2 chunks are cut into SIM_COPY_CHUNK pieces spread over the AI-core
 * threads: one core rarely saturates the memory bandwidth of a host (it does on a small virtual
 * machine, where this costs next to nothing). Overlapping ranges (a memmove) stay serial. */
#define SIM_COPY_CHUNK ((size_t)1 << 20)

typedef struct copy_job {
    char *dst;
    const char *src;
    size_t n;
    int value;
} copy_job_t;

static aclError copy_block(uint32_t i, uint32_t nb, void *arg)
{
    (void)nb;
    copy_job_t *j = arg;
    size_t lo = (size_t)i * SIM_COPY_CHUNK, len = j->n - lo < SIM_COPY_CHUNK ? j->n - lo : SIM_COPY_CHUNK;
    if (j->src)
        memcpy(j->dst + lo, j->src + lo, len);
    else
        memset(j->dst + lo, j->value, len);
    return ACL_SUCCESS;
}

static bool copy_split(int32_t dev, copy_job_t *j)
{
    if (j->n < 2 * SIM_COPY_CHUNK || sim_sched_threads() < 2 || !sim_dev_valid(dev))
        return false;
    size_t nb = (j->n + SIM_COPY_CHUNK - 1) / SIM_COPY_CHUNK;
    if (nb > UINT32_MAX)
        return false;
    return aclsimParallelFor(dev, (uint32_t)nb, copy_block, j) == ACL_SUCCESS;
}

void sim_parallel_memmove(int32_t dev, void *dst, const void *src, size_t n)
{
    uintptr_t d = (uintptr_t)dst, s = (uintptr_t)src;
    copy_job_t j = {dst, src, n, 0};
    if ((d + n <= s || s + n <= d) && copy_split(dev, &j))
        return;
    memmove(dst, src, n);
}

void sim_parallel_memset(int32_t dev, void *dst, int value, size_t n)
{
    copy_job_t j = {dst, NULL, n, value};
    if (!copy_split(dev, &j))
        memset(dst, value, n);
}
