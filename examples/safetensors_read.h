/* safetensors_read.h: a small reader of safetensors files (F32, F64, F16 and BF16 tensors, read
   as double: the half-precision types of most published checkpoints are exact in it) for the
   example tools (nbdiff, nbimport). Include once, after defining ST_TOOL (the tool's name for
   messages); needs cJSON. Errors print "<tool>: ..." and return 2. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct st_file {
    const char* path;
    cJSON* root;
    unsigned char* data;
    size_t n_data;
    dev_t dev; /* of the file opened (to refuse an output path naming it) */
    ino_t ino;
} st_file;

typedef enum st_dtype { ST_F32, ST_F64, ST_F16, ST_BF16 } st_dtype;

typedef struct st_tensor {
    const char* name;
    st_dtype dtype;
    size_t count, offset;
    const cJSON* shape;
} st_tensor;

static int err(const char* fmt, ...) {
    va_list ap;
    fprintf(stderr, "%s: ", ST_TOOL);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n");
    return 2;
}

static void st_close(st_file* f) {
    cJSON_Delete(f->root);
    free(f->data);
}

static int st_open(st_file* f, const char* path) {
    FILE* fp = NULL;
    struct stat sb;
    unsigned char le[8];
    unsigned long long h = 0;
    char* hdr = NULL;
    long sz;
    int i, fd;
    memset(f, 0, sizeof *f);
    f->path = path;
    /* only a regular file: a FIFO would block the open (and a device may never end); the
       non-blocking open and fstat close the race of the path changing after the stat */
    if (stat(path, &sb)) return err("cannot open %s: %s", path, strerror(errno));
    if (!S_ISREG(sb.st_mode)) return err("%s: not a regular file", path);
    fd = open(path, O_RDONLY | O_NONBLOCK);
    if (fd < 0) return err("cannot open %s: %s", path, strerror(errno));
    if (fstat(fd, &sb) || !S_ISREG(sb.st_mode)) { close(fd); return err("%s: not a regular file", path); }
    f->dev = sb.st_dev;
    f->ino = sb.st_ino;
    if (!(fp = fdopen(fd, "rb"))) { close(fd); return err("cannot open %s: %s", path, strerror(errno)); }
    if (fseek(fp, 0, SEEK_END) || (sz = ftell(fp)) < 8 || fseek(fp, 0, SEEK_SET) || fread(le, 1, 8, fp) != 8) {
        fclose(fp);
        return err("%s: not a safetensors file", path);
    }
    for (i = 7; i >= 0; i--) h = h << 8 | le[i];
    if (h < 2 || h > (unsigned long long)(sz - 8)) { fclose(fp); return err("%s: bad header length", path); }
    hdr = (char*)malloc((size_t)h + 1);
    f->n_data = (size_t)sz - 8 - (size_t)h;
    f->data = (unsigned char*)malloc(f->n_data ? f->n_data : 1);
    if (!hdr || !f->data || fread(hdr, 1, (size_t)h, fp) != (size_t)h ||
        fread(f->data, 1, f->n_data, fp) != f->n_data) {
        free(hdr);
        fclose(fp);
        st_close(f);
        memset(f, 0, sizeof *f);
        return err("cannot read %s", path);
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

/* a JSON number that is a non-negative integer a double holds exactly */
static int st_is_count(const cJSON* x) {
    return cJSON_IsNumber(x) && x->valuedouble >= 0 && x->valuedouble <= 9007199254740992.0 &&
           x->valuedouble == floor(x->valuedouble);
}

/* one tensor entry, checked: an object with a dtype read here, a shape of non-negative
   integers, data_offsets [begin, end] of integers inside the data whose difference is the
   shape's size in bytes */
static int st_tensor_of(const st_file* f, const cJSON* e, st_tensor* t) {
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype"), *x;
    const cJSON* offs = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    static const char* const names[4] = {"F32", "F64", "F16", "BF16"};
    static const int bytes[4] = {4, 8, 2, 2};
    double a, b;
    size_t count = 1, limit;
    int k, zero = 0, big = 0;
    t->name = e->string;
    if (!cJSON_IsObject(e)) return err("%s: tensor %s is not a JSON object", f->path, e->string);
    t->shape = cJSON_GetObjectItemCaseSensitive(e, "shape");
    for (k = 0; k < 4 && !(cJSON_IsString(dt) && !strcmp(dt->valuestring, names[k])); k++) {}
    if (k == 4) return err("%s: tensor %s is not F32, F64, F16 or BF16", f->path, e->string);
    t->dtype = (st_dtype)k;
    if (!t->shape) return err("%s: tensor %s has no shape", f->path, e->string);
    if (!cJSON_IsArray(t->shape))
        return err("%s: tensor %s has a shape that is not an array", f->path, e->string);
    limit = f->n_data / (size_t)bytes[k]; /* the most elements the data can hold */
    cJSON_ArrayForEach(x, t->shape) {
        if (!st_is_count(x))
            return err("%s: tensor %s has a shape that is not non-negative integers", f->path, e->string);
        if (x->valuedouble == 0) zero = 1;
        else if (x->valuedouble > (double)limit || count > limit / (size_t)x->valuedouble) big = 1;
        else count *= (size_t)x->valuedouble;
    }
    if (zero) count = 0;
    else if (big)
        return err("%s: tensor %s has a shape larger than the %zu bytes of data", f->path, e->string, f->n_data);
    if (!cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2 || !st_is_count(cJSON_GetArrayItem(offs, 0)) ||
        !st_is_count(cJSON_GetArrayItem(offs, 1)))
        return err("%s: tensor %s has data_offsets that are not two non-negative integers", f->path, e->string);
    a = cJSON_GetArrayItem(offs, 0)->valuedouble;
    b = cJSON_GetArrayItem(offs, 1)->valuedouble;
    if (!(a <= b))
        return err("%s: tensor %s has data_offsets [%.0f, %.0f] that end before they begin", f->path, e->string, a, b);
    if (b > (double)f->n_data)
        return err("%s: tensor %s has data_offsets [%.0f, %.0f] beyond the %zu bytes of data", f->path, e->string,
                   a, b, f->n_data);
    if (b - a != (double)count * bytes[k])
        return err("%s: tensor %s has data_offsets [%.0f, %.0f] (%.0f bytes), its shape and dtype %.0f bytes",
                   f->path, e->string, a, b, b - a, (double)count * bytes[k]);
    t->count = count;
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

