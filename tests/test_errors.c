/* Bad input gets an error code and a message naming the function and the problem; outputs are
   not touched; the logger sees the same message; a NULL context is allowed.
   Issue 13: one test per reported reproducer and then its class: every size that overflows int
   or size_t, every non-finite hyperparameter, NULL for every pointer argument of every public
   function, scratch sized for fewer threads than a call uses, and caches used by a backward of
   another shape, plan or stack. Each was seen to fail against the header before the fix. */
#define NORMBLOCKS_IMPLEMENTATION
#include "normblocks.h"
#include "nbtest.h"

typedef struct log_seen { int calls; nb_result last; char msg[1024]; } log_seen;
static void logger(void* user, nb_result code, const char* msg) {
    log_seen* s = (log_seen*)user;
    s->calls++;
    s->last = code;
    snprintf(s->msg, sizeof s->msg, "%s", msg);
}

static nb_ctx ctx;
static log_seen seen;
/* scratch: a BF16 attention plan's packed-product tiles are 32 keys wide even at T = 2 */
static nb_real x[64], y[64], r[16], m[16], g[8], dy[64], dx[64], scratch[8192];

/* Check code, that the message mentions `needle`, that the logger got it, and y untouched. */
static void expect(nb_result got, nb_result want, const char* needle, const char* what) {
    char name[1280];
    int i, untouched = 1;
    for (i = 0; i < 64; i++) untouched &= (y[i] == -7 && dx[i] == -7);
    snprintf(name, sizeof name, "%s -> %s (got %s: \"%s\")", what, nb_result_string(want),
             nb_result_string(got), ctx.err);
    nbt_check(got == want && strstr(ctx.err, needle) != NULL && seen.last == want &&
                  strcmp(seen.msg, ctx.err) == 0 && untouched, name);
    for (i = 0; i < 64; i++) y[i] = dx[i] = -7;
    ctx.err[0] = 0;
    seen.last = NB_OK;
}

/* ---- issue 13 ---------------------------------------------------------------------------- */

/* code, and a message naming the function and the field (each needle, '|'-separated) */
static int msg_has(const char* needles) {
    char buf[256];
    char* tok;
    snprintf(buf, sizeof buf, "%s", needles);
    for (tok = strtok(buf, "|"); tok; tok = strtok(NULL, "|"))
        if (!strstr(ctx.err, tok)) return 0;
    return 1;
}
static void expect13(nb_result got, nb_result want, const char* needles, const char* what) {
    char name[1280];
    snprintf(name, sizeof name, "%s -> %s (got %s: \"%s\")", what, nb_result_string(want),
             nb_result_string(got), ctx.err);
    nbt_check(got == want && msg_has(needles) && seen.last == want &&
                  strcmp(seen.msg, ctx.err) == 0, name);
    ctx.err[0] = 0;
    seen.last = NB_OK;
}

/* n values filled with v, and a check that they still are (outputs untouched) */
static nb_real* filled(size_t n, nb_real v) {
    nb_real* p = (nb_real*)malloc((n ? n : 1) * sizeof(nb_real));
    size_t i;
    for (i = 0; i < n; i++) p[i] = v;
    return p;
}
static int all_is(const nb_real* p, size_t n, nb_real v) {
    size_t i;
    for (i = 0; i < n; i++)
        if (!(p[i] == v)) return 0;
    return 1;
}

static nb_stack_desc small_desc(nb_preset preset, int L) {
    nb_stack_desc d;
    memset(&d, 0, sizeof d);
    d.n_layers = L; d.d_model = 8; d.n_heads = 2; d.n_kv_heads = 1; d.ffn.d_ff = 16;
    d.preset = preset; d.attn.rope = 1;
    return d;
}

/* reproducer: a bad custom layer freed the table and then read it for the message */
static void uaf_custom_layers(void) {
    nb_layer_desc ly[2];
    nb_stack_desc d = small_desc(NB_PRESET_DEFAULT, 2);
    nb_stack s;
    memset(ly, 0, sizeof ly);
    ly[1].sites = 0x40;
    d.layers = ly;
    expect13(nb_stack_init(&ctx, &s, &d, 1, 8), NB_ERR_CONFIG, "nb_stack_init|layer 1|sites",
             "custom layer 1 with unknown site bits (was a use after free)");
    nbt_check(s.layers == NULL && s.tensors == NULL && s.skip == NULL, "failed init leaves s empty");
    nb_stack_free(&s);
    memset(ly, 0, sizeof ly);
    ly[0].ffn.residual_from_norm = 1;
    expect13(nb_stack_init(&ctx, &s, &d, 1, 8), NB_ERR_CONFIG,
             "nb_stack_init|layer 0|residual_from_norm", "custom layer 0 rfn without input norm");
    memset(ly, 0, sizeof ly);
    ly[1].attn.residual_scale = (nb_real)NAN;
    expect13(nb_stack_init(&ctx, &s, &d, 1, 8), NB_ERR_CONFIG, "nb_stack_init|residual_scale",
             "custom layer residual_scale NaN");
    ly[1].attn.residual_scale = (nb_real)nbt_inf(1);
    expect13(nb_stack_init(&ctx, &s, &d, 1, 8), NB_ERR_CONFIG, "nb_stack_init|residual_scale",
             "custom layer residual_scale inf");
    ly[1].attn.residual_scale = -1;
    expect13(nb_stack_init(&ctx, &s, &d, 1, 8), NB_ERR_CONFIG, "nb_stack_init|residual_scale",
             "custom layer residual_scale < 0");
}

/* reproducer: int products that wrapped, then the class: each size that overflows */
static void overflow(void) {
    nb_attn_desc ad;
    nb_ffn_desc fd;
    nb_attn_plan ap;
    nb_ffn_plan fp;
    nb_stack_desc sd;
    nb_stack s;
    nb_real* v = filled(64, 3);
    expect13(nb_rope(&ctx, v, 8, 1, 1, 65536, 65536, 10000, 0), NB_ERR_SHAPE,
             "nb_rope|heads*head_dim", "rope heads*head_dim overflowing int");
    nbt_check(all_is(v, 64, 3), "rope: x untouched");
    free(v);

    memset(&ad, 0, sizeof ad);
    ad.d_model = 32768; ad.n_heads = 256;
    nbt_check(nb_attn_plan_make(&ctx, &ap, &ad, 1, 1) == NB_OK &&
                  ap.n_params == (size_t)4 * 32768 * 32768,
              "attention d_model 32768: n_params = 4 d^2 exactly (was 0)");
    ad.d_model = 24576; ad.n_heads = 192;
    nbt_check(nb_attn_plan_make(&ctx, &ap, &ad, 1, 1) == NB_OK &&
                  ap.n_params == (size_t)4 * 24576 * 24576,
              "attention d_model 24576: n_params = 4 d^2 exactly (was 1.8e19)");
    memset(&ap, 0x5A, sizeof ap);
    ad.d_model = 1 << 30; ad.n_heads = 1;
    expect13(nb_attn_plan_make(&ctx, &ap, &ad, 1, 1), NB_ERR_SHAPE,
             "nb_attn_plan_make|qkv_width|overflows int", "attention qkv_width overflowing int");
    {
        unsigned char* b = (unsigned char*)&ap;
        size_t i;
        int same = 1;
        for (i = 0; i < sizeof ap; i++) same &= b[i] == 0x5A;
        nbt_check(same, "attention plan untouched on failure");
    }
    ad.d_model = 64; ad.n_heads = 4;
    expect13(nb_attn_plan_make(&ctx, &ap, &ad, 65536, 65536), NB_ERR_SHAPE,
             "nb_attn_plan_make|max_batch*max_seq", "attention max_batch*max_seq overflowing int");
    ad.d_model = 1024; ad.n_heads = 1024;
    expect13(nb_attn_plan_make(&ctx, &ap, &ad, 65536, 16384), NB_ERR_SHAPE,
             "nb_attn_plan_make|attention tasks", "attention task count overflowing int");
    ad.d_model = 8; ad.n_heads = 2; /* found by fuzz_desc: max_seq + 63 overflowed int */
    nbt_check(nb_attn_plan_make(&ctx, &ap, &ad, 1, 2147483647) == NB_OK && ap.max_seq == 2147483647,
              "attention max_seq = INT_MAX: row tiles counted without overflow");
    ad.gemm.precision = NB_PRECISION_BF16; /* found by fuzz_desc: T rounded up to 32 overflowed */
    nbt_check(nb_attn_plan_make(&ctx, &ap, &ad, 1, 2147483647) == NB_OK && ap.max_seq == 2147483647,
              "attention bf16 max_seq = INT_MAX: the padded bf16 operands sized without overflow");
    ad.gemm.precision = NB_PRECISION_DEFAULT;
    ad.d_model = 8; ad.n_heads = 8; ad.attn.memory = NB_ATTN_MEMORY_PROBS;
    expect13(nb_attn_plan_make(&ctx, &ap, &ad, 1, 1 << 30), NB_ERR_SHAPE,
             "nb_attn_plan_make|n_cache|overflows size_t", "attention probs cache overflowing size_t");

    memset(&fd, 0, sizeof fd);
    fd.d_model = 1 << 29;  /* SwiGLU: 8d/3 fits, 2f does not */
    expect13(nb_ffn_plan_make(&ctx, &fp, &fd, 1, 1), NB_ERR_SHAPE, "nb_ffn_plan_make|d_ff",
             "FFN SwiGLU default 2*(8d/3) overflowing int");
    fd.d_model = 1 << 30;  /* 8d overflowed int before the division */
    expect13(nb_ffn_plan_make(&ctx, &fp, &fd, 1, 1), NB_ERR_SHAPE, "nb_ffn_plan_make|d_ff",
             "FFN SwiGLU default 8d/3 overflowing int");
    fd.ffn.type = NB_FFN_GELU_TANH; fd.d_model = 1 << 29;
    expect13(nb_ffn_plan_make(&ctx, &fp, &fd, 1, 1), NB_ERR_SHAPE, "nb_ffn_plan_make|d_ff",
             "FFN GELU default 4d overflowing int");
    fd.ffn.type = NB_FFN_SWIGLU; fd.d_model = 8; fd.ffn.d_ff = 2000000000;
    expect13(nb_ffn_plan_make(&ctx, &fp, &fd, 1, 1), NB_ERR_SHAPE, "nb_ffn_plan_make|d_ff",
             "FFN SwiGLU explicit d_ff doubled overflowing int");
    fd.ffn.d_ff = 16;
    expect13(nb_ffn_plan_make(&ctx, &fp, &fd, 65536, 65536), NB_ERR_SHAPE,
             "nb_ffn_plan_make|max_batch*max_seq", "FFN max_batch*max_seq overflowing int");
    fd.ffn.type = NB_FFN_GELU_TANH; fd.ffn.d_ff = 2147483647;
    expect13(nb_ffn_plan_make(&ctx, &fp, &fd, 46340, 46340), NB_ERR_SHAPE,
             "nb_ffn_plan_make|n_cache|overflow size_t", "FFN cache overflowing size_t");
    fd.ffn.type = NB_FFN_SWIGLU; fd.d_model = 1 << 28; fd.ffn.d_ff = 0;
    nbt_check(nb_ffn_plan_make(&ctx, &fp, &fd, 1, 1) == NB_OK && fp.desc.ffn.d_ff == 715827904 &&
                  fp.in_width == 2 * 715827904,
              "FFN d_model 2^28: 8d/3 rounded up to 64 without overflow");

    sd = small_desc(NB_PRESET_PRE, 2147483647);
    expect13(nb_stack_init(&ctx, &s, &sd, 1, 1), NB_ERR_CONFIG, "nb_stack_init|n_layers",
             "stack n_layers overflowing the tensor table");
    sd = small_desc(NB_PRESET_PRE, 8);
    sd.d_model = 1 << 27; sd.n_heads = 1; sd.n_kv_heads = 0; sd.ffn.d_ff = 0; sd.attn.rope = 0;
    expect13(nb_stack_init(&ctx, &s, &sd, 1 << 16, 1 << 14), NB_ERR_SHAPE,
             "nb_stack_init|n_cache|overflows size_t", "stack cache overflowing size_t");
    nb_stack_free(&s);
}

/* reproducers: rope_theta = inf was accepted and RoPE silently skipped; eps = inf zeroed every
   output. The class: every float hyperparameter must be finite and in range. */
static void nonfinite(void) {
    const nb_real bad[3] = {(nb_real)nbt_inf(1), (nb_real)NAN, (nb_real)nbt_inf(-1)};
    nb_attn_desc ad;
    nb_attn_plan ap;
    nb_stack_desc sd;
    nb_stack s;
    nb_ctx c0;
    int k;
    memset(&c0, 0, sizeof c0);
    for (k = 0; k < 3; k++) {
        char what[96];
        memset(&ad, 0, sizeof ad);
        ad.d_model = 8; ad.n_heads = 2; ad.attn.rope = 1; ad.attn.rope_theta = bad[k];
        snprintf(what, sizeof what, "attention rope_theta %g", (double)bad[k]);
        expect13(nb_attn_plan_make(&ctx, &ap, &ad, 1, 4), NB_ERR_CONFIG,
                 "nb_attn_plan_make|rope_theta", what);
        ad.attn.rope = 0;
        expect13(nb_attn_plan_make(&ctx, &ap, &ad, 1, 4), NB_ERR_CONFIG,
                 "nb_attn_plan_make|rope_theta", "attention rope_theta non-finite without rope");
        ad.attn.rope_theta = 0; ad.attn.bias = 4u << k;
        snprintf(what, sizeof what, "attention bias 0x%x", ad.attn.bias);
        expect13(nb_attn_plan_make(&ctx, &ap, &ad, 1, 4), NB_ERR_CONFIG,
                 "nb_attn_plan_make|bias (0x", what);
        sd = small_desc(NB_PRESET_PRE, 2);
        sd.attn.bias = ad.attn.bias | NB_ATTN_BIAS_QKV;
        snprintf(what, sizeof what, "stack attn_bias 0x%x", sd.attn.bias);
        expect13(nb_stack_init(&ctx, &s, &sd, 1, 4), NB_ERR_CONFIG, "nb_attn_plan_make|bias", what);
        ad.attn.bias = 0;
        ad.attn.rope_theta = 0; ad.eps = bad[k];
        snprintf(what, sizeof what, "attention eps %g", (double)bad[k]);
        expect13(nb_attn_plan_make(&ctx, &ap, &ad, 1, 4), NB_ERR_CONFIG, "nb_attn_plan_make|eps",
                 what);
        sd = small_desc(NB_PRESET_PRE, 2);
        sd.norm.eps = bad[k];
        snprintf(what, sizeof what, "stack eps %g", (double)bad[k]);
        expect13(nb_stack_init(&ctx, &s, &sd, 1, 4), NB_ERR_CONFIG, "nb_stack_init|eps", what);
        sd.norm.eps = 0; sd.attn.rope_theta = bad[k];
        snprintf(what, sizeof what, "stack rope_theta %g", (double)bad[k]);
        expect13(nb_stack_init(&ctx, &s, &sd, 1, 4), NB_ERR_CONFIG, "rope_theta", what);
        sd.attn.rope_theta = 0; sd.mixln_alpha = (double)bad[k];
        snprintf(what, sizeof what, "stack mixln_alpha %g", (double)bad[k]);
        expect13(nb_stack_init(&ctx, &s, &sd, 1, 4), NB_ERR_CONFIG, "nb_stack_init|mixln_alpha",
                 what);
        snprintf(what, sizeof what, "rmsnorm eps %g", (double)bad[k]);
        expect(nb_rmsnorm_forward(&ctx, y, 8, r, x, 8, g, 2, 8, 0, bad[k]), NB_ERR_VALUE, "eps",
               what);
        snprintf(what, sizeof what, "layernorm eps %g", (double)bad[k]);
        expect(nb_layernorm_forward(&ctx, y, 8, m, r, x, 8, g, NULL, 2, 8, 0, bad[k]),
               NB_ERR_VALUE, "eps", what);
        snprintf(what, sizeof what, "dyt alpha %g", (double)bad[k]);
        expect(nb_dyt_forward(&ctx, y, 8, x, 8, &bad[k], g, NULL, 2, 8, 0), NB_ERR_VALUE,
               "alpha", what);
        expect(nb_dyt_backward(&ctx, dx, 8, g, NULL, m, dy, 8, x, 8, &bad[k], g, 2, 8, 0, 0,
                               scratch), NB_ERR_VALUE, "alpha", what);
        {
            nb_real as[2];
            as[0] = bad[k]; as[1] = 0;
            snprintf(what, sizeof what, "derf alpha %g", (double)bad[k]);
            expect(nb_derf_forward(&ctx, y, 8, x, 8, as, g, NULL, 2, 8, 0), NB_ERR_VALUE,
                   "alpha", what);
            as[0] = 1; as[1] = bad[k];
            snprintf(what, sizeof what, "derf shift %g", (double)bad[k]);
            expect(nb_derf_backward(&ctx, dx, 8, g, NULL, m, dy, 8, x, 8, as, g, 2, 8, 0, 0,
                                    scratch), NB_ERR_VALUE, "shift", what);
        }
        snprintf(what, sizeof what, "rope theta %g", (double)bad[k]);
        expect(nb_rope(&ctx, y, 8, 1, 2, 2, 4, bad[k], 0), NB_ERR_VALUE, "theta", what);
        snprintf(what, sizeof what, "softmax scale %g", (double)bad[k]);
        expect(nb_softmax_forward(&ctx, y, 8, NULL, x, 8, 2, 8, bad[k], 0), NB_ERR_VALUE,
               "scale", what);
        snprintf(what, sizeof what, "axpby alpha %g", (double)bad[k]);
        expect(nb_axpby(&ctx, y, bad[k], x, 1, 8), NB_ERR_VALUE, "nb_axpby", what);
        expect(nb_axpby(&ctx, y, 1, x, bad[k], 8), NB_ERR_VALUE, "nb_axpby", "axpby beta");
    }
    sd = small_desc(NB_PRESET_MIXLN, 2);
    sd.mixln_alpha = 1.5;
    expect13(nb_stack_init(&ctx, &s, &sd, 1, 4), NB_ERR_CONFIG, "nb_stack_init|mixln_alpha",
             "stack mixln_alpha > 1");
    /* end to end: inf eps no longer zeroes the output of an accepted stack */
    sd = small_desc(NB_PRESET_PRE, 1);
    sd.norm.eps = (nb_real)nbt_inf(1);
    nbt_check(nb_stack_init(&c0, &s, &sd, 1, 4) == NB_ERR_CONFIG, "inf eps stack refused");
    nb_stack_free(&s);
    sd.norm.eps = 0;
    nbt_check(nb_stack_init(&c0, &s, &sd, 1, 4) == NB_OK, "small stack for init checks");
    {
        nb_real* p = filled(s.n_params, 5);
        double e = -1, h = -1;
        const double badd[4] = {NAN, nbt_inf(1), -1, nbt_inf(-1)};
        for (k = 0; k < 4; k++) {
            expect13(nb_stack_init_params(&ctx, &s, p, NB_INIT_NORMAL, badd[k], 1), NB_ERR_VALUE,
                     "nb_stack_init_params|std0", "init_params std0 bad");
            nbt_check(nb_init_io_std(&s, NB_INIT_NORMAL, badd[k], &e, &h) == NB_ERR_VALUE &&
                          e == -1 && h == -1, "init_io_std std0 bad, outputs untouched");
            nbt_check(nb_fill_normal(p, s.n_params, badd[k], 0, 1) == NB_ERR_VALUE,
                      "fill_normal std bad");
        }
        nbt_check(all_is(p, s.n_params, 5), "params untouched by refused initializations");
        nbt_check(nb_fill_normal(p, 4, 1, 0.01, 1) == NB_ERR_VALUE &&
                      nb_fill_normal(p, 4, 1, NAN, 1) == NB_ERR_VALUE && all_is(p, 4, 5),
                  "fill_normal cutoff in (0, 0.5) (would take thousands of draws) or NaN refused");
        nbt_check(nb_init_io_std(&s, (nb_init_scheme)99, 0, &e, &h) == NB_ERR_VALUE && e == -1,
                  "init_io_std unknown scheme refused");
        nbt_check(nb_init_io_std(&s, NB_INIT_MITCHELL, 0, &e, &h) == NB_OK && e > 0 && h > 0,
                  "init_io_std valid");
        free(p);
    }
    nb_stack_free(&s);
}

/* NaN in exp's argument: the float -> int conversion of the exponent was undefined (clang's
   float-cast-overflow); huge arguments likewise. The results are NaN, 1 and 0. */
/* The scores arrive through a volatile store, as data does at run time: under
   -ffinite-math-only clang treats an infinity it can see at compile time, flowing into the
   inlined kernel, as undefined (the header's docs: non-finite data is not promised there). */
static void set_scores(nb_real* sv, double a, double b, double c, double d) {
    volatile nb_real v[4];
    int i;
    v[0] = (nb_real)a; v[1] = (nb_real)b; v[2] = (nb_real)c; v[3] = (nb_real)d;
    for (i = 0; i < 4; i++) sv[i] = v[i];
}
static void exp_nan(void) {
    nb_real sv[4], pv[4];
    nb_ctx c0;
    memset(&c0, 0, sizeof c0);
    set_scores(sv, NAN, 0, 1, 2);
    nbt_check(nb_softmax_forward(&c0, pv, 4, NULL, sv, 4, 1, 4, 1, 0) == NB_OK &&
                  nbt_isnan(pv[1]),
              "softmax of a row with NaN is NaN");
    /* p[1] is 1 to an ulp: under -ffast-math, clang divides by a reciprocal estimate */
    set_scores(sv, -1e30, 0, -3e38, -80);
    nbt_check(nb_softmax_forward(&c0, pv, 4, NULL, sv, 4, 1, 4, 1, 0) == NB_OK && pv[0] == 0 &&
                  fabs(pv[1] - 1) <= 1.2e-7 && pv[2] == 0 && pv[3] < 2e-35,
              "softmax with -1e30, -3e38, -80 scores gives exact 0 and 1");
#if !defined(__FINITE_MATH_ONLY__) || !__FINITE_MATH_ONLY__
    /* an infinite score is data that -ffinite-math-only excludes (the header's FLOATING-POINT
       FLAGS) */
    set_scores(sv, -1e30, 0, -3e38, nbt_inf(-1));
    nbt_check(nb_softmax_forward(&c0, pv, 4, NULL, sv, 4, 1, 4, 1, 0) == NB_OK && pv[0] == 0 &&
                  fabs(pv[1] - 1) <= 1.2e-7 && pv[2] == 0 && pv[3] == 0,
              "softmax with -1e30, -3e38, -inf scores gives exact 0 and 1");
#endif
}

/* reproducer: the norm backward's scratch was sized for the threads at the size query */
static void norm_scratch_threads(void) {
    enum { R = 512, W = 64 };
    nb_ctx c1, c8;
    nb_real *xx = filled((size_t)R * W, 0), *dyy = filled((size_t)R * W, 0), *rs = filled(R, 0);
    nb_real *d1 = filled((size_t)R * W, 0), *d8 = filled((size_t)R * W, 0), *gn = filled(W, 1);
    nb_real *g1 = filled(W, 0), *g8 = filled(W, 0), *b8 = filled(W, 0), *mu = filled(R, 0);
    size_t n, i;
    nb_real* sc;
    for (i = 0; i < (size_t)R * W; i++) {
        xx[i] = (nb_real)((i * 7919) % 23) / 11 - 1;
        dyy[i] = (nb_real)((i * 104729) % 17) / 8 - 1;
    }
    memset(&c1, 0, sizeof c1); memset(&c8, 0, sizeof c8);
    c1.num_threads = 1; c8.num_threads = 8;
    n = nb_norm_scratch_size(&c1, W, 0);
    nbt_check(n == nb_norm_scratch_size(&c8, W, 0) && n == nb_norm_scratch_size(NULL, W, 0),
              "norm scratch size does not depend on the thread count");
    nbt_check(nb_norm_scratch_size(NULL, 0, 0) == 0 && nb_norm_scratch_size(NULL, 8, 3) == 0,
              "norm scratch size of an invalid shape is 0");
    sc = filled(n + 64, 0);
    for (i = n; i < n + 64; i++) sc[i] = -9; /* canary past the end (ASan sees it too) */
    nb_rmsnorm_forward(&c1, d1, W, rs, xx, W, gn, R, W, 0, 1e-5f);
    nbt_check(nb_rmsnorm_backward(&c1, d1, W, g1, dyy, W, xx, W, rs, gn, R, W, 0, 0, sc) == NB_OK,
              "rmsnorm backward, 1 thread");
    nbt_check(nb_rmsnorm_backward(&c8, d8, W, g8, dyy, W, xx, W, rs, gn, R, W, 0, 0, sc) == NB_OK,
              "rmsnorm backward, 8 threads, scratch sized under 1 thread");
    nbt_check(all_is(sc + n, 64, -9), "rmsnorm backward stays inside the scratch");
    nbt_close_r("rmsnorm dgain: 8 threads = 1 thread", g8, g1, W, 1e-5, 1e-4);
    nbt_close_r("rmsnorm dx: 8 threads = 1 thread", d8, d1, (size_t)R * W, 0, 0);
    c8.num_threads = 1000000; /* clamped to NB_MAX_THREADS, then to the scratch's teams */
    nb_layernorm_forward(&c1, d1, W, mu, rs, xx, W, gn, NULL, R, W, 0, 1e-5f);
    nbt_check(nb_layernorm_backward(&c8, d8, W, g8, b8, dyy, W, xx, W, mu, rs, gn, R, W, 0, 0,
                                    sc) == NB_OK && all_is(sc + n, 64, -9),
              "layernorm backward with a million threads requested stays inside the scratch");
    nbt_check(nb_num_threads(&c8) == NB_MAX_THREADS, "num_threads clamped to NB_MAX_THREADS");
    free(xx); free(dyy); free(rs); free(d1); free(d8); free(gn); free(g1); free(g8); free(b8);
    free(mu); free(sc);
}

/* A stack run: buffers for B x T of a small stack. */
typedef struct srun {
    nb_stack s;
    nb_real *params, *grads, *cache, *scratch, *in, *out, *dout, *din;
} srun;
static int srun_init(srun* r, nb_ctx* c, const nb_stack_desc* d, int B, int T) {
    const size_t n = (size_t)B * T * d->d_model * 2;
    size_t i;
    memset(r, 0, sizeof *r);
    if (nb_stack_init(c, &r->s, d, B, T) != NB_OK) return 0;
    r->params = filled(r->s.n_params, 0); r->grads = filled(r->s.n_params, 0);
    r->cache = filled(r->s.n_cache, 0); r->scratch = filled(r->s.n_scratch, 0);
    r->in = filled(n, 0); r->out = filled(n, 0); r->dout = filled(n, 0); r->din = filled(n, 0);
    nb_stack_init_params(c, &r->s, r->params, NB_INIT_NORMAL, 0, 7);
    for (i = 0; i < n; i++) {
        r->in[i] = (nb_real)((i * 31) % 13) / 6 - 1;
        r->dout[i] = (nb_real)((i * 17) % 11) / 5 - 1;
    }
    return 1;
}
static void srun_free(srun* r) {
    nb_stack_free(&r->s);
    free(r->params); free(r->grads); free(r->cache); free(r->scratch); free(r->in); free(r->out);
    free(r->dout); free(r->din);
}
/* backward refused, nothing written */
static void refused_bwd(srun* r, nb_ctx* c, int B, int T, const nb_real* cache, const char* what) {
    const size_t n = (size_t)B * T * r->s.desc.d_model;
    size_t i;
    for (i = 0; i < r->s.n_params; i++) r->grads[i] = 4;
    for (i = 0; i < n; i++) r->din[i] = 4;
    ctx.num_threads = c->num_threads;
    expect13(nb_stack_backward(&ctx, &r->s, r->params, r->grads, r->din, r->dout, B, T, cache,
                               r->scratch), NB_ERR_CONFIG, "nb_stack_backward|cache", what);
    nbt_check(all_is(r->grads, r->s.n_params, 4) && all_is(r->din, n, 4),
              "refused stack backward wrote nothing");
    ctx.num_threads = 0;
}

/* reproducer: a cache used by a backward of another shape or another stack was not detected */
static void cache_mismatch(void) {
    nb_stack_desc d = small_desc(NB_PRESET_HYBRID, 2);
    nb_ctx c;
    srun a, b;
    double out[16];
    nb_real saved;
    size_t i;
    memset(&c, 0, sizeof c);
    c.num_threads = 2;
    if (!nbt_check(srun_init(&a, &c, &d, 2, 8) && srun_init(&b, &c, &d, 2, 8), "two stacks"))
        return;
    refused_bwd(&a, &c, 2, 8, a.cache, "backward before any forward");
    nbt_check(nb_stack_forward(&c, &a.s, a.params, a.out, a.in, 2, 8, a.cache, a.scratch) ==
                  NB_OK, "forward B=2, T=8");
    refused_bwd(&a, &c, 1, 8, a.cache, "backward B=1 after a forward with B=2");
    refused_bwd(&a, &c, 2, 4, a.cache, "backward T=4 after a forward with T=8");
    refused_bwd(&b, &c, 2, 8, a.cache, "backward of another stack (same description)");
    nbt_check(nb_stack_backward(&c, &a.s, a.params, a.grads, a.din, a.dout, 2, 8, a.cache,
                                a.scratch) == NB_OK, "the matching backward runs");
    /* diagnostics: B beyond the stack, B = 0, a shape the cache does not hold */
    for (i = 0; i < 16; i++) out[i] = -3;
    nbt_check(nb_stack_hidden_norms(&a.s, a.cache, 3, 8, 0, out) != NB_OK &&
                  nb_stack_hidden_norms(&a.s, a.cache, 0, 8, 0, out) != NB_OK &&
                  nb_stack_hidden_norms(&a.s, a.cache, 1, 8, 0, out) != NB_OK &&
                  nb_stack_hidden_norms(&a.s, a.cache, 2, 8, 1, out) != NB_OK &&
                  nb_stack_angular_distance(&a.s, a.cache, 3, 8, 0, out) != NB_OK &&
                  nb_stack_angular_distance(&a.s, a.cache, 0, 8, 0, out) != NB_OK &&
                  nb_stack_angular_distance(&b.s, a.cache, 2, 8, 0, out) != NB_OK &&
                  nb_stack_hidden(&a.s, a.cache, 0, 0, 3, 8) == NULL &&
                  nb_stack_hidden(&a.s, a.cache, 3, 0, 2, 8) == NULL && out[0] == -3,
              "diagnostics refuse B > max_batch, B = 0, another B, stream or stack");
    nbt_check(nb_stack_hidden_norms(&a.s, a.cache, 2, 8, 0, out) == NB_OK && out[0] > 0 &&
                  nb_stack_angular_distance(&a.s, a.cache, 2, 8, 0, out) == NB_OK && out[0] == 0,
              "diagnostics with the forward's B and T");
    /* a failed forward (check_finite) leaves no valid cache */
    a.s.desc.run.check_finite = 1;
    a.params[a.s.tensors[3].offset] = (nb_real)NAN;
    nbt_check(nb_stack_forward(&c, &a.s, a.params, a.out, a.in, 2, 8, a.cache, a.scratch) ==
                  NB_ERR_NONFINITE, "forward with a NaN weight fails");
    refused_bwd(&a, &c, 2, 8, a.cache, "backward after a failed forward");
    a.params[a.s.tensors[3].offset] = 0;
    saved = a.in[5];
    a.in[5] = (nb_real)NAN;
    nbt_check(nb_stack_forward(&c, &a.s, a.params, a.out, a.in, 2, 8, a.cache, a.scratch) ==
                  NB_ERR_NONFINITE && strstr(c.err, "non-finite value in the stack's input (in)"),
              "a NaN in the stack's input is said to be the input's, not a layer's");
    a.in[5] = saved;
    nbt_check(nb_stack_hidden_norms(&a.s, a.cache, 2, 8, 0, out) == NB_ERR_CONFIG,
              "diagnostics after a failed forward refused");
    /* the layer API: layer 1 run with B=1, backward with B=2 */
    a.params[a.s.tensors[3].offset] = 0;
    a.s.desc.run.check_finite = 0;
    nbt_check(nb_layer_forward(&c, &a.s, 1, a.params, a.out, a.in, 1, 8, a.cache, a.scratch) ==
                  NB_OK, "layer forward B=1");
    for (i = 0; i < a.s.n_params; i++) a.grads[i] = 4;
    expect13(nb_layer_backward(&ctx, &a.s, 1, a.params, a.grads, a.din, a.dout, a.in, 2, 8,
                               a.cache, a.scratch), NB_ERR_CONFIG, "nb_layer_backward|cache",
             "layer backward B=2 after a layer forward B=1");
    nbt_check(all_is(a.grads, a.s.n_params, 4), "refused layer backward wrote no gradient");
    /* threads beyond what the stack's scratch was sized for */
    ctx.num_threads = a.s.max_threads + 1;
    expect13(nb_stack_forward(&ctx, &a.s, a.params, a.out, a.in, 2, 8, a.cache, a.scratch),
             NB_ERR_CONFIG, "nb_stack_forward|threads", "stack forward with more threads");
    ctx.num_threads = 0;
    srun_free(&a); srun_free(&b);
}

/* the attention and FFN caches: another plan, shape or a never-written cache */
static void sublayer_cache_mismatch(void) {
    nb_attn_desc ad;
    nb_attn_plan p1, p2;
    nb_attn_params ap, ag;
    nb_ffn_desc fd;
    nb_ffn_plan f1, f2;
    nb_ffn_params fp, fg;
    nb_ctx c;
    nb_real *w, *gw, *cache, *scr, *xx, *o, *dxx;
    size_t i;
    memset(&c, 0, sizeof c);
    c.num_threads = 1;
    memset(&ad, 0, sizeof ad);
    ad.d_model = 8; ad.n_heads = 2; ad.attn.sites = NB_SITES_QKV; ad.attn.rope = 1;
    nb_attn_plan_make(&c, &p1, &ad, 2, 8);
    ad.attn.sites = NB_SITE_Q;
    nb_attn_plan_make(&c, &p2, &ad, 2, 8);
    w = filled(p1.n_params, (nb_real)0.1); gw = filled(p1.n_params, 4);
    cache = filled(p1.n_cache + p2.n_cache, 0); scr = filled(p1.n_scratch + 4096, 0);
    xx = filled(128, (nb_real)0.5); o = filled(128, 0); dxx = filled(128, 4);
    for (i = 0; i < 128; i++) xx[i] = (nb_real)(i % 9) / 4 - 1;
    nb_attn_params_bind(&p1, w, &ap); nb_attn_params_bind(&p1, gw, &ag);
    ctx.num_threads = 1;
    expect13(nb_attn_backward(&ctx, &p1, &ap, &ag, dxx, o, xx, 2, 8, cache, scr, 0),
             NB_ERR_CONFIG, "nb_attn_backward|cache", "attention backward on a zeroed cache");
    nbt_check(nb_attn_forward(&c, &p1, &ap, o, xx, 2, 8, cache, scr) == NB_OK, "attn forward");
    expect13(nb_attn_backward(&ctx, &p1, &ap, &ag, dxx, o, xx, 2, 4, cache, scr, 0),
             NB_ERR_CONFIG, "nb_attn_backward|cache", "attention backward T=4 after T=8");
    expect13(nb_attn_backward(&ctx, &p1, &ap, &ag, dxx, o, xx, 1, 8, cache, scr, 0),
             NB_ERR_CONFIG, "nb_attn_backward|cache", "attention backward B=1 after B=2");
    expect13(nb_attn_backward(&ctx, &p2, &ap, &ag, dxx, o, xx, 2, 8, cache, scr, 0),
             NB_ERR_CONFIG, "nb_attn_backward|cache", "attention backward with another plan");
    nbt_check(all_is(gw, p1.n_params, 4) && all_is(dxx, 128, 4),
              "refused attention backwards wrote nothing");
    ag.k_gain = NULL;
    expect13(nb_attn_backward(&ctx, &p1, &ap, &ag, dxx, o, xx, 2, 8, cache, scr, 0),
             NB_ERR_NULL, "nb_attn_backward|gain", "attention backward without a gain gradient");
    nb_attn_params_bind(&p1, gw, &ag);
    nbt_check(nb_attn_backward(&c, &p1, &ap, &ag, dxx, o, xx, 2, 8, cache, scr, 0) == NB_OK,
              "matching attention backward runs");
    free(w); free(gw); free(cache); free(scr);

    memset(&fd, 0, sizeof fd);
    fd.d_model = 8; fd.ffn.d_ff = 16; fd.ffn.type = NB_FFN_GELU_TANH;
    nb_ffn_plan_make(&c, &f1, &fd, 2, 8);
    fd.ffn.d_ff = 32;
    nb_ffn_plan_make(&c, &f2, &fd, 2, 8);
    w = filled(f2.n_params, (nb_real)0.1); gw = filled(f2.n_params, 4);
    cache = filled(f2.n_cache, 0); scr = filled(f2.n_scratch, 0);
    nb_ffn_params_bind(&f1, w, &fp); nb_ffn_params_bind(&f1, gw, &fg);
    for (i = 0; i < 128; i++) dxx[i] = 4;
    nbt_check(nb_ffn_forward(&c, &f1, &fp, o, xx, 2, 8, cache, scr) == NB_OK, "ffn forward");
    expect13(nb_ffn_backward(&ctx, &f1, &fp, &fg, dxx, o, xx, 1, 8, cache, scr, 0),
             NB_ERR_CONFIG, "nb_ffn_backward|cache", "FFN backward B=1 after B=2");
    expect13(nb_ffn_backward(&ctx, &f2, &fp, &fg, dxx, o, xx, 2, 8, cache, scr, 0),
             NB_ERR_CONFIG, "nb_ffn_backward|cache", "FFN backward with another plan");
    nbt_check(all_is(gw, f2.n_params, 4) && all_is(dxx, 128, 4),
              "refused FFN backwards wrote nothing");
    nbt_check(nb_ffn_backward(&c, &f1, &fp, &fg, dxx, o, xx, 2, 8, cache, scr, 0) == NB_OK,
              "matching FFN backward runs");
    ctx.num_threads = 0;
    free(w); free(gw); free(cache); free(scr); free(xx); free(o); free(dxx);
}

/* NULL for each pointer argument of every public function: NB_ERR_NULL naming the function
   and the argument (or the documented harmless result for the few without a context). */
#define NULLS(call, fn, arg) expect13(call, NB_ERR_NULL, fn "|" arg, fn " with " arg " NULL")
static void null_args(void) {
    nb_attn_desc ad;
    nb_attn_plan ap;
    nb_attn_params P, G, Pn;
    nb_ffn_desc fd;
    nb_ffn_plan fpl;
    nb_ffn_params FP, FG, FPn;
    nb_stack_desc sd = small_desc(NB_PRESET_PRE, 1);
    nb_real sc[8192], *w, *gw, *cache, *scr, b[256], o[256], e1 = 0;
    nb_ctx c;
    srun st;
    double dd[8], e = -1;
    memset(&c, 0, sizeof c);
    c.num_threads = 1;
    ctx.num_threads = 1;
    memset(b, 0, sizeof b);
    NULLS(nb_rmsnorm_forward(&ctx, NULL, 8, r, x, 8, g, 2, 8, 0, 1e-5f), "nb_rmsnorm_forward", "y");
    NULLS(nb_rmsnorm_forward(&ctx, y, 8, NULL, x, 8, g, 2, 8, 0, 1e-5f), "nb_rmsnorm_forward", "rstd");
    NULLS(nb_rmsnorm_forward(&ctx, y, 8, r, NULL, 8, g, 2, 8, 0, 1e-5f), "nb_rmsnorm_forward", "x");
    NULLS(nb_rmsnorm_backward(&ctx, NULL, 8, g, dy, 8, x, 8, r, g, 2, 8, 0, 0, sc), "nb_rmsnorm_backward", "dx");
    NULLS(nb_rmsnorm_backward(&ctx, dx, 8, g, NULL, 8, x, 8, r, g, 2, 8, 0, 0, sc), "nb_rmsnorm_backward", "dy");
    NULLS(nb_rmsnorm_backward(&ctx, dx, 8, g, dy, 8, NULL, 8, r, g, 2, 8, 0, 0, sc), "nb_rmsnorm_backward", "x");
    NULLS(nb_rmsnorm_backward(&ctx, dx, 8, g, dy, 8, x, 8, NULL, g, 2, 8, 0, 0, sc), "nb_rmsnorm_backward", "rstd");
    NULLS(nb_rmsnorm_backward(&ctx, dx, 8, g, dy, 8, x, 8, r, g, 2, 8, 0, 0, NULL), "nb_rmsnorm_backward", "scratch");
    NULLS(nb_layernorm_forward(&ctx, NULL, 8, m, r, x, 8, g, NULL, 2, 8, 0, 1e-5f), "nb_layernorm_forward", "y");
    NULLS(nb_layernorm_forward(&ctx, y, 8, NULL, r, x, 8, g, NULL, 2, 8, 0, 1e-5f), "nb_layernorm_forward", "mean");
    NULLS(nb_layernorm_forward(&ctx, y, 8, m, NULL, x, 8, g, NULL, 2, 8, 0, 1e-5f), "nb_layernorm_forward", "rstd");
    NULLS(nb_layernorm_forward(&ctx, y, 8, m, r, NULL, 8, g, NULL, 2, 8, 0, 1e-5f), "nb_layernorm_forward", "x");
    NULLS(nb_layernorm_backward(&ctx, NULL, 8, g, NULL, dy, 8, x, 8, m, r, g, 2, 8, 0, 0, sc), "nb_layernorm_backward", "dx");
    NULLS(nb_layernorm_backward(&ctx, dx, 8, g, NULL, NULL, 8, x, 8, m, r, g, 2, 8, 0, 0, sc), "nb_layernorm_backward", "dy");
    NULLS(nb_layernorm_backward(&ctx, dx, 8, g, NULL, dy, 8, NULL, 8, m, r, g, 2, 8, 0, 0, sc), "nb_layernorm_backward", "x");
    NULLS(nb_layernorm_backward(&ctx, dx, 8, g, NULL, dy, 8, x, 8, NULL, r, g, 2, 8, 0, 0, sc), "nb_layernorm_backward", "mean");
    NULLS(nb_layernorm_backward(&ctx, dx, 8, g, NULL, dy, 8, x, 8, m, NULL, g, 2, 8, 0, 0, sc), "nb_layernorm_backward", "rstd");
    NULLS(nb_layernorm_backward(&ctx, dx, 8, NULL, g, dy, 8, x, 8, m, r, g, 2, 8, 0, 0, NULL), "nb_layernorm_backward", "scratch");
    NULLS(nb_l2norm_forward(&ctx, NULL, 8, r, x, 8, 2, 8, 0), "nb_l2norm_forward", "y");
    NULLS(nb_l2norm_forward(&ctx, y, 8, NULL, x, 8, 2, 8, 0), "nb_l2norm_forward", "rstd");
    NULLS(nb_l2norm_forward(&ctx, y, 8, r, NULL, 8, 2, 8, 0), "nb_l2norm_forward", "x");
    NULLS(nb_l2norm_backward(&ctx, NULL, 8, dy, 8, x, 8, r, 2, 8, 0, 0), "nb_l2norm_backward", "dx");
    NULLS(nb_l2norm_backward(&ctx, dx, 8, NULL, 8, x, 8, r, 2, 8, 0, 0), "nb_l2norm_backward", "dy");
    NULLS(nb_l2norm_backward(&ctx, dx, 8, dy, 8, NULL, 8, r, 2, 8, 0, 0), "nb_l2norm_backward", "x");
    NULLS(nb_l2norm_backward(&ctx, dx, 8, dy, 8, x, 8, NULL, 2, 8, 0, 0), "nb_l2norm_backward", "rstd");
    {
        nb_real as[2] = {(nb_real)0.5, (nb_real)0.1}; /* Derf's alpha, shift */
        NULLS(nb_derf_forward(&ctx, NULL, 8, x, 8, as, g, NULL, 2, 8, 0), "nb_derf_forward", "y");
        NULLS(nb_derf_forward(&ctx, y, 8, NULL, 8, as, g, NULL, 2, 8, 0), "nb_derf_forward", "x");
        NULLS(nb_derf_forward(&ctx, y, 8, x, 8, NULL, g, NULL, 2, 8, 0), "nb_derf_forward", "as");
        NULLS(nb_derf_backward(&ctx, NULL, 8, g, NULL, m, dy, 8, x, 8, as, g, 2, 8, 0, 0, sc), "nb_derf_backward", "dx");
        NULLS(nb_derf_backward(&ctx, dx, 8, g, NULL, m, NULL, 8, x, 8, as, g, 2, 8, 0, 0, sc), "nb_derf_backward", "dy");
        NULLS(nb_derf_backward(&ctx, dx, 8, g, NULL, m, dy, 8, x, 8, NULL, g, 2, 8, 0, 0, sc), "nb_derf_backward", "as");
        NULLS(nb_derf_backward(&ctx, dx, 8, NULL, NULL, m, dy, 8, x, 8, as, g, 2, 8, 0, 0, NULL), "nb_derf_backward", "scratch");
    }
    e1 = (nb_real)0.5; /* a DyT alpha */
    NULLS(nb_dyt_forward(&ctx, NULL, 8, x, 8, &e1, g, NULL, 2, 8, 0), "nb_dyt_forward", "y");
    NULLS(nb_dyt_forward(&ctx, y, 8, NULL, 8, &e1, g, NULL, 2, 8, 0), "nb_dyt_forward", "x");
    NULLS(nb_dyt_forward(&ctx, y, 8, x, 8, NULL, g, NULL, 2, 8, 0), "nb_dyt_forward", "alpha");
    NULLS(nb_dyt_backward(&ctx, NULL, 8, g, NULL, m, dy, 8, x, 8, &e1, g, 2, 8, 0, 0, sc), "nb_dyt_backward", "dx");
    NULLS(nb_dyt_backward(&ctx, dx, 8, g, NULL, m, NULL, 8, x, 8, &e1, g, 2, 8, 0, 0, sc), "nb_dyt_backward", "dy");
    NULLS(nb_dyt_backward(&ctx, dx, 8, g, NULL, m, dy, 8, NULL, 8, &e1, g, 2, 8, 0, 0, sc), "nb_dyt_backward", "x");
    NULLS(nb_dyt_backward(&ctx, dx, 8, g, NULL, m, dy, 8, x, 8, NULL, g, 2, 8, 0, 0, sc), "nb_dyt_backward", "alpha");
    NULLS(nb_dyt_backward(&ctx, dx, 8, NULL, NULL, m, dy, 8, x, 8, &e1, g, 2, 8, 0, 0, NULL), "nb_dyt_backward", "scratch");
    e1 = 0;
    NULLS(nb_softmax_forward(&ctx, NULL, 8, NULL, x, 8, 2, 8, 1, 0), "nb_softmax_forward", "p");
    NULLS(nb_softmax_forward(&ctx, y, 8, NULL, NULL, 8, 2, 8, 1, 0), "nb_softmax_forward", "s");
    NULLS(nb_softmax_backward(&ctx, NULL, 8, dy, 8, x, 8, 2, 8, 1, 0), "nb_softmax_backward", "ds");
    NULLS(nb_softmax_backward(&ctx, dx, 8, NULL, 8, x, 8, 2, 8, 1, 0), "nb_softmax_backward", "dp");
    NULLS(nb_softmax_backward(&ctx, dx, 8, dy, 8, NULL, 8, 2, 8, 1, 0), "nb_softmax_backward", "p");
    NULLS(nb_gemm(&ctx, 0, 0, 2, 2, 2, 1, NULL, 2, x, 2, 0, y, 2), "nb_gemm", "A");
    NULLS(nb_gemm(&ctx, 0, 0, 2, 2, 2, 1, x, 2, NULL, 2, 0, y, 2), "nb_gemm", "B");
    NULLS(nb_gemm(&ctx, 0, 0, 2, 2, 2, 1, x, 2, x, 2, 0, NULL, 2), "nb_gemm", "C");
    NULLS(nb_gemm_ref(&ctx, 0, 0, 2, 2, 2, 1, NULL, 2, x, 2, 0, y, 2), "nb_gemm_ref", "A");
    NULLS(nb_gemm_ref(&ctx, 0, 0, 2, 2, 2, 1, x, 2, x, 2, 0, NULL, 2), "nb_gemm_ref", "C");
    NULLS(nb_add(&ctx, NULL, x, x, 8), "nb_add", "out");
    NULLS(nb_add(&ctx, y, NULL, x, 8), "nb_add", "a");
    NULLS(nb_add(&ctx, y, x, NULL, 8), "nb_add", "b");
    NULLS(nb_axpby(&ctx, NULL, 1, x, 1, 8), "nb_axpby", "y");
    NULLS(nb_axpby(&ctx, y, 1, NULL, 1, 8), "nb_axpby", "x");
    nbt_check(nb_add(&ctx, NULL, NULL, NULL, 0) == NB_OK, "nb_add n = 0 is a no-op");
    NULLS(nb_rope(&ctx, NULL, 8, 1, 2, 2, 4, 10000, 0), "nb_rope", "x");
    NULLS(nb_preset_from_name(&ctx, NULL, "pre"), "nb_preset_from_name", "desc");
    NULLS(nb_preset_from_name(&ctx, &sd, NULL), "nb_preset_from_name", "name");

    memset(&ad, 0, sizeof ad);
    ad.d_model = 8; ad.n_heads = 2; ad.attn.sites = NB_SITES_QKVC;
    ad.attn.bias = NB_ATTN_BIAS_QKV | NB_ATTN_BIAS_OUT; ad.attn.qk_scale = 1;
    NULLS(nb_attn_plan_make(&ctx, NULL, &ad, 2, 8), "nb_attn_plan_make", "plan");
    NULLS(nb_attn_plan_make(&ctx, &ap, NULL, 2, 8), "nb_attn_plan_make", "desc");
    nb_attn_plan_make(&c, &ap, &ad, 2, 8);
    w = filled(ap.n_params, (nb_real)0.1); gw = filled(ap.n_params, 0);
    cache = filled(ap.n_cache, 0); scr = filled(ap.n_scratch, 0);
    nb_attn_params_bind(&ap, w, &P); nb_attn_params_bind(&ap, gw, &G);
    nb_attn_params_bind(NULL, w, &Pn); nb_attn_params_bind(&ap, w, NULL);
    nb_attn_params_bind(&ap, NULL, &Pn);
    nbt_check(!Pn.w_qkv && !Pn.w_o && !Pn.q_gain && !Pn.c_gain && !Pn.b_qkv && !Pn.b_o,
              "attn params_bind: NULL plan/p do nothing, NULL base binds NULL");
    NULLS(nb_attn_forward(&ctx, NULL, &P, o, b, 2, 8, cache, scr), "nb_attn_forward", "plan");
    NULLS(nb_attn_forward(&ctx, &ap, NULL, o, b, 2, 8, cache, scr), "nb_attn_forward", "params");
    NULLS(nb_attn_forward(&ctx, &ap, &P, NULL, b, 2, 8, cache, scr), "nb_attn_forward", "out");
    NULLS(nb_attn_forward(&ctx, &ap, &P, o, NULL, 2, 8, cache, scr), "nb_attn_forward", "x");
    NULLS(nb_attn_forward(&ctx, &ap, &P, o, b, 2, 8, NULL, scr), "nb_attn_forward", "cache");
    NULLS(nb_attn_forward(&ctx, &ap, &P, o, b, 2, 8, cache, NULL), "nb_attn_forward", "scratch");
    NULLS(nb_attn_forward(&ctx, &ap, &Pn, o, b, 2, 8, cache, scr), "nb_attn_forward", "w_qkv");
    Pn = P; Pn.w_o = NULL;
    NULLS(nb_attn_forward(&ctx, &ap, &Pn, o, b, 2, 8, cache, scr), "nb_attn_forward", "w_o");
    Pn = P; Pn.c_gain = NULL;
    NULLS(nb_attn_forward(&ctx, &ap, &Pn, o, b, 2, 8, cache, scr), "nb_attn_forward", "gain");
    Pn = P; Pn.b_qkv = NULL;
    NULLS(nb_attn_forward(&ctx, &ap, &Pn, o, b, 2, 8, cache, scr), "nb_attn_forward", "b_qkv");
    Pn = P; Pn.b_o = NULL;
    NULLS(nb_attn_forward(&ctx, &ap, &Pn, o, b, 2, 8, cache, scr), "nb_attn_forward", "b_o");
    Pn = P; Pn.qk_scale = NULL;
    NULLS(nb_attn_forward(&ctx, &ap, &Pn, o, b, 2, 8, cache, scr), "nb_attn_forward", "qk_scale");
    nb_attn_forward(&c, &ap, &P, o, b, 2, 8, cache, scr);
    NULLS(nb_attn_backward(&ctx, &ap, &P, NULL, y, o, b, 2, 8, cache, scr, 0), "nb_attn_backward", "g");
    NULLS(nb_attn_backward(&ctx, &ap, &P, &G, NULL, o, b, 2, 8, cache, scr, 0), "nb_attn_backward", "dx");
    NULLS(nb_attn_backward(&ctx, &ap, &P, &G, y, NULL, b, 2, 8, cache, scr, 0), "nb_attn_backward", "dout");
    NULLS(nb_attn_backward(&ctx, &ap, &P, &G, y, o, NULL, 2, 8, cache, scr, 0), "nb_attn_backward", "x");
    NULLS(nb_attn_backward(&ctx, &ap, &P, &G, y, o, b, 2, 8, NULL, scr, 0), "nb_attn_backward", "cache");
    NULLS(nb_attn_backward(&ctx, &ap, &P, &G, y, o, b, 2, 8, cache, NULL, 0), "nb_attn_backward", "scratch");
    Pn = G; Pn.w_qkv = NULL;
    NULLS(nb_attn_backward(&ctx, &ap, &P, &Pn, y, o, b, 2, 8, cache, scr, 0), "nb_attn_backward", "g.w_qkv");
    Pn = G; Pn.q_gain = NULL;
    NULLS(nb_attn_backward(&ctx, &ap, &P, &Pn, y, o, b, 2, 8, cache, scr, 0), "nb_attn_backward", "gain");
    Pn = G; Pn.b_o = NULL;
    NULLS(nb_attn_backward(&ctx, &ap, &P, &Pn, y, o, b, 2, 8, cache, scr, 0), "nb_attn_backward", "g.b_o");
    Pn = G; Pn.b_qkv = NULL;
    NULLS(nb_attn_backward(&ctx, &ap, &P, &Pn, y, o, b, 2, 8, cache, scr, 0), "nb_attn_backward", "g.b_qkv");
    Pn = G; Pn.qk_scale = NULL;
    NULLS(nb_attn_backward(&ctx, &ap, &P, &Pn, y, o, b, 2, 8, cache, scr, 0), "nb_attn_backward", "g.qk_scale");
    free(w); free(gw); free(cache); free(scr);

    memset(&fd, 0, sizeof fd);
    fd.d_model = 8; fd.ffn.d_ff = 16; fd.ffn.bias = 1; fd.ffn.in_scale = 1;
    NULLS(nb_ffn_plan_make(&ctx, NULL, &fd, 2, 8), "nb_ffn_plan_make", "plan");
    NULLS(nb_ffn_plan_make(&ctx, &fpl, NULL, 2, 8), "nb_ffn_plan_make", "desc");
    nb_ffn_plan_make(&c, &fpl, &fd, 2, 8);
    w = filled(fpl.n_params, (nb_real)0.1); gw = filled(fpl.n_params, 0);
    cache = filled(fpl.n_cache, 0); scr = filled(fpl.n_scratch, 0);
    nb_ffn_params_bind(&fpl, w, &FP); nb_ffn_params_bind(&fpl, gw, &FG);
    nb_ffn_params_bind(NULL, w, &FPn); nb_ffn_params_bind(&fpl, w, NULL);
    nb_ffn_params_bind(&fpl, NULL, &FPn);
    nbt_check(!FPn.w_in && !FPn.b_in && !FPn.w_out && !FPn.b_out, "ffn params_bind NULL base");
    NULLS(nb_ffn_forward(&ctx, NULL, &FP, o, b, 2, 8, cache, scr), "nb_ffn_forward", "plan");
    NULLS(nb_ffn_forward(&ctx, &fpl, NULL, o, b, 2, 8, cache, scr), "nb_ffn_forward", "params");
    NULLS(nb_ffn_forward(&ctx, &fpl, &FP, NULL, b, 2, 8, cache, scr), "nb_ffn_forward", "out");
    NULLS(nb_ffn_forward(&ctx, &fpl, &FP, o, NULL, 2, 8, cache, scr), "nb_ffn_forward", "x");
    NULLS(nb_ffn_forward(&ctx, &fpl, &FP, o, b, 2, 8, NULL, scr), "nb_ffn_forward", "cache");
    NULLS(nb_ffn_forward(&ctx, &fpl, &FP, o, b, 2, 8, cache, NULL), "nb_ffn_forward", "scratch");
    NULLS(nb_ffn_forward(&ctx, &fpl, &FPn, o, b, 2, 8, cache, scr), "nb_ffn_forward", "w_in");
    FPn = FP; FPn.b_out = NULL;
    NULLS(nb_ffn_forward(&ctx, &fpl, &FPn, o, b, 2, 8, cache, scr), "nb_ffn_forward", "b_out");
    FPn = FP; FPn.in_scale = NULL;
    NULLS(nb_ffn_forward(&ctx, &fpl, &FPn, o, b, 2, 8, cache, scr), "nb_ffn_forward", "in_scale");
    nb_ffn_forward(&c, &fpl, &FP, o, b, 2, 8, cache, scr);
    NULLS(nb_ffn_backward(&ctx, &fpl, &FP, NULL, y, o, b, 2, 8, cache, scr, 0), "nb_ffn_backward", "g");
    NULLS(nb_ffn_backward(&ctx, &fpl, &FP, &FG, NULL, o, b, 2, 8, cache, scr, 0), "nb_ffn_backward", "dx");
    NULLS(nb_ffn_backward(&ctx, &fpl, &FP, &FG, y, NULL, b, 2, 8, cache, scr, 0), "nb_ffn_backward", "dout");
    NULLS(nb_ffn_backward(&ctx, &fpl, &FP, &FG, y, o, NULL, 2, 8, cache, scr, 0), "nb_ffn_backward", "x");
    NULLS(nb_ffn_backward(&ctx, &fpl, &FP, &FG, y, o, b, 2, 8, NULL, scr, 0), "nb_ffn_backward", "cache");
    NULLS(nb_ffn_backward(&ctx, &fpl, &FP, &FG, y, o, b, 2, 8, cache, NULL, 0), "nb_ffn_backward", "scratch");
    FPn = FG; FPn.b_in = NULL;
    NULLS(nb_ffn_backward(&ctx, &fpl, &FP, &FPn, y, o, b, 2, 8, cache, scr, 0), "nb_ffn_backward", "b_in");
    FPn = FG; FPn.in_scale = NULL;
    NULLS(nb_ffn_backward(&ctx, &fpl, &FP, &FPn, y, o, b, 2, 8, cache, scr, 0), "nb_ffn_backward", "g.in_scale");
    free(w); free(gw); free(cache); free(scr);

    NULLS(nb_stack_init(&ctx, NULL, &sd, 2, 8), "nb_stack_init", "s");
    NULLS(nb_stack_init(&ctx, &st.s, NULL, 2, 8), "nb_stack_init", "desc");
    nb_stack_free(NULL);
    if (!nbt_check(srun_init(&st, &c, &sd, 2, 8), "stack for NULL checks")) return;
    NULLS(nb_stack_forward(&ctx, NULL, st.params, st.out, st.in, 2, 8, st.cache, st.scratch), "nb_stack_forward", "s");
    NULLS(nb_stack_forward(&ctx, &st.s, NULL, st.out, st.in, 2, 8, st.cache, st.scratch), "nb_stack_forward", "params");
    NULLS(nb_stack_forward(&ctx, &st.s, st.params, NULL, st.in, 2, 8, st.cache, st.scratch), "nb_stack_forward", "out");
    NULLS(nb_stack_forward(&ctx, &st.s, st.params, st.out, NULL, 2, 8, st.cache, st.scratch), "nb_stack_forward", "in");
    NULLS(nb_stack_forward(&ctx, &st.s, st.params, st.out, st.in, 2, 8, NULL, st.scratch), "nb_stack_forward", "cache");
    NULLS(nb_stack_forward(&ctx, &st.s, st.params, st.out, st.in, 2, 8, st.cache, NULL), "nb_stack_forward", "scratch");
    nb_stack_forward(&c, &st.s, st.params, st.out, st.in, 2, 8, st.cache, st.scratch);
    NULLS(nb_stack_backward(&ctx, NULL, st.params, st.grads, st.din, st.dout, 2, 8, st.cache, st.scratch), "nb_stack_backward", "s");
    NULLS(nb_stack_backward(&ctx, &st.s, NULL, st.grads, st.din, st.dout, 2, 8, st.cache, st.scratch), "nb_stack_backward", "params");
    NULLS(nb_stack_backward(&ctx, &st.s, st.params, NULL, st.din, st.dout, 2, 8, st.cache, st.scratch), "nb_stack_backward", "grads");
    NULLS(nb_stack_backward(&ctx, &st.s, st.params, st.grads, NULL, st.dout, 2, 8, st.cache, st.scratch), "nb_stack_backward", "din");
    NULLS(nb_stack_backward(&ctx, &st.s, st.params, st.grads, st.din, NULL, 2, 8, st.cache, st.scratch), "nb_stack_backward", "dout");
    NULLS(nb_stack_backward(&ctx, &st.s, st.params, st.grads, st.din, st.dout, 2, 8, NULL, st.scratch), "nb_stack_backward", "cache");
    NULLS(nb_stack_backward(&ctx, &st.s, st.params, st.grads, st.din, st.dout, 2, 8, st.cache, NULL), "nb_stack_backward", "scratch");
    NULLS(nb_layer_forward(&ctx, NULL, 0, st.params, st.out, st.in, 2, 8, st.cache, st.scratch), "nb_layer_forward", "s");
    NULLS(nb_layer_forward(&ctx, &st.s, 0, NULL, st.out, st.in, 2, 8, st.cache, st.scratch), "nb_layer_forward", "params");
    NULLS(nb_layer_forward(&ctx, &st.s, 0, st.params, NULL, st.in, 2, 8, st.cache, st.scratch), "nb_layer_forward", "out");
    NULLS(nb_layer_forward(&ctx, &st.s, 0, st.params, st.out, NULL, 2, 8, st.cache, st.scratch), "nb_layer_forward", "in");
    NULLS(nb_layer_forward(&ctx, &st.s, 0, st.params, st.out, st.in, 2, 8, NULL, st.scratch), "nb_layer_forward", "cache");
    NULLS(nb_layer_forward(&ctx, &st.s, 0, st.params, st.out, st.in, 2, 8, st.cache, NULL), "nb_layer_forward", "scratch");
    NULLS(nb_layer_backward(&ctx, NULL, 0, st.params, st.grads, st.din, st.dout, st.in, 2, 8, st.cache, st.scratch), "nb_layer_backward", "s");
    NULLS(nb_layer_backward(&ctx, &st.s, 0, NULL, st.grads, st.din, st.dout, st.in, 2, 8, st.cache, st.scratch), "nb_layer_backward", "params");
    NULLS(nb_layer_backward(&ctx, &st.s, 0, st.params, NULL, st.din, st.dout, st.in, 2, 8, st.cache, st.scratch), "nb_layer_backward", "grads");
    NULLS(nb_layer_backward(&ctx, &st.s, 0, st.params, st.grads, NULL, st.dout, st.in, 2, 8, st.cache, st.scratch), "nb_layer_backward", "din");
    NULLS(nb_layer_backward(&ctx, &st.s, 0, st.params, st.grads, st.din, NULL, st.in, 2, 8, st.cache, st.scratch), "nb_layer_backward", "dout");
    NULLS(nb_layer_backward(&ctx, &st.s, 0, st.params, st.grads, st.din, st.dout, NULL, 2, 8, st.cache, st.scratch), "nb_layer_backward", "in");
    NULLS(nb_layer_backward(&ctx, &st.s, 0, st.params, st.grads, st.din, st.dout, st.in, 2, 8, NULL, st.scratch), "nb_layer_backward", "cache");
    NULLS(nb_layer_backward(&ctx, &st.s, 0, st.params, st.grads, st.din, st.dout, st.in, 2, 8, st.cache, NULL), "nb_layer_backward", "scratch");
    NULLS(nb_stack_init_params(&ctx, NULL, st.params, NB_INIT_NORMAL, 0, 1), "nb_stack_init_params", "s");
    NULLS(nb_stack_init_params(&ctx, &st.s, NULL, NB_INIT_NORMAL, 0, 1), "nb_stack_init_params", "params");
    NULLS(nb_stack_normalize(&ctx, NULL, st.params), "nb_stack_normalize", "s");
    NULLS(nb_stack_normalize(&ctx, &st.s, NULL), "nb_stack_normalize", "params");
    dd[0] = 1e3;
    NULLS(nb_stack_qk_clip(&ctx, NULL, st.params, dd, 1, NULL), "nb_stack_qk_clip", "s");
    NULLS(nb_stack_qk_clip(&ctx, &st.s, NULL, dd, 1, NULL), "nb_stack_qk_clip", "params");
    NULLS(nb_stack_qk_clip(&ctx, &st.s, st.params, NULL, 1, NULL), "nb_stack_qk_clip",
          "max_logit");
    /* no context: the code (or NULL / NaN) alone, outputs untouched */
    dd[0] = -3;
    nbt_check(nb_init_io_std(NULL, NB_INIT_NORMAL, 0, &e, &e) == NB_ERR_NULL && e == -1 &&
                  nb_init_io_std(&st.s, NB_INIT_NORMAL, 0, NULL, NULL) == NB_OK,
              "init_io_std: s required, outputs optional");
    nbt_check(nb_fill_normal(NULL, 4, 1, 0, 1) == NB_ERR_NULL &&
                  nb_fill_normal(NULL, 0, 1, 0, 1) == NB_OK, "fill_normal: x required when n > 0");
    nbt_check(nbt_isnan(nb_stack_grad_norms(NULL, st.grads, dd)) &&
                  nbt_isnan(nb_stack_grad_norms(&st.s, NULL, dd)) && dd[0] == -3,
              "grad_norms: NULL s or grads gives NaN, perlayer untouched");
    nbt_check(nb_stack_hidden(NULL, st.cache, 0, 0, 2, 8) == NULL &&
                  nb_stack_hidden(&st.s, NULL, 0, 0, 2, 8) == NULL &&
                  nb_stack_hidden(&st.s, st.cache, 0, 0, 2, 8) != NULL, "hidden: NULL s or cache");
    nbt_check(nb_stack_hidden_norms(NULL, st.cache, 2, 8, 0, dd) == NB_ERR_NULL &&
                  nb_stack_hidden_norms(&st.s, NULL, 2, 8, 0, dd) == NB_ERR_NULL &&
                  nb_stack_hidden_norms(&st.s, st.cache, 2, 8, 0, NULL) == NB_ERR_NULL &&
                  nb_stack_angular_distance(NULL, st.cache, 2, 8, 0, dd) == NB_ERR_NULL &&
                  nb_stack_angular_distance(&st.s, NULL, 2, 8, 0, dd) == NB_ERR_NULL &&
                  nb_stack_angular_distance(&st.s, st.cache, 2, 8, 0, NULL) == NB_ERR_NULL &&
                  dd[0] == -3, "hidden_norms, angulardistance: NULL s, cache, out");
    nbt_check(nb_num_threads(NULL) >= 1 && strlen(nb_preset_name((nb_preset)-5)) > 0 &&
                  !strcmp(nb_preset_aliases((nb_preset)-5), "") &&
                  !strcmp(nb_preset_about(NB_PRESET_COUNT), ""),
              "nb_num_threads(NULL), nb_preset_name/aliases/about out of range");
    {   /* every preset: a description, and each of its other names resolves to it */
        int p, ok = 1;
        for (p = 1; p < NB_PRESET_COUNT; p++) {
            const char* a = nb_preset_aliases((nb_preset)p);
            ok &= strlen(nb_preset_about((nb_preset)p)) > 10;
            while (*a) {
                char name[64];
                size_t n = strcspn(a, "|");
                nb_stack_desc pd;
                memset(&pd, 0, sizeof pd);
                snprintf(name, sizeof name, "%.*s", (int)n, a);
                ok &= nb_preset_from_name(&ctx, &pd, name) == NB_OK && pd.preset == (nb_preset)p;
                a += n + (a[n] == '|');
            }
        }
        nbt_check(ok, "nb_preset_about has a line for every preset; every alias names its preset");
    }
    (void)e1;
    srun_free(&st);
    ctx.num_threads = 0;
}

static void issue13(void) {
    uaf_custom_layers();
    overflow();
    nonfinite();
    exp_nan();
    norm_scratch_threads();
    cache_mismatch();
    sublayer_cache_mismatch();
    null_args();
}

/* Preset names (issue 21): every spelling of GPT-2, the caller's spelling in messages, every
   accepted name offered for an unknown one, and the fields nb_preset_from_name writes. */
static void preset_names(void) {
    static const char* const gpt2[] = {"gpt2", "GPT-2", "gpt-2", "GPT2", "Gpt2"};
    nb_ctx c;
    nb_stack_desc d;
    nb_stack s;
    char name[1280];
    size_t i;
    int all = 1;
    memset(&c, 0, sizeof c);
    for (i = 0; i < sizeof gpt2 / sizeof gpt2[0]; i++) {
        memset(&d, 0, sizeof d);
        snprintf(name, sizeof name, "\"%s\" is the gpt2 preset, named so", gpt2[i]);
        nbt_check(nb_preset_from_name(&c, &d, gpt2[i]) == NB_OK && d.preset == NB_PRESET_PRE &&
                      d.norm.type == NB_NORM_LAYER && d.ffn.type == NB_FFN_GELU_TANH &&
                      d.attn.bias == (NB_ATTN_BIAS_QKV | NB_ATTN_BIAS_OUT) &&
                      !strcmp(d.name, gpt2[i]),
                  name);
    }
    /* the caller's fields survive the call; messages name the preset as the caller did */
    memset(&d, 0, sizeof d);
    d.n_layers = 2; d.d_model = 8; d.n_heads = 2; d.norm.eps = (nb_real)1e-6; d.attn.rope = 1;
    nbt_check(nb_preset_from_name(&c, &d, "Mix-LN") == NB_OK && d.preset == NB_PRESET_MIXLN &&
                  d.n_layers == 2 && d.d_model == 8 && d.norm.eps == (nb_real)1e-6 && d.attn.rope == 1,
              "nb_preset_from_name keeps the caller's other fields");
    nbt_check(nb_stack_init(&c, &s, &d, 1, 2) == NB_OK && !strcmp(s.desc.name, "Mix-LN"),
              "the stack keeps the preset's name as given");
    nb_stack_free(&s);
    memset(&d, 0, sizeof d);
    d.n_layers = 2; d.d_model = 8; d.n_heads = 2; d.run.check_finite = 1;
    nb_preset_from_name(&c, &d, "GPT-2");
    {   /* a non-finite value: the message names the layer and the preset as given */
        nb_real *p, *ca, *sc, io[2 * 8];
        nbt_check(nb_stack_init(&c, &s, &d, 1, 2) == NB_OK, "gpt2 stack");
        p = (nb_real*)calloc(s.n_params, sizeof *p);
        ca = (nb_real*)calloc(s.n_cache, sizeof *ca);
        sc = (nb_real*)calloc(s.n_scratch, sizeof *sc);
        memset(io, 0, sizeof io);
        nb_stack_init_params(&c, &s, p, NB_INIT_GPT2, 0, 1);
        p[s.tensors[2].offset] = (nb_real)nbt_inf(1);
        snprintf(name, sizeof name, "a non-finite value names the preset as given (%s)", c.err);
        nbt_check(nb_stack_forward(&c, &s, p, io, io, 1, 2, ca, sc) == NB_ERR_NONFINITE &&
                      strstr(c.err, "(GPT-2)") != NULL,
                  name);
        free(p); free(ca); free(sc);
        nb_stack_free(&s);
    }
    /* an unknown name lists every accepted one */
    memset(&d, 0, sizeof d);
    nbt_check(nb_preset_from_name(&c, &d, "Pre-LN-ish") == NB_ERR_CONFIG &&
                  d.preset == NB_PRESET_DEFAULT && !d.name[0],
              "an unknown preset name is refused, desc untouched");
    for (i = 1; i < NB_PRESET_COUNT; i++) all &= strstr(c.err, nb_preset_name((nb_preset)i)) != NULL;
    all &= strstr(c.err, "GPT-2") && strstr(c.err, "HybridNorm*") && strstr(c.err, "Mix-LN") &&
           strstr(c.err, "QKVC") && strstr(c.err, "Pre-#-Post");
    snprintf(name, sizeof name, "the unknown-name message lists every accepted name (%s)", c.err);
    nbt_check(all, name);
    d.run.param_grads = (nb_grad_mode)3;
    d.n_layers = 1; d.d_model = 8; d.n_heads = 2;
    nbt_check(nb_stack_init(&c, &s, &d, 1, 2) == NB_ERR_CONFIG && strstr(c.err, "param_grads"),
              "an unknown gradient mode is refused");
    d.run.param_grads = NB_GRAD_DEFAULT;
    d.gemm.precision = (nb_precision)3;
    nbt_check(nb_stack_init(&c, &s, &d, 1, 2) == NB_ERR_CONFIG && strstr(c.err, "precision"),
              "an unknown precision is refused");
    {
        nb_attn_desc ad;
        nb_ffn_desc fd;
        nb_attn_plan ap;
        nb_ffn_plan fp;
        memset(&ad, 0, sizeof ad);
        memset(&fd, 0, sizeof fd);
        ad.d_model = fd.d_model = 8; ad.n_heads = 2;
        ad.gemm.precision = fd.gemm.precision = (nb_precision)7;
        nbt_check(nb_attn_plan_make(&c, &ap, &ad, 1, 2) == NB_ERR_CONFIG &&
                      nb_ffn_plan_make(&c, &fp, &fd, 1, 2) == NB_ERR_CONFIG &&
                      strstr(c.err, "precision"),
                  "plans refuse an unknown precision");
        d.gemm.precision = ad.gemm.precision = NB_PRECISION_BF16;
#ifdef NB_DOUBLE
        nbt_check(nb_stack_init(&c, &s, &d, 1, 2) == NB_ERR_CONFIG && strstr(c.err, "NB_DOUBLE") &&
                      nb_attn_plan_make(&c, &ap, &ad, 1, 2) == NB_ERR_CONFIG,
                  "BF16 is refused in the float64 build, saying why");
#else
        nbt_check(nb_stack_init(&c, &s, &d, 1, 2) == NB_OK && s.desc.gemm.precision == NB_PRECISION_BF16 &&
                      s.layers[0].attn.desc.gemm.precision == NB_PRECISION_BF16 &&
                      s.ffn.desc.gemm.precision == NB_PRECISION_BF16,
                  "a BF16 stack passes its precision to its plans");
        nbt_check(nb_stack_set_bf16_weights(&c, &s, (const unsigned short*)x) == NB_ERR_CONFIG &&
                      strstr(c.err, "bf16_weights"),
                  "nb_stack_set_bf16_weights needs a stack made with desc.bf16_weights");
        nb_stack_free(&s);
        {   /* the plans' own bf16 weights: the pointers are required */
            nb_attn_params p;
            nb_real buf[1024], cache[4096];
            ad.gemm.bf16_weights = 1; ad.n_heads = 2; ad.d_model = 8;
            nbt_check(nb_attn_plan_make(&c, &ap, &ad, 1, 2) == NB_OK &&
                          ap.n_params <= 1024 && ap.n_cache <= 4096 && ap.n_scratch <= 8192,
                      "an attention plan with bf16_weights");
            nb_attn_params_bind(&ap, buf, &p);
            nbt_check(nb_attn_forward(&c, &ap, &p, y, x, 1, 2, cache, scratch) == NB_ERR_NULL &&
                          strstr(c.err, "params.w_qkv16"),
                      "a bf16_weights plan without the bf16 weights is NB_ERR_NULL, named");
        }
#endif
        d.gemm.bf16_weights = 2;
        nbt_check(nb_stack_init(&c, &s, &d, 1, 2) == NB_ERR_CONFIG && strstr(c.err, "bf16_weights"),
                  "bf16_weights other than 0 or 1 is refused");
        d.gemm.bf16_weights = 1; d.gemm.precision = NB_PRECISION_FP32;
        fd.gemm.bf16_weights = 1; fd.gemm.precision = NB_PRECISION_FP32;
        nbt_check(nb_stack_init(&c, &s, &d, 1, 2) == NB_ERR_CONFIG &&
                      strstr(c.err, "bf16_weights needs precision BF16") &&
                      nb_ffn_plan_make(&c, &fp, &fd, 1, 2) == NB_ERR_CONFIG,
                  "bf16_weights without BF16 is refused (stack and plans)");
        d.gemm.bf16_weights = 0; fd.gemm.bf16_weights = 0;
        d.gemm.bf16_outputs = 1; fd.gemm.bf16_outputs = 1;
        nbt_check(nb_stack_init(&c, &s, &d, 1, 2) == NB_ERR_CONFIG &&
                      strstr(c.err, "bf16_outputs needs precision BF16") &&
                      nb_ffn_plan_make(&c, &fp, &fd, 1, 2) == NB_ERR_CONFIG,
                  "bf16_outputs without BF16 is refused (stack and plans)");
        d.gemm.bf16_outputs = -1; d.gemm.precision = NB_PRECISION_BF16;
        nbt_check(nb_stack_init(&c, &s, &d, 1, 2) == NB_ERR_CONFIG &&
                      strstr(c.err, "bf16_outputs (-1) must be 0 or 1"),
                  "bf16_outputs other than 0 or 1 is refused");
        d.gemm.bf16_outputs = 0; fd.gemm.bf16_outputs = 0;
    }
}

int main(void) {
    int i;
    ctx.log = logger;
    ctx.log_user = &seen;
    for (i = 0; i < 64; i++) { x[i] = (nb_real)(i % 7) - 3; dy[i] = 1; y[i] = dx[i] = -7; }
    for (i = 0; i < 8; i++) g[i] = 1;

    expect(nb_rmsnorm_forward(&ctx, y, 8, r, x, 8, g, 0, 8, 0, 1e-5f), NB_ERR_SHAPE, "rows",
           "rmsnorm rows = 0");
    expect(nb_rmsnorm_forward(&ctx, y, 8, r, x, 8, g, 2, -8, 0, 1e-5f), NB_ERR_SHAPE, "width",
           "rmsnorm negative width");
    expect(nb_rmsnorm_forward(&ctx, y, 8, r, x, 8, g, 2, 8, 3, 1e-5f), NB_ERR_SHAPE, "seg",
           "rmsnorm seg does not divide width");
    expect(nb_rmsnorm_forward(&ctx, y, 8, r, x, 8, g, 2, 8, -2, 1e-5f), NB_ERR_SHAPE, "seg",
           "rmsnorm negative seg");
    expect(nb_rmsnorm_forward(&ctx, y, 8, r, x, 4, g, 2, 8, 0, 1e-5f), NB_ERR_SHAPE, "stride",
           "rmsnorm ldx < width");
    expect(nb_rmsnorm_forward(&ctx, y, 8, r, x, 8, g, 2, 8, 0, 0), NB_ERR_VALUE, "eps",
           "rmsnorm eps = 0");
    expect(nb_rmsnorm_forward(&ctx, y, 8, r, x, 8, g, 2, 8, 0, -1), NB_ERR_VALUE, "eps",
           "rmsnorm eps < 0");
    expect(nb_rmsnorm_forward(&ctx, y, 8, r, x, 8, g, 2, 8, 0, (nb_real)NAN), NB_ERR_VALUE,
           "eps", "rmsnorm eps NaN");
    expect(nb_rmsnorm_forward(&ctx, NULL, 8, r, x, 8, g, 2, 8, 0, 1e-5f), NB_ERR_NULL,
           "nb_rmsnorm_forward", "rmsnorm y NULL");
    expect(nb_rmsnorm_forward(&ctx, y, 8, NULL, x, 8, g, 2, 8, 0, 1e-5f), NB_ERR_NULL, "rstd",
           "rmsnorm rstd NULL");
    expect(nb_rmsnorm_backward(&ctx, dx, 8, g, dy, 8, x, 8, r, g, 2, 8, 0, 0, NULL), NB_ERR_NULL,
           "scratch", "rmsnorm backward dgain without scratch");
    expect(nb_rmsnorm_backward(&ctx, dx, 4, NULL, dy, 8, x, 8, r, g, 2, 8, 0, 0, scratch),
           NB_ERR_SHAPE, "lddx", "rmsnorm backward lddx < width");
    expect(nb_rmsnorm_backward(&ctx, dx, 8, NULL, NULL, 8, x, 8, r, g, 2, 8, 0, 0, scratch),
           NB_ERR_NULL, "dy", "rmsnorm backward dy NULL");
    expect(nb_layernorm_forward(&ctx, y, 8, NULL, r, x, 8, g, NULL, 2, 8, 0, 1e-5f), NB_ERR_NULL,
           "mean", "layernorm mean NULL");
    expect(nb_layernorm_forward(&ctx, y, 8, m, r, x, 8, g, NULL, 2, 8, 16, 1e-5f), NB_ERR_SHAPE,
           "seg", "layernorm seg > width");
    expect(nb_layernorm_backward(&ctx, dx, 8, g, NULL, dy, 8, x, 8, NULL, r, g, 2, 8, 0, 0,
                                 scratch), NB_ERR_NULL, "mean", "layernorm backward mean NULL");
    expect(nb_softmax_forward(&ctx, y, 8, NULL, x, 8, 2, 8, 0, 0), NB_ERR_VALUE, "scale",
           "softmax scale = 0");
    expect(nb_softmax_forward(&ctx, y, 8, NULL, x, 8, 2, 8, (nb_real)nbt_inf(1), 0), NB_ERR_VALUE,
           "scale", "softmax scale inf");
    expect(nb_softmax_forward(&ctx, y, 8, NULL, x, 7, 2, 8, 1, 0), NB_ERR_SHAPE, "stride",
           "softmax lds < cols");
    expect(nb_softmax_forward(&ctx, y, 8, NULL, x, 8, 2, 0, 1, 0), NB_ERR_SHAPE, "cols",
           "softmax cols = 0");
    expect(nb_softmax_backward(&ctx, dx, 4, dy, 8, x, 8, 2, 8, 1, 1), NB_ERR_SHAPE, "ldds",
           "softmax backward ldds < cols");
    expect(nb_softmax_backward(&ctx, dx, 8, dy, 8, NULL, 8, 2, 8, 1, 1), NB_ERR_NULL, "p",
           "softmax backward p NULL");
    expect(nb_gemm(&ctx, 0, 0, 2, 3, 0, 1, x, 4, x, 4, 0, y, 4), NB_ERR_SHAPE, "K",
           "gemm K = 0");
    expect(nb_gemm(&ctx, 0, 1, 2, 3, 4, 1, x, 4, x, 3, 0, y, 3), NB_ERR_SHAPE,
           "leading dimensions", "gemm ldb too small for trans B");
    expect(nb_gemm(&ctx, 1, 0, 2, 3, 4, 1, x, 1, x, 3, 0, y, 3), NB_ERR_SHAPE,
           "leading dimensions", "gemm lda too small for trans A");
    expect(nb_gemm_ref(&ctx, 0, 0, 2, 3, 4, 1, x, 4, NULL, 3, 0, y, 3), NB_ERR_NULL, "B",
           "gemm_ref B NULL");

    issue13();

    /* A NULL context is allowed: the code alone is returned. */
    nbt_check(nb_rmsnorm_forward(NULL, y, 8, r, x, 8, g, 0, 8, 0, 1e-5f) == NB_ERR_SHAPE,
              "NULL ctx still reports the code");
    for (i = NB_OK; i <= NB_ERR_NOMEM; i++)
        nbt_check(strlen(nb_result_string((nb_result)i)) > 0, "every code has a string");
    nbt_check(strcmp(nb_result_string((nb_result)99), "unknown result code") == 0,
              "unknown code has a string");
    preset_names();
    return nbt_finish();
}
