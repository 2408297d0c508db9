/* dump.c: --load CK --dump FILE. Every named intermediate of one batch's forward and backward
   (the library's trace hook, nb_ctx.trace: names such as "blocks.3.attn.qkv_normed", in the
   order computed) into one safetensors file, F32, in that order, so that nbdiff names the first
   tensor where a port (e.g. examples/pytorch/compare.py --dump) departs from this reference.
   The batch is the first validation batch (the one --eval starts with), backward of its loss
   included; nothing is trained. */
#include "train.h"
#include "../safetensors.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct traced { char name[64]; int rows, cols; float* x; } traced;
typedef struct trace_list { traced* t; int n, cap, oom; } trace_list;

static void collect(void* user, const char* name, const nb_real* x, int rows, int cols) {
    trace_list* l = (trace_list*)user;
    const size_t n = (size_t)rows * (size_t)cols;
    size_t i;
    traced* t;
    if (l->oom) return;
    if (l->n == l->cap) {
        traced* grown = (traced*)realloc(l->t, (size_t)(l->cap ? 2 * l->cap : 64) * sizeof *grown);
        if (!grown) { l->oom = 1; return; }
        l->t = grown;
        l->cap = l->cap ? 2 * l->cap : 64;
    }
    t = &l->t[l->n];
    if (!(t->x = (float*)malloc(n * sizeof(float)))) { l->oom = 1; return; }
    snprintf(t->name, sizeof t->name, "%s", name);
    t->rows = rows;
    t->cols = cols;
    for (i = 0; i < n; i++) t->x[i] = (float)x[i];
    l->n++;
}

static int write_dump(const char* path, const trace_list* l, const config* c) {
    cJSON *root = cJSON_CreateObject(), *meta = cJSON_CreateObject();
    char err[512];
    size_t off = 0;
    FILE* f;
    int i, rc = 1;
    cJSON_AddItemToObject(root, "__metadata__", meta);
    cJSON_AddStringToObject(meta, "producer", "normblocks " NB_VERSION_STRING " examples/train --dump");
    cJSON_AddStringToObject(meta, "checkpoint", c->sample.load);
    for (i = 0; i < l->n; i++) ck_put_entry(root, l->t[i].name, l->t[i].rows, l->t[i].cols, &off);
    if (io_output(path, "--dump")) {
        cJSON_Delete(root);
        return 1;
    }
    if (!(f = st_create(path, err, sizeof err))) {
        cJSON_Delete(root);
        return fail("dump: %s", err);
    }
    if (st_put_header(f, root)) {
        fail("dump: cannot build the JSON header");
        st_discard(f);
    } else {
        for (i = 0; i < l->n; i++) fwrite(l->t[i].x, 4, (size_t)l->t[i].rows * l->t[i].cols, f);
        rc = st_commit(f, err, sizeof err) ? fail("dump: %s", err) : 0;
    }
    cJSON_Delete(root);
    return rc;
}

int dump_batch(model* m, const dataset* ds, const config* c) {
    trace_list l;
    double count, loss;
    int i, rc;
    memset(&l, 0, sizeof l);
    val_batch(ds, 0, c->loop.eval_batches, m->B_global, m->b0, m->B, m->T, m->tok, m->mask);
    m->ctx.trace = collect;
    m->ctx.trace_user = &l;
    rc = model_step(m, 1, &count, &loss);
    m->ctx.trace = NULL;
    if (!rc && l.oom) rc = fail("dump: out of memory");
    if (!rc) rc = write_dump(c->sample.dump, &l, c);
    if (!rc)
        say("dump: %d tensors of one validation batch (loss %.9g) to %s\n", l.n, loss, c->sample.dump);
    for (i = 0; i < l.n; i++) free(l.t[i].x);
    free(l.t);
    return rc;
}
