// canna_dl.torch: PyTorch's intra-op threads lent to the simulator inside offload() (_team.py).
//
// canna_torch_team is an aclsimHostTeamFn (acl_rt/_cdef/sim_funcs.h): the simulator calls it with
// a job of kernel blocks and a `work` function that runs the job's blocks until none is left; this
// calls `work` on PyTorch's own OpenMP team (at::parallel_for: torch.get_num_threads() threads,
// the calling thread included), so canna's kernels and PyTorch's share one set of threads instead of
// contending for the CPUs. Compiled with -fopenmp; the libgomp.so.1 it needs is the one torch
// loaded (same soname, torch's lib directory in its rpath).
#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>
#include <cstdint>

static std::atomic<uint64_t> g_spread;   // jobs spread over more than one thread

extern "C" void canna_torch_team(void *, uint32_t max_threads, void (*work)(void *), void *job)
{
    int64_t n = std::min<int64_t>((int64_t)max_threads, at::get_num_threads());
    if (n <= 1 || at::in_parallel_region()) {   // (one thread, or called from one of PyTorch's workers)
        work(job);
        return;
    }
    g_spread.fetch_add(1, std::memory_order_relaxed);
    at::parallel_for(0, n, 1, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; i++)
            work(job);
    });
}

extern "C" uint64_t canna_torch_team_spread(void) { return g_spread.load(std::memory_order_relaxed); }
