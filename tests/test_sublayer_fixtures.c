/* test_sublayer_fixtures.c - the attention and FFN sublayers against PyTorch autograd.

   usage: test_sublayer_fixtures FIXTURE_DIR   (reads FIXTURE_DIR/attention.bin and ffn.bin)

   The references come from tests/gen_sublayer_fixtures.py: the PyTorch twin's sublayers
   (examples/pytorch), checked there against the way the original PyTorch code (OLMo / the
   HybridNorm fork) computes them, float64 autograd on loss = sum(out * dout). Regenerate with
       /usr/bin/python3 tests/gen_sublayer_fixtures.py tests/fixtures
   PyTorch is not needed to run this test; a missing fixture file or case is a failure.

   For every case: build the description from the stored scalars, make a plan, bind the
   parameters and a zeroed gradient buffer (both contiguous, plan.n_params values), copy the
   fixture weights in, run forward and backward, compare out, dx and every parameter gradient.
   With a sink (attn.sink), nb_attn_sink_mass after the forward is compared with the twin's
   per-head sink mass. Attention runs in three variants:
     probs   NB_ATTN_MEMORY_PROBS, plan for exactly (B, T), dx overwritten, default threads
     lse     NB_ATTN_MEMORY_LSE, plan for exactly (B, T), dx overwritten, 3 threads
     accum   NB_ATTN_MEMORY_PROBS, plan for (B + 1, T + 3) (larger than the call), dx and the
             gradients pre-filled with known values (accumulate_dx = 1), 2 threads
   FFN runs the plain and the accum variant. Output buffers, cache and scratch start as NaN
   (scratch is NaN-filled again between forward and backward: it is only temporary), and each
   buffer is followed by a canary that must survive.
   Tolerances: float32 uses nbtest.h's NBT_ATOL / NBT_RTOL (the tightest margin, ~2x, is dw_qkv
   of the per-head LayerNorm case: centring 4 values amplifies float rounding). NB_DOUBLE
   compares two float64 computations that differ only in summation order (everything passes
   at 1e-13 / 1e-12), so it uses 1e-11 / 1e-10 instead of nbtest.h's finite-difference
   tolerances. */
#define NORMBLOCKS_IMPLEMENTATION
#include "normblocks.h"
#include "nbtest.h"
#include "fixture.h"

/* Keep in sync with the names printed by tests/gen_sublayer_fixtures.py. */
static const char* const attn_cases[] = {
    "attn_none_mha_rope",     "attn_qkvc_gqa_rope",      "attn_qkv_mha_norope",
    "attn_qkc_mqa_rope",      "attn_qk_gqa_rope",        "attn_kv_mha_rope",
    "attn_kc_gqa_norope",     "attn_qkv_full_gqa_rope",  "attn_qk_full_rope",
    "attn_qkvc_full_mqa_rope", "attn_qkvc_ln_gqa_rope",  "attn_qkv_noncausal_gqa",
    "attn_qkv_theta500k",     "attn_qkvc_nogain_gqa",    "attn_bias_qkvc_gqa_rope",
    "attn_bias_out_mha",      "attn_sink_learned_gqa_rope", "attn_sink_obo_noncausal_mha",
    "attn_sink_learned_qkvc_full_mqa_bias", "attn_clip_none_gqa_bias", "attn_clip_qk_full_rope",
    "attn_clip_qkvc_ln_mqa_sink", "attn_softcap_none_gqa_rope", "attn_softcap_qk_gqa_rope_sink",
    "attn_softcap_qkvc_full_mqa_noncausal_bias",
};
static const char* const ffn_cases[] = {
    "ffn_swiglu", "ffn_swiglu_bias", "ffn_gelu_tanh_bias", "ffn_gelu_erf_bias",
    "ffn_gelu_tanh_nobias",
};

typedef struct variant {
    const char* tag;
    nb_attn_memory memory; /* attention only */
    int accumulate;        /* pre-filled dx (accumulate_dx = 1) and parameter gradients */
    int extra_b, extra_t;  /* plan for (B + extra_b, T + extra_t) */
    int threads;
} variant;

static const variant attn_variants[] = {
    {"probs", NB_ATTN_MEMORY_PROBS, 0, 0, 0, 0},
    {"lse", NB_ATTN_MEMORY_LSE, 0, 0, 0, 3},
    {"accum", NB_ATTN_MEMORY_PROBS, 1, 1, 3, 2},
};
static const variant ffn_variants[] = {
    {"plain", NB_ATTN_MEMORY_DEFAULT, 0, 0, 0, 0},
    {"accum", NB_ATTN_MEMORY_DEFAULT, 1, 1, 3, 3},
};

static void copy_in(nb_real* dst, const nbf_tensor* t) {
    size_t i;
    for (i = 0; i < t->n; i++) dst[i] = (nb_real)t->data[i];
}

/* ---- attention ------------------------------------------------------------------------------ */

static const char* const site_names[4] = {"q", "k", "v", "c"};

/* nb_attn_sink_mass of the forward in cache against the twin's per-head sink mass. */
static void check_sink_mass(nb_ctx* ctx, const nb_attn_plan* plan, const nb_real* cache, int B,
                            int T, const nbf_tensor* want, const char* cs, const char* tag) {
    double got[64];
    nb_real got_r[64];
    int h, H = plan->desc.n_heads;
    char name[200];
    if (H > 64) {
        nbf_fail("%s/%s: %d heads, sink_mass checks at most 64", cs, tag, H);
        return;
    }
    if (!nbf_check_rc(ctx, nb_attn_sink_mass(plan, cache, B, T, got), cs, tag,
                      "nb_attn_sink_mass"))
        return;
    for (h = 0; h < H; h++) got_r[h] = (nb_real)got[h];
    snprintf(name, sizeof name, "%s/%s: sink_mass", cs, tag);
    nbt_close(name, got_r, want->data, (size_t)H, FX_ATOL, FX_RTOL);
}

static void run_attn(const char* cs, const variant* v) {
    int B, T, d, H, Hkv, sites, width, norm, no_gain, rope, causal, dk, qkvw, s, bias = 0,
        sink = 0;
    double theta, eps, clip_qkv = 0, softcap = 0;
    const nbf_tensor *x, *w_qkv, *w_o, *dout, *out, *dx, *dw_qkv, *dw_o;
    const nbf_tensor *b_qkv = NULL, *b_o = NULL, *db_qkv = NULL, *db_o = NULL;
    const nbf_tensor *sinks = NULL, *dsinks = NULL, *sink_mass = NULL;
    const nbf_tensor *gain[4] = {NULL, NULL, NULL, NULL}, *dgain[4] = {NULL, NULL, NULL, NULL};
    size_t expect_params, n_act;
    nb_attn_desc desc;
    nb_attn_plan plan;
    nb_attn_params p, g;
    nb_ctx ctx;
    nbf_run r;
    nb_result rc;
    char name[200];

    if (!nbf_int(cs, "B", &B) || !nbf_int(cs, "T", &T) || !nbf_int(cs, "d", &d) ||
        !nbf_int(cs, "H", &H) || !nbf_int(cs, "Hkv", &Hkv) || !nbf_int(cs, "sites", &sites) ||
        !nbf_int(cs, "width", &width) || !nbf_int(cs, "norm", &norm) ||
        !nbf_int(cs, "no_gain", &no_gain) || !nbf_int(cs, "rope", &rope) ||
        !nbf_int(cs, "causal", &causal) || !nbf_real(cs, "theta", &theta) ||
        !nbf_real(cs, "eps", &eps))
        return;
    if (B <= 0 || T <= 0 || H <= 0 || Hkv <= 0 || d % H || H % Hkv) {
        nbf_fail("%s: inconsistent scalars", cs);
        return;
    }
    dk = d / H;
    qkvw = d + 2 * Hkv * dk;
    n_act = (size_t)B * T * d;
    x = nbf_shaped(cs, "x", B * T, d);
    w_qkv = nbf_shaped(cs, "w_qkv", qkvw, d);
    w_o = nbf_shaped(cs, "w_o", d, d);
    dout = nbf_shaped(cs, "dout", B * T, d);
    out = nbf_shaped(cs, "out", B * T, d);
    dx = nbf_shaped(cs, "dx", B * T, d);
    dw_qkv = nbf_shaped(cs, "dw_qkv", qkvw, d);
    dw_o = nbf_shaped(cs, "dw_o", d, d);
    if (!x || !w_qkv || !w_o || !dout || !out || !dx || !dw_qkv || !dw_o) return;
    expect_params = (size_t)qkvw * d + (size_t)d * d;
    if (nbf_field(cs, "bias", 0) && !nbf_int(cs, "bias", &bias)) return; /* optional: absent = 0 */
    if (bias & NB_ATTN_BIAS_QKV) {
        b_qkv = nbf_shaped(cs, "b_qkv", qkvw, 0);
        db_qkv = nbf_shaped(cs, "db_qkv", qkvw, 0);
        if (!b_qkv || !db_qkv) return;
        expect_params += (size_t)qkvw;
    }
    if (bias & NB_ATTN_BIAS_OUT) {
        b_o = nbf_shaped(cs, "b_o", d, 0);
        db_o = nbf_shaped(cs, "db_o", d, 0);
        if (!b_o || !db_o) return;
        expect_params += (size_t)d;
    }
    if (nbf_field(cs, "sink", 0) && !nbf_int(cs, "sink", &sink)) return; /* optional: absent = 0 */
    /* OLMo's clip_qkv: no parameter; optional, absent = 0 (off) */
    if (nbf_field(cs, "clip_qkv", 0) && !nbf_real(cs, "clip_qkv", &clip_qkv)) return;
    /* Gemma 2's attention-logit softcap: no parameter; optional, absent = 0 (off) */
    if (nbf_field(cs, "softcap", 0) && !nbf_real(cs, "softcap", &softcap)) return;
    if (sink) {
        sink_mass = nbf_shaped(cs, "sink_mass", H, 0);
        if (!sink_mass) return;
    }
    if (sink == NB_SINK_LEARNED) {
        sinks = nbf_shaped(cs, "sinks", H, 0);
        dsinks = nbf_shaped(cs, "dsinks", H, 0);
        if (!sinks || !dsinks) return;
        expect_params += (size_t)H;
    } else if (nbf_field(cs, "sinks", 0)) {
        nbf_fail("%s: has sinks but sink is %d, not learned", cs, sink);
        return;
    }
    for (s = 0; s < 4; s++) {
        char f[16], df[16];
        int n = width == 1 ? dk : ((s == 0 || s == 3) ? d : Hkv * dk);
        snprintf(f, sizeof f, "%s_gain", site_names[s]);
        snprintf(df, sizeof df, "d%s_gain", site_names[s]);
        if ((sites >> s & 1) && !no_gain) {
            gain[s] = nbf_shaped(cs, f, n, 0);
            dgain[s] = nbf_shaped(cs, df, n, 0);
            if (!gain[s] || !dgain[s]) return;
            expect_params += (size_t)n;
        } else if (nbf_field(cs, f, 0)) {
            nbf_fail("%s: has %s but the site has no gain", cs, f);
            return;
        }
    }

    memset(&desc, 0, sizeof desc);
    desc.d_model = d;
    desc.n_heads = H;
    desc.n_kv_heads = Hkv;
    desc.attn.sites = (unsigned)sites;
    desc.attn.site_width = width == 1 ? NB_WIDTH_PER_HEAD : NB_WIDTH_FULL;
    desc.norm = norm == 1 ? NB_NORM_RMS : NB_NORM_LAYER;
    desc.no_gain = no_gain;
    desc.eps = (nb_real)eps;
    desc.attn.rope = rope;
    desc.attn.rope_theta = (nb_real)theta;
    desc.attn.non_causal = !causal;
    desc.attn.memory = v->memory;
    desc.attn.bias = (unsigned)bias;
    desc.attn.sink = (nb_attn_sink)sink;
    desc.attn.clip_qkv = (nb_real)clip_qkv;
    desc.attn.softcap = (nb_real)softcap;
    memset(&ctx, 0, sizeof ctx);
    ctx.num_threads = v->threads;
    memset(&plan, 0, sizeof plan);
    rc = nb_attn_plan_make(&ctx, &plan, &desc, B + v->extra_b, T + v->extra_t);
    if (!nbf_check_rc(&ctx, rc, cs, v->tag, "nb_attn_plan_make")) return;
    snprintf(name, sizeof name, "%s/%s: plan.n_params = %lu (weights + gains of the fixture)",
             cs, v->tag, (unsigned long)expect_params);
    if (!nbt_check(plan.n_params == expect_params, name)) {
        printf("  plan.n_params = %lu\n", (unsigned long)plan.n_params);
        return;
    }
    snprintf(name, sizeof name, "%s/%s: plan resolves head_dim, qkv_width, group", cs, v->tag);
    nbt_check(plan.head_dim == dk && plan.qkv_width == qkvw && plan.group == H / Hkv, name);

    nbf_run_params(&r, plan.n_params, v->accumulate);
    nb_attn_params_bind(&plan, r.params, &p);
    nb_attn_params_bind(&plan, r.grads, &g);
    snprintf(name, sizeof name,
             "%s/%s: params_bind sets exactly the present gains, biases and sinks", cs, v->tag);
    nbt_check(p.w_qkv == r.params && (p.b_qkv != NULL) == (b_qkv != NULL) &&
                  (p.b_o != NULL) == (b_o != NULL) && (p.sinks != NULL) == (sinks != NULL) &&
                  (!p.sinks || p.sinks == r.params + plan.n_params - H) && /* bound last */
                  p.w_o == r.params + (size_t)qkvw * d + (b_qkv ? (size_t)qkvw : 0) &&
                  (p.q_gain != NULL) == (gain[0] != NULL) &&
                  (p.k_gain != NULL) == (gain[1] != NULL) &&
                  (p.v_gain != NULL) == (gain[2] != NULL) &&
                  (p.c_gain != NULL) == (gain[3] != NULL) && g.w_qkv == r.grads,
              name);
    copy_in(p.w_qkv, w_qkv);
    copy_in(p.w_o, w_o);
    if (b_qkv && p.b_qkv) copy_in(p.b_qkv, b_qkv);
    if (b_o && p.b_o) copy_in(p.b_o, b_o);
    if (gain[0] && p.q_gain) copy_in(p.q_gain, gain[0]);
    if (gain[1] && p.k_gain) copy_in(p.k_gain, gain[1]);
    if (gain[2] && p.v_gain) copy_in(p.v_gain, gain[2]);
    if (gain[3] && p.c_gain) copy_in(p.c_gain, gain[3]);
    if (sinks && p.sinks) copy_in(p.sinks, sinks);
    nbf_run_check_covered(&r, cs, v->tag);

    nbf_run_acts(&r, n_act, x->data, dout->data, v->accumulate, plan.n_cache, plan.n_scratch);
    rc = nb_attn_forward(&ctx, &plan, &p, r.out, r.x, B, T, r.cache, r.scratch);
    if (nbf_check_rc(&ctx, rc, cs, v->tag, "nb_attn_forward")) {
        nbf_compare(cs, v->tag, "out", r.out, out->data, out->n, 0);
        if (sink_mass) check_sink_mass(&ctx, &plan, r.cache, B, T, sink_mass, cs, v->tag);
        nbf_fill_nan(r.scratch, plan.n_scratch);
        rc = nb_attn_backward(&ctx, &plan, &p, &g, r.dx, r.dout, r.x, B, T, r.cache, r.scratch,
                              v->accumulate);
        if (nbf_check_rc(&ctx, rc, cs, v->tag, "nb_attn_backward")) {
            /* the expected contiguous gradient buffer (pre-fill index i of a gradient is its
               offset in the buffer), compared member-wise */
            double* e = nbf_run_expected(&r, v->accumulate);
            nbf_compare(cs, v->tag, "dx", r.dx, dx->data, dx->n, v->accumulate);
            snprintf(name, sizeof name, "%s/%s: dw_qkv", cs, v->tag);
            nbf_run_compare_grad(name, g.w_qkv, e, 0, dw_qkv, dw_qkv->n);
            snprintf(name, sizeof name, "%s/%s: dw_o", cs, v->tag);
            nbf_run_compare_grad(name, g.w_o, e, (size_t)(g.w_o - r.grads), dw_o, dw_o->n);
            if (db_qkv && g.b_qkv) {
                snprintf(name, sizeof name, "%s/%s: db_qkv", cs, v->tag);
                nbf_run_compare_grad(name, g.b_qkv, e, (size_t)(g.b_qkv - r.grads), db_qkv,
                                     db_qkv->n);
            }
            if (db_o && g.b_o) {
                snprintf(name, sizeof name, "%s/%s: db_o", cs, v->tag);
                nbf_run_compare_grad(name, g.b_o, e, (size_t)(g.b_o - r.grads), db_o, db_o->n);
            }
            if (dsinks && g.sinks) {
                snprintf(name, sizeof name, "%s/%s: dsinks", cs, v->tag);
                nbf_run_compare_grad(name, g.sinks, e, (size_t)(g.sinks - r.grads), dsinks,
                                     dsinks->n);
            }
            for (s = 0; s < 4; s++) {
                nb_real* gs = s == 0 ? g.q_gain : s == 1 ? g.k_gain : s == 2 ? g.v_gain
                                                                    : g.c_gain;
                if (!dgain[s] || !gs) continue;
                snprintf(name, sizeof name, "%s/%s: d%s_gain", cs, v->tag, site_names[s]);
                nbf_run_compare_grad(name, gs, e, (size_t)(gs - r.grads), dgain[s], dgain[s]->n);
            }
            free(e);
            nbf_run_check_backward(&r, cs, v->tag, "dx");
        }
    }
    nbf_run_finish(&r, cs, v->tag);
}

/* ---- FFN ------------------------------------------------------------------------------------ */

static void run_ffn(const char* cs, const variant* v) {
    int B, T, d, f, type, bias, in_rows;
    const nbf_tensor *x, *w_in, *w_out, *b_in = NULL, *b_out = NULL, *dout, *out, *dx, *dw_in,
                     *dw_out, *db_in = NULL, *db_out = NULL;
    size_t expect_params, n_act;
    nb_ffn_desc desc;
    nb_ffn_plan plan;
    nb_ffn_params p, g;
    nb_ctx ctx;
    nbf_run r;
    nb_result rc;
    char name[200];

    if (!nbf_int(cs, "B", &B) || !nbf_int(cs, "T", &T) || !nbf_int(cs, "d", &d) ||
        !nbf_int(cs, "f", &f) || !nbf_int(cs, "type", &type) || !nbf_int(cs, "bias", &bias))
        return;
    if (B <= 0 || T <= 0 || d <= 0 || f <= 0 || type < 1 || type > 3) {
        nbf_fail("%s: inconsistent scalars", cs);
        return;
    }
    in_rows = type == 1 ? 2 * f : f;
    n_act = (size_t)B * T * d;
    x = nbf_shaped(cs, "x", B * T, d);
    w_in = nbf_shaped(cs, "w_in", in_rows, d);
    w_out = nbf_shaped(cs, "w_out", d, f);
    dout = nbf_shaped(cs, "dout", B * T, d);
    out = nbf_shaped(cs, "out", B * T, d);
    dx = nbf_shaped(cs, "dx", B * T, d);
    dw_in = nbf_shaped(cs, "dw_in", in_rows, d);
    dw_out = nbf_shaped(cs, "dw_out", d, f);
    if (!x || !w_in || !w_out || !dout || !out || !dx || !dw_in || !dw_out) return;
    expect_params = (size_t)in_rows * d + (size_t)d * f;
    if (bias) {
        b_in = nbf_shaped(cs, "b_in", in_rows, 0);
        b_out = nbf_shaped(cs, "b_out", d, 0);
        db_in = nbf_shaped(cs, "db_in", in_rows, 0);
        db_out = nbf_shaped(cs, "db_out", d, 0);
        if (!b_in || !b_out || !db_in || !db_out) return;
        expect_params += (size_t)in_rows + d;
    }

    memset(&desc, 0, sizeof desc);
    desc.d_model = d;
    desc.ffn.d_ff = f;
    desc.ffn.type = type == 1 ? NB_FFN_SWIGLU : type == 2 ? NB_FFN_GELU_TANH : NB_FFN_GELU_ERF;
    desc.ffn.bias = bias ? 1 : -1;
    memset(&ctx, 0, sizeof ctx);
    ctx.num_threads = v->threads;
    memset(&plan, 0, sizeof plan);
    rc = nb_ffn_plan_make(&ctx, &plan, &desc, B + v->extra_b, T + v->extra_t);
    if (!nbf_check_rc(&ctx, rc, cs, v->tag, "nb_ffn_plan_make")) return;
    snprintf(name, sizeof name, "%s/%s: plan.n_params = %lu, in_width = %d", cs, v->tag,
             (unsigned long)expect_params, in_rows);
    if (!nbt_check(plan.n_params == expect_params && plan.in_width == in_rows, name)) {
        printf("  plan.n_params = %lu, in_width = %d\n", (unsigned long)plan.n_params,
               plan.in_width);
        return;
    }

    nbf_run_params(&r, plan.n_params, v->accumulate);
    nb_ffn_params_bind(&plan, r.params, &p);
    nb_ffn_params_bind(&plan, r.grads, &g);
    snprintf(name, sizeof name, "%s/%s: params_bind sets exactly the present biases", cs, v->tag);
    if (!nbt_check(p.w_in == r.params && p.w_out && (p.b_in != NULL) == (bias != 0) &&
                       (p.b_out != NULL) == (bias != 0) && g.w_in == r.grads,
                   name)) {
        free(r.params);
        free(r.grads);
        return;
    }
    copy_in(p.w_in, w_in);
    copy_in(p.w_out, w_out);
    if (bias) {
        copy_in(p.b_in, b_in);
        copy_in(p.b_out, b_out);
    }
    nbf_run_check_covered(&r, cs, v->tag);

    nbf_run_acts(&r, n_act, x->data, dout->data, v->accumulate, plan.n_cache, plan.n_scratch);
    rc = nb_ffn_forward(&ctx, &plan, &p, r.out, r.x, B, T, r.cache, r.scratch);
    if (nbf_check_rc(&ctx, rc, cs, v->tag, "nb_ffn_forward")) {
        nbf_compare(cs, v->tag, "out", r.out, out->data, out->n, 0);
        nbf_fill_nan(r.scratch, plan.n_scratch);
        rc = nb_ffn_backward(&ctx, &plan, &p, &g, r.dx, r.dout, r.x, B, T, r.cache, r.scratch,
                             v->accumulate);
        if (nbf_check_rc(&ctx, rc, cs, v->tag, "nb_ffn_backward")) {
            double* e = nbf_run_expected(&r, v->accumulate);
            const nbf_tensor* refs[4];
            nb_real* gp[4];
            const char* what[4] = {"dw_in", "db_in", "dw_out", "db_out"};
            int k;
            refs[0] = dw_in;
            refs[1] = db_in;
            refs[2] = dw_out;
            refs[3] = db_out;
            gp[0] = g.w_in;
            gp[1] = g.b_in;
            gp[2] = g.w_out;
            gp[3] = g.b_out;
            nbf_compare(cs, v->tag, "dx", r.dx, dx->data, dx->n, v->accumulate);
            for (k = 0; k < 4; k++) {
                if (!refs[k] || !gp[k]) continue;
                snprintf(name, sizeof name, "%s/%s: %s", cs, v->tag, what[k]);
                nbf_run_compare_grad(name, gp[k], e, (size_t)(gp[k] - r.grads), refs[k],
                                     refs[k]->n);
            }
            free(e);
            nbf_run_check_backward(&r, cs, v->tag, "dx");
        }
    }
    nbf_run_finish(&r, cs, v->tag);
}

int main(int argc, char** argv) {
    size_t c, k;
    if (!nbf_args_ok(argc, argv)) return nbt_finish();
    if (nbf_load_checked("test_sublayer_fixtures", argv[1], "attention.bin")) {
        nbf_check_known("attention.bin", attn_cases, NBF_NCASES(attn_cases), sizeof attn_cases[0]);
        for (c = 0; c < NBF_NCASES(attn_cases); c++) {
            if (!nbf_has_case("attention.bin", attn_cases[c], "B")) continue;
            for (k = 0; k < NBF_NCASES(attn_variants); k++)
                run_attn(attn_cases[c], &attn_variants[k]);
        }
        nbf_free(&nbf_fx);
    }
    if (nbf_load_checked("test_sublayer_fixtures", argv[1], "ffn.bin")) {
        nbf_check_known("ffn.bin", ffn_cases, NBF_NCASES(ffn_cases), sizeof ffn_cases[0]);
        for (c = 0; c < NBF_NCASES(ffn_cases); c++) {
            if (!nbf_has_case("ffn.bin", ffn_cases[c], "B")) continue;
            for (k = 0; k < NBF_NCASES(ffn_variants); k++) run_ffn(ffn_cases[c], &ffn_variants[k]);
        }
        nbf_free(&nbf_fx);
    }
    return nbt_finish();
}
