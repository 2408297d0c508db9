/* Threads: 1 and 2 threads agree to rounding (the per-thread partial sums of dgain/dbias are
   added in a different grouping), and the same thread count run twice is bitwise identical;
   the GEMM's thread grid likewise. */
#define NORMBLOCKS_IMPLEMENTATION
#include "normblocks.h"
#include "nbtest.h"

enum { R = 257, W = 96, SEG = 32, NOUT = 8 };

/* Run every kernel once with `threads` threads; outputs concatenated into out. */
static size_t run_all(int threads, const nb_real* x, const nb_real* dy, const nb_real* gain,
                      const nb_real* bias, nb_real* out) {
    nb_ctx ctx;
    nb_real *y = nbt_alloc(R * W), *dx = nbt_alloc(R * W), *mean = nbt_alloc(R * W / SEG),
            *rstd = nbt_alloc(R * W / SEG), *dg = nbt_alloc(SEG), *db = nbt_alloc(SEG),
            *lse = nbt_alloc(R), *s = nbt_alloc(R * R), *p = nbt_alloc(R * R);
    nb_real* scratch;
    size_t o = 0;
    memset(&ctx, 0, sizeof ctx);
    ctx.num_threads = threads;
    scratch = nbt_alloc(nb_norm_scratch_size(&ctx, W, SEG));
#define KEEP(a, n) (memcpy(out + o, a, (n) * sizeof(nb_real)), o += (n))
    nb_rmsnorm_forward(&ctx, y, W, rstd, x, W, gain, R, W, SEG, 1e-5f);
    KEEP(y, R * W);
    nb_rmsnorm_backward(&ctx, dx, W, dg, dy, W, x, W, rstd, gain, R, W, SEG, 0, scratch);
    KEEP(dx, R * W); KEEP(dg, SEG);
    memset(dg, 0, SEG * sizeof(nb_real));
    nb_layernorm_forward(&ctx, y, W, mean, rstd, x, W, gain, bias, R, W, 0 + SEG, 1e-5f);
    KEEP(y, R * W);
    nb_layernorm_backward(&ctx, dx, W, dg, db, dy, W, x, W, mean, rstd, gain, R, W, SEG, 1,
                          scratch);
    KEEP(dx, R * W); KEEP(dg, SEG); KEEP(db, SEG);
    nb_gemm_ref(&ctx, 0, 1, R, R, W, 0.125f, x, W, dy, W, 0, s, R);
    KEEP(s, R * R);
    nb_softmax_forward(&ctx, p, R, lse, s, R, R, R, 0.5f, 1);
    KEEP(p, R * R); KEEP(lse, R);
    nb_softmax_backward(&ctx, s, R, s, R, p, R, R, R, 0.5f, 1);
    KEEP(s, R * R);
#undef KEEP
    free(y); free(dx); free(mean); free(rstd); free(dg); free(db); free(lse); free(s); free(p);
    free(scratch);
    return o;
}

/* The GEMM's thread grid (nb__gemm_grid): the rule's choices, and a grid of blocks in both
   directions computing what one thread does (to rounding; bitwise twice), every transpose,
   float32 and bf16. */
static void gemm_grid(nbt_rng* rng) {
    enum { M = 90, N = 200, K = 70, NT = 6 };
    static const struct { int M, N, K, nt, pr, pc; } rule[] = {
        {1024, 1024, 2816, 16, 4, 4}, /* the FFN's dX at d = 1024: 64 rows a thread is thin */
        {1024, 5632, 1024, 16, 1, 16}, /* its input projection: 352 columns a thread, kept */
        {1024, 512, 1408, 16, 8, 2},  {1024, 1536, 512, 16, 4, 4}, {M, N, K, NT, 2, 3},
        {1000, 700, 300, 2, 2, 1},    {700, 1000, 300, 2, 1, 2}, /* 2 threads: as before */
        {64, 64, 64, 2, 2, 1},        {6, 40, 8, 2, 1, 2},       {7, 7, 7, 7, 7, 1}};
    nb_real *a = nbt_alloc(M * K), *b = nbt_alloc(K * N), *c[3];
    size_t i;
    int k, bf, ta, tb;
    char name[96];
    for (i = 0; i < sizeof rule / sizeof rule[0]; i++) {
        int pr, pc;
        nb__gemm_grid(rule[i].M, rule[i].N, rule[i].K, rule[i].nt, &pr, &pc);
        snprintf(name, sizeof name, "gemm grid %dx%dx%d on %d threads: %d x %d (want %d x %d)",
                 rule[i].M, rule[i].N, rule[i].K, rule[i].nt, pr, pc, rule[i].pr, rule[i].pc);
        nbt_check(pr == rule[i].pr && pc == rule[i].pc, name);
    }
    for (k = 0; k < 3; k++) c[k] = nbt_alloc(M * N);
    nbt_fill(rng, a, M * K, 0, 1);
    nbt_fill(rng, b, K * N, 0, 1);
    for (bf = 0; bf < 2; bf++)
        for (ta = 0; ta < 2; ta++)
            for (tb = 0; tb < 2; tb++) {
                for (k = 0; k < 3; k++) {
                    nb_ctx ctx;
                    memset(&ctx, 0, sizeof ctx);
                    ctx.num_threads = k ? NT : 1;
                    nbt_check((bf ? nb_gemm_bf16 : nb_gemm)(&ctx, ta, tb, M, N, K, 1, a,
                                                            ta ? M : K, b, tb ? K : N, 0, c[k],
                                                            N) == NB_OK, "gemm grid: the call");
                }
                snprintf(name, sizeof name, "gemm on a %d-thread grid = 1 thread (%s, %c%c)", NT,
                         bf ? "bf16" : "float32", ta ? 'T' : 'N', tb ? 'T' : 'N');
                nbt_close_r(name, c[1], c[0], M * N, NBT_ATOL, NBT_RTOL);
                snprintf(name, sizeof name, "gemm on a %d-thread grid twice: bitwise (%s, %c%c)",
                         NT, bf ? "bf16" : "float32", ta ? 'T' : 'N', tb ? 'T' : 'N');
                nbt_same_bits(name, c[2], c[1], M * N);
            }
    free(a); free(b);
    for (k = 0; k < 3; k++) free(c[k]);
}

int main(void) {
    const size_t cap = (size_t)NOUT * R * R;
    nb_real *x = nbt_alloc(R * W), *dy = nbt_alloc(R * W), *gain = nbt_alloc(SEG),
            *bias = nbt_alloc(SEG);
    nb_real *o1 = nbt_alloc(cap), *o2 = nbt_alloc(cap), *o2b = nbt_alloc(cap);
    nbt_rng rng = {42};
    size_t n1, n2, n2b;
    nbt_fill(&rng, x, R * W, 0.5, 2);
    nbt_fill(&rng, dy, R * W, 0, 1);
    nbt_fill(&rng, gain, SEG, 1, 0.3);
    nbt_fill(&rng, bias, SEG, 0, 0.3);
    n1 = run_all(1, x, dy, gain, bias, o1);
    n2 = run_all(2, x, dy, gain, bias, o2);
    n2b = run_all(2, x, dy, gain, bias, o2b);
    nbt_check(n1 == n2 && n2 == n2b, "same amount of output");
    nbt_close_r("1 thread vs 2 threads", o2, o1, n1, NBT_ATOL, NBT_RTOL);
    nbt_same_bits("2 threads twice: bitwise identical", o2, o2b, n2);
    gemm_grid(&rng);
    free(x); free(dy); free(gain); free(bias); free(o1); free(o2); free(o2b);
    return nbt_finish();
}
