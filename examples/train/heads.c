/* heads.c: what each training step's attention did, per layer and head, and QK-Clip.

   The forward records per head the largest logit it passed to its softmax and the first key's
   probability (nb_stack_head_stats reads both from the cache, still holding the step's forward
   after the backward). Over ranks: the largest logit is a maximum (MPI_MAX), so every rank
   holds the same values and QK-Clip scales the same heads everywhere; the first-key mass is a
   mean over query rows, so each rank's mean is weighted by its share of the rows and summed.
   The trainer takes one forward per optimizer step (no gradient accumulation); with several,
   the maximum over them would go to QK-Clip, as the paper's S_max of the step. */
#include "train.h"

#include <math.h>

double heads_mean(const double* x, int n) {
    double s = 0;
    int i;
    for (i = 0; i < n; i++) s += x[i];
    return n > 0 ? s / n : NAN;
}

/* per-row means of this rank's rows into the means over every rank's rows: each weighted by its
   share of the global batch, then summed over the ranks */
static void rows_mean(model* m, double* x, int n) {
    const double share = (double)m->B / m->B_global;
    int i;
    for (i = 0; i < n; i++) x[i] *= share;
    dist_sum(x, n);
}

double heads_measure(model* m, int mass) {
    const int n = m->s.desc.n_layers * m->s.desc.n_heads;
    double top = -INFINITY;
    int i;
    if (nb_stack_head_stats(&m->s, m->cache, m->B, m->T, m->head_max, mass ? m->head_mass : NULL))
        return NAN; /* the cache holds this step's forward: not reached */
    dist_max(m->head_max, n);
    if (mass) rows_mean(m, m->head_mass, n);
    for (i = 0; i < n; i++) {
        if (isnan(m->head_max[i])) return NAN;
        if (m->head_max[i] > top) top = m->head_max[i];
    }
    return top;
}

int heads_gates(model* m) {
    if (!m->head_gate) return 0;
    if (nb_stack_gate_stats(&m->s, m->cache, m->B, m->T, m->head_gate))
        return fail("gate statistics: the cache does not hold this step's forward");
    rows_mean(m, m->head_gate, m->s.desc.n_layers * m->s.desc.n_heads);
    return 0;
}

int heads_sinks(model* m) {
    if (!m->head_sink) return 0;
    if (nb_stack_sink_mass(&m->s, m->cache, m->B, m->T, m->head_sink))
        return fail("sink statistics: the cache does not hold this step's forward");
    rows_mean(m, m->head_sink, m->s.desc.n_layers * m->s.desc.n_heads);
    return 0;
}

int heads_qk_clip(model* m, double tau, int* clipped) {
    /* after the optimizer step (and ZeRO's gather): every rank holds every parameter */
    if (nb_stack_qk_clip(&m->ctx, &m->s, m->p + m->off_stack, m->head_max, tau, clipped) != NB_OK)
        return fail("QK-Clip, step %d: %s", m->step + 1, m->ctx.err);
    if (!clipped || *clipped) m->w16_ok = 0;
    return 0;
}
