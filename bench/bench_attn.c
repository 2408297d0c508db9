/* Attention sublayer forward+backward (nb_attn_plan_make / nb_attn_forward / nb_attn_backward)
   in one memory mode: PROBS (B*H*T*T softmax probabilities cached) or LSE (one log-sum-exp per
   row cached, scores recomputed in row tiles by backward).

   usage: bench_attn probs|lse T d H THREADS REPS [WARMUP] [B]

   Flops: projections 2*M*N*K per GEMM, causal attention per computed 64-row tile
   (S = Q K^T and O = P V), backward counted as 2 x forward; LSE's recompute of the scores in
   backward is real work that is NOT counted (so LSE's GFLOP/s is "useful" flops).
   Memory: the plan's cache + scratch (what the caller allocates) and this process's peak RSS.
   Runs each (mode, T) in its own process so ru_maxrss belongs to the case. */
#define _POSIX_C_SOURCE 200809L
#define NORMBLOCKS_IMPLEMENTATION
#include "normblocks.h"
#include "bench_common.h"

#define TILE 64
#define PROBS_LIMIT_BYTES (8.0 * 1024 * 1024 * 1024)

typedef struct attn_run {
    nb_ctx ctx;
    nb_attn_plan plan;
    nb_attn_params p, g;
    float *params, *grads, *x, *out, *dout, *dx, *cache, *scratch;
    int B, T;
    double t_fwd, t_bwd;
} attn_run;

static void fail(attn_run* r, const char* what) {
    fprintf(stderr, "bench_attn: %s: %s\n", what, r->ctx.err);
    exit(1);
}

static void attn_step(void* arg) {
    attn_run* r = (attn_run*)arg;
    double t0 = nbb_now(), t1;
    if (nb_attn_forward(&r->ctx, &r->plan, &r->p, r->out, r->x, r->B, r->T, r->cache, r->scratch))
        fail(r, "nb_attn_forward");
    t1 = nbb_now();
    if (nb_attn_backward(&r->ctx, &r->plan, &r->p, &r->g, r->dx, r->dout, r->x, r->B, r->T,
                         r->cache, r->scratch, 0))
        fail(r, "nb_attn_backward");
    r->t_fwd = t1 - t0;
    r->t_bwd = nbb_now() - t1;
}

int main(int argc, char** argv) {
    attn_run r;
    nb_attn_desc desc;
    double t, spread, fwd, bwd, fl, attn_fl = 0, mem_mib, rss0, rss, bytes;
    double others;
    nbb_load l0;
    int T, d, H, nt, reps, warm, B, lse, i0;
    size_t n;
    tuned_env_restart(argv, TUNE_CORE); /* OpenBLAS's core when it fell to Prescott */
    if (argc < 7) {
        fprintf(stderr, "usage: %s probs|lse T d H THREADS REPS [WARMUP] [B]\n", argv[0]);
        return 2;
    }
    lse = !strcmp(argv[1], "lse");
    T = atoi(argv[2]); d = atoi(argv[3]); H = atoi(argv[4]); nt = atoi(argv[5]);
    reps = atoi(argv[6]); warm = argc > 7 ? atoi(argv[7]) : 1; B = argc > 8 ? atoi(argv[8]) : 1;
    nbb_print_env("bench_attn");
    rss0 = nbb_maxrss_mib();
    memset(&r, 0, sizeof r);
    r.ctx.num_threads = nt;
    r.B = B; r.T = T;
    memset(&desc, 0, sizeof desc);
    desc.d_model = d; desc.n_heads = H;
    desc.attn.memory = lse ? NB_ATTN_MEMORY_LSE : NB_ATTN_MEMORY_PROBS;
    if (!lse && (double)B * H * T * T * 4 > PROBS_LIMIT_BYTES) {
        printf("# attention PROBS T=%d: skipped, the probabilities alone need %.1f GiB (> 8 GiB)\n",
               T, (double)B * H * T * T * 4 / 1073741824.0);
        printf("RESULT kind=attn mode=probs T=%d d=%d H=%d B=%d threads=%d skipped=1\n", T, d, H,
               B, nt);
        return 0;
    }
    if (nb_attn_plan_make(&r.ctx, &r.plan, &desc, B, T)) fail(&r, "nb_attn_plan_make");
    n = (size_t)B * T * d;
    r.params = nbb_alloc(r.plan.n_params); r.grads = nbb_alloc(r.plan.n_params);
    nb_attn_params_bind(&r.plan, r.params, &r.p);
    nb_attn_params_bind(&r.plan, r.grads, &r.g);
    nb_fill_normal(r.params, r.plan.n_params, 0.02, 3, 1);
    r.x = nbb_alloc(n); r.out = nbb_alloc(n); r.dout = nbb_alloc(n); r.dx = nbb_alloc(n);
    r.cache = nbb_alloc(r.plan.n_cache); r.scratch = nbb_alloc(r.plan.n_scratch);
    nb_fill_normal(r.x, n, 1, 3, 2);
    nb_fill_normal(r.dout, n, 1, 3, 3);
    mem_mib = (r.plan.n_cache + r.plan.n_scratch) * 4.0 / 1048576;

    for (i0 = 0; i0 < T; i0 += TILE) {
        const int rows = T - i0 < TILE ? T - i0 : TILE;
        attn_fl += 2.0 * 2.0 * rows * (i0 + rows) * (d / H);
    }
    fl = 3 * (2.0 * B * T * ((double)3 * d * d + (double)d * d) + attn_fl * B * H);
    bytes = 4.0 * (4.0 * r.plan.n_params + 2.0 * r.plan.n_cache);

    l0 = nbb_load_now();
    {
        const nbb_fb_times ft = nbb_time_fb(attn_step, &r, &r.t_fwd, &r.t_bwd, warm, reps);
        t = ft.total; fwd = ft.fwd; bwd = ft.bwd; spread = ft.spread;
    }
    rss = nbb_maxrss_mib();
    others = nbb_others(l0, nbb_load_now());
    printf("# attention %s (B,T,d,H)=(%d,%d,%d,%d) threads=%d: cache %.1f MiB + scratch %.1f MiB\n",
           lse ? "LSE" : "PROBS", B, T, d, H, nt, r.plan.n_cache * 4.0 / 1048576,
           r.plan.n_scratch * 4.0 / 1048576);
    printf("  fwd+bwd %9.2f ms (fwd %.2f, bwd %.2f; spread %.0f%%) %.1f GFLOP/s %.1f GB/s "
           "peak RSS %.0f MiB (%.0f MiB at start); others used %.0f%% of the CPUs\n", 1e3 * t, 1e3 * fwd, 1e3 * bwd, 100 * spread,
           fl / t * 1e-9, bytes / t * 1e-9, rss, rss0, 100 * others);
    printf("RESULT kind=attn mode=%s T=%d d=%d H=%d B=%d threads=%d reps=%d ms=%.3f fwd_ms=%.3f "
           "bwd_ms=%.3f gflop=%.4f gbytes=%.4f plan_mib=%.1f cache_mib=%.1f rss_mib=%.1f "
           "spread=%.3f others=%.3f core=%s skipped=0\n",
           lse ? "lse" : "probs", T, d, H, B, nt, reps, 1e3 * t, 1e3 * fwd, 1e3 * bwd, fl * 1e-9,
           bytes * 1e-9, mem_mib, r.plan.n_cache * 4.0 / 1048576, rss, spread, others, nbb_corename());
    return 0;
}
