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
       size_t n = nb_norm_scratch_size(&ctx, W, 0);       // per-thread partial sums
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
/* nb_real values of scratch the norm backward needs for per-thread partial gain/bias sums,
   for rows of `width` in segments of `seg` (0 = width). Needed only with dgain or dbias. */
NBDEF size_t nb_norm_scratch_size(const nb_ctx* ctx, int width, int seg);

/* RMSNorm. x, y: rows x width with strides ldx, ldy (y may equal x if ldy == ldx, but backward
   needs x). rstd[r*(width/seg) + s] = 1/sqrt(mean(x_seg^2) + eps). gain: seg values or NULL. */
NBDEF nb_result nb_rmsnorm_forward(nb_ctx* ctx, nb_real* y, int ldy, nb_real* rstd,
                                   const nb_real* x, int ldx, const nb_real* gain,
                                   int rows, int width, int seg, nb_real eps);
/* dx = (1/r)(g - xhat*mean(g*xhat)) with g = dy*gain, xhat = x*rstd; dgain += sum dy*xhat.
   dx is overwritten (accumulate = 0) or added to (accumulate != 0); dx may equal dy when
   accumulate = 0. dgain may be NULL to skip it; scratch: nb_norm_scratch_size(ctx, width, seg)
   values, needed when dgain is not NULL. */
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
/* Threads the BLAS uses per call: 1 for a sequential or OpenMP-built BLAS (then normblocks
   splits its GEMMs over ctx->num_threads itself and calls BLAS from its own threads), more for
   Debian's default pthread OpenBLAS (then big GEMMs are left to BLAS and per-head attention
   runs head after head). Set OPENBLAS_NUM_THREADS=1 to give normblocks all the threading. */
NBDEF int nb_blas_threads(void);

/* ---- elementwise --------------------------------------------------------------------------- */
NBDEF void nb_add(nb_ctx* ctx, nb_real* out, const nb_real* a, const nb_real* b, size_t n);
/* y = alpha * x + beta * y (beta = 0 overwrites y) */
NBDEF void nb_axpby(nb_ctx* ctx, nb_real* y, nb_real alpha, const nb_real* x, nb_real beta,
                    size_t n);

/* ---- RoPE ---------------------------------------------------------------------------------- */
/* NeoX rotate-half RoPE, in place, on B*T token rows (row r has position r % T) of `heads`
   head vectors of head_dim at stride ldx. Pair (i, i + head_dim/2) rotates by
   phi = pos * theta^(-2i/head_dim). inverse != 0 rotates by -phi: that is the backward. */
NBDEF nb_result nb_rope(nb_ctx* ctx, nb_real* x, int ldx, int B, int T, int heads, int head_dim,
                        nb_real theta, int inverse);

/* ---- attention sublayer ----------------------------------------------------------------------
   out = C W_o^T,  C = concat_h Nc(softmax(s * RoPE(Nq(Q_h)) RoPE(Nk(K_j))^T + mask) Nv(V_j))
   with [Q|K|V] = x W_qkv^T (Q: H heads, K and V: H_kv heads, query head h uses KV head
   h / (H/H_kv)), s = 1/sqrt(d_k). Each of the norm sites Q, K, V, C is on or off. */
typedef enum nb_norm_type {
    NB_NORM_DEFAULT = 0,  /* RMSNorm */
    NB_NORM_RMS,
    NB_NORM_LAYER         /* LayerNorm (gain only at attention sites) */
} nb_norm_type;

enum { NB_SITE_Q = 1, NB_SITE_K = 2, NB_SITE_V = 4, NB_SITE_C = 8 };  /* nb_attn_desc.sites */
#define NB_SITES_QKV  (NB_SITE_Q | NB_SITE_K | NB_SITE_V)
#define NB_SITES_QKVC (NB_SITES_QKV | NB_SITE_C)

typedef enum nb_norm_width {
    NB_WIDTH_DEFAULT = 0,  /* per head */
    NB_WIDTH_PER_HEAD,     /* each d_k head vector, one gain of d_k shared by all heads (HybridNorm) */
    NB_WIDTH_FULL          /* the whole projection row: d for Q and C, H_kv*d_k for K, V (OLMo-2) */
} nb_norm_width;

typedef enum nb_attn_memory {
    NB_ATTN_MEMORY_DEFAULT = 0, /* PROBS when B*H*T*T is at most 64 Mi values, else LSE */
    NB_ATTN_MEMORY_PROBS,       /* cache softmax probabilities: B*H*T*T values, fastest backward */
    NB_ATTN_MEMORY_LSE          /* cache one log-sum-exp per row and recompute scores in row tiles:
                                   cache O(B*H*T), scratch O(threads*T) */
} nb_attn_memory;

typedef struct nb_attn_desc {
    int d_model;            /* d (required) */
    int n_heads;            /* H (required); d % H == 0, d_k = d / H */
    int n_kv_heads;         /* H_kv; 0 = n_heads. H % H_kv == 0 */
    unsigned sites;         /* NB_SITE_* mask of normalized sites; 0 = none */
    nb_norm_width width;    /* norm width at the sites */
    nb_norm_type norm;      /* norm type at the sites */
    int no_gain;            /* 1 = the site norms have no gain */
    nb_real eps;            /* 0 = 1e-5 */
    int rope;               /* 1 = apply RoPE to Q and K after their norms */
    nb_real rope_theta;     /* 0 = 10000 */
    int non_causal;         /* 1 = no causal mask */
    nb_attn_memory memory;
} nb_attn_desc;

/* Parameter (or gradient) pointers. Shapes: w_qkv (d + 2*H_kv*d_k) x d, rows Q|K|V;
   w_o d x d; q/k/v/c_gain: d_k each (per head) or the site's full width; NULL when absent. */
typedef struct nb_attn_params {
    nb_real *w_qkv, *w_o, *q_gain, *k_gain, *v_gain, *c_gain;
} nb_attn_params;

/* A plan: the validated, resolved description for batches of at most max_batch sequences of
   at most max_seq tokens, and the sizes (in nb_real values) of what the caller allocates. */
typedef struct nb_attn_plan {
    nb_attn_desc desc;      /* every default resolved */
    int max_batch, max_seq;
    int max_threads;        /* the scratch is sized for this many threads (ctx at plan time) */
    int head_dim, qkv_width, group; /* d_k, d + 2*H_kv*d_k, H/H_kv */
    size_t n_params;        /* contiguous parameters in the order of nb_attn_params */
    size_t n_cache;         /* kept from forward to backward, per call */
    size_t n_scratch;       /* temporary, reusable by any other sublayer between calls */
} nb_attn_plan;

NBDEF nb_result nb_attn_plan_make(nb_ctx* ctx, nb_attn_plan* plan, const nb_attn_desc* desc,
                                  int max_batch, int max_seq);
/* Point p's members into a contiguous buffer of plan->n_params values (w_qkv, w_o, then the
   gains of the enabled sites in Q, K, V, C order); absent gains are NULL. */
NBDEF void nb_attn_params_bind(const nb_attn_plan* plan, nb_real* base, nb_attn_params* p);
/* out: B*T x d. x: B*T x d (kept by the caller for backward). */
NBDEF nb_result nb_attn_forward(nb_ctx* ctx, const nb_attn_plan* plan, const nb_attn_params* p,
                                nb_real* out, const nb_real* x, int B, int T, nb_real* cache,
                                nb_real* scratch);
/* dx (B*T x d) is overwritten, or accumulated when accumulate_dx != 0; every member of g is
   accumulated. cache must be untouched since the forward with the same x, B, T. */
NBDEF nb_result nb_attn_backward(nb_ctx* ctx, const nb_attn_plan* plan, const nb_attn_params* p,
                                 nb_attn_params* g, nb_real* dx, const nb_real* dout,
                                 const nb_real* x, int B, int T, const nb_real* cache,
                                 nb_real* scratch, int accumulate_dx);

/* ---- feed-forward sublayer -------------------------------------------------------------------
   SwiGLU: [u|z] = x W_in^T (first half value u, second half gate z), a = silu(z)*u,
   out = a W_out^T. GELU: h = x W_in^T + b_in, a = gelu(h), out = a W_out^T + b_out. */
typedef enum nb_ffn_type {
    NB_FFN_DEFAULT = 0,  /* SwiGLU */
    NB_FFN_SWIGLU,
    NB_FFN_GELU_TANH,    /* GPT-2's tanh approximation */
    NB_FFN_GELU_ERF      /* exact erf GELU */
} nb_ffn_type;

typedef struct nb_ffn_desc {
    int d_model;          /* d (required) */
    int d_ff;             /* f, inner width; 0 = 4d for GELU, 8d/3 rounded up to 64 for SwiGLU */
    nb_ffn_type type;
    int bias;             /* 0 = type default (GELU: biases, SwiGLU: none); 1 = on; -1 = off */
} nb_ffn_desc;

/* w_in: (2f or f) x d, b_in: 2f or f, w_out: d x f, b_out: d; biases NULL when off. */
typedef struct nb_ffn_params { nb_real *w_in, *b_in, *w_out, *b_out; } nb_ffn_params;

typedef struct nb_ffn_plan {
    nb_ffn_desc desc;
    int max_batch, max_seq;
    int in_width;         /* rows of w_in: 2f (SwiGLU) or f */
    size_t n_params, n_cache, n_scratch;
} nb_ffn_plan;

NBDEF nb_result nb_ffn_plan_make(nb_ctx* ctx, nb_ffn_plan* plan, const nb_ffn_desc* desc,
                                 int max_batch, int max_seq);
/* order: w_in, b_in, w_out, b_out */
NBDEF void nb_ffn_params_bind(const nb_ffn_plan* plan, nb_real* base, nb_ffn_params* p);
NBDEF nb_result nb_ffn_forward(nb_ctx* ctx, const nb_ffn_plan* plan, const nb_ffn_params* p,
                               nb_real* out, const nb_real* x, int B, int T, nb_real* cache,
                               nb_real* scratch);
NBDEF nb_result nb_ffn_backward(nb_ctx* ctx, const nb_ffn_plan* plan, const nb_ffn_params* p,
                                nb_ffn_params* g, nb_real* dx, const nb_real* dout,
                                const nb_real* x, int B, int T, const nb_real* cache,
                                nb_real* scratch, int accumulate_dx);

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

NBDEF size_t nb_norm_scratch_size(const nb_ctx* ctx, int width, int seg) {
    if (seg <= 0) seg = width;
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
              "%s: scratch (nb_norm_scratch_size values) is required for dgain/dbias", fn);
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
                nb_real sum = 0, var = 0, dev = 0, mu, rs;
                NB__OMP(simd reduction(+:sum))
                for (i = 0; i < seg; i++) sum += xs[i];
                mu = sum / (nb_real)seg;
                /* corrected two-pass: the deviations' own sum repairs the rounding of mu, which
                   matters when |mean| >> std (a plain float sum of 100-ish values is off by 1e-5) */
                NB__OMP(simd reduction(+:var, dev))
                for (i = 0; i < seg; i++) {
                    dev += xs[i] - mu;
                    var += (xs[i] - mu) * (xs[i] - mu);
                }
                mu += dev / (nb_real)seg;
                var -= dev * dev / (nb_real)seg;
                rs = 1 / NB__SQRT((var > 0 ? var : 0) / (nb_real)seg + eps);
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

/* One GEMM on the calling thread (BLAS or reference), no checks: for use inside our own
   parallel regions and by nb_gemm. */
static void nb__gemm1(int transa, int transb, int M, int N, int K, nb_real alpha,
                      const nb_real* A, int lda, const nb_real* B, int ldb, nb_real beta,
                      nb_real* C, int ldc) {
#ifdef NB_NO_BLAS
    nb_ctx one;
    memset(&one, 0, sizeof one);
    one.num_threads = 1;
    nb_gemm_ref(&one, transa, transb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
#elif defined(NB_DOUBLE)
    cblas_dgemm(CblasRowMajor, transa ? CblasTrans : CblasNoTrans,
                transb ? CblasTrans : CblasNoTrans, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
#else
    cblas_sgemm(CblasRowMajor, transa ? CblasTrans : CblasNoTrans,
                transb ? CblasTrans : CblasNoTrans, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
#endif
}

NBDEF int nb_blas_threads(void) {
#if !defined(NB_NO_BLAS) && defined(OPENBLAS_SEQUENTIAL)
    /* the pthread build runs every call on its own pool; the OpenMP build runs single-threaded
       when called from inside an OpenMP region, which is the only place we call it in parallel */
    if (openblas_get_parallel() == 1) return openblas_get_num_threads();
#endif
    return 1;
}

NBDEF nb_result nb_gemm(nb_ctx* ctx, int transa, int transb, int M, int N, int K,
                        nb_real alpha, const nb_real* A, int lda, const nb_real* B, int ldb,
                        nb_real beta, nb_real* C, int ldc) {
    nb_result rc = nb__check_gemm(ctx, "nb_gemm", transa, transb, M, N, K, A, lda, B, ldb, C, ldc);
    int nt = nb_num_threads(ctx);
    if (rc) return rc;
#ifdef _OPENMP
    if (omp_in_parallel()) nt = 1;
#endif
    /* A threaded BLAS parallelizes the call itself; otherwise we split C into nt blocks of rows
       (or of columns when M is small) and call the single-threaded BLAS once per thread. Each
       element of C is computed by one call, in the same order whatever nt is. */
    if (nt == 1 || nb_blas_threads() > 1 || (double)M * N * K < 65536.0) {
        nb__gemm1(transa, transb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return NB_OK;
    }
    {
        const int by_rows = M >= N;
        NB__OMP(parallel num_threads(nt))
        {
            int lo, hi;
            nb__split(by_rows ? M : N, omp_get_num_threads(), omp_get_thread_num(), &lo, &hi);
            if (hi > lo) {
                if (by_rows)
                    nb__gemm1(transa, transb, hi - lo, N, K, alpha,
                              transa ? A + lo : A + (size_t)lo * lda, lda, B, ldb, beta,
                              C + (size_t)lo * ldc, ldc);
                else
                    nb__gemm1(transa, transb, M, hi - lo, K, alpha, A, lda,
                              transb ? B + (size_t)lo * ldb : B + lo, ldb, beta, C + lo, ldc);
            }
        }
    }
    return NB_OK;
}

/* ---- RoPE ----------------------------------------------------------------------------------- */

NBDEF nb_result nb_rope(nb_ctx* ctx, nb_real* x, int ldx, int B, int T, int heads, int head_dim,
                        nb_real theta, int inverse) {
    NB__CHECK(B <= 0 || T <= 0 || heads <= 0 || head_dim <= 0, NB_ERR_SHAPE,
              "nb_rope: B, T, heads, head_dim (%d, %d, %d, %d) must be > 0", B, T, heads,
              head_dim);
    NB__CHECK(head_dim % 2, NB_ERR_SHAPE, "nb_rope: head_dim (%d) must be even", head_dim);
    NB__CHECK(ldx < heads * head_dim, NB_ERR_SHAPE, "nb_rope: ldx (%d) < heads*head_dim (%d)",
              ldx, heads * head_dim);
    NB__CHECK(!(theta > 1) || !isfinite((double)theta), NB_ERR_VALUE,
              "nb_rope: theta (%g) must be finite and > 1", (double)theta);
    NB__CHECK(!x, NB_ERR_NULL, "nb_rope: x is required");
    {
        const int half = head_dim / 2;
        const double log_theta = log((double)theta), sign = inverse ? -1 : 1;
        int t;
        NB__OMP(parallel for schedule(static) num_threads(nb_num_threads(ctx)))
        for (t = 0; t < T; t++) {
            nb_real c[64], s[64]; /* angles of one position, 64 pairs at a time */
            int i0, i, b, h;
            for (i0 = 0; i0 < half; i0 += 64) {
                const int n = half - i0 < 64 ? half - i0 : 64;
                for (i = 0; i < n; i++) {
                    /* phi = t * theta^(-2i/d_k), in double like the reference's fp32-or-better tables */
                    const double phi = t * exp(-2.0 * (i0 + i) / head_dim * log_theta);
                    c[i] = (nb_real)cos(phi);
                    s[i] = (nb_real)(sign * sin(phi));
                }
                for (b = 0; b < B; b++)
                    for (h = 0; h < heads; h++) {
                        nb_real* v = x + ((size_t)b * T + t) * ldx + (size_t)h * head_dim + i0;
                        for (i = 0; i < n; i++) {
                            const nb_real a = v[i], z = v[i + half];
                            v[i] = a * c[i] - z * s[i];
                            v[i + half] = z * c[i] + a * s[i];
                        }
                    }
            }
        }
    }
    return NB_OK;
}

/* ---- attention sublayer --------------------------------------------------------------------- */

#define NB__TILE 64 /* query rows per attention task */

/* Where everything lives in the caller's cache and scratch for a given (B, T). The same
   function sizes the buffers at plan time (base NULL) and carves them at run time. */
typedef struct nb__attn_mem {
    nb_real *qkv, *raw, *stat[4], *o, *c, *probs, *lse; /* cache */
    nb_real *dqkv, *dc, *tiles, *partials;              /* scratch */
    size_t n_cache, n_scratch;
} nb__attn_mem;

static int nb__site_heads(const nb_attn_plan* pl, int site) {
    return site == 1 || site == 2 ? pl->desc.n_kv_heads : pl->desc.n_heads; /* 0 Q 1 K 2 V 3 C */
}
static int nb__site_on(const nb_attn_plan* pl, int site) { return (pl->desc.sites >> site) & 1; }
/* segment width of a site's norm: a head, or the whole slice */
static int nb__site_seg(const nb_attn_plan* pl, int site) {
    return pl->desc.width == NB_WIDTH_FULL ? nb__site_heads(pl, site) * pl->head_dim
                                           : pl->head_dim;
}
/* column offset of a site's slice inside a qkv row (C lives in its own buffer) */
static int nb__site_offset(const nb_attn_plan* pl, int site) {
    return site == 0 ? 0 : site == 1 ? pl->desc.d_model
                                     : pl->desc.d_model + pl->desc.n_kv_heads * pl->head_dim;
}

static nb_real* nb__take(nb_real* base, size_t* used, size_t n) {
    nb_real* p = base ? base + *used : NULL;
    *used += NB__PAD(n); /* keep every buffer 64-byte aligned relative to the base */
    return p;
}

static void nb__attn_carve(const nb_attn_plan* pl, int B, int T, int nt, nb_real* cache,
                           nb_real* scratch, nb__attn_mem* m) {
    const size_t BT = (size_t)B * T, P = (size_t)pl->qkv_width, d = (size_t)pl->desc.d_model;
    const int layer = pl->desc.norm == NB_NORM_LAYER;
    size_t cu = 0, su = 0;
    int site, maxw = 1;
    memset(m, 0, sizeof *m);
    m->qkv = nb__take(cache, &cu, BT * P);
    if (pl->desc.sites & NB_SITES_QKV) m->raw = nb__take(cache, &cu, BT * P);
    for (site = 0; site < 4; site++)
        if (nb__site_on(pl, site)) {
            const int seg = nb__site_seg(pl, site);
            m->stat[site] = nb__take(cache, &cu, (layer ? 2 : 1) * BT *
                                     (size_t)(nb__site_heads(pl, site) * pl->head_dim / seg));
            if (seg > maxw) maxw = seg;
        }
    m->o = nb__take(cache, &cu, BT * d);
    m->c = nb__site_on(pl, 3) ? nb__take(cache, &cu, BT * d) : m->o;
    if (pl->desc.memory == NB_ATTN_MEMORY_PROBS)
        m->probs = nb__take(cache, &cu, (size_t)B * pl->desc.n_heads * T * T);
    else
        m->lse = nb__take(cache, &cu, (size_t)B * pl->desc.n_heads * T);
    m->dqkv = nb__take(scratch, &su, BT * P);
    m->dc = nb__take(scratch, &su, BT * d);
    m->tiles = nb__take(scratch, &su, (size_t)nt * 2 * NB__TILE * T);
    m->partials = nb__take(scratch, &su, (size_t)nt * 2 * NB__PAD(maxw));
    m->n_cache = cu;
    m->n_scratch = su;
}

NBDEF nb_result nb_attn_plan_make(nb_ctx* ctx, nb_attn_plan* plan, const nb_attn_desc* desc,
                                  int max_batch, int max_seq) {
    nb_attn_desc d;
    nb__attn_mem m;
    int site, nparams;
    NB__CHECK(!plan || !desc, NB_ERR_NULL, "nb_attn_plan_make: plan and desc are required");
    d = *desc;
    if (d.n_kv_heads == 0) d.n_kv_heads = d.n_heads;
    if (d.width == NB_WIDTH_DEFAULT) d.width = NB_WIDTH_PER_HEAD;
    if (d.norm == NB_NORM_DEFAULT) d.norm = NB_NORM_RMS;
    if (d.eps == 0) d.eps = (nb_real)1e-5;
    if (d.rope_theta == 0) d.rope_theta = 10000;
    NB__CHECK(d.d_model <= 0 || d.n_heads <= 0 || d.n_kv_heads <= 0, NB_ERR_CONFIG,
              "nb_attn_plan_make: d_model (%d), n_heads (%d), n_kv_heads (%d) must be > 0",
              d.d_model, d.n_heads, d.n_kv_heads);
    NB__CHECK(d.d_model % d.n_heads, NB_ERR_CONFIG,
              "nb_attn_plan_make: d_model (%d) is not divisible by n_heads (%d)", d.d_model,
              d.n_heads);
    NB__CHECK(d.n_heads % d.n_kv_heads, NB_ERR_CONFIG,
              "nb_attn_plan_make: n_heads (%d) is not divisible by n_kv_heads (%d)", d.n_heads,
              d.n_kv_heads);
    NB__CHECK(d.rope && (d.d_model / d.n_heads) % 2, NB_ERR_CONFIG,
              "nb_attn_plan_make: RoPE needs an even head dimension (d_k = %d)",
              d.d_model / d.n_heads);
    NB__CHECK(d.sites & ~(unsigned)NB_SITES_QKVC, NB_ERR_CONFIG,
              "nb_attn_plan_make: sites (0x%x) has bits other than NB_SITE_Q|K|V|C", d.sites);
    NB__CHECK(d.width != NB_WIDTH_PER_HEAD && d.width != NB_WIDTH_FULL, NB_ERR_CONFIG,
              "nb_attn_plan_make: unknown norm width %d", (int)d.width);
    NB__CHECK(d.norm != NB_NORM_RMS && d.norm != NB_NORM_LAYER, NB_ERR_CONFIG,
              "nb_attn_plan_make: unknown norm type %d", (int)d.norm);
    NB__CHECK(!(d.eps > 0), NB_ERR_CONFIG, "nb_attn_plan_make: eps (%g) must be > 0",
              (double)d.eps);
    NB__CHECK(d.rope && !(d.rope_theta > 1), NB_ERR_CONFIG,
              "nb_attn_plan_make: rope_theta (%g) must be > 1", (double)d.rope_theta);
    NB__CHECK(max_batch <= 0 || max_seq <= 0, NB_ERR_SHAPE,
              "nb_attn_plan_make: max_batch (%d) and max_seq (%d) must be > 0", max_batch,
              max_seq);
    if (d.memory == NB_ATTN_MEMORY_DEFAULT)
        d.memory = (double)max_batch * d.n_heads * max_seq * max_seq <= 64.0 * 1024 * 1024
                       ? NB_ATTN_MEMORY_PROBS : NB_ATTN_MEMORY_LSE;
    NB__CHECK(d.memory != NB_ATTN_MEMORY_PROBS && d.memory != NB_ATTN_MEMORY_LSE, NB_ERR_CONFIG,
              "nb_attn_plan_make: unknown memory mode %d", (int)d.memory);
    memset(plan, 0, sizeof *plan);
    plan->desc = d;
    plan->max_batch = max_batch;
    plan->max_seq = max_seq;
    plan->max_threads = nb_num_threads(ctx);
    plan->head_dim = d.d_model / d.n_heads;
    plan->qkv_width = d.d_model + 2 * d.n_kv_heads * plan->head_dim;
    plan->group = d.n_heads / d.n_kv_heads;
    nparams = plan->qkv_width * d.d_model + d.d_model * d.d_model;
    if (!d.no_gain)
        for (site = 0; site < 4; site++)
            if (nb__site_on(plan, site)) nparams += nb__site_seg(plan, site);
    plan->n_params = (size_t)nparams;
    nb__attn_carve(plan, max_batch, max_seq, plan->max_threads, NULL, NULL, &m);
    plan->n_cache = m.n_cache;
    plan->n_scratch = m.n_scratch;
    return NB_OK;
}

NBDEF void nb_attn_params_bind(const nb_attn_plan* plan, nb_real* base, nb_attn_params* p) {
    const int d = plan->desc.d_model;
    nb_real** gains[4];
    int site;
    gains[0] = &p->q_gain; gains[1] = &p->k_gain; gains[2] = &p->v_gain; gains[3] = &p->c_gain;
    p->w_qkv = base;
    base += (size_t)plan->qkv_width * d;
    p->w_o = base;
    base += (size_t)d * d;
    for (site = 0; site < 4; site++) {
        *gains[site] = NULL;
        if (!plan->desc.no_gain && nb__site_on(plan, site)) {
            *gains[site] = base;
            base += nb__site_seg(plan, site);
        }
    }
}

static nb_result nb__attn_check_call(nb_ctx* ctx, const char* fn, const nb_attn_plan* pl,
                                     const nb_attn_params* p, int B, int T, const void* a,
                                     const void* b, const void* cache, const void* scratch) {
    NB__CHECK(!pl || !p, NB_ERR_NULL, "%s: plan and params are required", fn);
    NB__CHECK(B <= 0 || T <= 0, NB_ERR_SHAPE, "%s: B (%d) and T (%d) must be > 0", fn, B, T);
    NB__CHECK(B > pl->max_batch || T > pl->max_seq, NB_ERR_SHAPE,
              "%s: B=%d, T=%d exceed the plan's maximum (%d, %d)", fn, B, T, pl->max_batch,
              pl->max_seq);
    NB__CHECK(nb_num_threads(ctx) > pl->max_threads, NB_ERR_CONFIG,
              "%s: %d threads requested but the plan sized its scratch for %d", fn,
              nb_num_threads(ctx), pl->max_threads);
    NB__CHECK(!a || !b || !cache || !scratch || !p->w_qkv || !p->w_o, NB_ERR_NULL,
              "%s: inputs, outputs, cache, scratch, w_qkv and w_o are required", fn);
    NB__CHECK(!pl->desc.no_gain && ((nb__site_on(pl, 0) && !p->q_gain) ||
                                    (nb__site_on(pl, 1) && !p->k_gain) ||
                                    (nb__site_on(pl, 2) && !p->v_gain) ||
                                    (nb__site_on(pl, 3) && !p->c_gain)),
              NB_ERR_NULL, "%s: a normalized site has no gain pointer", fn);
    return NB_OK;
}

/* Norm of a site, forward or backward, dispatching on the norm type; stats holds rstd, then
   (LayerNorm) the means. */
static nb_result nb__site_norm(nb_ctx* ctx, const nb_attn_plan* pl, int backward, nb_real* y,
                               int ldy, nb_real* stats, const nb_real* x, int ldx,
                               const nb_real* dy, const nb_real* gain, nb_real* dgain,
                               int rows, int width, int seg, nb_real* partials) {
    const size_t nstat = (size_t)rows * (width / seg);
    if (pl->desc.norm == NB_NORM_LAYER) {
        if (backward)
            return nb_layernorm_backward(ctx, y, ldy, dgain, NULL, dy, ldy, x, ldx, stats + nstat,
                                         stats, gain, rows, width, seg, 0, partials);
        return nb_layernorm_forward(ctx, y, ldy, stats + nstat, stats, x, ldx, gain, NULL, rows,
                                    width, seg, pl->desc.eps);
    }
    if (backward)
        return nb_rmsnorm_backward(ctx, y, ldy, dgain, dy, ldy, x, ldx, stats, gain, rows, width,
                                   seg, 0, partials);
    return nb_rmsnorm_forward(ctx, y, ldy, stats, x, ldx, gain, rows, width, seg, pl->desc.eps);
}

/* Softmax of one score row in place: p_j = exp(scale*s_j - lse) for j < n, 0 for n <= j < cols.
   Returns lse. */
static nb_real nb__softmax_row(nb_real* s, int n, int cols, nb_real scale) {
    nb_real mx = -INFINITY, sum = 0, inv;
    int j;
    for (j = 0; j < n; j++) mx = s[j] > mx ? s[j] : mx;
    for (j = 0; j < n; j++) {
        s[j] = NB__EXP(scale * (s[j] - mx));
        sum += s[j];
    }
    inv = 1 / sum;
    for (j = 0; j < n; j++) s[j] *= inv;
    for (j = n; j < cols; j++) s[j] = 0;
    return scale * mx + NB__LOG(sum);
}

/* Scores of query rows [i0, i0+rows) of head h against keys [0, ncols) into p (ld T), then
   probabilities. lse given (backward recompute): p = exp(scale*s - lse); else softmax, and the
   row lse is written to lse_out when not NULL. */
static void nb__attn_probs(const nb_attn_plan* pl, const nb_real* qkv, int T, int b, int h,
                           int i0, int rows, int ncols, nb_real* p, const nb_real* lse_in,
                           nb_real* lse_out) {
    const int P = pl->qkv_width, dk = pl->head_dim, j = h / pl->group;
    const nb_real scale = (nb_real)(1.0 / sqrt((double)dk));
    const nb_real* q = qkv + ((size_t)b * T + i0) * P + (size_t)h * dk;
    const nb_real* k = qkv + (size_t)b * T * P + pl->desc.d_model + (size_t)j * dk;
    int r, c;
    nb__gemm1(0, 1, rows, ncols, dk, 1, q, P, k, P, 0, p, T);
    for (r = 0; r < rows; r++) {
        nb_real* pr = p + (size_t)r * T;
        const int n = pl->desc.non_causal ? ncols : i0 + r + 1;
        if (lse_in) {
            const nb_real l = lse_in[r];
            for (c = 0; c < n; c++) pr[c] = NB__EXP(scale * pr[c] - l);
            for (c = n; c < ncols; c++) pr[c] = 0;
        } else {
            const nb_real l = nb__softmax_row(pr, n, ncols, scale);
            if (lse_out) lse_out[r] = l;
        }
    }
}

/* Tasks (b, h, row tile), biggest causal tiles first so the dynamic schedule balances. Each task
   writes its own rows of O (and P or lse), so any schedule gives the same bits. */
static void nb__attn_core_forward(nb_ctx* ctx, const nb_attn_plan* pl, int B, int T,
                                  const nb__attn_mem* m) {
    const int H = pl->desc.n_heads, dk = pl->head_dim, P = pl->qkv_width, d = pl->desc.d_model;
    const int ntiles = (T + NB__TILE - 1) / NB__TILE, ntasks = B * H * ntiles;
    const int par = nb_blas_threads() == 1; /* else BLAS threads each call, we call serially */
    int task;
    (void)par; (void)ctx;
    NB__OMP(parallel for schedule(dynamic, 1) num_threads(nb_num_threads(ctx)) if(par))
    for (task = 0; task < ntasks; task++) {
        const int tile = ntiles - 1 - task / (B * H), bh = task % (B * H);
        const int b = bh / H, h = bh % H, i0 = tile * NB__TILE;
        const int rows = T - i0 < NB__TILE ? T - i0 : NB__TILE;
        const int ncols = pl->desc.non_causal ? T : i0 + rows;
        const size_t prow = ((size_t)b * H + h) * T + i0;
        nb_real* p = m->probs ? m->probs + prow * T
                              : m->tiles + (size_t)omp_get_thread_num() * 2 * NB__TILE * T;
        const nb_real* v = m->qkv + (size_t)b * T * P + d + (size_t)(pl->desc.n_kv_heads +
                                                                     h / pl->group) * dk;
        nb__attn_probs(pl, m->qkv, T, b, h, i0, rows, ncols, p, NULL, m->lse ? m->lse + prow : NULL);
        nb__gemm1(0, 0, rows, dk, ncols, 1, p, T, v, P, 0,
                  m->o + ((size_t)b * T + i0) * d + (size_t)h * dk, d);
    }
}

/* Tasks (b, KV head j): the g query heads sharing j accumulate into dK_j and dV_j, so they run
   in one task, in a fixed order. dS = scale * P (dP - rowsum(dP P)) is the gradient of the
   unscaled scores Q K^T; dQ = dS K, dK += dS^T Q, dV += P^T dO. */
static void nb__attn_core_backward(nb_ctx* ctx, const nb_attn_plan* pl, int B, int T,
                                   const nb__attn_mem* m) {
    const int H = pl->desc.n_heads, Hkv = pl->desc.n_kv_heads, dk = pl->head_dim;
    const int P = pl->qkv_width, d = pl->desc.d_model, g = pl->group;
    const int ntiles = (T + NB__TILE - 1) / NB__TILE, ntasks = B * Hkv;
    const nb_real scale = (nb_real)(1.0 / sqrt((double)dk));
    const int par = nb_blas_threads() == 1; /* else BLAS threads each call, we call serially */
    int task;
    (void)par; (void)ctx;
    NB__OMP(parallel for schedule(dynamic, 1) num_threads(nb_num_threads(ctx)) if(par))
    for (task = 0; task < ntasks; task++) {
        const int b = task / Hkv, j = task % Hkv;
        nb_real* ptile = m->tiles + (size_t)omp_get_thread_num() * 2 * NB__TILE * T;
        nb_real* dp = ptile + (size_t)NB__TILE * T;
        const size_t base = (size_t)b * T * P;
        nb_real* dk_j = m->dqkv + base + d + (size_t)j * dk;
        nb_real* dv_j = m->dqkv + base + d + (size_t)(Hkv + j) * dk;
        const nb_real* k_j = m->qkv + base + d + (size_t)j * dk;
        const nb_real* v_j = m->qkv + base + d + (size_t)(Hkv + j) * dk;
        int h, tile, r, c;
        for (h = j * g; h < (j + 1) * g; h++)
            for (tile = 0; tile < ntiles; tile++) {
                const int i0 = tile * NB__TILE, rows = T - i0 < NB__TILE ? T - i0 : NB__TILE;
                const int ncols = pl->desc.non_causal ? T : i0 + rows;
                const size_t prow = ((size_t)b * H + h) * T + i0;
                const nb_real* q = m->qkv + base + (size_t)i0 * P + (size_t)h * dk;
                nb_real* dq = m->dqkv + base + (size_t)i0 * P + (size_t)h * dk;
                const nb_real* dout = m->dc + ((size_t)b * T + i0) * d + (size_t)h * dk;
                const nb_real* p = ptile;
                if (m->probs) p = m->probs + prow * T;
                else nb__attn_probs(pl, m->qkv, T, b, h, i0, rows, ncols, ptile, m->lse + prow, NULL);
                nb__gemm1(0, 1, rows, ncols, dk, 1, dout, d, v_j, P, 0, dp, T);  /* dP = dO V^T */
                nb__gemm1(1, 0, ncols, dk, rows, 1, p, T, dout, d, 1, dv_j, P);   /* dV += P^T dO */
                for (r = 0; r < rows; r++) {
                    const nb_real* pr = p + (size_t)r * T;
                    nb_real* dpr = dp + (size_t)r * T;
                    const int n = pl->desc.non_causal ? ncols : i0 + r + 1;
                    nb_real dot = 0;
                    for (c = 0; c < n; c++) dot += dpr[c] * pr[c];
                    for (c = 0; c < n; c++) dpr[c] = scale * pr[c] * (dpr[c] - dot);
                    for (c = n; c < ncols; c++) dpr[c] = 0;
                }
                nb__gemm1(0, 0, rows, dk, ncols, 1, dp, T, k_j, P, 1, dq, P);    /* dQ += dS K */
                nb__gemm1(1, 0, ncols, dk, rows, 1, dp, T, q, P, 1, dk_j, P);    /* dK += dS^T Q */
            }
    }
}

NBDEF nb_result nb_attn_forward(nb_ctx* ctx, const nb_attn_plan* plan, const nb_attn_params* p,
                                nb_real* out, const nb_real* x, int B, int T, nb_real* cache,
                                nb_real* scratch) {
    const nb_attn_plan* pl = plan;
    nb__attn_mem m;
    nb_result rc = nb__attn_check_call(ctx, "nb_attn_forward", plan, p, B, T, out, x, cache,
                                       scratch);
    const nb_real* gains[4];
    int site, d, P, BT;
    if (rc) return rc;
    d = pl->desc.d_model; P = pl->qkv_width; BT = B * T;
    gains[0] = p->q_gain; gains[1] = p->k_gain; gains[2] = p->v_gain; gains[3] = p->c_gain;
    nb__attn_carve(pl, B, T, pl->max_threads, cache, scratch, &m);
    /* [Q|K|V] = x W_qkv^T; with site norms the raw projection is kept for their backward */
    nb_gemm(ctx, 0, 1, BT, P, d, 1, x, d, p->w_qkv, d, 0, m.raw ? m.raw : m.qkv, P);
    if (m.raw) memcpy(m.qkv, m.raw, (size_t)BT * P * sizeof(nb_real));
    for (site = 0; site < 3; site++)
        if (nb__site_on(pl, site)) {
            const int off = nb__site_offset(pl, site), w = nb__site_heads(pl, site) * pl->head_dim;
            rc = nb__site_norm(ctx, pl, 0, m.qkv + off, P, m.stat[site], m.raw + off, P, NULL,
                               pl->desc.no_gain ? NULL : gains[site], NULL, BT, w,
                               nb__site_seg(pl, site), NULL);
            if (rc) return rc;
        }
    /* RoPE after the norms; Q and K heads are adjacent in a row, so one call rotates both */
    if (pl->desc.rope)
        nb_rope(ctx, m.qkv, P, B, T, pl->desc.n_heads + pl->desc.n_kv_heads, pl->head_dim,
                pl->desc.rope_theta, 0);
    nb__attn_core_forward(ctx, pl, B, T, &m);
    if (nb__site_on(pl, 3)) {
        rc = nb__site_norm(ctx, pl, 0, m.c, d, m.stat[3], m.o, d, NULL,
                           pl->desc.no_gain ? NULL : gains[3], NULL, BT, d, nb__site_seg(pl, 3),
                           NULL);
        if (rc) return rc;
    }
    return nb_gemm(ctx, 0, 1, BT, d, d, 1, m.c, d, p->w_o, d, 0, out, d);
}

NBDEF nb_result nb_attn_backward(nb_ctx* ctx, const nb_attn_plan* plan, const nb_attn_params* p,
                                 nb_attn_params* g, nb_real* dx, const nb_real* dout,
                                 const nb_real* x, int B, int T, const nb_real* cache,
                                 nb_real* scratch, int accumulate_dx) {
    const nb_attn_plan* pl = plan;
    nb__attn_mem m;
    nb_result rc = nb__attn_check_call(ctx, "nb_attn_backward", plan, p, B, T, dx, dout, cache,
                                       scratch);
    const nb_real* gains[4];
    nb_real* dgains[4];
    int site, d, P, BT;
    if (rc) return rc;
    NB__CHECK(!g || !g->w_qkv || !g->w_o || !x, NB_ERR_NULL,
              "nb_attn_backward: gradients (w_qkv, w_o) and x are required");
    d = pl->desc.d_model; P = pl->qkv_width; BT = B * T;
    gains[0] = p->q_gain; gains[1] = p->k_gain; gains[2] = p->v_gain; gains[3] = p->c_gain;
    dgains[0] = g->q_gain; dgains[1] = g->k_gain; dgains[2] = g->v_gain; dgains[3] = g->c_gain;
    /* the cache is only read; carving needs a non-const base */
    nb__attn_carve(pl, B, T, pl->max_threads, (nb_real*)(size_t)cache, scratch, &m);
    nb_gemm(ctx, 0, 0, BT, d, d, 1, dout, d, p->w_o, d, 0, m.dc, d);     /* dC = dout W_o */
    nb_gemm(ctx, 1, 0, d, d, BT, 1, dout, d, m.c, d, 1, g->w_o, d);      /* dW_o += dout^T C */
    if (nb__site_on(pl, 3)) {                                             /* dO = Nc'(dC), in place */
        rc = nb__site_norm(ctx, pl, 1, m.dc, d, m.stat[3], m.o, d, m.dc,
                           pl->desc.no_gain ? NULL : gains[3], pl->desc.no_gain ? NULL : dgains[3],
                           BT, d, nb__site_seg(pl, 3), m.partials);
        if (rc) return rc;
    }
    memset(m.dqkv, 0, (size_t)BT * P * sizeof(nb_real));
    nb__attn_core_backward(ctx, pl, B, T, &m);
    if (pl->desc.rope) /* the transpose of a rotation is the inverse rotation */
        nb_rope(ctx, m.dqkv, P, B, T, pl->desc.n_heads + pl->desc.n_kv_heads, pl->head_dim,
                pl->desc.rope_theta, 1);
    for (site = 0; site < 3; site++)
        if (nb__site_on(pl, site)) {
            const int off = nb__site_offset(pl, site), w = nb__site_heads(pl, site) * pl->head_dim;
            rc = nb__site_norm(ctx, pl, 1, m.dqkv + off, P, m.stat[site], m.raw + off, P,
                               m.dqkv + off, pl->desc.no_gain ? NULL : gains[site],
                               pl->desc.no_gain ? NULL : dgains[site], BT, w,
                               nb__site_seg(pl, site), m.partials);
            if (rc) return rc;
        }
    nb_gemm(ctx, 1, 0, P, d, BT, 1, m.dqkv, P, x, d, 1, g->w_qkv, d);    /* dW_qkv += dQKV^T x */
    return nb_gemm(ctx, 0, 0, BT, d, P, 1, m.dqkv, P, p->w_qkv, d,        /* dx = dQKV W_qkv */
                   accumulate_dx ? 1 : 0, dx, d);
}

/* ---- feed-forward sublayer ------------------------------------------------------------------ */

NBDEF nb_result nb_ffn_plan_make(nb_ctx* ctx, nb_ffn_plan* plan, const nb_ffn_desc* desc,
                                 int max_batch, int max_seq) {
    nb_ffn_desc d;
    size_t BT;
    int f;
    NB__CHECK(!plan || !desc, NB_ERR_NULL, "nb_ffn_plan_make: plan and desc are required");
    d = *desc;
    if (d.type == NB_FFN_DEFAULT) d.type = NB_FFN_SWIGLU;
    NB__CHECK(d.type != NB_FFN_SWIGLU && d.type != NB_FFN_GELU_TANH && d.type != NB_FFN_GELU_ERF,
              NB_ERR_CONFIG, "nb_ffn_plan_make: unknown FFN type %d", (int)d.type);
    NB__CHECK(d.d_model <= 0 || d.d_ff < 0, NB_ERR_CONFIG,
              "nb_ffn_plan_make: d_model (%d) must be > 0 and d_ff (%d) >= 0", d.d_model, d.d_ff);
    NB__CHECK(d.bias < -1 || d.bias > 1, NB_ERR_CONFIG,
              "nb_ffn_plan_make: bias (%d) must be -1, 0 or 1", d.bias);
    NB__CHECK(max_batch <= 0 || max_seq <= 0, NB_ERR_SHAPE,
              "nb_ffn_plan_make: max_batch (%d) and max_seq (%d) must be > 0", max_batch,
              max_seq);
    if (d.d_ff == 0)
        d.d_ff = d.type == NB_FFN_SWIGLU ? (8 * d.d_model / 3 + 63) / 64 * 64 : 4 * d.d_model;
    if (d.bias == 0) d.bias = d.type == NB_FFN_SWIGLU ? -1 : 1;
    f = d.d_ff;
    memset(plan, 0, sizeof *plan);
    plan->desc = d;
    plan->max_batch = max_batch;
    plan->max_seq = max_seq;
    plan->in_width = d.type == NB_FFN_SWIGLU ? 2 * f : f;
    plan->n_params = (size_t)plan->in_width * d.d_model + (size_t)d.d_model * f +
                     (d.bias > 0 ? (size_t)plan->in_width + d.d_model : 0);
    BT = (size_t)max_batch * max_seq;
    plan->n_cache = NB__PAD(BT * plan->in_width) + NB__PAD(BT * f);        /* h, a */
    plan->n_scratch = NB__PAD(BT * plan->in_width) + NB__PAD(BT * f) + NB__PAD(BT); /* dh, da, ones */
    (void)ctx;
    return NB_OK;
}

NBDEF void nb_ffn_params_bind(const nb_ffn_plan* plan, nb_real* base, nb_ffn_params* p) {
    const int d = plan->desc.d_model, f = plan->desc.d_ff, bias = plan->desc.bias > 0;
    p->w_in = base;
    base += (size_t)plan->in_width * d;
    p->b_in = bias ? base : NULL;
    base += bias ? plan->in_width : 0;
    p->w_out = base;
    base += (size_t)d * f;
    p->b_out = bias ? base : NULL;
}

static nb_result nb__ffn_check_call(nb_ctx* ctx, const char* fn, const nb_ffn_plan* pl,
                                    const nb_ffn_params* p, int B, int T, const void* a,
                                    const void* b, const void* cache, const void* scratch) {
    NB__CHECK(!pl || !p, NB_ERR_NULL, "%s: plan and params are required", fn);
    NB__CHECK(B <= 0 || T <= 0, NB_ERR_SHAPE, "%s: B (%d) and T (%d) must be > 0", fn, B, T);
    NB__CHECK(B > pl->max_batch || T > pl->max_seq, NB_ERR_SHAPE,
              "%s: B=%d, T=%d exceed the plan's maximum (%d, %d)", fn, B, T, pl->max_batch,
              pl->max_seq);
    NB__CHECK(!a || !b || !cache || !scratch || !p->w_in || !p->w_out, NB_ERR_NULL,
              "%s: inputs, outputs, cache, scratch, w_in and w_out are required", fn);
    NB__CHECK(pl->desc.bias > 0 && (!p->b_in || !p->b_out), NB_ERR_NULL,
              "%s: the plan has biases but b_in or b_out is NULL", fn);
    return NB_OK;
}

static nb_real nb__sigmoid(nb_real z) { return 1 / (1 + NB__EXP(-z)); }

/* GELU and its derivative. tanh form: 0.5 x (1 + tanh(u)), u = sqrt(2/pi)(x + 0.044715 x^3);
   erf form: x Phi(x), derivative Phi(x) + x phi(x). */
static nb_real nb__gelu(int erf_form, nb_real x, nb_real* dgelu) {
    if (erf_form) {
        const double cdf = 0.5 * (1 + erf((double)x * 0.7071067811865476));
        const double pdf = 0.3989422804014327 * exp(-0.5 * (double)x * x);
        if (dgelu) *dgelu = (nb_real)(cdf + x * pdf);
        return (nb_real)(x * cdf);
    } else {
        const nb_real k = (nb_real)0.7978845608028654, c = (nb_real)0.044715;
        const nb_real t = (nb_real)tanh((double)(k * (x + c * x * x * x)));
        if (dgelu)
            *dgelu = (nb_real)0.5 * (1 + t) +
                     (nb_real)0.5 * x * (1 - t * t) * k * (1 + 3 * c * x * x);
        return (nb_real)0.5 * x * (1 + t);
    }
}

/* out[r] += bias for every row */
static void nb__add_bias(nb_ctx* ctx, nb_real* y, const nb_real* bias, int rows, int n) {
    int r;
    (void)ctx;
    NB__OMP(parallel for schedule(static) num_threads(nb_num_threads(ctx)))
    for (r = 0; r < rows; r++) {
        nb_real* yr = y + (size_t)r * n;
        int i;
        for (i = 0; i < n; i++) yr[i] += bias[i];
    }
}

NBDEF nb_result nb_ffn_forward(nb_ctx* ctx, const nb_ffn_plan* plan, const nb_ffn_params* p,
                               nb_real* out, const nb_real* x, int B, int T, nb_real* cache,
                               nb_real* scratch) {
    nb_result rc = nb__ffn_check_call(ctx, "nb_ffn_forward", plan, p, B, T, out, x, cache, scratch);
    int d, f, W, BT, r;
    nb_real *h, *a;
    if (rc) return rc;
    d = plan->desc.d_model; f = plan->desc.d_ff; W = plan->in_width; BT = B * T;
    h = cache;
    a = cache + NB__PAD((size_t)BT * W);
    nb_gemm(ctx, 0, 1, BT, W, d, 1, x, d, p->w_in, d, 0, h, W);
    if (p->b_in) nb__add_bias(ctx, h, p->b_in, BT, W);
    NB__OMP(parallel for schedule(static) num_threads(nb_num_threads(ctx)))
    for (r = 0; r < BT; r++) {
        const nb_real* hr = h + (size_t)r * W;
        nb_real* ar = a + (size_t)r * f;
        int i;
        if (plan->desc.type == NB_FFN_SWIGLU)
            for (i = 0; i < f; i++) ar[i] = hr[f + i] * nb__sigmoid(hr[f + i]) * hr[i];
        else
            for (i = 0; i < f; i++)
                ar[i] = nb__gelu(plan->desc.type == NB_FFN_GELU_ERF, hr[i], NULL);
    }
    nb_gemm(ctx, 0, 1, BT, d, f, 1, a, f, p->w_out, f, 0, out, d);
    if (p->b_out) nb__add_bias(ctx, out, p->b_out, BT, d);
    return NB_OK;
}

NBDEF nb_result nb_ffn_backward(nb_ctx* ctx, const nb_ffn_plan* plan, const nb_ffn_params* p,
                                nb_ffn_params* g, nb_real* dx, const nb_real* dout,
                                const nb_real* x, int B, int T, const nb_real* cache,
                                nb_real* scratch, int accumulate_dx) {
    nb_result rc = nb__ffn_check_call(ctx, "nb_ffn_backward", plan, p, B, T, dx, dout, cache,
                                      scratch);
    int d, f, W, BT, r;
    const nb_real *h, *a;
    nb_real *dh, *da, *ones;
    if (rc) return rc;
    NB__CHECK(!g || !g->w_in || !g->w_out || !x || (plan->desc.bias > 0 && (!g->b_in || !g->b_out)),
              NB_ERR_NULL, "nb_ffn_backward: gradients and x are required");
    d = plan->desc.d_model; f = plan->desc.d_ff; W = plan->in_width; BT = B * T;
    h = cache;
    a = cache + NB__PAD((size_t)BT * W);
    dh = scratch;
    da = scratch + NB__PAD((size_t)BT * W);
    ones = da + NB__PAD((size_t)BT * f);
    nb_gemm(ctx, 0, 0, BT, f, d, 1, dout, d, p->w_out, f, 0, da, f);   /* da = dout W_out */
    nb_gemm(ctx, 1, 0, d, f, BT, 1, dout, d, a, f, 1, g->w_out, f);    /* dW_out += dout^T a */
    if (g->b_out) {                     /* column sums as a GEMM with ones: deterministic, fast */
        for (r = 0; r < BT; r++) ones[r] = 1;
        nb_gemm(ctx, 1, 0, d, 1, BT, 1, dout, d, ones, 1, 1, g->b_out, 1);
    }
    NB__OMP(parallel for schedule(static) num_threads(nb_num_threads(ctx)))
    for (r = 0; r < BT; r++) {
        const nb_real* hr = h + (size_t)r * W;
        const nb_real* dar = da + (size_t)r * f;
        nb_real* dhr = dh + (size_t)r * W;
        int i;
        if (plan->desc.type == NB_FFN_SWIGLU) {
            /* a = silu(z) u: du = da silu(z), dz = da u sig(z)(1 + z(1 - sig(z))) */
            for (i = 0; i < f; i++) {
                const nb_real u = hr[i], z = hr[f + i], sg = nb__sigmoid(z);
                dhr[i] = dar[i] * z * sg;
                dhr[f + i] = dar[i] * u * sg * (1 + z * (1 - sg));
            }
        } else {
            for (i = 0; i < f; i++) {
                nb_real dg;
                nb__gelu(plan->desc.type == NB_FFN_GELU_ERF, hr[i], &dg);
                dhr[i] = dar[i] * dg;
            }
        }
    }
    nb_gemm(ctx, 1, 0, W, d, BT, 1, dh, W, x, d, 1, g->w_in, d);       /* dW_in += dh^T x */
    if (g->b_in) {
        for (r = 0; r < BT; r++) ones[r] = 1;
        nb_gemm(ctx, 1, 0, W, 1, BT, 1, dh, W, ones, 1, 1, g->b_in, 1);
    }
    return nb_gemm(ctx, 0, 0, BT, d, W, 1, dh, W, p->w_in, d,           /* dx = dh W_in */
                   accumulate_dx ? 1 : 0, dx, d);
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
