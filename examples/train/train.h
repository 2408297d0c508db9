/* train: a byte-level language model around a normblocks stack, trained with AdamW, on one
   process or data-parallel over MPI ranks. The program is small files with one job each:

     main.c        the command: setup, then a run, a sweep, or sampling/evaluation; the report
     cli.c         options, --help, the stack description they make, each preset's paper init
     data.c        the addition task and byte corpora, batches as pure functions of the seed
     model.c       embedding -> stack -> head -> cross-entropy, forward and backward; evaluation
     optim.c       learning-rate schedule, gradient norm, AdamW over this rank's part
     heads.c       each step's attention per layer and head (max logit, first-key mass) over
                   the ranks; QK-Clip after the optimizer step
     run.c         the training loop of one run
     summary.c     a run's results as JSON, written by the run, read back by a sweep
     sweep.c       --compare/--seeds/--lrs: many runs (child processes, or in turn under MPI),
                   statistics over seeds, the largest stable learning rate, CSVs
     sample.c      --load a checkpoint: --sample text from a prompt, --eval loss and accuracy
     dump.c        --load a checkpoint: --dump every named intermediate of one batch
     checkpoint.c  safetensors save and load (one file whatever the rank count)
     plot.c        CSV and SVG output (--diag, sweeps)
     dist.c        MPI: gradient buckets reduced during the backward, ZeRO-1, collectives;
                   a single-process stand-in when built without MPI
     util.c        messages, hashing, files in and out, small helpers
     ngpt.c, completep.c, mup.c, width.c, hyper.c, dwa.c, attnres.c, unet.c, vembed.c
                   one scheme's part each: the model around the stack, its rules, its report

   The model buffer is one flat array [wte | stack | head]; gradients share its layout, so data
   parallelism is one reduction over that array (in buckets, as the backward produces them). */
#ifndef TRAIN_H
#define TRAIN_H

#include "normblocks.h"

#include <stddef.h>
#include <stdio.h>

#ifdef _OPENMP
#define TR_OMP(x) _Pragma(#x)
#else
#define TR_OMP(x)
#endif
#if defined(__STDC_VERSION__) && __STDC_VERSION__ >= 199901L
#define TR_RESTRICT restrict
#else
#define TR_RESTRICT
#endif
/* A loop whose conditional floating-point update gcc may compute on every lane and select: under
   its default -ftrapping-math it will not (an operation it would not have run might raise a flag),
   and without AVX-512's masked operations such a loop stays scalar (AdamW: 4-5x slower on AVX2
   CPUs). The trainer reads no floating-point flags, and the results are the same. */
#if defined(__GNUC__) && !defined(__clang__)
#define TR_SELECTS __attribute__((optimize("no-trapping-math")))
#else
#define TR_SELECTS
#endif

/* checkpoints store F32: the trainer is built for float nb_real */
typedef char tr_nb_real_is_float[sizeof(nb_real) == 4 ? 1 : -1];

enum { VOCAB = 256, MAX_LAYERS = 64, MAX_COMPARE = 16, MAX_SWEEP = 16 };
/* written forms of the addition task (data.c): plain 123+45=168, reversed 123+45=861, padded
   123+045=0168, padded_reversed 123+045=8610, lsb_first 321+540=8610 */
enum { FMT_PLAIN, FMT_REVERSED, FMT_PADDED, FMT_PADDED_REVERSED, FMT_LSB_FIRST, FMT_COUNT };

/* ---- util.c ---- */
extern volatile int g_stop;       /* set by SIGINT/SIGTERM; the loop saves and stops */
extern int g_rank, g_ranks;       /* this process in the job (0 of 1 without MPI) */
extern int g_same_everywhere;     /* 1 while every rank checks the same thing: rank 0 reports */
#if defined(__GNUC__)
#define TR_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define TR_PRINTF(f, a)
#endif
int fail(const char* fmt, ...) TR_PRINTF(1, 2); /* prints "train: error: ..." (with the rank
                                                  when > 1), returns 1 */
void say(const char* fmt, ...) TR_PRINTF(1, 2); /* stdout, rank 0 only */
double now_s(void);
unsigned long long mix64(unsigned long long* s);
unsigned long long hash3(unsigned long long a, unsigned long long b, unsigned long long c);
unsigned long long rnd_below(unsigned long long* s, unsigned long long n);
int make_dir(const char* dir);
/* This process's inputs (io_input: a file it reads, by device and inode) never get replaced by
   one of its outputs: same_file compares two paths (the same file after links; for paths not
   there yet, the same resolved directory and name), io_output refuses (fail, 1) an output path
   that is an input; create_out and the checkpoint and dump writers ask it before writing. */
void io_input(const char* path, const char* what);
int same_file(const char* a, const char* b);
int io_output(const char* path, const char* what);
/* outputs, written whole or not at all (safetensors.h's st_create/st_commit): create_out and
   open_in (DIR/NAME) open a temporary file next to the path, close_out renames it over the
   path (fail and 1 when anything failed: the file there before is unchanged) */
FILE* open_in(const char* dir, const char* name, char* path, size_t n);
/* path opened for writing: a regular file or a new one, never a FIFO or device (fails with a message) */
FILE* create_out(const char* path);
int close_out(FILE* f);
/* the whole of a regular file (safetensors.h's st_read_file: a FIFO or device is refused, never
   waited on), NUL-terminated, malloc'ed, its size in *n; NULL after fail("WHAT: ...") (what
   NULL: silently) */
char* read_whole(const char* path, const char* what, size_t* n);
void fmt_time(double s, char* buf, size_t n);
unsigned long long fnv1a(const void* data, size_t n, unsigned long long h);

/* ---- cli.c ---- */
struct cJSON;
/* The run's settings, grouped as the stack's description is (nb_stack_desc): the model (a
   checkpoint's model keys, cli.c's option table), then the optimizer, the loop, the machine,
   the data, the files, sampling and sweeps. 0, or -1 where 0 is a value, = the preset's. */
typedef struct cfg_norm {     /* nb_stack_desc.norm */
    char kind[16];            /* --norm: rms, layer, dyt, derf, l2; "" = the preset's */
    double eps;
    int gain, bias;           /* the block norms' weight and bias: -1 off, 1 on (the kind's), 0
                                 not given (the kind's) */
    int gain_offset;          /* Gemma's 1 + w gains */
    double dyt_alpha, dyt_alpha_attn; /* init only; 0 = the library default */
    int final, embed;         /* --final-norm, --embed-norm */
    int embed_scale;          /* --embed-scale: an EMBED_* (a checkpoint's embed_scale), -1 the
                                 preset's (EMBED_LEARN for dyt, else EMBED_OFF) */
} cfg_norm;
typedef struct cfg_attn {     /* nb_stack_desc.attn */
    int rope;
    double rope_theta;
    int sites;                /* NB_SITE_* mask, NB_SITES_NONE, 0 = the preset's */
    int site_width, bias, memory;
    int gate;                 /* 0 none, 1 headwise, 2 elementwise */
    int sink;                 /* 0 none, 1 learned, 2 off-by-one (nb_attn_sink) */
    double clip_qkv;          /* OLMo's clamp of Q|K|V; 0 = off */
    double softcap;           /* Gemma 2's attention-logit softcap C; 0 = off */
} cfg_attn;
typedef struct cfg_ffn {      /* nb_stack_desc.ffn */
    char kind[16];            /* --ffn: swiglu, gelu */
    int d_ff, bias;
} cfg_ffn;
typedef struct cfg_residual { /* nb_stack_desc.residual */
    int branch_scale;         /* 0 the preset's, else an nb_branch_scale (scalar, channel or
                                 sublayer) */
    double layerscale_init;   /* init only; 0 = the library default */
    int value_residual;       /* 0 off, 1 fixed, 2 learnable */
    double completep;         /* depth_alpha (0 off): CompleteP's residual multiplier, and its
                                 per-group rules (completep.c) */
    int depth_base;           /* L_base (0 = 1) */
    int width_base;           /* CompleteP's or muP's d_base, m_d = d / d_base (0: d, m_d = 1) */
    int dwa, dwa_dilation;    /* DenseFormer's depth-weighted average (0 off), its k (0 = 1) */
    int dwa_period;           /* its period p (0 = 1): only every p-th layer averages */
    int attn_res, attn_res_block; /* Attention Residuals (0 off), its block in sublayers (0 = 1) */
    int unet_skips, reinject_x0;  /* modded-nanogpt's U-Net skips, x_0 re-injection (0 off) */
    int value_embeds;             /* modded-nanogpt's value embeddings: tables (0 off) */
} cfg_residual;
typedef struct cfg_hyper {    /* nb_stack_desc.hyper */
    int kind;                 /* 0 the preset's, else an nb_hyper */
    int streams, sinkhorn;    /* 0 = the library's (4 streams, 20 iterations) */
    int form;                 /* 0 the library's (dynamic), 1 dynamic, 2 static */
} cfg_hyper;
typedef struct cfg_siamese {  /* nb_stack_desc.siamese (+1: 0 = the library's) */
    int scale, fusion, no_fusion_norm;
} cfg_siamese;
typedef struct cfg_mup {      /* width muP as Megatron-LM's use_mup (mup.c); not the stack's */
    int on;
    int base_head_dim;        /* softmax scale sqrt(base_head_dim) / d_k; 0: 1 / d_k */
    double embed_mult;        /* the embedding's output times this; 0 = 1 */
    double output_mult;       /* the logits times this; 0 = 1 / m_d */
} cfg_mup;
typedef struct cfg_model {
    char preset[64];          /* preset name, or "custom" with schedule */
    char schedule[512];       /* --schedule: comma-separated layer kinds */
    int d_model, n_layers, n_heads, n_kv_heads;
    double mixln_alpha;
    char init[24];            /* --init; "" = the preset's paper init (preset_init) */
    double logit_softcap;     /* --logit-softcap C: logits = C tanh(logits / C), last; 0 = off */
    cfg_norm norm;
    cfg_attn attn;
    cfg_ffn ffn;
    cfg_residual residual;
    cfg_hyper hyper;
    cfg_siamese siamese;
    cfg_mup mup;
} cfg_model;
typedef struct cfg_optim {
    double lr, min_lr_frac, wd, beta1, beta2, adam_eps, clip;
    int warmup;
    int wd_norms;             /* --wd-norms on: decay norm gains, biases, SiameseNorm gamma too */
    double qk_clip;           /* --qk-clip TAU: QK-Clip after every optimizer step; 0 = off (a
                                 run key of the checkpoint, as lr: --allow-change qk_clip) */
    unsigned given;           /* GIVEN_* bits: optimizer flags set on the command line or in a
                                 --config file (the others take the preset's defaults) */
} cfg_optim;
typedef struct cfg_loop {
    int batch, seq, steps, log_every, eval_batches, save_every, stop_after;
    unsigned long long seed;
    int eval_problems;        /* held-out problems of the exact-match accuracy */
    double spike_stop;        /* > 0: stop as diverged at loss > spike_stop x first loss + 1
                                 (after 10 steps); 0 = off: only a non-finite loss stops a run */
    int quiet;
} cfg_loop;
typedef struct cfg_machine {
    int threads;
    int bf16;                 /* --precision bf16 (1) or auto (2): every GEMM (stack, LM head)
                                 on bf16 operands; a run option, not a property of the model or
                                 checkpoint */
    int bf16_per_forward;     /* --bf16-weights forward: no copy written by AdamW */
    int bf16_outputs;         /* --bf16-outputs bf16: gemm.bf16_outputs (autocast's FFN hidden layer) */
    int backend;              /* --backend: an nb_backend */
    int zero;                 /* --zero: ZeRO-1 optimizer-state sharding over the ranks */
    int bucket_kb;            /* gradient bucket size for the reduction during backward */
    double comm_timeout;      /* --comm-timeout: seconds a collective may take; 0 = forever */
    int check_finite;         /* --check-finite: stop at the first non-finite activation or
                                 gradient, naming its layer and sublayer */
    int profile;              /* --profile: where the training step's time goes, at the end */
    /* --inject KIND@STEP:LAYER:SUB:WHERE (fault injection, for testing the checks) */
    int inj_kind;             /* 0 none, 1 NaN, 2 Inf */
    int inj_step, inj_layer, inj_ffn, inj_grad;
} cfg_machine;
typedef struct cfg_data {
    const char* path;         /* --data: NULL: the addition task */
    int digits, format;       /* addition: operand digits, FMT_* */
    double val_frac;
} cfg_data;
typedef struct cfg_files {
    const char* save;         /* checkpoint written at the end (and on Ctrl-C) */
    const char* resume;
    const char* diag;
    const char* out;
    const char* csv;          /* per-step loss, gradient norm, lr */
    const char* allow_change; /* run settings a --resume may change (comma list, or "all") */
    const char* summary;      /* --summary: the run's results as JSON (what a sweep reads back) */
} cfg_files;
typedef struct cfg_sample {   /* --load FILE: a checkpoint to sample from or evaluate */
    const char* load;
    int load_text;            /* the checkpoint was trained on a --data file */
    int load_bf16;            /* its GEMMs' precision: 1 bf16, 0 fp32, -1 not recorded (older) */
    const char* sample;       /* --sample PROMPT */
    int eval;                 /* --eval */
    const char* dump;         /* --dump FILE */
    double temperature;       /* 0 = greedy */
    int top_k;                /* 0 = every byte */
    int sample_len;           /* bytes to generate at most */
    unsigned long long sample_seed;
} cfg_sample;
typedef struct cfg_sweep {    /* every preset of --compare x --lrs x --seeds */
    const char* compare;
    unsigned long long seeds[MAX_SWEEP];
    double lrs[MAX_SWEEP];
    int n_seeds, n_lrs;       /* 0: the single --seed / --lr */
    int jobs;                 /* runs at a time (child processes); 0 = one per core */
    double collapse_margin;   /* nats above the unigram entropy that count as collapsed */
} cfg_sweep;
typedef struct config {
    cfg_model model;
    cfg_optim optim;
    cfg_loop loop;
    cfg_machine machine;
    cfg_data data;
    cfg_files files;
    cfg_sample sample;
    cfg_sweep sweep;
    char store[8192];         /* the strings of --config files (paths, names) */
    size_t store_used;
} config;

/* the embedding's scale (--embed-scale; the checkpoint's embed_scale key holds the number):
   none, DyT's learnable scalar (init sqrt(d)), Gemma's constant normalizer sqrt(d) */
enum { EMBED_OFF = 0, EMBED_LEARN = 1, EMBED_SQRT_D = 2 };
enum { GIVEN_WD = 1, GIVEN_WARMUP = 2, GIVEN_MIN_LR = 4, GIVEN_BETA1 = 8, GIVEN_BETA2 = 16,
       GIVEN_ADAM_EPS = 32 };
void config_defaults(config* c);
/* The optimizer settings of c's preset that c->given leaves open: nGPT's (its train.py:
   weight decay 0, no warmup, cosine to 0, AdamW (0.9, 0.95) eps 1e-8) for ngpt, the trainer's
   defaults for every other preset. parse_args applies it; a sweep's in-process runs again for
   each preset. */
void preset_train_defaults(config* c);
void usage(void);
/* argv's options (and any --config FILE's, in their place) into c; *help: --help, --version or
   --list-presets was given and printed (nothing else to do) */
int parse_args(int argc, char** argv, config* c, int* help);
/* The model options of the table that c sets away from their defaults, as checkpoint metadata
   (key = the option's name with '_', value as the option takes it), and back. */
void config_model_meta(const config* c, struct cJSON* meta);
int config_model_from_meta(config* c, const struct cJSON* meta, const char* path);
int config_model_key(const char* key); /* 1 for a key config_model_meta may write */
int init_scheme(const char* name, nb_init_scheme* out);
const char* init_scheme_name(nb_init_scheme s);
/* The init of the run: --init, or the one the preset's paper code uses (*why says where it
   comes from); std0 0 = the scheme's own base standard deviation. */
int resolve_init(const config* c, const nb_stack_desc* d, nb_init_scheme* scheme, double* std0,
                 const char** why);
int make_desc(const config* c, nb_stack_desc* d, nb_layer_desc* layers);
/* a resolved norm kind as --norm and the checkpoint's "norm" key spell it: rms, layer, dyt,
   derf, l2 */
const char* norm_kind_name(nb_norm_type k);
int sweeping(const config* c);
/* The sweep's own options (compare, seeds, lrs, jobs, out) may sit in a --config file: the
   sweep reads them, its runs (which get the same file, their preset, seed and lr on the command
   line) skip them; the sweep marks its runs' environment with this variable. */
#define SWEEP_RUN_ENV "NBTRAIN_SWEEP_RUN"
/* What a --config file sets for one run: a hash of its option lines but the sweep's own
   (comments, blank lines and spelling of "name = value" aside); 0 when unreadable */
unsigned long long config_run_hash(const char* path);  /* --compare, --seeds or --lrs */

/* ---- data.c ---- */
typedef struct dataset {
    int text;                      /* 1: byte corpus, 0: addition */
    unsigned char* bytes;          /* corpus */
    size_t n, n_train;             /* corpus size, train split [0, n_train), val after */
    int digits, format;
    unsigned long long seed;
    unsigned long long hash;       /* identity of the data (corpus bytes, or task settings) */
} dataset;

int load_data(const config* c, dataset* ds);   /* rank 0 reads, every rank gets the bytes */
/* Rows [b0, b0 + nb) of the global batch of `step` (tok: nb x (T+1), mask: nb x T): a pure
   function of (seed, step, row), so ranks draw disjoint shares and a resumed run the same data. */
void train_batch(const dataset* ds, int step, int b0, int nb, int T, int* tok, unsigned char* mask);
/* Rows [b0, b0 + nb) of validation batch k of n_batches (global batch B). */
void val_batch(const dataset* ds, int k, int n_batches, int B, int b0, int nb, int T, int* tok,
               unsigned char* mask);
int add_problem(const dataset* ds, unsigned long long* st, int val, char* buf, unsigned long long* sum);
int add_answer(const dataset* ds, unsigned long long sum, char* buf);
/* s is a problem "a+b=" in the dataset's format: 1, with a, b and whether the pair is one of
   the held-out ones; else 0 */
int add_parse(const dataset* ds, const char* s, unsigned long long* a, unsigned long long* b,
              int* held_out);
int format_from_name(const char* name, int* out);
const char* format_name(int f);
void add_example(const dataset* ds, char* buf);       /* "123+045=0168" (buf: 64 bytes) */
/* 1 when s is a problem written exactly as the format writes it; canon gets that form
   (64 bytes) when s is a problem at all */
int add_canonical(const dataset* ds, const char* s, char* canon);
double unigram_entropy(const dataset* ds, int T);

/* ---- dist.c ---- */
typedef struct dist dist;          /* opaque: holds MPI state when built with MPI */
int dist_init(int* argc, char*** argv);         /* sets g_rank, g_ranks */
void dist_finalize(void);
void dist_abort(int code);                      /* ends every rank of the job */
void* xcalloc(size_t n, size_t size); /* calloc, or the job ended with a message (out of memory) */
int dist_have_mpi(void);
/* A collective that has not completed in this many seconds ends the job with a message naming
   it (a peer or the network is gone); 0 = wait forever. Set by parse_args (--comm-timeout). */
void dist_set_comm_timeout(double seconds);
/* Every rank's rc in, the largest out: ranks leave a phase that can fail together. */
int dist_agree(int rc);
void dist_sum(double* x, int n);                /* allreduce SUM, in place, blocking */
void dist_max(double* x, int n);                /* allreduce MAX, in place, blocking */
void dist_bcast(void* buf, size_t bytes);       /* from rank 0 */

/* Gradient reduction over the flat buffer g (n values). Plain data parallelism: every rank
   ends with the sum of all ranks' g. ZeRO-1: each rank ends with the sum over its shard only
   (in dist_shard_grads). Ranges are reported as the backward finishes them (descending,
   contiguous); buckets of bucket_values start reducing at once. */
dist* dist_create(size_t n, int zero, size_t bucket_values);
void dist_destroy(dist* d);
void dist_shard(const dist* d, int rank, size_t* lo, size_t* hi); /* shard bounds, aligned */
void dist_update_range(const dist* d, size_t* lo, size_t* hi);    /* what this rank updates */
void dist_grads_begin(dist* d, nb_real* g);
void dist_grads_ready(dist* d, size_t off, size_t count);
nb_real* dist_grads_finish(dist* d);  /* waits; returns the reduced gradients of the update range */
void dist_params_gather(dist* d, nb_real* p);   /* ZeRO: every rank's updated shard to all */
/* ZeRO: gather shard-sized arrays (len = update range) into full (n) on rank 0, or scatter
   full (n, on rank 0) to every rank's shard. Plain: bcast full from rank 0 / nothing. */
void dist_gather_shards(dist* d, nb_real* full, const nb_real* shard);
void dist_scatter_shards(dist* d, nb_real* shard, const nb_real* full);
double dist_wait_seconds(dist* d);    /* time blocked in gradient/parameter collectives, reset */

/* ---- model.c ---- */
typedef struct model {
    nb_ctx ctx;
    nb_stack s;
    nb_layer_desc layers[MAX_LAYERS];
    int d, B, T;                       /* B: this rank's rows of the global batch */
    int B_global, b0;                  /* global batch, first row of this rank */
    size_t n, off_stack, off_head;     /* params: [wte | embed_scale | value embeddings | stack |
                                          head | sz] */
    int es;                            /* a learnable embedding scale at VOCAB*d (DyT's code) */
    int embed_mode;                    /* EMBED_*: x = wte[tok] x (1, that scalar, or sqrt(d)) */
    nb_real embed_const;               /* without a learnable scale, the embedding's constant
                                          multiplier: 1, or Gemma's normalizer sqrt(d) rounded
                                          to the activations' float32 (bf16 runs too: only GEMM
                                          operands are bf16), times muP's --mup-embed-mult */
    double softcap;                    /* the final-logit softcap C (0: off), applied last */
    int ngpt;                          /* nGPT's model (its model.py, train.py): the logit scale
                                          sz (VOCAB values at off_sz, logits x sz sqrt(d)), the
                                          embedding's and head's rows unit, the stack's matrices
                                          normalized after every step (ngpt_normalize) */
    size_t off_sz;
    int n_ve, ve_w;                    /* value embeddings: tables, each VOCAB x ve_w (H_kv d_k) */
    size_t off_ve;                     /* their first value (after the embedding scale) */
    nb_real *ve_rows, *ve_grad;        /* their rows at the batch's tokens, and the rows' gradients
                                          (n_ve x B*T x ve_w, bound to the stack) */
    size_t upd_lo, n_upd;              /* the part of the buffer this rank updates */
    nb_real *p, *g;                    /* parameters and gradients (n) */
    nb_real *m, *v;                    /* Adam moments of the update range (n_upd) */
    unsigned short* w16;               /* BF16: bf16(p) (n), the stack's weights as its GEMMs read
                                          them (nb_stack_set_bf16_weights), written by AdamW */
    int w16_ok;                        /* w16 equals bf16(p); 0 after any other write of p, and
                                          model_step refreshes it before the forward */
    unsigned char* decay;              /* per parameter (n): 1 = weight decay applies */
    unsigned char* group;              /* per parameter (n): its optimizer group (optim_groups) */
    double lr_mult[3], wd_mult[3];     /* per group: lr x, weight decay x, AdamW eps x (CompleteP's */
    double eps_mult[3];                /* or muP's rules; else 1) */
    double out_mult;                   /* logits x (CompleteP's 1/m_d with --width-base, muP's
                                          output multiplier; else 1) */
    nb_init_scheme cp_init;            /* CompleteP: the depth-free scheme the stack was drawn by */
    double cp_sigma;                   /* and its base std sigma (the matrices: sigma / sqrt(m_d)) */
    nb_init_scheme init;               /* what model_init used */
    double init_std0;
    const char* init_why;              /* its source (preset default or --init) */
    nb_real *x, *h, *dh, *dx, *logits, *cache, *scratch;
    unsigned short *h16, *dl16;        /* BF16 with w16: the head's operands h and dlogits in bf16,
                                          for its GEMMs on the stack's engine (nb_stack_gemm_bf16) */
    nb_real* sz_terms;                 /* nGPT, training: per row and byte, the terms of sz's
                                          gradient (softmax - onehot) x (logit before sz) */
    double* row_loss;
    int* tok;
    unsigned char* mask;
    long long adam_t;                  /* optimizer steps taken */
    dist* dist;
    double t_comm;                     /* seconds blocked in the loss allreduce */
    double* gn_part;                   /* one process: the gradient's chunk sums of squares,
                                          summed as the backward finishes them (optim.c) */
    long long gn_next;                 /* chunks >= gn_next are summed (-1: not this step) */
    size_t gn_front;                   /* the finished ranges reach down to here */
    double t_gnorm;                    /* seconds of the step's backward spent summing them */
    int stop;                          /* a stop request, agreed by every rank at the last step */
    double *head_max, *head_mass;      /* L*H: the last measured step's max logit and first-key
                                          mass per layer and head, over every rank (heads.c) */
    double* head_gate;                 /* L*H, gated attention only: each head's mean gate */
    double* head_sink;                 /* L*H, attention sinks only: each head's sink mass */
    const config* cfg;
    int step;                          /* the training step being computed (fault injection) */
    char bad_grad[160];                /* the first non-finite gradient seen (--check-finite) */
} model;

/* checkpoint tensor table: name, offset, rows, cols (cols 0 = a 1-D tensor) */
typedef struct ck_tensor { char name[96]; size_t off; int rows, cols; } ck_tensor;

int model_init(model* m, const config* c);
void model_free(model* m);
int model_tensors(const model* m, ck_tensor* table);
size_t tensor_count(const ck_tensor* t);
/* Forward on m->tok/mask. *loss = global mean over the masked targets, *count their number.
   train: backward, gradients reduced over the ranks (dist), ready for the optimizer. */
int model_step(model* m, int train, double* count, double* loss);
double evaluate(model* m, const dataset* ds, int n_batches);
int dump_batch(model* m, const dataset* ds, const config* c); /* dump.c: --dump */
double answer_accuracy(model* m, const dataset* ds, int n);
/* the same, keeping the first n_show problems and the model's answers (show[i]: "a+b=" and
   the answer as written, without the newline; ok[i]: right or not) */
typedef struct shown_problem { char q[40], got[40]; int ok; } shown_problem;
double answer_accuracy_show(model* m, const dataset* ds, int n, shown_problem* show, int n_show);

/* ---- optim.c ---- */
double lr_at(const config* c, int step);
double grad_norm(model* m, const nb_real* gu);          /* global, identical on every rank */
void gnorm_begin(model* m);                             /* a backward starts */
void gnorm_ready(model* m, size_t off, size_t count);   /* g[off, off + count) is final */
void layer_grad_norms(model* m, const nb_real* gu, double* per_layer);
void adamw(model* m, const config* c, const nb_real* gu, double lr, double gscale);
void weights16_refresh(model* m, size_t lo, size_t hi); /* w16[lo, hi) = bf16(p[lo, hi)) */

/* the optimizer groups of every parameter (m->group: 1 the blocks' matrices, 2 the blocks'
   other tensors, 0 the rest) and their multipliers: all 1 without a width rule; CompleteP's
   (completep.c) or muP's (mup.c) with one */
void optim_groups(model* m, const config* c);
/* 1: a tensor of this kind is a d-by-d-sized matrix of the blocks (attention, FFN,
   hyper-connection projections): what the width rules scale */
int block_matrix(nb_tensor_kind kind);

/* ---- completep.c ---- */
/* CompleteP's width and depth ratios of the model: m_d = d / d_base, m_L = L / L_base (1, 1
   without --completep) */
void completep_ratios(const model* m, double* m_d, double* m_L);
void completep_rules(model* m, const config* c); /* its groups' multipliers (optim_groups) */
/* the stack's init by width (its code; the scheme's base std / sqrt(m_d)); 1 after fail() */
int completep_init(model* m, const config* c);
void completep_say_init(const model* m, const char* depth_factor);
void completep_say(const config* c, const model* m);

/* ---- width.c ---- */
double width_mult(const config* c);              /* m_d = d / d_base (1 without --width-base) */
/* a scheme's std at the base width over its std at d, for the blocks' matrices, the embedding
   and the head: sqrt(m_d) where it falls as 1/sqrt(d), else 1 */
typedef struct base_width { double hidden, embed, head; } base_width;
base_width width_base_stds(nb_init_scheme scheme, double std0, double m_d);

/* ---- mup.c ---- */
void mup_rules(model* m, const config* c);       /* its groups' multipliers (optim_groups) */
int mup_desc(const config* c, nb_stack_desc* d); /* the attention's scale; 1 after fail() */
void mup_init(model* m, const config* c);        /* the blocks' matrices at the base width's / sqrt(m_d) */
void mup_say(const config* c, const model* m);

/* ---- vembed.c ---- */
int vembed_setup(model* m);                      /* rows and gradient rows, bound; 1 after fail() */
void vembed_init(model* m, unsigned long long seed);
void vembed_gather(model* m);                    /* the batch's rows, before the forward */
void vembed_scatter(model* m);                   /* the tables' gradients, after the backward */
int vembed_tensors(const model* m, ck_tensor* table, int n); /* checkpoint rows from n; new n */

/* ---- ngpt.c ---- */
/* 1: c's preset is nGPT (its model around the stack: unit embedding and head rows, the logit
   scale sz, the matrices normalized after every step) */
int is_ngpt(const config* c);
int ngpt_refusals(const config* c);      /* the flags nGPT's model refuses: 1 after fail() */
void ngpt_optim_defaults(config* c);     /* its train.py's optimizer where not given */
int ngpt_init_io(model* m);              /* unit embedding and head rows, sz's init */
/* nGPT's normalize_matrices (its train.py), after every optimizer step: the stack's matrices
   along d (nb_stack_normalize), the rows of the embedding and the head. Every rank computes the
   same values from the same parameters. 0, or 1 with a message (a zero or non-finite vector). */
int ngpt_normalize(model* m);
void ngpt_logit_scales(const model* m, nb_real sz[VOCAB]);
void ngpt_sz_grad(model* m, long long bt, double inv);
void ngpt_say(const config* c, const model* m);

/* ---- heads.c ---- */
/* The attention of this step's forward (still in the cache) per layer and head: m->head_max
   the largest logit over every rank's rows (MPI_MAX: what QK-Clip needs, identical on every
   rank), and with mass, m->head_mass the first key's probability averaged over every rank's
   query rows. Returns the largest max logit over layers and heads (NaN on a bad cache). */
double heads_measure(model* m, int mass);
/* Gated attention: m->head_gate, each head's mean gate sigmoid(G) over this step's forward,
   averaged over every rank's rows (nb_stack_gate_stats); 0 without gates. */
int heads_gates(model* m);
/* Attention sinks: m->head_sink, each head's mean sink probability over this step's query rows
   and every rank's (nb_stack_sink_mass); nothing without sinks. */
int heads_sinks(model* m);
/* QK-Clip (Kimi K2's MuonClip, nb_stack_qk_clip) with m->head_max of this step on the updated
   parameters: every rank scales the same heads of its full copy alike (plain data parallelism
   and ZeRO-1 hold every parameter after the step). 0, or 1 with a message. */
int heads_qk_clip(model* m, double tau, int* clipped);
/* the mean of x's n values */
double heads_mean(const double* x, int n);

/* ---- checkpoint.c ---- */
int save_checkpoint(const char* path, const config* c, const dataset* ds, model* m, int step);
/* an F32 entry (rows x cols, cols 0: 1-D) of a safetensors header at *off (dump.c too) */
struct cJSON;
void ck_put_entry(struct cJSON* root, const char* name, int rows, int cols, size_t* off);
int load_checkpoint(const char* path, const config* c, const dataset* ds, model* m, int* step);
/* The loader's checks on a checkpoint in memory (the fuzz harness calls it directly): fills
   base[0..2] (parameters, first and second moments, each m->n values), *step, *adam_t. */
int checkpoint_parse(const char* path, const unsigned char* buf, size_t size, const config* c,
                     const dataset* ds, const model* m, nb_real* const base[3], int* step,
                     long long* adam_t);
/* --load: the checkpoint's configuration (model, data, batch, seq, seed) into c; the flags of
   the command line come after it (parse_args again), so model flags can only repeat it */
int load_config(const char* path, config* c);

/* ---- run.c ---- */
typedef struct history {       /* what a run records for tables and plots */
    int n_steps;               /* per-step train loss */
    double *step_x, *loss, *step_gnorm, *step_lr;
    int n_eval;                /* per interval */
    double *eval_x, *val, *gnorm;
    int n_diag, streams;       /* per-layer snapshots (with --diag); streams: 2 for SiameseNorm */
    double *diag_x, *grad_l;   /* n_diag x L */
    int n_heads;               /* H of the stack: the heads' columns of the diagnostics */
    double *head_max_l, *head_mass_l; /* n_diag x L*H: max logit, first-key mass per head */
    double *hid_l, *ang_l;     /* n_diag x streams x (L+1), n_diag x streams x L */
    /* hyper-connections (nb_stack_hyper_gains): the composite Amax gains of sublayer q = 2l
       (attention), 2l+1 (FFN), means over the tokens of a logged step's forward */
    int hyper;                 /* 1: the stack has hyper-connections (streams of them) */
    double* hc_gain;           /* n_diag x 2 x 2L: forward gains, then backward (--diag) */
    int hc_logged;             /* logged steps whose gains were taken (every one) */
    double hc_fwd, hc_bwd;     /* the largest over the 2L sublayers at the last logged step */
    double hc_fwd_peak, hc_bwd_peak; /* and the largest over every logged step (NaN: none) */
    /* attention per step (heads.c): the largest max logit over layers and heads of the step's
       forward (before the step's QK-Clip), and the heads clipped after it */
    double *step_maxlogit, *step_clipped;
    double max_logit, max_logit_peak; /* the last step's, the largest of any step (NaN: none) */
    double first_mass;         /* mean first-key mass over layers and heads, last logged step */
    int gated;                 /* gated attention: its gates recorded at logged steps */
    double gate_mean, gate_min; /* the mean gate over layers and heads, and the smallest head's */
    int gate_min_at;           /* l*H + h of that head */
    double* head_gate_l;       /* n_diag x L*H: each head's mean gate (--diag) */
    int sinks;                 /* attention sinks: their mass recorded at logged steps */
    double sink_mass;          /* mean sink probability over layers, heads and rows, last logged */
    double* head_sink_l;       /* n_diag x L*H: each head's sink mass (--diag) */
    long long clips;           /* heads QK-Clip scaled, over the run */
    int dwa;                   /* DenseFormer: where its weights end (dwa.c) */
    double dwa_self, dwa_x0, dwa_other;
    int ar_logged;             /* Attention Residuals: 2L+1 once its weights were taken */
    double* ar_w;              /* (2L+1)^2: the readers' weights, last logged step (attnres.c) */
    int unet;                  /* U-Net skips, re-injection: where their scalars end (unet.c) */
    double unet_mean[3];       /* mean skip weight, lambda_0, lambda_1 (NaN: absent) */
    double final_loss, final_val, accuracy;
    int diverged_at;           /* -1 = no */
    int spikes;                /* loss spikes: excursions above 2x the loss's running average */
    double worst_spike;        /* the largest loss / running average of a spike (0: none) */
    int interrupted, steps_done;
    double train_seconds, comm_seconds, tokens;  /* training steps only (no evaluation) */
    /* --profile: the library's parts of the training steps' forward and backward, and the
       trainer's: the model step (embedding, stack, head, loss and their backward) and the
       optimizer (gradient norm, AdamW, nGPT's normalization, QK-Clip) */
    nb_profile prof;
    double model_seconds, opt_seconds, comm_in_model;
    double seconds;            /* the whole run, evaluation included */
    int n_problems;            /* held-out problems behind accuracy */
    char init[32];             /* the init scheme used */
    shown_problem shown[5];    /* the first held-out problems and the model's answers */
    int n_shown;
} history;

void history_free(history* h);
/* One training run. quiet_setup: no model/training lines (a run of an in-process sweep). */
int train_run(const config* c, const dataset* ds, double unigram, history* h, int quiet_setup);
/* the run's settings, as printed before training (model, init, eps, weight decay, schedule) */
void print_model(const config* c, const model* m, int arch_only);

/* ---- hyper.c ---- */
void hyper_say(const model* m);           /* the architecture line's hyper-connections part */
/* this step's composite Amax gains per sublayer (over every rank's tokens) into h: the run's
   last and peak, and with stored the last --diag snapshot's; 1 after fail() */
int hyper_record_gains(model* m, history* h, int stored);
void hyper_say_gains(const history* h);  /* the run's last and peak gains */

/* ---- dwa.c ---- */
void dwa_record(const model* m, history* h); /* the run's end: the weights' means */
void dwa_say(const history* h);               /* the summary line */
int dwa_csv(const model* m, const char* dir); /* --diag: dwa_weights.csv */

/* ---- attnres.c ---- */
int attnres_record(model* m, history* h);  /* this step's depth weights (every rank's) */
void attnres_say(const history* h);         /* the summary line */
void attnres_json(const history* h, struct cJSON* o); /* --summary's keys */
int attnres_csv(const history* h, const char* dir);    /* --diag: attn_res_weights.csv */

/* ---- unet.c ---- */
void unet_record(const model* m, history* h);  /* the run's end: the scalars' means */
void unet_say(const history* h);                /* the summary line */
void unet_json(const history* h, struct cJSON* o); /* --summary's keys */

/* ---- sweep.c ---- */
/* --compare LIST x --lrs x --seeds: every run, a table of mean and spread over seeds per
   (preset, lr) with collapsed and diverged runs marked, the largest stable lr per preset,
   CSVs and plots. argv: the command line, for the child processes. */
int run_sweep(const config* base, const dataset* ds, double unigram, int argc, char** argv);

/* ---- summary.c ---- */
int write_summary(const char* path, const config* c, const history* h, double unigram);

/* ---- sample.c ---- */
int run_loaded(const config* c, const dataset* ds);   /* --eval and/or --sample */
/* one line: held-out problems and the model's answers, marked right or wrong */
void say_shown(const dataset* ds, const shown_problem* p, int n);

/* ---- plot.c ---- */
int write_diag(const config* c, const model* m, const history* h, double unigram);
int write_steps_csv(const char* path, const history* h);
/* a line with a band: y over x, and lo/hi around it (NULL: no band); n_div/n_col (NULL: none):
   at point i, how many of `seeds` runs diverged (a cross at the top of the panel) and
   collapsed (a ring around the point), each labelled with its count */
typedef struct band {
    const char* name;
    int n;
    const double *x, *y, *lo, *hi;
    const int *n_div, *n_col;
    int seeds;
} band;
/* Every figure is captioned with the run c describes (a sweep's base config: its presets,
   lrs and seeds lists). */
/* compare.svg: validation loss (mean over seeds, min-max band) and train loss (smoothed) */
int plot_compare(const char* path, const config* c, const char* title, const char* train_title,
                 const band* val, const band* train, int n, double unigram);
/* lr_sweep.svg: final validation loss against the learning rate (log x, ticks at b[0].x) per
   preset, presets side by side at each lr */
int plot_lr_sweep(const char* path, const config* c, const band* b, int n, double unigram);
/* accuracy.svg: held-out answer accuracy (y in [0, 1]) as bars, one group per lr (b[k].x) */
int plot_accuracy(const char* path, const config* c, const band* b, int n);

#endif
