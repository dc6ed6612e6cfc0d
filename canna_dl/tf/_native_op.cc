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

struct NPlan {
    PyObject *keep = nullptr;   // the Python objects owning the executor and descriptors
    void *executor = nullptr;   // nullptr: an empty output, nothing to launch
    run_fn run = nullptr;
    uint64_t ws = 0;
    void *stream = nullptr, *actx = nullptr;
    int nin = 0;
    std::vector<int> slots;     // per plan tensor: >= 0 a TF input index, < 0 output -(slot + 1)
    std::vector<void *> tensors, cur;
    std::vector<TensorShape> out_shapes;
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

// factory(op, params, shapes, dtypes) -> (keep, executor, run, ws, stream, ctx, nin, slots,
// tensors, addresses, out_shapes); called with the GIL held
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
    Status st = OkStatus();
    PyObject *slots, *tens, *addrs, *outs;
    PyObject *keep;
    void *ex, *run, *stream, *actx;
    unsigned long long ws;
    int nin;
    PyObject *o_ex, *o_run, *o_stream, *o_ctx;
    if (!PyArg_ParseTuple(r, "OOOKOOiOOOO", &keep, &o_ex, &o_run, &ws, &o_stream, &o_ctx, &nin, &slots, &tens,
                          &addrs, &outs) ||
        !as_ptr(o_ex, &ex) || !as_ptr(o_run, &run) || !as_ptr(o_stream, &stream) || !as_ptr(o_ctx, &actx)) {
        Py_DECREF(r);
        return py_status("canna: " + op + ": the plan factory returned ");
    }
    p->executor = ex;
    p->run = (run_fn)run;
    p->ws = ws;
    p->stream = stream;
    p->actx = actx;
    p->nin = nin;
    Py_ssize_t n = PySequence_Size(slots);
    for (Py_ssize_t i = 0; i < n && st.ok(); i++) {
        PyObject *s = PySequence_GetItem(slots, i), *t = PySequence_GetItem(tens, i), *a = PySequence_GetItem(addrs, i);
        void *tp = nullptr, *ap = nullptr;
        if (!s || !t || !a || !as_ptr(t, &tp) || !as_ptr(a, &ap))
            st = py_status("canna: " + op + ": the plan factory returned ");
        else {
            p->slots.push_back((int)PyLong_AsLong(s));
            p->tensors.push_back(tp);
            p->cur.push_back(ap);
        }
        Py_XDECREF(s);
        Py_XDECREF(t);
        Py_XDECREF(a);
    }
    Py_ssize_t no = PySequence_Size(outs);
    for (Py_ssize_t k = 0; k < no && st.ok(); k++) {
        PyObject *sh = PySequence_GetItem(outs, k);
        TensorShape ts;
        Py_ssize_t nd = sh ? PySequence_Size(sh) : -1;
        for (Py_ssize_t d = 0; d < nd; d++) {
            PyObject *v = PySequence_GetItem(sh, d);
            ts.AddDim(PyLong_AsLongLong(v));
            Py_XDECREF(v);
        }
        Py_XDECREF(sh);
        if (PyErr_Occurred())
            st = py_status("canna: " + op + ": the plan factory returned ");
        p->out_shapes.push_back(ts);
    }
    if (st.ok()) {
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
            if (it != cache_.end())
                p = it->second;
        }
        if (!p) {
            auto np = std::make_shared<NPlan>();
            PyGILState_STATE g = PyGILState_Ensure();
            Status st = build(op_, params_, ctx, np.get());
            PyGILState_Release(g);
            OP_REQUIRES_OK(ctx, st);
            g_builds++;
            std::lock_guard<std::mutex> l(mu_);
            auto it = cache_.find(key);
            if (it != cache_.end())
                p = it->second;   // another thread built it first: keep one
            else
                cache_[key] = p = np;
        }
        int nout = ctx->num_outputs();
        OP_REQUIRES(ctx, (int)p->out_shapes.size() == nout,
                    errors::Internal("canna: ", op_, ": the plan has ", p->out_shapes.size(), " outputs, the node ",
                                     nout));
        std::vector<Tensor *> outs(nout);
        for (int k = 0; k < nout; k++)
            OP_REQUIRES_OK(ctx, ctx->allocate_output(k, p->out_shapes[k], &outs[k]));
        if (!p->executor)
            return;
        Tensor wbuf;
        void *ws = nullptr;
        if (p->ws) {
            OP_REQUIRES_OK(ctx, ctx->allocate_temp(DT_INT8, TensorShape({(int64_t)p->ws}), &wbuf));
            ws = (void *)wbuf.tensor_data().data();
        }
        std::lock_guard<std::mutex> l(p->mu);
        if (g_setctx && p->actx) {
            int32_t rc = g_setctx(p->actx);
            OP_REQUIRES(ctx, rc == 0, errors::Internal("canna: ", op_, ": ", acl_message(rc, "aclrtSetCurrentContext")));
        }
        for (size_t i = 0; i < p->slots.size(); i++) {
            int s = p->slots[i];
            void *addr = s >= 0 ? (void *)ctx->input(s).tensor_data().data()
                                : (void *)outs[-s - 1]->tensor_data().data();
            if (addr == p->cur[i])
                continue;
            bool out = (int)i >= p->nin;
            int32_t rc = (out ? g_set_out : g_set_in)(p->executor, out ? i - p->nin : i, p->tensors[i], addr);
            if (rc) {
                p->cur[i] = (void *)(uintptr_t)1;
                ctx->SetStatus(errors::Internal("canna: ", op_, ": ",
                                                acl_message(rc, out ? "aclSetOutputTensorAddr" : "aclSetInputTensorAddr")));
                return;
            }
            p->cur[i] = addr;
        }
        int32_t rc = p->run(ws, p->ws, p->executor, p->stream);
        if (rc) {
            ctx->SetStatus(errors::InvalidArgument("canna: ", op_, ": ", acl_message(rc, "aclnn phase 2")));
            return;
        }
        do
            rc = g_sync(p->stream, 200);
        while (rc == kSyncTimeout);
        if (rc) {
            ctx->SetStatus(errors::InvalidArgument("canna: ", op_, ": ",
                                                   acl_message(rc, "aclrtSynchronizeStreamWithTimeout")));
            return;
        }
        g_launches++;
    }

  private:
    std::string op_, params_;
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

void canna_tf_stats(uint64_t *out)
{
    out[0] = g_launches.load();
    out[1] = g_builds.load();
}
}
