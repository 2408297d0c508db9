/* cli.c: the options, --help, and the stack description they make. */
#define _POSIX_C_SOURCE 200809L
#include "train.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <ctype.h>
#include <string.h>

static int parse_int(const char* s, int lo, int hi, int* out, const char* what) {
    char* end;
    long v;
    errno = 0;
    v = strtol(s, &end, 10);
    /* the whole argument: no leading space or sign strtol would skip */
    if (errno || end == s || *end || !(isdigit((unsigned char)*s) || *s == '-') || v < lo || v > hi)
        return fail("%s: \"%s\" is not an integer in [%d, %d]", what, s, lo, hi);
    *out = (int)v;
    return 0;
}

static int parse_double(const char* s, double lo, double hi, double* out, const char* what) {
    char* end;
    double v;
    errno = 0;
    v = strtod(s, &end);
    if (errno || end == s || *end || isspace((unsigned char)*s) || !(v >= lo && v <= hi))
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

/* LIST of up to MAX_SWEEP distinct comma-separated numbers in [lo, hi] (integers when
   integer), for --seeds and --lrs */
static int parse_list(const char* v, double lo, double hi, int integer, double* out, int* n,
                      const char* what) {
    char buf[512], *tok, *save = NULL;
    int i;
    *n = 0;
    if (strlen(v) >= sizeof buf) return fail("%s: list too long", what);
    snprintf(buf, sizeof buf, "%s", v);
    for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        double x;
        if (*n >= MAX_SWEEP) return fail("%s: at most %d values", what, MAX_SWEEP);
        if (parse_double(tok, lo, hi, &x, what)) return 1;
        if (integer && x != floor(x)) return fail("%s: \"%s\" is not an integer", what, tok);
        for (i = 0; i < *n; i++)
            if (out[i] == x) return fail("%s: %s appears twice", what, tok);
        out[(*n)++] = x;
    }
    if (*n == 0) return fail("%s: empty list", what);
    return 0;
}

static int parse_onoff(const char* v, int* out, const char* what) {
    if (!strcmp(v, "on")) *out = 1;
    else if (!strcmp(v, "off")) *out = 0;
    else return fail("%s: on or off, not \"%s\"", what, v);
    return 0;
}

void config_defaults(config* c) {
    memset(c, 0, sizeof *c);
    snprintf(c->preset, sizeof c->preset, "pre");
    c->d_model = 128; c->n_layers = 4; c->n_heads = 4; c->rope = 1;
    snprintf(c->ffn, sizeof c->ffn, "swiglu");
    snprintf(c->norm, sizeof c->norm, "rms");
    c->batch = 16; c->seq = 64; c->steps = 600; c->warmup = 50; c->log_every = 50;
    c->eval_batches = 4;
    c->lr = 3e-3; c->min_lr_frac = 0.1; c->wd = 0.1; c->beta1 = 0.9; c->beta2 = 0.95;
    c->adam_eps = 1e-8; c->clip = 1.0; c->seed = 1337;
    c->digits = 3; c->format = FMT_PADDED; c->val_frac = 0.1;
    c->bucket_kb = 256;
    c->comm_timeout = 600;
    c->eval_problems = 500;
    c->temperature = 1; c->sample_len = 64;
    c->collapse_margin = 0.1;
    c->embed_scale = -1;
}

void usage(void) {
    printf(
"usage: train [options]\n"
"model\n"
"  --preset NAME      block placement: pre, post, mixln, hybrid, hybrid_star, siamese, sandwich,\n"
"                     olmo2, deepnorm, gpt2, ... or paper names (Pre-Norm, HybridNorm*, QKV-Post,\n"
"                     Pre-QK-Pre, Mix-LN, ...)                                 [pre]\n"
"  --schedule LIST    per-layer schedule instead of a preset, one kind per layer, from: pre,\n"
"                     post, sandwich, normafter, hybrid (QKV-Post), qkvpre, prepost, postpre;\n"
"                     sets the number of layers (e.g. --schedule post,pre,pre,hybrid)\n"
"  --d N --layers N --heads N --kv-heads N --ff N       [128 4 4 heads 8d/3->64]\n"
"  --ffn swiglu|gelu  --norm rms|layer|dyt  --no-rope\n"
"  --precision fp32|bf16|auto  the GEMMs' operands (sums, norms, softmax, weights, gradients\n"
"                     and checkpoints stay float32; the kernels line names what runs); auto:\n"
"                     bf16 where oneDNN has a bf16 matrix kernel (AMX, AVX512-BF16), else fp32 [fp32]\n"
"  --backend auto|blas|dnnl  the stack's GEMMs: OpenBLAS (bf16: portable, slow) or oneDNN\n"
"                     (builds with NB_USE_DNNL); auto: oneDNN for bf16 where it has a kernel [auto]\n"
"  --dyt-alpha A  --dyt-alpha-attn A   DyT's initial alpha (others / norms feeding attention)\n"
"                     [DyT's LLM rule by width: 1 and 1 up to d = 1024]\n"
"  --layerscale-init X  LayerScale's initial scale [CaiT's rule by depth: 0.1 up to 18 layers]\n"
"  --embed-scale on|off  the embedding times a learnable scalar, init sqrt(d) [on for dyt, as\n"
"                     DyT's LLaMA code; off otherwise]\n"
"  --init SCHEME      normal|depth_scaled|megatron|mitchell|mixln|mixln_scaled|gpt2|deepnorm\n"
"                     [the init of the preset's paper code: normal for pre, megatron for the\n"
"                     HybridNorm family, mixln for post/mixln/sandwich/lns, mitchell for siamese,\n"
"                     deepnorm, gpt2, normal std 0.02 for olmo2; the model line says which]\n"
"training\n"
"  --steps N [600]  --batch B [16]  --seq T [64]  --lr X [3e-3]  --warmup N [50]\n"
"  --min-lr F         cosine floor as a fraction of lr [0.1]\n"
"  --wd X [0.1]  --beta1 X [0.9]  --beta2 X [0.95]  --adam-eps X [1e-8]  --clip X [1.0]\n"
"  --wd-norms on|off  weight decay on norm gains, biases and SiameseNorm gamma too [off, as\n"
"                     llm.c/nanoGPT; the HybridNorm yaml decays them: decay_norm_and_bias]\n"
"  --seed N [1337]  --threads N [0 = OpenMP default]\n"
"  --log-every N [50]  --eval-batches N [4]  --csv FILE  every step: loss, gradient norm, lr\n"
"  --eval-problems N  held-out problems of the exact-match accuracy (addition) [500]\n"
"  --summary FILE     the run's results as JSON (final metrics, validation curve)\n"
"sweeps (seeds and learning rates: mean and spread, the largest stable lr per preset)\n"
"  --compare LIST     one run per preset of LIST (comma-separated), same data and seeds\n"
"  --seeds LIST       seeds of every preset and lr (e.g. 0,1,2) [--seed]\n"
"  --lrs LIST         learning rates (e.g. 1e-3,4e-3,1.6e-2) [--lr]\n"
"  --jobs N           runs at a time, each its own process [cores / threads per run; runs\n"
"                     use 1 thread unless --threads]; train_mpi: one after another\n"
"  --collapse-margin X  a run whose validation loss stays within X nats of the unigram\n"
"                     entropy over its last quarter is marked collapsed [0.1]\n"
"  --spike-stop F     stop a run as diverged when its loss exceeds F x its first loss + 1\n"
"                     after 10 steps [0: off; a run stops only on a non-finite loss or\n"
"                     gradient, and loss spikes are counted and reported, as the stability\n"
"                     protocols do: a spike can recover]\n"
"  --out DIR          tables, CSVs and plots of the sweep [--diag DIR, else .]; with --diag\n"
"                     DIR each run also writes its diagnostics to DIR/<run>/\n"
"sampling and evaluation of a checkpoint (any --save, also --zero/MPI ones)\n"
"  --load FILE        the checkpoint; its configuration is the model's (no model flags needed)\n"
"  --eval             validation loss, and exact-match accuracy on --eval-problems held-out\n"
"                     problems (addition); no training\n"
"  --dump FILE        every named intermediate of one validation batch's forward and backward\n"
"                     (safetensors, in the order computed), to diff a port with nbdiff\n"
"  --sample PROMPT    continue PROMPT (addition checkpoints stop at the answer's newline)\n"
"  --temperature X [1; 0 = greedy]  --top-k N [0 = all]  --sample-len N [64]  --sample-seed N [0]\n"
"data parallel (run under mpirun; --batch stays the global batch, split over the ranks)\n"
"  --zero             ZeRO-1: shard the AdamW moments over the ranks (memory 1/ranks)\n"
"  --comm-timeout S   a collective that has not completed in S seconds ends the job with a\n"
"                     message naming it (a rank hung, or the network between hosts gone: TCP\n"
"                     retries for many minutes); the last --save-every checkpoint stays. Keep S\n"
"                     above the longest a rank works alone (rank 0 reading --data, writing a\n"
"                     checkpoint) and above mpirun's lost-host detection (oob_tcp_keepalive_*,\n"
"                     see the README); 0 = wait forever [600]\n"
"reliability\n"
"  --check-finite     stop at the first NaN/Inf, naming the layer and sublayer (activations:\n"
"                     the library's check; gradients: each layer's as the backward finishes it)\n"
"  --inject K@S:L:SUB:W  fault injection to test that: K nan|inf at step S into layer L's\n"
"                     SUB attn|ffn, W act (its output projection weight) or grad (its gradient)\n"
"  --bucket-kb N      gradient bucket reduced while the backward goes on [256]\n"
"data\n"
"  (default)          synthetic addition, loss on the answer bytes; --digits N [3]\n"
"  --format F         how a problem is written: padded (123+045=0168, fixed width), plain\n"
"                     (123+45=168), reversed (123+45=861), padded_reversed (123+045=8610),\n"
"                     lsb_first (321+540=8610) [padded]; --reverse = --format reversed\n"
"  --data FILE        byte-level corpus; --val-frac F held out [0.1]\n"
"files\n"
"  --save FILE        checkpoint at the end and on Ctrl-C (default on Ctrl-C: train.safetensors)\n"
"  --save-every N     also every N steps\n"
"  --stop-after N     stop after step N of the --steps schedule (save, resume later)\n"
"  --resume FILE      continue from a checkpoint (same model flags required)\n"
"  --allow-change K   let --resume change run settings K (comma list: lr, steps, warmup, seed,\n"
"                     batch, data, ...; or all); without it a change is an error\n"
"  --diag DIR         per-layer CSVs and SVG plots (SiameseNorm: both streams)\n"
"  --quiet            no progress lines\n"
"Run with OPENBLAS_NUM_THREADS=1: normblocks does its own threading.\n");
}

/* flags that only matter when training (an error with --load) */
static int training_flag(const char* a) {
    static const char* const names[] = {
        "--steps", "--lr", "--warmup", "--min-lr", "--wd", "--wd-norms", "--beta1", "--beta2",
        "--adam-eps", "--clip", "--init", "--save", "--save-every", "--stop-after", "--resume",
        "--allow-change", "--diag", "--compare", "--seeds", "--lrs", "--jobs", "--out", "--csv",
        "--summary", "--inject", "--check-finite", "--log-every", "--bucket-kb", "--zero",
        "--collapse-margin", "--spike-stop", "--dyt-alpha", "--dyt-alpha-attn", "--layerscale-init"};
    size_t i;
    for (i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!strcmp(a, names[i])) return 1;
    return 0;
}

/* Combinations where a flag would have no effect, or two flags contradict: errors, not
   silently ignored. */
typedef struct seen_flags { int layers, preset, seed, lr, sampling, eval_problems, margin; } seen_flags;

static int check_combinations(const config* c, const seen_flags* seen) {
    const int sweep = sweeping(c);
    if (c->out && !sweep) return fail("--out is the directory of a sweep's tables and plots: add --compare (or --seeds, --lrs) or drop --out");
    if (c->save_every && !c->save) return fail("--save-every needs --save FILE");
    if (c->allow_change && !c->resume) return fail("--allow-change applies to --resume; add --resume FILE or drop it");
    if (seen->layers && c->schedule[0]) return fail("--schedule sets the number of layers; drop --layers");
    if (c->inj_kind && !c->check_finite) return fail("--inject tests --check-finite: add it");
    if (c->inj_kind && c->inj_layer >= (c->schedule[0] ? MAX_LAYERS : c->n_layers))
        return fail("--inject: layer %d does not exist", c->inj_layer);
    if (c->zero && g_ranks < 2) return fail("--zero shards the optimizer over MPI ranks: run under mpirun with 2 or more ranks");
    if (c->batch < g_ranks) return fail("--batch %d is smaller than the %d ranks (each rank needs at least one row)", c->batch, g_ranks);
    /* sweeps */
    if (c->compare && seen->preset) return fail("--compare names the presets; drop --preset");
    if (c->compare && c->schedule[0]) return fail("--compare takes presets; drop --schedule");
    if (c->n_seeds && seen->seed) return fail("--seeds replaces --seed; drop --seed");
    if (c->n_lrs && seen->lr) return fail("--lrs replaces --lr; drop --lr");
    if (!sweep && c->jobs) return fail("--jobs applies to sweeps (--compare, --seeds, --lrs)");
    if (!sweep && seen->margin) return fail("--collapse-margin applies to sweeps (--compare, --seeds, --lrs)");
    if (sweep && c->jobs && dist_have_mpi()) return fail("--jobs: train_mpi runs a sweep's runs one after another (each over the ranks); drop --jobs, or use train");
    if (sweep && (c->resume || c->save || c->stop_after || c->csv || c->summary))
        return fail("a sweep (--compare, --seeds, --lrs) writes every run's CSV and summary under --out DIR/runs/; "
                    "--resume, --save, --stop-after, --csv and --summary are for one run");
    /* sampling and evaluation */
    if ((c->sample || c->eval || c->dump) && !c->load)
        return fail("--sample, --eval and --dump work on a checkpoint: add --load FILE");
    if (c->load && !c->sample && !c->eval && !c->dump)
        return fail("--load FILE: add --eval (validation loss, accuracy), --sample PROMPT and/or --dump FILE");
    if (c->dump && g_ranks > 1) return fail("--dump runs on one process: use train, not mpirun");
    if (!c->sample && seen->sampling)
        return fail("--temperature, --top-k, --sample-len and --sample-seed apply to --sample");
    if (c->sample && !c->sample[0]) return fail("--sample needs a non-empty prompt");
    if (c->sample && g_ranks > 1) return fail("--sample runs on one process: use train, not mpirun");
    if (c->load && seen->eval_problems && !c->eval) return fail("--eval-problems applies to --eval");
    if (c->data && seen->eval_problems) return fail("--eval-problems counts addition problems; --data trains on a file");
    return 0;
}

int sweeping(const config* c) { return c->compare || c->n_seeds || c->n_lrs; }

int parse_args(int argc, char** argv, config* c, int* help) {
    seen_flags seen;
    int i, loading = 0;
    double list[MAX_SWEEP];
    *help = 0;
    memset(&seen, 0, sizeof seen);
    for (i = 1; i < argc; i++) /* --load decides what the other flags may be */
        if (!strcmp(argv[i], "--load")) loading = 1;
    for (i = 1; i < argc; i++) {
        const char* a = argv[i];
        const char* v = i + 1 < argc ? argv[i + 1] : NULL;
        int rc = 0, used = 1, k;
        double x;
#define NEEDV if (!v) return fail("%s needs a value (see --help)", a)
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { *help = 1; return 0; }
        if (loading && training_flag(a))
            return fail("%s has no effect on --load (sampling and evaluation do not train)", a);
        if (!strcmp(a, "--no-rope")) { c->rope = 0; used = 0; }
        else if (!strcmp(a, "--reverse")) { c->format = FMT_REVERSED; used = 0; }
        else if (!strcmp(a, "--quiet")) { c->quiet = 1; used = 0; }
        else if (!strcmp(a, "--zero")) { c->zero = 1; used = 0; }
        else if (!strcmp(a, "--check-finite")) { c->check_finite = 1; used = 0; }
        else if (!strcmp(a, "--eval")) { c->eval = 1; used = 0; }
        else if (!strcmp(a, "--dump")) { NEEDV; c->dump = v; }
        else if (!strcmp(a, "--inject")) { NEEDV; rc = parse_inject(v, c); }
        else if (!strcmp(a, "--format")) { NEEDV; rc = format_from_name(v, &c->format); }
        else if (!strcmp(a, "--wd-norms")) { NEEDV; rc = parse_onoff(v, &c->wd_norms, a); }
        else if (!strcmp(a, "--embed-scale")) { NEEDV; rc = parse_onoff(v, &c->embed_scale, a); }
        else if (!strcmp(a, "--preset")) {
            NEEDV;
            if (strlen(v) >= sizeof c->preset) return fail("--preset: name too long");
            snprintf(c->preset, sizeof c->preset, "%s", v);
            seen.preset = 1;
        } else if (!strcmp(a, "--schedule")) {
            NEEDV;
            if (strlen(v) >= sizeof c->schedule) return fail("--schedule: too long");
            snprintf(c->schedule, sizeof c->schedule, "%s", v);
        } else if (!strcmp(a, "--ffn")) {
            NEEDV;
            if (strcmp(v, "swiglu") && strcmp(v, "gelu")) return fail("--ffn: swiglu or gelu, not \"%s\"", v);
            snprintf(c->ffn, sizeof c->ffn, "%s", v);
        } else if (!strcmp(a, "--precision")) {
            NEEDV;
            if (strcmp(v, "fp32") && strcmp(v, "bf16") && strcmp(v, "auto"))
                return fail("--precision: fp32, bf16 or auto, not \"%s\"", v);
            c->bf16 = !strcmp(v, "bf16") ? 1 : !strcmp(v, "auto") ? 2 : 0;
        } else if (!strcmp(a, "--backend")) {
            NEEDV;
            if (strcmp(v, "auto") && strcmp(v, "blas") && strcmp(v, "dnnl"))
                return fail("--backend: auto, blas or dnnl, not \"%s\"", v);
            c->backend = !strcmp(v, "blas") ? NB_BACKEND_BLAS
                         : !strcmp(v, "dnnl") ? NB_BACKEND_DNNL : NB_BACKEND_DEFAULT;
        } else if (!strcmp(a, "--norm")) {
            NEEDV;
            if (strcmp(v, "rms") && strcmp(v, "layer") && strcmp(v, "dyt"))
                return fail("--norm: rms, layer or dyt, not \"%s\"", v);
            snprintf(c->norm, sizeof c->norm, "%s", v);
        } else if (!strcmp(a, "--init")) {
            nb_init_scheme sc;
            NEEDV;
            if (init_scheme(v, &sc)) return 1; /* every known name fits c->init */
            snprintf(c->init, sizeof c->init, "%s", v);
        }
        else if (!strcmp(a, "--d")) { NEEDV; rc = parse_int(v, 1, 1 << 16, &c->d_model, a); }
        else if (!strcmp(a, "--layers")) { NEEDV; rc = parse_int(v, 1, MAX_LAYERS, &c->n_layers, a); seen.layers = 1; }
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
        else if (!strcmp(a, "--eval-problems")) { NEEDV; rc = parse_int(v, 1, 1000000, &c->eval_problems, a); seen.eval_problems = 1; }
        else if (!strcmp(a, "--stop-after")) { NEEDV; rc = parse_int(v, 0, 100000000, &c->stop_after, a); }
        else if (!strcmp(a, "--save-every")) { NEEDV; rc = parse_int(v, 0, 100000000, &c->save_every, a); }
        else if (!strcmp(a, "--bucket-kb")) { NEEDV; rc = parse_int(v, 4, 1 << 20, &c->bucket_kb, a); }
        else if (!strcmp(a, "--digits")) { NEEDV; rc = parse_int(v, 1, 9, &c->digits, a); }
        else if (!strcmp(a, "--top-k")) { NEEDV; rc = parse_int(v, 0, VOCAB, &c->top_k, a); seen.sampling = 1; }
        else if (!strcmp(a, "--sample-len")) { NEEDV; rc = parse_int(v, 1, 1000000, &c->sample_len, a); seen.sampling = 1; }
        else if (!strcmp(a, "--jobs")) { NEEDV; rc = parse_int(v, 1, 256, &c->jobs, a); }
        else if (!strcmp(a, "--lr")) { NEEDV; rc = parse_double(v, 0, 10, &c->lr, a); seen.lr = 1; }
        else if (!strcmp(a, "--min-lr")) { NEEDV; rc = parse_double(v, 0, 1, &c->min_lr_frac, a); }
        else if (!strcmp(a, "--wd")) { NEEDV; rc = parse_double(v, 0, 10, &c->wd, a); }
        else if (!strcmp(a, "--dyt-alpha")) { NEEDV; rc = parse_double(v, 1e-6, 100, &c->dyt_alpha, a); }
        else if (!strcmp(a, "--dyt-alpha-attn")) { NEEDV; rc = parse_double(v, 1e-6, 100, &c->dyt_alpha_attn, a); }
        else if (!strcmp(a, "--layerscale-init")) { NEEDV; rc = parse_double(v, 1e-12, 10, &c->layerscale_init, a); }
        else if (!strcmp(a, "--beta1")) { NEEDV; rc = parse_double(v, 0, 0.999999, &c->beta1, a); }
        else if (!strcmp(a, "--beta2")) { NEEDV; rc = parse_double(v, 0, 0.999999999, &c->beta2, a); }
        else if (!strcmp(a, "--adam-eps")) { NEEDV; rc = parse_double(v, 1e-30, 1, &c->adam_eps, a); }
        else if (!strcmp(a, "--clip")) { NEEDV; rc = parse_double(v, 0, 1e30, &c->clip, a); }
        else if (!strcmp(a, "--comm-timeout")) { NEEDV; rc = parse_double(v, 0, 1e9, &c->comm_timeout, a); }
        else if (!strcmp(a, "--val-frac")) { NEEDV; rc = parse_double(v, 1e-6, 0.9, &c->val_frac, a); }
        else if (!strcmp(a, "--temperature")) { NEEDV; rc = parse_double(v, 0, 100, &c->temperature, a); seen.sampling = 1; }
        else if (!strcmp(a, "--spike-stop")) { NEEDV; rc = parse_double(v, 0, 1e6, &c->spike_stop, a); }
        else if (!strcmp(a, "--collapse-margin")) { NEEDV; rc = parse_double(v, 0, 100, &c->collapse_margin, a); seen.margin = 1; }
        else if (!strcmp(a, "--seed") || !strcmp(a, "--sample-seed")) {
            NEEDV;
            rc = parse_double(v, 0, 9007199254740992.0, &x, a);
            if (!rc && x != floor(x)) rc = fail("%s: \"%s\" is not an integer", a, v);
            if (!strcmp(a, "--seed")) { c->seed = (unsigned long long)x; seen.seed = 1; }
            else { c->sample_seed = (unsigned long long)x; seen.sampling = 1; }
        }
        else if (!strcmp(a, "--seeds")) {
            NEEDV;
            rc = parse_list(v, 0, 9007199254740992.0, 1, list, &c->n_seeds, a);
            for (k = 0; !rc && k < c->n_seeds; k++) c->seeds[k] = (unsigned long long)list[k];
        }
        else if (!strcmp(a, "--lrs")) {
            NEEDV;
            rc = parse_list(v, 0, 10, 0, c->lrs, &c->n_lrs, a);
            for (k = 0; !rc && k < c->n_lrs; k++)
                if (!(c->lrs[k] > 0)) rc = fail("--lrs: a learning rate must be > 0");
        }
        else if (!strcmp(a, "--data")) { NEEDV; c->data = v; }
        else if (!strcmp(a, "--save")) { NEEDV; c->save = v; }
        else if (!strcmp(a, "--resume")) { NEEDV; c->resume = v; }
        else if (!strcmp(a, "--load")) { NEEDV; c->load = v; }
        else if (!strcmp(a, "--sample")) { NEEDV; c->sample = v; }
        else if (!strcmp(a, "--diag")) { NEEDV; c->diag = v; }
        else if (!strcmp(a, "--compare")) { NEEDV; c->compare = v; }
        else if (!strcmp(a, "--out")) { NEEDV; c->out = v; }
        else if (!strcmp(a, "--csv")) { NEEDV; c->csv = v; }
        else if (!strcmp(a, "--summary")) { NEEDV; c->summary = v; }
        else if (!strcmp(a, "--allow-change")) { NEEDV; c->allow_change = v; }
        else return fail("unknown option \"%s\" (see --help)", a);
#undef NEEDV
        if (rc) return rc;
        i += used;
    }
    /* process state of dist.c (every collective after this point waits at most this long) */
    dist_set_comm_timeout(c->comm_timeout);
    return check_combinations(c, &seen);
}

/* the scheme names of nb_init_scheme */
static const char* const k_init_names[] = {"normal", "depth_scaled", "megatron", "mitchell",
                                           "mixln", "mixln_scaled", "gpt2", "deepnorm"};

int init_scheme(const char* name, nb_init_scheme* out) {
    int i;
    for (i = 0; i < 8; i++)
        if (!strcmp(name, k_init_names[i])) { *out = (nb_init_scheme)(NB_INIT_NORMAL + i); return 0; }
    return fail("--init: unknown scheme \"%s\" (normal, depth_scaled, megatron, mitchell, mixln, "
                "mixln_scaled, gpt2, deepnorm)", name);
}

const char* init_scheme_name(nb_init_scheme s) {
    if (s == NB_INIT_DEFAULT) s = NB_INIT_NORMAL;
    return s >= NB_INIT_NORMAL && s <= NB_INIT_DEEPNORM ? k_init_names[s - NB_INIT_NORMAL] : "?";
}

/* Each preset's initialization: the one in the code its paper published with, so a preset
   trains as its authors trained it unless --init says otherwise.
     pre       normal: the HybridNorm paper's Pre-Norm baseline (its text; its Table 7
               says Megatron for every dense model; the text is specific to Pre-Norm)
     post, sandwich, mixln
               mixln: the Mix-LN code's N(0, 0.02) unscaled, embedding std sqrt(0.4); its
               `post` and `sandwich` norm types are where these presets come from (its scaled
               init is a separate norm type, scale_post_pre: --init mixln_scaled)
     post_flags and the HybridNorm family (hybrid, hybrid_star, first_qkv_pre, embednorm, the
               #-Post/#-Pre rows, pre_post, post_pre)
               megatron: the released HybridNorm yaml, init_fn full_megatron
     olmo2     normal with std 0.02, cutoff 3: the official OLMo-2 yamls
     deepnorm, deepnorm_mixln
               deepnorm: DeepNet's xavier gains (the Mix-LN code's compat gains for
               deepnorm_mixln, chosen by the library from the preset)
     siamese, siamese_post_pre
               mitchell: the SiameseNorm code
     gpt2      gpt2: N(0, 0.02), residual projections 0.02/sqrt(2L) (llm.c / GPT-2)
     lns       mixln: the LayerNorm Scaling code is the Mix-LN code's Llama, and its LNS norm
               type uses the default (unscaled) init: the scale 1/sqrt(l) replaces the scaled
               initialization
     none      normal (a baseline, no paper code)
     dyt       normal: DyT's LLaMA code keeps its model's init (fms' normal), changing only alpha
     periln    normal: the paper trained in Megatron-LM with its default N(0, 0.02); no code
     rezero, layerscale
               normal: their codes keep their models' plain init (the scales start at 0 and
               at CaiT's small value: that is their point)
     custom schedules: normal (no paper to follow) */
static nb_init_scheme preset_init(const config* c, const nb_stack_desc* d, double* std0) {
    *std0 = 0;
    if (c->schedule[0]) return NB_INIT_NORMAL;
    /* "--preset pre --norm layer --ffn gelu" asks for Pre-Norm's init; only the name gpt2 is
       GPT-2's */
    if (d->preset == NB_PRESET_PRE && (!strcmp(c->norm, "layer") || !strcmp(c->ffn, "gelu")))
        return NB_INIT_NORMAL;
    return nb_preset_init(d, std0); /* the library's table of the presets' codes */
}

int resolve_init(const config* c, const nb_stack_desc* d, nb_init_scheme* scheme, double* std0,
                 const char** why) {
    if (c->init[0]) {
        *std0 = 0;
        *why = "--init";
        return init_scheme(c->init, scheme);
    }
    *scheme = preset_init(c, d, std0);
    *why = c->schedule[0] ? "default for a custom schedule" : "the preset's paper code";
    return 0;
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
    d->precision = c->bf16 ? NB_PRECISION_BF16 : NB_PRECISION_FP32; /* auto: see model_init */
    d->backend = (nb_backend)c->backend;
    d->param_grads = NB_GRAD_OVERWRITE; /* one backward per step: no zero-grad pass */
    if (!strcmp(c->ffn, "gelu")) d->ffn = NB_FFN_GELU_TANH;
    else if (d->ffn == NB_FFN_DEFAULT) d->ffn = NB_FFN_SWIGLU;
    if (!strcmp(c->norm, "layer")) d->norm = NB_NORM_LAYER;
    if (!strcmp(c->norm, "dyt")) d->norm = NB_NORM_DYT;
    d->dyt_alpha = c->dyt_alpha; /* 0: the library's defaults */
    d->dyt_alpha_attn = c->dyt_alpha_attn;
    d->layerscale_init = c->layerscale_init;
    return 0;
}

