/* run.c: the training loop of one run, and --compare (one run per preset, same seed and data).
   Every rank runs the same loop on its rows of each global batch; the losses, gradient norms,
   stop requests and evaluations it branches on are global, so all ranks take the same path. */
#include "train.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void history_free(history* h) {
    free(h->step_x); free(h->loss); free(h->step_gnorm); free(h->step_lr);
    free(h->eval_x); free(h->val); free(h->gnorm);
    free(h->diag_x); free(h->grad_l); free(h->hid_l); free(h->ang_l);
    memset(h, 0, sizeof *h);
}

/* Per-layer diagnostics of this step, before the update: gradient norms of the reduced
   gradients, hidden-state magnitude and angular distance as means over every rank's tokens. */
static int record_diag(model* m, history* h, const nb_real* gu, int step) {
    const int L = m->s.desc.n_layers, k = h->n_diag++;
    const double tokens = (double)m->B * m->T, all = (double)m->B_global * m->T;
    double* ang = (double*)xcalloc((size_t)(L + 1) * (L + 1), sizeof(double));
    double* hid = h->hid_l + (size_t)k * (L + 1);
    double* adj = h->ang_l + (size_t)k * L;
    int l;
    h->diag_x[k] = step + 1;
    layer_grad_norms(m, gu, h->grad_l + (size_t)k * L);
    if (nb_stack_hidden_norms(&m->s, m->cache, m->B, m->T, 0, hid) ||
        nb_stack_angular_distance(&m->s, m->cache, m->B, m->T, 0, ang)) {
        free(ang);
        return fail("diagnostics: the stack's cache does not hold this step's forward");
    }
    for (l = 0; l < L; l++) adj[l] = ang[l * (L + 1) + l + 1];
    for (l = 0; l <= L; l++) hid[l] *= tokens / all;
    for (l = 0; l < L; l++) adj[l] *= tokens / all;
    dist_sum(hid, L + 1);
    dist_sum(adj, L);
    free(ang);
    return 0;
}

int train_run(const config* c, const dataset* ds, double unigram, history* h, int compare) {
    model m;
    int start = 0, step, L, rc = 1, cap_eval, cap_diag;
    double t0, t_last, tok_last = 0, first_loss = NAN, gnorm = 0, loss_acc = 0, last_val = NAN;
    const char* ind = compare ? "  " : "";
    int loss_n = 0;
    memset(h, 0, sizeof *h);
    h->diverged_at = -1;
    h->final_loss = h->final_val = h->accuracy = NAN;
    if (model_init(&m, c)) { model_free(&m); return 1; }
    L = m.s.desc.n_layers;
    if (c->resume) {
        if (load_checkpoint(c->resume, c, ds, &m, &start)) { model_free(&m); return 1; }
        if (!c->quiet) say("resumed from %s at step %d\n", c->resume, start);
    }
    if (!c->quiet && !compare) {
        say("model: %s, L=%d d=%d H=%d H_kv=%d d_ff=%d %s %s%s, %zu parameters (stack %zu), init %s\n",
            c->schedule[0] ? c->schedule : nb_preset_name(m.s.desc.preset), L, m.d,
            m.s.desc.n_heads, m.s.desc.n_kv_heads, m.s.desc.d_ff, c->ffn, c->norm,
            c->rope ? " RoPE" : "", m.n, m.s.n_params, c->init);
        say("training: %d steps of %d x %d tokens, AdamW lr %g (warmup %d, cosine to %g), "
            "wd %g, clip %g, seed %llu, %d threads", c->steps, c->batch, c->seq, c->lr,
            c->warmup, c->lr * c->min_lr_frac, c->wd, c->clip, c->seed, nb_num_threads(&m.ctx));
        if (g_ranks > 1)
            say(" per rank; %d ranks x %d-%d rows, gradients in %d KiB buckets during backward%s",
                g_ranks, c->batch / g_ranks, (c->batch + g_ranks - 1) / g_ranks, c->bucket_kb,
                c->zero ? ", ZeRO-1 optimizer shards" : "");
        say("\n");
    }
    cap_eval = c->steps / c->log_every + 3;
    h->step_x = (double*)xcalloc((size_t)c->steps + 1, sizeof(double));
    h->loss = (double*)xcalloc((size_t)c->steps + 1, sizeof(double));
    h->step_gnorm = (double*)xcalloc((size_t)c->steps + 1, sizeof(double));
    h->step_lr = (double*)xcalloc((size_t)c->steps + 1, sizeof(double));
    h->eval_x = (double*)xcalloc((size_t)cap_eval, sizeof(double));
    h->val = (double*)xcalloc((size_t)cap_eval, sizeof(double));
    h->gnorm = (double*)xcalloc((size_t)cap_eval, sizeof(double));
    cap_diag = c->diag && !compare ? cap_eval : 0;
    h->diag_x = (double*)xcalloc((size_t)cap_diag, sizeof(double));
    h->grad_l = (double*)xcalloc((size_t)cap_diag * L, sizeof(double));
    h->hid_l = (double*)xcalloc((size_t)cap_diag * (L + 1), sizeof(double));
    h->ang_l = (double*)xcalloc((size_t)cap_diag * L, sizeof(double));
    t0 = t_last = now_s();
    for (step = start; step < c->steps && !(c->stop_after > 0 && step >= c->stop_after); step++) {
        double cnt, loss, lr, scale, ts = now_s();
        const nb_real* gu;
        int log_now;
        train_batch(ds, step, m.b0, m.B, m.T, m.tok, m.mask);
        m.step = step;
        if (model_step(&m, 1, &cnt, &loss)) {
            say("%sstopped at step %d without saving: the last checkpoint written is kept\n", ind, step + 1);
            if (g_ranks > 1) dist_abort(1); /* the other ranks wait in a collective */
            goto done;
        }
        gu = dist_grads_finish(m.dist);
        gnorm = grad_norm(&m, gu);
        lr = lr_at(c, step);
        if (step == start) first_loss = loss;
        h->step_x[h->n_steps] = step + 1;
        h->step_gnorm[h->n_steps] = gnorm;
        h->step_lr[h->n_steps] = lr;
        h->loss[h->n_steps++] = loss;
        if (!isfinite(loss) || !isfinite(gnorm) || (step - start > 10 && loss > 1.5 * first_loss + 1)) {
            h->diverged_at = step + 1;
            say("%sdiverged at step %d (loss %g, gradient norm %g)\n", ind, step + 1, loss, gnorm);
            break;
        }
        log_now = (step + 1) % c->log_every == 0 || step + 1 == c->steps || m.stop ||
                  step + 1 == c->stop_after;
        if (log_now && cap_diag && h->n_diag < cap_diag) {
            /* before the update and the validation forward: this step's gradients (unclipped)
               and the hidden states of its forward, still in the cache */
            if (record_diag(&m, h, gu, step)) {
                if (g_ranks > 1) dist_abort(1);
                goto done;
            }
        }
        scale = c->clip > 0 && gnorm > c->clip ? c->clip / gnorm : 1;
        adamw(&m, c, gu, lr, scale);
        h->train_seconds += now_s() - ts;
        h->comm_seconds += dist_wait_seconds(m.dist) + m.t_comm;
        m.t_comm = 0;
        h->tokens += (double)m.B_global * m.T;
        loss_acc += loss;
        loss_n++;
        tok_last += (double)m.B_global * m.T;
        if (log_now) {
            const double t = now_s(), val = evaluate(&m, ds, c->eval_batches);
            const double tps = tok_last / (t - t_last > 1e-9 ? t - t_last : 1e-9);
            const double eta = (t - t0) / (step + 1 - start) * (c->steps - step - 1);
            char eb[32];
            last_val = val;
            h->eval_x[h->n_eval] = step + 1;
            h->val[h->n_eval] = val;
            h->gnorm[h->n_eval++] = gnorm;
            fmt_time(eta, eb, sizeof eb);
            if (!c->quiet)
                say("%sstep %5d/%d | loss %.4f | val %.4f | grad norm %.3f | lr %.2e | %.1fk tok/s | ETA %s\n",
                    ind, step + 1, c->steps, loss_acc / loss_n, val, gnorm, lr, tps / 1000, eb);
            fflush(stdout);
            loss_acc = 0; loss_n = 0; tok_last = 0;
            t_last = now_s();
        }
        if (m.stop) { h->interrupted = 1; step++; break; }
        if (step + 1 == c->stop_after) { step++; break; }
        if (c->save_every > 0 && (step + 1) % c->save_every == 0 && c->save && !compare) {
            if (save_checkpoint(c->save, c, ds, &m, step + 1)) goto done;
        }
    }
    h->steps_done = step;
    h->final_loss = h->n_steps ? h->loss[h->n_steps - 1] : NAN;
    h->final_val = h->diverged_at >= 0 ? NAN : isfinite(last_val) && h->n_eval ? last_val
                                                                              : evaluate(&m, ds, c->eval_batches);
    if (!compare && !c->quiet)
        say("done: %d steps in %.1f s\n", step - start, now_s() - t0);
    if (!compare) { /* save first: under mpirun, Ctrl-C leaves about a second before SIGKILL */
        const char* path = c->save;
        if (h->interrupted && !path) path = "train.safetensors";
        if (h->interrupted) say("interrupted at step %d\n", step);
        if (path && h->diverged_at < 0) {
            if (save_checkpoint(path, c, ds, &m, step)) goto done;
            say("checkpoint: %s (step %d)\n", path, step);
        }
    }
    if (!ds->text && h->diverged_at < 0 && !h->interrupted)
        h->accuracy = answer_accuracy(&m, ds, compare ? 128 : 256);
    if (!compare) {
        if (c->csv && g_rank == 0 && write_steps_csv(c->csv, h)) goto done;
        if (c->diag && g_rank == 0) {
            if (write_diag(c, &m, h, unigram)) goto done;
            say("diagnostics: %s/{loss,layers}.svg and CSVs\n", c->diag);
        }
    }
    rc = 0;
done:
    model_free(&m);
    return dist_agree(rc);
}

int run_compare(const config* base, const dataset* ds, double unigram) {
    char buf[512], *tok, *save = NULL, names[MAX_COMPARE][64];
    const char* name_p[MAX_COMPARE];
    history hs[MAX_COMPARE];
    int n = 0, i, rc = 0;
    const char* dir = base->diag ? base->diag : base->out ? base->out : ".";
    if (base->resume) return fail("--compare and --resume do not go together");
    if (base->schedule[0]) return fail("--compare takes presets; drop --schedule");
    if (strlen(base->compare) >= sizeof buf) return fail("--compare: list too long");
    snprintf(buf, sizeof buf, "%s", base->compare);
    for (tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        nb_stack_desc d;
        nb_ctx ctx;
        memset(&d, 0, sizeof d);
        memset(&ctx, 0, sizeof ctx);
        if (n >= MAX_COMPARE) return fail("--compare: at most %d presets", MAX_COMPARE);
        if (strlen(tok) >= sizeof names[0]) return fail("--compare: name too long");
        if (nb_preset_from_name(&ctx, &d, tok) != NB_OK) return fail("--compare: %s", ctx.err);
        snprintf(names[n], sizeof names[0], "%s", tok);
        name_p[n] = names[n];
        n++;
    }
    (void)save;
    if (n == 0) return fail("--compare: empty list");
    memset(hs, 0, sizeof hs);
    for (i = 0; i < n; i++) {
        config c = *base;
        double t = now_s();
        memcpy(c.preset, names[i], sizeof c.preset);
        c.diag = NULL;
        c.csv = NULL;
        say("[%d/%d] %s\n", i + 1, n, names[i]);
        fflush(stdout);
        if (train_run(&c, ds, unigram, &hs[i], 1)) { rc = 1; n = i; break; }
        say("  %.1f s\n", now_s() - t);
        if (hs[i].interrupted) { n = i + 1; break; }
    }
    say("\n%-14s %11s %11s %9s %s\n", "preset", "final loss", "val loss",
        ds->text ? "" : "accuracy", "diverged");
    for (i = 0; i < n; i++) {
        char acc[16] = "", dv[32] = "no";
        if (!ds->text && isfinite(hs[i].accuracy)) snprintf(acc, sizeof acc, "%.1f%%", 100 * hs[i].accuracy);
        if (hs[i].diverged_at >= 0) snprintf(dv, sizeof dv, "yes (step %d)", hs[i].diverged_at);
        if (hs[i].interrupted) snprintf(dv, sizeof dv, "interrupted");
        say("%-14s %11.4f %11.4f %9s %s\n", names[i], hs[i].final_loss, hs[i].final_val, acc, dv);
    }
    say("unigram baseline %.4f nats\n", unigram);
    if (n > 0 && g_rank == 0 && write_compare(dir, name_p, hs, n, unigram, base->steps, ds->text)) rc = 1;
    for (i = 0; i < MAX_COMPARE; i++) history_free(&hs[i]);
    return dist_agree(rc);
}
