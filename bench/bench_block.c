/* Block forward+backward: a 1-layer stack (final norm off where the preset allows it) through
   nb_stack_forward + nb_stack_backward, against its "GEMM skeleton": exactly the block's own
   GEMM calls (same shapes, transposes, strides, alpha/beta), run alone with the same BLAS and
   the same threading (projections through nb_gemm; per-head attention GEMMs as single-threaded
   cblas_sgemm calls over (b, h, row tile) tasks on OpenMP threads, like the library does).

   usage: bench_block PRESET B T d H THREADS REPS [WARMUP]
   (NBB_NO_SKELETON=1 in the environment times the block alone, for profiling; NBB_BF16=1 runs
   the block with precision BF16, with the float32 skeleton for reference and its non-GEMM
   share from the profile, the share of the block outside its bf16 linear GEMMs; NBB_BACKEND=blas|dnnl
   picks the stack's GEMM backend (default: the library's choice); NBB_BF16_WEIGHTS=1 with
   NBB_BF16 reads the weights from a bf16 copy made once, as a trainer's optimizer writes it,
   instead of rounding them in every forward (desc.bf16_weights); NBB_BF16_OUT=1 with NBB_BF16
   keeps the FFN's hidden layer in bf16, autocast's numerics (desc.gemm.bf16_outputs: bf16 GEMM
   outputs on oneDNN); NBB_ATTN=0|1|2|3 with NBB_BF16
   runs the attention products emulated, or packed on the portable, AVX512-BF16 or AMX kernel
   (at most what the CPU has), instead of the library's choice; NBB_GEMM=0|1|2|3 the same for
   the linear GEMMs where oneDNN does not run them (0 the emulation, else normblocks' GEMM on
   that kernel: the portable path's choice on AMX). Each row names the kernels that ran
   (nb_stack_kernels; NBB_ATTN and NBB_GEMM print their own line); bench_dnnl times the linear
   GEMMs alone in bf16 on oneDNN and on the tiles)
     PRESET: any nb_preset_from_name name (pre, hybrid, siamese, gpt2, ...)

   Flops counted (the same count is used for normblocks, the skeleton and PyTorch):
     forward  = sum over the block's GEMMs of 2*M*N*K, where causal attention counts the tiles
                normblocks actually computes (64-row query tiles x the keys up to the tile's end);
     backward = 2 x forward (bias-gradient GEMVs and the LSE-mode score recompute not counted).
   GB/s is a nominal traffic figure: 4 bytes x (parameters read twice + gradients read and
   written + the cache written by forward and read by backward) / time. */
#define _POSIX_C_SOURCE 200809L
#define NORMBLOCKS_IMPLEMENTATION
#include "normblocks.h"
#include "bench_common.h"

#define TILE 64 /* the library's query rows per attention task (NB__TILE) */

typedef struct shape {
    int B, T, d, H, Hkv, dk, P, W, f, bias, probs, causal, nt;
    unsigned attn_bias; /* NB_ATTN_BIAS_* */
} shape;

typedef struct block_run {
    nb_ctx ctx;
    nb_stack s;
    float *params, *grads, *cache, *scratch, *in, *out, *dout, *din;
    double t_fwd, t_bwd;
} block_run;

static void die(const char* what, nb_ctx* ctx) {
    fprintf(stderr, "bench_block: %s failed: %s\n", what, ctx ? ctx->err : "");
    exit(1);
}

static void block_step(void* arg) {
    block_run* r = (block_run*)arg;
    const int B = r->s.max_batch, T = r->s.max_seq;
    double t0 = nbb_now(), t1;
    if (nb_stack_forward(&r->ctx, &r->s, r->params, r->out, r->in, B, T, r->cache, r->scratch))
        die("nb_stack_forward", &r->ctx);
    t1 = nbb_now();
    if (nb_stack_backward(&r->ctx, &r->s, r->params, r->grads, r->din, r->dout, B, T, r->cache,
                          r->scratch))
        die("nb_stack_backward", &r->ctx);
    r->t_fwd = t1 - t0;
    r->t_bwd = nbb_now() - t1;
}

/* Where the block's time goes: n more steps with ctx.profile on (after the timed ones, so the
   timing never pays the profile's clock reads). Prints the shares and fills share[] (fractions
   of the profiled steps' wall time; the rest is outside the parts: argument checks, the
   calls' own overhead). */
static void block_profile(block_run* r, int n, double* share) {
    nb_profile prof;
    double t0, wall;
    int i, k;
    memset(&prof, 0, sizeof prof);
    r->ctx.profile = &prof;
    t0 = nbb_now();
    for (i = 0; i < n; i++) block_step(r);
    wall = nbb_now() - t0;
    r->ctx.profile = NULL;
    printf("  where the time goes (%d profiled steps):", n);
    for (k = 0; k < NB_PROF_PARTS; k++) {
        share[k] = prof.seconds[k] / wall;
        printf("%s %s %.1f%%", k ? "," : "", nb_prof_part_name(k), 100 * share[k]);
    }
    printf("\n");
}

/* ---- the GEMM skeleton ----------------------------------------------------------------------- */

typedef struct skel {
    shape sh;
    nb_ctx ctx;
    int par;
    float *x, *w_qkv, *qkv, *probs, *tiles, *o, *w_o, *out, *dout, *dc, *dqkv, *g_qkv, *g_o, *dx;
    float *w_in, *w_out, *h, *a, *da, *dh, *g_in, *g_out, *ones, *b_in_g, *b_out_g;
    float *b_qkv_g, *b_o_g;
    double t_fwd, t_bwd;
} skel;

static void sgemm1(int ta, int tb, int M, int N, int K, float alpha, const float* A, int lda,
                   const float* B, int ldb, float beta, float* C, int ldc) {
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M,
                N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

static void skel_attn_core_fwd(skel* k) {
    const shape* s = &k->sh;
    const int ntiles = (s->T + TILE - 1) / TILE, ntasks = s->B * s->H * ntiles;
    const int group = s->H / s->Hkv;
    int task;
#pragma omp parallel for schedule(dynamic, 1) num_threads(s->nt) if(k->par)
    for (task = 0; task < ntasks; task++) {
        const int tile = ntiles - 1 - task / (s->B * s->H), bh = task % (s->B * s->H);
        const int b = bh / s->H, h = bh % s->H, i0 = tile * TILE;
        const int rows = s->T - i0 < TILE ? s->T - i0 : TILE;
        const int ncols = s->causal ? i0 + rows : s->T;
        const size_t prow = ((size_t)b * s->H + h) * s->T + i0;
        float* p = s->probs ? k->probs + prow * s->T
                            : k->tiles + (size_t)omp_get_thread_num() * 2 * TILE * s->T;
        const float* q = k->qkv + ((size_t)b * s->T + i0) * s->P + (size_t)h * s->dk;
        const float* kk = k->qkv + (size_t)b * s->T * s->P + s->d + (size_t)(h / group) * s->dk;
        const float* v = k->qkv + (size_t)b * s->T * s->P + s->d +
                         (size_t)(s->Hkv + h / group) * s->dk;
        sgemm1(0, 1, rows, ncols, s->dk, 1, q, s->P, kk, s->P, 0, p, s->T);
        sgemm1(0, 0, rows, s->dk, ncols, 1, p, s->T, v, s->P, 0,
               k->o + ((size_t)b * s->T + i0) * s->d + (size_t)h * s->dk, s->d);
    }
}

static void skel_attn_core_bwd(skel* k) {
    const shape* s = &k->sh;
    const int ntiles = (s->T + TILE - 1) / TILE, ntasks = s->B * s->Hkv;
    const int g = s->H / s->Hkv, P = s->P, d = s->d, dk = s->dk, T = s->T;
    int task;
#pragma omp parallel for schedule(dynamic, 1) num_threads(s->nt) if(k->par)
    for (task = 0; task < ntasks; task++) {
        const int b = task / s->Hkv, j = task % s->Hkv;
        float* ptile = k->tiles + (size_t)omp_get_thread_num() * 2 * TILE * T;
        float* dp = ptile + (size_t)TILE * T;
        const size_t base = (size_t)b * T * P;
        float* dk_j = k->dqkv + base + d + (size_t)j * dk;
        float* dv_j = k->dqkv + base + d + (size_t)(s->Hkv + j) * dk;
        const float* k_j = k->qkv + base + d + (size_t)j * dk;
        const float* v_j = k->qkv + base + d + (size_t)(s->Hkv + j) * dk;
        int h, tile;
        for (h = j * g; h < (j + 1) * g; h++)
            for (tile = 0; tile < ntiles; tile++) {
                const int i0 = tile * TILE, rows = T - i0 < TILE ? T - i0 : TILE;
                const int ncols = s->causal ? i0 + rows : T;
                const size_t prow = ((size_t)b * s->H + h) * T + i0;
                const float* q = k->qkv + base + (size_t)i0 * P + (size_t)h * dk;
                float* dq = k->dqkv + base + (size_t)i0 * P + (size_t)h * dk;
                const float* dout = k->dc + ((size_t)b * T + i0) * d + (size_t)h * dk;
                const float* p = ptile;
                if (s->probs) p = k->probs + prow * T;
                else sgemm1(0, 1, rows, ncols, dk, 1, q, P, k_j, P, 0, ptile, T); /* recompute */
                sgemm1(0, 1, rows, ncols, dk, 1, dout, d, v_j, P, 0, dp, T);
                sgemm1(1, 0, ncols, dk, rows, 1, p, T, dout, d, 1, dv_j, P);
                sgemm1(0, 0, rows, dk, ncols, 1, dp, T, k_j, P, 1, dq, P);
                sgemm1(1, 0, ncols, dk, rows, 1, dp, T, q, P, 1, dk_j, P);
            }
    }
}

static void skel_step(void* arg) {
    skel* k = (skel*)arg;
    const shape* s = &k->sh;
    nb_ctx* c = &k->ctx;
    const int BT = s->B * s->T, d = s->d, P = s->P, W = s->W, f = s->f;
    double t0 = nbb_now(), t1;
    /* forward: attention, then FFN */
    nb_gemm(c, 0, 1, BT, P, d, 1, k->x, d, k->w_qkv, d, 0, k->qkv, P);
    skel_attn_core_fwd(k);
    nb_gemm(c, 0, 1, BT, d, d, 1, k->o, d, k->w_o, d, 0, k->out, d);
    nb_gemm(c, 0, 1, BT, W, d, 1, k->x, d, k->w_in, d, 0, k->h, W);
    nb_gemm(c, 0, 1, BT, d, f, 1, k->a, f, k->w_out, f, 0, k->out, d);
    t1 = nbb_now();
    /* backward: FFN, then attention */
    nb_gemm(c, 0, 0, BT, f, d, 1, k->dout, d, k->w_out, f, 0, k->da, f);
    nb_gemm(c, 1, 0, d, f, BT, 1, k->dout, d, k->a, f, 1, k->g_out, f);
    if (s->bias) nb_gemm(c, 1, 0, d, 1, BT, 1, k->dout, d, k->ones, 1, 1, k->b_out_g, 1);
    nb_gemm(c, 1, 0, W, d, BT, 1, k->dh, W, k->x, d, 1, k->g_in, d);
    if (s->bias) nb_gemm(c, 1, 0, W, 1, BT, 1, k->dh, W, k->ones, 1, 1, k->b_in_g, 1);
    nb_gemm(c, 0, 0, BT, d, W, 1, k->dh, W, k->w_in, d, 0, k->dx, d);
    nb_gemm(c, 0, 0, BT, d, d, 1, k->dout, d, k->w_o, d, 0, k->dc, d);
    nb_gemm(c, 1, 0, d, d, BT, 1, k->dout, d, k->o, d, 1, k->g_o, d);
    if (s->attn_bias & NB_ATTN_BIAS_OUT)
        nb_gemm(c, 1, 0, d, 1, BT, 1, k->dout, d, k->ones, 1, 1, k->b_o_g, 1);
    skel_attn_core_bwd(k);
    nb_gemm(c, 1, 0, P, d, BT, 1, k->dqkv, P, k->x, d, 1, k->g_qkv, d);
    if (s->attn_bias & NB_ATTN_BIAS_QKV)
        nb_gemm(c, 1, 0, P, 1, BT, 1, k->dqkv, P, k->ones, 1, 1, k->b_qkv_g, 1);
    nb_gemm(c, 0, 0, BT, d, P, 1, k->dqkv, P, k->w_qkv, d, 1, k->dx, d);
    k->t_fwd = t1 - t0;
    k->t_bwd = nbb_now() - t1;
}

static void skel_init(skel* k, const shape* s) {
    const size_t BT = (size_t)s->B * s->T;
    memset(k, 0, sizeof *k);
    k->sh = *s;
    k->ctx.num_threads = s->nt;
    k->par = nb_blas_threads() == 1;
    k->x = nbb_alloc(BT * s->d);
    k->w_qkv = nbb_alloc((size_t)s->P * s->d);
    k->g_qkv = nbb_alloc((size_t)s->P * s->d);
    k->qkv = nbb_alloc(BT * s->P);
    k->dqkv = nbb_alloc(BT * s->P);
    if (s->probs) k->probs = nbb_alloc((size_t)s->B * s->H * s->T * s->T);
    k->tiles = nbb_alloc((size_t)s->nt * 2 * TILE * s->T);
    k->o = nbb_alloc(BT * s->d);
    k->w_o = nbb_alloc((size_t)s->d * s->d);
    k->g_o = nbb_alloc((size_t)s->d * s->d);
    k->out = nbb_alloc(BT * s->d);
    k->dout = nbb_alloc(BT * s->d);
    k->dc = nbb_alloc(BT * s->d);
    k->dx = nbb_alloc(BT * s->d);
    k->w_in = nbb_alloc((size_t)s->W * s->d);
    k->g_in = nbb_alloc((size_t)s->W * s->d);
    k->w_out = nbb_alloc((size_t)s->d * s->f);
    k->g_out = nbb_alloc((size_t)s->d * s->f);
    k->h = nbb_alloc(BT * s->W);
    k->dh = nbb_alloc(BT * s->W);
    k->a = nbb_alloc(BT * s->f);
    k->da = nbb_alloc(BT * s->f);
    k->ones = nbb_alloc(BT);
    k->b_in_g = nbb_alloc((size_t)s->W);
    k->b_out_g = nbb_alloc((size_t)s->d);
    k->b_qkv_g = nbb_alloc((size_t)s->P);
    k->b_o_g = nbb_alloc((size_t)s->d);
    /* small non-zero values: denormals or NaNs would distort the timing */
    nb_fill_normal(k->x, BT * s->d, 1, 3, 1);
    nb_fill_normal(k->w_qkv, (size_t)s->P * s->d, 0.02, 3, 2);
    nb_fill_normal(k->w_o, (size_t)s->d * s->d, 0.02, 3, 3);
    nb_fill_normal(k->w_in, (size_t)s->W * s->d, 0.02, 3, 4);
    nb_fill_normal(k->w_out, (size_t)s->d * s->f, 0.02, 3, 5);
    nb_fill_normal(k->dout, BT * s->d, 1, 3, 6);
    nb_fill_normal(k->a, BT * s->f, 1, 3, 7);
    nb_fill_normal(k->dh, BT * s->W, 1, 3, 8);
}

/* forward GEMM flops of the block, causal attention counted per computed tile */
static double block_fwd_flops(const shape* s) {
    const double BT = (double)s->B * s->T;
    double proj = 2 * BT * ((double)s->P * s->d + (double)s->d * s->d + (double)s->W * s->d +
                            (double)s->d * s->f);
    double attn = 0;
    int i0;
    for (i0 = 0; i0 < s->T; i0 += TILE) {
        const int rows = s->T - i0 < TILE ? s->T - i0 : TILE;
        const int ncols = s->causal ? i0 + rows : s->T;
        attn += 2.0 * 2.0 * rows * ncols * s->dk; /* S = Q K^T and O = P V */
    }
    return proj + attn * s->B * s->H;
}

int main(int argc, char** argv) {
    const char* preset;
    block_run r;
    skel k;
    shape sh;
    nb_stack_desc desc;
    double spread, t_block, t_skel, fl, bytes, rss_block, fwd_b, bwd_b, fwd_s, bwd_s;
    double share[NB_PROF_PARTS];
    double* tf, *tb;
    double others;
    nbb_load l0;
    int B, T, d, H, nt, reps, warm, i;
    const int bf16 = getenv("NBB_BF16") != NULL;
    size_t n;
    tuned_env_restart(argv, TUNE_CORE); /* OpenBLAS's core when it fell to Prescott */
    if (argc < 8) {
        fprintf(stderr, "usage: %s PRESET B T d H THREADS REPS [WARMUP]\n", argv[0]);
        return 2;
    }
    preset = argv[1];
    B = atoi(argv[2]); T = atoi(argv[3]); d = atoi(argv[4]); H = atoi(argv[5]);
    nt = atoi(argv[6]); reps = atoi(argv[7]); warm = argc > 8 ? atoi(argv[8]) : 1;
    nbb_print_env("bench_block");

    memset(&r, 0, sizeof r);
    r.ctx.num_threads = nt;
    memset(&desc, 0, sizeof desc);
    desc.n_layers = 1; desc.d_model = d; desc.n_heads = H;
    if (nb_preset_from_name(&r.ctx, &desc, preset)) die("nb_preset_from_name", &r.ctx);
    if (bf16) desc.gemm.precision = NB_PRECISION_BF16;
    desc.gemm.bf16_weights = bf16 && getenv("NBB_BF16_WEIGHTS") != NULL;
    desc.gemm.bf16_outputs = bf16 && getenv("NBB_BF16_OUT") != NULL;
    if (getenv("NBB_BACKEND"))
        desc.gemm.backend = !strcmp(getenv("NBB_BACKEND"), "dnnl") ? NB_BACKEND_DNNL : NB_BACKEND_BLAS;
    desc.norm.final = -1;
    if (desc.preset == NB_PRESET_SIAMESE || desc.preset == NB_PRESET_SIAMESE_POST_PRE)
        desc.norm.final = 0; /* SiameseNorm's output fusion (3 norms) cannot be switched off */
    if (nb_stack_init(&r.ctx, &r.s, &desc, B, T)) die("nb_stack_init", &r.ctx);
    if (bf16 && getenv("NBB_ATTN")) { /* 0 emulated, 1 portable, 2 AVX512-BF16, 3 AMX */
        const int want = atoi(getenv("NBB_ATTN")), host = nb__bf16_isa() + 1;
        const int a = want < 0 ? 0 : want > host ? host : want;
        for (i = 0; i < r.s.desc.n_layers; i++) r.s.layers[i].attn.bf16_attn = a;
        printf("# NBB_ATTN=%d: the attention products run %s\n", want, nb__attn_kernels[a]);
    }
    if (bf16 && getenv("NBB_GEMM")) { /* the same values for the linear GEMMs off oneDNN */
        const int want = atoi(getenv("NBB_GEMM")), host = nb__bf16_isa() + 1;
        const int a = want < 0 ? 0 : want > host ? host : want;
        for (i = 0; i < r.s.desc.n_layers; i++) r.s.layers[i].attn.bf16_gemm = a;
        r.s.ffn.bf16_gemm = a;
        printf("# NBB_GEMM=%d: the linear GEMMs off oneDNN run %s\n", want, nb__gemm_kernels[a]);
    }
    n = (size_t)B * T * d;
    r.params = nbb_alloc(r.s.n_params); r.grads = nbb_alloc(r.s.n_params);
    r.cache = nbb_alloc(r.s.n_cache); r.scratch = nbb_alloc(r.s.n_scratch);
    r.in = nbb_alloc(n); r.out = nbb_alloc(n); r.dout = nbb_alloc(n); r.din = nbb_alloc(n);
    if (nb_stack_init_params(&r.ctx, &r.s, r.params, NB_INIT_DEFAULT, 0, 42))
        die("nb_stack_init_params", &r.ctx);
    if (desc.gemm.bf16_weights) { /* made once: the optimizer's job, outside the timed step */
        unsigned short* w16 = (unsigned short*)malloc(r.s.n_params * sizeof *w16);
        if (!w16) die("malloc", &r.ctx);
        nb_bf16_round(w16, r.params, r.s.n_params);
        if (nb_stack_set_bf16_weights(&r.ctx, &r.s, w16)) die("nb_stack_set_bf16_weights", &r.ctx);
    }
    nb_fill_normal(r.in, n, 1, 3, 11);
    nb_fill_normal(r.dout, n, 1, 3, 12);

    memset(&sh, 0, sizeof sh);
    sh.B = B; sh.T = T; sh.d = d; sh.H = H; sh.Hkv = r.s.layers[0].attn.desc.n_kv_heads;
    sh.dk = r.s.layers[0].attn.head_dim; sh.P = r.s.layers[0].attn.qkv_width;
    sh.W = r.s.ffn.in_width; sh.f = r.s.ffn.desc.ffn.d_ff; sh.bias = r.s.ffn.desc.ffn.bias > 0;
    sh.attn_bias = r.s.desc.attn.bias;
    sh.probs = r.s.layers[0].attn.desc.attn.memory == NB_ATTN_MEMORY_PROBS;
    sh.causal = !r.s.desc.attn.non_causal; sh.nt = nt;
    fl = 3 * block_fwd_flops(&sh);
    bytes = 4.0 * (4.0 * (double)r.s.n_params + 2.0 * (double)r.s.n_cache);

    printf("# block %s (B,T,d,H)=(%d,%d,%d,%d) threads=%d kernels: %s: d_ff=%d ffn=%s "
           "attn memory=%s final_norm=%s params=%zu cache=%.1f MiB scratch=%.1f MiB\n",
           preset, B, T, d, H, nt, nb_stack_kernels(&r.s), sh.f,
           sh.bias ? "GELU+bias" : "SwiGLU", sh.probs ? "PROBS" : "LSE",
           r.s.desc.norm.final > 0 ? "on" : "off", r.s.n_params,
           r.s.n_cache * 4.0 / 1048576, r.s.n_scratch * 4.0 / 1048576);

    tf = (double*)malloc(sizeof(double) * (size_t)reps);
    tb = (double*)malloc(sizeof(double) * (size_t)reps);
    l0 = nbb_load_now();
    for (i = 0; i < warm; i++) block_step(&r);
    rss_block = nbb_maxrss_mib(); /* every block buffer is touched; the skeleton is not yet */
    if (getenv("NBB_NO_SKELETON")) { /* profiling the block alone: perf record ... */
        double* tt = (double*)malloc(sizeof(double) * (size_t)reps);
        for (i = 0; i < reps; i++) {
            const double t0 = nbb_now();
            block_step(&r);
            tt[i] = nbb_now() - t0;
        }
        t_block = nbb_median(tt, reps);
        printf("  normblocks  %9.2f ms; skeleton skipped (NBB_NO_SKELETON)\n", 1e3 * t_block);
        return 0;
    }
    skel_init(&k, &sh);
    for (i = 0; i < warm; i++) skel_step(&k);
    {
        /* block and skeleton alternate, so both see the same machine noise */
        double* tt = (double*)malloc(sizeof(double) * (size_t)reps);
        double* ts = (double*)malloc(sizeof(double) * (size_t)reps);
        double* sf = (double*)malloc(sizeof(double) * (size_t)reps);
        double* sb = (double*)malloc(sizeof(double) * (size_t)reps);
        for (i = 0; i < reps; i++) {
            double t0 = nbb_now();
            block_step(&r);
            tt[i] = nbb_now() - t0;
            tf[i] = r.t_fwd; tb[i] = r.t_bwd;
            t0 = nbb_now();
            skel_step(&k);
            ts[i] = nbb_now() - t0;
            sf[i] = k.t_fwd; sb[i] = k.t_bwd;
        }
        t_block = nbb_median(tt, reps);
        spread = nbb_spread(tt, reps, t_block);
        t_skel = nbb_median(ts, reps);
        fwd_s = nbb_median(sf, reps); bwd_s = nbb_median(sb, reps);
        free(tt); free(ts); free(sf); free(sb);
    }
    fwd_b = nbb_median(tf, reps); bwd_b = nbb_median(tb, reps);
    others = nbb_others(l0, nbb_load_now());

    printf("  normblocks  %9.2f ms (fwd %.2f, bwd %.2f; spread %.0f%%) %7.1f GFLOP/s %6.1f GB/s "
           "peak RSS %.0f MiB\n", 1e3 * t_block, 1e3 * fwd_b, 1e3 * bwd_b, 100 * spread,
           fl / t_block * 1e-9, bytes / t_block * 1e-9, rss_block);
    printf("  %s %9.2f ms (fwd %.2f, bwd %.2f)            %7.1f GFLOP/s\n",
           bf16 ? "GEMMs alone in float32" : "GEMMs alone", 1e3 * t_skel, 1e3 * fwd_s,
           1e3 * bwd_s, fl / t_skel * 1e-9);
    block_profile(&r, reps < 3 ? reps : 3, share);
    if (bf16) /* the float32 skeleton is no bound for bf16 GEMMs: the block's own, timed in it */
        printf("  non-GEMM share: %.1f%% of the block time (everything but its bf16 linear GEMMs, "
               "%.2f ms of %.2f); other processes used %.0f%% of the CPUs meanwhile\n",
               100 * (1 - share[NB_PROF_GEMM]), 1e3 * t_block * share[NB_PROF_GEMM],
               1e3 * t_block, 100 * others);
    else
        printf("  non-GEMM overhead: %.1f%% of the block time (%.2f ms); other processes used "
               "%.0f%% of the CPUs meanwhile\n", 100 * (t_block - t_skel) / t_block,
               1e3 * (t_block - t_skel), 100 * others);
    printf("RESULT kind=block%s preset=%s B=%d T=%d d=%d H=%d threads=%d reps=%d ms=%.3f fwd_ms=%.3f "
           "bwd_ms=%.3f gemm_ms=%.3f gemm_fwd_ms=%.3f gemm_bwd_ms=%.3f gflop=%.4f gbytes=%.4f "
           "rss_mib=%.1f cache_mib=%.1f scratch_mib=%.1f spread=%.3f others=%.3f core=%s blas_threads=%d "
           "backend=%s prof_gemm=%.3f prof_attn=%.3f prof_norm=%.3f prof_convert=%.3f "
           "prof_other=%.3f\n", bf16 ? "_bf16" : "", preset, B, T, d, H, nt, reps,
           1e3 * t_block, 1e3 * fwd_b, 1e3 * bwd_b, 1e3 * t_skel,
           1e3 * fwd_s, 1e3 * bwd_s, fl * 1e-9, bytes * 1e-9, rss_block,
           r.s.n_cache * 4.0 / 1048576, r.s.n_scratch * 4.0 / 1048576, spread, others, nbb_corename(),
           nb_blas_threads(), r.s.desc.gemm.backend == NB_BACKEND_DNNL ? "dnnl" : "blas",
           share[NB_PROF_GEMM], share[NB_PROF_ATTN], share[NB_PROF_NORM], share[NB_PROF_CONVERT],
           share[NB_PROF_OTHER]);
    nb_stack_free(&r.s);
    return 0;
}
