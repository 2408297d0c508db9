#!/usr/bin/env bash
# The PyTorch twin (examples/pytorch/normblocks_twin.py) against the C trainer: for each config
# a few training steps on a byte corpus (this repository's normblocks.h), a checkpoint, then
# examples/pytorch/compare.py --grads:
#   - the twin's validation loss of the checkpoint equals what `train --load CK --eval` prints,
#   - one lr-0 training step of the trainer from the checkpoint: the twin's loss of that step's
#     batch equals the trainer's (its --csv), and the twin's autograd gradients equal the
#     trainer's (the step's first Adam moment with beta1 0, no clipping),
# within float32 rounding: losses |twin - C| <= 1e-6 + 1e-6 |C| (about 10 float32 ulps of a
# loss near 4; measured differences are below 1e-7, the same size as the C loss's own change
# between thread counts), gradients per tensor max |twin - C| <= 1e-7 + 1e-5 max |C| (measured:
# below 1e-6 max |C|).
#   bash tests/test_twin.sh path/to/train [python]
# Exits 77 (CTest SKIP_RETURN_CODE) when PyTorch is not importable.
set -u

TRAIN="$(realpath "${1:?usage: test_twin.sh path/to/train [python]}")"
PY="${2:-/usr/bin/python3}"
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(dirname "$HERE")"
COMPARE="$ROOT/examples/pytorch/compare.py"
DATA="$ROOT/normblocks.h"

if ! "$PY" -c "import torch" > /dev/null 2>&1; then
  echo "SKIP: $PY cannot import torch (Debian: apt-get install python3-torch)"
  exit 77
fi

WORK="$(mktemp -d "${TMPDIR:-/tmp}/nb_twin_test.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
cd "$WORK" || exit 1

PASSED=0
FAILED=0
# tiny models, one thread; GQA (4 heads, 2 KV heads) and RoPE unless a config says otherwise
BASE=(--data "$DATA" --d 32 --heads 4 --kv-heads 2 --seq 32 --batch 4 --steps 20 --warmup 5
      --lr 3e-3 --threads 1 --eval-batches 2 --log-every 20 --quiet)

check() { # check NAME TRAIN-FLAGS...
  local name="$1"
  shift
  if ! "$TRAIN" "${BASE[@]}" --save "$name.safetensors" "$@" > "$name.log" 2>&1; then
    FAILED=$((FAILED + 1)); echo "FAIL: $name: training failed"; cat "$name.log"; return
  fi
  if "$PY" "$COMPARE" "$name.safetensors" --data "$DATA" --train "$TRAIN" --grads > "$name.cmp" 2>&1; then
    PASSED=$((PASSED + 1)); echo "ok: $name"; sed 's/^/    /' "$name.cmp"
  else
    FAILED=$((FAILED + 1)); echo "FAIL: $name"; cat "$name.cmp"
  fi
}

check pre --preset pre --layers 3
check post --preset post --layers 3
check hybrid --preset hybrid --layers 3
check hybrid_star --preset hybrid_star --layers 3
# 4 layers: floor(0.25 * 4) = 1 Post-Norm layer, then Pre-Norm
check mixln --preset mixln --layers 4
check siamese --preset siamese --layers 3
check siamese_post_pre --preset siamese_post_pre --layers 2
check lns --preset lns --layers 3
check olmo2_mha --preset olmo2 --layers 2 --kv-heads 0 --no-rope
check dyt --preset dyt --layers 2
check periln --preset periln --layers 2
check qk_dyt --preset Pre-QK-Pre --layers 2 --norm dyt
check rezero --preset rezero --layers 2
check layerscale --preset layerscale --layers 2
# ResFormer's value residual: fixed on Pre-Norm, learnable lambdas on HybridNorm (after V norms)
check vres_fixed --preset pre --layers 3 --value-residual fixed
check vres_learn --preset hybrid --layers 3 --value-residual learn
# hyper-connections: mHC (Sinkhorn, the weighted head), HC (per-stream norms, summed streams),
# the identity form
check mhc --preset mhc --layers 2
check hc --preset hc --layers 2
check ihc --preset ihc --layers 2
# the trainer's model keys the twin reads from a checkpoint: hyper-connections by flag on
# another preset (3 static streams, 5 Sinkhorn iterations), CompleteP's branch multiplier
check mhc_flags --preset sandwich --layers 2 --hyper mhc --hyper-streams 3 --hyper-form static --hyper-sinkhorn 5
check hc_flags --preset pre --layers 2 --hyper hc --hyper-streams 2 --final-norm off
# mHC-lite by flag (the checkpoint's hyper "mhc-lite"): comb the softmax mixture of the 3! = 6
# permutation matrices, fn and base 2n + n! = 12 wide, on Pre-Norm with 3 streams
check mhc_lite --preset pre --layers 2 --hyper mhc-lite --hyper-streams 3
# DenseFormer's depth-weighted average by flag (the checkpoint's dwa "on", dwa_dilation 2): layer
# l's input the average of x_0 and the outputs h_j with j = l+1 mod 2 (blocks.<l>.dwa.weight of
# 1 x ((l+1)/2 + 1), decayed), on Pre-Norm with 3 layers
check dwa --preset pre --layers 3 --dwa --dwa-dilation 2
# DenseFormer's period by flag (the checkpoint's dwa_period 2, the DWAModules package's
# period): only layers 1 and 3 average (blocks.1.dwa.weight of 1 x 2 over x_0, h_2 and
# blocks.3.dwa.weight of 1 x 3 over x_0, h_2, h_4), layers 0 and 2 pass their outputs on, on
# Pre-Norm with 4 layers and the dilation 2
check dwa_period --preset pre --layers 4 --dwa --dwa-dilation 2 --dwa-period 2
# Attention Residuals by flag (the checkpoint's attn_res "on", attn_res_block 3): no residual
# sums, each sublayer's input a softmax over depth of x_0 and the sublayers' block sums (the
# readers blocks.<l>.attn_res.*, mlp_res.* last in the layer, final_res.* before ln_f; the
# queries start at 0 and move), blocks of 3 sublayers (boundaries before attention and before
# FFN sublayers) on Pre-Norm with 3 layers
check attn_res --preset pre --layers 3 --attn-res --attn-res-block 3
# modded-nanogpt's U-Net skips and x_0 re-injection by flag (the checkpoint's unet_skips "on",
# reinject_x0 "on"): layers 2, 3 add blocks.<l>.skip_weight times the outputs of layers 1, 0 to
# their inputs, every layer runs on lambda_0 x + lambda_1 x_0 (blocks.<l>.lambdas, last in the
# layer; the scalars start at 1 and [1, 0] and move, undecayed), on Pre-Norm with 4 layers and,
# as its code, the embedding normalized (x_0 = norm(embed(.)): an x_0 taken before that norm
# differs)
check unet --preset pre --layers 4 --unet-skips --reinject-x0 --embed-norm on
# modded-nanogpt's value embeddings by flag (the checkpoint's value_embeds "2"): the trainer's
# tables transformer.value_embeds.0/1.weight (256 x H_kv d_k, after the embedding, before the
# stack; their gradients scatter-added from the rows') gathered at each byte, layers 0, 1 and
# 2, 3 attending over lambda_0 V + lambda_1 E_t (blocks.<l>.value_embed.lambda where the value
# residual's lambda sits, start at 0.5 and move, undecayed), on Pre-Norm with 4 layers and GQA
check value_embeds --preset pre --layers 4 --value-embeds 2
# CompleteP's branch multiplier and, with --width-base, its logits' 1/m_d (width_base)
check completep --preset pre --layers 3 --completep 1 --depth-base 2 --width-base 16
# width muP by flag (the checkpoint's mup "on", width_base, mup_base_head_dim, mup_embed_mult):
# the attention's scale sqrt(4) / d_h, the logits times 1/m_d = 0.5, the embedding times
# sqrt(d) 1.5 (Gemma's normalizer and muP's multiplier, rounded once)
check mup --preset pre --layers 2 --mup --width-base 16 --mup-base-head-dim 4 --mup-embed-mult 1.5 --embed-scale sqrt-d
# nGPT: the preset's L2 stack, and the trainer's model around it (its logit scale sz, unit
# embedding and head rows); its train.py's optimizer defaults (warmup as BASE's, given); MHA
check ngpt --preset ngpt --layers 2 --kv-heads 0
# Gemma's model around the stack (the twin reads embed_scale 2 and logit_softcap from the
# checkpoint): the constant embedding scale sqrt(d) and the final-logit softcap C tanh(z / C),
# with a C small enough that tanh bends the logits, on Gemma 2's sandwich norms; on nGPT the
# softcap comes after its logit scale sz sqrt(d)
check gemma --preset sandwich --layers 2 --embed-scale sqrt-d --logit-softcap 3
check ngpt_softcap --preset ngpt --layers 2 --kv-heads 0 --logit-softcap 5
# issue 26's options as the trainer writes them (the twin reads attn_gate, the norm derf,
# norm_gain, norm_bias, gain_offset and branch_scale from the checkpoint): gated attention
# (elementwise, and headwise with GQA), Derf on DyT's LLM setting (its learnable embedding
# scale), Gemma's unit-offset gains on the sandwich norms, LayerNorm without its weight or bias,
# SkipInit's scalar per sublayer on the norm-free rezero preset
check gated --preset pre --layers 2 --attn-gate elementwise
check gated_head --preset pre --layers 2 --attn-gate headwise
check derf --preset dyt --layers 2 --norm derf
check gain_offset --preset sandwich --layers 2 --gain-offset
check norm_plain --preset pre --layers 2 --norm layer --norm-gain off --norm-bias off
check skipinit --preset rezero --layers 2 --branch-scale sublayer
# attention sinks as the trainer writes them (the twin reads attn_sink): gpt-oss's learned logit
# per query head with GQA (its "sinks" tensor in the checkpoint's order), the off-by-one softmax
# on HybridNorm's site norms
check sinks --preset pre --layers 2 --attn-sink learned
check sinks_obo --preset hybrid --layers 2 --attn-sink off-by-one
# OLMo's clip_qkv as the trainer writes it (the twin reads clip_qkv): on OLMo-2 (the clamp, then
# its full-width Q, K norms, then RoPE; a third of layer 1's Q|K|V clamped, layer 0's are
# smaller than c), and on Pre-Norm with the elementwise gate (half of Q|K|V clamped, the gate's
# logits not)
check clip_qkv --preset olmo2 --layers 2 --clip-qkv 0.15
check clip_qkv_gated --preset pre --layers 2 --clip-qkv 0.5 --attn-gate elementwise
# Gemma 2's attention-logit softcap as the trainer writes it (the twin reads attn_softcap): on
# Gemma's sandwich layout (its scores are small here, |s| < 0.2: 0.05 bends a fifth of them),
# and on Pre-Norm with learned sinks (0.6: a fifth beyond it; the sink's logit joins uncapped)
check attn_softcap --preset sandwich --layers 2 --attn-softcap 0.05
check attn_softcap_sinks --preset pre --layers 2 --attn-softcap 0.6 --attn-sink learned
# LayerNorm with biases, GELU-tanh FFN with biases
check gpt2 --preset gpt2 --layers 2
check pre_layer_gelu --preset Pre-QK-Pre --layers 2 --norm layer --ffn gelu --kv-heads 1
check schedule --schedule post,pre,hybrid,qkvpre,prepost,postpre,sandwich,normafter --d 16 --heads 2 --kv-heads 1

# The softcap's backward (model.c: dL/dz = dL/dz' (1 - tanh^2(z / C))) and the constant
# scale's (dE = sqrt(d) dx) against the autograd of a float64 twin, within the same limits
if [ -f gemma.safetensors ] &&
   "$PY" "$COMPARE" gemma.safetensors --data "$DATA" --train "$TRAIN" --grads --float64 > gemma64.cmp 2>&1; then
  PASSED=$((PASSED + 1)); echo "ok: gemma against a float64 twin"; sed 's/^/    /' gemma64.cmp
else
  FAILED=$((FAILED + 1)); echo "FAIL: gemma against a float64 twin"; cat gemma64.cmp 2>/dev/null
fi

# Layer-by-layer dumps of one validation batch: `train --dump` and `compare.py --dump` write the
# same names in the same order, and nbdiff finds them equal to float32 rounding per tensor
# (--scaled: |C - twin| <= 1e-5 max|twin| + 1e-5 |twin|; measured below 1e-6 max|twin|, forward
# and backward). Then a copy of the twin with one term wrong (attention scores scaled by 1/d_k
# instead of 1/sqrt(d_k)) must be named at the first tensor that term changes:
# blocks.0.attn.context (the scores themselves are not a traced tensor).
NBDIFF="$(dirname "$TRAIN")/nbdiff"
dump_check() {
  local ck
  # two streams; output norms (out_normed) at full-width QK sites; the value residual;
  # hyper-connected streams (hc_maps, hc_in, x1..x3, hc_head; mHC-lite's maps on 3 streams);
  # DenseFormer's averages (blocks.<l>.x after them, layer 0's grad_x_in x_0's whole gradient;
  # with the period 2 every other layer's x its own output);
  # Attention Residuals' readers (attn_res_h, attn_res_p; x_out the branch, blocks.<l>.x p_2l+1,
  # grad_x_in the whole gradient of the layer's input stream); the U-Net's and re-injection's
  # mixed inputs (x_mixed; grad_x_in through the layer alone, the skips' share in the encoder
  # layers' ffn.grad_out, layer 0's x_0's whole gradient); the value embeddings' mix
  # (qkv_vres in every layer);
  # nGPT's L2 norms and scales
  # (qkv_scaled, proj_scaled, res_normed); the output gate (c_gated); Derf's norms; learned
  # attention sinks; clip_qkv without site norms (qkv as projected, qkv_normed clamped); the
  # softcap with learned sinks (the capped scores are not traced: context onward); one stream
  # (kept below)
  for ck in siamese.safetensors olmo2_mha.safetensors vres_learn.safetensors mhc.safetensors \
            mhc_lite.safetensors dwa.safetensors dwa_period.safetensors attn_res.safetensors \
            unet.safetensors value_embeds.safetensors hc.safetensors ngpt.safetensors \
            gated.safetensors derf.safetensors sinks.safetensors \
            clip_qkv_gated.safetensors attn_softcap_sinks.safetensors hybrid.safetensors; do
    if ! "$TRAIN" --load "$ck" --data "$DATA" --dump c.dump > dump.log 2>&1 ||
       ! "$PY" "$COMPARE" "$ck" --data "$DATA" --dump t.dump >> dump.log 2>&1; then
      FAILED=$((FAILED + 1)); echo "FAIL: dumps of $ck"; cat dump.log; return
    fi
    if "$NBDIFF" c.dump t.dump --atol 1e-5 --rtol 1e-5 --scaled > diff.log 2>&1; then
      PASSED=$((PASSED + 1)); echo "ok: dumps of $ck agree"; sed 's/^/    /' diff.log
    else
      FAILED=$((FAILED + 1)); echo "FAIL: dumps of $ck differ"; cat dump.log diff.log; return
    fi
  done
  mkdir -p bug
  cp "$ROOT/examples/pytorch/normblocks_twin.py" "$ROOT/examples/pytorch/compare.py" bug/
  sed -i 's|s = self._matmul(q, k.transpose(-2, -1)) / math.sqrt(dk)|s = self._matmul(q, k.transpose(-2, -1)) / dk|' \
    bug/normblocks_twin.py
  if ! grep -q 'k.transpose(-2, -1)) / dk' bug/normblocks_twin.py; then
    FAILED=$((FAILED + 1)); echo "FAIL: the bug was not injected (the twin changed?)"; return
  fi
  "$PY" bug/compare.py "$ck" --data "$DATA" --dump b.dump > /dev/null 2>&1
  "$NBDIFF" c.dump b.dump --atol 1e-5 --rtol 1e-5 --scaled > bug.log 2>&1
  local rc=$?
  if [ "$rc" = 1 ] && grep -q "first tensor that differs, in c.dump's order: blocks.0.attn.context$" bug.log; then
    PASSED=$((PASSED + 1)); echo "ok: an injected bug is named at blocks.0.attn.context"
    sed 's/^/    /' bug.log
  else
    FAILED=$((FAILED + 1)); echo "FAIL: the injected bug (nbdiff exit $rc)"; cat bug.log
  fi
}
if [ -x "$NBDIFF" ] && [ -f hybrid.safetensors ]; then dump_check
else FAILED=$((FAILED + 1)); echo "FAIL: no $NBDIFF or no hybrid checkpoint for the dump test"; fi

echo "$PASSED passed, $FAILED failed"
[ "$FAILED" = 0 ]
