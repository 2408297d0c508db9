/* nbdiff: compare two safetensors files tensor by tensor, in the order of the first file's data
   (for the trainer's checkpoints and dumps: forward order), and name the first tensor whose
   values differ beyond |a - b| <= atol + rtol * |b|, with its largest absolute and relative
   error. Exit status: 0 all within tolerance, 1 a tensor differs, 2 the files cannot be
   compared (unreadable, a tensor missing or of another shape or dtype).

   usage: nbdiff A.safetensors B.safetensors [--atol X] [--rtol X] [--scaled] [--all] [--prefix P]
     --scaled    atol is relative to each tensor's largest |b|: |a - b| <= atol max|b| + rtol |b|
                 (for dumps, whose activations and gradients differ by orders of magnitude)
     --all       one line per tensor, not only the first that differs
     --prefix P  only tensors whose name starts with P (e.g. "transformer." skips the moments)
   atol and rtol default to 0: bitwise equality (NaN equals NaN of the same bits). */
#define _POSIX_C_SOURCE 200809L
#define ST_TOOL "nbdiff"
#include "safetensors_read.h"

typedef struct entry { const cJSON* e; double off; } entry;
static int by_offset(const void* x, const void* y) {
    const double a = ((const entry*)x)->off, b = ((const entry*)y)->off;
    return a < b ? -1 : a > b;
}

int main(int argc, char** argv) {
    const char *pa = NULL, *pb = NULL, *prefix = "";
    double atol = 0, rtol = 0;
    int all = 0, scaled = 0, i, n = 0, rc = 0, compared = 0, differ = 0;
    st_file A, B;
    entry* order;
    const cJSON* e;
    for (i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--atol") && i + 1 < argc) atol = strtod(argv[++i], NULL);
        else if (!strcmp(argv[i], "--rtol") && i + 1 < argc) rtol = strtod(argv[++i], NULL);
        else if (!strcmp(argv[i], "--prefix") && i + 1 < argc) prefix = argv[++i];
        else if (!strcmp(argv[i], "--all")) all = 1;
        else if (!strcmp(argv[i], "--scaled")) scaled = 1;
        else if (argv[i][0] != '-' && !pa) pa = argv[i];
        else if (argv[i][0] != '-' && !pb) pb = argv[i];
        else {
            fprintf(stderr, "usage: nbdiff A.safetensors B.safetensors [--atol X] [--rtol X] [--scaled] [--all] "
                            "[--prefix P]\n");
            return 2;
        }
    }
    if (!pa || !pb || !(atol >= 0) || !(rtol >= 0)) {
        fprintf(stderr, "usage: nbdiff A.safetensors B.safetensors [--atol X] [--rtol X] [--scaled] [--all] "
                            "[--prefix P]\n");
        return 2;
    }
    if (st_open(&A, pa)) return 2;
    if (st_open(&B, pb)) { st_close(&A); return 2; }
    order = (entry*)calloc((size_t)cJSON_GetArraySize(A.root) + 1, sizeof(entry));
    cJSON_ArrayForEach(e, A.root) {
        const cJSON* offs = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
        if (!strcmp(e->string, "__metadata__") || strncmp(e->string, prefix, strlen(prefix))) continue;
        order[n].e = e;
        order[n].off = cJSON_IsArray(offs) ? cJSON_GetArrayItem(offs, 0)->valuedouble : 0;
        n++;
    }
    qsort(order, (size_t)n, sizeof(entry), by_offset);
    for (i = 0; i < n && rc != 2; i++) {
        st_tensor ta, tb;
        const cJSON* eb = cJSON_GetObjectItemCaseSensitive(B.root, order[i].e->string);
        double max_abs = 0, max_rel = 0, worst_excess = 0, tol = atol;
        size_t k, worst = 0;
        int bad = 0;
        char* sa;
        char* sb;
        if (st_tensor_of(&A, order[i].e, &ta)) { rc = 2; break; }
        if (!eb) { rc = err("tensor %s is missing from %s", ta.name, pb); break; }
        if (st_tensor_of(&B, eb, &tb)) { rc = 2; break; }
        sa = cJSON_PrintUnformatted(ta.shape);
        sb = cJSON_PrintUnformatted(tb.shape);
        if (strcmp(sa, sb)) {
            fprintf(stderr, "nbdiff: tensor %s has shape %s in %s and %s in %s\n", ta.name, sa, pa, sb, pb);
            rc = 2;
        }
        free(sa);
        free(sb);
        if (rc) break;
        if (scaled) {
            double mb = 0;
            for (k = 0; k < tb.count; k++) mb = fmax(mb, fabs(value(&B, &tb, k)));
            tol = atol * mb;
        }
        for (k = 0; k < ta.count; k++) {
            const double a = value(&A, &ta, k), b = value(&B, &tb, k), d = fabs(a - b);
            const double lim = tol + rtol * fabs(b);
            if (a == b || (isnan(a) && isnan(b))) continue;
            if (d > max_abs || isnan(d)) max_abs = d;
            if (b != 0 && d / fabs(b) > max_rel) max_rel = d / fabs(b);
            if (!(d <= lim) && (isnan(d) || d - lim > worst_excess || !bad)) {
                worst_excess = isnan(d) ? INFINITY : d - lim;
                worst = k;
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
        printf("%d tensors compared, %d differ (atol %g%s, rtol %g)\n", compared, differ, atol,
               scaled ? " x max|b|" : "", rtol);
        rc = differ ? 1 : 0;
    }
    free(order);
    st_close(&A);
    st_close(&B);
    return rc;
}
