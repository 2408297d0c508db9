/* optim.c: the learning-rate schedule, the global gradient norm (for clipping and the log) and
   AdamW over the part of the buffer this rank updates (all of it, or its ZeRO-1 shard). */
#include "train.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* linear warmup to lr, then cosine to min_lr_frac * lr at the last step */
double lr_at(const config* c, int step) {
    const double floor_lr = c->lr * c->min_lr_frac;
    double p;
    if (step < c->warmup) return c->lr * (step + 1) / c->warmup;
    if (c->steps <= c->warmup + 1) return c->lr;
    p = (double)(step - c->warmup) / (double)(c->steps - 1 - c->warmup);
    if (p > 1) p = 1;
    return floor_lr + 0.5 * (c->lr - floor_lr) * (1 + cos(3.141592653589793 * p));
}

static double sumsq(const nb_real* x, size_t n) {
    double s = 0;
    size_t i;
    for (i = 0; i < n; i++) s += (double)x[i] * x[i];
    return s;
}

/* sqrt(sum g^2) as a sum of per-shard partials in rank order, whether this rank holds every
   shard (plain data parallelism: it sums them itself) or one (ZeRO: the partials are shared).
   Same order both ways, so ZeRO-1 and plain data parallelism agree bitwise. gu: the reduced
   gradients of this rank's update range. */
double grad_norm(model* m, const nb_real* gu) {
    double* part = (double*)xcalloc((size_t)g_ranks, sizeof(double));
    double total = 0;
    int r;
    for (r = 0; r < g_ranks; r++) {
        size_t lo, hi;
        dist_shard(m->dist, r, &lo, &hi);
        if (lo < m->upd_lo || hi > m->upd_lo + m->n_upd) continue; /* another rank's shard */
        part[r] = sumsq(gu + (lo - m->upd_lo), hi - lo);
    }
    if (m->n_upd < m->n) dist_sum(part, g_ranks);
    for (r = 0; r < g_ranks; r++) total += part[r];
    free(part);
    return sqrt(total);
}

/* ||gradient of block l|| for each layer (the papers' per-layer gradient norm) */
void layer_grad_norms(model* m, const nb_real* gu, double* per_layer) {
    const size_t lo = m->upd_lo, hi = m->upd_lo + m->n_upd;
    const int L = m->s.desc.n_layers;
    int l;
    for (l = 0; l < L; l++) {
        size_t a = m->off_stack + m->s.layers[l].param_offset, b = a + m->s.layers[l].n_params;
        if (a < lo) a = lo;
        if (b > hi) b = hi;
        per_layer[l] = b > a ? sumsq(gu + (a - lo), b - a) : 0;
    }
    if (m->n_upd < m->n) dist_sum(per_layer, L);
    for (l = 0; l < L; l++) per_layer[l] = sqrt(per_layer[l]);
}

/* AdamW with decoupled weight decay on the update range: p -= lr (m_hat / (sqrt(v_hat) + eps)
   + wd p), gradients scaled by gscale (clipping). */
void adamw(model* m, const config* c, const nb_real* gu, double lr, double gscale) {
    const long long n = (long long)m->n_upd;
    const double b1 = c->beta1, b2 = c->beta2, t = (double)++m->adam_t;
    const double c1 = 1 - pow(b1, t), c2 = 1 - pow(b2, t);
    const float lrf = (float)lr, wdf = (float)(lr * c->wd), b1f = (float)b1, b2f = (float)b2;
    const float gs = (float)gscale, c1f = (float)c1, c2f = (float)c2, eps = (float)c->adam_eps;
    nb_real* p = m->p + m->upd_lo;
    const unsigned char* decay = m->decay + m->upd_lo;
    long long i;
    TR_OMP(omp parallel for simd schedule(static) num_threads(nb_num_threads(&m->ctx)))
    for (i = 0; i < n; i++) {
        const float g = gu[i] * gs;
        float mi = b1f * m->m[i] + (1 - b1f) * g, vi = b2f * m->v[i] + (1 - b2f) * g * g;
        float pi = p[i];
        if (decay[i]) pi -= wdf * pi;
        m->m[i] = mi;
        m->v[i] = vi;
        p[i] = pi - lrf * (mi / c1f) / (sqrtf(vi / c2f) + eps);
    }
    dist_params_gather(m->dist, m->p);
}
