/* sample.c: what a checkpoint does, without training. --eval: the validation loss on the
   held-out split (the same batches the training run validated on, so the same number), and
   for the addition task the exact-match accuracy on held-out problems. --sample: a
   continuation of a prompt, greedy or drawn with a temperature and top-k from a seeded
   generator. The checkpoint's configuration comes from its metadata (load_config). */
#include "train.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* a model from c with the checkpoint's parameters; *step: its training step */
static int load_model(const config* c, const config* shape, const dataset* ds, model* m, int* step) {
    if (model_init(m, shape) || load_checkpoint(c->sample.load, c, ds, m, step)) {
        model_free(m);
        return 1;
    }
    return 0;
}

/* the text with bytes other than printable ASCII, newline and tab as \xNN */
static void say_text(const unsigned char* t, size_t n) {
    size_t i;
    for (i = 0; i < n; i++) {
        if ((t[i] >= 32 && t[i] < 127) || t[i] == '\n' || t[i] == '\t') say("%c", t[i]);
        else say("\\x%02x", t[i]);
    }
}

void say_shown(const dataset* ds, const shown_problem* p, int n) {
    int i;
    say("held-out problems (never trained on) and the model's answers:");
    for (i = 0; i < n; i++) {
        unsigned long long a, b;
        int held_out;
        char want[32] = "";
        say("  %s", p[i].q);
        say_text((const unsigned char*)p[i].got, strlen(p[i].got));
        say(" %s", p[i].ok ? "\xE2\x9C\x93" : "\xE2\x9C\x97"); /* ✓ ✗ */
        if (!p[i].ok && add_parse(ds, p[i].q, &a, &b, &held_out)) {
            add_answer(ds, a + b, want);
            want[strlen(want) - 1] = 0; /* the newline */
            say(" (want %s)", want);
        }
    }
    say("\n");
}

static int eval_checkpoint(const config* c, const dataset* ds) {
    model m;
    int step = 0;
    double val;
    if (load_model(c, c, ds, &m, &step)) return 1;
    print_model(c, &m, 1);
    val = evaluate(&m, ds, c->loop.eval_batches);
    say("eval: %s (step %d, %s GEMMs%s): val_loss %.9g on %d batches of %d x %d held-out tokens\n",
        c->sample.load, step, m.s.desc.gemm.precision == NB_PRECISION_BF16 ? "bf16" : "float32",
        c->sample.load_bf16 < 0 ? "" : (m.s.desc.gemm.precision == NB_PRECISION_BF16) == c->sample.load_bf16
            ? " as trained" : c->sample.load_bf16 ? ", trained in bf16" : ", trained in float32",
        val, c->loop.eval_batches, c->loop.batch, c->loop.seq);
    if (!ds->text) {
        shown_problem shown[5];
        const int n_show = c->loop.eval_problems < 5 ? c->loop.eval_problems : 5;
        const double acc = answer_accuracy_show(&m, ds, c->loop.eval_problems, shown, n_show);
        say("eval: answer accuracy %.1f%% (exact match on %d held-out problems, greedy)\n",
            100 * acc, c->loop.eval_problems);
        say_shown(ds, shown, n_show);
    }
    model_free(&m);
    return isfinite(val) ? 0 : fail("eval: the validation loss is not finite");
}

typedef struct scored { double z; int v; } scored;
static int by_logit(const void* x, const void* y) {
    const scored *a = (const scored*)x, *b = (const scored*)y;
    return a->z > b->z ? -1 : a->z < b->z ? 1 : a->v - b->v; /* ties: the lower byte first */
}

/* The next byte from logits z: argmax for temperature 0 or top-k 1, else a draw from
   softmax(z / temperature) over the top_k largest (0: all), with the generator *rng. */
static int pick(const nb_real* z, double temperature, int top_k, unsigned long long* rng) {
    scored s[VOCAB];
    double total = 0, u, acc = 0;
    int k = top_k > 0 && top_k < VOCAB ? top_k : VOCAB, v;
    for (v = 0; v < VOCAB; v++) { s[v].z = z[v]; s[v].v = v; }
    qsort(s, VOCAB, sizeof s[0], by_logit);
    if (temperature == 0 || k == 1) return s[0].v;
    for (v = 0; v < k; v++) total += exp((s[v].z - s[0].z) / temperature);
    u = (double)(mix64(rng) >> 11) * (1.0 / 9007199254740992.0) * total; /* [0, total) */
    for (v = 0; v < k - 1; v++) {
        acc += exp((s[v].z - s[0].z) / temperature);
        if (u < acc) break;
    }
    return s[v].v;
}

/* For an addition checkpoint and a prompt that is a problem in its format: right or wrong,
   and whether the pair was held out from training. */
static void say_check(const dataset* ds, const char* prompt, const unsigned char* out, size_t n) {
    unsigned long long a, b;
    int held_out;
    char want[32], canon[64];
    if (ds->text || !add_parse(ds, prompt, &a, &b, &held_out)) return;
    if (!add_canonical(ds, prompt, canon))
        say("note: the model learned this problem written as %s (--format %s)\n", canon,
            format_name(ds->format));
    add_answer(ds, a + b, want);
    say("check: %llu + %llu = %llu: %s (%s)\n", a, b, a + b,
        n == strlen(want) && !memcmp(out, want, n) ? "right \xE2\x9C\x93" : "wrong \xE2\x9C\x97",
        held_out ? "a held-out pair, never trained on" : "a pair from the training split");
}

static int sample_checkpoint(const config* c, const dataset* ds) {
    config one = *c;            /* one row: the model is the same whatever the batch */
    model m;
    const size_t np = strlen(c->sample.sample);
    unsigned char* text = (unsigned char*)xcalloc(np + (size_t)c->sample.sample_len + 1, 1);
    unsigned long long rng = hash3(c->sample.sample_seed, 0x5A3B1E, 1);
    size_t n = np;
    int step = 0, i, t, rc = 1;
    one.loop.batch = 1;
    if (load_model(c, &one, ds, &m, &step)) { free(text); return 1; }
    memcpy(text, c->sample.sample, np);
    if (np > (size_t)m.T)
        say("note: the prompt has %zu bytes; the model sees the last %d (--seq of its training)\n", np, m.T);
    for (i = 0; i < c->sample.sample_len; i++) {
        const size_t first = n > (size_t)m.T ? n - (size_t)m.T : 0, w = n - first;
        double cnt, loss;
        int next;
        for (t = 0; t <= m.T; t++) m.tok[t] = (size_t)t < w ? text[first + (size_t)t] : '\n';
        memset(m.mask, 0, (size_t)m.T);
        if (model_step(&m, 0, &cnt, &loss)) goto done;
        next = pick(m.logits + (w - 1) * VOCAB, c->sample.temperature, c->sample.top_k, &rng);
        text[n++] = (unsigned char)next;
        if (!c->sample.load_text && next == '\n') break; /* an addition model: the answer is complete */
    }
    if (c->sample.temperature == 0 || c->sample.top_k == 1) say("sample (greedy), %s step %d:\n", c->sample.load, step);
    else if (c->sample.top_k) say("sample (temperature %g, top-k %d, seed %llu), %s step %d:\n", c->sample.temperature, c->sample.top_k, c->sample.sample_seed, c->sample.load, step);
    else say("sample (temperature %g, seed %llu), %s step %d:\n", c->sample.temperature, c->sample.sample_seed, c->sample.load, step);
    say_text(text, n);
    if (text[n - 1] != '\n') say("\n");
    say_check(ds, c->sample.sample, text + np, n - np);
    rc = 0;
done:
    model_free(&m);
    free(text);
    return rc;
}

static int dump_checkpoint(const config* c, const dataset* ds) {
    model m;
    int step = 0, rc;
    if (load_model(c, c, ds, &m, &step)) return 1;
    rc = dump_batch(&m, ds, c);
    model_free(&m);
    return rc;
}

int run_loaded(const config* c, const dataset* ds) {
    if (c->sample.dump && dump_checkpoint(c, ds)) return 1;
    if (c->sample.eval && eval_checkpoint(c, ds)) return 1;
    return c->sample.sample ? sample_checkpoint(c, ds) : 0;
}
