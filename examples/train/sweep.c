/* sweep.c: many runs of one command line, --compare PRESETS x --lrs x --seeds, and what a
   researcher reads from them: per (preset, lr) the mean and spread of the final validation
   loss over seeds, collapsed and diverged runs marked, and per preset the largest learning rate
   at which every seed trained stably (the protocol of the SiameseNorm paper's Table 1). CSVs of
   every run and step, and SVG plots.

   How runs are executed. `train` starts each run as its own process (this executable with the
   run's flags, --threads 1 unless given), --jobs at a time (default: one per core). Why: at the
   sizes this trainer is for, a second thread speeds a step up by 1.1-1.5x while a second run
   on the other core doubles the work done; a run alone in its process is bitwise the same as
   `train --threads 1` with its flags, whatever runs beside it or in which order (the threads
   of one run use static schedules, nothing is shared between processes); and one run that
   fails cannot take the others down. Each run's log, per-step CSV and summary (JSON) stay in
   OUT/runs/. `train_mpi` runs them one after another in the job instead, each over all ranks
   (a child of an MPI process cannot start MPI itself). */
#define _POSIX_C_SOURCE 200809L
#include "train.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

enum { RUN_PENDING, RUN_RUNNING, RUN_OK, RUN_COLLAPSED, RUN_DIVERGED, RUN_FAILED, RUN_INTERRUPTED };
static const char* const k_state[] = {"pending", "running", "ok", "collapsed", "diverged",
                                      "failed", "interrupted"};

typedef struct sweep_run {
    int preset, lr, seed;       /* indices into the sweep's lists */
    char name[192];             /* file stem under OUT/runs/ */
    history h;
    double unigram;             /* the run's own baseline (its data sample) */
    int state;
    pid_t pid;
    int signal;                 /* the signal that ended its process, or 0 */
    int reused;                 /* finished by an earlier sweep of the same command: not run again */
    double t_spawn;             /* when its process started (the time of a run that left no summary) */
} sweep_run;

typedef struct sweep {
    const config* base;
    char presets[MAX_COMPARE][64];   /* as given (flags of the runs) */
    char labels[MAX_COMPARE][64];    /* as shown ("custom" for a --schedule) */
    int n_presets, n_lrs, n_seeds, n_runs;
    double lrs[MAX_SWEEP];           /* ascending */
    unsigned long long seeds[MAX_SWEEP];
    sweep_run* runs;                 /* preset-major, then lr, then seed */
    const char* out;                 /* tables, CSVs and plots */
    char runs_dir[1024];
    int jobs, threads, n_reused;
    unsigned long long data_hash;    /* of the data the runs train on (part of a run's identity) */
    unsigned long long exe_hash;     /* of this trainer's executable: another build may train otherwise */
} sweep;

/* ---- a run's results: its summary (summary.c) read back, and how it ended ---- */


/* collapsed: every validation loss of the last quarter of the run within margin of (or above)
   the unigram entropy: the model only learned the byte frequencies */
static int run_collapsed(const history* h, double unigram, double margin) {
    const double from = 0.75 * (h->steps_done > 0 ? h->steps_done : 1);
    int i, seen = 0;
    if (h->diverged_at >= 0 || h->n_eval == 0) return 0;
    for (i = 0; i < h->n_eval; i++) {
        if (h->eval_x[i] < from) continue;
        if (h->val[i] < unigram - margin) return 0;
        seen = 1;
    }
    return seen;
}

/* finite divergence: the final validation loss above the unigram entropy by more than margin,
   after the loss rose (above the run's lowest validation loss by more than margin, or a last
   training loss above the first); a short run still coming down from log(256) did not diverge */
static int run_rose(const history* h, double unigram, double margin) {
    double lowest = INFINITY;
    int i;
    for (i = 0; i < h->n_eval; i++) lowest = fmin(lowest, h->val[i]);
    return h->diverged_at < 0 && isfinite(h->final_val) && h->final_val > unigram + margin &&
           (h->final_val > lowest + margin || (h->n_steps > 1 && h->loss[h->n_steps - 1] > h->loss[0]));
}


static double num(const cJSON* o, const char* key) {
    const cJSON* v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN; /* null (NaN written) or missing */
}
/* an integer key in [lo, hi], else dflt: the file is input too (a hand-edited or damaged summary
   must not reach an out-of-range conversion) */
static long long inum(const cJSON* o, const char* key, double lo, double hi, long long dflt) {
    const double v = num(o, key);
    return v >= lo && v <= hi && v == floor(v) ? (long long)v : dflt;
}


/* a whole file, NUL-terminated; NULL when it cannot be read (a FIFO among the runs' files is
   not waited on) */
static char* slurp(const char* path) {
    size_t n;
    return read_whole(path, NULL, &n);
}

/* the per-step CSV of a run (write_steps_csv) into h; the max logit is NaN in a CSV of an
   older trainer (four columns) */
static int read_steps(const char* path, history* h) {
    char* text = slurp(path);
    char *line, *save = NULL;
    int cap = 0;
    if (!text) return 1;
    for (line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        double v[5];
        char* p = line;
        int k;
        if (!strncmp(line, "step,", 5)) continue;
        for (k = 0; k < 5; k++) {
            char* end;
            v[k] = strtod(p, &end);
            if (end == p) break;
            p = *end == ',' ? end + 1 : end;
        }
        if (k < 4) continue;
        if (k == 4) v[4] = NAN;
        if (h->n_steps == cap) {
            cap = cap ? 2 * cap : 1024;
            h->step_x = (double*)realloc(h->step_x, (size_t)cap * sizeof(double));
            h->loss = (double*)realloc(h->loss, (size_t)cap * sizeof(double));
            h->step_gnorm = (double*)realloc(h->step_gnorm, (size_t)cap * sizeof(double));
            h->step_lr = (double*)realloc(h->step_lr, (size_t)cap * sizeof(double));
            h->step_maxlogit = (double*)realloc(h->step_maxlogit, (size_t)cap * sizeof(double));
            if (!h->step_x || !h->loss || !h->step_gnorm || !h->step_lr || !h->step_maxlogit) {
                free(text);
                return fail("out of memory");
            }
        }
        h->step_x[h->n_steps] = v[0];
        h->loss[h->n_steps] = v[1];
        h->step_gnorm[h->n_steps] = v[2];
        h->step_lr[h->n_steps] = v[3];
        h->step_maxlogit[h->n_steps++] = v[4];
    }
    free(text);
    return 0;
}

static double* read_array(const cJSON* o, const char* key, int* n) {
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(o, key), *e;
    double* x;
    int i = 0;
    *n = cJSON_IsArray(a) ? cJSON_GetArraySize(a) : 0;
    x = (double*)xcalloc((size_t)*n, sizeof(double));
    cJSON_ArrayForEach(e, a) x[i++] = cJSON_IsNumber(e) ? e->valuedouble : NAN;
    return x;
}

/* a finished run's summary and per-step CSV into r (0), or 1 when the run left none */
static int read_run(const sweep* sw, sweep_run* r) {
    char path[1280], *text;
    cJSON* o;
    int n_val = 0;
    history* h = &r->h;
    const cJSON* init;
    history_free(h);
    h->diverged_at = -1;
    h->final_loss = h->final_val = h->accuracy = h->seconds = NAN;
    h->hc_fwd = h->hc_bwd = h->hc_fwd_peak = h->hc_bwd_peak = NAN;
    h->max_logit = h->max_logit_peak = h->first_mass = h->sink_mass = NAN;
    snprintf(path, sizeof path, "%s/%s.json", sw->runs_dir, r->name);
    if (!(text = slurp(path))) return 1;
    o = cJSON_Parse(text);
    free(text);
    if (!cJSON_IsObject(o)) { cJSON_Delete(o); return 1; }
    h->steps_done = (int)inum(o, "steps_done", 0, 1e9, 0);
    h->final_loss = num(o, "final_loss");
    h->final_val = num(o, "final_val");
    h->accuracy = num(o, "accuracy");
    h->n_problems = (int)inum(o, "n_problems", 0, 1e9, 0);
    h->diverged_at = (int)inum(o, "diverged_at", -1, 1e9, -1);
    h->spikes = (int)inum(o, "spikes", 0, 1e9, 0); /* older summaries have none */
    h->worst_spike = num(o, "worst_spike");
    h->hc_fwd = num(o, "hc_fwd_gain"); /* NaN without hyper-connections */
    h->hc_bwd = num(o, "hc_bwd_gain");
    h->hc_fwd_peak = num(o, "hc_fwd_gain_peak");
    h->hc_bwd_peak = num(o, "hc_bwd_gain_peak");
    h->max_logit = num(o, "max_logit"); /* NaN in an older trainer's summary */
    h->max_logit_peak = num(o, "max_logit_peak");
    h->first_mass = num(o, "first_mass");
    h->sink_mass = num(o, "sink_mass"); /* NaN without sinks (and in an older summary) */
    h->clips = inum(o, "qk_clips", 0, 1e15, 0);
    h->interrupted = (int)inum(o, "interrupted", 0, 1, 0);
    h->train_seconds = num(o, "train_seconds");
    h->seconds = num(o, "seconds");
    h->tokens = num(o, "tokens");
    r->unigram = num(o, "unigram");
    init = cJSON_GetObjectItemCaseSensitive(o, "init");
    snprintf(h->init, sizeof h->init, "%s", cJSON_IsString(init) ? init->valuestring : "?");
    h->eval_x = read_array(o, "eval_steps", &h->n_eval);
    h->val = read_array(o, "val", &n_val);
    if (n_val < h->n_eval) h->n_eval = n_val;
    cJSON_Delete(o);
    snprintf(path, sizeof path, "%s/%s.csv", sw->runs_dir, r->name);
    return read_steps(path, h);
}

static void classify(const sweep* sw, sweep_run* r, int have_results) {
    if (!have_results) r->state = g_stop ? RUN_INTERRUPTED : RUN_FAILED;
    else if (r->h.interrupted) r->state = RUN_INTERRUPTED;
    else if (r->h.diverged_at >= 0) r->state = RUN_DIVERGED;
    /* the protocol: a run stays finite and ends under the unigram baseline; one that ends
       above it, after its validation loss rose again, diverged without a non-finite value */
    else if (run_rose(&r->h, r->unigram, sw->base->sweep.collapse_margin)) r->state = RUN_DIVERGED;
    else if (run_collapsed(&r->h, r->unigram, sw->base->sweep.collapse_margin)) r->state = RUN_COLLAPSED;
    else r->state = RUN_OK;
}

/* ---- execution ---- */

/* the last non-empty line of a run's log: why it failed */
static void last_line(const char* path, char* out, size_t n) {
    char* text = slurp(path);
    char* end;
    out[0] = 0;
    if (!text) return;
    end = text + strlen(text);
    while (end > text && (end[-1] == '\n' || end[-1] == '\r')) *--end = 0;
    while (end > text && end[-1] != '\n') end--;
    snprintf(out, n, "%s", end);
    free(text);
}

/* The time left from the runs this sweep ran itself (a run an earlier sweep finished takes
   none; ETA unknown until one has ended): the wall time so far per run ended, times those left */
static void sweep_eta(const sweep* sw, double elapsed, char* eb, size_t n) {
    int i, ran = 0, left = 0;
    for (i = 0; i < sw->n_runs; i++) {
        if (sw->runs[i].reused) continue;
        if (sw->runs[i].state == RUN_PENDING || sw->runs[i].state == RUN_RUNNING) left++;
        else ran++;
    }
    if (ran) fmt_time(elapsed / ran * left, eb, n);
    else snprintf(eb, n, "after the first run");
}

static void progress(const sweep* sw, const sweep_run* r, int done, double t0) {
    char eb[32], what[1600];
    const history* h = &r->h;
    sweep_eta(sw, now_s() - t0, eb, sizeof eb);
    if (r->state == RUN_OK || r->state == RUN_COLLAPSED) {
        int k = snprintf(what, sizeof what, "val %.4f", h->final_val);
        if (isfinite(h->accuracy)) k += snprintf(what + k, sizeof what - (size_t)k, ", accuracy %.1f%%", 100 * h->accuracy);
        if (!isnan(h->hc_bwd)) /* hyper-connections: the largest composite gains at the end */
            k += snprintf(what + k, sizeof what - (size_t)k, ", gain fwd %.3g bwd %.3g", h->hc_fwd, h->hc_bwd);
        if (r->state == RUN_COLLAPSED) snprintf(what + k, sizeof what - (size_t)k, ", collapsed (unigram %.4f)", r->unigram);
    } else if (r->state == RUN_DIVERGED) {
        if (h->diverged_at >= 0) snprintf(what, sizeof what, "diverged at step %d", h->diverged_at);
        else snprintf(what, sizeof what, "diverged: ended at val %.4f, above the unigram baseline %.4f", h->final_val,
                      r->unigram);
    } else if (r->state == RUN_INTERRUPTED) {
        snprintf(what, sizeof what, "interrupted");
    } else {
        char path[1280], why[200];
        snprintf(path, sizeof path, "%s/%s.log", sw->runs_dir, r->name);
        /* a run killed (the OOM killer, a kill) left a log that says nothing about it */
        if (r->signal) snprintf(why, sizeof why, "killed by signal %d (%s)", r->signal, strsignal(r->signal));
        else last_line(path, why, sizeof why);
        snprintf(what, sizeof what, "%s: %s (log: %s)", k_state[r->state], why[0] ? why : "no output", path);
    }
    say("[%*d/%d] %-12s lr %-8g seed %-6llu %s (%s%.0f s)%s%s\n", sw->n_runs >= 100 ? 3 : 2, done,
        sw->n_runs, sw->labels[r->preset], sw->lrs[r->lr], sw->seeds[r->seed], what, r->reused ? "earlier, " : "",
        isfinite(h->seconds) ? h->seconds : 0, done < sw->n_runs ? " | ETA " : "",
        done < sw->n_runs ? eb : "");
    fflush(stdout);
}

/* flags of the parent's command line a run must not get: the sweep's own, and those each
   run sets itself */
static int sweep_flag(const char* a, int* has_value) {
    static const char* const with_value[] = {"--compare", "--seeds", "--lrs", "--jobs", "--out",
                                             "--diag", "--collapse-margin", "--threads",
                                             "--preset", "--seed", "--lr"};
    size_t i;
    *has_value = 1;
    for (i = 0; i < sizeof with_value / sizeof with_value[0]; i++)
        if (!strcmp(a, with_value[i])) return 1;
    *has_value = 0;
    return !strcmp(a, "--quiet");
}

/* argv of run r: the parent's flags minus the sweep's, plus the run's */
static char** run_argv(const sweep* sw, const sweep_run* r, int argc, char** argv, const char* exe,
                       char store[8][1280]) {
    char** a = (char**)xcalloc((size_t)argc + 24, sizeof(char*));
    int i, n = 0, hv;
    a[n++] = (char*)exe;
    for (i = 1; i < argc; i++) {
        if (sweep_flag(argv[i], &hv)) { i += hv; continue; }
        a[n++] = argv[i];
    }
    snprintf(store[0], 1280, "%s", sw->presets[r->preset]);
    snprintf(store[1], 1280, "%llu", sw->seeds[r->seed]);
    snprintf(store[2], 1280, "%.17g", sw->lrs[r->lr]);
    snprintf(store[3], 1280, "%d", sw->threads);
    snprintf(store[4], 1280, "%s/%s.csv", sw->runs_dir, r->name);
    snprintf(store[5], 1280, "%s/%s.json", sw->runs_dir, r->name);
    a[n++] = (char*)"--preset"; a[n++] = store[0];
    a[n++] = (char*)"--seed"; a[n++] = store[1];
    a[n++] = (char*)"--lr"; a[n++] = store[2];
    a[n++] = (char*)"--threads"; a[n++] = store[3];
    a[n++] = (char*)"--quiet";
    a[n++] = (char*)"--csv"; a[n++] = store[4];
    a[n++] = (char*)"--summary"; a[n++] = store[5];
    if (sw->base->files.diag) {
        snprintf(store[6], 1280, "%s/%s", sw->base->files.diag, r->name);
        a[n++] = (char*)"--diag"; a[n++] = store[6];
    }
    a[n] = NULL;
    return a;
}

/* A run's identity: the trainer's version and executable, its command line (one argument per line, a
   --config file's contents hashed after its name: what the run computes, not how it was spelled) and the
   hash of its data; kept as OUT/runs/<name>.cmd. Caller frees. */
static char* run_identity(const sweep* sw, char** a) {
    size_t n = 64, k;
    char* s;
    int i;
    for (i = 0; a[i]; i++) n += strlen(a[i]) + 32;
    s = (char*)xcalloc(n, 1);
    k = (size_t)snprintf(s, n, "normblocks %s\nbinary %016llx\ndata %016llx\n", NB_VERSION_STRING, sw->exe_hash,
                         sw->data_hash);
    for (i = 1; a[i]; i++) { /* a[0]: the path, not the identity */
        k += (size_t)snprintf(s + k, n - k, "%s\n", a[i]);
        if (!strcmp(a[i], "--config") && a[i + 1]) {
            k += (size_t)snprintf(s + k, n - k, "%s\ncontents %016llx\n", a[i + 1], config_run_hash(a[i + 1]));
            i++;
        }
    }
    return s;
}

/* 1 when an earlier sweep finished this run with the same identity (its .cmd) and left its
   results (.json, .csv): they are read instead of running it again */
static int reuse_run(sweep* sw, sweep_run* r, const char* id) {
    char path[1280];
    char* had;
    int same;
    snprintf(path, sizeof path, "%s/%s.cmd", sw->runs_dir, r->name);
    if (!(had = slurp(path))) return 0;
    same = !strcmp(had, id);
    free(had);
    if (!same || read_run(sw, r) || r->h.interrupted) return 0;
    r->reused = 1;
    sw->n_reused++;
    return 1;
}

/* before a run starts: no result of an earlier one stays (a run killed now must not look
   finished to the next sweep), then its identity */
static int mark_started(const sweep* sw, const sweep_run* r, const char* id) {
    char path[1280];
    FILE* f;
    snprintf(path, sizeof path, "%s/%s.json", sw->runs_dir, r->name);
    remove(path);
    snprintf(path, sizeof path, "%s/%s.cmd", sw->runs_dir, r->name);
    if (!(f = create_out(path))) return 1;
    fputs(id, f);
    return close_out(f);
}

static int spawn_run(sweep* sw, sweep_run* r, int argc, char** argv, const char* exe) {
    char store[8][1280], log[1280];
    char** a = run_argv(sw, r, argc, argv, exe, store);
    char* id = run_identity(sw, a);
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t at;
    int rc;
    if (reuse_run(sw, r, id) || mark_started(sw, r, id)) {
        free(a);
        free(id);
        return r->reused ? 0 : 1;
    }
    free(id);
    snprintf(log, sizeof log, "%s/%s.log", sw->runs_dir, r->name);
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    posix_spawnattr_init(&at);
    /* its own process group: Ctrl-C reaches the sweep, which ends its runs itself */
    posix_spawnattr_setflags(&at, POSIX_SPAWN_SETPGROUP);
    posix_spawnattr_setpgroup(&at, 0);
    setenv(SWEEP_RUN_ENV, "1", 1); /* for the runs; this process reads it never again */
    rc = posix_spawn(&r->pid, exe, &fa, &at, a, environ);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&at);
    free(a);
    if (rc) return fail("cannot start %s: %s", exe, strerror(rc));
    r->state = RUN_RUNNING;
    r->t_spawn = now_s();
    return 0;
}

/* child processes, jobs at a time; Ctrl-C ends the running ones (their results are lost,
   the finished ones stay) */
static int run_processes(sweep* sw, int argc, char** argv) {
    char exe[1024];
    const double t0 = now_s();
    ssize_t k = readlink("/proc/self/exe", exe, sizeof exe - 1);
    int next = 0, running = 0, done = 0, i, rc = 0;
    if (k > 0) exe[k] = 0;
    else snprintf(exe, sizeof exe, "%s", argv[0]);
    while (done < sw->n_runs) {
        int status;
        pid_t pid;
        while (!g_stop && !rc && running < sw->jobs && next < sw->n_runs) {
            sweep_run* r = &sw->runs[next++];
            if (spawn_run(sw, r, argc, argv, exe)) rc = 1;
            else if (r->reused) {
                classify(sw, r, 1);
                progress(sw, r, ++done, t0);
            } else running++;
        }
        if (running == 0) break;
        if (g_stop) /* Ctrl-C: the running runs end now (waitpid below collects them) */
            for (i = 0; i < sw->n_runs; i++)
                if (sw->runs[i].state == RUN_RUNNING) kill(sw->runs[i].pid, SIGKILL);
        pid = waitpid(-1, &status, 0);
        if (pid < 0) {
            if (errno != EINTR) { rc = fail("waiting for the runs: %s", strerror(errno)); break; }
            continue; /* a signal: the loop looks at g_stop again */
        }
        for (i = 0; i < sw->n_runs; i++) {
            sweep_run* r = &sw->runs[i];
            if (r->state != RUN_RUNNING || r->pid != pid) continue;
            running--;
            done++;
            r->signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
            classify(sw, r, read_run(sw, r) == 0);
            if (!isfinite(r->h.seconds)) r->h.seconds = now_s() - r->t_spawn; /* killed: no summary */
            progress(sw, r, done, t0);
        }
    }
    for (i = 0; i < sw->n_runs; i++)
        if (sw->runs[i].state == RUN_PENDING) sw->runs[i].state = RUN_INTERRUPTED;
    return rc;
}

/* in this process, one after another (train_mpi: every rank runs every run) */
static int run_inline(sweep* sw, const dataset* ds) {
    const double t0 = now_s();
    int i;
    for (i = 0; i < sw->n_runs && !g_stop; i++) {
        sweep_run* r = &sw->runs[i];
        config c = *sw->base;
        dataset d = *ds;
        char csv[1280], sum[1280], diag[1280];
        snprintf(c.model.preset, sizeof c.model.preset, "%s", sw->presets[r->preset]);
        preset_train_defaults(&c); /* the preset's optimizer defaults, as a child's parse_args */
        c.loop.seed = d.seed = sw->seeds[r->seed]; /* the data stream follows the seed, as in a child */
        c.optim.lr = sw->lrs[r->lr];
        c.loop.quiet = 1;
        c.sweep.compare = NULL;
        c.sweep.n_seeds = c.sweep.n_lrs = 0;
        snprintf(csv, sizeof csv, "%s/%s.csv", sw->runs_dir, r->name);
        snprintf(sum, sizeof sum, "%s/%s.json", sw->runs_dir, r->name);
        c.files.csv = csv;
        c.files.summary = sum;
        if (c.files.diag) { snprintf(diag, sizeof diag, "%s/%s", sw->base->files.diag, r->name); c.files.diag = diag; }
        r->unigram = unigram_entropy(&d, c.loop.seq);
        if (train_run(&c, &d, r->unigram, &r->h, 1)) return 1;
        classify(sw, r, 1);
        progress(sw, r, i + 1, t0);
    }
    for (; i < sw->n_runs; i++) sw->runs[i].state = RUN_INTERRUPTED;
    return 0;
}

/* ---- statistics ---- */

typedef struct group_stats {
    int n, ok, diverged, collapsed, failed, interrupted;   /* runs by state (n: seeds) */
    int finished;                             /* ok + collapsed: the ones with a final loss */
    double mean, std, lo, hi, acc;            /* over finished runs */
    double acc_lo, acc_hi;                    /* accuracy min-max over them */
    int stable;                               /* every seed ok */
} group_stats;

static sweep_run* run_at(const sweep* sw, int p, int l, int s) {
    return &sw->runs[((size_t)p * sw->n_lrs + l) * sw->n_seeds + s];
}

static group_stats stats(const sweep* sw, int p, int l) {
    group_stats g;
    double sum = 0, sq = 0, acc = 0;
    int s, n_acc = 0;
    const sweep_run* r;
    memset(&g, 0, sizeof g);
    g.lo = g.acc_lo = INFINITY; g.hi = g.acc_hi = -INFINITY;
    for (s = 0; s < sw->n_seeds; s++) {
        r = run_at(sw, p, l, s);
        g.n++;
        g.ok += r->state == RUN_OK;
        g.diverged += r->state == RUN_DIVERGED;
        g.collapsed += r->state == RUN_COLLAPSED;
        g.failed += r->state == RUN_FAILED;
        g.interrupted += r->state == RUN_INTERRUPTED;
        if ((r->state == RUN_OK || r->state == RUN_COLLAPSED) && isfinite(r->h.final_val)) {
            const double v = r->h.final_val;
            g.finished++;
            sum += v;
            if (v < g.lo) g.lo = v;
            if (v > g.hi) g.hi = v;
            if (isfinite(r->h.accuracy)) {
                acc += r->h.accuracy;
                n_acc++;
                g.acc_lo = fmin(g.acc_lo, r->h.accuracy);
                g.acc_hi = fmax(g.acc_hi, r->h.accuracy);
            }
        }
    }
    g.mean = g.finished ? sum / g.finished : NAN;
    for (s = 0; s < sw->n_seeds; s++) { /* two passes: the sample std about the mean */
        r = run_at(sw, p, l, s);
        if ((r->state == RUN_OK || r->state == RUN_COLLAPSED) && isfinite(r->h.final_val))
            sq += (r->h.final_val - g.mean) * (r->h.final_val - g.mean);
    }
    g.std = g.finished > 1 ? sqrt(sq / (g.finished - 1)) : NAN;
    g.acc = n_acc ? acc / n_acc : NAN;
    if (!n_acc) g.acc_lo = g.acc_hi = NAN;
    g.stable = g.ok == g.n;
    return g;
}

static void runs_word(const group_stats* g, char* buf, size_t n) {
    size_t k = 0;
    buf[0] = 0;
#define PART(cnt, word) if (cnt) k += (size_t)snprintf(buf + k, k < n ? n - k : 0, "%s%d %s", k ? ", " : "", cnt, word)
    PART(g->ok, "ok");
    PART(g->collapsed, "collapsed");
    PART(g->diverged, "diverged");
    PART(g->failed, "failed");
    PART(g->interrupted, "interrupted");
#undef PART
}

static void print_table(const sweep* sw, int text) {
    int p, l;
    say("\n%-14s %-9s %-9s %5s  %-22s %-17s %9s  %s\n", "preset", "init", "lr", "seeds",
        sw->n_seeds > 1 ? "val loss mean +- std" : "val loss", sw->n_seeds > 1 ? "min - max" : "",
        text ? "" : "accuracy", "runs");
    for (p = 0; p < sw->n_presets; p++)
        for (l = 0; l < sw->n_lrs; l++) {
            const group_stats g = stats(sw, p, l);
            char val[40] = "-", range[40] = "", acc[16] = "", word[96];
            if (g.finished && g.finished > 1) snprintf(val, sizeof val, "%.4f +- %.4f", g.mean, g.std);
            else if (g.finished) snprintf(val, sizeof val, "%.4f", g.mean);
            if (g.finished > 1) snprintf(range, sizeof range, "%.4f - %.4f", g.lo, g.hi);
            if (!text && isfinite(g.acc)) snprintf(acc, sizeof acc, "%.1f%%", 100 * g.acc);
            runs_word(&g, word, sizeof word);
            say("%-14s %-9s %-9g %5d  %-22s %-17s %9s  %s\n", sw->labels[p],
                run_at(sw, p, l, 0)->h.init[0] ? run_at(sw, p, l, 0)->h.init : "?", sw->lrs[l],
                g.n, val, range, acc, word);
        }
}

/* the lr of preset p whose finished runs reach the lowest mean final validation loss
   (stable ones first); -1 if nothing finished */
static int best_lr(const sweep* sw, int p) {
    int l, best = -1, best_stable = 0;
    double bv = INFINITY;
    for (l = 0; l < sw->n_lrs; l++) {
        const group_stats g = stats(sw, p, l);
        if (!g.finished) continue;
        if ((g.stable && !best_stable) || (g.stable == best_stable && g.mean < bv)) {
            best = l; bv = g.mean; best_stable = g.stable;
        }
    }
    return best;
}

/* largest lr of preset p at which every seed was ok; -1 if none. Only the lrs below the first
   one with an interrupted run count (*known: their number): nothing is concluded from runs that
   did not finish. unstable: the smaller ones that were not (a sign of the sweep's noise or an
   lr window, worth a look) */
static int largest_stable(const sweep* sw, int p, char* unstable, size_t n, int* known) {
    int l, best = -1;
    size_t k = 0;
    unstable[0] = 0;
    *known = sw->n_lrs;
    for (l = 0; l < sw->n_lrs; l++) {
        const group_stats g = stats(sw, p, l);
        if (g.interrupted) { *known = l; break; }
        if (g.stable) best = l;
    }
    for (l = 0; l < best; l++)
        if (!stats(sw, p, l).stable)
            k += (size_t)snprintf(unstable + k, k < n ? n - k : 0, "%s%g", k ? ";" : "", sw->lrs[l]);
    return best;
}

static void print_stable(const sweep* sw) {
    int p;
    if (sw->n_lrs < 2) return;
    say("\nlargest stable learning rate (every seed trained without diverging or collapsing; "
        "the SiameseNorm paper's Table 1 protocol):\n");
    for (p = 0; p < sw->n_presets; p++) {
        char unstable[256];
        int known;
        const int l = largest_stable(sw, p, unstable, sizeof unstable, &known), b = best_lr(sw, p);
        if (known == 0) say("  %-14s not known (interrupted before every seed at lr %g finished)", sw->labels[p],
                            sw->lrs[0]);
        else if (l < 0) say("  %-14s none of %g..%g", sw->labels[p], sw->lrs[0], sw->lrs[known - 1]);
        else say("  %-14s %g%s%s%s%s", sw->labels[p], sw->lrs[l],
                 l == sw->n_lrs - 1 ? " (the largest tried)" : "", unstable[0] ? " (but not stable at " : "",
                 unstable, unstable[0] ? ")" : "");
        if (known > 0 && known < sw->n_lrs) say(" (lr %g and above: interrupted, not known)", sw->lrs[known]);
        /* stable is not good: a run can stay clear of the baseline and still learn little */
        if (b >= 0) say("; lowest validation loss at lr %g (%.4f)", sw->lrs[b], stats(sw, p, b).mean);
        say("\n");
    }
}

/* ---- files ---- */

static FILE* out_file(const sweep* sw, const char* name, char* path, size_t n) {
    return open_in(sw->out, name, path, n);
}


static int write_tables(const sweep* sw) {
    char path[1280];
    FILE* f;
    int p, l, s, i, rc = 0;
    if (!(f = out_file(sw, "runs.csv", path, sizeof path))) return 1;
    fprintf(f, "preset,lr,seed,init,state,diverged_at,steps_done,final_loss,val_loss,accuracy,"
               "problems,seconds,log,spikes,hc_fwd_gain,hc_bwd_gain,hc_fwd_gain_peak,hc_bwd_gain_peak,"
               "max_logit,max_logit_peak,first_mass,qk_clips,sink_mass\n");
    for (i = 0; i < sw->n_runs; i++) {
        const sweep_run* r = &sw->runs[i];
        fprintf(f, "%s,%.9g,%llu,%s,%s,%d,%d,%.9g,%.9g,%.6g,%d,%.2f,%s/%s.log,%d,%.6g,%.6g,%.6g,%.6g,"
                "%.6g,%.6g,%.6g,%lld,%.6g\n",
                sw->labels[r->preset], sw->lrs[r->lr], sw->seeds[r->seed], r->h.init, k_state[r->state],
                r->h.diverged_at, r->h.steps_done, r->h.final_loss, r->h.final_val, r->h.accuracy,
                r->h.n_problems, r->h.seconds, sw->runs_dir, r->name, r->h.spikes, r->h.hc_fwd,
                r->h.hc_bwd, r->h.hc_fwd_peak, r->h.hc_bwd_peak, r->h.max_logit, r->h.max_logit_peak,
                r->h.first_mass, r->h.clips, r->h.sink_mass);
    }
    rc |= close_out(f);
    if (!(f = out_file(sw, "summary.csv", path, sizeof path))) return 1;
    fprintf(f, "preset,lr,seeds,ok,collapsed,diverged,failed,interrupted,val_mean,val_std,val_min,"
               "val_max,accuracy_mean,stable,largest_stable_lr\n");
    for (p = 0; p < sw->n_presets; p++) {
        char unstable[256];
        int known;
        const int best = largest_stable(sw, p, unstable, sizeof unstable, &known);
        for (l = 0; l < sw->n_lrs; l++) {
            const group_stats g = stats(sw, p, l);
            fprintf(f, "%s,%.9g,%d,%d,%d,%d,%d,%d,%.9g,%.9g,%.9g,%.9g,%.6g,%d,%.9g\n", sw->labels[p],
                    sw->lrs[l], g.n, g.ok, g.collapsed, g.diverged, g.failed, g.interrupted, g.mean, g.std,
                    g.finished ? g.lo : NAN, g.finished ? g.hi : NAN, g.acc, g.stable,
                    best >= 0 && known == sw->n_lrs ? sw->lrs[best] : NAN); /* nan: not known */
        }
    }
    rc |= close_out(f);
    /* every step of every run, long format: one table to replot anything */
    if (!(f = out_file(sw, "curves.csv", path, sizeof path))) return 1;
    fprintf(f, "preset,lr,seed,step,loss,grad_norm,lr_now,val_loss,max_logit\n");
    for (p = 0; p < sw->n_presets; p++)
        for (l = 0; l < sw->n_lrs; l++)
            for (s = 0; s < sw->n_seeds; s++) {
                const history* h = &run_at(sw, p, l, s)->h;
                int e = 0;
                for (i = 0; i < h->n_steps; i++) {
                    fprintf(f, "%s,%.9g,%llu,%.0f,%.9g,%.9g,%.9g,", sw->labels[p], sw->lrs[l],
                            sw->seeds[s], h->step_x[i], h->loss[i], h->step_gnorm[i], h->step_lr[i]);
                    while (e < h->n_eval && h->eval_x[e] < h->step_x[i]) e++;
                    if (e < h->n_eval && h->eval_x[e] == h->step_x[i]) fprintf(f, "%.9g", h->val[e]);
                    fprintf(f, ",%.9g\n", h->step_maxlogit ? h->step_maxlogit[i] : NAN);
                }
            }
    rc |= close_out(f);
    return rc;
}

/* ---- plots ---- */

/* centered moving average of y over a window of w points */
static void smooth(const double* y, int n, int w, double* out) {
    int i, j;
    for (i = 0; i < n; i++) {
        double s = 0;
        int c = 0;
        for (j = i - w / 2; j <= i + w / 2; j++)
            if (j >= 0 && j < n && isfinite(y[j])) { s += y[j]; c++; }
        out[i] = c ? s / c : NAN;
    }
}

/* per preset at its best lr: validation mean and min-max over seeds per evaluation, and the
   smoothed train loss averaged over seeds */
typedef struct curve_set {
    band val[MAX_COMPARE], train[MAX_COMPARE];
    double* mem[MAX_COMPARE];
    char name[MAX_COMPARE][96];
    int n;
} curve_set;

static void curves(const sweep* sw, curve_set* cs) {
    int p, s, i;
    memset(cs, 0, sizeof *cs);
    for (p = 0; p < sw->n_presets; p++) {
        const int l = best_lr(sw, p);
        const history* h0 = NULL;
        int ne = 0, ns = 0, k = cs->n, cnt;
        double *m, *vx, *vy, *vlo, *vhi, *tx, *ty, *sm;
        if (l < 0) continue;
        for (s = 0; s < sw->n_seeds; s++) { /* the longest finished run sets the x values */
            const sweep_run* r = run_at(sw, p, l, s);
            if (r->state != RUN_OK && r->state != RUN_COLLAPSED) continue;
            if (!h0 || r->h.n_eval > ne) { h0 = &r->h; ne = r->h.n_eval; }
            if (r->h.n_steps > ns) ns = r->h.n_steps;
        }
        if (!h0) continue;
        m = cs->mem[k] = (double*)xcalloc((size_t)4 * ne + 3 * (size_t)ns, sizeof(double));
        vx = m; vy = vx + ne; vlo = vy + ne; vhi = vlo + ne; tx = vhi + ne; ty = tx + ns; sm = ty + ns;
        for (i = 0; i < ne; i++) {
            double sum = 0, lo = INFINITY, hi = -INFINITY;
            cnt = 0;
            vx[i] = h0->eval_x[i];
            for (s = 0; s < sw->n_seeds; s++) {
                const sweep_run* r = run_at(sw, p, l, s);
                if ((r->state != RUN_OK && r->state != RUN_COLLAPSED) || i >= r->h.n_eval) continue;
                sum += r->h.val[i];
                if (r->h.val[i] < lo) lo = r->h.val[i];
                if (r->h.val[i] > hi) hi = r->h.val[i];
                cnt++;
            }
            vy[i] = cnt ? sum / cnt : NAN;
            vlo[i] = cnt ? lo : NAN;
            vhi[i] = cnt ? hi : NAN;
        }
        for (i = 0; i < ns; i++) { tx[i] = i + 1; ty[i] = 0; }
        cnt = 0;
        for (s = 0; s < sw->n_seeds; s++) {
            const sweep_run* r = run_at(sw, p, l, s);
            if ((r->state != RUN_OK && r->state != RUN_COLLAPSED) || r->h.n_steps != ns) continue;
            smooth(r->h.loss, ns, ns / 25 > 1 ? ns / 25 : 1, sm);
            for (i = 0; i < ns; i++) { ty[i] += sm[i]; tx[i] = r->h.step_x[i]; }
            cnt++;
        }
        for (i = 0; i < ns; i++) ty[i] = cnt ? ty[i] / cnt : NAN;
        if (sw->n_lrs > 1) snprintf(cs->name[k], sizeof cs->name[k], "%s, lr %g", sw->labels[p], sw->lrs[l]);
        else snprintf(cs->name[k], sizeof cs->name[k], "%s", sw->labels[p]);
        cs->val[k].name = cs->train[k].name = cs->name[k];
        cs->val[k].n = ne; cs->val[k].x = vx; cs->val[k].y = vy;
        if (sw->n_seeds > 1) { cs->val[k].lo = vlo; cs->val[k].hi = vhi; }
        cs->train[k].n = cnt ? ns : 0; cs->train[k].x = tx; cs->train[k].y = ty;
        cs->n++;
    }
}

/* per preset over the lrs: the final validation loss (acc 0) or the answer accuracy (acc 1)
   of the finished runs, mean and min-max, and how many runs diverged and collapsed. mem:
   n_presets x n_lrs x 3 doubles, cnt: n_presets x n_lrs x 2 ints */
static void lr_bands(const sweep* sw, int acc, band* b, double* mem, int* cnt) {
    int p, l;
    for (p = 0; p < sw->n_presets; p++) {
        double *y = mem + (size_t)p * sw->n_lrs * 3, *lo = y + sw->n_lrs, *hi = lo + sw->n_lrs;
        int *div = cnt + (size_t)p * sw->n_lrs * 2, *col = div + sw->n_lrs;
        for (l = 0; l < sw->n_lrs; l++) {
            const group_stats g = stats(sw, p, l);
            y[l] = acc ? g.acc : g.mean;
            lo[l] = !g.finished ? NAN : acc ? g.acc_lo : g.lo;
            hi[l] = !g.finished ? NAN : acc ? g.acc_hi : g.hi;
            div[l] = g.diverged;
            col[l] = g.collapsed;
        }
        b[p].name = sw->labels[p];
        b[p].n = sw->n_lrs;
        b[p].x = sw->lrs; b[p].y = y; b[p].lo = lo; b[p].hi = hi;
        b[p].n_div = div; b[p].n_col = col; b[p].seeds = sw->n_seeds;
    }
}

static int write_plots(const sweep* sw, double unigram, char* listed, size_t n) {
    char path[1280], title[256];
    curve_set cs;
    band b[MAX_COMPARE];
    double* mem = (double*)xcalloc((size_t)sw->n_presets * sw->n_lrs * 3, sizeof(double));
    int* cnt = (int*)xcalloc((size_t)sw->n_presets * sw->n_lrs * 2, sizeof(int));
    int rc = 0, k;
    size_t used = 0;
    curves(sw, &cs);
    if (sw->n_seeds > 1)
        snprintf(title, sizeof title, "Validation loss%s", sw->n_lrs > 1 ? ", each preset at its best lr" : "");
    else snprintf(title, sizeof title, "Validation loss (seed %llu%s)", sw->seeds[0],
                  sw->n_lrs > 1 ? ", each preset at its best lr" : "");
    snprintf(path, sizeof path, "%s/compare.svg", sw->out);
    if (cs.n) {
        rc |= plot_compare(path, sw->base, title, sw->n_seeds > 1 ? "Train loss (moving average, mean over seeds)"
                                                                  : "Train loss (moving average)",
                           cs.val, cs.train, cs.n, unigram);
        used += (size_t)snprintf(listed + used, n - used, "  %s  validation curves per preset (train loss, smoothed, beside)\n", path);
    }
    for (k = 0; k < MAX_COMPARE; k++) free(cs.mem[k]);
    if (sw->n_lrs > 1) {   /* final validation loss against lr, per preset */
        lr_bands(sw, 0, b, mem, cnt);
        snprintf(path, sizeof path, "%s/lr_sweep.svg", sw->out);
        rc |= plot_lr_sweep(path, sw->base, b, sw->n_presets, unigram);
        used += (size_t)snprintf(listed + used, n - used, "  %s  final validation loss against the learning rate\n", path);
    }
    if (!sw->base->data.path) { /* the addition task's headline number */
        lr_bands(sw, 1, b, mem, cnt);
        snprintf(path, sizeof path, "%s/accuracy.svg", sw->out);
        rc |= plot_accuracy(path, sw->base, b, sw->n_presets);
        used += (size_t)snprintf(listed + used, n - used, "  %s  held-out answer accuracy per preset%s\n", path,
                                 sw->n_lrs > 1 ? " and learning rate" : "");
    }
    free(mem);
    free(cnt);
    return rc;
}

/* ---- the sweep ---- */

/* a file-name-safe stem: preset, lr, seed */
static void run_name(const sweep* sw, sweep_run* r) {
    char* c;
    snprintf(r->name, sizeof r->name, "%s_lr%g_seed%llu", sw->labels[r->preset], sw->lrs[r->lr],
             sw->seeds[r->seed]);
    for (c = r->name; *c; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
              *c == '_' || *c == '-' || *c == '.'))
            *c = *c == '*' ? 'S' : '_';
}

static int by_value(const void* a, const void* b) {
    const double x = *(const double*)a, y = *(const double*)b;
    return x < y ? -1 : x > y;
}

static int plan(sweep* sw, const config* base) {
    int i, p, l, s;
    memset(sw, 0, sizeof *sw);
    sw->base = base;
    if (base->sweep.compare) {
        char buf[512], *tok, *save = NULL;
        if (strlen(base->sweep.compare) >= sizeof buf) return fail("--compare: list too long");
        snprintf(buf, sizeof buf, "%s", base->sweep.compare);
        for (tok = strtok_r(buf, ", ", &save); tok; tok = strtok_r(NULL, ", ", &save)) { /* "a,b" or "a, b" */
            nb_stack_desc d;
            nb_ctx ctx;
            memset(&d, 0, sizeof d);
            memset(&ctx, 0, sizeof ctx);
            if (sw->n_presets >= MAX_COMPARE) return fail("--compare: at most %d presets", MAX_COMPARE);
            if (strlen(tok) >= sizeof sw->presets[0]) return fail("--compare: name too long");
            if (nb_preset_from_name(&ctx, &d, tok) != NB_OK) return fail("--compare: %s", ctx.err);
            for (i = 0; i < sw->n_presets; i++)
                if (!strcmp(sw->presets[i], tok)) return fail("--compare: %s appears twice", tok);
            snprintf(sw->presets[sw->n_presets], sizeof sw->presets[0], "%s", tok);
            snprintf(sw->labels[sw->n_presets++], sizeof sw->labels[0], "%s", tok);
        }
        if (sw->n_presets == 0) return fail("--compare: empty list");
    } else {
        snprintf(sw->presets[0], sizeof sw->presets[0], "%s", base->model.preset);
        snprintf(sw->labels[0], sizeof sw->labels[0], "%s", base->model.schedule[0] ? "custom" : base->model.preset);
        sw->n_presets = 1;
    }
    sw->n_lrs = base->sweep.n_lrs ? base->sweep.n_lrs : 1;
    if (base->sweep.n_lrs) memcpy(sw->lrs, base->sweep.lrs, sizeof sw->lrs);
    else sw->lrs[0] = base->optim.lr;
    qsort(sw->lrs, (size_t)sw->n_lrs, sizeof sw->lrs[0], by_value);
    sw->n_seeds = base->sweep.n_seeds ? base->sweep.n_seeds : 1;
    if (base->sweep.n_seeds) memcpy(sw->seeds, base->sweep.seeds, sizeof sw->seeds);
    else sw->seeds[0] = base->loop.seed;
    sw->n_runs = sw->n_presets * sw->n_lrs * sw->n_seeds;
    sw->runs = (sweep_run*)xcalloc((size_t)sw->n_runs, sizeof(sweep_run));
    for (p = 0; p < sw->n_presets; p++)
        for (l = 0; l < sw->n_lrs; l++)
            for (s = 0; s < sw->n_seeds; s++) {
                sweep_run* r = run_at(sw, p, l, s);
                r->preset = p; r->lr = l; r->seed = s;
                r->h.diverged_at = -1;
                r->h.final_loss = r->h.final_val = r->h.accuracy = r->h.seconds = NAN;
                r->h.hc_fwd = r->h.hc_bwd = r->h.hc_fwd_peak = r->h.hc_bwd_peak = NAN;
                r->h.max_logit = r->h.max_logit_peak = r->h.first_mass = r->h.sink_mass = NAN;
                run_name(sw, r);
            }
    sw->out = base->files.out ? base->files.out : base->files.diag ? base->files.diag : ".";
    snprintf(sw->runs_dir, sizeof sw->runs_dir, "%s/runs", sw->out);
    sw->threads = base->machine.threads ? base->machine.threads : 1;
    {
        const long cores = sysconf(_SC_NPROCESSORS_ONLN);
        const int per = (int)(cores > 0 ? cores : 1) / sw->threads;
        sw->jobs = base->sweep.jobs ? base->sweep.jobs : per > 0 ? per : 1;
        if (sw->jobs > sw->n_runs) sw->jobs = sw->n_runs;
    }
    /* rank 0 alone: ranks racing to create the same directory would disagree */
    return dist_agree(g_rank == 0 && (make_dir(sw->out) || make_dir(sw->runs_dir) ||
                                      (base->files.diag && make_dir(base->files.diag))));
}

int run_sweep(const config* base, const dataset* ds, double unigram, int argc, char** argv) {
    sweep sw;
    char listed[2048] = "", elapsed[32];
    const double t0 = now_s();
    int rc, i, finished = 0;
    if (plan(&sw, base)) { free(sw.runs); return 1; }
    say("sweep: %d preset%s x %d lr x %d seed%s = %d runs of %d steps; ", sw.n_presets,
        sw.n_presets > 1 ? "s" : "", sw.n_lrs, sw.n_seeds, sw.n_seeds > 1 ? "s" : "", sw.n_runs,
        base->loop.steps);
    if (dist_have_mpi())
        say("one after another in this job, each over %d rank%s\n", g_ranks, g_ranks > 1 ? "s" : "");
    else
        say("%d at a time, each its own process with %d thread%s (bitwise the same as that run "
            "alone); logs in %s/\n", sw.jobs, sw.threads, sw.threads > 1 ? "s" : "", sw.runs_dir);
    fflush(stdout);
    sw.data_hash = ds->hash;
    {
        size_t n = 0;
        char* exe = read_whole("/proc/self/exe", NULL, &n);
        sw.exe_hash = exe ? fnv1a(exe, n, 0xCBF29CE484222325ULL) : 0;
        free(exe);
    }
    rc = dist_have_mpi() ? run_inline(&sw, ds) : run_processes(&sw, argc, argv);
    if (sw.n_reused)
        say("%d of %d runs finished by an earlier sweep of the same command and data: read from %s/, not run "
            "again (marked \"earlier\" above)\n", sw.n_reused, sw.n_runs, sw.runs_dir);
    for (i = 0; i < sw.n_runs; i++) finished += sw.runs[i].state != RUN_INTERRUPTED;
    if (g_stop) say("interrupted: %d of %d runs finished\n", finished, sw.n_runs);
    print_table(&sw, ds->text);
    print_stable(&sw);
    say("unigram baseline %.4f nats/token; collapsed = validation loss within %g nats of it over "
        "the last quarter of the run; diverged = a non-finite loss or gradient, or a final validation "
        "loss above it by more than %g after the loss rose (a loss spike that recovers is counted in "
        "runs.csv, not stopped)\n",
        unigram, base->sweep.collapse_margin, base->sweep.collapse_margin);
    fmt_time(now_s() - t0, elapsed, sizeof elapsed);
    say("sweep time %s\n", elapsed);
    if (g_rank == 0 && finished) {
        if (write_tables(&sw) || write_plots(&sw, unigram, listed, sizeof listed)) rc = 1;
        else say("wrote:\n%s  %s/summary.csv  per preset and lr (mean, std, min, max, states, "
                 "largest stable lr)\n  %s/runs.csv  per run\n  %s/curves.csv  every step of every run\n"
                 "  %s/  each run's log, per-step CSV and summary\n", listed, sw.out, sw.out,
                 sw.out, sw.runs_dir);
    }
    for (i = 0; i < sw.n_runs; i++) {
        rc |= sw.runs[i].state == RUN_FAILED;
        history_free(&sw.runs[i].h);
    }
    free(sw.runs);
    return dist_agree(rc);
}
