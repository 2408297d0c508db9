/* The GEMM backends of a stack (nb_stack_desc.backend) on every GEMM shape a stack runs.
   1. Each projection's output, read through the trace hook, against an independent double
      product of its traced input and the weights: op(A) op(B) exactly, with A and B first
      rounded to bf16 (this file's own round-to-nearest-even) in BF16. Allowed: the float32
      accumulation bound gamma_K sum_k |a_k b_k|, gamma_K = K u / (1 - K u), u = 2^-24, which
      holds for any summation order, blocked or fused (Higham, Accuracy and Stability, 3.1).
      A product on truncated or unrounded operands misses it by orders of magnitude (u_bf16 =
      2^-8), so this checks that each backend computes bf16 numerics, not merely something
      close to float32. The backward's GEMMs are checked against float64 in
      test_block_fixtures_bf16 on both backends.
   2. Run to run: forward and backward bitwise equal (same thread count), also after the stack
      has run another (B, T) in between (oneDNN primitives are per shape and cached).
   3. oneDNN leaves the caller's OpenMP nthreads setting as it found it; two threads sharing
      one stack (each its own context, cache and scratch) get what each gets alone.
   4. Refusals: an unknown backend; DNNL in a build without oneDNN (test_backend_nodnnl).
   5. Backend DEFAULT in BF16 times oneDNN against the portable path once per context: the
      rule (oneDNN only when 1.25x faster) holds for the times it reports, a second stack on
      the context reuses the decision (not timed again), and a decision already in the context
      is followed either way (so both outcomes run here, whichever this CPU gives).
   6. The profile (nb_ctx.profile): every part of a forward and backward counted once per
      call, none inside another (exact call counts), their sum within the calls' wall time,
      and the same bits with and without it.
   The oneDNN cases run in builds with NB_USE_DNNL; on a CPU where oneDNN has no bf16 matmul
   they are skipped, and the output says so. */
#define NORMBLOCKS_IMPLEMENTATION
#include "normblocks.h"
#include "nbtest.h"
#ifdef _OPENMP
#include <omp.h>
#endif

enum { L = 2, D = 64, H = 4, B = 3, T = 20 };

/* the BF16 engine decision of the first run with backend DEFAULT, handed to the later runs as
   one context would hold it (stacks sharing a context run the same kernels) */
static int g_engine;
static float g_probe_ms[3];

/* a trace captured by name */
typedef struct capture {
    const char* want[4];
    nb_real* got[4];
    int rows[4], cols[4];
} capture;

static void on_trace(void* user, const char* name, const nb_real* x, int rows, int cols) {
    capture* c = (capture*)user;
    int i;
    for (i = 0; i < 4; i++)
        if (c->want[i] && !strcmp(name, c->want[i])) {
            free(c->got[i]);
            c->got[i] = nbt_alloc((size_t)rows * cols);
            memcpy(c->got[i], x, sizeof(nb_real) * (size_t)rows * cols);
            c->rows[i] = rows;
            c->cols[i] = cols;
        }
}

static double rne_bf16(double v) { /* round a float to bf16, nearest even (finite data) */
    float f = (float)v;
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* nb_bf16_round against an oracle in double arithmetic: of the two bf16 values around x (its
   upper 16 bits, and one step up in magnitude; past the largest bf16 that step is 2^128, inf),
   the nearer, ties to the even one; NaN stays a NaN. Random floats of every exponent, exact
   ties, subnormals, zeros, the largest floats and infinities. */
static float bits_float(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
static int bf16_oracle_ok(float x, unsigned short got) {
    uint32_t u;
    unsigned short lo, hi;
    double up, dl, dh;
    memcpy(&u, &x, sizeof u);
    if (x != x) return (got & 0x7f80) == 0x7f80 && (got & 0x7f) != 0; /* a NaN */
    lo = (unsigned short)(u >> 16);
    hi = (unsigned short)(lo + 1);
    if ((lo & 0x7f80) == 0x7f80) return got == lo; /* inf */
    up = (hi & 0x7f80) == 0x7f80 ? ((lo & 0x8000) ? -1 : 1) * ldexp(1, 128) : bits_float((uint32_t)hi << 16);
    dl = fabs((double)x - bits_float((uint32_t)lo << 16));
    dh = fabs(up - (double)x);
    return got == (dl < dh ? lo : dl > dh ? hi : (lo & 1) ? hi : lo);
}
static void bf16_rounding(void) {
    float x[4096];
    unsigned short got[4096];
    uint32_t state = 12345u;
    int i, n = 0, ok = 1;
    const uint32_t special[] = {0, 0x80000000u, 1, 0x80000001u, 0x007fffffu, 0x7f7fffffu, 0xff7fffffu,
                                0x7f800000u, 0xff800000u, 0x7fc00000u, 0x7f800001u, 0xffc12345u,
                                0x3f808000u, 0x3f818000u, 0x3f807fffu, 0x7f7f8000u, 0x7f7f7fffu};
    for (i = 0; i < (int)(sizeof special / sizeof special[0]); i++) x[n++] = bits_float(special[i]);
    while (n < 4096) { /* random bits: every exponent; every other one an exact tie */
        state = state * 1664525u + 1013904223u;
        x[n] = bits_float((n & 1) ? (state & 0xffff0000u) | 0x8000u : state);
        n++;
    }
    nb_bf16_round(got, x, (size_t)n);
    for (i = 0; i < n; i++) ok &= bf16_oracle_ok(x[i], got[i]);
    nbt_check(ok, "nb_bf16_round: the nearer bf16, ties to even, overflow to inf, NaN a NaN (4096 values)");
}

/* y (M x N) = x (M x K) W^T (W: N x K) against double, within gamma_K sum |a b| */
static void check_product(const char* name, const nb_real* y, const nb_real* x, const nb_real* w,
                          int M, int N, int K, int bf16) {
    const double u = 1.0 / 16777216.0, gamma = K * u / (1 - K * u);
    double worst = 0;
    int i, j, k, ok = 1;
    for (i = 0; i < M; i++)
        for (j = 0; j < N; j++) {
            double s = 0, sa = 0;
            for (k = 0; k < K; k++) {
                double a = x[(size_t)i * K + k], b = w[(size_t)j * K + k];
                if (bf16) { a = rne_bf16(a); b = rne_bf16(b); }
                s += a * b;
                sa += fabs(a * b);
            }
            {
                const double err = fabs((double)y[(size_t)i * N + j] - s);
                if (!(err <= gamma * sa)) ok = 0;
                if (sa > 0 && err / (gamma * sa) > worst) worst = err / (gamma * sa);
            }
        }
    if (!nbt_check(ok, name)) printf("  worst error %.3g of the bound\n", worst);
}

/* One stack run: forward and backward; the projections checked against double. */
static void run(nb_precision prec, nb_backend be, int b, int t, nb_real* out, nb_real* grads,
                int check) {
    nb_ctx ctx;
    nb_stack s;
    nb_stack_desc desc;
    capture cap;
    nb_real *params, *x, *dout, *dx, *cache, *scratch;
    nbt_rng rng = {42};
    char name[512];
    int i;
    memset(&ctx, 0, sizeof ctx);
    memset(&desc, 0, sizeof desc);
    memset(&cap, 0, sizeof cap);
    desc.n_layers = L; desc.d_model = D; desc.n_heads = H; desc.n_kv_heads = 2;
    desc.preset = NB_PRESET_PRE; desc.attn.rope = 1;
    desc.gemm.precision = prec;
    desc.gemm.backend = be;
    if (b != B) ctx.num_threads = 1; /* oneDNN's team set to 1 and the caller's restored */
    ctx.bf16_engine = g_engine;
    memcpy(ctx.gemm_probe_ms, g_probe_ms, sizeof g_probe_ms);
    if (nb_stack_init(&ctx, &s, &desc, B, T)) {
        if (be == NB_BACKEND_DNNL && strstr(ctx.err, "no bf16 matmul")) {
            printf("SKIP (oneDNN, bf16): %s\n", ctx.err);
            memset(out, 0, sizeof(nb_real) * (size_t)B * T * D);
            return;
        }
        nbt_check(0, ctx.err);
        return;
    }
    g_engine = ctx.bf16_engine;
    memcpy(g_probe_ms, ctx.gemm_probe_ms, sizeof g_probe_ms);
    snprintf(name, sizeof name, "backend %d precision %d resolves to backend %d: %s", (int)be,
             (int)prec, (int)s.desc.gemm.backend, nb_stack_kernels(&s));
    nbt_check(be == NB_BACKEND_DEFAULT || s.desc.gemm.backend == be, name);
    if (check) printf("%s\n", name);
    params = nbt_alloc(s.n_params);
    x = nbt_alloc((size_t)B * T * D);
    dout = nbt_alloc((size_t)B * T * D);
    dx = nbt_alloc((size_t)B * T * D);
    cache = nbt_alloc(s.n_cache);
    scratch = nbt_alloc(s.n_scratch);
    nb_stack_init_params(&ctx, &s, params, NB_INIT_DEFAULT, 0.02, 7);
    nbt_fill(&rng, x, (size_t)B * T * D, 0, 1);
    nbt_fill(&rng, dout, (size_t)B * T * D, 0, 1);
    memset(grads, 0, sizeof(nb_real) * s.n_params);
    cap.want[0] = "blocks.1.attn.h"; cap.want[1] = "blocks.1.attn.qkv";
    cap.want[2] = "blocks.1.ffn.act"; cap.want[3] = "blocks.1.ffn.out";
    ctx.trace = on_trace;
    ctx.trace_user = &cap;
    nbt_check(nb_stack_forward(&ctx, &s, params, out, x, b, t, cache, scratch) == NB_OK,
              "forward");
    ctx.trace = NULL;
    nbt_check(nb_stack_backward(&ctx, &s, params, grads, dx, dout, b, t, cache, scratch) == NB_OK,
              "backward");
    if (check) {
        const int bf = prec == NB_PRECISION_BF16, M = b * t;
        const nb_tensor_info *wqkv = NULL, *wout = NULL;
        for (i = 0; i < s.n_tensors; i++) {
            if (!strcmp(s.tensors[i].name, "blocks.1.att_proj.weight")) wqkv = &s.tensors[i];
            if (!strcmp(s.tensors[i].name, "blocks.1.ff_out.weight")) wout = &s.tensors[i];
        }
        if (nbt_check(wqkv && wout && cap.got[0] && cap.got[1] && cap.got[2] && cap.got[3],
                      "the traced tensors and weights are there")) {
            snprintf(name, sizeof name, "%s: qkv = h W_qkv^T", nb_stack_kernels(&s));
            check_product(name, cap.got[1], cap.got[0], params + wqkv->offset, M, wqkv->rows, D,
                          bf);
            snprintf(name, sizeof name, "%s: ffn out = act W_out^T", nb_stack_kernels(&s));
            check_product(name, cap.got[3], cap.got[2], params + wout->offset, M, D, wout->cols,
                          bf);
        }
    }
    for (i = 0; i < 4; i++) free(cap.got[i]);
    free(params); free(x); free(dout); free(dx); free(cache); free(scratch);
    nb_stack_free(&s);
}

static void backend(nb_precision prec, nb_backend be) {
    nb_real *out1 = nbt_alloc((size_t)B * T * D), *out2 = nbt_alloc((size_t)B * T * D);
    nb_real *g1 = nbt_alloc(1 << 20), *g2 = nbt_alloc(1 << 20), *scrap = nbt_alloc(1 << 20);
    run(prec, be, B, T, out1, g1, 1);
    run(prec, be, B, T, out2, g2, 0);
    nbt_same_bits("run to run: out", out1, out2, (size_t)B * T * D);
    nbt_same_bits("run to run: grads", g1, g2, 1 << 20);
    run(prec, be, B - 1, T - 7, scrap, scrap, 0); /* another shape in between */
    run(prec, be, B, T, out2, g2, 0);
    nbt_same_bits("after another (B, T): out", out1, out2, (size_t)B * T * D);
    free(out1); free(out2); free(g1); free(g2); free(scrap);
}

/* Two threads run forwards of one stack at once, each with its own context (1 thread),
   cache and scratch: the stack's oneDNN state is shared, and must give each the bits it gives
   a forward alone. */
static void shared(nb_precision prec, nb_backend be) {
    nb_ctx ctx;
    nb_stack s;
    nb_stack_desc desc;
    nb_real *params, *x, *alone, *out[2], *cache[2], *scratch[2];
    const size_t n = (size_t)B * T * D;
    nbt_rng rng = {7};
    int k;
    memset(&ctx, 0, sizeof ctx);
    memset(&desc, 0, sizeof desc);
    ctx.num_threads = 1;
    desc.n_layers = L; desc.d_model = D; desc.n_heads = H; desc.attn.rope = 1;
    desc.gemm.precision = prec; desc.gemm.backend = be;
    if (nb_stack_init(&ctx, &s, &desc, B, T)) {
        nbt_check(strstr(ctx.err, "no bf16 matmul") != NULL, ctx.err);
        return;
    }
    params = nbt_alloc(s.n_params); x = nbt_alloc(n); alone = nbt_alloc(n);
    nb_stack_init_params(&ctx, &s, params, NB_INIT_DEFAULT, 0.02, 3);
    nbt_fill(&rng, x, n, 0, 1);
    for (k = 0; k < 2; k++) {
        out[k] = nbt_alloc(n); cache[k] = nbt_alloc(s.n_cache); scratch[k] = nbt_alloc(s.n_scratch);
    }
    nb_stack_forward(&ctx, &s, params, alone, x, B, T, cache[0], scratch[0]);
#ifdef _OPENMP
#pragma omp parallel for num_threads(2)
#endif
    for (k = 0; k < 2; k++) {
        nb_ctx own;
        int rep;
        memset(&own, 0, sizeof own);
        own.num_threads = 1;
        for (rep = 0; rep < 20; rep++)
            nb_stack_forward(&own, &s, params, out[k], x, B, T, cache[k], scratch[k]);
    }
    nbt_same_bits("two threads sharing a stack: thread 0", out[0], alone, n);
    nbt_same_bits("two threads sharing a stack: thread 1", out[1], alone, n);
    nbt_check(be == NB_BACKEND_DNNL || nb_stack_backend_bytes(&s) == 0,
              "no oneDNN memory on the BLAS backend");
    for (k = 0; k < 2; k++) { free(out[k]); free(cache[k]); free(scratch[k]); }
    free(params); free(x); free(alone);
    nb_stack_free(&s);
}

/* 5. The timed BF16 engine of backend DEFAULT (oneDNN builds). */
static void engine_choice(void) {
#ifdef NB_USE_DNNL
    nb_ctx ctx;
    nb_stack s;
    nb_stack_desc desc;
    char name[512];
    int forced;
    memset(&ctx, 0, sizeof ctx);
    memset(&desc, 0, sizeof desc);
    desc.n_layers = 1; desc.d_model = D; desc.n_heads = H;
    desc.gemm.precision = NB_PRECISION_BF16;
    if (!nbt_check(nb_stack_init(&ctx, &s, &desc, B, T) == NB_OK, ctx.err)) return;
    if (strstr(nb_stack_kernels(&s), "no bf16 matrix unit")) {
        printf("SKIP (the timing): %s\n", nb_stack_kernels(&s));
        nbt_check(ctx.bf16_engine == 0 && s.desc.gemm.backend == NB_BACKEND_BLAS,
                  "no bf16 matrix unit: the portable path, untimed");
        nb_stack_free(&s);
        return;
    }
    snprintf(name, sizeof name, "timed: portable %.3f ms, oneDNN %.3f ms, float32 %.3f ms -> %s",
             ctx.gemm_probe_ms[0], ctx.gemm_probe_ms[1], ctx.gemm_probe_ms[2],
             nb_stack_kernels(&s));
    nbt_check(ctx.gemm_probe_ms[0] > 0 && ctx.gemm_probe_ms[1] > 0 && ctx.gemm_probe_ms[2] > 0 &&
                  ctx.gemm_probe_ms[0] < 1e6 && ctx.gemm_probe_ms[1] < 1e6 &&
                  ctx.gemm_probe_ms[2] < 1e6, name);
    nbt_check(ctx.bf16_engine == (ctx.gemm_probe_ms[1] * 1.25f <= ctx.gemm_probe_ms[0] ? 2 : 1),
              "oneDNN only when it timed at least 1.25x faster than the portable path");
    nbt_check((ctx.bf16_engine == 2) == (s.desc.gemm.backend == NB_BACKEND_DNNL) &&
                  strstr(nb_stack_kernels(&s), "timed"),
              "the stack runs the engine chosen, and its kernels line says it was timed");
    nb_stack_free(&s);
    /* the decision is the context's: marked probe times show it is not timed again */
    ctx.gemm_probe_ms[0] = 111; ctx.gemm_probe_ms[1] = 222; ctx.gemm_probe_ms[2] = 333;
    nbt_check(nb_stack_init(&ctx, &s, &desc, B, T) == NB_OK &&
                  strstr(nb_stack_kernels(&s), "222.00") && strstr(nb_stack_kernels(&s), "111.00"),
              "a second stack on the context reuses its decision");
    nb_stack_free(&s);
    for (forced = 1; forced <= 2; forced++) {
        ctx.bf16_engine = forced;
        snprintf(name, sizeof name, "a decision of engine %d in the context is followed", forced);
        nbt_check(nb_stack_init(&ctx, &s, &desc, B, T) == NB_OK &&
                      s.desc.gemm.backend == (forced == 2 ? NB_BACKEND_DNNL : NB_BACKEND_BLAS), name);
        nb_stack_free(&s);
    }
#endif
}

/* 6. The profile: the parts of a Pre-Norm stack's forward and backward, and a caller's
   grads_ready hook that takes its time (in no part). */
#define SLOW_HOOK_S 0.002
static void slow_hook(void* user, int layer, size_t offset, size_t count) {
    const double t0 = nb__seconds();
    (void)layer; (void)offset; (void)count;
    ++*(int*)user;
    while (nb__seconds() - t0 < SLOW_HOOK_S) {}
}
static void profile(nb_precision prec) {
    nb_ctx ctx;
    nb_stack s;
    nb_stack_desc desc;
    nb_profile prof;
    const size_t n = (size_t)B * T * D;
    nb_real *params, *x, *dout, *dx, *cache, *scratch, *out[2], *g[2];
    nbt_rng rng = {11};
    double wall = 0, sum = 0;
    int k, pass, hook_calls = 0;
    char name[256];
    memset(&ctx, 0, sizeof ctx);
    memset(&desc, 0, sizeof desc);
    memset(&prof, 0, sizeof prof);
    desc.n_layers = L; desc.d_model = D; desc.n_heads = H; desc.attn.rope = 1;
    desc.gemm.precision = prec;
    desc.gemm.backend = NB_BACKEND_BLAS;
    desc.run.param_grads = NB_GRAD_OVERWRITE;
    if (!nbt_check(nb_stack_init(&ctx, &s, &desc, B, T) == NB_OK, ctx.err)) return;
    params = nbt_alloc(s.n_params); x = nbt_alloc(n); dout = nbt_alloc(n); dx = nbt_alloc(n);
    cache = nbt_alloc(s.n_cache); scratch = nbt_alloc(s.n_scratch);
    nb_stack_init_params(&ctx, &s, params, NB_INIT_DEFAULT, 0.02, 5);
    nbt_fill(&rng, x, n, 0, 1);
    nbt_fill(&rng, dout, n, 0, 1);
    for (pass = 0; pass < 2; pass++) {
        double t0;
        out[pass] = nbt_alloc(n); g[pass] = nbt_alloc(s.n_params);
        ctx.profile = pass ? &prof : NULL;
        ctx.grads_ready = pass ? slow_hook : NULL; /* the caller's time: in no part */
        ctx.grads_ready_user = &hook_calls;
        t0 = nb__seconds();
        nbt_check(nb_stack_forward(&ctx, &s, params, out[pass], x, B, T, cache, scratch) == NB_OK &&
                      nb_stack_backward(&ctx, &s, params, g[pass], dx, dout, B, T, cache,
                                        scratch) == NB_OK, "profile: forward and backward");
        if (pass) wall = nb__seconds() - t0;
    }
    nbt_same_bits("profile: the same output with it", out[0], out[1], n);
    nbt_same_bits("profile: the same gradients with it", g[0], g[1], s.n_params);
    /* Pre-Norm without biases, 2 layers: forward 4 GEMMs a layer (QKV, O, FFN in and out),
       backward 8 (dX and dW each); one attention core forward and backward a layer; the two
       block norms and the final norm, forward and backward */
    snprintf(name, sizeof name, "profile (%s): calls GEMM %lld attention %lld norm %lld convert "
             "%lld other %lld", prec == NB_PRECISION_BF16 ? "bf16" : "float32",
             prof.calls[NB_PROF_GEMM], prof.calls[NB_PROF_ATTN], prof.calls[NB_PROF_NORM],
             prof.calls[NB_PROF_CONVERT], prof.calls[NB_PROF_OTHER]);
    nbt_check(prof.calls[NB_PROF_GEMM] == 12 * L && prof.calls[NB_PROF_ATTN] == 2 * L &&
                  prof.calls[NB_PROF_NORM] == 2 * (2 * L + 1) && prof.calls[NB_PROF_OTHER] == 2 &&
                  (prof.calls[NB_PROF_CONVERT] > 0) == (prec == NB_PRECISION_BF16), name);
    for (k = 0; k < NB_PROF_PARTS; k++) sum += prof.seconds[k];
    snprintf(name, sizeof name, "profile: parts sum to %.6f s of the calls' %.6f s, less the "
             "grads_ready hook's %.6f s (%d calls)", sum, wall, prof.hooks, hook_calls);
    nbt_check(prof.seconds[NB_PROF_GEMM] > 0 && prof.seconds[NB_PROF_ATTN] > 0 &&
                  prof.seconds[NB_PROF_NORM] > 0 && prof.seconds[NB_PROF_OTHER] >= 0 &&
                  hook_calls > 0 && prof.hooks >= hook_calls * SLOW_HOOK_S &&
                  sum + prof.hooks <= wall && prof.depth == 0, name);
    /* a refused call leaves it consistent */
    nbt_check(nb_stack_forward(&ctx, &s, params, out[1], x, B + 1, T, cache, scratch) != NB_OK &&
                  nb_stack_backward(&ctx, &s, params, g[1], dx, dout, B + 1, T, cache,
                                    scratch) != NB_OK && prof.depth == 0,
              "profile: refused calls leave no part open");
    nbt_check(!strcmp(nb_prof_part_name(NB_PROF_GEMM), "GEMMs") &&
                  !strcmp(nb_prof_part_name(NB_PROF_PARTS), "unknown part"), "part names");
    for (pass = 0; pass < 2; pass++) { free(out[pass]); free(g[pass]); }
    free(params); free(x); free(dout); free(dx); free(cache); free(scratch);
    nb_stack_free(&s);
}

/* The caller's GEMMs on a stack's engine: nb_stack_gemm_bf16 (BF16 stacks: every transpose,
   strides wider than the rows, alpha 1 and not, beta 0 and 1) against a double product of the
   same bf16 values, within gamma_(K+2) of the terms' sizes; on the portable path bitwise
   nb_gemm_bf16's on the floats those bits round. An FP32 stack on oneDNN runs the same GEMMs
   through the engine's float32 matmul (its output scale for alpha: the path of the bf16 one,
   on every CPU oneDNN runs on). */
static void caller_gemm(nb_precision prec, nb_backend be) {
    enum { M = 37, N = 29, K = 45, LD = 50 };
    const double u = 1.0 / 16777216.0, gamma = (K + 2) * u / (1 - (K + 2) * u);
    const int bf = prec == NB_PRECISION_BF16;
    nb_ctx ctx;
    nb_stack s;
    nb_stack_desc desc;
    nbt_rng rng = {0xCA11E4};
    nb_real a[LD * LD], b[LD * LD], c0[M * LD], c[M * LD], c2[M * LD];
    unsigned short a16[LD * LD], b16[LD * LD];
    int ta, tb, rep, i, j, k, ok = 1;
    char name[600];
    memset(&ctx, 0, sizeof ctx);
    memset(&desc, 0, sizeof desc);
    ctx.num_threads = 2;
    desc.n_layers = 1; desc.d_model = D; desc.n_heads = H;
    desc.gemm.precision = prec;
    desc.gemm.backend = be;
    if (nb_stack_init(&ctx, &s, &desc, 1, 4)) {
        if (strstr(ctx.err, "no bf16 matmul")) printf("SKIP (caller's GEMM, oneDNN, bf16): %s\n", ctx.err);
        else nbt_check(0, ctx.err);
        return;
    }
    nbt_fill(&rng, a, LD * LD, 0, 1);
    nbt_fill(&rng, b, LD * LD, 0, 1);
    nbt_fill(&rng, c0, M * LD, 0, 1);
    nb_bf16_round(a16, a, LD * LD);
    nb_bf16_round(b16, b, LD * LD);
    for (ta = 0; ta < 2; ta++)
        for (tb = 0; tb < 2; tb++)
            for (rep = 0; rep < 4; rep++) {
                const nb_real alpha = rep & 1 ? (nb_real)0.37 : 1, beta = rep & 2 ? 1 : 0;
                nb_result rc;
                memcpy(c, c0, sizeof c);
                if (bf) {
                    rc = nb_stack_gemm_bf16(&ctx, &s, ta, tb, M, N, K, alpha, a16, LD, b16, LD,
                                            beta, c, LD);
                } else { /* the engine's float32 matmul, as the stack's projections run it */
                    const nb__gemm_at at = nb__at(&ctx, "caller_gemm", s.mm, 0, 0);
                    rc = nb__gemm(&at, M, N, K, alpha, nb__m(a, LD, ta), nb__m(b, LD, tb), beta,
                                  c, LD);
                }
                if (!nbt_check(rc == NB_OK, ctx.err)) continue;
                for (i = 0; i < M; i++)
                    for (j = 0; j < N; j++) {
                        double sum = 0, sa = 0;
                        for (k = 0; k < K; k++) {
                            double x = ta ? a[k * LD + i] : a[i * LD + k];
                            double y = tb ? b[j * LD + k] : b[k * LD + j];
                            if (bf) { x = rne_bf16(x); y = rne_bf16(y); }
                            sum += x * y;
                            sa += fabs(x * y);
                        }
                        sum = alpha * sum + beta * c0[i * LD + j];
                        sa = fabs(alpha) * sa + fabs(beta * c0[i * LD + j]);
                        if (!(fabs(c[i * LD + j] - sum) <= gamma * sa)) ok = 0;
                    }
                for (i = 0; i < M; i++) /* the columns past N untouched */
                    for (j = N; j < LD; j++) ok &= c[i * LD + j] == c0[i * LD + j];
                if (bf && s.desc.gemm.backend == NB_BACKEND_BLAS) {
                    memcpy(c2, c0, sizeof c2);
                    nb_gemm_bf16(&ctx, ta, tb, M, N, K, alpha, a, LD, b, LD, beta, c2, LD);
                    ok &= !memcmp(c, c2, sizeof c);
                }
            }
    snprintf(name, sizeof name, "the caller's GEMMs on the stack's engine (%s): every transpose, "
             "alpha, beta, against double%s", nb_stack_kernels(&s),
             bf && s.desc.gemm.backend == NB_BACKEND_BLAS ? ", bitwise nb_gemm_bf16's" : "");
    nbt_check(ok, name);
    if (!bf) {
        nbt_check(nb_stack_gemm_bf16(&ctx, &s, 0, 0, M, N, K, 1, a16, LD, b16, LD, 0, c, LD) ==
                      NB_ERR_CONFIG && strstr(ctx.err, "not BF16"),
                  "nb_stack_gemm_bf16 refuses a float32 stack");
        nbt_check(nb_stack_gemm_bf16(&ctx, NULL, 0, 0, M, N, K, 1, a16, LD, b16, LD, 0, c, LD) ==
                      NB_ERR_NULL, "nb_stack_gemm_bf16 refuses a NULL stack");
    }
    nb_stack_free(&s);
}

static void refusals(void) {
    nb_ctx ctx;
    nb_stack s;
    nb_stack_desc desc;
    memset(&ctx, 0, sizeof ctx);
    memset(&desc, 0, sizeof desc);
    desc.n_layers = 1; desc.d_model = D; desc.n_heads = H;
    desc.gemm.backend = (nb_backend)7;
    nbt_check(nb_stack_init(&ctx, &s, &desc, 1, 4) == NB_ERR_CONFIG &&
                  strstr(ctx.err, "unknown gemm.backend 7"), "an unknown backend is refused");
    nb_stack_free(&s);
#ifndef NB_USE_DNNL
    desc.gemm.backend = NB_BACKEND_DNNL;
    nbt_check(nb_stack_init(&ctx, &s, &desc, 1, 4) == NB_ERR_CONFIG &&
                  strstr(ctx.err, "NB_USE_DNNL"), "DNNL without oneDNN is refused, how to get it");
    nb_stack_free(&s);
    desc.gemm.backend = NB_BACKEND_DEFAULT;
    desc.gemm.precision = NB_PRECISION_BF16;
    nbt_check(nb_stack_init(&ctx, &s, &desc, 1, 4) == NB_OK && s.desc.gemm.backend == NB_BACKEND_BLAS &&
                  strstr(nb_stack_kernels(&s), "no oneDNN"),
              "BF16 without oneDNN: the portable path, and the kernels line says why");
    nb_stack_free(&s);
#endif
}

int main(void) {
#ifdef _OPENMP
    const int before = omp_get_max_threads();
#endif
    backend(NB_PRECISION_FP32, NB_BACKEND_BLAS);
    backend(NB_PRECISION_BF16, NB_BACKEND_BLAS);
    shared(NB_PRECISION_BF16, NB_BACKEND_BLAS);
#ifdef NB_USE_DNNL
    backend(NB_PRECISION_FP32, NB_BACKEND_DNNL);
    backend(NB_PRECISION_BF16, NB_BACKEND_DNNL);
    backend(NB_PRECISION_BF16, NB_BACKEND_DEFAULT);
    shared(NB_PRECISION_FP32, NB_BACKEND_DNNL);
    shared(NB_PRECISION_BF16, NB_BACKEND_DNNL);
#endif
#ifdef _OPENMP
    nbt_check(omp_get_max_threads() == before, "the caller's OpenMP nthreads is unchanged");
#endif
    caller_gemm(NB_PRECISION_FP32, NB_BACKEND_BLAS);
    caller_gemm(NB_PRECISION_BF16, NB_BACKEND_BLAS);
#ifdef NB_USE_DNNL
    caller_gemm(NB_PRECISION_FP32, NB_BACKEND_DNNL);
    caller_gemm(NB_PRECISION_BF16, NB_BACKEND_DNNL);
#endif
    refusals();
    bf16_rounding();
    engine_choice();
    profile(NB_PRECISION_FP32);
    profile(NB_PRECISION_BF16);
    return nbt_finish();
}
