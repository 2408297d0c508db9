/* util.c: messages, hashing and small helpers shared by the trainer's files. */
#define _POSIX_C_SOURCE 200809L
#define _XOPEN_SOURCE 700 /* realpath */
#include "train.h"
#include "../safetensors.h"

#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>

volatile int g_stop = 0;
int g_rank = 0, g_ranks = 1, g_same_everywhere = 0;

int fail(const char* fmt, ...) {
    va_list ap;
    if (g_same_everywhere && g_rank != 0) return 1; /* every rank fails alike: say it once */
    if (g_ranks > 1 && !g_same_everywhere) fprintf(stderr, "train: rank %d: error: ", g_rank);
    else fprintf(stderr, "train: error: ");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n");
    fflush(stderr);
    return 1;
}

void say(const char* fmt, ...) {
    va_list ap;
    if (g_rank != 0) return;
    if (g_stop && g_ranks > 1) {
        /* After Ctrl-C, mpirun may stop reading our output while it gives the ranks a second
           before SIGKILL: a full pipe must not keep rank 0 from saving. */
        struct pollfd pf;
        pf.fd = fileno(stdout);
        pf.events = POLLOUT;
        if (poll(&pf, 1, 0) != 1 || !(pf.revents & POLLOUT)) return;
    }
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
}

double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

unsigned long long mix64(unsigned long long* s) { /* splitmix64 */
    unsigned long long z = (*s += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

unsigned long long hash3(unsigned long long a, unsigned long long b, unsigned long long c) {
    unsigned long long s = a * 0x9E3779B97F4A7C15ULL ^ (b + 0x632BE59BD9B4E019ULL) * 0xD1B54A32D192ED03ULL
                           ^ (c + 0x8CB92BA72F3D8DD7ULL) * 0xA24BAED4963EE407ULL;
    mix64(&s);
    return mix64(&s);
}

unsigned long long rnd_below(unsigned long long* s, unsigned long long n) {
    return n ? mix64(s) % n : 0;
}

unsigned long long fnv1a(const void* data, size_t n, unsigned long long h) {
    const unsigned char* p = (const unsigned char*)data;
    size_t i;
    for (i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001B3ULL;
    return h;
}


static struct { char path[1024]; char what[32]; } g_inputs[16];
static int g_n_inputs;

void io_input(const char* path, const char* what) {
    int i;
    if (!path) return;
    for (i = 0; i < g_n_inputs; i++)
        if (!strcmp(g_inputs[i].path, path)) return; /* parse_args runs twice with --load */
    if (g_n_inputs == (int)(sizeof g_inputs / sizeof g_inputs[0])) return;
    snprintf(g_inputs[g_n_inputs].path, sizeof g_inputs[0].path, "%s", path);
    snprintf(g_inputs[g_n_inputs].what, sizeof g_inputs[0].what, "%s", what);
    g_n_inputs++;
}

/* path with its directory resolved (the name itself need not exist); 0 when the directory does
   not exist either */
static int resolved(const char* path, char* out, size_t n) {
    char dir[4096], real[4096];
    const char* slash = strrchr(path, '/');
    const char* name = slash ? slash + 1 : path;
    snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - path) + (slash == path) : 1,
             slash ? path : ".");
    if (!realpath(dir, real)) return 0;
    snprintf(out, n, "%s/%s", real, name);
    return 1;
}

int same_file(const char* a, const char* b) {
    struct stat sa, sb;
    char ra[8192], rb[8192];
    if (stat(a, &sa) == 0 && stat(b, &sb) == 0) return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
    return resolved(a, ra, sizeof ra) && resolved(b, rb, sizeof rb) && !strcmp(ra, rb);
}

int io_output(const char* path, const char* what) {
    int i;
    for (i = 0; i < g_n_inputs; i++)
        if (same_file(path, g_inputs[i].path))
            return fail("%s %s is the %s input %s: an output never replaces an input; name another file",
                        what, path, g_inputs[i].what, g_inputs[i].path);
    return 0;
}

int make_dir(const char* dir) {
    struct stat st;
    if (stat(dir, &st) == 0) {
        if (S_ISDIR(st.st_mode)) return 0;
        return fail("%s exists and is not a directory", dir);
    }
    if (mkdir(dir, 0777) != 0) return fail("cannot create directory %s: %s", dir, strerror(errno));
    return 0;
}

FILE* open_in(const char* dir, const char* name, char* path, size_t n) {
    snprintf(path, n, "%s/%s", dir, name);
    return create_out(path);
}

FILE* create_out(const char* path) {
    char err[512];
    FILE* f;
    if (io_output(path, "output")) return NULL;
    f = st_create(path, err, sizeof err);
    if (!f) fail("%s", err);
    return f;
}

char* read_whole(const char* path, const char* what, size_t* n) {
    struct stat sb;
    unsigned char* buf;
    char err[600];
    if (what && stat(path, &sb) == 0 && !S_ISREG(sb.st_mode)) {
        fail("%s: %s is not a regular file (a FIFO, device or directory is not read)", what, path);
        return NULL;
    }
    if (st_read_file(path, &buf, n, err, sizeof err, NULL, NULL)) { /* refuses them without waiting */
        if (what) fail("%s: %s", what, err);
        return NULL;
    }
    return (char*)buf;
}

int close_out(FILE* f) {
    char err[700];
    return st_commit(f, err, sizeof err) ? fail("%s", err) : 0;
}

void fmt_time(double s, char* buf, size_t n) {
    const long t = s > 0 && s < 1e9 ? (long)(s + 0.5) : 0;
    if (t >= 3600) snprintf(buf, n, "%ldh%02ldm", t / 3600, t / 60 % 60);
    else if (t >= 60) snprintf(buf, n, "%ldm%02lds", t / 60, t % 60);
    else snprintf(buf, n, "%lds", t);
}
