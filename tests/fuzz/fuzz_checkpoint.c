/* The trainer's checkpoint loader under hostile bytes (examples/train/checkpoint.c,
   checkpoint_parse: header length, JSON, names, dtypes, shapes, offsets, metadata, values).

   libFuzzer (clang -fsanitize=fuzzer,address,undefined, NB_LIBFUZZER defined): any input.
   Otherwise a deterministic randomized driver (gcc, also under ASan in the normal test builds):
   a valid checkpoint of a tiny model, then N mutations of it (byte flips in the header and the
   data, truncations, appended bytes, header-length changes, digit and name edits). Checks:
   no crash or sanitizer report; the unmutated file loads and round-trips the parameters; every
   mutation either loads or is rejected; mutations that break the layout are rejected.
       fuzz_checkpoint [iterations] [corpus-out-file]
   With a second argument it writes the valid checkpoint (the libFuzzer seed) and exits. */
#define _POSIX_C_SOURCE 200809L
#include "../../examples/train/train.h"
#include "../../examples/safetensors.h" /* st_read_file (checkpoint.c has it) */

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static model g_m;
static config g_c;
static dataset g_ds;
static nb_real* g_base[3];

static void setup(void) {
    static int ready = 0;
    int k;
    if (ready) return;
    ready = 1;
    /* fail() stays silent on a rank other than 0 while every rank checks the same thing:
       the fuzzer's thousands of rejections would otherwise flood stderr */
    config_defaults(&g_c);
    g_c.model.d_model = 8; g_c.model.n_layers = 1; g_c.model.n_heads = 2; g_c.loop.seq = 16; g_c.loop.batch = 2;
    g_c.machine.threads = 1;
    if (model_init(&g_m, &g_c) || load_data(&g_c, &g_ds)) abort();
    g_rank = 1;
    g_ranks = 2;
    g_same_everywhere = 1;
    for (k = 0; k < 3; k++) g_base[k] = (nb_real*)xcalloc(g_m.n, sizeof(nb_real));
}

static int parse(const uint8_t* data, size_t size) {
    int step = 0;
    long long at = 0;
    setup();
    return checkpoint_parse("fuzz", data, size, &g_c, &g_ds, &g_m, g_base, &step, &at);
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    parse(data, size);
    return 0;
}

#ifndef NB_LIBFUZZER
int main(int argc, char** argv) {
    const int iters = argc > 1 ? atoi(argv[1]) : 3000;
    char path[] = "/tmp/nb_fuzz_ck_XXXXXX";
    unsigned char *good, *buf;
    size_t n, hlen = 0, i;
    unsigned long long st = 0xF022;
    int it, loaded = 0, rejected = 0, failures = 0, layout_ok = 0, k;
    setup();
    nb_fill_normal(g_m.m, g_m.n_upd, 0.01, 0, 3);
    for (i = 0; i < g_m.n_upd; i++) g_m.v[i] = g_m.m[i] * g_m.m[i];
    g_m.adam_t = 7;
    {   /* a valid checkpoint from the real writer (as rank 0) */
        const int fd = mkstemp(path);
        char err[512];
        if (fd < 0) abort();
        g_rank = 0;
        if (save_checkpoint(argc > 2 ? argv[2] : path, &g_c, &g_ds, &g_m, 7)) abort();
        g_rank = 1;
        if (argc > 2) { remove(path); printf("seed written to %s\n", argv[2]); return 0; }
        if (st_read_file(path, &good, &n, err, sizeof err, NULL, NULL)) abort();
        remove(path);
    }
    for (k = 0; k < 8; k++) hlen |= (size_t)good[k] << (8 * k);
    /* the unmutated file loads and holds what was saved */
    if (parse(good, n) != 0 || memcmp(g_base[0], g_m.p, g_m.n * sizeof(nb_real)) ||
        memcmp(g_base[1], g_m.m, g_m.n * sizeof(nb_real)) || memcmp(g_base[2], g_m.v, g_m.n * sizeof(nb_real))) {
        printf("FAIL: the valid checkpoint does not load back\n");
        failures++;
    }
    buf = (unsigned char*)xcalloc(n + 64, 1);
    for (it = 0; it < iters; it++) {
        size_t len = n;
        const int kind = (int)rnd_below(&st, 8);
        int must_fail = 0, rc;
        memcpy(buf, good, n);
        switch (kind) {
        case 0: /* flip bytes in the JSON header */
            for (k = 0; k < 1 + (int)rnd_below(&st, 4); k++)
                buf[8 + rnd_below(&st, hlen)] ^= (unsigned char)(1 + rnd_below(&st, 255));
            break;
        case 1: /* flip bytes in the data (may stay finite: load or reject) */
            for (k = 0; k < 1 + (int)rnd_below(&st, 4); k++)
                buf[8 + hlen + rnd_below(&st, n - 8 - hlen)] ^= (unsigned char)(1 + rnd_below(&st, 255));
            break;
        case 2: /* truncate */
            len = rnd_below(&st, n);
            must_fail = 1;
            break;
        case 3: /* trailing bytes */
            len = n + 1 + rnd_below(&st, 63);
            must_fail = 1;
            break;
        case 4: { /* header length off by a little */
            long long d = (long long)rnd_below(&st, 17) - 8;
            size_t h = (size_t)((long long)hlen + (d == 0 ? 1 : d));
            for (k = 0; k < 8; k++) buf[k] = (unsigned char)(h >> (8 * k));
            must_fail = 1;
            break;
        }
        case 5: /* a digit in the header changes (offsets, shapes, step, metadata) */
            for (k = 0; k < 64; k++) {
                const size_t p = 8 + rnd_below(&st, hlen);
                if (buf[p] >= '0' && buf[p] <= '9') {
                    buf[p] = (unsigned char)('0' + (buf[p] - '0' + 1 + rnd_below(&st, 9)) % 10);
                    break;
                }
            }
            break;
        case 6: /* a letter of a name changes (missing, unexpected or duplicate tensor) */
            for (k = 0; k < 64; k++) {
                const size_t p = 8 + rnd_below(&st, hlen);
                if (buf[p] >= 'a' && buf[p] <= 'z') { buf[p] = (unsigned char)('a' + rnd_below(&st, 26)); break; }
            }
            break;
        default: /* random garbage of random length */
            len = rnd_below(&st, n + 1);
            for (i = 0; i < len; i++) buf[i] = (unsigned char)mix64(&st);
            must_fail = len < 8 || kind == 7;
            break;
        }
        rc = parse(buf, len);
        if (rc == 0) loaded++;
        else rejected++;
        if (rc == 0 && must_fail) {
            printf("FAIL: mutation %d (kind %d, %zu bytes) was accepted\n", it, kind, len);
            failures++;
        }
        layout_ok += rc == 0 && kind != 1;
    }
    free(buf);
    free(good);
    printf("%d mutations of a valid checkpoint: %d loaded, %d rejected with a message (%d header "
           "mutations still valid)\n", iters, loaded, rejected, layout_ok);
    printf("%d passed, %d failed\n", failures ? 0 : 1, failures);
    for (k = 0; k < 3; k++) free(g_base[k]);
    model_free(&g_m);
    return failures != 0;
}
#endif
