/* tool_input.h: a fuzz input as a command line and its files, for fuzz_nbdiff.c and
   fuzz_nbimport.c, which include the tool's source with its main renamed tool_main.

   Input: byte 0, the number of arguments (mod 8); the arguments, each ending in a NUL byte; then
   2 bytes (little-endian) n, the n bytes of file A, 2 more and file B, and the rest, file C, which
   is config.json beside A and B (nbimport reads it for a MODEL without stack metadata). An
   argument "@X" names
   a file: @A and @B (written from the input), @F a FIFO with no writer, @D a directory, @N a
   path that does not exist, @O a new output path, @S /dev/null; any other argument is given as
   it is. run_tool runs the tool in this process (its leaks are LeakSanitizer's reports) with
   stdout discarded and stderr captured, and checks what every run must do: an exit status the
   tool documents (0 to max_code), and with the error status (max_code) a message on stderr
   starting with the tool's name (or its usage line). The randomized driver builds inputs with tool_pack and mutates them with
   tool_mutate. */
#define _POSIX_C_SOURCE 200809L
#define _XOPEN_SOURCE 700 /* nftw */
#define NB_TUNED_ENV_OFF /* the tool's main runs in this process: it must not exec itself */
#include <fcntl.h>
#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../examples/safetensors.h" /* st_read_file; the tool defines ST_IMPLEMENTATION */

static int tool_main(int argc, char** argv);

static int g_failures;
static FILE* g_out; /* the driver's reports: the tool's stdout is discarded */
static char g_dir[64];
static char g_err[4096];

static void tool_fail(const char* what, int argc, char** argv, int rc) {
    int i;
    fprintf(g_out, "FAIL: %s (exit %d):", what, rc);
    for (i = 0; i < argc; i++) fprintf(g_out, " '%s'", argv[i]);
    fprintf(g_out, "\n  stderr: %.300s\n", g_err);
    g_failures++;
#ifdef NB_LIBFUZZER
    abort();
#endif
}

static int tool_rm(const char* path, const struct stat* sb, int flag, struct FTW* ftw) {
    (void)sb; (void)flag; (void)ftw;
    return remove(path);
}

/* the temporary directory and whatever the runs wrote in it */
static void tool_cleanup(void) { nftw(g_dir, tool_rm, 16, FTW_DEPTH | FTW_PHYS); }

static void tool_setup(void) {
    char p[128];
    if (g_dir[0]) return;
    snprintf(g_dir, sizeof g_dir, "/tmp/nb_fuzz_tool_XXXXXX");
    if (!mkdtemp(g_dir)) abort();
    /* an output named by a plain argument ("x", "--help") lands here, not in the checkout */
    if (chdir(g_dir)) abort();
    atexit(tool_cleanup);
    snprintf(p, sizeof p, "%s/fifo", g_dir);
    if (mkfifo(p, 0600)) abort();
    snprintf(p, sizeof p, "%s/dir", g_dir);
    if (mkdir(p, 0700)) abort();
    /* the tools print results on stdout: discarded */
    fflush(stdout);
    if (!(g_out = fdopen(dup(1), "w")) || !freopen("/dev/null", "w", stdout)) abort();
}

static void write_file(const char* path, const uint8_t* p, size_t n) {
    FILE* f = fopen(path, "wb");
    if (!f || fwrite(p, 1, n, f) != n || fclose(f)) abort();
}

/* runs the tool on the input; returns its exit status (-1: not a command line) */
static int run_tool(const uint8_t* data, size_t size, const char* tool, int max_code) {
    char* argv[10];
    char paths[7][128], errpath[128];
    const char* names = "ABFDNOS";
    size_t at = 1, na, nb;
    int argc = 1, k, rc, saved, fd;
    FILE* ef;
    if (size < 1) return -1;
    tool_setup();
    for (k = 0; k < 7; k++) {
        static const char* const leaf[7] = {"A.st", "B.st", "fifo", "dir", "none/x.st", "out.st", NULL};
        if (leaf[k]) snprintf(paths[k], sizeof paths[k], "%s/%s", g_dir, leaf[k]);
        else snprintf(paths[k], sizeof paths[k], "/dev/null");
    }
    argv[0] = (char*)tool;
    for (k = 0; k < data[0] % 8; k++) {
        const uint8_t* end = (const uint8_t*)memchr(data + at, 0, size - at);
        const char* a = (const char*)data + at;
        if (!end) return -1;
        if (a[0] == '@' && a[1] && !a[2] && strchr(names, a[1])) a = paths[strchr(names, a[1]) - names];
        argv[argc++] = (char*)a;
        at = (size_t)(end - data) + 1;
    }
    argv[argc] = NULL;
    if (size - at < 2) return -1;
    na = data[at] | (size_t)data[at + 1] << 8;
    at += 2;
    if (na > size - at) na = size - at;
    write_file(paths[0], data + at, na);
    at += na;
    nb = size - at >= 2 ? (data[at] | (size_t)data[at + 1] << 8) : 0;
    at += size - at >= 2 ? 2 : size - at;
    if (nb > size - at) nb = size - at;
    write_file(paths[1], data + at, nb);
    at += nb;
    snprintf(errpath, sizeof errpath, "%s/config.json", g_dir);
    write_file(errpath, data + at, size - at);
    remove(paths[5]);
    /* stderr into a file for the length of the call */
    snprintf(errpath, sizeof errpath, "%s/stderr", g_dir);
    fflush(stderr);
    saved = dup(2);
    fd = open(errpath, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (saved < 0 || fd < 0 || dup2(fd, 2) < 0) abort();
    close(fd);
    rc = tool_main(argc, argv);
    fflush(stderr);
    if (dup2(saved, 2) < 0) abort();
    close(saved);
    memset(g_err, 0, sizeof g_err);
    if ((ef = fopen(errpath, "rb"))) {
        if (fread(g_err, 1, sizeof g_err - 1, ef)) {}
        fclose(ef);
    }
    if (rc < 0 || rc > max_code) tool_fail("an exit status the tool does not document", argc, argv, rc);
    else if (rc == max_code && strncmp(g_err, tool, strlen(tool)) && strncmp(g_err, "usage:", 6))
        tool_fail("a failure without a message naming the tool", argc, argv, rc);
    {   /* the special files are still what they were */
        struct stat sb;
        if (stat(paths[2], &sb) || !S_ISFIFO(sb.st_mode) || stat(paths[3], &sb) || !S_ISDIR(sb.st_mode) ||
            stat("/dev/null", &sb) || !S_ISCHR(sb.st_mode))
            tool_fail("a special file was replaced", argc, argv, rc);
    }
    return rc;
}

#ifndef NB_LIBFUZZER
typedef struct tool_in {
    const char* args[8];
    int nargs;
    unsigned char a[4096], b[4096], c[2048];
    size_t na, nb, nc;
} tool_in;

/* the input bytes of a command line and two files */
static size_t tool_pack(const tool_in* t, uint8_t* out, size_t cap) {
    size_t n = 0, k, len;
    out[n++] = (uint8_t)t->nargs;
    for (k = 0; k < (size_t)t->nargs; k++) {
        len = strlen(t->args[k]) + 1;
        if (n + len + 4 + t->na + t->nb + t->nc > cap) abort();
        memcpy(out + n, t->args[k], len);
        n += len;
    }
    out[n++] = (uint8_t)(t->na & 0xff);
    out[n++] = (uint8_t)(t->na >> 8);
    memcpy(out + n, t->a, t->na);
    n += t->na;
    out[n++] = (uint8_t)(t->nb & 0xff);
    out[n++] = (uint8_t)(t->nb >> 8);
    memcpy(out + n, t->b, t->nb);
    n += t->nb;
    memcpy(out + n, t->c, t->nc);
    return n + t->nc;
}

#define FUZZ_RNG_SEED 0x70015ULL
#include "fuzz_rng.h"

/* one mutation of t: an argument replaced, inserted, dropped or swapped (from words, the
   tool's options and hostile values), or the bytes of a file flipped, cut or extended */
static void tool_mutate(tool_in* t, const char* const* words, int n_words) {
    const unsigned which = rnd(3);
    unsigned char* f = which == 0 ? t->a : which == 1 ? t->b : t->c;
    size_t* nf = which == 0 ? &t->na : which == 1 ? &t->nb : &t->nc;
    int k;
    switch (rnd(7)) {
    case 0: if (t->nargs) t->args[rnd((unsigned)t->nargs)] = words[rnd((unsigned)n_words)]; break;
    case 1:
        if (t->nargs < 7) {
            const int at = (int)rnd((unsigned)t->nargs + 1);
            for (k = t->nargs; k > at; k--) t->args[k] = t->args[k - 1];
            t->args[at] = words[rnd((unsigned)n_words)];
            t->nargs++;
        }
        break;
    case 2:
        if (t->nargs) {
            const int at = (int)rnd((unsigned)t->nargs);
            for (k = at; k + 1 < t->nargs; k++) t->args[k] = t->args[k + 1];
            t->nargs--;
        }
        break;
    case 3:
        if (t->nargs > 1) {
            const int i = (int)rnd((unsigned)t->nargs), j = (int)rnd((unsigned)t->nargs);
            const char* x = t->args[i];
            t->args[i] = t->args[j];
            t->args[j] = x;
        }
        break;
    case 4: /* bytes of a file's header or data */
        for (k = 0; k < 1 + (int)rnd(3); k++)
            if (*nf) f[rnd((unsigned)*nf)] ^= (unsigned char)(1 + rnd(255));
        break;
    case 5: /* a digit of a file */
        for (k = 0; k < 64 && *nf; k++) {
            const size_t p = rnd((unsigned)*nf);
            if (f[p] >= '0' && f[p] <= '9') { f[p] = (unsigned char)('0' + rnd(10)); break; }
        }
        break;
    default: *nf = rnd((unsigned)*nf + 8) < *nf ? rnd((unsigned)*nf + 1) : *nf; break; /* cut */
    }
}

/* a small F32 safetensors file of named tensors into out: meta "k=v;k=v" or NULL */
static size_t st_small(unsigned char* out, size_t cap, const char* meta, int n, const char* const* names,
                       const int (*shapes)[3], const float* const* values) {
    char hdr[3000];
    size_t h = 0, off = 0, i, pad;
    int k, j;
    h += (size_t)snprintf(hdr + h, sizeof hdr - h, "{");
    if (meta) {
        char m[512], *kv, *save = NULL;
        int first = 1;
        snprintf(m, sizeof m, "%s", meta);
        h += (size_t)snprintf(hdr + h, sizeof hdr - h, "\"__metadata__\":{");
        for (kv = strtok_r(m, ";", &save); kv; kv = strtok_r(NULL, ";", &save)) {
            char* eq = strchr(kv, '=');
            *eq = 0;
            h += (size_t)snprintf(hdr + h, sizeof hdr - h, "%s\"%s\":\"%s\"", first ? "" : ",", kv, eq + 1);
            first = 0;
        }
        h += (size_t)snprintf(hdr + h, sizeof hdr - h, "}%s", n ? "," : "");
    }
    for (k = 0; k < n; k++) {
        size_t count = 1;
        h += (size_t)snprintf(hdr + h, sizeof hdr - h, "%s\"%s\":{\"dtype\":\"F32\",\"shape\":[", k ? "," : "", names[k]);
        for (j = 0; j < 3 && shapes[k][j]; j++) {
            h += (size_t)snprintf(hdr + h, sizeof hdr - h, "%s%d", j ? "," : "", shapes[k][j]);
            count *= (size_t)shapes[k][j];
        }
        h += (size_t)snprintf(hdr + h, sizeof hdr - h, "],\"data_offsets\":[%zu,%zu]}", off, off + 4 * count);
        off += 4 * count;
    }
    h += (size_t)snprintf(hdr + h, sizeof hdr - h, "}");
    pad = (8 - h % 8) % 8;
    if (8 + h + pad + off > cap || h >= sizeof hdr - 1) abort();
    for (i = 0; i < 8; i++) out[i] = (unsigned char)((h + pad) >> (8 * i));
    memcpy(out + 8, hdr, h);
    memset(out + 8 + h, ' ', pad);
    off = 8 + h + pad;
    for (k = 0; k < n; k++) {
        size_t count = 1;
        for (j = 0; j < 3 && shapes[k][j]; j++) count *= (size_t)shapes[k][j];
        for (i = 0; i < count; i++, off += 4) memcpy(out + off, &values[k][i], 4); /* little-endian host */
    }
    return off;
}

/* the driver: --corpus FILE..., --write-seeds DIR, or [iterations] mutations of the seeds */
static int tool_driver(int argc, char** argv, const char* tool, tool_in* seeds, int n_seeds,
                       const char* const* words, int n_words, int max_code) {
    static uint8_t buf[16384];
    int it, iters = argc > 1 && argv[1][0] != '-' ? atoi(argv[1]) : 2000, k, counts[4] = {0, 0, 0, 0};
    if (argc > 1 && !strcmp(argv[1], "--corpus")) {
        /* read first: the runs work in a temporary directory (relative paths change) */
        unsigned char** in = (unsigned char**)calloc((size_t)argc, sizeof *in);
        size_t* n = (size_t*)calloc((size_t)argc, sizeof *n);
        if (!in || !n) abort();
        for (k = 2; k < argc; k++)
            if (st_read_file(argv[k], &in[k], &n[k], (char*)buf, sizeof buf, NULL, NULL)) abort();
        tool_setup();
        if (argc == 2) g_failures++, fprintf(g_out, "FAIL: --corpus without files (an empty seed directory?)\n");
        for (k = 2; k < argc; k++) {
            run_tool(in[k], n[k], tool, max_code);
            free(in[k]);
        }
        free(in);
        free(n);
        fprintf(g_out, "fuzz_%s: %d corpus inputs, %d failed checks\n", tool, argc - 2, g_failures);
        return g_failures != 0;
    }
    if (argc > 2 && !strcmp(argv[1], "--write-seeds")) {
        for (k = 0; k < n_seeds; k++) {
            char path[4096];
            snprintf(path, sizeof path, "%s/seed%02d", argv[2], k);
            write_file(path, buf, tool_pack(&seeds[k], buf, sizeof buf));
        }
        return 0;
    }
    tool_setup();
    for (k = 0; k < n_seeds; k++) /* each seed is a valid run */
        if (run_tool(buf, tool_pack(&seeds[k], buf, sizeof buf), tool, max_code) != 0) {
            fprintf(g_out, "FAIL: seed %d does not run (exit != 0): %.300s\n", k, g_err);
            g_failures++;
        }
    for (it = 0; it < iters; it++) {
        tool_in t = seeds[rnd((unsigned)n_seeds)];
        int m, rc;
        for (m = 0; m < 1 + (int)rnd(3); m++) tool_mutate(&t, words, n_words);
        rc = run_tool(buf, tool_pack(&t, buf, sizeof buf), tool, max_code);
        counts[rc >= 0 && rc <= 2 ? rc : 3]++;
    }
    fprintf(g_out, "fuzz_%s: %d mutated command lines: exit 0 %d, 1 %d, 2 %d; %d failed checks\n", tool, iters,
           counts[0], counts[1], counts[2], g_failures);
    fprintf(g_out, "%d passed, %d failed\n", g_failures ? 0 : 1, g_failures != 0);
    return g_failures != 0;
}
#endif
