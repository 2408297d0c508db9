/* NB_MALLOC / NB_FREE override: the stack's tables go through them with nb_ctx.alloc_user, and
   every allocation is freed by nb_stack_free (also when init fails half way). */
#include <stdlib.h>
typedef struct counter { long allocs, frees, bytes; } counter;
static void* count_malloc(size_t n, void* user) {
    ((counter*)user)->allocs++;
    ((counter*)user)->bytes += (long)n;
    return malloc(n);
}
static void count_free(void* p, void* user) {
    if (p) ((counter*)user)->frees++;
    free(p);
}
#define NB_MALLOC(size, user) count_malloc(size, user)
#define NB_FREE(ptr, user) count_free(ptr, user)
#define NORMBLOCKS_IMPLEMENTATION
#include "normblocks.h"
#include "nbtest.h"

int main(void) {
    counter c = {0, 0, 0};
    nb_ctx ctx;
    nb_stack s;
    nb_stack_desc d;
    nb_layer_desc bad[2];
    memset(&ctx, 0, sizeof ctx);
    ctx.alloc_user = &c;
    memset(&d, 0, sizeof d);
    d.n_layers = 3; d.d_model = 16; d.n_heads = 2; d.preset = NB_PRESET_SIAMESE;
    nbt_check(nb_stack_init(&ctx, &s, &d, 2, 4) == NB_OK, "init with a custom allocator");
    nbt_check(c.allocs > 0 && c.bytes > 0, "the stack's tables come from NB_MALLOC with the user pointer");
    nb_stack_free(&s);
    nbt_check(c.allocs == c.frees, "nb_stack_free returns every allocation");
    nb_stack_free(&s); /* twice is harmless */
    nbt_check(c.allocs == c.frees, "a second nb_stack_free is harmless");
    /* a schedule error found after the tables were allocated: nothing leaks */
    memset(bad, 0, sizeof bad);
    bad[1].attn.residual_from_norm = 1;
    d.preset = NB_PRESET_DEFAULT;
    d.n_layers = 2;
    d.layers = bad;
    nbt_check(nb_stack_init(&ctx, &s, &d, 2, 4) == NB_ERR_CONFIG, "bad schedule rejected");
    nbt_check(c.allocs == c.frees, "failed init frees what it allocated");
    return nbt_finish();
}
