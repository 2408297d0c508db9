/* How a GEMM's threads share it: the 12 linear GEMMs of a Pre-Norm SwiGLU block at (B, T, d),
   split over THREADS the way the library did before (blocks of the larger of M and N only)
   and the way nb__gemm_grid splits them now (a grid of row and column blocks when those would
   be under NB__GEMM_THIN deep: it packs the operands fewer times). Float32, OpenBLAS, each
   block one single-threaded cblas_sgemm call, as the library makes them.
     share  one thread's block run alone on one core (the largest block of the split): what a
            thread computes, with its packs, but without the other threads' competition for
            memory; meaningful on any machine (GFLOP/s of that block)
     team   the whole GEMM on THREADS OpenMP threads, one block each (ms; only where the
            machine has THREADS cores to spare: on the 16-core device)
   Rows where the two splits agree are marked "same" and not timed.

   usage: bench_grid B T d THREADS REPS [team] */
#define _POSIX_C_SOURCE 200809L
#define NORMBLOCKS_IMPLEMENTATION
#include "normblocks.h"
#include "bench_common.h"

typedef struct split { int pr, pc; } split;

/* C's block (r, c) of the grid: its offsets and size */
static void block_of(const gemm_shape* s, split g, int r, int c, int* r0, int* m, int* c0,
                     int* n) {
    int r1, c1;
    nb__split(s->M, g.pr, r, r0, &r1);
    nb__split(s->N, g.pc, c, c0, &c1);
    *m = r1 - *r0;
    *n = c1 - *c0;
}

static void sgemm_block(const gemm_shape* s, const float* A, const float* B, float* C, int r0,
                        int m, int c0, int n) {
    const int lda = s->ta ? s->M : s->K, ldb = s->tb ? s->K : s->N;
    const float* a = s->ta ? A + r0 : A + (size_t)r0 * lda;
    const float* b = s->tb ? B + (size_t)c0 * ldb : B + c0;
    cblas_sgemm(CblasRowMajor, s->ta ? CblasTrans : CblasNoTrans,
                s->tb ? CblasTrans : CblasNoTrans, m, n, s->K, 1, a, lda, b, ldb, 0,
                C + (size_t)r0 * s->N + c0, s->N);
}

/* median seconds of one thread's block (0, 0): the largest of nb__split's */
static double time_share(const gemm_shape* s, split g, const float* A, const float* B, float* C,
                         int reps, double* flops) {
    double* t = (double*)malloc(sizeof(double) * (size_t)reps), med;
    int r0, m, c0, n, k;
    block_of(s, g, 0, 0, &r0, &m, &c0, &n);
    *flops = 2.0 * m * n * s->K;
    sgemm_block(s, A, B, C, r0, m, c0, n); /* warm-up */
    for (k = 0; k < reps; k++) {
        const double t0 = nbb_now();
        sgemm_block(s, A, B, C, r0, m, c0, n);
        t[k] = nbb_now() - t0;
    }
    med = nbb_median(t, reps);
    free(t);
    return med;
}

/* median seconds of the whole GEMM, one block per thread */
static double time_team(const gemm_shape* s, split g, const float* A, const float* B, float* C,
                        int reps) {
    double* t = (double*)malloc(sizeof(double) * (size_t)reps), med;
    int k;
    for (k = -1; k < reps; k++) {
        const double t0 = nbb_now();
        NB__OMP(parallel num_threads(g.pr * g.pc))
        {
            const int th = omp_get_thread_num();
            int r0, m, c0, n;
            block_of(s, g, th / g.pc, th % g.pc, &r0, &m, &c0, &n);
            if (m > 0 && n > 0) sgemm_block(s, A, B, C, r0, m, c0, n);
        }
        if (k >= 0) t[k] = nbb_now() - t0;
    }
    med = nbb_median(t, reps);
    free(t);
    return med;
}

int main(int argc, char** argv) {
    gemm_shape sh[12];
    int B, T, d, nt, reps, team, i;
    double tot[2] = {0, 0}, sum_flops = 0;
    tuned_env_restart(argv, TUNE_CORE);
    if (argc < 6) {
        fprintf(stderr, "usage: %s B T d THREADS REPS [team]\n", argv[0]);
        return 2;
    }
    B = atoi(argv[1]); T = atoi(argv[2]); d = atoi(argv[3]); nt = atoi(argv[4]);
    reps = atoi(argv[5]);
    team = argc > 6 && !strcmp(argv[6], "team");
    if (B < 1 || T < 1 || d < 8 || nt < 1 || reps < 1) {
        fprintf(stderr, "bench_grid: B, T, THREADS, REPS >= 1 and d >= 8\n");
        return 2;
    }
    nbb_block_gemms(B, T, d, sh);
    nbb_print_env("bench_grid");
    printf("# the 12 linear GEMMs of a Pre-Norm SwiGLU block, (B,T,d) = (%d,%d,%d), split over %d "
           "threads; median of %d; %s\n", B, T, d, nt, reps,
           team ? "the whole GEMM on the team, ms" : "one thread's block alone, GFLOP/s");
    printf("%-8s %6s %6s %6s %9s %9s %9s %9s %6s\n", "gemm", "M", "N", "K", "split", "before",
           "grid", "now", "ratio");
    for (i = 0; i < 12; i++) {
        const gemm_shape* s = &sh[i];
        const size_t na = (size_t)s->M * s->K, nb = (size_t)s->K * s->N;
        float *A = nbb_alloc(na), *Bm = nbb_alloc(nb), *C = nbb_alloc((size_t)s->M * s->N);
        split g[2];
        double t[2], v[2], fl = 0;
        int k;
        g[0].pr = s->M >= s->N ? nt : 1; /* before: the larger dimension's blocks */
        g[0].pc = s->M >= s->N ? 1 : nt;
        nb__gemm_grid(s->M, s->N, s->K, nt, &g[1].pr, &g[1].pc);
        nb_fill_normal(A, na, 0, 1, (unsigned long long)i + 1);
        nb_fill_normal(Bm, nb, 0, 1, (unsigned long long)i + 100);
        sum_flops += 2.0 * s->M * s->N * s->K;
        for (k = 0; k < 2; k++) { /* the same split twice: timed once */
            t[k] = k && g[1].pr == g[0].pr ? t[0]
                   : team ? time_team(s, g[k], A, Bm, C, reps)
                          : time_share(s, g[k], A, Bm, C, reps, &fl);
            v[k] = team ? 1e3 * t[k] : fl / t[k] / 1e9;
            tot[k] += t[k];
        }
        printf("%-8s %6d %6d %6d %4dx%-4d %9.1f %4dx%-4d %9.1f %5.2fx%s\n", s->what, s->M, s->N,
               s->K, g[0].pr, g[0].pc, v[0], g[1].pr, g[1].pc, v[1],
               team ? v[0] / v[1] : v[1] / v[0], g[1].pr == g[0].pr ? " same" : "");
        free(A); free(Bm); free(C);
    }
    if (team)
        printf("all 12 on %d threads: before %.2f ms (%.1f GFLOP/s), now %.2f ms (%.1f GFLOP/s): "
               "%.2fx\n", nt, 1e3 * tot[0], sum_flops / tot[0] / 1e9, 1e3 * tot[1],
               sum_flops / tot[1] / 1e9, tot[0] / tot[1]);
    else /* the threads run their blocks side by side: the largest block is the GEMM's time */
        printf("all 12, a thread's block each: before %.2f ms, now %.2f ms (%.2fx): the time of "
               "%d threads without contention\n", 1e3 * tot[0], 1e3 * tot[1], tot[0] / tot[1],
               nt);
    return 0;
}
