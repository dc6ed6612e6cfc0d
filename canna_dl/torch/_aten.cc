// canna_dl.torch's dispatcher route: offload(level="aten") (docs/DESIGN.md §7).
//
// PyTorch's dispatcher picks an operator's kernel from the dispatch keys of its arguments and of
// the calling thread's included set. An offload(level="aten") block includes one functionality
// key in the thread's set (canna_aten_include): CustomRNGKeyId, a key no kernel of
// PyTorch's own uses, below autograd and above the dense backends (a backend key such as
// PrivateUse1..3 would not do: included, it adds its backend bit to every tensor's keys, and
// PyTorch's composite kernels for sparse tensors would then run for that backend). PyTorch's
// autograd runs as usual (its own derivative formulas, in C++); below it every aten operator
// of a dense tensor reaches this library's kernels for the key (sparse, quantized and nested
// tensors have higher keys of their own and never do; factory functions are sent to their
// backend by BackendSelect first):
//  - the aten overloads a registry entry maps (its aten= items) run CannaKernel: the arguments
//    become Python objects (tensors wrapped, zero-copy; a tensor requiring grad as a detached
//    alias: autograd is PyTorch's here; a wrapped number as the number), and the entry's Python
//    handler runs canna's kernel on them, or answers the fallback sentinel (canna refuses the
//    call: an unsupported dtype, a guard) and the call runs on PyTorch; an argument canna cannot
//    take (a meta tensor, a Generator, a Layout, ...) sends the call to PyTorch without Python;
//  - every other operator runs the fallback: counted (the report's PyTorch calls) and
//    redispatched to PyTorch's own kernel (the key removed from the keys).
// Code running under either (canna's Python, PyTorch's kernel and whatever it calls) runs with
// the key off, so PyTorch's internals stay PyTorch's and canna's own torch calls are not routed.
//
// Compiled at first use against the installed PyTorch's headers and cached by PyTorch version and
// source hash, as canna's other framework glue (canna_dl/torch/_aten.py).
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/csrc/DynamicTypes.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/library.h>

namespace {

constexpr c10::DispatchKey kKey = c10::DispatchKey::CustomRNGKeyId;

// the key off in this thread's included set for a scope (restored on exit, exceptions too)
struct KeyOff {
    bool was;
    KeyOff() : was(c10::impl::tls_is_dispatch_key_included(kKey))
    {
        if (was)
            c10::impl::tls_set_dispatch_key_included(kKey, false);
    }
    ~KeyOff()
    {
        if (was)
            c10::impl::tls_set_dispatch_key_included(kKey, true);
    }
};

// PyTorch's calls: per operator schema (stable addresses inside the dispatcher), its count
// (per thread: a block's backward pass on CPU tensors runs on the thread that started it)
thread_local std::unordered_map<const c10::FunctionSchema *, uint64_t> t_other;
std::atomic<uint64_t> g_canna{0}, g_refused{0};

void count_other(const c10::OperatorHandle &op)
{
    t_other[&op.schema()]++;
}

void to_pytorch(const c10::OperatorHandle &op, c10::DispatchKeySet ks, torch::jit::Stack *stack)
{
    KeyOff off;
    op.redispatchBoxed(ks.remove(kKey), stack);
}

void fallback(const c10::OperatorHandle &op, c10::DispatchKeySet ks, torch::jit::Stack *stack)
{
    count_other(op);
    to_pytorch(op, ks, stack);
}

PyObject *g_sentinel;   // the handlers' "run it on PyTorch" answer

struct Entry {
    PyObject *handler = nullptr;
};
std::vector<std::unique_ptr<Entry>> g_entries;
std::unordered_map<std::string, int> g_ids;   // "aten::addmm.default" -> entry
std::vector<std::unique_ptr<torch::Library>> g_libs;

bool real_type_is(const c10::Argument &a, c10::TypeKind k)
{
    c10::TypePtr t = a.real_type();
    if (auto o = t->cast<c10::OptionalType>())
        t = o->getElementType();
    return t->kind() == k;
}

// one argument as a Python object (new reference), or nullptr (no exception set) when canna's
// handlers cannot take it (a Generator, a Device, a Layout, ...): the call runs on PyTorch
PyObject *to_py(const c10::IValue &v, const c10::Argument *arg)
{
    if (v.isNone())
        Py_RETURN_NONE;
    if (v.isTensor()) {
        const at::Tensor &t = v.toTensor();
        if (!t.defined())
            Py_RETURN_NONE;
        if (!t.device().is_cpu() || t.layout() != at::kStrided)
            return nullptr;   // a meta / sparse / other device tensor: PyTorch's
        if (t.unsafeGetTensorImpl()->is_wrapped_number() && t.device().is_cpu()) {
            // a Python number PyTorch wrapped (x + 2.0): the number itself, PyTorch's weak scalar
            switch (t.scalar_type()) {
            case at::kDouble:
                return PyFloat_FromDouble(*static_cast<const double *>(t.const_data_ptr()));
            case at::kLong:
                return PyLong_FromLongLong(*static_cast<const int64_t *>(t.const_data_ptr()));
            case at::kBool:
                return PyBool_FromLong(*static_cast<const bool *>(t.const_data_ptr()));
            default:
                return nullptr;   // a complex number: PyTorch's
            }
        }
        // below autograd the tensor may still require grad (a weight): canna computes on an alias
        // without autograd metadata, as PyTorch's own kernels do
        return THPVariable_Wrap(t.requires_grad() ? t.variable_data() : t);
    }
    if (v.isBool())
        return PyBool_FromLong(v.toBool());
    if (v.isInt()) {
        if (arg && real_type_is(*arg, c10::TypeKind::ScalarTypeType)) {
            PyObject *d = (PyObject *)torch::getTHPDtype(static_cast<at::ScalarType>(v.toInt()));
            Py_XINCREF(d);
            return d;
        }
        if (arg && (real_type_is(*arg, c10::TypeKind::LayoutType) || real_type_is(*arg, c10::TypeKind::MemoryFormatType)))
            return nullptr;
        return PyLong_FromLongLong(v.toInt());
    }
    if (v.isSymInt()) {
        auto i = v.toSymInt().maybe_as_int();
        return i ? PyLong_FromLongLong(*i) : nullptr;
    }
    if (v.isDouble())
        return PyFloat_FromDouble(v.toDouble());
    if (v.isString()) {
        const std::string &s = v.toStringRef();
        return PyUnicode_FromStringAndSize(s.data(), (Py_ssize_t)s.size());
    }
    if (v.isList()) {
        auto l = v.toListRef();
        PyObject *t = PyTuple_New((Py_ssize_t)l.size());
        if (!t)
            return nullptr;
        for (size_t i = 0; i < l.size(); i++) {
            PyObject *o = to_py(l[i], nullptr);
            if (!o) {
                Py_DECREF(t);
                return nullptr;
            }
            PyTuple_SET_ITEM(t, (Py_ssize_t)i, o);
        }
        return t;
    }
    return nullptr;
}

// a returned Python object as the schema's return (a tensor, None for an optional tensor)
bool from_py(PyObject *o, c10::IValue *out)
{
    if (o == Py_None) {
        *out = c10::IValue(at::Tensor());
        return true;
    }
    if (!THPVariable_Check(o))
        return false;
    *out = c10::IValue(THPVariable_Unpack(o));
    return true;
}

[[noreturn]] void raise_python(PyGILState_STATE g)
{
    python_error e;
    e.persist();
    PyGILState_Release(g);
    throw e;
}

struct CannaKernel final : public c10::OperatorKernel {
    int id;
    explicit CannaKernel(int i) : id(i) {}

    void operator()(const c10::OperatorHandle &op, c10::DispatchKeySet ks, torch::jit::Stack *stack)
    {
        const auto &schema = op.schema();
        const auto &args = schema.arguments();
        const auto &rets = schema.returns();
        size_t n = args.size(), base = stack->size() - n;
        PyGILState_STATE g = PyGILState_Ensure();
        PyObject *handler = g_entries[id]->handler;
        PyObject *tup = handler ? PyTuple_New((Py_ssize_t)n) : nullptr;
        bool ok = tup != nullptr;
        for (size_t i = 0; ok && i < n; i++) {
            PyObject *o = to_py((*stack)[base + i], &args[i]);
            if (!o)
                ok = false;
            else
                PyTuple_SET_ITEM(tup, (Py_ssize_t)i, o);
        }
        if (!ok) {   // an argument canna's handlers do not take
            Py_XDECREF(tup);
            if (PyErr_Occurred())
                raise_python(g);
            PyGILState_Release(g);
            g_refused++;
            fallback(op, ks, stack);
            return;
        }
        PyObject *r;
        {
            KeyOff off;
            r = PyObject_Call(handler, tup, nullptr);
        }
        Py_DECREF(tup);
        if (!r)
            raise_python(g);
        if (r == g_sentinel) {
            Py_DECREF(r);
            PyGILState_Release(g);
            g_refused++;
            fallback(op, ks, stack);
            return;
        }
        std::vector<c10::IValue> outs(rets.size());
        bool good = true;
        for (size_t k = 0; good && k < rets.size(); k++) {
            const c10::AliasInfo *ra = rets[k].alias_info();
            if (ra && ra->isWrite()) {   // an in-place / out= form returns its written argument itself
                good = false;
                for (size_t i = 0; i < n; i++) {
                    const c10::AliasInfo *aa = args[i].alias_info();
                    if (aa && aa->isWrite() && aa->beforeSets() == ra->beforeSets()) {
                        outs[k] = (*stack)[base + i];
                        good = true;
                        break;
                    }
                }
                continue;
            }
            PyObject *o = rets.size() == 1 ? r : (PyTuple_Check(r) && PyTuple_GET_SIZE(r) == (Py_ssize_t)rets.size()
                                                       ? PyTuple_GET_ITEM(r, (Py_ssize_t)k)
                                                       : nullptr);
            good = o && from_py(o, &outs[k]);
        }
        Py_DECREF(r);
        if (!good) {
            PyErr_Format(PyExc_RuntimeError, "canna_dl.torch.offload(level='aten'): %s: canna's handler returned "
                         "results that do not match the schema's returns", schema.operator_name().name.c_str());
            raise_python(g);
        }
        PyGILState_Release(g);
        torch::jit::drop(*stack, n);
        for (auto &o : outs)
            stack->push_back(std::move(o));
        g_canna++;
    }
};

}  // namespace

TORCH_LIBRARY_IMPL(_, CustomRNGKeyId, m)
{
    m.fallback(torch::CppFunction::makeFromBoxedFunction<&fallback>());
}
extern "C" {
// include (on 1) or leave out (0) the key in this thread's dispatch key set; the previous state
int canna_aten_include(int on)
{
    bool was = c10::impl::tls_is_dispatch_key_included(kKey);
    c10::impl::tls_set_dispatch_key_included(kKey, on != 0);
    return was ? 1 : 0;
}

// the handlers' fallback sentinel; GIL held
int canna_aten_configure(PyObject *sentinel)
{
    Py_INCREF(sentinel);
    Py_XSETREF(g_sentinel, sentinel);
    return 0;
}

// route `name` ("aten::addmm", overload "" or "Tensor") to canna: handler(*schema arguments) ->
// the result, or the sentinel. A second call for the same overload replaces its handler. 0, or
// -1 with a Python exception set (no such operator). GIL held.
int canna_aten_register(const char *name, const char *overload, PyObject *handler)
{
    std::string key = std::string(name) + "." + (overload && *overload ? overload : "default");
    auto it = g_ids.find(key);
    if (it != g_ids.end()) {
        Py_INCREF(handler);
        Py_XSETREF(g_entries[it->second]->handler, handler);
        return 0;
    }
    try {
        std::string qual(name);
        size_t sep = qual.find("::");
        if (sep == std::string::npos)
            throw std::runtime_error("not a qualified operator name (ns::name): " + qual);
        std::string ns = qual.substr(0, sep), op = qual.substr(sep + 2);
        if (!c10::Dispatcher::singleton().findSchema({qual, overload ? overload : ""}))
            throw std::runtime_error("no operator " + key);
        int id = (int)g_entries.size();
        g_entries.push_back(std::make_unique<Entry>());
        auto lib = std::make_unique<torch::Library>(torch::Library::IMPL, ns, std::optional<c10::DispatchKey>(kKey),
                                                    "canna_dl/torch/_aten.cc", 0);
        std::string target = overload && *overload ? op + "." + overload : op;
        lib->impl(target.c_str(), torch::CppFunction::makeFromBoxedFunctor(std::make_unique<CannaKernel>(id)));
        g_libs.push_back(std::move(lib));
        Py_INCREF(handler);
        g_entries[id]->handler = handler;
        g_ids[key] = id;
    } catch (const std::exception &e) {
        PyErr_Format(PyExc_ValueError, "canna_dl.torch: cannot route %s to canna: %s", key.c_str(), e.what());
        return -1;
    }
    return 0;
}

// counters: out[0] calls canna ran, out[1] calls its handlers refused (run on PyTorch)
void canna_aten_counts(uint64_t *out)
{
    out[0] = g_canna.load();
    out[1] = g_refused.load();
}

// this thread's PyTorch calls since the last reset: a dict {"aten::name.overload": count}; GIL held
PyObject *canna_aten_other(int reset)
{
    std::unordered_map<const c10::FunctionSchema *, uint64_t> m;
    if (reset)
        m.swap(t_other);
    else
        m = t_other;
    PyObject *d = PyDict_New();
    for (auto &kv : m) {
        const auto &on = kv.first->operator_name();
        std::string nm = on.name + "." + (on.overload_name.empty() ? "default" : on.overload_name);
        PyObject *v = PyLong_FromUnsignedLongLong(kv.second);
        if (!d || !v || PyDict_SetItemString(d, nm.c_str(), v)) {
            Py_XDECREF(v);
            Py_XDECREF(d);
            return nullptr;
        }
        Py_DECREF(v);
    }
    return d;
}
}
