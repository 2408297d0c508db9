/* Attention and FFN sublayers.
   float64 build: central finite differences of the library's own forward (loss = sum(dout*out))
   against its backward, for every site combination x {MHA, GQA} x {RoPE on, off} x {per-head,
   full-width} x {RMSNorm, LayerNorm sample}, with non-unit gains, in both memory modes; and
   every FFN type.
   Both builds: the exact properties that apply to sublayers, the two attention
   memory modes agree, 1 vs 2 threads, and bad configurations are rejected. */
#define NORMBLOCKS_IMPLEMENTATION
#include "normblocks.h"
#include "nbtest.h"

/* ---- attention harness ---- */

typedef struct attn_run {
    nb_attn_plan plan;
    nb_attn_params p, g;
    nb_real *params, *grads, *cache, *scratch, *x, *out, *dout, *dx;
    int B, T;
} attn_run;

static int attn_setup(attn_run* r, const nb_attn_desc* desc, int B, int T, nbt_rng* rng,
                      nb_ctx* ctx) {
    const size_t n = (size_t)B * T * desc->d_model;
    memset(r, 0, sizeof *r);
    if (nb_attn_plan_make(ctx, &r->plan, desc, B, T) != NB_OK) return 0;
    r->B = B; r->T = T;
    r->params = nbt_alloc(r->plan.n_params);
    r->grads = nbt_alloc(r->plan.n_params);
    r->cache = nbt_alloc(r->plan.n_cache);
    r->scratch = nbt_alloc(r->plan.n_scratch);
    r->x = nbt_alloc(n); r->out = nbt_alloc(n); r->dout = nbt_alloc(n); r->dx = nbt_alloc(n);
    nb_attn_params_bind(&r->plan, r->params, &r->p);
    nb_attn_params_bind(&r->plan, r->grads, &r->g);
    /* weights large enough that attention is far from uniform; gains far from 1 so that a
       norm/RoPE order mistake shows */
    nbt_fill(rng, r->params, r->plan.n_params, 0, 0.5);
    {   /* the site gains follow w_o (and b_o) to the end of the buffer */
        nb_real* gains = r->p.w_o + (size_t)desc->d_model * desc->d_model +
                         (r->p.b_o ? desc->d_model : 0);
        nbt_fill(rng, gains, (size_t)(r->params + r->plan.n_params - gains), 1, 0.3);
    }
    nbt_fill(rng, r->x, n, 0, 1);
    nbt_fill(rng, r->dout, n, 0, 1);
    return 1;
}

static void attn_free(attn_run* r) {
    free(r->params); free(r->grads); free(r->cache); free(r->scratch); free(r->x); free(r->out);
    free(r->dout); free(r->dx);
}

static double attn_loss(attn_run* r, nb_ctx* ctx) {
    const size_t n = (size_t)r->B * r->T * r->plan.desc.d_model;
    double s = 0;
    size_t i;
    nb_attn_forward(ctx, &r->plan, &r->p, r->out, r->x, r->B, r->T, r->cache, r->scratch);
    for (i = 0; i < n; i++) s += (double)r->out[i] * r->dout[i];
    return s;
}

static void attn_grads(attn_run* r, nb_ctx* ctx) {
    memset(r->grads, 0, r->plan.n_params * sizeof(nb_real));
    attn_loss(r, ctx);
    nb_attn_backward(ctx, &r->plan, &r->p, &r->g, r->dx, r->dout, r->x, r->B, r->T, r->cache,
                     r->scratch, 0);
}

static const char* sites_name(unsigned s) {
    static char buf[8];
    int k = 0;
    if (!s) return "none";
    if (s & NB_SITE_Q) buf[k++] = 'Q';
    if (s & NB_SITE_K) buf[k++] = 'K';
    if (s & NB_SITE_V) buf[k++] = 'V';
    if (s & NB_SITE_C) buf[k++] = 'C';
    buf[k] = 0;
    return buf;
}

#ifdef NB_DOUBLE
/* Central differences over every value of v[0..n) against the analytic gradient g. Step 1e-5
   ~ cbrt(double eps): truncation (h^2) and rounding (eps*|loss|/h) errors both stay ~1e-10. */
static void fd_compare(const char* name, attn_run* r, nb_ctx* ctx, nb_real* v, const nb_real* g,
                       size_t n) {
    double* ref = (double*)malloc(n * sizeof(double));
    size_t i;
    for (i = 0; i < n; i++) {
        const nb_real keep = v[i];
        double lp, lm;
        v[i] = keep + 1e-5; lp = attn_loss(r, ctx);
        v[i] = keep - 1e-5; lm = attn_loss(r, ctx);
        v[i] = keep;
        ref[i] = (lp - lm) / 2e-5;
    }
    nbt_close(name, g, ref, n, NBT_ATOL, NBT_RTOL);
    free(ref);
}

/* threads: 1 for thousands of tiny forwards (threads are tested on their own), more for the
   backward that splits a (batch, KV head) pair over threads when there are fewer pairs */
static void attn_fd_case(const nb_attn_desc* desc, int B, int T, int threads, nbt_rng* rng) {
    attn_run r;
    nb_ctx ctx;
    char name[256], what[160];
    memset(&ctx, 0, sizeof ctx);
    ctx.num_threads = threads;
    snprintf(what, sizeof what,
             "attn %s B=%d T=%d H=%d Hkv=%d threads=%d rope=%d %s %s %s bias=%u softcap=%g",
             sites_name(desc->attn.sites), B, T, desc->n_heads, desc->n_kv_heads, threads,
             desc->attn.rope, desc->attn.site_width == NB_WIDTH_FULL ? "full" : "per-head",
             desc->norm == NB_NORM_LAYER ? "LN" : "RMS",
             desc->attn.memory == NB_ATTN_MEMORY_LSE ? "lse" : "probs", desc->attn.bias,
             (double)desc->attn.softcap);
    if (!nbt_check(attn_setup(&r, desc, B, T, rng, &ctx), what)) return;
    attn_grads(&r, &ctx);
    if (desc->attn.softcap > 0) { /* the cap bends the logits: some beyond c, where tanh' < 0.42 */
        double mx[8], top = 0;
        int h;
        nb_attn_head_stats(&r.plan, r.cache, B, T, mx, NULL);
        for (h = 0; h < desc->n_heads; h++) top = mx[h] > top ? mx[h] : top;
        snprintf(name, sizeof name, "%s: the largest logit %.3g is beyond the cap", what, top);
        nbt_check(top > desc->attn.softcap, name);
    }
    snprintf(name, sizeof name, "%s: dx", what);
    fd_compare(name, &r, &ctx, r.x, r.dx, (size_t)B * T * desc->d_model);
    snprintf(name, sizeof name, "%s: every parameter gradient", what);
    {
        /* the gradient buffer mirrors the parameter buffer, so one sweep covers them all */
        nb_real* g = nbt_alloc(r.plan.n_params);
        memcpy(g, r.grads, r.plan.n_params * sizeof(nb_real));
        fd_compare(name, &r, &ctx, r.params, g, r.plan.n_params);
        free(g);
    }
    attn_free(&r);
}

static double ffn_loss(const nb_ffn_plan* pl, const nb_ffn_params* p, nb_real* out,
                       const nb_real* x, const nb_real* dout, int BT, nb_real* cache,
                       nb_real* scratch) {
    double s = 0;
    int i;
    nb_ffn_forward(NULL, pl, p, out, x, 1, BT, cache, scratch);
    for (i = 0; i < BT * pl->desc.d_model; i++) s += (double)out[i] * dout[i];
    return s;
}

static void ffn_fd_case(nb_ffn_type type, int bias, nbt_rng* rng) {
    const int d = 6, BT = 7;
    nb_ffn_desc desc;
    nb_ffn_plan pl;
    nb_ffn_params p, g;
    nb_real *params, *grads, *cache, *scratch, *x, *out, *dout, *dx;
    double* ref;
    char name[128];
    size_t i, np;
    memset(&desc, 0, sizeof desc);
    desc.d_model = d; desc.ffn.d_ff = 10; desc.ffn.type = type; desc.ffn.bias = bias;
    if (!nbt_check(nb_ffn_plan_make(NULL, &pl, &desc, 1, BT) == NB_OK, "ffn plan")) return;
    np = pl.n_params;
    params = nbt_alloc(np); grads = nbt_alloc(np); cache = nbt_alloc(pl.n_cache);
    scratch = nbt_alloc(pl.n_scratch); x = nbt_alloc(BT * d); out = nbt_alloc(BT * d);
    dout = nbt_alloc(BT * d); dx = nbt_alloc(BT * d);
    ref = (double*)malloc((np + BT * d) * sizeof(double));
    nb_ffn_params_bind(&pl, params, &p);
    nb_ffn_params_bind(&pl, grads, &g);
    nbt_fill(rng, params, np, 0, 0.7);
    nbt_fill(rng, x, BT * d, 0, 1);
    nbt_fill(rng, dout, BT * d, 0, 1);
    ffn_loss(&pl, &p, out, x, dout, BT, cache, scratch);
    nb_ffn_backward(NULL, &pl, &p, &g, dx, dout, x, 1, BT, cache, scratch, 0);
    for (i = 0; i < np + (size_t)BT * d; i++) {
        nb_real* v = i < np ? params + i : x + (i - np);
        const nb_real keep = *v;
        double lp, lm;
        *v = keep + 1e-6; lp = ffn_loss(&pl, &p, out, x, dout, BT, cache, scratch);
        *v = keep - 1e-6; lm = ffn_loss(&pl, &p, out, x, dout, BT, cache, scratch);
        *v = keep;
        ref[i] = (lp - lm) / 2e-6;
    }
    snprintf(name, sizeof name, "ffn type %d bias %d: parameter gradients", (int)type, bias);
    nbt_close(name, grads, ref, np, NBT_ATOL, NBT_RTOL);
    snprintf(name, sizeof name, "ffn type %d bias %d: dx", (int)type, bias);
    nbt_close(name, dx, ref + np, (size_t)BT * d, NBT_ATOL, NBT_RTOL);
    free(params); free(grads); free(cache); free(scratch); free(x); free(out); free(dout);
    free(dx); free(ref);
}
#endif

static nb_attn_desc make_desc(int d, int H, int Hkv, unsigned sites, int rope, nb_norm_width w) {
    nb_attn_desc desc;
    memset(&desc, 0, sizeof desc);
    desc.d_model = d; desc.n_heads = H; desc.n_kv_heads = Hkv; desc.attn.sites = sites;
    desc.attn.rope = rope; desc.attn.site_width = w;
    return desc;
}

/* out(c*x) vs out(x): invariant when the attention weights and the value path are both
   normalized (QKV, QKVC, QKC), not otherwise. eps tiny so invariance is exact to rounding. */
static void scale_invariance(unsigned sites, int expect_invariant, nbt_rng* rng) {
    nb_attn_desc desc = make_desc(16, 4, 2, sites, 1, NB_WIDTH_PER_HEAD);
    attn_run r;
    nb_real* out1;
    double maxdiff = 0, maxref = 0;
    char name[128];
    size_t i, n;
    nb_ctx ctx;
    memset(&ctx, 0, sizeof ctx);
    desc.eps = (nb_real)1e-12;
    attn_setup(&r, &desc, 2, 9, rng, &ctx);
    n = (size_t)2 * 9 * 16;
    out1 = nbt_alloc(n);
    attn_loss(&r, &ctx);
    memcpy(out1, r.out, n * sizeof(nb_real));
    for (i = 0; i < n; i++) r.x[i] *= 3;
    attn_loss(&r, &ctx);
    for (i = 0; i < n; i++) {
        const double dd = fabs((double)r.out[i] - out1[i]);
        maxdiff = dd > maxdiff ? dd : maxdiff;
        maxref = fabs((double)out1[i]) > maxref ? fabs((double)out1[i]) : maxref;
    }
    snprintf(name, sizeof name, "attn %s is %sscale invariant (max diff %.2g of %.2g)",
             sites_name(sites), expect_invariant ? "" : "not ", maxdiff, maxref);
    /* invariant: rounding only (float ~1e-6 of the output scale); not invariant: O(1) change */
    nbt_check(expect_invariant ? maxdiff <= 1e-4 * maxref : maxdiff > 1e-2 * maxref, name);
    free(out1);
    attn_free(&r);
}

/* GQA equals MHA with each KV head's weights repeated for its g query heads, and the GQA
   weight gradient of a KV head is the sum of the MHA gradients of its copies. */
static void gqa_equals_repeated_mha(nbt_rng* rng) {
    const int d = 16, H = 4, Hkv = 2, dk = 4, g = H / Hkv, B = 2, T = 7;
    nb_attn_desc dg = make_desc(d, H, Hkv, NB_SITES_QKV, 1, NB_WIDTH_PER_HEAD);
    nb_attn_desc dm = make_desc(d, H, H, NB_SITES_QKV, 1, NB_WIDTH_PER_HEAD);
    attn_run rg, rm;
    nb_real* sum;
    nb_ctx ctx;
    int h, kv, row;
    memset(&ctx, 0, sizeof ctx);
    attn_setup(&rg, &dg, B, T, rng, &ctx);
    attn_setup(&rm, &dm, B, T, rng, &ctx);
    memcpy(rm.x, rg.x, (size_t)B * T * d * sizeof(nb_real));
    memcpy(rm.dout, rg.dout, (size_t)B * T * d * sizeof(nb_real));
    memcpy(rm.p.w_qkv, rg.p.w_qkv, (size_t)d * d * sizeof(nb_real)); /* Q rows */
    for (kv = 0; kv < 2; kv++)                                         /* K then V */
        for (h = 0; h < H; h++)
            for (row = 0; row < dk; row++)
                memcpy(rm.p.w_qkv + (size_t)(d + kv * H * dk + h * dk + row) * d,
                       rg.p.w_qkv + (size_t)(d + kv * Hkv * dk + (h / g) * dk + row) * d,
                       d * sizeof(nb_real));
    memcpy(rm.p.w_o, rg.p.w_o, (size_t)d * d * sizeof(nb_real));
    memcpy(rm.p.q_gain, rg.p.q_gain, dk * sizeof(nb_real));
    memcpy(rm.p.k_gain, rg.p.k_gain, dk * sizeof(nb_real));
    memcpy(rm.p.v_gain, rg.p.v_gain, dk * sizeof(nb_real));
    attn_grads(&rg, &ctx);
    attn_grads(&rm, &ctx);
    nbt_close_r("GQA out = MHA with repeated KV weights", rg.out, rm.out, (size_t)B * T * d,
                NBT_ATOL, NBT_RTOL);
    nbt_close_r("GQA dx = MHA dx", rg.dx, rm.dx, (size_t)B * T * d, NBT_ATOL, NBT_RTOL);
    sum = nbt_alloc((size_t)2 * Hkv * dk * d);
    for (kv = 0; kv < 2; kv++)
        for (h = 0; h < H; h++)
            for (row = 0; row < dk * d; row++)
                sum[(size_t)(kv * Hkv + h / g) * dk * d + row] +=
                    rm.g.w_qkv[(size_t)(d + kv * H * dk + h * dk) * d + row];
    nbt_close_r("GQA dW_kv = sum of the MHA copies' gradients", rg.g.w_qkv + (size_t)d * d, sum,
                (size_t)2 * Hkv * dk * d, NBT_ATOL, NBT_RTOL);
    nbt_close_r("GQA dW_q = MHA dW_q", rg.g.w_qkv, rm.g.w_qkv, (size_t)d * d, NBT_ATOL, NBT_RTOL);
    nbt_close_r("GQA k_gain grad = MHA", rg.g.k_gain, rm.g.k_gain, dk, NBT_ATOL, NBT_RTOL);
    free(sum);
    attn_free(&rg);
    attn_free(&rm);
}

/* RMSNorm over a head and RoPE commute at unit gain (a rotation keeps the norm) and not with a
   learned gain: why the order norm -> RoPE matters and why the tests use non-unit gains. */
static void rope_norm_commutation(nbt_rng* rng) {
    enum { T = 6, DK = 8 };
    nb_real x[T * DK], a[T * DK], b[T * DK], rstd[T], gain[DK], one[DK];
    double diff_unit = 0, diff_gain = 0;
    int i;
    nbt_fill(rng, x, T * DK, 0, 1);
    nbt_fill(rng, gain, DK, 1, 0.5);
    for (i = 0; i < DK; i++) one[i] = 1;
    /* unit gain: N(R(x)) vs R(N(x)) */
    nb_rmsnorm_forward(NULL, a, DK, rstd, x, DK, one, T, DK, 0, 1e-6f);
    nb_rope(NULL, a, DK, 1, T, 1, DK, 100, 0);
    memcpy(b, x, sizeof b);
    nb_rope(NULL, b, DK, 1, T, 1, DK, 100, 0);
    nb_rmsnorm_forward(NULL, b, DK, rstd, b, DK, one, T, DK, 0, 1e-6f);
    for (i = 0; i < T * DK; i++) diff_unit = fmax(diff_unit, fabs((double)a[i] - b[i]));
    nb_rmsnorm_forward(NULL, a, DK, rstd, x, DK, gain, T, DK, 0, 1e-6f);
    nb_rope(NULL, a, DK, 1, T, 1, DK, 100, 0);
    memcpy(b, x, sizeof b);
    nb_rope(NULL, b, DK, 1, T, 1, DK, 100, 0);
    nb_rmsnorm_forward(NULL, b, DK, rstd, b, DK, gain, T, DK, 0, 1e-6f);
    for (i = 0; i < T * DK; i++) diff_gain = fmax(diff_gain, fabs((double)a[i] - b[i]));
    nbt_check(diff_unit < 1e-5, "RoPE and unit-gain RMSNorm commute");
    nbt_check(diff_gain > 1e-2, "RoPE and a learned-gain RMSNorm do not commute");
    /* inverse really inverts */
    memcpy(a, x, sizeof a);
    nb_rope(NULL, a, DK, 1, T, 1, DK, 100, 0);
    nb_rope(NULL, a, DK, 1, T, 1, DK, 100, 1);
    nbt_close_r("RoPE inverse undoes RoPE", a, x, T * DK, NBT_ATOL, NBT_RTOL);
}

/* PROBS and LSE memory modes, and 1 vs 2 threads, give the same results; T spans several
   row tiles so tiling and causal tile bounds are exercised. */
/* PROBS mode on 1 thread vs LSE mode on `threads` (B * Hkv < threads splits the backward's
   (batch, KV head) tasks into parts with partial dK/dV sums) */
static void modes_and_threads_agree(int B, int Hkv, int threads, nbt_rng* rng) {
    nb_attn_desc desc = make_desc(32, 4, Hkv, NB_SITES_QKVC, 1, NB_WIDTH_PER_HEAD);
    const int T = 150;
    attn_run a, b;
    nb_ctx c1, c2;
    nbt_rng r2;
    int causal;
    memset(&c1, 0, sizeof c1); memset(&c2, 0, sizeof c2);
    c1.num_threads = 1; c2.num_threads = threads;
    for (causal = 0; causal < 2; causal++) {
        char name[128];
        desc.attn.non_causal = !causal;
        desc.attn.memory = NB_ATTN_MEMORY_PROBS;
        r2 = *rng;
        attn_setup(&a, &desc, B, T, rng, &c1);
        desc.attn.memory = NB_ATTN_MEMORY_LSE;
        attn_setup(&b, &desc, B, T, &r2, &c2); /* same random stream: same weights and inputs */
        attn_grads(&a, &c1);
        attn_grads(&b, &c2);
        snprintf(name, sizeof name, "%s B=%d Hkv=%d: probs/1 thread vs lse/%d threads: out",
                 causal ? "causal" : "non-causal", B, Hkv, threads);
        nbt_close_r(name, b.out, a.out, (size_t)B * T * 32, NBT_ATOL, NBT_RTOL);
        snprintf(name, sizeof name, "%s B=%d Hkv=%d: probs/1 thread vs lse/%d threads: dx",
                 causal ? "causal" : "non-causal", B, Hkv, threads);
        nbt_close_r(name, b.dx, a.dx, (size_t)B * T * 32, NBT_ATOL, NBT_RTOL);
        snprintf(name, sizeof name,
                 "%s B=%d Hkv=%d: probs/1 thread vs lse/%d threads: parameter gradients",
                 causal ? "causal" : "non-causal", B, Hkv, threads);
        nbt_close_scaled(name, b.grads, a.grads, a.plan.n_params, NBT_ATOL, NBT_RTOL);
        nbt_check(b.plan.n_cache < a.plan.n_cache, "lse mode caches less than probs mode");
        {   /* rerun with the same threads: bitwise identical */
            nb_real* keep = nbt_alloc(b.plan.n_params);
            memcpy(keep, b.grads, b.plan.n_params * sizeof(nb_real));
            attn_grads(&b, &c2);
            snprintf(name, sizeof name, "lse mode, %d threads, twice: identical gradients",
                     threads);
            nbt_same_bits(name, b.grads, keep, b.plan.n_params);
            free(keep);
        }
        attn_free(&a);
        attn_free(&b);
    }
}

static void bad_configs(void) {
    nb_ctx ctx;
    nb_attn_plan pl;
    nb_ffn_plan fp;
    nb_attn_desc d;
    nb_ffn_desc fd;
    attn_run r;
    nbt_rng rng = {7};
    memset(&ctx, 0, sizeof ctx);
    d = make_desc(16, 3, 0, 0, 0, NB_WIDTH_DEFAULT);
    nbt_check(nb_attn_plan_make(&ctx, &pl, &d, 1, 8) == NB_ERR_CONFIG &&
                  strstr(ctx.err, "divisible"), "d not divisible by H rejected");
    d = make_desc(16, 4, 3, 0, 0, NB_WIDTH_DEFAULT);
    nbt_check(nb_attn_plan_make(&ctx, &pl, &d, 1, 8) == NB_ERR_CONFIG &&
                  strstr(ctx.err, "n_kv_heads"), "H not divisible by H_kv rejected");
    d = make_desc(12, 4, 0, 0, 1, NB_WIDTH_DEFAULT);
    nbt_check(nb_attn_plan_make(&ctx, &pl, &d, 1, 8) == NB_ERR_CONFIG &&
                  strstr(ctx.err, "RoPE"), "odd d_k with RoPE rejected");
    d = make_desc(16, 4, 0, 0x10, 0, NB_WIDTH_DEFAULT);
    nbt_check(nb_attn_plan_make(&ctx, &pl, &d, 1, 8) == NB_ERR_CONFIG, "unknown site bit rejected");
    d = make_desc(16, 4, 0, 0, 0, (nb_norm_width)7);
    nbt_check(nb_attn_plan_make(&ctx, &pl, &d, 1, 8) == NB_ERR_CONFIG, "unknown width rejected");
    d = make_desc(16, 4, 0, 0, 0, NB_WIDTH_DEFAULT);
    d.eps = -1;
    nbt_check(nb_attn_plan_make(&ctx, &pl, &d, 1, 8) == NB_ERR_CONFIG, "negative eps rejected");
    d.eps = 0; d.attn.sink = (nb_attn_sink)3;
    nbt_check(nb_attn_plan_make(&ctx, &pl, &d, 1, 8) == NB_ERR_CONFIG && strstr(ctx.err, "sink"),
              "unknown sink rejected");
    d.attn.sink = NB_SINK_LEARNED;
    attn_setup(&r, &d, 1, 8, &rng, &ctx);
    nbt_check(r.plan.n_params == (size_t)(48 * 16 + 16 * 16 + 4) && r.p.sinks &&
                  r.p.sinks == r.params + r.plan.n_params - 4, "learned sinks: H values, last");
    r.p.sinks = NULL;
    nbt_check(nb_attn_forward(&ctx, &r.plan, &r.p, r.out, r.x, 1, 8, r.cache, r.scratch) ==
                  NB_ERR_NULL && strstr(ctx.err, "sinks"), "missing sinks rejected");
    attn_free(&r);
    d.attn.sink = NB_SINK_NONE; d.attn.clip_qkv = -1;
    nbt_check(nb_attn_plan_make(&ctx, &pl, &d, 1, 8) == NB_ERR_CONFIG && strstr(ctx.err, "clip_qkv"),
              "a negative clip_qkv rejected");
    d.attn.clip_qkv = (nb_real)INFINITY;
    nbt_check(nb_attn_plan_make(&ctx, &pl, &d, 1, 8) == NB_ERR_CONFIG, "an infinite clip_qkv rejected");
    d.attn.clip_qkv = 0; d.attn.softcap = -1;
    nbt_check(nb_attn_plan_make(&ctx, &pl, &d, 1, 8) == NB_ERR_CONFIG && strstr(ctx.err, "softcap"),
              "a negative softcap rejected");
    d.attn.softcap = (nb_real)NAN;
    nbt_check(nb_attn_plan_make(&ctx, &pl, &d, 1, 8) == NB_ERR_CONFIG && strstr(ctx.err, "softcap"),
              "a NaN softcap rejected");
    d.attn.softcap = 0;
    nbt_check(nb_attn_plan_make(&ctx, &pl, &d, 0, 8) == NB_ERR_SHAPE, "max_batch 0 rejected");
    nbt_check(nb_attn_plan_make(&ctx, &pl, NULL, 1, 8) == NB_ERR_NULL, "NULL desc rejected");
    d = make_desc(16, 4, 2, NB_SITES_QKV, 1, NB_WIDTH_DEFAULT);
    attn_setup(&r, &d, 2, 8, &rng, &ctx);
    nbt_check(nb_attn_forward(&ctx, &r.plan, &r.p, r.out, r.x, 2, 9, r.cache, r.scratch) ==
                  NB_ERR_SHAPE && strstr(ctx.err, "exceed"), "T beyond the plan rejected");
    nbt_check(nb_attn_forward(&ctx, &r.plan, &r.p, r.out, r.x, 3, 8, r.cache, r.scratch) ==
                  NB_ERR_SHAPE, "B beyond the plan rejected");
    nbt_check(nb_attn_forward(&ctx, &r.plan, &r.p, r.out, r.x, 2, 8, NULL, r.scratch) ==
                  NB_ERR_NULL, "NULL cache rejected");
    r.p.k_gain = NULL;
    nbt_check(nb_attn_forward(&ctx, &r.plan, &r.p, r.out, r.x, 2, 8, r.cache, r.scratch) ==
                  NB_ERR_NULL && strstr(ctx.err, "gain"), "missing site gain rejected");
    nb_attn_params_bind(&r.plan, r.params, &r.p);
    nbt_check(nb_attn_backward(&ctx, &r.plan, &r.p, NULL, r.dx, r.dout, r.x, 2, 8, r.cache,
                               r.scratch, 0) == NB_ERR_NULL, "NULL gradients rejected");
    ctx.num_threads = r.plan.max_threads + 1;
    nbt_check(nb_attn_forward(&ctx, &r.plan, &r.p, r.out, r.x, 2, 8, r.cache, r.scratch) ==
                  NB_ERR_CONFIG && strstr(ctx.err, "threads"),
              "more threads than the plan was sized for rejected");
    attn_free(&r);
    memset(&fd, 0, sizeof fd);
    fd.d_model = 8; fd.ffn.type = (nb_ffn_type)9;
    nbt_check(nb_ffn_plan_make(&ctx, &fp, &fd, 1, 4) == NB_ERR_CONFIG, "unknown FFN type rejected");
    fd.ffn.type = NB_FFN_DEFAULT; fd.d_model = 0;
    nbt_check(nb_ffn_plan_make(&ctx, &fp, &fd, 1, 4) == NB_ERR_CONFIG, "FFN d_model 0 rejected");
    fd.d_model = 8; fd.ffn.bias = 2;
    nbt_check(nb_ffn_plan_make(&ctx, &fp, &fd, 1, 4) == NB_ERR_CONFIG, "FFN bias 2 rejected");
    fd.ffn.bias = 0;
    nbt_check(nb_ffn_plan_make(&ctx, &fp, &fd, 1, 4) == NB_OK && fp.desc.ffn.d_ff == 64 &&
                  fp.desc.ffn.bias == -1 && fp.in_width == 128,
              "SwiGLU defaults: f = 8d/3 rounded up to 64, no bias");
}

/* An independent attention forward in double, straight from the definitions (no norm sites,
   no RoPE): [Q|K|V|G] = x W^T + b (Q|K|V clamped to [-c, c] with clip_qkv), logits s q.k
   (then c tanh(. / c) with the softcap, the statistic before it),
   softmax (with the sink logit z_h as one more
   entry whose probability is dropped, as gpt-oss's code concatenates and slices), C,
   C sigmoid(G), out = C' W_o^T + b_o; and the per-head largest logit, mean first-key and
   mean sink probability. */
static void naive_attention(const nb_attn_plan* pl, const nb_attn_params* p, const nb_real* x,
                            int B, int T, double* out, double* max_logit, double* first_mass,
                            double* sink_mass) {
    const int d = pl->desc.d_model, H = pl->desc.n_heads, Hkv = pl->desc.n_kv_heads;
    const int dk = pl->head_dim, P = pl->qkv_width, G = pl->gate_width;
    const double s = pl->desc.attn.softmax_scale;
    double *qkv = (double*)malloc(sizeof(double) * (size_t)B * T * P);
    double *c = (double*)calloc((size_t)B * T * d, sizeof(double));
    double* pr = (double*)malloc(sizeof(double) * (size_t)T);
    int b, t, i, j, h, e;
    for (h = 0; h < H; h++) { max_logit[h] = -INFINITY; first_mass[h] = 0; sink_mass[h] = 0; }
    for (t = 0; t < B * T; t++)
        for (j = 0; j < P; j++) {
            const double c = pl->desc.attn.clip_qkv;
            double acc = p->b_qkv ? p->b_qkv[j] : 0;
            for (e = 0; e < d; e++) acc += (double)x[(size_t)t * d + e] * p->w_qkv[(size_t)j * d + e];
            if (c > 0 && j < P - G) acc = acc > c ? c : acc < -c ? -c : acc; /* OLMo's clamp_ */
            qkv[(size_t)t * P + j] = acc;
        }
    for (b = 0; b < B; b++)
        for (h = 0; h < H; h++) {
            const int kv = h / (H / Hkv);
            for (i = 0; i < T; i++) {
                const double* q = qkv + ((size_t)b * T + i) * P + h * dk;
                const int n = pl->desc.attn.non_causal ? T : i + 1;
                double mx = -INFINITY, z = 0;
                for (j = 0; j < n; j++) {
                    const double* k = qkv + ((size_t)b * T + j) * P + d + kv * dk;
                    double dot = 0;
                    for (e = 0; e < dk; e++) dot += q[e] * k[e];
                    pr[j] = s * dot;
                    if (pr[j] > mx) mx = pr[j];
                }
                if (mx > max_logit[h]) max_logit[h] = mx;
                if (pl->desc.attn.softcap > 0) { /* Gemma 2: tanh of the scaled scores */
                    const double cap = pl->desc.attn.softcap;
                    mx = -INFINITY;
                    for (j = 0; j < n; j++) {
                        pr[j] = cap * tanh(pr[j] / cap);
                        if (pr[j] > mx) mx = pr[j];
                    }
                }
                if (pl->desc.attn.sink) { /* the sink's entry: a logit, no value */
                    const double zh = pl->desc.attn.sink == NB_SINK_LEARNED ? p->sinks[h] : 0;
                    const double m2 = zh > mx ? zh : mx, es = exp(zh - m2);
                    for (j = 0; j < n; j++) z += (pr[j] = exp(pr[j] - m2));
                    z += es;
                    sink_mass[h] += es / z / (B * T);
                } else {
                    for (j = 0; j < n; j++) z += (pr[j] = exp(pr[j] - mx));
                }
                first_mass[h] += pr[0] / z / (B * T);
                for (j = 0; j < n; j++) {
                    const double* v = qkv + ((size_t)b * T + j) * P + d + (Hkv + kv) * dk;
                    for (e = 0; e < dk; e++) c[((size_t)b * T + i) * d + h * dk + e] += pr[j] / z * v[e];
                }
            }
        }
    for (t = 0; t < B * T && G; t++)
        for (e = 0; e < d; e++) {
            const double g = qkv[(size_t)t * P + (P - G) + (G == d ? e : e / dk)];
            c[(size_t)t * d + e] /= 1 + exp(-g);
        }
    for (t = 0; t < B * T; t++)
        for (j = 0; j < d; j++) {
            double acc = p->b_o ? p->b_o[j] : 0;
            for (e = 0; e < d; e++) acc += c[(size_t)t * d + e] * p->w_o[(size_t)j * d + e];
            out[(size_t)t * d + j] = acc;
        }
    free(qkv); free(c); free(pr);
}

/* The forward with each gate and sink, and the head statistics, against naive_attention: MHA
   and GQA, causal or not, both memory modes, a tile boundary (T > 64) */
static void gate_and_head_stats(nbt_rng* rng) {
    static const struct {
        int H, Hkv, T, causal, lse;
        nb_attn_gate gate;
        unsigned bias;
        nb_attn_sink sink;
        double clip_qkv, softcap;
    } cs[] = {
        {4, 4, 6, 1, 0, NB_GATE_HEADWISE, 0, NB_SINK_NONE, 0, 0},
        {4, 2, 7, 1, 1, NB_GATE_ELEMENTWISE, 3, NB_SINK_LEARNED, 0, 0},
        {4, 1, 5, 0, 0, NB_GATE_NONE, 1, NB_SINK_OFF_BY_ONE, 0, 0},
        {2, 1, 70, 1, 1, NB_GATE_HEADWISE, 1, NB_SINK_OFF_BY_ONE, 0, 0},
        {2, 2, 67, 0, 0, NB_GATE_ELEMENTWISE, 0, NB_SINK_LEARNED, 0, 0},
        {4, 2, 70, 1, 0, NB_GATE_NONE, 0, NB_SINK_LEARNED, 0, 0},
        {4, 2, 7, 1, 1, NB_GATE_HEADWISE, 3, NB_SINK_NONE, 0.8, 0},
        {2, 1, 67, 0, 0, NB_GATE_NONE, 1, NB_SINK_LEARNED, 1.1, 0},
        {4, 2, 70, 1, 0, NB_GATE_NONE, 0, NB_SINK_NONE, 0, 0.6},
        {2, 1, 67, 0, 1, NB_GATE_HEADWISE, 1, NB_SINK_LEARNED, 0, 0.4},
        {4, 4, 7, 1, 1, NB_GATE_NONE, 3, NB_SINK_OFF_BY_ONE, 0.9, 0.5}};
    nb_ctx ctx;
    size_t c;
    memset(&ctx, 0, sizeof ctx);
    for (c = 0; c < sizeof cs / sizeof cs[0]; c++) {
        nb_attn_desc desc = make_desc(16, cs[c].H, cs[c].Hkv, 0, 0, NB_WIDTH_PER_HEAD);
        attn_run r;
        const int B = 2, T = cs[c].T, H = cs[c].H;
        const size_t n = (size_t)B * T * 16;
        double *ref = (double*)malloc(sizeof(double) * n), mx[4], fm[4], sm[4], rmx[4], rfm[4];
        double rsm[4];
        char name[160];
        desc.attn.gate = cs[c].gate; desc.attn.bias = cs[c].bias; desc.attn.non_causal = !cs[c].causal;
        desc.attn.memory = cs[c].lse ? NB_ATTN_MEMORY_LSE : NB_ATTN_MEMORY_PROBS;
        desc.attn.sink = cs[c].sink; desc.attn.clip_qkv = (nb_real)cs[c].clip_qkv;
        desc.attn.softcap = (nb_real)cs[c].softcap;
        snprintf(name, sizeof name, "gate %d, sink %d, clip_qkv %g, softcap %g, H %d/%d, T %d, %s, %s",
                 (int)desc.attn.gate, (int)desc.attn.sink, cs[c].clip_qkv, cs[c].softcap, H, cs[c].Hkv, T,
                 cs[c].causal ? "causal" : "non-causal", cs[c].lse ? "LSE" : "probs");
        if (!nbt_check(attn_setup(&r, &desc, B, T, rng, &ctx), name)) { free(ref); continue; }
        nbt_check(r.plan.gate_width == (desc.attn.gate == NB_GATE_HEADWISE ? H : desc.attn.gate ? 16 : 0) &&
                  r.plan.qkv_width == 16 + 2 * cs[c].Hkv * (16 / H) + r.plan.gate_width,
                  "the gate's G rows follow Q|K|V");
        nbt_check(nb_attn_head_stats(&r.plan, r.cache, B, T, mx, fm) == NB_ERR_CONFIG,
                  "head stats: a cache without a forward is refused");
        nbt_check(nb_attn_forward(&ctx, &r.plan, &r.p, r.out, r.x, B, T, r.cache, r.scratch) ==
                  NB_OK, name);
        naive_attention(&r.plan, &r.p, r.x, B, T, ref, rmx, rfm, rsm);
        {
            char what[200];
            size_t i;
            double worst = 0;
            nb_real mxr[4], fmr[4], smr[4];
            for (i = 0; i < n; i++) {
                const double e = fabs(r.out[i] - ref[i]) / (NBT_ATOL + NBT_RTOL * fabs(ref[i]));
                if (e > worst) worst = e;
            }
            snprintf(what, sizeof what, "%s: forward vs the naive double attention", name);
            nbt_check(worst <= 1, what);
            nbt_check(nb_attn_head_stats(&r.plan, r.cache, B, T, mx, fm) == NB_OK, name);
            for (i = 0; i < (size_t)H; i++) { mxr[i] = (nb_real)mx[i]; fmr[i] = (nb_real)fm[i]; }
            snprintf(what, sizeof what, "%s: max logit per head", name);
            nbt_close(what, mxr, rmx, H, NBT_ATOL, NBT_RTOL);
            snprintf(what, sizeof what, "%s: first-key mass per head", name);
            nbt_close(what, fmr, rfm, H, NBT_ATOL, NBT_RTOL);
            nbt_check(nb_attn_sink_mass(&r.plan, r.cache, B, T, sm) == NB_OK, name);
            for (i = 0; i < (size_t)H; i++) smr[i] = (nb_real)sm[i];
            snprintf(what, sizeof what, "%s: sink mass per head", name);
            nbt_close(what, smr, rsm, H, NBT_ATOL, NBT_RTOL);
            if (desc.attn.sink) { /* else the comparison holds trivially: 0 = 0 */
                snprintf(what, sizeof what, "%s: the sink takes mass (%.3g)", name, rsm[0]);
                nbt_check(rsm[0] > 1e-3, what);
            }
            if (desc.attn.softcap > 0) { /* else the cap could be a no-op and pass */
                snprintf(what, sizeof what, "%s: a logit (%.3g) beyond the cap", name, rmx[0]);
                nbt_check(rmx[0] > 1.5 * desc.attn.softcap, what);
            }
            nbt_check(nb_attn_head_stats(&r.plan, r.cache, B, T + 1, mx, fm) == NB_ERR_CONFIG &&
                      nb_attn_head_stats(&r.plan, r.cache, B, T, NULL, NULL) == NB_ERR_NULL &&
                      nb_attn_head_stats(NULL, r.cache, B, T, mx, NULL) == NB_ERR_NULL,
                      "head stats: another T, no output, no plan refused");
        }
        free(ref);
        attn_free(&r);
    }
}

int main(void) {
    nbt_rng rng = {0xC0FFEE};
#ifdef NB_DOUBLE
    static const unsigned site_sets[] = {0, NB_SITES_QKVC, NB_SITES_QKV, NB_SITE_Q | NB_SITE_K | NB_SITE_C,
                                         NB_SITE_Q | NB_SITE_K, NB_SITE_K | NB_SITE_V,
                                         NB_SITE_K | NB_SITE_C};
    size_t s;
    int gqa, rope, full;
    for (s = 0; s < sizeof site_sets / sizeof site_sets[0]; s++)
        for (gqa = 0; gqa < 2; gqa++)
            for (rope = 0; rope < 2; rope++)
                for (full = 0; full < 2; full++) {
                    nb_attn_desc d = make_desc(8, 2, gqa ? 1 : 2, site_sets[s], rope,
                                               full ? NB_WIDTH_FULL : NB_WIDTH_PER_HEAD);
                    if (full && !site_sets[s]) continue; /* width is moot without sites */
                    d.attn.memory = (rope + full + gqa) % 2 ? NB_ATTN_MEMORY_LSE : NB_ATTN_MEMORY_PROBS;
                    attn_fd_case(&d, 2, 5, 1, &rng);
                }
    {   /* LayerNorm sites, no gains, non-causal, a tile boundary (T > 64) in LSE mode */
        nb_attn_desc d = make_desc(8, 2, 1, NB_SITES_QKVC, 1, NB_WIDTH_PER_HEAD);
        d.norm = NB_NORM_LAYER;
        attn_fd_case(&d, 1, 5, 1, &rng);
        d.norm = NB_NORM_RMS; d.no_gain = 1; d.attn.non_causal = 1;
        attn_fd_case(&d, 2, 4, 1, &rng);
        d = make_desc(4, 1, 1, NB_SITE_Q | NB_SITE_K, 1, NB_WIDTH_PER_HEAD);
        d.attn.memory = NB_ATTN_MEMORY_LSE;
        attn_fd_case(&d, 1, 70, 1, &rng);
    }
    {   /* fewer (batch, KV head) pairs than threads: MQA split in 3 parts, GQA in 2 */
        nb_attn_desc d = make_desc(8, 2, 1, NB_SITES_QKV, 1, NB_WIDTH_PER_HEAD);
        attn_fd_case(&d, 1, 70, 3, &rng);
        d.attn.memory = NB_ATTN_MEMORY_LSE;
        attn_fd_case(&d, 1, 70, 3, &rng);
        d = make_desc(8, 4, 2, 0, 0, NB_WIDTH_PER_HEAD);
        attn_fd_case(&d, 1, 66, 3, &rng);
    }
    {   /* projection biases (GPT-2 both, Qwen2 Q|K|V): b_qkv enters before the site norms and
           RoPE, so QKV-normed and rotated cases check that order */
        nb_attn_desc d = make_desc(8, 2, 1, NB_SITES_QKVC, 1, NB_WIDTH_PER_HEAD);
        d.attn.bias = NB_ATTN_BIAS_QKV | NB_ATTN_BIAS_OUT;
        attn_fd_case(&d, 2, 5, 1, &rng);
        d = make_desc(8, 2, 2, 0, 0, NB_WIDTH_PER_HEAD);
        d.attn.bias = NB_ATTN_BIAS_QKV | NB_ATTN_BIAS_OUT;
        attn_fd_case(&d, 2, 5, 3, &rng);
        d = make_desc(8, 2, 1, NB_SITE_Q | NB_SITE_K, 1, NB_WIDTH_FULL);
        d.attn.bias = NB_ATTN_BIAS_QKV;
        attn_fd_case(&d, 1, 6, 1, &rng);
        d = make_desc(8, 2, 2, NB_SITE_V, 0, NB_WIDTH_PER_HEAD);
        d.attn.bias = NB_ATTN_BIAS_OUT;
        attn_fd_case(&d, 2, 4, 1, &rng);
    }
    {   /* the output gate: per head and per element, with the C site before it, GQA, a
           Q|K|V|G bias, both memory modes */
        nb_attn_desc d = make_desc(8, 2, 1, NB_SITES_QKVC, 1, NB_WIDTH_PER_HEAD);
        d.attn.gate = NB_GATE_HEADWISE;
        attn_fd_case(&d, 2, 5, 1, &rng);
        d.attn.gate = NB_GATE_ELEMENTWISE; d.attn.memory = NB_ATTN_MEMORY_LSE; d.attn.bias = NB_ATTN_BIAS_QKV;
        attn_fd_case(&d, 2, 5, 3, &rng);
        d = make_desc(16, 4, 2, 0, 0, NB_WIDTH_PER_HEAD); /* d_k 4: LayerNorm of 2 is +-1 */
        d.attn.gate = NB_GATE_HEADWISE; d.norm = NB_NORM_LAYER; d.attn.sites = NB_SITE_C;
        attn_fd_case(&d, 2, 4, 1, &rng);
    }
    {   /* sinks, learned (dz_h: every row of every batch) and off-by-one: MHA and GQA split over
           threads, both memory modes, non-causal, a tile boundary, with QK norms and the gate */
        nb_attn_desc d = make_desc(8, 2, 1, NB_SITE_Q | NB_SITE_K, 1, NB_WIDTH_PER_HEAD);
        d.attn.sink = NB_SINK_LEARNED;
        attn_fd_case(&d, 2, 5, 1, &rng);
        d.attn.memory = NB_ATTN_MEMORY_LSE;
        attn_fd_case(&d, 1, 70, 3, &rng);
        d.attn.sink = NB_SINK_OFF_BY_ONE; d.attn.non_causal = 1;
        attn_fd_case(&d, 2, 5, 1, &rng);
        d = make_desc(8, 2, 2, 0, 0, NB_WIDTH_PER_HEAD);
        d.attn.sink = NB_SINK_LEARNED; d.attn.gate = NB_GATE_HEADWISE; d.attn.non_causal = 1;
        attn_fd_case(&d, 2, 6, 3, &rng);
        d.attn.sink = NB_SINK_OFF_BY_ONE; d.attn.memory = NB_ATTN_MEMORY_PROBS;
        attn_fd_case(&d, 1, 66, 1, &rng);
    }
    {   /* OLMo's clip_qkv: with no sites (the clamp's own copy of the projection), before QK
           norms with RoPE (OLMo's order), with the gate (its columns not clamped) and biases;
           the bound cuts about half of the projections of this draw */
        nb_attn_desc d = make_desc(8, 2, 1, 0, 0, NB_WIDTH_PER_HEAD);
        d.attn.clip_qkv = 1; d.attn.bias = NB_ATTN_BIAS_QKV;
        attn_fd_case(&d, 2, 5, 1, &rng);
        d = make_desc(8, 2, 2, NB_SITE_Q | NB_SITE_K, 1, NB_WIDTH_FULL);
        d.attn.clip_qkv = 0.7f; d.attn.memory = NB_ATTN_MEMORY_LSE;
        attn_fd_case(&d, 2, 5, 3, &rng);
        d = make_desc(8, 2, 1, NB_SITES_QKVC, 1, NB_WIDTH_PER_HEAD);
        d.attn.clip_qkv = 1.3f; d.attn.gate = NB_GATE_ELEMENTWISE; d.attn.bias = NB_ATTN_BIAS_QKV;
        attn_fd_case(&d, 1, 6, 1, &rng);
    }
    {   /* Gemma 2's softcap: both memory modes (P cached: the derivative from the scores again;
           LSE: with the recompute), MHA and GQA split over threads, a tile boundary, non-causal,
           with QK norms and RoPE, with sinks (not capped) and with clip_qkv */
        nb_attn_desc d = make_desc(8, 2, 1, 0, 0, NB_WIDTH_PER_HEAD);
        d.attn.softcap = 0.3f;
        attn_fd_case(&d, 2, 5, 1, &rng);
        d.attn.memory = NB_ATTN_MEMORY_LSE;
        attn_fd_case(&d, 1, 70, 3, &rng);
        d = make_desc(8, 2, 2, NB_SITE_Q | NB_SITE_K, 1, NB_WIDTH_PER_HEAD);
        d.attn.softcap = 0.5f; d.attn.non_causal = 1;
        attn_fd_case(&d, 2, 6, 3, &rng);
        d.attn.sink = NB_SINK_LEARNED; d.attn.memory = NB_ATTN_MEMORY_LSE;
        attn_fd_case(&d, 2, 5, 1, &rng);
        d = make_desc(8, 2, 1, 0, 0, NB_WIDTH_PER_HEAD);
        d.attn.softcap = 0.4f; d.attn.clip_qkv = 1; d.attn.sink = NB_SINK_OFF_BY_ONE;
        attn_fd_case(&d, 1, 66, 1, &rng);
    }
    ffn_fd_case(NB_FFN_SWIGLU, 0, &rng);
    ffn_fd_case(NB_FFN_SWIGLU, 1, &rng);
    ffn_fd_case(NB_FFN_GELU_TANH, 0, &rng);
    ffn_fd_case(NB_FFN_GELU_ERF, 0, &rng);
    ffn_fd_case(NB_FFN_GELU_TANH, -1, &rng);
#endif
    scale_invariance(NB_SITES_QKV, 1, &rng);
    scale_invariance(NB_SITES_QKVC, 1, &rng);
    scale_invariance(NB_SITE_Q | NB_SITE_K | NB_SITE_C, 1, &rng);
    scale_invariance(NB_SITE_Q | NB_SITE_K, 0, &rng);
    scale_invariance(NB_SITE_K | NB_SITE_V, 0, &rng);
    scale_invariance(NB_SITE_K | NB_SITE_C, 0, &rng);
    scale_invariance(0, 0, &rng);
    gqa_equals_repeated_mha(&rng);
    rope_norm_commutation(&rng);
    modes_and_threads_agree(2, 2, 2, &rng);
    modes_and_threads_agree(1, 1, 3, &rng); /* MQA, one sequence: 3 parts */
    gate_and_head_stats(&rng);
    bad_configs();
    return nbt_finish();
}
