/* vembed.c: modded-nanogpt's value embeddings in the trainer (its train_gpt.py of mid-2025:
   GPT.value_embeds, nn.Embedding(vocab, H_kv d_k) tables, N(0, 1) as nn.Embedding's default;
   the library's residual.value_embeds mixes them). The trainer owns the N tables (in the flat
   buffer at off_ve, between the embedding and the stack: "transformer.value_embeds.<t>.weight",
   decayed as the embedding, the embedding's optimizer group), gathers each token's rows
   before the forward and scatter-adds the rows' gradients after the backward. */
#include "train.h"

#include <string.h>

/* rows of one table in a batch: B*T x W */
static size_t table_rows(const model* m) { return (size_t)m->B * m->T * m->ve_w; }

int vembed_setup(model* m) {
    m->ve_rows = (nb_real*)xcalloc((size_t)m->n_ve * table_rows(m), sizeof(nb_real));
    m->ve_grad = (nb_real*)xcalloc((size_t)m->n_ve * table_rows(m), sizeof(nb_real));
    if (nb_stack_set_value_embeds(&m->ctx, &m->s, m->ve_rows, m->ve_grad) != NB_OK)
        return fail("value embeddings: %s", m->ctx.err);
    return 0;
}

void vembed_init(model* m, unsigned long long seed) {
    int t;
    for (t = 0; t < m->n_ve; t++)
        nb_fill_normal(m->p + m->off_ve + (size_t)t * VOCAB * m->ve_w, (size_t)VOCAB * m->ve_w, 1, 0,
                       seed ^ (0x7E00000000000003ULL + (unsigned long long)t));
}

/* row r of table t's rows = table t at the token of row r */
void vembed_gather(model* m) {
    const long long bt = (long long)m->B * m->T;
    const int W = m->ve_w, T = m->T;
    long long r;
    int t;
    if (!m->n_ve) return;
    for (t = 0; t < m->n_ve; t++) {
        const nb_real* table = m->p + m->off_ve + (size_t)t * VOCAB * W;
        nb_real* rows = m->ve_rows + (size_t)t * table_rows(m);
        TR_OMP(omp parallel for schedule(static) num_threads(nb_num_threads(&m->ctx)))
        for (r = 0; r < bt; r++) {
            const int tk = m->tok[(r / T) * (T + 1) + r % T];
            memcpy(rows + (size_t)r * W, table + (size_t)tk * W, (size_t)W * sizeof(nb_real));
        }
    }
}

/* the tables' gradients (zeroed by the caller): serial scatter-add, a fixed order */
void vembed_scatter(model* m) {
    const long long bt = (long long)m->B * m->T;
    const int W = m->ve_w, T = m->T;
    long long r;
    int t, k;
    for (t = 0; t < m->n_ve; t++) {
        nb_real* g = m->g + m->off_ve + (size_t)t * VOCAB * W;
        const nb_real* dr = m->ve_grad + (size_t)t * table_rows(m);
        for (r = 0; r < bt; r++) {
            const int tk = m->tok[(r / T) * (T + 1) + r % T];
            for (k = 0; k < W; k++) g[(size_t)tk * W + k] += dr[(size_t)r * W + k];
        }
    }
}

int vembed_tensors(const model* m, ck_tensor* table, int n) {
    int t;
    for (t = 0; t < m->n_ve; t++, n++) {
        if (!table) continue;
        snprintf(table[n].name, sizeof table[n].name, "transformer.value_embeds.%d.weight", t);
        table[n].off = m->off_ve + (size_t)t * VOCAB * m->ve_w;
        table[n].rows = VOCAB;
        table[n].cols = m->ve_w;
    }
    return n;
}
