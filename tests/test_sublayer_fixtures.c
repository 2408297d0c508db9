/* test_sublayer_fixtures.c - the attention and FFN sublayers against PyTorch autograd.

   usage: test_sublayer_fixtures FIXTURE_DIR   (reads FIXTURE_DIR/attention.bin and ffn.bin)

   The references come from tests/gen_sublayer_fixtures.py: the sublayers written the way the
   original PyTorch code (OLMo / the HybridNorm fork) computes them, float64 autograd on
   loss = sum(out * dout). Regenerate with
       /usr/bin/python3 tests/gen_sublayer_fixtures.py tests/fixtures
   PyTorch is not needed to run this test; a missing fixture file or case is a failure.

   For every case: build the description from the stored scalars, make a plan, bind the
   parameters and a zeroed gradient buffer (both contiguous, plan.n_params values), copy the
   fixture weights in, run forward and backward, compare out, dx and every parameter gradient.
   Attention runs in three variants:
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

#ifdef NB_DOUBLE
#define FX_ATOL 1e-11
#define FX_RTOL 1e-10
#else
#define FX_ATOL NBT_ATOL
#define FX_RTOL NBT_RTOL
#endif

#define CANARY 16

/* Keep in sync with the names printed by tests/gen_sublayer_fixtures.py. */
static const char* const attn_cases[] = {
    "attn_none_mha_rope",     "attn_qkvc_gqa_rope",      "attn_qkv_mha_norope",
    "attn_qkc_mqa_rope",      "attn_qk_gqa_rope",        "attn_kv_mha_rope",
    "attn_kc_gqa_norope",     "attn_qkv_full_gqa_rope",  "attn_qk_full_rope",
    "attn_qkvc_full_mqa_rope", "attn_qkvc_ln_gqa_rope",  "attn_qkv_noncausal_gqa",
    "attn_qkv_theta500k",     "attn_qkvc_nogain_gqa",
};
static const char* const ffn_cases[] = {
    "ffn_swiglu", "ffn_swiglu_bias", "ffn_gelu_tanh_bias", "ffn_gelu_erf_bias",
    "ffn_gelu_tanh_nobias",
};
#define NCASES(a) (sizeof(a) / sizeof((a)[0]))

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

static nbf_file fx;

static int fail2(const char* fmt, const char* a, const char* b) {
    char msg[300];
    snprintf(msg, sizeof msg, fmt, a, b);
    return nbt_check(0, msg);
}

static const nbf_tensor* get(const char* cs, const char* field, int required) {
    char name[128];
    const nbf_tensor* t;
    snprintf(name, sizeof name, "%s.%s", cs, field);
    t = nbf_get(&fx, name);
    if (!t && required) fail2("fixture has no tensor '%s'%s", name, "");
    return t;
}

static int get_int(const char* cs, const char* field, int* out) {
    const nbf_tensor* t = get(cs, field, 1);
    if (!t) return 0;
    if (t->n != 1 || t->data[0] != (double)(int)t->data[0])
        return fail2("%s.%s: expected an integer scalar", cs, field);
    *out = (int)t->data[0];
    return 1;
}

static int get_real(const char* cs, const char* field, double* out) {
    const nbf_tensor* t = get(cs, field, 1);
    if (!t) return 0;
    if (t->n != 1) return fail2("%s.%s: expected a scalar", cs, field);
    *out = t->data[0];
    return 1;
}

/* A required tensor of exactly rows x cols (cols = 0: a vector of rows values). */
static const nbf_tensor* get_shaped(const char* cs, const char* field, int rows, int cols) {
    const nbf_tensor* t = get(cs, field, 1);
    if (!t) return NULL;
    if (cols ? (t->ndim == 2 && t->dims[0] == rows && t->dims[1] == cols)
             : (t->ndim == 1 && t->dims[0] == rows))
        return t;
    fail2("%s.%s: unexpected shape", cs, field);
    return NULL;
}

/* Known, non-trivial values for the pre-filled gradient outputs. */
static double prefill(size_t i) { return 0.5 * sin(0.37 * (double)i + 1.0); }

/* n values plus a canary; the values are NaN (data NULL) or data. */
static nb_real* buffer(size_t n, const double* data) {
    nb_real* b = nbt_alloc(n + CANARY);
    size_t i;
    for (i = 0; i < n; i++) b[i] = data ? (nb_real)data[i] : (nb_real)NAN;
    for (i = 0; i < CANARY; i++) b[n + i] = (nb_real)(1000 + i);
    return b;
}

static void fill_nan(nb_real* b, size_t n) {
    size_t i;
    for (i = 0; i < n; i++) b[i] = (nb_real)NAN;
}

static void check_canary(const char* cs, const variant* v, const char* what, const nb_real* b,
                         size_t n) {
    char name[200];
    int ok = 1, i;
    for (i = 0; i < CANARY; i++) ok &= b[n + i] == (nb_real)(1000 + i);
    snprintf(name, sizeof name, "%s/%s: %s stays within its advertised size", cs, v->tag, what);
    nbt_check(ok, name);
}

/* Compare n values with ref (+ prefill when add_pre). */
static void compare(const char* cs, const variant* v, const char* what, const nb_real* got,
                    const nbf_tensor* ref, int add_pre) {
    double* e = (double*)malloc(ref->n * sizeof(double));
    char name[200];
    size_t i;
    if (!e) abort();
    for (i = 0; i < ref->n; i++) e[i] = ref->data[i] + (add_pre ? prefill(i) : 0.0);
    snprintf(name, sizeof name, "%s/%s: %s", cs, v->tag, what);
    nbt_close(name, got, e, ref->n, FX_ATOL, FX_RTOL);
    free(e);
}

static int check_rc(nb_ctx* ctx, nb_result rc, const char* cs, const variant* v,
                    const char* fn) {
    char name[400];
    snprintf(name, sizeof name, "%s/%s: %s returns NB_OK (%s%s%s)", cs, v->tag, fn,
             nb_result_string(rc), rc ? ": " : "", rc ? ctx->err : "");
    return nbt_check(rc == NB_OK, name);
}

static void copy_in(nb_real* dst, const nbf_tensor* t) {
    size_t i;
    for (i = 0; i < t->n; i++) dst[i] = (nb_real)t->data[i];
}

/* ---- attention ------------------------------------------------------------------------------ */

static const char* const site_names[4] = {"q", "k", "v", "c"};

static void run_attn(const char* cs, const variant* v) {
    int B, T, d, H, Hkv, sites, width, norm, no_gain, rope, causal, dk, qkvw, s;
    double theta, eps;
    const nbf_tensor *x, *w_qkv, *w_o, *dout, *out, *dx, *dw_qkv, *dw_o;
    const nbf_tensor *gain[4] = {NULL, NULL, NULL, NULL}, *dgain[4] = {NULL, NULL, NULL, NULL};
    size_t expect_params, i, n_act;
    nb_attn_desc desc;
    nb_attn_plan plan;
    nb_attn_params p, g;
    nb_ctx ctx;
    nb_real *params, *grads, *xb, *outb, *dxb, *doutb, *cache, *scratch;
    nb_result rc;
    char name[200];

    if (!get_int(cs, "B", &B) || !get_int(cs, "T", &T) || !get_int(cs, "d", &d) ||
        !get_int(cs, "H", &H) || !get_int(cs, "Hkv", &Hkv) || !get_int(cs, "sites", &sites) ||
        !get_int(cs, "width", &width) || !get_int(cs, "norm", &norm) ||
        !get_int(cs, "no_gain", &no_gain) || !get_int(cs, "rope", &rope) ||
        !get_int(cs, "causal", &causal) || !get_real(cs, "theta", &theta) ||
        !get_real(cs, "eps", &eps))
        return;
    if (B <= 0 || T <= 0 || H <= 0 || Hkv <= 0 || d % H || H % Hkv) {
        fail2("%s: inconsistent scalars%s", cs, "");
        return;
    }
    dk = d / H;
    qkvw = d + 2 * Hkv * dk;
    n_act = (size_t)B * T * d;
    x = get_shaped(cs, "x", B * T, d);
    w_qkv = get_shaped(cs, "w_qkv", qkvw, d);
    w_o = get_shaped(cs, "w_o", d, d);
    dout = get_shaped(cs, "dout", B * T, d);
    out = get_shaped(cs, "out", B * T, d);
    dx = get_shaped(cs, "dx", B * T, d);
    dw_qkv = get_shaped(cs, "dw_qkv", qkvw, d);
    dw_o = get_shaped(cs, "dw_o", d, d);
    if (!x || !w_qkv || !w_o || !dout || !out || !dx || !dw_qkv || !dw_o) return;
    expect_params = (size_t)qkvw * d + (size_t)d * d;
    for (s = 0; s < 4; s++) {
        char f[16], df[16];
        int n = width == 1 ? dk : ((s == 0 || s == 3) ? d : Hkv * dk);
        snprintf(f, sizeof f, "%s_gain", site_names[s]);
        snprintf(df, sizeof df, "d%s_gain", site_names[s]);
        if ((sites >> s & 1) && !no_gain) {
            gain[s] = get_shaped(cs, f, n, 0);
            dgain[s] = get_shaped(cs, df, n, 0);
            if (!gain[s] || !dgain[s]) return;
            expect_params += (size_t)n;
        } else if (get(cs, f, 0)) {
            fail2("%s: has %s but the site has no gain", cs, f);
            return;
        }
    }

    memset(&desc, 0, sizeof desc);
    desc.d_model = d;
    desc.n_heads = H;
    desc.n_kv_heads = Hkv;
    desc.sites = (unsigned)sites;
    desc.width = width == 1 ? NB_WIDTH_PER_HEAD : NB_WIDTH_FULL;
    desc.norm = norm == 1 ? NB_NORM_RMS : NB_NORM_LAYER;
    desc.no_gain = no_gain;
    desc.eps = (nb_real)eps;
    desc.rope = rope;
    desc.rope_theta = (nb_real)theta;
    desc.non_causal = !causal;
    desc.memory = v->memory;
    memset(&ctx, 0, sizeof ctx);
    ctx.num_threads = v->threads;
    memset(&plan, 0, sizeof plan);
    rc = nb_attn_plan_make(&ctx, &plan, &desc, B + v->extra_b, T + v->extra_t);
    if (!check_rc(&ctx, rc, cs, v, "nb_attn_plan_make")) return;
    snprintf(name, sizeof name, "%s/%s: plan.n_params = %lu (weights + gains of the fixture)",
             cs, v->tag, (unsigned long)expect_params);
    if (!nbt_check(plan.n_params == expect_params, name)) {
        printf("  plan.n_params = %lu\n", (unsigned long)plan.n_params);
        return;
    }
    snprintf(name, sizeof name, "%s/%s: plan resolves head_dim, qkv_width, group", cs, v->tag);
    nbt_check(plan.head_dim == dk && plan.qkv_width == qkvw && plan.group == H / Hkv, name);

    params = buffer(plan.n_params, NULL);
    grads = buffer(plan.n_params, NULL);
    for (i = 0; i < plan.n_params; i++) grads[i] = v->accumulate ? (nb_real)prefill(i) : 0;
    nb_attn_params_bind(&plan, params, &p);
    nb_attn_params_bind(&plan, grads, &g);
    snprintf(name, sizeof name, "%s/%s: params_bind sets exactly the present gains", cs, v->tag);
    nbt_check(p.w_qkv == params && p.w_o == params + (size_t)qkvw * d &&
                  (p.q_gain != NULL) == (gain[0] != NULL) &&
                  (p.k_gain != NULL) == (gain[1] != NULL) &&
                  (p.v_gain != NULL) == (gain[2] != NULL) &&
                  (p.c_gain != NULL) == (gain[3] != NULL) && g.w_qkv == grads,
              name);
    copy_in(p.w_qkv, w_qkv);
    copy_in(p.w_o, w_o);
    if (gain[0] && p.q_gain) copy_in(p.q_gain, gain[0]);
    if (gain[1] && p.k_gain) copy_in(p.k_gain, gain[1]);
    if (gain[2] && p.v_gain) copy_in(p.v_gain, gain[2]);
    if (gain[3] && p.c_gain) copy_in(p.c_gain, gain[3]);
    for (i = 0; i < plan.n_params; i++)
        if (params[i] != params[i]) break;
    snprintf(name, sizeof name, "%s/%s: bound parameters cover the buffer", cs, v->tag);
    nbt_check(i == plan.n_params, name);

    xb = buffer(n_act, x->data);
    doutb = buffer(n_act, dout->data);
    outb = buffer(n_act, NULL);
    dxb = buffer(n_act, NULL);
    if (v->accumulate)
        for (i = 0; i < n_act; i++) dxb[i] = (nb_real)prefill(i);
    cache = buffer(plan.n_cache, NULL);
    scratch = buffer(plan.n_scratch, NULL);

    rc = nb_attn_forward(&ctx, &plan, &p, outb, xb, B, T, cache, scratch);
    if (check_rc(&ctx, rc, cs, v, "nb_attn_forward")) {
        compare(cs, v, "out", outb, out, 0);
        fill_nan(scratch, plan.n_scratch);
        rc = nb_attn_backward(&ctx, &plan, &p, &g, dxb, doutb, xb, B, T, cache, scratch,
                              v->accumulate);
        if (check_rc(&ctx, rc, cs, v, "nb_attn_backward")) {
            compare(cs, v, "dx", dxb, dx, v->accumulate);
            /* pre-fill index i of a gradient is its offset in the contiguous buffer */
            {
                double* e = (double*)malloc(plan.n_params * sizeof(double));
                size_t off;
                if (!e) abort();
                /* build the expected contiguous gradient buffer, then compare member-wise */
                for (i = 0; i < plan.n_params; i++) e[i] = v->accumulate ? prefill(i) : 0.0;
                for (i = 0; i < dw_qkv->n; i++) e[i] += dw_qkv->data[i];
                off = (size_t)(g.w_o - grads);
                for (i = 0; i < dw_o->n; i++) e[off + i] += dw_o->data[i];
                snprintf(name, sizeof name, "%s/%s: dw_qkv", cs, v->tag);
                nbt_close(name, g.w_qkv, e, dw_qkv->n, FX_ATOL, FX_RTOL);
                snprintf(name, sizeof name, "%s/%s: dw_o", cs, v->tag);
                nbt_close(name, g.w_o, e + off, dw_o->n, FX_ATOL, FX_RTOL);
                for (s = 0; s < 4; s++) {
                    nb_real* gs = s == 0 ? g.q_gain : s == 1 ? g.k_gain : s == 2 ? g.v_gain
                                                                        : g.c_gain;
                    if (!dgain[s] || !gs) continue;
                    off = (size_t)(gs - grads);
                    for (i = 0; i < dgain[s]->n; i++) e[off + i] += dgain[s]->data[i];
                    snprintf(name, sizeof name, "%s/%s: d%s_gain", cs, v->tag, site_names[s]);
                    nbt_close(name, gs, e + off, dgain[s]->n, FX_ATOL, FX_RTOL);
                }
                free(e);
            }
            check_canary(cs, v, "gradient buffer", grads, plan.n_params);
            check_canary(cs, v, "dx", dxb, n_act);
        }
    }
    check_canary(cs, v, "out", outb, n_act);
    check_canary(cs, v, "cache", cache, plan.n_cache);
    check_canary(cs, v, "scratch", scratch, plan.n_scratch);
    check_canary(cs, v, "parameter buffer", params, plan.n_params);
    free(params);
    free(grads);
    free(xb);
    free(doutb);
    free(outb);
    free(dxb);
    free(cache);
    free(scratch);
}

/* ---- FFN ------------------------------------------------------------------------------------ */

static void run_ffn(const char* cs, const variant* v) {
    int B, T, d, f, type, bias, in_rows;
    const nbf_tensor *x, *w_in, *w_out, *b_in = NULL, *b_out = NULL, *dout, *out, *dx, *dw_in,
                     *dw_out, *db_in = NULL, *db_out = NULL;
    size_t expect_params, i, n_act;
    nb_ffn_desc desc;
    nb_ffn_plan plan;
    nb_ffn_params p, g;
    nb_ctx ctx;
    nb_real *params, *grads, *xb, *outb, *dxb, *doutb, *cache, *scratch;
    nb_result rc;
    char name[200];

    if (!get_int(cs, "B", &B) || !get_int(cs, "T", &T) || !get_int(cs, "d", &d) ||
        !get_int(cs, "f", &f) || !get_int(cs, "type", &type) || !get_int(cs, "bias", &bias))
        return;
    if (B <= 0 || T <= 0 || d <= 0 || f <= 0 || type < 1 || type > 3) {
        fail2("%s: inconsistent scalars%s", cs, "");
        return;
    }
    in_rows = type == 1 ? 2 * f : f;
    n_act = (size_t)B * T * d;
    x = get_shaped(cs, "x", B * T, d);
    w_in = get_shaped(cs, "w_in", in_rows, d);
    w_out = get_shaped(cs, "w_out", d, f);
    dout = get_shaped(cs, "dout", B * T, d);
    out = get_shaped(cs, "out", B * T, d);
    dx = get_shaped(cs, "dx", B * T, d);
    dw_in = get_shaped(cs, "dw_in", in_rows, d);
    dw_out = get_shaped(cs, "dw_out", d, f);
    if (!x || !w_in || !w_out || !dout || !out || !dx || !dw_in || !dw_out) return;
    expect_params = (size_t)in_rows * d + (size_t)d * f;
    if (bias) {
        b_in = get_shaped(cs, "b_in", in_rows, 0);
        b_out = get_shaped(cs, "b_out", d, 0);
        db_in = get_shaped(cs, "db_in", in_rows, 0);
        db_out = get_shaped(cs, "db_out", d, 0);
        if (!b_in || !b_out || !db_in || !db_out) return;
        expect_params += (size_t)in_rows + d;
    }

    memset(&desc, 0, sizeof desc);
    desc.d_model = d;
    desc.d_ff = f;
    desc.type = type == 1 ? NB_FFN_SWIGLU : type == 2 ? NB_FFN_GELU_TANH : NB_FFN_GELU_ERF;
    desc.bias = bias ? 1 : -1;
    memset(&ctx, 0, sizeof ctx);
    ctx.num_threads = v->threads;
    memset(&plan, 0, sizeof plan);
    rc = nb_ffn_plan_make(&ctx, &plan, &desc, B + v->extra_b, T + v->extra_t);
    if (!check_rc(&ctx, rc, cs, v, "nb_ffn_plan_make")) return;
    snprintf(name, sizeof name, "%s/%s: plan.n_params = %lu, in_width = %d", cs, v->tag,
             (unsigned long)expect_params, in_rows);
    if (!nbt_check(plan.n_params == expect_params && plan.in_width == in_rows, name)) {
        printf("  plan.n_params = %lu, in_width = %d\n", (unsigned long)plan.n_params,
               plan.in_width);
        return;
    }

    params = buffer(plan.n_params, NULL);
    grads = buffer(plan.n_params, NULL);
    for (i = 0; i < plan.n_params; i++) grads[i] = v->accumulate ? (nb_real)prefill(i) : 0;
    nb_ffn_params_bind(&plan, params, &p);
    nb_ffn_params_bind(&plan, grads, &g);
    snprintf(name, sizeof name, "%s/%s: params_bind sets exactly the present biases", cs, v->tag);
    if (!nbt_check(p.w_in == params && p.w_out && (p.b_in != NULL) == (bias != 0) &&
                       (p.b_out != NULL) == (bias != 0) && g.w_in == grads,
                   name)) {
        free(params);
        free(grads);
        return;
    }
    copy_in(p.w_in, w_in);
    copy_in(p.w_out, w_out);
    if (bias) {
        copy_in(p.b_in, b_in);
        copy_in(p.b_out, b_out);
    }
    for (i = 0; i < plan.n_params; i++)
        if (params[i] != params[i]) break;
    snprintf(name, sizeof name, "%s/%s: bound parameters cover the buffer", cs, v->tag);
    nbt_check(i == plan.n_params, name);

    xb = buffer(n_act, x->data);
    doutb = buffer(n_act, dout->data);
    outb = buffer(n_act, NULL);
    dxb = buffer(n_act, NULL);
    if (v->accumulate)
        for (i = 0; i < n_act; i++) dxb[i] = (nb_real)prefill(i);
    cache = buffer(plan.n_cache, NULL);
    scratch = buffer(plan.n_scratch, NULL);

    rc = nb_ffn_forward(&ctx, &plan, &p, outb, xb, B, T, cache, scratch);
    if (check_rc(&ctx, rc, cs, v, "nb_ffn_forward")) {
        compare(cs, v, "out", outb, out, 0);
        fill_nan(scratch, plan.n_scratch);
        rc = nb_ffn_backward(&ctx, &plan, &p, &g, dxb, doutb, xb, B, T, cache, scratch,
                             v->accumulate);
        if (check_rc(&ctx, rc, cs, v, "nb_ffn_backward")) {
            double* e = (double*)malloc(plan.n_params * sizeof(double));
            const nbf_tensor* refs[4];
            nb_real* gp[4];
            const char* what[4] = {"dw_in", "db_in", "dw_out", "db_out"};
            int k;
            if (!e) abort();
            refs[0] = dw_in;
            refs[1] = db_in;
            refs[2] = dw_out;
            refs[3] = db_out;
            gp[0] = g.w_in;
            gp[1] = g.b_in;
            gp[2] = g.w_out;
            gp[3] = g.b_out;
            compare(cs, v, "dx", dxb, dx, v->accumulate);
            for (i = 0; i < plan.n_params; i++) e[i] = v->accumulate ? prefill(i) : 0.0;
            for (k = 0; k < 4; k++) {
                size_t off;
                if (!refs[k] || !gp[k]) continue;
                off = (size_t)(gp[k] - grads);
                for (i = 0; i < refs[k]->n; i++) e[off + i] += refs[k]->data[i];
                snprintf(name, sizeof name, "%s/%s: %s", cs, v->tag, what[k]);
                nbt_close(name, gp[k], e + off, refs[k]->n, FX_ATOL, FX_RTOL);
            }
            free(e);
            check_canary(cs, v, "gradient buffer", grads, plan.n_params);
            check_canary(cs, v, "dx", dxb, n_act);
        }
    }
    check_canary(cs, v, "out", outb, n_act);
    check_canary(cs, v, "cache", cache, plan.n_cache);
    check_canary(cs, v, "scratch", scratch, plan.n_scratch);
    check_canary(cs, v, "parameter buffer", params, plan.n_params);
    free(params);
    free(grads);
    free(xb);
    free(doutb);
    free(outb);
    free(dxb);
    free(cache);
    free(scratch);
}

/* Every tensor of the file belongs to one of the known cases (the lists are in sync). */
static void check_known(const char* file, const char* const* cases, size_t ncases) {
    int i, unknown = 0;
    char name[300];
    for (i = 0; i < fx.count; i++) {
        size_t c, len;
        int found = 0;
        for (c = 0; c < ncases && !found; c++) {
            len = strlen(cases[c]);
            found = strncmp(fx.t[i].name, cases[c], len) == 0 && fx.t[i].name[len] == '.';
        }
        if (!found) {
            if (!unknown) printf("  first unknown tensor: %s\n", fx.t[i].name);
            unknown++;
        }
    }
    snprintf(name, sizeof name, "%s: every tensor belongs to a case this test knows", file);
    nbt_check(unknown == 0, name);
}

static int load(const char* dir, const char* file) {
    char path[1024], name[1100];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    snprintf(name, sizeof name, "load %s", path);
    if (!nbt_check(nbf_load(&fx, path) == 0, name)) {
        fprintf(stderr, "test_sublayer_fixtures: cannot run without %s\n", path);
        return 0;
    }
    return 1;
}

int main(int argc, char** argv) {
    size_t c, k;
    if (argc != 2) {
        fprintf(stderr, "usage: %s FIXTURE_DIR\n", argv[0]);
        nbt_check(0, "fixture directory given on the command line");
        return nbt_finish();
    }
    if (load(argv[1], "attention.bin")) {
        check_known("attention.bin", attn_cases, NCASES(attn_cases));
        for (c = 0; c < NCASES(attn_cases); c++) {
            char field[128];
            snprintf(field, sizeof field, "%s.B", attn_cases[c]);
            if (!nbf_get(&fx, field)) {
                fail2("attention.bin has no case '%s'%s", attn_cases[c], "");
                continue;
            }
            for (k = 0; k < NCASES(attn_variants); k++) run_attn(attn_cases[c], &attn_variants[k]);
        }
        nbf_free(&fx);
    }
    if (load(argv[1], "ffn.bin")) {
        check_known("ffn.bin", ffn_cases, NCASES(ffn_cases));
        for (c = 0; c < NCASES(ffn_cases); c++) {
            char field[128];
            snprintf(field, sizeof field, "%s.B", ffn_cases[c]);
            if (!nbf_get(&fx, field)) {
                fail2("ffn.bin has no case '%s'%s", ffn_cases[c], "");
                continue;
            }
            for (k = 0; k < NCASES(ffn_variants); k++) run_ffn(ffn_cases[c], &ffn_variants[k]);
        }
        nbf_free(&fx);
    }
    return nbt_finish();
}
