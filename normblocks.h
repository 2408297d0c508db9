/* normblocks.h - v0.1.0 - transformer blocks that differ in where normalization sits.
   Single-header C99/C++ library, forward and backward, over BLAS GEMMs and OpenMP.

   DO THIS ONCE, in exactly one C or C++ file:
       #define NORMBLOCKS_IMPLEMENTATION
       #include "normblocks.h"
   Every other file just includes it.

   LINK WITH
       -fopenmp -lopenblas -lm         (Debian: apt-get install build-essential libopenblas-dev)
   or, with CMake:  find_package(normblocks) + target_link_libraries(app normblocks::normblocks)
   Without BLAS, define NB_NO_BLAS: a portable reference GEMM is used instead (slow, correct).
   Without -fopenmp everything runs on one thread.

   PERFORMANCE TRAPS (read before timing anything)
     - Debian's OpenBLAS 0.3.21 does not recognise recent Xeons and silently uses SSE3 kernels:
       export OPENBLAS_CORETYPE=SkylakeX (or Haswell on AVX2-only CPUs) before the program starts.
     - Debian's default OpenBLAS is the pthread build. normblocks never calls BLAS from inside an
       OpenMP region, but BLAS's own threads and our OpenMP threads take turns on the same cores:
       set OPENBLAS_NUM_THREADS to the number of cores (or 1) and OMP_WAIT_POLICY=PASSIVE, or
       install libopenblas0-openmp.

   OPTIONS (define before the #include that has NORMBLOCKS_IMPLEMENTATION)
     NB_DOUBLE           nb_real is double instead of float (the tests use this for gradient
                         checks). Define it identically in every file of the program.
     NB_NO_BLAS          use the built-in reference GEMM instead of cblas_sgemm/cblas_dgemm.
     NB_STATIC           make every function static (private to the including file).
     NB_MALLOC/NB_FREE   override the allocator (both or neither). They receive the user pointer
                         of nb_ctx.alloc_user:  NB_MALLOC(size, user), NB_FREE(ptr, user).
     NB_ASSERT(x)        override assert() (used for internal invariants only; bad input is
                         reported through return codes, never through asserts).

   CONVENTIONS
     - Matrices are row-major. A linear layer stores W as (out, in), like PyTorch nn.Linear,
       and computes y = x W^T.
     - "Rows with a stride": a kernel over `rows` rows of `width` elements reads row r at
       x + r*ldx, so it can work in place inside a wider packed buffer (ldx >= width).
     - Norms act on segments: each row of `width` is split into width/seg independent segments
       of `seg` elements that share one gain vector of length seg. seg = 0 (or width) normalizes
       the whole row. With width = H*d_k and seg = d_k this is a per-head norm.
     - Outputs come first in argument lists (llm.c), then inputs, then shapes.
     - Every function that can fail returns nb_result; NB_OK is 0. The reason is written into
       ctx->err (if ctx is not NULL) and passed to ctx->log (if set). nb_result_string() names the
       code. Invalid input never crashes and never writes outputs.
     - Backward functions ACCUMULATE parameter gradients (dgain, dbias): zero them once per step.
       Input gradients (dx) are overwritten, or accumulated when `accumulate` is non-zero.
     - Threads: ctx->num_threads (0 = omp_get_max_threads()) sets the OpenMP team of every
       kernel through a num_threads clause; normblocks never calls omp_set_num_threads. Rows are
       split statically and per-thread partial sums are reduced in thread order, so results are
       bitwise reproducible for a fixed thread count. Different thread counts agree to rounding.

   STEP BY STEP: RMSNorm forward and backward on a (rows x width) matrix
       nb_ctx ctx = {0};                       // all zero = defaults
       ctx.num_threads = 2;
       float y[R*W], rstd[R], dx[R*W], dgain[W] = {0};
       nb_rmsnorm_forward(&ctx, y, W, rstd, x, W, gain, R, W, 0, 1e-5f);
       ... loss gives dy ...
       size_t n = nb_norm_scratch_size(&ctx, W);          // floats of per-thread partial sums
       float* scratch = malloc(n * sizeof(float));
       if (nb_rmsnorm_backward(&ctx, dx, W, dgain, dy, W, x, W, rstd, gain, R, W, 0, 0,
                               scratch) != NB_OK)
           fprintf(stderr, "%s\n", ctx.err);

   PRIMITIVES
     nb_rmsnorm_forward / nb_rmsnorm_backward     y = gain * x / sqrt(mean(x^2) + eps)
     nb_layernorm_forward / nb_layernorm_backward y = gain * (x - mu) / sqrt(var + eps) + bias
     nb_softmax_forward / nb_softmax_backward     p = softmax(scale * s) over rows, causal option
     nb_gemm (BLAS or reference), nb_gemm_ref (always the reference)
     nb_add, nb_axpby                             elementwise helpers

   DOES NOT
     - allocate inside any kernel; scratch and caches are the caller's (size queries tell how much)
     - keep global state: any number of contexts, models and threads can coexist
     - call exit(), print, or change the OpenMP/BLAS thread settings of the process
     - do mixed precision: everything is nb_real (float, or double with NB_DOUBLE)

   See the end of the file for the license (MIT or public domain, your choice).
*/
#ifndef NORMBLOCKS_H
#define NORMBLOCKS_H

#define NB_VERSION_MAJOR 0
#define NB_VERSION_MINOR 1
#define NB_VERSION_PATCH 0
#define NB_VERSION_STRING "0.1.0"

#include <stddef.h>

#ifndef NBDEF
#ifdef NB_STATIC
#define NBDEF static
#else
#define NBDEF extern
#endif
#endif

#ifdef __cplusplus
extern "C" {
#endif

#ifdef NB_DOUBLE
typedef double nb_real;
#else
typedef float nb_real;
#endif

typedef enum nb_result {
    NB_OK = 0,
    NB_ERR_NULL,        /* a required pointer is NULL */
    NB_ERR_SHAPE,       /* a size, stride or divisibility constraint is violated */
    NB_ERR_VALUE,       /* a scalar argument is out of range (eps <= 0, ...) */
    NB_ERR_CONFIG,      /* an invalid configuration */
    NB_ERR_NONFINITE,   /* a NaN or Inf was detected by an enabled check */
    NB_ERR_NOMEM        /* an allocation made by a convenience allocator failed */
} nb_result;

/* Execution context. Zero-initialise it; every zero field means "default". A context is not
   shared between threads that call normblocks concurrently (err is written on failure). */
typedef struct nb_ctx {
    int num_threads;   /* OpenMP threads per kernel; 0 = omp_get_max_threads() */
    void (*log)(void* user, nb_result code, const char* message); /* optional error sink */
    void* log_user;
    void* alloc_user;  /* passed to NB_MALLOC/NB_FREE by convenience allocators */
    char err[256];     /* message of the last failure of a call made with this context */
} nb_ctx;

NBDEF const char* nb_result_string(nb_result r);
NBDEF int nb_num_threads(const nb_ctx* ctx);   /* the team size kernels will use */

/* ---- normalization ------------------------------------------------------------------------ */
/* Floats of scratch the norm backward needs for per-thread partial gain/bias sums
   (0 is never returned; pass NULL scratch only when gain is NULL). */
NBDEF size_t nb_norm_scratch_size(const nb_ctx* ctx, int seg);

/* RMSNorm. x, y: rows x width with strides ldx, ldy (y may equal x if ldy == ldx, but backward
   needs x). rstd[r*(width/seg) + s] = 1/sqrt(mean(x_seg^2) + eps). gain: seg values or NULL. */
NBDEF nb_result nb_rmsnorm_forward(nb_ctx* ctx, nb_real* y, int ldy, nb_real* rstd,
                                   const nb_real* x, int ldx, const nb_real* gain,
                                   int rows, int width, int seg, nb_real eps);
/* dx = (1/r)(g - xhat*mean(g*xhat)) with g = dy*gain, xhat = x*rstd; dgain += sum dy*xhat.
   dx is overwritten (accumulate = 0) or added to (accumulate != 0); dx may equal dy when
   accumulate = 0. dgain may be NULL to skip it; scratch: nb_norm_scratch_size(ctx, seg)
   floats, needed when dgain is not NULL. */
NBDEF nb_result nb_rmsnorm_backward(nb_ctx* ctx, nb_real* dx, int lddx, nb_real* dgain,
                                    const nb_real* dy, int lddy, const nb_real* x, int ldx,
                                    const nb_real* rstd, const nb_real* gain,
                                    int rows, int width, int seg, int accumulate,
                                    nb_real* scratch);

/* LayerNorm (two-pass statistics). mean and rstd: rows*(width/seg) each. gain, bias: seg values
   or NULL. */
NBDEF nb_result nb_layernorm_forward(nb_ctx* ctx, nb_real* y, int ldy, nb_real* mean,
                                     nb_real* rstd, const nb_real* x, int ldx,
                                     const nb_real* gain, const nb_real* bias,
                                     int rows, int width, int seg, nb_real eps);
/* dx = rstd*(g - mean(g) - xhat*mean(g*xhat)), g = dy*gain; dgain += sum dy*xhat; dbias += sum dy */
NBDEF nb_result nb_layernorm_backward(nb_ctx* ctx, nb_real* dx, int lddx, nb_real* dgain,
                                      nb_real* dbias, const nb_real* dy, int lddy,
                                      const nb_real* x, int ldx, const nb_real* mean,
                                      const nb_real* rstd, const nb_real* gain,
                                      int rows, int width, int seg, int accumulate,
                                      nb_real* scratch);

/* ---- softmax ------------------------------------------------------------------------------ */
/* p = softmax(scale * s) per row of `cols`. causal: row i sees columns j <= i + (cols - rows)
   (bottom-right aligned, the usual mask when rows == cols); masked entries of p are set to 0.
   lse (optional, rows values): log-sum-exp of the scaled, masked row. p may equal s. */
NBDEF nb_result nb_softmax_forward(nb_ctx* ctx, nb_real* p, int ldp, nb_real* lse,
                                   const nb_real* s, int lds, int rows, int cols,
                                   nb_real scale, int causal);
/* ds = scale * p * (dp - rowsum(dp * p)); O(cols) per row from p alone. ds may equal dp. */
NBDEF nb_result nb_softmax_backward(nb_ctx* ctx, nb_real* ds, int ldds, const nb_real* dp,
                                    int lddp, const nb_real* p, int ldp, int rows, int cols,
                                    nb_real scale, int causal);

/* ---- GEMM ---------------------------------------------------------------------------------- */
/* Row-major C = alpha * op(A) op(B) + beta * C, op(A) M x K, op(B) K x N. trans = 0 or 1.
   beta = 0 overwrites C (NaNs in C do not propagate). nb_gemm uses BLAS unless NB_NO_BLAS;
   nb_gemm_ref is the portable reference (OpenMP over rows of C when not already in a parallel
   region). Both are safe to call from inside an OpenMP region only with a single-threaded
   BLAS. */
NBDEF nb_result nb_gemm(nb_ctx* ctx, int transa, int transb, int M, int N, int K,
                        nb_real alpha, const nb_real* A, int lda, const nb_real* B, int ldb,
                        nb_real beta, nb_real* C, int ldc);
NBDEF nb_result nb_gemm_ref(nb_ctx* ctx, int transa, int transb, int M, int N, int K,
                            nb_real alpha, const nb_real* A, int lda, const nb_real* B, int ldb,
                            nb_real beta, nb_real* C, int ldc);

/* ---- elementwise --------------------------------------------------------------------------- */
NBDEF void nb_add(nb_ctx* ctx, nb_real* out, const nb_real* a, const nb_real* b, size_t n);
/* y = alpha * x + beta * y (beta = 0 overwrites y) */
NBDEF void nb_axpby(nb_ctx* ctx, nb_real* y, nb_real alpha, const nb_real* x, nb_real beta,
                    size_t n);

#ifdef __cplusplus
}
#endif
#endif /* NORMBLOCKS_H */

/* ============================================================================================ */
#ifdef NORMBLOCKS_IMPLEMENTATION
#ifndef NORMBLOCKS_IMPLEMENTATION_DONE
#define NORMBLOCKS_IMPLEMENTATION_DONE

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#if defined(NB_MALLOC) && defined(NB_FREE)
#elif !defined(NB_MALLOC) && !defined(NB_FREE)
#include <stdlib.h>
#define NB_MALLOC(size, user) ((void)(user), malloc(size))
#define NB_FREE(ptr, user) ((void)(user), free(ptr))
#else
#error "normblocks: define both NB_MALLOC and NB_FREE, or neither"
#endif

#ifndef NB_ASSERT
#include <assert.h>
#define NB_ASSERT(x) assert(x)
#endif

#ifdef _OPENMP
#include <omp.h>
#define NB__PRAGMA(x) _Pragma(#x)
#define NB__OMP(x) NB__PRAGMA(omp x)
#else
#define NB__OMP(x)
static int omp_get_thread_num(void) { return 0; }
static int omp_get_num_threads(void) { return 1; }
#endif

#ifndef NB_NO_BLAS
#include <cblas.h>
#endif

#ifdef NB_DOUBLE
#define NB__EXP exp
#define NB__LOG log
#define NB__SQRT sqrt
#else
#define NB__EXP expf
#define NB__LOG logf
#define NB__SQRT sqrtf
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---- errors --------------------------------------------------------------------------------- */

NBDEF const char* nb_result_string(nb_result r) {
    switch (r) {
    case NB_OK: return "ok";
    case NB_ERR_NULL: return "required pointer is NULL";
    case NB_ERR_SHAPE: return "invalid shape or stride";
    case NB_ERR_VALUE: return "argument out of range";
    case NB_ERR_CONFIG: return "invalid configuration";
    case NB_ERR_NONFINITE: return "non-finite value detected";
    case NB_ERR_NOMEM: return "out of memory";
    }
    return "unknown result code";
}

#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
static nb_result nb__fail(nb_ctx* ctx, nb_result code, const char* fmt, ...) {
    if (ctx) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(ctx->err, sizeof ctx->err, fmt, ap);
        va_end(ap);
        if (ctx->log) ctx->log(ctx->log_user, code, ctx->err);
    }
    return code;
}

/* Shorthand for argument checks: return the failure when `cond` is true. */
#define NB__CHECK(cond, code, ...) \
    do { if (cond) return nb__fail(ctx, code, __VA_ARGS__); } while (0)

NBDEF int nb_num_threads(const nb_ctx* ctx) {
    if (ctx && ctx->num_threads > 0) return ctx->num_threads;
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
}

/* Static partition of n items over nt parts: part t gets [*lo, *hi). */
static void nb__split(int n, int nt, int t, int* lo, int* hi) {
    int base = n / nt, rem = n % nt;
    *lo = t * base + (t < rem ? t : rem);
    *hi = *lo + base + (t < rem ? 1 : 0);
}

/* ---- normalization -------------------------------------------------------------------------- */

/* Partial sums are padded to a cache line so threads never share one. */
#define NB__PAD(n) ((((size_t)(n)) + 15) & ~(size_t)15)

NBDEF size_t nb_norm_scratch_size(const nb_ctx* ctx, int seg) {
    if (seg < 1) seg = 1;
    return (size_t)nb_num_threads(ctx) * 2 * NB__PAD(seg);
}

static nb_result nb__check_rows(nb_ctx* ctx, const char* fn, int rows, int width, int* seg,
                                int lda, int ldb, nb_real eps) {
    NB__CHECK(rows <= 0 || width <= 0, NB_ERR_SHAPE, "%s: rows (%d) and width (%d) must be > 0",
              fn, rows, width);
    if (*seg == 0) *seg = width;
    NB__CHECK(*seg < 0 || width % *seg != 0, NB_ERR_SHAPE,
              "%s: seg (%d) must divide width (%d)", fn, *seg, width);
    NB__CHECK(lda < width || ldb < width, NB_ERR_SHAPE,
              "%s: strides (%d, %d) must be >= width (%d)", fn, lda, ldb, width);
    NB__CHECK(!(eps > 0), NB_ERR_VALUE, "%s: eps (%g) must be > 0", fn, (double)eps);
    return NB_OK;
}

NBDEF nb_result nb_rmsnorm_forward(nb_ctx* ctx, nb_real* y, int ldy, nb_real* rstd,
                                   const nb_real* x, int ldx, const nb_real* gain,
                                   int rows, int width, int seg, nb_real eps) {
    nb_result rc = nb__check_rows(ctx, "nb_rmsnorm_forward", rows, width, &seg, ldx, ldy, eps);
    if (rc) return rc;
    NB__CHECK(!y || !x || !rstd, NB_ERR_NULL, "nb_rmsnorm_forward: y, x and rstd are required");
    {
        const int nseg = width / seg;
        int r;
        NB__OMP(parallel for schedule(static) num_threads(nb_num_threads(ctx)))
        for (r = 0; r < rows; r++) {
            int s, i;
            for (s = 0; s < nseg; s++) {
                const nb_real* xs = x + (size_t)r * ldx + (size_t)s * seg;
                nb_real* ys = y + (size_t)r * ldy + (size_t)s * seg;
                nb_real ss = 0, rs;
                NB__OMP(simd reduction(+:ss))
                for (i = 0; i < seg; i++) ss += xs[i] * xs[i];
                rs = 1 / NB__SQRT(ss / (nb_real)seg + eps);
                rstd[(size_t)r * nseg + s] = rs;
                if (gain) {
                    NB__OMP(simd)
                    for (i = 0; i < seg; i++) ys[i] = xs[i] * rs * gain[i];
                } else {
                    NB__OMP(simd)
                    for (i = 0; i < seg; i++) ys[i] = xs[i] * rs;
                }
            }
        }
    }
    return NB_OK;
}

/* Sum the per-thread partials (nt blocks of `stride` floats, first `n` used) into out, in thread
   order: deterministic for a fixed thread count. */
static void nb__reduce_partials(nb_real* out, const nb_real* partials, int nt, size_t stride,
                                int n) {
    int t, i;
    for (t = 0; t < nt; t++) {
        const nb_real* p = partials + (size_t)t * stride;
        for (i = 0; i < n; i++) out[i] += p[i];
    }
}

/* Shared body of both norm backwards. mean == NULL means RMSNorm. For one segment, with
   xhat = (x - mu) * rstd (mu = 0 for RMSNorm) and g = dy * gain:
     RMSNorm   dx = rstd * (g - xhat * mean(g * xhat))
     LayerNorm dx = rstd * (g - mean(g) - xhat * mean(g * xhat))
   (the mean(g) term is the gradient through mu). dgain += dy * xhat, dbias += dy. */
static nb_result nb__norm_backward(nb_ctx* ctx, const char* fn, nb_real* dx, int lddx,
                                   nb_real* dgain, nb_real* dbias, const nb_real* dy, int lddy,
                                   const nb_real* x, int ldx, const nb_real* mean,
                                   const nb_real* rstd, const nb_real* gain, int rows, int width,
                                   int seg, int accumulate, nb_real* scratch) {
    nb_result rc = nb__check_rows(ctx, fn, rows, width, &seg, ldx, lddy, 1);
    if (rc) return rc;
    NB__CHECK(lddx < width, NB_ERR_SHAPE, "%s: lddx (%d) must be >= width (%d)", fn, lddx, width);
    NB__CHECK(!dx || !dy || !x || !rstd, NB_ERR_NULL, "%s: dx, dy, x and rstd are required", fn);
    NB__CHECK((dgain || dbias) && !scratch, NB_ERR_NULL,
              "%s: scratch (nb_norm_scratch_size floats) is required for dgain/dbias", fn);
    {
        const int nseg = width / seg;
        const size_t stride = 2 * NB__PAD(seg);
        int used = 1;
        NB__OMP(parallel num_threads(nb_num_threads(ctx)))
        {
            const int t = omp_get_thread_num(), n = omp_get_num_threads();
            nb_real* pg = (dgain || dbias) ? scratch + (size_t)t * stride : NULL;
            nb_real* pb = pg ? pg + NB__PAD(seg) : NULL;
            int lo, hi, r, s, i;
            if (t == 0) used = n;
            if (pg) memset(pg, 0, stride * sizeof(nb_real));
            nb__split(rows, n, t, &lo, &hi);
            for (r = lo; r < hi; r++) {
                for (s = 0; s < nseg; s++) {
                    const size_t k = (size_t)r * nseg + s;
                    const nb_real* xs = x + (size_t)r * ldx + (size_t)s * seg;
                    const nb_real* dys = dy + (size_t)r * lddy + (size_t)s * seg;
                    nb_real* dxs = dx + (size_t)r * lddx + (size_t)s * seg;
                    const nb_real rs = rstd[k], mu = mean ? mean[k] : 0;
                    nb_real sg = 0, sgx = 0, mg, mgx;
                    NB__OMP(simd reduction(+:sg, sgx))
                    for (i = 0; i < seg; i++) {
                        const nb_real xh = (xs[i] - mu) * rs;
                        const nb_real g = gain ? dys[i] * gain[i] : dys[i];
                        sg += g;
                        sgx += g * xh;
                    }
                    mg = mean ? sg / (nb_real)seg : 0;
                    mgx = sgx / (nb_real)seg;
                    if (pg) {
                        for (i = 0; i < seg; i++) {
                            pg[i] += dys[i] * (xs[i] - mu) * rs;
                            pb[i] += dys[i];
                        }
                    }
                    if (accumulate) {
                        NB__OMP(simd)
                        for (i = 0; i < seg; i++) {
                            const nb_real g = gain ? dys[i] * gain[i] : dys[i];
                            dxs[i] += rs * (g - mg - (xs[i] - mu) * rs * mgx);
                        }
                    } else {
                        NB__OMP(simd)
                        for (i = 0; i < seg; i++) {
                            const nb_real g = gain ? dys[i] * gain[i] : dys[i];
                            dxs[i] = rs * (g - mg - (xs[i] - mu) * rs * mgx);
                        }
                    }
                }
            }
        }
        if (dgain) nb__reduce_partials(dgain, scratch, used, stride, seg);
        if (dbias) nb__reduce_partials(dbias, scratch + NB__PAD(seg), used, stride, seg);
    }
    return NB_OK;
}

NBDEF nb_result nb_rmsnorm_backward(nb_ctx* ctx, nb_real* dx, int lddx, nb_real* dgain,
                                    const nb_real* dy, int lddy, const nb_real* x, int ldx,
                                    const nb_real* rstd, const nb_real* gain,
                                    int rows, int width, int seg, int accumulate,
                                    nb_real* scratch) {
    return nb__norm_backward(ctx, "nb_rmsnorm_backward", dx, lddx, dgain, NULL, dy, lddy, x, ldx,
                             NULL, rstd, gain, rows, width, seg, accumulate, scratch);
}

NBDEF nb_result nb_layernorm_forward(nb_ctx* ctx, nb_real* y, int ldy, nb_real* mean,
                                     nb_real* rstd, const nb_real* x, int ldx,
                                     const nb_real* gain, const nb_real* bias,
                                     int rows, int width, int seg, nb_real eps) {
    nb_result rc = nb__check_rows(ctx, "nb_layernorm_forward", rows, width, &seg, ldx, ldy, eps);
    if (rc) return rc;
    NB__CHECK(!y || !x || !mean || !rstd, NB_ERR_NULL,
              "nb_layernorm_forward: y, x, mean and rstd are required");
    {
        const int nseg = width / seg;
        int r;
        NB__OMP(parallel for schedule(static) num_threads(nb_num_threads(ctx)))
        for (r = 0; r < rows; r++) {
            int s, i;
            for (s = 0; s < nseg; s++) {
                const nb_real* xs = x + (size_t)r * ldx + (size_t)s * seg;
                nb_real* ys = y + (size_t)r * ldy + (size_t)s * seg;
                nb_real sum = 0, var = 0, mu, rs;
                NB__OMP(simd reduction(+:sum))
                for (i = 0; i < seg; i++) sum += xs[i];
                mu = sum / (nb_real)seg;
                NB__OMP(simd reduction(+:var))
                for (i = 0; i < seg; i++) var += (xs[i] - mu) * (xs[i] - mu);
                rs = 1 / NB__SQRT(var / (nb_real)seg + eps);
                mean[(size_t)r * nseg + s] = mu;
                rstd[(size_t)r * nseg + s] = rs;
                NB__OMP(simd)
                for (i = 0; i < seg; i++) {
                    nb_real v = (xs[i] - mu) * rs;
                    if (gain) v *= gain[i];
                    if (bias) v += bias[i];
                    ys[i] = v;
                }
            }
        }
    }
    return NB_OK;
}

NBDEF nb_result nb_layernorm_backward(nb_ctx* ctx, nb_real* dx, int lddx, nb_real* dgain,
                                      nb_real* dbias, const nb_real* dy, int lddy,
                                      const nb_real* x, int ldx, const nb_real* mean,
                                      const nb_real* rstd, const nb_real* gain,
                                      int rows, int width, int seg, int accumulate,
                                      nb_real* scratch) {
    NB__CHECK(!mean, NB_ERR_NULL, "nb_layernorm_backward: mean is required");
    return nb__norm_backward(ctx, "nb_layernorm_backward", dx, lddx, dgain, dbias, dy, lddy, x,
                             ldx, mean, rstd, gain, rows, width, seg, accumulate, scratch);
}

/* ---- softmax -------------------------------------------------------------------------------- */

static nb_result nb__check_softmax(nb_ctx* ctx, const char* fn, int rows, int cols, int lda,
                                   int ldb, nb_real scale) {
    NB__CHECK(rows <= 0 || cols <= 0, NB_ERR_SHAPE, "%s: rows (%d) and cols (%d) must be > 0",
              fn, rows, cols);
    NB__CHECK(lda < cols || ldb < cols, NB_ERR_SHAPE, "%s: strides (%d, %d) must be >= cols (%d)",
              fn, lda, ldb, cols);
    NB__CHECK(!(scale > 0) || !isfinite((double)scale), NB_ERR_VALUE,
              "%s: scale (%g) must be finite and > 0", fn, (double)scale);
    return NB_OK;
}

/* Number of visible columns of row i. With causal masking and rows > cols the first rows see
   nothing; their p is all zero and their lse is -inf. */
static int nb__visible(int i, int rows, int cols, int causal) {
    int n = causal ? i + 1 + (cols - rows) : cols;
    return n < 0 ? 0 : (n > cols ? cols : n);
}

NBDEF nb_result nb_softmax_forward(nb_ctx* ctx, nb_real* p, int ldp, nb_real* lse,
                                   const nb_real* s, int lds, int rows, int cols,
                                   nb_real scale, int causal) {
    nb_result rc = nb__check_softmax(ctx, "nb_softmax_forward", rows, cols, lds, ldp, scale);
    if (rc) return rc;
    NB__CHECK(!p || !s, NB_ERR_NULL, "nb_softmax_forward: p and s are required");
    {
        int i;
        NB__OMP(parallel for schedule(static) num_threads(nb_num_threads(ctx)))
        for (i = 0; i < rows; i++) {
            const nb_real* si = s + (size_t)i * lds;
            nb_real* pi = p + (size_t)i * ldp;
            const int n = nb__visible(i, rows, cols, causal);
            nb_real mx = -INFINITY, sum = 0, inv;
            int j;
            for (j = 0; j < n; j++) mx = si[j] > mx ? si[j] : mx;
            for (j = 0; j < n; j++) {
                pi[j] = NB__EXP(scale * (si[j] - mx));
                sum += pi[j];
            }
            inv = n ? 1 / sum : 0;
            for (j = 0; j < n; j++) pi[j] *= inv;
            for (j = n; j < cols; j++) pi[j] = 0;
            if (lse) lse[i] = n ? scale * mx + NB__LOG(sum) : -INFINITY;
        }
    }
    return NB_OK;
}

NBDEF nb_result nb_softmax_backward(nb_ctx* ctx, nb_real* ds, int ldds, const nb_real* dp,
                                    int lddp, const nb_real* p, int ldp, int rows, int cols,
                                    nb_real scale, int causal) {
    nb_result rc = nb__check_softmax(ctx, "nb_softmax_backward", rows, cols, lddp, ldp, scale);
    if (rc) return rc;
    NB__CHECK(ldds < cols, NB_ERR_SHAPE, "nb_softmax_backward: ldds (%d) must be >= cols (%d)",
              ldds, cols);
    NB__CHECK(!ds || !dp || !p, NB_ERR_NULL, "nb_softmax_backward: ds, dp and p are required");
    {
        int i;
        NB__OMP(parallel for schedule(static) num_threads(nb_num_threads(ctx)))
        for (i = 0; i < rows; i++) {
            const nb_real* dpi = dp + (size_t)i * lddp;
            const nb_real* pi = p + (size_t)i * ldp;
            nb_real* dsi = ds + (size_t)i * ldds;
            const int n = nb__visible(i, rows, cols, causal);
            nb_real dot = 0;
            int j;
            NB__OMP(simd reduction(+:dot))
            for (j = 0; j < n; j++) dot += dpi[j] * pi[j];
            NB__OMP(simd)
            for (j = 0; j < n; j++) dsi[j] = scale * pi[j] * (dpi[j] - dot);
            for (j = n; j < cols; j++) dsi[j] = 0;
        }
    }
    return NB_OK;
}

/* ---- GEMM ----------------------------------------------------------------------------------- */

static nb_result nb__check_gemm(nb_ctx* ctx, const char* fn, int transa, int transb, int M, int N,
                                int K, const void* A, int lda, const void* B, int ldb,
                                const void* C, int ldc) {
    NB__CHECK(M <= 0 || N <= 0 || K <= 0, NB_ERR_SHAPE, "%s: M, N, K (%d, %d, %d) must be > 0",
              fn, M, N, K);
    NB__CHECK(!A || !B || !C, NB_ERR_NULL, "%s: A, B and C are required", fn);
    NB__CHECK(lda < (transa ? M : K) || ldb < (transb ? K : N) || ldc < N, NB_ERR_SHAPE,
              "%s: leading dimensions (%d, %d, %d) too small for M=%d N=%d K=%d transa=%d "
              "transb=%d", fn, lda, ldb, ldc, M, N, K, transa, transb);
    return NB_OK;
}

NBDEF nb_result nb_gemm_ref(nb_ctx* ctx, int transa, int transb, int M, int N, int K,
                            nb_real alpha, const nb_real* A, int lda, const nb_real* B, int ldb,
                            nb_real beta, nb_real* C, int ldc) {
    nb_result rc = nb__check_gemm(ctx, "nb_gemm_ref", transa, transb, M, N, K, A, lda, B, ldb, C,
                                  ldc);
    if (rc) return rc;
    {
        int i;
        /* never nest: inside a parallel region this runs on the calling thread only */
        NB__OMP(parallel for schedule(static) if(!omp_in_parallel())
                num_threads(nb_num_threads(ctx)))
        for (i = 0; i < M; i++) {
            nb_real* c = C + (size_t)i * ldc;
            int j, k;
            if (beta == 0) for (j = 0; j < N; j++) c[j] = 0;
            else if (beta != 1) for (j = 0; j < N; j++) c[j] *= beta;
            if (!transb) {
                /* i-k-j order: the inner loop streams a row of B and of C */
                for (k = 0; k < K; k++) {
                    const nb_real a = alpha * (transa ? A[(size_t)k * lda + i] : A[(size_t)i * lda + k]);
                    const nb_real* b = B + (size_t)k * ldb;
                    for (j = 0; j < N; j++) c[j] += a * b[j];
                }
            } else {
                for (j = 0; j < N; j++) {
                    const nb_real* b = B + (size_t)j * ldb;
                    nb_real acc = 0;
                    if (transa) for (k = 0; k < K; k++) acc += A[(size_t)k * lda + i] * b[k];
                    else {
                        const nb_real* a = A + (size_t)i * lda;
                        for (k = 0; k < K; k++) acc += a[k] * b[k];
                    }
                    c[j] += alpha * acc;
                }
            }
        }
    }
    return NB_OK;
}

NBDEF nb_result nb_gemm(nb_ctx* ctx, int transa, int transb, int M, int N, int K,
                        nb_real alpha, const nb_real* A, int lda, const nb_real* B, int ldb,
                        nb_real beta, nb_real* C, int ldc) {
#ifdef NB_NO_BLAS
    return nb_gemm_ref(ctx, transa, transb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
#else
    nb_result rc = nb__check_gemm(ctx, "nb_gemm", transa, transb, M, N, K, A, lda, B, ldb, C, ldc);
    if (rc) return rc;
#ifdef NB_DOUBLE
    cblas_dgemm(CblasRowMajor, transa ? CblasTrans : CblasNoTrans,
                transb ? CblasTrans : CblasNoTrans, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
#else
    cblas_sgemm(CblasRowMajor, transa ? CblasTrans : CblasNoTrans,
                transb ? CblasTrans : CblasNoTrans, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
#endif
    return NB_OK;
#endif
}

/* ---- elementwise ---------------------------------------------------------------------------- */

NBDEF void nb_add(nb_ctx* ctx, nb_real* out, const nb_real* a, const nb_real* b, size_t n) {
    const long long nn = (long long)n;
    long long i;
    (void)ctx;
    NB__OMP(parallel for simd schedule(static) num_threads(nb_num_threads(ctx)))
    for (i = 0; i < nn; i++) out[i] = a[i] + b[i];
}

NBDEF void nb_axpby(nb_ctx* ctx, nb_real* y, nb_real alpha, const nb_real* x, nb_real beta,
                    size_t n) {
    const long long nn = (long long)n;
    long long i;
    (void)ctx;
    if (beta == 0) {
        NB__OMP(parallel for simd schedule(static) num_threads(nb_num_threads(ctx)))
        for (i = 0; i < nn; i++) y[i] = alpha * x[i];
    } else {
        NB__OMP(parallel for simd schedule(static) num_threads(nb_num_threads(ctx)))
        for (i = 0; i < nn; i++) y[i] = alpha * x[i] + beta * y[i];
    }
}

#ifdef __cplusplus
}
#endif
#endif /* NORMBLOCKS_IMPLEMENTATION_DONE */
#endif /* NORMBLOCKS_IMPLEMENTATION */

/*
------------------------------------------------------------------------------
This software is available under 2 licenses -- choose whichever you prefer.
------------------------------------------------------------------------------
ALTERNATIVE A - MIT License
Copyright (c) 2026 normblocks contributors
Permission is hereby granted, free of charge, to any person obtaining a copy of
this software and associated documentation files (the "Software"), to deal in
the Software without restriction, including without limitation the rights to
use, copy, modify, merge, publish, distribute, sublicense, and/or sell copies
of the Software, and to permit persons to whom the Software is furnished to do
so, subject to the following conditions:
The above copyright notice and this permission notice shall be included in all
copies or substantial portions of the Software.
THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR
IMPLIED, INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY,
FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN NO EVENT SHALL THE
AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER
LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM,
OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE
SOFTWARE.
------------------------------------------------------------------------------
ALTERNATIVE B - Public Domain (www.unlicense.org)
This is free and unencumbered software released into the public domain.
Anyone is free to copy, modify, publish, use, compile, sell, or distribute this
software, either in source code form or as a compiled binary, for any purpose,
commercial or non-commercial, and by any means.
In jurisdictions that recognize copyright laws, the author or authors of this
software dedicate any and all copyright interest in the software to the public
domain. We make this dedication in perpetuity for the benefit of our heirs and
successors. We intend this dedication to be used for the basis of public
testing of the software under copyright law.
------------------------------------------------------------------------------
*/
