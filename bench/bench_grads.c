/* The stack's backward under its two parameter-gradient conventions, as a trainer uses them:
     zero+acc   the trainer zeroes the whole gradient buffer, then nb_stack_backward accumulates
                (param_grads = ACCUMULATE, the default: what a trainer did before OVERWRITE)
     overwrite  nb_stack_backward alone with param_grads = OVERWRITE (each tensor zeroed right
                before its layer's backward writes it)
     acc        nb_stack_backward accumulating into a buffer nobody zeroes (the floor: no
                zeroing at all; gradients add up, as in gradient accumulation)
   The three alternate rep by rep so that they see the same machine noise. The claim under
   test: overwrite costs no more than zero+acc (it does the same writes, in cache).

   usage: bench_grads PRESET L B T d H THREADS REPS */
#define _POSIX_C_SOURCE 200809L
#define NORMBLOCKS_IMPLEMENTATION
#include "normblocks.h"
#include "bench_common.h"

typedef struct grun {
    nb_ctx ctx;
    nb_stack s;
    float *params, *grads, *cache, *scratch, *in, *out, *dout, *din;
} grun;

static void setup(grun* r, const char* preset, int L, int B, int T, int d, int H, int nt,
                  nb_grad_mode mode) {
    nb_stack_desc desc;
    const size_t n = (size_t)B * T * d;
    memset(r, 0, sizeof *r);
    r->ctx.num_threads = nt;
    memset(&desc, 0, sizeof desc);
    desc.n_layers = L; desc.d_model = d; desc.n_heads = H;
    desc.run.param_grads = mode;
    if (nb_preset_from_name(&r->ctx, &desc, preset) || nb_stack_init(&r->ctx, &r->s, &desc, B, T)) {
        fprintf(stderr, "bench_grads: %s\n", r->ctx.err);
        exit(1);
    }
    r->params = nbb_alloc(r->s.n_params); r->grads = nbb_alloc(r->s.n_params);
    r->cache = nbb_alloc(r->s.n_cache); r->scratch = nbb_alloc(r->s.n_scratch);
    r->in = nbb_alloc(n); r->out = nbb_alloc(n); r->dout = nbb_alloc(n); r->din = nbb_alloc(n);
    nb_stack_init_params(&r->ctx, &r->s, r->params, NB_INIT_DEFAULT, 0, 42);
    nb_fill_normal(r->in, n, 1, 3, 11);
    nb_fill_normal(r->dout, n, 1, 3, 12);
    if (nb_stack_forward(&r->ctx, &r->s, r->params, r->out, r->in, B, T, r->cache, r->scratch)) {
        fprintf(stderr, "bench_grads: %s\n", r->ctx.err);
        exit(1);
    }
}

/* One backward (the cache holds a forward; backward does not change it), timed with the
   zeroing pass when zero is set. */
static double backward(grun* r, int zero) {
    const double t0 = nbb_now();
    if (zero) memset(r->grads, 0, r->s.n_params * sizeof(float));
    if (nb_stack_backward(&r->ctx, &r->s, r->params, r->grads, r->din, r->dout, r->s.max_batch,
                          r->s.max_seq, r->cache, r->scratch)) {
        fprintf(stderr, "bench_grads: %s\n", r->ctx.err);
        exit(1);
    }
    return nbb_now() - t0;
}

int main(int argc, char** argv) {
    grun acc, ovw;
    double *t_zero, *t_ovw, *t_acc, m_zero, m_ovw, m_acc;
    int L, B, T, d, H, nt, reps, i;
    tuned_env_restart(argv, TUNE_CORE); /* OpenBLAS's core when it fell to Prescott */
    if (argc < 9) {
        fprintf(stderr, "usage: %s PRESET L B T d H THREADS REPS\n", argv[0]);
        return 2;
    }
    L = atoi(argv[2]); B = atoi(argv[3]); T = atoi(argv[4]); d = atoi(argv[5]);
    H = atoi(argv[6]); nt = atoi(argv[7]); reps = atoi(argv[8]);
    nbb_print_env("bench_grads");
    setup(&acc, argv[1], L, B, T, d, H, nt, NB_GRAD_ACCUMULATE);
    setup(&ovw, argv[1], L, B, T, d, H, nt, NB_GRAD_OVERWRITE);
    t_zero = (double*)malloc(sizeof(double) * (size_t)reps);
    t_ovw = (double*)malloc(sizeof(double) * (size_t)reps);
    t_acc = (double*)malloc(sizeof(double) * (size_t)reps);
    backward(&acc, 1); backward(&ovw, 0); /* warm-up */
    for (i = 0; i < reps; i++) {
        t_zero[i] = backward(&acc, 1);
        t_ovw[i] = backward(&ovw, 0);
        t_acc[i] = backward(&acc, 0);
    }
    m_zero = nbb_median(t_zero, reps);
    m_ovw = nbb_median(t_ovw, reps);
    m_acc = nbb_median(t_acc, reps);
    printf("# backward of %s, L=%d (B,T,d,H)=(%d,%d,%d,%d), %d threads, %zu parameters (%.1f MiB "
           "of gradients), median of %d\n", argv[1], L, B, T, d, H, nt, acc.s.n_params,
           acc.s.n_params * 4.0 / 1048576, reps);
    printf("  zero+acc  %8.2f ms\n  overwrite %8.2f ms  (%.3f x zero+acc)\n  acc       %8.2f ms  "
           "(no zeroing at all: the floor)\n", 1e3 * m_zero, 1e3 * m_ovw, m_ovw / m_zero,
           1e3 * m_acc);
    printf("RESULT kind=grads preset=%s L=%d B=%d T=%d d=%d H=%d threads=%d reps=%d "
           "zero_acc_ms=%.3f overwrite_ms=%.3f acc_ms=%.3f core=%s\n", argv[1], L, B, T, d, H, nt,
           reps, 1e3 * m_zero, 1e3 * m_ovw, 1e3 * m_acc, nbb_corename());
    nb_stack_free(&acc.s);
    nb_stack_free(&ovw.s);
    return 0;
}
