/* run.c: the training loop of one run. Every rank runs the same loop on its rows of each
   global batch; the losses, gradient norms, stop requests and evaluations it branches on are
   global, so all ranks take the same path. */
#include "train.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void history_free(history* h) {
    free(h->step_x); free(h->loss); free(h->step_gnorm); free(h->step_lr);
    free(h->eval_x); free(h->val); free(h->gnorm);
    free(h->diag_x); free(h->grad_l); free(h->hid_l); free(h->ang_l); free(h->hc_gain);
    free(h->step_maxlogit); free(h->step_clipped); free(h->head_max_l); free(h->head_mass_l);
    free(h->head_gate_l); free(h->head_sink_l); free(h->ar_w);
    memset(h, 0, sizeof *h);
}

/* Per-layer diagnostics of this step, before the update: gradient norms of the reduced
   gradients; hidden-state magnitude and angular distance of each residual stream (SiameseNorm
   has two) as means over every rank's tokens. */
static int record_diag(model* m, history* h, const nb_real* gu, int step) {
    const int L = m->s.desc.n_layers, S = h->streams, k = h->n_diag++;
    const double tokens = (double)m->B * m->T, all = (double)m->B_global * m->T;
    double* ang = (double*)xcalloc((size_t)(L + 1) * (L + 1), sizeof(double));
    int l, st;
    const size_t LH = (size_t)L * m->s.desc.n_heads;
    h->diag_x[k] = step + 1;
    layer_grad_norms(m, gu, h->grad_l + (size_t)k * L);
    /* the step's attention per head, measured with its first-key mass (heads_measure) */
    memcpy(h->head_max_l + k * LH, m->head_max, LH * sizeof(double));
    memcpy(h->head_mass_l + k * LH, m->head_mass, LH * sizeof(double));
    if (h->gated) memcpy(h->head_gate_l + k * LH, m->head_gate, LH * sizeof(double));
    if (h->sinks) memcpy(h->head_sink_l + k * LH, m->head_sink, LH * sizeof(double));
    for (st = 0; st < S; st++) {
        double* hid = h->hid_l + ((size_t)k * S + st) * (L + 1);
        double* adj = h->ang_l + ((size_t)k * S + st) * L;
        if (nb_stack_hidden_norms(&m->s, m->cache, m->B, m->T, st, hid) ||
            nb_stack_angular_distance(&m->s, m->cache, m->B, m->T, st, ang)) {
            free(ang);
            return fail("diagnostics: the stack's cache does not hold this step's forward");
        }
        for (l = 0; l < L; l++) adj[l] = ang[l * (L + 1) + l + 1];
        for (l = 0; l <= L; l++) hid[l] *= tokens / all;
        for (l = 0; l < L; l++) adj[l] *= tokens / all;
        dist_sum(hid, L + 1);
        dist_sum(adj, L);
    }
    free(ang);
    return 0;
}

static const char* kind_group(nb_tensor_kind k, int derf) {
    switch (k) {
    case NB_TENSOR_GAIN: return "norm gains";
    case NB_TENSOR_BIAS: return "biases";
    case NB_TENSOR_SIAMESE_GAMMA: return "SiameseNorm gamma";
    case NB_TENSOR_DYT_ALPHA: return derf ? "Derf alpha and shift" : "DyT alpha";
    case NB_TENSOR_REZERO: return "ReZero scalars";
    case NB_TENSOR_LAYERSCALE: return "LayerScale vectors";
    case NB_TENSOR_VALUE_RESIDUAL: return "value residual lambdas";
    case NB_TENSOR_HC_FN: return "hyper-connection projections";
    case NB_TENSOR_HC_BASE: return "hyper-connection static maps";
    case NB_TENSOR_HC_SCALE: return "hyper-connection gating scales";
    case NB_TENSOR_INTERP: return "nGPT's alpha";
    case NB_TENSOR_QK_SCALE: return "sqk";
    case NB_TENSOR_FF_SCALE: return "suv";
    case NB_TENSOR_SINKS: return "attention sinks";
    case NB_TENSOR_DWA: return "DenseFormer weights";
    case NB_TENSOR_ATTN_RES_QUERY: return "AttnRes queries";
    case NB_TENSOR_ATTN_RES_GAIN: return "AttnRes key norms";
    case NB_TENSOR_SKIP_WEIGHT: return "U-Net skip weights";
    case NB_TENSOR_X0_LAMBDAS: return "x_0 lambdas";
    case NB_TENSOR_VALUE_EMBED: return "value embedding lambdas";
    default: return "attention and FFN matrices";
    }
}

/* "norm gains, biases" style list of the stack's groups with (decay) or without weight decay,
   and the number of values in them */
static size_t decay_groups(const model* m, int decay, char* buf, size_t n) {
    static const nb_tensor_kind kinds[] = {NB_TENSOR_QKV, NB_TENSOR_GAIN, NB_TENSOR_BIAS,
                                            NB_TENSOR_SIAMESE_GAMMA, NB_TENSOR_DYT_ALPHA,
                                            NB_TENSOR_REZERO, NB_TENSOR_LAYERSCALE,
                                            NB_TENSOR_VALUE_RESIDUAL, NB_TENSOR_HC_FN,
                                            NB_TENSOR_HC_BASE, NB_TENSOR_HC_SCALE,
                                            NB_TENSOR_INTERP, NB_TENSOR_QK_SCALE,
                                            NB_TENSOR_FF_SCALE, NB_TENSOR_SINKS, NB_TENSOR_DWA,
                                            NB_TENSOR_ATTN_RES_QUERY, NB_TENSOR_ATTN_RES_GAIN,
                                            NB_TENSOR_SKIP_WEIGHT, NB_TENSOR_X0_LAMBDAS,
                                            NB_TENSOR_VALUE_EMBED};
    size_t values = 0, used = 0;
    int k, t;
    buf[0] = 0;
    for (k = 0; k < (int)(sizeof kinds / sizeof kinds[0]); k++) {
        size_t cnt = 0;
        for (t = 0; t < m->s.n_tensors; t++) {
            const nb_tensor_info* ti = &m->s.tensors[t];
            const int matrix = ti->kind == NB_TENSOR_QKV || ti->kind == NB_TENSOR_ATTN_OUT ||
                               ti->kind == NB_TENSOR_FF_IN || ti->kind == NB_TENSOR_FF_OUT;
            if ((matrix ? NB_TENSOR_QKV : ti->kind) != kinds[k]) continue;
            if (m->decay[m->off_stack + ti->offset] != decay) continue;
            cnt += ti->count;
        }
        if (!cnt) continue;
        values += cnt;
        used += (size_t)snprintf(buf + used, used < n ? n - used : 0, "%s%s", used ? ", " : "",
                                 kind_group(kinds[k], m->s.desc.norm.type == NB_NORM_DERF));
    }
    if (decay) { /* embedding (and value embeddings) and head are always decayed */
        values += (size_t)VOCAB * m->d + (m->off_stack - m->off_ve) + (m->off_sz - m->off_head);
        used += (size_t)snprintf(buf + used, used < n ? n - used : 0, "%sembedding, %shead",
                                 used ? ", " : "", m->n_ve ? "value embeddings, " : "");
    }
    if (m->es && m->decay[(size_t)VOCAB * m->d] == decay) { /* the embedding scale */
        values += 1;
        used += (size_t)snprintf(buf + used, used < n ? n - used : 0, "%sembedding scale", used ? ", " : "");
    }
    if (m->ngpt && m->decay[m->off_sz] == decay) { /* nGPT's logit scale */
        values += m->n - m->off_sz;
        snprintf(buf + used, used < n ? n - used : 0, "%ssz", used ? ", " : "");
    }
    return values;
}

/* the depth factor an init scheme puts on the output projections, which CompleteP drops */
static const char* depth_factor(nb_init_scheme s) {
    switch (s) {
    case NB_INIT_DEPTH_SCALED: return "1/sqrt(2l) on W_o, W_2";
    case NB_INIT_MEGATRON: case NB_INIT_GPT2: return "1/sqrt(2L) on W_o, W_2";
    case NB_INIT_MIXLN_SCALED: return "1/sqrt(2L) on the Pre-LN layers' W_o, W_2";
    case NB_INIT_MITCHELL: return "1/sqrt(2 d (l+1)) on W_o, 1/sqrt(2 f (l+1)) on W_2";
    default: return NULL;
    }
}

/* the porting options of the model line (--attn-gate, --norm-gain, --norm-bias, --gain-offset,
   --branch-scale), each said only when given */
static void print_options(const config* c, const nb_stack_desc* d) {
    static const char* const branch[] = {"", "ReZero's scalar per layer", "LayerScale's vector per sublayer",
                                         "", "SkipInit's scalar per sublayer"}; /* by nb_branch_scale */
    if (d->attn.gate) say(", gated attention (%s)", d->attn.gate == NB_GATE_HEADWISE ? "headwise" : "elementwise");
    if (d->attn.sink) say(", attention sinks (%s)", d->attn.sink == NB_SINK_LEARNED ? "learned" : "off-by-one");
    if (d->attn.clip_qkv > 0) say(", Q|K|V clamped to +-%g (clip_qkv)", (double)d->attn.clip_qkv);
    if (d->attn.softcap > 0) say(", attention logits capped at %g (C tanh(s / C))", (double)d->attn.softcap);
    if (d->residual.dwa)
        say(", DenseFormer's depth-weighted average (dilation %d, period %d)", d->residual.dwa_dilation,
            d->residual.dwa_period);
    if (d->residual.attn_res)
        say(", Attention Residuals (%s, blocks of %d sublayers)", d->residual.attn_res_block == 1 ? "Full" : "Block",
            d->residual.attn_res_block);
    if (d->residual.unet_skips) say(", U-Net skips (layers %d.. add the first half's outputs)", d->n_layers / 2);
    if (d->residual.reinject_x0) say(", x_0 re-injected into every layer (lambda_0 x + lambda_1 x_0)");
    if (d->residual.value_embeds)
        say(", value embeddings (%d table%s of %d per byte, layers 0..%d and %d..%d)", d->residual.value_embeds,
            d->residual.value_embeds > 1 ? "s" : "", d->n_kv_heads * (d->d_model / d->n_heads),
            d->residual.value_embeds - 1, d->n_layers - d->residual.value_embeds, d->n_layers - 1);
    if (c->model.norm.gain < 0 || c->model.norm.bias < 0)
        say(", norms without %s", c->model.norm.gain < 0 && c->model.norm.bias < 0 ? "weight or bias"
                                  : c->model.norm.gain < 0 ? "weight" : "bias");
    if (d->norm.gain_offset) say(", gains 1 + w (unit offset)");
    if (c->model.mup.on) say(", muP widths (m_d %g)", width_mult(c));
    if (c->model.residual.branch_scale > 0 && c->model.residual.branch_scale < 5) say(", branches x %s", branch[c->model.residual.branch_scale]);
}

/* What a step keeps from forward to backward, per token (the stack's cache and the head's
   logits; bench/README.md compares it with PyTorch's), and what does not grow with the batch. */
static void print_memory(const model* m) {
    const double tok = (double)m->B * m->T, kib = 1024, mib = 1024 * 1024;
    const double stack = (double)m->s.n_cache * sizeof(nb_real);
    const double head = tok * (VOCAB * sizeof(nb_real) + (m->h16 ? (m->d + VOCAB) * 2.0 : 0)); /* and its bf16 operands */
    const double state = (double)(m->n * 2 + m->n_upd * 2) * sizeof(nb_real) + (m->w16 ? m->n * 2.0 : 0);
    say("memory: %.1f KiB per token kept for the backward (the stack's cache %.1f per layer, the head %.1f); "
        "parameters, gradients, AdamW%s %.1f MiB\n", (stack + head) / tok / kib,
        stack / tok / kib / m->s.desc.n_layers, head / tok / kib, m->w16 ? " and the bf16 copy" : "",
        state / mib);
}

void print_model(const config* c, const model* m, int arch_only) {
    const nb_stack_desc* d = &m->s.desc;
    char on[160], off[160];
    size_t n_on, n_off;
    say("model: %s, L=%d d=%d H=%d H_kv=%d d_ff=%d %s %s",
        c->model.schedule[0] ? c->model.schedule : d->name[0] ? d->name : nb_preset_name(d->preset),
        d->n_layers, m->d, d->n_heads, d->n_kv_heads, d->ffn.d_ff, d->ffn.type == NB_FFN_GELU_TANH ? "gelu" : "swiglu",
        d->norm.type == NB_NORM_LAYER ? "layernorm" : d->norm.type == NB_NORM_DYT ? "dyt" : d->norm.type == NB_NORM_DERF ? "derf"
        : d->norm.type == NB_NORM_L2 ? "l2norm" : "rmsnorm");
    if (d->norm.type != NB_NORM_L2) say(" eps %g", (double)d->norm.eps); /* L2 has none */
    say("%s%s", d->attn.rope ? " RoPE" : "", m->es ? ", embedding x learnable scale" : "");
    print_options(c, d);
    if (m->embed_mode == EMBED_SQRT_D || c->model.mup.embed_mult > 0)
        say(", embedding x %s = %.9g (constant)", m->embed_mode != EMBED_SQRT_D ? "muP's multiplier"
            : c->model.mup.embed_mult > 0 ? "sqrt(d) x muP's multiplier" : "sqrt(d)", (double)m->embed_const);
    if (m->ngpt) say(", logits x learnable sz");
    if (m->softcap > 0) say(", logit softcap %g (C tanh(z / C), last)", m->softcap);
    say(", %zu parameters (stack %zu)\n", m->n, m->s.n_params);
    if (d->norm.type == NB_NORM_DERF)
        say("Derf alpha %g, %g feeding attention, shift 0%s\n", d->norm.dyt_alpha, d->norm.dyt_alpha_attn,
            c->model.norm.dyt_alpha || c->model.norm.dyt_alpha_attn ? "" : " (its code's init; --dyt-alpha)");
    else if (d->norm.type == NB_NORM_DYT || d->preset == NB_PRESET_DYT)
        say("DyT alpha %g, %g feeding attention%s\n", d->norm.dyt_alpha, d->norm.dyt_alpha_attn,
            c->model.norm.dyt_alpha || c->model.norm.dyt_alpha_attn || m->d >= 1024 ? ""
            : " (DyT's generic default: its LLM rule by width comes from 7B-70B models; --dyt-alpha)");
    if (d->hyper.kind > NB_HYPER_NONE) hyper_say(m);
    say("kernels: %s%s\n", nb_stack_kernels(&m->s),
        m->h16 ? "; LM head on the projections' engine (bf16 operands)"
        : d->gemm.precision == NB_PRECISION_BF16 ? "; LM head portable bf16" : "");
    print_memory(m);
    if (arch_only) return;
    if (m->init_std0 > 0) say("init: %s std %g (%s)", init_scheme_name(m->init), m->init_std0, m->init_why);
    else say("init: %s (%s)", init_scheme_name(m->init), m->init_why);
    if (c->model.residual.completep > 0) completep_say_init(m, depth_factor(m->init));
    say("\n");
    n_on = decay_groups(m, 1, on, sizeof on);
    n_off = decay_groups(m, 0, off, sizeof off);
    say("weight decay %g on %zu values (%s)", c->optim.wd, n_on, on);
    if (n_off) say("; none on %zu (%s; --wd-norms on decays them)", n_off, off);
    say("\n");
    if (c->model.residual.completep > 0) completep_say(c, m);
    if (c->model.mup.on) mup_say(c, m);
    if (m->ngpt) ngpt_say(c, m);
}

static void history_alloc(history* h, const config* c, int L, int diag) {
    const int cap_eval = c->loop.steps / c->loop.log_every + 3, cap_diag = diag ? cap_eval : 0;
    const size_t LH = (size_t)L * h->n_heads;
    h->step_x = (double*)xcalloc((size_t)c->loop.steps + 1, sizeof(double));
    h->step_maxlogit = (double*)xcalloc((size_t)c->loop.steps + 1, sizeof(double));
    h->step_clipped = (double*)xcalloc((size_t)c->loop.steps + 1, sizeof(double));
    h->loss = (double*)xcalloc((size_t)c->loop.steps + 1, sizeof(double));
    h->step_gnorm = (double*)xcalloc((size_t)c->loop.steps + 1, sizeof(double));
    h->step_lr = (double*)xcalloc((size_t)c->loop.steps + 1, sizeof(double));
    h->eval_x = (double*)xcalloc((size_t)cap_eval, sizeof(double));
    h->val = (double*)xcalloc((size_t)cap_eval, sizeof(double));
    h->gnorm = (double*)xcalloc((size_t)cap_eval, sizeof(double));
    h->diag_x = (double*)xcalloc((size_t)cap_diag, sizeof(double));
    h->grad_l = (double*)xcalloc((size_t)cap_diag * L, sizeof(double));
    h->hid_l = (double*)xcalloc((size_t)cap_diag * h->streams * (L + 1), sizeof(double));
    h->ang_l = (double*)xcalloc((size_t)cap_diag * h->streams * L, sizeof(double));
    if (h->hyper) h->hc_gain = (double*)xcalloc((size_t)cap_diag * 2 * 2 * L, sizeof(double));
    h->head_max_l = (double*)xcalloc((size_t)cap_diag * LH, sizeof(double));
    h->head_mass_l = (double*)xcalloc((size_t)cap_diag * LH, sizeof(double));
    if (h->gated) h->head_gate_l = (double*)xcalloc((size_t)cap_diag * LH, sizeof(double));
    if (h->sinks) h->head_sink_l = (double*)xcalloc((size_t)cap_diag * LH, sizeof(double));
}

/* A loss spike: the loss above 2x its running average (an exponential average over about 20
   steps, from step 10 of the run on) and by more than 0.5 nats (near zero loss, 2x is batch
   noise), counted once per excursion (it ends below 1.2x or within 0.1 nats). */
static void count_spike(history* h, int k, double loss, double* avg, int* in_spike) {
    if (!isfinite(loss)) return;
    if (k >= 10 && *avg > 0) {
        const double ratio = loss / *avg;
        if (!*in_spike && ratio > 2 && loss - *avg > 0.5) {
            *in_spike = 1;
            h->spikes++;
        } else if (*in_spike && (ratio < 1.2 || loss - *avg < 0.1)) *in_spike = 0;
        if (*in_spike && ratio > h->worst_spike) h->worst_spike = ratio;
        if (*in_spike) return; /* the average follows the loss outside spikes only */
    }
    *avg = k == 0 ? loss : 0.95 * *avg + 0.05 * loss;
}

/* This step's attention (heads.c), before the update: the largest max logit over layers and
   heads into the step's history and the run's last and peak (finite values: a diverged step's
   NaN leaves the peak as it was), with the first-key mass on logged steps (--diag's snapshot,
   the run's final mean). */
static void record_heads(model* m, history* h, int logged) {
    const double top = heads_measure(m, logged);
    h->step_maxlogit[h->n_steps] = top;
    h->max_logit = top;
    if (isfinite(top) && !(h->max_logit_peak >= top)) h->max_logit_peak = top;
    if (logged) h->first_mass = heads_mean(m->head_mass, m->s.desc.n_layers * m->s.desc.n_heads);
    if (logged && m->head_gate && !heads_gates(m)) { /* gated attention: where its gates stand */
        const int n = m->s.desc.n_layers * m->s.desc.n_heads;
        int i;
        h->gate_mean = heads_mean(m->head_gate, n);
        h->gate_min_at = 0;
        for (i = 1; i < n; i++)
            if (m->head_gate[i] < m->head_gate[h->gate_min_at]) h->gate_min_at = i;
        h->gate_min = m->head_gate[h->gate_min_at];
    }
    if (logged && m->head_sink && !heads_sinks(m)) /* sinks: what they take from the keys */
        h->sink_mass = heads_mean(m->head_sink, m->s.desc.n_layers * m->s.desc.n_heads);
}

/* --qk-clip, after the optimizer step: the heads clipped into the step's history (the step
   is the last recorded), the run's total and the interval's */
static int clip_heads(model* m, history* h, double tau, long long* interval) {
    int n = 0;
    if (heads_qk_clip(m, tau, &n)) return 1;
    h->step_clipped[h->n_steps - 1] = n;
    h->clips += n;
    *interval += n;
    return 0;
}

int train_run(const config* c, const dataset* ds, double unigram, history* h, int in_sweep) {
    model m;
    int start = 0, step, L, rc = 1, cap_diag;
    double t0, t_last, tok_last = 0, first_loss = NAN, gnorm = 0, loss_acc = 0, last_val = NAN, loss_avg = 0;
    int in_spike = 0, warned = 0;
    double best_tps = 0;
    const double t_start = now_s();
    const char* ind = in_sweep ? "  " : "";
    int loss_n = 0;
    double iv_logit = -INFINITY;       /* the largest max logit since the last log line */
    long long iv_clips = 0;            /* and the heads clipped since then */
    memset(h, 0, sizeof *h);
    h->diverged_at = -1;
    h->final_loss = h->final_val = h->accuracy = NAN;
    h->hc_fwd = h->hc_bwd = h->hc_fwd_peak = h->hc_bwd_peak = NAN;
    h->max_logit = h->max_logit_peak = h->first_mass = h->gate_mean = h->gate_min = NAN;
    h->sink_mass = NAN;
    if (model_init(&m, c)) { model_free(&m); return 1; }
    h->gated = m.head_gate != NULL;
    h->sinks = m.head_sink != NULL;
    L = m.s.desc.n_layers;
    h->n_heads = m.s.desc.n_heads;
    h->streams = m.s.streams;
    h->hyper = m.s.desc.hyper.kind > NB_HYPER_NONE;
    snprintf(h->init, sizeof h->init, "%s", init_scheme_name(m.init));
    if (c->files.resume) {
        if (load_checkpoint(c->files.resume, c, ds, &m, &start)) { model_free(&m); return 1; }
        if (!c->loop.quiet) say("resumed from %s at step %d\n", c->files.resume, start);
    }
    if (!c->loop.quiet && !in_sweep) {
        print_model(c, &m, 0);
        say("training: %d steps of %d x %d tokens, AdamW (%g, %g) lr %g, schedule: linear warmup "
            "%d steps then cosine to %g; clip %g, seed %llu, %d threads", c->loop.steps, c->loop.batch,
            c->loop.seq, c->optim.beta1, c->optim.beta2, c->optim.lr, c->optim.warmup, c->optim.lr * c->optim.min_lr_frac, c->optim.clip,
            c->loop.seed, nb_num_threads(&m.ctx));
        if (c->optim.qk_clip > 0) say("; QK-Clip at tau %g after every step", c->optim.qk_clip);
        if (g_ranks > 1)
            say(" per rank; %d ranks x %d-%d rows, gradients in %d KiB buckets during backward%s",
                g_ranks, c->loop.batch / g_ranks, (c->loop.batch + g_ranks - 1) / g_ranks, c->machine.bucket_kb,
                c->machine.zero ? ", ZeRO-1 optimizer shards" : "");
        say("\n");
    }
    cap_diag = c->files.diag ? c->loop.steps / c->loop.log_every + 3 : 0;
    history_alloc(h, c, L, c->files.diag != NULL);
    t0 = t_last = now_s();
    for (step = start; step < c->loop.steps && !(c->loop.stop_after > 0 && step >= c->loop.stop_after); step++) {
        double cnt, loss, lr, scale, ts = now_s(), t_part;
        const nb_real* gu;
        int log_now, rc_step;
        train_batch(ds, step, m.b0, m.B, m.T, m.tok, m.mask);
        m.step = step;
        m.ctx.profile = c->machine.profile ? &h->prof : NULL;
        t_part = now_s();
        m.t_gnorm = 0;
        rc_step = model_step(&m, 1, &cnt, &loss);
        /* the gradient norm's sums ran inside the backward: the optimizer's share */
        h->model_seconds += now_s() - t_part - m.t_gnorm;
        h->opt_seconds += m.t_gnorm;
        m.ctx.profile = NULL;
        if (rc_step) {
            say("%sstopped at step %d without saving: the last checkpoint written is kept\n", ind, step + 1);
            if (g_ranks > 1) dist_abort(1); /* the other ranks wait in a collective */
            goto done;
        }
        gu = dist_grads_finish(m.dist);
        t_part = now_s();
        gnorm = grad_norm(&m, gu);
        h->opt_seconds += now_s() - t_part;
        lr = lr_at(c, step);
        if (step == start) first_loss = loss;
        log_now = (step + 1) % c->loop.log_every == 0 || step + 1 == c->loop.steps || m.stop ||
                  step + 1 == c->loop.stop_after;
        record_heads(&m, h, log_now);
        iv_logit = fmax(iv_logit, h->max_logit);
        h->step_x[h->n_steps] = step + 1;
        h->step_gnorm[h->n_steps] = gnorm;
        h->step_lr[h->n_steps] = lr;
        h->loss[h->n_steps++] = loss;
        count_spike(h, step - start, loss, &loss_avg, &in_spike);
        if (!isfinite(loss) || !isfinite(gnorm) ||
            (c->loop.spike_stop > 0 && step - start > 10 && loss > c->loop.spike_stop * first_loss + 1)) {
            h->diverged_at = step + 1;
            if (!c->loop.quiet || c->files.summary)
                say("%sdiverged at step %d (loss %g, gradient norm %g)\n", ind, step + 1, loss, gnorm);
            break;
        }
        if (log_now && (h->hyper || m.s.desc.residual.attn_res || (cap_diag && h->n_diag < cap_diag))) {
            /* before the update and the validation forward: this step's gradients (unclipped)
               and the hidden states of its forward, still in the cache; the hyper-connections'
               gains at every logged step (the run's summary has them), not only with --diag */
            const int diag_now = cap_diag && h->n_diag < cap_diag;
            if ((diag_now && record_diag(&m, h, gu, step)) || (h->hyper && hyper_record_gains(&m, h, diag_now)) ||
                (m.s.desc.residual.attn_res && attnres_record(&m, h))) {
                if (g_ranks > 1) dist_abort(1);
                goto done;
            }
        }
        scale = c->optim.clip > 0 && gnorm > c->optim.clip ? c->optim.clip / gnorm : 1;
        t_part = now_s();
        adamw(&m, c, gu, lr, scale);
        if (m.ngpt && ngpt_normalize(&m)) { /* every rank: the same parameters, the same result */
            say("%sstopped at step %d without saving: the last checkpoint written is kept\n", ind, step + 1);
            goto done;
        }
        if (c->optim.qk_clip > 0 && clip_heads(&m, h, c->optim.qk_clip, &iv_clips)) { /* every rank alike */
            say("%sstopped at step %d without saving: the last checkpoint written is kept\n", ind, step + 1);
            goto done;
        }
        h->opt_seconds += now_s() - t_part;
        h->train_seconds += now_s() - ts;
        h->comm_seconds += dist_wait_seconds(m.dist) + m.t_comm;
        h->comm_in_model += m.t_comm; /* the loss all-reduce, inside the model step's time */
        m.t_comm = 0;
        h->tokens += (double)m.B_global * m.T;
        loss_acc += loss;
        loss_n++;
        tok_last += (double)m.B_global * m.T;
        if (log_now) {
            const double t = now_s(), val = evaluate(&m, ds, c->loop.eval_batches);
            const double tps = tok_last / (t - t_last > 1e-9 ? t - t_last : 1e-9);
            const double eta = (t - t0) / (step + 1 - start) * (c->loop.steps - step - 1);
            char eb[32];
            last_val = val;
            /* a collapse of throughput is contention for the cores (another process; spinning
               OpenMP threads make it worse): said once, as the tokens/s alone do not explain it */
            if (tps > best_tps) best_tps = tps;
            else if (!warned && tps < best_tps / 4 && !c->loop.quiet) {
                warned = 1;
                say("%swarning: %.1fk tok/s, %.0f%% of this run's best: another process is competing for the cores%s\n",
                    ind, tps / 1000, 100 * tps / best_tps,
                    getenv("OMP_WAIT_POLICY") && !strcmp(getenv("OMP_WAIT_POLICY"), "PASSIVE")
                        ? "; fewer --threads may help"
                        : " (OpenMP threads spin-wait: OMP_WAIT_POLICY=PASSIVE or fewer --threads keep the speed)");
            }
            h->eval_x[h->n_eval] = step + 1;
            h->val[h->n_eval] = val;
            h->gnorm[h->n_eval++] = gnorm;
            fmt_time(eta, eb, sizeof eb);
            if (!c->loop.quiet) {
                say("%sstep %5d/%d | loss %.4f | val %.4f | grad norm %.3f | lr %.2e | %.1fk tok/s | ETA %s",
                    ind, step + 1, c->loop.steps, loss_acc / loss_n, val, gnorm, lr, tps / 1000, eb);
                if (c->optim.qk_clip > 0) /* the interval's: the largest logit, the heads clipped */
                    say(" | max logit %.4g, %lld of %lld head-steps clipped", iv_logit, iv_clips,
                        (long long)loss_n * m.s.desc.n_layers * m.s.desc.n_heads);
                say("\n");
            }
            fflush(stdout);
            loss_acc = 0; loss_n = 0; tok_last = 0;
            iv_logit = -INFINITY; iv_clips = 0;
            t_last = now_s();
        }
        if (m.stop) { h->interrupted = 1; step++; break; }
        if (step + 1 == c->loop.stop_after) { step++; break; }
        if (c->loop.save_every > 0 && (step + 1) % c->loop.save_every == 0 && c->files.save && !in_sweep) {
            if (save_checkpoint(c->files.save, c, ds, &m, step + 1)) goto done;
        }
    }
    h->steps_done = step;
    h->final_loss = h->n_steps ? h->loss[h->n_steps - 1] : NAN;
    h->final_val = h->diverged_at >= 0 ? NAN : isfinite(last_val) && h->n_eval ? last_val
                                                                              : evaluate(&m, ds, c->loop.eval_batches);
    if (!in_sweep && !c->loop.quiet)
        say("done: %d steps in %.1f s\n", step - start, now_s() - t0);
    if (!in_sweep) { /* save first: under mpirun, Ctrl-C leaves about a second before SIGKILL */
        const char* path = c->files.save;
        if (h->interrupted && !path) path = "train.safetensors";
        if (h->interrupted) say("interrupted at step %d\n", step);
        if (path && h->diverged_at < 0) {
            if (save_checkpoint(path, c, ds, &m, step)) goto done;
            say("checkpoint: %s (step %d)\n", path, step);
        }
    }
    if (!ds->text && h->diverged_at < 0 && !h->interrupted) {
        h->n_problems = c->loop.eval_problems;
        h->n_shown = c->loop.eval_problems < 5 ? c->loop.eval_problems : 5;
        h->accuracy = answer_accuracy_show(&m, ds, c->loop.eval_problems, h->shown, h->n_shown);
    }
    h->seconds = now_s() - t_start;
    if (m.s.desc.residual.dwa) dwa_record(&m, h);
    if (m.s.desc.residual.unet_skips || m.s.desc.residual.reinject_x0) unet_record(&m, h);
    if (g_rank == 0) {
        if (c->files.csv && write_steps_csv(c->files.csv, h)) goto done;
        if (c->files.summary && write_summary(c->files.summary, c, h, unigram)) goto done;
        if (c->files.diag) {
            if (write_diag(c, &m, h, unigram)) goto done;
            if (m.s.desc.residual.dwa && dwa_csv(&m, c->files.diag)) goto done;
            if (h->ar_logged && attnres_csv(h, c->files.diag)) goto done;
            if (!in_sweep)
                say("diagnostics: %s/{loss,layers,heads%s}.svg and CSVs\n", c->files.diag, h->hyper ? ",hyper" : "");
        }
    }
    rc = 0;
done:
    model_free(&m);
    return dist_agree(rc);
}
