/* nbimport's config.json reader (examples/hf_config.h: hf_config_read) under hostile bytes, read
   as Python's json (and so transformers) reads the file, or refused by name. On every input: no
   crash or sanitizer report; hf_config_read returns 0, or 1 with a message naming the file. What
   it promises is checked here by separate code (cJSON's parser and this file's own scans):
     - a file with text after its JSON object, or a key twice in its object, is refused (json
       reads the first, keeps the last value: there is no agreeing reading), and so is one with
       a control character json refuses (cJSON takes them: found by libFuzzer);
     - an accepted file is one JSON object of a family nbimport names (model_type), its shape keys
       are positive integers equal to the description's (num_hidden_layers / n_layer, hidden_size
       / n_embd, num_attention_heads / n_head), its eps finite and above 0 in float, and the
       description is one nb_stack_init takes (small shapes) or refuses with a message; a taken
       one written back as config.json (hf_config_json, what nbimport --export writes) reads
       back as the same description.

   libFuzzer (clang -fsanitize=fuzzer,address,undefined, NB_LIBFUZZER defined): any input.
   Otherwise a deterministic randomized driver (gcc, also under ASan in the normal test builds):
       fuzz_hfconfig [iterations]        the seeds, then mutations of them
       fuzz_hfconfig --corpus FILE...    run the given inputs (the seed corpus)
       fuzz_hfconfig --write-seeds DIR   write the seed corpus
   The driver also checks that every seed is accepted and that the mutations which must be
   refused are: a key given twice, text after the object (NUL bytes too), an unknown key, a
   value of another JSON type, an eps that underflows float, a control character in a key, a
   byte that is not UTF-8, an escaped NUL. */
#define _POSIX_C_SOURCE 200809L
#define _XOPEN_SOURCE 700 /* realpath, fsync: safetensors.h's writers */
#define NORMBLOCKS_IMPLEMENTATION
#include "../../normblocks.h"
#define ST_IMPLEMENTATION
#include "../../examples/safetensors.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../examples/hf_config.h"

static int g_failures;
static char g_path[64];

static void check(int ok, const char* what) {
    if (ok) return;
    printf("FAIL: %s\n", what);
    g_failures++;
#ifdef NB_LIBFUZZER
    abort();
#endif
}

/* the input as the file hf_config_read reads (a private temporary directory, made once and
   removed by done()) */
static void write_input(const uint8_t* data, size_t size) {
    FILE* f;
    if (!g_path[0]) {
        char dir[] = "/tmp/fuzz_hfconfig.XXXXXX";
        if (!mkdtemp(dir)) abort();
        snprintf(g_path, sizeof g_path, "%s/config.json", dir);
    }
    if (!(f = fopen(g_path, "wb")) || (size && fwrite(data, 1, size, f) != size) || fclose(f)) abort();
}

/* json's view, by cJSON and this file's scans: 1 when the bytes are one JSON object with nothing
   but white space after it and no key twice at its top level; *root is the parsed object */
static int one_object(const uint8_t* data, size_t size, cJSON** root) {
    const char* end = NULL;
    const cJSON *a, *b;
    *root = cJSON_ParseWithLengthOpts((const char*)data, size, &end, 0);
    if (!*root || !cJSON_IsObject(*root)) return 0;
    while (end < (const char*)data + size && *end && strchr(" \t\r\n", *end)) end++;
    if (end != (const char*)data + size) return 0;
    for (a = (*root)->child; a; a = a->next)
        for (b = a->next; b; b = b->next)
            if (!strcmp(a->string, b->string)) return 0;
    return 1;
}

/* the stack's config.json (as nbimport --export writes it) read back: the same description */
static void round_trip(const nb_stack* s, const hf_family* fam) {
    char* json = hf_config_json(s, fam, 256, 128);
    const nb_stack_desc* a = &s->desc;
    nb_stack_desc b;
    const hf_family* fb = NULL;
    char err[1024];
    int rc;
    write_input((const uint8_t*)json, strlen(json));
    rc = hf_config_read(g_path, &b, &fb, err, sizeof err);
    check(rc == 0 && fb == fam, "the written config.json reads back, as its family");
    if (!rc)
        check(b.n_layers == a->n_layers && b.d_model == a->d_model && b.n_heads == a->n_heads &&
                  (b.n_kv_heads ? b.n_kv_heads : b.n_heads) == a->n_kv_heads &&
                  b.ffn.d_ff == a->ffn.d_ff && b.norm.eps == a->norm.eps &&
                  b.attn.rope == a->attn.rope && b.attn.bias == a->attn.bias &&
                  (!a->attn.rope || b.attn.rope_theta == a->attn.rope_theta),
              "the written config.json reads back as the same description");
    free(json);
}

/* an integer key of the object equal to v (the description's value) */
static int same_int(const cJSON* root, const char* key, int v) {
    const cJSON* x = cJSON_GetObjectItemCaseSensitive(root, key);
    return cJSON_IsNumber(x) && x->valuedouble >= 1 && x->valuedouble == (double)v;
}

static int read_config(const uint8_t* data, size_t size) {
    nb_stack_desc d;
    const hf_family* fam = NULL;
    char err[1024];
    cJSON* root = NULL;
    int rc, whole;
    write_input(data, size);
    err[0] = 0;
    rc = hf_config_read(g_path, &d, &fam, err, sizeof err);
    whole = one_object(data, size, &root);
    check(rc == 0 || rc == 1, "hf_config_read returns 0 or 1");
    if (rc) {
        check(!strncmp(err, g_path, strlen(g_path)) && strlen(err) > strlen(g_path) + 2,
              "a refusal's message names the file and says why");
    } else {
        const int gpt2 = fam && !strcmp(fam->model_type, "gpt2");
        const cJSON* mt = whole ? cJSON_GetObjectItemCaseSensitive(root, "model_type") : NULL;
        size_t i;
        int control = 0;
        for (i = 0; i < size; i++) control |= data[i] < 0x20 && !strchr("\t\n\r", data[i]);
        check(!control, "an accepted file has no control character but tab, newline and return");
        check(whole, "an accepted file is one object with no key twice and nothing after it");
        check(fam && cJSON_IsString(mt) && !strcmp(mt->valuestring, fam->model_type),
              "its family is its model_type");
        check(same_int(root, gpt2 ? "n_layer" : "num_hidden_layers", d.n_layers) &&
                  same_int(root, gpt2 ? "n_embd" : "hidden_size", d.d_model) &&
                  same_int(root, gpt2 ? "n_head" : "num_attention_heads", d.n_heads),
              "the shape is the file's");
        check(d.norm.eps > 0 && isfinite((double)d.norm.eps), "eps is finite and above 0 in float");
        check(gpt2 || (d.attn.rope && d.attn.rope_theta > 1), "RoPE with theta above 1");
        if (d.n_layers <= 8 && d.d_model <= 512 && d.ffn.d_ff <= 4096) {
            nb_ctx ctx;
            nb_stack s;
            nb_result r;
            memset(&ctx, 0, sizeof ctx);
            ctx.num_threads = 1;
            r = nb_stack_init(&ctx, &s, &d, 1, 4);
            check(r == NB_OK || ctx.err[0], "the description is taken, or refused with a message");
            if (r == NB_OK) {
                round_trip(&s, fam);
                nb_stack_free(&s);
            }
        }
    }
    cJSON_Delete(root);
    return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    read_config(data, size);
    return 0;
}

#ifndef NB_LIBFUZZER
static int done(void) {
    if (g_path[0]) {
        remove(g_path);
        *strrchr(g_path, '/') = 0;
        rmdir(g_path);
        g_path[0] = 0;
    }
    return g_failures != 0;
}

#define FUZZ_RNG_SEED 0xC0F16ULL
#include "fuzz_rng.h"

/* one config.json of each family nbimport reads, as transformers 4.x and 5.x write them */
static const char* const k_seeds[] = {
    "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\", \"hidden_size\": 64,"
    " \"intermediate_size\": 128, \"num_hidden_layers\": 2, \"num_attention_heads\": 4,"
    " \"num_key_value_heads\": 2, \"hidden_act\": \"silu\", \"rms_norm_eps\": 1e-05,"
    " \"rope_theta\": 10000.0, \"rope_scaling\": null, \"attention_bias\": false,"
    " \"torch_dtype\": \"float32\", \"vocab_size\": 256, \"tie_word_embeddings\": false}\n",
    "{\"model_type\": \"llama\", \"hidden_size\": 64, \"intermediate_size\": 128,"
    " \"num_hidden_layers\": 1, \"num_attention_heads\": 4, \"hidden_act\": \"silu\","
    " \"rope_parameters\": {\"rope_type\": \"default\", \"rope_theta\": 500000.0},"
    " \"dtype\": \"bfloat16\", \"attention_bias\": true}",
    "{\"model_type\": \"mistral\", \"hidden_size\": 64, \"intermediate_size\": 160,"
    " \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"num_key_value_heads\": 1,"
    " \"hidden_act\": \"silu\", \"sliding_window\": null, \"rms_norm_eps\": 1e-06}",
    "{\"model_type\": \"qwen2\", \"hidden_size\": 64, \"intermediate_size\": 96,"
    " \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"num_key_value_heads\": 2,"
    " \"hidden_act\": \"silu\", \"use_sliding_window\": false, \"max_window_layers\": 2,"
    " \"rope_theta\": 1000000.0}",
    "{\"model_type\": \"qwen3\", \"hidden_size\": 64, \"intermediate_size\": 96,"
    " \"num_hidden_layers\": 1, \"num_attention_heads\": 4, \"num_key_value_heads\": 2,"
    " \"head_dim\": 16, \"hidden_act\": \"silu\", \"layer_types\": [\"full_attention\"]}",
    "{\"model_type\": \"olmo2\", \"hidden_size\": 64, \"intermediate_size\": 128,"
    " \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"hidden_act\": \"silu\","
    " \"rms_norm_eps\": 1e-06, \"attention_bias\": false}",
    "{\"model_type\": \"gpt2\", \"n_layer\": 2, \"n_embd\": 64, \"n_head\": 4, \"n_inner\": null,"
    " \"layer_norm_epsilon\": 1e-05, \"activation_function\": \"gelu_new\","
    " \"scale_attn_weights\": true, \"n_positions\": 128, \"vocab_size\": 256}"};
#define N_SEEDS ((int)(sizeof k_seeds / sizeof k_seeds[0]))

/* mutations json and transformers cannot read as the library would: each must be refused */
static size_t must_refuse(const char* seed, int kind, char* out, size_t cap) {
    const char* close = strrchr(seed, '}');
    const size_t at = (size_t)(close - seed);
    switch (kind) {
    case 0: /* a key twice: json keeps the last value, cJSON the first */
        return (size_t)snprintf(out, cap, "%.*s, \"model_type\": \"llama\"}", (int)at, seed);
    case 1: /* text after the object */
        return (size_t)snprintf(out, cap, "%s x", seed);
    case 6: /* a raw control character inside a key (cJSON reads "n_head\001x" as is; json
               refuses it) */
        return (size_t)snprintf(out, cap, "%.*s, \"vocab\001size\": 1}", (int)at, seed);
    case 7: /* a byte that is not UTF-8 */
        return (size_t)snprintf(out, cap, "%.*s, \"torch_dtype\": \"\377\"}", (int)at, seed);
    case 8: /* an escaped NUL: json keeps it in the string, cJSON ends the string there */
        return (size_t)snprintf(out, cap, "%.*s, \"vocab_size\\u0000x\": 1}", (int)at, seed);
    case 5: { /* NUL bytes after the object (found by libFuzzer: once read as white space) */
        const size_t n = strlen(seed);
        if (n + 3 > cap) return cap;
        memcpy(out, seed, n);
        memset(out + n, 0, 3);
        return n + 3;
    }
    case 2: /* a key the reader does not know */
        return (size_t)snprintf(out, cap, "%.*s, \"rope_sliding\": 1}", (int)at, seed);
    case 3: /* model_type of another JSON type */
        return (size_t)snprintf(out, cap, "{\"model_type\": [\"llama\"]%s", strchr(seed, ',') ? strchr(seed, ',') : "}");
    default: { /* an eps that underflows float */
        const char* key = strstr(seed, "\"n_layer\"") ? "layer_norm_epsilon" : "rms_norm_eps";
        const char* k = strstr(seed, key);
        if (k) return (size_t)snprintf(out, cap, "%.*s%s\": 1e-50%s", (int)(k - seed), seed, key,
                                       strpbrk(k + strlen(key) + 2, ",}"));
        return (size_t)snprintf(out, cap, "%.*s, \"%s\": 1e-50}", (int)at, seed, key);
    }
    }
}

/* a random mutation: bytes flipped, inserted or removed, the file cut, a value's type changed */
static size_t mutate(const char* seed, char* out, size_t cap) {
    size_t n = strlen(seed), i, k;
    static const char* const pieces[] = {"null", "true", "\"\"", "[]", "{}", "1e400", "-1", "0",
                                         "16777217", "\"silu\"", ",", ":", "\"", "\\u0000", "}"};
    if (n >= cap) n = cap - 1;
    memcpy(out, seed, n);
    for (k = 1 + rnd(4); k > 0; k--) {
        switch (rnd(4)) {
        case 0: if (n) out[rnd((unsigned)n)] ^= (char)(1 << rnd(8)); break;
        case 1: if (n) n = rnd((unsigned)n); break;
        case 2: {
            const char* p = pieces[rnd(sizeof pieces / sizeof pieces[0])];
            const size_t m = strlen(p), at = n ? rnd((unsigned)n) : 0;
            if (n + m >= cap) break;
            memmove(out + at + m, out + at, n - at);
            memcpy(out + at, p, m);
            n += m;
            break;
        }
        default:
            if (n > 2) {
                i = rnd((unsigned)n - 1);
                memmove(out + i, out + i + 1, n - i - 1);
                n--;
            }
        }
    }
    return n;
}

int main(int argc, char** argv) {
    static char buf[8192];
    const int iters = argc > 1 && argv[1][0] != '-' ? atoi(argv[1]) : 20000;
    int it, k, accepted = 0;
    if (argc > 1 && !strcmp(argv[1], "--corpus")) {
        check(argc > 2, "--corpus has files (an empty seed directory?)");
        for (k = 2; k < argc; k++) {
            unsigned char* text = NULL;
            size_t len = 0;
            char err[256];
            check(!st_read_file(argv[k], &text, &len, err, sizeof err, NULL, NULL), "a corpus file reads");
            read_config(text, len);
            free(text);
        }
        printf("fuzz_hfconfig: %d corpus inputs, %d failed checks\n", argc - 2, g_failures);
        return done();
    }
    if (argc > 2 && !strcmp(argv[1], "--write-seeds")) {
        for (k = 0; k < N_SEEDS; k++) {
            char path[1024];
            FILE* fp;
            snprintf(path, sizeof path, "%s/seed%d.json", argv[2], k);
            if (!(fp = fopen(path, "wb")) || fputs(k_seeds[k], fp) < 0 || fclose(fp)) return 1;
        }
        return 0;
    }
    for (k = 0; k < N_SEEDS; k++) {
        int kind;
        check(read_config((const uint8_t*)k_seeds[k], strlen(k_seeds[k])) == 0, "a seed is accepted");
        for (kind = 0; kind < 9; kind++) {
            const size_t n = must_refuse(k_seeds[k], kind, buf, sizeof buf);
            char what[96];
            snprintf(what, sizeof what, "seed %d, refusal kind %d (twice, after, unknown, type, eps, "
                     "NUL, control, UTF-8, \\u0000)", k, kind);
            check(n < sizeof buf && read_config((const uint8_t*)buf, n) == 1, what);
        }
    }
    for (it = 0; it < iters; it++) {
        const size_t n = mutate(k_seeds[rnd(N_SEEDS)], buf, sizeof buf);
        accepted += read_config((const uint8_t*)buf, n) == 0;
    }
    printf("fuzz_hfconfig: %d seeds, %d refusals that must be, %d mutations (%d accepted), %d failed checks\n",
           N_SEEDS, 9 * N_SEEDS, iters, accepted, g_failures);
    return done();
}
#endif
