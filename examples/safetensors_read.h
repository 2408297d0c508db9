/* safetensors_read.h: a small reader of safetensors files (F32, F64, F16 and BF16 tensors, read
   as double: the half-precision types of most published checkpoints are exact in it) for the
   example tools (nbdiff, nbimport). Include once, after defining ST_TOOL (the tool's name for
   messages); needs cJSON. Errors print "<tool>: ..." and return 2. */
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

typedef enum st_dtype { ST_F32, ST_F64, ST_F16, ST_BF16 } st_dtype;

typedef struct st_tensor {
    const char* name;
    st_dtype dtype;
    size_t count, offset;
    const cJSON* shape;
} st_tensor;

static int err(const char* fmt, const char* a, const char* b) {
    fprintf(stderr, "%s: ", ST_TOOL);
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
        st_close(f);
        memset(f, 0, sizeof *f);
        return err("cannot read %s%s", path, "");
    }
    fclose(fp);
    {
        const char* end = NULL;
        f->root = cJSON_ParseWithLengthOpts(hdr, (size_t)h, &end, 0);
        /* after the JSON only the spaces that pad the header (safetensors) */
        while (f->root && end && end < hdr + h && (*end == ' ' || *end == '\t' || *end == '\n' || *end == '\r'))
            end++;
        if (!cJSON_IsObject(f->root) || end != hdr + h) {
            const int object = cJSON_IsObject(f->root);
            free(hdr);
            st_close(f);
            memset(f, 0, sizeof *f);
            return err("%s: the header %s", path,
                       object ? "has bytes after its JSON object other than spaces" : "is not a JSON object");
        }
    }
    free(hdr);
    return 0;
}

/* one tensor entry, checked against the data size */
static int st_tensor_of(const st_file* f, const cJSON* e, st_tensor* t) {
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype"), *x;
    const cJSON* offs = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    static const char* const names[4] = {"F32", "F64", "F16", "BF16"};
    static const int bytes[4] = {4, 8, 2, 2};
    double a, b, count = 1;
    int k;
    t->name = e->string;
    t->shape = cJSON_GetObjectItemCaseSensitive(e, "shape");
    for (k = 0; k < 4 && !(cJSON_IsString(dt) && !strcmp(dt->valuestring, names[k])); k++) {}
    if (k == 4) return err("%s: tensor %s is not F32, F64, F16 or BF16", f->path, e->string);
    t->dtype = (st_dtype)k;
    cJSON_ArrayForEach(x, t->shape) count *= cJSON_IsNumber(x) ? x->valuedouble : NAN;
    if (!cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2 || !(count >= 0))
        return err("%s: tensor %s has a bad shape or data_offsets", f->path, e->string);
    a = cJSON_GetArrayItem(offs, 0)->valuedouble;
    b = cJSON_GetArrayItem(offs, 1)->valuedouble;
    if (!(a >= 0 && b <= (double)f->n_data && b - a == count * bytes[k]))
        return err("%s: tensor %s has data_offsets outside the file or of the wrong size", f->path, e->string);
    t->count = (size_t)count;
    t->offset = (size_t)a;
    return 0;
}

/* IEEE half: sign, 5 exponent bits (bias 15), 10 fraction bits; exponent 0 is subnormal */
static double st_half(unsigned h) {
    const unsigned e = h >> 10 & 31, m = h & 1023;
    const double v = e == 31 ? (m ? NAN : INFINITY)
                     : e == 0 ? ldexp((double)m, -24) : ldexp((double)(m | 1024), (int)e - 25);
    return h >> 15 ? -v : v;
}

/* element i of t; the file is little-endian (safetensors) */
static double value(const st_file* f, const st_tensor* t, size_t i) {
    const unsigned char* p = f->data + t->offset;
    switch (t->dtype) {
    case ST_F64: {
        double v;
        memcpy(&v, p + 8 * i, 8);
        return v;
    }
    case ST_F16: return st_half((unsigned)p[2 * i] | (unsigned)p[2 * i + 1] << 8);
    case ST_BF16: { /* the upper half of a float's bits */
        const unsigned char b[4] = {0, 0, p[2 * i], p[2 * i + 1]};
        float v;
        memcpy(&v, b, 4);
        return v;
    }
    default: {
        float v;
        memcpy(&v, p + 4 * i, 4);
        return v;
    }
    }
}

