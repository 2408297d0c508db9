/* mup.c: width muP in the trainer, as Megatron-LM's use_mup (read at its head of 2026-08:
   transformer_config.py __post_init__, optimizer/__init__.py get_mup_config_overrides,
   LanguageModule._scale_logits, LanguageModelEmbedding.forward), m_d = d / d_base
   (--width-base; its mup_width_mult = hidden_size / mup_base_hidden_size):
     attention  scores times sqrt(h_base) / d_h (--mup-base-head-dim h_base; 1 / d_h without:
                its mup_attn_scale_power 1), the library's attn.softmax_scale
     logits     times 1 / m_d (its mup_output_mult's default; --mup-output-mult X)
     embedding  its output times --mup-embed-mult X (its mup_embedding_mult, default 1)
     init       from the scheme's init at the base width (width.c): the blocks' matrices at
                its std there / sqrt(m_d), its depth factor kept (megatron: W_o, W_2 at
                sigma / sqrt(2L m_d), its mup_scaled_init_method_normal); the
                embedding and the head at its stds there (its embedding_init_method, unscaled,
                for both)
     AdamW      the blocks' matrices lr / m_d and eps / m_d; every other parameter (its
                vector-like ones, the embedding and the head) lr and eps as given; weight decay
                as given (AdamW's decay is lr x wd: it follows the lr)
   Its code tells a hidden matrix by dimension (2-D and not the embedding or head); here by
   kind (block_matrix): the 2-D tensors it does not have (the hyper-connections' static maps,
   DenseFormer's and Attention Residuals' weights) are not width by width and keep the base
   rates. The library's part is the attention's scale; the rest is the model around it. */
#include "train.h"

#include <math.h>

void mup_rules(model* m, const config* c) {
    m->lr_mult[1] = 1 / width_mult(c);
    m->eps_mult[1] = 1 / width_mult(c);
}

int mup_desc(const config* c, nb_stack_desc* d) {
    const double d_h = (double)d->d_model / d->n_heads;
    const int h_base = c->model.mup.base_head_dim;
    if (d->preset == NB_PRESET_NGPT)
        return fail("--mup with nGPT: its weights live on the unit sphere with their own scales "
                    "(sqk, suv, sz); muP's width rules do not apply");
    d->attn.softmax_scale = (nb_real)((h_base ? sqrt((double)h_base) : 1) / d_h);
    return 0;
}

/* after the scheme drew the stack at its own std: times its base width's over it, 1/sqrt(m_d) */
void mup_init(model* m, const config* c) {
    const double k = width_base_stds(m->init, m->init_std0, width_mult(c)).hidden / sqrt(width_mult(c));
    int t;
    for (t = 0; t < m->s.n_tensors && k != 1; t++) {
        const nb_tensor_info* ti = &m->s.tensors[t];
        nb_real* x = m->p + m->off_stack + ti->offset;
        size_t i;
        if (ti->layer < 0 || !block_matrix(ti->kind)) continue;
        for (i = 0; i < ti->count; i++) x[i] = (nb_real)(x[i] * k);
    }
}

void mup_say(const config* c, const model* m) {
    const double m_d = width_mult(c);
    const base_width b = width_base_stds(m->init, m->init_std0, m_d);
    const int h_base = c->model.mup.base_head_dim;
    say("muP: m_d %g (d %d / d_base %d): attention scores x %g (%s / d_h %g); logits x %g (%s); "
        "embedding x %g; init from %s at d_base: the blocks' matrices x %g (its std there / sqrt(m_d), "
        "its depth factor kept), embedding x %g, head x %g; the blocks' matrices lr x %g and AdamW eps "
        "%g (1/m_d); every other parameter lr and eps as given\n",
        m_d, m->d, c->model.residual.width_base ? c->model.residual.width_base : m->d,
        (double)m->s.desc.attn.softmax_scale, h_base ? "sqrt(h_base)" : "1",
        (double)m->d / m->s.desc.n_heads, m->out_mult, c->model.mup.output_mult > 0 ? "given" : "1/m_d",
        c->model.mup.embed_mult > 0 ? c->model.mup.embed_mult : 1, init_scheme_name(m->init),
        b.hidden / sqrt(m_d), b.embed, b.head, m->lr_mult[1], c->optim.adam_eps * m->eps_mult[1]);
}
