/* data.c: the synthetic addition task and byte corpora. Every batch is a pure function of
   (seed, step, row): ranks draw disjoint rows of the same global batch, and a resumed run sees
   the data it would have seen. */
#define _POSIX_C_SOURCE 200809L
#include "train.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* The held-out pairs: unordered, so a held-out a+b is never trained on as b+a either. */
static int add_is_val(unsigned long long a, unsigned long long b) {
    return hash3(a < b ? a : b, a < b ? b : a, 77) % 10 == 0;
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

/* The written forms of a problem (--format). Fixed width (padded) puts every digit at the same
   offset in every problem; least-significant-first answers let the model emit each digit after
   the carry into it is known. Both make the task far easier to learn, which is what a short
   demo needs; plain is the form a person writes. */
static const struct add_format {
    const char* name;
    int pad;          /* operands zero-padded to `digits`, answers to digits + 1 */
    int rev_answer;   /* answer least significant digit first */
    int rev_operands; /* operands least significant digit first */
} k_formats[FMT_COUNT] = {
    {"plain", 0, 0, 0}, {"reversed", 0, 1, 0}, {"padded", 1, 0, 0},
    {"padded_reversed", 1, 1, 0}, {"lsb_first", 1, 1, 1},
};

int format_from_name(const char* name, int* out) {
    int i;
    for (i = 0; i < FMT_COUNT; i++)
        if (!strcmp(name, k_formats[i].name)) { *out = i; return 0; }
    return fail("--format: unknown format \"%s\" (plain, reversed, padded, padded_reversed, "
                "lsb_first)", name);
}
const char* format_name(int f) { return k_formats[f].name; }

static void reverse_bytes(char* s, int n) {
    int i;
    for (i = 0; i < n / 2; i++) { char t = s[i]; s[i] = s[n - 1 - i]; s[n - 1 - i] = t; }
}

/* v in decimal, zero-padded to width (0: as is), reversed when asked; returns the length */
static int put_number(char* buf, unsigned long long v, int width, int rev) {
    const int n = sprintf(buf, "%0*llu", width, v);
    if (rev) reverse_bytes(buf, n);
    return n;
}

/* "a+b=" into buf in the dataset's format, returns its length */
static int write_problem(const dataset* ds, unsigned long long a, unsigned long long b, char* buf) {
    const struct add_format* f = &k_formats[ds->format];
    const int w = f->pad ? ds->digits : 0;
    int n = put_number(buf, a, w, f->rev_operands);
    buf[n++] = '+';
    n += put_number(buf + n, b, w, f->rev_operands);
    buf[n++] = '=';
    buf[n] = 0;
    return n;
}

/* a random problem of the train (val 0) or held-out (val 1) split; *sum = a + b */
int add_problem(const dataset* ds, unsigned long long* st, int val, char* buf,
                unsigned long long* sum) {
    unsigned long long a, b;
    do {
        a = add_operand(st, ds->digits);
        b = add_operand(st, ds->digits);
    } while (add_is_val(a, b) != val);
    *sum = a + b;
    return write_problem(ds, a, b, buf);
}

/* "a+b=answer" for a fixed pair of digits-digit and (digits-1)-digit numbers, without the
   newline: how the format looks (123+045=0168 for 3 padded digits) */
void add_example(const dataset* ds, char* buf) {
    const unsigned long long a = 123456789ULL / pow10u(9 - ds->digits),
                             b = 45678912ULL / pow10u(ds->digits > 1 ? 9 - ds->digits : 7);
    const int n = write_problem(ds, a, b, buf);
    buf[n + add_answer(ds, a + b, buf + n) - 1] = 0;
}

/* s written as the dataset writes the problem of its numbers (not only the same numbers) */
int add_canonical(const dataset* ds, const char* s, char* canon) {
    unsigned long long a, b;
    int held_out;
    if (!add_parse(ds, s, &a, &b, &held_out)) return 0;
    write_problem(ds, a, b, canon);
    return !strcmp(s, canon);
}

/* the answer the model must write, with its closing newline */
int add_answer(const dataset* ds, unsigned long long sum, char* buf) {
    const struct add_format* f = &k_formats[ds->format];
    int n = put_number(buf, sum, f->pad ? ds->digits + 1 : 0, f->rev_answer);
    buf[n++] = '\n';
    buf[n] = 0;
    return n;
}

/* One number of a problem as written (up to '+' or '='), in the format's digit order */
static int read_operand(const char* s, int n, int rev, unsigned long long* v) {
    int i;
    if (n < 1 || n > 18) return 0;
    *v = 0;
    for (i = 0; i < n; i++) {
        const char ch = s[rev ? n - 1 - i : i];
        if (ch < '0' || ch > '9') return 0;
        *v = *v * 10 + (unsigned long long)(ch - '0');
    }
    return 1;
}

int add_parse(const dataset* ds, const char* s, unsigned long long* a, unsigned long long* b,
              int* held_out) {
    const int rev = k_formats[ds->format].rev_operands, n = (int)strlen(s);
    const char *plus = strchr(s, '+'), *eq = strchr(s, '=');
    if (!plus || !eq || eq < plus || eq != s + n - 1) return 0;
    if (!read_operand(s, (int)(plus - s), rev, a) ||
        !read_operand(plus + 1, (int)(eq - plus - 1), rev, b))
        return 0;
    *held_out = add_is_val(*a, *b);
    return 1;
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

void train_batch(const dataset* ds, int step, int b0, int nb, int T, int* tok, unsigned char* mask) {
    int b, i;
    for (b = 0; b < nb; b++) {
        unsigned long long st = hash3(ds->seed, (unsigned long long)step + 1, (unsigned long long)(b0 + b) + 1);
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

/* fixed windows spread over the held-out split */
void val_batch(const dataset* ds, int k, int n_batches, int B, int b0, int nb, int T, int* tok,
               unsigned char* mask) {
    int b, i;
    for (b = 0; b < nb; b++) {
        const int row = k * B + b0 + b, rows = n_batches * B;
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

/* Rank 0 reads the corpus; the others receive its bytes (no shared file system needed). */
static int read_corpus(const config* c, dataset* ds) {
    struct stat st;
    if (stat(c->data.path, &st) != 0) return fail("cannot open data file %s: %s", c->data.path, strerror(errno));
    if (!S_ISREG(st.st_mode)) return fail("data file %s is not a regular file", c->data.path);
    if (st.st_size == 0) return fail("data file %s is empty", c->data.path);
    if (!(ds->bytes = (unsigned char*)read_whole(c->data.path, "--data", &ds->n))) return 1;
    return 0;
}

int load_data(const config* c, dataset* ds) {
    unsigned long long n = 0;
    size_t min_val;
    memset(ds, 0, sizeof *ds);
    ds->seed = c->loop.seed;
    ds->digits = c->data.digits;
    ds->format = c->data.format;
    if (!c->data.path) {
        const int need = 3 * c->data.digits + 4; /* "a+b=" plus the longest answer and newline */
        if (c->loop.seq < need)
            return fail("--seq %d is too short for %d-digit addition (need at least %d)", c->loop.seq,
                        c->data.digits, need);
        /* 0xADD2: the split became unordered pairs (a checkpoint of the old split is
           trained on other data) */
        ds->hash = hash3(0xADD2, (unsigned long long)c->data.digits, (unsigned long long)c->data.format);
        return 0;
    }
    if (dist_agree(g_rank == 0 ? read_corpus(c, ds) : 0)) return 1;
    n = ds->n;
    dist_bcast(&n, sizeof n);
    if (g_rank != 0) {
        ds->n = (size_t)n;
        ds->bytes = (unsigned char*)xcalloc(ds->n, 1);
    }
    dist_bcast(ds->bytes, ds->n);
    ds->text = 1;
    ds->hash = fnv1a(ds->bytes, ds->n, 0xCBF29CE484222325ULL);
    min_val = (size_t)(c->data.val_frac * (double)ds->n);
    if (min_val < (size_t)c->loop.seq + 2) min_val = (size_t)c->loop.seq + 2;
    if (ds->n < min_val + (size_t)c->loop.seq + 2) {
        free(ds->bytes); /* the caller frees a dataset only when it loaded */
        ds->bytes = NULL;
        return fail("data file %s has %zu bytes: too small for --seq %d with a held-out "
                    "split (need at least %zu)", c->data.path, ds->n, c->loop.seq,
                    min_val + (size_t)c->loop.seq + 2);
    }
    ds->n_train = ds->n - min_val;
    return 0;
}

/* Entropy (nats) of the unigram distribution of the training targets the loss counts. */
double unigram_entropy(const dataset* ds, int T) {
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

