/* test_block_fixtures.c - whole stacks of blocks (every preset) against PyTorch autograd.

   usage: test_block_fixtures FIXTURE_DIR   (reads FIXTURE_DIR/blocks.bin and
          FIXTURE_DIR/blocks_porting.bin; built with -DNBT_BF16 also FIXTURE_DIR/blocks_bf16.bin)

   The references come from tests/gen_block_fixtures.py: each preset's stack (the equations of
   normblocks.h, THE PRESETS, with its attention and FFN) computed by the PyTorch twin
   (examples/pytorch), checked there against direct transcriptions of the papers' equations,
   float64 autograd on loss = sum(out * dout), parameters named as the library's tensor table
   names them. Regenerate with
       /usr/bin/python3 tests/gen_block_fixtures.py tests/fixtures
   PyTorch is not needed to run this test; a missing fixture file or case is a failure.
   blocks_porting.bin (tests/gen_porting_fixtures.py, the same format) holds the stacks of the
   porting options (gated attention, Derf, norm_gain / norm_bias, gain_offset, embed_scale,
   SkipInit's per-sublayer scalars), whose references the generator checked against the
   official codes (qiuzh20/gated_attention's Qwen3, Derf's nanoGPT, DyT's LLaMA, Gemma's
   decoder layer, OLMo-1's non-parametric LayerNorm); they run in the same variants.

   For every case: fill an nb_stack_desc from the stored scalars and the preset's key (the
   fixture names the preset, never its enum value), nb_stack_init, then check the
   tensor table against the fixture (the same names, counts, shapes, kinds, layers and no_decay
   flags, no overlaps, the whole parameter buffer covered), copy the fixture parameters in by
   name, run nb_stack_forward and nb_stack_backward, and compare out, din and every parameter
   gradient (and Attention Residuals' depth weights, nb_stack_attn_res_weights, where the case
   has them; with value embeddings the case's rows "ve" are bound by nb_stack_set_value_embeds
   and their gradient, written over NaN rows, is held to "dve" as din is to its reference). Each case runs in four variants:
     probs   NB_ATTN_MEMORY_PROBS, init for exactly (B, T), gradients zeroed, default threads
     lse     NB_ATTN_MEMORY_LSE, init for exactly (B, T), gradients zeroed, 3 threads
     accum   memory default, init for (B + 1, T + 3), gradients pre-filled with known values
             (backward accumulates), check_finite on, 2 threads
     name    the description from nb_preset_from_name (the preset's own name, or the paper's
             name, e.g. "QKVC-Post", "HybridNorm*", "gpt2") plus the shapes, eps left 0 (each
             fixture's eps is its preset's default), memory PROBS, 1 thread
   Parameter buffers, outputs, cache and scratch start as NaN (scratch again between forward
   and backward), and each buffer is followed by a canary that must survive.
   Tolerances: float32 uses nbtest.h's NBT_ATOL / NBT_RTOL (the generator only keeps draws on
   which float32 torch autograd stays within 0.3 of them); NB_DOUBLE compares two float64
   computations that differ only in summation order, so it uses 1e-11 / 1e-10 as
   test_sublayer_fixtures.c does. */
#define NORMBLOCKS_IMPLEMENTATION
#include "normblocks.h"
#include "nbtest.h"
#include "fixture.h"

typedef struct block_case {
    const char* name;
    const char* preset_name; /* for nb_preset_from_name; NULL = the fixture's preset key,
                                "" = no by-name variant */
} block_case;

/* Keep in sync with the names printed by tests/gen_block_fixtures.py. */
static const block_case cases[] = {
    {"pre_L1", NULL},
    {"pre_L3", "Pre-Norm"},
    {"post_L1", NULL},
    {"post_L3", NULL},
    {"post_flags_L1", NULL},
    {"post_flags_L3", NULL},
    {"sandwich_L1", NULL},
    {"sandwich_L3", NULL},
    {"olmo2_L1", NULL},
    {"olmo2_L3", NULL},
    {"deepnorm_L1", NULL},
    {"deepnorm_L3", NULL},
    {"deepnorm_mixln_L1", NULL},
    {"deepnorm_mixln_L3", NULL},
    {"hybrid_L1", NULL},
    {"hybrid_L3", "HybridNorm"},
    {"hybrid_star_L1", NULL},
    {"hybrid_star_L3", "HybridNorm*"},
    {"first_qkv_pre_L1", NULL},
    {"first_qkv_pre_L3", NULL},
    {"embednorm_L1", NULL},
    {"embednorm_L3", NULL},
    {"mixln_L1", NULL},
    {"mixln_L3", NULL},
    {"siamese_L1", NULL},
    {"siamese_L3", NULL},
    {"siamese_post_pre_L1", NULL},
    {"siamese_post_pre_L3", NULL},
    {"gpt2_L1", "gpt2"},
    {"gpt2_L3", "gpt2"},
    {"lns_L3", "LayerNorm-Scaling"},
    {"none_L2", "NoNorm"},
    {"dyt_L2", "DyT"},
    {"periln_L2", "Peri-LN"},
    {"rezero_L2", "ReZero"},
    {"layerscale_L2", "LayerScale"},
    {"mixln_a067_L3", NULL},
    {"mixln_a1_L1", NULL},
    {"mixln_a0_L2", NULL},
    {"siamese_pscale_L2", NULL},
    {"siamese_pfusion_L2", NULL},
    {"siamese_c1_L2", NULL},
    {"siamese_nofuse_L2", NULL},
    {"siamese_pp_paper_L2", NULL},
    {"vres_fixed_pre_L3", NULL},
    {"vres_learn_hybrid_L3", NULL},
    {"vres_learn_siamese_L2", NULL},
    {"abl_qkvc_pre_L1", "QKVC-Pre"},
    {"abl_pre_qkc_post_L1", "Pre-QKC-Post"},
    {"abl_pre_qk_pre_L1", "Pre-QK-Pre"},
    {"abl_kv_post_L1", "KV-Post"},
    {"abl_kc_post_L1", "KC-Post"},
    {"abl_none_post_L1", ""},
    {"abl_qkvc_post_L3", "QKVC-Post"},
    {"abl_kv_pre_L3", "KV-Pre"},
    {"abl_pre_qk_post_L3", "Pre-QK-Post"},
    {"abl_pre_kc_pre_L3", "Pre-KC-Pre"},
    {"abl_pre_post_L3", "Pre-Post"},
    {"abl_post_pre_L3", "Post-Pre"},
    {"mhc_L2", "mHC"},
    {"mhc_static_n3_L2", NULL},
    {"hc_layer_L2", ""},
    {"hc_static_n3_L2", "HC"},
    {"ihc_L2", "ihc"},
    {"mhc_periln_n3_L2", "Peri-LN"},
    {"hc_dyt_n2_L2", "DyT"},
    {"mhc_vres_gqa_L3", "Pre-Norm"},
    {"cp_pre_L3", "Pre-Norm"},
    {"cp_sandwich_a05_b2_L3", "Sandwich"},
    {"cp_rezero_L2", "ReZero"},
    {"cp_layerscale_L2", "LayerScale"},
    {"cp_mhc_n3_L2", "mHC"},
    {"ngpt_L2", "nGPT"},
    {"ngpt_norope_i02_L1", "ngpt"},
    {"pre_gelu_qk_suv_L1", ""},
    {"post_l2_qkv_L2", ""},
    {"embednorm_l2_L2", ""},
    {"sink_learned_pre_gqa_L2", "Pre-Norm"},
    {"sink_obo_hybrid_L2", "HybridNorm"},
    {"sink_learned_siamese_L2", NULL},
    {"clip_olmo2_gqa_L2", "OLMo-2"},
    {"clip_sink_pre_L2", "Pre-Norm"},
    {"clip_gate_pre_L2", "Pre-Norm"},
    {"softcap_sandwich_gqa_L2", "Sandwich"},
    {"softcap_sink_hybrid_L2", "HybridNorm"},
    {"softcap_pre_scale_L2", "Pre-Norm"},
    {"mhclite_pre_n4_L2", "Pre-Norm"},
    {"mhclite_static_n3_L2", "mHC"},
    {"mhclite_sandwich_n3_L2", "Sandwich"},
    {"dwa_pre_L4", "Pre-Norm"},
    {"dwa_post_k2_L4", NULL},
    {"dwa_periln_L3", "Peri-LN"},
    {"attnres_full_pre_L3", "Pre-Norm"},
    {"attnres_s2_pre_L4", NULL},
    {"attnres_s3_periln_L3", "Peri-LN"},
    {"attnres_s4_layerscale_L2", "LayerScale"},
    {"unet_pre_L4", "Pre-Norm"},
    {"unet_post_L4", NULL},
    {"reinject_periln_L3", "Peri-LN"},
    {"unet_sandwich_L2", "Sandwich"},
    {"ve_pre_L5", "Pre-Norm"},
    {"ve_hybrid_L2", "HybridNorm"},
    {"ve_post_L4", NULL},
    {"dwa_p2_pre_L4", "Pre-Norm"},
    {"dwa_p3_post_L4", NULL},
    {"tiles_pre_L2", "Pre-Norm"},
};

/* Keep in sync with the names printed by tests/gen_porting_fixtures.py. By name only where the
   name gives the case's norm, sites and eps (the other fields are set in every variant). */
static const block_case porting_cases[] = {
    {"qwen3_gate_head_qk_gqa_L2", ""},
    {"qwen3_gate_elem_qk_gqa_L2", ""},
    {"qwen3_gate_head_mha_bias_L2", ""},
    {"qwen3_gate_elem_mha_L1", ""},
    {"gate_qkvc_post_L2", "QKVC-Post"},
    {"derf_nanogpt_L2", ""},
    {"derf_nanogpt_bias_L1", ""},
    {"dyt_llama_gqa_L2", "DyT"},
    {"gemma2_sandwich_gqa_L2", ""},
    {"gemma3_sandwich_qk_mqa_L2", ""},
    {"skipinit_rezero_L2", "ReZero"},
    {"skipinit_pre_rms_nogain_L2", "Pre-Norm"},
    {"olmo1_nonparam_L2", ""},
};

/* BF16's products on kernel k (NB__ATTN_*): the attention's, and the linear GEMMs' where
   oneDNN does not run them (the tiles on nb__bdot's kernel, or the emulation) */
static void set_kernel(nb_stack* s, int k) {
    int l;
    for (l = 0; l < s->desc.n_layers; l++)
        s->layers[l].attn.bf16_attn = s->layers[l].attn.bf16_gemm = k;
    s->ffn.bf16_gemm = k;
}

typedef struct variant {
    const char* tag;
    nb_attn_memory memory;
    int threads;
    int extra_b, extra_t;  /* init for (B + extra_b, T + extra_t) */
    int accumulate;        /* gradients pre-filled */
    int check_finite;
    int by_name;           /* description from nb_preset_from_name */
    nb_backend backend;
    int attn;              /* BF16's products (the attention's and the linear GEMMs' off
                              oneDNN): 0 the plans' choice, else 1 + an NB__ATTN_* (skipped,
                              and said, on a CPU without its kernel) */
    int bf16_outputs;      /* gemm.bf16_outputs (NBT_BF16); a case of blocks_bf16.bin runs in the
                              variants of its own setting (its field, absent = 0) */
} variant;

#ifndef NBT_BF16
static const variant variants[] = {
    {"probs", NB_ATTN_MEMORY_PROBS, 0, 0, 0, 0, 0, 0, NB_BACKEND_DEFAULT, 0, 0},
    {"lse", NB_ATTN_MEMORY_LSE, 3, 0, 0, 0, 0, 0, NB_BACKEND_DEFAULT, 0, 0},
    {"accum", NB_ATTN_MEMORY_DEFAULT, 2, 1, 3, 1, 1, 0, NB_BACKEND_DEFAULT, 0, 0},
    {"name", NB_ATTN_MEMORY_PROBS, 1, 0, 0, 0, 0, 1, NB_BACKEND_DEFAULT, 0, 0},
#if defined(NB_USE_DNNL) && !defined(NB_DOUBLE)
    {"dnnl", NB_ATTN_MEMORY_PROBS, 0, 0, 0, 0, 0, 0, NB_BACKEND_DNNL, 0, 0},    /* oneDNN float32 */
    {"dnnl_accum", NB_ATTN_MEMORY_LSE, 1, 1, 3, 1, 0, 0, NB_BACKEND_DNNL, 0, 0},
#endif
};
#else
/* NBT_BF16: every case with precision BF16 (every GEMM on bf16 operands), in both attention
   memory modes, against the same float64 references, normwise (see bf16_close), and the cases
   of blocks_bf16.bin against the twin's bf16 references with a float32-sized tolerance (see
   bf16_tight_limit): on the portable path (BLAS), and on oneDNN's bf16 matmul when the build
   has it (skipped, and said, on a CPU where oneDNN has no bf16 matmul). Built with the x86
   instructions emulated (NB__TEST_X86_EMU, tests/x86_emu.h: AMX the plans' choice), only the
   variants on the emulated kernels run (the others are test_block_fixtures_bf16's), on
   blocks_bf16.bin and blocks.bin's case of the tiles' shapes (emu_case): the other cases
   repeat the stacks' logic on the same kernel code, at the emulation's cost. */
static const variant variants[] = {
    {"bf16", NB_ATTN_MEMORY_PROBS, 0, 0, 0, 0, 0, 0, NB_BACKEND_BLAS, 0, 0},
    {"bf16_lse", NB_ATTN_MEMORY_LSE, 3, 0, 0, 0, 0, 0, NB_BACKEND_BLAS, 0, 0},
    /* the products' other paths: the attention's packed one and the linear GEMMs' tiles on
       the portable and AVX512-BF16 kernels (AMX's is the plans' choice on a CPU with AMX),
       and the emulation there */
#ifndef NB__TEST_X86_EMU
    {"bf16_portable", NB_ATTN_MEMORY_LSE, 2, 0, 0, 0, 0, 0, NB_BACKEND_BLAS,
     1 + NB__ATTN_PORTABLE, 0},
#endif
    {"bf16_avx512bf16", NB_ATTN_MEMORY_PROBS, 1, 0, 0, 0, 0, 0, NB_BACKEND_BLAS,
     1 + NB__ATTN_AVX512BF16, 0},
#ifndef NB__TEST_X86_EMU
    {"bf16_emulated", NB_ATTN_MEMORY_LSE, 1, 0, 0, 0, 0, 0, NB_BACKEND_BLAS,
     1 + NB__ATTN_EMULATED, 0},
#endif
    /* gemm.bf16_outputs (the FFN's hidden layer in bf16), on the cases of blocks_bf16.bin made
       with it; on oneDNN its GEMMs write bf16 */
    {"bf16_out", NB_ATTN_MEMORY_PROBS, 0, 0, 0, 0, 0, 0, NB_BACKEND_BLAS, 0, 1},
    {"bf16_out_lse", NB_ATTN_MEMORY_LSE, 2, 0, 0, 0, 0, 0, NB_BACKEND_BLAS, 0, 1},
#if defined(NB_USE_DNNL) && !defined(NB__TEST_X86_EMU)
    {"bf16_out_dnnl", NB_ATTN_MEMORY_PROBS, 0, 0, 0, 0, 0, 0, NB_BACKEND_DNNL, 0, 1},
    {"bf16_dnnl", NB_ATTN_MEMORY_PROBS, 0, 0, 0, 0, 0, 0, NB_BACKEND_DNNL, 0, 0},
    {"bf16_dnnl_lse", NB_ATTN_MEMORY_LSE, 1, 1, 3, 0, 0, 0, NB_BACKEND_DNNL, 0, 0},
#endif
};

/* Tolerance of a BF16 stack against float64, normwise per tensor, and its derivation.
   A GEMM on bf16-rounded operands computes sum_k a_k b_k (1 + d1_k)(1 + d2_k), |d| <= u =
   2^-8 (bf16's unit roundoff; float32 accumulation adds ~2^-24, negligible). The rounding
   errors are independent and uniform (rms u / sqrt(3) each), so one GEMM's error has rms
   sqrt(2/3) u ||(a_k b_k)_k|| per element: normwise, e1 = sqrt(2/3) u relative for data without
   cancellation (random signs: ||(a_k b_k)|| ~ |sum a_k b_k|). A checked tensor depends on a
   chain of G GEMMs (forward: Q|K|V, scores, context, W_o, the FFN's two: 6 per layer; the
   gradients: those of the forward plus as many backward, 12 per layer), whose independent
   errors add in quadrature: e = e1 sqrt(G), when the maps between the GEMMs have gain 1. They
   have up to about 2 here: a norm's backward scales by its rstd, up to ~2 for the fixtures'
   activations (rms ~0.5), and Post-style chains pass the gradient through one per sublayer.
   Allowed: 3 sigma times that gain, 6 e ||ref||, plus, for a parameter gradient, 6 e sqrt(n)
   times the rms of all the case's gradients (floor_rms): a tensor of a few values that are
   sums with cancellation (a scalar's gradient, a small bias) has a small norm but errors of
   the size of its terms. L = 3: 6 e = 0.085 for out, 0.12 for din and the gradients. Over the
   2184 tensors of all cases the largest error is 0.75 of that, the median 0.07. A dropped
   term changes a tensor by more: mutation-checked (dV not accumulated over query tiles, the
   attention's dW_o not accumulated, the FFN's input gradient dropped).
   gemm.bf16_outputs is held to the twin's references only (run_case). */
static double bf16_loose_limit(double nref, size_t n, int L, int backward, double floor_rms) {
    const double e = sqrt(2.0 / 3.0) / 256 * sqrt((backward ? 12.0 : 6.0) * L);
    return 6 * e * (nref + sqrt((double)n) * floor_rms);
}

/* Tolerance of a BF16 stack against the twin's bf16 references (blocks_bf16.bin, written by
   tests/gen_bf16_fixtures.py: the twin in precision "bf16", float64), and its derivation. The
   references multiply the same bf16-rounded operands as the library, so wherever the two make
   the same rounding decisions they differ by the library's float32 arithmetic only:
   - a GEMM sums K exact bf16 x bf16 products in float32: relative error ~ sqrt(K) 2^-24 (one
     rounding per addition, random, relative to the sum of the terms' sizes, which is the
     result's size where nothing cancels); K = the largest inner dimension of the stack's
     GEMMs (d, the FFN's widths, and B T, over which the weight gradients sum);
   - the float32 operations between two GEMMs (a norm's sum over d <= K, the softmax's over T,
     exp, tanh, rsqrt: a few ulps) add about as much again: 2 such terms per GEMM;
   - a checked tensor depends on a chain of G GEMMs, G as in the loose bound (6 per layer for
     the output, 12 with the backward), with independent errors: e32 = 2^-24 sqrt(2 K G);
   - allowed, as in the loose bound: 3 sigma times the chain's gain of 2, 6 e32 ||ref||, plus
     for a parameter gradient 6 e32 sqrt(n) times the rms of the case's gradients.
   L = 3, K = 24 (SwiGLU, f = 12): 1.1e-5 of the norm for out, 1.5e-5 for din and the
   gradients (the loose bound: 0.085 and 0.12). Measured on the portable path and on oneDNN
   (AVX512-BF16), PROBS and LSE, 1012 tensors: the largest error is 0.068 of that (a DyT
   alpha's gradient, a sum with cancellation), the median 0.0016 (~6e-8 of the norm: the
   float32 rounding of the result itself).
   What this tolerance cannot absorb is a flipped rounding decision: where the library's
   float32 value of an operand element lies across a bf16 rounding boundary from the
   reference's (probability ~ its float32 deviation / a bf16 ulp, ~2^-16 per rounding), that
   element moves by a bf16 ulp (2^-8 relative, 2^16 times the deviation), the values after it,
   now apart by far more than float32 rounding, cross boundaries of their own, and the tensors
   downstream move by bf16 rounding: up to 1e-2 of their norm in these small stacks, hundreds of
   times the tolerance, as much as a dropped rounding. With the ~5000 roundings of activations
   and gradients of a case, 5% of random draws (92 of 1800 (draw, any of the four variants))
   fail here for that reason. The references are conditioned instead: gen_bf16_fixtures.py
   keeps a draw only when the twin in float32 in 8 summation orders, and a run with every
   rounded value pushed toward its nearest rounding boundary by 16 2^-24 |x| + 2^-24 rms (4 for
   dS), stay below 0.3 of this tolerance: no decision that matters is within float32 reach.
   Of 360 draws so conditioned (these 9 cases, 40 other seeds) none failed here in any of the four
   variants (largest error 0.62 of the tolerance). Mutation-checked (a copy of normblocks.h,
   blocks.bin's loose comparison passing each time): dS unrounded in dQ = dS K fails 704 of the
   1012 tensors (up to 580 times the tolerance), the FFN's dW_out = dY^T a with dY unrounded its
   104 ff_out gradients (up to 91), W_o unrounded in the forward or P unrounded in the context P V
   1004 (up to 2400), ties rounded away from zero instead of to even 288 (up to 520; truncation
   fails the loose comparison too). */
static double bf16_tight_limit(double nref, size_t n, int L, int backward, double floor_rms,
                               int K) {
    const double e32 = ldexp(1.0, -24) * sqrt(2.0 * K * (backward ? 12.0 : 6.0) * L);
    return 6 * e32 * (nref + sqrt((double)n) * floor_rms);
}

static int bf16_tight;          /* the cases of blocks_bf16.bin: bf16_tight_limit */
static int bf16_K;              /* the case's largest GEMM inner dimension */
static double bf16_ratios[4096]; /* error / allowed of every tight comparison (the summary) */
static int bf16_nratios;

static int bf16_close(const char* name, const nb_real* got, const double* ref, size_t n, int L,
                      int backward, double floor_rms) {
    double err = 0, nref = 0, lim;
    size_t i;
    int finite = 1;
    for (i = 0; i < n; i++) {
        const double dlt = (double)got[i] - ref[i];
        finite &= nbt_finite((double)got[i]);
        err += dlt * dlt;
        nref += ref[i] * ref[i];
    }
    err = sqrt(err);
    nref = sqrt(nref);
    lim = bf16_tight ? bf16_tight_limit(nref, n, L, backward, floor_rms, bf16_K)
                     : bf16_loose_limit(nref, n, L, backward, floor_rms);
    if (bf16_tight && bf16_nratios < (int)(sizeof bf16_ratios / sizeof bf16_ratios[0]))
        bf16_ratios[bf16_nratios++] = err / lim;
    if (!nbt_check(finite && err <= lim, name) || getenv("NBT_BF16_VERBOSE"))
        printf("  %s: normwise error %.3g of %.3g (%.3g of the allowed)\n", name, err, nref,
               err / lim);
    return finite && err <= lim;
}

/* The cases of blocks_bf16.bin (tests/gen_bf16_fixtures.py prints the same list). */
static const block_case bf16_cases[] = {
    {"bf16_pre_L3", ""}, {"bf16_post_L3", ""}, {"bf16_olmo2_L3", ""}, {"bf16_hybrid_L3", ""},
    {"bf16_mixln_L3", ""}, {"bf16_siamese_L3", ""}, {"bf16_gpt2_L3", ""}, {"bf16_dyt_L2", ""},
    {"bf16_abl_qkvc_post_L3", ""}, {"bf16_vres_learn_hybrid_L3", ""},
    {"bf16_sink_learned_pre_gqa_L2", ""}, {"bf16_sink_obo_hybrid_L2", ""},
    {"bf16_clip_olmo2_gqa_L2", ""}, {"bf16_softcap_sandwich_gqa_L2", ""},
    {"bf16_mhclite_sandwich_n3_L2", ""}, {"bf16_dwa_post_k2_L4", ""},
    {"bf16_attnres_s3_periln_L3", ""}, {"bf16_unet_pre_L4", ""}, {"bf16_ve_pre_L5", ""},
    {"bf16_dwa_p3_post_L4", ""}, {"bf16_out16_pre_L3", ""}, {"bf16_out16_post_L3", ""},
    {"bf16_out16_gpt2_L3", ""}, {"bf16_out16_suv_L2", ""},
};

/* desc.bf16_weights, on the variants with zeroed gradients: the same stack reading the
   caller's bf16 copy of the weights (nb_bf16_round of the parameters) must give bitwise the
   out, din and gradients of r (the stack rounding them itself), with a cache smaller by the
   copies; a copy of other weights (the parameters halved) must change out, so the GEMMs read
   the copy; and without a copy the forward is NB_ERR_NULL. With value embeddings (n_ve > 0) the
   stack reads the same rows ve and writes their gradient, bitwise dve's. */
static void check_bf16_weights(nb_ctx* ctx, nb_stack_desc desc, const nb_stack* s0,
                               const nbf_run* r, int B, int T, const char* cs, const char* tag,
                               const nb_real* ve, const nb_real* dve, size_t n_ve) {
    nb_stack s;
    nbf_run q;
    unsigned short* w16;
    float* half;
    nb_real* dve2 = n_ve ? nbf_buffer(n_ve, NULL) : NULL;
    nb_result rc;
    size_t k;
    char name[1280];
    int same = 1, moved = 0;
    desc.gemm.bf16_weights = 1;
    memset(&s, 0, sizeof s);
    rc = nb_stack_init(ctx, &s, &desc, s0->max_batch, s0->max_seq);
    if (!nbf_check_rc(ctx, rc, cs, tag, "nb_stack_init (bf16_weights)")) {
        free(dve2);
        return;
    }
    if (n_ve && !nbf_check_rc(ctx, nb_stack_set_value_embeds(ctx, &s, ve, dve2), cs, tag,
                              "nb_stack_set_value_embeds (bf16_weights)")) {
        free(dve2);
        nb_stack_free(&s);
        return;
    }
    set_kernel(&s, s0->layers[0].attn.bf16_attn); /* the variant's products */
    snprintf(name, sizeof name, "%s/%s: bf16_weights: the cache (%lu) is smaller (than %lu)", cs,
             tag, (unsigned long)s.n_cache, (unsigned long)s0->n_cache);
    nbt_check(s.n_cache < s0->n_cache && s.n_params == s0->n_params, name);
    nbf_run_params(&q, s.n_params, 0);
    memcpy(q.params, r->params, s.n_params * sizeof(nb_real));
    nbf_run_acts(&q, r->n_act, NULL, NULL, 0, s.n_cache, s.n_scratch);
    memcpy(q.x, r->x, r->n_act * sizeof(nb_real));
    memcpy(q.dout, r->dout, r->n_act * sizeof(nb_real));
    w16 = (unsigned short*)malloc(s.n_params * sizeof *w16);
    half = (float*)malloc(s.n_params * sizeof *half);
    if (!w16 || !half) abort();
    rc = nb_stack_forward(ctx, &s, q.params, q.out, q.x, B, T, q.cache, q.scratch);
    snprintf(name, sizeof name, "%s/%s: bf16_weights without nb_stack_set_bf16_weights is "
             "NB_ERR_NULL (%s)", cs, tag, ctx->err);
    nbt_check(rc == NB_ERR_NULL && strstr(ctx->err, "nb_stack_set_bf16_weights"), name);
    nb_bf16_round(w16, q.params, s.n_params);
    if (nb_stack_set_bf16_weights(ctx, &s, w16) == NB_OK &&
        nbf_check_rc(ctx, nb_stack_forward(ctx, &s, q.params, q.out, q.x, B, T, q.cache,
                                           q.scratch), cs, tag, "nb_stack_forward (bf16_weights)") &&
        nbf_check_rc(ctx, nb_stack_backward(ctx, &s, q.params, q.grads, q.dx, q.dout, B, T,
                                            q.cache, q.scratch), cs, tag,
                     "nb_stack_backward (bf16_weights)")) {
        same = !memcmp(q.out, r->out, r->n_act * sizeof(nb_real)) &&
               !memcmp(q.dx, r->dx, r->n_act * sizeof(nb_real)) &&
               !memcmp(q.grads, r->grads, s.n_params * sizeof(nb_real)) &&
               (!n_ve || !memcmp(dve2, dve, n_ve * sizeof(nb_real)));
        snprintf(name, sizeof name, "%s/%s: bf16_weights: out, din and gradients bitwise equal",
                 cs, tag);
        nbt_check(same, name);
        for (k = 0; k < s.n_params; k++) half[k] = 0.5f * (float)q.params[k];
        nb_bf16_round(w16, half, s.n_params);
        if (nbf_check_rc(ctx, nb_stack_forward(ctx, &s, q.params, q.out, q.x, B, T, q.cache,
                                               q.scratch), cs, tag, "nb_stack_forward (halved)"))
            for (k = 0; k < r->n_act && !moved; k++) moved = q.out[k] != r->out[k];
        snprintf(name, sizeof name, "%s/%s: bf16_weights: the GEMMs read the caller's copy", cs,
                 tag);
        nbt_check(moved, name);
    }
    free(w16);
    free(half);
    free(dve2);
    nbf_run_finish(&q, cs, tag);
    nb_stack_free(&s);
}

/* gemm.bf16_outputs keeps the FFN's projection h (B T x in_width values a layer) in bf16: the
   stack's cache is smaller than with float32 outputs by half of those values, up to the 64-byte
   padding of each buffer (16 values a layer). */
static void check_out16_cache(nb_ctx* ctx, nb_stack_desc desc, const nb_stack* s, int B, int T,
                              const char* cs, const char* tag) {
    const int L = s->desc.n_layers;
    const double half = 0.5 * L * (double)B * T * s->ffn.in_width;
    double diff;
    nb_stack s0;
    char name[512];
    desc.gemm.bf16_outputs = 0;
    memset(&s0, 0, sizeof s0);
    if (nbf_check_rc(ctx, nb_stack_init(ctx, &s0, &desc, B, T), cs, tag,
                     "nb_stack_init (float32 outputs)")) {
        diff = (double)s0.n_cache - (double)s->n_cache;
        snprintf(name, sizeof name, "%s/%s: bf16_outputs: the cache is smaller by %.0f values "
                 "(h's half: %.0f)", cs, tag, diff, half);
        nbt_check(fabs(diff - half) <= 16.0 * L, name);
    }
    nb_stack_free(&s0);
}

static int cmp_double(const void* a, const void* b) {
    const double x = *(const double*)a, y = *(const double*)b;
    return x < y ? -1 : x > y;
}
#endif

/* A parameter of the case: a field with a '.' that is not a gradient ("blocks.0.ff_norm.weight",
   "ln_f.weight"), the mHC head's "hc_head_*", or "embed_scale"; scalars (the option is
   "embed_scale_on"), E, dout, out and din have no '.'. Returns the parameter name or NULL. */
static const char* param_field(const char* cs, const nbf_tensor* t) {
    const char* field;
    if (!nbf_in_case(t->name, cs)) return NULL;
    field = t->name + strlen(cs) + 1;
    if (strncmp(field, "hc_head_", 8) == 0 || strcmp(field, "embed_scale") == 0) return field;
    if (!strchr(field, '.') || strncmp(field, "grad.", 5) == 0) return NULL;
    return field;
}

static int ends_with(const char* s, const char* suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* An Attention Residuals reader's tensor: "blocks.<l>.attn_res.<tail>" (before attention),
   "blocks.<l>.mlp_res.<tail>" (before the FFN) or "final_res.<tail>" (before the final norm) */
static int attn_res_tensor(const char* field, const char* tail) {
    char a[64], m[64], f[64];
    snprintf(a, sizeof a, ".attn_res.%s", tail);
    snprintf(m, sizeof m, ".mlp_res.%s", tail);
    snprintf(f, sizeof f, "final_res.%s", tail);
    return ends_with(field, a) || ends_with(field, m) || strcmp(field, f) == 0;
}

/* What the table should say about a parameter, derived from its name. */
static void expected_info(const char* field, int* layer, nb_tensor_kind* kind, int* no_decay) {
    const char* last;
    *layer = -1;
    if (strncmp(field, "blocks.", 7) == 0) *layer = atoi(field + 7);
    last = strrchr(field, '.');
    if (ends_with(field, "att_proj.weight")) *kind = NB_TENSOR_QKV;
    else if (ends_with(field, "attn_out.weight")) *kind = NB_TENSOR_ATTN_OUT;
    else if (ends_with(field, "ff_proj.weight")) *kind = NB_TENSOR_FF_IN;
    else if (ends_with(field, "ff_out.weight")) *kind = NB_TENSOR_FF_OUT;
    else if (last && strcmp(last, ".bias") == 0) *kind = NB_TENSOR_BIAS;
    else if (last && strcmp(last, ".c1") == 0) *kind = NB_TENSOR_SIAMESE_GAMMA;
    else if (last && (strcmp(last, ".alpha") == 0 || strcmp(last, ".alpha_shift") == 0))
        *kind = NB_TENSOR_DYT_ALPHA; /* DyT's alpha, Derf's [alpha, shift] */
    else if (ends_with(field, ".resweight") || ends_with(field, ".attn_resweight") ||
             ends_with(field, ".ff_resweight"))
        *kind = NB_TENSOR_REZERO; /* ReZero's per layer, SkipInit's per sublayer */
    else if (strcmp(field, "embed_scale") == 0) *kind = NB_TENSOR_EMBED_SCALE;
    else if (ends_with(field, ".value_residual.lambda")) *kind = NB_TENSOR_VALUE_RESIDUAL;
    else if (ends_with(field, ".value_embed.lambda")) *kind = NB_TENSOR_VALUE_EMBED;
    else if (ends_with(field, ".dwa.weight")) *kind = NB_TENSOR_DWA; /* DenseFormer's a_l */
    /* modded-nanogpt's U-Net skip weight and re-injection lambdas (the whole last component:
       the value residual's is ".value_residual.lambda") */
    else if (last && strcmp(last, ".skip_weight") == 0) *kind = NB_TENSOR_SKIP_WEIGHT;
    else if (last && strcmp(last, ".lambdas") == 0) *kind = NB_TENSOR_X0_LAMBDAS;
    /* Attention Residuals' readers before attention, FFN and the final norm: the pseudo-query
       and its key norm's gain (not a block norm's: ".attn_res_norm.weight" is nGPT's) */
    else if (attn_res_tensor(field, "proj.weight"))
        *kind = NB_TENSOR_ATTN_RES_QUERY;
    else if (attn_res_tensor(field, "norm.weight"))
        *kind = NB_TENSOR_ATTN_RES_GAIN;
    else if (ends_with(field, "ls1.gamma") || ends_with(field, "ls2.gamma"))
        *kind = NB_TENSOR_LAYERSCALE;
    else if (ends_with(field, ".attn_alpha") || ends_with(field, ".mlp_alpha"))
        *kind = NB_TENSOR_INTERP; /* nGPT's eigen learning rates */
    else if (ends_with(field, ".sqk")) *kind = NB_TENSOR_QK_SCALE;
    else if (ends_with(field, ".sinks")) *kind = NB_TENSOR_SINKS;
    else if (ends_with(field, ".suv")) *kind = NB_TENSOR_FF_SCALE;
    else if (strstr(field, "hc_") && !strstr(field, ".norm.")) {
        /* hyper-connections: mHC's hc_<s>_fn, _base, _scale and hc_head_*, HC's
           hc_<s>.static_alpha, .static_beta, .dynamic_{alpha,beta}_fn, .dynamic_*_scale (its
           per-stream norm hc_<s>.norm.* is a block norm's) */
        if (ends_with(field, "_fn")) *kind = NB_TENSOR_HC_FN;
        else if (ends_with(field, "_scale")) *kind = NB_TENSOR_HC_SCALE;
        else *kind = NB_TENSOR_HC_BASE;
    } else *kind = NB_TENSOR_GAIN;
    /* decayed: the matrices, mHC's fns, DenseFormer's weights and Attention Residuals'
       pseudo-queries (their codes' nn.Linear); not the U-Net's skip weights and lambdas, nor the
       value embeddings' lambdas (modded-nanogpt's scalars) */
    *no_decay = *kind == NB_TENSOR_GAIN || *kind == NB_TENSOR_BIAS ||
                (*kind >= NB_TENSOR_SIAMESE_GAMMA && *kind != NB_TENSOR_HC_FN &&
                 *kind != NB_TENSOR_DWA && *kind != NB_TENSOR_ATTN_RES_QUERY);
}

/* The tensor table against the fixture's parameters. Returns 1 when parameters can be loaded
   by name (every table entry has a fixture tensor of the same count, no overlaps). */
static int check_table(const char* cs, const char* tag, const nb_stack* s) {
    char name[1280];
    unsigned char* covered = (unsigned char*)calloc(s->n_params ? s->n_params : 1, 1);
    int i, ok = 1, n_fixture = 0, usable = 1;
    size_t k, n_cov = 0;
    if (!covered) abort();
    for (i = 0; i < s->n_tensors; i++) {
        const nb_tensor_info* ti = &s->tensors[i];
        const nbf_tensor *t = nbf_field(cs, ti->name, 0), *gt;
        char gfield[160];
        int layer, no_decay;
        nb_tensor_kind kind;
        if (!t) {
            snprintf(name, sizeof name, "%s/%s: table tensor '%s' (count %lu) is not in the "
                     "reference", cs, tag, ti->name, (unsigned long)ti->count);
            nbt_check(0, name);
            ok = usable = 0;
            continue;
        }
        snprintf(gfield, sizeof gfield, "grad.%s", ti->name);
        gt = nbf_field(cs, gfield, 1);
        if (!gt || gt->n != t->n) usable = 0;
        if (ti->count != t->n || ti->offset + ti->count > s->n_params) {
            snprintf(name, sizeof name, "%s/%s: table tensor '%s': count %lu offset %lu (of %lu)"
                     ", reference count %lu", cs, tag, ti->name, (unsigned long)ti->count,
                     (unsigned long)ti->offset, (unsigned long)s->n_params,
                     (unsigned long)t->n);
            nbt_check(0, name);
            ok = usable = 0;
            continue;
        }
        if (t->ndim == 2 ? (ti->rows != t->dims[0] || ti->cols != t->dims[1])
                         : (ti->rows != (int)t->n || ti->cols != 1)) {
            snprintf(name, sizeof name, "%s/%s: table tensor '%s' is %d x %d, reference %d x %d",
                     cs, tag, ti->name, ti->rows, ti->cols, t->dims[0],
                     t->ndim == 2 ? t->dims[1] : 1);
            nbt_check(0, name);
            ok = 0;
        }
        expected_info(ti->name, &layer, &kind, &no_decay);
        if (ti->layer != layer || ti->kind != kind || (ti->no_decay != 0) != no_decay) {
            snprintf(name, sizeof name, "%s/%s: table tensor '%s': layer %d kind %d no_decay %d"
                     ", expected %d %d %d", cs, tag, ti->name, ti->layer, (int)ti->kind,
                     ti->no_decay, layer, (int)kind, no_decay);
            nbt_check(0, name);
            ok = 0;
        }
        for (k = 0; k < ti->count; k++) {
            if (covered[ti->offset + k]) {
                snprintf(name, sizeof name, "%s/%s: table tensor '%s' overlaps another", cs, tag,
                         ti->name);
                nbt_check(0, name);
                ok = usable = 0;
                break;
            }
            covered[ti->offset + k] = 1;
            n_cov++;
        }
    }
    /* every reference parameter is in the table */
    for (i = 0; i < nbf_fx.count; i++) {
        const char* field = param_field(cs, &nbf_fx.t[i]);
        int j, found = 0;
        if (!field) continue;
        n_fixture++;
        for (j = 0; j < s->n_tensors && !found; j++) found = strcmp(s->tensors[j].name, field) == 0;
        if (!found) {
            snprintf(name, sizeof name, "%s/%s: reference parameter '%s' (count %lu) is not in "
                     "the table", cs, tag, field, (unsigned long)nbf_fx.t[i].n);
            nbt_check(0, name);
            ok = usable = 0;
        }
    }
    snprintf(name, sizeof name, "%s/%s: table has the reference's %d tensors (has %d) and covers "
             "n_params = %lu (covers %lu)", cs, tag, n_fixture, s->n_tensors,
             (unsigned long)s->n_params, (unsigned long)n_cov);
    nbt_check(ok && n_fixture == s->n_tensors && n_cov == s->n_params, name);
    free(covered);
    return usable;
}

#ifndef NBT_BF16
/* Attention Residuals: nb_stack_attn_res_weights after the forward against the reference's
   matrix ("attn_res_weights", (2L+1) x (2L+1): every reader's weights averaged over the tokens),
   under the activations' tolerances (the generator keeps draws whose float32 twin stays within
   0.3 of them here too). Nothing for a case without it. */
static void check_attn_res_weights(const char* cs, const char* tag, const nb_stack* s,
                                   const nb_real* cache, int B, int T) {
    const nbf_tensor* want = nbf_field(cs, "attn_res_weights", 0);
    const size_t J = 2 * (size_t)s->desc.n_layers + 1;
    double* got;
    nb_real* gr;
    char name[300];
    size_t k;
    nb_result rc;
    if (!want) return;
    snprintf(name, sizeof name, "%s/%s: attn_res_weights is %lu x %lu", cs, tag,
             (unsigned long)J, (unsigned long)J);
    if (!nbt_check(want->n == J * J, name)) return;
    got = (double*)malloc(J * J * sizeof *got);
    gr = (nb_real*)malloc(J * J * sizeof *gr);
    if (!got || !gr) abort();
    rc = nb_stack_attn_res_weights(s, cache, B, T, got);
    snprintf(name, sizeof name, "%s/%s: nb_stack_attn_res_weights returns NB_OK", cs, tag);
    if (nbt_check(rc == NB_OK, name)) {
        for (k = 0; k < J * J; k++) gr[k] = (nb_real)got[k];
        snprintf(name, sizeof name, "%s/%s: attn_res_weights", cs, tag);
        nbt_close(name, gr, want->data, J * J, FX_ATOL, FX_RTOL);
    }
    free(got);
    free(gr);
}
#endif

/* The porting options (blocks_porting.bin): absent = 0, nb_stack_desc's defaults. */
static void porting_options(const char* cs, nb_stack_desc* desc) {
    const nbf_tensor* g = nbf_field(cs, "attn_gate", 0);
    const nbf_tensor* ng = nbf_field(cs, "norm_gain", 0);
    const nbf_tensor* nb = nbf_field(cs, "norm_bias", 0);
    const nbf_tensor* go = nbf_field(cs, "gain_offset", 0);
    const nbf_tensor* es = nbf_field(cs, "embed_scale_on", 0); /* "embed_scale": the tensor */
    const nbf_tensor* bs = nbf_field(cs, "branch_scale", 0);
    const nbf_tensor* fb = nbf_field(cs, "ffn_bias", 0);
    desc->attn.gate = g && g->n == 1 ? (nb_attn_gate)(int)g->data[0] : NB_GATE_NONE;
    desc->norm.gain = ng && ng->n == 1 ? (int)ng->data[0] : 0;
    desc->norm.bias = nb && nb->n == 1 ? (int)nb->data[0] : 0;
    desc->norm.gain_offset = go && go->n == 1 ? (int)go->data[0] : 0;
    desc->norm.embed_scale = es && es->n == 1 ? (int)es->data[0] : 0;
    desc->residual.branch_scale = bs && bs->n == 1 ? (nb_branch_scale)(int)bs->data[0]
                                          : NB_BRANCH_SCALE_NONE;
    if (fb && fb->n == 1) desc->ffn.bias = (int)fb->data[0];
}

/* The preset a fixture names by its key (stored as character codes); 0 when unknown. */
static int fixture_preset(const char* cs, nb_preset* out, char* key, size_t key_size) {
    const nbf_tensor* t = nbf_field(cs, "preset_key", 1);
    size_t i;
    int p;
    if (!t) return 0;
    for (i = 0; i < t->n && i + 1 < key_size; i++) {
        if (!(t->data[i] >= 'a' && t->data[i] <= 'z') && t->data[i] != '_' &&
            !(t->data[i] >= '0' && t->data[i] <= '9')) break;
        key[i] = (char)t->data[i];
    }
    key[i] = 0;
    for (p = 1; p < NB_PRESET_COUNT && i == t->n; p++)
        if (!strcmp(key, nb_preset_name((nb_preset)p))) { *out = (nb_preset)p; return 1; }
    nbf_fail("%s.preset_key: \"%s\" is not a preset of this normblocks.h", cs, key);
    return 0;
}

static void run_case(const block_case* bc, const variant* v) {
    const char* cs = bc->name;
    int L, B, T, d, H, Hkv, f, rope, norm, ffn, sites, pscale, pfusion, i, streams;
    nb_preset preset;
    char key[64];
    double theta, eps, alpha;
    const nbf_tensor *E, *dout, *out, *din;
    nb_stack_desc desc;
    nb_stack s;
    nb_ctx ctx;
    nb_result rc;
    nbf_run r;
    size_t n_act, n_ve = 0, k;
    const nbf_tensor *ve = NULL, *dve = NULL;
    nb_real *ve_rows = NULL, *ve_grad = NULL;
    char name[1280];

    if (!nbf_int(cs, "L", &L) || !nbf_int(cs, "B", &B) || !nbf_int(cs, "T", &T) ||
        !nbf_int(cs, "d", &d) || !nbf_int(cs, "H", &H) || !nbf_int(cs, "Hkv", &Hkv) ||
        !nbf_int(cs, "f", &f) || !nbf_int(cs, "rope", &rope) || !nbf_int(cs, "norm", &norm) ||
        !nbf_int(cs, "ffn", &ffn) || !fixture_preset(cs, &preset, key, sizeof key) ||
        !nbf_int(cs, "sites", &sites) || !nbf_int(cs, "siamese_paper_scale", &pscale) ||
        !nbf_int(cs, "siamese_paper_fusion", &pfusion) || !nbf_real(cs, "theta", &theta) ||
        !nbf_real(cs, "eps", &eps) || !nbf_real(cs, "mixln_alpha", &alpha))
        return;
    if (L <= 0 || B <= 0 || T <= 0 || d <= 0 || H <= 0 || Hkv <= 0 || d % H || H % Hkv ||
        norm < 1 || norm > 5 || ffn < 1 || ffn > 3) {
        nbf_fail("%s: inconsistent scalars", cs);
        return;
    }
    n_act = (size_t)B * T * d;
    E = nbf_shaped(cs, "E", B * T, d);
    dout = nbf_shaped(cs, "dout", B * T, d);
    out = nbf_shaped(cs, "out", B * T, d);
    din = nbf_shaped(cs, "din", B * T, d);
    if (!E || !dout || !out || !din) return;

    memset(&desc, 0, sizeof desc);
    memset(&ctx, 0, sizeof ctx);
    ctx.num_threads = v->threads;
    if (v->by_name) {
        const char* pn = bc->preset_name ? bc->preset_name : key;
        if (bc->preset_name && !bc->preset_name[0]) return;
        rc = nb_preset_from_name(&ctx, &desc, pn);
        snprintf(name, sizeof name, "nb_preset_from_name(\"%s\")", pn ? pn : "(null)");
        if (!nbf_check_rc(&ctx, rc, cs, v->tag, name)) return;
        /* preset, sites, norm, ffn and eps (0 = the preset's default) come from the name */
    } else {
        desc.preset = preset;
        desc.attn.sites = (unsigned)sites;
        desc.norm.type = norm == 1 ? NB_NORM_RMS : norm == 2 ? NB_NORM_LAYER
                  : norm == 3 ? NB_NORM_DYT : norm == 4 ? NB_NORM_L2 : NB_NORM_DERF;
        desc.norm.eps = (nb_real)eps;
        desc.ffn.type = ffn == 1 ? NB_FFN_SWIGLU : ffn == 2 ? NB_FFN_GELU_TANH : NB_FFN_GELU_ERF;
    }
    desc.n_layers = L;
    desc.d_model = d;
    desc.n_heads = H;
    desc.n_kv_heads = Hkv;
    desc.ffn.d_ff = f;
    desc.mixln_alpha = alpha;
    desc.attn.rope = rope;
    desc.attn.rope_theta = (nb_real)theta;
    desc.siamese.paper_scale = pscale;
    desc.siamese.paper_fusion = pfusion;
    {   /* optional: written only for the ablation's cases, and GPT-2's attention biases */
        const nbf_tensor* nf = nbf_field(cs, "siamese_no_fusion_norm", 0);
        const nbf_tensor* ab = nbf_field(cs, "attn_bias", 0);
        const nbf_tensor* vr = nbf_field(cs, "value_residual", 0);
        /* hyper-connections: absent = 0 (the preset's; 4 streams, dynamic, 20 iterations);
           the kind is nb_hyper's value (2 mHC, 3 HC, 4 IHC, 5 NB_HYPER_MHC_LITE) */
        const nbf_tensor* hy = nbf_field(cs, "hyper", 0);
        const nbf_tensor* hn = nbf_field(cs, "hyper_streams", 0);
        const nbf_tensor* hs = nbf_field(cs, "hyper_static", 0);
        const nbf_tensor* hk = nbf_field(cs, "hyper_sinkhorn", 0);
        /* CompleteP: absent = 0 (off; L_base 1) */
        const nbf_tensor* da = nbf_field(cs, "depth_alpha", 0);
        const nbf_tensor* db = nbf_field(cs, "depth_base", 0);
        /* nGPT's options: absent = 0 (the preset's: on for ngpt, else off; interp 0.05) */
        const nbf_tensor* ii = nbf_field(cs, "interp_init", 0);
        const nbf_tensor* qs = nbf_field(cs, "qk_scale", 0);
        const nbf_tensor* ss = nbf_field(cs, "softmax_scale", 0);
        const nbf_tensor* fs = nbf_field(cs, "ffn_in_scale", 0);
        /* gemm.bf16_outputs of a case of blocks_bf16.bin: absent = 0 */
        const nbf_tensor* bo = nbf_field(cs, "bf16_outputs", 0);
        /* attention sinks: absent = 0 (none) */
        const nbf_tensor* as = nbf_field(cs, "attn_sink", 0);
        /* OLMo's clip_qkv: absent = 0 (off) */
        const nbf_tensor* cq = nbf_field(cs, "clip_qkv", 0);
        /* Gemma 2's attention-logit softcap: absent = 0 (off) */
        const nbf_tensor* sc = nbf_field(cs, "softcap", 0);
        /* DenseFormer's depth-weighted average, its dilation and its period: absent = 0 (off;
           k = 1; p = 1) */
        const nbf_tensor* dw = nbf_field(cs, "dwa", 0);
        const nbf_tensor* dk = nbf_field(cs, "dwa_dilation", 0);
        const nbf_tensor* dp = nbf_field(cs, "dwa_period", 0);
        /* Attention Residuals and its block size: absent = 0 (off; Full AttnRes) */
        const nbf_tensor* ar = nbf_field(cs, "attn_res", 0);
        const nbf_tensor* as_ = nbf_field(cs, "attn_res_block", 0);
        /* modded-nanogpt's U-Net skips and x_0 re-injection: absent = 0 (off) */
        const nbf_tensor* us = nbf_field(cs, "unet_skips", 0);
        const nbf_tensor* rx = nbf_field(cs, "reinject_x0", 0);
        /* modded-nanogpt's value embeddings: absent = 0 (off) */
        const nbf_tensor* vn = nbf_field(cs, "value_embeds", 0);
        desc.siamese.no_fusion_norm = nf && nf->n == 1 ? (int)nf->data[0] : 0;
        desc.attn.bias = ab && ab->n == 1 ? (unsigned)ab->data[0] : 0;
        desc.residual.value_residual = vr && vr->n == 1 ? (int)vr->data[0] : 0;
        desc.hyper.kind = hy && hy->n == 1 ? (nb_hyper)(int)hy->data[0] : NB_HYPER_DEFAULT;
        desc.hyper.streams = hn && hn->n == 1 ? (int)hn->data[0] : 0;
        desc.hyper.static_maps = hs && hs->n == 1 ? (int)hs->data[0] : 0;
        desc.hyper.sinkhorn = hk && hk->n == 1 ? (int)hk->data[0] : 0;
        desc.residual.depth_alpha = da && da->n == 1 ? da->data[0] : 0;
        desc.residual.depth_base = db && db->n == 1 ? (int)db->data[0] : 0;
        desc.residual.interp_init = ii && ii->n == 1 ? ii->data[0] : 0;
        desc.attn.qk_scale = qs && qs->n == 1 ? (int)qs->data[0] : 0;
        desc.attn.softmax_scale = ss && ss->n == 1 ? (nb_real)ss->data[0] : 0;
        desc.ffn.in_scale = fs && fs->n == 1 ? (int)fs->data[0] : 0;
        desc.gemm.bf16_outputs = bo && bo->n == 1 ? (int)bo->data[0] : 0;
        desc.attn.sink = as && as->n == 1 ? (nb_attn_sink)(int)as->data[0] : NB_SINK_NONE;
        desc.attn.clip_qkv = cq && cq->n == 1 ? (nb_real)cq->data[0] : 0;
        desc.attn.softcap = sc && sc->n == 1 ? (nb_real)sc->data[0] : 0;
        desc.residual.dwa = dw && dw->n == 1 ? (int)dw->data[0] : 0;
        desc.residual.dwa_dilation = dk && dk->n == 1 ? (int)dk->data[0] : 0;
        desc.residual.dwa_period = dp && dp->n == 1 ? (int)dp->data[0] : 0;
        desc.residual.attn_res = ar && ar->n == 1 ? (int)ar->data[0] : 0;
        desc.residual.attn_res_block = as_ && as_->n == 1 ? (int)as_->data[0] : 0;
        desc.residual.unet_skips = us && us->n == 1 ? (int)us->data[0] : 0;
        desc.residual.reinject_x0 = rx && rx->n == 1 ? (int)rx->data[0] : 0;
        desc.residual.value_embeds = vn && vn->n == 1 ? (int)vn->data[0] : 0;
        porting_options(cs, &desc);
        /* the stack's streams: 2 for SiameseNorm, n with hyper-connections, else 1 */
        streams = preset == NB_PRESET_SIAMESE || preset == NB_PRESET_SIAMESE_POST_PRE ? 2 : 1;
        if (desc.hyper.kind == NB_HYPER_DEFAULT ? preset == NB_PRESET_MHC || preset == NB_PRESET_HC ||
                                                 preset == NB_PRESET_IHC
                                           : desc.hyper.kind != NB_HYPER_NONE)
            streams = desc.hyper.streams ? desc.hyper.streams : 4;
    }
    desc.attn.memory = v->memory;
    desc.run.check_finite = v->check_finite;
    desc.gemm.backend = v->backend;
#ifdef NBT_BF16
#ifdef NB__TEST_GEMM16 /* only the variants whose paths a GEMM writing bf16 changes: the packed
                          attention's dO, and gemm.bf16_outputs */
    if (v->attn != 1 + NB__ATTN_PORTABLE && !v->bf16_outputs) return;
#endif
    desc.gemm.precision = NB_PRECISION_BF16;
    /* the twin's bf16 references hold one setting. gemm.bf16_outputs is held to those only: it
       is another model than blocks.bin's float64 one, farther from it than the loose bound's
       statistics allow on ill-conditioned tensors (the twin in float64 with autocast's
       rounding, exact sums, puts dwa_post_k2_L4's blocks.2.dwa gradient at 1.67 of the loose
       bound, 0.55 without it) */
    if (bf16_tight ? desc.gemm.bf16_outputs != v->bf16_outputs : v->bf16_outputs) return;
    desc.gemm.bf16_outputs = v->bf16_outputs;
    {   /* the largest inner dimension of the stack's GEMMs: d, the FFN's widths, B T */
        const int w = ffn == 1 ? 2 * f : f;
        bf16_K = d > w ? d : w;
        if (B * T > bf16_K) bf16_K = B * T;
    }
#endif

    memset(&s, 0, sizeof s);
    rc = nb_stack_init(&ctx, &s, &desc, B + v->extra_b, T + v->extra_t);
    if (rc == NB_ERR_CONFIG && v->backend == NB_BACKEND_DNNL && strstr(ctx.err, "no bf16 matmul")) {
        static int said;
        if (!said++) printf("SKIP %s: %s\n", v->tag, ctx.err);
        return;
    }
    if (!nbf_check_rc(&ctx, rc, cs, v->tag, "nb_stack_init")) {
        nb_stack_free(&s);
        return;
    }
    if (v->attn) {
        static int said;
        if (v->attn - 1 == NB__ATTN_AVX512BF16 && nb__bf16_isa() < NB__ISA_AVX512BF16) {
            if (!said++) printf("SKIP %s: this CPU (or its OS) has no avx512_bf16\n", v->tag);
            nb_stack_free(&s);
            return;
        }
        set_kernel(&s, v->attn - 1);
    }
    snprintf(name, sizeof name, "%s/%s: stack has %d layers and %d stream(s)", cs, v->tag, L,
             streams);
    nbt_check(s.desc.n_layers == L && s.streams == streams, name);
    if (!check_table(cs, v->tag, &s)) {
        nb_stack_free(&s);
        return;
    }
#ifdef NBT_BF16
    if (v->bf16_outputs)
        check_out16_cache(&ctx, desc, &s, B + v->extra_b, T + v->extra_t, cs, v->tag);
#endif

    nbf_run_params(&r, s.n_params, v->accumulate);
    for (i = 0; i < s.n_tensors; i++) {
        const nb_tensor_info* ti = &s.tensors[i];
        const nbf_tensor* t = nbf_field(cs, ti->name, 1);
        for (k = 0; k < ti->count; k++) r.params[ti->offset + k] = (nb_real)t->data[k];
    }
    nbf_run_acts(&r, n_act, E->data, dout->data, 0, s.n_cache, s.n_scratch);
    if (desc.residual.value_embeds) {
        /* the tables' rows of the call (N x B*T x H_kv d_k, an input of the case) bound with
           their gradient rows, NaN: the backward overwrites them (the two layers that share a
           table summed); the test holds those to dve as it holds din */
        n_ve = (size_t)desc.residual.value_embeds * B * T * Hkv * (d / H);
        ve = nbf_field(cs, "ve", 1);
        dve = nbf_field(cs, "dve", 1);
        snprintf(name, sizeof name, "%s/%s: the value embeddings' rows and gradient have %lu "
                 "values", cs, v->tag, (unsigned long)n_ve);
        if (!nbt_check(ve && dve && ve->n == n_ve && dve->n == n_ve, name)) {
            nbf_run_finish(&r, cs, v->tag);
            nb_stack_free(&s);
            return;
        }
        ve_rows = nbf_buffer(n_ve, ve->data);
        ve_grad = nbf_buffer(n_ve, NULL);
        nbf_check_rc(&ctx, nb_stack_set_value_embeds(&ctx, &s, ve_rows, ve_grad), cs, v->tag,
                     "nb_stack_set_value_embeds");
    }

    rc = nb_stack_forward(&ctx, &s, r.params, r.out, r.x, B, T, r.cache, r.scratch);
    if (nbf_check_rc(&ctx, rc, cs, v->tag, "nb_stack_forward")) {
        snprintf(name, sizeof name, "%s/%s: out", cs, v->tag);
#ifdef NBT_BF16
        bf16_close(name, r.out, out->data, n_act, L, 0, 0);
#else
        nbt_close(name, r.out, out->data, n_act, FX_ATOL, FX_RTOL);
        check_attn_res_weights(cs, v->tag, &s, r.cache, B, T);
#endif
        nbf_fill_nan(r.scratch, s.n_scratch);
        rc = nb_stack_backward(&ctx, &s, r.params, r.grads, r.dx, r.dout, B, T, r.cache,
                               r.scratch);
        if (nbf_check_rc(&ctx, rc, cs, v->tag, "nb_stack_backward")) {
            double* e = nbf_run_expected(&r, v->accumulate);
            snprintf(name, sizeof name, "%s/%s: din", cs, v->tag);
#ifdef NBT_BF16
            double rms = 0;
            bf16_close(name, r.dx, din->data, n_act, L, 1, 0);
            for (i = 0; i < s.n_tensors; i++) { /* e: the reference gradients, in place */
                const nb_tensor_info* ti = &s.tensors[i];
                char gfield[160];
                snprintf(gfield, sizeof gfield, "grad.%s", ti->name);
                for (k = 0; k < ti->count; k++)
                    e[ti->offset + k] = nbf_field(cs, gfield, 1)->data[k];
            }
            for (k = 0; k < s.n_params; k++) rms += e[k] * e[k];
            rms = sqrt(rms / (double)s.n_params);
#else
            nbt_close(name, r.dx, din->data, n_act, FX_ATOL, FX_RTOL);
#endif
            if (n_ve) { /* the rows' gradient, with din's tolerance; the rows left as they were */
                snprintf(name, sizeof name, "%s/%s: value embedding rows' gradient", cs, v->tag);
#ifdef NBT_BF16
                bf16_close(name, ve_grad, dve->data, n_ve, L, 1, 0);
#else
                nbt_close(name, ve_grad, dve->data, n_ve, FX_ATOL, FX_RTOL);
#endif
                for (k = 0; k < n_ve && ve_rows[k] == (nb_real)ve->data[k]; k++) {}
                snprintf(name, sizeof name, "%s/%s: value embedding rows unchanged", cs, v->tag);
                nbt_check(k == n_ve, name);
                nbf_check_canary(cs, v->tag, "value embedding rows' gradient", ve_grad, n_ve);
            }
            for (i = 0; i < s.n_tensors; i++) {
                const nb_tensor_info* ti = &s.tensors[i];
                char gfield[160];
                snprintf(gfield, sizeof gfield, "grad.%s", ti->name);
                snprintf(name, sizeof name, "%s/%s: grad %s", cs, v->tag, ti->name);
#ifdef NBT_BF16
                bf16_close(name, r.grads + ti->offset, e + ti->offset, ti->count, L, 1, rms);
#else
                nbf_run_compare_grad(name, r.grads + ti->offset, e, ti->offset,
                                     nbf_field(cs, gfield, 1), ti->count);
#endif
            }
            free(e);
            nbf_run_check_backward(&r, cs, v->tag, "din");
#ifdef NBT_BF16
            if (!v->accumulate && v->memory == NB_ATTN_MEMORY_PROBS)
                check_bf16_weights(&ctx, desc, &s, &r, B, T, cs, v->tag, ve_rows, ve_grad,
                                   n_ve);
#endif
        }
    }
    if (n_ve) nbf_check_canary(cs, v->tag, "value embedding rows", ve_rows, n_ve);
    free(ve_rows);
    free(ve_grad);
    nbf_run_finish(&r, cs, v->tag);
    nb_stack_free(&s);
}

/* The gradient tensors of a case are exactly those of its parameters. */
static void check_grads_paired(const char* cs) {
    size_t len = strlen(cs);
    int i, bad = 0;
    char name[300];
    for (i = 0; i < nbf_fx.count; i++) {
        const char* n = nbf_fx.t[i].name;
        char pname[160];
        if (!nbf_in_case(n, cs) || strncmp(n + len + 1, "grad.", 5) != 0) continue;
        snprintf(pname, sizeof pname, "%s.%s", cs, n + len + 6);
        if (!nbf_get(&nbf_fx, pname)) {
            if (!bad) printf("  gradient without parameter: %s\n", n);
            bad++;
        }
    }
    snprintf(name, sizeof name, "%s: every reference gradient has its parameter", cs);
    nbt_check(bad == 0, name);
}

/* whether the build runs blocks.bin's case cs (see the variants above) */
static int emu_case(const char* cs) {
#ifdef NB__TEST_X86_EMU
    return !strncmp(cs, "tiles_", 6);
#else
    (void)cs;
    return 1;
#endif
}

int main(int argc, char** argv) {
    size_t c, k;
    if (!nbf_args_ok(argc, argv)) return nbt_finish();
    if (!nbf_load_checked("test_block_fixtures", argv[1], "blocks.bin")) return nbt_finish();
    nbf_check_known("blocks.bin", cases, NBF_NCASES(cases), sizeof cases[0]);
    for (c = 0; c < NBF_NCASES(cases); c++) {
        if (!emu_case(cases[c].name) || !nbf_has_case("blocks.bin", cases[c].name, "L")) continue;
        check_grads_paired(cases[c].name);
        for (k = 0; k < NBF_NCASES(variants); k++) run_case(&cases[c], &variants[k]);
    }
    nbf_free(&nbf_fx);
    /* the porting options against the references checked against the official codes */
    if (!nbf_load_checked("test_block_fixtures", argv[1], "blocks_porting.bin"))
        return nbt_finish();
    nbf_check_known("blocks_porting.bin", porting_cases, NBF_NCASES(porting_cases),
                    sizeof porting_cases[0]);
    for (c = 0; c < NBF_NCASES(porting_cases); c++) {
        if (!emu_case(porting_cases[c].name) ||
            !nbf_has_case("blocks_porting.bin", porting_cases[c].name, "L"))
            continue;
        check_grads_paired(porting_cases[c].name);
        for (k = 0; k < NBF_NCASES(variants); k++) run_case(&porting_cases[c], &variants[k]);
    }
    nbf_free(&nbf_fx);
#ifdef NBT_BF16
    /* the BF16 stack against the twin's bf16 references (tests/gen_bf16_fixtures.py) */
    if (!nbf_load_checked("test_block_fixtures", argv[1], "blocks_bf16.bin")) return nbt_finish();
    nbf_check_known("blocks_bf16.bin", bf16_cases, NBF_NCASES(bf16_cases), sizeof bf16_cases[0]);
    bf16_tight = 1;
    for (c = 0; c < NBF_NCASES(bf16_cases); c++) {
        if (!nbf_has_case("blocks_bf16.bin", bf16_cases[c].name, "L")) continue;
        check_grads_paired(bf16_cases[c].name);
        for (k = 0; k < NBF_NCASES(variants); k++) run_case(&bf16_cases[c], &variants[k]);
    }
    if (bf16_nratios) {
        qsort(bf16_ratios, (size_t)bf16_nratios, sizeof bf16_ratios[0], cmp_double);
        printf("blocks_bf16.bin: %d tensors, error / allowed: max %.3g, median %.3g\n",
               bf16_nratios, bf16_ratios[bf16_nratios - 1], bf16_ratios[bf16_nratios / 2]);
    }
    nbf_free(&nbf_fx);
#endif
    return nbt_finish();
}
