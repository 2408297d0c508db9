/* nbtest.h - the few helpers every normblocks test shares: a pass/fail tally with the closing
   line CI reads ("N passed, N failed"), tolerance comparisons of the form atol + rtol*|ref|,
   and a seeded random generator. Include after normblocks.h. */
#ifndef NBTEST_H
#define NBTEST_H

#include <math.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct nbt_tally { int passed, failed; } nbt_tally;
static nbt_tally nbt__tally;

/* Record one check. Returns ok so callers can add detail on failure. */
static inline int nbt_check(int ok, const char* name) {
    if (ok) nbt__tally.passed++;
    else {
        nbt__tally.failed++;
        printf("FAIL: %s\n", name);
    }
    return ok;
}

/* NaN and finiteness by the bits: these tests are also compiled with -Ofast / -ffast-math,
   where the compiler may fold isnan(), isfinite() and x != x to constants. */
static inline int nbt_isnan(double x) {
    uint64_t u;
    memcpy(&u, &x, sizeof u);
    return (u & 0x7fffffffffffffffULL) > 0x7ff0000000000000ULL;
}
static inline int nbt_finite(double x) {
    uint64_t u;
    memcpy(&u, &x, sizeof u);
    return (u & 0x7ff0000000000000ULL) != 0x7ff0000000000000ULL;
}

/* +inf (sign >= 0) or -inf from the bits: under -ffinite-math-only clang may fold the constant
   expression -INFINITY to an undefined value. */
static inline double nbt_inf(int sign) {
    const uint64_t u = sign >= 0 ? 0x7ff0000000000000ULL : 0xfff0000000000000ULL;
    double x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* Compare got[i] with ref[i] (double) under |got - ref| <= atol + rtol*|ref|. Prints the worst
   element on failure. NaN anywhere fails; an infinity passes only against the same one. */
static inline int nbt_close(const char* name, const nb_real* got, const double* ref, size_t n,
                     double atol, double rtol) {
    size_t i, worst = 0;
    double worst_excess = -1;
    int ok = 1;
    for (i = 0; i < n; i++) {
        double err = fabs((double)got[i] - ref[i]), lim = atol + rtol * fabs(ref[i]);
        const int fin = nbt_finite((double)got[i]) && nbt_finite(ref[i]);
        if (!fin && !nbt_isnan(ref[i]) && (double)got[i] == ref[i]) continue; /* same inf */
        if (!fin || !(err <= lim)) {
            ok = 0;
            if (!(err - lim <= worst_excess)) { worst_excess = err - lim; worst = i; }
        }
    }
    if (!nbt_check(ok, name))
        printf("  worst at [%zu]: got %.10g ref %.10g (atol %g rtol %g)\n", worst,
               (double)got[worst], ref[worst], atol, rtol);
    return ok;
}

/* Same, for two nb_real arrays. */
static inline int nbt_close_r(const char* name, const nb_real* got, const nb_real* ref, size_t n,
                       double atol, double rtol) {
    double* r = (double*)malloc(n * sizeof(double));
    size_t i;
    int ok;
    for (i = 0; i < n; i++) r[i] = (double)ref[i];
    ok = nbt_close(name, got, r, n, atol, rtol);
    free(r);
    return ok;
}

/* Like nbt_close_r, but rtol applies to the largest |ref| of the tensor: for results that are
   long sums with cancellation (weight gradients over many tokens), where an element can be
   small only because its terms cancel, and two valid summation orders then differ by rounding
   of the terms, not of the element. */
static inline int nbt_close_scaled(const char* name, const nb_real* got, const nb_real* ref,
                                   size_t n, double atol, double rtol) {
    double mx = 0;
    size_t i;
    for (i = 0; i < n; i++) mx = fabs((double)ref[i]) > mx ? fabs((double)ref[i]) : mx;
    return nbt_close_r(name, got, ref, n, atol + rtol * mx, 0);
}

static inline int nbt_same_bits(const char* name, const nb_real* a, const nb_real* b, size_t n) {
    return nbt_check(memcmp(a, b, n * sizeof(nb_real)) == 0, name);
}

/* Print the closing line and return the process exit code. */
static inline int nbt_finish(void) {
    printf("%d passed, %d failed\n", nbt__tally.passed, nbt__tally.failed);
    return nbt__tally.failed ? 1 : 0;
}

/* xorshift64* with a Box-Muller normal: deterministic across platforms. */
typedef struct nbt_rng { uint64_t s; } nbt_rng;
static inline double nbt_uniform(nbt_rng* r) {
    r->s ^= r->s >> 12; r->s ^= r->s << 25; r->s ^= r->s >> 27;
    return (double)((r->s * 2685821657736338717ULL) >> 11) * (1.0 / 9007199254740992.0);
}
static inline double nbt_normal(nbt_rng* r) {
    double u1 = nbt_uniform(r), u2 = nbt_uniform(r);
    if (u1 < 1e-300) u1 = 1e-300;
    return sqrt(-2 * log(u1)) * cos(6.283185307179586 * u2);
}
static inline void nbt_fill(nbt_rng* r, nb_real* x, size_t n, double mean, double std) {
    size_t i;
    for (i = 0; i < n; i++) x[i] = (nb_real)(mean + std * nbt_normal(r));
}
static inline nb_real* nbt_alloc(size_t n) {
    nb_real* p = (nb_real*)calloc(n ? n : 1, sizeof(nb_real));
    if (!p) { fprintf(stderr, "out of memory\n"); abort(); }
    return p;
}

#ifdef NB_DOUBLE
/* float64 build: finite differences of the library's own forward are accurate to ~1e-10 */
#define NBT_ATOL 1e-8
#define NBT_RTOL 1e-6
#else
/* float32: a few ulps of the largest term, amplified by the row reductions */
#define NBT_ATOL 2e-5
#define NBT_RTOL 2e-4
#endif

#endif
