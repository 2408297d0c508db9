/* The GEMM backends for mixed precision, measured on a block's own GEMM shapes: the 12 linear
   GEMMs of a Pre-Norm SwiGLU block (forward, dX, dW of W_qkv, W_o, W_in, W_out) at (B, T, d),
   each timed with
     openblas  cblas_sgemm (the library's float32 backend today)
     dnnl_f32  oneDNN's matmul primitive in float32
     dnnl_bf16 oneDNN's matmul on bf16 operands, float32 output (operands converted beforehand,
               as cached bf16 activations and weights would be)
     emulated  the library's portable bf16 path off AMX (float32 sgemm on rounded blocks)
     tiles     normblocks' own bf16 GEMM on nb__bdot's kernels (the portable path on AMX: the
               tiles), from the same bf16 operands as dnnl_bf16; on a CPU without AMX only
               with NBD_TILES=1 (its AVX512-BF16 or portable kernel: slow), else "-"
   Each row names the oneDNN implementation that ran (its ISA: brg:avx512_core_amx_bf16 on an
   AMX CPU, avx512_core_bf16 without, ...). Primitives are created once per shape, outside the
   timing (creating one costs milliseconds). Every engine runs on THREADS (oneDNN on OpenMP's
   thread count, set to THREADS: left to OMP_NUM_THREADS it took every core). NBD_COLD=1
   writes 64 MiB before each timed call, so that the operands come from memory, as they do in
   a training step between the other kernels. Built when CMake finds oneDNN (libdnnl-dev).

   usage: bench_dnnl B T d THREADS REPS */
#define _POSIX_C_SOURCE 200809L
#define NORMBLOCKS_IMPLEMENTATION
#include "normblocks.h"
#include "bench_common.h"
#include <oneapi/dnnl/dnnl.h>
#include <stdint.h>

typedef struct mm_gemm {
    dnnl_primitive_t prim;
    dnnl_memory_t a, b, c;
    const char* impl;
} mm_gemm;

#define DNNL_OK(call) do { if ((call) != dnnl_success) { \
    fprintf(stderr, "bench_dnnl: %s failed\n", #call); exit(1); } } while (0)

/* A matmul primitive for one shape and data type of the operands; transposes are strides.
   Variants (the engine choice, NBD_VARIANTS=1): packed, B in the layout oneDNN prefers
   (format_tag_any: a weight reordered once, outside the timing, as a weight packed once per
   optimizer step would be); dst_dt, the output's type; sum, C += op(A) op(B) (the backward's
   dW accumulation). */
typedef struct mm_variant { int packed, sum; dnnl_data_type_t dst_dt; } mm_variant;
static int mm_make_v(mm_gemm* g, dnnl_engine_t eng, dnnl_stream_t st, const gemm_shape* s,
                     dnnl_data_type_t dt, void* A, void* B, void* C, mm_variant v) {
    dnnl_memory_desc_t a_md, b_md, b_plain, c_md;
    dnnl_dims_t ad = {s->M, s->K}, bd = {s->K, s->N}, cd = {s->M, s->N};
    dnnl_matmul_desc_t md;
    dnnl_primitive_desc_t pd;
    dnnl_primitive_attr_t attr;
    dnnl_post_ops_t po;
    DNNL_OK(dnnl_memory_desc_init_by_tag(&a_md, 2, ad, dt, s->ta ? dnnl_ba : dnnl_ab));
    DNNL_OK(dnnl_memory_desc_init_by_tag(&b_plain, 2, bd, dt, s->tb ? dnnl_ba : dnnl_ab));
    DNNL_OK(dnnl_memory_desc_init_by_tag(&b_md, 2, bd, dt,
                                         v.packed ? dnnl_format_tag_any : (s->tb ? dnnl_ba : dnnl_ab)));
    DNNL_OK(dnnl_memory_desc_init_by_tag(&c_md, 2, cd, v.dst_dt, dnnl_ab));
    DNNL_OK(dnnl_matmul_desc_init(&md, &a_md, &b_md, NULL, &c_md));
    DNNL_OK(dnnl_primitive_attr_create(&attr));
    if (v.sum) {
        DNNL_OK(dnnl_post_ops_create(&po));
        DNNL_OK(dnnl_post_ops_append_sum(po, 1.0f));
        DNNL_OK(dnnl_primitive_attr_set_post_ops(attr, po));
        dnnl_post_ops_destroy(po);
    }
    {
        const dnnl_status_t made = dnnl_primitive_desc_create(&pd, &md, attr, eng, NULL);
        dnnl_primitive_attr_destroy(attr);
        if (made == dnnl_unimplemented) { /* no such matmul on this CPU (bf16 without AVX-512) */
            memset(g, 0, sizeof *g);
            g->impl = "none";
            return 0;
        }
        DNNL_OK(made);
    }
    DNNL_OK(dnnl_primitive_create(&g->prim, pd));
    DNNL_OK(dnnl_memory_create(&g->a, &a_md, eng, A));
    DNNL_OK(dnnl_memory_create(&g->c, &c_md, eng, C));
    if (v.packed) { /* reorder B once into the primitive's own layout */
        const dnnl_memory_desc_t* want = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
        dnnl_memory_t plain;
        dnnl_primitive_desc_t rpd;
        dnnl_primitive_t re;
        dnnl_exec_arg_t args[2];
        DNNL_OK(dnnl_memory_create(&g->b, want, eng, DNNL_MEMORY_ALLOCATE));
        DNNL_OK(dnnl_memory_create(&plain, &b_plain, eng, B));
        DNNL_OK(dnnl_reorder_primitive_desc_create(&rpd, &b_plain, eng, want, eng, NULL));
        DNNL_OK(dnnl_primitive_create(&re, rpd));
        args[0].arg = DNNL_ARG_FROM; args[0].memory = plain;
        args[1].arg = DNNL_ARG_TO; args[1].memory = g->b;
        DNNL_OK(dnnl_primitive_execute(re, st, 2, args));
        DNNL_OK(dnnl_stream_wait(st));
        dnnl_primitive_destroy(re);
        dnnl_primitive_desc_destroy(rpd);
        dnnl_memory_destroy(plain);
    } else {
        DNNL_OK(dnnl_memory_create(&g->b, &b_plain, eng, B));
    }
    DNNL_OK(dnnl_primitive_desc_destroy(pd));
    {   /* the implementation's name, from the primitive's own copy of its descriptor */
        const_dnnl_primitive_desc_t own;
        DNNL_OK(dnnl_primitive_get_primitive_desc(g->prim, &own));
        DNNL_OK(dnnl_primitive_desc_query(own, dnnl_query_impl_info_str, 0, &g->impl));
    }
    return 1;
}
/* 1 when made, 0 when oneDNN has no such matmul here (g->impl "none", nothing to free) */
static int mm_make(mm_gemm* g, dnnl_engine_t eng, dnnl_stream_t st, const gemm_shape* s,
                   dnnl_data_type_t dt, void* A, void* B, float* C) {
    const mm_variant plain = {0, 0, dnnl_f32};
    return mm_make_v(g, eng, st, s, dt, A, B, C, plain);
}

static void mm_run(const mm_gemm* g, dnnl_stream_t st) {
    dnnl_exec_arg_t args[3];
    args[0].arg = DNNL_ARG_SRC; args[0].memory = g->a;
    args[1].arg = DNNL_ARG_WEIGHTS; args[1].memory = g->b;
    args[2].arg = DNNL_ARG_DST; args[2].memory = g->c;
    DNNL_OK(dnnl_primitive_execute(g->prim, st, 3, args));
    DNNL_OK(dnnl_stream_wait(st));
}

static void mm_free(mm_gemm* g) {
    if (!g->prim) return;
    dnnl_primitive_destroy(g->prim);
    dnnl_memory_destroy(g->a); dnnl_memory_destroy(g->b); dnnl_memory_destroy(g->c);
}

/* NBD_COLD=1: the caches emptied of the operands before a timed call (a 64 MiB write) */
static float* g_junk; /* freed by main */
static void evict(void) {
    enum { N = 1 << 24 };
    size_t i;
    if (!getenv("NBD_COLD") || strcmp(getenv("NBD_COLD"), "1")) return;
    if (!g_junk) g_junk = nbb_alloc(N);
    for (i = 0; i < N; i++) g_junk[i] = (float)i;
}

static uint16_t to_bf16(float x) { /* round to nearest even; the data here is finite */
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/* The bf16 matmul's variants on the same shapes (NBD_VARIANTS=1), GFLOP/s: plain (as above),
   B packed (fwd and dX, whose B is a weight), a bf16 output, and C += (the dW accumulation); on
   the main table's data, or (NBD_DATA=pattern) on short repeating values. */
static void variants(const gemm_shape* sh, dnnl_engine_t eng, dnnl_stream_t st, int reps) {
    static const char* const name[4] = {"plain", "packed_B", "bf16_dst", "sum"};
    const int pattern = getenv("NBD_DATA") && !strcmp(getenv("NBD_DATA"), "pattern");
    double tot[4] = {0, 0, 0, 0}, flops = 0;
    int i, k, r;
    printf("# oneDNN bf16 variants, GFLOP/s (median of %d; %s data)\n%-8s %9s %9s %9s %9s  implementation of "
           "each\n", reps, pattern ? "patterned" : "the same normal", "gemm", name[0], name[1], name[2], name[3]);
    for (i = 0; i < 12; i++) {
        const gemm_shape* s = &sh[i];
        const size_t na = (size_t)s->M * s->K, nb = (size_t)s->K * s->N, nc = (size_t)s->M * s->N;
        uint16_t *A16 = (uint16_t*)malloc(na * 2), *B16 = (uint16_t*)malloc(nb * 2);
        float* C = nbb_alloc(nc);
        double* t = (double*)malloc(sizeof(double) * (size_t)reps), gf[4];
        const double fl = 2.0 * s->M * s->N * s->K;
        const char* impl[4] = {"", "", "", ""};
        if (pattern) { /* NBD_DATA=pattern: short repeating values (AMX ran 2x faster on these) */
            for (k = 0; k < (int)na; k++) A16[k] = to_bf16((float)((k * 37 % 101) - 50) / 64.0f);
            for (k = 0; k < (int)nb; k++) B16[k] = to_bf16((float)((k * 53 % 97) - 48) / 64.0f);
        } else { /* the main table's draws */
            float* f = nbb_alloc(na > nb ? na : nb);
            nb_fill_normal(f, na, 1, 3, (unsigned long long)i + 1);
            for (k = 0; k < (int)na; k++) A16[k] = to_bf16(f[k]);
            nb_fill_normal(f, nb, 1, 3, (unsigned long long)i + 100);
            for (k = 0; k < (int)nb; k++) B16[k] = to_bf16(f[k]);
            free(f);
        }
        for (k = 0; k < (int)nc; k++) C[k] = 0;
        for (k = 0; k < 4; k++) {
            mm_variant v = {k == 1, k == 3, k == 2 ? dnnl_bf16 : dnnl_f32};
            mm_gemm g;
            gf[k] = 0;
            if (k == 1 && s->ta) continue; /* dW: B is an activation, not packed once */
            impl[k] = "none";
            if (!mm_make_v(&g, eng, st, s, dnnl_bf16, A16, B16, C, v)) continue;
            impl[k] = g.impl;
            for (r = -1; r < reps; r++) {
                double t0;
                evict();
                t0 = nbb_now();
                mm_run(&g, st);
                if (r >= 0) t[r] = nbb_now() - t0;
            }
            gf[k] = fl / nbb_median(t, reps) * 1e-9;
            tot[k] += nbb_median(t, reps);
            mm_free(&g);
        }
        flops += fl;
        printf("%-8s %9.1f %9.1f %9.1f %9.1f  %s / %s / %s / %s\n", s->what, gf[0], gf[1], gf[2],
               gf[3], impl[0], impl[1], impl[2], impl[3]);
        free(A16); free(B16); free(C); free(t);
    }
    printf("%-8s %9.1f %9s %9.1f %9.1f  (ms: %.1f, packed fwd+dX only %.1f, %.1f, %.1f)\n", "all 12",
           flops / tot[0] * 1e-9, "-", flops / tot[2] * 1e-9, flops / tot[3] * 1e-9, 1e3 * tot[0],
           1e3 * tot[1], 1e3 * tot[2], 1e3 * tot[3]);
}

/* a column of GFLOP/s: "-" for an engine that did not run (t = 0) */
static void print_rate(double flops, double t) {
    if (t > 0) printf(" %9.1f", flops / t * 1e-9);
    else printf(" %9s", "-");
}

int main(int argc, char** argv) {
    int B, T, d, nt, reps, f, i, r, k;
    gemm_shape sh[12];
    double tot[5] = {0, 0, 0, 0, 0}, flops = 0;
    const int isa = nb__bf16_isa(), tiles = isa == NB__ISA_AMX || getenv("NBD_TILES");
    dnnl_engine_t eng;
    dnnl_stream_t st;
    nb_ctx ctx;
    tuned_env_restart(argv, TUNE_CORE); /* OpenBLAS's core when it fell to Prescott */
    if (argc < 6) {
        fprintf(stderr, "usage: %s B T d THREADS REPS\n", argv[0]);
        return 2;
    }
    B = atoi(argv[1]); T = atoi(argv[2]); d = atoi(argv[3]); nt = atoi(argv[4]);
    reps = atoi(argv[5]);
    f = (8 * d / 3 + 63) / 64 * 64;
    nbb_block_gemms(B, T, d, sh);
    nbb_print_env("bench_dnnl");
    memset(&ctx, 0, sizeof ctx);
    ctx.num_threads = nt;
    omp_set_num_threads(nt);
    DNNL_OK(dnnl_engine_create(&eng, dnnl_cpu, 0));
    DNNL_OK(dnnl_stream_create(&st, eng, dnnl_stream_default_flags));
    printf("# the 12 linear GEMMs of a Pre-Norm SwiGLU block, (B,T,d) = (%d,%d,%d), d_ff %d, "
           "%d threads, median of %d%s; GFLOP/s\n", B, T, d, f, nt, reps,
           getenv("NBD_COLD") && !strcmp(getenv("NBD_COLD"), "1") ? ", operands cold" : "");
    printf("# tiles: normblocks' bf16 GEMM on %s\n", !tiles ? "- (no AMX here; NBD_TILES=1)"
           : isa == NB__ISA_AMX ? "AMX tiles" : isa ? "AVX512-BF16" : "the portable kernel");
    printf("%-8s %6s %6s %6s %9s %9s %9s %9s %9s  oneDNN f32 / bf16 implementation\n", "gemm",
           "M", "N", "K", "openblas", "dnnl_f32", "dnnl_bf16", "emulated", "tiles");
    for (i = 0; i < 12; i++) {
        const gemm_shape* s = &sh[i];
        const size_t na = (size_t)s->M * s->K, nb = (size_t)s->K * s->N, nc = (size_t)s->M * s->N;
        float *A = nbb_alloc(na), *Bm = nbb_alloc(nb), *C = nbb_alloc(nc);
        uint16_t *A16 = (uint16_t*)malloc(na * 2), *B16 = (uint16_t*)malloc(nb * 2);
        double* t = (double*)malloc(sizeof(double) * (size_t)reps), med[5] = {0, 0, 0, 0, 0};
        const double fl = 2.0 * s->M * s->N * s->K;
        mm_gemm g32, g16;
        int run[5] = {1, 0, 0, 1, 0}; /* openblas, dnnl_f32, dnnl_bf16, emulated, tiles */
        nb_fill_normal(A, na, 1, 3, (unsigned long long)i + 1);
        nb_fill_normal(Bm, nb, 1, 3, (unsigned long long)i + 100);
        for (k = 0; k < (int)na; k++) A16[k] = to_bf16(A[k]);
        for (k = 0; k < (int)nb; k++) B16[k] = to_bf16(Bm[k]);
        run[1] = mm_make(&g32, eng, st, s, dnnl_f32, A, Bm, C);
        run[2] = mm_make(&g16, eng, st, s, dnnl_bf16, A16, B16, C);
        run[4] = tiles;
        for (k = 0; k < 5; k++) {
            if (!run[k]) continue;
            for (r = -1; r < reps; r++) { /* r = -1: warm-up */
                const int lda = s->ta ? s->M : s->K, ldb = s->tb ? s->K : s->N;
                double t0;
                evict();
                t0 = nbb_now();
                if (k == 0)
                    nb_gemm(&ctx, s->ta, s->tb, s->M, s->N, s->K, 1, A, lda, Bm, ldb, 0, C, s->N);
                else if (k == 1) mm_run(&g32, st);
                else if (k == 2) mm_run(&g16, st);
                else { /* the portable path's two kernels (k = 3 the emulation, 4 the tiles) */
                    const nb__gemm_at at = nb__at(&ctx, "bench", NULL, k == 4 ? isa + 1 : 0, 1);
                    nb__gemm(&at, s->M, s->N, s->K, 1, nb__mh(A16, lda, s->ta),
                             nb__mh(B16, ldb, s->tb), 0, C, s->N);
                }
                if (r >= 0) t[r] = nbb_now() - t0;
            }
            med[k] = nbb_median(t, reps);
            tot[k] += med[k];
        }
        flops += fl;
        printf("%-8s %6d %6d %6d", s->what, s->M, s->N, s->K);
        for (k = 0; k < 5; k++) print_rate(fl, med[k]);
        printf("  %s / %s\n", g32.impl, g16.impl);
        mm_free(&g32); mm_free(&g16);
        free(A); free(Bm); free(C); free(A16); free(B16); free(t);
    }
    printf("%-8s %20s", "all 12", "");
    for (k = 0; k < 5; k++) print_rate(flops, tot[k]);
    printf("  (ms: %.1f %.1f %.1f %.1f %.1f; 0: not run)\n", 1e3 * tot[0], 1e3 * tot[1],
           1e3 * tot[2], 1e3 * tot[3], 1e3 * tot[4]);
    printf("RESULT kind=dnnl B=%d T=%d d=%d threads=%d reps=%d openblas_ms=%.3f dnnl_f32_ms=%.3f "
           "dnnl_bf16_ms=%.3f emulated_ms=%.3f tiles_ms=%.3f tiles_kernel=%d core=%s\n", B, T, d,
           nt, reps, 1e3 * tot[0], 1e3 * tot[1], 1e3 * tot[2], 1e3 * tot[3], 1e3 * tot[4],
           tiles ? isa : -1, nbb_corename());
    if (getenv("NBD_VARIANTS") && !tot[2])
        printf("# NBD_VARIANTS: oneDNN has no bf16 matmul on this CPU\n");
    else if (getenv("NBD_VARIANTS"))
        variants(sh, eng, st, reps);
    dnnl_stream_destroy(st);
    dnnl_engine_destroy(eng);
    free(g_junk);
    return 0;
}
