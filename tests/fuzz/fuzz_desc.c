/* Descriptions under hostile bytes: attention and FFN plans and stacks (every desc field,
   presets and names, sites, widths, eps, theta, custom layer arrays, max sizes, threads),
   then, when the sizes are small, a forward and a backward on buffers of exactly the sizes the
   plan or stack gives (malloc'ed one by one, so a read past one is an ASan report), with B and T
   from the input (inside or beyond the plan), a backward of another (B, T), and the
   diagnostics. Checks: no crash or sanitizer report; every call returns a known code with a
   message naming an nb_ function; an accepted plan's sizes are consistent (the tensor table
   tiles [0, n_params)); refused calls leave their outputs untouched; an accepted forward and
   backward succeed; a backward of another shape is refused.

   libFuzzer (clang -fsanitize=fuzzer,..., NB_LIBFUZZER defined): any input.
   Otherwise a deterministic randomized driver (gcc, also under ASan in the normal test builds):
       fuzz_desc [iterations [seed]]          random descriptions, biased to small valid ones
       fuzz_desc --corpus FILE...             run the given inputs (e.g. the seed corpus)
       fuzz_desc --write-seeds DIR            write the seed corpus */
#include <stdlib.h>

/* The stack's tables through an allocator that refuses more than 64 MiB, as a small machine
   would: a valid description with millions of layers (1e7 layers is about 16 GB of tables) then
   takes the NB_ERR_NOMEM path instead of a libFuzzer "malloc exceeds limit" crash (its limit is
   -rss_limit_mb) or a multi-second init. */
#define NB__FUZZ_ALLOC_MAX ((size_t)64 << 20)
#define NB_MALLOC(size, user) ((void)(user), (size) > NB__FUZZ_ALLOC_MAX ? NULL : malloc(size))
#define NB_FREE(ptr, user) ((void)(user), free(ptr))
#define NORMBLOCKS_IMPLEMENTATION
#include "normblocks.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Bytes as a stream of choices; past the end every read is 0 (the defaults). */
typedef struct rd { const uint8_t* p; size_t n, at; } rd;
static unsigned u8(rd* r) { return r->at < r->n ? r->p[r->at++] : 0; }
static unsigned u32(rd* r) {
    unsigned v = 0;
    int k;
    for (k = 0; k < 4; k++) v = v << 8 | u8(r);
    return v;
}
/* An int: mostly small, sometimes an edge or any 32-bit value. */
static int pick_int(rd* r, int small) {
    static const int edge[8] = {0, -1, 65536, 46341, 1 << 30, 2147483647, -2147483647 - 1, 3};
    const unsigned k = u8(r);
    if (k < 200) return (int)(k % (unsigned)(small + 1));
    if (k < 240) return edge[k % 8];
    return (int)u32(r);
}
/* A float hyperparameter: 0 (default), a sensible value, an edge, or any bit pattern. */
static nb_real pick_real(rd* r) {
    static const double vals[16] = {0, 1e-5, 1e-6, 0.5, 1, 2, 10000, 500000, -1, 1e-30, 1e30,
                                    1e-45, NAN, INFINITY, -INFINITY, 1.0000001};
    const unsigned k = u8(r);
    if (k < 240) return (nb_real)vals[k % 16];
    {
        const unsigned v = u32(r);
        float f;
        memcpy(&f, &v, sizeof f);
        return (nb_real)f;
    }
}

static int fail_count;
static long n_accepted, n_ran; /* descriptions accepted; forward+backward runs */
#define CHECK(cond, ...)                                                                   \
    do {                                                                                   \
        if (!(cond)) {                                                                     \
            fprintf(stderr, "fuzz_desc: check failed: %s: ", #cond);                      \
            fprintf(stderr, __VA_ARGS__);                                                  \
            fprintf(stderr, "\n");                                                         \
            fail_count++;                                                                  \
            abort();                                                                       \
        }                                                                                  \
    } while (0)

/* A failure is a known code with a message naming the function that failed. */
static void check_rc(const nb_ctx* c, nb_result rc) {
    CHECK(rc >= NB_OK && rc <= NB_ERR_NOMEM, "code %d", (int)rc);
    if (rc) CHECK(strncmp(c->err, "nb_", 3) == 0 || strstr(c->err, "layer"), "message \"%s\"", c->err);
}

/* One caller-owned buffer of exactly n values (at least 1 so malloc(0) is not a NULL). */
static nb_real* buf(size_t n, nb_real v) {
    nb_real* p = (nb_real*)malloc((n ? n : 1) * sizeof(nb_real));
    size_t i;
    if (!p) abort();
    for (i = 0; i < n; i++) p[i] = v;
    return p;
}
static int same(const nb_real* p, size_t n, nb_real v) {
    size_t i;
    for (i = 0; i < n; i++)
        if (memcmp(&p[i], &v, sizeof v)) return 0;
    return 1;
}

/* Work cap: inputs are meant to run in milliseconds. */
#define MAX_VALUES ((size_t)1 << 20)

/* B, T of a call: mostly the planned maximum, sometimes beyond or not positive */
static void pick_bt(rd* r, int mb, int ms, int* B, int* T) {
    const unsigned k = u8(r);
    *B = k < 160 ? mb : k < 200 ? 1 + (int)(u8(r) % (unsigned)mb) : pick_int(r, mb + 2);
    *T = k < 160 ? ms : k < 200 ? 1 + (int)(u8(r) % (unsigned)ms) : pick_int(r, ms + 2);
}

static void run_attn(rd* r, nb_ctx* c) {
    nb_attn_desc d;
    nb_attn_plan pl;
    nb_attn_params p, g;
    nb_result rc;
    int mb, ms, B, T;
    memset(&d, 0, sizeof d);
    d.d_model = pick_int(r, 32); d.n_heads = pick_int(r, 8); d.n_kv_heads = pick_int(r, 4);
    d.attn.sites = u8(r) < 230 ? u8(r) & 15 : u32(r);
    d.attn.site_width = (nb_norm_width)pick_int(r, 2); d.norm = (nb_norm_type)pick_int(r, 3);
    d.no_gain = u8(r) & 1; d.eps = pick_real(r); d.attn.rope = u8(r) & 1; d.attn.rope_theta = pick_real(r);
    d.attn.non_causal = u8(r) & 1; d.attn.memory = (nb_attn_memory)pick_int(r, 2);
    mb = pick_int(r, 3); ms = pick_int(r, 16);
    d.attn.bias = u8(r) < 230 ? u8(r) & 3 : u32(r); /* read last: older seeds keep their meaning */
    {   /* after it: nGPT's L2 norm kind and Derf (6: unknown), s_qk (2: refused) and the
           softmax scale */
        const unsigned k = u8(r);
        if (k >= 128) {
            if (k & 1) d.norm = (nb_norm_type)(4 + (k >> 1) % 3);
            d.attn.qk_scale = (int)((k >> 2) % 3); d.attn.softmax_scale = pick_real(r);
        }
    }
    {   /* read last: the output gate (3: unknown), the sink (3: unknown), clip_qkv, softcap */
        const unsigned k = u8(r), ks = u8(r), kc = u8(r), kp = u8(r);
        if (k >= 128) d.attn.gate = (nb_attn_gate)(k % 4);
        if (ks >= 128) d.attn.sink = (nb_attn_sink)(ks % 4);
        if (kc >= 128) d.attn.clip_qkv = pick_real(r);
        if (kp >= 128) d.attn.softcap = pick_real(r);
    }
    memset(&pl, 0x77, sizeof pl);
    rc = nb_attn_plan_make(c, &pl, &d, mb, ms);
    check_rc(c, rc);
    if (rc) {
        unsigned char* b = (unsigned char*)&pl;
        size_t i;
        for (i = 0; i < sizeof pl; i++) CHECK(b[i] == 0x77, "refused plan written");
        return;
    }
    n_accepted++;
    CHECK(pl.head_dim * pl.desc.n_heads == pl.desc.d_model && pl.n_params >= (size_t)4 *
          pl.desc.d_model, "plan sizes d=%d", pl.desc.d_model);
    if (pl.n_params + pl.n_cache + pl.n_scratch > MAX_VALUES ||
        (size_t)mb * ms * pl.qkv_width * (pl.desc.d_model + ms) > 4 * MAX_VALUES)
        return;
    pick_bt(r, mb, ms, &B, &T);
    {
        const int ok_bt = B > 0 && T > 0 && B <= mb && T <= ms;
        const size_t n = (size_t)mb * ms * pl.desc.d_model;
        nb_real *w = buf(pl.n_params, (nb_real)0.05), *gw = buf(pl.n_params, 0);
        nb_real *cache = buf(pl.n_cache, 0), *scr = buf(pl.n_scratch, 0);
        nb_real *x = buf(n, (nb_real)0.3), *out = buf(n, 9), *dx = buf(n, 9);
        nb_attn_params_bind(&pl, w, &p);
        nb_attn_params_bind(&pl, gw, &g);
        rc = nb_attn_forward(c, &pl, &p, out, x, B, T, cache, scr);
        check_rc(c, rc);
        CHECK(!ok_bt || rc == NB_OK, "attention forward B=%d T=%d: %s", B, T, c->err);
        if (!rc) {
            n_ran++;
            rc = nb_attn_backward(c, &pl, &p, &g, dx, out, x, B, T, cache, scr, 0);
            CHECK(rc == NB_OK, "attention backward: %s", c->err);
            if (T > 1) { /* another shape: refused, nothing written */
                size_t i;
                for (i = 0; i < n; i++) dx[i] = 9;
                rc = nb_attn_backward(c, &pl, &p, &g, dx, out, x, B, T - 1, cache, scr, 0);
                CHECK(rc == NB_ERR_CONFIG && same(dx, n, 9), "attention backward T-1 not refused");
            }
        } else {
            CHECK(same(out, n, 9), "refused attention forward wrote out");
        }
        free(w); free(gw); free(cache); free(scr); free(x); free(out); free(dx);
    }
}

static void run_ffn(rd* r, nb_ctx* c) {
    nb_ffn_desc d;
    nb_ffn_plan pl;
    nb_ffn_params p, g;
    nb_result rc;
    int mb, ms, B, T;
    memset(&d, 0, sizeof d);
    d.d_model = pick_int(r, 32); d.ffn.d_ff = pick_int(r, 48); d.ffn.type = (nb_ffn_type)pick_int(r, 3);
    d.ffn.bias = (int)(u8(r) % 4) - 1;
    mb = pick_int(r, 3); ms = pick_int(r, 16);
    d.ffn.in_scale = (int)(u8(r) % 4) - 1; /* nGPT's s_uv: -1 and 2 refused */
    rc = nb_ffn_plan_make(c, &pl, &d, mb, ms);
    check_rc(c, rc);
    if (rc) return;
    n_accepted++;
    CHECK(pl.in_width == (pl.desc.ffn.type == NB_FFN_SWIGLU ? 2 : 1) * pl.desc.ffn.d_ff, "in_width");
    /* the inputs and outputs too: a GELU of d_ff 1 has a small cache for any width */
    if (pl.n_params + pl.n_cache + pl.n_scratch > MAX_VALUES ||
        (size_t)mb * ms * pl.desc.d_model > MAX_VALUES)
        return;
    pick_bt(r, mb, ms, &B, &T);
    {
        const int ok_bt = B > 0 && T > 0 && B <= mb && T <= ms;
        const size_t n = (size_t)mb * ms * pl.desc.d_model;
        nb_real *w = buf(pl.n_params, (nb_real)0.05), *gw = buf(pl.n_params, 0);
        nb_real *cache = buf(pl.n_cache, 0), *scr = buf(pl.n_scratch, 0);
        nb_real *x = buf(n, (nb_real)0.3), *out = buf(n, 9), *dx = buf(n, 9);
        nb_ffn_params_bind(&pl, w, &p);
        nb_ffn_params_bind(&pl, gw, &g);
        rc = nb_ffn_forward(c, &pl, &p, out, x, B, T, cache, scr);
        check_rc(c, rc);
        CHECK(!ok_bt || rc == NB_OK, "FFN forward B=%d T=%d: %s", B, T, c->err);
        if (!rc) {
            n_ran++;
            CHECK(nb_ffn_backward(c, &pl, &p, &g, dx, out, x, B, T, cache, scr, 1) == NB_OK,
                  "FFN backward: %s", c->err);
            if (B > 1)
                CHECK(nb_ffn_backward(c, &pl, &p, &g, dx, out, x, B - 1, T, cache, scr, 0) ==
                      NB_ERR_CONFIG, "FFN backward B-1 not refused");
        }
        free(w); free(gw); free(cache); free(scr); free(x); free(out); free(dx);
    }
}

static void run_stack(rd* r, nb_ctx* c) {
    static const char* const names[16] = {"pre", "hybrid_star", "Pre-QK-Post", "KC-Pre",
                                          "siamese", "siamese_post_pre", "mixln", "gpt2",
                                          "olmo2", "HybridNorm*", "Pre-#-Post", "zz", "DyT",
                                          "periln", "ReZero", "layerscale"};
    nb_stack_desc d;
    nb_layer_desc layers[8];
    nb_stack s;
    nb_result rc;
    int mb, ms, B, T, l, t;
    memset(&d, 0, sizeof d);
    d.n_layers = pick_int(r, 4); d.d_model = pick_int(r, 24); d.n_heads = pick_int(r, 4);
    d.n_kv_heads = pick_int(r, 2); d.ffn.d_ff = pick_int(r, 32);
    if (u8(r) & 1) d.preset = (nb_preset)pick_int(r, NB_PRESET_COUNT);
    else check_rc(c, nb_preset_from_name(c, &d, names[u8(r) % 16]));
    d.attn.sites = u8(r) < 220 ? (u8(r) & 15) | (u8(r) < 30 ? NB_SITES_NONE : 0) : u32(r);
    d.mixln_alpha = (double)pick_real(r);
    d.norm.type = (nb_norm_type)pick_int(r, 3); d.norm.eps = pick_real(r);
    d.attn.site_width = (nb_norm_width)pick_int(r, 2); d.ffn.type = (nb_ffn_type)pick_int(r, 3);
    d.ffn.bias = (int)(u8(r) % 4) - 1; d.attn.rope = u8(r) & 1; d.attn.rope_theta = pick_real(r);
    d.attn.non_causal = u8(r) & 1; d.attn.memory = (nb_attn_memory)pick_int(r, 2);
    d.norm.final = (int)(u8(r) % 4) - 1; d.norm.embed = (int)(u8(r) % 4) - 1;
    d.siamese.paper_scale = u8(r) & 1; d.siamese.paper_fusion = u8(r) & 1;
    if (u8(r) < 64 && d.n_layers > 0 && d.n_layers <= 8) { /* a custom schedule */
        memset(layers, 0, sizeof layers);
        for (l = 0; l < d.n_layers; l++) {
            nb_placement* pl[2];
            int k;
            pl[0] = &layers[l].attn; pl[1] = &layers[l].ffn;
            for (k = 0; k < 2; k++) {
                const unsigned f = u8(r);
                pl[k]->input_norm = f & 1; pl[k]->residual_from_norm = (f >> 1) & 1;
                pl[k]->output_norm = (f >> 2) & 1; pl[k]->post_norm = (f >> 3) & 1;
                pl[k]->residual_scale = (f >> 4) ? pick_real(r) : 0;
                pl[k]->branch_scale = (nb_branch_scale)(f >> 6); /* 3: INTERP */
            }
            layers[l].sites = u8(r) < 240 ? u8(r) & 15 : u32(r);
        }
        d.preset = NB_PRESET_DEFAULT;
        d.layers = layers;
    }
    mb = pick_int(r, 2); ms = pick_int(r, 8);
    if (u8(r) >= 200) { /* init-time hyperparameters: 0 (default), sensible, edges, any bits */
        d.norm.dyt_alpha = (double)pick_real(r); d.norm.dyt_alpha_attn = (double)pick_real(r);
        d.residual.layerscale_init = (double)pick_real(r);
    }
    d.attn.bias = u8(r) < 230 ? u8(r) & 3 : u32(r); /* read last: older seeds keep their meaning */
    {   /* after it: gradient modes (3 and 4 are refused) and a name of any bytes, unterminated */
        const unsigned gm = u8(r);
        size_t i;
        d.run.param_grads = (nb_grad_mode)(gm % 5);
        d.run.input_grad = (nb_grad_mode)((gm / 5) % 5);
        d.gemm.precision = (nb_precision)((gm / 25) % 4); /* 3 is refused */
        if (gm >= 200)
            for (i = 0; i < sizeof d.name; i++) d.name[i] = (char)(1 + u8(r) % 255);
    }
    d.gemm.backend = (nb_backend)(u8(r) % 4); /* 3 is refused, DNNL without oneDNN too */
    {   /* read last: hyper-connections (6: unknown) and CompleteP, the custom layers' constant
           branch multipliers */
        const unsigned h = u8(r);
        d.hyper.kind = (nb_hyper)(h % 7);
        if (d.hyper.kind) {
            d.hyper.streams = pick_int(r, 9); d.hyper.static_maps = (int)(u8(r) % 3);
            d.hyper.sinkhorn = pick_int(r, 3);
        }
        if (h >= 128) { d.residual.depth_alpha = (double)pick_real(r); d.residual.depth_base = pick_int(r, 4); }
        for (l = 0; d.layers && l < d.n_layers; l++)
            if (u8(r) & 1) layers[l].attn.branch_mult = layers[l].ffn.branch_mult = pick_real(r);
    }
    {   /* read last: nGPT's fields (the L2 kind, Derf, 6 unknown; the residual norms and
           SkipInit's branch scale in custom layers) */
        const unsigned k = u8(r);
        if (k >= 128) {
            if (k & 1) d.norm.type = (nb_norm_type)(4 + (k >> 1) % 3);
            d.residual.interp_init = (double)pick_real(r); d.attn.softmax_scale = pick_real(r);
            d.attn.qk_scale = (int)(u8(r) % 4) - 1; d.ffn.in_scale = (int)(u8(r) % 4) - 1;
            for (l = 0; d.layers && l < d.n_layers; l++) {
                const unsigned f = u8(r);
                layers[l].attn.residual_norm = f & 1; layers[l].ffn.residual_norm = (f >> 1) & 1;
                if (f >= 240) layers[l].ffn.branch_scale = (nb_branch_scale)(4 + f % 2);
            }
        }
    }
    {   /* read last: the porting fields (one past each range: refused) */
        const unsigned k = u8(r);
        if (k >= 128) {
            d.attn.gate = (nb_attn_gate)(u8(r) % 4);
            d.norm.gain = (int)(u8(r) % 3) - 1; d.norm.bias = (int)(u8(r) % 3) - 1;
            d.norm.gain_offset = (int)(u8(r) % 3); d.norm.embed_scale = (int)(u8(r) % 3);
            d.residual.branch_scale = (nb_branch_scale)(u8(r) % 7);
            d.attn.sink = (nb_attn_sink)(u8(r) % 4);
            if (u8(r) >= 128) d.attn.clip_qkv = pick_real(r);
            if (u8(r) >= 128) d.attn.softcap = pick_real(r);
            if (u8(r) >= 128) { /* DenseFormer (2, and a dilation past n_layers: refused) */
                d.residual.dwa = (int)(u8(r) % 3); d.residual.dwa_dilation = pick_int(r, 5);
            }
            if (u8(r) >= 128) { /* Attention Residuals (2, and a block past 2 n_layers: refused) */
                d.residual.attn_res = (int)(u8(r) % 3); d.residual.attn_res_block = pick_int(r, 9);
            }
            if (u8(r) >= 128) { /* U-Net skips, re-injection (2: refused; odd L with skips) */
                d.residual.unet_skips = (int)(u8(r) % 3); d.residual.reinject_x0 = (int)(u8(r) % 3);
            }
            if (u8(r) >= 128) /* value embeddings (past n_layers / 2, and the edges: refused) */
                d.residual.value_embeds = pick_int(r, 3);
            if (u8(r) >= 128) /* DenseFormer's period (past n_layers, without dwa: refused) */
                d.residual.dwa_period = pick_int(r, 5);
        }
    }
    rc = nb_stack_init(c, &s, &d, mb, ms);
    check_rc(c, rc);
    if (rc) {
        CHECK(s.layers == NULL && s.tensors == NULL && s.skip == NULL && s.mm == NULL,
              "failed init left tables");
        nb_stack_free(&s);
        return;
    }
    n_accepted++;
    {   /* the tensor table tiles [0, n_params) in order */
        size_t at = 0;
        for (t = 0; t < s.n_tensors; t++) {
            CHECK(s.tensors[t].offset == at && s.tensors[t].count > 0, "tensor %d", t);
            at += s.tensors[t].count;
        }
        CHECK(at == s.n_params, "table covers %zu of %zu", at, s.n_params);
    }
    {   /* a trainer's layout: the tensors in reverse order with gaps (valid), or all at 0 */
        const unsigned how = u8(r);
        size_t* off = (size_t*)malloc(sizeof(size_t) * (size_t)s.n_tensors);
        size_t at = how % 3, count;
        for (t = s.n_tensors - 1; t >= 0; t--) {
            off[t] = how & 8 ? 0 : at;
            at += s.tensors[t].count + how % 3;
        }
        count = at + (how >> 4);
        if (how & 4) {
            rc = nb_stack_set_layout(c, &s, off, count);
            check_rc(c, rc);
            CHECK((rc == NB_OK) == (!(how & 8) || s.n_tensors == 1), "set_layout: %s", c->err);
            CHECK(rc != NB_OK || s.n_params == count, "set_layout: n_params");
        }
        free(off);
    }
    if (s.n_params + s.n_cache + s.n_scratch <= 2 * MAX_VALUES &&
        (size_t)s.desc.n_layers * mb * ms * (s.n_params / (size_t)s.desc.n_layers + (size_t)ms *
                                             s.desc.d_model) <= 4 * MAX_VALUES) {
        const size_t n = (size_t)mb * ms * s.desc.d_model * 2;
        nb_real *w = buf(s.n_params, 0), *gw = buf(s.n_params, 0);
        nb_real *cache = buf(s.n_cache, 0), *scr = buf(s.n_scratch, 0);
        nb_real *x = buf(n, (nb_real)0.2), *out = buf(n, 9), *dx = buf(n, 9);
        double diag[64];
        int ok_bt, skipped = 0, ve_bound = 2; /* value embeddings: 2 rows and gradients bound */
        nb_real *ve = NULL, *dve = NULL;
        pick_bt(r, mb, ms, &B, &T);
        ok_bt = B > 0 && T > 0 && B <= mb && T <= ms;
        CHECK(nb_stack_init_params(c, &s, w, (nb_init_scheme)(u8(r) % 11), 0, u8(r)) == NB_OK,
              "init_params: %s", c->err);
        if (s.desc.n_layers > 1 && (u8(r) & 3) == 0) {
            s.skip[u8(r) % (unsigned)s.desc.n_layers] = 1;
            skipped = 1;
        }
        if (s.desc.residual.value_embeds) { /* the tables' rows: both, rows alone, or none */
            const size_t nv = (size_t)s.desc.residual.value_embeds * mb * ms *
                              s.layers[0].attn.desc.n_kv_heads * s.layers[0].attn.head_dim;
            ve = buf(nv, (nb_real)0.3); dve = buf(nv, 9);
            ve_bound = (int)(u8(r) % 3);
            CHECK(nb_stack_set_value_embeds(c, &s, ve_bound ? ve : NULL, ve_bound == 2 ? dve : NULL) ==
                      NB_OK, "set_value_embeds: %s", c->err);
        }
        rc = nb_stack_forward(c, &s, w, out, x, B, T, cache, scr);
        check_rc(c, rc);
        /* a skipped layer is refused, naming it, where layers' outputs cross to later layers
           (DenseFormer, Attention Residuals, U-Net, re-injection; the value residual's V_0);
           value embeddings without their rows, naming the binding */
        CHECK(!ok_bt || rc == NB_OK ||
                  (skipped && rc == NB_ERR_CONFIG && strstr(c->err, "skipped") != NULL) ||
                  (!ve_bound && rc == NB_ERR_NULL && strstr(c->err, "nb_stack_set_value_embeds") != NULL),
              "stack forward B=%d T=%d: %s", B, T, c->err);
        if (!rc) {
            n_ran++;
            rc = nb_stack_backward(c, &s, w, gw, dx, out, B, T, cache, scr);
            CHECK(rc == NB_OK || (ve_bound == 1 && rc == NB_ERR_NULL &&
                                  strstr(c->err, "nb_stack_set_value_embeds") != NULL),
                  "stack backward: %s", c->err);
            if (rc) goto done; /* the refused backward: nothing more to look at */
            if (s.desc.n_layers + 1 <= 8) {
                const int st = (int)(u8(r) % 3);
                CHECK((nb_stack_hidden_norms(&s, cache, B, T, st, diag) == NB_OK) ==
                      (st < s.streams), "hidden_norms stream %d", st);
                CHECK(nb_stack_angular_distance(&s, cache, B + 1, T, 0, diag) != NB_OK,
                      "angular distance with another B");
                CHECK((nb_stack_hyper_gains(&s, cache, B, T, diag, diag + 16, diag + 32) ==
                       NB_OK) == (s.desc.hyper.kind > NB_HYPER_NONE), "hyper gains");
            }
            if ((size_t)s.desc.n_layers * s.desc.n_heads <= 32) { /* head stats, QK-Clip */
                int l, clipped = -1;
                CHECK(nb_stack_head_stats(&s, cache, B, T, diag, diag + 32) == NB_OK,
                      "head stats");
                for (l = 0; l < s.desc.n_layers * s.desc.n_heads; l++)
                    CHECK(!(diag[32 + l] < 0) && !(diag[32 + l] > 1 + 1e-5), /* NaN: any */
                          "first-key mass %g",
                          diag[32 + l]);
                rc = nb_stack_qk_clip(c, &s, w, diag, 0.5, &clipped);
                check_rc(c, rc);
                CHECK(rc != NB_OK || (clipped >= 0 && clipped <= s.desc.n_layers *
                                                                 s.desc.n_heads), "qk_clip count");
            }
            if (B > 1) {
                size_t i;
                for (i = 0; i < n; i++) dx[i] = 9;
                rc = nb_stack_backward(c, &s, w, gw, dx, out, B - 1, T, cache, scr);
                CHECK(rc == NB_ERR_CONFIG && same(dx, n, 9), "backward B-1 not refused");
            }
        } else {
            CHECK(same(out, n, 9), "refused stack forward wrote out");
        }
    done:
        free(w); free(gw); free(cache); free(scr); free(x); free(out); free(dx); free(ve); free(dve);
    }
    nb_stack_free(&s);
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    rd r;
    nb_ctx c;
    unsigned what;
    r.p = data; r.n = size; r.at = 0;
    memset(&c, 0, sizeof c);
    what = u8(&r);
    c.num_threads = 1 + (int)(u8(&r) % 3);
    if (what % 3 == 0) run_attn(&r, &c);
    else if (what % 3 == 1) run_ffn(&r, &c);
    else run_stack(&r, &c);
    return 0;
}

#ifndef NB_LIBFUZZER
/* Random bytes biased to small values: most choices then land on the small, valid side. */
static unsigned long long mix(unsigned long long* s) {
    unsigned long long z = (*s += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static int run_file(const char* path) {
    FILE* f = fopen(path, "rb");
    uint8_t b[4096];
    size_t n;
    if (!f) { fprintf(stderr, "fuzz_desc: cannot open %s\n", path); return 1; }
    n = fread(b, 1, sizeof b, f);
    fclose(f);
    LLVMFuzzerTestOneInput(b, n);
    return 0;
}

int main(int argc, char** argv) {
    uint8_t b[256];
    unsigned long long st;
    long it, iters;
    int i, bad = 0;
    if (argc > 1 && strcmp(argv[1], "--corpus") == 0) {
        for (i = 2; i < argc; i++) bad |= run_file(argv[i]);
        printf("fuzz_desc: %d corpus inputs, %d failed checks\n", argc - 2, fail_count);
        return bad || fail_count;
    }
    if (argc > 2 && strcmp(argv[1], "--write-seeds") == 0) {
        for (i = 0; i < 24; i++) {
            char path[512];
            FILE* f;
            size_t k;
            st = 0x5EED0000ULL + (unsigned long long)i;
            for (k = 0; k < 64; k++) b[k] = (uint8_t)(mix(&st) % 64);
            b[0] = (uint8_t)i;
            snprintf(path, sizeof path, "%s/seed%02d", argv[2], i);
            if (!(f = fopen(path, "wb"))) return 1;
            fwrite(b, 1, 64, f);
            fclose(f);
        }
        return 0;
    }
    iters = argc > 1 ? atol(argv[1]) : 3000;
    st = argc > 2 ? strtoull(argv[2], NULL, 0) : 0xDE5C;
    for (it = 0; it < iters; it++) {
        const int len = 8 + (int)(mix(&st) % 120), rare = (int)(mix(&st) % 8);
        for (i = 0; i < len; i++) {
            const unsigned long long v = mix(&st);
            /* small bytes pick small ints and sensible floats; now and then any byte */
            b[i] = (uint8_t)((int)(v % 16) < rare ? v >> 8 : (v >> 8) % 48);
        }
        b[0] = (uint8_t)(it % 3); /* attention, FFN and stacks in turn */
        LLVMFuzzerTestOneInput(b, (size_t)len);
    }
    printf("fuzz_desc: %ld random descriptions, %ld accepted, %ld forward+backward runs, %d failed "
           "checks\n", iters, n_accepted, n_ran, fail_count);
    return fail_count != 0;
}
#endif
