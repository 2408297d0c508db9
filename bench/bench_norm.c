/* RMSNorm / LayerNorm forward+backward (with gain, and bias for LayerNorm; gradients of
   gain/bias included) against a STREAM-style copy of the same size in the same process.

   usage: bench_norm rms|layer N d THREADS REPS [WARMUP]

   Bytes counted (the minimum a norm must move): forward reads x and writes y = 2*N*d*4;
   backward reads x and dy and writes dx = 3*N*d*4 (per-row statistics and gains are ignored).
   The copy moves 2*N*d*4 bytes per call (read src, write dst, N*d floats each); its GB/s is the
   bandwidth of the level of the memory hierarchy where arrays of this size live. */
#define _POSIX_C_SOURCE 200809L
#define NORMBLOCKS_IMPLEMENTATION
#include "normblocks.h"
#include "bench_common.h"

typedef struct norm_run {
    nb_ctx ctx;
    int layer, N, d;
    float *x, *y, *dy, *dx, *gain, *bias, *dgain, *dbias, *mean, *rstd, *scratch;
    double t_fwd, t_bwd;
} norm_run;

typedef struct copy_run { float *dst, *src; size_t n; int nt; } copy_run;

static void fail(norm_run* r) {
    fprintf(stderr, "bench_norm: %s\n", r->ctx.err);
    exit(1);
}

static void norm_step(void* arg) {
    norm_run* r = (norm_run*)arg;
    const int N = r->N, d = r->d;
    double t0 = nbb_now(), t1;
    if (r->layer) {
        if (nb_layernorm_forward(&r->ctx, r->y, d, r->mean, r->rstd, r->x, d, r->gain, r->bias,
                                 N, d, 0, 1e-5f)) fail(r);
        t1 = nbb_now();
        if (nb_layernorm_backward(&r->ctx, r->dx, d, r->dgain, r->dbias, r->dy, d, r->x, d,
                                  r->mean, r->rstd, r->gain, N, d, 0, 0, r->scratch)) fail(r);
    } else {
        if (nb_rmsnorm_forward(&r->ctx, r->y, d, r->rstd, r->x, d, r->gain, N, d, 0, 1e-5f))
            fail(r);
        t1 = nbb_now();
        if (nb_rmsnorm_backward(&r->ctx, r->dx, d, r->dgain, r->dy, d, r->x, d, r->rstd,
                                r->gain, N, d, 0, 0, r->scratch)) fail(r);
    }
    r->t_fwd = t1 - t0;
    r->t_bwd = nbb_now() - t1;
}

static void copy_step(void* arg) {
    copy_run* c = (copy_run*)arg;
    nbb_copy(c->dst, c->src, c->n, c->nt);
}

/* the norm's own traffic, streamed: y = x (forward's), dx = x + dy (backward's) */
static void stream_step(void* arg) {
    norm_run* r = (norm_run*)arg;
    const size_t n = (size_t)r->N * r->d;
    nbb_copy(r->y, r->x, n, r->ctx.num_threads);
    nbb_add(r->dx, r->x, r->dy, n, r->ctx.num_threads);
}

int main(int argc, char** argv) {
    norm_run r;
    copy_run c;
    double t, tc, spread, spread_c, fwd, bwd, bytes_f, bytes_b, bw, bwc, rss;
    double others, ts, spread_s;
    nbb_load l0;
    int nt, reps, warm, i;
    size_t n;
    tuned_env_restart(argv, TUNE_CORE); /* OpenBLAS's core when it fell to Prescott */
    if (argc < 6) {
        fprintf(stderr, "usage: %s rms|layer N d THREADS REPS [WARMUP]\n", argv[0]);
        return 2;
    }
    memset(&r, 0, sizeof r);
    r.layer = !strcmp(argv[1], "layer");
    r.N = atoi(argv[2]); r.d = atoi(argv[3]); nt = atoi(argv[4]); reps = atoi(argv[5]);
    warm = argc > 6 ? atoi(argv[6]) : 2;
    r.ctx.num_threads = nt;
    nbb_print_env("bench_norm");
    n = (size_t)r.N * r.d;
    r.x = nbb_alloc(n); r.y = nbb_alloc(n); r.dy = nbb_alloc(n); r.dx = nbb_alloc(n);
    r.gain = nbb_alloc(r.d); r.bias = nbb_alloc(r.d); r.dgain = nbb_alloc(r.d);
    r.dbias = nbb_alloc(r.d); r.mean = nbb_alloc(r.N); r.rstd = nbb_alloc(r.N);
    r.scratch = nbb_alloc(nb_norm_scratch_size(&r.ctx, r.d, 0));
    nb_fill_normal(r.x, n, 1, 3, 1);
    nb_fill_normal(r.dy, n, 1, 3, 2);
    nb_fill_normal(r.gain, (size_t)r.d, 0.1, 3, 3);
    for (i = 0; i < r.d; i++) r.gain[i] += 1;

    /* the copy reuses the norm's own arrays (same size, same pages) */
    c.dst = r.y; c.src = r.x; c.n = n; c.nt = nt;
    l0 = nbb_load_now();
    for (i = 0; i < warm; i++) { norm_step(&r); copy_step(&c); stream_step(&r); }
    rss = nbb_maxrss_mib();
    {
        /* norm, copy and streamed traffic alternate, so their ratios see the same machine */
        double *tn = (double*)malloc(sizeof(double) * 5 * (size_t)reps), *tf = tn + reps,
               *tb = tf + reps, *tcs = tb + reps, *tss = tcs + reps, t0;
        for (i = 0; i < reps; i++) {
            t0 = nbb_now();
            norm_step(&r);
            tn[i] = nbb_now() - t0;
            tf[i] = r.t_fwd; tb[i] = r.t_bwd;
            t0 = nbb_now();
            copy_step(&c);
            tcs[i] = nbb_now() - t0;
            t0 = nbb_now();
            stream_step(&r);
            tss[i] = nbb_now() - t0;
        }
        t = nbb_median(tn, reps); spread = nbb_spread(tn, reps, t);
        fwd = nbb_median(tf, reps); bwd = nbb_median(tb, reps);
        tc = nbb_median(tcs, reps); spread_c = nbb_spread(tcs, reps, tc);
        ts = nbb_median(tss, reps); spread_s = nbb_spread(tss, reps, ts);
        free(tn);
    }
    others = nbb_others(l0, nbb_load_now());

    bytes_f = 2.0 * n * 4; bytes_b = 3.0 * n * 4;
    bw = (bytes_f + bytes_b) / t * 1e-9;
    bwc = 2.0 * n * 4 / tc * 1e-9;
    printf("# %s N=%d d=%d threads=%d (%.1f MiB per array)\n", r.layer ? "LayerNorm" : "RMSNorm",
           r.N, r.d, nt, n * 4.0 / 1048576);
    printf("  fwd+bwd %8.3f ms (fwd %.3f ms %.1f GB/s, bwd %.3f ms %.1f GB/s; spread %.0f%%) "
           "%.1f GB/s = %.0f%% of copy\n", 1e3 * t, 1e3 * fwd, bytes_f / fwd * 1e-9, 1e3 * bwd,
           bytes_b / bwd * 1e-9, 100 * spread, bw, 100 * bw / bwc);
    printf("  copy    %8.3f ms %.1f GB/s (spread %.0f%%); other processes used %.0f%% of the CPUs\n",
           1e3 * tc, bwc, 100 * spread_c, 100 * others);
    printf("  same traffic streamed (y = x; dx = x + dy) %8.3f ms %.1f GB/s (spread %.0f%%): the norm "
           "runs at %.0f%% of it\n", 1e3 * ts, (bytes_f + bytes_b) / ts * 1e-9, 100 * spread_s,
           100 * ts / t);
    printf("RESULT kind=norm norm=%s N=%d d=%d threads=%d reps=%d ms=%.4f fwd_ms=%.4f bwd_ms=%.4f "
           "gbytes=%.6f copy_ms=%.4f copy_gbytes=%.6f stream_ms=%.4f rss_mib=%.1f spread=%.3f others=%.3f core=%s\n",
           r.layer ? "layer" : "rms", r.N, r.d, nt, reps, 1e3 * t, 1e3 * fwd, 1e3 * bwd,
           (bytes_f + bytes_b) * 1e-9, 1e3 * tc, 2.0 * n * 4 * 1e-9, 1e3 * ts, rss, spread, others,
           nbb_corename());
    return 0;
}
