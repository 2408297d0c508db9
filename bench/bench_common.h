/* Shared helpers of the normblocks benchmarks (the bench_*.c programs): timing, medians, peak RSS, the
   environment report (BLAS core, threads) and a STREAM-style copy.

   Every program prints human-readable lines and one machine-readable line per case:
       RESULT key=value key=value ...
   that bench/report.py turns into the table of bench/README.md. */
#ifndef NB_BENCH_COMMON_H
#define NB_BENCH_COMMON_H
/* each bench .c defines _POSIX_C_SOURCE 200809L before its first #include (clock_gettime,
   posix_memalign under -std=c99) */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/resource.h>
#include <unistd.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#include "normblocks.h"
#include "../examples/tuned_env.h"

#if defined(__GNUC__)
#define NBB_UNUSED __attribute__((unused))
#else
#define NBB_UNUSED
#endif

static NBB_UNUSED double nbb_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static NBB_UNUSED int nbb_cmp(const void* a, const void* b) {
    const double x = *(const double*)a, y = *(const double*)b;
    return x < y ? -1 : x > y;
}

/* median of n values (sorts v) */
static NBB_UNUSED double nbb_median(double* v, int n) {
    qsort(v, (size_t)n, sizeof *v, nbb_cmp);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* relative spread (max - min) / median of the sorted samples, to show the noise */
static NBB_UNUSED double nbb_spread(const double* sorted, int n, double med) {
    return med > 0 ? (sorted[n - 1] - sorted[0]) / med : 0;
}

/* peak resident set of this process so far, MiB (Linux reports KiB) */
static NBB_UNUSED double nbb_maxrss_mib(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_maxrss / 1024.0;
}

/* CPU seconds used by the whole machine (from /proc/stat) and by this process: the difference
   over a timed region is what other processes took, i.e. how contaminated the measurement is
   on a shared machine. */
typedef struct nbb_load { double wall, busy, own; } nbb_load;
static NBB_UNUSED nbb_load nbb_load_now(void) {
    nbb_load l;
    struct rusage ru;
    unsigned long long v[8] = {0};
    FILE* f = fopen("/proc/stat", "r");
    l.wall = nbb_now();
    l.busy = -1;
    if (f) {
        if (fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3],
                   &v[4], &v[5], &v[6], &v[7]) == 8)
            l.busy = (double)(v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / (double)sysconf(_SC_CLK_TCK);
        fclose(f);
    }
    getrusage(RUSAGE_SELF, &ru);
    l.own = (double)ru.ru_utime.tv_sec + 1e-6 * (double)ru.ru_utime.tv_usec +
            (double)ru.ru_stime.tv_sec + 1e-6 * (double)ru.ru_stime.tv_usec;
    return l;
}
/* fraction of the machine's CPUs other processes used between a and b (0 = quiet) */
static NBB_UNUSED double nbb_others(nbb_load a, nbb_load b) {
    const double ncpu = (double)sysconf(_SC_NPROCESSORS_ONLN), wall = b.wall - a.wall;
    double o;
    if (a.busy < 0 || b.busy < 0 || wall <= 0) return -1;
    o = ((b.busy - a.busy) - (b.own - a.own)) / (wall * ncpu);
    return o < 0 ? 0 : o;
}

/* 64-byte aligned, first-touched (zeroed) so page faults are not timed */
static NBB_UNUSED float* nbb_alloc(size_t n) {
    size_t bytes = (n * sizeof(float) + 63) / 64 * 64;
    void* v;
    float* p;
    if (bytes == 0) bytes = 64;
    if (posix_memalign(&v, 64, bytes) != 0) v = NULL;
    p = (float*)v;
    if (!p) {
        fprintf(stderr, "bench: out of memory (%zu bytes)\n", bytes);
        exit(2);
    }
    memset(p, 0, bytes);
    return p;
}

static NBB_UNUSED const char* nbb_getenv(const char* name) {
    const char* v = getenv(name);
    return v ? v : "(unset)";
}

static NBB_UNUSED const char* nbb_corename(void) {
#if !defined(NB_NO_BLAS) && defined(OPENBLAS_SEQUENTIAL)
    return openblas_get_corename();
#else
    return "(not OpenBLAS)";
#endif
}

/* The environment every result depends on; warns loudly about OpenBLAS's Prescott fallback.
   NBB_FTZ=1 in the environment sets flush-to-zero / denormals-are-zero on the calling thread
   (a diagnostic: if it changes a timing, denormal floats are costing time). */
#ifndef NBB_FLAGS
#define NBB_FLAGS "(unknown flags)"
#endif

static NBB_UNUSED void nbb_print_env(const char* prog) {
    const char* core = nbb_corename();
#if defined(__x86_64__) || defined(__i386__)
    if (getenv("NBB_FTZ")) {
        unsigned int csr;
        __asm__ volatile("stmxcsr %0" : "=m"(csr));
        csr |= 0x8040u; /* FTZ | DAZ */
        __asm__ volatile("ldmxcsr %0" : : "m"(csr));
        printf("# %s: NBB_FTZ set: flush-to-zero and denormals-are-zero on\n", prog);
    }
#endif
    printf("# %s: OpenBLAS core=%s nb_blas_threads()=%d OPENBLAS_NUM_THREADS=%s "
           "OPENBLAS_CORETYPE=%s%s OMP_WAIT_POLICY=%s compiled with %s\n",
           prog, core, nb_blas_threads(), nbb_getenv("OPENBLAS_NUM_THREADS"),
           nbb_getenv("OPENBLAS_CORETYPE"),
           tuned_env_set() & TUNE_CORE ? " (set by the bench: OpenBLAS picked Prescott)" : "",
           nbb_getenv("OMP_WAIT_POLICY"), NBB_FLAGS);
    if (strstr(core, "Prescott") || strstr(core, "prescott")) {
        fprintf(stderr,
                "\n!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!\n"
                "!! WARNING: OpenBLAS runs its generic 'Prescott' (SSE3) kernels: GEMMs are 5-6x\n"
                "!! slow and every figure below is meaningless. export OPENBLAS_CORETYPE=SkylakeX\n"
                "!! (AVX-512) or Haswell (AVX2) before starting the program.\n"
                "!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!\n\n");
        printf("# WARNING: OpenBLAS core is Prescott (slow SSE3 fallback)\n");
    }
}

/* STREAM-style copy dst = src over n floats on nt OpenMP threads (static split, like the norms) */
static NBB_UNUSED void nbb_copy(float* dst, const float* src, size_t n, int nt) {
    long long i, nn = (long long)n;
    (void)nt;
#ifdef _OPENMP
#pragma omp parallel for simd schedule(static) num_threads(nt)
#endif
    for (i = 0; i < nn; i++) dst[i] = src[i];
}

/* STREAM-style add dst = a + b over n floats (three streams), split like nbb_copy */
static NBB_UNUSED void nbb_add(float* dst, const float* a, const float* b, size_t n, int nt) {
    long long i, nn = (long long)n;
    (void)nt;
#ifdef _OPENMP
#pragma omp parallel for simd schedule(static) num_threads(nt)
#endif
    for (i = 0; i < nn; i++) dst[i] = a[i] + b[i];
}

typedef void (*nbb_fn)(void* arg);

/* Time a forward+backward step: fn(arg) runs both and leaves its phase times in *t_fwd and
   *t_bwd. Medians over reps calls after `warm` warm-up calls, and the spread of the total. */
typedef struct nbb_fb_times { double total, fwd, bwd, spread; } nbb_fb_times;
static NBB_UNUSED nbb_fb_times nbb_time_fb(nbb_fn fn, void* arg, const double* t_fwd,
                                            const double* t_bwd, int warm, int reps) {
    const size_t n = (size_t)(reps > 0 ? reps : 1);
    double *tt = (double*)malloc(sizeof(double) * n), *tf = (double*)malloc(sizeof(double) * n),
           *tb = (double*)malloc(sizeof(double) * n);
    nbb_fb_times r;
    int i;
    for (i = 0; i < warm; i++) fn(arg);
    for (i = 0; i < reps; i++) {
        const double t0 = nbb_now();
        fn(arg);
        tt[i] = nbb_now() - t0;
        tf[i] = *t_fwd;
        tb[i] = *t_bwd;
    }
    r.total = nbb_median(tt, reps);
    r.spread = nbb_spread(tt, reps, r.total);
    r.fwd = nbb_median(tf, reps);
    r.bwd = nbb_median(tb, reps);
    free(tt); free(tf); free(tb);
    return r;
}

/* The 12 linear GEMMs of a Pre-Norm SwiGLU block at (B, T, d): forward, dX and dW of W_qkv, W_o,
   W_in and W_out, as nb_attn/ffn_forward/backward call them (bench_dnnl, bench_grid). C
   (M x N) = op(A) op(B), row-major, op(A) M x K, op(B) K x N. */
typedef struct gemm_shape {
    const char* what;
    int ta, tb, M, N, K;
} gemm_shape;
static NBB_UNUSED void nbb_block_gemms(int B, int T, int d, gemm_shape* sh) {
    const int BT = B * T, P = 3 * d, f = (8 * d / 3 + 63) / 64 * 64;
    const gemm_shape s[12] = {
        {"qkv fwd", 0, 1, BT, P, d}, {"qkv dX", 0, 0, BT, d, P}, {"qkv dW", 1, 0, P, d, BT},
        {"o fwd", 0, 1, BT, d, d}, {"o dX", 0, 0, BT, d, d}, {"o dW", 1, 0, d, d, BT},
        {"in fwd", 0, 1, BT, 2 * f, d}, {"in dX", 0, 0, BT, d, 2 * f},
        {"in dW", 1, 0, 2 * f, d, BT}, {"out fwd", 0, 1, BT, d, f},
        {"out dX", 0, 0, BT, f, d}, {"out dW", 1, 0, d, f, BT}};
    memcpy(sh, s, sizeof s);
}

#endif
