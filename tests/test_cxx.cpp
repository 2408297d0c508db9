// The header compiles as C++ (with the implementation) and works: a small RMSNorm round trip.
#define NORMBLOCKS_IMPLEMENTATION
#include "normblocks.h"
#include "nbtest.h"
#include <vector>

int main() {
    const int rows = 3, width = 8;
    std::vector<nb_real> x(rows * width), y(rows * width), rstd(rows), dx(rows * width),
        dy(rows * width, 1), gain(width, 2), dgain(width, 0);
    nb_ctx ctx = nb_ctx();
    ctx.num_threads = 2;
    std::vector<nb_real> scratch(nb_norm_scratch_size(&ctx, width, 0));
    for (int i = 0; i < rows * width; i++) x[i] = (nb_real)(i % 5) - 2;
    nbt_check(nb_rmsnorm_forward(&ctx, y.data(), width, rstd.data(), x.data(), width, gain.data(),
                                 rows, width, 0, 1e-5f) == NB_OK, "C++: forward");
    // every output row has RMS = gain = 2
    for (int r = 0; r < rows; r++) {
        double ss = 0;
        for (int i = 0; i < width; i++) ss += (double)y[r * width + i] * y[r * width + i];
        nbt_check(fabs(sqrt(ss / width) - 2) < 1e-4, "C++: output RMS equals the gain");
    }
    nbt_check(nb_rmsnorm_backward(&ctx, dx.data(), width, dgain.data(), dy.data(), width, x.data(),
                                  width, rstd.data(), gain.data(), rows, width, 0, 0,
                                  scratch.data()) == NB_OK, "C++: backward");
    // the norm's output does not change along x, so x . dx = 0 per row (up to eps)
    for (int r = 0; r < rows; r++) {
        double d = 0;
        for (int i = 0; i < width; i++) d += (double)x[r * width + i] * dx[r * width + i];
        nbt_check(fabs(d) < 1e-4, "C++: x . dx = 0");
    }
    nbt_check(nb_rmsnorm_forward(&ctx, y.data(), width, rstd.data(), x.data(), width, NULL, rows,
                                 width, 0, 0) == NB_ERR_VALUE, "C++: eps = 0 rejected");
    return nbt_finish();
}
