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
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct st_file {
    const char* path;
    cJSON* root;
    unsigned char* data;
    size_t n_data;
} st_file;

typedef struct st_tensor {
    const char* name;
    int f64;
    size_t count, offset;
    const cJSON* shape;
} st_tensor;

static int err(const char* fmt, const char* a, const char* b) {
    fprintf(stderr, "nbdiff: ");
    fprintf(stderr, fmt, a, b);
    fprintf(stderr, "\n");
    return 2;
}

static void st_close(st_file* f) {
    cJSON_Delete(f->root);
    free(f->data);
}

static int st_open(st_file* f, const char* path) {
    FILE* fp = fopen(path, "rb");
    unsigned char le[8];
    unsigned long long h = 0;
    char* hdr = NULL;
    long sz;
    int i;
    memset(f, 0, sizeof *f);
    f->path = path;
    if (!fp) return err("cannot open %s: %s", path, strerror(errno));
    if (fseek(fp, 0, SEEK_END) || (sz = ftell(fp)) < 8 || fseek(fp, 0, SEEK_SET) || fread(le, 1, 8, fp) != 8) {
        fclose(fp);
        return err("%s: not a safetensors file%s", path, "");
    }
    for (i = 7; i >= 0; i--) h = h << 8 | le[i];
    if (h < 2 || h > (unsigned long long)(sz - 8)) { fclose(fp); return err("%s: bad header length%s", path, ""); }
    hdr = (char*)malloc((size_t)h + 1);
    f->n_data = (size_t)sz - 8 - (size_t)h;
    f->data = (unsigned char*)malloc(f->n_data ? f->n_data : 1);
    if (!hdr || !f->data || fread(hdr, 1, (size_t)h, fp) != (size_t)h ||
        fread(f->data, 1, f->n_data, fp) != f->n_data) {
        free(hdr);
        fclose(fp);
        return err("cannot read %s%s", path, "");
    }
    fclose(fp);
    f->root = cJSON_ParseWithLength(hdr, (size_t)h);
    free(hdr);
    if (!cJSON_IsObject(f->root)) return err("%s: the header is not JSON%s", path, "");
    return 0;
}

/* one tensor entry, checked against the data size */
static int st_tensor_of(const st_file* f, const cJSON* e, st_tensor* t) {
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype"), *x;
    const cJSON* offs = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    double a, b, count = 1;
    t->name = e->string;
    t->shape = cJSON_GetObjectItemCaseSensitive(e, "shape");
    if (!cJSON_IsString(dt) || (strcmp(dt->valuestring, "F32") && strcmp(dt->valuestring, "F64")))
        return err("%s: tensor %s is not F32 or F64", f->path, e->string);
    t->f64 = !strcmp(dt->valuestring, "F64");
    cJSON_ArrayForEach(x, t->shape) count *= cJSON_IsNumber(x) ? x->valuedouble : NAN;
    if (!cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2 || !(count >= 0))
        return err("%s: tensor %s has a bad shape or data_offsets", f->path, e->string);
    a = cJSON_GetArrayItem(offs, 0)->valuedouble;
    b = cJSON_GetArrayItem(offs, 1)->valuedouble;
    if (!(a >= 0 && b <= (double)f->n_data && b - a == count * (t->f64 ? 8 : 4)))
        return err("%s: tensor %s has data_offsets outside the file or of the wrong size", f->path, e->string);
    t->count = (size_t)count;
    t->offset = (size_t)a;
    return 0;
}

static double value(const st_file* f, const st_tensor* t, size_t i) {
    if (t->f64) {
        double v;
        memcpy(&v, f->data + t->offset + 8 * i, 8);
        return v;
    } else {
        float v;
        memcpy(&v, f->data + t->offset + 4 * i, 4);
        return v;
    }
}

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
