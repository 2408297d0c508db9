/* The safetensors reader (examples/safetensors.h: nbdiff, nbimport and the trainer's checkpoints
   read files through it) under hostile bytes. On every input: no crash or sanitizer report;
   st_parse returns 0, or 1 with a message naming the file; when it accepts, what it promises is
   checked here by separate code: the names are unique, each tensor's bytes are its count (the
   product of its shape) times its dtype's size, the tensors tile the data from byte 0 to its end
   in the order given; every element of the float tensors is read (ASan sees a read past the
   data) and st_check_finite agrees with a scan of those values.

   libFuzzer (clang -fsanitize=fuzzer,address,undefined, NB_LIBFUZZER defined): any input.
   Otherwise a deterministic randomized driver (gcc, also under ASan in the normal test builds):
       fuzz_safetensors [iterations]        valid files of every dtype, then mutations of them
       fuzz_safetensors --corpus FILE...    run the given inputs (the seed corpus)
       fuzz_safetensors --write-seeds DIR   write the seed corpus
   The driver also checks that each valid file parses back to exactly what was written (names,
   dtypes, shapes, offsets, metadata, the values of each float dtype from encodings computed
   without the reader), and that mutations which must break the layout (a truncation, bytes
   appended, a header length moved) are refused. */
#define _POSIX_C_SOURCE 200809L
#define _XOPEN_SOURCE 700 /* realpath, fsync: safetensors.h's writers */
#define ST_IMPLEMENTATION
#include "../../examples/safetensors.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int g_failures;

static void check(int ok, const char* what) {
    if (ok) return;
    printf("FAIL: %s\n", what);
    g_failures++;
#ifdef NB_LIBFUZZER
    abort();
#endif
}

/* the reader's promises, checked on an accepted file */
static void check_accepted(st_file* f) {
    size_t cursor = 0, i;
    int k, j;
    for (k = 0; k < f->n; k++) {
        const st_tensor* t = &f->t[k];
        size_t count = 1;
        for (j = 0; j < t->ndim; j++) count *= t->shape[j]; /* no overflow: count * size <= n_data */
        check(t->ndim >= 0 && t->ndim <= ST_MAX_DIMS, "dimensions in range");
        check(count == t->count, "count is the product of the shape");
        check(t->begin == cursor, "the tensors tile the data in order");
        check(t->end - t->begin == t->count * (size_t)st_dtype_size(t->dtype), "bytes = count x dtype size");
        check(t->end <= f->n_data, "inside the data");
        cursor = t->end;
        for (j = 0; j < k; j++) check(strcmp(f->t[j].name, t->name) != 0, "unique names");
        check(st_find(f, t->name) == t, "st_find finds it");
        if (st_is_float(t->dtype)) {
            int finite = 1;
            volatile double sink = 0;
            for (i = 0; i < t->count; i++) {
                const double v = st_value(f, t, i);
                finite &= isfinite(v) && fabs(v) <= 3.4028234663852886e38;
                sink += v;
            }
            (void)sink;
            check(st_check_finite(f, t) == !finite, "st_check_finite agrees with the values");
        } else check(st_check_finite(f, t) == 1, "st_check_finite refuses a non-float tensor");
    }
    check(cursor == f->n_data, "the tensors end where the data ends");
    if (f->meta) {
        const cJSON* e;
        cJSON_ArrayForEach(e, f->meta) check(st_meta(f, e->string) == e->valuestring, "metadata strings");
    }
}

static int parse(const uint8_t* data, size_t size) {
    st_file f;
    const int rc = st_parse(&f, "input", data, size);
    check(rc == 0 || rc == 1, "st_parse returns 0 or 1");
    if (rc) check(!strncmp(f.err, "input", 5), "a refusal's message names the file");
    else check_accepted(&f);
    st_close(&f);
    return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    parse(data, size);
    return 0;
}

#ifndef NB_LIBFUZZER
#define FUZZ_RNG_SEED 0x5AFE7E45ULL
#include "fuzz_rng.h"

/* values with their encodings, written out by hand (not by the reader's decoders) */
typedef struct enc { unsigned long long bits; double v; } enc;
static const enc k_f16[] = {{0x3C00, 1.0}, {0xC000, -2.0}, {0x7BFF, 65504.0}, {0x0001, 5.9604644775390625e-08},
                            {0x3555, 0.333251953125}, {0x8000, -0.0}, {0x7C00, INFINITY}, {0x0400, 6.103515625e-05}};
static const enc k_bf16[] = {{0x3F80, 1.0}, {0xC040, -3.0}, {0x3EAB, 0.333984375}, {0x7F80, INFINITY},
                             {0x0001, 9.183549615799121e-41}, {0x7F7F, 3.3895313892515355e+38}};
static const enc k_f32[] = {{0x3F800000, 1.0}, {0xBE800000, -0.25}, {0x7F7FFFFF, 3.4028234663852886e38},
                            {0x00000001, 1.401298464324817e-45}, {0xFF800000, -INFINITY}, {0x3DCCCCCD, 0.100000001490116119384765625}};
static const enc k_f64[] = {{0x3FF0000000000000ULL, 1.0}, {0xC008000000000000ULL, -3.0},
                            {0x3FB999999999999AULL, 0.1}, {0x7FEFFFFFFFFFFFFFULL, 1.7976931348623157e308},
                            {0x47EFFFFFE0000000ULL, 3.4028234663852886e38}, {0x47F0000000000000ULL, 3.4028236692093846346e38}};

typedef struct gen_t { char name[16]; st_dtype dt; int ndim; size_t shape[3], count; double v[64]; } gen_t;

/* a valid file of 0-4 tensors of random dtypes and shapes, metadata sometimes; returns its size */
static size_t make_file(unsigned char* out, size_t cap, gen_t* g, int* n, char meta_val[2][16]) {
    cJSON *root = cJSON_CreateObject(), *meta = NULL;
    unsigned char data[4096];
    size_t nd = 0, len, pad, i;
    char* json;
    int k, j;
    *n = (int)rnd(5);
    if (rnd(2)) {
        meta = cJSON_AddObjectToObject(root, "__metadata__");
        for (k = 0; k < 2; k++) {
            snprintf(meta_val[k], 16, "v%u", rnd(1000));
            cJSON_AddStringToObject(meta, k ? "b" : "a", meta_val[k]);
        }
    }
    for (k = 0; k < *n; k++) {
        cJSON *e = cJSON_CreateObject(), *sh = cJSON_CreateArray(), *offs = cJSON_CreateArray();
        const size_t begin = nd;
        g[k].dt = (st_dtype)rnd(ST_N_DTYPES);
        g[k].ndim = (int)rnd(4);
        g[k].count = 1;
        for (j = 0; j < g[k].ndim; j++) {
            g[k].shape[j] = rnd(4);
            g[k].count *= g[k].shape[j];
            cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)g[k].shape[j]));
        }
        snprintf(g[k].name, sizeof g[k].name, "t%d.%u", k, rnd(100));
        for (i = 0; i < g[k].count; i++) {
            const enc* tab = g[k].dt == ST_F16 ? k_f16 : g[k].dt == ST_BF16 ? k_bf16 : g[k].dt == ST_F32 ? k_f32 : k_f64;
            const unsigned nt = g[k].dt == ST_F16 ? 8 : 6;
            const int size = st_dtype_size(g[k].dt);
            const enc* x = &tab[rnd(nt)];
            for (j = 0; j < size; j++) /* little-endian; a non-float dtype keeps the bytes */
                data[nd++] = st_is_float(g[k].dt) ? (unsigned char)(x->bits >> (8 * j)) : (unsigned char)rnd(256);
            g[k].v[i] = x->v;
        }
        cJSON_AddStringToObject(e, "dtype", st_dtype_name(g[k].dt));
        cJSON_AddItemToObject(e, "shape", sh);
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)begin));
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)nd));
        cJSON_AddItemToObject(e, "data_offsets", offs);
        cJSON_AddItemToObject(root, g[k].name, e);
    }
    json = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    len = strlen(json);
    pad = rnd(3) ? (8 - len % 8) % 8 : 0; /* padding is optional */
    if (8 + len + pad + nd > cap) abort();
    for (i = 0; i < 8; i++) out[i] = (unsigned char)((len + pad) >> (8 * i));
    memcpy(out + 8, json, len);
    memset(out + 8 + len, ' ', pad);
    memcpy(out + 8 + len + pad, data, nd);
    free(json);
    return 8 + len + pad + nd;
}

/* the valid file reads back as written */
static void check_roundtrip(const unsigned char* buf, size_t n, const gen_t* g, int ng, char meta_val[2][16]) {
    st_file f;
    int k, j;
    size_t i, at = 0;
    check(st_parse(&f, "valid", buf, n) == 0, "a valid file is accepted");
    if (f.err[0]) printf("  %s\n", f.err);
    check(f.n == ng, "every tensor read");
    for (k = 0; k < ng && k < f.n; k++) {
        const st_tensor* t = st_find(&f, g[k].name);
        if (!t) { check(0, "a tensor by its name"); continue; }
        check(t->dtype == g[k].dt && t->ndim == g[k].ndim && t->count == g[k].count, "dtype, shape, count");
        for (j = 0; j < t->ndim; j++) check(t->shape[j] == g[k].shape[j], "the shape");
        check(t->begin == at, "the offsets");
        at += g[k].count * (size_t)st_dtype_size(g[k].dt);
        if (st_is_float(t->dtype))
            for (i = 0; i < t->count; i++) {
                const double v = st_value(&f, t, i);
                check(v == g[k].v[i] && signbit(v) == signbit(g[k].v[i]), "each value decoded exactly");
            }
    }
    if (f.meta) check(!strcmp(st_meta(&f, "a"), meta_val[0]) && !strcmp(st_meta(&f, "b"), meta_val[1]), "metadata");
    st_close(&f);
}

int main(int argc, char** argv) {
    static unsigned char good[8192], buf[8192 + 64];
    gen_t g[4];
    char meta_val[2][16];
    int it, iters = argc > 1 && argv[1][0] != '-' ? atoi(argv[1]) : 20000, k, ng, accepted = 0;
    if (argc > 1 && !strcmp(argv[1], "--corpus")) {
        check(argc > 2, "--corpus has files (an empty seed directory?)");
        for (k = 2; k < argc; k++) {
            size_t n;
            unsigned char* b;
            char err[512];
            if (st_read_file(argv[k], &b, &n, err, sizeof err, NULL, NULL)) abort();
            parse(b, n);
            free(b);
        }
        printf("fuzz_safetensors: %d corpus inputs, %d failed checks\n", argc - 2, g_failures);
        return g_failures != 0;
    }
    if (argc > 2 && !strcmp(argv[1], "--write-seeds")) {
        for (k = 0; k < 6; k++) {
            char path[4096];
            FILE* fp;
            const size_t n = make_file(good, sizeof good, g, &ng, meta_val);
            snprintf(path, sizeof path, "%s/seed%02d", argv[2], k);
            if (!(fp = fopen(path, "wb")) || fwrite(good, 1, n, fp) != n || fclose(fp)) return 1;
        }
        return 0;
    }
    for (it = 0; it < iters; it++) {
        const size_t n = make_file(good, sizeof good, g, &ng, meta_val);
        const unsigned kind = rnd(8);
        size_t len = n, i, h = 0;
        int must_fail = 0, rc;
        if (it % 8 == 0) check_roundtrip(good, n, g, ng, meta_val);
        memcpy(buf, good, n);
        for (i = 0; i < 8; i++) h |= (size_t)good[i] << (8 * i);
        switch (kind) {
        case 0: /* bytes of the header */
            for (k = 0; k < 1 + (int)rnd(3); k++) buf[8 + rnd((unsigned)h)] ^= (unsigned char)(1 + rnd(255));
            break;
        case 1: /* a digit of the header (shapes, offsets) */
            for (k = 0; k < 64; k++) {
                const size_t p = 8 + rnd((unsigned)h);
                if (buf[p] >= '0' && buf[p] <= '9') { buf[p] = (unsigned char)('0' + rnd(10)); break; }
            }
            break;
        case 2: /* truncated */
            len = rnd((unsigned)n);
            must_fail = 1;
            break;
        case 3: /* bytes appended */
            len = n + 1 + rnd(63);
            for (i = n; i < len; i++) buf[i] = (unsigned char)rnd(256);
            must_fail = 1;
            break;
        case 4: { /* the header length moved */
            const size_t h2 = h + 1 + rnd(8) - (rnd(2) ? 0 : rnd((unsigned)h) + 1);
            for (i = 0; i < 8; i++) buf[i] = (unsigned char)(h2 >> (8 * i));
            must_fail = h2 != h;
            break;
        }
        case 5: /* a name of a tensor or key copied over another (duplicates) */
            for (k = 0; k < 64; k++) {
                const size_t p = 8 + rnd((unsigned)h);
                if (buf[p] == 't' && p + 2 < 8 + h) { buf[p + 1] = '0'; break; }
            }
            break;
        case 6: /* bytes of the data (always still the layout: accepted) */
            if (n > 8 + h) buf[8 + h + rnd((unsigned)(n - 8 - h))] ^= (unsigned char)(1 + rnd(255));
            break;
        default: /* random bytes */
            len = rnd(128);
            for (i = 0; i < len; i++) buf[i] = (unsigned char)rnd(256);
            break;
        }
        rc = parse(buf, len);
        accepted += rc == 0;
        if (must_fail && rc == 0) {
            printf("FAIL: mutation %d (kind %u, %zu of %zu bytes) was accepted\n", it, kind, len, n);
            g_failures++;
        }
        if (kind == 6 && rc != 0) {
            printf("FAIL: a change of data bytes only was refused (mutation %d)\n", it);
            g_failures++;
        }
    }
    printf("fuzz_safetensors: %d files and mutations, %d accepted; %d failed checks\n", iters, accepted, g_failures);
    printf("%d passed, %d failed\n", g_failures ? 0 : 1, g_failures != 0);
    return g_failures != 0;
}
#endif
