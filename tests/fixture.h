/* fixture.h - loader for the reference fixtures written by tests/gen_fixtures.py.
   Header-only, static functions, C99 and C++.

   Format (little-endian):
       magic "NBFX0001" (8 bytes); uint32 count; then count records of
       uint32 name_len, name bytes (no NUL), uint32 ndim, uint32 dims[ndim],
       float64 data[prod(dims)]

   nbf_load reads the whole file and validates every length against the bytes that are really
   there before using it: a missing, truncated or corrupt file gives a message on stderr and -1,
   never a crash or an oversized allocation. Trailing bytes after the last record and duplicate
   names are treated as corruption too. */
#ifndef NB_FIXTURE_H
#define NB_FIXTURE_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__GNUC__)
#define NBF__UNUSED __attribute__((unused))
#else
#define NBF__UNUSED
#endif

#define NBF_MAX_NDIM 4
#define NBF_MAX_NAME 63          /* name[64] keeps the NUL */
#define NBF_MAX_COUNT 100000
#define NBF_MAX_FILE (256L << 20) /* fixtures are small; anything bigger is not ours */

typedef struct nbf_tensor {
    char name[64];
    int ndim;
    int dims[4];
    size_t n;
    double* data;
} nbf_tensor;

typedef struct nbf_file {
    int count;
    nbf_tensor* t;
} nbf_file;

static NBF__UNUSED void nbf_free(nbf_file* f) {
    int i;
    if (!f) return;
    if (f->t)
        for (i = 0; i < f->count; i++) free(f->t[i].data);
    free(f->t);
    f->t = NULL;
    f->count = 0;
}

/* Bounded little-endian reader over an in-memory buffer. */
typedef struct nbf__cur {
    const unsigned char* p;
    size_t left;
} nbf__cur;

static NBF__UNUSED int nbf__u32(nbf__cur* c, uint32_t* v) {
    if (c->left < 4) return -1;
    *v = (uint32_t)c->p[0] | ((uint32_t)c->p[1] << 8) | ((uint32_t)c->p[2] << 16) |
         ((uint32_t)c->p[3] << 24);
    c->p += 4;
    c->left -= 4;
    return 0;
}

static NBF__UNUSED double nbf__f64(const unsigned char* p) {
    uint64_t u = 0;
    double d;
    int k;
    for (k = 7; k >= 0; k--) u = (u << 8) | p[k];
    memcpy(&d, &u, sizeof d);
    return d;
}

/* Parse an in-memory image of a fixture file. label names it in messages; quiet = 1 suppresses
   them (the loader's own corruption tests). Returns 0 or -1 like nbf_load. */
static NBF__UNUSED int nbf__parse(nbf_file* f, const unsigned char* buf, size_t size,
                                  const char* label, int quiet) {
    nbf__cur c;
    uint32_t count, i;
    const char* why = NULL;

    f->count = 0;
    f->t = NULL;
    c.p = buf;
    c.left = size;
    if (!buf || c.left < 8 || memcmp(c.p, "NBFX0001", 8) != 0) {
        why = "bad magic (expected NBFX0001)";
        goto fail;
    }
    c.p += 8;
    c.left -= 8;
    if (nbf__u32(&c, &count)) { why = "truncated header"; goto fail; }
    /* a record takes at least 17 bytes (name_len, 1-byte name, ndim = 0, one float64) */
    if (count == 0 || count > NBF_MAX_COUNT || count > c.left / 17) {
        why = "absurd tensor count";
        goto fail;
    }
    f->t = (nbf_tensor*)calloc(count, sizeof(nbf_tensor));
    if (!f->t) { why = "out of memory"; goto fail; }

    for (i = 0; i < count; i++) {
        nbf_tensor* t = &f->t[i];
        uint32_t name_len, ndim, d, j;
        size_t n = 1, bytes;
        if (nbf__u32(&c, &name_len)) { why = "truncated record (name length)"; goto fail; }
        if (name_len == 0 || name_len > NBF_MAX_NAME) { why = "bad name length"; goto fail; }
        if (c.left < name_len) { why = "truncated record (name)"; goto fail; }
        memcpy(t->name, c.p, name_len);
        t->name[name_len] = '\0';
        if (strlen(t->name) != name_len) { why = "NUL byte inside a name"; goto fail; }
        c.p += name_len;
        c.left -= name_len;
        if (nbf__u32(&c, &ndim)) { why = "truncated record (ndim)"; goto fail; }
        if (ndim > NBF_MAX_NDIM) { why = "ndim larger than 4"; goto fail; }
        t->ndim = (int)ndim;
        for (d = 0; d < ndim; d++) {
            uint32_t v;
            if (nbf__u32(&c, &v)) { why = "truncated record (dims)"; goto fail; }
            /* every element needs 8 bytes that are really in the buffer, so n <= c.left / 8
               and n * 8 cannot overflow */
            if (v == 0 || v > 0x7fffffffu || n > (c.left / 8) / v) {
                why = "absurd dimension (zero, or more data than the file holds)";
                goto fail;
            }
            t->dims[d] = (int)v;
            n *= v;
        }
        t->n = n;
        bytes = n * 8;
        if (c.left < bytes) { why = "truncated data"; goto fail; }
        t->data = (double*)malloc(bytes);
        if (!t->data) { why = "out of memory"; goto fail; }
        for (j = 0; j < n; j++) t->data[j] = nbf__f64(c.p + (size_t)j * 8);
        c.p += bytes;
        c.left -= bytes;
        f->count = (int)i + 1; /* from here on nbf_free releases this tensor */
        for (j = 0; j < i; j++)
            if (strcmp(f->t[j].name, t->name) == 0) { why = "duplicate tensor name"; goto fail; }
    }
    if (c.left != 0) { why = "trailing bytes after the last record"; goto fail; }
    return 0;

fail:
    nbf_free(f); /* f->count covers every tensor whose data was allocated */
    if (!quiet)
        fprintf(stderr, "fixture: '%s' is corrupt: %s (at byte %lu of %lu)\n", label, why,
                (unsigned long)(size - c.left), (unsigned long)size);
    return -1;
}

/* Load a fixture file. 0 on success; -1 with a message on stderr when the file is missing,
   unreadable or corrupt (f is then empty, and nbf_free on it is harmless). */
static NBF__UNUSED int nbf_load(nbf_file* f, const char* path) {
    FILE* fp;
    long size;
    unsigned char* buf;
    int rc;

    if (!f) return -1;
    f->count = 0;
    f->t = NULL;
    if (!path) {
        fprintf(stderr, "fixture: no path given\n");
        return -1;
    }
    fp = fopen(path, "rb");
    if (!fp) {
        fprintf(stderr, "fixture: cannot open '%s' (generate it with tests/gen_fixtures.py)\n",
                path);
        return -1;
    }
    if (fseek(fp, 0, SEEK_END) != 0 || (size = ftell(fp)) < 0 || fseek(fp, 0, SEEK_SET) != 0) {
        fclose(fp);
        fprintf(stderr, "fixture: cannot determine the size of '%s'\n", path);
        return -1;
    }
    if (size > NBF_MAX_FILE) {
        fclose(fp);
        fprintf(stderr, "fixture: '%s' is %ld bytes, more than a fixture can be\n", path, size);
        return -1;
    }
    buf = (unsigned char*)malloc(size ? (size_t)size : 1);
    if (!buf) {
        fclose(fp);
        fprintf(stderr, "fixture: out of memory reading '%s'\n", path);
        return -1;
    }
    if (fread(buf, 1, (size_t)size, fp) != (size_t)size) {
        fclose(fp);
        free(buf);
        fprintf(stderr, "fixture: read error on '%s'\n", path);
        return -1;
    }
    fclose(fp);
    rc = nbf__parse(f, buf, (size_t)size, path, 0);
    free(buf);
    return rc;
}

/* The tensor called `name`, or NULL. */
static NBF__UNUSED const nbf_tensor* nbf_get(const nbf_file* f, const char* name) {
    int i;
    if (!f || !name) return NULL;
    for (i = 0; i < f->count; i++)
        if (strcmp(f->t[i].name, name) == 0) return &f->t[i];
    return NULL;
}

#endif /* NB_FIXTURE_H */
