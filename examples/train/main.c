/* train: a byte-level language model around a normblocks stack, trained with AdamW.

   Model   token embedding (256 x d) -> normblocks stack (any preset or per-layer schedule,
           with the stack's own final norm) -> untied head (256 x d) -> mean cross-entropy.
   Data    default: a synthetic task made here, multi-digit addition written as text with
           fixed-width operands ("123+045=0168\n"; --format for others); the loss counts only
           the answer bytes (digits and the closing newline), and the unordered pairs {a, b}
           with hash(min, max) % 10 == 0 are held out: validation and the exact-match accuracy
           use only those, training never sees them (nor b+a for a held-out a+b).
           --data FILE: any file as a byte-level corpus, the last --val-frac held out.
   Output  one line per interval (loss, validation loss, gradient norm, tokens/s, ETA);
           checkpoints in safetensors format (PyTorch-style names, Adam moments as
           optimizer.m.<name> / optimizer.v.<name>, step and run configuration in
           __metadata__); --diag DIR: per-layer CSVs and SVG plots.
   Sweeps  --compare a,b,c --seeds 0,1,2 --lrs 1e-3,4e-3: one run per combination (sweep.c), a
           table of mean and spread over seeds, collapsed and diverged runs marked, the largest
           stable learning rate per preset, CSVs and SVG plots.
   Loading --load FILE --sample PROMPT / --eval: generate from, or evaluate, a checkpoint
           (sample.c), its configuration read from the file.
   Ranks   train_mpi (built when CMake finds MPI) runs data-parallel under mpirun: --batch is
           the global batch, each rank computes its rows, gradients are summed over the ranks
           while the backward runs; --zero shards the AdamW moments (ZeRO-1).

   Build and run (from the repository root):
       cmake -S . -B build -DCMAKE_BUILD_TYPE=Release && cmake --build build -j2
       OPENBLAS_NUM_THREADS=1 ./build/train
       mpirun -np 2 ./build/train_mpi --threads 1
   normblocks does the threading (--threads N): run with OPENBLAS_NUM_THREADS=1, and on recent
   Xeons with OPENBLAS_CORETYPE=SkylakeX (or Haswell), see the README. */
#define _POSIX_C_SOURCE 200809L
#include "train.h"
#include "../safetensors.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef NB_NO_BLAS
#include <cblas.h> /* OpenBLAS's defines OPENBLAS_SEQUENTIAL and openblas_get_corename */
#endif
#include "../tuned_env.h"

static void on_signal(int sig) { (void)sig; g_stop = 1; }

/* Every output path is checked before training starts, so a typo does not cost the run. */
/* every output path before any work: an existing regular file or a new one in a writable
   directory (never a FIFO, device or directory; the checkpoint's temporary too) */
static int check_outputs(const config* c) {
    const char* const out[4] = {c->files.save, c->files.csv, c->sample.dump, c->files.summary};
    char err[512], tmp[4200];
    int i;
    for (i = 0; i < 4; i++)
        if (out[i] && st_check_output(out[i], err, sizeof err)) return fail("%s", err);
    if (c->files.save) {
        snprintf(tmp, sizeof tmp, "%s.tmp", c->files.save);
        if (st_check_output(tmp, err, sizeof err)) return fail("%s", err);
    }
    if (c->files.diag && make_dir(c->files.diag)) return 1;
    if (c->files.out && make_dir(c->files.out)) return 1;
    return 0;
}

static void print_setup(const config* c, const dataset* ds, double unigram) {
    say("normblocks %s trainer%s\n", NB_VERSION_STRING,
        g_ranks > 1 ? "" : dist_have_mpi() ? " (MPI build, 1 rank)" : "");
    if (g_ranks > 1) say("MPI: %d ranks, data parallel\n", g_ranks);
#ifdef OPENBLAS_SEQUENTIAL
    {
        const char* core = openblas_get_corename();
        say("BLAS: OpenBLAS, core %s, %d BLAS thread(s)%s\n", core ? core : "?", nb_blas_threads(),
            (tuned_env_set() & TUNE_CORE) ? " (set by train: OpenBLAS picked its generic SSE3 kernels, "
            "Prescott, on this CPU; export OPENBLAS_CORETYPE to choose)" : "");
        if (core && !strcmp(core, "Prescott"))
            say("warning: OpenBLAS picked its slow generic SSE3 kernels (Prescott); on AVX-512 CPUs "
                "export OPENBLAS_CORETYPE=SkylakeX (AVX2: Haswell) before running\n");
    }
#else
    say("BLAS: %s\n", nb_blas_threads() ? "cblas" : "none");
#endif
    if (tuned_env_set() & TUNE_WAIT)
        say("OpenMP: passive waiting (set by train: another task was running at the start, and spinning threads "
            "collapse when another process competes for the cores; export OMP_WAIT_POLICY=ACTIVE to spin)\n");
    else if (tuned_wait_idle())
        say("OpenMP: the runtime's default waiting, spin then sleep (chosen by train: the CPUs were idle at the "
            "start; export OMP_WAIT_POLICY=PASSIVE on a machine shared with busy processes)\n");
    else if (getenv("OMP_WAIT_POLICY")) say("OpenMP: OMP_WAIT_POLICY=%s, as exported\n", getenv("OMP_WAIT_POLICY"));
    else say("OpenMP: the runtime's default waiting (GOMP_SPINCOUNT as exported)\n");
    if (nb_blas_threads() > 1)
        say("note: BLAS runs %d threads of its own; run with OPENBLAS_NUM_THREADS=1 (normblocks "
            "does the threading, --threads N)\n", nb_blas_threads());
    if (c->sample.load && !c->sample.eval && !c->sample.dump) { fflush(stdout); return; } /* sampling: no data */
    if (ds->text)
        say("data: %s, %zu bytes (%zu train, %zu held out)\n", c->data.path, ds->n, ds->n_train,
            ds->n - ds->n_train);
    else {
        char ex[64];
        add_example(ds, ex);
        say("data: synthetic %d-digit addition, format %s (\"%s\"), loss on answer bytes, "
            "10%% of pairs held out (a+b and b+a alike)\n", c->data.digits, format_name(c->data.format), ex);
    }
    say("unigram entropy baseline: %.4f nats/token (loss of predicting the byte frequencies)\n",
        unigram);
    fflush(stdout);
}

/* --profile: the training steps' time by part, as shares of it. The library's parts are
   disjoint; the model step's remainder is the trainer's embedding, LM head (its GEMMs are in
   "GEMMs"), loss and their backward. */
static void print_profile(const history* h) {
    const double total = h->train_seconds;
    double lib = 0, rest;
    int k;
    say("profile of the %d training steps (%.2f ms/step):\n", h->n_steps,
        1000 * total / (h->n_steps ? h->n_steps : 1));
    for (k = 0; k < NB_PROF_PARTS; k++) {
        lib += h->prof.seconds[k];
        say("  %-34s %5.1f%%\n", nb_prof_part_name(k), 100 * h->prof.seconds[k] / total);
    }
    say("  %-34s %5.1f%%\n", "embedding, LM head and loss",
        100 * (h->model_seconds - lib - h->comm_in_model) / total);
    say("  %-34s %5.1f%%\n", "optimizer (gradient norm, AdamW)", 100 * h->opt_seconds / total);
    say("  %-34s %5.1f%%\n", "communication not hidden", 100 * h->comm_seconds / total);
    rest = total - (h->model_seconds - h->comm_in_model) - h->opt_seconds - h->comm_seconds;
    say("  %-34s %5.1f%%\n", "the rest (batches, logging)", 100 * (rest > 0 ? rest : 0) / total);
    say("  (GEMMs alone: %.1f%%; everything else: %.1f%%)\n", 100 * h->prof.seconds[NB_PROF_GEMM] / total,
        100 * (1 - h->prof.seconds[NB_PROF_GEMM] / total));
}

static int report(const history* h, const dataset* ds, double unigram) {
    if (h->diverged_at >= 0) {
        say("training diverged at step %d\n", h->diverged_at);
        return 1;
    }
    /* a run resumed at its last step trains nothing: no training loss to report */
    if (h->n_steps) say("final: step %d loss %.9g val_loss %.9g (unigram %.4f)", h->steps_done, h->final_loss,
                        h->final_val, unigram);
    else say("final: step %d (the checkpoint was at --steps: no step trained) val_loss %.9g (unigram %.4f)",
             h->steps_done, h->final_val, unigram);
    if (!ds->text && isfinite(h->accuracy))
        say(" answer accuracy %.1f%% (exact match on %d held-out problems)", 100 * h->accuracy,
            h->n_problems);
    say("\n");
    if (h->n_steps > 10) {
        if (h->spikes)
            say("loss spikes: %d (the largest %.1fx the running average; a spike does not stop a run unless "
                "--spike-stop asks)\n", h->spikes, h->worst_spike);
        else say("loss spikes: 0\n");
    }
    if (h->n_steps) { /* what gated attention (the sink) and QK-Clip (the logits) act on */
        say("attention: largest logit %.4g at the last step, %.4g at most over the run; first-key mass "
            "%.4g (mean over layers, heads and query rows)", h->max_logit, h->max_logit_peak, h->first_mass);
        if (h->sinks) say("; sink mass %.4g (the same mean)", h->sink_mass);
        if (h->clips) say("; QK-Clip scaled %lld heads over the run", h->clips);
        say("\n");
    }
    if (h->gated && isfinite(h->gate_mean)) /* the gated-attention paper's sparsity: far below 0.5 */
        say("attention gates: mean sigmoid(G) %.4g over layers and heads at the last logged step; the "
            "smallest head's %.4g (layer %d head %d)\n", h->gate_mean, h->gate_min,
            h->gate_min_at / h->n_heads, h->gate_min_at % h->n_heads);
    if (h->hc_logged) hyper_say_gains(h);
    if (h->dwa) dwa_say(h);
    if (h->ar_logged) attnres_say(h);
    if (h->unet) unet_say(h);
    if (h->n_shown) say_shown(ds, h->shown, h->n_shown);
    if (h->train_seconds > 0)
        say("throughput: %.0f tok/s over the training steps (%.2f ms/step); communication not "
            "hidden: %.1f%% of the step\n", h->tokens / h->train_seconds,
            1000 * h->train_seconds / (h->n_steps ? h->n_steps : 1),
            100 * h->comm_seconds / h->train_seconds);
    if (h->prof.calls[NB_PROF_GEMM] > 0 && h->train_seconds > 0) print_profile(h); /* --profile */
    return 0;
}

int main(int argc, char** argv) {
    config c;
    dataset ds;
    history h;
    double unigram, chosen[2] = {0, 0};
    int help = 0, rc;
    tuned_env_restart(argv, TUNE_CORE | TUNE_WAIT);
    if (dist_init(&argc, &argv)) return 1;
    {   /* the handler only sets g_stop; the loop saves and stops. mpirun passes Ctrl-C on as
           SIGTERM. No SA_RESTART: a write blocked on a full pipe returns, so the save runs. */
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_signal;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGINT, &sa, NULL);
        sigaction(SIGTERM, &sa, NULL);
    }
    g_same_everywhere = 1;      /* setup: every rank checks the same things */
    config_defaults(&c);
    rc = parse_args(argc, argv, &c, &help);
    if (!rc && !help && c.sample.load) {
        /* the checkpoint's configuration, then the command line over it (parse_args checked
           the flags already; they can only repeat the model, or choose what to evaluate) */
        const char* path = c.sample.load;
        config_defaults(&c);
        rc = load_config(path, &c) || parse_args(argc, argv, &c, &help);
        if (!rc && (c.sample.eval || c.sample.dump) && c.sample.load_text && !c.data.path)
            rc = fail("%s was trained on a file: --%s needs it (or another) as --data FILE", path,
                      c.sample.eval ? "eval" : "dump");
    }
    if (!rc && help) {
        dist_finalize();
        return 0;
    }
    if (!rc) { /* validate the model before touching data, so shape errors come first */
        model probe;
        rc = model_init(&probe, &c);
        /* what --precision auto and --backend auto resolved to (a timing), kept for the run */
        chosen[0] = probe.s.desc.gemm.precision == NB_PRECISION_BF16;
        chosen[1] = probe.s.desc.gemm.backend == NB_BACKEND_DNNL;
        model_free(&probe);
    }
    if (!rc && g_rank == 0) rc = check_outputs(&c);
    if (dist_agree(rc)) {
        dist_finalize();
        return 1;
    }
    /* every rank runs what all of them timed as worth it, and the run does not time again */
    dist_sum(chosen, 2);
    c.machine.bf16 = chosen[0] == g_ranks;
    c.machine.backend = chosen[1] == g_ranks ? NB_BACKEND_DNNL : NB_BACKEND_BLAS;
    if (c.sample.load && c.sample.load_text && !c.data.path) { /* sampling a model of a file: no data needed */
        memset(&ds, 0, sizeof ds);
        ds.text = 1;
    } else if (load_data(&c, &ds)) {
        dist_finalize();
        return 1;
    }
    g_same_everywhere = 0;
    unigram = ds.text && !ds.bytes ? NAN : unigram_entropy(&ds, c.loop.seq);
    print_setup(&c, &ds, unigram);
    if (c.sample.load) {
        rc = run_loaded(&c, &ds);
    } else if (sweeping(&c)) {
        rc = run_sweep(&c, &ds, unigram, argc, argv);
    } else {
        rc = train_run(&c, &ds, unigram, &h, 0);
        if (!rc) rc = report(&h, &ds, unigram);
        history_free(&h);
    }
    free(ds.bytes);
    fflush(stdout);
    dist_finalize();
    return rc;
}
