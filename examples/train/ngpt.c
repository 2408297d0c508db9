/* ngpt.c: nGPT (NVIDIA/ngpt, arXiv 2410.01131) around the stack: the preset test, the flags
   its model refuses, its optimizer defaults, the unit rows of the embedding and head at init and
   after every step (with the stack's matrices: nb_stack_normalize), the logit scale sz, and
   what the run says about it. The stack's own nGPT parts (L2 norms, the INTERP step, s_qk,
   s_uv) are the library's preset. */
#include "train.h"

#include <math.h>
#include <string.h>

int is_ngpt(const config* c) {
    nb_ctx ctx;
    nb_stack_desc d;
    memset(&ctx, 0, sizeof ctx);
    return !c->model.schedule[0] && nb_preset_from_name(&ctx, &d, c->model.preset) == NB_OK &&
           d.preset == NB_PRESET_NGPT;
}

/* Flags that make no sense with nGPT's model (the library refuses some too, by field names) */
int ngpt_refusals(const config* c) {
    if (c->model.residual.completep > 0)
        return fail("--completep with ngpt: nGPT's sublayers step from the residual toward the "
                    "branch by |a| (the INTERP branch scale), which takes no branch multiplier; "
                    "its own rule keeps every vector unit");
    if (c->model.hyper.kind > NB_HYPER_NONE)
        return fail("--hyper with ngpt: nGPT's residual is the normalized step L2(r + |a| (f - r)), "
                    "not a sum that streams of hyper-connections can carry");
    if (strcmp(c->model.norm.kind, "rms") && strcmp(c->model.norm.kind, "l2"))
        return fail("--norm %s with ngpt: nGPT's norms are L2 (its justnorm), on the hypersphere "
                    "its normalized matrices, embedding and head keep", c->model.norm.kind);
    if (c->model.norm.embed == 1)
        return fail("--embed-norm on with ngpt: the embedding's rows are unit (normalized at init "
                    "and after every step): an L2 norm of them changes nothing");
    if (c->model.norm.final == 1)
        return fail("--final-norm on with ngpt: the last layer outputs unit vectors (its post "
                    "norm): a final L2 norm changes nothing");
    if (c->model.norm.embed_scale > EMBED_OFF) /* learnable or constant alike */
        return fail("--embed-scale %s with ngpt: the embedding's rows are unit, as nGPT keeps "
                    "them; its first sublayer sees them through L2 norms, so a scale does nothing",
                    c->model.norm.embed_scale == EMBED_LEARN ? "learn" : "sqrt-d");
    if (c->model.residual.branch_scale)
        return fail("--branch-scale with ngpt: nGPT's sublayers step toward their branches by its "
                    "eigen learning rates (attn_alpha, mlp_alpha), which another scale would replace");
    if (c->model.init[0])
        return fail("--init %s with ngpt: nGPT's matrices, embedding and head are normalized along "
                    "d at init and after every step, so a scheme's standard deviations do nothing "
                    "(its init is its code's, the library's NB_INIT_NGPT)", c->model.init);
    return 0;
}

/* The rows of x (rows x cols) scaled to unit L2 norm, as the library's nb_stack_normalize
   scales its matrices (sums of squares in double; float rows x (float)(1 / sqrt(sum))): every
   row checked before any is written. 1: a row of zero or non-finite norm (x unchanged). */
static int unit_rows(const model* m, nb_real* x, int rows, int cols) {
    const int nt = nb_num_threads(&m->ctx);
    int bad = 0, pass, r;
    for (pass = 0; pass < 2 && !bad; pass++) {
        TR_OMP(omp parallel for schedule(static) num_threads(nt) reduction(|:bad))
        for (r = 0; r < rows; r++) {
            nb_real* row = x + (size_t)r * cols;
            double ss = 0;
            int k;
            for (k = 0; k < cols; k++) ss += (double)row[k] * row[k];
            if (!(ss > 0) || !isfinite(ss)) { bad = 1; continue; }
            if (pass) {
                const nb_real f = (nb_real)(1 / sqrt(ss));
                for (k = 0; k < cols; k++) row[k] *= f;
            }
        }
    }
    return bad;
}

int ngpt_normalize(model* m) {
    static const char* const names[2] = {"transformer.wte.weight", "lm_head.weight"};
    int k;
    if (nb_stack_normalize(&m->ctx, &m->s, m->p + m->off_stack) != NB_OK)
        return fail("nGPT's normalization: %s", m->ctx.err);
    for (k = 0; k < 2; k++)
        if (unit_rows(m, m->p + (k ? m->off_head : 0), VOCAB, m->d))
            return fail("nGPT's normalization: %s has a row of zero or non-finite norm", names[k]);
    m->w16_ok = 0;
    return 0;
}

/* nGPT's model and optimizer in force (ngpt_init_io, ngpt_optim_defaults), and which
   optimizer flags were given rather than its train.py's */
void ngpt_say(const config* c, const model* m) {
    static const char* const flags[] = {"--wd", "--warmup", "--min-lr", "--beta1", "--beta2",
                                        "--adam-eps"}; /* GIVEN_WD, ... in order */
    int k, n = 0;
    say("nGPT: logits x sz sqrt(d) (sz learnable, one per byte, stored at 1/sqrt(d) = %g); the "
        "embedding's and head's rows and the stack's matrices along d (rows of att_proj, ff_proj, "
        "columns of attn_out, ff_out) unit at init and after every step; attn_alpha, mlp_alpha, "
        "sqk stored at 1/sqrt(d), suv at 1 (a starts at %g); its train.py's optimizer where not "
        "given: weight decay %g, warmup %d, cosine to %g x lr, AdamW (%g, %g) eps %g; given: ",
        1 / sqrt((double)m->d), m->s.desc.residual.interp_init, c->optim.wd, c->optim.warmup, c->optim.min_lr_frac,
        c->optim.beta1, c->optim.beta2, c->optim.adam_eps);
    for (k = 0; k < 6; k++)
        if (c->optim.given & (1u << k)) say("%s%s", n++ ? ", " : "", flags[k]);
    say("%s\n", n ? "" : "none");
}

/* nGPT's train.py for use_nGPT = 1: weight_decay 0, warmup_iters 0, min_lr 0; AdamW betas
   (0.9, 0.95) and torch's eps 1e-8 (the trainer's defaults too); grad_clip 1 (--clip's). The
   settings c->optim.given leaves open. */
void ngpt_optim_defaults(config* c) {
    if (!(c->optim.given & GIVEN_WD)) c->optim.wd = 0;
    if (!(c->optim.given & GIVEN_WARMUP)) c->optim.warmup = 0;
    if (!(c->optim.given & GIVEN_MIN_LR)) c->optim.min_lr_frac = 0;
    if (!(c->optim.given & GIVEN_BETA1)) c->optim.beta1 = 0.9;
    if (!(c->optim.given & GIVEN_BETA2)) c->optim.beta2 = 0.95;
    if (!(c->optim.given & GIVEN_ADAM_EPS)) c->optim.adam_eps = 1e-8;
}

/* nGPT's embedding, head and logit scale at init (its code): the rows unit (drawn N(0, 1/d)
   untruncated by model_init), sz stored at its init_scaling 1/sqrt(d), used times sqrt(d) (its
   sz_init_value / sz_init_scaling) */
int ngpt_init_io(model* m) {
    size_t i;
    for (i = m->off_sz; i < m->n; i++) m->p[i] = (nb_real)(1 / sqrt((double)m->d));
    if (unit_rows(m, m->p, VOCAB, m->d) || unit_rows(m, m->p + m->off_head, VOCAB, m->d))
        return fail("init: an embedding or head row of zero norm");
    return 0;
}

/* the logits' scales sz sqrt(d), one per byte */
void ngpt_logit_scales(const model* m, nb_real sz[VOCAB]) {
    const double sqrt_d = sqrt((double)m->d);
    int k;
    for (k = 0; k < VOCAB; k++) sz[k] = (nb_real)(m->p[m->off_sz + k] * sqrt_d);
}

/* sz's gradient from the rows' terms (m->sz_terms, bt rows): sqrt(d) inv x their sum over the
   rows, summed serially (bitwise reproducible) */
void ngpt_sz_grad(model* m, long long bt, double inv) {
    const double sqrt_d = sqrt((double)m->d);
    double acc[VOCAB];
    long long r;
    int k;
    memset(acc, 0, sizeof acc);
    for (r = 0; r < bt; r++)
        for (k = 0; k < VOCAB; k++) acc[k] += m->sz_terms[r * VOCAB + k];
    for (k = 0; k < VOCAB; k++) m->g[m->off_sz + k] = (nb_real)(acc[k] * inv * sqrt_d);
}
