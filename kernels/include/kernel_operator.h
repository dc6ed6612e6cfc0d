/* kernel_operator.h -- Ascend C's vector programming model for canna's simulator (C++17).
 *
 * A kernel written against the public Ascend C API (hiascend.com, "Ascend C API reference": the
 * basic APIs of the vector unit) compiles unchanged with kernels.RawModule / RawKernel and runs on
 * the simulated AI cores:
 *
 *     #include "kernel_operator.h"
 *     using namespace AscendC;
 *     extern "C" __global__ __aicore__ void add_custom(GM_ADDR x, GM_ADDR y, GM_ADDR z) { ... }
 *
 * What it models: GlobalTensor / LocalTensor, TPipe with TQue / TQueBind / TBuf buffers in the
 * Unified Buffer (UB) of the block's vector core, DataCopy / DataCopyPad between global memory and
 * the UB, the vector instructions (count form, and the mask/repeat form with 256-byte repeats of
 * eight 32-byte blocks), Cast, the reductions, Compare / Select, the pipe synchronization calls
 * (no-ops here: each block runs its instructions in program order), the barriers across blocks
 * (SyncAll, GroupBarrier: real waits, see acl_rt/_sim/README.md), Pad / UnPad, printf and DumpTensor.
 *
 * What it checks, as a device fault of the block (a KernelError at the next synchronize naming the
 * kernel, the block and the source line): the UB capacity of the SoC profile at InitBuffer; the
 * 32-byte rule of DataCopy (length and UB address) and of vector operands' UB addresses; queue
 * discipline (DeQue with nothing enqueued, AllocTensor with every buffer in use, EnQue past the
 * queue's depth, FreeTensor of a tensor of another queue); use of a LocalTensor after FreeTensor;
 * LocalTensor indexes and lengths past the tensor; under CANNA_SIM_CHECK=1, global-memory ranges
 * outside their allocation.
 *
 * Not modelled: the cube unit (Mmad, the Matmul API, A1/A2/B1/B2/CO1 buffers), the advanced APIs
 * (SoftMax, LayerNorm...), less common vector instructions (Gather, Transpose, PairReduceSum...).
 *
 * On a real install the Ascend toolchain's own kernel_operator.h comes first on the include path;
 * this file is for canna's simulator only.
 */
#ifndef CANNA_KERNEL_OPERATOR_H
#define CANNA_KERNEL_OPERATOR_H

#if defined(__CCE_AICORE__) || defined(__CCE_KT_TEST__) || defined(CANNA_TARGET_ASCEND)
#error "canna's kernel_operator.h is the simulator's; the Ascend toolchain must find CANN's (tikcpp/tikcfw)"
#endif
#ifndef __cplusplus
#error "kernel_operator.h (Ascend C) needs a C++17 compiler"
#endif

#include "canna_kernel.h"
#include "sim_kernel_abi.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdarg>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <limits>
#include <new>
#include <type_traits>
#include <vector>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

/* the CPU build of an Ascend C kernel, as in CANN's CPU debug mode (samples keep their <<<>>> launch
 * wrappers out of it with these) */
#ifndef ASCENDC_CPU_DEBUG
#define ASCENDC_CPU_DEBUG 1
#endif
#ifndef __CCE_KT_TEST__
#define __CCE_KT_TEST__ 1
#endif
#ifndef KERNEL_TASK_TYPE_DEFAULT
#define KERNEL_TASK_TYPE_DEFAULT(t)
#endif
#ifndef KERNEL_TASK_TYPE
#define KERNEL_TASK_TYPE(k, t)
#endif

#pragma GCC push_options
#pragma GCC optimize("O3")

/* ------------------------------------------------------------------ bfloat16 where the compiler has none */
#ifndef __BFLT16_MAX__
struct bfloat16_t {
    uint16_t bits;
    bfloat16_t() = default;
    bfloat16_t(float f) {   /* round to nearest even; NaN stays NaN */
        uint32_t u;
        std::memcpy(&u, &f, 4);
        if ((u & 0x7fffffffu) > 0x7f800000u)
            bits = (uint16_t)((u >> 16) | 0x40u);
        else
            bits = (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    }
    bfloat16_t(double d) : bfloat16_t((float)d) {}
    bfloat16_t(int v) : bfloat16_t((float)v) {}
    operator float() const {
        uint32_t u = (uint32_t)bits << 16;
        float f;
        std::memcpy(&f, &u, 4);
        return f;
    }
};
#endif
#if !defined(__FLT16_MAX__) || defined(CANNA_NO_HALF)
#error "kernel_operator.h needs the compiler's _Float16 (GCC >= 12 or Clang on x86-64 / arm64) for half"
#endif

/* ------------------------------------------------------------------ the simulator's side */
namespace canna_sim {

inline int64_t now_ns()
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

struct Loc {
    const char *file;
    int line;
    static constexpr Loc here(const char *f = __builtin_FILE(), int l = __builtin_LINE()) { return Loc{f, l}; }
};
constexpr Loc kNoLoc{nullptr, 0};

inline const canna_sim_host *host() { return static_cast<const canna_sim_host *>(canna_sim_host_); }

[[noreturn]] inline void vfault(const canna_sim::Loc &loc, const char *fmt, va_list ap)
{
    canna_sim_fault_ e;
    int k = 0;
    if (loc.file) {
        const char *f = std::strrchr(loc.file, '/');
        k = std::snprintf(e.msg, sizeof e.msg, "%s:%d: ", f ? f + 1 : loc.file, loc.line);
        if (k < 0 || k >= (int)sizeof e.msg)
            k = 0;
    }
    std::vsnprintf(e.msg + k, sizeof e.msg - (size_t)k, fmt, ap);
    throw e;
}

[[noreturn]] inline void fault(const canna_sim::Loc &loc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
[[noreturn]] inline void fault(const canna_sim::Loc &loc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vfault(loc, fmt, ap);
}

inline bool memcheck() { return host() && host()->check; }

/* never NULL; under CANNA_SIM_CHECK=1, [p, p + n) must lie in its global-memory allocation */
inline void gm_check(const canna_sim::Loc &loc, const char *api, const void *p, size_t n)
{
    if (!p && n)
        fault(loc, "%s: the global memory address is NULL (a GlobalTensor without SetGlobalBuffer, or a NULL "
              "argument)", api);
    const canna_sim_host *h = host();
    if (!h || !h->check || !h->gm_check || n == 0)
        return;
    char why[200];
    if (h->gm_check(p, n, why, sizeof why))
        fault(loc, "%s: global memory %s", api, why);
}

/* the vector mask of SetVectorMask (used by mask/repeat instructions called with isSetMask = false):
 * normal mode, two words of bits; counter mode (SetMaskCount), an element count in lo */
struct VecMask {
    bool counter = false;
    uint64_t lo = ~0ull, hi = ~0ull;
};
inline VecMask &vec_mask()
{
    static thread_local VecMask m;
    return m;
}

/* SetAtomicAdd / SetAtomicMax / SetAtomicMin: how UB -> GM copies combine with what GM holds */
enum class Atomic : uint8_t { None, Add, Max, Min };
inline Atomic &atomic_mode()
{
    static thread_local Atomic m = Atomic::None;
    return m;
}

/* UB -> GM: large copies bypass the cache (non-temporal stores: an output written through is not
 * read first), like the device's MTE3 writing to HBM; smaller ones are memcpy */
inline void copy_out(void *dst, const void *src, size_t n)
{
#if defined(__SSE2__)
    if (n >= 4096) {
        uint8_t *d = static_cast<uint8_t *>(dst);
        const uint8_t *s = static_cast<const uint8_t *>(src);
        size_t head = (16 - ((uintptr_t)d & 15)) & 15;
        std::memcpy(d, s, head);
        d += head, s += head, n -= head;
        for (; n >= 64; d += 64, s += 64, n -= 64) {
            __m128i a = _mm_loadu_si128((const __m128i *)s), b = _mm_loadu_si128((const __m128i *)(s + 16));
            __m128i c = _mm_loadu_si128((const __m128i *)(s + 32)), e = _mm_loadu_si128((const __m128i *)(s + 48));
            _mm_stream_si128((__m128i *)d, a);
            _mm_stream_si128((__m128i *)(d + 16), b);
            _mm_stream_si128((__m128i *)(d + 32), c);
            _mm_stream_si128((__m128i *)(d + 48), e);
        }
        std::memcpy(d, s, n);
        _mm_sfence();   /* ordered before whatever the block does next (and its completion) */
        return;
    }
#endif
    std::memcpy(dst, src, n);
}

constexpr uint32_t kBlock = 32;    /* bytes of a data block (DataCopy and vector unit) */
constexpr uint32_t kRepeat = 256;  /* bytes one vector repeat reads: 8 blocks */
constexpr uint64_t kDefaultUB = 192u << 10;

/* the Unified Buffer of the vector core running this thread's block */
struct UB {
    uint8_t *base = nullptr;
    uint64_t cap = 0;
    uint64_t top = 0;
};
inline UB &ub()
{
    static thread_local UB u;
    if (!u.base) {   /* the simulator's buffer of this thread, else (loaded elsewhere) one of our own */
        const canna_sim_host *h = host();
        u.cap = h && h->ub_bytes ? h->ub_bytes : kDefaultUB;
        u.base = h && h->ub ? static_cast<uint8_t *>(h->ub()) : nullptr;
        if (!u.base)
            u.base = static_cast<uint8_t *>(std::aligned_alloc(4096, (u.cap + 4095) / 4096 * 4096));
        if (!u.base)
            throw std::bad_alloc();
    }
    return u;
}

/* a buffer of a queue or TBuf: LocalTensors keep (slot, generation) and check both at each use */
struct Slot {
    uint8_t *addr = nullptr;
    uint32_t bytes = 0;
    uint32_t gen = 1;
    uint8_t state = 0;   /* 0 free, 1 allocated, 2 enqueued */
    const void *owner = nullptr;
};

template <class T> struct type_name { static constexpr const char *value = "?"; };
template <> struct type_name<float> { static constexpr const char *value = "float"; };
template <> struct type_name<double> { static constexpr const char *value = "double"; };
template <> struct type_name<_Float16> { static constexpr const char *value = "half"; };
template <> struct type_name<bfloat16_t> { static constexpr const char *value = "bfloat16_t"; };
template <> struct type_name<int8_t> { static constexpr const char *value = "int8_t"; };
template <> struct type_name<uint8_t> { static constexpr const char *value = "uint8_t"; };
template <> struct type_name<int16_t> { static constexpr const char *value = "int16_t"; };
template <> struct type_name<uint16_t> { static constexpr const char *value = "uint16_t"; };
template <> struct type_name<int32_t> { static constexpr const char *value = "int32_t"; };
template <> struct type_name<uint32_t> { static constexpr const char *value = "uint32_t"; };
template <> struct type_name<int64_t> { static constexpr const char *value = "int64_t"; };
template <> struct type_name<uint64_t> { static constexpr const char *value = "uint64_t"; };

/* the type arithmetic runs in: float for the 16-bit floats */
template <class T> struct calc { using type = T; };
template <> struct calc<_Float16> { using type = float; };
template <> struct calc<bfloat16_t> { using type = float; };
template <class T> using calc_t = typename calc<T>::type;

/* debugging output: one line prefix per line, naming kernel and block */
inline void emit(const char *text)
{
    static thread_local bool at_line_start = true;
    const canna_sim_host *h = host();
    const char *kn = h && h->kernel_name ? h->kernel_name() : "";
    flockfile(stdout);
    for (const char *p = text; *p;) {
        if (at_line_start)
            std::fprintf(stdout, "[kernel '%s' block %u of %u] ", kn, canna_sim_block_idx_, canna_sim_block_num_);
        const char *nl = std::strchr(p, '\n');
        size_t n = nl ? (size_t)(nl - p + 1) : std::strlen(p);
        std::fwrite(p, 1, n, stdout);
        at_line_start = nl != nullptr;
        p += n;
    }
    std::fflush(stdout);
    funlockfile(stdout);
}

}  // namespace canna_sim

namespace AscendC {

#define CANNA_LOC_ ::canna_sim::Loc loc = ::canna_sim::Loc::here()

/* ------------------------------------------------------------------ positions, events, pipes */
enum class TPosition : uint8_t {
    GM, A1, A2, B1, B2, C1, C2, CO1, CO2, VECIN, VECOUT, VECCALC, LCM = VECCALC, SPM, SHM = SPM, TSCM, C2PIPE2GM,
    C2PIPE2LOCAL, MAX,
};
using QuePosition = TPosition;

enum class HardEvent : uint8_t {
    MTE2_MTE1, MTE1_MTE2, MTE1_M, M_MTE1, MTE2_V, V_MTE2, MTE3_V, V_MTE3, M_V, V_M, V_V, MTE3_MTE1, MTE1_MTE3,
    MTE1_V, MTE2_M, M_MTE2, V_MTE1, M_FIX, FIX_M, MTE3_MTE2, MTE2_MTE3, S_V, V_S, S_MTE2, MTE2_S, S_MTE3, MTE3_S,
    MTE2_FIX, FIX_MTE2, FIX_S, M_S, FIX_MTE3, MTE1_FIX, FIX_MTE1, FIX_FIX, MAX,
};
enum class MemoryT : uint8_t { L1 = 0, L0A, L0B, L0C, UB, BIAS };

}  // namespace AscendC

/* pipe_t is a global name in Ascend C */
/* the event ids of SetFlag / WaitFlag: global names in Ascend C, also found in AscendC:: */
enum event_t : int32_t { EVENT_ID0, EVENT_ID1, EVENT_ID2, EVENT_ID3, EVENT_ID4, EVENT_ID5, EVENT_ID6, EVENT_ID7 };
namespace AscendC {
using ::event_t;
using ::EVENT_ID0; using ::EVENT_ID1; using ::EVENT_ID2; using ::EVENT_ID3;
using ::EVENT_ID4; using ::EVENT_ID5; using ::EVENT_ID6; using ::EVENT_ID7;
}  // namespace AscendC
enum pipe_t : uint8_t { PIPE_S = 0, PIPE_V, PIPE_M, PIPE_MTE1, PIPE_MTE2, PIPE_MTE3, PIPE_ALL, PIPE_MTE4, PIPE_MTE5,
                        PIPE_V2, PIPE_FIX };
/* the intrinsic form of PipeBarrier */
inline void pipe_barrier(pipe_t) {}

namespace AscendC {

/* each block runs its instructions in program order here: barriers and flags order nothing */
template <pipe_t pipe> inline void PipeBarrier() {}
template <HardEvent e> inline void SetFlag(int32_t) {}
template <HardEvent e> inline void WaitFlag(int32_t) {}
/* SyncAll: a barrier across the launch's blocks. The simulator's host waits (canna_sim_host.sync_all):
 * blocks run on a pool of threads, and a block that waits is replaced by a thread running the blocks
 * not started yet, so every block reaches the barrier; one that cannot ever pass (a block ended
 * without calling it, more blocks than the SoC's cores can be resident) is a fault of the block */
namespace sync_ {
inline void sync_all(const canna_sim::Loc &loc, const char *api, uint32_t count)
{
    using canna_sim::fault;
    using canna_sim::host;
    if (::GetBlockNum() <= 1 && count <= 1)
        return;
    const canna_sim_host *h = host();
    if (!h || h->version < 2 || !h->sync_all)
        fault(loc, "%s: the simulator's runtime is older than this kernel_operator.h (rebuild canna)", api);
    char why[300] = "";
    int r = h->sync_all(count, why, sizeof why);
    if (r == 2)
        fault(loc, "%s: stopped (the launch is stopping)", api);
    if (r)
        fault(loc, "%s: block %lld waits for %u blocks, which can never arrive: %s (every block of the launch must "
              "call SyncAll the same number of times)", api, (long long)::GetBlockIdx(), count, why);
}
}  // namespace sync_
template <bool isAIVOnly = true> inline void SyncAll(CANNA_LOC_)
{
    sync_::sync_all(loc, "SyncAll", (uint32_t)::GetBlockNum());
}

inline int64_t GetTaskRation() { return 1; }
/* resets the core's state before a kernel starts (static Tensor programming): nothing to reset here */
inline void InitSocState() {}
/* ceil(a / b) of unsigned integers */
template <class T, class U> constexpr T DivCeil(T a, U b) { return (T)((a + (T)b - 1) / (T)b); }
/* the software SyncAll (a global workspace and a UB scratch tensor, which the simulator does not need):
 * a barrier of the first usedCores blocks (all of them when 0) */
template <bool isAIVOnly = true, class G, class L>
inline void SyncAll(const G &gmWorkspace, const L &ubWorkspace, int32_t usedCores = 0, CANNA_LOC_)
{
    (void)gmWorkspace; (void)ubWorkspace;
    if (usedCores < 0)
        canna_sim::fault(loc, "SyncAll: usedCores %d is negative", usedCores);
    sync_::sync_all(loc, "SyncAll", usedCores > 0 ? (uint32_t)usedCores : (uint32_t)::GetBlockNum());
}
inline uint32_t GetRuntimeUBSize() { return (uint32_t)canna_sim::ub().cap; }
inline int64_t GetSubBlockIdx() { return 0; }
inline int64_t GetSubBlockNum() { return 1; }
/* a cycle counter for timing a stretch of a kernel: here the host's steady clock in nanoseconds
 * (differences are meaningful, the unit is not the AI core's cycle) */
inline int64_t GetSystemCycle() { return canna_sim::now_ns(); }

/* the physical buffers of LocalMemAllocator (only the Unified Buffer exists here) */
enum class Hardware : uint8_t { GM, UB, L1, L0A, L0B, L0C, BIAS, FIXBUF, MAX };
/* GlobalTensor::SetL2CacheHint's modes: a hint for the L2 cache, which the simulator has not */
enum class CacheMode : uint8_t { CACHE_MODE_DISABLE = 0, CACHE_MODE_NORMAL, CACHE_MODE_LAST, CACHE_MODE_PERSISTENT };

/* AscendC::Std: the scalar helpers of the C++ standard library kernels use */
namespace Std {
template <class T, class U> constexpr T max(const T a, const U b) { return a < (T)b ? (T)b : a; }
template <class T, class U> constexpr T min(const T a, const U b) { return (T)b < a ? (T)b : a; }
}  // namespace Std

template <class T> class LocalTensor;

/* ------------------------------------------------------------------ GlobalTensor */
template <class T> class GlobalTensor {
public:
    using PrimType = T;
    GlobalTensor() = default;
    void SetGlobalBuffer(__gm__ T *buffer, uint64_t bufferSize) { ptr_ = buffer; size_ = bufferSize; }
    void SetGlobalBuffer(__gm__ T *buffer) { ptr_ = buffer; size_ = 0; }
    const __gm__ T *GetPhyAddr() const { return ptr_; }
    __gm__ T *GetPhyAddr(uint64_t offset) const { return ptr_ + offset; }
    uint64_t GetSize() const { return size_; }
    GlobalTensor operator[](uint64_t offset) const
    {
        GlobalTensor g;
        g.ptr_ = ptr_ + offset;
        g.size_ = size_ > offset ? size_ - offset : 0;
        return g;
    }
    T GetValue(uint64_t offset, CANNA_LOC_) const
    {
        canna_sim::gm_check(loc, "GlobalTensor::GetValue", ptr_ + offset, sizeof(T));
        return ptr_[offset];
    }
    void SetValue(uint64_t offset, T value, CANNA_LOC_)
    {
        canna_sim::gm_check(loc, "GlobalTensor::SetValue", ptr_ + offset, sizeof(T));
        ptr_[offset] = value;
    }
    T &operator()(uint64_t offset) const { return ptr_[offset]; }
    template <class... A> void SetL2CacheHint(A...) {}
    template <class... A> void SetShapeInfo(A...) {}

    __gm__ T *ptr_ = nullptr;
    uint64_t size_ = 0;
};

/* ------------------------------------------------------------------ LocalTensor */
template <class T> class LocalTensor {
public:
    using PrimType = T;
    LocalTensor() = default;
    /* static Tensor programming: `tileSize` elements at byte `addr` of the Unified Buffer, no TPipe
     * (Ascend C: not to be mixed with TPipe / TQue in one kernel) */
    LocalTensor(TPosition pos, uint32_t addr, uint32_t tileSize, CANNA_LOC_)
    {
        canna_sim::UB &u = canna_sim::ub();
        if (addr % canna_sim::kBlock)
            canna_sim::fault(loc, "LocalTensor: UB address %u is not 32-byte aligned", addr);
        if ((uint64_t)addr + (uint64_t)tileSize * sizeof(T) > u.cap)
            canna_sim::fault(loc, "LocalTensor: %u %s elements at UB address %u exceed the Unified Buffer of %llu "
                             "bytes", tileSize, canna_sim::type_name<T>::value, addr, (unsigned long long)u.cap);
        static thread_local canna_sim::Slot whole;   /* the whole UB: a static tensor is never freed */
        whole.addr = u.base;
        whole.bytes = (uint32_t)u.cap;
        whole.state = 1;
        ptr_ = reinterpret_cast<T *>(u.base + addr);
        size_ = tileSize;
        slot_ = &whole;
        gen_ = whole.gen;
        pos_ = pos;
    }

    T GetValue(uint32_t index, CANNA_LOC_) const
    {
        Live(loc, "LocalTensor::GetValue");
        Index(loc, "LocalTensor::GetValue", index);
        return ptr_[index];
    }
    void SetValue(uint32_t index, T value, CANNA_LOC_) const
    {
        Live(loc, "LocalTensor::SetValue");
        Index(loc, "LocalTensor::SetValue", index);
        ptr_[index] = value;
    }
    T &operator()(uint32_t index, CANNA_LOC_) const
    {
        Live(loc, "LocalTensor::operator()");
        Index(loc, "LocalTensor::operator()", index);
        return ptr_[index];
    }
    /* a tensor starting `offset` elements in (offset == GetSize() gives an empty tensor) */
    LocalTensor operator[](uint32_t offset) const
    {
        Live(canna_sim::kNoLoc, "LocalTensor::operator[]");
        if (offset > size_)
            canna_sim::fault(canna_sim::kNoLoc, "LocalTensor::operator[]: offset %u is out of range of a %s "
                             "LocalTensor of %u elements", offset, canna_sim::type_name<T>::value, size_);
        LocalTensor t = *this;
        t.ptr_ += offset;
        t.size_ -= offset;
        return t;
    }
    uint32_t GetSize() const { return size_; }
    uint32_t GetLength() const { return size_ * (uint32_t)sizeof(T); }
    void SetSize(uint32_t size, CANNA_LOC_)
    {
        if (slot_ && (uint64_t)size * sizeof(T) > (uint64_t)(slot_->addr + slot_->bytes - (uint8_t *)ptr_))
            canna_sim::fault(loc, "LocalTensor::SetSize: %u elements do not fit in its buffer", size);
        size_ = size;
    }
    uint64_t GetPhyAddr() const { return (uint64_t)((uint8_t *)ptr_ - canna_sim::ub().base); }
    uint64_t GetPhyAddr(uint32_t offset) const { return GetPhyAddr() + offset * sizeof(T); }
    TPosition GetPosition() const { return pos_; }
    template <class U> LocalTensor<U> ReinterpretCast() const
    {
        LocalTensor<U> t;
        t.ptr_ = reinterpret_cast<U *>(ptr_);
        t.size_ = (uint32_t)((uint64_t)size_ * sizeof(T) / sizeof(U));
        t.slot_ = slot_;
        t.gen_ = gen_;
        t.pos_ = pos_;
        return t;
    }
    /* CPU debug: the elements (all, or the first len) as DumpTensor prints them */
    void Print() const { Print(size_); }
    void Print(uint32_t len) const;
    void SetUserTag(int32_t tag) { tag_ = tag; }
    int32_t GetUserTag() const { return tag_; }

    /* -- the simulator's checks -- */
    void Live(const canna_sim::Loc &loc, const char *api) const
    {
        if (!slot_)
            canna_sim::fault(loc, "%s: the LocalTensor holds no buffer (get it from AllocTensor, DeQue or "
                             "TBuf::Get)", api);
        if (slot_->gen != gen_)
            canna_sim::fault(loc, "%s: use of a LocalTensor after FreeTensor (its buffer went back to its queue)", api);
    }
    void Index(const canna_sim::Loc &loc, const char *api, uint32_t index) const
    {
        if (index >= size_)
            canna_sim::fault(loc, "%s: index %u is out of range of a %s LocalTensor of %u elements", api, index,
                             canna_sim::type_name<T>::value, size_);
    }
    /* a vector/copy operand of `count` elements: live, long enough, 32-byte aligned in the UB */
    T *Operand(const canna_sim::Loc &loc, const char *api, const char *what, uint64_t count, bool aligned = true) const
    {
        Live(loc, api);
        if (count > size_)
            canna_sim::fault(loc, "%s: %llu elements exceed the %s LocalTensor %s of %u elements", api,
                             (unsigned long long)count, canna_sim::type_name<T>::value, what, size_);
        if (aligned && ((uintptr_t)((uint8_t *)ptr_ - canna_sim::ub().base) % canna_sim::kBlock))
            canna_sim::fault(loc, "%s: %s starts at UB offset %llu, which is not 32-byte aligned (Ascend C: operands "
                             "in the Unified Buffer start at a multiple of 32 bytes)", api, what,
                             (unsigned long long)((uint8_t *)ptr_ - canna_sim::ub().base));
        return ptr_;
    }

    T *ptr_ = nullptr;
    uint32_t size_ = 0;
    canna_sim::Slot *slot_ = nullptr;
    uint32_t gen_ = 0;
    TPosition pos_ = TPosition::VECCALC;
    int32_t tag_ = 0;
};

/* ------------------------------------------------------------------ TPipe, queues, TBuf */
class TPipe;

namespace internal_ {
constexpr uint32_t kMaxBuffers = 64;

class QueueBase {
public:
    QueueBase(TPosition pos, int32_t depth) : pos_(pos), depth_(depth) {}
    QueueBase(const QueueBase &) = delete;
    QueueBase &operator=(const QueueBase &) = delete;

    template <class T> LocalTensor<T> AllocTensor(CANNA_LOC_)
    {
        if (!num_)
            canna_sim::fault(loc, "AllocTensor: the queue has no buffers (call TPipe::InitBuffer for it first)");
        for (uint32_t i = 0; i < num_; i++) {
            canna_sim::Slot &s = slots_[i];
            if (s.state == 0) {
                s.state = 1;
                return Tensor<T>(s);
            }
        }
        canna_sim::fault(loc, "AllocTensor: all %u buffers of the queue are in use (InitBuffer gave it %u; "
                         "FreeTensor one before allocating another)", num_, num_);
    }
    template <class T> bool EnQue(const LocalTensor<T> &t, CANNA_LOC_)
    {
        canna_sim::Slot *s = Own(t, loc, "EnQue");
        if (s->state == 2)
            canna_sim::fault(loc, "EnQue: the LocalTensor is already in the queue");
        if (depth_ > 0 && count_ >= (uint32_t)depth_)
            canna_sim::fault(loc, "EnQue: the queue already holds %u tensors, its depth (TQue<..., %d>); DeQue one "
                             "first", count_, depth_);
        s->state = 2;
        fifo_[(head_ + count_) % kMaxBuffers] = s;
        count_++;
        return true;
    }
    template <class T> LocalTensor<T> DeQue(CANNA_LOC_)
    {
        if (!count_)
            canna_sim::fault(loc, "DeQue: nothing is enqueued in the queue (EnQue a tensor first; on a device the "
                             "core would wait here forever)");
        canna_sim::Slot *s = fifo_[head_];
        head_ = (head_ + 1) % kMaxBuffers;
        count_--;
        s->state = 1;
        return Tensor<T>(*s);
    }
    template <class T> void FreeTensor(LocalTensor<T> &t, CANNA_LOC_)
    {
        canna_sim::Slot *s = Own(t, loc, "FreeTensor");
        if (s->state == 2)
            canna_sim::fault(loc, "FreeTensor: the LocalTensor is still in the queue (DeQue it first)");
        s->state = 0;
        s->gen++;
    }
    bool VacantInQue() const { return depth_ <= 0 || count_ < (uint32_t)depth_; }
    bool HasTensorInQue() const { return count_ > 0; }
    int32_t GetTensorCountInQue() const { return (int32_t)count_; }
    bool HasIdleBuffer() const
    {
        for (uint32_t i = 0; i < num_; i++)
            if (slots_[i].state == 0)
                return true;
        return false;
    }
    void FreeAllEvent() {}

protected:
    friend class ::AscendC::TPipe;
    template <class T> LocalTensor<T> Tensor(canna_sim::Slot &s)
    {
        LocalTensor<T> t;
        t.ptr_ = reinterpret_cast<T *>(s.addr);
        t.size_ = s.bytes / (uint32_t)sizeof(T);
        t.slot_ = &s;
        t.gen_ = s.gen;
        t.pos_ = pos_;
        return t;
    }
    template <class T> canna_sim::Slot *Own(const LocalTensor<T> &t, const canna_sim::Loc &loc, const char *api)
    {
        t.Live(loc, api);
        if (t.slot_ < slots_ || t.slot_ >= slots_ + num_)
            canna_sim::fault(loc, "%s: the LocalTensor belongs to another queue or buffer", api);
        return t.slot_;
    }
    TPosition pos_;
    int32_t depth_;
    uint32_t num_ = 0;
    uint32_t head_ = 0, count_ = 0;
    canna_sim::Slot slots_[kMaxBuffers];
    canna_sim::Slot *fifo_[kMaxBuffers] = {};
};
}  // namespace internal_

template <TPosition src, TPosition dst, int32_t depth, auto mask = 0>
class TQueBind : public internal_::QueueBase {
public:
    TQueBind() : QueueBase(src, depth) {}
};

template <TPosition pos, int32_t depth, auto mask = 0>
class TQue : public TQueBind<pos, pos, depth, mask> {};

template <TPosition pos = TPosition::VECCALC>
class TBuf {
public:
    TBuf() = default;
    TBuf(const TBuf &) = delete;
    TBuf &operator=(const TBuf &) = delete;
    template <class T> LocalTensor<T> Get(CANNA_LOC_) { return Get<T>(slot_.bytes / (uint32_t)sizeof(T), loc); }
    template <class T> LocalTensor<T> Get(uint32_t len, CANNA_LOC_)
    {
        if (!slot_.addr)
            canna_sim::fault(loc, "TBuf::Get: the buffer has no memory (call TPipe::InitBuffer for it first)");
        if ((uint64_t)len * sizeof(T) > slot_.bytes)
            canna_sim::fault(loc, "TBuf::Get: %u elements of %s do not fit in the buffer of %u bytes", len,
                             canna_sim::type_name<T>::value, slot_.bytes);
        LocalTensor<T> t;
        t.ptr_ = reinterpret_cast<T *>(slot_.addr);
        t.size_ = len;
        t.slot_ = &slot_;
        t.gen_ = slot_.gen;
        t.pos_ = pos;
        return t;
    }
    template <class T> LocalTensor<T> GetWithOffset(uint32_t size, uint32_t bufOffset, CANNA_LOC_)
    {
        LocalTensor<T> t = Get<T>(loc);
        if (bufOffset % canna_sim::kBlock || (uint64_t)bufOffset + (uint64_t)size * sizeof(T) > slot_.bytes)
            canna_sim::fault(loc, "TBuf::GetWithOffset: %u elements at byte offset %u do not fit in the buffer of %u "
                             "bytes (or the offset is not 32-byte aligned)", size, bufOffset, slot_.bytes);
        t.ptr_ = reinterpret_cast<T *>(slot_.addr + bufOffset);
        t.size_ = size;
        return t;
    }
    /* a TBuf's tensor goes back nowhere (the buffer stays the TBuf's): only checked to be its own */
    template <class T> void FreeTensor(const LocalTensor<T> &t, CANNA_LOC_)
    {
        if (t.slot_ != &slot_)
            canna_sim::fault(loc, "TBuf::FreeTensor: the LocalTensor is not from this TBuf");
    }

    canna_sim::Slot slot_;
};

class TPipe {
public:
    /* a block's TPipe lives as long as the block: the atomic mode (SetAtomicAdd...) starts and ends with it */
    TPipe() : base_(canna_sim::ub().top)
    {
        Current() = this;
        canna_sim::atomic_mode() = canna_sim::Atomic::None;
        canna_sim::vec_mask() = canna_sim::VecMask();
    }
    ~TPipe()
    {
        canna_sim::atomic_mode() = canna_sim::Atomic::None;
        canna_sim::ub().top = base_;
        if (Current() == this)
            Current() = nullptr;
    }
    TPipe(const TPipe &) = delete;
    TPipe &operator=(const TPipe &) = delete;

    template <class Q>
    bool InitBuffer(Q &que, uint8_t num, uint32_t len, CANNA_LOC_)
    {
        return InitQueue(loc, "TPipe::InitBuffer", que, num, len,
                         [&](uint64_t bytes, const char *what) { return Take(loc, bytes, what, num, len); });
    }
    template <TPosition pos>
    bool InitBuffer(TBuf<pos> &buf, uint32_t len, CANNA_LOC_)
    {
        return InitTBuf(loc, "TPipe::InitBuffer", buf, len,
                        [&](uint64_t bytes, const char *what) { return Take(loc, bytes, what, 1, len); });
    }
    /* a TBufPool of `len` bytes of the Unified Buffer (or the bytes of `shareBuf`) */
    template <class P> bool InitBufPool(P &pool, uint32_t len, CANNA_LOC_)
    {
        uint32_t each = (len + canna_sim::kBlock - 1) / canna_sim::kBlock * canna_sim::kBlock;
        pool.Attach(loc, Take(loc, each, "TBufPool", 1, len), len);
        return true;
    }
    template <class P, class S> bool InitBufPool(P &pool, uint32_t len, S &shareBuf, CANNA_LOC_)
    {
        pool.Share(loc, shareBuf, len);
        return true;
    }

    /* the queue / TBuf set-up of TPipe and TBufPool::InitBuffer; take(bytes, what) gives the memory */
    template <class Q, class F>
    static bool InitQueue(const canna_sim::Loc &loc, const char *api, Q &que, uint8_t num, uint32_t len, F take)
    {
        internal_::QueueBase &q = que;
        if (num == 0 || num > internal_::kMaxBuffers || len == 0)
            canna_sim::fault(loc, "%s: %u buffers of %u bytes (num must be 1..%u, len > 0)", api, num, len,
                             internal_::kMaxBuffers);
        if (q.num_)
            canna_sim::fault(loc, "%s: the queue already has its buffers", api);
        uint32_t each = (len + canna_sim::kBlock - 1) / canna_sim::kBlock * canna_sim::kBlock;
        uint8_t *p = take((uint64_t)each * num, "queue");
        for (uint32_t i = 0; i < num; i++) {
            q.slots_[i].addr = p + (uint64_t)i * each;
            q.slots_[i].bytes = len;
            q.slots_[i].state = 0;
        }
        q.num_ = num;
        return true;
    }
    template <TPosition pos, class F>
    static bool InitTBuf(const canna_sim::Loc &loc, const char *api, TBuf<pos> &buf, uint32_t len, F take)
    {
        if (len == 0)
            canna_sim::fault(loc, "%s: a TBuf of 0 bytes", api);
        if (buf.slot_.addr)
            canna_sim::fault(loc, "%s: the TBuf already has its buffer", api);
        uint32_t each = (len + canna_sim::kBlock - 1) / canna_sim::kBlock * canna_sim::kBlock;
        buf.slot_.addr = take(each, "TBuf");
        buf.slot_.bytes = len;
        buf.slot_.state = 1;
        return true;
    }
    void Reset() { canna_sim::ub().top = base_; }
    void Destroy() { Reset(); }
    void Init() {}
    template <HardEvent e> int32_t AllocEventID() { return 0; }
    template <HardEvent e> void ReleaseEventID(int32_t) {}
    int32_t FetchEventID(HardEvent) { return 0; }
    template <HardEvent e> int32_t FetchEventID() { return 0; }

    static TPipe *&Current()
    {
        static thread_local TPipe *p = nullptr;
        return p;
    }

private:
    uint8_t *Take(const canna_sim::Loc &loc, uint64_t bytes, const char *what, uint32_t num, uint32_t len)
    {
        canna_sim::UB &u = canna_sim::ub();
        if (u.top + bytes > u.cap) {
            const canna_sim_host *h = canna_sim::host();
            canna_sim::fault(loc, "TPipe::InitBuffer: the Unified Buffer overflows: this %s needs %u x %u bytes, "
                             "%llu of the %llu bytes (%llu KiB on %s) are already in use",
                             what, num, len, (unsigned long long)u.top, (unsigned long long)u.cap,
                             (unsigned long long)(u.cap >> 10), h && h->soc_name ? h->soc_name : "this SoC");
        }
        uint8_t *p = u.base + u.top;
        std::memset(p, 0xff, bytes);   /* like uninitialized UB: not zeros (0xffff... is NaN) */
        u.top += bytes;
        return p;
    }
    uint64_t base_;
};

inline TPipe *GetTPipePtr() { return TPipe::Current(); }

/* a part of the Unified Buffer that queues, TBufs and smaller pools are carved from, and that Reset
 * hands back for reuse (public Ascend C API reference, TBufPool); InitBufPool(pool, len, shareBuf)
 * makes a pool over the same bytes as shareBuf, for a later stage of the kernel */
template <TPosition pos, uint32_t bufIDSize = 4> class TBufPool {
public:
    TBufPool() = default;
    TBufPool(const TBufPool &) = delete;
    TBufPool &operator=(const TBufPool &) = delete;
    template <class Q> bool InitBuffer(Q &que, uint8_t num, uint32_t len, CANNA_LOC_)
    {
        return TPipe::InitQueue(loc, "TBufPool::InitBuffer", que, num, len,
                                [&](uint64_t bytes, const char *what) { return Take(loc, bytes, what); });
    }
    template <TPosition p> bool InitBuffer(TBuf<p> &buf, uint32_t len, CANNA_LOC_)
    {
        return TPipe::InitTBuf(loc, "TBufPool::InitBuffer", buf, len,
                               [&](uint64_t bytes, const char *what) { return Take(loc, bytes, what); });
    }
    template <class P> bool InitBufPool(P &pool, uint32_t len, CANNA_LOC_)
    {
        uint32_t each = (len + canna_sim::kBlock - 1) / canna_sim::kBlock * canna_sim::kBlock;
        pool.Attach(loc, Take(loc, each, "TBufPool"), len);
        return true;
    }
    template <class P, class S> bool InitBufPool(P &pool, uint32_t len, S &shareBuf, CANNA_LOC_)
    {
        pool.Share(loc, shareBuf, len);
        return true;
    }
    /* the pool's bytes are free again for its next InitBuffer calls */
    void Reset() { top_ = 0; }

    /* -- for TPipe and other pools -- */
    void Attach(const canna_sim::Loc &loc, uint8_t *base, uint32_t len)
    {
        if (base_)
            canna_sim::fault(loc, "InitBufPool: the TBufPool already has its memory");
        base_ = base;
        len_ = len;
        top_ = 0;
    }
    template <class S> void Share(const canna_sim::Loc &loc, S &other, uint32_t len)
    {
        if (!other.base_)
            canna_sim::fault(loc, "InitBufPool: the TBufPool to share has no memory (initialize it first)");
        if (len > other.len_)
            canna_sim::fault(loc, "InitBufPool: %u bytes exceed the %u bytes of the TBufPool to share", len, other.len_);
        Attach(loc, other.base_, len);
    }
    uint8_t *Take(const canna_sim::Loc &loc, uint64_t bytes, const char *what)
    {
        if (!base_)
            canna_sim::fault(loc, "TBufPool::InitBuffer: the TBufPool has no memory (TPipe::InitBufPool first)");
        if (top_ + bytes > len_)
            canna_sim::fault(loc, "TBufPool::InitBuffer: the TBufPool overflows: this %s needs %llu bytes, %u of its "
                             "%u bytes are already in use", what, (unsigned long long)bytes, top_, len_);
        uint8_t *p = base_ + top_;
        std::memset(p, 0xff, bytes);
        top_ += (uint32_t)bytes;
        return p;
    }
    uint8_t *base_ = nullptr;
    uint32_t len_ = 0;
    uint32_t top_ = 0;
};

/* static Tensor programming: hands out consecutive 32-byte aligned LocalTensors of the Unified
 * Buffer from address 0 (public Ascend C API reference, LocalMemAllocator) */
template <Hardware hard = Hardware::UB> class LocalMemAllocator {
    static_assert(hard == Hardware::UB, "LocalMemAllocator: the simulator has only the Unified Buffer (Hardware::UB)");
public:
    LocalMemAllocator() = default;
    uint32_t GetCurAddr() const { return cur_; }
    template <class T, uint32_t tileSize> LocalTensor<T> Alloc(CANNA_LOC_) { return Take<T>(TPosition::VECCALC, tileSize, loc); }
    template <TPosition pos, class T, uint32_t tileSize> LocalTensor<T> Alloc(CANNA_LOC_) { return Take<T>(pos, tileSize, loc); }
    template <class T> LocalTensor<T> Alloc(uint32_t tileSize, CANNA_LOC_) { return Take<T>(TPosition::VECCALC, tileSize, loc); }
    template <TPosition pos, class T> LocalTensor<T> Alloc(uint32_t tileSize, CANNA_LOC_) { return Take<T>(pos, tileSize, loc); }
private:
    template <class T> LocalTensor<T> Take(TPosition pos, uint32_t n, const canna_sim::Loc &loc)
    {
        uint64_t bytes = ((uint64_t)n * sizeof(T) + canna_sim::kBlock - 1) / canna_sim::kBlock * canna_sim::kBlock;
        if (cur_ + bytes > canna_sim::ub().cap)
            canna_sim::fault(loc, "LocalMemAllocator::Alloc: %u %s elements at UB address %u exceed the Unified Buffer "
                             "of %llu bytes", n, canna_sim::type_name<T>::value, cur_,
                             (unsigned long long)canna_sim::ub().cap);
        LocalTensor<T> t(pos, cur_, n, loc);
        cur_ += (uint32_t)bytes;
        return t;
    }
    uint32_t cur_ = 0;
};

/* ------------------------------------------------------------------ data movement */
struct DataCopyParams {
    uint16_t blockCount = 1;
    uint16_t blockLen = 0;    /* in 32-byte blocks (DataCopy); in bytes (DataCopyPad) */
    uint16_t srcStride = 0;   /* gap between blocks: 32-byte blocks, or bytes for GM in DataCopyPad */
    uint16_t dstStride = 0;
    DataCopyParams() = default;
    DataCopyParams(uint16_t count, uint16_t len, uint16_t srcGap, uint16_t dstGap)
        : blockCount(count), blockLen(len), srcStride(srcGap), dstStride(dstGap) {}
};
struct DataCopyExtParams {
    uint16_t blockCount = 1;
    uint32_t blockLen = 0;    /* bytes */
    uint32_t srcStride = 0;   /* bytes for GM, 32-byte blocks for UB */
    uint32_t dstStride = 0;
    uint32_t rsv = 0;
    DataCopyExtParams() = default;
    DataCopyExtParams(uint16_t count, uint32_t len, uint32_t srcGap, uint32_t dstGap, uint32_t r = 0)
        : blockCount(count), blockLen(len), srcStride(srcGap), dstStride(dstGap), rsv(r) {}
};
template <class T> struct DataCopyPadExtParams {
    bool isPad = false;
    uint8_t leftPadding = 0;    /* elements */
    uint8_t rightPadding = 0;
    T paddingValue = T(0);
    DataCopyPadExtParams() = default;
    DataCopyPadExtParams(bool pad, uint8_t left, uint8_t right, T value)
        : isPad(pad), leftPadding(left), rightPadding(right), paddingValue(value) {}
};
struct DataCopyPadParams {
    bool isPad = false;
    uint8_t leftPadding = 0;
    uint8_t rightPadding = 0;
    uint64_t paddingValue = 0;
    DataCopyPadParams() = default;
    DataCopyPadParams(bool pad, uint8_t left, uint8_t right, uint64_t value)
        : isPad(pad), leftPadding(left), rightPadding(right), paddingValue(value) {}
};

namespace internal_ {
inline void CheckCopyLen(const canna_sim::Loc &loc, const char *api, uint64_t bytes, uint64_t count, size_t esize)
{
    if (bytes % canna_sim::kBlock)
        canna_sim::fault(loc, "%s: %llu elements of %zu bytes are %llu bytes, not a multiple of 32 bytes (DataCopy "
                         "moves whole 32-byte blocks; copy the unaligned tail with DataCopyPad)", api,
                         (unsigned long long)count, esize, (unsigned long long)bytes);
}
template <class T> T *UBBlocks(const canna_sim::Loc &loc, const char *api, const char *what, const LocalTensor<T> &t,
                               uint64_t endBytes)
{
    T *p = t.Operand(loc, api, what, 0);
    if (endBytes > (uint64_t)t.size_ * sizeof(T))
        canna_sim::fault(loc, "%s: the copy reaches %llu bytes into the %s LocalTensor %s of %llu bytes", api,
                         (unsigned long long)endBytes, canna_sim::type_name<T>::value, what,
                         (unsigned long long)t.size_ * sizeof(T));
    return p;
}
}  // namespace internal_

/* GM -> UB, `count` elements (count * sizeof(T) a multiple of 32 bytes) */
template <class T> void DataCopy(const LocalTensor<T> &dst, const GlobalTensor<T> &src, uint32_t count, CANNA_LOC_)
{
    uint64_t bytes = (uint64_t)count * sizeof(T);
    internal_::CheckCopyLen(loc, "DataCopy", bytes, count, sizeof(T));
    T *d = dst.Operand(loc, "DataCopy", "destination", count);
    canna_sim::gm_check(loc, "DataCopy", src.ptr_, bytes);
    std::memcpy(d, src.ptr_, bytes);
}
namespace internal_ {
/* an element combined into GM under SetAtomicAdd/Max/Min: a compare-and-swap loop on its bits, so
 * concurrent blocks combine correctly */
template <class T> void AtomicCombine(T *p, T v, canna_sim::Atomic mode)
{
    using Bits = std::conditional_t<sizeof(T) == 1, uint8_t, std::conditional_t<sizeof(T) == 2, uint16_t,
                 std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>>>;
    static_assert(sizeof(Bits) == sizeof(T), "atomic element size");
    Bits *bp = reinterpret_cast<Bits *>(p);
    Bits old = __atomic_load_n(bp, __ATOMIC_RELAXED), upd;
    do {
        T cur, nv;
        std::memcpy(&cur, &old, sizeof(T));
        canna_sim::calc_t<T> a = (canna_sim::calc_t<T>)cur, b = (canna_sim::calc_t<T>)v;
        nv = mode == canna_sim::Atomic::Add ? (T)(a + b) : mode == canna_sim::Atomic::Max ? (a > b ? cur : v)
                                                                                          : (a < b ? cur : v);
        std::memcpy(&upd, &nv, sizeof(T));
    } while (!__atomic_compare_exchange_n(bp, &old, upd, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
}
template <class T> void CopyOut(T *dst, const T *src, uint64_t count)
{
    canna_sim::Atomic mode = canna_sim::atomic_mode();
    if (mode == canna_sim::Atomic::None) {
        canna_sim::copy_out(dst, src, count * sizeof(T));
        return;
    }
    for (uint64_t i = 0; i < count; i++)
        AtomicCombine(dst + i, src[i], mode);
}
}  // namespace internal_

template <class T> inline void SetAtomicAdd() { canna_sim::atomic_mode() = canna_sim::Atomic::Add; }
template <class T> inline void SetAtomicMax() { canna_sim::atomic_mode() = canna_sim::Atomic::Max; }
template <class T> inline void SetAtomicMin() { canna_sim::atomic_mode() = canna_sim::Atomic::Min; }
inline void SetAtomicNone() { canna_sim::atomic_mode() = canna_sim::Atomic::None; }

/* UB -> GM */
template <class T> void DataCopy(const GlobalTensor<T> &dst, const LocalTensor<T> &src, uint32_t count, CANNA_LOC_)
{
    uint64_t bytes = (uint64_t)count * sizeof(T);
    internal_::CheckCopyLen(loc, "DataCopy", bytes, count, sizeof(T));
    T *s = src.Operand(loc, "DataCopy", "source", count);
    canna_sim::gm_check(loc, "DataCopy", dst.ptr_, bytes);
    internal_::CopyOut(dst.ptr_, s, count);
}

/* fills `size` elements of GM with value (a kernel zeroing its output before SetAtomicAdd) */
template <class T, class U>
void InitGlobalMemory(const GlobalTensor<T> &gm, uint64_t size, const U value, CANNA_LOC_)
{
    canna_sim::gm_check(loc, "InitGlobalMemory", gm.ptr_, size * sizeof(T));
    const T v = (T)value;
    for (uint64_t i = 0; i < size; i++)
        gm.ptr_[i] = v;
}
/* the older name of InitGlobalMemory */
template <class T, class U> void Fill(const GlobalTensor<T> &gm, uint64_t size, const U value, CANNA_LOC_)
{
    InitGlobalMemory(gm, size, value, loc);
}
/* InitOutput: the name of InitGlobalMemory in older CANN releases (the GroupBarrier sample uses it) */
template <class T, class U> void InitOutput(const GlobalTensor<T> &gm, uint64_t size, const U value, CANNA_LOC_)
{
    InitGlobalMemory(gm, size, value, loc);
}

/* GroupBarrier<PipeMode::MTE3_MODE>(groupWorkspace, arriveSize, waitSize): the waitSize blocks that
 * call Wait(i) go on once the arriveSize blocks have called Arrive(j) (Ascend C API reference,
 * "GroupBarrier"). The workspace is global memory of the user's, 512-byte aligned and zeroed before
 * the launch, waitSize x 512 bytes; the simulator counts the arrivals in its first 4 bytes (an
 * atomic add) and each block's object counts its own rounds, so the barrier may be used repeatedly. */
enum class PipeMode : uint8_t { SCALAR_MODE = 0, MTE3_MODE = 1, MAX };
template <PipeMode pipeMode> class GroupBarrier {
public:
    GroupBarrier(GM_ADDR groupWorkspace, uint32_t arriveSizeIn, uint32_t waitSizeIn, CANNA_LOC_)
        : ws_(reinterpret_cast<int32_t *>(groupWorkspace)), arrive_(arriveSizeIn), wait_(waitSizeIn)
    {
        if (!groupWorkspace || ((uintptr_t)groupWorkspace & 511u))
            canna_sim::fault(loc, "GroupBarrier: groupWorkspace %p must be a 512-byte aligned global memory address",
                             (void *)groupWorkspace);
        if (arriveSizeIn == 0 || waitSizeIn == 0 || (uint64_t)arriveSizeIn + waitSizeIn > (uint64_t)::GetBlockNum())
            canna_sim::fault(loc, "GroupBarrier: arriveSize %u and waitSize %u must be > 0 and together at most the "
                             "launch's %lld blocks", arriveSizeIn, waitSizeIn, (long long)::GetBlockNum());
        canna_sim::gm_check(loc, "GroupBarrier", ws_, (size_t)waitSizeIn * 512u);
    }
    void Arrive(uint32_t arriveIndex, CANNA_LOC_)
    {
        if (arriveIndex >= arrive_)
            canna_sim::fault(loc, "GroupBarrier::Arrive: index %u is out of range of the %u blocks of the Arrive "
                             "group", arriveIndex, arrive_);
        std::atomic_thread_fence(std::memory_order_seq_cst);   /* the block's writes first */
        __atomic_fetch_add(ws_, 1, __ATOMIC_SEQ_CST);
    }
    void Wait(uint32_t waitIndex, CANNA_LOC_)
    {
        if (waitIndex >= wait_)
            canna_sim::fault(loc, "GroupBarrier::Wait: index %u is out of range of the %u blocks of the Wait group",
                             waitIndex, wait_);
        want_ = (int64_t)(++rounds_) * arrive_;
        const canna_sim_host *h = canna_sim::host();
        if (!h || h->version < 2 || !h->wait_until)
            canna_sim::fault(loc, "GroupBarrier::Wait: the simulator's runtime is older than this kernel_operator.h "
                             "(rebuild canna)");
        char why[300] = "";
        int r = h->wait_until(&GroupBarrier::Ready, this, why, sizeof why);
        if (r == 2)
            canna_sim::fault(loc, "GroupBarrier::Wait: stopped (the launch is stopping)");
        if (r)
            canna_sim::fault(loc, "GroupBarrier::Wait: block %lld waits for %lld Arrive calls (%d came), which can "
                             "never come: %s", (long long)::GetBlockIdx(), (long long)want_,
                             (int)__atomic_load_n(ws_, __ATOMIC_SEQ_CST), why);
        std::atomic_thread_fence(std::memory_order_seq_cst);
    }

private:
    static int Ready(void *self)
    {
        auto *b = static_cast<GroupBarrier *>(self);
        return (int64_t)__atomic_load_n(b->ws_, __ATOMIC_SEQ_CST) >= b->want_;
    }
    int32_t *ws_;
    uint32_t arrive_, wait_;
    uint32_t rounds_ = 0;
    int64_t want_ = 0;
};

/* UB -> UB */
template <class T> void DataCopy(const LocalTensor<T> &dst, const LocalTensor<T> &src, uint32_t count, CANNA_LOC_)
{
    uint64_t bytes = (uint64_t)count * sizeof(T);
    internal_::CheckCopyLen(loc, "DataCopy", bytes, count, sizeof(T));
    T *d = dst.Operand(loc, "DataCopy", "destination", count);
    T *s = src.Operand(loc, "DataCopy", "source", count);
    std::memmove(d, s, bytes);
}

namespace internal_ {
/* blockCount blocks of blockLen 32-byte units; gaps (strides) in 32-byte units */
template <class D, class S>
void StridedBlocks(const canna_sim::Loc &loc, D *d, const S *s, const DataCopyParams &p, const char *what)
{
    (void)loc;
    (void)what;
    const uint64_t len = (uint64_t)p.blockLen * canna_sim::kBlock;
    for (uint32_t i = 0; i < p.blockCount; i++)
        std::memmove((uint8_t *)d + i * (len + (uint64_t)p.dstStride * canna_sim::kBlock),
                     (const uint8_t *)s + i * (len + (uint64_t)p.srcStride * canna_sim::kBlock), len);
}
inline uint64_t BlocksEnd(uint16_t count, uint64_t len, uint64_t gap)
{
    return count ? (uint64_t)(count - 1) * (len + gap) + len : 0;
}
}  // namespace internal_

template <class T> void DataCopy(const LocalTensor<T> &dst, const GlobalTensor<T> &src, const DataCopyParams &p,
                                 CANNA_LOC_)
{
    const uint64_t len = (uint64_t)p.blockLen * canna_sim::kBlock;
    T *d = internal_::UBBlocks(loc, "DataCopy", "destination", dst,
                               internal_::BlocksEnd(p.blockCount, len, (uint64_t)p.dstStride * 32));
    canna_sim::gm_check(loc, "DataCopy", src.ptr_, internal_::BlocksEnd(p.blockCount, len, (uint64_t)p.srcStride * 32));
    internal_::StridedBlocks(loc, d, src.ptr_, p, "GM->UB");
}
template <class T> void DataCopy(const GlobalTensor<T> &dst, const LocalTensor<T> &src, const DataCopyParams &p,
                                 CANNA_LOC_)
{
    const uint64_t len = (uint64_t)p.blockLen * canna_sim::kBlock;
    T *s = internal_::UBBlocks(loc, "DataCopy", "source", src,
                               internal_::BlocksEnd(p.blockCount, len, (uint64_t)p.srcStride * 32));
    canna_sim::gm_check(loc, "DataCopy", dst.ptr_, internal_::BlocksEnd(p.blockCount, len, (uint64_t)p.dstStride * 32));
    for (uint32_t i = 0; i < p.blockCount; i++)
        internal_::CopyOut((T *)((uint8_t *)dst.ptr_ + i * (len + (uint64_t)p.dstStride * canna_sim::kBlock)),
                           (const T *)((const uint8_t *)s + i * (len + (uint64_t)p.srcStride * canna_sim::kBlock)),
                           len / sizeof(T));
}
template <class T> void DataCopy(const LocalTensor<T> &dst, const LocalTensor<T> &src, const DataCopyParams &p,
                                 CANNA_LOC_)
{
    const uint64_t len = (uint64_t)p.blockLen * canna_sim::kBlock;
    T *d = internal_::UBBlocks(loc, "DataCopy", "destination", dst,
                               internal_::BlocksEnd(p.blockCount, len, (uint64_t)p.dstStride * 32));
    T *s = internal_::UBBlocks(loc, "DataCopy", "source", src,
                               internal_::BlocksEnd(p.blockCount, len, (uint64_t)p.srcStride * 32));
    internal_::StridedBlocks(loc, d, s, p, "UB->UB");
}

namespace internal_ {
/* GM -> UB: each block of blockLen bytes lands at a 32-byte boundary, after leftPad elements, padded to
 * a whole number of 32-byte blocks (padding filled with the value when isPad); dstGap in 32-byte blocks */
template <class T>
void PadIn(const canna_sim::Loc &loc, const LocalTensor<T> &dst, const GlobalTensor<T> &src, uint32_t count, uint32_t blockLen,
           uint64_t srcGap, uint64_t dstGap, bool isPad, uint32_t left, uint32_t right, T value)
{
    const char *api = "DataCopyPad";
    if (blockLen % sizeof(T))
        canna_sim::fault(loc, "%s: blockLen %u bytes is not a whole number of %s elements", api, blockLen,
                         canna_sim::type_name<T>::value);
    const uint64_t row = ((uint64_t)left * sizeof(T) + blockLen + (uint64_t)right * sizeof(T) + 31) / 32 * 32;
    T *d = UBBlocks(loc, api, "destination", dst, BlocksEnd((uint16_t)count, row, dstGap * 32));
    canna_sim::gm_check(loc, api, src.ptr_, BlocksEnd((uint16_t)count, blockLen, srcGap));
    const uint32_t n = blockLen / (uint32_t)sizeof(T), rowElems = (uint32_t)(row / sizeof(T));
    for (uint32_t i = 0; i < count; i++) {
        T *r = (T *)((uint8_t *)d + i * (row + dstGap * 32));
        const T *g = (const T *)((const uint8_t *)src.ptr_ + i * (blockLen + srcGap));
        std::memcpy(r + left, g, blockLen);
        if (isPad) {
            for (uint32_t k = 0; k < left; k++)
                r[k] = value;
            for (uint32_t k = left + n; k < rowElems; k++)
                r[k] = value;
        }
    }
}
/* UB -> GM: blocks start at 32-byte boundaries of the UB (srcGap in 32-byte blocks), blockLen bytes each
 * written to GM (dstGap in bytes) */
template <class T>
void PadOut(const canna_sim::Loc &loc, const GlobalTensor<T> &dst, const LocalTensor<T> &src, uint32_t count, uint32_t blockLen,
            uint64_t srcGap, uint64_t dstGap)
{
    const char *api = "DataCopyPad";
    const uint64_t row = ((uint64_t)blockLen + 31) / 32 * 32;
    T *s = UBBlocks(loc, api, "source", src, BlocksEnd((uint16_t)count, blockLen, (row - blockLen) + srcGap * 32));
    canna_sim::gm_check(loc, api, dst.ptr_, BlocksEnd((uint16_t)count, blockLen, dstGap));
    for (uint32_t i = 0; i < count; i++)
        CopyOut((T *)((uint8_t *)dst.ptr_ + i * (blockLen + dstGap)), (const T *)((const uint8_t *)s + i * (row + srcGap * 32)),
                blockLen / sizeof(T));
}
}  // namespace internal_

template <class T> void DataCopyPad(const LocalTensor<T> &dst, const GlobalTensor<T> &src, const DataCopyExtParams &p,
                                    const DataCopyPadExtParams<T> &pad, CANNA_LOC_)
{
    internal_::PadIn(loc, dst, src, p.blockCount, p.blockLen, p.srcStride, p.dstStride, pad.isPad, pad.leftPadding,
                     pad.rightPadding, pad.paddingValue);
}
template <class T> void DataCopyPad(const LocalTensor<T> &dst, const GlobalTensor<T> &src, const DataCopyParams &p,
                                    const DataCopyPadParams &pad, CANNA_LOC_)
{
    T v;
    std::memcpy(&v, &pad.paddingValue, sizeof(T) < 8 ? sizeof(T) : 8);
    internal_::PadIn(loc, dst, src, p.blockCount, p.blockLen, p.srcStride, p.dstStride, pad.isPad, pad.leftPadding,
                     pad.rightPadding, v);
}
template <class T> void DataCopyPad(const GlobalTensor<T> &dst, const LocalTensor<T> &src, const DataCopyExtParams &p,
                                    CANNA_LOC_)
{
    internal_::PadOut(loc, dst, src, p.blockCount, p.blockLen, p.srcStride, p.dstStride);
}
template <class T> void DataCopyPad(const GlobalTensor<T> &dst, const LocalTensor<T> &src, const DataCopyParams &p,
                                    CANNA_LOC_)
{
    internal_::PadOut(loc, dst, src, p.blockCount, p.blockLen, p.srcStride, p.dstStride);
}

/* ------------------------------------------------------------------ vector instructions */
struct BinaryRepeatParams {
    uint8_t dstBlkStride = 1, src0BlkStride = 1, src1BlkStride = 1;
    uint8_t dstRepStride = 8, src0RepStride = 8, src1RepStride = 8;
    bool repeatStrideMode = false, strideSizeMode = false;
    BinaryRepeatParams() = default;
    BinaryRepeatParams(uint8_t db, uint8_t s0b, uint8_t s1b, uint8_t dr, uint8_t s0r, uint8_t s1r)
        : dstBlkStride(db), src0BlkStride(s0b), src1BlkStride(s1b), dstRepStride(dr), src0RepStride(s0r),
          src1RepStride(s1r) {}
};
struct UnaryRepeatParams {
    uint16_t dstBlkStride = 1, srcBlkStride = 1;
    uint8_t dstRepStride = 8, srcRepStride = 8;
    bool repeatStrideMode = false, strideSizeMode = false;
    UnaryRepeatParams() = default;
    UnaryRepeatParams(uint16_t db, uint16_t sb, uint8_t dr, uint8_t sr)
        : dstBlkStride(db), srcBlkStride(sb), dstRepStride(dr), srcRepStride(sr) {}
};

namespace internal_ {
/* which element positions of a 256-byte repeat take part: a count (contiguous mode) or two 64-bit words */
struct Mask {
    uint64_t lo, hi;
    /* counter mode (SetMaskCount): the first `count` elements over all repeats, `per` a repeat */
    uint64_t count = 0;
    uint32_t per = 0;
    bool counter = false;
    bool operator()(uint32_t k) const { return k < 64 ? (lo >> k) & 1 : (hi >> (k - 64)) & 1; }
    bool on(uint64_t r, uint32_t k) const { return counter ? r * per + k < count : (*this)(k); }
    /* the repeats an instruction makes: the argument, or in counter mode as many as the count needs */
    uint32_t Repeats(uint32_t given) const { return counter ? (uint32_t)((count + per - 1) / per) : given; }
};
template <class T> Mask ContiguousMask(const canna_sim::Loc &loc, const char *api, uint64_t mask)
{
    const uint64_t per = canna_sim::kRepeat / sizeof(T);
    if (mask > per)
        canna_sim::fault(loc, "%s: mask %llu is more than the %llu %s elements of a repeat", api,
                         (unsigned long long)mask, (unsigned long long)per, canna_sim::type_name<T>::value);
    Mask m{0, 0};
    m.lo = mask >= 64 ? ~0ull : ((1ull << mask) - 1);
    m.hi = mask >= 128 ? ~0ull : mask > 64 ? ((1ull << (mask - 64)) - 1) : 0;
    return m;
}
inline Mask BitMask(const uint64_t mask[]) { return Mask{mask[0], mask[1]}; }

/* the mask of a mask/repeat instruction: its argument (isSetMask, the default), or the one set by
 * SetVectorMask (isSetMask = false: normal mode bits, or the counter mode's element count) */
template <class T, bool isSetMask, class M> Mask PickMask(const canna_sim::Loc &loc, const char *api, M mask)
{
    if constexpr (!isSetMask) {
        const canna_sim::VecMask &v = canna_sim::vec_mask();
        Mask m{v.lo, v.hi};
        if (v.counter) {
            m.counter = true;
            m.count = v.lo;
            m.per = canna_sim::kRepeat / sizeof(T);
        }
        return m;
    } else if constexpr (std::is_pointer_v<M>) {
        return BitMask(mask);
    } else {
        return ContiguousMask<T>(loc, api, (uint64_t)mask);
    }
}

/* the element offset of position k of repeat r for an operand with block / repeat strides (in 32-byte blocks) */
template <class T> inline uint64_t RepOffset(uint32_t r, uint32_t k, uint32_t blk, uint32_t rep)
{
    constexpr uint32_t epb = canna_sim::kBlock / sizeof(T);
    return (uint64_t)r * rep * epb + (uint64_t)(k / epb) * blk * epb + k % epb;
}
template <class T> inline uint64_t RepEnd(uint32_t repeat, const Mask &m, uint32_t blk, uint32_t rep)
{
    uint64_t end = 0;
    if (!repeat)
        return 0;
    for (uint32_t k = 0; k < canna_sim::kRepeat / sizeof(T); k++)
        if (m.on(repeat - 1, k))
            end = RepOffset<T>(repeat - 1, k, blk, rep) + 1;
    return end;
}

/* the loops of the count forms, built for the host's widest vectors (one clone per ISA, picked at load) */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(CANNA_NO_TARGET_CLONES)
#define CANNA_CLONES_ __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define CANNA_CLONES_
#endif
template <class D, class S, class F> CANNA_CLONES_ void BinaryLoop(D *d, const S *x, const S *y, int64_t n, F f)
{
#pragma GCC ivdep
    for (int64_t i = 0; i < n; i++)
        d[i] = f(x[i], y[i]);
}
template <class D, class S, class F> CANNA_CLONES_ void UnaryLoop(D *d, const S *x, int64_t n, F f)
{
#pragma GCC ivdep
    for (int64_t i = 0; i < n; i++)
        d[i] = f(x[i]);
}

template <class T, class F>
void Binary(const canna_sim::Loc &loc, const char *api, const LocalTensor<T> &dst, const LocalTensor<T> &a,
            const LocalTensor<T> &b, int64_t count, F f)
{
    if (count < 0)
        canna_sim::fault(loc, "%s: count %lld is negative", api, (long long)count);
    T *d = dst.Operand(loc, api, "destination", (uint64_t)count);
    const T *x = a.Operand(loc, api, "source 0", (uint64_t)count);
    const T *y = b.Operand(loc, api, "source 1", (uint64_t)count);
    BinaryLoop(d, x, y, count, f);
}
template <class T, class F>
void BinaryRep(const canna_sim::Loc &loc, const char *api, const LocalTensor<T> &dst, const LocalTensor<T> &a,
               const LocalTensor<T> &b, const Mask &m, uint32_t repeat, const BinaryRepeatParams &p, F f)
{
    repeat = m.Repeats(repeat);
    T *d = dst.Operand(loc, api, "destination", RepEnd<T>(repeat, m, p.dstBlkStride, p.dstRepStride));
    const T *x = a.Operand(loc, api, "source 0", RepEnd<T>(repeat, m, p.src0BlkStride, p.src0RepStride));
    const T *y = b.Operand(loc, api, "source 1", RepEnd<T>(repeat, m, p.src1BlkStride, p.src1RepStride));
    for (uint32_t r = 0; r < repeat; r++)
        for (uint32_t k = 0; k < canna_sim::kRepeat / sizeof(T); k++)
            if (m.on(r, k))
                d[RepOffset<T>(r, k, p.dstBlkStride, p.dstRepStride)] =
                    f(x[RepOffset<T>(r, k, p.src0BlkStride, p.src0RepStride)],
                      y[RepOffset<T>(r, k, p.src1BlkStride, p.src1RepStride)]);
}
template <class D, class S, class F>
void Unary(const canna_sim::Loc &loc, const char *api, const LocalTensor<D> &dst, const LocalTensor<S> &src, int64_t count, F f)
{
    if (count < 0)
        canna_sim::fault(loc, "%s: count %lld is negative", api, (long long)count);
    D *d = dst.Operand(loc, api, "destination", (uint64_t)count);
    const S *x = src.Operand(loc, api, "source", (uint64_t)count);
    UnaryLoop(d, x, count, f);
}
template <class T, class F>
void UnaryRep(const canna_sim::Loc &loc, const char *api, const LocalTensor<T> &dst, const LocalTensor<T> &src, const Mask &m,
              uint32_t repeat, const UnaryRepeatParams &p, F f)
{
    repeat = m.Repeats(repeat);
    T *d = dst.Operand(loc, api, "destination", RepEnd<T>(repeat, m, p.dstBlkStride, p.dstRepStride));
    const T *x = src.Operand(loc, api, "source", RepEnd<T>(repeat, m, p.srcBlkStride, p.srcRepStride));
    for (uint32_t r = 0; r < repeat; r++)
        for (uint32_t k = 0; k < canna_sim::kRepeat / sizeof(T); k++)
            if (m.on(r, k))
                d[RepOffset<T>(r, k, p.dstBlkStride, p.dstRepStride)] =
                    f(x[RepOffset<T>(r, k, p.srcBlkStride, p.srcRepStride)]);
}
template <class T> using C = canna_sim::calc_t<T>;
}  // namespace internal_

/* binary: dst = f(src0, src1), count form and the two mask/repeat forms */
#define CANNA_BINARY_(NAME, EXPR)                                                                                 \
    template <class T> void NAME(const LocalTensor<T> &dst, const LocalTensor<T> &src0, const LocalTensor<T> &src1, \
                                 const int32_t &count, CANNA_LOC_)                                               \
    {                                                                                                             \
        using C = internal_::C<T>;                                                                                \
        internal_::Binary(loc, #NAME, dst, src0, src1, count, [](T a_, T b_) {                                    \
            C a = (C)a_, b = (C)b_;                                                                               \
            return (T)(EXPR);                                                                                     \
        });                                                                                                       \
    }                                                                                                             \
    template <class T, bool isSetMask = true>                                                                     \
    void NAME(const LocalTensor<T> &dst, const LocalTensor<T> &src0, const LocalTensor<T> &src1, uint64_t mask,   \
              const uint8_t repeatTimes, const BinaryRepeatParams &params, CANNA_LOC_)                            \
    {                                                                                                             \
        using C = internal_::C<T>;                                                                                \
        internal_::BinaryRep(loc, #NAME, dst, src0, src1, internal_::PickMask<T, isSetMask>(loc, #NAME, mask),         \
                             repeatTimes, params, [](T a_, T b_) {                                                \
                                 C a = (C)a_, b = (C)b_;                                                          \
                                 return (T)(EXPR);                                                                \
                             });                                                                                  \
    }                                                                                                             \
    template <class T, bool isSetMask = true>                                                                     \
    void NAME(const LocalTensor<T> &dst, const LocalTensor<T> &src0, const LocalTensor<T> &src1,                  \
              const uint64_t mask[], const uint8_t repeatTimes, const BinaryRepeatParams &params, CANNA_LOC_)     \
    {                                                                                                             \
        using C = internal_::C<T>;                                                                                \
        internal_::BinaryRep(loc, #NAME, dst, src0, src1, internal_::PickMask<T, isSetMask>(loc, #NAME, mask), repeatTimes, params,          \
                             [](T a_, T b_) {                                                                     \
                                 C a = (C)a_, b = (C)b_;                                                          \
                                 return (T)(EXPR);                                                                \
                             });                                                                                  \
    }

CANNA_BINARY_(Add, a + b)
CANNA_BINARY_(Sub, a - b)
CANNA_BINARY_(Mul, a * b)
CANNA_BINARY_(Div, a / b)
CANNA_BINARY_(Max, a > b ? a : b)
CANNA_BINARY_(Min, a < b ? a : b)
CANNA_BINARY_(And, a & b)
CANNA_BINARY_(Or, a | b)
CANNA_BINARY_(AddRelu, (a + b) > C(0) ? (a + b) : C(0))
CANNA_BINARY_(SubRelu, (a - b) > C(0) ? (a - b) : C(0))
#undef CANNA_BINARY_

/* unary: dst = f(src) */
#define CANNA_UNARY_(NAME, EXPR)                                                                                  \
    template <class T> void NAME(const LocalTensor<T> &dst, const LocalTensor<T> &src, const int32_t &count,      \
                                 CANNA_LOC_)                                                                      \
    {                                                                                                             \
        using C = internal_::C<T>;                                                                                \
        internal_::Unary(loc, #NAME, dst, src, count, [](T a_) {                                                  \
            C a = (C)a_;                                                                                          \
            return (T)(EXPR);                                                                                     \
        });                                                                                                       \
    }                                                                                                             \
    template <class T, bool isSetMask = true>                                                                     \
    void NAME(const LocalTensor<T> &dst, const LocalTensor<T> &src, uint64_t mask, const uint8_t repeatTimes,     \
              const UnaryRepeatParams &params, CANNA_LOC_)                                                        \
    {                                                                                                             \
        using C = internal_::C<T>;                                                                                \
        internal_::UnaryRep(loc, #NAME, dst, src, internal_::PickMask<T, isSetMask>(loc, #NAME, mask), repeatTimes,    \
                            params, [](T a_) {                                                                    \
                                C a = (C)a_;                                                                      \
                                return (T)(EXPR);                                                                 \
                            });                                                                                   \
    }                                                                                                             \
    template <class T, bool isSetMask = true>                                                                     \
    void NAME(const LocalTensor<T> &dst, const LocalTensor<T> &src, const uint64_t mask[],                        \
              const uint8_t repeatTimes, const UnaryRepeatParams &params, CANNA_LOC_)                             \
    {                                                                                                             \
        using C = internal_::C<T>;                                                                                \
        internal_::UnaryRep(loc, #NAME, dst, src, internal_::PickMask<T, isSetMask>(loc, #NAME, mask), repeatTimes, params, [](T a_) {       \
            C a = (C)a_;                                                                                          \
            return (T)(EXPR);                                                                                     \
        });                                                                                                       \
    }

CANNA_UNARY_(Exp, std::exp(a))
CANNA_UNARY_(Ln, std::log(a))
CANNA_UNARY_(Abs, std::fabs(a))
CANNA_UNARY_(Reciprocal, C(1) / a)
CANNA_UNARY_(Sqrt, std::sqrt(a))
CANNA_UNARY_(Rsqrt, C(1) / std::sqrt(a))
CANNA_UNARY_(Relu, a > C(0) ? a : C(0))
CANNA_UNARY_(Not, ~a)
#undef CANNA_UNARY_

/* tensor-scalar: dst = f(src, scalar) */
#define CANNA_SCALAR_(NAME, EXPR)                                                                                 \
    template <class T, class U>                                                                                   \
    void NAME(const LocalTensor<T> &dst, const LocalTensor<T> &src, const U &scalarValue, const int32_t &count,   \
              CANNA_LOC_)                                                                                         \
    {                                                                                                             \
        using C = internal_::C<T>;                                                                                \
        const C s = (C)(T)scalarValue;                                                                            \
        internal_::Unary(loc, #NAME, dst, src, count, [s](T a_) {                                                 \
            C a = (C)a_;                                                                                          \
            return (T)(EXPR);                                                                                     \
        });                                                                                                       \
    }                                                                                                             \
    template <class T, bool isSetMask = true, class U = T>                                                            \
    void NAME(const LocalTensor<T> &dst, const LocalTensor<T> &src, const U &scalarValue, uint64_t mask,          \
              const uint8_t repeatTimes, const UnaryRepeatParams &params, CANNA_LOC_)                             \
    {                                                                                                             \
        using C = internal_::C<T>;                                                                                \
        const C s = (C)(T)scalarValue;                                                                            \
        internal_::UnaryRep(loc, #NAME, dst, src, internal_::PickMask<T, isSetMask>(loc, #NAME, mask), repeatTimes,    \
                            params, [s](T a_) {                                                                   \
                                C a = (C)a_;                                                                      \
                                return (T)(EXPR);                                                                 \
                            });                                                                                   \
    }                                                                                                             \
    template <class T, bool isSetMask = true, class U = T>                                                            \
    void NAME(const LocalTensor<T> &dst, const LocalTensor<T> &src, const U &scalarValue, const uint64_t mask[],  \
              const uint8_t repeatTimes, const UnaryRepeatParams &params, CANNA_LOC_)                             \
    {                                                                                                             \
        using C = internal_::C<T>;                                                                                \
        const C s = (C)(T)scalarValue;                                                                            \
        internal_::UnaryRep(loc, #NAME, dst, src, internal_::PickMask<T, isSetMask>(loc, #NAME, mask), repeatTimes, params, [s](T a_) {      \
            C a = (C)a_;                                                                                          \
            return (T)(EXPR);                                                                                     \
        });                                                                                                       \
    }

CANNA_SCALAR_(Adds, a + s)
CANNA_SCALAR_(Muls, a * s)
CANNA_SCALAR_(Maxs, a > s ? a : s)
CANNA_SCALAR_(Mins, a < s ? a : s)
CANNA_SCALAR_(LeakyRelu, a >= C(0) ? a : a * s)
#undef CANNA_SCALAR_

/* the mask state of the instructions called with isSetMask = false */
enum class MaskMode : uint8_t { NORMAL = 0, COUNTER };
constexpr uint64_t MASK_PLACEHOLDER = 0;
inline void SetMaskCount() { canna_sim::vec_mask().counter = true; }
inline void SetMaskNorm() { canna_sim::vec_mask().counter = false; }
inline void ResetMask()
{
    canna_sim::VecMask &m = canna_sim::vec_mask();
    m.lo = m.hi = ~0ull;
}
/* normal mode: the bits (maskHigh, maskLow); counter mode: maskLow elements */
template <class T, MaskMode mode = MaskMode::NORMAL> inline void SetVectorMask(uint64_t maskHigh, uint64_t maskLow)
{
    canna_sim::VecMask &m = canna_sim::vec_mask();
    m.counter = mode == MaskMode::COUNTER || m.counter;
    m.hi = maskHigh;
    m.lo = maskLow;
}
/* the first len elements of a repeat (normal mode), or len elements in all (counter mode) */
template <class T, MaskMode mode = MaskMode::NORMAL> inline void SetVectorMask(int32_t len)
{
    canna_sim::VecMask &m = canna_sim::vec_mask();
    m.counter = mode == MaskMode::COUNTER || m.counter;
    if (m.counter) {
        m.lo = (uint64_t)len;
        m.hi = 0;
    } else {
        m.lo = len >= 64 ? ~0ull : ((1ull << len) - 1);
        m.hi = len >= 128 ? ~0ull : len > 64 ? ((1ull << (len - 64)) - 1) : 0;
    }
}

/* dst += src * scalar */
template <class T, class U>
void Axpy(const LocalTensor<T> &dst, const LocalTensor<T> &src, const U &scalarValue, const int32_t &count, CANNA_LOC_)
{
    using C = internal_::C<T>;
    const C s = (C)(T)scalarValue;
    internal_::Binary(loc, "Axpy", dst, dst, src, count, [s](T d, T a) { return (T)((C)d + (C)a * s); });
}

template <class T, class U>
void Duplicate(const LocalTensor<T> &dst, const U &scalarValue, const int32_t &count, CANNA_LOC_)
{
    const T s = (T)scalarValue;
    if (count < 0)
        canna_sim::fault(loc, "Duplicate: count %d is negative", count);
    T *d = dst.Operand(loc, "Duplicate", "destination", (uint64_t)count);
    for (int32_t i = 0; i < count; i++)
        d[i] = s;
}
namespace internal_ {
template <class T, bool isSetMask, class U, class M>
void DuplicateRep(const canna_sim::Loc &loc, const LocalTensor<T> &dst, const U &scalarValue, M mask,
                  const uint8_t repeatTimes, const uint16_t dstBlockStride, const uint8_t dstRepeatStride)
{
    const T s = (T)scalarValue;
    internal_::Mask m = internal_::PickMask<T, isSetMask>(loc, "Duplicate", mask);
    const uint32_t repeat = m.Repeats(repeatTimes);
    T *d = dst.Operand(loc, "Duplicate", "destination", internal_::RepEnd<T>(repeat, m, dstBlockStride,
                                                                               dstRepeatStride));
    for (uint32_t r = 0; r < repeat; r++)
        for (uint32_t k = 0; k < canna_sim::kRepeat / sizeof(T); k++)
            if (m.on(r, k))
                d[internal_::RepOffset<T>(r, k, dstBlockStride, dstRepeatStride)] = s;
}
}  // namespace internal_
/* the mask/repeat forms: a contiguous mask, or the bit mask of two uint64_t */
template <class T, bool isSetMask = true, class U = T>
void Duplicate(const LocalTensor<T> &dst, const U &scalarValue, uint64_t mask, const uint8_t repeatTimes,
               const uint16_t dstBlockStride, const uint8_t dstRepeatStride, CANNA_LOC_)
{
    internal_::DuplicateRep<T, isSetMask>(loc, dst, scalarValue, mask, repeatTimes, dstBlockStride, dstRepeatStride);
}
template <class T, bool isSetMask = true, class U = T>
void Duplicate(const LocalTensor<T> &dst, const U &scalarValue, const uint64_t mask[], const uint8_t repeatTimes,
               const uint16_t dstBlockStride, const uint8_t dstRepeatStride, CANNA_LOC_)
{
    internal_::DuplicateRep<T, isSetMask>(loc, dst, scalarValue, mask, repeatTimes, dstBlockStride, dstRepeatStride);
}

/* ------------------------------------------------------------------ Cast */
enum class RoundMode : uint8_t { CAST_NONE = 0, CAST_RINT, CAST_FLOOR, CAST_CEIL, CAST_ROUND, CAST_TRUNC, CAST_ODD };

namespace internal_ {
/* the next representable value of a 16- or 32-bit float toward +inf (up) or -inf */
template <class D> D StepFloat(D x, bool up)
{
    using Bits = std::conditional_t<sizeof(D) == 2, uint16_t, uint32_t>;
    static_assert(sizeof(Bits) == sizeof(D), "a 16- or 32-bit float");
    Bits b;
    std::memcpy(&b, &x, sizeof(D));
    const Bits sign = (Bits)(Bits(1) << (8 * sizeof(D) - 1));
    if ((Bits)(b & ~sign) == 0)
        b = up ? (Bits)1 : (Bits)(sign | 1);   /* from +-0 to the smallest subnormal */
    else if (((b & sign) == 0) == up)
        b++;
    else
        b--;
    std::memcpy(&x, &b, sizeof(D));
    return x;
}
template <class D> D Round(double v, RoundMode mode)
{
    if constexpr (std::is_integral_v<D>) {
        double r;
        switch (mode) {
        case RoundMode::CAST_FLOOR: r = std::floor(v); break;
        case RoundMode::CAST_CEIL: r = std::ceil(v); break;
        case RoundMode::CAST_ROUND: r = std::round(v); break;
        case RoundMode::CAST_TRUNC: r = std::trunc(v); break;
        default: r = std::nearbyint(v); break;   /* CAST_NONE / CAST_RINT: to nearest, ties to even */
        }
        if (std::isnan(r))
            return 0;
        if (r <= (double)std::numeric_limits<D>::min())
            return std::numeric_limits<D>::min();
        if (r >= (double)std::numeric_limits<D>::max())
            return std::numeric_limits<D>::max();
        return (D)r;
    } else {
        /* to a narrower float: nearest-even (CAST_NONE / CAST_RINT), else the neighbour the mode picks */
        D r = (D)v;
        double back = (double)(float)r;
        if (std::isnan(v) || std::isinf(v) || back == v)
            return r;
        D other = StepFloat(r, back < v);   /* the representable value on v's other side */
        double ob = (double)(float)other;
        auto pick = [&](bool other_one) { return other_one ? other : r; };
        switch (mode) {
        case RoundMode::CAST_FLOOR: return pick(back > v);
        case RoundMode::CAST_CEIL: return pick(back < v);
        case RoundMode::CAST_TRUNC: return pick(std::fabs(back) > std::fabs(v));
        case RoundMode::CAST_ROUND:   /* nearest, ties away from zero */
            return pick(std::fabs(ob - v) == std::fabs(back - v) && std::fabs(ob) > std::fabs(back));
        case RoundMode::CAST_ODD: {   /* inexact: the neighbour whose last bit is 1 */
            uint32_t rb = 0;
            std::memcpy(&rb, &r, sizeof(D) < 4 ? sizeof(D) : 4);
            return pick((rb & 1) == 0);
        }
        default:
            return r;
        }
    }
}
}  // namespace internal_

template <class D, class S>
void Cast(const LocalTensor<D> &dst, const LocalTensor<S> &src, const RoundMode &roundMode, const uint32_t count,
          CANNA_LOC_)
{
    const RoundMode mode = roundMode;
    if constexpr (std::is_integral_v<D> || sizeof(D) < sizeof(S)) {
        internal_::Unary(loc, "Cast", dst, src, count, [mode](S a) { return internal_::Round<D>((double)a, mode); });
    } else {
        internal_::Unary(loc, "Cast", dst, src, count, [](S a) { return (D)(internal_::C<S>)a; });
    }
}

/* ------------------------------------------------------------------ reductions */
enum class ReduceOrder : uint8_t { ORDER_VALUE_INDEX = 0, ORDER_INDEX_VALUE, ORDER_ONLY_VALUE, ORDER_ONLY_INDEX };

namespace internal_ {
template <class T> void PutIndex(T *slot, uint32_t index)
{
    if constexpr (sizeof(T) == 4) {
        std::memcpy(slot, &index, 4);
    } else if constexpr (sizeof(T) == 2) {
        uint16_t i16 = (uint16_t)index;
        std::memcpy(slot, &i16, 2);
    } else {
        *slot = (T)index;
    }
}
template <class T, bool isMax>
void Extreme(const canna_sim::Loc &loc, const char *api, const LocalTensor<T> &dst, const LocalTensor<T> &src,
             const LocalTensor<T> &work, int32_t count, bool calIndex)
{
    if (count <= 0)
        canna_sim::fault(loc, "%s: count %d must be positive", api, count);
    T *d = dst.Operand(loc, api, "destination", calIndex ? 2 : 1, false);
    const T *s = src.Operand(loc, api, "source", (uint64_t)count);
    work.Live(loc, api);
    uint32_t best = 0;
    for (int32_t i = 1; i < count; i++)
        if (isMax ? (C<T>)s[i] > (C<T>)s[best] : (C<T>)s[i] < (C<T>)s[best])
            best = (uint32_t)i;
    d[0] = s[best];
    if (calIndex)
        PutIndex(d + 1, best);
}
}  // namespace internal_

template <class T>
void ReduceSum(const LocalTensor<T> &dst, const LocalTensor<T> &src, const LocalTensor<T> &work, const int32_t count,
               CANNA_LOC_)
{
    if (count < 0)
        canna_sim::fault(loc, "ReduceSum: count %d is negative", count);
    T *d = dst.Operand(loc, "ReduceSum", "destination", 1, false);
    const T *s = src.Operand(loc, "ReduceSum", "source", (uint64_t)count);
    work.Live(loc, "ReduceSum");
    double acc = 0;
    for (int32_t i = 0; i < count; i++)
        acc += (double)(internal_::C<T>)s[i];
    d[0] = (T)acc;
}
template <class T>
void ReduceMax(const LocalTensor<T> &dst, const LocalTensor<T> &src, const LocalTensor<T> &work, const int32_t count,
               bool calIndex = false, CANNA_LOC_)
{
    internal_::Extreme<T, true>(loc, "ReduceMax", dst, src, work, count, calIndex);
}
template <class T>
void ReduceMin(const LocalTensor<T> &dst, const LocalTensor<T> &src, const LocalTensor<T> &work, const int32_t count,
               bool calIndex = false, CANNA_LOC_)
{
    internal_::Extreme<T, false>(loc, "ReduceMin", dst, src, work, count, calIndex);
}

namespace internal_ {
/* the mask/repeat ("high-dimensional") form of ReduceSum / ReduceMax / ReduceMin: one result over the
 * masked elements of every repeat; the index is the element offset in src */
template <class T, int kind /* 0 sum, 1 max, 2 min */>
void ReduceRep(const canna_sim::Loc &loc, const char *api, const LocalTensor<T> &dst, const LocalTensor<T> &src,
               const LocalTensor<T> &work, const Mask &m, int32_t repeat, int32_t srcRepStride, bool calIndex)
{
    repeat = (int32_t)m.Repeats((uint32_t)repeat);
    if (repeat < 0 || repeat > 255)
        canna_sim::fault(loc, "%s: repeatTimes %d is outside [0, 255]", api, repeat);
    T *d = dst.Operand(loc, api, "destination", calIndex ? 2 : 1, false);
    const T *s = src.Operand(loc, api, "source", RepEnd<T>((uint32_t)repeat, m, 1, srcRepStride));
    work.Live(loc, api);
    double acc = 0;
    bool any = false;
    uint64_t best = 0;
    C<T> bv = 0;
    for (int32_t r = 0; r < repeat; r++)
        for (uint32_t k = 0; k < canna_sim::kRepeat / sizeof(T); k++) {
            if (!m.on(r, k))
                continue;
            uint64_t at = RepOffset<T>((uint32_t)r, k, 1, srcRepStride);
            C<T> v = (C<T>)s[at];
            if (kind == 0)
                acc += (double)v;
            else if (!any || (kind == 1 ? v > bv : v < bv))
                bv = v, best = at;
            any = true;
        }
    d[0] = kind == 0 ? (T)acc : (T)bv;
    if (kind != 0 && calIndex)
        PutIndex(d + 1, (uint32_t)best);
}
}  // namespace internal_

#define CANNA_REDUCE_REP_(NAME, KIND)                                                                             \
    template <class T, bool isSetMask = true>                                                                     \
    void NAME(const LocalTensor<T> &dst, const LocalTensor<T> &src, const LocalTensor<T> &work, const int32_t mask, \
              const int32_t repeatTimes, const int32_t srcRepStride, bool calIndex = false, CANNA_LOC_)           \
    {                                                                                                             \
        internal_::ReduceRep<T, KIND>(loc, #NAME, dst, src, work,                                                 \
                                      internal_::PickMask<T, isSetMask>(loc, #NAME, mask), repeatTimes,      \
                                      srcRepStride, calIndex);                                                    \
    }                                                                                                             \
    template <class T, bool isSetMask = true>                                                                     \
    void NAME(const LocalTensor<T> &dst, const LocalTensor<T> &src, const LocalTensor<T> &work,                   \
              const uint64_t mask[], const int32_t repeatTimes, const int32_t srcRepStride, bool calIndex = false, \
              CANNA_LOC_)                                                                                         \
    {                                                                                                             \
        internal_::ReduceRep<T, KIND>(loc, #NAME, dst, src, work, internal_::PickMask<T, isSetMask>(loc, #NAME, mask), repeatTimes,          \
                                      srcRepStride, calIndex);                                                    \
    }
CANNA_REDUCE_REP_(ReduceSum, 0)
CANNA_REDUCE_REP_(ReduceMax, 1)
CANNA_REDUCE_REP_(ReduceMin, 2)
#undef CANNA_REDUCE_REP_

namespace internal_ {
/* one result per repeat: sum, or (max, index within the repeat) */
template <class T, int kind /* 0 sum, 1 max, 2 min */>
void WholeReduce(const canna_sim::Loc &loc, const char *api, const LocalTensor<T> &dst, const LocalTensor<T> &src, const Mask &m,
                 int32_t repeat, int32_t dstRepStride, int32_t srcBlkStride, int32_t srcRepStride, ReduceOrder order)
{
    repeat = (int32_t)m.Repeats((uint32_t)repeat);
    if (repeat < 0 || repeat > 255)
        canna_sim::fault(loc, "%s: repeatTimes %d is outside [0, 255]", api, repeat);
    const bool pair = kind != 0 && (order == ReduceOrder::ORDER_VALUE_INDEX || order == ReduceOrder::ORDER_INDEX_VALUE);
    const uint32_t unit = pair ? 2 : 1;
    T *d = dst.Operand(loc, api, "destination", repeat ? (uint64_t)(repeat - 1) * dstRepStride * unit + unit : 0, false);
    const T *s = src.Operand(loc, api, "source", RepEnd<T>((uint32_t)repeat, m, srcBlkStride, srcRepStride));
    for (int32_t r = 0; r < repeat; r++) {
        double acc = 0;
        bool any = false;
        uint32_t best = 0;
        C<T> bv = 0;
        for (uint32_t k = 0; k < canna_sim::kRepeat / sizeof(T); k++) {
            if (!m.on(r, k))
                continue;
            C<T> v = (C<T>)s[RepOffset<T>((uint32_t)r, k, srcBlkStride, srcRepStride)];
            if (kind == 0)
                acc += (double)v;
            else if (!any || (kind == 1 ? v > bv : v < bv))
                bv = v, best = k;
            any = true;
        }
        T *o = d + (uint64_t)r * dstRepStride * unit;
        if (kind == 0) {
            o[0] = (T)acc;
        } else if (order == ReduceOrder::ORDER_VALUE_INDEX) {
            o[0] = (T)bv;
            PutIndex(o + 1, best);
        } else if (order == ReduceOrder::ORDER_INDEX_VALUE) {
            PutIndex(o, best);
            o[1] = (T)bv;
        } else if (order == ReduceOrder::ORDER_ONLY_VALUE) {
            o[0] = (T)bv;
        } else {
            PutIndex(o, best);
        }
    }
}
}  // namespace internal_

template <class T, bool isSetMask = true>
void WholeReduceSum(const LocalTensor<T> &dst, const LocalTensor<T> &src, const int32_t mask, const int32_t repeatTimes,
                    const int32_t dstRepStride, const int32_t srcBlkStride, const int32_t srcRepStride, CANNA_LOC_)
{
    internal_::WholeReduce<T, 0>(loc, "WholeReduceSum", dst, src,
                                 internal_::PickMask<T, isSetMask>(loc, "WholeReduceSum", mask), repeatTimes,
                                 dstRepStride, srcBlkStride, srcRepStride, ReduceOrder::ORDER_ONLY_VALUE);
}
template <class T, bool isSetMask = true>
void WholeReduceSum(const LocalTensor<T> &dst, const LocalTensor<T> &src, const uint64_t mask[],
                    const int32_t repeatTimes, const int32_t dstRepStride, const int32_t srcBlkStride,
                    const int32_t srcRepStride, CANNA_LOC_)
{
    internal_::WholeReduce<T, 0>(loc, "WholeReduceSum", dst, src, internal_::PickMask<T, isSetMask>(loc, "WholeReduceSum", mask), repeatTimes, dstRepStride,
                                 srcBlkStride, srcRepStride, ReduceOrder::ORDER_ONLY_VALUE);
}
#define CANNA_WHOLE_EXTREME_(NAME, KIND)                                                                          \
    template <class T, bool isSetMask = true>                                                                     \
    void NAME(const LocalTensor<T> &dst, const LocalTensor<T> &src, const int32_t mask, const int32_t repeatTimes, \
              const int32_t dstRepStride, const int32_t srcBlkStride, const int32_t srcRepStride,                 \
              ReduceOrder order = ReduceOrder::ORDER_VALUE_INDEX, CANNA_LOC_)                                     \
    {                                                                                                             \
        internal_::WholeReduce<T, KIND>(loc, #NAME, dst, src, internal_::PickMask<T, isSetMask>(loc, #NAME, mask), \
                                        repeatTimes, dstRepStride, srcBlkStride, srcRepStride, order);            \
    }                                                                                                             \
    template <class T, bool isSetMask = true>                                                                     \
    void NAME(const LocalTensor<T> &dst, const LocalTensor<T> &src, const uint64_t mask[],                        \
              const int32_t repeatTimes, const int32_t dstRepStride, const int32_t srcBlkStride,                  \
              const int32_t srcRepStride, ReduceOrder order = ReduceOrder::ORDER_VALUE_INDEX, CANNA_LOC_)         \
    {                                                                                                             \
        internal_::WholeReduce<T, KIND>(loc, #NAME, dst, src, internal_::PickMask<T, isSetMask>(loc, #NAME, mask), repeatTimes, dstRepStride, \
                                        srcBlkStride, srcRepStride, order);                                       \
    }
CANNA_WHOLE_EXTREME_(WholeReduceMax, 1)
CANNA_WHOLE_EXTREME_(WholeReduceMin, 2)
#undef CANNA_WHOLE_EXTREME_

/* one result per 32-byte block of each repeat (8 a repeat, dstRepStride in units of those 8 results) */
namespace internal_ {
template <class T, int kind /* 0 sum, 1 max, 2 min */>
void BlockReduce(const canna_sim::Loc &loc, const char *api, const LocalTensor<T> &dst, const LocalTensor<T> &src,
                 int32_t repeat, const Mask &m, int32_t dstRepStride, int32_t srcBlkStride, int32_t srcRepStride)
{
    repeat = (int32_t)m.Repeats((uint32_t)repeat);
    if (repeat < 0 || repeat > 255)
        canna_sim::fault(loc, "%s: repeatTimes %d is outside [0, 255]", api, repeat);
    constexpr uint32_t epb = canna_sim::kBlock / sizeof(T);
    T *d = dst.Operand(loc, api, "destination", repeat ? (uint64_t)(repeat - 1) * dstRepStride * 8 + 8 : 0, false);
    const T *s = src.Operand(loc, api, "source", RepEnd<T>((uint32_t)repeat, m, srcBlkStride, srcRepStride));
    for (int32_t r = 0; r < repeat; r++)
        for (uint32_t b = 0; b < 8; b++) {
            double acc = 0;
            C<T> bv = 0;
            bool any = false;
            for (uint32_t e = 0; e < epb; e++) {
                uint32_t k = b * epb + e;
                if (!m.on((uint32_t)r, k))
                    continue;
                C<T> v = (C<T>)s[RepOffset<T>((uint32_t)r, k, srcBlkStride, srcRepStride)];
                acc += (double)v;
                if (!any || (kind == 1 ? v > bv : v < bv))
                    bv = v;
                any = true;
            }
            if (any)   /* blocks without an active element are left as they are */
                d[(uint64_t)r * dstRepStride * 8 + b] = kind == 0 ? (T)acc : (T)bv;
        }
}
}  // namespace internal_

#define CANNA_BLOCK_REDUCE_(NAME, KIND)                                                                           \
    template <class T, bool isSetMask = true>                                                                     \
    void NAME(const LocalTensor<T> &dst, const LocalTensor<T> &src, const int32_t repeatTimes, const int32_t mask, \
              const int32_t dstRepStride, const int32_t srcBlkStride, const int32_t srcRepStride, CANNA_LOC_)     \
    {                                                                                                             \
        internal_::BlockReduce<T, KIND>(loc, #NAME, dst, src, repeatTimes,                                        \
                                        internal_::PickMask<T, isSetMask>(loc, #NAME, mask), dstRepStride,        \
                                        srcBlkStride, srcRepStride);                                              \
    }                                                                                                             \
    template <class T, bool isSetMask = true>                                                                     \
    void NAME(const LocalTensor<T> &dst, const LocalTensor<T> &src, const int32_t repeatTimes,                    \
              const uint64_t mask[], const int32_t dstRepStride, const int32_t srcBlkStride,                      \
              const int32_t srcRepStride, CANNA_LOC_)                                                             \
    {                                                                                                             \
        internal_::BlockReduce<T, KIND>(loc, #NAME, dst, src, repeatTimes,                                        \
                                        internal_::PickMask<T, isSetMask>(loc, #NAME, mask), dstRepStride,        \
                                        srcBlkStride, srcRepStride);                                              \
    }
CANNA_BLOCK_REDUCE_(BlockReduceSum, 0)
CANNA_BLOCK_REDUCE_(BlockReduceMax, 1)
CANNA_BLOCK_REDUCE_(BlockReduceMin, 2)
#undef CANNA_BLOCK_REDUCE_

/* the sum of the first elemsInOneRepeat elements of each repeat (dstRepStride in elements) */
template <class T, bool isSetMask = true>
void RepeatReduceSum(const LocalTensor<T> &dst, const LocalTensor<T> &src, const int32_t repeat,
                     const int32_t elemsInOneRepeat, const int32_t dstBlkStride, const int32_t srcBlkStride,
                     const int32_t dstRepStride, const int32_t srcRepStride, CANNA_LOC_)
{
    (void)dstBlkStride;
    internal_::WholeReduce<T, 0>(loc, "RepeatReduceSum", dst, src,
                                 internal_::PickMask<T, isSetMask>(loc, "RepeatReduceSum", elemsInOneRepeat), repeat,
                                 dstRepStride, srcBlkStride, srcRepStride, ReduceOrder::ORDER_ONLY_VALUE);
}

/* each of 8 source elements a repeat fills one 32-byte block of the destination */
struct BrcbRepeatParams {
    uint16_t dstBlkStride = 1;
    uint16_t dstRepStride = 8;
    BrcbRepeatParams() = default;
    BrcbRepeatParams(uint16_t blk, uint16_t rep) : dstBlkStride(blk), dstRepStride(rep) {}
};
template <class T>
void Brcb(const LocalTensor<T> &dst, const LocalTensor<T> &src, const uint8_t repeatTimes, const BrcbRepeatParams &p,
          CANNA_LOC_)
{
    constexpr uint32_t epb = canna_sim::kBlock / sizeof(T);
    const uint64_t end = repeatTimes ? ((uint64_t)(repeatTimes - 1) * p.dstRepStride + 7 * p.dstBlkStride + 1) * epb : 0;
    T *d = dst.Operand(loc, "Brcb", "destination", end);
    const T *s = src.Operand(loc, "Brcb", "source", (uint64_t)repeatTimes * 8);
    for (uint32_t r = 0; r < repeatTimes; r++)
        for (uint32_t b = 0; b < 8; b++) {
            T *blk = d + ((uint64_t)r * p.dstRepStride + (uint64_t)b * p.dstBlkStride) * epb;
            for (uint32_t e = 0; e < epb; e++)
                blk[e] = s[r * 8 + b];
        }
}

/* ------------------------------------------------------------------ Compare / Select */
enum class CMPMODE : uint8_t { LT = 0, GT, EQ, LE, GE, NE };
enum class SELMODE : uint8_t { VSEL_CMPMASK_SPR = 0, VSEL_TENSOR_SCALAR_MODE, VSEL_TENSOR_TENSOR_MODE };

namespace internal_ {
template <class T> inline bool Cmp(T a_, T b_, CMPMODE mode)
{
    C<T> a = (C<T>)a_, b = (C<T>)b_;
    switch (mode) {
    case CMPMODE::LT: return a < b;
    case CMPMODE::GT: return a > b;
    case CMPMODE::EQ: return a == b;
    case CMPMODE::LE: return a <= b;
    case CMPMODE::GE: return a >= b;
    default: return a != b;
    }
}
/* the result: one bit per element, element i in bit i % 8 of byte i / 8 */
template <class U, class T, class G>
void CompareBits(const canna_sim::Loc &loc, const char *api, const LocalTensor<U> &dst, const LocalTensor<T> &src0,
                 uint32_t count, G get1, CMPMODE mode)
{
    uint8_t *d = reinterpret_cast<uint8_t *>(dst.Operand(loc, api, "destination", 0));
    if ((uint64_t)dst.GetSize() * sizeof(U) * 8 < count)
        canna_sim::fault(loc, "%s: %u result bits do not fit in the destination of %u bytes", api, count,
                         (unsigned)(dst.GetSize() * sizeof(U)));
    const T *a = src0.Operand(loc, api, "source 0", count);
    std::memset(d, 0, (count + 7) / 8);
    for (uint32_t i = 0; i < count; i++)
        if (Cmp(a[i], get1(i), mode))
            d[i / 8] |= (uint8_t)(1u << (i % 8));
}
}  // namespace internal_

template <class T, class U>
void Compare(const LocalTensor<U> &dst, const LocalTensor<T> &src0, const LocalTensor<T> &src1, CMPMODE cmpMode,
             uint32_t count, CANNA_LOC_)
{
    const T *b = src1.Operand(loc, "Compare", "source 1", count);
    internal_::CompareBits(loc, "Compare", dst, src0, count, [b](uint32_t i) { return b[i]; }, cmpMode);
}
template <class T, class U, class S>
void CompareScalar(const LocalTensor<U> &dst, const LocalTensor<T> &src0, const S src1Scalar, CMPMODE cmpMode,
                   uint32_t count, CANNA_LOC_)
{
    const T s = (T)src1Scalar;
    internal_::CompareBits(loc, "CompareScalar", dst, src0, count, [s](uint32_t) { return s; }, cmpMode);
}

namespace internal_ {
template <class T, class U, class G>
void SelectBits(const canna_sim::Loc &loc, const LocalTensor<T> &dst, const LocalTensor<U> &sel, const LocalTensor<T> &src0,
                uint32_t count, G get1)
{
    T *d = dst.Operand(loc, "Select", "destination", count);
    const T *a = src0.Operand(loc, "Select", "source 0", count);
    const uint8_t *m = reinterpret_cast<const uint8_t *>(sel.Operand(loc, "Select", "selMask", 0));
    if ((uint64_t)sel.GetSize() * sizeof(U) * 8 < count)
        canna_sim::fault(loc, "Select: %u mask bits exceed the selMask of %u bytes", count,
                         (unsigned)(sel.GetSize() * sizeof(U)));
    for (uint32_t i = 0; i < count; i++)
        d[i] = ((m[i / 8] >> (i % 8)) & 1) ? a[i] : get1(i);
}
}  // namespace internal_

/* dst[i] = bit i of selMask ? src0[i] : src1[i] (or the scalar) */
template <class T, class U>
void Select(const LocalTensor<T> &dst, const LocalTensor<U> &selMask, const LocalTensor<T> &src0,
            const LocalTensor<T> &src1, SELMODE selMode, uint32_t count, CANNA_LOC_)
{
    (void)selMode;
    const T *b = src1.Operand(loc, "Select", "source 1", count);
    internal_::SelectBits(loc, dst, selMask, src0, count, [b](uint32_t i) { return b[i]; });
}
template <class T, class U, class S, typename = std::enable_if_t<!std::is_class_v<S> || std::is_same_v<S, T>>>
void Select(const LocalTensor<T> &dst, const LocalTensor<U> &selMask, const LocalTensor<T> &src0, S src1Scalar,
            SELMODE selMode, uint32_t count, CANNA_LOC_)
{
    (void)selMode;
    const T s = (T)src1Scalar;
    internal_::SelectBits(loc, dst, selMask, src0, count, [s](uint32_t) { return s; });
}

/* ------------------------------------------------------------------ GatherMask */
/* dst gets, packed from its start, the src0 elements whose gather-mask bit is 1; rsvdCnt the count.
 * The mask is a built-in pattern (1: even elements, 2: odd, 3..6: element 0..3 of every four, 7:
 * all) or a user pattern tensor (bit k of it for element k; uint16_t for 2-byte, uint32_t for 4-byte
 * types). reduceMode false: repeatTimes repeats of 256 bytes (mask unused); true: `mask` elements
 * (counter mode). Public Ascend C API reference, GatherMask. A user pattern over more than one
 * repeat is not supported by the simulator yet (a fault, not a guess). */
enum class GatherMaskMode : uint8_t { VERSION_V1 = 0, VERSION_V2 };
constexpr GatherMaskMode defaultGatherMaskMode = GatherMaskMode::VERSION_V1;
struct GatherMaskParams {
    GatherMaskParams() = default;
    GatherMaskParams(uint8_t src0BlockStride, uint16_t repeatTimes, uint16_t src0RepeatStride, uint8_t src1RepeatStride)
        : src0BlockStride(src0BlockStride), repeatTimes(repeatTimes), src0RepeatStride(src0RepeatStride),
          src1RepeatStride(src1RepeatStride) {}
    uint8_t src0BlockStride = 1;
    uint16_t repeatTimes = 0;
    uint16_t src0RepeatStride = 0;
    uint8_t src1RepeatStride = 0;
};
namespace internal_ {
template <class T, class Bit>
void GatherMaskImpl(const canna_sim::Loc &loc, const LocalTensor<T> &dst, const LocalTensor<T> &src0, bool reduceMode,
                    uint32_t mask, const GatherMaskParams &p, uint64_t &rsvdCnt, bool userPattern, Bit bit)
{
    constexpr uint32_t per = canna_sim::kRepeat / sizeof(T);
    uint64_t total = reduceMode ? mask : (uint64_t)p.repeatTimes * per;
    if (reduceMode && mask == 0)
        canna_sim::fault(loc, "GatherMask: mask (the element count in counter mode) is 0");
    uint32_t repeats = (uint32_t)((total + per - 1) / per);
    if (userPattern && repeats > 1)
        canna_sim::fault(loc, "GatherMask: a user pattern over %u repeats is not supported by the simulator yet (one "
                         "repeat of %u elements is)", repeats, per);
    Mask m{~0ull, ~0ull};
    m.counter = true;
    m.count = total;
    m.per = per;
    const T *a = src0.Operand(loc, "GatherMask", "src0", repeats ? RepEnd<T>(repeats, m, p.src0BlockStride,
                                                                           p.src0RepeatStride) : 0);
    T *d = dst.Operand(loc, "GatherMask", "destination", 0);
    uint64_t n = 0;
    for (uint32_t r = 0; r < repeats; r++)
        for (uint32_t k = 0; k < per && (uint64_t)r * per + k < total; k++)
            if (bit(k)) {
                if (n >= dst.GetSize())
                    canna_sim::fault(loc, "GatherMask: the gathered elements exceed the %s LocalTensor destination of "
                                     "%u elements", canna_sim::type_name<T>::value, dst.GetSize());
                d[n++] = a[RepOffset<T>(r, k, p.src0BlockStride, p.src0RepeatStride)];
            }
    rsvdCnt = n;
}
}  // namespace internal_
template <class T, class U, GatherMaskMode mode = defaultGatherMaskMode>
void GatherMask(const LocalTensor<T> &dst, const LocalTensor<T> &src0, const LocalTensor<U> &src1Pattern,
                const bool reduceMode, const uint32_t mask, const GatherMaskParams &gatherMaskParams,
                uint64_t &rsvdCnt, CANNA_LOC_)
{
    static_assert(std::is_unsigned_v<U> && sizeof(U) == sizeof(T) && (sizeof(T) == 2 || sizeof(T) == 4),
                  "GatherMask: the pattern is uint16_t for 2-byte types and uint32_t for 4-byte types");
    constexpr uint32_t per = canna_sim::kRepeat / sizeof(T);
    const U *pat = src1Pattern.Operand(loc, "GatherMask", "src1Pattern", per / (8 * sizeof(U)) <
                                       src1Pattern.GetSize() ? per / (8 * sizeof(U)) : src1Pattern.GetSize());
    const uint32_t bits = src1Pattern.GetSize() * 8 * (uint32_t)sizeof(U);
    internal_::GatherMaskImpl(loc, dst, src0, reduceMode, mask, gatherMaskParams, rsvdCnt, true, [&](uint32_t k) {
        if (k >= bits)
            canna_sim::fault(loc, "GatherMask: element %u needs bit %u of the src1Pattern of %u bits", k, k, bits);
        return (pat[k / (8 * sizeof(U))] >> (k % (8 * sizeof(U)))) & 1;
    });
}
template <class T, GatherMaskMode mode = defaultGatherMaskMode>
void GatherMask(const LocalTensor<T> &dst, const LocalTensor<T> &src0, const uint8_t src1Pattern, const bool reduceMode,
                const uint32_t mask, const GatherMaskParams &gatherMaskParams, uint64_t &rsvdCnt, CANNA_LOC_)
{
    if (src1Pattern < 1 || src1Pattern > 7)
        canna_sim::fault(loc, "GatherMask: the built-in pattern is 1..7, not %u", src1Pattern);
    const uint8_t pt = src1Pattern;
    internal_::GatherMaskImpl(loc, dst, src0, reduceMode, mask, gatherMaskParams, rsvdCnt, false, [pt](uint32_t k) {
        return pt == 7 || (pt <= 2 ? k % 2 == (uint32_t)(pt - 1) : k % 4 == (uint32_t)(pt - 3));
    });
}

/* ------------------------------------------------------------------ Pad / UnPad (advanced API) */
/* Pad: a height x width tensor (row-major in the UB) padded in the width direction to 32 bytes
 * (Ascend C API reference, "Pad"): width not 32-byte aligned -> rows of leftPad + width + rightPad
 * elements, the new ones padValue (that width must be 32-byte aligned); width aligned with
 * redundant columns (srcOriWidth < srcWidth) -> the same shape, columns srcOriWidth.. set to
 * padValue. UnPad: each row loses leftPad elements on its left and rightPad on its right
 * ("UnPad"). The shape comes from the tiling the host's PadTilingFunc / UnPadTilingFunc fill:
 * PadTiling's first fields are srcHeight, srcWidth, srcOriWidth, UnPadTiling's srcHeight, srcWidth
 * (the layout of CANN's pad_tilingdata.h; the simulator reads only those). The temporary buffer of
 * the device's algorithm is not needed here. */
}  // namespace AscendC
struct PadTiling {
    uint32_t srcHeight, srcWidth, srcOriWidth;
    uint32_t widthWithoutLastBlock, blocksPerRow, heightTiling, heightFractal, heightFractalTail, mainLoopOffset,
        tailBlockOffset;
    uint32_t tmpBuffer1BlockNum, tmpBuffer1RowNum, tmpBuffer2Offset, widthTiling, widthFractal, widthFractalTail,
        widthFractalTailAlingned, brcbTiling, brcbFractal, brcbFractalTail, maxRepeatTimes, brcbTilingRepeatTimes,
        brcbTilingRepeatTimesTail, brcbFractalTailRepeatTimes, brcbFractalTailRepeatTimesTail, reserved;
};
struct UnPadTiling {
    uint32_t srcHeight, srcWidth;
    uint32_t tmpBuffer1BlockNum, tmpBuffer1RowNum, tmpBuffer2Offset, widthTiling, widthFractal, widthFractalTail;
};
namespace AscendC {
namespace tiling {
using ::PadTiling;
using ::UnPadTiling;
}  // namespace tiling
struct PadParams {
    uint16_t leftPad = 0;
    uint16_t rightPad = 0;
    int32_t padValue = 0;
};
struct UnPadParams {
    uint16_t leftPad = 0;
    uint16_t rightPad = 0;
};
namespace internal_ {
template <class T>
void PadImpl(const canna_sim::Loc &loc, const LocalTensor<T> &dst, const LocalTensor<T> &src, const PadParams &p,
             const PadTiling &t)
{
    const uint64_t h = t.srcHeight, w = t.srcWidth, ori = t.srcOriWidth;
    if (h == 0 || w == 0 || ori == 0 || ori > w)
        canna_sim::fault(loc, "Pad: the tiling's shape %llu x %llu (%llu valid columns) is not a tensor to pad (fill "
                         "it with PadTilingFunc)", (unsigned long long)h, (unsigned long long)w,
                         (unsigned long long)ori);
    const T v = (T)p.padValue;
    if ((w * sizeof(T)) % 32 == 0) {
        if (ori == w)
            canna_sim::fault(loc, "Pad: the width %llu is 32-byte aligned and every column is valid data: there is "
                             "nothing to pad", (unsigned long long)w);
        if (p.leftPad)
            canna_sim::fault(loc, "Pad: leftPad %u on an aligned width (%llu): only the redundant columns on the right "
                             "are filled", (unsigned)p.leftPad, (unsigned long long)w);
        T *d = dst.Operand(loc, "Pad", "destination", h * w);
        const T *a = src.Operand(loc, "Pad", "source", h * w);
        for (uint64_t r = 0; r < h; r++)
            for (uint64_t c = 0; c < w; c++)
                d[r * w + c] = c < ori ? a[r * w + c] : v;
        return;
    }
    const uint64_t w2 = w + p.leftPad + p.rightPad;
    if ((w2 * sizeof(T)) % 32)
        canna_sim::fault(loc, "Pad: leftPad %u + width %llu + rightPad %u = %llu elements of %zu bytes, not a multiple "
                         "of 32 bytes", (unsigned)p.leftPad, (unsigned long long)w, (unsigned)p.rightPad,
                         (unsigned long long)w2, sizeof(T));
    const T *a = src.Operand(loc, "Pad", "source", h * w);
    T *d = dst.Operand(loc, "Pad", "destination", h * w2);
    std::vector<T> copy(a, a + h * w);   /* dst may be src */
    for (uint64_t r = 0; r < h; r++)
        for (uint64_t c = 0; c < w2; c++)
            d[r * w2 + c] = (c >= p.leftPad && c < p.leftPad + w && c < p.leftPad + ori) ? copy[r * w + c - p.leftPad]
                                                                                         : v;
}
template <class T>
void UnPadImpl(const canna_sim::Loc &loc, const LocalTensor<T> &dst, const LocalTensor<T> &src, const UnPadParams &p,
               const UnPadTiling &t)
{
    const uint64_t h = t.srcHeight, w = t.srcWidth;
    if (h == 0 || w == 0)
        canna_sim::fault(loc, "UnPad: the tiling's shape %llu x %llu is empty (fill it with UnPadTilingFunc)",
                         (unsigned long long)h, (unsigned long long)w);
    if ((uint64_t)p.leftPad + p.rightPad >= w)
        canna_sim::fault(loc, "UnPad: leftPad %u + rightPad %u leave nothing of rows of %llu elements",
                         (unsigned)p.leftPad, (unsigned)p.rightPad, (unsigned long long)w);
    const uint64_t w2 = w - p.leftPad - p.rightPad;
    const T *a = src.Operand(loc, "UnPad", "source", h * w);
    T *d = dst.Operand(loc, "UnPad", "destination", h * w2);
    std::vector<T> copy(a, a + h * w);
    for (uint64_t r = 0; r < h; r++)
        for (uint64_t c = 0; c < w2; c++)
            d[r * w2 + c] = copy[r * w + p.leftPad + c];
}
}  // namespace internal_
template <class T>
void Pad(const LocalTensor<T> &dst, const LocalTensor<T> &src, const PadParams &padParams, const PadTiling &tiling,
         CANNA_LOC_)
{
    internal_::PadImpl(loc, dst, src, padParams, tiling);
}
template <class T>
void Pad(const LocalTensor<T> &dst, const LocalTensor<T> &src, const PadParams &padParams,
         const LocalTensor<uint8_t> &sharedTmpBuffer, const PadTiling &tiling, CANNA_LOC_)
{
    sharedTmpBuffer.Live(loc, "Pad");
    internal_::PadImpl(loc, dst, src, padParams, tiling);
}
template <class T>
void UnPad(const LocalTensor<T> &dst, const LocalTensor<T> &src, const UnPadParams &unPadParams,
           const UnPadTiling &tiling, CANNA_LOC_)
{
    internal_::UnPadImpl(loc, dst, src, unPadParams, tiling);
}
template <class T>
void UnPad(const LocalTensor<T> &dst, const LocalTensor<T> &src, const UnPadParams &unPadParams,
           const LocalTensor<uint8_t> &sharedTmpBuffer, const UnPadTiling &tiling, CANNA_LOC_)
{
    sharedTmpBuffer.Live(loc, "UnPad");
    internal_::UnPadImpl(loc, dst, src, unPadParams, tiling);
}

/* ------------------------------------------------------------------ Broadcast (advanced API) */
/* dst (dstShape, row-major, no row padding) = src (srcShape) repeated along `axis`, where srcShape has
 * 1 (NumPy broadcasting; dim 1 or 2, as in the public Ascend C API reference). The temporary
 * buffer of the device's algorithm is not needed here. BroadCast is its older name. */
namespace internal_ {
template <class T, int32_t dim, int32_t axis>
void BroadcastImpl(const canna_sim::Loc &loc, const char *api, const LocalTensor<T> &dst, const LocalTensor<T> &src,
                   const uint32_t *dstShape, const uint32_t *srcShape)
{
    static_assert(dim == 1 || dim == 2, "Broadcast: dim is 1 or 2");
    static_assert(axis >= 0 && axis < dim, "Broadcast: axis is 0 .. dim - 1");
    uint64_t rows = dim == 2 ? dstShape[0] : 1, cols = dstShape[dim - 1];
    for (int32_t i = 0; i < dim; i++)
        if (srcShape[i] != dstShape[i] && !(i == axis && srcShape[i] == 1))
            canna_sim::fault(loc, "%s: source shape dimension %d is %u, not the destination's %u (only the "
                             "broadcast axis %d may differ, and there the source has 1)", api, i, srcShape[i],
                             dstShape[i], (int)axis);
    uint64_t srcCount = dim == 2 ? (uint64_t)srcShape[0] * srcShape[1] : srcShape[0];
    T *d = dst.Operand(loc, api, "destination", rows * cols);
    const T *a = src.Operand(loc, api, "source", srcCount);
    const bool rowsFromSrc = dim == 2 && srcShape[0] != 1, colsFromSrc = srcShape[dim - 1] != 1;
    const uint64_t srcCols = srcShape[dim - 1];
    for (uint64_t r = 0; r < rows; r++)
        for (uint64_t c = 0; c < cols; c++)
            d[r * cols + c] = a[(rowsFromSrc ? r : 0) * srcCols + (colsFromSrc ? c : 0)];
}
}  // namespace internal_
template <class T, int32_t dim, int32_t axis, bool isReuseSource = false>
void Broadcast(const LocalTensor<T> &dst, const LocalTensor<T> &src, const uint32_t dstShape[dim],
               const uint32_t srcShape[dim], CANNA_LOC_)
{
    internal_::BroadcastImpl<T, dim, axis>(loc, "Broadcast", dst, src, dstShape, srcShape);
}
template <class T, int32_t dim, int32_t axis, bool isReuseSource = false>
void Broadcast(const LocalTensor<T> &dst, const LocalTensor<T> &src, const uint32_t dstShape[dim],
               const uint32_t srcShape[dim], const LocalTensor<uint8_t> &sharedTmpBuffer, CANNA_LOC_)
{
    sharedTmpBuffer.Live(loc, "Broadcast");
    internal_::BroadcastImpl<T, dim, axis>(loc, "Broadcast", dst, src, dstShape, srcShape);
}
template <class T, int32_t dim, int32_t axis, bool isReuseSource = false>
void BroadCast(const LocalTensor<T> &dst, const LocalTensor<T> &src, const uint32_t dstShape[dim],
               const uint32_t srcShape[dim], CANNA_LOC_)
{
    internal_::BroadcastImpl<T, dim, axis>(loc, "BroadCast", dst, src, dstShape, srcShape);
}
template <class T, int32_t dim, int32_t axis, bool isReuseSource = false>
void BroadCast(const LocalTensor<T> &dst, const LocalTensor<T> &src, const uint32_t dstShape[dim],
               const uint32_t srcShape[dim], const LocalTensor<uint8_t> &sharedTmpBuffer, CANNA_LOC_)
{
    sharedTmpBuffer.Live(loc, "BroadCast");
    internal_::BroadcastImpl<T, dim, axis>(loc, "BroadCast", dst, src, dstShape, srcShape);
}

/* ------------------------------------------------------------------ debugging */
template <class... A> inline void printf(const char *fmt, A... args)
{
    char buf[2048];
    if constexpr (sizeof...(A) == 0) {
        std::snprintf(buf, sizeof buf, "%s", fmt);
    } else {
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-security"
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
        std::snprintf(buf, sizeof buf, fmt, args...);
#pragma GCC diagnostic pop
    }
    canna_sim::emit(buf);
}
template <class... A> inline void PRINTF(const char *fmt, A... args) { AscendC::printf(fmt, args...); }

namespace internal_ {
template <class T> void Dump(const char *where, const T *p, uint32_t desc, uint32_t n, uint32_t size)
{
    char buf[8192];
    size_t k = (size_t)std::snprintf(buf, sizeof buf, "DumpTensor desc=%u (%s, %s, %u of %u elements): [", desc,
                                     canna_sim::type_name<T>::value, where, n, size);
    for (uint32_t i = 0; i < n && k + 40 < sizeof buf; i++) {
        if constexpr (std::is_floating_point_v<T> || std::is_same_v<T, _Float16> || std::is_same_v<T, bfloat16_t>)
            k += (size_t)std::snprintf(buf + k, sizeof buf - k, i ? ", %g" : "%g", (double)(float)p[i]);
        else
            k += (size_t)std::snprintf(buf + k, sizeof buf - k, i ? ", %lld" : "%lld", (long long)p[i]);
    }
    std::snprintf(buf + k, sizeof buf - k, "]\n");
    canna_sim::emit(buf);
}
inline const char *PosName(TPosition p)
{
    switch (p) {
    case TPosition::VECIN: return "VECIN";
    case TPosition::VECOUT: return "VECOUT";
    case TPosition::VECCALC: return "VECCALC";
    default: return "UB";
    }
}
}  // namespace internal_

template <class T> void DumpTensor(const LocalTensor<T> &t, uint32_t desc, uint32_t dumpSize, CANNA_LOC_)
{
    t.Live(loc, "DumpTensor");
    uint32_t n = dumpSize < t.GetSize() ? dumpSize : t.GetSize();
    internal_::Dump(internal_::PosName(t.pos_), t.ptr_, desc, n, t.GetSize());
}
template <class T> void DumpTensor(const GlobalTensor<T> &t, uint32_t desc, uint32_t dumpSize, CANNA_LOC_)
{
    canna_sim::gm_check(loc, "DumpTensor", t.ptr_, (uint64_t)dumpSize * sizeof(T));
    internal_::Dump("GM", t.ptr_, desc, dumpSize, (uint32_t)t.GetSize());
}

/* the shape DumpTensor prints a tensor with (up to 8 dimensions) */
struct ShapeInfo {
    ShapeInfo() = default;
    ShapeInfo(uint8_t dim, const uint32_t *shape) : shapeDim(dim > 8 ? 8 : dim)
    {
        for (uint8_t i = 0; i < shapeDim; i++)
            this->shape[i] = shape[i];
    }
    uint8_t shapeDim = 0;
    uint32_t shape[8] = {};
};
namespace internal_ {
inline const char *ShapeText(char *buf, size_t n, const ShapeInfo &s)
{
    size_t k = (size_t)std::snprintf(buf, n, "shape (");
    for (uint8_t i = 0; i < s.shapeDim && k + 16 < n; i++)
        k += (size_t)std::snprintf(buf + k, n - k, i ? ", %u" : "%u", s.shape[i]);
    std::snprintf(buf + k, n - k, ")");
    return buf;
}
}  // namespace internal_
template <class T> void DumpTensor(const LocalTensor<T> &t, uint32_t desc, uint32_t dumpSize, const ShapeInfo &shape,
                                   CANNA_LOC_)
{
    t.Live(loc, "DumpTensor");
    char where[160], sh[128];
    std::snprintf(where, sizeof where, "%s, %s", internal_::PosName(t.pos_), internal_::ShapeText(sh, sizeof sh, shape));
    internal_::Dump(where, t.ptr_, desc, dumpSize < t.GetSize() ? dumpSize : t.GetSize(), t.GetSize());
}
template <class T> void DumpTensor(const GlobalTensor<T> &t, uint32_t desc, uint32_t dumpSize, const ShapeInfo &shape,
                                   CANNA_LOC_)
{
    canna_sim::gm_check(loc, "DumpTensor", t.ptr_, (uint64_t)dumpSize * sizeof(T));
    char where[160], sh[128];
    std::snprintf(where, sizeof where, "GM, %s", internal_::ShapeText(sh, sizeof sh, shape));
    internal_::Dump(where, t.ptr_, desc, dumpSize, (uint32_t)t.GetSize());
}
/* DumpTensor of the dumpSize elements from element countOff on */
template <class T> void DumpAccChkPoint(const LocalTensor<T> &t, uint32_t index, uint32_t countOff, uint32_t dumpSize,
                                        CANNA_LOC_)
{
    t.Live(loc, "DumpAccChkPoint");
    if (countOff > t.GetSize())
        canna_sim::fault(loc, "DumpAccChkPoint: offset %u is past the LocalTensor of %u elements", countOff, t.GetSize());
    uint32_t left = t.GetSize() - countOff;
    internal_::Dump(internal_::PosName(t.pos_), t.ptr_ + countOff, index, dumpSize < left ? dumpSize : left, left);
}
template <class T> void DumpAccChkPoint(const GlobalTensor<T> &t, uint32_t index, uint32_t countOff, uint32_t dumpSize,
                                        CANNA_LOC_)
{
    canna_sim::gm_check(loc, "DumpAccChkPoint", t.ptr_ + countOff, (uint64_t)dumpSize * sizeof(T));
    internal_::Dump("GM", t.ptr_ + countOff, index, dumpSize, dumpSize);
}

template <class T> void LocalTensor<T>::Print(uint32_t len) const
{
    Live(canna_sim::kNoLoc, "LocalTensor::Print");
    internal_::Dump(internal_::PosName(pos_), ptr_, 0, len < size_ ? len : size_, size_);
}

/* the tiling data of an op project's kernel, read through its tiling GM_ADDR: with the struct's type
 * named, or with CANNA_TILING_DATA_TYPE defined (register/tilingdata_base.h explains) */
namespace internal_ {
template <class T> T ReadTiling(const void *tiling, const canna_sim::Loc &loc)
{
    if (!tiling)
        canna_sim::fault(loc, "GET_TILING_DATA: the tiling argument is NULL");
    canna_sim::gm_check(loc, "GET_TILING_DATA", tiling, sizeof(T));
    T t;
    std::memcpy(static_cast<void *>(&t), tiling, sizeof(T));
    return t;
}
template <class T> constexpr bool kNeedsTilingType = false;
struct CannaNoTilingType_ {};
template <class T> constexpr bool NeedsTilingKey()
{
    static_assert(kNeedsTilingType<T>, "TILING_KEY_IS needs the tiling key the host chose: compile with "
                                       "-DCANNA_TILING_KEY=<key>");
    return false;
}
}  // namespace internal_
#ifndef GET_TILING_DATA_WITH_STRUCT
#define GET_TILING_DATA_WITH_STRUCT(type, name, tiling) \
    type name = ::AscendC::internal_::ReadTiling<type>((const void *)(tiling), ::canna_sim::Loc::here())
#endif
/* REGISTER_TILING_DEFAULT(T) in the kernel names the struct GET_TILING_DATA reads (it shadows this
 * placeholder in the kernel's scope) */
#ifndef REGISTER_TILING_DEFAULT
#define REGISTER_TILING_DEFAULT(type) using CannaTilingDefault_ = type
#endif
#ifndef REGISTER_TILING_FOR_TILINGKEY
#define REGISTER_TILING_FOR_TILINGKEY(key, type)
#endif
#ifndef GET_TILING_DATA
#ifdef CANNA_TILING_DATA_TYPE
#define GET_TILING_DATA(name, tiling) GET_TILING_DATA_WITH_STRUCT(CANNA_TILING_DATA_TYPE, name, tiling)
#else
#define GET_TILING_DATA(name, tiling)                                                                           \
    static_assert(!std::is_same_v<CannaTilingDefault_, ::AscendC::internal_::CannaNoTilingType_>,               \
                  "GET_TILING_DATA needs the tiling struct: compile with -DCANNA_TILING_DATA_TYPE=<its type> "  \
                  "and its header (see register/tilingdata_base.h), name it with REGISTER_TILING_DEFAULT(<its "  \
                  "type>) before, or use GET_TILING_DATA_WITH_STRUCT");                                         \
    GET_TILING_DATA_WITH_STRUCT(CannaTilingDefault_, name, tiling)
#endif
#endif
/* the tiling key the host's tiling function chose (TilingContext::SetTilingKey): a build option here,
 * -DCANNA_TILING_KEY=<key> (the same source built once per key, as the Ascend toolchain does) */
#ifndef TILING_KEY_IS
#ifdef CANNA_TILING_KEY
#define TILING_KEY_IS(key) ((uint64_t)(key) == (uint64_t)(CANNA_TILING_KEY))
#else
#define TILING_KEY_IS(key)                                                                                      \
    (::AscendC::internal_::NeedsTilingKey<decltype(key)>(), false)
#endif
#endif

/* the trap of Ascend C's assert: the block fails with the condition's text */
#ifndef ASSERT
#define ASSERT(cond) ((cond) ? (void)0 : ::canna_sim::fault(::canna_sim::Loc::here(), "assertion failed: %s", #cond))
#endif

#undef CANNA_LOC_
}  // namespace AscendC
using CannaTilingDefault_ = ::AscendC::internal_::CannaNoTilingType_;

#pragma GCC pop_options

#endif /* CANNA_KERNEL_OPERATOR_H */
