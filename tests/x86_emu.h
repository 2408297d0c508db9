/* x86_emu.h: the AVX-512, AVX512-BF16 and AMX instructions of normblocks.h's bf16 kernels,
   emulated in scalar C, so the kernels' own code (nb__bdot_avx512, nb__bdot_amx, the gather
   packs) runs and is tested on any x86-64, not only on the CPUs that have them.

   normblocks.h includes this file instead of <immintrin.h> and <cpuid.h> when the test build
   defines NB__TEST_X86_EMU; its kernels then lose their target attributes, and nb__bf16_isa
   reports AMX (every kernel). Tests only: the emulation is far slower than the hardware.

   Semantics, from the Intel SDM's pseudo-code (Vol. 2, VDPBF16PS and TDPBF16PS):
   - each bf16 x bf16 product is exact in float32; each of the two per pair is added to the
     float32 accumulator in turn, rounded to nearest even: VDPBF16PS the odd element first,
     TDPBF16PS the even one first;
   - denormal inputs are read as zero and denormal results flushed to zero (DAZ, FTZ), whatever
     MXCSR says;
   - a masked load or gather reads only its active lanes (no fault, as the hardware);
   - a tile instruction checks the shapes of its configured tiles (TDPBF16PS: rows of A and
     C, A's pairs = B's rows, B's and C's bytes per row): a mismatch the hardware would fault on
     (#UD) aborts here, naming it. The tiles are per thread, as the hardware's registers. */
#ifndef NB_X86_EMU_H
#define NB_X86_EMU_H

#include <float.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The vector types are GCC's vectors of the same sizes (the kernels cast between them). A build
   with this file passes -Wno-psabi: GCC notes that 64-byte vectors passed by value without
   AVX-512 change the ABI, which does not matter to static functions of one program. */
typedef float __m512 __attribute__((vector_size(64)));
typedef int __m512i __attribute__((vector_size(64)));
typedef short __m512bh __attribute__((vector_size(64)));
typedef int __m256i __attribute__((vector_size(32)));
typedef unsigned short __mmask16;

static void nbx_fail(const char* what) {
    fprintf(stderr, "x86_emu: %s (the hardware would fault)\n", what);
    abort();
}

/* ---- bf16 arithmetic ---- */
static float nbx_bf16(unsigned short h) {
    unsigned u = (unsigned)h << 16;
    float f;
    if ((u & 0x7f800000u) == 0) u &= 0x80000000u; /* DAZ */
    memcpy(&f, &u, sizeof f);
    return f;
}
static float nbx_ftz(float f) { return f > -FLT_MIN && f < FLT_MIN ? f * 0.0f : f; }
/* acc + a b, one rounding, flushed: the product of two bf16 is exact in float32, so an FMA
   (a compiler's contraction) rounds the same */
static float nbx_madd(float acc, float a, float b) { return nbx_ftz(acc + a * b); }

/* ---- AVX-512 ---- */
static __m512 _mm512_setzero_ps(void) { return (__m512){0}; }
static __m512i _mm512_setzero_si512(void) { return (__m512i){0}; }
static __m256i _mm256_setzero_si256(void) { return (__m256i){0}; }
static __m512i _mm512_set1_epi32(int x) {
    __m512i v;
    int i;
    for (i = 0; i < 16; i++) v[i] = x;
    return v;
}
static __m512i _mm512_setr_epi32(int e0, int e1, int e2, int e3, int e4, int e5, int e6, int e7,
                                 int e8, int e9, int e10, int e11, int e12, int e13, int e14,
                                 int e15) {
    __m512i v = {e0, e1, e2, e3, e4, e5, e6, e7, e8, e9, e10, e11, e12, e13, e14, e15};
    return v;
}
/* the 32-bit lanes of k from src to dst (each an array of 16) */
static void nbx_lanes(void* dst, const void* src, __mmask16 k) {
    int i;
    for (i = 0; i < 16; i++)
        if (k >> i & 1) memcpy((char*)dst + 4 * i, (const char*)src + 4 * i, 4);
}
static __m512 _mm512_maskz_loadu_ps(__mmask16 k, const void* p) {
    __m512 v = {0};
    nbx_lanes(&v, p, k);
    return v;
}
static __m512i _mm512_maskz_loadu_epi32(__mmask16 k, const void* p) {
    __m512i v = {0};
    nbx_lanes(&v, p, k);
    return v;
}
static void _mm512_mask_storeu_ps(void* p, __mmask16 k, __m512 v) { nbx_lanes(p, &v, k); }
static void _mm512_storeu_si512(void* p, __m512i v) { memcpy(p, &v, 64); }
static void _mm256_storeu_si256(__m256i* p, __m256i v) { memcpy(p, &v, 32); }
static __m512i _mm512_mullo_epi32(__m512i a, __m512i b) {
    __m512i v;
    int i;
    for (i = 0; i < 16; i++) v[i] = (int)((unsigned)a[i] * (unsigned)b[i]);
    return v;
}
static __m512i _mm512_maskz_srli_epi32(__mmask16 k, __m512i a, unsigned n) {
    __m512i v = {0};
    int i;
    for (i = 0; i < 16; i++)
        if (k >> i & 1) v[i] = n > 31 ? 0 : (int)((unsigned)a[i] >> n);
    return v;
}
/* lane i: k ? the low 16 bits of a[i] : src's 16-bit lane i */
static __m256i _mm512_mask_cvtepi32_epi16(__m256i src, __mmask16 k, __m512i a) {
    unsigned short h[16];
    int i;
    memcpy(h, &src, sizeof h);
    for (i = 0; i < 16; i++)
        if (k >> i & 1) h[i] = (unsigned short)a[i];
    memcpy(&src, h, sizeof h);
    return src;
}
static __m512i _mm512_mask_i32gather_epi32(__m512i src, __mmask16 k, __m512i idx,
                                           const void* base, int scale) {
    int i;
    for (i = 0; i < 16; i++)
        if (k >> i & 1)
            memcpy((int*)&src + i, (const char*)base + (long long)idx[i] * scale, 4);
    return src;
}

/* ---- AVX512-BF16: VDPBF16PS ---- */
static __m512 _mm512_dpbf16_ps(__m512 acc, __m512bh a, __m512bh b) {
    unsigned short x[32], y[32];
    int i;
    memcpy(x, &a, sizeof x);
    memcpy(y, &b, sizeof y);
    for (i = 0; i < 16; i++) {
        float s = nbx_ftz(acc[i]);
        s = nbx_madd(s, nbx_bf16(x[2 * i + 1]), nbx_bf16(y[2 * i + 1]));
        acc[i] = nbx_madd(s, nbx_bf16(x[2 * i]), nbx_bf16(y[2 * i]));
    }
    return acc;
}

/* ---- AMX: the tile configuration (palette 1), eight tiles of 16 rows x 64 bytes ---- */
typedef struct nbx_tilecfg {
    unsigned char palette, start_row, reserved[14];
    unsigned short colsb[16];
    unsigned char rows[16];
} nbx_tilecfg;
static __thread nbx_tilecfg nbx_cfg;
static __thread int nbx_configured;
static __thread unsigned char nbx_tile[8][16][64];

static void nbx_check_tile(int t) {
    if (!nbx_configured) nbx_fail("a tile instruction without a tile configuration");
    if (t < 0 || t > 7 || !nbx_cfg.rows[t] || !nbx_cfg.colsb[t])
        nbx_fail("a tile that the configuration leaves unset");
}
static void _tile_loadconfig(const void* p) {
    int t;
    memcpy(&nbx_cfg, p, sizeof nbx_cfg);
    if (nbx_cfg.palette != 1 || nbx_cfg.start_row) nbx_fail("a tile configuration not palette 1");
    for (t = 0; t < 8; t++)
        if (nbx_cfg.rows[t] > 16 || nbx_cfg.colsb[t] > 64 || nbx_cfg.colsb[t] % 4)
            nbx_fail("a tile over 16 rows x 64 bytes");
    memset(nbx_tile, 0, sizeof nbx_tile);
    nbx_configured = 1;
}
static void _tile_release(void) {
    memset(nbx_tile, 0, sizeof nbx_tile);
    nbx_configured = 0;
}
static void _tile_zero(int t) {
    nbx_check_tile(t);
    memset(nbx_tile[t], 0, sizeof nbx_tile[t]);
}
static void _tile_loadd(int t, const void* base, long long stride) {
    int r;
    nbx_check_tile(t);
    memset(nbx_tile[t], 0, sizeof nbx_tile[t]);
    for (r = 0; r < nbx_cfg.rows[t]; r++)
        memcpy(nbx_tile[t][r], (const char*)base + r * stride, nbx_cfg.colsb[t]);
}
static void _tile_stored(int t, void* base, long long stride) {
    int r;
    nbx_check_tile(t);
    for (r = 0; r < nbx_cfg.rows[t]; r++)
        memcpy((char*)base + r * stride, nbx_tile[t][r], nbx_cfg.colsb[t]);
}
/* C (rows x n floats) += A (rows x k pairs) B (k rows x n pairs) */
static void _tile_dpbf16ps(int c, int a, int b) {
    const int rows = nbx_cfg.rows[c], n = nbx_cfg.colsb[c] / 4, kp = nbx_cfg.colsb[a] / 4;
    float bw[16][32]; /* B widened once */
    int m, k, j;
    nbx_check_tile(c); nbx_check_tile(a); nbx_check_tile(b);
    if (nbx_cfg.rows[a] != rows || nbx_cfg.rows[b] != kp || nbx_cfg.colsb[b] != nbx_cfg.colsb[c])
        nbx_fail("TDPBF16PS on tiles whose shapes do not match");
    for (k = 0; k < kp; k++) {
        unsigned short y[32];
        memcpy(y, nbx_tile[b][k], sizeof y);
        for (j = 0; j < 2 * n; j++) bw[k][j] = nbx_bf16(y[j]);
    }
    for (m = 0; m < rows; m++) {
        float acc[16];
        memcpy(acc, nbx_tile[c][m], sizeof acc);
        for (j = 0; j < n; j++) acc[j] = nbx_ftz(acc[j]);
        for (k = 0; k < kp; k++) {
            unsigned short x[2];
            float x0, x1;
            memcpy(x, nbx_tile[a][m] + 4 * k, sizeof x);
            x0 = nbx_bf16(x[0]);
            x1 = nbx_bf16(x[1]);
            for (j = 0; j < n; j++) {
                acc[j] = nbx_madd(acc[j], x0, bw[k][2 * j]);
                acc[j] = nbx_madd(acc[j], x1, bw[k][2 * j + 1]);
            }
        }
        memcpy(nbx_tile[c][m], acc, sizeof acc);
    }
}

#endif /* NB_X86_EMU_H */
