/* safetensors.h: reading and writing safetensors files for the programs around normblocks
   (nbdiff, nbimport, and the trainer's checkpoints and dumps): one reader, so every program
   refuses the same malformed files with the same messages. Needs cJSON. stb-style: declare
   anywhere, and in exactly one file of a program
       #define ST_IMPLEMENTATION
       #include "safetensors.h"

   The format: 8 bytes, the little-endian length N of the header; N bytes of header, a JSON
   object (spaces may pad it); then the data. The header maps each tensor's name to
   {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]} (bytes, relative to the data),
   and the optional key "__metadata__" to an object of strings.

   st_parse checks the whole layout once, and fails naming the file, the key and the problem:
   a header length inside the file; a JSON object with nothing but spaces after it; no key
   twice (in the header or in __metadata__: readers disagree on which one counts, cJSON the
   first, Python's json and serde the last); __metadata__ an object of strings (as the format
   says); each tensor an object with a known dtype, at most ST_MAX_DIMS dimensions of
   non-negative integers, data_offsets two integers [begin, end] inside the data whose
   difference is the shape's size in bytes; the tensors tile the data exactly (no hole, no
   overlap, nothing after the last). What it does not check, the callers do: which tensors and
   metadata keys a file must have, and whether the values are finite (st_check_finite).

   Errors: functions return 0 on success, else non-zero with the message in the st_file's err
   (or the err buffer given); they print nothing. */
#ifndef SAFETENSORS_H
#define SAFETENSORS_H
#include <stddef.h>
#include <stdio.h>
#include <sys/types.h>

struct cJSON;

#define ST_MAX_DIMS 8

typedef enum st_dtype {
    ST_F64, ST_F32, ST_F16, ST_BF16, ST_I64, ST_I32, ST_I16, ST_I8, ST_U64, ST_U32, ST_U16, ST_U8,
    ST_BOOL, ST_F8_E4M3, ST_F8_E5M2, ST_N_DTYPES
} st_dtype;

typedef struct st_tensor {
    const char* name;
    st_dtype dtype;
    int ndim;
    size_t shape[ST_MAX_DIMS];
    size_t count;      /* elements: the product of the shape (1 for a scalar) */
    size_t begin, end; /* bytes of the data */
} st_tensor;

typedef struct st_file {
    const char* path;
    struct cJSON* root;        /* the header */
    const struct cJSON* meta;  /* __metadata__, or NULL */
    st_tensor* t;              /* every tensor, in the order of their data */
    int n;
    const unsigned char* data; /* the data part */
    size_t n_data;
    unsigned char* owned;      /* the file's bytes when st_open read them */
    dev_t dev;                 /* of the file st_open read (to refuse an output naming it) */
    ino_t ino;
    char err[512];
} st_file;

/* Reads path, a regular file (a FIFO or device is refused without blocking), and st_parse's it. */
int st_open(st_file* f, const char* path);
/* The whole of path, a regular file (refused without blocking otherwise), into *buf (malloc'ed,
   NUL-terminated; the caller frees) and *n; its device and inode into dev, ino when not NULL. */
int st_read_file(const char* path, unsigned char** buf, size_t* n, char* err, size_t n_err, dev_t* dev,
                 ino_t* ino);
/* The layout of size bytes at bytes (not copied: they must outlive f); path names it in
   messages. st_close releases f after either, also after a failure. */
int st_parse(st_file* f, const char* path, const unsigned char* bytes, size_t size);
void st_close(st_file* f);

const char* st_dtype_name(st_dtype t);
int st_dtype_size(st_dtype t);
int st_is_float(st_dtype t); /* F64, F32, F16, BF16: what st_value reads */
const st_tensor* st_find(const st_file* f, const char* name);
/* element i of a float tensor as a double (exact for all four) */
double st_value(const st_file* f, const st_tensor* t, size_t i);
/* 0 when every element of a float tensor is finite and within float's range (what a float32
   program can hold), else 1 naming the tensor, the element and its value */
int st_check_finite(st_file* f, const st_tensor* t);
/* __metadata__[key], or NULL when absent */
const char* st_meta(const st_file* f, const char* key);
/* 0 when every __metadata__ key is in keys (NULL-terminated), else 1 naming the first that is not */
int st_meta_known(st_file* f, const char* const* keys, const char* who);

/* Writing, whole or not at all. An output path is checked before any work starts: an existing
   regular file (not a FIFO, device or directory, which are never replaced), or a new file in a
   writable directory. st_create checks it again and opens a temporary file next to it (in the
   same directory, so the rename stays on one file system; a link's target is what gets
   replaced); st_commit flushes that to the disk and renames it over path, so an existing file
   survives any failure before (a full disk, a crash, an interruption: only the temporary file
   is left, or removed); st_discard removes it. Both close f. */
int st_check_output(const char* path, char* err, size_t n);
FILE* st_create(const char* path, char* err, size_t n);
int st_commit(FILE* f, char* err, size_t n); /* 0 when path now holds everything written */
void st_discard(FILE* f);
/* An F32 entry of ndim dimensions into the header root, its data at *off (advanced). */
void st_put_f32(struct cJSON* root, const char* name, int ndim, const int* shape, size_t* off);
/* root's JSON with its length first, padded with spaces so the data begins 8-byte aligned;
   1 when the JSON cannot be built */
int st_put_header(FILE* f, const struct cJSON* root);
#endif

#ifdef ST_IMPLEMENTATION
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char* const st__names[ST_N_DTYPES] = {"F64", "F32", "F16", "BF16", "I64", "I32", "I16", "I8",
                                                   "U64", "U32", "U16", "U8", "BOOL", "F8_E4M3", "F8_E5M2"};
static const int st__sizes[ST_N_DTYPES] = {8, 4, 2, 2, 8, 4, 2, 1, 8, 4, 2, 1, 1, 1, 1};

const char* st_dtype_name(st_dtype t) { return (unsigned)t < ST_N_DTYPES ? st__names[t] : "?"; }
int st_dtype_size(st_dtype t) { return (unsigned)t < ST_N_DTYPES ? st__sizes[t] : 0; }
int st_is_float(st_dtype t) { return t == ST_F64 || t == ST_F32 || t == ST_F16 || t == ST_BF16; }

static int st__fail(char* err, size_t n, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, n, fmt, ap);
    va_end(ap);
    return 1;
}
#define ST__FAIL(f, ...) st__fail((f)->err, sizeof (f)->err, __VA_ARGS__)

void st_close(st_file* f) {
    cJSON_Delete(f->root);
    free(f->t);
    free(f->owned);
    f->root = NULL;
    f->t = NULL;
    f->owned = NULL;
}

int st_read_file(const char* path, unsigned char** out, size_t* n, char* err, size_t n_err, dev_t* dev,
                 ino_t* ino) {
    struct stat sb;
    unsigned char* buf;
    size_t got = 0;
    int fd;
    *out = NULL;
    *n = 0;
    /* only a regular file: opening a FIFO would block, a device may never end; the
       non-blocking open and the fstat close the race of the path changing after the stat */
    if (stat(path, &sb)) return st__fail(err, n_err, "cannot open %s: %s", path, strerror(errno));
    if (!S_ISREG(sb.st_mode)) return st__fail(err, n_err, "%s: not a regular file", path);
    if ((fd = open(path, O_RDONLY | O_NONBLOCK)) < 0)
        return st__fail(err, n_err, "cannot open %s: %s", path, strerror(errno));
    if (fstat(fd, &sb) || !S_ISREG(sb.st_mode)) {
        close(fd);
        return st__fail(err, n_err, "%s: not a regular file", path);
    }
    if ((unsigned long long)sb.st_size > (size_t)-1 / 2 || !(buf = (unsigned char*)malloc((size_t)sb.st_size + 1))) {
        close(fd);
        return st__fail(err, n_err, "%s: out of memory for its %lld bytes", path, (long long)sb.st_size);
    }
    while (got < (size_t)sb.st_size) {
        const ssize_t r = read(fd, buf + got, (size_t)sb.st_size - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        got += (size_t)r;
    }
    close(fd);
    if (got != (size_t)sb.st_size) {
        free(buf);
        return st__fail(err, n_err, "cannot read %s (%zu of %lld bytes)", path, got, (long long)sb.st_size);
    }
    buf[got] = 0;
    *out = buf;
    *n = got;
    if (dev) *dev = sb.st_dev;
    if (ino) *ino = sb.st_ino;
    return 0;
}

int st_open(st_file* f, const char* path) {
    unsigned char* buf;
    size_t n;
    dev_t dev;
    ino_t ino;
    int rc;
    memset(f, 0, sizeof *f);
    f->path = path;
    if (st_read_file(path, &buf, &n, f->err, sizeof f->err, &dev, &ino)) return 1;
    rc = st_parse(f, path, buf, n); /* resets f: what follows comes after */
    f->owned = buf;
    f->dev = dev;
    f->ino = ino;
    return rc;
}

/* a JSON number that is a non-negative integer a double holds exactly */
static int st__is_count(const cJSON* x) {
    return cJSON_IsNumber(x) && x->valuedouble >= 0 && x->valuedouble <= 9007199254740992.0 &&
           x->valuedouble == floor(x->valuedouble);
}

static int st__by_name(const void* a, const void* b) {
    return strcmp(*(const char* const*)a, *(const char* const*)b);
}

/* 1 naming the first key of obj that appears twice */
static int st__unique_keys(st_file* f, const cJSON* obj, const char* what) {
    const int n = cJSON_GetArraySize(obj);
    const char** k = (const char**)malloc(((size_t)n + 1) * sizeof *k);
    const cJSON* e;
    int i = 0, rc = 0;
    if (!k) return ST__FAIL(f, "%s: out of memory", f->path);
    cJSON_ArrayForEach(e, obj) k[i++] = e->string;
    qsort(k, (size_t)n, sizeof *k, st__by_name);
    for (i = 1; i < n && !rc; i++)
        if (!strcmp(k[i], k[i - 1]))
            rc = ST__FAIL(f, "%s: key \"%s\" appears twice in %s (readers disagree on which one counts)", f->path,
                          k[i], what);
    free(k);
    return rc;
}

/* one tensor entry e into t: dtype, shape, offsets of the shape's size inside the data */
static int st__entry(st_file* f, const cJSON* e, st_tensor* t) {
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype"), *shape, *offs, *x;
    double a, b;
    size_t limit;
    int k, zero = 0, big = 0;
    memset(t, 0, sizeof *t);
    t->name = e->string;
    if (!cJSON_IsObject(e)) return ST__FAIL(f, "%s: tensor %s is not a JSON object", f->path, e->string);
    for (k = 0; k < ST_N_DTYPES && !(cJSON_IsString(dt) && !strcmp(dt->valuestring, st__names[k])); k++) {}
    if (k == ST_N_DTYPES) return ST__FAIL(f, "%s: tensor %s has no dtype or an unknown one", f->path, e->string);
    t->dtype = (st_dtype)k;
    shape = cJSON_GetObjectItemCaseSensitive(e, "shape");
    if (!shape) return ST__FAIL(f, "%s: tensor %s has no shape", f->path, e->string);
    if (!cJSON_IsArray(shape)) return ST__FAIL(f, "%s: tensor %s has a shape that is not an array", f->path, e->string);
    if (cJSON_GetArraySize(shape) > ST_MAX_DIMS)
        return ST__FAIL(f, "%s: tensor %s has a shape of more than %d dimensions", f->path, e->string, ST_MAX_DIMS);
    limit = f->n_data / (size_t)st__sizes[k]; /* the most elements the data can hold */
    t->count = 1;
    cJSON_ArrayForEach(x, shape) {
        if (!st__is_count(x))
            return ST__FAIL(f, "%s: tensor %s has a shape that is not non-negative integers", f->path, e->string);
        if (x->valuedouble == 0) zero = 1;
        else if (x->valuedouble > (double)limit || t->count > limit / (size_t)x->valuedouble) big = 1;
        else t->count *= (size_t)x->valuedouble;
        t->shape[t->ndim++] = (size_t)x->valuedouble; /* at most 2^53 */
    }
    if (zero) t->count = 0;
    else if (big)
        return ST__FAIL(f, "%s: tensor %s has a shape larger than the %zu bytes of data", f->path, e->string, f->n_data);
    offs = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    if (!cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2 || !st__is_count(cJSON_GetArrayItem(offs, 0)) ||
        !st__is_count(cJSON_GetArrayItem(offs, 1)))
        return ST__FAIL(f, "%s: tensor %s has data_offsets that are not two non-negative integers", f->path,
                        e->string);
    a = cJSON_GetArrayItem(offs, 0)->valuedouble;
    b = cJSON_GetArrayItem(offs, 1)->valuedouble;
    if (!(a <= b))
        return ST__FAIL(f, "%s: tensor %s has data_offsets [%.0f, %.0f] that end before they begin", f->path,
                        e->string, a, b);
    if (b > (double)f->n_data)
        return ST__FAIL(f, "%s: tensor %s has data_offsets [%.0f, %.0f] beyond the %zu bytes of data (truncated?)",
                        f->path, e->string, a, b, f->n_data);
    if (b - a != (double)t->count * st__sizes[k])
        return ST__FAIL(f, "%s: tensor %s has data_offsets [%.0f, %.0f] (%.0f bytes), its shape and dtype %.0f bytes",
                        f->path, e->string, a, b, b - a, (double)t->count * st__sizes[k]);
    t->begin = (size_t)a;
    t->end = (size_t)b;
    return 0;
}

static int st__by_offset(const void* x, const void* y) {
    const st_tensor *a = (const st_tensor*)x, *b = (const st_tensor*)y;
    if (a->begin != b->begin) return a->begin < b->begin ? -1 : 1;
    return (a->end > b->end) - (a->end < b->end);
}

int st_parse(st_file* f, const char* path, const unsigned char* bytes, size_t size) {
    unsigned long long h = 0;
    const char* end = NULL;
    const cJSON* e;
    size_t cursor = 0;
    int i;
    memset(f, 0, sizeof *f);
    f->path = path;
    if (size < 8) return ST__FAIL(f, "%s: truncated or not a safetensors file (%zu bytes: no header length)", path, size);
    for (i = 7; i >= 0; i--) h = h << 8 | bytes[i];
    if (h < 2 || h > (unsigned long long)(size - 8))
        return ST__FAIL(f, "%s: bad header length %llu (the file has %zu bytes): truncated or not a safetensors file",
                        path, h, size);
    f->data = bytes + 8 + h;
    f->n_data = size - 8 - (size_t)h;
    f->root = cJSON_ParseWithLengthOpts((const char*)bytes + 8, (size_t)h, &end, 0);
    if (!cJSON_IsObject(f->root))
        return ST__FAIL(f, "%s: the header is not a JSON object", path);
    /* after the JSON only the spaces that pad the header */
    while (end && end < (const char*)bytes + 8 + h && (*end == ' ' || *end == '\t' || *end == '\n' || *end == '\r'))
        end++;
    if (end != (const char*)bytes + 8 + h)
        return ST__FAIL(f, "%s: the header has bytes after its JSON object other than spaces", path);
    if (st__unique_keys(f, f->root, "the header")) return 1;
    f->meta = cJSON_GetObjectItemCaseSensitive(f->root, "__metadata__");
    if (f->meta) {
        if (!cJSON_IsObject(f->meta)) return ST__FAIL(f, "%s: __metadata__ is not a JSON object", path);
        if (st__unique_keys(f, f->meta, "__metadata__")) return 1;
        cJSON_ArrayForEach(e, f->meta)
            if (!cJSON_IsString(e))
                return ST__FAIL(f, "%s: metadata \"%s\" must be a string (safetensors metadata is strings)", path,
                                e->string);
    }
    f->t = (st_tensor*)calloc((size_t)cJSON_GetArraySize(f->root) + 1, sizeof(st_tensor));
    if (!f->t) return ST__FAIL(f, "%s: out of memory", path);
    cJSON_ArrayForEach(e, f->root)
        if (e != f->meta && st__entry(f, e, &f->t[f->n++])) return 1;
    qsort(f->t, (size_t)f->n, sizeof(st_tensor), st__by_offset);
    for (i = 0; i < f->n; i++) {
        if (f->t[i].begin != cursor)
            return ST__FAIL(f, "%s: tensor %s begins at byte %zu of the data, not at %zu (%s%s): a hole or an overlap",
                            path, f->t[i].name, f->t[i].begin, cursor, i ? "the end of tensor " : "the start of the data",
                            i ? f->t[i - 1].name : "");
        cursor = f->t[i].end;
    }
    if (cursor != f->n_data)
        return ST__FAIL(f, "%s: %zu bytes of data after the last tensor's, in no tensor (junk, or a bad header length)",
                        path, f->n_data - cursor);
    return 0;
}

const st_tensor* st_find(const st_file* f, const char* name) {
    int i;
    for (i = 0; i < f->n; i++)
        if (!strcmp(f->t[i].name, name)) return &f->t[i];
    return NULL;
}

/* IEEE half: sign, 5 exponent bits (bias 15), 10 fraction bits; exponent 0 is subnormal */
static double st__half(unsigned h) {
    const unsigned e = h >> 10 & 31, m = h & 1023;
    const double v = e == 31 ? (m ? NAN : INFINITY) : e == 0 ? ldexp((double)m, -24) : ldexp((double)(m | 1024), (int)e - 25);
    return h >> 15 ? -v : v;
}

double st_value(const st_file* f, const st_tensor* t, size_t i) {
    const unsigned char* p = f->data + t->begin; /* little-endian, as the format says */
    switch (t->dtype) {
    case ST_F64: {
        double v;
        memcpy(&v, p + 8 * i, 8);
        return v;
    }
    case ST_F16: return st__half((unsigned)p[2 * i] | (unsigned)p[2 * i + 1] << 8);
    case ST_BF16: { /* the upper half of a float's bits */
        const unsigned char b[4] = {0, 0, p[2 * i], p[2 * i + 1]};
        float v;
        memcpy(&v, b, 4);
        return v;
    }
    case ST_F32: {
        float v;
        memcpy(&v, p + 4 * i, 4);
        return v;
    }
    default: return NAN; /* not a float: callers check st_is_float */
    }
}

int st_check_finite(st_file* f, const st_tensor* t) {
    size_t i;
    if (!st_is_float(t->dtype))
        return ST__FAIL(f, "%s: tensor %s is %s, not F32, F64, F16 or BF16", f->path, t->name, st__names[t->dtype]);
    for (i = 0; i < t->count; i++) {
        const double v = st_value(f, t, i);
        if (!isfinite(v) || fabs(v) > 3.4028234663852886e38)
            return ST__FAIL(f, "%s: tensor %s has a non-finite value (%g at element %zu)%s", f->path, t->name, v, i,
                            isfinite(v) ? ", beyond float's range" : "");
    }
    return 0;
}

const char* st_meta(const st_file* f, const char* key) {
    const cJSON* v = f->meta ? cJSON_GetObjectItemCaseSensitive(f->meta, key) : NULL;
    return v ? v->valuestring : NULL; /* st_parse checked every value is a string */
}

int st_meta_known(st_file* f, const char* const* keys, const char* who) {
    const cJSON* e;
    int i;
    if (f->meta)
        cJSON_ArrayForEach(e, f->meta) {
            for (i = 0; keys[i] && strcmp(keys[i], e->string); i++) {}
            if (!keys[i])
                return ST__FAIL(f, "%s: metadata \"%s\" is not a key %s knows: refused rather than ignored", f->path,
                                e->string, who);
        }
    return 0;
}

int st_check_output(const char* path, char* err, size_t n) {
    struct stat sb;
    char dir[4096];
    const char* slash = strrchr(path, '/');
    if (!*path) return st__fail(err, n, "an empty output path");
    if (stat(path, &sb) == 0) {
        if (!S_ISREG(sb.st_mode))
            return st__fail(err, n, "%s exists and is not a regular file (a directory, FIFO or device is never "
                            "replaced)", path);
        if (access(path, W_OK)) return st__fail(err, n, "cannot write %s: %s", path, strerror(errno));
    }
    if (!slash) snprintf(dir, sizeof dir, ".");
    else if (slash == path) snprintf(dir, sizeof dir, "/");
    else if ((size_t)(slash - path) >= sizeof dir) return st__fail(err, n, "%s: path too long", path);
    else snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
    /* a new file, or one replaced by renaming a temporary over it, needs the directory */
    if (stat(dir, &sb) || !S_ISDIR(sb.st_mode))
        return st__fail(err, n, "cannot write %s: %s is not a directory", path, dir);
    if (access(dir, W_OK | X_OK)) return st__fail(err, n, "cannot write %s: directory %s: %s", path, dir, strerror(errno));
    return 0;
}

/* the outputs being written: their temporary file and final path (a few at a time) */
static struct st__out { FILE* f; char tmp[4200], path[4096]; } st__outs[8];

FILE* st_create(const char* path, char* err, size_t n) {
    struct st__out* o = NULL;
    char target[4096];
    struct stat sb;
    mode_t mask;
    int fd, i;
    for (i = 0; i < (int)(sizeof st__outs / sizeof st__outs[0]) && !o; i++)
        if (!st__outs[i].f) o = &st__outs[i];
    if (!o) { st__fail(err, n, "cannot write %s: too many outputs open", path); return NULL; }
    if (st_check_output(path, err, n)) return NULL;
    /* a link is replaced at its target, as writing through it did */
    if (lstat(path, &sb) == 0 && S_ISLNK(sb.st_mode) && realpath(path, target)) path = target;
    if (strlen(path) >= sizeof o->path) { st__fail(err, n, "%s: path too long", path); return NULL; }
    snprintf(o->path, sizeof o->path, "%s", path);
    snprintf(o->tmp, sizeof o->tmp, "%s.tmp.XXXXXX", path);
    if ((fd = mkstemp(o->tmp)) < 0) {
        st__fail(err, n, "cannot write %s: %s", o->tmp, strerror(errno));
        return NULL;
    }
    mask = umask(0); /* mkstemp's 0600 -> what open(path, O_CREAT, 0666) would have given */
    umask(mask);
    if (fchmod(fd, 0666 & ~mask) || !(o->f = fdopen(fd, "wb"))) {
        st__fail(err, n, "cannot write %s: %s", o->tmp, strerror(errno));
        close(fd);
        unlink(o->tmp);
        return NULL;
    }
    return o->f;
}

static struct st__out* st__out_of(FILE* f) {
    int i;
    for (i = 0; f && i < (int)(sizeof st__outs / sizeof st__outs[0]); i++)
        if (st__outs[i].f == f) return &st__outs[i];
    return NULL;
}

int st_commit(FILE* f, char* err, size_t n) {
    struct st__out* o = st__out_of(f);
    int bad;
    if (!o) return st__fail(err, n, "st_commit: not a file of st_create");
    bad = fflush(f) != 0 || ferror(f) || fsync(fileno(f)) != 0;
    if (fclose(f) != 0) bad = 1;
    o->f = NULL;
    if (bad) {
        st__fail(err, n, "writing %s failed: %s (%s is unchanged)", o->path, strerror(errno), o->path);
        unlink(o->tmp);
        return 1;
    }
    if (rename(o->tmp, o->path) != 0) {
        st__fail(err, n, "cannot rename %s to %s: %s", o->tmp, o->path, strerror(errno));
        unlink(o->tmp);
        return 1;
    }
    return 0;
}

void st_discard(FILE* f) {
    struct st__out* o = st__out_of(f);
    if (!o) return;
    fclose(f);
    o->f = NULL;
    unlink(o->tmp);
}

void st_put_f32(cJSON* root, const char* name, int ndim, const int* shape, size_t* off) {
    cJSON *e = cJSON_CreateObject(), *sh = cJSON_CreateArray(), *offs = cJSON_CreateArray();
    size_t count = 1;
    int i;
    for (i = 0; i < ndim; i++) {
        cJSON_AddItemToArray(sh, cJSON_CreateNumber(shape[i]));
        count *= (size_t)shape[i];
    }
    cJSON_AddStringToObject(e, "dtype", "F32");
    cJSON_AddItemToObject(e, "shape", sh);
    cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)*off));
    cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)(*off + count * 4)));
    cJSON_AddItemToObject(e, "data_offsets", offs);
    cJSON_AddItemToObject(root, name, e);
    *off += count * 4;
}

int st_put_header(FILE* f, const cJSON* root) {
    char* json = cJSON_PrintUnformatted(root);
    size_t len, pad, i;
    if (!json) return 1;
    len = strlen(json);
    pad = (8 - len % 8) % 8; /* spaces are valid JSON padding */
    for (i = 0; i < 8; i++) fputc((int)((unsigned long long)(len + pad) >> (8 * i) & 0xff), f);
    fwrite(json, 1, len, f);
    for (; pad; pad--) fputc(' ', f);
    free(json);
    return 0;
}
#endif
