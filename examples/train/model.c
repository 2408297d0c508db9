/* model.c: token embedding (256 x d) -> normblocks stack (any preset or schedule, with its
   final norm) -> untied head (256 x d) -> mean cross-entropy over the masked targets; forward,
   backward with the gradient reduction over the ranks started as each range is final;
   evaluation and exact-match accuracy, both global over the ranks. nGPT (--preset ngpt) as its
   code around the stack: logits times a learnable sz per byte, the embedding's and head's rows
   unit (ngpt.c). Around any stack: the embedding times a scale (DyT's learnable one,
   Gemma's constant sqrt(d)) and Gemma 2's final-logit softcap C tanh(z / C), last. */
#define NORMBLOCKS_IMPLEMENTATION
#include "train.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void model_free(model* m) {
    nb_stack_free(&m->s);
    dist_destroy(m->dist);
    free(m->p); free(m->g); free(m->m); free(m->v); free(m->w16); free(m->decay); free(m->group); free(m->sz_terms);
    free(m->x); free(m->h); free(m->dh); free(m->dx); free(m->logits); free(m->ve_rows); free(m->ve_grad);
    free(m->h16); free(m->dl16);
    free(m->cache); free(m->scratch); free(m->row_loss); free(m->tok); free(m->mask);
    free(m->head_max); free(m->head_mass); free(m->head_gate); free(m->head_sink);
    free(m->gn_part);
    memset(m, 0, sizeof *m);
}

/* The stack tensor of layer l's output projection of a sublayer (fault injection). */
static const nb_tensor_info* out_proj(const model* m, int l, int ffn) {
    char name[64];
    int t;
    snprintf(name, sizeof name, "blocks.%d.%s.weight", l, ffn ? "ff_out" : "attn_out");
    for (t = 0; t < m->s.n_tensors; t++)
        if (!strcmp(m->s.tensors[t].name, name)) return &m->s.tensors[t];
    return NULL;
}

static nb_real fault_value(const config* c) { return c->machine.inj_kind == 1 ? (nb_real)NAN : (nb_real)INFINITY; }

/* --check-finite on the gradients of [offset, offset + count) of the stack: name the first
   non-finite one's tensor (the first found, top down, is where it appeared: the backward
   carries it only to the layers below) */
static void check_grads(model* m, int layer, size_t offset, size_t count) {
    const nb_real* g = m->g + m->off_stack;
    size_t i;
    int t;
    if (m->bad_grad[0]) return;
    for (i = offset; i < offset + count; i++)
        if (!isfinite(g[i])) break;
    if (i == offset + count) return;
    for (t = 0; t < m->s.n_tensors; t++) {
        const nb_tensor_info* ti = &m->s.tensors[t];
        if (i >= ti->offset && i < ti->offset + ti->count) {
            snprintf(m->bad_grad, sizeof m->bad_grad, "non-finite gradient in %s (layer %d, %s)",
                     ti->name, layer, ti->kind == NB_TENSOR_QKV || ti->kind == NB_TENSOR_ATTN_OUT ?
                     "attention sublayer" : ti->kind == NB_TENSOR_FF_IN || ti->kind == NB_TENSOR_FF_OUT ?
                     "FFN sublayer" : "norm parameters");
            return;
        }
    }
}

/* g[off, off + count) is final: to the reduction, and (one process) to the gradient norm */
static void grads_ready(model* m, size_t off, size_t count) {
    gnorm_ready(m, off, count);
    dist_grads_ready(m->dist, off, count);
}

/* the stack reports finished gradient ranges; in the flat buffer they sit after wte */
static void on_grads_ready(void* user, int layer, size_t offset, size_t count) {
    model* m = (model*)user;
    const config* c = m->cfg;
    if (c->machine.inj_kind && c->machine.inj_grad && m->step + 1 == c->machine.inj_step && layer == c->machine.inj_layer) {
        const nb_tensor_info* t = out_proj(m, layer, c->machine.inj_ffn);
        if (t) m->g[m->off_stack + t->offset] = fault_value(c);
    }
    if (c->machine.check_finite) check_grads(m, layer, offset, count);
    grads_ready(m, m->off_stack + offset, count);
}

/* What the flags ask of the resolved stack that it does not have. The library refuses
   removing a gain or bias a norm kind lacks, but "on" is its default (0: the kind's), so asking
   for one is said here; QK-Clip is tried on the initialized parameters with every max logit 0
   (under any tau: nothing is scaled), where the library checks that every layer's logits follow
   W_q and W_k before it writes anything. */
static int option_refusals(model* m, const config* c) {
    const nb_norm_type k = m->s.desc.norm.type;
    if (c->model.norm.bias > 0 && (k == NB_NORM_RMS || k == NB_NORM_L2))
        return fail("--norm-bias on: the stack's norms are %s, which have no bias (layer, dyt and derf "
                    "norms have one)", norm_kind_name(k));
    if (c->model.norm.gain > 0 && k == NB_NORM_L2)
        return fail("--norm-gain on: the stack's norms are l2 (x / ||x||, nGPT's justnorm), which have no "
                    "weight");
    if (c->optim.qk_clip > 0) {
        double* zero = (double*)xcalloc((size_t)m->s.desc.n_layers * m->s.desc.n_heads, sizeof(double));
        const nb_result rc = nb_stack_qk_clip(&m->ctx, &m->s, m->p + m->off_stack, zero, c->optim.qk_clip, NULL);
        free(zero);
        if (rc != NB_OK)
            return fail("--qk-clip with %s: %s (QK-Clip bounds the logits by scaling W_q and W_k; behind "
                        "Q/K norms or nGPT's s_qk they do not scale with them)",
                        c->model.schedule[0] ? "this schedule" : m->s.desc.name[0] ? m->s.desc.name
                        : nb_preset_name(m->s.desc.preset), m->ctx.err);
    }
    return 0;
}

int model_init(model* m, const config* c) {
    nb_stack_desc d;
    double estd, hstd;
    size_t bt, i;
    int t;
    memset(m, 0, sizeof *m);
    m->cfg = c;
    m->gn_next = -1; /* no gradient summed yet (gnorm_begin) */
    m->ctx.num_threads = c->machine.threads;
    if (make_desc(c, &d, m->layers)) return 1;
    if (resolve_init(c, &d, &m->init, &m->init_std0, &m->init_why)) return 1;
    /* this rank's rows of the global batch: [b0, b1) */
    m->B_global = c->loop.batch;
    m->b0 = (int)((long long)c->loop.batch * g_rank / g_ranks);
    m->B = (int)((long long)c->loop.batch * (g_rank + 1) / g_ranks) - m->b0;
    if (nb_stack_init(&m->ctx, &m->s, &d, m->B, c->loop.seq) != NB_OK)
        return fail("invalid model: %s", m->ctx.err);
    /* auto: bf16 only where nb_stack_init's probe timed the engine it chose for bf16 (oneDNN,
       or the portable path: normblocks' own GEMM on AMX tiles there) at least 1.25x faster
       than float32 (AVX512-BF16 without AMX can be slower than float32); no probe (no bf16
       matrix unit that oneDNN knows, or no oneDNN in this build): float32 */
    if (c->machine.bf16 == 2) {
        const int timed = m->ctx.bf16_engine != 0;
        const int dnnl = m->s.desc.gemm.backend == NB_BACKEND_DNNL;
        const float bf16_ms = m->ctx.gemm_probe_ms[dnnl ? 1 : 0];
        const float fp32_ms = m->ctx.gemm_probe_ms[2];
        const char* engine = dnnl ? "on oneDNN" : "on the portable path";
        if (timed && bf16_ms * 1.25f <= fp32_ms) {
            say("precision auto: bf16, timed faster here than float32 (a 512^3 GEMM: %.2f ms in bf16 "
                "%s, %.2f ms in float32)\n", bf16_ms, engine, fp32_ms);
        } else if (!timed && dnnl) {
            say("precision auto: bf16 on oneDNN, as --backend dnnl asks (not timed)\n");
        } else {
            if (timed)
                say("precision auto: fp32, timed faster here than bf16 %s (a 512^3 GEMM: %.2f ms in "
                    "float32, %.2f ms in bf16)\n", engine, fp32_ms, bf16_ms);
            else
                say("precision auto: fp32, as bf16 would run %s\n", nb_stack_kernels(&m->s));
            nb_stack_free(&m->s);
            d.gemm.precision = NB_PRECISION_FP32;
            d.gemm.bf16_weights = 0;
            d.gemm.bf16_outputs = 0;
            if (nb_stack_init(&m->ctx, &m->s, &d, m->B, c->loop.seq) != NB_OK)
                return fail("invalid model: %s", m->ctx.err);
        }
    }
    m->d = c->model.d_model; m->T = c->loop.seq;
    m->ngpt = m->s.desc.preset == NB_PRESET_NGPT;
    /* the logits' multiplier: CompleteP's alpha_out / m_d (its code's mup_output_alpha = 1),
       muP's mup_output_mult (default 1 / m_d) */
    m->out_mult = c->model.mup.output_mult > 0 ? c->model.mup.output_mult
                  : c->model.mup.on || c->model.residual.completep > 0 ? 1 / width_mult(c) : 1;
    bt = (size_t)m->B * m->T;
    /* DyT's LLaMA code multiplies the embedding by a learnable scalar, initialized to sqrt(d);
       Gemma by the constant sqrt(d), rounded to the activations' dtype (here float32) */
    m->embed_mode = c->model.norm.embed_scale >= 0 ? c->model.norm.embed_scale
                    : d.preset == NB_PRESET_DYT ? EMBED_LEARN : EMBED_OFF;
    m->es = m->embed_mode == EMBED_LEARN;
    /* the constant multiplier (no learnable scale): Gemma's sqrt(d) (or 1), times muP's
       mup_embedding_mult in double, rounded once */
    m->embed_const = m->embed_mode == EMBED_SQRT_D ? (nb_real)sqrt((double)c->model.d_model) : 1;
    if (c->model.mup.embed_mult > 0) {
        if (m->es)
            return fail("--mup-embed-mult with a learnable embedding scale (--embed-scale learn, the dyt "
                        "preset's): that scale is the embedding's multiplier already; pass --embed-scale off "
                        "or drop --mup-embed-mult");
        m->embed_const = (nb_real)(m->embed_const * c->model.mup.embed_mult);
    }
    m->softcap = c->model.logit_softcap;
    m->n_ve = m->s.desc.residual.value_embeds; /* value embeddings: tables between es and the stack */
    m->ve_w = m->s.layers[0].attn.desc.n_kv_heads * m->s.layers[0].attn.head_dim;
    m->off_ve = (size_t)VOCAB * m->d + (size_t)m->es;
    m->off_stack = m->off_ve + (size_t)m->n_ve * VOCAB * m->ve_w;
    m->off_head = m->off_stack + m->s.n_params;
    m->off_sz = m->off_head + (size_t)VOCAB * m->d;
    m->n = m->off_sz + (m->ngpt ? VOCAB : 0);
    m->dist = dist_create(m->n, c->machine.zero, (size_t)c->machine.bucket_kb * 1024 / sizeof(nb_real));
    if (!m->dist) return fail("cannot set up the gradient reduction for %zu parameters", m->n);
    dist_update_range(m->dist, &m->upd_lo, &i);
    m->n_upd = i - m->upd_lo;
    m->ctx.grads_ready = on_grads_ready;
    m->ctx.grads_ready_user = m;
    m->p = (nb_real*)xcalloc(m->n, sizeof(nb_real));
    m->g = (nb_real*)xcalloc(m->n, sizeof(nb_real));
    m->m = (nb_real*)xcalloc(m->n_upd, sizeof(nb_real));
    m->v = (nb_real*)xcalloc(m->n_upd, sizeof(nb_real));
    /* written now: calloc's pages are mapped at the first write, which would otherwise be the
       first step's AdamW (360 ms for the 105 MB of m and v at 13 M parameters on a KVM guest,
       as long as 25 later steps of AdamW) */
    memset(m->m, 0, m->n_upd * sizeof(nb_real));
    memset(m->v, 0, m->n_upd * sizeof(nb_real));
    if (m->s.desc.gemm.bf16_weights) { /* the weights' bf16 copy, refreshed before the first forward */
        m->w16 = (unsigned short*)xcalloc(m->n, sizeof(unsigned short));
        if (nb_stack_set_bf16_weights(&m->ctx, &m->s, m->w16 + m->off_stack) != NB_OK)
            return fail("bf16 weights: %s", m->ctx.err);
    }
    m->decay = (unsigned char*)xcalloc(m->n, 1);
    m->group = (unsigned char*)xcalloc(m->n, 1);
    m->x = (nb_real*)xcalloc(bt * m->d, sizeof(nb_real));
    m->h = (nb_real*)xcalloc(bt * m->d, sizeof(nb_real));
    m->dh = (nb_real*)xcalloc(bt * m->d, sizeof(nb_real));
    m->dx = (nb_real*)xcalloc(bt * m->d, sizeof(nb_real));
    m->logits = (nb_real*)xcalloc(bt * VOCAB, sizeof(nb_real));
    if (m->w16) { /* the head on the stack's engine: its operands in bf16 (head_gemm) */
        m->h16 = (unsigned short*)xcalloc(bt * m->d, sizeof(unsigned short));
        m->dl16 = (unsigned short*)xcalloc(bt * VOCAB, sizeof(unsigned short));
    }
    m->cache = (nb_real*)xcalloc(m->s.n_cache, sizeof(nb_real));
    m->scratch = (nb_real*)xcalloc(m->s.n_scratch, sizeof(nb_real));
    m->row_loss = (double*)xcalloc(bt, sizeof(double));
    m->tok = (int*)xcalloc((size_t)m->B * (m->T + 1), sizeof(int));
    m->mask = (unsigned char*)xcalloc(bt, 1);
    if (m->ngpt) m->sz_terms = (nb_real*)xcalloc(bt * VOCAB, sizeof(nb_real));
    if (m->n_ve && vembed_setup(m)) return 1;
    m->head_max = (double*)xcalloc((size_t)m->s.desc.n_layers * m->s.desc.n_heads, sizeof(double));
    m->head_mass = (double*)xcalloc((size_t)m->s.desc.n_layers * m->s.desc.n_heads, sizeof(double));
    if (m->s.desc.attn.gate)
        m->head_gate = (double*)xcalloc((size_t)m->s.desc.n_layers * m->s.desc.n_heads, sizeof(double));
    if (m->s.desc.attn.sink)
        m->head_sink = (double*)xcalloc((size_t)m->s.desc.n_layers * m->s.desc.n_heads, sizeof(double));
    /* weight decay: embedding and head yes; stack matrices yes; norm gains, biases and
       SiameseNorm gamma (the table's no_decay) only with --wd-norms on. Off by default, as in
       llm.c and nanoGPT (matrices only); the HybridNorm yaml decays them
       (decay_norm_and_bias: true), Mix-LN's scripts use no weight decay at all, and what the
       SiameseNorm code does with gamma is in a patch it did not release. */
    for (i = 0; i < (size_t)VOCAB * m->d; i++) m->decay[i] = 1;
    if (m->es) m->decay[(size_t)VOCAB * m->d] = (unsigned char)c->optim.wd_norms; /* a scale, as gains */
    memset(m->decay + m->off_ve, 1, m->off_stack - m->off_ve); /* value embeddings: as the embedding */
    for (i = m->off_head; i < m->off_sz; i++) m->decay[i] = 1;
    for (i = m->off_sz; i < m->n; i++) m->decay[i] = (unsigned char)c->optim.wd_norms; /* sz: a scale */
    for (t = 0; t < m->s.n_tensors; t++) {
        const nb_tensor_info* ti = &m->s.tensors[t];
        memset(m->decay + m->off_stack + ti->offset, ti->no_decay && !c->optim.wd_norms ? 0 : 1, ti->count);
    }
    optim_groups(m, c); /* CompleteP's or muP's per-group learning rates, weight decay and eps */
    /* init: the stack per scheme (with --completep its matrices by width alone); embedding and
       head with the scheme's io std, derived seeds. Every rank computes the same values from
       the seed. */
    if (c->model.residual.completep > 0) {
        if (completep_init(m, c)) return 1;
    } else if (nb_stack_init_params(&m->ctx, &m->s, m->p + m->off_stack, m->init, m->init_std0,
                                    c->loop.seed) != NB_OK)
        return fail("init: %s", m->ctx.err);
    else if (c->model.mup.on)
        mup_init(m, c);
    nb_init_io_std(&m->s, m->init, m->init_std0, &estd, &hstd);
    if (c->model.mup.on || c->model.residual.completep > 0) { /* the width rules: as at d_base */
        const base_width b = width_base_stds(m->init, m->init_std0, width_mult(c));
        estd *= b.embed;
        hstd *= b.head;
    }
    /* nGPT: N(0, 1/d) untruncated (its code's base_scale), then ngpt_init_io */
    nb_fill_normal(m->p, (size_t)VOCAB * m->d, estd, m->ngpt ? 0 : 3, c->loop.seed ^ 0x57E0000000000001ULL);
    if (m->es) m->p[(size_t)VOCAB * m->d] = (nb_real)sqrt((double)m->d);
    vembed_init(m, c->loop.seed);
    nb_fill_normal(m->p + m->off_head, (size_t)VOCAB * m->d, hstd, m->ngpt ? 0 : 3,
                   c->loop.seed ^ 0x4EAD000000000002ULL);
    if (m->ngpt && ngpt_init_io(m)) return 1;
    return option_refusals(m, c);
}

/* The checkpoint's parameter tensors in buffer order. Returns the count; table may be NULL. */
int model_tensors(const model* m, ck_tensor* table) {
    int t, n = 0;
    if (table) {
        snprintf(table[n].name, sizeof table[n].name, "transformer.wte.weight");
        table[n].off = 0; table[n].rows = VOCAB; table[n].cols = m->d;
    }
    n++;
    if (m->es) {
        if (table) {
            snprintf(table[n].name, sizeof table[n].name, "transformer.embed_scale");
            table[n].off = (size_t)VOCAB * m->d; table[n].rows = 1; table[n].cols = 0;
        }
        n++;
    }
    n = vembed_tensors(m, table, n);
    for (t = 0; t < m->s.n_tensors; t++, n++) {
        const nb_tensor_info* ti = &m->s.tensors[t];
        if (!table) continue;
        snprintf(table[n].name, sizeof table[n].name, "transformer.%s", ti->name);
        table[n].off = m->off_stack + ti->offset;
        table[n].rows = ti->rows;
        table[n].cols = ti->ndim == 1 ? 0 : ti->cols;
    }
    if (table) {
        snprintf(table[n].name, sizeof table[n].name, "lm_head.weight");
        table[n].off = m->off_head; table[n].rows = VOCAB; table[n].cols = m->d;
    }
    n++;
    if (m->ngpt) { /* nGPT's GPT.sz */
        if (table) {
            snprintf(table[n].name, sizeof table[n].name, "sz");
            table[n].off = m->off_sz; table[n].rows = VOCAB; table[n].cols = 0;
        }
        n++;
    }
    return n;
}

size_t tensor_count(const ck_tensor* t) { return (size_t)t->rows * (size_t)(t->cols ? t->cols : 1); }

/* The LM head's GEMMs (C overwritten) in the stack's precision. In BF16 with the weights' bf16
   copy (w16) on the stack's engine, from the bf16 copies of the operands A16 and B16 (the same
   values nb_gemm_bf16 rounds A and B to: on the portable path the same bits). */
static nb_result head_gemm(model* m, int ta, int tb, int M, int N, int K, nb_real alpha,
                           const nb_real* A, const unsigned short* A16, int lda, const nb_real* B,
                           const unsigned short* B16, int ldb, nb_real* C, int ldc) {
    if (m->h16)
        return nb_stack_gemm_bf16(&m->ctx, &m->s, ta, tb, M, N, K, alpha, A16, lda, B16, ldb, 0,
                                  C, ldc);
    return m->s.desc.gemm.precision == NB_PRECISION_BF16
               ? nb_gemm_bf16(&m->ctx, ta, tb, M, N, K, alpha, A, lda, B, ldb, 0, C, ldc)
               : nb_gemm(&m->ctx, ta, tb, M, N, K, alpha, A, lda, B, ldb, 0, C, ldc);
}

/* dst = the bits of bf16(src), n values, threaded (the head's operands) */
static void round_bf16(const model* m, unsigned short* dst, const nb_real* src, long long n) {
    const long long chunk = 1 << 16;
    long long c;
    TR_OMP(omp parallel for schedule(static) num_threads(nb_num_threads(&m->ctx)))
    for (c = 0; c < n; c += chunk) nb_bf16_round(dst + c, src + c, (size_t)(n - c < chunk ? n - c : chunk));
}

/* The multiplier of the embedding rows: the learnable scalar, or the constant (1, Gemma's
   sqrt(d), times muP's multiplier). */
static nb_real embed_multiplier(const model* m) {
    if (m->es) return m->p[(size_t)VOCAB * m->d];
    return m->embed_const;
}

/* Gemma 2's final-logit softcap on one row, in place: z = cap tanh(z / cap) (tanh in double,
   rounded to float as the other logits); slope (NULL: not kept) gets its derivative
   dz'/dz = 1 - tanh^2(z / cap) for the backward. */
static void softcap_row(nb_real* z, double cap, nb_real* slope) {
    int k;
    for (k = 0; k < VOCAB; k++) {
        const double t = tanh((double)z[k] / cap);
        z[k] = (nb_real)(cap * t);
        if (slope) slope[k] = (nb_real)(1 - t * t);
    }
}

int model_step(model* m, int train, double* count, double* out) {
    const int B = m->B, T = m->T, d = m->d, nt = nb_num_threads(&m->ctx);
    const long long bt = (long long)B * T;
    const nb_real* wte = m->p;
    const nb_real* head = m->p + m->off_head;
    const nb_real es = embed_multiplier(m);
    double sums[3] = {0, 0, 0}, inv;   /* loss sum, target count, stop request: over all ranks */
    const config* c = m->cfg;
    nb_real sz[VOCAB];                 /* nGPT: the logits' scales sz sqrt(d) */
    long long r;
    if (m->ngpt) ngpt_logit_scales(m, sz);
    if (train && c->machine.inj_kind && !c->machine.inj_grad && m->step + 1 == c->machine.inj_step) {
        const nb_tensor_info* t = out_proj(m, c->machine.inj_layer, c->machine.inj_ffn);
        if (t) m->p[m->off_stack + t->offset] = fault_value(c); /* the sublayer's output goes non-finite */
        m->w16_ok = 0;
    }
    if (m->w16 && !m->w16_ok) weights16_refresh(m, 0, m->n);
    TR_OMP(omp parallel for schedule(static) num_threads(nt))
    for (r = 0; r < bt; r++) {
        const int tk = m->tok[(r / T) * (T + 1) + r % T];
        const nb_real* e = wte + (size_t)tk * d;
        int k;
        for (k = 0; k < d; k++) m->x[r * d + k] = es * e[k];
    }
    vembed_gather(m);
    if (nb_stack_forward(&m->ctx, &m->s, m->p + m->off_stack, m->h, m->x, B, T, m->cache,
                         m->scratch) != NB_OK)
        return train ? fail("forward, step %d: %s", m->step + 1, m->ctx.err) : fail("forward: %s", m->ctx.err);
    if (m->h16) round_bf16(m, m->h16, m->h, bt * d);
    if (head_gemm(m, 0, 1, (int)bt, VOCAB, d, (nb_real)m->out_mult, m->h, m->h16, d, head,
                  m->h16 ? m->w16 + m->off_head : NULL, d, m->logits, VOCAB))
        return fail("head: %s", m->ctx.err);
    /* per row: loss = lse(z) - z[target]; with train, z becomes softmax(z) - onehot (the
       1/count of the mean is applied by the head GEMMs, once the global count is known).
       nGPT: z = u sz sqrt(d) per byte (u the head's output); with train, z becomes
       (softmax(z) - onehot) sz sqrt(d), the gradient of u, and sz_terms the row's terms of
       sz's, (softmax(z) - onehot) u. The softcap comes last, as Gemma 2 applies it after any
       scaling: z' = C tanh(z / C) of the scaled logits (sampling and evaluation see z' too),
       and the gradient of z is that of z' times 1 - tanh^2(z / C). */
    TR_OMP(omp parallel for schedule(static) num_threads(nt))
    for (r = 0; r < bt; r++) {
        nb_real* z = m->logits + r * VOCAB;
        nb_real* st = m->ngpt && train ? m->sz_terms + r * VOCAB : NULL;
        const int target = m->tok[(r / T) * (T + 1) + r % T + 1];
        nb_real u[VOCAB], slope[VOCAB];
        double mx, se = 0;
        int k;
        if (m->ngpt)
            for (k = 0; k < VOCAB; k++) { u[k] = z[k]; z[k] = u[k] * sz[k]; }
        if (m->softcap > 0) softcap_row(z, m->softcap, train ? slope : NULL);
        if (!m->mask[r]) {
            m->row_loss[r] = 0;
            if (train) memset(z, 0, VOCAB * sizeof(nb_real));
            if (st) memset(st, 0, VOCAB * sizeof(nb_real));
            continue;
        }
        mx = z[0];
        for (k = 1; k < VOCAB; k++) if (z[k] > mx) mx = z[k];
        for (k = 0; k < VOCAB; k++) se += exp((double)z[k] - mx);
        m->row_loss[r] = mx + log(se) - (double)z[target];
        if (train) {
            for (k = 0; k < VOCAB; k++) z[k] = (nb_real)(exp((double)z[k] - mx) / se);
            z[target] -= 1;
            if (m->softcap > 0)  /* dL/dz = dL/dz' (1 - tanh^2(z / C)) */
                for (k = 0; k < VOCAB; k++) z[k] *= slope[k];
        }
        if (st)
            for (k = 0; k < VOCAB; k++) { st[k] = z[k] * u[k]; z[k] *= sz[k]; }
    }
    for (r = 0; r < bt; r++) {
        sums[0] += m->row_loss[r];
        sums[1] += m->mask[r] ? 1 : 0;
    }
    sums[2] = g_stop ? 1 : 0;
    if (g_ranks > 1) {
        const double t0 = now_s();
        dist_sum(sums, 3);
        m->t_comm += now_s() - t0;
    }
    m->stop = sums[2] > 0; /* one rank's Ctrl-C stops every rank after the same step */
    *count = sums[1];
    *out = sums[1] > 0 ? sums[0] / sums[1] : 0;
    if (!train) return 0;
    /* backward: head, stack, embedding; each range of the gradient buffer goes to the
       reduction as soon as it is final (head first, wte last: descending offsets) */
    inv = sums[1] > 0 ? 1.0 / sums[1] : 0;
    if (m->ngpt) ngpt_sz_grad(m, bt, inv); /* reduced with the head's range below */
    inv *= m->out_mult; /* logits = out_mult h head^T */
    dist_grads_begin(m->dist, m->g);
    gnorm_begin(m);
    if (m->h16) round_bf16(m, m->dl16, m->logits, bt * VOCAB);
    if (head_gemm(m, 1, 0, VOCAB, d, (int)bt, (nb_real)inv, m->logits, m->dl16, VOCAB, m->h,
                  m->h16, d, m->g + m->off_head, d) ||
        head_gemm(m, 0, 0, (int)bt, d, VOCAB, (nb_real)inv, m->logits, m->dl16, VOCAB, head,
                  m->h16 ? m->w16 + m->off_head : NULL, d, m->dh, d))
        return fail("head backward: %s", m->ctx.err);
    grads_ready(m, m->off_head, m->n - m->off_head); /* the head and nGPT's sz */
    m->bad_grad[0] = 0; /* the stack overwrites its gradients (param_grads): no zeroing pass */
    if (nb_stack_backward(&m->ctx, &m->s, m->p + m->off_stack, m->g + m->off_stack, m->dx, m->dh,
                          B, T, m->cache, m->scratch) != NB_OK)
        return fail("backward: %s", m->ctx.err);
    if (m->bad_grad[0]) return fail("backward, step %d: %s", m->step + 1, m->bad_grad);
    memset(m->g, 0, m->off_stack * sizeof(nb_real));
    for (r = 0; r < bt; r++) { /* serial scatter-add: a fixed order, bitwise reproducible */
        const int tk = m->tok[(r / T) * (T + 1) + r % T];
        nb_real* gw = m->g + (size_t)tk * d;
        const nb_real* dx = m->dx + r * d;
        int k;
        /* x = es e: de = es dx (sqrt(d) dx for the constant scale) */
        for (k = 0; k < d; k++) gw[k] += es * dx[k];
        if (m->es) { /* x = s e: ds = sum over rows of e . dx */
            const nb_real* e = wte + (size_t)tk * d;
            double s = 0;
            for (k = 0; k < d; k++) s += (double)e[k] * dx[k];
            m->g[(size_t)VOCAB * d] += (nb_real)s;
        }
    }
    vembed_scatter(m);
    grads_ready(m, 0, m->off_stack);
    return 0;
}

double evaluate(model* m, const dataset* ds, int n_batches) {
    double tot = 0, cnt = 0, c, l;
    int k;
    for (k = 0; k < n_batches; k++) {
        val_batch(ds, k, n_batches, m->B_global, m->b0, m->B, m->T, m->tok, m->mask);
        if (model_step(m, 0, &c, &l)) return NAN;
        tot += l * c;
        cnt += c;
    }
    return cnt > 0 ? tot / cnt : 0;
}

/* Exact-match accuracy of greedy answers on n held-out addition problems: problems are drawn
   in global batches; each rank answers its rows, the counts are summed. The first n_show
   problems (n_show <= n) are kept with the model's answers, whichever rank answered them. */
double answer_accuracy_show(model* m, const dataset* ds, int n, shown_problem* show, int n_show) {
    const int B = m->B, T = m->T, G = m->B_global;
    char (*want)[32] = (char (*)[32])xcalloc((size_t)B, 32);
    char (*got)[32] = (char (*)[32])xcalloc((size_t)B, 32);
    int* pos = (int*)xcalloc((size_t)B, sizeof(int));
    int* len = (int*)xcalloc((size_t)B, sizeof(int));
    int* alive = (int*)xcalloc((size_t)B, sizeof(int));
    /* the shown answers: bytes as doubles, each rank adds its rows' and the sum is the whole */
    enum { SHOW_W = sizeof show[0].got };
    double* sbuf = (double*)xcalloc((size_t)n_show * (SHOW_W + 1), sizeof(double));
    unsigned long long st = hash3(ds->seed, 0xACC, 1);
    double right = 0, acc = NAN;
    int done = 0, b, k, t;
    while (done < n) {
        const int ng = G < n - done ? G : n - done;    /* problems in this global batch */
        for (b = 0; b < G; b++) {                       /* every rank draws the whole batch */
            char q[64], a[32];
            unsigned long long sum;
            const int lb = b - m->b0, mine = lb >= 0 && lb < B;
            int lq;
            if (b >= ng) { if (mine) alive[lb] = 0; continue; }
            lq = add_problem(ds, &st, 1, q, &sum);
            add_answer(ds, sum, a);
            if (done + b < n_show) memcpy(show[done + b].q, q, (size_t)lq + 1);
            if (!mine) continue;
            {
                int* tr = m->tok + (size_t)lb * (T + 1);
                for (t = 0; t <= T; t++) tr[t] = t < lq ? (unsigned char)q[t] : '\n';
            }
            memcpy(want[lb], a, sizeof a);
            len[lb] = 0; pos[lb] = lq - 1; alive[lb] = 1;
        }
        for (b = 0; b < B; b++) {
            if (m->b0 + b >= ng) {
                alive[b] = 0;
                for (t = 0; t <= T; t++) m->tok[(size_t)b * (T + 1) + t] = '\n';
            }
        }
        memset(m->mask, 0, (size_t)B * T);
        for (k = 0; k < ds->digits + 2; k++) {
            double c, l;
            if (model_step(m, 0, &c, &l)) goto done; /* every rank takes the same steps */
            for (b = 0; b < B; b++) {
                const nb_real* z;
                int best = 0, v;
                if (!alive[b]) continue;
                z = m->logits + ((size_t)b * T + (size_t)pos[b]) * VOCAB;
                for (v = 1; v < VOCAB; v++) if (z[v] > z[best]) best = v;
                got[b][len[b]++] = (char)best;
                m->tok[(size_t)b * (T + 1) + (size_t)pos[b] + 1] = best;
                pos[b]++;
                if (best == '\n' || len[b] >= 30 || pos[b] >= T - 1) alive[b] = 0;
            }
        }
        for (b = 0; b < B; b++) {
            const int idx = done + m->b0 + b;
            int ok;
            if (m->b0 + b >= ng) continue;
            got[b][len[b]] = 0;
            ok = !strcmp(got[b], want[b]);
            right += ok;
            if (idx < n_show) {
                double* row = sbuf + (size_t)idx * (SHOW_W + 1);
                for (k = 0; k < len[b] && k < SHOW_W - 1 && got[b][k] != '\n'; k++)
                    row[k] = (unsigned char)got[b][k];
                row[SHOW_W] = ok;
            }
        }
        done += ng;
    }
    dist_sum(&right, 1);
    dist_sum(sbuf, n_show * (SHOW_W + 1));
    for (b = 0; b < n_show; b++) {
        const double* row = sbuf + (size_t)b * (SHOW_W + 1);
        for (k = 0; k < SHOW_W - 1 && row[k] != 0; k++) show[b].got[k] = (char)(unsigned char)row[k];
        show[b].got[k] = 0;
        show[b].ok = row[SHOW_W] != 0;
    }
    acc = right / n;
done:
    free(want); free(got); free(pos); free(len); free(alive); free(sbuf);
    return acc;
}

double answer_accuracy(model* m, const dataset* ds, int n) {
    return answer_accuracy_show(m, ds, n, NULL, 0);
}
