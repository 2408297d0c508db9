/* normblocks.h - v0.2.0 - transformer blocks that differ in where normalization sits.
   Single-header C99/C++ library, forward and backward, over BLAS GEMMs and OpenMP.

   DO THIS ONCE, in exactly one C or C++ file:
       #define NORMBLOCKS_IMPLEMENTATION
       #include "normblocks.h"
   Every other file just includes it.

   LINK WITH
       -fopenmp -lopenblas -lm         (Debian: apt-get install build-essential libopenblas-dev)
   or, with CMake:  find_package(normblocks) + target_link_libraries(app normblocks::normblocks)
   Without BLAS, define NB_NO_BLAS: a portable reference GEMM is used instead (slow, correct).
   Without -fopenmp everything runs on one thread.
   With oneDNN (bf16 on the CPU's matrix units), define NB_USE_DNNL and add -ldnnl
   (Debian: libdnnl-dev; its runtime is GNU OpenMP, so build with gcc's -fopenmp).

   PERFORMANCE TRAPS (read before timing anything)
     - Debian's OpenBLAS 0.3.21 does not recognise recent Xeons and silently uses SSE3 kernels:
       export OPENBLAS_CORETYPE=SkylakeX (or Haswell on AVX2-only CPUs) before the program starts.
     - Debian's default OpenBLAS is the pthread build. normblocks never calls BLAS from inside an
       OpenMP region, but BLAS's own threads and our OpenMP threads take turns on the same cores:
       set OPENBLAS_NUM_THREADS to the number of cores (or 1) and OMP_WAIT_POLICY=PASSIVE, or
       install libopenblas0-openmp.

   OPTIONS (define before the #include that has NORMBLOCKS_IMPLEMENTATION)
     NB_DOUBLE           nb_real is double instead of float (the tests use this for gradient
                         checks). Define it identically in every file of the program.
     NB_NO_BLAS          use the built-in reference GEMM instead of cblas_sgemm/cblas_dgemm.
     NB_USE_DNNL         compile in the oneDNN backend of stacks (nb_stack_desc.backend): the
                         projections' GEMMs on oneDNN's matmul primitive, bf16 on AMX or
                         AVX512-BF16 (float32 builds; link -ldnnl).
     NB_NO_X86_KERNELS   leave out the AMX and AVX512-BF16 kernels of BF16's attention
                         products (compiled by default on x86-64 with gcc >= 11 or clang >= 12,
                         chosen at run time by the CPU; the emulation runs instead).
     NB_STATIC           make every function static (private to the including file).
     NB_MALLOC/NB_FREE   override the allocator (both or neither). They receive the user pointer
                         of nb_ctx.alloc_user:  NB_MALLOC(size, user), NB_FREE(ptr, user).
     NB_ASSERT(x)        override assert() (used for internal invariants only: carved buffers
                         within their planned sizes, thread shares within the scratch; bad input
                         is reported through return codes, never through asserts).

   FLOATING-POINT FLAGS (the header takes the flags of the file that includes it)
     Supported, with results equal to those of -O2 to float32 rounding (a few ulp), with gcc
     (12) and clang (14), as C and as C++: -O0 to -O3, -Ofast, -ffast-math and each flag it
     implies (-ffinite-math-only, -fno-math-errno, -fassociative-math, -freciprocal-math,
     -fno-signed-zeros, -fno-trapping-math), -march=native. CTest builds the fixture tests
     (norms, sublayers, stacks, float32 and float64), the bad-hyperparameter and the
     non-finite-check tests with -Ofast -march=native and with -O2 -ffast-math, with both
     compilers. How: no kernel relies on IEEE evaluation order, NaN or Inf in arithmetic (exp
     rounds by an int conversion and reduces in double; every NaN/Inf test - hyperparameters,
     nb_stack_desc.run.check_finite, "zero means default" - reads the bits, which no flag changes).
     What the flags change, and the header cannot: under -ffinite-math-only non-finite values
     in the data (an Inf mask in scores, a NaN activation) have no defined result, as anywhere
     in a program built so (the check_finite test still reports them by layer: use it);
     -ffast-math reorders sums (results move by rounding, still bitwise reproducible for one
     binary and thread count); -Ofast links code that flushes subnormals to zero.
     Refused at compile time (#error): -ffast-math with a compiler that is neither gcc nor clang
     (__FAST_MATH__ without __GNUC__) and MSVC's /fp:fast, where these guarantees are untested.

   CONVENTIONS
     - Matrices are row-major. A linear layer stores W as (out, in), like PyTorch nn.Linear,
       and computes y = x W^T.
     - "Rows with a stride": a kernel over `rows` rows of `width` elements reads row r at
       x + r*ldx, so it can work in place inside a wider packed buffer (ldx >= width).
     - Norms act on segments: each row of `width` is split into width/seg independent segments
       of `seg` elements that share one gain vector of length seg. seg = 0 (or width) normalizes
       the whole row. With width = H*d_k and seg = d_k this is a per-head norm.
     - Outputs come first in argument lists (llm.c), then inputs, then shapes.
     - Every function that can fail returns nb_result; NB_OK is 0. The reason is written into
       ctx->err (if ctx is not NULL) and passed to ctx->log (if set), naming the function and the
       argument or field. nb_result_string() names the code. Invalid input never crashes and
       never writes outputs.
     - What is checked: every pointer argument (NULL), every shape, stride and count (including
       sizes that would overflow int or size_t: such a plan or stack is refused), every float
       hyperparameter (finite and in range), the thread count against what a scratch was sized
       for, and that a backward reads a cache written by a complete forward of the same plan or
       stack with the same B and T (a small header at the start of each cache).
       What is trusted, as C cannot check it: that a buffer has the number of values the
       documentation or plan gives for it (n_params, n_cache, n_scratch, nb_norm_scratch_size,
       rows*ld...), that plans and stacks come from their _make/_init functions and are not
       modified afterwards (nb_stack.skip and desc.run.check_finite excepted), that a custom layer
       array has n_layers entries, and that buffers that are not documented as aliasable do not
       overlap. Values inside the tensors (NaN, Inf) are data, not errors, unless
       nb_stack_desc.run.check_finite asks.
     - Backward functions ACCUMULATE parameter gradients (dgain, dbias): zero them once per step.
       Input gradients (dx) are overwritten, or accumulated when `accumulate` is non-zero.
       nb_stack_backward can do either for both (nb_stack_desc.run: param_grads, input_grad).
     - Threads: ctx->num_threads (0 = omp_get_max_threads()) sets the OpenMP team of every
       kernel through a num_threads clause; normblocks never calls omp_set_num_threads. Rows are
       split statically and per-thread partial sums are reduced in thread order, so results are
       bitwise reproducible for a fixed thread count. Different thread counts agree to rounding.
       Teams are at most NB_MAX_THREADS: a larger num_threads is clamped.

   STEP BY STEP: RMSNorm forward and backward on a (rows x width) matrix
       nb_ctx ctx = {0};                       // all zero = defaults
       ctx.num_threads = 2;
       float y[R*W], rstd[R], dx[R*W], dgain[W] = {0};
       nb_rmsnorm_forward(&ctx, y, W, rstd, x, W, gain, R, W, 0, 1e-5f);
       ... loss gives dy ...
       size_t n = nb_norm_scratch_size(&ctx, W, 0);       // per-thread partial sums
       float* scratch = malloc(n * sizeof(float));
       if (nb_rmsnorm_backward(&ctx, dx, W, dgain, dy, W, x, W, rstd, gain, R, W, 0, 0,
                               scratch) != NB_OK)
           fprintf(stderr, "%s\n", ctx.err);

   STEP BY STEP: a HybridNorm stack (the whole model body between embedding and LM head)
       nb_stack_desc desc = {0};
       desc.n_layers = 12; desc.d_model = 768; desc.n_heads = 12; desc.n_kv_heads = 4;
       desc.attn.rope = 1;                                 // groups: norm, attn, ffn, ...
       nb_preset_from_name(&ctx, &desc, "hybrid_star");      // or desc.preset = NB_PRESET_...
       nb_stack s;
       if (nb_stack_init(&ctx, &s, &desc, max_batch, max_seq)) puts(ctx.err);
       const size_t z = sizeof(nb_real);                   // float, or double with NB_DOUBLE
       nb_real *params = malloc(s.n_params * z), *grads = calloc(s.n_params, z);
       nb_real *cache = malloc(s.n_cache * z), *scratch = malloc(s.n_scratch * z);
       nb_stack_init_params(&ctx, &s, params, NB_INIT_MEGATRON, 0, seed);
       nb_stack_forward(&ctx, &s, params, h, emb, B, T, cache, scratch);    // h: B*T x d
       nb_stack_backward(&ctx, &s, params, grads, demb, dh, B, T, cache, scratch);
       // s.tensors[0..s.n_tensors): name ("blocks.3.att_proj.weight"), offset, count,
       // no_decay: the map between the flat buffers and PyTorch names.
       nb_stack_free(&s);
     A new variant is a schedule: nb_layer_desc layers[L] (per layer: placement of the attention
     and FFN sublayers, and attention norm sites), desc.layers = layers, preset left at 0.

   PRIMITIVES
     nb_rmsnorm_forward / nb_rmsnorm_backward     y = gain * x / sqrt(mean(x^2) + eps)
     nb_layernorm_forward / nb_layernorm_backward y = gain * (x - mu) / sqrt(var + eps) + bias
     nb_dyt_forward / nb_dyt_backward             y = gain * tanh(alpha x) + bias (DyT)
     nb_derf_forward / nb_derf_backward           y = gain * erf(alpha x + shift) + bias (Derf)
     nb_l2norm_forward / nb_l2norm_backward       y = x / ||x||_2 (nGPT)
     nb_softmax_forward / nb_softmax_backward     p = softmax(scale * s) over rows, causal option
     nb_gemm (BLAS or reference), nb_gemm_ref (always the reference)
     nb_add, nb_axpby                             elementwise helpers
     nb_rope                                      NeoX rotate-half RoPE (inverse = backward)

   SUBLAYERS AND STACKS ("plan, then compute": a plan validates a description and tells the
   sizes of the parameter, cache and scratch buffers the caller allocates)
     nb_attn_plan_make / nb_attn_forward / nb_attn_backward   attention with Q, K, V, C norm
                                                  sites, GQA, RoPE, an output gate, two
                                                  memory modes
     nb_stack_gate_stats                          per head: gated attention's mean gate
     nb_attn_head_stats, nb_stack_head_stats      per head: the largest logit, the first
                                                  key's attention mass (attention sinks)
     nb_attn_sink_mass, nb_stack_sink_mass        per head: the mass attn.sink's sink takes
     nb_stack_attn_res_weights                    Attention Residuals' depth weights
     nb_stack_qk_clip                             QK-Clip (Kimi K2) after an optimizer step
     nb_ffn_plan_make / nb_ffn_forward / nb_ffn_backward      SwiGLU or GELU MLP
     nb_stack_init / nb_stack_forward / nb_stack_backward     L blocks with a placement
                                                  schedule (presets: nb_preset_from_name)
     nb_layer_forward / nb_layer_backward         one layer of a stack
     nb_stack_set_layout                          bind a trainer's own parameter layout
     nb_gemm_bf16, nb_bf16_kernels, .precision    bf16 GEMM operands (mixed precision)
     nb_stack_set_bf16_weights, nb_bf16_round     the weights' bf16 copy kept by the caller
     nb_stack_gemm_bf16                           the caller's GEMMs (LM head) on the stack's
                                                  engine, bf16 operands
     .gemm.bf16_outputs                           autocast's bf16 FFN hidden layer
     nb_stack_set_value_embeds                    the value embeddings' rows of a call (the
                                                  caller's tables, modded-nanogpt's)
     .backend, nb_stack_kernels                   who runs a stack's GEMMs (BLAS, oneDNN;
                                                  BF16's engine timed, not named by the ISA)
     nb_ctx.profile, nb_prof_part_name            where the time goes: GEMMs, attention core,
                                                  norms, bf16 conversions, the rest
     nb_stack_init_params, nb_init_io_std         the initializers of the papers' code
     nb_preset_init                               which of them a preset's code used
     nb_stack_grad_norms, nb_stack_hidden_norms, nb_stack_angular_distance, nb_stack.skip,
     nb_stack_hyper_gains, nb_stack_desc.run.check_finite   the diagnostics the papers plot

   THE PRESETS (nb_preset_from_name takes the key or an alias, case-insensitive)
     N is the stack's norm: RMSNorm y = g * x / sqrt(mean(x^2) + eps) (default), LayerNorm y = g *
     (x - mean) / sqrt(var + eps) + b, DyT y = g * tanh(a x) + b (a learnable scalar per norm), Derf
     y = g * erf(a x + s) + b (two), or L2 y = x / ||x|| (nGPT). MHA_# is attention with norms at
     the sites # of Q, K, V (after the projection, before RoPE) and C (the concatenated heads,
     before W_o), per head with one gain of d_k shared by the heads unless stated. F is the FFN. l =
     0..L-1 unless stated. Every preset but none, rezero and ngpt ends with the final norm ln_f (the
     official codes apply it before the LM head even where the papers' equations stop at x_L).
     The aliases are the papers' names (Pre-Norm, Post-Norm, Sandwich, OLMo-2, DeepNorm, HybridNorm,
     QKV-Post, HybridNorm*, Mix-LN, SiameseNorm, GPT-2, LayerNorm-Scaling, NoNorm, DyT, Peri-LN,
     ReZero, CaiT, nGPT, mHC, Hyper-Connections, ...): nb_preset_aliases lists each preset's.
       pre           y = x + MHA(N(x));  x' = y + F(N(y))
       post          y = N(x + MHA(x));  x' = N(y + F(y))   (+ ln_f, the Mix-LN code's)
       post_flags    layer 0: y = x + MHA(x), else a = N(x), y = a + MHA(a);  b = N(y),
                     x' = b + F(b)   (the HybridNorm code's Post-Norm: equals post without ln_f
                     when ff_norm of l is post's first norm and attn_norm of l+1 its second)
       sandwich      y = x + N(MHA(N(x)));  x' = y + N(F(N(y)))   (Gemma; add sites for QK)
       olmo2         y = x + N(MHA_QK(x));  x' = y + N(F(y)), QK norms over the full projection
                     width, eps 1e-6 (the OLMo-2 code, not its blog's N(x + F(x)))
       deepnorm      y = N(a x + MHA(x));  x' = N(a y + F(y)),  a = (2L)^(1/4)
       deepnorm_mixln  the same with the Mix-LN code's a = sqrt(8), eps 1e-6
       hybrid        y = x + MHA_QKV(x);  h = N(y);  x' = h + F(h)   (HybridNorm, "QKV-Post")
       hybrid_star   layer 0: y = x + MHA_QKV(N(x)), x' = y + F(N(y)); others hybrid
       first_qkv_pre layer 0: y = x + MHA_QKV(x), x' = y + F(N(y)); others hybrid
       embednorm     hybrid on x_0 = N(E)
       #-Post, #-Pre y = x + MHA_#(x), FFN as hybrid (Post) or pre (Pre); # in QKVC, QKV, QKC,
                     QK, KV, KC (the HybridNorm ablations; "Pre-#-Post", "Pre-#-Pre" add the
                     attention input norm)
       pre_post      y = x + MHA(N(x));  h = N(y);  x' = h + F(h)
       post_pre      a = N(x);  y = a + MHA(a);  x' = y + F(N(y))
       mixln         post in layers l < floor(alpha L), pre after; alpha = mixln_alpha
                     (0 = 0.25, -1 = none); eps 1e-6 (the Mix-LN code)
       siamese       two streams x, y, both x_0 = E (the SiameseNorm code's "hybrid-pre"):
                       u = x * gamma + N_ay(y);  A = MHA_QKV(u);  x1 = x + A/c;  y1 = y + A;
                       n = N_f(x1);  F = F(N_in(n + N_fy(y1)));  x' = n + F/c;  y' = y1 + F
                     out = N_final(N_lnf(x_L) + N_lnyf(y_L)); c_l = sqrt(2(l+1)) (code),
                     sqrt(l+1) (paper: siamese.paper_scale = 1), 1 (its ablation: = 2);
                     siamese.paper_fusion: out = x_L + N_lnyf(y_L); siamese.no_fusion_norm:
                     F = F(n + N_fy(y1)); gamma ("c1") starts at 1
       siamese_post_pre  per sublayer: u = N_x(x);  z = F(N_in(u + N_y(y)));  x' = u + z/c;
                     y' = y + z   (the DeiT code's form)
       gpt2          pre with LayerNorm, a GELU-tanh MLP with biases and attention biases
                     (b_qkv, b_o: attn.bias), as GPT-2
       lns           y = x + MHA(N(x) / sqrt(l));  x' = y + F(N(y) / sqrt(l)), l = 1..L
                     (LayerNorm Scaling; its code's 1/sqrt(layer_index + 1)); eps 1e-6
       none          y = x + MHA(x);  x' = y + F(y); no final norm
       dyt           pre with every norm DyT; a starts by DyT's LLM rule by width (Table 11 of
                     its paper): norms feeding attention 1 up to d = 2048, 0.8 to 4096, else 0.2;
                     the others 1 to 1024, 0.5 to 2048, 0.2 to 4096, else 0.05 (norm.dyt_alpha_attn,
                     norm.dyt_alpha). With the generic DyT's bias (its LLaMA code has none)
       periln        sandwich on x_0 = N(E)  (Peri-LN: a norm around every sublayer and on the
                     embedding, which Gemma's sandwich has not)
       rezero        y = x + a MHA(x);  x' = y + a F(y): one learnable a per layer ("resweight",
                     init 0) shared by both sublayers, no norms, no final norm (the ReZero code)
       layerscale    y = x + g1 * MHA(N(x));  x' = y + g2 * F(N(y)), g1, g2 learnable vectors
                     ("ls1.gamma", "ls2.gamma") starting at 0.1 up to 18 layers, 1e-5 up to 24,
                     1e-6 deeper (CaiT; residual.layerscale_init)
       ngpt          nGPT (NVIDIA/ngpt's model.py): with L2(v) = v / ||v|| (no eps, no gain),
                     per sublayer  x' = L2(L2(x) + |a| (L2(F(x)) - L2(x)))  (no input norm: F
                     takes x), a = 0.05 sqrt(d) "attn_alpha" / "mlp_alpha" (stored at 1/sqrt(d),
                     as its code: a starts at 0.05, residual.interp_init); attention with Q, K
                     L2 per head, RoPE, both times sqrt(d) "sqk" (stored 1/sqrt(d); GQA
                     refused), scores times sqrt(d_k); SwiGLU of 4d with its projection times
                     sqrt(d) "suv" (stored 1); no biases, no embedding or final norm. Its RoPE
                     is standard (the code's is not a rotation: NVIDIA/ngpt issue #10).
                     Matrices stay normalized along d by the caller: nb_stack_normalize after
                     each step (and the embedding's and LM head's rows), NB_INIT_NGPT at init
       mhc, hc, ihc  pre on n = 4 hyper-connected streams: around each sublayer
                     u = sum_i pre_i x_i;  x'_k = post_k F(N(u)) + sum_j comb[j][k] x_j, the maps
                     of mHC, HC or identity HC (see nb_hyper); before ln_f the streams are
                     weighted (mHC, IHC) or summed (HC); hyper.kind = NB_HYPER_MHC_LITE on any
                     of them (or pre) is mHC-lite
     Any other schedule is an nb_layer_desc per layer (see nb_placement); norm.type and
     attn.sites change the norm kind and the attention sites of any preset.
     Options of any preset (fields of nb_stack_desc's groups):
       residual.value_residual  ResFormer (arXiv 2410.17897; its code, modeling_llama_resformer.py):
                     in layers l >= 1 attention uses V_l' = lambda_1 V_l + lambda_2 V_0, V_0
                     the values of layer 0 (V after the V norm site, before attention; GQA: its
                     H_kv heads), gradients flowing into V_0 too (the code does not detach it).
                     1: lambda_1 = lambda_2 = 0.5 (the paper's and its code's); 2: learnable,
                     "value_residual.lambda" = [lambda_1, lambda_2] per layer l >= 1, init 0.5
                     (the paper's Learnable-ResFormer)
       residual.value_embeds  modded-nanogpt's value embeddings (its train_gpt.py of mid-2025):
                     N tables of per-token values, E_t[token] (B*T x H_kv*d_k, the caller's
                     rows: nb_stack_set_value_embeds), mixed into the values of layers
                     0..N-1 (tables 0..N-1) and again of layers L-N..L-1 (tables 0..N-1):
                     V' = lambda_0 V + lambda_1 E_t; every other layer V' = lambda_0 V;
                     "value_embed.lambda" = [lambda_0, lambda_1] per layer, init 0.5
       hyper.kind    hyper-connections around every sublayer (nb_hyper) of any preset whose
                     sublayers add a plain residual
       residual.depth_alpha  CompleteP (arXiv 2505.01618; its code): every branch times
                     (L / depth_base)^-depth_alpha
       residual.dwa  DenseFormer (arXiv 2402.02622; its code): each layer's input the learned
                     average of x_0 and the earlier layers' outputs (dwa_dilation: every k-th;
                     dwa_period: only every p-th layer averages)
       residual.unet_skips, residual.reinject_x0  modded-nanogpt's U-Net skips (the encoder
                     half's outputs added to the decoder half's inputs, learned weights) and its
                     re-injection of x_0 into every layer's input (lambda_0 x + lambda_1 x_0)
       residual.attn_res  Attention Residuals (arXiv 2603.15031; its code): no residual
                     sums; each sublayer's input a softmax over depth (a learned pseudo-query
                     per sublayer) of x_0 and the earlier sublayers' outputs, summed in blocks
                     of attn_res_block sublayers (0: Full AttnRes)
       norm.type = NB_NORM_L2, attn.qk_scale, attn.softmax_scale, ffn.in_scale: nGPT's parts
                     on any preset;
                     residual_norm and INTERP (nb_placement) in custom schedules
       attn.gate     gated attention (Qwen; Qwen3-Next): C' = Nc(C) * sigmoid(x W_g^T) before
                     W_o, one gate per head or per element, W_g the last rows of att_proj
       attn.sink     attention sinks: a logit z_h per head joins each row's softmax as a key with
                     no value (gpt-oss's "sinks"; init by torchtitan's gpt-oss), or z = 0 (the
                     off-by-one softmax); nb_stack_sink_mass reports what they take
       attn.clip_qkv OLMo's clamp of the projection's Q, K, V to [-c, c] before the Q/K norms
       attn.softcap  Gemma 2's attention-logit softcap: the scaled scores s become c tanh(s/c)
       norm.type = NB_NORM_DERF  Derf (arXiv 2512.10938; its code) at every norm and site
       norm.gain, norm.bias = -1  block norms without weight (RMSNorm without one) or bias
                     (DyT's LLaMA code has none)
       norm.gain_offset  Gemma's (and Qwen3-Next's) x_hat * (1 + w) with w stored, init 0
       residual.branch_scale  every sublayer's branch scale, e.g. SUBLAYER: SkipInit's scalar per
                     sublayer ("attn_resweight", "ff_resweight"; the rezero preset shares one)
       norm.embed_scale  the input times a learnable scalar (init sqrt(d)): DyT's and Derf's LLM
                     codes' shared_scale

   TENSOR NAMES (nb_stack.tensors, in buffer order; matrices (out, in) as nn.Linear)
     embed_scale, embed_norm.*, then per layer "blocks.<l>.": att_proj.weight ([Q|K|V] rows, then
     the gate's G with attn.gate) and .bias, attn_out.weight and .bias (attention biases:
     attn.bias), {q,k,v,c}_norm.{alpha,weight} (sites on; Derf: .alpha_shift), sqk (attn.qk_scale),
     sinks (attn.sink = NB_SINK_LEARNED; HF's gpt-oss name self_attn.sinks),
     ff_proj.weight (SwiGLU: [up|gate] rows) and .bias, ff_out.weight and .bias, suv (ffn.in_scale),
     the block norms {alpha,weight,bias} in the order attn_norm, attn_out_norm, attn_post_norm,
     ff_norm, ff_out_norm, ff_post_norm, attn_y_norm, attn_input_norm, ff_y_norm, ff_input_norm,
     attn_res_norm, ff_res_norm (those the layer has; L2 norms have no tensors), c1 (SiameseNorm
     gamma), ls1.gamma / resweight / attn_alpha (INTERP) / attn_resweight (SUBLAYER), then ls2.gamma
     / mlp_alpha / ff_resweight, value_residual.lambda (residual.value_residual = 2, layers l >= 1:
     [lambda_1, lambda_2]), the hyper-connections of attention then FFN (mHC, IHC: hc_attn_fn,
     hc_attn_base, hc_attn_scale, DeepSeek-V4's names; HC: hc_attn.static_alpha, .static_beta,
     .dynamic_alpha_fn, .dynamic_alpha_scale, .dynamic_beta_fn, .dynamic_beta_scale, .norm.*, Alg.
     2's); then hc_head_fn, hc_head_base, hc_head_scale (mHC, IHC), ln_f.*, ln_y_f.*, ln_final_f.* A
     norm's parameters are alpha (DyT; Derf's alpha_shift = [alpha, shift]), weight, bias
     (LayerNorm, DyT and Derf block norms) as PyTorch orders them.

   TRACE NAMES (nb_ctx.trace; every tensor B*T rows, in the order computed)
     forward:  x0 (the stack's input, times norm.embed_scale, or its embedding norm); per layer l,
       for its attention sublayer "blocks.<l>.attn.": h (the input norm's output, times
       input_scale), qkv (the projection [Q|K|V] (and G), with its bias), qkv_normed (after the
       Q/K/V site norms and clip_qkv's clamp, when either), qkv_vres ([Q|K|V']: layers l >= 1
       with residual.value_residual, V' = lambda_1 V + lambda_2 V_0; every layer with
       residual.value_embeds, V' = lambda_0 V (+ lambda_1 E)), qkv_rope (after RoPE), qkv_scaled (Q, K times sqrt(d)
       s_qk: qk_scale), context (the heads' outputs concatenated, before the C norm), c_normed
       (site C), c_gated (times sigmoid(G): attn.gate), out (W_o's output, with its bias),
       out_normed (the output norm's result, when one), res_normed (N_res(x), residual_norm),
       sum (before the post norm, when one), x_out (the sublayer's output); for its FFN
       "blocks.<l>.ffn.": h, proj (x W_in^T + b_in), proj_scaled (times sqrt(d) s_uv:
       ffn.in_scale; the last of the two rounded to bf16 with gemm.bf16_outputs, as the
       activation reads it), act (the activation), out, out_normed, res_normed, sum, x_out; then
       blocks.<l>.x (and blocks.<l>.y, SiameseNorm's second stream), the layer's output; out
       (the stack's output, after the final norms).
       Hyper-connections: per sublayer first hc_maps (B*T x (2n + n^2): pre, post, comb) and
       hc_in (u), then the sublayer's names with x_out its branch y = B(u); the layer's streams
       blocks.<l>.x, blocks.<l>.x1 .. x<n-1>; before out hc_head_weights (mHC, IHC: B*T x n)
       and hc_head (the input of the final norm).
       SiameseNorm layers trace their attention and FFN internals and x, y.
     backward: for l = L-1 down to 0: blocks.<l>.ffn.grad_out, blocks.<l>.attn.grad_out (the
       gradient of the sublayer function's output F(h), "out" above), blocks.<l>.grad_x_in (and
       grad_y_in): of the layer's input; then grad_in: of the stack's input.

   EXTENDING (where each kind of change goes; the tests to extend are named)
     - A norm kind: an nb_norm_type value; its row in nb__norm_kinds (statistics per segment,
       block bias, a scalar alpha); its segment kernels beside nb__norm_seg_fwd/_bwd and its case
       in nb__seg_fwd, nb__seg_bwd, nb__norm_forward and nb__norm_backward. Sizes, binding,
       names, partial sums and the stack follow from the table. Tests: an FD case in
       tests/test_stack.c; the PyTorch twin's norm() (examples/pytorch; the fixtures are
       computed by it) and its direct transcription in tests/nbfixture.py (norm_fn); a fixture
       case in tests/gen_block_fixtures.py.
     - A placement flag: a field of nb_placement (zero = off), its check in nb__check_layer, its
       cache in nb__carve_layer, its forward in nb__sub_forward and backward in
       nb__sub_backward (the fused row pass after the branch); a new parameter tensor goes in
       nb__walk_layer with an nb_tensor_kind and its init in nb_stack_init_params. Tests: an
       FD case in tests/test_stack.c; the twin's Placement and Block.sublayer.
     - A preset: an nb_preset value before NB_PRESET_COUNT and its row in nb__presets (codes of
       nb__place_code, sites, width, eps, embedding norm, streams, final norm, norm kind), a
       line in THE PRESETS above (the README copies the block: cmake -DFIX=1 -DROOT=. -P
       tests/readme_snippets.cmake); a new code letter in nb__place_code.
       Tests: the twin's PRESETS row (and place_code), the preset written out as its paper's
       equations in direct_forward and a case in tests/gen_block_fixtures.py, its key in
       tests/test_block_fixtures.c.
     - An FFN activation: an nb_ffn_type value, its pointwise function and derivative beside
       nb__gelu_tanh and its case in the FFN forward and backward. Tests: the twin's Block.ffn,
       ffn_direct and a case in tests/gen_sublayer_fixtures.py.
     - An attention option (as the gate, qk_scale, softmax_scale): a field of nb_attn_config
       (zero = off or the default) with its check in nb_attn_plan_make and its hash in
       nb__attn_id; its cache and scratch in nb__attn_carve (nb__attn_mem); its forward and
       backward as a pair of helpers (nb__gate_fwd/_bwd, nb__qk_scale_fwd/_bwd) called from
       nb__attn_fwd and nb__attn_bwd; a parameter in nb_attn_params, bound in
       nb_attn_params_bind, named in nb__walk_layer with an nb_tensor_kind, initialized in
       nb_stack_init_params. The stack hands nb_stack_desc.attn to every layer's plan as it is
       (nb__stack_build), so a stack needs nothing more unless a preset sets it (nb__presets)
       or it crosses layers (then it is a residual-group field, as value_residual). Tests: FD
       cases in tests/test_sublayers.c and tests/test_stack.c; the twin's attention and a
       case in tests/gen_sublayer_fixtures.py and tests/gen_block_fixtures.py.
     - A residual topology (how the streams flow through a layer and out of the stack, as
       SiameseNorm's and the hyper-connections'): an NB__TOPO_* value and its row in
       nb__topologies (section "residual topologies": its layer forward and backward, its output
       stage forward and backward, whether sublayers add their own residual, the trace names of
       its streams), picked in nb__stack_build; and its row in nb__topo_layouts (section
       "cache layout": which block norms its layers and final norms the stack have, a layer's
       cache, whether it adds SiameseNorm's c1 or hyper-connection tensors; a new kind of
       tensor of its own is a flag there and a line in nb__walk_layer). The drivers and the
       layout code do not change. Tests: FD cases in tests/test_stack.c, the twin's topology
       and a case in tests/gen_block_fixtures.py.

   DOES NOT
     - allocate inside any kernel; scratch and caches are the caller's (size queries tell how much)
     - keep global state: any number of contexts, models and threads can coexist
     - call exit(), print, or change the OpenMP/BLAS thread settings of the process (a oneDNN
       call sets the calling thread's OpenMP team size for its duration and restores it)
     - keep parameters, gradients or the residual stream in half precision: with
       desc.gemm.precision = NB_PRECISION_BF16 only the GEMMs' operands are bf16 (float32 sums), and
       the cache holds bf16 copies of what only GEMMs read (see nb_precision)

   See the end of the file for the license (MIT or public domain, your choice).
*/
#ifndef NORMBLOCKS_H
#define NORMBLOCKS_H

#define NB_VERSION_MAJOR 0
#define NB_VERSION_MINOR 2
#define NB_VERSION_PATCH 0
#define NB_VERSION_STRING "0.2.0"

#include <stddef.h>

#ifndef NBDEF
#ifdef NB_STATIC
#define NBDEF static
#else
#define NBDEF extern
#endif
#endif

#ifdef __cplusplus
extern "C" {
#endif

#ifdef NB_DOUBLE
typedef double nb_real;
#else
typedef float nb_real;
#endif

typedef enum nb_result {
    NB_OK = 0,
    NB_ERR_NULL,        /* a required pointer is NULL */
    NB_ERR_SHAPE,       /* a size, stride or divisibility constraint is violated */
    NB_ERR_VALUE,       /* a scalar argument is out of range (eps <= 0, ...) */
    NB_ERR_CONFIG,      /* an invalid configuration */
    NB_ERR_NONFINITE,   /* a NaN or Inf was detected by an enabled check */
    NB_ERR_NOMEM        /* an allocation made by a convenience allocator failed */
} nb_result;

/* Execution context. Zero-initialise it; every zero field means "default". A context is not
   shared between threads that call normblocks concurrently (err is written on failure). */
/* Upper bound of a team (larger ctx->num_threads are clamped: an absurd request must not make
   the OpenMP runtime abort on thread creation). */
#define NB_MAX_THREADS 1024

/* Where a stack's time goes (nb_ctx.profile): seconds and calls per part, added by every call
   made with the context while profile points here (zero it to start; nothing is allocated).
   The parts are disjoint: a part's time is never also counted in another. The time of the
   caller's grads_ready hook is in none. Timed on the calling thread, between parallel regions
   (one thread per context, as for err). */
typedef enum nb_prof_part {
    NB_PROF_GEMM = 0, /* linear GEMMs: the stack's projections, nb_gemm and nb_gemm_bf16 */
    NB_PROF_ATTN,     /* the attention core: scores, softmax, context and their backward */
    NB_PROF_NORM,     /* norm kernels run as a pass of their own (norms fused into another
                         row loop count as OTHER) */
    NB_PROF_CONVERT,  /* BF16: passes that only round to bf16 (weights, sublayer inputs) */
    NB_PROF_OTHER,    /* the rest of nb_stack_forward/backward: activations, RoPE, residual
                         updates, biases, copies, checks */
    NB_PROF_PARTS
} nb_prof_part;
typedef struct nb_profile {
    double seconds[NB_PROF_PARTS];
    long long calls[NB_PROF_PARTS];
    int depth; /* internal: a timed part is running (parts inside it are not timed again) */
    double hooks; /* internal: seconds in ctx->grads_ready within stack calls (the caller's
                     work: in no part) */
} nb_profile;
NBDEF const char* nb_prof_part_name(int part); /* "GEMMs", "attention core", ... */

typedef struct nb_ctx {
    int num_threads;   /* OpenMP threads per kernel; 0 = omp_get_max_threads(); clamped to
                          [1, NB_MAX_THREADS] */
    void (*log)(void* user, nb_result code, const char* message); /* optional error sink */
    void* log_user;
    void* alloc_user;  /* passed to NB_MALLOC/NB_FREE by convenience allocators */
    /* Optional: nb_stack_backward calls this each time a contiguous range of the gradient
       buffer is final for the call (nothing later in the call writes it), in backward order:
       the final norms (layer -1), layers L-1 down to 0, the embedding norm (layer -1). Empty
       ranges are skipped. Called from the calling thread between parallel regions, so a
       trainer can start reducing those gradients (MPI buckets, as PyTorch DDP does) while the
       backward goes on. The ranges tile [0, n_params) exactly once per call. */
    void (*grads_ready)(void* user, int layer, size_t offset, size_t count);
    void* grads_ready_user;
    /* Optional: called with every named intermediate of nb_stack_forward and nb_stack_backward
       (a rows x cols row-major tensor, valid during the call only), in the order computed: the
       names of TRACE NAMES at the top of the file. For dumps to diff a port against; NULL costs
       one test per intermediate. Called from the calling thread between parallel regions. */
    void (*trace)(void* user, const char* name, const nb_real* x, int rows, int cols);
    void* trace_user;
    char trace_scope[24]; /* internal: the stack's "blocks.<l>.attn." around a sublayer */
    /* Set by the first BF16 stack made with this context under backend DEFAULT in a build with
       oneDNN (see nb_backend), so that stacks sharing a context run the same kernels: the BF16
       engine (0: not timed, 1: portable, 2: oneDNN) and the probe GEMM's times in ms on the
       portable bf16 path, oneDNN bf16 and float32 BLAS (what a trainer's "precision auto"
       weighs: bf16 is worth it only where it beats float32). */
    int bf16_engine;
    float gemm_probe_ms[3];
    nb_profile* profile; /* optional: where the time of calls made with this context goes */
    char err[1024];    /* message of the last failure of a call made with this context */
} nb_ctx;

NBDEF const char* nb_result_string(nb_result r);
NBDEF int nb_num_threads(const nb_ctx* ctx);   /* the team size kernels will use */

/* ---- normalization ------------------------------------------------------------------------ */
/* nb_real values of scratch the norm backward needs for per-thread partial gain/bias sums,
   for rows of `width` in segments of `seg` (0 = width). Needed only with dgain or dbias. The
   size does not depend on the thread count: it holds NB_NORM_MAX_TEAM threads' sums, and the
   backward's team is clamped to that (so a scratch sized under one ctx stays valid under any
   other). ctx is unused. Trusted: the scratch passed to a backward has at least this many values
   for that call's width and seg. Returns 0 when width <= 0 or seg does not divide width. */
#define NB_NORM_MAX_TEAM 64
NBDEF size_t nb_norm_scratch_size(const nb_ctx* ctx, int width, int seg);

/* RMSNorm. x, y: rows x width with strides ldx, ldy (y may equal x if ldy == ldx, but backward
   needs x). rstd[r*(width/seg) + s] = 1/sqrt(mean(x_seg^2) + eps). gain: seg values or NULL.
   eps: finite and > 0. Trusted: x, y hold (rows-1)*ld + width values, rstd rows*(width/seg). */
NBDEF nb_result nb_rmsnorm_forward(nb_ctx* ctx, nb_real* y, int ldy, nb_real* rstd,
                                   const nb_real* x, int ldx, const nb_real* gain,
                                   int rows, int width, int seg, nb_real eps);
/* dx = (1/r)(g - xhat*mean(g*xhat)) with g = dy*gain, xhat = x*rstd; dgain += sum dy*xhat.
   dx is overwritten (accumulate = 0) or added to (accumulate != 0); dx may equal dy when
   accumulate = 0. dgain may be NULL to skip it; scratch: nb_norm_scratch_size(ctx, width, seg)
   values, needed when dgain is not NULL. Trusted: the sizes of dx, dy, x (rows with their
   strides), rstd (rows*(width/seg)), gain and dgain (seg) and scratch. */
NBDEF nb_result nb_rmsnorm_backward(nb_ctx* ctx, nb_real* dx, int lddx, nb_real* dgain,
                                    const nb_real* dy, int lddy, const nb_real* x, int ldx,
                                    const nb_real* rstd, const nb_real* gain,
                                    int rows, int width, int seg, int accumulate,
                                    nb_real* scratch);

/* LayerNorm. Statistics in one pass (sum x, sum x^2) while mean^2 <= 3 var, where that loses
   at most 2 bits, else two-pass. mean and rstd: rows*(width/seg) each. gain, bias: seg values
   or NULL. */
NBDEF nb_result nb_layernorm_forward(nb_ctx* ctx, nb_real* y, int ldy, nb_real* mean,
                                     nb_real* rstd, const nb_real* x, int ldx,
                                     const nb_real* gain, const nb_real* bias,
                                     int rows, int width, int seg, nb_real eps);
/* dx = rstd*(g - mean(g) - xhat*mean(g*xhat)), g = dy*gain; dgain += sum dy*xhat; dbias += sum dy */
NBDEF nb_result nb_layernorm_backward(nb_ctx* ctx, nb_real* dx, int lddx, nb_real* dgain,
                                      nb_real* dbias, const nb_real* dy, int lddy,
                                      const nb_real* x, int ldx, const nb_real* mean,
                                      const nb_real* rstd, const nb_real* gain,
                                      int rows, int width, int seg, int accumulate,
                                      nb_real* scratch);

/* DyT, Dynamic Tanh ("Transformers without Normalization", 2025): y = gain * tanh(alpha x) + bias
   on each segment of seg values, alpha one learnable scalar (*alpha, finite); no statistics and
   no eps. gain, bias: seg values or NULL. Trusted: x, y hold (rows-1)*ld + width values. */
NBDEF nb_result nb_dyt_forward(nb_ctx* ctx, nb_real* y, int ldy, const nb_real* x, int ldx,
                               const nb_real* alpha, const nb_real* gain, const nb_real* bias,
                               int rows, int width, int seg);
/* With t = tanh(alpha x) and g = dy*gain: dx = alpha g (1 - t^2); dgain += sum dy t;
   dbias += sum dy; dalpha[0] += sum g x (1 - t^2). dgain, dbias, dalpha may be NULL to skip
   them; scratch (nb_norm_scratch_size values) is needed when any is not. dx is overwritten or
   accumulated as in nb_rmsnorm_backward. Trusted: as nb_rmsnorm_backward (no statistics). */
NBDEF nb_result nb_dyt_backward(nb_ctx* ctx, nb_real* dx, int lddx, nb_real* dgain,
                                nb_real* dbias, nb_real* dalpha, const nb_real* dy, int lddy,
                                const nb_real* x, int ldx, const nb_real* alpha,
                                const nb_real* gain, int rows, int width, int seg,
                                int accumulate, nb_real* scratch);

/* Derf: y = gain * erf(alpha x + shift) + bias on each segment of seg values, as DyT with
   as = [alpha, shift] two learnable scalars (finite). With z = alpha x + shift, e = erf(z),
   g = dy*gain and u = g (2/sqrt(pi)) exp(-z^2): dx = alpha u; dgain += sum dy e; dbias +=
   sum dy; das[0] += sum u x; das[1] += sum u. Otherwise as nb_dyt_forward/backward. */
NBDEF nb_result nb_derf_forward(nb_ctx* ctx, nb_real* y, int ldy, const nb_real* x, int ldx,
                                const nb_real* as, const nb_real* gain, const nb_real* bias,
                                int rows, int width, int seg);
NBDEF nb_result nb_derf_backward(nb_ctx* ctx, nb_real* dx, int lddx, nb_real* dgain,
                                 nb_real* dbias, nb_real* das, const nb_real* dy, int lddy,
                                 const nb_real* x, int ldx, const nb_real* as,
                                 const nb_real* gain, int rows, int width, int seg,
                                 int accumulate, nb_real* scratch);

/* L2 norm (nGPT's justnorm): y = x / ||x||_2 on each segment of seg values; no gain, and no
   eps as in nGPT's code, except that a zero segment maps to zero (nGPT's gives NaN: the squared
   norm gets the smallest normal number added, invisible above 2^-101 in float). rstd:
   rows * (width/seg) values, 1 / ||x|| per segment. Trusted: as nb_rmsnorm_forward. */
NBDEF nb_result nb_l2norm_forward(nb_ctx* ctx, nb_real* y, int ldy, nb_real* rstd,
                                  const nb_real* x, int ldx, int rows, int width, int seg);
/* dx = r (dy - y (y . dy)) per segment, r = rstd, y = x r; overwritten or accumulated as in
   nb_rmsnorm_backward (no parameters, no scratch). Trusted: as nb_rmsnorm_backward. */
NBDEF nb_result nb_l2norm_backward(nb_ctx* ctx, nb_real* dx, int lddx, const nb_real* dy,
                                   int lddy, const nb_real* x, int ldx, const nb_real* rstd,
                                   int rows, int width, int seg, int accumulate);

/* ---- softmax ------------------------------------------------------------------------------ */
/* p = softmax(scale * s) per row of `cols`. causal: row i sees columns j <= i + (cols - rows)
   (bottom-right aligned, the usual mask when rows == cols); masked entries of p are set to 0.
   lse (optional, rows values): log-sum-exp of the scaled, masked row. p may equal s.
   scale: finite and > 0. Trusted: p, s hold (rows-1)*ld + cols values. */
NBDEF nb_result nb_softmax_forward(nb_ctx* ctx, nb_real* p, int ldp, nb_real* lse,
                                   const nb_real* s, int lds, int rows, int cols,
                                   nb_real scale, int causal);
/* ds = scale * p * (dp - rowsum(dp * p)); O(cols) per row from p alone. ds may equal dp. */
NBDEF nb_result nb_softmax_backward(nb_ctx* ctx, nb_real* ds, int ldds, const nb_real* dp,
                                    int lddp, const nb_real* p, int ldp, int rows, int cols,
                                    nb_real scale, int causal);

/* ---- GEMM ---------------------------------------------------------------------------------- */
/* Row-major C = alpha * op(A) op(B) + beta * C, op(A) M x K, op(B) K x N. trans = 0 or 1.
   beta = 0 overwrites C (NaNs in C do not propagate). nb_gemm uses BLAS unless NB_NO_BLAS;
   nb_gemm_ref is the portable reference (OpenMP over rows of C when not already in a parallel
   region). Both are safe to call from inside an OpenMP region only with a single-threaded
   BLAS. Trusted: A, B, C hold (rows-1)*ld + cols values of op's shapes. */
NBDEF nb_result nb_gemm(nb_ctx* ctx, int transa, int transb, int M, int N, int K,
                        nb_real alpha, const nb_real* A, int lda, const nb_real* B, int ldb,
                        nb_real beta, nb_real* C, int ldc);
NBDEF nb_result nb_gemm_ref(nb_ctx* ctx, int transa, int transb, int M, int N, int K,
                            nb_real alpha, const nb_real* A, int lda, const nb_real* B, int ldb,
                            nb_real beta, nb_real* C, int ldc);
/* As nb_gemm with bf16 operands: C = alpha * bf16(op(A)) bf16(op(B)) + beta * C, products
   accumulated in float32 (a bf16 x bf16 product is exact in float32), bf16(x) rounding to
   nearest even (NaN stays NaN, overflow gives inf). For a trainer's own GEMMs (embedding, LM
   head) in the precision of a BF16 stack. NB_ERR_CONFIG in an NB_DOUBLE build. */
NBDEF nb_result nb_gemm_bf16(nb_ctx* ctx, int transa, int transb, int M, int N, int K,
                             nb_real alpha, const nb_real* A, int lda, const nb_real* B,
                             int ldb, nb_real beta, nb_real* C, int ldc);
/* The kernels of nb_gemm_bf16 and of BF16 plans made by nb_attn/ffn_plan_make: the portable
   path. On a CPU with AMX, normblocks' own bf16 GEMM on the AMX tiles (TDPBF16PS; the
   attention's products too). Elsewhere "emulated: bf16-rounded operands in blocks, float32
   GEMM", slower than float32 (about 1.2x a float32 GEMM's time). Both compute bf16 numerics
   exactly up to summation order and take 384 KiB of the calling thread's stack per GEMM. A
   stack runs its projections on oneDNN where that timed faster (nb_stack_desc.backend;
   nb_stack_kernels). */
NBDEF const char* nb_bf16_kernels(void);
/* dst[i] = the bits of bf16(src[i]) for n values (round to nearest even, as nb_gemm_bf16):
   a caller's bf16 copy of its weights for a BF16 stack with gemm.bf16_weights (nb_stack_desc).
   One thread; a trainer calls it on the chunk its optimizer just updated, while the chunk is
   still in cache. Available in every build (float in, whatever nb_real is). */
NBDEF void nb_bf16_round(unsigned short* dst, const float* src, size_t n);
/* Threads the BLAS uses per call: 1 for a sequential or OpenMP-built BLAS (then normblocks
   splits its GEMMs over ctx->num_threads itself and calls BLAS from its own threads), more for
   Debian's default pthread OpenBLAS (then big GEMMs are left to BLAS and per-head attention
   runs head after head). Set OPENBLAS_NUM_THREADS=1 to give normblocks all the threading. */
NBDEF int nb_blas_threads(void);

/* ---- elementwise --------------------------------------------------------------------------- */
/* out = a + b over n values (out may be a or b). Trusted: each holds n values. n = 0 is a no-op
   (then NULL pointers are allowed). */
NBDEF nb_result nb_add(nb_ctx* ctx, nb_real* out, const nb_real* a, const nb_real* b, size_t n);
/* y = alpha * x + beta * y (beta = 0 overwrites y). Trusted: x and y hold n values. */
NBDEF nb_result nb_axpby(nb_ctx* ctx, nb_real* y, nb_real alpha, const nb_real* x, nb_real beta,
                         size_t n);

/* ---- RoPE ---------------------------------------------------------------------------------- */
/* NeoX rotate-half RoPE, in place, on B*T token rows (row r has position r % T) of `heads`
   head vectors of head_dim at stride ldx. Pair (i, i + head_dim/2) rotates by
   phi = pos * theta^(-2i/head_dim). inverse != 0 rotates by -phi: that is the backward.
   theta: finite and > 1. Trusted: x holds (B*T-1)*ldx + heads*head_dim values. */
NBDEF nb_result nb_rope(nb_ctx* ctx, nb_real* x, int ldx, int B, int T, int heads, int head_dim,
                        nb_real theta, int inverse);

/* ---- attention sublayer ----------------------------------------------------------------------
   out = C W_o^T (+ b_o),
   C = concat_h Nc(softmax(s * RoPE(Nq(Q_h)) RoPE(Nk(K_j))^T + mask) Nv(V_j))
   with [Q|K|V] = x W_qkv^T (+ b_qkv) (Q: H heads, K and V: H_kv heads, query head h uses KV
   head h / (H/H_kv)), s = softmax_scale (1/sqrt(d_k)); with qk_scale, RoPE(Nq(Q_h)) and
   RoPE(Nk(K_h)) are multiplied by sqrt(d) s_qk,h (nGPT). Each of the norm sites Q, K, V, C
   is on or off; the biases are off unless asked for (GPT-2 has both, Qwen2 the Q|K|V one).
   With an output gate (gated attention) the projection has G more columns, [Q|K|V|G] =
   x W_qkv^T, and C is multiplied by sigmoid(G) before W_o (after the C norm). */
typedef enum nb_norm_type {
    NB_NORM_DEFAULT = 0,  /* RMSNorm */
    NB_NORM_RMS,
    NB_NORM_LAYER,        /* LayerNorm (gain only at attention sites) */
    NB_NORM_DYT,          /* DyT, Dynamic Tanh: gain * tanh(alpha x) + bias, a learnable scalar
                             alpha per norm (gain only at attention sites); no statistics */
    NB_NORM_L2,           /* x / ||x||_2 (nGPT's justnorm): no gain, no bias, no eps (nGPT's
                             code; a zero vector maps to zero, where its code gives NaN) */
    NB_NORM_DERF          /* Derf ("Stronger Normalization-Free Transformers", arXiv
                             2512.10938; its code zlab-princeton/Derf): gain * erf(alpha x +
                             shift) + bias, two learnable scalars per norm (gain only at
                             attention sites); no statistics */
} nb_norm_type;

/* The compute precision of a sublayer's or stack's GEMMs (nb_attn_desc, nb_ffn_desc,
   nb_stack_desc .gemm.precision). BF16: every GEMM of forward and backward (projections, the
   attention's scores and context, their gradients) multiplies bf16-rounded operands (round to
   nearest even) and accumulates in float32; norms and their statistics, softmax, RoPE, the
   residual stream, activations and every parameter gradient stay float32, parameters stay
   float32 in the caller's buffer. The forward rounds the weights once into the cache (so the
   backward multiplies by the same bf16 weights), unless the caller keeps a bf16 copy of them
   itself (.gemm.bf16_weights: written once per optimizer step instead of once per forward, and
   not in the cache), and caches in bf16 what only GEMMs read (the
   sublayer inputs, the attention's C, the FFN's activation; O and the activation are then no
   longer cached in float32; in a stack an input norm whose output only its sublayer reads
   writes that bf16 copy itself, and its float output is not kept): the cache sizes of the
   plans and the stack include them. The pass that finishes an operand writes its bf16 copy
   where it can (RoPE, the attention core, the activation), not a conversion pass after it. The
   backward rounds dout, dQKV and the FFN's dh into scratch, the same way: in a stack the norm
   backward that finishes a sublayer's dout (the next input norm's, the final norm's) writes its
   bf16 copy, RoPE's inverse dQKV's, the activation's backward dh's. On a CPU with AMX the
   attention's products multiply bf16 copies of Q, K, V, P, dO and dS packed in scratch (the
   plan's n_scratch includes them on any CPU). gemm.bf16_outputs rounds the FFN's hidden layer
   as PyTorch's autocast does (nb_gemm_config). A float32-build feature (refused with NB_DOUBLE).
   Which kernels run: nb_stack_kernels (a stack), nb_bf16_kernels (plans). */
typedef enum nb_precision {
    NB_PRECISION_DEFAULT = 0,  /* FP32 */
    NB_PRECISION_FP32,
    NB_PRECISION_BF16
} nb_precision;

/* Who runs a stack's linear GEMMs (nb_stack_desc.backend; the per-head attention products run
   on the BLAS in float32, and in BF16 on the library's AMX tile kernel where the CPU has AMX,
   else on the emulation, whatever the backend). oneDNN is compiled in by defining
   NB_USE_DNNL (link -ldnnl; Debian: libdnnl-dev) in a float32 build. */
typedef enum nb_backend {
    NB_BACKEND_DEFAULT = 0,  /* FP32: BLAS. BF16: whichever of oneDNN (when compiled in) and
                                the portable path is faster here, decided by timing one
                                512x512x512 bf16 GEMM on each (a few ms, once per nb_ctx: the
                                ISA's name does not tell, e.g. AVX512-BF16 without AMX on an
                                Emerald Rapids runs bf16 dot products at half its float32 FMA
                                rate); oneDNN only when at least 1.25x faster, so a close call
                                stays on the portable path. nb_stack_kernels shows both times.
                                Name BLAS or DNNL to pin the kernels (bitwise-reproducible runs
                                across processes). */
    NB_BACKEND_BLAS,         /* the BLAS; BF16 on the portable path: normblocks' own GEMM
                                on AMX tiles where the CPU has AMX, else the emulation (bf16
                                operands, float32 sgemm in blocks: exact bf16 numerics,
                                slower than float32); see nb_bf16_kernels */
    NB_BACKEND_DNNL          /* oneDNN's matmul primitive, in either precision (NB_ERR_CONFIG
                                in a build without it, or for BF16 when oneDNN has no bf16
                                matmul on this CPU) */
} nb_backend;

enum { NB_SITE_Q = 1, NB_SITE_K = 2, NB_SITE_V = 4, NB_SITE_C = 8 };  /* nb_attn_config.sites */
#define NB_SITES_QKV  (NB_SITE_Q | NB_SITE_K | NB_SITE_V)
#define NB_SITES_QKVC (NB_SITES_QKV | NB_SITE_C)
enum { NB_ATTN_BIAS_QKV = 1, NB_ATTN_BIAS_OUT = 2 };  /* nb_attn_config.bias */

typedef enum nb_norm_width {
    NB_WIDTH_DEFAULT = 0,  /* per head */
    NB_WIDTH_PER_HEAD,     /* each d_k head vector, one gain of d_k shared by all heads (HybridNorm) */
    NB_WIDTH_FULL          /* the whole projection row: d for Q and C, H_kv*d_k for K, V (OLMo-2) */
} nb_norm_width;

typedef enum nb_attn_memory {
    NB_ATTN_MEMORY_DEFAULT = 0, /* PROBS when B*H*T*T is at most 64 Mi values, else LSE */
    NB_ATTN_MEMORY_PROBS,       /* cache softmax probabilities: B*H*T*T values, fastest backward */
    NB_ATTN_MEMORY_LSE          /* cache one log-sum-exp per row and recompute scores in row tiles:
                                   cache O(B*H*T), scratch O(threads*T) */
} nb_attn_memory;

/* Gated attention's output gate (Qwen, "Gated Attention for Large Language Models", arXiv
   2505.06708; Qwen3-Next): C' = Nc(C) * sigmoid(G), G = x W_g^T the gate logits of the
   sublayer's input, W_g fused into W_qkv as its last G rows (nb_attn_desc.gate). */
typedef enum nb_attn_gate {
    NB_GATE_NONE = 0,
    NB_GATE_HEADWISE,      /* one gate per head and token (G = H), over the head's d_k values */
    NB_GATE_ELEMENTWISE    /* one gate per element of C (G = d) */
} nb_attn_gate;

/* Attention sinks: an extra logit z_h per head joins every query row's softmax as a key with no
   value, p_j = exp(s_j) / (exp(z_h) + sum_k exp(s_k)) over the scaled scores s, so a row may
   give attention to nothing. gpt-oss ("sinks", arXiv 2508.10925; its code concatenates z_h to
   the scaled scores before the softmax and drops its column after; torchtitan's gpt-oss
   multiplies the output by sigmoid(lse - z_h), the same thing); the off-by-one softmax
   (Miller, "Attention Is Off By One", 2023; Megatron-LM's softmax_type "off-by-one") is z = 0
   fixed. Neither changes the scores' largest logit (QK-Clip's). */
typedef enum nb_attn_sink {
    NB_SINK_NONE = 0,
    NB_SINK_LEARNED,       /* z_h a learnable parameter per query head ("sinks", H values) */
    NB_SINK_OFF_BY_ONE     /* z = 0: exp(s_j) / (1 + sum_k exp(s_k)), no parameter */
} nb_attn_sink;

/* How a sublayer's or stack's GEMMs compute (nb_attn_desc.gemm, nb_ffn_desc.gemm,
   nb_stack_desc.gemm). */
typedef struct nb_gemm_config {
    nb_precision precision; /* of every GEMM; 0 = FP32 */
    int bf16_weights;       /* BF16 only: 1 = the caller keeps the bf16 copy of the weight
                               matrices that forward and backward read (a plan's params.w_qkv16,
                               w_o16, w_in16, w_out16; a stack's nb_stack_set_bf16_weights),
                               e.g. written by its optimizer step (nb_bf16_round); 0 = each
                               forward rounds them into the cache */
    nb_backend backend;     /* a stack's: who runs its projections' GEMMs; 0 = by precision (see
                               nb_backend). A plan of nb_attn_plan_make / nb_ffn_plan_make runs
                               BLAS or the portable bf16 path and refuses DNNL */
    int bf16_outputs;       /* BF16 only: 1 = the FFN's hidden layer in bf16, as PyTorch's
                               autocast keeps it: its projection h = x W_in^T (+ b_in, times
                               in_scale) is rounded to bf16 before the activation reads it, and
                               cached so (half the bytes), and the activation's incoming
                               gradient da = dY W_out is rounded before its backward. On oneDNN
                               with a bf16 matrix unit the GEMMs write those bf16 outputs
                               themselves (where nothing is added to h). 0 = float32 (the
                               numerics of PyTorch's fp32_precision = "bf16"). The attention's
                               outputs stay float32 either way. */
} nb_gemm_config;

/* The attention's settings, shared by nb_attn_desc.attn and nb_stack_desc.attn (where 0 at
   sites, site_width, qk_scale and softmax_scale means the preset's). */
typedef struct nb_attn_config {
    unsigned sites;          /* NB_SITE_* mask of normalized sites; 0 = none (a stack: the
                                preset's: QKV for the HybridNorm family, none for the others) */
    nb_norm_width site_width;/* norm width at the sites (a stack: 0 = the preset's: per head;
                                full width for OLMO2) */
    unsigned bias;           /* NB_ATTN_BIAS_* mask: b_qkv, b_o ("att_proj.bias",
                                "attn_out.bias"); 0 = none */
    int rope;                /* 1 = apply RoPE to Q and K after their norms */
    nb_real rope_theta;      /* 0 = 10000; else finite and > 1 */
    int non_causal;          /* 1 = no causal mask */
    nb_attn_memory memory;
    int qk_scale;            /* 1 = nGPT's s_qk: Q and K times sqrt(d) s after RoPE (after the
                                Q, K norms), s a learnable vector of H d_k ("sqk", head h's
                                d_k values shared by Q head h and K head h: needs n_kv_heads =
                                n_heads) stored as nGPT's code stores it, init 1/sqrt(d);
                                -1 = off; 0 = off (a stack: the preset's, on for NGPT) */
    nb_real softmax_scale;   /* s of the scores; 0 = 1/sqrt(d_k) (a stack: the preset's, nGPT's
                                +sqrt(d_k) for NGPT); else finite and > 0 (muP: 1/d_k) */
    nb_attn_gate gate;       /* the output gate; 0 = none */
    nb_attn_sink sink;       /* attention sinks; 0 = none */
    nb_real clip_qkv;        /* OLMo's clip_qkv: the projection's Q, K, V (after its bias, before
                                the site norms) clamped to [-c, c], no gradient where clamped;
                                0 = off; else finite and > 0 */
    nb_real softcap;         /* Gemma 2's attn_logit_softcapping: the scaled scores s become
                                c tanh(s / c) before the mask and softmax (and a sink); 0 = off;
                                else finite and > 0 (Gemma 2: 50) */
} nb_attn_config;

typedef struct nb_attn_desc {
    int d_model;            /* d (required) */
    int n_heads;            /* H (required); d % H == 0, d_k = d / H */
    int n_kv_heads;         /* H_kv; 0 = n_heads. H % H_kv == 0 */
    nb_attn_config attn;    /* sites, RoPE, mask, memory, biases, nGPT's scales, gate */
    nb_norm_type norm;      /* norm type at the sites */
    int no_gain;            /* 1 = the site norms have no gain */
    nb_real eps;            /* 0 = 1e-5; else finite and > 0 */
    nb_gemm_config gemm;    /* precision and bf16 weights (backend: a stack's) */
} nb_attn_desc;

/* Parameter (or gradient) pointers. Shapes: w_qkv (d + 2*H_kv*d_k + G) x d, rows Q|K|V|G
   (G: 0, or the gate's H or d);
   w_o d x d; q/k/v/c_gain: d_k each (per head) or the site's full width; q/k/v/c_alpha: DyT's
   scalar of the site (norm NB_NORM_DYT only); b_qkv: as w_qkv's rows; b_o: d; NULL when
   absent.
   Bound in the order w_qkv, b_qkv, w_o, b_o (nn.Linear's weight, bias), then per normalized
   site Q, K, V, C: alpha (DyT), gain; then qk_scale, then sinks. */
typedef struct nb_attn_params {
    nb_real *w_qkv, *w_o, *q_gain, *k_gain, *v_gain, *c_gain;
    nb_real *q_alpha, *k_alpha, *v_alpha, *c_alpha;
    nb_real *b_qkv, *b_o;
    nb_real* qk_scale;      /* nGPT's sqk: H d_k (qk_scale only) */
    nb_real* sinks;         /* the sink logits z_h: H (sink NB_SINK_LEARNED only) */
    /* desc.gemm.bf16_weights only: the caller's bf16 copies of w_qkv and w_o (nb_bf16_round), read
       by forward and backward in their place; they must equal bf16 of the float weights */
    const unsigned short *w_qkv16, *w_o16;
} nb_attn_params;

/* A plan: the validated, resolved description for batches of at most max_batch sequences of
   at most max_seq tokens, and the sizes (in nb_real values) of what the caller allocates.
   A plan is refused when max_batch*max_seq, a width or the attention task count would not fit
   an int, or a size would not fit size_t (the error names the quantity). */
typedef struct nb_attn_plan {
    nb_attn_desc desc;      /* every default resolved */
    int max_batch, max_seq;
    int max_threads;        /* the scratch is sized for this many threads (ctx at plan time) */
    int head_dim, qkv_width, group; /* d_k, d + 2*H_kv*d_k + G, H/H_kv */
    int gate_width;         /* G: 0, H (headwise) or d (elementwise) */
    size_t n_params;        /* contiguous parameters in the order of nb_attn_params */
    size_t n_cache;         /* kept from forward to backward, per call */
    size_t n_scratch;       /* temporary, reusable by any other sublayer between calls */
    struct nb__mm* mm;      /* internal: the oneDNN matmuls of the stack that owns the plan
                               (NULL for a plan of nb_attn_plan_make: BLAS, portable bf16) */
    int bf16_attn;          /* internal: BF16's attention products (NB__ATTN_*): AMX where
                               the CPU has it, else the emulation (nb_bf16_kernels says) */
    int bf16_gemm;          /* internal: BF16's linear GEMMs where oneDNN does not run them,
                               as bf16_attn (AMX: normblocks' own GEMM on the tiles) */
} nb_attn_plan;

NBDEF nb_result nb_attn_plan_make(nb_ctx* ctx, nb_attn_plan* plan, const nb_attn_desc* desc,
                                  int max_batch, int max_seq);
/* Point p's members into a contiguous buffer of plan->n_params values (w_qkv, b_qkv, w_o, b_o,
   then the alphas and gains of the enabled sites in Q, K, V, C order); absent ones are NULL.
   With plan or p NULL nothing is done; with base NULL every member is NULL (a forward then
   reports it). The bf16 copies (w_qkv16, w_o16) are left NULL: the caller's to set. */
NBDEF void nb_attn_params_bind(const nb_attn_plan* plan, nb_real* base, nb_attn_params* p);
/* out: B*T x d. x: B*T x d (kept by the caller for backward). A plan of nb_attn_plan_make runs
   its GEMMs on the BLAS (BF16: the portable path); a stack's plans on the stack's backend. */
NBDEF nb_result nb_attn_forward(nb_ctx* ctx, const nb_attn_plan* plan, const nb_attn_params* p,
                                nb_real* out, const nb_real* x, int B, int T, nb_real* cache,
                                nb_real* scratch);
/* dx (B*T x d) is overwritten, or accumulated when accumulate_dx != 0; every member of g is
   accumulated (g's gains are required where p's are). cache must be untouched since the forward
   with the same x, B, T: a cache not written by a successful forward of an equal plan with the
   same B and T is refused (NB_ERR_CONFIG). Trusted: x is the forward's x (and in BF16 p the
   forward's p: the backward multiplies by the bf16 weights the forward cached). */
NBDEF nb_result nb_attn_backward(nb_ctx* ctx, const nb_attn_plan* plan, const nb_attn_params* p,
                                 nb_attn_params* g, nb_real* dx, const nb_real* dout,
                                 const nb_real* x, int B, int T, const nb_real* cache,
                                 nb_real* scratch, int accumulate_dx);

/* Per-head statistics of the forward in the cache (a successful forward of this plan with B,
   T), H values each, either output may be NULL:
     max_logit[h]   the largest logit head h passed to its softmax, s q.k after the norms, RoPE
                    and qk_scale (masked entries excluded), over the B*T rows: QK-Clip's S_max
                    (with attn.softcap the logit before the cap, which the cap hides)
     first_mass[h]  the probability of the first key, P[i][0], averaged over the B*T query
                    rows: the attention-sink mass (the causal mask gives row 0 all of its
                    mass there, 1/T of the mean)
   NB_ERR_NULL, or NB_ERR_CONFIG for a cache without that forward; outputs untouched then. */
NBDEF nb_result nb_attn_head_stats(const nb_attn_plan* plan, const nb_real* cache, int B, int T,
                                   double* max_logit, double* first_mass);
/* attn.sink: the sink's probability of head h averaged over the B*T query rows, the mass it
   took from the keys (0 for every head without sinks). Errors as nb_attn_head_stats. */
NBDEF nb_result nb_attn_sink_mass(const nb_attn_plan* plan, const nb_real* cache, int B, int T,
                                  double* sink_mass);

/* ---- feed-forward sublayer -------------------------------------------------------------------
   SwiGLU: [u|z] = x W_in^T (first half value u, second half gate z), a = silu(z)*u,
   out = a W_out^T. GELU: h = x W_in^T + b_in, a = gelu(h), out = a W_out^T + b_out.
   With in_scale the projection is multiplied by sqrt(d) s first (nGPT's s_u, s_v). */
typedef enum nb_ffn_type {
    NB_FFN_DEFAULT = 0,  /* SwiGLU */
    NB_FFN_SWIGLU,
    NB_FFN_GELU_TANH,    /* GPT-2's tanh approximation */
    NB_FFN_GELU_ERF      /* exact erf GELU */
} nb_ffn_type;

/* The FFN's settings, shared by nb_ffn_desc.ffn and nb_stack_desc.ffn. */
typedef struct nb_ffn_config {
    nb_ffn_type type;     /* 0 = SwiGLU (a stack: the preset's: GELU-tanh for GPT2) */
    int d_ff;             /* f, inner width; 0 = 4d for GELU, 8d/3 rounded up to 64 for SwiGLU
                             (nGPT: 4d) */
    int bias;             /* 0 = type default (GELU: biases, SwiGLU: none); 1 = on; -1 = off */
    int in_scale;         /* 1 = nGPT's s_uv: the input projection (with its bias) times
                             sqrt(d) s per column before the activation, s a learnable vector
                             of 2f (SwiGLU: s_u | s_v) or f ("suv"), init 1 as nGPT's code;
                             -1 = off; 0 = off (a stack: the preset's, on for NGPT) */
} nb_ffn_config;

typedef struct nb_ffn_desc {
    int d_model;          /* d (required) */
    nb_ffn_config ffn;    /* activation, width, biases, nGPT's scale */
    nb_gemm_config gemm;  /* precision and bf16 weights (params.w_in16, w_out16) */
} nb_ffn_desc;

/* w_in: (2f or f) x d, b_in: 2f or f, w_out: d x f, b_out: d; biases NULL when off;
   in_scale: 2f or f (in_scale only). Bound in this order. */
typedef struct nb_ffn_params {
    nb_real *w_in, *b_in, *w_out, *b_out, *in_scale;
    const unsigned short *w_in16, *w_out16; /* desc.gemm.bf16_weights only (as nb_attn_params) */
} nb_ffn_params;

typedef struct nb_ffn_plan {
    nb_ffn_desc desc;
    int max_batch, max_seq;
    int in_width;         /* rows of w_in: 2f (SwiGLU) or f */
    size_t n_params, n_cache, n_scratch;
    struct nb__mm* mm;    /* internal, as nb_attn_plan.mm */
    int bf16_gemm;        /* internal, as nb_attn_plan.bf16_gemm */
} nb_ffn_plan;

NBDEF nb_result nb_ffn_plan_make(nb_ctx* ctx, nb_ffn_plan* plan, const nb_ffn_desc* desc,
                                 int max_batch, int max_seq);
/* order: w_in, b_in, w_out, b_out; NULL arguments as nb_attn_params_bind */
NBDEF void nb_ffn_params_bind(const nb_ffn_plan* plan, nb_real* base, nb_ffn_params* p);
NBDEF nb_result nb_ffn_forward(nb_ctx* ctx, const nb_ffn_plan* plan, const nb_ffn_params* p,
                               nb_real* out, const nb_real* x, int B, int T, nb_real* cache,
                               nb_real* scratch);
/* As nb_attn_backward: a cache not written by a successful forward of an equal plan with the
   same B and T is refused. */
NBDEF nb_result nb_ffn_backward(nb_ctx* ctx, const nb_ffn_plan* plan, const nb_ffn_params* p,
                                nb_ffn_params* g, nb_real* dx, const nb_real* dout,
                                const nb_real* x, int B, int T, const nb_real* cache,
                                nb_real* scratch, int accumulate_dx);

/* ---- blocks and stacks -----------------------------------------------------------------------
   A block is an attention sublayer then an FFN sublayer, each wrapped by a placement:
       h  = input_norm ? c * N_in(x) : x          (c = input_scale, LayerNorm Scaling)
       r  = residual_from_norm ? h : x            (HybridNorm's "Post" FFN; needs input_norm)
       r  = N_res(x)     when residual_norm       (nGPT's justnorm(h); the branch takes h)
       f  = output_norm ? N_out(F(h)) : F(h)      (sandwich, OLMo-2 "norm_after")
       f  = lambda * f   when branch_scale is on  (ReZero: a learnable scalar, init 0;
                                                   LayerScale: a learnable per-channel vector)
       f  = m * f                                 (m = branch_mult, a constant: CompleteP's
                                                   L^-alpha, nb_stack_desc.residual.depth_alpha)
       s  = alpha * r + f                         (alpha = residual_scale, DeepNorm)
       s  = r + |a| (f - r)  for branch_scale INTERP instead of the three lines above (nGPT:
                                                   a per-channel step toward the branch)
       x' = post_norm ? N_post(s) : s             (classic Post-Norm)
   A stack is L blocks with a per-layer schedule of placements and attention norm sites, an
   optional input (embedding) norm and final norm, on one residual stream or on SiameseNorm's
   two. Presets give the papers' variants; any other schedule is a struct away. */
typedef enum nb_branch_scale {
    NB_BRANCH_SCALE_NONE = 0,
    NB_BRANCH_SCALE_SCALAR,  /* ReZero: one learnable scalar per layer ("resweight", init 0),
                                shared by the layer's sublayers that use it, as the ReZero code */
    NB_BRANCH_SCALE_CHANNEL, /* LayerScale (CaiT): a learnable vector of d per sublayer
                                ("ls1.gamma" attention, "ls2.gamma" FFN, as timm), initialized
                                to nb_stack_desc.residual.layerscale_init */
    NB_BRANCH_SCALE_INTERP,  /* nGPT's eigen learning rate: s = r + |a| (f - r) per channel,
                                a = sqrt(d) interp_init lambda with lambda a learnable vector of
                                d per sublayer ("attn_alpha", "mlp_alpha") stored as nGPT's code
                                stores it: init 1/sqrt(d), so a starts at interp_init
                                (nb_stack_desc). Needs residual_scale and branch_mult 1 */
    NB_BRANCH_SCALE_SUBLAYER /* SkipInit's form of ReZero: one learnable scalar per sublayer
                                ("attn_resweight", "ff_resweight", init 0) */
} nb_branch_scale;

typedef struct nb_placement {
    int input_norm;
    int residual_from_norm;
    int residual_norm;       /* the residual is N_res(x) ("attn_res_norm", "ff_res_norm"),
                                not x; not with residual_from_norm */
    int output_norm;
    int post_norm;
    nb_branch_scale branch_scale;
    nb_real residual_scale;  /* 0 = 1 */
    nb_real input_scale;     /* 0 = 1: the input norm's output times this; LayerNorm Scaling
                                uses 1/sqrt(l) with l = 1..L the 1-based layer (needs
                                input_norm) */
    nb_real branch_mult;     /* 0 = 1 (or the stack's depth_alpha rule): a constant on the
                                branch, f = m F(..): CompleteP's residual multiplier */
} nb_placement;

typedef struct nb_layer_desc {
    nb_placement attn, ffn;
    unsigned sites;          /* attention norm sites of this layer (NB_SITE_* mask, 0 = none) */
} nb_layer_desc;

typedef enum nb_preset {
    NB_PRESET_DEFAULT = 0,     /* Pre-Norm, or the custom schedule when desc.layers is set */
    NB_PRESET_PRE,             /* x + F(N(x)); final norm */
    NB_PRESET_POST,            /* N(x + F(x)); plus the final norm of the Mix-LN code */
    NB_PRESET_POST_FLAGS,      /* HybridNorm-code Post-Norm: layer 0 no attention input norm,
                                  all else input norm + residual from norm. With a = N_a(x);
                                  y = a + MHA(a); b = N_f(y); x' = b + F(b), N_f of layer l is
                                  classic Post-Norm's first norm and N_a of layer l+1 (ln_f
                                  after the last) its second: the same function as POST
                                  without its final norm when the gains are mapped so */
    NB_PRESET_SANDWICH,        /* x + N_out(F(N_in(x))) (Gemma 3) */
    NB_PRESET_OLMO2,           /* x + N_out(F(x)), QK norm over the full width, eps 1e-6 */
    NB_PRESET_DEEPNORM,        /* N(alpha x + F(x)), alpha = (2L)^(1/4) */
    NB_PRESET_DEEPNORM_MIXLN,  /* the Mix-LN code's DeepNorm: alpha = sqrt(8) */
    NB_PRESET_HYBRID,          /* HybridNorm = QKV-Post: x + MHA_QKV(x), then h + FFN(h), h = N(y) */
    NB_PRESET_HYBRID_STAR,     /* HybridNorm*: layer 0 is Pre-Norm with QKV norms */
    NB_PRESET_FIRST_QKV_PRE,   /* layer 0 QKV-Pre, others HybridNorm */
    NB_PRESET_EMBEDNORM,       /* HybridNorm with a normalized embedding */
    NB_PRESET_SITES_POST,      /* "#-Post": no attention input norm, FFN residual from norm */
    NB_PRESET_SITES_PRE,       /* "#-Pre": no attention input norm, Pre-Norm FFN */
    NB_PRESET_PRE_SITES_POST,  /* "Pre-#-Post": Pre-Norm attention with # norms, FFN from norm */
    NB_PRESET_PRE_SITES_PRE,   /* "Pre-#-Pre": Pre-Norm with # norms */
    NB_PRESET_PRE_POST,        /* Pre-Norm attention, FFN residual from norm */
    NB_PRESET_POST_PRE,        /* attention residual from norm, Pre-Norm FFN */
    NB_PRESET_MIXLN,           /* classic Post-Norm in the first floor(alpha L) layers, Pre after */
    NB_PRESET_SIAMESE,         /* SiameseNorm, practical "hybrid-pre" form (two streams) */
    NB_PRESET_SIAMESE_POST_PRE,/* SiameseNorm, "Post-Pre" form */
    NB_PRESET_LNS,             /* LayerNorm Scaling: Pre-Norm, N(x) / sqrt(l) in layer l = 1..L */
    NB_PRESET_NONE,            /* no normalization: x + F(x), no final norm (a baseline) */
    NB_PRESET_DYT,             /* Pre-Norm with DyT for every norm (DyT's LLaMA setting) */
    NB_PRESET_PERILN,          /* Peri-LN: x + N_out(F(N_in(x))), normalized embedding, ln_f */
    NB_PRESET_REZERO,          /* ReZero: x + a F(x), a learnable scalar per layer (init 0), no
                                  norms anywhere (the ReZero code has no final norm either) */
    NB_PRESET_LAYERSCALE,      /* LayerScale: x + diag(lambda) F(N(x)), Pre-Norm and final norm */
    NB_PRESET_MHC,             /* Pre-Norm on mHC's 4 hyper-connected streams (nb_hyper) */
    NB_PRESET_HC,              /* Pre-Norm on HC's 4 hyper-connected streams */
    NB_PRESET_IHC,             /* Pre-Norm on identity HC's 4 streams (mHC with H_res = I) */
    NB_PRESET_NGPT,            /* nGPT: x' = L2(L2(x) + |a| (L2(F(x)) - L2(x))) per sublayer,
                                  L2 Q, K per head times s_qk, SwiGLU times s_uv (NVIDIA/ngpt) */
    NB_PRESET_COUNT
} nb_preset;

#define NB_SITES_NONE 0x100u /* nb_stack_desc.attn.sites: explicitly none (0: the preset's) */

/* Hyper-connections (nb_stack_desc.hyper.kind): n residual streams X = (x_0 .. x_{n-1}) of width d
   per token instead of one, and around EACH sublayer (attention and FFN separately)
       u = sum_i pre_i x_i;   y = B(u);   x'_k = post_k y + sum_j comb[j][k] x_j
   where B is the sublayer's placement without its residual (h = c N_in(u) or u; f = F(h);
   N_out(f); the branch scale) and pre (n), post (n), comb (n x n; the papers' H_pre, H_post
   and H_res = comb^T) are computed per token from X (dynamic form) or learned constants
   (hyper.static_maps = 1). Every stream starts as the stack's input x_0 (after the embedding
   norm); before the final norm the streams are summed (HC) or weighted per token (mHC, IHC:
   DeepSeek-V4's hc_head). Placements with a post norm, a residual from the norm or a residual
   scale, and SiameseNorm, are refused: the hyper-connection is their residual. The streams
   are the stack's state: nb_stack.streams = n; n hidden states per layer; each layer caches
   its n middle streams, u and y of both sublayers (n + 4 tensors of B*T x d) and 2n + n^2
   map values per token and sublayer; the scratch holds 4n tensors of B*T x d (the maps'
   inputs, a layer's middle gradients, the ping-pong gradients of the n streams); and
   nb_layer_forward/backward take n consecutive B*T x d tensors. The maps' arithmetic stays in
   the parameters' precision (float32 GEMMs in a BF16 stack: they are 2n + n^2 wide). */
typedef enum nb_hyper {
    NB_HYPER_DEFAULT = 0,  /* the preset's: NONE, MHC for "mhc", HC for "hc", IDENTITY "ihc" */
    NB_HYPER_NONE,         /* one residual stream */
    NB_HYPER_MHC,          /* mHC (DeepSeek, arXiv 2512.24880; its code: TileKernels and the
                              DeepSeek-V4 hc_pre/hc_post/hc_head). xf = [x_0|..|x_{n-1}],
                              r = 1/sqrt(mean(xf^2) + 1e-6), mix = r fn xf (fn: (2n+n^2) x nd);
                              pre = sigmoid(a_0 mix_pre + b_pre) + 1e-6, post = 2 sigmoid(a_1
                              mix_post + b_post), comb = Sinkhorn(a_2 mix_res + b_res):
                              M = softmax over k + 1e-6, columns normalized, then hyper.sinkhorn
                              - 1 times rows then columns (each sum + 1e-6); the backward goes
                              through every iteration, as the code's. Tensors "hc_attn_fn",
                              "hc_attn_base" (2n+n^2), "hc_attn_scale" (a, 3) and hc_ffn_*; the
                              head hc_head_fn (n x nd), hc_head_base, hc_head_scale (1): weights
                              w_i = sigmoid(a r (fn xf)_i + b_i) + 1e-6. Init: fn N(0, 0.02^2),
                              b 0, a 0.01 (the paper's gating init): pre ~1/2, post ~1, comb
                              ~J/n, near the Pre-Norm model (with fn = 0 it, up to the 1e-6
                              terms; but a zero fn keeps the streams identical for ever) */
    NB_HYPER_HC,           /* HC (ByteDance, arXiv 2409.19606; no code released: its Appendix
                              J's Alg. 2, the dynamic DHC): per stream hbar_i = N(x_i) (the
                              stack's norm kind, parameters shared: "hc_attn.norm.*"),
                              A[i][c] = s_a tanh(hbar_i . W_a[:, c]) + static_alpha[i][c],
                              c = 0..n; beta_i = s_b tanh(hbar_i . w_b) + static_beta[i];
                              pre_i = A[i][0], comb[i][k] = A[i][1+k], post_k = beta_k (tanh,
                              no constraint). Tensors "hc_attn.static_alpha" (n x (n+1)),
                              .static_beta (n), .dynamic_alpha_fn (d x (n+1), the paper's x W
                              layout), .dynamic_alpha_scale, .dynamic_beta_fn (d),
                              .dynamic_beta_scale, .norm.*; the streams are summed at the end.
                              Init: static_alpha [e_(k mod n) | I] with k = 2l (attention) or
                              2l + 1 (FFN), static_beta 1, W 0, scales 0.01 */
    NB_HYPER_IDENTITY,     /* identity HC, the papers' ablation: mHC with comb = I (fn and base
                              2n wide, scale 2 values; no Sinkhorn) */
    NB_HYPER_MHC_LITE      /* mHC-lite (arXiv 2601.05732; its code FFTYYY/mhc-lite): mHC whose
                              comb is exactly doubly stochastic, a convex combination of the n!
                              permutation matrices (Birkhoff-von Neumann), no Sinkhorn:
                              comb[j][k] = sum_r a_r [k = pi_r(j)], a = softmax(a_2 mix_res +
                              b_res) over the permutations in lexicographic order (Python's
                              itertools.permutations, as its code; pi_0 the identity). fn and
                              base are 2n + n! wide (n <= NB_HYPER_LITE_MAX_STREAMS). Init as
                              mHC's, but b_res as its code's static residual logits: 0 for the
                              identity, -8 for the others (comb ~ 0.99 I). Every row and column
                              of comb sums to 1 up to rounding at any depth: its composite gain
                              (nb_stack_hyper_gains) is 1 */
} nb_hyper;
#define NB_HYPER_MAX_STREAMS 8
#define NB_HYPER_LITE_MAX_STREAMS 5 /* mHC-lite: n! logits per token and sublayer (120 at 5) */

/* How nb_stack_backward writes a gradient (nb_stack_desc.run.param_grads, .input_grad) */
typedef enum nb_grad_mode {
    NB_GRAD_DEFAULT = 0,  /* param_grads: ACCUMULATE; input_grad: OVERWRITE (as PyTorch) */
    NB_GRAD_ACCUMULATE,   /* g += this call's gradient (the caller zeroes it once per step) */
    NB_GRAD_OVERWRITE     /* g = this call's gradient (no zeroing needed) */
} nb_grad_mode;

/* The stack's norms: their kind and settings (block norms, attention sites, the final and
   embedding norms). */
typedef struct nb_norm_config {
    nb_norm_type type;         /* every norm (0 = preset default: RMSNorm; DyT for DYT, L2 for
                                  NGPT); LayerNorm, DyT and Derf block norms carry a bias */
    nb_real eps;               /* 0 = 1e-5 (1e-6 for OLMO2, MIXLN, DEEPNORM_MIXLN, LNS: their
                                  code); else finite and > 0 */
    int gain;                  /* block norms' weight: 0 = the kind's (on but L2), -1 = none
                                  (RMSNorm without a weight; DyT, Derf without gamma) */
    int bias;                  /* block norms' bias: 0 = the kind's (LayerNorm, DyT, Derf: on),
                                  -1 = none (DyT's LLaMA code has none; LayerNorm(bias=False)) */
    int gain_offset;           /* 1 = Gemma's unit-offset weights: every norm gain (block norms
                                  and attention sites) is stored as w and multiplies by 1 + w,
                                  init 0 (Gemma, Qwen3-Next: x_hat * (1 + weight)); gradients
                                  are w's. Costs the gains' size in the cache */
    double dyt_alpha;          /* DyT: initial alpha of every norm but those feeding attention;
                                  0 = DyT's LLM rule by width d: 1 up to 1024, 0.5 up to 2048,
                                  0.2 up to 4096, else 0.05 (its non-LLM default is 0.5) */
    double dyt_alpha_attn;     /* DyT: initial alpha of the norms whose output enters attention
                                  (attn_norm, attn_y_norm, attn_input_norm; not the Q/K/V/C
                                  sites); 0 = by width: 1 up to 2048, 0.8 up to 4096, else 0.2 */
    int final;                 /* the final norm ln_f: 0 = preset default (on; off for NONE,
                                  REZERO, NGPT), 1 = on, -1 = off */
    int embed;                 /* the embedding norm on the stack's input: 0 = preset default
                                  (on for EMBEDNORM, PERILN), 1 = on, -1 = off */
    int embed_scale;           /* 1 = the stack's input times a learnable scalar ("embed_scale",
                                  init sqrt(d)) before the embedding norm: DyT's and Derf's
                                  language-model codes' shared_scale on the embedding */
} nb_norm_config;

/* How each sublayer's branch joins its residual, and what crosses layers. */
typedef struct nb_residual_config {
    nb_branch_scale branch_scale; /* every sublayer's branch scale of a preset (not a custom
                                  schedule, which sets its own; not SiameseNorm): 0 = the
                                  preset's; e.g. REZERO with SUBLAYER: SkipInit's scalars */
    double layerscale_init;    /* LayerScale's initial lambda; 0 = CaiT's rule by depth: 0.1 up to
                                  18 layers, 1e-5 up to 24, 1e-6 deeper; else finite and > 0 */
    double interp_init;        /* the initial step |a| of NB_BRANCH_SCALE_INTERP placements;
                                  0 = 0.05 (nGPT's code, both sublayers); else in (0, 1] */
    double depth_alpha;        /* CompleteP (Cerebras, arXiv 2505.01618; its code, nanoGPT-mup
                                  branch completep): every branch times m = (L / depth_base)
                                  ^-depth_alpha (placement branch_mult, where a custom layer
                                  leaves it 0): 1 CompleteP, 0.5 the depth-muP form; 0 off; else
                                  in (0, 2]. Its learning-rate, init and AdamW-eps rules by
                                  depth and width are the trainer's (examples/train) */
    int depth_base;            /* CompleteP's base depth L_base; 0 = 1 (m = L^-alpha) */
    int value_residual;        /* ResFormer's value residual (arXiv 2410.17897): in every layer
                                  l >= 1 the attention's values are V_l' = lambda_1 V_l +
                                  lambda_2 V_0, V_0 layer 0's (after the V norm site). 0 off,
                                  1 fixed lambdas 0.5 and 0.5 (the paper's and its code's),
                                  2 learnable: "blocks.<l>.value_residual.lambda" = [lambda_1,
                                  lambda_2] per layer l >= 1, init 0.5 each. Any preset. Costs
                                  B*T*H_kv*d_k values of cache (V_0) and of scratch (dV_0), and
                                  with 2 that much cache again per layer l >= 1 (V_l, for
                                  lambda_1's gradient). Layer 0 cannot be skipped (nb_stack.skip).
                                  nb_layer_forward/backward: see there */
    int value_embeds;          /* modded-nanogpt's value embeddings: N tables (0 off; 2N <= L)
                                  whose rows the caller gathers per token and binds with
                                  nb_stack_set_value_embeds. Layer l < N mixes table l, layer
                                  l >= L-N table l-(L-N), as its code's [ve0, ve1, ve2] + [None]
                                  * (L-6) + [ve0, ve1, ve2]: V' = lambda_0 V + lambda_1 E (after
                                  the V norm site); the others V' = lambda_0 V (the code's
                                  sa_lambdas: every layer has "value_embed.lambda", init 0.5,
                                  0.5). Not with value_residual (both mix V). Costs B*T*H_kv*d_k
                                  values of cache per layer (V, for lambda_0's gradient) */
    int dwa;                   /* DenseFormer's depth-weighted average (arXiv 2402.02622; its
                                  code epfml/DenseFormer, the DWAModules package): layer l's
                                  output h_{l+1} (its residuals included) is not the next input;
                                  x_{l+1} = sum_m a_l[m] h_{j0 + m k}, over h_0 = x_0 (the stack's
                                  input after the embedding norm) and the layer outputs h_j with
                                  j = l+1 mod k up to l+1 (k = dwa_dilation), a_l the layer's
                                  "blocks.<l>.dwa.weight" (1 x ((l+1)/k + 1), nn.Linear's layout:
                                  the package's "dwa_modules.alphas.<l>.weight"), init 0 but 1
                                  on h_{l+1} (the plain stack), weight-decayed as the code's
                                  nn.Linear. 1 on, 0 off. One residual stream (not SiameseNorm
                                  or hyper-connections); no layer skipped (nb_stack.skip); not
                                  through nb_layer_forward/backward. Costs B*T*d of cache per
                                  layer (h) and (L+1) B*T*d of scratch (their gradients) */
    int dwa_dilation;          /* DenseFormer's dilation k: 0 = 1 (every earlier output) */
    int dwa_period;            /* DenseFormer's DWA period p (the package's period): 0 = 1; only
                                  layers l with (l+1) mod p = 0 average (and have dwa.weight),
                                  the others pass x_{l+1} = h_{l+1} on, their outputs still in
                                  the later averages */
    int attn_res;              /* Attention Residuals (Moonshot, arXiv 2603.15031; its official
                                  pseudocode, MoonshotAI/Attention-Residuals): no residual sums.
                                  The sublayers j = 0 .. 2L-1 (attention 2l, FFN 2l+1) are
                                  branches f_j (their input norms and branch scales kept); the
                                  input h_j of sublayer j >= 1, and h_2L before the final norm, is
                                  sum_i a_i v_i over the sources v: x_0 (the stack's input after
                                  the embedding norm), the completed blocks' sums of f, and the
                                  current block's partial sum; a = softmax_i(w_j . RMSNorm_j(v_i))
                                  per token, w_j a learned pseudo-query (init 0: uniform weights,
                                  as the paper requires), RMSNorm_j with its own gain (init 1,
                                  eps = norm.eps) on the keys only. Sublayer 0 reads x_0 (the
                                  code's reader there has one source: not stored). Tensors
                                  "blocks.<l>.attn_res.proj.weight" (1 x d; the code's
                                  attn_res_proj, l >= 1), "...attn_res.norm.weight" (d),
                                  "mlp_res.proj/norm.weight", and the output's "final_res.proj/
                                  norm.weight"; the queries decay as the code's nn.Linear, the
                                  gains do not. 1 on, 0 off. Presets whose sublayers add a plain
                                  residual (no post or residual norm, no INTERP); one stream (not
                                  SiameseNorm, hyper-connections or DenseFormer); no layer
                                  skipped; not through nb_layer_forward/backward. Costs 3L
                                  B*T*d of cache, (2L+1) B*T*d of scratch (the sources'
                                  gradients), the weights a (nb_stack_attn_res_weights) and each
                                  source's RMS per token in the cache */
    int attn_res_block;        /* its block size S in sublayers (the code's block_size, which
                                  counts attention and FFN): a block's sum is S consecutive
                                  f_j, the blocks start at sublayer 0; 0 = 1, Full AttnRes
                                  (every f_j its own source); S = 2L: one block (x_0 and the
                                  running sum, the paper's N = 1) */
    int unet_skips;            /* modded-nanogpt's U-Net skips (its train_gpt.py; x-transformers'
                                  unet_skips): with n = L/2, layer l >= n's input is x_l +
                                  w_{l-n} h_{2n-1-l}, h_j layer j's output (the encoder layers'
                                  outputs joining the decoder layers in reverse order), w the
                                  code's skip_weights: "blocks.<l>.skip_weight" (1 value, l >= n,
                                  init 1, no decay). 1 on, 0 off; L even (the code's assert) */
    int reinject_x0;           /* modded-nanogpt's re-injection of the stack's input: layer l's
                                  input (after the U-Net skip) becomes lambda_0 x + lambda_1 x_0,
                                  x_0 the stack's input after the embedding norm (the code's
                                  norm(embed(.))); "blocks.<l>.lambdas" (2 values, init [1, 0]:
                                  the plain stack, no decay). 1 on, 0 off.
                                  Both: one residual stream (not SiameseNorm, hyper-connections,
                                  DenseFormer, Attention Residuals); no layer skipped; not
                                  through nb_layer_forward/backward. Cost B*T*d of cache per
                                  layer whose input is mixed, and (L/2 + 1) B*T*d of scratch */
} nb_residual_config;

/* Hyper-connections: n residual streams mixed around every sublayer (see nb_hyper). */
typedef struct nb_hyper_config {
    nb_hyper kind;             /* 0 = the preset's */
    int streams;               /* n: 0 = 4 (both papers' and DeepSeek-V4's); 1..8 */
    int static_maps;           /* 1 = the static form: maps are learned constants (mHC: sigmoid
                                  and Sinkhorn of the base alone; HC: SHC), no per-token part */
    int sinkhorn;              /* mHC's Sinkhorn iterations; 0 = 20 (the paper's, V4's) 1..100 */
} nb_hyper_config;

/* SiameseNorm's forms (presets SIAMESE, SIAMESE_POST_PRE): 0 = its code's. */
typedef struct nb_siamese_config {
    int paper_scale;           /* c_l of layer l = 0..L-1: 0 = sqrt(2(l+1)) (code), 1 =
                                  sqrt(l+1) (paper), 2 = 1 (the paper's constant-c ablation) */
    int paper_fusion;          /* 0 = 3-norm output fusion (code), 1 = x_L + N(y_L) (paper) */
    int no_fusion_norm;        /* 1 = the paper's ablation without the FFN fusion's input norm:
                                  u_f = n + N_fy(y1) (hybrid-pre form only) */
} nb_siamese_config;

/* What forward and backward check and how they hand out gradients. */
typedef struct nb_run_config {
    int check_finite;          /* 1 = forward/backward fail with the first non-finite layer named */
    nb_grad_mode param_grads;  /* grads of nb_stack_backward: 0 = ACCUMULATE; OVERWRITE: each
                                  tensor is zeroed right before its layer's backward writes
                                  it (in cache: as fast as accumulating into a zeroed buffer) */
    nb_grad_mode input_grad;   /* din of nb_stack_backward: 0 = OVERWRITE; ACCUMULATE: din +=
                                  (as llm.c's backward functions; din may not be dout then) */
} nb_run_config;

/* A stack, grouped by subsystem; zero means default at every level (0.1's flat fields and
   their places here: README, "From 0.1 to 0.2"). */
typedef struct nb_stack_desc {
    int n_layers, d_model, n_heads, n_kv_heads; /* n_kv_heads 0 = n_heads */
    nb_preset preset;
    char name[32];             /* the preset's name as the caller spelled it, for messages
                                  (nb_preset_from_name fills it; empty = the preset's key) */
    const nb_layer_desc* layers; /* optional n_layers custom layers (copied at init) */
    double mixln_alpha;        /* Mix-LN fraction of Post-Norm layers: in (0, 1]; 0 = 0.25;
                                  -1 = none (alpha = 0: the Mix-LN code's Pre-Norm, eps 1e-6) */
    nb_norm_config norm;      /* kind, eps, gains and biases, final and embedding norms */
    nb_attn_config attn;       /* every attention's settings (nb_attn_desc) */
    nb_ffn_config ffn;        /* every FFN's settings (nb_ffn_desc) */
    nb_residual_config residual; /* branch scales, CompleteP, value residual */
    nb_hyper_config hyper;    /* hyper-connections */
    nb_siamese_config siamese; /* SiameseNorm's forms */
    nb_gemm_config gemm;       /* precision, bf16 weights, backend */
    nb_run_config run;         /* checks and gradient conventions */
} nb_stack_desc;

typedef enum nb_tensor_kind {
    NB_TENSOR_QKV = 1, NB_TENSOR_ATTN_OUT, NB_TENSOR_FF_IN, NB_TENSOR_FF_OUT,
    NB_TENSOR_GAIN, NB_TENSOR_BIAS, NB_TENSOR_SIAMESE_GAMMA,
    NB_TENSOR_DYT_ALPHA,       /* DyT's scalar alpha of one norm ("<norm>.alpha", 1 value);
                                  Derf's alpha and shift ("<norm>.alpha_shift", 2 values) */
    NB_TENSOR_REZERO,          /* ReZero's scalar of a layer ("resweight", 1 value, init 0) */
    NB_TENSOR_LAYERSCALE,      /* LayerScale's vector of a sublayer ("ls1.gamma", "ls2.gamma") */
    NB_TENSOR_VALUE_RESIDUAL,  /* the learnable value residual's [lambda_1, lambda_2] of a layer
                                  l >= 1 ("value_residual.lambda", 2 values, init 0.5) */
    NB_TENSOR_HC_FN,           /* a hyper-connection's projection (mHC "hc_attn_fn", HC
                                  "dynamic_alpha_fn", "dynamic_beta_fn"): weight decay on */
    NB_TENSOR_HC_BASE,         /* its static part (mHC "_base", HC "static_alpha", "static_beta") */
    NB_TENSOR_HC_SCALE,        /* its gating scalars (mHC "_scale", HC "dynamic_*_scale") */
    NB_TENSOR_INTERP,          /* nGPT's eigen learning rates "attn_alpha", "mlp_alpha" (d) */
    NB_TENSOR_QK_SCALE,        /* nGPT's "sqk" (H d_k): Q and K after RoPE */
    NB_TENSOR_FF_SCALE,        /* nGPT's "suv" (SwiGLU 2f): the FFN's input projection */
    NB_TENSOR_EMBED_SCALE,     /* the learnable scalar on the stack's input ("embed_scale") */
    NB_TENSOR_SINKS,           /* a layer's attention sink logits ("sinks", H: gpt-oss's name) */
    NB_TENSOR_DWA,             /* DenseFormer's weights of a layer ("dwa.weight", 1 x count):
                                  weight decay on, as its code's nn.Linear */
    NB_TENSOR_ATTN_RES_QUERY,  /* an Attention Residuals pseudo-query ("attn_res.proj.weight",
                                  "mlp_res...", "final_res...", 1 x d, init 0): decay on */
    NB_TENSOR_ATTN_RES_GAIN,   /* its key RMSNorm's gain ("attn_res.norm.weight", ..., d, init 1) */
    NB_TENSOR_SKIP_WEIGHT,     /* a U-Net skip's weight ("skip_weight", 1 value, init 1) */
    NB_TENSOR_X0_LAMBDAS,      /* the re-injection's [lambda_0, lambda_1] ("lambdas", init 1, 0) */
    NB_TENSOR_VALUE_EMBED      /* the value embeddings' [lambda_0, lambda_1] of a layer
                                  ("value_embed.lambda", 2 values, init 0.5) */
} nb_tensor_kind;

typedef struct nb_tensor_info {
    char name[64];             /* PyTorch-style, e.g. "blocks.3.att_proj.weight" */
    int layer;                 /* -1 for stack-level tensors */
    nb_tensor_kind kind;
    int ndim;                  /* 2 for matrices (and HC's static_alpha), 1 for vectors (gains,
                                  biases, gamma, alpha) */
    int rows, cols;            /* (out, in) for matrices; (n, 1) for vectors */
    size_t offset, count;      /* in the contiguous parameter (and gradient) buffer */
    int no_decay;              /* every vector and scalar: norm gains, biases, SiameseNorm gamma,
                                  DyT alpha, ReZero and LayerScale scales; the hyper-connections'
                                  static parts and scales (their projections decay, as HC's) */
} nb_tensor_info;

typedef struct nb_layer {      /* resolved per-layer plan (read-only) */
    nb_layer_desc desc;
    nb_attn_plan attn;
    size_t param_offset, n_params, cache_offset; /* param_*: the stack's own layout only */
    size_t gain0;              /* internal: the layer's first gain among the unit-offset gains */
    int tensor0, n_tensors;    /* the layer's rows of nb_stack.tensors */
} nb_layer;

typedef struct nb_stack {
    nb_stack_desc desc;        /* resolved; desc.layers points at layer descs owned here */
    nb_layer* layers;          /* n_layers */
    nb_ffn_plan ffn;
    int streams;               /* 1, 2 for SiameseNorm, n with hyper-connections */
    int max_batch, max_seq, max_threads;
    size_t n_params, n_cache, n_scratch;
    nb_tensor_info* tensors;
    int n_tensors;
    unsigned char* skip;       /* n_layers flags: 1 = layer is the identity (diagnostics) */
    void* alloc_user;
    struct nb__mm* mm;         /* internal: oneDNN's engine and matmuls (backend DNNL) */
    int topology;              /* internal: the residual topology's row (nb__topologies) */
    char kernels[384];         /* which GEMM kernels run: see nb_stack_kernels */
    size_t n_gains, gain_final0; /* internal: gain values, the final norms' first (gain_offset) */
    const unsigned short* weights16; /* desc.gemm.bf16_weights: see nb_stack_set_bf16_weights */
    const nb_real* value_embeds;     /* desc.residual.value_embeds: see nb_stack_set_value_embeds */
    nb_real* value_embeds_grad;
} nb_stack;

/* Resolve and validate the description, lay out parameters and buffers for batches up to
   (max_batch, max_seq). Allocates the small layer and tensor tables (NB_MALLOC); free them
   with nb_stack_free. On failure *s is left empty (nb_stack_free on it is harmless). Trusted:
   desc->layers, when set, has n_layers entries. */
NBDEF nb_result nb_stack_init(nb_ctx* ctx, nb_stack* s, const nb_stack_desc* desc,
                              int max_batch, int max_seq);
NBDEF void nb_stack_free(nb_stack* s);
/* Which GEMM kernels the stack runs, one line for logs and benchmark rows, e.g. "bf16:
   projections oneDNN brg:avx512_core_amx_bf16, attention products portable bf16". The
   backend actually chosen is s->desc.gemm.backend. */
NBDEF const char* nb_stack_kernels(const nb_stack* s);
/* Bytes oneDNN allocates itself to run the stack's primitives made so far (their scratchpads;
   it grows as new GEMM shapes run, to at most 48 primitives); 0 on the BLAS backend.
   The bf16 copies of weights and activations are in the cache, counted by n_cache. */
NBDEF size_t nb_stack_backend_bytes(const nb_stack* s);
NBDEF const char* nb_preset_name(nb_preset p);
/* The other names nb_preset_from_name takes for p ('|'-separated, e.g. "Pre-Norm|PreNorm"; ""
   when none), and one line on what its block is; "" for an unknown p. */
NBDEF const char* nb_preset_aliases(nb_preset p);
NBDEF const char* nb_preset_about(nb_preset p);

/* Bind the stack to the caller's own parameter layout, so a trainer's existing buffers are used
   without copies: tensor t (of s->tensors, the same rows and shapes: matrices (out, in) as
   nn.Linear, [Q|K|V] rows) lives at offsets[t] of the caller's buffers of `count` values. The
   parameters, the gradients (and any optimizer state) share that layout, as in llm.c, where
   all layers' QKV weights lie together, then all output projections, and so on. Values of the
   buffers that no tensor covers (the trainer's embedding, LM head) are never read or written.
   Refused, the stack unchanged: a tensor that ends past count (NB_ERR_SHAPE), two tensors
   that overlap (NB_ERR_SHAPE, both named), NULL s (NB_ERR_NULL), no memory for the check
   (NB_ERR_NOMEM). After it s->n_params = count and s->tensors[t].offset = offsets[t]:
   forward, backward, nb_stack_init_params and the diagnostics use the caller's layout;
   layers[].param_offset/n_params keep describing the stack's own one. offsets NULL restores
   the stack's own layout (one block per layer). A cache written before still serves a
   backward. Trusted: offsets has s->n_tensors values. */
NBDEF nb_result nb_stack_set_layout(nb_ctx* ctx, nb_stack* s, const size_t* offsets,
                                    size_t count);
/* The bf16 copy of the parameters for a stack made with desc.gemm.bf16_weights: w16 has a value
   per parameter of the stack's layout (n_params, or the count of nb_stack_set_layout), the
   bits of bf16(params[i]) (nb_bf16_round) for at least every weight matrix (QKV, attention
   output, FFN in and out); the other values are not read. Forward and backward read the
   weight matrices there, and the caller keeps it equal to bf16 of the parameters passed to
   them: refreshed after every change of the parameters (optimizer step, nb_stack_normalize,
   nb_stack_qk_clip, a load), best by the optimizer's own pass. The stack keeps the pointer;
   NULL unsets it (forward is then NB_ERR_NULL). NB_ERR_CONFIG without desc.gemm.bf16_weights. */
NBDEF nb_result nb_stack_set_bf16_weights(nb_ctx* ctx, nb_stack* s, const unsigned short* w16);
/* A GEMM of the caller's next to a BF16 stack, on the engine of the stack's projections (oneDNN's
   bf16 matmul where they run there, else the portable path: nb_stack_kernels): C = alpha op(A)
   op(B) + beta C with A and B given as bf16 bits (nb_bf16_round; the weights' copy of
   nb_stack_set_bf16_weights), products accumulated in float32, as nb_gemm_bf16, which takes
   float operands and runs the portable path. For a trainer's LM head. On the portable path the
   results are bitwise nb_gemm_bf16's on the same values; oneDNN sums in its own order (and
   takes beta other than 0 or 1 to the portable path). NB_ERR_CONFIG for a stack that is not
   BF16 (NB_ERR_NULL without s); otherwise as nb_gemm. Trusted: as nb_gemm. */
NBDEF nb_result nb_stack_gemm_bf16(nb_ctx* ctx, const nb_stack* s, int transa, int transb, int M,
                                   int N, int K, nb_real alpha, const unsigned short* A, int lda,
                                   const unsigned short* B, int ldb, nb_real beta, nb_real* C,
                                   int ldc);
/* The value embeddings' rows of the next calls, for a stack with desc.residual.value_embeds = N:
   ve holds N tables of B*T x H_kv*d_k values, table t at ve + t*B*T*H_kv*d_k, row r = b*T + i
   the caller's table t at the token of position (b, i) (the B, T of the call); the backward
   writes the gradients of those rows to grad in the same layout (overwritten: the two layers
   that share a table are summed there, the caller scatter-adds them into its tables). The
   stack keeps both pointers; forward and backward refuse (NB_ERR_NULL) while ve is NULL, the
   backward while grad is. NB_ERR_CONFIG without desc.residual.value_embeds. Trusted: both hold
   N*B*T*H_kv*d_k values of the calls that use them. */
NBDEF nb_result nb_stack_set_value_embeds(nb_ctx* ctx, nb_stack* s, const nb_real* ve,
                                          nb_real* grad);

/* Name maps: where a tensor of the table lives in another codebase's checkpoint, so a loader
   (or exporter) can move weights between layouts. A library tensor is made of 1 to 3 parts,
   each a whole tensor of that codebase filling rows [row0, row0 + rows) of it; `transposed`:
   stored (in, out), as GPT-2's Conv1D (the library's rows are its columns).
     NB_NAMES_NORMBLOCKS  the table's own names (OLMo's: att_proj, attn_out, ff_proj, ff_out,
                          attn_norm, ff_norm, ...; the HybridNorm and SiameseNorm codes use them)
     NB_NAMES_HF_LLAMA    Hugging Face Llama, the Mix-LN and LayerNorm-Scaling codes' model:
                          "model.layers.<l>." self_attn.{q,k,v,o}_proj, mlp.{up,gate,down}_proj,
                          self_attn.{q,k}_norm (Qwen3 / OLMo-2), "model.norm", and the norms as
                          that code names them by placement: input_layernorm (attention input),
                          post_attention_layernorm (attention output or post norm; else the FFN
                          input norm, as in HF Llama's Pre-Norm), pre_feedforward_layernorm (the
                          FFN input norm after one of those), post_feedforward_layernorm (FFN
                          output or post norm)
     NB_NAMES_HF_GPT2     Hugging Face GPT-2: "transformer.h.<l>." attn.c_attn (Q|K|V),
                          attn.c_proj, mlp.c_fc, mlp.c_proj (Conv1D, transposed, with biases:
                          the attention's with desc.attn.bias, which the name "gpt2" sets),
                          ln_1, ln_2, "transformer.ln_f"
     NB_NAMES_GPT2_LINEAR the same names in the nn.Linear layout (out, in) that nanoGPT's and
                          llm.c's PyTorch GPT-2 keep (c_attn (3d, d)): nothing transposed
     NB_NAMES_NGPT        NVIDIA/ngpt's model.py: "transformer.h.<l>." query, key, value,
                          att_c_proj, c_fc (SwiGLU's u | v rows, as ff_proj), mlp_c_proj (all
                          nn.Linear), attn_alpha, mlp_alpha, sqk, suv (its parameters, stored as
                          its code stores them); its wte, lm_head and sz are outside the stack
   Telling the two GPT-2 layouts apart: the names are the same; c_attn.weight is (d, 3d) in
   HF's Conv1D layout and (3d, d) in the Linear one (c_fc likewise, (d, f) against (f, d)). The
   square attn.c_proj.weight (d, d) cannot be told by its shape: a loader decides the layout
   from c_attn (which comes first in every layer of the table) and applies it to the square
   ones; examples/nbimport refuses a c_attn in the other layout, naming the style to use.
   A pure name map: it says where a tensor goes, not whether that codebase's model code computes
   the stack. Names are given for stacks that code does not compute whenever the tensor has a
   name there: Post-LN and sandwich layers in Llama's names (as the Mix-LN code writes them; HF
   Llama's code would load such a file and run Pre-LN), LayerNorm Scaling, a GQA stack in GPT-2's
   names. Reading those codebases' checkpoints needs these names, so the map does not refuse;
   an exporter must check the stack against the target's code itself (examples/nbimport.c's
   export_refusal does, naming the field, and its --help lists what each layout holds).
   Returns the number of parts (written to parts[0..2]), 0 when the style has no name for the
   tensor (a norm the codebase does not have; att_proj of a gated attention, whose gate rows
   none of these layouts has), -1 for a NULL s or parts or t out of range. */
typedef enum nb_name_style {
    NB_NAMES_NORMBLOCKS = 0, NB_NAMES_HF_LLAMA, NB_NAMES_HF_GPT2, NB_NAMES_GPT2_LINEAR,
    NB_NAMES_NGPT
} nb_name_style;
typedef struct nb_tensor_part {
    char name[96];
    int row0, rows;
    int transposed;
} nb_tensor_part;
NBDEF int nb_stack_tensor_parts(const nb_stack* s, int t, nb_name_style style,
                                nb_tensor_part parts[3]);
/* Fill desc->preset from a name, in any case: "pre", "post", "hybrid", "hybrid_star",
   "mixln", "siamese", ..., the paper's names ("Pre-Norm", "HybridNorm*", "QKV-Post",
   "Pre-QK-Pre", "KC-Post", "Pre-Post", ...) and "gpt2" / "GPT-2" (Pre-Norm, LayerNorm, GELU,
   attention biases). Written: preset and name (the caller's spelling, for messages; truncated
   to 31 characters), and attn.sites for the HybridNorm ablation names; norm.type, ffn.type and
   attn.bias for gpt2, hyper.kind for mhc, hc and ihc (overwriting what the caller set there).
   Every other field keeps the caller's value, so set shapes and options before or after the
   call alike. An
   unknown name is NB_ERR_CONFIG with every accepted name listed in ctx->err; desc is then
   untouched. */
NBDEF nb_result nb_preset_from_name(nb_ctx* ctx, nb_stack_desc* desc, const char* name);

/* in: B*T x d (the embedding). out: B*T x d. The cache (n_cache) holds everything backward
   needs; scratch (n_scratch) is free again after each call. The scratch is sized for the
   thread count at init: more threads at a call is an error. */
NBDEF nb_result nb_stack_forward(nb_ctx* ctx, const nb_stack* s, const nb_real* params,
                                 nb_real* out, const nb_real* in, int B, int T, nb_real* cache,
                                 nb_real* scratch);
/* din (B*T x d) is overwritten, and may be dout; grads (n_params) are accumulated: the
   defaults. desc.run.param_grads = NB_GRAD_OVERWRITE: grads are overwritten (no zeroing needed;
   in the caller's layout only the stack's tensors are written); desc.run.input_grad =
   NB_GRAD_ACCUMULATE: din += the input gradient (din may not be dout: NB_ERR_VALUE). The
   cache must hold a successful nb_stack_forward of this stack (the same init) with the same B
   and T, else NB_ERR_CONFIG before anything is written. Trusted: params are the forward's (in
   BF16 the backward multiplies by the bf16 copies of the weights the forward cached). */
NBDEF nb_result nb_stack_backward(nb_ctx* ctx, const nb_stack* s, const nb_real* params,
                                  nb_real* grads, nb_real* din, const nb_real* dout, int B,
                                  int T, const nb_real* cache, nb_real* scratch);

/* One layer: in/out hold `streams` consecutive B*T x d tensors (x, then y for SiameseNorm;
   x_0 .. x_{n-1} with hyper-connections).
   Uses layer l's region of the stack's cache. dout/din likewise; backward takes the same `in`
   the forward had, and refuses a region not written by a forward of an equal layer with the
   same B and T. With desc.residual.value_residual a layer l >= 1 reads the V_0 that layer 0's
   forward left in the stack-level cache, and layer 0's backward adds the dV_0 shares that the
   backwards of layers L-1 .. 1 summed in the scratch (layer L-1's backward starts the sum):
   run layer 0's forward before the others' on one cache, and the backwards from L-1 down to 0
   on one scratch. With desc.residual.value_embeds likewise: layer L-1's backward zeroes the
   bound gradient rows (nb_stack_set_value_embeds), every layer's adds its share. */
NBDEF nb_result nb_layer_forward(nb_ctx* ctx, const nb_stack* s, int l, const nb_real* params,
                                 nb_real* out, const nb_real* in, int B, int T, nb_real* cache,
                                 nb_real* scratch);
NBDEF nb_result nb_layer_backward(nb_ctx* ctx, const nb_stack* s, int l, const nb_real* params,
                                  nb_real* grads, nb_real* din, const nb_real* dout,
                                  const nb_real* in, int B, int T, const nb_real* cache,
                                  nb_real* scratch);

/* ---- initialization: the schemes of the papers' code ------------------------------------- */
typedef enum nb_init_scheme {
    NB_INIT_DEFAULT = 0,       /* NORMAL */
    NB_INIT_NORMAL,            /* all matrices N(0, s0^2), s0 = 1/sqrt(2.5 d), truncated at 3 s0 */
    NB_INIT_DEPTH_SCALED,      /* NORMAL, W_o and W_2 of layer l (1-based) s0/sqrt(2l) */
    NB_INIT_MEGATRON,          /* NORMAL, W_o and W_2 s0/sqrt(2L) */
    NB_INIT_MITCHELL,          /* 1/sqrt(d); W_o 1/sqrt(2 d (l+1)); W_2 1/sqrt(2 f (l+1)); 3 sigma */
    NB_INIT_MIXLN,             /* N(0, 0.02^2), not truncated */
    NB_INIT_MIXLN_SCALED,      /* MIXLN, W_o and W_2 0.02/sqrt(2L) (Pre-LN layers only for Mix-LN) */
    NB_INIT_GPT2,              /* N(0, 0.02^2), W_o and W_2 0.02/sqrt(2L) */
    NB_INIT_DEEPNORM,          /* xavier normal; gain beta = (8L)^(-1/4) on V, W_o, FFN (MIXLN
                                  compat preset: (8L)^(+1/4)); gain 1 on Q, K */
    NB_INIT_NGPT,              /* nGPT's code: N(0, s0^2), s0 = 1/sqrt(d), W_o and W_2
                                  s0/sqrt(2L), not truncated; then every matrix normalized
                                  along d (nb_stack_normalize); its scales stored at 1/sqrt(d)
                                  (attn_alpha, mlp_alpha, sqk) and 1 (suv) */
    NB_INIT_TORCHTITAN         /* torchtitan's Llama (depth_init, its default): N(0, s0^2),
                                  s0 = 0.02 (its trunc_normal_'s bounds +-2 never reached); W_o,
                                  W_2 and SwiGLU's value half (ff_proj's "up" rows, its w3) of
                                  layer l (0-based) s0/sqrt(2(l+1)); embedding N(0, 1), head
                                  1/sqrt(d) (nb_init_io_std) */
} nb_init_scheme;

/* The initialization of the code a preset was published with, and its base std in *std0 (0:
   the scheme's default; std0 may be NULL): NORMAL for pre, none, dyt, periln, rezero,
   layerscale and custom schedules (no code, or a plain init); MIXLN for post, sandwich, mixln
   and lns (the Mix-LN code, on which LayerNorm Scaling's is built); MEGATRON for post_flags and
   the HybridNorm family (its yaml's full_megatron); NORMAL with std 0.02 for olmo2 (its yamls);
   DEEPNORM for both DeepNorms; MITCHELL for SiameseNorm; GPT2 for the "gpt2" configuration
   (pre, LayerNorm, GELU-tanh). desc NULL or an unknown preset: NORMAL. */
NBDEF nb_init_scheme nb_preset_init(const nb_stack_desc* desc, double* std0);
/* Fill params (n_params) from a seed: matrices per scheme, gains 1, biases 0. std0 = 0 uses
   the scheme's default base standard deviation. Deterministic for a seed, any thread count. */
NBDEF nb_result nb_stack_init_params(nb_ctx* ctx, const nb_stack* s, nb_real* params,
                                     nb_init_scheme scheme, double std0, unsigned long long seed);
/* nGPT's normalize_matrices (its train.py) on the stack's parameters: the vectors along d of
   every matrix made unit: the rows of att_proj ([Q|K|V]) and ff_proj, the columns of attn_out
   and ff_out (each column's d outputs). Nothing else is touched: the embedding's and LM head's
   rows are the caller's (nGPT normalizes wte and lm_head rows too). Call it after every
   optimizer step; nb_stack_init_params with NB_INIT_NGPT ends with it. Works in the caller's
   layout (nb_stack_set_layout). A zero or non-finite vector: NB_ERR_VALUE naming the tensor,
   params unchanged (every norm is checked before any is written). Deterministic for any
   thread count. */
NBDEF nb_result nb_stack_normalize(nb_ctx* ctx, const nb_stack* s, nb_real* params);
/* QK-Clip (Kimi K2's MuonClip, arXiv 2507.20534), after an optimizer step: every head h of
   layer l whose largest logit S = max_logit[l*H + h] exceeds tau gets its logits scaled by
   gamma_h = tau / S (1 for the others) through the weights of its Q and K rows (and their
   biases): with one Q head per K head (MHA), sqrt(gamma) on each, as the paper. GQA: the K head
   j shared by the group's Q heads is scaled by sqrt(m), m the group's smallest gamma, and each
   Q head h by gamma_h / sqrt(m), so every head's logits are scaled by exactly its own gamma, as
   with MHA (a head under tau keeps its logits; its Q rows grow by what K lost). max_logit:
   L*H values, the maximum over the step's batch (and over ranks and micro-batches: the
   caller's MPI_MAX) of nb_stack_head_stats. clipped (may be NULL): the number of heads
   scaled. Refused (NB_ERR_CONFIG, nothing written) for a layer whose logits do not follow
   W_q, W_k (a Q or K norm site; qk_scale), NB_ERR_VALUE for tau not finite and > 0 or a
   max_logit not finite (an overflowed forward: gamma 0 would zero the heads). Optimizer moments are left as they are (as the paper). */
NBDEF nb_result nb_stack_qk_clip(nb_ctx* ctx, const nb_stack* s, nb_real* params,
                                 const double* max_logit, double tau, int* clipped);
/* The scheme's std for the embedding and an untied LM head, so a model around the stack can
   initialize them consistently (embedding_std, head_std may be NULL). NB_ERR_NULL without s,
   NB_ERR_VALUE for an unknown scheme or std0 negative or not finite (outputs untouched). */
NBDEF nb_result nb_init_io_std(const nb_stack* s, nb_init_scheme scheme, double std0,
                               double* embedding_std, double* head_std);
/* Fill x (n values) with N(0, std^2), truncated at cutoff*std when cutoff > 0. std: finite and
   >= 0; cutoff: <= 0 (none) or >= 0.5 (a narrower cut would take thousands of draws a value).
   NB_ERR_NULL (x NULL, n > 0) or NB_ERR_VALUE, x untouched. Trusted: x holds n values. */
NBDEF nb_result nb_fill_normal(nb_real* x, size_t n, double std, double cutoff,
                               unsigned long long seed);

/* ---- diagnostics: what the papers plot ---------------------------------------------------- */
/* These take no context: a failure is the return code alone, outputs untouched. The cache
   ones need a cache holding a successful nb_stack_forward of s with this B and T. */
/* G_l = sqrt(sum of squared gradients of block l); returns the global norm over all of grads
   (NaN when s or grads is NULL). per_layer (n_layers values) may be NULL. */
NBDEF double nb_stack_grad_norms(const nb_stack* s, const nb_real* grads, double* per_layer);
/* Input of block l for l < L, the final residual state (before the final norm) for l = L:
   a B*T x d tensor inside the cache after a forward (Attention Residuals: the readers' mixes
   h_2l, and h_2L before the final norm). stream 1 = SiameseNorm's Y stream;
   stream i of the n hyper-connected ones (per-stream magnitudes: nb_stack_hidden_norms).
   NULL for a NULL argument, l or stream out of range, or a cache without that forward. */
NBDEF const nb_real* nb_stack_hidden(const nb_stack* s, const nb_real* cache, int l, int stream,
                                     int B, int T);
/* mean over tokens of ||x_l|| for l = 0..L (out: L+1 values) */
NBDEF nb_result nb_stack_hidden_norms(const nb_stack* s, const nb_real* cache, int B, int T,
                                      int stream, double* out);
/* Mean over tokens of arccos(cos(x_l, x_m))/pi (Mix-LN Eq. 8) for 0 <= l, m <= L, as an
   (L+1) x (L+1) symmetric matrix; entry (l, l+n) is the paper's d(l, l+n). */
NBDEF nb_result nb_stack_angular_distance(const nb_stack* s, const nb_real* cache, int B, int T,
                                          int stream, double* out);
/* nb_attn_head_stats of every layer: L*H values each, layer-major (entry l*H + h); a skipped
   layer's are 0. */
NBDEF nb_result nb_stack_head_stats(const nb_stack* s, const nb_real* cache, int B, int T,
                                    double* max_logit, double* first_mass);
/* nb_attn_sink_mass of every layer, laid out as nb_stack_head_stats */
NBDEF nb_result nb_stack_sink_mass(const nb_stack* s, const nb_real* cache, int B, int T,
                                   double* sink_mass);
/* Gated attention (desc.attn.gate): the mean of each head's gate, sigmoid(G), over the B*T
   tokens of the forward in the cache (and, elementwise, over the head's d_k values): L*H
   values, layer-major (entry l*H + h); a skipped layer's are 0. The gated-attention paper's
   sparsity diagnostic (a mean far below 0.5: the gate mostly closes). NB_ERR_CONFIG for a stack
   without gates or a cache without this forward. */
NBDEF nb_result nb_stack_gate_stats(const nb_stack* s, const nb_real* cache, int B, int T,
                                    double* mean);
/* Attention Residuals (desc.residual.attn_res): each reader's weights, averaged over the B*T
   tokens of the forward in the cache, as a (2L+1) x (2L+1) matrix (row-major): row j the
   reader before sublayer j (2l attention, 2l+1 FFN of layer l; 2L the final norm), column
   e + 1 its source p_e (column 0: x_0; p_e is sublayer e's block sum through e, a completed
   block where e ends one). Each row sums to 1 (row 0: x_0 alone); sources a reader does not
   read are 0. NB_ERR_CONFIG for a stack without them or a cache without this forward. */
NBDEF nb_result nb_stack_attn_res_weights(const nb_stack* s, const nb_real* cache, int B, int T,
                                          double* out);
/* Hyper-connections: the Amax gain magnitudes of mHC's Fig. 3 and 7, per sublayer q = 0..2L-1
   (2l attention, 2l+1 FFN of layer l), each averaged over the B*T tokens of the forward in the
   cache (every token has its own maps; a skipped layer is the identity). With H_q = comb_q^T
   the papers' H_res: fwd[q] = mean over tokens of max_i |sum_j P_ij|, P = H_q ... H_0 (the
   signal gain of the composite map from the stack's input), bwd[q] = max_j |sum_i Q_ij|,
   Q = H_{2L-1} ... H_q (the gradient gain back to sublayer q); single[q] (may be NULL) the
   forward gain of H_q alone. 1 everywhere for IHC and, up to rounding, mHC-lite; mHC's rows
   sum to 1, so its fwd is 1 up to the Sinkhorn eps and bwd measures the columns.
   NB_ERR_CONFIG for a stack without hyper-connections or a cache without this forward. */
NBDEF nb_result nb_stack_hyper_gains(const nb_stack* s, const nb_real* cache, int B, int T,
                                     double* fwd, double* bwd, double* single);

#ifdef __cplusplus
}
#endif
#endif /* NORMBLOCKS_H */

/* ============================================================================================ */
#ifdef NORMBLOCKS_IMPLEMENTATION
#ifndef NORMBLOCKS_IMPLEMENTATION_DONE
#define NORMBLOCKS_IMPLEMENTATION_DONE

/* IMPLEMENTATION MAP: the sections below, in order; search for "---- NAME" to jump to one.
     profile                    nb_ctx.profile's timer and parts
     errors and sizes           nb__fail, the NULL checks, overflow-safe size arithmetic
     norm rows                  the row reductions and partial sums every norm kind shares
     norm kinds                 nb__norm_kinds (one row per kind) and each kind's segment
                                kernels; the public norm primitives
     softmax                    masked, scaled rows and their backward
     GEMM                       reference, BLAS and portable bf16 GEMMs
     bf16 dot-product kernels   nb__bdot (AMX tiles, AVX512-BF16, portable) for the attention's
                                products in BF16, the CPU check, the packs of their operands
     the linear GEMMs on nb__bdot   the portable bf16 path on AMX (the "tiles")
     GEMM backends              oneDNN's matmul (NB_USE_DNNL), the timed engine choice, nb_gemm
     RoPE
     attention sublayer         plan, cache header, forward, backward, per-head statistics
     feed-forward sublayer      plan, forward, backward
     parameter layout           a layer's and the stack's tensors, walked to size, name, bind
     cache layout               what each layer and the stack keep from forward to backward;
                                nb__topo_layouts (each topology's norms, tensors, cache)
     presets and names          nb__presets (one row per preset), names, aliases, a preset's
                                layer schedule, the foreign layouts (tensor parts, set_layout),
                                nb_stack_set_bf16_weights, nb_stack_free
     resolution                 nb_stack_init: resolve the description, build the plans, size
                                the buffers, choose the backend
     one stream                 block norms, the fused row pass after a branch, a sublayer's
                                forward and backward
     SiameseNorm                its two-stream sublayers
     hyper-connections          the maps (mHC, HC), their pre/post/mix and backward
     the drivers' checks        what every stack and layer call checks first
     residual topologies        nb__topologies (one row per topology: its layer and output
                                stages) and the drivers: nb_layer_*, nb_stack_forward/backward
     initialization             nb_stack_init_params and the papers' init schemes
     after the optimizer step   nb_stack_normalize (nGPT), nb_stack_qk_clip
     diagnostics                what the papers plot
     elementwise                nb_add, nb_axpby */

/* FLOATING-POINT FLAGS at the top: what was not tested is refused, never miscomputed */
#if defined(__FAST_MATH__) && !defined(__GNUC__)
#error "normblocks: -ffast-math is supported with gcc and clang only (this compiler defines __FAST_MATH__ but not __GNUC__): build this file without it"
#endif
#if defined(_MSC_VER) && defined(_M_FP_FAST)
#error "normblocks: MSVC /fp:fast is not supported (its reassociation and NaN handling are untested): build this file with /fp:precise"
#endif

#include <float.h> /* FLT_MIN, DBL_MIN: the L2 norm's floor */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h> /* qsort; malloc and free unless NB_MALLOC/NB_FREE */
#include <string.h>
#include <time.h> /* clock: the profile's timer without OpenMP */

#if defined(NB_MALLOC) && defined(NB_FREE)
#elif !defined(NB_MALLOC) && !defined(NB_FREE)
#define NB_MALLOC(size, user) ((void)(user), malloc(size))
#define NB_FREE(ptr, user) ((void)(user), free(ptr))
#else
#error "normblocks: define both NB_MALLOC and NB_FREE, or neither"
#endif

#ifndef NB_ASSERT
#include <assert.h>
#define NB_ASSERT(x) assert(x)
#endif

#ifdef _OPENMP
#include <omp.h>
#define NB__PRAGMA(x) _Pragma(#x)
#define NB__OMP(x) NB__PRAGMA(omp x)
#else
#define NB__OMP(x)
static int omp_get_thread_num(void) { return 0; }
static int omp_get_num_threads(void) { return 1; }
#endif

#ifndef NB_NO_BLAS
#include <cblas.h>
#endif

#ifdef __cplusplus
#define NB__RESTRICT __restrict
#else
#define NB__RESTRICT restrict
#endif

#ifdef NB_DOUBLE
#define NB__SIMD_EXP(x) /* loops over libm's exp: nothing to vectorize (clang would warn) */
#define NB__EXP exp
#define NB__LOG log
#define NB__SQRT sqrt
#define NB__REAL_MIN DBL_MIN
#define NB__FABS fabs
#else
#define NB__SIMD_EXP(x) NB__OMP(x)
#define NB__EXP nb__expf
#define NB__LOG logf
#define NB__SQRT sqrtf
#define NB__REAL_MIN FLT_MIN
#define NB__FABS fabsf
/* exp for float that vectorizes inside `omp simd` loops (libm's expf is a call per element):
   exp(x) = 2^n exp(r), n = round(x log2 e), r = x - n ln2, Cephes' degree-6 polynomial; within
   2 ulp of exp over the normal range (results below 2^-126 flush to 0). Overflow gives +inf,
   NaN gives NaN. Written to compute the same under -ffast-math / -Ofast as under -O2, so every
   step is one that fast-math cannot change: n is rounded by an int conversion (the classic
   "+ 1.5*2^23 - 1.5*2^23" shift folds to nothing under -fassociative-math); r is reduced in
   double (a two-constant float reduction is reassociated into one rounded product, 60 ulp off
   at |x| = 70); the clamp and the NaN test work on the bits (-ffinite-math-only folds isnan and
   x != x to false), so only finite values reach the int conversion. Every select is integer or
   arithmetic, never a branch around float operations (gcc would not vectorize one). */
/* All ones when the float with bits u is a NaN, else 0: for selects that stay vectorized */
static inline unsigned nb__nan_mask(unsigned u) {
    return 0u - (unsigned)((u & 0x7fffffffu) > 0x7f800000u);
}
static inline float nb__expf(float x) {
    float xc, r, p, t;
    int n, e;
    unsigned u, a, nan;
    memcpy(&u, &x, sizeof u);
    a = u & 0x7fffffffu;
    a = a < 0x42c80000u ? a : 0x42c80000u; /* |x| <= 100 (NaN, inf too): beyond, the exponent */
    a |= u & 0x80000000u;                  /* clamps decide alone; keeps r small, p finite */
    memcpy(&xc, &a, sizeof xc);
    t = xc * 1.44269504088896341f;
    n = (int)(t + 256.5f) - 256; /* round(t): t + 256.5 > 0, so the conversion is a floor */
    r = (float)((double)xc - (double)n * 0.69314718055994531); /* no float ln2 split to undo */
    p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    n = n > -127 ? n : -127; /* 2^-127 has the bits of 0.0f */
    n = n < 128 ? n : 128;   /* 2^128 has the bits of +inf */
    e = (n + 127) << 23;
    memcpy(&t, &e, sizeof t);
    t = p * t;
    /* NaN in, NaN out, as a bit select: a branch would stop the loop vectorizing */
    memcpy(&a, &t, sizeof a);
    nan = nb__nan_mask(u);
    a = (u & nan) | (a & ~nan);
    memcpy(&t, &a, sizeof t);
    return t;
}
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---- profile (nb_ctx.profile) --------------------------------------------------------------- */

/* wall seconds (CPU seconds in a build without OpenMP) */
static double nb__seconds(void) {
#ifdef _OPENMP
    return omp_get_wtime();
#else
    return (double)clock() / CLOCKS_PER_SEC;
#endif
}
static int nb__in_parallel(void) {
#ifdef _OPENMP
    return omp_in_parallel();
#else
    return 0;
#endif
}
NBDEF const char* nb_prof_part_name(int part) {
    static const char* const names[NB_PROF_PARTS] = {
        "GEMMs", "attention core", "norms", "bf16 conversions", "other stack work"};
    return part >= 0 && part < NB_PROF_PARTS ? names[part] : "unknown part";
}
/* A part's timing: begin returns its start, or -1 when not timed (no profile, inside a
   parallel region, or inside another timed part); end adds it. Always paired. */
static double nb__prof_begin(nb_ctx* ctx) {
    nb_profile* p = ctx ? ctx->profile : NULL;
    if (!p || nb__in_parallel() || p->depth++) return -1;
    return nb__seconds();
}
static void nb__prof_end(nb_ctx* ctx, int part, double t0) {
    nb_profile* p = ctx ? ctx->profile : NULL;
    if (!p || nb__in_parallel()) return;
    p->depth--;
    if (t0 < 0) return;
    p->seconds[part] += nb__seconds() - t0;
    p->calls[part]++;
}
/* A stack call's envelope: the time it took that no part took is OTHER. */
static double nb__prof_parts(const nb_profile* p) {
    double t = 0;
    int k;
    for (k = 0; k < NB_PROF_PARTS; k++) t += p->seconds[k];
    return t;
}
typedef struct nb__prof_env { double t0, parts0, hooks0; } nb__prof_env;
static nb__prof_env nb__prof_enter(nb_ctx* ctx) {
    nb__prof_env e = {-1, 0, 0};
    if (ctx && ctx->profile && !nb__in_parallel() && !ctx->profile->depth) {
        e.t0 = nb__seconds();
        e.parts0 = nb__prof_parts(ctx->profile);
        e.hooks0 = ctx->profile->hooks;
    }
    return e;
}
static void nb__prof_leave(nb_ctx* ctx, nb__prof_env e) {
    if (e.t0 < 0) return;
    ctx->profile->seconds[NB_PROF_OTHER] += (nb__seconds() - e.t0) -
                                            (nb__prof_parts(ctx->profile) - e.parts0) -
                                            (ctx->profile->hooks - e.hooks0);
    ctx->profile->calls[NB_PROF_OTHER]++;
}

/* ---- errors and sizes ----------------------------------------------------------------------- */

NBDEF const char* nb_result_string(nb_result r) {
    switch (r) {
    case NB_OK: return "ok";
    case NB_ERR_NULL: return "required pointer is NULL";
    case NB_ERR_SHAPE: return "invalid shape or stride";
    case NB_ERR_VALUE: return "argument out of range";
    case NB_ERR_CONFIG: return "invalid configuration";
    case NB_ERR_NONFINITE: return "non-finite value detected";
    case NB_ERR_NOMEM: return "out of memory";
    }
    return "unknown result code";
}

#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
static nb_result nb__fail(nb_ctx* ctx, nb_result code, const char* fmt, ...) {
    if (ctx) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(ctx->err, sizeof ctx->err, fmt, ap);
        va_end(ap);
        if (ctx->log) ctx->log(ctx->log_user, code, ctx->err);
    }
    return code;
}

/* Shorthand for argument checks: return the failure when `cond` is true. */
#define NB__CHECK(cond, code, ...) \
    do { if (cond) return nb__fail(ctx, code, __VA_ARGS__); } while (0)

/* NB_ERR_NULL naming the first NULL of n pointers; names: their names, space-separated. */
static nb_result nb__need(nb_ctx* ctx, const char* fn, const char* names, int n,
                          const void* const* ptrs) {
    int k;
    for (k = 0; k < n; k++, names = strchr(names, ' ') + 1) {
        const char* end = strchr(names, ' ');
        NB__CHECK(!ptrs[k], NB_ERR_NULL, "%s: %.*s is required (NULL)", fn,
                  (int)(end ? (size_t)(end - names) : strlen(names)), names);
        if (!end) break;
    }
    return NB_OK;
}

NBDEF int nb_num_threads(const nb_ctx* ctx) {
    int n = 1;
    if (ctx && ctx->num_threads > 0) n = ctx->num_threads;
#ifdef _OPENMP
    else n = omp_get_max_threads();
#endif
    return n < 1 ? 1 : n > NB_MAX_THREADS ? NB_MAX_THREADS : n;
}

/* Checked size arithmetic: a result that does not fit saturates to SIZE_MAX and stays there
   through later products and sums (a saturated factor times 0 is truly 0), so a size is
   computed as plainly as before and checked once at the end (nb__too_big). */
static size_t nb__mulz(size_t a, size_t b) {
    return b != 0 && a > (size_t)-1 / b ? (size_t)-1 : a * b;
}
static size_t nb__addz(size_t a, size_t b) { return a > (size_t)-1 - b ? (size_t)-1 : a + b; }
/* A count of values whose bytes would not fit size_t (SIZE_MAX included: saturated). */
static int nb__too_big(size_t n) { return n >= (size_t)-1 / sizeof(nb_real); }
/* Finite (not NaN, not +-inf), told by the exponent bits: -ffinite-math-only (in -Ofast and
   -ffast-math) lets the compiler fold isfinite, isnan and x != x to constants, and every
   hyperparameter check and the optional non-finite check must still see a NaN. */
static int nb__fin(double x) {
    unsigned long long u;
    memcpy(&u, &x, sizeof u);
    return (u & 0x7ff0000000000000ULL) != 0x7ff0000000000000ULL;
}
static int nb__isnan(double x) {
    unsigned long long u;
    memcpy(&u, &x, sizeof u);
    return (u & 0x7fffffffffffffffULL) > 0x7ff0000000000000ULL;
}
/* +0 or -0, by the bits: "zero means default" must not take a NaN for a zero (under
   -ffinite-math-only gcc compiles x == 0 without the unordered test, true for NaN) */
static int nb__is0(double x) {
    unsigned long long u;
    memcpy(&u, &x, sizeof u);
    return (u << 1) == 0;
}
#ifdef NB_DOUBLE
#define nb__fin_real nb__fin
#else
static int nb__fin_real(float x) {
    unsigned u;
    memcpy(&u, &x, sizeof u);
    return (u & 0x7f800000u) != 0x7f800000u;
}
#endif
/* a * b as long long (ints: cannot overflow) */
static long long nb__mulll(int a, int b) { return (long long)a * b; }
#define NB__INT_MAX 2147483647LL

/* Below this many values a kernel runs on the calling thread: waking a team costs more. */
#define NB__PAR_MIN 16384

/* Static partition of n items over nt parts: part t gets [*lo, *hi). */
static void nb__split(int n, int nt, int t, int* lo, int* hi) {
    int base = n / nt, rem = n % nt;
    *lo = t * base + (t < rem ? t : rem);
    *hi = *lo + base + (t < rem ? 1 : 0);
}

/* nb__split in whole units of `unit` items (the last unit may be short) */
static void nb__split_in(int n, int nt, int t, int unit, int* lo, int* hi) {
    nb__split((n + unit - 1) / unit, nt, t, lo, hi);
    *lo = *lo * unit < n ? *lo * unit : n;
    *hi = *hi * unit < n ? *hi * unit : n;
}

/* x[0, n) = 0 on ctx's team in 4096-value chunks (a memset runs on one thread: at 16 threads
   the backward's zeroing of a layer's gradients was a serial pass of ~13 MB). */
static void nb__zero(nb_ctx* ctx, nb_real* x, size_t n) {
    const int chunks = (int)((n + 4095) / 4096);
    if (n < (size_t)NB__PAR_MIN * 8 || nb_num_threads(ctx) < 2) {
        memset(x, 0, n * sizeof *x);
        return;
    }
    NB__OMP(parallel num_threads(nb_num_threads(ctx)))
    {
        int lo, hi;
        nb__split(chunks, omp_get_num_threads(), omp_get_thread_num(), &lo, &hi);
        if (hi > lo) {
            const size_t a = (size_t)lo * 4096, b = (size_t)hi * 4096 < n ? (size_t)hi * 4096 : n;
            memset(x + a, 0, (b - a) * sizeof *x);
        }
    }
}

/* dst[r][0, w) = src[r][0, w) for rows r < rows of stride ld, on ctx's team */
static void nb__copy_cols(nb_ctx* ctx, nb_real* dst, const nb_real* src, int rows, int w,
                          int ld) {
    int r;
    (void)ctx; /* without OpenMP */
    NB__OMP(parallel for schedule(static) num_threads(nb_num_threads(ctx))
            if((long long)rows * w >= NB__PAR_MIN))
    for (r = 0; r < rows; r++)
        memcpy(dst + (size_t)r * ld, src + (size_t)r * ld, (size_t)w * sizeof(nb_real));
}

/* In a parallel region: this thread's share [*lo, *hi) of `rows` (static, as nb__split); thread
   0 stores the team size in *used, the number of partial-sum blocks to reduce afterwards.
   Returns the thread number. */
static int nb__team_rows(int rows, int* used, int* lo, int* hi) {
    const int t = omp_get_thread_num(), n = omp_get_num_threads();
    if (t == 0) *used = n;
    nb__split(rows, n, t, lo, hi);
    return t;
}

/* ---- norm rows ------------------------------------------------------------------------------ */

/* Partial sums are padded to a cache line so threads never share one. Saturates like nb__addz. */
#define NB__PAD(n) nb__pad((size_t)(n))
static size_t nb__pad(size_t n) { return n > (size_t)-1 - 15 ? (size_t)-1 : (n + 15) & ~(size_t)15; }

/* A thread's partial sums: dgain's at 0, dbias's at nb__part_boff(seg), DyT's dalpha at
   nb__part_aoff(seg), nb__part_stride(seg) values in all. */
static size_t nb__part_boff(int seg) { return NB__PAD(seg); }
static size_t nb__part_aoff(int seg) { return nb__mulz(2, NB__PAD(seg)); }
static size_t nb__part_stride(int seg) { return nb__addz(nb__part_aoff(seg), 16); }

NBDEF size_t nb_norm_scratch_size(const nb_ctx* ctx, int width, int seg) {
    (void)ctx;
    if (seg == 0) seg = width;
    if (width <= 0 || seg <= 0 || width % seg) return 0;
    return nb__mulz(NB_NORM_MAX_TEAM, nb__part_stride(seg));
}

static nb_result nb__check_rows(nb_ctx* ctx, const char* fn, int rows, int width, int* seg,
                                int lda, int ldb, nb_real eps) {
    NB__CHECK(rows <= 0 || width <= 0, NB_ERR_SHAPE, "%s: rows (%d) and width (%d) must be > 0",
              fn, rows, width);
    if (*seg == 0) *seg = width;
    NB__CHECK(*seg < 0 || width % *seg != 0, NB_ERR_SHAPE,
              "%s: seg (%d) must divide width (%d)", fn, *seg, width);
    NB__CHECK(lda < width || ldb < width, NB_ERR_SHAPE,
              "%s: strides (%d, %d) must be >= width (%d)", fn, lda, ldb, width);
    NB__CHECK(!(eps > 0) || !nb__fin((double)eps), NB_ERR_VALUE,
              "%s: eps (%g) must be finite and > 0", fn, (double)eps);
    return NB_OK;
}

/* Row reductions run in NB__LANES interleaved lanes, one vector register wide (lane k takes the
   elements j = k mod NB__LANES), and end in a fixed pairwise tree (nb__fold). The compiler
   vectorizes the lanes without -ffast-math, as no reassociation is asked of it, and keeps them
   in one register; the order of operations is fixed for a build, so results are deterministic.
   The fixed cost per call is small: an OpenMP `simd reduction` ends in a chain of dependent
   scalar adds per variable, which made the 64-value segments of per-head norms 3x slower per
   value than whole rows. NB__LANES_FOR(n, body) runs body for j = 0..n-1 with k = j's lane. */
#if defined(__AVX512F__)
#define NB__VECTOR_BYTES 64
#elif defined(__AVX__)
#define NB__VECTOR_BYTES 32
#else
#define NB__VECTOR_BYTES 16
#endif
#ifdef NB_DOUBLE
#define NB__LANES (NB__VECTOR_BYTES / 8)
#else
#define NB__LANES (NB__VECTOR_BYTES / 4)
#endif
#define NB__LANES_FOR(n, ...)                                                                \
    do {                                                                                     \
        const int full_ = (n) - (n) % NB__LANES;                                             \
        int i_, k;                                                                           \
        for (i_ = 0; i_ < full_; i_ += NB__LANES) {                                          \
            NB__OMP(simd)                                                                    \
            for (k = 0; k < NB__LANES; k++) { const int j = i_ + k; __VA_ARGS__; }           \
        }                                                                                    \
        for (k = 0; k < (n) - full_; k++) { const int j = full_ + k; __VA_ARGS__; }          \
    } while (0)

/* Fold the lanes a[] into a[0] and a[1] by a pairwise tree with OP, one loop per level so that
   each is a vector operation (a loop over the levels runs scalar, through memory). */
#define NB__FOLD_LEVEL(a, w, OP)                                                             \
    do {                                                                                     \
        int k_;                                                                              \
        for (k_ = 0; k_ < (w); k_++) a[k_] = OP(a[k_], a[k_ + (w)]);                         \
    } while (0)
#if NB__LANES >= 16
#define NB__FOLD16(a, OP) NB__FOLD_LEVEL(a, 8, OP)
#else
#define NB__FOLD16(a, OP) (void)0
#endif
#if NB__LANES >= 8
#define NB__FOLD8(a, OP) NB__FOLD_LEVEL(a, 4, OP)
#else
#define NB__FOLD8(a, OP) (void)0
#endif
#if NB__LANES >= 4
#define NB__FOLD4(a, OP) NB__FOLD_LEVEL(a, 2, OP)
#else
#define NB__FOLD4(a, OP) (void)0
#endif
#define NB__ADD(x, y) ((x) + (y))
#define NB__MAX(x, y) ((y) > (x) ? (y) : (x))

/* a[0] + ... + a[NB__LANES - 1] */
static nb_real nb__fold(nb_real* a) {
    NB__FOLD16(a, NB__ADD);
    NB__FOLD8(a, NB__ADD);
    NB__FOLD4(a, NB__ADD);
    return a[0] + a[1];
}

/* sum (x - mu)^2; the sum of the deviations goes to *dev when dev != NULL */
static nb_real nb__sumsq(const nb_real* x, int n, nb_real mu, nb_real* dev) {
    nb_real s[NB__LANES] = {0}, e[NB__LANES] = {0};
    NB__LANES_FOR(n, const nb_real u = x[j] - mu; s[k] += u * u; e[k] += u);
    if (dev) *dev = nb__fold(e);
    return nb__fold(s);
}

/* sum x */
static nb_real nb__sum(const nb_real* x, int n) {
    nb_real s[NB__LANES] = {0};
    NB__LANES_FOR(n, s[k] += x[j]);
    return nb__fold(s);
}

/* sum x*y */
static nb_real nb__dot(const nb_real* x, const nb_real* y, int n) {
    nb_real s[NB__LANES] = {0};
    NB__LANES_FOR(n, s[k] += x[j] * y[j]);
    return nb__fold(s);
}

/* First pass of the norm backward over a segment, with g = dy * gain (gain NULL: 1): returns
   sum g (x - mu), stores sum g in *sum_g, and adds the segment's dgain terms dy * xhat to the
   thread's partial sums pg (when not NULL) in this pass, which streams the row in from memory,
   rather than in the L1-only dx pass (1.3x faster). */
#define NB__GSUMS(GI, PART)                                                                  \
    NB__LANES_FOR(n, const nb_real g = dy[j] * GI(j); sg[k] += g; t[k] += g * (x[j] - mu); PART(j))
#define NB__GAIN(i) gain[i]
#define NB__ONE(i) 1
#define NB__PART_NONE(i) (void)0
#define NB__PART_G(i) pg[i] += dy[i] * (x[i] - mu) * rs
static nb_real nb__gsums(const nb_real* dy, const nb_real* x, const nb_real* gain, nb_real mu,
                         nb_real rs, int n, nb_real* sum_g, nb_real* NB__RESTRICT pg) {
    nb_real sg[NB__LANES] = {0}, t[NB__LANES] = {0};
    if (gain && pg) NB__GSUMS(NB__GAIN, NB__PART_G);
    else if (gain) NB__GSUMS(NB__GAIN, NB__PART_NONE);
    else if (pg) NB__GSUMS(NB__ONE, NB__PART_G);
    else NB__GSUMS(NB__ONE, NB__PART_NONE);
    *sum_g = nb__fold(sg);
    return nb__fold(t);
}

/* dbias partial sums, sum dy, four segments at a time: a partial sum is read and written once
   per four rows (still in L1), not once per row. Stored in the streaming pass next to the dgain
   sums, its stores stalled that pass's loads (store-to-load aliasing within 4 KiB pages):
   LayerNorm backward 1.2-1.35x slower. */
#define NB__BIAS_ITEMS 4
typedef struct nb__bias_items { int n; const nb_real* dy[NB__BIAS_ITEMS]; } nb__bias_items;

/* y += x over n values */
static void nb__add_row(nb_real* NB__RESTRICT y, const nb_real* x, int n) {
    int i;
    NB__OMP(simd)
    for (i = 0; i < n; i++) y[i] += x[i];
}

static void nb__bias_flush(nb__bias_items* it, int seg, nb_real* NB__RESTRICT pb) {
    int i, k;
    if (it->n == NB__BIAS_ITEMS) {
        const nb_real *d0 = it->dy[0], *d1 = it->dy[1], *d2 = it->dy[2], *d3 = it->dy[3];
        NB__OMP(simd)
        for (i = 0; i < seg; i++) pb[i] += (d0[i] + d1[i]) + (d2[i] + d3[i]);
    } else {
        for (k = 0; k < it->n; k++) nb__add_row(pb, it->dy[k], seg);
    }
    it->n = 0;
}

/* Queue a segment's dy for the dbias sums pb (nothing when pb is NULL). */
static void nb__bias_add(nb__bias_items* it, const nb_real* dy, int seg, nb_real* pb) {
    if (!pb) return;
    it->dy[it->n] = dy;
    if (++it->n == NB__BIAS_ITEMS) nb__bias_flush(it, seg, pb);
}

/* max of x (n >= 1) */
static nb_real nb__max(const nb_real* x, int n) {
    nb_real m[NB__LANES];
    int k;
    for (k = 0; k < NB__LANES; k++) m[k] = x[0];
    NB__LANES_FOR(n, m[k] = NB__MAX(m[k], x[j]));
    NB__FOLD16(m, NB__MAX);
    NB__FOLD8(m, NB__MAX);
    NB__FOLD4(m, NB__MAX);
    return NB__MAX(m[0], m[1]);
}

/* Ask for a row's cache lines ahead of use (GCC/Clang): a row's second pass reads only L1, so
   without it the memory system idles while that pass runs. */
static void nb__prefetch_row(const nb_real* p, int n) {
#if defined(__GNUC__)
    int i;
    for (i = 0; i < n; i += 64 / (int)sizeof(nb_real)) __builtin_prefetch(p + i, 0, 3);
#else
    (void)p; (void)n;
#endif
}

/* ---- norm kinds ----
   What differs between the kinds of norm, in one place: the statistics each normalized segment
   keeps for the backward (rstd; LayerNorm also the mean, stored after the rstd block of the same
   buffer; DyT, Derf none), whether block norms carry a bias (site norms never do), the learnable
   scalars of the norm (DyT's alpha; Derf's alpha and shift, one tensor of 2), and the names for
   messages. Every plan and stack calls through
   nb__kind_forward / nb__kind_backward (whole rows) or nb__seg_fwd / nb__seg_bwd (one segment,
   in the stack's fused row loops). A new kind adds its row kernels and its case in those two. */
typedef struct nb__norm_kind {
    int stats;      /* values per normalized segment */
    int gain;       /* it has gains (unless a site's no_gain) */
    int block_bias; /* block norms (width d) have a bias */
    int alpha;      /* learnable scalars: 1 DyT's alpha, 2 Derf's alpha and shift */
    const char *fwd, *bwd; /* names for messages */
} nb__norm_kind;
static const nb__norm_kind nb__norm_kinds[] = {
    {1, 1, 0, 0, "nb_rmsnorm_forward", "nb_rmsnorm_backward"}, /* NB_NORM_DEFAULT = RMSNorm */
    {1, 1, 0, 0, "nb_rmsnorm_forward", "nb_rmsnorm_backward"},
    {2, 1, 1, 0, "nb_layernorm_forward", "nb_layernorm_backward"},
    {0, 1, 1, 1, "nb_dyt_forward", "nb_dyt_backward"},
    {1, 0, 0, 0, "nb_l2norm_forward", "nb_l2norm_backward"},
    {0, 1, 1, 2, "nb_derf_forward", "nb_derf_backward"}};
typedef char nb__norm_kinds_one_row_each[sizeof nb__norm_kinds / sizeof nb__norm_kinds[0] ==
                                         NB_NORM_DERF + 1 ? 1 : -1];

/* One segment of a norm forward, y = N(x): LayerNorm when mean != NULL (stats to *mean and
   *rstd), else RMSNorm (bias ignored). y may equal x. */
static void nb__norm_seg_fwd(nb_real* ys, const nb_real* xs, int seg,
                             const nb_real* gain, const nb_real* bias, nb_real eps,
                             nb_real* mean, nb_real* rstd) {
    nb_real mu = 0, rs;
    int i;
    if (mean) {
        /* s1 = sum x and s2 = sum x^2 in the pass that streams the row in. n var = s2 - s1^2/n
           cancels at most 2 bits while mean^2 <= 3 var (s1^2 <= 0.75 n s2): take it then (a
           pass fewer; transformer activations have |mean| << std). Otherwise the corrected
           two-pass from L1: sums of the deviations from the mean, whose own sum repairs the
           rounding of the mean (a plain float mean of 100-ish values is off by 1e-5). */
        nb_real s1, s2 = nb__sumsq(xs, seg, 0, &s1), var;
        mu = s1 / (nb_real)seg;
        if (s1 * s1 <= (nb_real)0.75 * (nb_real)seg * s2) {
            var = s2 - s1 * mu;
        } else {
            nb_real dev;
            var = nb__sumsq(xs, seg, mu, &dev);
            mu += dev / (nb_real)seg;
            var -= dev * dev / (nb_real)seg;
        }
        rs = 1 / NB__SQRT((var > 0 ? var : 0) / (nb_real)seg + eps);
        *mean = mu;
    } else {
        rs = 1 / NB__SQRT(nb__sumsq(xs, seg, 0, NULL) / (nb_real)seg + eps);
        bias = NULL;
    }
    *rstd = rs;
    /* one branch-free loop per case, so each vectorizes */
    if (gain && bias) {
        NB__OMP(simd)
        for (i = 0; i < seg; i++) ys[i] = (xs[i] - mu) * rs * gain[i] + bias[i];
    } else if (gain) {
        NB__OMP(simd)
        for (i = 0; i < seg; i++) ys[i] = (xs[i] - mu) * rs * gain[i];
    } else if (bias) {
        NB__OMP(simd)
        for (i = 0; i < seg; i++) ys[i] = (xs[i] - mu) * rs + bias[i];
    } else {
        NB__OMP(simd)
        for (i = 0; i < seg; i++) ys[i] = (xs[i] - mu) * rs;
    }
}

/* tanh(x) = 1 - 2 / (1 + e^2x), through the exp that vectorizes (libm's tanhf is a call per
   element: DyT trained 4x slower with it). Absolute error ~1 ulp of 1, as the GELU's tanh. */
static inline nb_real nb__tanh(nb_real x) { return 1 - 2 / (1 + NB__EXP(2 * x)); }

/* tanh within a few ulp of tanh(x) itself, also near 0, and vectorizing: the softcap's
   c tanh(s/c) is near s for |s| << c, where nb__tanh's error of an ulp of 1 times c would be
   c/|s| times the logit's own rounding. Float: Cephes' tanhf (an odd polynomial below 0.625,
   1 - 2/(e^2|x| + 1) above, where nothing cancels; |x| capped at 10, where tanh rounds to 1,
   so exp never overflows); double: libm's tanh. */
#ifdef NB_DOUBLE
#define nb__tanh_acc tanh
#else
static inline float nb__tanh_acc(float x) {
    const float a = x < 0 ? -x : x, z = x * x;
    const float e = NB__EXP(2 * (a < 10 ? a : 10)), big = 1 - 2 / (e + 1);
    const float small = ((((-5.70498872745e-3f * z + 2.06390887954e-2f) * z - 5.37397155531e-2f) *
                              z + 1.33314422036e-1f) * z - 3.33332819422e-1f) * z * x + x;
    return a < 0.625f ? small : x < 0 ? -big : big;
}
#endif

/* The DyT and Derf loops below take an absent gain, bias or added gradient as 1, 0 and 0 in
   loads, not in conditional arithmetic: gcc (-ftrapping-math, its default) does not compute
   arithmetic that might not run and select, so without AVX-512's masked operations such a loop
   stayed scalar (DyT's norms: 12.9% of a float32 block on an AVX2 AMD EPYC, RMSNorm's 0.5%).
   1 * t, 0 + u and +0 * +0 + u are exact: the same values. In the backward an optional gain
   (it feeds a sum: not if-converted either) and its gradient (a store) split the loop instead. */
#define NB__OR(p, i, v) ((p) ? (p)[i] : (nb_real)(v))

/* DyT of one segment: y = gain * tanh(alpha x) + bias (gain, bias NULL: 1, 0). y may equal x. */
static void nb__dyt_seg_fwd(nb_real* ys, const nb_real* xs, int seg, const nb_real* gain,
                            const nb_real* bias, nb_real alpha) {
    int i;
    NB__SIMD_EXP(simd)
    for (i = 0; i < seg; i++)
        ys[i] = NB__OR(gain, i, 1) * nb__tanh(alpha * xs[i]) + NB__OR(bias, i, 0);
}

/* One segment of the DyT backward. With t = tanh(alpha x) and u = dy * gain * (1 - t^2):
     dx = alpha u (+ add_alpha * adds),  dgain += dy t,  dalpha += sum u x  (returned)
   dbias (sum dy) is nb__bias_add's. dx may be dy or adds. */
static nb_real nb__dyt_seg_bwd(nb_real* dxs, const nb_real* dys, const nb_real* xs, int seg,
                               const nb_real* gain, nb_real alpha, const nb_real* adds,
                               nb_real add_alpha, nb_real* pg) {
    const nb_real aa = adds ? add_alpha : 0;
    nb_real da = 0;
    int i;
#define NB__DYT_BWD(G, PG)                                                      \
    NB__SIMD_EXP(simd reduction(+:da))                                          \
    for (i = 0; i < seg; i++) {                                                 \
        const nb_real t = nb__tanh(alpha * xs[i]), dy = dys[i];                 \
        const nb_real u = dy * (G) * (1 - t * t);                               \
        PG;                                                                     \
        da += u * xs[i];                                                        \
        dxs[i] = aa * NB__OR(adds, i, 0) + alpha * u;                           \
    }
    if (gain && pg) { NB__DYT_BWD(gain[i], pg[i] += dy * t) }
    else if (gain) { NB__DYT_BWD(gain[i], (void)t) }
    else if (pg) { NB__DYT_BWD((nb_real)1, pg[i] += dy * t) }
    else { NB__DYT_BWD((nb_real)1, (void)t) }
#undef NB__DYT_BWD
    return da;
}

/* erf: libm's in a double build (the finite differences see the exact function); for float an
   exp-based form that vectorizes (Abramowitz-Stegun 7.1.26, |error| < 1.5e-7: about an ulp
   of 1, below float32's rounding of what follows) */
#ifdef NB_DOUBLE
#define NB__ERF erf
#else
static inline float nb__erff(float x) {
    const float a = x < 0 ? -x : x, t = 1 / (1 + 0.3275911f * a);
    const float p = t * (0.254829592f + t * (-0.284496736f + t * (1.421413741f +
                   t * (-1.453152027f + t * 1.061405429f))));
    const float e = 1 - p * NB__EXP(-a * a);
    return x < 0 ? -e : e;
}
#define NB__ERF nb__erff
#endif

/* Derf of one segment: y = gain * erf(alpha x + shift) + bias (gain, bias NULL: 1, 0). */
static void nb__derf_seg_fwd(nb_real* ys, const nb_real* xs, int seg, const nb_real* gain,
                             const nb_real* bias, const nb_real* as) {
    const nb_real alpha = as[0], shift = as[1];
    int i;
    NB__SIMD_EXP(simd)
    for (i = 0; i < seg; i++)
        ys[i] = NB__OR(gain, i, 1) * NB__ERF(alpha * xs[i] + shift) + NB__OR(bias, i, 0);
}

/* One segment of the Derf backward. With z = alpha x + shift and u = dy gain erf'(z),
   erf'(z) = 2/sqrt(pi) exp(-z^2): dx = alpha u (+ add_alpha * adds), dgain += dy erf(z),
   dalpha += sum u x, dshift += sum u (das[0], das[1]). dx may be dy or adds. */
static void nb__derf_seg_bwd(nb_real* dxs, const nb_real* dys, const nb_real* xs, int seg,
                             const nb_real* gain, const nb_real* as, const nb_real* adds,
                             nb_real add_alpha, nb_real* pg, nb_real* das) {
    const nb_real alpha = as[0], shift = as[1], c = (nb_real)1.1283791670955126;
    const nb_real aa = adds ? add_alpha : 0;
    nb_real da = 0, ds = 0;
    int i;
#define NB__DERF_BWD(G, PG)                                                     \
    NB__SIMD_EXP(simd reduction(+:da, ds))                                      \
    for (i = 0; i < seg; i++) {                                                 \
        const nb_real z = alpha * xs[i] + shift, dy = dys[i];                   \
        const nb_real u = dy * (G) * c * NB__EXP(-z * z);                       \
        PG;                                                                     \
        da += u * xs[i];                                                        \
        ds += u;                                                                \
        dxs[i] = aa * NB__OR(adds, i, 0) + alpha * u;                           \
    }
    if (gain && pg) { NB__DERF_BWD(gain[i], pg[i] += dy * NB__ERF(z)) }
    else if (gain) { NB__DERF_BWD(gain[i], (void)z) }
    else if (pg) { NB__DERF_BWD((nb_real)1, pg[i] += dy * NB__ERF(z)) }
    else { NB__DERF_BWD((nb_real)1, (void)z) }
#undef NB__DERF_BWD
    if (das) { das[0] += da; das[1] += ds; }
}

/* L2 of one segment (nGPT's justnorm): y = x / ||x||, *rstd = 1 / ||x||. y may equal x.
   nGPT's code has no eps, and a zero segment gives it NaN; here the squared norm gets the
   smallest normal number added, which leaves every squared norm from 2^-101 up (float; 2^-968
   double) bitwise unchanged, maps a zero segment to zero with a finite rstd, and still passes
   NaN and inf through (a floor by max() would hide a NaN under -ffinite-math-only). */
static void nb__l2_seg_fwd(nb_real* ys, const nb_real* xs, int seg, nb_real* rstd) {
    const nb_real rs = 1 / NB__SQRT(nb__sumsq(xs, seg, 0, NULL) + NB__REAL_MIN);
    int i;
    *rstd = rs;
    NB__OMP(simd)
    for (i = 0; i < seg; i++) ys[i] = xs[i] * rs;
}

/* One segment of the L2 backward, y = x r with r = 1 / ||x||: dx = r (dy - y (y . dy))
   (+ add_alpha * adds); dx may be dy or adds. */
static void nb__l2_seg_bwd(nb_real* dxs, const nb_real* dys, const nb_real* xs, int seg,
                           nb_real rs, const nb_real* adds, nb_real add_alpha) {
    const nb_real c = nb__dot(dys, xs, seg) * rs * rs;
    int i;
    if (adds) {
        NB__OMP(simd)
        for (i = 0; i < seg; i++) dxs[i] = add_alpha * adds[i] + rs * (dys[i] - xs[i] * c);
    } else {
        NB__OMP(simd)
        for (i = 0; i < seg; i++) dxs[i] = rs * (dys[i] - xs[i] * c);
    }
}

/* One norm call, what its forward and backward share: the kind, the rows of x (ld ldx) of
   `width` values in segments of `seg` (0: the row; the checks resolve it), the parameters
   (gain, bias, the kind's learnable scalars: DyT's alpha, Derf's alpha and shift; each may be
   NULL) and eps. */
typedef struct nb__norm_call {
    nb_norm_type kind;
    const nb_real* x;
    int ldx, rows, width, seg;
    const nb_real *gain, *bias, *alpha;
    nb_real eps;
} nb__norm_call;
static nb__norm_call nb__ncall(nb_norm_type kind, const nb_real* x, int ldx, int rows, int width,
                               int seg) {
    nb__norm_call c;
    memset(&c, 0, sizeof c);
    c.kind = kind; c.x = x; c.ldx = ldx; c.rows = rows; c.width = width; c.seg = seg;
    return c;
}
/* What a norm backward writes: dx = add_alpha add + J^T dy (ld lddx; add may be NULL, or dx
   itself to accumulate), and the parameters' gradients added to dgain, dbias, dalpha (each
   may be NULL) through per-thread partial sums in scratch, which holds `teams` threads'.
   dx16 (BF16 stacks; NULL: none): dx's bf16 copy, rows `width` wide, written while each row
   is in cache, for the GEMMs that read dx next (nb__one_layer_bwd). */
typedef struct nb__norm_grad {
    nb_real* dx;
    int lddx;
    const nb_real* dy;
    int lddy;
    nb_real *dgain, *dbias, *dalpha;
    const nb_real* add;
    nb_real add_alpha;
    nb_real* scratch;
    int teams;
    unsigned short* dx16;
} nb__norm_grad;
static void nb__row_bf16(unsigned short* dst, const nb_real* x, int n);
static nb__norm_grad nb__ngrad(nb_real* dx, int lddx, const nb_real* dy, int lddy,
                               nb_real* scratch, int teams) {
    nb__norm_grad g;
    memset(&g, 0, sizeof g);
    g.dx = dx; g.lddx = lddx; g.dy = dy; g.lddy = lddy; g.add_alpha = 1;
    g.scratch = scratch; g.teams = teams;
    return g;
}

/* Every norm forward, y (ld ldy) = N(x); the statistics: rstd (none for DyT and Derf), and for
   LayerNorm the means. */
static void nb__norm_forward(nb_ctx* ctx, const nb__norm_call* c, nb_real* y, int ldy,
                             nb_real* mean, nb_real* rstd) {
    const nb_norm_type kind = c->kind;
    const nb_real *x = c->x, *gain = c->gain, *bias = c->bias, *alpha = c->alpha;
    const int ldx = c->ldx, rows = c->rows, width = c->width, seg = c->seg;
    const nb_real eps = c->eps;
    const int nseg = width / seg;
    int r;
    (void)ctx;
    NB__OMP(parallel for schedule(static) num_threads(nb_num_threads(ctx))
            if((size_t)rows * width >= NB__PAR_MIN))
    for (r = 0; r < rows; r++) {
        int s;
        if (r + 1 < rows) nb__prefetch_row(x + (size_t)(r + 1) * ldx, width);
        for (s = 0; s < nseg; s++) {
            const size_t k = (size_t)r * nseg + s;
            nb_real* ys = y + (size_t)r * ldy + (size_t)s * seg;
            const nb_real* xs = x + (size_t)r * ldx + (size_t)s * seg;
            if (kind == NB_NORM_DYT) nb__dyt_seg_fwd(ys, xs, seg, gain, bias, *alpha);
            else if (kind == NB_NORM_DERF) nb__derf_seg_fwd(ys, xs, seg, gain, bias, alpha);
            else if (kind == NB_NORM_L2) nb__l2_seg_fwd(ys, xs, seg, rstd + k);
            else nb__norm_seg_fwd(ys, xs, seg, gain, bias, eps,
                                  kind == NB_NORM_LAYER ? mean + k : NULL, rstd + k);
        }
    }
}

NBDEF nb_result nb_rmsnorm_forward(nb_ctx* ctx, nb_real* y, int ldy, nb_real* rstd,
                                   const nb_real* x, int ldx, const nb_real* gain,
                                   int rows, int width, int seg, nb_real eps) {
    nb_result rc = nb__check_rows(ctx, "nb_rmsnorm_forward", rows, width, &seg, ldx, ldy, eps);
    if (rc) return rc;
    NB__CHECK(!y || !x || !rstd, NB_ERR_NULL, "nb_rmsnorm_forward: y, x and rstd are required");
    {
        nb__norm_call c = nb__ncall(NB_NORM_RMS, x, ldx, rows, width, seg);
        c.gain = gain; c.eps = eps;
        nb__norm_forward(ctx, &c, y, ldy, NULL, rstd);
    }
    return NB_OK;
}

/* Sum the per-thread partials (nt blocks of `stride` floats, first `n` used) into out, in thread
   order: deterministic for a fixed thread count. */
static void nb__reduce_partials(nb_real* out, const nb_real* partials, int nt, size_t stride,
                                int n) {
    int t, i;
    for (t = 0; t < nt; t++) {
        const nb_real* p = partials + (size_t)t * stride;
        for (i = 0; i < n; i++) out[i] += p[i];
    }
}

/* dx of one segment, dx = ADD J^T dy (ADD: "alpha * adds[i] +" or nothing) with the gain
   expression GI (gain[i] or 1), one branch-free loop per case so each vectorizes. dy and adds
   are read before dx is written at each i: dx may overwrite either. Uses the locals of
   nb__norm_seg_bwd. */
#define NB__NORM_DX(GI, ADD)                                                               \
    do {                                                                                   \
        NB__OMP(simd)                                                                      \
        for (i = 0; i < seg; i++)                                                          \
            dxs[i] = ADD rs * (dys[i] * (GI) - mg - (xs[i] - mu) * rs * mgx);              \
    } while (0)
#define NB__NORM_DX_ALL(GI)                                                                \
    do {                                                                                   \
        if (adds) NB__NORM_DX(GI, alpha * adds[i] +);                                      \
        else NB__NORM_DX(GI, );                                                            \
    } while (0)

/* One segment of a norm backward; LayerNorm when mean != NULL. With xhat = (x - mu) * rstd
   (mu = 0 for RMSNorm) and g = dy * gain:
     RMSNorm   dx = rstd * (g - xhat * mean(g * xhat))
     LayerNorm dx = rstd * (g - mean(g) - xhat * mean(g * xhat))
   (the mean(g) term is the gradient through mu), plus alpha * adds when adds != NULL (a
   residual path, or dx itself to accumulate; dx may be dy or adds). The dgain terms dy * xhat
   go to the partial sums pg (may be NULL); dbias: nb__bias_add. */
static void nb__norm_seg_bwd(nb_real* dxs, const nb_real* dys, const nb_real* xs, int seg,
                             const nb_real* gain, const nb_real* mean, nb_real rs,
                             const nb_real* adds, nb_real alpha, nb_real* pg) {
    const nb_real mu = mean ? *mean : 0;
    nb_real sg, mg, mgx;
    int i;
    mgx = nb__gsums(dys, xs, gain, mu, rs, seg, &sg, pg) * rs / (nb_real)seg;
    mg = mean ? sg / (nb_real)seg : 0;
    if (gain) NB__NORM_DX_ALL(gain[i]);
    else NB__NORM_DX_ALL(1);
}

/* A thread's partial sums of one norm's parameter gradients (NULL: not wanted). */
typedef struct nb__part { nb_real *g, *b, *a; } nb__part;

/* Thread t's partial sums in scratch, zeroed, for the gradients asked for. */
static nb__part nb__partials(nb_real* scratch, int t, int seg, int dgain, int dbias, int dalpha) {
    const size_t stride = nb__part_stride(seg);
    nb_real* base = (dgain || dbias || dalpha) ? scratch + (size_t)t * stride : NULL;
    nb__part p;
    NB_ASSERT(t >= 0 && t < NB_MAX_THREADS);
    p.g = dgain ? base : NULL;
    p.b = dbias ? base + nb__part_boff(seg) : NULL;
    p.a = dalpha ? base + nb__part_aoff(seg) : NULL;
    if (base) memset(base, 0, stride * sizeof(nb_real));
    return p;
}

/* dx of one segment of any kind (see nb__norm_seg_bwd, nb__dyt_seg_bwd, nb__l2_seg_bwd);
   the parameter-gradient terms go to the thread's partial sums pp. */
static void nb__seg_bwd(nb_norm_type kind, nb_real* dxs, const nb_real* dys, const nb_real* xs,
                        int seg, const nb_real* gain, const nb_real* alpha, const nb_real* mean,
                        nb_real rs, const nb_real* adds, nb_real add_alpha, const nb__part* pp) {
    if (kind == NB_NORM_L2) {
        nb__l2_seg_bwd(dxs, dys, xs, seg, rs, adds, add_alpha);
    } else if (kind == NB_NORM_DYT) {
        const nb_real da = nb__dyt_seg_bwd(dxs, dys, xs, seg, gain, *alpha, adds, add_alpha,
                                           pp->g);
        if (pp->a) pp->a[0] += da;
    } else if (kind == NB_NORM_DERF) {
        nb__derf_seg_bwd(dxs, dys, xs, seg, gain, alpha, adds, add_alpha, pp->g, pp->a);
    } else {
        nb__norm_seg_bwd(dxs, dys, xs, seg, gain, mean, rs, adds, add_alpha, pp->g);
    }
}

/* Shared body of every norm backward (DyT's alpha gradient added to *dalpha when not NULL;
   the statistics as nb__norm_forward's; messages name the kind's public backward). Per-thread
   partial
   sums of the parameter gradients, reduced in thread order afterwards: deterministic for a
   thread count. The scratch holds `teams` threads' partial sums; the team is clamped to that,
   so no thread count can write past it. */
static nb_result nb__norm_backward(nb_ctx* ctx, const nb__norm_call* c, const nb_real* mean,
                                   const nb_real* rstd, const nb__norm_grad* gr) {
    const nb_norm_type kind = c->kind;
    const char* fn = nb__norm_kinds[kind].bwd;
    const nb_real *x = c->x, *gain = c->gain, *dyt_alpha = c->alpha;
    const int ldx = c->ldx, rows = c->rows, width = c->width;
    nb_real *dx = gr->dx, *dgain = gr->dgain, *dbias = gr->dbias, *dalpha = gr->dalpha;
    nb_real* scratch = gr->scratch;
    const nb_real *dy = gr->dy, *add = gr->add, alpha = gr->add_alpha;
    const int lddx = gr->lddx, lddy = gr->lddy, teams = gr->teams;
    int seg = c->seg;
    nb_result rc = nb__check_rows(ctx, fn, rows, width, &seg, ldx, lddy, 1);
    if (rc) return rc;
    if (!nb__norm_kinds[kind].alpha) dyt_alpha = dalpha = NULL;
    NB__CHECK(lddx < width, NB_ERR_SHAPE, "%s: lddx (%d) must be >= width (%d)", fn, lddx, width);
    NB__CHECK(!dx || !dy || !x || (!rstd && !dyt_alpha), NB_ERR_NULL,
              "%s: dx, dy, x and rstd are required", fn);
    NB__CHECK((dgain || dbias || dalpha) && !scratch, NB_ERR_NULL,
              "%s: scratch (nb_norm_scratch_size values) is required for dgain/dbias", fn);
    {
        const int nseg = width / seg, nt = nb_num_threads(ctx);
        const size_t stride = nb__part_stride(seg);
        int used = 1;
        (void)nt; (void)teams;
        NB__OMP(parallel num_threads(nt < teams ? nt : teams)
                if((size_t)rows * width >= NB__PAR_MIN))
        {
            int lo, hi, r, s;
            const int t = nb__team_rows(rows, &used, &lo, &hi);
            const nb__part pp = nb__partials(scratch, t, seg, dgain != NULL, dbias != NULL,
                                             dalpha != NULL);
            nb__bias_items items;
            items.n = 0;
            for (r = lo; r < hi; r++) {
                if (r + 1 < hi) { /* the dx pass touches no new memory: fetch meanwhile */
                    nb__prefetch_row(x + (size_t)(r + 1) * ldx, width);
                    nb__prefetch_row(dy + (size_t)(r + 1) * lddy, width);
                }
                for (s = 0; s < nseg; s++) {
                    const size_t k = (size_t)r * nseg + s, o = (size_t)s * seg;
                    const nb_real *xs = x + (size_t)r * ldx + o, *dys = dy + (size_t)r * lddy + o;
                    nb__bias_add(&items, dys, seg, pp.b);
                    if (pp.b && dys == dx + (size_t)r * lddx + o) /* dx overwrites dy: add now */
                        nb__bias_flush(&items, seg, pp.b);
                    nb__seg_bwd(kind, dx + (size_t)r * lddx + o, dys, xs, seg, gain, dyt_alpha,
                                kind == NB_NORM_LAYER ? mean + k : NULL, dyt_alpha ? 0 : rstd[k],
                                add ? add + (size_t)r * lddx + o : NULL, alpha, &pp);
                }
                if (gr->dx16)
                    nb__row_bf16(gr->dx16 + (size_t)r * width, dx + (size_t)r * lddx, width);
            }
            if (pp.b) nb__bias_flush(&items, seg, pp.b);
        }
        if (dgain) nb__reduce_partials(dgain, scratch, used, stride, seg);
        if (dbias) nb__reduce_partials(dbias, scratch + nb__part_boff(seg), used, stride, seg);
        if (dalpha)
            nb__reduce_partials(dalpha, scratch + nb__part_aoff(seg), used, stride,
                                nb__norm_kinds[kind].alpha);
    }
    return NB_OK;
}

NBDEF nb_result nb_rmsnorm_backward(nb_ctx* ctx, nb_real* dx, int lddx, nb_real* dgain,
                                    const nb_real* dy, int lddy, const nb_real* x, int ldx,
                                    const nb_real* rstd, const nb_real* gain,
                                    int rows, int width, int seg, int accumulate,
                                    nb_real* scratch) {
    nb__norm_call c = nb__ncall(NB_NORM_RMS, x, ldx, rows, width, seg);
    nb__norm_grad g = nb__ngrad(dx, lddx, dy, lddy, scratch, NB_NORM_MAX_TEAM);
    c.gain = gain;
    g.dgain = dgain; g.add = accumulate ? dx : NULL;
    return nb__norm_backward(ctx, &c, NULL, rstd, &g);
}

NBDEF nb_result nb_layernorm_forward(nb_ctx* ctx, nb_real* y, int ldy, nb_real* mean,
                                     nb_real* rstd, const nb_real* x, int ldx,
                                     const nb_real* gain, const nb_real* bias,
                                     int rows, int width, int seg, nb_real eps) {
    nb_result rc = nb__check_rows(ctx, "nb_layernorm_forward", rows, width, &seg, ldx, ldy, eps);
    if (rc) return rc;
    NB__CHECK(!y || !x || !mean || !rstd, NB_ERR_NULL,
              "nb_layernorm_forward: y, x, mean and rstd are required");
    {
        nb__norm_call c = nb__ncall(NB_NORM_LAYER, x, ldx, rows, width, seg);
        c.gain = gain; c.bias = bias; c.eps = eps;
        nb__norm_forward(ctx, &c, y, ldy, mean, rstd);
    }
    return NB_OK;
}

NBDEF nb_result nb_layernorm_backward(nb_ctx* ctx, nb_real* dx, int lddx, nb_real* dgain,
                                      nb_real* dbias, const nb_real* dy, int lddy,
                                      const nb_real* x, int ldx, const nb_real* mean,
                                      const nb_real* rstd, const nb_real* gain,
                                      int rows, int width, int seg, int accumulate,
                                      nb_real* scratch) {
    nb__norm_call c = nb__ncall(NB_NORM_LAYER, x, ldx, rows, width, seg);
    nb__norm_grad g = nb__ngrad(dx, lddx, dy, lddy, scratch, NB_NORM_MAX_TEAM);
    NB__CHECK(!mean, NB_ERR_NULL, "nb_layernorm_backward: mean is required");
    c.gain = gain;
    g.dgain = dgain; g.dbias = dbias; g.add = accumulate ? dx : NULL;
    return nb__norm_backward(ctx, &c, mean, rstd, &g);
}

/* the norm's n learnable scalars (DyT's alpha; Derf's alpha, shift) */
static nb_result nb__check_alpha(nb_ctx* ctx, const char* fn, const nb_real* alpha, int n) {
    int i;
    NB__CHECK(!alpha, NB_ERR_NULL, "%s: %s required", fn, n > 1 ? "as (alpha, shift) is"
                                                                 : "alpha is");
    for (i = 0; i < n; i++)
        NB__CHECK(!nb__fin((double)alpha[i]), NB_ERR_VALUE, "%s: %s (%g) must be finite", fn,
                  i ? "shift" : "alpha", (double)alpha[i]);
    return NB_OK;
}

/* DyT and Derf, the norms of learnable scalars (nb__norm_kinds[kind].alpha of them in
   c->alpha) */
static nb_result nb__scalar_norm_forward(nb_ctx* ctx, nb__norm_call c, nb_real* y, int ldy) {
    const char* fn = nb__norm_kinds[c.kind].fwd;
    nb_result rc = nb__check_rows(ctx, fn, c.rows, c.width, &c.seg, c.ldx, ldy, 1);
    if (rc || (rc = nb__check_alpha(ctx, fn, c.alpha, nb__norm_kinds[c.kind].alpha))) return rc;
    NB__CHECK(!y || !c.x, NB_ERR_NULL, "%s: y and x are required", fn);
    c.eps = 1;
    nb__norm_forward(ctx, &c, y, ldy, NULL, NULL);
    return NB_OK;
}

static nb_result nb__scalar_norm_backward(nb_ctx* ctx, const nb__norm_call* c,
                                          const nb__norm_grad* g) {
    nb_result rc = nb__check_alpha(ctx, nb__norm_kinds[c->kind].bwd, c->alpha,
                                   nb__norm_kinds[c->kind].alpha);
    if (rc) return rc;
    return nb__norm_backward(ctx, c, NULL, NULL, g);
}

NBDEF nb_result nb_dyt_forward(nb_ctx* ctx, nb_real* y, int ldy, const nb_real* x, int ldx,
                               const nb_real* alpha, const nb_real* gain, const nb_real* bias,
                               int rows, int width, int seg) {
    nb__norm_call c = nb__ncall(NB_NORM_DYT, x, ldx, rows, width, seg);
    c.gain = gain; c.bias = bias; c.alpha = alpha;
    return nb__scalar_norm_forward(ctx, c, y, ldy);
}

NBDEF nb_result nb_dyt_backward(nb_ctx* ctx, nb_real* dx, int lddx, nb_real* dgain,
                                nb_real* dbias, nb_real* dalpha, const nb_real* dy, int lddy,
                                const nb_real* x, int ldx, const nb_real* alpha,
                                const nb_real* gain, int rows, int width, int seg,
                                int accumulate, nb_real* scratch) {
    nb__norm_call c = nb__ncall(NB_NORM_DYT, x, ldx, rows, width, seg);
    nb__norm_grad g = nb__ngrad(dx, lddx, dy, lddy, scratch, NB_NORM_MAX_TEAM);
    c.gain = gain; c.alpha = alpha;
    g.dgain = dgain; g.dbias = dbias; g.dalpha = dalpha; g.add = accumulate ? dx : NULL;
    return nb__scalar_norm_backward(ctx, &c, &g);
}

NBDEF nb_result nb_derf_forward(nb_ctx* ctx, nb_real* y, int ldy, const nb_real* x, int ldx,
                                const nb_real* as, const nb_real* gain, const nb_real* bias,
                                int rows, int width, int seg) {
    nb__norm_call c = nb__ncall(NB_NORM_DERF, x, ldx, rows, width, seg);
    c.gain = gain; c.bias = bias; c.alpha = as;
    return nb__scalar_norm_forward(ctx, c, y, ldy);
}

NBDEF nb_result nb_derf_backward(nb_ctx* ctx, nb_real* dx, int lddx, nb_real* dgain,
                                 nb_real* dbias, nb_real* das, const nb_real* dy, int lddy,
                                 const nb_real* x, int ldx, const nb_real* as,
                                 const nb_real* gain, int rows, int width, int seg,
                                 int accumulate, nb_real* scratch) {
    nb__norm_call c = nb__ncall(NB_NORM_DERF, x, ldx, rows, width, seg);
    nb__norm_grad g = nb__ngrad(dx, lddx, dy, lddy, scratch, NB_NORM_MAX_TEAM);
    c.gain = gain; c.alpha = as;
    g.dgain = dgain; g.dbias = dbias; g.dalpha = das; g.add = accumulate ? dx : NULL;
    return nb__scalar_norm_backward(ctx, &c, &g);
}

NBDEF nb_result nb_l2norm_forward(nb_ctx* ctx, nb_real* y, int ldy, nb_real* rstd,
                                  const nb_real* x, int ldx, int rows, int width, int seg) {
    nb_result rc = nb__check_rows(ctx, "nb_l2norm_forward", rows, width, &seg, ldx, ldy, 1);
    if (rc) return rc;
    NB__CHECK(!y || !x || !rstd, NB_ERR_NULL, "nb_l2norm_forward: y, x and rstd are required");
    {
        const nb__norm_call c = nb__ncall(NB_NORM_L2, x, ldx, rows, width, seg);
        nb__norm_forward(ctx, &c, y, ldy, NULL, rstd);
    }
    return NB_OK;
}

NBDEF nb_result nb_l2norm_backward(nb_ctx* ctx, nb_real* dx, int lddx, const nb_real* dy,
                                   int lddy, const nb_real* x, int ldx, const nb_real* rstd,
                                   int rows, int width, int seg, int accumulate) {
    const nb__norm_call c = nb__ncall(NB_NORM_L2, x, ldx, rows, width, seg);
    nb__norm_grad g = nb__ngrad(dx, lddx, dy, lddy, NULL, NB_NORM_MAX_TEAM);
    g.add = accumulate ? dx : NULL;
    return nb__norm_backward(ctx, &c, NULL, rstd, &g);
}

/* The mean block of statistics st (nstat segments), NULL for kinds without one. */
static nb_real* nb__kind_mean(nb_norm_type kind, const nb_real* st, size_t nstat) {
    return nb__norm_kinds[kind].stats > 1 ? (nb_real*)(size_t)(st + nstat) : NULL;
}

/* One segment, y = N(x), for row `row` of the statistics st (nstat segments; unused by DyT). */
static void nb__seg_fwd(nb_norm_type kind, nb_real* ys, const nb_real* xs, int seg,
                        const nb_real* gain, const nb_real* bias, const nb_real* alpha,
                        nb_real eps, nb_real* st, size_t nstat, size_t row) {
    if (kind == NB_NORM_DYT) nb__dyt_seg_fwd(ys, xs, seg, gain, bias, *alpha);
    else if (kind == NB_NORM_DERF) nb__derf_seg_fwd(ys, xs, seg, gain, bias, alpha);
    else if (kind == NB_NORM_L2) nb__l2_seg_fwd(ys, xs, seg, st + row);
    else nb__norm_seg_fwd(ys, xs, seg, gain, bias, eps, nb__kind_mean(kind, st, nstat) ?
                          st + nstat + row : NULL, st + row);
}

/* y = N(x) with the statistics into st (nstat = rows * width / seg segments): a sublayer's or
   block's norm (profiled). */
static nb_result nb__kind_forward(nb_ctx* ctx, nb__norm_call c, nb_real* y, int ldy, nb_real* st,
                                  size_t nstat) {
    const int dyt = nb__norm_kinds[c.kind].alpha;
    nb_result rc = nb__check_rows(ctx, nb__norm_kinds[c.kind].fwd, c.rows, c.width, &c.seg,
                                  c.ldx, ldy, dyt ? 1 : c.eps);
    double t0;
    if (rc) return rc;
    NB_ASSERT(!dyt || c.alpha);
    if (!dyt) c.alpha = NULL;
    t0 = nb__prof_begin(ctx);
    nb__norm_forward(ctx, &c, y, ldy, nb__kind_mean(c.kind, st, nstat), st);
    nb__prof_end(ctx, NB_PROF_NORM, t0);
    return NB_OK;
}

/* Its backward, from the statistics st (see nb__norm_grad). */
static nb_result nb__kind_backward(nb_ctx* ctx, nb__norm_call c, const nb_real* st, size_t nstat,
                                   const nb__norm_grad* g) {
    const int dyt = nb__norm_kinds[c.kind].alpha;
    const double t0 = nb__prof_begin(ctx);
    nb_result rc;
    NB_ASSERT(!dyt || c.alpha);
    if (!dyt) c.alpha = NULL;
    rc = nb__norm_backward(ctx, &c, nb__kind_mean(c.kind, st, nstat), st, g);
    nb__prof_end(ctx, NB_PROF_NORM, t0);
    return rc;
}

/* ---- softmax -------------------------------------------------------------------------------- */

static nb_result nb__check_softmax(nb_ctx* ctx, const char* fn, int rows, int cols, int lda,
                                   int ldb, nb_real scale) {
    NB__CHECK(rows <= 0 || cols <= 0, NB_ERR_SHAPE, "%s: rows (%d) and cols (%d) must be > 0",
              fn, rows, cols);
    NB__CHECK(lda < cols || ldb < cols, NB_ERR_SHAPE, "%s: strides (%d, %d) must be >= cols (%d)",
              fn, lda, ldb, cols);
    NB__CHECK(!(scale > 0) || !nb__fin((double)scale), NB_ERR_VALUE,
              "%s: scale (%g) must be finite and > 0", fn, (double)scale);
    return NB_OK;
}

/* Number of visible columns of row i. With causal masking and rows > cols the first rows see
   nothing; their p is all zero and their lse is -inf. */
static int nb__visible(int i, int rows, int cols, int causal) {
    int n = causal ? i + 1 + (cols - rows) : cols;
    return n < 0 ? 0 : (n > cols ? cols : n);
}

/* Softmax of one row: p_j = exp(scale*(s_j - max)) / sum for j < n, 0 for n <= j < cols (p may
   be s). Returns the row's lse = log sum_j exp(scale*s_j), -inf when n = 0. */
static nb_real nb__softmax_row(nb_real* p, const nb_real* s, int n, int cols, nb_real scale,
                               nb_real* max_out) {
    nb_real mx, total, inv;
    int i;
    for (i = n; i < cols; i++) p[i] = 0;
    if (n == 0) return -INFINITY;
    mx = nb__max(s, n);
    if (max_out) *max_out = mx;
    NB__SIMD_EXP(simd)
    for (i = 0; i < n; i++) p[i] = NB__EXP(scale * (s[i] - mx));
    total = nb__sum(p, n); /* a second pass over L1: the exp loop vectorizes better alone */
    inv = 1 / total;
    NB__OMP(simd)
    for (i = 0; i < n; i++) p[i] *= inv;
    return scale * mx + NB__LOG(total);
}

NBDEF nb_result nb_softmax_forward(nb_ctx* ctx, nb_real* p, int ldp, nb_real* lse,
                                   const nb_real* s, int lds, int rows, int cols,
                                   nb_real scale, int causal) {
    nb_result rc = nb__check_softmax(ctx, "nb_softmax_forward", rows, cols, lds, ldp, scale);
    if (rc) return rc;
    NB__CHECK(!p || !s, NB_ERR_NULL, "nb_softmax_forward: p and s are required");
    {
        int i;
        NB__OMP(parallel for schedule(static) num_threads(nb_num_threads(ctx))
                if((size_t)rows * cols >= NB__PAR_MIN))
        for (i = 0; i < rows; i++) {
            const nb_real l = nb__softmax_row(p + (size_t)i * ldp, s + (size_t)i * lds,
                                              nb__visible(i, rows, cols, causal), cols, scale,
                                              NULL);
            if (lse) lse[i] = l;
        }
    }
    return NB_OK;
}

NBDEF nb_result nb_softmax_backward(nb_ctx* ctx, nb_real* ds, int ldds, const nb_real* dp,
                                    int lddp, const nb_real* p, int ldp, int rows, int cols,
                                    nb_real scale, int causal) {
    nb_result rc = nb__check_softmax(ctx, "nb_softmax_backward", rows, cols, lddp, ldp, scale);
    if (rc) return rc;
    NB__CHECK(ldds < cols, NB_ERR_SHAPE, "nb_softmax_backward: ldds (%d) must be >= cols (%d)",
              ldds, cols);
    NB__CHECK(!ds || !dp || !p, NB_ERR_NULL, "nb_softmax_backward: ds, dp and p are required");
    {
        int i;
        NB__OMP(parallel for schedule(static) num_threads(nb_num_threads(ctx))
                if((size_t)rows * cols >= NB__PAR_MIN))
        for (i = 0; i < rows; i++) {
            const nb_real* dpi = dp + (size_t)i * lddp;
            const nb_real* pi = p + (size_t)i * ldp;
            nb_real* dsi = ds + (size_t)i * ldds;
            const int n = nb__visible(i, rows, cols, causal);
            const nb_real dot = nb__dot(dpi, pi, n);
            int j;
            NB__OMP(simd)
            for (j = 0; j < n; j++) dsi[j] = scale * pi[j] * (dpi[j] - dot);
            for (j = n; j < cols; j++) dsi[j] = 0;
        }
    }
    return NB_OK;
}

/* ---- GEMM ----------------------------------------------------------------------------------- */

/* A GEMM operand: op(X) read from p with leading dimension ld, transposed (trans) or not,
   nb_real values or bf16 bits (half: a BF16 plan's copies of weights and activations). */
typedef struct nb__mat { const void* p; int ld, trans, half; } nb__mat;
static inline nb__mat nb__m(const nb_real* p, int ld, int trans) {
    nb__mat m;
    m.p = p; m.ld = ld; m.trans = trans; m.half = 0;
    return m;
}
static inline nb__mat nb__mh(const unsigned short* p, int ld, int trans) {
    nb__mat m;
    m.p = p; m.ld = ld; m.trans = trans; m.half = 1;
    return m;
}

static nb_result nb__check_gemm(nb_ctx* ctx, const char* fn, int M, int N, int K, nb__mat A,
                                nb__mat B, const void* C, int ldc) {
    NB__CHECK(M <= 0 || N <= 0 || K <= 0, NB_ERR_SHAPE, "%s: M, N, K (%d, %d, %d) must be > 0",
              fn, M, N, K);
    NB__CHECK(!A.p || !B.p || !C, NB_ERR_NULL, "%s: A, B and C are required", fn);
    NB__CHECK(A.ld < (A.trans ? M : K) || B.ld < (B.trans ? K : N) || ldc < N, NB_ERR_SHAPE,
              "%s: leading dimensions (%d, %d, %d) too small for M=%d N=%d K=%d transa=%d "
              "transb=%d", fn, A.ld, B.ld, ldc, M, N, K, A.trans, B.trans);
    return NB_OK;
}

NBDEF nb_result nb_gemm_ref(nb_ctx* ctx, int transa, int transb, int M, int N, int K,
                            nb_real alpha, const nb_real* A, int lda, const nb_real* B, int ldb,
                            nb_real beta, nb_real* C, int ldc) {
    nb_result rc = nb__check_gemm(ctx, "nb_gemm_ref", M, N, K, nb__m(A, lda, transa),
                                  nb__m(B, ldb, transb), C, ldc);
    if (rc) return rc;
    {
        int i;
        /* never nest: inside a parallel region this runs on the calling thread only */
        NB__OMP(parallel for schedule(static) if(!omp_in_parallel())
                num_threads(nb_num_threads(ctx)))
        for (i = 0; i < M; i++) {
            nb_real* c = C + (size_t)i * ldc;
            int j, k;
            if (beta == 0) for (j = 0; j < N; j++) c[j] = 0;
            else if (beta != 1) for (j = 0; j < N; j++) c[j] *= beta;
            if (!transb) {
                /* i-k-j order: the inner loop streams a row of B and of C */
                for (k = 0; k < K; k++) {
                    const nb_real a = alpha * (transa ? A[(size_t)k * lda + i] : A[(size_t)i * lda + k]);
                    const nb_real* b = B + (size_t)k * ldb;
                    for (j = 0; j < N; j++) c[j] += a * b[j];
                }
            } else {
                for (j = 0; j < N; j++) {
                    const nb_real* b = B + (size_t)j * ldb;
                    nb_real acc = 0;
                    if (transa) for (k = 0; k < K; k++) acc += A[(size_t)k * lda + i] * b[k];
                    else {
                        const nb_real* a = A + (size_t)i * lda;
                        for (k = 0; k < K; k++) acc += a[k] * b[k];
                    }
                    c[j] += alpha * acc;
                }
            }
        }
    }
    return NB_OK;
}

/* One nb_real GEMM on the calling thread (BLAS or reference), no checks: under nb__gemm1. */
static void nb__sgemm1(int transa, int transb, int M, int N, int K, nb_real alpha,
                       const nb_real* A, int lda, const nb_real* B, int ldb, nb_real beta,
                       nb_real* C, int ldc) {
#ifdef NB_NO_BLAS
    nb_ctx one;
    memset(&one, 0, sizeof one);
    nb_result rc;
    one.num_threads = 1;
    rc = nb_gemm_ref(&one, transa, transb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    NB_ASSERT(rc == NB_OK); /* callers pass shapes their plan validated */
    (void)rc;
#elif defined(NB_DOUBLE)
    cblas_dgemm(CblasRowMajor, transa ? CblasTrans : CblasNoTrans,
                transb ? CblasTrans : CblasNoTrans, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
#else
    cblas_sgemm(CblasRowMajor, transa ? CblasTrans : CblasNoTrans,
                transb ? CblasTrans : CblasNoTrans, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
#endif
}

/* The float bits u rounded to nearest even at 8 significand bits (bf16 in the high half, low
   half zero). NaN stays NaN (quieted, so the truncation cannot make it inf); a value past the
   largest bf16 rounds to inf, as a bf16 conversion does. Bit operations only: exact under
   any floating-point flags, and it vectorizes. */
static inline unsigned nb__bf16_round(unsigned u) {
    const unsigned r = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    const unsigned nan = 0u - (unsigned)((u & 0x7fffffffu) > 0x7f800000u);
    return ((u | 0x00400000u) & 0xffff0000u & nan) | (r & ~nan);
}

NBDEF void nb_bf16_round(unsigned short* dst, const float* src, size_t n) {
    long long i;
    NB__OMP(simd)
    for (i = 0; i < (long long)n; i++) {
        unsigned u;
        memcpy(&u, src + i, sizeof u);
        dst[i] = (unsigned short)(nb__bf16_round(u) >> 16);
    }
}

#ifndef NB_DOUBLE
/* bf16(x) kept as a float (its low 16 bits zero) */
static inline float nb__bf16(float x) {
    unsigned u;
    memcpy(&u, &x, sizeof u);
    u = nb__bf16_round(u);
    memcpy(&x, &u, sizeof x);
    return x;
}
/* the bits of bf16(x), and the float a bf16 is (exact) */
static inline unsigned short nb__bf16_bits(float x) {
    unsigned u;
    x = nb__bf16(x);
    memcpy(&u, &x, sizeof u);
    return (unsigned short)(u >> 16);
}
static inline float nb__bf16_float(unsigned short h) {
    const unsigned u = (unsigned)h << 16;
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}
#endif

/* op(X) from row r and column c of op(X) on */
static inline nb__mat nb__mat_at(nb__mat m, int r, int c) {
    const size_t off = m.trans ? (size_t)c * m.ld + r : (size_t)r * m.ld + c;
    m.p = m.half ? (const void*)((const unsigned short*)m.p + off)
                 : (const void*)((const nb_real*)m.p + off);
    return m;
}

#ifndef NB_DOUBLE
/* The block op(X)[r0.., c0..] (rows x cols) into dst as bf16 values in floats: rounded from
   float, or widened from bf16 bits (exact), copied in X's own orientation (so both loops run
   along X's rows and vectorize; the GEMM transposes). Returns dst's leading dimension. */
static int nb__bf16_block(float* dst, nb__mat X, int r0, int c0, int rows, int cols) {
    const int sr = X.trans ? cols : rows, sc = X.trans ? rows : cols; /* as stored */
    int r, c;
    X = nb__mat_at(X, r0, c0);
    for (r = 0; r < sr; r++) {
        float* d = dst + (size_t)r * sc;
        if (X.half) {
            const unsigned short* x = (const unsigned short*)X.p + (size_t)r * X.ld;
            NB__OMP(simd)
            for (c = 0; c < sc; c++) d[c] = nb__bf16_float(x[c]);
        } else {
            const float* x = (const float*)X.p + (size_t)r * X.ld;
            NB__OMP(simd)
            for (c = 0; c < sc; c++) d[c] = nb__bf16(x[c]);
        }
    }
    return sc;
}

/* The portable BF16 GEMM: op(A) and op(B) are made bf16 block by block in this thread's stack
   (NB__BF_M x NB__BF_K and NB__BF_K x NB__BF_N floats, 384 KiB: 256 x 128 and 128 x 512 ran
   the block's 12 GEMMs at 127 GFLOP/s against 100 with 64 x 256 and 256 x 256, OpenBLAS's
   float32 at 150, on an Emerald Rapids core; bench/README.md) and each pair of blocks is
   one float32 GEMM, accumulating over K in C. Each product is then a bf16 x bf16 product,
   exact in float32, summed in float32: the numerics of a bf16 matrix unit up to summation
   order. Every element of C is computed in the same order whatever the thread count. */
enum { NB__BF_M = 256, NB__BF_N = 512, NB__BF_K = 128 };
static void nb__gemm1_bf16(int M, int N, int K, float alpha, nb__mat A, nb__mat B, float beta,
                           float* C, int ldc) {
    float a[NB__BF_M * NB__BF_K], b[NB__BF_K * NB__BF_N];
    int i0, j0, k0;
    for (j0 = 0; j0 < N; j0 += NB__BF_N) {
        const int nb = N - j0 < NB__BF_N ? N - j0 : NB__BF_N;
        for (k0 = 0; k0 < K; k0 += NB__BF_K) {
            const int kb = K - k0 < NB__BF_K ? K - k0 : NB__BF_K;
            const int ldb = nb__bf16_block(b, B, k0, j0, kb, nb);
            for (i0 = 0; i0 < M; i0 += NB__BF_M) {
                const int mb = M - i0 < NB__BF_M ? M - i0 : NB__BF_M;
                const int lda = nb__bf16_block(a, A, i0, k0, mb, kb);
                nb__sgemm1(A.trans, B.trans, mb, nb, kb, alpha, a, lda, b, ldb, k0 ? 1 : beta,
                           C + (size_t)i0 * ldc + j0, ldc);
            }
        }
    }
}

/* dst = the bf16 bits of x's n values: where a kernel writes a row a GEMM will read, while the
   row is in cache */
static void nb__row_bf16(unsigned short* dst, const float* x, int n) {
    int c;
    NB__OMP(simd)
    for (c = 0; c < n; c++) dst[c] = nb__bf16_bits(x[c]);
}
/* x rounded to bf16 in place, and its bits into dst unless NULL: a float row that its
   readers, and later ones from dst, take as bf16 (gemm.bf16_outputs) */
static void nb__row_round(unsigned short* dst, float* x, int n) {
    int c;
    if (!dst) {
        NB__OMP(simd)
        for (c = 0; c < n; c++) x[c] = nb__bf16(x[c]);
        return;
    }
    NB__OMP(simd)
    for (c = 0; c < n; c++) {
        dst[c] = nb__bf16_bits(x[c]);
        x[c] = nb__bf16_float(dst[c]);
    }
}
/* dst = the n bf16 values of src, widened (exact) */
static void nb__row_widen(float* dst, const unsigned short* src, int n) {
    int c;
    NB__OMP(simd)
    for (c = 0; c < n; c++) dst[c] = nb__bf16_float(src[c]);
}
/* dst (row-major, cols wide) = the bf16 bits of the rows x cols matrix x (ld ldx); threaded */
static void nb__to_bf16(nb_ctx* ctx, unsigned short* dst, const float* x, int rows, int cols,
                        int ldx) {
    const double t0 = nb__prof_begin(ctx);
    int r;
    NB__OMP(parallel for schedule(static) num_threads(nb_num_threads(ctx))
            if((size_t)rows * cols >= NB__PAR_MIN && !omp_in_parallel()))
    for (r = 0; r < rows; r++) nb__row_bf16(dst + (size_t)r * cols, x + (size_t)r * ldx, cols);
    nb__prof_end(ctx, NB_PROF_CONVERT, t0);
}
#else /* never called: BF16 plans are refused with NB_DOUBLE */
static unsigned short nb__bf16_bits(nb_real x) {
    (void)x;
    NB_ASSERT(0);
    return 0;
}
static void nb__row_bf16(unsigned short* dst, const nb_real* x, int n) {
    (void)dst; (void)x; (void)n;
    NB_ASSERT(0);
}
static void nb__row_round(unsigned short* dst, nb_real* x, int n) {
    (void)dst; (void)x; (void)n;
    NB_ASSERT(0);
}
static void nb__row_widen(nb_real* dst, const unsigned short* src, int n) {
    (void)dst; (void)src; (void)n;
    NB_ASSERT(0);
}
static void nb__to_bf16(nb_ctx* ctx, unsigned short* dst, const nb_real* x, int rows, int cols,
                        int ldx) {
    (void)ctx; (void)dst; (void)x; (void)rows; (void)cols; (void)ldx;
    NB_ASSERT(0);
}
#endif

/* ---- bf16 dot-product kernels: the attention products ----
   C (M x N, float, ld ldc) = or += A B, A (M x K) bf16 row-major (ld lda, K along a row), B
   (K x N) bf16 in pairs of rows ("VNNI"): B[k][n] at Bp[(k/2) * 2 ldb + 2n + k%2], so one
   32-bit word holds B[2p][n] and B[2p+1][n], the layout both x86 bf16 instructions read. An
   odd K reads A's last column once, with the pair's second half zero in Bp. Three kernels:
   - AMX (TDPBF16PS on 16 x 16 float tiles): the 32 x 32 blocks of C when K is a multiple of 32
     (the rest on AVX512-BF16), on CPUs with amx_bf16 and a kernel that grants the tile state;
   - AVX512-BF16 (VDPBF16PS): 8 rows x 32 columns of C in registers;
   - portable C: the same pairs, widened to float.
   Each product of two bf16 is exact in float32 and the sums are float32 (the instructions
   flush denormal inputs and results to zero; the portable kernel keeps them): the numerics of
   the portable bf16 GEMM up to summation order. Every element is computed in the same order
   whatever the thread count.
   A BF16 attention runs its products on AMX where the CPU has it (nb__bf16_isa at plan time),
   else on the emulation of the linear GEMMs (float32 sgemm on bf16-rounded blocks: faster
   than VDPBF16PS on the AVX512-BF16 CPUs measured, bench/README.md); the portable and
   AVX512-BF16 kernels run AMX's edges and the tests of the packed path on any CPU. */
enum { NB__ISA_PORTABLE = 0, NB__ISA_AVX512BF16 = 1, NB__ISA_AMX = 2 };
/* nb_attn_plan.bf16_attn: the emulation, or the packed path on kernel value - 1 */
enum { NB__ATTN_EMULATED = 0, NB__ATTN_PORTABLE, NB__ATTN_AVX512BF16, NB__ATTN_AMX };
static const char* const nb__attn_kernels[] = {
    "bf16 emulated (float32 GEMM on rounded blocks)", "bf16 packed, portable kernel",
    "bf16 packed, AVX512-BF16", "bf16 AMX tiles (edges AVX512-BF16)"};
/* the linear GEMMs' (nb_attn_plan.bf16_gemm), for nb_stack_kernels */
static const char* const nb__gemm_kernels[] = {
    "portable bf16", "normblocks' bf16 GEMM, portable kernel",
    "normblocks' bf16 GEMM, AVX512-BF16", "normblocks' bf16 GEMM on AMX tiles"};

#if !defined(NB_DOUBLE) && !defined(NB_NO_X86_KERNELS) && defined(__x86_64__) && \
    ((defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 11) ||                  \
     (defined(__clang__) && __clang_major__ >= 12))
#define NB__X86_BF16 1
#ifdef NB__TEST_X86_EMU /* the tests: these instructions emulated in C, so the kernels run on
                           any x86-64 (tests/x86_emu.h; the CPU reported as having AMX) */
#include "x86_emu.h"
#define NB__TARGET(isa)
#else
#include <cpuid.h>
#include <immintrin.h>
#define NB__TARGET(isa) __attribute__((target(isa)))
#endif

/* The best kernel this CPU and OS run: cpuid's feature bits, the OS's saved state (XCR0), and
   for AMX Linux's permission for the tile data (arch_prctl ARCH_REQ_XCOMP_PERM, per process;
   granted once, asking again is harmless). */
static int nb__bf16_isa(void) {
#ifdef NB__TEST_X86_EMU
    return NB__ISA_AMX;
#else
    unsigned a = 0, b = 0, c = 0, d = 0, xlo = 0, xhi = 0;
    int avx512bf16, amx;
    if (__get_cpuid_max(0, NULL) < 7) return NB__ISA_PORTABLE;
    __cpuid(1, a, b, c, d);
    if (!(c & (1u << 27))) return NB__ISA_PORTABLE; /* OSXSAVE: xgetbv is there */
    __asm__ __volatile__("xgetbv" : "=a"(xlo), "=d"(xhi) : "c"(0));
    (void)xhi;
    __cpuid_count(7, 0, a, b, c, d);
    amx = (d >> 22 & 1) && (d >> 24 & 1) && (xlo & (3u << 17)) == (3u << 17);
    avx512bf16 = (b >> 16 & 1) && (b >> 30 & 1) && (xlo & 0xe6u) == 0xe6u; /* F, BW, state */
    __cpuid_count(7, 1, a, b, c, d);
    avx512bf16 = avx512bf16 && (a >> 5 & 1);
    if (!avx512bf16) return NB__ISA_PORTABLE;
#ifdef __linux__
    if (amx) {
        long r;
        /* syscall(SYS_arch_prctl = 158, ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18) */
        __asm__ __volatile__("syscall" : "=a"(r) : "a"(158L), "D"(0x1023L), "S"(18L)
                             : "rcx", "r11", "memory");
        if (r == 0) return NB__ISA_AMX;
    }
#else
    (void)amx;
#endif
    return NB__ISA_AVX512BF16;
#endif
}

/* the 32-bit word of A's pair (k, k+1) of row a; (A[k], 0) when k + 1 == K */
static inline int nb__pair(const unsigned short* a, int k, int K) {
    unsigned lo = a[k], hi = k + 1 < K ? a[k + 1] : 0;
    return (int)(lo | hi << 16);
}

NB__TARGET("avx512f,avx512bw,avx512bf16")
static void nb__bdot_avx512(int M, int N, int K, const unsigned short* A, int lda,
                            const unsigned short* Bp, int ldb, float* C, int ldc, int acc) {
    enum { MR = 8 };
    const int kp = (K + 1) / 2;
    int i0, j0, r, p;
    for (j0 = 0; j0 < N; j0 += 32) {
        const int n0 = N - j0 < 16 ? N - j0 : 16, n1 = N - j0 - 16 < 0 ? 0
                                                   : N - j0 - 16 < 16 ? N - j0 - 16 : 16;
        const __mmask16 m0 = (__mmask16)((1u << n0) - 1), m1 = (__mmask16)((1u << n1) - 1);
        for (i0 = 0; i0 < M; i0 += MR) {
            const int mr = M - i0 < MR ? M - i0 : MR;
            __m512 c0[MR], c1[MR];
            for (r = 0; r < MR; r++) {
                const float* cr = C + (size_t)(i0 + (r < mr ? r : 0)) * ldc + j0;
                c0[r] = acc && r < mr ? _mm512_maskz_loadu_ps(m0, cr) : _mm512_setzero_ps();
                c1[r] = acc && r < mr ? _mm512_maskz_loadu_ps(m1, cr + 16) : _mm512_setzero_ps();
            }
            for (p = 0; p < kp; p++) {
                const unsigned short* b = Bp + (size_t)p * 2 * ldb + 2 * (size_t)j0;
                const __m512i b0 = _mm512_maskz_loadu_epi32(m0, b);
                const __m512i b1 = _mm512_maskz_loadu_epi32(m1, b + 32);
                for (r = 0; r < MR; r++) {
                    const __m512i a = _mm512_set1_epi32(
                        nb__pair(A + (size_t)(i0 + (r < mr ? r : 0)) * lda, 2 * p, K));
                    c0[r] = _mm512_dpbf16_ps(c0[r], (__m512bh)a, (__m512bh)b0);
                    c1[r] = _mm512_dpbf16_ps(c1[r], (__m512bh)a, (__m512bh)b1);
                }
            }
            for (r = 0; r < mr; r++) {
                float* cr = C + (size_t)(i0 + r) * ldc + j0;
                _mm512_mask_storeu_ps(cr, m0, c0[r]);
                _mm512_mask_storeu_ps(cr + 16, m1, c1[r]);
            }
        }
    }
}

/* The 32-bit words (X[r][2q], X[r][2q+1]) of 16 rows r0.. of X (bf16, ld ldx) at once: one
   gather per word column, the loads of the packs below */
NB__TARGET("avx512f,avx512bw")
static inline __m512i nb__gather16(const unsigned short* X, int ldx, int r0, int q) {
    const __m512i rows = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    /* the masked forms with a zero source: the plain ones start from an undefined register,
       which g++ 12 -O3 warns about (-Wmaybe-uninitialized) */
    return _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), (__mmask16)0xffff,
                                       _mm512_mullo_epi32(rows, _mm512_set1_epi32(ldx)),
                                       (const void*)(X + (size_t)r0 * ldx + 2 * (size_t)q), 2);
}
/* nb__pack_cols' and nb__transpose16's bulk: rows [0, rows & ~15), word columns [0, cols / 2) */
NB__TARGET("avx512f,avx512bw")
static void nb__pack_cols_avx512(unsigned short* Bp, const unsigned short* X, int rows, int cols,
                                 int ldx, int ldb) {
    int r0, q;
    for (r0 = 0; r0 + 16 <= rows; r0 += 16)
        for (q = 0; q < cols / 2; q++)
            _mm512_storeu_si512((void*)(Bp + (size_t)q * 2 * ldb + 2 * (size_t)r0),
                                nb__gather16(X, ldx, r0, q));
}
NB__TARGET("avx512f,avx512bw")
static void nb__transpose16_avx512(unsigned short* D, const unsigned short* X, int rows,
                                   int cols, int ldx, int ldd) {
    int r0, q;
    for (r0 = 0; r0 + 16 <= rows; r0 += 16)
        for (q = 0; q < cols / 2; q++) {
            const __m512i w = nb__gather16(X, ldx, r0, q);
            const __m256i z = _mm256_setzero_si256();
            const __mmask16 all = (__mmask16)0xffff;
            const __m512i hi = _mm512_maskz_srli_epi32(all, w, 16);
            _mm256_storeu_si256((__m256i*)(D + (size_t)2 * q * ldd + r0),
                                _mm512_mask_cvtepi32_epi16(z, all, w));
            _mm256_storeu_si256((__m256i*)(D + (size_t)(2 * q + 1) * ldd + r0),
                                _mm512_mask_cvtepi32_epi16(z, all, hi));
        }
}

/* the palette-1 tile configuration (64 bytes, Intel SDM 3.3: TILECFG) */
typedef struct nb__tilecfg {
    unsigned char palette, start_row, reserved[14];
    unsigned short colsb[16];
    unsigned char rows[16];
} nb__tilecfg;

/* C's 32 x 32 blocks [0, M) x [0, N) (M, N, K multiples of 32): tiles 0-3 hold the block of C,
   4-5 two 16 x 32 slices of A, 6-7 two 16-pair x 16 slices of B */
NB__TARGET("amx-tile,amx-bf16")
static void nb__bdot_amx(int M, int N, int K, const unsigned short* A, int lda,
                         const unsigned short* Bp, int ldb, float* C, int ldc, int acc) {
    nb__tilecfg cfg;
    int i0, j0, k0, t;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (t = 0; t < 8; t++) {
        cfg.rows[t] = 16;
        cfg.colsb[t] = 64;
    }
    _tile_loadconfig(&cfg);
    for (i0 = 0; i0 < M; i0 += 32)
        for (j0 = 0; j0 < N; j0 += 32) {
            float* c = C + (size_t)i0 * ldc + j0;
            const size_t sc = (size_t)ldc * 4, sa = (size_t)lda * 2, sb = (size_t)ldb * 4;
            if (acc) {
                _tile_loadd(0, c, sc);
                _tile_loadd(1, c + 16, sc);
                _tile_loadd(2, c + 16 * (size_t)ldc, sc);
                _tile_loadd(3, c + 16 * (size_t)ldc + 16, sc);
            } else {
                _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3);
            }
            for (k0 = 0; k0 < K; k0 += 32) {
                const unsigned short* a = A + (size_t)i0 * lda + k0;
                const unsigned short* b = Bp + (size_t)k0 * ldb + 2 * (size_t)j0;
                _tile_loadd(4, a, sa);
                _tile_loadd(5, a + 16 * (size_t)lda, sa);
                _tile_loadd(6, b, sb);
                _tile_loadd(7, b + 32, sb);
                _tile_dpbf16ps(0, 4, 6);
                _tile_dpbf16ps(1, 4, 7);
                _tile_dpbf16ps(2, 5, 6);
                _tile_dpbf16ps(3, 5, 7);
            }
            _tile_stored(0, c, sc);
            _tile_stored(1, c + 16, sc);
            _tile_stored(2, c + 16 * (size_t)ldc, sc);
            _tile_stored(3, c + 16 * (size_t)ldc + 16, sc);
        }
    _tile_release();
}
#else
static int nb__bf16_isa(void) { return NB__ISA_PORTABLE; }
#endif
/* A BF16 plan's kernel for its products (nb_attn_plan.bf16_attn, .bf16_gemm): AMX's tiles
   where the CPU has them, else the emulation */
static int nb__bf16_gemm_kernel(void) {
    return nb__bf16_isa() == NB__ISA_AMX ? NB__ATTN_AMX : NB__ATTN_EMULATED;
}

#ifndef NB_DOUBLE
static void nb__bdot_portable(int M, int N, int K, const unsigned short* A, int lda,
                              const unsigned short* Bp, int ldb, float* C, int ldc, int acc) {
    int i, j, p;
    for (i = 0; i < M; i++) {
        const unsigned short* a = A + (size_t)i * lda;
        float* c = C + (size_t)i * ldc;
        if (!acc) for (j = 0; j < N; j++) c[j] = 0;
        for (p = 0; p < (K + 1) / 2; p++) {
            const float a0 = nb__bf16_float(a[2 * p]);
            const float a1 = 2 * p + 1 < K ? nb__bf16_float(a[2 * p + 1]) : 0;
            const unsigned short* b = Bp + (size_t)p * 2 * ldb;
            NB__OMP(simd)
            for (j = 0; j < N; j++)
                c[j] += a0 * nb__bf16_float(b[2 * j]) + a1 * nb__bf16_float(b[2 * j + 1]);
        }
    }
}
#endif

/* C = (acc: C +) A B on kernel isa, see above */
static void nb__bdot(int isa, int M, int N, int K, const unsigned short* A, int lda,
                     const unsigned short* Bp, int ldb, nb_real* C, int ldc, int acc) {
#ifdef NB_DOUBLE
    (void)isa; (void)M; (void)N; (void)K; (void)A; (void)lda; (void)Bp; (void)ldb; (void)C;
    (void)ldc; (void)acc;
    NB_ASSERT(0);
#else
#ifdef NB__X86_BF16
    if (isa == NB__ISA_AMX && K % 32 == 0 && M >= 32 && N >= 32) {
        const int M32 = M & ~31, N32 = N & ~31;
        nb__bdot_amx(M32, N32, K, A, lda, Bp, ldb, C, ldc, acc);
        if (N32 < N)
            nb__bdot_avx512(M32, N - N32, K, A, lda, Bp + 2 * (size_t)N32, ldb, C + N32, ldc, acc);
        if (M32 < M)
            nb__bdot_avx512(M - M32, N, K, A + (size_t)M32 * lda, lda, Bp, ldb,
                            C + (size_t)M32 * ldc, ldc, acc);
        return;
    }
    if (isa != NB__ISA_PORTABLE) {
        nb__bdot_avx512(M, N, K, A, lda, Bp, ldb, C, ldc, acc);
        return;
    }
#else
    (void)isa;
#endif
    nb__bdot_portable(M, N, K, A, lda, Bp, ldb, C, ldc, acc);
#endif
}

/* Bp (pairs of rows, see above; ldb = cols) of X (rows x cols bf16, ld ldx), rows rounded up
   to prows (even) with zeros */
static void nb__pack_rows(unsigned short* Bp, const unsigned short* X, int rows, int cols,
                          int ldx, int prows) {
    int p, j;
    for (p = 0; p < prows / 2; p++) {
        unsigned short* d = Bp + (size_t)p * 2 * cols;
        const unsigned short* x0 = X + (size_t)2 * p * ldx;
        const unsigned short* x1 = 2 * p + 1 < rows ? x0 + ldx : NULL;
        if (2 * p >= rows) {
            memset(d, 0, (size_t)cols * 2 * sizeof *d);
            continue;
        }
        NB__OMP(simd) /* one 32-bit word per pair: the loop vectorizes */
        for (j = 0; j < cols; j++) {
            const unsigned w = (unsigned)x0[j] | (x1 ? (unsigned)x1[j] << 16 : 0u);
            memcpy(d + 2 * j, &w, sizeof w);
        }
    }
}
/* The rows of X the gathers moved (nb__pack_cols_avx512, nb__transpose16_avx512: the word
   columns of whole pairs, in blocks of 16 rows) on kernel isa; the scalar loops do the rest */
static int nb__gathered_rows(int isa, int rows) {
#ifdef NB__X86_BF16
    return isa != NB__ISA_PORTABLE ? rows & ~15 : 0;
#else
    (void)isa; (void)rows;
    return 0;
#endif
}

/* Bp (ld ldb >= rows) of X^T: X (rows x cols bf16, ld ldx) is K^T's rows, so a pair (2p,
   2p+1) of X's columns is one 32-bit word: a transpose of words. Columns of Bp from rows to
   ldb, and a missing odd column's half, are zero. */
static void nb__pack_cols(int isa, unsigned short* Bp, const unsigned short* X, int rows,
                          int cols, int ldx, int ldb) {
    const int done = nb__gathered_rows(isa, rows);
    int p, r, r0;
#ifdef NB__X86_BF16
    if (done) nb__pack_cols_avx512(Bp, X, rows, cols, ldx, ldb);
#endif
    for (r0 = 0; r0 < rows; r0 += 32) { /* 32 rows of X stay in L1 while their words move */
        const int r1 = rows - r0 < 32 ? rows : r0 + 32;
        for (p = 0; p < (cols + 1) / 2; p++) {
            unsigned short* d = Bp + (size_t)p * 2 * ldb;
            const int h1 = 2 * p + 1 < cols;
            for (r = h1 && r0 < done ? done : r0; r < r1; r++) {
                d[2 * r] = X[(size_t)r * ldx + 2 * p];
                d[2 * r + 1] = h1 ? X[(size_t)r * ldx + 2 * p + 1] : 0;
            }
        }
    }
    for (p = 0; p < (cols + 1) / 2; p++)
        for (r = 2 * rows; r < 2 * ldb; r++) Bp[(size_t)p * 2 * ldb + r] = 0;
}
/* D (cols x ldd) = X^T for X (rows x cols bf16, ld ldx); D's columns rows..ldd zero */
static void nb__transpose16(int isa, unsigned short* D, const unsigned short* X, int rows,
                            int cols, int ldx, int ldd) {
    const int done = nb__gathered_rows(isa, rows);
    int r, c, r0;
#ifdef NB__X86_BF16
    if (done) nb__transpose16_avx512(D, X, rows, cols, ldx, ldd);
#endif
    for (r0 = 0; r0 < rows; r0 += 32) { /* 32 rows of X stay in L1 */
        const int r1 = rows - r0 < 32 ? rows : r0 + 32;
        for (c = 0; c < cols; c++)
            for (r = c < (cols & ~1) && r0 < done ? done : r0; r < r1; r++)
                D[(size_t)c * ldd + r] = X[(size_t)r * ldx + c];
    }
    for (c = 0; c < cols; c++)
        for (r = rows; r < ldd; r++) D[(size_t)c * ldd + r] = 0;
}

#define NB__BF16(plan) ((plan)->desc.gemm.precision == NB_PRECISION_BF16)

/* A sublayer call's options. Backward: dx added to (the public accumulate_dx), and the weight
   matrices' gradients written instead of added to (a stack that would have zeroed them). BF16,
   forward and backward: x's bf16 copy is already in the cache, written by the stack's input norm
   (nb__h16), and x itself is NULL: no float copy of it was kept. BF16 backward: dout's bf16
   copy is already in the scratch, written by the norm backward that finished dout
   (nb__one_layer_bwd). */
enum { NB__BWD_ACC_DX = 1, NB__BWD_WRITE_DW = 2, NB__X16_GIVEN = 4, NB__DOUT16_GIVEN = 8 };

#ifndef NB_DOUBLE
/* ---- the linear GEMMs on nb__bdot's kernels ("tiles") ----
   C = alpha op(A) op(B), or C += op(A) op(B) when acc (alpha 1: nb__tiles_take), in bf16
   numerics on kernel isa, for the calling thread (alpha scales the float32 sums): op(B)
   made bf16 pairs of rows (nb__bdot's B) NB__BT_K x NB__BT_N at a time, op(A) bf16 rows
   NB__BT_M x NB__BT_K (read in place when A is bf16 and not transposed: the forward's and
   dX's activations), both in this thread's stack (128 + 256 KiB, what the emulation's float
   blocks take). The B block stays in L2 while every row block of A passes over it; a row block's
   32-row strips stay in L1 while nb__bdot runs them against the B block's 32-column slices.
   K is cut at multiples of NB__BT_K from 0 (C holds the partial sums in float32, exactly), so
   every element is summed in the same order whatever block of C a thread owns: with blocks at
   multiples of 32 (nb__gemm_run) the AMX kernel's bits do not depend on the thread count.
   What AMX runs it on: the plans' choice on a CPU with AMX (nb_attn_plan.bf16_gemm); the
   tests run it on every kernel on any x86-64 (tests/x86_emu.h emulates the instructions). */
enum { NB__BT_M = 256, NB__BT_N = 512, NB__BT_K = 256 };

/* The calls the tiles take: C = alpha op(A) op(B) (alpha applied to the float32 sums, as a BLAS
   does: nb__tiles_scale) and C += op(A) op(B); the emulation runs the others */
static int nb__tiles_take(nb_real alpha, nb_real beta) {
    return beta == 0 || (beta == 1 && alpha == 1);
}
static void nb__tiles_scale(float* C, int ldc, int r0, int r1, int N, float alpha) {
    int r, j;
    if (alpha == 1) return;
    for (r = r0; r < r1; r++) {
        float* c = C + (size_t)r * ldc;
        NB__OMP(simd)
        for (j = 0; j < N; j++) c[j] *= alpha;
    }
}

/* op(X)[r][c] rounded to bf16 (X float or bf16, either orientation): the general packs' read */
static unsigned short nb__bits_at(nb__mat X, int r, int c) {
    X = nb__mat_at(X, r, c);
    return X.half ? *(const unsigned short*)X.p : nb__bf16_bits(*(const float*)X.p);
}

/* bp = op(B)[k0 .. k0+kb) x [j0 .. j0+nb) in pairs of rows (ld nb), an odd kb's pair half zero */
static void nb__tiles_b(int isa, unsigned short* bp, nb__mat B, int k0, int j0, int kb, int nb) {
    const nb__mat X = nb__mat_at(B, k0, j0);
    int p, n, h;
    if (B.half && B.trans) { /* W^T of a weight W stored by rows: a transpose of 32-bit words */
        nb__pack_cols(isa, bp, (const unsigned short*)X.p, nb, kb, X.ld, nb);
    } else if (B.half) {
        nb__pack_rows(bp, (const unsigned short*)X.p, kb, nb, X.ld, (kb + 1) & ~1);
    } else {
        for (p = 0; p < (kb + 1) / 2; p++)
            for (n = 0; n < nb; n++)
                for (h = 0; h < 2; h++)
                    bp[(size_t)p * 2 * nb + 2 * n + h] =
                        2 * p + h < kb ? nb__bits_at(X, 2 * p + h, n) : 0;
    }
}

/* op(A)[i0 .. i0+mb) x [k0 .. k0+kb) as bf16 rows: A itself where it is bf16 by rows, else
   made in a (ld kb) */
static const unsigned short* nb__tiles_a(int isa, unsigned short* a, nb__mat A, int i0, int k0,
                                         int mb, int kb, int* lda) {
    const nb__mat X = nb__mat_at(A, i0, k0);
    int r, c;
    if (A.half && !A.trans) {
        *lda = X.ld;
        return (const unsigned short*)X.p;
    }
    *lda = kb;
    if (A.half) { /* stored as K x M: kb rows of mb */
        nb__transpose16(isa, a, (const unsigned short*)X.p, kb, mb, X.ld, kb);
    } else {
        for (r = 0; r < mb; r++)
            for (c = 0; c < kb; c++) a[(size_t)r * kb + c] = nb__bits_at(X, r, c);
    }
    return a;
}

static void nb__gemm1_tiles(int isa, int M, int N, int K, float alpha, nb__mat A, nb__mat B,
                            int acc, float* C, int ldc) {
    unsigned short a[NB__BT_M * NB__BT_K], b[NB__BT_K * NB__BT_N];
    int i0, j0, k0, r;
    if (K == 0 && !acc) /* an empty sum */
        for (r = 0; r < M; r++) memset(C + (size_t)r * ldc, 0, (size_t)N * sizeof *C);
    for (j0 = 0; j0 < N; j0 += NB__BT_N) {
        const int nb = N - j0 < NB__BT_N ? N - j0 : NB__BT_N;
        for (k0 = 0; k0 < K; k0 += NB__BT_K) {
            const int kb = K - k0 < NB__BT_K ? K - k0 : NB__BT_K;
            nb__tiles_b(isa, b, B, k0, j0, kb, nb);
            for (i0 = 0; i0 < M; i0 += NB__BT_M) {
                const int mb = M - i0 < NB__BT_M ? M - i0 : NB__BT_M;
                int lda;
                const unsigned short* ap = nb__tiles_a(isa, a, A, i0, k0, mb, kb, &lda);
                nb__bdot(isa, mb, nb, kb, ap, lda, b, nb, C + (size_t)i0 * ldc + j0, ldc,
                         acc || k0 > 0);
            }
        }
    }
    nb__tiles_scale(C, ldc, 0, M, N, alpha);
}
#endif

#if defined(_OPENMP) && !defined(NB_DOUBLE)
/* nb__gemm1_tiles on a team, called by each thread of a parallel region: B is packed once,
   each thread packing its slice of columns (blocks of 32) into its own stack buffer, and after
   a barrier each thread runs its rows of C (blocks of 32) against every thread's slice, A read
   (or made) once. A grid of per-thread GEMMs instead packs B once per block row of threads and
   reads A once per block column. K is taken kc at a time (what a slice buffer holds, a
   multiple of NB__BT_K; two barriers each), and within it NB__BT_K at a time as on one thread:
   the same bits. slices: nt addresses shared by the team. Only where nb__tiles_team_kc > 0. */
enum { NB__TILES_TEAM = 64 };
static int nb__tiles_team_kc(int N, int nt) {
    const int w = ((N + 31) / 32 + nt - 1) / nt * 32; /* the widest slice */
    if (nt > NB__TILES_TEAM || w > NB__BT_N) return 0;
    return NB__BT_K * NB__BT_N / w / NB__BT_K * NB__BT_K;
}
static void nb__gemm_tiles_team(int isa, size_t* slices, int M, int N, int K, float alpha,
                                nb__mat A, nb__mat B, int acc, float* C, int ldc) {
    unsigned short a[NB__BT_M * NB__BT_K], b[NB__BT_K * NB__BT_N];
    const int t = omp_get_thread_num(), nt = omp_get_num_threads();
    const int kc = nb__tiles_team_kc(N, nt);
    int r0, r1, c0, c1, s0, s1, k0, i0, kk, s;
    nb__split_in(M, nt, t, 32, &r0, &r1);
    if (!kc) { /* a smaller team than asked for, its slices too wide: each thread its rows */
        if (r1 > r0)
            nb__gemm1_tiles(isa, r1 - r0, N, K, alpha, nb__mat_at(A, r0, 0), B, acc,
                            C + (size_t)r0 * ldc, ldc);
        return;
    }
    nb__split_in(N, nt, t, 32, &c0, &c1);
    slices[t] = (size_t)b; /* an address, alive until the last barrier */
    for (k0 = 0; k0 < K; k0 += kc) {
        const int kb = K - k0 < kc ? K - k0 : kc;
        if (c1 > c0) nb__tiles_b(isa, b, B, k0, c0, kb, c1 - c0);
        NB__OMP(barrier)
        for (i0 = r0; i0 < r1; i0 += NB__BT_M) {
            const int mb = r1 - i0 < NB__BT_M ? r1 - i0 : NB__BT_M;
            for (kk = k0; kk < k0 + kb; kk += NB__BT_K) {
                const int kb2 = k0 + kb - kk < NB__BT_K ? k0 + kb - kk : NB__BT_K;
                int lda;
                const unsigned short* ap = nb__tiles_a(isa, a, A, i0, kk, mb, kb2, &lda);
                for (s = 0; s < nt; s++) { /* slice s: columns [s0, s1), ld s1 - s0 */
                    nb__split_in(N, nt, s, 32, &s0, &s1);
                    if (s1 > s0)
                        nb__bdot(isa, mb, s1 - s0, kb2, ap, lda,
                                 (const unsigned short*)slices[s] + (size_t)(kk - k0) * (s1 - s0),
                                 s1 - s0, C + (size_t)i0 * ldc + s0, ldc, acc || kk > 0);
                }
            }
        }
        NB__OMP(barrier) /* the slices are repacked (or, at the end, their stacks left) */
    }
    nb__tiles_scale(C, ldc, r0, r1, N, alpha); /* this thread's rows are complete */
}
#endif

/* One GEMM on the calling thread: float32, or bf16 numerics when bf16 (or an operand is
   half): on nb__bdot's kernel tiles - 1 when tiles (nb_attn_plan.bf16_gemm) and the call is one
   they take (nb__tiles_take), else the emulation. */
static void nb__gemm1(int bf16, int tiles, int M, int N, int K, nb_real alpha, nb__mat A,
                      nb__mat B, nb_real beta, nb_real* C, int ldc) {
#ifndef NB_DOUBLE
    if (tiles && nb__tiles_take(alpha, beta)) {
        nb__gemm1_tiles(tiles - 1, M, N, K, alpha, A, B, beta != 0, C, ldc);
        return;
    }
    if (bf16 || A.half || B.half) {
        nb__gemm1_bf16(M, N, K, alpha, A, B, beta, C, ldc);
        return;
    }
#endif
    (void)bf16; (void)tiles;
    nb__sgemm1(A.trans, B.trans, M, N, K, alpha, (const nb_real*)A.p, A.ld, (const nb_real*)B.p,
               B.ld, beta, C, ldc);
}

NBDEF int nb_blas_threads(void) {
#if !defined(NB_NO_BLAS) && defined(OPENBLAS_SEQUENTIAL)
    /* the pthread build runs every call on its own pool; the OpenMP build runs single-threaded
       when called from inside an OpenMP region, which is the only place we call it in parallel */
    if (openblas_get_parallel() == 1) return openblas_get_num_threads();
#endif
    return 1;
}

/* ---- GEMM backends: oneDNN matmul (NB_USE_DNNL) ----
   A stack with backend DNNL owns an nb__mm: oneDNN's engine and stream, and a matmul primitive
   per GEMM it has run (sizes, transposes, leading dimensions, beta, data type, thread count),
   created on first use (a millisecond or more each) and kept until nb_stack_free (NB__MM_CAP
   of them; past that the least recently used is replaced). The stack's lock serializes its
   oneDNN calls (a stream is not thread-safe), so threads sharing a stack stay correct.
   oneDNN's OpenMP runtime sizes its team from the calling thread's nthreads setting: it is
   set to ctx's thread count around each call and restored. */
typedef struct nb__mm nb__mm;
/* Where a GEMM runs: the context, the public function's name for messages, oneDNN's matmuls
   (NULL: the BLAS, or the portable bf16 path), bf16 numerics (an operand that is half implies
   them), and the portable bf16 path's kernel (nb_attn_plan.bf16_gemm: 0 the emulation, else
   nb__bdot's kernel + 1; ignored in float32). */
typedef struct nb__gemm_at {
    nb_ctx* ctx;
    const char* fn;
    nb__mm* mm;
    int bf16, tiles;
} nb__gemm_at;
static nb__gemm_at nb__at(nb_ctx* ctx, const char* fn, nb__mm* mm, int tiles, int bf16) {
    nb__gemm_at at;
    at.ctx = ctx; at.fn = fn; at.mm = mm; at.bf16 = bf16; at.tiles = bf16 ? tiles : 0;
    return at;
}
#if defined(NB_USE_DNNL) && !defined(NB_DOUBLE)
#include <oneapi/dnnl/dnnl.h>
enum { NB__MM_CAP = 48, NB__MM_KEY = 13 };
typedef struct nb__mm_prim {
    int key[NB__MM_KEY];
    dnnl_primitive_t prim;
    unsigned long long used;
    size_t bytes;                     /* what oneDNN allocates to run it (its scratchpad) */
} nb__mm_prim;
struct nb__mm {
    dnnl_engine_t eng;
    dnnl_stream_t stream;
    int native_bf16;                  /* a bf16 matrix kernel (AMX or AVX512-BF16) */
    char bf16_impl[40], f32_impl[40]; /* what oneDNN runs for a probe matmul */
    unsigned long long tick;
    int n;
    size_t bytes;                     /* sum of the primitives' bytes */
    nb__mm_prim prims[NB__MM_CAP];
#ifdef _OPENMP
    omp_lock_t lock;
#endif
};

static nb_result nb__dnnl_fail(nb_ctx* ctx, dnnl_status_t st, const char* what, int M, int N,
                               int K) {
    return nb__fail(ctx, st == dnnl_out_of_memory ? NB_ERR_NOMEM : NB_ERR_CONFIG,
                    "oneDNN: %s failed (status %d) for a %dx%dx%d matmul", what, (int)st, M, N,
                    K);
}

/* The memory descriptors of C (M x N, f32 or bf16) = op(A) op(B) for key k; transposes are
   strides. */
static dnnl_status_t nb__mm_descs(const int* k, dnnl_memory_desc_t* md) {
    const dnnl_data_type_t dt = k[9] ? dnnl_bf16 : dnnl_f32;
    dnnl_dims_t ad, bd, cd, as, bs, cs;
    dnnl_status_t st;
    ad[0] = k[2]; ad[1] = k[4]; as[0] = k[0] ? 1 : k[5]; as[1] = k[0] ? k[5] : 1;
    bd[0] = k[4]; bd[1] = k[3]; bs[0] = k[1] ? 1 : k[6]; bs[1] = k[1] ? k[6] : 1;
    cd[0] = k[2]; cd[1] = k[3]; cs[0] = k[7]; cs[1] = 1;
    if ((st = dnnl_memory_desc_init_by_strides(&md[0], 2, ad, dt, as))) return st;
    if ((st = dnnl_memory_desc_init_by_strides(&md[1], 2, bd, dt, bs))) return st;
    return dnnl_memory_desc_init_by_strides(&md[2], 2, cd, k[11] ? dnnl_bf16 : dnnl_f32, cs);
}

/* key: transa, transb, M, N, K, lda, ldb, ldc, beta != 0 (a sum post-op), bf16, threads,
   bf16 output, alpha != 1 (an output scale given at execution) */
static dnnl_status_t nb__mm_make(const nb__mm* mm, const int* k, dnnl_primitive_t* prim,
                                 const char** impl, size_t* bytes) {
    dnnl_memory_desc_t md[3];
    dnnl_matmul_desc_t desc;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t po = NULL;
    dnnl_primitive_desc_t pd = NULL;
    dnnl_status_t st;
    *prim = NULL;
    if ((st = nb__mm_descs(k, md)) || (st = dnnl_matmul_desc_init(&desc, &md[0], &md[1], NULL,
                                                                  &md[2])) ||
        (st = dnnl_primitive_attr_create(&attr)))
        return st;
    if (k[8] && !(st = dnnl_post_ops_create(&po)) && !(st = dnnl_post_ops_append_sum(po, 1.0f)))
        st = dnnl_primitive_attr_set_post_ops(attr, po);
    if (!st && k[12]) { /* C = alpha op(A) op(B) (+ C): the scale before the sum */
        const float runtime = DNNL_RUNTIME_F32_VAL;
        st = dnnl_primitive_attr_set_output_scales(attr, 1, 0, &runtime);
    }
    if (!st) st = dnnl_primitive_desc_create(&pd, &desc, attr, mm->eng, NULL);
    if (!st && impl) st = dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, impl);
    if (!st && bytes) {
        long long n = 0;
        st = dnnl_primitive_desc_query(pd, dnnl_query_memory_consumption_s64, 0, &n);
        *bytes = n > 0 ? (size_t)n : 0;
    }
    if (!st) st = dnnl_primitive_create(prim, pd);
    if (pd) dnnl_primitive_desc_destroy(pd); /* the primitive keeps its own copy */
    if (po) dnnl_post_ops_destroy(po);
    dnnl_primitive_attr_destroy(attr);
    return st;
}

static void nb__mm_free(nb__mm* mm, void* alloc_user) {
    int i;
    if (!mm) return;
    for (i = 0; i < mm->n; i++) dnnl_primitive_destroy(mm->prims[i].prim);
#ifdef _OPENMP
    omp_destroy_lock(&mm->lock);
#endif
    if (mm->stream) dnnl_stream_destroy(mm->stream);
    if (mm->eng) dnnl_engine_destroy(mm->eng);
    NB_FREE(mm, alloc_user);
}

/* The engine and stream, and which kernels oneDNN has here for bf16 and float32 (a probe). */
static nb_result nb__mm_create(nb_ctx* ctx, nb__mm** out, void* alloc_user) {
    nb__mm* mm = (nb__mm*)NB_MALLOC(sizeof(nb__mm), alloc_user);
    int probe[NB__MM_KEY] = {0, 1, 256, 256, 256, 256, 256, 256, 0, 0, 1}, bf;
    dnnl_status_t st;
    *out = NULL;
    NB__CHECK(!mm, NB_ERR_NOMEM, "nb_stack_init: out of memory (oneDNN state)");
    memset(mm, 0, sizeof *mm);
#ifdef _OPENMP
    omp_init_lock(&mm->lock);
#endif
    if ((st = dnnl_engine_create(&mm->eng, dnnl_cpu, 0)) ||
        (st = dnnl_stream_create(&mm->stream, mm->eng, dnnl_stream_default_flags))) {
        nb__mm_free(mm, alloc_user);
        return nb__dnnl_fail(ctx, st, "creating the CPU engine", 0, 0, 0);
    }
    for (bf = 0; bf < 2; bf++) {
        dnnl_primitive_t prim;
        const char* impl = "none";
        probe[9] = bf;
        if (nb__mm_make(mm, probe, &prim, &impl, NULL) == dnnl_success)
            dnnl_primitive_destroy(prim);
        else impl = "none";
        snprintf(bf ? mm->bf16_impl : mm->f32_impl, sizeof mm->f32_impl, "%s", impl);
    }
    mm->native_bf16 = strstr(mm->bf16_impl, "amx") || strstr(mm->bf16_impl, "avx512_core_bf16");
    *out = mm;
    return NB_OK;
}

/* The BF16 engine for backend DEFAULT, timed once per ctx (see nb_backend): the best of three
   512x512x512 GEMMs (after one warm-up) in bf16 on the portable path (its kernel tiles, as
   nb__gemm_at's: AMX's tiles where the CPU has them) and on oneDNN, and in float32 on the
   BLAS, with ctx's threads. Returns 2 for oneDNN, 1 for portable (also when the probe cannot
   run: out of memory). */
static nb_result nb__gemm_run(const nb__gemm_at* at, int M, int N, int K, nb_real alpha,
                              nb__mat A, nb__mat B, nb_real beta, nb_real* C, int ldc);
static int nb__bf16_engine(nb_ctx* ctx, nb__mm* mm, int tiles, void* alloc_user) {
    enum { n = 512 };
    float* f;
    unsigned short* h;
    double best[3] = {1e30, 1e30, 1e30};
    int e, rep, i;
    if (ctx->bf16_engine) return ctx->bf16_engine; /* decided by an earlier stack */
    f = (float*)NB_MALLOC(4 * n * n * sizeof(float), alloc_user); /* A, B, C; bf16 A|B */
    h = (unsigned short*)(f + 3 * n * n);
    if (f) {
        for (i = 0; i < 2 * n * n; i++) {
            h[i] = (unsigned short)(0x3f80u + (unsigned)(i % 61)); /* 1 + (i % 61) / 128 */
            f[i] = nb__bf16_float(h[i]);
        }
        for (rep = 0; rep < 4; rep++) {
            for (e = 0; e < 3; e++) {
                const double t0 = nb__seconds();
                const nb__gemm_at at =
                    nb__at(ctx, "nb_stack_init", e == 1 ? mm : NULL, tiles, e < 2);
                const nb_result rc =
                    e == 2 ? nb__gemm_run(&at, n, n, n, 1, nb__m(f, n, 0), nb__m(f + n * n, n, 1),
                                          0, f + 2 * n * n, n)
                           : nb__gemm_run(&at, n, n, n, 1, nb__mh(h, n, 0),
                                          nb__mh(h + n * n, n, 1), 0, f + 2 * n * n, n);
                const double dt = rc ? 1e30 : nb__seconds() - t0;
                if (rep > 0 && dt < best[e]) best[e] = dt;
            }
        }
        for (e = 0; e < 3; e++) ctx->gemm_probe_ms[e] = (float)(best[e] * 1e3);
        /* on the reported values, so that the rule can be checked from them exactly */
        ctx->bf16_engine = ctx->gemm_probe_ms[1] * 1.25f <= ctx->gemm_probe_ms[0] ? 2 : 1;
    }
    if (f) NB_FREE(f, alloc_user);
    return ctx->bf16_engine ? ctx->bf16_engine : 1;
}

/* The primitive for key, made on first use (in the lock). */
static nb__mm_prim* nb__mm_find(nb__mm* mm, const int* key, dnnl_status_t* st) {
    int i, lru = 0;
    dnnl_primitive_t prim;
    size_t bytes = 0;
    for (i = 0; i < mm->n; i++)
        if (!memcmp(mm->prims[i].key, key, sizeof mm->prims[i].key)) return &mm->prims[i];
    if ((*st = nb__mm_make(mm, key, &prim, NULL, &bytes))) return NULL;
    if (mm->n < NB__MM_CAP) {
        lru = mm->n++;
    } else {
        for (i = 1; i < mm->n; i++)
            if (mm->prims[i].used < mm->prims[lru].used) lru = i;
        dnnl_primitive_destroy(mm->prims[lru].prim);
        mm->bytes -= mm->prims[lru].bytes;
    }
    memcpy(mm->prims[lru].key, key, sizeof mm->prims[lru].key);
    mm->prims[lru].prim = prim;
    mm->prims[lru].bytes = bytes;
    mm->bytes += bytes;
    return &mm->prims[lru];
}

/* C = alpha op(A) op(B) + beta C (beta 0 or 1) on oneDNN with nt threads; A, B both bf16 or
   float; C float, or bf16 bits when c16. */
static nb_result nb__mm_gemm(const nb__gemm_at* at, int nt, int M, int N, int K, float alpha,
                             nb__mat A, nb__mat B, nb_real beta, void* C, int c16, int ldc) {
    nb_ctx* ctx = at->ctx;
    nb__mm* mm = at->mm;
    int key[NB__MM_KEY], i;
    dnnl_status_t st = dnnl_success;
    const char* what = "creating the primitive";
    key[0] = A.trans; key[1] = B.trans; key[2] = M; key[3] = N; key[4] = K; key[5] = A.ld;
    key[6] = B.ld; key[7] = ldc; key[8] = beta != 0; key[9] = A.half; key[10] = nt;
    key[11] = c16; key[12] = alpha != 1;
    {
#ifdef _OPENMP
        const int saved = omp_get_max_threads();
        omp_set_lock(&mm->lock);
        omp_set_num_threads(nt);
#endif
        nb__mm_prim* e = nb__mm_find(mm, key, &st);
        if (e) {
            dnnl_memory_desc_t md[4];
            dnnl_memory_t mem[4] = {NULL, NULL, NULL, NULL};
            void* ptr[4];
            dnnl_exec_arg_t args[4];
            const int nargs = key[12] ? 4 : 3;
            const dnnl_dims_t one = {1};
            ptr[0] = (void*)(size_t)A.p; ptr[1] = (void*)(size_t)B.p; ptr[2] = C; ptr[3] = &alpha;
            args[0].arg = DNNL_ARG_SRC; args[1].arg = DNNL_ARG_WEIGHTS; args[2].arg = DNNL_ARG_DST;
            args[3].arg = DNNL_ARG_ATTR_OUTPUT_SCALES;
            e->used = ++mm->tick;
            what = "executing";
            st = nb__mm_descs(key, md);
            if (!st) st = dnnl_memory_desc_init_by_tag(&md[3], 1, one, dnnl_f32, dnnl_a);
            for (i = 0; i < nargs && !st; i++)
                st = dnnl_memory_create(&mem[i], &md[i], mm->eng, ptr[i]);
            for (i = 0; i < nargs; i++) args[i].memory = mem[i];
            if (!st) st = dnnl_primitive_execute(e->prim, mm->stream, nargs, args);
            if (!st) st = dnnl_stream_wait(mm->stream);
            for (i = 0; i < nargs; i++)
                if (mem[i]) dnnl_memory_destroy(mem[i]);
        }
#ifdef _OPENMP
        omp_set_num_threads(saved);
        omp_unset_lock(&mm->lock);
#endif
    }
    return st ? nb__dnnl_fail(ctx, st, what, M, N, K) : NB_OK;
}
#else
struct nb__mm { int native_bf16; }; /* no oneDNN in this build: never created */
#endif

/* The threads' grid for C (M x N, K deep): pr blocks of rows by pc of columns, pr pc = nt.
   Each thread's single-threaded BLAS call packs its block's rows of op(A) and columns of op(B),
   so the team packs A pc times and B pr times: pc M K + pr K N values. Blocks of rows alone
   (of columns when N > M) pack the other operand in every thread: at 16 threads and
   M = N = 1024, a thread's 64 rows of the FFN's dX (K = 2816) pack all 11.5 MB of its weights,
   a share one core runs at 81 GFLOP/s against 92 for the same flops as a 256 x 256 block
   (bench/README). So that split is kept while its blocks are at least NB__GEMM_THIN rows (or
   columns) deep, and otherwise the grid that packs least is taken (ties: more rows; with 2
   threads that is the split itself). */
enum { NB__GEMM_THIN = 128 };
static void nb__gemm_grid(int M, int N, int K, int nt, int* pr, int* pc) {
    double best = -1;
    int a;
    *pr = M >= N ? nt : 1;
    *pc = M >= N ? 1 : nt;
    if ((M >= N ? M : N) / nt >= NB__GEMM_THIN) return;
    for (a = nt; a >= 1; a--) { /* a blocks of rows, nt / a of columns */
        const double packed = (double)(nt / a) * M * K + (double)a * K * N;
        if (nt % a || (best >= 0 && packed >= best)) continue;
        best = packed;
        *pr = a;
        *pc = nt / a;
    }
}

/* The team a GEMM at `at` runs on: ctx's threads, one inside a parallel region */
static int nb__gemm_threads(const nb__gemm_at* at) {
#ifdef _OPENMP
    if (omp_in_parallel()) return 1;
#endif
    return nb_num_threads(at->ctx);
}

/* nb_gemm and nb_gemm_bf16, and the sublayers' GEMMs: float32, or bf16 numerics when bf16 (or
   an operand is half). On oneDNN when the plan has it (mm) and both operands are of the plan's
   precision, else BLAS (the portable path for bf16). */
static nb_result nb__gemm_run(const nb__gemm_at* at, int M, int N, int K, nb_real alpha,
                              nb__mat A, nb__mat B, nb_real beta, nb_real* C, int ldc) {
    const int bf16 = at->bf16, nt = nb__gemm_threads(at);
    nb_result rc = nb__check_gemm(at->ctx, at->fn, M, N, K, A, B, C, ldc);
    if (rc) return rc;
#if defined(NB_USE_DNNL) && !defined(NB_DOUBLE)
    if (at->mm && A.half == B.half && A.half == (bf16 != 0) && (beta == 0 || beta == 1))
        return nb__mm_gemm(at, nt, M, N, K, (float)alpha, A, B, beta, C, 0, ldc);
#endif
    /* A threaded BLAS parallelizes the call itself; otherwise we split C into a grid of nt
       blocks (nb__gemm_grid) and call the single-threaded BLAS (or the tiles) once per thread.
       Each element of C is computed by one call: deterministic for a given nt; the tiles'
       blocks start at multiples of 32, so their bits do not depend on nt (nb__gemm1_tiles). */
    if (nt == 1 || (!at->tiles && nb_blas_threads() > 1) || (double)M * N * K < 65536.0) {
        nb__gemm1(bf16, at->tiles, M, N, K, alpha, A, B, beta, C, ldc);
        return NB_OK;
    }
#if defined(_OPENMP) && !defined(NB_DOUBLE)
    if (at->tiles && nb__tiles_take(alpha, beta) && nb__tiles_team_kc(N, nt)) {
        size_t slices[NB__TILES_TEAM];
        NB__OMP(parallel num_threads(nt))
        nb__gemm_tiles_team(at->tiles - 1, slices, M, N, K, alpha, A, B, beta != 0, C, ldc);
        return NB_OK;
    }
#endif
    NB__OMP(parallel num_threads(nt))
    {
        const int t = omp_get_thread_num(), unit = at->tiles ? 32 : 1;
        int pr, pc, r0, r1, c0, c1;
        nb__gemm_grid(M, N, K, omp_get_num_threads(), &pr, &pc); /* the team it got */
        nb__split_in(M, pr, t / pc, unit, &r0, &r1);
        nb__split_in(N, pc, t % pc, unit, &c0, &c1);
        if (r1 > r0 && c1 > c0)
            nb__gemm1(bf16, at->tiles, r1 - r0, c1 - c0, K, alpha, nb__mat_at(A, r0, 0),
                      nb__mat_at(B, 0, c0), beta, C + (size_t)r0 * ldc + c0, ldc);
    }
    return NB_OK;
}

static nb_result nb__gemm(const nb__gemm_at* at, int M, int N, int K, nb_real alpha, nb__mat A,
                          nb__mat B, nb_real beta, nb_real* C, int ldc) {
    const double t0 = nb__prof_begin(at->ctx);
    const nb_result rc = nb__gemm_run(at, M, N, K, alpha, A, B, beta, C, ldc);
    nb__prof_end(at->ctx, NB_PROF_GEMM, t0);
    return rc;
}

/* Whether GEMMs at `at` write bf16 outputs themselves (gemm.bf16_outputs, the packed
   attention's dO): oneDNN's bf16 matmul does (half the bytes written and read back); elsewhere
   the caller rounds the float output where it next reads it. NB__TEST_GEMM16 (tests only)
   makes every bf16 GEMM write them (nb__gemm16 then rounds the portable path's float result),
   so that the callers' paths for it run on CPUs without a bf16 matmul. */
static int nb__gemm_writes16(const nb__gemm_at* at) {
#ifdef NB__TEST_GEMM16
    if (at->bf16) return 1;
#endif
#if defined(NB_USE_DNNL) && !defined(NB_DOUBLE)
    return at->mm != NULL && at->bf16;
#else
    (void)at;
    return 0;
#endif
}

/* C (bf16 bits, ld ldc) = bf16(op(A) op(B)), A and B bf16: only where nb__gemm_writes16(at) */
static nb_result nb__gemm16(const nb__gemm_at* at, int M, int N, int K, nb__mat A, nb__mat B,
                            unsigned short* C, int ldc) {
    const double t0 = nb__prof_begin(at->ctx);
    nb_result rc = nb__check_gemm(at->ctx, at->fn, M, N, K, A, B, C, ldc);
    NB_ASSERT(nb__gemm_writes16(at) && A.half && B.half);
#if defined(NB_USE_DNNL) && !defined(NB_DOUBLE)
    if (!rc && at->mm) rc = nb__mm_gemm(at, nb__gemm_threads(at), M, N, K, 1, A, B, 0, C, 1, ldc);
#endif
#ifdef NB__TEST_GEMM16
    if (!rc && !at->mm) {
        void* user = at->ctx ? at->ctx->alloc_user : NULL;
        float* f = (float*)NB_MALLOC(sizeof(float) * (size_t)M * N, user);
        int r;
        rc = f ? nb__gemm_run(at, M, N, K, 1, A, B, 0, f, N) : NB_ERR_NOMEM;
        for (r = 0; r < M && !rc; r++) nb__row_bf16(C + (size_t)r * ldc, f + (size_t)r * N, N);
        if (f) NB_FREE(f, user);
    }
#endif
    nb__prof_end(at->ctx, NB_PROF_GEMM, t0);
    return rc;
}

/* Checks and resolves a description's gemm group: a known precision (BF16 only in a float32
   build), bf16_weights and bf16_outputs 0 or 1 and 1 only with BF16, a known backend. A plan
   (stack = 0) runs the BLAS or the portable bf16 path: only a stack puts its GEMMs on oneDNN. */
static nb_result nb__check_gemm_config(nb_ctx* ctx, const char* fn, nb_gemm_config* g,
                                       int stack) {
    if (g->precision == NB_PRECISION_DEFAULT) g->precision = NB_PRECISION_FP32;
    NB__CHECK(g->precision != NB_PRECISION_FP32 && g->precision != NB_PRECISION_BF16,
              NB_ERR_CONFIG, "%s: unknown gemm.precision %d", fn, (int)g->precision);
    NB__CHECK(g->bf16_weights < 0 || g->bf16_weights > 1, NB_ERR_CONFIG,
              "%s: gemm.bf16_weights (%d) must be 0 or 1", fn, g->bf16_weights);
    NB__CHECK(g->bf16_weights && g->precision != NB_PRECISION_BF16, NB_ERR_CONFIG,
              "%s: gemm.bf16_weights needs precision BF16 (a float32 GEMM reads the float32 "
              "weights)", fn);
    NB__CHECK(g->bf16_outputs < 0 || g->bf16_outputs > 1, NB_ERR_CONFIG,
              "%s: gemm.bf16_outputs (%d) must be 0 or 1", fn, g->bf16_outputs);
    NB__CHECK(g->bf16_outputs && g->precision != NB_PRECISION_BF16, NB_ERR_CONFIG,
              "%s: gemm.bf16_outputs needs precision BF16 (a float32 stack keeps float32 "
              "outputs)", fn);
    NB__CHECK((unsigned)g->backend > NB_BACKEND_DNNL, NB_ERR_CONFIG, "%s: unknown gemm.backend %d",
              fn, (int)g->backend);
    NB__CHECK(!stack && g->backend == NB_BACKEND_DNNL, NB_ERR_CONFIG, "%s: a plan runs the BLAS "
              "(or the portable bf16 path); oneDNN runs a stack's GEMMs (nb_stack_desc.gemm."
              "backend)", fn);
#ifdef NB_DOUBLE
    NB__CHECK(g->precision == NB_PRECISION_BF16, NB_ERR_CONFIG, "%s: precision BF16 is a "
              "float32-build feature (this build defines NB_DOUBLE)", fn);
#endif
    return NB_OK;
}

NBDEF nb_result nb_gemm(nb_ctx* ctx, int transa, int transb, int M, int N, int K,
                        nb_real alpha, const nb_real* A, int lda, const nb_real* B, int ldb,
                        nb_real beta, nb_real* C, int ldc) {
    const nb__gemm_at at = nb__at(ctx, "nb_gemm", NULL, 0, 0);
    return nb__gemm(&at, M, N, K, alpha, nb__m(A, lda, transa),
                    nb__m(B, ldb, transb), beta, C, ldc);
}

NBDEF nb_result nb_gemm_bf16(nb_ctx* ctx, int transa, int transb, int M, int N, int K,
                             nb_real alpha, const nb_real* A, int lda, const nb_real* B,
                             int ldb, nb_real beta, nb_real* C, int ldc) {
    nb_gemm_config bf16 = {NB_PRECISION_BF16, 0, NB_BACKEND_DEFAULT, 0}; /* refused: NB_DOUBLE */
    nb_result rc = nb__check_gemm_config(ctx, "nb_gemm_bf16", &bf16, 0);
    if (rc) return rc;
    const nb__gemm_at at = nb__at(ctx, "nb_gemm_bf16", NULL, nb__bf16_gemm_kernel(), 1);
    return nb__gemm(&at, M, N, K, alpha, nb__m(A, lda, transa),
                    nb__m(B, ldb, transb), beta, C, ldc);
}

NBDEF const char* nb_bf16_kernels(void) {
    return nb__bf16_gemm_kernel() == NB__ATTN_AMX
               ? "normblocks' bf16 GEMM on AMX tiles (edges AVX512-BF16), attention products "
                 "bf16 AMX tiles"
               : "emulated: bf16-rounded operands in blocks, float32 GEMM";
}

/* ---- RoPE ----------------------------------------------------------------------------------- */

/* nb_rope, and with x16 the bf16 bits of the first w16 columns of every rotated row into x16 (ld
   w16) while the position's B rows are still in cache: a BF16 attention's GEMM operand written by
   the pass that finishes it, instead of a conversion pass over B*T rows from memory. */
static nb_result nb__rope(nb_ctx* ctx, nb_real* x, int ldx, int B, int T, int heads, int head_dim,
                          nb_real theta, int inverse, unsigned short* x16, int w16);

NBDEF nb_result nb_rope(nb_ctx* ctx, nb_real* x, int ldx, int B, int T, int heads, int head_dim,
                        nb_real theta, int inverse) {
    return nb__rope(ctx, x, ldx, B, T, heads, head_dim, theta, inverse, NULL, 0);
}

static nb_result nb__rope(nb_ctx* ctx, nb_real* x, int ldx, int B, int T, int heads, int head_dim,
                          nb_real theta, int inverse, unsigned short* x16, int w16) {
    NB__CHECK(B <= 0 || T <= 0 || heads <= 0 || head_dim <= 0, NB_ERR_SHAPE,
              "nb_rope: B, T, heads, head_dim (%d, %d, %d, %d) must be > 0", B, T, heads,
              head_dim);
    NB__CHECK(head_dim % 2, NB_ERR_SHAPE, "nb_rope: head_dim (%d) must be even", head_dim);
    NB__CHECK(ldx < nb__mulll(heads, head_dim), NB_ERR_SHAPE,
              "nb_rope: ldx (%d) < heads*head_dim (%lld)", ldx, nb__mulll(heads, head_dim));
    NB__CHECK(!(theta > 1) || !nb__fin((double)theta), NB_ERR_VALUE,
              "nb_rope: theta (%g) must be finite and > 1", (double)theta);
    NB__CHECK(!x, NB_ERR_NULL, "nb_rope: x is required");
    {
        const int half = head_dim / 2;
        const double log_theta = log((double)theta), sign = inverse ? -1 : 1;
        int t;
        NB__OMP(parallel for schedule(static) num_threads(nb_num_threads(ctx))
                if((size_t)B * T * heads * head_dim >= NB__PAR_MIN))
        for (t = 0; t < T; t++) {
            nb_real c[64], s[64]; /* angles of one position, 64 pairs at a time */
            int i0, i, b, h;
            for (i0 = 0; i0 < half; i0 += 64) {
                const int n = half - i0 < 64 ? half - i0 : 64;
                for (i = 0; i < n; i++) {
                    /* phi = t * theta^(-2i/d_k), in double like the reference's fp32-or-better tables */
                    const double phi = t * exp(-2.0 * (i0 + i) / head_dim * log_theta);
                    c[i] = (nb_real)cos(phi);
                    s[i] = (nb_real)(sign * sin(phi));
                }
                for (b = 0; b < B; b++)
                    for (h = 0; h < heads; h++) {
                        nb_real* v = x + ((size_t)b * T + t) * ldx + (size_t)h * head_dim + i0;
                        for (i = 0; i < n; i++) {
                            const nb_real a = v[i], z = v[i + half];
                            v[i] = a * c[i] - z * s[i];
                            v[i + half] = z * c[i] + a * s[i];
                        }
                    }
            }
            if (x16)
                for (b = 0; b < B; b++)
                    nb__row_bf16(x16 + ((size_t)b * T + t) * w16, x + ((size_t)b * T + t) * ldx,
                                 w16);
        }
    }
    return NB_OK;
}

/* ---- attention sublayer --------------------------------------------------------------------- */

#define NB__TILE 64 /* query rows per attention task */
/* row tiles of T (T + NB__TILE - 1 would overflow for T near INT_MAX) */
static int nb__tiles(int T) { return T / NB__TILE + (T % NB__TILE != 0); }
/* A thread's float tiles of NB__TILE x T in scratch: P (or the scores), dP; with the softcap
   also its derivative (nb__attn_item.fac) */
static size_t nb__tile_floats(const nb_attn_plan* pl, int T) {
    return (size_t)(pl->desc.attn.softcap > 0 ? 3 : 2) * NB__TILE * (size_t)T;
}

/* Where everything lives in the caller's cache and scratch for a given (B, T). The same
   function sizes the buffers at plan time (base NULL) and carves them at run time. */
typedef struct nb__attn_mem {
    nb_real *hdr, *qkv, *raw, *stat[4], *o, *c, *probs, *lse; /* cache */
    nb_real *cg, *sig;      /* cache: C after the output gate, sigmoid(G) (BT x G) */
    nb_real* hs;            /* cache: per (batch, head, row tile) the largest logit, then the
                               sum of the first key's probabilities (nb_attn_head_stats), then
                               of the sink's (nb_attn_sink_mass) */
    nb_real* psink;         /* cache (sinks only): each query row's sink probability (B*H*T) */
    nb_real* dsink;         /* scratch (learned sinks): each row's term of dz_h (B*H*T) */
    const nb_real* sinks;   /* the learned sink logits z_h (the call's params; NULL: z = 0) */
    nb_real* qk0;           /* cache: Q|K before qk_scale (BT x 2d) */
    nb_real *dqkv, *dc, *tiles, *partials, *kv_parts, *ones; /* scratch */
    nb_real* qke;           /* scratch: qk_scale's gradient terms (BT x d) */
    /* BF16 only: the GEMM operands as bf16 (cache: W_qkv, W_o, x, Q|K|V after RoPE, C;
       scratch: dout, dQKV); qkv (float) is then the forward's, in dqkv's scratch */
    unsigned short *wqkv16, *wo16, *x16, *qkv16, *c16, *dout16, *dqkv16;
    /* BF16 without a C norm or a gate: c16 again, written by the core task by task while O's
       tile is in cache (NULL: a conversion pass after the core) */
    unsigned short* o16;
    /* The packed path's backward: dO's bf16 copy already made (by the GEMM that wrote dC) */
    int do16_made;
    /* BF16 scratch: the core's operands for nb__bdot, per (batch, KV head) K and V as B
       operands (kt, vt: of K^T and V^T; kp, vp: of K and V), per (batch, head) Q^T and dO^T
       (qt, dot: d_k x T32), per thread the tile's P or dS rows and P's and dS's row pairs
       (pt), and the task's dK^T and dV^T in float (kvt) */
    unsigned short *kt16, *vt16, *kp16, *vp16, *qt16, *dot16, *pt16;
    nb_real* kvt;
    size_t n_cache, n_scratch;
} nb__attn_mem;

/* T rounded up to 32 (AMX's tile depth): the bf16 operands' padded length; as a size for the
   plan's buffers (max_seq may be INT_MAX there; a run's T has its scratch, so it fits int) */
static size_t nb__t32z(int T) { return (size_t)T + (size_t)(-(unsigned)T & 31u); }
static int nb__t32(int T) { return (int)nb__t32z(T); }
/* The packed path's per-thread bf16 tile (pt): three buffers of this many T32-wide rows (a
   tile's rows rounded up to 32), for P or dS, P's row pairs and dS's row pairs */
static size_t nb__pt_rows(int T) { return nb__t32z(T) < NB__TILE ? nb__t32z(T) : NB__TILE; }
static unsigned short* nb__pt(const nb__attn_mem* m, int T, int thread) {
    return m->pt16 + (size_t)thread * 3 * nb__pt_rows(T) * nb__t32z(T);
}

static int nb__site_heads(const nb_attn_plan* pl, int site) {
    return site == 1 || site == 2 ? pl->desc.n_kv_heads : pl->desc.n_heads; /* 0 Q 1 K 2 V 3 C */
}
static int nb__site_on(const nb_attn_plan* pl, int site) {
    return (pl->desc.attn.sites >> site) & 1;
}
/* segment width of a site's norm: a head, or the whole slice */
static int nb__site_seg(const nb_attn_plan* pl, int site) {
    return pl->desc.attn.site_width == NB_WIDTH_FULL ? nb__site_heads(pl, site) * pl->head_dim
                                           : pl->head_dim;
}
/* column offset of a site's slice inside a qkv row (C lives in its own buffer) */
static int nb__site_offset(const nb_attn_plan* pl, int site) {
    return site == 0 ? 0 : site == 1 ? pl->desc.d_model
                                     : pl->desc.d_model + pl->desc.n_kv_heads * pl->head_dim;
}

static nb_real* nb__take(nb_real* base, size_t* used, size_t n) {
    nb_real* p = base ? base + *used : NULL;
    *used = nb__addz(*used, NB__PAD(n)); /* keep every buffer 64-byte aligned to the base */
    return p;
}
/* n bf16 values (two to a float of the buffer) */
static unsigned short* nb__take16(nb_real* base, size_t* used, size_t n) {
    return (unsigned short*)nb__take(base, used, n / 2 + n % 2);
}
/* A GEMM operand: the bf16 copy h when the plan made one (BF16), else the values f */
static nb__mat nb__op(const nb_real* f, const unsigned short* h, int ld, int trans) {
    return h ? nb__mh(h, ld, trans) : nb__m(f, ld, trans);
}

/* ---- attention sublayer: cache headers ----
   The first NB__HDR values of every cache (attention, FFN, stack) say what wrote it: a forward
   clears the header first and writes it last, and a backward (or a diagnostic) reads the cache
   only when the header names its plan or stack and its B and T. A cache of another plan or
   stack, of another (B, T), of a failed forward, or never written is then an error, not a read
   of a different layout. */
typedef struct nb__hdr { unsigned long long magic, id; int B, T; } nb__hdr;
#define NB__HDR ((size_t)16) /* values: 64 bytes of float, so the buffers after stay aligned */
typedef char nb__hdr_fits[sizeof(nb__hdr) <= NB__HDR * sizeof(float) ? 1 : -1];
enum { NB__MAGIC_ATTN = 0x41, NB__MAGIC_FFN = 0x46, NB__MAGIC_STACK = 0x53 };

/* hash combine (unsigned wrap-around is intended) */
static unsigned long long nb__hash(unsigned long long h, unsigned long long v) {
    return h ^ (v + 0x9E3779B97F4A7C15ULL + (h << 6) + (h >> 2));
}
static unsigned long long nb__hashd(unsigned long long h, double v) {
    unsigned long long u = 0;
    memcpy(&u, &v, sizeof u < sizeof v ? sizeof u : sizeof v);
    return nb__hash(h, u);
}
static void nb__hdr_put(nb_real* at, int magic, unsigned long long id, int B, int T) {
    nb__hdr h;
    memset(&h, 0, sizeof h);
    h.magic = magic ? 0x6E62000000000000ULL + (unsigned)magic * 16 + sizeof(nb_real) : 0;
    h.id = id; h.B = B; h.T = T;
    memcpy(at, &h, sizeof h);
}
static int nb__hdr_ok(const nb_real* at, int magic, unsigned long long id, int B, int T) {
    nb_real want[NB__HDR];
    nb__hdr_put(want, magic, id, B, T);
    return memcmp(at, want, sizeof(nb__hdr)) == 0;
}

/* The trace hook (nb_ctx.trace) with name prefixed by the stack's scope, when set. */
static void nb__trace(nb_ctx* ctx, const char* name, const nb_real* x, int rows, int cols) {
    char full[64];
    if (!ctx || !ctx->trace) return;
    snprintf(full, sizeof full, "%.*s%s", (int)sizeof ctx->trace_scope, ctx->trace_scope, name);
    ctx->trace(ctx->trace_user, full, x, rows, cols);
}

/* The attention backward runs one task per (batch, KV head, part). With fewer (batch, KV head)
   pairs than threads each pair is split into ceil(threads / pairs) parts that share out its
   (query head, row tile) items; part 0 accumulates dK/dV in place, the others in their own
   partial buffers (pairs * (parts - 1) < threads of them), summed in part order afterwards. */
static int nb__kv_split(const nb_attn_plan* pl, int B, int nt) {
    const int pairs = B * pl->desc.n_kv_heads;
    return pairs >= nt ? 1 : (nt + pairs - 1) / pairs;
}

static void nb__attn_carve(const nb_attn_plan* pl, int B, int T, int nt, nb_real* cache,
                           nb_real* scratch, nb__attn_mem* m) {
    const size_t BT = nb__mulz((size_t)B, (size_t)T), P = (size_t)pl->qkv_width;
    const size_t d = (size_t)pl->desc.d_model, BH = nb__mulz((size_t)B, (size_t)pl->desc.n_heads);
    const int stats = nb__norm_kinds[pl->desc.norm].stats, half = NB__BF16(pl);
    const int csite = nb__site_on(pl, 3), gate = pl->gate_width > 0;
    size_t cu = 0, su = 0;
    int site, maxw = 1;
    memset(m, 0, sizeof *m);
    m->hdr = nb__take(cache, &cu, NB__HDR);
    if (half) m->qkv16 = nb__take16(cache, &cu, nb__mulz(BT, P));
    else m->qkv = nb__take(cache, &cu, nb__mulz(BT, P));
    if ((pl->desc.attn.sites & NB_SITES_QKV) || pl->desc.attn.clip_qkv > 0) /* their backward */
        m->raw = nb__take(cache, &cu, nb__mulz(BT, P));
    for (site = 0; site < 4; site++)
        if (nb__site_on(pl, site)) {
            const int seg = nb__site_seg(pl, site);
            m->stat[site] = nb__take(cache, &cu, nb__mulz(nb__mulz((size_t)stats, BT),
                                     (size_t)(nb__site_heads(pl, site) * pl->head_dim / seg)));
            if (seg > maxw) maxw = seg;
        }
    /* O -> C = Nc(O) -> C' = C sigmoid(G) -> W_o. In BF16 the GEMMs read C''s bf16 copy: a
       stage stays cached in float only for a later stage's backward (O for the C norm's, the
       gate's input for the gate's) */
    m->o = nb__take(half && !csite && !gate ? scratch : cache, half && !csite && !gate ? &su : &cu,
                    nb__mulz(BT, d));
    m->c = !csite ? m->o : nb__take(half && !gate ? scratch : cache, half && !gate ? &su : &cu,
                                    nb__mulz(BT, d));
    m->cg = !gate ? m->c : nb__take(half ? scratch : cache, half ? &su : &cu, nb__mulz(BT, d));
    if (gate) m->sig = nb__take(cache, &cu, nb__mulz(BT, (size_t)pl->gate_width));
    m->hs = nb__take(cache, &cu, nb__mulz(3 * BH, (size_t)nb__tiles(T)));
    if (pl->desc.attn.sink) m->psink = nb__take(cache, &cu, nb__mulz(BH, (size_t)T));
    if (pl->desc.attn.sink == NB_SINK_LEARNED) m->dsink = nb__take(scratch, &su, nb__mulz(BH, (size_t)T));
    if (half) {
        if (!pl->desc.gemm.bf16_weights) { /* else the caller's: nb__attn_weights16 */
            m->wqkv16 = nb__take16(cache, &cu, nb__mulz(P, d));
            m->wo16 = nb__take16(cache, &cu, nb__mulz(d, d));
        }
        m->x16 = nb__take16(cache, &cu, nb__mulz(BT, d));
        m->c16 = nb__take16(cache, &cu, nb__mulz(BT, d));
        m->dout16 = nb__take16(scratch, &su, nb__mulz(BT, d));
        m->dqkv16 = nb__take16(scratch, &su, nb__mulz(BT, P));
    }
    if (pl->desc.attn.memory == NB_ATTN_MEMORY_PROBS)
        m->probs = nb__take(cache, &cu, nb__mulz(nb__mulz(BH, (size_t)T), (size_t)T));
    else
        m->lse = nb__take(cache, &cu, nb__mulz(BH, (size_t)T));
    m->dqkv = nb__take(scratch, &su, nb__mulz(BT, P));
    if (half) m->qkv = m->dqkv;
    m->dc = nb__take(scratch, &su, nb__mulz(BT, d));
    m->tiles = nb__take(scratch, &su, nb__mulz((size_t)nt, nb__tile_floats(pl, T)));
    m->partials = nb__take(scratch, &su, nb__mulz((size_t)nt, nb__part_stride(maxw)));
    /* dK/dV partial sums of the extra parts when B * n_kv_heads < threads (nb__kv_split) */
    m->kv_parts = nb__take(scratch, &su, nb__mulz((size_t)(pl->desc.n_kv_heads < nt ? nt - 1 : 0),
                                                  nb__mulz((size_t)T, 2 * (size_t)pl->head_dim)));
    if (half) {
        const size_t dk = (size_t)pl->head_dim, T32 = nb__t32z(T);
        const size_t kv = nb__mulz((size_t)B * pl->desc.n_kv_heads, T32);
        const size_t qh = nb__mulz(nb__mulz(BH, T32), dk);
        m->kt16 = nb__take16(scratch, &su, nb__mulz(kv, dk + dk % 2));
        m->vt16 = nb__take16(scratch, &su, nb__mulz(kv, dk + dk % 2));
        m->kp16 = nb__take16(scratch, &su, nb__mulz(kv, dk));
        m->vp16 = nb__take16(scratch, &su, nb__mulz(kv, dk));
        m->qt16 = nb__take16(scratch, &su, qh);
        m->dot16 = nb__take16(scratch, &su, qh);
        m->pt16 = nb__take16(scratch, &su, nb__mulz((size_t)nt * 3 * nb__pt_rows(T), T32));
        m->kvt = nb__take(scratch, &su, nb__mulz((size_t)nt * 2 * dk, (size_t)T));
    }
    if (pl->desc.attn.qk_scale) {
        m->qk0 = nb__take(cache, &cu, nb__mulz(BT, 2 * d));
        m->qke = nb__take(scratch, &su, nb__mulz(BT, d));
    }
    if (pl->desc.attn.bias || pl->desc.attn.qk_scale) /* bias and scale gradients: column sums */
        m->ones = nb__take(scratch, &su, BT);
    m->n_cache = cu;
    m->n_scratch = su;
}

/* What a cache depends on: the resolved description and the planned maximum (an equal plan
   made again, or a copy, is the same plan). */
static unsigned long long nb__attn_id(const nb_attn_plan* pl) {
    const nb_attn_desc* d = &pl->desc;
    unsigned long long h = 0x617474ULL;
    h = nb__hash(h, (unsigned)d->d_model); h = nb__hash(h, (unsigned)d->n_heads);
    h = nb__hash(h, (unsigned)d->n_kv_heads); h = nb__hash(h, d->attn.sites);
    h = nb__hash(h, (unsigned)d->attn.site_width); h = nb__hash(h, (unsigned)d->norm);
    h = nb__hash(h, (unsigned)d->no_gain); h = nb__hash(h, (unsigned)d->attn.rope);
    h = nb__hash(h, (unsigned)d->attn.non_causal); h = nb__hash(h, (unsigned)d->attn.memory);
    h = nb__hash(h, d->attn.bias); h = nb__hashd(h, (double)d->eps);
    h = nb__hashd(h, (double)d->attn.rope_theta); h = nb__hash(h, (unsigned)d->gemm.precision);
    h = nb__hash(h, (unsigned)d->gemm.bf16_weights);
    h = nb__hash(h, (unsigned)d->attn.qk_scale); h = nb__hashd(h, (double)d->attn.softmax_scale);
    h = nb__hash(h, (unsigned)d->attn.gate); h = nb__hash(h, (unsigned)d->attn.sink);
    h = nb__hashd(h, (double)d->attn.clip_qkv); h = nb__hashd(h, (double)d->attn.softcap);
    h = nb__hash(h, (unsigned)pl->max_batch); h = nb__hash(h, (unsigned)pl->max_seq);
    return nb__hash(h, pl->n_cache);
}

/* An attention description's defaults filled in and every field checked. */
static nb_result nb__attn_resolve(nb_ctx* ctx, nb_attn_desc* d) {
    if (d->n_kv_heads == 0) d->n_kv_heads = d->n_heads;
    if (d->attn.site_width == NB_WIDTH_DEFAULT) d->attn.site_width = NB_WIDTH_PER_HEAD;
    if (d->norm == NB_NORM_DEFAULT) d->norm = NB_NORM_RMS;
    if (d->norm == NB_NORM_L2) d->no_gain = 1; /* the kind has none */
    if (nb__is0(d->eps)) d->eps = (nb_real)1e-5;
    if (nb__is0(d->attn.rope_theta)) d->attn.rope_theta = 10000;
    NB__CHECK(d->d_model <= 0 || d->n_heads <= 0 || d->n_kv_heads <= 0, NB_ERR_CONFIG,
              "nb_attn_plan_make: d_model (%d), n_heads (%d), n_kv_heads (%d) must be > 0",
              d->d_model, d->n_heads, d->n_kv_heads);
    NB__CHECK(d->d_model % d->n_heads, NB_ERR_CONFIG,
              "nb_attn_plan_make: d_model (%d) is not divisible by n_heads (%d)", d->d_model,
              d->n_heads);
    NB__CHECK(d->n_heads % d->n_kv_heads, NB_ERR_CONFIG,
              "nb_attn_plan_make: n_heads (%d) is not divisible by n_kv_heads (%d)", d->n_heads,
              d->n_kv_heads);
    NB__CHECK(d->attn.rope && (d->d_model / d->n_heads) % 2, NB_ERR_CONFIG,
              "nb_attn_plan_make: RoPE needs an even head dimension (d_k = %d)",
              d->d_model / d->n_heads);
    NB__CHECK(d->attn.sites & ~(unsigned)NB_SITES_QKVC, NB_ERR_CONFIG,
              "nb_attn_plan_make: attn.sites (0x%x) has bits other than NB_SITE_Q|K|V|C",
              d->attn.sites);
    NB__CHECK(d->attn.bias & ~(unsigned)(NB_ATTN_BIAS_QKV | NB_ATTN_BIAS_OUT), NB_ERR_CONFIG,
              "nb_attn_plan_make: attn.bias (0x%x) has bits other than NB_ATTN_BIAS_QKV|OUT",
              d->attn.bias);
    if (nb__check_gemm_config(ctx, "nb_attn_plan_make", &d->gemm, 0)) return NB_ERR_CONFIG;
    NB__CHECK(d->attn.site_width != NB_WIDTH_PER_HEAD && d->attn.site_width != NB_WIDTH_FULL,
              NB_ERR_CONFIG, "nb_attn_plan_make: unknown attn.site_width %d",
              (int)d->attn.site_width);
    NB__CHECK((int)d->norm < NB_NORM_RMS || d->norm > NB_NORM_DERF, NB_ERR_CONFIG,
              "nb_attn_plan_make: unknown norm type %d", (int)d->norm);
    NB__CHECK(!(d->eps > 0) || !nb__fin((double)d->eps), NB_ERR_CONFIG,
              "nb_attn_plan_make: eps (%g) must be finite and > 0", (double)d->eps);
    NB__CHECK(!(d->attn.rope_theta > 1) || !nb__fin((double)d->attn.rope_theta), NB_ERR_CONFIG,
              "nb_attn_plan_make: attn.rope_theta (%g) must be finite and > 1",
              (double)d->attn.rope_theta);
    NB__CHECK(d->attn.qk_scale < -1 || d->attn.qk_scale > 1, NB_ERR_CONFIG,
              "nb_attn_plan_make: attn.qk_scale (%d) must be -1 (off), 0 (off) or 1",
              d->attn.qk_scale);
    if (d->attn.qk_scale < 0) d->attn.qk_scale = 0;
    NB__CHECK((int)d->attn.gate < NB_GATE_NONE || d->attn.gate > NB_GATE_ELEMENTWISE, NB_ERR_CONFIG,
              "nb_attn_plan_make: unknown attn.gate %d", (int)d->attn.gate);
    NB__CHECK((int)d->attn.sink < NB_SINK_NONE || d->attn.sink > NB_SINK_OFF_BY_ONE, NB_ERR_CONFIG,
              "nb_attn_plan_make: unknown attn.sink %d", (int)d->attn.sink);
    NB__CHECK(!(d->attn.clip_qkv >= 0) || !nb__fin((double)d->attn.clip_qkv), NB_ERR_CONFIG,
              "nb_attn_plan_make: attn.clip_qkv (%g) must be 0 (off) or finite and > 0",
              (double)d->attn.clip_qkv);
    NB__CHECK(!(d->attn.softcap >= 0) || !nb__fin((double)d->attn.softcap), NB_ERR_CONFIG,
              "nb_attn_plan_make: attn.softcap (%g) must be 0 (off) or finite and > 0",
              (double)d->attn.softcap);
    NB__CHECK(d->attn.qk_scale && d->n_kv_heads != d->n_heads, NB_ERR_CONFIG,
              "nb_attn_plan_make: qk_scale shares head h's scales between Q head h and K head h: "
              "it needs n_kv_heads (%d) = n_heads (%d)", d->n_kv_heads, d->n_heads);
    if (nb__is0(d->attn.softmax_scale))
        d->attn.softmax_scale = (nb_real)(1 / sqrt((double)d->d_model / d->n_heads));
    NB__CHECK(!(d->attn.softmax_scale > 0) || !nb__fin((double)d->attn.softmax_scale),
              NB_ERR_CONFIG, "nb_attn_plan_make: attn.softmax_scale (%g) must be finite and > 0",
              (double)d->attn.softmax_scale);
    return NB_OK;
}

/* The plan's shapes: every row count, width and task count is an int inside the kernels (and
   for BLAS); the memory mode by the probabilities' size when left to the default. */
static nb_result nb__attn_shapes(nb_ctx* ctx, nb_attn_desc* d, int max_batch, int max_seq,
                                 int* gate_width, long long* qkv_width) {
    NB__CHECK(max_batch <= 0 || max_seq <= 0, NB_ERR_SHAPE,
              "nb_attn_plan_make: max_batch (%d) and max_seq (%d) must be > 0", max_batch,
              max_seq);
    *gate_width = d->attn.gate == NB_GATE_HEADWISE ? d->n_heads : d->attn.gate ? d->d_model : 0;
    *qkv_width =
        d->d_model + 2 * nb__mulll(d->n_kv_heads, d->d_model / d->n_heads) + *gate_width;
    NB__CHECK(*qkv_width > NB__INT_MAX, NB_ERR_SHAPE,
              "nb_attn_plan_make: qkv_width = d_model + 2*n_kv_heads*head_dim + gate (%lld) "
              "overflows int", *qkv_width);
    NB__CHECK(nb__mulll(max_batch, max_seq) > NB__INT_MAX, NB_ERR_SHAPE,
              "nb_attn_plan_make: max_batch*max_seq (%lld) overflows int",
              nb__mulll(max_batch, max_seq));
    NB__CHECK(nb__mulll(max_batch, d->n_heads) > NB__INT_MAX / (nb__tiles(max_seq)),
              NB_ERR_SHAPE, "nb_attn_plan_make: max_batch*n_heads*ceil(max_seq/%d) (attention "
              "tasks, %d*%d*%d) overflows int", NB__TILE, max_batch, d->n_heads,
              nb__tiles(max_seq));
    if (d->attn.memory == NB_ATTN_MEMORY_DEFAULT)
        d->attn.memory = (double)max_batch * d->n_heads * max_seq * max_seq <= 64.0 * 1024 * 1024
                             ? NB_ATTN_MEMORY_PROBS : NB_ATTN_MEMORY_LSE;
    NB__CHECK(d->attn.memory != NB_ATTN_MEMORY_PROBS && d->attn.memory != NB_ATTN_MEMORY_LSE,
              NB_ERR_CONFIG, "nb_attn_plan_make: unknown attn.memory mode %d",
              (int)d->attn.memory);
    return NB_OK;
}

/* The plan's parameter count, in nb_attn_params' order (NB_ERR_SHAPE past size_t). */
static nb_result nb__attn_n_params(nb_ctx* ctx, nb_attn_plan* pl) {
    const nb_attn_desc* d = &pl->desc;
    const long long qkv_width = pl->qkv_width;
    size_t nparams;
    int site;
    nparams = nb__mulz((size_t)qkv_width, (size_t)d->d_model);
    NB__CHECK(nb__too_big(nparams), NB_ERR_SHAPE,
              "nb_attn_plan_make: d_model*qkv_width (%d*%lld) overflows size_t", d->d_model,
              qkv_width);
    nparams = nb__addz(nparams, nb__mulz((size_t)d->d_model, (size_t)d->d_model));
    if (d->attn.bias & NB_ATTN_BIAS_QKV) nparams = nb__addz(nparams, (size_t)qkv_width);
    if (d->attn.bias & NB_ATTN_BIAS_OUT) nparams = nb__addz(nparams, (size_t)d->d_model);
    for (site = 0; site < 4; site++)
        if (nb__site_on(pl, site))
            nparams = nb__addz(nparams, (size_t)(nb__norm_kinds[d->norm].alpha +
                                                 (d->no_gain ? 0 : nb__site_seg(pl, site))));
    if (d->attn.qk_scale) nparams = nb__addz(nparams, (size_t)d->d_model);
    if (d->attn.sink == NB_SINK_LEARNED) nparams = nb__addz(nparams, (size_t)d->n_heads);
    NB__CHECK(nb__too_big(nparams), NB_ERR_SHAPE,
              "nb_attn_plan_make: n_params (d_model %d) overflows size_t", d->d_model);
    pl->n_params = nparams;
    return NB_OK;
}

NBDEF nb_result nb_attn_plan_make(nb_ctx* ctx, nb_attn_plan* plan, const nb_attn_desc* desc,
                                  int max_batch, int max_seq) {
    nb_attn_desc d;
    nb_attn_plan pl;
    nb__attn_mem m;
    long long qkv_width = 0;
    int gate_width = 0;
    nb_result rc;
    NB__CHECK(!plan || !desc, NB_ERR_NULL, "nb_attn_plan_make: plan and desc are required");
    d = *desc;
    if ((rc = nb__attn_resolve(ctx, &d))) return rc;
    if ((rc = nb__attn_shapes(ctx, &d, max_batch, max_seq, &gate_width, &qkv_width))) return rc;
    memset(&pl, 0, sizeof pl); /* built aside: *plan is untouched on failure */
    pl.desc = d;
    pl.max_batch = max_batch;
    pl.max_seq = max_seq;
    pl.max_threads = nb_num_threads(ctx);
    pl.head_dim = d.d_model / d.n_heads;
    pl.qkv_width = (int)qkv_width;
    pl.group = d.n_heads / d.n_kv_heads;
    pl.gate_width = gate_width;
    pl.bf16_attn = pl.bf16_gemm = NB__BF16(&pl) ? nb__bf16_gemm_kernel() : NB__ATTN_EMULATED;
    if ((rc = nb__attn_n_params(ctx, &pl))) return rc;
    nb__attn_carve(&pl, max_batch, max_seq, pl.max_threads, NULL, NULL, &m);
    NB__CHECK(nb__too_big(m.n_cache), NB_ERR_SHAPE,
              "nb_attn_plan_make: n_cache (max_batch %d, max_seq %d, n_heads %d, qkv_width %lld) "
              "overflows size_t", max_batch, max_seq, d.n_heads, qkv_width);
    NB__CHECK(nb__too_big(m.n_scratch), NB_ERR_SHAPE,
              "nb_attn_plan_make: n_scratch (max_batch %d, max_seq %d, qkv_width %lld, %d "
              "threads) overflows size_t", max_batch, max_seq, qkv_width, pl.max_threads);
    pl.n_cache = m.n_cache;
    pl.n_scratch = m.n_scratch;
    *plan = pl;
    return NB_OK;
}

/* The gain and alpha pointers of site 0..3 (Q, K, V, C) of p. */
static nb_real** nb__site_gain(nb_attn_params* p, int site) {
    return site == 0 ? &p->q_gain : site == 1 ? &p->k_gain : site == 2 ? &p->v_gain : &p->c_gain;
}
static nb_real** nb__site_alpha(nb_attn_params* p, int site) {
    return site == 0 ? &p->q_alpha : site == 1 ? &p->k_alpha : site == 2 ? &p->v_alpha
                                                                          : &p->c_alpha;
}

NBDEF void nb_attn_params_bind(const nb_attn_plan* plan, nb_real* base, nb_attn_params* p) {
    int d, site;
    if (!plan || !p) return;
    memset(p, 0, sizeof *p);
    if (!base) return;
    d = plan->desc.d_model;
    p->w_qkv = base;
    base += (size_t)plan->qkv_width * d;
    if (plan->desc.attn.bias & NB_ATTN_BIAS_QKV) {
        p->b_qkv = base;
        base += plan->qkv_width;
    }
    p->w_o = base;
    base += (size_t)d * d;
    if (plan->desc.attn.bias & NB_ATTN_BIAS_OUT) {
        p->b_o = base;
        base += d;
    }
    for (site = 0; site < 4; site++)
        if (nb__site_on(plan, site)) {
            if (nb__norm_kinds[plan->desc.norm].alpha) {
                *nb__site_alpha(p, site) = base;
                base += nb__norm_kinds[plan->desc.norm].alpha;
            }
            if (!plan->desc.no_gain) {
                *nb__site_gain(p, site) = base;
                base += nb__site_seg(plan, site);
            }
        }
    if (plan->desc.attn.qk_scale) {
        p->qk_scale = base;
        base += plan->desc.d_model;
    }
    if (plan->desc.attn.sink == NB_SINK_LEARNED) p->sinks = base;
}

/* A normalized site without its gain or alpha pointer in p: the name of the first, or NULL. */
static const char* nb__site_missing(const nb_attn_plan* pl, const nb_attn_params* p) {
    static const char* const names[8] = {"q_gain", "k_gain", "v_gain", "c_gain",
                                         "q_alpha", "k_alpha", "v_alpha", "c_alpha"};
    nb_attn_params* q = (nb_attn_params*)(size_t)p; /* only read */
    int site;
    for (site = 0; site < 4; site++) {
        if (!nb__site_on(pl, site)) continue;
        if (!pl->desc.no_gain && !*nb__site_gain(q, site)) return names[site];
        if (nb__norm_kinds[pl->desc.norm].alpha && !*nb__site_alpha(q, site))
            return names[4 + site];
    }
    return NULL;
}

/* A planned bias, qk_scale or sink without its pointer in p: its name, or NULL. */
static const char* nb__param_missing(const nb_attn_plan* pl, const nb_attn_params* p) {
    if ((pl->desc.attn.bias & NB_ATTN_BIAS_QKV) && !p->b_qkv) return "b_qkv";
    if ((pl->desc.attn.bias & NB_ATTN_BIAS_OUT) && !p->b_o) return "b_o";
    if (pl->desc.attn.qk_scale && !p->qk_scale) return "qk_scale";
    if (pl->desc.attn.sink == NB_SINK_LEARNED && !p->sinks) return "sinks";
    return NULL;
}

/* B and T of a call against the maximum a plan (or stack) was sized for */
static nb_result nb__check_bt(nb_ctx* ctx, const char* fn, int B, int T, int max_batch,
                              int max_seq) {
    NB__CHECK(B <= 0 || T <= 0, NB_ERR_SHAPE, "%s: B (%d) and T (%d) must be > 0", fn, B, T);
    NB__CHECK(B > max_batch || T > max_seq, NB_ERR_SHAPE,
              "%s: B=%d, T=%d exceed the planned maximum (%d, %d)", fn, B, T, max_batch, max_seq);
    return NB_OK;
}

/* One call of a sublayer's forward or backward (attention, FFN): what the public functions
   take besides the plan, the parameters and the activations, and the stack's extras. */
typedef struct nb__sub_call {
    nb_ctx* ctx;
    int B, T;
    nb_real* cache;            /* written by the forward; the backward only reads it */
    nb_real* scratch;
    int opts;                  /* NB__BWD_ACC_DX, NB__BWD_WRITE_DW, NB__X16_GIVEN */
    const struct nb__vres* vr; /* attention: the value residual (NULL: none) */
} nb__sub_call;

static nb__sub_call nb__sub_call_of(nb_ctx* ctx, int B, int T, const nb_real* cache,
                                    nb_real* scratch) {
    nb__sub_call k;
    memset(&k, 0, sizeof k);
    k.ctx = ctx; k.B = B; k.T = T;
    k.cache = (nb_real*)(size_t)cache; /* a backward's: only read */
    k.scratch = scratch;
    return k;
}

/* x for the NULL check of a call: with NB__X16_GIVEN its bf16 copy in the cache stands in */
static const void* nb__x_or_given(const nb__sub_call* k, const void* x) {
    return k->opts & NB__X16_GIVEN ? (const void*)k->cache : x;
}

/* names: of a, b, cache, scratch (space-separated) */
static nb_result nb__attn_check_call(const nb__sub_call* k, const char* fn,
                                     const nb_attn_plan* pl, const nb_attn_params* p,
                                     const char* names, const void* a, const void* b) {
    nb_ctx* ctx = k->ctx;
    nb_result rc;
    const void* ptrs[6];
    NB__CHECK(!pl || !p, NB_ERR_NULL, "%s: plan and params are required (%s is NULL)", fn,
              pl ? "params" : "plan");
    if ((rc = nb__check_bt(ctx, fn, k->B, k->T, pl->max_batch, pl->max_seq))) return rc;
    NB__CHECK(nb_num_threads(ctx) > pl->max_threads, NB_ERR_CONFIG,
              "%s: %d threads requested but the plan sized its scratch for %d", fn,
              nb_num_threads(ctx), pl->max_threads);
    ptrs[0] = a; ptrs[1] = nb__x_or_given(k, b); ptrs[2] = k->cache; ptrs[3] = k->scratch;
    ptrs[4] = p->w_qkv; ptrs[5] = p->w_o;
    if ((rc = nb__need(ctx, fn, names, 4, ptrs))) return rc;
    if ((rc = nb__need(ctx, fn, "params.w_qkv params.w_o", 2, ptrs + 4))) return rc;
    ptrs[0] = p->w_qkv16; ptrs[1] = p->w_o16;
    if (pl->desc.gemm.bf16_weights &&
        (rc = nb__need(ctx, fn, "params.w_qkv16 params.w_o16", 2, ptrs)))
        return rc;
    NB__CHECK(nb__site_missing(pl, p), NB_ERR_NULL, "%s: a normalized site has no %s pointer",
              fn, nb__site_missing(pl, p));
    NB__CHECK(nb__param_missing(pl, p), NB_ERR_NULL, "%s: the plan has params.%s but it is NULL",
              fn, nb__param_missing(pl, p));
    return NB_OK;
}

/* The norm of site `site` (Q, K, V: a slice of the raw projection into qkv; C: O into c) on
   the BT rows of m, forward (g NULL) or backward (its dy in dqkv's slice or dc, overwritten
   with dx; gradients into g); the statistics in m->stat[site]: rstd, then (LayerNorm) the
   means. */
static nb_result nb__site_norm(nb_ctx* ctx, const nb_attn_plan* pl, int site,
                               const nb_attn_params* p, nb_attn_params* g, const nb__attn_mem* m,
                               int BT) {
    nb_attn_params* q = (nb_attn_params*)(size_t)p; /* only read */
    const int seg = nb__site_seg(pl, site), c_site = site == 3;
    const int off = c_site ? 0 : nb__site_offset(pl, site);
    const int ld = c_site ? pl->desc.d_model : pl->qkv_width;
    const int width = c_site ? pl->desc.d_model : nb__site_heads(pl, site) * pl->head_dim;
    const size_t nstat = (size_t)BT * (width / seg);
    nb__norm_call c = nb__ncall(pl->desc.norm, (c_site ? m->o : m->raw) + off, ld, BT, width, seg);
    c.gain = *nb__site_gain(q, site); c.alpha = *nb__site_alpha(q, site); c.eps = pl->desc.eps;
    if (g) { /* partials hold the plan's max_threads teams */
        nb_real* dy = (c_site ? m->dc : m->dqkv) + off;
        nb__norm_grad gr = nb__ngrad(dy, ld, dy, ld, m->partials, pl->max_threads);
        gr.dgain = *nb__site_gain(g, site); gr.dalpha = *nb__site_alpha(g, site);
        return nb__kind_backward(ctx, c, m->stat[site], nstat, &gr);
    }
    return nb__kind_forward(ctx, c, (c_site ? m->c : m->qkv) + off, ld, m->stat[site], nstat);
}

/* y[r] += bias for each of `rows` rows of n values: a projection's bias */
static void nb__add_bias(nb_ctx* ctx, nb_real* y, const nb_real* bias, int rows, int n) {
    int r;
    (void)ctx; /* the thread count, with OpenMP */
    NB__OMP(parallel for schedule(static) num_threads(nb_num_threads(ctx))
            if((size_t)rows * n >= NB__PAR_MIN))
    for (r = 0; r < rows; r++) {
        nb_real* yr = y + (size_t)r * n;
        int i;
        for (i = 0; i < n; i++) yr[i] += bias[i];
    }
}

/* OLMo's clip_qkv on the Q|K|V columns of the raw projection (rows of P; the gate's columns
   are no projection of OLMo's): clamped to [-c, c] in place. Its backward zeroes dqkv where
   the clamped value sits on the bound: torch's clamp passes the gradient at x = +-c exactly,
   here it stops, a difference on a set of measure zero. */
static void nb__clip_qkv(nb_ctx* ctx, const nb_attn_plan* pl, nb_real* raw, nb_real* dqkv,
                         int rows) {
    const int P = pl->qkv_width, n = P - pl->gate_width;
    const nb_real c = pl->desc.attn.clip_qkv;
    int r;
    (void)ctx;
    NB__OMP(parallel for schedule(static) num_threads(nb_num_threads(ctx))
            if((size_t)rows * n >= NB__PAR_MIN))
    for (r = 0; r < rows; r++) {
        nb_real* x = raw + (size_t)r * P;
        int i;
        if (!dqkv) {
            for (i = 0; i < n; i++) x[i] = x[i] > c ? c : x[i] < -c ? -c : x[i];
        } else {
            nb_real* g = dqkv + (size_t)r * P;
            for (i = 0; i < n; i++)
                if (x[i] >= c || x[i] <= -c) g[i] = 0;
        }
    }
}

/* db += dy^T 1: the column sums of the rows x n matrix dy (a bias's gradient) as a GEMM with
   `ones` (rows values, filled here): deterministic, and as fast as the BLAS */
static nb_result nb__bias_grad(nb_ctx* ctx, nb_real* db, const nb_real* dy, int rows, int n,
                               nb_real* ones) {
    int r;
    for (r = 0; r < rows; r++) ones[r] = 1;
    return nb_gemm(ctx, 1, 0, n, 1, rows, 1, dy, n, ones, 1, 1, db, 1);
}

/* Q|K|V from token row `row` and column `col` on as a GEMM operand (transposed when trans):
   the cached bf16 copy in BF16, else the floats */
static nb__mat nb__qkv_at(const nb_attn_plan* pl, const nb__attn_mem* m, int row, int col,
                          int trans) {
    nb__mat x = nb__mat_at(nb__op(m->qkv, m->qkv16, pl->qkv_width, 0), row, col);
    x.trans = trans;
    return x;
}

/* BF16 with the packed attention products (not the emulation): their kernel */
#define NB__PACKED(pl) (NB__BF16(pl) && (pl)->bf16_attn != NB__ATTN_EMULATED)
#define NB__KERNEL(pl) ((pl)->bf16_attn - 1)

/* The packed path: the (batch b, KV head j) operands of nb__bdot: K^T and V^T (ld T32) and K and V
   (ld d_k) as B operands; the (batch b, head h) Q^T and dO^T as A operands (d_k x T32) */
static unsigned short* nb__kv16(const nb_attn_plan* pl, unsigned short* base, int T, int b,
                                int j, int dk_rows) {
    return base + ((size_t)b * pl->desc.n_kv_heads + j) * nb__t32(T) * dk_rows;
}
static unsigned short* nb__qh16(const nb_attn_plan* pl, unsigned short* base, int T, int b,
                                int h) {
    return base + ((size_t)b * pl->desc.n_heads + h) * nb__t32(T) * pl->head_dim;
}

/* Packs what the BF16 core reads of Q|K|V (qkv16): K^T and V (forward), and K^T, V^T, K, Q^T
   (backward) */
static void nb__attn_pack(nb_ctx* ctx, const nb_attn_plan* pl, int B, int T,
                          const nb__attn_mem* m, int backward) {
    const int Hkv = pl->desc.n_kv_heads, H = pl->desc.n_heads, dk = pl->head_dim;
    const int P = pl->qkv_width, d = pl->desc.d_model, T32 = nb__t32(T), dk2 = dk + dk % 2;
    const int isa = NB__KERNEL(pl);
    int task;
    (void)ctx;
    NB__OMP(parallel for schedule(static) num_threads(nb_num_threads(ctx)))
    for (task = 0; task < B * (Hkv + (backward ? H : 0)); task++) {
        const int b = task % B, j = task / B;
        const unsigned short* x = m->qkv16 + (size_t)b * T * P;
        if (j < Hkv) {
            const unsigned short *k = x + d + (size_t)j * dk, *v = k + (size_t)Hkv * dk;
            nb__pack_cols(isa, nb__kv16(pl, m->kt16, T, b, j, dk2), k, T, dk, P, T32);
            if (backward) {
                nb__pack_cols(isa, nb__kv16(pl, m->vt16, T, b, j, dk2), v, T, dk, P, T32);
                nb__pack_rows(nb__kv16(pl, m->kp16, T, b, j, dk), k, T, dk, P, T32);
            } else {
                nb__pack_rows(nb__kv16(pl, m->vp16, T, b, j, dk), v, T, dk, P, T32);
            }
        } else {
            const int h = j - Hkv;
            nb__transpose16(isa, nb__qh16(pl, m->qt16, T, b, h), x + (size_t)h * dk, T, dk, P,
                            T32);
            nb__transpose16(isa, nb__qh16(pl, m->dot16, T, b, h),
                            m->dout16 + (size_t)b * T * d + (size_t)h * dk, T, dk, d, T32);
        }
    }
}

/* A (batch b, head h of KV head j, row tile) item of the attention core: query rows [i0,
   i0+rows) against keys [0, ncols). In a backward task also: P (p), dP then dS (dp), where
   the GEMM path adds dK_j and dV_j (ld ld) and the packed path the task's transposes dK^T and
   dV^T (kvt: d_k x T each), via bf16 copies of dS's rows and of P's and dS's pairs of rows
   (pt). With the softcap a backward task also has fac: d(logit)/d(scale s) = 1 - tanh^2 of
   every score (ld T). */
typedef struct nb__attn_item {
    int b, h, j, i0, rows, ncols, ld;
    const nb_real* p;
    nb_real *dp, *dk_j, *dv_j, *kvt, *fac;
    unsigned short* pt;
} nb__attn_item;

/* it's head h (of KV head j) and row tile `tile`: its query rows and keys */
static void nb__item_tile(const nb_attn_plan* pl, int T, nb__attn_item* it, int h, int tile) {
    it->h = h; it->j = h / pl->group; it->i0 = tile * NB__TILE;
    it->rows = T - it->i0 < NB__TILE ? T - it->i0 : NB__TILE;
    it->ncols = pl->desc.attn.non_causal ? T : it->i0 + it->rows;
}

/* A softmax row p over n keys (log-sum-exp l) joined by a sink of logit z: the keys' p times
   exp(l - l') with l' = log(exp(l) + exp(z)) (the sigmoid(l - z) of torchtitan's gpt-oss);
   returns l', the sink's probability exp(z - l') into *ps. */
static nb_real nb__sink_row(nb_real* p, int n, nb_real l, nb_real z, nb_real* ps) {
    const nb_real hi = l > z ? l : z, lo = l > z ? z : l;
    const nb_real l2 = hi + (nb_real)log1p(exp((double)(lo - hi)));
    const nb_real f = NB__EXP(l - l2);
    int c;
    NB__OMP(simd)
    for (c = 0; c < n; c++) p[c] *= f;
    *ps = NB__EXP(z - l2);
    return l2;
}

/* The scores Q K^T of the item's query rows against its keys into s (ld T), unscaled */
static void nb__attn_scores(const nb_attn_plan* pl, const nb__attn_mem* m, int T,
                            const nb__attn_item* it, nb_real* s) {
    const int dk = pl->head_dim, P = pl->qkv_width, b = it->b, j = it->j;
    if (NB__PACKED(pl))
        nb__bdot(NB__KERNEL(pl), it->rows, it->ncols, dk,
                 m->qkv16 + (size_t)(b * T + it->i0) * P + it->h * dk, P,
                 nb__kv16(pl, m->kt16, T, b, j, dk + dk % 2), nb__t32(T), s, T, 0);
    else
        nb__gemm1(NB__BF16(pl), 0, it->rows, it->ncols, dk, 1,
                  nb__qkv_at(pl, m, b * T + it->i0, it->h * dk, 0),
                  nb__qkv_at(pl, m, b * T, pl->desc.d_model + j * dk, 1), 0, s, T);
}

/* Gemma 2's softcap of n scores s: the logit y = c tanh(scale s / c) into y and its derivative
   by scale s, 1 - tanh^2, into fac (either may be NULL or s itself) */
static void nb__softcap_row(const nb_real* s, nb_real* y, nb_real* fac, int n, nb_real scale,
                            nb_real c) {
    const nb_real k = scale / c;
    int i;
    NB__SIMD_EXP(simd)
    for (i = 0; i < n; i++) {
        const nb_real t = nb__tanh_acc(k * s[i]);
        if (y) y[i] = c * t;
        if (fac) fac[i] = 1 - t * t;
    }
}

/* The item's visible keys in row r */
static int nb__row_keys(const nb_attn_plan* pl, const nb__attn_item* it, int r) {
    return pl->desc.attn.non_causal ? it->ncols : it->i0 + r + 1;
}

/* The item's scores into p (ld T), then probabilities. lse given (backward recompute):
   p = exp(y - lse) for the logits y = scale*s (the softcap's, with its derivative into
   it->fac when not NULL); else softmax (with the sink, when the plan has one: its
   probabilities into m->psink), the row lse written to lse_out when not NULL and the rows'
   largest logit scale*s (before a softcap) to *max_out. */
static void nb__attn_probs(const nb_attn_plan* pl, const nb__attn_mem* m, int T,
                           const nb__attn_item* it, nb_real* p, const nb_real* lse_in,
                           nb_real* lse_out, nb_real* max_out) {
    const int b = it->b, h = it->h, i0 = it->i0, rows = it->rows, ncols = it->ncols;
    const nb_real scale = pl->desc.attn.softmax_scale, cap = pl->desc.attn.softcap;
    int r, c;
    nb__attn_scores(pl, m, T, it, p);
    for (r = 0; r < rows; r++) {
        nb_real* pr = p + (size_t)r * T;
        const int n = nb__row_keys(pl, it, r);
        if (lse_in) {
            const nb_real l = lse_in[r];
            nb_real sc = scale;
            if (cap > 0) {
                nb__softcap_row(pr, pr, it->fac ? it->fac + (size_t)r * T : NULL, n, scale, cap);
                sc = 1;
            }
            NB__SIMD_EXP(simd)
            for (c = 0; c < n; c++) pr[c] = NB__EXP(sc * pr[c] - l);
            for (c = n; c < ncols; c++) pr[c] = 0;
        } else {
            nb_real mx = 0, l;
            if (cap > 0) { /* the statistic is the logit before the cap */
                mx = nb__max(pr, n);
                nb__softcap_row(pr, pr, NULL, n, scale, cap);
                l = nb__softmax_row(pr, pr, n, ncols, 1, NULL);
            } else {
                l = nb__softmax_row(pr, pr, n, ncols, scale, &mx);
            }
            if (m->psink)
                l = nb__sink_row(pr, n, l, m->sinks ? m->sinks[h] : 0,
                                 m->psink + ((size_t)b * pl->desc.n_heads + h) * T + i0 + r);
            if (lse_out) lse_out[r] = l;
            if (r == 0 || scale * mx > *max_out) *max_out = scale * mx; /* scale > 0 */
        }
    }
}

/* dst row r (ld ldd) = the bf16 bits of x row r (ld ldx) for rows x n, zero from n to n32 */
static void nb__rows16(unsigned short* dst, int ldd, const nb_real* x, int ldx, int rows, int n,
                       int n32) {
    int r, c;
    for (r = 0; r < rows; r++) {
        unsigned short* o = dst + (size_t)r * ldd;
        nb__row_bf16(o, x + (size_t)r * ldx, n);
        for (c = n; c < n32; c++) o[c] = 0;
    }
}
/* Bp (pairs of rows, ldb ld) of the bf16 bits of x (rows x n, ld ldx), rows rounded up to
   rows32 with zeros: a B operand of nb__bdot made from a float tile. One 32-bit word per pair
   (the low half row 2p), so the loop vectorizes. */
static void nb__pairs16(unsigned short* Bp, int ld, const nb_real* x, int ldx, int rows, int n,
                        int rows32) {
    int p, c;
    for (p = 0; p < rows32 / 2; p++) {
        unsigned short* o = Bp + (size_t)p * 2 * ld;
        const nb_real* x0 = x + (size_t)2 * p * ldx;
        const nb_real* x1 = 2 * p + 1 < rows ? x0 + ldx : NULL;
        if (2 * p >= rows) {
            memset(o, 0, (size_t)n * 2 * sizeof *o);
            continue;
        }
        NB__OMP(simd)
        for (c = 0; c < n; c++) {
            const unsigned w = (unsigned)nb__bf16_bits(x0[c]) |
                               (x1 ? (unsigned)nb__bf16_bits(x1[c]) << 16 : 0u);
            memcpy(o + 2 * c, &w, sizeof w);
        }
    }
}

/* Tasks (b, h, row tile), biggest causal tiles first so the dynamic schedule balances. Each task
   writes its own rows of O (and P or lse), so any schedule gives the same bits. The packed path
   runs the products on nb__bdot: P rounded to bf16 rows (pt), V packed in pairs of rows. */
static void nb__attn_core_forward(nb_ctx* ctx, const nb_attn_plan* pl, int B, int T,
                                  const nb__attn_mem* m) {
    const int H = pl->desc.n_heads, dk = pl->head_dim, d = pl->desc.d_model, T32 = nb__t32(T);
    const int ntiles = nb__tiles(T), ntasks = B * H * ntiles, pk = NB__PACKED(pl);
    const int par = nb_blas_threads() == 1; /* else BLAS threads each call, we call serially */
    int task;
    (void)par; (void)ctx;
    if (pk) nb__attn_pack(ctx, pl, B, T, m, 0);
    NB__OMP(parallel for schedule(dynamic, 1) num_threads(nb_num_threads(ctx)) if(par))
    for (task = 0; task < ntasks; task++) {
        const int tile = ntiles - 1 - task / (B * H), bh = task % (B * H);
        const int b = bh / H, h = bh % H;
        const size_t prow = ((size_t)b * H + h) * T + tile * NB__TILE;
        nb_real* p = m->probs ? m->probs + prow * T
                              : m->tiles + (size_t)omp_get_thread_num() * nb__tile_floats(pl, T);
        nb_real* hs = m->hs + (size_t)bh * ntiles + tile, first = 0;
        nb__attn_item it;
        int i0, j, rows, ncols, r;
        nb_real* o;
        memset(&it, 0, sizeof it);
        it.b = b;
        nb__item_tile(pl, T, &it, h, tile);
        i0 = it.i0; j = it.j; rows = it.rows; ncols = it.ncols;
        o = m->o + ((size_t)b * T + i0) * d + (size_t)h * dk;
        nb__attn_probs(pl, m, T, &it, p, NULL, m->lse ? m->lse + prow : NULL, hs);
        for (r = 0; r < rows; r++) first += p[(size_t)r * T];
        hs[(size_t)B * H * ntiles] = first;
        if (m->psink) {
            nb_real sunk = 0;
            for (r = 0; r < rows; r++) sunk += m->psink[prow + r];
            hs[(size_t)2 * B * H * ntiles] = sunk;
        }
        if (pk) {
            unsigned short* pb = nb__pt(m, T, omp_get_thread_num());
            const int n32 = nb__t32(ncols);
            nb__rows16(pb, T32, p, T, rows, ncols, n32);
            nb__bdot(NB__KERNEL(pl), rows, dk, n32, pb, T32, nb__kv16(pl, m->vp16, T, b, j, dk),
                     dk, o, d, 0);
        } else {
            nb__gemm1(NB__BF16(pl), 0, rows, dk, ncols, 1, nb__m(p, T, 0),
                      nb__qkv_at(pl, m, b * T, d + (pl->desc.n_kv_heads + j) * dk, 0), 0, o, d);
        }
        if (m->o16)
            for (r = 0; r < rows; r++)
                nb__row_bf16(m->o16 + ((size_t)b * T + i0 + r) * d + (size_t)h * dk,
                             o + (size_t)r * d, dk);
    }
}

static void nb__attn_item_bwd(const nb_attn_plan* pl, int T, const nb__attn_mem* m,
                              const nb__attn_item* it) {
    const int dk = pl->head_dim, P = pl->qkv_width, d = pl->desc.d_model, T32 = nb__t32(T);
    const int b = it->b, h = it->h, j = it->j, i0 = it->i0, rows = it->rows, ncols = it->ncols;
    const int bf = NB__BF16(pl), pk = NB__PACKED(pl), isa = NB__KERNEL(pl);
    const int Hkv = pl->desc.n_kv_heads;
    const nb_real scale = pl->desc.attn.softmax_scale;
    const nb_real* dout = m->dc + ((size_t)b * T + i0) * d + (size_t)h * dk;
    const nb_real* p = it->p;
    nb_real* dp = it->dp;
    nb_real* dq = m->dqkv + ((size_t)b * T + i0) * P + (size_t)h * dk;
    const size_t srow = ((size_t)b * pl->desc.n_heads + h) * T + i0; /* of psink, dsink */
    int r, c;
    if (pk) /* dP = dO V^T */
        nb__bdot(isa, rows, ncols, dk, m->dout16 + ((size_t)b * T + i0) * d + (size_t)h * dk, d,
                 nb__kv16(pl, m->vt16, T, b, j, dk + dk % 2), T32, dp, T, 0);
    else
        nb__gemm1(bf, 0, rows, ncols, dk, 1, nb__m(dout, d, 0),
                  nb__qkv_at(pl, m, b * T, d + (Hkv + j) * dk, 1), 0, dp, T);
    if (!pk) /* dV += P^T dO */
        nb__gemm1(bf, 0, ncols, dk, rows, 1, nb__m(p, T, 1), nb__m(dout, d, 0), 1, it->dv_j, it->ld);
    for (r = 0; r < rows; r++) {
        const nb_real* pr = p + (size_t)r * T;
        nb_real* dpr = dp + (size_t)r * T;
        const int n = nb__row_keys(pl, it, r);
        const nb_real dot = nb__dot(dpr, pr, n);
        NB__OMP(simd)
        for (c = 0; c < n; c++) dpr[c] = scale * pr[c] * (dpr[c] - dot);
        if (it->fac) { /* through the softcap y = c tanh(scale s / c): dy/ds = scale fac */
            const nb_real* fr = it->fac + (size_t)r * T;
            NB__OMP(simd)
            for (c = 0; c < n; c++) dpr[c] *= fr[c];
        }
        for (c = n; c < ncols; c++) dpr[c] = 0;
        /* the sink's column has no value: its dP is 0, so dz = p_z (0 - dot) */
        if (m->dsink) m->dsink[srow + r] = -m->psink[srow + r] * dot;
    }
    if (pk) {
        const int n32 = nb__t32(ncols), r32 = nb__t32(rows);
        unsigned short *ds = it->pt, *ppair = ds + nb__pt_rows(T) * T32;
        unsigned short* dspair = ppair + nb__pt_rows(T) * T32;
        nb_real *dkt = it->kvt, *dvt = dkt + (size_t)dk * T;
        nb__rows16(ds, T32, dp, T, rows, ncols, n32);
        nb__pairs16(ppair, T32, p, T, rows, ncols, r32);
        nb__pairs16(dspair, T32, dp, T, rows, ncols, r32);
        nb__bdot(isa, dk, ncols, r32, nb__qh16(pl, m->dot16, T, b, h) + i0, T32, ppair, T32, dvt,
                 T, 1); /* dV^T += dO^T P */
        nb__bdot(isa, rows, dk, n32, ds, T32, nb__kv16(pl, m->kp16, T, b, j, dk), dk, dq, P,
                 1); /* dQ += dS K */
        nb__bdot(isa, dk, ncols, r32, nb__qh16(pl, m->qt16, T, b, h) + i0, T32, dspair, T32, dkt,
                 T, 1); /* dK^T += Q^T dS */
        return;
    }
    nb__gemm1(bf, 0, rows, dk, ncols, 1, nb__m(dp, T, 0), nb__qkv_at(pl, m, b * T, d + j * dk, 0),
              1, dq, P); /* dQ += dS K */
    nb__gemm1(bf, 0, ncols, dk, rows, 1, nb__m(dp, T, 1), nb__qkv_at(pl, m, b * T + i0, h * dk, 0),
              1, it->dk_j, it->ld); /* dK += dS^T Q */
}

/* The softcap's derivative of the item's scores into it->fac, from the scores again (P is
   cached: the probabilities memory mode) */
static void nb__softcap_fac(const nb_attn_plan* pl, const nb__attn_mem* m, int T,
                            const nb__attn_item* it) {
    int r;
    nb__attn_scores(pl, m, T, it, it->fac);
    for (r = 0; r < it->rows; r++) {
        nb_real* fr = it->fac + (size_t)r * T;
        nb__softcap_row(fr, NULL, fr, nb__row_keys(pl, it, r), pl->desc.attn.softmax_scale,
                        pl->desc.attn.softcap);
    }
}

/* Y (rows x cols, ld ldy) += X^T for X (cols x rows, ld ldx), through 16 x 16 blocks in L1:
   Y's rows are far apart (a qkv row), and walking them column by column thrashes the cache */
static void nb__add_transposed(nb_real* Y, int ldy, const nb_real* X, int ldx, int cols,
                               int rows) {
    nb_real blk[16][16];
    int r0, c0, r, c;
    for (r0 = 0; r0 < rows; r0 += 16)
        for (c0 = 0; c0 < cols; c0 += 16) {
            const int nr = rows - r0 < 16 ? rows - r0 : 16, nc = cols - c0 < 16 ? cols - c0 : 16;
            for (c = 0; c < nc; c++)
                for (r = 0; r < nr; r++) blk[r][c] = X[(size_t)(c0 + c) * ldx + r0 + r];
            for (r = 0; r < nr; r++) {
                nb_real* y = Y + (size_t)(r0 + r) * ldy + c0;
                for (c = 0; c < nc; c++) y[c] += blk[r][c];
            }
        }
}

/* Tasks (b, KV head j, part), see nb__kv_split: the g query heads sharing j accumulate into dK_j
   and dV_j, so a task walks its share of the (head, tile) items in a fixed order. With
   dS = scale * P (dP - rowsum(dP P)) the gradient of the unscaled scores Q K^T:
   dQ = dS K, dK += dS^T Q, dV += P^T dO. The packed path sums a task's dK and dV transposed
   (kvt) and adds them at its end. */
static void nb__attn_core_backward(nb_ctx* ctx, const nb_attn_plan* pl, int B, int T,
                                   const nb__attn_mem* m) {
    const int H = pl->desc.n_heads, Hkv = pl->desc.n_kv_heads, dk = pl->head_dim;
    const int P = pl->qkv_width, d = pl->desc.d_model, g = pl->group, pk = NB__PACKED(pl);
    const int ntiles = nb__tiles(T);
    const int par = nb_blas_threads() == 1; /* else BLAS threads each call, we call serially */
    const int nparts = nb__kv_split(pl, B, par ? nb_num_threads(ctx) : 1);
    const int ntasks = B * Hkv * nparts;
    const size_t part_size = (size_t)T * 2 * dk;
    int task, row;
    if (pk) { /* dO in bf16 (dout16 is free once dC and dW_o are made), then the packs */
        if (!m->do16_made) nb__to_bf16(ctx, m->dout16, m->dc, B * T, d, d);
        nb__attn_pack(ctx, pl, B, T, m, 1);
    }
    NB__OMP(parallel for schedule(dynamic, 1) num_threads(nb_num_threads(ctx)) if(par))
    for (task = 0; task < ntasks; task++) {
        const int pair = task / nparts, part = task % nparts, th = omp_get_thread_num();
        nb_real* ptile = m->tiles + (size_t)th * nb__tile_floats(pl, T);
        nb__attn_item it;
        int item;
        it.b = pair / Hkv; it.j = pair % Hkv;
        it.dp = ptile + (size_t)NB__TILE * T;
        it.dk_j = m->dqkv + (size_t)it.b * T * P + d + (size_t)it.j * dk;
        it.ld = P;
        if (part > 0) { /* rows [dK_j | dV_j] of width 2 dk */
            it.dk_j = m->kv_parts + ((size_t)pair * (nparts - 1) + part - 1) * part_size;
            it.ld = 2 * dk;
            memset(it.dk_j, 0, part_size * sizeof(nb_real));
        }
        it.dv_j = part > 0 ? it.dk_j + dk : it.dk_j + (size_t)Hkv * dk;
        it.kvt = pk ? m->kvt + (size_t)th * 2 * dk * T : NULL;
        it.pt = pk ? nb__pt(m, T, th) : NULL;
        it.fac = pl->desc.attn.softcap > 0 ? ptile + (size_t)2 * NB__TILE * T : NULL;
        if (pk) memset(it.kvt, 0, (size_t)2 * dk * T * sizeof(nb_real));
        for (item = part; item < g * ntiles; item += nparts) {
            size_t prow;
            nb__item_tile(pl, T, &it, it.j * g + item / ntiles, item % ntiles);
            prow = ((size_t)it.b * H + it.h) * T + it.i0;
            it.p = ptile;
            if (m->probs) {
                it.p = m->probs + prow * T;
                if (it.fac) nb__softcap_fac(pl, m, T, &it);
            } else {
                nb__attn_probs(pl, m, T, &it, ptile, m->lse + prow, NULL, NULL);
            }
            nb__attn_item_bwd(pl, T, m, &it);
        }
        if (pk) {
            nb__add_transposed(it.dk_j, it.ld, it.kvt, T, dk, T);
            nb__add_transposed(it.dv_j, it.ld, it.kvt + (size_t)dk * T, T, dk, T);
        }
    }
    if (nparts == 1) return;
    /* add the extra parts' [dK | dV] rows into dqkv, in part order */
    NB__OMP(parallel for schedule(static) num_threads(nb_num_threads(ctx))
            if((size_t)B * T * Hkv * dk >= NB__PAR_MIN))
    for (row = 0; row < B * T; row++) {
        const int b = row / T, t = row % T;
        int j, part, c;
        for (j = 0; j < Hkv; j++) {
            nb_real* dk_j = m->dqkv + (size_t)row * P + d + (size_t)j * dk;
            nb_real* dv_j = dk_j + (size_t)Hkv * dk;
            for (part = 1; part < nparts; part++) {
                const nb_real* src = m->kv_parts + ((size_t)(b * Hkv + j) * (nparts - 1) +
                                                    part - 1) * part_size + (size_t)t * 2 * dk;
                for (c = 0; c < dk; c++) {
                    dk_j[c] += src[c];
                    dv_j[c] += src[dk + c];
                }
            }
        }
    }
}

/* dz_h += the rows' terms of head h (nb__attn_item_bwd), summed over batch then rows in that
   order: the same bits for any thread count */
static void nb__sink_grad(const nb_attn_plan* pl, const nb__attn_mem* m, nb_real* dz, int B,
                          int T) {
    const int H = pl->desc.n_heads;
    int b, h, t;
    for (h = 0; h < H; h++) {
        nb_real sum = 0;
        for (b = 0; b < B; b++) {
            const nb_real* row = m->dsink + ((size_t)b * H + h) * T;
            for (t = 0; t < T; t++) sum += row[t];
        }
        dz[h] += sum;
    }
}

/* Value residual (ResFormer, arXiv 2410.17897) inside one attention call of a stack: layer 0
   copies its V (after the V site norm) into v0; a later layer mixes V' = l1 V + l2 v0 before
   the attention core. Backward of a mixing layer, with g = dV': dV = l1 g, dv0 += l2 g,
   dl1 += sum g V, dl2 += sum g v0; layer 0 adds dv0 (every later layer's share) to its dV.
   Followed: the official code (modeling_llama_resformer.py), where layer 0's value_states are
   kept without detach (V_0 gets gradients from every layer, as here) and later layers mix
   0.5 V_0 + 0.5 V right after v_proj, before attention. That code has no V norm; here the mix
   takes the values attention reads (after the V site norm, which RoPE never touches).
   Value embeddings (modded-nanogpt) are the same mix with the caller's table rows as v0 (NULL
   in the layers without a table: V' = l1 V), their gradients added to the bound rows. */
typedef struct nb__vres {
    int mix;              /* 0: layer 0 of the value residual (keeps its V, reads dv0); 1: a
                             mixing layer */
    nb_real l1, l2;       /* the mixing layer's lambdas (fixed 0.5 or its parameters) */
    const nb_real* v0;    /* B*T x H_kv*d_k: what is mixed in: layer 0's V (stack cache) or a
                             value embedding's rows; NULL: none */
    nb_real* v0_out;      /* layer 0 of the value residual: where its V is kept (v0) */
    nb_real* vl;          /* B*T x H_kv*d_k: this layer's V before the mix (learnable only, for
                             dl1), or NULL */
    nb_real* dv0;         /* B*T x H_kv*d_k: where l2 dV' is added (the value residual's dV_0 in
                             the stack scratch, the bound gradient rows); NULL with v0 */
    nb_real* dlam;        /* backward: the 2 lambdas' gradients (learnable), or NULL */
} nb__vres;

/* forward hook on the V slice of qkv (rows of P): capture or mix, see nb__vres */
static void nb__vres_fwd(nb_ctx* ctx, const nb_attn_plan* pl, const nb__vres* vr, nb_real* qkv,
                         int rows) {
    const int P = pl->qkv_width, W = pl->desc.n_kv_heads * pl->head_dim;
    const int off = nb__site_offset(pl, 2);
    int r;
    (void)ctx;
    NB__OMP(parallel for schedule(static) num_threads(nb_num_threads(ctx))
            if((size_t)rows * W >= NB__PAR_MIN))
    for (r = 0; r < rows; r++) {
        nb_real* v = qkv + (size_t)r * P + off;
        const nb_real* v0 = vr->v0 ? vr->v0 + (size_t)r * W : NULL;
        const nb_real l1 = vr->l1, l2 = vr->l2;
        int j;
        if (!vr->mix) {
            memcpy(vr->v0_out + (size_t)r * W, v, (size_t)W * sizeof(nb_real));
            continue;
        }
        if (vr->vl) memcpy(vr->vl + (size_t)r * W, v, (size_t)W * sizeof(nb_real));
        if (!v0) {
            NB__OMP(simd)
            for (j = 0; j < W; j++) v[j] = l1 * v[j];
            continue;
        }
        NB__OMP(simd)
        for (j = 0; j < W; j++) v[j] = l1 * v[j] + l2 * v0[j];
    }
}

/* backward hook on the V slice of dqkv (dV' in, dV out), see nb__vres. The lambdas' sums are
   per-thread partials (in double) added in thread order: deterministic for a thread count. */
static void nb__vres_bwd(nb_ctx* ctx, const nb_attn_plan* pl, const nb__vres* vr, nb_real* dqkv,
                         int rows) {
    const int P = pl->qkv_width, W = pl->desc.n_kv_heads * pl->head_dim;
    const int off = nb__site_offset(pl, 2);
    double part[NB_MAX_THREADS][2];
    int used = 1, t;
    (void)ctx;
    NB__OMP(parallel num_threads(nb_num_threads(ctx)) if((size_t)rows * W >= NB__PAR_MIN))
    {
        int lo, hi, r, j;
        const int th = nb__team_rows(rows, &used, &lo, &hi);
        double s1 = 0, s2 = 0;
        for (r = lo; r < hi; r++) {
            nb_real* g = dqkv + (size_t)r * P + off;
            nb_real* dv0 = vr->dv0 ? vr->dv0 + (size_t)r * W : NULL;
            const nb_real l1 = vr->l1, l2 = vr->l2;
            if (!vr->mix) {
                NB__OMP(simd)
                for (j = 0; j < W; j++) g[j] += dv0[j];
                continue;
            }
            if (vr->dlam) {
                const nb_real *vl = vr->vl + (size_t)r * W, *v0 = vr->v0 ? vr->v0 + (size_t)r * W : NULL;
                nb_real a1 = 0, a2 = 0;
                NB__OMP(simd reduction(+:a1))
                for (j = 0; j < W; j++) a1 += g[j] * vl[j];
                if (v0) {
                    NB__OMP(simd reduction(+:a2))
                    for (j = 0; j < W; j++) a2 += g[j] * v0[j];
                }
                s1 += a1; s2 += a2;
            }
            if (dv0) {
                NB__OMP(simd)
                for (j = 0; j < W; j++) dv0[j] += l2 * g[j];
            }
            NB__OMP(simd)
            for (j = 0; j < W; j++) g[j] *= l1;
        }
        part[th][0] = s1; part[th][1] = s2;
    }
    if (!vr->mix || !vr->dlam) return;
    for (t = 0; t < used; t++) {
        vr->dlam[0] += (nb_real)part[t][0];
        vr->dlam[1] += (nb_real)part[t][1];
    }
}

/* nGPT's s_qk: Q and K (after RoPE) times c s per column, c = sqrt(d), s shared by Q head h
   and K head h; the unscaled Q|K are kept in qk0 for the backward. */
static void nb__qk_scale_fwd(nb_ctx* ctx, const nb_attn_plan* pl, const nb__attn_mem* m,
                             const nb_real* sqk, int BT) {
    const int d = pl->desc.d_model, P = pl->qkv_width;
    const nb_real c = (nb_real)sqrt((double)d);
    int r;
    (void)ctx;
    NB__OMP(parallel for schedule(static) num_threads(nb_num_threads(ctx))
            if((size_t)BT * d >= NB__PAR_MIN))
    for (r = 0; r < BT; r++) {
        nb_real *q = m->qkv + (size_t)r * P, *q0 = m->qk0 + (size_t)r * 2 * d;
        int j;
        memcpy(q0, q, 2 * (size_t)d * sizeof(nb_real));
        NB__OMP(simd)
        for (j = 0; j < d; j++) {
            q[j] *= c * sqk[j];
            q[d + j] *= c * sqk[j];
        }
    }
}

/* Its backward on dQ|dK in place: q' = c s q0, k' = c s k0: ds += c sum_rows (dq' q0 +
   dk' k0) (column sums, a GEMM with ones: deterministic); dq0 = c s dq', dk0 = c s dk'. */
static nb_result nb__qk_scale_bwd(nb_ctx* ctx, const nb_attn_plan* pl, const nb__attn_mem* m,
                                  const nb_real* sqk, nb_real* dsqk, int BT) {
    const int d = pl->desc.d_model, P = pl->qkv_width;
    const nb_real c = (nb_real)sqrt((double)d);
    int r;
    (void)ctx;
    NB__OMP(parallel for schedule(static) num_threads(nb_num_threads(ctx))
            if((size_t)BT * d >= NB__PAR_MIN))
    for (r = 0; r < BT; r++) {
        nb_real *dq = m->dqkv + (size_t)r * P, *e = m->qke + (size_t)r * d;
        const nb_real* q0 = m->qk0 + (size_t)r * 2 * d;
        int j;
        NB__OMP(simd)
        for (j = 0; j < d; j++) {
            e[j] = c * (dq[j] * q0[j] + dq[d + j] * q0[d + j]);
            dq[j] *= c * sqk[j];
            dq[d + j] *= c * sqk[j];
        }
    }
    return nb__bias_grad(ctx, dsqk, m->qke, BT, d, m->ones);
}

/* Gated attention's output gate, sig = sigmoid(g) of the gate logits g (the last G columns
   of the projection rows, ld P) */
static void nb__gate_sig(nb_ctx* ctx, const nb_attn_plan* pl, nb_real* sig, const nb_real* qkv,
                         int BT) {
    const int G = pl->gate_width, P = pl->qkv_width;
    int r;
    (void)ctx;
    NB__OMP(parallel for schedule(static) num_threads(nb_num_threads(ctx))
            if((size_t)BT * G >= NB__PAR_MIN))
    for (r = 0; r < BT; r++) {
        const nb_real* g = qkv + (size_t)r * P + (P - G);
        nb_real* sr = sig + (size_t)r * G;
        int j;
        NB__SIMD_EXP(simd)
        for (j = 0; j < G; j++) sr[j] = 1 / (1 + NB__EXP(-g[j]));
    }
}

/* c' = c sig: one gate per head (G = H, over its d_k values) or per element (G = d) */
static void nb__gate_fwd(nb_ctx* ctx, const nb_attn_plan* pl, nb_real* cg, const nb_real* c,
                         const nb_real* sig, int BT) {
    const int G = pl->gate_width, d = pl->desc.d_model, dk = G == d ? 1 : pl->head_dim;
    int r;
    (void)ctx;
    NB__OMP(parallel for schedule(static) num_threads(nb_num_threads(ctx))
            if((size_t)BT * d >= NB__PAR_MIN))
    for (r = 0; r < BT; r++) {
        const nb_real *cr = c + (size_t)r * d, *sr = sig + (size_t)r * G;
        nb_real* out = cg + (size_t)r * d;
        int h, i;
        for (h = 0; h < G; h++) {
            NB__OMP(simd)
            for (i = 0; i < dk; i++) out[h * dk + i] = cr[h * dk + i] * sr[h];
        }
    }
}

/* Its backward, dc (= dc') in place: with c' = c s, s = sigmoid(g): dc = s dc',
   dg = s (1 - s) sum dc' c over the gate's values (its head's d_k, or the one), into the gate
   columns of dqkv (ld P). */
static void nb__gate_bwd(nb_ctx* ctx, const nb_attn_plan* pl, nb_real* dc, const nb_real* c,
                         const nb_real* sig, nb_real* dqkv, int BT) {
    const int G = pl->gate_width, d = pl->desc.d_model, P = pl->qkv_width;
    const int dk = G == d ? 1 : pl->head_dim;
    int r;
    (void)ctx;
    NB__OMP(parallel for schedule(static) num_threads(nb_num_threads(ctx))
            if((size_t)BT * d >= NB__PAR_MIN))
    for (r = 0; r < BT; r++) {
        const nb_real *cr = c + (size_t)r * d, *sr = sig + (size_t)r * G;
        nb_real *dr = dc + (size_t)r * d, *dg = dqkv + (size_t)r * P + (P - G);
        int h, i;
        for (h = 0; h < G; h++) {
            const nb_real sg = sr[h];
            nb_real acc = 0;
            NB__OMP(simd reduction(+:acc))
            for (i = 0; i < dk; i++) {
                acc += dr[h * dk + i] * cr[h * dk + i];
                dr[h * dk + i] *= sg;
            }
            dg[h] = sg * (1 - sg) * acc;
        }
    }
}

/* desc.bf16_weights: the GEMMs read the caller's bf16 weights (never written here); returns
   whether they do */
static int nb__attn_weights16(const nb_attn_plan* pl, const nb_attn_params* p, nb__attn_mem* m) {
    if (!pl->desc.gemm.bf16_weights) return 0;
    m->wqkv16 = (unsigned short*)(size_t)p->w_qkv16;
    m->wo16 = (unsigned short*)(size_t)p->w_o16;
    return 1;
}

/* The Q, K, V site norms from the raw projection (m->raw) into m->qkv; a slice without a norm,
   and the gate's logits, are copied as projected. */
static nb_result nb__qkv_norms_fwd(nb_ctx* ctx, const nb_attn_plan* pl, const nb_attn_params* p,
                                   const nb__attn_mem* m, int BT) {
    const int P = pl->qkv_width;
    nb_result rc;
    int site;
    for (site = 0; site < 3; site++) {
        const int off = nb__site_offset(pl, site), w = nb__site_heads(pl, site) * pl->head_dim;
        if (nb__site_on(pl, site)) {
            if ((rc = nb__site_norm(ctx, pl, site, p, NULL, m, BT))) return rc;
        } else { /* an unnormalized slice is used as projected */
            nb__copy_cols(ctx, m->qkv + off, m->raw + off, BT, w, P);
        }
    }
    if (m->sig) /* the gate logits too: sig has them, but the bf16 copy reads all */
        nb__copy_cols(ctx, m->qkv + P - pl->gate_width, m->raw + P - pl->gate_width, BT,
                      pl->gate_width, P);
    nb__trace(ctx, "qkv_normed", m->qkv, BT, P);
    return NB_OK;
}

static nb_result nb__attn_fwd(const nb__sub_call* k, const nb_attn_plan* pl,
                              const nb_attn_params* p, nb_real* out, const nb_real* x) {
    const char* const fn = "nb_attn_forward";
    nb_ctx* ctx = k->ctx;
    const int B = k->B, T = k->T;
    const nb__vres* vr = k->vr;
    nb__attn_mem m;
    double t0;
    nb_result rc = nb__attn_check_call(k, fn, pl, p, "out x cache scratch", out, x);
    int d, P, BT, bf, rope16;
    if (rc) return rc;
    bf = NB__BF16(pl);
    NB_ASSERT(bf || !(k->opts & NB__X16_GIVEN));
    const nb__gemm_at at = nb__at(ctx, fn, pl->mm, pl->bf16_gemm, bf);
    d = pl->desc.d_model; P = pl->qkv_width; BT = B * T;
    nb__attn_carve(pl, B, T, pl->max_threads, k->cache, k->scratch, &m);
    NB_ASSERT(m.n_cache <= pl->n_cache && m.n_scratch <= pl->n_scratch);
    m.sinks = p->sinks;
    nb__hdr_put(m.hdr, 0, 0, 0, 0); /* not a complete forward until the end */
    if (bf) { /* the bf16 copies of the weights and x serve the forward and the backward */
        if (!nb__attn_weights16(pl, p, &m)) {
            nb__to_bf16(ctx, m.wqkv16, p->w_qkv, P, d, d);
            nb__to_bf16(ctx, m.wo16, p->w_o, d, d, d);
        }
        if (!(k->opts & NB__X16_GIVEN)) nb__to_bf16(ctx, m.x16, x, BT, d, d);
    }
    /* [Q|K|V] = x W_qkv^T; with site norms the raw projection is kept for their backward */
    rc = nb__gemm(&at, BT, P, d, 1, nb__op(x, m.x16, d, 0),
                  nb__op(p->w_qkv, m.wqkv16, d, 1), 0, m.raw ? m.raw : m.qkv, P);
    if (rc) return rc;
    if (p->b_qkv) nb__add_bias(ctx, m.raw ? m.raw : m.qkv, p->b_qkv, BT, P);
    nb__trace(ctx, "qkv", m.raw ? m.raw : m.qkv, BT, P);
    if (pl->desc.attn.clip_qkv > 0) nb__clip_qkv(ctx, pl, m.raw, NULL, BT);
    if (m.sig) nb__gate_sig(ctx, pl, m.sig, m.raw ? m.raw : m.qkv, BT);
    if (m.raw && (rc = nb__qkv_norms_fwd(ctx, pl, p, &m, BT))) return rc;
    if (vr) { /* the value residual on the values attention uses: after the V norm */
        nb__vres_fwd(ctx, pl, vr, m.qkv, BT);
        if (vr->mix) nb__trace(ctx, "qkv_vres", m.qkv, BT, P);
    }
    /* RoPE after the norms; Q and K heads are adjacent in a row, so one call rotates both. BF16:
       the core's only copy of Q|K|V is bf16, written by RoPE when it is the last pass. */
    rope16 = bf && pl->desc.attn.rope && !pl->desc.attn.qk_scale;
    if (pl->desc.attn.rope &&
        (rc = nb__rope(ctx, m.qkv, P, B, T, pl->desc.n_heads + pl->desc.n_kv_heads, pl->head_dim,
                       pl->desc.attn.rope_theta, 0, rope16 ? m.qkv16 : NULL, P)))
        return rc;
    if (pl->desc.attn.rope) nb__trace(ctx, "qkv_rope", m.qkv, BT, P);
    if (pl->desc.attn.qk_scale) {
        nb__qk_scale_fwd(ctx, pl, &m, p->qk_scale, BT);
        nb__trace(ctx, "qkv_scaled", m.qkv, BT, P);
    }
    if (bf && !rope16) nb__to_bf16(ctx, m.qkv16, m.qkv, BT, P, P);
    if (bf && m.cg == m.o) m.o16 = m.c16; /* C' = O: the core writes its bf16 copy */
    t0 = nb__prof_begin(ctx);
    nb__attn_core_forward(ctx, pl, B, T, &m);
    nb__prof_end(ctx, NB_PROF_ATTN, t0);
    nb__trace(ctx, "context", m.o, BT, d);
    if (nb__site_on(pl, 3)) {
        rc = nb__site_norm(ctx, pl, 3, p, NULL, &m, BT);
        if (rc) return rc;
        nb__trace(ctx, "c_normed", m.c, BT, d);
    }
    if (m.sig) {
        nb__gate_fwd(ctx, pl, m.cg, m.c, m.sig, BT);
        nb__trace(ctx, "c_gated", m.cg, BT, d);
    }
    if (bf && !m.o16) nb__to_bf16(ctx, m.c16, m.cg, BT, d, d);
    rc = nb__gemm(&at, BT, d, d, 1, nb__op(m.cg, m.c16, d, 0),
                  nb__op(p->w_o, m.wo16, d, 1), 0, out, d);
    if (rc) return rc;
    if (p->b_o) nb__add_bias(ctx, out, p->b_o, BT, d);
    nb__trace(ctx, "out", out, BT, d);
    nb__hdr_put(m.hdr, NB__MAGIC_ATTN, nb__attn_id(pl), B, T);
    return NB_OK;
}

NBDEF nb_result nb_attn_forward(nb_ctx* ctx, const nb_attn_plan* plan, const nb_attn_params* p,
                                nb_real* out, const nb_real* x, int B, int T, nb_real* cache,
                                nb_real* scratch) {
    const nb__sub_call k = nb__sub_call_of(ctx, B, T, cache, scratch);
    return nb__attn_fwd(&k, plan, p, out, x);
}

/* The cache of a complete forward of this plan with (B, T) (cache not NULL). */
static nb_result nb__attn_cache_ok(nb_ctx* ctx, const char* fn, const nb_attn_plan* pl,
                                   const nb_real* cache, int B, int T) {
    NB__CHECK(!nb__hdr_ok(cache, NB__MAGIC_ATTN, nb__attn_id(pl), B, T), NB_ERR_CONFIG,
              "%s: the attention cache does not hold a forward of this plan with B=%d, T=%d",
              fn, B, T);
    return NB_OK;
}

static nb_result nb__attn_bwd(const nb__sub_call* k, const nb_attn_plan* pl,
                              const nb_attn_params* p, nb_attn_params* g, nb_real* dx,
                              const nb_real* dout, const nb_real* x) {
    const char* const fn = "nb_attn_backward";
    nb_ctx* ctx = k->ctx;
    const int B = k->B, T = k->T, accumulate_dx = k->opts & NB__BWD_ACC_DX;
    const nb_real dw_beta = k->opts & NB__BWD_WRITE_DW ? 0 : 1;
    const nb__vres* vr = k->vr;
    nb__attn_mem m;
    double t0;
    nb_result rc = nb__attn_check_call(k, fn, pl, p, "dx dout cache scratch", dx, dout);
    int site, d, P, BT, bf, rope16;
    if (rc) return rc;
    bf = NB__BF16(pl);
    const nb__gemm_at at = nb__at(ctx, fn, pl->mm, pl->bf16_gemm, bf);
    NB__CHECK(!g || !g->w_qkv || !g->w_o || !nb__x_or_given(k, x), NB_ERR_NULL,
              "nb_attn_backward: %s is required (NULL)",
              !g ? "g" : !g->w_qkv ? "g.w_qkv" : !g->w_o ? "g.w_o" : "x");
    NB__CHECK(nb__site_missing(pl, g), NB_ERR_NULL,
              "nb_attn_backward: a normalized site has no %s gradient pointer",
              nb__site_missing(pl, g));
    NB__CHECK(nb__param_missing(pl, g), NB_ERR_NULL,
              "nb_attn_backward: the plan has g.%s but it is NULL", nb__param_missing(pl, g));
    if ((rc = nb__attn_cache_ok(ctx, "nb_attn_backward", pl, k->cache, B, T))) return rc;
    d = pl->desc.d_model; P = pl->qkv_width; BT = B * T;
    nb__attn_carve(pl, B, T, pl->max_threads, k->cache, k->scratch, &m);
    NB_ASSERT(m.n_cache <= pl->n_cache && m.n_scratch <= pl->n_scratch);
    m.sinks = p->sinks;
    nb__attn_weights16(pl, p, &m);
    NB_ASSERT(bf || !(k->opts & NB__DOUT16_GIVEN));
    if (bf && !(k->opts & NB__DOUT16_GIVEN)) nb__to_bf16(ctx, m.dout16, dout, BT, d, d);
    /* dC = dout W_o. The packed path reads dO only as bf16: where nothing comes between (no C
       norm, no gate) and the GEMM writes bf16 (oneDNN), it writes that copy itself, into dC's
       buffer (dout16 is still dW_o's operand), the same rounding of the same product */
    m.do16_made = NB__PACKED(pl) && !m.sig && !nb__site_on(pl, 3) && nb__gemm_writes16(&at);
    rc = m.do16_made ? nb__gemm16(&at, BT, d, d, nb__op(dout, m.dout16, d, 0),
                                  nb__op(p->w_o, m.wo16, d, 0), (unsigned short*)m.dc, d)
                     : nb__gemm(&at, BT, d, d, 1, nb__op(dout, m.dout16, d, 0),
                                nb__op(p->w_o, m.wo16, d, 0), 0, m.dc, d);
    if (rc) return rc;
    /* dW_o += dout^T C' (or = with NB__BWD_WRITE_DW, as for dW_qkv) */
    if ((rc = nb__gemm(&at, d, d, BT, 1, nb__op(dout, m.dout16, d, 1),
                       nb__op(m.cg, m.c16, d, 0), dw_beta, g->w_o, d)))
        return rc;
    if (m.do16_made) m.dout16 = (unsigned short*)m.dc;
    if ((pl->desc.attn.bias & NB_ATTN_BIAS_OUT) && /* db_o += dout^T 1 */
        (rc = nb__bias_grad(ctx, g->b_o, dout, BT, d, m.ones)))
        return rc;
    nb__zero(ctx, m.dqkv, (size_t)BT * P);
    if (m.sig) nb__gate_bwd(ctx, pl, m.dc, m.c, m.sig, m.dqkv, BT); /* dC, dG from dC' */
    if (nb__site_on(pl, 3)) {                                             /* dO = Nc'(dC), in place */
        rc = nb__site_norm(ctx, pl, 3, p, g, &m, BT);
        if (rc) return rc;
    }
    t0 = nb__prof_begin(ctx);
    nb__attn_core_backward(ctx, pl, B, T, &m);
    if (m.dsink) nb__sink_grad(pl, &m, g->sinks, B, T);
    nb__prof_end(ctx, NB_PROF_ATTN, t0);
    if (pl->desc.attn.qk_scale &&
        (rc = nb__qk_scale_bwd(ctx, pl, &m, p->qk_scale, g->qk_scale, BT)))
        return rc;
    /* BF16: dQKV's bf16 copy written by the inverse rotation when nothing follows it */
    rope16 = bf && pl->desc.attn.rope && !vr && !nb__site_on(pl, 0) && !nb__site_on(pl, 1) &&
             !nb__site_on(pl, 2) && !(pl->desc.attn.clip_qkv > 0);
    if (pl->desc.attn.rope && /* the transpose of a rotation is the inverse rotation */
        (rc = nb__rope(ctx, m.dqkv, P, B, T, pl->desc.n_heads + pl->desc.n_kv_heads, pl->head_dim,
                       pl->desc.attn.rope_theta, 1, rope16 ? m.dqkv16 : NULL, P)))
        return rc;
    if (vr) nb__vres_bwd(ctx, pl, vr, m.dqkv, BT); /* dV' -> dV, before the V norm's backward */
    for (site = 0; site < 3; site++)
        if (nb__site_on(pl, site)) {
            if ((rc = nb__site_norm(ctx, pl, site, p, g, &m, BT))) return rc;
        }
    if (pl->desc.attn.clip_qkv > 0) nb__clip_qkv(ctx, pl, m.raw, m.dqkv, BT);
    /* dW_qkv */
    if (bf && !rope16) nb__to_bf16(ctx, m.dqkv16, m.dqkv, BT, P, P);
    if ((rc = nb__gemm(&at, P, d, BT, 1, nb__op(m.dqkv, m.dqkv16, P, 1),
                       nb__op(x, m.x16, d, 0), dw_beta, g->w_qkv, d)))
        return rc;
    if ((pl->desc.attn.bias & NB_ATTN_BIAS_QKV) && /* of the raw projection, before the norms */
        (rc = nb__bias_grad(ctx, g->b_qkv, m.dqkv, BT, P, m.ones)))
        return rc;
    /* dx = dQKV W_qkv */
    return nb__gemm(&at, BT, d, P, 1, nb__op(m.dqkv, m.dqkv16, P, 0),
                    nb__op(p->w_qkv, m.wqkv16, d, 0), accumulate_dx ? 1 : 0, dx, d);
}

NBDEF nb_result nb_attn_backward(nb_ctx* ctx, const nb_attn_plan* plan, const nb_attn_params* p,
                                 nb_attn_params* g, nb_real* dx, const nb_real* dout,
                                 const nb_real* x, int B, int T, const nb_real* cache,
                                 nb_real* scratch, int accumulate_dx) {
    nb__sub_call k = nb__sub_call_of(ctx, B, T, cache, scratch);
    k.opts = accumulate_dx ? NB__BWD_ACC_DX : 0;
    return nb__attn_bwd(&k, plan, p, g, dx, dout, x);
}

/* The per-(batch, head, tile) records of nb__attn_core_forward, reduced in a fixed order */
static void nb__head_stats(const nb_attn_plan* pl, const nb_real* cache, int B, int T,
                           double* max_logit, double* first_mass, double* sink_mass) {
    const int H = pl->desc.n_heads, nt = nb__tiles(T);
    const size_t third = (size_t)B * H * nt;
    nb__attn_mem m;
    int h, b, t;
    nb__attn_carve(pl, B, T, pl->max_threads, (nb_real*)(size_t)cache, NULL, &m);
    for (h = 0; h < H; h++) {
        double mx = -INFINITY, mass = 0, sunk = 0;
        for (b = 0; b < B; b++)
            for (t = 0; t < nt; t++) {
                const size_t at = ((size_t)b * H + h) * nt + t;
                if (m.hs[at] > mx || t + b == 0) mx = m.hs[at];
                mass += m.hs[third + at];
                if (m.psink) sunk += m.hs[2 * third + at];
            }
        if (max_logit) max_logit[h] = mx;
        if (first_mass) first_mass[h] = mass / ((double)B * T);
        if (sink_mass) sink_mass[h] = sunk / ((double)B * T);
    }
}

NBDEF nb_result nb_attn_head_stats(const nb_attn_plan* plan, const nb_real* cache, int B, int T,
                                   double* max_logit, double* first_mass) {
    if (!plan || !cache || (!max_logit && !first_mass)) return NB_ERR_NULL;
    if (B <= 0 || T <= 0 || B > plan->max_batch || T > plan->max_seq ||
        !nb__hdr_ok(cache, NB__MAGIC_ATTN, nb__attn_id(plan), B, T))
        return NB_ERR_CONFIG;
    nb__head_stats(plan, cache, B, T, max_logit, first_mass, NULL);
    return NB_OK;
}

NBDEF nb_result nb_attn_sink_mass(const nb_attn_plan* plan, const nb_real* cache, int B, int T,
                                  double* sink_mass) {
    if (!plan || !cache || !sink_mass) return NB_ERR_NULL;
    if (B <= 0 || T <= 0 || B > plan->max_batch || T > plan->max_seq ||
        !nb__hdr_ok(cache, NB__MAGIC_ATTN, nb__attn_id(plan), B, T))
        return NB_ERR_CONFIG;
    nb__head_stats(plan, cache, B, T, NULL, NULL, sink_mass);
    return NB_OK;
}

/* ---- feed-forward sublayer ------------------------------------------------------------------ */

/* Where an FFN's buffers live (as nb__attn_carve). In BF16 the activation a is made in
   scratch and cached as bf16, the only form its GEMMs read. With gemm.bf16_outputs the
   projection is cached as bf16 (h16) and h is its float form in scratch (dh's: the forward
   rounds it there, the backward widens it there and computes dh over it, row by row); da16
   is da as a GEMM that writes bf16 leaves it (nb__gemm_writes16). */
typedef struct nb__ffn_mem {
    nb_real *hdr, *h, *a;               /* cache (a: scratch in BF16; h: with h16) */
    nb_real* h0;                        /* cache: the projection before in_scale */
    nb_real *dh, *da, *ones;            /* scratch */
    nb_real* e;                         /* scratch: in_scale's gradient terms */
    unsigned short *w_in16, *w_out16, *x16, *a16, *dout16, *dh16; /* BF16 only */
    unsigned short *h16, *da16;         /* gemm.bf16_outputs only */
    size_t n_cache, n_scratch;
} nb__ffn_mem;

static void nb__ffn_carve(const nb_ffn_plan* pl, int B, int T, nb_real* cache, nb_real* scratch,
                          nb__ffn_mem* m) {
    const size_t BT = nb__mulz((size_t)B, (size_t)T), W = (size_t)pl->in_width;
    const size_t d = (size_t)pl->desc.d_model, f = (size_t)pl->desc.ffn.d_ff;
    const int half = NB__BF16(pl);
    const int out16 = half && pl->desc.gemm.bf16_outputs;
    size_t cu = 0, su = 0;
    memset(m, 0, sizeof *m);
    m->hdr = nb__take(cache, &cu, NB__HDR);
    if (out16) m->h16 = nb__take16(cache, &cu, nb__mulz(BT, W));
    else m->h = nb__take(cache, &cu, nb__mulz(BT, W));
    m->dh = nb__take(scratch, &su, nb__mulz(BT, W));
    if (out16) { /* (the layout never depends on which buffers are given: cache may be NULL) */
        m->h = m->dh;
        m->da16 = nb__take16(scratch, &su, nb__mulz(BT, f));
    }
    m->da = nb__take(scratch, &su, nb__mulz(BT, f));
    m->ones = nb__take(scratch, &su, BT);
    if (pl->desc.ffn.in_scale) {
        m->h0 = nb__take(cache, &cu, nb__mulz(BT, W));
        m->e = nb__take(scratch, &su, nb__mulz(BT, W));
    }
    if (half) {
        m->a = m->da; /* the forward's a, the backward's da */
        m->a16 = nb__take16(cache, &cu, nb__mulz(BT, f));
        if (!pl->desc.gemm.bf16_weights) { /* else the caller's: nb__ffn_weights16 */
            m->w_in16 = nb__take16(cache, &cu, nb__mulz(W, d));
            m->w_out16 = nb__take16(cache, &cu, nb__mulz(d, f));
        }
        m->x16 = nb__take16(cache, &cu, nb__mulz(BT, d));
        m->dout16 = nb__take16(scratch, &su, nb__mulz(BT, d));
        m->dh16 = nb__take16(scratch, &su, nb__mulz(BT, W));
    } else {
        m->a = nb__take(cache, &cu, nb__mulz(BT, f));
    }
    m->n_cache = cu;
    m->n_scratch = su;
}

NBDEF nb_result nb_ffn_plan_make(nb_ctx* ctx, nb_ffn_plan* plan, const nb_ffn_desc* desc,
                                 int max_batch, int max_seq) {
    nb_ffn_desc d;
    nb_ffn_plan pl;
    nb__ffn_mem m;
    long long f, w;
    NB__CHECK(!plan || !desc, NB_ERR_NULL, "nb_ffn_plan_make: plan and desc are required");
    d = *desc;
    if (d.ffn.type == NB_FFN_DEFAULT) d.ffn.type = NB_FFN_SWIGLU;
    NB__CHECK(d.ffn.type != NB_FFN_SWIGLU && d.ffn.type != NB_FFN_GELU_TANH &&
                  d.ffn.type != NB_FFN_GELU_ERF,
              NB_ERR_CONFIG, "nb_ffn_plan_make: unknown ffn.type %d", (int)d.ffn.type);
    NB__CHECK(d.d_model <= 0 || d.ffn.d_ff < 0, NB_ERR_CONFIG,
              "nb_ffn_plan_make: d_model (%d) must be > 0 and ffn.d_ff (%d) >= 0", d.d_model,
              d.ffn.d_ff);
    NB__CHECK(d.ffn.bias < -1 || d.ffn.bias > 1, NB_ERR_CONFIG,
              "nb_ffn_plan_make: ffn.bias (%d) must be -1, 0 or 1", d.ffn.bias);
    NB__CHECK(d.ffn.in_scale < -1 || d.ffn.in_scale > 1, NB_ERR_CONFIG,
              "nb_ffn_plan_make: ffn.in_scale (%d) must be -1 (off), 0 (off) or 1", d.ffn.in_scale);
    if (d.ffn.in_scale < 0) d.ffn.in_scale = 0;
    if (nb__check_gemm_config(ctx, "nb_ffn_plan_make", &d.gemm, 0)) return NB_ERR_CONFIG;
    NB__CHECK(max_batch <= 0 || max_seq <= 0, NB_ERR_SHAPE,
              "nb_ffn_plan_make: max_batch (%d) and max_seq (%d) must be > 0", max_batch,
              max_seq);
    f = d.ffn.d_ff ? d.ffn.d_ff
        : d.ffn.type == NB_FFN_SWIGLU ? (8LL * d.d_model / 3 + 63) / 64 * 64 : 4LL * d.d_model;
    w = d.ffn.type == NB_FFN_SWIGLU ? 2 * f : f;
    /* widths and the row count are ints inside the kernels (and for BLAS) */
    NB__CHECK(w > NB__INT_MAX, NB_ERR_SHAPE,
              "nb_ffn_plan_make: d_ff (%lld%s) overflows int", w,
              d.ffn.type == NB_FFN_SWIGLU ? ", doubled for SwiGLU's w_in" : "");
    NB__CHECK(nb__mulll(max_batch, max_seq) > NB__INT_MAX, NB_ERR_SHAPE,
              "nb_ffn_plan_make: max_batch*max_seq (%lld) overflows int",
              nb__mulll(max_batch, max_seq));
    d.ffn.d_ff = (int)f;
    if (d.ffn.bias == 0) d.ffn.bias = d.ffn.type == NB_FFN_SWIGLU ? -1 : 1;
    memset(&pl, 0, sizeof pl); /* built aside: *plan is untouched on failure */
    pl.desc = d;
    pl.max_batch = max_batch;
    pl.max_seq = max_seq;
    pl.in_width = (int)w;
    pl.bf16_gemm = NB__BF16(&pl) ? nb__bf16_gemm_kernel() : NB__ATTN_EMULATED;
    pl.n_params = nb__addz(nb__addz(nb__mulz((size_t)w, (size_t)d.d_model),
                                    nb__mulz((size_t)d.d_model, (size_t)f)),
                           (d.ffn.bias > 0 ? (size_t)w + (size_t)d.d_model : 0) +
                               (d.ffn.in_scale ? (size_t)w : 0));
    NB__CHECK(nb__too_big(pl.n_params), NB_ERR_SHAPE,
              "nb_ffn_plan_make: n_params = (in_width + d_ff)*d_model (%lld, %d) overflows size_t",
              w + f, d.d_model);
    nb__ffn_carve(&pl, max_batch, max_seq, NULL, NULL, &m);
    pl.n_cache = m.n_cache;
    pl.n_scratch = m.n_scratch;
    NB__CHECK(nb__too_big(pl.n_cache) || nb__too_big(pl.n_scratch), NB_ERR_SHAPE,
              "nb_ffn_plan_make: n_cache and n_scratch = max_batch*max_seq*(in_width + d_ff) "
              "(%d*%d*%lld) overflow size_t", max_batch, max_seq, w + f);
    *plan = pl;
    (void)ctx;
    return NB_OK;
}

/* what an FFN cache depends on (see nb__attn_id) */
static unsigned long long nb__ffn_id(const nb_ffn_plan* pl) {
    unsigned long long h = 0x66666EULL;
    h = nb__hash(h, (unsigned)pl->desc.d_model); h = nb__hash(h, (unsigned)pl->desc.ffn.d_ff);
    h = nb__hash(h, (unsigned)pl->desc.ffn.type); h = nb__hash(h, (unsigned)pl->desc.ffn.bias);
    h = nb__hash(h, (unsigned)pl->desc.gemm.precision);
    h = nb__hash(h, (unsigned)pl->desc.ffn.in_scale);
    h = nb__hash(h, (unsigned)pl->desc.gemm.bf16_weights);
    h = nb__hash(h, (unsigned)pl->desc.gemm.bf16_outputs);
    h = nb__hash(h, (unsigned)pl->max_batch); h = nb__hash(h, (unsigned)pl->max_seq);
    return nb__hash(h, pl->n_cache);
}

NBDEF void nb_ffn_params_bind(const nb_ffn_plan* plan, nb_real* base, nb_ffn_params* p) {
    int d, f, bias;
    if (!plan || !p) return;
    if (!base) { memset(p, 0, sizeof *p); return; }
    d = plan->desc.d_model; f = plan->desc.ffn.d_ff; bias = plan->desc.ffn.bias > 0;
    p->w_in = base;
    base += (size_t)plan->in_width * d;
    p->b_in = bias ? base : NULL;
    base += bias ? plan->in_width : 0;
    p->w_out = base;
    base += (size_t)d * f;
    p->b_out = bias ? base : NULL;
    base += bias ? d : 0;
    p->in_scale = plan->desc.ffn.in_scale ? base : NULL;
    p->w_in16 = p->w_out16 = NULL;
}

/* as nb__attn_check_call */
static nb_result nb__ffn_check_call(const nb__sub_call* k, const char* fn, const nb_ffn_plan* pl,
                                    const nb_ffn_params* p, const char* names, const void* a,
                                    const void* b) {
    nb_ctx* ctx = k->ctx;
    nb_result rc;
    const void* ptrs[6];
    NB__CHECK(!pl || !p, NB_ERR_NULL, "%s: plan and params are required (%s is NULL)", fn,
              pl ? "params" : "plan");
    if ((rc = nb__check_bt(ctx, fn, k->B, k->T, pl->max_batch, pl->max_seq))) return rc;
    ptrs[0] = a; ptrs[1] = nb__x_or_given(k, b); ptrs[2] = k->cache; ptrs[3] = k->scratch;
    ptrs[4] = p->w_in; ptrs[5] = p->w_out;
    if ((rc = nb__need(ctx, fn, names, 4, ptrs))) return rc;
    if ((rc = nb__need(ctx, fn, "params.w_in params.w_out", 2, ptrs + 4))) return rc;
    NB__CHECK(pl->desc.ffn.bias > 0 && (!p->b_in || !p->b_out), NB_ERR_NULL,
              "%s: the plan has biases but b_in or b_out is NULL", fn);
    NB__CHECK(pl->desc.ffn.in_scale && !p->in_scale, NB_ERR_NULL,
              "%s: the plan has in_scale but params.in_scale is NULL", fn);
    ptrs[0] = p->w_in16; ptrs[1] = p->w_out16;
    return pl->desc.gemm.bf16_weights ? nb__need(ctx, fn, "params.w_in16 params.w_out16", 2, ptrs)
                                 : NB_OK;
}

/* as nb__attn_weights16 */
static int nb__ffn_weights16(const nb_ffn_plan* pl, const nb_ffn_params* p, nb__ffn_mem* m) {
    if (!pl->desc.gemm.bf16_weights) return 0;
    m->w_in16 = (unsigned short*)(size_t)p->w_in16;
    m->w_out16 = (unsigned short*)(size_t)p->w_out16;
    return 1;
}

static inline nb_real nb__sigmoid(nb_real z) { return 1 / (1 + NB__EXP(-z)); }

/* GELU and its derivative (dgelu may be NULL). tanh form (GPT-2):
   0.5 x (1 + tanh(u)), u = sqrt(2/pi)(x + 0.044715 x^3), tanh(u) = 1 - 2/(1 + e^2u) so it
   vectorizes; derivative 0.5(1 + t) + 0.5 x (1 - t^2) du/dx. erf form: x Phi(x), derivative
   Phi(x) + x phi(x) (libm erf: not vectorized). */
static inline nb_real nb__gelu_tanh(nb_real x, nb_real* dgelu) {
    const nb_real k = (nb_real)0.7978845608028654, c = (nb_real)0.044715;
    const nb_real t = 1 - 2 / (1 + NB__EXP(2 * k * (x + c * x * x * x)));
    *dgelu = (nb_real)0.5 * (1 + t) + (nb_real)0.5 * x * (1 - t * t) * k * (1 + 3 * c * x * x);
    return (nb_real)0.5 * x * (1 + t);
}
static nb_real nb__gelu_erf(nb_real x, nb_real* dgelu) {
    const double cdf = 0.5 * (1 + erf((double)x * 0.7071067811865476));
    const double pdf = 0.3989422804014327 * exp(-0.5 * (double)x * x);
    *dgelu = (nb_real)(cdf + x * pdf);
    return (nb_real)(x * cdf);
}

static nb_result nb__ffn_fwd(const nb__sub_call* k, const nb_ffn_plan* plan,
                             const nb_ffn_params* p, nb_real* out, const nb_real* x) {
    const char* const fn = "nb_ffn_forward";
    nb_ctx* ctx = k->ctx;
    const int B = k->B, T = k->T;
    nb_real* cache = k->cache;
    nb_result rc = nb__ffn_check_call(k, fn, plan, p, "out x cache scratch", out, x);
    int d, f, W, BT, r, bf, direct;
    nb__ffn_mem m;
    nb_real *h, *a, c;
    if (rc) return rc;
    bf = NB__BF16(plan);
    NB_ASSERT(bf || !(k->opts & NB__X16_GIVEN));
    const nb__gemm_at at = nb__at(ctx, fn, plan->mm, plan->bf16_gemm, bf);
    d = plan->desc.d_model; f = plan->desc.ffn.d_ff; W = plan->in_width; BT = B * T;
    c = (nb_real)sqrt((double)d);
    nb__ffn_carve(plan, B, T, cache, k->scratch, &m);
    h = m.h; a = m.a;
    nb__hdr_put(cache, 0, 0, 0, 0); /* not a complete forward until the end */
    if (bf) { /* the bf16 copies of the weights and x serve the forward and the backward */
        if (!nb__ffn_weights16(plan, p, &m)) {
            nb__to_bf16(ctx, m.w_in16, p->w_in, W, d, d);
            nb__to_bf16(ctx, m.w_out16, p->w_out, d, f, f);
        }
        if (!(k->opts & NB__X16_GIVEN)) nb__to_bf16(ctx, m.x16, x, BT, d, d);
    }
    /* gemm.bf16_outputs: the GEMM writes h's bf16 copy itself where it can and nothing is
       added to h (else each row is rounded below, after the bias and the scale) */
    direct = m.h16 && !p->b_in && !m.h0 && nb__gemm_writes16(&at);
    rc = direct ? nb__gemm16(&at, BT, W, d, nb__op(x, m.x16, d, 0),
                             nb__op(p->w_in, m.w_in16, d, 1), m.h16, W)
                : nb__gemm(&at, BT, W, d, 1, nb__op(x, m.x16, d, 0),
                           nb__op(p->w_in, m.w_in16, d, 1), 0, h, W);
    if (rc) return rc;
    NB__OMP(parallel for schedule(static) num_threads(nb_num_threads(ctx))
            if((size_t)BT * f >= NB__PAR_MIN))
    for (r = 0; r < BT; r++) {
        nb_real* hr = h + (size_t)r * W;
        nb_real* ar = a + (size_t)r * f;
        int i;
        nb_real dg;
        if (direct) nb__row_widen(hr, m.h16 + (size_t)r * W, W);
        if (p->b_in) { /* the bias joins the row while it is in cache for the activation */
            NB__OMP(simd)
            for (i = 0; i < W; i++) hr[i] += p->b_in[i];
        }
        if (m.h0) { /* nGPT's s_uv: h0 kept for the scale's gradient, h scaled */
            nb_real* h0 = m.h0 + (size_t)r * W;
            memcpy(h0, hr, (size_t)W * sizeof(nb_real));
            NB__OMP(simd)
            for (i = 0; i < W; i++) hr[i] *= c * p->in_scale[i];
        }
        if (m.h16 && !direct) nb__row_round(m.h16 + (size_t)r * W, hr, W);
        if (plan->desc.ffn.type == NB_FFN_SWIGLU) {
            NB__SIMD_EXP(simd)
            for (i = 0; i < f; i++) ar[i] = hr[f + i] * nb__sigmoid(hr[f + i]) * hr[i];
        } else if (plan->desc.ffn.type == NB_FFN_GELU_TANH) {
            NB__SIMD_EXP(simd private(dg))
            for (i = 0; i < f; i++) ar[i] = nb__gelu_tanh(hr[i], &dg);
        } else {
            for (i = 0; i < f; i++) ar[i] = nb__gelu_erf(hr[i], &dg);
        }
        if (m.a16) nb__row_bf16(m.a16 + (size_t)r * f, ar, f);
    }
    nb__trace(ctx, "proj", m.h0 ? m.h0 : h, BT, W);
    if (m.h0) nb__trace(ctx, "proj_scaled", h, BT, W);
    nb__trace(ctx, "act", a, BT, f);
    if ((rc = nb__gemm(&at, BT, d, f, 1, nb__op(a, m.a16, f, 0),
                       nb__op(p->w_out, m.w_out16, f, 1), 0, out, d)))
        return rc;
    if (p->b_out) nb__add_bias(ctx, out, p->b_out, BT, d);
    nb__trace(ctx, "out", out, BT, d);
    nb__hdr_put(cache, NB__MAGIC_FFN, nb__ffn_id(plan), B, T);
    return NB_OK;
}

NBDEF nb_result nb_ffn_forward(nb_ctx* ctx, const nb_ffn_plan* plan, const nb_ffn_params* p,
                               nb_real* out, const nb_real* x, int B, int T, nb_real* cache,
                               nb_real* scratch) {
    const nb__sub_call k = nb__sub_call_of(ctx, B, T, cache, scratch);
    return nb__ffn_fwd(&k, plan, p, out, x);
}

static nb_result nb__ffn_cache_ok(nb_ctx* ctx, const char* fn, const nb_ffn_plan* pl,
                                  const nb_real* cache, int B, int T) {
    NB__CHECK(!nb__hdr_ok(cache, NB__MAGIC_FFN, nb__ffn_id(pl), B, T), NB_ERR_CONFIG,
              "%s: the FFN cache does not hold a forward of this plan with B=%d, T=%d", fn, B, T);
    return NB_OK;
}

/* The activation's backward, row by row: dh = da a'(h) (SwiGLU: both halves), times nGPT's
   s_uv with its terms in m->e, and dh's bf16 copy for the GEMMs that read it. With
   gemm.bf16_outputs h is widened from its bf16 cache into dh's row first (dh is computed over
   it: each element is read before it is written) and da is rounded (widened from da16 when the
   GEMM wrote that, da16 != 0). */
static void nb__ffn_act_backward(nb_ctx* ctx, const nb_ffn_plan* plan, const nb_ffn_params* p,
                                 const nb__ffn_mem* m, int BT, int da16) {
    const int f = plan->desc.ffn.d_ff, W = plan->in_width;
    const nb_real c = (nb_real)sqrt((double)plan->desc.d_model);
    int r;
    (void)ctx; /* its thread count, with OpenMP */
    NB__OMP(parallel for schedule(static) num_threads(nb_num_threads(ctx))
            if((size_t)BT * f >= NB__PAR_MIN))
    for (r = 0; r < BT; r++) {
        const nb_real* hr = m->h + (size_t)r * W;
        nb_real* dar = m->da + (size_t)r * f;
        nb_real* dhr = m->dh + (size_t)r * W;
        int i;
        if (m->h16) { /* hr is dhr */
            nb__row_widen(dhr, m->h16 + (size_t)r * W, W);
            if (da16) nb__row_widen(dar, m->da16 + (size_t)r * f, f);
            else nb__row_round(NULL, dar, f);
        }
        if (plan->desc.ffn.type == NB_FFN_SWIGLU) {
            /* a = silu(z) u: du = da silu(z), dz = da u sig(z)(1 + z(1 - sig(z))) */
            NB__SIMD_EXP(simd)
            for (i = 0; i < f; i++) {
                const nb_real u = hr[i], z = hr[f + i], sg = nb__sigmoid(z);
                dhr[i] = dar[i] * z * sg;
                dhr[f + i] = dar[i] * u * sg * (1 + z * (1 - sg));
            }
        } else if (plan->desc.ffn.type == NB_FFN_GELU_TANH) {
            NB__SIMD_EXP(simd)
            for (i = 0; i < f; i++) {
                nb_real dg;
                nb__gelu_tanh(hr[i], &dg);
                dhr[i] = dar[i] * dg;
            }
        } else {
            for (i = 0; i < f; i++) {
                nb_real dg;
                nb__gelu_erf(hr[i], &dg);
                dhr[i] = dar[i] * dg;
            }
        }
        if (m->e) { /* h = c s h0: ds += c sum_rows dh h0 (below); dh0 = c s dh */
            const nb_real* h0 = m->h0 + (size_t)r * W;
            nb_real* er = m->e + (size_t)r * W;
            NB__OMP(simd)
            for (i = 0; i < W; i++) {
                er[i] = c * dhr[i] * h0[i];
                dhr[i] *= c * p->in_scale[i];
            }
        }
        if (m->dh16) nb__row_bf16(m->dh16 + (size_t)r * W, dhr, W);
    }
}

static nb_result nb__ffn_bwd(const nb__sub_call* k, const nb_ffn_plan* plan,
                             const nb_ffn_params* p, nb_ffn_params* g, nb_real* dx,
                             const nb_real* dout, const nb_real* x) {
    const char* const fn = "nb_ffn_backward";
    nb_ctx* ctx = k->ctx;
    const int B = k->B, T = k->T, opts = k->opts;
    const nb_real dw_beta = opts & NB__BWD_WRITE_DW ? 0 : 1;
    nb_result rc = nb__ffn_check_call(k, fn, plan, p, "dx dout cache scratch", dx, dout);
    int d, f, W, BT, bf, da16;
    nb__ffn_mem m;
    if (rc) return rc;
    bf = NB__BF16(plan);
    const nb__gemm_at at = nb__at(ctx, fn, plan->mm, plan->bf16_gemm, bf);
    NB__CHECK(!g || !g->w_in || !g->w_out || !nb__x_or_given(k, x) ||
                  (plan->desc.ffn.bias > 0 && (!g->b_in || !g->b_out)) ||
                  (plan->desc.ffn.in_scale && !g->in_scale),
              NB_ERR_NULL, "nb_ffn_backward: %s is required (NULL)",
              !g ? "g" : !g->w_in ? "g.w_in" : !g->w_out ? "g.w_out" : !nb__x_or_given(k, x) ? "x"
              : plan->desc.ffn.bias > 0 && (!g->b_in || !g->b_out) ? "g.b_in/g.b_out"
                                                                    : "g.in_scale");
    if ((rc = nb__ffn_cache_ok(ctx, "nb_ffn_backward", plan, k->cache, B, T))) return rc;
    d = plan->desc.d_model; f = plan->desc.ffn.d_ff; W = plan->in_width; BT = B * T;
    nb__ffn_carve(plan, B, T, k->cache, k->scratch, &m);
    nb__ffn_weights16(plan, p, &m);
    NB_ASSERT(bf || !(opts & NB__DOUT16_GIVEN));
    if (bf && !(opts & NB__DOUT16_GIVEN)) nb__to_bf16(ctx, m.dout16, dout, BT, d, d);
    /* da = dout W_out (gemm.bf16_outputs: in bf16 where the GEMM writes it) */
    da16 = m.h16 && nb__gemm_writes16(&at);
    rc = da16 ? nb__gemm16(&at, BT, f, d, nb__op(dout, m.dout16, d, 0),
                           nb__op(p->w_out, m.w_out16, f, 0), m.da16, f)
              : nb__gemm(&at, BT, f, d, 1, nb__op(dout, m.dout16, d, 0),
                         nb__op(p->w_out, m.w_out16, f, 0), 0, m.da, f);
    if (rc) return rc;
    /* dW_out += dout^T a (= with NB__BWD_WRITE_DW, as dW_in) */
    if ((rc = nb__gemm(&at, d, f, BT, 1, nb__op(dout, m.dout16, d, 1),
                       nb__op(m.a, m.a16, f, 0), dw_beta, g->w_out, f)))
        return rc;
    if (g->b_out && (rc = nb__bias_grad(ctx, g->b_out, dout, BT, d, m.ones))) return rc;
    nb__ffn_act_backward(ctx, plan, p, &m, BT, da16);
    if (m.e && (rc = nb__bias_grad(ctx, g->in_scale, m.e, BT, W, m.ones))) return rc;
    /* dW_in += dh^T x */
    if ((rc = nb__gemm(&at, W, d, BT, 1, nb__op(m.dh, m.dh16, W, 1),
                       nb__op(x, m.x16, d, 0), dw_beta, g->w_in, d)))
        return rc;
    if (g->b_in && (rc = nb__bias_grad(ctx, g->b_in, m.dh, BT, W, m.ones))) return rc;
    /* dx = dh W_in */
    return nb__gemm(&at, BT, d, W, 1, nb__op(m.dh, m.dh16, W, 0),
                    nb__op(p->w_in, m.w_in16, d, 0), opts & NB__BWD_ACC_DX ? 1 : 0, dx, d);
}
NBDEF nb_result nb_ffn_backward(nb_ctx* ctx, const nb_ffn_plan* plan, const nb_ffn_params* p,
                                nb_ffn_params* g, nb_real* dx, const nb_real* dout,
                                const nb_real* x, int B, int T, const nb_real* cache,
                                nb_real* scratch, int accumulate_dx) {
    nb__sub_call k = nb__sub_call_of(ctx, B, T, cache, scratch);
    k.opts = accumulate_dx ? NB__BWD_ACC_DX : 0;
    return nb__ffn_bwd(&k, plan, p, g, dx, dout, x);
}

/* ---- parameter layout ----------------------------------------------------------------------- */

/* Block norm modules of a layer, in parameter order. A module is a gain (and a bias for
   LayerNorm) of width d. The SiameseNorm forms reuse the same names for their norms. */
enum {
    NB__ATTN_IN, NB__ATTN_OUT, NB__ATTN_POST, NB__FF_IN, NB__FF_OUT, NB__FF_POST,
    NB__ATTN_Y, NB__ATTN_INPUT, NB__FF_Y, NB__FF_INPUT, NB__ATTN_RES, NB__FF_RES, NB__NORMS
};
static const char* const nb__norm_names[NB__NORMS] = {
    "attn_norm", "attn_out_norm", "attn_post_norm", "ff_norm", "ff_out_norm", "ff_post_norm",
    "attn_y_norm", "attn_input_norm", "ff_y_norm", "ff_input_norm", "attn_res_norm",
    "ff_res_norm"};
/* stack-level norm modules */
enum { NB__EMBED, NB__LNF, NB__LNYF, NB__LNFINAL, NB__TOP_NORMS };
static const char* const nb__top_names[NB__TOP_NORMS] = {"embed_norm", "ln_f", "ln_y_f",
                                                         "ln_final_f"};

typedef struct nb__norm { nb_real *g, *b, *a; } nb__norm; /* gain, bias, DyT alpha (or NULL) */

/* A hyper-connection's tensors (NULL when absent). mHC, IHC: fn, base, scale (and the head's).
   HC: fn = dynamic_alpha_fn, base = static_alpha, scale = dynamic_alpha_scale, fn2 =
   dynamic_beta_fn, base2 = static_beta, scale2 = dynamic_beta_scale, n = its norm. */
typedef struct nb__hc {
    nb_real *fn, *base, *scale, *fn2, *base2, *scale2;
    nb__norm n;
} nb__hc;

typedef struct nb__layer_tensors { /* one layer's parameters (or gradients) */
    nb_attn_params attn;
    nb_ffn_params ffn;
    nb__norm n[NB__NORMS];
    nb_real* gamma;              /* SiameseNorm c1 */
    nb_real* bs[2];              /* branch scales of attention, FFN (ReZero's may be one) */
    nb_real* vres;               /* value residual lambdas (learnable, l >= 1), value embeddings' */
    nb__hc hc[2];                /* hyper-connections of attention, FFN */
    nb_real* dwa;                /* DenseFormer's weights a_l */
    nb_real *arq[2], *arg[2];    /* Attention Residuals: the readers before attention (l >= 1)
                                    and FFN, their pseudo-query and key-norm gain */
    nb_real *skw, *x0l;          /* U-Net skip weight (l >= L/2), re-injection lambdas */
} nb__layer_tensors;

typedef struct nb__top_tensors { /* stack-level */
    nb_real* es;                 /* embed_scale's scalar, or NULL */
    nb__norm n[NB__TOP_NORMS];
    nb__hc head;                 /* mHC/IHC's weighting of the streams before the final norm */
    nb_real *arq, *arg;          /* Attention Residuals: the reader before the final norm */
} nb__top_tensors;

static int nb__hyper(const nb_stack* s) { return s->desc.hyper.kind > NB_HYPER_NONE; }
/* U-Net skips or the re-injection of x_0 (one topology); layer l's input mixed by them */
static int nb__unet(const nb_stack* s) {
    return s->desc.residual.unet_skips || s->desc.residual.reinject_x0;
}
/* the residual option that mixes layers' outputs into later inputs (NULL: none), for messages */
static const char* nb__cross_layer(const nb_stack* s) {
    const nb_residual_config* rs = &s->desc.residual;
    return rs->dwa ? "dwa" : rs->attn_res ? "attn_res" : rs->unet_skips ? "unet_skips"
         : rs->reinject_x0 ? "reinject_x0" : NULL;
}
static int nb__unet_mixed(const nb_stack* s, int l) {
    return s->desc.residual.reinject_x0 ||
           (s->desc.residual.unet_skips && l >= s->desc.n_layers / 2);
}
/* DenseFormer: layer l averages the outputs h_j for j = first, first + k, ..., l + 1 */
static int nb__dwa_first(const nb_stack* s, int l) {
    return (l + 1) % s->desc.residual.dwa_dilation;
}
static int nb__dwa_count(const nb_stack* s, int l) {
    return (l + 1) / s->desc.residual.dwa_dilation + 1;
}
/* 1: layer l averages (its period's turn); else it passes its output on */
static int nb__dwa_here(const nb_stack* s, int l) {
    return (l + 1) % s->desc.residual.dwa_period == 0;
}
/* Attention Residuals: the reader before sublayer j = 1 .. 2L (2L: the output) has
   2 + (j-1)/S sources: x_0, the (j-1)/S blocks completed before sublayer j-1, and the partial
   sum through j-1 (a completed block itself where j starts one) */
static int nb__ar_count(const nb_stack* s, int j) {
    return 2 + (j - 1) / s->desc.residual.attn_res_block;
}
/* the offset of reader j's weights in a row of all of them (1 <= j <= 2L + 1: the total) */
static size_t nb__ar_aoff(const nb_stack* s, int j) {
    size_t o = 0;
    int i;
    for (i = 1; i < j; i++) o += (size_t)nb__ar_count(s, i);
    return o;
}
/* Per token: the maps pre (n), post (n), comb (n x n) in this order, and the dynamic part's
   width m (mHC's fn rows: pre, post, then comb's logits; HC's n streams of n+1 alpha and 1
   beta projections). */
static int nb__hc_maps(const nb_stack* s) { return s->streams * (s->streams + 2); }
static int nb__fact(int n) { return n > 1 ? n * nb__fact(n - 1) : 1; }
/* comb's logits per token in the mHC family: Sinkhorn's n x n, mHC-lite's n!, none for IHC */
static int nb__hc_combs(const nb_stack* s) {
    const int n = s->streams;
    return s->desc.hyper.kind == NB_HYPER_IDENTITY ? 0
         : s->desc.hyper.kind == NB_HYPER_MHC_LITE ? nb__fact(n) : n * n;
}
static int nb__hc_m(const nb_stack* s) {
    const int n = s->streams;
    return s->desc.hyper.kind == NB_HYPER_HC ? n * (n + 2) : 2 * n + nb__hc_combs(s);
}
/* The row stride of the maps' gradients (sc.hdm): d(maps), or the logits' gradients where
   they are wider (mHC-lite's n! > n^2), then 3 gating-scale terms */
static int nb__hc_dw(const nb_stack* s) {
    const int W = nb__hc_maps(s), m = nb__hc_m(s);
    return (m > W ? m : W) + 3;
}
static int nb__post_pre(const nb_stack* s) {
    return s->desc.preset == NB_PRESET_SIAMESE_POST_PRE;
}
/* the rows of the residual topologies' table (nb__topologies, nb_stack.topology) */
enum { NB__TOPO_ONE, NB__TOPO_SIAMESE, NB__TOPO_SIAMESE_POST_PRE, NB__TOPO_HYPER, NB__TOPO_DWA,
       NB__TOPO_ATTN_RES, NB__TOPO_UNET };
static int nb__topo_residual(const nb_stack* s); /* its row's sub_residual */

/* A residual topology's layout, the other half of its row (the drivers' half is
   nb__topologies): which block norms its layers have and which final norms the stack has,
   the tensors it adds (SiameseNorm's c1 after a layer's norms; hyper-connections' maps after
   the layer's other tensors, and their head), and a layer's cache. One row per NB__TOPO_* in
   nb__topo_layouts (after the cache layout, whose functions it names). */
struct nb__layer_mem;
typedef struct nb__topo_layout {
    void (*layer_norms)(const nb_stack* s, int l, int on[NB__NORMS]);
    void (*top_norms)(const nb_stack* s, int on[NB__TOP_NORMS]); /* LNF, LNYF, LNFINAL */
    void (*carve_layer)(const nb_stack* s, int l, nb_real* cache, size_t* used,
                        struct nb__layer_mem* c);
    int gamma;                   /* SiameseNorm's "c1" after the layer's norms */
    int hc;                      /* hyper-connections of both sublayers (and the head) */
} nb__topo_layout;
static const nb__topo_layout* nb__layout(const nb_stack* s);
/* nGPT's reparametrization of its eigen learning rates: a = c lambda, lambda stored at
   1/sqrt(d), c = interp_init sqrt(d) (its alpha_init_value / alpha_init_scaling) */
static nb_real nb__interp_c(const nb_stack* s) {
    return (nb_real)(s->desc.residual.interp_init * sqrt((double)s->desc.d_model));
}

/* Which block norms layer l has: its placements' (one stream, hyper-connections) */
static void nb__placement_norms(const nb_stack* s, int l, int on[NB__NORMS]) {
    const nb_layer_desc* ld = &s->layers[l].desc;
    on[NB__ATTN_IN] = ld->attn.input_norm;
    on[NB__ATTN_OUT] = ld->attn.output_norm;
    on[NB__ATTN_POST] = ld->attn.post_norm;
    on[NB__FF_IN] = ld->ffn.input_norm;
    on[NB__FF_OUT] = ld->ffn.output_norm;
    on[NB__FF_POST] = ld->ffn.post_norm;
    on[NB__ATTN_RES] = ld->attn.residual_norm;
    on[NB__FF_RES] = ld->ffn.residual_norm;
}
/* SiameseNorm's, hybrid-pre form: N_ay, N_f, N_fy and the FFN fusion's input norm */
static void nb__siamese_hp_norms(const nb_stack* s, int l, int on[NB__NORMS]) {
    (void)l;
    on[NB__ATTN_Y] = on[NB__FF_IN] = on[NB__FF_Y] = 1;
    on[NB__FF_INPUT] = !s->desc.siamese.no_fusion_norm;
}
/* post-pre form: each sublayer's N_x, N_y and fusion input norm */
static void nb__siamese_pp_norms(const nb_stack* s, int l, int on[NB__NORMS]) {
    nb__siamese_hp_norms(s, l, on);
    on[NB__ATTN_IN] = on[NB__ATTN_INPUT] = 1;
}
static void nb__layer_norms(const nb_stack* s, int l, int on[NB__NORMS]) {
    memset(on, 0, NB__NORMS * sizeof(int));
    nb__layout(s)->layer_norms(s, l, on);
}
/* the final norm ln_f, when on */
static void nb__one_top_norms(const nb_stack* s, int on[NB__TOP_NORMS]) {
    on[NB__LNF] = s->desc.norm.final > 0;
}
/* SiameseNorm's output fusion: N_final(N_lnf(x) + N_lnyf(y)), or x + N_lnyf(y) (paper) */
static void nb__siamese_top_norms(const nb_stack* s, int on[NB__TOP_NORMS]) {
    on[NB__LNF] = s->desc.norm.final > 0 && !s->desc.siamese.paper_fusion;
    on[NB__LNYF] = 1;
    on[NB__LNFINAL] = !s->desc.siamese.paper_fusion;
}
static void nb__top_norms(const nb_stack* s, int on[NB__TOP_NORMS]) {
    memset(on, 0, NB__TOP_NORMS * sizeof(int));
    on[NB__EMBED] = s->desc.norm.embed > 0;
    nb__layout(s)->top_norms(s, on);
}

/* Whether the stack has top norm k (not its gain: an L2 norm has none) */
static int nb__top_on(const nb_stack* s, int k) {
    int on[NB__TOP_NORMS];
    nb__top_norms(s, on);
    return on[k];
}

/* Table writer shared by sizing, binding and naming: appends one tensor and returns its
   pointer (NULL when sizing with base NULL). */
typedef struct nb__walk {
    nb_real* base;
    size_t off;
    nb_real* eff;                   /* gain_offset: the gains' 1 + w copies, bound instead */
    size_t eoff;                    /* gain values walked (where the next gain's copy is) */
    nb_tensor_info* table;          /* filled when set (the init's naming pass) */
    const nb_tensor_info* layout;   /* binding: tensor n lives at layout[n].offset */
    int n;
} nb__walk;

static nb_real* nb__put(nb__walk* w, int layer, const char* name, nb_tensor_kind kind, int rows,
                        int cols) {
    nb_real* p = w->base ? w->base + (w->layout ? w->layout[w->n].offset : w->off) : NULL;
    if (kind == NB_TENSOR_GAIN) {
        if (w->eff && p) p = w->eff + w->eoff;
        w->eoff += (size_t)rows;
    }
    if (w->table) {
        nb_tensor_info* t = &w->table[w->n];
        /* the longest name, "blocks.<int>.attn_input_norm.weight", fits; using the length
           keeps gcc's -Wformat-truncation quiet at -O3/-Ofast */
        const int len = layer >= 0 ? snprintf(t->name, sizeof t->name, "blocks.%d.%s", layer, name)
                                   : snprintf(t->name, sizeof t->name, "%s", name);
        NB_ASSERT(len > 0 && (size_t)len < sizeof t->name);
        (void)len;
        t->layer = layer;
        t->kind = kind;
        t->ndim = kind < NB_TENSOR_GAIN || (kind >= NB_TENSOR_HC_FN && cols > 1) ||
                  kind == NB_TENSOR_DWA || kind == NB_TENSOR_ATTN_RES_QUERY ? 2 : 1;
        t->rows = rows;
        t->cols = cols;
        t->offset = w->off;
        t->count = (size_t)rows * cols;
        t->no_decay = kind >= NB_TENSOR_GAIN && kind != NB_TENSOR_HC_FN && kind != NB_TENSOR_DWA &&
                      kind != NB_TENSOR_ATTN_RES_QUERY; /* the U-Net's scalars do not decay */
    }
    w->off = nb__addz(w->off, nb__mulz((size_t)rows, (size_t)cols)); /* checked by the init */
    w->n++;
    return p;
}

/* the name of a norm's scalars: DyT's alpha, Derf's [alpha, shift] */
static const char* nb__alpha_name(nb_norm_type kind) {
    return nb__norm_kinds[kind].alpha > 1 ? "alpha_shift" : "alpha";
}

/* A block norm's tensors, in the order of its PyTorch module: DyT's alpha (Derf's alpha and
   shift), weight, bias. */
static void nb__put_norm(nb__walk* w, const nb_stack* s, int layer, const char* name, nb__norm* m) {
    const nb__norm_kind* kind = &nb__norm_kinds[s->desc.norm.type];
    const int d = s->desc.d_model, bias = kind->block_bias && s->desc.norm.bias >= 0;
    char buf[48];
    m->a = NULL;
    if (kind->alpha) {
        snprintf(buf, sizeof buf, "%s.%s", name, nb__alpha_name(s->desc.norm.type));
        m->a = nb__put(w, layer, buf, NB_TENSOR_DYT_ALPHA, kind->alpha, 1);
    }
    m->g = NULL;
    if (kind->gain && s->desc.norm.gain >= 0) {
        snprintf(buf, sizeof buf, "%s.weight", name);
        m->g = nb__put(w, layer, buf, NB_TENSOR_GAIN, d, 1);
    }
    m->b = NULL;
    if (bias) {
        snprintf(buf, sizeof buf, "%s.bias", name);
        m->b = nb__put(w, layer, buf, NB_TENSOR_BIAS, d, 1);
    }
}

/* A hyper-connection's tensors, named as the codes name them (mHC: DeepSeek-V4's
   "hc_<s>_fn"; HC: Alg. 2's module "hc_<s>." members). what: "attn", "ffn" or NULL for the
   stack's head (mHC, IHC only). */
static void nb__put_hc(nb__walk* w, const nb_stack* s, int layer, const char* what, nb__hc* h) {
    const int n = s->streams, d = s->desc.d_model, dyn = !s->desc.hyper.static_maps;
    char buf[48];
    memset(h, 0, sizeof *h);
    if (s->desc.hyper.kind != NB_HYPER_HC) {
        const int m = what ? nb__hc_m(s) : n;
        const char* pre = what ? "hc_" : "hc_head";
        const char* sub = what ? what : "";
        if (dyn) {
            snprintf(buf, sizeof buf, "%s%s_fn", pre, sub);
            h->fn = nb__put(w, layer, buf, NB_TENSOR_HC_FN, m, n * d);
        }
        snprintf(buf, sizeof buf, "%s%s_base", pre, sub);
        h->base = nb__put(w, layer, buf, NB_TENSOR_HC_BASE, m, 1);
        if (dyn) {
            snprintf(buf, sizeof buf, "%s%s_scale", pre, sub);
            h->scale = nb__put(w, layer, buf, NB_TENSOR_HC_SCALE,
                               !what ? 1 : s->desc.hyper.kind == NB_HYPER_IDENTITY ? 2 : 3, 1);
        }
        return;
    }
    snprintf(buf, sizeof buf, "hc_%s.static_alpha", what);
    h->base = nb__put(w, layer, buf, NB_TENSOR_HC_BASE, n, n + 1);
    snprintf(buf, sizeof buf, "hc_%s.static_beta", what);
    h->base2 = nb__put(w, layer, buf, NB_TENSOR_HC_BASE, n, 1);
    if (!dyn) return;
    snprintf(buf, sizeof buf, "hc_%s.dynamic_alpha_fn", what);
    h->fn = nb__put(w, layer, buf, NB_TENSOR_HC_FN, d, n + 1);
    snprintf(buf, sizeof buf, "hc_%s.dynamic_alpha_scale", what);
    h->scale = nb__put(w, layer, buf, NB_TENSOR_HC_SCALE, 1, 1);
    snprintf(buf, sizeof buf, "hc_%s.dynamic_beta_fn", what);
    h->fn2 = nb__put(w, layer, buf, NB_TENSOR_HC_FN, d, 1);
    snprintf(buf, sizeof buf, "hc_%s.dynamic_beta_scale", what);
    h->scale2 = nb__put(w, layer, buf, NB_TENSOR_HC_SCALE, 1, 1);
    snprintf(buf, sizeof buf, "hc_%s.norm", what);
    nb__put_norm(w, s, layer, buf, &h->n);
}

/* Layer l's tensors in their canonical order: attention, FFN, block norms, gamma. */
static void nb__walk_layer(const nb_stack* s, int l, nb__walk* w, nb__layer_tensors* lp) {
    const nb_attn_plan* ap = &s->layers[l].attn;
    const int d = s->desc.d_model, f = s->ffn.desc.ffn.d_ff;
    static const char* const site_names[4] = {"q_norm", "k_norm", "v_norm", "c_norm"};
    int on[NB__NORMS], k;
    char buf[32];
    memset(lp, 0, sizeof *lp);
    lp->attn.w_qkv = nb__put(w, l, "att_proj.weight", NB_TENSOR_QKV, ap->qkv_width, d);
    if (ap->desc.attn.bias & NB_ATTN_BIAS_QKV)
        lp->attn.b_qkv = nb__put(w, l, "att_proj.bias", NB_TENSOR_BIAS, ap->qkv_width, 1);
    lp->attn.w_o = nb__put(w, l, "attn_out.weight", NB_TENSOR_ATTN_OUT, d, d);
    if (ap->desc.attn.bias & NB_ATTN_BIAS_OUT)
        lp->attn.b_o = nb__put(w, l, "attn_out.bias", NB_TENSOR_BIAS, d, 1);
    for (k = 0; k < 4; k++) /* as nb_attn_params_bind: per site alpha (DyT), then gain */
        if (nb__site_on(ap, k)) {
            if (nb__norm_kinds[ap->desc.norm].alpha) {
                snprintf(buf, sizeof buf, "%s.%s", site_names[k], nb__alpha_name(ap->desc.norm));
                *nb__site_alpha(&lp->attn, k) =
                    nb__put(w, l, buf, NB_TENSOR_DYT_ALPHA, nb__norm_kinds[ap->desc.norm].alpha, 1);
            }
            if (!ap->desc.no_gain) {
                snprintf(buf, sizeof buf, "%s.weight", site_names[k]);
                *nb__site_gain(&lp->attn, k) = nb__put(w, l, buf, NB_TENSOR_GAIN,
                                                       nb__site_seg(ap, k), 1);
            }
        }
    if (ap->desc.attn.qk_scale) lp->attn.qk_scale = nb__put(w, l, "sqk", NB_TENSOR_QK_SCALE, d, 1);
    if (ap->desc.attn.sink == NB_SINK_LEARNED)
        lp->attn.sinks = nb__put(w, l, "sinks", NB_TENSOR_SINKS, ap->desc.n_heads, 1);
    lp->ffn.w_in = nb__put(w, l, "ff_proj.weight", NB_TENSOR_FF_IN, s->ffn.in_width, d);
    if (s->ffn.desc.ffn.bias > 0)
        lp->ffn.b_in = nb__put(w, l, "ff_proj.bias", NB_TENSOR_BIAS, s->ffn.in_width, 1);
    lp->ffn.w_out = nb__put(w, l, "ff_out.weight", NB_TENSOR_FF_OUT, d, f);
    if (s->ffn.desc.ffn.bias > 0)
        lp->ffn.b_out = nb__put(w, l, "ff_out.bias", NB_TENSOR_BIAS, d, 1);
    if (s->ffn.desc.ffn.in_scale)
        lp->ffn.in_scale = nb__put(w, l, "suv", NB_TENSOR_FF_SCALE, s->ffn.in_width, 1);
    nb__layer_norms(s, l, on);
    for (k = 0; k < NB__NORMS; k++)
        if (on[k]) nb__put_norm(w, s, l, nb__norm_names[k], &lp->n[k]);
    if (nb__layout(s)->gamma) lp->gamma = nb__put(w, l, "c1", NB_TENSOR_SIAMESE_GAMMA, d, 1);
    for (k = 0; k < 2; k++) {
        const nb_branch_scale bs = k ? s->layers[l].desc.ffn.branch_scale
                                     : s->layers[l].desc.attn.branch_scale;
        if (bs == NB_BRANCH_SCALE_CHANNEL)
            lp->bs[k] = nb__put(w, l, k ? "ls2.gamma" : "ls1.gamma", NB_TENSOR_LAYERSCALE, d, 1);
        else if (bs == NB_BRANCH_SCALE_INTERP)
            lp->bs[k] = nb__put(w, l, k ? "mlp_alpha" : "attn_alpha", NB_TENSOR_INTERP, d, 1);
        else if (bs == NB_BRANCH_SCALE_SUBLAYER)
            lp->bs[k] = nb__put(w, l, k ? "ff_resweight" : "attn_resweight", NB_TENSOR_REZERO, 1,
                                1);
        else if (bs == NB_BRANCH_SCALE_SCALAR) /* one per layer: the FFN reuses attention's */
            lp->bs[k] = k && s->layers[l].desc.attn.branch_scale == NB_BRANCH_SCALE_SCALAR
                            ? lp->bs[0] : nb__put(w, l, "resweight", NB_TENSOR_REZERO, 1, 1);
    }
    if (s->desc.residual.value_residual == 2 && l > 0) /* layer 0's values are V_0 */
        lp->vres = nb__put(w, l, "value_residual.lambda", NB_TENSOR_VALUE_RESIDUAL, 2, 1);
    if (s->desc.residual.value_embeds) /* every layer: the code's sa_lambdas */
        lp->vres = nb__put(w, l, "value_embed.lambda", NB_TENSOR_VALUE_EMBED, 2, 1);
    if (nb__layout(s)->hc)
        for (k = 0; k < 2; k++) nb__put_hc(w, s, l, k ? "ffn" : "attn", &lp->hc[k]);
    if (s->desc.residual.dwa && nb__dwa_here(s, l))
        lp->dwa = nb__put(w, l, "dwa.weight", NB_TENSOR_DWA, 1, nb__dwa_count(s, l));
    for (k = l ? 0 : 1; k < 2 && s->desc.residual.attn_res; k++) {
        lp->arq[k] = nb__put(w, l, k ? "mlp_res.proj.weight" : "attn_res.proj.weight",
                             NB_TENSOR_ATTN_RES_QUERY, 1, d);
        lp->arg[k] = nb__put(w, l, k ? "mlp_res.norm.weight" : "attn_res.norm.weight",
                             NB_TENSOR_ATTN_RES_GAIN, d, 1);
    }
    if (s->desc.residual.unet_skips && l >= s->desc.n_layers / 2)
        lp->skw = nb__put(w, l, "skip_weight", NB_TENSOR_SKIP_WEIGHT, 1, 1);
    if (s->desc.residual.reinject_x0)
        lp->x0l = nb__put(w, l, "lambdas", NB_TENSOR_X0_LAMBDAS, 2, 1);
}

/* The stack-level tensors after the layers: the hyper-connections' head, the final norms. */
static void nb__walk_top(const nb_stack* s, nb__walk* w, nb__top_tensors* tp,
                         const int on[NB__TOP_NORMS]) {
    int k;
    if (nb__layout(s)->hc && s->desc.hyper.kind != NB_HYPER_HC)
        nb__put_hc(w, s, -1, NULL, &tp->head);
    if (s->desc.residual.attn_res) {
        tp->arq = nb__put(w, -1, "final_res.proj.weight", NB_TENSOR_ATTN_RES_QUERY, 1,
                          s->desc.d_model);
        tp->arg = nb__put(w, -1, "final_res.norm.weight", NB_TENSOR_ATTN_RES_GAIN,
                          s->desc.d_model, 1);
    }
    for (k = NB__LNF; k < NB__TOP_NORMS; k++)
        if (on[k]) nb__put_norm(w, s, -1, nb__top_names[k], &tp->n[k]);
}

/* The whole parameter buffer: embed norm, layers, head, final norms. */
static void nb__walk_all(nb_stack* s, nb__walk* w, nb__top_tensors* tp) {
    nb__layer_tensors lp;
    int on[NB__TOP_NORMS], l;
    nb__top_norms(s, on);
    memset(tp, 0, sizeof *tp);
    if (s->desc.norm.embed_scale)
        tp->es = nb__put(w, -1, "embed_scale", NB_TENSOR_EMBED_SCALE, 1, 1);
    if (on[NB__EMBED]) nb__put_norm(w, s, -1, nb__top_names[NB__EMBED], &tp->n[NB__EMBED]);
    for (l = 0; l < s->desc.n_layers; l++) {
        nb_layer* ly = &s->layers[l];
        const size_t off = w->off;
        const int n = w->n;
        ly->gain0 = w->eoff;
        nb__walk_layer(s, l, w, &lp);
        ly->param_offset = off; /* the stack's own layout */
        ly->n_params = w->off - off;
        ly->tensor0 = n;
        ly->n_tensors = w->n - n;
    }
    s->gain_final0 = w->eoff;
    nb__walk_top(s, w, tp, on);
    s->n_gains = w->eoff;
}

/* the first of the final norms' tensors (the end of the table when there are none) */
static int nb__final_tensor0(const nb_stack* s) {
    const nb_layer* last = &s->layers[s->desc.n_layers - 1];
    return last->tensor0 + last->n_tensors;
}

/* Layer l's tensors in base (params or grads). eff (params of a gain_offset stack; else NULL):
   the gains are bound to their 1 + w copies there (nb__fill_gains). */
static void nb__bind_layer(const nb_stack* s, int l, const nb_real* base, nb_real* eff,
                           nb__layer_tensors* lp) {
    nb__walk w;
    memset(&w, 0, sizeof w);
    w.base = (nb_real*)(size_t)base; /* binding read-only params reuses the same walker */
    w.layout = s->tensors;
    w.n = s->layers[l].tensor0;
    w.eff = eff;
    w.eoff = s->layers[l].gain0;
    nb__walk_layer(s, l, &w, lp);
}

/* desc.bf16_weights: layer l's weight matrices in the caller's bf16 copy, at their offsets in
   params (lp bound to params) */
static void nb__bind_weights16(const nb_stack* s, const nb_real* params, nb__layer_tensors* lp) {
    const unsigned short* w = s->weights16;
    if (!s->desc.gemm.bf16_weights) return;
    lp->attn.w_qkv16 = w + (lp->attn.w_qkv - params);
    lp->attn.w_o16 = w + (lp->attn.w_o - params);
    lp->ffn.w_in16 = w + (lp->ffn.w_in - params);
    lp->ffn.w_out16 = w + (lp->ffn.w_out - params);
}

static void nb__bind_top(const nb_stack* s, const nb_real* base, nb_real* eff,
                         nb__top_tensors* tp) {
    nb__walk w;
    int on[NB__TOP_NORMS];
    memset(&w, 0, sizeof w);
    memset(tp, 0, sizeof *tp);
    w.base = (nb_real*)(size_t)base;
    w.layout = s->tensors;
    w.eff = eff;
    nb__top_norms(s, on);
    if (s->desc.norm.embed_scale) tp->es = nb__put(&w, -1, "", NB_TENSOR_EMBED_SCALE, 1, 1);
    if (on[NB__EMBED]) nb__put_norm(&w, s, -1, "", &tp->n[NB__EMBED]);
    w.n = nb__final_tensor0(s);
    w.eoff = s->gain_final0;
    nb__walk_top(s, &w, tp, on);
}

/* Gemma's unit-offset gains (gain_offset): the 1 + w the norms multiply by, for the gain
   tensors of table rows [t0, t1), into eff at their walk position from eoff on (the forward's
   copy, which the backward reads: d(1 + w)/dw = 1, so the gradients are the gains' own). */
static void nb__fill_gains(const nb_stack* s, const nb_real* params, nb_real* eff, int t0,
                           int t1, size_t eoff) {
    int t;
    for (t = t0; t < t1; t++) {
        const nb_tensor_info* ti = &s->tensors[t];
        size_t i;
        if (ti->kind != NB_TENSOR_GAIN) continue;
        for (i = 0; i < ti->count; i++) eff[eoff + i] = 1 + params[ti->offset + i];
        eoff += ti->count;
    }
}

/* ---- cache layout ---- */

typedef struct nb__hc_mem {       /* a hyper-connection's cache (B*T rows) */
    nb_real* maps;                /* per row pre (n), post (n), comb (n x n) */
    nb_real* mix;                 /* the dynamic part before its scale: mHC r fn xf (m per row),
                                     HC per stream its n+1 alpha and 1 beta projections */
    nb_real* r;                   /* mHC: 1/rms of each row's n*d values */
    nb_real *u, *y;               /* the sublayer's input sum_i pre_i x_i, its output B(u) */
} nb__hc_mem;

typedef struct nb__layer_mem {    /* one layer's cache */
    nb_real *u[2];                           /* generic: branch output before its scale */
    nb_real *h[2], *f[2], *s[2], *mid;      /* generic: per sublayer input-norm output, raw
                                               branch output, pre-post-norm sum; attn output */
    nb_real* r[2];                           /* generic: the normalized residual N_res(x) */
    nb_real* st[NB__NORMS];                  /* norm statistics: rstd[rows], then mean[rows] */
    nb_real *acache, *fcache;
    nb_real *ua, *x1, *y1, *sf, *uf;         /* SiameseNorm hybrid-pre */
    nb_real *w[2], *v[2], *xm, *ym;          /* SiameseNorm post-pre, per sublayer */
    nb_real* vl;                             /* value residual (2, l >= 1), value embeddings: V_l
                                                before the mix */
    nb__hc_mem hc[2];                        /* hyper-connections of attention, FFN */
    nb_real* hmid;                           /* hyper-connections: the n streams between them */
    nb_real* dh;                             /* DenseFormer: the layer's output h_{l+1} */
    nb_real* ux;                             /* U-Net, re-injection: the layer's mixed input */
} nb__layer_mem;

typedef struct nb__stack_mem {    /* stack-level cache and the scratch */
    nb_real* hdr;                 /* nb__hdr of the last complete forward */
    nb_real* hidden;              /* (L+1) * streams hidden states of B*T*d */
    nb_real* e;                   /* copy of the input when the embed norm is on */
    nb_real* fuse;                /* SiameseNorm N_lnf(x) + N_lnyf(y) */
    nb_real* st[NB__TOP_NORMS];
    nb_real* tmp[6];              /* scratch: B*T*d temporaries */
    nb_real* grad[2 * NB_HYPER_MAX_STREAMS]; /* scratch: ping-pong gradients of the streams */
    nb_real* partials;            /* scratch: norm partial sums, NB__SLOTS slots (nb__slot) */
    nb_real* rowbuf;              /* scratch: two rows of d per thread (nb__rowbuf) */
    nb_real* sub;                 /* scratch: sublayer scratch */
    nb_real* dwa_g;               /* scratch (DenseFormer): the gradients of h_0 .. h_L */
    nb_real* ar_p;                /* Attention Residuals: per layer p_2l, the partial sum after
                                     its attention (p_2l+1 is the layer's output stream) */
    nb_real* ar_h;                /* Attention Residuals: the readers' outputs h_1 .. h_2L */
    nb_real* ar_a;                /* Attention Residuals: per row every reader's weights */
    nb_real* ar_rms;              /* Attention Residuals: per source p_e (e = -1 .. 2L-1), its
                                     rows' RMS sqrt(mean(v^2) + eps), for every reader's keys */
    nb_real* ar_g;                /* scratch (Attention Residuals): the gradients of x_0 and of
                                     p_0 .. p_2L-1 */
    nb_real* ar_row;              /* scratch (Attention Residuals): per thread a row's 3 values
                                     per source */
    nb_real* un_g;                /* scratch (U-Net, re-injection): the gradients the skips and
                                     the re-injection send to x_0, then to h_0 .. h_{L/2-1} */
    nb_real* v0;                  /* value residual: layer 0's V, B*T x H_kv*d_k */
    nb_real* gains;               /* gain_offset: the 1 + w of every gain (nb__fill_gains) */
    nb_real* dv0;                 /* scratch: value residual, the sum of later layers' dV_0 */
    nb__hc_mem head;              /* hyper-connections: the head's maps (u: its output) */
    nb_real* hx;                  /* scratch: the maps' normalized inputs or their gradients */
    nb_real* hst;                 /* scratch: HC's per-stream norm statistics */
    nb_real* hdm;                 /* scratch: per row d(maps) and 3 scale terms (the row stride
                                     of the maps + 3), then the dynamic part's gradients */
    nb_real* hdmid;               /* scratch: the gradient of a layer's middle streams */
    nb_real* htape;               /* scratch: per thread, a token's Sinkhorn iterates */
} nb__stack_mem;

#define NB__SLOTS 4 /* partial-sum sets one fused row loop may fill at once */

/* rows*d of the planned maximum (max_batch*max_seq fits an int: checked by the FFN plan) */
static size_t nb__stack_V(const nb_stack* s) {
    return nb__mulz((size_t)s->max_batch * (size_t)s->max_seq, (size_t)s->desc.d_model);
}

/* B*T*H_kv*d_k of the planned maximum: one V (value residual) */
static size_t nb__stack_VKV(const nb_stack* s) {
    const nb_attn_plan* ap = &s->layers[0].attn;
    return nb__mulz((size_t)s->max_batch * (size_t)s->max_seq,
                    (size_t)ap->desc.n_kv_heads * (size_t)ap->head_dim);
}

/* a hyper-connection's cache: of a sublayer (u and y), or of the head (u) */
static void nb__carve_hc(const nb_stack* s, nb_real* cache, size_t* used, nb__hc_mem* h,
                         int sublayer) {
    const size_t rows = (size_t)s->max_batch * s->max_seq;
    const int dyn = !s->desc.hyper.static_maps;
    h->maps = nb__take(cache, used, nb__mulz(rows, (size_t)(sublayer ? nb__hc_maps(s)
                                                                      : s->streams)));
    if (dyn) h->mix = nb__take(cache, used, nb__mulz(rows, (size_t)(sublayer ? nb__hc_m(s)
                                                                            : s->streams)));
    if (dyn && s->desc.hyper.kind != NB_HYPER_HC) h->r = nb__take(cache, used, rows);
    h->u = nb__take(cache, used, nb__stack_V(s));
    if (sublayer) h->y = nb__take(cache, used, nb__stack_V(s));
}

/* BF16: a sublayer's normed input h = N(x) is read only by its branch's GEMMs (the forward's
   and dW's), which read its bf16 copy. The input norm then writes that copy itself, a row at a
   time into the sublayer's cache (nb__block_norm_fwd16), and no float h is kept: one pass over
   B*T x d less, and B*T x d floats less cache per sublayer. Not where the residual starts from h
   (read in float) or h is scaled. */
static int nb__h16(const nb_stack* s, const nb_placement* place) {
    return s->desc.gemm.precision == NB_PRECISION_BF16 && place->input_norm &&
           !place->residual_from_norm && place->input_scale == 1;
}

/* a layer's placements' caches (one stream, hyper-connections) */
static void nb__carve_placements(const nb_stack* s, int l, nb_real* cache, size_t* used,
                                 nb__layer_mem* c) {
    const size_t V = nb__stack_V(s);
    const nb_layer_desc* ld = &s->layers[l].desc;
    const nb_placement* pl[2];
    int k;
    pl[0] = &ld->attn; pl[1] = &ld->ffn;
    for (k = 0; k < 2; k++) {
        if (pl[k]->input_norm && !nb__h16(s, pl[k])) c->h[k] = nb__take(cache, used, V);
        if (pl[k]->output_norm) c->f[k] = nb__take(cache, used, V);
        if (pl[k]->post_norm) c->s[k] = nb__take(cache, used, V);
        if (pl[k]->branch_scale) c->u[k] = nb__take(cache, used, V);
        if (pl[k]->residual_norm) c->r[k] = nb__take(cache, used, V);
        if (nb__layout(s)->hc) nb__carve_hc(s, cache, used, &c->hc[k], 1);
    }
}
static void nb__one_carve(const nb_stack* s, int l, nb_real* cache, size_t* used,
                          struct nb__layer_mem* c) {
    nb__carve_placements(s, l, cache, used, c);
    c->mid = nb__take(cache, used, nb__stack_V(s));
}
static void nb__dwa_carve(const nb_stack* s, int l, nb_real* cache, size_t* used,
                          struct nb__layer_mem* c) {
    nb__one_carve(s, l, cache, used, c);
    c->dh = nb__take(cache, used, nb__stack_V(s));
}
static void nb__unet_carve(const nb_stack* s, int l, nb_real* cache, size_t* used,
                           struct nb__layer_mem* c) {
    nb__one_carve(s, l, cache, used, c);
    if (nb__unet_mixed(s, l)) c->ux = nb__take(cache, used, nb__stack_V(s));
}
static void nb__hc_carve(const nb_stack* s, int l, nb_real* cache, size_t* used,
                         struct nb__layer_mem* c) {
    nb__carve_placements(s, l, cache, used, c);
    c->hmid = nb__take(cache, used, nb__mulz(nb__stack_V(s), (size_t)s->streams));
}
static void nb__siamese_hp_carve(const nb_stack* s, int l, nb_real* cache, size_t* used,
                                 struct nb__layer_mem* c) {
    const size_t V = nb__stack_V(s);
    (void)l;
    c->ua = nb__take(cache, used, V);
    c->x1 = nb__take(cache, used, V);
    c->y1 = nb__take(cache, used, V);
    c->sf = nb__take(cache, used, V);
    c->uf = nb__take(cache, used, V);
}
static void nb__siamese_pp_carve(const nb_stack* s, int l, nb_real* cache, size_t* used,
                                 struct nb__layer_mem* c) {
    const size_t V = nb__stack_V(s);
    int k;
    (void)l;
    for (k = 0; k < 2; k++) {
        c->w[k] = nb__take(cache, used, V);
        c->v[k] = nb__take(cache, used, V);
    }
    c->xm = nb__take(cache, used, V);
    c->ym = nb__take(cache, used, V);
}

/* The layout halves of the residual topologies' rows, in NB__TOPO_* order. */
static const nb__topo_layout nb__topo_layouts[] = {
    {nb__placement_norms, nb__one_top_norms, nb__one_carve, 0, 0},
    {nb__siamese_hp_norms, nb__siamese_top_norms, nb__siamese_hp_carve, 1, 0},
    {nb__siamese_pp_norms, nb__siamese_top_norms, nb__siamese_pp_carve, 0, 0},
    {nb__placement_norms, nb__one_top_norms, nb__hc_carve, 0, 1},
    {nb__placement_norms, nb__one_top_norms, nb__dwa_carve, 0, 0},
    {nb__placement_norms, nb__one_top_norms, nb__carve_placements, 0, 0},
    {nb__placement_norms, nb__one_top_norms, nb__unet_carve, 0, 0},
};
static const nb__topo_layout* nb__layout(const nb_stack* s) {
    return &nb__topo_layouts[s->topology];
}

/* Layer l's cache: its norms' statistics, its sublayers' caches, its topology's own. */
static void nb__carve_layer(const nb_stack* s, int l, nb_real* cache, size_t* used,
                            nb__layer_mem* c) {
    const size_t st = (size_t)s->max_batch * s->max_seq * nb__norm_kinds[s->desc.norm.type].stats;
    int on[NB__NORMS], k;
    memset(c, 0, sizeof *c);
    nb__layer_norms(s, l, on);
    for (k = 0; k < NB__NORMS; k++)
        if (on[k]) c->st[k] = nb__take(cache, used, st);
    c->acache = nb__take(cache, used, s->layers[l].attn.n_cache);
    c->fcache = nb__take(cache, used, s->ffn.n_cache);
    nb__layout(s)->carve_layer(s, l, cache, used, c);
    if ((s->desc.residual.value_residual == 2 && l > 0) || s->desc.residual.value_embeds)
        c->vl = nb__take(cache, used, nb__stack_VKV(s));
}

/* A token's Sinkhorn tape (nb__sinkhorn): softmax, then per normalization its result and sums */
static size_t nb__hc_tape(const nb_stack* s) {
    const size_t n = (size_t)s->streams, it = (size_t)s->desc.hyper.sinkhorn;
    return NB__PAD(n * n + (2 * it) * (n * n + n));
}

/* Stack-level cache (base cache) and scratch; layers' regions follow the stack-level cache. */
static void nb__carve_stack(const nb_stack* s, nb_real* cache, nb_real* scratch, nb__stack_mem* c,
                            size_t* cache_used, size_t* scratch_used) {
    const size_t V = nb__stack_V(s);
    const size_t st = (size_t)s->max_batch * s->max_seq * nb__norm_kinds[s->desc.norm.type].stats;
    size_t cu = 0, su = 0, sub = s->ffn.n_scratch;
    int on[NB__TOP_NORMS], k, l;
    memset(c, 0, sizeof *c);
    nb__top_norms(s, on);
    c->hdr = nb__take(cache, &cu, NB__HDR);
    c->hidden = nb__take(cache, &cu, nb__mulz(nb__mulz(V, (size_t)s->desc.n_layers + 1),
                                               (size_t)s->streams));
    if (on[NB__EMBED] || s->desc.norm.embed_scale) c->e = nb__take(cache, &cu, V);
    if (on[NB__LNFINAL]) c->fuse = nb__take(cache, &cu, V);
    for (k = 0; k < NB__TOP_NORMS; k++)
        if (on[k]) c->st[k] = nb__take(cache, &cu, st);
    for (k = 0; k < 6; k++) c->tmp[k] = nb__take(scratch, &su, V);
    for (k = 0; k < 2 * (s->streams > 2 ? s->streams : 2); k++)
        c->grad[k] = nb__take(scratch, &su, V);
    c->partials = nb__take(scratch, &su, nb__mulz((size_t)NB__SLOTS * s->max_threads,
                                                  nb__part_stride(s->desc.d_model)));
    c->rowbuf = nb__take(scratch, &su, nb__mulz((size_t)s->max_threads * 2,
                                                NB__PAD(s->desc.d_model)));
    for (l = 0; l < s->desc.n_layers; l++)
        if (s->layers[l].attn.n_scratch > sub) sub = s->layers[l].attn.n_scratch;
    c->sub = nb__take(scratch, &su, sub);
    if (s->desc.norm.gain_offset) c->gains = nb__take(cache, &cu, s->n_gains);
    if (s->desc.residual.dwa)
        c->dwa_g = nb__take(scratch, &su, nb__mulz((size_t)s->desc.n_layers + 1, V));
    if (s->desc.residual.attn_res) {
        const size_t L = (size_t)s->desc.n_layers, rows = (size_t)s->max_batch * s->max_seq;
        c->ar_p = nb__take(cache, &cu, nb__mulz(L, V));
        c->ar_h = nb__take(cache, &cu, nb__mulz(2 * L, V));
        c->ar_a = nb__take(cache, &cu, nb__mulz(rows, nb__ar_aoff(s, 2 * (int)L + 1)));
        c->ar_rms = nb__take(cache, &cu, nb__mulz(2 * L + 1, rows));
        c->ar_g = nb__take(scratch, &su, nb__mulz(2 * L + 1, V));
        c->ar_row = nb__take(scratch, &su, nb__mulz((size_t)s->max_threads,
                                                    NB__PAD(3 * (2 * L + 1))));
    }
    if (nb__unet(s))
        c->un_g = nb__take(scratch, &su, nb__mulz((size_t)s->desc.n_layers / 2 + 1, V));
    if (s->desc.residual.value_residual) {
        c->v0 = nb__take(cache, &cu, nb__stack_VKV(s));
        c->dv0 = nb__take(scratch, &su, nb__stack_VKV(s));
    }
    if (nb__layout(s)->hc) { /* the head's cache; the maps' scratch */
        const size_t n = (size_t)s->streams, rows = (size_t)s->max_batch * s->max_seq;
        if (s->desc.hyper.kind != NB_HYPER_HC) nb__carve_hc(s, cache, &cu, &c->head, 0);
        else c->head.u = nb__take(cache, &cu, V);
        c->hx = nb__take(scratch, &su, nb__mulz(V, n));
        c->hst = nb__take(scratch, &su, nb__mulz(nb__mulz(rows, n),
                                                (size_t)nb__norm_kinds[s->desc.norm.type].stats));
        c->hdm = nb__take(scratch, &su, nb__mulz(rows, (size_t)nb__hc_dw(s)));
        c->hdmid = nb__take(scratch, &su, nb__mulz(V, n));
        c->htape = nb__take(scratch, &su, nb__mulz((size_t)s->max_threads, nb__hc_tape(s)));
    }
    *cache_used = cu;
    *scratch_used = su;
}

/* hidden state l of stream k: B*T*d values at a fixed stride of the planned maximum */
static nb_real* nb__hidden(const nb_stack* s, nb_real* hidden, int l, int k) {
    return hidden + ((size_t)l * s->streams + k) * nb__stack_V(s);
}

/* what a stack cache belongs to: this init (the layer table is its own allocation, so copies
   of the struct share it) and its layout */
static unsigned long long nb__stack_id(const nb_stack* s) {
    unsigned long long h = nb__hash(0x737461ULL, (unsigned long long)(size_t)s->layers);
    return nb__hash(nb__hash(h, s->n_params), s->n_cache);
}

/* ---- presets and names ---- */

/* Every preset is one row, in enum order (the size is checked at compile time, the order at
   nb_stack_init). A layer's placements are two codes, attention then FFN:
     n  none: x + F(x)                         p  pre: x + F(N(x))
     r  residual from the norm: h + F(h), h = N(x) (HybridNorm's FFN)
     P  post: N(x + F(x))                      s  sandwich: x + N_out(F(N_in(x)))
     o  output norm only: x + N_out(F(x))      (OLMo-2's "norm after")
     d  DeepNorm: N(alpha x + F(x)), alpha = (2L)^(1/4)
     m  the Mix-LN code's DeepNorm: alpha = sqrt(8) (its hard-coded constant)
     l  LayerNorm Scaling: x + F(N(x) / sqrt(l + 1)) in layer l = 0..L-1 (the paper's 1/sqrt(l)
        with its 1-based l; the code's 1 / math.sqrt(layer_index + 1))
     z  ReZero: x + a F(x), a the layer's learnable scalar
     c  LayerScale: x + diag(lambda) F(N(x)), lambda the sublayer's learnable vector
     g  nGPT: N(N(x) + |a| (N(F(x)) - N(x))), a the sublayer's eigen learning rates
   `first` applies to the first n_first layers (-1: floor(mixln_alpha L), Mix-LN's Post-Norm
   layers), `rest` to the others. Two-stream (SiameseNorm) stacks have fixed sublayers and no
   per-layer placements ("--"). */
typedef struct nb__preset_row {
    nb_preset id;
    const char* key;      /* nb_preset_name; nb_preset_from_name accepts it and the aliases */
    const char* aliases;  /* '|'-separated, case-insensitive */
    const char* first;
    int n_first;
    const char* rest;
    unsigned sites;       /* default attention norm sites */
    nb_norm_width width;  /* default width of the site norms */
    double eps;           /* default eps of every norm */
    int embed_norm;       /* default: 1 normalized embedding, -1 none */
    int streams;          /* 2 = SiameseNorm */
    int final_norm;       /* default: 1 final norm, -1 none */
    nb_norm_type norm;    /* default norm kind (0: RMSNorm) */
    nb_init_scheme init;  /* the initialization of the code the preset comes from */
    double init_std;      /* its base std (0: the scheme's default) */
} nb__preset_row;

#define NB__QK (NB_SITE_Q | NB_SITE_K)
#define NB__PH NB_WIDTH_PER_HEAD
#define NB__RMS NB_NORM_DEFAULT
static const nb__preset_row nb__presets[] = {
    {NB_PRESET_DEFAULT, "default", "", "", 0, "pp", 0, NB__PH, 1e-5, -1, 1, 1, NB__RMS,
     NB_INIT_NORMAL, 0},
    {NB_PRESET_PRE, "pre", "Pre-Norm|PreNorm", "", 0, "pp", 0, NB__PH, 1e-5, -1, 1, 1, NB__RMS,
     NB_INIT_NORMAL, 0},
    {NB_PRESET_POST, "post", "Post-Norm|PostNorm", "", 0, "PP", 0, NB__PH, 1e-5, -1, 1, 1, NB__RMS,
     NB_INIT_MIXLN, 0},
    {NB_PRESET_POST_FLAGS, "post_flags", "", "nr", 1, "rr", 0, NB__PH, 1e-5, -1, 1, 1, NB__RMS,
     NB_INIT_MEGATRON, 0},
    {NB_PRESET_SANDWICH, "sandwich", "Sandwich", "", 0, "ss", 0, NB__PH, 1e-5, -1, 1, 1, NB__RMS,
     NB_INIT_MIXLN, 0},
    {NB_PRESET_OLMO2, "olmo2", "OLMo-2", "", 0, "oo", NB__QK, NB_WIDTH_FULL, 1e-6, -1, 1, 1,
     NB__RMS, NB_INIT_NORMAL, 0.02},
    {NB_PRESET_DEEPNORM, "deepnorm", "DeepNorm", "", 0, "dd", 0, NB__PH, 1e-5, -1, 1, 1, NB__RMS,
     NB_INIT_DEEPNORM, 0},
    {NB_PRESET_DEEPNORM_MIXLN, "deepnorm_mixln", "", "", 0, "mm", 0, NB__PH, 1e-6, -1, 1, 1,
     NB__RMS, NB_INIT_DEEPNORM, 0},
    {NB_PRESET_HYBRID, "hybrid", "HybridNorm", "", 0, "nr", NB_SITES_QKV, NB__PH, 1e-5, -1, 1, 1,
     NB__RMS, NB_INIT_MEGATRON, 0},
    {NB_PRESET_HYBRID_STAR, "hybrid_star", "HybridNorm*|hybrid*", "pp", 1, "nr", NB_SITES_QKV,
     NB__PH, 1e-5, -1, 1, 1, NB__RMS, NB_INIT_MEGATRON, 0},
    {NB_PRESET_FIRST_QKV_PRE, "first_qkv_pre", "First-QKV-Pre", "np", 1, "nr", NB_SITES_QKV, NB__PH,
     1e-5, -1, 1, 1, NB__RMS, NB_INIT_MEGATRON, 0},
    {NB_PRESET_EMBEDNORM, "embednorm", "EmbedNorm", "", 0, "nr", NB_SITES_QKV, NB__PH, 1e-5, 1, 1,
     1, NB__RMS, NB_INIT_MEGATRON, 0},
    {NB_PRESET_SITES_POST, "sites_post", "", "", 0, "nr", NB_SITES_QKV, NB__PH, 1e-5, -1, 1, 1,
     NB__RMS, NB_INIT_MEGATRON, 0},
    {NB_PRESET_SITES_PRE, "sites_pre", "", "", 0, "np", NB_SITES_QKV, NB__PH, 1e-5, -1, 1, 1,
     NB__RMS, NB_INIT_MEGATRON, 0},
    {NB_PRESET_PRE_SITES_POST, "pre_sites_post", "", "", 0, "pr", NB_SITES_QKV, NB__PH, 1e-5, -1, 1,
     1, NB__RMS, NB_INIT_MEGATRON, 0},
    {NB_PRESET_PRE_SITES_PRE, "pre_sites_pre", "", "", 0, "pp", NB_SITES_QKV, NB__PH, 1e-5, -1, 1,
     1, NB__RMS, NB_INIT_MEGATRON, 0},
    {NB_PRESET_PRE_POST, "pre_post", "Pre-Post", "", 0, "pr", 0, NB__PH, 1e-5, -1, 1, 1, NB__RMS,
     NB_INIT_MEGATRON, 0},
    {NB_PRESET_POST_PRE, "post_pre", "Post-Pre", "", 0, "rp", 0, NB__PH, 1e-5, -1, 1, 1, NB__RMS,
     NB_INIT_MEGATRON, 0},
    {NB_PRESET_MIXLN, "mixln", "Mix-LN", "PP", -1, "pp", 0, NB__PH, 1e-6, -1, 1, 1, NB__RMS,
     NB_INIT_MIXLN, 0},
    {NB_PRESET_SIAMESE, "siamese", "SiameseNorm", "", 0, "--", NB_SITES_QKV, NB__PH, 1e-5, -1, 2, 1,
     NB__RMS, NB_INIT_MITCHELL, 0},
    {NB_PRESET_SIAMESE_POST_PRE, "siamese_post_pre", "", "", 0, "--", NB_SITES_QKV, NB__PH, 1e-5,
     -1, 2, 1, NB__RMS, NB_INIT_MITCHELL, 0},
    /* its code is the Mix-LN code's Llama (RMSNorm eps 1e-6) */
    {NB_PRESET_LNS, "lns", "LayerNorm-Scaling|LNS", "", 0, "ll", 0, NB__PH, 1e-6, -1, 1, 1, NB__RMS,
     NB_INIT_MIXLN, 0},
    {NB_PRESET_NONE, "none", "NoNorm|no_norm", "", 0, "nn", 0, NB__PH, 1e-5, -1, 1, -1, NB__RMS,
     NB_INIT_NORMAL, 0},
    /* DyT's LLaMA setting: Pre-Norm, every norm DyT, alpha init by site and width (dyt_alpha);
       with the generic DyT's bias (its LLaMA code has none) */
    {NB_PRESET_DYT, "dyt", "DyT|Dynamic-Tanh", "", 0, "pp", 0, NB__PH, 1e-5, -1, 1, 1, NB_NORM_DYT,
     NB_INIT_NORMAL, 0},
    /* norms around each sublayer, on the embedding and before the head */
    {NB_PRESET_PERILN, "periln", "Peri-LN|PeriLN", "", 0, "ss", 0, NB__PH, 1e-5, 1, 1, 1, NB__RMS,
     NB_INIT_NORMAL, 0},
    {NB_PRESET_REZERO, "rezero", "ReZero", "", 0, "zz", 0, NB__PH, 1e-5, -1, 1, -1, NB__RMS,
     NB_INIT_NORMAL, 0},
    /* CaiT's blocks (timm's LayerScale) on this library's Pre-Norm LLM block */
    {NB_PRESET_LAYERSCALE, "layerscale", "LayerScale|CaiT", "", 0, "cc", 0, NB__PH, 1e-5, -1, 1, 1,
     NB__RMS, NB_INIT_NORMAL, 0},
    /* Pre-Norm blocks on hyper-connected streams (nb__preset_hyper gives which) */
    {NB_PRESET_MHC, "mhc", "mHC", "", 0, "pp", 0, NB__PH, 1e-5, -1, 1, 1, NB__RMS, NB_INIT_NORMAL,
     0},
    {NB_PRESET_HC, "hc", "HC|Hyper-Connections", "", 0, "pp", 0, NB__PH, 1e-5, -1, 1, 1, NB__RMS,
     NB_INIT_NORMAL, 0},
    {NB_PRESET_IHC, "ihc", "identity-HC", "", 0, "pp", 0, NB__PH, 1e-5, -1, 1, 1, NB__RMS,
     NB_INIT_NORMAL, 0},
    /* NVIDIA/ngpt's model.py: every norm L2, no final norm (its unit h goes to the head) */
    {NB_PRESET_NGPT, "ngpt", "nGPT", "", 0, "gg", NB__QK, NB__PH, 1e-5, -1, 1, -1, NB_NORM_L2,
     NB_INIT_NGPT, 0},
};
static nb_hyper nb__preset_hyper(nb_preset p) {
    return p == NB_PRESET_MHC ? NB_HYPER_MHC : p == NB_PRESET_HC ? NB_HYPER_HC
         : p == NB_PRESET_IHC ? NB_HYPER_IDENTITY : NB_HYPER_NONE;
}
#undef NB__QK
#undef NB__PH
#undef NB__RMS
typedef char nb__presets_one_row_each[sizeof nb__presets / sizeof nb__presets[0] ==
                                      NB_PRESET_COUNT ? 1 : -1];

NBDEF nb_init_scheme nb_preset_init(const nb_stack_desc* desc, double* std0) {
    if (std0) *std0 = 0;
    if (!desc || desc->layers || (int)desc->preset < 0 || desc->preset >= NB_PRESET_COUNT)
        return NB_INIT_NORMAL;
    if (desc->preset == NB_PRESET_PRE && desc->norm.type == NB_NORM_LAYER &&
        desc->ffn.type == NB_FFN_GELU_TANH)
        return NB_INIT_GPT2; /* the name "gpt2": Pre-Norm, LayerNorm, GELU-tanh (llm.c) */
    if (std0) *std0 = nb__presets[desc->preset].init_std;
    return nb__presets[desc->preset].init;
}

NBDEF const char* nb_preset_name(nb_preset p) {
    return (int)p >= 0 && p < NB_PRESET_COUNT ? nb__presets[p].key : "unknown";
}
NBDEF const char* nb_preset_aliases(nb_preset p) {
    return (int)p >= 0 && p < NB_PRESET_COUNT ? nb__presets[p].aliases : "";
}

/* one line per preset, in nb_preset order (THE PRESETS above has the equations) */
static const char* const nb__preset_about[] = {
    "Pre-Norm (the default)",
    "y = x + MHA(N(x)); x' = y + F(N(y))",
    "y = N(x + MHA(x)); x' = N(y + F(y)): the original Transformer's",
    "Post-Norm as HybridNorm's code writes it (the norms at the next sublayer's input)",
    "norms before and after each branch: y = x + N(MHA(N(x))) (Gemma)",
    "norms after each branch, QK norm: y = x + N(MHA_QK(x)) (OLMo-2)",
    "Post-Norm with an up-weighted residual: y = N(a x + MHA(x)), a = (2L)^(1/4) (DeepNet)",
    "DeepNorm with the Mix-LN code's constants",
    "QKV norms in attention, Post-Norm FFN: y = x + MHA_QKV(x); h = N(y); x' = h + F(h)",
    "HybridNorm with a Pre-Norm first layer",
    "HybridNorm with a first layer of QKV norms and a Pre-Norm FFN",
    "HybridNorm on a normalized embedding",
    "y = x + MHA_#(x) with chosen norm sites #, HybridNorm's FFN (the #-Post ablations)",
    "y = x + MHA_#(x) with chosen norm sites #, a Pre-Norm FFN (the #-Pre ablations)",
    "y = x + MHA_#(N(x)), HybridNorm's FFN (the Pre-#-Post ablations)",
    "y = x + MHA_#(N(x)), a Pre-Norm FFN (the Pre-#-Pre ablations)",
    "Pre-Norm attention, Post-Norm FFN",
    "Post-Norm attention, Pre-Norm FFN",
    "Post-Norm for the first quarter of the layers, Pre-Norm after (Mix-LN)",
    "two streams, one Post- and one Pre-normalized, fused at the output (SiameseNorm)",
    "SiameseNorm's per-sublayer form (its DeiT code)",
    "Pre-Norm with layer l's input norms scaled by 1/sqrt(l) (LayerNorm Scaling)",
    "no normalization at all: the baseline",
    "Pre-Norm with every norm DyT, w tanh(a x) + b (Transformers without Normalization)",
    "norms around each branch and on the embedding (Peri-LN)",
    "no norms; y = x + a MHA(x), a learnable, 0 at init (ReZero)",
    "Pre-Norm with learnable per-channel branch scales (LayerScale, CaiT)",
    "Pre-Norm blocks on 4 hyper-connected streams, doubly stochastic mixing (mHC, DeepSeek)",
    "Pre-Norm blocks on 4 hyper-connected streams (Hyper-Connections)",
    "mHC with no mixing between the streams (its ablation)",
    "every hidden vector unit-norm, normalize-and-interpolate residuals (nGPT)"};
typedef char nb__preset_about_size[sizeof nb__preset_about / sizeof *nb__preset_about ==
                                   NB_PRESET_COUNT ? 1 : -1];
NBDEF const char* nb_preset_about(nb_preset p) {
    return (int)p >= 0 && p < NB_PRESET_COUNT ? nb__preset_about[p] : "";
}

/* The preset as the caller named it (desc.name), else its key; "custom" for a schedule. */
static const char* nb__desc_name(const nb_stack_desc* d) {
    if (d->name[0]) return d->name;
    return d->preset == NB_PRESET_DEFAULT ? "custom" : nb_preset_name(d->preset);
}

/* ASCII case-insensitive: 1 when a starts with b (prefix) or equals it */
static int nb__strmatch(const char* a, const char* b, int prefix) {
    for (; *a && *b; a++, b++) {
        int x = *a >= 'A' && *a <= 'Z' ? *a + 32 : *a, y = *b >= 'A' && *b <= 'Z' ? *b + 32 : *b;
        if (x != y) return 0;
    }
    return prefix ? !*b : *a == *b;
}
static int nb__streq(const char* a, const char* b) { return nb__strmatch(a, b, 0); }

static unsigned nb__parse_sites(const char* p, size_t n) {
    static const char* const names[6] = {"QKVC", "QKV", "QKC", "QK", "KV", "KC"};
    static const unsigned masks[6] = {NB_SITES_QKVC, NB_SITES_QKV, NB_SITE_Q | NB_SITE_K | NB_SITE_C,
                                      NB_SITE_Q | NB_SITE_K, NB_SITE_K | NB_SITE_V,
                                      NB_SITE_K | NB_SITE_C};
    char buf[8];
    int i;
    if (n == 0 || n >= sizeof buf) return 0;
    memcpy(buf, p, n);
    buf[n] = 0;
    for (i = 0; i < 6; i++)
        if (nb__streq(buf, names[i])) return masks[i];
    return 0;
}

/* 1 when name is one of the '|'-separated names of list (ASCII case-insensitive) */
static int nb__in_list(const char* name, const char* list) {
    char buf[32];
    while (*list) {
        const char* end = strchr(list, '|');
        const size_t n = end ? (size_t)(end - list) : strlen(list);
        NB_ASSERT(n < sizeof buf); /* the aliases of the preset table are short */
        if (n < sizeof buf) {
            memcpy(buf, list, n);
            buf[n] = 0;
            if (nb__streq(name, buf)) return 1;
        }
        list += n + (end != NULL);
    }
    return 0;
}

/* Appends len characters of str to buf (size values, *n used), as far as they fit. */
static void nb__cat(char* buf, size_t size, size_t* n, const char* str, size_t len) {
    if (*n + len >= size) return;
    memcpy(buf + *n, str, len);
    *n += len;
    buf[*n] = 0;
}

/* "key (alias, alias), " for every preset: the names nb_preset_from_name takes. */
static void nb__preset_names(char* buf, size_t size) {
    size_t i, n = 0;
    buf[0] = 0;
    for (i = 1; i < NB_PRESET_COUNT; i++) {
        const char* a = nb__presets[i].aliases;
        nb__cat(buf, size, &n, nb__presets[i].key, strlen(nb__presets[i].key));
        if (*a) nb__cat(buf, size, &n, " (", 2);
        while (*a) {
            const char* bar = strchr(a, '|');
            const size_t len = bar ? (size_t)(bar - a) : strlen(a);
            nb__cat(buf, size, &n, a, len);
            nb__cat(buf, size, &n, bar ? ", " : ")", bar ? 2 : 1);
            a += len + (bar != NULL);
        }
        nb__cat(buf, size, &n, ", ", 2);
    }
}

static nb_result nb__named(nb_stack_desc* desc, const char* name) {
    const size_t n = strlen(name);
    const size_t m = n < sizeof desc->name - 1 ? n : sizeof desc->name - 1;
    if (nb__preset_hyper(desc->preset) != NB_HYPER_NONE)
        desc->hyper.kind = nb__preset_hyper(desc->preset);
    memcpy(desc->name, name, m);
    desc->name[m] = 0;
    return NB_OK;
}

NBDEF nb_result nb_preset_from_name(nb_ctx* ctx, nb_stack_desc* desc, const char* name) {
    const char* dash;
    char names[800];
    size_t i, n;
    NB__CHECK(!desc || !name, NB_ERR_NULL, "nb_preset_from_name: desc and name are required");
    for (i = 1; i < NB_PRESET_COUNT; i++)
        if (nb__streq(name, nb__presets[i].key) || nb__in_list(name, nb__presets[i].aliases)) {
            desc->preset = (nb_preset)i;
            return nb__named(desc, name);
        }
    if (nb__streq(name, "gpt2") || nb__streq(name, "gpt-2")) {
        desc->preset = NB_PRESET_PRE;
        desc->norm.type = NB_NORM_LAYER;
        desc->ffn.type = NB_FFN_GELU_TANH;
        desc->attn.bias = NB_ATTN_BIAS_QKV | NB_ATTN_BIAS_OUT;
        return nb__named(desc, name);
    }
    /* the HybridNorm ablation names: "#-Post", "#-Pre", "Pre-#-Post", "Pre-#-Pre" */
    n = strlen(name);
    {
        const int pre = n > 4 && nb__strmatch(name, "pre-", 1);
        const char* body = pre ? name + 4 : name;
        unsigned sites;
        dash = strchr(body, '-');
        if (dash && (sites = nb__parse_sites(body, (size_t)(dash - body))) != 0) {
            if (nb__streq(dash + 1, "Post")) {
                desc->preset = pre ? NB_PRESET_PRE_SITES_POST : NB_PRESET_SITES_POST;
                desc->attn.sites = sites;
                return nb__named(desc, name);
            }
            if (nb__streq(dash + 1, "Pre")) {
                desc->preset = pre ? NB_PRESET_PRE_SITES_PRE : NB_PRESET_SITES_PRE;
                desc->attn.sites = sites;
                return nb__named(desc, name);
            }
        }
    }
    nb__preset_names(names, sizeof names);
    return nb__fail(ctx, NB_ERR_CONFIG,
                    "nb_preset_from_name: unknown preset \"%s\"; the names (any case): %sgpt2 "
                    "(GPT-2), and #-Post, #-Pre, Pre-#-Post, Pre-#-Pre with # one of QKVC, QKV, "
                    "QKC, QK, KV, KC", name, names);
}

/* The placement of a code of the preset table (see nb__presets) in layer l of n_layers. */
static nb_placement nb__place_code(char code, int l, int n_layers) {
    nb_placement p;
    memset(&p, 0, sizeof p);
    p.residual_scale = p.input_scale = 1;
    switch (code) {
    case 'p': p.input_norm = 1; break;
    case 'r': p.input_norm = p.residual_from_norm = 1; break;
    case 'P': p.post_norm = 1; break;
    case 's': p.input_norm = p.output_norm = 1; break;
    case 'o': p.output_norm = 1; break;
    case 'd': p.post_norm = 1; p.residual_scale = (nb_real)pow(2.0 * n_layers, 0.25); break;
    case 'm': p.post_norm = 1; p.residual_scale = (nb_real)2.8284271247461903; break;
    case 'l': p.input_norm = 1; p.input_scale = (nb_real)(1 / sqrt(l + 1.0)); break;
    case 'z': p.branch_scale = NB_BRANCH_SCALE_SCALAR; break;
    case 'c': p.input_norm = 1; p.branch_scale = NB_BRANCH_SCALE_CHANNEL; break;
    case 'g':
        p.residual_norm = p.output_norm = p.post_norm = 1;
        p.branch_scale = NB_BRANCH_SCALE_INTERP;
        break;
    default: break; /* 'n', and '-' of the two-stream presets (nothing reads them) */
    }
    return p;
}

/* Layer l of a preset: its placements (the table's rule) and sites. */
static void nb__preset_layer(const nb_stack_desc* d, int l, int n_post, unsigned sites,
                             nb_layer_desc* ld) {
    const nb__preset_row* row = &nb__presets[d->preset];
    const int n_first = row->n_first < 0 ? n_post : row->n_first;
    const char* codes = l < n_first ? row->first : row->rest;
    ld->attn = nb__place_code(codes[0], l, d->n_layers);
    ld->ffn = nb__place_code(codes[1], l, d->n_layers);
    ld->sites = sites;
}

/* name maps: the library's suffix -> HF Llama / GPT-2 (NULL: none); "" marks a split tensor */
typedef struct nb__name_row { const char *lib, *llama, *gpt2, *ngpt; int transposed; } nb__name_row;
static const nb__name_row nb__name_rows[] = {
    {"att_proj.weight", "", "attn.c_attn.weight", "", 1},
    {"att_proj.bias", "", "attn.c_attn.bias", NULL, 0},
    {"attn_out.weight", "self_attn.o_proj.weight", "attn.c_proj.weight", "att_c_proj.weight", 1},
    {"attn_out.bias", "self_attn.o_proj.bias", "attn.c_proj.bias", NULL, 0},
    {"ff_proj.weight", "", "mlp.c_fc.weight", "c_fc.weight", 1},
    {"ff_proj.bias", NULL, "mlp.c_fc.bias", NULL, 0},
    {"ff_out.weight", "mlp.down_proj.weight", "mlp.c_proj.weight", "mlp_c_proj.weight", 1},
    {"ff_out.bias", NULL, "mlp.c_proj.bias", NULL, 0},
    {"q_norm.weight", "self_attn.q_norm.weight", NULL, NULL, 0},
    {"k_norm.weight", "self_attn.k_norm.weight", NULL, NULL, 0},
    {"attn_norm.weight", "input_layernorm.weight", "ln_1.weight", NULL, 0},
    {"attn_norm.bias", NULL, "ln_1.bias", NULL, 0},
    {"ff_norm.weight", "post_attention_layernorm.weight", "ln_2.weight", NULL, 0},
    {"ff_norm.bias", NULL, "ln_2.bias", NULL, 0},
    {"attn_out_norm.weight", "post_attention_layernorm.weight", NULL, NULL, 0},
    {"attn_post_norm.weight", "post_attention_layernorm.weight", NULL, NULL, 0},
    {"ff_out_norm.weight", "post_feedforward_layernorm.weight", NULL, NULL, 0},
    {"ff_post_norm.weight", "post_feedforward_layernorm.weight", NULL, NULL, 0},
    {"ln_f.weight", "model.norm.weight", "transformer.ln_f.weight", NULL, 0},
    {"ln_f.bias", NULL, "transformer.ln_f.bias", NULL, 0},
    {"sqk", NULL, NULL, "sqk", 0},
    {"sinks", "self_attn.sinks", NULL, NULL, 0}, /* gpt-oss (HF's GptOssAttention) */
    {"suv", NULL, NULL, "suv", 0},
    {"attn_alpha", NULL, NULL, "attn_alpha", 0},
    {"mlp_alpha", NULL, NULL, "mlp_alpha", 0}};

NBDEF int nb_stack_tensor_parts(const nb_stack* s, int t, nb_name_style style,
                                nb_tensor_part parts[3]) {
    const nb_tensor_info* ti;
    const char* suffix;
    size_t i;
    int l, n = 0;
    if (!s || !parts || !s->tensors || t < 0 || t >= s->n_tensors) return -1;
    ti = &s->tensors[t];
    memset(parts, 0, 3 * sizeof *parts);
    if (style == NB_NAMES_NORMBLOCKS) {
        snprintf(parts[0].name, sizeof parts[0].name, "%s", ti->name);
        parts[0].rows = ti->rows;
        return 1;
    }
    if (style != NB_NAMES_HF_LLAMA && style != NB_NAMES_HF_GPT2 && style != NB_NAMES_GPT2_LINEAR &&
        style != NB_NAMES_NGPT)
        return -1;
    l = ti->layer;
    suffix = l < 0 ? ti->name : strchr(strchr(ti->name, '.') + 1, '.') + 1; /* "blocks.<l>." */
    for (i = 0; i < sizeof nb__name_rows / sizeof nb__name_rows[0]; i++) {
        const nb__name_row* row = &nb__name_rows[i];
        const char* name = style == NB_NAMES_HF_LLAMA ? row->llama
                         : style == NB_NAMES_NGPT ? row->ngpt : row->gpt2;
        const char* prefix = l < 0 ? "" : style == NB_NAMES_HF_LLAMA ? "model.layers."
                                                                       : "transformer.h.";
        char pre[48];
        if (strcmp(suffix, row->lib) || !name) continue;
        if (l >= 0) snprintf(pre, sizeof pre, "%s%d.", prefix, l);
        else pre[0] = 0;
        /* the Mix-LN code (and Gemma): with an attention output or post norm, that one is
           post_attention_layernorm and the FFN's input norm pre_feedforward_layernorm */
        if (style == NB_NAMES_HF_LLAMA && !strcmp(row->lib, "ff_norm.weight") &&
            (s->layers[l].desc.attn.output_norm || s->layers[l].desc.attn.post_norm))
            name = "pre_feedforward_layernorm.weight";
        if (!strncmp(row->lib, "att_proj.", 9) && s->layers[l].attn.gate_width)
            return 0; /* no codebase of these fuses the gate's rows there (Qwen: into q_proj) */
        if (name[0]) { /* one whole tensor */
            snprintf(parts[0].name, sizeof parts[0].name, "%s%s", pre, name);
            parts[0].rows = ti->rows;
            parts[0].transposed = style == NB_NAMES_HF_GPT2 && row->transposed;
            return 1;
        }
        if (!strncmp(row->lib, "att_proj.", 9)) { /* separate Q, K, V (and biases) */
            const nb_attn_plan* ap = &s->layers[l].attn;
            static const char* const qkv[2][3] = {{"self_attn.q_proj", "self_attn.k_proj",
                                                   "self_attn.v_proj"}, {"query", "key", "value"}};
            const int kv = ap->desc.n_kv_heads * ap->head_dim, rows[3] = {ap->desc.d_model, kv, kv};
            for (n = 0; n < 3; n++) {
                snprintf(parts[n].name, sizeof parts[n].name, "%s%s.%s", pre,
                         qkv[style == NB_NAMES_NGPT][n], row->lib + 9);
                parts[n].row0 = n ? rows[0] + (n - 1) * kv : 0;
                parts[n].rows = rows[n];
            }
            return 3;
        }
        if (s->ffn.desc.ffn.type != NB_FFN_SWIGLU) return 0; /* Llama's MLP is SwiGLU */
        /* SwiGLU ff_proj rows: the value (Llama's up_proj), then the gate (gate_proj) */
        for (n = 0; n < 2; n++) {
            snprintf(parts[n].name, sizeof parts[n].name, "%smlp.%s_proj.weight", pre,
                     n ? "gate" : "up");
            parts[n].row0 = n * s->ffn.desc.ffn.d_ff;
            parts[n].rows = s->ffn.desc.ffn.d_ff;
        }
        return 2;
    }
    return 0;
}

typedef struct nb__span { size_t off; int t; } nb__span;
static int nb__span_cmp(const void* a, const void* b) {
    const nb__span *x = (const nb__span*)a, *y = (const nb__span*)b;
    return x->off < y->off ? -1 : x->off > y->off ? 1 : x->t - y->t;
}

NBDEF nb_result nb_stack_set_layout(nb_ctx* ctx, nb_stack* s, const size_t* offsets,
                                    size_t count) {
    nb__span* sp;
    int t;
    NB__CHECK(!s || !s->tensors, NB_ERR_NULL, "nb_stack_set_layout: s (an initialized stack) "
              "is required");
    if (!offsets) { /* the stack's own layout: tensors back to back in table order */
        size_t off = 0;
        for (t = 0; t < s->n_tensors; t++) {
            s->tensors[t].offset = off;
            off += s->tensors[t].count;
        }
        s->n_params = off;
        return NB_OK;
    }
    for (t = 0; t < s->n_tensors; t++)
        NB__CHECK(offsets[t] > count || s->tensors[t].count > count - offsets[t], NB_ERR_SHAPE,
                  "nb_stack_set_layout: %s (%zu values at offset %zu) ends past count (%zu)",
                  s->tensors[t].name, s->tensors[t].count, offsets[t], count);
    sp = (nb__span*)NB_MALLOC(sizeof *sp * (size_t)s->n_tensors, s->alloc_user);
    NB__CHECK(!sp, NB_ERR_NOMEM, "nb_stack_set_layout: out of memory (%d tensors)",
              s->n_tensors);
    for (t = 0; t < s->n_tensors; t++) {
        sp[t].off = offsets[t];
        sp[t].t = t;
    }
    qsort(sp, (size_t)s->n_tensors, sizeof *sp, nb__span_cmp);
    for (t = 1; t < s->n_tensors; t++) {
        const nb_tensor_info *a = &s->tensors[sp[t - 1].t], *b = &s->tensors[sp[t].t];
        if (sp[t - 1].off + a->count > sp[t].off) {
            nb_result rc = nb__fail(ctx, NB_ERR_SHAPE, "nb_stack_set_layout: %s [%zu, %zu) "
                                    "overlaps %s [%zu, %zu)", a->name, sp[t - 1].off,
                                    sp[t - 1].off + a->count, b->name, sp[t].off,
                                    sp[t].off + b->count);
            NB_FREE(sp, s->alloc_user);
            return rc;
        }
    }
    NB_FREE(sp, s->alloc_user);
    for (t = 0; t < s->n_tensors; t++) s->tensors[t].offset = offsets[t];
    s->n_params = count;
    return NB_OK;
}

NBDEF nb_result nb_stack_set_bf16_weights(nb_ctx* ctx, nb_stack* s, const unsigned short* w16) {
    NB__CHECK(!s, NB_ERR_NULL, "nb_stack_set_bf16_weights: s is NULL");
    NB__CHECK(w16 && !s->desc.gemm.bf16_weights, NB_ERR_CONFIG, "nb_stack_set_bf16_weights: the "
              "stack was made without desc.gemm.bf16_weights (its forward rounds the weights "
              "itself)");
    s->weights16 = w16;
    return NB_OK;
}

NBDEF nb_result nb_stack_gemm_bf16(nb_ctx* ctx, const nb_stack* s, int transa, int transb, int M,
                                   int N, int K, nb_real alpha, const unsigned short* A, int lda,
                                   const unsigned short* B, int ldb, nb_real beta, nb_real* C,
                                   int ldc) {
    NB__CHECK(!s, NB_ERR_NULL, "nb_stack_gemm_bf16: s is NULL");
    NB__CHECK(s->desc.gemm.precision != NB_PRECISION_BF16, NB_ERR_CONFIG, "nb_stack_gemm_bf16: "
              "the stack is not BF16 (its GEMMs are float32: use nb_gemm)");
    {
        const nb__gemm_at at = nb__at(ctx, "nb_stack_gemm_bf16", s->mm, s->ffn.bf16_gemm, 1);
        return nb__gemm(&at, M, N, K, alpha, nb__mh(A, lda, transa), nb__mh(B, ldb, transb),
                        beta, C, ldc);
    }
}

NBDEF nb_result nb_stack_set_value_embeds(nb_ctx* ctx, nb_stack* s, const nb_real* ve,
                                          nb_real* grad) {
    NB__CHECK(!s, NB_ERR_NULL, "nb_stack_set_value_embeds: s is NULL");
    NB__CHECK(!s->desc.residual.value_embeds, NB_ERR_CONFIG, "nb_stack_set_value_embeds: the "
              "stack was made without desc.residual.value_embeds");
    s->value_embeds = ve;
    s->value_embeds_grad = grad;
    return NB_OK;
}

NBDEF void nb_stack_free(nb_stack* s) {
    if (!s) return;
#if defined(NB_USE_DNNL) && !defined(NB_DOUBLE)
    nb__mm_free(s->mm, s->alloc_user);
#endif
    s->mm = NULL;
    if (s->layers) NB_FREE(s->layers, s->alloc_user);
    if (s->tensors) NB_FREE(s->tensors, s->alloc_user);
    if (s->skip) NB_FREE(s->skip, s->alloc_user);
    s->layers = NULL; s->tensors = NULL; s->skip = NULL;
}

/* ---- resolution: nb_stack_init resolves, builds, sizes, picks the backend ---- */

/* A custom layer's placements and sites, checked before anything is allocated. */
static nb_result nb__check_layer(nb_ctx* ctx, const nb_layer_desc* ld, int l) {
    const nb_placement* pl[2];
    int k;
    pl[0] = &ld->attn; pl[1] = &ld->ffn;
    for (k = 0; k < 2; k++) {
        const char* which = k ? "ffn" : "attn";
        NB__CHECK(pl[k]->residual_from_norm && !pl[k]->input_norm, NB_ERR_CONFIG,
                  "nb_stack_init: layer %d %s: residual_from_norm needs input_norm "
                  "(layers[%d].%s)", l, which, l, which);
        NB__CHECK(!nb__is0(pl[k]->residual_scale) && (!(pl[k]->residual_scale > 0) ||
                                                      !nb__fin((double)pl[k]->residual_scale)),
                  NB_ERR_CONFIG, "nb_stack_init: layer %d %s: residual_scale (%g) must be "
                  "finite and > 0", l, which, (double)pl[k]->residual_scale);
        NB__CHECK(!nb__is0(pl[k]->input_scale) && (!(pl[k]->input_scale > 0) ||
                                                   !nb__fin((double)pl[k]->input_scale)),
                  NB_ERR_CONFIG, "nb_stack_init: layer %d %s: input_scale (%g) must be "
                  "finite and > 0", l, which, (double)pl[k]->input_scale);
        NB__CHECK(!nb__is0(pl[k]->branch_mult) && (!(pl[k]->branch_mult > 0) ||
                                                   !nb__fin((double)pl[k]->branch_mult)),
                  NB_ERR_CONFIG, "nb_stack_init: layer %d %s: branch_mult (%g) must be "
                  "finite and > 0", l, which, (double)pl[k]->branch_mult);
        NB__CHECK(pl[k]->residual_norm && pl[k]->residual_from_norm, NB_ERR_CONFIG,
                  "nb_stack_init: layer %d %s: residual_norm and residual_from_norm both set the "
                  "residual (layers[%d].%s)", l, which, l, which);
        NB__CHECK((int)pl[k]->branch_scale < NB_BRANCH_SCALE_NONE ||
                      pl[k]->branch_scale > NB_BRANCH_SCALE_SUBLAYER, NB_ERR_CONFIG,
                  "nb_stack_init: layer %d %s: unknown branch_scale %d", l, which,
                  (int)pl[k]->branch_scale);
        NB__CHECK(pl[k]->input_scale != 0 && pl[k]->input_scale != 1 && !pl[k]->input_norm,
                  NB_ERR_CONFIG, "nb_stack_init: layer %d %s: input_scale needs input_norm "
                  "(layers[%d].%s)", l, which, l, which);
    }
    NB__CHECK(ld->sites & ~(unsigned)NB_SITES_QKVC, NB_ERR_CONFIG,
              "nb_stack_init: layer %d: sites (0x%x) has unknown bits", l, ld->sites);
    return NB_OK;
}

/* Most tensors one layer can have (2 attention matrices and their biases, 4 site norms with
   alpha and gain, FFN weights and biases, 12 norms with alpha, gain and bias, gamma, 2 branch
   scales, the value residual's lambdas, 2 hyper-connections of 6 and a norm, nGPT's sqk and
   suv) and the stack
   adds (4 norms of 3, the hyper-connections' head of 3, embed_scale): bounds n_tensors. */
#define NB__LAYER_TENSORS 78
#define NB__TOP_TENSORS 16

/* The stack's run modes: gradient conventions, precision, the name for messages. */
static nb_result nb__stack_modes(nb_ctx* ctx, nb_stack_desc* d) {
    NB__CHECK((unsigned)d->run.param_grads > NB_GRAD_OVERWRITE ||
                  (unsigned)d->run.input_grad > NB_GRAD_OVERWRITE, NB_ERR_CONFIG,
              "nb_stack_init: run.param_grads (%d) and run.input_grad (%d) must be nb_grad_mode "
              "values",
              (int)d->run.param_grads, (int)d->run.input_grad);
    if (d->run.param_grads == NB_GRAD_DEFAULT) d->run.param_grads = NB_GRAD_ACCUMULATE;
    if (d->run.input_grad == NB_GRAD_DEFAULT) d->run.input_grad = NB_GRAD_OVERWRITE;
    d->name[sizeof d->name - 1] = 0;
    return nb__check_gemm_config(ctx, "nb_stack_init", &d->gemm, 1);
}

/* The backend resolved (desc.backend), oneDNN's state made when it runs, the plans pointed at
   it, and the line of nb_stack_kernels. */
static nb_result nb__stack_backend(nb_ctx* ctx, nb_stack* s) {
    nb_stack_desc* d = &s->desc;
    const int bf = d->gemm.precision == NB_PRECISION_BF16;
    const char* prec = bf ? "bf16" : "float32";
    const char* core = bf ? nb__gemm_kernels[s->ffn.bf16_gemm] :
#ifdef NB_NO_BLAS
        "the reference GEMM";
#else
        "BLAS sgemm";
#endif
    const char* attn = bf ? nb__attn_kernels[s->layers[0].attn.bf16_attn] : core;
    char why[128] = "";
    int l, timed = 0; /* oneDNN runs BF16 by the timing of nb__bf16_engine */
#if defined(NB_USE_DNNL) && !defined(NB_DOUBLE)
    if (d->gemm.backend == NB_BACKEND_DNNL || (d->gemm.backend == NB_BACKEND_DEFAULT && bf)) {
        nb__mm* mm;
        nb_result rc = nb__mm_create(ctx, &mm, s->alloc_user);
        if (rc) return rc;
        if (d->gemm.backend == NB_BACKEND_DNNL && bf && !strcmp(mm->bf16_impl, "none")) {
            nb__mm_free(mm, s->alloc_user);
            return nb__fail(ctx, NB_ERR_CONFIG, "nb_stack_init: gemm.backend DNNL with BF16: "
                            "oneDNN has no bf16 matmul on this CPU");
        }
        if (d->gemm.backend == NB_BACKEND_DEFAULT && !mm->native_bf16) {
            snprintf(why, sizeof why, " (oneDNN's bf16 matmul here is %s: no bf16 matrix unit)",
                     mm->bf16_impl);
            nb__mm_free(mm, s->alloc_user);
        } else if (d->gemm.backend == NB_BACKEND_DEFAULT &&
                   nb__bf16_engine(ctx, mm, s->ffn.bf16_gemm, s->alloc_user) == 1) {
            snprintf(why, sizeof why, " (oneDNN %s timed no 1.25x faster here: %.2f ms against "
                     "%.2f ms)", mm->bf16_impl, ctx->gemm_probe_ms[1], ctx->gemm_probe_ms[0]);
            nb__mm_free(mm, s->alloc_user);
        } else {
            s->mm = mm;
            timed = d->gemm.backend == NB_BACKEND_DEFAULT;
        }
    }
#else
    NB__CHECK(d->gemm.backend == NB_BACKEND_DNNL, NB_ERR_CONFIG, "nb_stack_init: gemm.backend "
              "DNNL: this build has no oneDNN (float32 builds with NB_USE_DNNL defined, linked "
              "with -ldnnl)");
    if (bf && d->gemm.backend == NB_BACKEND_DEFAULT)
        snprintf(why, sizeof why, " (this build has no oneDNN: NB_USE_DNNL)");
    (void)timed;
#endif
    d->gemm.backend = s->mm ? NB_BACKEND_DNNL : NB_BACKEND_BLAS;
    for (l = 0; l < d->n_layers; l++) s->layers[l].attn.mm = s->mm;
    s->ffn.mm = s->mm;
#if defined(NB_USE_DNNL) && !defined(NB_DOUBLE)
    if (timed)
        snprintf(s->kernels, sizeof s->kernels, "%s: projections oneDNN %s (timed faster than "
                 "the portable path here: %.2f ms against %.2f ms), attention products %s", prec,
                 s->mm->bf16_impl, ctx->gemm_probe_ms[1], ctx->gemm_probe_ms[0], attn);
    else if (s->mm)
        snprintf(s->kernels, sizeof s->kernels, "%s: projections oneDNN %s, attention products "
                 "%s", prec, bf ? s->mm->bf16_impl : s->mm->f32_impl, attn);
    else
#endif
        snprintf(s->kernels, sizeof s->kernels, "%s: projections %s, attention products %s%s",
                 prec, core, attn, why);
    if (d->gemm.bf16_weights) {
        const size_t n = strlen(s->kernels);
        snprintf(s->kernels + n, sizeof s->kernels - n, "; weights: the caller's bf16 copy");
    }
    if (d->gemm.bf16_outputs) {
        const size_t n = strlen(s->kernels);
        snprintf(s->kernels + n, sizeof s->kernels - n, "; the FFN's hidden layer in bf16%s",
                 s->mm ? ", written by oneDNN" : "");
    }
    return NB_OK;
}

NBDEF const char* nb_stack_kernels(const nb_stack* s) {
    return s && s->kernels[0] ? s->kernels : "no stack";
}

NBDEF size_t nb_stack_backend_bytes(const nb_stack* s) {
#if defined(NB_USE_DNNL) && !defined(NB_DOUBLE)
    if (s && s->mm) return s->mm->bytes;
#endif
    (void)s;
    return 0;
}

/* The hyper-connection fields, resolved (0 = defaults); the stream count of the stack. */
static nb_result nb__stack_hyper(nb_ctx* ctx, nb_stack_desc* d, int* streams) {
    NB__CHECK((int)d->hyper.kind < NB_HYPER_DEFAULT || d->hyper.kind > NB_HYPER_MHC_LITE,
              NB_ERR_CONFIG, "nb_stack_init: unknown hyper.kind %d", (int)d->hyper.kind);
    if (d->hyper.kind == NB_HYPER_DEFAULT) d->hyper.kind = nb__preset_hyper(d->preset);
    if (d->hyper.kind == NB_HYPER_NONE) {
        NB__CHECK(d->hyper.streams || d->hyper.static_maps || d->hyper.sinkhorn, NB_ERR_CONFIG,
                  "nb_stack_init: hyper.streams (%d), hyper.static_maps (%d) and hyper.sinkhorn "
                  "(%d) need hyper-connections (hyper.kind)", d->hyper.streams,
                  d->hyper.static_maps, d->hyper.sinkhorn);
        return NB_OK;
    }
    NB__CHECK(*streams == 2, NB_ERR_CONFIG, "nb_stack_init: hyper-connections replace the "
              "residual stream, which SiameseNorm (%s) has two of", nb__desc_name(d));
    NB__CHECK(d->hyper.sinkhorn && d->hyper.kind != NB_HYPER_MHC, NB_ERR_CONFIG,
              "nb_stack_init: hyper.sinkhorn (%d) is mHC's; HC, identity HC and mHC-lite have "
              "no Sinkhorn",
              d->hyper.sinkhorn);
    if (d->hyper.streams == 0) d->hyper.streams = 4;
    if (d->hyper.kind == NB_HYPER_MHC && d->hyper.sinkhorn == 0) d->hyper.sinkhorn = 20;
    NB__CHECK(d->hyper.streams < 1 || d->hyper.streams > NB_HYPER_MAX_STREAMS, NB_ERR_CONFIG,
              "nb_stack_init: hyper.streams (%d) must be in [1, %d] (0 = 4)", d->hyper.streams,
              NB_HYPER_MAX_STREAMS);
    NB__CHECK(d->hyper.kind == NB_HYPER_MHC_LITE && d->hyper.streams > NB_HYPER_LITE_MAX_STREAMS,
              NB_ERR_CONFIG, "nb_stack_init: mHC-lite mixes the n! permutations of its streams: "
              "hyper.streams (%d) must be in [1, %d] (0 = 4)", d->hyper.streams,
              NB_HYPER_LITE_MAX_STREAMS);
    NB__CHECK(d->hyper.static_maps < 0 || d->hyper.static_maps > 1, NB_ERR_CONFIG,
              "nb_stack_init: hyper.static_maps (%d) must be 0 (dynamic) or 1 (static)",
              d->hyper.static_maps);
    NB__CHECK(d->hyper.kind == NB_HYPER_MHC && (d->hyper.sinkhorn < 1 || d->hyper.sinkhorn > 100),
              NB_ERR_CONFIG,
              "nb_stack_init: hyper.sinkhorn (%d) must be in [1, 100] (0 = 20)",
              d->hyper.sinkhorn);

    *streams = d->hyper.streams;
    return NB_OK;
}

/* SiameseNorm's fields: its output fusion and forms. */
static nb_result nb__stack_siamese(nb_ctx* ctx, const nb_stack_desc* d) {
    NB__CHECK(nb__presets[d->preset].streams == 2 && d->norm.final < 0, NB_ERR_CONFIG,
              "nb_stack_init: SiameseNorm needs its output fusion (norm.final cannot be -1)");
    NB__CHECK(d->siamese.paper_scale < 0 || d->siamese.paper_scale > 2 ||
                  d->siamese.paper_fusion < 0 || d->siamese.paper_fusion > 1, NB_ERR_CONFIG,
              "nb_stack_init: siamese.paper_scale (%d) must be 0, 1 or 2 and "
              "siamese.paper_fusion (%d) 0 or 1", d->siamese.paper_scale, d->siamese.paper_fusion);
    NB__CHECK(d->siamese.no_fusion_norm != 0 && (d->siamese.no_fusion_norm != 1 ||
                                                 d->preset != NB_PRESET_SIAMESE), NB_ERR_CONFIG,
              "nb_stack_init: siamese.no_fusion_norm (%d) is 0, or 1 with the siamese preset "
              "(its hybrid-pre form)", d->siamese.no_fusion_norm);
    return NB_OK;
}

/* The residual group's cross-layer fields: the value residual and CompleteP's multiplier. */
static nb_result nb__stack_residual(nb_ctx* ctx, nb_stack_desc* d) {
    nb_residual_config* rs = &d->residual;
    NB__CHECK(rs->value_residual < 0 || rs->value_residual > 2, NB_ERR_CONFIG,
              "nb_stack_init: residual.value_residual (%d) must be 0 (off), 1 (fixed 0.5/0.5) or "
              "2 (learnable lambdas)", rs->value_residual);
    NB__CHECK(!nb__fin(rs->depth_alpha) || rs->depth_alpha < 0 || rs->depth_alpha > 2 ||
                  rs->depth_base < 0, NB_ERR_CONFIG,
              "nb_stack_init: residual.depth_alpha (%g) must be in [0, 2] (0 off) and "
              "residual.depth_base (%d) >= 0 (0 = 1)", rs->depth_alpha, rs->depth_base);
    NB__CHECK(rs->depth_alpha > 0 && nb__presets[d->preset].streams == 2, NB_ERR_CONFIG,
              "nb_stack_init: residual.depth_alpha scales the branches of placements; "
              "SiameseNorm (%s) has fixed sublayers of its own scales", nb__desc_name(d));
    if (rs->depth_base == 0) rs->depth_base = 1;
    NB__CHECK(rs->value_embeds < 0 || 2 * (long)rs->value_embeds > d->n_layers, NB_ERR_CONFIG,
              "nb_stack_init: residual.value_embeds (%d) must be in [0, n_layers / 2] (%d layers: "
              "the first N and the last N layers mix the N tables)", rs->value_embeds, d->n_layers);
    NB__CHECK(rs->value_embeds && rs->value_residual, NB_ERR_CONFIG,
              "nb_stack_init: residual.value_embeds and residual.value_residual both mix the "
              "values (the tables' rows, layer 0's V): give one");
    NB__CHECK(rs->dwa < 0 || rs->dwa > 1 || rs->dwa_dilation < 0 ||
                  rs->dwa_dilation > d->n_layers, NB_ERR_CONFIG,
              "nb_stack_init: residual.dwa (%d) must be 0 or 1 and residual.dwa_dilation (%d) in "
              "[0, n_layers] (0 = 1)", rs->dwa, rs->dwa_dilation);
    NB__CHECK(!rs->dwa && rs->dwa_dilation, NB_ERR_CONFIG,
              "nb_stack_init: residual.dwa_dilation (%d) needs residual.dwa", rs->dwa_dilation);
    NB__CHECK(rs->dwa && (nb__presets[d->preset].streams == 2 || d->hyper.kind > NB_HYPER_NONE),
              NB_ERR_CONFIG, "nb_stack_init: residual.dwa averages the outputs of one residual "
              "stream; %s has %s", nb__desc_name(d),
              d->hyper.kind > NB_HYPER_NONE ? "hyper-connections" : "SiameseNorm's two");
    if (rs->dwa && rs->dwa_dilation == 0) rs->dwa_dilation = 1; /* 0 stays 0 without dwa */
    NB__CHECK(rs->dwa_period < 0 || rs->dwa_period > d->n_layers || (!rs->dwa && rs->dwa_period),
              NB_ERR_CONFIG, "nb_stack_init: residual.dwa_period (%d) must be in [0, n_layers] (0 = "
              "1) and needs residual.dwa", rs->dwa_period);
    if (rs->dwa && rs->dwa_period == 0) rs->dwa_period = 1;
    NB__CHECK(rs->attn_res < 0 || rs->attn_res > 1 || rs->attn_res_block < 0 ||
                  rs->attn_res_block > 2 * d->n_layers, NB_ERR_CONFIG,
              "nb_stack_init: residual.attn_res (%d) must be 0 or 1 and residual.attn_res_block "
              "(%d) in [0, 2 n_layers] (sublayers; 0 = 1)", rs->attn_res, rs->attn_res_block);
    NB__CHECK(!rs->attn_res && rs->attn_res_block, NB_ERR_CONFIG,
              "nb_stack_init: residual.attn_res_block (%d) needs residual.attn_res",
              rs->attn_res_block);
    NB__CHECK(rs->attn_res && (nb__presets[d->preset].streams == 2 ||
                               d->hyper.kind > NB_HYPER_NONE || rs->dwa), NB_ERR_CONFIG,
              "nb_stack_init: residual.attn_res replaces the residual sums of one stream; %s has "
              "%s", nb__desc_name(d), d->hyper.kind > NB_HYPER_NONE ? "hyper-connections"
              : rs->dwa ? "DenseFormer's averages (residual.dwa)" : "SiameseNorm's two");
    if (rs->attn_res && rs->attn_res_block == 0) rs->attn_res_block = 1; /* Full AttnRes */
    NB__CHECK(rs->unet_skips < 0 || rs->unet_skips > 1 || rs->reinject_x0 < 0 ||
                  rs->reinject_x0 > 1, NB_ERR_CONFIG, "nb_stack_init: residual.unet_skips (%d) "
              "and residual.reinject_x0 (%d) must be 0 or 1", rs->unet_skips, rs->reinject_x0);
    NB__CHECK(rs->unet_skips && d->n_layers % 2, NB_ERR_CONFIG, "nb_stack_init: "
              "residual.unet_skips pairs the first half's layers with the second's: n_layers "
              "(%d) must be even", d->n_layers);
    NB__CHECK((rs->unet_skips || rs->reinject_x0) &&
                  (nb__presets[d->preset].streams == 2 || d->hyper.kind > NB_HYPER_NONE ||
                   rs->dwa || rs->attn_res), NB_ERR_CONFIG,
              "nb_stack_init: residual.%s mixes a layer's input in one residual stream; %s has %s",
              rs->unet_skips ? "unet_skips" : "reinject_x0", nb__desc_name(d),
              d->hyper.kind > NB_HYPER_NONE ? "hyper-connections"
              : rs->dwa ? "DenseFormer's averages (residual.dwa)"
              : rs->attn_res ? "Attention Residuals (residual.attn_res)" : "SiameseNorm's two");
    return NB_OK;
}

/* nGPT's options, by the preset where 0: the interpolation's init, s_qk, the softmax scale,
   s_uv and its 4d SwiGLU. */
static nb_result nb__stack_ngpt(nb_ctx* ctx, nb_stack_desc* d) {
    const int ngpt = d->preset == NB_PRESET_NGPT;
    const double a = d->residual.interp_init;
    NB__CHECK(!nb__fin(a) || a < 0 || a > 1, NB_ERR_CONFIG,
              "nb_stack_init: residual.interp_init (%g) must be in (0, 1] (0 = 0.05)", a);
    NB__CHECK(d->attn.qk_scale < -1 || d->attn.qk_scale > 1 || d->ffn.in_scale < -1 ||
                  d->ffn.in_scale > 1, NB_ERR_CONFIG,
              "nb_stack_init: attn.qk_scale (%d) and ffn.in_scale (%d) must be -1, 0 or 1",
              d->attn.qk_scale, d->ffn.in_scale);
    NB__CHECK(!nb__is0(d->attn.softmax_scale) && (!(d->attn.softmax_scale > 0) ||
                                             !nb__fin((double)d->attn.softmax_scale)),
              NB_ERR_CONFIG, "nb_stack_init: attn.softmax_scale (%g) must be finite and > 0 "
              "(0 = the preset's)", (double)d->attn.softmax_scale);
    if (nb__is0(d->residual.interp_init)) d->residual.interp_init = 0.05;
    if (d->attn.qk_scale == 0) d->attn.qk_scale = ngpt ? 1 : -1;
    if (d->ffn.in_scale == 0) d->ffn.in_scale = ngpt ? 1 : -1;
    if (nb__is0(d->attn.softmax_scale) && ngpt)
        d->attn.softmax_scale = (nb_real)sqrt((double)d->d_model / d->n_heads);
    if (d->ffn.d_ff == 0 && ngpt && d->ffn.type != NB_FFN_GELU_TANH &&
        d->ffn.type != NB_FFN_GELU_ERF)
        d->ffn.d_ff = 4 * d->d_model; /* its SwiGLU: c_fc d -> 8d */
    return NB_OK;
}

/* CompleteP's residual multiplier where the placement leaves it 0: (L / L_base)^-alpha */
static void nb__depth_mult(const nb_stack_desc* d, nb_placement* p) {
    if (nb__is0(p->branch_mult))
        p->branch_mult = d->residual.depth_alpha > 0
                             ? (nb_real)pow((double)d->n_layers / d->residual.depth_base,
                                            -d->residual.depth_alpha)
                             : 1;
}

/* A layer's placements once resolved: INTERP steps between the residual and the branch, with
   no other scale; a hyper-connection is the residual of its sublayers, and attention residuals
   have none: placements with another are refused. */
static nb_result nb__check_resolved_layer(nb_ctx* ctx, const nb_stack_desc* d,
                                          const nb_layer_desc* ld, int l) {
    int k;
    for (k = 0; k < 2; k++) {
        const nb_placement* pl = k ? &ld->ffn : &ld->attn;
        NB__CHECK(pl->branch_scale == NB_BRANCH_SCALE_INTERP && (pl->branch_mult != 1 ||
                                                                  pl->residual_scale != 1),
                  NB_ERR_CONFIG, "nb_stack_init: layer %d %s (%s): the INTERP branch scale "
                  "steps from the residual toward the branch: a branch_mult (%g; "
                  "residual.depth_alpha) or residual_scale (%g) other than 1 is refused with it",
                  l, k ? "ffn" : "attn", nb__desc_name(d), (double)pl->branch_mult,
                  (double)pl->residual_scale);
    }
    for (k = 0; k < 2 && (d->hyper.kind > NB_HYPER_NONE || d->residual.attn_res); k++) {
        const nb_placement* pl = k ? &ld->ffn : &ld->attn;
        const char* what = d->hyper.kind > NB_HYPER_NONE ? "hyper-connections carry the residual"
                                                         : "attention residuals (residual."
                                                           "attn_res) replace the residual sums";
        NB__CHECK(pl->post_norm || pl->residual_from_norm || pl->residual_scale != 1 ||
                      pl->residual_norm || pl->branch_scale == NB_BRANCH_SCALE_INTERP,
                  NB_ERR_CONFIG, "nb_stack_init: layer %d %s (%s): %s; a %s is refused with "
                  "them", l, k ? "ffn" : "attn", nb__desc_name(d), what,
                  pl->post_norm ? "post norm" : pl->residual_from_norm ? "residual from the norm"
                  : pl->residual_norm ? "residual norm" : pl->branch_scale ==
                  NB_BRANCH_SCALE_INTERP ? "INTERP branch scale" : "residual_scale other than 1");
    }
    return NB_OK;
}

/* The norms' fields, resolved (0 = defaults): the kind, its scalars' init (DyT's rule by width,
   Derf's 1), weight, bias, unit offset and eps; LayerScale's init. */
static nb_result nb__stack_norms(nb_ctx* ctx, nb_stack_desc* d) {
    const int L = d->n_layers;
    if (d->norm.type == NB_NORM_DEFAULT) d->norm.type = nb__presets[d->preset].norm;
    if (d->norm.type == NB_NORM_DEFAULT) d->norm.type = NB_NORM_RMS;
    NB__CHECK((int)d->norm.type < NB_NORM_RMS || d->norm.type > NB_NORM_DERF, NB_ERR_CONFIG,
              "nb_stack_init: unknown norm type %d", (int)d->norm.type);
    NB__CHECK(!(d->norm.dyt_alpha >= 0) || !nb__fin(d->norm.dyt_alpha) ||
                  !(d->norm.dyt_alpha_attn >= 0) || !nb__fin(d->norm.dyt_alpha_attn), NB_ERR_CONFIG,
              "nb_stack_init: norm.dyt_alpha (%g) and norm.dyt_alpha_attn (%g) must be finite and "
              "> 0 (0 = default)", d->norm.dyt_alpha, d->norm.dyt_alpha_attn);
    NB__CHECK(!(d->residual.layerscale_init >= 0) || !nb__fin(d->residual.layerscale_init),
              NB_ERR_CONFIG,
              "nb_stack_init: residual.layerscale_init (%g) must be finite and > 0 (0 = default)",
              d->residual.layerscale_init);
    if (nb__is0(d->residual.layerscale_init))
        d->residual.layerscale_init = L <= 18 ? 0.1 : L <= 24 ? 1e-5 : 1e-6;
    if (d->norm.type == NB_NORM_DERF) { /* its language-model code: 1 for every norm, any width */
        if (nb__is0(d->norm.dyt_alpha)) d->norm.dyt_alpha = 1;
        if (nb__is0(d->norm.dyt_alpha_attn)) d->norm.dyt_alpha_attn = 1;
    }
    if (nb__is0(d->norm.dyt_alpha))
        d->norm.dyt_alpha = d->d_model <= 1024   ? 1
                       : d->d_model <= 2048 ? 0.5
                       : d->d_model <= 4096 ? 0.2 : 0.05;
    if (nb__is0(d->norm.dyt_alpha_attn))
        d->norm.dyt_alpha_attn = d->d_model <= 2048 ? 1 : d->d_model <= 4096 ? 0.8 : 0.2;
    NB__CHECK(d->norm.gain < -1 || d->norm.gain > 0 || d->norm.bias < -1 || d->norm.bias > 0 ||
                  d->norm.gain_offset < 0 || d->norm.gain_offset > 1, NB_ERR_CONFIG,
              "nb_stack_init: norm.gain (%d) and norm.bias (%d) must be 0 or -1, norm.gain_offset "
              "(%d) 0 or 1", d->norm.gain, d->norm.bias, d->norm.gain_offset);
    NB__CHECK(d->norm.bias < 0 && !nb__norm_kinds[d->norm.type].block_bias, NB_ERR_CONFIG,
              "nb_stack_init: norm.bias -1: the norm (%s) has no bias to remove",
              nb__norm_kinds[d->norm.type].fwd);
    NB__CHECK(d->norm.gain < 0 && !nb__norm_kinds[d->norm.type].gain, NB_ERR_CONFIG,
              "nb_stack_init: norm.gain -1: the norm (%s) has no weight to remove",
              nb__norm_kinds[d->norm.type].fwd);
    if (nb__is0(d->norm.eps)) d->norm.eps = (nb_real)nb__presets[d->preset].eps;
    NB__CHECK(!(d->norm.eps > 0) || !nb__fin((double)d->norm.eps), NB_ERR_CONFIG,
              "nb_stack_init: norm.eps (%g) must be finite and > 0", (double)d->norm.eps);
    NB__CHECK(d->norm.embed_scale < 0 || d->norm.embed_scale > 1, NB_ERR_CONFIG,
              "nb_stack_init: norm.embed_scale (%d) must be 0 or 1", d->norm.embed_scale);
    NB__CHECK((int)d->residual.branch_scale < NB_BRANCH_SCALE_NONE ||
                  d->residual.branch_scale > NB_BRANCH_SCALE_SUBLAYER, NB_ERR_CONFIG,
              "nb_stack_init: unknown residual.branch_scale %d", (int)d->residual.branch_scale);
    NB__CHECK(d->residual.branch_scale && (d->layers || nb__presets[d->preset].streams == 2),
              NB_ERR_CONFIG, "nb_stack_init: residual.branch_scale sets a preset's placements: a "
              "custom schedule sets its own, and SiameseNorm (%s) has none", nb__desc_name(d));
    return NB_OK;
}

/* The description resolved: every default filled in and every field checked, before anything
   is built. */
typedef struct nb__resolved {
    nb_stack_desc d;
    unsigned sites;              /* the preset's or the caller's sites (NB_SITES_NONE cleared) */
    int n_post;                  /* Mix-LN: how many layers are Post-Norm */
    int streams;                 /* residual streams: 1, 2 (SiameseNorm) or n (hyper) */
} nb__resolved;

static nb_result nb__stack_resolve(nb_ctx* ctx, const nb_stack_desc* desc, int max_batch,
                                   int max_seq, nb__resolved* r) {
    nb_stack_desc* d = &r->d;
    nb_result rc;
    int L, l;
    *d = *desc;
    L = d->n_layers;
    NB__CHECK(L <= 0 || d->d_model <= 0 || d->n_heads <= 0, NB_ERR_CONFIG,
              "nb_stack_init: n_layers (%d), d_model (%d) and n_heads (%d) must be > 0", L,
              d->d_model, d->n_heads);
    NB__CHECK(L > (int)((NB__INT_MAX - NB__TOP_TENSORS) / NB__LAYER_TENSORS), NB_ERR_CONFIG,
              "nb_stack_init: n_layers (%d) overflows int in the tensor table (n_tensors)", L);
    NB__CHECK((int)d->preset < 0 || d->preset >= NB_PRESET_COUNT, NB_ERR_CONFIG,
              "nb_stack_init: unknown preset %d", (int)d->preset);
    if ((rc = nb__stack_modes(ctx, d))) return rc;
    NB__CHECK(d->layers && d->preset != NB_PRESET_DEFAULT, NB_ERR_CONFIG,
              "nb_stack_init: give either a preset (%s) or a custom layer schedule, not both",
              nb__desc_name(d));
    if (d->preset == NB_PRESET_DEFAULT && !d->layers) d->preset = NB_PRESET_PRE;
    NB_ASSERT(nb__presets[d->preset].id == d->preset); /* the table is in enum order */
    NB__CHECK(d->attn.sites & ~(NB_SITES_QKVC | NB_SITES_NONE), NB_ERR_CONFIG,
              "nb_stack_init: attn.sites (0x%x) has unknown bits", d->attn.sites);
    r->sites = d->attn.sites == 0 ? nb__presets[d->preset].sites : d->attn.sites & NB_SITES_QKVC;
    if (nb__is0(d->mixln_alpha)) d->mixln_alpha = 0.25;
    NB__CHECK(!nb__fin(d->mixln_alpha) ||
                  (d->mixln_alpha != -1 && !(d->mixln_alpha > 0 && d->mixln_alpha <= 1)),
              NB_ERR_CONFIG,
              "nb_stack_init: mixln_alpha (%g) must be in (0, 1], or -1 for none (0 is the "
              "default 0.25)", d->mixln_alpha);
    r->n_post = d->mixln_alpha < 0 ? 0 : (int)floor(d->mixln_alpha * L + 1e-9);
    if ((rc = nb__stack_norms(ctx, d))) return rc;
    if (d->attn.site_width == NB_WIDTH_DEFAULT) d->attn.site_width = nb__presets[d->preset].width;
    NB__CHECK(d->norm.final < -1 || d->norm.final > 1 || d->norm.embed < -1 || d->norm.embed > 1,
              NB_ERR_CONFIG, "nb_stack_init: norm.final and norm.embed must be -1, 0 or 1");
    if (d->norm.final == 0) d->norm.final = nb__presets[d->preset].final_norm;
    if (d->norm.embed == 0) d->norm.embed = nb__presets[d->preset].embed_norm;
    r->streams = nb__presets[d->preset].streams;
    if ((rc = nb__stack_hyper(ctx, d, &r->streams))) return rc;
    if ((rc = nb__stack_siamese(ctx, d))) return rc;
    if ((rc = nb__stack_residual(ctx, d))) return rc;
    if ((rc = nb__stack_ngpt(ctx, d))) return rc;
    NB__CHECK(max_batch <= 0 || max_seq <= 0, NB_ERR_SHAPE,
              "nb_stack_init: max_batch (%d) and max_seq (%d) must be > 0", max_batch, max_seq);
    if (desc->layers)
        for (l = 0; l < L; l++)
            if ((rc = nb__check_layer(ctx, &desc->layers[l], l))) return rc;
    return NB_OK;
}

/* Layer l's schedule: the caller's layer (its zero scales made 1) or the preset's, with the
   stack-wide branch options applied. */
static void nb__stack_layer_desc(const nb__resolved* r, int l, nb_layer_desc* ld) {
    const nb_stack_desc* d = &r->d;
    if (d->layers) {
        *ld = d->layers[l];
        if (nb__is0(ld->attn.residual_scale)) ld->attn.residual_scale = 1;
        if (nb__is0(ld->ffn.residual_scale)) ld->ffn.residual_scale = 1;
        if (nb__is0(ld->attn.input_scale)) ld->attn.input_scale = 1;
        if (nb__is0(ld->ffn.input_scale)) ld->ffn.input_scale = 1;
    } else {
        nb__preset_layer(d, l, r->n_post, r->sites, ld);
        if (d->residual.branch_scale)
            ld->attn.branch_scale = ld->ffn.branch_scale = d->residual.branch_scale;
    }
    nb__depth_mult(d, &ld->attn);
    nb__depth_mult(d, &ld->ffn);
}

/* The sublayer plans: one FFN plan shared by every layer, one attention plan per layer (its
   own sites). Fills s->desc with what the plans resolved. */
static nb_result nb__stack_build(nb_ctx* ctx, nb_stack* s, nb__resolved* r, int max_batch,
                                 int max_seq) {
    nb_stack_desc* d = &r->d;
    const int L = d->n_layers;
    nb_attn_desc ad;
    nb_ffn_desc fd;
    nb_result rc;
    int l;
    memset(&fd, 0, sizeof fd);
    fd.d_model = d->d_model;
    fd.ffn = d->ffn;
    fd.gemm = d->gemm;
    fd.gemm.backend = NB_BACKEND_DEFAULT; /* the stack's: s->mm */
    if ((rc = nb_ffn_plan_make(ctx, &s->ffn, &fd, max_batch, max_seq))) return rc;
    d->ffn.d_ff = s->ffn.desc.ffn.d_ff;
    d->ffn.type = s->ffn.desc.ffn.type;
    d->ffn.bias = s->ffn.desc.ffn.bias;

    s->alloc_user = ctx ? ctx->alloc_user : NULL;
    s->layers = (nb_layer*)NB_MALLOC(sizeof(nb_layer) * (size_t)L, s->alloc_user);
    s->skip = (unsigned char*)NB_MALLOC((size_t)L, s->alloc_user);
    NB__CHECK(!s->layers || !s->skip, NB_ERR_NOMEM, "nb_stack_init: out of memory");
    memset(s->layers, 0, sizeof(nb_layer) * (size_t)L);
    memset(s->skip, 0, (size_t)L);
    for (l = 0; l < L; l++) {
        nb_layer_desc* ld = &s->layers[l].desc;
        nb__stack_layer_desc(r, l, ld);
        if ((rc = nb__check_resolved_layer(ctx, d, ld, l))) return rc;
        memset(&ad, 0, sizeof ad);
        ad.d_model = d->d_model; ad.n_heads = d->n_heads; ad.n_kv_heads = d->n_kv_heads;
        ad.attn = d->attn;
        ad.attn.sites = ld->sites; /* the layer's (a custom schedule's own) */
        ad.norm = d->norm.type; ad.eps = d->norm.eps;
        ad.gemm = d->gemm;
        ad.gemm.backend = NB_BACKEND_DEFAULT;
        if ((rc = nb_attn_plan_make(ctx, &s->layers[l].attn, &ad, max_batch, max_seq))) return rc;
    }
    d->n_kv_heads = s->layers[0].attn.desc.n_kv_heads;
    d->attn.rope_theta = s->layers[0].attn.desc.attn.rope_theta;
    d->attn.memory = s->layers[0].attn.desc.attn.memory;
    d->attn.softmax_scale = s->layers[0].attn.desc.attn.softmax_scale;
    d->attn.sites = r->sites;
    d->layers = NULL;
    s->desc = *d;
    s->streams = r->streams;
    s->topology = nb__hyper(s) ? NB__TOPO_HYPER
                  : s->streams == 1 ? (d->residual.dwa ? NB__TOPO_DWA
                                       : d->residual.attn_res ? NB__TOPO_ATTN_RES
                                       : nb__unet(s) ? NB__TOPO_UNET : NB__TOPO_ONE)
                  : nb__post_pre(s) ? NB__TOPO_SIAMESE_POST_PRE : NB__TOPO_SIAMESE;
    s->max_batch = max_batch;
    s->max_seq = max_seq;
    return NB_OK;
}

/* The sizes: the parameter buffer and its named table, the cache (stack-level, then one region
   per layer) and the scratch. */
static nb_result nb__stack_size(nb_ctx* ctx, nb_stack* s) {
    const nb_stack_desc* d = &s->desc;
    const int L = d->n_layers;
    nb__walk w;
    nb__top_tensors tp;
    nb__stack_mem sc;
    size_t cu, su;
    int l;
    memset(&w, 0, sizeof w);
    nb__walk_all(s, &w, &tp);
    NB_ASSERT(w.n <= NB__LAYER_TENSORS * L + NB__TOP_TENSORS);
    s->n_params = w.off;
    NB__CHECK(nb__too_big(s->n_params), NB_ERR_SHAPE, "nb_stack_init: n_params (n_layers %d, "
              "d_model %d, d_ff %d) overflows size_t", L, d->d_model, d->ffn.d_ff);
    NB__CHECK(d->norm.gain_offset && s->n_gains == 0, NB_ERR_CONFIG, "nb_stack_init: "
              "norm.gain_offset: the stack (%s) has no norm gains to offset", nb__desc_name(d));
    s->tensors = (nb_tensor_info*)NB_MALLOC(sizeof(nb_tensor_info) * (size_t)w.n, s->alloc_user);
    NB__CHECK(!s->tensors, NB_ERR_NOMEM, "nb_stack_init: out of memory");
    memset(s->tensors, 0, sizeof(nb_tensor_info) * (size_t)w.n);
    s->n_tensors = w.n;
    memset(&w, 0, sizeof w);
    w.table = s->tensors;
    nb__walk_all(s, &w, &tp);

    nb__carve_stack(s, NULL, NULL, &sc, &cu, &su);
    for (l = 0; l < L; l++) {
        nb__layer_mem lc;
        s->layers[l].cache_offset = cu;
        nb__carve_layer(s, l, NULL, &cu, &lc);
    }
    NB__CHECK(nb__too_big(cu) || nb__too_big(su), NB_ERR_SHAPE, "nb_stack_init: %s (n_layers %d "
              "* max_batch %d * max_seq %d * d_model %d ...) overflows size_t",
              nb__too_big(cu) ? "n_cache" : "n_scratch", L, s->max_batch, s->max_seq,
              d->d_model);
    s->n_cache = cu;
    s->n_scratch = su;
    return NB_OK;
}

/* Resolve, build, size, then pick the GEMM backend; on failure *s is freed and zeroed. */
NBDEF nb_result nb_stack_init(nb_ctx* ctx, nb_stack* s, const nb_stack_desc* desc,
                              int max_batch, int max_seq) {
    nb__resolved r;
    nb_result rc;
    NB__CHECK(!s || !desc, NB_ERR_NULL, "nb_stack_init: s and desc are required (%s is NULL)",
              s ? "desc" : "s");
    memset(s, 0, sizeof *s);
    if ((rc = nb__stack_resolve(ctx, desc, max_batch, max_seq, &r))) return rc;
    s->max_threads = nb_num_threads(ctx);
    if ((rc = nb__stack_build(ctx, s, &r, max_batch, max_seq)) || (rc = nb__stack_size(ctx, s)) ||
        (rc = nb__stack_backend(ctx, s))) {
        nb_stack_free(s);
        memset(s, 0, sizeof *s);
    }
    return rc;
}

/* ---- one stream: block norms, the branch row pass, sublayers ---- */

typedef struct nb__run {         /* what every layer function needs for one call */
    nb_ctx* ctx;
    const nb_stack* s;
    int B, T, rows;              /* rows = B*T */
    size_t n;                    /* rows * d */
    nb__stack_mem sc;            /* stack-level cache and scratch */
    int write_dw;                /* nb_stack_backward with param_grads OVERWRITE: the weight
                                    matrices' gradients are written by their dW GEMMs (beta 0),
                                    not zeroed first and added to */
    const nb_real* cache;        /* the call's cache (DenseFormer reads earlier layers') */
    /* BF16 hand-off of a gradient's bf16 copy between two sublayer backwards: dx16, where the
       next nb__sub_backward writes its dx's copy (set by its caller, who knows which sublayer
       reads dx next and where that one keeps it); given16, the float gradient whose copy that
       backward did write (NULL: none), which the reader takes instead of converting it. */
    unsigned short* dx16;
    const nb_real* given16;
    int chained;                 /* nb_stack_backward: layer l - 1's backward follows layer l's
                                    in this run (not so in nb_layer_backward) */
} nb__run;

/* Block norm (width d) forward; stats: rstd[rows] then mean[rows] for LayerNorm. */
static nb_result nb__block_norm_fwd(nb__run* r, const nb__norm* m, nb_real* y, const nb_real* x,
                                    nb_real* st) {
    const int d = r->s->desc.d_model;
    nb__norm_call c = nb__ncall(r->s->desc.norm.type, x, d, r->rows, d, d);
    c.gain = m->g; c.bias = m->b; c.alpha = m->a; c.eps = r->s->desc.norm.eps;
    return nb__kind_forward(r->ctx, c, y, d, st, (size_t)r->rows);
}

/* Block norm backward: dx = alpha add + J^T dy (add may be NULL, or dx); grads in gm; dx16
   (NULL: none) dx's bf16 copy (nb__norm_grad). */
static nb_result nb__block_norm_bwd_add(nb__run* r, const nb__norm* m, const nb__norm* gm,
                                        nb_real* dx, const nb_real* dy, const nb_real* x,
                                        const nb_real* st, const nb_real* add, nb_real alpha,
                                        unsigned short* dx16) {
    const int d = r->s->desc.d_model;
    nb__norm_call c = nb__ncall(r->s->desc.norm.type, x, d, r->rows, d, d);
    nb__norm_grad g = nb__ngrad(dx, d, dy, d, r->sc.partials, r->s->max_threads);
    c.gain = m->g; c.alpha = m->a;
    g.dgain = gm->g; g.dbias = gm->b; g.dalpha = gm->a; g.add = add; g.add_alpha = alpha;
    g.dx16 = dx16;
    return nb__kind_backward(r->ctx, c, st, (size_t)r->rows, &g);
}

/* dx = J^T dy (overwritten, or added when accumulate); grads in gm. */
static nb_result nb__block_norm_bwd(nb__run* r, const nb__norm* m, const nb__norm* gm, nb_real* dx,
                                    const nb_real* dy, const nb_real* x, const nb_real* st,
                                    int accumulate) {
    return nb__block_norm_bwd_add(r, m, gm, dx, dy, x, st, accumulate ? dx : NULL, 1, NULL);
}

/* The same norms on one row (row-fused loops): y = N(x) for row `row` of the stats. */
static void nb__block_norm_fwd_row(const nb__run* r, const nb__norm* m, nb_real* y,
                                   const nb_real* x, nb_real* st, int row) {
    const nb_norm_config* nc = &r->s->desc.norm;
    nb__seg_fwd(nc->type, y, x, r->s->desc.d_model, m->g, m->b, m->a, nc->eps, st,
                (size_t)r->rows, (size_t)row);
}

/* dx = add + J^T dy on one row (add NULL: nothing; it may be dx); the parameter-gradient terms
   into the thread's partial sums pp. */
static void nb__block_norm_bwd_row(const nb__run* r, const nb__norm* m, nb_real* dx,
                                   const nb_real* dy, const nb_real* x, const nb_real* st, int row,
                                   const nb_real* add, const nb__part* pp) {
    const int d = r->s->desc.d_model;
    const nb_real* mean = nb__kind_mean(r->s->desc.norm.type, st, (size_t)r->rows);
    if (pp->b) nb__add_row(pp->b, dy, d);
    nb__seg_bwd(r->s->desc.norm.type, dx, dy, x, d, m->g, m->a, mean ? mean + row : NULL,
                m->a ? 0 : st[row], add, 1,
                pp);
}

/* Partial-sum slot k (max_threads blocks of nb__part_stride(d)) and a thread's row buffers. */
static nb_real* nb__slot(const nb__run* r, int k) {
    return r->sc.partials + (size_t)k * r->s->max_threads * nb__part_stride(r->s->desc.d_model);
}
static nb_real* nb__rowbuf(const nb__run* r, int t) {
    return r->sc.rowbuf + (size_t)t * 2 * NB__PAD(r->s->desc.d_model);
}

/* y16 = bf16(N(x)) with the statistics into st, a row at a time: the float row only in the
   thread's row buffer (nb__h16). The same row kernel as nb__block_norm_fwd: the same bits. */
static void nb__block_norm_fwd16(nb__run* r, const nb__norm* m, unsigned short* y16,
                                 const nb_real* x, nb_real* st) {
    const int d = r->s->desc.d_model;
    const double t0 = nb__prof_begin(r->ctx);
    int row;
    NB__OMP(parallel for schedule(static) num_threads(nb_num_threads(r->ctx))
            if(r->n >= NB__PAR_MIN))
    for (row = 0; row < r->rows; row++) {
        const size_t o = (size_t)row * d;
        nb_real* t = nb__rowbuf(r, omp_get_thread_num());
        if (row + 1 < r->rows) nb__prefetch_row(x + o + d, d);
        nb__block_norm_fwd_row(r, m, t, x + o, st, row);
        nb__row_bf16(y16 + o, t, d);
    }
    nb__prof_end(r->ctx, NB_PROF_NORM, t0);
}

/* This thread's zeroed partials of slot k for the gradients of norm gm. */
static nb__part nb__slot_part(const nb__run* r, int k, int t, const nb__norm* gm) {
    return nb__partials(nb__slot(r, k), t, r->s->desc.d_model, gm->g != NULL, gm->b != NULL,
                        gm->a != NULL);
}
/* Add slot k's partials of `used` threads into the gradients gm, in thread order. */
static void nb__slot_reduce(const nb__run* r, int k, int used, const nb__norm* gm) {
    const int d = r->s->desc.d_model;
    const size_t stride = nb__part_stride(d);
    if (gm->g) nb__reduce_partials(gm->g, nb__slot(r, k), used, stride, d);
    if (gm->b) nb__reduce_partials(gm->b, nb__slot(r, k) + nb__part_boff(d), used, stride, d);
    if (gm->a)
        nb__reduce_partials(gm->a, nb__slot(r, k) + nb__part_aoff(d), used, stride,
                            nb__norm_kinds[r->s->desc.norm.type].alpha);
}

/* Thread t's zeroed partial sums of a branch scale's gradient (d values, slot 2), and their
   sum in thread order into g: per channel, or (a ReZero scalar) over every channel too. */
static nb_real* nb__scale_part(const nb__run* r, int t) {
    return nb__partials(nb__slot(r, 2), t, r->s->desc.d_model, 1, 0, 0).g;
}
static void nb__scale_reduce(const nb__run* r, int used, nb_real* g, int per_channel) {
    const int d = r->s->desc.d_model;
    const size_t stride = nb__part_stride(d);
    int t;
    if (per_channel) {
        nb__reduce_partials(g, nb__slot(r, 2), used, stride, d);
        return;
    }
    for (t = 0; t < used; t++) g[0] += nb__sum(nb__slot(r, 2) + (size_t)t * stride, d);
}

/* out = a x + b y over n values (y may be NULL for b = 0; out may alias x or y) */
static void nb__lin(const nb__run* r, nb_real* out, nb_real a, const nb_real* x, nb_real b,
                    const nb_real* y) {
    const long long n = (long long)r->n;
    long long i;
    (void)r;
    if (y) {
        NB__OMP(parallel for simd schedule(static) num_threads(nb_num_threads(r->ctx))
                if(n >= NB__PAR_MIN))
        for (i = 0; i < n; i++) out[i] = a * x[i] + b * y[i];
    } else {
        NB__OMP(parallel for simd schedule(static) num_threads(nb_num_threads(r->ctx))
                if(n >= NB__PAR_MIN))
        for (i = 0; i < n; i++) out[i] = a * x[i];
    }
}

/* dst = src over B*T*d values, on the team (a memcpy runs on one thread) */
static void nb__copy(const nb__run* r, nb_real* dst, const nb_real* src) {
    if (dst != src) nb__lin(r, dst, 1, src, 0, NULL);
}

/* The trace scope: sublayer k of layer l ("blocks.<l>.attn." or "...ffn."), or none (l < 0). */
static void nb__scope(const nb__run* r, int l, int k) {
    nb_ctx* ctx = r->ctx;
    if (!ctx || !ctx->trace) return;
    if (l < 0) ctx->trace_scope[0] = 0;
    else snprintf(ctx->trace_scope, sizeof ctx->trace_scope, "blocks.%d.%s.", l,
                  k ? "ffn" : "attn");
}
/* Trace a B*T x d tensor of the stack as "blocks.<l>.<sub>.<name>" for sublayer k of layer l,
   "blocks.<l>.<name>" for k < 0, "<name>" for l < 0. */
static void nb__trace_layer(const nb__run* r, int l, int k, const char* name, const nb_real* x) {
    char full[64];
    if (!r->ctx || !r->ctx->trace) return;
    if (l < 0) snprintf(full, sizeof full, "%s", name);
    else if (k < 0) snprintf(full, sizeof full, "blocks.%d.%s", l, name);
    else snprintf(full, sizeof full, "blocks.%d.%s.%s", l, k ? "ffn" : "attn", name);
    r->ctx->trace(r->ctx->trace_user, full, x, r->rows, r->s->desc.d_model);
}

/* The table of the value embeddings layer l mixes in: l for the first N layers, l - (L - N)
   for the last N, -1 between (its code's [ve0, ve1, ve2] + [None] * (L - 6) + [ve0, ve1, ve2]) */
static int nb__ve_table(const nb_stack* s, int l) {
    const int n = s->desc.residual.value_embeds, L = s->desc.n_layers;
    return l < n ? l : l >= L - n ? l - (L - n) : -1;
}

/* The value mix of layer l's attention: the value residual's or the value embeddings' (NULL
   when neither); g NULL in the forward. */
static const nb__vres* nb__vres_of(const nb__run* r, int l, const nb__layer_tensors* p,
                                   nb__layer_tensors* g, const nb__layer_mem* c, nb__vres* v) {
    const nb_stack* s = r->s;
    const int mode = s->desc.residual.value_residual, t = nb__ve_table(s, l);
    if (!mode && !s->desc.residual.value_embeds) return NULL;
    memset(v, 0, sizeof *v);
    v->vl = c->vl;
    v->dlam = g ? g->vres : NULL;
    if (s->desc.residual.value_embeds) { /* every layer mixes; the table's rows where it has one */
        const size_t tab = nb__mulz((size_t)r->rows, (size_t)s->layers[l].attn.desc.n_kv_heads *
                                                     (size_t)s->layers[l].attn.head_dim);
        v->mix = 1;
        v->l1 = p->vres[0];
        v->l2 = p->vres[1];
        v->v0 = t >= 0 ? s->value_embeds + (size_t)t * tab : NULL;
        v->dv0 = t >= 0 && g ? s->value_embeds_grad + (size_t)t * tab : NULL;
        return v;
    }
    v->mix = l > 0;
    v->l1 = mode == 2 && l > 0 ? p->vres[0] : (nb_real)0.5;
    v->l2 = mode == 2 && l > 0 ? p->vres[1] : (nb_real)0.5;
    v->v0 = v->v0_out = r->sc.v0;
    v->dv0 = r->sc.dv0;
    return v;
}

/* Where sublayer k of layer l keeps its input's bf16 copy (in its cache, nb__h16) and its
   incoming gradient's (dout, in the scratch: nb__one_layer_bwd), as it carves them; NULL
   outside BF16. The FFN's scratch is every layer's: c may be NULL for its dout's. */
static unsigned short* nb__sub_bf16(const nb__run* r, int l, int k, const nb__layer_mem* c,
                                    int grad) {
    if (k == 0) {
        const nb_attn_plan* pl = &r->s->layers[l].attn;
        nb__attn_mem m;
        nb__attn_carve(pl, r->B, r->T, pl->max_threads, c->acache, r->sc.sub, &m);
        return grad ? m.dout16 : m.x16;
    } else {
        nb__ffn_mem m;
        nb__ffn_carve(&r->s->ffn, r->B, r->T, c ? c->fcache : NULL, r->sc.sub, &m);
        return grad ? m.dout16 : m.x16;
    }
}

/* Sublayer k (0 attention, 1 FFN) of layer l: F(h) into out (B*T x d); h NULL: its bf16 copy is
   in the sublayer's cache (nb__h16). */
static nb_result nb__branch_fwd(nb__run* r, int l, int k, const nb__layer_tensors* p,
                                const nb__layer_mem* c, nb_real* out, const nb_real* h) {
    nb_result rc;
    nb__vres vbuf;
    nb__sub_call call = nb__sub_call_of(r->ctx, r->B, r->T, k ? c->fcache : c->acache, r->sc.sub);
    if (!h) call.opts = NB__X16_GIVEN; /* nb__h16: the input norm wrote the bf16 copy */
    nb__scope(r, l, k);
    if (k == 0) {
        call.vr = nb__vres_of(r, l, p, NULL, c, &vbuf);
        rc = nb__attn_fwd(&call, &r->s->layers[l].attn, &p->attn, out, h);
    } else {
        rc = nb__ffn_fwd(&call, &r->s->ffn, &p->ffn, out, h);
    }
    nb__scope(r, -1, 0);
    return rc;
}

/* Whether a sublayer's branch reads the sublayer's incoming gradient itself (no post or output
   norm, no scale on the branch: df = dout in nb__sub_backward) */
static int nb__branch_reads_dout(const nb_placement* place) {
    return !place->post_norm && !place->output_norm &&
           place->branch_scale == NB_BRANCH_SCALE_NONE && place->branch_mult == 1;
}

/* dh = J_F^T df (overwritten, or added when accumulate); df16: df's bf16 copy is in place
   (nb__sub_bf16) */
static nb_result nb__branch_bwd(nb__run* r, int l, int k, const nb__layer_tensors* p,
                                nb__layer_tensors* g, const nb__layer_mem* c, nb_real* dh,
                                const nb_real* df, const nb_real* h, int accumulate, int df16) {
    nb__vres vbuf;
    nb__sub_call call = nb__sub_call_of(r->ctx, r->B, r->T, k ? c->fcache : c->acache, r->sc.sub);
    call.opts = (accumulate ? NB__BWD_ACC_DX : 0) | (r->write_dw ? NB__BWD_WRITE_DW : 0) |
                (h ? 0 : NB__X16_GIVEN) | (df16 ? NB__DOUT16_GIVEN : 0);
    nb__trace_layer(r, l, k, "grad_out", df);
    if (k == 0) {
        call.vr = nb__vres_of(r, l, p, g, c, &vbuf);
        return nb__attn_bwd(&call, &r->s->layers[l].attn, &p->attn, &g->attn, dh, df, h);
    }
    return nb__ffn_bwd(&call, &r->s->ffn, &p->ffn, &g->ffn, dh, df, h);
}

static nb_result nb__finite(nb__run* r, const nb_real* x, size_t n, const char* what, int l) {
    size_t i;
    int bad = 0;
    if (!r->s->desc.run.check_finite) return NB_OK;
    for (i = 0; i < n && !bad; i++) bad = !nb__fin_real(x[i]);
    if (!bad) return NB_OK;
    if (l < 0) /* the stack's own input or output gradient: the caller's */
        return nb__fail(r->ctx, NB_ERR_NONFINITE, "non-finite value in %s (%s)", what,
                        nb__desc_name(&r->s->desc));
    return nb__fail(r->ctx, NB_ERR_NONFINITE, "non-finite value in %s of layer %d (%s)", what, l,
                    nb__desc_name(&r->s->desc));
}

/* Generic sublayer forward: x -> out, see the placement equations at nb_placement. What follows
   the branch (its output norm, the residual add, the post norm) is one pass over the rows. */
/* A sublayer's residual update of one row, sum = A r + B f (r the residual row, after its norm
   when it has one; f the branch row, after its output norm), chosen once per sublayer
   (nb__update_of) and called for each row of the fused pass: the plain or ReZero-scaled add,
   LayerScale's per-channel add, or nGPT's interpolation r + |a| (f - r). */
typedef struct nb__update {
    nb_real alpha, m, ic;        /* residual scale, branch multiplier, nGPT's a = ic lambda */
    const nb_real* bs;           /* the branch scale's parameters (NULL: none) */
    int d;
} nb__update;
typedef void (*nb__update_fn)(const nb__update* u, nb_real* sum, const nb_real* rr,
                              const nb_real* fr);

static void nb__update_add(const nb__update* u, nb_real* sum, const nb_real* rr,
                           const nb_real* fr) {
    const nb_real a = u->alpha, sc = (u->bs ? u->bs[0] : 1) * u->m;
    int j;
    NB__OMP(simd)
    for (j = 0; j < u->d; j++) sum[j] = a * rr[j] + sc * fr[j];
}
static void nb__update_channel(const nb__update* u, nb_real* sum, const nb_real* rr,
                               const nb_real* fr) {
    const nb_real a = u->alpha, m = u->m, *bs = u->bs;
    int j;
    NB__OMP(simd)
    for (j = 0; j < u->d; j++) sum[j] = a * rr[j] + m * bs[j] * fr[j];
}
static void nb__update_interp(const nb__update* u, nb_real* sum, const nb_real* rr,
                              const nb_real* fr) { /* nGPT: A + a (B - A), in its code's order */
    const nb_real ic = u->ic, *bs = u->bs;
    int j;
    NB__OMP(simd)
    for (j = 0; j < u->d; j++) sum[j] = rr[j] + NB__FABS(ic * bs[j]) * (fr[j] - rr[j]);
}
static nb__update_fn nb__update_of(const nb_placement* place) {
    return place->branch_scale == NB_BRANCH_SCALE_INTERP    ? nb__update_interp
           : place->branch_scale == NB_BRANCH_SCALE_CHANNEL ? nb__update_channel
                                                            : nb__update_add;
}

static nb_result nb__sub_forward(nb__run* r, int l, int k, const nb__layer_tensors* p,
                                 const nb__layer_mem* c, nb_real* out, const nb_real* x) {
    const nb_layer_desc* ld = &r->s->layers[l].desc;
    const nb_placement* place = k ? &ld->ffn : &ld->attn;
    const int n_in = k ? NB__FF_IN : NB__ATTN_IN, n_out = k ? NB__FF_OUT : NB__ATTN_OUT,
              n_post = k ? NB__FF_POST : NB__ATTN_POST, n_res = k ? NB__FF_RES : NB__ATTN_RES;
    const nb_real alpha = nb__topo_residual(r->s) ? place->residual_scale : 0; /* HC: B(u) */
    const nb_real *h = x, *res, *bs = p->bs[k];
    const int d = r->s->desc.d_model;
    const nb__update_fn update = nb__update_of(place);
    nb__update u;
    nb_real* f;
    nb_result rc;
    int row;
    if (nb__h16(r->s, place)) {
        unsigned short* const h16 = nb__sub_bf16(r, l, k, c, 0);
        if (r->ctx->trace) { /* the float h for the trace, then its bf16 copy: the same bits */
            rc = nb__block_norm_fwd(r, &p->n[n_in], r->sc.tmp[1], x, c->st[n_in]);
            if (rc != NB_OK) return rc;
            nb__trace_layer(r, l, k, "h", r->sc.tmp[1]);
            nb__to_bf16(r->ctx, h16, r->sc.tmp[1], r->rows, d, d);
        } else {
            nb__block_norm_fwd16(r, &p->n[n_in], h16, x, c->st[n_in]);
        }
        h = NULL;
    } else if (place->input_norm) {
        if ((rc = nb__block_norm_fwd(r, &p->n[n_in], c->h[k], x, c->st[n_in])) != NB_OK) return rc;
        if (place->input_scale != 1) nb__lin(r, c->h[k], place->input_scale, c->h[k], 0, NULL);
        h = c->h[k];
        nb__trace_layer(r, l, k, "h", h);
    }
    res = place->residual_from_norm ? h : x;
    /* the branch output before its scale is cached for the scale's gradient */
    f = place->output_norm ? c->f[k] : bs ? c->u[k] : r->sc.tmp[0];
    if ((rc = nb__branch_fwd(r, l, k, p, c, f, h)) != NB_OK) return rc;
    if ((rc = nb__finite(r, f, r->n, k ? "the FFN output" : "the attention output", l))) return rc;
    if (!place->output_norm && !place->post_norm && !bs && !place->residual_norm) {
        nb__lin(r, out, alpha, res, place->branch_mult, f);
        nb__trace_layer(r, l, k, "x_out", out);
        return NB_OK;
    }
    u.alpha = alpha; u.m = place->branch_mult; u.ic = nb__interp_c(r->s); u.bs = bs; u.d = d;
    /* output norm, branch scale, residual add and post norm in one pass over the rows */
    NB__OMP(parallel for schedule(static) num_threads(nb_num_threads(r->ctx))
            if(r->n >= NB__PAR_MIN))
    for (row = 0; row < r->rows; row++) {
        const size_t o = (size_t)row * d;
        const nb_real *fr = f + o, *rr = res + o;
        nb_real* sum = (place->post_norm ? c->s[k] : out) + o;
        if (row + 1 < r->rows) { /* this row's passes stay in L1: fetch the next meanwhile */
            nb__prefetch_row(fr + d, d);
            nb__prefetch_row(res + o + d, d);
        }
        if (place->residual_norm) {
            nb__block_norm_fwd_row(r, &p->n[n_res], c->r[k] + o, rr, c->st[n_res], row);
            rr = c->r[k] + o;
        }
        if (place->output_norm) {
            nb_real* t = bs ? c->u[k] + o : nb__rowbuf(r, omp_get_thread_num());
            nb__block_norm_fwd_row(r, &p->n[n_out], t, fr, c->st[n_out], row);
            fr = t;
        }
        update(&u, sum, rr, fr);
        if (place->post_norm)
            nb__block_norm_fwd_row(r, &p->n[n_post], out + o, sum, c->st[n_post], row);
    }
    if (place->output_norm && r->ctx->trace) { /* the fused pass kept N_out(f) per row only */
        nb_real* t = bs ? c->u[k] : r->sc.tmp[0];
        if (!bs)
            for (row = 0; row < r->rows; row++) /* the same stats again: the cache is unchanged */
                nb__block_norm_fwd_row(r, &p->n[n_out], t + (size_t)row * d, f + (size_t)row * d,
                                       c->st[n_out], row);
        nb__trace_layer(r, l, k, "out_normed", t);
    }
    if (place->residual_norm) nb__trace_layer(r, l, k, "res_normed", c->r[k]);
    if (place->post_norm) nb__trace_layer(r, l, k, "sum", c->s[k]);
    nb__trace_layer(r, l, k, "x_out", out);
    return NB_OK;
}

/* A row of the branch scale's backward (ReZero, LayerScale, branch_mult): d(lambda) += m ds u
   into pscale (u = the branch before its scale), the branch's gradient m lambda ds into t,
   returned; ds itself when nothing scales the branch. */
static const nb_real* nb__branch_scale_bwd_row(const nb__run* r, const nb_placement* place,
                                               const nb_real* bs, const nb_real* ds,
                                               const nb_real* u, nb_real* NB__RESTRICT pscale,
                                               nb_real* t) {
    const int d = r->s->desc.d_model;
    const nb_real m = place->branch_mult, sc = (bs ? bs[0] : 1) * m;
    int j;
    if (!bs && m == 1) return ds;
    if (bs) {
        NB__OMP(simd)
        for (j = 0; j < d; j++) pscale[j] += m * ds[j] * u[j];
    }
    if (place->branch_scale == NB_BRANCH_SCALE_CHANNEL) {
        NB__OMP(simd)
        for (j = 0; j < d; j++) t[j] = m * bs[j] * ds[j];
    } else {
        NB__OMP(simd)
        for (j = 0; j < d; j++) t[j] = sc * ds[j];
    }
    return t;
}

/* The residual update's backward for one row of the fused pass (ds: the gradient of its sum),
   chosen once per sublayer as the forward's update: writes the residual's gradient (through
   the residual norm, when one) into dres, adds the branch scale's gradient terms into pscale,
   and returns the branch's gradient (in t, or ds itself when unscaled). */
typedef struct nb__update_bwd_args {
    nb__run* r;
    const nb_placement* place;
    const nb__norm* res_norm;    /* the residual norm's tensors (residual_norm only) */
    const nb_real *bs, *u, *x, *res, *rn, *st_res; /* u: branch before scale; rn: N_res(x) */
    nb_real* dres;
    nb_real alpha, ic;
} nb__update_bwd_args;
typedef const nb_real* (*nb__update_bwd_fn)(const nb__update_bwd_args* a, int row, int th,
                                            const nb_real* ds, nb_real* pscale,
                                            const nb__part* pp_res, nb_real* t);

static const nb_real* nb__update_add_bwd(const nb__update_bwd_args* a, int row, int th,
                                         const nb_real* ds, nb_real* pscale,
                                         const nb__part* pp_res, nb_real* t) {
    const int d = a->r->s->desc.d_model;
    const size_t o = (size_t)row * d;
    const nb_real alpha = a->alpha;
    int j;
    if (a->place->residual_norm) { /* dres = J_res^T (alpha ds) */
        nb_real* dr = nb__rowbuf(a->r, th) + NB__PAD(d);
        NB__OMP(simd)
        for (j = 0; j < d; j++) dr[j] = alpha * ds[j];
        nb__block_norm_bwd_row(a->r, a->res_norm, a->dres + o, dr, a->x + o, a->st_res, row,
                               NULL, pp_res);
    } else {
        nb_real* dres = a->dres + o;
        NB__OMP(simd)
        for (j = 0; j < d; j++) dres[j] = alpha * ds[j];
    }
    return nb__branch_scale_bwd_row(a->r, a->place, a->bs, ds, a->bs ? a->u + o : NULL, pscale,
                                    t);
}

/* s = r + |a| (u - r), a = c lambda: d(lambda) += c sign(a) ds (u - r); the branch's gradient
   is |a| ds, the residual's (1 - |a|) ds */
static const nb_real* nb__update_interp_bwd(const nb__update_bwd_args* a, int row, int th,
                                            const nb_real* ds, nb_real* NB__RESTRICT pscale,
                                            const nb__part* pp_res, nb_real* t) {
    const int d = a->r->s->desc.d_model, rn = a->place->residual_norm;
    const size_t o = (size_t)row * d;
    const nb_real ic = a->ic, *bs = a->bs, *u = a->u + o, *rr = rn ? a->rn + o : a->res + o;
    nb_real* dr = rn ? nb__rowbuf(a->r, th) + NB__PAD(d) : a->dres + o;
    int j;
    NB__OMP(simd)
    for (j = 0; j < d; j++) {
        const nb_real s = ic * bs[j], dsj = ds[j], aa = NB__FABS(s);
        pscale[j] += (s < 0 ? -ic : ic) * dsj * (u[j] - rr[j]);
        dr[j] = (1 - aa) * dsj;
        t[j] = aa * dsj;
    }
    if (rn)
        nb__block_norm_bwd_row(a->r, a->res_norm, a->dres + o, dr, a->x + o, a->st_res, row, NULL,
                               pp_res);
    return t;
}

/* Generic sublayer backward: dout -> dx (overwritten; dx != dout).
   ds = J_post^T dout; df = J_out^T (lambda ds), dlambda += ds u (u = the branch output before
   its scale; a ReZero scalar sums over every element); dh = J_F^T df;
   residual from norm: dx = J_in^T (dh + alpha ds); else dx = alpha ds + J_in^T dh.
   ds is only needed per row: it lives in a row buffer or in tmp[0] (when it is also df). */
static nb_result nb__sub_backward(nb__run* r, int l, int k, const nb__layer_tensors* p,
                                  nb__layer_tensors* g, const nb__layer_mem* c, nb_real* dx,
                                  const nb_real* dout, const nb_real* x) {
    const nb_layer_desc* ld = &r->s->layers[l].desc;
    const nb_placement* place = k ? &ld->ffn : &ld->attn;
    const int n_in = k ? NB__FF_IN : NB__ATTN_IN, n_out = k ? NB__FF_OUT : NB__ATTN_OUT,
              n_post = k ? NB__FF_POST : NB__ATTN_POST, n_res = k ? NB__FF_RES : NB__ATTN_RES;
    const nb_real alpha = nb__topo_residual(r->s) ? place->residual_scale : 0;
    const nb_real *df = dout, *h = place->input_norm ? c->h[k] : x, *bs = p->bs[k];
    const nb_real *res = place->residual_from_norm ? h : x;
    const nb_real m = place->branch_mult;
    const int per_channel = place->branch_scale == NB_BRANCH_SCALE_CHANNEL;
    const int interp = place->branch_scale == NB_BRANCH_SCALE_INTERP;
    const nb__update_bwd_fn update_bwd = interp ? nb__update_interp_bwd : nb__update_add_bwd;
    nb_real *dh = r->sc.tmp[2], *dres = place->residual_from_norm ? dh : dx;
    /* the branch's gradient is dout itself: no post or output norm, no scale */
    const int plain = nb__branch_reads_dout(place) && !place->residual_norm;
    /* Pre-Norm form: the input norm's backward adds alpha dout itself (no copy of dout) */
    const int direct = plain && place->input_norm && !place->residual_from_norm;
    /* the bf16 hand-off (nb__run): taken here, so that no nested call sees it */
    unsigned short* const dx16 = r->dx16;
    const nb_real* const given16 = r->given16;
    int df16;
    nb_result rc;
    r->dx16 = NULL;
    r->given16 = NULL;
    if (plain) {
        if (!direct) nb__lin(r, dres, alpha, dout, 0, NULL);
    } else { /* the post norm's, scale's and output norm's backward, dres = alpha ds: one pass */
        const int d = r->s->desc.d_model;
        nb__update_bwd_args ua;
        int used = 1;
        ua.r = r; ua.place = place; ua.res_norm = &p->n[n_res]; ua.bs = bs; ua.u = c->u[k];
        ua.x = x; ua.res = res; ua.rn = c->r[k]; ua.st_res = c->st[n_res]; ua.dres = dres;
        ua.alpha = alpha; ua.ic = nb__interp_c(r->s);
        /* only a residual norm: the branch's gradient is dout itself */
        df = place->output_norm ? r->sc.tmp[1] : place->post_norm || bs || m != 1 ? r->sc.tmp[0]
                                                                                  : dout;
        NB__OMP(parallel num_threads(nb_num_threads(r->ctx)) if(r->n >= NB__PAR_MIN))
        {
            int lo, hi, row;
            const int th = nb__team_rows(r->rows, &used, &lo, &hi);
            const nb__part pp_post = nb__slot_part(r, 0, th, &g->n[n_post]);
            const nb__part pp_out = nb__slot_part(r, 1, th, &g->n[n_out]);
            const nb__part pp_res = nb__slot_part(r, 3, th, &g->n[n_res]);
            nb_real* NB__RESTRICT pscale = bs ? nb__scale_part(r, th) : NULL;
            for (row = lo; row < hi; row++) {
                const size_t o = (size_t)row * d;
                const nb_real* ds = dout + o;
                if (row + 1 < hi) {
                    nb__prefetch_row(ds + d, d);
                    if (place->post_norm) nb__prefetch_row(c->s[k] + o + d, d);
                    if (place->output_norm) nb__prefetch_row(c->f[k] + o + d, d);
                }
                if (place->post_norm) {
                    nb_real* t = place->output_norm || bs ? nb__rowbuf(r, th) : r->sc.tmp[0] + o;
                    nb__block_norm_bwd_row(r, &p->n[n_post], t, ds, c->s[k] + o, c->st[n_post], row,
                                           NULL, &pp_post);
                    ds = t;
                }
                ds = update_bwd(&ua, row, th, ds, pscale, &pp_res,
                                place->output_norm ? nb__rowbuf(r, th) : r->sc.tmp[0] + o);
                if (place->output_norm)
                    nb__block_norm_bwd_row(r, &p->n[n_out], r->sc.tmp[1] + o, ds, c->f[k] + o,
                                           c->st[n_out], row, NULL, &pp_out);
            }
        }
        if (place->post_norm) nb__slot_reduce(r, 0, used, &g->n[n_post]);
        if (place->output_norm) nb__slot_reduce(r, 1, used, &g->n[n_out]);
        if (place->residual_norm) nb__slot_reduce(r, 3, used, &g->n[n_res]);
        if (bs) nb__scale_reduce(r, used, g->bs[k], per_channel || interp);
    }
    df16 = given16 && df == given16; /* the branch reads dout itself, whose copy is in place */
    /* h = c N(x): the norm's backward takes c dh; it finishes dx, and writes dx's bf16 copy
       where the caller asked for one (dx16) */
    if (place->residual_from_norm) {
        if ((rc = nb__branch_bwd(r, l, k, p, g, c, dh, df, h, 1, df16)) != NB_OK) return rc;
        if (place->input_scale != 1) nb__lin(r, dh, place->input_scale, dh, 0, NULL);
        rc = nb__block_norm_bwd_add(r, &p->n[n_in], &g->n[n_in], dx, dh, x, c->st[n_in], NULL, 1,
                                    dx16);
    } else if (!place->input_norm) {
        return nb__branch_bwd(r, l, k, p, g, c, dx, df, x, 1, df16);
    } else {
        if ((rc = nb__branch_bwd(r, l, k, p, g, c, dh, df, h, 0, df16)) != NB_OK) return rc;
        if (place->input_scale != 1) nb__lin(r, dh, place->input_scale, dh, 0, NULL);
        rc = nb__block_norm_bwd_add(r, &p->n[n_in], &g->n[n_in], dx, dh, x, c->st[n_in],
                                    direct ? dout : dx, direct ? alpha : 1, dx16);
    }
    if (!rc && dx16) r->given16 = dx;
    return rc;
}

/* ---- SiameseNorm: its two-stream sublayers ---- */

static nb_real nb__siamese_c(const nb_stack* s, int l) {
    switch (s->desc.siamese.paper_scale) {
    case 1: return (nb_real)sqrt(l + 1.0);
    case 2: return 1;
    default: return (nb_real)sqrt(2.0 * (l + 1));
    }
}

/* SiameseNorm hybrid-pre (the official code's form):
   u_a = x*gamma + N_ay(y); A = MHA(u_a); x1 = x + A/c; y1 = y + A;
   n = N_f(x1); u_f = N_in(n + N_fy(y1)); F = FFN(u_f); y' = y1 + F; x' = n + F/c
   (u_f = n + N_fy(y1) in the ablation without the fusion norm)
   The adds and norms between the two sublayers run in one pass over the rows each (a row stays
   in L1 through its adds and norms): 16 streams of B*T*d values instead of 26. */
static nb_result nb__siamese_hp_layer_fwd(nb__run* r, int l, const nb__layer_tensors* p,
                                          const nb__layer_mem* c, nb_real* const out[],
                                          const nb_real* const in[]) {
    nb_real *xo = out[0], *yo = out[1];
    const nb_real *x = in[0], *y = in[1];
    const int d = r->s->desc.d_model, fuse_norm = !r->s->desc.siamese.no_fusion_norm;
    const nb_real ic = 1 / nb__siamese_c(r->s, l);
    const nb_real* uf = fuse_norm ? c->uf : c->sf;
    nb_real* A = r->sc.tmp[0];
    nb_result rc;
    int row;
    NB__OMP(parallel for schedule(static) num_threads(nb_num_threads(r->ctx))
            if(r->n >= NB__PAR_MIN))
    for (row = 0; row < r->rows; row++) {
        const size_t o = (size_t)row * d;
        nb_real* t = nb__rowbuf(r, omp_get_thread_num());
        int j;
        if (row + 1 < r->rows) { nb__prefetch_row(y + o + d, d); nb__prefetch_row(x + o + d, d); }
        nb__block_norm_fwd_row(r, &p->n[NB__ATTN_Y], t, y + o, c->st[NB__ATTN_Y], row);
        NB__OMP(simd)
        for (j = 0; j < d; j++) c->ua[o + j] = x[o + j] * p->gamma[j] + t[j];
    }
    if ((rc = nb__branch_fwd(r, l, 0, p, c, A, c->ua))) return rc;
    if ((rc = nb__finite(r, A, r->n, "the attention output", l))) return rc;
    NB__OMP(parallel for schedule(static) num_threads(nb_num_threads(r->ctx))
            if(r->n >= NB__PAR_MIN))
    for (row = 0; row < r->rows; row++) {
        const size_t o = (size_t)row * d;
        nb_real* t = nb__rowbuf(r, omp_get_thread_num());
        int j;
        if (row + 1 < r->rows) {
            nb__prefetch_row(x + o + d, d); nb__prefetch_row(y + o + d, d);
            nb__prefetch_row(A + o + d, d);
        }
        NB__OMP(simd)
        for (j = 0; j < d; j++) {
            c->x1[o + j] = x[o + j] + ic * A[o + j];
            c->y1[o + j] = y[o + j] + A[o + j];
        }
        /* n */
        nb__block_norm_fwd_row(r, &p->n[NB__FF_IN], xo + o, c->x1 + o, c->st[NB__FF_IN], row);
        nb__block_norm_fwd_row(r, &p->n[NB__FF_Y], t, c->y1 + o, c->st[NB__FF_Y], row);
        NB__OMP(simd)
        for (j = 0; j < d; j++) c->sf[o + j] = xo[o + j] + t[j];
        if (fuse_norm)
            nb__block_norm_fwd_row(r, &p->n[NB__FF_INPUT], c->uf + o, c->sf + o,
                                   c->st[NB__FF_INPUT], row);
    }
    if ((rc = nb__branch_fwd(r, l, 1, p, c, A, uf))) return rc;
    if ((rc = nb__finite(r, A, r->n, "the FFN output", l))) return rc;
    nb__lin(r, yo, 1, c->y1, 1, A);
    nb__lin(r, xo, 1, xo, ic, A);
    return NB_OK;
}

/* dF = dx'/c + dy'; du_f = J_FFN^T dF; ds = J_in^T du_f (du_f without the fusion norm);
   dn = dx' + ds;
   dy1 = dy' + J_fy^T ds; dx1 = J_f^T dn; dA = dx1/c + dy1; du_a = J_MHA^T dA;
   dx = dx1 + gamma du_a; dgamma += sum x du_a; dy = dy1 + J_ay^T du_a
   Between the sublayers, one pass over the rows each, as in the forward; the gain and gamma
   gradients are per-thread partials reduced in thread order. dx may be dx', dy may be dy'. */
static nb_result nb__siamese_hp_layer_bwd(nb__run* r, int l, const nb__layer_tensors* p,
                                          nb__layer_tensors* g, const nb__layer_mem* c,
                                          nb_real* const din[], const nb_real* const dout[],
                                          const nb_real* const in[]) {
    nb_real *dx = din[0], *dy = din[1];
    const nb_real *dxo = dout[0], *dyo = dout[1], *x = in[0], *y = in[1];
    const int d = r->s->desc.d_model, fuse_norm = !r->s->desc.siamese.no_fusion_norm;
    const nb_real ic = 1 / nb__siamese_c(r->s, l);
    nb_real** t = r->sc.tmp;
    const nb__norm gamma = {g->gamma, NULL, NULL};
    nb_result rc;
    int used = 1;
    nb__lin(r, t[0], ic, dxo, 1, dyo);                                              /* dF */
    if ((rc = nb__branch_bwd(r, l, 1, p, g, c, t[1], t[0], fuse_norm ? c->uf : c->sf, 0, 0)))
        return rc;                                                                  /* du_f */
    NB__OMP(parallel num_threads(nb_num_threads(r->ctx)) if(r->n >= NB__PAR_MIN))
    {
        int lo, hi, row, j;
        const int th = nb__team_rows(r->rows, &used, &lo, &hi);
        const nb__part pp_in = nb__slot_part(r, 0, th, &g->n[NB__FF_INPUT]);
        const nb__part pp_y = nb__slot_part(r, 1, th, &g->n[NB__FF_Y]);
        const nb__part pp_f = nb__slot_part(r, 2, th, &g->n[NB__FF_IN]);
        nb_real *dsbuf = nb__rowbuf(r, th), *dn = dsbuf + NB__PAD(d);
        for (row = lo; row < hi; row++) {
            const size_t o = (size_t)row * d;
            const nb_real* ds = fuse_norm ? dsbuf : t[1] + o;
            if (row + 1 < hi) {
                nb__prefetch_row(t[1] + o + d, d); nb__prefetch_row(c->sf + o + d, d);
                nb__prefetch_row(c->y1 + o + d, d); nb__prefetch_row(c->x1 + o + d, d);
            }
            if (fuse_norm)
                nb__block_norm_bwd_row(r, &p->n[NB__FF_INPUT], dsbuf, t[1] + o, c->sf + o,
                                       c->st[NB__FF_INPUT], row, NULL, &pp_in);
            NB__OMP(simd)
            for (j = 0; j < d; j++) dn[j] = dxo[o + j] + ds[j];
            nb__block_norm_bwd_row(r, &p->n[NB__FF_Y], dy + o, ds, c->y1 + o, c->st[NB__FF_Y], row,
                                   dyo + o, &pp_y); /* dy1 */
            nb__block_norm_bwd_row(r, &p->n[NB__FF_IN], dx + o, dn, c->x1 + o, c->st[NB__FF_IN],
                                   row, NULL, &pp_f); /* dx1 */
            NB__OMP(simd)
            for (j = 0; j < d; j++) t[0][o + j] = ic * dx[o + j] + dy[o + j];     /* dA */
        }
    }
    nb__slot_reduce(r, 0, used, &g->n[NB__FF_INPUT]);
    nb__slot_reduce(r, 1, used, &g->n[NB__FF_Y]);
    nb__slot_reduce(r, 2, used, &g->n[NB__FF_IN]);
    if ((rc = nb__branch_bwd(r, l, 0, p, g, c, t[1], t[0], c->ua, 0, 0))) return rc; /* du_a */
    NB__OMP(parallel num_threads(nb_num_threads(r->ctx)) if(r->n >= NB__PAR_MIN))
    {
        int lo, hi, row, j;
        const int th = nb__team_rows(r->rows, &used, &lo, &hi);
        const nb__part pp_ay = nb__slot_part(r, 0, th, &g->n[NB__ATTN_Y]);
        nb_real* NB__RESTRICT pgam = nb__slot_part(r, 1, th, &gamma).g;
        for (row = lo; row < hi; row++) {
            const size_t o = (size_t)row * d;
            const nb_real* du = t[1] + o;
            if (row + 1 < hi) {
                nb__prefetch_row(du + d, d); nb__prefetch_row(x + o + d, d);
                nb__prefetch_row(y + o + d, d);
            }
            NB__OMP(simd)
            for (j = 0; j < d; j++) {
                pgam[j] += x[o + j] * du[j];
                dx[o + j] += p->gamma[j] * du[j];
            }
            nb__block_norm_bwd_row(r, &p->n[NB__ATTN_Y], dy + o, du, y + o, c->st[NB__ATTN_Y], row,
                                   dy + o, &pp_ay);
        }
    }
    nb__slot_reduce(r, 0, used, &g->n[NB__ATTN_Y]);
    nb__slot_reduce(r, 1, used, &gamma);
    return NB_OK;
}

/* SiameseNorm post-pre (the DeiT code's form), sublayer k:
   u = N_x(x); w = u + N_y(y); v = N_in(w); z = F(v); x' = u + z/c; y' = y + z */
static nb_result nb__siamese_pp_forward(nb__run* r, int l, int k, const nb__layer_tensors* p,
                                        const nb__layer_mem* c, nb_real* const out[],
                                        const nb_real* const in[]) {
    nb_real *xo = out[0], *yo = out[1];
    const nb_real *x = in[0], *y = in[1];
    const int nx = k ? NB__FF_IN : NB__ATTN_IN, ny = k ? NB__FF_Y : NB__ATTN_Y,
              n_input = k ? NB__FF_INPUT : NB__ATTN_INPUT;
    const nb_real ic = 1 / nb__siamese_c(r->s, l);
    nb_real* z = r->sc.tmp[0];
    nb_result rc;
    if ((rc = nb__block_norm_fwd(r, &p->n[nx], xo, x, c->st[nx]))) return rc; /* u, kept in xo */
    if ((rc = nb__block_norm_fwd(r, &p->n[ny], c->w[k], y, c->st[ny]))) return rc;
    nb__lin(r, c->w[k], 1, c->w[k], 1, xo);
    if ((rc = nb__block_norm_fwd(r, &p->n[n_input], c->v[k], c->w[k], c->st[n_input]))) return rc;
    if ((rc = nb__branch_fwd(r, l, k, p, c, z, c->v[k]))) return rc;
    if ((rc = nb__finite(r, z, r->n, k ? "the FFN output" : "the attention output", l))) return rc;
    nb__lin(r, xo, 1, xo, ic, z);
    nb__lin(r, yo, 1, y, 1, z);
    return NB_OK;
}

/* dz = dx'/c + dy'; dv = J_F^T dz; dw = J_in^T dv; du = dx' + dw;
   dx = J_x^T du; dy = dy' + J_y^T dw */
static nb_result nb__siamese_pp_backward(nb__run* r, int l, int k, const nb__layer_tensors* p,
                                         nb__layer_tensors* g, const nb__layer_mem* c,
                                         nb_real* const din[], const nb_real* const dout[],
                                         const nb_real* const in[]) {
    nb_real *dx = din[0], *dy = din[1];
    const nb_real *dxo = dout[0], *dyo = dout[1], *x = in[0], *y = in[1];
    const int nx = k ? NB__FF_IN : NB__ATTN_IN, ny = k ? NB__FF_Y : NB__ATTN_Y,
              n_input = k ? NB__FF_INPUT : NB__ATTN_INPUT;
    const nb_real ic = 1 / nb__siamese_c(r->s, l);
    nb_real** t = r->sc.tmp;
    nb_result rc;
    nb__lin(r, t[0], ic, dxo, 1, dyo);
    if ((rc = nb__branch_bwd(r, l, k, p, g, c, t[1], t[0], c->v[k], 0, 0))) return rc;
    if ((rc = nb__block_norm_bwd(r, &p->n[n_input], &g->n[n_input], t[2], t[1], c->w[k],
                                 c->st[n_input], 0))) return rc;
    nb__lin(r, t[3], 1, dxo, 1, t[2]);
    if ((rc = nb__block_norm_bwd(r, &p->n[nx], &g->n[nx], dx, t[3], x, c->st[nx], 0))) return rc;
    /* dy may be dyo */
    return nb__block_norm_bwd_add(r, &p->n[ny], &g->n[ny], dy, t[2], y, c->st[ny], dyo, 1, NULL);
}

/* ---- hyper-connections (nb_hyper) ---- */

#define NB__HC_EPS ((nb_real)1e-6) /* mHC's code: its RMS, pre's floor, Sinkhorn's sums */
#define NB__NS NB_HYPER_MAX_STREAMS

/* logistic sigmoid with the argument clamped where it is 0 or 1 to nb_real precision (exp
   must not overflow: -ffinite-math-only builds include this header) */
static nb_real nb__sigm(nb_real z) { return nb__sigmoid(z < -80 ? -80 : z > 80 ? 80 : z); }

/* Sinkhorn-Knopp of mHC's code on one token: comb = softmax of each row j of the logits C
   (j: input stream, k: output stream) + eps, columns normalized, then iters-1 times rows
   then columns, each divided by its sum + eps. tape (NULL: not kept) gets the softmax and,
   per normalization, its result and sums, for nb__sinkhorn_bwd. */
static void nb__sinkhorn(nb_real* M, const nb_real* C, int n, int iters, nb_real* tape) {
    int j, k, t;
    for (j = 0; j < n; j++) {
        nb_real mx = C[j * n], sum = 0;
        for (k = 1; k < n; k++) mx = C[j * n + k] > mx ? C[j * n + k] : mx;
        for (k = 0; k < n; k++) sum += (M[j * n + k] = NB__EXP(C[j * n + k] - mx));
        for (k = 0; k < n; k++) M[j * n + k] /= sum;
    }
    if (tape) { memcpy(tape, M, (size_t)n * n * sizeof *M); tape += n * n; }
    for (j = 0; j < n * n; j++) M[j] += NB__HC_EPS;
    for (t = 0; t < 2 * iters - 1; t++) {
        nb_real sums[NB__NS], inv[NB__NS];
        if (t % 2 == 0) { /* columns, then (rows, columns) iters-1 times */
            for (k = 0; k < n; k++) sums[k] = M[k];
            for (j = 1; j < n; j++)
                for (k = 0; k < n; k++) sums[k] += M[j * n + k];
            for (k = 0; k < n; k++) inv[k] = 1 / (sums[k] + NB__HC_EPS); /* n divisions */
            for (j = 0; j < n; j++)
                for (k = 0; k < n; k++) M[j * n + k] *= inv[k];
        } else {
            for (j = 0; j < n; j++) {
                nb_real sum = 0;
                for (k = 0; k < n; k++) sum += M[j * n + k];
                sums[j] = sum;
                inv[j] = 1 / (sum + NB__HC_EPS);
                for (k = 0; k < n; k++) M[j * n + k] *= inv[j];
            }
        }
        if (tape) { /* the result and 1 / (sum + eps) */
            memcpy(tape, M, (size_t)n * n * sizeof *M);
            memcpy(tape + n * n, inv, (size_t)n * sizeof *M);
            tape += n * n + n;
        }
    }
}

/* Back through every iteration: Y = X / s, s = sum X + eps gives dX = (dY - sum dY Y) / s;
   the softmax's dC = P (dP - sum_k dP P). g: d(comb), overwritten with dC. */
static void nb__sinkhorn_bwd(nb_real* g, int n, int iters, const nb_real* tape) {
    int j, k, t;
    for (t = 2 * iters - 2; t >= 0; t--) {
        const nb_real* Y = tape + n * n + (size_t)t * (n * n + n);
        const nb_real* inv = Y + n * n;
        if (t % 2 == 0) {
            nb_real dots[NB__NS];
            for (k = 0; k < n; k++) dots[k] = g[k] * Y[k];
            for (j = 1; j < n; j++)
                for (k = 0; k < n; k++) dots[k] += g[j * n + k] * Y[j * n + k];
            for (j = 0; j < n; j++)
                for (k = 0; k < n; k++) g[j * n + k] = (g[j * n + k] - dots[k]) * inv[k];
        } else {
            for (j = 0; j < n; j++) {
                nb_real dot = 0;
                for (k = 0; k < n; k++) dot += g[j * n + k] * Y[j * n + k];
                for (k = 0; k < n; k++) g[j * n + k] = (g[j * n + k] - dot) * inv[j];
            }
        }
    }
    for (j = 0; j < n; j++) {
        nb_real dot = 0;
        for (k = 0; k < n; k++) dot += g[j * n + k] * tape[j * n + k];
        for (k = 0; k < n; k++) g[j * n + k] = tape[j * n + k] * (g[j * n + k] - dot);
    }
}

/* mHC-lite: the n! permutations of 0..n-1 in lexicographic order (itertools.permutations),
   pi_r(j) at perm[r * n + j] */
#define NB__HC_LOGITS 120 /* comb's logits of a token at most: 5! (mHC-lite), >= NB__NS^2 */
static void nb__perms(unsigned char* perm, int n) {
    unsigned char p[NB_HYPER_LITE_MAX_STREAMS];
    int r, i, k;
    for (i = 0; i < n; i++) p[i] = (unsigned char)i;
    for (r = 0; r < nb__fact(n); r++) {
        memcpy(perm + (size_t)r * n, p, (size_t)n);
        for (i = n - 2; i >= 0 && p[i] > p[i + 1]; i--) {} /* the next one: std::next_permutation */
        if (i < 0) break;
        for (k = n - 1; p[k] < p[i]; k--) {}
        { const unsigned char t = p[i]; p[i] = p[k]; p[k] = t; }
        for (k = n - 1, i++; i < k; i++, k--) {
            const unsigned char t = p[i];
            p[i] = p[k];
            p[k] = t;
        }
    }
}

/* mHC-lite's comb of one token: a = softmax of the n! logits C (into A when not NULL),
   comb[j][k] = sum_r a_r [k = pi_r(j)]. Each a_r lands once in every row and every column, so
   all sums are sum_r a_r = 1 up to rounding. */
static void nb__birkhoff(nb_real* M, nb_real* A, const nb_real* C, int n,
                         const unsigned char* perm) {
    const int count = nb__fact(n);
    nb_real a[NB__HC_LOGITS], mx = C[0], sum = 0;
    int r, j;
    for (r = 1; r < count; r++) mx = C[r] > mx ? C[r] : mx;
    for (r = 0; r < count; r++) sum += (a[r] = NB__EXP(C[r] - mx));
    for (j = 0; j < n * n; j++) M[j] = 0;
    for (r = 0; r < count; r++) {
        a[r] /= sum;
        for (j = 0; j < n; j++) M[j * n + perm[(size_t)r * n + j]] += a[r];
    }
    if (A) memcpy(A, a, (size_t)count * sizeof *a);
}

/* Its backward: g holds d(comb) (n x n) and gets dC (n! logits): da_r = sum_j
   dcomb[j][pi_r(j)], dC_r = a_r (da_r - sum_s a_s da_s) (the softmax's). */
static void nb__birkhoff_bwd(nb_real* g, const nb_real* C, int n, const unsigned char* perm) {
    const int count = nb__fact(n);
    nb_real G[NB__NS * NB__NS], M[NB__NS * NB__NS], a[NB__HC_LOGITS], dot = 0;
    int r, j;
    memcpy(G, g, (size_t)n * n * sizeof *g); /* dC overwrites d(comb) as it goes */
    nb__birkhoff(M, a, C, n, perm);
    for (r = 0; r < count; r++) {
        nb_real da = 0;
        for (j = 0; j < n; j++) da += G[j * n + perm[(size_t)r * n + j]];
        g[r] = da;
        dot += a[r] * da;
    }
    for (r = 0; r < count; r++) g[r] = a[r] * (g[r] - dot);
}

/* the group of column c of a map row: 0 pre, 1 post, 2 comb */
static int nb__hc_group(int c, int n) { return c < n ? 0 : c < 2 * n ? 1 : 2; }

static void nb__trace_cols(const nb__run* r, int l, int k, const char* name, const nb_real* x,
                           int cols) {
    char full[64];
    if (!r->ctx || !r->ctx->trace) return;
    if (l < 0) snprintf(full, sizeof full, "%s", name);
    else snprintf(full, sizeof full, "blocks.%d.%s.%s", l, k ? "ffn" : "attn", name);
    r->ctx->trace(r->ctx->trace_user, full, x, r->rows, cols);
}

/* mHC/IHC maps of every row; the head (head = 1) has pre alone (w_i). Dynamic: r = 1/rms of
   the row's n*d values, xn = r xf in hx (rows x nd, token-major), mix = xn fn^T. */
static nb_result nb__hcm_fwd(nb__run* r, const nb__hc* p, const nb__hc_mem* h,
                             const nb_real* const X[], int head) {
    const nb_stack* s = r->s;
    const int n = s->streams, d = s->desc.d_model, nd = n * d, W = head ? n : nb__hc_maps(s),
              m = head ? n : nb__hc_m(s), kind = head ? NB_HYPER_NONE : (int)s->desc.hyper.kind;
    unsigned char perm[NB__HC_LOGITS * NB_HYPER_LITE_MAX_STREAMS];
    int row;
    nb_result rc;
    if (kind == NB_HYPER_MHC_LITE) nb__perms(perm, n);
    if (p->fn) {
        NB__OMP(parallel for schedule(static) num_threads(nb_num_threads(r->ctx))
                if(r->n * n >= NB__PAR_MIN))
        for (row = 0; row < r->rows; row++) {
            nb_real* xn = r->sc.hx + (size_t)row * nd;
            double ss = 0;
            nb_real rr;
            int i, j;
            for (i = 0; i < n; i++)
                for (j = 0; j < d; j++) {
                    const nb_real v = X[i][(size_t)row * d + j];
                    ss += (double)v * v;
                }
            rr = (nb_real)(1 / sqrt(ss / nd + (double)NB__HC_EPS));
            h->r[row] = rr;
            for (i = 0; i < n; i++)
                for (j = 0; j < d; j++) xn[i * d + j] = X[i][(size_t)row * d + j] * rr;
        }
        if ((rc = nb_gemm(r->ctx, 0, 1, r->rows, m, nd, 1, r->sc.hx, nd, p->fn, nd, 0, h->mix, m)))
            return rc;
    }
    NB__OMP(parallel for schedule(static) num_threads(nb_num_threads(r->ctx))
            if(r->rows * W >= NB__PAR_MIN))
    for (row = 0; row < r->rows; row++) {
        nb_real* mp = h->maps + (size_t)row * W;
        const nb_real* mix = p->fn ? h->mix + (size_t)row * m : NULL;
        nb_real C[NB__HC_LOGITS];
        int c;
        for (c = 0; c < m; c++) {
            const int grp = nb__hc_group(c, n);
            const nb_real z = (mix ? p->scale[grp] * mix[c] : 0) + p->base[c];
            if (grp == 0) mp[c] = nb__sigm(z) + NB__HC_EPS;
            else if (grp == 1) mp[c] = 2 * nb__sigm(z);
            else C[c - 2 * n] = z;
        }
        if (kind == NB_HYPER_MHC) nb__sinkhorn(mp + 2 * n, C, n, s->desc.hyper.sinkhorn, NULL);
        else if (kind == NB_HYPER_MHC_LITE) nb__birkhoff(mp + 2 * n, NULL, C, n, perm);
        else if (!head)
            for (c = 0; c < n * n; c++) mp[2 * n + c] = (nb_real)(c % (n + 1) == 0); /* I */
    }
    return NB_OK;
}

/* HC maps: hbar_i = N(x_i) in hx (stream i at i*rows*d), stats in hst; per stream its n+1
   alpha and 1 beta projections in mix (row: stream i at i*(n+2)). */
static nb_result nb__hch_norm_proj(nb__run* r, const nb__hc* p, nb_real* mix,
                                   const nb_real* const X[]) {
    const int n = r->s->streams, d = r->s->desc.d_model, w = n * (n + 2);
    const size_t st = (size_t)r->rows * nb__norm_kinds[r->s->desc.norm.type].stats;
    nb_result rc;
    int i;
    for (i = 0; i < n; i++) {
        nb_real* hb = r->sc.hx + (size_t)i * r->n;
        if ((rc = nb__block_norm_fwd(r, &p->n, hb, X[i], r->sc.hst + i * st))) return rc;
        if (!mix) continue;
        if ((rc = nb_gemm(r->ctx, 0, 0, r->rows, n + 1, d, 1, hb, d, p->fn, n + 1, 0,
                          mix + i * (n + 2), w)))
            return rc;
        if ((rc = nb_gemm(r->ctx, 0, 0, r->rows, 1, d, 1, hb, d, p->fn2, 1, 0,
                          mix + i * (n + 2) + n + 1, w)))
            return rc;
    }
    return NB_OK;
}

static nb_result nb__hch_fwd(nb__run* r, const nb__hc* p, const nb__hc_mem* h,
                             const nb_real* const X[]) {
    const int n = r->s->streams, W = nb__hc_maps(r->s);
    nb_result rc;
    int row;
    if (p->fn && (rc = nb__hch_norm_proj(r, p, h->mix, X))) return rc;
    NB__OMP(parallel for schedule(static) num_threads(nb_num_threads(r->ctx))
            if(r->rows * W >= NB__PAR_MIN))
    for (row = 0; row < r->rows; row++) {
        nb_real* mp = h->maps + (size_t)row * W;
        const nb_real* P = p->fn ? h->mix + (size_t)row * W : NULL;
        int i, c;
        for (i = 0; i < n; i++) {
            for (c = 0; c <= n; c++) { /* A[i][0] is pre_i, A[i][1+k] comb[i][k] */
                const nb_real a = (P ? p->scale[0] * nb__tanh(P[i * (n + 2) + c]) : 0) +
                                  p->base[i * (n + 1) + c];
                if (c == 0) mp[i] = a;
                else mp[2 * n + i * n + c - 1] = a;
            }
            mp[n + i] = (P ? p->scale2[0] * nb__tanh(P[i * (n + 2) + n + 1]) : 0) + p->base2[i];
        }
    }
    return NB_OK;
}

/* out = sum_k w[k] src_k (row o of each of the n streams) */
static void nb__hc_mix_row(nb_real* NB__RESTRICT out, const nb_real* w,
                           const nb_real* const src[], size_t o, int n, int d) {
    int k, j;
    const nb_real w0 = w[0];
    const nb_real* NB__RESTRICT s0 = src[0] + o;
    NB__OMP(simd)
    for (j = 0; j < d; j++) out[j] = w0 * s0[j];
    for (k = 1; k < n; k++) {
        const nb_real wk = w[k];
        const nb_real* NB__RESTRICT sk = src[k] + o;
        NB__OMP(simd)
        for (j = 0; j < d; j++) out[j] += wk * sk[j];
    }
}

/* u = sum_i pre_i x_i (pre: the first n of each map row of width W) */
static void nb__hc_pre_fwd(nb__run* r, const nb_real* maps, int W, nb_real* u,
                           const nb_real* const X[]) {
    const int n = r->s->streams, d = r->s->desc.d_model;
    int row;
    NB__OMP(parallel for schedule(static) num_threads(nb_num_threads(r->ctx))
            if(r->n * n >= NB__PAR_MIN))
    for (row = 0; row < r->rows; row++)
        nb__hc_mix_row(u + (size_t)row * d, maps + (size_t)row * W, X, (size_t)row * d, n, d);
}

/* dpre_i = <du, x_i> into dm (row stride dw); dx_i = pre_i du, or += when accumulate */
static void nb__hc_pre_bwd(nb__run* r, const nb_real* maps, int W, nb_real* dm, int dw,
                           nb_real* const dX[], const nb_real* du, const nb_real* const X[],
                           int accumulate) {
    const int n = r->s->streams, d = r->s->desc.d_model;
    int row;
    NB__OMP(parallel for schedule(static) num_threads(nb_num_threads(r->ctx))
            if(r->n * n >= NB__PAR_MIN))
    for (row = 0; row < r->rows; row++) {
        const nb_real* pre = maps + (size_t)row * W;
        const size_t o = (size_t)row * d;
        int i, j;
        for (i = 0; i < n; i++) {
            const nb_real* NB__RESTRICT xi = X[i] + o;
            nb_real* NB__RESTRICT gi = dX[i] + o;
            const nb_real p = pre[i];
            nb_real dot = 0;
            NB__OMP(simd reduction(+:dot))
            for (j = 0; j < d; j++) dot += du[o + j] * xi[j];
            dm[(size_t)row * dw + i] = dot;
            if (accumulate) {
                NB__OMP(simd)
                for (j = 0; j < d; j++) gi[j] += p * du[o + j];
            } else {
                NB__OMP(simd)
                for (j = 0; j < d; j++) gi[j] = p * du[o + j];
            }
        }
    }
}

/* x'_k = post_k y + sum_j comb[j][k] x_j */
static void nb__hc_post_fwd(nb__run* r, const nb_real* maps, nb_real* const out[],
                            const nb_real* y, const nb_real* const X[]) {
    const int n = r->s->streams, d = r->s->desc.d_model, W = nb__hc_maps(r->s);
    int row;
    NB__OMP(parallel for schedule(static) num_threads(nb_num_threads(r->ctx))
            if(r->n * n >= NB__PAR_MIN))
    for (row = 0; row < r->rows; row++) {
        const nb_real *post = maps + (size_t)row * W + n, *comb = post + n;
        const size_t o = (size_t)row * d;
        int i, k, j;
        for (k = 0; k < n; k++) {
            nb_real* NB__RESTRICT ok = out[k] + o;
            const nb_real pk = post[k];
            NB__OMP(simd)
            for (j = 0; j < d; j++) ok[j] = pk * y[o + j];
            for (i = 0; i < n; i++) {
                const nb_real c = comb[i * n + k];
                const nb_real* NB__RESTRICT xi = X[i] + o;
                NB__OMP(simd)
                for (j = 0; j < d; j++) ok[j] += c * xi[j];
            }
        }
    }
}

/* dy = sum_k post_k dx'_k; dpost_k = <dx'_k, y>; dcomb[j][k] = <dx'_k, x_j>;
   dx_j = sum_k comb[j][k] dx'_k (overwritten). d(maps) into dm (row stride dw). */
static void nb__hc_post_bwd(nb__run* r, const nb_real* maps, nb_real* dm, int dw,
                            nb_real* const dX[], nb_real* dy, const nb_real* const dXo[],
                            const nb_real* y, const nb_real* const X[]) {
    const int n = r->s->streams, d = r->s->desc.d_model, W = nb__hc_maps(r->s);
    int row;
    NB__OMP(parallel for schedule(static) num_threads(nb_num_threads(r->ctx))
            if(r->n * n >= NB__PAR_MIN))
    for (row = 0; row < r->rows; row++) {
        const nb_real *post = maps + (size_t)row * W + n, *comb = post + n;
        nb_real* g = dm + (size_t)row * dw;
        const size_t o = (size_t)row * d;
        int i, k, j;
        for (k = 0; k < n; k++) {
            const nb_real* NB__RESTRICT gk = dXo[k] + o;
            nb_real dot = 0;
            NB__OMP(simd reduction(+:dot))
            for (j = 0; j < d; j++) dot += gk[j] * y[o + j];
            g[n + k] = dot;
            for (i = 0; i < n; i++) {
                const nb_real* NB__RESTRICT xi = X[i] + o;
                dot = 0;
                NB__OMP(simd reduction(+:dot))
                for (j = 0; j < d; j++) dot += gk[j] * xi[j];
                g[2 * n + i * n + k] = dot;
            }
        }
        nb__hc_mix_row(dy + o, post, dXo, o, n, d);
        for (i = 0; i < n; i++) nb__hc_mix_row(dX[i] + o, comb + i * n, dXo, o, n, d);
    }
}

/* Column sums over the rows, in row order (deterministic for any team): out[c] += sum_row
   dm[row*dw + c0 + c] for c < cols. */
static void nb__hc_colsum(const nb__run* r, nb_real* out, const nb_real* dm, int dw, int c0,
                          int cols) {
    int row, c;
    for (c = 0; c < cols; c++) {
        double acc = 0;
        for (row = 0; row < r->rows; row++) acc += dm[(size_t)row * dw + c0 + c];
        out[c] += (nb_real)acc;
    }
}

/* mHC/IHC/mHC-lite maps backward. dm rows: d(pre), d(post), d(comb) (row stride dw, the
   head's n + 3), turned in place into dz (the logits' gradients: sigmoid' and Sinkhorn's or
   the permutations' backward), the per-row scale terms dz * mix in the last 3 columns, then
   dmix = a dz. dbase += sum dz; da += sum dz mix;
   dfn += dmix^T xn; dxn = dmix fn; dx += r (dxn - xn mean(dxn xn)) (the RMS without gain). */
static nb_result nb__hcm_bwd(nb__run* r, const nb__hc* p, nb__hc* g, const nb__hc_mem* h,
                             nb_real* const dX[], const nb_real* const X[], int head) {
    const nb_stack* s = r->s;
    const int n = s->streams, d = s->desc.d_model, nd = n * d,
              dw = head ? n + 3 : nb__hc_dw(s), S0 = dw - 3, m = head ? n : nb__hc_m(s),
              kind = head ? NB_HYPER_NONE : (int)s->desc.hyper.kind,
              ng = head ? 1 : kind == NB_HYPER_IDENTITY ? 2 : 3, iters = s->desc.hyper.sinkhorn;
    unsigned char perm[NB__HC_LOGITS * NB_HYPER_LITE_MAX_STREAMS];
    nb_real* dm = r->sc.hdm;
    nb_result rc;
    int row;
    if (kind == NB_HYPER_MHC_LITE) nb__perms(perm, n);
    NB__OMP(parallel for schedule(static) num_threads(nb_num_threads(r->ctx))
            if(r->rows * dw >= NB__PAR_MIN))
    for (row = 0; row < r->rows; row++) {
        nb_real* gz = dm + (size_t)row * dw;
        const nb_real* mix = p->fn ? h->mix + (size_t)row * m : NULL;
        nb_real C[NB__HC_LOGITS], M[NB__NS * NB__NS];
        int c;
        for (c = 0; c < m; c++) {
            const int grp = nb__hc_group(c, n);
            const nb_real z = (mix ? p->scale[grp] * mix[c] : 0) + p->base[c];
            if (grp < 2) {
                const nb_real sg = nb__sigm(z);
                gz[c] *= (grp ? 2 : 1) * sg * (1 - sg);
            } else {
                C[c - 2 * n] = z;
            }
        }
        if (kind == NB_HYPER_MHC) {
            nb_real* tape = r->sc.htape + (size_t)omp_get_thread_num() * nb__hc_tape(s);
            nb__sinkhorn(M, C, n, iters, tape);
            nb__sinkhorn_bwd(gz + 2 * n, n, iters, tape);
        } else if (kind == NB_HYPER_MHC_LITE) {
            nb__birkhoff_bwd(gz + 2 * n, C, n, perm);
        }
        if (mix) {
            for (c = 0; c < 3; c++) gz[S0 + c] = 0;
            for (c = 0; c < m; c++) gz[S0 + nb__hc_group(c, n)] += gz[c] * mix[c];
        }
    }
    nb__hc_colsum(r, g->base, dm, dw, 0, m);
    if (!p->fn) return NB_OK;
    nb__hc_colsum(r, g->scale, dm, dw, S0, ng);
    NB__OMP(parallel for schedule(static) num_threads(nb_num_threads(r->ctx))
            if(r->rows * dw >= NB__PAR_MIN))
    for (row = 0; row < r->rows; row++) { /* dmix = a dz; xn again from x and the cached r */
        nb_real *gz = dm + (size_t)row * dw, *xn = r->sc.hx + (size_t)row * nd;
        int c, i, j;
        for (c = 0; c < m; c++) gz[c] *= p->scale[nb__hc_group(c, n)];
        for (i = 0; i < n; i++)
            for (j = 0; j < d; j++) xn[i * d + j] = X[i][(size_t)row * d + j] * h->r[row];
    }
    if ((rc = nb_gemm(r->ctx, 1, 0, m, nd, r->rows, 1, dm, dw, r->sc.hx, nd, 1, g->fn, nd)))
        return rc;
    if ((rc = nb_gemm(r->ctx, 0, 0, r->rows, nd, m, 1, dm, dw, p->fn, nd, 0, r->sc.hx, nd)))
        return rc;
    NB__OMP(parallel for schedule(static) num_threads(nb_num_threads(r->ctx))
            if(r->n * n >= NB__PAR_MIN))
    for (row = 0; row < r->rows; row++) {
        const nb_real* dxn = r->sc.hx + (size_t)row * nd;
        const nb_real rr = h->r[row];
        nb_real dot = 0;
        int i, j;
        for (i = 0; i < n; i++)
            for (j = 0; j < d; j++) dot += dxn[i * d + j] * X[i][(size_t)row * d + j] * rr;
        dot /= nd;
        for (i = 0; i < n; i++)
            for (j = 0; j < d; j++) {
                const size_t o = (size_t)row * d + j;
                dX[i][o] += rr * (dxn[i * d + j] - X[i][o] * rr * dot);
            }
    }
    return NB_OK;
}

/* HC maps backward: d(pre, post, comb) in dm are d(A[i][0]), d(beta), d(A[i][1+k]):
   dstatic += their sums; dynamic: with t = tanh(P), ds += sum dA t, dP = dA s (1 - t^2)
   (in place, in the projections' layout), dW += hbar^T dP, dhbar = dP W^T, then dx += the
   norm's backward of dhbar (hbar and its statistics computed again). */
static nb_result nb__hch_bwd(nb__run* r, const nb__hc* p, nb__hc* g, nb_real* const dX[],
                             const nb_real* const X[], const nb_real* mix) {
    const int n = r->s->streams, d = r->s->desc.d_model, W = nb__hc_maps(r->s);
    const int dw = nb__hc_dw(r->s);
    const size_t st = (size_t)r->rows * nb__norm_kinds[r->s->desc.norm.type].stats;
    nb_real* dm = r->sc.hdm;
    nb_result rc;
    int row, i, k;
    for (i = 0; i < n; i++) {
        nb__hc_colsum(r, g->base + i * (n + 1), dm, dw, i, 1);
        for (k = 0; k < n; k++) nb__hc_colsum(r, g->base + i * (n + 1) + 1 + k, dm, dw,
                                              2 * n + i * n + k, 1);
        nb__hc_colsum(r, g->base2 + i, dm, dw, n + i, 1);
    }
    if (!p->fn) return NB_OK;
    NB__OMP(parallel for schedule(static) num_threads(nb_num_threads(r->ctx))
            if(r->rows * W >= NB__PAR_MIN))
    for (row = 0; row < r->rows; row++) {
        nb_real* gz = dm + (size_t)row * dw;
        const nb_real* P = mix + (size_t)row * W;
        nb_real keep[NB__NS * (NB__NS + 2)];
        int j, c;
        memcpy(keep, gz, (size_t)W * sizeof *gz);
        gz[W] = gz[W + 1] = 0;
        for (j = 0; j < n; j++) {
            for (c = 0; c <= n + 1; c++) {
                const nb_real t = nb__tanh(P[j * (n + 2) + c]);
                const nb_real da = c == 0 ? keep[j] : c <= n ? keep[2 * n + j * n + c - 1]
                                                             : keep[n + j];
                gz[W + (c > n)] += da * t;
                gz[j * (n + 2) + c] = da * (c > n ? p->scale2[0] : p->scale[0]) * (1 - t * t);
            }
        }
    }
    nb__hc_colsum(r, g->scale, dm, dw, W, 1);
    nb__hc_colsum(r, g->scale2, dm, dw, W + 1, 1);
    if ((rc = nb__hch_norm_proj(r, p, NULL, X))) return rc;
    for (i = 0; i < n; i++) {
        nb_real* hb = r->sc.hx + (size_t)i * r->n;
        const nb_real* dP = dm + i * (n + 2);
        if ((rc = nb_gemm(r->ctx, 1, 0, d, n + 1, r->rows, 1, hb, d, dP, dw, 1, g->fn, n + 1)) ||
            (rc = nb_gemm(r->ctx, 1, 0, d, 1, r->rows, 1, hb, d, dP + n + 1, dw, 1, g->fn2, 1)) ||
            (rc = nb_gemm(r->ctx, 0, 1, r->rows, d, n + 1, 1, dP, dw, p->fn, n + 1, 0, hb, d)) ||
            (rc = nb_gemm(r->ctx, 0, 1, r->rows, d, 1, 1, dP + n + 1, dw, p->fn2, 1, 1, hb, d)) ||
            (rc = nb__block_norm_bwd_add(r, &p->n, &g->n, dX[i], hb, X[i],
                                         r->sc.hst + i * st, dX[i], 1, NULL)))
            return rc;
    }
    return NB_OK;
}

static nb_result nb__hc_maps_fwd(nb__run* r, const nb__hc* p, const nb__hc_mem* h,
                                 const nb_real* const X[]) {
    return r->s->desc.hyper.kind == NB_HYPER_HC ? nb__hch_fwd(r, p, h, X)
                                                 : nb__hcm_fwd(r, p, h, X, 0);
}

/* Sublayer k of layer l on n streams: maps, u = sum_i pre_i x_i, y = B(u) (the placement
   without its residual), x'_k = post_k y + sum_j comb[j][k] x_j. */
static nb_result nb__hc_sub_forward(nb__run* r, int l, int k, const nb__layer_tensors* p,
                                    const nb__layer_mem* c, nb_real* const out[],
                                    const nb_real* const X[]) {
    const nb__hc_mem* h = &c->hc[k];
    nb_result rc;
    if ((rc = nb__hc_maps_fwd(r, &p->hc[k], h, X))) return rc;
    nb__trace_cols(r, l, k, "hc_maps", h->maps, nb__hc_maps(r->s));
    nb__hc_pre_fwd(r, h->maps, nb__hc_maps(r->s), h->u, X);
    nb__trace_layer(r, l, k, "hc_in", h->u);
    if ((rc = nb__sub_forward(r, l, k, p, c, h->y, h->u))) return rc;
    nb__hc_post_fwd(r, h->maps, out, h->y, X);
    return NB_OK;
}

/* dX (overwritten) from dXo; dy in tmp[4], du in tmp[5] (nb__sub_backward uses tmp 0-2) */
static nb_result nb__hc_sub_backward(nb__run* r, int l, int k, const nb__layer_tensors* p,
                                     nb__layer_tensors* g, const nb__layer_mem* c,
                                     nb_real* const dX[], const nb_real* const dXo[],
                                     const nb_real* const X[]) {
    const nb__hc_mem* h = &c->hc[k];
    const int W = nb__hc_maps(r->s), dw = nb__hc_dw(r->s);
    nb_real *dy = r->sc.tmp[4], *du = r->sc.tmp[5];
    nb_result rc;
    nb__hc_post_bwd(r, h->maps, r->sc.hdm, dw, dX, dy, dXo, h->y, X);
    if ((rc = nb__sub_backward(r, l, k, p, g, c, du, dy, h->u))) return rc;
    nb__hc_pre_bwd(r, h->maps, W, r->sc.hdm, dw, dX, du, X, 1);
    if (r->s->desc.hyper.kind == NB_HYPER_HC)
        return nb__hch_bwd(r, &p->hc[k], &g->hc[k], dX, X, h->mix);
    return nb__hcm_bwd(r, &p->hc[k], &g->hc[k], h, dX, X, 0);
}

/* The streams' end: h = sum_i w_i x_i (mHC, IHC: the head's per-token weights) or sum_i x_i
   (HC), into sc.head.u. */
static nb_result nb__hc_head_fwd(nb__run* r, const nb__top_tensors* tp, const nb_real* const X[]) {
    const nb__hc_mem* h = &r->sc.head;
    int i;
    nb_result rc;
    if (r->s->desc.hyper.kind == NB_HYPER_HC) {
        nb__copy(r, h->u, X[0]);
        for (i = 1; i < r->s->streams; i++) nb__lin(r, h->u, 1, h->u, 1, X[i]);
        return NB_OK;
    }
    if ((rc = nb__hcm_fwd(r, &tp->head, h, X, 1))) return rc;
    nb__trace_cols(r, -1, 0, "hc_head_weights", h->maps, r->s->streams);
    nb__hc_pre_fwd(r, h->maps, r->s->streams, h->u, X);
    return NB_OK;
}

/* dX (overwritten) from dh, the gradient of the head's output */
static nb_result nb__hc_head_bwd(nb__run* r, const nb__top_tensors* tp, nb__top_tensors* tg,
                                 nb_real* const dX[], const nb_real* dh,
                                 const nb_real* const X[]) {
    const int n = r->s->streams;
    int i;
    if (r->s->desc.hyper.kind == NB_HYPER_HC) {
        for (i = 0; i < n; i++) nb__copy(r, dX[i], dh);
        return NB_OK;
    }
    nb__hc_pre_bwd(r, r->sc.head.maps, n, r->sc.hdm, n + 3, dX, dh, X, 0);
    return nb__hcm_bwd(r, &tp->head, &tg->head, &r->sc.head, dX, X, 1);
}

/* ---- the drivers' checks ---- */

/* names: of a..e, space-separated */
/* names: the five pointers of ptrs (space-separated), each required */
static nb_result nb__check_run(nb_ctx* ctx, const char* fn, const nb_stack* s, int B, int T,
                               const char* names, const void* const ptrs[5]) {
    nb_result rc;
    NB__CHECK(!s || !s->layers, NB_ERR_NULL, "%s: an initialized stack s is required", fn);
    if ((rc = nb__check_bt(ctx, fn, B, T, s->max_batch, s->max_seq))) return rc;
    NB__CHECK(nb_num_threads(ctx) > s->max_threads, NB_ERR_CONFIG,
              "%s: %d threads requested but the stack sized its scratch for %d", fn,
              nb_num_threads(ctx), s->max_threads);
    NB__CHECK(s->desc.gemm.bf16_weights && !s->weights16, NB_ERR_NULL, "%s: the stack reads the "
              "caller's bf16 weights (desc.gemm.bf16_weights) but none are set "
              "(nb_stack_set_bf16_weights)", fn);
    NB__CHECK(s->desc.residual.value_embeds && !s->value_embeds, NB_ERR_NULL, "%s: "
              "residual.value_embeds mixes the caller's table rows into the values but none are "
              "bound (nb_stack_set_value_embeds)", fn);
    return nb__need(ctx, fn, names, 5, ptrs);
}

/* The sublayer caches of layer l hold a forward with (B, T) (skipped layers need none). */
static nb_result nb__layer_cache_ok(nb_ctx* ctx, const char* fn, const nb_stack* s, int l,
                                    const nb_real* cache, int B, int T) {
    nb__layer_mem c;
    size_t used = s->layers[l].cache_offset;
    nb_result rc;
    if (s->skip[l]) return NB_OK;
    nb__carve_layer(s, l, (nb_real*)(size_t)cache, &used, &c);
    if ((rc = nb__attn_cache_ok(ctx, fn, &s->layers[l].attn, c.acache, B, T))) return rc;
    return nb__ffn_cache_ok(ctx, fn, &s->ffn, c.fcache, B, T);
}

static void nb__run_init(nb__run* r, nb_ctx* ctx, const nb_stack* s, int B, int T,
                         const nb_real* cache, nb_real* scratch) {
    size_t cu, su;
    r->ctx = ctx; r->s = s; r->B = B; r->T = T; r->rows = B * T; r->write_dw = 0;
    r->cache = cache; r->dx16 = NULL; r->given16 = NULL; r->chained = 0;
    r->n = (size_t)B * T * s->desc.d_model;
    nb__carve_stack(s, (nb_real*)(size_t)cache, scratch, &r->sc, &cu, &su);
    NB_ASSERT(cu <= s->n_cache && su <= s->n_scratch);
}

/* ---- residual topologies ----
   How the streams flow through a layer and out of the stack: one row each (nb__topologies),
   picked once by nb_stack_init (nb_stack.topology); the drivers (nb__layer_fwd/bwd,
   nb__stack_fwd/bwd) call the row without asking which topology runs. A new topology is a row
   and a section like the ones below: its layer forward and backward (streams in -> out), and
   its output stage (the streams after layer L -> the stack's output, and back). */

/* the final norm (when on) of x (x_L, or the hyper-connections' head output) into out */
static nb_result nb__final_fwd(nb__run* r, const nb__top_tensors* tp, nb_real* out,
                               const nb_real* x) {
    if (nb__top_on(r->s, NB__LNF))
        return nb__block_norm_fwd(r, &tp->n[NB__LNF], out, x, r->sc.st[NB__LNF]);
    nb__copy(r, out, x);
    return NB_OK;
}

/* -- one stream: x -> attention sublayer -> FFN sublayer, each with its placement's norms -- */
static nb_result nb__one_layer_fwd(nb__run* r, int l, const nb__layer_tensors* p,
                                   const nb__layer_mem* c, nb_real* const out[],
                                   const nb_real* const in[]) {
    const nb_result rc = nb__sub_forward(r, l, 0, p, c, c->mid, in[0]);
    return rc ? rc : nb__sub_forward(r, l, 1, p, c, out[0], c->mid);
}
/* din16: where the attention's input norm writes din's bf16 copy (NULL: nowhere) */
static nb_result nb__one_layer_bwd(nb__run* r, int l, const nb__layer_tensors* p,
                                   nb__layer_tensors* g, const nb__layer_mem* c,
                                   nb_real* const din[], const nb_real* const dout[],
                                   const nb_real* const in[], unsigned short* din16) {
    nb_real* dmid = r->sc.tmp[3];
    nb_result rc;
    /* BF16: the FFN's input norm, the last pass over dmid, also writes the bf16 copy that the
       attention's output projection reads (instead of a conversion pass over dmid) */
    if (nb__branch_reads_dout(&r->s->layers[l].desc.attn)) r->dx16 = nb__sub_bf16(r, l, 0, c, 1);
    if ((rc = nb__sub_backward(r, l, 1, p, g, c, dmid, dout[0], c->mid))) return rc;
    r->dx16 = din16;
    return nb__sub_backward(r, l, 0, p, g, c, din[0], dmid, in[0]);
}
/* The one-stream row's layers pass the gradient down as it is (nb__stack_bwd: din of layer l
   is dout of layer l - 1, and the final norm's dx dout of layer L - 1), so the norm backward
   that finishes it writes the bf16 copy layer l's FFN reads: here, NULL where the FFN has none
   or reads another gradient (a post or output norm, a branch scale), or where the layers do
   not run back to back (nb_layer_backward). */
static unsigned short* nb__ffn_handoff16(const nb__run* r, int l) {
    return r->chained && l >= 0 && !r->s->skip[l] &&
                   nb__branch_reads_dout(&r->s->layers[l].desc.ffn)
               ? nb__sub_bf16(r, l, 1, NULL, 1)
               : NULL;
}
static nb_result nb__plain_layer_bwd(nb__run* r, int l, const nb__layer_tensors* p,
                                     nb__layer_tensors* g, const nb__layer_mem* c,
                                     nb_real* const din[], const nb_real* const dout[],
                                     const nb_real* const in[]) {
    return nb__one_layer_bwd(r, l, p, g, c, din, dout, in, nb__ffn_handoff16(r, l - 1));
}
static nb_result nb__one_out_fwd(nb__run* r, const nb__top_tensors* tp, nb_real* out) {
    return nb__final_fwd(r, tp, out, nb__hidden(r->s, r->sc.hidden, r->s->desc.n_layers, 0));
}
/* dx_L = J_lnf^T dout into dX[0]; without the final norm the last layer reads dout itself
   (direct_io) and nothing is written */
static nb_result nb__one_out_bwd(nb__run* r, const nb__top_tensors* tp, nb__top_tensors* tg,
                                 nb_real* const dX[], const nb_real* dout) {
    const int L = r->s->desc.n_layers;
    unsigned short* dx16;
    nb_result rc;
    if (!nb__top_on(r->s, NB__LNF)) return NB_OK;
    dx16 = r->s->topology == NB__TOPO_ONE ? nb__ffn_handoff16(r, L - 1) : NULL;
    rc = nb__block_norm_bwd_add(r, &tp->n[NB__LNF], &tg->n[NB__LNF], dX[0], dout,
                                nb__hidden(r->s, r->sc.hidden, L, 0), r->sc.st[NB__LNF], NULL, 1,
                                dx16);
    if (!rc && dx16) r->given16 = dX[0];
    return rc;
}

/* -- SiameseNorm: streams x and y; its HybridNorm-Pre form (one pass per layer) and its
   Post-Pre form (one pass per sublayer) share the output stage -- */
/* SiameseNorm's output (code form): fuse = N_lnf(x_L) + N_lnyf(y_L); out = N_final(fuse), one
   pass over the rows. */
static void nb__siamese_fuse_fwd(nb__run* r, const nb__top_tensors* tp, nb_real* out,
                                const nb_real* xL, const nb_real* yL) {
    const int d = r->s->desc.d_model;
    nb_real* fuse = r->sc.fuse;
    int row;
    NB__OMP(parallel for schedule(static) num_threads(nb_num_threads(r->ctx))
            if(r->n >= NB__PAR_MIN))
    for (row = 0; row < r->rows; row++) {
        const size_t o = (size_t)row * d;
        nb_real* t = nb__rowbuf(r, omp_get_thread_num());
        int j;
        if (row + 1 < r->rows) { nb__prefetch_row(yL + o + d, d); nb__prefetch_row(xL + o + d, d); }
        nb__block_norm_fwd_row(r, &tp->n[NB__LNYF], t, yL + o, r->sc.st[NB__LNYF], row);
        nb__block_norm_fwd_row(r, &tp->n[NB__LNF], fuse + o, xL + o, r->sc.st[NB__LNF], row);
        NB__OMP(simd)
        for (j = 0; j < d; j++) fuse[o + j] += t[j];
        nb__block_norm_fwd_row(r, &tp->n[NB__LNFINAL], out + o, fuse + o, r->sc.st[NB__LNFINAL],
                               row);
    }
}

/* its backward: da = J_final^T dout; dx_L = J_lnf^T da; dy_L = J_lnyf^T da */
static void nb__siamese_fuse_bwd(nb__run* r, const nb__top_tensors* tp, nb__top_tensors* tg,
                                nb_real* dxL, nb_real* dyL, const nb_real* dout, const nb_real* xL,
                                const nb_real* yL) {
    const int d = r->s->desc.d_model;
    int used = 1;
    NB__OMP(parallel num_threads(nb_num_threads(r->ctx)) if(r->n >= NB__PAR_MIN))
    {
        int lo, hi, row;
        const int th = nb__team_rows(r->rows, &used, &lo, &hi);
        const nb__part pp0 = nb__slot_part(r, 0, th, &tg->n[NB__LNFINAL]);
        const nb__part pp1 = nb__slot_part(r, 1, th, &tg->n[NB__LNF]);
        const nb__part pp2 = nb__slot_part(r, 2, th, &tg->n[NB__LNYF]);
        nb_real* da = nb__rowbuf(r, th);
        for (row = lo; row < hi; row++) {
            const size_t o = (size_t)row * d;
            if (row + 1 < hi) {
                nb__prefetch_row(dout + o + d, d); nb__prefetch_row(r->sc.fuse + o + d, d);
                nb__prefetch_row(xL + o + d, d); nb__prefetch_row(yL + o + d, d);
            }
            nb__block_norm_bwd_row(r, &tp->n[NB__LNFINAL], da, dout + o, r->sc.fuse + o,
                                   r->sc.st[NB__LNFINAL], row, NULL, &pp0);
            nb__block_norm_bwd_row(r, &tp->n[NB__LNF], dxL + o, da, xL + o, r->sc.st[NB__LNF], row,
                                   NULL, &pp1);
            nb__block_norm_bwd_row(r, &tp->n[NB__LNYF], dyL + o, da, yL + o, r->sc.st[NB__LNYF],
                                   row, NULL, &pp2);
        }
    }
    nb__slot_reduce(r, 0, used, &tg->n[NB__LNFINAL]);
    nb__slot_reduce(r, 1, used, &tg->n[NB__LNF]);
    nb__slot_reduce(r, 2, used, &tg->n[NB__LNYF]);
}

static nb_result nb__siamese_pp_layer_fwd(nb__run* r, int l, const nb__layer_tensors* p,
                                          const nb__layer_mem* c, nb_real* const out[],
                                          const nb_real* const in[]) {
    nb_real* const mid[2] = {c->xm, c->ym}; /* the streams between the sublayers */
    const nb_real* const mid_in[2] = {c->xm, c->ym};
    const nb_result rc = nb__siamese_pp_forward(r, l, 0, p, c, mid, in);
    return rc ? rc : nb__siamese_pp_forward(r, l, 1, p, c, out, mid_in);
}
static nb_result nb__siamese_pp_layer_bwd(nb__run* r, int l, const nb__layer_tensors* p,
                                          nb__layer_tensors* g, const nb__layer_mem* c,
                                          nb_real* const din[], const nb_real* const dout[],
                                          const nb_real* const in[]) {
    nb_real* const dmid[2] = {r->sc.tmp[4], r->sc.tmp[5]}; /* between the sublayers */
    const nb_real* const dmid_in[2] = {r->sc.tmp[4], r->sc.tmp[5]};
    const nb_real* const mid[2] = {c->xm, c->ym};
    const nb_result rc = nb__siamese_pp_backward(r, l, 1, p, g, c, dmid, dout, mid);
    return rc ? rc : nb__siamese_pp_backward(r, l, 0, p, g, c, din, dmid_in, in);
}
/* out = N_final(N_lnf(x_L) + N_lnyf(y_L)) (code) or x_L + N_lnyf(y_L) (paper fusion) */
static nb_result nb__siamese_out_fwd(nb__run* r, const nb__top_tensors* tp, nb_real* out) {
    const int L = r->s->desc.n_layers;
    const nb_real *xL = nb__hidden(r->s, r->sc.hidden, L, 0);
    const nb_real *yL = nb__hidden(r->s, r->sc.hidden, L, 1);
    nb_result rc;
    if (!r->s->desc.siamese.paper_fusion) {
        nb__siamese_fuse_fwd(r, tp, out, xL, yL);
        return NB_OK;
    }
    if ((rc = nb__block_norm_fwd(r, &tp->n[NB__LNYF], r->sc.tmp[0], yL, r->sc.st[NB__LNYF])))
        return rc;
    nb__lin(r, out, 1, xL, 1, r->sc.tmp[0]);
    return NB_OK;
}
static nb_result nb__siamese_out_bwd(nb__run* r, const nb__top_tensors* tp, nb__top_tensors* tg,
                                     nb_real* const dX[], const nb_real* dout) {
    const int L = r->s->desc.n_layers;
    const nb_real *xL = nb__hidden(r->s, r->sc.hidden, L, 0);
    const nb_real *yL = nb__hidden(r->s, r->sc.hidden, L, 1);
    if (!r->s->desc.siamese.paper_fusion) {
        nb__siamese_fuse_bwd(r, tp, tg, dX[0], dX[1], dout, xL, yL);
        return NB_OK;
    }
    nb__copy(r, dX[0], dout);
    return nb__block_norm_bwd(r, &tp->n[NB__LNYF], &tg->n[NB__LNYF], dX[1], dout, yL,
                              r->sc.st[NB__LNYF], 0);
}

/* -- hyper-connections: n streams mixed around each sublayer, read out by the head -- */
static nb_result nb__hc_layer_fwd(nb__run* r, int l, const nb__layer_tensors* p,
                                  const nb__layer_mem* c, nb_real* const out[],
                                  const nb_real* const in[]) {
    nb_real* mid[NB__NS] = {0};
    nb_result rc;
    int k;
    for (k = 0; k < r->s->streams; k++) mid[k] = c->hmid + (size_t)k * r->n;
    if ((rc = nb__hc_sub_forward(r, l, 0, p, c, mid, in))) return rc;
    return nb__hc_sub_forward(r, l, 1, p, c, out, (const nb_real* const*)mid);
}
static nb_result nb__hc_layer_bwd(nb__run* r, int l, const nb__layer_tensors* p,
                                  nb__layer_tensors* g, const nb__layer_mem* c,
                                  nb_real* const din[], const nb_real* const dout[],
                                  const nb_real* const in[]) {
    nb_real *mid[NB__NS] = {0}, *dmid[NB__NS] = {0};
    nb_result rc;
    int k;
    for (k = 0; k < r->s->streams; k++) {
        mid[k] = c->hmid + (size_t)k * r->n;
        dmid[k] = r->sc.hdmid + (size_t)k * r->n;
    }
    if ((rc = nb__hc_sub_backward(r, l, 1, p, g, c, dmid, dout, (const nb_real* const*)mid)))
        return rc;
    return nb__hc_sub_backward(r, l, 0, p, g, c, din, (const nb_real* const*)dmid, in);
}
/* the head reads the streams out (u), then the final norm */
static nb_result nb__hc_out_fwd(nb__run* r, const nb__top_tensors* tp, nb_real* out) {
    const nb_real* X[NB__NS] = {0};
    nb_result rc;
    int k;
    for (k = 0; k < r->s->streams; k++)
        X[k] = nb__hidden(r->s, r->sc.hidden, r->s->desc.n_layers, k);
    if ((rc = nb__hc_head_fwd(r, tp, X))) return rc;
    nb__trace_layer(r, -1, -1, "hc_head", r->sc.head.u);
    return nb__final_fwd(r, tp, out, r->sc.head.u);
}
static nb_result nb__hc_out_bwd(nb__run* r, const nb__top_tensors* tp, nb__top_tensors* tg,
                                nb_real* const dX[], const nb_real* dout) {
    const nb_real* X[NB__NS] = {0};
    const nb_real* dh = dout;
    int k;
    for (k = 0; k < r->s->streams; k++)
        X[k] = nb__hidden(r->s, r->sc.hidden, r->s->desc.n_layers, k);
    if (nb__top_on(r->s, NB__LNF)) {
        const nb_result rc = nb__block_norm_bwd(r, &tp->n[NB__LNF], &tg->n[NB__LNF], r->sc.tmp[4],
                                                dout, r->sc.head.u, r->sc.st[NB__LNF], 0);
        if (rc) return rc;
        dh = r->sc.tmp[4];
    }
    return nb__hc_head_bwd(r, tp, tg, dX, dh, X);
}

/* -- DenseFormer: one stream; a layer's input is the depth-weighted average of the stack's
   input and the earlier layers' outputs (residual.dwa) -- */
/* h_j: x_0 for j = 0, else layer j-1's output (its cache) */
static const nb_real* nb__dwa_h(const nb__run* r, int j) {
    nb__layer_mem c;
    size_t used;
    if (j == 0) return nb__hidden(r->s, r->sc.hidden, 0, 0);
    used = r->s->layers[j - 1].cache_offset;
    nb__carve_layer(r->s, j - 1, (nb_real*)(size_t)r->cache, &used, &c);
    return c.dh;
}
/* the gradient of h_j (scratch) */
static nb_real* nb__dwa_g(const nb__run* r, int j) { return r->sc.dwa_g + (size_t)j * r->n; }

/* h_{l+1} = the layer (one stream) on x_l; x_{l+1} = sum_m a_l[m] h_{j0 + m k}, or h_{l+1}
   off the period */
static nb_result nb__dwa_layer_fwd(nb__run* r, int l, const nb__layer_tensors* p,
                                   const nb__layer_mem* c, nb_real* const out[],
                                   const nb_real* const in[]) {
    const int k = r->s->desc.residual.dwa_dilation, j0 = nb__dwa_first(r->s, l);
    nb_real* const h[1] = {c->dh};
    const nb_result rc = nb__one_layer_fwd(r, l, p, c, h, in);
    int m;
    if (rc) return rc;
    if (!nb__dwa_here(r->s, l)) {
        nb__copy(r, out[0], c->dh);
        return NB_OK;
    }
    nb__lin(r, out[0], p->dwa[0], nb__dwa_h(r, j0), 0, NULL);
    for (m = 1; m < nb__dwa_count(r->s, l); m++)
        nb__lin(r, out[0], 1, out[0], p->dwa[m], nb__dwa_h(r, j0 + m * k));
    return NB_OK;
}

/* sum over the rows of the row dot products of x and y, each row's in parallel (into the
   scratch rowdots), then added in row order: the same bits for any thread count */
static double nb__dot_rows(const nb__run* r, const nb_real* x, const nb_real* y, double* rowdots) {
    const int d = r->s->desc.d_model;
    double sum = 0;
    int row;
    NB__OMP(parallel for schedule(static) num_threads(nb_num_threads(r->ctx))
            if(r->n >= NB__PAR_MIN))
    for (row = 0; row < r->rows; row++) {
        const nb_real *a = x + (size_t)row * d, *b = y + (size_t)row * d;
        double acc = 0;
        int i;
        for (i = 0; i < d; i++) acc += (double)a[i] * b[i];
        rowdots[row] = acc;
    }
    for (row = 0; row < r->rows; row++) sum += rowdots[row];
    return sum;
}

/* From dx_{l+1} (dout, complete: only layer l+1 reads x_{l+1}): da_l[m] += <dx_{l+1}, h_j>,
   dh_j += a_l[m] dx_{l+1}; then dh_{l+1} is complete (only the averages of layers >= l read
   h_{l+1}) and goes back through the layer to dx_l; layer 0 adds dh_0 (x_0 is h_0). The dh_j
   are zeroed by the first backward, layer L-1's. Off the period x_{l+1} = h_{l+1}: dh_{l+1} +=
   dx_{l+1}. */
static nb_result nb__dwa_layer_bwd(nb__run* r, int l, const nb__layer_tensors* p,
                                   nb__layer_tensors* g, const nb__layer_mem* c,
                                   nb_real* const din[], const nb_real* const dout[],
                                   const nb_real* const in[]) {
    const nb_stack* s = r->s;
    const int k = s->desc.residual.dwa_dilation, j0 = nb__dwa_first(s, l);
    const nb_real* const dh[1] = {nb__dwa_g(r, l + 1)};
    int m;
    nb_result rc;
    if (l == s->desc.n_layers - 1)
        nb__zero(r->ctx, r->sc.dwa_g, ((size_t)s->desc.n_layers + 1) * r->n);
    if (!nb__dwa_here(s, l))
        nb__lin(r, nb__dwa_g(r, l + 1), 1, nb__dwa_g(r, l + 1), 1, dout[0]);
    for (m = 0; nb__dwa_here(s, l) && m < nb__dwa_count(s, l); m++) {
        const int j = j0 + m * k;
        nb_real* gj = nb__dwa_g(r, j);
        g->dwa[m] += (nb_real)nb__dot_rows(r, dout[0], nb__dwa_h(r, j), (double*)r->sc.tmp[0]);
        nb__lin(r, gj, 1, gj, p->dwa[m], dout[0]);
    }
    if ((rc = nb__one_layer_bwd(r, l, p, g, c, din, dh, in, NULL))) return rc;
    if (l == 0) nb__lin(r, din[0], 1, din[0], 1, nb__dwa_g(r, 0));
    return NB_OK;
}

/* -- Attention Residuals: one stream and no residual sums (residual.attn_res). Sublayer j's
   branch output f_j starts a block's partial sum (j % S == 0) or adds to p_{j-1}; the stream
   between layers is the partial p_{2l+1}, the one after attention p_2l sits in sc.ar_p. The
   reader before sublayer j >= 1 (and before the final norm, j = 2L) mixes x_0, the completed
   blocks and p_{j-1} (nb__ar_count) into h_j. -- */
/* the source p_e: x_0 for e = -1, a layer's output stream for odd e, else sc.ar_p's */
static const nb_real* nb__ar_v(const nb__run* r, int e) {
    if (e < 0 || e % 2) return nb__hidden(r->s, r->sc.hidden, (e + 1) / 2, 0);
    return r->sc.ar_p + (size_t)(e / 2) * nb__stack_V(r->s);
}
/* reader j's source m: x_0, the blocks' last sublayers m S - 1, then p_{j-1} */
static int nb__ar_src(const nb_stack* s, int j, int m) {
    return m == nb__ar_count(s, j) - 1 ? j - 1 : m * s->desc.residual.attn_res_block - 1;
}
static nb_real* nb__ar_h(const nb__run* r, int j) { /* h_j, 1 <= j <= 2L */
    return r->sc.ar_h + (size_t)(j - 1) * nb__stack_V(r->s);
}
static nb_real* nb__ar_g(const nb__run* r, int e) { /* the gradient of p_e (scratch) */
    return r->sc.ar_g + (size_t)(e + 1) * nb__stack_V(r->s);
}
/* the RMS of source p_e's rows (cache), written once when p_e is (nb__ar_keep) */
static nb_real* nb__ar_rms(const nb__run* r, int e) {
    return r->sc.ar_rms + (size_t)(e + 1) * r->s->max_batch * r->s->max_seq;
}
/* p_e is complete: its rows' RMS for the readers, each of which would otherwise recompute it */
static void nb__ar_keep(const nb__run* r, int e) {
    const int d = r->s->desc.d_model;
    const nb_real eps = r->s->desc.norm.eps, *v = nb__ar_v(r, e);
    nb_real* rms = nb__ar_rms(r, e);
    int row;
    NB__OMP(parallel for schedule(static) num_threads(nb_num_threads(r->ctx)) if(r->n >= NB__PAR_MIN))
    for (row = 0; row < r->rows; row++)
        rms[row] = NB__SQRT(nb__sumsq(v + (size_t)row * d, d, 0, NULL) / d + eps);
}
/* reader j's weights of row 0 (cache); row i's are *stride values on */
static nb_real* nb__ar_a(const nb__run* r, int j, size_t* stride) {
    *stride = nb__ar_aoff(r->s, 2 * r->s->desc.n_layers + 1);
    return r->sc.ar_a + nb__ar_aoff(r->s, j);
}

/* h = sum_m a_m v_m, a = softmax_m(z), z_m = r_m (q . v_m), q = w * g, r_m = 1/rms(v_m) (the
   key RMSNorm's gain folded into the query: g * v r . w = q . v r); the weights a go to the
   cache. Row-parallel: the same bits for any thread count. */
static void nb__ar_read_fwd(const nb__run* r, int j, const nb_real* w, const nb_real* g,
                            nb_real* h) {
    const nb_stack* s = r->s;
    const int d = s->desc.d_model, n = nb__ar_count(s, j);
    size_t astride;
    nb_real* const a0 = nb__ar_a(r, j, &astride);
    NB__OMP(parallel num_threads(nb_num_threads(r->ctx)) if(r->n >= NB__PAR_MIN))
    {
        int lo, hi, row, m, i, used;
        nb_real* q = nb__rowbuf(r, nb__team_rows(r->rows, &used, &lo, &hi));
        for (i = 0; i < d; i++) q[i] = w[i] * g[i];
        for (row = lo; row < hi; row++) {
            const size_t o = (size_t)row * d;
            nb_real *a = a0 + (size_t)row * astride, *hr = h + o, mx, sum = 0;
            for (m = 0; m < n; m++) {
                const int e = nb__ar_src(s, j, m);
                a[m] = nb__dot(q, nb__ar_v(r, e) + o, d) / nb__ar_rms(r, e)[row];
            }
            for (m = 1, mx = a[0]; m < n; m++) mx = a[m] > mx ? a[m] : mx;
            for (m = 0; m < n; m++) sum += a[m] = NB__EXP(a[m] - mx);
            for (m = 0; m < n; m++) {
                const nb_real* v = nb__ar_v(r, nb__ar_src(s, j, m)) + o;
                const nb_real am = a[m] /= sum;
                if (m == 0) {
                    NB__OMP(simd)
                    for (i = 0; i < d; i++) hr[i] = am * v[i];
                } else {
                    NB__OMP(simd)
                    for (i = 0; i < d; i++) hr[i] += am * v[i];
                }
            }
        }
    }
}

/* Its backward from dh: with da_m = dh . v_m, dz_m = a_m (da_m - sum_k a_k da_k) and
   u_m = q . v_m, dv_m += a_m dh + dz_m r_m (q - u_m r_m^2 v_m / d) (the rms's term:
   dr_m/dv_m = -r_m^3 v_m / d) into the sources' gradients; dq = sum dz_m r_m v_m over the rows,
   dw += dq * g, dg += dq * w (thread partials added in thread order). */
static void nb__ar_read_bwd(const nb__run* r, int j, const nb_real* w, const nb_real* g,
                            nb_real* dw, nb_real* dg, const nb_real* dh) {
    const nb_stack* s = r->s;
    const int d = s->desc.d_model, n = nb__ar_count(s, j);
    const size_t stride = NB__PAD(3 * (2 * (size_t)s->desc.n_layers + 1));
    size_t astride;
    const nb_real* const a0 = nb__ar_a(r, j, &astride);
    nb__norm gm;
    int used = 1;
    gm.g = dw; gm.b = dg; gm.a = NULL;
    NB__OMP(parallel num_threads(nb_num_threads(r->ctx)) if(r->n >= NB__PAR_MIN))
    {
        int lo, hi, row, m, i;
        const int th = nb__team_rows(r->rows, &used, &lo, &hi);
        const nb__part pp = nb__slot_part(r, 0, th, &gm);
        nb_real *q = nb__rowbuf(r, th), *da = r->sc.ar_row + (size_t)th * stride;
        nb_real *rs = da + n, *u = rs + n;
        for (i = 0; i < d; i++) q[i] = w[i] * g[i];
        for (row = lo; row < hi; row++) {
            const size_t o = (size_t)row * d;
            const nb_real *a = a0 + (size_t)row * astride, *dhr = dh + o;
            nb_real sa = 0;
            for (m = 0; m < n; m++) {
                const int e = nb__ar_src(s, j, m);
                const nb_real* v = nb__ar_v(r, e) + o;
                da[m] = nb__dot(dhr, v, d);
                u[m] = nb__dot(q, v, d);
                rs[m] = 1 / nb__ar_rms(r, e)[row];
                sa += a[m] * da[m];
            }
            for (m = 0; m < n; m++) {
                const int e = nb__ar_src(s, j, m);
                const nb_real *v = nb__ar_v(r, e) + o, am = a[m];
                const nb_real c1 = am * (da[m] - sa) * rs[m], c2 = c1 * u[m] * rs[m] * rs[m] / d;
                nb_real *gv = nb__ar_g(r, e) + o, *pg = pp.g, *pb = pp.b;
                NB__OMP(simd)
                for (i = 0; i < d; i++) {
                    gv[i] += am * dhr[i] + c1 * q[i] - c2 * v[i];
                    pg[i] += c1 * v[i] * g[i];
                    pb[i] += c1 * v[i] * w[i];
                }
            }
        }
    }
    nb__slot_reduce(r, 0, used, &gm);
}

/* f_2l = attention(h_2l) (h_0 = x_0), p_2l = f_2l (+ p_{2l-1}); h_{2l+1} = the FFN's reader;
   p_{2l+1} = FFN(h_{2l+1}) (+ p_2l): the layer's output */
static nb_result nb__ar_layer_fwd(nb__run* r, int l, const nb__layer_tensors* p,
                                  const nb__layer_mem* c, nb_real* const out[],
                                  const nb_real* const in[]) {
    const int S = r->s->desc.residual.attn_res_block, j = 2 * l;
    nb_real* pa = r->sc.ar_p + (size_t)l * nb__stack_V(r->s);
    const nb_real* h = in[0];
    nb_result rc;
    if (l == 0) nb__ar_keep(r, -1); /* x_0 */
    if (l > 0) {
        nb__ar_read_fwd(r, j, p->arq[0], p->arg[0], nb__ar_h(r, j));
        h = nb__ar_h(r, j);
        nb__trace_layer(r, l, 0, "attn_res_h", h);
    }
    if ((rc = nb__sub_forward(r, l, 0, p, c, pa, h))) return rc;
    if (j % S) nb__lin(r, pa, 1, pa, 1, in[0]);
    nb__ar_keep(r, j);
    nb__trace_layer(r, l, 0, "attn_res_p", pa);
    nb__ar_read_fwd(r, j + 1, p->arq[1], p->arg[1], nb__ar_h(r, j + 1));
    nb__trace_layer(r, l, 1, "attn_res_h", nb__ar_h(r, j + 1));
    if ((rc = nb__sub_forward(r, l, 1, p, c, out[0], nb__ar_h(r, j + 1)))) return rc;
    if ((j + 1) % S) nb__lin(r, out[0], 1, out[0], 1, pa);
    nb__ar_keep(r, j + 1);
    nb__trace_layer(r, l, 1, "attn_res_p", out[0]);
    return NB_OK;
}

/* From dp_{2l+1} (dout: complete, later readers added theirs into it): the FFN's backward
   and reader; dp_2l = what readers put there + dout where p_{2l+1} continued p_2l; the
   attention's backward and reader (layer 0: h_0 = x_0); din = dp_{2l-1} likewise. The sources'
   gradients are zeroed by the output stage's backward. */
static nb_result nb__ar_layer_bwd(nb__run* r, int l, const nb__layer_tensors* p,
                                  nb__layer_tensors* g, const nb__layer_mem* c,
                                  nb_real* const din[], const nb_real* const dout[],
                                  const nb_real* const in[]) {
    const int S = r->s->desc.residual.attn_res_block, j = 2 * l;
    nb_real *dh = r->sc.tmp[3], *dpa = nb__ar_g(r, j);
    nb_result rc;
    if ((rc = nb__sub_backward(r, l, 1, p, g, c, dh, dout[0], nb__ar_h(r, j + 1)))) return rc;
    nb__ar_read_bwd(r, j + 1, p->arq[1], p->arg[1], g->arq[1], g->arg[1], dh);
    if ((j + 1) % S) nb__lin(r, dpa, 1, dpa, 1, dout[0]);
    if ((rc = nb__sub_backward(r, l, 0, p, g, c, dh, dpa, l ? nb__ar_h(r, j) : in[0])))
        return rc;
    if (l == 0) {
        nb__lin(r, din[0], 1, nb__ar_g(r, -1), 1, dh);
        return NB_OK;
    }
    nb__ar_read_bwd(r, j, p->arq[0], p->arg[0], g->arq[0], g->arg[0], dh);
    nb__lin(r, din[0], 1, nb__ar_g(r, j - 1), j % S ? 1 : 0, j % S ? dpa : NULL);
    return NB_OK;
}

/* the output's reader, then the final norm */
static nb_result nb__ar_out_fwd(nb__run* r, const nb__top_tensors* tp, nb_real* out) {
    const int J = 2 * r->s->desc.n_layers;
    nb__ar_read_fwd(r, J, tp->arq, tp->arg, nb__ar_h(r, J));
    return nb__final_fwd(r, tp, out, nb__ar_h(r, J));
}
static nb_result nb__ar_out_bwd(nb__run* r, const nb__top_tensors* tp, nb__top_tensors* tg,
                                nb_real* const dX[], const nb_real* dout) {
    const int J = 2 * r->s->desc.n_layers;
    const nb_real* dh = dout;
    int e;
    for (e = -1; e < J; e++) nb__zero(r->ctx, nb__ar_g(r, e), r->n);
    if (nb__top_on(r->s, NB__LNF)) {
        const nb_result rc = nb__block_norm_bwd(r, &tp->n[NB__LNF], &tg->n[NB__LNF], r->sc.tmp[4],
                                                dout, nb__ar_h(r, J), r->sc.st[NB__LNF], 0);
        if (rc) return rc;
        dh = r->sc.tmp[4];
    }
    nb__ar_read_bwd(r, J, tp->arq, tp->arg, tg->arq, tg->arg, dh);
    nb__copy(r, dX[0], nb__ar_g(r, J - 1));
    return NB_OK;
}

/* -- U-Net skips and the re-injection of x_0 (modded-nanogpt): one stream; layer l runs the
   plain layer on x~ = lambda_0 u + lambda_1 x_0, u = x_l + w h_{2n-1-l} for l >= n = L/2
   (else x_l), h_j = layer j's output x_{j+1} -- */
static const nb_real* nb__unet_skip(const nb__run* r, int l) { /* h_{2n-1-l} */
    return nb__hidden(r->s, r->sc.hidden, r->s->desc.n_layers - l, 0);
}
/* scratch: the gradient the re-injection sends to x_0 (j = -1), the skips to h_j (j < n) */
static nb_real* nb__unet_g(const nb__run* r, int j) {
    return r->sc.un_g + (size_t)(j + 1) * nb__stack_V(r->s);
}
static nb_result nb__unet_layer_fwd(nb__run* r, int l, const nb__layer_tensors* p,
                                    const nb__layer_mem* c, nb_real* const out[],
                                    const nb_real* const in[]) {
    const nb_real* x[1];
    x[0] = in[0];
    if (p->skw) {
        nb__lin(r, c->ux, 1, in[0], p->skw[0], nb__unet_skip(r, l));
        x[0] = c->ux;
    }
    if (p->x0l) {
        nb__lin(r, c->ux, p->x0l[0], x[0], p->x0l[1], nb__hidden(r->s, r->sc.hidden, 0, 0));
        x[0] = c->ux;
    }
    if (x[0] != in[0]) nb__trace_layer(r, l, -1, "x_mixed", x[0]);
    return nb__one_layer_fwd(r, l, p, c, out, x);
}
/* dx~ from the layer (with dh_l added where a skip reads h_l, l < n); then
   dlambda_0 += <dx~, u>, dlambda_1 += <dx~, x_0>, dx_0 += lambda_1 dx~, du = lambda_0 dx~;
   dw += <du, h_skip>, dh_skip += w du; dx_l = du (layer 0: + dx_0). Dots in row order. */
static nb_result nb__unet_layer_bwd(nb__run* r, int l, const nb__layer_tensors* p,
                                    nb__layer_tensors* g, const nb__layer_mem* c,
                                    nb_real* const din[], const nb_real* const dout[],
                                    const nb_real* const in[]) {
    const nb_stack* s = r->s;
    const int n = s->desc.n_layers / 2;
    const nb_real *x[1], *d[1], *x0 = nb__hidden(s, r->sc.hidden, 0, 0);
    double* rowdots = (double*)r->sc.tmp[0];
    nb_result rc;
    int j;
    x[0] = nb__unet_mixed(s, l) ? c->ux : in[0];
    d[0] = dout[0];
    if (l == s->desc.n_layers - 1)
        for (j = -1; j < n; j++) nb__zero(r->ctx, nb__unet_g(r, j), r->n);
    if (s->desc.residual.unet_skips && l < n) {
        nb__lin(r, r->sc.tmp[5], 1, dout[0], 1, nb__unet_g(r, l));
        d[0] = r->sc.tmp[5];
    }
    if ((rc = nb__one_layer_bwd(r, l, p, g, c, din, d, x, NULL))) return rc;
    if (p->x0l) {
        double du = nb__dot_rows(r, din[0], in[0], rowdots);
        if (p->skw) du += p->skw[0] * nb__dot_rows(r, din[0], nb__unet_skip(r, l), rowdots);
        g->x0l[0] += (nb_real)du;
        g->x0l[1] += (nb_real)nb__dot_rows(r, din[0], x0, rowdots);
        nb__lin(r, nb__unet_g(r, -1), 1, nb__unet_g(r, -1), p->x0l[1], din[0]);
        nb__lin(r, din[0], p->x0l[0], din[0], 0, NULL);
    }
    if (p->skw) {
        nb_real* gs = nb__unet_g(r, s->desc.n_layers - 1 - l);
        g->skw[0] += (nb_real)nb__dot_rows(r, din[0], nb__unet_skip(r, l), rowdots);
        nb__lin(r, gs, 1, gs, p->skw[0], din[0]);
    }
    if (l == 0 && p->x0l) nb__lin(r, din[0], 1, din[0], 1, nb__unet_g(r, -1));
    return NB_OK;
}

typedef struct nb__topology {
    nb_result (*layer_fwd)(nb__run* r, int l, const nb__layer_tensors* p, const nb__layer_mem* c,
                           nb_real* const out[], const nb_real* const in[]);
    nb_result (*layer_bwd)(nb__run* r, int l, const nb__layer_tensors* p, nb__layer_tensors* g,
                           const nb__layer_mem* c, nb_real* const din[],
                           const nb_real* const dout[], const nb_real* const in[]);
    /* the streams after layer L (the run's hidden states) -> out; dout -> their gradients dX */
    nb_result (*out_fwd)(nb__run* r, const nb__top_tensors* tp, nb_real* out);
    nb_result (*out_bwd)(nb__run* r, const nb__top_tensors* tp, nb__top_tensors* tg,
                         nb_real* const dX[], const nb_real* dout);
    int sub_residual;     /* 1: a sublayer adds its residual input itself (0: the topology's
                             own maps carry it, as hyper-connections do: the sublayer is B(u)) */
    int direct_io;        /* 1: without final and embedding norms the last layer may read dout
                             and the first write din themselves (no copies) */
    const char *x_trace, *dx_trace; /* trace names of streams 1.. (a printf format of k) */
} nb__topology;

static const nb__topology nb__topologies[] = {
    {nb__one_layer_fwd, nb__plain_layer_bwd, nb__one_out_fwd, nb__one_out_bwd, 1, 1, NULL, NULL},
    {nb__siamese_hp_layer_fwd, nb__siamese_hp_layer_bwd, nb__siamese_out_fwd,
     nb__siamese_out_bwd, 1, 0, "y", "grad_y_in"},
    {nb__siamese_pp_layer_fwd, nb__siamese_pp_layer_bwd, nb__siamese_out_fwd,
     nb__siamese_out_bwd, 1, 0, "y", "grad_y_in"},
    {nb__hc_layer_fwd, nb__hc_layer_bwd, nb__hc_out_fwd, nb__hc_out_bwd, 0, 0, "x%d", NULL},
    {nb__dwa_layer_fwd, nb__dwa_layer_bwd, nb__one_out_fwd, nb__one_out_bwd, 1, 0, NULL, NULL},
    {nb__ar_layer_fwd, nb__ar_layer_bwd, nb__ar_out_fwd, nb__ar_out_bwd, 0, 0, NULL, NULL},
    {nb__unet_layer_fwd, nb__unet_layer_bwd, nb__one_out_fwd, nb__one_out_bwd, 1, 0, NULL, NULL},
};
static const nb__topology* nb__topo(const nb_stack* s) { return &nb__topologies[s->topology]; }
static int nb__topo_residual(const nb_stack* s) { return nb__topo(s)->sub_residual; }

static void nb__layer_cache(const nb__run* r, int l, const nb_real* cache, nb__layer_mem* c) {
    size_t used = r->s->layers[l].cache_offset;
    nb__carve_layer(r->s, l, (nb_real*)(size_t)cache, &used, c);
}

/* One layer on run r: streams in -> out (each stream a B*T*d tensor at in[k]). */
static nb_result nb__layer_fwd(nb__run* r, int l, const nb_real* params, nb_real* const out[],
                               const nb_real* const in[], nb_real* cache) {
    nb__layer_tensors p;
    nb__layer_mem c;
    int k;
    if (r->s->desc.residual.value_residual && r->s->skip[0]) /* no V_0 to mix */
        return nb__fail(r->ctx, NB_ERR_CONFIG, "nb_stack_forward/nb_layer_forward: layer 0 is "
                        "skipped (nb_stack.skip) but value_residual mixes its values into every "
                        "later layer");
    if (r->s->skip[l] && (r->s->desc.residual.dwa || r->s->desc.residual.attn_res ||
                          nb__unet(r->s)))
        return nb__fail(r->ctx, NB_ERR_CONFIG, "nb_stack_forward: layer %d is skipped "
                        "(nb_stack.skip) but residual.%s mixes layers' outputs into later "
                        "inputs", l, nb__cross_layer(r->s));
    if (r->s->skip[l]) {
        for (k = 0; k < r->s->streams; k++) nb__copy(r, out[k], in[k]);
        return NB_OK;
    }
    if (r->sc.gains)
        nb__fill_gains(r->s, params, r->sc.gains, r->s->layers[l].tensor0,
                       r->s->layers[l].tensor0 + r->s->layers[l].n_tensors, r->s->layers[l].gain0);
    nb__bind_layer(r->s, l, params, r->sc.gains, &p);
    nb__bind_weights16(r->s, params, &p);
    nb__layer_cache(r, l, cache, &c);
    return nb__topo(r->s)->layer_fwd(r, l, &p, &c, out, in);
}

static nb_result nb__layer_bwd(nb__run* r, int l, const nb_real* params, nb_real* grads,
                               nb_real* const din[], const nb_real* const dout[],
                               const nb_real* const in[], const nb_real* cache) {
    nb__layer_tensors p, g;
    nb__layer_mem c;
    nb_result rc;
    int k;
    if (r->s->desc.residual.value_residual && l == r->s->desc.n_layers - 1) /* first backward */
        memset(r->sc.dv0, 0, (size_t)r->rows * r->s->layers[0].attn.desc.n_kv_heads *
                                 r->s->layers[0].attn.head_dim * sizeof(nb_real));
    if (r->s->desc.residual.value_embeds && l == r->s->desc.n_layers - 1) { /* likewise */
        if (!r->s->value_embeds_grad)
            return nb__fail(r->ctx, NB_ERR_NULL, "nb_stack_backward/nb_layer_backward: "
                            "residual.value_embeds: no gradient rows are bound "
                            "(nb_stack_set_value_embeds)");
        memset(r->s->value_embeds_grad, 0, (size_t)r->s->desc.residual.value_embeds * r->rows *
                                               r->s->layers[0].attn.desc.n_kv_heads *
                                               r->s->layers[0].attn.head_dim * sizeof(nb_real));
    }
    if (r->s->skip[l]) {
        for (k = 0; k < r->s->streams; k++) nb__copy(r, din[k], dout[k]);
        return NB_OK;
    }
    nb__bind_layer(r->s, l, params, r->sc.gains, &p);
    nb__bind_weights16(r->s, params, &p);
    nb__bind_layer(r->s, l, grads, NULL, &g);
    nb__layer_cache(r, l, cache, &c);
    if ((rc = nb__topo(r->s)->layer_bwd(r, l, &p, &g, &c, din, dout, in))) return rc;
    for (k = 0; k < r->s->streams; k++)
        if ((rc = nb__finite(r, din[k], r->n, "the input gradient", l))) return rc;
    return NB_OK;
}

NBDEF nb_result nb_layer_forward(nb_ctx* ctx, const nb_stack* s, int l, const nb_real* params,
                                 nb_real* out, const nb_real* in, int B, int T, nb_real* cache,
                                 nb_real* scratch) {
    nb__run r;
    nb_real* o[NB__NS];
    const nb_real* i[NB__NS];
    int k;
    const void* const need[5] = {params, out, in, cache, scratch};
    nb_result rc = nb__check_run(ctx, "nb_layer_forward", s, B, T,
                                 "params out in cache scratch", need);
    if (rc) return rc;
    NB__CHECK(l < 0 || l >= s->desc.n_layers, NB_ERR_SHAPE,
              "nb_layer_forward: layer %d out of range [0, %d)", l, s->desc.n_layers);
    NB__CHECK(nb__cross_layer(s) != NULL, NB_ERR_CONFIG, "nb_layer_forward: residual.%s mixes "
              "earlier layers' outputs into a layer's input: run the stack (nb_stack_forward)",
              nb__cross_layer(s));
    nb__run_init(&r, ctx, s, B, T, cache, scratch);
    for (k = 0; k < s->streams; k++) { o[k] = out + k * r.n; i[k] = in + k * r.n; }
    return nb__layer_fwd(&r, l, params, o, i, cache);
}

NBDEF nb_result nb_layer_backward(nb_ctx* ctx, const nb_stack* s, int l, const nb_real* params,
                                  nb_real* grads, nb_real* din, const nb_real* dout,
                                  const nb_real* in, int B, int T, const nb_real* cache,
                                  nb_real* scratch) {
    nb__run r;
    nb_real* di[NB__NS];
    const nb_real *d[NB__NS], *i[NB__NS];
    int k;
    const void* const need[5] = {params, grads, din, dout, in};
    nb_result rc = nb__check_run(ctx, "nb_layer_backward", s, B, T,
                                 "params grads din dout in", need);
    if (rc) return rc;
    NB__CHECK(!cache || !scratch, NB_ERR_NULL, "nb_layer_backward: cache and scratch are required");
    NB__CHECK(l < 0 || l >= s->desc.n_layers, NB_ERR_SHAPE,
              "nb_layer_backward: layer %d out of range [0, %d)", l, s->desc.n_layers);
    NB__CHECK(nb__cross_layer(s) != NULL, NB_ERR_CONFIG, "nb_layer_backward: residual.%s mixes "
              "earlier layers' outputs into a layer's input: run the stack (nb_stack_backward)",
              nb__cross_layer(s));
    /* both sublayers' caches before anything is written (the FFN runs first) */
    if ((rc = nb__layer_cache_ok(ctx, "nb_layer_backward", s, l, cache, B, T))) return rc;
    nb__run_init(&r, ctx, s, B, T, cache, scratch);
    for (k = 0; k < s->streams; k++) {
        di[k] = din + k * r.n; d[k] = dout + k * r.n; i[k] = in + k * r.n;
    }
    return nb__layer_bwd(&r, l, params, grads, di, d, i, cache);
}

/* The stack's input stage backward, x_0 = N_e(c E) (the embedding norm and embed_scale c, either
   optional), from dx0 (the streams' sum): with g = N_e'(dx0) (dx0 without the norm),
   dE = c g (overwritten, or added when acc) and dc += sum E g. e: E (the cache's copy); spare: a
   free B*T*d buffer. */
static nb_result nb__embed_bwd(nb__run* r, const nb__top_tensors* tp, nb__top_tensors* tg,
                               nb_real* din, const nb_real* dx0, nb_real* spare, int acc) {
    const nb_real* g = dx0;
    nb_result rc;
    if (nb__top_on(r->s, NB__EMBED)) {
        const nb_real* xin = r->sc.e;
        if (tp->es) { /* the norm's input c E again, into the scratch the forward used none of */
            nb__lin(r, r->sc.tmp[4], *tp->es, r->sc.e, 0, NULL);
            xin = r->sc.tmp[4];
        }
        rc = nb__block_norm_bwd(r, &tp->n[NB__EMBED], &tg->n[NB__EMBED], tp->es ? spare : din,
                                dx0, xin, r->sc.st[NB__EMBED], tp->es ? 0 : acc);
        if (rc || !tp->es) return rc;
        g = spare;
    }
    {   /* one thread, in order: deterministic */
        double dc = 0;
        size_t i;
        for (i = 0; i < r->n; i++) dc += (double)r->sc.e[i] * g[i];
        tg->es[0] += (nb_real)dc;
    }
    nb__lin(r, din, *tp->es, g, acc ? 1 : 0, acc ? din : NULL);
    return NB_OK;
}

/* The trace of layer l's streams (name, then streams 1.. by the format more, when not NULL) */
static void nb__trace_streams(const nb__run* r, int l, const char* more, const char* name,
                              nb_real* const x[]) {
    int k;
    nb__trace_layer(r, l, -1, name, x[0]);
    for (k = 1; k < r->s->streams && more; k++) {
        char buf[16];
        snprintf(buf, sizeof buf, more, k);
        nb__trace_layer(r, l, -1, buf, x[k]);
    }
}

/* whether the n bytes at a and at b share any (addresses compared as integers) */
static int nb__overlap(const void* a, const void* b, size_t n) {
    const size_t x = (size_t)a, y = (size_t)b;
    return x < y + n && y < x + n;
}

/* nb_stack_forward after its checks: the layers on the run r */
static nb_result nb__stack_fwd(nb__run* rp, const nb_real* params, nb_real* out,
                               const nb_real* in, nb_real* cache) {
    nb__run r = *rp;
    const nb_stack* s = r.s;
    nb__top_tensors tp;
    nb_result rc;
    int l, k;
    if (r.sc.gains) { /* the embedding norm's, then the final norms' */
        nb__fill_gains(s, params, r.sc.gains, 0, s->layers[0].tensor0, 0);
        nb__fill_gains(s, params, r.sc.gains, nb__final_tensor0(s), s->n_tensors,
                       s->gain_final0);
    }
    nb__bind_top(s, params, r.sc.gains, &tp);
    if ((rc = nb__finite(&r, in, r.n, "the stack's input (in)", -1))) return rc;
    /* x_0 (= y_0 for SiameseNorm) is the input (times embed_scale), or its norm; e keeps the
       input for the backward */
    if (r.sc.e) nb__copy(&r, r.sc.e, in);
    if (tp.es) { /* into x_0, the embedding norm's input then */
        nb__lin(&r, nb__hidden(s, r.sc.hidden, 0, 0), *tp.es, in, 0, NULL);
        in = nb__hidden(s, r.sc.hidden, 0, 0);
    }
    if (nb__top_on(s, NB__EMBED)) {
        rc = nb__block_norm_fwd(&r, &tp.n[NB__EMBED], nb__hidden(s, r.sc.hidden, 0, 0), in,
                                r.sc.st[NB__EMBED]);
        if (rc) return rc;
    } else if (!tp.es) {
        nb__copy(&r, nb__hidden(s, r.sc.hidden, 0, 0), in);
    }
    for (k = 1; k < s->streams; k++) /* every stream starts at x_0 */
        nb__copy(&r, nb__hidden(s, r.sc.hidden, 0, k), nb__hidden(s, r.sc.hidden, 0, 0));
    nb__trace_layer(&r, -1, -1, "x0", nb__hidden(s, r.sc.hidden, 0, 0));
    for (l = 0; l < s->desc.n_layers; l++) {
        nb_real* o[NB__NS];
        const nb_real* i[NB__NS];
        for (k = 0; k < NB__NS; k++) {
            o[k] = nb__hidden(s, r.sc.hidden, l + 1, k < s->streams ? k : 0);
            i[k] = nb__hidden(s, r.sc.hidden, l, k < s->streams ? k : 0);
        }
        if ((rc = nb__layer_fwd(&r, l, params, o, i, cache))) return rc;
        nb__trace_streams(&r, l, nb__topo(s)->x_trace, "x", o);
    }
    return nb__topo(s)->out_fwd(&r, &tp, out);
}

NBDEF nb_result nb_stack_forward(nb_ctx* ctx, const nb_stack* s, const nb_real* params,
                                 nb_real* out, const nb_real* in, int B, int T, nb_real* cache,
                                 nb_real* scratch) {
    nb__run r;
    const void* const need[5] = {params, out, in, cache, scratch};
    nb_result rc = nb__check_run(ctx, "nb_stack_forward", s, B, T,
                                 "params out in cache scratch", need);
    nb__prof_env env;
    if (rc) return rc;
    env = nb__prof_enter(ctx);
    nb__run_init(&r, ctx, s, B, T, cache, scratch);
    nb__hdr_put(r.sc.hdr, 0, 0, 0, 0); /* not a complete forward until the end */
    rc = nb__stack_fwd(&r, params, out, in, cache);
    nb__prof_leave(ctx, env);
    if (!rc) nb__hdr_put(r.sc.hdr, NB__MAGIC_STACK, nb__stack_id(s), B, T);
    if (!rc) nb__trace_layer(&r, -1, -1, "out", out);
    return rc;
}

/* The weight matrices, whose gradient one dW GEMM of the layer's backward writes whole */
static int nb__dw_written(nb_tensor_kind kind) {
    return kind == NB_TENSOR_QKV || kind == NB_TENSOR_ATTN_OUT || kind == NB_TENSOR_FF_IN ||
           kind == NB_TENSOR_FF_OUT;
}
/* Tensors [t0, t0 + n) of the table are about to get their gradients: with
   param_grads = OVERWRITE they start from zero here, right before the backward that writes them
   (the range is then in cache; this replaces the trainer's zeroing pass, it adds none), all
   but the weight matrices when r->write_dw (their dW GEMMs write them, beta 0). */
static void nb__grads_start(const nb__run* r, nb_real* grads, int t0, int n) {
    const nb_stack* s = r->s;
    int t;
    if (s->desc.run.param_grads != NB_GRAD_OVERWRITE) return;
    for (t = t0; t < t0 + n; t++)
        if (!(r->write_dw && nb__dw_written(s->tensors[t].kind)))
            nb__zero(r->ctx, grads + s->tensors[t].offset, s->tensors[t].count);
}
/* Tensors [t0, t0 + n) are final: one grads_ready call per run of tensors contiguous in the
   buffer (a whole layer in the stack's own layout, as before layouts existed). */
static void nb__grads_ready(nb_ctx* ctx, const nb_stack* s, int layer, int t0, int n) {
    int t = t0;
    if (!ctx || !ctx->grads_ready) return;
    while (t < t0 + n) {
        const size_t off = s->tensors[t].offset;
        size_t count = s->tensors[t].count;
        for (t++; t < t0 + n && s->tensors[t].offset == off + count; t++)
            count += s->tensors[t].count;
        if (count) {
            const double h0 = ctx->profile ? nb__seconds() : 0;
            ctx->grads_ready(ctx->grads_ready_user, layer, off, count);
            if (ctx->profile) ctx->profile->hooks += nb__seconds() - h0;
        }
    }
}

static nb_result nb__stack_bwd(nb_ctx* ctx, const nb_stack* s, const nb_real* params,
                               nb_real* grads, nb_real* din, const nb_real* dout, int B, int T,
                               const nb_real* cache, nb_real* scratch);
NBDEF nb_result nb_stack_backward(nb_ctx* ctx, const nb_stack* s, const nb_real* params,
                                  nb_real* grads, nb_real* din, const nb_real* dout, int B,
                                  int T, const nb_real* cache, nb_real* scratch) {
    const nb__prof_env env = nb__prof_enter(ctx);
    const nb_result rc = nb__stack_bwd(ctx, s, params, grads, din, dout, B, T, cache, scratch);
    nb__prof_leave(ctx, env);
    return rc;
}
static nb_result nb__stack_bwd(nb_ctx* ctx, const nb_stack* s, const nb_real* params,
                               nb_real* grads, nb_real* din, const nb_real* dout, int B, int T,
                               const nb_real* cache, nb_real* scratch) {
    nb__run r;
    nb__top_tensors tp, tg;
    nb_real *cur[NB__NS], *nxt[NB__NS];
    const void* const need[5] = {params, grads, din, dout, cache};
    nb_result rc = nb__check_run(ctx, "nb_stack_backward", s, B, T,
                                 "params grads din dout cache", need);
    const int L = s ? s->desc.n_layers : 0;
    const int din_acc = s && s->desc.run.input_grad == NB_GRAD_ACCUMULATE;
    const int top0 = s ? nb__final_tensor0(s) : 0, n_top = s ? s->n_tensors - top0 : 0;
    int l, k, ns, top_is_dout, into_din;
    if (rc) return rc;
    NB__CHECK(!scratch, NB_ERR_NULL, "nb_stack_backward: scratch is required");
    nb__run_init(&r, ctx, s, B, T, cache, scratch);
    /* every cache this call reads, before anything is written */
    NB__CHECK(!nb__hdr_ok(r.sc.hdr, NB__MAGIC_STACK, nb__stack_id(s), B, T), NB_ERR_CONFIG,
              "nb_stack_backward: the cache does not hold a forward of this stack with B=%d, T=%d",
              B, T);
    for (l = 0; l < L; l++)
        if ((rc = nb__layer_cache_ok(ctx, "nb_stack_backward", s, l, cache, B, T))) return rc;
    NB__CHECK(din_acc && din == dout, NB_ERR_VALUE, "nb_stack_backward: din may not be dout "
              "when input_grad accumulates (din += ...)");
    NB__CHECK(din != dout && nb__overlap(din, dout, r.n * sizeof(nb_real)), NB_ERR_VALUE,
              "nb_stack_backward: din and dout overlap in part (din may be dout itself, with "
              "input_grad OVERWRITE, or apart from it)");
    nb__bind_top(s, params, r.sc.gains, &tp);
    nb__bind_top(s, grads, NULL, &tg);
    if ((rc = nb__finite(&r, dout, r.n, "the stack's output gradient (dout)", -1))) return rc;
    ns = s->streams > 2 ? s->streams : 2;
    for (k = 0; k < ns; k++) { cur[k] = r.sc.grad[k]; nxt[k] = r.sc.grad[ns + k]; }
    /* Without final and embedding norms the last layer reads dout and the first writes din
       directly (no copies); din may be dout: a layer reads dout before it writes din. */
    top_is_dout = nb__topo(s)->direct_io && !nb__top_on(s, NB__LNF);
    into_din = nb__topo(s)->direct_io && !nb__top_on(s, NB__EMBED) && !din_acc && !tp.es;
    nb__grads_start(&r, grads, top0, n_top);
    r.chained = 1;
    if ((rc = nb__topo(s)->out_bwd(&r, &tp, &tg, cur, dout))) return rc;
    nb__grads_ready(ctx, s, -1, top0, n_top);
    for (l = L - 1; l >= 0; l--) {
        const nb_real* i[NB__NS];
        const nb_real* d[NB__NS];
        nb_real *o[NB__NS], *t;
        for (k = 0; k < ns; k++) {
            i[k] = nb__hidden(s, r.sc.hidden, l, k < s->streams ? k : 0);
            d[k] = cur[k];
            o[k] = nxt[k];
        }
        if (l == L - 1 && top_is_dout) d[0] = dout;
        if (l == 0 && into_din) o[0] = din;
        r.write_dw = s->desc.run.param_grads == NB_GRAD_OVERWRITE && !s->skip[l];
        nb__grads_start(&r, grads, s->layers[l].tensor0, s->layers[l].n_tensors);
        if ((rc = nb__layer_bwd(&r, l, params, grads, o, d, i, cache))) return rc;
        nb__grads_ready(ctx, s, l, s->layers[l].tensor0, s->layers[l].n_tensors);
        nb__trace_streams(&r, l, nb__topo(s)->dx_trace, "grad_x_in", o);
        for (k = 0; k < ns; k++) { t = cur[k]; cur[k] = nxt[k]; nxt[k] = t; }
    }
    r.write_dw = 0;
    /* every stream started at x_0 (both SiameseNorm streams, the n hyper-connected ones) */
    for (k = 1; k < s->streams; k++) nb__lin(&r, cur[0], 1, cur[0], 1, cur[k]);
    if (into_din) {
        /* the first layer wrote din */
    } else if (!nb__top_on(s, NB__EMBED) && !tp.es) { /* dE = the sum of the streams' dx_0 */
        if (din_acc) nb__lin(&r, din, 1, cur[0], 1, din);
        else nb__copy(&r, din, cur[0]);
    } else {
        nb__grads_start(&r, grads, 0, s->layers[0].tensor0);
        if ((rc = nb__embed_bwd(&r, &tp, &tg, din, cur[0], nxt[0], din_acc))) return rc;
        nb__grads_ready(ctx, s, -1, 0, s->layers[0].tensor0);
    }
    nb__trace_layer(&r, -1, -1, "grad_in", din);
    return NB_OK;
}

/* ---- initialization ---- */

/* splitmix64: a fixed stream per (seed, tensor), so values do not depend on threads */
static unsigned long long nb__mix(unsigned long long* s) {
    unsigned long long z = (*s += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}
static double nb__unif(unsigned long long* s) { /* (0, 1) */
    return ((double)(nb__mix(s) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

NBDEF nb_result nb_fill_normal(nb_real* x, size_t n, double std, double cutoff,
                               unsigned long long seed) {
    unsigned long long st = seed;
    size_t i;
    if (n && !x) return NB_ERR_NULL;
    if (!(std >= 0) || !nb__fin(std) || nb__isnan(cutoff) || (cutoff > 0 && cutoff < 0.5))
        return NB_ERR_VALUE;
    for (i = 0; i < n; i++) {
        double z;
        do { /* Box-Muller, one value per pair; rejection keeps |z| <= cutoff */
            z = sqrt(-2 * log(nb__unif(&st))) * cos(6.283185307179586 * nb__unif(&st));
        } while (cutoff > 0 && fabs(z) > cutoff);
        x[i] = (nb_real)(std * z);
    }
    return NB_OK;
}

static double nb__base_std(const nb_stack* s, nb_init_scheme scheme, double std0) {
    if (std0 > 0) return std0;
    switch (scheme) {
    case NB_INIT_MIXLN: case NB_INIT_MIXLN_SCALED: case NB_INIT_GPT2: case NB_INIT_TORCHTITAN:
        return 0.02;
    case NB_INIT_NGPT: return 1 / sqrt((double)s->desc.d_model);
    default: return 1 / sqrt(2.5 * s->desc.d_model);
    }
}

NBDEF nb_result nb_init_io_std(const nb_stack* s, nb_init_scheme scheme, double std0,
                               double* embedding_std, double* head_std) {
    double s0, d, e, h;
    if (!s) return NB_ERR_NULL;
    if ((int)scheme < NB_INIT_DEFAULT || scheme > NB_INIT_TORCHTITAN || !(std0 >= 0) ||
        !nb__fin(std0))
        return NB_ERR_VALUE;
    s0 = nb__base_std(s, scheme, std0); d = s->desc.d_model; e = s0; h = s0;
    switch (scheme) {
    case NB_INIT_MEGATRON: h = 1 / sqrt(d); break;
    case NB_INIT_MITCHELL: e = h = 1 / sqrt(d); break;
    case NB_INIT_MIXLN: case NB_INIT_MIXLN_SCALED: e = sqrt(0.4); break;
    case NB_INIT_DEEPNORM: e = h = 1 / sqrt(d); break;
    case NB_INIT_TORCHTITAN: e = 1; h = 1 / sqrt(d); break;
    default: break;
    }
    if (embedding_std) *embedding_std = e;
    if (head_std) *head_std = h;
    return NB_OK;
}

/* A block norm whose output enters attention, by its tensor name "blocks.<l>.<norm>.alpha". */
static int nb__feeds_attention(const char* name) {
    static const int norms[3] = {NB__ATTN_IN, NB__ATTN_Y, NB__ATTN_INPUT};
    const char* dot = strchr(name, '.');
    int k;
    dot = dot ? strchr(dot + 1, '.') : NULL;
    for (k = 0; dot && k < 3; k++) {
        const size_t n = strlen(nb__norm_names[norms[k]]);
        if (strncmp(dot + 1, nb__norm_names[norms[k]], n) == 0 && dot[1 + n] == '.') return 1;
    }
    return 0;
}

/* A hyper-connection's tensor. mHC, IHC: fn N(0, 0.02^2) (the one init in code: the HF port
   of DeepSeek-V4; zero would keep the streams identical for ever), base 0, scales 0.01 (the
   mHC paper's gating init); mHC-lite's base: comb's logits 0 for the identity, -8 for the
   other permutations (its code's). HC (Alg. 2): static_alpha [e_(k mod n) | I], k = 2l
   (attention), 2l + 1 (FFN); static_beta 1; dynamic projections 0, scales 0.01. */
static void nb__init_hc(const nb_stack* s, const nb_tensor_info* ti, nb_real* x,
                        unsigned long long seed) {
    const int n = s->streams, hc = s->desc.hyper.kind == NB_HYPER_HC;
    size_t i;
    if (ti->kind == NB_TENSOR_HC_SCALE) {
        for (i = 0; i < ti->count; i++) x[i] = (nb_real)0.01;
    } else if (ti->kind == NB_TENSOR_HC_FN && !hc) {
        (void)nb_fill_normal(x, ti->count, 0.02, 0, seed); /* cannot fail */
    } else if (ti->kind == NB_TENSOR_HC_BASE && s->desc.hyper.kind == NB_HYPER_MHC_LITE &&
               ti->count == (size_t)nb__hc_m(s)) { /* a sublayer's (the head's has n) */
        for (i = 0; i < ti->count; i++) x[i] = (nb_real)(i <= (size_t)2 * n ? 0 : -8);
    } else if (ti->kind == NB_TENSOR_HC_BASE && hc && ti->cols > 1) {
        const int k = (2 * ti->layer + (strstr(ti->name, "hc_ffn") != NULL)) % n;
        int row, c;
        for (row = 0; row < n; row++)
            for (c = 0; c <= n; c++)
                x[row * (n + 1) + c] = (nb_real)(c == 0 ? row == k : c - 1 == row);
    } else {
        const nb_real v = (nb_real)(ti->kind == NB_TENSOR_HC_BASE && hc); /* static_beta */
        for (i = 0; i < ti->count; i++) x[i] = v;
    }
}

/* A tensor whose init does not depend on the scheme (gains, biases, branch scales, the value
   residual's lambdas, hyper-connections, nGPT's scales, DyT's and Derf's scalars): written,
   and 1; else 0. */
static int nb__init_fixed(const nb_stack* s, const nb_tensor_info* ti, nb_real* x,
                          unsigned long long* ts) {
    const double d = s->desc.d_model;
    size_t i;
    if (ti->kind == NB_TENSOR_GAIN || ti->kind == NB_TENSOR_SIAMESE_GAMMA) {
        const int zero = ti->kind == NB_TENSOR_GAIN && s->desc.norm.gain_offset; /* 1 + 0 */
        for (i = 0; i < ti->count; i++) x[i] = zero ? 0 : 1;
    } else if (ti->kind == NB_TENSOR_BIAS) {
        memset(x, 0, ti->count * sizeof(nb_real));
    } else if (ti->kind == NB_TENSOR_REZERO || ti->kind == NB_TENSOR_LAYERSCALE) {
        const double v = ti->kind == NB_TENSOR_REZERO ? 0 : s->desc.residual.layerscale_init;
        for (i = 0; i < ti->count; i++) x[i] = (nb_real)v;
    } else if (ti->kind == NB_TENSOR_VALUE_RESIDUAL || ti->kind == NB_TENSOR_VALUE_EMBED) {
        /* ResFormer's fixed form as the start; modded-nanogpt's sa_lambdas [0.5, 0.5] */
        x[0] = x[1] = (nb_real)0.5;
    } else if (ti->kind == NB_TENSOR_DWA) { /* DenseFormer: the plain stack, x_{l+1} = h_{l+1} */
        for (i = 0; i < ti->count; i++) x[i] = (nb_real)(i + 1 == ti->count);
    } else if (ti->kind == NB_TENSOR_SKIP_WEIGHT || ti->kind == NB_TENSOR_X0_LAMBDAS) {
        x[0] = 1; /* the code's skip_weights and lambdas [1, 0] */
        if (ti->count > 1) x[1] = 0;
    } else if (ti->kind == NB_TENSOR_ATTN_RES_QUERY || ti->kind == NB_TENSOR_ATTN_RES_GAIN) {
        const nb_real v = (nb_real)(ti->kind == NB_TENSOR_ATTN_RES_GAIN); /* uniform weights */
        for (i = 0; i < ti->count; i++) x[i] = v;
    } else if (ti->kind >= NB_TENSOR_HC_FN && ti->kind <= NB_TENSOR_HC_SCALE) {
        nb__init_hc(s, ti, x, nb__mix(ts));
    } else if (ti->kind == NB_TENSOR_EMBED_SCALE) {
        x[0] = (nb_real)sqrt(d);
    } else if (ti->kind == NB_TENSOR_INTERP || ti->kind == NB_TENSOR_QK_SCALE ||
               ti->kind == NB_TENSOR_FF_SCALE) { /* nGPT's storage: its init_scaling */
        const nb_real v = (nb_real)(ti->kind == NB_TENSOR_FF_SCALE ? 1 : 1 / sqrt(d));
        for (i = 0; i < ti->count; i++) x[i] = v;
    } else if (ti->kind == NB_TENSOR_DYT_ALPHA) { /* DyT's LLaMA code: one init before attention */
        x[0] = (nb_real)(nb__feeds_attention(ti->name) ? s->desc.norm.dyt_alpha_attn
                                                       : s->desc.norm.dyt_alpha);
        if (ti->count > 1) x[1] = 0; /* Derf's shift */
    } else {
        return 0;
    }
    return 1;
}

/* A projection matrix by the scheme: its normal draw's std and cutoff (s0 the scheme's base
   std); DeepNorm's fused QKV draws each of its three parts itself. The sink logits as
   torchtitan's gpt-oss draws them in every scheme: trunc_normal_(mean 0, std its block's
   0.02 / sqrt(2 (l + 1)), bounds +-2, far outside), with s0 for 0.02. */
static void nb__init_matrix(const nb_stack* s, const nb_tensor_info* ti, nb_real* x,
                            nb_init_scheme scheme, double s0, unsigned long long* ts) {
    const int L = s->desc.n_layers, l = ti->layer;
    const int out_proj = ti->kind == NB_TENSOR_ATTN_OUT || ti->kind == NB_TENSOR_FF_OUT;
    const double d = s->desc.d_model, f = s->desc.ffn.d_ff;
    double std = s0, cut = 3;
    if (ti->kind == NB_TENSOR_SINKS) {
        scheme = NB_INIT_DEPTH_SCALED;
        cut = 0;
    }
    switch (scheme) {
    case NB_INIT_DEPTH_SCALED:
        if (out_proj || ti->kind == NB_TENSOR_SINKS) std = s0 / sqrt(2.0 * (l + 1));
        break;
    case NB_INIT_MEGATRON: if (out_proj) std = s0 / sqrt(2.0 * L); break;
    case NB_INIT_MITCHELL:
        std = ti->kind == NB_TENSOR_ATTN_OUT ? 1 / sqrt(2 * d * (l + 1))
            : ti->kind == NB_TENSOR_FF_OUT ? 1 / sqrt(2 * f * (l + 1)) : 1 / sqrt(d);
        break;
    case NB_INIT_MIXLN: cut = 0; break;
    case NB_INIT_MIXLN_SCALED:
        cut = 0;
        /* Mix-LN scales its Pre-LN layers only (scale_post_pre) */
        if (out_proj && !s->layers[l].desc.attn.post_norm) std = s0 / sqrt(2.0 * L);
        break;
    case NB_INIT_GPT2: case NB_INIT_NGPT:
        cut = 0;
        if (out_proj) std = s0 / sqrt(2.0 * L);
        break;
    case NB_INIT_TORCHTITAN:
        cut = 0;
        if (out_proj) std = s0 / sqrt(2.0 * (l + 1));
        if (ti->kind == NB_TENSOR_FF_IN && s->ffn.desc.ffn.type == NB_FFN_SWIGLU) {
            const size_t half = ti->count / 2; /* [up | gate] rows: up (w3) scaled, gate s0 */
            (void)nb_fill_normal(x, half, s0 / sqrt(2.0 * (l + 1)), 0, nb__mix(ts));
            (void)nb_fill_normal(x + half, half, s0, 0, nb__mix(ts));
            return;
        }
        break;
    case NB_INIT_DEEPNORM: {
        /* xavier normal per projection: std = gain sqrt(2 / (fan_in + fan_out)); gain beta on
           V, W_o and the FFN, 1 on Q and K */
        const double beta = s->desc.preset == NB_PRESET_DEEPNORM_MIXLN ? pow(8.0 * L, 0.25)
                                                                       : pow(8.0 * L, -0.25);
        cut = 0;
        if (ti->kind == NB_TENSOR_QKV) {
            const nb_attn_plan* ap = &s->layers[l].attn;
            const int kv = ap->desc.n_kv_heads * ap->head_dim;
            const int rows[3] = {(int)d, kv, kv};
            const double gains[3] = {1, 1, beta};
            int part;
            for (part = 0; part < 3; part++) {
                /* cannot fail: x is not NULL, the std finite, no cutoff */
                (void)nb_fill_normal(x, (size_t)rows[part] * (size_t)d,
                                     gains[part] * sqrt(2 / (d + rows[part])), 0, nb__mix(ts));
                x += (size_t)rows[part] * (size_t)d;
            }
            return;
        }
        /* fused SwiGLU ff_proj: each half is its own (f x d) projection */
        std = beta * sqrt(2.0 / (ti->kind == NB_TENSOR_FF_IN ? d + f
                                 : ti->kind == NB_TENSOR_FF_OUT ? d + f : 2 * d));
        break;
    }
    default: break;
    }
    (void)nb_fill_normal(x, ti->count, std, cut, nb__mix(ts)); /* cannot fail, as above */
}

NBDEF nb_result nb_stack_init_params(nb_ctx* ctx, const nb_stack* s, nb_real* params,
                                     nb_init_scheme scheme, double std0, unsigned long long seed) {
    double s0;
    int t;
    NB__CHECK(!s || !s->tensors || !params, NB_ERR_NULL,
              "nb_stack_init_params: an initialized stack s and params are required (%s is NULL)",
              params ? "s" : "params");
    if (scheme == NB_INIT_DEFAULT) scheme = NB_INIT_NORMAL;
    NB__CHECK((int)scheme < NB_INIT_NORMAL || scheme > NB_INIT_TORCHTITAN, NB_ERR_CONFIG,
              "nb_stack_init_params: unknown scheme %d", (int)scheme);
    NB__CHECK(!(std0 >= 0) || !nb__fin(std0), NB_ERR_VALUE,
              "nb_stack_init_params: std0 (%g) must be finite and >= 0", std0);
    s0 = nb__base_std(s, scheme, std0);
    for (t = 0; t < s->n_tensors; t++) {
        const nb_tensor_info* ti = &s->tensors[t];
        nb_real* x = params + ti->offset;
        unsigned long long ts = seed ^ (0xD1B54A32D192ED03ULL * (unsigned long long)(t + 1));
        if (!nb__init_fixed(s, ti, x, &ts)) nb__init_matrix(s, ti, x, scheme, s0, &ts);
    }
    return scheme == NB_INIT_NGPT ? nb_stack_normalize(ctx, s, params) : NB_OK;
}

/* ---- after the optimizer step: nb_stack_normalize (nGPT), nb_stack_qk_clip ---- */

/* The vectors along d of matrix x (rows x cols): its rows (by_rows) or its columns, scaled to
   unit L2 norm when scale != 0; returns 1 when one has a zero or non-finite norm. Columns run
   in blocks of 64 whose sums of squares stay on the stack. */
static int nb__unit_vectors(nb_ctx* ctx, nb_real* x, int rows, int cols, int by_rows, int scale) {
    const int n = by_rows ? rows : (cols + 63) / 64;
    int bad = 0, i;
    (void)ctx;
    NB__OMP(parallel for schedule(static) num_threads(nb_num_threads(ctx)) reduction(|:bad)
            if((size_t)rows * cols >= NB__PAR_MIN))
    for (i = 0; i < n; i++) {
        double ss[64];
        const int c0 = by_rows ? 0 : 64 * i, w = by_rows ? 1 : (cols - c0 < 64 ? cols - c0 : 64);
        int r, c;
        for (c = 0; c < w; c++) ss[c] = 0;
        if (by_rows) {
            const nb_real* row = x + (size_t)i * cols;
            for (c = 0; c < cols; c++) ss[0] += (double)row[c] * row[c];
        } else {
            for (r = 0; r < rows; r++)
                for (c = 0; c < w; c++) ss[c] += (double)x[(size_t)r * cols + c0 + c] *
                                                 x[(size_t)r * cols + c0 + c];
        }
        for (c = 0; c < w; c++) {
            bad |= !(ss[c] > 0) || !nb__fin(ss[c]);
            ss[c] = 1 / sqrt(ss[c]);
        }
        if (!scale) continue; /* the check pass found every vector fine */
        if (by_rows) {
            for (c = 0; c < cols; c++) x[(size_t)i * cols + c] *= (nb_real)ss[0];
        } else {
            for (r = 0; r < rows; r++)
                for (c = 0; c < w; c++) x[(size_t)r * cols + c0 + c] *= (nb_real)ss[c];
        }
    }
    return bad;
}

NBDEF nb_result nb_stack_normalize(nb_ctx* ctx, const nb_stack* s, nb_real* params) {
    int pass, t;
    NB__CHECK(!s || !s->tensors || !params, NB_ERR_NULL,
              "nb_stack_normalize: an initialized stack s and params are required (%s is NULL)",
              params ? "s" : "params");
    for (pass = 0; pass < 2; pass++) /* check every matrix, then scale */
        for (t = 0; t < s->n_tensors; t++) {
            const nb_tensor_info* ti = &s->tensors[t];
            const int rows = ti->kind == NB_TENSOR_QKV || ti->kind == NB_TENSOR_FF_IN;
            if (!rows && ti->kind != NB_TENSOR_ATTN_OUT && ti->kind != NB_TENSOR_FF_OUT) continue;
            NB__CHECK(nb__unit_vectors(ctx, params + ti->offset, ti->rows, ti->cols, rows, pass),
                      NB_ERR_VALUE, "nb_stack_normalize: %s has a %s of zero or non-finite norm",
                      ti->name, rows ? "row" : "column");
        }
    return NB_OK;
}

/* the first tensor of layer l of `kind` whose name ends in `suffix`, or NULL */
static const nb_tensor_info* nb__layer_tensor(const nb_stack* s, int l, nb_tensor_kind kind,
                                              const char* suffix) {
    const nb_layer* ly = &s->layers[l];
    const size_t n = strlen(suffix);
    int t;
    for (t = ly->tensor0; t < ly->tensor0 + ly->n_tensors; t++) {
        const nb_tensor_info* ti = &s->tensors[t];
        const size_t len = strlen(ti->name);
        if (ti->kind == kind && len >= n && !strcmp(ti->name + len - n, suffix)) return ti;
    }
    return NULL;
}

/* rows [r0, r0 + n) of a projection (d columns) and of its bias (NULL: none) times f */
static void nb__scale_rows(nb_real* w, nb_real* bias, int r0, int n, int d, double f) {
    size_t i;
    for (i = (size_t)r0 * d; i < (size_t)(r0 + n) * d; i++) w[i] = (nb_real)(w[i] * f);
    if (bias)
        for (i = (size_t)r0; i < (size_t)(r0 + n); i++) bias[i] = (nb_real)(bias[i] * f);
}

NBDEF nb_result nb_stack_qk_clip(nb_ctx* ctx, const nb_stack* s, nb_real* params,
                                 const double* max_logit, double tau, int* clipped) {
    int l, h, j, n = 0, H;
    NB__CHECK(!s || !s->tensors || !params || !max_logit, NB_ERR_NULL, "nb_stack_qk_clip: an "
              "initialized stack s, params and max_logit are required (%s is NULL)",
              !s || !s->tensors ? "s" : !params ? "params" : "max_logit");
    NB__CHECK(!(tau > 0) || !nb__fin(tau), NB_ERR_VALUE,
              "nb_stack_qk_clip: tau (%g) must be finite and > 0", tau);
    H = s->desc.n_heads;
    for (l = 0; l < s->desc.n_layers; l++) { /* everything checked before anything is written */
        const nb_attn_plan* ap = &s->layers[l].attn;
        NB__CHECK(nb__site_on(ap, 0) || nb__site_on(ap, 1) || ap->desc.attn.qk_scale, NB_ERR_CONFIG,
                  "nb_stack_qk_clip: layer %d: its logits do not follow W_q and W_k (%s): "
                  "QK-Clip has nothing to scale", l,
                  ap->desc.attn.qk_scale ? "qk_scale" : "a Q or K norm site");
        for (h = 0; h < H; h++)
            NB__CHECK(!nb__fin(max_logit[(size_t)l * H + h]), NB_ERR_VALUE, /* by the bits */
                      "nb_stack_qk_clip: max_logit of layer %d head %d (%g) is not finite", l, h,
                      max_logit[(size_t)l * H + h]);
    }
    for (l = 0; l < s->desc.n_layers; l++) {
        const nb_attn_plan* ap = &s->layers[l].attn;
        const nb_tensor_info* wt = nb__layer_tensor(s, l, NB_TENSOR_QKV, "att_proj.weight");
        const nb_tensor_info* bt = nb__layer_tensor(s, l, NB_TENSOR_BIAS, "att_proj.bias");
        nb_real *w = params + wt->offset, *b = bt ? params + bt->offset : NULL;
        const int dk = ap->head_dim, g = ap->group, d = s->desc.d_model;
        const double* S = max_logit + (size_t)l * H;
        for (j = 0; j < ap->desc.n_kv_heads; j++) {
            double m = 1;
            int k;
            for (k = j * g; k < (j + 1) * g; k++) {
                if (S[k] > tau && tau / S[k] < m) m = tau / S[k];
                n += S[k] > tau;
            }
            if (m == 1) continue;
            nb__scale_rows(w, b, d + j * dk, dk, d, sqrt(m));       /* K head j */
            for (k = j * g; k < (j + 1) * g; k++)                    /* its Q heads */
                nb__scale_rows(w, b, k * dk, dk, d, (S[k] > tau ? tau / S[k] : 1) / sqrt(m));
        }
    }
    if (clipped) *clipped = n;
    return NB_OK;
}

/* ---- diagnostics ---- */

NBDEF double nb_stack_grad_norms(const nb_stack* s, const nb_real* grads, double* per_layer) {
    double total = 0;
    int t, l;
    if (!s || !s->tensors || !grads) return NAN;
    if (per_layer)
        for (l = 0; l < s->desc.n_layers; l++) per_layer[l] = 0;
    for (t = 0; t < s->n_tensors; t++) {
        const nb_tensor_info* ti = &s->tensors[t];
        double ss = 0;
        size_t i;
        for (i = 0; i < ti->count; i++) ss += (double)grads[ti->offset + i] * grads[ti->offset + i];
        total += ss;
        if (per_layer && ti->layer >= 0) per_layer[ti->layer] += ss;
    }
    if (per_layer)
        for (l = 0; l < s->desc.n_layers; l++) per_layer[l] = sqrt(per_layer[l]);
    return sqrt(total);
}

/* The diagnostics' common checks: the cache holds a forward of s with (B, T). */
static nb_result nb__diag_check(const nb_stack* s, const nb_real* cache, int B, int T,
                                int stream, const void* out) {
    if (!s || !s->layers || !cache || !out) return NB_ERR_NULL;
    if (stream < 0 || stream >= s->streams) return NB_ERR_VALUE;
    if (!nb__hdr_ok(cache, NB__MAGIC_STACK, nb__stack_id(s), B, T)) return NB_ERR_CONFIG;
    return NB_OK;
}

/* nb__head_stats of every layer (NULL outputs skipped), a skipped layer's 0 */
static nb_result nb__stack_head_stats(const nb_stack* s, const nb_real* cache, int B, int T,
                                      double* out[3]) {
    const void* any = out[0] ? (const void*)out[0] : out[1] ? (const void*)out[1] : out[2];
    const nb_result rc = nb__diag_check(s, cache, B, T, 0, any);
    int l, h, k;
    if (rc) return rc;
    for (l = 0; l < s->desc.n_layers; l++) {
        const size_t at = (size_t)l * s->desc.n_heads;
        nb__layer_mem c;
        size_t used = s->layers[l].cache_offset;
        if (s->skip[l]) {
            for (k = 0; k < 3; k++)
                for (h = 0; h < s->desc.n_heads && out[k]; h++) out[k][at + h] = 0;
            continue;
        }
        nb__carve_layer(s, l, (nb_real*)(size_t)cache, &used, &c);
        nb__head_stats(&s->layers[l].attn, c.acache, B, T, out[0] ? out[0] + at : NULL,
                       out[1] ? out[1] + at : NULL, out[2] ? out[2] + at : NULL);
    }
    return NB_OK;
}
NBDEF nb_result nb_stack_head_stats(const nb_stack* s, const nb_real* cache, int B, int T,
                                    double* max_logit, double* first_mass) {
    double* out[3];
    out[0] = max_logit; out[1] = first_mass; out[2] = NULL;
    return nb__stack_head_stats(s, cache, B, T, out);
}
NBDEF nb_result nb_stack_sink_mass(const nb_stack* s, const nb_real* cache, int B, int T,
                                   double* sink_mass) {
    double* out[3];
    out[0] = NULL; out[1] = NULL; out[2] = sink_mass;
    return nb__stack_head_stats(s, cache, B, T, out);
}

NBDEF nb_result nb_stack_gate_stats(const nb_stack* s, const nb_real* cache, int B, int T,
                                    double* mean) {
    const nb_result rc = nb__diag_check(s, cache, B, T, 0, mean);
    int l;
    if (rc) return rc;
    if (s->desc.attn.gate == NB_GATE_NONE) return NB_ERR_CONFIG;
    for (l = 0; l < s->desc.n_layers; l++) {
        const nb_attn_plan* pl = &s->layers[l].attn;
        const int H = s->desc.n_heads, G = pl->gate_width, per = G / H; /* gates per head */
        const size_t rows = (size_t)B * T;
        size_t used = s->layers[l].cache_offset, r;
        nb__layer_mem c;
        nb__attn_mem m;
        int h, j;
        for (h = 0; h < H; h++) mean[(size_t)l * H + h] = 0;
        if (s->skip[l]) continue;
        nb__carve_layer(s, l, (nb_real*)(size_t)cache, &used, &c);
        nb__attn_carve(pl, B, T, pl->max_threads, c.acache, NULL, &m);
        for (h = 0; h < H; h++) {
            double sum = 0;
            for (r = 0; r < rows; r++)
                for (j = 0; j < per; j++) sum += m.sig[r * G + (size_t)h * per + j];
            mean[(size_t)l * H + h] = sum / ((double)rows * per);
        }
    }
    return NB_OK;
}

NBDEF const nb_real* nb_stack_hidden(const nb_stack* s, const nb_real* cache, int l, int stream,
                                     int B, int T) {
    if (nb__diag_check(s, cache, B, T, stream, cache) || l < 0 || l > s->desc.n_layers)
        return NULL;
    if (s->desc.residual.attn_res && l > 0) { /* the readers' h_2l, not the partial sums */
        nb__stack_mem sc;
        size_t cu, su;
        nb__carve_stack(s, (nb_real*)(size_t)cache, NULL, &sc, &cu, &su);
        return sc.ar_h + (size_t)(2 * l - 1) * nb__stack_V(s);
    }
    return nb__hidden(s, (nb_real*)(size_t)cache + NB__HDR, l, stream); /* after the header */
}

NBDEF nb_result nb_stack_attn_res_weights(const nb_stack* s, const nb_real* cache, int B, int T,
                                          double* out) {
    const nb_result rc = nb__diag_check(s, cache, B, T, 0, out);
    nb__run r;
    size_t cu, su;
    int J, j, m, row;
    if (rc) return rc;
    if (!s->desc.residual.attn_res) return NB_ERR_CONFIG;
    memset(&r, 0, sizeof r);
    r.s = s;
    nb__carve_stack(s, (nb_real*)(size_t)cache, NULL, &r.sc, &cu, &su);
    J = 2 * s->desc.n_layers + 1;
    for (j = 0; j < J * J; j++) out[j] = 0;
    out[0] = 1; /* sublayer 0 reads x_0 */
    for (j = 1; j < J; j++)
        for (m = 0; m < nb__ar_count(s, j); m++) {
            size_t astride;
            const nb_real* a = nb__ar_a(&r, j, &astride);
            double sum = 0;
            for (row = 0; row < B * T; row++) sum += a[(size_t)row * astride + m];
            out[(size_t)j * J + nb__ar_src(s, j, m) + 1] = sum / ((double)B * T);
        }
    return NB_OK;
}

NBDEF nb_result nb_stack_hidden_norms(const nb_stack* s, const nb_real* cache, int B, int T,
                                      int stream, double* out) {
    const nb_result rc = nb__diag_check(s, cache, B, T, stream, out);
    int l, r, i, d, rows;
    if (rc) return rc;
    d = s->desc.d_model; rows = B * T;
    for (l = 0; l <= s->desc.n_layers; l++) {
        const nb_real* x = nb_stack_hidden(s, cache, l, stream, B, T);
        double acc = 0;
        for (r = 0; r < rows; r++) {
            double ss = 0;
            for (i = 0; i < d; i++) ss += (double)x[(size_t)r * d + i] * x[(size_t)r * d + i];
            acc += sqrt(ss);
        }
        out[l] = acc / rows;
    }
    return NB_OK;
}

NBDEF nb_result nb_stack_angular_distance(const nb_stack* s, const nb_real* cache, int B, int T,
                                          int stream, double* out) {
    const nb_result rc = nb__diag_check(s, cache, B, T, stream, out);
    int a, b, r, i, d, rows, n;
    if (rc) return rc;
    d = s->desc.d_model; rows = B * T; n = s->desc.n_layers + 1;
    for (a = 0; a < n; a++)
        for (b = a; b < n; b++) {
            const nb_real* x = nb_stack_hidden(s, cache, a, stream, B, T);
            const nb_real* y = nb_stack_hidden(s, cache, b, stream, B, T);
            double acc = 0;
            for (r = 0; r < rows; r++) {
                double xy = 0, xx = 0, yy = 0, c;
                for (i = 0; i < d; i++) {
                    const double u = x[(size_t)r * d + i], v = y[(size_t)r * d + i];
                    xy += u * v; xx += u * u; yy += v * v;
                }
                c = xx > 0 && yy > 0 ? xy / sqrt(xx * yy) : 1;
                c = c > 1 ? 1 : c < -1 ? -1 : c; /* rounding can leave |cos| a hair above 1 */
                acc += acos(c) / 3.141592653589793;
            }
            out[(size_t)a * n + b] = out[(size_t)b * n + a] = acc / rows;
        }
    return NB_OK;
}

NBDEF nb_result nb_stack_hyper_gains(const nb_stack* s, const nb_real* cache, int B, int T,
                                     double* fwd, double* bwd, double* single) {
    const nb_result rc = nb__diag_check(s, cache, B, T, 0, fwd ? (const void*)bwd : NULL);
    const int Q = s ? 2 * s->desc.n_layers : 0, n = s ? s->streams : 0;
    const int W = s ? nb__hc_maps(s) : 0;
    const nb_real** maps;
    int q, row, i, j, k;
    if (rc) return rc;
    if (!nb__hyper(s)) return NB_ERR_CONFIG;
    maps = (const nb_real**)NB_MALLOC(sizeof(nb_real*) * (size_t)Q, s->alloc_user);
    if (!maps) return NB_ERR_NOMEM;
    for (q = 0; q < Q; q++) {
        nb__layer_mem c;
        size_t used = s->layers[q / 2].cache_offset;
        nb__carve_layer(s, q / 2, (nb_real*)(size_t)cache, &used, &c);
        maps[q] = s->skip[q / 2] ? NULL : c.hc[q % 2].maps;
        fwd[q] = bwd[q] = 0;
        if (single) single[q] = 0;
    }
    for (row = 0; row < B * T; row++) {
        double P[NB__NS * NB__NS], H[NB__NS * NB__NS], t[NB__NS * NB__NS];
        for (q = 0; q < 2; q++) {  /* q = 0: P = H_q P upwards; q = 1: P = P H_q downwards */
            int step;
            for (i = 0; i < n * n; i++) P[i] = i % (n + 1) == 0;
            for (step = 0; step < Q; step++) {
                const int at = q ? Q - 1 - step : step;
                const nb_real* comb = maps[at] ? maps[at] + (size_t)row * W + 2 * n : NULL;
                double gain = 0;
                for (i = 0; i < n; i++) /* H[i][j] = comb[j][i] */
                    for (j = 0; j < n; j++) H[i * n + j] = comb ? comb[j * n + i] : i == j;
                for (i = 0; i < n; i++)
                    for (j = 0; j < n; j++) {
                        double acc = 0;
                        for (k = 0; k < n; k++)
                            acc += q ? P[i * n + k] * H[k * n + j] : H[i * n + k] * P[k * n + j];
                        t[i * n + j] = acc;
                    }
                memcpy(P, t, sizeof(double) * (size_t)(n * n));
                for (i = 0; i < n; i++) { /* forward: largest |row sum|; backward: |column sum| */
                    double sum = 0;
                    for (j = 0; j < n; j++) sum += q ? P[j * n + i] : P[i * n + j];
                    gain = fabs(sum) > gain ? fabs(sum) : gain;
                }
                (q ? bwd : fwd)[at] += gain / (B * T);
                if (!q && single) {
                    double g1 = 0;
                    for (i = 0; i < n; i++) {
                        double sum = 0;
                        for (j = 0; j < n; j++) sum += H[i * n + j];
                        g1 = fabs(sum) > g1 ? fabs(sum) : g1;
                    }
                    single[at] += g1 / (B * T);
                }
            }
        }
    }
    NB_FREE((void*)maps, s->alloc_user);
    return NB_OK;
}

/* ---- elementwise ---------------------------------------------------------------------------- */

NBDEF nb_result nb_add(nb_ctx* ctx, nb_real* out, const nb_real* a, const nb_real* b, size_t n) {
    const long long nn = (long long)n;
    long long i;
    if (n == 0) return NB_OK;
    NB__CHECK(!out || !a || !b, NB_ERR_NULL, "nb_add: out, a and b are required");
    NB__CHECK(nn < 0, NB_ERR_SHAPE, "nb_add: n (%zu) overflows long long", n);
    NB__OMP(parallel for simd schedule(static) num_threads(nb_num_threads(ctx))
            if(n >= NB__PAR_MIN))
    for (i = 0; i < nn; i++) out[i] = a[i] + b[i];
    return NB_OK;
}

NBDEF nb_result nb_axpby(nb_ctx* ctx, nb_real* y, nb_real alpha, const nb_real* x, nb_real beta,
                         size_t n) {
    const long long nn = (long long)n;
    long long i;
    if (n == 0) return NB_OK;
    NB__CHECK(!y || !x, NB_ERR_NULL, "nb_axpby: x and y are required");
    NB__CHECK(!nb__fin((double)alpha) || !nb__fin((double)beta), NB_ERR_VALUE,
              "nb_axpby: alpha (%g) and beta (%g) must be finite", (double)alpha, (double)beta);
    NB__CHECK(nn < 0, NB_ERR_SHAPE, "nb_axpby: n (%zu) overflows long long", n);
    if (beta == 0) {
        NB__OMP(parallel for simd schedule(static) num_threads(nb_num_threads(ctx))
                if(n >= NB__PAR_MIN))
        for (i = 0; i < nn; i++) y[i] = alpha * x[i];
    } else {
        NB__OMP(parallel for simd schedule(static) num_threads(nb_num_threads(ctx))
                if(n >= NB__PAR_MIN))
        for (i = 0; i < nn; i++) y[i] = alpha * x[i] + beta * y[i];
    }
    return NB_OK;
}

#ifdef __cplusplus
}
#endif
#endif /* NORMBLOCKS_IMPLEMENTATION_DONE */
#endif /* NORMBLOCKS_IMPLEMENTATION */

/*
------------------------------------------------------------------------------
This software is available under 2 licenses -- choose whichever you prefer.
------------------------------------------------------------------------------
ALTERNATIVE A - MIT License
Copyright (c) 2026 normblocks contributors
Permission is hereby granted, free of charge, to any person obtaining a copy of
this software and associated documentation files (the "Software"), to deal in
the Software without restriction, including without limitation the rights to
use, copy, modify, merge, publish, distribute, sublicense, and/or sell copies
of the Software, and to permit persons to whom the Software is furnished to do
so, subject to the following conditions:
The above copyright notice and this permission notice shall be included in all
copies or substantial portions of the Software.
THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR
IMPLIED, INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY,
FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN NO EVENT SHALL THE
AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER
LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM,
OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE
SOFTWARE.
------------------------------------------------------------------------------
ALTERNATIVE B - Public Domain (www.unlicense.org)
This is free and unencumbered software released into the public domain.
Anyone is free to copy, modify, publish, use, compile, sell, or distribute this
software, either in source code form or as a compiled binary, for any purpose,
commercial or non-commercial, and by any means.
In jurisdictions that recognize copyright laws, the author or authors of this
software dedicate any and all copyright interest in the software to the public
domain. We make this dedication in perpetuity for the benefit of our heirs and
successors. We intend this dedication to be used for the basis of public
testing of the software under copyright law.
------------------------------------------------------------------------------
*/
