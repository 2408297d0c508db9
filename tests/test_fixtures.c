/* test_fixtures.c - the normblocks primitives against PyTorch autograd.

   usage: test_fixtures FIXTURE_DIR      (reads FIXTURE_DIR/primitives.bin)

   The references in primitives.bin come from tests/gen_fixtures.py: the PyTorch twin's norms
   (checked there against a direct transcription) and torch's softmax, float64 autograd on
   loss = sum(out * upstream), independent of this library. Regenerate them with
       /usr/bin/python3 tests/gen_fixtures.py tests/fixtures
   PyTorch is not needed to run this test; a missing fixture file is a failure, not a skip.

   Every case runs in three layouts:
     packed   ld = width, dx overwritten, default thread count
     strided  ld = width + 5 with NaN padding that must be neither read nor written, dx, dgain
              and dbias pre-filled with a known array (accumulate = 1 for dx; parameter
              gradients always accumulate), 3 threads so rows split unevenly
     inplace  y written over x (norms) / p over s, then dx over dy / ds over dp, 2 threads
   Tolerances: the float32 build uses nbtest.h's NBT_ATOL/NBT_RTOL (2e-5 / 2e-4); they cover
   the rounding of the float64 fixture inputs to float plus the row reductions (worst case,
   ln_offset, where |x| ~ 100 so the input rounding alone is ~4e-6, uses ~1/3 of it). With
   NB_DOUBLE both sides are float64 and differ only by summation order over <= 32 terms (worst
   seen: ~1e-13 absolute, in ln_offset's dgain), so the test uses 1e-11 / 1e-10 instead of
   nbtest.h's 1e-8 / 1e-6, which are sized for finite differences. */
#define NORMBLOCKS_IMPLEMENTATION
#include "normblocks.h"
#include "nbtest.h"
#include "fixture.h"

typedef struct variant {
    const char* tag;
    int pad;        /* ld = width + pad */
    int accumulate; /* pre-fill the gradient outputs and expect prefill + reference */
    int inplace;
    int threads;    /* ctx.num_threads */
} variant;

static const variant variants[] = {
    {"packed", 0, 0, 0, 0},
    {"strided", 5, 1, 0, 3},
    {"inplace", 0, 0, 1, 2},
};

/* rows x width into a buffer with stride ld; padding is NaN. data NULL: all NaN. */
static nb_real* strided(const double* data, int rows, int width, int ld) {
    nb_real* b = nbt_alloc((size_t)rows * ld);
    int r, c;
    for (r = 0; r < rows; r++)
        for (c = 0; c < ld; c++)
            b[(size_t)r * ld + c] = (data && c < width) ? (nb_real)data[(size_t)r * width + c]
                                                        : (nb_real)NAN;
    return b;
}

/* Compare the rows x width part of a strided buffer with ref (+ prefill when add_pre). */
static void compare(const char* cs, const variant* v, const char* what, const nb_real* b,
                    int rows, int width, int ld, const double* ref, int add_pre) {
    size_t n = (size_t)rows * width;
    nb_real* got = nbt_alloc(n);
    char name[160];
    int r, c;
    for (r = 0; r < rows; r++)
        for (c = 0; c < width; c++) got[(size_t)r * width + c] = b[(size_t)r * ld + c];
    nbf_compare(cs, v->tag, what, got, ref, n, add_pre);
    if (ld > width) {
        int ok = 1;
        for (r = 0; r < rows; r++)
            for (c = width; c < ld; c++) ok &= nbt_isnan((double)b[(size_t)r * ld + c]) ? 1 : 0;
        snprintf(name, sizeof name, "%s/%s: %s padding untouched", cs, v->tag, what);
        nbt_check(ok, name);
    }
    free(got);
}

enum { RMS, LN, DYT }; /* norm kinds of the cases */
static const char* const fwd_names[3] = {"nb_rmsnorm_forward", "nb_layernorm_forward",
                                         "nb_dyt_forward"};
static const char* const bwd_names[3] = {"nb_rmsnorm_backward", "nb_layernorm_backward",
                                         "nb_dyt_backward"};

static void run_norm(const char* cs, int kind, const variant* v) {
    const nbf_tensor *x = nbf_field(cs, "x", 1), *dy = nbf_field(cs, "dy", 1),
                     *y = nbf_field(cs, "y", 1), *dx = nbf_field(cs, "dx", 1),
                     *gain = nbf_field(cs, "gain", 0), *bias = nbf_field(cs, "bias", 0);
    const nbf_tensor *dgain = gain ? nbf_field(cs, "dgain", 1) : NULL,
                     *dbias = bias ? nbf_field(cs, "dbias", 1) : NULL;
    const nbf_tensor *alpha = kind == DYT ? nbf_shaped(cs, "alpha", 1, 0) : NULL,
                     *dalpha = kind == DYT ? nbf_shaped(cs, "dalpha", 1, 0) : NULL;
    nb_real a = 0, da = 0;
    double segd, epsd;
    int rows, width, seg, segn, nseg, ld, i;
    nb_ctx ctx;
    nb_real *xb, *dyb, *yb, *dxb, *gb = NULL, *bb = NULL, *dgb = NULL, *dbb = NULL, *rstd, *mean;
    nb_real* scratch;
    size_t nscratch;
    nb_result rc;
    char name[160];

    if (!x || !dy || !y || !dx || (gain && !dgain) || (bias && !dbias)) return;
    if (kind == DYT && (!alpha || !dalpha)) return;
    if (!nbf_real(cs, "seg", &segd) || !nbf_real(cs, "eps", &epsd)) return;
    if (x->ndim != 2) { nbf_fail("%s.x: expected 2-D", cs); return; }
    rows = x->dims[0];
    width = x->dims[1];
    seg = (int)segd;
    segn = seg ? seg : width;
    if (seg < 0 || width % segn) { nbf_fail("%s: bad seg", cs); return; }
    if (!nbf_has_shape(dy, rows, width) || !nbf_has_shape(y, rows, width) ||
        !nbf_has_shape(dx, rows, width))
        return;
    if ((gain && (gain->n != (size_t)segn || dgain->n != (size_t)segn)) ||
        (bias && (bias->n != (size_t)segn || dbias->n != (size_t)segn))) {
        nbf_fail("%s: gain/bias length is not seg", cs);
        return;
    }
    nseg = width / segn;
    ld = width + v->pad;
    memset(&ctx, 0, sizeof ctx);
    ctx.num_threads = v->threads;

    xb = strided(x->data, rows, width, ld);
    dyb = strided(dy->data, rows, width, ld);
    yb = strided(v->inplace ? x->data : NULL, rows, width, ld);
    if (v->inplace) dxb = dyb; /* documented: dx may equal dy when accumulate = 0 */
    else {
        dxb = strided(NULL, rows, width, ld);
        if (v->accumulate)
            for (i = 0; i < rows * width; i++)
                dxb[(size_t)(i / width) * ld + i % width] = (nb_real)nbf_prefill((size_t)i);
    }
    if (gain) {
        gb = nbt_alloc(segn);
        dgb = nbt_alloc(segn);
        for (i = 0; i < segn; i++) {
            gb[i] = (nb_real)gain->data[i];
            dgb[i] = v->accumulate ? (nb_real)nbf_prefill((size_t)i) : 0;
        }
    }
    if (bias) {
        bb = nbt_alloc(segn);
        dbb = nbt_alloc(segn);
        for (i = 0; i < segn; i++) {
            bb[i] = (nb_real)bias->data[i];
            dbb[i] = v->accumulate ? (nb_real)nbf_prefill((size_t)i) : 0;
        }
    }
    rstd = nbt_alloc((size_t)rows * nseg);
    mean = nbt_alloc((size_t)rows * nseg);
    /* exactly the advertised size, followed by a canary that must survive */
    nscratch = nb_norm_scratch_size(&ctx, width, seg);
    scratch = nbt_alloc(nscratch + NBF_CANARY);
    nbf_set_canary(scratch, nscratch);

    if (alpha) {
        a = (nb_real)alpha->data[0];
        da = v->accumulate ? (nb_real)nbf_prefill(0) : 0;
    }
    if (kind == LN)
        rc = nb_layernorm_forward(&ctx, yb, ld, mean, rstd, v->inplace ? yb : xb, ld, gb, bb,
                                  rows, width, seg, (nb_real)epsd);
    else if (kind == RMS)
        rc = nb_rmsnorm_forward(&ctx, yb, ld, rstd, v->inplace ? yb : xb, ld, gb, rows, width,
                                seg, (nb_real)epsd);
    else
        rc = nb_dyt_forward(&ctx, yb, ld, v->inplace ? yb : xb, ld, &a, gb, bb, rows, width, seg);
    if (nbf_check_rc(&ctx, rc, cs, v->tag, fwd_names[kind])) {
        compare(cs, v, "y", yb, rows, width, ld, y->data, 0);
        if (kind == LN)
            rc = nb_layernorm_backward(&ctx, dxb, ld, dgb, dbb, dyb, ld, xb, ld, mean, rstd, gb,
                                       rows, width, seg, v->accumulate, scratch);
        else if (kind == RMS)
            rc = nb_rmsnorm_backward(&ctx, dxb, ld, dgb, dyb, ld, xb, ld, rstd, gb, rows, width,
                                     seg, v->accumulate, scratch);
        else
            rc = nb_dyt_backward(&ctx, dxb, ld, dgb, dbb, &da, dyb, ld, xb, ld, &a, gb, rows,
                                 width, seg, v->accumulate, scratch);
        if (nbf_check_rc(&ctx, rc, cs, v->tag, bwd_names[kind])) {
            compare(cs, v, "dx", dxb, rows, width, ld, dx->data, v->accumulate);
            if (gain) compare(cs, v, "dgain", dgb, 1, segn, segn, dgain->data, v->accumulate);
            if (bias) compare(cs, v, "dbias", dbb, 1, segn, segn, dbias->data, v->accumulate);
            if (dalpha) compare(cs, v, "dalpha", &da, 1, 1, 1, dalpha->data, v->accumulate);
            snprintf(name, sizeof name, "%s/%s: scratch stays within nb_norm_scratch_size", cs,
                     v->tag);
            nbt_check(nbf_canary_ok(scratch, nscratch), name);
        }
    }
    free(xb);
    free(dyb);
    free(yb);
    if (dxb != dyb) free(dxb);
    free(gb);
    free(bb);
    free(dgb);
    free(dbb);
    free(rstd);
    free(mean);
    free(scratch);
}

static void run_softmax(const char* cs, const variant* v) {
    const nbf_tensor *s = nbf_field(cs, "s", 1), *dp = nbf_field(cs, "dp", 1),
                     *p = nbf_field(cs, "p", 1), *lse = nbf_field(cs, "lse", 1),
                     *ds = nbf_field(cs, "ds", 1);
    double scaled, causald;
    int rows, cols, ld;
    nb_ctx ctx;
    nb_real *sb, *pb, *dpb, *dsb, *lseb;
    nb_result rc;

    if (!s || !dp || !p || !lse || !ds) return;
    if (!nbf_real(cs, "scale", &scaled) || !nbf_real(cs, "causal", &causald)) return;
    if (s->ndim != 2) { nbf_fail("%s.s: expected 2-D", cs); return; }
    rows = s->dims[0];
    cols = s->dims[1];
    if (!nbf_has_shape(dp, rows, cols) || !nbf_has_shape(p, rows, cols) ||
        !nbf_has_shape(ds, rows, cols))
        return;
    if (lse->n != (size_t)rows) { nbf_fail("%s.lse: expected rows values", cs); return; }
    ld = cols + v->pad;
    memset(&ctx, 0, sizeof ctx);
    ctx.num_threads = v->threads;

    sb = strided(s->data, rows, cols, ld);
    dpb = strided(dp->data, rows, cols, ld);
    pb = v->inplace ? sb : strided(NULL, rows, cols, ld);   /* documented: p may equal s */
    dsb = v->inplace ? dpb : strided(NULL, rows, cols, ld); /* documented: ds may equal dp */
    lseb = nbt_alloc(rows);

    rc = nb_softmax_forward(&ctx, pb, ld, lseb, sb, ld, rows, cols, (nb_real)scaled,
                            causald != 0);
    if (nbf_check_rc(&ctx, rc, cs, v->tag, "nb_softmax_forward")) {
        compare(cs, v, "p", pb, rows, cols, ld, p->data, 0);
        compare(cs, v, "lse", lseb, 1, rows, rows, lse->data, 0);
        rc = nb_softmax_backward(&ctx, dsb, ld, dpb, ld, pb, ld, rows, cols, (nb_real)scaled,
                                 causald != 0);
        if (nbf_check_rc(&ctx, rc, cs, v->tag, "nb_softmax_backward"))
            compare(cs, v, "ds", dsb, rows, cols, ld, ds->data, 0);
    }
    free(sb);
    free(dpb);
    if (pb != sb) free(pb);
    if (dsb != dpb) free(dsb);
    free(lseb);
}

/* ---- the loader itself: corrupt images must be rejected without crashing or leaking ------- */

static unsigned char* read_all(const char* path, size_t* size) {
    FILE* fp = fopen(path, "rb");
    unsigned char* buf;
    long n;
    if (!fp) return NULL;
    fseek(fp, 0, SEEK_END);
    n = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    buf = (unsigned char*)malloc((size_t)n + 1);
    if (!buf || fread(buf, 1, (size_t)n, fp) != (size_t)n) {
        free(buf);
        fclose(fp);
        return NULL;
    }
    fclose(fp);
    *size = (size_t)n;
    return buf;
}

static void put_u32(unsigned char* p, uint32_t v) {
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
    p[2] = (unsigned char)(v >> 16);
    p[3] = (unsigned char)(v >> 24);
}

static int rejects(const unsigned char* buf, size_t size) {
    nbf_file f;
    int rc = nbf__parse(&f, buf, size, "test image", 1);
    int ok = rc == -1 && f.count == 0 && f.t == NULL;
    if (rc == 0) nbf_free(&f);
    return ok;
}

static void test_loader(const char* dir, const char* path) {
    char missing[1024];
    nbf_file f;
    size_t size, len, off;
    unsigned char *buf, *img;
    int ok;

    snprintf(missing, sizeof missing, "%s/no-such-fixture.bin", dir);
    fprintf(stderr, "(the next message is expected)\n");
    nbt_check(nbf_load(&f, missing) == -1 && f.count == 0, "loader: missing file gives -1");
    nbf_free(&f); /* harmless on an empty file */

    buf = read_all(path, &size);
    if (!nbt_check(buf != NULL && size > 64, "loader: fixture readable into memory")) {
        free(buf);
        return;
    }
    img = (unsigned char*)malloc(size + 1);
    if (!img) abort();
    ok = nbf__parse(&f, buf, size, path, 0) == 0 && f.count == nbf_fx.count;
    nbf_free(&f);
    nbt_check(ok, "loader: in-memory parse matches nbf_load");

    /* every proper prefix is rejected (all short ones, then a sample) */
    ok = 1;
    for (len = 0; len < size; len += (len < 256 ? 1 : 61)) ok &= rejects(buf, len);
    ok &= rejects(buf, size - 1);
    nbt_check(ok, "loader: truncated files are rejected");

    memcpy(img, buf, size);
    img[3] ^= 0x20;
    nbt_check(rejects(img, size), "loader: bad magic is rejected");

    memcpy(img, buf, size);
    img[size] = 0;
    nbt_check(rejects(img, size + 1), "loader: trailing bytes are rejected");

    memcpy(img, buf, size);
    put_u32(img + 8, 0xffffffffu);
    nbt_check(rejects(img, size), "loader: absurd count is rejected");

    /* first record: name_len at 12, name, ndim, dims */
    off = 12 + 4 + (size_t)buf[12];
    memcpy(img, buf, size);
    put_u32(img + 12, 0x7fffffffu);
    nbt_check(rejects(img, size), "loader: absurd name length is rejected");
    memcpy(img, buf, size);
    put_u32(img + off, 9);
    nbt_check(rejects(img, size), "loader: ndim > 4 is rejected");
    memcpy(img, buf, size);
    put_u32(img + off + 4, 0x7fffffffu);
    nbt_check(rejects(img, size), "loader: absurd dimension is rejected");
    memcpy(img, buf, size);
    put_u32(img + off + 4, 0);
    nbt_check(rejects(img, size), "loader: zero dimension is rejected");
    memcpy(img, buf, size);
    put_u32(img + off + 4, 0x10000u);
    put_u32(img + off + 8, 0x10000u); /* product overflows 32 bits, exceeds the file */
    nbt_check(rejects(img, size), "loader: overflowing dimensions are rejected");

    free(img);
    free(buf);
}

int main(int argc, char** argv) {
    static const char* rms_cases[] = {"rms_row", "rms_seg", "rms_nogain", "rms_big"};
    static const char* ln_cases[] = {"ln_row", "ln_seg", "ln_offset", "ln_plain"};
    static const char* dyt_cases[] = {"dyt_row", "dyt_seg", "dyt_plain"};
    static const char* sm_cases[] = {"sm_full", "sm_causal", "sm_causal_rect"};
    char path[1024];
    size_t c, k;

    if (!nbf_args_ok(argc, argv)) return nbt_finish();
    snprintf(path, sizeof path, "%s/primitives.bin", argv[1]);
    if (!nbt_check(nbf_load(&nbf_fx, path) == 0, "load primitives.bin")) {
        fprintf(stderr, "test_fixtures: cannot run without %s\n", path);
        return nbt_finish();
    }
    for (k = 0; k < NBF_NCASES(variants); k++) {
        for (c = 0; c < NBF_NCASES(rms_cases); c++)
            run_norm(rms_cases[c], RMS, &variants[k]);
        for (c = 0; c < NBF_NCASES(ln_cases); c++)
            run_norm(ln_cases[c], LN, &variants[k]);
        for (c = 0; c < NBF_NCASES(dyt_cases); c++)
            run_norm(dyt_cases[c], DYT, &variants[k]);
        for (c = 0; c < NBF_NCASES(sm_cases); c++)
            run_softmax(sm_cases[c], &variants[k]);
    }
    test_loader(argv[1], path);
    nbf_free(&nbf_fx);
    return nbt_finish();
}
