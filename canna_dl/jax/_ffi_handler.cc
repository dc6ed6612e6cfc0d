// canna_dl.jax: the XLA FFI custom call that runs a cached aclnn executor on XLA's buffers
// (docs/DESIGN.md §11, "JAX under jit"). Compiled at first use by canna_dl/jax/_ffi.py against
// jaxlib's FFI headers (jax.ffi.include_dir()); it links to nothing of canna's: every AscendCL /
// aclnn function it calls is given to it by address when an entry is made.
//
// An entry is one kernel call for one signature: a repeatable aclOpExecutor that belongs to this
// entry alone (made by phase 1 at trace time, then taken out of the kernel library's plan
// cache), its tensor descriptors, where each of their addresses comes from (an XLA operand, an
// XLA result, or a fixed buffer the Python side keeps alive), the workspace, the stream and the
// context. The handler swaps the addresses in (aclSetInputTensorAddr / aclSetOutputTensorAddr,
// skipped when unchanged), runs phase 2 on the stream and waits for it, under the entry's mutex
// (XLA's CPU runtime may call it from several threads at once). Every failure is an FFI error
// carrying the runtime's message; nothing here aborts.
//
// Entries live in a fixed table for the life of the process (the Python side keeps the objects
// owning the executors alive as long); XLA is given the entry's index and this library's token
// (random per process), so a stale index (an executable compiled in another process, a table
// slot of a finalized runtime) is an error, not a wild pointer.
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <random>
#include <string>

#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

constexpr int kMaxTensors = 64;
constexpr int64_t kMaxEntries = 1 << 16;
constexpr int32_t kSyncSliceMs = 200;
constexpr int32_t kSyncTimeout = 507046;   // ACL_ERROR_RT_STREAM_SYNC_TIMEOUT

typedef int32_t (*set_addr_fn)(void *executor, size_t index, void *tensor, void *addr);
typedef int32_t (*run_fn)(void *workspace, uint64_t workspace_size, void *executor, void *stream);
typedef int32_t (*sync_fn)(void *stream, int32_t timeout_ms);
typedef int32_t (*set_ctx_fn)(void *context);
typedef const char *(*err_msg_fn)(void);

enum Source : int32_t { kArg = 0, kRet = 1, kFixed = 2 };

struct Entry {
    std::mutex mu;
    std::atomic<int> live{0};
    run_fn run = nullptr;
    set_addr_fn set_in = nullptr, set_out = nullptr;
    sync_fn sync = nullptr;
    set_ctx_fn set_ctx = nullptr;
    err_msg_fn err_msg = nullptr;
    void *executor = nullptr, *context = nullptr, *stream = nullptr, *workspace = nullptr;
    uint64_t ws_size = 0;
    int nin = 0, nout = 0, nargs = 0, nrets = 0;
    void *tensors[kMaxTensors];
    void *cur[kMaxTensors];
    int32_t kind[kMaxTensors];
    int64_t index[kMaxTensors];   // operand / result number, or the fixed address
    int64_t next = -1;            // the entry launched after this one (an op of several aclnn calls)
    uint64_t zero_rets = 0;       // results no kernel writes (an absent optional input's gradient): zeroed
    char name[64];
};

Entry g_entries[kMaxEntries];
std::atomic<int64_t> g_count{0};
std::mutex g_add_mu;
std::atomic<uint64_t> g_launches{0};
int64_t g_token = 0;

int64_t token()
{
    static std::once_flag once;
    std::call_once(once, [] {
        std::random_device rd;
        uint64_t t = (uint64_t(rd()) << 32) ^ rd() ^ uint64_t(uintptr_t(&g_count));
        g_token = int64_t(t & 0x3fffffffffffffffULL) | 1;
    });
    return g_token;
}

ffi::Error acl_error(const Entry &e, int32_t rc, const char *api)
{
    const char *m = e.err_msg ? e.err_msg() : nullptr;
    std::string msg = std::string("canna_dl.jax: ") + api + " (" + e.name + ") failed with error code " +
                      std::to_string(rc);
    if (m && *m)
        msg += std::string(": ") + m;
    return ffi::Error::Internal(msg);
}

ffi::Error Call(ffi::RemainingArgs args, ffi::RemainingRets rets, int64_t entry, int64_t tok)
{
    if (tok != token() || entry < 0 || entry >= g_count.load(std::memory_order_acquire))
        return ffi::Error::InvalidArgument(
            "canna_dl.jax: unknown kernel entry (an executable compiled in another process, e.g. taken from "
            "JAX's persistent compilation cache); trace the function again in this process");
    Entry &e = g_entries[entry];
    if (!e.live.load(std::memory_order_acquire))
        return ffi::Error(ffi::ErrorCode::kFailedPrecondition,
            std::string("canna_dl.jax: the kernel entry of ") + e.name +
            " belongs to a finalized runtime (acl_rt.finalize ran since it was traced); trace the function again");
    if (args.size() != size_t(e.nargs) || rets.size() != size_t(e.nrets))
        return ffi::Error::InvalidArgument(std::string("canna_dl.jax: ") + e.name + " takes " +
                                           std::to_string(e.nargs) + " operands and " + std::to_string(e.nrets) +
                                           " results, got " + std::to_string(args.size()) + " and " +
                                           std::to_string(rets.size()));
    std::lock_guard<std::mutex> lock(e.mu);   // the head's mutex guards its whole chain
    int32_t rc = e.set_ctx(e.context);         // XLA's threads have no current context
    if (rc)
        return acl_error(e, rc, "aclrtSetCurrentContext");
    for (size_t j = 0; j < rets.size() && j < 64; j++) {
        if (!(e.zero_rets >> j & 1))
            continue;
        auto b = rets.get<ffi::AnyBuffer>(j);
        if (b.has_error())
            return b.error();
        std::memset((*b)->untyped_data(), 0, (*b)->size_bytes());
    }
    int64_t k = entry;
    uint64_t launched = 0;
    while (k >= 0) {
        Entry &p = g_entries[k];
        void *addr[kMaxTensors];
        int n = p.nin + p.nout;
        for (int i = 0; i < n; i++) {
            if (p.kind[i] == kFixed) {
                addr[i] = reinterpret_cast<void *>(uintptr_t(p.index[i]));
            } else if (p.kind[i] == kArg) {
                auto b = args.get<ffi::AnyBuffer>(size_t(p.index[i]));
                if (b.has_error())
                    return b.error();
                addr[i] = b->untyped_data();
            } else {
                auto b = rets.get<ffi::AnyBuffer>(size_t(p.index[i]));
                if (b.has_error())
                    return b.error();
                addr[i] = (*b)->untyped_data();
            }
        }
        for (int i = 0; i < n; i++) {
            if (addr[i] == p.cur[i])
                continue;
            bool out = i >= p.nin;
            rc = (out ? p.set_out : p.set_in)(p.executor, size_t(out ? i - p.nin : i), p.tensors[i], addr[i]);
            if (rc) {
                p.cur[i] = reinterpret_cast<void *>(uintptr_t(1));
                return acl_error(p, rc, out ? "aclSetOutputTensorAddr" : "aclSetInputTensorAddr");
            }
            p.cur[i] = addr[i];
        }
        rc = p.run(p.workspace, p.ws_size, p.executor, p.stream);
        if (rc)
            return acl_error(p, rc, p.name);
        launched++;
        k = p.next;
    }
    for (;;) {   // XLA reads the results as soon as the handler returns
        rc = e.sync(e.stream, kSyncSliceMs);
        if (rc == 0)
            break;
        if (rc != kSyncTimeout)
            return acl_error(e, rc, "aclrtSynchronizeStreamWithTimeout");
    }
    g_launches.fetch_add(launched, std::memory_order_relaxed);
    return ffi::Error::Success();
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(canna_jax_call, Call,
                              ffi::Ffi::Bind().RemainingArgs().RemainingRets().Attr<int64_t>("entry").Attr<int64_t>(
                                  "token"));

extern "C" {

__attribute__((visibility("default"))) int64_t canna_jax_token(void) { return token(); }

__attribute__((visibility("default"))) uint64_t canna_jax_launches(void) { return g_launches.load(); }

// fns: run, set_in, set_out, sync, set_ctx, err_msg. kind/index: per tensor (inputs, then outputs).
// next: the entry launched after this one (made before it), or -1. zero_rets: a bit per result to
// zero before the launches (results no kernel writes).
// Returns the entry's index, or -1 when the table is full / the arguments are out of range.
__attribute__((visibility("default"))) int64_t canna_jax_add(void *const *fns, void *executor, void *context,
                                                              void *stream, void *workspace, uint64_t ws_size, int nin,
                                                              int nout, void *const *tensors, const int32_t *kind,
                                                              const int64_t *index, int nargs, int nrets,
                                                              const char *name, int64_t next, uint64_t zero_rets)
{
    if (nin < 0 || nout < 0 || nin + nout > kMaxTensors)
        return -1;
    std::lock_guard<std::mutex> lock(g_add_mu);
    int64_t k = g_count.load();
    if (k >= kMaxEntries)
        return -1;
    Entry &e = g_entries[k];
    e.run = reinterpret_cast<run_fn>(fns[0]);
    e.set_in = reinterpret_cast<set_addr_fn>(fns[1]);
    e.set_out = reinterpret_cast<set_addr_fn>(fns[2]);
    e.sync = reinterpret_cast<sync_fn>(fns[3]);
    e.set_ctx = reinterpret_cast<set_ctx_fn>(fns[4]);
    e.err_msg = reinterpret_cast<err_msg_fn>(fns[5]);
    e.executor = executor;
    e.context = context;
    e.stream = stream;
    e.workspace = workspace;
    e.ws_size = ws_size;
    e.nin = nin;
    e.nout = nout;
    e.nargs = nargs;
    e.nrets = nrets;
    for (int i = 0; i < nin + nout; i++) {
        e.tensors[i] = tensors[i];
        e.cur[i] = reinterpret_cast<void *>(uintptr_t(1));   // never an operand's address: swap at first launch
        e.kind[i] = kind[i];
        e.index[i] = index[i];
    }
    if (next >= k)
        return -1;
    e.next = next;
    e.zero_rets = zero_rets;
    std::snprintf(e.name, sizeof e.name, "%s", name ? name : "aclnn");
    e.live.store(1, std::memory_order_release);
    g_count.store(k + 1, std::memory_order_release);
    return k;
}

// every entry of the current runtime stops (acl_rt.finalize: their executors and streams die)
__attribute__((visibility("default"))) void canna_jax_retire_all(void)
{
    int64_t n = g_count.load();
    for (int64_t k = 0; k < n; k++) {
        std::lock_guard<std::mutex> lock(g_entries[k].mu);   // a launch in flight finishes first
        g_entries[k].live.store(0, std::memory_order_release);
    }
}

}  // extern "C"
