/* completep.c: CompleteP (Cerebras, arXiv 2505.01618; its code, EleutherAI's nanoGPT-mup
   branch completep) in the trainer: the width and depth ratios, the per-group learning rates,
   weight decay and AdamW eps (completep_rules), the init of the stack by width, and what the run
   says about them. The library's part is the branch multiplier (nb_stack_desc.residual.
   depth_alpha, set from --completep by make_desc). */
#include "train.h"

#include <math.h>
#include <string.h>

void completep_ratios(const model* m, double* m_d, double* m_L) {
    const config* c = m->cfg;
    *m_d = *m_L = 1;
    if (!(c->model.residual.completep > 0)) return;
    *m_d = width_mult(c);
    *m_L = (double)m->s.desc.n_layers / (c->model.residual.depth_base ? c->model.residual.depth_base : 1);
}

/* CompleteP's per-group rules, from its code (EleutherAI/nanoGPT-mup, branch completep,
   model.py configure_optimizers; the code wins over the paper's Table 1), eta, lambda, eps the
   run's --lr, --wd, --adam-eps, over optim_groups' groups:
     1  the blocks' matrices: lr eta m_d^-1 m_L^(alpha-1), weight decay lambda m_d
     2  the blocks' other tensors (norm gains, biases, scales: the table's no_decay): lr eta
        m_L^(alpha-1), no weight decay (lambda with --wd-norms on)
     0  the embedding (and its scale), the head and the stack-level tensors: lr eta, weight
        decay lambda where they decay
   and one AdamW eps for every parameter, eps m_d^-1 m_L^-alpha (the paper scales the blocks'
   only). */
void completep_rules(model* m, const config* c) {
    const double alpha = c->model.residual.completep;
    double m_d, m_L;
    int k;
    completep_ratios(m, &m_d, &m_L);
    m->lr_mult[1] = pow(m_L, alpha - 1) / m_d;
    m->wd_mult[1] = m_d;
    m->lr_mult[2] = pow(m_L, alpha - 1);
    for (k = 0; k < 3; k++) m->eps_mult[k] = 1 / (m_d * pow(m_L, alpha));
}

/* CompleteP's init of the stack (its code, nanoGPT-mup branch completep): every matrix of the
   blocks N(0, sigma^2 / m_d), sigma the base std of the run's scheme at the base width (its
   code's fixed init_std; width.c), with no depth factor (the code dropped the 1/sqrt(2L) of
   c_proj its muP branch had). The stack is drawn by the scheme's
   depth-free form at sigma / sqrt(m_d): normal for depth_scaled and megatron, mixln (untruncated
   0.02) for mixln_scaled, gpt2 and torchtitan, normal at Mitchell's 1/sqrt(d) for mitchell; gains, biases
   and scales as the scheme's; the blocks' hyper-connection projections times 1/sqrt(m_d).
   DeepNorm's xavier init has no base std: refused. Fills m->cp_sigma, m->cp_init. */
int completep_init(model* m, const config* c) {
    const nb_init_scheme sc = m->init == NB_INIT_DEFAULT ? NB_INIT_NORMAL : m->init;
    const int untruncated = sc == NB_INIT_MIXLN || sc == NB_INIT_MIXLN_SCALED || sc == NB_INIT_GPT2 ||
                            sc == NB_INIT_TORCHTITAN;
    double m_d, m_L, e, h, k;
    size_t i;
    int t;
    if (sc == NB_INIT_DEEPNORM)
        return fail("--completep: the deepnorm init (xavier with DeepNet's depth gains) has no base "
                    "std to scale by width and depth; pass --init normal (or another scheme)");
    completep_ratios(m, &m_d, &m_L);
    m->cp_init = untruncated ? NB_INIT_MIXLN : NB_INIT_NORMAL;
    if (sc == NB_INIT_MITCHELL) m->cp_sigma = 1 / sqrt((double)m->d);
    else { /* the scheme's base std: normal's embedding std, mixln's head std */
        nb_init_io_std(&m->s, m->cp_init, m->init_std0, &e, &h);
        m->cp_sigma = untruncated ? h : e;
    }
    m->cp_sigma *= width_base_stds(sc, m->init_std0, m_d).hidden;
    if (nb_stack_init_params(&m->ctx, &m->s, m->p + m->off_stack, m->cp_init,
                             m->cp_sigma / sqrt(m_d), c->loop.seed) != NB_OK)
        return fail("init: %s", m->ctx.err);
    k = 1 / sqrt(m_d);
    for (t = 0; t < m->s.n_tensors; t++) {
        const nb_tensor_info* ti = &m->s.tensors[t];
        nb_real* x = m->p + m->off_stack + ti->offset;
        if (ti->kind != NB_TENSOR_HC_FN || ti->layer < 0 || k == 1) continue;
        for (i = 0; i < ti->count; i++) x[i] = (nb_real)(x[i] * k);
    }
    return 0;
}

/* what completep_init did, after the init line's scheme (f: the depth factor the scheme's
   own init would have applied, or NULL) */
void completep_say_init(const model* m, const char* f) {
    double m_d, m_L;
    completep_ratios(m, &m_d, &m_L);
    say("; CompleteP: the blocks' matrices %s std %g = sigma %g (at d_base) / sqrt(m_d %g), no depth factor%s%s%s",
        init_scheme_name(m->cp_init), m->cp_sigma / sqrt(m_d), m->cp_sigma, m_d,
        f ? " (not " : "", f ? f : "", f ? ")" : "");
    if (m->s.desc.hyper.kind > NB_HYPER_NONE) say(", hyper-connection projections the library's / sqrt(m_d)");
    say("; embedding and head as %s at d_base", init_scheme_name(m->init));
}

/* CompleteP's rules in force (cli.c's --completep, completep_rules above) */
void completep_say(const config* c, const model* m) {
    double m_d, m_L;
    completep_ratios(m, &m_d, &m_L);
    say("CompleteP: alpha %g, m_L %g (L %d / L_base %d), m_d %g (d %d / d_base %d): branches x %g "
        "(m_L^-alpha); lr x %g on the blocks' matrices (m_d^-1 m_L^(alpha-1)), x %g on their "
        "gains, biases and scales (m_L^(alpha-1)), x 1 on embedding, head, final norm; weight decay "
        "x %g on the blocks' matrices (m_d); AdamW eps %g (%g x m_d^-1 m_L^-alpha, every parameter); "
        "logits x %g (1/m_d); attention 1/sqrt(d_h), not muP's 1/d_h\n",
        c->model.residual.completep, m_L, m->s.desc.n_layers, c->model.residual.depth_base ? c->model.residual.depth_base : 1, m_d, m->d,
        c->model.residual.width_base ? c->model.residual.width_base : m->d, pow(m_L, -c->model.residual.completep), m->lr_mult[1],
        m->lr_mult[2], m->wd_mult[1], c->optim.adam_eps * m->eps_mult[1], c->optim.adam_eps, m->out_mult);
}
