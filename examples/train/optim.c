/* optim.c: the learning-rate schedule, the global gradient norm (for clipping and the log) and
   AdamW over the part of the buffer this rank updates (all of it, or its ZeRO-1 shard). */
#include "train.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* linear warmup to lr, then cosine to min_lr_frac * lr at the last step */
double lr_at(const config* c, int step) {
    const double floor_lr = c->optim.lr * c->optim.min_lr_frac;
    double p;
    if (step < c->optim.warmup) return c->optim.lr * (step + 1) / c->optim.warmup;
    if (c->loop.steps <= c->optim.warmup + 1) return c->optim.lr;
    p = (double)(step - c->optim.warmup) / (double)(c->loop.steps - 1 - c->optim.warmup);
    if (p > 1) p = 1;
    return floor_lr + 0.5 * (c->optim.lr - floor_lr) * (1 + cos(3.141592653589793 * p));
}

/* sum x^2 in double: chunks of 64 Ki values on the threads, each chunk summed in 8 lanes
   (value i into lane i % 8), the lanes and then the chunks added in a fixed order, so the
   result depends on neither the thread count nor the vector width (and a shard's sum is the
   same on every rank that computes it) */
enum { SUMSQ_CHUNK = 1 << 16 };
static double sumsq_chunk(const nb_real* x, size_t n) {
    double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    size_t i, k;
    for (i = 0; i + 8 <= n; i += 8)
        for (k = 0; k < 8; k++) acc[k] += (double)x[i + k] * x[i + k];
    for (k = 0; i < n; i++, k++) acc[k] += (double)x[i] * x[i];
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}
static double sumsq(const model* m, const nb_real* x, size_t n) {
    enum { ROUND = 256 }; /* chunks summed per parallel round: 16 Mi values */
    const long long chunks = (long long)((n + SUMSQ_CHUNK - 1) / SUMSQ_CHUNK);
    double part[ROUND], s = 0;
    long long c0, c;
    (void)m;
    for (c0 = 0; c0 < chunks; c0 += ROUND) {
        const long long c1 = c0 + ROUND < chunks ? c0 + ROUND : chunks;
        TR_OMP(omp parallel for schedule(static) num_threads(nb_num_threads(&m->ctx)))
        for (c = c0; c < c1; c++) {
            const size_t lo = (size_t)c * SUMSQ_CHUNK;
            part[c - c0] = sumsq_chunk(x + lo, n - lo < SUMSQ_CHUNK ? n - lo : SUMSQ_CHUNK);
        }
        for (c = c0; c < c1; c++) s += part[c - c0];
    }
    return s;
}

/* One process: nothing changes the gradients after the backward, so each chunk of sumsq is
   summed as soon as the backward's finished ranges cover it (they arrive in descending offsets,
   one contiguous front: nb_ctx.grads_ready), where a large enough cache still holds the layer's
   gradients, rather than in a pass of its own over the whole buffer from memory. The chunks
   and their sums are sumsq's, so grad_norm's result has the same bits. Off with several ranks
   (the reduction comes after) and, safely, if a range ever arrived out of order. */
void gnorm_begin(model* m) {
    m->gn_next = -1;
    if (g_ranks > 1 || m->n_upd != m->n) return;
    if (!m->gn_part)
        m->gn_part = (double*)xcalloc((m->n + SUMSQ_CHUNK - 1) / SUMSQ_CHUNK, sizeof(double));
    m->gn_next = (long long)((m->n + SUMSQ_CHUNK - 1) / SUMSQ_CHUNK);
    m->gn_front = m->n;
}
void gnorm_ready(model* m, size_t off, size_t count) {
    double t0;
    long long c0, c;
    if (m->gn_next < 0 || count == 0) return;
    t0 = now_s();
    if (off + count != m->gn_front) { /* not the front: the pass in grad_norm instead */
        m->gn_next = -1;
        m->t_gnorm += now_s() - t0;
        return;
    }
    m->gn_front = off;
    c0 = (long long)((off + SUMSQ_CHUNK - 1) / SUMSQ_CHUNK); /* the chunks starting at >= off */
    TR_OMP(omp parallel for schedule(static) num_threads(nb_num_threads(&m->ctx)))
    for (c = c0; c < m->gn_next; c++) {
        const size_t lo = (size_t)c * SUMSQ_CHUNK;
        m->gn_part[c] = sumsq_chunk(m->g + lo, m->n - lo < SUMSQ_CHUNK ? m->n - lo : SUMSQ_CHUNK);
    }
    if (c0 < m->gn_next) m->gn_next = c0;
    m->t_gnorm += now_s() - t0;
}

/* sqrt(sum g^2) as a sum of per-shard partials in rank order, whether this rank holds every
   shard (plain data parallelism: it sums them itself) or one (ZeRO: the partials are shared).
   Same order both ways, so ZeRO-1 and plain data parallelism agree bitwise. gu: the reduced
   gradients of this rank's update range. */
double grad_norm(model* m, const nb_real* gu) {
    double* part;
    double total = 0;
    int r;
    if (m->gn_next == 0 && gu == m->g) { /* summed during the backward: sumsq's order */
        const long long chunks = (long long)((m->n + SUMSQ_CHUNK - 1) / SUMSQ_CHUNK);
        long long c;
        for (c = 0; c < chunks; c++) total += m->gn_part[c];
        m->gn_next = -1;
        return sqrt(total);
    }
    part = (double*)xcalloc((size_t)g_ranks, sizeof(double));
    for (r = 0; r < g_ranks; r++) {
        size_t lo, hi;
        dist_shard(m->dist, r, &lo, &hi);
        if (lo < m->upd_lo || hi > m->upd_lo + m->n_upd) continue; /* another rank's shard */
        part[r] = sumsq(m, gu + (lo - m->upd_lo), hi - lo);
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
        per_layer[l] = b > a ? sumsq(m, gu + (a - lo), b - a) : 0;
    }
    if (m->n_upd < m->n) dist_sum(per_layer, L);
    for (l = 0; l < L; l++) per_layer[l] = sqrt(per_layer[l]);
}

enum { OPT_CHUNK = 4096 }; /* values per task: 16 KiB of p, still in L1 for its bf16 copy */

void weights16_refresh(model* m, size_t lo, size_t hi) {
    const long long chunks = (long long)((hi - lo + OPT_CHUNK - 1) / OPT_CHUNK);
    long long c;
    TR_OMP(omp parallel for schedule(static) num_threads(nb_num_threads(&m->ctx)))
    for (c = 0; c < chunks; c++) {
        const size_t a = lo + (size_t)c * OPT_CHUNK, n = hi - a < OPT_CHUNK ? hi - a : OPT_CHUNK;
        nb_bf16_round(m->w16 + a, m->p + a, n);
    }
}

int block_matrix(nb_tensor_kind kind) {
    return kind == NB_TENSOR_QKV || kind == NB_TENSOR_ATTN_OUT || kind == NB_TENSOR_FF_IN ||
           kind == NB_TENSOR_FF_OUT || kind == NB_TENSOR_HC_FN;
}

/* The groups: 1 the blocks' matrices (block_matrix), 2 the blocks' other tensors (gains,
   biases, scales, the small mixing weights of the depth-aggregation rows), 0 the embedding
   (and its scale), the head, nGPT's sz and the stack-level tensors. One width rule at most
   sets their multipliers (cli.c refuses two). */
void optim_groups(model* m, const config* c) {
    int k, t;
    for (k = 0; k < 3; k++) m->lr_mult[k] = m->wd_mult[k] = m->eps_mult[k] = 1;
    memset(m->group, 0, m->n);
    if (c->model.residual.completep > 0) completep_rules(m, c);
    else if (c->model.mup.on) mup_rules(m, c);
    else return;
    for (t = 0; t < m->s.n_tensors; t++) {
        const nb_tensor_info* ti = &m->s.tensors[t];
        if (ti->layer < 0) continue;
        memset(m->group + m->off_stack + ti->offset, block_matrix(ti->kind) ? 1 : 2, ti->count);
    }
}

/* AdamW with decoupled weight decay on the update range: p -= lr_g (m_hat / (sqrt(v_hat) +
   eps_g) + wd_g p), lr_g, wd_g and eps_g the parameter's group's (optim_groups: lr, wd and
   eps times its multipliers, as torch's per-group AdamW), gradients scaled by gscale (clipping).
   One pass, vectorized: the group's lr and wd are selected, not looked up (a table lookup per
   value kept gcc from vectorizing, and the scalar divisions and square root made this pass
   ~6x slower), and the decay's update computed on every lane then selected (TR_SELECTS; without
   it gcc kept the loop scalar on AVX2 CPUs); every operation is the same IEEE one as before, so
   the result is bitwise the same. In BF16 the pass also writes the weights' bf16 copy that the
   next forward reads, a chunk at a time while the chunk is in cache (ZeRO: the other ranks'
   shards after the gather). */
TR_SELECTS void adamw(model* m, const config* c, const nb_real* gu, double lr, double gscale) {
    const long long n = (long long)m->n_upd;
    const double b1 = c->optim.beta1, b2 = c->optim.beta2, t = (double)++m->adam_t;
    const double c1 = 1 - pow(b1, t), c2 = 1 - pow(b2, t);
    const float b1f = (float)b1, b2f = (float)b2, gs = (float)gscale, c1f = (float)c1;
    const float c2f = (float)c2;
    float lrf[3], wdf[3], epsf[3];
    nb_real* TR_RESTRICT p = m->p + m->upd_lo;
    nb_real* TR_RESTRICT mo = m->m;
    nb_real* TR_RESTRICT vo = m->v;
    const unsigned char* decay = m->decay + m->upd_lo;
    const unsigned char* group = m->group + m->upd_lo;
    unsigned short* w16 = m->w16 ? m->w16 + m->upd_lo : NULL;
    const long long chunks = (n + OPT_CHUNK - 1) / OPT_CHUNK;
    long long ch;
    int k;
    for (k = 0; k < 3; k++) {
        lrf[k] = (float)(lr * m->lr_mult[k]);
        wdf[k] = (float)(lr * m->lr_mult[k] * (c->optim.wd * m->wd_mult[k]));
        epsf[k] = (float)(c->optim.adam_eps * m->eps_mult[k]);
    }
    {
        const float lr0 = lrf[0], lr1 = lrf[1], lr2 = lrf[2];
        const float wd0 = wdf[0], wd1 = wdf[1], wd2 = wdf[2];
        const float eps0 = epsf[0], eps1 = epsf[1], eps2 = epsf[2];
        TR_OMP(omp parallel for schedule(static) num_threads(nb_num_threads(&m->ctx)))
        for (ch = 0; ch < chunks; ch++) {
            const long long lo = ch * OPT_CHUNK, hi = n - lo < OPT_CHUNK ? n : lo + OPT_CHUNK;
            long long i;
            TR_OMP(omp simd)
            for (i = lo; i < hi; i++) {
                const float g = gu[i] * gs;
                const float mi = b1f * mo[i] + (1 - b1f) * g, vi = b2f * vo[i] + (1 - b2f) * g * g;
                const int gi = group[i];
                const float lr_i = gi == 0 ? lr0 : gi == 1 ? lr1 : lr2;
                const float wd_i = gi == 0 ? wd0 : gi == 1 ? wd1 : wd2;
                const float eps_i = gi == 0 ? eps0 : gi == 1 ? eps1 : eps2;
                float pi = p[i];
                pi = decay[i] ? pi - wd_i * pi : pi;
                mo[i] = mi;
                vo[i] = vi;
                p[i] = pi - lr_i * (mi / c1f) / (sqrtf(vi / c2f) + eps_i);
            }
            if (w16) nb_bf16_round(w16 + lo, p + lo, (size_t)(hi - lo));
        }
    }
    dist_params_gather(m->dist, m->p);
    if (m->w16) { /* ZeRO: the shards the other ranks updated */
        weights16_refresh(m, 0, m->upd_lo);
        weights16_refresh(m, m->upd_lo + m->n_upd, m->n);
        m->w16_ok = 1;
    }
}
