/* canna simulator: streams, their worker threads, tasks, sticky errors, simulator launches. */
#include "sim.h"

#include <signal.h>

__thread sim_stream_t *tls_running_stream;
__thread uint64_t tls_task_cost_ns = UINT64_MAX;
__thread int32_t tls_launch_waited = 0;

static pthread_mutex_t g_wk_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_wk_cv = PTHREAD_COND_INITIALIZER;
static int g_wk_count;
static atomic_uint_fast64_t g_err_id;


/* ------------------------------------------------------------------ lifetime */

static void stream_free(sim_obj_t *o)
{
    sim_stream_t *s = (sim_stream_t *)o;
    pthread_mutex_destroy(&s->lock);
    pthread_cond_destroy(&s->cv_work);
    pthread_cond_destroy(&s->cv_done);
    free(s);
}

sim_stream_t *sim_stream_create(sim_device_t *d, bool is_default, uint32_t prio, uint32_t flags, const char *api,
                                aclError *rc)
{
    if (!atomic_load(&g_inited)) {
        *rc = sim_err(ACL_ERROR_UNINITIALIZE, "%s: AscendCL is not initialized (call aclInit first)", api);
        return NULL;
    }
    if (d->nstreams_live >= SIM_MAX_STREAMS_PER_DEVICE) {
        *rc = sim_err(ACL_ERROR_RT_NO_STREAM_RESOURCE, "%s: device %d already has %d streams (the maximum)", api, d->id,
                      SIM_MAX_STREAMS_PER_DEVICE);
        return NULL;
    }
    sim_stream_t *s = calloc(1, sizeof *s);
    if (!s) {
        *rc = sim_err(ACL_ERROR_RT_RESOURCE_ALLOC_FAIL, "%s: out of host memory", api);
        return NULL;
    }
    sim_obj_init(&s->obj, SIM_KIND_STREAM, stream_free);
    s->dev = d;
    s->is_default = is_default;
    s->priority = prio;
    s->flags = flags;
    pthread_mutex_init(&s->lock, NULL);
    sim_cond_init(&s->cv_work);
    sim_cond_init(&s->cv_done);
    sim_list_init(&s->link);
    if (!sim_reg_add(&s->obj)) {
        sim_obj_unref(&s->obj);
        *rc = sim_err(ACL_ERROR_RT_RESOURCE_ALLOC_FAIL, "%s: out of host memory", api);
        return NULL;
    }
    sim_obj_ref(&s->obj);   /* the device list's reference */
    sim_list_add(&d->streams, &s->link);
    s->listed = true;
    s->counted = true;
    d->nstreams_live++;
    return s;
}

/* unlist a destroyed stream once nothing runs on it any more; caller holds d->lock */
static void stream_maybe_unlist_locked(sim_stream_t *s)
{
    if (!s->listed)
        return;
    pthread_mutex_lock(&s->lock);
    bool idle = s->dead && !s->worker_alive && !s->head && !s->running;
    if (idle && atomic_load(&s->err_code)) {
        /* nobody can synchronize this stream any more: its fault goes to the next device
         * synchronize (s->dev->lock is held) */
        sim_device_t *d = s->dev;
        if (d->orphan_code) {
            d->orphan_more++;
        } else {
            snprintf(d->orphan_msg, sizeof d->orphan_msg, "stream %p (destroyed before it was synchronized): %s",
                     SIM_H(s), s->err_msg);
            d->orphan_code = atomic_load(&s->err_code);
        }
        atomic_store(&s->err_code, 0);
    }
    pthread_mutex_unlock(&s->lock);
    if (idle) {
        s->listed = false;
        sim_list_del(&s->link);
        sim_obj_unref(&s->obj);   /* the caller still holds a reference */
    }
}

static void stream_maybe_unlist(sim_stream_t *s)
{
    pthread_mutex_lock(&s->dev->lock);
    stream_maybe_unlist_locked(s);
    pthread_mutex_unlock(&s->dev->lock);
}

void sim_stream_destroy(sim_stream_t *s, bool dev_locked)
{
    if (sim_reg_remove(&s->obj))
        sim_obj_unref(&s->obj);
    pthread_mutex_lock(&s->lock);
    s->dead = true;
    if (s->worker_alive)
        pthread_cond_signal(&s->cv_work);
    pthread_mutex_unlock(&s->lock);
    sim_device_t *d = s->dev;
    if (!dev_locked)
        pthread_mutex_lock(&d->lock);
    if (s->counted) {
        s->counted = false;
        d->nstreams_live--;
    }
    stream_maybe_unlist_locked(s);
    if (!dev_locked)
        pthread_mutex_unlock(&d->lock);
}

aclError sim_stream_resolve(aclrtStream h, const char *api, sim_stream_t **out)
{
    if (!h) {
        sim_ctx_t *c = NULL;
        aclError rc = sim_need_ctx(api, &c);
        if (rc)
            return rc;
        sim_stream_t *s = c->def_stream;
        sim_obj_ref(&s->obj);
        sim_obj_unref(&c->obj);
        *out = s;
        return ACL_SUCCESS;
    }
    uint32_t kf;
    sim_obj_t *o = sim_reg_get(h, SIM_KIND_STREAM, &kf);
    if (!o) {
        if (kf)
            return sim_err(ACL_ERROR_RT_INVALID_HANDLE, "%s: handle %p is %s, not a stream", api, h, sim_kind_name(kf));
        return sim_err(ACL_ERROR_RT_INVALID_HANDLE, "%s: invalid stream handle %p (unknown or destroyed)", api, h);
    }
    *out = (sim_stream_t *)o;
    return ACL_SUCCESS;
}

/* ------------------------------------------------------------------ sticky errors */

void sim_stream_set_fault(sim_stream_t *s, aclError code, const char *msg)
{
    pthread_mutex_lock(&s->lock);
    if (atomic_load(&s->err_code) == 0) {
        snprintf(s->err_msg, sizeof s->err_msg, "%s", msg ? msg : "task failed");
        s->err_id = atomic_fetch_add(&g_err_id, 1) + 1;
        atomic_store(&s->err_code, code);
    }
    pthread_mutex_unlock(&s->lock);
}

aclError sim_stream_take_error(sim_stream_t *s, const char *api)
{
    if (atomic_load_explicit(&s->err_code, memory_order_acquire) == 0)
        return ACL_SUCCESS;
    char msg[SIM_MSG_MAX];
    pthread_mutex_lock(&s->lock);
    aclError code = atomic_load(&s->err_code);
    bool dead = s->dead;
    if (code) {
        memcpy(msg, s->err_msg, sizeof msg);
        atomic_store(&s->err_code, 0);
    }
    pthread_mutex_unlock(&s->lock);
    if (!code)
        return ACL_SUCCESS;
    /* a destroyed stream still draining when a device synchronize takes its fault reads as one
     * already unlisted does (stream_maybe_unlist_locked) */
    return sim_err(code, "%s: asynchronous error on stream %p%s: %s", api, SIM_H(s),
                   dead ? " (destroyed before it was synchronized)" : "", msg);
}

/* ------------------------------------------------------------------ execution */

sim_task_t *sim_task_new(void)
{
    sim_task_t *t = calloc(1, sizeof(sim_task_t));
    if (t)
        t->cost_ns = UINT64_MAX;
    return t;
}

static void stream_exec(sim_stream_t *s, sim_task_t *t)
{
    sim_stream_t *prev = tls_running_stream;
    tls_running_stream = s;
    sim_errsave_t save;
    sim_err_save(&save);
    if (!t->control && atomic_load_explicit(&s->err_code, memory_order_acquire)) {
        t->skipped = true;
    } else {
        bool acct = t->engine == ACLSIM_ENGINE_VECTOR || t->engine == ACLSIM_ENGINE_CUBE;
        uint64_t prev_cost = tls_task_cost_ns;
        tls_task_cost_ns = t->cost_ns;
        sim_busy_enter();
        if (acct)
            sim_util_begin(s->dev, t->engine, t->cores, sim_now_ns());
        aclError rc = t->run(t, s);
        if (acct)
            sim_util_end(s->dev, t->engine, t->cores, sim_now_ns());
        sim_busy_leave();
        tls_task_cost_ns = prev_cost;
        if (rc != ACL_SUCCESS) {
            const char *m = sim_err_peek();
            char buf[96];
            if (!m) {
                snprintf(buf, sizeof buf, "task failed with error %d", rc);
                m = buf;
            }
            sim_stream_set_fault(s, rc, m);
        }
        atomic_fetch_add_explicit(&s->dev->tasks_executed, 1, memory_order_relaxed);
    }
    if (t->release)
        t->release(t);
    sim_err_restore(&save);
    tls_running_stream = prev;
    free(t);
}

/* caller holds s->lock. A task run on another thread (inline or at a synchronize) may have kept
 * the worker waiting for `running` to clear: wake it when it has something to do. */
static void stream_finish_locked(sim_stream_t *s, uint64_t seq)
{
    atomic_store_explicit(&s->done_seq, seq, memory_order_release);
    s->running = false;
    if (s->waiters)
        pthread_cond_broadcast(&s->cv_done);
    if (s->worker_sleeping && (s->head || s->dead))
        pthread_cond_signal(&s->cv_work);
}

/* Take the stream's first queued task off the queue (s->lock held, s->head not NULL). */
static inline sim_task_t *stream_pop_locked(sim_stream_t *s)
{
    sim_task_t *t = s->head;
    s->head = t->next;
    if (!s->head)
        s->tail = NULL;
    return t;
}

/* Execute task t (off the queue, or never queued) on this thread and finish it; s->lock is held on
 * entry and on return, released while t runs. */
static inline void stream_run_locked(sim_stream_t *s, sim_task_t *t)
{
    uint64_t seq = t->seq;
    s->running = true;
    if (t->what) {   /* (a bounded copy, not snprintf: every task passes here) */
        size_t n = strnlen(t->what, sizeof s->running_what - 1);
        memcpy(s->running_what, t->what, n);
        s->running_what[n] = 0;
    } else {
        s->running_what[0] = 0;
    }
    pthread_mutex_unlock(&s->lock);
    stream_exec(s, t);
    pthread_mutex_lock(&s->lock);
    stream_finish_locked(s, seq);
}

/* stream_run_locked from a launching or synchronizing thread: releases s->lock, counts the run in
 * *count (the device's tasks_inline or tasks_at_sync) and unlists a stream destroyed meanwhile. */
static inline void stream_run_here(sim_stream_t *s, sim_task_t *t, atomic_uint_fast64_t *count)
{
    stream_run_locked(s, t);
    bool dead = s->dead;
    pthread_mutex_unlock(&s->lock);
    atomic_fetch_add_explicit(count, 1, memory_order_relaxed);
    if (dead)
        stream_maybe_unlist(s);
}

static void *stream_worker(void *arg)
{
    sim_stream_t *s = arg;
    pthread_mutex_lock(&s->lock);
    for (;;) {
        if (s->head && !s->running) {
            stream_run_locked(s, stream_pop_locked(s));
            continue;
        }
        if (s->running) {   /* a task is executing on another thread (inline, or at a synchronize) */
            struct timespec dl;
            sim_deadline(&dl, SIM_WORKER_IDLE_NS);
            s->worker_sleeping = true;
            pthread_cond_timedwait(&s->cv_work, &s->lock, &dl);
            s->worker_sleeping = false;
            continue;
        }
        if (s->dead)
            break;
        /* idle: sleep up to the idle limit. No spinning here: a thread that synchronizes runs the
         * queued tasks it waits for itself (stream_steal), so the worker's wake-up latency only
         * delays work nobody is waiting for yet, and a spinning worker would take a CPU from the
         * AI-core threads. */
        struct timespec dl;
        sim_deadline(&dl, SIM_WORKER_IDLE_NS);
        s->worker_sleeping = true;
        int rc = pthread_cond_timedwait(&s->cv_work, &s->lock, &dl);
        s->worker_sleeping = false;
        if (rc == ETIMEDOUT && !s->head && !s->running)
            break;
    }
    s->worker_alive = false;
    bool dead = s->dead;
    pthread_mutex_unlock(&s->lock);
    if (dead)
        stream_maybe_unlist(s);
    sim_obj_unref(&s->obj);
    pthread_mutex_lock(&g_wk_lock);
    if (--g_wk_count == 0)
        pthread_cond_broadcast(&g_wk_cv);
    pthread_mutex_unlock(&g_wk_lock);
    return NULL;
}

/* caller holds s->lock */
static bool stream_spawn_worker_locked(sim_stream_t *s)
{
    pthread_attr_t attr;
    sigset_t all, old;
    pthread_t th;
    sim_obj_ref(&s->obj);   /* the worker's reference */
    pthread_mutex_lock(&g_wk_lock);
    g_wk_count++;
    pthread_mutex_unlock(&g_wk_lock);
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);   /* workers never take process signals */
    int rc = pthread_create(&th, &attr, stream_worker, s);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&attr);
    if (rc != 0) {
        pthread_mutex_lock(&g_wk_lock);
        if (--g_wk_count == 0)
            pthread_cond_broadcast(&g_wk_cv);
        pthread_mutex_unlock(&g_wk_lock);
        sim_obj_unref(&s->obj);   /* not the last: the caller holds one */
        return false;
    }
    s->worker_alive = true;
    return true;
}

void sim_workers_wait_all(void)
{
    pthread_mutex_lock(&g_wk_lock);
    while (g_wk_count > 0)
        pthread_cond_wait(&g_wk_cv, &g_wk_lock);
    pthread_mutex_unlock(&g_wk_lock);
}

aclError sim_stream_submit(sim_stream_t *s, sim_task_t *t, bool small, const char *api)
{
    aclError rc;
    pthread_mutex_lock(&s->lock);
    if (s->dead) {
        pthread_mutex_unlock(&s->lock);
        rc = sim_err(ACL_ERROR_RT_INVALID_HANDLE, "%s: stream %p was destroyed", api, SIM_H(s));
        goto fail;
    }
    if ((small || tls_launch_waited) && !g_cfg.check && !s->head && !s->running) {
        if (t->on_enqueue)
            t->on_enqueue(t);
        uint64_t seq = atomic_load_explicit(&s->enq_seq, memory_order_relaxed) + 1;
        atomic_store_explicit(&s->enq_seq, seq, memory_order_release);
        t->seq = seq;
        stream_run_here(s, t, &s->dev->tasks_inline);
        return ACL_SUCCESS;
    }
    if (!s->worker_alive && !stream_spawn_worker_locked(s)) {
        pthread_mutex_unlock(&s->lock);
        rc = sim_err(ACL_ERROR_RT_RESOURCE_ALLOC_FAIL, "%s: cannot start the stream's worker thread", api);
        goto fail;
    }
    if (t->on_enqueue)
        t->on_enqueue(t);
    uint64_t seq = atomic_load_explicit(&s->enq_seq, memory_order_relaxed) + 1;
    t->seq = seq;
    t->next = NULL;
    if (s->tail)
        s->tail->next = t;
    else
        s->head = t;
    s->tail = t;
    atomic_store_explicit(&s->enq_seq, seq, memory_order_release);
    /* Waking a sleeping thread costs the waker 4-10 us on a small virtual machine. When an AI-core
     * thread is spinning idle, it delivers the wake-up a little later instead (nothing is lost:
     * a thread that synchronizes runs the task itself meanwhile, and otherwise the worker starts
     * it SIM_KICK_DELAY_NS later). */
    if (s->worker_sleeping && !(t->steal && !g_cfg.check && sim_pool_defer_wake(s)))
        pthread_cond_signal(&s->cv_work);
    pthread_mutex_unlock(&s->lock);
    return ACL_SUCCESS;
fail:
    t->launch_failed = true;
    if (t->release)
        t->release(t);
    free(t);
    return rc;
}

void sim_stream_kick(sim_stream_t *s)
{
    pthread_mutex_lock(&s->lock);
    if (s->worker_sleeping && s->head && !s->running)
        pthread_cond_signal(&s->cv_work);
    pthread_mutex_unlock(&s->lock);
    sim_obj_unref(&s->obj);
}

/* ------------------------------------------------------------------ waiting */

/* Run the stream's next queued task on this (synchronizing) thread when nothing runs on the
 * stream, the task allows it, is queued at or before `target`, and its estimated cost fits before
 * the deadline. The caller would only wait for the worker to do it: running it here saves the
 * handoff (the worker's wake-up) and lets this thread take part in the task's AI-core blocks. The
 * launch stayed asynchronous: the worker was woken at submit and runs whatever is left. Never in
 * memcheck mode (work runs on the stream's own thread there). true when a task was run. */
static bool stream_steal(sim_stream_t *s, uint64_t target, const struct timespec *deadline)
{
    if (g_cfg.check)
        return false;
    pthread_mutex_lock(&s->lock);
    sim_task_t *t = s->head;
    if (s->running || !t || !t->steal || t->seq > target) {
        pthread_mutex_unlock(&s->lock);
        return false;
    }
    if (deadline) {
        uint64_t dl = (uint64_t)deadline->tv_sec * 1000000000ull + (uint64_t)deadline->tv_nsec, now = sim_now_ns();
        if (now >= dl || t->cost_ns > dl - now) {
            pthread_mutex_unlock(&s->lock);
            return false;
        }
    }
    stream_run_here(s, stream_pop_locked(s), &s->dev->tasks_at_sync);
    return true;
}

/* wait until done_seq >= target; deadline NULL = forever. true when reached. */
static bool stream_wait_seq(sim_stream_t *s, uint64_t target, const struct timespec *deadline)
{
    for (;;) {
        if (atomic_load_explicit(&s->done_seq, memory_order_acquire) >= target)
            return true;
        if (!stream_steal(s, target, deadline))
            break;
    }
    sim_spin_t sp;
    if (sim_spin_start(&sp)) {
        bool reached = false;
        while (!(reached = atomic_load_explicit(&s->done_seq, memory_order_acquire) >= target) && sim_spin_more(&sp))
            ;
        sim_spin_stop(&sp);
        if (reached)
            return true;
    }
    bool ok = true;
    pthread_mutex_lock(&s->lock);
    s->waiters++;
    while (atomic_load_explicit(&s->done_seq, memory_order_acquire) < target) {
        if (sim_cond_wait_until(&s->cv_done, &s->lock, deadline) == ETIMEDOUT &&
            atomic_load_explicit(&s->done_seq, memory_order_acquire) < target) {
            ok = false;
            break;
        }
    }
    s->waiters--;
    pthread_mutex_unlock(&s->lock);
    return ok;
}

/* what keeps s busy ("kernel 'k' is running"; "" when unknown), for timeout messages */
static void stream_busy_desc(sim_stream_t *s, char *buf, size_t n)
{
    pthread_mutex_lock(&s->lock);
    if (s->running && s->running_what[0])
        snprintf(buf, n, "kernel '%s' is running", s->running_what);
    else if (s->running)
        snprintf(buf, n, "a task is running");
    else if (s->head && s->head->what)
        snprintf(buf, n, "kernel '%s' is queued", s->head->what);
    else
        buf[0] = 0;
    pthread_mutex_unlock(&s->lock);
}

static const struct timespec *make_deadline(struct timespec *ts, int64_t timeout_ms)
{
    if (timeout_ms < 0)
        return NULL;
    sim_deadline(ts, (uint64_t)timeout_ms * 1000000ull);
    return ts;
}

aclError sim_stream_sync(sim_stream_t *s, int64_t timeout_ms, bool report, const char *api, aclError timeout_code)
{
    if (tls_running_stream == s)
        return sim_err(ACL_ERROR_RT_PARAM_INVALID,
                       "%s: cannot synchronize stream %p from inside one of its own tasks (it would deadlock)", api,
                       SIM_H(s));
    uint64_t target = atomic_load_explicit(&s->enq_seq, memory_order_acquire);
    struct timespec ts;
    if (!stream_wait_seq(s, target, make_deadline(&ts, timeout_ms))) {
        char busy[96];
        stream_busy_desc(s, busy, sizeof busy);
        return sim_err(timeout_code, "%s: stream %p did not complete within %lld ms%s%s%s", api, SIM_H(s),
                       (long long)timeout_ms, busy[0] ? " (" : "", busy, busy[0] ? ")" : "");
    }
    return report ? sim_stream_take_error(s, api) : ACL_SUCCESS;
}

aclError sim_device_sync(sim_device_t *d, int64_t timeout_ms, bool report, const char *api)
{
    sim_stream_t **arr = NULL;
    size_t n = 0, cap = 0;
    pthread_mutex_lock(&d->lock);
    for (sim_list_t *l = d->streams.next; l != &d->streams; l = l->next)
        cap++;
    arr = malloc((cap ? cap : 1) * sizeof *arr);
    if (arr) {
        for (sim_list_t *l = d->streams.next; l != &d->streams; l = l->next) {
            sim_stream_t *s = SIM_CONTAINER(l, sim_stream_t, link);
            sim_obj_ref(&s->obj);
            arr[n++] = s;
        }
    }
    pthread_mutex_unlock(&d->lock);
    if (!arr)
        return sim_err(ACL_ERROR_RT_RESOURCE_ALLOC_FAIL, "%s: out of host memory", api);
    struct timespec ts;
    const struct timespec *dl = make_deadline(&ts, timeout_ms);
    aclError rc = ACL_SUCCESS;
    for (size_t i = 0; i < n && rc == ACL_SUCCESS; i++) {
        if (arr[i] == tls_running_stream)
            continue;
        uint64_t target = atomic_load_explicit(&arr[i]->enq_seq, memory_order_acquire);
        if (!stream_wait_seq(arr[i], target, dl)) {
            char busy[96];
            stream_busy_desc(arr[i], busy, sizeof busy);
            rc = sim_err(ACL_ERROR_RT_STREAM_SYNC_TIMEOUT, "%s: device %d did not complete within %lld ms (stream %p%s%s)",
                         api, d->id, (long long)timeout_ms, SIM_H(arr[i]), busy[0] ? ": " : "", busy);
        }
    }
    for (size_t i = 0; i < n && rc == ACL_SUCCESS && report; i++)
        rc = sim_stream_take_error(arr[i], api);
    if (rc == ACL_SUCCESS && report) {
        pthread_mutex_lock(&d->lock);
        aclError code = d->orphan_code;
        uint32_t more = d->orphan_more;
        char msg[SIM_MSG_MAX];
        if (code)
            memcpy(msg, d->orphan_msg, sizeof msg);
        d->orphan_code = 0;
        d->orphan_more = 0;
        pthread_mutex_unlock(&d->lock);
        if (code && more)
            rc = sim_err(code, "%s: asynchronous error on %s (and %u more on destroyed streams)", api, msg, more);
        else if (code)
            rc = sim_err(code, "%s: asynchronous error on %s", api, msg);
    }
    for (size_t i = 0; i < n; i++)
        sim_obj_unref(&arr[i]->obj);
    free(arr);
    return rc;
}

/* ------------------------------------------------------------------ stream API */

static aclError create_stream(const char *api, aclrtStream *out, uint32_t prio, uint32_t flags)
{
    sim_ctx_t *c = NULL;
    aclError rc = sim_need_ctx(api, &c);
    if (rc)
        return rc;
    sim_device_t *d = c->dev;
    sim_obj_unref(&c->obj);
    pthread_mutex_lock(&d->lock);
    sim_stream_t *s = sim_stream_create(d, false, prio, flags, api, &rc);
    pthread_mutex_unlock(&d->lock);
    if (!s)
        return rc;
    *out = SIM_H(s);
    sim_obj_unref(&s->obj);   /* the registry and the device list keep it */
    return ACL_SUCCESS;
}

SIM_API aclError aclrtCreateStream(aclrtStream *stream)
{
    SIM_ENTER("aclrtCreateStream");
    SIM_NULL_CHECK("aclrtCreateStream", stream);
    return create_stream("aclrtCreateStream", stream, 0, 0);
}

SIM_API aclError aclrtCreateStreamWithConfig(aclrtStream *stream, uint32_t priority, uint32_t flag)
{
    static const char api[] = "aclrtCreateStreamWithConfig";
    SIM_ENTER(api);
    SIM_NULL_CHECK(api, stream);
    if (priority > 7)
        return sim_err(ACL_ERROR_INVALID_PARAM, "%s: priority must be 0..7 (got %u)", api, priority);
    const uint32_t known = ACL_STREAM_FAST_LAUNCH | ACL_STREAM_FAST_SYNC | ACL_STREAM_PERSISTENT | ACL_STREAM_HUGE |
                           ACL_STREAM_CPU_SCHEDULE | ACL_STREAM_DEVICE_USE_ONLY;
    if (flag & ~known)
        return sim_err(ACL_ERROR_INVALID_PARAM, "%s: unknown flag bits 0x%x", api, flag & ~known);
    return create_stream(api, stream, priority, flag);
}

static aclError destroy_stream(const char *api, aclrtStream stream)
{
    SIM_ENTER(api);
    if (!stream)
        return sim_err(ACL_ERROR_INVALID_PARAM, "%s: stream must not be NULL (the default stream cannot be destroyed)", api);
    sim_stream_t *s = NULL;
    aclError rc = sim_stream_resolve(stream, api, &s);
    if (rc)
        return rc;
    if (s->is_default) {
        sim_obj_unref(&s->obj);
        return sim_err(ACL_ERROR_RT_PARAM_INVALID, "%s: %p is a default stream and cannot be destroyed", api, stream);
    }
    sim_stream_destroy(s, false);
    sim_obj_unref(&s->obj);
    return ACL_SUCCESS;
}

SIM_API aclError aclrtDestroyStream(aclrtStream stream) { return destroy_stream("aclrtDestroyStream", stream); }
SIM_API aclError aclrtDestroyStreamForce(aclrtStream stream) { return destroy_stream("aclrtDestroyStreamForce", stream); }

static aclError sync_stream_api(const char *api, aclrtStream stream, int32_t timeout)
{
    SIM_ENTER(api);
    if (timeout < -1)
        return sim_err(ACL_ERROR_INVALID_PARAM, "%s: timeout must be -1, 0 or a positive number of ms (got %d)", api,
                       timeout);
    sim_stream_t *s = NULL;
    aclError rc = sim_stream_resolve(stream, api, &s);
    if (rc)
        return rc;
    rc = sim_stream_sync(s, timeout, true, api, ACL_ERROR_RT_STREAM_SYNC_TIMEOUT);
    sim_obj_unref(&s->obj);
    return rc;
}

SIM_API aclError aclrtSynchronizeStream(aclrtStream stream)
{
    return sync_stream_api("aclrtSynchronizeStream", stream, -1);
}

SIM_API aclError aclrtSynchronizeStreamWithTimeout(aclrtStream stream, int32_t timeout)
{
    return sync_stream_api("aclrtSynchronizeStreamWithTimeout", stream, timeout);
}

SIM_API aclError aclrtStreamQuery(aclrtStream stream, aclrtStreamStatus *status)
{
    static const char api[] = "aclrtStreamQuery";
    SIM_ENTER(api);
    SIM_NULL_CHECK(api, status);
    sim_stream_t *s = NULL;
    aclError rc = sim_stream_resolve(stream, api, &s);
    if (rc)
        return rc;
    uint64_t done = atomic_load_explicit(&s->done_seq, memory_order_acquire);
    uint64_t enq = atomic_load_explicit(&s->enq_seq, memory_order_acquire);
    *status = done >= enq ? ACL_STREAM_STATUS_COMPLETE : ACL_STREAM_STATUS_NOT_READY;
    sim_obj_unref(&s->obj);
    return ACL_SUCCESS;
}

/* ------------------------------------------------------------------ simulator launches */

static aclError run_user(sim_task_t *t, sim_stream_t *s)
{
    (void)s;
    return t->u.user.fn(t->u.user.arg);
}

static void release_user(sim_task_t *t)
{
    if (!t->launch_failed && t->u.user.rel)
        t->u.user.rel(t->u.user.arg);
}

/* The start of an aclsimLaunch* call that runs on an engine: checks engine, resolves stream (*sp holds
 * a reference) and allocates the task. */
static aclError new_engine_task(const char *api, aclrtStream stream, int32_t engine, sim_stream_t **sp,
                                sim_task_t **tp)
{
    if (engine != ACLSIM_ENGINE_NONE && engine != ACLSIM_ENGINE_VECTOR && engine != ACLSIM_ENGINE_CUBE)
        return sim_err(ACL_ERROR_INVALID_PARAM, "%s: engine must be ACLSIM_ENGINE_NONE, _VECTOR or _CUBE (got %d)", api,
                       engine);
    aclError rc = sim_stream_resolve(stream, api, sp);
    if (rc)
        return rc;
    if (!(*tp = sim_task_new())) {
        sim_obj_unref(&(*sp)->obj);
        return sim_err(ACL_ERROR_RT_RESOURCE_ALLOC_FAIL, "%s: out of host memory", api);
    }
    return ACL_SUCCESS;
}

SIM_API aclError aclsimSetLaunchWaited(int32_t waited, int32_t *previous)
{
    if (previous)
        *previous = tls_launch_waited;
    tls_launch_waited = waited != 0;
    return ACL_SUCCESS;
}

SIM_API aclError aclsimLaunchTask(aclrtStream stream, aclsimTaskFn fn, void *arg, aclsimReleaseFn release,
                                  int32_t engine, uint32_t numCores, uint64_t costNs)
{
    static const char api[] = "aclsimLaunchTask";
    if (SIM_UNLIKELY(g_forked))
        return sim_forked_err(api);
    SIM_NULL_CHECK(api, fn);
    sim_stream_t *s;
    sim_task_t *t;
    aclError rc = new_engine_task(api, stream, engine, &s, &t);
    if (rc)
        return rc;
    t->run = run_user;
    t->release = release_user;
    t->engine = engine;
    t->cores = numCores;
    t->u.user.fn = fn;
    t->u.user.arg = arg;
    t->u.user.rel = release;
    t->steal = true;
    t->cost_ns = costNs;
    rc = sim_stream_submit(s, t, costNs <= SIM_INLINE_COST_MAX_NS, api);
    sim_obj_unref(&s->obj);
    return rc;
}

static aclError run_delay(sim_task_t *t, sim_stream_t *s)
{
    (void)s;
    uint64_t us = t->u.delay.us;
    uint64_t ns = us > UINT64_MAX / 4000 ? UINT64_MAX / 4 : us * 1000;
    uint64_t end = sim_now_ns() + ns;
    if (ns < 100000) {
        while (sim_now_ns() < end)
            sim_cpu_relax();
        return ACL_SUCCESS;
    }
    struct timespec ts = {(time_t)(end / 1000000000ull), (long)(end % 1000000000ull)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
        ;
    return ACL_SUCCESS;
}

SIM_API aclError aclsimLaunchDelay(aclrtStream stream, uint64_t microseconds, int32_t engine, uint32_t numCores)
{
    static const char api[] = "aclsimLaunchDelay";
    if (SIM_UNLIKELY(g_forked))
        return sim_forked_err(api);
    sim_stream_t *s;
    sim_task_t *t;
    aclError rc = new_engine_task(api, stream, engine, &s, &t);
    if (rc)
        return rc;
    t->run = run_delay;
    t->engine = engine;
    t->cores = numCores;
    t->u.delay.us = microseconds;
    rc = sim_stream_submit(s, t, microseconds <= SIM_INLINE_COST_MAX_NS / 1000, api);
    sim_obj_unref(&s->obj);
    return rc;
}

static aclError run_fault(sim_task_t *t, sim_stream_t *s)
{
    (void)s;
    return sim_err(t->u.fault.code, "%s", t->u.fault.msg ? t->u.fault.msg : "injected fault");
}

static void release_fault(sim_task_t *t) { free(t->u.fault.msg); }

SIM_API aclError aclsimLaunchFault(aclrtStream stream, aclError code, const char *message)
{
    static const char api[] = "aclsimLaunchFault";
    if (SIM_UNLIKELY(g_forked))
        return sim_forked_err(api);
    if (code == ACL_SUCCESS)
        return sim_err(ACL_ERROR_INVALID_PARAM, "%s: code must not be 0", api);
    sim_stream_t *s = NULL;
    aclError rc = sim_stream_resolve(stream, api, &s);
    if (rc)
        return rc;
    sim_task_t *t = sim_task_new();
    char *msg = NULL;
    if (t) {
        if (message) {
            msg = strndup(message, SIM_MSG_MAX - 1);
        } else {
            msg = malloc(64);
            if (msg)
                snprintf(msg, 64, "aclsimLaunchFault: injected fault %d", code);
        }
    }
    if (!t || !msg) {
        free(t);
        free(msg);
        sim_obj_unref(&s->obj);
        return sim_err(ACL_ERROR_RT_RESOURCE_ALLOC_FAIL, "%s: out of host memory", api);
    }
    t->run = run_fault;
    t->release = release_fault;
    t->u.fault.code = code;
    t->u.fault.msg = msg;
    rc = sim_stream_submit(s, t, true, api);
    sim_obj_unref(&s->obj);
    return rc;
}

SIM_API aclError aclsimStreamGetDevice(aclrtStream stream, int32_t *deviceId)
{
    static const char api[] = "aclsimStreamGetDevice";
    if (SIM_UNLIKELY(g_forked))
        return sim_forked_err(api);
    SIM_NULL_CHECK(api, deviceId);
    sim_stream_t *s = NULL;
    aclError rc = sim_stream_resolve(stream, api, &s);
    if (rc)
        return rc;
    *deviceId = s->dev->id;
    sim_obj_unref(&s->obj);
    return ACL_SUCCESS;
}
