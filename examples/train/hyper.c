/* hyper.c: hyper-connections (mHC, HC) in the trainer's reports: the architecture line, the
   composite Amax gains of every logged step (what the mHC paper's Fig. 3 and 7 plot; hyper.svg
   and hyper_gains.csv draw them, plot.c), and the run's last and peak gains. The streams
   themselves are the library's (nb_stack_desc.hyper). */
#include "train.h"

#include <math.h>
#include <string.h>

/* the architecture line's hyper-connections part */
void hyper_say(const model* m) {
    const nb_stack_desc* d = &m->s.desc;
    say("hyper-connections: %s, %d streams, %s maps", d->hyper.kind == NB_HYPER_MHC ? "mHC"
        : d->hyper.kind == NB_HYPER_HC ? "HC" : d->hyper.kind == NB_HYPER_MHC_LITE
        ? "mHC-lite (the n! permutations' mixture)" : "identity HC", m->s.streams,
        d->hyper.static_maps ? "static" : "dynamic (per token)");
    if (d->hyper.kind == NB_HYPER_MHC) say(", %d Sinkhorn iterations", d->hyper.sinkhorn);
    say("\n");
}

/* the larger, NaN if either is (a non-finite map is news, not a value to skip) */
static double max_nan(double a, double b) { return isnan(a) || isnan(b) ? NAN : a > b ? a : b; }

/* Hyper-connections: the composite Amax gains of this step's forward per sublayer (means over
   every rank's tokens), the largest of them as the run's last and peak; with stored, also as
   the last --diag snapshot's. */
int hyper_record_gains(model* m, history* h, int stored) {
    const int Q = 2 * m->s.desc.n_layers;
    const double share = (double)m->B / m->B_global;
    double g[2][2 * MAX_LAYERS], top[2] = {0, 0};
    int q, k;
    if (nb_stack_hyper_gains(&m->s, m->cache, m->B, m->T, g[0], g[1], NULL))
        return fail("diagnostics: no hyper-connection gains from the stack's cache");
    for (k = 0; k < 2; k++) {
        for (q = 0; q < Q; q++) g[k][q] *= share;
        dist_sum(g[k], Q);
        for (q = 0; q < Q; q++) top[k] = max_nan(top[k], g[k][q]);
        if (stored) memcpy(h->hc_gain + ((size_t)(h->n_diag - 1) * 2 + k) * Q, g[k], sizeof(double) * Q);
    }
    h->hc_fwd = top[0];
    h->hc_bwd = top[1];
    h->hc_fwd_peak = h->hc_logged ? max_nan(h->hc_fwd_peak, top[0]) : top[0];
    h->hc_bwd_peak = h->hc_logged ? max_nan(h->hc_bwd_peak, top[1]) : top[1];
    h->hc_logged++;
    return 0;
}

/* the run's end: what mHC's Fig. 3 compares, near 1 for mHC, free to grow for HC */
void hyper_say_gains(const history* h) {
    say("hyper-connections: composite Amax gain, the largest over the sublayers: forward %.4g "
        "backward %.4g at the last logged step; peak over the run's logged steps: forward %.4g "
        "backward %.4g\n", h->hc_fwd, h->hc_bwd, h->hc_fwd_peak, h->hc_bwd_peak);
}
