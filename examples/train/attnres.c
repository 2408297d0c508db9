/* attnres.c: Attention Residuals (nb_stack_desc.residual.attn_res) in the trainer's reports:
   the readers' depth weights, averaged over a logged step's tokens (every rank's), where they
   stand at the run's end (the summary line) and all of them (--diag's attn_res_weights.csv).
   The readers themselves are the library's. */
#include "train.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

/* the (2L+1) x (2L+1) weights of this step's forward (rows: readers; columns: x_0, p_0 ..) */
int attnres_record(model* m, history* h) {
    const int J = 2 * m->s.desc.n_layers + 1;
    const double share = (double)m->B / m->B_global;
    int i;
    if (!h->ar_w) h->ar_w = (double*)xcalloc((size_t)J * J, sizeof(double));
    if (nb_stack_attn_res_weights(&m->s, m->cache, m->B, m->T, h->ar_w))
        return fail("diagnostics: no Attention Residuals weights from the stack's cache");
    for (i = 0; i < J * J; i++) h->ar_w[i] *= share;
    dist_sum(h->ar_w, J * J);
    h->ar_logged = J;
    return 0;
}

/* The means over the readers j >= 1 (the final one included) of the weight on x_0, on the
   latest source p_{j-1} (the running partial, or the block just completed), and on the
   completed blocks between them. */
static void attnres_means(const history* h, double* x0, double* last, double* blocks) {
    const int J = h->ar_logged;
    int j, e, nb = 0;
    *x0 = *last = *blocks = 0;
    for (j = 1; j < J; j++) {
        *x0 += h->ar_w[(size_t)j * J];
        *last += h->ar_w[(size_t)j * J + j];
        for (e = 1; e < j; e++)
            if (h->ar_w[(size_t)j * J + e] > 0) { *blocks += h->ar_w[(size_t)j * J + e]; nb++; }
    }
    *x0 /= J - 1;
    *last /= J - 1;
    *blocks = nb ? *blocks / nb : 0;
}

void attnres_say(const history* h) {
    double x0, last, blocks;
    attnres_means(h, &x0, &last, &blocks);
    say("Attention Residuals: mean weight of a sublayer's input on x_0 %.4g, on the latest "
        "partial sum %.4g, on a completed block %.4g (last logged step; --diag: "
        "attn_res_weights.csv)\n", x0, last, blocks);
}

void attnres_json(const history* h, struct cJSON* o) {
    double x0, last, blocks;
    attnres_means(h, &x0, &last, &blocks);
    cJSON_AddNumberToObject(o, "attn_res_x0", x0);
    cJSON_AddNumberToObject(o, "attn_res_latest", last);
    cJSON_AddNumberToObject(o, "attn_res_block", blocks);
}

/* rows: the reader before sublayer j (attn.l, ffn.l, final); columns: its weight on x_0 and
   on p_0 .. p_{2L-1} (p_e: the partial sum through sublayer e; empty where not read) */
int attnres_csv(const history* h, const char* dir) {
    const int J = h->ar_logged, L = (J - 1) / 2;
    char path[1024];
    FILE* f = open_in(dir, "attn_res_weights.csv", path, sizeof path);
    int j, e;
    if (!f) return 1;
    fprintf(f, "reader,x0");
    for (e = 0; e < 2 * L; e++) fprintf(f, ",p%d", e);
    fprintf(f, "\n");
    for (j = 0; j < J; j++) {
        if (j == 2 * L) fprintf(f, "final");
        else fprintf(f, "%s.%d", j % 2 ? "ffn" : "attn", j / 2);
        for (e = 0; e < J; e++) {
            const double w = h->ar_w[(size_t)j * J + e];
            if (w > 0 || e == 0) fprintf(f, ",%.6g", w);
            else fprintf(f, ",");
        }
        fprintf(f, "\n");
    }
    return close_out(f);
}
