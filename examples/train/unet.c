/* unet.c: modded-nanogpt's U-Net skips and x_0 re-injection (nb_stack_desc.residual.unet_skips,
   reinject_x0) in the trainer's reports: where their learned scalars stand at the end of the
   run (the summary line, --summary's keys). The skips themselves are the library's. */
#include "train.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <string.h>

/* the run's end: the means over the layers of the skip weights and of lambda_0, lambda_1 */
void unet_record(const model* m, history* h) {
    double sum[3] = {0, 0, 0};
    int n[3] = {0, 0, 0}, t, k;
    for (t = 0; t < m->s.n_tensors; t++) {
        const nb_tensor_info* ti = &m->s.tensors[t];
        const nb_real* x = m->p + m->off_stack + ti->offset;
        if (ti->kind == NB_TENSOR_SKIP_WEIGHT) { sum[0] += x[0]; n[0]++; }
        if (ti->kind == NB_TENSOR_X0_LAMBDAS)
            for (k = 0; k < 2; k++) { sum[1 + k] += x[k]; n[1 + k]++; }
    }
    h->unet = 1;
    for (k = 0; k < 3; k++) h->unet_mean[k] = n[k] ? sum[k] / n[k] : NAN;
}

void unet_say(const history* h) {
    say("U-Net: mean skip weight %.4g, mean lambda_0 (the layer's input) %.4g, lambda_1 (x_0) "
        "%.4g (at the end)\n", h->unet_mean[0], h->unet_mean[1], h->unet_mean[2]);
}

void unet_json(const history* h, struct cJSON* o) {
    cJSON_AddNumberToObject(o, "unet_skip_weight", h->unet_mean[0]);
    cJSON_AddNumberToObject(o, "unet_lambda0", h->unet_mean[1]);
    cJSON_AddNumberToObject(o, "unet_lambda1", h->unet_mean[2]);
}
