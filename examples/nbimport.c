/* nbimport: load a checkpoint written in another codebase's layout into a normblocks stack and
   run it: the stack's forward on an input, written to a file (to compare with that codebase's
   output). The names and layouts come from the library's name maps (nb_stack_tensor_parts):
   Hugging Face Llama (the Mix-LN and LayerNorm-Scaling codes: separate q/k/v and up/gate
   projections), Hugging Face GPT-2 (Conv1D weights stored transposed), GPT-2 in the nn.Linear
   layout of nanoGPT and llm.c (the same names, nothing transposed), or the library's own.

   usage: nbimport STYLE MODEL.safetensors INPUT.safetensors OUT.safetensors
          nbimport --export STYLE MODEL.safetensors OUT.safetensors
     STYLE   hf-llama | hf-gpt2 | gpt2-linear | normblocks (a GPT-2 file in the other GPT-2
             layout is refused at its first c_attn, naming the style to use: the square
             c_proj cannot be told apart by its shape)
     MODEL   the weights; its __metadata__ describes the stack: preset (any name
             nb_preset_from_name accepts, e.g. pre, mixln, sandwich, gpt2), n_layers, d_model,
             n_heads, n_kv_heads, d_ff, rope (0/1), and optionally norm (rms|layer|dyt), ffn
             (swiglu|gelu_tanh, or gelu as examples/train writes it: gelu_tanh), mixln_alpha (a
             finite number) and attn_bias (0-3, the NB_ATTN_BIAS_* mask: 1 the Q|K|V
             projection's bias, 2 the output projection's; "gpt2" sets 3). Each a JSON string
             (safetensors metadata); a value not listed here is an error, never ignored, and
             so is any other key but "format", "producer" and the training settings
             examples/train writes (an empty "schedule", lr, seed, ...)
     INPUT   a tensor "E" of shape (B, T, d): the embedded input
     OUT     written: "out" (B, T, d), the stack's output
   MODEL's tensors may be F32, F64, F16 or BF16 (most published checkpoints are half
   precision); the output is F32. Every tensor of the stack must be in MODEL with its shape
   (GPT-2's also without the "transformer." prefix, as the hub's files have them); every tensor
   of MODEL must be used, except the embedding and head (model.embed_tokens, lm_head,
   [transformer.]wte, wpe) and Hugging Face's non-weight buffers (GPT-2's attn.bias /
   attn.masked_bias causal masks, older Llama files' rotary_emb.inv_freq).
   --export: the other way: MODEL in the library's names (e.g. a stack's tensors as
   examples/train saves them, without the "transformer." prefix), OUT in STYLE's names and
   layouts, with MODEL's metadata.
   Refused with a message naming the tensor or key (issue 23): a weight (or E) that is not a
   finite float, a shape or data_offsets that are not non-negative integers inside the data and
   of the shape's size, a key named twice in a header or in __metadata__ (readers disagree on
   which counts), OUT naming MODEL or INPUT (the same file: it would be overwritten), a MODEL or
   INPUT that is not a regular file (a FIFO would block), an OUT that exists and is not a
   regular file or whose directory is not writable (checked before any work), a stack larger
   than MODEL's values, a forward whose output is not finite. The files are read by
   examples/safetensors.h, which validates their whole layout first.
   Exit status 0, or 1 with a message. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#define ST_IMPLEMENTATION
#include "safetensors.h"
#define NORMBLOCKS_IMPLEMENTATION
#include "normblocks.h"

static int fail(const char* fmt, const char* a) {
    fprintf(stderr, "nbimport: ");
    fprintf(stderr, fmt, a);
    fprintf(stderr, "\n");
    return 1;
}

/* MODEL's metadata value of key (NULL when absent; the reader checked it is a string) */
static int meta_str(const st_file* f, const char* key, const char** v) {
    *v = st_meta(f, key);
    return 0;
}

static int meta_int(const st_file* f, const char* key, int max, int* out) {
    const char* v = st_meta(f, key);
    const char* p;
    long x = 0;
    if (!v) return fail("MODEL metadata has no \"%s\"", key);
    for (p = v; *p >= '0' && *p <= '9' && x <= max; p++) x = x * 10 + (*p - '0');
    if (p == v || *p || x > max) {
        fprintf(stderr, "nbimport: MODEL metadata \"%s\" is \"%s\", not an integer from 0 to %d\n", key, v, max);
        return 1;
    }
    *out = (int)x;
    return 0;
}

/* Every metadata key is one nbimport reads, or one known not to change the stack's forward
   (the format's, and examples/train's training settings); any other is refused by name. */
static const char* const known_keys[] = {
    "preset", "n_layers", "d_model", "n_heads", "n_kv_heads", "d_ff", "rope", "norm", "ffn", "mixln_alpha",
    "attn_bias", "format", "producer", "schedule", "step", "adam_step", "vocab_size", "embed_scale", "steps",
    "lr", "warmup", "min_lr", "wd", "wd_norms", "beta1", "beta2", "adam_eps", "clip", "seed", "batch", "seq",
    "init", "data", "data_bytes", "data_hash", "eval_batches", "eval_problems", NULL};

/* 1 for a value that is not finite or beyond float's range (nb_real is float unless NB_DOUBLE,
   and the files written are F32: the conversion of such a value is undefined) */
static int bad_value(double v) { return !isfinite(v) || fabs(v) > 3.4028234663852886e38; }

/* the reader's message, as this tool's */
static int st_fail(const st_file* f) { return fail("%s", f->err); }

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

/* Tensors outside the stack: the embeddings and the head, and the buffers Hugging Face files
   may carry (GPT-2's causal masks "attn.bias" / "attn.masked_bias", older Llama files'
   "rotary_emb.inv_freq"), which are not weights. */
static int ignorable(const char* name) {
    static const char* const io[6] = {"model.embed_tokens.weight", "lm_head.weight",
                                      "transformer.wte.weight", "transformer.wpe.weight",
                                      "wte.weight", "wpe.weight"};
    int i;
    for (i = 0; i < 6; i++)
        if (!strcmp(name, io[i])) return 1;
    return ends_with(name, ".attn.bias") || ends_with(name, ".attn.masked_bias") ||
           ends_with(name, ".rotary_emb.inv_freq");
}

/* MODEL's entry of a part: its name, or for GPT-2 also without the "transformer." prefix (the
   hub's GPT2Model files are saved so). */
static const st_tensor* find_part(const st_file* M, const char* name) {
    const st_tensor* t = st_find(M, name);
    if (!t && !strncmp(name, "transformer.", 12)) t = st_find(M, name + 12);
    return t;
}

static int load(const nb_stack* s, nb_name_style style, st_file* M, nb_real* params,
                unsigned char* used) {
    int t, k, i;
    for (t = 0; t < s->n_tensors; t++) {
        const nb_tensor_info* ti = &s->tensors[t];
        nb_tensor_part parts[3];
        const int n = nb_stack_tensor_parts(s, t, style, parts);
        if (n <= 0) return fail("the stack's %s has no name in this layout", ti->name);
        for (k = 0; k < n; k++) {
            const st_tensor* pt = find_part(M, parts[k].name);
            int rows, cols, fr, fc, r, c;
            if (!pt) return fail("MODEL has no %s", parts[k].name);
            if (st_check_finite(M, pt)) return st_fail(M);
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
            used[pt - M->t] = 1;
            for (r = 0; r < rows; r++)
                for (c = 0; c < cols; c++) {
                    const size_t at = parts[k].transposed ? (size_t)c * rows + r : (size_t)r * cols + c;
                    params[ti->offset + (size_t)(parts[k].row0 + r) * cols + c] = (nb_real)st_value(M, pt, at);
                }
        }
    }
    for (i = 0; i < M->n; i++) /* every tensor of MODEL has a place */
        if (!used[i] && !ignorable(M->t[i].name)) return fail("%s has no place in this stack", M->t[i].name);
    return 0;
}

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

/* --export: every tensor of the stack (params) under STYLE's names into path: the header
   first, then the data in the same order. */
static int export_to(const char* path, const nb_stack* s, nb_name_style style,
                     const nb_real* params, const st_file* M) {
    cJSON* root = cJSON_CreateObject();
    char err[512];
    FILE* f = st_create(path, err, sizeof err);
    size_t off = 0;
    int pass, t, k;
    if (!f) { cJSON_Delete(root); return fail("%s", err); }
    if (M->meta) cJSON_AddItemToObject(root, "__metadata__", cJSON_Duplicate(M->meta, 1));
    for (pass = 0; pass < 2; pass++) { /* 0: the header entries, 1: the data */
        if (pass == 1) st_put_header(f, root);
        for (t = 0; t < s->n_tensors; t++) {
            const nb_tensor_info* ti = &s->tensors[t];
            nb_tensor_part parts[3];
            const int n = nb_stack_tensor_parts(s, t, style, parts);
            const int cols = ti->ndim == 2 ? ti->cols : 1;
            if (n <= 0) {
                fclose(f);
                remove(path);
                cJSON_Delete(root);
                return fail("%s has no name in this layout", ti->name);
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
                            const float v = (float)(tr ? base[(size_t)c * cols + r]
                                                       : base[(size_t)r * cols + c]);
                            fwrite(&v, 4, 1, f);
                        }
            }
        }
    }
    cJSON_Delete(root);
    if (ferror(f) | fclose(f)) return fail("writing %s failed", path);
    return 0;
}

static int bad_meta(const char* key, const char* v, const char* known) {
    fprintf(stderr, "nbimport: MODEL metadata \"%s\" is \"%s\", not %s\n", key, v, known);
    return 1;
}

/* 1 with a message when out (to be written) is the same file as in (read) */
static int same_file(const char* out, const st_file* in) {
    struct stat sb;
    char err[512];
    if (st_check_output(out, err, sizeof err)) return fail("%s", err);
    if (stat(out, &sb) == 0 && sb.st_dev == in->dev && sb.st_ino == in->ino) {
        fprintf(stderr, "nbimport: OUT %s is the same file as %s: refused (it would be overwritten)\n", out,
                in->path);
        return 1;
    }
    return 0;
}

/* The stack that MODEL's metadata describes, for batches of B x T. */
static int stack_of(const st_file* M, int B, int T, nb_stack* s) {
    nb_ctx ctx;
    nb_stack_desc d;
    const char *preset, *v;
    memset(&ctx, 0, sizeof ctx);
    memset(&d, 0, sizeof d);
    if (meta_str(M, "preset", &preset)) return 1;
    if (!preset) return fail("MODEL metadata has no \"%s\"", "preset");
    if (nb_preset_from_name(&ctx, &d, preset)) return fail("%s", ctx.err);
    if (meta_int(M, "n_layers", 1 << 24, &d.n_layers) || meta_int(M, "d_model", 1 << 24, &d.d_model) ||
        meta_int(M, "n_heads", 1 << 24, &d.n_heads) || meta_int(M, "n_kv_heads", 1 << 24, &d.n_kv_heads) ||
        meta_int(M, "d_ff", 1 << 24, &d.d_ff) || meta_int(M, "rope", 1, &d.rope))
        return 1;
    /* the optional keys: a value not known is an error, never ignored */
    if (meta_str(M, "norm", &v)) return 1;
    if (v) {
        if (!strcmp(v, "rms")) d.norm = NB_NORM_RMS;
        else if (!strcmp(v, "layer")) d.norm = NB_NORM_LAYER;
        else if (!strcmp(v, "dyt")) d.norm = NB_NORM_DYT;
        else return bad_meta("norm", v, "rms, layer or dyt");
    }
    if (meta_str(M, "ffn", &v)) return 1;
    if (v) {
        if (!strcmp(v, "swiglu")) d.ffn = NB_FFN_SWIGLU;
        else if (!strcmp(v, "gelu_tanh") || !strcmp(v, "gelu")) d.ffn = NB_FFN_GELU_TANH; /* gelu: examples/train's name */
        else return bad_meta("ffn", v, "swiglu, gelu_tanh or gelu (= gelu_tanh, as examples/train writes it)");
    }
    if (meta_str(M, "mixln_alpha", &v)) return 1;
    if (v) {
        char* end;
        errno = 0;
        d.mixln_alpha = strtod(v, &end);
        if (!*v || !strchr("+-.0123456789", *v) || *end || errno == ERANGE || !isfinite(d.mixln_alpha))
            return bad_meta("mixln_alpha", v, "a finite number");
    }
    if (meta_str(M, "attn_bias", &v)) return 1;
    if (v) {
        if (strlen(v) != 1 || *v < '0' || *v > '3') return bad_meta("attn_bias", v, "0, 1, 2 or 3");
        d.attn_bias = (unsigned)(*v - '0');
    }
    d.check_finite = 1; /* a forward that overflows fails naming the layer, no Inf/NaN output */
    if (nb_stack_init(&ctx, s, &d, B, T)) return fail("%s", ctx.err);
    {   /* every parameter comes from MODEL: a stack larger than its values is refused before
           its buffers are allocated (metadata of a huge model on a small file) */
        size_t values = 0;
        int i;
        for (i = 0; i < M->n; i++) values += M->t[i].count;
        if (s->n_params > values) {
            fprintf(stderr, "nbimport: MODEL metadata describes a stack of %zu parameters; %s holds %zu values\n",
                    s->n_params, M->path, values);
            return 1;
        }
    }
    return 0;
}

static int parse_style(const char* a, nb_name_style* style) {
    if (!strcmp(a, "hf-llama")) *style = NB_NAMES_HF_LLAMA;
    else if (!strcmp(a, "hf-gpt2")) *style = NB_NAMES_HF_GPT2;
    else if (!strcmp(a, "gpt2-linear")) *style = NB_NAMES_GPT2_LINEAR;
    else if (!strcmp(a, "normblocks")) *style = NB_NAMES_NORMBLOCKS;
    else return fail("unknown layout \"%s\" (hf-llama, hf-gpt2, gpt2-linear, normblocks)", a);
    return 0;
}

/* MODEL opened, with metadata this tool knows (and no per-layer schedule, which it cannot run) */
static int open_model(st_file* M, const char* path) {
    const char* sched;
    if (st_open(M, path) || st_meta_known(M, known_keys, "nbimport")) return st_fail(M);
    sched = st_meta(M, "schedule");
    if (sched && *sched) return fail("MODEL metadata \"schedule\" is \"%s\": a per-layer placement nbimport cannot run", sched);
    return 0;
}

/* --export: a stack the target codebase's own model code would run as another model is refused,
   naming the field (the names alone could hold it: a GQA + SwiGLU stack fits GPT-2's tensor
   names, and GPT-2 code would load it and compute something else). */
static int exportable(const nb_stack* s, nb_name_style style) {
    const nb_stack_desc* d = &s->desc;
    const char* why = NULL;
    if (style == NB_NAMES_HF_GPT2 || style == NB_NAMES_GPT2_LINEAR) {
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
    }
    if (!why) return 0;
    fprintf(stderr, "nbimport: --export: this stack cannot be expressed in the %s layout: %s\n",
            style == NB_NAMES_HF_LLAMA ? "hf-llama" : style == NB_NAMES_HF_GPT2 ? "hf-gpt2" : "gpt2-linear", why);
    return 1;
}

static int run_export(int argc, char** argv) {
    st_file M;
    nb_stack s;
    nb_name_style style;
    nb_real* params = NULL;
    unsigned char* used = NULL;
    int rc = 1;
    memset(&M, 0, sizeof M);
    memset(&s, 0, sizeof s);
    if (argc != 5) return fail("usage: nbimport --export STYLE MODEL.safetensors OUT.safetensors%s", "");
    if (!parse_style(argv[2], &style) && !open_model(&M, argv[3]) && !same_file(argv[4], &M) &&
        !stack_of(&M, 1, 1, &s) && !exportable(&s, style)) {
        params = (nb_real*)calloc(s.n_params ? s.n_params : 1, sizeof(nb_real));
        used = (unsigned char*)calloc((size_t)M.n + 1, 1);
        if (!params || !used) fail("out of memory%s", "");
        else if (!load(&s, NB_NAMES_NORMBLOCKS, &M, params, used))
            rc = export_to(argv[4], &s, style, params, &M);
    }
    if (!rc) printf("nbimport: %s exported to %s (%s)\n", argv[3], argv[4], argv[2]);
    nb_stack_free(&s);
    free(params);
    free(used);
    st_close(&M);
    return rc;
}

int main(int argc, char** argv) {
    st_file M, In;
    const st_tensor* E;
    nb_ctx ctx;
    nb_stack s;
    nb_name_style style;
    nb_real *params = NULL, *cache = NULL, *scratch = NULL, *in = NULL, *out = NULL;
    unsigned char* used = NULL;
    int rc = 1, B, T, dm;
    size_t i;
    if (argc > 1 && !strcmp(argv[1], "--export")) return run_export(argc, argv);
    if (argc != 5) {
        fprintf(stderr, "usage: nbimport hf-llama|hf-gpt2|gpt2-linear|normblocks MODEL.safetensors "
                        "INPUT.safetensors OUT.safetensors\n"
                        "       nbimport --export hf-llama|hf-gpt2|gpt2-linear|normblocks MODEL.safetensors "
                        "OUT.safetensors\n");
        return 1;
    }
    memset(&M, 0, sizeof M);
    memset(&In, 0, sizeof In);
    memset(&ctx, 0, sizeof ctx);
    memset(&s, 0, sizeof s);
    if (parse_style(argv[1], &style) || open_model(&M, argv[2])) goto done;
    if (st_open(&In, argv[3])) { st_fail(&In); goto done; }
    if (same_file(argv[4], &M) || same_file(argv[4], &In)) goto done;
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
    if (stack_of(&M, B, T, &s)) goto done;
    if (dm != s.desc.d_model) { fail("%s: E's width is not d_model", argv[3]); goto done; }
    params = (nb_real*)calloc(s.n_params, sizeof(nb_real));
    cache = (nb_real*)calloc(s.n_cache, sizeof(nb_real));
    scratch = (nb_real*)calloc(s.n_scratch, sizeof(nb_real));
    in = (nb_real*)calloc(E->count + 1, sizeof(nb_real));
    out = (nb_real*)calloc(E->count + 1, sizeof(nb_real));
    used = (unsigned char*)calloc((size_t)M.n + 1, 1);
    if (!params || !cache || !scratch || !in || !out || !used) {
        fail("out of memory%s", "");
        goto done;
    }
    if (load(&s, style, &M, params, used)) goto done;
    for (i = 0; i < E->count; i++) in[i] = (nb_real)st_value(&In, E, i);
    if (nb_stack_forward(&ctx, &s, params, out, in, B, T, cache, scratch)) {
        fail("%s", ctx.err);
        goto done;
    }
    rc = write_out(argv[4], out, B, T, dm);
    if (!rc) printf("nbimport: %s (%s, %d layers) run on %s: %s\n", argv[2],
                    s.desc.name[0] ? s.desc.name : nb_preset_name(s.desc.preset),
                    s.desc.n_layers, argv[3], argv[4]);
done:
    nb_stack_free(&s);
    free(params); free(cache); free(scratch); free(in); free(out); free(used);
    st_close(&M);
    st_close(&In);
    return rc;
}
