/* Primitives against independent references, built three ways (float + BLAS, float64 + BLAS,
   float + reference GEMM):
   - forwards against a naive double-precision implementation written here;
   - backwards against central finite differences of that double reference (loss = sum(dy*y)),
     so a missing term shows up as an O(1) relative error. In the float64 build the same code
     is checked to ~1e-8; in float32 to float rounding (NBT_ATOL/NBT_RTOL in nbtest.h);
   - nb_gemm against nb_gemm_ref and a naive triple loop, every transpose and beta. */
#define NORMBLOCKS_IMPLEMENTATION
#include "normblocks.h"
#include "nbtest.h"

/* ---- double references ---- */

/* mode 0 = RMSNorm, 1 = LayerNorm, 2 = DyT (tanh(alpha x), no statistics), 3 = Derf
   (erf(alpha x + shift), libm's erf). Strided rows, segments sharing gain/bias. */
static void ref_norm(int mode, double* y, const double* x, int ld, const double* gain,
                     const double* bias, double alpha, double shift, int rows, int width,
                     int seg, double eps) {
    int r, s, i;
    for (r = 0; r < rows; r++)
        for (s = 0; s < width / seg; s++) {
            const double* xs = x + r * ld + s * seg;
            double* ys = y + r * ld + s * seg;
            double mu = 0, v = 0;
            if (mode >= 2) {
                for (i = 0; i < seg; i++)
                    ys[i] = (mode == 2 ? tanh(alpha * xs[i]) : erf(alpha * xs[i] + shift)) *
                                (gain ? gain[i] : 1) + (bias ? bias[i] : 0);
                continue;
            }
            if (mode == 1) {
                for (i = 0; i < seg; i++) mu += xs[i];
                mu /= seg;
            }
            for (i = 0; i < seg; i++) v += (xs[i] - mu) * (xs[i] - mu);
            v /= seg;
            for (i = 0; i < seg; i++) {
                ys[i] = (xs[i] - mu) / sqrt(v + eps) * (gain ? gain[i] : 1);
                if (bias) ys[i] += bias[i];
            }
        }
}

static void ref_softmax(double* p, const double* s, int ld, int rows, int cols, double scale,
                        int causal) {
    int i, j;
    for (i = 0; i < rows; i++) {
        int n = causal ? i + 1 + cols - rows : cols;
        double mx = -1e300, sum = 0;
        if (n > cols) n = cols;
        for (j = 0; j < cols; j++) p[i * ld + j] = 0;
        if (n <= 0) continue;
        for (j = 0; j < n; j++) if (s[i * ld + j] > mx) mx = s[i * ld + j];
        for (j = 0; j < n; j++) sum += p[i * ld + j] = exp(scale * (s[i * ld + j] - mx));
        for (j = 0; j < n; j++) p[i * ld + j] /= sum;
    }
}

static double dot(const double* a, const double* b, size_t n) {
    double s = 0;
    size_t i;
    for (i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

static double* to_d(const nb_real* x, size_t n) {
    double* d = (double*)malloc(n * sizeof(double));
    size_t i;
    for (i = 0; i < n; i++) d[i] = (double)x[i];
    return d;
}

/* ---- norm cases ---- */

typedef struct norm_case {
    const char* name;
    int mode, rows, width, seg, ld, has_gain, has_bias, accumulate;
    double eps, xscale, xshift;
    /* float builds: tolerance multiplier for ill-conditioned inputs. With |mean|/std = 1000 the
       float mean alone is off by ~ulp(1000) = 6e-5, so xhat is too, whatever the algorithm;
       a one-pass E[x^2]-E[x]^2 variance would be off by ~3e-2, still far outside. */
    double float_tol;
    double alpha; /* DyT's, Derf's (modes 2, 3) */
    double shift; /* Derf's */
} norm_case;

/* loss(p) = sum(dy * norm(x; gain, bias)) with one of x/gain/bias perturbed */
typedef struct norm_args {
    const norm_case* c;
    int seg;
    double *x, *gain, *bias, *dy, *y, as[2]; /* alpha, shift */
} norm_args;
static double norm_loss(const norm_args* a) {
    const norm_case* c = a->c;
    ref_norm(c->mode, a->y, a->x, c->ld, a->gain, a->bias, a->as[0], a->as[1], c->rows, c->width,
             a->seg, c->eps);
    return dot(a->y, a->dy, (size_t)c->rows * c->ld);
}
/* Central differences at h and h/2, Richardson-extrapolated (the h^2 error term cancels), so h
   can be 10x larger than a plain difference allows, and the loss's rounding (~1e-16 of a sum of
   a few thousand terms, in whatever order the compiler picks: -ffast-math builds reorder it)
   stays ~1e-9 after the division by h. */
static double fd_central(norm_args* a, double* v, double h) {
    const double keep = *v;
    double lp, lm;
    *v = keep + h; lp = norm_loss(a);
    *v = keep - h; lm = norm_loss(a);
    *v = keep;
    return (lp - lm) / (2 * h);
}
static void fd_grad(norm_args* a, double* v, size_t n, double* g) {
    size_t i;
    for (i = 0; i < n; i++) {
        const double h = 1e-5 * (fabs(v[i]) > 1 ? fabs(v[i]) : 1);
        g[i] = (4 * fd_central(a, v + i, h / 2) - fd_central(a, v + i, h)) / 3;
    }
}

static void run_norm_case(const norm_case* c, nbt_rng* rng) {
    const int seg = c->seg ? c->seg : c->width, nseg = c->width / seg;
    const size_t n = (size_t)c->rows * c->ld, ns = (size_t)c->rows * nseg;
    nb_real *x = nbt_alloc(n), *y = nbt_alloc(n), *dy = nbt_alloc(n), *dx = nbt_alloc(n);
    nb_real *gain = nbt_alloc(seg), *bias = nbt_alloc(seg), *dgain = nbt_alloc(seg),
            *dbias = nbt_alloc(seg), *mean = nbt_alloc(ns), *rstd = nbt_alloc(ns);
    nb_real as[2], das[2] = {(nb_real)0.25, (nb_real)-0.5}; /* accumulated into */
    nb_real* scratch = nbt_alloc(nb_norm_scratch_size(NULL, c->width, c->seg));
    double *xd, *gd, *bd, *dyd, *yref = (double*)calloc(n, sizeof(double)),
           *gref = (double*)calloc(n, sizeof(double));
#ifdef NB_DOUBLE
    const double atol = NBT_ATOL, rtol = NBT_RTOL;
#else
    const double atol = NBT_ATOL * (c->float_tol ? c->float_tol : 1),
                 rtol = NBT_RTOL * (c->float_tol ? c->float_tol : 1);
#endif
    nb_ctx ctx;
    char name[1280];
    nb_result rc;
    norm_args a;
    size_t i;
    int r, j;
    memset(&ctx, 0, sizeof ctx);
    nbt_fill(rng, x, n, c->xshift, c->xscale);
    nbt_fill(rng, dy, n, 0, 1);
    nbt_fill(rng, gain, seg, 1, 0.5);
    nbt_fill(rng, bias, seg, 0, 0.5);
    nbt_fill(rng, dx, n, 0, 1); /* prefill: accumulate must add to it, overwrite must ignore it */
    xd = to_d(x, n); gd = to_d(gain, seg); bd = to_d(bias, seg); dyd = to_d(dy, n);
    a.c = c; a.seg = seg; a.x = xd; a.gain = c->has_gain ? gd : NULL; a.bias = c->has_bias ? bd : NULL;
    as[0] = (nb_real)c->alpha; as[1] = (nb_real)c->shift;
    a.dy = dyd; a.y = yref; a.as[0] = (double)as[0]; a.as[1] = (double)as[1];

    /* forward */
    if (c->mode == 2)
        rc = nb_dyt_forward(&ctx, y, c->ld, x, c->ld, as, c->has_gain ? gain : NULL,
                            c->has_bias ? bias : NULL, c->rows, c->width, c->seg);
    else if (c->mode == 3)
        rc = nb_derf_forward(&ctx, y, c->ld, x, c->ld, as, c->has_gain ? gain : NULL,
                             c->has_bias ? bias : NULL, c->rows, c->width, c->seg);
    else if (c->mode == 0)
        rc = nb_rmsnorm_forward(&ctx, y, c->ld, rstd, x, c->ld, c->has_gain ? gain : NULL,
                                c->rows, c->width, c->seg, (nb_real)c->eps);
    else
        rc = nb_layernorm_forward(&ctx, y, c->ld, mean, rstd, x, c->ld,
                                  c->has_gain ? gain : NULL, c->has_bias ? bias : NULL, c->rows,
                                  c->width, c->seg, (nb_real)c->eps);
    snprintf(name, sizeof name, "%s: forward returns NB_OK (%s)", c->name, ctx.err);
    nbt_check(rc == NB_OK, name);
    norm_loss(&a);
    for (r = 0; r < c->rows; r++) /* compare the used columns only; padding is not written */
        for (j = c->width; j < c->ld; j++) yref[r * c->ld + j] = (double)y[r * c->ld + j];
    snprintf(name, sizeof name, "%s: forward matches double reference", c->name);
    nbt_close(name, y, yref, n, atol, rtol);

    /* backward */
    {
        nb_real* dx0 = nbt_alloc(n);
        memcpy(dx0, dx, n * sizeof(nb_real));
        if (c->mode == 2)
            rc = nb_dyt_backward(&ctx, dx, c->ld, c->has_gain ? dgain : NULL,
                                 c->has_bias ? dbias : NULL, das, dy, c->ld, x, c->ld, as,
                                 c->has_gain ? gain : NULL, c->rows, c->width, c->seg,
                                 c->accumulate, scratch);
        else if (c->mode == 3)
            rc = nb_derf_backward(&ctx, dx, c->ld, c->has_gain ? dgain : NULL,
                                  c->has_bias ? dbias : NULL, das, dy, c->ld, x, c->ld, as,
                                  c->has_gain ? gain : NULL, c->rows, c->width, c->seg,
                                  c->accumulate, scratch);
        else if (c->mode == 0)
            rc = nb_rmsnorm_backward(&ctx, dx, c->ld, c->has_gain ? dgain : NULL, dy, c->ld, x,
                                     c->ld, rstd, c->has_gain ? gain : NULL, c->rows, c->width,
                                     c->seg, c->accumulate, scratch);
        else
            rc = nb_layernorm_backward(&ctx, dx, c->ld, dgain, c->has_bias ? dbias : NULL, dy,
                                       c->ld, x, c->ld, mean, rstd, c->has_gain ? gain : NULL,
                                       c->rows, c->width, c->seg, c->accumulate, scratch);
        snprintf(name, sizeof name, "%s: backward returns NB_OK (%s)", c->name, ctx.err);
        nbt_check(rc == NB_OK, name);
        fd_grad(&a, xd, n, gref);
        for (r = 0; r < c->rows; r++)
            for (j = 0; j < c->ld; j++) {
                i = (size_t)r * c->ld + j;
                if (j >= c->width) gref[i] = (double)dx0[i];      /* padding untouched */
                else if (c->accumulate) gref[i] += (double)dx0[i]; /* dx += grad */
            }
        snprintf(name, sizeof name, "%s: dx matches finite differences", c->name);
        nbt_close(name, dx, gref, n, atol, rtol);
        free(dx0);
    }
    if (c->has_gain) {
        fd_grad(&a, gd, seg, gref);
        snprintf(name, sizeof name, "%s: dgain matches finite differences", c->name);
        nbt_close(name, dgain, gref, seg, atol, rtol);
    }
    if (c->has_bias) {
        fd_grad(&a, bd, seg, gref);
        snprintf(name, sizeof name, "%s: dbias matches finite differences", c->name);
        nbt_close(name, dbias, gref, seg, atol, rtol);
    }
    if (c->mode >= 2) { /* dalpha (and Derf's dshift) were 0.25 (-0.5) and are added to */
        const int n_as = c->mode == 3 ? 2 : 1;
        fd_grad(&a, a.as, (size_t)n_as, gref);
        gref[0] += 0.25;
        gref[1] = n_as > 1 ? gref[1] - 0.5 : -0.5; /* DyT: das[1] untouched */
        snprintf(name, sizeof name, "%s: dalpha%s matches finite differences", c->name,
                 n_as > 1 ? ", dshift" : "");
        nbt_close(name, das, gref, 2, atol, rtol);
    }
    free(x); free(y); free(dy); free(dx); free(gain); free(bias); free(dgain); free(dbias);
    free(mean); free(rstd); free(scratch); free(xd); free(gd); free(bd); free(dyd); free(yref);
    free(gref);
}

/* ---- softmax ---- */

/* spike != 0: one logit per row, at a column moving by 5 from row to row (every reduction
   lane and the tail), is set to spike: softmax is shift-invariant, so a max that misses it is
   only visible through exp overflowing */
static void run_softmax_case(const char* cname, int rows, int cols, int ld, double scale,
                             int causal, double spike, nbt_rng* rng) {
    const size_t n = (size_t)rows * ld;
    nb_real *s = nbt_alloc(n), *p = nbt_alloc(n), *dp = nbt_alloc(n), *ds = nbt_alloc(n),
            *lse = nbt_alloc(rows);
    double *sd, *pref = (double*)calloc(n, sizeof(double)), *pt = (double*)calloc(n, sizeof(double)),
           *gref = (double*)calloc(n, sizeof(double)), *lref = (double*)calloc(rows, sizeof(double));
    char name[1280];
    nb_ctx ctx;
    int i, j;
    memset(&ctx, 0, sizeof ctx);
    nbt_fill(rng, s, n, 0, 2);
    nbt_fill(rng, dp, n, 0, 1);
    for (i = 0; spike != 0 && i < rows; i++) {
        const int nv = causal ? i + 1 + cols - rows : cols;
        if (nv > 0) s[(size_t)i * ld + (size_t)(5 * i) % (nv < cols ? nv : cols)] = (nb_real)spike;
    }
    sd = to_d(s, n);
    nbt_check(nb_softmax_forward(&ctx, p, ld, lse, s, ld, rows, cols, (nb_real)scale, causal) ==
                  NB_OK, "softmax forward NB_OK");
    ref_softmax(pref, sd, ld, rows, cols, scale, causal);
    for (i = 0; i < rows; i++) {
        int nv = causal ? i + 1 + cols - rows : cols;
        double mx = -1e300, sum = 0;
        for (j = 0; j < nv && j < cols; j++) if (sd[i * ld + j] > mx) mx = sd[i * ld + j];
        for (j = 0; j < nv && j < cols; j++) sum += exp(scale * (sd[i * ld + j] - mx));
        lref[i] = nv > 0 ? scale * mx + log(sum) : nbt_inf(-1);
        for (j = cols; j < ld; j++) pref[i * ld + j] = (double)p[i * ld + j];
    }
    snprintf(name, sizeof name, "%s: softmax forward", cname);
    nbt_close(name, p, pref, n, NBT_ATOL, NBT_RTOL);
    snprintf(name, sizeof name, "%s: log-sum-exp", cname);
    nbt_close(name, lse, lref, rows, NBT_ATOL, NBT_RTOL);

    nbt_check(nb_softmax_backward(&ctx, ds, ld, dp, ld, p, ld, rows, cols, (nb_real)scale,
                                  causal) == NB_OK, "softmax backward NB_OK");
    for (i = 0; i < rows; i++)
        for (j = 0; j < ld; j++) {
            const size_t k = (size_t)i * ld + j;
            const double keep = sd[k];
            double lp = 0, lm = 0;
            size_t m;
            if (j >= cols) { gref[k] = (double)ds[k]; continue; }
            sd[k] = keep + 1e-6; ref_softmax(pt, sd, ld, rows, cols, scale, causal);
            for (m = 0; m < n; m++) lp += pt[m] * (double)dp[m];
            sd[k] = keep - 1e-6; ref_softmax(pt, sd, ld, rows, cols, scale, causal);
            for (m = 0; m < n; m++) lm += pt[m] * (double)dp[m];
            sd[k] = keep;
            gref[k] = (lp - lm) / 2e-6;
        }
    snprintf(name, sizeof name, "%s: softmax backward matches finite differences", cname);
    nbt_close(name, ds, gref, n, NBT_ATOL, NBT_RTOL);
    free(s); free(p); free(dp); free(ds); free(lse); free(sd); free(pref); free(pt); free(gref);
    free(lref);
}

/* ---- GEMM ---- */

static void run_gemm_case(int ta, int tb, int M, int N, int K, double alpha, double beta,
                          nbt_rng* rng) {
    const int lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 2, ldc = N + 1;
    const size_t na = (size_t)(ta ? K : M) * lda, nb = (size_t)(tb ? N : K) * ldb,
                 nc = (size_t)M * ldc;
    nb_real *A = nbt_alloc(na), *B = nbt_alloc(nb), *C1 = nbt_alloc(nc), *C2 = nbt_alloc(nc);
    double* ref = (double*)calloc(nc, sizeof(double));
    char name[1280];
    int i, j, k;
    nbt_fill(rng, A, na, 0, 1);
    nbt_fill(rng, B, nb, 0, 1);
    nbt_fill(rng, C1, nc, 0, 1);
    if (beta == 0) C1[0] = (nb_real)NAN; /* beta = 0 must overwrite, not propagate NaN */
    memcpy(C2, C1, nc * sizeof(nb_real));
    for (i = 0; i < M; i++)
        for (j = 0; j < ldc; j++) {
            double acc = 0;
            if (j >= N) { ref[i * ldc + j] = (double)C1[i * ldc + j]; continue; }
            for (k = 0; k < K; k++)
                acc += (double)(ta ? A[k * lda + i] : A[i * lda + k]) *
                       (double)(tb ? B[j * ldb + k] : B[k * ldb + j]);
            ref[i * ldc + j] = alpha * acc + (beta == 0 ? 0 : beta * (double)C1[i * ldc + j]);
        }
    nb_gemm(NULL, ta, tb, M, N, K, (nb_real)alpha, A, lda, B, ldb, (nb_real)beta, C1, ldc);
    nb_gemm_ref(NULL, ta, tb, M, N, K, (nb_real)alpha, A, lda, B, ldb, (nb_real)beta, C2, ldc);
    /* K terms of size ~1: float error grows like sqrt(K) ulps of the row magnitude */
    snprintf(name, sizeof name, "nb_gemm ta=%d tb=%d beta=%g vs double loop", ta, tb, beta);
    nbt_close(name, C1, ref, nc, NBT_ATOL * 10, NBT_RTOL);
    snprintf(name, sizeof name, "nb_gemm_ref ta=%d tb=%d beta=%g vs double loop", ta, tb, beta);
    nbt_close(name, C2, ref, nc, NBT_ATOL * 10, NBT_RTOL);
    free(A); free(B); free(C1); free(C2); free(ref);
}

#ifndef NB_DOUBLE
/* bf16(x) computed independently of the header's bit operations: the nearest value with 8
   significant bits, ties to even, by frexp/ldexp in double (x finite and normal here). */
static double bf16_ref(double x) {
    int e;
    double m = frexp(x, &e), scaled = ldexp(m, 8), lo = floor(scaled), r;
    r = scaled - lo;
    if (r > 0.5 || (r == 0.5 && fmod(lo, 2) != 0)) lo += 1;
    return ldexp(lo, e - 8);
}

/* nb_gemm_bf16: C = alpha bf16(op(A)) bf16(op(B)) + beta C with float32 sums. Against a
   double loop over independently rounded operands, within float32 summation error
   (2 K 2^-24 of sum |terms|: each product is exact, each of the K adds rounds once); and
   measurably away from the float32 GEMM of the unrounded operands (the rounding happens). */
static void run_gemm_bf16_case(int ta, int tb, int M, int N, int K, double alpha, double beta,
                               int threads, nbt_rng* rng) {
    const int lda = (ta ? M : K) + 1, ldb = (tb ? K : N) + 3, ldc = N + 2;
    const size_t na = (size_t)(ta ? K : M) * lda, nb = (size_t)(tb ? N : K) * ldb,
                 nc = (size_t)M * ldc;
    nb_real *A = nbt_alloc(na), *B = nbt_alloc(nb), *C = nbt_alloc(nc);
    double *ref = (double*)calloc(nc, sizeof(double)), *unrounded = (double*)calloc(nc, 8);
    double* terms = (double*)calloc(nc, sizeof(double)); /* sum |bf16(a) bf16(b)| per element */
    double far = 0, norm = 0;
    nb_ctx ctx;
    char name[1280];
    int i, j, k, within = 1;
    memset(&ctx, 0, sizeof ctx);
    ctx.num_threads = threads;
    nbt_fill(rng, A, na, 0, 1);
    nbt_fill(rng, B, nb, 0, 1);
    nbt_fill(rng, C, nc, 0, 1);
    if (beta == 0) C[0] = (nb_real)NAN;
    for (i = 0; i < M; i++)
        for (j = 0; j < ldc; j++) {
            double acc = 0, plain = 0;
            const double c0 = (double)C[i * ldc + j];
            if (j >= N) { ref[i * ldc + j] = unrounded[i * ldc + j] = c0; continue; }
            for (k = 0; k < K; k++) {
                const double a = ta ? A[k * lda + i] : A[i * lda + k];
                const double b = tb ? B[j * ldb + k] : B[k * ldb + j];
                acc += bf16_ref(a) * bf16_ref(b);
                terms[i * ldc + j] += fabs(bf16_ref(a) * bf16_ref(b));
                plain += a * b;
            }
            ref[i * ldc + j] = alpha * acc + (beta == 0 ? 0 : beta * c0);
            unrounded[i * ldc + j] = alpha * plain + (beta == 0 ? 0 : beta * c0);
        }
    snprintf(name, sizeof name, "nb_gemm_bf16 ta=%d tb=%d %dx%dx%d beta=%g threads %d returns OK",
             ta, tb, M, N, K, beta, threads);
    nbt_check(nb_gemm_bf16(&ctx, ta, tb, M, N, K, (nb_real)alpha, A, lda, B, ldb, (nb_real)beta,
                           C, ldc) == NB_OK, name);
    for (i = 0; i < M; i++)
        for (j = 0; j < ldc; j++) {
            const double got = (double)C[i * ldc + j], want = ref[i * ldc + j];
            const double mag = fabs(alpha) * terms[i * ldc + j] + fabs(beta * want);
            if (j >= N) { within &= got == want; continue; } /* padding untouched */
            within &= nbt_finite(got) && fabs(got - want) <= 2.0 * (K + 2) * 0x1p-24 * mag + 1e-30;
            far += (got - unrounded[i * ldc + j]) * (got - unrounded[i * ldc + j]);
            norm += want * want;
        }
    snprintf(name, sizeof name, "nb_gemm_bf16 ta=%d tb=%d %dx%dx%d beta=%g threads %d: bf16 "
             "operands, float32 sums", ta, tb, M, N, K, beta, threads);
    nbt_check(within, name);
    snprintf(name, sizeof name, "nb_gemm_bf16 ta=%d tb=%d %dx%dx%d: the operands are rounded "
             "(%.2g from the unrounded product)", ta, tb, M, N, K, sqrt(far / norm));
    nbt_check(sqrt(far / norm) > 1e-4, name);
    free(A); free(B); free(C); free(ref); free(unrounded); free(terms);
}

/* nb__bdot, the attention products' kernel, on kernel isa: C (+)= A B for bf16 A (row-major)
   and B given as rows (nb__pack_rows) or as the rows of B^T (nb__pack_cols), against a double
   loop over the same bf16 values within the float32 summation bound (each product exact, K
   adds: 2 (K + 2) 2^-24 sum |a_k b_k|); C's padding columns untouched. The shapes cover AMX's
   32 x 32 blocks with edges on both sides, odd K, and a K that is not a multiple of 32. */
static void run_bdot_case(int isa, int M, int N, int K, int by_cols, int acc, nbt_rng* rng) {
    const int lda = K + 3, ldc = N + 5, kp = (K + 1) / 2;
    const int ldx = by_cols ? K + 1 : N + 2, xrows = by_cols ? N : K;
    unsigned short *A = (unsigned short*)calloc((size_t)M * lda, 2);
    unsigned short *X = (unsigned short*)calloc((size_t)xrows * ldx, 2);
    unsigned short *Bp = (unsigned short*)calloc((size_t)(kp + 16) * 2 * (N + 7), 2);
    nb_real *f = nbt_alloc((size_t)(M * lda + xrows * ldx)), *C = nbt_alloc((size_t)M * ldc);
    double err = 0;
    int i, j, k, within = 1;
    char name[256];
    nbt_fill(rng, f, (size_t)(M * lda + xrows * ldx), 0, 1);
    nb_bf16_round(A, f, (size_t)M * lda);
    nb_bf16_round(X, f + (size_t)M * lda, (size_t)xrows * ldx);
    nbt_fill(rng, C, (size_t)M * ldc, 0, 1);
    if (by_cols) nb__pack_cols(isa, Bp, X, N, K, ldx, N + 7);
    else nb__pack_rows(Bp, X, K, N, ldx, K + K % 2);
    {
        double* c0 = (double*)malloc(sizeof(double) * (size_t)M * ldc);
        for (i = 0; i < M * ldc; i++) c0[i] = (double)C[i];
        nb__bdot(isa, M, N, K, A, lda, Bp, by_cols ? N + 7 : N, C, ldc, acc);
        for (i = 0; i < M; i++)
            for (j = 0; j < ldc; j++) {
                double want = acc ? c0[i * ldc + j] : 0, mag = fabs(want);
                const double got = (double)C[i * ldc + j];
                if (j >= N) { within &= got == c0[i * ldc + j]; continue; }
                for (k = 0; k < K; k++) {
                    const double a = nb__bf16_float(A[i * lda + k]);
                    const double b = nb__bf16_float(by_cols ? X[j * ldx + k] : X[k * ldx + j]);
                    want += a * b;
                    mag += fabs(a * b);
                }
                if (fabs(got - want) > err) err = fabs(got - want);
                within &= fabs(got - want) <= 2.0 * (K + 2) * 0x1p-24 * mag;
            }
        free(c0);
    }
    snprintf(name, sizeof name, "nb__bdot kernel %d %dx%dx%d B by %s%s: bf16 products, float32 "
             "sums (largest error %.3g)", isa, M, N, K, by_cols ? "columns" : "rows",
             acc ? ", accumulating" : "", err);
    nbt_check(within, name);
    free(A); free(X); free(Bp); free(f); free(C);
}

/* nb__transpose16 (the packs' transpose of Q and dO) on kernel isa's code: every element moved
   to its place, the padding columns zero */
static void run_transpose16_case(int isa, int rows, int cols) {
    const int ldx = cols + 3, ldd = rows + 9;
    unsigned short* X = (unsigned short*)malloc((size_t)rows * ldx * 2);
    unsigned short* D = (unsigned short*)malloc((size_t)cols * ldd * 2);
    int r, c, ok = 1;
    char name[160];
    for (r = 0; r < rows * ldx; r++) X[r] = (unsigned short)(r * 7919u + 1);
    memset(D, 0xff, (size_t)cols * ldd * 2);
    nb__transpose16(isa, D, X, rows, cols, ldx, ldd);
    for (c = 0; c < cols; c++)
        for (r = 0; r < ldd; r++) ok &= D[c * ldd + r] == (r < rows ? X[r * ldx + c] : 0);
    snprintf(name, sizeof name, "nb__transpose16 kernel %d %dx%d: every element, zero padding",
             isa, rows, cols);
    nbt_check(ok, name);
    free(X); free(D);
}

/* nb__gemm1_tiles, the linear GEMMs' engine on nb__bdot's kernel isa (AMX: the plans' choice
   there), through nb__gemm_run as the sublayers call it: C = alpha op(A) op(B) + beta C with A
   and B each given as bf16 or float (rounded by the engine), either orientation (every pack:
   read in place, transposed, rounded; B's pairs of rows and its word transpose). On 1, 2 and 3
   threads (a team shares B's pack, nb__gemm_tiles_team), each against a double loop over the
   independently rounded operands within the float32 summation bound (as nb__bdot's); C's
   padding columns untouched; the same bits on every thread count (the blocks start at
   multiples of 32 and K is cut at fixed places). M, N, K cross the engine's
   blocks (256, 512, 256) and K's last block is not a multiple of 32 (AMX's edge kernel). */
static void run_tiles_case(int isa, int ta, int tb, int a16, int b16, int M, int N, int K,
                           double alpha, double beta, nbt_rng* rng) {
    const int lda = (ta ? M : K) + 1, ldb = (tb ? K : N) + 3, ldc = N + 2;
    const size_t na = (size_t)(ta ? K : M) * lda, nb = (size_t)(tb ? N : K) * ldb,
                 nc = (size_t)M * ldc;
    nb_real *A = nbt_alloc(na), *B = nbt_alloc(nb), *C0 = nbt_alloc(nc), *C = nbt_alloc(3 * nc);
    unsigned short *A16 = (unsigned short*)malloc(na * 2), *B16 = (unsigned short*)malloc(nb * 2);
    double *ra = (double*)malloc(na * sizeof(double)), *rb = (double*)malloc(nb * sizeof(double));
    double err = 0;
    nb_ctx ctx;
    char name[512];
    size_t i;
    int r, j, k, t, within = 1, same = 1;
    memset(&ctx, 0, sizeof ctx);
    nbt_fill(rng, A, na, 0, 1);
    nbt_fill(rng, B, nb, 0, 1);
    nbt_fill(rng, C0, nc, 0, 1);
    nb_bf16_round(A16, A, na);
    nb_bf16_round(B16, B, nb);
    for (i = 0; i < na; i++) ra[i] = bf16_ref(A[i]);
    for (i = 0; i < nb; i++) rb[i] = bf16_ref(B[i]);
    for (t = 0; t < 3; t++) {
        const nb__gemm_at at = nb__at(&ctx, "tiles", NULL, isa + 1, 1);
        nb_real* c = C + t * nc;
        ctx.num_threads = t + 1;
        memcpy(c, C0, nc * sizeof *c);
        nbt_check(nb__gemm(&at, M, N, K, (nb_real)alpha,
                           a16 ? nb__mh(A16, lda, ta) : nb__m(A, lda, ta),
                           b16 ? nb__mh(B16, ldb, tb) : nb__m(B, ldb, tb), (nb_real)beta, c,
                           ldc) == NB_OK, ctx.err);
        if (t) same &= !memcmp(c, C, nc * sizeof *c);
    }
    for (r = 0; r < M; r++)
        for (j = 0; j < ldc; j++) {
            const double c0 = (double)C0[(size_t)r * ldc + j];
            double sum = 0, mag = 0;
            if (j >= N) {
                for (t = 0; t < 3; t++) within &= (double)C[t * nc + (size_t)r * ldc + j] == c0;
                continue;
            }
            for (k = 0; k < K; k++) {
                const double ab = (ta ? ra[(size_t)k * lda + r] : ra[(size_t)r * lda + k]) *
                                  (tb ? rb[(size_t)j * ldb + k] : rb[(size_t)k * ldb + j]);
                sum += ab;
                mag += fabs(ab);
            }
            sum = alpha * sum + beta * c0;
            mag = fabs(alpha) * mag + fabs(beta * c0);
            for (t = 0; t < 3; t++) { /* every thread count's result */
                const double e = fabs((double)C[t * nc + (size_t)r * ldc + j] - sum);
                if (e > err) err = e;
                within &= e <= 2.0 * (K + 2) * 0x1p-24 * mag;
            }
        }
    snprintf(name, sizeof name, "bf16 GEMM on nb__bdot kernel %d, A %s%s, B %s%s, %dx%dx%d "
             "alpha %g beta %g: bf16 products, float32 sums (largest error %.3g)", isa,
             a16 ? "bf16" : "float", ta ? " transposed" : "", b16 ? "bf16" : "float",
             tb ? " transposed" : "", M, N, K, alpha, beta, err);
    nbt_check(within, name);
    snprintf(name, sizeof name, "bf16 GEMM on nb__bdot kernel %d %dx%dx%d: the same bits on 1, 2 "
             "and 3 threads", isa, M, N, K);
    if (alpha == 1 || beta == 0) /* the tiles; the emulation's bits follow the BLAS's blocks */
        nbt_check(same, name);
    free(A); free(B); free(C0); free(C); free(A16); free(B16); free(ra); free(rb);
}

static void bdot_kernels(nbt_rng* rng) {
    static const char* const names[] = {"portable", "AVX512-BF16 (avx512_bf16)",
                                        "AMX (amx_bf16, amx_tile)"};
    const int host = nb__bf16_isa();
    int isa;
    for (isa = NB__ISA_PORTABLE; isa <= NB__ISA_AMX; isa++) {
        if (isa > host) {
            printf("SKIP the %s attention-product kernel: this CPU (or its OS) lacks it\n",
                   names[isa]);
            continue;
        }
        run_bdot_case(isa, 7, 5, 9, 0, 0, rng);
        run_bdot_case(isa, 64, 64, 64, 1, 0, rng);
        run_bdot_case(isa, 70, 45, 96, 0, 1, rng);
        run_bdot_case(isa, 33, 97, 64, 1, 1, rng);
        run_bdot_case(isa, 40, 70, 31, 1, 0, rng);
        run_bdot_case(isa, 96, 33, 128, 0, 1, rng);
        run_transpose16_case(isa, 64, 64);
        run_transpose16_case(isa, 37, 9);
        run_transpose16_case(isa, 5, 48);
        /* the sublayers' three GEMMs (forward, dX, dW: A bf16 by rows, by rows, transposed;
           B W^T, W, x), then the general packs, a tiny and an odd K, alpha != 1 (a scale of
           the sums; with beta 1 the emulation runs it) */
        run_tiles_case(isa, 0, 1, 1, 1, 260, 520, 264, 1, 0, rng);
        run_tiles_case(isa, 0, 0, 1, 1, 290, 100, 300, 1, 1, rng);
        run_tiles_case(isa, 1, 0, 1, 1, 70, 530, 270, 1, 1, rng);
        run_tiles_case(isa, 0, 1, 0, 0, 40, 33, 257, 1, 0, rng);
        run_tiles_case(isa, 1, 0, 0, 0, 33, 47, 64, 1, 1, rng);
        run_tiles_case(isa, 1, 1, 1, 0, 7, 5, 9, 1, 0, rng);
        run_tiles_case(isa, 0, 1, 1, 1, 64, 64, 31, 0.5, 1, rng);
        run_tiles_case(isa, 1, 1, 1, 1, 100, 70, 40, -0.25, 0, rng);
    }
}

/* bf16 rounding on single values through a 1x1x1 product (x * 1 is exact): ties to even,
   overflow to inf, NaN kept. */
static void gemm_bf16_values(void) {
    static const struct { float x, want; const char* what; } v[] = {
        {1.00390625f, 1.0f, "1 + 2^-8 (a tie) rounds to even: 1"},
        {1.01171875f, 1.015625f, "1 + 3 2^-8 (a tie) rounds to even: 1 + 2^-6"},
        {-1.00390625f, -1.0f, "-(1 + 2^-8) rounds to -1"},
        {1.0048828125f, 1.0078125f, "1 + 2^-8 + 2^-10 rounds up"},
        {3.3961e38f, 3.3895314e38f, "the largest bf16 stays"},
    };
    float one = 1, c;
    size_t i;
    char name[160];
    for (i = 0; i < sizeof v / sizeof v[0]; i++) {
        nb_gemm_bf16(NULL, 0, 0, 1, 1, 1, 1, &v[i].x, 1, &one, 1, 0, &c, 1);
        snprintf(name, sizeof name, "bf16: %s (got %.9g)", v[i].what, (double)c);
        nbt_check(c == v[i].want, name);
    }
    {
        float big = 3.4e38f, nan = (float)NAN;
        nb_gemm_bf16(NULL, 0, 0, 1, 1, 1, 1, &big, 1, &one, 1, 0, &c, 1);
        nbt_check(!nbt_finite(c) && c > 0, "bf16: a value past the largest bf16 rounds to inf");
        nb_gemm_bf16(NULL, 0, 0, 1, 1, 1, 1, &nan, 1, &one, 1, 0, &c, 1);
        nbt_check(nbt_isnan(c), "bf16: NaN stays NaN");
    }
}
#endif

int main(void) {
    static const norm_case cases[] = {
        /* name                      mode rows width seg ld gain bias acc  eps   scale shift ftol
           alpha shift (Derf) */
        {"rms whole row",              0, 7, 16, 0, 16, 1, 0, 0, 1e-5, 1, 0, 0, 0, 0},
        {"rms no gain",                0, 5, 12, 0, 12, 0, 0, 0, 1e-5, 1, 0, 0, 0, 0},
        {"rms per-head strided",       0, 6, 24, 8, 40, 1, 0, 0, 1e-6, 1, 0, 0, 0, 0},
        {"rms accumulate",             0, 4, 10, 5, 13, 1, 0, 1, 1e-5, 1, 0, 0, 0, 0},
        {"rms large eps small x",      0, 5, 8, 0, 8, 1, 0, 0, 1e-1, 0.2, 0, 0, 0, 0},
        {"rms big offset",             0, 3, 32, 0, 32, 1, 0, 0, 1e-5, 30, 5, 0, 0, 0},
        {"ln whole row",               1, 7, 16, 0, 16, 1, 1, 0, 1e-5, 1, 0, 0, 0, 0},
        {"ln no affine",               1, 5, 12, 0, 12, 0, 0, 0, 1e-5, 1, 0, 0, 0, 0},
        {"ln per-head strided",        1, 6, 24, 8, 40, 1, 1, 0, 1e-6, 1, 0, 0, 0, 0},
        {"ln accumulate gain only",    1, 4, 10, 5, 13, 1, 0, 1, 1e-5, 1, 0, 0, 0, 0},
        {"ln mean far from zero",      1, 4, 16, 0, 16, 1, 1, 0, 1e-5, 1, 1000, 20, 0, 0},
        /* mean^2 about 3 var: rows on both sides of the one-pass variance limit */
        {"ln mean at one-pass limit",  1, 24, 64, 0, 64, 1, 1, 0, 1e-5, 1, 1.7, 0, 0, 0},
        /* DyT: alpha scales the slope; a large alpha saturates tanh (1 - t^2 near 0) */
        {"dyt whole row",              2, 7, 16, 0, 16, 1, 1, 0, 1, 1, 0, 0, 0.7, 0},
        {"dyt per-head strided acc",   2, 6, 24, 8, 40, 1, 0, 1, 1, 1, 0, 0, 1.3, 0},
        {"dyt no affine",              2, 5, 12, 0, 12, 0, 0, 0, 1, 1, 0, 0, 0.5, 0},
        {"dyt saturating",             2, 4, 16, 0, 16, 1, 1, 0, 1, 2, 0, 0, 4.0, 0},
        /* Derf: alpha and shift; a large alpha puts most of erf' near 0 */
        {"derf whole row",             3, 7, 16, 0, 16, 1, 1, 0, 1, 1, 0, 0, 0.7, 0.3},
        {"derf per-head strided acc",  3, 6, 24, 8, 40, 1, 0, 1, 1, 1, 0, 0, 1.3, -0.4},
        {"derf no affine",             3, 5, 12, 0, 12, 0, 0, 0, 1, 1, 0, 0, 0.5, 0},
        {"derf saturating",            3, 4, 16, 0, 16, 1, 1, 0, 1, 2, 0, 0, 4.0, 1.5},
    };
    nbt_rng rng = {0x9E3779B97F4A7C15ULL};
    size_t c;
    int ta, tb;
    for (c = 0; c < sizeof cases / sizeof cases[0]; c++) run_norm_case(&cases[c], &rng);
    run_softmax_case("5x7 full", 5, 7, 7, 0.35, 0, 0, &rng);
    run_softmax_case("6x6 causal strided", 6, 6, 9, 0.5, 1, 0, &rng);
    run_softmax_case("3x6 causal bottom-right", 3, 6, 6, 1.0, 1, 0, &rng);
    run_softmax_case("6x3 causal, first rows empty", 6, 3, 3, 1.0, 1, 0, &rng);
    /* rows longer than the reduction lanes (up to 16), with tails */
    run_softmax_case("4x40 full", 4, 40, 40, 0.35, 0, 0, &rng);
    run_softmax_case("20x37 causal strided", 20, 37, 41, 0.5, 1, 0, &rng);
    run_softmax_case("16x40 spiked", 16, 40, 40, 2.0, 0, 60, &rng);
    run_softmax_case("24x30 causal spiked", 24, 30, 30, 2.0, 1, 60, &rng);
    for (ta = 0; ta < 2; ta++)
        for (tb = 0; tb < 2; tb++) {
            run_gemm_case(ta, tb, 7, 5, 9, 1.0, 0.0, &rng);
            run_gemm_case(ta, tb, 33, 17, 65, 0.5, 1.0, &rng);
            run_gemm_case(ta, tb, 4, 6, 3, -1.5, 0.25, &rng);
            run_gemm_case(ta, tb, 130, 70, 80, 1.0, 1.0, &rng);  /* split over rows */
            run_gemm_case(ta, tb, 9, 300, 40, 1.0, 0.0, &rng);   /* split over columns */
#ifndef NB_DOUBLE
            /* across the emulation's blocks (64 x 256 x 256) and the threads' split */
            run_gemm_bf16_case(ta, tb, 7, 5, 9, 1.0, 0.0, 1, &rng);
            run_gemm_bf16_case(ta, tb, 70, 270, 300, 0.5, 1.0, 2, &rng);
            run_gemm_bf16_case(ta, tb, 33, 65, 513, -1.5, 0.25, 3, &rng);
#endif
        }
#ifndef NB_DOUBLE
    gemm_bf16_values();
    bdot_kernels(&rng);
#else
    {   /* bf16 is a float32-build feature */
        nb_ctx c;
        nb_real a = 1, b = 1, r = 0;
        memset(&c, 0, sizeof c);
        nbt_check(nb_gemm_bf16(&c, 0, 0, 1, 1, 1, 1, &a, 1, &b, 1, 0, &r, 1) == NB_ERR_CONFIG &&
                      strstr(c.err, "NB_DOUBLE") != NULL,
                  "nb_gemm_bf16 refuses in the float64 build");
    }
#endif
    return nbt_finish();
}
