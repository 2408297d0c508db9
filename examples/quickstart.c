/* quickstart: the smallest complete use of a stack. A 4-layer HybridNorm* stack, its forward
   and backward on a random batch, the loss sum(out * dout) before and after one plain gradient
   step, and the first entries of the tensor table. The README's "Using it" shows this file;
   CTest compiles it as C and as C++ and runs it.
   Build and run:  cmake -S . -B build && cmake --build build && ./build/quickstart */
#define NORMBLOCKS_IMPLEMENTATION /* in exactly one file of a program */
#include "normblocks.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static nb_real* alloc(size_t n) { return (nb_real*)calloc(n ? n : 1, sizeof(nb_real)); }

static double dot(const nb_real* a, const nb_real* b, size_t n) {
    double s = 0;
    size_t i;
    for (i = 0; i < n; i++) s += (double)a[i] * b[i];
    return s;
}

int main(void) {
    enum { B = 2, T = 16, D = 64 };
    const size_t n_act = (size_t)B * T * D;
    nb_ctx ctx;
    nb_stack_desc desc;
    nb_stack s;
    nb_real *params, *grads, *cache, *scratch, *x, *out, *dout, *dx;
    double loss0, loss1;
    size_t i;
    int rc = 1;

    memset(&ctx, 0, sizeof ctx);   /* zero = defaults (the OpenMP thread count, malloc) */
    memset(&desc, 0, sizeof desc); /* zero = each field's default */
    desc.n_layers = 4; desc.d_model = D; desc.n_heads = 4; desc.n_kv_heads = 2; desc.attn.rope = 1;
    if (nb_preset_from_name(&ctx, &desc, "HybridNorm*") ||   /* or desc.preset = NB_PRESET_... */
        nb_stack_init(&ctx, &s, &desc, B, T)) { /* validates, sizes buffers for B x T at most */
        fprintf(stderr, "%s\n", ctx.err);
        return 1;
    }
    params = alloc(s.n_params); grads = alloc(s.n_params);   /* one buffer each */
    cache = alloc(s.n_cache); scratch = alloc(s.n_scratch);
    x = alloc(n_act); out = alloc(n_act); dout = alloc(n_act); dx = alloc(n_act);
    if (!params || !grads || !cache || !scratch || !x || !out || !dout || !dx) goto done;

    if (nb_stack_init_params(&ctx, &s, params, NB_INIT_MEGATRON, 0, 42) ||
        nb_fill_normal(x, n_act, 1.0, 0, 1) || nb_fill_normal(dout, n_act, 1.0, 0, 2))
        goto fail;

    /* loss = sum(out * dout): its gradient with respect to out is dout */
    if (nb_stack_forward(&ctx, &s, params, out, x, B, T, cache, scratch)) goto fail;
    loss0 = dot(out, dout, n_act);
    if (nb_stack_backward(&ctx, &s, params, grads, dx, dout, B, T, cache, scratch)) goto fail;

    /* one gradient step on the flat buffers (an optimizer, or an MPI allreduce, sees the same) */
    for (i = 0; i < s.n_params; i++) params[i] -= (nb_real)1e-4 * grads[i];
    if (nb_stack_forward(&ctx, &s, params, out, x, B, T, cache, scratch)) goto fail;
    loss1 = dot(out, dout, n_act);

    printf("%s: %d layers, %zu parameters in %d tensors\n", nb_preset_name(s.desc.preset),
           s.desc.n_layers, s.n_params, s.n_tensors);
    for (i = 0; i < 3; i++)
        printf("  %-28s offset %zu, %zu values\n", s.tensors[i].name, s.tensors[i].offset,
               s.tensors[i].count);
    printf("loss %.4f -> %.4f after one step (gradient norm %.4f)\n", loss0, loss1,
           nb_stack_grad_norms(&s, grads, NULL));
    rc = loss1 < loss0 ? 0 : 1; /* a step against the gradient lowers a linear loss */
    goto done;
fail:
    fprintf(stderr, "%s\n", ctx.err);
done:
    free(params); free(grads); free(cache); free(scratch);
    free(x); free(out); free(dout); free(dx);
    nb_stack_free(&s);
    return rc;
}
