/* Blocks and stacks.
   float64 build: central finite differences of nb_stack_forward against nb_stack_backward for
   every preset (and options), on small shapes with non-unit gains, biases and GQA/RoPE.
   Both builds: the exact properties (classic Post-Norm = its flag form under the gain
   mapping; Mix-LN with n_post = 0 = Pre-Norm; HybridNorm* = HybridNorm but layer 0; SiameseNorm
   degenerate case; zeroed output projections), two stacks side by side, the tensor table, init
   statistics, diagnostics, skip, non-finite detection and bad configurations. */
#define NORMBLOCKS_IMPLEMENTATION
#include "normblocks.h"
#include "nbtest.h"

typedef struct run {
    nb_stack s;
    nb_real *params, *grads, *cache, *scratch, *in, *out, *dout, *din;
    nb_real *ve, *dve;            /* value embeddings: the bound rows and their gradients */
    size_t n_ve;
    int B, T;
    nb_ctx ctx;
} run;

static nb_stack_desc base_desc(nb_preset preset, int L) {
    nb_stack_desc d;
    memset(&d, 0, sizeof d);
    d.n_layers = L; d.d_model = 8; d.n_heads = 2; d.n_kv_heads = 1; d.ffn.d_ff = 12;
    d.preset = preset; d.attn.rope = 1;
    return d;
}

/* init with random weights and non-unit gains/biases (the gains matter: many placement
   mistakes are invisible at unit gain) */
static int setup(run* r, const nb_stack_desc* d, int B, int T, nbt_rng* rng, int threads) {
    const size_t n = (size_t)B * T * d->d_model * 2;
    int t;
    memset(r, 0, sizeof *r);
    r->ctx.num_threads = threads;
    if (nb_stack_init(&r->ctx, &r->s, d, B, T) != NB_OK) return 0;
    r->B = B; r->T = T;
    r->params = nbt_alloc(r->s.n_params); r->grads = nbt_alloc(r->s.n_params);
    r->cache = nbt_alloc(r->s.n_cache); r->scratch = nbt_alloc(r->s.n_scratch);
    r->in = nbt_alloc(n); r->out = nbt_alloc(n); r->dout = nbt_alloc(n); r->din = nbt_alloc(n);
    for (t = 0; t < r->s.n_tensors; t++) {
        const nb_tensor_info* ti = &r->s.tensors[t];
        const int gain = ti->kind == NB_TENSOR_GAIN || ti->kind == NB_TENSOR_SIAMESE_GAMMA ||
                         ti->kind == NB_TENSOR_ATTN_RES_GAIN;
        if (ti->kind == NB_TENSOR_DYT_ALPHA) nbt_fill(rng, r->params + ti->offset, 1, 0.8, 0.3);
        /* branch scales nonzero, and below 1 so that a stack without norms stays O(1) (the
           finite differences lose digits on large losses) */
        else if (ti->kind == NB_TENSOR_REZERO || ti->kind == NB_TENSOR_LAYERSCALE ||
                 ti->kind == NB_TENSOR_VALUE_RESIDUAL || ti->kind == NB_TENSOR_SKIP_WEIGHT ||
                 ti->kind == NB_TENSOR_X0_LAMBDAS || ti->kind == NB_TENSOR_VALUE_EMBED)
            /* lambdas apart: a swap would show */
            nbt_fill(rng, r->params + ti->offset, ti->count, 0.5, 0.2);
        else nbt_fill(rng, r->params + ti->offset, ti->count, gain ? 1 : 0, gain ? 0.3 : 0.4);
    }
    nbt_fill(rng, r->in, n / 2, 0, 1);
    nbt_fill(rng, r->dout, n / 2, 0, 1);
    if (d->residual.value_embeds) { /* the tables' rows of the call, as a trainer gathers them */
        r->n_ve = (size_t)d->residual.value_embeds * B * T * r->s.layers[0].attn.desc.n_kv_heads *
                  r->s.layers[0].attn.head_dim;
        r->ve = nbt_alloc(r->n_ve); r->dve = nbt_alloc(r->n_ve);
        nbt_fill(rng, r->ve, r->n_ve, 0, 1);
        if (nb_stack_set_value_embeds(&r->ctx, &r->s, r->ve, r->dve) != NB_OK) return 0;
    }
    return 1;
}

static void teardown(run* r) {
    nb_stack_free(&r->s);
    free(r->params); free(r->grads); free(r->cache); free(r->scratch); free(r->in); free(r->out);
    free(r->dout); free(r->din); free(r->ve); free(r->dve);
}

static double loss(run* r) {
    const size_t n = (size_t)r->B * r->T * r->s.desc.d_model;
    double s = 0;
    size_t i;
    if (nb_stack_forward(&r->ctx, &r->s, r->params, r->out, r->in, r->B, r->T, r->cache,
                         r->scratch) != NB_OK)
        return NAN;
    for (i = 0; i < n; i++) s += (double)r->out[i] * r->dout[i];
    return s;
}

static int grads(run* r) {
    memset(r->grads, 0, r->s.n_params * sizeof(nb_real));
    loss(r);
    return nb_stack_backward(&r->ctx, &r->s, r->params, r->grads, r->din, r->dout, r->B, r->T,
                             r->cache, r->scratch) == NB_OK;
}

#ifdef NB_DOUBLE
static void fd_case(const char* what, const nb_stack_desc* d, int B, int T, nbt_rng* rng) {
    run r;
    char name[256];
    const size_t n = (size_t)B * T * d->d_model;
    double* ref;
    size_t i;
    if (!nbt_check(setup(&r, d, B, T, rng, 1), what)) { printf("  %s\n", r.ctx.err); return; }
    snprintf(name, sizeof name, "%s: backward NB_OK", what);
    nbt_check(grads(&r), name);
    if (d->attn.softcap > 0) { /* the cap bends the logits: some beyond c, where tanh' < 0.42 */
        double mx[64], top = 0;
        int h;
        nb_stack_head_stats(&r.s, r.cache, B, T, mx, NULL);
        for (h = 0; h < d->n_heads * d->n_layers; h++) top = mx[h] > top ? mx[h] : top;
        snprintf(name, sizeof name, "%s: the largest logit %.3g is beyond the cap", what, top);
        nbt_check(top > d->attn.softcap, name);
    }
    ref = (double*)malloc((r.s.n_params + n + r.n_ve) * sizeof(double));
    for (i = 0; i < r.s.n_params + n + r.n_ve; i++) {
        /* central differences at h and h/2, extrapolated (Richardson): the h^2 truncation term
           cancels, so a draw with large third derivatives cannot fail a correct gradient; what
           is left, C h^4 against the rounding eps |loss| / h, is smallest near h ~ 1e-3, so
           h = 1e-4 (at 1e-5 rounding put a correct ReZero gradient 2.8e-8 off) */
        nb_real* v = i < r.s.n_params ? r.params + i : i < r.s.n_params + n ? r.in + (i - r.s.n_params)
                     : r.ve + (i - r.s.n_params - n);
        const nb_real keep = *v;
        double dh[2];
        int k;
        for (k = 0; k < 2; k++) {
            const double h = k ? 0.5e-4 : 1e-4;
            double lp, lm;
            *v = keep + h; lp = loss(&r);
            *v = keep - h; lm = loss(&r);
            dh[k] = (lp - lm) / (2 * h);
        }
        *v = keep;
        ref[i] = (4 * dh[1] - dh[0]) / 3;
    }
    snprintf(name, sizeof name, "%s: every parameter gradient vs finite differences", what);
    nbt_close(name, r.grads, ref, r.s.n_params, NBT_ATOL, NBT_RTOL);
    snprintf(name, sizeof name, "%s: input gradient vs finite differences", what);
    nbt_close(name, r.din, ref + r.s.n_params, n, NBT_ATOL, NBT_RTOL);
    if (r.n_ve) {
        snprintf(name, sizeof name, "%s: value embedding rows' gradient vs finite differences", what);
        nbt_close(name, r.dve, ref + r.s.n_params + n, r.n_ve, NBT_ATOL, NBT_RTOL);
    }
    free(ref);
    teardown(&r);
}

static void fd_all(nbt_rng* rng) {
    static const struct { const char* name; int L; } names[] = {
        {"pre", 2}, {"post", 2}, {"post_flags", 3}, {"sandwich", 2}, {"olmo2", 2},
        {"deepnorm", 2}, {"deepnorm_mixln", 1}, {"hybrid", 2}, {"hybrid_star", 2},
        {"first_qkv_pre", 2}, {"embednorm", 2}, {"QKVC-Post", 1}, {"QK-Pre", 1},
        {"Pre-KV-Post", 1}, {"Pre-KC-Pre", 1}, {"Pre-QKC-Post", 1}, {"Pre-Post", 1},
        {"Post-Pre", 2}, {"mixln", 3}, {"siamese", 2}, {"siamese_post_pre", 2}, {"gpt2", 2},
        {"lns", 3}, {"none", 2}, {"dyt", 2}, {"periln", 2}, {"rezero", 2}, {"layerscale", 2}};
    size_t i;
    for (i = 0; i < sizeof names / sizeof names[0]; i++) {
        nb_stack_desc d = base_desc(NB_PRESET_DEFAULT, names[i].L);
        nb_preset_from_name(NULL, &d, names[i].name);
        if (i % 2) d.n_kv_heads = 2; /* alternate MHA and GQA */
        if (i % 3 == 0) d.attn.memory = NB_ATTN_MEMORY_LSE;
        if (!strcmp(names[i].name, "mixln")) d.mixln_alpha = 0.34; /* one Post layer of 3 */
        fd_case(names[i].name, &d, 2, 3, rng);
    }
    {
        nb_stack_desc d = base_desc(NB_PRESET_SIAMESE, 2);
        d.siamese.paper_scale = 1; d.siamese.paper_fusion = 1;
        fd_case("siamese paper forms", &d, 2, 3, rng);
        d.siamese.paper_scale = 2; d.siamese.paper_fusion = 0;
        fd_case("siamese constant c ablation", &d, 2, 3, rng);
        d.siamese.paper_scale = 0; d.siamese.no_fusion_norm = 1;
        fd_case("siamese without the fusion norm", &d, 2, 3, rng);
        d = base_desc(NB_PRESET_PRE, 2);
        d.norm.type = NB_NORM_LAYER; d.attn.sites = NB_SITES_QKVC; d.ffn.type = NB_FFN_GELU_ERF; d.norm.final = -1;
        fd_case("pre LayerNorm QKVC GELU-erf no final norm", &d, 1, 4, rng);
        /* attention biases: Q|K|V only (Qwen2) under HybridNorm's site norms, output only */
        d = base_desc(NB_PRESET_HYBRID, 2);
        d.attn.bias = NB_ATTN_BIAS_QKV; d.n_kv_heads = 2;
        fd_case("hybrid with a Q|K|V bias", &d, 2, 3, rng);
        d = base_desc(NB_PRESET_POST, 2);
        d.attn.bias = NB_ATTN_BIAS_OUT;
        fd_case("post with an output-projection bias", &d, 2, 3, rng);
        /* DyT at every kind of site: Q/K/V/C (per head and full width), input, output and post
           norms, the embedding and final norms, and both SiameseNorm forms */
        d = base_desc(NB_PRESET_HYBRID, 2);
        d.norm.type = NB_NORM_DYT; d.attn.sites = NB_SITES_QKVC; d.norm.embed = 1;
        fd_case("DyT hybrid QKVC with embedding norm", &d, 2, 3, rng);
        d = base_desc(NB_PRESET_OLMO2, 2);
        d.norm.type = NB_NORM_DYT;
        fd_case("DyT olmo2 (full-width QK)", &d, 2, 3, rng);
        d = base_desc(NB_PRESET_MIXLN, 3);
        d.norm.type = NB_NORM_DYT; d.mixln_alpha = 0.34;
        fd_case("DyT mixln (post norms)", &d, 2, 3, rng);
        d = base_desc(NB_PRESET_SIAMESE, 2);
        d.norm.type = NB_NORM_DYT;
        fd_case("DyT siamese", &d, 2, 3, rng);
        d = base_desc(NB_PRESET_SIAMESE_POST_PRE, 2);
        d.norm.type = NB_NORM_DYT;
        fd_case("DyT siamese_post_pre", &d, 2, 3, rng);
    }
    {   /* a custom schedule nobody published: per-layer placements, sites and scales */
        nb_layer_desc ls[3];
        nb_stack_desc d = base_desc(NB_PRESET_DEFAULT, 3);
        memset(ls, 0, sizeof ls);
        ls[0].attn.output_norm = 1; ls[0].ffn.post_norm = 1; ls[0].ffn.residual_scale = 1.5f;
        ls[1].attn.input_norm = 1; ls[1].attn.residual_from_norm = 1; ls[1].sites = NB_SITE_V;
        ls[1].attn.residual_scale = 0.7f;
        ls[1].ffn.input_norm = 1; ls[1].ffn.output_norm = 1; ls[1].ffn.post_norm = 1;
        ls[2].sites = NB_SITE_Q | NB_SITE_C; ls[2].attn.residual_scale = 0.5f;
        d.layers = ls;
        fd_case("custom schedule", &d, 2, 3, rng);
        /* Pre-Norm sublayers with residual scales: alpha x + F(N(x)) */
        memset(ls, 0, sizeof ls);
        ls[0].attn.input_norm = 1; ls[0].attn.residual_scale = 0.6f;
        ls[0].ffn.input_norm = 1; ls[0].ffn.residual_scale = 1.3f;
        ls[1] = ls[0]; ls[1].attn.residual_scale = 1;
        d.n_layers = 2;
        fd_case("Pre-Norm with residual scales", &d, 2, 3, rng);
        /* input scales (LayerNorm Scaling's c N(x)) on each backward path: the direct Pre-Norm
           one, residual from the scaled norm, and with an output norm */
        memset(ls, 0, sizeof ls);
        ls[0].attn.input_norm = 1; ls[0].attn.input_scale = 0.6f;
        ls[0].ffn.input_norm = 1; ls[0].ffn.residual_from_norm = 1; ls[0].ffn.input_scale = 1.7f;
        ls[1].attn.input_norm = 1; ls[1].attn.output_norm = 1; ls[1].attn.input_scale = 0.8f;
        ls[1].ffn.input_norm = 1; ls[1].ffn.residual_scale = 1.2f; ls[1].ffn.input_scale = 0.5f;
        fd_case("input scales", &d, 2, 3, rng);
        /* branch scales with every neighbour: output and post norms, residual from the norm,
           a residual scale, ReZero in one sublayer only and shared by both */
        memset(ls, 0, sizeof ls);
        ls[0].attn.input_norm = 1; ls[0].attn.output_norm = 1;
        ls[0].attn.branch_scale = NB_BRANCH_SCALE_CHANNEL;
        ls[0].ffn.post_norm = 1; ls[0].ffn.branch_scale = NB_BRANCH_SCALE_SCALAR;
        ls[0].ffn.residual_scale = 1.3f;
        ls[1].attn.input_norm = 1; ls[1].attn.residual_from_norm = 1;
        ls[1].attn.branch_scale = NB_BRANCH_SCALE_SCALAR;
        ls[1].ffn.output_norm = 1; ls[1].ffn.post_norm = 1;
        ls[1].ffn.branch_scale = NB_BRANCH_SCALE_SCALAR;
        fd_case("branch scales", &d, 2, 3, rng);
    }
    {   /* value residual (ResFormer), fixed and learnable, 3 layers: layer 0's V projection
           rows get the shares of layers 1 and 2 (nb_stack_backward's dV_0 sum); with MHA and
           GQA, V site norms (V_0 after its norm), LSE memory, SiameseNorm's attention calls */
        static const struct { const char* preset; int mode, kv; unsigned sites; } vr[] = {
            {"pre", 1, 1, 0}, {"pre", 2, 1, 0}, {"pre", 2, 2, 0}, {"hybrid", 2, 1, 0},
            {"hybrid", 1, 2, 0}, {"post", 2, 2, NB_SITE_V | NB_SITE_C}, {"siamese", 2, 1, 0}};
        for (i = 0; i < sizeof vr / sizeof vr[0]; i++) {
            nb_stack_desc d = base_desc(NB_PRESET_DEFAULT, 3);
            char what[96];
            nb_preset_from_name(NULL, &d, vr[i].preset);
            d.residual.value_residual = vr[i].mode; d.n_kv_heads = vr[i].kv;
            if (vr[i].sites) d.attn.sites = vr[i].sites;
            if (i % 2) d.attn.memory = NB_ATTN_MEMORY_LSE;
            snprintf(what, sizeof what, "value residual %s %s kv=%d sites=0x%x", vr[i].preset,
                     vr[i].mode == 1 ? "fixed" : "learnable", vr[i].kv, vr[i].sites);
            fd_case(what, &d, 2, 3, rng);
        }
    }
    {   /* CompleteP's branch multiplier m = (L / L_base)^-alpha on every kind of branch: the
           plain Pre-Norm one, with output and post norms, ReZero's and LayerScale's scales,
           inside hyper-connections, and per layer in a custom schedule */
        static const struct { const char* preset; double alpha; int base; } cp[] = {
            {"pre", 1, 0}, {"sandwich", 0.5, 2}, {"post", 1, 1}, {"rezero", 1, 0},
            {"layerscale", 0.5, 0}, {"mhc", 1, 0}, {"gpt2", 1, 3}};
        nb_layer_desc ls[2];
        nb_stack_desc d;
        for (i = 0; i < sizeof cp / sizeof cp[0]; i++) {
            char what[96];
            d = base_desc(NB_PRESET_DEFAULT, 2);
            nb_preset_from_name(NULL, &d, cp[i].preset);
            d.residual.depth_alpha = cp[i].alpha; d.residual.depth_base = cp[i].base;
            snprintf(what, sizeof what, "CompleteP %s alpha %g base %d", cp[i].preset, cp[i].alpha,
                     cp[i].base);
            fd_case(what, &d, 2, 3, rng);
        }
        memset(ls, 0, sizeof ls);
        ls[0].attn.input_norm = 1; ls[0].attn.branch_mult = 0.3f;
        ls[0].ffn.output_norm = 1; ls[0].ffn.post_norm = 1; ls[0].ffn.branch_mult = 1.7f;
        ls[1].attn.branch_scale = NB_BRANCH_SCALE_CHANNEL; ls[1].attn.branch_mult = 0.6f;
        ls[1].ffn.input_norm = 1; ls[1].ffn.residual_from_norm = 1; ls[1].ffn.branch_mult = 2.5f;
        d = base_desc(NB_PRESET_DEFAULT, 2);
        d.layers = ls;
        fd_case("branch multipliers in a custom schedule", &d, 2, 3, rng);
    }
    {   /* hyper-connections: the three maps (mHC's Sinkhorn backward through every iteration,
           HC's per-stream norm and tanh, identity), dynamic and static, 1 to 4 streams, on
           every placement they take (input, output and embedding norms, branch scales, input
           scales, no final norm) and with the value residual */
        static const struct {
            const char* preset; nb_hyper hyper; int streams, stat, iters;
            nb_norm_type norm; int vres;
        } hy[] = {
            {"mhc", 0, 0, 0, 0, 0, 0}, {"mhc", 0, 0, 1, 0, 0, 0}, {"mhc", 0, 2, 0, 3, 0, 0},
            {"hc", 0, 0, 0, 0, 0, 0}, {"hc", 0, 3, 0, 0, NB_NORM_LAYER, 0},
            {"hc", 0, 0, 1, 0, 0, 0}, {"hc", 0, 2, 0, 0, NB_NORM_DYT, 0},
            {"ihc", 0, 0, 0, 0, 0, 0}, {"ihc", 0, 3, 1, 0, 0, 0}, {"mhc", 0, 1, 0, 2, 0, 0},
            {"sandwich", NB_HYPER_MHC, 0, 0, 0, 0, 0}, {"periln", NB_HYPER_HC, 2, 0, 0, 0, 0},
            {"dyt", NB_HYPER_MHC, 3, 0, 0, 0, 0}, {"layerscale", NB_HYPER_IDENTITY, 0, 0, 0, 0, 0},
            {"rezero", NB_HYPER_MHC, 2, 0, 0, 0, 0}, {"lns", NB_HYPER_HC, 0, 0, 0, 0, 0},
            {"mhc", 0, 0, 0, 0, 0, 2},
            /* mHC-lite: n! = 24 logits > n^2 (the gradients' wider rows), 6 < 9, 2, static */
            {"pre", NB_HYPER_MHC_LITE, 0, 0, 0, 0, 0}, {"mhc", NB_HYPER_MHC_LITE, 3, 0, 0, 0, 0},
            {"sandwich", NB_HYPER_MHC_LITE, 2, 0, 0, NB_NORM_LAYER, 0},
            {"pre", NB_HYPER_MHC_LITE, 3, 1, 0, 0, 2}};
        for (i = 0; i < sizeof hy / sizeof hy[0]; i++) {
            nb_stack_desc d = base_desc(NB_PRESET_DEFAULT, 2);
            char what[128];
            nb_preset_from_name(NULL, &d, hy[i].preset);
            d.hyper.kind = hy[i].hyper; d.hyper.streams = hy[i].streams;
            d.hyper.static_maps = hy[i].stat; d.hyper.sinkhorn = hy[i].iters;
            if (hy[i].norm) d.norm.type = hy[i].norm;
            if (hy[i].vres) { d.residual.value_residual = hy[i].vres; d.n_kv_heads = 2; d.n_layers = 3; }
            /* ReZero has no final norm: its n streams' sum reaches a loss of 100, where the
               differences' rounding (|loss| 1e-16 / h) passes atol; the final norm keeps it O(1) */
            if (!strcmp(hy[i].preset, "rezero")) d.norm.final = 1;
            if (i % 2) d.attn.memory = NB_ATTN_MEMORY_LSE;
            snprintf(what, sizeof what, "hyper-connections %s hyper=%d n=%d static=%d iters=%d "
                     "norm=%d vres=%d", hy[i].preset, (int)hy[i].hyper, hy[i].streams,
                     hy[i].stat, hy[i].iters, (int)hy[i].norm, hy[i].vres);
            fd_case(what, &d, 2, 3, rng);
        }
    }
    {   /* nGPT: the preset (L2 residual, output and post norms, the eigen learning rates with
           signs on both sides of 0, L2 Q, K with s_qk after RoPE, softmax scale sqrt(d_k),
           s_uv), its parts alone on other placements, and the L2 norm as any stack's norm */
        nb_layer_desc ls[2];
        nb_stack_desc d = base_desc(NB_PRESET_NGPT, 2);
        d.n_kv_heads = 2;
        fd_case("ngpt", &d, 2, 3, rng);
        d.ffn.d_ff = 0; d.attn.memory = NB_ATTN_MEMORY_LSE; d.residual.interp_init = 0.3; d.attn.rope = 0;
        fd_case("ngpt 4d SwiGLU, LSE memory, interp_init 0.3, no RoPE", &d, 2, 3, rng);
        d = base_desc(NB_PRESET_NGPT, 2);
        d.n_kv_heads = 2; d.norm.type = NB_NORM_RMS;
        fd_case("ngpt with RMSNorm", &d, 2, 3, rng);
        memset(ls, 0, sizeof ls);
        ls[0].attn.residual_norm = 1; ls[0].attn.input_norm = 1;
        ls[0].ffn.branch_scale = NB_BRANCH_SCALE_INTERP;
        ls[1].attn.branch_scale = NB_BRANCH_SCALE_INTERP; ls[1].attn.residual_norm = 1;
        ls[1].attn.input_norm = 1;
        ls[1].ffn.residual_norm = 1; ls[1].ffn.post_norm = 1; ls[1].ffn.residual_scale = 1.5f;
        d = base_desc(NB_PRESET_DEFAULT, 2);
        d.layers = ls; d.norm.type = NB_NORM_LAYER;
        fd_case("residual norms and INTERP in a custom LayerNorm schedule", &d, 2, 3, rng);
        d = base_desc(NB_PRESET_PRE, 2);
        d.n_kv_heads = 2; d.attn.qk_scale = 1; d.attn.softmax_scale = 0.7f; d.ffn.in_scale = 1;
        fd_case("pre with qk_scale, softmax_scale 0.7, ffn_in_scale", &d, 2, 3, rng);
        d = base_desc(NB_PRESET_DEFAULT, 2);
        nb_preset_from_name(NULL, &d, "gpt2");
        d.ffn.in_scale = 1; d.attn.qk_scale = -1;
        fd_case("gpt2 with ffn_in_scale (GELU and biases)", &d, 2, 3, rng);
        d = base_desc(NB_PRESET_SANDWICH, 2);
        d.norm.type = NB_NORM_L2; d.attn.sites = NB_SITES_QKVC;
        fd_case("sandwich with L2 norms and QKVC sites", &d, 2, 3, rng);
        d = base_desc(NB_PRESET_OLMO2, 2);
        d.norm.type = NB_NORM_L2;
        fd_case("olmo2 with L2 norms (full-width sites)", &d, 2, 3, rng);
    }
    {   /* gated attention: per head and per element, on GQA, with the C site (the gate after
           its norm), Q|K|V|G biases, LSE memory, the value residual, BF16's cache layout aside */
        nb_stack_desc d = base_desc(NB_PRESET_PRE, 2);
        d.n_kv_heads = 2; d.attn.gate = NB_GATE_HEADWISE;
        fd_case("pre, headwise gate, GQA", &d, 2, 3, rng);
        d.attn.gate = NB_GATE_ELEMENTWISE; d.attn.memory = NB_ATTN_MEMORY_LSE;
        fd_case("pre, elementwise gate, GQA, LSE memory", &d, 2, 3, rng);
        d = base_desc(NB_PRESET_HYBRID, 2);
        d.attn.sites = NB_SITES_QKVC; d.attn.gate = NB_GATE_HEADWISE; d.attn.bias = NB_ATTN_BIAS_QKV;
        fd_case("hybrid QKVC sites, headwise gate, Q|K|V|G bias", &d, 2, 3, rng);
        d = base_desc(NB_PRESET_SANDWICH, 2);
        d.attn.sites = NB_SITE_C | NB_SITE_V; d.attn.gate = NB_GATE_ELEMENTWISE;
        d.residual.value_residual = 2; d.norm.type = NB_NORM_LAYER;
        fd_case("sandwich LayerNorm VC sites, elementwise gate, value residual", &d, 2, 3, rng);
    }
    {   /* attention sinks: learned (a tensor per layer) and off-by-one, on GQA, LSE memory, with
           QK sites, the value residual, SiameseNorm's two streams and hyper-connections */
        nb_stack_desc d = base_desc(NB_PRESET_PRE, 2);
        d.n_kv_heads = 2; d.attn.sink = NB_SINK_LEARNED;
        fd_case("pre, learned sinks, GQA", &d, 2, 3, rng);
        d.attn.memory = NB_ATTN_MEMORY_LSE; d.attn.sink = NB_SINK_OFF_BY_ONE;
        fd_case("pre, off-by-one softmax, GQA, LSE memory", &d, 2, 3, rng);
        d = base_desc(NB_PRESET_HYBRID, 2);
        d.attn.sink = NB_SINK_LEARNED; d.residual.value_residual = 2;
        fd_case("hybrid QKV sites, learned sinks, value residual", &d, 2, 3, rng);
        d = base_desc(NB_PRESET_SIAMESE, 2);
        d.attn.sink = NB_SINK_LEARNED;
        fd_case("siamese, learned sinks", &d, 2, 3, rng);
        d = base_desc(NB_PRESET_MHC, 1);
        d.attn.sink = NB_SINK_LEARNED;
        fd_case("mhc, learned sinks", &d, 2, 3, rng);
    }
    {   /* OLMo's clip_qkv: before OLMo-2's full-width QK norms, and alone on GQA with sinks */
        nb_stack_desc d = base_desc(NB_PRESET_OLMO2, 2);
        d.attn.clip_qkv = 0.5f;
        fd_case("olmo2 with clip_qkv 0.5", &d, 2, 3, rng);
        d = base_desc(NB_PRESET_PRE, 2);
        d.n_kv_heads = 2; d.attn.clip_qkv = 0.4f; d.attn.sink = NB_SINK_LEARNED;
        fd_case("pre with clip_qkv 0.4, learned sinks, GQA", &d, 2, 3, rng);
    }
    {   /* DenseFormer's depth-weighted average: dilation 1 and 2, on Pre-Norm (GQA, LSE), Post-LN,
           with an embedding norm (x_0 = h_0 after it), the value residual, QK-Clip's sites */
        nb_stack_desc d = base_desc(NB_PRESET_PRE, 3);
        d.residual.dwa = 1; d.n_kv_heads = 2; d.attn.memory = NB_ATTN_MEMORY_LSE;
        fd_case("pre, DenseFormer DWA, GQA, LSE", &d, 2, 3, rng);
        d = base_desc(NB_PRESET_POST, 3);
        d.residual.dwa = 1; d.residual.dwa_dilation = 2;
        fd_case("post, DenseFormer DWA dilation 2", &d, 2, 3, rng);
        d = base_desc(NB_PRESET_PERILN, 2);
        d.residual.dwa = 1; d.residual.value_residual = 2;
        fd_case("periln (embedding norm), DWA, learnable value residual", &d, 2, 3, rng);
        d = base_desc(NB_PRESET_HYBRID, 1);
        d.residual.dwa = 1;
        fd_case("hybrid, one layer, DWA", &d, 2, 3, rng);
        /* the package's period: layers 1 and 3 average (dilation 2), 0 and 2 pass theirs on;
           period 3 on 4 layers: only layer 2 averages, the last passes its output on */
        d = base_desc(NB_PRESET_PRE, 4);
        d.residual.dwa = 1; d.residual.dwa_dilation = 2; d.residual.dwa_period = 2;
        fd_case("pre, DWA dilation 2, period 2", &d, 2, 3, rng);
        d = base_desc(NB_PRESET_POST, 4);
        d.residual.dwa = 1; d.residual.dwa_period = 3; d.n_kv_heads = 2;
        fd_case("post, DWA period 3 (4 layers), GQA", &d, 2, 3, rng);
    }
    {   /* Attention Residuals: Full (S = 1), blocks of one layer (2), of three sublayers (a
           block ends between attention and FFN), one block (2L); with GQA and LSE memory,
           Peri-LN's embedding and output norms, the learnable value residual, LayerScale and
           DyT norms (whose readers still take RMSNorm keys) */
        nb_stack_desc d = base_desc(NB_PRESET_PRE, 3);
        d.residual.attn_res = 1; d.n_kv_heads = 2; d.attn.memory = NB_ATTN_MEMORY_LSE;
        fd_case("pre, Full AttnRes, GQA, LSE", &d, 2, 3, rng);
        d = base_desc(NB_PRESET_PRE, 3);
        d.residual.attn_res = 1; d.residual.attn_res_block = 2;
        fd_case("pre, Block AttnRes S=2", &d, 2, 3, rng);
        d = base_desc(NB_PRESET_PERILN, 3);
        d.residual.attn_res = 1; d.residual.attn_res_block = 3; d.residual.value_residual = 2;
        fd_case("periln (embedding norm), Block AttnRes S=3, learnable value residual", &d, 2, 3,
                rng);
        d = base_desc(NB_PRESET_PRE, 2);
        d.residual.attn_res = 1; d.residual.attn_res_block = 4;
        d.residual.branch_scale = NB_BRANCH_SCALE_CHANNEL; d.norm.type = NB_NORM_DYT;
        fd_case("pre DyT, LayerScale, AttnRes one block (S=2L)", &d, 2, 3, rng);
    }
    {   /* modded-nanogpt's U-Net skips and x_0 re-injection: both on Pre-Norm (GQA, LSE), the
           skips alone on Post-LN, the re-injection alone on Peri-LN (its embedding norm before
           x_0, the learnable value residual), both on a 2-layer sandwich */
        nb_stack_desc d = base_desc(NB_PRESET_PRE, 4);
        d.residual.unet_skips = 1; d.residual.reinject_x0 = 1; d.n_kv_heads = 2;
        d.attn.memory = NB_ATTN_MEMORY_LSE;
        fd_case("pre, U-Net skips and x_0 re-injection, GQA, LSE", &d, 2, 3, rng);
        d = base_desc(NB_PRESET_POST, 4);
        d.residual.unet_skips = 1;
        fd_case("post, U-Net skips", &d, 2, 3, rng);
        d = base_desc(NB_PRESET_PERILN, 3);
        d.residual.reinject_x0 = 1; d.residual.value_residual = 2;
        fd_case("periln (embedding norm), x_0 re-injection, learnable value residual", &d, 2, 3,
                rng);
        d = base_desc(NB_PRESET_SANDWICH, 2);
        d.residual.unet_skips = 1; d.residual.reinject_x0 = 1;
        fd_case("sandwich, 2 layers, U-Net skip and re-injection", &d, 2, 3, rng);
    }
    {   /* modded-nanogpt's value embeddings: 2 tables on 5 layers (layers 0, 1 and 3, 4 mix
           them, layer 2 only lambda_0 V; each table's rows get two layers' shares) with GQA and
           LSE memory; 1 table on a 2-layer HybridNorm (V site norms before the mix), MHA; 2
           tables on 4 layers of Post-LN with learned sinks */
        nb_stack_desc d = base_desc(NB_PRESET_PRE, 5);
        d.residual.value_embeds = 2; d.n_kv_heads = 2; d.attn.memory = NB_ATTN_MEMORY_LSE;
        fd_case("pre, value embeddings (2 tables, 5 layers), GQA, LSE", &d, 2, 3, rng);
        d = base_desc(NB_PRESET_HYBRID, 2);
        d.residual.value_embeds = 1; d.n_kv_heads = 2;
        fd_case("hybrid (V norms), value embeddings (1 table)", &d, 2, 3, rng);
        d = base_desc(NB_PRESET_POST, 4);
        d.residual.value_embeds = 2; d.attn.sink = NB_SINK_LEARNED;
        fd_case("post, value embeddings (2 tables, 4 layers), learned sinks", &d, 2, 3, rng);
    }
    {   /* Gemma 2's softcap: on Gemma's sandwich with GQA, in LSE memory with learned sinks on
           HybridNorm's QKV sites, and under mHC */
        nb_stack_desc d = base_desc(NB_PRESET_SANDWICH, 2);
        d.n_kv_heads = 2; d.attn.softcap = 0.02f;
        fd_case("sandwich, softcap, GQA", &d, 2, 3, rng);
        d = base_desc(NB_PRESET_HYBRID, 2);
        d.attn.softcap = 0.02f; d.attn.memory = NB_ATTN_MEMORY_LSE; d.attn.sink = NB_SINK_LEARNED;
        fd_case("hybrid, softcap, LSE memory, learned sinks", &d, 2, 3, rng);
        d = base_desc(NB_PRESET_MHC, 1);
        d.attn.softcap = 0.02f;
        fd_case("mhc, softcap", &d, 2, 3, rng);
    }
    {   /* Derf at every block norm and attention site, and the porting options: Gemma's unit
           offset (block and site gains), no weight, no bias, SkipInit's per-sublayer scalars */
        nb_stack_desc d = base_desc(NB_PRESET_PRE, 2);
        d.norm.type = NB_NORM_DERF; d.attn.sites = NB_SITES_QKVC; d.n_kv_heads = 2;
        fd_case("pre Derf, QKVC sites", &d, 2, 3, rng);
        d = base_desc(NB_PRESET_HYBRID_STAR, 2);
        d.norm.type = NB_NORM_DERF; d.norm.bias = -1; d.norm.embed = 1;
        fd_case("hybrid_star Derf without bias, embedding norm", &d, 2, 3, rng);
        d = base_desc(NB_PRESET_SANDWICH, 2);
        d.norm.gain_offset = 1; d.attn.sites = NB_SITE_Q | NB_SITE_K; d.norm.embed = 1;
        fd_case("sandwich with unit-offset gains (Gemma), QK sites, embedding norm", &d, 2, 3, rng);
        d = base_desc(NB_PRESET_PRE, 2);
        d.norm.gain = -1;
        fd_case("pre RMSNorm without weights", &d, 2, 3, rng);
        d = base_desc(NB_PRESET_DYT, 2);
        d.norm.bias = -1; d.norm.gain_offset = 1;
        fd_case("dyt without bias (DyT's LLaMA), unit-offset gains", &d, 2, 3, rng);
        d = base_desc(NB_PRESET_REZERO, 2);
        d.residual.branch_scale = NB_BRANCH_SCALE_SUBLAYER;
        fd_case("rezero with one scalar per sublayer (SkipInit)", &d, 2, 3, rng);
        d = base_desc(NB_PRESET_MHC, 1);
        d.norm.gain_offset = 1; d.norm.type = NB_NORM_DERF; d.norm.embed_scale = 1;
        fd_case("mhc with Derf, unit-offset gains, embed_scale", &d, 2, 3, rng);
        d = base_desc(NB_PRESET_PRE, 2);
        d.norm.type = NB_NORM_DERF; d.norm.embed_scale = 1;
        fd_case("pre Derf with embed_scale (Derf's LM code)", &d, 2, 3, rng);
        d = base_desc(NB_PRESET_EMBEDNORM, 2);
        d.norm.embed_scale = 1; d.run.param_grads = NB_GRAD_OVERWRITE; d.run.input_grad = NB_GRAD_ACCUMULATE;
        fd_case("embednorm with embed_scale, overwritten grads, accumulated din", &d, 2, 3, rng);
        d = base_desc(NB_PRESET_SIAMESE, 2);
        d.norm.embed_scale = 1;
        fd_case("siamese with embed_scale", &d, 2, 3, rng);
    }
}
#endif

/* QK-Clip: after the clip, the heads over tau have their largest logit at tau, the others
   keep theirs (GQA: the K head shared, the logits scaled per Q head); a layer whose logits do
   not follow W_q, W_k is refused with nothing written; the stack's head stats are the layers'
   attention stats. */
static void qk_clip(nbt_rng* rng) {
    static const int kv[2] = {4, 2};
    int c;
    for (c = 0; c < 2; c++) {
        nb_stack_desc d = base_desc(NB_PRESET_PRE, 2);
        run r;
        double mx[8], fm[8], after[8], fm1[8], sm[8], tau = 0;
        nb_real* keep;
        int h, n = -1;
        d.d_model = 16; d.n_heads = 4; d.n_kv_heads = kv[c]; d.attn.bias = NB_ATTN_BIAS_QKV;
        d.attn.gate = c ? NB_GATE_HEADWISE : NB_GATE_NONE;
        d.attn.sink = c ? NB_SINK_LEARNED : NB_SINK_NONE; /* the sink is no logit of QK-Clip's */
        if (!nbt_check(setup(&r, &d, 2, 9, rng, 1), "qk_clip setup")) continue;
        nbt_check(nb_stack_head_stats(&r.s, r.cache, 2, 9, mx, fm) == NB_ERR_CONFIG,
                  "head stats: a cache without a forward is refused");
        loss(&r);
        nbt_check(nb_stack_head_stats(&r.s, r.cache, 2, 9, mx, fm) == NB_OK, "stack head stats");
        for (h = 0; h < 2; h++) { /* layer 1's entries are its attention's */
            double amx[4], afm[4];
            nb__layer_mem lm;
            size_t used = r.s.layers[1].cache_offset;
            nb__carve_layer(&r.s, 1, r.cache, &used, &lm);
            nb_attn_head_stats(&r.s.layers[1].attn, lm.acache, 2, 9, amx, afm);
            nbt_check(amx[h] == mx[4 + h] && afm[h] == fm[4 + h], "stack head stats = layer's");
            nb_attn_sink_mass(&r.s.layers[1].attn, lm.acache, 2, 9, amx);
            nbt_check(nb_stack_sink_mass(&r.s, r.cache, 2, 9, sm) == NB_OK && amx[h] == sm[4 + h] &&
                          (c ? amx[h] > 0 && amx[h] < 1 : amx[h] == 0),
                      "stack sink mass = layer's (0 without sinks)");
        }
        for (h = 0; h < 4; h++) tau += mx[h] / 4;  /* about half of layer 0's heads above */
        keep = nbt_alloc(r.s.n_params);
        memcpy(keep, r.params, r.s.n_params * sizeof(nb_real));
        nbt_check(nb_stack_qk_clip(&r.ctx, &r.s, r.params, mx, tau, &n) == NB_OK && n > 0,
                  "qk_clip: some heads clipped");
        loss(&r);
        nb_stack_head_stats(&r.s, r.cache, 2, 9, after, fm1);
        for (h = 0; h < 4; h++) { /* layer 0: layer 1's input changed with layer 0's clip */
            const double want = mx[h] > tau ? tau : mx[h];
            char name[96];
            snprintf(name, sizeof name, "qk_clip (H_kv %d): head %d max logit %g -> %g (tau %g)",
                     kv[c], h, mx[h], after[h], tau);
            nbt_check(fabs(after[h] - want) <= 1e-5 * fabs(want) + 1e-6, name);
        }
        memcpy(r.params, keep, r.s.n_params * sizeof(nb_real));
        mx[3] = NAN;
        nbt_check(nb_stack_qk_clip(&r.ctx, &r.s, r.params, mx, tau, NULL) == NB_ERR_VALUE &&
                  !memcmp(keep, r.params, r.s.n_params * sizeof(nb_real)),
                  "qk_clip: a NaN max logit refused, nothing written");
        mx[3] = INFINITY;
        nbt_check(nb_stack_qk_clip(&r.ctx, &r.s, r.params, mx, tau, NULL) == NB_ERR_VALUE &&
                  !memcmp(keep, r.params, r.s.n_params * sizeof(nb_real)),
                  "qk_clip: an infinite max logit refused, nothing written");
        mx[3] = 0;
        nbt_check(nb_stack_qk_clip(&r.ctx, &r.s, r.params, mx, 0, NULL) == NB_ERR_VALUE &&
                  nb_stack_qk_clip(&r.ctx, &r.s, r.params, mx, INFINITY, NULL) == NB_ERR_VALUE &&
                  nb_stack_qk_clip(&r.ctx, &r.s, NULL, mx, 1, NULL) == NB_ERR_NULL &&
                  nb_stack_qk_clip(&r.ctx, &r.s, r.params, NULL, 1, NULL) == NB_ERR_NULL,
                  "qk_clip: tau 0 or infinite, NULL params or max_logit refused");
        free(keep);
        teardown(&r);
    }
    {
        nb_stack_desc d = base_desc(NB_PRESET_HYBRID, 2); /* QKV sites: the logits do not follow */
        double mx[4] = {100, 100, 100, 100};
        run r;
        if (nbt_check(setup(&r, &d, 1, 3, rng, 1), "qk_clip setup (hybrid)")) {
            nb_real* keep = nbt_alloc(r.s.n_params);
            memcpy(keep, r.params, r.s.n_params * sizeof(nb_real));
            nbt_check(nb_stack_qk_clip(&r.ctx, &r.s, r.params, mx, 1, NULL) == NB_ERR_CONFIG &&
                      strstr(r.ctx.err, "Q or K norm site") &&
                      !memcmp(keep, r.params, r.s.n_params * sizeof(nb_real)),
                      "qk_clip: refused with Q/K norm sites, naming why, nothing written");
            free(keep);
            teardown(&r);
        }
    }
}

/* out of two stacks must agree */
static void same_out(const char* name, run* a, run* b) {
    nbt_close_r(name, a->out, b->out, (size_t)a->B * a->T * a->s.desc.d_model, NBT_ATOL, NBT_RTOL);
}

static nb_real* tensor(run* r, const char* name) {
    int t;
    for (t = 0; t < r->s.n_tensors; t++)
        if (!strcmp(r->s.tensors[t].name, name)) return r->params + r->s.tensors[t].offset;
    return NULL;
}

/* Stack b is stack a with the porting option of b_desc: every tensor of b is a's of that name
   transformed by `map` (NULL: copied); a tensor of a missing from b must hold `absent` (the
   value the option fixes). Outputs, the input gradient and b's gradients (a's of the same
   name) must agree bitwise: the option changes how the function is stored, not the function. */
static void same_function(const char* what, const nb_stack_desc* ad, const nb_stack_desc* bd,
                          double map_add, nb_tensor_kind map_kind, double absent, nbt_rng* rng) {
    run a, b;
    const size_t n = (size_t)2 * 5 * ad->d_model;
    int t, ok = 1;
    char name[160];
    if (!nbt_check(setup(&a, ad, 2, 5, rng, 2) && setup(&b, bd, 2, 5, rng, 2), what)) return;
    memcpy(b.in, a.in, n * sizeof(nb_real));
    memcpy(b.dout, a.dout, n * sizeof(nb_real));
    for (t = 0; t < a.s.n_tensors; t++) {
        const nb_tensor_info* ti = &a.s.tensors[t];
        nb_real* bp = tensor(&b, ti->name);
        size_t i;
        for (i = 0; i < ti->count; i++) {
            if (!bp) a.params[ti->offset + i] = (nb_real)absent;
            else bp[i] = a.params[ti->offset + i] + (ti->kind == map_kind ? (nb_real)map_add : 0);
        }
    }
    grads(&a);
    grads(&b);
    for (t = 0; t < b.s.n_tensors && ok; t++) {
        const nb_tensor_info* ti = &b.s.tensors[t];
        int ta;
        for (ta = 0; ta < a.s.n_tensors; ta++)
            if (!strcmp(a.s.tensors[ta].name, ti->name))
                ok = !memcmp(a.grads + a.s.tensors[ta].offset, b.grads + ti->offset,
                             ti->count * sizeof(nb_real));
    }
    snprintf(name, sizeof name, "%s: the same outputs, input gradient and gradients", what);
    nbt_check(ok && !memcmp(a.out, b.out, n * sizeof(nb_real)) &&
              !memcmp(a.din, b.din, n * sizeof(nb_real)), name);
    teardown(&a);
    teardown(&b);
}

/* Gemma's unit offset, no weights, no biases, SkipInit's scalars: each against the plain
   stack holding what it means; their init and refusals */
static void porting_options(nbt_rng* rng) {
    nb_stack_desc a = base_desc(NB_PRESET_SANDWICH, 2), b;
    run r;
    int t;
    a.attn.sites = NB_SITE_Q | NB_SITE_K; a.norm.embed = 1; a.n_kv_heads = 2;
    b = a; b.norm.gain_offset = 1;   /* b stores w, a stores 1 + w */
    same_function("unit-offset gains = gains + 1", &b, &a, 1, NB_TENSOR_GAIN, 0, rng);
    b = a; b.norm.gain = -1;     /* b has no weights: a's are 1 */
    same_function("RMSNorm without weights = weights 1", &a, &b, 0, NB_TENSOR_GAIN, 1, rng);
    a = base_desc(NB_PRESET_DYT, 2);
    b = a; b.norm.bias = -1;     /* b has no biases: a's are 0 */
    same_function("DyT without bias = bias 0", &a, &b, 0, NB_TENSOR_BIAS, 0, rng);
    a.norm.type = NB_NORM_DERF;
    b = a; b.norm.bias = -1;
    same_function("Derf without bias = bias 0", &a, &b, 0, NB_TENSOR_BIAS, 0, rng);
    /* init: unit-offset gains 0; Derf alpha 1 (its LM code), shift 0; SkipInit's scalars 0 */
    a = base_desc(NB_PRESET_PRE, 2);
    a.norm.gain_offset = 1; a.norm.type = NB_NORM_DERF; a.residual.branch_scale = NB_BRANCH_SCALE_SUBLAYER;
    a.norm.embed_scale = 1;
    if (nbt_check(setup(&r, &a, 1, 3, rng, 1), "porting options: init")) {
        int gains = 0, scalars = 0, ok = 1;
        nb_stack_init_params(NULL, &r.s, r.params, NB_INIT_NORMAL, 0, 1);
        for (t = 0; t < r.s.n_tensors; t++) {
            const nb_tensor_info* ti = &r.s.tensors[t];
            const nb_real* x = r.params + ti->offset;
            size_t i;
            if (ti->kind == NB_TENSOR_GAIN)
                for (i = 0, gains++; i < ti->count; i++) ok &= x[i] == 0;
            if (ti->kind == NB_TENSOR_DYT_ALPHA)
                ok &= ti->count == 2 && x[0] == 1 && x[1] == 0 &&
                      strstr(ti->name, ".alpha_shift") != NULL;
            if (ti->kind == NB_TENSOR_EMBED_SCALE)
                ok &= t == 0 && !strcmp(ti->name, "embed_scale") && x[0] == (nb_real)sqrt(8.0) &&
                      ti->no_decay;
            if (ti->kind == NB_TENSOR_REZERO) {
                scalars++;
                ok &= x[0] == 0 && (strstr(ti->name, "attn_resweight") ||
                                    strstr(ti->name, "ff_resweight"));
            }
        }
        nbt_check(ok && gains == 5 && scalars == 4, "porting options: unit-offset gains 0, "
                  "Derf alpha 1 shift 0, one resweight per sublayer at 0, embed_scale sqrt(d)");
        teardown(&r);
    }
    {   /* refusals, each naming its field */
        static const struct { const char* what; int field, value; nb_norm_type norm;
                              nb_preset preset; const char* says; } bad[] = {
            {"norm.bias -1 with RMSNorm", 0, -1, NB_NORM_RMS, NB_PRESET_PRE, "norm.bias"},
            {"norm.gain -1 with L2", 1, -1, NB_NORM_L2, NB_PRESET_PRE, "norm.gain"},
            {"norm.gain_offset with L2 (no gains)", 2, 1, NB_NORM_L2, NB_PRESET_PRE, "norm.gain_offset"},
            {"norm.gain_offset 2", 2, 2, NB_NORM_RMS, NB_PRESET_PRE, "norm.gain_offset"},
            {"norm.bias 1", 0, 1, NB_NORM_LAYER, NB_PRESET_PRE, "norm.bias"},
            {"residual.branch_scale on SiameseNorm", 3, 1, NB_NORM_RMS, NB_PRESET_SIAMESE, "branch_scale"},
            {"residual.branch_scale 9", 3, 9, NB_NORM_RMS, NB_PRESET_PRE, "branch_scale"}};
        size_t i;
        for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
            nb_stack_desc d = base_desc(bad[i].preset, 2);
            nb_stack s;
            nb_ctx ctx;
            memset(&ctx, 0, sizeof ctx);
            d.norm.type = bad[i].norm;
            if (bad[i].field == 0) d.norm.bias = bad[i].value;
            if (bad[i].field == 1) d.norm.gain = bad[i].value;
            if (bad[i].field == 2) d.norm.gain_offset = bad[i].value;
            if (bad[i].field == 3) d.residual.branch_scale = (nb_branch_scale)bad[i].value;
            nbt_check(nb_stack_init(&ctx, &s, &d, 1, 3) == NB_ERR_CONFIG &&
                      strstr(ctx.err, bad[i].says) != NULL, bad[i].what);
        }
    }
}

/* Classic Post-Norm without a final norm (N_2 of the last layer is the end) equals the
   HybridNorm-flag form: attn_norm(l+1) plays N_2(l), ff_norm(l) plays N_1(l), ln_f plays the
   last N_2. */
static void post_equivalence(nbt_rng* rng) {
    nb_stack_desc dc = base_desc(NB_PRESET_POST, 3), df = base_desc(NB_PRESET_POST_FLAGS, 3);
    run c, f;
    char name[64];
    int l, t;
    dc.norm.final = -1;
    setup(&c, &dc, 2, 5, rng, 2);
    setup(&f, &df, 2, 5, rng, 2);
    memcpy(f.in, c.in, (size_t)2 * 5 * 8 * sizeof(nb_real));
    for (t = 0; t < f.s.n_tensors; t++) { /* the weights: same names in both */
        const nb_tensor_info* ti = &f.s.tensors[t];
        if (ti->kind != NB_TENSOR_GAIN) memcpy(f.params + ti->offset, tensor(&c, ti->name),
                                               ti->count * sizeof(nb_real));
    }
    for (l = 0; l < 3; l++) {
        char a[64], b[64];
        snprintf(a, sizeof a, "blocks.%d.ff_norm.weight", l);
        snprintf(b, sizeof b, "blocks.%d.attn_post_norm.weight", l);
        memcpy(tensor(&f, a), tensor(&c, b), 8 * sizeof(nb_real));
        snprintf(b, sizeof b, "blocks.%d.ff_post_norm.weight", l);
        if (l < 2) snprintf(a, sizeof a, "blocks.%d.attn_norm.weight", l + 1);
        else snprintf(a, sizeof a, "ln_f.weight");
        memcpy(tensor(&f, a), tensor(&c, b), 8 * sizeof(nb_real));
    }
    loss(&c);
    loss(&f);
    snprintf(name, sizeof name, "classic Post-Norm = HybridNorm-flag Post-Norm (gain mapping)");
    same_out(name, &c, &f);
    teardown(&c);
    teardown(&f);
}

/* Mix-LN with floor(alpha L) = 0 is Pre-Norm; with alpha = 1 it is Post-Norm (same eps). */
static void mixln_limits(nbt_rng* rng) {
    nb_stack_desc dm = base_desc(NB_PRESET_MIXLN, 3), dp = base_desc(NB_PRESET_PRE, 3);
    run m, p;
    nbt_rng keep = *rng;
    dm.mixln_alpha = 0.2; /* floor(0.6) = 0 */
    dp.norm.eps = (nb_real)1e-6;
    setup(&m, &dm, 2, 4, rng, 2);
    *rng = keep;
    setup(&p, &dp, 2, 4, rng, 2);
    nbt_check(m.s.n_params == p.s.n_params, "Mix-LN(n_post=0) has Pre-Norm's parameters");
    loss(&m); loss(&p);
    same_out("Mix-LN with n_post = 0 equals Pre-Norm", &m, &p);
    teardown(&m); teardown(&p);
    dm.mixln_alpha = -1; /* alpha = 0 itself: no Post-Norm layer at any depth */
    keep = *rng;
    setup(&m, &dm, 2, 4, rng, 2);
    *rng = keep;
    setup(&p, &dp, 2, 4, rng, 2);
    nbt_check(m.s.desc.mixln_alpha == -1, "Mix-LN alpha -1 kept in the stack's description");
    loss(&m); loss(&p);
    same_out("Mix-LN with alpha -1 (= 0) equals Pre-Norm", &m, &p);
    teardown(&m); teardown(&p);
    dm.mixln_alpha = 1; dp = base_desc(NB_PRESET_POST, 3); dp.norm.eps = (nb_real)1e-6;
    keep = *rng;
    setup(&m, &dm, 2, 4, rng, 2);
    *rng = keep;
    setup(&p, &dp, 2, 4, rng, 2);
    loss(&m); loss(&p);
    same_out("Mix-LN with n_post = L equals Post-Norm (double final norm)", &m, &p);
    teardown(&m); teardown(&p);
}

/* HybridNorm* differs from HybridNorm only in layer 0: layers >= 1 have the same tensors, and
   feeding layer 1 the same input gives the same output. */
static void hybrid_star(nbt_rng* rng) {
    nb_stack_desc dh = base_desc(NB_PRESET_HYBRID, 3), ds = base_desc(NB_PRESET_HYBRID_STAR, 3);
    run h, s;
    int t, same = 1, extra = 0;
    setup(&h, &dh, 1, 4, rng, 2);
    setup(&s, &ds, 1, 4, rng, 2);
    for (t = 0; t < s.s.n_tensors; t++) {
        const nb_tensor_info* ti = &s.s.tensors[t];
        nb_real* p = tensor(&h, ti->name);
        if (ti->layer == 0 && !p) { extra++; continue; }
        if (p) memcpy(s.params + ti->offset, p, ti->count * sizeof(nb_real));
        else same = 0;
    }
    nbt_check(same && extra == 1 && tensor(&s, "blocks.0.attn_norm.weight"),
              "HybridNorm* = HybridNorm + layer 0's attention input norm");
    nbt_check(s.s.layers[0].desc.attn.input_norm && !s.s.layers[0].desc.ffn.residual_from_norm &&
                  s.s.layers[0].desc.sites == NB_SITES_QKV && !s.s.layers[1].desc.attn.input_norm &&
                  s.s.layers[1].desc.ffn.residual_from_norm,
              "HybridNorm* layer 0 is Pre-Norm with QKV norms, layer 1 is HybridNorm");
    loss(&h); loss(&s);
    { /* layer 1 applied to the same input gives the same result in both stacks */
        const size_t n = (size_t)4 * 8;
        nb_real *o1 = nbt_alloc(n), *o2 = nbt_alloc(n);
        const nb_real* x1 = nb_stack_hidden(&h.s, h.cache, 1, 0, 1, 4);
        nb_layer_forward(&h.ctx, &h.s, 1, h.params, o1, x1, 1, 4, h.cache, h.scratch);
        nb_layer_forward(&s.ctx, &s.s, 1, s.params, o2, x1, 1, 4, s.cache, s.scratch);
        nbt_close_r("HybridNorm* layer 1 = HybridNorm layer 1", o2, o1, n, NBT_ATOL, NBT_RTOL);
        free(o1); free(o2);
    }
    teardown(&h); teardown(&s);
}

/* Zeroed output projections: Pre-Norm is the identity; classic Post-Norm returns
   N_2(N_1(x)); HybridNorm returns N_f(x) (RMS = 1 with unit gains). */
static void zero_outputs(nbt_rng* rng) {
    const nb_preset ps[3] = {NB_PRESET_PRE, NB_PRESET_POST, NB_PRESET_HYBRID};
    int k;
    for (k = 0; k < 3; k++) {
        nb_stack_desc d = base_desc(ps[k], 1);
        run r;
        const size_t n = (size_t)3 * 8;
        nb_real* ref = nbt_alloc(n);
        nb_real rs[3];
        int t;
        d.norm.final = -1;
        setup(&r, &d, 1, 3, rng, 1);
        for (t = 0; t < r.s.n_tensors; t++) {
            const nb_tensor_info* ti = &r.s.tensors[t];
            if (ti->kind == NB_TENSOR_ATTN_OUT || ti->kind == NB_TENSOR_FF_OUT)
                memset(r.params + ti->offset, 0, ti->count * sizeof(nb_real));
            if (ti->kind == NB_TENSOR_GAIN && k == 2)
                for (size_t i = 0; i < ti->count; i++) r.params[ti->offset + i] = 1;
        }
        loss(&r);
        if (k == 0) nbt_close_r("zero W_o, W_2: Pre-Norm block is the identity", r.out, r.in, n,
                                NBT_ATOL, NBT_RTOL);
        if (k == 1) {
            nb_rmsnorm_forward(NULL, ref, 8, rs, r.in, 8, tensor(&r, "blocks.0.attn_post_norm.weight"),
                               3, 8, 0, r.s.desc.norm.eps);
            nb_rmsnorm_forward(NULL, ref, 8, rs, ref, 8, tensor(&r, "blocks.0.ff_post_norm.weight"),
                               3, 8, 0, r.s.desc.norm.eps);
            nbt_close_r("zero W_o, W_2: Post-Norm block is N_2(N_1(x))", r.out, ref, n, NBT_ATOL,
                        NBT_RTOL);
        }
        if (k == 2) {
            int row, i;
            double worst = 0;
            for (row = 0; row < 3; row++) {
                double ss = 0;
                for (i = 0; i < 8; i++) ss += (double)r.out[row * 8 + i] * r.out[row * 8 + i];
                worst = fmax(worst, fabs(sqrt(ss / 8) - 1));
            }
            nbt_check(worst < 1e-4, "zero W_o, W_2: HybridNorm block returns N_f(x), RMS 1");
        }
        free(ref);
        teardown(&r);
    }
}

/* SiameseNorm with gamma = 0 and N_f's gain = 0: the X stream reaches no block input, so a
   layer's Y output does not depend on its X input; with gamma = 1 it does. */
static void siamese_degenerate(nbt_rng* rng) {
    nb_stack_desc d = base_desc(NB_PRESET_SIAMESE, 2);
    run a;
    const size_t n = (size_t)2 * 3 * 8;
    nb_real *in1 = nbt_alloc(2 * n), *in2 = nbt_alloc(2 * n), *o1 = nbt_alloc(2 * n),
            *o2 = nbt_alloc(2 * n);
    int g;
    setup(&a, &d, 2, 3, rng, 2);
    nbt_check(a.s.layers[1].attn.desc.attn.sites == NB_SITES_QKV, "SiameseNorm attention has QKV norms");
    nbt_fill(rng, in1, 2 * n, 0, 1);
    memcpy(in2, in1, 2 * n * sizeof(nb_real));
    nbt_fill(rng, in2, n, 0, 1); /* different X, same Y */
    memset(tensor(&a, "blocks.0.ff_norm.weight"), 0, 8 * sizeof(nb_real));
    for (g = 1; g >= 0; g--) {
        size_t i;
        double diff = 0;
        nb_real* gamma = tensor(&a, "blocks.0.c1");
        for (i = 0; i < 8; i++) gamma[i] = (nb_real)g;
        nb_layer_forward(&a.ctx, &a.s, 0, a.params, o1, in1, 2, 3, a.cache, a.scratch);
        nb_layer_forward(&a.ctx, &a.s, 0, a.params, o2, in2, 2, 3, a.cache, a.scratch);
        for (i = 0; i < n; i++) diff = fmax(diff, fabs((double)o1[n + i] - o2[n + i]));
        if (g) nbt_check(diff > 1e-3, "SiameseNorm gamma = 1: Y output depends on X");
        else nbt_check(diff == 0, "SiameseNorm gamma = 0, N_f gain = 0: Y output independent of X");
    }
    free(in1); free(in2); free(o1); free(o2);
    teardown(&a);
}

static void side_by_side_and_threads(nbt_rng* rng) {
    nb_stack_desc d1 = base_desc(NB_PRESET_HYBRID, 2), d2 = base_desc(NB_PRESET_SIAMESE, 2);
    run a, b, a2;
    nbt_rng keep = *rng;
    setup(&a, &d1, 2, 70, rng, 1);
    setup(&b, &d2, 2, 70, rng, 2);
    *rng = keep;
    setup(&a2, &d1, 2, 70, rng, 2);
    grads(&a); grads(&b); grads(&a2);
    nbt_close_r("two stacks side by side; 1 vs 2 threads: out", a2.out, a.out,
                (size_t)2 * 70 * 8, NBT_ATOL, NBT_RTOL);
    nbt_close_r("1 vs 2 threads: gradients", a2.grads, a.grads, a.s.n_params, NBT_ATOL, NBT_RTOL);
    {
        nb_real* g = nbt_alloc(a2.s.n_params);
        memcpy(g, a2.grads, a2.s.n_params * sizeof(nb_real));
        grads(&a2);
        nbt_same_bits("same thread count twice: identical gradients", a2.grads, g, a2.s.n_params);
        free(g);
    }
    teardown(&a); teardown(&b); teardown(&a2);
}

/* Big enough (B*T*d >= 16K values) that the row loops and norms really run on 2 threads, so
   the per-thread partial sums of the gains (and SiameseNorm's gamma) and their reduction are
   exercised, and so are the row-fused output norm / residual add / post norm of the generic
   sublayer: 1 vs 2 threads agree to rounding, 2 threads twice are bitwise identical. */
/* scale the weight matrices of r by f */
static void condition(run* r, double f) {
    int t;
    size_t i;
    for (t = 0; t < r->s.n_tensors; t++) {
        const nb_tensor_info* ti = &r->s.tensors[t];
        if (ti->ndim == 2)
            for (i = 0; i < ti->count; i++) r->params[ti->offset + i] *= (nb_real)f;
    }
}

/* Hyper-connections at their init, the dynamic parts on (projections N(0, 0.05^2) from a
   fixed stream, scales 0.5): random maps would sum the streams into a u near zero in some
   rows, whose norm then amplifies float32 rounding far beyond what 1 vs 2 threads can match */
static void hc_conditioned(run* r) {
    nbt_rng g = {0x4843};
    nb_real* init = nbt_alloc(r->s.n_params);
    int t;
    nb_stack_init_params(NULL, &r->s, init, NB_INIT_NORMAL, 0, 1);
    for (t = 0; t < r->s.n_tensors; t++) {
        const nb_tensor_info* ti = &r->s.tensors[t];
        size_t i;
        if (ti->kind == NB_TENSOR_HC_BASE)
            memcpy(r->params + ti->offset, init + ti->offset, ti->count * sizeof(nb_real));
        if (ti->kind == NB_TENSOR_HC_SCALE)
            for (i = 0; i < ti->count; i++) r->params[ti->offset + i] = (nb_real)0.5;
        if (ti->kind == NB_TENSOR_HC_FN) nbt_fill(&g, r->params + ti->offset, ti->count, 0, 0.05);
    }
    free(init);
}

static void threads_large(nbt_rng* rng) {
    static const nb_preset presets[] = {NB_PRESET_SIAMESE, NB_PRESET_HYBRID, NB_PRESET_POST,
                                        NB_PRESET_SANDWICH, NB_PRESET_DEEPNORM, NB_PRESET_MHC,
                                        NB_PRESET_HC};
    int i, norm;
    for (i = 0; i < (int)(sizeof presets / sizeof presets[0]); i++)
        for (norm = 0; norm < 2; norm++) {
            nb_stack_desc d = base_desc(presets[i], 2);
            const int B = 2, T = 64;
            run a, b;
            nbt_rng keep = *rng;
            nb_real* g;
            char what[96];
            d.d_model = 128; d.ffn.d_ff = 96;
            if (norm) d.norm.type = NB_NORM_LAYER;
            if (norm && i < 2) { /* the value residual's row loops on 2 threads: B*T*H_kv*d_k
                                    = 16K values, and the lambdas' per-thread sums */
                d.residual.value_residual = i + 1;
                d.n_kv_heads = 2;
            }
            snprintf(what, sizeof what, "%s %s%s, 1 vs 2 threads", nb_preset_name(presets[i]),
                     norm ? "LayerNorm" : "RMSNorm", d.residual.value_residual ? " value residual" : "");
            nbt_check(setup(&a, &d, B, T, rng, 1), "threads_large setup");
            *rng = keep;
            nbt_check(setup(&b, &d, B, T, rng, 2), "threads_large setup");
            /* matrices of std ~1/sqrt(d): with setup's 0.4 these Post-Norm stacks are so
               ill-conditioned that float32 itself is 1e-3 off float64, and 1 and 2 threads
               agreed only where the BLAS kernel happened to give identical sums (SkylakeX, not
               Haswell) */
            condition(&a, 0.25);
            condition(&b, 0.25);
            hc_conditioned(&a);
            hc_conditioned(&b);
            nbt_check(grads(&a) && grads(&b), "threads_large forward/backward");
            nbt_close_r(what, b.out, a.out, (size_t)B * T * d.d_model, NBT_ATOL, NBT_RTOL);
            if (d.preset == NB_PRESET_HC) /* dE sums the n streams' gradients, which cancel
                                             (HC's norm of each stream adds to each) */
                nbt_close_scaled(what, b.din, a.din, (size_t)B * T * d.d_model, NBT_ATOL, NBT_RTOL);
            else
                nbt_close_r(what, b.din, a.din, (size_t)B * T * d.d_model, NBT_ATOL, NBT_RTOL);
            {   /* weight gradients are sums over B*T tokens with cancellation: per tensor,
                   rtol relative to its largest gradient (nbt_close_scaled) */
                int t, ok = 1;
                for (t = 0; t < a.s.n_tensors; t++) {
                    const nb_tensor_info* ti = &a.s.tensors[t];
                    ok &= nbt_close_scaled(ti->name, b.grads + ti->offset, a.grads + ti->offset,
                                           ti->count, NBT_ATOL, NBT_RTOL);
                }
                nbt_check(ok, what);
            }
            g = nbt_alloc(b.s.n_params);
            memcpy(g, b.grads, b.s.n_params * sizeof(nb_real));
            grads(&b);
            nbt_same_bits("2 threads twice: identical gradients", b.grads, g, b.s.n_params);
            free(g);
            teardown(&a); teardown(&b);
        }
}

/* The backward's zeroing on the team (param_grads OVERWRITE zeroes each tensor but the weight
   matrices right before its gradient, the matrices' dW GEMMs write theirs, and the attention's
   dQ|K|V scratch is zeroed, in 4096-value chunks on the threads once a buffer holds 128 Ki
   values): d = 256 makes W_qkv 196608 values and B*T*3d = 196608,
   so both take the threaded path on 2 threads. Overwriting a buffer full of NaN must give the
   bits of accumulating into zeros on the same thread count (a chunk left unzeroed keeps NaN). */
static void team_zeroing(nbt_rng* rng) {
    nb_stack_desc d = base_desc(NB_PRESET_PRE, 1);
    run a, b;
    nbt_rng keep = *rng;
    size_t k;
    d.d_model = 256; d.n_heads = 4; d.n_kv_heads = 4; d.ffn.d_ff = 64;
    nbt_check(setup(&a, &d, 2, 128, rng, 2), "team zeroing: setup");
    *rng = keep;
    d.run.param_grads = NB_GRAD_OVERWRITE;
    nbt_check(setup(&b, &d, 2, 128, rng, 2), "team zeroing: setup (OVERWRITE)");
    nbt_check(a.s.tensors[0].count >= 131072 || a.s.tensors[1].count >= 131072,
              "team zeroing: a tensor large enough for the threaded path");
    nbt_check(grads(&a), "team zeroing: backward accumulating into zeros");
    loss(&b);
    for (k = 0; k < b.s.n_params; k++) b.grads[k] = (nb_real)NAN;
    nbt_check(nb_stack_backward(&b.ctx, &b.s, b.params, b.grads, b.din, b.dout, b.B, b.T,
                                b.cache, b.scratch) == NB_OK, "team zeroing: backward OVERWRITE");
    nbt_same_bits("team zeroing: OVERWRITE over NaN = accumulating into zeros (2 threads)",
                  b.grads, a.grads, a.s.n_params);
    nbt_same_bits("team zeroing: the same input gradient", b.din, a.din,
                  (size_t)2 * 128 * d.d_model);
    {   /* ACCUMULATE (the default) adds: a second backward doubles the weight matrices'
           gradients. Each is one dW GEMM, C = C + A B with K = B*T = 256: 2g up to the
           rounding of that addition, 2^-24 of |C + A B| where the BLAS keeps K in one block;
           a threaded BLAS may split K (OpenBLAS does under load), and then the partial sums'
           rounding is relative to the terms, not to an element they cancel to: the bound is
           taken on the tensor's largest |2g| (1e-6 allowed; a missing or doubled addition is
           off by |g| itself). The gains' gradients add per-thread partials to g one by one,
           whose rounding depends on the partials' size (their sums cancel): not checked here */
        nb_real* twice = nbt_alloc(a.s.n_params);
        int t, ok = 1;
        for (k = 0; k < a.s.n_params; k++) twice[k] = 2 * a.grads[k];
        nbt_check(nb_stack_backward(&a.ctx, &a.s, a.params, a.grads, a.din, a.dout, a.B, a.T,
                                    a.cache, a.scratch) == NB_OK, "accumulate: second backward");
        for (t = 0; t < a.s.n_tensors; t++) {
            const nb_tensor_info* ti = &a.s.tensors[t];
            if (ti->kind == NB_TENSOR_QKV || ti->kind == NB_TENSOR_ATTN_OUT ||
                ti->kind == NB_TENSOR_FF_IN || ti->kind == NB_TENSOR_FF_OUT)
                ok &= nbt_close_scaled(ti->name, a.grads + ti->offset, twice + ti->offset,
                                       ti->count, 1e-6, 1e-6);
        }
        nbt_check(ok, "ACCUMULATE: a second backward adds its weight gradients to the first's");
        free(twice);
    }
    {   /* a skipped layer (nb_stack.skip) writes no dW: its matrices are zeroed as before */
        int zero = 1, t;
        b.s.skip[0] = 1;
        loss(&b);
        for (k = 0; k < b.s.n_params; k++) b.grads[k] = (nb_real)NAN;
        nbt_check(nb_stack_backward(&b.ctx, &b.s, b.params, b.grads, b.din, b.dout, b.B, b.T,
                                    b.cache, b.scratch) == NB_OK, "skipped layer: backward");
        for (t = 0; t < b.s.layers[0].n_tensors; t++) {
            const nb_tensor_info* ti = &b.s.tensors[b.s.layers[0].tensor0 + t];
            size_t i;
            for (i = 0; i < ti->count; i++) zero &= b.grads[ti->offset + i] == 0;
        }
        nbt_check(zero, "team zeroing: a skipped layer's gradients are zeros under OVERWRITE");
        b.s.skip[0] = 0;
    }
    teardown(&a); teardown(&b);
}

/* Without final and embedding norms the stack backward reads dout and writes din directly:
   din == dout (in place) must give the gradients of separate buffers, with one layer (which
   reads dout and writes din) and two, and with the final norm on. */
static void in_place_backward(nbt_rng* rng) {
    static const struct { const char* name; int L, final_norm; } cases[] = {
        {"pre", 1, -1}, {"pre", 2, -1}, {"post", 1, -1}, {"gpt2", 2, 0}, {"siamese", 1, 0},
        {"mhc", 2, -1}, {"hc", 1, -1}};
    int i;
    for (i = 0; i < (int)(sizeof cases / sizeof cases[0]); i++) {
        nb_stack_desc d = base_desc(NB_PRESET_DEFAULT, cases[i].L);
        const size_t n = (size_t)2 * 3 * d.d_model;
        run r;
        nb_real *din, *g;
        char what[96];
        nb_preset_from_name(NULL, &d, cases[i].name);
        d.norm.final = cases[i].final_norm;
        snprintf(what, sizeof what, "%s L=%d final norm %d: backward in place (din == dout)",
                 cases[i].name, cases[i].L, cases[i].final_norm);
        nbt_check(setup(&r, &d, 2, 3, rng, 1) && grads(&r), "in_place setup");
        din = nbt_alloc(n);
        g = nbt_alloc(r.s.n_params);
        memcpy(din, r.din, n * sizeof(nb_real));
        memcpy(g, r.grads, r.s.n_params * sizeof(nb_real));
        memset(r.grads, 0, r.s.n_params * sizeof(nb_real));
        memcpy(r.din, r.dout, n * sizeof(nb_real));
        nbt_check(nb_stack_backward(&r.ctx, &r.s, r.params, r.grads, r.din, r.din, r.B, r.T,
                                    r.cache, r.scratch) == NB_OK, what);
        nbt_same_bits(what, r.din, din, n);
        nbt_same_bits(what, r.grads, g, r.s.n_params);
        free(din); free(g);
        teardown(&r);
    }
}

/* A trainer's own layout (issue 21): one buffer per tensor kind across layers, as llm.c keeps
   it (all layers' QKV weights, then all output projections, ...), stack-level tensors first,
   with the trainer's own values (an "embedding") and gaps between the kinds. Returns the
   buffer size; offsets[t] for each tensor. */
static const char* tensor_kind_name(const nb_tensor_info* t) { /* "blocks.<l>." dropped */
    return t->layer < 0 ? t->name : strchr(t->name + 7, '.') + 1;
}
static size_t kind_major_layout(const nb_stack* s, size_t* offsets) {
    size_t off = 100; /* the trainer's embedding lives at [0, 100) */
    int t, u;
    for (t = 0; t < s->n_tensors; t++) offsets[t] = (size_t)-1;
    for (t = 0; t < s->n_tensors; t++) {
        const char* kind = tensor_kind_name(&s->tensors[t]);
        if (offsets[t] != (size_t)-1) continue;
        for (u = t; u < s->n_tensors; u++) { /* every layer's tensor of this kind, in order */
            if (offsets[u] != (size_t)-1 || strcmp(kind, tensor_kind_name(&s->tensors[u])))
                continue;
            offsets[u] = off;
            off += s->tensors[u].count;
        }
        off += 3; /* a gap between the kinds */
    }
    return off + 5;
}

static void copy_tensors(const nb_stack* s, nb_real* dst, const size_t* dst_off, const nb_real* src,
                         const size_t* src_off) {
    int t;
    for (t = 0; t < s->n_tensors; t++)
        memcpy(dst + dst_off[t], src + src_off[t], s->tensors[t].count * sizeof(nb_real));
}

typedef struct span_log { size_t total; int calls; } span_log;
static void on_span(void* user, int layer, size_t offset, size_t count) {
    span_log* g = (span_log*)user;
    (void)layer; (void)offset;
    g->total += count;
    g->calls++;
}

/* The trainer's layout binds without copies and computes the same bits as the stack's own;
   the gradient conventions (overwrite parameter gradients, accumulate the input gradient) give
   the results of accumulate-into-zeros and overwrite plus an add. */
static void trainer_layout_and_conventions(nbt_rng* rng) {
    static const char* const names[] = {"pre", "gpt2", "siamese", "embednorm", "rezero",
                                        "layerscale", "dyt"};
    int i;
    for (i = 0; i < (int)(sizeof names / sizeof names[0]); i++) {
        nb_stack_desc d = base_desc(NB_PRESET_DEFAULT, 3);
        const size_t n = (size_t)2 * 3 * d.d_model;
        run r, c;
        size_t *own, *mine, count, k, at1;
        nb_real *params, *gr, *din;
        span_log sp;
        int t, untouched = 1, ok;
        char what[1280];
        nb_preset_from_name(NULL, &d, names[i]);
        nbt_check(setup(&r, &d, 2, 3, rng, 2) && grads(&r), "layout: reference run");
        own = (size_t*)malloc(sizeof(size_t) * (size_t)r.s.n_tensors);
        mine = (size_t*)malloc(sizeof(size_t) * (size_t)r.s.n_tensors);
        for (t = 0; t < r.s.n_tensors; t++) own[t] = r.s.tensors[t].offset;
        count = kind_major_layout(&r.s, mine);
        params = nbt_alloc(count);
        gr = nbt_alloc(count);
        for (k = 0; k < count; k++) params[k] = gr[k] = (nb_real)-7; /* the trainer's values */
        copy_tensors(&r.s, params, mine, r.params, own);

        /* c: the same stack on the trainer's buffers, gradients overwritten (no zeroing: the
           tensors hold -7), din accumulated onto 0.5 */
        d.run.param_grads = NB_GRAD_OVERWRITE;
        d.run.input_grad = NB_GRAD_ACCUMULATE;
        nbt_check(setup(&c, &d, 2, 3, rng, 2), "layout: second stack");
        snprintf(what, sizeof what, "%s: nb_stack_set_layout takes a kind-major layout (%s)",
                 names[i], c.ctx.err);
        nbt_check(nb_stack_set_layout(&c.ctx, &c.s, mine, count) == NB_OK && c.s.n_params == count,
                  what);
        memcpy(c.in, r.in, n * sizeof(nb_real));
        memcpy(c.dout, r.dout, n * sizeof(nb_real));
        for (k = 0; k < n; k++) c.din[k] = (nb_real)0.5;
        memset(&sp, 0, sizeof sp);
        c.ctx.grads_ready = on_span;
        c.ctx.grads_ready_user = &sp;
        ok = nb_stack_forward(&c.ctx, &c.s, params, c.out, c.in, 2, 3, c.cache, c.scratch) == NB_OK &&
             nb_stack_backward(&c.ctx, &c.s, params, gr, c.din, c.dout, 2, 3, c.cache,
                               c.scratch) == NB_OK;
        snprintf(what, sizeof what, "%s: forward and backward on the trainer's buffers (%s)",
                 names[i], c.ctx.err);
        nbt_check(ok, what);
        snprintf(what, sizeof what, "%s: trainer's layout: the same output bits", names[i]);
        nbt_same_bits(what, c.out, r.out, n);
        snprintf(what, sizeof what, "%s: overwritten gradients: the bits of accumulating into "
                 "zeros", names[i]);
        copy_tensors(&r.s, r.params, own, gr, mine); /* r.params: scratch space now */
        nbt_same_bits(what, r.params, r.grads, r.s.n_params);
        for (k = 0; k < count; k++) { /* the values no tensor covers */
            int covered = 0;
            for (t = 0; t < c.s.n_tensors && !covered; t++)
                covered = k >= mine[t] && k < mine[t] + c.s.tensors[t].count;
            if (!covered) untouched &= params[k] == -7 && gr[k] == -7;
        }
        snprintf(what, sizeof what, "%s: the trainer's own values are not touched", names[i]);
        nbt_check(untouched, what);
        din = nbt_alloc(n);
        for (k = 0; k < n; k++) din[k] = (nb_real)0.5 + r.din[k];
        snprintf(what, sizeof what, "%s: accumulated input gradient = 0.5 + din", names[i]);
        nbt_close_r(what, c.din, din, n, 1e-6, 1e-6);
        snprintf(what, sizeof what, "%s: grads_ready reports every tensor once (%d calls)",
                 names[i], sp.calls);
        nbt_check(sp.total == r.s.n_params && sp.calls >= 3, what);
        snprintf(what, sizeof what, "%s: din may not be dout when it accumulates", names[i]);
        nbt_check(nb_stack_backward(&c.ctx, &c.s, params, gr, c.dout, c.dout, 2, 3, c.cache,
                                    c.scratch) == NB_ERR_VALUE && strstr(c.ctx.err, "dout"),
                  what);
        {   /* nor overlap it in part, in either mode */
            nb_real* two = nbt_alloc(2 * n);
            memcpy(two, c.dout, n * sizeof *two);
            snprintf(what, sizeof what, "%s: din overlapping dout in part is refused", names[i]);
            nbt_check(nb_stack_backward(&c.ctx, &c.s, params, gr, two + 3, two, 2, 3, c.cache,
                                        c.scratch) == NB_ERR_VALUE &&
                          strstr(c.ctx.err, "overlap in part"), what);
            free(two);
        }

        /* refused layouts leave the stack as it was */
        at1 = mine[1];
        mine[1] = mine[0] + 1;
        snprintf(what, sizeof what, "%s: overlapping tensors are refused, both named", names[i]);
        nbt_check(nb_stack_set_layout(&c.ctx, &c.s, mine, count) == NB_ERR_SHAPE &&
                      strstr(c.ctx.err, c.s.tensors[0].name) &&
                      strstr(c.ctx.err, c.s.tensors[1].name) && c.s.n_params == count,
                  what);
        mine[1] = count - c.s.tensors[1].count + 1;
        snprintf(what, sizeof what, "%s: a tensor past the buffer is refused", names[i]);
        nbt_check(nb_stack_set_layout(&c.ctx, &c.s, mine, count) == NB_ERR_SHAPE &&
                      strstr(c.ctx.err, "past count"),
                  what);
        mine[1] = at1;
        snprintf(what, sizeof what, "%s: NULL offsets restore the stack's own layout", names[i]);
        ok = nb_stack_set_layout(&c.ctx, &c.s, NULL, 0) == NB_OK &&
             c.s.n_params == r.s.n_params;
        for (t = 0; t < c.s.n_tensors; t++) ok &= c.s.tensors[t].offset == own[t];
        nbt_check(ok, what);
        /* overwriting in the stack's own layout: the same bits, whatever the buffer held */
        copy_tensors(&c.s, c.params, own, params, mine);
        for (k = 0; k < c.s.n_params; k++) c.grads[k] = (nb_real)-7;
        c.ctx.grads_ready = NULL;
        ok = nb_stack_forward(&c.ctx, &c.s, c.params, c.out, c.in, 2, 3, c.cache, c.scratch) ==
                 NB_OK &&
             nb_stack_backward(&c.ctx, &c.s, c.params, c.grads, c.din, c.dout, 2, 3, c.cache,
                               c.scratch) == NB_OK;
        snprintf(what, sizeof what, "%s: forward and backward in the stack's own layout (%s)",
                 names[i], c.ctx.err);
        nbt_check(ok, what);
        snprintf(what, sizeof what, "%s: overwritten gradients in the stack's own layout",
                 names[i]);
        nbt_same_bits(what, c.grads, r.grads, r.s.n_params);
        free(own); free(mine); free(params); free(gr); free(din);
        teardown(&r);
        teardown(&c);
    }
}

/* The grads_ready hook: the ranges tile [0, n_params) once, in descending order, and each
   range already holds its final values when reported (a trainer reduces it right away). */
typedef struct ready_log {
    const run* r;
    nb_real* snap;            /* the gradient values seen at report time */
    unsigned char* seen;
    size_t last_end;
    int calls, order_ok, overlap;
} ready_log;

static void on_ready(void* user, int layer, size_t offset, size_t count) {
    ready_log* g = (ready_log*)user;
    size_t i;
    (void)layer;
    g->calls++;
    if (offset + count != g->last_end) g->order_ok = 0; /* contiguous, top down */
    g->last_end = offset;
    for (i = offset; i < offset + count; i++) {
        g->overlap |= g->seen[i];
        g->seen[i] = 1;
        g->snap[i] = g->r->grads[i];
    }
}

static void grads_ready_hook(nbt_rng* rng) {
    static const char* const names[] = {"pre", "post", "embednorm", "siamese", "siamese_post_pre", "gpt2"};
    int i;
    for (i = 0; i < (int)(sizeof names / sizeof names[0]); i++) {
        nb_stack_desc d = base_desc(NB_PRESET_DEFAULT, 3);
        run r;
        ready_log g;
        size_t k, missing = 0;
        char what[96];
        nb_preset_from_name(NULL, &d, names[i]);
        nbt_check(setup(&r, &d, 2, 3, rng, 1), "grads_ready setup");
        memset(&g, 0, sizeof g);
        g.r = &r;
        g.snap = nbt_alloc(r.s.n_params);
        g.seen = (unsigned char*)calloc(r.s.n_params, 1);
        g.last_end = r.s.n_params;
        g.order_ok = 1;
        r.ctx.grads_ready = on_ready;
        r.ctx.grads_ready_user = &g;
        nbt_check(grads(&r), "grads_ready backward");
        for (k = 0; k < r.s.n_params; k++) missing += !g.seen[k];
        snprintf(what, sizeof what, "%s: grads_ready ranges tile the buffer top down (%d calls)",
                 names[i], g.calls);
        nbt_check(g.order_ok && !g.overlap && !missing && g.last_end == 0 && g.calls >= 3, what);
        snprintf(what, sizeof what, "%s: gradients are final when reported", names[i]);
        nbt_same_bits(what, g.snap, r.grads, r.s.n_params);
        free(g.snap); free(g.seen);
        teardown(&r);
    }
}

static void table_and_init(nbt_rng* rng) {
    nb_stack_desc d = base_desc(NB_PRESET_HYBRID, 4);
    run r;
    size_t covered = 0;
    int t, ok = 1;
    double s0 = 1 / sqrt(2.5 * 64), m = 0, v = 0, mx = 0;
    size_t n = 0;
    d.d_model = 64; d.n_heads = 4; d.n_kv_heads = 2; d.ffn.d_ff = 96;
    setup(&r, &d, 1, 2, rng, 1);
    for (t = 0; t < r.s.n_tensors; t++) {
        ok &= r.s.tensors[t].offset == covered;
        covered += r.s.tensors[t].count;
    }
    nbt_check(ok && covered == r.s.n_params, "tensor table tiles the parameter buffer in order");
    nbt_check(tensor(&r, "blocks.3.att_proj.weight") && tensor(&r, "blocks.0.q_norm.weight") &&
                  tensor(&r, "blocks.2.ff_norm.weight") && tensor(&r, "ln_f.weight"),
              "PyTorch-style names");
    nb_stack_init_params(NULL, &r.s, r.params, NB_INIT_MEGATRON, 0, 1234);
    for (t = 0; t < r.s.n_tensors; t++) {
        const nb_tensor_info* ti = &r.s.tensors[t];
        size_t i;
        if (ti->kind != NB_TENSOR_QKV) continue;
        for (i = 0; i < ti->count; i++) {
            const double x = r.params[ti->offset + i];
            m += x; v += x * x; mx = fmax(mx, fabs(x)); n++;
        }
    }
    m /= n; v = sqrt(v / n - m * m);
    /* the realized std of a 3-sigma truncated normal is 0.9866 sigma; 40k samples: 1% */
    nbt_check(fabs(m) < 0.02 * s0 && fabs(v / (0.9866 * s0) - 1) < 0.02 && mx <= 3 * s0 * 1.0000001,
              "normal init: mean 0, std 0.9866 s0, truncated at 3 s0");
    {
        const nb_real* wo = tensor(&r, "blocks.1.attn_out.weight");
        double ss = 0;
        int i;
        for (i = 0; i < 64 * 64; i++) ss += (double)wo[i] * wo[i];
        nbt_check(fabs(sqrt(ss / 4096) / (0.9866 * s0 / sqrt(8.0)) - 1) < 0.05,
                  "megatron init: W_o std s0/sqrt(2L)");
        nbt_check(tensor(&r, "blocks.0.q_norm.weight")[3] == 1, "gains initialized to 1");
    }
    {
        nb_real* p2 = nbt_alloc(r.s.n_params);
        nb_stack_init_params(NULL, &r.s, p2, NB_INIT_MEGATRON, 0, 1234);
        nbt_same_bits("init is deterministic for a seed", p2, r.params, r.s.n_params);
        free(p2);
    }
    teardown(&r);
}


/* realized std of a tensor */
static double tensor_std(run* r, const char* name) {
    int t;
    for (t = 0; t < r->s.n_tensors; t++)
        if (!strcmp(r->s.tensors[t].name, name)) {
            const nb_real* x = r->params + r->s.tensors[t].offset;
            double ss = 0;
            size_t i, n = r->s.tensors[t].count;
            for (i = 0; i < n; i++) ss += (double)x[i] * x[i];
            return sqrt(ss / n);
        }
    return -1;
}

/* Every scheme (nb_init_scheme) against its formula, on the realized std of W_qkv, W_o, W_2 of layers 0
   and 3 (L = 4, d = 64, f = 96). Truncated at 3 sigma the std is 0.9866 sigma. 4-24k samples:
   a 5% band catches any wrong factor (the smallest, sqrt(2) between schemes, is 41%). */
static void init_schemes(nbt_rng* rng) {
    const double d = 64, f = 96, L = 4, s0 = 1 / sqrt(2.5 * 64), tr = 0.9866;
    const double beta = pow(8 * L, -0.25);
    struct { nb_init_scheme k; nb_preset p; double qkv, wo0, wo3, w2_3; } c[] = {
        {NB_INIT_NORMAL, NB_PRESET_PRE, tr * s0, tr * s0, tr * s0, tr * s0},
        {NB_INIT_DEPTH_SCALED, NB_PRESET_PRE, tr * s0, tr * s0 / sqrt(2), tr * s0 / sqrt(8), tr * s0 / sqrt(8)},
        {NB_INIT_MEGATRON, NB_PRESET_PRE, tr * s0, tr * s0 / sqrt(8), tr * s0 / sqrt(8), tr * s0 / sqrt(8)},
        {NB_INIT_MITCHELL, NB_PRESET_PRE, tr / sqrt(d), tr / sqrt(2 * d), tr / sqrt(8 * d), tr / sqrt(8 * f)},
        {NB_INIT_MIXLN, NB_PRESET_PRE, 0.02, 0.02, 0.02, 0.02},
        {NB_INIT_MIXLN_SCALED, NB_PRESET_MIXLN, 0.02, 0.02, 0.02 / sqrt(8), 0.02 / sqrt(8)},
        {NB_INIT_GPT2, NB_PRESET_PRE, 0.02, 0.02 / sqrt(8), 0.02 / sqrt(8), 0.02 / sqrt(8)},
        /* W_qkv mixes Q, K (gain 1) and V (gain beta) rows: total variance of the three blocks */
        {NB_INIT_DEEPNORM, NB_PRESET_DEEPNORM,
         sqrt((64 * 64 * (2 / 128.0) * 2 + 64 * 64 * beta * beta * (2 / 128.0)) / (3 * 64 * 64)),
         beta * sqrt(2 / 128.0), beta * sqrt(2 / 128.0), beta * sqrt(2 / (64 + 96.0))},
        {NB_INIT_TORCHTITAN, NB_PRESET_PRE, 0.02, 0.02 / sqrt(2), 0.02 / sqrt(8), 0.02 / sqrt(8)}};
    size_t k;
    for (k = 0; k < sizeof c / sizeof c[0]; k++) {
        nb_stack_desc dd = base_desc(c[k].p, 4);
        run r;
        char name[256];
        double got[4];
        dd.d_model = 64; dd.n_heads = 4; dd.n_kv_heads = 4; dd.ffn.d_ff = 96;
        setup(&r, &dd, 1, 2, rng, 1);
        nb_stack_init_params(NULL, &r.s, r.params, c[k].k, 0, 99 + k);
        got[0] = tensor_std(&r, "blocks.0.att_proj.weight");
        got[1] = tensor_std(&r, "blocks.0.attn_out.weight");
        got[2] = tensor_std(&r, "blocks.3.attn_out.weight");
        got[3] = tensor_std(&r, "blocks.3.ff_out.weight");
        snprintf(name, sizeof name, "init scheme %d: std of W_qkv, W_o(0), W_o(3), W_2(3) = "
                 "%.4g %.4g %.4g %.4g (want %.4g %.4g %.4g %.4g)", (int)c[k].k, got[0], got[1],
                 got[2], got[3], c[k].qkv, c[k].wo0, c[k].wo3, c[k].w2_3);
        nbt_check(fabs(got[0] / c[k].qkv - 1) < 0.05 && fabs(got[1] / c[k].wo0 - 1) < 0.05 &&
                      fabs(got[2] / c[k].wo3 - 1) < 0.05 && fabs(got[3] / c[k].w2_3 - 1) < 0.05,
                  name);
        if (c[k].k == NB_INIT_TORCHTITAN) { /* ff_proj's [up | gate]: its w3 scaled, w1 not */
            const nb_real* w = tensor(&r, "blocks.3.ff_proj.weight");
            const size_t half = 96 * 64; /* f x d each */
            double ss[2] = {0, 0};
            size_t i;
            for (i = 0; w && i < 2 * half; i++) ss[i >= half] += (double)w[i] * w[i];
            got[0] = sqrt(ss[0] / half); got[1] = sqrt(ss[1] / half);
            snprintf(name, sizeof name, "init torchtitan: std of layer 3's SwiGLU up (w3) %.4g, "
                     "gate (w1) %.4g (want %.4g, %.4g)", got[0], got[1], 0.02 / sqrt(8), 0.02);
            nbt_check(fabs(got[0] / (0.02 / sqrt(8)) - 1) < 0.05 && fabs(got[1] / 0.02 - 1) < 0.05,
                      name);
        }
        teardown(&r);
    }
}

static void diagnostics(nbt_rng* rng) {
    nb_stack_desc d = base_desc(NB_PRESET_PRE, 3);
    run r;
    double gl[3], global, ang[16], mag[4], check = 0;
    int t;
    setup(&r, &d, 2, 4, rng, 2);
    grads(&r);
    global = nb_stack_grad_norms(&r.s, r.grads, gl);
    for (t = 0; t < r.s.n_tensors; t++) {
        const nb_tensor_info* ti = &r.s.tensors[t];
        size_t i;
        for (i = 0; i < ti->count; i++) check += (double)r.grads[ti->offset + i] * r.grads[ti->offset + i];
    }
    nbt_check(fabs(global - sqrt(check)) < 1e-9 * global && gl[0] > 0 && gl[2] > 0,
              "gradient norms: global = sqrt(sum of squares), per layer > 0");
    nb_stack_angular_distance(&r.s, r.cache, 2, 4, 0, ang);
    nb_stack_hidden_norms(&r.s, r.cache, 2, 4, 0, mag);
    nbt_check(ang[0] == 0 && ang[5] == 0 && ang[1] > 0 && ang[1] <= 1 && ang[1] == ang[4],
              "angular distance: 0 on the diagonal, symmetric, in (0, 1]");
    nbt_check(mag[0] > 0 && mag[3] > 0, "hidden-state magnitudes");
    /* skipping layer 1 makes its output equal its input */
    r.s.skip[1] = 1;
    grads(&r);
    nbt_close_r("skip: layer 1 is the identity", nb_stack_hidden(&r.s, r.cache, 2, 0, 2, 4),
                nb_stack_hidden(&r.s, r.cache, 1, 0, 2, 4), 64, 0, 0);
    r.s.skip[1] = 0;
    /* a NaN weight in layer 2's FFN is reported with its layer */
    r.s.desc.run.check_finite = 1;
    tensor(&r, "blocks.2.ff_out.weight")[5] = (nb_real)NAN;
    nbt_check(nbt_isnan(loss(&r)) && strstr(r.ctx.err, "layer 2") && strstr(r.ctx.err, "FFN"),
              "non-finite check names layer 2's FFN");
    teardown(&r);
}

/* LayerNorm Scaling divides layer l's norm outputs by sqrt(l) with the paper's 1-based l: the
   first layer is unscaled, the third 1/sqrt(3) (a 0-based index gives 1/sqrt(0) = inf there). */
static void lns_depth_index(void) {
    nb_ctx ctx;
    nb_stack s;
    nb_stack_desc d = base_desc(NB_PRESET_DEFAULT, 3);
    int l;
    memset(&ctx, 0, sizeof ctx);
    nbt_check(nb_preset_from_name(&ctx, &d, "LayerNorm-Scaling") == NB_OK && d.preset == NB_PRESET_LNS,
              "LayerNorm Scaling by its paper's name");
    if (!nbt_check(nb_stack_init(&ctx, &s, &d, 1, 4) == NB_OK, "lns stack")) return;
    for (l = 0; l < 3; l++) {
        const nb_placement* a = &s.layers[l].desc.attn;
        const nb_placement* f = &s.layers[l].desc.ffn;
        const double want = 1 / sqrt(l + 1.0);
        char name[96];
        snprintf(name, sizeof name, "lns layer %d: Pre-Norm, both norm outputs times 1/sqrt(%d)",
                 l, l + 1);
        nbt_check(a->input_norm && f->input_norm && fabs(a->input_scale - want) < 1e-7 &&
                      fabs(f->input_scale - want) < 1e-7 && !a->post_norm && !a->output_norm,
                  name);
    }
    nbt_check(s.desc.norm.eps == (nb_real)1e-6, "lns: eps 1e-6 of its (Mix-LN) code");
    nb_stack_free(&s);
}

/* ReZero at its init (every resweight 0): the stack is the identity, no branch weight gets a
   gradient, and yet each layer's scalar does (sum over every element of dout * F(x)): the
   classic mistake is a zero-init branch that never starts learning. One scalar per layer,
   shared by both sublayers, as the ReZero code; LayerScale's defaults follow CaiT's depth rule. */
static void rezero_init_and_sharing(nbt_rng* rng) {
    nb_stack_desc d = base_desc(NB_PRESET_REZERO, 2);
    run r;
    int t, n_rezero = 0, weights_zero = 1, scalars_moving = 1;
    const size_t n = (size_t)2 * 3 * 8;
    size_t i;
    double maxdiff = 0;
    if (!nbt_check(setup(&r, &d, 2, 3, rng, 2), "rezero stack")) return;
    nbt_check(nb_stack_init_params(&r.ctx, &r.s, r.params, NB_INIT_NORMAL, 0, 7) == NB_OK,
              "rezero init_params");
    nbt_check(grads(&r), "rezero backward at init");
    for (i = 0; i < n; i++) maxdiff = fmax(maxdiff, fabs((double)r.out[i] - r.in[i]));
    nbt_check(maxdiff == 0, "rezero at init: the stack is the identity (no final norm)");
    for (t = 0; t < r.s.n_tensors; t++) {
        const nb_tensor_info* ti = &r.s.tensors[t];
        if (ti->kind == NB_TENSOR_REZERO) {
            n_rezero++;
            scalars_moving &= r.params[ti->offset] == 0 && r.grads[ti->offset] != 0;
        } else {
            for (i = 0; i < ti->count; i++) weights_zero &= r.grads[ti->offset + i] == 0;
        }
    }
    nbt_check(n_rezero == 2, "rezero: one resweight per layer, shared by its two sublayers");
    nbt_check(scalars_moving, "rezero at init: every resweight is 0 and has a nonzero gradient");
    nbt_check(weights_zero, "rezero at init: the branch weights get exactly zero gradient");
    teardown(&r);
    {
        nb_ctx ctx;
        nb_stack st;
        static const int depth[4] = {12, 18, 24, 36};
        static const double want[4] = {0.1, 0.1, 1e-5, 1e-6};
        int k;
        memset(&ctx, 0, sizeof ctx);
        for (k = 0; k < 4; k++) {
            char name[96];
            d = base_desc(NB_PRESET_LAYERSCALE, depth[k]);
            snprintf(name, sizeof name, "layerscale init at depth %d: %g (CaiT)", depth[k],
                     want[k]);
            nbt_check(nb_stack_init(&ctx, &st, &d, 1, 1) == NB_OK &&
                          st.desc.residual.layerscale_init == want[k], name);
            nb_stack_free(&st);
        }
    }
}

/* The trace hook: the names in their documented order, tensors equal to what the calls return,
   and results bitwise unchanged by tracing. */
typedef struct trace_log { char names[64][48]; int n, out_n; nb_real out[48]; } trace_log;
static void trace_collect(void* user, const char* name, const nb_real* x, int rows, int cols) {
    trace_log* t = (trace_log*)user;
    if (t->n < 64) snprintf(t->names[t->n++], sizeof t->names[0], "%s", name);
    if (!strcmp(name, "out") && rows * cols <= 48) {
        t->out_n = rows * cols;
        memcpy(t->out, x, (size_t)t->out_n * sizeof *x);
    }
}
/* The same stack run twice from the same draw, the second traced into log; checks that tracing
   changes no bit of the output or the gradients. a and b are left for the caller's checks. */
static void traced_pair(const char* what, const nb_stack_desc* d, nbt_rng* rng, run* a, run* b,
                        trace_log* log) {
    const nbt_rng keep = *rng;
    char name[96];
    setup(a, d, 2, 3, rng, 2);
    *rng = keep;
    setup(b, d, 2, 3, rng, 2);
    memset(log, 0, sizeof *log);
    b->ctx.trace = trace_collect;
    b->ctx.trace_user = log;
    grads(a);
    grads(b);
    snprintf(name, sizeof name, "trace: tracing changes no output (%s)", what);
    nbt_same_bits(name, b->out, a->out, 2 * 3 * 8);
    snprintf(name, sizeof name, "trace: tracing changes no gradient (%s)", what);
    nbt_same_bits(name, b->grads, a->grads, a->s.n_params);
}

static void trace_names(nbt_rng* rng) {
    static const char* const want[] = {
        "x0", "blocks.0.attn.h", "blocks.0.attn.qkv", "blocks.0.attn.qkv_rope",
        "blocks.0.attn.context", "blocks.0.attn.out", "blocks.0.attn.x_out", "blocks.0.ffn.h",
        "blocks.0.ffn.proj", "blocks.0.ffn.act", "blocks.0.ffn.out", "blocks.0.ffn.x_out",
        "blocks.0.x", "blocks.1.attn.h", "blocks.1.attn.qkv", "blocks.1.attn.qkv_rope",
        "blocks.1.attn.context", "blocks.1.attn.out", "blocks.1.attn.x_out", "blocks.1.ffn.h",
        "blocks.1.ffn.proj", "blocks.1.ffn.act", "blocks.1.ffn.out", "blocks.1.ffn.x_out",
        "blocks.1.x", "out", "blocks.1.ffn.grad_out", "blocks.1.attn.grad_out",
        "blocks.1.grad_x_in", "blocks.0.ffn.grad_out", "blocks.0.attn.grad_out",
        "blocks.0.grad_x_in", "grad_in"};
    static const char* const normed[] = {"blocks.1.attn.out_normed", "blocks.1.ffn.out_normed"};
    static nb_layer_desc ls[2];
    nb_stack_desc d = base_desc(NB_PRESET_PRE, 2);
    run a, b;
    trace_log log;
    int i, k, same_names;
    traced_pair("pre", &d, rng, &a, &b, &log);
    same_names = log.n == (int)(sizeof want / sizeof want[0]);
    for (i = 0; same_names && i < log.n; i++) same_names = !strcmp(log.names[i], want[i]);
    if (!nbt_check(same_names, "trace: the documented names in order (pre, 2 layers)"))
        for (i = 0; i < log.n; i++) printf("  %d %s\n", i, log.names[i]);
    nbt_check(log.out_n == 2 * 3 * 8, "trace: \"out\" has the forward output's shape");
    nbt_same_bits("trace: \"out\" is the forward's output", log.out, a.out, 2 * 3 * 8);
    teardown(&a);
    teardown(&b);
    /* output norms, whose result is traced from a pass of its own: sandwich, and output norms
       times a LayerScale vector before a post norm (a custom schedule) */
    for (k = 0; k < 2; k++) {
        ls[k].attn.output_norm = ls[k].ffn.output_norm = 1;
        ls[k].attn.branch_scale = ls[k].ffn.branch_scale = NB_BRANCH_SCALE_CHANNEL;
        ls[k].ffn.post_norm = 1;
    }
    for (i = 0; i < 2; i++) {
        int found = 1, j;
        d = base_desc(i ? NB_PRESET_DEFAULT : NB_PRESET_SANDWICH, 2);
        d.layers = i ? ls : NULL;
        traced_pair(i ? "custom" : "sandwich", &d, rng, &a, &b, &log);
        for (j = 0; j < 2; j++) {
            for (k = 0; k < log.n && strcmp(log.names[k], normed[j]); k++) {}
            found &= k < log.n;
        }
        nbt_check(found, i ? "trace: output norms traced (custom)"
                           : "trace: output norms traced (sandwich)");
        teardown(&a);
        teardown(&b);
    }
}

#ifndef NB_DOUBLE
/* BF16: an input norm whose output only its sublayer's GEMMs read writes the sublayer's bf16
   copy itself, and no float copy is cached (the stack's cache is the float32 stack's less the
   plans' own savings and less B*T*d per such sublayer). Traced, the stack takes the float path
   (the whole norm, then the conversion, as before): the same bits either way. The placements:
   Pre-Norm, sandwich (output norms too), mHC (the hyper-connections' layer), a Post-Norm layer
   under a Pre-Norm one (no input norm: nothing changes there). */
static void bf16_normed_inputs(void) {
    static const nb_preset presets[] = {NB_PRESET_PRE, NB_PRESET_SANDWICH, NB_PRESET_MHC,
                                        NB_PRESET_MIXLN};
    size_t i;
    for (i = 0; i < sizeof presets / sizeof presets[0]; i++) {
        nbt_rng rng = {0xB16 + i};
        nb_stack_desc d = base_desc(presets[i], 2);
        nb_ctx ctx;
        nb_stack f32;
        run a, b;
        trace_log log;
        char name[128];
        size_t want;
        int l, k, h16 = 0;
        d.mixln_alpha = 0.5; /* Mix-LN: one Post-Norm layer of two */
        memset(&ctx, 0, sizeof ctx);
        if (!nbt_check(nb_stack_init(&ctx, &f32, &d, 2, 3) == NB_OK, "bf16 inputs: float32 init"))
            return;
        d.gemm.precision = NB_PRECISION_BF16;
        snprintf(name, sizeof name, "bf16 (%s)", nb_preset_name(presets[i]));
        traced_pair(name, &d, &rng, &a, &b, &log);
        want = f32.n_cache;
        for (l = 0; l < 2; l++) {
            want -= f32.layers[l].attn.n_cache - a.s.layers[l].attn.n_cache;
            for (k = 0; k < 2; k++) {
                const nb_placement* pl = k ? &a.s.layers[l].desc.ffn : &a.s.layers[l].desc.attn;
                if (pl->input_norm && !pl->residual_from_norm) want -= 2 * 3 * 8, h16++;
            }
        }
        want -= 2 * (f32.ffn.n_cache - a.s.ffn.n_cache);
        snprintf(name, sizeof name, "bf16 inputs: no float copy of %d normed inputs cached (%s)",
                 h16, nb_preset_name(presets[i]));
        nbt_check(h16 > 0 && a.s.n_cache == want, name);
        nb_stack_free(&f32);
        teardown(&a);
        teardown(&b);
    }
}

/* BF16 backward: the norm backward that finishes a sublayer's incoming gradient writes the bf16
   copy its GEMMs read (the FFN's input norm for the attention, the next layer's attention
   input norm or the final norm for the FFN below it), so the only conversion passes left are
   those of gradients no norm finishes: counted from the placements, against the profile's
   conversion calls. The packed attention products round dO (the output projection's dX)
   themselves, once a layer, where the GEMM did not write it in bf16 (oneDNN does). The values
   are the conversions' (the fixtures test them). */
static void bf16_grad_copies(void) {
    static const nb_preset presets[] = {NB_PRESET_PRE, NB_PRESET_MIXLN, NB_PRESET_POST};
    size_t i;
    for (i = 0; i < sizeof presets / sizeof presets[0]; i++) {
        nbt_rng rng = {0xC0B16 + i};
        nb_stack_desc d = base_desc(presets[i], 3);
        nb_profile prof;
        run a;
        char name[128];
        long long want = 0;
        int l;
        d.mixln_alpha = 0.34; /* Mix-LN: one Post-Norm layer of three */
        d.norm.final = 1; /* the final norm's dx: the top FFN's gradient */
        d.gemm.precision = NB_PRECISION_BF16;
        if (!nbt_check(setup(&a, &d, 2, 3, &rng, 2), "bf16 gradient copies: setup")) return;
        for (l = 0; l < 3; l++) {
            const nb_layer_desc* ld = &a.s.layers[l].desc;
            /* the norm backward above: the next layer's attention input norm, or the final */
            const int above = l < 2 ? a.s.layers[l + 1].desc.attn.input_norm : 1;
            want += !(nb__branch_reads_dout(&ld->ffn) && above);
            want += !(nb__branch_reads_dout(&ld->attn) && ld->ffn.input_norm);
            /* dO, unless the output projection's GEMM wrote it in bf16 itself (oneDNN) */
            want += a.s.layers[l].attn.bf16_attn != NB__ATTN_EMULATED &&
                    a.s.desc.gemm.backend != NB_BACKEND_DNNL;
        }
        memset(&prof, 0, sizeof prof);
        loss(&a);
        a.ctx.profile = &prof;
        nb_stack_backward(&a.ctx, &a.s, a.params, a.grads, a.din, a.dout, 2, 3, a.cache,
                          a.scratch);
        snprintf(name, sizeof name, "bf16 gradient copies: %lld conversion passes in the "
                 "backward, %lld expected (%s)", prof.calls[NB_PROF_CONVERT], want,
                 nb_preset_name(presets[i]));
        nbt_check(prof.calls[NB_PROF_CONVERT] == want && want < 3 * 3, name);
        teardown(&a);
    }
}
#endif

/* Name maps: every mapped tensor's parts tile its rows, no two tensors share an outside name,
   and the names are the codebases' own (the Mix-LN code's Llama for pre, Post-LN and sandwich
   layers; HF GPT-2 with its Conv1D transposed). */
static const char* part_name(const nb_stack* s, const char* lib, nb_name_style style, int k) {
    static nb_tensor_part parts[3];
    int t;
    for (t = 0; t < s->n_tensors; t++)
        if (!strcmp(s->tensors[t].name, lib) && nb_stack_tensor_parts(s, t, style, parts) > k)
            return parts[k].name;
    return "";
}
static void name_maps(void) {
    static const struct { const char* preset; int L; nb_name_style style; } cases[] = {
        {"pre", 2, NB_NAMES_HF_LLAMA}, {"mixln", 4, NB_NAMES_HF_LLAMA},
        {"sandwich", 1, NB_NAMES_HF_LLAMA}, {"gpt2", 2, NB_NAMES_HF_GPT2},
        {"hybrid", 2, NB_NAMES_NORMBLOCKS}, {"ngpt", 2, NB_NAMES_NGPT}};
    nb_ctx ctx;
    size_t c;
    memset(&ctx, 0, sizeof ctx);
    for (c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        nb_stack_desc d = base_desc(NB_PRESET_DEFAULT, cases[c].L);
        nb_stack s;
        char names[64][96], what[96];
        int t, u, n_names = 0, tiles = 1, unique = 1;
        nb_preset_from_name(NULL, &d, cases[c].preset);
        if (cases[c].style == NB_NAMES_NGPT) d.n_kv_heads = 2;
        if (!nbt_check(nb_stack_init(&ctx, &s, &d, 1, 2) == NB_OK, "name maps: stack")) continue;
        for (t = 0; t < s.n_tensors; t++) {
            nb_tensor_part parts[3];
            const int n = nb_stack_tensor_parts(&s, t, cases[c].style, parts);
            int k, at = 0;
            for (k = 0; k < n; k++) {
                tiles &= parts[k].row0 == at;
                at += parts[k].rows;
                for (u = 0; u < n_names; u++) unique &= strcmp(names[u], parts[k].name) != 0;
                if (n_names < 64) memcpy(names[n_names++], parts[k].name, sizeof names[0]);
            }
            tiles &= n == 0 || at == s.tensors[t].rows;
        }
        snprintf(what, sizeof what, "name maps of %s: parts tile the rows, names unique",
                 cases[c].preset);
        nbt_check(tiles && unique && n_names > 0, what);
        if (cases[c].style == NB_NAMES_NGPT) { /* every tensor has its model.py name */
            static const char* const want[] = {
                "transformer.h.1.query.weight", "transformer.h.1.key.weight",
                "transformer.h.1.value.weight", "transformer.h.1.att_c_proj.weight",
                "transformer.h.1.c_fc.weight", "transformer.h.1.mlp_c_proj.weight",
                "transformer.h.1.sqk", "transformer.h.1.suv", "transformer.h.1.attn_alpha",
                "transformer.h.1.mlp_alpha"};
            int all = n_names == 20, w;
            for (w = 0; w < 10; w++) {
                int found = 0;
                for (u = 0; u < n_names; u++) found |= !strcmp(names[u], want[w]);
                all &= found;
            }
            nbt_check(all, "name maps: ngpt, every tensor named as NVIDIA/ngpt's model.py");
        }
        if (!strcmp(cases[c].preset, "pre")) {
            nbt_check(!strcmp(part_name(&s, "blocks.1.att_proj.weight", NB_NAMES_HF_LLAMA, 1),
                              "model.layers.1.self_attn.k_proj.weight") &&
                      !strcmp(part_name(&s, "blocks.0.ff_proj.weight", NB_NAMES_HF_LLAMA, 1),
                              "model.layers.0.mlp.gate_proj.weight") &&
                      !strcmp(part_name(&s, "blocks.0.ff_norm.weight", NB_NAMES_HF_LLAMA, 0),
                              "model.layers.0.post_attention_layernorm.weight") &&
                      !strcmp(part_name(&s, "ln_f.weight", NB_NAMES_HF_LLAMA, 0),
                              "model.norm.weight"), "name maps: HF Llama Pre-Norm");
        } else if (!strcmp(cases[c].preset, "mixln")) { /* layer 0 Post-LN, the rest Pre-LN */
            nbt_check(!strcmp(part_name(&s, "blocks.0.attn_post_norm.weight", NB_NAMES_HF_LLAMA, 0),
                              "model.layers.0.post_attention_layernorm.weight") &&
                      !strcmp(part_name(&s, "blocks.0.ff_post_norm.weight", NB_NAMES_HF_LLAMA, 0),
                              "model.layers.0.post_feedforward_layernorm.weight") &&
                      !strcmp(part_name(&s, "blocks.1.attn_norm.weight", NB_NAMES_HF_LLAMA, 0),
                              "model.layers.1.input_layernorm.weight"),
                      "name maps: the Mix-LN code's Post-LN and Pre-LN layers");
        } else if (!strcmp(cases[c].preset, "sandwich")) {
            nbt_check(!strcmp(part_name(&s, "blocks.0.attn_out_norm.weight", NB_NAMES_HF_LLAMA, 0),
                              "model.layers.0.post_attention_layernorm.weight") &&
                      !strcmp(part_name(&s, "blocks.0.ff_norm.weight", NB_NAMES_HF_LLAMA, 0),
                              "model.layers.0.pre_feedforward_layernorm.weight"),
                      "name maps: the Mix-LN code's sandwich norms");
        } else if (!strcmp(cases[c].preset, "gpt2")) {
            nb_tensor_part parts[3];
            nbt_check(nb_stack_tensor_parts(&s, 0, NB_NAMES_HF_GPT2, parts) == 1 &&
                      !strcmp(parts[0].name, "transformer.h.0.attn.c_attn.weight") &&
                      parts[0].transposed && !strcmp(part_name(&s, "blocks.1.ff_norm.bias",
                      NB_NAMES_HF_GPT2, 0), "transformer.h.1.ln_2.bias"),
                      "name maps: HF GPT-2, Conv1D transposed");
            for (t = 0; t < s.n_tensors; t++) { /* nn.Linear GPT-2: HF's names, untransposed */
                nb_tensor_part hf[3], lin[3];
                const int nh = nb_stack_tensor_parts(&s, t, NB_NAMES_HF_GPT2, hf);
                unique &= nb_stack_tensor_parts(&s, t, NB_NAMES_GPT2_LINEAR, lin) == nh &&
                          nh == 1 && !strcmp(hf[0].name, lin[0].name) && !lin[0].transposed &&
                          lin[0].rows == hf[0].rows;
            }
            nbt_check(unique, "name maps: GPT-2 nn.Linear (nanoGPT, llm.c): the same names, "
                      "nothing transposed");
        }
        {
            nb_tensor_part parts[3];
            nbt_check(nb_stack_tensor_parts(&s, s.n_tensors, cases[c].style, parts) == -1 &&
                      nb_stack_tensor_parts(NULL, 0, cases[c].style, parts) == -1 &&
                      nb_stack_tensor_parts(&s, 0, (nb_name_style)7, parts) == -1,
                      "name maps: bad arguments give -1");
        }
        nb_stack_free(&s);
    }
}

/* A gated attention's att_proj (and its bias) has no name in the foreign layouts: none holds
   the gate's rows; the library's own names take it whole. */
static void gate_names(void) {
    nb_stack_desc d = base_desc(NB_PRESET_DEFAULT, 1);
    nb_stack s;
    int t, ok = 1, seen = 0;
    nb_preset_from_name(NULL, &d, "gpt2");
    d.attn.gate = NB_GATE_HEADWISE; d.attn.rope = 0; d.n_kv_heads = 2;
    if (!nbt_check(nb_stack_init(NULL, &s, &d, 1, 3) == NB_OK, "gated gpt2 stack")) return;
    for (t = 0; t < s.n_tensors; t++) {
        nb_tensor_part parts[3];
        nb_name_style st;
        if (strncmp(s.tensors[t].name, "blocks.0.att_proj.", 18)) continue;
        seen++;
        for (st = NB_NAMES_HF_LLAMA; st <= NB_NAMES_NGPT; st = (nb_name_style)(st + 1))
            ok &= nb_stack_tensor_parts(&s, t, st, parts) == 0;
        ok &= nb_stack_tensor_parts(&s, t, NB_NAMES_NORMBLOCKS, parts) == 1 &&
              parts[0].rows == 8 + 2 * 8 + 2;
    }
    nbt_check(ok && seen == 2, "name maps: a gated att_proj (weight, bias) has no foreign name");
    nb_stack_free(&s);
    d = base_desc(NB_PRESET_PRE, 2);
    d.attn.sink = NB_SINK_LEARNED;
    if (!nbt_check(nb_stack_init(NULL, &s, &d, 1, 3) == NB_OK, "a stack with learned sinks")) return;
    for (t = 0, seen = 0; t < s.n_tensors; t++) {
        nb_tensor_part parts[3];
        if (strcmp(s.tensors[t].name, "blocks.1.sinks")) continue;
        seen = s.tensors[t].kind == NB_TENSOR_SINKS && s.tensors[t].no_decay &&
               s.tensors[t].count == (size_t)d.n_heads &&
               nb_stack_tensor_parts(&s, t, NB_NAMES_HF_LLAMA, parts) == 1 &&
               !strcmp(parts[0].name, "model.layers.1.self_attn.sinks") &&
               nb_stack_tensor_parts(&s, t, NB_NAMES_HF_GPT2, parts) == 0;
    }
    nbt_check(seen, "name maps: blocks.1.sinks is gpt-oss's model.layers.1.self_attn.sinks (H "
              "values, no decay), none in GPT-2's");
    nb_stack_free(&s);
}

/* nb_stack_gate_stats against the gate logits the trace hook sees (the raw projection's last
   G columns of each layer's "qkv"), through an independent sigmoid and mean: headwise and
   elementwise, 2 layers, a skipped layer 0; without gates NB_ERR_CONFIG. */
typedef struct gate_trace { double want[2][2]; int G, P, rows, seen; } gate_trace;
static void on_gate_trace(void* user, const char* name, const nb_real* x, int rows, int cols) {
    gate_trace* g = (gate_trace*)user;
    int l, h, r, j;
    if (!strcmp(name, "blocks.0.attn.qkv")) l = 0;
    else if (!strcmp(name, "blocks.1.attn.qkv")) l = 1;
    else return;
    if (cols != g->P) return;
    g->seen++;
    for (h = 0; h < 2; h++) {
        const int per = g->G / 2;
        double sum = 0;
        for (r = 0; r < rows; r++)
            for (j = 0; j < per; j++)
                sum += 1 / (1 + exp(-(double)x[(size_t)r * cols + (cols - g->G) + h * per + j]));
        g->want[l][h] = sum / ((double)rows * per);
    }
}
static void gate_stats(nbt_rng* rng) {
    int k;
    for (k = 0; k < 2; k++) {
        nb_stack_desc d = base_desc(NB_PRESET_PRE, 2);
        gate_trace g;
        run r;
        double got[4] = {-1, -1, -1, -1};
        int l, h, ok = 1;
        char name[96];
        d.attn.gate = k ? NB_GATE_ELEMENTWISE : NB_GATE_HEADWISE;
        if (!nbt_check(setup(&r, &d, 2, 3, rng, 1), "gated stack")) return;
        memset(&g, 0, sizeof g);
        g.G = r.s.layers[0].attn.gate_width; g.P = r.s.layers[0].attn.qkv_width;
        r.ctx.trace = on_gate_trace; r.ctx.trace_user = &g;
        loss(&r);
        l = nb_stack_gate_stats(&r.s, r.cache, 2, 3, got);
        snprintf(name, sizeof name, "gate stats (rc %d, %d traces)", l, g.seen);
        nbt_check(l == NB_OK && g.seen == 2, name);
        for (l = 0; l < 2; l++)
            for (h = 0; h < 2; h++) ok &= fabs(got[l * 2 + h] - g.want[l][h]) <= 1e-6 + 1e-5 * g.want[l][h];
        snprintf(name, sizeof name, "%s gates: each head's mean sigmoid(G) (%.4f %.4f %.4f %.4f)",
                 k ? "elementwise" : "headwise", got[0], got[1], got[2], got[3]);
        nbt_check(ok && got[0] != got[1], name);
        r.s.skip[0] = 1;
        loss(&r);
        nbt_check(nb_stack_gate_stats(&r.s, r.cache, 2, 3, got) == NB_OK && got[0] == 0 && got[1] == 0 &&
                      fabs(got[2] - g.want[1][0]) <= 1e-6 + 1e-5 * g.want[1][0],
                  "gate stats: a skipped layer's are 0");
        r.ctx.trace = NULL;
        teardown(&r);
    }
    {
        nb_stack_desc d = base_desc(NB_PRESET_PRE, 1);
        run r;
        double got[2];
        if (!nbt_check(setup(&r, &d, 1, 2, rng, 1), "ungated stack")) return;
        loss(&r);
        nbt_check(nb_stack_gate_stats(&r.s, r.cache, 1, 2, got) == NB_ERR_CONFIG &&
                      nb_stack_gate_stats(&r.s, r.cache, 1, 2, NULL) == NB_ERR_NULL,
                  "gate stats: NB_ERR_CONFIG without gates, NB_ERR_NULL without out");
        teardown(&r);
    }
}

/* Each preset's paper-code init comes from the library's preset table. */
static void preset_inits(void) {
    static const struct { const char* name; nb_init_scheme want; double std0; } cases[] = {
        {"pre", NB_INIT_NORMAL, 0}, {"post", NB_INIT_MIXLN, 0}, {"lns", NB_INIT_MIXLN, 0},
        {"hybrid_star", NB_INIT_MEGATRON, 0}, {"QK-Post", NB_INIT_MEGATRON, 0},
        {"olmo2", NB_INIT_NORMAL, 0.02}, {"deepnorm_mixln", NB_INIT_DEEPNORM, 0},
        {"siamese_post_pre", NB_INIT_MITCHELL, 0}, {"gpt2", NB_INIT_GPT2, 0},
        {"rezero", NB_INIT_NORMAL, 0}};
    nb_layer_desc ls[1];
    size_t i;
    for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        nb_stack_desc d = base_desc(NB_PRESET_DEFAULT, 1);
        double std0 = -1;
        char name[96];
        nb_preset_from_name(NULL, &d, cases[i].name);
        snprintf(name, sizeof name, "paper init of %s", cases[i].name);
        nbt_check(nb_preset_init(&d, &std0) == cases[i].want && std0 == cases[i].std0, name);
    }
    {
        nb_stack_desc d = base_desc(NB_PRESET_DEFAULT, 1);
        memset(ls, 0, sizeof ls);
        d.layers = ls;
        nbt_check(nb_preset_init(&d, NULL) == NB_INIT_NORMAL && nb_preset_init(NULL, NULL) ==
                  NB_INIT_NORMAL, "paper init of a custom schedule and of no desc: normal");
    }
}

static void bad_configs(void) {
    nb_ctx ctx;
    nb_stack s;
    nb_stack_desc d = base_desc(NB_PRESET_MIXLN, 3);
    nb_layer_desc ls[2];
    memset(&ctx, 0, sizeof ctx);
    d.mixln_alpha = 1.5;
    nbt_check(nb_stack_init(&ctx, &s, &d, 1, 4) == NB_ERR_CONFIG && strstr(ctx.err, "mixln_alpha"),
              "Mix-LN alpha outside [0, 1] rejected");
    d.mixln_alpha = -0.5;
    nbt_check(nb_stack_init(&ctx, &s, &d, 1, 4) == NB_ERR_CONFIG && strstr(ctx.err, "mixln_alpha"),
              "Mix-LN alpha negative other than -1 rejected");
    d = base_desc(NB_PRESET_SIAMESE, 2);
    d.siamese.paper_scale = 3;
    nbt_check(nb_stack_init(&ctx, &s, &d, 1, 4) == NB_ERR_CONFIG &&
                  strstr(ctx.err, "siamese.paper_scale"), "unknown SiameseNorm c_l form rejected");
    d.siamese.paper_scale = 0;
    d.preset = NB_PRESET_SIAMESE_POST_PRE; d.siamese.no_fusion_norm = 1;
    nbt_check(nb_stack_init(&ctx, &s, &d, 1, 4) == NB_ERR_CONFIG &&
                  strstr(ctx.err, "siamese.no_fusion_norm"),
              "fusion-norm ablation outside the hybrid-pre form rejected");
    d.preset = NB_PRESET_SIAMESE; d.siamese.no_fusion_norm = 0;
    d.norm.final = -1;
    nbt_check(nb_stack_init(&ctx, &s, &d, 1, 4) == NB_ERR_CONFIG, "SiameseNorm without fusion rejected");
    memset(ls, 0, sizeof ls);
    ls[1].ffn.residual_from_norm = 1;
    d = base_desc(NB_PRESET_DEFAULT, 2);
    d.layers = ls;
    nbt_check(nb_stack_init(&ctx, &s, &d, 1, 4) == NB_ERR_CONFIG && strstr(ctx.err, "layer 1"),
              "residual_from_norm without input_norm rejected, layer named");
    ls[1].ffn.input_norm = 1; ls[1].attn.input_scale = 0.5f;
    nbt_check(nb_stack_init(&ctx, &s, &d, 1, 4) == NB_ERR_CONFIG && strstr(ctx.err, "input_scale"),
              "input_scale without input_norm rejected");
    ls[1].attn.input_norm = 1; ls[1].attn.input_scale = -1;
    nbt_check(nb_stack_init(&ctx, &s, &d, 1, 4) == NB_ERR_CONFIG && strstr(ctx.err, "input_scale"),
              "negative input_scale rejected");
    ls[1].attn.input_scale = (nb_real)nbt_inf(1);
    nbt_check(nb_stack_init(&ctx, &s, &d, 1, 4) == NB_ERR_CONFIG, "infinite input_scale rejected");
    ls[1].attn.input_scale = 0;
    d.preset = NB_PRESET_HYBRID;
    nbt_check(nb_stack_init(&ctx, &s, &d, 1, 4) == NB_ERR_CONFIG, "preset and schedule together rejected");
    d = base_desc(NB_PRESET_PRE, 2);
    d.n_heads = 3;
    nbt_check(nb_stack_init(&ctx, &s, &d, 1, 4) == NB_ERR_CONFIG, "d not divisible by H rejected");
    d = base_desc((nb_preset)99, 2);
    nbt_check(nb_stack_init(&ctx, &s, &d, 1, 4) == NB_ERR_CONFIG, "unknown preset rejected");
    d = base_desc(NB_PRESET_PRE, 0);
    nbt_check(nb_stack_init(&ctx, &s, &d, 1, 4) == NB_ERR_CONFIG, "zero layers rejected");
    nbt_check(nb_preset_from_name(&ctx, &d, "QQ-Post") == NB_ERR_CONFIG &&
                  strstr(ctx.err, "QQ-Post"), "unknown preset name rejected");
    nbt_check(nb_preset_from_name(&ctx, &d, "Pre-QKVC-Post") == NB_OK &&
                  d.preset == NB_PRESET_PRE_SITES_POST && d.attn.sites == NB_SITES_QKVC,
              "Pre-QKVC-Post parses");
    nbt_check(nb_preset_from_name(&ctx, &d, "HybridNorm*") == NB_OK &&
                  d.preset == NB_PRESET_HYBRID_STAR, "HybridNorm* parses");
    d = base_desc(NB_PRESET_PRE, 2);
    nb_stack_init(&ctx, &s, &d, 1, 4);
    {
        nb_real x[64], o[64];
        nbt_check(nb_stack_forward(&ctx, &s, x, o, x, 1, 5, x, x) == NB_ERR_SHAPE,
                  "T beyond the stack's maximum rejected");
        nbt_check(nb_stack_forward(&ctx, &s, NULL, o, x, 1, 4, x, x) == NB_ERR_NULL,
                  "NULL params rejected");
    }
    nb_stack_free(&s);
}

/* Value residual (ResFormer): exact properties of the mix, in both builds. Learnable lambdas
   (1, 0) are the stack without it and (0.5, 0.5) its fixed form (outputs and every shared
   gradient); (0, 1) in layer 1 makes its attention read V_0 only, so its own V rows get exactly
   zero gradient; the fixed form changes the output (the mix is not a no-op); the table, the
   init, the cache and scratch growth, and the refusals (skipped layer 0, a bad mode). */
static void copy_by_name(run* dst, run* src) {
    int t;
    for (t = 0; t < dst->s.n_tensors; t++) {
        const nb_tensor_info* ti = &dst->s.tensors[t];
        const nb_real* from = tensor(src, ti->name);
        if (from) memcpy(dst->params + ti->offset, from, ti->count * sizeof(nb_real));
    }
    memcpy(dst->in, src->in, (size_t)src->B * src->T * src->s.desc.d_model * sizeof(nb_real));
    memcpy(dst->dout, src->dout, (size_t)src->B * src->T * src->s.desc.d_model * sizeof(nb_real));
}
static void same_grads(const char* what, run* a, run* b) { /* every tensor of a found in b */
    char name[160];
    int t;
    for (t = 0; t < a->s.n_tensors; t++) {
        const nb_tensor_info* ti = &a->s.tensors[t];
        int u;
        for (u = 0; u < b->s.n_tensors; u++)
            if (!strcmp(b->s.tensors[u].name, ti->name)) break;
        if (u == b->s.n_tensors) continue;
        snprintf(name, sizeof name, "%s: gradient of %s", what, ti->name);
        nbt_close_r(name, a->grads + ti->offset, b->grads + b->s.tensors[u].offset, ti->count,
                    NBT_ATOL, NBT_RTOL);
    }
    snprintf(name, sizeof name, "%s: input gradient", what);
    nbt_close_r(name, a->din, b->din, (size_t)a->B * a->T * a->s.desc.d_model, NBT_ATOL, NBT_RTOL);
}
/* every lambda pair of a kind (the value residual's, the value embeddings') */
static void set_lambdas(run* r, nb_tensor_kind kind, nb_real l1, nb_real l2) {
    int t;
    for (t = 0; t < r->s.n_tensors; t++)
        if (r->s.tensors[t].kind == kind) {
            r->params[r->s.tensors[t].offset] = l1;
            r->params[r->s.tensors[t].offset + 1] = l2;
        }
}
static void value_residual_props(nbt_rng* rng) {
    static const char* const presets[] = {"pre", "hybrid", "siamese"};
    size_t i;
    for (i = 0; i < sizeof presets / sizeof presets[0]; i++) {
        nb_stack_desc d = base_desc(NB_PRESET_DEFAULT, 3);
        run off, fixed, learn;
        char what[96];
        double diff = 0;
        size_t j, n;
        int t, found = 0, vrows_zero = 1;
        nb_preset_from_name(NULL, &d, presets[i]);
        d.n_kv_heads = i == 1 ? 2 : 1;
        if (!nbt_check(setup(&off, &d, 2, 5, rng, 2), "value residual: the plain stack")) return;
        d.residual.value_residual = 1;
        if (!nbt_check(setup(&fixed, &d, 2, 5, rng, 2), "value residual: fixed")) return;
        d.residual.value_residual = 2;
        if (!nbt_check(setup(&learn, &d, 2, 5, rng, 2), "value residual: learnable")) return;
        copy_by_name(&fixed, &off);
        copy_by_name(&learn, &off);
        n = (size_t)2 * 5 * 8;
        /* the table: one lambda pair per layer l >= 1, none in layer 0 or the fixed form */
        for (t = 0; t < learn.s.n_tensors; t++) {
            const nb_tensor_info* ti = &learn.s.tensors[t];
            if (ti->kind != NB_TENSOR_VALUE_RESIDUAL) continue;
            snprintf(what, sizeof what, "blocks.%d.value_residual.lambda", found + 1);
            nbt_check(!strcmp(ti->name, what) && ti->count == 2 && ti->no_decay &&
                          ti->layer == found + 1, "value residual: the lambdas' table row");
            found++;
        }
        nbt_check(found == 2 && learn.s.n_tensors == off.s.n_tensors + 2 &&
                      fixed.s.n_tensors == off.s.n_tensors,
                  "value residual: a pair of lambdas in layers 1 and 2 only (learnable form)");
        {   /* the growth documented at nb_stack_desc.value_residual */
            const size_t V = nb__pad((size_t)2 * 5 * d.n_kv_heads * 4);
            nbt_check(fixed.s.n_cache == off.s.n_cache + V &&
                          fixed.s.n_scratch == off.s.n_scratch + V &&
                          learn.s.n_cache == off.s.n_cache + 3 * V &&
                          learn.s.n_scratch == off.s.n_scratch + V,
                      "value residual: cache +V_0 (+V_l per layer l >= 1 learnable), scratch +dV_0");
        }
        nbt_check(nb_stack_init_params(NULL, &learn.s, learn.params, NB_INIT_NORMAL, 0, 7) == NB_OK,
                  "value residual: init_params");
        for (t = 0; t < learn.s.n_tensors; t++)
            if (learn.s.tensors[t].kind == NB_TENSOR_VALUE_RESIDUAL)
                nbt_check(learn.params[learn.s.tensors[t].offset] == 0.5 &&
                              learn.params[learn.s.tensors[t].offset + 1] == 0.5,
                          "value residual: the lambdas start at 0.5");
        copy_by_name(&learn, &off);
        grads(&off);
        grads(&fixed);
        set_lambdas(&learn, NB_TENSOR_VALUE_RESIDUAL, 1, 0);
        grads(&learn);
        snprintf(what, sizeof what, "value residual %s: lambdas (1, 0) = off", presets[i]);
        nbt_close_r(what, learn.out, off.out, n, NBT_ATOL, NBT_RTOL);
        same_grads(what, &off, &learn);
        set_lambdas(&learn, NB_TENSOR_VALUE_RESIDUAL, 0.5, 0.5);
        grads(&learn);
        snprintf(what, sizeof what, "value residual %s: lambdas (0.5, 0.5) = fixed", presets[i]);
        nbt_close_r(what, learn.out, fixed.out, n, NBT_ATOL, NBT_RTOL);
        same_grads(what, &fixed, &learn);
        for (j = 0; j < n; j++) diff = fmax(diff, fabs((double)fixed.out[j] - off.out[j]));
        snprintf(what, sizeof what, "value residual %s: the fixed mix changes the output (%g)",
                 presets[i], diff);
        nbt_check(diff > 1e-3, what);
        /* layer 1 reads V_0 only: its own V rows (after Q and K) get no gradient */
        set_lambdas(&learn, NB_TENSOR_VALUE_RESIDUAL, 0, 1);
        grads(&learn);
        for (t = 0; t < learn.s.n_tensors; t++)
            if (!strcmp(learn.s.tensors[t].name, "blocks.1.att_proj.weight")) {
                const nb_real* g = learn.grads + learn.s.tensors[t].offset;
                const size_t v0 = (size_t)(8 + d.n_kv_heads * 4) * 8, vn = (size_t)d.n_kv_heads * 4 * 8;
                for (j = v0; j < v0 + vn; j++) vrows_zero &= g[j] == 0;
                nbt_check(g[0] != 0, "value residual (0, 1): layer 1's Q rows still learn");
            }
        snprintf(what, sizeof what, "value residual %s: lambdas (0, 1) leave layer 1's V rows "
                 "without gradient", presets[i]);
        nbt_check(vrows_zero, what);
        /* layer 0 skipped: no V_0 to mix */
        learn.s.skip[0] = 1;
        nbt_check(nb_stack_forward(&learn.ctx, &learn.s, learn.params, learn.out, learn.in, 2, 5,
                                   learn.cache, learn.scratch) == NB_ERR_CONFIG &&
                      strstr(learn.ctx.err, "value_residual") != NULL,
                  "value residual: skipping layer 0 is refused, naming value_residual");
        learn.s.skip[0] = 0;
        teardown(&off); teardown(&fixed); teardown(&learn);
    }
    {
        nb_stack_desc d = base_desc(NB_PRESET_PRE, 2);
        nb_stack s;
        nb_ctx ctx;
        memset(&ctx, 0, sizeof ctx);
        d.residual.value_residual = 3;
        nbt_check(nb_stack_init(&ctx, &s, &d, 2, 4) == NB_ERR_CONFIG &&
                      strstr(ctx.err, "value_residual") != NULL,
                  "value residual: an unknown mode is refused, naming the field");
    }
}

/* Hyper-connections: their tables, inits, the model they start as, the layer API on n
   streams, the gains against a direct computation from the traced maps, bad descriptions. */
typedef struct hc_trace { nb_real* maps[8]; int W, rows, q; } hc_trace;
static void keep_maps(void* user, const char* name, const nb_real* x, int rows, int cols) {
    hc_trace* t = (hc_trace*)user;
    if (!strstr(name, ".hc_maps") || t->q >= 8) return;
    t->maps[t->q] = nbt_alloc((size_t)rows * cols);
    memcpy(t->maps[t->q++], x, (size_t)rows * cols * sizeof(nb_real));
    t->W = cols; t->rows = rows;
}

/* the Amax gains of nb_stack_hyper_gains, from the traced comb of each sublayer */
static void direct_gains(const hc_trace* t, int n, double* fwd, double* bwd, double* single) {
    int q, row, i, j, k, dir;
    for (q = 0; q < t->q; q++) fwd[q] = bwd[q] = single[q] = 0;
    for (row = 0; row < t->rows; row++)
        for (dir = 0; dir < 2; dir++) {
            double P[64], R[64];
            for (i = 0; i < n * n; i++) P[i] = i % (n + 1) == 0;
            for (q = 0; q < t->q; q++) {
                const int at = dir ? t->q - 1 - q : q;
                const nb_real* comb = t->maps[at] + (size_t)row * t->W + 2 * n;
                double best = 0, one = 0;
                for (i = 0; i < n; i++)
                    for (j = 0; j < n; j++) { /* H = comb^T: H[i][k] = comb[k][i] */
                        double acc = 0;
                        for (k = 0; k < n; k++)
                            acc += dir ? P[i * n + k] * comb[j * n + k]
                                       : comb[k * n + i] * P[k * n + j];
                        R[i * n + j] = acc;
                    }
                memcpy(P, R, sizeof R);
                for (i = 0; i < n; i++) {
                    double sum = 0, h = 0;
                    for (j = 0; j < n; j++) { sum += dir ? P[j * n + i] : P[i * n + j];
                                              h += comb[j * n + i]; }
                    best = fmax(best, fabs(sum));
                    one = fmax(one, fabs(h));
                }
                (dir ? bwd : fwd)[at] += best / t->rows;
                if (!dir) single[at] += one / t->rows;
            }
        }
}

static nb_real* tensor_of(run* r, const char* name, const nb_tensor_info** info) {
    int t;
    for (t = 0; t < r->s.n_tensors; t++)
        if (!strcmp(r->s.tensors[t].name, name)) { *info = &r->s.tensors[t]; return r->params +
                                                                           r->s.tensors[t].offset; }
    *info = NULL;
    return NULL;
}

/* ||got - ref|| <= (NBT_RTOL + rtol) ||ref|| + NBT_ATOL sqrt(n): a tensor against one whose
   every element is re-weighted by the same kind of small change */
static void close_normwise(const char* what, const nb_real* got, const nb_real* ref, size_t n,
                           double rtol) {
    double e2 = 0, r2 = 0, lim;
    char name[160];
    size_t k;
    for (k = 0; k < n; k++) {
        const double dlt = (double)got[k] - (double)ref[k];
        e2 += dlt * dlt;
        r2 += (double)ref[k] * (double)ref[k];
    }
    lim = (NBT_RTOL + rtol) * sqrt(r2) + NBT_ATOL * sqrt((double)n);
    snprintf(name, sizeof name, "%s (normwise %.3g of %.3g allowed)", what, sqrt(e2), lim);
    nbt_check(nbt_finite(e2) && sqrt(e2) <= lim, name);
}

/* d is refused by nb_stack_init with an error naming says (what: the check's name) */
static void refused_naming(nb_stack_desc* d, const char* says, const char* what) {
    nb_stack s;
    nb_ctx ctx;
    memset(&ctx, 0, sizeof ctx);
    nbt_check(nb_stack_init(&ctx, &s, d, 2, 4) == NB_ERR_CONFIG && strstr(ctx.err, says) != NULL,
              what);
    if (!strstr(ctx.err, says)) printf("  %s\n", ctx.err);
}

static void hyper_props(nbt_rng* rng) {
    const size_t n1 = (size_t)2 * 5 * 8;
    {   /* tables: names, shapes, decay, buffer order (the head before ln_f) and inits */
        static const struct { const char* name; int rows, cols, ndim, no_decay; } mhc[] = {
            {"blocks.1.hc_attn_fn", 24, 32, 2, 0}, {"blocks.1.hc_attn_base", 24, 1, 1, 1},
            {"blocks.1.hc_attn_scale", 3, 1, 1, 1}, {"blocks.1.hc_ffn_fn", 24, 32, 2, 0},
            {"hc_head_fn", 4, 32, 2, 0}, {"hc_head_base", 4, 1, 1, 1}, {"hc_head_scale", 1, 1, 1, 1}};
        static const struct { const char* name; int rows, cols, ndim, no_decay; } hc[] = {
            {"blocks.1.hc_attn.static_alpha", 4, 5, 2, 1}, {"blocks.1.hc_attn.static_beta", 4, 1, 1, 1},
            {"blocks.1.hc_attn.dynamic_alpha_fn", 8, 5, 2, 0},
            {"blocks.1.hc_attn.dynamic_alpha_scale", 1, 1, 1, 1},
            {"blocks.1.hc_attn.dynamic_beta_fn", 8, 1, 1, 0},
            {"blocks.1.hc_ffn.norm.weight", 8, 1, 1, 1}};
        nb_stack_desc d = base_desc(NB_PRESET_MHC, 2);
        run a, b;
        const nb_tensor_info* ti;
        nb_real* x;
        size_t i;
        int ok = 1, t;
        double ss = 0;
        if (!nbt_check(setup(&a, &d, 2, 5, rng, 1), "hyper: mhc stack")) return;
        d.preset = NB_PRESET_HC;
        if (!nbt_check(setup(&b, &d, 2, 5, rng, 1), "hyper: hc stack")) return;
        nbt_check(a.s.streams == 4 && b.s.streams == 4 && a.s.desc.hyper.kind == NB_HYPER_MHC &&
                      a.s.desc.hyper.sinkhorn == 20, "hyper: 4 streams and 20 Sinkhorn iterations "
                  "by default");
        for (i = 0; i < sizeof mhc / sizeof mhc[0]; i++) {
            ok &= tensor_of(&a, mhc[i].name, &ti) && ti->rows == mhc[i].rows &&
                  ti->cols == mhc[i].cols && ti->ndim == mhc[i].ndim &&
                  ti->no_decay == mhc[i].no_decay;
        }
        for (i = 0; i < sizeof hc / sizeof hc[0]; i++) {
            ok &= tensor_of(&b, hc[i].name, &ti) && ti->rows == hc[i].rows &&
                  ti->cols == hc[i].cols && ti->ndim == hc[i].ndim && ti->no_decay == hc[i].no_decay;
        }
        nbt_check(ok, "hyper: the tensors' names, shapes, ndim and decay flags");
        nbt_check(!strcmp(a.s.tensors[a.s.n_tensors - 1].name, "ln_f.weight") &&
                      !strcmp(a.s.tensors[a.s.n_tensors - 4].name, "hc_head_fn") &&
                      tensor_of(&b, "hc_head_base", &ti) == NULL,
                  "hyper: mHC's head right before ln_f; HC has none (it sums the streams)");
        nb_stack_init_params(NULL, &a.s, a.params, NB_INIT_NORMAL, 0, 3);
        nb_stack_init_params(NULL, &b.s, b.params, NB_INIT_NORMAL, 0, 3);
        x = tensor_of(&a, "blocks.1.hc_ffn_fn", &ti);
        for (i = 0; i < ti->count; i++) ss += (double)x[i] * x[i];
        ss = sqrt(ss / ti->count);
        ok = ss > 0.018 && ss < 0.022;
        x = tensor_of(&a, "blocks.1.hc_ffn_scale", &ti);
        ok &= x[0] == (nb_real)0.01 && x[2] == (nb_real)0.01;
        x = tensor_of(&a, "blocks.1.hc_ffn_base", &ti);
        for (i = 0; i < ti->count; i++) ok &= x[i] == 0;
        nbt_check(ok, "hyper: mHC init: fn N(0, 0.02^2), base 0, scales 0.01");
        ok = 1;
        for (t = 0; t < 4; t++) { /* k = 2l + s: 0, 1 in layer 0, 2, 3 in layer 1 */
            const char* name = t == 0 ? "blocks.0.hc_attn.static_alpha"
                             : t == 1 ? "blocks.0.hc_ffn.static_alpha"
                             : t == 2 ? "blocks.1.hc_attn.static_alpha" : "blocks.1.hc_ffn.static_alpha";
            int row, c;
            x = tensor_of(&b, name, &ti);
            for (row = 0; row < 4; row++)
                for (c = 0; c < 5; c++)
                    ok &= x[row * 5 + c] == (c == 0 ? row == t : c - 1 == row);
        }
        x = tensor_of(&b, "blocks.0.hc_attn.dynamic_alpha_fn", &ti);
        for (i = 0; i < ti->count; i++) ok &= x[i] == 0;
        x = tensor_of(&b, "blocks.0.hc_attn.static_beta", &ti);
        ok &= x[0] == 1 && x[3] == 1;
        nbt_check(ok, "hyper: HC init: static_alpha [e_(k mod n) | I], static_beta 1, W 0");
        teardown(&a); teardown(&b);
    }
    {   /* the model they start as: HC at its init (one stream, or four identical ones) and
           mHC with fn = 0 are the Pre-Norm stack with the same weights. HC exactly (u = 1 x,
           x' = 1 y + 1 x + 0 ..., the head's n x_L: its RMSNorm eps made negligible). mHC and
           IHC up to their fixed eps = 1e-6 terms, which re-weight the stream: Sinkhorn's fixed
           point is (1 - eps) / n per entry, so each of the 2L = 4 mixes scales the stream by
           1 - eps, and pre's floor eps against sigmoid's 1/2 (with the head's) changes the
           branch inputs by eps relative before their scale-free norms. The final norm passes a
           relative change of the stream's 2L + 1 terms to the output times their cancellation
           Sum |term| / |x_L|, 4 at most here: out within (2L + 1) eps 4 = 2e-5 normwise. dx goes
           back through 2L + 1 norms, each with such a change in its input, whose rstd and
           projection pass it on twice: din within (2L + 1) 2 (2e-5) = 2e-4 normwise. Normwise,
           not per element: a re-weighting of the stream moves an element near 0 by the size of
           its row (per element a draw needed 18x 2e-5). Over 2000 draws (float64) the largest
           were 8.7e-6 and 8.2e-5 (0.44 and 0.41 of these). */
        static const struct { nb_preset preset; int streams, zero_fn; double tol; } st[] = {
            {NB_PRESET_HC, 1, 0, 0}, {NB_PRESET_HC, 4, 0, 0}, {NB_PRESET_MHC, 4, 1, 2e-5},
            {NB_PRESET_IHC, 3, 1, 2e-5}};
        size_t i;
        for (i = 0; i < sizeof st / sizeof st[0]; i++) {
            nb_stack_desc d = base_desc(NB_PRESET_PRE, 2);
            run pre, h;
            char what[96];
            int t;
            d.norm.eps = (nb_real)1e-12;
            if (!nbt_check(setup(&pre, &d, 2, 5, rng, 2), "hyper: pre")) return;
            d.preset = st[i].preset; d.hyper.streams = st[i].streams;
            if (!nbt_check(setup(&h, &d, 2, 5, rng, 2), "hyper: the hyper stack")) return;
            nb_stack_init_params(NULL, &h.s, h.params, NB_INIT_NORMAL, 0, 5);
            for (t = 0; t < h.s.n_tensors && st[i].zero_fn; t++)
                if (h.s.tensors[t].kind == NB_TENSOR_HC_FN)
                    memset(h.params + h.s.tensors[t].offset, 0,
                           h.s.tensors[t].count * sizeof(nb_real));
            copy_by_name(&h, &pre);
            grads(&pre); grads(&h);
            snprintf(what, sizeof what, "hyper %s n=%d at its init = Pre-Norm",
                     nb_preset_name(st[i].preset), st[i].streams);
            if (st[i].tol == 0) {
                nbt_close_r(what, h.out, pre.out, n1, NBT_ATOL, NBT_RTOL);
                same_grads(what, &pre, &h);
            } else {
                close_normwise(what, h.out, pre.out, n1, st[i].tol);
                close_normwise(what, h.din, pre.din, n1, 10 * st[i].tol);
            }
            teardown(&pre); teardown(&h);
        }
    }
    {   /* mHC-lite: its tensors' widths (2n + n!) and init (fn as mHC's; base 0, comb's logits 0
           for the identity and -8 for the other permutations), and comb against the mixture of
           the n! permutation matrices computed here (static maps: a = softmax(base's logits),
           the permutations in lexicographic order, made by this test's own recursion) */
        nb_stack_desc d = base_desc(NB_PRESET_PRE, 2);
        run r;
        hc_trace tr;
        const nb_tensor_info* ti;
        nb_real* x;
        int perm[6][3], np = 0, ok = 1, q, row, c;
        size_t i;
        {   /* lexicographic: the first element in increasing order, then the rest likewise */
            int a, b;
            for (a = 0; a < 3; a++)
                for (b = 0; b < 3; b++)
                    if (b != a) { perm[np][0] = a; perm[np][1] = b; perm[np][2] = 3 - a - b; np++; }
        }
        d.hyper.kind = NB_HYPER_MHC_LITE; d.hyper.streams = 3;
        if (!nbt_check(setup(&r, &d, 2, 5, rng, 1), "mHC-lite: setup")) return;
        nb_stack_init_params(NULL, &r.s, r.params, NB_INIT_NORMAL, 0, 3);
        x = tensor_of(&r, "blocks.1.hc_ffn_base", &ti);
        ok &= ti && ti->count == 2 * 3 + 6;
        for (i = 0; ok && i < ti->count; i++) ok &= x[i] == (i <= 6 ? 0 : -8);
        ok &= tensor_of(&r, "blocks.0.hc_attn_fn", &ti) && ti->rows == 12 && ti->cols == 24;
        ok &= tensor_of(&r, "hc_head_base", &ti) && ti->count == 3;
        nbt_check(ok, "mHC-lite: fn and base 2n + n! wide; base 0 but the other permutations' -8");
        teardown(&r);
        d.hyper.static_maps = 1;
        if (!nbt_check(setup(&r, &d, 2, 5, rng, 1), "mHC-lite static: setup")) return;
        memset(&tr, 0, sizeof tr);
        r.ctx.trace = keep_maps; r.ctx.trace_user = &tr;
        loss(&r);
        r.ctx.trace = NULL;
        ok = tr.q == 4;
        for (q = 0; q < tr.q && ok; q++) {
            char name[48];
            double a[6], sum = 0, M[9] = {0}, worst = 0;
            snprintf(name, sizeof name, "blocks.%d.hc_%s_base", q / 2, q % 2 ? "ffn" : "attn");
            x = tensor_of(&r, name, &ti);
            for (c = 0; c < 6; c++) sum += (a[c] = exp((double)x[6 + c]));
            for (c = 0; c < 6; c++)
                for (row = 0; row < 3; row++) M[row * 3 + perm[c][row]] += a[c] / sum;
            for (row = 0; row < 2 * 5; row++)
                for (c = 0; c < 9; c++)
                    worst = fmax(worst, fabs(tr.maps[q][(size_t)row * tr.W + 6 + c] - M[c]));
            ok &= worst < 4 * (sizeof(nb_real) == 4 ? 1.2e-7 : 2.3e-16);
            if (worst >= 4 * (sizeof(nb_real) == 4 ? 1.2e-7 : 2.3e-16)) printf("  sublayer %d: %g\n", q, worst);
        }
        for (q = 0; q < tr.q; q++) free(tr.maps[q]);
        nbt_check(ok, "mHC-lite: comb = sum_r a_r P_r over the permutations in lexicographic order");
        teardown(&r);
    }
    {   /* the gains: against the traced maps; IHC's and mHC-lite's are 1 both ways; mHC's rows
           sum to 1 */
        static const nb_preset ps[] = {NB_PRESET_HC, NB_PRESET_MHC, NB_PRESET_IHC, NB_PRESET_MHC};
        size_t i;
        for (i = 0; i < 4; i++) {
            nb_stack_desc d = base_desc(ps[i], 3);
            const int exact = ps[i] == NB_PRESET_IHC || i == 3;
            run r;
            hc_trace tr;
            double fwd[6], bwd[6], one[6], f2[6], b2[6], o2[6], worst = 0, rows_off = 0;
            char what[96];
            int q;
            if (i == 3) d.hyper.kind = NB_HYPER_MHC_LITE;
            memset(&tr, 0, sizeof tr);
            if (!nbt_check(setup(&r, &d, 2, 5, rng, 2), "hyper gains: setup")) return;
            r.ctx.trace = keep_maps; r.ctx.trace_user = &tr;
            loss(&r);
            r.ctx.trace = NULL;
            nbt_check(tr.q == 6 && nb_stack_hyper_gains(&r.s, r.cache, 2, 5, fwd, bwd, one) == NB_OK,
                      "hyper gains: six sublayers traced, gains computed");
            direct_gains(&tr, 4, f2, b2, o2);
            for (q = 0; q < 6; q++) {
                worst = fmax(worst, fabs(fwd[q] - f2[q]) / (1 + f2[q]));
                worst = fmax(worst, fabs(bwd[q] - b2[q]) / (1 + b2[q]));
                worst = fmax(worst, fabs(one[q] - o2[q]) / (1 + o2[q]));
                rows_off = fmax(rows_off, fabs(fwd[q] - 1) + (exact ? fabs(bwd[q] - 1) : 0));
            }
            snprintf(what, sizeof what, "hyper gains %s%s: equal the traced maps' products (%g)",
                     nb_preset_name(ps[i]), i == 3 ? "-lite" : "", worst);
            nbt_check(worst < 1e-5, what);
            /* mHC-lite: a sum of 24 coefficients each in [0, 1] per row, rounded, 6 products:
               within 6 (24 + 4) eps of 1 (1e-5 in float) */
            if (ps[i] != NB_PRESET_HC) {
                snprintf(what, sizeof what, "hyper gains %s%s: forward gain 1%s (%g off)",
                         nb_preset_name(ps[i]), i == 3 ? "-lite" : "",
                         exact ? ", backward too" : "", rows_off);
                nbt_check(rows_off < (i == 3 ? 6 * 28 * (sizeof(nb_real) == 4 ? 1.2e-7 : 2.3e-16) : 1e-4), what);
            }
            for (q = 0; q < tr.q; q++) free(tr.maps[q]);
            nbt_check(nb_stack_hyper_gains(&r.s, r.cache, 2, 4, fwd, bwd, NULL) == NB_ERR_CONFIG &&
                          nb_stack_hyper_gains(&r.s, r.cache, 2, 5, NULL, bwd, NULL) == NB_ERR_NULL,
                      "hyper gains: another B, T or a NULL output is refused");
            teardown(&r);
        }
        {   /* static HC with H = 1.5 I in every sublayer: the products are 1.5^k I */
            nb_stack_desc d = base_desc(NB_PRESET_HC, 3);
            run r;
            double fwd[6], bwd[6], one[6], worst = 0;
            int t, q;
            d.hyper.static_maps = 1;
            if (!nbt_check(setup(&r, &d, 2, 5, rng, 1), "hyper gains: static HC")) return;
            for (t = 0; t < r.s.n_tensors; t++)
                if (strstr(r.s.tensors[t].name, "static_alpha")) {
                    nb_real* x = r.params + r.s.tensors[t].offset;
                    int i, c;
                    for (i = 0; i < 4; i++)
                        for (c = 1; c <= 4; c++) x[i * 5 + c] = (nb_real)(c - 1 == i ? 1.5 : 0);
                }
            loss(&r);
            nb_stack_hyper_gains(&r.s, r.cache, 2, 5, fwd, bwd, one);
            for (q = 0; q < 6; q++)
                worst = fmax(worst, fabs(fwd[q] - pow(1.5, q + 1)) + fabs(bwd[q] - pow(1.5, 6 - q)) +
                                    fabs(one[q] - 1.5));
            nbt_check(worst < 1e-9, "hyper gains: H = 1.5 I gives 1.5^(q+1) forward, 1.5^(2L-q) "
                      "backward");
            teardown(&r);
        }
        {
            nb_stack_desc d = base_desc(NB_PRESET_PRE, 1);
            run r;
            double g[2];
            if (!nbt_check(setup(&r, &d, 2, 5, rng, 1), "hyper gains: pre")) return;
            loss(&r);
            nbt_check(nb_stack_hyper_gains(&r.s, r.cache, 2, 5, g, g, NULL) == NB_ERR_CONFIG,
                      "hyper gains: a stack without hyper-connections is refused");
            teardown(&r);
        }
    }
    {   /* the layer API on n consecutive streams reproduces the stack's hidden states */
        nb_stack_desc d = base_desc(NB_PRESET_MHC, 2);
        run r;
        nb_real *in, *out, *dout, *din, *cache2;
        size_t k;
        int ok;
        d.hyper.streams = 3;
        if (!nbt_check(setup(&r, &d, 2, 5, rng, 1), "hyper layer API: setup")) return;
        loss(&r);
        in = nbt_alloc(3 * n1); out = nbt_alloc(3 * n1); dout = nbt_alloc(3 * n1);
        din = nbt_alloc(3 * n1); cache2 = nbt_alloc(r.s.n_cache);
        for (k = 0; k < 3; k++)
            memcpy(in + k * n1, nb_stack_hidden(&r.s, r.cache, 0, (int)k, 2, 5), n1 * sizeof(nb_real));
        ok = nb_layer_forward(&r.ctx, &r.s, 0, r.params, out, in, 2, 5, cache2, r.scratch) == NB_OK;
        for (k = 0; k < 3 && ok; k++)
            ok = !memcmp(out + k * n1, nb_stack_hidden(&r.s, r.cache, 1, (int)k, 2, 5),
                         n1 * sizeof(nb_real));
        nbt_check(ok, "hyper: nb_layer_forward on 3 streams = the stack's layer 0, bitwise");
        nbt_fill(rng, dout, 3 * n1, 0, 1);
        nbt_check(nb_layer_backward(&r.ctx, &r.s, 0, r.params, r.grads, din, dout, in, 2, 5,
                                    cache2, r.scratch) == NB_OK,
                  "hyper: nb_layer_backward on 3 streams");
        free(in); free(out); free(dout); free(din); free(cache2);
        teardown(&r);
    }
    {   /* refused descriptions, each naming its field */
        static const struct { const char* preset; int hyper, streams, stat, iters; const char* says; }
            bad[] = {{"post", NB_HYPER_MHC, 0, 0, 0, "post norm"},
                     {"hybrid", NB_HYPER_HC, 0, 0, 0, "residual from the norm"},
                     {"deepnorm", NB_HYPER_MHC, 0, 0, 0, "post norm"},
                     {"siamese", NB_HYPER_MHC, 0, 0, 0, "SiameseNorm"},
                     {"mhc", 0, 9, 0, 0, "hyper.streams"}, {"mhc", 0, 0, 2, 0, "hyper.static_maps"},
                     {"mhc", 0, 0, 0, 101, "hyper.sinkhorn"}, {"pre", 0, 4, 0, 0, "hyper.streams"},
                     {"pre", 0, 0, 1, 0, "hyper.static_maps"}, {"pre", 7, 0, 0, 0, "unknown hyper"},
                     {"pre", NB_HYPER_MHC_LITE, 6, 0, 0, "n! permutations"},
                     {"pre", NB_HYPER_MHC_LITE, 0, 0, 20, "mHC-lite have no Sinkhorn"},
                     {"mhc", NB_HYPER_NONE, 0, 0, 5, "hyper.sinkhorn"},
                     {"hc", 0, 0, 0, 5, "hyper.sinkhorn"}, {"ihc", 0, 0, 0, 20, "Sinkhorn"}};
        size_t i;
        for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
            nb_stack_desc d = base_desc(NB_PRESET_DEFAULT, 2);
            char what[128];
            nb_preset_from_name(NULL, &d, bad[i].preset);
            d.hyper.kind = (nb_hyper)bad[i].hyper; d.hyper.streams = bad[i].streams;
            d.hyper.static_maps = bad[i].stat; d.hyper.sinkhorn = bad[i].iters;
            snprintf(what, sizeof what, "hyper: refused (%s), naming \"%s\"", bad[i].preset,
                     bad[i].says);
            refused_naming(&d, bad[i].says, what);
        }
    }
}

/* A residual option that mixes layers' outputs into later inputs (field: its name, set in d):
   the layer API refuses it naming the field, and a skipped layer is refused */
static void cross_layer_refusals(const nb_stack_desc* d, const char* field, nbt_rng* rng) {
    run r;
    char what[96];
    snprintf(what, sizeof what, "%s: refusals", field);
    if (!nbt_check(setup(&r, d, 2, 5, rng, 1), what)) return;
    snprintf(what, sizeof what, "%s: nb_layer_forward refused, naming it", field);
    nbt_check(nb_layer_forward(&r.ctx, &r.s, 0, r.params, r.out, r.in, 2, 5, r.cache,
                               r.scratch) == NB_ERR_CONFIG && strstr(r.ctx.err, field), what);
    snprintf(what, sizeof what, "%s: nb_layer_backward refused, naming it", field);
    nbt_check(nb_layer_backward(&r.ctx, &r.s, 0, r.params, r.grads, r.din, r.dout, r.in, 2, 5,
                                r.cache, r.scratch) == NB_ERR_CONFIG && strstr(r.ctx.err, field),
              what);
    r.s.skip[1] = 1;
    snprintf(what, sizeof what, "%s: a skipped layer refused", field);
    nbt_check(nb_stack_forward(&r.ctx, &r.s, r.params, r.out, r.in, 2, 5, r.cache, r.scratch) ==
                  NB_ERR_CONFIG && strstr(r.ctx.err, "skipped"), what);
    r.s.skip[1] = 0;
    teardown(&r);
}

/* DenseFormer (residual.dwa): its weights' names, shapes, decay and init; at init it is the
   plain stack (same outputs and gradients); with drawn weights its forward against the
   average composed here from a plain stack's layers (nb_layer_forward, h_0 = x_0); bad
   descriptions, a skipped layer and the layer API refused */
static void dwa_props(nbt_rng* rng) {
    const size_t n1 = 2 * 5 * 8;
    {
        nb_stack_desc d = base_desc(NB_PRESET_PRE, 4);
        run a, b;
        const nb_tensor_info* ti;
        nb_real* x;
        int ok = 1, l;
        if (!nbt_check(setup(&b, &d, 2, 5, rng, 2), "dwa: pre")) return;
        d.residual.dwa = 1; d.residual.dwa_dilation = 2;
        if (!nbt_check(setup(&a, &d, 2, 5, rng, 2), "dwa: stack")) return;
        nb_stack_init_params(NULL, &a.s, a.params, NB_INIT_NORMAL, 0, 5);
        for (l = 0; l < 4; l++) {
            char name[32];
            size_t i;
            snprintf(name, sizeof name, "blocks.%d.dwa.weight", l);
            x = tensor_of(&a, name, &ti);
            ok &= x && ti->rows == 1 && ti->cols == (l + 1) / 2 + 1 && ti->ndim == 2 &&
                  !ti->no_decay && ti->kind == NB_TENSOR_DWA;
            for (i = 0; x && i < ti->count; i++) ok &= x[i] == (i + 1 == ti->count);
        }
        nbt_check(ok, "dwa: blocks.<l>.dwa.weight 1 x ((l+1)/k + 1), decayed, init 0 but the last 1");
        copy_by_name(&b, &a);
        grads(&a); grads(&b);
        nbt_close_r("dwa at its init = the plain stack: output", a.out, b.out, n1, NBT_ATOL,
                    NBT_RTOL);
        same_grads("dwa at its init = the plain stack", &b, &a);
        teardown(&a); teardown(&b);
    }
    {   /* drawn weights (setup's): x_{l+1} = sum over j = l+1 mod k of a_l h_j where (l+1) mod p
           = 0, else h_{l+1} (no weights there), h_{j+1} = the plain stack's layer j on x_j */
        static const int dil[4] = {1, 2, 2, 1}, per[4] = {1, 1, 2, 3};
        int t;
        for (t = 0; t < 4; t++) {
            nb_stack_desc d = base_desc(NB_PRESET_PRE, 3);
            run a, b;
            nb_real *h[4], *x = nbt_alloc(n1), *ref = nbt_alloc(n1);
            char what[128];
            int l, j;
            d.norm.final = -1; /* the stack's output is x_L itself */
            if (!nbt_check(setup(&b, &d, 2, 5, rng, 1), "dwa: plain")) return;
            d.residual.dwa = 1; d.residual.dwa_dilation = dil[t]; d.residual.dwa_period = per[t];
            if (!nbt_check(setup(&a, &d, 2, 5, rng, 1), "dwa: drawn")) return;
            copy_by_name(&b, &a);
            loss(&a);
            h[0] = nbt_alloc(n1);
            memcpy(h[0], a.in, n1 * sizeof(nb_real));
            memcpy(x, a.in, n1 * sizeof(nb_real));
            for (l = 0; l < 3; l++) {
                char name[32];
                const nb_real* w;
                size_t i;
                h[l + 1] = nbt_alloc(n1);
                nb_layer_forward(&b.ctx, &b.s, l, b.params, h[l + 1], x, 2, 5, b.cache, b.scratch);
                snprintf(name, sizeof name, "blocks.%d.dwa.weight", l);
                w = tensor(&a, name);
                snprintf(what, sizeof what, "dwa period %d: %s only where layer %d averages", per[t],
                         name, l);
                nbt_check((w != NULL) == ((l + 1) % per[t] == 0), what);
                if (!w) { /* off the period: x_{l+1} = h_{l+1} */
                    memcpy(x, h[l + 1], n1 * sizeof(nb_real));
                    continue;
                }
                for (i = 0; i < n1; i++) {
                    double acc = 0;
                    int m = 0;
                    for (j = (l + 1) % dil[t]; j <= l + 1; j += dil[t]) acc += (double)w[m++] * h[j][i];
                    x[i] = (nb_real)acc;
                }
            }
            memcpy(ref, x, n1 * sizeof(nb_real));
            snprintf(what, sizeof what, "dwa dilation %d, period %d: forward = the average composed here",
                     dil[t], per[t]);
            nbt_close_r(what, a.out, ref, n1, NBT_ATOL, NBT_RTOL);
            for (j = 0; j <= 3; j++) free(h[j]);
            free(x); free(ref);
            teardown(&a); teardown(&b);
        }
    }
    {
        static const struct { const char* preset; int dwa, dil, per; const char* says; } bad[] = {
            {"pre", 2, 0, 0, "residual.dwa (2)"}, {"pre", 1, 5, 0, "residual.dwa_dilation (5)"},
            {"pre", 0, 2, 0, "needs residual.dwa"}, {"siamese", 1, 0, 0, "SiameseNorm"},
            {"mhc", 1, 0, 0, "hyper-connections"}, {"pre", 1, 0, 5, "residual.dwa_period (5)"},
            {"pre", 1, 0, -1, "residual.dwa_period (-1)"}, {"pre", 0, 0, 2, "dwa_period (2) must"}};
        size_t i;
        for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
            nb_stack_desc d = base_desc(NB_PRESET_DEFAULT, 4);
            char what[96];
            nb_preset_from_name(NULL, &d, bad[i].preset);
            d.residual.dwa = bad[i].dwa; d.residual.dwa_dilation = bad[i].dil;
            d.residual.dwa_period = bad[i].per;
            snprintf(what, sizeof what, "dwa: refused (%s), naming \"%s\"", bad[i].preset, bad[i].says);
            refused_naming(&d, bad[i].says, what);
        }
    }
    {
        nb_stack_desc d = base_desc(NB_PRESET_PRE, 2);
        d.residual.dwa = 1;
        cross_layer_refusals(&d, "dwa", rng);
    }
}

typedef struct ar_trace { const nb_real *p1, *h2; } ar_trace;
static void ar_tracer(void* user, const char* name, const nb_real* x, int rows, int cols) {
    ar_trace* t = (ar_trace*)user;
    (void)rows; (void)cols;
    if (!strcmp(name, "blocks.0.ffn.attn_res_p")) t->p1 = x;
    if (!strcmp(name, "blocks.1.attn.attn_res_h")) t->h2 = x;
}

/* Attention Residuals (residual.attn_res): the readers' names, shapes, decay and init; at init
   (queries 0: each reader the mean of its sources) a Pre-LN stack of RMSNorms equals the plain
   Pre-LN stack for every block size: the mean of x_0 and the sublayers' outputs so far is the
   plain residual state x_j over the source count, which RMSNorm does not see (eps 1e-12), nor
   the final norm after the output's reader; the weights report uniform rows there and the
   drawn weights' rows sum to 1; nb_stack_hidden gives the readers' h; refusals */
static void attn_res_props(nbt_rng* rng) {
    const size_t n1 = 2 * 5 * 8;
    {
        nb_stack_desc d = base_desc(NB_PRESET_PRE, 3);
        run a;
        const nb_tensor_info* ti;
        int ok = 1, l, k;
        d.residual.attn_res = 1;
        if (!nbt_check(setup(&a, &d, 2, 5, rng, 2), "attn_res: stack")) return;
        nb_stack_init_params(NULL, &a.s, a.params, NB_INIT_NORMAL, 0, 5);
        ok &= tensor_of(&a, "blocks.0.attn_res.proj.weight", &ti) == NULL;
        for (l = 0; l <= 3; l++)
            for (k = 0; k < 2; k++) {
                static const char* const site[2] = {"attn_res", "mlp_res"};
                char name[64];
                const nb_real *q, *g;
                size_t i;
                if ((l == 0 && k == 0) || (l == 3 && k == 1)) continue;
                if (l == 3) snprintf(name, sizeof name, "final_res.proj.weight");
                else snprintf(name, sizeof name, "blocks.%d.%s.proj.weight", l, site[k]);
                q = tensor_of(&a, name, &ti);
                ok &= q && ti->rows == 1 && ti->cols == 8 && ti->ndim == 2 && !ti->no_decay &&
                      ti->kind == NB_TENSOR_ATTN_RES_QUERY;
                memcpy(strstr(name, "proj"), "norm", 4);
                g = tensor_of(&a, name, &ti);
                ok &= g && ti->rows == 8 && ti->cols == 1 && ti->ndim == 1 && ti->no_decay &&
                      ti->kind == NB_TENSOR_ATTN_RES_GAIN;
                for (i = 0; q && g && i < 8; i++) ok &= q[i] == 0 && g[i] == 1;
            }
        nbt_check(ok, "attn_res: attn_res/mlp_res/final_res .proj (1 x d, decayed, init 0) and "
                      ".norm (d, init 1); none before layer 0's attention");
        teardown(&a);
    }
    {
        static const int blocks[4] = {1, 2, 3, 6};
        int t;
        for (t = 0; t < 4; t++) {
            nb_stack_desc d = base_desc(NB_PRESET_PRE, 3);
            run a, b;
            double w[7 * 7];
            char what[96];
            int j, m, ok = 1;
            d.norm.eps = (nb_real)1e-12;
            if (!nbt_check(setup(&b, &d, 2, 5, rng, 2), "attn_res: plain")) return;
            d.residual.attn_res = 1; d.residual.attn_res_block = blocks[t];
            if (!nbt_check(setup(&a, &d, 2, 5, rng, 2), "attn_res: init")) return;
            nb_stack_init_params(NULL, &a.s, a.params, NB_INIT_NORMAL, 0, 5);
            copy_by_name(&a, &b);
            grads(&a); grads(&b);
            snprintf(what, sizeof what, "attn_res S=%d at its init = the plain Pre-LN stack",
                     blocks[t]);
            nbt_close_r(what, a.out, b.out, n1, NBT_ATOL, NBT_RTOL);
            same_grads(what, &a, &b);
            nbt_check(nb_stack_attn_res_weights(&a.s, a.cache, 2, 5, w) == NB_OK, what);
            for (j = 0; j < 7; j++) { /* reader j: x_0, the blocks ended before j-1, p_{j-1} */
                int src = 0;
                for (m = 0; m < 7; m++) {
                    const int on = m == 0 || (j > 0 && m == j) || (m < j && m % blocks[t] == 0);
                    src += on;
                    ok &= on || w[j * 7 + m] == 0;
                }
                for (m = 0; m < 7; m++)
                    if (w[j * 7 + m] != 0) ok &= fabs(w[j * 7 + m] - 1.0 / src) < 1e-6;
            }
            snprintf(what, sizeof what, "attn_res S=%d at init: uniform weights over the sources",
                     blocks[t]);
            nbt_check(ok, what);
            teardown(&a); teardown(&b);
        }
    }
    {   /* drawn queries: rows sum to 1, not uniform; the reader before layer 1's attention
           (nb_stack_hidden(1) = h_2, traced too) against x_0 and p_1 = f_0 + f_1 (S = 3: one
           partial; traced) weighted here in double by softmax(w . g v / rms(v)) */
        nb_stack_desc d = base_desc(NB_PRESET_PRE, 2);
        run a;
        ar_trace tr;
        double w[5 * 5], sum;
        const nb_real *x0, *h2, *q, *g;
        nb_real* ref = nbt_alloc(n1);
        int j, m, ok = 1, row, c;
        d.residual.attn_res = 1; d.residual.attn_res_block = 3;
        if (!nbt_check(setup(&a, &d, 2, 5, rng, 2), "attn_res: drawn")) return;
        memset(&tr, 0, sizeof tr);
        a.ctx.trace = ar_tracer; a.ctx.trace_user = &tr;
        loss(&a);
        a.ctx.trace = NULL;
        nb_stack_attn_res_weights(&a.s, a.cache, 2, 5, w);
        for (j = 0; j < 5; j++) {
            for (m = 0, sum = 0; m < 5; m++) sum += w[j * 5 + m];
            ok &= fabs(sum - 1) < 1e-5 && (j == 0 || fabs(w[j * 5] - w[j * 5 + j]) > 1e-3);
        }
        nbt_check(ok, "attn_res drawn: the weights' rows sum to 1, not uniform");
        x0 = nb_stack_hidden(&a.s, a.cache, 0, 0, 2, 5);
        h2 = nb_stack_hidden(&a.s, a.cache, 1, 0, 2, 5);
        q = tensor(&a, "blocks.1.attn_res.proj.weight");
        g = tensor(&a, "blocks.1.attn_res.norm.weight");
        for (row = 0; row < 10; row++) {
            const nb_real* v[2];
            double z[2], mx;
            v[0] = x0 + row * 8; v[1] = tr.p1 + row * 8;
            for (m = 0; m < 2; m++) {
                double dot = 0, ss = 0;
                for (c = 0; c < 8; c++) {
                    dot += (double)q[c] * g[c] * v[m][c];
                    ss += (double)v[m][c] * v[m][c];
                }
                z[m] = dot / sqrt(ss / 8 + a.s.desc.norm.eps);
            }
            mx = z[0] > z[1] ? z[0] : z[1];
            z[0] = exp(z[0] - mx); z[1] = exp(z[1] - mx);
            for (c = 0; c < 8; c++)
                ref[row * 8 + c] = (nb_real)((z[0] * v[0][c] + z[1] * v[1][c]) / (z[0] + z[1]));
        }
        nbt_check(tr.p1 != NULL && tr.h2 == h2, "attn_res: traced p_1 and h_2 (nb_stack_hidden)");
        nbt_close_r("attn_res: h_2 = the reader over x_0 and p_1", h2, ref, n1, NBT_ATOL, NBT_RTOL);
        free(ref);
        teardown(&a);
    }
    {
        static const struct { const char* preset; int ar, blk; const char* says; } bad[] = {
            {"pre", 2, 0, "residual.attn_res (2)"}, {"pre", 1, 9, "attn_res_block (9)"},
            {"pre", 0, 2, "needs residual.attn_res"}, {"siamese", 1, 0, "SiameseNorm"},
            {"mhc", 1, 0, "hyper-connections"}, {"post", 1, 0, "post norm"},
            {"hybrid", 1, 0, "residual from the norm"}, {"ngpt", 1, 0, "post norm"}};
        size_t i;
        for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
            nb_stack_desc d = base_desc(NB_PRESET_DEFAULT, 4);
            char what[96];
            nb_preset_from_name(NULL, &d, bad[i].preset);
            d.residual.attn_res = bad[i].ar; d.residual.attn_res_block = bad[i].blk;
            snprintf(what, sizeof what, "attn_res: refused (%s), naming \"%s\"", bad[i].preset,
                     bad[i].says);
            refused_naming(&d, bad[i].says, what);
        }
        {
            nb_stack_desc d = base_desc(NB_PRESET_PRE, 4);
            d.residual.attn_res = 1; d.residual.dwa = 1;
            refused_naming(&d, "DenseFormer", "attn_res: refused with residual.dwa");
        }
    }
    {
        nb_stack_desc d = base_desc(NB_PRESET_PRE, 2);
        d.residual.attn_res = 1;
        cross_layer_refusals(&d, "attn_res", rng);
    }
}

/* modded-nanogpt's value embeddings (2 tables on 5 layers: table 0 in layers 0 and 3, table 1
   in 1 and 4, none in 2): the table (a lambda pair in every layer, init 0.5), the cache growth
   (V per layer), lambdas (1, 0) = the plain stack with zero table gradients, a layer without a
   table leaves its lambda_1 without gradient, and the refusals (unbound rows, unbound gradient
   rows, a stack without tables, too many tables, with the value residual). */
static void value_embeds_props(nbt_rng* rng) {
    nb_stack_desc d = base_desc(NB_PRESET_PRE, 5);
    run off, ve;
    nb_ctx ctx;
    nb_stack s;
    char what[96];
    size_t j;
    int t, found = 0, zero = 1;
    d.n_kv_heads = 2;
    if (!nbt_check(setup(&off, &d, 2, 5, rng, 2), "value embeddings: the plain stack")) return;
    d.residual.value_embeds = 2;
    if (!nbt_check(setup(&ve, &d, 2, 5, rng, 2), "value embeddings: 2 tables")) { teardown(&off); return; }
    for (t = 0; t < ve.s.n_tensors; t++) {
        const nb_tensor_info* ti = &ve.s.tensors[t];
        if (ti->kind != NB_TENSOR_VALUE_EMBED) continue;
        snprintf(what, sizeof what, "blocks.%d.value_embed.lambda", found);
        nbt_check(!strcmp(ti->name, what) && ti->count == 2 && ti->no_decay && ti->ndim == 1 &&
                      ti->layer == found, "value embeddings: the lambdas' table row");
        found++;
    }
    nbt_check(found == 5 && ve.s.n_tensors == off.s.n_tensors + 5,
              "value embeddings: a pair of lambdas in every layer (the code's sa_lambdas)");
    nbt_check(ve.s.n_cache == off.s.n_cache + 5 * nb__pad((size_t)2 * 5 * 2 * 4) &&
                  ve.s.n_scratch == off.s.n_scratch,
              "value embeddings: cache +V per layer (lambda_0's gradient), scratch unchanged");
    nbt_check(nb_stack_init_params(NULL, &ve.s, ve.params, NB_INIT_NORMAL, 0, 7) == NB_OK,
              "value embeddings: init_params");
    for (t = 0; t < ve.s.n_tensors; t++)
        if (ve.s.tensors[t].kind == NB_TENSOR_VALUE_EMBED)
            nbt_check(ve.params[ve.s.tensors[t].offset] == 0.5 && ve.params[ve.s.tensors[t].offset + 1] == 0.5,
                      "value embeddings: the lambdas start at 0.5");
    copy_by_name(&ve, &off);
    set_lambdas(&ve, NB_TENSOR_VALUE_EMBED, 1, 0);
    nbt_check(grads(&off) && grads(&ve), "value embeddings: backward NB_OK");
    nbt_close_r("value embeddings: lambdas (1, 0) = off", ve.out, off.out, (size_t)2 * 5 * 8, 0, 0);
    same_grads("value embeddings: lambdas (1, 0) = off", &off, &ve);
    for (j = 0; j < ve.n_ve; j++) zero &= ve.dve[j] == 0;
    nbt_check(zero, "value embeddings: lambdas (1, 0): the rows' gradients are 0");
    set_lambdas(&ve, NB_TENSOR_VALUE_EMBED, 0.5, 0.5);
    grads(&ve);
    {
        const nb_real* g2 = tensor(&ve, "blocks.2.value_embed.lambda");
        const nb_real* g3 = tensor(&ve, "blocks.3.value_embed.lambda");
        g2 = g2 ? ve.grads + (g2 - ve.params) : NULL; /* the gradients share the layout */
        g3 = g3 ? ve.grads + (g3 - ve.params) : NULL;
        nbt_check(g2 && g3 && g2[1] == 0 && g2[0] != 0 && g3[1] != 0,
                  "value embeddings: layer 2 (no table) scales its V alone: lambda_1 gets no gradient");
    }
    memset(&ctx, 0, sizeof ctx);
    nbt_check(nb_stack_set_value_embeds(&ctx, &ve.s, ve.ve, NULL) == NB_OK &&
                  grads(&ve) == 0 && strstr(ve.ctx.err, "nb_stack_set_value_embeds") != NULL,
              "value embeddings: a backward without gradient rows is refused, naming the binding");
    nb_stack_set_value_embeds(&ctx, &ve.s, NULL, NULL);
    nbt_check(nb_stack_forward(&ve.ctx, &ve.s, ve.params, ve.out, ve.in, 2, 5, ve.cache, ve.scratch) ==
                      NB_ERR_NULL && strstr(ve.ctx.err, "nb_stack_set_value_embeds") != NULL,
              "value embeddings: a forward without rows is refused, naming the binding");
    nbt_check(nb_stack_set_value_embeds(&ctx, &off.s, ve.ve, ve.dve) == NB_ERR_CONFIG &&
                  strstr(ctx.err, "value_embeds") != NULL,
              "value embeddings: binding rows to a stack without tables is refused");
    teardown(&off); teardown(&ve);
    d.residual.value_embeds = 3;
    nbt_check(nb_stack_init(&ctx, &s, &d, 2, 5) == NB_ERR_CONFIG && strstr(ctx.err, "value_embeds (3)") != NULL,
              "value embeddings: 3 tables on 5 layers are refused");
    d.residual.value_embeds = -1;
    nbt_check(nb_stack_init(&ctx, &s, &d, 2, 5) == NB_ERR_CONFIG, "value embeddings: -1 is refused");
    d.residual.value_embeds = 1; d.residual.value_residual = 2;
    nbt_check(nb_stack_init(&ctx, &s, &d, 2, 5) == NB_ERR_CONFIG && strstr(ctx.err, "value_residual") != NULL,
              "value embeddings with the value residual are refused, naming both");
}

/* modded-nanogpt's U-Net skips and re-injection (residual.unet_skips, reinject_x0): the
   tensors' names, shapes, decay and init; the re-injection at its init is the plain stack;
   with drawn weights the forward against the stack composed here from a plain stack's layers
   (nb_layer_forward); refusals */
static void unet_props(nbt_rng* rng) {
    const size_t n1 = 2 * 5 * 8;
    {
        nb_stack_desc d = base_desc(NB_PRESET_PRE, 4);
        run a, b;
        const nb_tensor_info* ti;
        int ok = 1, l;
        if (!nbt_check(setup(&b, &d, 2, 5, rng, 2), "unet: pre")) return;
        d.residual.unet_skips = 1; d.residual.reinject_x0 = 1;
        if (!nbt_check(setup(&a, &d, 2, 5, rng, 2), "unet: stack")) return;
        nb_stack_init_params(NULL, &a.s, a.params, NB_INIT_NORMAL, 0, 5);
        for (l = 0; l < 4; l++) {
            char name[32];
            const nb_real* x;
            snprintf(name, sizeof name, "blocks.%d.lambdas", l);
            x = tensor_of(&a, name, &ti);
            ok &= x && ti->count == 2 && ti->no_decay && ti->kind == NB_TENSOR_X0_LAMBDAS &&
                  x[0] == 1 && x[1] == 0;
            snprintf(name, sizeof name, "blocks.%d.skip_weight", l);
            x = tensor_of(&a, name, &ti);
            ok &= l < 2 ? x == NULL : x && ti->count == 1 && ti->no_decay &&
                                          ti->kind == NB_TENSOR_SKIP_WEIGHT && x[0] == 1;
        }
        nbt_check(ok, "unet: blocks.<l>.lambdas [1, 0], blocks.<l>.skip_weight 1 (l >= L/2), "
                      "no decay");
        teardown(&a);
        d.residual.unet_skips = 0;
        if (!nbt_check(setup(&a, &d, 2, 5, rng, 2), "unet: reinject")) return;
        nb_stack_init_params(NULL, &a.s, a.params, NB_INIT_NORMAL, 0, 5);
        copy_by_name(&a, &b);
        grads(&a); grads(&b);
        nbt_close_r("reinject_x0 at its init = the plain stack: output", a.out, b.out, n1,
                    NBT_ATOL, NBT_RTOL);
        same_grads("reinject_x0 at its init = the plain stack", &a, &b);
        teardown(&a); teardown(&b);
    }
    {   /* drawn weights (setup's): x~ = lambda_0 (x_l + w h_{L-1-l}) + lambda_1 x_0 */
        nb_stack_desc d = base_desc(NB_PRESET_PRE, 4);
        run a, b;
        nb_real *h[5], *u = nbt_alloc(n1);
        int l;
        size_t i;
        d.norm.final = -1; /* the stack's output is x_L itself */
        if (!nbt_check(setup(&b, &d, 2, 5, rng, 1), "unet: plain")) return;
        d.residual.unet_skips = 1; d.residual.reinject_x0 = 1;
        if (!nbt_check(setup(&a, &d, 2, 5, rng, 1), "unet: drawn")) return;
        copy_by_name(&b, &a);
        loss(&a);
        h[0] = nbt_alloc(n1);
        memcpy(h[0], a.in, n1 * sizeof(nb_real));
        for (l = 0; l < 4; l++) {
            char name[32];
            const nb_real *lam, *w = NULL;
            snprintf(name, sizeof name, "blocks.%d.lambdas", l);
            lam = tensor(&a, name);
            snprintf(name, sizeof name, "blocks.%d.skip_weight", l);
            if (l >= 2) w = tensor(&a, name);
            for (i = 0; i < n1; i++)
                u[i] = (nb_real)((double)lam[0] * (h[l][i] + (w ? (double)w[0] * h[4 - l][i] : 0)) +
                                 (double)lam[1] * h[0][i]);
            h[l + 1] = nbt_alloc(n1);
            nb_layer_forward(&b.ctx, &b.s, l, b.params, h[l + 1], u, 2, 5, b.cache, b.scratch);
        }
        nbt_close_r("unet: forward = the skips and re-injection composed here", a.out, h[4], n1,
                    NBT_ATOL, NBT_RTOL);
        for (l = 0; l <= 4; l++) free(h[l]);
        free(u);
        teardown(&a); teardown(&b);
    }
    {
        static const struct {
            const char* preset;
            int L, un, re, other;
            const char* says;
        } bad[] = {
            {"pre", 3, 1, 0, 0, "must be even"}, {"pre", 4, 2, 0, 0, "unet_skips (2)"},
            {"pre", 4, 0, 3, 0, "reinject_x0 (3)"}, {"siamese", 4, 1, 0, 0, "SiameseNorm"},
            {"mhc", 4, 0, 1, 0, "hyper-connections"}, {"pre", 4, 1, 0, 1, "DenseFormer"},
            {"pre", 4, 0, 1, 2, "Attention Residuals"}};
        size_t i;
        for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
            nb_stack_desc d = base_desc(NB_PRESET_DEFAULT, bad[i].L);
            char what[96];
            nb_preset_from_name(NULL, &d, bad[i].preset);
            d.residual.unet_skips = bad[i].un; d.residual.reinject_x0 = bad[i].re;
            d.residual.dwa = bad[i].other == 1; d.residual.attn_res = bad[i].other == 2;
            snprintf(what, sizeof what, "unet: refused (%s), naming \"%s\"", bad[i].preset,
                     bad[i].says);
            refused_naming(&d, bad[i].says, what);
        }
    }
    {
        nb_stack_desc d = base_desc(NB_PRESET_PRE, 2);
        d.residual.reinject_x0 = 1;
        cross_layer_refusals(&d, "reinject_x0", rng);
        d.residual.reinject_x0 = 0; d.residual.unet_skips = 1;
        cross_layer_refusals(&d, "unet_skips", rng);
    }
}

/* A stack's resolved description (s.desc, every default filled in) describes it again:
   nb_stack_init takes it back and gives the same tables. (Defaults set for options that are off,
   as 20 Sinkhorn iterations for HC or a DenseFormer dilation without it, were refused.) */
static void resolved_desc_reinit(void) {
    static const char* const presets[] = {"pre", "post", "mhc", "hc", "ihc", "siamese", "ngpt",
                                          "gpt2", "dyt", "olmo2", "hybrid", "mixln", "lns"};
    size_t i;
    int opt;
    for (i = 0; i < sizeof presets / sizeof presets[0]; i++)
        for (opt = 0; opt < 3; opt++) {
            nb_stack_desc d = base_desc(NB_PRESET_DEFAULT, 3), again;
            nb_stack s, s2;
            nb_ctx ctx;
            char what[96];
            memset(&ctx, 0, sizeof ctx);
            nb_preset_from_name(NULL, &d, presets[i]);
            if (opt == 1) d.residual.dwa = 1;
            if (opt == 2) d.hyper.kind = NB_HYPER_MHC_LITE;
            if (nb_stack_init(&ctx, &s, &d, 2, 4) != NB_OK) continue; /* refused combinations */
            again = s.desc;
            snprintf(what, sizeof what, "%s%s: its resolved description inits the same stack",
                     presets[i], opt == 1 ? " + dwa" : opt == 2 ? " + mhc-lite" : "");
            if (nbt_check(nb_stack_init(&ctx, &s2, &again, 2, 4) == NB_OK, what)) {
                nbt_check(s2.n_params == s.n_params && s2.n_cache == s.n_cache &&
                              s2.n_scratch == s.n_scratch && s2.n_tensors == s.n_tensors, what);
                nb_stack_free(&s2);
            } else {
                printf("  %s\n", ctx.err);
            }
            nb_stack_free(&s);
        }
}

/* CompleteP: on Pre-Norm, x + m F(N(x)) is the Pre-Norm stack whose output projections (W_o,
   W_2: F is linear in them) are scaled by m = (L / L_base)^-alpha; a custom schedule's own
   branch_mult wins over the rule; bad values are refused */
static void completep_props(nbt_rng* rng) {
    nb_stack_desc d = base_desc(NB_PRESET_PRE, 4);
    run cp, pre;
    const double m = pow(4.0 / 2, -0.5);
    int t;
    size_t i;
    d.residual.depth_alpha = 0.5; d.residual.depth_base = 2;
    if (!nbt_check(setup(&cp, &d, 2, 5, rng, 2), "CompleteP: setup")) return;
    d.residual.depth_alpha = 0; d.residual.depth_base = 0;
    if (!nbt_check(setup(&pre, &d, 2, 5, rng, 2), "CompleteP: pre")) return;
    copy_by_name(&pre, &cp);
    for (t = 0; t < pre.s.n_tensors; t++) {
        const nb_tensor_info* ti = &pre.s.tensors[t];
        if (ti->kind == NB_TENSOR_ATTN_OUT || ti->kind == NB_TENSOR_FF_OUT)
            for (i = 0; i < ti->count; i++) pre.params[ti->offset + i] *= (nb_real)m;
    }
    loss(&cp); loss(&pre);
    nbt_check(cp.s.layers[3].desc.ffn.branch_mult == (nb_real)m &&
                  pre.s.layers[0].desc.attn.branch_mult == 1,
              "CompleteP: branch_mult resolved to (L / L_base)^-alpha, else 1");
    nbt_close_r("CompleteP: x + m F(N(x)) = Pre-Norm with m W_o, m W_2", cp.out, pre.out,
                (size_t)2 * 5 * 8, NBT_ATOL, NBT_RTOL);
    teardown(&cp); teardown(&pre);
    {
        nb_layer_desc ls[2];
        nb_stack s;
        nb_ctx ctx;
        memset(ls, 0, sizeof ls);
        memset(&ctx, 0, sizeof ctx);
        ls[0].attn.branch_mult = 0.7f;
        d = base_desc(NB_PRESET_DEFAULT, 2);
        d.layers = ls; d.residual.depth_alpha = 1;
        nbt_check(nb_stack_init(&ctx, &s, &d, 2, 4) == NB_OK &&
                      s.layers[0].desc.attn.branch_mult == (nb_real)0.7f &&
                      s.layers[0].desc.ffn.branch_mult == (nb_real)0.5,
                  "CompleteP: a layer's own branch_mult wins, the others take L^-1");
        nb_stack_free(&s);
        ls[1].ffn.branch_mult = -1;
        nbt_check(nb_stack_init(&ctx, &s, &d, 2, 4) == NB_ERR_CONFIG &&
                      strstr(ctx.err, "branch_mult") != NULL, "CompleteP: branch_mult < 0 refused");
        d = base_desc(NB_PRESET_PRE, 2);
        d.residual.depth_alpha = 2.5;
        nbt_check(nb_stack_init(&ctx, &s, &d, 2, 4) == NB_ERR_CONFIG &&
                      strstr(ctx.err, "depth_alpha") != NULL, "CompleteP: depth_alpha > 2 refused");
        d.residual.depth_alpha = 1; d.residual.depth_base = -2;
        nbt_check(nb_stack_init(&ctx, &s, &d, 2, 4) == NB_ERR_CONFIG &&
                      strstr(ctx.err, "depth_base") != NULL, "CompleteP: depth_base < 0 refused");
        d = base_desc(NB_PRESET_SIAMESE, 2);
        d.residual.depth_alpha = 1;
        nbt_check(nb_stack_init(&ctx, &s, &d, 2, 4) == NB_ERR_CONFIG &&
                      strstr(ctx.err, "SiameseNorm") != NULL, "CompleteP: SiameseNorm refused");
    }
}

/* nGPT: the hidden states on the sphere, the init, nb_stack_normalize, the L2 kernels, the
   table and the refusals */
static double row_norm(const nb_real* x, int n) {
    double ss = 0;
    int j;
    for (j = 0; j < n; j++) ss += (double)x[j] * x[j];
    return sqrt(ss);
}
static double worst_unit(const nb_real* x, int rows, int cols, int by_rows) {
    double worst = 0;
    int i, j;
    for (i = 0; i < (by_rows ? rows : cols); i++) {
        double ss = 0;
        for (j = 0; j < (by_rows ? cols : rows); j++) {
            const double v = by_rows ? x[(size_t)i * cols + j] : x[(size_t)j * cols + i];
            ss += v * v;
        }
        if (fabs(sqrt(ss) - 1) > worst) worst = fabs(sqrt(ss) - 1);
    }
    return worst;
}
static void ngpt_props(nbt_rng* rng) {
    nb_stack_desc d = base_desc(NB_PRESET_NGPT, 3);
    run r;
    int t, l, i, bad = 0, units = 1;
    double worst = 0;
    d.n_kv_heads = 2; d.ffn.d_ff = 0;
    if (!nbt_check(setup(&r, &d, 2, 5, rng, 2), "nGPT: setup")) return;
    nbt_check(r.s.desc.norm.type == NB_NORM_L2 && r.s.desc.norm.final < 0 && r.s.desc.norm.embed < 0 &&
                  r.s.desc.attn.qk_scale > 0 && r.s.desc.ffn.in_scale > 0 && r.s.desc.ffn.d_ff == 32 &&
                  fabs(r.s.desc.attn.softmax_scale - 2) < 1e-6 && fabs(r.s.desc.residual.interp_init - 0.05) < 1e-12 &&
                  r.s.layers[1].attn.desc.no_gain && r.s.layers[1].attn.desc.attn.sites == (NB_SITE_Q | NB_SITE_K),
              "nGPT: the preset resolves L2 norms, no final or embedding norm, s_qk, sqrt(d_k), "
              "s_uv, 4d SwiGLU, alpha 0.05, gainless Q, K sites");
    for (t = 0; t < r.s.n_tensors; t++) {
        const nb_tensor_info* ti = &r.s.tensors[t];
        bad |= ti->kind == NB_TENSOR_GAIN || ti->kind == NB_TENSOR_BIAS;
    }
    nbt_check(!bad && tensor(&r, "blocks.2.attn_alpha") && tensor(&r, "blocks.2.mlp_alpha") &&
                  tensor(&r, "blocks.2.sqk") && tensor(&r, "blocks.2.suv"),
              "nGPT: tensors attn_alpha, mlp_alpha, sqk, suv, and no gain or bias");
    nbt_check(nb_stack_init_params(&r.ctx, &r.s, r.params, nb_preset_init(&d, NULL), 0, 7) ==
                  NB_OK, "nGPT: init");
    for (t = 0; t < r.s.n_tensors; t++) {
        const nb_tensor_info* ti = &r.s.tensors[t];
        const nb_real* x = r.params + ti->offset;
        if (ti->kind == NB_TENSOR_QKV || ti->kind == NB_TENSOR_FF_IN) {
            const double w = worst_unit(x, ti->rows, ti->cols, 1);
            if (w > worst) worst = w;
        } else if (ti->kind == NB_TENSOR_ATTN_OUT || ti->kind == NB_TENSOR_FF_OUT) {
            const double w = worst_unit(x, ti->rows, ti->cols, 0);
            if (w > worst) worst = w;
        } else {
            const double v = ti->kind == NB_TENSOR_FF_SCALE ? 1 : 1 / sqrt(8.0);
            for (i = 0; i < (int)ti->count; i++) units &= fabs(x[i] - v) < 1e-7;
        }
    }
    nbt_check(worst < 1e-6 && units, "nGPT init: matrices unit along d (rows of att_proj, "
              "ff_proj; columns of attn_out, ff_out), alpha and sqk 1/sqrt(d), suv 1");
    /* every layer's output on the unit sphere, whatever the input's norm */
    for (i = 0; i < 2 * 5 * 8; i++) r.in[i] *= 3;
    loss(&r);
    worst = 0;
    for (l = 0; l <= 3; l++)
        for (i = 0; i < 2 * 5; i++) {
            const nb_real* h = nb_stack_hidden(&r.s, r.cache, l, 0, 2, 5);
            const double e = l ? fabs(row_norm(h + (size_t)i * 8, 8) - 1) : 0;
            if (e > worst) worst = e;
        }
    nbt_check(worst < 1e-5, "nGPT: every layer's output has unit norm per token");
    {   /* nb_stack_normalize: unit after, refused on a zero row with the tensor named and
           nothing written */
        nb_real* w = tensor(&r, "blocks.1.attn_out.weight");
        nb_real* q = tensor(&r, "blocks.0.att_proj.weight");
        nb_real* keep = nbt_alloc(r.s.n_params);
        for (i = 0; i < 64; i++) w[i] *= 1 + 0.1 * i;
        nbt_check(nb_stack_normalize(&r.ctx, &r.s, r.params) == NB_OK &&
                      worst_unit(w, 8, 8, 0) < 1e-6, "nb_stack_normalize: attn_out columns unit");
        for (i = 0; i < 8; i++) q[8 + i] = 0; /* row 1 */
        q[0] *= 5;
        memcpy(keep, r.params, r.s.n_params * sizeof(nb_real));
        nbt_check(nb_stack_normalize(&r.ctx, &r.s, r.params) == NB_ERR_VALUE &&
                      strstr(r.ctx.err, "blocks.0.att_proj.weight") && strstr(r.ctx.err, "row") &&
                      !memcmp(keep, r.params, r.s.n_params * sizeof(nb_real)),
                  "nb_stack_normalize: a zero row refused, the tensor named, nothing written");
        nbt_check(nb_stack_normalize(&r.ctx, NULL, r.params) == NB_ERR_NULL,
                  "nb_stack_normalize: NULL stack refused");
        free(keep);
    }
    teardown(&r);
    {   /* an L2 stack's embedding and final norms run (they have no gain to mark them) */
        nb_stack_desc e = base_desc(NB_PRESET_PRE, 2);
        e.norm.type = NB_NORM_L2; e.norm.embed = 1;
        if (nbt_check(setup(&r, &e, 2, 5, rng, 1), "L2 pre: setup")) {
            const nb_real* x0;
            loss(&r);
            x0 = nb_stack_hidden(&r.s, r.cache, 0, 0, 2, 5);
            worst = 0;
            for (i = 0; i < 2 * 5; i++) {
                const double e1 = fabs(row_norm(r.out + (size_t)i * 8, 8) - 1);
                const double e0 = fabs(row_norm(x0 + (size_t)i * 8, 8) - 1);
                if (e1 > worst) worst = e1;
                if (e0 > worst) worst = e0;
            }
            nbt_check(worst < 1e-5, "L2 pre: the embedding norm's and the final norm's rows unit");
            teardown(&r);
        }
    }
    {   /* the public L2 kernels against the definition */
        nb_real x[24], y[24], rs[6], dy[24], dx[24];
        double ref[24], ss, dot;
        int k, j;
        nbt_fill(rng, x, 24, 0, 1);
        nbt_fill(rng, dy, 24, 0, 1);
        nbt_check(nb_l2norm_forward(NULL, y, 12, rs, x, 12, 2, 12, 4) == NB_OK &&
                      nb_l2norm_backward(NULL, dx, 12, dy, 12, x, 12, rs, 2, 12, 4, 0) == NB_OK,
                  "nb_l2norm_forward/backward: NB_OK");
        for (k = 0; k < 6; k++) {
            ss = 0; dot = 0;
            for (j = 0; j < 4; j++) ss += (double)x[4 * k + j] * x[4 * k + j];
            for (j = 0; j < 4; j++) dot += dy[4 * k + j] * x[4 * k + j] / sqrt(ss);
            for (j = 0; j < 4; j++) ref[4 * k + j] = x[4 * k + j] / sqrt(ss);
        }
        nbt_close("nb_l2norm_forward: x / ||x|| per segment", y, ref, 24, NBT_ATOL, NBT_RTOL);
        for (k = 0; k < 6; k++) {
            ss = 0; dot = 0;
            for (j = 0; j < 4; j++) ss += (double)x[4 * k + j] * x[4 * k + j];
            for (j = 0; j < 4; j++) dot += dy[4 * k + j] * x[4 * k + j] / sqrt(ss);
            for (j = 0; j < 4; j++)
                ref[4 * k + j] = (dy[4 * k + j] - x[4 * k + j] / sqrt(ss) * dot) / sqrt(ss);
        }
        nbt_close("nb_l2norm_backward: (dy - y (y.dy)) / ||x||", dx, ref, 24, NBT_ATOL, NBT_RTOL);
        /* a zero segment maps to zero with finite gradients (nGPT's code gives NaN; the fuzzer
           reached it through clip_qkv = 1e-30 under a QK L2 norm), a NaN one stays NaN */
        for (j = 0; j < 4; j++) { x[j] = 0; x[4 + j] = (nb_real)NAN; }
        nbt_check(nb_l2norm_forward(NULL, y, 12, rs, x, 12, 2, 12, 4) == NB_OK &&
                      nb_l2norm_backward(NULL, dx, 12, dy, 12, x, 12, rs, 2, 12, 4, 0) == NB_OK,
                  "nb_l2norm_forward/backward on a zero segment: NB_OK");
        for (j = 0, k = 1; j < 4; j++)
            k &= y[j] == 0 && nbt_finite(dx[j]) && nbt_finite(rs[0]) && nbt_isnan(y[4 + j]);
        nbt_check(k, "nb_l2norm: a zero segment gives 0 (finite rstd, dx), a NaN one NaN");
    }
    {   /* refusals, each naming its field */
        static const struct { const char* what; const char* needle; } cases[] = {
            {"attn.qk_scale with GQA", "n_kv_heads"},
            {"INTERP with residual.depth_alpha", "branch_mult"},
            {"residual_norm with residual_from_norm", "residual_from_norm"},
            {"nGPT with hyper-connections", "hyper-connections"},
            {"residual.interp_init above 1", "residual.interp_init"},
            {"attn.softmax_scale below 0", "attn.softmax_scale"},
            {"ffn.in_scale 2", "ffn.in_scale"}};
        nb_layer_desc ls[2];
        nb_stack s;
        nb_ctx ctx;
        memset(&ctx, 0, sizeof ctx);
        for (i = 0; i < (int)(sizeof cases / sizeof cases[0]); i++) {
            nb_stack_desc e = base_desc(NB_PRESET_NGPT, 2);
            char what[128];
            e.n_kv_heads = 2;
            if (i == 0) e.n_kv_heads = 1;
            if (i == 1) e.residual.depth_alpha = 1;
            if (i == 2) {
                memset(ls, 0, sizeof ls);
                ls[1].ffn.input_norm = ls[1].ffn.residual_from_norm = ls[1].ffn.residual_norm = 1;
                e = base_desc(NB_PRESET_DEFAULT, 2);
                e.layers = ls;
            }
            if (i == 3) e.hyper.kind = NB_HYPER_MHC;
            if (i == 4) e.residual.interp_init = 1.5;
            if (i == 5) e.attn.softmax_scale = -1;
            if (i == 6) e.ffn.in_scale = 2;
            snprintf(what, sizeof what, "nGPT: %s refused, naming %s", cases[i].what,
                     cases[i].needle);
            nbt_check(nb_stack_init(&ctx, &s, &e, 2, 4) == NB_ERR_CONFIG &&
                          strstr(ctx.err, cases[i].needle) != NULL, what);
        }
    }
}

int main(void) {
    nbt_rng rng = {0x5EED};
#ifdef NB_DOUBLE
    fd_all(&rng);
#endif
    post_equivalence(&rng);
    mixln_limits(&rng);
    hybrid_star(&rng);
    zero_outputs(&rng);
    siamese_degenerate(&rng);
    side_by_side_and_threads(&rng);
    threads_large(&rng);
    in_place_backward(&rng);
    grads_ready_hook(&rng);
    table_and_init(&rng);
    init_schemes(&rng);
    diagnostics(&rng);
    lns_depth_index();
    rezero_init_and_sharing(&rng);
    value_residual_props(&rng);
    value_embeds_props(&rng);
    hyper_props(&rng);
    completep_props(&rng);
    ngpt_props(&rng);
    dwa_props(&rng);
    attn_res_props(&rng);
    unet_props(&rng);
    resolved_desc_reinit();
    preset_inits();
    trace_names(&rng);
    name_maps();
    bad_configs();
    trainer_layout_and_conventions(&rng);
    porting_options(&rng);
    gate_names();
    gate_stats(&rng);
    qk_clip(&rng);
    team_zeroing(&rng); /* last: the draws of the tests above stay as they were */
#ifndef NB_DOUBLE
    bf16_normed_inputs(); /* draws of its own */
    bf16_grad_copies();
#endif
    return nbt_finish();
}
