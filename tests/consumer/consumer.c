/* Consumes an installed normblocks: one RMSNorm forward on a 2x4 input. */
#define NORMBLOCKS_IMPLEMENTATION
#include "normblocks.h"

#include <math.h>
#include <stdio.h>

int main(void)
{
    const nb_real x[2 * 4] = {1, 2, 3, 4, -1, 0.5f, 2, -3};
    nb_real y[2 * 4];
    nb_real rstd[2];
    int i;
    nb_result r = nb_rmsnorm_forward(NULL, y, 4, rstd, x, 4, NULL, 2, 4, 0, (nb_real)1e-5);
    if (r != NB_OK) {
        fprintf(stderr, "consumer: nb_rmsnorm_forward failed (%d)\n", (int)r);
        return 1;
    }
    for (i = 0; i < 2 * 4; ++i) {
        if (!isfinite((double)y[i])) {
            fprintf(stderr, "consumer: y[%d] is not finite\n", i);
            return 1;
        }
    }
    for (i = 0; i < 2; ++i) {
        if (!isfinite((double)rstd[i]) || !(rstd[i] > 0)) {
            fprintf(stderr, "consumer: rstd[%d] is bad\n", i);
            return 1;
        }
    }
    printf("consumer: ok (y[0]=%g)\n", (double)y[0]);
    return 0;
}
