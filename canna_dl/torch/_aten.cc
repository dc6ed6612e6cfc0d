// canna_dl.torch's dispatcher route: offload(level="aten") (docs/DESIGN.md §7).
//
// PyTorch's dispatcher picks an operator's kernel from the dispatch keys of its arguments and of
// the calling thread's included set. An offload(level="aten") block includes one functionality
// key in the thread's set (canna_aten_enter): CustomRNGKeyId, a key no kernel of
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

#include <algorithm>
#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include <ATen/DLConvertor.h>
#include <ATen/EmptyTensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/csrc/DynamicTypes.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/library.h>

#include "fast_api.h"   // (kernels/_native: after ATen's dlpack.h, whose DLTensor it uses)

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
std::atomic<uint64_t> g_canna{0}, g_refused{0}, g_direct{0}, g_direct_c{0};

void count_other(const c10::OperatorHandle &op)
{
    t_other[&op.schema()]++;
}

// PyTorch's kernel below the key, the key left on (a CompositeImplicitAutograd operator below its
// autograd: its parts are operators canna may take)
void pass_on(const c10::OperatorHandle &op, c10::DispatchKeySet ks, torch::jit::Stack *stack)
{
    op.redispatchBoxed(ks.remove(kKey), stack);
}

// PyTorch's kernel, with the key off (its internal calls are not routed)
void to_pytorch(const c10::OperatorHandle &op, c10::DispatchKeySet ks, torch::jit::Stack *stack)
{
    KeyOff off;
    pass_on(op, ks, stack);
}

void fallback(const c10::OperatorHandle &op, c10::DispatchKeySet ks, torch::jit::Stack *stack)
{
    count_other(op);
    to_pytorch(op, ks, stack);
}

PyObject *g_sentinel;   // the handlers' "run it on PyTorch" answer

// The direct call of an entry: the C function its kernel-level function tries first (the memo
// fast path kernels._native.memo, or the elementwise fast path kernels._native.fast), called
// from here with the arguments the generated function would pass, under the same conditions —
// no Python runs on a hit. Anything else (a miss, not applicable) takes the Python handler.
struct Direct {
    int kind = 0;                  // 0: none, 1: memo(id, stream, *args), 2: fast(id, stream, x, y, p)
    PyObject *id = nullptr;        // the memo / fast op id
    long op = 0;                   // ... as a C long (the C route's)
    PyObject *api = nullptr;       // the op's API name: memo / fast's stream argument (the thread's current stream)
    std::vector<int> src;          // per argument after (id, stream): the schema argument's index, or -1
    std::vector<PyObject *> dflt;  // ... and the constant taken for -1
    std::vector<std::pair<int, PyObject *>> fixed;   // (schema index, the value it must have)
    std::vector<int> nonone;       // schema indices that must not be None
    PyObject *codes = nullptr;     // fast: the str attribute's codes (its last argument), or null
    PyObject *result = nullptr;    // the item's result adapter result(r, *arguments), or null
    std::vector<PyObject *> conv;  // per argument after (id, stream): the item's conversion f(value), or null
};

// What PyTorch's own rules say of one call signature (the entry's check, run once per signature
// on meta tensors: canna_dl/torch/_aten.py _checker): run it on canna (with the shape and dtype
// each result must have), refuse it (a reason: counted), or leave it to PyTorch, which rejects it
// (PyTorch raises its own error; nothing counted).
struct Expect {
    int8_t what = 0;               // 0: not checked (a written argument, a list), 1: undefined, 2: a tensor
    at::ScalarType dtype = at::kFloat;
    std::vector<int64_t> sizes;
    std::vector<int64_t> strides;  // (2) PyTorch's layout when it is not contiguous, else empty
};
struct Verdict {
    int8_t what = 0;               // 0: canna runs it, 1: refused (reason), 2: PyTorch rejects it
    PyObject *reason = nullptr;    // (1) the reason, a str (owned)
    std::vector<Expect> outs;      // (0) per schema return
    bool strided = false;          // (0) a result has PyTorch's non-contiguous layout: the handler
                                   // writes it into an output allocated so (its out= argument)
    std::vector<int> perm;         // (strided, one result) the order of its dims, outermost first,
                                   // that lays it out contiguously (dense_perm), else empty
    ~Verdict()
    {
        if (reason && Py_IsInitialized()) {   // (the last holder may run without the GIL)
            PyGILState_STATE g = PyGILState_Ensure();
            Py_DECREF(reason);
            PyGILState_Release(g);
        }
    }
};

struct Entry {
    PyObject *handler = nullptr;
    PyObject *check = nullptr;     // check(*arguments) -> expectations, a reason (str) or False
    PyObject *refuse = nullptr;    // refuse(reason): count a refusal in the thread's block (strict: raises)
    std::string row;               // the report row of direct hits
    Direct d;
    std::vector<int8_t> kinds;     // per schema argument, its ArgKind (filled at the first call)
    bool writes = false;           // some schema argument is written (in place / out=)
    std::unordered_map<std::string, std::shared_ptr<const Verdict>> verdicts;   // per call signature (sig_key)
};
std::vector<std::unique_ptr<Entry>> g_entries;

// this thread's blocks (innermost last): its token and, per entry id, 1 where the block routes it
thread_local std::vector<std::pair<int64_t, std::vector<uint8_t>>> t_masks;
thread_local int64_t t_tokens = 0;
thread_local bool t_base = false;   // whether the key was included before the thread's outermost block
thread_local std::vector<uint64_t> t_hits;   // direct hits per entry id since the last fold

// the direct path's Python objects (canna_aten_configure_direct): the two C functions and the
// state the generated functions test before calling them
PyObject *g_memo_fn, *g_fast_fn, *g_fs, *g_cap, *g_lib, *g_state;
const CannaFastApi *g_fast_api;   // kernels._native.fast_api: fast() from C, on the dispatcher's tensors
PyObject *s_on, *s_memo, *s_rec, *s_gen, *s_generation;

bool enabled(int id)
{
    if (t_masks.empty())
        return false;
    const std::vector<uint8_t> &m = t_masks.back().second;
    return (size_t)id < m.size() && m[(size_t)id];
}

bool attr_is_none(PyObject *o, PyObject *name)
{
    PyObject *v = PyObject_GetAttr(o, name);
    if (!v) {
        PyErr_Clear();
        return false;
    }
    bool none = v == Py_None;
    Py_DECREF(v);
    return none;
}

// the conditions of the generated functions' fast paths: on, no plan capture, the plans' runtime
bool direct_ready(const Direct &d)
{
    if (!g_fs)
        return false;
    PyObject *on = PyDict_GetItemWithError(g_fs, s_on);   // borrowed
    if (on != Py_True) {
        PyErr_Clear();
        return false;
    }
    if (!attr_is_none(g_cap, s_memo) || (d.kind == 1 && !attr_is_none(g_cap, s_rec)))
        return false;
    PyObject *a = PyObject_GetAttr(g_lib, s_gen);
    PyObject *b = a ? PyObject_GetAttr(g_state, s_generation) : nullptr;
    int eq = b ? PyObject_RichCompareBool(a, b, Py_EQ) : -1;
    Py_XDECREF(a);
    Py_XDECREF(b);
    if (eq < 0)
        PyErr_Clear();
    return eq == 1;
}

// an str attribute's code, as the generated call computes it (_CODES.get(a, -1) if type(a) is
// str else -1): a new reference, or nullptr with an exception set
PyObject *attr_code(const Direct &d, PyObject *a)
{
    PyObject *c = PyUnicode_CheckExact(a) ? PyDict_GetItemWithError(d.codes, a) : nullptr;
    if (PyErr_Occurred())
        return nullptr;
    return c ? (Py_INCREF(c), c) : PyLong_FromLong(-1);
}

// new references a direct call holds until it returns (at most N)
template <size_t N> struct Refs {
    PyObject *o[N];
    size_t n = 0;
    PyObject *keep(PyObject *x)
    {
        if (x)
            o[n++] = x;
        return x;
    }
    ~Refs()
    {
        for (size_t i = 0; i < n; i++)
            Py_DECREF(o[i]);
    }
};

// argument j of a direct call after the item's conversion, as the handler applies it: v itself,
// its converted value (held by refs), or nullptr with an exception set
template <size_t N> PyObject *convert_arg(const Direct &d, size_t j, PyObject *v, Refs<N> &refs)
{
    return d.conv[j] ? refs.keep(PyObject_CallOneArg(d.conv[j], v)) : v;
}

// the direct call: a new reference to the result (Py_None for none), or nullptr — with a Python
// exception set on an error, without one when the handler must decide (a miss, not applicable)
PyObject *direct_call(const Direct &d, PyObject *tup, bool *ran)
{
    *ran = false;
    if (!direct_ready(d))
        return nullptr;
    for (const auto &f : d.fixed) {
        PyObject *got = PyTuple_GET_ITEM(tup, f.first);
        if (got == f.second)
            continue;
        if (THPVariable_Check(got))
            return nullptr;
        int eq = PyObject_RichCompareBool(f.second, got, Py_EQ);
        if (eq != 1) {
            PyErr_Clear();
            return nullptr;
        }
    }
    for (int i : d.nonone)
        if (PyTuple_GET_ITEM(tup, i) == Py_None)
            return nullptr;
    constexpr size_t kMax = 40;
    PyObject *argv[kMax];
    Refs<kMax + 1> refs;
    size_t na = 2;
    for (size_t j = 0; j < d.src.size(); j++) {
        if (d.src[j] <= -2) {   // a list argument: its length, then its items
            PyObject *l = PyTuple_GET_ITEM(tup, -2 - d.src[j]);
            if (!PyList_Check(l) && !PyTuple_Check(l))
                return nullptr;
            Py_ssize_t n = PySequence_Fast_GET_SIZE(l);
            if (na + 1 + (size_t)n > kMax || !(argv[na] = refs.keep(PyLong_FromSsize_t(n))))
                return nullptr;
            na++;
            for (Py_ssize_t q = 0; q < n; q++)
                argv[na++] = PySequence_Fast_GET_ITEM(l, q);
            continue;
        }
        if (na + 1 > kMax)
            return nullptr;
        if (!(argv[na++] = convert_arg(d, j, d.src[j] >= 0 ? PyTuple_GET_ITEM(tup, d.src[j]) : d.dflt[j], refs)))
            return nullptr;
    }
    if (d.codes && !(argv[na - 1] = refs.keep(attr_code(d, argv[na - 1]))))
        return nullptr;
    argv[0] = d.id;
    argv[1] = d.api;   // (the thread's current stream, resolved and remembered on the C side)
    PyObject *r = PyObject_Vectorcall(d.kind == 1 ? g_memo_fn : g_fast_fn, argv, na, nullptr);
    if (!r)
        return nullptr;
    if (r == Py_None || PyBytes_Check(r)) {   // not applicable / a miss: the handler runs the call
        Py_DECREF(r);
        return nullptr;
    }
    if (r == Py_Ellipsis) {   // the memo's "done, the result is None"
        Py_DECREF(r);
        Py_INCREF(Py_None);
        r = Py_None;
    }
    if (d.result) {   // the item's adapter: result(r, *arguments), as the handler applies it
        Py_ssize_t n = PyTuple_GET_SIZE(tup);
        if ((size_t)n + 1 > kMax) {
            Py_DECREF(r);
            return nullptr;
        }
        PyObject *rv[kMax];
        rv[0] = r;
        for (Py_ssize_t i = 0; i < n; i++)
            rv[i + 1] = PyTuple_GET_ITEM(tup, i);
        PyObject *a = PyObject_Vectorcall(d.result, rv, (size_t)n + 1, nullptr);
        Py_DECREF(r);
        *ran = true;   // (the op ran: an error here is raised, the call is not run again)
        r = a;
    }
    return r;
}
std::unordered_map<std::string, int> g_ids;   // "aten::addmm.default" -> entry
std::unordered_map<std::string, std::unique_ptr<torch::Library>> g_libs;   // namespace -> canna's key's library

// "aten::addmm" + overload ("" or "Tensor") -> "aten::addmm.default" / "aten::add.Tensor"
std::string op_key(const std::string &name, const std::string &overload)
{
    return name + "." + (overload.empty() ? "default" : overload);
}

// register f for canna's key on the operator `qual` ("ns::name") + overload, through the one
// library per namespace; throws when the name is not qualified or the registration fails
void impl_for_key(const std::string &qual, const std::string &overload, torch::CppFunction f)
{
    size_t sep = qual.find("::");
    if (sep == std::string::npos)
        throw std::runtime_error("not a qualified operator name (ns::name): " + qual);
    std::string ns = qual.substr(0, sep), op = qual.substr(sep + 2);
    std::unique_ptr<torch::Library> &lib = g_libs[ns];
    if (!lib)
        lib = std::make_unique<torch::Library>(torch::Library::IMPL, ns, std::optional<c10::DispatchKey>(kKey),
                                               "canna_dl/torch/_aten.cc", 0);
    std::string target = overload.empty() ? op : op + "." + overload;
    lib->impl(target.c_str(), std::move(f));
}

// how an int argument reaches Python: as the int, as a torch dtype (a ScalarType), or not at all
// (a Layout or MemoryFormat: PyTorch's); per schema argument, worked out once per entry
enum ArgKind : int8_t { kPlain = 0, kDtype = 1, kRefuse = 2 };

int8_t arg_kind(const c10::Argument &a)
{
    c10::TypePtr t = a.real_type();
    if (auto o = t->cast<c10::OptionalType>())
        t = o->getElementType();
    switch (t->kind()) {
    case c10::TypeKind::ScalarTypeType:
        return kDtype;
    case c10::TypeKind::LayoutType:
    case c10::TypeKind::MemoryFormatType:
        return kRefuse;
    default:
        return kPlain;
    }
}

// one argument as a Python object (new reference), or nullptr (no exception set) when canna's
// handlers cannot take it (a Generator, a Device, a Layout, ...): the call runs on PyTorch
PyObject *to_py(const c10::IValue &v, int8_t kind)
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
        PyObject *o = THPVariable_Wrap(t.requires_grad() ? t.variable_data() : t);
        if (o && !THPVariable_CheckExact(o)) {   // a Tensor subclass's object: canna takes the tensor
            Py_DECREF(o);                        // (its data, zero-copy), as PyTorch's kernels do
            o = THPVariable_Wrap(t.variable_data());
        }
        return o;
    }
    if (v.isBool())
        return PyBool_FromLong(v.toBool());
    if (v.isInt()) {
        if (kind == kDtype) {
            PyObject *d = (PyObject *)torch::getTHPDtype(static_cast<at::ScalarType>(v.toInt()));
            Py_XINCREF(d);
            return d;
        }
        if (kind == kRefuse)
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
            PyObject *o = to_py(l[i], kPlain);
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

// the call signature of one argument, appended to `k`: what PyTorch's checks and result shapes
// depend on (a tensor's dtype, sizes, strides, wrapped-number flag; a number's value; ...)
void sig_key(const c10::IValue &v, std::string *k)
{
    auto put = [k](const void *p, size_t n) { k->append(static_cast<const char *>(p), n); };
    auto put64 = [&put](int64_t x) { put(&x, sizeof x); };
    if (v.isTensor()) {
        const at::Tensor &t = v.toTensor();
        if (!t.defined()) {
            k->push_back('U');
            return;
        }
        k->push_back(t.unsafeGetTensorImpl()->is_wrapped_number() ? 'W' : 'T');
        k->push_back(static_cast<char>(t.scalar_type()));
        k->push_back(static_cast<char>(t.device().type()));   // (a meta tensor is not a CPU one:
        k->push_back(static_cast<char>(t.layout()));          // canna's handlers take only CPU strided ones)
        put64(t.dim());
        for (int64_t s : t.sizes())
            put64(s);
        for (int64_t s : t.strides())
            put64(s);
        if (t.unsafeGetTensorImpl()->is_wrapped_number())   // (its value: PyTorch's scalar checks)
            put(t.const_data_ptr(), t.element_size());
    } else if (v.isList()) {
        auto l = v.toListRef();
        k->push_back('L');
        put64((int64_t)l.size());
        for (const auto &e : l)
            sig_key(e, k);
    } else if (v.isInt()) {
        k->push_back('i');
        put64(v.toInt());
    } else if (v.isSymInt()) {
        k->push_back('i');
        put64(v.toSymInt().maybe_as_int().value_or(INT64_MIN));
    } else if (v.isDouble()) {
        double d = v.toDouble();
        k->push_back('d');
        put(&d, sizeof d);
    } else if (v.isBool()) {
        k->push_back(v.toBool() ? 'y' : 'n');
    } else if (v.isString()) {
        const std::string &s = v.toStringRef();
        k->push_back('s');
        put64((int64_t)s.size());
        k->append(s);
    } else if (v.isNone()) {
        k->push_back('N');
    } else {
        k->push_back('?');
    }
}

// a tuple of ints into *out; false (a Python exception set) when it is not one
bool int_tuple(PyObject *t, std::vector<int64_t> *out, const char *what)
{
    if (!PyTuple_Check(t)) {
        PyErr_Format(PyExc_TypeError, "canna_dl.torch: an aten check's %s are not a tuple", what);
        return false;
    }
    for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(t); j++) {
        out->push_back(PyLong_AsLongLong(PyTuple_GET_ITEM(t, j)));
        if (PyErr_Occurred())
            return false;
    }
    return true;
}

// The dims of a strided result e in the order, outermost first, that makes it contiguous — PyTorch
// lays an elementwise result out densely in its inputs' stride order (TensorIterator), so the
// result is a dense tensor of the permuted shape, and an elementwise op commutes with permuting
// all its operands alike (the fast path then runs contiguous, canna's one output layout). false
// (*perm empty) when e is not dense so, or empty.
constexpr int kPermMax = 8;   // (kernels/_native/fast.c's FAST_MAX_NDIM)
bool dense_perm(const Expect &e, std::vector<int> *perm)
{
    perm->clear();
    int n = (int)e.sizes.size();
    if (n < 1 || n > kPermMax)
        return false;
    std::vector<int> p(n);
    for (int i = 0; i < n; i++)
        p[i] = i;
    std::stable_sort(p.begin(), p.end(), [&](int a, int b) { return e.strides[a] > e.strides[b]; });
    int64_t want = 1;
    for (int i = n - 1; i >= 0; i--) {
        int64_t sz = e.sizes[p[i]];
        if (sz == 0)
            return false;
        if (sz == 1)
            continue;
        if (e.strides[p[i]] != want)
            return false;
        want *= sz;
    }
    *perm = std::move(p);
    return true;
}

// An operand of an elementwise call whose result's dims are permuted by perm (n = perm's length):
// its k <= n dims aligned to the result's last k (broadcasting), a missing one of size 1 and
// stride 0, then permuted. false when k > n.
struct PermView {
    int64_t shape[kPermMax], strides[kPermMax];
};
bool permute_view(c10::IntArrayRef sizes, c10::IntArrayRef strides, const std::vector<int> &perm, PermView *o)
{
    int n = (int)perm.size(), k = (int)sizes.size();
    if (k > n)
        return false;
    for (int i = 0; i < n; i++) {
        int r = perm[i] - (n - k);
        o->shape[i] = r < 0 ? 1 : sizes[r];
        o->strides[i] = r < 0 ? 0 : strides[r];
    }
    return true;
}

// the check's answer as a Verdict; false (a Python exception set) when it is malformed
bool parse_verdict(PyObject *o, Verdict *v)
{
    if (o == Py_False) {
        v->what = 2;
        return true;
    }
    if (PyUnicode_Check(o)) {
        v->what = 1;
        v->reason = (Py_INCREF(o), o);
        return true;
    }
    if (o == Py_None)   // no expectations (PyTorch has no meta kernel for it)
        return true;
    if (!PyTuple_Check(o)) {
        PyErr_SetString(PyExc_TypeError, "canna_dl.torch: an aten check answered neither a tuple, a str nor False");
        return false;
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(o); i++) {
        PyObject *e = PyTuple_GET_ITEM(o, i);
        Expect x;
        if (e == Py_None) {
            x.what = 1;
        } else if (PyTuple_Check(e) && (PyTuple_GET_SIZE(e) == 2 || PyTuple_GET_SIZE(e) == 3) &&
                   THPDtype_Check(PyTuple_GET_ITEM(e, 1))) {
            x.what = 2;
            x.dtype = reinterpret_cast<THPDtype *>(PyTuple_GET_ITEM(e, 1))->scalar_type;
            if (!int_tuple(PyTuple_GET_ITEM(e, 0), &x.sizes, "sizes"))
                return false;
            if (PyTuple_GET_SIZE(e) == 3) {   // (sizes, dtype, strides): a non-contiguous result
                if (!int_tuple(PyTuple_GET_ITEM(e, 2), &x.strides, "strides"))
                    return false;
                if (x.strides.size() != x.sizes.size()) {
                    PyErr_SetString(PyExc_ValueError, "canna_dl.torch: an aten check's strides and sizes differ in length");
                    return false;
                }
                v->strided = true;
            }
        }
        v->outs.push_back(std::move(x));
    }
    if (v->strided && v->outs.size() == 1)
        dense_perm(v->outs[0], &v->perm);
    return true;
}

// how canna's result differs from what PyTorch's rules expect (empty: it does not)
std::string mismatch(const std::vector<Expect> &exp, const std::vector<c10::IValue> &outs)
{
    for (size_t k = 0; k < exp.size() && k < outs.size(); k++) {
        const Expect &e = exp[k];
        if (e.what == 0 || !outs[k].isTensor())
            continue;
        const at::Tensor &t = outs[k].toTensor();
        std::string at = "result " + std::to_string(k) + ": ";
        if (e.what == 1) {
            if (t.defined())
                return at + "canna computed a tensor where PyTorch's is undefined";
            continue;
        }
        if (!t.defined())
            return at + "canna's is undefined";
        if (t.scalar_type() != e.dtype || t.sizes() != c10::IntArrayRef(e.sizes))
            return at + "canna's is " + c10::toString(t.scalar_type()) + " " + c10::str(t.sizes()) + ", PyTorch's " +
                   c10::toString(e.dtype) + " " + c10::str(c10::IntArrayRef(e.sizes));
        if (e.strides.empty() ? !t.is_contiguous() : t.strides() != c10::IntArrayRef(e.strides))
            return at + "canna's layout is " + c10::str(t.strides()) + ", PyTorch's " +
                   (e.strides.empty() ? std::string("contiguous") : c10::str(c10::IntArrayRef(e.strides)));
    }
    return std::string();
}

[[noreturn]] void raise_python(PyGILState_STATE g)
{
    python_error e;
    e.persist();
    PyGILState_Release(g);
    throw e;
}

// the verdict of a call signature (the entry's check runs for a new one); nullptr with a Python
// exception set when the check fails. GIL held, the key off.
std::shared_ptr<const Verdict> verdict(Entry &ent, const std::string &key, PyObject *tup)
{
    auto it = ent.verdicts.find(key);
    if (it != ent.verdicts.end())
        return it->second;
    auto v = std::make_shared<Verdict>();
    if (ent.check) {
        PyObject *c = PyObject_Call(ent.check, tup, nullptr);
        bool ok = c && parse_verdict(c, v.get());
        Py_XDECREF(c);
        if (!ok)
            return nullptr;
    }
    if (ent.verdicts.size() >= 4096)   // (a bound: shapes that keep changing)
        ent.verdicts.clear();
    ent.verdicts.emplace(key, v);
    return v;
}

// count a refusal in the thread's block (false with a Python exception set: strict raised)
bool refused(Entry &ent, PyObject *reason)
{
    if (!ent.refuse)
        return true;
    PyObject *x = PyObject_CallOneArg(ent.refuse, reason);
    Py_XDECREF(x);
    return x != nullptr;
}

// A tensor argument as a DLTensor for the C route (views of t's metadata: t must outlive it);
// false when the fast path cannot read it as it stands (not a CPU strided tensor, a lazy negative
// or conjugate view, a wrapped number)
bool to_dl(const at::Tensor &t, DLTensor *d)
{
    if (!t.defined() || !t.device().is_cpu() || t.layout() != at::kStrided || t.is_neg() || t.is_conj() ||
        t.unsafeGetTensorImpl()->is_wrapped_number() || !t.has_storage())
        return false;
    d->data = t.data_ptr();
    d->device = DLDevice{kDLCPU, 0};
    d->ndim = (int32_t)t.dim();
    d->dtype = at::getDLDataType(t);
    d->shape = const_cast<int64_t *>(t.sizes().data());
    d->strides = const_cast<int64_t *>(t.strides().data());
    d->byte_offset = 0;
    return true;
}

// d (to_dl's) as the operand permute_view describes (its arrays in *o); false when it has more dims.
// (A 0-dim operand is left as it is: it broadcasts in any order, and PyTorch's type promotion
// ranks it below dimensioned tensors)
bool permute_dl(DLTensor *d, const std::vector<int> &perm, PermView *o)
{
    if (!d->ndim)
        return true;
    if (!permute_view(c10::IntArrayRef(d->shape, (size_t)d->ndim), c10::IntArrayRef(d->strides, (size_t)d->ndim),
                      perm, o))
        return false;
    d->ndim = (int32_t)perm.size();
    d->shape = o->shape;
    d->strides = o->strides;
    return true;
}

// a non-tensor fast-path operand (a number, None) as a Python object (new reference), or nullptr
// (no exception) when it is something else; a wrapped number is the number (PyTorch's weak scalar)
PyObject *scalar_py(const c10::IValue &v)
{
    if (v.isTensor() && !v.toTensor().unsafeGetTensorImpl()->is_wrapped_number())
        return nullptr;
    return v.isTensor() || v.isNone() || v.isDouble() || v.isInt() || v.isBool() ? to_py(v, kPlain) : nullptr;
}

struct AllocCtx {
    const Expect *e;
    at::Tensor out;
    const std::vector<int> *perm = nullptr;   // a strided result: its dims in contiguous order
    PermView pv;                              // ... and the output so described
};

int alloc_expected(void *ctx, DLTensor *out)
{
    auto *c = static_cast<AllocCtx *>(ctx);
    try {
        KeyOff off;   // (PyTorch's CPU allocation, no dispatch)
        c->out = at::Tensor(c->perm ? at::detail::empty_strided_cpu(c->e->sizes, c->e->strides, c->e->dtype)
                                    : at::detail::empty_cpu(c->e->sizes, c->e->dtype));
    } catch (const std::exception &e) {
        PyErr_SetString(PyExc_MemoryError, e.what());
        return -1;
    }
    if (!to_dl(c->out, out))
        return PyErr_SetString(PyExc_RuntimeError, "canna_dl.torch: a fresh output is not a CPU tensor"), -1;
    if (c->perm) {   // (contiguous in the permuted order: what the operands' permuted plan writes)
        permute_view(c->out.sizes(), c->out.strides(), *c->perm, &c->pv);
        out->ndim = (int32_t)c->perm->size();
        out->shape = c->pv.shape;
        out->strides = c->pv.strides;
    }
    return 0;
}

// whether the call has the values its item runs on canna only at (direct_call's rule, on the stack)
bool fixed_ok(const Direct &d, const std::vector<int8_t> &kinds, const torch::jit::Stack &stack, size_t base)
{
    for (const auto &f : d.fixed) {
        const c10::IValue &v = stack[base + f.first];
        if (v.isTensor() && v.toTensor().defined() && !v.toTensor().unsafeGetTensorImpl()->is_wrapped_number())
            return false;
        PyObject *got = to_py(v, kinds[f.first]);
        int eq = got == f.second ? 1 : got ? PyObject_RichCompareBool(f.second, got, Py_EQ) : -1;
        Py_XDECREF(got);
        if (eq != 1) {
            PyErr_Clear();
            return false;
        }
    }
    return true;
}

// The direct call in C (an elementwise fast path, kind 2), on the dispatcher's own arguments: no
// Python object for a tensor, the output allocated here as PyTorch's rules expect it (the
// verdict's expectation). 1: done, *results set (one: undefined for an in-place form: the written
// argument is the result); 0: not this route (the Python objects' route decides); -1: an error
// (a Python exception set: that route runs the call again and decides, as for direct_call).
int direct_c(const Direct &d, const Verdict &vd, const std::vector<int8_t> &kinds, const torch::jit::Stack &stack,
             size_t base, std::vector<c10::IValue> *results)
{
    if (!g_fast_api || d.kind != 2 || d.result || d.src.size() != 3 || d.src[0] < 0 || !fixed_ok(d, kinds, stack, base))
        return 0;
    for (int i : d.nonone)
        if (stack[base + i].isNone())
            return 0;
    const long op = d.op;
    bool inplace = (op & CANNA_FAST_INPLACE) != 0;
    if (!inplace && (vd.outs.size() != 1 || vd.outs[0].what != 2))
        return 0;   // (no expectation to allocate the output from)
    const std::vector<int> *perm = nullptr;   // a strided result: every operand permuted alike
    if (vd.strided) {
        if (inplace || vd.perm.empty())
            return 0;
        perm = &vd.perm;
    }
    const c10::IValue &xv = stack[base + d.src[0]];
    DLTensor x, y;
    PermView px, py;
    if (!xv.isTensor() || !to_dl(xv.toTensor(), &x) || (perm && !permute_dl(&x, *perm, &px)))
        return 0;
    bool ny = false;
    PyObject *ys = nullptr, *p = nullptr;
    if (d.src[1] >= 0) {
        const c10::IValue &yv = stack[base + d.src[1]];
        if (yv.isTensor() && !yv.toTensor().unsafeGetTensorImpl()->is_wrapped_number()) {
            if (!to_dl(yv.toTensor(), &y) || (perm && !permute_dl(&y, *perm, &py)))
                return 0;
            ny = true;
        } else if (!(ys = scalar_py(yv))) {
            return PyErr_Occurred() ? -1 : 0;
        }
    } else {
        ys = (Py_INCREF(d.dflt[1]), d.dflt[1]);
    }
    // the attribute: the argument (a number, or an str's code) or the constant
    PyObject *pa = d.src[2] >= 0 ? (d.codes ? to_py(stack[base + d.src[2]], kPlain) : scalar_py(stack[base + d.src[2]]))
                                 : (Py_INCREF(d.dflt[2]), d.dflt[2]);
    if (pa && d.codes) {
        p = attr_code(d, pa);
        Py_DECREF(pa);
    } else {
        p = pa;
    }
    int rc = 0;
    if (p) {
        AllocCtx ctx{inplace ? nullptr : &vd.outs[0], at::Tensor(), perm, {}};
        PyObject *dtype = inplace ? Py_None : (PyObject *)torch::getTHPDtype(vd.outs[0].dtype);
        rc = g_fast_api->call(op, d.api, &x, ny ? &y : nullptr, ny ? nullptr : ys, p, dtype, alloc_expected, &ctx);
        if (rc == 1)
            results->assign(1, c10::IValue(std::move(ctx.out)));
    } else if (PyErr_Occurred()) {
        rc = -1;
    }
    Py_XDECREF(ys);
    Py_XDECREF(p);
    return rc;
}

// {"out": a new tensor laid out as PyTorch lays out the verdict's strided result} (a new
// reference), or nullptr with a Python exception set
PyObject *strided_out(const Verdict &vd)
{
    for (const Expect &e : vd.outs) {
        if (e.what != 2 || e.strides.empty())
            continue;
        at::Tensor t;
        try {
            KeyOff off;
            t = at::Tensor(at::detail::empty_strided_cpu(e.sizes, e.strides, e.dtype));
        } catch (const std::exception &ex) {
            PyErr_SetString(PyExc_MemoryError, ex.what());
            return nullptr;
        }
        PyObject *o = THPVariable_Wrap(t);
        if (!o)
            return nullptr;
        PyObject *kw = Py_BuildValue("{sN}", "out", o);
        return kw;
    }
    PyErr_SetString(PyExc_RuntimeError, "canna_dl.torch: a strided verdict without a strided result");
    return nullptr;
}

// The arguments tup of an elementwise entry (kind 2) whose verdict is strided with operands
// permuted as dense_perm says (permute_view: views of the same memory), for the handler's call
// that computes the result contiguously in that order and registers the fast path's entry of
// that signature (which direct_c then finds). A new reference; nullptr without an exception when
// not applicable (a tensor argument that is not an operand), with one on an error.
PyObject *permuted_args(const Direct &d, const Verdict &vd, PyObject *tup)
{
    if (vd.perm.empty() || d.src.size() != 3 || d.src[0] < 0)
        return nullptr;
    Py_ssize_t n = PyTuple_GET_SIZE(tup);
    if (d.src[0] >= n || d.src[1] >= n || !THPVariable_Check(PyTuple_GET_ITEM(tup, d.src[0])))
        return nullptr;
    PyObject *out = PyTuple_New(n);
    if (!out)
        return nullptr;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *a = PyTuple_GET_ITEM(tup, i);
        if (!THPVariable_Check(a)) {
            PyTuple_SET_ITEM(out, i, (Py_INCREF(a), a));
            continue;
        }
        const at::Tensor &t = THPVariable_Unpack(a);
        if (t.defined() && t.dim() == 0 && (i == d.src[0] || i == d.src[1])) {   // (as permute_dl: as it is)
            PyTuple_SET_ITEM(out, i, (Py_INCREF(a), a));
            continue;
        }
        PermView pv;
        if ((i != d.src[0] && i != d.src[1]) || !t.defined() || !permute_view(t.sizes(), t.strides(), vd.perm, &pv)) {
            Py_DECREF(out);
            return nullptr;
        }
        PyObject *w = nullptr;
        try {
            KeyOff off;
            size_t k = vd.perm.size();
            w = THPVariable_Wrap(t.as_strided(c10::IntArrayRef(pv.shape, k), c10::IntArrayRef(pv.strides, k),
                                              t.storage_offset()));
        } catch (const std::exception &e) {
            PyErr_SetString(PyExc_RuntimeError, e.what());
        }
        if (!w) {
            Py_DECREF(out);
            return nullptr;
        }
        PyTuple_SET_ITEM(out, i, w);
    }
    return out;
}

// the handler's result r of permuted_args' call (a new reference, stolen) as the strided result
// PyTorch lays out: the same memory (contiguous in the permuted order) with PyTorch's sizes and
// strides; r itself when it is not that contiguous tensor (the caller's layout check decides)
PyObject *unpermuted(PyObject *r, const Verdict &vd)
{
    const Expect &e = vd.outs[0];
    if (!THPVariable_Check(r))
        return r;
    const at::Tensor &t = THPVariable_Unpack(r);
    size_t k = vd.perm.size();
    if (!t.defined() || t.scalar_type() != e.dtype || t.dim() != (int64_t)k || !t.is_contiguous())
        return r;
    for (size_t i = 0; i < k; i++)
        if (t.size((int64_t)i) != e.sizes[vd.perm[i]])
            return r;
    PyObject *w = nullptr;
    try {
        KeyOff off;
        w = THPVariable_Wrap(t.as_strided(e.sizes, e.strides, t.storage_offset()));
    } catch (const std::exception &ex) {
        PyErr_SetString(PyExc_RuntimeError, ex.what());
    }
    Py_DECREF(r);
    return w;
}

struct MemoOuts {
    at::Tensor t[CANNA_MEMO_MAXRESULTS];
};

int alloc_memo(void *ctx, int j, int ndim, const int64_t *shape, PyObject *dtype, DLTensor *out)
{
    auto *mo = static_cast<MemoOuts *>(ctx);
    if (j < 0 || j >= CANNA_MEMO_MAXRESULTS || !THPDtype_Check(dtype))
        return 1;
    try {
        KeyOff off;
        mo->t[j] = at::Tensor(at::detail::empty_cpu(at::IntArrayRef(shape, (size_t)ndim),
                                                    reinterpret_cast<THPDtype *>(dtype)->scalar_type));
    } catch (const std::exception &e) {
        PyErr_SetString(PyExc_MemoryError, e.what());
        return -1;
    }
    return to_dl(mo->t[j], out) ? 0 : 1;
}

// The direct call in C of a memo entry (kind 1) on the dispatcher's own arguments: the tensors as
// DLTensors, the other arguments as the Python objects the Python route passes (no Python object
// for a tensor), the outputs allocated with at::detail::empty_cpu. 1: done, *results set per schema return;
// 0: not this route (the Python objects' route decides: a miss registers there); -1: an error
// (a Python exception set; as for direct_c, that route runs the call again and decides).
int direct_memo_c(const Direct &d, const std::vector<int8_t> &kinds, const torch::jit::Stack &stack, size_t base,
                  size_t nrets, std::vector<c10::IValue> *results)
{
    constexpr size_t kMax = 24;
    if (!g_fast_api || d.kind != 1 || d.result || d.codes || d.src.size() > kMax || nrets > CANNA_MEMO_MAXRESULTS)
        return 0;
    for (int i : d.nonone)
        if (stack[base + i].isNone())
            return 0;
    DLTensor t[kMax];
    int is_t[kMax];
    PyObject *a[kMax];
    int back[kMax];   // per memo argument: the schema index of a tensor argument, else -1
    Refs<2 * kMax> refs;
    size_t na = 0;
    for (size_t j = 0; j < d.src.size(); j++) {
        int src = d.src[j];
        if (src <= -2) {   // a list argument: its length, then its tensors
            const c10::IValue &lv = stack[base + (-2 - src)];
            if (!lv.isTensorList())
                return 0;
            auto l = lv.toTensorList();
            if (na + 1 + l.size() > kMax || !(a[na] = refs.keep(PyLong_FromSize_t(l.size()))))
                return PyErr_Occurred() ? -1 : 0;
            is_t[na] = 0;
            back[na++] = -1;
            for (size_t q = 0; q < l.size(); q++) {
                at::Tensor e = l.get(q);
                if (!e.defined() || e.unsafeGetTensorImpl()->is_wrapped_number() || !to_dl(e, &t[na]))
                    return 0;
                is_t[na] = 1;
                back[na++] = -1;
            }
            continue;
        }
        if (na + 1 > kMax)
            return 0;
        is_t[na] = 0;
        back[na] = -1;
        const c10::IValue *v = src >= 0 ? &stack[base + src] : nullptr;
        if (v && v->isTensor() && v->toTensor().defined() && !v->toTensor().unsafeGetTensorImpl()->is_wrapped_number()) {
            if (d.conv[j] || !to_dl(v->toTensor(), &t[na]))
                return 0;   // (a tensor converted, or one the C route does not take: the Python route)
            is_t[na] = 1;
            back[na++] = src;
            continue;
        }
        if (v && (v->isTensorList() || v->isOptionalTensorList()))
            return 0;   // (a list the memo is not told of)
        PyObject *o = v ? refs.keep(to_py(*v, kinds[src])) : d.dflt[j];
        if (!o || !(a[na] = convert_arg(d, j, o, refs)))
            return PyErr_Occurred() ? -1 : 0;
        na++;
    }
    if (!fixed_ok(d, kinds, stack, base))
        return 0;
    MemoOuts mo;
    unsigned char res[CANNA_MEMO_MAXRESULTS];
    int nres = 0, single = 0;
    int rc = g_fast_api->memo(d.op, d.api, (int)na, t, is_t, a, alloc_memo, &mo, res, &nres, &single);
    if (rc != 1)
        return rc;
    results->assign(nrets, c10::IValue(at::Tensor()));
    if (single == 1 ? nrets != 1 : single == 0 && (size_t)nres != nrets) {
        PyErr_SetString(PyExc_RuntimeError, "canna_dl.torch: the memo's results do not match the schema's returns");
        return -1;
    }
    for (size_t k = 0; single >= 0 && k < nrets; k++) {
        unsigned char r = res[k];
        if (r == 255)
            continue;
        if (r < 128) {
            (*results)[k] = c10::IValue(mo.t[r]);
        } else if (r - 128 < (int)na && back[r - 128] >= 0) {
            (*results)[k] = stack[base + back[r - 128]];
        } else {
            PyErr_SetString(PyExc_RuntimeError, "canna_dl.torch: a memo result names no argument");
            return -1;
        }
    }
    return 1;
}

// A call's signature key (sig_key) in a buffer this thread reuses: one per nesting depth (a
// handler's own aten calls reach the kernel again), cleared, its capacity kept.
thread_local std::vector<std::unique_ptr<std::string>> t_keybufs;
thread_local size_t t_keydepth = 0;
struct KeyBuf {
    std::string *s;
    KeyBuf()
    {
        if (t_keybufs.size() <= t_keydepth)
            t_keybufs.emplace_back(new std::string());
        s = t_keybufs[t_keydepth++].get();
        s->clear();
    }
    ~KeyBuf() { t_keydepth--; }
    KeyBuf(const KeyBuf &) = delete;
    KeyBuf &operator=(const KeyBuf &) = delete;
};

struct CannaKernel final : public c10::OperatorKernel {
    int id;
    explicit CannaKernel(int i) : id(i) {}

    void operator()(const c10::OperatorHandle &op, c10::DispatchKeySet ks, torch::jit::Stack *stack)
    {
        if (!enabled(id)) {   // not routed by the thread's innermost block (ops= / exclude=): PyTorch's
            fallback(op, ks, stack);
            return;
        }
        const auto &schema = op.schema();
        const auto &args = schema.arguments();
        const auto &rets = schema.returns();
        size_t n = args.size(), base = stack->size() - n;
        PyGILState_STATE g = PyGILState_Ensure();
        Entry &ent = *g_entries[id];
        if (ent.kinds.size() != n) {   // (the first call; one schema per entry)
            ent.kinds.clear();
            ent.writes = false;
            for (const auto &a : args) {
                ent.kinds.push_back(arg_kind(a));
                ent.writes |= a.alias_info() && a.alias_info()->isWrite();
            }
        }
        const std::vector<int8_t> &kinds = ent.kinds;
        PyObject *handler = ent.handler;
        KeyBuf kb;   // (this thread's buffer for its nesting depth: no allocation once grown)
        std::string &key = *kb.s;
        for (size_t i = 0; i < n; i++)
            sig_key((*stack)[base + i], &key);
        PyObject *r = nullptr;
        bool hit = false, done = false, c_done = false;
        std::vector<c10::IValue> c_results;   // (the C route's results, per schema return)
        std::shared_ptr<const Verdict> vd;
        if (ent.d.kind) {   // a known signature canna runs: the C route first (no Python object)
            auto it = ent.verdicts.find(key);
            if (it != ent.verdicts.end() && it->second->what == 0 &&
                (!it->second->strided || (ent.d.kind == 2 && !it->second->perm.empty()))) {
                KeyOff off;
                if (direct_ready(ent.d)) {
                    int rc = ent.d.kind == 2 ? direct_c(ent.d, *it->second, kinds, *stack, base, &c_results)
                                             : direct_memo_c(ent.d, kinds, *stack, base, rets.size(), &c_results);
                    if (rc == 1) {
                        vd = it->second;
                        c_done = hit = true;
                    } else if (rc < 0) {
                        PyErr_Clear();   // (the handler runs the call again and decides)
                    }
                }
            }
        }
        PyObject *tup = !c_done && handler ? PyTuple_New((Py_ssize_t)n) : nullptr;
        bool ok = c_done || tup != nullptr;
        for (size_t i = 0; !c_done && ok && i < n; i++) {
            PyObject *o = to_py((*stack)[base + i], kinds[i]);
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
        if (!c_done) {
            KeyOff off;
            vd = verdict(ent, key, tup);
            PyObject *tp = vd && vd->what == 0 && vd->strided && ent.d.kind == 2 && direct_ready(ent.d)
                               ? permuted_args(ent.d, *vd, tup) : nullptr;
            if (tp) {   // an elementwise call on its operands permuted: the C route's next time (direct_c)
                r = PyObject_Call(handler, tp, nullptr);
                Py_DECREF(tp);
                if (r && r != g_sentinel)
                    r = unpermuted(r, *vd);
            } else if (PyErr_Occurred()) {
                r = nullptr;
            } else if (vd && vd->what == 0 && vd->strided) {   // the handler writes PyTorch's layout
                PyObject *kw = strided_out(*vd);
                r = kw ? PyObject_Call(handler, tup, kw) : nullptr;
                Py_XDECREF(kw);
            } else if (vd && vd->what == 0) {
                if (ent.d.kind) {
                    bool ran;
                    r = direct_call(ent.d, tup, &ran);
                    hit = r != nullptr;
                    if (!r && !ran)   // an error too: the handler runs the call again and decides (canna's
                        PyErr_Clear();   // argument errors are refusals there: PyTorch raises its own error)
                    done = ran;
                }
                if (!r && !done)
                    r = PyObject_Call(handler, tup, nullptr);
            } else if (vd && vd->what == 1 && !refused(ent, vd->reason)) {
                vd = nullptr;   // (strict: the refusal raised)
            }
        }
        Py_XDECREF(tup);
        if (!vd || (vd->what == 0 && !r && !c_done))
            raise_python(g);
        if (vd->what != 0) {   // refused, or PyTorch rejects it (and raises its own error)
            PyGILState_Release(g);
            g_refused += vd->what == 1;
            to_pytorch(op, ks, stack);
            return;
        }
        if (hit) {
            g_direct++;
            g_direct_c += c_done;
            if (t_hits.size() <= (size_t)id)
                t_hits.resize(g_entries.size());
            t_hits[(size_t)id]++;
        }
        if (r == g_sentinel) {   // the handler refused it (and counted it): PyTorch's
            Py_DECREF(r);
            PyGILState_Release(g);
            g_refused++;
            to_pytorch(op, ks, stack);
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
            if (c_done) {
                good = k < c_results.size();
                if (good)
                    outs[k] = c_results[k];
                continue;
            }
            PyObject *o = rets.size() == 1 ? r : (PyTuple_Check(r) && PyTuple_GET_SIZE(r) == (Py_ssize_t)rets.size()
                                                       ? PyTuple_GET_ITEM(r, (Py_ssize_t)k)
                                                       : nullptr);
            good = o && from_py(o, &outs[k]);
        }
        Py_XDECREF(r);
        if (!good) {
            PyErr_Format(PyExc_RuntimeError, "canna_dl.torch.offload(level='aten'): %s: canna's handler returned "
                         "results that do not match the schema's returns", schema.operator_name().name.c_str());
            raise_python(g);
        }
        std::string why = mismatch(vd->outs, outs);
        if (!why.empty()) {   // canna's result is not PyTorch's (shape, dtype, layout): a canna bug
            if (ent.writes) {   // its arguments are written already: it cannot run again on PyTorch
                PyErr_Format(PyExc_RuntimeError, "canna_dl.torch.offload(level='aten'): %s: %s (a canna bug; "
                             "exclude the op with offload(exclude=...))", schema.operator_name().name.c_str(),
                             why.c_str());
                raise_python(g);
            }
            // this signature is refused from now on; this call runs on PyTorch
            PyObject *reason = PyUnicode_FromFormat("canna's result differs from PyTorch's (%s)", why.c_str());
            bool ok2 = reason != nullptr;
            if (ok2) {
                auto v = std::make_shared<Verdict>();
                v->what = 1;
                v->reason = reason;
                ent.verdicts[key] = v;
                KeyOff off;
                ok2 = refused(ent, reason);
            }
            if (!ok2)
                raise_python(g);
            PyGILState_Release(g);
            g_refused++;
            to_pytorch(op, ks, stack);
            return;
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
// a block starts on this thread: the key included, `mask` (bytes: 1 per entry id it routes) its
// entries; returns the block's token (canna_aten_exit's argument), or -1 with a Python exception
int64_t canna_aten_enter(PyObject *mask)
{
    char *p;
    Py_ssize_t n;
    if (PyBytes_AsStringAndSize(mask, &p, &n))
        return -1;
    if (t_masks.empty())
        t_base = c10::impl::tls_is_dispatch_key_included(kKey);
    t_masks.emplace_back(++t_tokens, std::vector<uint8_t>((const uint8_t *)p, (const uint8_t *)p + n));
    c10::impl::tls_set_dispatch_key_included(kKey, true);
    return t_tokens;
}

// include (1) or leave out (0) this thread's key; returns whether it was included (canna's own
// torch calls run with it off: a torch function an aten block routes as a function, _aten.py)
int canna_aten_set_key(int on)
{
    bool was = c10::impl::tls_is_dispatch_key_included(kKey);
    c10::impl::tls_set_dispatch_key_included(kKey, on != 0);
    return was;
}

// whether this thread's key is included (a block routes its calls and canna's own code is not running)
int canna_aten_key_included()
{
    return c10::impl::tls_is_dispatch_key_included(kKey);
}

// the block `token` of this thread ends, wherever it is among the thread's blocks (blocks may end
// in any order: the innermost that is left routes the thread's calls); the key is off again when
// the last one ends
void canna_aten_exit(int64_t token)
{
    for (auto it = t_masks.begin(); it != t_masks.end(); ++it)
        if (it->first == token) {
            t_masks.erase(it);
            break;
        }
    if (t_masks.empty())
        c10::impl::tls_set_dispatch_key_included(kKey, t_base);
}

// the direct path's objects: memo, fast, the fast-state dict, the capture thread-local, the
// library and the runtime state (whose gen / generation must agree), and the capsule of fast()'s C
// form (kernels._native.fast_api); 0, or -1 with a Python exception set. GIL held
int canna_aten_configure_direct(PyObject *memo, PyObject *fast, PyObject *fs, PyObject *cap, PyObject *lib,
                                PyObject *state, PyObject *fast_api)
{
    auto *api = static_cast<const CannaFastApi *>(PyCapsule_GetPointer(fast_api, CANNA_FAST_API_CAPSULE));
    if (!api)
        return -1;
    if (api->version != CANNA_FAST_API_VERSION) {
        PyErr_SetString(PyExc_RuntimeError, "canna_dl.torch: kernels._native.fast_api is another version");
        return -1;
    }
    g_fast_api = api;
    PyObject *objs[] = {memo, fast, fs, cap, lib, state};
    PyObject **slots[] = {&g_memo_fn, &g_fast_fn, &g_fs, &g_cap, &g_lib, &g_state};
    for (int i = 0; i < 6; i++) {
        Py_INCREF(objs[i]);
        Py_XSETREF(*slots[i], objs[i]);
    }
    if (!s_on) {
        s_on = PyUnicode_InternFromString("on");
        s_memo = PyUnicode_InternFromString("memo");
        s_rec = PyUnicode_InternFromString("rec");
        s_gen = PyUnicode_InternFromString("gen");
        s_generation = PyUnicode_InternFromString("generation");
    }
    if (!PyDict_Check(fs)) {
        PyErr_SetString(PyExc_TypeError, "canna_aten_configure_direct: the fast-state is not a dict");
        return -1;
    }
    return 0;
}

// entry `id`'s direct call: kind 1 (memo) or 2 (fast), its op id, API name, the argument map
// (src: schema index or -1, dflt: the constants for -1), the fixed values ((index, value), ...),
// the schema indices that must not be None, the str attribute's codes (dict) or None, the result
// adapter or None, and the report row. 0, or -1 with a Python exception set. GIL held.
int canna_aten_direct(int id, int kind, PyObject *op_id, PyObject *api, PyObject *src, PyObject *dflt,
                      PyObject *fixed, PyObject *nonone, PyObject *codes, PyObject *result, PyObject *conv,
                      const char *row)
{
    if (id < 0 || (size_t)id >= g_entries.size() || (kind != 1 && kind != 2) || !PyTuple_Check(src) ||
        !PyTuple_Check(dflt) || PyTuple_GET_SIZE(src) != PyTuple_GET_SIZE(dflt) || !PyTuple_Check(fixed) ||
        !PyTuple_Check(nonone) || !PyTuple_Check(conv) || PyTuple_GET_SIZE(conv) != PyTuple_GET_SIZE(src)) {
        PyErr_SetString(PyExc_ValueError, "canna_aten_direct: a malformed descriptor");
        return -1;
    }
    Direct d;
    d.kind = kind;
    d.id = (Py_INCREF(op_id), op_id);
    d.op = PyLong_AsLong(op_id);
    if (d.op == -1 && PyErr_Occurred())
        return -1;
    d.api = (Py_INCREF(api), api);
    for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(src); j++) {
        long i = PyLong_AsLong(PyTuple_GET_ITEM(src, j));
        if (i == -1 && PyErr_Occurred())
            return -1;
        d.src.push_back((int)i);
        PyObject *v = PyTuple_GET_ITEM(dflt, j);
        Py_INCREF(v);
        d.dflt.push_back(v);
        PyObject *f = PyTuple_GET_ITEM(conv, j);
        d.conv.push_back(f == Py_None ? nullptr : (Py_INCREF(f), f));
    }
    for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(fixed); j++) {
        PyObject *f = PyTuple_GET_ITEM(fixed, j);
        if (!PyTuple_Check(f) || PyTuple_GET_SIZE(f) != 2) {
            PyErr_SetString(PyExc_ValueError, "canna_aten_direct: fixed takes (index, value) pairs");
            return -1;
        }
        PyObject *v = PyTuple_GET_ITEM(f, 1);
        Py_INCREF(v);
        d.fixed.emplace_back((int)PyLong_AsLong(PyTuple_GET_ITEM(f, 0)), v);
    }
    for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(nonone); j++)
        d.nonone.push_back((int)PyLong_AsLong(PyTuple_GET_ITEM(nonone, j)));
    if (PyErr_Occurred())
        return -1;
    if (codes != Py_None) {
        Py_INCREF(codes);
        d.codes = codes;
    }
    if (result != Py_None) {
        Py_INCREF(result);
        d.result = result;
    }
    g_entries[(size_t)id]->row = row;
    g_entries[(size_t)id]->d = std::move(d);   // (a replaced descriptor's references are kept: rare, small)
    return 0;
}

// this thread's direct hits since the last call: {row: count}; GIL held
PyObject *canna_aten_hits(void)
{
    PyObject *d = PyDict_New();
    for (size_t i = 0; d && i < t_hits.size(); i++) {
        if (!t_hits[i])
            continue;
        const std::string &row = g_entries[i]->row;
        PyObject *old = PyDict_GetItemString(d, row.c_str());
        PyObject *v = PyLong_FromUnsignedLongLong(t_hits[i] + (old ? PyLong_AsUnsignedLongLong(old) : 0));
        if (!v || PyDict_SetItemString(d, row.c_str(), v)) {
            Py_XDECREF(v);
            Py_DECREF(d);
            return nullptr;
        }
        Py_DECREF(v);
        t_hits[i] = 0;
    }
    return d;
}

// the handlers' fallback sentinel; GIL held
int canna_aten_configure(PyObject *sentinel)
{
    Py_INCREF(sentinel);
    Py_XSETREF(g_sentinel, sentinel);
    return 0;
}

// route `name` ("aten::addmm", overload "" or "Tensor") to canna: handler(*schema arguments) ->
// the result, or the sentinel; check(*schema arguments), once per call signature: the expected
// results ((sizes, dtype) or None per return), a refusal's reason (str), False (PyTorch rejects
// the call) or None (nothing to check); refuse(reason) counts a refusal. A second call for the same overload replaces its handler (and
// drops its direct call). The entry's id, or -1 with a Python exception set (no such operator).
// GIL held.
int canna_aten_register(const char *name, const char *overload, PyObject *handler, PyObject *check,
                        PyObject *refuse)
{
    const std::string ovl = overload ? overload : "", key = op_key(name, ovl);
    auto set = [&](Entry &e) {
        PyObject *objs[] = {handler, check, refuse};
        PyObject **slots[] = {&e.handler, &e.check, &e.refuse};
        for (int i = 0; i < 3; i++) {
            Py_INCREF(objs[i]);
            Py_XSETREF(*slots[i], objs[i]);
        }
        e.d = Direct();   // (a new handler: its direct call is set again, or none)
        e.verdicts.clear();
    };
    auto it = g_ids.find(key);
    if (it != g_ids.end()) {
        set(*g_entries[it->second]);
        return it->second;
    }
    int id = (int)g_entries.size();
    try {
        if (!c10::Dispatcher::singleton().findSchema({name, ovl}))
            throw std::runtime_error("no operator " + key);
        g_entries.push_back(std::make_unique<Entry>());
        impl_for_key(name, ovl, torch::CppFunction::makeFromBoxedFunctor(std::make_unique<CannaKernel>(id)));
        set(*g_entries[id]);
        g_ids[key] = id;
    } catch (const std::exception &e) {
        PyErr_Format(PyExc_ValueError, "canna_dl.torch: cannot route %s to canna: %s", key.c_str(), e.what());
        return -1;
    }
    return id;
}

// Views and composites skip canna's key: every operator known now that is not routed and whose
// results all alias an argument without writing (aten::view, transpose, slice, expand,
// as_strided, ...: no computation, nothing canna could run, left out of the report) gets a
// fallthrough kernel for it, so the dispatcher goes straight to PyTorch's kernel instead of
// boxing the call into the fallback (~1.5 us a call). A CompositeImplicitAutograd operator, which
// reaches the key only below its autograd (inference mode, torch.func's transforms, another
// operator's redispatch), passes on to its composite with the key on (pass_on), so its parts run
// on canna, instead of running in the fallback with the key off. Operators
// registered later keep the fallback. The number of operators, or -1 with a Python exception
// set. GIL held.
int canna_aten_pass_views(void)
{
    int n = 0;
    try {
        auto &disp = c10::Dispatcher::singleton();
        for (const c10::OperatorName &name : disp.getAllOpNames()) {
            if (g_ids.count(op_key(name.name, name.overload_name)))
                continue;
            auto h = disp.findOp(name);
            if (!h || !h->hasSchema() || h->hasKernelForDispatchKey(kKey))
                continue;
            const c10::FunctionSchema &schema = h->schema();
            bool view = !schema.returns().empty();
            for (const auto &r : schema.returns())
                view = view && r.alias_info() && !r.alias_info()->isWrite();
            for (const auto &a : schema.arguments())
                view = view && !(a.alias_info() && a.alias_info()->isWrite());
            bool composite = h->hasKernelForDispatchKey(c10::DispatchKey::CompositeImplicitAutograd);
            if (!(view || composite) || name.name.find("::") == std::string::npos)
                continue;
            // (a composite gets a kernel, not a fallthrough: PyTorch redispatches some of them with
            // another operator's keys -- ZeroTensor's add to aten::to --, which runs a per-operator
            // fallthrough kernel instead of skipping it: an internal assert)
            impl_for_key(name.name, name.overload_name, composite ? torch::CppFunction::makeFromBoxedFunction<&pass_on>()
                                                                  : torch::CppFunction::makeFallthrough());
            n++;
        }
    } catch (const std::exception &e) {
        PyErr_Format(PyExc_RuntimeError, "canna_dl.torch: cannot let views pass canna's key: %s", e.what());
        return -1;
    }
    return n;
}

// counters: out[0] calls canna ran, out[1] calls its handlers refused (run on PyTorch), out[2]
// calls the direct path served (part of out[0]), out[3] those of them its C route served (direct_c)
void canna_aten_counts(uint64_t *out)
{
    out[0] = g_canna.load();
    out[1] = g_refused.load();
    out[2] = g_direct.load();
    out[3] = g_direct_c.load();
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
        std::string nm = op_key(on.name, on.overload_name);
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
