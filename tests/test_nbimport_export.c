/* nbimport --export's refusals (issue 26, "export that never lies"), one case per rule: every
   field export_refusal checks is tried on a stack that differs from an exportable one in that
   field alone, for each layout that refuses it, and the refusal must name it; and the stacks
   each layout's code does compute are accepted (hf-llama with the model_type whose class
   computes them). Many of these fields cannot be reached through a checkpoint's metadata
   (ffn_bias, embed_norm, final_norm, custom schedules, nGPT's scales on other presets,
   non_causal): the checks are called directly, on stacks nb_stack_init resolves, by including
   the tool as tests/fuzz/fuzz_nbimport.c does. tests/test_nbimport.py covers the command line
   (and its --help table against README.md). NB_SHOW=1 in the environment prints every
   refusal's message (to read their wording). */
#define main nbimport_main
#include "../examples/nbimport.c"
#undef main
#include "nbtest.h"

typedef void (*edit_fn)(nb_stack_desc* d);

/* preset NAME of 2 layers (d 16, 2 heads, d_ff 4 d) with STYLE's usual norm, ffn, rope and
   attention biases (as a checkpoint of that style has them), then edit */
static int make(const char* name, nb_name_style style, edit_fn edit, nb_stack* s) {
    const int gpt2 = style == NB_NAMES_HF_GPT2 || style == NB_NAMES_GPT2_LINEAR;
    nb_stack_desc d;
    nb_ctx ctx;
    memset(&d, 0, sizeof d);
    memset(&ctx, 0, sizeof ctx);
    d.n_layers = 2; d.d_model = 16; d.n_heads = 2; d.n_kv_heads = 2; d.ffn.d_ff = 64;
    if (name && nb_preset_from_name(&ctx, &d, name)) return 1;
    if (style != NB_NAMES_NGPT) d.norm.type = gpt2 ? NB_NORM_LAYER : NB_NORM_RMS; /* ngpt: the preset's L2 */
    d.ffn.type = gpt2 ? NB_FFN_GELU_TANH : NB_FFN_SWIGLU;
    d.attn.rope = !gpt2;
    d.attn.bias = gpt2 ? NB_ATTN_BIAS_QKV | NB_ATTN_BIAS_OUT : 0;
    if (edit) edit(&d);
    if (nb_stack_init(&ctx, s, &d, 1, 2)) {
        printf("FAIL: %s: %s\n", name ? name : "custom", ctx.err);
        return 1;
    }
    return 0;
}

/* the edits, one field each */
static void e_layer(nb_stack_desc* d) { d->norm.type = NB_NORM_LAYER; }
static void e_rms(nb_stack_desc* d) { d->norm.type = NB_NORM_RMS; }
static void e_dyt(nb_stack_desc* d) { d->norm.type = NB_NORM_DYT; }
static void e_gelu(nb_stack_desc* d) { d->ffn.type = NB_FFN_GELU_TANH; d->ffn.bias = -1; }
static void e_swiglu(nb_stack_desc* d) { d->ffn.type = NB_FFN_SWIGLU; d->ffn.bias = 1; }
static void e_ffn_bias(nb_stack_desc* d) { d->ffn.bias = 1; }
static void e_no_ffn_bias(nb_stack_desc* d) { d->ffn.bias = -1; }
static void e_rope(nb_stack_desc* d) { d->attn.rope = !d->attn.rope; }
static void e_theta(nb_stack_desc* d) { d->attn.rope_theta = 500000; }
static void e_gqa(nb_stack_desc* d) { d->n_kv_heads = 1; }
static void e_gqa_no_sqk(nb_stack_desc* d) { d->n_kv_heads = 1; d->attn.qk_scale = -1; }
static void e_bias_qkv(nb_stack_desc* d) { d->attn.bias = NB_ATTN_BIAS_QKV; }
static void e_bias_out(nb_stack_desc* d) { d->attn.bias = NB_ATTN_BIAS_OUT; }
static void e_bias_all(nb_stack_desc* d) { d->attn.bias = NB_ATTN_BIAS_QKV | NB_ATTN_BIAS_OUT; }
static void e_hyper(nb_stack_desc* d) { d->hyper.kind = NB_HYPER_MHC; }
static void e_embed_norm(nb_stack_desc* d) { d->norm.embed = 1; }
static void e_final_on(nb_stack_desc* d) { d->norm.final = 1; }
static void e_final_off(nb_stack_desc* d) { d->norm.final = -1; }
static void e_sites_qk(nb_stack_desc* d) { d->attn.sites = NB_SITE_Q | NB_SITE_K; }
static void e_sites_qkv(nb_stack_desc* d) { d->attn.sites = NB_SITES_QKV; }
static void e_full(nb_stack_desc* d) { d->attn.site_width = NB_WIDTH_FULL; }
static void e_per_head(nb_stack_desc* d) { d->attn.site_width = NB_WIDTH_PER_HEAD; }
static void e_qk_scale(nb_stack_desc* d) { d->attn.qk_scale = 1; }
static void e_no_qk_scale(nb_stack_desc* d) { d->attn.qk_scale = -1; }
static void e_in_scale(nb_stack_desc* d) { d->ffn.in_scale = 1; }
static void e_no_in_scale(nb_stack_desc* d) { d->ffn.in_scale = -1; }
static void e_softmax(nb_stack_desc* d) { d->attn.softmax_scale = 1; }
static void e_value_res(nb_stack_desc* d) { d->residual.value_residual = 1; }
static void e_non_causal(nb_stack_desc* d) { d->attn.non_causal = 1; }
static void e_completep(nb_stack_desc* d) { d->residual.depth_alpha = 1; }                  /* m = 2^-1 */
static void e_completep_1(nb_stack_desc* d) { d->residual.depth_alpha = 1; d->residual.depth_base = 2; } /* m = 1 */
static void e_mixln_none(nb_stack_desc* d) { d->mixln_alpha = -1; }
static void e_one_layer(nb_stack_desc* d) { d->n_layers = 1; }
static void e_four_layers(nb_stack_desc* d) { d->n_layers = 4; }
static void e_d_ff(nb_stack_desc* d) { d->ffn.d_ff = 48; }
static void e_eps(nb_stack_desc* d) { d->norm.eps = (nb_real)1e-6; }
static void e_interp(nb_stack_desc* d) { d->residual.interp_init = 0.1; }
static void e_gate(nb_stack_desc* d) { d->attn.gate = NB_GATE_HEADWISE; }
static void e_embed_scale(nb_stack_desc* d) { d->norm.embed_scale = 1; }
static void e_gain_offset(nb_stack_desc* d) { d->norm.gain_offset = 1; }
static void e_no_gain(nb_stack_desc* d) { d->norm.gain = -1; }
static void e_no_norm_bias(nb_stack_desc* d) { d->norm.bias = -1; }
static void e_derf(nb_stack_desc* d) { d->norm.type = NB_NORM_DERF; }
static void e_skipinit(nb_stack_desc* d) { d->residual.branch_scale = NB_BRANCH_SCALE_SUBLAYER; }

/* custom schedules (the preset NULL): Pre-LN layers with one field changed */
static nb_layer_desc g_layers[2];
static void custom(nb_stack_desc* d) {
    int l;
    memset(g_layers, 0, sizeof g_layers);
    for (l = 0; l < 2; l++) g_layers[l].attn.input_norm = g_layers[l].ffn.input_norm = 1;
    d->preset = NB_PRESET_DEFAULT;
    d->layers = g_layers;
}
static void e_custom_pre(nb_stack_desc* d) { custom(d); }
static void e_residual_scale(nb_stack_desc* d) { custom(d); g_layers[1].ffn.residual_scale = 2; }
static void e_branch_mult(nb_stack_desc* d) { custom(d); g_layers[1].attn.branch_mult = (nb_real)0.5; }
static void e_sites_layer0(nb_stack_desc* d) { custom(d); g_layers[0].sites = NB_SITE_Q | NB_SITE_K; }
static void e_olmo2_then_pre(nb_stack_desc* d) {
    custom(d);
    g_layers[0].attn.input_norm = g_layers[0].ffn.input_norm = 0;
    g_layers[0].attn.output_norm = g_layers[0].ffn.output_norm = 1;
}

typedef struct ecase {
    const char* preset;     /* NULL: a custom schedule (the edit sets it) */
    nb_name_style style;
    edit_fn edit;
    const char* want;       /* the field refused; NULL: accepted */
    const char* type;       /* hf-llama accepted: the model_type; refused: a word of the message */
} ecase;

#define LL NB_NAMES_HF_LLAMA
#define G2 NB_NAMES_HF_GPT2
#define GL NB_NAMES_GPT2_LINEAR
#define NG NB_NAMES_NGPT
static const ecase k_cases[] = {
    /* Llama's family: the classes that compute a stack */
    {"pre", LL, NULL, NULL, "llama"},
    {"pre", LL, e_gqa, NULL, "llama"},
    {"pre", LL, e_bias_all, NULL, "llama"},
    {"pre", LL, e_bias_qkv, NULL, "qwen2"},
    {"Pre-QK-Pre", LL, NULL, NULL, "qwen3"},
    {"pre", LL, e_sites_qk, NULL, "qwen3"},
    {"Pre-QK-Pre", LL, e_bias_all, NULL, "qwen3"},
    {"olmo2", LL, NULL, NULL, "olmo2"},
    {"olmo2", LL, e_bias_all, NULL, "olmo2"},
    {NULL, LL, e_custom_pre, NULL, "llama"},
    {"mixln", LL, e_mixln_none, NULL, "llama"},  /* alpha = 0: every layer Pre-LN */
    {"mixln", LL, e_one_layer, NULL, "llama"},   /* floor(0.25 L) = 0 Post-LN layers */
    {"lns", LL, e_one_layer, NULL, "llama"},     /* 1/sqrt(1) */
    {"pre", LL, e_completep_1, NULL, "llama"},   /* (L / L_base)^-1 = 1 */
    /* ... and each field that makes a stack none of theirs */
    {"pre", LL, e_layer, "norm", "RMSNorm"},
    {"pre", LL, e_dyt, "norm", "RMSNorm"},
    {"pre", LL, e_gelu, "ffn", "SwiGLU"},
    {"pre", LL, e_ffn_bias, "ffn_bias", "no bias"},
    {"pre", LL, e_rope, "rope", "RoPE"},
    {"pre", LL, e_hyper, "hyper", "one residual stream"},
    {"siamese", LL, NULL, "preset", "siamese"},
    {"post", LL, NULL, "post_norm", "preset post, layer 0, attention"},
    {"mixln", LL, e_four_layers, "post_norm", "preset mixln, layer 0"},
    {"deepnorm", LL, NULL, "post_norm", "deepnorm"},
    {"sandwich", LL, NULL, "output_norm", "run them as Pre-LN"},
    {"periln", LL, NULL, "output_norm", "periln"},
    {"none", LL, NULL, "input_norm", "every sublayer's input"},
    {"hybrid", LL, NULL, "input_norm", "hybrid"},
    {"pre_post", LL, NULL, "residual_from_norm", "layer 0, FFN"},
    {NULL, LL, e_residual_scale, "residual_scale", "preset custom, layer 1, FFN"},
    {"rezero", LL, NULL, "branch_scale", "ReZero"},
    {"layerscale", LL, NULL, "branch_scale", "LayerScale"},
    {NULL, LL, e_branch_mult, "branch_mult", "layer 1, attention"},
    {"pre", LL, e_completep, "branch_mult", "CompleteP"},
    {"lns", LL, NULL, "input_scale", "layer 1, attention"},
    {NULL, LL, e_olmo2_then_pre, "input_norm", "OLMo-2's decoder"},
    {"pre", LL, e_embed_norm, "embed_norm", "embedding"},
    {"pre", LL, e_final_off, "final_norm", "final norm"},
    {NULL, LL, e_sites_layer0, "sites", "layers all have the same attention norms"},
    {"pre_sites_pre", LL, NULL, "sites", "Qwen3"},
    {"Pre-QK-Pre", LL, e_full, "sites", "per head"},
    {"olmo2", LL, e_per_head, "sites", "whole Q and K"},
    {"pre", LL, e_bias_out, "attn_bias", "all of Q, K, V and O"},
    {"Pre-QK-Pre", LL, e_bias_qkv, "attn_bias", "Qwen3's attention_bias"},
    {"olmo2", LL, e_bias_qkv, "attn_bias", "OLMo-2"},
    {"pre", LL, e_qk_scale, "qk_scale", "sqk"},
    {"pre", LL, e_in_scale, "ffn_in_scale", "suv"},
    {"pre", LL, e_softmax, "softmax_scale", "1/sqrt(d_k)"},
    {"pre", LL, e_value_res, "value_residual", "ResFormer"},
    {"pre", LL, e_non_causal, "non_causal", "causally"},
    {"ngpt", LL, e_rms, "post_norm", "preset ngpt, layer 0, attention): Llama's"},
    {"pre", LL, e_derf, "norm", "RMSNorm"},
    {"pre", LL, e_skipinit, "branch_scale", "SkipInit"},
    {"pre", LL, e_gate, "attn_gate", "output gate"},
    {"pre", LL, e_embed_scale, "embed_scale", "shared_scale"},
    {"pre", LL, e_gain_offset, "gain_offset", "1 + w"},
    {"Pre-QK-Pre", LL, e_gain_offset, "gain_offset", "1 + w"},
    {"pre", LL, e_no_gain, "norm_gain", "weight"},
    /* GPT-2: Hugging Face's and llm.c's */
    {"gpt2", G2, NULL, NULL, NULL},
    {"gpt2", GL, NULL, NULL, NULL},
    {"pre", G2, NULL, NULL, NULL},
    {"gpt2", G2, e_d_ff, NULL, NULL},  /* HF's n_inner */
    {"gpt2", G2, e_eps, NULL, NULL},   /* HF's layer_norm_epsilon */
    {"gpt2", G2, e_gqa, "n_kv_heads", "no GQA"},
    {"gpt2", G2, e_swiglu, "ffn", "GELU"},
    {"gpt2", GL, e_rms, "norm", "LayerNorm"},
    {"gpt2", G2, e_rope, "rope", "wpe"},
    {"gpt2", G2, e_bias_qkv, "attn_bias", "attn_bias 3"},
    {"gpt2", GL, e_no_ffn_bias, "ffn_bias", "c_fc"},
    {"gpt2", G2, e_sites_qk, "sites", "no norms"},
    {"gpt2", G2, e_hyper, "hyper", "one residual stream"},
    {"sandwich", GL, NULL, "output_norm", "llm.c's GPT-2"},
    {"post", G2, NULL, "post_norm", "GPT-2's model"},
    {"gpt2", G2, e_embed_norm, "embed_norm", "embedding"},
    {"gpt2", G2, e_final_off, "final_norm", "final norm"},
    {"gpt2", GL, e_d_ff, "d_ff", "4 n_embd"},
    {"gpt2", GL, e_eps, "eps", "1e-5"},
    {"gpt2", G2, e_softmax, "softmax_scale", "1/sqrt(d_k)"},
    {"gpt2", GL, e_value_res, "value_residual", "ResFormer"},
    {"gpt2", G2, e_non_causal, "non_causal", "causal"},
    {"gpt2", G2, e_no_norm_bias, "norm_bias", "bias"},
    {"gpt2", GL, e_gate, "attn_gate", "output gate"},
    {"gpt2", G2, e_gain_offset, "gain_offset", "1 + w"},
    /* NVIDIA/ngpt's model.py: the ngpt preset as it comes */
    {"ngpt", NG, NULL, NULL, NULL},
    {"pre", NG, NULL, "preset", "preset pre"},
    {"ngpt", NG, e_rms, "norm", "L2"},
    {"ngpt", NG, e_gelu, "ffn", "SwiGLU"},
    {"ngpt", NG, e_bias_qkv, "attn_bias", "bias-free"},
    {"ngpt", NG, e_ffn_bias, "ffn_bias", "bias-free"},
    {"ngpt", NG, e_gqa_no_sqk, "n_kv_heads", "n_embd wide"},
    {"ngpt", NG, e_d_ff, "d_ff", "4 n_embd"},
    {"ngpt", NG, e_rope, "rope", "rotary"},
    {"ngpt", NG, e_theta, "rope_theta", "10000"},
    {"ngpt", NG, e_sites_qkv, "sites", "per head"},
    {"ngpt", NG, e_full, "sites", "per head"},
    {"ngpt", NG, e_no_qk_scale, "qk_scale", "sqk"},
    {"ngpt", NG, e_no_in_scale, "ffn_in_scale", "suv"},
    {"ngpt", NG, e_softmax, "softmax_scale", "sqrt(d_k)"},
    {"ngpt", NG, e_embed_norm, "embed_norm", "embedding"},
    {"ngpt", NG, e_final_on, "final_norm", "no final norm"},
    {"ngpt", NG, e_interp, "interp_init", "0.05"},
    {"ngpt", NG, e_value_res, "value_residual", "ResFormer"},
    {"ngpt", NG, e_non_causal, "non_causal", "causal"},
    {"ngpt", NG, e_gate, "attn_gate", "output gate"},
    {"ngpt", NG, e_embed_scale, "embed_scale", "shared_scale"},
    /* the library's own names hold every stack */
    {"siamese", NB_NAMES_NORMBLOCKS, NULL, NULL, NULL},
    {"mhc", NB_NAMES_NORMBLOCKS, e_value_res, NULL, NULL}};

int main(void) {
    size_t c;
    for (c = 0; c < sizeof k_cases / sizeof k_cases[0]; c++) {
        const ecase* k = &k_cases[c];
        char what[200];
        refusal r;
        nb_stack s;
        int refused;
        snprintf(what, sizeof what, "case %d: %s as %s: %s %s", (int)c, k->preset ? k->preset : "custom",
                 style_name(k->style), k->want ? "refused by" : "accepted", k->want ? k->want : "");
        if (!nbt_check(!make(k->preset, k->style, k->edit, &s), what)) continue;
        memset(&r, 0, sizeof r);
        refused = export_refusal(&s, k->style, &r);
        if (k->want) /* the field first in the message, which also says why */
            nbt_check(refused && !strcmp(r.field, k->want) && !strncmp(r.msg, k->want, strlen(k->want)) &&
                      strstr(r.msg, k->type) != NULL, what);
        else if (k->style == NB_NAMES_HF_LLAMA) {
            const char* type = llama_family(&s, &r);
            const hf_family* fam = hf_family_of(&s, k->style);
            nbt_check(!refused && type && !strcmp(type, k->type) && fam && !strcmp(fam->model_type, k->type), what);
        } else
            nbt_check(!refused, what);
        if (refused) { /* not cut short by its buffer */
            snprintf(what, sizeof what, "case %d: the message fits its buffer", (int)c);
            nbt_check(strlen(r.msg) < sizeof r.msg - 1, what);
        }
        if (refused && (getenv("NB_SHOW") || !(k->want && !strcmp(r.field, k->want))))
            printf("  %s: %s\n", style_name(k->style), r.msg);
        nb_stack_free(&s);
    }
    {   /* directories: a class per Hugging Face layout only */
        nb_stack s;
        if (!make("gpt2", NB_NAMES_GPT2_LINEAR, NULL, &s)) {
            const hf_family* fam = hf_family_of(&s, NB_NAMES_HF_GPT2);
            nbt_check(fam && !strcmp(fam->architecture, "GPT2LMHeadModel") &&
                      !hf_family_of(&s, NB_NAMES_GPT2_LINEAR) && !hf_family_of(&s, NB_NAMES_NORMBLOCKS),
                      "hf_family_of: GPT2LMHeadModel for hf-gpt2, none for gpt2-linear or normblocks");
            nb_stack_free(&s);
        }
    }
    return nbt_finish();
}
