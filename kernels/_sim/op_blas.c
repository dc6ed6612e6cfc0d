/* canna simulator op library: matrix products through a maintained BLAS (OpenBLAS).
 *
 * The library is not linked against a BLAS: it looks the CBLAS symbols up at the first matrix
 * product, so building canna needs no BLAS and the BLAS can be replaced without a rebuild.
 * Where it looks, in order:
 *   1. $CANNA_SIM_BLAS: the path of a shared library exporting one of the symbol sets below
 *      (dlopen-ed by this library);
 *   2. an MKL already loaded in the process (try_mkl: libmkl_rt, or PyTorch's libtorch_cpu.so,
 *      which carries MKL): its Fortran interface, MKL's threads off per call;
 *   3. the symbols already visible in the process (RTLD_DEFAULT): acl_rt loads the OpenBLAS of the
 *      `scipy-openblas64` wheel (a dependency of canna) with RTLD_GLOBAL before this library;
 *   4. the system OpenBLAS (libopenblas.so.0) as a last resort.
 * Symbol sets: scipy-openblas64 (ILP64: scipy_cblas_sgemm64_, 64-bit integers), scipy-openblas32
 * (scipy_cblas_sgemm, 32-bit integers), plain OpenBLAS / CBLAS (cblas_sgemm, 32-bit integers).
 * OpenBLAS's own threads are turned off (openblas_set_num_threads(1)): the simulator spreads a
 * product over the device's AI-core threads itself, one single-threaded GEMM per block. */
#include "opsim.h"

#include <dlfcn.h>

typedef void (*gemm64_fn)(int order, int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
                          int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc);
typedef void (*dgemm64_fn)(int order, int ta, int tb, int64_t m, int64_t n, int64_t k, double alpha, const double *a,
                           int64_t lda, const double *b, int64_t ldb, double beta, double *c, int64_t ldc);
typedef void (*gemm32_fn)(int order, int ta, int tb, int32_t m, int32_t n, int32_t k, float alpha, const float *a,
                          int32_t lda, const float *b, int32_t ldb, float beta, float *c, int32_t ldc);
typedef void (*dgemm32_fn)(int order, int ta, int tb, int32_t m, int32_t n, int32_t k, double alpha,
                           const double *a, int32_t lda, const double *b, int32_t ldb, double beta, double *c,
                           int32_t ldc);
typedef void (*set_threads64_fn)(int64_t n);
typedef void (*set_threads32_fn)(int32_t n);
typedef char *(*get_config_fn)(void);

/* MKL's Fortran interface (column-major, arguments by address; LP64: 32-bit integers) */
typedef void (*fgemm_fn)(const char *ta, const char *tb, const int32_t *m, const int32_t *n, const int32_t *k,
                         const void *alpha, const void *a, const int32_t *lda, const void *b, const int32_t *ldb,
                         const void *beta, void *c, const int32_t *ldc);
typedef int (*mkl_local_fn)(int n);
typedef void (*mkl_version_fn)(char *buf, int len);

static struct {
    pthread_once_t once;
    bool ok, ilp64;
    void *sgemm, *dgemm;
    mkl_local_fn mkl_local;   /* MKL (Fortran interface): MKL_Set_Num_Threads_Local; else NULL */
    char name[256];
    char why[256];
} g_blas = {PTHREAD_ONCE_INIT, false, false, NULL, NULL, NULL, "", ""};

typedef struct symset {
    const char *sgemm, *dgemm, *threads, *config, *label;
    bool ilp64;
} symset_t;

static const symset_t g_sets[] = {
    {"scipy_cblas_sgemm64_", "scipy_cblas_dgemm64_", "scipy_openblas_set_num_threads64_",
     "scipy_openblas_get_config64_", "scipy-openblas64", true},
    {"scipy_cblas_sgemm", "scipy_cblas_dgemm", "scipy_openblas_set_num_threads", "scipy_openblas_get_config",
     "scipy-openblas32", false},
    {"cblas_sgemm", "cblas_dgemm", "openblas_set_num_threads", "openblas_get_config", "CBLAS", false},
};

static bool try_handle(void *h, const char *where)
{
    for (size_t i = 0; i < sizeof g_sets / sizeof g_sets[0]; i++) {
        const symset_t *s = &g_sets[i];
        void *sg = dlsym(h, s->sgemm), *dg = dlsym(h, s->dgemm);
        if (!sg || !dg)
            continue;
        g_blas.sgemm = sg;
        g_blas.dgemm = dg;
        g_blas.ilp64 = s->ilp64;
        void *th = dlsym(h, s->threads);
        if (th) {
            if (s->ilp64)
                ((set_threads64_fn)th)(1);
            else
                ((set_threads32_fn)th)(1);
        }
        const char *cfg = NULL;
        void *gc = dlsym(h, s->config);
        if (gc)
            cfg = ((get_config_fn)gc)();
        snprintf(g_blas.name, sizeof g_blas.name, "%s (%s)%s%s", s->label, where, cfg ? ": " : "", cfg ? cfg : "");
        g_blas.ok = true;
        return true;
    }
    return false;
}

/* An MKL already loaded in the process -- its own runtime (libmkl_rt), or PyTorch's CPU library,
 * which carries MKL and exports its Fortran BLAS interface and thread controls --: faster than
 * OpenBLAS on Intel CPUs at the products models run (PyTorch's own matrix products use it), and
 * nothing to download. Only when already loaded (RTLD_NOLOAD): this library never loads PyTorch. */
static bool try_mkl(void)
{
    static const char *const names[] = {"libmkl_rt.so.2", "libmkl_rt.so", "libtorch_cpu.so"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        void *h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
        if (!h)
            continue;
        void *sg = dlsym(h, "sgemm_"), *dg = dlsym(h, "dgemm_"), *loc = dlsym(h, "MKL_Set_Num_Threads_Local");
        void *ver = dlsym(h, "MKL_Get_Version_String");   /* (mkl_service.h's C names) */
        if (!sg || !dg || !loc) {
            dlclose(h);
            continue;
        }
        g_blas.sgemm = sg;
        g_blas.dgemm = dg;
        g_blas.mkl_local = (mkl_local_fn)loc;
        char v[160] = "";
        if (ver)
            ((mkl_version_fn)ver)(v, (int)sizeof v - 1);
        snprintf(g_blas.name, sizeof g_blas.name, "MKL (loaded in the process: %s)%s%s", names[i], *v ? ": " : "", v);
        g_blas.ok = true;
        return true;
    }
    return false;
}

static void blas_init(void)
{
    const char *env = getenv("CANNA_SIM_BLAS");
    if (env && *env) {
        void *h = dlopen(env, RTLD_NOW | RTLD_LOCAL);
        if (!h) {
            snprintf(g_blas.why, sizeof g_blas.why, "CANNA_SIM_BLAS=%s cannot be loaded: %s", env, dlerror());
            return;
        }
        if (try_handle(h, env))
            return;
        snprintf(g_blas.why, sizeof g_blas.why, "CANNA_SIM_BLAS=%s exports no cblas_sgemm / scipy_cblas_sgemm[64_]",
                 env);
        return;
    }
    if (try_mkl())
        return;
    if (try_handle(RTLD_DEFAULT, "loaded in the process"))
        return;
    static const char *const names[] = {"libopenblas.so.0", "libopenblas.so"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        void *h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        if (h && try_handle(h, names[i]))
            return;
    }
    snprintf(g_blas.why, sizeof g_blas.why,
             "no BLAS found: install the scipy-openblas64 wheel (a dependency of canna, loaded by acl_rt), or set "
             "CANNA_SIM_BLAS to the path of an OpenBLAS shared library");
}

aclnnStatus nn_blas_ready(const char *api)
{
    pthread_once(&g_blas.once, blas_init);
    if (g_blas.ok)
        return ACLNN_SUCCESS;
    return nn_err(ACLNN_ERR_INNER_FIND_KERNEL_ERROR, "%s: matrix products need a BLAS: %s", api, g_blas.why);
}

NN_API const char *aclnnsimGetBlasName(void) { return nn_blas_name(); }

const char *nn_blas_name(void)
{
    pthread_once(&g_blas.once, blas_init);
    return g_blas.ok ? g_blas.name : g_blas.why;
}

/* LP64 BLAS: split products whose sizes exceed 32-bit integers (rare) along m and n */
#define LIM32 ((int64_t)INT32_MAX)

/* a row-major product through MKL's column-major Fortran interface (C^T = B^T A^T), on this thread
 * only: MKL's own threads are off for the call (the simulator spreads a product over its blocks
 * itself) and the thread's setting is put back (it is PyTorch's too, on PyTorch's threads) */
static void float_gemm_mkl(void *fn, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const void *alpha,
                           const void *a, int64_t lda, const void *b, int64_t ldb, const void *beta, void *c,
                           int64_t ldc)
{
    const char tA = ta ? 'T' : 'N', tB = tb ? 'T' : 'N';
    const int32_t M = (int32_t)m, N = (int32_t)n, K = (int32_t)k, LDA = (int32_t)lda, LDB = (int32_t)ldb,
                  LDC = (int32_t)ldc;
    int prev = g_blas.mkl_local(1);
    ((fgemm_fn)fn)(&tB, &tA, &N, &M, &K, alpha, b, &LDB, a, &LDA, beta, c, &LDC);
    g_blas.mkl_local(prev);
}

void nn_sgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
              const float *b, int64_t ldb, float beta, float *c, int64_t ldc)
{
    if (m <= 0 || n <= 0)
        return;
    if (g_blas.mkl_local) {
        float_gemm_mkl(g_blas.sgemm, ta, tb, m, n, k, &alpha, a, lda, b, ldb, &beta, c, ldc);
        return;
    }
    if (g_blas.ilp64) {
        ((gemm64_fn)g_blas.sgemm)(NN_BLAS_ROW, ta ? NN_BLAS_TRANS : NN_BLAS_NOTRANS, tb ? NN_BLAS_TRANS : NN_BLAS_NOTRANS,
                                  m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
        return;
    }
    ((gemm32_fn)g_blas.sgemm)(NN_BLAS_ROW, ta ? NN_BLAS_TRANS : NN_BLAS_NOTRANS, tb ? NN_BLAS_TRANS : NN_BLAS_NOTRANS,
                              (int32_t)m, (int32_t)n, (int32_t)k, alpha, a, (int32_t)lda, b, (int32_t)ldb, beta, c,
                              (int32_t)ldc);
}

void nn_dgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const double *a, int64_t lda,
              const double *b, int64_t ldb, double beta, double *c, int64_t ldc)
{
    if (m <= 0 || n <= 0)
        return;
    if (g_blas.mkl_local) {
        float_gemm_mkl(g_blas.dgemm, ta, tb, m, n, k, &alpha, a, lda, b, ldb, &beta, c, ldc);
        return;
    }
    if (g_blas.ilp64) {
        ((dgemm64_fn)g_blas.dgemm)(NN_BLAS_ROW, ta ? NN_BLAS_TRANS : NN_BLAS_NOTRANS,
                                   tb ? NN_BLAS_TRANS : NN_BLAS_NOTRANS, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
        return;
    }
    ((dgemm32_fn)g_blas.dgemm)(NN_BLAS_ROW, ta ? NN_BLAS_TRANS : NN_BLAS_NOTRANS, tb ? NN_BLAS_TRANS : NN_BLAS_NOTRANS,
                               (int32_t)m, (int32_t)n, (int32_t)k, alpha, a, (int32_t)lda, b, (int32_t)ldb, beta, c,
                               (int32_t)ldc);
}

/* 1 when an LP64 BLAS cannot take these sizes in one call (the caller packs / splits) */
bool nn_blas_fits(int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb, int64_t ldc)
{
    if (g_blas.ilp64)
        return true;
    return m <= LIM32 && n <= LIM32 && k <= LIM32 && lda <= LIM32 && ldb <= LIM32 && ldc <= LIM32;
}
