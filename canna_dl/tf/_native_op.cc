// canna_dl.tf's native TensorFlow op: CannaCall (docs/DESIGN.md §7, §11).
//
// One generic op runs any registered canna op whose kernel is one aclnn call: its attributes
// name the registry entry (`op`, a qualified name) and its attributes/constant operands
// (`params`, JSON); its output shapes at graph construction come from the entry's shape rule
// (`out_shapes`). The kernel keeps, per node, a cache of Plans keyed by the actual input shapes.
// A miss takes the GIL once and asks canna's Python factory (registered by canna_dl.tf._native
// with canna_tf_configure) to build a private repeatable aclOpExecutor for those shapes and hand
// back its raw pointers; a hit runs with no Python at all: TF allocates the outputs, the operand
// addresses are swapped in (aclSetInputTensorAddr / aclSetOutputTensorAddr), phase 2 runs on
// canna's stream, and the stream is waited for. Launches of one plan are serialized. A nonzero
// aclError becomes a TF error status carrying canna's message, never an abort.
//
// Compiled at first use against the installed TensorFlow's headers (tf.sysconfig flags) and
// cached by TF version and source hash (canna_dl/tf/_native.py). No canna or CANN header is
// needed: the C functions arrive as addresses.
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"

using namespace tensorflow;

namespace {

typedef int32_t (*set_addr_fn)(void *, size_t, void *, void *);
typedef int32_t (*run_fn)(void *, uint64_t, void *, void *);
typedef int32_t (*sync_fn)(void *, int32_t);
typedef int32_t (*setctx_fn)(void *);
typedef const char *(*errmsg_fn)();

const int32_t kSyncTimeout = 507046;   // ACL_ERROR_RT_STREAM_SYNC_TIMEOUT

set_addr_fn g_set_in, g_set_out;
sync_fn g_sync;
setctx_fn g_setctx;
errmsg_fn g_errmsg;
PyObject *g_factory;
std::atomic<uint64_t> g_launches{0}, g_builds{0};
// executions per op_stats name (the node's attr stat: canna_dl.tf.op_stats merges them)
std::mutex g_stat_mu;
std::map<std::string, uint64_t> g_stat;
std::atomic<uint64_t> g_gen{0};   // bumped by acl_rt.finalize(): every plan is stale

struct Step {   // one aclnn call of the op (its kernel may make several, on its operands only)
    void *executor = nullptr;
    run_fn run = nullptr;
    uint64_t ws = 0;
    int nin = 0;
    std::vector<int> slots;     // per plan tensor: >= 0 a TF input index, < 0 output -(slot + 1)
    std::vector<void *> tensors, cur;
};

struct NPlan {
    PyObject *keep = nullptr;   // the Python objects owning the executors and descriptors
    void *stream = nullptr, *actx = nullptr;
    std::vector<Step> steps;    // empty: an empty output, nothing to launch
    std::vector<TensorShape> out_shapes;
    uint64_t gen = 0;           // the runtime generation it was built in
    std::mutex mu;
    ~NPlan()
    {
        if (keep && Py_IsInitialized()) {
            PyGILState_STATE g = PyGILState_Ensure();
            Py_DECREF(keep);
            PyGILState_Release(g);
        }
    }
};

std::string acl_message(int32_t rc, const char *api)
{
    std::string m = std::string(api) + " failed with aclError " + std::to_string(rc);
    const char *s = g_errmsg ? g_errmsg() : nullptr;
    if (s && *s)
        m += ": " + std::string(s);
    return m;
}

// the pending Python exception as a TF status (ValueError/TypeError/IndexError: InvalidArgument)
Status py_status(const std::string &what)
{
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    std::string msg = what;
    if (value) {
        PyObject *s = PyObject_Str(value);
        if (s) {
            const char *c = PyUnicode_AsUTF8(s);
            if (c)
                msg += std::string(type ? ((PyTypeObject *)type)->tp_name : "error") + ": " + c;
            Py_DECREF(s);
        }
    }
    PyErr_Clear();
    bool arg = type && (PyErr_GivenExceptionMatches(type, PyExc_ValueError) ||
                        PyErr_GivenExceptionMatches(type, PyExc_TypeError) ||
                        PyErr_GivenExceptionMatches(type, PyExc_IndexError));
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
    return arg ? errors::InvalidArgument(msg) : errors::Internal(msg);
}

bool as_ptr(PyObject *o, void **out)
{
    unsigned long long v = PyLong_AsUnsignedLongLong(o);
    if (v == (unsigned long long)-1 && PyErr_Occurred())
        return false;
    *out = (void *)(uintptr_t)v;
    return true;
}

Status bad_return(const std::string &op)
{
    if (PyErr_Occurred())
        return py_status("canna: " + op + ": the plan factory returned ");
    return errors::Internal("canna: ", op, ": the plan factory returned a malformed plan");
}

// one step: (executor, run, ws, nin, slots, tensors, addresses)
bool parse_step(PyObject *t, Step *st)
{
    PyObject *o_ex, *o_run, *slots, *tens, *addrs;
    unsigned long long ws;
    int nin;
    if (!PyArg_ParseTuple(t, "OOKiOOO", &o_ex, &o_run, &ws, &nin, &slots, &tens, &addrs))
        return false;
    void *fn = nullptr;
    if (!as_ptr(o_ex, &st->executor) || !as_ptr(o_run, &fn))
        return false;
    st->run = (run_fn)fn;
    st->ws = ws;
    st->nin = nin;
    Py_ssize_t n = PySequence_Size(slots);
    if (n < 0 || PySequence_Size(tens) != n || PySequence_Size(addrs) != n)
        return false;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *s = PySequence_GetItem(slots, i), *h = PySequence_GetItem(tens, i), *a = PySequence_GetItem(addrs, i);
        void *hp = nullptr, *ap = nullptr;
        bool ok = s && h && a && as_ptr(h, &hp) && as_ptr(a, &ap);
        if (ok) {
            st->slots.push_back((int)PyLong_AsLong(s));
            st->tensors.push_back(hp);
            st->cur.push_back(ap);
        }
        Py_XDECREF(s);
        Py_XDECREF(h);
        Py_XDECREF(a);
        if (!ok || PyErr_Occurred())
            return false;
    }
    return true;
}

// factory(op, params, shapes, dtypes) -> (keep, stream, ctx, steps, out_shapes); GIL held
Status build(const std::string &op, const std::string &params, OpKernelContext *ctx, NPlan *p)
{
    if (!g_factory)
        return errors::FailedPrecondition("canna: CannaCall's factory is not configured (import canna_dl.tf)");
    PyObject *shapes = PyList_New(ctx->num_inputs());
    PyObject *dtypes = PyList_New(ctx->num_inputs());
    for (int i = 0; i < ctx->num_inputs(); i++) {
        const TensorShape &s = ctx->input(i).shape();
        PyObject *t = PyTuple_New(s.dims());
        for (int d = 0; d < s.dims(); d++)
            PyTuple_SET_ITEM(t, d, PyLong_FromLongLong(s.dim_size(d)));
        PyList_SET_ITEM(shapes, i, t);
        PyList_SET_ITEM(dtypes, i, PyLong_FromLong((long)ctx->input(i).dtype()));
    }
    PyObject *r = PyObject_CallFunction(g_factory, "s#s#OO", op.data(), (Py_ssize_t)op.size(), params.data(),
                                        (Py_ssize_t)params.size(), shapes, dtypes);
    Py_DECREF(shapes);
    Py_DECREF(dtypes);
    if (!r)
        return py_status("canna: " + op + ": ");
    PyObject *keep, *o_stream, *o_ctx, *steps, *outs;
    bool ok = PyArg_ParseTuple(r, "OOOOO", &keep, &o_stream, &o_ctx, &steps, &outs) && as_ptr(o_stream, &p->stream) &&
              as_ptr(o_ctx, &p->actx);
    Py_ssize_t ns = ok ? PySequence_Size(steps) : -1;
    ok = ok && ns >= 0;
    for (Py_ssize_t i = 0; ok && i < ns; i++) {
        PyObject *t = PySequence_GetItem(steps, i);
        p->steps.emplace_back();
        ok = t && parse_step(t, &p->steps.back());
        Py_XDECREF(t);
    }
    Py_ssize_t no = ok ? PySequence_Size(outs) : -1;
    ok = ok && no >= 0;
    for (Py_ssize_t k = 0; ok && k < no; k++) {
        PyObject *sh = PySequence_GetItem(outs, k);
        TensorShape ts;
        Py_ssize_t nd = sh ? PySequence_Size(sh) : -1;
        ok = nd >= 0;
        for (Py_ssize_t d = 0; ok && d < nd; d++) {
            PyObject *v = PySequence_GetItem(sh, d);
            long long n = v ? PyLong_AsLongLong(v) : -1;
            Py_XDECREF(v);
            ok = n >= 0 && !PyErr_Occurred();
            if (ok)
                ts.AddDim(n);
        }
        Py_XDECREF(sh);
        p->out_shapes.push_back(ts);
    }
    Status st = ok ? OkStatus() : bad_return(op);
    if (ok) {
        Py_INCREF(keep);
        p->keep = keep;
    }
    Py_DECREF(r);
    return st;
}

class CannaCallOp : public OpKernel {
  public:
    explicit CannaCallOp(OpKernelConstruction *c) : OpKernel(c)
    {
        OP_REQUIRES_OK(c, c->GetAttr("op", &op_));
        OP_REQUIRES_OK(c, c->GetAttr("params", &params_));
        OP_REQUIRES_OK(c, c->GetAttr("stat", &stat_));
    }

    void counted()
    {
        if (stat_.empty())
            return;
        std::lock_guard<std::mutex> l(g_stat_mu);
        g_stat[stat_]++;
    }

    void Compute(OpKernelContext *ctx) override
    {
        std::vector<int64_t> key;
        for (int i = 0; i < ctx->num_inputs(); i++) {
            const TensorShape &s = ctx->input(i).shape();
            key.push_back(-1 - s.dims());
            for (int d = 0; d < s.dims(); d++)
                key.push_back(s.dim_size(d));
        }
        std::shared_ptr<NPlan> p;
        {
            std::lock_guard<std::mutex> l(mu_);
            auto it = cache_.find(key);
            if (it != cache_.end() && it->second->gen == g_gen.load())
                p = it->second;
        }
        if (!p) {
            auto np = std::make_shared<NPlan>();
            np->gen = g_gen.load();
            PyGILState_STATE g = PyGILState_Ensure();
            Status st = build(op_, params_, ctx, np.get());
            PyGILState_Release(g);
            OP_REQUIRES_OK(ctx, st);
            g_builds++;
            std::lock_guard<std::mutex> l(mu_);
            auto it = cache_.find(key);
            if (it != cache_.end() && it->second->gen == np->gen)
                p = it->second;   // another thread built it first: keep one
            else
                cache_[key] = p = np;   // (a stale plan of a finalized runtime is dropped)
        }
        int nout = ctx->num_outputs();
        OP_REQUIRES(ctx, (int)p->out_shapes.size() == nout,
                    errors::Internal("canna: ", op_, ": the plan has ", p->out_shapes.size(), " outputs, the node ",
                                     nout));
        std::vector<Tensor *> outs(nout);
        for (int k = 0; k < nout; k++)
            OP_REQUIRES_OK(ctx, ctx->allocate_output(k, p->out_shapes[k], &outs[k]));
        if (p->steps.empty()) {
            counted();
            return;
        }
        std::lock_guard<std::mutex> l(p->mu);
        if (g_setctx && p->actx) {
            int32_t rc = g_setctx(p->actx);
            OP_REQUIRES(ctx, rc == 0, errors::Internal("canna: ", op_, ": ", acl_message(rc, "aclrtSetCurrentContext")));
        }
        std::vector<Tensor> wbufs(p->steps.size());
        for (size_t k = 0; k < p->steps.size(); k++) {
            Step &st = p->steps[k];
            void *ws = nullptr;
            if (st.ws) {
                OP_REQUIRES_OK(ctx, ctx->allocate_temp(DT_INT8, TensorShape({(int64_t)st.ws}), &wbufs[k]));
                ws = (void *)wbufs[k].tensor_data().data();
            }
            for (size_t i = 0; i < st.slots.size(); i++) {
                int s = st.slots[i];
                void *addr = s >= 0 ? (void *)ctx->input(s).tensor_data().data()
                                    : (void *)outs[-s - 1]->tensor_data().data();
                if (addr == st.cur[i])
                    continue;
                bool out = (int)i >= st.nin;
                int32_t rc = (out ? g_set_out : g_set_in)(st.executor, out ? i - st.nin : i, st.tensors[i], addr);
                if (rc) {
                    st.cur[i] = (void *)(uintptr_t)1;
                    ctx->SetStatus(errors::Internal("canna: ", op_, ": ",
                                                    acl_message(rc, out ? "aclSetOutputTensorAddr" : "aclSetInputTensorAddr")));
                    return;
                }
                st.cur[i] = addr;
            }
            int32_t rc = st.run(ws, st.ws, st.executor, p->stream);
            if (rc) {
                ctx->SetStatus(errors::InvalidArgument("canna: ", op_, ": ", acl_message(rc, "aclnn phase 2")));
                return;
            }
        }
        int32_t rc;
        do
            rc = g_sync(p->stream, 200);
        while (rc == kSyncTimeout);
        if (rc) {
            ctx->SetStatus(errors::InvalidArgument("canna: ", op_, ": ",
                                                   acl_message(rc, "aclrtSynchronizeStreamWithTimeout")));
            return;
        }
        g_launches++;
        counted();
    }

  private:
    std::string op_, params_, stat_;
    std::mutex mu_;
    std::map<std::vector<int64_t>, std::shared_ptr<NPlan>> cache_;
};

}  // namespace

REGISTER_OP("CannaCall")
    .Input("x: Tin")
    .Output("y: Tout")
    .Attr("Tin: list(type) >= 0")
    .Attr("Tout: list(type) >= 1")
    .Attr("op: string")
    .Attr("params: string")
    .Attr("out_shapes: list(shape)")
    .Attr("stat: string = ''")
    .SetShapeFn([](shape_inference::InferenceContext *c) {
        std::vector<PartialTensorShape> shapes;
        TF_RETURN_IF_ERROR(c->GetAttr("out_shapes", &shapes));
        if ((int)shapes.size() != c->num_outputs())
            return errors::InvalidArgument("CannaCall: ", shapes.size(), " out_shapes for ", c->num_outputs(),
                                           " outputs");
        for (int k = 0; k < c->num_outputs(); k++) {
            shape_inference::ShapeHandle h;
            TF_RETURN_IF_ERROR(c->MakeShapeFromPartialTensorShape(shapes[k], &h));
            c->set_output(k, h);
        }
        return OkStatus();
    })
    .Doc("A registered canna op (attr op) run on canna's kernels (canna_dl.tf).");

REGISTER_KERNEL_BUILDER(Name("CannaCall").Device(DEVICE_CPU), CannaCallOp);

extern "C" {
// the C functions (addresses from the loaded libraries) and the Python plan factory; GIL held
int canna_tf_configure(void *set_in, void *set_out, void *sync, void *setctx, void *errmsg, PyObject *factory)
{
    g_set_in = (set_addr_fn)set_in;
    g_set_out = (set_addr_fn)set_out;
    g_sync = (sync_fn)sync;
    g_setctx = (setctx_fn)setctx;
    g_errmsg = (errmsg_fn)errmsg;
    Py_XINCREF(factory);
    Py_XSETREF(g_factory, factory);
    return 0;
}

void canna_tf_invalidate(void)
{
    g_gen++;
}

// "name\tcount\n" lines of the per-name executions into buf (n bytes); returns the bytes needed
size_t canna_tf_stat_dump(char *buf, size_t n)
{
    std::string out;
    {
        std::lock_guard<std::mutex> l(g_stat_mu);
        for (auto &kv : g_stat)
            out += kv.first + "\t" + std::to_string(kv.second) + "\n";
    }
    if (buf && n > out.size())
        memcpy(buf, out.c_str(), out.size() + 1);
    return out.size() + 1;
}

void canna_tf_stat_reset(void)
{
    std::lock_guard<std::mutex> l(g_stat_mu);
    g_stat.clear();
}

void canna_tf_stats(uint64_t *out)
{
    out[0] = g_launches.load();
    out[1] = g_builds.load();
}
}
