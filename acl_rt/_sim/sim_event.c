/* canna simulator: events, stream waits, host functions and the report (callback) model. */
#include "sim.h"

/* ------------------------------------------------------------------ events */

#define SIM_EVENT_KNOWN_FLAGS                                                                        \
    (ACL_EVENT_SYNC | ACL_EVENT_CAPTURE_STREAM_PROGRESS | ACL_EVENT_TIME_LINE | ACL_EVENT_DEVICE_USE_ONLY | \
     ACL_EVENT_EXTERNAL | ACL_EVENT_IPC)

static void event_free(sim_obj_t *o)
{
    sim_event_t *e = (sim_event_t *)o;
    if (e->err_stream)
        sim_obj_unref(&e->err_stream->obj);
    pthread_mutex_destroy(&e->lock);
    pthread_cond_destroy(&e->cv);
    free(e);
}

void sim_event_kill_locked(sim_event_t *e)
{
    if (sim_reg_remove(&e->obj))
        sim_obj_unref(&e->obj);
    if (e->listed) {
        e->listed = false;
        sim_list_del(&e->link);
        e->dev->nevents--;
        sim_obj_unref(&e->obj);
    }
}

static aclError get_event(aclrtEvent h, const char *api, sim_event_t **out)
{
    if (!h)
        return sim_err(ACL_ERROR_INVALID_PARAM, "%s: event must not be NULL", api);
    uint32_t kf;
    sim_obj_t *o = sim_reg_get(h, SIM_KIND_EVENT, &kf);
    if (!o) {
        if (kf)
            return sim_err(ACL_ERROR_RT_INVALID_HANDLE, "%s: handle %p is %s, not an event", api, h, sim_kind_name(kf));
        return sim_err(ACL_ERROR_RT_INVALID_HANDLE, "%s: invalid event handle %p (unknown or destroyed)", api, h);
    }
    *out = (sim_event_t *)o;
    return ACL_SUCCESS;
}

static aclError create_event(const char *api, aclrtEvent *out, uint32_t flags, bool timing)
{
    sim_ctx_t *c = NULL;
    aclError rc = sim_need_ctx(api, &c);
    if (rc)
        return rc;
    sim_device_t *d = c->dev;
    sim_obj_unref(&c->obj);
    sim_event_t *e = calloc(1, sizeof *e);
    if (!e)
        return sim_err(ACL_ERROR_RT_RESOURCE_ALLOC_FAIL, "%s: out of host memory", api);
    sim_obj_init(&e->obj, SIM_KIND_EVENT, event_free);
    e->dev = d;
    e->flags = flags;
    e->timing = timing;
    pthread_mutex_init(&e->lock, NULL);
    sim_cond_init(&e->cv);
    sim_list_init(&e->link);
    pthread_mutex_lock(&d->lock);
    if (!atomic_load(&g_inited)) {
        rc = sim_err(ACL_ERROR_UNINITIALIZE, "%s: AscendCL is not initialized (call aclInit first)", api);
    } else if (!sim_reg_add(&e->obj)) {
        rc = sim_err(ACL_ERROR_RT_RESOURCE_ALLOC_FAIL, "%s: out of host memory", api);
    } else {
        sim_obj_ref(&e->obj);   /* the device list's reference */
        sim_list_add(&d->events, &e->link);
        e->listed = true;
        d->nevents++;
        *out = SIM_H(e);
    }
    pthread_mutex_unlock(&d->lock);
    sim_obj_unref(&e->obj);   /* creator's reference (frees it on failure) */
    return rc;
}

SIM_API aclError aclrtCreateEvent(aclrtEvent *event)
{
    SIM_ENTER("aclrtCreateEvent");
    SIM_NULL_CHECK("aclrtCreateEvent", event);
    return create_event("aclrtCreateEvent", event, 0, true);
}

SIM_API aclError aclrtCreateEventWithFlag(aclrtEvent *event, uint32_t flag)
{
    static const char api[] = "aclrtCreateEventWithFlag";
    SIM_ENTER(api);
    SIM_NULL_CHECK(api, event);
    if (flag & ~(uint32_t)SIM_EVENT_KNOWN_FLAGS)
        return sim_err(ACL_ERROR_INVALID_PARAM, "%s: unknown flag bits 0x%x", api, flag & ~(uint32_t)SIM_EVENT_KNOWN_FLAGS);
    return create_event(api, event, flag, (flag & ACL_EVENT_TIME_LINE) != 0);
}

SIM_API aclError aclrtDestroyEvent(aclrtEvent event)
{
    static const char api[] = "aclrtDestroyEvent";
    SIM_ENTER(api);
    sim_event_t *e = NULL;
    aclError rc = get_event(event, api, &e);
    if (rc)
        return rc;
    pthread_mutex_lock(&e->dev->lock);
    sim_event_kill_locked(e);
    pthread_mutex_unlock(&e->dev->lock);
    sim_obj_unref(&e->obj);
    return ACL_SUCCESS;
}

static aclError run_record(sim_task_t *t, sim_stream_t *s)
{
    sim_event_t *e = t->u.ev.ev;
    pthread_mutex_lock(&s->lock);
    aclError code = atomic_load(&s->err_code);
    uint64_t err_id = s->err_id;
    pthread_mutex_unlock(&s->lock);
    uint64_t now = sim_now_ns();
    /* every task of s up to this one has finished: say so before the event completes, so that a
     * thread woken by the event sees the stream idle (aclrtStreamQuery) when nothing follows */
    uint64_t d = atomic_load_explicit(&s->done_seq, memory_order_acquire);
    while (d < t->seq && !atomic_compare_exchange_weak_explicit(&s->done_seq, &d, t->seq,
                                                                memory_order_acq_rel, memory_order_acquire))
        ;
    sim_stream_t *old = NULL;
    pthread_mutex_lock(&e->lock);
    if (t->u.ev.gen > e->completed_gen) {
        e->completed_gen = t->u.ev.gen;
        e->ts_ns = now;
        e->has_ts = true;
        old = e->err_stream;
        e->err_stream = NULL;
        if (code) {
            sim_obj_ref(&s->obj);
            e->err_stream = s;
            e->err_id = err_id;
        }
    }
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->lock);
    if (old)
        sim_obj_unref(&old->obj);
    return ACL_SUCCESS;
}

static aclError run_reset(sim_task_t *t, sim_stream_t *s)
{
    (void)s;
    sim_event_t *e = t->u.ev.ev;
    sim_stream_t *old = NULL;
    pthread_mutex_lock(&e->lock);
    if (t->u.ev.gen > e->completed_gen) {
        e->completed_gen = t->u.ev.gen;
        e->has_ts = false;
        old = e->err_stream;
        e->err_stream = NULL;
    }
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->lock);
    if (old)
        sim_obj_unref(&old->obj);
    return ACL_SUCCESS;
}

static aclError run_wait(sim_task_t *t, sim_stream_t *s)
{
    (void)s;
    sim_event_t *e = t->u.ev.ev;
    pthread_mutex_lock(&e->lock);
    while (e->completed_gen < t->u.ev.gen)
        pthread_cond_wait(&e->cv, &e->lock);
    pthread_mutex_unlock(&e->lock);
    return ACL_SUCCESS;
}

static void release_ev(sim_task_t *t) { sim_obj_unref(&t->u.ev.ev->obj); }

/* record / reset: take the event's next generation only once the task is certain to execute,
 * so a failed submit never leaves a generation that cannot complete */
static void enqueue_gen(sim_task_t *t)
{
    sim_event_t *e = t->u.ev.ev;
    pthread_mutex_lock(&e->lock);
    t->u.ev.gen = ++e->recorded_gen;
    pthread_mutex_unlock(&e->lock);
}

/* queue an event control task (record / reset / wait) */
static aclError event_task(const char *api, aclrtEvent event, aclrtStream stream, sim_task_run_fn run, int mode)
{
    SIM_ENTER(api);
    sim_event_t *e = NULL;
    aclError rc = get_event(event, api, &e);
    if (rc)
        return rc;
    sim_stream_t *s = NULL;
    rc = sim_stream_resolve(stream, api, &s);
    if (rc) {
        sim_obj_unref(&e->obj);
        return rc;
    }
    sim_task_t *t = sim_task_new();
    if (!t) {
        rc = sim_err(ACL_ERROR_RT_RESOURCE_ALLOC_FAIL, "%s: out of host memory", api);
        goto out;
    }
    uint64_t gen = 0;
    if (mode == 1) {   /* wait: the latest record at the call */
        pthread_mutex_lock(&e->lock);
        gen = e->recorded_gen;
        if (e->completed_gen >= gen)
            gen = 0;   /* never recorded or already complete: nothing to wait for */
        pthread_mutex_unlock(&e->lock);
        if (gen == 0) {
            free(t);
            goto out;
        }
    } else {           /* record or reset: the generation is taken at enqueue */
        t->on_enqueue = enqueue_gen;
    }
    t->control = true;
    t->steal = mode != 1;   /* records and resets are instant: a synchronizing thread may run them */
    t->cost_ns = 0;
    t->run = run;
    t->release = release_ev;
    sim_obj_ref(&e->obj);
    t->u.ev.ev = e;
    t->u.ev.gen = gen;
    rc = sim_stream_submit(s, t, mode == 0, api);
    if (rc == ACL_SUCCESS && run == run_record) {
        pthread_mutex_lock(&e->lock);
        e->rec_stream = s;
        pthread_mutex_unlock(&e->lock);
    }
out:
    sim_obj_unref(&s->obj);
    sim_obj_unref(&e->obj);
    return rc;
}

SIM_API aclError aclrtRecordEvent(aclrtEvent event, aclrtStream stream)
{
    return event_task("aclrtRecordEvent", event, stream, run_record, 0);
}

SIM_API aclError aclrtResetEvent(aclrtEvent event, aclrtStream stream)
{
    return event_task("aclrtResetEvent", event, stream, run_reset, 0);
}

SIM_API aclError aclrtStreamWaitEvent(aclrtStream stream, aclrtEvent event)
{
    return event_task("aclrtStreamWaitEvent", event, stream, run_wait, 1);
}

static aclError sync_event(const char *api, aclrtEvent event, int32_t timeout)
{
    SIM_ENTER(api);
    if (timeout < -1)
        return sim_err(ACL_ERROR_INVALID_PARAM, "%s: timeout must be -1, 0 or a positive number of ms (got %d)", api,
                       timeout);
    sim_event_t *e = NULL;
    aclError rc = get_event(event, api, &e);
    if (rc)
        return rc;
    struct timespec ts, *dl = NULL;
    if (timeout >= 0) {
        sim_deadline(&ts, (uint64_t)timeout * 1000000ull);
        dl = &ts;
    }
    sim_stream_t *es = NULL;
    uint64_t err_id = 0;
    pthread_mutex_lock(&e->lock);
    uint64_t target = e->recorded_gen;
    if (e->completed_gen < target && tls_running_stream && e->rec_stream == tls_running_stream) {
        pthread_mutex_unlock(&e->lock);
        sim_obj_unref(&e->obj);
        return sim_err(ACL_ERROR_RT_PARAM_INVALID,
                       "%s: cannot wait for event %p from inside a task of the stream it is recorded on (it would "
                       "deadlock)", api, event);
    }
    while (e->completed_gen < target) {
        if (sim_cond_wait_until(&e->cv, &e->lock, dl) == ETIMEDOUT && e->completed_gen < target) {
            rc = sim_err(ACL_ERROR_RT_EVENT_SYNC_TIMEOUT, "%s: event %p did not complete within %d ms", api, event,
                         timeout);
            break;
        }
    }
    if (rc == ACL_SUCCESS && e->err_stream && e->completed_gen >= target) {
        es = e->err_stream;
        sim_obj_ref(&es->obj);
        err_id = e->err_id;
    }
    pthread_mutex_unlock(&e->lock);
    if (es) {
        /* report the stream's sticky error if it is still the one the record saw */
        bool same;
        pthread_mutex_lock(&es->lock);
        same = atomic_load(&es->err_code) != 0 && es->err_id == err_id;
        pthread_mutex_unlock(&es->lock);
        if (same)
            rc = sim_stream_take_error(es, api);
        sim_obj_unref(&es->obj);
    }
    sim_obj_unref(&e->obj);
    return rc;
}

SIM_API aclError aclrtSynchronizeEvent(aclrtEvent event) { return sync_event("aclrtSynchronizeEvent", event, -1); }

SIM_API aclError aclrtSynchronizeEventWithTimeout(aclrtEvent event, int32_t timeout)
{
    return sync_event("aclrtSynchronizeEventWithTimeout", event, timeout);
}

SIM_API aclError aclrtQueryEventStatus(aclrtEvent event, aclrtEventRecordedStatus *status)
{
    static const char api[] = "aclrtQueryEventStatus";
    SIM_ENTER(api);
    SIM_NULL_CHECK(api, status);
    sim_event_t *e = NULL;
    aclError rc = get_event(event, api, &e);
    if (rc)
        return rc;
    pthread_mutex_lock(&e->lock);
    bool done = e->completed_gen >= e->recorded_gen;
    pthread_mutex_unlock(&e->lock);
    *status = done ? ACL_EVENT_RECORDED_STATUS_COMPLETE : ACL_EVENT_RECORDED_STATUS_NOT_READY;
    sim_obj_unref(&e->obj);
    return ACL_SUCCESS;
}

/* timestamp of a completed, timed record; errors name api and which ("start", "end", "event") */
static aclError event_ts(sim_event_t *e, const char *api, const char *which, uint64_t *ts)
{
    aclError rc = ACL_SUCCESS;
    pthread_mutex_lock(&e->lock);
    if (!e->timing)
        rc = sim_err(ACL_ERROR_RT_EVENT_TIMESTAMP_INVALID,
                     "%s: %s event %p was created without timing (ACL_EVENT_TIME_LINE)", api, which, SIM_H(e));
    else if (e->recorded_gen == 0)
        rc = sim_err(ACL_ERROR_RT_EVENT_TIMESTAMP_INVALID, "%s: %s event %p was never recorded", api, which, SIM_H(e));
    else if (e->completed_gen < e->recorded_gen)
        rc = sim_err(ACL_ERROR_RT_EVENT_NOT_COMPLETE, "%s: %s event %p has not completed yet", api, which, SIM_H(e));
    else if (!e->has_ts)
        rc = sim_err(ACL_ERROR_RT_EVENT_TIMESTAMP_INVALID, "%s: %s event %p was reset and not recorded since", api,
                     which, SIM_H(e));
    else
        *ts = e->ts_ns;
    pthread_mutex_unlock(&e->lock);
    return rc;
}

SIM_API aclError aclrtEventElapsedTime(float *ms, aclrtEvent startEvent, aclrtEvent endEvent)
{
    static const char api[] = "aclrtEventElapsedTime";
    SIM_ENTER(api);
    SIM_NULL_CHECK(api, ms);
    sim_event_t *a = NULL, *b = NULL;
    aclError rc = get_event(startEvent, api, &a);
    if (rc)
        return rc;
    rc = get_event(endEvent, api, &b);
    if (rc) {
        sim_obj_unref(&a->obj);
        return rc;
    }
    uint64_t ta = 0, tb = 0;
    rc = event_ts(a, api, "start", &ta);
    if (!rc)
        rc = event_ts(b, api, "end", &tb);
    if (!rc)
        *ms = (float)(((double)tb - (double)ta) / 1e6);
    sim_obj_unref(&a->obj);
    sim_obj_unref(&b->obj);
    return rc;
}

SIM_API aclError aclrtEventGetTimestamp(aclrtEvent event, uint64_t *timestamp)
{
    static const char api[] = "aclrtEventGetTimestamp";
    SIM_ENTER(api);
    SIM_NULL_CHECK(api, timestamp);
    sim_event_t *e = NULL;
    aclError rc = get_event(event, api, &e);
    if (rc)
        return rc;
    rc = event_ts(e, api, "the", timestamp);
    sim_obj_unref(&e->obj);
    return rc;
}

/* ------------------------------------------------------------------ host functions */

static aclError run_host(sim_task_t *t, sim_stream_t *s)
{
    (void)s;
    t->u.host.fn(t->u.host.args);
    return ACL_SUCCESS;
}

SIM_API aclError aclrtLaunchHostFunc(aclrtStream stream, aclrtHostFunc fn, void *args)
{
    static const char api[] = "aclrtLaunchHostFunc";
    SIM_ENTER(api);
    SIM_NULL_CHECK(api, fn);
    sim_stream_t *s = NULL;
    aclError rc = sim_stream_resolve(stream, api, &s);
    if (rc)
        return rc;
    sim_task_t *t = sim_task_new();
    if (!t) {
        sim_obj_unref(&s->obj);
        return sim_err(ACL_ERROR_RT_RESOURCE_ALLOC_FAIL, "%s: out of host memory", api);
    }
    t->control = true;   /* host bookkeeping: runs even after an asynchronous error */
    t->run = run_host;
    t->u.host.fn = fn;
    t->u.host.args = args;
    rc = sim_stream_submit(s, t, false, api);
    sim_obj_unref(&s->obj);
    return rc;
}

/* ------------------------------------------------------------------ report model */

typedef struct sim_cbitem {
    struct sim_cbitem *next;
    aclrtCallback fn;
    void *data;
    bool block;
    bool taken;
    bool done;
} sim_cbitem_t;

typedef struct sim_rq {
    struct sim_rq *next;
    uint64_t tid;
    sim_cbitem_t *head, *tail;
    pthread_cond_t cv;
} sim_rq_t;

static pthread_mutex_t g_rq_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_rq_done_cv;
static pthread_once_t g_rq_once = PTHREAD_ONCE_INIT;
static sim_rq_t *g_rqs;   /* never freed: one small record per reporting thread id */

static void rq_init_once(void) { sim_cond_init(&g_rq_done_cv); }

/* caller holds g_rq_lock */
static sim_rq_t *rq_get_locked(uint64_t tid)
{
    for (sim_rq_t *q = g_rqs; q; q = q->next)
        if (q->tid == tid)
            return q;
    sim_rq_t *q = calloc(1, sizeof *q);
    if (!q)
        return NULL;
    q->tid = tid;
    sim_cond_init(&q->cv);
    q->next = g_rqs;
    g_rqs = q;
    return q;
}

void sim_report_shutdown(void)
{
    pthread_once(&g_rq_once, rq_init_once);
    pthread_mutex_lock(&g_rq_lock);
    for (sim_rq_t *q = g_rqs; q; q = q->next)
        pthread_cond_broadcast(&q->cv);
    pthread_cond_broadcast(&g_rq_done_cv);
    pthread_mutex_unlock(&g_rq_lock);
}

SIM_API aclError aclrtSubscribeReport(uint64_t threadId, aclrtStream stream)
{
    static const char api[] = "aclrtSubscribeReport";
    SIM_ENTER(api);
    pthread_once(&g_rq_once, rq_init_once);
    sim_stream_t *s = NULL;
    aclError rc = sim_stream_resolve(stream, api, &s);
    if (rc)
        return rc;
    pthread_mutex_lock(&s->lock);
    if (s->subscribed) {
        rc = sim_err(ACL_ERROR_REPEAT_SUBSCRIBE, "%s: stream %p is already subscribed to thread %llu", api, SIM_H(s),
                     (unsigned long long)s->sub_tid);
    } else {
        s->subscribed = true;
        s->sub_tid = threadId;
    }
    pthread_mutex_unlock(&s->lock);
    sim_obj_unref(&s->obj);
    return rc;
}

SIM_API aclError aclrtUnSubscribeReport(uint64_t threadId, aclrtStream stream)
{
    static const char api[] = "aclrtUnSubscribeReport";
    SIM_ENTER(api);
    sim_stream_t *s = NULL;
    aclError rc = sim_stream_resolve(stream, api, &s);
    if (rc)
        return rc;
    pthread_mutex_lock(&s->lock);
    if (!s->subscribed)
        rc = sim_err(ACL_ERROR_STREAM_NOT_SUBSCRIBE, "%s: stream %p is not subscribed", api, SIM_H(s));
    else if (s->sub_tid != threadId)
        rc = sim_err(ACL_ERROR_THREAD_NOT_SUBSCRIBE, "%s: stream %p is subscribed to thread %llu, not %llu", api,
                     SIM_H(s), (unsigned long long)s->sub_tid, (unsigned long long)threadId);
    else
        s->subscribed = false;
    pthread_mutex_unlock(&s->lock);
    sim_obj_unref(&s->obj);
    return rc;
}

static aclError run_callback(sim_task_t *t, sim_stream_t *s)
{
    (void)s;
    sim_cbitem_t *it = calloc(1, sizeof *it);
    if (!it)
        return sim_err(ACL_ERROR_RT_RESOURCE_ALLOC_FAIL, "aclrtLaunchCallback: out of host memory");
    it->fn = t->u.cb.fn;
    it->data = t->u.cb.data;
    it->block = t->u.cb.block == ACL_CALLBACK_BLOCK;
    pthread_mutex_lock(&g_rq_lock);
    sim_rq_t *q = rq_get_locked(t->u.cb.tid);
    if (!q) {
        pthread_mutex_unlock(&g_rq_lock);
        free(it);
        return sim_err(ACL_ERROR_RT_RESOURCE_ALLOC_FAIL, "aclrtLaunchCallback: out of host memory");
    }
    if (q->tail)
        q->tail->next = it;
    else
        q->head = it;
    q->tail = it;
    pthread_cond_broadcast(&q->cv);
    if (!it->block) {
        pthread_mutex_unlock(&g_rq_lock);
        return ACL_SUCCESS;
    }
    while (!it->done) {
        if (atomic_load(&g_finalizing) && !it->taken) {
            /* aclFinalize is draining the streams: nobody may be left to process reports; run it here */
            sim_cbitem_t **pp = &q->head, *prev = NULL;
            while (*pp && *pp != it) {
                prev = *pp;
                pp = &(*pp)->next;
            }
            if (*pp) {
                *pp = it->next;
                if (q->tail == it)
                    q->tail = prev;
            }
            it->taken = true;
            pthread_mutex_unlock(&g_rq_lock);
            it->fn(it->data);
            pthread_mutex_lock(&g_rq_lock);
            break;
        }
        pthread_cond_wait(&g_rq_done_cv, &g_rq_lock);
    }
    pthread_mutex_unlock(&g_rq_lock);
    free(it);
    return ACL_SUCCESS;
}

SIM_API aclError aclrtLaunchCallback(aclrtCallback fn, void *userData, aclrtCallbackBlockType blockType,
                                     aclrtStream stream)
{
    static const char api[] = "aclrtLaunchCallback";
    SIM_ENTER(api);
    SIM_NULL_CHECK(api, fn);
    if ((int)blockType != ACL_CALLBACK_NO_BLOCK && (int)blockType != ACL_CALLBACK_BLOCK)
        return sim_err(ACL_ERROR_INVALID_PARAM, "%s: blockType must be ACL_CALLBACK_NO_BLOCK or ACL_CALLBACK_BLOCK (got %d)",
                       api, (int)blockType);
    pthread_once(&g_rq_once, rq_init_once);
    sim_stream_t *s = NULL;
    aclError rc = sim_stream_resolve(stream, api, &s);
    if (rc)
        return rc;
    pthread_mutex_lock(&s->lock);
    bool sub = s->subscribed;
    uint64_t tid = s->sub_tid;
    pthread_mutex_unlock(&s->lock);
    if (!sub) {
        sim_obj_unref(&s->obj);
        return sim_err(ACL_ERROR_STREAM_NOT_SUBSCRIBE,
                       "%s: stream %p is not subscribed to a report thread (call aclrtSubscribeReport first)", api,
                       SIM_H(s));
    }
    sim_task_t *t = sim_task_new();
    if (!t) {
        sim_obj_unref(&s->obj);
        return sim_err(ACL_ERROR_RT_RESOURCE_ALLOC_FAIL, "%s: out of host memory", api);
    }
    t->control = true;
    t->run = run_callback;
    t->u.cb.fn = fn;
    t->u.cb.data = userData;
    t->u.cb.block = (int)blockType;
    t->u.cb.tid = tid;
    rc = sim_stream_submit(s, t, false, api);
    sim_obj_unref(&s->obj);
    return rc;
}

SIM_API aclError aclrtProcessReport(int32_t timeout)
{
    static const char api[] = "aclrtProcessReport";
    SIM_ENTER(api);
    if (timeout < -1)
        return sim_err(ACL_ERROR_INVALID_PARAM, "%s: timeout must be -1, 0 or a positive number of ms (got %d)", api,
                       timeout);
    pthread_once(&g_rq_once, rq_init_once);
    struct timespec ts, *dl = NULL;
    if (timeout >= 0) {
        sim_deadline(&ts, (uint64_t)timeout * 1000000ull);
        dl = &ts;
    }
    uint64_t tid = (uint64_t)pthread_self();
    pthread_mutex_lock(&g_rq_lock);
    sim_rq_t *q = rq_get_locked(tid);
    if (!q) {
        pthread_mutex_unlock(&g_rq_lock);
        return sim_err(ACL_ERROR_RT_RESOURCE_ALLOC_FAIL, "%s: out of host memory", api);
    }
    while (!q->head) {
        if (!atomic_load(&g_inited)) {
            pthread_mutex_unlock(&g_rq_lock);
            return sim_err(ACL_ERROR_UNINITIALIZE, "%s: AscendCL was finalized", api);
        }
        if (sim_cond_wait_until(&q->cv, &g_rq_lock, dl) == ETIMEDOUT && !q->head) {
            pthread_mutex_unlock(&g_rq_lock);
            return sim_err(ACL_ERROR_RT_REPORT_TIMEOUT, "%s: no callback arrived within %d ms", api, timeout);
        }
    }
    sim_cbitem_t *it = q->head;
    q->head = it->next;
    if (!q->head)
        q->tail = NULL;
    it->taken = true;
    pthread_mutex_unlock(&g_rq_lock);
    it->fn(it->data);
    pthread_mutex_lock(&g_rq_lock);
    bool block = it->block;
    if (block) {
        it->done = true;
        pthread_cond_broadcast(&g_rq_done_cv);
    }
    pthread_mutex_unlock(&g_rq_lock);
    if (!block)
        free(it);
    return ACL_SUCCESS;
}
