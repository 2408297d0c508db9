/* cli.c: the options, --help, and the stack description they make. */
#define _POSIX_C_SOURCE 200809L
#include "train.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static int parse_int(const char* s, int lo, int hi, int* out, const char* what) {
    char* end;
    long v;
    errno = 0;
    v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        return fail("%s: \"%s\" is not an integer in [%d, %d]", what, s, lo, hi);
    *out = (int)v;
    return 0;
}

static int parse_double(const char* s, double lo, double hi, double* out, const char* what) {
    char* end;
    double v;
    errno = 0;
    v = strtod(s, &end);
    if (errno || end == s || *end || !(v >= lo && v <= hi))
        return fail("%s: \"%s\" is not a number in [%g, %g]", what, s, lo, hi);
    *out = v;
    return 0;
}

/* KIND@STEP:LAYER:SUB:WHERE, e.g. nan@25:1:attn:act or inf@40:0:ffn:grad */
static int parse_inject(const char* v, config* c) {
    char kind[8], sub[8], where[8];
    int n = 0;
    if (sscanf(v, "%7[a-z]@%d:%d:%7[a-z]:%7[a-z]%n", kind, &c->inj_step, &c->inj_layer, sub, where, &n) != 5 ||
        v[n] || (strcmp(kind, "nan") && strcmp(kind, "inf")) || (strcmp(sub, "attn") && strcmp(sub, "ffn")) ||
        (strcmp(where, "act") && strcmp(where, "grad")) || c->inj_step < 1 || c->inj_layer < 0)
        return fail("--inject: \"%s\" is not KIND@STEP:LAYER:SUB:WHERE (KIND nan or inf, STEP >= 1, "
                    "SUB attn or ffn, WHERE act or grad; e.g. nan@25:1:attn:act)", v);
    c->inj_kind = strcmp(kind, "nan") ? 2 : 1;
    c->inj_ffn = !strcmp(sub, "ffn");
    c->inj_grad = !strcmp(where, "grad");
    return 0;
}

void config_defaults(config* c) {
    memset(c, 0, sizeof *c);
    snprintf(c->preset, sizeof c->preset, "pre");
    c->d_model = 128; c->n_layers = 4; c->n_heads = 4; c->rope = 1;
    snprintf(c->ffn, sizeof c->ffn, "swiglu");
    snprintf(c->norm, sizeof c->norm, "rms");
    snprintf(c->init, sizeof c->init, "normal");
    c->batch = 16; c->seq = 64; c->steps = 600; c->warmup = 50; c->log_every = 50;
    c->eval_batches = 4;
    c->lr = 3e-3; c->min_lr_frac = 0.1; c->wd = 0.1; c->beta1 = 0.9; c->beta2 = 0.95;
    c->adam_eps = 1e-8; c->clip = 1.0; c->seed = 1337;
    c->digits = 3; c->val_frac = 0.1;
    c->bucket_kb = 256;
}

void usage(void) {
    printf(
"usage: train [options]\n"
"model\n"
"  --preset NAME      block placement: pre, post, mixln, hybrid, hybrid_star, siamese, sandwich,\n"
"                     olmo2, deepnorm, ... or paper names (Pre-Norm, HybridNorm*, QKV-Post,\n"
"                     Pre-QK-Pre, Mix-LN, ...)                                 [pre]\n"
"  --schedule LIST    per-layer schedule instead of a preset, one kind per layer, from: pre,\n"
"                     post, sandwich, normafter, hybrid (QKV-Post), qkvpre, prepost, postpre;\n"
"                     sets the number of layers (e.g. --schedule post,pre,pre,hybrid)\n"
"  --d N --layers N --heads N --kv-heads N --ff N       [128 4 4 heads 8d/3->64]\n"
"  --ffn swiglu|gelu  --norm rms|layer  --no-rope\n"
"  --init normal|depth_scaled|megatron|mitchell|mixln|mixln_scaled|gpt2|deepnorm  [normal]\n"
"training\n"
"  --steps N [600]  --batch B [16]  --seq T [64]  --lr X [3e-3]  --warmup N [50]\n"
"  --min-lr F         cosine floor as a fraction of lr [0.1]\n"
"  --wd X [0.1]  --beta1 X [0.9]  --beta2 X [0.95]  --adam-eps X [1e-8]  --clip X [1.0]\n"
"  --seed N [1337]  --threads N [0 = OpenMP default]\n"
"  --log-every N [50]  --eval-batches N [4]  --csv FILE  per-step loss, gradient norm, lr\n"
"data parallel (run under mpirun; --batch stays the global batch, split over the ranks)\n"
"  --zero             ZeRO-1: shard the AdamW moments over the ranks (memory 1/ranks)\n"
"reliability\n"
"  --check-finite     stop at the first NaN/Inf, naming the layer and sublayer (activations:\n"
"                     the library's check; gradients: each layer's as the backward finishes it)\n"
"  --inject K@S:L:SUB:W  fault injection to test that: K nan|inf at step S into layer L's\n"
"                     SUB attn|ffn, W act (its output projection weight) or grad (its gradient)\n"
"  --bucket-kb N      gradient bucket reduced while the backward goes on [256]\n"
"data\n"
"  (default)          synthetic addition, loss on answer digits; --digits N [3], --reverse\n"
"                     writes answers least significant digit first (much easier)\n"
"  --data FILE        byte-level corpus; --val-frac F held out [0.1]\n"
"files\n"
"  --save FILE        checkpoint at the end and on Ctrl-C (default on Ctrl-C: train.safetensors)\n"
"  --save-every N     also every N steps\n"
"  --stop-after N     stop after step N of the --steps schedule (save, resume later)\n"
"  --resume FILE      continue from a checkpoint (same model flags required)\n"
"  --allow-change K   let --resume change run settings K (comma list: lr, steps, warmup, seed,\n"
"                     batch, data, ...; or all); without it a change is an error\n"
"  --diag DIR         per-layer CSVs and SVG plots\n"
"  --compare LIST     train each preset of LIST (comma-separated) with the same seed and data;\n"
"                     prints a table, writes compare.svg/.csv to --diag DIR or --out DIR [.]\n"
"  --quiet            no progress lines\n"
"Run with OPENBLAS_NUM_THREADS=1: normblocks does its own threading.\n");
}

int parse_args(int argc, char** argv, config* c, int* help) {
    int i, layers_set = 0;
    *help = 0;
    for (i = 1; i < argc; i++) {
        const char* a = argv[i];
        const char* v = i + 1 < argc ? argv[i + 1] : NULL;
        int rc = 0, used = 1;
        double x;
#define NEEDV if (!v) return fail("%s needs a value (see --help)", a)
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { *help = 1; return 0; }
        else if (!strcmp(a, "--no-rope")) { c->rope = 0; used = 0; }
        else if (!strcmp(a, "--reverse")) { c->reverse = 1; used = 0; }
        else if (!strcmp(a, "--quiet")) { c->quiet = 1; used = 0; }
        else if (!strcmp(a, "--zero")) { c->zero = 1; used = 0; }
        else if (!strcmp(a, "--check-finite")) { c->check_finite = 1; used = 0; }
        else if (!strcmp(a, "--inject")) { NEEDV; rc = parse_inject(v, c); }
        else if (!strcmp(a, "--preset")) {
            NEEDV;
            if (strlen(v) >= sizeof c->preset) return fail("--preset: name too long");
            snprintf(c->preset, sizeof c->preset, "%s", v);
        } else if (!strcmp(a, "--schedule")) {
            NEEDV;
            if (strlen(v) >= sizeof c->schedule) return fail("--schedule: too long");
            snprintf(c->schedule, sizeof c->schedule, "%s", v);
        } else if (!strcmp(a, "--ffn")) {
            NEEDV;
            if (strcmp(v, "swiglu") && strcmp(v, "gelu")) return fail("--ffn: swiglu or gelu, not \"%s\"", v);
            snprintf(c->ffn, sizeof c->ffn, "%s", v);
        } else if (!strcmp(a, "--norm")) {
            NEEDV;
            if (strcmp(v, "rms") && strcmp(v, "layer")) return fail("--norm: rms or layer, not \"%s\"", v);
            snprintf(c->norm, sizeof c->norm, "%s", v);
        } else if (!strcmp(a, "--init")) {
            NEEDV;
            if (strlen(v) >= sizeof c->init) return fail("--init: unknown scheme \"%s\"", v);
            snprintf(c->init, sizeof c->init, "%s", v);
        }
        else if (!strcmp(a, "--d")) { NEEDV; rc = parse_int(v, 1, 1 << 16, &c->d_model, a); }
        else if (!strcmp(a, "--layers")) { NEEDV; rc = parse_int(v, 1, MAX_LAYERS, &c->n_layers, a); layers_set = 1; }
        else if (!strcmp(a, "--heads")) { NEEDV; rc = parse_int(v, 1, 1 << 12, &c->n_heads, a); }
        else if (!strcmp(a, "--kv-heads")) { NEEDV; rc = parse_int(v, 0, 1 << 12, &c->n_kv_heads, a); }
        else if (!strcmp(a, "--ff")) { NEEDV; rc = parse_int(v, 0, 1 << 18, &c->d_ff, a); }
        else if (!strcmp(a, "--steps")) { NEEDV; rc = parse_int(v, 0, 100000000, &c->steps, a); }
        else if (!strcmp(a, "--batch")) { NEEDV; rc = parse_int(v, 1, 1 << 16, &c->batch, a); }
        else if (!strcmp(a, "--seq")) { NEEDV; rc = parse_int(v, 2, 1 << 16, &c->seq, a); }
        else if (!strcmp(a, "--warmup")) { NEEDV; rc = parse_int(v, 0, 100000000, &c->warmup, a); }
        else if (!strcmp(a, "--threads")) { NEEDV; rc = parse_int(v, 0, 1024, &c->threads, a); }
        else if (!strcmp(a, "--log-every")) { NEEDV; rc = parse_int(v, 1, 100000000, &c->log_every, a); }
        else if (!strcmp(a, "--eval-batches")) { NEEDV; rc = parse_int(v, 1, 100000, &c->eval_batches, a); }
        else if (!strcmp(a, "--stop-after")) { NEEDV; rc = parse_int(v, 0, 100000000, &c->stop_after, a); }
        else if (!strcmp(a, "--save-every")) { NEEDV; rc = parse_int(v, 0, 100000000, &c->save_every, a); }
        else if (!strcmp(a, "--bucket-kb")) { NEEDV; rc = parse_int(v, 4, 1 << 20, &c->bucket_kb, a); }
        else if (!strcmp(a, "--digits")) { NEEDV; rc = parse_int(v, 1, 9, &c->digits, a); }
        else if (!strcmp(a, "--lr")) { NEEDV; rc = parse_double(v, 0, 10, &c->lr, a); }
        else if (!strcmp(a, "--min-lr")) { NEEDV; rc = parse_double(v, 0, 1, &c->min_lr_frac, a); }
        else if (!strcmp(a, "--wd")) { NEEDV; rc = parse_double(v, 0, 10, &c->wd, a); }
        else if (!strcmp(a, "--beta1")) { NEEDV; rc = parse_double(v, 0, 0.999999, &c->beta1, a); }
        else if (!strcmp(a, "--beta2")) { NEEDV; rc = parse_double(v, 0, 0.999999999, &c->beta2, a); }
        else if (!strcmp(a, "--adam-eps")) { NEEDV; rc = parse_double(v, 1e-30, 1, &c->adam_eps, a); }
        else if (!strcmp(a, "--clip")) { NEEDV; rc = parse_double(v, 0, 1e30, &c->clip, a); }
        else if (!strcmp(a, "--val-frac")) { NEEDV; rc = parse_double(v, 1e-6, 0.9, &c->val_frac, a); }
        else if (!strcmp(a, "--seed")) {
            NEEDV;
            rc = parse_double(v, 0, 9007199254740992.0, &x, a);
            if (!rc && x != floor(x)) rc = fail("--seed: \"%s\" is not an integer", v);
            c->seed = (unsigned long long)x;
        }
        else if (!strcmp(a, "--data")) { NEEDV; c->data = v; }
        else if (!strcmp(a, "--save")) { NEEDV; c->save = v; }
        else if (!strcmp(a, "--resume")) { NEEDV; c->resume = v; }
        else if (!strcmp(a, "--diag")) { NEEDV; c->diag = v; }
        else if (!strcmp(a, "--compare")) { NEEDV; c->compare = v; }
        else if (!strcmp(a, "--out")) { NEEDV; c->out = v; }
        else if (!strcmp(a, "--csv")) { NEEDV; c->csv = v; }
        else if (!strcmp(a, "--allow-change")) { NEEDV; c->allow_change = v; }
        else return fail("unknown option \"%s\" (see --help)", a);
#undef NEEDV
        if (rc) return rc;
        i += used;
    }
    /* flags that would have no effect in this combination are errors, not silently ignored */
    if (c->out && !c->compare) return fail("--out is the directory of --compare's table and plot; add --compare or drop --out");
    if (c->save_every && !c->save) return fail("--save-every needs --save FILE");
    if (c->allow_change && !c->resume) return fail("--allow-change applies to --resume; add --resume FILE or drop it");
    if (layers_set && c->schedule[0]) return fail("--schedule sets the number of layers; drop --layers");
    if (c->inj_kind && !c->check_finite) return fail("--inject tests --check-finite: add it");
    if (c->inj_kind && c->inj_layer >= (c->schedule[0] ? MAX_LAYERS : c->n_layers))
        return fail("--inject: layer %d does not exist", c->inj_layer);
    if (c->zero && g_ranks < 2) return fail("--zero shards the optimizer over MPI ranks: run under mpirun with 2 or more ranks");
    if (c->batch < g_ranks) return fail("--batch %d is smaller than the %d ranks (each rank needs at least one row)", c->batch, g_ranks);
    return 0;
}

/* the scheme names of nb_init_scheme */
int init_scheme(const char* name, nb_init_scheme* out) {
    static const char* names[] = {"normal", "depth_scaled", "megatron", "mitchell", "mixln",
                                  "mixln_scaled", "gpt2", "deepnorm"};
    int i;
    for (i = 0; i < 8; i++)
        if (!strcmp(name, names[i])) { *out = (nb_init_scheme)(NB_INIT_NORMAL + i); return 0; }
    return fail("--init: unknown scheme \"%s\" (normal, depth_scaled, megatron, mitchell, mixln, "
                "mixln_scaled, gpt2, deepnorm)", name);
}

/* One layer kind of --schedule. */
static int layer_kind(const char* k, nb_layer_desc* ld) {
    nb_placement none, pre, from_norm, post, sand, after;
    memset(ld, 0, sizeof *ld);
    memset(&none, 0, sizeof none);
    pre = none; pre.input_norm = 1;
    from_norm = pre; from_norm.residual_from_norm = 1;
    post = none; post.post_norm = 1;
    sand = pre; sand.output_norm = 1;
    after = none; after.output_norm = 1;
    if (!strcmp(k, "pre")) { ld->attn = ld->ffn = pre; }
    else if (!strcmp(k, "post")) { ld->attn = ld->ffn = post; }
    else if (!strcmp(k, "sandwich")) { ld->attn = ld->ffn = sand; }
    else if (!strcmp(k, "normafter")) { ld->attn = ld->ffn = after; }
    else if (!strcmp(k, "hybrid")) { ld->attn = none; ld->ffn = from_norm; ld->sites = NB_SITES_QKV; }
    else if (!strcmp(k, "qkvpre")) { ld->attn = none; ld->ffn = pre; ld->sites = NB_SITES_QKV; }
    else if (!strcmp(k, "prepost")) { ld->attn = pre; ld->ffn = from_norm; }
    else if (!strcmp(k, "postpre")) { ld->attn = from_norm; ld->ffn = pre; }
    else return fail("--schedule: unknown layer kind \"%s\" (pre, post, sandwich, normafter, "
                     "hybrid, qkvpre, prepost, postpre)", k);
    return 0;
}

/* The stack description of the config (preset name or schedule). layers: storage for a
   schedule (MAX_LAYERS). */
int make_desc(const config* c, nb_stack_desc* d, nb_layer_desc* layers) {
    nb_ctx ctx;
    int n_layers = c->n_layers;
    memset(&ctx, 0, sizeof ctx);
    memset(d, 0, sizeof *d);
    if (c->schedule[0]) {
        char buf[sizeof c->schedule], *tok, *save = NULL;
        int n = 0;
        snprintf(buf, sizeof buf, "%s", c->schedule);
        for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
            if (n >= MAX_LAYERS) return fail("--schedule: more than %d layers", MAX_LAYERS);
            if (layer_kind(tok, &layers[n])) return 1;
            n++;
        }
        if (n == 0) return fail("--schedule: empty");
        n_layers = n;
        d->layers = layers;
    } else if (nb_preset_from_name(&ctx, d, c->preset) != NB_OK) {
        return fail("%s", ctx.err);
    }
    d->n_layers = n_layers;
    d->d_model = c->d_model;
    d->n_heads = c->n_heads;
    d->n_kv_heads = c->n_kv_heads;
    d->d_ff = c->d_ff;
    d->rope = c->rope;
    d->check_finite = c->check_finite;
    if (!strcmp(c->ffn, "gelu")) d->ffn = NB_FFN_GELU_TANH;
    else if (d->ffn == NB_FFN_DEFAULT) d->ffn = NB_FFN_SWIGLU;
    if (!strcmp(c->norm, "layer")) d->norm = NB_NORM_LAYER;
    return 0;
}

