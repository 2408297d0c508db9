/* adopt.c: a small GPT-2 trainer in plain C, written the way such trainers are (one parameter
   buffer laid out by tensor kind across layers, PyTorch nn.Linear weights, its own embedding,
   LM head, loss and AdamW), that hands its transformer blocks to normblocks without changing
   any of that: the stack binds the trainer's own buffers (nb_stack_set_layout), overwrites
   its parameter gradients (no zeroing of the stack's part), and its input gradient feeds the
   trainer's embedding backward. examples/README.md's "Adopting it in an existing trainer" walks
   through it. Build: cmake (target adopt), or
       cc -O2 -fopenmp -I. examples/adopt.c -lopenblas -lm
   (-Ofast as well: the header stays correct under it). Runs 150 steps of next-token
   prediction on a fixed sequence and exits 1 unless the loss falls below a tenth. */
#define NORMBLOCKS_IMPLEMENTATION
#include "normblocks.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { V = 32, C = 32, L = 2, NH = 4, B = 4, T = 16, STEPS = 150 };

/* The trainer's layout: offsets of each kind in one buffer, all layers of a kind together. */
typedef struct layout {
    size_t wte, wpe, ln1w, ln1b, qkvw, qkvb, attprojw, attprojb, ln2w, ln2b, fcw, fcb, fcprojw,
        fcprojb, lnfw, lnfb, total;
} layout;

static size_t take(size_t* off, size_t n) {
    const size_t at = *off;
    *off += n;
    return at;
}

static layout make_layout(void) {
    layout y;
    size_t off = 0;
    y.wte = take(&off, V * C);
    y.wpe = take(&off, T * C);
    y.ln1w = take(&off, L * C);
    y.ln1b = take(&off, L * C);
    y.qkvw = take(&off, L * 3 * C * C); /* (3C, C) per layer, nn.Linear (out, in) */
    y.qkvb = take(&off, L * 3 * C);
    y.attprojw = take(&off, L * C * C);
    y.attprojb = take(&off, L * C);
    y.ln2w = take(&off, L * C);
    y.ln2b = take(&off, L * C);
    y.fcw = take(&off, L * 4 * C * C);
    y.fcb = take(&off, L * 4 * C);
    y.fcprojw = take(&off, L * C * 4 * C);
    y.fcprojb = take(&off, L * C);
    y.lnfw = take(&off, C);
    y.lnfb = take(&off, C);
    y.total = off;
    return y;
}

/* Where the stack's tensor t lives in the trainer's buffer: by its PyTorch-style name. */
static int tensor_offset(const layout* y, const nb_tensor_info* t, size_t* off) {
    static const char* const names[14] = {"attn_norm.weight", "attn_norm.bias",
                                          "att_proj.weight",  "att_proj.bias",
                                          "attn_out.weight",  "attn_out.bias",
                                          "ff_norm.weight",   "ff_norm.bias",
                                          "ff_proj.weight",   "ff_proj.bias",
                                          "ff_out.weight",    "ff_out.bias",
                                          "ln_f.weight",      "ln_f.bias"};
    const size_t base[14] = {y->ln1w, y->ln1b, y->qkvw, y->qkvb, y->attprojw, y->attprojb,
                             y->ln2w, y->ln2b, y->fcw, y->fcb, y->fcprojw, y->fcprojb,
                             y->lnfw, y->lnfb};
    const char* suffix = t->layer < 0 ? t->name : strchr(t->name + 7, '.') + 1; /* blocks.<l>. */
    int k;
    for (k = 0; k < 14; k++)
        if (!strcmp(suffix, names[k])) {
            *off = base[k] + (t->layer < 0 ? 0 : (size_t)t->layer * t->count);
            return 0;
        }
    return -1;
}

static float randn(unsigned long long* s) { /* Box-Muller on a 64-bit LCG */
    double u1, u2;
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    u1 = ((*s >> 11) + 0.5) / 9007199254740992.0;
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    u2 = ((*s >> 11) + 0.5) / 9007199254740992.0;
    return (float)(sqrt(-2 * log(u1)) * cos(6.283185307179586 * u2));
}

int main(void) {
    const layout y = make_layout();
    nb_ctx ctx;
    nb_stack_desc desc;
    nb_stack s;
    float *params, *grads, *m, *v, *x0, *h, *dh, *dx0, *logits, *cache, *scratch;
    size_t *offsets, i;
    int tokens[B * T + 1], t, step, rc = 1;
    unsigned long long seed = 42;
    double first = 0, loss = 0;

    memset(&ctx, 0, sizeof ctx);
    memset(&desc, 0, sizeof desc);
    desc.n_layers = L;
    desc.d_model = C;
    desc.n_heads = NH;
    desc.ffn.d_ff = 4 * C;
    desc.run.param_grads = NB_GRAD_OVERWRITE; /* the trainer zeroes only its own wte, wpe grads */
    if (nb_preset_from_name(&ctx, &desc, "GPT-2") || nb_stack_init(&ctx, &s, &desc, B, T)) {
        fprintf(stderr, "adopt: %s\n", ctx.err);
        return 1;
    }

    /* the trainer's buffers, as it always had them */
    params = (float*)calloc(y.total, sizeof(float));
    grads = (float*)calloc(y.total, sizeof(float));
    m = (float*)calloc(y.total, sizeof(float));
    v = (float*)calloc(y.total, sizeof(float));
    x0 = (float*)malloc(sizeof(float) * B * T * C);
    h = (float*)malloc(sizeof(float) * B * T * C);
    dh = (float*)malloc(sizeof(float) * B * T * C);
    dx0 = (float*)malloc(sizeof(float) * B * T * C);
    logits = (float*)malloc(sizeof(float) * B * T * V);
    cache = (float*)malloc(sizeof(float) * s.n_cache);
    scratch = (float*)malloc(sizeof(float) * s.n_scratch);
    offsets = (size_t*)malloc(sizeof(size_t) * (size_t)s.n_tensors);

    /* bind the stack to that layout: one offset per tensor of the stack's table */
    for (t = 0; t < s.n_tensors; t++)
        if (tensor_offset(&y, &s.tensors[t], &offsets[t])) {
            fprintf(stderr, "adopt: no place for %s\n", s.tensors[t].name);
            goto done;
        }
    if (nb_stack_set_layout(&ctx, &s, offsets, y.total)) {
        fprintf(stderr, "adopt: %s\n", ctx.err);
        goto done;
    }
    /* GPT-2's init for the stack's tensors (written in place in the trainer's buffer), the
       trainer's own for its embeddings */
    if (nb_stack_init_params(&ctx, &s, params, nb_preset_init(&s.desc, NULL), 0, 1)) goto done;
    for (i = 0; i < (size_t)(V + T) * C; i++) params[y.wte + i] = 0.02f * randn(&seed);

    /* data: a fixed sequence, next token = (5 * token + 3) mod V */
    tokens[0] = 1;
    for (t = 1; t <= B * T; t++) tokens[t] = (5 * tokens[t - 1] + 3) % V;

    for (step = 0; step < STEPS; step++) {
        int b, p, c;
        /* embedding: x0 = wte[token] + wpe[pos] */
        for (b = 0; b < B; b++)
            for (p = 0; p < T; p++)
                for (c = 0; c < C; c++)
                    x0[(b * T + p) * C + c] = params[y.wte + tokens[b * T + p] * C + c] +
                                              params[y.wpe + p * C + c];
        if (nb_stack_forward(&ctx, &s, params, h, x0, B, T, cache, scratch)) break;
        /* tied LM head and softmax cross-entropy; dlogits written over logits */
        nb_gemm(&ctx, 0, 1, B * T, V, C, 1, h, C, params + y.wte, C, 0, logits, V);
        loss = 0;
        for (i = 0; i < (size_t)B * T; i++) {
            float* z = logits + i * V;
            float mx = z[0], sum = 0;
            for (c = 1; c < V; c++) mx = z[c] > mx ? z[c] : mx;
            for (c = 0; c < V; c++) sum += (z[c] = expf(z[c] - mx));
            loss -= log(z[tokens[i + 1]] / sum);
            for (c = 0; c < V; c++) z[c] = (z[c] / sum - (c == tokens[i + 1])) / (B * T);
        }
        loss /= B * T;
        if (step == 0) first = loss;
        if (step % 30 == 0 || step == STEPS - 1) printf("step %3d  loss %.4f\n", step, loss);

        /* backward: the trainer zeroes its own gradients only; the stack overwrites its own */
        memset(grads + y.wte, 0, sizeof(float) * (V + T) * C);
        nb_gemm(&ctx, 0, 0, B * T, C, V, 1, logits, V, params + y.wte, C, 0, dh, C);
        nb_gemm(&ctx, 1, 0, V, C, B * T, 1, logits, V, h, C, 1, grads + y.wte, C);
        if (nb_stack_backward(&ctx, &s, params, grads, dx0, dh, B, T, cache, scratch)) break;
        for (b = 0; b < B; b++) /* the embedding's backward reads the stack's din */
            for (p = 0; p < T; p++)
                for (c = 0; c < C; c++) {
                    grads[y.wte + tokens[b * T + p] * C + c] += dx0[(b * T + p) * C + c];
                    grads[y.wpe + p * C + c] += dx0[(b * T + p) * C + c];
                }

        /* AdamW over the whole buffer, as the trainer always did (no decay on vectors) */
        for (i = 0; i < y.total; i++) {
            const float lr = 3e-3f, b1 = 0.9f, b2 = 0.95f, g = grads[i];
            const int decay = i < y.ln1w || (i >= y.qkvw && i < y.qkvb) ||
                              (i >= y.attprojw && i < y.attprojb) || (i >= y.fcw && i < y.fcb) ||
                              (i >= y.fcprojw && i < y.fcprojb);
            m[i] = b1 * m[i] + (1 - b1) * g;
            v[i] = b2 * v[i] + (1 - b2) * g * g;
            params[i] -= lr * (m[i] / (1 - powf(b1, (float)step + 1)) /
                                   (sqrtf(v[i] / (1 - powf(b2, (float)step + 1))) + 1e-8f) +
                               (decay ? 0.01f * params[i] : 0));
        }
    }
    if (step < STEPS) fprintf(stderr, "adopt: %s\n", ctx.err);
    else if (!(loss < first / 10)) fprintf(stderr, "adopt: loss %.4f did not fall below a tenth "
                                           "of %.4f\n", loss, first);
    else rc = 0;
done:
    nb_stack_free(&s);
    free(params); free(grads); free(m); free(v); free(x0); free(h); free(dh); free(dx0);
    free(logits); free(cache); free(scratch); free(offsets);
    return rc;
}
