/* nbimport: load a checkpoint written in another codebase's layout into a normblocks stack and
   run it: the stack's forward on an input, written to a file (to compare with that codebase's
   output); or export the library's tensors (a stack, or a checkpoint of examples/train with its
   embedding and head) in another codebase's layout. The names and layouts come from the
   library's name maps (nb_stack_tensor_parts). `nbimport --help` prints HELP below. */
#define _POSIX_C_SOURCE 200809L
#define _XOPEN_SOURCE 700 /* realpath, fsync: safetensors.h's writers */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#define ST_IMPLEMENTATION
#include "safetensors.h"
#define NORMBLOCKS_IMPLEMENTATION
#include "normblocks.h"
#include "hf_config.h"
#include "tuned_env.h"

#define USAGE                                                                                     \
    "usage: nbimport STYLE MODEL INPUT.safetensors OUT.safetensors\n"                              \
    "       nbimport --export STYLE MODEL OUT\n"                                                   \
    "       nbimport --help\n"
static const char* const help =
    USAGE
    "Runs MODEL's stack on INPUT's tensor \"E\" (B, T, d: the embedded input) and writes its\n"
    "output \"out\" (B, T, d, F32) to OUT; or (--export) writes MODEL's tensors in STYLE's names.\n"
    "With token ids instead (INPUT's tensor \"ids\", B x T, I64 or I32; STYLE hf-llama or hf-gpt2)\n"
    "it runs the model as its model type defines it, from ids to logits: E = the embedding's rows\n"
    "(GPT-2: plus wpe's row of each position), the stack with its final norm, then the head\n"
    "(lm_head.weight, or the embedding where the model ties them: no lm_head), and writes \"out\"\n"
    "and \"logits\" (B, T, vocab, F32): what nbdiff holds against PyTorch's logits.\n"
    "  STYLE  hf-llama     Hugging Face Llama, Qwen2/Qwen3, OLMo-2 (and, read only, the Mix-LN and\n"
    "                      LayerNorm-Scaling codes' checkpoints): separate q/k/v, up/gate projections\n"
    "         hf-gpt2      Hugging Face GPT-2: Conv1D weights stored transposed\n"
    "         gpt2-linear  GPT-2 in nn.Linear layout (llm.c, nanoGPT)\n"
    "         normblocks   the library's own names (as examples/train saves them)\n"
    "         ngpt         NVIDIA/ngpt's model.py (query, key, value, att_c_proj, c_fc, mlp_c_proj,\n"
    "                      sqk, suv, attn_alpha, mlp_alpha); its RoPE is not a rotation (its\n"
    "                      issue #10): the library's standard RoPE runs instead\n"
    "  MODEL  a safetensors file, or a Hugging Face directory (config.json with model.safetensors\n"
    "         or the shards of model.safetensors.index.json). The stack comes from config.json\n"
    "         (in the directory, or beside a file whose metadata has no \"preset\"): model_type\n"
    "         llama, qwen2, qwen3, olmo2 or gpt2, every key honoured, checked to hold the only\n"
    "         value the library computes, or known not to change the stack (token ids, sizes,\n"
    "         dropout, dtype); any other key is refused by name. Or from MODEL's __metadata__\n"
    "         (strings): preset (any name nb_preset_from_name takes), n_layers, d_model, n_heads,\n"
    "         n_kv_heads, d_ff, rope (0/1), optionally norm (rms|layer|dyt|l2), ffn (swiglu|gelu_tanh|\n"
    "         gelu), mixln_alpha (a finite number), eps, rope_theta, attn_bias (0-3: 1 the Q|K|V projection's bias,\n"
    "         2 the output's), clip_qkv, attn_softcap, dwa (on), dwa_dilation, dwa_period, attn_res (on), attn_res_block, unet_skips (on), reinject_x0 (on), value_residual (off|fixed|learn), hyper (none|mhc|hc|ihc|mhc-lite),\n"
    "         hyper_streams (1-8), hyper_form (dynamic|static), hyper_sinkhorn (1-100); also\n"
    "         \"format\", \"producer\" and the training settings examples/train writes; any other\n"
    "         key, or a value not listed, is refused.\n"
    "         Tensors F32, F64, F16 or BF16, finite; every tensor of the stack must be there with\n"
    "         its shape, and every tensor there must have a place, except the embedding and head,\n"
    "         examples/train's optimizer moments, and Hugging Face's non-weight buffers (GPT-2's\n"
    "         attn.bias, attn.masked_bias; rotary_emb.inv_freq).\n"
    "  OUT    checked before any work: an existing regular file or a new one (never a FIFO, device\n"
    "         or directory), not MODEL or INPUT. --export: a file, or a directory (existing, or\n"
    "         a path ending in /) that receives model.safetensors and config.json, the embedding and\n"
    "         head included, loadable by the Hugging Face class that computes the stack\n"
    "         (hf-llama, hf-gpt2).\n";
/* (a second string: C99 compilers need to take string literals of up to 4095 characters) */
static const char* const help_export =
    "--export writes STYLE only for a stack STYLE's own model code computes, to a file as to a\n"
    "directory (that code reads none of MODEL's metadata), and refuses any other, naming the first\n"
    "field that differs:\n"
    "  hf-llama     RMSNorm, SwiGLU without biases, RoPE, one residual stream, a final norm and no\n"
    "               embedding norm; Pre-LN layers (llama; qwen2: Q, K, V biases, attn_bias 1;\n"
    "               qwen3: Q, K norms per head) or norms after the sublayers with Q, K norms over\n"
    "               the whole projections (olmo2); attention biases on all of Q, K, V, O or none\n"
    "               (attn_bias 3 or 0) but in qwen2; GQA allowed\n"
    "  hf-gpt2      Pre-LN, LayerNorm, GELU tanh, every projection's bias, no RoPE, MHA, a final\n"
    "               norm and no other\n"
    "  gpt2-linear  as hf-gpt2 for llm.c's train_gpt2.py GPT: d_ff 4 d_model, eps 1e-5, the head\n"
    "               equal to the embedding (it ties them); nanoGPT's model.py reads the same file\n"
    "               but its MLP is the exact GELU (nn.GELU()): another function\n"
    "  ngpt         the ngpt preset as it comes (d_ff 4 d_model, MHA), for model.py with use_nGPT 1,\n"
    "               bias False, base_scale 1/sqrt(n_embd); its rotary transform is not a rotation\n"
    "               (its issue #10): it computes this stack with the standard RoPE (rotate-half,\n"
    "               base 10000) in its place\n"
    "  normblocks   every stack\n"
    "None has the value residual, hyper-connections, SiameseNorm's streams, Post-LN, DeepNorm,\n"
    "HybridNorm's residual, ReZero, SkipInit, LayerScale, LayerNorm Scaling, CompleteP's\n"
    "multipliers, nGPT's scales (but ngpt), another softmax scale, non-causal or gated attention,\n"
    "DyT or Derf, an input scale, Gemma's 1 + w gains, or norms without their weight or bias.\n"
    "Nor examples/train's logit softcap or constant embedding scale. By preset, of 4 layers\n"
    "(Mix-LN and LNS of fewer can be Pre-LN), with each layout's norm, ffn, rope and attn_bias\n"
    "(hf-llama rms, swiglu, 1, 0 or 1; hf-gpt2, gpt2-linear layer, gelu, 0, 3; ngpt l2, swiglu,\n"
    "1, 0) but a preset's own norm kind: hf-llama's model_type(s), yes, or no and the field (the\n"
    "name gpt2 is pre with LayerNorm, GELU and every bias):\n";
static const char* const help_tail =
    "Exit status: 0 written; 1 refused or failed, with a message naming the file, tensor or key.\n";

static int fail(const char* fmt, ...) {
    va_list ap;
    fprintf(stderr, "nbimport: ");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n");
    return 1;
}

/* the reader's message, as this tool's */
static int st_fail(const st_file* f) { return fail("%s", f->err); }

/* 1 for a value that is not finite or beyond float's range (nb_real is float unless NB_DOUBLE,
   and the files written are F32: the conversion of such a value is undefined) */
static int bad_value(double v) { return !isfinite(v) || fabs(v) > 3.4028234663852886e38; }

/* ---- MODEL: one file, or a Hugging Face directory's shards, and where its stack comes from ---- */

#define MAX_SHARDS 256
typedef struct model_in {
    st_file f[MAX_SHARDS];
    unsigned char* used[MAX_SHARDS]; /* per tensor of each file: loaded into the stack */
    int n;
    char config[4096];               /* the config.json the stack comes from; "" = metadata */
    char paths[MAX_SHARDS][4096];
} model_in;

/* Every metadata key is one nbimport reads, or one known not to change the stack's forward
   (the format's, and examples/train's training settings); any other is refused by name. */
static const char* const known_keys[] = {
    "preset", "n_layers", "d_model", "n_heads", "n_kv_heads", "d_ff", "rope", "norm", "ffn", "mixln_alpha",
    "attn_bias", "eps", "rope_theta", "value_residual", "hyper", "hyper_streams", "hyper_form",
    "hyper_sinkhorn", "format", "producer", "schedule", "step", "adam_step", "vocab_size", "embed_scale", "steps",
    "lr", "warmup", "min_lr", "wd", "wd_norms", "beta1", "beta2", "adam_eps", "clip", "seed", "batch", "seq",
    "init", "data", "data_bytes", "data_hash", "eval_batches", "eval_problems", "logit_softcap", "attn_gate",
    "attn_sink", "clip_qkv", "attn_softcap", "dwa", "dwa_dilation", "dwa_period", "attn_res", "attn_res_block", "unet_skips", "reinject_x0", "norm_gain", "norm_bias", "gain_offset", "branch_scale", "qk_clip", "precision", "sites",
    "site_width", "ffn_bias", "final_norm", "embed_norm", "siamese_scale", "siamese_fusion", "siamese_no_fusion_norm", "completep",
    "depth_base", "width_base", "mup", "mup_base_head_dim", "mup_embed_mult", "mup_output_mult", "value_embeds",
    NULL};

static int is_dir(const char* path) {
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

static int is_file(const char* path) {
    struct stat sb;
    return stat(path, &sb) == 0;
}

static int add_file(model_in* M, const char* path) {
    const char* sched;
    int i;
    for (i = 0; i < M->n; i++)
        if (!strcmp(M->paths[i], path)) return 0; /* a shard the index names twice */
    if (M->n == MAX_SHARDS) return fail("more than %d weight files", MAX_SHARDS);
    snprintf(M->paths[M->n], sizeof M->paths[0], "%s", path);
    if (st_open(&M->f[M->n], M->paths[M->n]) || st_meta_known(&M->f[M->n], known_keys, "nbimport"))
        return st_fail(&M->f[M->n++]);
    sched = st_meta(&M->f[M->n], "schedule");
    M->n++;
    if (sched && *sched) return fail("MODEL metadata \"schedule\" is \"%s\": a per-layer placement nbimport cannot run", sched);
    if (!(M->used[M->n - 1] = (unsigned char*)calloc((size_t)M->f[M->n - 1].n + 1, 1))) return fail("out of memory");
    return 0;
}

/* a hub directory's shards: the distinct files of model.safetensors.index.json's weight_map */
static int add_shards(model_in* M, const char* dir, const char* index) {
    unsigned char* text;
    size_t n;
    char err[512], path[4096];
    cJSON* root;
    const cJSON *map, *e;
    int rc = 0;
    if (st_read_file(index, &text, &n, err, sizeof err, NULL, NULL)) return fail("%s", err);
    root = cJSON_ParseWithLength((const char*)text, n);
    free(text);
    map = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
    if (!cJSON_IsObject(map)) rc = fail("%s: no \"weight_map\" object", index);
    cJSON_ArrayForEach(e, map) {
        if (rc) break;
        if (!cJSON_IsString(e) || strchr(e->valuestring, '/') || !strcmp(e->valuestring, ".."))
            rc = fail("%s: a weight_map file that is not a file name of the directory", index);
        else {
            snprintf(path, sizeof path, "%s/%s", dir, e->valuestring);
            rc = add_file(M, path);
        }
    }
    cJSON_Delete(root);
    return rc;
}

/* MODEL: a file (config.json beside it when its metadata has no preset), or a directory */
static int open_model(model_in* M, const char* path) {
    char p[4096];
    memset(M, 0, sizeof *M);
    if (is_dir(path)) {
        snprintf(M->config, sizeof M->config, "%s/config.json", path);
        if (!is_file(M->config)) return fail("%s: a directory without config.json", path);
        snprintf(p, sizeof p, "%s/model.safetensors", path);
        if (is_file(p)) return add_file(M, p);
        snprintf(p, sizeof p, "%s/model.safetensors.index.json", path);
        if (is_file(p)) return add_shards(M, path, p);
        return fail("%s: neither model.safetensors nor model.safetensors.index.json", path);
    }
    if (add_file(M, path)) return 1;
    if (!st_meta(&M->f[0], "preset")) {
        const char* slash = strrchr(path, '/');
        snprintf(M->config, sizeof M->config, "%.*sconfig.json", slash ? (int)(slash - path + 1) : 0, path);
        if (!is_file(M->config)) M->config[0] = 0; /* and the metadata is missing its keys: said below */
    }
    return 0;
}

static void close_model(model_in* M) {
    int i;
    for (i = 0; i < M->n; i++) {
        st_close(&M->f[i]);
        free(M->used[i]);
    }
}

static size_t model_values(const model_in* M) {
    size_t v = 0;
    int i, k;
    for (i = 0; i < M->n; i++)
        for (k = 0; k < M->f[i].n; k++) v += M->f[i].t[k].count;
    return v;
}

/* MODEL's tensor of a name, also without or with the "transformer." prefix (the hub's GPT2Model
   files are saved without; examples/train's checkpoints name the stack transformer.blocks...) */
static const st_tensor* find_part(model_in* M, const char* name, int* file) {
    char with[256];
    int i;
    snprintf(with, sizeof with, "transformer.%s", name);
    for (i = 0; i < M->n; i++) {
        const st_tensor* t = st_find(&M->f[i], name);
        if (!t && !strncmp(name, "transformer.", 12)) t = st_find(&M->f[i], name + 12);
        if (!t) t = st_find(&M->f[i], with);
        if (t) {
            *file = i;
            return t;
        }
    }
    return NULL;
}

/* 1 with a message when out (to be written) is the same file as one read */
static int same_file(const char* out, const model_in* M, const st_file* in) {
    struct stat sb;
    char err[512];
    int i;
    if (st_check_output(out, err, sizeof err)) return fail("%s", err);
    if (stat(out, &sb)) return 0;
    for (i = 0; i < M->n + (in != NULL); i++) {
        const st_file* f = i < M->n ? &M->f[i] : in;
        if (sb.st_dev == f->dev && sb.st_ino == f->ino) {
            fprintf(stderr, "nbimport: OUT %s is the same file as %s: refused (it would be overwritten)\n", out,
                    f->path);
            return 1;
        }
    }
    if (M->config[0]) { /* the model directory's config.json is an input too */
        struct stat sc;
        if (stat(M->config, &sc) == 0 && sb.st_dev == sc.st_dev && sb.st_ino == sc.st_ino) {
            fprintf(stderr, "nbimport: OUT %s is the same file as %s: refused (it would be overwritten)\n", out,
                    M->config);
            return 1;
        }
    }
    return 0;
}

/* ---- the stack ---- */

static int meta_int(const st_file* f, const char* key, int max, int* out) {
    const char* v = st_meta(f, key);
    const char* p;
    long x = 0;
    if (!v) return fail("MODEL metadata has no \"%s\" (and no config.json beside it)", key);
    for (p = v; *p >= '0' && *p <= '9' && x <= max; p++) x = x * 10 + (*p - '0');
    if (p == v || *p || x > max) {
        fprintf(stderr, "nbimport: MODEL metadata \"%s\" is \"%s\", not an integer from 0 to %d\n", key, v, max);
        return 1;
    }
    *out = (int)x;
    return 0;
}

static int bad_meta(const char* key, const char* v, const char* known) {
    fprintf(stderr, "nbimport: MODEL metadata \"%s\" is \"%s\", not %s\n", key, v, known);
    return 1;
}

/* examples/train's --attn-gate, --attn-sink, --norm-gain, --norm-bias, --gain-offset and --branch-scale
   (written only when given; qk_clip is a training setting: the stack is the same) */
static int porting_of_meta(const st_file* M, nb_stack_desc* d) {
    const char* v;
    if ((v = st_meta(M, "attn_gate")) != NULL) {
        if (!strcmp(v, "headwise")) d->attn.gate = NB_GATE_HEADWISE;
        else if (!strcmp(v, "elementwise")) d->attn.gate = NB_GATE_ELEMENTWISE;
        else return bad_meta("attn_gate", v, "headwise or elementwise");
    }
    if ((v = st_meta(M, "attn_sink")) != NULL && strcmp(v, "none")) {
        if (!strcmp(v, "learned")) d->attn.sink = NB_SINK_LEARNED;
        else if (!strcmp(v, "off-by-one")) d->attn.sink = NB_SINK_OFF_BY_ONE;
        else return bad_meta("attn_sink", v, "none, learned or off-by-one");
    }
    if ((v = st_meta(M, "norm_gain")) != NULL && strcmp(v, "on")) {
        if (strcmp(v, "off")) return bad_meta("norm_gain", v, "on or off");
        d->norm.gain = -1;
    }
    if ((v = st_meta(M, "norm_bias")) != NULL && strcmp(v, "on")) {
        if (strcmp(v, "off")) return bad_meta("norm_bias", v, "on or off");
        d->norm.bias = -1;
    }
    if ((v = st_meta(M, "dwa")) != NULL) { /* examples/train's --dwa (DenseFormer) */
        if (strcmp(v, "on")) return bad_meta("dwa", v, "on");
        d->residual.dwa = 1;
    }
    if (st_meta(M, "dwa_period") && meta_int(M, "dwa_period", 1 << 20, &d->residual.dwa_period))
        return 1;
    if (st_meta(M, "dwa_dilation") && meta_int(M, "dwa_dilation", 1 << 20, &d->residual.dwa_dilation))
        return 1;
    if ((v = st_meta(M, "attn_res")) != NULL) { /* examples/train's --attn-res */
        if (strcmp(v, "on")) return bad_meta("attn_res", v, "on");
        d->residual.attn_res = 1;
    }
    if ((v = st_meta(M, "unet_skips")) != NULL) { /* examples/train's --unet-skips */
        if (strcmp(v, "on")) return bad_meta("unet_skips", v, "on");
        d->residual.unet_skips = 1;
    }
    if ((v = st_meta(M, "reinject_x0")) != NULL) { /* examples/train's --reinject-x0 */
        if (strcmp(v, "on")) return bad_meta("reinject_x0", v, "on");
        d->residual.reinject_x0 = 1;
    }
    if (st_meta(M, "attn_res_block") &&
        meta_int(M, "attn_res_block", 1 << 20, &d->residual.attn_res_block))
        return 1;
    if ((v = st_meta(M, "gain_offset")) != NULL) {
        if (strcmp(v, "on")) return bad_meta("gain_offset", v, "on");
        d->norm.gain_offset = 1;
    }
    if ((v = st_meta(M, "branch_scale")) != NULL) {
        if (!strcmp(v, "scalar")) d->residual.branch_scale = NB_BRANCH_SCALE_SCALAR;
        else if (!strcmp(v, "channel")) d->residual.branch_scale = NB_BRANCH_SCALE_CHANNEL;
        else if (!strcmp(v, "sublayer")) d->residual.branch_scale = NB_BRANCH_SCALE_SUBLAYER;
        else return bad_meta("branch_scale", v, "scalar, channel or sublayer");
    }
    return 0;
}

/* an on|off key of examples/train into *out (1 on, -1 off; untouched when absent) */
static int onoff_meta(const st_file* M, const char* key, int* out) {
    const char* v = st_meta(M, key);
    if (!v) return 0;
    if (strcmp(v, "on") && strcmp(v, "off")) return bad_meta(key, v, "on or off");
    *out = strcmp(v, "on") ? -1 : 1;
    return 0;
}

/* examples/train's stack keys written when set away from the preset's (its O_MODEL options):
   the attention sites and their width, the FFN's biases, the final and embedding norms,
   SiameseNorm's forms, CompleteP's depth rule, muP's attention scale (width_base changes only
   the init, the learning rates and the logits, muP's embedding and output multipliers the model
   around the stack: not the stack) */
static int train_keys_of_meta(const st_file* M, nb_stack_desc* d) {
    static const char* const scales[3] = {"code", "paper", "one"};
    const char* v;
    int k;
    if (st_meta(M, "value_embeds")) /* examples/train's --value-embeds */
        return fail("MODEL's metadata has \"value_embeds\" %s: its layers mix the trainer's tables "
                    "(transformer.value_embeds.<t>.weight) at each token into their values; a stack "
                    "alone, run on embeddings, cannot (nb_stack_set_value_embeds takes the rows)",
                    st_meta(M, "value_embeds"));
    if ((v = st_meta(M, "sites")) != NULL) {
        const char* p = v;
        unsigned sites = 0;
        if (!strcmp(v, "none")) sites = NB_SITES_NONE;
        else
            for (; *p; p += p[1] == ',' ? 2 : 1) {
                const char* at = strchr("qkvc", *p);
                if (!*p || !at || (p[1] && p[1] != ',')) return bad_meta("sites", v, "none or a comma list of q, k, v, c");
                sites |= 1u << (at - "qkvc");
            }
        if (!sites) return bad_meta("sites", v, "none or a comma list of q, k, v, c");
        d->attn.sites = sites;
    }
    if ((v = st_meta(M, "site_width")) != NULL) {
        if (!strcmp(v, "head")) d->attn.site_width = NB_WIDTH_PER_HEAD;
        else if (!strcmp(v, "full")) d->attn.site_width = NB_WIDTH_FULL;
        else return bad_meta("site_width", v, "head or full");
    }
    if (onoff_meta(M, "ffn_bias", &d->ffn.bias) || onoff_meta(M, "final_norm", &d->norm.final) ||
        onoff_meta(M, "embed_norm", &d->norm.embed))
        return 1;
    if ((v = st_meta(M, "siamese_scale")) != NULL) {
        for (k = 0; k < 3 && strcmp(v, scales[k]); k++) {}
        if (k == 3) return bad_meta("siamese_scale", v, "code, paper or one");
        d->siamese.paper_scale = k;
    }
    if ((v = st_meta(M, "siamese_fusion")) != NULL) {
        if (strcmp(v, "code") && strcmp(v, "paper")) return bad_meta("siamese_fusion", v, "code or paper");
        d->siamese.paper_fusion = !strcmp(v, "paper");
    }
    if ((v = st_meta(M, "siamese_no_fusion_norm")) != NULL) {
        if (strcmp(v, "on")) return bad_meta("siamese_no_fusion_norm", v, "on");
        d->siamese.no_fusion_norm = 1;
    }
    if ((v = st_meta(M, "completep")) != NULL) {
        char* end;
        errno = 0;
        d->residual.depth_alpha = strtod(v, &end);
        if (!*v || !strchr("+.0123456789", *v) || *end || errno == ERANGE || !(d->residual.depth_alpha > 0) ||
            d->residual.depth_alpha > 2)
            return bad_meta("completep", v, "a number in (0, 2]");
    }
    if (st_meta(M, "depth_base") && meta_int(M, "depth_base", 1 << 16, &d->residual.depth_base)) return 1;
    if ((v = st_meta(M, "mup")) != NULL) { /* the trainer's mup.c: sqrt(h_base) / d_h, or 1 / d_h */
        int h_base = 0;
        if (strcmp(v, "on")) return bad_meta("mup", v, "on");
        if (st_meta(M, "mup_base_head_dim") && meta_int(M, "mup_base_head_dim", 1 << 16, &h_base)) return 1;
        d->attn.softmax_scale = (nb_real)((h_base ? sqrt((double)h_base) : 1) / ((double)d->d_model / d->n_heads));
    }
    return 0;
}

/* the description in file M's metadata */
static int desc_of_meta(const st_file* M, nb_stack_desc* d) {
    nb_ctx ctx;
    const char *preset = st_meta(M, "preset"), *v;
    memset(&ctx, 0, sizeof ctx);
    memset(d, 0, sizeof *d);
    if (!preset) return fail("MODEL metadata has no \"%s\" (and no config.json beside it)", "preset");
    if (nb_preset_from_name(&ctx, d, preset)) return fail("%s", ctx.err);
    if (meta_int(M, "n_layers", 1 << 24, &d->n_layers) || meta_int(M, "d_model", 1 << 24, &d->d_model) ||
        meta_int(M, "n_heads", 1 << 24, &d->n_heads) || meta_int(M, "n_kv_heads", 1 << 24, &d->n_kv_heads) ||
        meta_int(M, "d_ff", 1 << 24, &d->ffn.d_ff) || meta_int(M, "rope", 1, &d->attn.rope))
        return 1;
    /* the optional keys: a value not known is an error, never ignored */
    if ((v = st_meta(M, "norm")) != NULL) {
        if (!strcmp(v, "rms")) d->norm.type = NB_NORM_RMS;
        else if (!strcmp(v, "layer")) d->norm.type = NB_NORM_LAYER;
        else if (!strcmp(v, "dyt")) d->norm.type = NB_NORM_DYT;
        else if (!strcmp(v, "l2")) d->norm.type = NB_NORM_L2;
        else if (!strcmp(v, "derf")) d->norm.type = NB_NORM_DERF;
        else return bad_meta("norm", v, "rms, layer, dyt, derf or l2");
    }
    if ((v = st_meta(M, "ffn")) != NULL) {
        if (!strcmp(v, "swiglu")) d->ffn.type = NB_FFN_SWIGLU;
        else if (!strcmp(v, "gelu_tanh") || !strcmp(v, "gelu")) d->ffn.type = NB_FFN_GELU_TANH; /* gelu: examples/train's name */
        else return bad_meta("ffn", v, "swiglu, gelu_tanh or gelu (= gelu_tanh, as examples/train writes it)");
    }
    if ((v = st_meta(M, "mixln_alpha")) != NULL) {
        char* end;
        errno = 0;
        d->mixln_alpha = strtod(v, &end);
        if (!*v || !strchr("+-.0123456789", *v) || *end || errno == ERANGE || !isfinite(d->mixln_alpha))
            return bad_meta("mixln_alpha", v, "a finite number");
    }
    {   /* examples/train writes them when set away from the preset's; rope_theta is above 1 */
        static const char* const keys[4] = {"eps", "rope_theta", "clip_qkv", "attn_softcap"};
        nb_real* const dest[4] = {&d->norm.eps, &d->attn.rope_theta, &d->attn.clip_qkv, &d->attn.softcap};
        int k;
        for (k = 0; k < 4; k++) {
            const double above = k == 1 ? 1 : 0;
            char* end;
            double x;
            if (!(v = st_meta(M, keys[k]))) continue;
            errno = 0;
            x = strtod(v, &end);
            if (!*v || !strchr("+.0123456789", *v) || *end || errno == ERANGE || !isfinite(x) || !(x > above))
                return bad_meta(keys[k], v, above ? "a finite number above 1" : "a finite number above 0");
            *dest[k] = (nb_real)x;
        }
    }
    if ((v = st_meta(M, "attn_bias")) != NULL) {
        if (strlen(v) != 1 || *v < '0' || *v > '3') return bad_meta("attn_bias", v, "0, 1, 2 or 3");
        d->attn.bias = (unsigned)(*v - '0');
    }
    if ((v = st_meta(M, "value_residual")) != NULL) { /* examples/train's --value-residual */
        if (!strcmp(v, "off")) d->residual.value_residual = 0;
        else if (!strcmp(v, "fixed")) d->residual.value_residual = 1;
        else if (!strcmp(v, "learn")) d->residual.value_residual = 2;
        else return bad_meta("value_residual", v, "off, fixed or learn");
    }
    if ((v = st_meta(M, "hyper")) != NULL) { /* examples/train's --hyper and its companions */
        if (!strcmp(v, "none")) d->hyper.kind = NB_HYPER_NONE;
        else if (!strcmp(v, "mhc")) d->hyper.kind = NB_HYPER_MHC;
        else if (!strcmp(v, "hc")) d->hyper.kind = NB_HYPER_HC;
        else if (!strcmp(v, "ihc")) d->hyper.kind = NB_HYPER_IDENTITY;
        else if (!strcmp(v, "mhc-lite")) d->hyper.kind = NB_HYPER_MHC_LITE;
        else return bad_meta("hyper", v, "none, mhc, hc, ihc or mhc-lite");
    }
    if (st_meta(M, "hyper_streams") && meta_int(M, "hyper_streams", NB_HYPER_MAX_STREAMS, &d->hyper.streams))
        return 1;
    if (st_meta(M, "hyper_sinkhorn") && meta_int(M, "hyper_sinkhorn", 100, &d->hyper.sinkhorn)) return 1;
    if ((v = st_meta(M, "hyper_form")) != NULL) {
        if (!strcmp(v, "dynamic")) d->hyper.static_maps = 0;
        else if (!strcmp(v, "static")) d->hyper.static_maps = 1;
        else return bad_meta("hyper_form", v, "dynamic or static");
    }
    if (porting_of_meta(M, d) || train_keys_of_meta(M, d)) return 1;
    if ((v = st_meta(M, "embed_scale")) != NULL && strcmp(v, "0") && strcmp(v, "2")) /* 2: constant (extras_of) */
        return fail("MODEL has examples/train's learnable embedding scale (embed_scale %s): no layout here holds it", v);
    return 0;
}

/* The stack MODEL describes (its config.json, or its metadata), for batches of B x T; refused
   when the style the config's family is stored in is not STYLE. */
static int stack_of(model_in* M, nb_name_style style, int B, int T, nb_stack* s) {
    nb_ctx ctx;
    nb_stack_desc d;
    size_t values;
    memset(&ctx, 0, sizeof ctx);
    if (M->config[0]) {
        const hf_family* fam = NULL;
        char err[1100];
        if (hf_config_read(M->config, &d, &fam, err, sizeof err)) return fail("%s", err);
        if (fam->style != style) {
            fprintf(stderr, "nbimport: %s is model_type %s, stored in the %s layout: run with STYLE %s\n", M->config,
                    fam->model_type, fam->style == NB_NAMES_HF_GPT2 ? "hf-gpt2" : "hf-llama",
                    fam->style == NB_NAMES_HF_GPT2 ? "hf-gpt2" : "hf-llama");
            return 1;
        }
    } else if (desc_of_meta(&M->f[0], &d)) return 1;
    d.run.check_finite = 1; /* a forward that overflows fails naming the layer, no Inf/NaN output */
    {   /* bound the work by what the files hold before the stack is built: every layer has at
           least Q and O (d x d each) and two FFN matrices (d x f, f >= d by default) */
        const double dm = d.d_model, f = d.ffn.d_ff > 0 ? d.ffn.d_ff : d.d_model;
        const double least = (double)d.n_layers * (2 * dm * dm + 2 * dm * f);
        values = model_values(M);
        if (least > (double)values) {
            fprintf(stderr, "nbimport: MODEL describes %d layers of d_model %d (at least %.3g parameters); its files "
                    "hold %zu values\n", d.n_layers, d.d_model, least, values);
            return 1;
        }
    }
    if (nb_stack_init(&ctx, s, &d, B, T)) return fail("%s", ctx.err);
    /* every parameter comes from MODEL: a stack larger than its values is refused before its
       buffers are allocated (metadata of a huge model on a small file) */
    if (s->n_params > values) {
        fprintf(stderr, "nbimport: MODEL describes a stack of %zu parameters; its files hold %zu values\n",
                s->n_params, values);
        return 1;
    }
    return 0;
}

/* ---- loading ---- */

static const char* style_name(nb_name_style style) {
    return style == NB_NAMES_HF_LLAMA ? "hf-llama" : style == NB_NAMES_HF_GPT2 ? "hf-gpt2"
         : style == NB_NAMES_GPT2_LINEAR ? "gpt2-linear" : style == NB_NAMES_NGPT ? "ngpt" : "normblocks";
}

/* The 2-D (rows, cols) shape of a tensor (a 1-D tensor is (n, 1)). */
static int shape2(const st_tensor* t, int* rows, int* cols) {
    const size_t r = t->ndim >= 1 ? t->shape[0] : 0, c = t->ndim == 2 ? t->shape[1] : 1;
    if (t->ndim < 1 || t->ndim > 2 || r > 1 << 30 || c > 1 << 30) return 1;
    *rows = (int)r;
    *cols = (int)c;
    return 0;
}

static int ends_with(const char* s, const char* suffix) {
    const size_t n = strlen(s), m = strlen(suffix);
    return n >= m && !strcmp(s + n - m, suffix);
}

/* Tensors outside the stack: the embeddings and the head, examples/train's optimizer moments,
   and the buffers Hugging Face files may carry (GPT-2's causal masks "attn.bias" /
   "attn.masked_bias", older Llama files' "rotary_emb.inv_freq"), which are not weights. */
static const char* const k_embed[4] = {"model.embed_tokens.weight", "transformer.wte.weight", "wte.weight", NULL};
static int ignorable(const char* name) {
    static const char* const io[5] = {"lm_head.weight", "transformer.wpe.weight", "wpe.weight", "sz", NULL};
    int i;
    for (i = 0; k_embed[i]; i++)
        if (!strcmp(name, k_embed[i])) return 1;
    for (i = 0; io[i]; i++)
        if (!strcmp(name, io[i])) return 1;
    return !strncmp(name, "optimizer.", 10) || ends_with(name, ".attn.bias") || ends_with(name, ".attn.masked_bias") ||
           ends_with(name, ".rotary_emb.inv_freq");
}

static int load(const nb_stack* s, nb_name_style style, model_in* M, nb_real* params) {
    int t, k, i, j;
    nb_tensor_part parts[3];
    for (t = 0; t < s->n_tensors; t++) /* first: a tensor STYLE has no name for (a hyper-connection's
                                          maps), refused by its name before any other message */
        if (nb_stack_tensor_parts(s, t, style, parts) <= 0)
            return fail("the stack's %s has no name in the %s layout%s", s->tensors[t].name, style_name(style),
                        s->desc.hyper.kind > NB_HYPER_NONE ? " (hyper: no Hugging Face or GPT-2 model has hyper-connections)" : "");
    for (t = 0; t < s->n_tensors; t++) {
        const nb_tensor_info* ti = &s->tensors[t];
        const int n = nb_stack_tensor_parts(s, t, style, parts);
        for (k = 0; k < n; k++) {
            int file = 0, rows, cols, fr, fc, r, c;
            const st_tensor* pt = find_part(M, parts[k].name, &file);
            if (!pt) return fail("MODEL has no %s", parts[k].name);
            if (st_check_finite(&M->f[file], pt)) return st_fail(&M->f[file]);
            if (shape2(pt, &rows, &cols))
                return fail("%s: not a 1-D or 2-D tensor (of dimensions up to 2^30)", parts[k].name);
            fr = rows; fc = cols; /* as the file stores it */
            if (parts[k].transposed) { const int x = rows; rows = cols; cols = x; }
            if (ti->ndim == 2 && rows != cols && cols == parts[k].rows && rows == ti->cols &&
                (style == NB_NAMES_HF_GPT2 || style == NB_NAMES_GPT2_LINEAR)) {
                fprintf(stderr, "nbimport: %s is stored (%d, %d): the %s layout; run with "
                        "STYLE %s\n", parts[k].name, fr, fc,
                        style == NB_NAMES_HF_GPT2 ? "nn.Linear (nanoGPT, llm.c)" : "Conv1D (HF)",
                        style == NB_NAMES_HF_GPT2 ? "gpt2-linear" : "hf-gpt2");
                return 1;
            }
            if (rows != parts[k].rows || cols != (ti->ndim == 2 ? ti->cols : 1))
                return fail("%s: shape does not match the stack's tensor", parts[k].name);
            M->used[file][pt - M->f[file].t] = 1;
            for (r = 0; r < rows; r++)
                for (c = 0; c < cols; c++) {
                    const size_t at = parts[k].transposed ? (size_t)c * rows + r : (size_t)r * cols + c;
                    params[ti->offset + (size_t)(parts[k].row0 + r) * cols + c] =
                        (nb_real)st_value(&M->f[file], pt, at);
                }
        }
    }
    for (i = 0; i < M->n; i++) /* every tensor of MODEL has a place */
        for (j = 0; j < M->f[i].n; j++)
            if (!M->used[i][j] && !ignorable(M->f[i].t[j].name))
                return fail("%s has no place in this stack", M->f[i].t[j].name);
    return 0;
}

/* ---- --export: the stacks each layout's own model code computes ----
   A layout is a codebase's names and the model code that reads them. The names alone can hold
   more than that code computes: a GQA + SwiGLU stack fits GPT-2's tensor names, a sandwich
   stack fits Llama's (the Mix-LN code writes its Post-LN and sandwich layers so), and the
   target's code would load such a file and run another model. --export therefore refuses,
   naming the first field that makes the stack inexpressible, every stack the target's code
   would compute differently, whether it writes a directory or one file (a file in a foreign
   layout is for that code, which reads no metadata of ours); nb_stack_tensor_parts stays a pure
   name map, as importing those codebases' checkpoints needs. The checks read the resolved
   stack (placements per layer, sites per layer), not preset names: Mix-LN of fewer than 4
   layers has no Post-LN layer and is Llama's Pre-LN, and is accepted as such.
   A new stack field no foreign code has is one line in option_refusal; one that some layout
   has is one line in that layout's function (llama_refusal, gpt2_refusal, ngpt_refusal).
   One known gap is documented rather than refused: NVIDIA/ngpt's rotary transform is not a
   rotation (its issue #10), so its code computes an exported nGPT stack only with the standard
   RoPE in its place (--help, examples/pytorch/README.md). */

typedef struct refusal {
    const char* field; /* the first field that makes the stack inexpressible (the table's) */
    char msg[400];     /* that field, then why */
} refusal;

/* records field and the message "field" + fmt's text (which starts with ": " or " ("); 1 */
static int refuse(refusal* r, const char* field, const char* fmt, ...) {
    va_list ap;
    const int n = snprintf(r->msg, sizeof r->msg, "%s", field);
    r->field = field;
    va_start(ap, fmt);
    if (n > 0 && (size_t)n < sizeof r->msg) vsnprintf(r->msg + n, sizeof r->msg - (size_t)n, fmt, ap);
    va_end(ap);
    return 1;
}

static const char* preset_of(const nb_stack* s) {
    const nb_stack_desc* d = &s->desc;
    return d->name[0] ? d->name : d->preset == NB_PRESET_DEFAULT ? "custom" : nb_preset_name(d->preset);
}

/* the residual structure: one stream (hyper-connections' n and SiameseNorm's two are in no
   foreign code) */
static int stream_refusal(const nb_stack* s, const char* code, refusal* r) {
    if (s->desc.hyper.kind > NB_HYPER_NONE)
        return refuse(r, "hyper", ": %s has one residual stream (hyper-connections' n streams and their maps "
                      "are in none of these codes)", code);
    if (s->streams != 1)
        return refuse(r, "preset", " %s: %s has one residual stream (SiameseNorm's two are in none of these "
                      "codes)", preset_of(s), code);
    return 0;
}

/* The placements a layout's code has around both sublayers of every layer: Pre-LN x + F(N(x))
   (Llama, GPT-2), OLMo-2's norm after x + N(F(x)), nGPT's L2(L2(x) + |a| (L2(F(x)) - L2(x))). */
typedef enum place_kind { PLACE_PRE, PLACE_AFTER, PLACE_NGPT } place_kind;

/* field, with *why = text */
static const char* because(const char** why, const char* text, const char* field) {
    *why = text;
    return field;
}

/* the first field of placement p that is not want's, with why (a phrase after the code's
   name), or NULL */
static const char* placement_field(const nb_placement* p, place_kind want, const char** why) {
    const int ngpt = want == PLACE_NGPT, pre = want == PLACE_PRE;
    if (p->post_norm != ngpt)
        return because(why, ngpt ? "normalizes the sum after each step" : "has no norm after the residual add",
                       "post_norm");
    if (p->residual_norm != ngpt)
        return because(why, ngpt ? "normalizes its residual" : "does not normalize its residual (nGPT)",
                       "residual_norm");
    if (p->residual_from_norm)
        return because(why, "adds a sublayer to its input, not to the input's norm (HybridNorm)",
                       "residual_from_norm");
    if (p->residual_scale != 1) return because(why, "scales no residual (DeepNorm's alpha)", "residual_scale");
    if (p->branch_scale != (ngpt ? NB_BRANCH_SCALE_INTERP : NB_BRANCH_SCALE_NONE))
        return because(why, ngpt ? "steps toward each branch by its alpha (attn_alpha, mlp_alpha)"
                            : p->branch_scale == NB_BRANCH_SCALE_SCALAR ? "has no ReZero resweight on its branches"
                            : p->branch_scale == NB_BRANCH_SCALE_CHANNEL ? "has no LayerScale gamma on its branches"
                            : p->branch_scale == NB_BRANCH_SCALE_SUBLAYER ? "has no SkipInit scalar on its branches"
                            : "does not step toward its branches (nGPT's alpha)", "branch_scale");
    if (p->branch_mult != 1)
        return because(why, "multiplies no branch by a constant (depth_alpha: CompleteP)", "branch_mult");
    if (p->input_scale != 1)
        return because(why, "does not scale its input norms (LayerNorm Scaling's 1/sqrt(l))", "input_scale");
    if (p->input_norm != pre)
        return because(why, pre ? "normalizes every sublayer's input" : "normalizes no sublayer's input",
                       "input_norm");
    if (p->output_norm != !pre)
        return because(why, pre ? "has no norm on a sublayer's output (sandwich, Peri-LN)"
                                : "normalizes every sublayer's output", "output_norm");
    return NULL;
}

/* every layer's placements, attention then FFN, against want */
static int placement_refusal(const nb_stack* s, place_kind want, const char* code, refusal* r) {
    int l, k;
    for (l = 0; l < s->desc.n_layers; l++)
        for (k = 0; k < 2; k++) {
            const char *why = NULL, *field;
            field = placement_field(k ? &s->layers[l].desc.ffn : &s->layers[l].desc.attn, want, &why);
            if (field)
                return refuse(r, field, " (preset %s, layer %d, %s): %s %s", preset_of(s), l,
                              k ? "FFN" : "attention", code, why);
        }
    return 0;
}

/* the embedding norm and the final norm: fin 1 when the code ends with a norm */
static int ends_refusal(const nb_stack* s, const char* code, int fin, refusal* r) {
    if (s->desc.norm.embed == 1) return refuse(r, "embed_norm", ": %s does not normalize the embedding", code);
    if (s->desc.norm.final != (fin ? 1 : -1))
        return refuse(r, "final_norm", fin ? ": %s ends with a final norm" : ": %s has no final norm", code);
    return 0;
}

/* 1 when every layer has the stack's sites (a custom schedule may vary them) */
static int sites_uniform(const nb_stack* s) {
    int l;
    for (l = 0; l < s->desc.n_layers; l++)
        if (s->layers[l].desc.sites != s->desc.attn.sites) return 0;
    return 1;
}

/* attention scaled as Llama's and GPT-2's: none of nGPT's scales, scores by 1/sqrt(d_k) */
static int scale_refusal(const nb_stack* s, const char* code, refusal* r) {
    const nb_stack_desc* d = &s->desc;
    if (d->attn.qk_scale > 0) return refuse(r, "qk_scale", ": nGPT's s_qk (sqk) is not in %s", code);
    if (d->ffn.in_scale > 0) return refuse(r, "ffn_in_scale", ": nGPT's s_uv (suv) is not in %s", code);
    if (fabs(d->attn.softmax_scale * sqrt((double)d->d_model / d->n_heads) - 1) > 1e-6)
        return refuse(r, "softmax_scale", ": %s scales the scores by 1/sqrt(d_k)", code);
    return 0;
}

/* what none of the foreign codes has (Llama's family, GPT-2, NVIDIA/ngpt): one line a field */
static int option_refusal(const nb_stack* s, const char* code, refusal* r) {
    const nb_stack_desc* d = &s->desc;
    if (d->residual.value_residual)
        return refuse(r, "value_residual", ": %s does not mix layer 0's values in (ResFormer)", code);
    if (d->attn.non_causal) return refuse(r, "non_causal", ": %s attends causally", code);
    if (d->attn.gate) return refuse(r, "attn_gate", ": %s has no output gate in attention (gated attention)", code);
    if (d->attn.sink) return refuse(r, "attn_sink", ": %s's softmax has no sink (gpt-oss's sinks, off-by-one)", code);
    if (d->attn.clip_qkv > 0) return refuse(r, "clip_qkv", ": %s does not clamp its projections (OLMo's clip_qkv)", code);
    if (d->attn.softcap > 0) return refuse(r, "attn_softcap", ": %s does not cap its attention logits (Gemma 2's)", code);
    if (d->norm.embed_scale) return refuse(r, "embed_scale", ": %s does not scale its input (DyT's shared_scale)", code);
    if (d->norm.gain_offset) return refuse(r, "gain_offset", ": %s's norms multiply by w, not 1 + w (Gemma's)", code);
    if (d->residual.unet_skips) return refuse(r, "unet_skips", ": %s's layers read the previous layer's output alone, with no skips from the first half (modded-nanogpt's U-Net)", code);
    if (d->residual.reinject_x0) return refuse(r, "reinject_x0", ": %s does not mix the embedding into every layer's input (modded-nanogpt's lambdas)", code);
    if (d->residual.attn_res) return refuse(r, "attn_res", ": %s adds every sublayer's output to a residual sum, not a softmax over depth (Attention Residuals)", code);
    if (d->residual.dwa) return refuse(r, "dwa", ": %s's layers read the previous layer's output, not an average of all of them (DenseFormer)", code);
    if (d->norm.gain < 0) return refuse(r, "norm_gain", ": %s's norms have a weight", code);
    if (d->norm.bias < 0) return refuse(r, "norm_bias", ": %s's LayerNorms have a bias", code);
    return 0;
}

/* hf-llama: the attention norms and biases of model_type type */
static int llama_attention_refusal(const nb_stack* s, const char* type, refusal* r) {
    const nb_stack_desc* d = &s->desc;
    const int olmo2 = !strcmp(type, "olmo2");
    const unsigned qk = NB_SITE_Q | NB_SITE_K, all = NB_ATTN_BIAS_QKV | NB_ATTN_BIAS_OUT;
    if (!sites_uniform(s))
        return refuse(r, "sites", ": %s's layers all have the same attention norms", olmo2 ? "OLMo-2" : "Llama");
    if (olmo2 && (d->attn.sites != qk || d->attn.site_width != NB_WIDTH_FULL))
        return refuse(r, "sites", ": OLMo-2's q_norm and k_norm are over the whole Q and K projections (sites Q, "
                      "K at full width)");
    if (!olmo2 && d->attn.sites && (d->attn.sites != qk || d->attn.site_width != NB_WIDTH_PER_HEAD))
        return refuse(r, "sites", ": of Llama's family only Qwen3 normalizes in attention: q_norm and k_norm per "
                      "head (sites Q, K, per head)");
    if (strcmp(type, "qwen2") && d->attn.bias != 0 && d->attn.bias != all)
        return refuse(r, "attn_bias", ": %s's attention_bias is on all of Q, K, V and O or on none (Qwen2's Q, "
                      "K, V biases come without attention norms)", olmo2 ? "OLMo-2" : d->attn.sites ? "Qwen3" : "Llama");
    return 0;
}

/* hf-llama: the Hugging Face class that computes s, as its model_type in *type ("llama",
   "qwen2", "qwen3", "olmo2"), or 1 with the refusal. LlamaForCausalLM: Pre-LN, RMSNorm, SwiGLU
   without biases, RoPE, attention_bias on all of Q, K, V, O or none; Qwen2: Q, K, V biases only
   (hard-coded); Qwen3: Llama with q_norm, k_norm per head; OLMo-2: norms after the sublayers,
   q_norm, k_norm over the whole projections. */
static int llama_refusal(const nb_stack* s, refusal* r, const char** type) {
    const nb_stack_desc* d = &s->desc;
    /* the first attention's placement tells which family's layer every sublayer must be */
    const nb_placement* p0 = &s->layers[0].desc.attn;
    const int olmo2 = p0->output_norm && !p0->input_norm && !p0->post_norm;
    const char* code = olmo2 ? "OLMo-2's decoder" : "Llama's decoder";
    if (stream_refusal(s, code, r)) return 1;
    if (d->norm.type != NB_NORM_RMS) return refuse(r, "norm", ": Llama's norms are RMSNorm");
    if (d->ffn.type != NB_FFN_SWIGLU) return refuse(r, "ffn", ": Llama's MLP is SwiGLU (gate_proj, up_proj, down_proj)");
    if (s->ffn.desc.ffn.bias == 1) return refuse(r, "ffn_bias", ": Llama's MLP projections have no bias");
    if (!d->attn.rope) return refuse(r, "rope", ": Llama applies RoPE in every attention");
    if (placement_refusal(s, olmo2 ? PLACE_AFTER : PLACE_PRE, code, r)) {
        if (!strcmp(r->field, "output_norm") && !olmo2) /* what the names suggest */
            strncat(r->msg, ": its post_attention_layernorm is the FFN's input norm (the Mix-LN code writes its "
                    "sandwich layers in these names; Llama's code would run them as Pre-LN)",
                    sizeof r->msg - strlen(r->msg) - 1);
        return 1;
    }
    if (ends_refusal(s, code, 1, r)) return 1;
    *type = olmo2 ? "olmo2" : d->attn.sites ? "qwen3" : d->attn.bias == NB_ATTN_BIAS_QKV ? "qwen2" : "llama";
    return llama_attention_refusal(s, *type, r) || scale_refusal(s, code, r) || option_refusal(s, code, r);
}

/* the model_type of the HF class that computes s (hf-llama), or NULL */
static const char* llama_family(const nb_stack* s, refusal* r) {
    const char* type = NULL;
    return llama_refusal(s, r, &type) ? NULL : type;
}

/* hf-gpt2 (Hugging Face's GPT2Model) and gpt2-linear (llm.c's train_gpt2.py GPT): Pre-LN,
   LayerNorm, GELU tanh, every projection's bias, learned positions (outside the stack), MHA;
   llm.c's has no n_inner and no layer_norm_epsilon: d_ff 4 d_model, eps 1e-5. */
static int gpt2_refusal(const nb_stack* s, int linear, refusal* r) {
    const nb_stack_desc* d = &s->desc;
    const char* code = linear ? "llm.c's GPT-2" : "GPT-2's model";
    if (stream_refusal(s, code, r)) return 1;
    if (d->n_kv_heads != d->n_heads)
        return refuse(r, "n_kv_heads", " != n_heads: GPT-2's c_attn holds Q, K and V of n_heads each (no GQA)");
    if (d->ffn.type != NB_FFN_GELU_TANH) return refuse(r, "ffn", ": GPT-2's MLP is GELU (tanh) without a gate");
    if (d->norm.type != NB_NORM_LAYER) return refuse(r, "norm", ": GPT-2's ln_1, ln_2, ln_f are LayerNorms");
    if (d->attn.rope) return refuse(r, "rope", ": GPT-2 adds learned positions (wpe) and has no RoPE");
    if (d->attn.bias != (NB_ATTN_BIAS_QKV | NB_ATTN_BIAS_OUT))
        return refuse(r, "attn_bias", ": GPT-2's c_attn and c_proj have biases (attn_bias 3)");
    if (s->ffn.desc.ffn.bias != 1) return refuse(r, "ffn_bias", ": GPT-2's c_fc and c_proj have biases");
    if (d->attn.sites) return refuse(r, "sites", ": GPT-2's attention has no norms");
    if (placement_refusal(s, PLACE_PRE, code, r) || ends_refusal(s, code, 1, r)) return 1;
    if (linear && d->ffn.d_ff != 4 * d->d_model)
        return refuse(r, "d_ff", ": llm.c's and nanoGPT's MLP is 4 n_embd wide (they have no n_inner)");
    if (linear && (float)d->norm.eps != 1e-5f)
        return refuse(r, "eps", ": llm.c's and nanoGPT's LayerNorm eps is 1e-5 (they have no setting)");
    return scale_refusal(s, code, r) || option_refusal(s, code, r);
}

/* ngpt: NVIDIA/ngpt's model.py with use_nGPT 1 and bias False: the ngpt preset as it comes
   (c_fc 8 n_embd wide, query, key, value of n_embd: MHA; justnorm of Q, K per head; scores
   times sqrt(d_k); the alphas' 0.05 and its base 10000 hard-coded) */
static int ngpt_refusal(const nb_stack* s, refusal* r) {
    const nb_stack_desc* d = &s->desc;
    const char* code = "NVIDIA/ngpt's model";
    if (stream_refusal(s, code, r)) return 1;
    if (d->preset != NB_PRESET_NGPT)
        return refuse(r, "preset", " %s: NVIDIA/ngpt's Block is nGPT's (the ngpt preset: L2 norms, sqk, suv, the "
                      "alphas' steps)", preset_of(s));
    if (d->norm.type != NB_NORM_L2) return refuse(r, "norm", ": NVIDIA/ngpt's justnorm is L2 (x / ||x||)");
    if (d->ffn.type != NB_FFN_SWIGLU) return refuse(r, "ffn", ": NVIDIA/ngpt's MLP is SwiGLU (c_fc: u | v)");
    if (d->attn.bias || s->ffn.desc.ffn.bias == 1)
        return refuse(r, d->attn.bias ? "attn_bias" : "ffn_bias", ": NVIDIA/ngpt's model is bias-free (bias False; "
                      "its names have no biases)");
    if (d->n_kv_heads != d->n_heads)
        return refuse(r, "n_kv_heads", " != n_heads: NVIDIA/ngpt's key and value are n_embd wide");
    if (d->ffn.d_ff != 4 * d->d_model)
        return refuse(r, "d_ff", ": NVIDIA/ngpt's c_fc is 2 x 4 n_embd wide (d_ff 4 d_model)");
    if (!d->attn.rope) return refuse(r, "rope", ": NVIDIA/ngpt's attention always applies its rotary transform");
    if ((float)d->attn.rope_theta != 10000.0f) return refuse(r, "rope_theta", ": NVIDIA/ngpt's rotary base is 10000");
    if (d->attn.sites != (NB_SITE_Q | NB_SITE_K) || !sites_uniform(s) || d->attn.site_width != NB_WIDTH_PER_HEAD)
        return refuse(r, "sites", ": NVIDIA/ngpt normalizes Q and K per head, nothing else in attention");
    if (d->attn.qk_scale <= 0) return refuse(r, "qk_scale", ": NVIDIA/ngpt scales Q and K by sqk");
    if (d->ffn.in_scale <= 0) return refuse(r, "ffn_in_scale", ": NVIDIA/ngpt scales c_fc's output by suv");
    if (fabs(d->attn.softmax_scale / sqrt((double)d->d_model / d->n_heads) - 1) > 1e-6)
        return refuse(r, "softmax_scale", ": NVIDIA/ngpt scales the scores by +sqrt(d_k)");
    if (placement_refusal(s, PLACE_NGPT, code, r) || ends_refusal(s, code, 0, r)) return 1;
    if (fabs(d->residual.interp_init - 0.05) > 1e-12)
        return refuse(r, "interp_init", ": NVIDIA/ngpt's alphas are times 0.05 / base_scale (the stored values "
                      "mean another step)");
    return option_refusal(s, code, r);
}

/* Why STYLE's own model code would not compute stack s: 1 with r filled, or 0. */
static int export_refusal(const nb_stack* s, nb_name_style style, refusal* r) {
    switch (style) {
    case NB_NAMES_NORMBLOCKS: return 0; /* the library's own names: every stack */
    case NB_NAMES_HF_LLAMA: return llama_family(s, r) == NULL;
    case NB_NAMES_HF_GPT2: return gpt2_refusal(s, 0, r);
    case NB_NAMES_GPT2_LINEAR: return gpt2_refusal(s, 1, r);
    case NB_NAMES_NGPT: return ngpt_refusal(s, r);
    }
    return refuse(r, "style", ": unknown");
}

/* --export: 1 with the message when STYLE cannot express s */
static int exportable(const nb_stack* s, nb_name_style style) {
    refusal r;
    if (!export_refusal(s, style, &r)) return 0;
    fprintf(stderr, "nbimport: --export: this stack cannot be expressed in the %s layout: %s (--export "
            "normblocks keeps every stack)\n", style_name(style), r.msg);
    return 1;
}

/* The Hugging Face class of an exportable stack in STYLE, or NULL (no class reads that layout) */
static const hf_family* hf_family_of(const nb_stack* s, nb_name_style style) {
    refusal r;
    const char* type = style == NB_NAMES_HF_LLAMA ? llama_family(s, &r) : style == NB_NAMES_HF_GPT2 ? "gpt2" : NULL;
    int i;
    for (i = 0; type && i < HF_N_FAMILIES; i++)
        if (!strcmp(hf_families[i].model_type, type)) return &hf_families[i];
    return NULL;
}

/* ---- the export table: by preset, what each foreign layout holds (printed by --help; README.md
   has the same rows, and tests/test_nbimport.py checks the two are equal and that --export
   refuses exactly the cells marked no, naming their field) ---- */

static const nb_name_style k_table_styles[4] = {NB_NAMES_HF_LLAMA, NB_NAMES_HF_GPT2, NB_NAMES_GPT2_LINEAR,
                                                NB_NAMES_NGPT};

/* The norm kind preset NAME fixes (DyT for dyt, L2 for ngpt), or 0 when it takes the stack's
   (RMSNorm unless set): the table keeps a fixed one and gives the others each layout's own. */
static nb_norm_type table_own_norm(const char* name) {
    nb_stack_desc d;
    nb_stack s;
    nb_norm_type own = NB_NORM_DEFAULT;
    memset(&d, 0, sizeof d);
    d.n_layers = 4; d.d_model = 16; d.n_heads = 2; d.n_kv_heads = 2; d.ffn.d_ff = 64;
    if (nb_preset_from_name(NULL, &d, name) || nb_stack_init(NULL, &s, &d, 1, 1)) return own;
    if (s.desc.norm.type != NB_NORM_RMS) own = s.desc.norm.type;
    nb_stack_free(&s);
    return own;
}

/* preset NAME of 4 layers (d_model 16, 2 heads, d_ff 4 d_model) with STYLE's usual metadata
   values (norm, ffn, rope; attn_bias given), as a checkpoint of them describes it */
static int table_stack(const char* name, nb_name_style style, unsigned attn_bias, nb_stack* s) {
    const int gpt2 = style == NB_NAMES_HF_GPT2 || style == NB_NAMES_GPT2_LINEAR;
    const nb_norm_type own = table_own_norm(name);
    nb_stack_desc d;
    memset(&d, 0, sizeof d);
    d.n_layers = 4; d.d_model = 16; d.n_heads = 2; d.n_kv_heads = 2; d.ffn.d_ff = 64;
    if (nb_preset_from_name(NULL, &d, name)) return 1;
    d.norm.type = own ? own : gpt2 ? NB_NORM_LAYER : style == NB_NAMES_NGPT ? NB_NORM_L2 : NB_NORM_RMS;
    d.ffn.type = gpt2 ? NB_FFN_GELU_TANH : NB_FFN_SWIGLU;
    d.attn.rope = !gpt2;
    d.attn.bias = attn_bias;
    return nb_stack_init(NULL, s, &d, 1, 1) != NB_OK;
}

/* "no: FIELD" for a refusal, or "no: (no stack)" when the library refuses the stack itself */
static void table_no(char* cell, size_t n, const char* field) { snprintf(cell, n, "no: %s", field); }

/* one cell: hf-llama's model_types (attn_bias 0, then 1), "yes", or "no: " the field */
static void table_cell(const char* name, nb_name_style style, char* cell, size_t n) {
    const int gpt2 = style == NB_NAMES_HF_GPT2 || style == NB_NAMES_GPT2_LINEAR;
    const unsigned biases[2] = {0, NB_ATTN_BIAS_QKV};
    const char* first = NULL;
    refusal r;
    nb_stack s;
    int k;
    if (style != NB_NAMES_HF_LLAMA) {
        if (table_stack(name, style, gpt2 ? NB_ATTN_BIAS_QKV | NB_ATTN_BIAS_OUT : 0, &s)) {
            table_no(cell, n, "(no stack)");
            return;
        }
        if (export_refusal(&s, style, &r)) table_no(cell, n, r.field);
        else snprintf(cell, n, "yes");
        nb_stack_free(&s);
        return;
    }
    cell[0] = 0;
    for (k = 0; k < 2; k++) {
        const char* type;
        if (table_stack(name, style, biases[k], &s)) continue;
        type = llama_family(&s, &r);
        if (!type && !k) first = r.field;
        if (type && !strstr(cell, type))
            snprintf(cell + strlen(cell), n - strlen(cell), "%s%s", cell[0] ? ", " : "", type);
        nb_stack_free(&s);
    }
    if (!cell[0]) table_no(cell, n, first ? first : "(no stack)");
}

/* the table's rows: every preset key, and the HybridNorm name that is Qwen3 */
static void print_export_table(FILE* f) {
    static const char* const names[] = {"Pre-QK-Pre"};
    static const char* const norm_names[5] = {"", "rms", "layer", "dyt", "l2"};
    const int n_rows = NB_PRESET_COUNT - 1 + (int)(sizeof names / sizeof names[0]);
    int i, k;
    fputs("| preset | hf-llama | hf-gpt2 | gpt2-linear | ngpt |\n|---|---|---|---|---|\n", f);
    for (i = 0; i < n_rows; i++) {
        const char* name = i < NB_PRESET_COUNT - 1 ? nb_preset_name((nb_preset)(i + 1))
                                                   : names[i - (NB_PRESET_COUNT - 1)];
        const nb_norm_type own = table_own_norm(name);
        fprintf(f, "| `%s`", name);
        if (own) fprintf(f, " (norm %s)", norm_names[own]);
        for (k = 0; k < 4; k++) {
            char cell[96];
            table_cell(name, k_table_styles[k], cell, sizeof cell);
            fprintf(f, " | %s", cell);
        }
        fputs(" |\n", f);
    }
}

/* ---- writing ---- */

/* "out" (B, T, d) and, with token ids, "logits" (B, T, V; NULL: none) */
static int write_out(const char* path, const nb_real* out, const nb_real* logits, int B, int T, int d, int V) {
    cJSON* root = cJSON_CreateObject();
    const int shape[3] = {B, T, d}, lshape[3] = {B, T, V};
    const nb_real* part[2];
    const size_t count[2] = {(size_t)B * T * d, logits ? (size_t)B * T * V : 0};
    char err[512];
    size_t off = 0, i;
    FILE* f;
    int k;
    part[0] = out; part[1] = logits;
    for (k = 0; k < 2; k++)
        for (i = 0; i < count[k]; i++)
            if (bad_value((double)part[k][i])) {
                cJSON_Delete(root);
                return fail("the %s has a value that is not a finite float: %s not written",
                            k ? "logits" : "stack's output", path);
            }
    if (!(f = st_create(path, err, sizeof err))) { cJSON_Delete(root); return fail("%s", err); }
    st_put_f32(root, "out", 3, shape, &off);
    if (logits) st_put_f32(root, "logits", 3, lshape, &off);
    st_put_header(f, root);
    cJSON_Delete(root);
    for (k = 0; k < 2; k++)
        for (i = 0; i < count[k]; i++) {
            const float v = (float)part[k][i];
            fwrite(&v, 4, 1, f);
        }
    return st_commit(f, err, sizeof err) ? fail("%s", err) : 0;
}

/* From token ids (INPUT's "ids", B x T integers) as the model type defines it: the embedding
   rows of MODEL (GPT-2: plus wpe's row of each position), into *E (B*T*d, allocated); *head:
   lm_head.weight, or the embedding when the model ties them (no lm_head), *V its rows */
typedef struct ids_io { const st_file* fh; const st_tensor* head; int V; } ids_io;
static int embed_ids(model_in* M, const st_file* In, const st_tensor* ids, nb_name_style style, int d,
                     nb_real** E, ids_io* io) {
    const int gpt2 = style == NB_NAMES_HF_GPT2;
    const st_tensor *emb = NULL, *wpe = NULL;
    const unsigned char* p = In->data + ids->begin;
    const size_t rows = ids->count, w = ids->dtype == ST_I64 ? 8 : 4;
    int fe = 0, fh = 0, fp = 0, i;
    size_t r, k;
    if (ids->dtype != ST_I64 && ids->dtype != ST_I32) return fail("INPUT's ids are %s, not I64 or I32",
                                                                 st_dtype_name(ids->dtype));
    for (i = 0; k_embed[i] && !emb; i++) emb = find_part(M, k_embed[i], &fe);
    if (!emb || emb->ndim != 2 || emb->shape[1] != (size_t)d || emb->shape[0] < 1 || emb->shape[0] > 1 << 24)
        return fail("token ids need MODEL's embedding (%s, vocab x d_model)", k_embed[gpt2 ? 1 : 0]);
    io->head = find_part(M, "lm_head.weight", &fh);
    if (!io->head) { io->head = emb; fh = fe; } /* tied: the head is the embedding */
    if (io->head->ndim != 2 || io->head->shape[0] != emb->shape[0] || io->head->shape[1] != (size_t)d)
        return fail("MODEL's lm_head.weight is not (vocab, d_model)");
    if (gpt2 && (wpe = find_part(M, "transformer.wpe.weight", &fp)) != NULL &&
        (wpe->ndim != 2 || wpe->shape[1] != (size_t)d || wpe->shape[0] < ids->shape[1]))
        return fail("MODEL's wpe is not (positions >= T, d_model)");
    if (st_check_finite(&M->f[fe], emb)) return st_fail(&M->f[fe]);
    if (st_check_finite(&M->f[fh], io->head)) return st_fail(&M->f[fh]);
    if (wpe && st_check_finite(&M->f[fp], wpe)) return st_fail(&M->f[fp]);
    io->fh = &M->f[fh];
    io->V = (int)emb->shape[0];
    if (!(*E = (nb_real*)calloc(rows * (size_t)d + 1, sizeof(nb_real)))) return fail("out of memory");
    for (r = 0; r < rows; r++) {
        long long id = 0;
        unsigned char b[8] = {0};
        memcpy(b, p + r * w, w);
        for (k = w; k-- > 0;) id = (long long)((unsigned long long)id << 8 | b[k]);
        if (w == 4) id = (int)(unsigned)id; /* sign of an I32 */
        if (id < 0 || id >= io->V)
            return fail("INPUT's ids[%zu] is %lld, outside the vocabulary [0, %d)", r, id, io->V);
        for (k = 0; k < (size_t)d; k++)
            (*E)[r * d + k] = (nb_real)(st_value(&M->f[fe], emb, (size_t)id * d + k) +
                                       (wpe ? st_value(&M->f[fp], wpe, (r % ids->shape[1]) * d + k) : 0));
    }
    return 0;
}

/* An embedding or head to export: MODEL's tensor (any float dtype), or zeros (GPT-2's positions
   for a stack that has none: its code adds wpe, zero adds nothing). */
typedef struct extra { const char* name; const st_file* f; const st_tensor* t; int rows, cols; } extra; /* cols 0: 1-D */

static void put_extra_data(FILE* f, const extra* x) {
    size_t i;
    for (i = 0; i < (size_t)x->rows * (size_t)(x->cols ? x->cols : 1); i++) {
        const float v = x->t ? (float)st_value(x->f, x->t, i) : 0.0f;
        fwrite(&v, 4, 1, f);
    }
}

/* --export: every tensor of the stack (params) under STYLE's names into path, after the extras
   (embedding, head): the header first, then the data in the same order. */
static int export_to(const char* path, const nb_stack* s, nb_name_style style, const nb_real* params,
                     const cJSON* meta, const extra* ex, int n_ex) {
    cJSON* root = cJSON_CreateObject();
    char err[512];
    FILE* f = st_create(path, err, sizeof err);
    size_t off = 0;
    int pass, t, k;
    if (!f) { cJSON_Delete(root); return fail("%s", err); }
    {   /* MODEL's metadata, with the "format" Hugging Face's loader requires */
        cJSON* m = meta ? cJSON_Duplicate(meta, 1) : cJSON_CreateObject();
        if (!cJSON_GetObjectItemCaseSensitive(m, "format")) cJSON_AddStringToObject(m, "format", "pt");
        cJSON_AddItemToObject(root, "__metadata__", m);
    }
    for (pass = 0; pass < 2; pass++) { /* 0: the header entries, 1: the data */
        if (pass == 1) st_put_header(f, root);
        for (k = 0; k < n_ex; k++) {
            const int shape[2] = {ex[k].rows, ex[k].cols};
            if (pass == 0) st_put_f32(root, ex[k].name, ex[k].cols ? 2 : 1, shape, &off);
            else put_extra_data(f, &ex[k]);
        }
        for (t = 0; t < s->n_tensors; t++) {
            const nb_tensor_info* ti = &s->tensors[t];
            nb_tensor_part parts[3];
            const int n = nb_stack_tensor_parts(s, t, style, parts);
            const int cols = ti->ndim == 2 ? ti->cols : 1;
            if (n <= 0) {
                st_discard(f);
                cJSON_Delete(root);
                return fail("%s has no name in the %s layout", ti->name, style_name(style));
            }
            for (k = 0; k < n; k++) {
                const int rows = parts[k].rows, tr = parts[k].transposed;
                const nb_real* base = params + ti->offset + (size_t)parts[k].row0 * cols;
                int shape[2], r, c;
                shape[0] = tr ? cols : rows;
                shape[1] = tr ? rows : cols;
                if (pass == 0) st_put_f32(root, parts[k].name, ti->ndim, shape, &off);
                else
                    for (r = 0; r < shape[0]; r++)
                        for (c = 0; c < shape[1]; c++) {
                            const float v = (float)(tr ? base[(size_t)c * cols + r] : base[(size_t)r * cols + c]);
                            fwrite(&v, 4, 1, f);
                        }
            }
        }
    }
    cJSON_Delete(root);
    return st_commit(f, err, sizeof err) ? fail("%s", err) : 0;
}

/* 1 when tensors a (of file fa) and b (of fb) hold the same values */
static int same_values(const st_file* fa, const st_tensor* a, const st_file* fb, const st_tensor* b) {
    size_t i;
    if (a->count != b->count) return 0;
    for (i = 0; i < a->count; i++)
        if (st_value(fa, a, i) != st_value(fb, b, i)) return 0;
    return 1;
}

/* The embedding and head of MODEL, in STYLE's names (and GPT-2's zero positions when the stack
   has no RoPE: the trainer's models have no positional embedding); 0 extras when MODEL has
   neither, 1 with a message when it has one without the other or they are not finite. */
static int extras_of(model_in* M, const nb_stack* s, nb_name_style style, extra* ex, int* n_ex) {
    const int gpt2 = style == NB_NAMES_HF_GPT2 || style == NB_NAMES_GPT2_LINEAR;
    const st_tensor *emb = NULL, *head = NULL;
    int fe = 0, fh = 0, i;
    const char* seq = st_meta(&M->f[0], "seq");
    *n_ex = 0;
    for (i = 0; k_embed[i] && !emb; i++) emb = find_part(M, k_embed[i], &fe);
    head = find_part(M, "lm_head.weight", &fh);
    if (!emb && !head) return 0;
    if (!emb || !head) return fail("MODEL has %s without the other: export both or neither", emb ? "an embedding" : "a head");
    if (style != NB_NAMES_NORMBLOCKS) { /* examples/train's final-logit softcap and constant embedding
        scale sqrt(d) (Gemma's): no other STYLE's model code computes them (its own keeps the metadata) */
        const char *cap = st_meta(&M->f[0], "logit_softcap"), *es = st_meta(&M->f[0], "embed_scale");
        if (cap && strcmp(cap, "0"))
            return fail("--export: MODEL has logit_softcap %s (examples/train's final-logit softcap C tanh(z / C)): "
                        "the %s layout's model code does not compute it", cap, style_name(style));
        if (es && !strcmp(es, "2"))
            return fail("--export: MODEL has embed_scale 2 (examples/train's constant embedding scale sqrt(d)): "
                        "the %s layout's model code does not compute it", style_name(style));
    }
    if (emb->ndim != 2 || head->ndim != 2 || emb->shape[1] != (size_t)s->desc.d_model ||
        head->shape[0] != emb->shape[0] || head->shape[1] != emb->shape[1] || emb->shape[0] > 1 << 24)
        return fail("MODEL's embedding and head are not both (vocab, d_model)");
    if (st_check_finite(&M->f[fe], emb)) return st_fail(&M->f[fe]);
    if (st_check_finite(&M->f[fh], head)) return st_fail(&M->f[fh]);
    if (style == NB_NAMES_GPT2_LINEAR && !same_values(&M->f[fe], emb, &M->f[fh], head)) {
        fprintf(stderr, "nbimport: --export: this checkpoint cannot be expressed in the gpt2-linear layout: "
                "lm_head.weight is not the embedding, and llm.c's and nanoGPT's GPT ties lm_head to wte (one "
                "tensor: loading either replaces the other); hf-gpt2 keeps them apart\n");
        return 1;
    }
    ex[0].name = style == NB_NAMES_HF_LLAMA ? "model.embed_tokens.weight" : "transformer.wte.weight";
    ex[0].f = &M->f[fe]; ex[0].t = emb; ex[0].rows = (int)emb->shape[0]; ex[0].cols = (int)emb->shape[1];
    ex[1] = ex[0];
    ex[1].name = "lm_head.weight"; ex[1].f = &M->f[fh]; ex[1].t = head;
    *n_ex = 2;
    if (gpt2) { /* GPT-2's code adds wpe: MODEL's, or zeros for a stack without positions */
        const st_tensor* wpe = find_part(M, "transformer.wpe.weight", &fe);
        ex[2].name = "transformer.wpe.weight";
        ex[2].f = wpe ? &M->f[fe] : NULL;
        ex[2].t = wpe;
        ex[2].rows = wpe ? (int)wpe->shape[0] : seq ? atoi(seq) : 1024;
        ex[2].cols = s->desc.d_model;
        if (wpe && (wpe->ndim != 2 || wpe->shape[1] != (size_t)ex[2].cols || wpe->shape[0] > 1 << 20))
            return fail("MODEL's wpe is not (positions, d_model)");
        if (wpe && st_check_finite(&M->f[fe], wpe)) return st_fail(&M->f[fe]);
        if (ex[2].rows < 1 || ex[2].rows > 1 << 20) ex[2].rows = 1024;
        *n_ex = 3;
    }
    if (style == NB_NAMES_NGPT) { /* examples/train's nGPT logit scale is NVIDIA/ngpt's GPT.sz */
        const st_tensor* sz = find_part(M, "sz", &fe);
        if (!sz) return fail("MODEL has no sz (nGPT's logit scale, which NVIDIA/ngpt's model needs)");
        if (sz->ndim != 1 || sz->shape[0] != emb->shape[0])
            return fail("MODEL's sz is not (vocab)");
        if (st_check_finite(&M->f[fe], sz)) return st_fail(&M->f[fe]);
        ex[2].name = "sz"; ex[2].f = &M->f[fe]; ex[2].t = sz;
        ex[2].rows = (int)sz->shape[0]; ex[2].cols = 0;
        *n_ex = 3;
    }
    return 0;
}

/* --export OUT: a directory (existing, or a path ending in /) gets model.safetensors and the
   config.json of the Hugging Face class that computes the stack */
static int export_dir(const char* out, const nb_stack* s, nb_name_style style, const nb_real* params,
                      const model_in* M, const extra* ex, int n_ex) {
    char err[512], path[4096], cpath[4096];
    const hf_family* fam = hf_family_of(s, style);
    char* json;
    FILE* f;
    int rc;
    if (!fam) /* exportable() accepted the stack: only the layout has no Hugging Face class */
        return fail("--export to a directory: no Hugging Face model class reads the %s layout (%s; export to a "
                    "file)", style_name(style), style == NB_NAMES_GPT2_LINEAR ? "llm.c's and nanoGPT's: "
                    "hf-gpt2 is Hugging Face's" : style == NB_NAMES_NGPT ? "NVIDIA/ngpt's" : "the library's own");
    if (n_ex < 2) return fail("--export to a directory: MODEL has no embedding and head (a Hugging Face model needs them; "
                              "examples/train's checkpoints have them)");
    if (!is_dir(out) && mkdir(out, 0777)) return fail("cannot create directory %s", out);
    /* both outputs checked before the first byte of either */
    snprintf(path, sizeof path, "%s/model.safetensors", out);
    snprintf(cpath, sizeof cpath, "%s/config.json", out);
    if (same_file(path, M, NULL) || same_file(cpath, M, NULL)) return 1;
    if (!(json = hf_config_json(s, fam, ex[0].rows, n_ex > 2 ? ex[2].rows : 0))) return fail("out of memory");
    if (export_to(path, s, style, params, M->f[0].meta, ex, n_ex)) {
        free(json);
        return 1;
    }
    if (!(f = st_create(cpath, err, sizeof err))) rc = fail("%s", err);
    else {
        fputs(json, f);
        fputc('\n', f);
        rc = st_commit(f, err, sizeof err) ? fail("%s", err) : 0;
    }
    free(json);
    if (!rc) printf("nbimport: %s holds a %s (%s): model.safetensors and config.json\n", out, fam->architecture,
                    fam->model_type);
    return rc;
}

static int parse_style(const char* a, nb_name_style* style) {
    if (!strcmp(a, "hf-llama")) *style = NB_NAMES_HF_LLAMA;
    else if (!strcmp(a, "hf-gpt2")) *style = NB_NAMES_HF_GPT2;
    else if (!strcmp(a, "gpt2-linear")) *style = NB_NAMES_GPT2_LINEAR;
    else if (!strcmp(a, "normblocks")) *style = NB_NAMES_NORMBLOCKS;
    else if (!strcmp(a, "ngpt")) *style = NB_NAMES_NGPT;
    else return fail("unknown layout \"%s\" (hf-llama, hf-gpt2, gpt2-linear, ngpt, normblocks)", a);
    return 0;
}

static int run_export(const char* style_name, const char* model, const char* out) {
    static model_in M;
    nb_stack s;
    nb_name_style style;
    nb_real* params = NULL;
    extra ex[3];
    int rc = 1, n_ex = 0;
    const size_t n_out = strlen(out);
    const int to_dir = is_dir(out) || (n_out && out[n_out - 1] == '/');
    memset(&M, 0, sizeof M);
    memset(&s, 0, sizeof s);
    /* the library's names, or a trainer checkpoint's (transformer.-prefixed): metadata only */
    if (!parse_style(style_name, &style) && !open_model(&M, model) && (to_dir || !same_file(out, &M, NULL)) &&
        !stack_of(&M, NB_NAMES_NORMBLOCKS, 1, 1, &s) && !exportable(&s, style) && !extras_of(&M, &s, style, ex, &n_ex)) {
        if (!(params = (nb_real*)calloc(s.n_params ? s.n_params : 1, sizeof(nb_real)))) fail("out of memory");
        else if (!load(&s, NB_NAMES_NORMBLOCKS, &M, params))
            rc = to_dir ? export_dir(out, &s, style, params, &M, ex, n_ex)
                        : export_to(out, &s, style, params, M.f[0].meta, ex, n_ex);
    }
    if (!rc && !to_dir) {
        const hf_family* fam = hf_family_of(&s, style); /* the class whose config the file needs */
        printf("nbimport: %s exported to %s (%s%s)", model, out, style_name,
               n_ex ? ", with the embedding and head" : "");
        if (fam) printf(": the model of %s (model_type %s)", fam->architecture, fam->model_type);
        putchar('\n');
    }
    nb_stack_free(&s);
    free(params);
    close_model(&M);
    return rc;
}

int main(int argc, char** argv) {
    static model_in M;
    st_file In;
    const st_tensor *E, *ids;
    nb_ctx ctx;
    nb_stack s;
    nb_name_style style;
    nb_real *params = NULL, *cache = NULL, *scratch = NULL, *in = NULL, *out = NULL, *logits = NULL;
    ids_io io;
    int rc = 1, B, T, dm;
    size_t i, n_act;
    tuned_env_restart(argv, TUNE_CORE | TUNE_WAIT); /* OpenBLAS's core; passive OpenMP waits */
    if (tuned_env_set() & TUNE_CORE)
        fprintf(stderr, "nbimport: note: OpenBLAS picked its generic SSE3 kernels (Prescott) on "
                "this CPU; running with OPENBLAS_CORETYPE=%s (export it to choose)\n",
                getenv("OPENBLAS_CORETYPE"));
    if (argc == 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        fputs(help, stdout);
        fputs(help_export, stdout);
        print_export_table(stdout);
        fputs(help_tail, stdout);
        return 0;
    }
    if (argc > 1 && !strcmp(argv[1], "--export")) {
        if (argc != 5) return fail("%s", USAGE);
        return run_export(argv[2], argv[3], argv[4]);
    }
    if (argc != 5) {
        fputs(USAGE, stderr);
        return 1;
    }
    memset(&M, 0, sizeof M);
    memset(&In, 0, sizeof In);
    memset(&io, 0, sizeof io);
    memset(&ctx, 0, sizeof ctx);
    memset(&s, 0, sizeof s);
    if (parse_style(argv[1], &style) || open_model(&M, argv[2])) goto done;
    if (st_open(&In, argv[3])) { st_fail(&In); goto done; }
    if (same_file(argv[4], &M, &In)) goto done;
    E = st_find(&In, "E");
    ids = E ? NULL : st_find(&In, "ids");
    if (!E && !ids) { fail("%s has no tensor \"E\" (the embedded input) or \"ids\" (token ids)", argv[3]); goto done; }
    if (ids && style != NB_NAMES_HF_LLAMA && style != NB_NAMES_HF_GPT2) {
        fail("token ids need STYLE hf-llama or hf-gpt2 (a Hugging Face model: its model type says how ids become "
             "the embedded input and the output logits)");
        goto done;
    }
    if (E ? E->ndim != 3 : ids->ndim != 2) {
        fail("%s: %s", argv[3], E ? "E is not (B, T, d)" : "ids is not (B, T)");
        goto done;
    }
    if (E && st_check_finite(&In, E)) { st_fail(&In); goto done; }
    for (i = 0; i < (size_t)(E ? 3 : 2); i++)
        if ((E ? E : ids)->shape[i] > 1 << 30 || (E ? E : ids)->shape[i] == 0) {
            fail("%s: %s has a dimension of 0 or beyond 2^30 in its shape", argv[3], E ? "E" : "ids");
            goto done;
        }
    B = (int)(E ? E : ids)->shape[0];
    T = (int)(E ? E : ids)->shape[1];
    if (stack_of(&M, style, B, T, &s)) goto done;
    dm = E ? (int)E->shape[2] : s.desc.d_model;
    if (dm != s.desc.d_model) { fail("%s: E's width is not d_model", argv[3]); goto done; }
    n_act = (size_t)B * T * dm;
    params = (nb_real*)calloc(s.n_params, sizeof(nb_real));
    cache = (nb_real*)calloc(s.n_cache, sizeof(nb_real));
    scratch = (nb_real*)calloc(s.n_scratch, sizeof(nb_real));
    out = (nb_real*)calloc(n_act + 1, sizeof(nb_real));
    if (!params || !cache || !scratch || !out) {
        fail("out of memory");
        goto done;
    }
    if (load(&s, style, &M, params)) goto done;
    if (ids) {
        if (embed_ids(&M, &In, ids, style, dm, &in, &io)) goto done;
    } else {
        if (!(in = (nb_real*)calloc(n_act + 1, sizeof(nb_real)))) { fail("out of memory"); goto done; }
        for (i = 0; i < n_act; i++) in[i] = (nb_real)st_value(&In, E, i);
    }
    if (nb_stack_forward(&ctx, &s, params, out, in, B, T, cache, scratch)) {
        fail("%s", ctx.err);
        goto done;
    }
    if (ids) { /* logits = out head^T, the head widened to nb_real once */
        nb_real* head = (nb_real*)calloc((size_t)io.V * dm + 1, sizeof(nb_real));
        if (!head || !(logits = (nb_real*)calloc((size_t)B * T * io.V + 1, sizeof(nb_real)))) {
            free(head);
            fail("out of memory");
            goto done;
        }
        for (i = 0; i < (size_t)io.V * dm; i++) head[i] = (nb_real)st_value(io.fh, io.head, i);
        if (nb_gemm(&ctx, 0, 1, B * T, io.V, dm, 1, out, dm, head, dm, 0, logits, io.V)) {
            free(head);
            fail("%s", ctx.err);
            goto done;
        }
        free(head);
    }
    rc = write_out(argv[4], out, logits, B, T, dm, ids ? io.V : 0);
    if (!rc) printf("nbimport: %s (%s%s%s, %d layers) run on %s: %s\n", argv[2],
                    s.desc.name[0] ? s.desc.name : nb_preset_name(s.desc.preset), M.config[0] ? ", from " : "",
                    M.config, s.desc.n_layers, argv[3], argv[4]);
done:
    nb_stack_free(&s);
    free(params); free(cache); free(scratch); free(in); free(out); free(logits);
    close_model(&M);
    st_close(&In);
    return rc;
}
