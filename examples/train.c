/* train: a byte-level language model around a normblocks stack, trained with AdamW.

   Model   token embedding (256 x d) -> normblocks stack (any preset or per-layer schedule,
           with the stack's own final norm) -> untied head (256 x d) -> mean cross-entropy.
   Data    default: a synthetic task made here, multi-digit addition written as text
           ("123+45=168\n"); the loss counts only the answer bytes (digits and the closing
           newline), and pairs (a, b) with hash(a, b) % 10 == 0 are held out for validation.
           --data FILE: any file as a byte-level corpus, the last --val-frac held out.
   Output  one line per interval (loss, validation loss, gradient norm, tokens/s, ETA);
           checkpoints in safetensors format (PyTorch-style names, Adam moments as
           optimizer.m.<name> / optimizer.v.<name>, step and config in __metadata__);
           --diag DIR: per-layer CSVs and SVG plots; --compare a,b,c: one run per preset,
           a table and an SVG with all loss curves.

   Build and run (from the repository root):
       cmake -S . -B build -DCMAKE_BUILD_TYPE=Release && cmake --build build -j2 && ./build/train
   normblocks does the threading (--threads N): run with OPENBLAS_NUM_THREADS=1, and on recent
   Xeons with OPENBLAS_CORETYPE=SkylakeX (or Haswell), see the README.

   ./build/train --help lists every option. */
#define _POSIX_C_SOURCE 200809L
#define NORMBLOCKS_IMPLEMENTATION
#include "normblocks.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>

#ifdef _OPENMP
#define TR_OMP(x) _Pragma(#x)
#else
#define TR_OMP(x)
#endif

/* checkpoints store F32: the trainer is built for float nb_real */
typedef char tr_nb_real_is_float[sizeof(nb_real) == 4 ? 1 : -1];

enum { VOCAB = 256, MAX_LAYERS = 64, MAX_COMPARE = 16 };

/* ---- small utilities --------------------------------------------------------------------- */

static volatile sig_atomic_t g_stop = 0;
static void on_sigint(int sig) { (void)sig; g_stop = 1; }

static int fail(const char* fmt, ...) {
    va_list ap;
    fprintf(stderr, "train: error: ");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n");
    return 1;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static unsigned long long mix64(unsigned long long* s) { /* splitmix64 */
    unsigned long long z = (*s += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}
static unsigned long long hash3(unsigned long long a, unsigned long long b, unsigned long long c) {
    unsigned long long s = a * 0x9E3779B97F4A7C15ULL ^ (b + 0x632BE59BD9B4E019ULL) * 0xD1B54A32D192ED03ULL
                           ^ (c + 0x8CB92BA72F3D8DD7ULL) * 0xA24BAED4963EE407ULL;
    mix64(&s);
    return mix64(&s);
}
static unsigned long long rnd_below(unsigned long long* s, unsigned long long n) {
    return n ? mix64(s) % n : 0;
}

static void* xcalloc(size_t n, size_t size) {
    void* p = calloc(n ? n : 1, size);
    if (!p) {
        fprintf(stderr, "train: error: out of memory (%zu x %zu bytes)\n", n, size);
        exit(1); /* the only exit: nothing sensible can continue without memory */
    }
    return p;
}

static int parse_int(const char* s, int lo, int hi, int* out, const char* what) {
    char* end;
    long v;
    errno = 0;
    v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        return fail("%s: \"%s\" is not an integer in [%d, %d]", what, s, lo, hi);
    *out = (int)v;
    return 0;
}
static int parse_double(const char* s, double lo, double hi, double* out, const char* what) {
    char* end;
    double v;
    errno = 0;
    v = strtod(s, &end);
    if (errno || end == s || *end || !(v >= lo && v <= hi))
        return fail("%s: \"%s\" is not a number in [%g, %g]", what, s, lo, hi);
    *out = v;
    return 0;
}

static int make_dir(const char* dir) {
    struct stat st;
    if (stat(dir, &st) == 0) {
        if (S_ISDIR(st.st_mode)) return 0;
        return fail("%s exists and is not a directory", dir);
    }
    if (mkdir(dir, 0777) != 0) return fail("cannot create directory %s: %s", dir, strerror(errno));
    return 0;
}

static FILE* open_in(const char* dir, const char* name, char* path, size_t n) {
    FILE* f;
    snprintf(path, n, "%s/%s", dir, name);
    f = fopen(path, "w");
    if (!f) fail("cannot write %s: %s", path, strerror(errno));
    return f;
}

static void fmt_time(double s, char* buf, size_t n) {
    const long t = s > 0 && s < 1e9 ? (long)(s + 0.5) : 0;
    if (t >= 3600) snprintf(buf, n, "%ldh%02ldm", t / 3600, t / 60 % 60);
    else if (t >= 60) snprintf(buf, n, "%ldm%02lds", t / 60, t % 60);
    else snprintf(buf, n, "%lds", t);
}

/* ---- configuration ----------------------------------------------------------------------- */

typedef struct config {
    /* model */
    char preset[64];          /* preset name, or "custom" with schedule */
    char schedule[512];       /* --schedule: comma-separated layer kinds */
    int d_model, n_layers, n_heads, n_kv_heads, d_ff, rope;
    char ffn[16], norm[16], init[24];
    /* training */
    int batch, seq, steps, warmup, threads, log_every, eval_batches, save_every, stop_after;
    double lr, min_lr_frac, wd, beta1, beta2, adam_eps, clip;
    unsigned long long seed;
    /* data */
    const char* data;         /* NULL: the addition task */
    int digits, reverse;
    double val_frac;
    /* files */
    const char* save;         /* checkpoint written at the end (and on Ctrl-C) */
    const char* resume;
    const char* diag;
    const char* compare;
    const char* out;
    int quiet;
} config;

static void config_defaults(config* c) {
    memset(c, 0, sizeof *c);
    snprintf(c->preset, sizeof c->preset, "pre");
    c->d_model = 128; c->n_layers = 4; c->n_heads = 4; c->rope = 1;
    snprintf(c->ffn, sizeof c->ffn, "swiglu");
    snprintf(c->norm, sizeof c->norm, "rms");
    snprintf(c->init, sizeof c->init, "normal");
    c->batch = 16; c->seq = 64; c->steps = 600; c->warmup = 50; c->log_every = 50;
    c->eval_batches = 4;
    c->lr = 3e-3; c->min_lr_frac = 0.1; c->wd = 0.1; c->beta1 = 0.9; c->beta2 = 0.95;
    c->adam_eps = 1e-8; c->clip = 1.0; c->seed = 1337;
    c->digits = 3; c->val_frac = 0.1;
}

static void usage(void) {
    printf(
"usage: train [options]\n"
"model\n"
"  --preset NAME      block placement: pre, post, mixln, hybrid, hybrid_star, siamese, sandwich,\n"
"                     olmo2, deepnorm, ... or paper names (Pre-Norm, HybridNorm*, QKV-Post,\n"
"                     Pre-QK-Pre, Mix-LN, ...)                                 [pre]\n"
"  --schedule LIST    per-layer schedule instead of a preset, one kind per layer, from: pre,\n"
"                     post, sandwich, normafter, hybrid (QKV-Post), qkvpre, prepost, postpre;\n"
"                     sets the number of layers (e.g. --schedule post,pre,pre,hybrid)\n"
"  --d N --layers N --heads N --kv-heads N --ff N       [128 4 4 heads 8d/3->64]\n"
"  --ffn swiglu|gelu  --norm rms|layer  --no-rope\n"
"  --init normal|depth_scaled|megatron|mitchell|mixln|mixln_scaled|gpt2|deepnorm  [normal]\n"
"training\n"
"  --steps N [600]  --batch B [16]  --seq T [64]  --lr X [3e-3]  --warmup N [50]\n"
"  --min-lr F         cosine floor as a fraction of lr [0.1]\n"
"  --wd X [0.1]  --beta1 X [0.9]  --beta2 X [0.95]  --adam-eps X [1e-8]  --clip X [1.0]\n"
"  --seed N [1337]  --threads N [0 = OpenMP default]\n"
"  --log-every N [50]  --eval-batches N [4]\n"
"data\n"
"  (default)          synthetic addition, loss on answer digits; --digits N [3], --reverse\n"
"                     writes answers least significant digit first (much easier)\n"
"  --data FILE        byte-level corpus; --val-frac F held out [0.1]\n"
"files\n"
"  --save FILE        checkpoint at the end and on Ctrl-C (default on Ctrl-C: train.safetensors)\n"
"  --save-every N     also every N steps\n"
"  --stop-after N     stop after step N of the --steps schedule (save, resume later)\n"
"  --resume FILE      continue from a checkpoint (same model flags required)\n"
"  --diag DIR         per-layer CSVs and SVG plots\n"
"  --compare LIST     train each preset of LIST (comma-separated) with the same seed and data;\n"
"                     prints a table, writes compare.svg/.csv to --diag DIR or --out DIR [.]\n"
"  --quiet            no progress lines\n"
"Run with OPENBLAS_NUM_THREADS=1: normblocks does its own threading.\n");
}

static int parse_args(int argc, char** argv, config* c, int* help) {
    int i;
    *help = 0;
    for (i = 1; i < argc; i++) {
        const char* a = argv[i];
        const char* v = i + 1 < argc ? argv[i + 1] : NULL;
        int rc = 0, used = 1;
        double x;
#define NEEDV if (!v) return fail("%s needs a value (see --help)", a)
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { *help = 1; return 0; }
        else if (!strcmp(a, "--no-rope")) { c->rope = 0; used = 0; }
        else if (!strcmp(a, "--reverse")) { c->reverse = 1; used = 0; }
        else if (!strcmp(a, "--quiet")) { c->quiet = 1; used = 0; }
        else if (!strcmp(a, "--preset")) {
            NEEDV;
            if (strlen(v) >= sizeof c->preset) return fail("--preset: name too long");
            snprintf(c->preset, sizeof c->preset, "%s", v);
        } else if (!strcmp(a, "--schedule")) {
            NEEDV;
            if (strlen(v) >= sizeof c->schedule) return fail("--schedule: too long");
            snprintf(c->schedule, sizeof c->schedule, "%s", v);
        } else if (!strcmp(a, "--ffn")) {
            NEEDV;
            if (strcmp(v, "swiglu") && strcmp(v, "gelu")) return fail("--ffn: swiglu or gelu, not \"%s\"", v);
            snprintf(c->ffn, sizeof c->ffn, "%s", v);
        } else if (!strcmp(a, "--norm")) {
            NEEDV;
            if (strcmp(v, "rms") && strcmp(v, "layer")) return fail("--norm: rms or layer, not \"%s\"", v);
            snprintf(c->norm, sizeof c->norm, "%s", v);
        } else if (!strcmp(a, "--init")) {
            NEEDV;
            if (strlen(v) >= sizeof c->init) return fail("--init: unknown scheme \"%s\"", v);
            snprintf(c->init, sizeof c->init, "%s", v);
        }
        else if (!strcmp(a, "--d")) { NEEDV; rc = parse_int(v, 1, 1 << 16, &c->d_model, a); }
        else if (!strcmp(a, "--layers")) { NEEDV; rc = parse_int(v, 1, MAX_LAYERS, &c->n_layers, a); }
        else if (!strcmp(a, "--heads")) { NEEDV; rc = parse_int(v, 1, 1 << 12, &c->n_heads, a); }
        else if (!strcmp(a, "--kv-heads")) { NEEDV; rc = parse_int(v, 0, 1 << 12, &c->n_kv_heads, a); }
        else if (!strcmp(a, "--ff")) { NEEDV; rc = parse_int(v, 0, 1 << 18, &c->d_ff, a); }
        else if (!strcmp(a, "--steps")) { NEEDV; rc = parse_int(v, 0, 100000000, &c->steps, a); }
        else if (!strcmp(a, "--batch")) { NEEDV; rc = parse_int(v, 1, 1 << 16, &c->batch, a); }
        else if (!strcmp(a, "--seq")) { NEEDV; rc = parse_int(v, 2, 1 << 16, &c->seq, a); }
        else if (!strcmp(a, "--warmup")) { NEEDV; rc = parse_int(v, 0, 100000000, &c->warmup, a); }
        else if (!strcmp(a, "--threads")) { NEEDV; rc = parse_int(v, 0, 1024, &c->threads, a); }
        else if (!strcmp(a, "--log-every")) { NEEDV; rc = parse_int(v, 1, 100000000, &c->log_every, a); }
        else if (!strcmp(a, "--eval-batches")) { NEEDV; rc = parse_int(v, 1, 100000, &c->eval_batches, a); }
        else if (!strcmp(a, "--stop-after")) { NEEDV; rc = parse_int(v, 0, 100000000, &c->stop_after, a); }
        else if (!strcmp(a, "--save-every")) { NEEDV; rc = parse_int(v, 0, 100000000, &c->save_every, a); }
        else if (!strcmp(a, "--digits")) { NEEDV; rc = parse_int(v, 1, 9, &c->digits, a); }
        else if (!strcmp(a, "--lr")) { NEEDV; rc = parse_double(v, 0, 10, &c->lr, a); }
        else if (!strcmp(a, "--min-lr")) { NEEDV; rc = parse_double(v, 0, 1, &c->min_lr_frac, a); }
        else if (!strcmp(a, "--wd")) { NEEDV; rc = parse_double(v, 0, 10, &c->wd, a); }
        else if (!strcmp(a, "--beta1")) { NEEDV; rc = parse_double(v, 0, 0.999999, &c->beta1, a); }
        else if (!strcmp(a, "--beta2")) { NEEDV; rc = parse_double(v, 0, 0.999999999, &c->beta2, a); }
        else if (!strcmp(a, "--adam-eps")) { NEEDV; rc = parse_double(v, 1e-30, 1, &c->adam_eps, a); }
        else if (!strcmp(a, "--clip")) { NEEDV; rc = parse_double(v, 0, 1e30, &c->clip, a); }
        else if (!strcmp(a, "--val-frac")) { NEEDV; rc = parse_double(v, 1e-6, 0.9, &c->val_frac, a); }
        else if (!strcmp(a, "--seed")) {
            NEEDV;
            rc = parse_double(v, 0, 9007199254740992.0, &x, a);
            if (!rc && x != floor(x)) rc = fail("--seed: \"%s\" is not an integer", v);
            c->seed = (unsigned long long)x;
        }
        else if (!strcmp(a, "--data")) { NEEDV; c->data = v; }
        else if (!strcmp(a, "--save")) { NEEDV; c->save = v; }
        else if (!strcmp(a, "--resume")) { NEEDV; c->resume = v; }
        else if (!strcmp(a, "--diag")) { NEEDV; c->diag = v; }
        else if (!strcmp(a, "--compare")) { NEEDV; c->compare = v; }
        else if (!strcmp(a, "--out")) { NEEDV; c->out = v; }
        else return fail("unknown option \"%s\" (see --help)", a);
#undef NEEDV
        if (rc) return rc;
        i += used;
    }
    return 0;
}

/* the scheme names of nb_init_scheme */
static int init_scheme(const char* name, nb_init_scheme* out) {
    static const char* names[] = {"normal", "depth_scaled", "megatron", "mitchell", "mixln",
                                  "mixln_scaled", "gpt2", "deepnorm"};
    int i;
    for (i = 0; i < 8; i++)
        if (!strcmp(name, names[i])) { *out = (nb_init_scheme)(NB_INIT_NORMAL + i); return 0; }
    return fail("--init: unknown scheme \"%s\" (normal, depth_scaled, megatron, mitchell, mixln, "
                "mixln_scaled, gpt2, deepnorm)", name);
}

/* One layer kind of --schedule. */
static int layer_kind(const char* k, nb_layer_desc* ld) {
    nb_placement none, pre, from_norm, post, sand, after;
    memset(ld, 0, sizeof *ld);
    memset(&none, 0, sizeof none);
    pre = none; pre.input_norm = 1;
    from_norm = pre; from_norm.residual_from_norm = 1;
    post = none; post.post_norm = 1;
    sand = pre; sand.output_norm = 1;
    after = none; after.output_norm = 1;
    if (!strcmp(k, "pre")) { ld->attn = ld->ffn = pre; }
    else if (!strcmp(k, "post")) { ld->attn = ld->ffn = post; }
    else if (!strcmp(k, "sandwich")) { ld->attn = ld->ffn = sand; }
    else if (!strcmp(k, "normafter")) { ld->attn = ld->ffn = after; }
    else if (!strcmp(k, "hybrid")) { ld->attn = none; ld->ffn = from_norm; ld->sites = NB_SITES_QKV; }
    else if (!strcmp(k, "qkvpre")) { ld->attn = none; ld->ffn = pre; ld->sites = NB_SITES_QKV; }
    else if (!strcmp(k, "prepost")) { ld->attn = pre; ld->ffn = from_norm; }
    else if (!strcmp(k, "postpre")) { ld->attn = from_norm; ld->ffn = pre; }
    else return fail("--schedule: unknown layer kind \"%s\" (pre, post, sandwich, normafter, "
                     "hybrid, qkvpre, prepost, postpre)", k);
    return 0;
}

/* Build the stack description from the config (preset name or schedule). layers: storage for
   a schedule (MAX_LAYERS). */
static int make_desc(const config* c, nb_stack_desc* d, nb_layer_desc* layers, int* n_layers) {
    nb_ctx ctx;
    memset(&ctx, 0, sizeof ctx);
    memset(d, 0, sizeof *d);
    *n_layers = c->n_layers;
    if (c->schedule[0]) {
        char buf[sizeof c->schedule], *tok, *save = NULL;
        int n = 0;
        snprintf(buf, sizeof buf, "%s", c->schedule);
        for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
            if (n >= MAX_LAYERS) return fail("--schedule: more than %d layers", MAX_LAYERS);
            if (layer_kind(tok, &layers[n])) return 1;
            n++;
        }
        if (n == 0) return fail("--schedule: empty");
        *n_layers = n;
        d->layers = layers;
    } else if (nb_preset_from_name(&ctx, d, c->preset) != NB_OK) {
        return fail("%s", ctx.err);
    }
    d->n_layers = *n_layers;
    d->d_model = c->d_model;
    d->n_heads = c->n_heads;
    d->n_kv_heads = c->n_kv_heads;
    d->d_ff = c->d_ff;
    d->rope = c->rope;
    if (!strcmp(c->ffn, "gelu")) d->ffn = NB_FFN_GELU_TANH;
    else if (d->ffn == NB_FFN_DEFAULT) d->ffn = NB_FFN_SWIGLU;
    if (!strcmp(c->norm, "layer")) d->norm = NB_NORM_LAYER;
    return 0;
}

/* ---- data --------------------------------------------------------------------------------- */

typedef struct dataset {
    int text;                      /* 1: byte corpus, 0: addition */
    unsigned char* bytes;          /* corpus */
    size_t n, n_train;             /* corpus size, train split [0, n_train), val after */
    int digits, reverse;
    unsigned long long seed;
} dataset;

static int add_is_val(unsigned long long a, unsigned long long b) {
    return hash3(a, b, 77) % 10 == 0;
}

static unsigned long long pow10u(int k) {
    unsigned long long p = 1;
    while (k-- > 0) p *= 10;
    return p;
}

/* one operand: a digit count uniform in 1..digits, then a value uniform with that many digits */
static unsigned long long add_operand(unsigned long long* st, int digits) {
    const int k = 1 + (int)rnd_below(st, (unsigned long long)digits);
    const unsigned long long lo = k == 1 ? 0 : pow10u(k - 1), hi = pow10u(k);
    return lo + rnd_below(st, hi - lo);
}

/* "a+b=" into buf, returns its length; *sum = a + b */
static int add_problem(const dataset* ds, unsigned long long* st, int val, char* buf,
                       unsigned long long* sum) {
    unsigned long long a, b;
    do {
        a = add_operand(st, ds->digits);
        b = add_operand(st, ds->digits);
    } while (add_is_val(a, b) != val);
    *sum = a + b;
    return sprintf(buf, "%llu+%llu=", a, b);
}

static int add_answer(const dataset* ds, unsigned long long sum, char* buf) {
    int n = sprintf(buf, "%llu", sum), i;
    if (ds->reverse)
        for (i = 0; i < n / 2; i++) { char t = buf[i]; buf[i] = buf[n - 1 - i]; buf[n - 1 - i] = t; }
    buf[n++] = '\n';
    buf[n] = 0;
    return n;
}

/* Fill one row of T+1 tokens and T loss-mask flags (mask[t] = target tok[t+1] counts). */
static void add_row(const dataset* ds, unsigned long long st, int val, int T, int* tok,
                    unsigned char* mask) {
    int n = 0, i;
    unsigned char* ans = (unsigned char*)xcalloc((size_t)T + 1, 1);
    while (n < T + 1) {
        char q[64], r[32];
        unsigned long long sum;
        const int lq = add_problem(ds, &st, val, q, &sum), lr = add_answer(ds, sum, r);
        for (i = 0; i < lq && n < T + 1; i++, n++) { tok[n] = (unsigned char)q[i]; ans[n] = 0; }
        for (i = 0; i < lr && n < T + 1; i++, n++) { tok[n] = (unsigned char)r[i]; ans[n] = 1; }
    }
    for (i = 0; i < T; i++) mask[i] = ans[i + 1];
    free(ans);
}

/* Training batch of `step`: a pure function of (seed, step), so a resumed run sees the same data. */
static void train_batch(const dataset* ds, int step, int B, int T, int* tok, unsigned char* mask) {
    int b, i;
    for (b = 0; b < B; b++) {
        unsigned long long st = hash3(ds->seed, (unsigned long long)step + 1, (unsigned long long)b + 1);
        int* tr = tok + (size_t)b * (T + 1);
        unsigned char* mr = mask + (size_t)b * T;
        if (ds->text) {
            const size_t off = (size_t)rnd_below(&st, ds->n_train - (size_t)T);
            for (i = 0; i <= T; i++) tr[i] = ds->bytes[off + (size_t)i];
            memset(mr, 1, (size_t)T);
        } else {
            add_row(ds, st, 0, T, tr, mr);
        }
    }
}

/* Validation batch k of nb: fixed windows spread over the held-out split. */
static void val_batch(const dataset* ds, int k, int nb, int B, int T, int* tok, unsigned char* mask) {
    int b, i;
    for (b = 0; b < B; b++) {
        const int row = k * B + b, rows = nb * B;
        int* tr = tok + (size_t)b * (T + 1);
        unsigned char* mr = mask + (size_t)b * T;
        if (ds->text) {
            const size_t span = ds->n - ds->n_train - (size_t)T - 1;
            const size_t off = ds->n_train + (rows > 1 ? span * (size_t)row / (size_t)(rows - 1) : 0);
            for (i = 0; i <= T; i++) tr[i] = ds->bytes[off + (size_t)i];
            memset(mr, 1, (size_t)T);
        } else {
            add_row(ds, hash3(ds->seed ^ 0x5EEDULL, 0xFA11ULL, (unsigned long long)row + 1), 1, T, tr, mr);
        }
    }
}

static int load_data(const config* c, dataset* ds) {
    memset(ds, 0, sizeof *ds);
    ds->seed = c->seed;
    ds->digits = c->digits;
    ds->reverse = c->reverse;
    if (!c->data) {
        const int need = 3 * c->digits + 4; /* "a+b=" plus the longest answer and newline */
        if (c->seq < need)
            return fail("--seq %d is too short for %d-digit addition (need at least %d)", c->seq,
                        c->digits, need);
        return 0;
    }
    {
        FILE* f = fopen(c->data, "rb");
        long sz;
        size_t min_val;
        if (!f) return fail("cannot open data file %s: %s", c->data, strerror(errno));
        if (fseek(f, 0, SEEK_END) != 0 || (sz = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0) {
            fclose(f);
            return fail("cannot read data file %s (not a regular file?)", c->data);
        }
        if (sz == 0) { fclose(f); return fail("data file %s is empty", c->data); }
        ds->bytes = (unsigned char*)xcalloc((size_t)sz, 1);
        if (fread(ds->bytes, 1, (size_t)sz, f) != (size_t)sz) {
            fclose(f);
            free(ds->bytes);
            ds->bytes = NULL;
            return fail("cannot read data file %s", c->data);
        }
        fclose(f);
        ds->text = 1;
        ds->n = (size_t)sz;
        min_val = (size_t)(c->val_frac * (double)ds->n);
        if (min_val < (size_t)c->seq + 2) min_val = (size_t)c->seq + 2;
        if (ds->n < min_val + (size_t)c->seq + 2) {
            free(ds->bytes);
            ds->bytes = NULL;
            return fail("data file %s has %zu bytes: too small for --seq %d with a held-out "
                        "split (need at least %zu)", c->data, ds->n, c->seq,
                        min_val + (size_t)c->seq + 2);
        }
        ds->n_train = ds->n - min_val;
    }
    return 0;
}

/* Entropy (nats) of the unigram distribution of the training targets the loss counts. */
static double unigram_entropy(const dataset* ds, int T) {
    double cnt[VOCAB] = {0}, tot = 0, h = 0;
    int i;
    if (ds->text) {
        size_t k;
        for (k = 1; k < ds->n_train; k++) cnt[ds->bytes[k]] += 1;
    } else {
        int* tok = (int*)xcalloc((size_t)T + 1, sizeof(int));
        unsigned char* mask = (unsigned char*)xcalloc((size_t)T, 1);
        int r, t;
        for (r = 0; r < 2000; r++) {
            add_row(ds, hash3(ds->seed ^ 0xC0DEULL, 3, (unsigned long long)r), 0, T, tok, mask);
            for (t = 0; t < T; t++) if (mask[t]) cnt[tok[t + 1]] += 1;
        }
        free(tok);
        free(mask);
    }
    for (i = 0; i < VOCAB; i++) tot += cnt[i];
    for (i = 0; i < VOCAB; i++)
        if (cnt[i] > 0) h -= cnt[i] / tot * log(cnt[i] / tot);
    return h;
}

/* ---- model -------------------------------------------------------------------------------- */

typedef struct model {
    nb_ctx ctx;
    nb_stack s;
    nb_layer_desc layers[MAX_LAYERS];
    int d, B, T;
    size_t n, off_stack, off_head;     /* params: [wte | stack | head] */
    nb_real *p, *g, *m, *v;            /* parameters, gradients, Adam moments */
    unsigned char* decay;              /* per parameter: 1 = weight decay applies */
    nb_real *x, *h, *dh, *dx, *logits, *cache, *scratch;
    double* row_loss;
    int* tok;
    unsigned char* mask;
    long long adam_t;                  /* optimizer steps taken */
} model;

/* checkpoint tensor table: name, offset, rows, cols (cols 0 = a 1-D tensor) */
typedef struct ck_tensor { char name[96]; size_t off; int rows, cols; } ck_tensor;

static void model_free(model* m) {
    nb_stack_free(&m->s);
    free(m->p); free(m->g); free(m->m); free(m->v); free(m->decay);
    free(m->x); free(m->h); free(m->dh); free(m->dx); free(m->logits);
    free(m->cache); free(m->scratch); free(m->row_loss); free(m->tok); free(m->mask);
    memset(m, 0, sizeof *m);
}

static int model_init(model* m, const config* c) {
    nb_stack_desc d;
    nb_init_scheme scheme = NB_INIT_NORMAL;
    double estd, hstd;
    size_t bt, i;
    int L, t;
    memset(m, 0, sizeof *m);
    m->ctx.num_threads = c->threads;
    if (init_scheme(c->init, &scheme)) return 1;
    if (make_desc(c, &d, m->layers, &L)) return 1;
    if (nb_stack_init(&m->ctx, &m->s, &d, c->batch, c->seq) != NB_OK)
        return fail("invalid model: %s", m->ctx.err);
    m->d = c->d_model; m->B = c->batch; m->T = c->seq;
    bt = (size_t)m->B * m->T;
    m->off_stack = (size_t)VOCAB * m->d;
    m->off_head = m->off_stack + m->s.n_params;
    m->n = m->off_head + (size_t)VOCAB * m->d;
    m->p = (nb_real*)xcalloc(m->n, sizeof(nb_real));
    m->g = (nb_real*)xcalloc(m->n, sizeof(nb_real));
    m->m = (nb_real*)xcalloc(m->n, sizeof(nb_real));
    m->v = (nb_real*)xcalloc(m->n, sizeof(nb_real));
    m->decay = (unsigned char*)xcalloc(m->n, 1);
    m->x = (nb_real*)xcalloc(bt * m->d, sizeof(nb_real));
    m->h = (nb_real*)xcalloc(bt * m->d, sizeof(nb_real));
    m->dh = (nb_real*)xcalloc(bt * m->d, sizeof(nb_real));
    m->dx = (nb_real*)xcalloc(bt * m->d, sizeof(nb_real));
    m->logits = (nb_real*)xcalloc(bt * VOCAB, sizeof(nb_real));
    m->cache = (nb_real*)xcalloc(m->s.n_cache, sizeof(nb_real));
    m->scratch = (nb_real*)xcalloc(m->s.n_scratch, sizeof(nb_real));
    m->row_loss = (double*)xcalloc(bt, sizeof(double));
    m->tok = (int*)xcalloc((size_t)m->B * (m->T + 1), sizeof(int));
    m->mask = (unsigned char*)xcalloc(bt, 1);
    /* weight decay: embedding and head yes; stack tensors per the table's no_decay */
    for (i = 0; i < m->off_stack; i++) m->decay[i] = 1;
    for (i = m->off_head; i < m->n; i++) m->decay[i] = 1;
    for (t = 0; t < m->s.n_tensors; t++) {
        const nb_tensor_info* ti = &m->s.tensors[t];
        memset(m->decay + m->off_stack + ti->offset, ti->no_decay ? 0 : 1, ti->count);
    }
    /* init: the stack per scheme; embedding and head with the scheme's io std, derived seeds */
    if (nb_stack_init_params(&m->ctx, &m->s, m->p + m->off_stack, scheme, 0, c->seed) != NB_OK)
        return fail("init: %s", m->ctx.err);
    nb_init_io_std(&m->s, scheme, 0, &estd, &hstd);
    nb_fill_normal(m->p, m->off_stack, estd, 3, c->seed ^ 0x57E0000000000001ULL);
    nb_fill_normal(m->p + m->off_head, (size_t)VOCAB * m->d, hstd, 3, c->seed ^ 0x4EAD000000000002ULL);
    return 0;
}

/* The checkpoint's parameter tensors in buffer order. Returns the count; table may be NULL. */
static int model_tensors(const model* m, ck_tensor* table) {
    int t, n = 0;
    if (table) {
        snprintf(table[n].name, sizeof table[n].name, "transformer.wte.weight");
        table[n].off = 0; table[n].rows = VOCAB; table[n].cols = m->d;
    }
    n++;
    for (t = 0; t < m->s.n_tensors; t++, n++) {
        const nb_tensor_info* ti = &m->s.tensors[t];
        if (!table) continue;
        snprintf(table[n].name, sizeof table[n].name, "transformer.%s", ti->name);
        table[n].off = m->off_stack + ti->offset;
        table[n].rows = ti->rows;
        table[n].cols = ti->cols == 1 && ti->kind != NB_TENSOR_QKV && ti->kind != NB_TENSOR_ATTN_OUT &&
                        ti->kind != NB_TENSOR_FF_IN && ti->kind != NB_TENSOR_FF_OUT ? 0 : ti->cols;
    }
    if (table) {
        snprintf(table[n].name, sizeof table[n].name, "lm_head.weight");
        table[n].off = m->off_head; table[n].rows = VOCAB; table[n].cols = m->d;
    }
    return n + 1;
}

static size_t tensor_count(const ck_tensor* t) { return (size_t)t->rows * (size_t)(t->cols ? t->cols : 1); }

/* Forward (and with train != 0, backward into m->g) on m->tok / m->mask. *out gets the mean
   loss over the masked targets, *count their number. Returns 1 on failure (message printed). */
static int model_step(model* m, int train, double* count, double* out) {
    const int B = m->B, T = m->T, d = m->d, nt = nb_num_threads(&m->ctx);
    const long long bt = (long long)B * T;
    const nb_real* wte = m->p;
    const nb_real* head = m->p + m->off_head;
    double loss = 0, cnt = 0;
    long long r;
    for (r = 0; r < bt; r++) cnt += m->mask[r] ? 1 : 0;
    *count = cnt;
    TR_OMP(omp parallel for schedule(static) num_threads(nt))
    for (r = 0; r < bt; r++) {
        const int tk = m->tok[(r / T) * (T + 1) + r % T];
        memcpy(m->x + r * d, wte + (size_t)tk * d, (size_t)d * sizeof(nb_real));
    }
    if (nb_stack_forward(&m->ctx, &m->s, m->p + m->off_stack, m->h, m->x, B, T, m->cache,
                         m->scratch) != NB_OK) {
        fail("forward: %s", m->ctx.err);
        return 1;
    }
    nb_gemm(&m->ctx, 0, 1, (int)bt, VOCAB, d, 1, m->h, d, head, d, 0, m->logits, VOCAB);
    {
        const double inv = cnt > 0 ? 1.0 / cnt : 0;
        TR_OMP(omp parallel for schedule(static) num_threads(nt))
        for (r = 0; r < bt; r++) {
            nb_real* z = m->logits + r * VOCAB;
            const int target = m->tok[(r / T) * (T + 1) + r % T + 1];
            double mx = z[0], se = 0;
            int k;
            if (!m->mask[r]) {
                m->row_loss[r] = 0;
                if (train) memset(z, 0, VOCAB * sizeof(nb_real));
                continue;
            }
            for (k = 1; k < VOCAB; k++) if (z[k] > mx) mx = z[k];
            for (k = 0; k < VOCAB; k++) se += exp((double)z[k] - mx);
            m->row_loss[r] = mx + log(se) - (double)z[target];
            if (train) { /* z becomes dlogits = (softmax - onehot) / count */
                for (k = 0; k < VOCAB; k++) z[k] = (nb_real)(exp((double)z[k] - mx) / se * inv);
                z[target] -= (nb_real)inv;
            }
        }
    }
    for (r = 0; r < bt; r++) loss += m->row_loss[r];
    loss = cnt > 0 ? loss / cnt : 0;
    *out = loss;
    if (!train) return 0;
    /* backward: head, stack, embedding */
    memset(m->g, 0, m->n * sizeof(nb_real));
    nb_gemm(&m->ctx, 1, 0, VOCAB, d, (int)bt, 1, m->logits, VOCAB, m->h, d, 0, m->g + m->off_head, d);
    nb_gemm(&m->ctx, 0, 0, (int)bt, d, VOCAB, 1, m->logits, VOCAB, head, d, 0, m->dh, d);
    if (nb_stack_backward(&m->ctx, &m->s, m->p + m->off_stack, m->g + m->off_stack, m->dx, m->dh,
                          B, T, m->cache, m->scratch) != NB_OK) {
        fail("backward: %s", m->ctx.err);
        return 1;
    }
    for (r = 0; r < bt; r++) { /* serial scatter-add: a fixed order, bitwise reproducible */
        const int tk = m->tok[(r / T) * (T + 1) + r % T];
        nb_real* gw = m->g + (size_t)tk * d;
        const nb_real* dx = m->dx + r * d;
        int k;
        for (k = 0; k < d; k++) gw[k] += dx[k];
    }
    return 0;
}

static double global_norm(const model* m) {
    double ss = 0;
    size_t i;
    for (i = 0; i < m->n; i++) ss += (double)m->g[i] * m->g[i];
    return sqrt(ss);
}

/* linear warmup to lr, then cosine to min_lr_frac * lr at the last step */
static double lr_at(const config* c, int step) {
    const double floor_lr = c->lr * c->min_lr_frac;
    double p;
    if (step < c->warmup) return c->lr * (step + 1) / c->warmup;
    if (c->steps <= c->warmup + 1) return c->lr;
    p = (double)(step - c->warmup) / (double)(c->steps - 1 - c->warmup);
    if (p > 1) p = 1;
    return floor_lr + 0.5 * (c->lr - floor_lr) * (1 + cos(3.141592653589793 * p));
}

static void adamw(model* m, const config* c, double lr, double gscale) {
    const long long n = (long long)m->n;
    const double b1 = c->beta1, b2 = c->beta2, t = (double)++m->adam_t;
    const double c1 = 1 - pow(b1, t), c2 = 1 - pow(b2, t);
    const float lrf = (float)lr, wdf = (float)(lr * c->wd), b1f = (float)b1, b2f = (float)b2;
    const float gs = (float)gscale, c1f = (float)c1, c2f = (float)c2, eps = (float)c->adam_eps;
    long long i;
    TR_OMP(omp parallel for simd schedule(static) num_threads(nb_num_threads(&m->ctx)))
    for (i = 0; i < n; i++) {
        const float g = m->g[i] * gs;
        float mi = b1f * m->m[i] + (1 - b1f) * g, vi = b2f * m->v[i] + (1 - b2f) * g * g;
        float p = m->p[i];
        if (m->decay[i]) p -= wdf * p;
        m->m[i] = mi;
        m->v[i] = vi;
        m->p[i] = p - lrf * (mi / c1f) / (sqrtf(vi / c2f) + eps);
    }
}

static double evaluate(model* m, const dataset* ds, int nb) {
    double tot = 0, cnt = 0, c, l;
    int k;
    for (k = 0; k < nb; k++) {
        val_batch(ds, k, nb, m->B, m->T, m->tok, m->mask);
        if (model_step(m, 0, &c, &l)) return NAN;
        tot += l * c;
        cnt += c;
    }
    return cnt > 0 ? tot / cnt : 0;
}

/* Exact-match accuracy of greedy answers on n held-out addition problems. */
static double answer_accuracy(model* m, const dataset* ds, int n) {
    const int B = m->B, T = m->T;
    int done = 0, right = 0, b, k, t;
    unsigned long long st = hash3(ds->seed, 0xACC, 1);
    while (done < n) {
        char want[64][32], got[64][32];
        int len[64], pos[64], alive[64], nb = B < 64 ? B : 64;
        if (nb > n - done) nb = n - done;
        for (b = 0; b < B; b++) {
            char q[64];
            unsigned long long sum;
            int lq = 0;
            int* tr = m->tok + (size_t)b * (T + 1);
            for (t = 0; t <= T; t++) tr[t] = '\n';
            if (b < nb) {
                lq = add_problem(ds, &st, 1, q, &sum);
                add_answer(ds, sum, want[b]);
                for (t = 0; t < lq; t++) tr[t] = (unsigned char)q[t];
                len[b] = 0; pos[b] = lq - 1; alive[b] = 1;
            } else alive[b] = 0;
            memset(m->mask + (size_t)b * T, 0, (size_t)T);
        }
        for (k = 0; k < ds->digits + 2; k++) {
            double c, l;
            int any = 0;
            for (b = 0; b < nb; b++) any |= alive[b];
            if (!any) break;
            if (model_step(m, 0, &c, &l)) return NAN;
            for (b = 0; b < nb; b++) {
                const nb_real* z;
                int best = 0, v;
                if (!alive[b]) continue;
                z = m->logits + ((size_t)b * T + (size_t)pos[b]) * VOCAB;
                for (v = 1; v < VOCAB; v++) if (z[v] > z[best]) best = v;
                got[b][len[b]++] = (char)best;
                m->tok[(size_t)b * (T + 1) + (size_t)pos[b] + 1] = best;
                pos[b]++;
                if (best == '\n' || len[b] >= 30 || pos[b] >= T - 1) alive[b] = 0;
            }
        }
        for (b = 0; b < nb; b++) {
            got[b][len[b]] = 0;
            right += !strcmp(got[b], want[b]);
        }
        done += nb;
    }
    return (double)right / n;
}

/* ---- checkpoints (safetensors) --------------------------------------------------------------- */

/* the config keys a checkpoint must match to be loaded into this model */
static void config_meta(const config* c, const model* m, cJSON* meta) {
    char buf[64];
#define PUTS(k, v) cJSON_AddStringToObject(meta, k, v)
#define PUTI(k, v) (snprintf(buf, sizeof buf, "%d", (int)(v)), PUTS(k, buf))
    PUTS("preset", c->schedule[0] ? "custom" : c->preset);
    PUTS("schedule", c->schedule);
    PUTI("n_layers", m->s.desc.n_layers);
    PUTI("d_model", m->s.desc.d_model);
    PUTI("n_heads", m->s.desc.n_heads);
    PUTI("n_kv_heads", m->s.desc.n_kv_heads);
    PUTI("d_ff", m->s.desc.d_ff);
    PUTS("ffn", c->ffn);
    PUTS("norm", c->norm);
    PUTI("rope", c->rope);
    PUTI("vocab_size", VOCAB);
#undef PUTS
#undef PUTI
}
static const char* const k_arch_keys[] = {"preset", "schedule", "n_layers", "d_model", "n_heads",
                                          "n_kv_heads", "d_ff", "ffn", "norm", "rope", "vocab_size"};

static void put_le64(unsigned char* b, unsigned long long v) {
    int i;
    for (i = 0; i < 8; i++) b[i] = (unsigned char)(v >> (8 * i));
}

static int save_checkpoint(const char* path, const config* c, const model* m, int step) {
    const int nt = model_tensors(m, NULL);
    ck_tensor* tab = (ck_tensor*)xcalloc((size_t)nt, sizeof(ck_tensor));
    cJSON *root = cJSON_CreateObject(), *meta = cJSON_CreateObject();
    char buf[128], *json = NULL, tmp[4096];
    size_t off = 0, hlen, pad;
    unsigned char le[8];
    FILE* f = NULL;
    int pass, t, rc = 1;
    model_tensors(m, tab);
    cJSON_AddItemToObject(root, "__metadata__", meta);
    cJSON_AddStringToObject(meta, "format", "pt");
    cJSON_AddStringToObject(meta, "producer", "normblocks " NB_VERSION_STRING " examples/train.c");
    snprintf(buf, sizeof buf, "%d", step);
    cJSON_AddStringToObject(meta, "step", buf);
    snprintf(buf, sizeof buf, "%lld", m->adam_t);
    cJSON_AddStringToObject(meta, "adam_step", buf);
    config_meta(c, m, meta);
    snprintf(buf, sizeof buf, "%llu", c->seed);
    cJSON_AddStringToObject(meta, "seed", buf);
    cJSON_AddStringToObject(meta, "data", c->data ? c->data : "addition");
    for (pass = 0; pass < 3; pass++) /* parameters, optimizer.m, optimizer.v */
        for (t = 0; t < nt; t++) {
            cJSON *e = cJSON_CreateObject(), *shape = cJSON_CreateArray(), *offs = cJSON_CreateArray();
            const size_t bytes = tensor_count(&tab[t]) * 4;
            snprintf(buf, sizeof buf, "%s%s", pass == 0 ? "" : pass == 1 ? "optimizer.m." : "optimizer.v.",
                     tab[t].name);
            cJSON_AddStringToObject(e, "dtype", "F32");
            cJSON_AddItemToArray(shape, cJSON_CreateNumber(tab[t].rows));
            if (tab[t].cols) cJSON_AddItemToArray(shape, cJSON_CreateNumber(tab[t].cols));
            cJSON_AddItemToObject(e, "shape", shape);
            cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)off));
            cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)(off + bytes)));
            cJSON_AddItemToObject(e, "data_offsets", offs);
            cJSON_AddItemToObject(root, buf, e);
            off += bytes;
        }
    json = cJSON_PrintUnformatted(root);
    if (!json) { fail("checkpoint: cannot build the JSON header"); goto done; }
    hlen = strlen(json);
    pad = (8 - hlen % 8) % 8; /* data starts 8-byte aligned; spaces are valid JSON padding */
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    f = fopen(tmp, "wb");
    if (!f) { fail("cannot write checkpoint %s: %s", tmp, strerror(errno)); goto done; }
    put_le64(le, hlen + pad);
    fwrite(le, 1, 8, f);
    fwrite(json, 1, hlen, f);
    for (; pad; pad--) fputc(' ', f);
    for (pass = 0; pass < 3; pass++) {
        const nb_real* base = pass == 0 ? m->p : pass == 1 ? m->m : m->v;
        for (t = 0; t < nt; t++) fwrite(base + tab[t].off, 4, tensor_count(&tab[t]), f);
    }
    if (ferror(f) | fclose(f)) {
        f = NULL;
        fail("writing checkpoint %s failed", tmp);
        remove(tmp);
        goto done;
    }
    f = NULL;
    if (rename(tmp, path) != 0) { fail("cannot rename %s to %s: %s", tmp, path, strerror(errno)); goto done; }
    rc = 0;
done:
    if (f) fclose(f);
    free(json);
    cJSON_Delete(root);
    free(tab);
    return rc;
}

static const char* meta_str(const cJSON* meta, const char* key) {
    const cJSON* v = cJSON_GetObjectItemCaseSensitive(meta, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* Load a checkpoint written by save_checkpoint into m (parameters and Adam state); *step gets
   the step. The model flags must match the checkpoint's config. */
static int load_checkpoint(const char* path, const config* c, model* m, int* step) {
    FILE* f = fopen(path, "rb");
    unsigned char le[8];
    unsigned long long hlen = 0;
    long fsz;
    char* hdr = NULL;
    unsigned char* data = NULL;
    size_t dsz;
    cJSON *root = NULL, *want = cJSON_CreateObject();
    const cJSON* meta;
    ck_tensor* tab = NULL;
    int nt, pass, t, i, rc = 1;
    if (!f) { fail("cannot open checkpoint %s: %s", path, strerror(errno)); goto done; }
    if (fseek(f, 0, SEEK_END) != 0 || (fsz = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0) {
        fail("cannot read checkpoint %s", path); goto done;
    }
    if (fsz < 8 || fread(le, 1, 8, f) != 8) {
        fail("checkpoint %s is truncated (%ld bytes, no header length)", path, fsz); goto done;
    }
    for (i = 7; i >= 0; i--) hlen = hlen << 8 | le[i];
    if (hlen < 2 || hlen > (unsigned long long)(fsz - 8) || hlen > 100000000ULL) {
        fail("checkpoint %s: bad header length %llu (file has %ld bytes); truncated or not a "
             "safetensors file", path, hlen, fsz);
        goto done;
    }
    hdr = (char*)xcalloc((size_t)hlen + 1, 1);
    dsz = (size_t)fsz - 8 - (size_t)hlen;
    data = (unsigned char*)xcalloc(dsz, 1);
    if (fread(hdr, 1, (size_t)hlen, f) != (size_t)hlen || fread(data, 1, dsz, f) != dsz) {
        fail("cannot read checkpoint %s", path); goto done;
    }
    root = cJSON_ParseWithLength(hdr, (size_t)hlen);
    if (!cJSON_IsObject(root)) { fail("checkpoint %s: the header is not valid JSON", path); goto done; }
    meta = cJSON_GetObjectItemCaseSensitive(root, "__metadata__");
    if (!cJSON_IsObject(meta)) { fail("checkpoint %s: no __metadata__ (not written by train?)", path); goto done; }
    {   /* the model config must match */
        const char* s = meta_str(meta, "step");
        char* end;
        long v;
        config_meta(c, m, want);
        for (i = 0; i < (int)(sizeof k_arch_keys / sizeof k_arch_keys[0]); i++) {
            const char* have = meta_str(meta, k_arch_keys[i]);
            const char* need = meta_str(want, k_arch_keys[i]);
            if (!have) { fail("checkpoint %s: metadata has no \"%s\"", path, k_arch_keys[i]); goto done; }
            if (strcmp(have, need)) {
                fail("checkpoint %s is from a different config: %s is \"%s\" in the checkpoint, "
                     "\"%s\" here (pass the same model flags)", path, k_arch_keys[i], have, need);
                goto done;
            }
        }
        if (!s) { fail("checkpoint %s: metadata has no step", path); goto done; }
        errno = 0;
        v = strtol(s, &end, 10);
        if (errno || *end || end == s || v < 0 || v > 100000000) { fail("checkpoint %s: bad step \"%s\"", path, s); goto done; }
        *step = (int)v;
        s = meta_str(meta, "adam_step");
        m->adam_t = s ? strtoll(s, NULL, 10) : v;
        if (m->adam_t < 0) m->adam_t = 0;
    }
    nt = model_tensors(m, NULL);
    tab = (ck_tensor*)xcalloc((size_t)nt, sizeof(ck_tensor));
    model_tensors(m, tab);
    for (pass = 0; pass < 3; pass++) {
        nb_real* base = pass == 0 ? m->p : pass == 1 ? m->m : m->v;
        for (t = 0; t < nt; t++) {
            char name[128];
            const cJSON *e, *dt, *shape, *offs;
            double a, b;
            const size_t cnt = tensor_count(&tab[t]);
            snprintf(name, sizeof name, "%s%s", pass == 0 ? "" : pass == 1 ? "optimizer.m." : "optimizer.v.",
                     tab[t].name);
            e = cJSON_GetObjectItemCaseSensitive(root, name);
            if (!cJSON_IsObject(e)) { fail("checkpoint %s: tensor %s is missing", path, name); goto done; }
            dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
            if (!cJSON_IsString(dt) || strcmp(dt->valuestring, "F32")) {
                fail("checkpoint %s: tensor %s is not F32", path, name); goto done;
            }
            shape = cJSON_GetObjectItemCaseSensitive(e, "shape");
            {
                const int dims = tab[t].cols ? 2 : 1;
                const int want_dims[2] = {tab[t].rows, tab[t].cols};
                int ok = cJSON_IsArray(shape) && cJSON_GetArraySize(shape) == dims, k;
                for (k = 0; ok && k < dims; k++) {
                    const cJSON* x = cJSON_GetArrayItem(shape, k);
                    ok = cJSON_IsNumber(x) && x->valuedouble == want_dims[k];
                }
                if (!ok) {
                    char* got = shape ? cJSON_PrintUnformatted(shape) : NULL;
                    if (dims == 2) fail("checkpoint %s: tensor %s has shape %s, expected [%d,%d]", path, name, got ? got : "?", tab[t].rows, tab[t].cols);
                    else fail("checkpoint %s: tensor %s has shape %s, expected [%d]", path, name, got ? got : "?", tab[t].rows);
                    free(got);
                    goto done;
                }
            }
            offs = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
            if (!cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2 ||
                !cJSON_IsNumber(cJSON_GetArrayItem(offs, 0)) || !cJSON_IsNumber(cJSON_GetArrayItem(offs, 1))) {
                fail("checkpoint %s: tensor %s has bad data_offsets", path, name); goto done;
            }
            a = cJSON_GetArrayItem(offs, 0)->valuedouble;
            b = cJSON_GetArrayItem(offs, 1)->valuedouble;
            if (!(a >= 0 && b >= a && b <= (double)dsz && a == floor(a) && b - a == (double)cnt * 4)) {
                fail("checkpoint %s: tensor %s has data_offsets [%.0f, %.0f] outside the %zu data "
                     "bytes or of the wrong size (truncated file?)", path, name, a, b, dsz);
                goto done;
            }
            memcpy(base + tab[t].off, data + (size_t)a, cnt * 4);
        }
    }
    rc = 0;
done:
    if (f) fclose(f);
    free(hdr);
    free(data);
    free(tab);
    cJSON_Delete(root);
    cJSON_Delete(want);
    return rc;
}

/* ---- SVG plots ------------------------------------------------------------------------------ */

typedef struct series {
    const char* name;
    const char* color;
    int n;
    const double* x;
    const double* y;
    int dashed;
} series;

static const char* const k_colors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
                                       "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"};

static double nice_step(double range) {
    const double raw = range / 5, mag = pow(10, floor(log10(raw))), f = raw / mag;
    return (f < 1.5 ? 1 : f < 3.5 ? 2 : f < 7.5 ? 5 : 10) * mag;
}

static void svg_text(FILE* f, double x, double y, const char* anchor, int size, const char* s) {
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"%s\" font-size=\"%d\">", x, y, anchor, size);
    for (; *s; s++) {
        if (*s == '<') fputs("&lt;", f);
        else if (*s == '>') fputs("&gt;", f);
        else if (*s == '&') fputs("&amp;", f);
        else fputc(*s, f);
    }
    fputs("</text>\n", f);
}

/* One panel of line plots at (px, py) of size (pw, ph). ycap > 0 clips values above it;
   int_x: integer x ticks (layer indices). */
static void svg_panel(FILE* f, double px, double py, double pw, double ph, const char* title,
                      const char* xlabel, const char* ylabel, const series* s, int ns, double ycap,
                      int int_x) {
    const double L = px + 60, R = px + pw - 10, Tp = py + 30, Bt = py + ph - 45;
    double xmin = INFINITY, xmax = -INFINITY, ymin = INFINITY, ymax = -INFINITY, st, v;
    int i, k, any = 0;
    char buf[64];
    for (k = 0; k < ns; k++)
        for (i = 0; i < s[k].n; i++) {
            double y = s[k].y[i];
            if (!isfinite(y) || !isfinite(s[k].x[i])) continue;
            if (ycap > 0 && y > ycap) y = ycap;
            if (s[k].x[i] < xmin) xmin = s[k].x[i];
            if (s[k].x[i] > xmax) xmax = s[k].x[i];
            if (y < ymin) ymin = y;
            if (y > ymax) ymax = y;
            any = 1;
        }
    if (!any) { xmin = 0; xmax = 1; ymin = 0; ymax = 1; }
    if (xmax - xmin < 1e-12) { xmin -= 0.5; xmax += 0.5; }
    if (ymax - ymin < 1e-12) { ymin -= 0.5; ymax += 0.5; }
    {   /* a little headroom, rounded to ticks */
        const double ys = nice_step(ymax - ymin);
        ymin = floor(ymin / ys) * ys;
        ymax = ceil(ymax / ys) * ys;
    }
#define SX(x) (L + ((x) - xmin) / (xmax - xmin) * (R - L))
#define SY(y) (Bt - ((y) - ymin) / (ymax - ymin) * (Bt - Tp))
    fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"white\" stroke=\"#888\"/>\n",
            L, Tp, R - L, Bt - Tp);
    svg_text(f, (L + R) / 2, py + 20, "middle", 15, title);
    svg_text(f, (L + R) / 2, Bt + 36, "middle", 12, xlabel);
    fprintf(f, "<text transform=\"translate(%.1f,%.1f) rotate(-90)\" text-anchor=\"middle\" "
               "font-size=\"12\">%s</text>\n", px + 14, (Tp + Bt) / 2, ylabel);
    st = nice_step(xmax - xmin);
    if (int_x && st < 1) st = 1;
    for (v = ceil(xmin / st) * st; v <= xmax + 1e-9 * st; v += st) {
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#eee\"/>\n", SX(v), Tp, SX(v), Bt);
        snprintf(buf, sizeof buf, "%g", fabs(v) < 1e-9 * st ? 0.0 : v);
        svg_text(f, SX(v), Bt + 16, "middle", 11, buf);
    }
    st = nice_step(ymax - ymin);
    for (v = ceil(ymin / st - 1e-9) * st; v <= ymax + 1e-9 * st; v += st) {
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#eee\"/>\n", L, SY(v), R, SY(v));
        snprintf(buf, sizeof buf, "%g", fabs(v) < 1e-9 * st ? 0.0 : v);
        svg_text(f, L - 5, SY(v) + 4, "end", 11, buf);
    }
    fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" stroke=\"#444\"/>\n",
            L, Tp, R - L, Bt - Tp);
    for (k = 0; k < ns; k++) {
        int open = 0;
        for (i = 0; i < s[k].n; i++) {
            double y = s[k].y[i];
            if (!isfinite(y) || !isfinite(s[k].x[i])) { /* break the line at NaN/Inf */
                if (open) fputs("\"/>\n", f);
                open = 0;
                continue;
            }
            if (ycap > 0 && y > ycap) y = ycap;
            if (!open) {
                fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.6\"%s points=\"",
                        s[k].color, s[k].dashed ? " stroke-dasharray=\"6,4\"" : "");
                open = 1;
            }
            fprintf(f, "%.1f,%.1f ", SX(s[k].x[i]), SY(y));
        }
        if (open) fputs("\"/>\n", f);
        if (s[k].n == 1 && isfinite(s[k].y[0]))
            fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>\n", SX(s[k].x[0]),
                    SY(s[k].y[0] > ycap && ycap > 0 ? ycap : s[k].y[0]), s[k].color);
    }
    for (k = 0; k < ns; k++) { /* legend, top right */
        const double ly = Tp + 14 + 16 * k, lx = R - 150;
        fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"146\" height=\"16\" fill=\"white\" fill-opacity=\"0.8\"/>\n", lx - 4, ly - 11);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"2\"%s/>\n",
                lx, ly - 4, lx + 22, ly - 4, s[k].color, s[k].dashed ? " stroke-dasharray=\"6,4\"" : "");
        svg_text(f, lx + 28, ly, "start", 11, s[k].name);
    }
#undef SX
#undef SY
}

static FILE* svg_open(const char* dir, const char* name, double w, double h, char* path, size_t n) {
    FILE* f = open_in(dir, name, path, n);
    if (!f) return NULL;
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" "
               "width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" font-family=\"sans-serif\">\n"
               "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n", w, h, w, h);
    return f;
}
static int svg_close(FILE* f, const char* path) {
    fputs("</svg>\n", f);
    if (ferror(f) | fclose(f)) return fail("writing %s failed", path);
    return 0;
}

/* ---- training ------------------------------------------------------------------------------- */

typedef struct history {       /* what a run records for tables and plots */
    int n_steps;               /* per-step train loss */
    double *step_x, *loss;
    int n_eval;                /* per interval */
    double *eval_x, *val, *gnorm;
    int n_diag;                /* per-layer snapshots (with --diag) */
    double *diag_x, *grad_l, *hid_l, *ang_l;   /* n_diag x L, x (L+1), x L */
    double final_loss, final_val, accuracy;
    int diverged_at;           /* -1 = no */
    int interrupted, steps_done;
} history;

static void history_free(history* h) {
    free(h->step_x); free(h->loss); free(h->eval_x); free(h->val); free(h->gnorm);
    free(h->diag_x); free(h->grad_l); free(h->hid_l); free(h->ang_l);
    memset(h, 0, sizeof *h);
}

static int write_diag(const config* c, const model* m, const history* h, double unigram) {
    const int L = m->s.desc.n_layers;
    char path[1024];
    FILE* f;
    int i, l, k;
    if (make_dir(c->diag)) return 1;
    if (!(f = open_in(c->diag, "loss.csv", path, sizeof path))) return 1;
    fprintf(f, "step,train_loss\n");
    for (i = 0; i < h->n_steps; i++) fprintf(f, "%.0f,%.6g\n", h->step_x[i], h->loss[i]);
    fclose(f);
    if (!(f = open_in(c->diag, "eval.csv", path, sizeof path))) return 1;
    fprintf(f, "step,val_loss,grad_norm\n");
    for (i = 0; i < h->n_eval; i++) fprintf(f, "%.0f,%.6g,%.6g\n", h->eval_x[i], h->val[i], h->gnorm[i]);
    fclose(f);
    if (!(f = open_in(c->diag, "layer_grad_norms.csv", path, sizeof path))) return 1;
    fprintf(f, "step");
    for (l = 0; l < L; l++) fprintf(f, ",layer%d", l);
    fprintf(f, "\n");
    for (i = 0; i < h->n_diag; i++) {
        fprintf(f, "%.0f", h->diag_x[i]);
        for (l = 0; l < L; l++) fprintf(f, ",%.6g", h->grad_l[(size_t)i * L + l]);
        fprintf(f, "\n");
    }
    fclose(f);
    if (!(f = open_in(c->diag, "hidden_norms.csv", path, sizeof path))) return 1;
    fprintf(f, "step");
    for (l = 0; l <= L; l++) fprintf(f, ",x%d", l);
    fprintf(f, "\n");
    for (i = 0; i < h->n_diag; i++) {
        fprintf(f, "%.0f", h->diag_x[i]);
        for (l = 0; l <= L; l++) fprintf(f, ",%.6g", h->hid_l[(size_t)i * (L + 1) + l]);
        fprintf(f, "\n");
    }
    fclose(f);
    if (!(f = open_in(c->diag, "angular_distance.csv", path, sizeof path))) return 1;
    fprintf(f, "step");
    for (l = 0; l < L; l++) fprintf(f, ",d%d_%d", l, l + 1);
    fprintf(f, "\n");
    for (i = 0; i < h->n_diag; i++) {
        fprintf(f, "%.0f", h->diag_x[i]);
        for (l = 0; l < L; l++) fprintf(f, ",%.6g", h->ang_l[(size_t)i * L + l]);
        fprintf(f, "\n");
    }
    fclose(f);
    {   /* loss.svg: train loss per step, validation loss, unigram baseline */
        double bx[2], by[2];
        series s[3];
        double cap = 0;
        bx[0] = 0; bx[1] = h->n_steps ? h->step_x[h->n_steps - 1] : 1; by[0] = by[1] = unigram;
        s[0].name = "train"; s[0].color = "#9ecae1"; s[0].n = h->n_steps; s[0].x = h->step_x; s[0].y = h->loss; s[0].dashed = 0;
        s[1].name = "validation"; s[1].color = "#d62728"; s[1].n = h->n_eval; s[1].x = h->eval_x; s[1].y = h->val; s[1].dashed = 0;
        s[2].name = "unigram baseline"; s[2].color = "#555"; s[2].n = 2; s[2].x = bx; s[2].y = by; s[2].dashed = 1;
        for (i = 0; i < h->n_steps && i < 5; i++) if (isfinite(h->loss[i]) && h->loss[i] > cap) cap = h->loss[i];
        if (!(f = svg_open(c->diag, "loss.svg", 720, 420, path, sizeof path))) return 1;
        svg_panel(f, 0, 0, 720, 420, "Loss", "step", "cross-entropy (nats)", s, 3, cap * 1.05, 0);
        if (svg_close(f, path)) return 1;
    }
    if (h->n_diag > 0) {   /* layers.svg: per-layer profiles at up to 4 points of training */
        static const char* const shades[] = {"#c6dbef", "#6baed6", "#2171b5", "#08306b"};
        double lx[MAX_LAYERS + 1];
        series sg[4], sh[4], sa[4];
        char names[4][32];
        int pick[4], np = h->n_diag < 4 ? h->n_diag : 4;
        for (l = 0; l <= L; l++) lx[l] = l;
        for (k = 0; k < np; k++) {
            pick[k] = np == 1 ? 0 : (int)((double)k * (h->n_diag - 1) / (np - 1) + 0.5);
            snprintf(names[k], sizeof names[k], "step %.0f", h->diag_x[pick[k]]);
            sg[k].name = sh[k].name = sa[k].name = names[k];
            sg[k].color = sh[k].color = sa[k].color = shades[4 - np + k];
            sg[k].dashed = sh[k].dashed = sa[k].dashed = 0;
            sg[k].x = sh[k].x = sa[k].x = lx;
            sg[k].n = L; sg[k].y = h->grad_l + (size_t)pick[k] * L;
            sh[k].n = L + 1; sh[k].y = h->hid_l + (size_t)pick[k] * (L + 1);
            sa[k].n = L; sa[k].y = h->ang_l + (size_t)pick[k] * L;
        }
        if (!(f = svg_open(c->diag, "layers.svg", 1260, 400, path, sizeof path))) return 1;
        svg_panel(f, 0, 0, 420, 400, "Gradient norm per layer", "layer l", "||grad of block l||", sg, np, 0, 1);
        svg_panel(f, 420, 0, 420, 400, "Hidden-state magnitude", "l (input of block l; L = output)", "mean ||x_l||", sh, np, 0, 1);
        svg_panel(f, 840, 0, 420, 400, "Angular distance d(l, l+1)", "layer l", "arccos(cos(x_l, x_l+1)) / pi", sa, np, 0, 1);
        if (svg_close(f, path)) return 1;
    }
    return 0;
}

/* Train one model per the config. Returns 0 on success (also when interrupted or diverged:
   see h->interrupted, h->diverged_at), 1 on an error. */
static int train_run(const config* c, const dataset* ds, double unigram, history* h, int compare) {
    model m;
    int start = 0, step, L, rc = 1, cap_eval, cap_diag;
    double t0, t_last, tok_last = 0, first_loss = NAN, gnorm = 0, loss_acc = 0, last_val = NAN;
    int loss_n = 0;
    memset(h, 0, sizeof *h);
    h->diverged_at = -1;
    h->final_loss = h->final_val = h->accuracy = NAN;
    if (model_init(&m, c)) { model_free(&m); return 1; }
    L = m.s.desc.n_layers;
    if (c->resume) {
        if (load_checkpoint(c->resume, c, &m, &start)) { model_free(&m); return 1; }
        if (!c->quiet) printf("resumed from %s at step %d\n", c->resume, start);
    }
    if (!c->quiet && !compare) {
        printf("model: %s, L=%d d=%d H=%d H_kv=%d d_ff=%d %s %s%s, %zu parameters (stack %zu)\n",
               c->schedule[0] ? c->schedule : nb_preset_name(m.s.desc.preset), L, m.d,
               m.s.desc.n_heads, m.s.desc.n_kv_heads, m.s.desc.d_ff, c->ffn, c->norm,
               c->rope ? " RoPE" : "", m.n, m.s.n_params);
        printf("training: %d steps of %d x %d tokens, AdamW lr %g (warmup %d, cosine to %g), "
               "wd %g, clip %g, seed %llu, %d threads\n", c->steps, c->batch, c->seq, c->lr,
               c->warmup, c->lr * c->min_lr_frac, c->wd, c->clip, c->seed, nb_num_threads(&m.ctx));
    }
    cap_eval = c->steps / c->log_every + 3;
    h->step_x = (double*)xcalloc((size_t)c->steps + 1, sizeof(double));
    h->loss = (double*)xcalloc((size_t)c->steps + 1, sizeof(double));
    h->eval_x = (double*)xcalloc((size_t)cap_eval, sizeof(double));
    h->val = (double*)xcalloc((size_t)cap_eval, sizeof(double));
    h->gnorm = (double*)xcalloc((size_t)cap_eval, sizeof(double));
    cap_diag = c->diag && !compare ? cap_eval : 0;
    h->diag_x = (double*)xcalloc((size_t)cap_diag, sizeof(double));
    h->grad_l = (double*)xcalloc((size_t)cap_diag * L, sizeof(double));
    h->hid_l = (double*)xcalloc((size_t)cap_diag * (L + 1), sizeof(double));
    h->ang_l = (double*)xcalloc((size_t)cap_diag * L, sizeof(double));
    t0 = t_last = now_s();
    for (step = start; step < c->steps && !(c->stop_after > 0 && step >= c->stop_after); step++) {
        double cnt, loss, lr, scale;
        int log_now;
        train_batch(ds, step, m.B, m.T, m.tok, m.mask);
        if (model_step(&m, 1, &cnt, &loss)) goto done;
        gnorm = global_norm(&m);
        if (step == start) first_loss = loss;
        h->step_x[h->n_steps] = step + 1;
        h->loss[h->n_steps++] = loss;
        if (!isfinite(loss) || !isfinite(gnorm) || (step - start > 10 && loss > 1.5 * first_loss + 1)) {
            h->diverged_at = step + 1;
            printf("%sdiverged at step %d (loss %g, gradient norm %g)\n", compare ? "  " : "",
                   step + 1, loss, gnorm);
            break;
        }
        log_now = (step + 1) % c->log_every == 0 || step + 1 == c->steps || g_stop ||
                  step + 1 == c->stop_after;
        if (log_now && cap_diag && h->n_diag < cap_diag) {
            /* before the update and the validation forward: this step's gradients (unclipped)
               and the hidden states of its forward, still in the cache */
            const int k = h->n_diag++;
            double* ang = (double*)xcalloc((size_t)(L + 1) * (L + 1), sizeof(double));
            int l;
            h->diag_x[k] = step + 1;
            nb_stack_grad_norms(&m.s, m.g + m.off_stack, h->grad_l + (size_t)k * L);
            nb_stack_hidden_norms(&m.s, m.cache, m.B, m.T, 0, h->hid_l + (size_t)k * (L + 1));
            nb_stack_angular_distance(&m.s, m.cache, m.B, m.T, 0, ang);
            for (l = 0; l < L; l++) h->ang_l[(size_t)k * L + l] = ang[l * (L + 1) + l + 1];
            free(ang);
        }
        lr = lr_at(c, step);
        scale = c->clip > 0 && gnorm > c->clip ? c->clip / gnorm : 1;
        adamw(&m, c, lr, scale);
        loss_acc += loss;
        loss_n++;
        tok_last += (double)m.B * m.T;
        if (log_now) {
            const double t = now_s(), val = evaluate(&m, ds, c->eval_batches);
            const double tps = tok_last / (t - t_last > 1e-9 ? t - t_last : 1e-9);
            const double eta = (t - t0) / (step + 1 - start) * (c->steps - step - 1);
            char eb[32];
            last_val = val;
            h->eval_x[h->n_eval] = step + 1;
            h->val[h->n_eval] = val;
            h->gnorm[h->n_eval++] = gnorm;
            fmt_time(eta, eb, sizeof eb);
            if (!c->quiet)
                printf("%sstep %5d/%d | loss %.4f | val %.4f | grad norm %.3f | lr %.2e | %.1fk tok/s | ETA %s\n",
                       compare ? "  " : "", step + 1, c->steps, loss_acc / loss_n, val, gnorm, lr,
                       tps / 1000, eb);
            fflush(stdout);
            loss_acc = 0; loss_n = 0; tok_last = 0;
            t_last = now_s();
        }
        if (g_stop) { h->interrupted = 1; step++; break; }
        if (step + 1 == c->stop_after) { step++; break; }
        if (c->save_every > 0 && (step + 1) % c->save_every == 0 && c->save && !compare) {
            if (save_checkpoint(c->save, c, &m, step + 1)) goto done;
        }
    }
    h->steps_done = step;
    h->final_loss = h->n_steps ? h->loss[h->n_steps - 1] : NAN;
    h->final_val = h->diverged_at >= 0 ? NAN : isfinite(last_val) && h->n_eval ? last_val
                                                                              : evaluate(&m, ds, c->eval_batches);
    if (!compare && !c->quiet)
        printf("done: %d steps in %.1f s\n", step - start, now_s() - t0);
    if (!ds->text && h->diverged_at < 0) h->accuracy = answer_accuracy(&m, ds, compare ? 128 : 256);
    if (!compare) {
        const char* path = c->save;
        if (h->interrupted && !path) path = "train.safetensors";
        if (h->interrupted) printf("interrupted at step %d\n", step);
        if (path && h->diverged_at < 0) {
            if (save_checkpoint(path, c, &m, step)) goto done;
            printf("checkpoint: %s (step %d)\n", path, step);
        }
        if (c->diag) {
            if (write_diag(c, &m, h, unigram)) goto done;
            printf("diagnostics: %s/{loss,layers}.svg and CSVs\n", c->diag);
        }
    }
    rc = 0;
done:
    model_free(&m);
    return rc;
}

/* ---- comparison ----------------------------------------------------------------------------- */

static int run_compare(const config* base, const dataset* ds, double unigram) {
    char buf[512], *tok, *save = NULL, names[MAX_COMPARE][64], path[1024];
    history hs[MAX_COMPARE];
    int n = 0, i, rc = 0;
    const char* dir = base->diag ? base->diag : base->out ? base->out : ".";
    FILE* f;
    if (base->resume) return fail("--compare and --resume do not go together");
    if (base->schedule[0]) return fail("--compare takes presets; drop --schedule");
    if (strlen(base->compare) >= sizeof buf) return fail("--compare: list too long");
    snprintf(buf, sizeof buf, "%s", base->compare);
    for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        nb_stack_desc d;
        nb_ctx ctx;
        memset(&d, 0, sizeof d);
        memset(&ctx, 0, sizeof ctx);
        if (n >= MAX_COMPARE) return fail("--compare: at most %d presets", MAX_COMPARE);
        if (strlen(tok) >= sizeof names[0]) return fail("--compare: name too long");
        if (nb_preset_from_name(&ctx, &d, tok) != NB_OK) return fail("--compare: %s", ctx.err);
        snprintf(names[n++], sizeof names[0], "%s", tok);
    }
    if (n == 0) return fail("--compare: empty list");
    memset(hs, 0, sizeof hs);
    for (i = 0; i < n; i++) {
        config c = *base;
        double t = now_s();
        memcpy(c.preset, names[i], sizeof c.preset);
        c.diag = NULL;
        printf("[%d/%d] %s\n", i + 1, n, names[i]);
        fflush(stdout);
        if (train_run(&c, ds, unigram, &hs[i], 1)) { rc = 1; n = i; break; }
        printf("  %.1f s\n", now_s() - t);
        if (hs[i].interrupted) { n = i + 1; break; }
    }
    printf("\n%-14s %11s %11s %9s %s\n", "preset", "final loss", "val loss",
           ds->text ? "" : "accuracy", "diverged");
    for (i = 0; i < n; i++) {
        char acc[16] = "", dv[32] = "no";
        if (!ds->text && isfinite(hs[i].accuracy)) snprintf(acc, sizeof acc, "%.1f%%", 100 * hs[i].accuracy);
        if (hs[i].diverged_at >= 0) snprintf(dv, sizeof dv, "yes (step %d)", hs[i].diverged_at);
        if (hs[i].interrupted) snprintf(dv, sizeof dv, "interrupted");
        printf("%-14s %11.4f %11.4f %9s %s\n", names[i], hs[i].final_loss, hs[i].final_val, acc, dv);
    }
    printf("unigram baseline %.4f nats\n", unigram);
    if (n > 0 && !make_dir(dir)) {
        series s[2 * MAX_COMPARE + 1];
        double bx[2] = {0, base->steps}, by[2];
        char lab[MAX_COMPARE][80], vlab[MAX_COMPARE][80];
        double cap = 0;
        int k = 0;
        by[0] = by[1] = unigram;
        if ((f = open_in(dir, "compare.csv", path, sizeof path))) {
            fprintf(f, "preset,final_loss,val_loss,accuracy,diverged_at\n");
            for (i = 0; i < n; i++)
                fprintf(f, "%s,%.6g,%.6g,%.4g,%d\n", names[i], hs[i].final_loss, hs[i].final_val,
                        hs[i].accuracy, hs[i].diverged_at);
            fclose(f);
        } else rc = 1;
        for (i = 0; i < n; i++) {
            const char* col = k_colors[i % 10];
            snprintf(lab[i], sizeof lab[i], "%s train", names[i]);
            snprintf(vlab[i], sizeof vlab[i], "%s val", names[i]);
            s[k].name = lab[i]; s[k].color = col; s[k].n = hs[i].n_steps; s[k].x = hs[i].step_x;
            s[k].y = hs[i].loss; s[k].dashed = 0; k++;
            s[k].name = vlab[i]; s[k].color = col; s[k].n = hs[i].n_eval; s[k].x = hs[i].eval_x;
            s[k].y = hs[i].val; s[k].dashed = 1; k++;
            if (hs[i].n_steps && isfinite(hs[i].loss[0]) && hs[i].loss[0] > cap) cap = hs[i].loss[0];
        }
        s[k].name = "unigram baseline"; s[k].color = "#555"; s[k].n = 2; s[k].x = bx; s[k].y = by;
        s[k].dashed = 1; k++;
        if ((f = svg_open(dir, "compare.svg", 900, 520, path, sizeof path))) {
            svg_panel(f, 0, 0, 900, 520, "Loss by normalization placement (same seed and data)",
                      "step", "cross-entropy (nats)", s, k, cap * 1.05, 0);
            if (svg_close(f, path)) rc = 1;
            else printf("comparison plot: %s (table: %s/compare.csv)\n", path, dir);
        } else rc = 1;
    } else if (n > 0) rc = 1;
    for (i = 0; i < MAX_COMPARE; i++) history_free(&hs[i]);
    return rc;
}

/* ---- main ----------------------------------------------------------------------------------- */

int main(int argc, char** argv) {
    config c;
    dataset ds;
    history h;
    double unigram;
    int help, rc;
    signal(SIGINT, on_sigint); /* the handler only sets g_stop; the loop saves and stops */
    config_defaults(&c);
    if (parse_args(argc, argv, &c, &help)) return 1;
    if (help) { usage(); return 0; }
    {   /* validate the model before touching data, so shape errors come first */
        model probe;
        if (model_init(&probe, &c)) { model_free(&probe); return 1; }
        model_free(&probe);
    }
    if (load_data(&c, &ds)) return 1;

    printf("normblocks %s trainer\n", NB_VERSION_STRING);
#ifdef OPENBLAS_SEQUENTIAL
    {
        const char* core = openblas_get_corename();
        printf("BLAS: OpenBLAS, core %s, %d BLAS thread(s)\n", core ? core : "?", nb_blas_threads());
        if (core && !strcmp(core, "Prescott"))
            printf("warning: OpenBLAS picked its slow generic SSE3 kernels (Prescott); on AVX-512 CPUs "
                   "export OPENBLAS_CORETYPE=SkylakeX (AVX2: Haswell) before running\n");
    }
#else
    printf("BLAS: %s\n", nb_blas_threads() ? "cblas" : "none");
#endif
    if (nb_blas_threads() > 1)
        printf("note: BLAS runs %d threads of its own; run with OPENBLAS_NUM_THREADS=1 (normblocks "
               "does the threading, --threads N)\n", nb_blas_threads());
    if (ds.text)
        printf("data: %s, %zu bytes (%zu train, %zu held out)\n", c.data, ds.n, ds.n_train,
               ds.n - ds.n_train);
    else
        printf("data: synthetic %d-digit addition (\"123+45=168\"%s), loss on answer bytes, "
               "10%% of pairs held out\n", c.digits, c.reverse ? ", answers reversed" : "");
    unigram = unigram_entropy(&ds, c.seq);
    printf("unigram entropy baseline: %.4f nats/token (loss of predicting the byte frequencies)\n",
           unigram);
    fflush(stdout);
    if (c.compare) {
        rc = run_compare(&c, &ds, unigram);
    } else {
        rc = train_run(&c, &ds, unigram, &h, 0);
        if (!rc) {
            if (h.diverged_at >= 0) {
                printf("training diverged at step %d\n", h.diverged_at);
                rc = 1;
            } else {
                printf("final: step %d loss %.9g val_loss %.9g (unigram %.4f)", h.steps_done,
                       h.final_loss, h.final_val, unigram);
                if (!ds.text && isfinite(h.accuracy))
                    printf(" answer accuracy %.1f%%", 100 * h.accuracy);
                printf("\n");
            }
        }
        history_free(&h);
    }
    free(ds.bytes);
    return rc;
}
