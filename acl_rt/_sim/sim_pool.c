/* canna simulator: the per-device pool of AI-core threads behind aclsimParallelFor.
 *
 * A job lives on its caller's stack. Pool threads and the caller claim blocks under the pool
 * lock; the caller claims blocks of its own job too, so a job always completes even when every
 * pool thread is busy with other jobs (or the pool is stopping). A call from a pool thread (a
 * block that itself calls aclsimParallelFor) runs its blocks serially on that thread. */
#include "sim.h"

#include <signal.h>
#include <unistd.h>

typedef struct sim_pfjob {
    struct sim_pfjob *next;
    aclsimBlockFn fn;
    void *arg;
    uint32_t n;
    uint32_t next_block;   /* next unclaimed block */
    uint32_t done;         /* finished blocks */
    aclError rc;           /* result of the lowest failing block */
    uint32_t rc_idx;
    bool queued;
} sim_pfjob_t;

static __thread bool tls_in_pool;

/* caller holds pool->lock; claims a block of job j (removing j from the queue when it has none left) */
static bool claim_locked(sim_pool_t *pool, sim_pfjob_t *j, uint32_t *idx)
{
    if (j->next_block >= j->n)
        return false;
    *idx = j->next_block++;
    if (j->next_block >= j->n && j->queued) {
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
    return true;
}

/* run block idx of j (without the lock), then account it under the lock */
static void run_block_unlocked(sim_pool_t *pool, sim_pfjob_t *j, uint32_t idx)
{
    pthread_mutex_unlock(&pool->lock);
    aclError rc = j->fn(idx, j->n, j->arg);
    pthread_mutex_lock(&pool->lock);
    if (rc != ACL_SUCCESS && (j->rc == ACL_SUCCESS || idx < j->rc_idx)) {
        j->rc = rc;
        j->rc_idx = idx;
    }
    if (++j->done == j->n)
        pthread_cond_broadcast(&pool->cv_done);
}

static void *pool_thread(void *arg)
{
    sim_pool_t *pool = arg;
    tls_in_pool = true;
    pthread_mutex_lock(&pool->lock);
    for (;;) {
        if (pool->jobs) {
            sim_pfjob_t *j = pool->jobs;
            uint32_t idx;
            if (claim_locked(pool, j, &idx))
                run_block_unlocked(pool, j, idx);
            continue;
        }
        if (pool->stop)
            break;
        pthread_cond_wait(&pool->cv_work, &pool->lock);
    }
    pthread_mutex_unlock(&pool->lock);
    return NULL;
}

/* caller holds pool->lock */
static void pool_start_locked(sim_pool_t *pool)
{
    if (pool->started || pool->stop)
        return;
    pool->started = true;
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    if (cpus < 1)
        cpus = 1;
    uint32_t n = g_cfg.profile->ai_cores;
    if ((uint64_t)n > (uint64_t)cpus * 2)
        n = (uint32_t)(cpus * 2);
    pool->threads = calloc(n ? n : 1, sizeof(pthread_t));
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
        pool->stop = true;
        pthread_cond_broadcast(&pool->cv_work);
        pthread_t *th = pool->threads;
        uint32_t n = pool->nthreads;
        pthread_mutex_unlock(&pool->lock);
        for (uint32_t k = 0; k < n; k++)
            pthread_join(th[k], NULL);
        pthread_mutex_lock(&pool->lock);
        free(pool->threads);
        pool->threads = NULL;
        pool->nthreads = 0;
        pool->started = false;
        pool->stop = false;   /* restarted lazily after the next aclInit */
        pthread_mutex_unlock(&pool->lock);
    }
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
    if (numBlocks == 1 || tls_in_pool) {
        aclError first = ACL_SUCCESS;
        for (uint32_t i = 0; i < numBlocks; i++) {
            aclError r = fn(i, numBlocks, arg);
            if (r != ACL_SUCCESS && first == ACL_SUCCESS)
                first = r;
        }
        return first;
    }
    sim_pool_t *pool = &g_dev[deviceId].pool;
    sim_pfjob_t job;
    memset(&job, 0, sizeof job);
    job.fn = fn;
    job.arg = arg;
    job.n = numBlocks;
    pthread_mutex_lock(&pool->lock);
    if (atomic_load(&g_inited))
        pool_start_locked(pool);
    if (pool->nthreads > 0 && !pool->stop) {
        job.queued = true;
        if (pool->jobs_tail)
            pool->jobs_tail->next = &job;
        else
            pool->jobs = &job;
        pool->jobs_tail = &job;
        if (numBlocks - 1 >= pool->nthreads)
            pthread_cond_broadcast(&pool->cv_work);
        else
            for (uint32_t k = 0; k + 1 < numBlocks; k++)
                pthread_cond_signal(&pool->cv_work);
    }
    uint32_t idx;
    while (claim_locked(pool, &job, &idx))
        run_block_unlocked(pool, &job, idx);
    while (job.done < job.n)
        pthread_cond_wait(&pool->cv_done, &pool->lock);
    pthread_mutex_unlock(&pool->lock);
    if (job.rc != ACL_SUCCESS)
        return sim_err(job.rc, "%s: block %u of %u failed with error %d", api, job.rc_idx, numBlocks, job.rc);
    return ACL_SUCCESS;
}
