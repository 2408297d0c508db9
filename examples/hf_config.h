/* hf_config.h: a Hugging Face config.json as a normblocks stack description, and the config.json
   of a stack (nbimport). Include once, after normblocks.h and safetensors.h; needs cJSON.

   Families (model_type) and what they are in the library:
     llama   Pre-LN, RMSNorm, SwiGLU (hidden_act "silu"), RoPE; attention_bias: Q, K, V and O biases
     mistral llama, when its sliding_window is null (full attention: Mistral's class is then Llama's)
     qwen2   llama with Q, K, V biases (no O bias), as its code hard-codes
     qwen3   llama with per-head RMSNorm on Q and K before RoPE (q_norm, k_norm: one gain of head_dim);
             its attention_bias, like Llama's, on Q, K, V and O
     olmo2   the olmo2 preset: x + N(F(x)) on each sublayer, RMSNorm over the whole Q and K projections
     gpt2    the gpt2 preset: Pre-LN, LayerNorm, GELU (tanh: "gelu_new"), every projection's bias,
             no RoPE (its learned positions are added with the embedding, outside the stack)
   Every key of config.json is either honoured (the shape, eps, rope_theta, the biases), checked
   to hold the only value the library computes (hidden_act, rope_scaling null, no sliding window,
   head_dim = hidden_size / num_attention_heads, ...), or known not to change the stack's forward
   (token ids, vocabulary and context sizes, dropout, dtype, tie_word_embeddings: the embedding and
   head are outside the stack); any other key is refused by name, never ignored. The file is read
   as Python's json (transformers) reads it, or refused by name: one JSON object and nothing
   after it, no key twice (json keeps the last, cJSON the first), every value of the JSON type its
   key has, every number representable in the library's float. */

typedef struct hf_family {
    const char* model_type, *architecture, *preset;
    nb_name_style style;
} hf_family;

static const hf_family hf_families[] = {
    {"llama", "LlamaForCausalLM", "pre", NB_NAMES_HF_LLAMA},
    {"qwen2", "Qwen2ForCausalLM", "pre", NB_NAMES_HF_LLAMA},
    {"mistral", "MistralForCausalLM", "pre", NB_NAMES_HF_LLAMA},
    {"qwen3", "Qwen3ForCausalLM", "pre", NB_NAMES_HF_LLAMA},
    {"olmo2", "Olmo2ForCausalLM", "olmo2", NB_NAMES_HF_LLAMA},
    {"gpt2", "GPT2LMHeadModel", "gpt2", NB_NAMES_HF_GPT2}};
#define HF_N_FAMILIES ((int)(sizeof hf_families / sizeof hf_families[0]))

/* keys that do not change the stack's forward */
static const char* const hf_inert[] = {
    "architectures", "model_type", "_name_or_path", "torch_dtype", "dtype", "transformers_version",
    "bos_token_id", "eos_token_id", "pad_token_id", "vocab_size", "max_position_embeddings", "n_positions",
    "n_ctx", "initializer_range", "use_cache", "tie_word_embeddings", "attention_dropout", "attn_pdrop",
    "resid_pdrop", "embd_pdrop", "summary_type", "summary_use_proj", "summary_activation",
    "summary_proj_to_labels", "summary_first_dropout", "task_specific_params", "pretraining_tp",
    "reorder_and_upcast_attn", "sliding_window", "max_window_layers", "id2label", "label2id",
    "output_attentions", "output_hidden_states", "return_dict", "torchscript", "use_bfloat16",
    "tokenizer_class", "pruned_heads", "chunk_size_feed_forward", "is_encoder_decoder", "is_decoder",
    "problem_type", NULL};

typedef struct hf_reader {
    const cJSON* root;
    const char* path;
    const char* used[64];
    int n_used;
    char* err;
    size_t n_err;
} hf_reader;

static int hf_fail(hf_reader* r, const char* fmt, ...) {
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(r->err, r->n_err, "%.400s: %s", r->path, msg);
    return 1;
}

static const cJSON* hf_get(hf_reader* r, const char* key) {
    const cJSON* v = cJSON_GetObjectItemCaseSensitive(r->root, key);
    if (v && r->n_used < 64) r->used[r->n_used++] = key;
    return v && !cJSON_IsNull(v) ? v : NULL;
}

/* a positive integer key (required), or 0 and *out unchanged when absent and optional */
static int hf_int(hf_reader* r, const char* key, int required, int* out) {
    const cJSON* v = hf_get(r, key);
    if (!v) return required ? hf_fail(r, "\"%s\" is missing", key) : 0;
    if (!cJSON_IsNumber(v) || v->valuedouble < 1 || v->valuedouble > (1 << 24) || v->valuedouble != floor(v->valuedouble))
        return hf_fail(r, "\"%s\" is not an integer from 1 to 2^24", key);
    *out = (int)v->valuedouble;
    return 0;
}

static int hf_real(hf_reader* r, const char* key, double lo, nb_real* out) {
    const cJSON* v = hf_get(r, key);
    if (!v) return 0;
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || !(v->valuedouble > lo))
        return hf_fail(r, "\"%s\" is not a finite number above the library's bound", key);
    if (!((nb_real)v->valuedouble > (nb_real)lo) || !isfinite((double)(nb_real)v->valuedouble))
        return hf_fail(r, "\"%s\" (%g) is out of the library's float range", key, v->valuedouble);
    *out = (nb_real)v->valuedouble;
    return 0;
}

static int hf_bool(hf_reader* r, const char* key, int* out) {
    const cJSON* v = hf_get(r, key);
    if (!v) return 0;
    if (!cJSON_IsBool(v)) return hf_fail(r, "\"%s\" is not true or false", key);
    *out = cJSON_IsTrue(v);
    return 0;
}

/* key, when present, must be one of the values the library computes (a string, or a bool) */
static int hf_must(hf_reader* r, const char* key, const char* const* ok, const char* what) {
    const cJSON* v = hf_get(r, key);
    int i;
    if (!v) return 0;
    for (i = 0; ok[i]; i++) {
        if (cJSON_IsString(v) && !strcmp(v->valuestring, ok[i])) return 0;
        if (cJSON_IsBool(v) && !strcmp(ok[i], cJSON_IsTrue(v) ? "true" : "false")) return 0;
    }
    return hf_fail(r, "\"%s\" has a value the library does not compute (it has %s)", key, what);
}

/* The offset of the first byte of text that Python's json (transformers opens config.json as
   UTF-8 text) would not read as cJSON does, or -1: a sequence that is not UTF-8, a control
   character (below 0x20) inside a string or, other than tab, newline and return, between
   tokens (cJSON's white space is any byte up to 0x20), or the escape \u0000 (json keeps the
   NUL in the string, cJSON ends the string there: "llama\u0000x" would read as "llama"). */
static long hf_unreadable(const unsigned char* t, size_t n) {
    size_t i = 0;
    int in_string = 0, escaped = 0;
    while (i < n) {
        const unsigned c = t[i];
        size_t k, len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        if (!len || i + len > n) return (long)i;
        for (k = 1; k < len; k++)
            if ((t[i + k] >> 6) != 2) return (long)i;
        if (len == 2 && c < 0xC2) return (long)i;                          /* overlong */
        if (len == 3 && ((c == 0xE0 && t[i + 1] < 0xA0) || (c == 0xED && t[i + 1] >= 0xA0)))
            return (long)i;                                                /* overlong, surrogate */
        if (len == 4 && ((c == 0xF0 && t[i + 1] < 0x90) || c > 0xF4 || (c == 0xF4 && t[i + 1] >= 0x90)))
            return (long)i;                                                /* overlong, > U+10FFFF */
        if (c < 0x20 && (in_string || (c != '\t' && c != '\n' && c != '\r'))) return (long)i;
        if (in_string) {
            if (escaped) {
                escaped = 0;
                if (c == 'u' && i + 5 <= n && !memcmp(t + i + 1, "0000", 4)) return (long)i - 1;
            }
            else if (c == '\\') escaped = 1;
            else if (c == '"') in_string = 0;
        } else if (c == '"') {
            in_string = 1;
        }
        i += len;
    }
    return -1;
}

/* the first key of object o that appears twice in it, or NULL */
static const char* hf_twice(const cJSON* o) {
    const cJSON *a, *b;
    for (a = o ? o->child : NULL; a; a = a->next)
        for (b = a->next; b; b = b->next)
            if (a->string && b->string && !strcmp(a->string, b->string)) return a->string;
    return NULL;
}

/* path's config.json into d (zeroed first) and the family's name style; 1 with err */
static int hf_config_read(const char* path, nb_stack_desc* d, const hf_family** fam, char* err, size_t n_err) {
    static const char* const silu[] = {"silu", NULL}, *const gelu[] = {"gelu_new", "gelu_pytorch_tanh", NULL};
    static const char* const no[] = {"false", NULL}, *const yes[] = {"true", NULL};
    unsigned char* text = NULL;
    size_t len = 0;
    cJSON* root;
    hf_reader r;
    const cJSON *mt, *e;
    int i, rc = 1, heads = 0, head_dim = 0, bias = 0, gpt2;
    long bad;
    memset(d, 0, sizeof *d);
    memset(&r, 0, sizeof r);
    r.path = path;
    r.err = err;
    r.n_err = n_err;
    if (st_read_file(path, &text, &len, err, n_err, NULL, NULL)) return 1;
    if ((bad = hf_unreadable(text, len)) >= 0) {
        free(text);
        return hf_fail(&r, "byte %ld is not JSON text as transformers reads it (a control character, "
                       "\\u0000, or not UTF-8)", bad);
    }
    {   /* one object, then only white space (cJSON alone stops at the object's end) */
        const char* end = NULL;
        root = cJSON_ParseWithLengthOpts((const char*)text, len, &end, 0);
        /* strchr finds the terminator too: a NUL byte is text, not white space (json refuses it) */
        while (root && end && end < (const char*)text + len && *end && strchr(" \t\r\n", *end)) end++;
        if (root && end != (const char*)text + len) {
            const size_t at = (size_t)(end - (const char*)text);
            cJSON_Delete(root);
            free(text);
            return hf_fail(&r, "has text after its JSON object (byte %zu)", at);
        }
    }
    free(text);
    r.root = root;
    if (!cJSON_IsObject(root)) { cJSON_Delete(root); return hf_fail(&r, "not a JSON object"); }
    if (hf_twice(root)) { /* Python's json keeps the last value, cJSON the first: refused */
        hf_fail(&r, "\"%s\" is given twice (transformers would take the last value)", hf_twice(root));
        cJSON_Delete(root);
        return 1;
    }
    mt = hf_get(&r, "model_type");
    for (i = 0; i < HF_N_FAMILIES && !(cJSON_IsString(mt) && !strcmp(mt->valuestring, hf_families[i].model_type)); i++) {}
    if (i == HF_N_FAMILIES) {
        hf_fail(&r, "\"model_type\" is %s: nbimport reads llama, mistral, qwen2, qwen3, olmo2 and gpt2",
                cJSON_IsString(mt) ? mt->valuestring : "missing or not a string");
        goto done;
    }
    *fam = &hf_families[i];
    gpt2 = !strcmp((*fam)->model_type, "gpt2");
    {
        nb_ctx ctx;
        memset(&ctx, 0, sizeof ctx);
        if (nb_preset_from_name(&ctx, d, (*fam)->preset)) { snprintf(err, n_err, "%s", ctx.err); goto done; }
    }
    if (gpt2) {
        if (hf_int(&r, "n_layer", 1, &d->n_layers) || hf_int(&r, "n_embd", 1, &d->d_model) ||
            hf_int(&r, "n_head", 1, &heads) || hf_int(&r, "n_inner", 0, &d->ffn.d_ff) ||
            hf_real(&r, "layer_norm_epsilon", 0, &d->norm.eps) || hf_must(&r, "activation_function", gelu, "GELU tanh: gelu_new") ||
            hf_must(&r, "scale_attn_weights", yes, "1/sqrt(d_k) scaling") ||
            hf_must(&r, "scale_attn_by_inverse_layer_idx", no, "no per-layer scaling"))
            goto done;
        d->n_heads = d->n_kv_heads = heads;
        if (!d->ffn.d_ff) d->ffn.d_ff = 4 * d->d_model; /* n_inner null: 4 n_embd, as GPT-2's code */
        if (!d->norm.eps) d->norm.eps = (nb_real)1e-5;  /* GPT2Config's layer_norm_epsilon */
    } else {
        d->n_kv_heads = 0;
        const int qwen = !strncmp((*fam)->model_type, "qwen", 4);
        /* absent keys mean the classes' defaults: Qwen2/3 have 32 KV heads, Qwen3 head_dim 128 */
        if (qwen) d->n_kv_heads = 32;
        if (!strcmp((*fam)->model_type, "qwen3")) head_dim = 128;
        if (hf_int(&r, "num_hidden_layers", 1, &d->n_layers) || hf_int(&r, "hidden_size", 1, &d->d_model) ||
            hf_int(&r, "num_attention_heads", 1, &d->n_heads) || hf_int(&r, "num_key_value_heads", 0, &d->n_kv_heads) ||
            hf_int(&r, "intermediate_size", 1, &d->ffn.d_ff) || hf_int(&r, "head_dim", 0, &head_dim) ||
            hf_real(&r, "rms_norm_eps", 0, &d->norm.eps) || hf_real(&r, "rope_theta", 1, &d->attn.rope_theta) ||
            hf_bool(&r, "attention_bias", &bias) || hf_must(&r, "hidden_act", silu, "SwiGLU: silu") ||
            hf_must(&r, "mlp_bias", no, "no MLP biases") || hf_must(&r, "use_sliding_window", no, "full attention"))
            goto done;
        if (head_dim && head_dim * d->n_heads != d->d_model) {
            hf_fail(&r, "\"head_dim\"%s is not hidden_size / num_attention_heads (the library's heads split d_model)",
                    hf_get(&r, "head_dim") ? "" : " (absent: qwen3's default 128)");
            goto done;
        }
        if (!strcmp((*fam)->model_type, "mistral") && hf_get(&r, "sliding_window")) {
            hf_fail(&r, "\"sliding_window\" is set: the library computes full attention (Mistral with "
                    "sliding_window null is Llama)");
            goto done;
        }
        if ((e = hf_get(&r, "rope_parameters")) != NULL) {
            const cJSON* x;
            if (!cJSON_IsObject(e) || hf_twice(e)) {
                hf_fail(&r, "\"rope_parameters\" is not an object of distinct keys");
                goto done;
            }
            cJSON_ArrayForEach(x, e) {
                if (!strcmp(x->string, "rope_theta") && cJSON_IsNumber(x) && isfinite(x->valuedouble) && x->valuedouble > 1)
                    d->attn.rope_theta = (nb_real)x->valuedouble;
                else if (!(strcmp(x->string, "rope_type") == 0 && cJSON_IsString(x) && !strcmp(x->valuestring, "default"))) {
                    hf_fail(&r, "\"rope_parameters\" has \"%s\": only the default RoPE with a rope_theta above 1 is computed",
                            x->string);
                    goto done;
                }
            }
        }
        if (!d->norm.eps) d->norm.eps = (nb_real)(!strcmp((*fam)->model_type, "olmo2") ? 1e-5 : 1e-6); /* the classes' defaults */
        if (!d->attn.rope_theta) d->attn.rope_theta = 10000;
        d->attn.rope = 1;
        d->norm.type = NB_NORM_RMS;
        d->ffn.type = NB_FFN_SWIGLU;
        /* Llama and OLMo-2 put attention_bias on Q, K, V and O; Qwen2 hard-codes Q, K, V */
        d->attn.bias = !strcmp((*fam)->model_type, "qwen2") ? NB_ATTN_BIAS_QKV
                       : bias ? NB_ATTN_BIAS_QKV | NB_ATTN_BIAS_OUT : 0;
        if (!strcmp((*fam)->model_type, "qwen3")) {
            d->attn.sites = NB_SITE_Q | NB_SITE_K;
            d->attn.site_width = NB_WIDTH_PER_HEAD;
        }
        if ((e = hf_get(&r, "rope_scaling")) != NULL) {
            hf_fail(&r, "\"rope_scaling\" is set: the library's RoPE has no scaling (only null is computed)");
            goto done;
        }
        if ((e = hf_get(&r, "layer_types")) != NULL) {
            const cJSON* x;
            int full = cJSON_IsArray(e);
            cJSON_ArrayForEach(x, e) full &= cJSON_IsString(x) && !strcmp(x->valuestring, "full_attention");
            if (!full) { hf_fail(&r, "\"layer_types\" has layers other than full_attention"); goto done; }
        }
    }
    cJSON_ArrayForEach(e, root) { /* every key honoured, checked or inert; any other refused */
        int known = 0;
        for (i = 0; i < r.n_used && !known; i++) known = !strcmp(r.used[i], e->string);
        for (i = 0; hf_inert[i] && !known; i++) known = !strcmp(hf_inert[i], e->string);
        if (!known) {
            hf_fail(&r, "\"%s\" is not a setting nbimport knows for model_type %s: refused rather than ignored",
                    e->string, (*fam)->model_type);
            goto done;
        }
    }
    rc = 0;
done:
    cJSON_Delete(root);
    return rc;
}

/* a float32 value as the shortest decimal that rounds back to it (1e-06, not 9.99999997e-07) */
static double hf_short(double v) {
    char buf[32];
    int p;
    for (p = 1; p < 17; p++) {
        snprintf(buf, sizeof buf, "%.*g", p, v);
        if ((float)strtod(buf, NULL) == (float)v) break;
    }
    return strtod(buf, NULL);
}

/* config.json of stack s as family fam, vocabulary vocab, GPT-2's positions (the rows of wpe) */
static char* hf_config_json(const nb_stack* s, const hf_family* fam, int vocab, int positions) {
    const nb_stack_desc* d = &s->desc;
    cJSON *o = cJSON_CreateObject(), *arch = cJSON_AddArrayToObject(o, "architectures");
    char* json;
    cJSON_AddItemToArray(arch, cJSON_CreateString(fam->architecture));
    cJSON_AddStringToObject(o, "model_type", fam->model_type);
    if (!strcmp(fam->model_type, "gpt2")) {
        cJSON_AddNumberToObject(o, "n_layer", d->n_layers);
        cJSON_AddNumberToObject(o, "n_embd", d->d_model);
        cJSON_AddNumberToObject(o, "n_head", d->n_heads);
        cJSON_AddNumberToObject(o, "n_inner", d->ffn.d_ff);
        cJSON_AddNumberToObject(o, "layer_norm_epsilon", hf_short((double)d->norm.eps));
        cJSON_AddStringToObject(o, "activation_function", "gelu_new");
        cJSON_AddNumberToObject(o, "n_positions", positions);
    } else {
        cJSON_AddNumberToObject(o, "num_hidden_layers", d->n_layers);
        cJSON_AddNumberToObject(o, "hidden_size", d->d_model);
        cJSON_AddNumberToObject(o, "num_attention_heads", d->n_heads);
        cJSON_AddNumberToObject(o, "num_key_value_heads", d->n_kv_heads);
        cJSON_AddNumberToObject(o, "intermediate_size", d->ffn.d_ff);
        cJSON_AddNumberToObject(o, "head_dim", d->d_model / d->n_heads);
        cJSON_AddNumberToObject(o, "rms_norm_eps", hf_short((double)d->norm.eps));
        cJSON_AddNumberToObject(o, "rope_theta", (double)d->attn.rope_theta);
        cJSON_AddStringToObject(o, "hidden_act", "silu");
        cJSON_AddBoolToObject(o, "attention_bias", d->attn.bias == (NB_ATTN_BIAS_QKV | NB_ATTN_BIAS_OUT));
        cJSON_AddNullToObject(o, "rope_scaling");
    }
    cJSON_AddNumberToObject(o, "vocab_size", vocab);
    cJSON_AddBoolToObject(o, "tie_word_embeddings", 0);
    cJSON_AddStringToObject(o, "torch_dtype", "float32");
    json = cJSON_Print(o);
    cJSON_Delete(o);
    return json;
}
