/* nbdiff: compare two safetensors files tensor by tensor, in the order of the first file's data
   (for the trainer's checkpoints and dumps: forward order), and name the first tensor whose
   values differ beyond |a - b| <= atol + rtol * |b|, with its largest absolute and relative
   error. The usage text below (USAGE, printed by --help) is the reference. */
#define _POSIX_C_SOURCE 200809L
#define ST_TOOL "nbdiff"
#include <stdarg.h>
#include "safetensors_read.h"

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

typedef struct entry { const cJSON* e; double off, end; int index; } entry;
static int by_offset(const void* x, const void* y) {
    const entry *a = (const entry*)x, *b = (const entry*)y;
    if (a->off != b->off) return a->off < b->off ? -1 : 1;
    if (a->end != b->end) return a->end < b->end ? -1 : 1;
    return (a->index > b->index) - (a->index < b->index);
}
static int by_name(const void* x, const void* y) {
    return strcmp(((const entry*)x)->e->string, ((const entry*)y)->e->string);
}

/* The whole header of f, every tensor (whatever --prefix): an object per tensor with a dtype of
   safetensors, a shape of non-negative integers, data_offsets [begin, end] of integers whose
   difference is the shape's size in bytes; the tensors tile the data from byte 0 to its end
   (no hole, no overlap, nothing after); no name twice. Fills *out (caller frees) with the
   tensors sorted by offset. 2 with a message naming the file, the tensor and the problem. */
static int check_header(const st_file* f, entry** out, int* n_out) {
    static const char* const dtypes[] = {"F64", "I64", "U64", "F32", "I32", "U32", "F16", "BF16",
                                         "I16", "U16", "F8_E4M3", "F8_E5M2", "I8", "U8", "BOOL"};
    static const int sizes[] = {8, 8, 8, 4, 4, 4, 2, 2, 2, 2, 1, 1, 1, 1, 1};
    const int total = cJSON_GetArraySize(f->root);
    entry* t = (entry*)calloc((size_t)total + 1, sizeof(entry));
    const cJSON* e;
    double cursor = 0;
    int n = 0, i, rc = 0;
    if (!t) return fail("out of memory");
    cJSON_ArrayForEach(e, f->root) {
        const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype"), *shape, *offs, *x;
        double count = 1, bytes;
        int k;
        if (!strcmp(e->string, "__metadata__")) {
            if (!cJSON_IsObject(e)) { rc = fail("%s: __metadata__ is not a JSON object", f->path); break; }
            continue;
        }
        if (!cJSON_IsObject(e)) { rc = fail("%s: tensor %s is not a JSON object", f->path, e->string); break; }
        shape = cJSON_GetObjectItemCaseSensitive(e, "shape");
        offs = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
        for (k = 0; k < (int)(sizeof sizes / sizeof *sizes); k++)
            if (cJSON_IsString(dt) && !strcmp(dt->valuestring, dtypes[k])) break;
        if (k == (int)(sizeof sizes / sizeof *sizes)) {
            rc = fail("%s: tensor %s has no dtype or an unknown one", f->path, e->string);
            break;
        }
        if (!shape) { rc = fail("%s: tensor %s has no shape", f->path, e->string); break; }
        if (!cJSON_IsArray(shape)) { rc = fail("%s: tensor %s has a shape that is not an array", f->path, e->string); break; }
        cJSON_ArrayForEach(x, shape) {
            if (!st_is_count(x)) break;
            count *= x->valuedouble;
        }
        if (x) {
            rc = fail("%s: tensor %s has a shape that is not non-negative integers", f->path, e->string);
            break;
        }
        if (!cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2 || !st_is_count(cJSON_GetArrayItem(offs, 0)) ||
            !st_is_count(cJSON_GetArrayItem(offs, 1))) {
            rc = fail("%s: tensor %s has data_offsets that are not two non-negative integers", f->path,
                      e->string);
            break;
        }
        t[n].e = e;
        t[n].off = cJSON_GetArrayItem(offs, 0)->valuedouble;
        t[n].end = cJSON_GetArrayItem(offs, 1)->valuedouble;
        t[n].index = n;
        bytes = count * sizes[k];
        if (!(t[n].off <= t[n].end)) {
            rc = fail("%s: tensor %s has data_offsets [%.0f, %.0f] that end before they begin", f->path, e->string,
                      t[n].off, t[n].end);
            break;
        }
        if (t[n].end > (double)f->n_data) {
            rc = fail("%s: tensor %s has data_offsets [%.0f, %.0f] beyond the %zu bytes of data", f->path,
                      e->string, t[n].off, t[n].end, f->n_data);
            break;
        }
        if (!(t[n].end - t[n].off == bytes)) {
            rc = fail("%s: tensor %s has data_offsets [%.0f, %.0f] (%.0f bytes), its shape and dtype %.0f bytes",
                      f->path, e->string, t[n].off, t[n].end, t[n].end - t[n].off, bytes);
            break;
        }
        n++;
    }
    if (!rc) {
        qsort(t, (size_t)n, sizeof(entry), by_name);
        for (i = 1; i < n && !rc; i++)
            if (!strcmp(t[i].e->string, t[i - 1].e->string))
                rc = fail("%s: tensor %s appears twice in the header", f->path, t[i].e->string);
    }
    if (!rc) {
        qsort(t, (size_t)n, sizeof(entry), by_offset);
        for (i = 0; i < n && !rc; i++) {
            if (t[i].off != cursor)
                rc = fail("%s: tensor %s begins at byte %.0f of the data, not at %.0f (%s%s): a hole or an overlap",
                          f->path, t[i].e->string, t[i].off, cursor, i ? "the end of tensor " : "the start of the data",
                          i ? t[i - 1].e->string : "");
            cursor = t[i].end;
        }
        if (!rc && cursor != (double)f->n_data)
            rc = fail("%s: %.0f bytes of data after the last tensor's, in no tensor (junk)", f->path,
                      (double)f->n_data - cursor);
    }
    if (rc) { free(t); return rc; }
    *out = t;
    *n_out = n;
    return 0;
}

static int has_prefix(const char* name, const char* prefix) { return !strncmp(name, prefix, strlen(prefix)); }

static const char* dtype_name(const cJSON* e) {
    return cJSON_GetObjectItemCaseSensitive(e, "dtype")->valuestring;
}

int main(int argc, char** argv) {
    const char *pa = NULL, *pb = NULL, *prefix = "";
    double atol = 0, rtol = 0;
    int all = 0, scaled = 0, i, na = 0, nb = 0, rc = 0, compared = 0, differ = 0, only_a = 0, only_b = 0;
    st_file A, B;
    entry *ea = NULL, *eb = NULL;
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
    if (st_open(&A, pa)) return 2;
    if (st_open(&B, pb)) { st_close(&A); return 2; }
    if (check_header(&A, &ea, &na) || check_header(&B, &eb, &nb)) { rc = 2; goto done; }
    /* the tensors of B not in A (B's order), then A's in A's order */
    for (i = 0; i < nb; i++)
        if (has_prefix(eb[i].e->string, prefix) && !cJSON_GetObjectItemCaseSensitive(A.root, eb[i].e->string)) {
            printf("only in %s: %s\n", pb, eb[i].e->string);
            only_b++;
        }
    for (i = 0; i < na && rc != 2; i++) {
        st_tensor ta, tb;
        const cJSON* e_b;
        double max_abs = 0, max_rel = 0, worst_excess = 0, tol = atol;
        size_t k, worst = 0;
        int bad = 0;
        char* sa;
        char* sb;
        if (!has_prefix(ea[i].e->string, prefix)) continue;
        e_b = cJSON_GetObjectItemCaseSensitive(B.root, ea[i].e->string);
        if (!e_b) {
            printf("only in %s: %s\n", pa, ea[i].e->string);
            only_a++;
            continue;
        }
        if (strcmp(dtype_name(ea[i].e), dtype_name(e_b))) {
            rc = fail("tensor %s is %s in %s and %s in %s (a dtype mismatch is not compared)", ea[i].e->string,
                      dtype_name(ea[i].e), pa, dtype_name(e_b), pb);
            break;
        }
        if (st_tensor_of(&A, ea[i].e, &ta) || st_tensor_of(&B, e_b, &tb)) { rc = 2; break; }
        sa = cJSON_PrintUnformatted(ta.shape);
        sb = cJSON_PrintUnformatted(tb.shape);
        if (!sa || !sb) rc = fail("out of memory");
        else if (strcmp(sa, sb))
            rc = fail("tensor %s has shape %s in %s and %s in %s", ta.name, sa, pa, sb, pb);
        free(sa);
        free(sb);
        if (rc) break;
        if (scaled) { /* over the finite values: one Inf in B must not make every tolerance Inf */
            double mb = 0;
            for (k = 0; k < tb.count; k++) {
                const double b = fabs(value(&B, &tb, k));
                if (isfinite(b)) mb = fmax(mb, b);
            }
            tol = atol * mb;
        }
        for (k = 0; k < ta.count; k++) {
            const double a = value(&A, &ta, k), b = value(&B, &tb, k), d = fabs(a - b);
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
            printf("%-48s %s  max abs %.3g  max rel %.3g%s", ta.name, bad ? "DIFFERS" : "ok", max_abs,
                   max_rel, bad ? "" : "\n");
        if (bad && (all || !differ))
            printf("  (worst [%zu]: %.9g vs %.9g)\n", worst, value(&A, &ta, worst), value(&B, &tb, worst));
        if (bad && !differ && !all) printf("first tensor that differs, in %s's order: %s\n", pa, ta.name);
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
    free(ea);
    free(eb);
    st_close(&A);
    st_close(&B);
    return rc;
}
