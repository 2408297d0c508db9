/* The primitives' shape arguments under hostile bytes: norms (forward and backward, RMS and
   Layer), softmax (forward and backward), GEMM (BLAS and reference), RoPE, add and axpby.
   Each call's arguments are judged against the documented contract by a model written here
   from the header's comments (not from its code): a call the model calls valid gets buffers of
   exactly the documented sizes, each its own allocation, so a read or write past one is an
   ASan report, and must return NB_OK; a call the model calls invalid gets one-value buffers and
   must return an error and leave its outputs untouched. A disagreement either way aborts. Valid
   calls too big to run here (more than CAP values in a buffer) are skipped.

   libFuzzer (clang -fsanitize=fuzzer,..., NB_LIBFUZZER defined): any input.
   Otherwise a deterministic randomized driver (gcc, also under ASan in the normal builds):
       fuzz_primitives [iterations [seed]] | --corpus FILE... | --write-seeds DIR */
#define NORMBLOCKS_IMPLEMENTATION
#include "normblocks.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct rd { const uint8_t* p; size_t n, at; } rd;
static unsigned u8(rd* r) { return r->at < r->n ? r->p[r->at++] : 0; }
static int pick_int(rd* r, int small) {
    static const int edge[8] = {0, -1, 65536, 46341, 1 << 30, 2147483647, -2147483647 - 1, 3};
    const unsigned k = u8(r);
    unsigned v = 0;
    int i;
    if (k < 200) return (int)(k % (unsigned)(small + 1));
    if (k < 240) return edge[k % 8];
    for (i = 0; i < 4; i++) v = v << 8 | u8(r);
    return (int)v;
}
/* a leading dimension: mostly width plus a little, else any int */
static int pick_ld(rd* r, int width) {
    const unsigned k = u8(r);
    return k < 180 && width >= 0 && width < 65536 ? width + (int)(k % 4) : pick_int(r, 48);
}
static nb_real pick_real(rd* r) {
    static const double vals[12] = {1e-5, 1, 0.125, 2, 10000, 0, -1, NAN, INFINITY, -INFINITY,
                                    1e30, 1.5};
    return (nb_real)vals[u8(r) % 12];
}

static long n_valid, n_invalid;
#define CHECK(cond, ...)                                                                   \
    do {                                                                                   \
        if (!(cond)) {                                                                     \
            fprintf(stderr, "fuzz_primitives: check failed: %s: ", #cond);                \
            fprintf(stderr, __VA_ARGS__);                                                  \
            fprintf(stderr, "\n");                                                         \
            abort();                                                                       \
        }                                                                                  \
    } while (0)

/* Documented size of a strided matrix, as a double (no overflow): (rows-1)*ld + cols. */
static double msize(double rows, double ld, double cols) { return (rows - 1) * ld + cols; }

#define CAP 200000.0 /* values per buffer for a valid call */
#define NBUF 8
typedef struct bufs { nb_real* b[NBUF]; size_t n[NBUF]; int valid; } bufs;

/* Buffer k: the documented size when the call is valid, else one value. Filled with 0.5. */
static nb_real* get(bufs* B, int k, double size) {
    size_t i, n = B->valid ? (size_t)size : 1;
    if (n == 0) n = 1;
    B->n[k] = n;
    B->b[k] = (nb_real*)malloc(n * sizeof(nb_real));
    if (!B->b[k]) abort();
    for (i = 0; i < n; i++) B->b[k][i] = (nb_real)0.5;
    return B->b[k];
}
/* every buffer still holds 0.5 (a refused call wrote nothing) */
static int untouched(const bufs* B) {
    int k;
    size_t i;
    for (k = 0; k < NBUF; k++)
        for (i = 0; B->b[k] && i < B->n[k]; i++)
            if (!(B->b[k][i] == (nb_real)0.5)) return 0;
    return 1;
}
static void finish(bufs* B, nb_result rc, const nb_ctx* c, const char* fn) {
    int k;
    if (B->valid) {
        n_valid++;
        CHECK(rc == NB_OK, "%s: a documented-valid call failed: %s", fn, c->err);
    } else {
        n_invalid++;
        CHECK(rc != NB_OK && strstr(c->err, fn) && untouched(B),
              "%s: an invalid call was accepted or wrote (rc %d, \"%s\")", fn, (int)rc, c->err);
    }
    for (k = 0; k < NBUF; k++) free(B->b[k]);
}
static int fits(double a, double b, double c) { return a <= CAP && b <= CAP && c <= CAP; }
static int finite_pos(nb_real v) { return v > 0 && isfinite((double)v); }

/* kind: 0 RMSNorm, 1 LayerNorm, 2 DyT (the picked eps is its alpha: any finite value) */
static void norms(rd* r, nb_ctx* c, int backward, int kind) {
    const int layer = kind == 1, dyt = kind == 2;
    const int rows = pick_int(r, 9), width = pick_int(r, 40), seg = pick_int(r, 40);
    const int ldx = pick_ld(r, width), ldy = pick_ld(r, width), ldz = pick_ld(r, width);
    const nb_real eps = pick_real(r);
    const unsigned opt = u8(r);
    const int sg = seg == 0 ? width : seg;
    const double xs = msize(rows, ldx, width), ys = msize(rows, ldy, width),
                 zs = msize(rows, ldz, width);
    const double nst = sg > 0 && width % sg == 0 ? (double)rows * (width / sg) : 0;
    const char* fn;
    bufs B;
    nb_result rc;
    memset(&B, 0, sizeof B);
    B.valid = rows > 0 && width > 0 && seg >= 0 && sg > 0 && width % sg == 0 && ldx >= width &&
              ldy >= width && (backward ? ldz >= width : dyt || finite_pos(eps)) &&
              (!dyt || isfinite((double)eps));
    if (B.valid && !fits(xs, ys, zs)) return; /* valid but too big to run here */
    if (!backward) {
        nb_real *x = get(&B, 0, xs), *y = get(&B, 1, ys), *rs = get(&B, 2, nst);
        nb_real *mu = layer ? get(&B, 3, nst) : NULL, *g = opt & 1 ? get(&B, 4, sg) : NULL;
        nb_real* bias = !kind ? NULL : (opt & 2) ? get(&B, 5, sg) : NULL;
        if (opt & 4 && ldy == ldx) y = x; /* in place is documented */
        fn = dyt ? "nb_dyt_forward" : layer ? "nb_layernorm_forward" : "nb_rmsnorm_forward";
        rc = dyt ? nb_dyt_forward(c, y, ldy, x, ldx, &eps, g, bias, rows, width, seg)
             : layer ? nb_layernorm_forward(c, y, ldy, mu, rs, x, ldx, g, bias, rows, width, seg, eps)
                     : nb_rmsnorm_forward(c, y, ldy, rs, x, ldx, g, rows, width, seg, eps);
    } else {
        /* dx (ldz), dy (ldy), x (ldx), stats, gain, dgain, dbias, scratch */
        nb_real *dx = get(&B, 0, zs), *dy = get(&B, 1, ys), *x = get(&B, 2, xs);
        nb_real *rs = dyt ? NULL : get(&B, 3, nst), *mu = layer ? get(&B, 4, nst) : NULL;
        nb_real* g = opt & 1 ? get(&B, 5, sg) : NULL;
        nb_real* dg = opt & 2 ? get(&B, 6, sg) : NULL;
        nb_real* sc = opt & 2 ? get(&B, 7, (double)nb_norm_scratch_size(c, width, seg)) : NULL;
        nb_real* da = dyt && (opt & 16) ? get(&B, 4, 1) : NULL;
        if (dyt && (opt & 16) && !sc) sc = get(&B, 7, (double)nb_norm_scratch_size(c, width, seg));
        if (B.valid && rs) { /* stats of a forward: rstd > 0 */
            size_t i;
            for (i = 0; i < B.n[3]; i++) rs[i] = 1;
        }
        fn = dyt ? "nb_dyt_backward" : layer ? "nb_layernorm_backward" : "nb_rmsnorm_backward";
        rc = dyt ? nb_dyt_backward(c, dx, ldz, dg, NULL, da, dy, ldy, x, ldx, &eps, g, rows, width,
                                   seg, (int)(opt & 8), sc)
             : layer ? nb_layernorm_backward(c, dx, ldz, dg, NULL, dy, ldy, x, ldx, mu, rs, g,
                                             rows, width, seg, (int)(opt & 8), sc)
                     : nb_rmsnorm_backward(c, dx, ldz, dg, dy, ldy, x, ldx, rs, g, rows, width,
                                           seg, (int)(opt & 8), sc);
    }
    finish(&B, rc, c, fn);
}

static void softmax(rd* r, nb_ctx* c, int backward) {
    const int rows = pick_int(r, 12), cols = pick_int(r, 40);
    const int la = pick_ld(r, cols), lb = pick_ld(r, cols), lc = pick_ld(r, cols);
    const nb_real scale = pick_real(r);
    const unsigned opt = u8(r);
    const double as = msize(rows, la, cols), bs = msize(rows, lb, cols), cs = msize(rows, lc, cols);
    bufs B;
    nb_result rc;
    memset(&B, 0, sizeof B);
    B.valid = rows > 0 && cols > 0 && la >= cols && lb >= cols && (!backward || lc >= cols) &&
              finite_pos(scale);
    if (B.valid && !fits(as, bs, cs)) return;
    if (!backward) {
        nb_real *s = get(&B, 0, as), *p = get(&B, 1, bs), *lse = opt & 1 ? get(&B, 2, rows) : NULL;
        rc = nb_softmax_forward(c, p, lb, lse, s, la, rows, cols, scale, (int)(opt & 2));
        finish(&B, rc, c, "nb_softmax_forward");
    } else {
        nb_real *dp = get(&B, 0, as), *p = get(&B, 1, bs), *ds = get(&B, 2, cs);
        rc = nb_softmax_backward(c, ds, lc, dp, la, p, lb, rows, cols, scale, (int)(opt & 2));
        finish(&B, rc, c, "nb_softmax_backward");
    }
}

static void gemm(rd* r, nb_ctx* c) {
    const int M = pick_int(r, 20), N = pick_int(r, 20), K = pick_int(r, 20);
    const unsigned opt = u8(r);
    const int ta = opt & 1, tb = (opt >> 1) & 1, ref = (opt >> 2) & 1;
    const int lda = pick_ld(r, ta ? M : K), ldb = pick_ld(r, tb ? K : N), ldc = pick_ld(r, N);
    const double as = ta ? msize(K, lda, M) : msize(M, lda, K);
    const double bs = tb ? msize(N, ldb, K) : msize(K, ldb, N), cs = msize(M, ldc, N);
    bufs B;
    nb_result rc;
    nb_real *A, *Bm, *C;
    memset(&B, 0, sizeof B);
    B.valid = M > 0 && N > 0 && K > 0 && lda >= (ta ? M : K) && ldb >= (tb ? K : N) &&
              ldc >= N;
    if (B.valid && !fits(as, bs, cs)) return;
    A = get(&B, 0, as); Bm = get(&B, 1, bs); C = get(&B, 2, cs);
    rc = ref ? nb_gemm_ref(c, ta, tb, M, N, K, 1, A, lda, Bm, ldb, (nb_real)0.5, C, ldc)
             : nb_gemm(c, ta, tb, M, N, K, 1, A, lda, Bm, ldb, (nb_real)0.5, C, ldc);
    finish(&B, rc, c, ref ? "nb_gemm_ref" : "nb_gemm");
}

static void rope(rd* r, nb_ctx* c) {
    const int Bt = pick_int(r, 3), T = pick_int(r, 9), heads = pick_int(r, 4), hd = pick_int(r, 16);
    const int ldx = heads >= 0 && hd >= 0 && (long long)heads * hd < 65536 ? pick_ld(r, heads * hd)
                                                                         : pick_int(r, 64);
    const nb_real theta = pick_real(r);
    const double xs = msize((double)Bt * T, ldx, (double)heads * hd);
    bufs B;
    memset(&B, 0, sizeof B);
    B.valid = Bt > 0 && T > 0 && heads > 0 && hd > 0 && hd % 2 == 0 &&
              (double)ldx >= (double)heads * hd && theta > 1 && isfinite((double)theta);
    if (B.valid && xs > CAP) return;
    finish(&B, nb_rope(c, get(&B, 0, xs), ldx, Bt, T, heads, hd, theta, (int)(u8(r) & 1)), c,
           "nb_rope");
}

static void elementwise(rd* r, nb_ctx* c) {
    const int n = pick_int(r, 40);
    const nb_real alpha = pick_real(r), beta = pick_real(r);
    const unsigned opt = u8(r);
    const size_t sn = (size_t)(unsigned)n;
    bufs B;
    memset(&B, 0, sizeof B);
    if (n < 0 || n > CAP) return; /* a size_t count is trusted: no invalid n to try */
    B.valid = (opt & 1) || (isfinite((double)alpha) && isfinite((double)beta));
    if (B.valid && n == 0) { n_valid++; return; } /* n = 0 is a no-op; nothing to check */
    if (opt & 1) {
        nb_real *a = get(&B, 0, n), *b = get(&B, 1, n), *o = get(&B, 2, n);
        finish(&B, nb_add(c, o, a, b, sn), c, "nb_add");
    } else if (!B.valid) { /* only a non-finite scalar makes axpby invalid here */
        nb_real *x = get(&B, 0, 1), *y = get(&B, 1, 1);
        finish(&B, nb_axpby(c, y, alpha, x, beta, 1), c, "nb_axpby");
    } else {
        nb_real *x = get(&B, 0, n), *y = get(&B, 1, n);
        finish(&B, nb_axpby(c, y, alpha, x, beta, sn), c, "nb_axpby");
    }
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    rd r;
    nb_ctx c;
    unsigned what;
    r.p = data; r.n = size; r.at = 0;
    memset(&c, 0, sizeof c);
    what = u8(&r) % 11;
    c.num_threads = 1 + (int)(u8(&r) % 4);
    switch (what) {
    case 0: norms(&r, &c, 0, 0); break;
    case 1: norms(&r, &c, 0, 1); break;
    case 2: norms(&r, &c, 1, 0); break;
    case 3: norms(&r, &c, 1, 1); break;
    case 4: softmax(&r, &c, 0); break;
    case 5: softmax(&r, &c, 1); break;
    case 6: gemm(&r, &c); break;
    case 7: rope(&r, &c); break;
    case 9: norms(&r, &c, 0, 2); break;
    case 10: norms(&r, &c, 1, 2); break;
    default: elementwise(&r, &c); break;
    }
    return 0;
}

#ifndef NB_LIBFUZZER
static unsigned long long mix(unsigned long long* s) {
    unsigned long long z = (*s += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

int main(int argc, char** argv) {
    uint8_t b[64];
    unsigned long long st;
    long it, iters;
    int i;
    if (argc > 1 && strcmp(argv[1], "--corpus") == 0) {
        for (i = 2; i < argc; i++) {
            FILE* f = fopen(argv[i], "rb");
            size_t n;
            if (!f) return 1;
            n = fread(b, 1, sizeof b, f);
            fclose(f);
            LLVMFuzzerTestOneInput(b, n);
        }
        printf("fuzz_primitives: %d corpus inputs\n", argc - 2);
        return 0;
    }
    if (argc > 2 && strcmp(argv[1], "--write-seeds") == 0) {
        for (i = 0; i < 22; i++) {
            char path[512];
            FILE* f;
            size_t k;
            st = 0x5EED1000ULL + (unsigned long long)i;
            for (k = 0; k < 32; k++) b[k] = (uint8_t)(mix(&st) % 40);
            b[0] = (uint8_t)(i % 11);
            snprintf(path, sizeof path, "%s/seed%02d", argv[2], i);
            if (!(f = fopen(path, "wb"))) return 1;
            fwrite(b, 1, 32, f);
            fclose(f);
        }
        return 0;
    }
    iters = argc > 1 ? atol(argv[1]) : 5000;
    st = argc > 2 ? strtoull(argv[2], NULL, 0) : 0x9A1;
    for (it = 0; it < iters; it++) {
        const int len = 4 + (int)(mix(&st) % 28), rare = (int)(mix(&st) % 6);
        for (i = 0; i < len; i++) {
            const unsigned long long v = mix(&st);
            b[i] = (uint8_t)((int)(v % 16) < rare ? v >> 8 : (v >> 8) % 44);
        }
        b[0] = (uint8_t)(it % 9);
        LLVMFuzzerTestOneInput(b, (size_t)len);
    }
    printf("fuzz_primitives: %ld calls, %ld valid (exact buffers), %ld invalid (refused, "
           "untouched)\n", iters, n_valid, n_invalid);
    return 0;
}
#endif
