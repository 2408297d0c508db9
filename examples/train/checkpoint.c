/* checkpoint.c: one safetensors file per run, whatever the rank count: parameters under their
   PyTorch-style names, Adam moments as optimizer.m.<name> / optimizer.v.<name>, and in
   __metadata__ the step, the optimizer step and the run's configuration (model, optimizer,
   schedule, data identity, seed). Rank 0 writes and reads the file; with ZeRO-1 the moment
   shards are gathered to it before a save and scattered after a load, so a run saved on N ranks
   resumes on M. The loader checks the whole layout and names what is wrong. */
#define _POSIX_C_SOURCE 200809L
#define _XOPEN_SOURCE 700 /* realpath, fsync: safetensors.h's writers */
#include "train.h"

#define ST_IMPLEMENTATION
#include "../safetensors.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Keys a checkpoint must match. arch: the model itself (a mismatch cannot load); run: how it
   is trained (a change is refused unless --allow-change names the key; --load, which does not
   train, ignores them). legacy: the value of a key added later, in checkpoints without it. */
typedef struct meta_key { const char* key; int arch; const char* legacy; } meta_key;
static const meta_key k_keys[] = {
    {"preset", 1, NULL}, {"schedule", 1, NULL}, {"n_layers", 1, NULL}, {"d_model", 1, NULL},
    {"n_heads", 1, NULL}, {"n_kv_heads", 1, NULL}, {"d_ff", 1, NULL}, {"ffn", 1, NULL},
    {"norm", 1, NULL}, {"rope", 1, NULL}, {"vocab_size", 1, NULL}, {"embed_scale", 1, "0"},
    {"attn_bias", 1, "0"},
    {"steps", 0, NULL}, {"lr", 0, NULL}, {"warmup", 0, NULL}, {"min_lr", 0, NULL},
    {"wd", 0, NULL}, {"wd_norms", 0, "0"}, {"beta1", 0, NULL}, {"beta2", 0, NULL},
    {"adam_eps", 0, NULL}, {"clip", 0, NULL}, {"seed", 0, NULL}, {"batch", 0, NULL},
    {"seq", 0, NULL}, {"init", 0, NULL}, {"data", 0, NULL}, {"data_bytes", 0, NULL},
    {"data_hash", 0, NULL}, {"qk_clip", 0, "0"}};

static void config_meta(const config* c, const dataset* ds, const model* m, cJSON* meta) {
    char buf[64];
#define PUTS(k, v) cJSON_AddStringToObject(meta, k, v)
#define PUTI(k, v) (snprintf(buf, sizeof buf, "%lld", (long long)(v)), PUTS(k, buf))
#define PUTD(k, v) (snprintf(buf, sizeof buf, "%.17g", (double)(v)), PUTS(k, buf))
    PUTS("preset", c->model.schedule[0] ? "custom" : c->model.preset);
    PUTS("schedule", c->model.schedule);
    PUTI("n_layers", m->s.desc.n_layers);
    PUTI("d_model", m->s.desc.d_model);
    PUTI("n_heads", m->s.desc.n_heads);
    PUTI("n_kv_heads", m->s.desc.n_kv_heads);
    PUTI("d_ff", m->s.desc.ffn.d_ff);
    PUTS("ffn", c->model.ffn.kind);
    /* the stack's norm kind, resolved: "rms" means RMSNorm to a reader (nbimport, the twin),
       not the preset's kind as on the command line */
    PUTS("norm", norm_kind_name(m->s.desc.norm.type));
    PUTI("rope", c->model.attn.rope);
    PUTI("embed_scale", m->embed_mode); /* 0 off, 1 learnable (as before 2 existed), 2 sqrt(d) */
    PUTI("attn_bias", m->s.desc.attn.bias);
    PUTI("vocab_size", VOCAB);
    PUTI("steps", c->loop.steps);
    PUTD("lr", c->optim.lr);
    PUTI("warmup", c->optim.warmup);
    PUTD("min_lr", c->optim.min_lr_frac);
    PUTD("wd", c->optim.wd);
    PUTI("wd_norms", c->optim.wd_norms);
    PUTD("beta1", c->optim.beta1);
    PUTD("beta2", c->optim.beta2);
    PUTD("adam_eps", c->optim.adam_eps);
    PUTD("clip", c->optim.clip);
    if (c->optim.qk_clip > 0) PUTD("qk_clip", c->optim.qk_clip); /* tau; absent: off (its legacy "0") */
    snprintf(buf, sizeof buf, "%llu", c->loop.seed);
    PUTS("seed", buf);
    PUTI("batch", c->loop.batch);
    PUTI("seq", c->loop.seq);
    PUTI("eval_batches", c->loop.eval_batches);   /* not checked: what --load evaluates with */
    PUTI("eval_problems", c->loop.eval_problems);
    PUTS("precision", m->s.desc.gemm.precision == NB_PRECISION_BF16 ? "bf16" : "fp32"); /* resolved */
    if (m->init_std0 > 0) {
        snprintf(buf, sizeof buf, "%s:%g", init_scheme_name(m->init), m->init_std0);
        PUTS("init", buf);
    } else PUTS("init", init_scheme_name(m->init));
    if (ds->text) PUTS("data", "file");
    else {
        /* plain and reversed keep the names older checkpoints have */
        snprintf(buf, sizeof buf, "addition:%d%s%s", c->data.digits, c->data.format == FMT_PLAIN ? "" : ":",
                 c->data.format == FMT_PLAIN ? "" : c->data.format == FMT_REVERSED ? "reverse" : format_name(c->data.format));
        PUTS("data", buf);
    }
    PUTI("data_bytes", ds->text ? (long long)ds->n : 0);
    snprintf(buf, sizeof buf, "%016llx", ds->hash);
    PUTS("data_hash", buf);
    config_model_meta(c, meta); /* the stack fields set away from the preset (cli.c's table) */
#undef PUTS
#undef PUTI
#undef PUTD
}

void ck_put_entry(cJSON* root, const char* name, int rows, int cols, size_t* off) {
    const int shape[2] = {rows, cols};
    st_put_f32(root, name, cols ? 2 : 1, shape, off);
}

static const char* pass_prefix(int pass) {
    return pass == 0 ? "" : pass == 1 ? "optimizer.m." : "optimizer.v.";
}

/* rank 0: the file from the full buffers p, mom1, mom2 */
static int write_file(const char* path, const config* c, const dataset* ds, const model* m,
                      int step, const nb_real* const base[3]) {
    const int nt = model_tensors(m, NULL);
    ck_tensor* tab = (ck_tensor*)xcalloc((size_t)nt, sizeof(ck_tensor));
    cJSON *root = cJSON_CreateObject(), *meta = cJSON_CreateObject();
    char buf[160], err[600];
    size_t off = 0;
    FILE* f = NULL;
    int pass, t, rc = 1;
    model_tensors(m, tab);
    cJSON_AddItemToObject(root, "__metadata__", meta);
    cJSON_AddStringToObject(meta, "format", "pt");
    cJSON_AddStringToObject(meta, "producer", "normblocks " NB_VERSION_STRING " examples/train");
    snprintf(buf, sizeof buf, "%d", step);
    cJSON_AddStringToObject(meta, "step", buf);
    snprintf(buf, sizeof buf, "%lld", m->adam_t);
    cJSON_AddStringToObject(meta, "adam_step", buf);
    config_meta(c, ds, m, meta);
    for (pass = 0; pass < 3; pass++)
        for (t = 0; t < nt; t++) {
            snprintf(buf, sizeof buf, "%s%s", pass_prefix(pass), tab[t].name);
            ck_put_entry(root, buf, tab[t].rows, tab[t].cols, &off);
        }
    /* checked again here (the run may be long); the previous checkpoint stays until the new
       one is complete (st_commit) */
    if (io_output(path, "--save")) goto done;
    if (!(f = st_create(path, err, sizeof err))) {
        fail("checkpoint not saved: %s", err);
        goto done;
    }
    if (st_put_header(f, root)) {
        fail("checkpoint: cannot build the JSON header");
        goto done;
    }
    for (pass = 0; pass < 3; pass++)
        for (t = 0; t < nt; t++) fwrite(base[pass] + tab[t].off, 4, tensor_count(&tab[t]), f);
    rc = st_commit(f, err, sizeof err) ? fail("checkpoint not saved: %s", err) : 0;
    f = NULL;
done:
    if (f) st_discard(f);
    cJSON_Delete(root);
    free(tab);
    return rc;
}

int save_checkpoint(const char* path, const config* c, const dataset* ds, model* m, int step) {
    const int sharded = m->n_upd < m->n;
    nb_real *m1 = m->m, *m2 = m->v;
    int rc = 0;
    if (sharded) { /* collective: every rank sends its moment shards to rank 0 */
        m1 = g_rank == 0 ? (nb_real*)xcalloc(m->n, sizeof(nb_real)) : NULL;
        m2 = g_rank == 0 ? (nb_real*)xcalloc(m->n, sizeof(nb_real)) : NULL;
        dist_gather_shards(m->dist, m1, m->m);
        dist_gather_shards(m->dist, m2, m->v);
    }
    if (g_rank == 0) {
        const nb_real* base[3];
        base[0] = m->p; base[1] = m1; base[2] = m2;
        rc = write_file(path, c, ds, m, step, base);
    }
    if (sharded) { free(m1); free(m2); }
    return dist_agree(rc);
}

static const char* meta_str(const cJSON* meta, const char* key) {
    const cJSON* v = cJSON_GetObjectItemCaseSensitive(meta, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* strict decimal integer in [lo, hi] */
static int meta_int(const cJSON* meta, const char* key, long long lo, long long hi, long long* out) {
    const char* s = meta_str(meta, key);
    char* end;
    long long v;
    if (!s) return 1;
    errno = 0;
    v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return 1;
    *out = v;
    return 0;
}

static int listed(const char* list, const char* key) {
    const size_t k = strlen(key);
    const char* p = list;
    while (p && *p) {
        const char* e = strchr(p, ',');
        const size_t n = e ? (size_t)(e - p) : strlen(p);
        if ((n == k && !strncmp(p, key, k)) || (n == 3 && !strncmp(p, "all", 3))) return 1;
        p = e ? e + 1 : NULL;
    }
    return 0;
}

/* Every metadata key is one train writes: a key it does not know (a newer train's setting,
   or another program's) would be silently dropped, so it is refused by name. */
static int check_meta_keys(const st_file* f) {
    /* and the run settings free to change on resume or --load (not compared): the precision the
       GEMMs ran in (a checkpoint is float32 either way; --load evaluates in it by default) */
    static const char* const more[] = {"format", "producer", "step", "adam_step", "eval_batches", "eval_problems",
                                       "precision"};
    const cJSON* e;
    size_t i;
    cJSON_ArrayForEach(e, f->meta) {
        int known = 0;
        for (i = 0; i < sizeof k_keys / sizeof k_keys[0]; i++) known |= !strcmp(e->string, k_keys[i].key);
        for (i = 0; i < sizeof more / sizeof more[0]; i++) known |= !strcmp(e->string, more[i]);
        known |= config_model_key(e->string);
        if (!known)
            return fail("checkpoint %s: metadata \"%s\" is not a key this train writes (a newer train's, or "
                        "another program's): refused rather than ignored", f->path, e->string);
    }
    return 0;
}

/* A checkpoint the reader validated (layout, unique keys, metadata strings): the
   configuration against this run, then the model's tensors by name, F32 with their shapes,
   finite, second moments >= 0. */
static int checkpoint_check(const st_file* f, const config* c, const dataset* ds, const model* m,
                            nb_real* const base[3], int* step, long long* adam_t) {
    const char* path = f->path;
    cJSON* want = cJSON_CreateObject();
    ck_tensor* tab = NULL;
    int nt, pass, t, i, rc = 1;
    long long v;
    if (!f->meta) { fail("checkpoint %s: no __metadata__ (not written by train?)", path); goto done; }
    if (check_meta_keys(f)) goto done;

    /* the configuration: the model must match; run settings only with --allow-change */
    config_meta(c, ds, m, want);
    for (i = 0; i < (int)(sizeof k_keys / sizeof k_keys[0]); i++) {
        const char* key = k_keys[i].key;
        const char *have = st_meta(f, key), *need = meta_str(want, key);
        if (!have) have = k_keys[i].legacy;
        if (!need) need = k_keys[i].legacy; /* a key written only when set (qk_clip) */
        if (!k_keys[i].arch && c->sample.load) continue;
        if (!have) {
            if (!k_keys[i].arch && listed(c->files.allow_change, key)) continue;
            fail("checkpoint %s: metadata has no \"%s\" (written by an older train? --allow-change %s)",
                 path, key, k_keys[i].arch ? "is not possible for model keys" : key);
            goto done;
        }
        if (!strcmp(have, need)) continue;
        if (k_keys[i].arch) {
            fail("checkpoint %s is from a different config: %s is \"%s\" in the checkpoint, "
                 "\"%s\" here (%s)", path, key, have, need,
                 st_meta(f, key) ? "pass the same model flags"
                                 : "the checkpoint predates the key: an older train wrote it");
            goto done;
        }
        if (!listed(c->files.allow_change, key)) {
            fail("checkpoint %s was trained with %s = %s; this run has %s. Resuming would change "
                 "the run (e.g. jump the learning-rate schedule): pass the same flags, or "
                 "--allow-change %s if the change is intended", path, key, have, need, key);
            goto done;
        }
        say("note: %s changes from %s (checkpoint) to %s\n", key, have, need);
    }
    {   /* the stack fields of cli.c's table: absent means the preset's, on both sides */
        const cJSON* e;
        for (i = 0; i < 2; i++) {
            const cJSON* const side = i ? want : f->meta;
            cJSON_ArrayForEach(e, side) {
                const char *have = st_meta(f, e->string), *need = meta_str(want, e->string);
                if (!config_model_key(e->string) || (i && have)) continue; /* each key once */
                if (!have || !need || strcmp(have, need)) {
                    fail("checkpoint %s is from a different config: %s is %s%s%s in the checkpoint, %s%s%s here "
                         "(pass the same model flags)", path, e->string, have ? "\"" : "", have ? have : "the preset's",
                         have ? "\"" : "", need ? "\"" : "", need ? need : "the preset's", need ? "\"" : "");
                    goto done;
                }
            }
        }
    }
    if (meta_int(f->meta, "step", 0, 100000000, &v)) { fail("checkpoint %s: step is missing or not an integer in [0, 1e8]", path); goto done; }
    *step = (int)v;
    if (meta_int(f->meta, "adam_step", 0, v, adam_t)) {
        fail("checkpoint %s: adam_step is missing or not an integer in [0, step %d]", path, *step); goto done;
    }

    /* the model's tensors, by name, with their shapes; finite values */
    nt = model_tensors(m, NULL);
    for (i = 0; i < f->n; i++)
        if (f->t[i].dtype != ST_F32) {
            fail("checkpoint %s: tensor %s is %s, not F32", path, f->t[i].name, st_dtype_name(f->t[i].dtype));
            goto done;
        }
    if (f->n != 3 * nt) {
        fail("checkpoint %s has %d tensors, this model %d (parameters and two Adam moments)", path, f->n, 3 * nt);
        goto done;
    }
    tab = (ck_tensor*)xcalloc((size_t)nt, sizeof(ck_tensor));
    model_tensors(m, tab);
    for (pass = 0; pass < 3; pass++) {
        for (t = 0; t < nt; t++) {
            char name[160];
            const st_tensor* e;
            const size_t cnt = tensor_count(&tab[t]);
            const int dims = tab[t].cols ? 2 : 1;
            nb_real* dst = base[pass] + tab[t].off;
            size_t j;
            snprintf(name, sizeof name, "%s%s", pass_prefix(pass), tab[t].name);
            if (!(e = st_find(f, name))) { fail("checkpoint %s: tensor %s is missing", path, name); goto done; }
            if (e->ndim != dims || e->shape[0] != (size_t)tab[t].rows || (dims == 2 && e->shape[1] != (size_t)tab[t].cols)) {
                if (dims == 2) fail("checkpoint %s: tensor %s is not of shape [%d,%d]", path, name, tab[t].rows, tab[t].cols);
                else fail("checkpoint %s: tensor %s is not of shape [%d]", path, name, tab[t].rows);
                goto done;
            }
            memcpy(dst, f->data + e->begin, cnt * 4);
            for (j = 0; j < cnt; j++)
                if (!isfinite(dst[j]) || (pass == 2 && dst[j] < 0)) {
                    fail("checkpoint %s: tensor %s holds %s at index %zu: a bad checkpoint, not "
                         "one to resume", path, name, pass == 2 && isfinite(dst[j]) ? "a negative second moment" : "a non-finite value", j);
                    goto done;
                }
        }
    }
    rc = 0;
done:
    free(tab);
    cJSON_Delete(want);
    return rc;
}

int checkpoint_parse(const char* path, const unsigned char* buf, size_t size, const config* c,
                     const dataset* ds, const model* m, nb_real* const base[3], int* step,
                     long long* adam_t) {
    st_file f;
    const int rc = st_parse(&f, path, buf, size) ? fail("checkpoint: %s", f.err)
                                                 : checkpoint_check(&f, c, ds, m, base, step, adam_t);
    st_close(&f);
    return rc;
}

/* rank 0: read the file and check it into the full buffers base[3], *step and *adam_t */
static int read_file(const char* path, const config* c, const dataset* ds, const model* m,
                     nb_real* const base[3], int* step, long long* adam_t) {
    st_file f;
    const int rc = st_open(&f, path) ? fail("checkpoint: %s", f.err)
                                     : checkpoint_check(&f, c, ds, m, base, step, adam_t);
    st_close(&f);
    return rc;
}

int load_checkpoint(const char* path, const config* c, const dataset* ds, model* m, int* step) {
    const int sharded = m->n_upd < m->n;
    nb_real* base[3];
    long long st[2] = {0, 0};
    int rc = 0, s = 0;
    base[0] = m->p;
    base[1] = sharded && g_rank == 0 ? (nb_real*)xcalloc(m->n, sizeof(nb_real)) : m->m;
    base[2] = sharded && g_rank == 0 ? (nb_real*)xcalloc(m->n, sizeof(nb_real)) : m->v;
    if (g_rank == 0) {
        rc = read_file(path, c, ds, m, base, &s, &st[1]);
        st[0] = s;
    }
    if (!dist_agree(rc)) {
        dist_bcast(st, sizeof st);
        dist_bcast(m->p, m->n * sizeof(nb_real));
        dist_scatter_shards(m->dist, m->m, base[1]);
        dist_scatter_shards(m->dist, m->v, base[2]);
        *step = (int)st[0];
        m->adam_t = st[1];
    } else rc = 1;
    if (sharded && g_rank == 0) { free(base[1]); free(base[2]); }
    m->w16_ok = 0; /* the parameters changed (or may have, on a failed load) */
    return rc;
}

/* string metadata value into an int field, or an error naming the key */
static int meta_to_int(const cJSON* meta, const char* path, const char* key, long long lo,
                       long long hi, int* out) {
    long long v;
    if (meta_int(meta, key, lo, hi, &v))
        return fail("checkpoint %s: metadata \"%s\" is missing or out of range", path, key);
    *out = (int)v;
    return 0;
}

static int meta_to_str(const cJSON* meta, const char* path, const char* key, char* out, size_t n) {
    const char* v = meta_str(meta, key);
    if (!v || strlen(v) >= n) return fail("checkpoint %s: metadata \"%s\" is missing or too long", path, key);
    snprintf(out, n, "%s", v);
    return 0;
}

/* "addition:D", "addition:D:reverse", "addition:D:FORMAT" or "file" */
static int meta_data(const cJSON* meta, const char* path, config* c) {
    const char* v = meta_str(meta, "data");
    char fmt[32] = "";
    int digits = 0, n = 0;
    if (v && !strcmp(v, "file")) { c->sample.load_text = 1; return 0; }
    if (!v || strncmp(v, "addition:", 9) || v[9] < '1' || v[9] > '9' ||
        sscanf(v, "addition:%d%n", &digits, &n) != 1 || digits < 1 || digits > 9 ||
        (v[n] && (v[n] != ':' || strlen(v + n + 1) >= sizeof fmt)))
        return fail("checkpoint %s: metadata \"data\" is missing or not one train writes", path);
    c->data.digits = digits;
    c->data.format = FMT_PLAIN;
    if (!v[n]) return 0;
    snprintf(fmt, sizeof fmt, "%s", v + n + 1);
    if (!strcmp(fmt, "reverse")) { c->data.format = FMT_REVERSED; return 0; }
    return format_from_name(fmt, &c->data.format);
}

static int apply_meta(const cJSON* meta, const char* path, config* c) {
    long long seed;
    int rope = 1;
    if (meta_to_str(meta, path, "preset", c->model.preset, sizeof c->model.preset) ||
        meta_to_str(meta, path, "schedule", c->model.schedule, sizeof c->model.schedule) ||
        meta_to_int(meta, path, "n_layers", 1, MAX_LAYERS, &c->model.n_layers) ||
        meta_to_int(meta, path, "d_model", 1, 1 << 16, &c->model.d_model) ||
        meta_to_int(meta, path, "n_heads", 1, 1 << 12, &c->model.n_heads) ||
        meta_to_int(meta, path, "n_kv_heads", 0, 1 << 12, &c->model.n_kv_heads) ||
        meta_to_int(meta, path, "d_ff", 0, 1 << 18, &c->model.ffn.d_ff) ||
        meta_to_str(meta, path, "ffn", c->model.ffn.kind, sizeof c->model.ffn.kind) ||
        meta_to_str(meta, path, "norm", c->model.norm.kind, sizeof c->model.norm.kind) ||
        meta_to_int(meta, path, "rope", 0, 1, &rope) ||
        meta_to_int(meta, path, "batch", 1, 1 << 16, &c->loop.batch) ||
        meta_to_int(meta, path, "seq", 2, 1 << 16, &c->loop.seq) || meta_data(meta, path, c))
        return 1;
    /* the strings train understands; anything else would run as the default */
    if (strcmp(c->model.norm.kind, "rms") && strcmp(c->model.norm.kind, "layer") && strcmp(c->model.norm.kind, "dyt") && strcmp(c->model.norm.kind, "derf") &&
        strcmp(c->model.norm.kind, "l2"))
        return fail("checkpoint %s: metadata \"norm\" is \"%s\", not rms, layer, dyt, derf or l2", path, c->model.norm.kind);
    if (strcmp(c->model.ffn.kind, "swiglu") && strcmp(c->model.ffn.kind, "gelu"))
        return fail("checkpoint %s: metadata \"ffn\" is \"%s\", not swiglu or gelu", path, c->model.ffn.kind);
    c->model.attn.rope = rope;
    if (config_model_from_meta(c, meta, path)) return 1;
    if (meta_str(meta, "attn_bias") && meta_to_int(meta, path, "attn_bias", 0, 3, &c->model.attn.bias)) return 1;
    c->model.norm.embed_scale = EMBED_OFF; /* checkpoints before the key have none */
    if (meta_str(meta, "embed_scale") &&
        meta_to_int(meta, path, "embed_scale", EMBED_OFF, EMBED_SQRT_D, &c->model.norm.embed_scale))
        return 1;
    if (meta_int(meta, "seed", 0, 9007199254740992LL, &seed))
        return fail("checkpoint %s: metadata \"seed\" is missing or out of range", path);
    c->loop.seed = (unsigned long long)seed;
    /* written since --load exists; older checkpoints keep the defaults */
    if (meta_str(meta, "eval_batches") && meta_to_int(meta, path, "eval_batches", 1, 100000, &c->loop.eval_batches)) return 1;
    if (meta_str(meta, "eval_problems") && meta_to_int(meta, path, "eval_problems", 1, 1000000, &c->loop.eval_problems)) return 1;
    c->sample.load_bf16 = -1; /* --load runs the GEMMs as trained unless --precision says otherwise */
    if (meta_str(meta, "precision")) {
        const char* v = meta_str(meta, "precision");
        if (strcmp(v, "bf16") && strcmp(v, "fp32"))
            return fail("checkpoint %s: metadata \"precision\" is \"%s\", not bf16 or fp32", path, v);
        c->machine.bf16 = c->sample.load_bf16 = !strcmp(v, "bf16");
    }
    if (!strcmp(c->model.preset, "custom")) snprintf(c->model.preset, sizeof c->model.preset, "pre");
    else c->model.schedule[0] = 0;
    return 0;
}

int load_config(const char* path, config* c) {
    char* json = NULL;
    unsigned long long len = 0;
    cJSON* meta;
    int rc = 0;
    if (g_rank == 0) { /* the file checked whole, as the loader will; its metadata to every rank */
        st_file f;
        if (st_open(&f, path)) rc = fail("checkpoint: %s", f.err);
        else if (!f.meta) rc = fail("checkpoint %s: no __metadata__ (not written by train?)", path);
        else if (!check_meta_keys(&f)) json = cJSON_PrintUnformatted(f.meta);
        else rc = 1;
        if (!rc && !json) rc = fail("checkpoint %s: out of memory", path);
        if (json) len = strlen(json) + 1;
        st_close(&f);
    }
    if (dist_agree(rc)) { free(json); return 1; }
    dist_bcast(&len, sizeof len);
    if (g_rank != 0) json = (char*)xcalloc((size_t)len, 1);
    dist_bcast(json, (size_t)len);
    meta = cJSON_Parse(json);
    rc = apply_meta(meta, path, c);
    cJSON_Delete(meta);
    free(json);
    return dist_agree(rc);
}
