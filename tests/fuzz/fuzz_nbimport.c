/* nbimport's command line and files under hostile input (tool_input.h: arguments, a model and an
   input file, and FIFOs, directories, devices and missing paths as arguments), the stack's
   forward included when a file gets that far. Checks on every run: exit 0 or 1 (as its usage
   documents), a message naming nbimport on every error, no crash, sanitizer report or leak, no
   special file replaced; each seed (a Llama and a GPT-2 import, an export) runs.
   libFuzzer: any input. Otherwise a deterministic driver (gcc, also under ASan):
       fuzz_nbimport [iterations]   mutations of the seeds
       fuzz_nbimport --corpus FILE...   --write-seeds DIR */
#include "tool_input.h"
#define main tool_main
#include "../../examples/nbimport.c"
#undef main

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    run_tool(data, size, "nbimport", 1);
    return 0;
}

#ifndef NB_LIBFUZZER
#define D 8
#define FF 16
static float g_w[3 * D * FF], g_one[3 * D], g_e[2 * 3 * D];

static const char* const k_llama[10] = {
    "model.layers.0.self_attn.q_proj.weight", "model.layers.0.self_attn.k_proj.weight",
    "model.layers.0.self_attn.v_proj.weight", "model.layers.0.self_attn.o_proj.weight",
    "model.layers.0.mlp.up_proj.weight", "model.layers.0.mlp.gate_proj.weight", "model.layers.0.mlp.down_proj.weight",
    "model.layers.0.input_layernorm.weight", "model.layers.0.post_attention_layernorm.weight", "model.norm.weight"};
static const int k_llama_shapes[10][3] = {{D, D, 0}, {D, D, 0}, {D, D, 0}, {D, D, 0}, {FF, D, 0}, {FF, D, 0},
                                          {D, FF, 0}, {D, 0, 0}, {D, 0, 0}, {D, 0, 0}};
static const char* const k_gpt2[14] = {
    "h.0.ln_1.weight", "h.0.ln_1.bias", "h.0.attn.c_attn.weight", "h.0.attn.c_attn.bias", "h.0.attn.c_proj.weight",
    "h.0.attn.c_proj.bias", "h.0.ln_2.weight", "h.0.ln_2.bias", "h.0.mlp.c_fc.weight", "h.0.mlp.c_fc.bias",
    "h.0.mlp.c_proj.weight", "h.0.mlp.c_proj.bias", "ln_f.weight", "ln_f.bias"};
static const int k_gpt2_shapes[14][3] = {{D, 0, 0}, {D, 0, 0}, {D, 3 * D, 0}, {3 * D, 0, 0}, {D, D, 0}, {D, 0, 0},
                                         {D, 0, 0}, {D, 0, 0}, {D, FF, 0}, {FF, 0, 0}, {FF, D, 0}, {D, 0, 0},
                                         {D, 0, 0}, {D, 0, 0}};
static const char* const k_nb[7] = {"blocks.0.att_proj.weight", "blocks.0.attn_out.weight", "blocks.0.ff_proj.weight",
                                    "blocks.0.ff_out.weight", "blocks.0.attn_norm.weight", "blocks.0.ff_norm.weight",
                                    "ln_f.weight"};
static const int k_nb_shapes[7][3] = {{3 * D, D, 0}, {D, D, 0}, {2 * FF, D, 0}, {D, FF, 0}, {D, 0, 0}, {D, 0, 0}, {D, 0, 0}};

int main(int argc, char** argv) {
    static const char* const words[] = {
        "@A", "@B", "@F", "@D", "@N", "@O", "@S", "hf-llama", "hf-gpt2", "gpt2-linear", "normblocks", "--export",
        "--help", "-", "", "x"};
    static const char* const meta = "preset=pre;n_layers=1;d_model=8;n_heads=2;n_kv_heads=2;d_ff=16;rope=0;format=pt";
    static const char* const rmeta = "preset=pre;n_layers=1;d_model=8;n_heads=2;n_kv_heads=2;d_ff=16;rope=1";
    static const char* const gmeta = "preset=gpt2;n_layers=1;d_model=8;n_heads=2;n_kv_heads=2;d_ff=16;rope=0";
    static const char* const e_name[1] = {"E"};
    static const int e_shape[1][3] = {{2, 3, D}};
    static tool_in seeds[4];
    static const char* const k_config =
        "{\"model_type\": \"llama\", \"hidden_size\": 8, \"intermediate_size\": 16, \"num_hidden_layers\": 1,"
        " \"num_attention_heads\": 2, \"num_key_value_heads\": 2, \"hidden_act\": \"silu\", \"rms_norm_eps\": 1e-05,"
        " \"rope_theta\": 10000.0, \"rope_scaling\": null, \"attention_bias\": false, \"vocab_size\": 256}";
    const float* vals3[10];
    const float* vals[14];
    const float* ev[1] = {g_e};
    size_t i;
    int k;
    for (i = 0; i < sizeof g_w / sizeof *g_w; i++) g_w[i] = 0.01f * (float)((int)(i * 7 % 11) - 5);
    for (i = 0; i < sizeof g_one / sizeof *g_one; i++) g_one[i] = 1;
    for (i = 0; i < sizeof g_e / sizeof *g_e; i++) g_e[i] = 0.1f * (float)((int)(i * 5 % 13) - 6);
    for (k = 0; k < 10; k++) vals[k] = vals3[k] = k >= 7 ? g_one : g_w;
    seeds[0].nargs = 4;
    seeds[0].args[0] = "hf-llama"; seeds[0].args[1] = "@A"; seeds[0].args[2] = "@B"; seeds[0].args[3] = "@O";
    seeds[0].na = st_small(seeds[0].a, sizeof seeds[0].a, meta, 10, k_llama, k_llama_shapes, vals);
    seeds[0].nb = st_small(seeds[0].b, sizeof seeds[0].b, NULL, 1, e_name, e_shape, ev);
    for (k = 0; k < 14; k++) vals[k] = k_gpt2_shapes[k][1] ? g_w : (k % 2 ? g_w : g_one);
    seeds[1] = seeds[0];
    seeds[1].args[0] = "hf-gpt2";
    seeds[1].na = st_small(seeds[1].a, sizeof seeds[1].a, gmeta, 14, k_gpt2, k_gpt2_shapes, vals);
    for (k = 0; k < 7; k++) vals[k] = k < 4 ? g_w : g_one;
    seeds[2] = seeds[0];
    seeds[2].args[0] = "--export"; seeds[2].args[1] = "hf-llama"; seeds[2].args[2] = "@A"; seeds[2].args[3] = "@O";
    seeds[2].na = st_small(seeds[2].a, sizeof seeds[2].a, rmeta, 7, k_nb, k_nb_shapes, vals);
    /* a Llama file without stack metadata, its config.json beside it (file C) */
    seeds[3] = seeds[0];
    seeds[3].na = st_small(seeds[3].a, sizeof seeds[3].a, "format=pt", 10, k_llama, k_llama_shapes, vals3);
    seeds[3].nc = (size_t)snprintf((char*)seeds[3].c, sizeof seeds[3].c, "%s", k_config);
    return tool_driver(argc, argv, "nbimport", seeds, 4, words, (int)(sizeof words / sizeof *words), 1);
}
#endif
