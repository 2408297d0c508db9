/* nbdiff: compare two safetensors files tensor by tensor, in the order of the first file's data
   (for the trainer's checkpoints and dumps: forward order), and name the first tensor whose
   values differ beyond |a - b| <= atol + rtol * |b|, with its largest absolute and relative
   error. The usage text below (USAGE, printed by --help) is the reference. */
#define _POSIX_C_SOURCE 200809L
#define _XOPEN_SOURCE 700 /* realpath, fsync: safetensors.h's writers */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#define ST_IMPLEMENTATION
#include "safetensors.h"

#define USAGE "usage: nbdiff A.safetensors B.safetensors [--atol X] [--rtol X] [--scaled] [--all] [--prefix P]"
static const char* const help =
    USAGE "\n"
    "Compares the tensors of A and B present in both, in the order of A's data, and names the\n"
    "first whose values differ beyond |a - b| <= atol + rtol |b|.\n"
    "  --atol X    absolute tolerance, a finite number >= 0 (default 0)\n"
    "  --rtol X    relative tolerance, a finite number >= 0 (default 0)\n"
    "  --scaled    atol is relative to each tensor's largest finite |b|:\n"
    "              |a - b| <= atol max|b| + rtol |b| (for dumps, whose activations and gradients\n"
    "              differ by orders of magnitude)\n"
    "  --all       one line per tensor, not only the first that differs\n"
    "  --prefix P  only tensors whose name starts with P (e.g. \"transformer.\" skips the moments)\n"
    "With atol and rtol 0 (the default) values must be equal (+0 equals -0). Inf, -Inf and NaN\n"
    "equal only the same non-finite value in the other file (any NaN equals any NaN), whatever\n"
    "the tolerances.\n"
    "A tensor present in only one file (after --prefix) is a difference: it is listed\n"
    "(\"only in A: NAME\") and the exit status is 1.\n"
    "Exit status: 0 every tensor within tolerance and none in only one file; 1 a tensor differs\n"
    "or is in only one file; 2 the files cannot be compared: a bad option, an unreadable or\n"
    "malformed file (the header must be a JSON object of tensors with a known dtype, a shape of\n"
    "non-negative integers, and integer data_offsets that tile the data exactly), a tensor of\n"
    "another shape or dtype in the other file (F32 against F16 is an error, not a comparison),\n"
    "a tensor of a dtype other than F32, F64, F16 or BF16, or no tensor in both files to compare.\n";

static int fail(const char* fmt, ...) {
    va_list ap;
    fprintf(stderr, "nbdiff: ");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n");
    return 2;
}

/* a numeric option: the whole argument a finite number >= 0 */
static int parse_tol(const char* opt, const char* s, double* out) {
    char* end = NULL;
    double v;
    errno = 0;
    v = strtod(s, &end);
    if (!*s || *s == ' ' || *s == '\t' || *s == '\n' || end == s || *end || errno == ERANGE || !isfinite(v) ||
        !(v >= 0))
        return fail("%s: \"%s\" is not a finite number >= 0", opt, s);
    *out = v;
    return 0;
}

static int has_prefix(const char* name, const char* prefix) { return !strncmp(name, prefix, strlen(prefix)); }

/* "[2,3]", as the header writes it */
static const char* shape_str(const st_tensor* t, char* buf, size_t n) {
    int k, w = snprintf(buf, n, "[");
    for (k = 0; k < t->ndim && w > 0 && (size_t)w < n; k++)
        w += snprintf(buf + w, n - (size_t)w, "%s%zu", k ? "," : "", t->shape[k]);
    if (w > 0 && (size_t)w < n) snprintf(buf + w, n - (size_t)w, "]");
    return buf;
}

static int same_shape(const st_tensor* a, const st_tensor* b) {
    int k;
    if (a->ndim != b->ndim) return 0;
    for (k = 0; k < a->ndim; k++)
        if (a->shape[k] != b->shape[k]) return 0;
    return 1;
}

int main(int argc, char** argv) {
    const char *pa = NULL, *pb = NULL, *prefix = "";
    double atol = 0, rtol = 0;
    int all = 0, scaled = 0, i, rc = 0, compared = 0, differ = 0, only_a = 0, only_b = 0;
    st_file A, B;
    for (i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) { fputs(help, stdout); return 0; }
        if ((!strcmp(argv[i], "--atol") || !strcmp(argv[i], "--rtol") || !strcmp(argv[i], "--prefix")) &&
            i + 1 == argc)
            return fail("%s needs a value\n" USAGE, argv[i]);
        if (!strcmp(argv[i], "--atol")) { if (parse_tol("--atol", argv[++i], &atol)) return 2; }
        else if (!strcmp(argv[i], "--rtol")) { if (parse_tol("--rtol", argv[++i], &rtol)) return 2; }
        else if (!strcmp(argv[i], "--prefix")) prefix = argv[++i];
        else if (!strcmp(argv[i], "--all")) all = 1;
        else if (!strcmp(argv[i], "--scaled")) scaled = 1;
        else if (argv[i][0] != '-' && !pa) pa = argv[i];
        else if (argv[i][0] != '-' && !pb) pb = argv[i];
        else return fail("unexpected argument \"%s\"\n" USAGE, argv[i]);
    }
    if (!pa || !pb) return fail("two files to compare are needed\n" USAGE);
    memset(&B, 0, sizeof B);
    if (st_open(&A, pa) || st_open(&B, pb)) {
        rc = fail("%s", A.err[0] ? A.err : B.err);
        goto done;
    }
    /* the tensors of B not in A (B's order), then A's in A's order */
    for (i = 0; i < B.n; i++)
        if (has_prefix(B.t[i].name, prefix) && !st_find(&A, B.t[i].name)) {
            printf("only in %s: %s\n", pb, B.t[i].name);
            only_b++;
        }
    for (i = 0; i < A.n && rc != 2; i++) {
        const st_tensor *ta = &A.t[i], *tb;
        double max_abs = 0, max_rel = 0, worst_excess = 0, tol = atol;
        size_t k, worst = 0;
        int bad = 0;
        char sa[256], sb[256];
        if (!has_prefix(ta->name, prefix)) continue;
        if (!(tb = st_find(&B, ta->name))) {
            printf("only in %s: %s\n", pa, ta->name);
            only_a++;
            continue;
        }
        if (ta->dtype != tb->dtype) {
            rc = fail("tensor %s is %s in %s and %s in %s (a dtype mismatch is not compared)", ta->name,
                      st_dtype_name(ta->dtype), pa, st_dtype_name(tb->dtype), pb);
            break;
        }
        if (!st_is_float(ta->dtype)) {
            rc = fail("tensor %s is %s: only F32, F64, F16 or BF16 tensors are compared", ta->name,
                      st_dtype_name(ta->dtype));
            break;
        }
        if (!same_shape(ta, tb)) {
            rc = fail("tensor %s has shape %s in %s and %s in %s", ta->name, shape_str(ta, sa, sizeof sa), pa,
                      shape_str(tb, sb, sizeof sb), pb);
            break;
        }
        if (scaled) { /* over the finite values: one Inf in B must not make every tolerance Inf */
            double mb = 0;
            for (k = 0; k < tb->count; k++) {
                const double b = fabs(st_value(&B, tb, k));
                if (isfinite(b)) mb = fmax(mb, b);
            }
            tol = atol * mb;
        }
        for (k = 0; k < ta->count; k++) {
            const double a = st_value(&A, ta, k), b = st_value(&B, tb, k), d = fabs(a - b);
            const double lim = tol + rtol * fabs(b);
            int out;
            if (a == b || (isnan(a) && isnan(b))) continue;
            /* a non-finite value on either side equals only the same non-finite value */
            out = !isfinite(a) || !isfinite(b) || !(d <= lim);
            if (d > max_abs || isnan(d)) max_abs = d;
            if (b != 0 && d / fabs(b) > max_rel) max_rel = d / fabs(b);
            if (out) {
                const double excess = isfinite(d - lim) ? d - lim : INFINITY;
                if (!bad || excess > worst_excess) {
                    worst_excess = excess;
                    worst = k;
                }
                bad = 1;
            }
        }
        compared++;
        if (all || (bad && !differ))
            printf("%-48s %s  max abs %.3g  max rel %.3g%s", ta->name, bad ? "DIFFERS" : "ok", max_abs,
                   max_rel, bad ? "" : "\n");
        if (bad && (all || !differ))
            printf("  (worst [%zu]: %.9g vs %.9g)\n", worst, st_value(&A, ta, worst), st_value(&B, tb, worst));
        if (bad && !differ && !all) printf("first tensor that differs, in %s's order: %s\n", pa, ta->name);
        differ += bad;
    }
    if (rc != 2) {
        printf("%d tensors compared, %d differ, %d only in %s, %d only in %s (atol %g%s, rtol %g)\n", compared,
               differ, only_a, pa, only_b, pb, atol, scaled ? " x max|b|" : "", rtol);
        if (!compared)
            rc = fail("no tensor%s%s%s in both files: nothing was compared", *prefix ? " named \"" : "", prefix,
                      *prefix ? "...\"" : "");
        else rc = differ || only_a || only_b ? 1 : 0;
    }
done:
    st_close(&A);
    st_close(&B);
    return rc;
}
