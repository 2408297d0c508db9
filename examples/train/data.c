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
int add_problem(const dataset* ds, unsigned long long* st, int val, char* buf,
                       unsigned long long* sum) {
    unsigned long long a, b;
    do {
        a = add_operand(st, ds->digits);
        b = add_operand(st, ds->digits);
    } while (add_is_val(a, b) != val);
    *sum = a + b;
    return sprintf(buf, "%llu+%llu=", a, b);
}

int add_answer(const dataset* ds, unsigned long long sum, char* buf) {
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
    FILE* f;
    size_t sz;
    if (stat(c->data, &st) != 0) return fail("cannot open data file %s: %s", c->data, strerror(errno));
    if (!S_ISREG(st.st_mode)) return fail("data file %s is not a regular file", c->data);
    if (st.st_size == 0) return fail("data file %s is empty", c->data);
    sz = (size_t)st.st_size;
    if (!(f = fopen(c->data, "rb"))) return fail("cannot open data file %s: %s", c->data, strerror(errno));
    ds->bytes = (unsigned char*)xcalloc(sz, 1);
    if (fread(ds->bytes, 1, sz, f) != sz) {
        fclose(f);
        return fail("cannot read data file %s", c->data);
    }
    fclose(f);
    ds->n = sz;
    return 0;
}

int load_data(const config* c, dataset* ds) {
    unsigned long long n = 0;
    size_t min_val;
    memset(ds, 0, sizeof *ds);
    ds->seed = c->seed;
    ds->digits = c->digits;
    ds->reverse = c->reverse;
    if (!c->data) {
        const int need = 3 * c->digits + 4; /* "a+b=" plus the longest answer and newline */
        if (c->seq < need)
            return fail("--seq %d is too short for %d-digit addition (need at least %d)", c->seq,
                        c->digits, need);
        ds->hash = hash3(0xADD, (unsigned long long)c->digits, (unsigned long long)c->reverse);
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
    min_val = (size_t)(c->val_frac * (double)ds->n);
    if (min_val < (size_t)c->seq + 2) min_val = (size_t)c->seq + 2;
    if (ds->n < min_val + (size_t)c->seq + 2)
        return fail("data file %s has %zu bytes: too small for --seq %d with a held-out "
                    "split (need at least %zu)", c->data, ds->n, c->seq,
                    min_val + (size_t)c->seq + 2);
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

