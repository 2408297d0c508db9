/* tuned_env.h: the environment the programs around normblocks (train, nbimport, the
   benchmarks) want before OpenMP and OpenBLAS read it, set by starting the program again.

   - OpenBLAS's core: Debian's OpenBLAS 0.3.21 does not know recent Xeons and falls silently
     to its generic SSE3 kernels (core "Prescott"), with GEMMs 3-6x slower. When it did, and
     OPENBLAS_CORETYPE is not set, the program sets SkylakeX (AVX-512) or Haswell (AVX2).
   - OpenMP's waiting (TUNE_WAIT): threads that spin-wait collapse when another process
     competes for the cores (one busy process on 2 cores made a run 7x slower); sleeping
     waiters keep the speed, but each parallel region then pays for waking the team (on an
     idle 16-core AMX host the bf16 step ran 12116 tok/s passive against 14916 spinning). So
     unless OMP_WAIT_POLICY or GOMP_SPINCOUNT is set, the program looks at the machine once:
     other processes keeping half a CPU or more busy over 50 ms (/proc/stat) make it PASSIVE;
     idle CPUs keep the runtime's default (spin a while, then sleep). Unknown (no /proc/stat)
     counts as busy. NB_TUNED_BUSY=P (percent of one CPU) replaces the sample, for tests.

   libgomp reads OMP_WAIT_POLICY once, when it loads, and OpenBLAS OPENBLAS_CORETYPE, so the
   program exec()s itself with them set, before anything else runs; not when Valgrind or the
   dynamic loader run it (their /proc/self/exe is not the program). If the exec fails, it goes
   on as it was. tuned_env_set() tells afterwards what was set (the markers NB_SET_CORETYPE
   and NB_SET_WAIT_POLICY), so a program can say so. A harness that runs a program's main in
   its own process (tests/fuzz/tool_input.h) defines NB_TUNED_ENV_OFF: no restart then.

   Header-only (static inline functions); include after <cblas.h> for the OpenBLAS part. POSIX. */
#ifndef NB_TUNED_ENV_H
#define NB_TUNED_ENV_H

#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

enum { TUNE_CORE = 1, TUNE_WAIT = 2 };

/* The OpenBLAS core for this CPU when OpenBLAS fell to Prescott; NULL when the user chose
   (OPENBLAS_CORETYPE set), OpenBLAS picked another core, or this is not OpenBLAS. */
static inline const char* tuned_blas_core(void) {
#if defined(OPENBLAS_SEQUENTIAL) && defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    const char* core = openblas_get_corename();
    if (getenv("OPENBLAS_CORETYPE") || !core || strcmp(core, "Prescott")) return NULL;
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) return "SkylakeX";
    if (__builtin_cpu_supports("avx2")) return "Haswell";
#endif
    return NULL;
}

/* How busy the other processes keep the CPUs, in percent of one CPU: /proc/stat's non-idle
   time over 50 ms less this process's own CPU time; -1 when it cannot be read. */
static inline double tuned_seconds(const struct timespec* a, const struct timespec* b) {
    return (double)(b->tv_sec - a->tv_sec) + 1e-9 * (double)(b->tv_nsec - a->tv_nsec);
}
static inline int tuned_busy_percent(void) {
    const char* fixed = getenv("NB_TUNED_BUSY");
    unsigned long long v[2][8], total = 0, idle;
    struct timespec own[2], wall[2]; /* this process's threads (OpenBLAS's pool spins at its
                                        start) are not others */
    const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    int k, got;
    if (fixed) return atoi(fixed);
    for (k = 0; k < 2; k++) {
        FILE* f;
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &own[k]);
        clock_gettime(CLOCK_MONOTONIC, &wall[k]);
        if (!(f = fopen("/proc/stat", "r"))) return -1;
        got = fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[k][0], &v[k][1],
                     &v[k][2], &v[k][3], &v[k][4], &v[k][5], &v[k][6], &v[k][7]);
        fclose(f);
        if (got != 8) return -1;
        if (k == 0) {
            const struct timespec ts = {0, 50000000};
            nanosleep(&ts, NULL);
        }
    }
    idle = (v[1][3] + v[1][4]) - (v[0][3] + v[0][4]); /* idle and iowait */
    for (k = 0; k < 8; k++) total += v[1][k] - v[0][k];
    if (total == 0 || cpus < 1 || tuned_seconds(&wall[0], &wall[1]) <= 0) return -1;
    return (int)(100.0 * ((double)(total - idle) / (double)total * (double)cpus -
                          tuned_seconds(&own[0], &own[1]) / tuned_seconds(&wall[0], &wall[1])));
}

/* Start the program again with what `what` (TUNE_* bits) asks set, when anything is to set. */
static inline void tuned_env_restart(char** argv, int what) {
#ifdef NB_TUNED_ENV_OFF
    (void)argv;
    (void)what;
#else
    const char* pre = getenv("LD_PRELOAD");
    const char* core = what & TUNE_CORE ? tuned_blas_core() : NULL;
    const char* told = getenv("NB_SET_WAIT_POLICY");
    const int chooses = (what & TUNE_WAIT) && !getenv("OMP_WAIT_POLICY") &&
                        !getenv("GOMP_SPINCOUNT");
    const int busy = chooses ? tuned_busy_percent() : 0;
    const int wait = chooses && (busy < 0 || busy >= 50); /* half a CPU busy, or unknown: sleep */
    char self[4096];
    const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (chooses && !wait) setenv("NB_SET_WAIT_POLICY", "default", 1); /* idle: nothing to set */
    else if (!chooses && told && strcmp(told, "PASSIVE"))
        unsetenv("NB_SET_WAIT_POLICY"); /* a parent's idle verdict; this one was told a policy */
    if ((!wait && !core) || (pre && strstr(pre, "vgpreload"))) return;
    self[n > 0 ? n : 0] = 0;
    if (strstr(self, "/ld-linux")) return; /* started by the loader itself (a bundle): it would
                                               take argv[1] for the program */
    if (wait &&
        (setenv("OMP_WAIT_POLICY", "PASSIVE", 1) || setenv("NB_SET_WAIT_POLICY", "PASSIVE", 1)))
        return;
    if (core && (setenv("OPENBLAS_CORETYPE", core, 1) || setenv("NB_SET_CORETYPE", "1", 1)))
        return;
    execv("/proc/self/exe", argv);
    unsetenv("NB_SET_WAIT_POLICY");
    unsetenv("NB_SET_CORETYPE");
#endif
}

/* What the restart set: a TUNE_* mask (TUNE_WAIT: PASSIVE, the machine was busy) */
static inline int tuned_env_set(void) {
    const char* w = getenv("NB_SET_WAIT_POLICY");
    return (getenv("NB_SET_CORETYPE") ? TUNE_CORE : 0) |
           (w && !strcmp(w, "PASSIVE") ? TUNE_WAIT : 0);
}
/* The runtime's default waiting kept because the CPUs were idle at the start */
static inline int tuned_wait_idle(void) {
    const char* w = getenv("NB_SET_WAIT_POLICY");
    return w && !strcmp(w, "default");
}

#endif
