"""normblocks_twin.py - a PyTorch twin of normblocks' stack and of the examples/train model.

The module computes what `nb_stack_forward` computes (normblocks.h, "blocks and stacks") with
plain torch ops, for every preset and option of `nb_stack_desc`, with the library's parameter
names and shapes (its tensor table: "blocks.3.att_proj.weight", "ln_f.weight", ...; matrices
(out, in) like nn.Linear). It loads the safetensors checkpoints of examples/train and gives the
trainer's loss on the same batch.

    from normblocks_twin import StackConfig, Stack, load_checkpoint
    cfg = StackConfig.from_name("hybrid_star", n_layers=12, d_model=768, n_heads=12,
                                n_kv_heads=4, attn=dict(rope=True))  # groups as nb_stack_desc's
    stack = Stack(cfg)                     # nn.Module; stack(E) -> final hidden state
    model, meta = load_checkpoint("run.safetensors")   # the trainer's model (wte, stack, head)
    # a stack a Hugging Face class computes (Llama, Qwen2, Qwen3, OLMo-2, GPT-2) as its directory
    save_hf_dir("hf_dir", stack, embed, head)          # config.json, model.safetensors
    stack, embed, head = load_hf_dir("hf_dir")         # (also the hub's, and nbimport's exports)

Only torch (and the standard library) are needed: the safetensors file is read by hand.

Precision. StackConfig(gemm=dict(precision="bf16")) is the library's mixed precision
(nb_stack_desc.gemm.precision = NB_PRECISION_BF16): every GEMM of the forward and the backward
multiplies operands rounded to bfloat16 (round to nearest even) and sums in the module's dtype;
everything else (norms, softmax, RoPE, activations, residual adds, bias adds and bias gradients)
stays in it.
The GEMMs are the projections (Q|K|V, attention output, FFN in and out: y = bf16(x) bf16(W)^T,
the bias added after), the attention's scores bf16(Q) bf16(K)^T (scaled by 1/sqrt(d_k) after)
and context bf16(P) bf16(V); in the backward each of their gradient products rounds the incoming
gradient too: dX = bf16(dY) bf16(W), dW = bf16(dY)^T bf16(X), dP = bf16(dO) bf16(V)^T,
dV = bf16(P)^T bf16(dO), dQ = bf16(dS) bf16(K), dK = bf16(dS)^T bf16(Q) (bf16_matmul, a custom
autograd Function; the softmax backward itself uses the unrounded P). In float32 that is the
library's arithmetic up to the order of the float32 sums; in float64 it is "bf16 operands,
exact sums", the reference tests/fixtures/blocks_bf16.bin holds. NormBlocksLM's LM head is
then a bf16 GEMM too, as the trainer's (examples/train --precision bf16). The default
(gemm.precision "" = "fp32") rounds nothing. gemm.bf16_outputs = 1 (nb_gemm_config.bf16_outputs)
adds autocast's rounding of the FFN's hidden layer: its projection h (after the bias and
ffn.in_scale) is rounded before the activation reads it (bf16_rounded: the gradient passes
unrounded) and the activation's incoming gradient da = bf16(dY) bf16(W_out) is rounded before
the activation's backward (bf16_rounded_grad).

Equations (x: a B x T x d residual stream, N: a norm with its own gain, and bias for LayerNorm)

  Norms           RMSNorm    N(x) = g * x / sqrt(mean(x^2) + eps)
                  LayerNorm  N(x) = g * (x - mean(x)) / sqrt(var(x) + eps) + b
                  DyT        N(x) = g * tanh(a x) + b, a a learnable scalar per norm
                  Derf       N(x) = g * erf(a x + s) + b, a and s learnable scalars per norm
                             ("alpha_shift" = [a, s]; zlab-princeton/Derf's Dynamic_erf)
                  L2         N(x) = x / ||x||_2 (nGPT's justnorm: no gain, no bias, no eps)
                  over the last dimension; block norms have width d; the attention "site"
                  norms have a gain only (also LayerNorm, DyT, Derf) of width d_k (one gain
                  shared by all heads, "per head") or of the whole projection row ("full",
                  OLMo-2). norm.gain -1: block norms without g; norm.bias -1: block LayerNorms,
                  DyTs, Derfs without b (the site norms keep their gains). norm.gain_offset 1
                  (Gemma): every g, block and site, is stored as w and multiplies by 1 + w.
  Attention       [Q|K|V] = x W_qkv^T (+ b_qkv) (Q: H heads, K, V: H_kv heads of d_k = d/H),
                  Q, K, V normalized at their sites, then RoPE on Q and K (NeoX rotate-half),
                  with attn.qk_scale (nGPT's s_qk) Q and K then times sqrt(d) "sqk" (H d_k values,
                  head h's d_k shared by Q head h and K head h; needs H_kv = H),
                  P = softmax(s Q K^T + causal mask) with s = attn.softmax_scale (1/sqrt(d_k);
                  nGPT's sqrt(d_k)), query head h reads KV head
                  h / (H/H_kv), C = concat_h P V (normalized at site C), out = C W_o^T (+ b_o);
                  the biases with attn.bias (GPT-2 both, Qwen2 b_qkv).
                  attn.gate (gated attention): G more projection rows, [Q|K|V|G] = x W_qkv^T
                  (+ b_qkv, G's too), G = H logits per token ("headwise", one per head) or d
                  ("elementwise"); C' = Nc(C) * sigmoid(G) (after the C norm), then W_o.
                  attn.sink (attention sinks, gpt-oss): a logit z_h per query head joins each
                  row of the scaled, masked scores as one more column, P = softmax([s Q K^T |
                  z_h]) with that column dropped after, so P's rows sum to 1 - the sink's mass:
                  z_h learnable "blocks.<l>.sinks" ("learned", H values) or 0 ("off_by_one");
                  z_h is not multiplied by s.
                  attn.clip_qkv (OLMo's clip_qkv): c > 0 clamps the projection's Q|K|V columns
                  (after b_qkv, before the site norms; not the gate's G) to [-c, c], so no
                  gradient flows where a value is clamped.
                  attn.softcap (Gemma 2's attn_logit_softcapping): c > 0 caps the scaled scores,
                  s Q K^T becoming c tanh(s Q K^T / c), before the causal mask and a sink's
                  column (z_h joins uncapped), as transformers' Gemma2 eager attention.
                  residual.value_residual (ResFormer): in layers l >= 1, V (after its site norm) is
                  lambda_1 V + lambda_2 V_0 before attention, V_0 layer 0's; lambdas 0.5, or
                  learnable "blocks.<l>.value_residual.lambda".
                  residual.value_embeds N (modded-nanogpt's value embeddings, its train_gpt.py
                  of mid-2025; 2N <= n_layers, not with value_residual): N tables of per-token
                  values, E_t the caller's rows (B x T x H_kv d_k each: Stack.forward's
                  value_embeds; NormBlocksLM gathers them from its transformer.value_embeds.<t>
                  at each token). Layer l < N mixes table l, layer l >= L-N table l-(L-N) (the
                  code's [ve0, ve1, ve2] + [None] * (L-6) + [ve0, ve1, ve2]): V (after its site
                  norm, where the value residual mixes) becomes lambda_0 V + lambda_1 E_t;
                  every other layer's lambda_0 V (CausalSelfAttention.forward's ve None).
                  "blocks.<l>.value_embed.lambda" = [lambda_0, lambda_1] in every layer (the
                  code's sa_lambdas), init 0.5, 0.5, not decayed.
  FFN             SwiGLU: [u|z] = x W_in^T (+b_in), out = (silu(z) * u) W_out^T (+b_out)
                  GELU:   out = gelu(x W_in^T + b_in) W_out^T + b_out (tanh or erf form)
                  with ffn.in_scale (nGPT's s_uv) the projection (with its bias) is multiplied
                  per column by sqrt(d) "suv" (2f values for SwiGLU: s_u | s_z, f for GELU)
                  before the activation
  A sublayer F (attention or FFN) inside its placement (nb_placement):
                  h  = input_norm ? c * N_in(x) : x        (c = input_scale)
                  r  = residual_from_norm ? h : x
                  r  = N_res(x)     when residual_norm (nGPT's justnorm(h); "attn_res_norm",
                                    "ff_res_norm")
                  f  = output_norm ? N_out(F(h)) : F(h)
                  f  = lambda * f   (branch_scale: "scalar" ReZero's resweight, one per layer
                                     shared by its sublayers; "sublayer" SkipInit's form, one
                                     scalar per sublayer, attn_resweight / ff_resweight;
                                     "channel" LayerScale's ls1.gamma / ls2.gamma)
                  f  = m * f        (m = branch_mult, a constant: CompleteP's residual
                                     multiplier; where a placement leaves it 0, the stack's
                                     residual.depth_alpha rule
                                     m = (L / depth_base)^-depth_alpha, else 1)
                  s  = alpha * r + f                       (alpha = residual_scale)
                  s  = r + |a| * (f - r)  for branch_scale "interp" instead of the three lines
                                    above (nGPT's eigen learning rate, per channel): a = c
                                    lambda, lambda "attn_alpha" / "mlp_alpha" (d values, stored
                                    as nGPT's code stores them: init 1/sqrt(d)), c =
                                    residual.interp_init sqrt(d) (its alpha_init_value /
                                    alpha_init_scaling); needs residual_scale and branch_mult 1
                  x' = post_norm ? N_post(s) : s
  nGPT (preset "ngpt", NVIDIA/ngpt's model.py): every norm L2, per sublayer
                  x' = L2(L2(x) + |a| (L2(F(x)) - L2(x)))   (code "g": residual_norm,
                  output_norm, post_norm, "interp"; no input norm), Q and K L2 per head
                  (sites QK) then RoPE then times sqrt(d) sqk, attn.softmax_scale sqrt(d_k), SwiGLU
                  of 4d times sqrt(d) suv, no biases, no embedding or final norm; its RoPE is
                  the standard one (the code's is not a rotation: NVIDIA/ngpt issue #10)
  A block is the attention sublayer, then the FFN sublayer. A stack is
                  x_0 = norm.embed ? N_embed(c E) : c E;  x_{l+1} = block_l(x_l);
                  out = norm.final ? N_lnf(x_L) : x_L
                  c = 1, or with norm.embed_scale the learnable scalar "embed_scale" (init sqrt(d);
                  DyT's and Derf's LM codes' shared_scale)
  DenseFormer (residual.dwa; arXiv 2402.02622, its code epfml/DenseFormer's DWAModules): one
                  stream; layer l's output h_{l+1} = block_l(x_l) (its residuals included) is
                  not the next input: with h_0 = x_0 and k = residual.dwa_dilation (0 = 1)
                  x_{l+1} = sum_m a_l[m] h_{j0 + m k},  j0 = (l + 1) mod k, m = 0 .. (l+1)//k,
                  a_l the layer's "blocks.<l>.dwa.weight" (1, (l+1)//k + 1) (nn.Linear's layout:
                  the code's alphas[l].weight), init 0 with a_l[-1] = 1 (the plain stack),
                  weight-decayed as the code's nn.Linear; x_L goes to the final norm. With the
                  period p = residual.dwa_period (0 = 1; the package's period) only the layers
                  with (l + 1) mod p = 0 average and have dwa.weight; the others pass
                  x_{l+1} = h_{l+1} on, their h_{l+1} still in the later averages. Not with
                  SiameseNorm or hyper-connections.
  Attention Residuals (residual.attn_res; arXiv 2603.15031, the official pseudocode of
                  MoonshotAI/Attention-Residuals): one stream and no residual sums. Sublayer
                  j = 0 .. 2L-1 (attention of layer l is 2l, its FFN 2l+1) computes its branch
                  f_j = f(h_j) alone (the placement's f above: input norm, output norm, branch
                  scale, m); with S = residual.attn_res_block (0 = 1, Full AttnRes) the partial
                  sums are p_j = f_j where j mod S = 0 (a block starts), else p_{j-1} + f_j.
                  h_0 = x_0; the reader before sublayer j >= 1, and the reader j = 2L before
                  the final norm, has the sources v = [x_0, p_{S-1}, p_{2S-1}, ..,
                  p_{mS-1} (m = (j-1)//S), p_{j-1}] (x_0, the blocks completed before sublayer
                  j-1, the running sum) and gives
                  h_j = sum_m a_m v_m,  a = softmax_m(w_j . (g_j * v_m / sqrt(mean(v_m^2) + eps)))
                  per token (eps = norm.eps), w_j the pseudo-query "blocks.<l>.attn_res.proj
                  .weight" (1, d) (l >= 1; the FFN's "mlp_res.proj.weight", the final reader's
                  "final_res.proj.weight"), init 0 (uniform weights), weight-decayed as the
                  code's nn.Linear; g_j its key RMSNorm's gain ("...attn_res.norm.weight", d,
                  init 1, whatever norm.type is). out = N_lnf(h_2L). Only placements whose
                  sublayers add a plain residual (no post or residual norm, no residual from the
                  norm, no interp, residual_scale 1); not with SiameseNorm, hyper-connections or
                  DenseFormer.
  U-Net skips and x_0 re-injection (residual.unet_skips, residual.reinject_x0; modded-nanogpt's
                  train_gpt.py, its GPT.forward and Block.forward): one stream; x_0 the stack's
                  input after c and the embedding norm (the code's norm(embed(.))), x_l layer
                  l's input (layer l-1's output), h_j = x_{j+1} layer j's output. With
                  unet_skips (L even, n = L/2) layer l >= n first adds an encoder layer's
                  output, u = x_l + w_l h_{L-1-l} (the code's skip_connections.pop(), w_l its
                  skip_weights[l - n]: "blocks.<l>.skip_weight", 1 value, init 1); else u = x_l.
                  With reinject_x0 the layer runs on x~ = lambda_0 u + lambda_1 x_0 (its
                  Block's lambdas: "blocks.<l>.lambdas", 2 values, init [1, 0], the plain
                  stack); else on x~ = u. x_{l+1} = block_l(x~) (any placement), out =
                  N_lnf(x_L). Neither decays. Either or both; not with SiameseNorm,
                  hyper-connections, DenseFormer or Attention Residuals.
  Hyper-connections (hyper.kind "mhc", "hc", "identity", "mhc_lite"; presets mhc, hc, ihc): n
  streams X = (x_0 .. x_{n-1}) of width d per token, all starting at x_0; each sublayer
  (attention, then FFN) reads
                  u = sum_i pre_i x_i,  y = the placement's branch (f above with its m, no
                  residual),
                  x'_k = post_k y + sum_j comb[j][k] x_j
    mHC (DeepSeek, TileKernels' torch/mhc.py): xf = [x_0 | .. | x_{n-1}], r = rsqrt(mean(xf^2) +
                  1e-6), mix = r fn xf ("hc_<s>_fn" [2n + n^2, n d]), z = scale * mix + base,
                  pre = sigmoid(z[:n]) + 1e-6, post = 2 sigmoid(z[n:2n]),
                  comb = sinkhorn(z[2n:] as n x n); identity: fn [2n, n d], comb = I;
                  static: z = base. End: h = sum_i w_i x_i, w = sigmoid(head_scale r head_fn xf +
                  head_base) + 1e-6, then the final norm.
    mHC-lite (arXiv 2601.05732, its code FFTYYY/mhc-lite): mHC with fn [2n + n!, n d] and comb
                  the convex combination of the n! permutation matrices, a = softmax(z[2n:])
                  over the permutations pi_r of 0..n-1 in itertools.permutations' (lexicographic)
                  order, pi_0 the identity: comb[j][k] = sum_r a_r [k = pi_r(j)] (n <= 5; no
                  Sinkhorn). Init: base's comb logits 0 for the identity, -8 for the others.
    HC (arXiv 2409.19606, Alg. 2): hbar_i = N(x_i) ("hc_<s>.norm"), alpha = alpha_scale
                  tanh(hbar alpha_fn) + static_alpha [n, n+1], beta = beta_scale tanh(hbar beta_fn)
                  + static_beta; pre = alpha[:, 0], comb = alpha[:, 1:], post = beta; static:
                  the static parts only. End: h = sum_i x_i.
  SiameseNorm (two streams x, y, both starting at x_0; c_l = sqrt(2(l+1)), or sqrt(l+1), or 1):
    hybrid-pre ("siamese"): u_a = x * c1 + N_ay(y); A = MHA(u_a); x1 = x + A/c_l; y1 = y + A;
                  n = N_f(x1); u_f = N_in(n + N_fy(y1)); F = FFN(u_f); x' = n + F/c_l;
                  y' = y1 + F      (u_f = n + N_fy(y1) with siamese.no_fusion_norm)
    post-pre ("siamese_post_pre"), each sublayer G: u = N_x(x); v = N_in(u + N_y(y));
                  z = G(v); x' = u + z/c_l; y' = y + z
    output:       N_final(N_lnf(x_L) + N_lnyf(y_L)), or x_L + N_lnyf(y_L) (paper fusion)

The presets are schedules of placements; PRESETS below is the library's table nb__presets[]
and place_code() its nb__place_code(). Which preset computes what is documented in
normblocks.h (nb_preset).
"""
import dataclasses
import itertools
import json
import math
import os
import struct
from dataclasses import dataclass, field, replace
from typing import List, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

__all__ = ["SITE_Q", "SITE_K", "SITE_V", "SITE_C", "SITES_QKV", "SITES_QKVC", "SITES_NONE",
           "ATTN_BIAS_QKV", "ATTN_BIAS_OUT",
           "Placement", "LayerSpec", "StackConfig", "NormConfig", "AttnConfig", "FfnConfig",
           "ResidualConfig", "HyperConfig", "SiameseConfig", "GemmConfig", "PRESETS",
           "HYPER_KINDS", "HYPER_LITE_MAX_STREAMS", "place_code",
           "resolve", "sinkhorn", "permutations", "birkhoff", "block_attn_res",
           "attn_res_sources", "attn_res_weights",
           "norm", "Norm", "Block", "Stack", "NormBlocksLM", "bf16_round", "bf16_matmul",
           "bf16_linear", "bf16_rounded", "bf16_rounded_grad", "read_safetensors",
           "write_safetensors", "config_from_metadata",
           "load_checkpoint", "text_val_batches", "text_eval_loss", "text_train_batch", "VOCAB",
           "HF_LAYOUTS", "HF_FAMILIES", "hf_parts", "to_hf", "from_hf", "hf_family", "hf_config",
           "config_from_hf", "read_hf_dir", "load_hf_dir", "save_hf_dir"]

# attention norm sites (NB_SITE_*)
SITE_Q, SITE_K, SITE_V, SITE_C = 1, 2, 4, 8
SITES_QKV = SITE_Q | SITE_K | SITE_V
SITES_QKVC = SITES_QKV | SITE_C
SITES_NONE = 0x100  # StackConfig.attn.sites: explicitly none (0 = the preset's default)
ATTN_BIAS_QKV, ATTN_BIAS_OUT = 1, 2  # StackConfig.attn.bias (NB_ATTN_BIAS_*)

VOCAB = 256  # examples/train is byte-level


# ---- descriptions --------------------------------------------------------------------------


@dataclass
class Placement:
    """How one sublayer sits on the residual stream (nb_placement; equations at the top)."""
    input_norm: bool = False
    residual_from_norm: bool = False
    residual_norm: bool = False  # the residual is N_res(x) (nGPT); not with residual_from_norm
    output_norm: bool = False
    post_norm: bool = False
    residual_scale: float = 1.0
    input_scale: float = 1.0
    branch_scale: str = ""     # "", "scalar" (ReZero), "sublayer" (SkipInit: a scalar per
                               # sublayer), "channel" (LayerScale) or "interp" (nGPT:
                               # s = r + |a| (f - r))
    branch_mult: float = 0.0   # 0 = 1 (or the stack's residual.depth_alpha rule): f = m F(..), a
                               # constant (CompleteP's residual multiplier); else finite, > 0


@dataclass
class LayerSpec:
    """One layer of a schedule (nb_layer_desc): attention and FFN placements, attention norm
    sites (SITE_* mask)."""
    attn: Placement = field(default_factory=Placement)
    ffn: Placement = field(default_factory=Placement)
    sites: int = 0


@dataclass(frozen=True)
class _Preset:
    key: str
    aliases: tuple   # case-insensitive other names (nb_preset_from_name)
    first: str       # placement codes of the first n_first layers (attention, FFN)
    n_first: int     # -1: floor(mixln_alpha L), Mix-LN's Post-Norm layers
    rest: str        # codes of the other layers
    sites: int       # default attention norm sites
    width: str       # default site norm width
    eps: float       # default eps of every norm
    embed_norm: int  # 1 normalized embedding, -1 none
    streams: int     # 2 = SiameseNorm
    final_norm: int  # 1 final norm, -1 none
    norm: str = "rms"  # default norm kind
    hyper: str = "none"  # default hyper-connections (nb_hyper)


_QK = SITE_Q | SITE_K
_PH, _FULL = "per_head", "full"
# normblocks.h nb__presets[], in enum order
PRESETS = [
    _Preset("default", (), "", 0, "pp", 0, _PH, 1e-5, -1, 1, 1),
    _Preset("pre", ("Pre-Norm", "PreNorm"), "", 0, "pp", 0, _PH, 1e-5, -1, 1, 1),
    _Preset("post", ("Post-Norm", "PostNorm"), "", 0, "PP", 0, _PH, 1e-5, -1, 1, 1),
    _Preset("post_flags", (), "nr", 1, "rr", 0, _PH, 1e-5, -1, 1, 1),
    _Preset("sandwich", ("Sandwich",), "", 0, "ss", 0, _PH, 1e-5, -1, 1, 1),
    _Preset("olmo2", ("OLMo-2",), "", 0, "oo", _QK, _FULL, 1e-6, -1, 1, 1),
    _Preset("deepnorm", ("DeepNorm",), "", 0, "dd", 0, _PH, 1e-5, -1, 1, 1),
    _Preset("deepnorm_mixln", (), "", 0, "mm", 0, _PH, 1e-6, -1, 1, 1),
    _Preset("hybrid", ("HybridNorm",), "", 0, "nr", SITES_QKV, _PH, 1e-5, -1, 1, 1),
    _Preset("hybrid_star", ("HybridNorm*", "hybrid*"), "pp", 1, "nr", SITES_QKV, _PH, 1e-5, -1,
            1, 1),
    _Preset("first_qkv_pre", ("First-QKV-Pre",), "np", 1, "nr", SITES_QKV, _PH, 1e-5, -1, 1, 1),
    _Preset("embednorm", ("EmbedNorm",), "", 0, "nr", SITES_QKV, _PH, 1e-5, 1, 1, 1),
    _Preset("sites_post", (), "", 0, "nr", SITES_QKV, _PH, 1e-5, -1, 1, 1),
    _Preset("sites_pre", (), "", 0, "np", SITES_QKV, _PH, 1e-5, -1, 1, 1),
    _Preset("pre_sites_post", (), "", 0, "pr", SITES_QKV, _PH, 1e-5, -1, 1, 1),
    _Preset("pre_sites_pre", (), "", 0, "pp", SITES_QKV, _PH, 1e-5, -1, 1, 1),
    _Preset("pre_post", ("Pre-Post",), "", 0, "pr", 0, _PH, 1e-5, -1, 1, 1),
    _Preset("post_pre", ("Post-Pre",), "", 0, "rp", 0, _PH, 1e-5, -1, 1, 1),
    _Preset("mixln", ("Mix-LN",), "PP", -1, "pp", 0, _PH, 1e-6, -1, 1, 1),
    _Preset("siamese", ("SiameseNorm",), "", 0, "--", SITES_QKV, _PH, 1e-5, -1, 2, 1),
    _Preset("siamese_post_pre", (), "", 0, "--", SITES_QKV, _PH, 1e-5, -1, 2, 1),
    _Preset("lns", ("LayerNorm-Scaling", "LNS"), "", 0, "ll", 0, _PH, 1e-6, -1, 1, 1),
    _Preset("none", ("NoNorm", "no_norm"), "", 0, "nn", 0, _PH, 1e-5, -1, 1, -1),
    _Preset("dyt", ("DyT", "Dynamic-Tanh"), "", 0, "pp", 0, _PH, 1e-5, -1, 1, 1, "dyt"),
    _Preset("periln", ("Peri-LN", "PeriLN"), "", 0, "ss", 0, _PH, 1e-5, 1, 1, 1),
    _Preset("rezero", ("ReZero",), "", 0, "zz", 0, _PH, 1e-5, -1, 1, -1),
    _Preset("layerscale", ("LayerScale", "CaiT"), "", 0, "cc", 0, _PH, 1e-5, -1, 1, 1),
    _Preset("mhc", (), "", 0, "pp", 0, _PH, 1e-5, -1, 1, 1, "rms", "mhc"),
    _Preset("hc", (), "", 0, "pp", 0, _PH, 1e-5, -1, 1, 1, "rms", "hc"),
    _Preset("ihc", (), "", 0, "pp", 0, _PH, 1e-5, -1, 1, 1, "rms", "identity"),
    _Preset("ngpt", ("nGPT",), "", 0, "gg", _QK, _PH, 1e-5, -1, 1, -1, "l2"),
]
# nb_hyper's NONE, MHC, HC, IDENTITY, MHC_LITE
HYPER_KINDS = ("none", "mhc", "hc", "identity", "mhc_lite")
HYPER_LITE_MAX_STREAMS = 5  # NB_HYPER_LITE_MAX_STREAMS: mHC-lite's n! logits (120 at 5)
_PRESET = {p.key: p for p in PRESETS}


def place_code(code, l, n_layers):
    """The placement of a preset-table code in layer l (0-based) of n_layers (nb__place_code):
         n  x + F(x)                 p  x + F(N(x))              r  h + F(h), h = N(x)
         P  N(x + F(x))              s  x + N_out(F(N_in(x)))    o  x + N_out(F(x))
         d  N(a x + F(x)), a = (2L)^(1/4)                        m  the same with a = sqrt(8)
         l  x + F(N(x) / sqrt(l + 1))  (LayerNorm Scaling)
         z  x + a F(x)  (ReZero)      c  x + diag(lambda) F(N(x))  (LayerScale)
         g  N(N(x) + |a| (N(F(x)) - N(x)))  (nGPT; a per channel)"""
    p = Placement()
    if code == "p":
        p.input_norm = True
    elif code == "r":
        p.input_norm = p.residual_from_norm = True
    elif code == "P":
        p.post_norm = True
    elif code == "s":
        p.input_norm = p.output_norm = True
    elif code == "o":
        p.output_norm = True
    elif code == "d":
        p.post_norm, p.residual_scale = True, (2.0 * n_layers) ** 0.25
    elif code == "m":
        p.post_norm, p.residual_scale = True, 2.8284271247461903
    elif code == "l":
        p.input_norm, p.input_scale = True, 1.0 / math.sqrt(l + 1.0)
    elif code == "z":
        p.branch_scale = "scalar"
    elif code == "c":
        p.input_norm, p.branch_scale = True, "channel"
    elif code == "g":
        p.residual_norm = p.output_norm = p.post_norm = True
        p.branch_scale = "interp"
    return p


_SITE_NAMES = {"QKVC": SITES_QKVC, "QKV": SITES_QKV, "QKC": SITE_Q | SITE_K | SITE_C,
               "QK": SITE_Q | SITE_K, "KV": SITE_K | SITE_V, "KC": SITE_K | SITE_C}


def _preset_from_name(name):
    """nb_preset_from_name: (key, the StackConfig groups it sets, each a dict) for a preset key,
    alias, "gpt2", or a HybridNorm ablation name ("QKV-Post", "Pre-QK-Pre", "KC-Post", ...)."""
    low = name.lower()
    for p in PRESETS[1:]:
        if low == p.key or low in (a.lower() for a in p.aliases):
            return p.key, {}
    if low == "gpt2":
        return "pre", dict(norm=dict(type="layer"), ffn=dict(type="gelu_tanh"),
                           attn=dict(bias=ATTN_BIAS_QKV | ATTN_BIAS_OUT))
    pre = len(low) > 4 and low.startswith("pre-")
    body = low[4:] if pre else low
    if "-" in body:
        sites, _, kind = body.partition("-")
        mask = _SITE_NAMES.get(sites.upper(), 0)
        if mask and kind in ("post", "pre"):
            key = ("pre_" if pre else "") + "sites_" + kind
            return key, dict(attn=dict(sites=mask))
    raise ValueError("unknown preset %r (try pre, post, hybrid, hybrid_star, mixln, siamese, "
                     "sandwich, olmo2, deepnorm, QKV-Post, ...)" % name)


# StackConfig's groups: each is the C struct of the same name (nb_norm_config, nb_attn_config,
# ...) with the fields the twin models, named as in C; 0 / "" is the preset's default in every
# field, as in C.


@dataclass
class NormConfig:
    """Every norm's kind and options (nb_norm_config)."""
    type: str = ""               # "" = preset's (rms; dyt for dyt, l2 for ngpt), "rms",
                                 # "layer", "dyt", "derf" or "l2" (block LayerNorms, DyTs and
                                 # Derfs carry a bias; L2 norms have no parameters)
    eps: float = 0.0             # 0 = the preset's (1e-6 olmo2, mixln, deepnorm_mixln, lns)
    gain: int = 0                # block norms' weight: 0 the kind's (on but L2), -1 none
    bias: int = 0                # block norms' bias: 0 the kind's (layer, dyt, derf), -1 none
    gain_offset: int = 0         # 1: every norm gain stored as w, multiplying by 1 + w (Gemma)
    final: int = 0               # the final norm ln_f: 0 = preset default, 1 on, -1 off
    embed: int = 0               # the embedding norm: 0 = preset default, 1 on, -1 off
    embed_scale: int = 0         # 1: the input times a learnable "embed_scale" (init sqrt(d))


@dataclass
class AttnConfig:
    """Every attention's settings (nb_attn_config)."""
    sites: int = 0               # 0 = preset default, SITES_NONE = none, else a SITE_* mask
    site_width: str = ""         # "" = preset's; "per_head" or "full"
    bias: int = 0                # ATTN_BIAS_* mask: att_proj.bias, attn_out.bias; 0 = none
    rope: bool = False
    rope_theta: float = 0.0      # 0 = 10000
    non_causal: bool = False
    qk_scale: int = 0            # nGPT's s_qk ("sqk"): 0 = the preset's (on for ngpt), 1, -1 off
    softmax_scale: float = 0.0   # s of the scores; 0 = the preset's (sqrt(d_k) for ngpt, else
                                 # 1/sqrt(d_k)); else finite, > 0
    gate: str = ""               # gated attention's output gate: "" / "none", "headwise" (G = H)
                                 # or "elementwise" (G = d); its rows last in att_proj
    sink: str = ""               # attention sinks: "" / "none", "learned" (gpt-oss's logit z_h per
                                 # query head, "sinks") or "off_by_one" (z = 0, no parameter)
    clip_qkv: float = 0.0        # OLMo's clip_qkv: Q|K|V of the projection (after its bias,
                                 # before the site norms; not the gate) clamped to [-c, c];
                                 # 0 = off, else finite and > 0
    softcap: float = 0.0         # Gemma 2's attention-logit softcap: the scaled scores s become
                                 # c tanh(s / c) before the mask and a sink's column (z_h not
                                 # capped); 0 = off, else finite and > 0 (Gemma 2: 50)


@dataclass
class FfnConfig:
    """Every FFN's settings (nb_ffn_config)."""
    type: str = ""               # "" = "swiglu" (the name gpt2 sets "gelu_tanh"), "swiglu",
                                 # "gelu_tanh" or "gelu_erf"
    d_ff: int = 0                # 0 = 4d (GELU; ngpt's SwiGLU), 8d/3 rounded up to 64 (SwiGLU)
    bias: int = 0                # 0 = type default (GELU: on, SwiGLU: off), 1 on, -1 off
    in_scale: int = 0            # nGPT's s_uv ("suv"): 0 = the preset's (on for ngpt), 1, -1 off


@dataclass
class ResidualConfig:
    """Branch scales, CompleteP, the value residual, DenseFormer, Attention Residuals,
    modded-nanogpt's U-Net skips, x_0 re-injection and value embeddings
    (nb_residual_config)."""
    branch_scale: str = ""       # every placement's branch scale of a preset: "" the preset's,
                                 # else a Placement.branch_scale (not with a custom schedule or
                                 # SiameseNorm)
    interp_init: float = 0.0     # nGPT: the initial step |a| of "interp" branch scales (its
                                 # alpha_init_value); 0 = 0.05, else in (0, 1]
    depth_alpha: float = 0.0     # CompleteP (arXiv 2505.01618; nanoGPT-mup branch completep):
                                 # every placement whose branch_mult is 0 gets
                                 # m = (n_layers / depth_base)^-depth_alpha; 0 off, else in
                                 # (0, 2] (1 CompleteP, 0.5 depth-muP); not with SiameseNorm
    depth_base: int = 0          # CompleteP's base depth L_base; 0 = 1 (m = L^-alpha)
    value_residual: int = 0      # ResFormer: layers l >= 1 attend over l1 V_l + l2 V_0; 0 off,
                                 # 1 fixed 0.5/0.5, 2 learnable value_residual.lambda [l1, l2]
    value_embeds: int = 0        # modded-nanogpt's value embeddings: N tables (0 off, 2N <=
                                 # n_layers); layers 0..N-1 and L-N..L-1 attend over lambda_0 V
                                 # + lambda_1 E_t (the caller's rows), the others lambda_0 V
                                 # (blocks.<l>.value_embed.lambda); not with value_residual
    dwa: int = 0                 # DenseFormer's depth-weighted average: 1 on, 0 off; each
                                 # layer's input the average of x_0 and the earlier outputs (one
                                 # stream: not with SiameseNorm or hyper-connections)
    dwa_dilation: int = 0        # DenseFormer's dilation k: 0 = 1, else 1..n_layers; needs dwa
    dwa_period: int = 0          # DenseFormer's period p (DWAModules' period): 0 = 1, else
                                 # 1..n_layers; only layers l with (l+1) mod p = 0 average (and
                                 # have dwa.weight), the others pass their output on; needs dwa
    attn_res: int = 0            # Attention Residuals: 1 on, 0 off; no residual sums, each
                                 # sublayer's input a softmax over depth of x_0 and the earlier
                                 # sublayers' outputs (one stream: not with SiameseNorm,
                                 # hyper-connections or DenseFormer)
    attn_res_block: int = 0      # its block size S in sublayers (attention and FFN count one
                                 # each): 0 = 1 (Full AttnRes), else 1..2 n_layers; needs attn_res
    unet_skips: int = 0          # modded-nanogpt's U-Net skips: 1 on, 0 off; layer l >= L/2 adds
                                 # w h_{L-1-l} (blocks.<l>.skip_weight) to its input; L even
    reinject_x0: int = 0         # modded-nanogpt's re-injection: 1 on, 0 off; layer l runs on
                                 # lambda_0 x + lambda_1 x_0 (blocks.<l>.lambdas). Both: one
                                 # stream (not SiameseNorm, hyper-connections, DenseFormer or
                                 # Attention Residuals)


@dataclass
class HyperConfig:
    """Hyper-connections (nb_hyper_config)."""
    kind: str = ""               # "" = the preset's (none; presets mhc, hc, ihc: "mhc", "hc",
                                 # "identity"), "none", "mhc", "hc", "identity", "mhc_lite"
    streams: int = 0             # n streams; 0 = 4; 1..8 (mhc_lite: 1..5)
    static_maps: int = 0         # 1: the static form (maps are learned constants); 0 dynamic
    sinkhorn: int = 0            # mHC's Sinkhorn iterations; 0 = 20; 1..100


@dataclass
class SiameseConfig:
    """SiameseNorm's forms (nb_siamese_config)."""
    paper_scale: int = 0         # c_l: 0 sqrt(2(l+1)), 1 sqrt(l+1), 2 1
    paper_fusion: int = 0        # 1: output x_L + N(y_L)
    no_fusion_norm: int = 0      # 1: u_f = n + N_fy(y1) (siamese only)


@dataclass
class GemmConfig:
    """The GEMMs (nb_gemm_config)."""
    precision: str = ""          # "" = "fp32"; "bf16": every GEMM on bf16-rounded operands
                                 # (NB_PRECISION_BF16; see "Precision" at the top)
    bf16_outputs: int = 0        # bf16 only: 1 = the FFN's hidden layer in bf16, as autocast
                                 # keeps it (gemm.bf16_outputs; "Precision" at the top)


_GROUPS = {"norm": NormConfig, "attn": AttnConfig, "ffn": FfnConfig, "residual": ResidualConfig,
           "hyper": HyperConfig, "siamese": SiameseConfig, "gemm": GemmConfig}

# 0.1's flat StackConfig fields and where 0.2 put them (README.md, "From 0.1 to 0.2"): used only
# to word the error of a description that still uses one
_MOVED = {"norm": "norm.type", "eps": "norm.eps", "norm_gain": "norm.gain",
          "norm_bias": "norm.bias", "gain_offset": "norm.gain_offset",
          "final_norm": "norm.final", "embed_norm": "norm.embed",
          "embed_scale": "norm.embed_scale",
          "sites": "attn.sites", "site_width": "attn.site_width", "attn_bias": "attn.bias",
          "rope": "attn.rope", "rope_theta": "attn.rope_theta", "non_causal": "attn.non_causal",
          "qk_scale": "attn.qk_scale", "softmax_scale": "attn.softmax_scale",
          "attn_gate": "attn.gate",
          "ffn": "ffn.type", "d_ff": "ffn.d_ff", "ffn_bias": "ffn.bias",
          "ffn_in_scale": "ffn.in_scale",
          "branch_scale": "residual.branch_scale", "interp_init": "residual.interp_init",
          "depth_alpha": "residual.depth_alpha", "depth_base": "residual.depth_base",
          "value_residual": "residual.value_residual",
          "hyper": "hyper.kind", "hyper_streams": "hyper.streams",
          "hyper_static": "hyper.static_maps", "hyper_sinkhorn": "hyper.sinkhorn",
          "siamese_paper_scale": "siamese.paper_scale",
          "siamese_paper_fusion": "siamese.paper_fusion",
          "siamese_no_fusion_norm": "siamese.no_fusion_norm",
          "precision": "gemm.precision"}


def _moved(key):
    """Where 0.1's field `key` went, as an error's hint ("" for a name 0.1 did not have)."""
    return "%s moved to %s in 0.2" % (key, _MOVED[key]) if key in _MOVED else ""


def _as_group(name, value):
    """StackConfig's group `name` from value: the group's dataclass, or a dict of its fields."""
    cls = _GROUPS[name]
    if isinstance(value, cls):
        return value
    if not isinstance(value, dict):
        was = "; 0.1's %s is %s in 0.2" % (name, _MOVED[name]) if name in _MOVED else ""
        raise TypeError("StackConfig.%s is a group (%s, or a dict of its fields), not %r%s"
                        % (name, cls.__name__, value, was))
    known = [f.name for f in dataclasses.fields(cls)]
    for key in value:
        if key not in known:
            hint = _moved(key)
            raise TypeError("StackConfig.%s has no field %r (its fields: %s)%s"
                            % (name, key, ", ".join(known), "; " + hint if hint else ""))
    return cls(**value)


def _set_fields(name, value):
    """The fields a group value sets, as a dict: a dict's keys, a dataclass's fields other
    than 0 / "" (zero is "the preset's", as in C: it sets nothing)."""
    group = _as_group(name, value)  # checks a dict's keys
    if isinstance(value, dict):
        return dict(value)
    return {f.name: getattr(group, f.name) for f in dataclasses.fields(group)
            if getattr(group, f.name) != f.default}


def _merged(base, top):
    """StackConfig keyword fields: top's on base's, and a group in both merged field by field
    (top's fields on base's) rather than replaced whole."""
    out = dict(base)
    for key, value in top.items():
        if key in _GROUPS and key in base:
            value = dict(_set_fields(key, base[key]), **_set_fields(key, value))
        out[key] = value
    return out


def _copied(cfg, **changes):
    """replace(cfg, **changes) with every group a copy: replace alone would share the groups
    with cfg, and resolving or editing the copy would change cfg."""
    groups = {name: replace(getattr(cfg, name)) for name in _GROUPS}
    return replace(cfg, **dict(groups, **changes))


@dataclass
class StackConfig:
    """The description of a stack: the fields of nb_stack_desc, grouped as it groups them (norm,
    attn, ffn, residual, hyper, siamese, gemm: NormConfig, AttnConfig, ...; the same group and
    field names), 0 / "" meaning the preset's default at every level as in C. A group may be
    given as a dict of its fields: StackConfig(..., attn=dict(rope=True)). preset is a key of
    PRESETS ("default" with a custom `layers` schedule); use StackConfig.from_name for the names
    nb_preset_from_name accepts."""
    n_layers: int
    d_model: int
    n_heads: int
    n_kv_heads: int = 0          # 0 = n_heads
    preset: str = "pre"
    layers: Optional[List[LayerSpec]] = None  # custom schedule (preset "default")
    mixln_alpha: float = 0.0     # (0, 1]; 0 = 0.25; -1 = no Post-Norm layer
    norm: NormConfig = field(default_factory=NormConfig)
    attn: AttnConfig = field(default_factory=AttnConfig)
    ffn: FfnConfig = field(default_factory=FfnConfig)
    residual: ResidualConfig = field(default_factory=ResidualConfig)
    hyper: HyperConfig = field(default_factory=HyperConfig)
    siamese: SiameseConfig = field(default_factory=SiameseConfig)
    gemm: GemmConfig = field(default_factory=GemmConfig)

    def __new__(cls, *args, **fields):
        # a 0.1 flat name (rope=True, ...) would fail as an "unexpected keyword argument":
        # say where it moved instead (dataclasses.replace comes through here too)
        flat = [_moved(key) for key in fields if key in _MOVED and key not in _GROUPS]
        if flat:
            raise TypeError("StackConfig: %s" % "; ".join(flat))
        return super().__new__(cls)

    def __post_init__(self):
        for name in _GROUPS:  # dicts become their groups
            setattr(self, name, _as_group(name, getattr(self, name)))

    @classmethod
    def from_name(cls, name, **fields):
        """A description from a preset name as nb_preset_from_name reads it (keys, aliases,
        "gpt2", "QKV-Post", "Pre-QK-Pre", ...), then `fields` set on top; a group the name sets
        (gpt2's norm, ffn, attn; an ablation's attn.sites) merges with the one given field by
        field: from_name("QKV-Post", ..., attn=dict(rope=True)) keeps the name's sites."""
        key, named = _preset_from_name(name)
        return cls(preset=key, **_merged(named, fields))

    def with_fields(self, **fields):
        """A copy with `fields` set on top, a group merged field by field: a dict sets its keys,
        a group dataclass the fields it sets (those not 0 / ""), and the group's other fields
        stay: cfg.with_fields(attn=dict(rope=True)) keeps cfg.attn.sites. The copy shares no
        group with cfg."""
        mine = {name: getattr(self, name) for name in _GROUPS if name in fields}
        return _copied(self, **_merged(mine, fields))


def resolve(cfg):
    """Every default of cfg resolved and the per-layer schedule filled in, as nb_stack_init
    does: returns a new StackConfig (layers: n_layers LayerSpecs, attn.sites the stack mask; its
    groups copies, cfg unchanged) and raises ValueError where nb_stack_init refuses the
    description."""
    c = _copied(cfg)
    norm, attn, ffn, res, hyper = c.norm, c.attn, c.ffn, c.residual, c.hyper
    L, d, H = c.n_layers, c.d_model, c.n_heads
    if L <= 0 or d <= 0 or H <= 0:
        raise ValueError("n_layers, d_model and n_heads must be > 0")
    if c.layers is not None and c.preset not in ("default",):
        raise ValueError("give either a preset (%s) or a custom layer schedule" % c.preset)
    if c.layers is None and c.preset == "default":
        c.preset = "pre"
    if c.preset not in _PRESET:
        raise ValueError("unknown preset %r" % c.preset)
    row = _PRESET[c.preset]
    sites = row.sites if attn.sites == 0 else attn.sites & SITES_QKVC
    if c.mixln_alpha == 0:
        c.mixln_alpha = 0.25
    if c.mixln_alpha != -1 and not 0 < c.mixln_alpha <= 1:
        raise ValueError("mixln_alpha must be in (0, 1], or -1")
    n_post = 0 if c.mixln_alpha < 0 else int(math.floor(c.mixln_alpha * L + 1e-9))
    norm.type = norm.type or row.norm
    if norm.type not in _NORM_KINDS:
        raise ValueError("norm.type: rms, layer, dyt, l2 or derf")
    _resolve_norm_options(c)
    if norm.eps == 0:
        norm.eps = row.eps
    attn.site_width = attn.site_width or row.width
    if norm.final == 0:
        norm.final = row.final_norm
    if norm.embed == 0:
        norm.embed = row.embed_norm
    if row.streams == 2 and norm.final < 0:
        raise ValueError("SiameseNorm needs its output fusion (norm.final cannot be -1)")
    if c.siamese.no_fusion_norm and c.preset != "siamese":
        raise ValueError("siamese.no_fusion_norm is for the siamese preset")
    if res.value_residual not in (0, 1, 2):
        raise ValueError("residual.value_residual: 0 (off), 1 (fixed 0.5/0.5) or 2 (learnable)")
    if not (math.isfinite(res.depth_alpha) and 0 <= res.depth_alpha <= 2) or res.depth_base < 0:
        raise ValueError("residual.depth_alpha (%g) must be in [0, 2] (0 off) and "
                         "residual.depth_base (%d) >= 0 (0 = 1)"
                         % (res.depth_alpha, res.depth_base))
    if res.depth_alpha > 0 and row.streams == 2:
        raise ValueError("residual.depth_alpha scales the branches of placements; SiameseNorm (%s) "
                         "has fixed sublayers of its own scales" % c.preset)
    res.depth_base = res.depth_base or 1
    # modded-nanogpt's value embeddings (nb__stack_residual's checks, after CompleteP's)
    if not (isinstance(res.value_embeds, int) and 0 <= 2 * res.value_embeds <= L):
        raise ValueError("residual.value_embeds (%r) must be in [0, n_layers / 2] (%d layers: "
                         "the first N and the last N layers mix the N tables)"
                         % (res.value_embeds, L))
    if res.value_embeds and res.value_residual:
        raise ValueError("residual.value_embeds and residual.value_residual both mix the values "
                         "(the tables' rows, layer 0's V): give one")
    # nGPT's options, by the preset where 0 (nb__stack_ngpt)
    ngpt = c.preset == "ngpt"
    if not (math.isfinite(res.interp_init) and 0 <= res.interp_init <= 1):
        raise ValueError("residual.interp_init (%g) must be in (0, 1] (0 = 0.05)" % res.interp_init)
    if attn.qk_scale not in (-1, 0, 1) or ffn.in_scale not in (-1, 0, 1):
        raise ValueError("attn.qk_scale (%d) and ffn.in_scale (%d) must be -1, 0 or 1"
                         % (attn.qk_scale, ffn.in_scale))
    if attn.softmax_scale != 0 and not (math.isfinite(attn.softmax_scale) and
                                        attn.softmax_scale > 0):
        raise ValueError("attn.softmax_scale (%g) must be finite and > 0 (0 = the preset's)"
                         % attn.softmax_scale)
    res.interp_init = res.interp_init or 0.05
    attn.qk_scale = attn.qk_scale or (1 if ngpt else -1)
    ffn.in_scale = ffn.in_scale or (1 if ngpt else -1)
    if attn.softmax_scale == 0 and ngpt:  # 0 stays 0 otherwise: 1/sqrt(d_k)
        attn.softmax_scale = math.sqrt(d / H)
    ffn.type = ffn.type or "swiglu"
    if ffn.d_ff == 0 and ngpt and ffn.type == "swiglu":
        ffn.d_ff = 4 * d  # its c_fc: d -> 8d
    hyper.kind = hyper.kind or row.hyper
    if hyper.kind not in HYPER_KINDS:
        raise ValueError("hyper.kind: none, mhc, hc, identity or mhc_lite")
    if hyper.kind == "none" and (hyper.streams or hyper.static_maps or hyper.sinkhorn):
        raise ValueError("hyper.streams, hyper.static_maps and hyper.sinkhorn need "
                         "hyper-connections (hyper.kind)")
    if hyper.kind == "mhc_lite" and hyper.sinkhorn:
        raise ValueError("hyper.sinkhorn (%d) is mHC's; mHC-lite has no Sinkhorn"
                         % hyper.sinkhorn)
    if hyper.kind != "none":
        hyper.streams = hyper.streams or 4
        hyper.sinkhorn = hyper.sinkhorn or 20
        if not 1 <= hyper.streams <= 8:
            raise ValueError("hyper.streams must be 1..8 (0 = 4)")
        if hyper.kind == "mhc_lite" and hyper.streams > HYPER_LITE_MAX_STREAMS:
            raise ValueError("mHC-lite mixes the n! permutations of its streams: hyper.streams "
                             "(%d) must be 1..%d (0 = 4)" % (hyper.streams,
                                                            HYPER_LITE_MAX_STREAMS))
        if not 1 <= hyper.sinkhorn <= 100:
            raise ValueError("hyper.sinkhorn must be 1..100 (0 = 20)")
        if hyper.static_maps not in (0, 1):
            raise ValueError("hyper.static_maps: 0 (dynamic) or 1 (static)")
        if row.streams == 2:
            raise ValueError("hyper-connections need one residual stream (not SiameseNorm)")
    # DenseFormer (nb__stack_residual's checks, after the hyper-connections' kind is known)
    if res.dwa not in (0, 1) or not 0 <= res.dwa_dilation <= L:
        raise ValueError("residual.dwa (%r) must be 0 or 1 and residual.dwa_dilation (%r) in "
                         "[0, n_layers] (0 = 1)" % (res.dwa, res.dwa_dilation))
    if not res.dwa and res.dwa_dilation:
        raise ValueError("residual.dwa_dilation (%d) needs residual.dwa" % res.dwa_dilation)
    if res.dwa and (row.streams == 2 or hyper.kind != "none"):
        raise ValueError("residual.dwa averages the outputs of one residual stream; %s has %s"
                         % (c.preset, "hyper-connections" if hyper.kind != "none"
                            else "SiameseNorm's two"))
    if res.dwa:  # (0 stays 0 without dwa, as in the library: resolve's result a description
        res.dwa_dilation = res.dwa_dilation or 1  # resolve accepts)
    if not 0 <= res.dwa_period <= L or (not res.dwa and res.dwa_period):
        raise ValueError("residual.dwa_period (%r) must be in [0, n_layers] (0 = 1) and needs "
                         "residual.dwa" % res.dwa_period)
    if res.dwa:  # the period: every layer averages (0 stays 0 without dwa)
        res.dwa_period = res.dwa_period or 1
    # Attention Residuals (nb__stack_residual's checks, after DenseFormer's)
    if res.attn_res not in (0, 1) or not 0 <= res.attn_res_block <= 2 * L:
        raise ValueError("residual.attn_res (%r) must be 0 or 1 and residual.attn_res_block (%r) "
                         "in [0, 2 n_layers] (sublayers; 0 = 1)" % (res.attn_res,
                                                                   res.attn_res_block))
    if not res.attn_res and res.attn_res_block:
        raise ValueError("residual.attn_res_block (%d) needs residual.attn_res"
                         % res.attn_res_block)
    if res.attn_res and (row.streams == 2 or hyper.kind != "none" or res.dwa):
        raise ValueError("residual.attn_res replaces the residual sums of one stream; %s has %s"
                         % (c.preset, "hyper-connections" if hyper.kind != "none" else
                            "DenseFormer's averages (residual.dwa)" if res.dwa else
                            "SiameseNorm's two"))
    if res.attn_res:  # Full AttnRes (0 stays 0 without attn_res)
        res.attn_res_block = res.attn_res_block or 1
    # U-Net skips and the re-injection of x_0 (nb__stack_residual's checks, after AttnRes')
    if res.unet_skips not in (0, 1) or res.reinject_x0 not in (0, 1):
        raise ValueError("residual.unet_skips (%r) and residual.reinject_x0 (%r) must be 0 or 1"
                         % (res.unet_skips, res.reinject_x0))
    if res.unet_skips and L % 2:
        raise ValueError("residual.unet_skips pairs the first half's layers with the second's: "
                         "n_layers (%d) must be even" % L)
    if (res.unet_skips or res.reinject_x0) and (row.streams == 2 or hyper.kind != "none" or
                                                res.dwa or res.attn_res):
        raise ValueError("residual.%s mixes a layer's input in one residual stream; %s has %s"
                         % ("unet_skips" if res.unet_skips else "reinject_x0", c.preset,
                            "hyper-connections" if hyper.kind != "none" else
                            "DenseFormer's averages (residual.dwa)" if res.dwa else
                            "Attention Residuals (residual.attn_res)" if res.attn_res else
                            "SiameseNorm's two"))
    c.gemm.precision = c.gemm.precision or "fp32"
    if c.gemm.precision not in ("fp32", "bf16"):
        raise ValueError("gemm.precision: fp32 or bf16")
    if c.gemm.bf16_outputs not in (0, 1) or (c.gemm.bf16_outputs and c.gemm.precision != "bf16"):
        raise ValueError("gemm.bf16_outputs: 0, or 1 with gemm.precision bf16")
    if ffn.type not in ("swiglu", "gelu_tanh", "gelu_erf"):
        raise ValueError("ffn.type: swiglu, gelu_tanh or gelu_erf")
    if ffn.d_ff == 0:
        ffn.d_ff = (8 * d // 3 + 63) // 64 * 64 if ffn.type == "swiglu" else 4 * d
    if attn.bias & ~(ATTN_BIAS_QKV | ATTN_BIAS_OUT):
        raise ValueError("attn.bias: a mask of ATTN_BIAS_QKV and ATTN_BIAS_OUT")
    if ffn.bias == 0:
        ffn.bias = -1 if ffn.type == "swiglu" else 1
    c.n_kv_heads = c.n_kv_heads or H
    if d % H or H % c.n_kv_heads:
        raise ValueError("d_model %% n_heads and n_heads %% n_kv_heads must be 0")
    if attn.qk_scale > 0 and c.n_kv_heads != H:
        raise ValueError("attn.qk_scale shares head h's scales between Q head h and K head h: "
                         "n_kv_heads (%d) must equal n_heads (%d)" % (c.n_kv_heads, H))
    if attn.rope_theta == 0:
        attn.rope_theta = 10000.0
    if attn.rope and (d // H) % 2:
        raise ValueError("RoPE needs an even head dimension")
    if c.layers is not None:
        if len(c.layers) != L:
            raise ValueError("layers has %d entries, n_layers is %d" % (len(c.layers), L))
        layers = []
        for l, ld in enumerate(c.layers):
            ld = LayerSpec(replace(ld.attn), replace(ld.ffn), ld.sites)
            for p in (ld.attn, ld.ffn):
                if p.residual_from_norm and not p.input_norm:
                    raise ValueError("layer %d: residual_from_norm needs input_norm" % l)
                if p.residual_norm and p.residual_from_norm:
                    raise ValueError("layer %d: residual_norm and residual_from_norm both set "
                                     "the residual" % l)
                if p.branch_scale not in _BRANCH_SCALES:
                    raise ValueError("layer %d: branch_scale %r: one of %s"
                                     % (l, p.branch_scale, _BRANCH_SCALES))
                p.residual_scale = p.residual_scale or 1.0
                p.input_scale = p.input_scale or 1.0
                if p.input_scale != 1 and not p.input_norm:
                    raise ValueError("layer %d: input_scale needs input_norm" % l)
                if p.branch_mult != 0 and not (math.isfinite(p.branch_mult) and
                                               p.branch_mult > 0):
                    raise ValueError("layer %d: branch_mult (%g) must be finite and > 0"
                                     % (l, p.branch_mult))
            layers.append(ld)
    else:
        n_first = n_post if row.n_first < 0 else row.n_first
        layers = []
        for l in range(L):
            codes = row.first if l < n_first else row.rest
            ld = LayerSpec(place_code(codes[0], l, L), place_code(codes[1], l, L), sites)
            if res.branch_scale:  # the stack's branch scale on every placement
                ld.attn.branch_scale = ld.ffn.branch_scale = res.branch_scale
            layers.append(ld)
    # CompleteP's residual multiplier where the placement leaves it 0 (nb__depth_mult)
    m = (float(L) / res.depth_base) ** -res.depth_alpha if res.depth_alpha > 0 else 1.0
    for ld in layers:
        for p in (ld.attn, ld.ffn):
            p.branch_mult = p.branch_mult or m
    for l, ld in enumerate(layers):  # nb__check_resolved_layer
        for which, p in (("attention", ld.attn), ("FFN", ld.ffn)):
            if p.branch_scale == "interp" and (p.branch_mult != 1 or p.residual_scale != 1):
                raise ValueError("layer %d %s: the interp branch scale steps from the residual "
                                 "toward the branch: a branch_mult (%g; residual.depth_alpha) "
                                 "or residual_scale (%g) other than 1 is refused with it"
                                 % (l, which, p.branch_mult, p.residual_scale))
            if hyper.kind != "none" and (p.residual_norm or p.branch_scale == "interp"):
                raise ValueError("layer %d %s: hyper-connections carry the residual; a %s is "
                                 "refused with them" % (l, which, "residual norm" if
                                                        p.residual_norm else "interp branch scale"))
    if hyper.kind != "none":  # the streams replace a plain residual add
        for l, ld in enumerate(layers):
            for which, p in (("attention", ld.attn), ("FFN", ld.ffn)):
                if p.post_norm or p.residual_from_norm or p.residual_scale != 1:
                    raise ValueError("layer %d %s: hyper-connections need a plain residual (no "
                                     "post norm, no residual from the norm, residual_scale 1)"
                                     % (l, which))
    if res.attn_res:  # the readers replace the residual add: a plain one only
        for l, ld in enumerate(layers):
            for which, p in (("attention", ld.attn), ("FFN", ld.ffn)):
                what = ("post norm" if p.post_norm else "residual from the norm"
                        if p.residual_from_norm else "residual norm" if p.residual_norm else
                        "interp branch scale" if p.branch_scale == "interp" else
                        "residual_scale other than 1" if p.residual_scale != 1 else "")
                if what:
                    raise ValueError("layer %d %s: attention residuals (residual.attn_res) "
                                     "replace the residual sums; a %s is refused with them"
                                     % (l, which, what))
    c.layers = layers
    attn.sites = sites
    return c


def _streams(c):
    return _PRESET[c.preset].streams


# norm kinds: (has a gain, block norms have a bias, learnable scalars: DyT's alpha, Derf's
# alpha and shift) as the library's nb__norm_kinds
_NORM_KINDS = {"rms": (True, False, 0), "layer": (True, True, 0), "dyt": (True, True, 1),
               "l2": (False, False, 0), "derf": (True, True, 2)}
_BRANCH_SCALES = ("", "scalar", "sublayer", "channel", "interp")
_GATES = ("", "none", "headwise", "elementwise")
_SINKS = ("", "none", "learned", "off_by_one")


def _resolve_norm_options(c):
    """The porting options of nb__stack_norms (norm.gain, norm.bias, norm.gain_offset,
    norm.embed_scale, the stack's residual.branch_scale), the output gate attn.gate, the
    attention sinks attn.sink, attn.clip_qkv and attn.softcap, checked as nb_stack_init checks
    them."""
    norm, branch_scale = c.norm, c.residual.branch_scale
    gain, block_bias, _ = _NORM_KINDS[norm.type]
    if norm.gain not in (-1, 0) or norm.bias not in (-1, 0) or norm.gain_offset not in (0, 1):
        raise ValueError("norm.gain (%d) and norm.bias (%d) must be 0 or -1, norm.gain_offset "
                         "(%d) 0 or 1" % (norm.gain, norm.bias, norm.gain_offset))
    if norm.bias < 0 and not block_bias:
        raise ValueError("norm.bias -1: the norm (%s) has no bias to remove" % norm.type)
    if norm.gain < 0 and not gain:
        raise ValueError("norm.gain -1: the norm (%s) has no weight to remove" % norm.type)
    if norm.embed_scale not in (0, 1):
        raise ValueError("norm.embed_scale (%d) must be 0 or 1" % norm.embed_scale)
    if branch_scale not in _BRANCH_SCALES:
        raise ValueError("residual.branch_scale %r: one of %s" % (branch_scale, _BRANCH_SCALES))
    if branch_scale and (c.layers is not None or _PRESET[c.preset].streams == 2):
        raise ValueError("residual.branch_scale sets a preset's placements: a custom schedule "
                         "sets its own, and SiameseNorm (%s) has none" % c.preset)
    if c.attn.gate not in _GATES:
        raise ValueError("attn.gate %r: one of %s" % (c.attn.gate, _GATES))
    c.attn.gate = "" if c.attn.gate == "none" else c.attn.gate
    if c.attn.sink not in _SINKS:
        raise ValueError("attn.sink %r: one of %s" % (c.attn.sink, _SINKS))
    c.attn.sink = "" if c.attn.sink == "none" else c.attn.sink
    clip = c.attn.clip_qkv
    if not (clip >= 0 and math.isfinite(clip)):  # nb_attn_plan_make's check (NaN fails it too)
        raise ValueError("attn.clip_qkv (%g) must be 0 (off) or finite and > 0" % clip)
    cap = c.attn.softcap
    if not (cap >= 0 and math.isfinite(cap)):  # nb_attn_plan_make's check (NaN fails it too)
        raise ValueError("attn.softcap (%g) must be 0 (off) or finite and > 0" % cap)


# ---- modules ---------------------------------------------------------------------------------
class _ValueResidual(nn.Module):
    """ResFormer's learnable mix of a layer l >= 1: "lambda" = [lambda_1, lambda_2] (init 0.5,
    the fixed form), V' = lambda_1 V_l + lambda_2 V_0. Also the value embeddings' pair of every
    layer ("value_embed.lambda" = [lambda_0, lambda_1], modded-nanogpt's sa_lambdas, init 0.5):
    V' = lambda_0 V + lambda_1 E_t, or lambda_0 V in a layer without a table."""

    def __init__(self):
        super().__init__()
        self.register_parameter("lambda", nn.Parameter(torch.full((2,), 0.5)))


def value_embed_table(l, n_layers, n_tables):
    """The table of the value embeddings that layer l mixes in (nb__ve_table): l for the first
    n_tables layers, l - (n_layers - n_tables) for the last n_tables, None between."""
    if l < n_tables:
        return l
    return l - (n_layers - n_tables) if l >= n_layers - n_tables else None


class _DWA(nn.Module):
    """DenseFormer's weights a_l of layer l: "weight" (1, count), nn.Linear(count, 1)'s layout
    (the code's alphas[l]; count = (l + 1) // k + 1 for the dilation k), init 0 with the last
    entry 1: x_{l+1} = h_{l+1}, the plain stack. A plain parameter: building it draws nothing
    from the random stream (nn.Linear's init would)."""

    def __init__(self, count):
        super().__init__()
        w = torch.zeros(1, count)
        w[0, -1] = 1.0
        self.weight = nn.Parameter(w)


def _dwa_count(l, k):
    """How many outputs layer l's average reads with the dilation k: h_j for j = (l + 1) mod k,
    + k, .., l + 1 (the code's (i + 1 + dilation) // dilation)."""
    return (l + 1) // k + 1


def _dwa_here(l, p):
    """Whether layer l averages with the period p (the package's (i + 1) % period == 0: its
    alphas[i] is a Linear, else None and the block's output is the next input)."""
    return (l + 1) % p == 0


class _PseudoQuery(nn.Module):
    """An Attention Residuals pseudo-query w: "weight" (1, d), the layout of the official
    code's nn.Linear(d, 1, bias=False) (attn_res_proj, mlp_res_proj), init 0: every reader's
    weights uniform, as the paper requires. A plain parameter: building it draws nothing from
    the random stream (nn.Linear's init would)."""

    def __init__(self, d):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(1, d))


class _AttnRes(nn.Module):
    """One Attention Residuals reader: "proj" its pseudo-query (_PseudoQuery) and "norm" the
    keys' RMSNorm with its gain (the official code's attn_res_norm / mlp_res_norm: "weight" (d),
    init 1, eps the stack's norm.eps; an RMSNorm whatever norm.type is, never offset)."""

    def __init__(self, d, eps):
        super().__init__()
        self.proj = _PseudoQuery(d)
        self.norm = Norm(d, "rms", eps, bias=False)


def block_attn_res(blocks, partial_block, proj, norm):
    """The official pseudocode's block_attn_res (MoonshotAI/Attention-Residuals' README):
    attention over depth from the completed blocks' representations blocks (N tensors
    (B, T, d); here x_0 first) and the running partial sum partial_block (B, T, d): the values V
    the sources stacked, the keys K = norm(V), the logits each key's dot with the pseudo-query,
    a softmax over the sources, h the weighted sum of the values. Returns (h, the weights
    (N + 1, B, T))."""
    V = torch.stack(blocks + [partial_block])  # [N + 1, B, T, D]
    K = norm(V)
    logits = torch.einsum("d, n b t d -> n b t", proj.weight.squeeze(0), K)
    weights = logits.softmax(0)
    h = torch.einsum("n b t, n b t d -> b t d", weights, V)
    return h, weights


def attn_res_sources(j, S):
    """The sources of Attention Residuals' reader j (1 <= j <= 2L; 2L before the final norm)
    with the block size S, as the indices e of the partial sums p_e it reads in its order
    (-1: x_0): x_0, the blocks completed before sublayer j-1 (p_{S-1}, .., p_{mS-1},
    m = (j-1)//S), then p_{j-1}."""
    return [-1] + [m * S - 1 for m in range(1, (j - 1) // S + 1)] + [j - 1]


def attn_res_weights(c, weights):
    """nb_stack_attn_res_weights of a forward: the (2L+1) x (2L+1) float64 matrix of every
    reader's weights averaged over the tokens, row j the reader before sublayer j (2L: the final
    norm; row 0 sublayer 0, which reads x_0 alone), column e + 1 the source p_e (column 0 x_0),
    0 where a reader does not read a source. c: the resolved StackConfig; weights: the list a
    forward's depth_weights received (Stack.forward)."""
    J = 2 * c.n_layers + 1
    out = torch.zeros(J, J, dtype=torch.float64)
    out[0, 0] = 1.0
    assert len(weights) == J - 1, (len(weights), J)
    for j, a in enumerate(weights, start=1):
        src = attn_res_sources(j, c.residual.attn_res_block)
        assert a.shape[-1] == len(src), (j, a.shape, src)
        mean = a.detach().double().reshape(-1, len(src)).mean(0)
        for m, e in enumerate(src):
            out[j, e + 1] = mean[m]
    return out


def sinkhorn(C, iters, eps=1e-6):
    """mHC's Sinkhorn-Knopp of the logits C (..., n, n), comb[j][k] (TileKernels'
    sinkhorn_normalize_ref): softmax over k, + eps; columns (each k's sum over j, + eps); then
    iters - 1 times rows and columns. Autograd differentiates the unrolled iterations, as the
    official kernel's backward does."""
    M = torch.softmax(C, dim=-1) + eps
    M = M / (M.sum(dim=-2, keepdim=True) + eps)
    for _ in range(iters - 1):
        M = M / (M.sum(dim=-1, keepdim=True) + eps)
        M = M / (M.sum(dim=-2, keepdim=True) + eps)
    return M


class _HyperHC(nn.Module):
    """HC's width and depth connections of one sublayer (arXiv 2409.19606, Appendix J,
    Alg. 2), "hc_attn" / "hc_ffn": static_alpha [n, n+1] (column 0 the pre weights A_m, columns
    1..n A_r), static_beta [n]; dynamic: dynamic_alpha_fn [d, n+1] (x @ W), dynamic_alpha_scale,
    dynamic_beta_fn [d], dynamic_beta_scale and the per-stream norm (the stack's kind). Init as
    the library's (nb_stack_init_params): static_alpha = [e_{k mod n} | I], static_beta 1, the
    dynamic fns 0, the scales 0.01; k = 2 l + s, the sublayer's index."""

    def __init__(self, c, k):
        super().__init__()
        n, d = c.hyper.streams, c.d_model
        a = torch.zeros(n, n + 1)
        a[k % n, 0] = 1.0
        a[:, 1:] = torch.eye(n)
        self.static_alpha = nn.Parameter(a)
        self.static_beta = nn.Parameter(torch.ones(n))
        if not c.hyper.static_maps:
            self.dynamic_alpha_fn = nn.Parameter(torch.zeros(d, n + 1))
            self.dynamic_alpha_scale = nn.Parameter(torch.full((1,), 0.01))
            self.dynamic_beta_fn = nn.Parameter(torch.zeros(d))
            self.dynamic_beta_scale = nn.Parameter(torch.full((1,), 0.01))
            self.norm = block_norm(c)

    def maps(self, X):
        """(pre (.., n), post (.., n), comb (.., n, n)) of the streams X (.., n, d)."""
        if not hasattr(self, "norm"):  # static HC
            alpha, beta = self.static_alpha, self.static_beta
            alpha = alpha.expand(*X.shape[:-2], *alpha.shape)
            beta = beta.expand(*X.shape[:-2], *beta.shape)
        else:
            hbar = self.norm(X)  # per stream, one set of parameters
            alpha = self.dynamic_alpha_scale * torch.tanh(hbar @ self.dynamic_alpha_fn) + \
                self.static_alpha
            beta = self.dynamic_beta_scale * torch.tanh(hbar @ self.dynamic_beta_fn) + \
                self.static_beta
        return alpha[..., 0], beta, alpha[..., 1:]


def permutations(n):
    """mHC-lite's permutations of 0..n-1, (n!, n): row r is pi_r, in itertools.permutations'
    (lexicographic) order, as its code enumerates them; row 0 the identity."""
    return torch.tensor(list(itertools.permutations(range(n))), dtype=torch.long).reshape(-1, n)


def birkhoff(C, n):
    """mHC-lite's comb from the logits C (..., n!): a = softmax(C) over the permutations,
    comb[j][k] = sum_r a_r [k = pi_r(j)] (..., n, n), exactly doubly stochastic (its code's
    einsum of softmax(res_coeff) with eye[perm] over r)."""
    P = F.one_hot(permutations(n), n).to(C.dtype)  # P[r, j, k] = [k = pi_r(j)]
    return torch.einsum("...r,rjk->...jk", torch.softmax(C, dim=-1), P)


def _hc_combs(kind, n):
    """comb's logits per token in the mHC family (nb__hc_combs): Sinkhorn's n x n, mHC-lite's
    n!, none for the identity form."""
    return {"mhc": n * n, "mhc_lite": math.factorial(n)}.get(kind, 0)


def _mhc_mix(X, fn):
    """mHC's r (fn @ xf): xf the n streams of X (.., n, d) side by side, r = 1 / sqrt(mean(xf^2)
    + 1e-6) (no gain; TileKernels' mhc_pre_norm_fn_ref)."""
    xf = X.flatten(-2)
    return torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * (xf @ fn.t())




class Norm(nn.Module):
    """RMSNorm, LayerNorm, DyT, Derf or L2 over the last dimension, with a gain (`weight`) and,
    for block LayerNorms, DyTs and Derfs, a `bias`. The attention site norms are
    Norm(..., bias=False); block_norm() makes a stack's block norms.
    DyT ("Transformers without Normalization", 2025): weight * tanh(alpha x) + bias with a
    learnable scalar `alpha` (registered first, as DyT's DynamicTanh module and the library's
    buffer order have it; its initial value comes from the library or the checkpoint).
    Derf (zlab-princeton/Derf's Dynamic_erf): weight * erf(alpha x + shift) + bias, its two
    scalars one tensor `alpha_shift` = [alpha, shift] (the library's; init [1, 0]), first.
    L2 (nGPT's justnorm, x / ||x||): no parameters at all, as the library has no tensors.
    gain=False: no weight (norm.gain -1); offset: the weight w multiplies by 1 + w (Gemma's
    unit offset, norm.gain_offset; init 0)."""

    def __init__(self, width, kind, eps, bias, gain=True, offset=0):
        super().__init__()
        self.kind, self.eps, self.offset = kind, eps, offset
        if kind == "dyt":
            self.alpha = nn.Parameter(torch.ones(1))
        if kind == "derf":
            self.alpha_shift = nn.Parameter(torch.tensor([1.0, 0.0]))
        if kind == "l2" or not gain:
            self.register_parameter("weight", None)
        else:
            self.weight = nn.Parameter(torch.zeros(width) if offset else torch.ones(width))
        if bias and kind != "l2":
            self.bias = nn.Parameter(torch.zeros(width))
        else:
            self.register_parameter("bias", None)

    def forward(self, x):
        w = self.weight
        if w is not None and self.offset:
            w = 1 + w
        a = getattr(self, "alpha_shift" if self.kind == "derf" else "alpha", None)
        return norm(self.kind, x, w, self.bias, self.eps, a)


def block_norm(c):
    """A block norm of the resolved config c (width d): the stack's kind, eps, and its weight,
    bias and unit offset as norm.gain, norm.bias and norm.gain_offset say (nb__put_norm)."""
    gain, block_bias, _ = _NORM_KINDS[c.norm.type]
    return Norm(c.d_model, c.norm.type, c.norm.eps, bias=block_bias and c.norm.bias >= 0,
                gain=gain and c.norm.gain >= 0, offset=c.norm.gain_offset)


def norm(kind, x, weight=None, bias=None, eps=1e-5, alpha=None):
    """The Norm module's function: "rms", "layer", "dyt", "derf" or "l2" over the last dimension
    of x, with an optional gain and bias (alpha: DyT's scalar, Derf's [alpha, shift]; L2 has
    no eps: a zero vector gives non-finite values, as in nGPT's code and the library)."""
    if kind == "dyt":
        y = torch.tanh(alpha * x)
    elif kind == "derf":
        y = torch.erf(alpha[0] * x + alpha[1])
    elif kind == "l2":
        y = x * torch.rsqrt(x.pow(2).sum(-1, keepdim=True))
    elif kind == "rms":
        y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    else:
        return F.layer_norm(x, (x.shape[-1],), weight, bias, eps)
    y = y * weight if weight is not None else y
    return y + bias if bias is not None else y


def bf16_round(x):
    """x rounded to bfloat16 (to nearest even) and back to x's dtype. PyTorch converts float64
    through float32 (two roundings), which is the library's: it rounds float32 values."""
    return x.to(torch.bfloat16).to(x.dtype)


class _BF16MatMul(torch.autograd.Function):
    """a @ b on bf16-rounded operands, summed in their dtype; the backward's two products round
    their operands too, the incoming gradient included (the library's BF16 GEMMs)."""

    @staticmethod
    def forward(ctx, a, b, grad_scale):
        ra, rb = bf16_round(a), bf16_round(b)
        ctx.save_for_backward(ra, rb)
        ctx.grad_scale = grad_scale
        return ra @ rb

    @staticmethod
    def backward(ctx, g):
        ra, rb = ctx.saved_tensors
        s = ctx.grad_scale
        rg = bf16_round(g if s == 1 else g * s)
        ga = gb = None
        if ctx.needs_input_grad[0]:
            ga = (rg @ rb.transpose(-2, -1)).sum_to_size(ra.shape)
            ga = ga if s == 1 else ga * (1.0 / s)
        if ctx.needs_input_grad[1]:
            gb = (ra.transpose(-2, -1) @ rg).sum_to_size(rb.shape)
            gb = gb if s == 1 else gb * (1.0 / s)
        return ga, gb, None


def bf16_matmul(a, b, grad_scale=1.0):
    """a @ b (matrices, or batches of them of the same shape) with every GEMM of the forward
    and backward on bf16-rounded operands: forward bf16(a) bf16(b), backward
    grad_a = bf16(g) bf16(b)^T, grad_b = bf16(a)^T bf16(g). grad_scale s: the backward rounds
    s g instead and scales the products by 1/s (a mean loss over s terms passes s: the rounded
    gradient is then that of the sum, as the trainer's LM head has it). Not twice
    differentiable."""
    return _BF16MatMul.apply(a, b, grad_scale)


class _BF16Rounded(torch.autograd.Function):
    """x rounded to bf16 in the forward (grad=False) or its gradient in the backward (True)."""

    @staticmethod
    def forward(ctx, x, grad):
        ctx.grad = grad
        return x.clone() if grad else bf16_round(x)

    @staticmethod
    def backward(ctx, g):
        return (bf16_round(g) if ctx.grad else g), None


def bf16_rounded(x):
    """bf16(x), the gradient passed through unrounded: a GEMM's output kept in bf16
    (gemm.bf16_outputs' h)."""
    return _BF16Rounded.apply(x, False)


def bf16_rounded_grad(x):
    """x, its gradient rounded to bf16: the output of a backward GEMM kept in bf16
    (gemm.bf16_outputs' da)."""
    return _BF16Rounded.apply(x, True)


def bf16_linear(x, weight, bias=None, grad_scale=1.0):
    """F.linear(x, weight, bias) as a BF16 stack's projection: bf16(x) bf16(weight)^T over the
    rows of x (one GEMM, as the library's: its weight gradient sums over all of them), the bias
    added (and its gradient summed) unrounded. grad_scale: see bf16_matmul."""
    y = bf16_matmul(x.reshape(-1, x.shape[-1]), weight.t(), grad_scale)
    y = y.reshape(*x.shape[:-1], weight.shape[0])
    return y + bias if bias is not None else y


class _LayerScale(nn.Module):
    """timm's LayerScale: a learnable per-channel `gamma` (named ls1.gamma / ls2.gamma)."""

    def __init__(self, d):
        super().__init__()
        self.gamma = nn.Parameter(torch.ones(d))


def _rotate_half(x):
    a, b = x.chunk(2, dim=-1)
    return torch.cat((-b, a), dim=-1)


def rope(x, theta):
    """NeoX rotate-half RoPE on (B, heads, T, d_k): pair (i, i + d_k/2) of position t rotates by
    t * theta^(-2i/d_k) (angles in float64, as normblocks)."""
    T, dk = x.shape[-2], x.shape[-1]
    inv = 1.0 / theta ** (torch.arange(0, dk, 2, dtype=torch.float64) / dk)  # as HF Llama
    ang = torch.arange(T, dtype=torch.float64)[:, None] * inv[None, :]
    ang = torch.cat((ang, ang), dim=-1)
    return x * ang.cos().to(x.dtype) + _rotate_half(x) * ang.sin().to(x.dtype)


# the block norms of a layer, in the library's parameter order (nb__norm_names)
_NORM_NAMES = ("attn_norm", "attn_out_norm", "attn_post_norm", "ff_norm", "ff_out_norm",
               "ff_post_norm", "attn_y_norm", "attn_input_norm", "ff_y_norm", "ff_input_norm",
               "attn_res_norm", "ff_res_norm")
# a layer's tensors in the library's order (nb__walk_layer), for library_parameters(): the
# modules in their registration order, the block's own parameters (sqk, sinks, suv, c1, the
# branch scales, ...) where the library has them
_BODY = ("att_proj", "attn_out", "q_norm", "k_norm", "v_norm", "c_norm", "sqk", "sinks",
         "ff_proj", "ff_out", "suv") + _NORM_NAMES


class Block(nn.Module):
    """Layer l of a resolved stack: an attention sublayer then an FFN sublayer, each in its
    placement (one stream), or SiameseNorm's two-stream layer. Modules are registered in
    the library's order: att_proj, attn_out, q/k/v/c_norm, ff_proj, ff_out, the block norms
    (_NORM_NAMES order); the block's own parameters (sqk, suv, c1, resweight, attn_alpha,
    mlp_alpha, ...) take their places in Stack.library_parameters(). nGPT's scales start at
    the library's init (NB_INIT_NGPT; nGPT's code's storage): sqk, attn_alpha, mlp_alpha
    1/sqrt(d), suv 1."""

    def __init__(self, c, l):
        super().__init__()
        self.c, self.l, self.spec = c, l, c.layers[l]
        self.tracer = None  # set by Stack.forward while tracing
        self.probs = None   # a list: attention() appends its probabilities (B, H, T, T); with
                            # attn.sink a row's sink mass is 1 - its sum
        self.bf16 = c.gemm.precision == "bf16"  # every GEMM on bf16 operands (_linear, _matmul)
        d, H, Hkv = c.d_model, c.n_heads, c.n_kv_heads
        dk = d // H
        self.dims = (d, H, Hkv, dk)
        # the output gate's logits: G rows after Q|K|V (H headwise, d elementwise)
        self.gate_width = {"": 0, "headwise": H, "elementwise": d}[c.attn.gate]
        self.att_proj = nn.Linear(d, d + 2 * Hkv * dk + self.gate_width,
                                  bias=bool(c.attn.bias & ATTN_BIAS_QKV))
        self.attn_out = nn.Linear(d, d, bias=bool(c.attn.bias & ATTN_BIAS_OUT))
        for name, bit in (("q", SITE_Q), ("k", SITE_K), ("v", SITE_V), ("c", SITE_C)):
            if self.spec.sites & bit:  # gain only (norm.gain is the block norms'), offset too
                full = (H if name in "qc" else Hkv) * dk
                self.add_module(name + "_norm", Norm(full if c.attn.site_width == _FULL else dk,
                                                     c.norm.type, c.norm.eps, bias=False,
                                                     offset=c.norm.gain_offset))
        if c.attn.qk_scale > 0:  # nGPT's s_qk: H d_k values, stored as its code (init 1/sqrt(d))
            self.sqk = nn.Parameter(torch.full((d,), 1.0 / math.sqrt(d)))
        if c.attn.sink == "learned":  # gpt-oss's z_h, one per query head (torchtitan's init)
            self.sinks = nn.Parameter(0.02 / math.sqrt(2.0 * (l + 1)) * torch.randn(H))
        in_width = 2 * c.ffn.d_ff if c.ffn.type == "swiglu" else c.ffn.d_ff
        self.ff_proj = nn.Linear(d, in_width, bias=c.ffn.bias > 0)
        self.ff_out = nn.Linear(c.ffn.d_ff, d, bias=c.ffn.bias > 0)
        if c.ffn.in_scale > 0:  # nGPT's s_uv (SwiGLU: s_u | s_z), init 1
            self.suv = nn.Parameter(torch.ones(in_width))
        for name in _NORM_NAMES:
            if self._has_norm(name):
                self.add_module(name, block_norm(c))
        self.siamese = _streams(c) == 2
        self.post_pre = c.preset == "siamese_post_pre"
        if self.siamese and not self.post_pre:
            self.c1 = nn.Parameter(torch.ones(d))
        # branch scales, after the norms as in the library's buffer (ReZero init 0)
        scales = (self.spec.attn.branch_scale, self.spec.ffn.branch_scale)
        if "scalar" in scales:
            self.resweight = nn.Parameter(torch.zeros(1))
        for which, name in ((0, "attn_resweight"), (1, "ff_resweight")):
            if scales[which] == "sublayer":  # SkipInit: one scalar per sublayer, init 0
                setattr(self, name, nn.Parameter(torch.zeros(1)))
        for which, name in ((0, "ls1"), (1, "ls2")):
            if scales[which] == "channel":
                self.add_module(name, _LayerScale(d))
        for which, name in ((0, "attn_alpha"), (1, "mlp_alpha")):
            if scales[which] == "interp":  # nGPT's eigen learning rates, init 1/sqrt(d)
                setattr(self, name, nn.Parameter(torch.full((d,), 1.0 / math.sqrt(d))))
        if c.residual.value_residual == 2 and l > 0:  # last in the layer, as the library's table
            self.value_residual = _ValueResidual()
        if c.residual.value_embeds:  # every layer's [lambda_0, lambda_1], in the same place
            self.value_embed = _ValueResidual()
        self.vres = None  # set by Stack.forward: a dict that carries V_0 from layer 0 (and the
                          # value embeddings' rows: "ve", one (B, T, H_kv, d_k) per table)
        self.hyper = "" if c.hyper.kind == "none" else c.hyper.kind  # last in the layer's table too
        if self.hyper:
            n = c.hyper.streams
            for s_i, s in enumerate(("attn", "ffn")):
                if self.hyper == "hc":
                    self.add_module("hc_" + s, _HyperHC(c, 2 * l + s_i))
                    continue
                m = 2 * n + _hc_combs(self.hyper, n)
                if not c.hyper.static_maps:  # fn ~ N(0, 0.02^2), base 0, scales 0.01 (mHC Table 5)
                    setattr(self, "hc_%s_fn" % s, nn.Parameter(0.02 * torch.randn(m, n * d)))
                base = torch.zeros(m)
                if self.hyper == "mhc_lite":  # its code's static residual logits: the identity
                    base[2 * n + 1:] = -8.0   # 0, the other permutations -8 (comb ~ 0.99 I)
                setattr(self, "hc_%s_base" % s, nn.Parameter(base))
                if not c.hyper.static_maps:
                    setattr(self, "hc_%s_scale" % s, nn.Parameter(
                        torch.full((2 if self.hyper == "identity" else 3,), 0.01)))
        # DenseFormer's a_l, the layer table's last (one stream: no hc_*), on the period's layers
        if c.residual.dwa and _dwa_here(l, c.residual.dwa_period):
            self.dwa = _DWA(_dwa_count(l, c.residual.dwa_dilation))
        if c.residual.attn_res:  # the readers before attention (l >= 1) and FFN: the table's last
            if l > 0:
                self.attn_res = _AttnRes(d, c.norm.eps)
            self.mlp_res = _AttnRes(d, c.norm.eps)
        # modded-nanogpt's U-Net skip weight (layers l >= L/2: its skip_weights[l - L/2], init
        # 1) then the re-injection's lambdas (its Block's, init [1, 0]): the table's last
        if c.residual.unet_skips and l >= c.n_layers // 2:
            self.skip_weight = nn.Parameter(torch.ones(1))
        if c.residual.reinject_x0:
            self.lambdas = nn.Parameter(torch.tensor([1.0, 0.0]))
        if self.siamese:  # c_l of layer l
            self.depth_c = [math.sqrt(2.0 * (l + 1)), math.sqrt(l + 1.0), 1.0][
                c.siamese.paper_scale]

    def _has_norm(self, name):
        c, s = self.c, self.spec
        if _streams(c) == 1:
            pl = s.attn if name.startswith("attn") else s.ffn
            kind = name.split("_", 1)[1]  # norm, out_norm, post_norm
            return {"norm": pl.input_norm, "out_norm": pl.output_norm,
                    "post_norm": pl.post_norm, "res_norm": pl.residual_norm}.get(kind, False)
        if name in ("attn_y_norm", "ff_norm", "ff_y_norm"):
            return True
        if name == "ff_input_norm":
            return not c.siamese.no_fusion_norm
        return c.preset == "siamese_post_pre" and name in ("attn_norm", "attn_input_norm")

    # -- the two sublayer functions F --

    def _linear(self, layer, x):
        """A projection (nn.Linear layer): bf16_linear in gemm.precision bf16."""
        return bf16_linear(x, layer.weight, layer.bias) if self.bf16 else layer(x)

    def _matmul(self, a, b):
        """The attention's products: bf16_matmul in gemm.precision bf16."""
        return bf16_matmul(a, b) if self.bf16 else a @ b

    def _t(self, sub, name, t):
        """The trace (Stack.trace): "blocks.<l>.<sub>.<name>", rows B*T, as nb_ctx.trace."""
        if self.tracer is not None:
            self.tracer("blocks.%d.%s.%s" % (self.l, sub, name), t.reshape(-1, t.shape[-1]))

    def _g(self, sub, f):
        """The trace of the backward: the gradient of the sublayer function's output f as
        "blocks.<l>.<sub>.grad_out" (nb_ctx.trace)."""
        if self.tracer is None:
            return f
        return self.tracer.grad("blocks.%d.%s.grad_out" % (self.l, sub), f, self.l,
                                0 if sub == "ffn" else 1)

    def _t_qkv(self, name, q, k, v, heads_first, g=None):
        """Trace [Q|K|V] rows as the library lays them out (B*T, d + 2 H_kv d_k), with the
        gate logits g (B, T, G) after them when gated (the library's rows carry them along)."""
        if self.tracer is None:
            return
        B, T = q.shape[0], q.shape[2] if heads_first else q.shape[1]
        parts = [(t.transpose(1, 2) if heads_first else t).reshape(B, T, -1) for t in (q, k, v)]
        self._t("attn", name, torch.cat(parts + ([g] if g is not None else []), dim=-1))

    def attention(self, x):
        """MHA with the layer's site norms (see the module docstring)."""
        d, H, Hkv, dk = self.dims
        B, T, _ = x.shape
        sites, full = self.spec.sites, self.c.attn.site_width == _FULL
        qkv = self._linear(self.att_proj, x)
        self._t("attn", "qkv", qkv)  # as projected: the library traces it before the clamp
        clip = self.c.attn.clip_qkv
        if clip > 0:  # OLMo's clip_qkv on Q|K|V only: the gate's logits are not OLMo's
            n = d + 2 * Hkv * dk
            qkv = torch.cat((qkv[..., :n].clamp(-clip, clip), qkv[..., n:]), dim=-1)
        q, k, v, g = qkv.split((d, Hkv * dk, Hkv * dk, self.gate_width), dim=-1)
        g = g if self.gate_width else None  # the gate's logits: never normed or rotated
        if full:  # OLMo-2: over the whole projection row, before the head split
            q, k, v = self._site_norms(q, k, v)
        q, k, v = (t.reshape(B, T, n, dk) for t, n in ((q, H), (k, Hkv), (v, Hkv)))
        if not full:  # per head: over each d_k vector, one gain for all heads
            q, k, v = self._site_norms(q, k, v)
        if sites & SITES_QKV or clip > 0:  # the library's: whenever it keeps the raw projection
            self._t_qkv("qkv_normed", q, k, v, False, g)
        vres = self.c.residual.value_residual
        if vres:  # ResFormer: the values attention reads, after the V norm
            if self.l == 0:
                self.vres["v0"] = v
            else:
                lam = getattr(self.value_residual, "lambda") if vres == 2 else (0.5, 0.5)
                v = lam[0] * v + lam[1] * self.vres["v0"]
                self._t_qkv("qkv_vres", q, k, v, False, g)
        if self.c.residual.value_embeds:  # modded-nanogpt: v = lambdas[0] * v + lambdas[1] * ve
            lam = getattr(self.value_embed, "lambda")
            t = value_embed_table(self.l, self.c.n_layers, self.c.residual.value_embeds)
            v = lam[0] * v + lam[1] * self.vres["ve"][t] if t is not None else lam[0] * v
            self._t_qkv("qkv_vres", q, k, v, False, g)  # the library's name, in every layer
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # (B, heads, T, d_k)
        if self.c.attn.rope:
            q, k = rope(q, self.c.attn.rope_theta), rope(k, self.c.attn.rope_theta)
            self._t_qkv("qkv_rope", q, k, v, True, g)
        if self.c.attn.qk_scale > 0:  # nGPT's s_qk: head h's d_k scales on Q head h and K head h
            sc = (math.sqrt(d) * self.sqk).view(H, 1, dk)
            q, k = q * sc, k * sc
            self._t_qkv("qkv_scaled", q, k, v, True, g)
        if H != Hkv:  # query head h reads KV head h // (H / H_kv)
            k = k.repeat_interleave(H // Hkv, dim=1)
            v = v.repeat_interleave(H // Hkv, dim=1)
        if self.c.attn.softmax_scale:  # nGPT's sqrt(d_k), or another scale
            s = self._matmul(q, k.transpose(-2, -1)) * self.c.attn.softmax_scale
        else:
            s = self._matmul(q, k.transpose(-2, -1)) / math.sqrt(dk)
        cap = self.c.attn.softcap
        if cap > 0:  # Gemma 2: after the scale, before the mask (and the sink's column)
            s = cap * torch.tanh(s / cap)
        if not self.c.attn.non_causal:
            mask = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1)
            s = s.masked_fill(mask, float("-inf"))
        if self.c.attn.sink:  # gpt-oss's sdpa: z_h one more column of the row, dropped after
            z = self.sinks if self.c.attn.sink == "learned" else s.new_zeros(H)
            s = torch.cat((s, z.view(1, H, 1, 1).expand(B, H, T, 1)), dim=-1)
            p = torch.softmax(s, dim=-1)[..., :-1]
        else:
            p = torch.softmax(s, dim=-1)
        if self.probs is not None:
            self.probs.append(p.detach())
        o = self._matmul(p, v).transpose(1, 2)  # (B, T, H, d_k)
        self._t("attn", "context", o.reshape(B, T, d))
        if sites & SITE_C:
            o = self.c_norm(o.reshape(B, T, d) if full else o)
            self._t("attn", "c_normed", o.reshape(B, T, d))
        if g is not None:  # C' = Nc(C) sigmoid(G): per head (over its d_k) or per element
            o = o.reshape(B, T, H, dk) * torch.sigmoid(g).reshape(B, T, H, -1)
            self._t("attn", "c_gated", o.reshape(B, T, d))
        out = self._linear(self.attn_out, o.reshape(B, T, d))
        self._t("attn", "out", out)
        return out

    def _site_norms(self, q, k, v):
        s = self.spec.sites
        return (self.q_norm(q) if s & SITE_Q else q, self.k_norm(k) if s & SITE_K else k,
                self.v_norm(v) if s & SITE_V else v)

    def ffn(self, x):
        """SwiGLU (first half value u, second half gate z) or GELU MLP; with ffn.in_scale the
        projection times sqrt(d) suv first."""
        h = self._linear(self.ff_proj, x)
        scaled = self.c.ffn.in_scale > 0  # nGPT's s_uv, per column (with the bias)
        if scaled:
            self._t("ffn", "proj", h)
            h = h * (math.sqrt(self.c.d_model) * self.suv)
        if self.c.gemm.bf16_outputs:  # traced as the activation reads it, as the library's
            h = bf16_rounded(h)
        self._t("ffn", "proj_scaled" if scaled else "proj", h)
        if self.c.ffn.type == "swiglu":
            u, z = h.chunk(2, dim=-1)
            a = F.silu(z) * u
        else:
            a = F.gelu(h, approximate="tanh" if self.c.ffn.type == "gelu_tanh" else "none")
        self._t("ffn", "act", a)
        if self.c.gemm.bf16_outputs:
            a = bf16_rounded_grad(a)
        out = self._linear(self.ff_out, a)
        self._t("ffn", "out", out)
        return out

    # -- placements --

    def _branch(self, which, x):
        """(h, f): the input norm's output and the branch f of the placement equations for
        sublayer `which` ("attn" or "ff"), everything but the residual (an "interp" branch
        scale steps from the residual: sublayer() applies it)."""
        pl = self.spec.attn if which == "attn" else self.spec.ffn
        fn = self.attention if which == "attn" else self.ffn
        sub = "attn" if which == "attn" else "ffn"
        h = x
        if pl.input_norm:
            h = getattr(self, which + "_norm")(x)
            if pl.input_scale != 1:
                h = pl.input_scale * h
            self._t(sub, "h", h)
        f = self._g(sub, fn(h))
        if pl.output_norm:
            f = getattr(self, which + "_out_norm")(f)
            self._t(sub, "out_normed", f)
        if pl.branch_scale == "scalar":
            f = self.resweight * f
        elif pl.branch_scale == "sublayer":
            f = getattr(self, which + "_resweight") * f
        elif pl.branch_scale == "channel":
            f = getattr(self, "ls1" if which == "attn" else "ls2").gamma * f
        if pl.branch_mult != 1:  # CompleteP's m (a constant)
            f = pl.branch_mult * f
        return h, f

    def interp_step(self, which):
        """|a| of an "interp" sublayer (nGPT's lr): a = residual.interp_init sqrt(d) lambda."""
        lam = self.attn_alpha if which == "attn" else self.mlp_alpha
        return torch.abs(self.c.residual.interp_init * math.sqrt(self.c.d_model) * lam)

    def hyper_maps(self, s, X):
        """(pre (B, T, n), post (B, T, n), comb (B, T, n, n) or None for the identity) of
        sublayer s ("attn" or "ffn") from the streams X (B, T, n, d)."""
        if self.hyper == "hc":
            return getattr(self, "hc_" + s).maps(X)
        n = X.shape[-2]
        base = getattr(self, "hc_%s_base" % s)
        if self.c.hyper.static_maps:  # the maps from base alone
            z = base.expand(*X.shape[:-2], base.shape[0])
        else:  # TileKernels' mhc_pre_split_mixes_ref: one scale per map, then base
            scale = getattr(self, "hc_%s_scale" % s)
            widths = (n, n, base.shape[0] - 2 * n)[:len(scale)]
            sc = torch.cat([scale[i].expand(w) for i, w in enumerate(widths)])
            z = _mhc_mix(X, getattr(self, "hc_%s_fn" % s)) * sc + base
        pre = torch.sigmoid(z[..., :n]) + 1e-6
        post = 2.0 * torch.sigmoid(z[..., n:2 * n])
        comb = None
        if self.hyper == "mhc":
            comb = sinkhorn(z[..., 2 * n:].unflatten(-1, (n, n)), self.c.hyper.sinkhorn)
        elif self.hyper == "mhc_lite":
            comb = birkhoff(z[..., 2 * n:], n)
        return pre, post, comb

    def hyper_sublayer(self, which, X):
        """X' of sublayer `which` ("attn" or "ff") with hyper-connections: X (B, T, n, d) the
        streams; u = sum_i pre_i x_i, y = the placement's branch of u,
        x'_k = post_k y + sum_j comb[j][k] x_j."""
        sub = "attn" if which == "attn" else "ffn"
        pre, post, comb = self.hyper_maps(sub, X)
        if self.tracer is not None:  # [pre | post | comb (j n + k)], the identity's I included
            n = X.shape[-2]
            cm = comb if comb is not None else torch.eye(n, dtype=X.dtype).expand(
                *X.shape[:-2], n, n)
            self._t(sub, "hc_maps", torch.cat((pre, post, cm.flatten(-2)), dim=-1))
        u = (pre.unsqueeze(-1) * X).sum(-2)
        self._t(sub, "hc_in", u)
        _, y = self._branch(which, u)
        self._t(sub, "x_out", y)  # the branch B(u): the library's sublayer output
        mixed = X if comb is None else torch.einsum("...jk,...jd->...kd", comb, X)
        return post.unsqueeze(-1) * y.unsqueeze(-2) + mixed

    def sublayer(self, which, x):
        """x' of the placement equations for sublayer `which` ("attn" or "ff")."""
        pl = self.spec.attn if which == "attn" else self.spec.ffn
        sub = "attn" if which == "attn" else "ffn"
        h, f = self._branch(which, x)
        r = h if pl.residual_from_norm else x
        if pl.residual_norm:  # nGPT's justnorm(h)
            r = getattr(self, which + "_res_norm")(x)
            self._t(sub, "res_normed", r)
        if pl.branch_scale == "interp":  # nGPT: A + a (B - A), in its code's order
            s = r + self.interp_step(which) * (f - r)
        else:
            s = pl.residual_scale * r + f if pl.residual_scale != 1 else r + f
        if pl.post_norm:
            self._t(sub, "sum", s)
            s = getattr(self, which + "_post_norm")(s)
        self._t(sub, "x_out", s)
        return s

    def attn_res_layer(self, blocks, partial_block, depth_weights=None):
        """Layer l with Attention Residuals, as the official pseudocode's layer forward (blocks,
        hidden_states): blocks the completed sources ([x_0] and the completed blocks' sums),
        partial_block the running sum p_{2l-1} (None in layer 0). For each sublayer j (2l, then
        2l+1): its reader's h_j = block_attn_res(blocks, partial_block) (sublayer 0 reads
        h_0 = x_0); where j starts a block (j mod S = 0) the partial sum joins blocks and a new
        one starts; the branch f_j = f(h_j) (_branch: no residual) starts or extends it.
        Returns (blocks, partial_block = p_{2l+1}, h_2l). depth_weights: a list that receives
        each reader's weights (B, T, count). Traces as the library's: attn.attn_res_h (l >= 1),
        the sublayer's names with x_out = f_j, attn.attn_res_p (p_2l), then the FFN's."""
        S = self.c.residual.attn_res_block
        h_attn = None
        for k, which in enumerate(("attn", "ff")):
            j, sub = 2 * self.l + k, ("attn", "ffn")[k]
            if j == 0:  # the code's reader there has x_0 alone
                h = blocks[0]
            else:
                reader = getattr(self, "attn_res" if k == 0 else "mlp_res")
                h, a = block_attn_res(blocks, partial_block, reader.proj, reader.norm)
                if depth_weights is not None:
                    depth_weights.append(a.movedim(0, -1))
                self._t(sub, "attn_res_h", h)
                if j % S == 0:  # the block boundary: the partial sum is a completed block
                    blocks = blocks + [partial_block]
                    partial_block = None
            h_attn = h if k == 0 else h_attn
            _, f = self._branch(which, h)
            self._t(sub, "x_out", f)
            partial_block = f if partial_block is None else partial_block + f
            self._t(sub, "attn_res_p", partial_block)
        return blocks, partial_block, h_attn

    def forward(self, x, y=None, x0=None):
        """(x, y) -> (x', y'); y is None except for SiameseNorm. With hyper-connections x is
        the streams (B, T, n, d). With residual.reinject_x0 x0 is the stack's x_0 and the
        layer runs on lambdas[0] x + lambdas[1] x0, as modded-nanogpt's Block.forward; the
        layer's input traced as "blocks.<l>.x_mixed" when it was mixed (re-injected, or a
        U-Net skip added by Stack.forward), as the library's."""
        if self.c.residual.reinject_x0:
            x = self.lambdas[0] * x + self.lambdas[1] * x0
        if self.tracer is not None and (hasattr(self, "lambdas") or
                                        hasattr(self, "skip_weight")):
            self.tracer("blocks.%d.x_mixed" % self.l, x)
        if self.hyper:
            return self.hyper_sublayer("ff", self.hyper_sublayer("attn", x)), None
        if not self.siamese:
            return self.sublayer("ff", self.sublayer("attn", x)), None
        c = self.depth_c
        if not self.post_pre:  # hybrid-pre
            A = self._g("attn", self.attention(x * self.c1 + self.attn_y_norm(y)))
            x1, y1 = x + A / c, y + A
            n = self.ff_norm(x1)
            u = n + self.ff_y_norm(y1)
            if not self.c.siamese.no_fusion_norm:
                u = self.ff_input_norm(u)
            Fo = self._g("ffn", self.ffn(u))
            return n + Fo / c, y1 + Fo
        for which, fn in (("attn", self.attention), ("ff", self.ffn)):  # post-pre
            u = getattr(self, which + "_norm")(x)
            v = getattr(self, which + "_input_norm")(u + getattr(self, which + "_y_norm")(y))
            z = self._g("attn" if which == "attn" else "ffn", fn(v))
            x, y = u + z / c, y + z
        return x, y


class Stack(nn.Module):
    """The whole body between embedding and LM head (nb_stack_forward): E (B, T, d) -> the
    final hidden state (B, T, d). named_parameters() gives the library's tensor table: the
    same names and shapes; library_parameters() also its order (the flat buffer's)."""

    def __init__(self, cfg):
        super().__init__()
        c = resolve(cfg)
        self.config = c
        d = c.d_model
        siamese = _streams(c) == 2
        if c.norm.embed_scale:  # first in the library's table (DyT's, Derf's shared_scale)
            self.embed_scale = nn.Parameter(torch.full((1,), math.sqrt(d)))
        if c.norm.embed > 0:
            self.embed_norm = block_norm(c)
        self.blocks = nn.ModuleList(Block(c, l) for l in range(c.n_layers))
        if c.hyper.kind in ("mhc", "identity", "mhc_lite"):  # the streams' learned weighted sum
            n = c.hyper.streams
            if not c.hyper.static_maps:
                self.hc_head_fn = nn.Parameter(0.02 * torch.randn(n, n * d))
            self.hc_head_base = nn.Parameter(torch.zeros(n))
            if not c.hyper.static_maps:
                self.hc_head_scale = nn.Parameter(torch.full((1,), 0.01))
        if c.residual.attn_res:  # the reader before the final norm (the table's, before ln_f)
            self.final_res = _AttnRes(d, c.norm.eps)
        if c.norm.final > 0 and not (siamese and c.siamese.paper_fusion):
            self.ln_f = block_norm(c)
        if siamese:
            self.ln_y_f = block_norm(c)
            if not c.siamese.paper_fusion:
                self.ln_final_f = block_norm(c)
        # the gains norm.gain_offset offsets (not Attention Residuals' key gains: never offset)
        if c.norm.gain_offset and not any(isinstance(m, Norm) and m.weight is not None and
                                          m.offset for m in self.modules()):
            raise ValueError("norm.gain_offset: the stack (%s) has no norm gains to offset"
                             % c.preset)

    def library_parameters(self):
        """(name, parameter) in the order of the library's tensor table and flat parameter
        buffer. named_parameters() has the same order except for a block's own parameters
        (SiameseNorm's c1, ReZero's resweight, nGPT's sqk, suv, attn_alpha, mlp_alpha, gpt-oss's
        sinks), which PyTorch lists first in its block (a module's own parameters come before its
        children's) and the library elsewhere: sqk then sinks after the site norms, suv after
        ff_out (_BODY); after the norms c1, then the branch scales of attention and FFN (ls1,
        attn_resweight, resweight, attn_alpha, ls2, ff_resweight, mlp_alpha), the value
        residual's lambda or the value embeddings' (value_embed), the hyper-connections of
        attention then FFN, DenseFormer's dwa.weight (on the period's layers), Attention
        Residuals' readers attn_res.* then mlp_res.*, the U-Net's skip_weight then lambdas; the
        mHC head (hc_head_*) and the final reader (final_res.*) come after the last layer,
        before the final norms; embed_scale (a stack's own, listed first by PyTorch too) is the
        table's first."""
        tail = {"c1": 1, "ls1": 2, "attn_alpha": 2, "attn_resweight": 2, "resweight": 2.5,
                "ls2": 3, "mlp_alpha": 3, "ff_resweight": 3, "value_residual": 4,
                "value_embed": 4,
                "hc_attn_fn": 5, "hc_attn_base": 5.1, "hc_attn_scale": 5.2, "hc_attn": 5.3,
                "hc_ffn_fn": 6, "hc_ffn_base": 6.1, "hc_ffn_scale": 6.2, "hc_ffn": 6.3,
                "dwa": 7, "attn_res": 8, "mlp_res": 9, "skip_weight": 10, "lambdas": 11}
        head = {"hc_head_fn": 0, "hc_head_base": 1, "hc_head_scale": 2, "final_res": 3}

        def key(item):  # (position of the component, layer, rank in the layer's tail)
            parts = item[1][0].split(".")
            if parts[0] == "blocks":
                body = _BODY.index(parts[2]) if parts[2] in _BODY else 0
                return (1, int(parts[1]), tail.get(parts[2], 0), body, item[0])
            if parts[0] in head:
                return (2, 0, head[parts[0]], 0, item[0])
            if parts[0] == "embed_scale":  # the table's first tensor
                return (-1, 0, 0, 0, item[0])
            return (0 if parts[0] == "embed_norm" else 3, 0, 0, 0, item[0])
        named = sorted(enumerate(self.named_parameters()), key=key)
        return [np for _, np in named]

    @torch.no_grad()
    def load_flat(self, flat):
        """Copy the library's flat parameter buffer (n_params values, any 1-D tensor or
        sequence) into the parameters, tensor by tensor in the library's order."""
        flat = torch.as_tensor(flat).reshape(-1)
        off = 0
        for _, p in self.library_parameters():
            p.copy_(flat[off:off + p.numel()].reshape(p.shape))
            off += p.numel()
        if off != flat.numel():
            raise ValueError("the buffer has %d values, the stack %d" % (flat.numel(), off))

    def forward(self, E, hidden=None, trace=None, probs=None, depth_weights=None,
                value_embeds=None):
        """E: (B, T, d). hidden: an optional list that receives x_0 .. x_L (and, for
        SiameseNorm, (x_l, y_l) pairs), the states nb_stack_hidden reads. trace: an optional
        Trace that records the library's TRACE NAMES (nb_ctx.trace) of this forward and, once
        the loss is backpropagated, of the backward. probs: an optional list that receives
        each layer's attention probabilities (B, H, T, T). With hyper-connections hidden
        receives the n streams (B, T, n, d); the trace has, as the library's, per sublayer
        hc_maps ([pre | post | comb], n (n + 2) columns), hc_in (u) and x_out (the branch's
        output), per layer x (stream 0), x1 .. x<n-1>, grad_x_in (stream 0's), at the end
        hc_head_weights (mHC, identity, mHC-lite) and hc_head (the state before the final norm).
        With DenseFormer's average (residual.dwa) hidden and the layer's x are the averages x_l
        (the layers' inputs: the library's hidden states; off the period x_l = h_l), its outputs
        h_l are not traced, and layer 0's grad_x_in is x_0's whole gradient (through layer 0 and
        every average).
        With Attention Residuals (residual.attn_res) hidden receives x_0, the attention readers'
        h_2l (l >= 1) and the final reader's h_2L (nb_stack_hidden's), depth_weights (an
        optional list) every reader's weights (B, T, count) in the order j = 1 .. 2L, the
        sources in attn_res_sources(j, S)'s order (attn_res_weights: nb_stack_attn_res_weights'
        matrix), and the trace per sublayer attn_res_h (its reader's h_j: not sublayer 0's),
        the sublayer's names with x_out its branch f_j, attn_res_p (p_j), per layer x (p_2l+1,
        the layer's output stream) and grad_x_in (the gradient of p_2l-1, all of it; layer 0's
        x_0's whole gradient).
        With the U-Net skips or the re-injection (residual.unet_skips, reinject_x0) hidden and
        the layer's x are x_l (its input before the skip and the lambdas, the previous layer's
        output), the trace has blocks.<l>.x_mixed (Block.forward) and grad_x_in is the gradient
        of x_l through layer l (not the skip's: the skip reads the layer's output before the
        next layer's trace node, as the library adds it to that layer's output gradient);
        layer 0's is x_0's whole gradient (through layer 0 and every re-injection).
        value_embeds: with residual.value_embeds N, the tables' rows of this call (what
        nb_stack_set_value_embeds binds): a tensor (N, B, T, H_kv d_k) or (N, B*T, H_kv d_k),
        or a list of N tensors (B, T, H_kv d_k) or (B*T, H_kv d_k) (row b*T + i: table t at
        the token of position (b, i)); autograd gives their gradients (the two layers sharing
        a table summed, as the library writes them). Every layer's attention is traced as
        qkv_vres after its mix (lambda_0 V + lambda_1 E_t, or lambda_0 V)."""
        c = self.config
        rows = self._value_embed_rows(E, value_embeds)
        if trace is not None:
            trace.grad("grad_in", E, -1, 0)
        if c.norm.embed_scale:  # before the embedding norm
            E = E * self.embed_scale
        x = self.embed_norm(E) if hasattr(self, "embed_norm") else E
        y = x if _streams(c) == 2 else None
        if trace is not None:
            trace("x0", x)
        if c.residual.attn_res:
            out = self._attn_res(x, hidden, trace, probs, depth_weights, rows)
            if trace is not None:
                trace("out", out)
            return out
        hyper = c.hyper.kind != "none"
        if hyper:  # every stream starts at x_0
            n, d = c.hyper.streams, c.d_model
            x = x.unsqueeze(-2).expand(*x.shape[:-1], n, d)
        vres = {"ve": rows}  # V_0 of this forward (residual.value_residual); the rows
        # DenseFormer: the outputs h_j by j mod k as its DWAModules accumulate them (h_0 = x_0
        # in group 0, taken after layer 0's trace node so that grad_x_in sees every use of it);
        # only the period's layers average
        k, period = c.residual.dwa_dilation, c.residual.dwa_period
        acc = [[] for _ in range(k)] if c.residual.dwa else None
        # modded-nanogpt's GPT.forward: n = L // 2, the encoder layers' outputs pushed on
        # skip_connections and popped by the decoder layers; x0 taken after layer 0's trace node
        # (grad_x_in x_0's whole gradient with the re-injection)
        unet, n_half = c.residual.unet_skips, c.n_layers // 2
        skip_connections, x0 = [], None
        for blk in self.blocks:
            blk.tracer, blk.probs, blk.vres = trace, probs, vres
            if hidden is not None:
                hidden.append(x if y is None else (x, y))
            if trace is not None:  # the gradient of each stream's layer input (own nodes)
                if hyper:  # stream 0's
                    xs = list(x.unbind(-2))
                    xs[0] = trace.grad("blocks.%d.grad_x_in" % blk.l, xs[0].view_as(xs[0]),
                                       blk.l, 2)
                    x = torch.stack(xs, dim=-2)
                else:
                    x = trace.grad("blocks.%d.grad_x_in" % blk.l, x.view_as(x), blk.l, 2)
                if y is not None:
                    y = trace.grad("blocks.%d.grad_y_in" % blk.l, y.view_as(y), blk.l, 3)
            if acc is not None and blk.l == 0:
                acc[0].append(x)
            if blk.l == 0:
                x0 = x
            if unet and blk.l >= n_half:  # x = x + skip_weights[i - n] * skip_connections.pop()
                x = x + blk.skip_weight * skip_connections.pop()
            x, y = blk(x, y, x0)
            if unet and blk.l < n_half:
                skip_connections.append(x)
            if acc is not None:  # x_{l+1} = sum_m a_l[m] h_{j0 + m k}: its tensordot, on the
                group = acc[(blk.l + 1) % k]  # period's layers (else x_{l+1} = h_{l+1})
                group.append(x)
                if _dwa_here(blk.l, period):
                    x = torch.tensordot(blk.dwa.weight.view(-1), torch.stack(group), dims=1)
            blk.tracer = blk.probs = blk.vres = None
            if trace is not None:
                trace("blocks.%d.x" % blk.l, x[..., 0, :] if hyper else x)
                for k in range(1, n if hyper else 1):
                    trace("blocks.%d.x%d" % (blk.l, k), x[..., k, :])
                if y is not None:
                    trace("blocks.%d.y" % blk.l, y)
        if hidden is not None:
            hidden.append(x if y is None else (x, y))
        if hyper:
            x = self.hyper_head(x, trace)
            if trace is not None:
                trace("hc_head", x)
        if y is None:
            out = self.ln_f(x) if hasattr(self, "ln_f") else x
        elif self.config.siamese.paper_fusion:
            out = x + self.ln_y_f(y)
        else:
            out = self.ln_final_f(self.ln_f(x) + self.ln_y_f(y))
        if trace is not None:
            trace("out", out)
        return out


    def _value_embed_rows(self, E, value_embeds):
        """forward's value_embeds as N tensors (B, T, H_kv, d_k) (None without the option);
        ValueError where nb_stack_forward would refuse (rows missing: NB_ERR_NULL) or the
        stack has no tables."""
        c, n = self.config, self.config.residual.value_embeds
        if not n:
            if value_embeds is not None:
                raise ValueError("value_embeds: the stack was made without "
                                 "residual.value_embeds (nb_stack_set_value_embeds refuses it)")
            return None
        if value_embeds is None:
            raise ValueError("residual.value_embeds mixes the caller's table rows into the "
                             "values but none are given (value_embeds; "
                             "nb_stack_set_value_embeds)")
        if len(value_embeds) != n:
            raise ValueError("value_embeds: %d tables' rows, residual.value_embeds is %d"
                             % (len(value_embeds), n))
        B, T = E.shape[0], E.shape[1]
        dk = c.d_model // c.n_heads
        return [t.reshape(B, T, c.n_kv_heads, dk) for t in value_embeds]

    def _attn_res(self, x0, hidden, trace, probs, depth_weights, rows=None):
        """Attention Residuals' stack from x_0 (forward's arguments): the layers as the official
        pseudocode runs them (blocks starts as [x_0], the partial sum empty), then the final
        reader h_2L = block_attn_res(blocks, p_2L-1) and the final norm."""
        blocks, partial_block, vres = [x0], None, {"ve": rows}
        for blk in self.blocks:
            blk.tracer, blk.probs, blk.vres = trace, probs, vres
            if trace is not None:  # the layer's input stream: x_0, then p_2l-1 (own nodes)
                x = blocks[0] if blk.l == 0 else partial_block
                x = trace.grad("blocks.%d.grad_x_in" % blk.l, x.view_as(x), blk.l, 2)
                if blk.l == 0:
                    blocks = [x]
                else:
                    partial_block = x
            blocks, partial_block, h = blk.attn_res_layer(blocks, partial_block, depth_weights)
            blk.tracer = blk.probs = blk.vres = None
            if hidden is not None:  # x_0, then the attention readers' h_2l
                hidden.append(h)
            if trace is not None:
                trace("blocks.%d.x" % blk.l, partial_block)
        h, a = block_attn_res(blocks, partial_block, self.final_res.proj, self.final_res.norm)
        if depth_weights is not None:
            depth_weights.append(a.movedim(0, -1))
        if hidden is not None:
            hidden.append(h)
        return self.ln_f(h) if hasattr(self, "ln_f") else h

    def hyper_head(self, X, trace=None):
        """The stack's state before the final norm from the last streams X (B, T, n, d): HC's
        sum of the streams; mHC's, the identity's and mHC-lite's weighted sum h = sum_i w_i x_i,
        w = sigmoid(head_scale r head_fn xf + head_base) + 1e-6 (TileKernels' mhc_head;
        static: sigmoid(head_base) + 1e-6)."""
        if self.config.hyper.kind == "hc":
            return X.sum(-2)
        z = self.hc_head_base
        if hasattr(self, "hc_head_fn"):
            z = self.hc_head_scale * _mhc_mix(X, self.hc_head_fn) + z
        w = torch.sigmoid(z) + 1e-6
        if trace is not None:
            trace("hc_head_weights", w.expand(*X.shape[:-2], w.shape[-1]))
        return (w.unsqueeze(-1) * X).sum(-2)


class Trace:
    """The library's trace (nb_ctx.trace, TRACE NAMES in normblocks.h) from the twin: called
    with (name, tensor) during the forward; grad() hooks the gradients of the backward, which
    items() then lists in the library's order (layers L-1 down to 0; in a layer ffn.grad_out,
    attn.grad_out, grad_x_in, grad_y_in; grad_in last).
    items(): (name, float32 (rows, cols) tensor) in the library's order."""

    def __init__(self):
        self.fwd, self.bwd = [], {}

    def __call__(self, name, t):
        self.fwd.append((name, t.detach().reshape(-1, t.shape[-1]).float().clone()))

    def grad(self, name, t, layer, rank):
        """Record the gradient of t under name; layer -1 for the stack's input, rank the order
        within a layer (0 ffn.grad_out, 1 attn.grad_out, 2 grad_x_in, 3 grad_y_in)."""
        if t.requires_grad:
            key = (-layer if layer >= 0 else 1, rank)
            t.register_hook(lambda g: self.bwd.__setitem__(
                key, (name, g.detach().reshape(-1, g.shape[-1]).float().clone())))
        return t

    def items(self):
        return self.fwd + [self.bwd[k] for k in sorted(self.bwd)]


class _Transformer(Stack):
    """examples/train's "transformer": the byte embedding wte and the stack. embed_scale:
    False, True or "learn" (a learnable embed_scale, init sqrt(d): train --embed-scale learn,
    DyT's LLaMA code), or "sqrt-d" (train --embed-scale sqrt-d: the constant sqrt(d) rounded to
    the activations' dtype, no parameter: Gemma's normalizer). embed_mult X > 0 (train
    --mup-embed-mult X: Megatron's mup_embedding_mult) multiplies that constant (1 without
    sqrt-d), rounded once to float32 as model.c; not with a learnable scale.
    With residual.value_embeds N (train --value-embeds N: modded-nanogpt's GPT.value_embeds)
    the N tables value_embeds.<t> (nn.Embedding(vocab, H_kv d_k), N(0, 1) as nn.Embedding's
    default; examples/train/vembed.c), whose rows at each token value_rows() gathers for the
    stack; the checkpoint holds them after wte.weight (and embed_scale), before the stack's."""

    def __init__(self, cfg, vocab, embed_scale=False, embed_mult=0.0):
        super().__init__(cfg)
        self.wte = nn.Embedding(vocab, cfg.d_model)
        c = self.config
        if c.residual.value_embeds:
            self.value_embeds = nn.ModuleList(
                nn.Embedding(vocab, c.n_kv_heads * (c.d_model // c.n_heads))
                for _ in range(c.residual.value_embeds))
        if embed_scale not in (False, True, "learn", "sqrt-d"):
            raise ValueError("embed_scale %r: False, True (= \"learn\") or \"sqrt-d\"" % (embed_scale,))
        if not (math.isfinite(embed_mult) and embed_mult >= 0):
            raise ValueError("embed_mult %r: finite and > 0, or 0 (none)" % (embed_mult,))
        if embed_scale in (True, "learn"):
            if embed_mult:
                raise ValueError("embed_mult with a learnable embed_scale: the trainer refuses it")
            self.embed_scale = nn.Parameter(torch.full((1,), math.sqrt(cfg.d_model)))
        self.embed_const = None  # the constant multiplier as model.c's embed_const
        if embed_scale == "sqrt-d":  # Gemma: torch.tensor(hidden_size ** 0.5, dtype=hidden.dtype)
            self.embed_const = float(torch.tensor(math.sqrt(cfg.d_model), dtype=torch.float32))
        if embed_mult:
            self.embed_const = float(torch.tensor((self.embed_const or 1.0) * embed_mult,
                                                  dtype=torch.float32))

    def value_rows(self, tok):
        """The value embeddings' rows of tokens tok (B, T): a list of N tensors (B, T, H_kv
        d_k), table t at each token (vembed.c's gather), or None without the option."""
        if not hasattr(self, "value_embeds"):
            return None
        return [table(tok) for table in self.value_embeds]

    def embed(self, tok):
        e = self.wte(tok)
        if self.embed_const is not None:
            return e * torch.tensor(self.embed_const, dtype=e.dtype)
        return e * self.embed_scale if hasattr(self, "embed_scale") else e


class NormBlocksLM(nn.Module):
    """examples/train's model (model.c): tokens -> transformer.wte -> stack -> lm_head (untied,
    no bias) -> logits; loss = mean cross-entropy over the masked targets. Parameter names are
    the checkpoint's: transformer.wte.weight, transformer.<stack names>, lm_head.weight (and
    with residual.value_embeds the tables transformer.value_embeds.<t>.weight, gathered at the
    input tokens for the stack's value embeddings).
    logit_scale (train --preset ngpt: its checkpoints hold "sz", after lm_head.weight): nGPT's
    GPT.sz, the logits times sz sqrt(d) per byte, sz a learnable vector stored at 1/sqrt(d).
    logit_softcap C > 0 (train --logit-softcap C): Gemma 2's final-logit softcapping
    C tanh(logits / C), after any scaling (sz). logit_mult (train --mup: Megatron's
    mup_output_mult, 1/m_d by default; --completep with --width-base: 1/m_d): the head's output
    times that constant, rounded to float32 (model.c: the head GEMM's alpha). embed_scale,
    embed_mult: see _Transformer."""

    def __init__(self, cfg, vocab=VOCAB, embed_scale=False, logit_scale=False, logit_softcap=0.0,
                 logit_mult=1.0, embed_mult=0.0):
        super().__init__()
        if not (math.isfinite(logit_softcap) and logit_softcap >= 0):
            raise ValueError("logit_softcap %r: finite and > 0, or 0 (off)" % (logit_softcap,))
        if not (math.isfinite(logit_mult) and logit_mult > 0):
            raise ValueError("logit_mult %r: finite and > 0" % (logit_mult,))
        self.transformer = _Transformer(cfg, vocab, embed_scale, embed_mult)
        self.lm_head = nn.Linear(cfg.d_model, vocab, bias=False)
        self.logit_softcap = float(logit_softcap)
        self.logit_mult = float(torch.tensor(logit_mult, dtype=torch.float32))
        if logit_scale:
            self.sz = nn.Parameter(torch.full((vocab,), 1 / math.sqrt(cfg.d_model)))

    def forward(self, tok, trace=None):
        """tok: (B, T) integer bytes -> logits (B, T, vocab). trace: see Stack.forward. In
        gemm.precision bf16 the head is a bf16 GEMM (bf16_linear), as the trainer's."""
        return self._logits(tok, trace, 1.0)

    def _logits(self, tok, trace, grad_scale):
        h = self.transformer(self.transformer.embed(tok), trace=trace,
                             value_embeds=self.transformer.value_rows(tok))
        if self.transformer.config.gemm.precision == "bf16":
            z = bf16_linear(h, self.lm_head.weight, grad_scale=grad_scale)
        else:
            z = self.lm_head(h)
        if self.logit_mult != 1:
            z = z * torch.tensor(self.logit_mult, dtype=z.dtype)
        if hasattr(self, "sz"):  # model.c: the scale sz sqrt(d) in double, rounded to float
            z = z * (self.sz.double() * math.sqrt(self.transformer.config.d_model)).to(z.dtype)
        if self.logit_softcap > 0:  # model.c: last, tanh in double, rounded to the logits' dtype
            c = self.logit_softcap
            z = (c * torch.tanh(z.double() / c)).to(z.dtype)
        return z

    def loss(self, tok, mask=None, trace=None):
        """The trainer's loss of a batch: tok (B, T+1), inputs tok[:, :-1], targets tok[:, 1:];
        mask (B, T) bool selects the counted targets (None: all). The mean over them, with
        the log-sum-exp in float64 as model.c computes it. Returns (loss, count). In
        gemm.precision bf16 the head's backward rounds the gradient of the sum (softmax -
        onehot) and scales by 1/count after, as model.c."""
        tgt = tok[:, 1:]
        if mask is None:
            mask = torch.ones_like(tgt, dtype=torch.bool)
        n = int(mask.sum())
        if self.transformer.config.gemm.precision == "bf16":
            logits = self._logits(tok[:, :-1], trace, max(n, 1))
        else:
            logits = self(tok[:, :-1], trace=trace)
        z = logits[mask].double()
        nll = torch.logsumexp(z, dim=-1) - z.gather(1, tgt[mask][:, None])[:, 0]
        return (nll.sum() / n if n else nll.sum()), n


# ---- checkpoints of examples/train ------------------------------------------------------------


_ST_DTYPES = {"F32": torch.float32, "F64": torch.float64, "F16": torch.float16,
              "BF16": torch.bfloat16}


def write_safetensors(path, items, metadata=None, dtype="F32"):
    """Write (name, tensor) items as a safetensors file in the order given (the order nbdiff
    compares in), every tensor as dtype: F32 (what the trainer writes), F64, F16 or BF16."""
    header, off, blobs = {}, 0, []
    if metadata:
        header["__metadata__"] = dict(metadata)
    for name, t in items:
        t = t.detach().to(_ST_DTYPES[dtype]).contiguous()
        if dtype == "BF16":  # numpy has no bfloat16: the same bytes as int16
            t = t.view(torch.int16)
        b = t.numpy().tobytes()
        header[name] = {"dtype": dtype, "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def read_safetensors(path):
    """(tensors, metadata) of a safetensors file: name -> float32 tensor (from F32, F16 or BF16;
    F64 stays float64), and the __metadata__ strings."""
    with open(path, "rb") as f:
        buf = f.read()
    (hlen,) = struct.unpack("<Q", buf[:8])
    header = json.loads(buf[8:8 + hlen].decode("utf-8"))
    meta = header.pop("__metadata__", {})
    data = memoryview(buf)[8 + hlen:]
    out = {}
    for name, e in header.items():
        if e["dtype"] not in _ST_DTYPES:
            raise ValueError("%s: tensor %s is %s, not F32, F64, F16 or BF16" %
                             (path, name, e["dtype"]))
        a, b = e["data_offsets"]
        t = torch.frombuffer(bytearray(data[a:b]), dtype=_ST_DTYPES[e["dtype"]])
        t = t if e["dtype"] == "F64" else t.float()
        out[name] = t.reshape(e["shape"]) if e["shape"] else t
    return out, meta


# examples/train --schedule layer kinds (cli.c layer_kind)
def _layer_kind(k):
    pre, fn = Placement(input_norm=True), Placement(input_norm=True, residual_from_norm=True)
    kinds = {"pre": (pre, pre, 0), "post": (Placement(post_norm=True),) * 2 + (0,),
             "sandwich": (Placement(input_norm=True, output_norm=True),) * 2 + (0,),
             "normafter": (Placement(output_norm=True),) * 2 + (0,),
             "hybrid": (Placement(), fn, SITES_QKV), "qkvpre": (Placement(), pre, SITES_QKV),
             "prepost": (pre, fn, 0), "postpre": (fn, pre, 0)}
    if k not in kinds:
        raise ValueError("unknown schedule layer kind %r" % k)
    a, f, s = kinds[k]
    return LayerSpec(replace(a), replace(f), s)


# attn_sink as the trainer writes it (its --attn-sink choices) -> AttnConfig.sink; "off_by_one"
# is read too, the C enum's spelling
_META_SINKS = {"none": "", "learned": "learned", "off-by-one": "off_by_one",
               "off_by_one": "off_by_one"}


def config_from_metadata(meta):
    """The StackConfig of a trainer checkpoint's __metadata__, as the trainer's make_desc
    builds it (preset name or custom schedule, then d, heads, d_ff, rope, --ffn, --norm)."""
    if int(meta.get("vocab_size", VOCAB)) != VOCAB:
        raise ValueError("vocab_size %s, expected %d" % (meta.get("vocab_size"), VOCAB))
    dims = dict(n_layers=int(meta["n_layers"]), d_model=int(meta["d_model"]),
                n_heads=int(meta["n_heads"]), n_kv_heads=int(meta["n_kv_heads"]),
                ffn=dict(d_ff=int(meta["d_ff"])), attn=dict(rope=bool(int(meta["rope"]))))
    if meta["preset"] == "custom":
        cfg = StackConfig(preset="default",
                          layers=[_layer_kind(k) for k in meta["schedule"].split(",")], **dims)
    else:
        cfg = StackConfig.from_name(meta["preset"], **dims)
    norm, attn, ffn, res, hyper, siamese = (cfg.norm, cfg.attn, cfg.ffn, cfg.residual, cfg.hyper,
                                            cfg.siamese)
    if meta["ffn"] == "gelu":
        ffn.type = "gelu_tanh"
    if meta["norm"] in ("layer", "dyt", "derf", "l2"):
        norm.type = meta["norm"]
    attn.bias = int(meta.get("attn_bias", "0"))  # checkpoints before the key had none
    res.value_residual = {"fixed": 1, "learn": 2}.get(meta.get("value_residual", "off"), 0)
    # the trainer's other model keys (examples/train/cli.c, O_MODEL), written only when set
    onoff = {"on": 1, "off": -1}
    get = meta.get
    if get("mup", "on") != "on":  # --mup (written only when on): its attention scale
        raise ValueError("mup %r: on (or absent)" % meta["mup"])
    if "mup" in meta:  # mup.c's mup_desc: sqrt(h_base) / d_h (1 / d_h), rounded to float32
        h_base = int(get("mup_base_head_dim", "0"))
        attn.softmax_scale = float(torch.tensor(
            (math.sqrt(h_base) if h_base else 1.0) / (dims["d_model"] / dims["n_heads"]),
            dtype=torch.float32))
    if "rope_theta" in meta: attn.rope_theta = float(meta["rope_theta"])
    if "eps" in meta: norm.eps = float(meta["eps"])
    if "mixln_alpha" in meta: cfg.mixln_alpha = float(meta["mixln_alpha"])
    if "sites" in meta:
        attn.sites = SITES_NONE if meta["sites"] == "none" else sum(
            {"q": SITE_Q, "k": SITE_K, "v": SITE_V, "c": SITE_C}[t] for t in meta["sites"].split(","))
    if "site_width" in meta: attn.site_width = {"head": "per_head", "full": "full"}[meta["site_width"]]
    if "ffn_bias" in meta: ffn.bias = onoff[meta["ffn_bias"]]
    if "final_norm" in meta: norm.final = onoff[meta["final_norm"]]
    if "embed_norm" in meta: norm.embed = onoff[meta["embed_norm"]]
    if "siamese_scale" in meta:
        siamese.paper_scale = {"code": 0, "paper": 1, "one": 2}[meta["siamese_scale"]]
    if "siamese_fusion" in meta: siamese.paper_fusion = {"code": 0, "paper": 1}[meta["siamese_fusion"]]
    if "siamese_no_fusion_norm" in meta: siamese.no_fusion_norm = 1
    if "hyper" in meta:
        hyper.kind = {"ihc": "identity", "mhc-lite": "mhc_lite"}.get(meta["hyper"], meta["hyper"])
    hyper.streams = int(get("hyper_streams", "0"))
    hyper.static_maps = 1 if get("hyper_form") == "static" else 0
    hyper.sinkhorn = int(get("hyper_sinkhorn", "0"))
    res.depth_alpha = float(get("completep", "0"))
    res.depth_base = int(get("depth_base", "0"))
    if get("dwa", "on") != "on":  # --dwa (written only when on); --dwa-dilation K
        raise ValueError("dwa %r: on (or absent)" % meta["dwa"])
    res.dwa = 1 if "dwa" in meta else 0
    res.dwa_dilation = int(get("dwa_dilation", "0"))  # resolve checks it
    res.dwa_period = int(get("dwa_period", "0"))  # --dwa-period P; resolve checks it
    if get("attn_res", "on") != "on":  # --attn-res (written only when on); --attn-res-block S
        raise ValueError("attn_res %r: on (or absent)" % meta["attn_res"])
    res.attn_res = 1 if "attn_res" in meta else 0
    res.attn_res_block = int(get("attn_res_block", "0"))  # resolve checks it
    for key in ("unet_skips", "reinject_x0"):  # --unet-skips, --reinject-x0 (only when on)
        if get(key, "on") != "on":
            raise ValueError("%s %r: on (or absent)" % (key, meta[key]))
        setattr(res, key, 1 if key in meta else 0)
    ve = get("value_embeds", "0")  # --value-embeds N (written only when N > 0)
    if not ve.isdigit():
        raise ValueError("value_embeds %r: a number of tables" % ve)
    res.value_embeds = int(ve)  # resolve checks it
    # the porting options (--attn-gate, --attn-sink, --clip-qkv, --attn-softcap, --norm-gain,
    # --norm-bias, --gain-offset, --branch-scale: the trainer's names, the checkpoint's keys);
    # qk_clip is how the trainer trains, not the model (clip_qkv is the model: a clamp in its
    # forward; attn_softcap too: a cap of its scores)
    attn.gate = get("attn_gate", "")
    sink = get("attn_sink", "none")
    if sink not in _META_SINKS:
        raise ValueError("attn_sink %r: one of %s" % (sink, ", ".join(_META_SINKS)))
    attn.sink = _META_SINKS[sink]
    attn.clip_qkv = float(get("clip_qkv", "0"))  # --clip-qkv as %.9g; resolve checks it
    attn.softcap = float(get("attn_softcap", "0"))  # --attn-softcap as %.9g; resolve checks it
    norm.gain = -1 if get("norm_gain") == "off" else 0
    norm.bias = -1 if get("norm_bias") == "off" else 0
    norm.gain_offset = 1 if get("gain_offset") == "on" else 0
    res.branch_scale = get("branch_scale", "")
    return cfg


def _logit_mult(meta):
    """model.c's out_mult: muP's --mup-output-mult (1/m_d without it), CompleteP's 1/m_d with
    --width-base, else 1; m_d = d / width_base."""
    m_d = int(meta["d_model"]) / int(meta.get("width_base", meta["d_model"]))
    if "mup" in meta:
        return float(meta.get("mup_output_mult", 1 / m_d))
    return 1 / m_d if "completep" in meta else 1.0


def load_checkpoint(path):
    """(model, metadata): a NormBlocksLM (float32, eval mode) with the parameters of a
    checkpoint written by examples/train (its Adam moments are ignored)."""
    tensors, meta = read_safetensors(path)
    es = meta.get("embed_scale", "0")  # 0 off, 1 learnable, 2 the constant sqrt(d)
    if es not in ("0", "1", "2"):
        raise ValueError("embed_scale %r: 0, 1 or 2" % es)
    model = NormBlocksLM(config_from_metadata(meta),
                         embed_scale={"0": False, "1": "learn", "2": "sqrt-d"}[es],
                         logit_scale="sz" in tensors,  # train --preset ngpt's
                         logit_softcap=float(meta.get("logit_softcap", "0")),
                         logit_mult=_logit_mult(meta),
                         embed_mult=float(meta.get("mup_embed_mult", "0")))
    state = {k: v for k, v in tensors.items() if not k.startswith("optimizer.")}
    model.load_state_dict(state, strict=True)
    return model.eval(), meta


# ---- Hugging Face layouts and directories -------------------------------------------------------
#
# The layouts follow the model code of transformers (modeling_llama, modeling_qwen2,
# modeling_qwen3, modeling_olmo2, modeling_gpt2), written here from those codebases' conventions
# and kept equal to the library's name maps (nb_stack_tensor_parts) by tests/test_namemap.py,
# which runs what these functions write through examples/nbimport:
#   hf-llama  "model.layers.<l>." self_attn.{q,k,v,o}_proj (nn.Linear, (out, in); the library's
#             fused att_proj rows split Q | K | V), mlp.{gate,up,down}_proj (SwiGLU
#             down(silu(gate(x)) * up(x)): the library's ff_proj rows are [up | gate]),
#             self_attn.{q,k}_norm (Qwen3: one gain of head_dim; OLMo-2: over the whole
#             projection), "model.norm"; the block norms by placement, as the Mix-LN code (and
#             Gemma) name them: input_layernorm (attention input), post_attention_layernorm (the
#             attention's output or post norm; else the FFN input norm, HF Llama's Pre-LN),
#             pre_feedforward_layernorm (the FFN input norm after one of those),
#             post_feedforward_layernorm (the FFN's output or post norm: OLMo-2's).
#   hf-gpt2   "transformer.h.<l>." ln_1, attn.c_attn (fused Q|K|V), attn.c_proj, ln_2, mlp.c_fc,
#             mlp.c_proj, "transformer.ln_f": Conv1D weights stored (in, out), the transpose of
#             the library's; every projection and LayerNorm has its bias.
# The embedding and head are model.embed_tokens / transformer.wte (+ GPT-2's learned positions
# transformer.wpe, added to the embedding outside the stack) and lm_head.

HF_LAYOUTS = ("hf-llama", "hf-gpt2")

# model_type -> (architecture, layout): the families examples/hf_config.h reads
HF_FAMILIES = {"llama": ("LlamaForCausalLM", "hf-llama"), "mistral": ("MistralForCausalLM", "hf-llama"),
               "qwen2": ("Qwen2ForCausalLM", "hf-llama"),
               "qwen3": ("Qwen3ForCausalLM", "hf-llama"), "olmo2": ("Olmo2ForCausalLM", "hf-llama"),
               "gpt2": ("GPT2LMHeadModel", "hf-gpt2")}

# config.json keys that do not change the stack's forward (hf_config.h hf_inert)
_HF_INERT = (
    "architectures", "model_type", "_name_or_path", "torch_dtype", "dtype", "transformers_version",
    "bos_token_id", "eos_token_id", "pad_token_id", "vocab_size", "max_position_embeddings",
    "n_positions", "n_ctx", "initializer_range", "use_cache", "tie_word_embeddings",
    "attention_dropout", "attn_pdrop", "resid_pdrop", "embd_pdrop", "summary_type",
    "summary_use_proj", "summary_activation", "summary_proj_to_labels", "summary_first_dropout",
    "task_specific_params", "pretraining_tp", "reorder_and_upcast_attn", "sliding_window",
    "max_window_layers", "id2label", "label2id", "output_attentions", "output_hidden_states",
    "return_dict", "torchscript", "use_bfloat16", "tokenizer_class", "pruned_heads",
    "chunk_size_feed_forward", "is_encoder_decoder", "is_decoder", "problem_type")

_HF_EMBED = ("model.embed_tokens.weight", "transformer.wte.weight", "wte.weight")
_HF_OUTSIDE = _HF_EMBED + ("lm_head.weight", "transformer.wpe.weight", "wpe.weight")
_HF_BUFFERS = (".attn.bias", ".attn.masked_bias", ".rotary_emb.inv_freq")  # not weights


def _hf_layout(layout):
    if layout not in HF_LAYOUTS:
        raise ValueError("layout %r: one of %s" % (layout, ", ".join(HF_LAYOUTS)))
    return layout


def _llama_norm_name(blk, module):
    """A block norm's Hugging Face Llama name: by placement, as the Mix-LN code names them."""
    a = blk.spec.attn
    if module == "attn_norm":
        return "input_layernorm"
    if module in ("attn_out_norm", "attn_post_norm"):
        return "post_attention_layernorm"
    if module == "ff_norm":
        return "pre_feedforward_layernorm" if a.output_norm or a.post_norm else \
            "post_attention_layernorm"
    if module in ("ff_out_norm", "ff_post_norm"):
        return "post_feedforward_layernorm"
    return None


def _llama_parts(stack, l, module, kind, rows):
    """hf-llama parts of tensor `module.kind` of layer l (rows: its first dimension)."""
    c, pre = stack.config, "model.layers.%d." % l
    if module == "att_proj":  # Q | K | V rows of the fused projection
        d, kv = c.d_model, c.n_kv_heads * (c.d_model // c.n_heads)
        return [(pre + "self_attn.%s_proj.%s" % (n, kind), r0, r, False)
                for n, r0, r in (("q", 0, d), ("k", d, kv), ("v", d + kv, kv))]
    if module == "attn_out":
        return [(pre + "self_attn.o_proj." + kind, 0, rows, False)]
    if module == "" and kind == "sinks":  # gpt-oss's name (transformers' GptOssAttention)
        return [(pre + "self_attn.sinks", 0, rows, False)]
    if kind != "weight":  # Llama's MLPs and RMSNorms have no bias
        return None
    if module == "ff_proj" and c.ffn.type == "swiglu":  # rows [up | gate]
        return [(pre + "mlp.up_proj.weight", 0, c.ffn.d_ff, False),
                (pre + "mlp.gate_proj.weight", c.ffn.d_ff, c.ffn.d_ff, False)]
    if module == "ff_out":
        return [(pre + "mlp.down_proj.weight", 0, rows, False)]
    if module in ("q_norm", "k_norm"):
        return [(pre + "self_attn.%s.weight" % module, 0, rows, False)]
    name = _llama_norm_name(stack.blocks[l], module)
    return [(pre + name + ".weight", 0, rows, False)] if name else None


_GPT2_CONV1D = {"att_proj": "attn.c_attn", "attn_out": "attn.c_proj", "ff_proj": "mlp.c_fc",
                "ff_out": "mlp.c_proj"}
_GPT2_LN = {"attn_norm": "ln_1", "ff_norm": "ln_2"}


def _gpt2_parts(l, module, kind, rows):
    """hf-gpt2 parts of tensor `module.kind` of layer l: Conv1D weights transposed."""
    pre = "transformer.h.%d." % l
    if module in _GPT2_CONV1D:
        return [(pre + _GPT2_CONV1D[module] + "." + kind, 0, rows, kind == "weight")]
    if module in _GPT2_LN:
        return [(pre + _GPT2_LN[module] + "." + kind, 0, rows, False)]
    return None


def hf_parts(stack, layout):
    """The name map of stack in a Hugging Face layout (as nb_stack_tensor_parts): a list, in the
    library's order, of (library name, parts); each part (HF name, row0, rows, transposed) is one
    whole HF tensor filling rows [row0, row0 + rows) of the library's, `transposed` when it is
    stored (in, out) (GPT-2's Conv1D). Raises ValueError for a tensor the layout has no name for
    (a norm the codebase does not have, a LayerNorm bias in Llama's names, ...)."""
    _hf_layout(layout)
    out = []
    for lib, p in stack.library_parameters():
        rows, parts = p.shape[0], None
        if lib.startswith("blocks."):
            _, l, rest = lib.split(".", 2)
            module, _, kind = rest.rpartition(".")
            parts = (_llama_parts(stack, int(l), module, kind, rows) if layout == "hf-llama"
                     else _gpt2_parts(int(l), module, kind, rows))
        elif layout == "hf-llama" and lib == "ln_f.weight":
            parts = [("model.norm.weight", 0, rows, False)]
        elif layout == "hf-gpt2" and lib in ("ln_f.weight", "ln_f.bias"):
            parts = [("transformer." + lib, 0, rows, False)]
        if parts is None:
            raise ValueError("%s has no name in the %s layout" % (lib, layout))
        out.append((lib, parts))
    return out


def _layout_refusal(c, layout):
    """Why the model code of layout would run stack config c (resolved) as another model (the
    names alone could hold it), or None: nbimport --export's refusals."""
    if layout == "hf-gpt2":
        if c.n_kv_heads != c.n_heads:
            return "n_kv_heads != n_heads: GPT-2's c_attn holds Q, K and V of n_heads each"
        if c.ffn.type != "gelu_tanh":
            return "ffn: GPT-2's MLP is GELU (tanh) without a gate"
        if c.norm.type != "layer":
            return "norm: GPT-2's ln_1, ln_2, ln_f are LayerNorms"
        if c.attn.rope:
            return "rope: GPT-2 adds learned positions (wpe) and has no RoPE"
        if c.attn.bias != ATTN_BIAS_QKV | ATTN_BIAS_OUT or c.ffn.bias != 1:
            return "attn_bias: GPT-2 has the bias of every projection"
        if c.preset != "pre" or c.attn.sites or c.norm.embed == 1 or c.norm.final == -1:
            return "preset: GPT-2 is Pre-LN with a final ln_f and no other norm"
    else:
        if c.norm.type != "rms":
            return "norm: Llama's norms are RMSNorm"
        if c.ffn.type != "swiglu":
            return "ffn: Llama's MLP is SwiGLU (gate_proj, up_proj, down_proj)"
        if not c.attn.rope:
            return "rope: Llama applies RoPE in every attention"
        if c.ffn.bias == 1:
            return "ffn bias: Llama's MLP projections have none"
    if c.attn.qk_scale > 0:
        return "qk_scale: nGPT's s_qk is in no Hugging Face or GPT-2 model"
    if c.ffn.in_scale > 0:
        return "ffn_in_scale: nGPT's s_uv is in no Hugging Face or GPT-2 model"
    s = c.attn.softmax_scale
    if s and abs(s * math.sqrt(c.d_model / c.n_heads) - 1) > 1e-6:
        return "softmax_scale: Hugging Face and GPT-2 attention scales by 1/sqrt(d_k)"
    if any(p.residual_norm or p.branch_scale == "interp" for ld in c.layers
           for p in (ld.attn, ld.ffn)):
        return ("residual_norm / interp: no Hugging Face decoder normalizes its residual or "
                "steps toward its branch (nGPT)")
    if c.attn.non_causal:
        return "non_causal: the Hugging Face decoders are causal"
    if c.residual.value_residual:
        return "value_residual: no Hugging Face decoder mixes the first layer's values in"
    if c.residual.value_embeds:
        return ("value_embeds: no Hugging Face decoder mixes per-token value embeddings into its "
                "values (modded-nanogpt's value embeddings)")
    if c.hyper.kind != "none":
        return "hyper: no Hugging Face decoder has hyper-connections' residual streams"
    for field, what in (  # the options that carry layers' outputs into later inputs
            ("dwa", "averages its layers' outputs (DenseFormer's depth-weighted average)"),
            ("attn_res", "replaces its residual sums by attention over depth (Attention "
                         "Residuals)"),
            ("unet_skips", "adds its first half's outputs to its second half's inputs "
                           "(modded-nanogpt's U-Net skips)"),
            ("reinject_x0", "mixes the embedding into every layer's input (modded-nanogpt's "
                            "lambdas)")):
        if getattr(c.residual, field):
            return "%s: no Hugging Face decoder %s" % (field, what)
    if any(p.branch_mult != 1 for ld in c.layers for p in (ld.attn, ld.ffn)):
        return ("depth_alpha / branch_mult: no Hugging Face decoder multiplies its branches "
                "(CompleteP's residual multiplier)")
    # the porting options these classes would compute otherwise, the names alone holding them
    # (the library's name map gives the gated att_proj's Q, K, V rows and leaves G unnamed)
    if c.attn.gate:
        return ("attn_gate: no Llama-family or GPT-2 class gates its attention output (the "
                "gated Qwen3 codes fuse the gate into q_proj, in their own row orders)")
    if c.norm.gain_offset:
        return "gain_offset: these classes multiply by their norm weights w, not by 1 + w"
    if c.attn.sink:  # gpt-oss's class has them, and MoE blocks these layouts do not hold
        return ("attn_sink: no Llama-family or GPT-2 class has a sink in its softmax (gpt-oss's "
                "sinks, the off-by-one softmax)")
    if c.attn.clip_qkv:  # OLMo-1's OlmoAttention has it; Olmo2Config drops it (del self.clip_qkv)
        return ("clip_qkv: no Llama-family, OLMo-2 or GPT-2 class clamps its Q, K, V projections "
                "(OLMo-1's clip_qkv)")
    if c.attn.softcap:  # Gemma2Attention has it; the export writes no Gemma 2 layout
        return ("attn_softcap: no Llama-family, OLMo-2 or GPT-2 class caps its attention logits "
                "(Gemma 2's attn_logit_softcapping)")
    return None


def to_hf(stack, layout, embed=None, head=None, wpe=None, positions=1024):
    """The parameters of stack under a Hugging Face layout's names: a dict name -> tensor (a
    detached copy, in the library's order after the embedding and head), the tensors nbimport
    --export writes for a stack the layout's code computes (nbimport refuses the Mix-LN code's
    layers, which this names for the files of that code). layout "hf-llama" (Llama, Qwen2,
    Qwen3, OLMo-2, and the Mix-LN code's Post-LN, Mix-LN and sandwich layers) or "hf-gpt2" (see the section comment above for each
    layout's conventions). embed and head, (vocab, d_model), given together, are written as
    model.embed_tokens.weight / transformer.wte.weight and lm_head.weight; GPT-2 also gets
    transformer.wpe.weight: wpe, or zeros of `positions` rows (a stack without positions: GPT-2's
    code adds wpe, zero adds nothing). Raises ValueError for a stack the layout's model code
    would compute differently, or with a tensor the layout has no name for."""
    c = stack.config
    why = _layout_refusal(c, _hf_layout(layout))
    if why:
        raise ValueError("this stack cannot be expressed in the %s layout: %s" % (layout, why))
    out = {}
    if (embed is None) != (head is None):
        raise ValueError("give the embedding and the head together, or neither")
    if embed is not None:
        if embed.dim() != 2 or embed.shape[1] != c.d_model or head.shape != embed.shape:
            raise ValueError("the embedding and head are not both (vocab, d_model)")
        gpt2 = layout == "hf-gpt2"
        out["transformer.wte.weight" if gpt2 else "model.embed_tokens.weight"] = \
            embed.detach().clone()
        out["lm_head.weight"] = head.detach().clone()
        if gpt2:
            out["transformer.wpe.weight"] = (torch.zeros(positions, c.d_model) if wpe is None
                                             else wpe.detach().clone())
    params = dict(stack.library_parameters())
    for lib, parts in hf_parts(stack, layout):
        t = params[lib].detach()
        for name, r0, rows, transposed in parts:
            if name in out:
                raise ValueError("%s and another tensor both map to %s" % (lib, name))
            piece = t[r0:r0 + rows]
            out[name] = piece.t().contiguous() if transposed else piece.clone()
    return out


def _hf_find(tensors, name):
    """The key of HF tensor `name` in tensors: as named, or without / with the "transformer."
    prefix (the hub's GPT2Model files are saved without it)."""
    for key in (name, name[len("transformer."):] if name.startswith("transformer.") else None,
                "transformer." + name):
        if key is not None and key in tensors:
            return key
    return None


@torch.no_grad()
def from_hf(tensors, layout, stack):
    """Load Hugging Face-named tensors (a dict name -> tensor, e.g. read_safetensors' or a
    state_dict) into stack, in place, and return it: the reverse of to_hf, as nbimport loads a
    file. Every tensor of the stack must be there with its shape (GPT-2's also without the
    "transformer." prefix); every tensor there must have a place in the stack, except the
    embedding, head and positions and Hugging Face's non-weight buffers (GPT-2's attn.bias and
    attn.masked_bias, rotary_emb.inv_freq). Raises ValueError naming the tensor otherwise."""
    used = set()
    params = dict(stack.library_parameters())
    for lib, parts in hf_parts(stack, layout):
        p, pieces = params[lib], []
        for name, r0, rows, transposed in parts:
            key = _hf_find(tensors, name)
            if key is None:
                raise ValueError("no %s (the stack's %s)" % (name, lib))
            t = tensors[key]
            t = t.t() if transposed and t.dim() == 2 else t
            if tuple(t.shape) != (rows,) + tuple(p.shape[1:]):
                raise ValueError("%s is %s, the stack's %s needs %s" % (
                    key, tuple(tensors[key].shape), lib,
                    ((p.shape[1], rows) if transposed else (rows,) + tuple(p.shape[1:]))))
            pieces.append(t)
            used.add(key)
        p.copy_(torch.cat(pieces) if len(pieces) > 1 else pieces[0])
    for key in tensors:
        if key not in used and _hf_find({k: 1 for k in _HF_OUTSIDE}, key) is None and \
                not key.endswith(_HF_BUFFERS):
            raise ValueError("%s has no place in this stack" % key)
    return stack


def _resolved(cfg):
    """cfg resolved (a Stack's own .config is already: resolve refuses a preset with layers)."""
    return cfg if cfg.layers is not None and cfg.preset != "default" else resolve(cfg)


def hf_family(stack_config):
    """The model_type of the Hugging Face class that computes exactly this stack (a StackConfig,
    or a Stack's resolved .config) ("llama",
    "qwen2", "qwen3", "olmo2" or "gpt2"), as nbimport --export chooses it (nbimport.c's
    llama_family, which reads the placements: this reads the preset names, and refuses a few
    stacks nbimport takes, as Mix-LN of fewer than 4 layers); raises ValueError naming why when
    no class does. The layout is hf-gpt2 for a
    GELU stack, else hf-llama."""
    c = _resolved(stack_config)
    layout = "hf-llama" if c.ffn.type == "swiglu" else "hf-gpt2"
    why = _layout_refusal(c, layout)
    qk, bias = SITE_Q | SITE_K, c.attn.bias
    family = None
    if why or layout == "hf-gpt2":
        family = None if why else "gpt2"
    elif c.preset == "olmo2" and c.attn.sites == qk and c.attn.site_width == _FULL:
        family = "olmo2"  # Olmo2Attention: attention_bias on Q, K, V and O
        why = "attn_bias: OLMo-2 has biases on all of Q, K, V, O or none" if bias not in (
            0, ATTN_BIAS_QKV | ATTN_BIAS_OUT) else None
    elif c.preset not in ("pre", "pre_sites_pre"):  # Pre-#-Pre: Pre-LN layers with sites
        why = "its preset is not Pre-LN (no HF class computes it)"
    elif c.attn.sites == qk and c.attn.site_width == _PH:
        family = "qwen3"  # Qwen3Attention: attention_bias on Q, K, V and O, like Llama's
        why = "attn_bias: Qwen3 has biases on all of Q, K, V, O or none" if bias not in (
            0, ATTN_BIAS_QKV | ATTN_BIAS_OUT) else None
    elif c.attn.sites:
        why = "it has attention norm sites no HF class has"
    elif bias == ATTN_BIAS_QKV:
        family = "qwen2"  # Qwen2Attention hard-codes Q, K, V biases and no O bias
    elif bias == ATTN_BIAS_OUT:
        why = "attn_bias: no HF class has an output bias without Q, K, V biases"
    else:
        family = "llama"
    if not why and c.norm.embed == 1:
        why = "it normalizes the embedding"
    if not why and c.norm.final == -1:
        why = "it has no final norm"
    if why:
        raise ValueError("no Hugging Face model class computes this stack: %s" % why)
    return family


def hf_config(stack_config, vocab, positions=1024, dtype="float32"):
    """The config.json (a dict) of the Hugging Face class that computes the stack (hf_family),
    with the fields nbimport --export writes (hf_config.h hf_config_json): the shape, eps,
    rope_theta, attention_bias, the vocabulary size, untied embeddings; GPT-2's n_positions
    (the rows of wpe)."""
    family = hf_family(stack_config)
    c = _resolved(stack_config)
    o = {"architectures": [HF_FAMILIES[family][0]], "model_type": family}
    if family == "gpt2":
        o.update(n_layer=c.n_layers, n_embd=c.d_model, n_head=c.n_heads, n_inner=c.ffn.d_ff,
                 layer_norm_epsilon=c.norm.eps, activation_function="gelu_new",
                 n_positions=positions)
    else:
        o.update(num_hidden_layers=c.n_layers, hidden_size=c.d_model,
                 num_attention_heads=c.n_heads, num_key_value_heads=c.n_kv_heads,
                 intermediate_size=c.ffn.d_ff, head_dim=c.d_model // c.n_heads,
                 rms_norm_eps=c.norm.eps, rope_theta=c.attn.rope_theta, hidden_act="silu",
                 attention_bias=c.attn.bias == ATTN_BIAS_QKV | ATTN_BIAS_OUT, rope_scaling=None)
    o.update(vocab_size=vocab, tie_word_embeddings=False, torch_dtype=dtype)
    return o


class _HFConfigReader:
    """config.json keys read as hf_config.h reads them: each one read is recorded (used);
    a value of the wrong kind or out of the library's bounds raises ValueError naming it."""

    def __init__(self, conf, where):
        self.conf, self.where, self.used = conf, where, {"model_type"}

    def fail(self, msg):
        raise ValueError("%s: %s" % (self.where, msg))

    def get(self, key):
        self.used.add(key)
        return self.conf.get(key)  # JSON null reads as absent

    def integer(self, key, required=False):
        v = self.get(key)
        if v is None:
            return self.fail('"%s" is missing' % key) if required else 0
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 1 <= v <= 1 << 24 or \
                v != math.floor(v):
            self.fail('"%s" is not an integer from 1 to 2^24' % key)
        return int(v)

    def real(self, key, lo):
        v = self.get(key)
        if v is None:
            return 0.0
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or \
                not v > lo:
            self.fail('"%s" is not a finite number above the library\'s bound' % key)
        return float(v)

    def boolean(self, key):
        v = self.get(key)
        if v is not None and not isinstance(v, bool):
            self.fail('"%s" is not true or false' % key)
        return bool(v)

    def must(self, key, ok, what):
        """key, when present, must hold one of the values ok (strings or bools)."""
        v = self.get(key)
        if v is not None and not any(type(v) is type(o) and v == o for o in ok):
            self.fail('"%s" has a value the library does not compute (it has %s)' % (key, what))


def config_from_hf(conf, where="config.json"):
    """The StackConfig of a Hugging Face config.json (a dict), with examples/hf_config.h's
    mapping and refusals:
      llama   Pre-LN, RMSNorm, SwiGLU (hidden_act "silu"), RoPE; attention_bias: Q, K, V and O
              biases
      qwen2   llama with Q, K, V biases (no O bias), as Qwen2Attention hard-codes them
      qwen3   llama with per-head RMSNorm on Q and K before RoPE (q_norm, k_norm: one gain of
              head_dim): attn.sites Q|K, attn.site_width "per_head"
      olmo2   the olmo2 preset: x + N(F(x)) on each sublayer (post_attention_layernorm,
              post_feedforward_layernorm), RMSNorm over the whole Q and K projections
      gpt2    the gpt2 preset: Pre-LN, LayerNorm, GELU tanh ("gelu_new"), every projection's
              bias, no RoPE (its learned positions are added with the embedding)
    Every key is honoured, checked to hold the only value the library computes, or known not to
    change the stack's forward (token ids, sizes, dropout, dtype, tie_word_embeddings); any
    other key raises ValueError naming it, as does a value the library does not compute."""
    r = _HFConfigReader(conf, where)
    if not isinstance(conf, dict):
        r.fail("not a JSON object")
    mt = conf.get("model_type")
    if mt not in HF_FAMILIES:
        r.fail('"model_type" is %s: the families read are %s' % (mt, ", ".join(HF_FAMILIES)))
    if mt == "gpt2":
        L, d, H = (r.integer(k, True) for k in ("n_layer", "n_embd", "n_head"))
        ff = r.integer("n_inner") or 4 * d  # n_inner null: 4 n_embd, as GPT-2's code
        eps = r.real("layer_norm_epsilon", 0)
        r.must("activation_function", ("gelu_new", "gelu_pytorch_tanh"), "GELU tanh: gelu_new")
        r.must("scale_attn_weights", (True,), "1/sqrt(d_k) scaling")
        r.must("scale_attn_by_inverse_layer_idx", (False,), "no per-layer scaling")
        cfg = StackConfig.from_name("gpt2", n_layers=L, d_model=d, n_heads=H, n_kv_heads=H,
                                    ffn=dict(d_ff=ff), norm=dict(eps=eps),
                                    attn=dict(rope=False))
    else:
        L, d, H = (r.integer(k, True) for k in ("num_hidden_layers", "hidden_size",
                                                 "num_attention_heads"))
        # absent keys mean the classes' defaults: Qwen2/3 have 32 KV heads, Qwen3 head_dim 128
        kv = r.integer("num_key_value_heads") or (32 if mt.startswith("qwen") else 0)
        ff = r.integer("intermediate_size", True)
        head_dim = r.integer("head_dim") or (128 if mt == "qwen3" else 0)
        eps = r.real("rms_norm_eps", 0)
        theta = r.real("rope_theta", 1)
        params = r.get("rope_parameters")  # newer transformers: {"rope_type": "default", "rope_theta": ...}
        if params is not None:
            for k, v in params.items():
                if k == "rope_theta" and isinstance(v, (int, float)) and math.isfinite(v) and v > 1:
                    theta = float(v)
                elif not (k == "rope_type" and v == "default"):
                    r.fail('"rope_parameters" has "%s": only the default RoPE with a rope_theta above 1 '
                           'is computed' % k)
        bias = r.boolean("attention_bias")
        r.must("hidden_act", ("silu",), "SwiGLU: silu")
        r.must("mlp_bias", (False,), "no MLP biases")
        r.must("use_sliding_window", (False,), "full attention")
        if mt == "mistral" and r.get("sliding_window") is not None:
            r.fail('"sliding_window" is set: the library computes full attention (Mistral with '
                   'sliding_window null is Llama)')
        if head_dim and head_dim * H != d:
            r.fail('"head_dim" is not hidden_size / num_attention_heads (the library\'s heads '
                   'split d_model)')
        if r.get("rope_scaling") is not None:
            r.fail('"rope_scaling" is set: the library\'s RoPE has no scaling')
        types = r.get("layer_types")
        if types is not None and not (isinstance(types, list) and
                                      all(t == "full_attention" for t in types)):
            r.fail('"layer_types" has layers other than full_attention')
        cfg = StackConfig.from_name("olmo2" if mt == "olmo2" else "pre", n_layers=L, d_model=d,
                                    n_heads=H, n_kv_heads=kv, ffn=dict(d_ff=ff),
                                    norm=dict(eps=eps or (1e-5 if mt == "olmo2" else 1e-6)),
                                    attn=dict(rope=True, rope_theta=theta or 10000.0))
        cfg.attn.bias = (ATTN_BIAS_QKV if mt == "qwen2" else
                         ATTN_BIAS_QKV | ATTN_BIAS_OUT if bias else 0)
        if mt == "qwen3":
            cfg.attn.sites, cfg.attn.site_width = SITE_Q | SITE_K, _PH
    for key in conf:
        if key not in r.used and key not in _HF_INERT:
            r.fail('"%s" is not a setting known for model_type %s: refused rather than ignored'
                   % (key, mt))
    resolve(cfg)  # what nb_stack_init refuses (d_model % n_heads, ...)
    return cfg


def read_hf_dir(path):
    """(config, tensors) of a Hugging Face directory: config.json as a dict, and the tensors of
    model.safetensors, or of the shards model.safetensors.index.json's weight_map names."""
    with open(os.path.join(path, "config.json")) as f:
        conf = json.load(f)
    single, index = (os.path.join(path, n) for n in ("model.safetensors",
                                                     "model.safetensors.index.json"))
    if os.path.exists(single):
        return conf, read_safetensors(single)[0]
    if not os.path.exists(index):
        raise ValueError("%s: neither model.safetensors nor model.safetensors.index.json" % path)
    with open(index) as f:
        weight_map = json.load(f)["weight_map"]
    tensors = {}
    for shard in sorted(set(weight_map.values())):
        if "/" in shard or shard == "..":
            raise ValueError("%s: %r is not a file name of the directory" % (index, shard))
        tensors.update(read_safetensors(os.path.join(path, shard))[0])
    return conf, tensors


def load_hf_dir(path):
    """(stack, embed, head) of a Hugging Face directory (config.json with model.safetensors or
    shards; model_type llama, qwen2, qwen3, olmo2 or gpt2): the Stack of config_from_hf with the
    weights loaded by from_hf (eval mode, float32), the embedding (model.embed_tokens /
    transformer.wte) and the head (lm_head.weight; the embedding when the file has none and
    tie_word_embeddings holds, which GPT-2's config defaults to). GPT-2's positions are not
    returned: read_hf_dir's tensors hold transformer.wpe.weight."""
    conf, tensors = read_hf_dir(path)
    cfg = config_from_hf(conf, os.path.join(path, "config.json"))
    stack = from_hf(tensors, HF_FAMILIES[conf["model_type"]][1], Stack(cfg)).eval()
    embed = next((tensors[k] for k in _HF_EMBED if k in tensors), None)
    head = tensors.get("lm_head.weight")
    if head is None and conf.get("tie_word_embeddings", conf["model_type"] == "gpt2"):
        head = embed
    if embed is None or head is None:
        raise ValueError("%s has no %s" % (path, "embedding" if embed is None else "lm_head"))
    return stack, embed, head


def save_hf_dir(path, stack, embed, head, wpe=None, shards=1, dtype="F32"):
    """Write stack, embed and head as a Hugging Face directory, loadable by the class that
    computes the stack (hf_family; nbimport reads it, as transformers' from_pretrained would):
    config.json (hf_config) and model.safetensors (to_hf's tensors, metadata {"format": "pt"}),
    or, with shards > 1, model-0000k-of-0000n.safetensors and model.safetensors.index.json.
    dtype: the files' tensor type (F32, F16 or BF16). Returns the config dict."""
    positions = wpe.shape[0] if wpe is not None else 1024
    conf = hf_config(stack.config, embed.shape[0], positions,
                     {"F32": "float32", "F16": "float16", "BF16": "bfloat16"}[dtype])
    tensors = list(to_hf(stack, HF_FAMILIES[conf["model_type"]][1], embed, head, wpe,
                         positions).items())
    os.makedirs(path, exist_ok=True)
    if shards == 1:
        write_safetensors(os.path.join(path, "model.safetensors"), tensors, {"format": "pt"},
                          dtype)
    else:
        per = -(-len(tensors) // shards)
        weight_map, size = {}, 0
        for k in range(shards):
            name = "model-%05d-of-%05d.safetensors" % (k + 1, shards)
            part = tensors[k * per:(k + 1) * per]
            write_safetensors(os.path.join(path, name), part, {"format": "pt"}, dtype)
            weight_map.update((n, name) for n, _ in part)
            size += sum(t.numel() * {"F32": 4, "F64": 8}.get(dtype, 2) for _, t in part)
        with open(os.path.join(path, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {"total_size": size}, "weight_map": weight_map}, f, indent=2)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(conf, f, indent=2)
        f.write("\n")
    return conf


def text_val_batches(data, n_batches, B, T, val_frac=0.1):
    """The trainer's validation batches of a --data corpus (data.c val_batch): n_batches
    tensors (B, T+1) of bytes, fixed windows spread over the held-out tail."""
    n = len(data)
    min_val = max(int(val_frac * n), T + 2)
    n_train = n - min_val
    span = n - n_train - T - 1
    rows = n_batches * B
    out = []
    for k in range(n_batches):
        offs = [n_train + (span * (k * B + b) // (rows - 1) if rows > 1 else 0) for b in range(B)]
        out.append(torch.tensor([list(data[o:o + T + 1]) for o in offs], dtype=torch.long))
    return out


_M64 = (1 << 64) - 1


def _mix64(s):
    """splitmix64 (util.c mix64): (new state, output)."""
    s = (s + 0x9E3779B97F4A7C15) & _M64
    z = ((s ^ (s >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
    return s, z ^ (z >> 31)


def _hash3(a, b, c):
    """util.c hash3."""
    s = ((a * 0x9E3779B97F4A7C15) & _M64) ^ (((b + 0x632BE59BD9B4E019) * 0xD1B54A32D192ED03)
                                             & _M64) ^ \
        (((c + 0x8CB92BA72F3D8DD7) * 0xA24BAED4963EE407) & _M64)
    s, _ = _mix64(s & _M64)
    return _mix64(s)[1]


def text_train_batch(data, seed, step, B, T, val_frac=0.1):
    """The trainer's training batch of 0-based `step` on a --data corpus (data.c
    train_batch): (B, T+1) bytes, row b a window at a seeded offset of the training split."""
    n = len(data)
    n_train = n - max(int(val_frac * n), T + 2)
    rows = []
    for b in range(B):
        _, r = _mix64(_hash3(seed, step + 1, b + 1))
        off = r % (n_train - T)
        rows.append(list(data[off:off + T + 1]))
    return torch.tensor(rows, dtype=torch.long)


@torch.no_grad()
def text_eval_loss(model, meta, data, val_frac=0.1):
    """What `train --load CK --eval --data FILE` prints as val_loss: the mean loss over the
    checkpoint's eval_batches validation batches of batch x seq bytes."""
    tot, cnt = 0.0, 0
    for tok in text_val_batches(data, int(meta["eval_batches"]), int(meta["batch"]),
                                int(meta["seq"]), val_frac):
        loss, n = model.loss(tok)
        tot += float(loss) * n
        cnt += n
    return tot / cnt
