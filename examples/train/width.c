/* width.c: the base model of the width rules (CompleteP's, muP's): m_d = d / d_base
   (--width-base), and an init scheme's stds moved to the base width. The rules scale from the
   model at d_base, where the run is the scheme's own init (as the mup package's base shapes,
   and as the codes' fixed init_std: CompleteP's 0.02, Megatron's init_method_std). A scheme
   whose std already falls as 1/sqrt(d) (the library's normal family, 1/sqrt(2.5 d); Mitchell's
   1/sqrt(d); xavier) is at its base-width value times 1/sqrt(m_d) on its own: dividing it again
   would give 1/d. */
#include "train.h"

#include <math.h>

double width_mult(const config* c) {
    return c->model.residual.width_base ? (double)c->model.d_model / c->model.residual.width_base : 1;
}

/* 1: the std goes as 1/sqrt(d) (d_ff a multiple of d), 0: constant. From nb__base_std and
   nb_init_io_std: s0 is 1/sqrt(2.5 d) for the normal family unless --init gives a std, 0.02
   for the mixln family, gpt2 and torchtitan; megatron's head, Mitchell's and DeepNorm's stds
   are 1/sqrt(d) (xavier's sqrt(2 / (fan_in + fan_out)) too), torchtitan's head 1/sqrt(d),
   its embedding 1, mixln's embedding sqrt(0.4). */
base_width width_base_stds(nb_init_scheme sc, double std0, double m_d) {
    const int s0_falls = !(std0 > 0) && sc != NB_INIT_MIXLN && sc != NB_INIT_MIXLN_SCALED &&
                         sc != NB_INIT_GPT2 && sc != NB_INIT_TORCHTITAN;
    const int fixed = sc == NB_INIT_MITCHELL || sc == NB_INIT_DEEPNORM;
    const double up = sqrt(m_d);
    base_width b;
    b.hidden = fixed || s0_falls ? up : 1;
    b.embed = fixed || s0_falls ? up : 1;
    b.head = fixed || s0_falls || sc == NB_INIT_MEGATRON || sc == NB_INIT_TORCHTITAN ? up : 1;
    return b;
}
