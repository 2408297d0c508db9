/* nbimport: load a checkpoint written in another codebase's layout into a normblocks stack and
   run it: the stack's forward on an input, written to a file (to compare with that codebase's
   output); or export the library's tensors (a stack, or a checkpoint of examples/train with its
   embedding and head) in another codebase's layout. The names and layouts come from the
   library's name maps (nb_stack_tensor_parts). `nbimport --help` prints HELP below. */
#define _POSIX_C_SOURCE 200809L
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

#define USAGE                                                                                     \
    "usage: nbimport STYLE MODEL INPUT.safetensors OUT.safetensors\n"                              \
    "       nbimport --export STYLE MODEL OUT\n"                                                   \
    "       nbimport --help\n"
static const char* const help =
    USAGE
    "Runs MODEL's stack on INPUT's tensor \"E\" (B, T, d: the embedded input) and writes its\n"
    "output \"out\" (B, T, d, F32) to OUT; or (--export) writes MODEL's tensors in STYLE's names.\n"
    "  STYLE  hf-llama     Hugging Face Llama, Qwen2/Qwen3, OLMo-2 (and the Mix-LN, LayerNorm-Scaling\n"
    "                      codes): separate q/k/v and up/gate projections\n"
    "         hf-gpt2      Hugging Face GPT-2: Conv1D weights stored transposed\n"
    "         gpt2-linear  GPT-2 in nn.Linear layout (nanoGPT, llm.c)\n"
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
    "         2 the output's), value_residual (off|fixed|learn), hyper (none|mhc|hc|ihc),\n"
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
    "         head included, loadable by the Hugging Face class that computes the stack (refused\n"
    "         when none does, naming why).\n"
    "--export refuses, naming the field, a stack STYLE's model code would run as another model\n"
    "(GQA, SwiGLU, RMSNorm or RoPE as GPT-2; LayerNorm, GELU or no RoPE as Llama; the value\n"
    "residual or hyper-connections as either).\n"
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
    "norm_gain", "norm_bias", "gain_offset", "branch_scale", "qk_clip", NULL};

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

/* examples/train's --attn-gate, --norm-gain, --norm-bias, --gain-offset and --branch-scale
   (written only when given; qk_clip is a training setting: the stack is the same) */
static int porting_of_meta(const st_file* M, nb_stack_desc* d) {
    const char* v;
    if ((v = st_meta(M, "attn_gate")) != NULL) {
        if (!strcmp(v, "headwise")) d->attn_gate = NB_GATE_HEADWISE;
        else if (!strcmp(v, "elementwise")) d->attn_gate = NB_GATE_ELEMENTWISE;
        else return bad_meta("attn_gate", v, "headwise or elementwise");
    }
    if ((v = st_meta(M, "norm_gain")) != NULL && strcmp(v, "on")) {
        if (strcmp(v, "off")) return bad_meta("norm_gain", v, "on or off");
        d->norm_gain = -1;
    }
    if ((v = st_meta(M, "norm_bias")) != NULL && strcmp(v, "on")) {
        if (strcmp(v, "off")) return bad_meta("norm_bias", v, "on or off");
        d->norm_bias = -1;
    }
    if ((v = st_meta(M, "gain_offset")) != NULL) {
        if (strcmp(v, "on")) return bad_meta("gain_offset", v, "on");
        d->gain_offset = 1;
    }
    if ((v = st_meta(M, "branch_scale")) != NULL) {
        if (!strcmp(v, "scalar")) d->branch_scale = NB_BRANCH_SCALE_SCALAR;
        else if (!strcmp(v, "channel")) d->branch_scale = NB_BRANCH_SCALE_CHANNEL;
        else if (!strcmp(v, "sublayer")) d->branch_scale = NB_BRANCH_SCALE_SUBLAYER;
        else return bad_meta("branch_scale", v, "scalar, channel or sublayer");
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
        meta_int(M, "d_ff", 1 << 24, &d->d_ff) || meta_int(M, "rope", 1, &d->rope))
        return 1;
    /* the optional keys: a value not known is an error, never ignored */
    if ((v = st_meta(M, "norm")) != NULL) {
        if (!strcmp(v, "rms")) d->norm = NB_NORM_RMS;
        else if (!strcmp(v, "layer")) d->norm = NB_NORM_LAYER;
        else if (!strcmp(v, "dyt")) d->norm = NB_NORM_DYT;
        else if (!strcmp(v, "l2")) d->norm = NB_NORM_L2;
        else if (!strcmp(v, "derf")) d->norm = NB_NORM_DERF;
        else return bad_meta("norm", v, "rms, layer, dyt, derf or l2");
    }
    if ((v = st_meta(M, "ffn")) != NULL) {
        if (!strcmp(v, "swiglu")) d->ffn = NB_FFN_SWIGLU;
        else if (!strcmp(v, "gelu_tanh") || !strcmp(v, "gelu")) d->ffn = NB_FFN_GELU_TANH; /* gelu: examples/train's name */
        else return bad_meta("ffn", v, "swiglu, gelu_tanh or gelu (= gelu_tanh, as examples/train writes it)");
    }
    if ((v = st_meta(M, "mixln_alpha")) != NULL) {
        char* end;
        errno = 0;
        d->mixln_alpha = strtod(v, &end);
        if (!*v || !strchr("+-.0123456789", *v) || *end || errno == ERANGE || !isfinite(d->mixln_alpha))
            return bad_meta("mixln_alpha", v, "a finite number");
    }
    if ((v = st_meta(M, "eps")) != NULL || (v = st_meta(M, "rope_theta")) != NULL) {
        const char* keys[2] = {"eps", "rope_theta"};
        int k;
        for (k = 0; k < 2; k++) { /* examples/train writes them when set away from the preset's */
            char* end;
            double x;
            if (!(v = st_meta(M, keys[k]))) continue;
            errno = 0;
            x = strtod(v, &end);
            if (!*v || !strchr("+.0123456789", *v) || *end || errno == ERANGE || !isfinite(x) || !(x > (k ? 1 : 0)))
                return bad_meta(keys[k], v, k ? "a finite number above 1" : "a finite number above 0");
            if (k) d->rope_theta = (nb_real)x;
            else d->eps = (nb_real)x;
        }
    }
    if ((v = st_meta(M, "attn_bias")) != NULL) {
        if (strlen(v) != 1 || *v < '0' || *v > '3') return bad_meta("attn_bias", v, "0, 1, 2 or 3");
        d->attn_bias = (unsigned)(*v - '0');
    }
    if ((v = st_meta(M, "value_residual")) != NULL) { /* examples/train's --value-residual */
        if (!strcmp(v, "off")) d->value_residual = 0;
        else if (!strcmp(v, "fixed")) d->value_residual = 1;
        else if (!strcmp(v, "learn")) d->value_residual = 2;
        else return bad_meta("value_residual", v, "off, fixed or learn");
    }
    if ((v = st_meta(M, "hyper")) != NULL) { /* examples/train's --hyper and its companions */
        if (!strcmp(v, "none")) d->hyper = NB_HYPER_NONE;
        else if (!strcmp(v, "mhc")) d->hyper = NB_HYPER_MHC;
        else if (!strcmp(v, "hc")) d->hyper = NB_HYPER_HC;
        else if (!strcmp(v, "ihc")) d->hyper = NB_HYPER_IDENTITY;
        else return bad_meta("hyper", v, "none, mhc, hc or ihc");
    }
    if (st_meta(M, "hyper_streams") && meta_int(M, "hyper_streams", NB_HYPER_MAX_STREAMS, &d->hyper_streams))
        return 1;
    if (st_meta(M, "hyper_sinkhorn") && meta_int(M, "hyper_sinkhorn", 100, &d->hyper_sinkhorn)) return 1;
    if ((v = st_meta(M, "hyper_form")) != NULL) {
        if (!strcmp(v, "dynamic")) d->hyper_static = 0;
        else if (!strcmp(v, "static")) d->hyper_static = 1;
        else return bad_meta("hyper_form", v, "dynamic or static");
    }
    if (porting_of_meta(M, d)) return 1;
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
    d.check_finite = 1; /* a forward that overflows fails naming the layer, no Inf/NaN output */
    if (nb_stack_init(&ctx, s, &d, B, T)) return fail("%s", ctx.err);
    /* every parameter comes from MODEL: a stack larger than its values is refused before its
       buffers are allocated (metadata of a huge model on a small file) */
    if (s->n_params > (values = model_values(M))) {
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
                        s->desc.hyper > NB_HYPER_NONE ? " (hyper: no Hugging Face or GPT-2 model has hyper-connections)" : "");
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

/* ---- writing ---- */

static int write_out(const char* path, const nb_real* out, int B, int T, int d) {
    cJSON* root = cJSON_CreateObject();
    const int shape[3] = {B, T, d};
    char err[512];
    size_t off = 0, i;
    FILE* f;
    for (i = 0; i < (size_t)B * T * d; i++)
        if (bad_value((double)out[i])) {
            cJSON_Delete(root);
            return fail("the stack's output has a value that is not a finite float: %s not written", path);
        }
    if (!(f = st_create(path, err, sizeof err))) { cJSON_Delete(root); return fail("%s", err); }
    st_put_f32(root, "out", 3, shape, &off);
    st_put_header(f, root);
    cJSON_Delete(root);
    for (i = 0; i < (size_t)B * T * d; i++) {
        const float v = (float)out[i];
        fwrite(&v, 4, 1, f);
    }
    if (ferror(f) | fclose(f)) return fail("writing %s failed", path);
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
                fclose(f);
                remove(path);
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
    if (ferror(f) | fclose(f)) return fail("writing %s failed", path);
    return 0;
}

/* examples/train's gated attention, Derf norms, unit-offset gains and SkipInit's sublayer
   scalars: no other STYLE's model code computes them (the names would hold some: Llama's
   q_proj, k_proj, v_proj leave the gate's rows out, its norm weights would be read as 1 + w
   nowhere). Named by the checkpoint's key. */
static int train_porting_refusal(const model_in* M, nb_name_style style) {
    static const char* const keys[4][3] = {
        {"attn_gate", NULL, "gated attention's sigmoid(x W_g) on each head's output"},
        {"norm", "derf", "Derf norms, gamma erf(alpha x + s) + beta"},
        {"gain_offset", NULL, "Gemma's unit-offset norm gains 1 + w"},
        {"branch_scale", "sublayer", "SkipInit's learnable scalar on every sublayer's branch"}};
    int k;
    for (k = 0; k < 4; k++) {
        const char* v = st_meta(&M->f[0], keys[k][0]);
        if (v && (!keys[k][1] || !strcmp(v, keys[k][1])))
            return fail("--export: MODEL has %s %s (examples/train's %s): the %s layout's model code does not "
                        "compute it", keys[k][0], v, keys[k][2], style_name(style));
    }
    return 0;
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
        if (train_porting_refusal(M, style)) return 1;
    }
    if (emb->ndim != 2 || head->ndim != 2 || emb->shape[1] != (size_t)s->desc.d_model ||
        head->shape[0] != emb->shape[0] || head->shape[1] != emb->shape[1] || emb->shape[0] > 1 << 24)
        return fail("MODEL's embedding and head are not both (vocab, d_model)");
    if (st_check_finite(&M->f[fe], emb)) return st_fail(&M->f[fe]);
    if (st_check_finite(&M->f[fh], head)) return st_fail(&M->f[fh]);
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
    char err[512], path[4096];
    const hf_family* fam = hf_family_of(s, style, err, sizeof err);
    char* json;
    FILE* f;
    int rc;
    if (!fam) return fail("--export to a directory: %s", err);
    if (n_ex < 2) return fail("--export to a directory: MODEL has no embedding and head (a Hugging Face model needs them; "
                              "examples/train's checkpoints have them)");
    if (!is_dir(out) && mkdir(out, 0777)) return fail("cannot create directory %s", out);
    snprintf(path, sizeof path, "%s/model.safetensors", out);
    if (same_file(path, M, NULL)) return 1;
    if (export_to(path, s, style, params, M->f[0].meta, ex, n_ex)) return 1;
    snprintf(path, sizeof path, "%s/config.json", out);
    if (st_check_output(path, err, sizeof err)) return fail("%s", err);
    if (!(json = hf_config_json(s, fam, ex[0].rows, n_ex > 2 ? ex[2].rows : 0))) return fail("out of memory");
    if (!(f = st_create(path, err, sizeof err))) rc = fail("%s", err);
    else {
        fputs(json, f);
        fputc('\n', f);
        rc = (ferror(f) | fclose(f)) ? fail("writing %s failed", path) : 0;
    }
    free(json);
    if (!rc) printf("nbimport: %s holds a %s (%s): model.safetensors and config.json\n", out, fam->architecture,
                    fam->model_type);
    return rc;
}

/* --export: a stack the target codebase's own model code would run as another model is refused,
   naming the field (the names alone could hold it: a GQA + SwiGLU stack fits GPT-2's tensor
   names, and GPT-2 code would load it and compute something else). */
static int exportable(const nb_stack* s, nb_name_style style) {
    const nb_stack_desc* d = &s->desc;
    const char* why = NULL;
    if (style != NB_NAMES_NORMBLOCKS && d->hyper > NB_HYPER_NONE) /* first: a GPT-2 or Llama
        stack on n streams is still no GPT-2 or Llama, and its maps have no name there */
        why = "hyper: hyper-connections (n residual streams and their maps) are in no Hugging Face or GPT-2 model";
    else if (style == NB_NAMES_HF_GPT2 || style == NB_NAMES_GPT2_LINEAR) {
        if (d->n_kv_heads != d->n_heads) why = "n_kv_heads != n_heads: GPT-2's c_attn holds Q, K and V of n_heads each (no GQA)";
        else if (d->ffn != NB_FFN_GELU_TANH) why = "ffn: GPT-2's MLP is GELU (tanh) without a gate";
        else if (d->norm != NB_NORM_LAYER) why = "norm: GPT-2's ln_1, ln_2, ln_f are LayerNorms";
        else if (d->rope) why = "rope: GPT-2 adds learned positions (wpe) and has no RoPE";
        else if (d->attn_bias != (NB_ATTN_BIAS_QKV | NB_ATTN_BIAS_OUT) || d->ffn_bias != 1)
            why = "attn_bias: GPT-2 has the bias of every projection (attn_bias 3)";
        else if (d->preset != NB_PRESET_PRE || d->sites || d->embed_norm == 1 || d->final_norm == -1)
            why = "preset: GPT-2 is Pre-LN with a final ln_f and no other norm";
    } else if (style == NB_NAMES_HF_LLAMA) {
        if (d->norm != NB_NORM_RMS) why = "norm: Llama's norms are RMSNorm";
        else if (d->ffn != NB_FFN_SWIGLU) why = "ffn: Llama's MLP is SwiGLU (gate_proj, up_proj, down_proj)";
        else if (!d->rope) why = "rope: Llama applies RoPE in every attention";
        else if (d->ffn_bias == 1) why = "ffn bias: Llama's MLP projections have none";
    } else if (style == NB_NAMES_NGPT) {
        if (d->preset != NB_PRESET_NGPT || d->norm != NB_NORM_L2 || d->qk_scale < 0 ||
            d->ffn_in_scale < 0 || d->sites != (NB_SITE_Q | NB_SITE_K) || d->ffn != NB_FFN_SWIGLU ||
            d->attn_bias || d->ffn_bias == 1 || d->n_kv_heads != d->n_heads)
            why = "preset: NVIDIA/ngpt's Block is the ngpt preset as it comes (L2 norms, sqk, suv, SwiGLU, "
                  "no biases, no GQA)";
        else if (!d->rope) why = "rope: NVIDIA/ngpt's attention always applies its rotary transform";
    }
    if (!why && style != NB_NAMES_NORMBLOCKS && style != NB_NAMES_NGPT &&
        (d->qk_scale > 0 || d->ffn_in_scale > 0 ||
         fabs(d->softmax_scale * sqrt((double)d->d_model / d->n_heads) - 1) > 1e-6))
        why = d->qk_scale > 0 ? "qk_scale: nGPT's s_qk is in no Hugging Face or GPT-2 model"
            : d->ffn_in_scale > 0 ? "ffn_in_scale: nGPT's s_uv is in no Hugging Face or GPT-2 model"
            : "softmax_scale: Hugging Face and GPT-2 attention scales by 1/sqrt(d_k)";
    if (!why && style != NB_NAMES_NORMBLOCKS && d->value_residual)
        why = "value_residual: no Hugging Face or GPT-2 model mixes the first layer's values in";
    if (!why) return 0;
    fprintf(stderr, "nbimport: --export: this stack cannot be expressed in the %s layout: %s\n",
            style_name(style), why);
    return 1;
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
    if (!rc && !to_dir) printf("nbimport: %s exported to %s (%s%s)\n", model, out, style_name,
                               n_ex ? ", with the embedding and head" : "");
    nb_stack_free(&s);
    free(params);
    close_model(&M);
    return rc;
}

int main(int argc, char** argv) {
    static model_in M;
    st_file In;
    const st_tensor* E;
    nb_ctx ctx;
    nb_stack s;
    nb_name_style style;
    nb_real *params = NULL, *cache = NULL, *scratch = NULL, *in = NULL, *out = NULL;
    int rc = 1, B, T, dm;
    size_t i;
    if (argc == 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        fputs(help, stdout);
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
    memset(&ctx, 0, sizeof ctx);
    memset(&s, 0, sizeof s);
    if (parse_style(argv[1], &style) || open_model(&M, argv[2])) goto done;
    if (st_open(&In, argv[3])) { st_fail(&In); goto done; }
    if (same_file(argv[4], &M, &In)) goto done;
    if (!(E = st_find(&In, "E"))) { fail("%s has no tensor \"E\"", argv[3]); goto done; }
    if (E->ndim != 3) { fail("%s: E is not (B, T, d)", argv[3]); goto done; }
    if (st_check_finite(&In, E)) { st_fail(&In); goto done; }
    for (i = 0; i < 3; i++)
        if (E->shape[i] > 1 << 30) {
            fail("%s: E has a dimension beyond 2^30 in its shape", argv[3]);
            goto done;
        }
    B = (int)E->shape[0];
    T = (int)E->shape[1];
    dm = (int)E->shape[2];
    if (stack_of(&M, style, B, T, &s)) goto done;
    if (dm != s.desc.d_model) { fail("%s: E's width is not d_model", argv[3]); goto done; }
    params = (nb_real*)calloc(s.n_params, sizeof(nb_real));
    cache = (nb_real*)calloc(s.n_cache, sizeof(nb_real));
    scratch = (nb_real*)calloc(s.n_scratch, sizeof(nb_real));
    in = (nb_real*)calloc(E->count + 1, sizeof(nb_real));
    out = (nb_real*)calloc(E->count + 1, sizeof(nb_real));
    if (!params || !cache || !scratch || !in || !out) {
        fail("out of memory");
        goto done;
    }
    if (load(&s, style, &M, params)) goto done;
    for (i = 0; i < E->count; i++) in[i] = (nb_real)st_value(&In, E, i);
    if (nb_stack_forward(&ctx, &s, params, out, in, B, T, cache, scratch)) {
        fail("%s", ctx.err);
        goto done;
    }
    rc = write_out(argv[4], out, B, T, dm);
    if (!rc) printf("nbimport: %s (%s%s%s, %d layers) run on %s: %s\n", argv[2],
                    s.desc.name[0] ? s.desc.name : nb_preset_name(s.desc.preset), M.config[0] ? ", from " : "",
                    M.config, s.desc.n_layers, argv[3], argv[4]);
done:
    nb_stack_free(&s);
    free(params); free(cache); free(scratch); free(in); free(out);
    close_model(&M);
    st_close(&In);
    return rc;
}
