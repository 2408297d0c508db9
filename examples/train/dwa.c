/* dwa.c: DenseFormer's depth-weighted average (nb_stack_desc.residual.dwa) in the trainer's
   reports: where the learned weights a_l stand at the end of the run (the summary line) and all
   of them (--diag's dwa_weights.csv). The average itself is the library's. */
#include "train.h"

#include <string.h>

/* layer l's weights in the parameter buffer (its "dwa.weight" tensor) */
static const nb_real* dwa_weights(const model* m, int l, int* count) {
    int t;
    for (t = 0; t < m->s.n_tensors; t++) {
        const nb_tensor_info* ti = &m->s.tensors[t];
        if (ti->kind == NB_TENSOR_DWA && ti->layer == l) {
            *count = (int)ti->count;
            return m->p + m->off_stack + ti->offset;
        }
    }
    *count = 0;
    return NULL;
}

/* the means over the averaging layers of a_l's weight on the layer's own output h_{l+1}, on
   x_0 (the layers whose average reaches it) and on the other outputs */
void dwa_record(const model* m, history* h) {
    const int L = m->s.desc.n_layers, k = m->s.desc.residual.dwa_dilation;
    double self = 0, x0 = 0, other = 0;
    int l, n, n_self = 0, n_x0 = 0, n_other = 0, i;
    for (l = 0; l < L; l++) {
        const nb_real* a = dwa_weights(m, l, &n);
        if (!a) continue; /* off the period: the layer passes its output on */
        self += a[n - 1];
        n_self++;
        for (i = 0; i < n - 1; i++) {
            if ((l + 1) % k == 0 && i == 0) { x0 += a[0]; n_x0++; }
            else { other += a[i]; n_other++; }
        }
    }
    h->dwa = 1;
    h->dwa_self = self / n_self;
    h->dwa_x0 = n_x0 ? x0 / n_x0 : 0;
    h->dwa_other = n_other ? other / n_other : 0;
}

void dwa_say(const history* h) {
    say("DenseFormer: mean weight of a layer's average on its own output %.4g, on x_0 %.4g, on "
        "the earlier outputs %.4g (at the end; --diag: dwa_weights.csv)\n", h->dwa_self, h->dwa_x0,
        h->dwa_other);
}

/* rows: layer l, its weight on h_0 .. h_L (empty where its average does not reach h_j, all
   empty off the period) */
int dwa_csv(const model* m, const char* dir) {
    const int L = m->s.desc.n_layers, k = m->s.desc.residual.dwa_dilation;
    char path[1024];
    FILE* f = open_in(dir, "dwa_weights.csv", path, sizeof path);
    int l, j, n;
    if (!f) return 1;
    fprintf(f, "layer");
    for (j = 0; j <= L; j++) fprintf(f, ",h%d", j);
    fprintf(f, "\n");
    for (l = 0; l < L; l++) {
        const nb_real* a = dwa_weights(m, l, &n);
        fprintf(f, "%d", l);
        for (j = 0; j <= L; j++) {
            if (a && j <= l + 1 && j % k == (l + 1) % k) fprintf(f, ",%.6g", (double)a[j / k]);
            else fprintf(f, ",");
        }
        fprintf(f, "\n");
    }
    return close_out(f);
}
