/* Bad input gets an error code and a message naming the function and the problem; outputs are
   not touched; the logger sees the same message; a NULL context is allowed. */
#define NORMBLOCKS_IMPLEMENTATION
#include "normblocks.h"
#include "nbtest.h"

typedef struct log_seen { int calls; nb_result last; char msg[256]; } log_seen;
static void logger(void* user, nb_result code, const char* msg) {
    log_seen* s = (log_seen*)user;
    s->calls++;
    s->last = code;
    snprintf(s->msg, sizeof s->msg, "%s", msg);
}

static nb_ctx ctx;
static log_seen seen;
static nb_real x[64], y[64], r[16], m[16], g[8], dy[64], dx[64], scratch[4096];

/* Check code, that the message mentions `needle`, that the logger got it, and y untouched. */
static void expect(nb_result got, nb_result want, const char* needle, const char* what) {
    char name[512];
    int i, untouched = 1;
    for (i = 0; i < 64; i++) untouched &= (y[i] == -7 && dx[i] == -7);
    snprintf(name, sizeof name, "%s -> %s (got %s: \"%s\")", what, nb_result_string(want),
             nb_result_string(got), ctx.err);
    nbt_check(got == want && strstr(ctx.err, needle) != NULL && seen.last == want &&
                  strcmp(seen.msg, ctx.err) == 0 && untouched, name);
    for (i = 0; i < 64; i++) y[i] = dx[i] = -7;
    ctx.err[0] = 0;
    seen.last = NB_OK;
}

int main(void) {
    int i;
    ctx.log = logger;
    ctx.log_user = &seen;
    for (i = 0; i < 64; i++) { x[i] = (nb_real)(i % 7) - 3; dy[i] = 1; y[i] = dx[i] = -7; }
    for (i = 0; i < 8; i++) g[i] = 1;

    expect(nb_rmsnorm_forward(&ctx, y, 8, r, x, 8, g, 0, 8, 0, 1e-5f), NB_ERR_SHAPE, "rows",
           "rmsnorm rows = 0");
    expect(nb_rmsnorm_forward(&ctx, y, 8, r, x, 8, g, 2, -8, 0, 1e-5f), NB_ERR_SHAPE, "width",
           "rmsnorm negative width");
    expect(nb_rmsnorm_forward(&ctx, y, 8, r, x, 8, g, 2, 8, 3, 1e-5f), NB_ERR_SHAPE, "seg",
           "rmsnorm seg does not divide width");
    expect(nb_rmsnorm_forward(&ctx, y, 8, r, x, 8, g, 2, 8, -2, 1e-5f), NB_ERR_SHAPE, "seg",
           "rmsnorm negative seg");
    expect(nb_rmsnorm_forward(&ctx, y, 8, r, x, 4, g, 2, 8, 0, 1e-5f), NB_ERR_SHAPE, "stride",
           "rmsnorm ldx < width");
    expect(nb_rmsnorm_forward(&ctx, y, 8, r, x, 8, g, 2, 8, 0, 0), NB_ERR_VALUE, "eps",
           "rmsnorm eps = 0");
    expect(nb_rmsnorm_forward(&ctx, y, 8, r, x, 8, g, 2, 8, 0, -1), NB_ERR_VALUE, "eps",
           "rmsnorm eps < 0");
    expect(nb_rmsnorm_forward(&ctx, y, 8, r, x, 8, g, 2, 8, 0, (nb_real)NAN), NB_ERR_VALUE,
           "eps", "rmsnorm eps NaN");
    expect(nb_rmsnorm_forward(&ctx, NULL, 8, r, x, 8, g, 2, 8, 0, 1e-5f), NB_ERR_NULL,
           "nb_rmsnorm_forward", "rmsnorm y NULL");
    expect(nb_rmsnorm_forward(&ctx, y, 8, NULL, x, 8, g, 2, 8, 0, 1e-5f), NB_ERR_NULL, "rstd",
           "rmsnorm rstd NULL");
    expect(nb_rmsnorm_backward(&ctx, dx, 8, g, dy, 8, x, 8, r, g, 2, 8, 0, 0, NULL), NB_ERR_NULL,
           "scratch", "rmsnorm backward dgain without scratch");
    expect(nb_rmsnorm_backward(&ctx, dx, 4, NULL, dy, 8, x, 8, r, g, 2, 8, 0, 0, scratch),
           NB_ERR_SHAPE, "lddx", "rmsnorm backward lddx < width");
    expect(nb_rmsnorm_backward(&ctx, dx, 8, NULL, NULL, 8, x, 8, r, g, 2, 8, 0, 0, scratch),
           NB_ERR_NULL, "dy", "rmsnorm backward dy NULL");
    expect(nb_layernorm_forward(&ctx, y, 8, NULL, r, x, 8, g, NULL, 2, 8, 0, 1e-5f), NB_ERR_NULL,
           "mean", "layernorm mean NULL");
    expect(nb_layernorm_forward(&ctx, y, 8, m, r, x, 8, g, NULL, 2, 8, 16, 1e-5f), NB_ERR_SHAPE,
           "seg", "layernorm seg > width");
    expect(nb_layernorm_backward(&ctx, dx, 8, g, NULL, dy, 8, x, 8, NULL, r, g, 2, 8, 0, 0,
                                 scratch), NB_ERR_NULL, "mean", "layernorm backward mean NULL");
    expect(nb_softmax_forward(&ctx, y, 8, NULL, x, 8, 2, 8, 0, 0), NB_ERR_VALUE, "scale",
           "softmax scale = 0");
    expect(nb_softmax_forward(&ctx, y, 8, NULL, x, 8, 2, 8, (nb_real)INFINITY, 0), NB_ERR_VALUE,
           "scale", "softmax scale inf");
    expect(nb_softmax_forward(&ctx, y, 8, NULL, x, 7, 2, 8, 1, 0), NB_ERR_SHAPE, "stride",
           "softmax lds < cols");
    expect(nb_softmax_forward(&ctx, y, 8, NULL, x, 8, 2, 0, 1, 0), NB_ERR_SHAPE, "cols",
           "softmax cols = 0");
    expect(nb_softmax_backward(&ctx, dx, 4, dy, 8, x, 8, 2, 8, 1, 1), NB_ERR_SHAPE, "ldds",
           "softmax backward ldds < cols");
    expect(nb_softmax_backward(&ctx, dx, 8, dy, 8, NULL, 8, 2, 8, 1, 1), NB_ERR_NULL, "p",
           "softmax backward p NULL");
    expect(nb_gemm(&ctx, 0, 0, 2, 3, 0, 1, x, 4, x, 4, 0, y, 4), NB_ERR_SHAPE, "K",
           "gemm K = 0");
    expect(nb_gemm(&ctx, 0, 1, 2, 3, 4, 1, x, 4, x, 3, 0, y, 3), NB_ERR_SHAPE,
           "leading dimensions", "gemm ldb too small for trans B");
    expect(nb_gemm(&ctx, 1, 0, 2, 3, 4, 1, x, 1, x, 3, 0, y, 3), NB_ERR_SHAPE,
           "leading dimensions", "gemm lda too small for trans A");
    expect(nb_gemm_ref(&ctx, 0, 0, 2, 3, 4, 1, x, 4, NULL, 3, 0, y, 3), NB_ERR_NULL, "B",
           "gemm_ref B NULL");

    /* A NULL context is allowed: the code alone is returned. */
    nbt_check(nb_rmsnorm_forward(NULL, y, 8, r, x, 8, g, 0, 8, 0, 1e-5f) == NB_ERR_SHAPE,
              "NULL ctx still reports the code");
    for (i = NB_OK; i <= NB_ERR_NOMEM; i++)
        nbt_check(strlen(nb_result_string((nb_result)i)) > 0, "every code has a string");
    nbt_check(strcmp(nb_result_string((nb_result)99), "unknown result code") == 0,
              "unknown code has a string");
    return nbt_finish();
}
