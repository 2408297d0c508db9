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

/* the line names only what the run has (the skips, the re-injection or both) */
void unet_say(const history* h) {
    say("U-Net:");
    if (!isnan(h->unet_mean[0])) say(" mean skip weight %.4g", h->unet_mean[0]);
    if (!isnan(h->unet_mean[1]))
        say("%s mean lambda_0 (the layer's input) %.4g, lambda_1 (x_0) %.4g",
            isnan(h->unet_mean[0]) ? "" : ",", h->unet_mean[1], h->unet_mean[2]);
    say(" (at the end)\n");
}

void unet_json(const history* h, struct cJSON* o) {
    static const char* const keys[3] = {"unet_skip_weight", "unet_lambda0", "unet_lambda1"};
    int k;
    for (k = 0; k < 3; k++)
        if (!isnan(h->unet_mean[k])) cJSON_AddNumberToObject(o, keys[k], h->unet_mean[k]);
}
