/* tuned_env.h: the environment the programs around normblocks (train, nbimport, the
   benchmarks) want before OpenMP and OpenBLAS read it, set by starting the program again.

   - OpenBLAS's core: Debian's OpenBLAS 0.3.21 does not know recent Xeons and falls silently
     to its generic SSE3 kernels (core "Prescott"), with GEMMs 3-6x slower. When it did, and
     OPENBLAS_CORETYPE is not set, the program sets SkylakeX (AVX-512) or Haswell (AVX2).
   - OpenMP's waiting (TUNE_WAIT): threads that spin-wait collapse when another process
     competes for the cores (one busy process on 2 cores made a run 7x slower); sleeping
     waiters keep the speed. Set to PASSIVE unless OMP_WAIT_POLICY or GOMP_SPINCOUNT is set.

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

/* Start the program again with what `what` (TUNE_* bits) asks set, when anything is to set. */
static inline void tuned_env_restart(char** argv, int what) {
#ifdef NB_TUNED_ENV_OFF
    (void)argv;
    (void)what;
#else
    const char* pre = getenv("LD_PRELOAD");
    const char* core = what & TUNE_CORE ? tuned_blas_core() : NULL;
    const int wait = (what & TUNE_WAIT) && !getenv("OMP_WAIT_POLICY") && !getenv("GOMP_SPINCOUNT");
    char self[4096];
    const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if ((!wait && !core) || (pre && strstr(pre, "vgpreload"))) return;
    self[n > 0 ? n : 0] = 0;
    if (strstr(self, "/ld-linux")) return; /* started by the loader itself (a bundle): it would
                                               take argv[1] for the program */
    if (wait && (setenv("OMP_WAIT_POLICY", "PASSIVE", 1) || setenv("NB_SET_WAIT_POLICY", "1", 1)))
        return;
    if (core && (setenv("OPENBLAS_CORETYPE", core, 1) || setenv("NB_SET_CORETYPE", "1", 1)))
        return;
    execv("/proc/self/exe", argv);
    unsetenv("NB_SET_WAIT_POLICY");
    unsetenv("NB_SET_CORETYPE");
#endif
}

/* What the restart set: a TUNE_* mask */
static inline int tuned_env_set(void) {
    return (getenv("NB_SET_CORETYPE") ? TUNE_CORE : 0) |
           (getenv("NB_SET_WAIT_POLICY") ? TUNE_WAIT : 0);
}

#endif
