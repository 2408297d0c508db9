/* cli.c: the options, --help, and the stack description they make. */
#define _POSIX_C_SOURCE 200809L
#include "train.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <ctype.h>
#include <stddef.h>
#include <cjson/cJSON.h>
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
    if (sscanf(v, "%7[a-z]@%d:%d:%7[a-z]:%7[a-z]%n", kind, &c->machine.inj_step, &c->machine.inj_layer, sub, where, &n) != 5 ||
        v[n] || (strcmp(kind, "nan") && strcmp(kind, "inf")) || (strcmp(sub, "attn") && strcmp(sub, "ffn")) ||
        (strcmp(where, "act") && strcmp(where, "grad")) || c->machine.inj_step < 1 || c->machine.inj_layer < 0)
        return fail("--inject: \"%s\" is not KIND@STEP:LAYER:SUB:WHERE (KIND nan or inf, STEP >= 1, "
                    "SUB attn or ffn, WHERE act or grad; e.g. nan@25:1:attn:act)", v);
    c->machine.inj_kind = strcmp(kind, "nan") ? 2 : 1;
    c->machine.inj_ffn = !strcmp(sub, "ffn");
    c->machine.inj_grad = !strcmp(where, "grad");
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
    for (tok = strtok_r(buf, ", ", &save); tok; tok = strtok_r(NULL, ", ", &save)) { /* "a, b" too */
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

void config_defaults(config* c) {
    memset(c, 0, sizeof *c);
    snprintf(c->model.preset, sizeof c->model.preset, "pre");
    c->model.d_model = 128; c->model.n_layers = 4; c->model.n_heads = 4; c->model.attn.rope = 1;
    snprintf(c->model.ffn.kind, sizeof c->model.ffn.kind, "swiglu");
    snprintf(c->model.norm.kind, sizeof c->model.norm.kind, "rms");
    c->loop.batch = 16; c->loop.seq = 64; c->loop.steps = 600; c->optim.warmup = 50; c->loop.log_every = 50;
    c->loop.eval_batches = 4;
    c->optim.lr = 3e-3; c->optim.min_lr_frac = 0.1; c->optim.wd = 0.1; c->optim.beta1 = 0.9; c->optim.beta2 = 0.95;
    c->optim.adam_eps = 1e-8; c->optim.clip = 1.0; c->loop.seed = 1337;
    c->data.digits = 3; c->data.format = FMT_PADDED; c->data.val_frac = 0.1;
    c->machine.bucket_kb = 256;
    c->machine.comm_timeout = 600;
    c->loop.eval_problems = 500;
    c->sample.temperature = 1; c->sample.sample_len = 64;
    c->sweep.collapse_margin = 0.1;
    c->model.norm.embed_scale = -1;
    c->model.attn.bias = -1;
}

/* ---- the options: one table for the command line, --config files, --help and the
   checkpoint's model keys ---- */

typedef enum opt_kind {
    K_GROUP,  /* a heading of --help */
    K_INT,    /* int field in [lo, hi] */
    K_REAL,   /* double field in [lo, hi] */
    K_PATH,   /* const char* field: the value as given */
    K_NAME,   /* char[] field (size hi) */
    K_FLAG,   /* int field set to (int)lo; no value */
    K_CHOICE, /* int field: the index of the value in choices ("a|b|c"), plus (int)lo */
    K_FN      /* parsed by fn */
} opt_kind;

enum {
    O_TRAIN = 1,     /* training only: refused with --load */
    O_MODEL = 2,     /* a model key of the checkpoint (config_model_meta) */
    O_SAMPLING = 4,  /* applies to --sample */
    O_CMDLINE = 8    /* not in a --config file (the sweep's own) */
};

typedef struct opt {
    const char* name;    /* without "--" */
    const char* arg;     /* the value in --help; NULL: a flag */
    opt_kind kind;
    size_t off;
    double lo, hi;
    const char* choices; /* K_CHOICE */
    int (*fn)(const char* v, config* c);
    unsigned flags;
    const char* help;    /* lines after the first indented by --help */
} opt;

/* --hyper's choices in nb_hyper's order, from NB_HYPER_NONE */
typedef char cli_hyper_order[NB_HYPER_NONE == 1 && NB_HYPER_MHC == 2 && NB_HYPER_HC == 3 &&
                             NB_HYPER_IDENTITY == 4 && NB_HYPER_MHC_LITE == 5 ? 1 : -1];

#define F(field) offsetof(config, field)
static int fn_seed(const char* v, config* c);
static int fn_sample_seed(const char* v, config* c);
static int fn_seeds(const char* v, config* c);
static int fn_lrs(const char* v, config* c);
static int fn_inject(const char* v, config* c) { return parse_inject(v, c); }
static int fn_format(const char* v, config* c) { return format_from_name(v, &c->data.format); }
static int fn_init(const char* v, config* c);
static int fn_sites(const char* v, config* c);
static int fn_embed_scale(const char* v, config* c);

static const opt k_opts[] = {
    {"model", NULL, K_GROUP, 0, 0, 0, NULL, NULL, 0, NULL},
    {"preset", "NAME", K_NAME, F(model.preset), 0, 64, NULL, NULL, 0,
     "block placement: pre, post, mixln, hybrid, hybrid_star, siamese, sandwich, olmo2, deepnorm,\n"
     "gpt2, ngpt, ... or paper names (Pre-Norm, HybridNorm*, QKV-Post, Mix-LN, nGPT, ...);\n"
     "--list-presets. ngpt: nGPT's model around the stack too (NVIDIA/ngpt): unit embedding and\n"
     "head rows, logits x sz sqrt(d) (sz learnable, one per byte, stored 1/sqrt(d)), its matrices\n"
     "normalized along d after every step, and its train.py's optimizer defaults [pre]"},
    {"schedule", "LIST", K_NAME, F(model.schedule), 0, 512, NULL, NULL, 0,
     "per-layer schedule instead of a preset, one kind per layer, from: pre, post, sandwich,\n"
     "normafter, hybrid (QKV-Post), qkvpre, prepost, postpre; sets the number of layers"},
    {"d", "N", K_INT, F(model.d_model), 1, 1 << 16, NULL, NULL, 0, "model width [128]"},
    {"layers", "N", K_INT, F(model.n_layers), 1, MAX_LAYERS, NULL, NULL, 0, "blocks [4]"},
    {"heads", "N", K_INT, F(model.n_heads), 1, 1 << 12, NULL, NULL, 0, "attention heads [4]"},
    {"kv-heads", "N", K_INT, F(model.n_kv_heads), 0, 1 << 12, NULL, NULL, 0, "key/value heads (GQA) [0 = heads]"},
    {"ff", "N", K_INT, F(model.ffn.d_ff), 0, 1 << 18, NULL, NULL, 0, "FFN width [0: 8d/3 rounded to 64 for SwiGLU, 4d for GELU]"},
    {"ffn", "swiglu|gelu", K_NAME, F(model.ffn.kind), 0, 16, "swiglu|gelu", NULL, 0, "FFN [swiglu]"},
    {"norm", "rms|layer|dyt|derf|l2", K_NAME, F(model.norm.kind), 0, 16, "rms|layer|dyt|derf|l2", NULL, 0,
     "every norm's kind (rms: the preset's); derf: Derf (arXiv 2512.10938), gamma erf(alpha x + s)\n"
     "+ beta, alpha and s learnable per norm (init 1 and 0, its code's; --dyt-alpha sets alpha) [rms]"},
    {"norm-gain", "on|off", K_CHOICE, F(model.norm.gain), -1, 0, "off|x|on", NULL, O_MODEL,
     "the block norms' weight: off = RMSNorm without a weight, DyT and Derf without gamma [the\n"
     "norm's: on; l2 has none]"},
    {"norm-bias", "on|off", K_CHOICE, F(model.norm.bias), -1, 0, "off|x|on", NULL, O_MODEL,
     "the block norms' bias: off = LayerNorm(bias=False), DyT as its LLaMA code [the norm's: on\n"
     "for layer, dyt and derf; rms and l2 have none]"},
    {"gain-offset", NULL, K_FLAG, F(model.norm.gain_offset), 1, 0, NULL, NULL, O_MODEL,
     "Gemma's unit-offset gains: every norm weight (block norms, Q/K/V/C sites) stored as w and\n"
     "multiplying by 1 + w, init 0 (Gemma, Qwen3-Next)"},
    {"no-rope", NULL, K_FLAG, F(model.attn.rope), 0, 0, NULL, NULL, 0, "no RoPE (no position information at all)"},
    {"rope-theta", "X", K_REAL, F(model.attn.rope_theta), 1.000001, 1e12, NULL, NULL, O_MODEL, "RoPE base [10000]"},
    {"eps", "X", K_REAL, F(model.norm.eps), 1e-30, 1, NULL, NULL, O_MODEL,
     "every norm's epsilon [the preset's: 1e-5; 1e-6 for olmo2, mixln, deepnorm_mixln, lns]"},
    {"mixln-alpha", "X", K_REAL, F(model.mixln_alpha), -1, 1, NULL, NULL, O_MODEL,
     "Mix-LN's fraction of Post-Norm layers, in (0, 1]; -1: none (its code's Pre-Norm) [0.25]"},
    {"sites", "LIST", K_FN, F(model.attn.sites), 0, 0, NULL, fn_sites, O_MODEL,
     "attention norm sites: a comma list of q, k, v, c, or none [the preset's: q,k,v for the\n"
     "HybridNorm family and SiameseNorm, q,k for olmo2, none otherwise]"},
    {"site-width", "head|full", K_CHOICE, F(model.attn.site_width), 1, 0, "head|full", NULL, O_MODEL,
     "the site norms over each head (one gain of d_k) or the whole projection [the preset's]"},
    {"attn-bias", "N", K_INT, F(model.attn.bias), 0, 3, NULL, NULL, 0,
     "attention biases: 1 the Q|K|V projection's, 2 the output's, 3 both [the preset's: 3 for gpt2]"},
    {"ffn-bias", "on|off", K_CHOICE, F(model.ffn.bias), -1, 0, "off|x|on", NULL, O_MODEL,
     "FFN biases [the FFN's: on for GELU, off for SwiGLU]"},
    {"final-norm", "on|off", K_CHOICE, F(model.norm.final), -1, 0, "off|x|on", NULL, O_MODEL,
     "the norm before the head [the preset's: on, off for none]"},
    {"embed-norm", "on|off", K_CHOICE, F(model.norm.embed), -1, 0, "off|x|on", NULL, O_MODEL,
     "a norm on the embedding [the preset's: on for embednorm, periln]"},
    {"siamese-scale", "code|paper|one", K_CHOICE, F(model.siamese.scale), 1, 0, "code|paper|one", NULL, O_MODEL,
     "SiameseNorm's c_l: sqrt(2(l+1)) (code), sqrt(l+1) (paper), 1 (its ablation) [code]"},
    {"siamese-fusion", "code|paper", K_CHOICE, F(model.siamese.fusion), 1, 0, "code|paper", NULL, O_MODEL,
     "SiameseNorm's output: the 3-norm fusion (code) or x_L + N(y_L) (paper) [code]"},
    {"siamese-no-fusion-norm", NULL, K_FLAG, F(model.siamese.no_fusion_norm), 1, 0, NULL, NULL, O_MODEL,
     "the paper's ablation without the FFN fusion's input norm"},
    {"attn-gate", "none|headwise|elementwise", K_CHOICE, F(model.attn.gate), 0, 0, "none|headwise|elementwise",
     NULL, O_MODEL,
     "gated attention (Qwen, arXiv 2505.06708): each head's output C times sigmoid(x W_g), one\n"
     "gate per head and token (headwise) or per element (elementwise, the paper's best); W_g the\n"
     "last rows of att_proj [none]"},
    {"attn-sink", "none|learned|off-by-one", K_CHOICE, F(model.attn.sink), 0, 0, "none|learned|off-by-one",
     NULL, O_MODEL,
     "attention sinks: a logit per head that joins every query row's softmax as a key with no\n"
     "value (learned: gpt-oss's \"sinks\"), or z = 0 fixed (off-by-one: exp(s_i) / (1 + sum_j\n"
     "exp(s_j))); a row may then attend to nothing. The final summary reports the sink's mass\n"
     "[none]"},
    {"clip-qkv", "C", K_REAL, F(model.attn.clip_qkv), 1e-30, 1e30, NULL, NULL, O_MODEL,
     "OLMo's clip_qkv: the projection's Q, K, V clamped to [-C, C] before the Q/K norms, no\n"
     "gradient where clamped [off]"},
    {"attn-softcap", "C", K_REAL, F(model.attn.softcap), 1e-30, 1e30, NULL, NULL, O_MODEL,
     "Gemma 2's attention-logit softcap: the scaled scores s become C tanh(s / C) before the\n"
     "mask and softmax (its attn_logit_softcapping, 50 in Gemma 2) [off]"},
    {"branch-scale", "scalar|channel|sublayer", K_CHOICE, F(model.residual.branch_scale), 1, 0, "scalar|channel|x|sublayer",
     NULL, O_MODEL,
     "a learnable scale on every branch of the preset: scalar, ReZero's one per layer (init 0);\n"
     "channel, LayerScale's vector per sublayer (--layerscale-init); sublayer, SkipInit's one\n"
     "per sublayer (init 0). Not for custom schedules, siamese or ngpt [the preset's: scalar for\n"
     "rezero, channel for layerscale, none otherwise]"},
    {"value-residual", "off|fixed|learn", K_CHOICE, F(model.residual.value_residual), 0, 0, "off|fixed|learn", NULL, O_MODEL,
     "ResFormer's value residual, any preset: layers l >= 1 attend over lambda_1 V_l + lambda_2 V_0\n"
     "(V_0 layer 0's values): fixed 0.5/0.5, or learn (two scalars per layer, init 0.5) [off]"},
    {"hyper", "none|mhc|hc|ihc|mhc-lite", K_CHOICE, F(model.hyper.kind), 1, 0, "none|mhc|hc|ihc|mhc-lite",
     NULL, O_MODEL,
     "hyper-connections: n residual streams mixed around each sublayer: mHC (DeepSeek, doubly\n"
     "stochastic by Sinkhorn), HC (ByteDance), ihc (identity mixing, the papers' ablation),\n"
     "mhc-lite (mHC mixing by a convex combination of the n! permutations: exactly doubly\n"
     "stochastic, n <= 5); not with post norms, residuals from the norm or residual scales\n"
     "[the preset's: mhc, hc, ihc]"},
    {"dwa", NULL, K_FLAG, F(model.residual.dwa), 1, 0, NULL, NULL, O_MODEL,
     "DenseFormer's depth-weighted average (arXiv 2402.02622): each layer's input is a learned\n"
     "average of the stack's input and every earlier layer's output (init: the plain stack);\n"
     "one residual stream only. The run ends with where the weights stand; --diag writes them"},
    {"dwa-dilation", "K", K_INT, F(model.residual.dwa_dilation), 1, MAX_LAYERS, NULL, NULL, O_MODEL,
     "DenseFormer's dilation: layer l averages the outputs h_j with j = l+1 mod K only [1]"},
    {"dwa-period", "P", K_INT, F(model.residual.dwa_period), 1, MAX_LAYERS, NULL, NULL, O_MODEL,
     "DenseFormer's DWA period (its package's period): only layers l with (l+1) mod P = 0\n"
     "average, the others pass their output on [1]"},
    {"attn-res", NULL, K_FLAG, F(model.residual.attn_res), 1, 0, NULL, NULL, O_MODEL,
     "Attention Residuals (arXiv 2603.15031): no residual sums; each sublayer's input is a\n"
     "softmax over depth (a learned pseudo-query per sublayer, init uniform) of the stack's input\n"
     "and the earlier sublayers' outputs; Pre-Norm-like presets only. The run ends with where the\n"
     "weights stand; --diag writes them"},
    {"attn-res-block", "S", K_INT, F(model.residual.attn_res_block), 1, 2 * MAX_LAYERS, NULL, NULL, O_MODEL,
     "Attention Residuals' block: outputs summed in blocks of S sublayers (attention and FFN\n"
     "count one each; the paper's Block AttnRes) [1: Full AttnRes, every output its own source]"},
    {"unet-skips", NULL, K_FLAG, F(model.residual.unet_skips), 1, 0, NULL, NULL, O_MODEL,
     "modded-nanogpt's U-Net skips: layer l of the second half adds the output of layer L-1-l\n"
     "times a learned weight (init 1) to its input; an even number of layers"},
    {"value-embeds", "N", K_INT, F(model.residual.value_embeds), 1, MAX_LAYERS / 2, NULL, NULL, O_MODEL,
     "modded-nanogpt's value embeddings: N tables of H_kv d_k values per byte (N(0, 1), as its\n"
     "nn.Embedding); layers 0..N-1 mix tables 0..N-1 into their values, and layers L-N..L-1 the\n"
     "same tables again: V' = lambda_0 V + lambda_1 E[byte]; the other layers V' = lambda_0 V\n"
     "(lambdas per layer, init 0.5); 2N <= L, not with --value-residual [0: off]"},
    {"reinject-x0", NULL, K_FLAG, F(model.residual.reinject_x0), 1, 0, NULL, NULL, O_MODEL,
     "modded-nanogpt's re-injection: every layer's input becomes lambda_0 x + lambda_1 x_0, x_0\n"
     "the embedding (after its norm), learned lambdas per layer (init 1, 0: the plain stack)"},
    {"hyper-streams", "N", K_INT, F(model.hyper.streams), 1, NB_HYPER_MAX_STREAMS, NULL, NULL, O_MODEL,
     "hyper-connections: residual streams [4]"},
    {"hyper-form", "dynamic|static", K_CHOICE, F(model.hyper.form), 1, 0, "dynamic|static", NULL, O_MODEL,
     "hyper-connections: maps computed per token, or learned constants [dynamic]"},
    {"hyper-sinkhorn", "N", K_INT, F(model.hyper.sinkhorn), 1, 100, NULL, NULL, O_MODEL,
     "mHC: Sinkhorn iterations [20]"},
    {"completep", "ALPHA", K_REAL, F(model.residual.completep), 0, 2, NULL, NULL, O_MODEL,
     "CompleteP (arXiv 2505.01618) as its code (nanoGPT-mup, branch completep): every branch\n"
     "times m_L^-ALPHA, m_L = L / --depth-base (1 CompleteP, 0.5 depth-muP; in (0, 2]), and its\n"
     "rules by m_L and m_d = d / --width-base: the blocks' matrices init sigma/sqrt(m_d) without\n"
     "the init's depth factor, lr x m_d^-1 m_L^(ALPHA-1), wd x m_d; the blocks' gains, biases and\n"
     "scales lr x m_L^(ALPHA-1), no wd; embedding, head, final norm lr, wd as given; AdamW eps x\n"
     "m_d^-1 m_L^-ALPHA for every parameter (the code's one eps; the paper scales the blocks'\n"
     "only); logits x 1/m_d. Not muP's 1/d_h attention (1/sqrt(d_h) stays) [0: off]"},
    {"depth-base", "N", K_INT, F(model.residual.depth_base), 1, 1 << 16, NULL, NULL, O_MODEL,
     "CompleteP's base depth L_base: m_L = L / N [1]"},
    {"width-base", "D", K_INT, F(model.residual.width_base), 1, 1 << 16, NULL, NULL, O_MODEL,
     "CompleteP's or muP's base width d_base: m_d = d / D [d: m_d = 1]"},
    {"mup", NULL, K_FLAG, F(model.mup.on), 1, 0, NULL, NULL, O_MODEL,
     "width muP as Megatron-LM's use_mup, m_d = d / --width-base: attention scores x 1/d_h\n"
     "(--mup-base-head-dim), logits x 1/m_d (--mup-output-mult), embedding x --mup-embed-mult;\n"
     "the init the scheme's at d_base, its blocks' matrices / sqrt(m_d) (the depth factor kept);\n"
     "the blocks' matrices train at lr / m_d with AdamW eps / m_d, every other parameter at lr\n"
     "and eps as given"},
    {"mup-base-head-dim", "N", K_INT, F(model.mup.base_head_dim), 1, 1 << 16, NULL, NULL, O_MODEL,
     "muP's attention scale sqrt(N) / d_h, 1/sqrt(d_h) at d_h = N (its mup_base_head_dim) [1/d_h]"},
    {"mup-embed-mult", "X", K_REAL, F(model.mup.embed_mult), 1e-6, 1e6, NULL, NULL, O_MODEL,
     "muP's embedding multiplier (its mup_embedding_mult) [1]"},
    {"mup-output-mult", "X", K_REAL, F(model.mup.output_mult), 1e-6, 1e6, NULL, NULL, O_MODEL,
     "muP's logit multiplier (its mup_output_mult) [1/m_d]"},
    {"attn-memory", "probs|lse", K_CHOICE, F(model.attn.memory), 1, 0, "probs|lse", NULL, 0,
     "attention's cache: softmax probabilities, or one log-sum-exp per row (recomputed in the\n"
     "backward: O(T) memory) [probs up to 64 Mi values, else lse]"},
    {"precision", "fp32|bf16|auto", K_CHOICE, F(machine.bf16), 0, 0, "fp32|bf16|auto", NULL, 0,
     "the GEMMs' operands (sums, norms, softmax, weights, gradients and checkpoints stay float32;\n"
     "the kernels line names what runs); auto: bf16 where a GEMM timed at start runs at least\n"
     "1.25x faster on oneDNN in bf16 than in float32 [fp32]"},
    {"bf16-weights", "copy|forward", K_CHOICE, F(machine.bf16_per_forward), 0, 0, "copy|forward", NULL, 0,
     "bf16: the weights' bf16 copy, written by AdamW once per step (copy), or rounded by every\n"
     "forward (forward: the library's default; the same numbers, for comparisons) [copy]"},
    {"bf16-outputs", "fp32|bf16", K_CHOICE, F(machine.bf16_outputs), 0, 0, "fp32|bf16", NULL, 0,
     "bf16: the FFN's hidden layer (its projection, as cached, and its incoming gradient) in bf16\n"
     "as PyTorch's autocast keeps it: half its memory; on oneDNN with a bf16 matrix unit the\n"
     "GEMMs write it in bf16 (gemm.bf16_outputs) [fp32: float32 outputs]"},
    {"backend", "auto|blas|dnnl", K_CHOICE, F(machine.backend), 0, 0, "auto|blas|dnnl", NULL, 0,
     "the stack's GEMMs: blas (bf16: the portable path: normblocks' GEMM on AMX tiles, else\n"
     "slow) or dnnl (oneDNN, NB_USE_DNNL builds) [auto: bf16 on the faster, timed]"},
    {"dyt-alpha", "A", K_REAL, F(model.norm.dyt_alpha), 1e-6, 100, NULL, NULL, O_TRAIN,
     "DyT's initial alpha of the norms not feeding attention [below d = 1024 DyT's generic 0.5\n"
     "(its LLM rule, from 7B-70B models, collapsed at d = 64); from 1024 its LLM rule by width]"},
    {"dyt-alpha-attn", "A", K_REAL, F(model.norm.dyt_alpha_attn), 1e-6, 100, NULL, NULL, O_TRAIN,
     "DyT's initial alpha of the norms feeding attention [0.5 below d = 1024; then 1 up to 2048]"},
    {"layerscale-init", "X", K_REAL, F(model.residual.layerscale_init), 1e-12, 10, NULL, NULL, O_TRAIN,
     "LayerScale's initial scale [CaiT's rule by depth: 0.1 up to 18 layers]"},
    {"embed-scale", "off|learn|sqrt-d", K_FN, F(model.norm.embed_scale), 0, 0, NULL, fn_embed_scale, 0,
     "the embedding times a scale: learn, a learnable scalar init sqrt(d) (DyT's LLaMA code;\n"
     "on: the same), or sqrt-d, the constant sqrt(d) in float32 and no parameter (Gemma's\n"
     "normalizer) [learn for dyt, else off]"},
    {"logit-softcap", "C", K_REAL, F(model.logit_softcap), 0, 1e30, NULL, NULL, O_MODEL,
     "Gemma 2's final-logit softcap: logits = C tanh(logits / C) before the loss, sampling\n"
     "and evaluation (its final_logit_softcapping, 30 in Gemma 2), applied last: after nGPT's\n"
     "sz sqrt(d) and CompleteP's 1/m_d; float32 with --precision bf16 too [0: off]"},
    {"qk-clip", "TAU", K_REAL, F(optim.qk_clip), 1e-30, 1e30, NULL, NULL, O_TRAIN,
     "QK-Clip (Kimi K2's MuonClip, arXiv 2507.20534; tau 100 there): after every optimizer step\n"
     "each head whose largest logit in the step's forward (over every rank's rows) exceeded TAU\n"
     "gets its W_q and W_k rows scaled so that logit becomes TAU. Not with Q/K norm sites or\n"
     "nGPT's s_qk (the logits do not follow W_q, W_k there) [0: off]"},
    {"init", "SCHEME", K_FN, F(model.init), 0, 0, NULL, fn_init, O_TRAIN,
     "normal|depth_scaled|megatron|mitchell|mixln|mixln_scaled|gpt2|deepnorm|torchtitan (its\n"
     "Llama's depth_init: 0.02, W_o, W_2 and SwiGLU's w3 0.02/sqrt(2(l+1)), embedding N(0, 1))\n"
     "[the init of the preset's paper code; the model line says which]"},
    {"training", NULL, K_GROUP, 0, 0, 0, NULL, NULL, 0, NULL},
    {"steps", "N", K_INT, F(loop.steps), 0, 100000000, NULL, NULL, O_TRAIN, "[600]"},
    {"batch", "B", K_INT, F(loop.batch), 1, 1 << 16, NULL, NULL, 0, "sequences per step (all ranks) [16]"},
    {"seq", "T", K_INT, F(loop.seq), 2, 1 << 16, NULL, NULL, 0, "tokens per sequence [64]"},
    {"lr", "X", K_REAL, F(optim.lr), 0, 10, NULL, NULL, O_TRAIN, "peak learning rate [3e-3]"},
    {"warmup", "N", K_INT, F(optim.warmup), 0, 100000000, NULL, NULL, O_TRAIN, "linear warmup steps [50; 0 for ngpt]"},
    {"min-lr", "F", K_REAL, F(optim.min_lr_frac), 0, 1, NULL, NULL, O_TRAIN, "cosine floor as a fraction of lr [0.1; 0 for ngpt]"},
    {"wd", "X", K_REAL, F(optim.wd), 0, 10, NULL, NULL, O_TRAIN, "AdamW weight decay [0.1; 0 for ngpt]"},
    {"wd-norms", "on|off", K_CHOICE, F(optim.wd_norms), 0, 0, "off|on", NULL, O_TRAIN,
     "weight decay on norm gains, biases and SiameseNorm gamma too [off, as llm.c/nanoGPT]"},
    {"beta1", "X", K_REAL, F(optim.beta1), 0, 0.999999, NULL, NULL, O_TRAIN, "[0.9]"},
    {"beta2", "X", K_REAL, F(optim.beta2), 0, 0.999999999, NULL, NULL, O_TRAIN, "[0.95]"},
    {"adam-eps", "X", K_REAL, F(optim.adam_eps), 1e-30, 1, NULL, NULL, O_TRAIN, "[1e-8]"},
    {"clip", "X", K_REAL, F(optim.clip), 0, 1e30, NULL, NULL, O_TRAIN, "global gradient-norm clip [1.0]"},
    {"seed", "N", K_FN, F(loop.seed), 0, 0, NULL, fn_seed, 0, "[1337]"},
    {"threads", "N", K_INT, F(machine.threads), 0, 1024, NULL, NULL, 0, "[0 = OpenMP default]"},
    {"log-every", "N", K_INT, F(loop.log_every), 1, 100000000, NULL, NULL, O_TRAIN, "[50]"},
    {"eval-batches", "N", K_INT, F(loop.eval_batches), 1, 100000, NULL, NULL, 0, "validation batches [4]"},
    {"eval-problems", "N", K_INT, F(loop.eval_problems), 1, 1000000, NULL, NULL, 0,
     "held-out problems of the exact-match accuracy (addition) [500]"},
    {"csv", "FILE", K_PATH, F(files.csv), 0, 0, NULL, NULL, O_TRAIN,
     "every step: loss, gradient norm, lr, the largest attention logit of the step's forward and\n"
     "the heads QK-Clip scaled after it"},
    {"summary", "FILE", K_PATH, F(files.summary), 0, 0, NULL, NULL, O_TRAIN, "the run's results as JSON"},
    {"spike-stop", "F", K_REAL, F(loop.spike_stop), 0, 1e6, NULL, NULL, O_TRAIN,
     "stop a run as diverged when its loss exceeds F x its first loss + 1 after 10 steps [0: off;\n"
     "a run stops only on a non-finite loss or gradient; loss spikes are counted and reported]"},
    {"sweeps (seeds and learning rates: mean and spread, the largest stable lr per preset)", NULL, K_GROUP, 0, 0, 0,
     NULL, NULL, 0, NULL},
    {"compare", "LIST", K_PATH, F(sweep.compare), 0, 0, NULL, NULL, O_TRAIN | O_CMDLINE,
     "one run per preset of LIST (comma-separated), same data and seeds"},
    {"seeds", "LIST", K_FN, 0, 0, 0, NULL, fn_seeds, O_TRAIN | O_CMDLINE, "seeds of every preset and lr (e.g. 0,1,2) [--seed]"},
    {"lrs", "LIST", K_FN, 0, 0, 0, NULL, fn_lrs, O_TRAIN | O_CMDLINE, "learning rates (e.g. 1e-3,4e-3,1.6e-2) [--lr]"},
    {"jobs", "N", K_INT, F(sweep.jobs), 1, 256, NULL, NULL, O_TRAIN | O_CMDLINE,
     "runs at a time, each its own process [cores / threads per run]; train_mpi: one after another"},
    {"collapse-margin", "X", K_REAL, F(sweep.collapse_margin), 0, 100, NULL, NULL, O_TRAIN,
     "a run whose validation loss stays within X nats of the unigram entropy over its last\n"
     "quarter is collapsed [0.1]"},
    {"out", "DIR", K_PATH, F(files.out), 0, 0, NULL, NULL, O_TRAIN | O_CMDLINE,
     "tables, CSVs and plots [--diag DIR, else .]; a sweep run again reads its finished runs"},
    {"sampling and evaluation of a checkpoint (any --save, also --zero/MPI ones)", NULL, K_GROUP, 0, 0, 0, NULL,
     NULL, 0, NULL},
    {"load", "FILE", K_PATH, F(sample.load), 0, 0, NULL, NULL, 0, "the checkpoint; its configuration is the model's"},
    {"eval", NULL, K_FLAG, F(sample.eval), 1, 0, NULL, NULL, 0,
     "validation loss, and exact-match accuracy on --eval-problems held-out problems; no training"},
    {"dump", "FILE", K_PATH, F(sample.dump), 0, 0, NULL, NULL, 0,
     "every named intermediate of one validation batch's forward and backward (safetensors)"},
    {"sample", "PROMPT", K_PATH, F(sample.sample), 0, 0, NULL, NULL, 0, "continue PROMPT"},
    {"temperature", "X", K_REAL, F(sample.temperature), 0, 100, NULL, NULL, O_SAMPLING, "[1; 0 = greedy]"},
    {"top-k", "N", K_INT, F(sample.top_k), 0, VOCAB, NULL, NULL, O_SAMPLING, "[0 = all]"},
    {"sample-len", "N", K_INT, F(sample.sample_len), 1, 1000000, NULL, NULL, O_SAMPLING, "[64]"},
    {"sample-seed", "N", K_FN, F(sample.sample_seed), 0, 0, NULL, fn_sample_seed, O_SAMPLING, "[0]"},
    {"data parallel (under mpirun; --batch stays the global batch, split over the ranks)", NULL, K_GROUP, 0, 0, 0,
     NULL, NULL, 0, NULL},
    {"zero", NULL, K_FLAG, F(machine.zero), 1, 0, NULL, NULL, O_TRAIN, "ZeRO-1: shard the AdamW moments over the ranks"},
    {"comm-timeout", "S", K_REAL, F(machine.comm_timeout), 0, 1e9, NULL, NULL, 0,
     "a collective not completed in S seconds ends the job with a message naming it (a hung rank,\n"
     "a lost network); keep S above the longest a rank works alone and above mpirun's lost-host\n"
     "detection (oob_tcp_keepalive_*, see examples/train/README.md); 0 = wait forever [600]"},
    {"bucket-kb", "N", K_INT, F(machine.bucket_kb), 4, 1 << 20, NULL, NULL, O_TRAIN,
     "gradient bucket reduced while the backward goes on [256]"},
    {"reliability", NULL, K_GROUP, 0, 0, 0, NULL, NULL, 0, NULL},
    {"check-finite", NULL, K_FLAG, F(machine.check_finite), 1, 0, NULL, NULL, O_TRAIN,
     "stop at the first NaN/Inf, naming the layer and sublayer"},
    {"inject", "K@S:L:SUB:W", K_FN, 0, 0, 0, NULL, fn_inject, O_TRAIN,
     "fault injection to test that: K nan|inf at step S into layer L's SUB attn|ffn, W act or grad"},
    {"data", NULL, K_GROUP, 0, 0, 0, NULL, NULL, 0, NULL},
    {"digits", "N", K_INT, F(data.digits), 1, 9, NULL, NULL, 0, "addition: operand digits [3]"},
    {"format", "F", K_FN, 0, 0, 0, NULL, fn_format, 0,
     "padded (123+045=0168), plain (123+45=168), reversed (123+45=861), padded_reversed\n"
     "(123+045=8610), lsb_first (321+540=8610) [padded]"},
    {"reverse", NULL, K_FLAG, F(data.format), FMT_REVERSED, 0, NULL, NULL, 0, "= --format reversed"},
    {"data", "FILE", K_PATH, F(data.path), 0, 0, NULL, NULL, 0,
     "a byte-level corpus instead of addition (any text file, e.g. /usr/share/common-licenses/*)"},
    {"val-frac", "F", K_REAL, F(data.val_frac), 1e-6, 0.9, NULL, NULL, 0, "held out of --data [0.1]"},
    {"files", NULL, K_GROUP, 0, 0, 0, NULL, NULL, 0, NULL},
    {"config", "FILE", K_FN, 0, 0, 0, NULL, NULL, 0,
     "options from FILE, one per line as \"name value\" (or \"name\" for a flag; # comments),\n"
     "read where --config stands: later options override it"},
    {"save", "FILE", K_PATH, F(files.save), 0, 0, NULL, NULL, O_TRAIN,
     "checkpoint at the end and on Ctrl-C (default on Ctrl-C: train.safetensors)"},
    {"save-every", "N", K_INT, F(loop.save_every), 0, 100000000, NULL, NULL, O_TRAIN, "also every N steps"},
    {"stop-after", "N", K_INT, F(loop.stop_after), 0, 100000000, NULL, NULL, O_TRAIN,
     "stop after step N of the --steps schedule (save, resume later)"},
    {"resume", "FILE", K_PATH, F(files.resume), 0, 0, NULL, NULL, O_TRAIN, "continue from a checkpoint"},
    {"allow-change", "K", K_PATH, F(files.allow_change), 0, 0, NULL, NULL, O_TRAIN,
     "let --resume change run settings K (comma list: lr, steps, ...; or all)"},
    {"diag", "DIR", K_PATH, F(files.diag), 0, 0, NULL, NULL, O_TRAIN,
     "per-layer CSVs and SVG plots (SiameseNorm: both streams); per layer and head the max\n"
     "logit and first-key attention mass"},
    {"quiet", NULL, K_FLAG, F(loop.quiet), 1, 0, NULL, NULL, 0, "no progress lines"},
    {"profile", NULL, K_FLAG, F(machine.profile), 1, 0, NULL, NULL, 0,
     "at the end, where the training step's time went: GEMMs, attention core, norms, bf16\n"
     "conversions, the stack's other work, embedding/head/loss, optimizer, communication"},
    {"information", NULL, K_GROUP, 0, 0, 0, NULL, NULL, 0, NULL},
    {"help", NULL, K_FN, 0, 0, 0, NULL, NULL, 0, "this text (-h)"},
    {"version", NULL, K_FN, 0, 0, 0, NULL, NULL, 0, "the version of normblocks"},
    {"list-presets", NULL, K_FN, 0, 0, 0, NULL, NULL, 0, "every preset name nb_preset_from_name takes"}};
#undef F
#define N_OPTS ((int)(sizeof k_opts / sizeof k_opts[0]))

/* a seed: an integer a double holds exactly */
static int parse_seed(const char* v, const char* what, unsigned long long* out) {
    double x;
    if (parse_double(v, 0, 9007199254740992.0, &x, what)) return 1;
    if (x != floor(x)) return fail("%s: \"%s\" is not an integer", what, v);
    *out = (unsigned long long)x;
    return 0;
}

static int fn_seed(const char* v, config* c) { return parse_seed(v, "--seed", &c->loop.seed); }
static int fn_sample_seed(const char* v, config* c) { return parse_seed(v, "--sample-seed", &c->sample.sample_seed); }

static int fn_seeds(const char* v, config* c) {
    double list[MAX_SWEEP];
    int k;
    if (parse_list(v, 0, 9007199254740992.0, 1, list, &c->sweep.n_seeds, "--seeds")) return 1;
    for (k = 0; k < c->sweep.n_seeds; k++) c->sweep.seeds[k] = (unsigned long long)list[k];
    return 0;
}

static int fn_lrs(const char* v, config* c) {
    int k;
    if (parse_list(v, 0, 10, 0, c->sweep.lrs, &c->sweep.n_lrs, "--lrs")) return 1;
    for (k = 0; k < c->sweep.n_lrs; k++)
        if (!(c->sweep.lrs[k] > 0)) return fail("--lrs: a learning rate must be > 0");
    return 0;
}

static int fn_init(const char* v, config* c) {
    nb_init_scheme sc;
    if (init_scheme(v, &sc)) return 1; /* every known name fits c->init */
    snprintf(c->model.init, sizeof c->model.init, "%s", v);
    return 0;
}

/* off, learn (on: its name before sqrt-d existed), sqrt-d */
static int fn_embed_scale(const char* v, config* c) {
    if (!strcmp(v, "off")) c->model.norm.embed_scale = EMBED_OFF;
    else if (!strcmp(v, "learn") || !strcmp(v, "on")) c->model.norm.embed_scale = EMBED_LEARN;
    else if (!strcmp(v, "sqrt-d")) c->model.norm.embed_scale = EMBED_SQRT_D;
    else return fail("--embed-scale: off, learn (or on) or sqrt-d, not \"%s\"", v);
    return 0;
}

/* "q,k,v,c" (any of them) or "none" */
static int fn_sites(const char* v, config* c) {
    char buf[64], *tok, *save = NULL;
    int mask = 0;
    if (!strcmp(v, "none")) { c->model.attn.sites = NB_SITES_NONE; return 0; }
    if (strlen(v) >= sizeof buf) return fail("--sites: \"%s\" is not a list of q, k, v, c (or none)", v);
    snprintf(buf, sizeof buf, "%s", v);
    for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        const int bit = !strcmp(tok, "q") ? NB_SITE_Q : !strcmp(tok, "k") ? NB_SITE_K
                        : !strcmp(tok, "v") ? NB_SITE_V : !strcmp(tok, "c") ? NB_SITE_C : 0;
        if (!bit || (mask & bit)) return fail("--sites: \"%s\" is not a list of distinct q, k, v, c (or none)", v);
        mask |= bit;
    }
    if (!mask) return fail("--sites: empty (none: no sites)");
    c->model.attn.sites = mask;
    return 0;
}

static const opt* find_opt(const char* name) {
    int i;
    for (i = 0; i < N_OPTS; i++)
        if (k_opts[i].kind != K_GROUP && !strcmp(k_opts[i].name, name)) return &k_opts[i];
    return NULL;
}

/* index of v among "a|b|c", or -1 */
static int choice_index(const char* choices, const char* v) {
    const char* p = choices;
    int i = 0;
    const size_t n = strlen(v);
    while (p) {
        const char* e = strchr(p, '|');
        const size_t k = e ? (size_t)(e - p) : strlen(p);
        if (k == n && !strncmp(p, v, n)) return i;
        p = e ? e + 1 : NULL;
        i++;
    }
    return -1;
}

/* "a|x|b|c" as "a, b or c" (x: not a value) */
static const char* choice_list(const char* choices, char* buf, size_t n) {
    const char* p = choices;
    size_t w = 0;
    int k = 0, total = 0;
    for (; p; p = strchr(p, '|') ? strchr(p, '|') + 1 : NULL) total += strncmp(p, "x|", 2) != 0;
    buf[0] = 0;
    for (p = choices; p && w < n; p = strchr(p, '|') ? strchr(p, '|') + 1 : NULL) {
        const size_t len = strchr(p, '|') ? (size_t)(strchr(p, '|') - p) : strlen(p);
        if (len == 1 && *p == 'x') continue;
        k++;
        w += (size_t)snprintf(buf + w, n - w, "%s%.*s", k == 1 ? "" : k == total ? " or " : ", ", (int)len, p);
    }
    return buf;
}

/* the value v of option o into c */
static int set_opt(const opt* o, const char* v, config* c) {
    char* field = (char*)c + o->off;
    char what[64], list[128];
    int k;
    snprintf(what, sizeof what, "--%s", o->name);
    switch (o->kind) {
    case K_INT: return parse_int(v, (int)o->lo, (int)o->hi, (int*)field, what);
    case K_REAL: return parse_double(v, o->lo, o->hi, (double*)field, what);
    case K_PATH: *(const char**)field = v; return 0;
    case K_NAME:
        if (o->choices && choice_index(o->choices, v) < 0)
            return fail("%s: %s, not \"%s\"", what, choice_list(o->choices, list, sizeof list), v);
        if (strlen(v) >= (size_t)o->hi) return fail("%s: \"%s\" is too long", what, v);
        snprintf(field, (size_t)o->hi, "%s", v);
        return 0;
    case K_FLAG: *(int*)field = (int)o->lo; return 0;
    case K_CHOICE:
        /* "x" marks an index that is not a value (on|off stored as 1|-1) */
        if ((k = choice_index(o->choices, v)) < 0 || !strcmp(v, "x"))
            return fail("%s: %s, not \"%s\"", what, choice_list(o->choices, list, sizeof list), v);
        *(int*)field = k + (int)o->lo;
        return 0;
    case K_FN: return o->fn(v, c);
    default: return fail("%s: not an option", what);
    }
}

/* a string of --config kept in c (the fields point at it) */
static const char* keep(config* c, const char* s) {
    const size_t n = strlen(s) + 1;
    char* p;
    if (c->store_used + n > sizeof c->store) return NULL;
    p = c->store + c->store_used;
    memcpy(p, s, n);
    c->store_used += n;
    return p;
}

typedef struct parse_state { int loading, seen[N_OPTS]; } parse_state;

static int apply_opt(const opt* o, const char* v, config* c, parse_state* ps, const char* where) {
    if (ps->loading && (o->flags & O_TRAIN))
        return fail("%s--%s has no effect on --load (sampling and evaluation do not train)", where, o->name);
    if (set_opt(o, v, c)) return 1;
    ps->seen[o - k_opts] = 1;
    return 0;
}

/* the next line of the text [*p, end) into line (n bytes; the newline dropped), *p moved past
   it: 1, or 0 at the end, -1 when longer than n - 1 bytes, -2 at a NUL byte (not text) */
static int config_line(const char** p, const char* end, char* line, size_t n) {
    size_t k = 0;
    if (*p >= end) return 0;
    while (*p < end && **p != '\n') {
        const char ch = *(*p)++;
        if (ch == 0) return -2;
        if (k + 1 == n) return -1;
        line[k++] = ch;
    }
    if (*p < end) (*p)++; /* the newline */
    line[k] = 0;
    return 1;
}

/* A config line split in place: "name value", "name = value", "--name value" or a flag alone;
   NULL for a blank line or a comment. *val: the value ("" for none), trailing blanks removed. */
static char* config_split(char* line, char** val) {
    char *p = line, *name, *e;
    while (isspace((unsigned char)*p)) p++;
    if (!*p || *p == '#') return NULL;
    for (e = p + strlen(p); e > p && isspace((unsigned char)e[-1]);) *--e = 0;
    name = p;
    while (*p && !isspace((unsigned char)*p) && *p != '=') p++;
    if (*p) *p++ = 0;
    while (isspace((unsigned char)*p) || *p == '=') p++;
    *val = p;
    return !strncmp(name, "--", 2) ? name + 2 : name;
}

unsigned long long config_run_hash(const char* path) {
    char line[1024], *name, *val;
    unsigned long long h = 1469598103934665603ULL;
    size_t size;
    char* text = read_whole(path, NULL, &size);
    const char* p = text;
    int got;
    if (!text) return 0;
    while ((got = config_line(&p, text + size, line, sizeof line)) != 0) {
        const opt* o;
        if (got < 0) { h = 0; break; } /* the run refuses the file itself */
        if (!(name = config_split(line, &val))) continue;
        if ((o = find_opt(name)) && (o->flags & O_CMDLINE)) continue;
        h = fnv1a(name, strlen(name) + 1, h);
        h = fnv1a(val, strlen(val) + 1, h);
    }
    free(text);
    return h;
}

static int read_config_file(const char* path, config* c, parse_state* ps) {
    char line[1024], where[1200];
    size_t size;
    char* text = read_whole(path, "--config", &size);
    const char* p = text;
    int n = 0, rc = 0, got;
    if (!text) return 1;
    io_input(path, "--config");
    while (!rc && (got = config_line(&p, text + size, line, sizeof line)) != 0) {
        char *name, *val;
        const opt* o;
        n++;
        snprintf(where, sizeof where, "%s:%d: ", path, n);
        if (got == -1) { rc = fail("%sline too long (at most %d bytes)", where, (int)sizeof line - 1); break; }
        if (got == -2) { rc = fail("%sa NUL byte: %s is not a text file", where, path); break; }
        if (!(name = config_split(line, &val))) continue;
        if (!(o = find_opt(name)) || o->kind == K_GROUP || !strcmp(name, "config") || !strcmp(name, "help") ||
            !strcmp(name, "version") || !strcmp(name, "list-presets")) {
            rc = fail("%sunknown option \"%s\" (the names of --help, without --)", where, name);
            break;
        }
        if ((o->flags & O_CMDLINE) && getenv(SWEEP_RUN_ENV)) continue; /* a run of the sweep */
        if (!o->arg) { /* a flag: alone, or on/true/1 */
            if (*val && strcmp(val, "on") && strcmp(val, "true") && strcmp(val, "1")) {
                rc = fail("%s%s is a flag: give it alone (or \"on\"), not \"%s\"", where, name, val);
                break;
            }
            rc = apply_opt(o, NULL, c, ps, where);
        } else if (!*val) rc = fail("%s%s needs a value", where, name);
        else if (!(val = (char*)keep(c, val))) rc = fail("%s: too much text in config files", path);
        else rc = apply_opt(o, val, c, ps, where);
    }
    free(text);
    return rc;
}

/* every name --preset takes, as nb_preset_from_name does (its unknown-name error lists the same) */
static void list_presets(void) {
    int p;
    printf("presets (--preset NAME; the names in parentheses are taken too, in any case):\n");
    for (p = 1; p < NB_PRESET_COUNT; p++) {
        char names[128];
        const char* a = nb_preset_aliases((nb_preset)p);
        size_t n = (size_t)snprintf(names, sizeof names, "%s%s", nb_preset_name((nb_preset)p),
                                    *a ? " (" : "");
        for (; *a && n + 3 < sizeof names; a++) { /* "a|b" -> "a, b" */
            if (*a == '|') names[n++] = ',', names[n++] = ' ';
            else names[n++] = *a;
        }
        snprintf(names + n, sizeof names - n, "%s", *nb_preset_aliases((nb_preset)p) ? ")" : "");
        printf("  %-36s %s\n", names, nb_preset_about((nb_preset)p));
    }
    printf("  %-36s %s\n", "gpt2 (GPT-2)", "Pre-Norm with LayerNorm, a GELU MLP and biases (GPT-2)");
    printf("  %-36s %s\n", "#-Post, #-Pre, Pre-#-Post, Pre-#-Pre",
           "the HybridNorm ablations, # one of QKVC, QKV, QKC, QK, KV, KC (e.g. QK-Pre)");
    printf("README.md's Presets (normblocks.h's THE PRESETS) has each block's equations\n");
}

void usage(void) {
    int i;
    printf("usage: train [options]   (options also from --config FILE; the defaults in [])\n");
    for (i = 0; i < N_OPTS; i++) {
        const opt* o = &k_opts[i];
        char head[96];
        const char* h = o->help;
        int w;
        if (o->kind == K_GROUP) { printf("%s\n", o->name); continue; }
        w = snprintf(head, sizeof head, "  --%s%s%s", o->name, o->arg ? " " : "", o->arg ? o->arg : "");
        printf("%s", head);
        if (w > 22 && h) { /* a long name: its help on the next lines */
            printf("\n");
            w = 0;
        }
        while (h && *h) { /* help lines from column 24 */
            const char* e = strchr(h, '\n');
            const int n = e ? (int)(e - h) : (int)strlen(h);
            printf("%*s%.*s\n", w < 23 ? 23 - w : 1, "", n, h);
            w = 0;
            h = e ? e + 1 : NULL;
        }
        if (!o->help) printf("\n");
    }
    printf("Run with OPENBLAS_NUM_THREADS=1: normblocks does its own threading.\n");
}

/* Combinations where a flag would have no effect, or two flags contradict: errors, not
   silently ignored. */
typedef struct seen_flags { int layers, preset, seed, lr, sampling, eval_problems, margin; } seen_flags;

/* Before any work: no output file is an input or another output (the same file after links,
   or the same name in the same directory); every input is registered, so that the writers of
   files in --diag and --out directories refuse to replace one too (io_output). */
static int check_paths(const config* c) {
    static const char* const out_flag[4] = {"--csv", "--summary", "--save", "--dump"};
    const char* out[4];
    int i, j;
    out[0] = c->files.csv; out[1] = c->files.summary; out[2] = c->files.save; out[3] = c->sample.dump;
    io_input(c->data.path, "--data"); /* and --config: read_config_file */
    io_input(c->files.resume, "--resume");
    io_input(c->sample.load, "--load");
    for (i = 0; i < 4; i++) {
        if (!out[i]) continue;
        if (io_output(out[i], out_flag[i])) return 1;
        for (j = i + 1; j < 4; j++)
            if (out[j] && same_file(out[i], out[j]))
                return fail("%s and %s name the same file (%s): give each output its own", out_flag[i],
                            out_flag[j], out[i]);
    }
    return 0;
}

static int check_combinations(const config* c, const seen_flags* seen) {
    const int sweep = sweeping(c);
    if (c->files.out && !sweep) return fail("--out is the directory of a sweep's tables and plots: add --compare (or --seeds, --lrs) or drop --out");
    if (c->loop.save_every && !c->files.save) return fail("--save-every needs --save FILE");
    if (c->files.allow_change && !c->files.resume) return fail("--allow-change applies to --resume; add --resume FILE or drop it");
    if (c->model.residual.depth_base && !(c->model.residual.completep > 0))
        return fail("--depth-base is CompleteP's base model: add --completep ALPHA");
    if (c->model.residual.width_base && !(c->model.residual.completep > 0) && !c->model.mup.on)
        return fail("--width-base is the base model of CompleteP's or muP's width rules: add --completep ALPHA or --mup");
    if ((c->model.mup.base_head_dim || c->model.mup.embed_mult > 0 || c->model.mup.output_mult > 0) && !c->model.mup.on)
        return fail("--mup-base-head-dim, --mup-embed-mult and --mup-output-mult are muP's: add --mup");
    if (c->model.mup.on && c->model.residual.completep > 0)
        return fail("--mup with --completep: both set the width rules (CompleteP's are muP's with its depth rules); give one");
    if (seen->layers && c->model.schedule[0]) return fail("--schedule sets the number of layers; drop --layers");
    if (c->machine.bf16_outputs && !c->machine.bf16)
        return fail("--bf16-outputs bf16 rounds the outputs of bf16 GEMMs: add --precision bf16 (or auto)");
    if (c->machine.inj_kind && !c->machine.check_finite) return fail("--inject tests --check-finite: add it");
    if (c->machine.inj_kind && c->machine.inj_layer >= (c->model.schedule[0] ? MAX_LAYERS : c->model.n_layers))
        return fail("--inject: layer %d does not exist", c->machine.inj_layer);
    if (c->machine.comm_timeout > 0 && c->machine.comm_timeout < 1)
        return fail("--comm-timeout %g: under 1 s an ordinary pause of a rank (the OS running another process, "
                    "a checkpoint) would be taken for a lost peer; give 1 s or more (0 waits forever)", c->machine.comm_timeout);
    if (c->machine.zero && g_ranks < 2) return fail("--zero shards the optimizer over MPI ranks: run under mpirun with 2 or more ranks");
    if (c->loop.batch < g_ranks) return fail("--batch %d is smaller than the %d ranks (each rank needs at least one row)", c->loop.batch, g_ranks);
    /* sweeps */
    if (c->sweep.compare && seen->preset) return fail("--compare names the presets; drop --preset");
    if (c->sweep.compare && c->model.schedule[0]) return fail("--compare takes presets; drop --schedule");
    if (c->sweep.n_seeds && seen->seed) return fail("--seeds replaces --seed; drop --seed");
    if (c->sweep.n_lrs && seen->lr) return fail("--lrs replaces --lr; drop --lr");
    if (!sweep && c->sweep.jobs) return fail("--jobs applies to sweeps (--compare, --seeds, --lrs)");
    if (!sweep && seen->margin) return fail("--collapse-margin applies to sweeps (--compare, --seeds, --lrs)");
    if (sweep && c->sweep.jobs && dist_have_mpi()) return fail("--jobs: train_mpi runs a sweep's runs one after another (each over the ranks); drop --jobs, or use train");
    if (sweep && (c->files.resume || c->files.save || c->loop.stop_after || c->files.csv || c->files.summary))
        return fail("a sweep (--compare, --seeds, --lrs) writes every run's CSV and summary under --out DIR/runs/; "
                    "--resume, --save, --stop-after, --csv and --summary are for one run");
    /* sampling and evaluation */
    if ((c->sample.sample || c->sample.eval || c->sample.dump) && !c->sample.load)
        return fail("--sample, --eval and --dump work on a checkpoint: add --load FILE");
    if (c->sample.load && !c->sample.sample && !c->sample.eval && !c->sample.dump)
        return fail("--load FILE: add --eval (validation loss, accuracy), --sample PROMPT and/or --dump FILE");
    if (c->sample.dump && g_ranks > 1) return fail("--dump runs on one process: use train, not mpirun");
    if (!c->sample.sample && seen->sampling)
        return fail("--temperature, --top-k, --sample-len and --sample-seed apply to --sample");
    if (c->sample.sample && !c->sample.sample[0]) return fail("--sample needs a non-empty prompt");
    if (c->sample.sample && g_ranks > 1) return fail("--sample runs on one process: use train, not mpirun");
    if (c->sample.load && seen->eval_problems && !c->sample.eval) return fail("--eval-problems applies to --eval");
    if (c->data.path && seen->eval_problems) return fail("--eval-problems counts addition problems; --data trains on a file");
    return check_paths(c);
}

int sweeping(const config* c) { return c->sweep.compare || c->sweep.n_seeds || c->sweep.n_lrs; }

const char* norm_kind_name(nb_norm_type k) {
    return k == NB_NORM_LAYER ? "layer" : k == NB_NORM_DYT ? "dyt" : k == NB_NORM_DERF ? "derf"
         : k == NB_NORM_L2 ? "l2" : "rms";
}

/* the trainer's optimizer defaults, or nGPT's (ngpt.c), where c->optim.given leaves them open */
void preset_train_defaults(config* c) {
    config d;
    if (is_ngpt(c)) {
        ngpt_optim_defaults(c);
        return;
    }
    config_defaults(&d);
    if (!(c->optim.given & GIVEN_WD)) c->optim.wd = d.optim.wd;
    if (!(c->optim.given & GIVEN_WARMUP)) c->optim.warmup = d.optim.warmup;
    if (!(c->optim.given & GIVEN_MIN_LR)) c->optim.min_lr_frac = d.optim.min_lr_frac;
    if (!(c->optim.given & GIVEN_BETA1)) c->optim.beta1 = d.optim.beta1;
    if (!(c->optim.given & GIVEN_BETA2)) c->optim.beta2 = d.optim.beta2;
    if (!(c->optim.given & GIVEN_ADAM_EPS)) c->optim.adam_eps = d.optim.adam_eps;
}

int parse_args(int argc, char** argv, config* c, int* help) {
    parse_state ps;
    seen_flags seen;
    int i, k;
    *help = 0;
    memset(&ps, 0, sizeof ps);
    for (i = 1; i < argc; i++) /* --load decides what the other flags may be */
        if (!strcmp(argv[i], "--load")) ps.loading = 1;
    for (i = 1; i < argc; i++) {
        const char* a = argv[i];
        const opt* o = !strncmp(a, "--", 2) ? find_opt(a + 2) : !strcmp(a, "-h") ? find_opt("help") : NULL;
        if (!o) return fail("unknown option \"%s\" (see --help)", a);
        if (!strcmp(o->name, "help") || !strcmp(o->name, "version") || !strcmp(o->name, "list-presets")) {
            if (g_rank == 0) {
                if (!strcmp(o->name, "help")) usage();
                else if (!strcmp(o->name, "version")) printf("normblocks %s (train)\n", NB_VERSION_STRING);
                else list_presets();
            }
            *help = 1;
            return 0;
        }
        if (o->arg && i + 1 == argc) return fail("%s needs a value (see --help)", a);
        if (!strcmp(o->name, "config")) { /* its options in its place (a file cannot name another) */
            if (read_config_file(argv[++i], c, &ps)) return 1;
            continue;
        }
        if (apply_opt(o, o->arg ? argv[i + 1] : NULL, c, &ps, "")) return 1;
        i += o->arg != NULL;
    }
    memset(&seen, 0, sizeof seen);
    seen.layers = ps.seen[find_opt("layers") - k_opts];
    seen.preset = ps.seen[find_opt("preset") - k_opts];
    seen.seed = ps.seen[find_opt("seed") - k_opts];
    seen.lr = ps.seen[find_opt("lr") - k_opts];
    seen.eval_problems = ps.seen[find_opt("eval-problems") - k_opts];
    seen.margin = ps.seen[find_opt("collapse-margin") - k_opts];
    for (k = 0; k < N_OPTS; k++) seen.sampling |= ps.seen[k] && (k_opts[k].flags & O_SAMPLING);
    {   /* the optimizer flags given; the preset's defaults for the others */
        static const char* const names[] = {"wd", "warmup", "min-lr", "beta1", "beta2",
                                            "adam-eps"}; /* GIVEN_WD, ... in order */
        c->optim.given = 0;
        for (k = 0; k < 6; k++)
            if (ps.seen[find_opt(names[k]) - k_opts]) c->optim.given |= 1u << k;
        preset_train_defaults(c);
    }
    /* process state of dist.c (every collective after this point waits at most this long) */
    dist_set_comm_timeout(c->machine.comm_timeout);
    return check_combinations(c, &seen);
}

/* ---- the model options as checkpoint metadata ---- */

static void meta_key(const opt* o, char* key, size_t n) {
    size_t i;
    snprintf(key, n, "%s", o->name);
    for (i = 0; key[i]; i++)
        if (key[i] == '-') key[i] = '_';
}

/* o's value in c as the option takes it, or "" when at its default (0) */
static void opt_value(const opt* o, const config* c, char* buf, size_t n) {
    const char* field = (const char*)c + o->off;
    buf[0] = 0;
    if (o->kind == K_REAL && *(const double*)field != 0) { /* the shortest that reads back the same */
        int p = 6;
        do snprintf(buf, n, "%.*g", p, *(const double*)field);
        while (strtod(buf, NULL) != *(const double*)field && ++p <= 17);
    }
    else if (o->kind == K_INT && *(const int*)field != 0) snprintf(buf, n, "%d", *(const int*)field);
    else if (o->kind == K_FLAG && *(const int*)field != 0) snprintf(buf, n, "on");
    else if (o->kind == K_CHOICE && *(const int*)field != 0) {
        const char* p = o->choices;
        int k = *(const int*)field - (int)o->lo;
        while (k-- > 0 && p) p = strchr(p, '|') ? strchr(p, '|') + 1 : NULL;
        if (p) snprintf(buf, n, "%.*s", (int)(strchr(p, '|') ? (size_t)(strchr(p, '|') - p) : strlen(p)), p);
    } else if (o->off == offsetof(config, model.attn.sites) && c->model.attn.sites) {
        int w = 0;
        if (c->model.attn.sites == NB_SITES_NONE) snprintf(buf, n, "none");
        else {
            const char* names = "qkvc";
            int b;
            for (b = 0; b < 4; b++)
                if (c->model.attn.sites & (1 << b)) w += snprintf(buf + w, n - (size_t)w, "%s%c", w ? "," : "", names[b]);
        }
    }
}

void config_model_meta(const config* c, cJSON* meta) {
    int i;
    for (i = 0; i < N_OPTS; i++) {
        char key[64], val[64];
        if (!(k_opts[i].flags & O_MODEL)) continue;
        opt_value(&k_opts[i], c, val, sizeof val);
        meta_key(&k_opts[i], key, sizeof key);
        if (val[0]) cJSON_AddStringToObject(meta, key, val);
    }
}

int config_model_from_meta(config* c, const cJSON* meta, const char* path) {
    int i;
    for (i = 0; i < N_OPTS; i++) {
        char key[64];
        const cJSON* v;
        if (!(k_opts[i].flags & O_MODEL)) continue;
        meta_key(&k_opts[i], key, sizeof key);
        v = cJSON_GetObjectItemCaseSensitive(meta, key);
        if (!v) continue;
        if (!cJSON_IsString(v) || (k_opts[i].arg ? set_opt(&k_opts[i], v->valuestring, c) : (*(int*)((char*)c + k_opts[i].off) = (int)k_opts[i].lo, 0)))
            return fail("checkpoint %s: metadata \"%s\" is not a value of --%s", path, key, k_opts[i].name);
    }
    return 0;
}

int config_model_key(const char* key) {
    int i;
    for (i = 0; i < N_OPTS; i++) {
        char k[64];
        if (!(k_opts[i].flags & O_MODEL)) continue;
        meta_key(&k_opts[i], k, sizeof k);
        if (!strcmp(k, key)) return 1;
    }
    return 0;
}

/* the scheme names of nb_init_scheme */
static const struct { const char* name; nb_init_scheme scheme; } k_inits[] = {
    {"normal", NB_INIT_NORMAL}, {"depth_scaled", NB_INIT_DEPTH_SCALED},
    {"megatron", NB_INIT_MEGATRON}, {"mitchell", NB_INIT_MITCHELL}, {"mixln", NB_INIT_MIXLN},
    {"mixln_scaled", NB_INIT_MIXLN_SCALED}, {"gpt2", NB_INIT_GPT2}, {"deepnorm", NB_INIT_DEEPNORM},
    {"torchtitan", NB_INIT_TORCHTITAN}};
enum { N_INITS = sizeof k_inits / sizeof k_inits[0] };

int init_scheme(const char* name, nb_init_scheme* out) {
    int i;
    for (i = 0; i < N_INITS; i++)
        if (!strcmp(name, k_inits[i].name)) { *out = k_inits[i].scheme; return 0; }
    return fail("--init: unknown scheme \"%s\" (normal, depth_scaled, megatron, mitchell, mixln, "
                "mixln_scaled, gpt2, deepnorm, torchtitan)", name);
}

const char* init_scheme_name(nb_init_scheme s) {
    int i;
    if (s == NB_INIT_DEFAULT) s = NB_INIT_NORMAL;
    if (s == NB_INIT_NGPT) return "ngpt"; /* the preset's own (no --init takes it) */
    for (i = 0; i < N_INITS; i++)
        if (k_inits[i].scheme == s) return k_inits[i].name;
    return "?";
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
    if (c->model.schedule[0]) return NB_INIT_NORMAL;
    /* "--preset pre --norm layer --ffn gelu" asks for Pre-Norm's init; only the name gpt2 is
       GPT-2's */
    if (d->preset == NB_PRESET_PRE && (!strcmp(c->model.norm.kind, "layer") || !strcmp(c->model.ffn.kind, "gelu")))
        return NB_INIT_NORMAL;
    return nb_preset_init(d, std0); /* the library's table of the presets' codes */
}

int resolve_init(const config* c, const nb_stack_desc* d, nb_init_scheme* scheme, double* std0,
                 const char** why) {
    if (c->model.init[0]) {
        *std0 = 0;
        *why = "--init";
        return init_scheme(c->model.init, scheme);
    }
    *scheme = preset_init(c, d, std0);
    *why = c->model.schedule[0] ? "default for a custom schedule" : "the preset's paper code";
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
    int n_layers = c->model.n_layers;
    memset(&ctx, 0, sizeof ctx);
    memset(d, 0, sizeof *d);
    if (c->model.schedule[0]) {
        char buf[sizeof c->model.schedule], *tok, *save = NULL;
        int n = 0;
        snprintf(buf, sizeof buf, "%s", c->model.schedule);
        for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
            if (n >= MAX_LAYERS) return fail("--schedule: more than %d layers", MAX_LAYERS);
            if (layer_kind(tok, &layers[n])) return 1;
            n++;
        }
        if (n == 0) return fail("--schedule: empty");
        n_layers = n;
        d->layers = layers;
    } else if (nb_preset_from_name(&ctx, d, c->model.preset) != NB_OK) {
        return fail("%s", ctx.err);
    }
    d->n_layers = n_layers;
    d->d_model = c->model.d_model;
    d->n_heads = c->model.n_heads;
    d->n_kv_heads = c->model.n_kv_heads;
    d->ffn.d_ff = c->model.ffn.d_ff;
    d->attn.rope = c->model.attn.rope;
    d->run.check_finite = c->machine.check_finite;
    d->gemm.precision = c->machine.bf16 ? NB_PRECISION_BF16 : NB_PRECISION_FP32; /* auto: see model_init */
    d->gemm.bf16_weights = c->machine.bf16 && !c->machine.bf16_per_forward; /* the copy AdamW writes (model.w16) */
    d->gemm.bf16_outputs = c->machine.bf16 && c->machine.bf16_outputs;
    d->gemm.backend = (nb_backend)c->machine.backend;
    d->run.param_grads = NB_GRAD_OVERWRITE; /* one backward per step: no zero-grad pass */
    if (!strcmp(c->model.ffn.kind, "gelu")) d->ffn.type = NB_FFN_GELU_TANH;
    else if (d->ffn.type == NB_FFN_DEFAULT) d->ffn.type = NB_FFN_SWIGLU;
    if (!strcmp(c->model.norm.kind, "layer")) d->norm.type = NB_NORM_LAYER;
    if (!strcmp(c->model.norm.kind, "dyt")) d->norm.type = NB_NORM_DYT;
    if (!strcmp(c->model.norm.kind, "l2")) d->norm.type = NB_NORM_L2;
    if (!strcmp(c->model.norm.kind, "derf")) d->norm.type = NB_NORM_DERF;
    /* the porting options: 0 leaves the kind's norms and the preset's branches */
    d->attn.gate = (nb_attn_gate)c->model.attn.gate;
    d->attn.sink = (nb_attn_sink)c->model.attn.sink;
    d->attn.clip_qkv = (nb_real)c->model.attn.clip_qkv;
    d->attn.softcap = (nb_real)c->model.attn.softcap;
    d->norm.gain = c->model.norm.gain < 0 ? -1 : 0;
    d->norm.bias = c->model.norm.bias < 0 ? -1 : 0;
    d->norm.gain_offset = c->model.norm.gain_offset;
    d->residual.branch_scale = (nb_branch_scale)c->model.residual.branch_scale;
    /* the description's other fields: 0 (-1 for attn_bias) leaves the preset's */
    if (c->model.attn.bias >= 0) d->attn.bias = (unsigned)c->model.attn.bias;
    if (c->model.mixln_alpha != 0) d->mixln_alpha = c->model.mixln_alpha;
    if (c->model.norm.eps != 0) d->norm.eps = (nb_real)c->model.norm.eps;
    if (c->model.attn.rope_theta != 0) d->attn.rope_theta = (nb_real)c->model.attn.rope_theta;
    if (c->model.attn.sites) d->attn.sites = (unsigned)c->model.attn.sites;
    if (c->model.attn.site_width) d->attn.site_width = (nb_norm_width)c->model.attn.site_width;
    if (c->model.ffn.bias) d->ffn.bias = c->model.ffn.bias;
    if (c->model.norm.final) d->norm.final = c->model.norm.final;
    if (c->model.norm.embed) d->norm.embed = c->model.norm.embed;
    if (c->model.attn.memory) d->attn.memory = (nb_attn_memory)c->model.attn.memory;
    if (c->model.siamese.scale) d->siamese.paper_scale = c->model.siamese.scale - 1;
    if (c->model.siamese.fusion) d->siamese.paper_fusion = c->model.siamese.fusion - 1;
    if (c->model.siamese.no_fusion_norm) d->siamese.no_fusion_norm = 1;
    d->residual.value_residual = c->model.residual.value_residual; /* 0 off, 1 fixed, 2 learnable: the library's values */
    d->residual.value_embeds = c->model.residual.value_embeds;
    d->residual.dwa = c->model.residual.dwa;
    d->residual.dwa_dilation = c->model.residual.dwa_dilation;
    d->residual.dwa_period = c->model.residual.dwa_period;
    if (!d->residual.dwa && (d->residual.dwa_dilation || d->residual.dwa_period))
        return fail("--dwa-dilation and --dwa-period need --dwa");
    d->residual.attn_res = c->model.residual.attn_res;
    d->residual.attn_res_block = c->model.residual.attn_res_block;
    if (!d->residual.attn_res && d->residual.attn_res_block) return fail("--attn-res-block needs --attn-res");
    d->residual.unet_skips = c->model.residual.unet_skips;
    d->residual.reinject_x0 = c->model.residual.reinject_x0;
    if (c->model.hyper.kind) d->hyper.kind = (nb_hyper)c->model.hyper.kind; /* the choices' order from NB_HYPER_NONE; else
                                                    the preset's (nb_preset_from_name wrote it) */
    d->hyper.streams = c->model.hyper.streams;
    if (c->model.hyper.form) d->hyper.static_maps = c->model.hyper.form - 1;
    d->hyper.sinkhorn = c->model.hyper.sinkhorn;
    /* the library refuses these by their field names: said here by the flags' */
    if (d->hyper.kind <= NB_HYPER_NONE && (c->model.hyper.streams || c->model.hyper.form || c->model.hyper.sinkhorn))
        return fail("--hyper-streams, --hyper-form and --hyper-sinkhorn need hyper-connections "
                    "(--hyper mhc|hc|ihc|mhc-lite, or --preset mhc|hc|ihc)");
    if (d->hyper.kind != NB_HYPER_MHC && c->model.hyper.sinkhorn)
        return fail("--hyper-sinkhorn applies to mHC only (--hyper mhc or --preset mhc)");
    d->norm.dyt_alpha = c->model.norm.dyt_alpha; /* 0: the library's defaults */
    d->norm.dyt_alpha_attn = c->model.norm.dyt_alpha_attn;
    /* DyT's LLM rule (the library's default) comes from its 7B-70B models; below d = 1024 its
       generic default 0.5 trains where the rule's alpha 1 collapsed (d = 64, examples/train/README.md). Derf
       keeps the library's default, its code's 1 (the dyt preset with --norm derf too) */
    if ((d->norm.type == NB_NORM_DYT || (d->preset == NB_PRESET_DYT && d->norm.type != NB_NORM_DERF)) &&
        d->d_model < 1024) {
        if (d->norm.dyt_alpha == 0) d->norm.dyt_alpha = 0.5;
        if (d->norm.dyt_alpha_attn == 0) d->norm.dyt_alpha_attn = 0.5;
    }
    d->residual.layerscale_init = c->model.residual.layerscale_init;
    if (d->preset == NB_PRESET_NGPT && ngpt_refusals(c)) return 1;
    d->residual.depth_alpha = c->model.residual.completep; /* 0 off; the library checks the range and the preset */
    d->residual.depth_base = c->model.residual.depth_base;
    return c->model.mup.on ? mup_desc(c, d) : 0;
}

