/* norm_demo: RMSNorm and LayerNorm forward + backward on a random batch, with a finite-difference
   check of the gradients printed next to the analytic ones. The smallest complete use of the
   primitives; the trainer example will replace it as the main example.
   Build and run:  cmake -S . -B build && cmake --build build && ./build/norm_demo */
#define NORMBLOCKS_IMPLEMENTATION
#include "normblocks.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

enum { ROWS = 64, WIDTH = 128 };

/* loss = sum(y * dy): its gradient w.r.t. y is dy */
static double loss(int layer, nb_ctx* ctx, const float* x, const float* gain, const float* dy) {
    static float y[ROWS * WIDTH], a[ROWS], b[ROWS];
    double s = 0;
    int i;
    if (layer) nb_layernorm_forward(ctx, y, WIDTH, a, b, x, WIDTH, gain, NULL, ROWS, WIDTH, 0, 1e-5f);
    else nb_rmsnorm_forward(ctx, y, WIDTH, a, x, WIDTH, gain, ROWS, WIDTH, 0, 1e-5f);
    for (i = 0; i < ROWS * WIDTH; i++) s += (double)y[i] * dy[i];
    return s;
}

int main(void) {
    static float x[ROWS * WIDTH], dy[ROWS * WIDTH], dx[ROWS * WIDTH], y[ROWS * WIDTH];
    float gain[WIDTH], dgain[WIDTH], mean[ROWS], rstd[ROWS], *scratch;
    nb_ctx ctx = {0};
    int layer, i, bad = 0;
    srand(1);
    for (i = 0; i < ROWS * WIDTH; i++) {
        x[i] = (float)rand() / (float)RAND_MAX * 4 - 2;
        dy[i] = (float)rand() / (float)RAND_MAX - 0.5f;
    }
    for (i = 0; i < WIDTH; i++) gain[i] = 0.5f + (float)rand() / (float)RAND_MAX;
    scratch = (float*)malloc(nb_norm_scratch_size(&ctx, WIDTH, 0) * sizeof(float));
    printf("normblocks %s, %d OpenMP threads, rows %d x width %d\n", NB_VERSION_STRING,
           nb_num_threads(&ctx), ROWS, WIDTH);
    for (layer = 0; layer < 2; layer++) {
        const int probe[3] = {0, 777, ROWS * WIDTH - 1};
        nb_result rc;
        for (i = 0; i < WIDTH; i++) dgain[i] = 0;
        if (layer) {
            nb_layernorm_forward(&ctx, y, WIDTH, mean, rstd, x, WIDTH, gain, NULL, ROWS, WIDTH, 0, 1e-5f);
            rc = nb_layernorm_backward(&ctx, dx, WIDTH, dgain, NULL, dy, WIDTH, x, WIDTH, mean,
                                       rstd, gain, ROWS, WIDTH, 0, 0, scratch);
        } else {
            nb_rmsnorm_forward(&ctx, y, WIDTH, rstd, x, WIDTH, gain, ROWS, WIDTH, 0, 1e-5f);
            rc = nb_rmsnorm_backward(&ctx, dx, WIDTH, dgain, dy, WIDTH, x, WIDTH, rstd, gain, ROWS,
                                     WIDTH, 0, 0, scratch);
        }
        if (rc != NB_OK) { fprintf(stderr, "backward failed: %s\n", ctx.err); return 1; }
        printf("%s\n", layer ? "LayerNorm" : "RMSNorm");
        for (i = 0; i < 3; i++) {
            const int k = probe[i];
            const float keep = x[k], h = 1e-2f;
            double lp, lm, fd;
            x[k] = keep + h; lp = loss(layer, &ctx, x, gain, dy);
            x[k] = keep - h; lm = loss(layer, &ctx, x, gain, dy);
            x[k] = keep;
            fd = (lp - lm) / (2 * h);
            printf("  dx[%5d]   analytic % .6f   finite difference % .6f\n", k, dx[k], fd);
            bad += fabs(fd - dx[k]) > 1e-2 * (1 + fabs(fd));
        }
        {
            const float keep = gain[3], h = 1e-2f;
            double lp, lm, fd;
            gain[3] = keep + h; lp = loss(layer, &ctx, x, gain, dy);
            gain[3] = keep - h; lm = loss(layer, &ctx, x, gain, dy);
            gain[3] = keep;
            fd = (lp - lm) / (2 * h);
            printf("  dgain[3]   analytic % .6f   finite difference % .6f\n", dgain[3], fd);
            bad += fabs(fd - dgain[3]) > 1e-2 * (1 + fabs(fd));
        }
    }
    free(scratch);
    printf(bad ? "gradient check FAILED\n" : "gradient check ok (float32, step 1e-2)\n");
    return bad != 0;
}
