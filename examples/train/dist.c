/* dist.c: data parallelism over MPI (built as train_mpi when CMake finds MPI; TR_MPI), or a
   single-process stand-in with the same interface (train).

   Gradients: the backward reports each finished range of the flat gradient buffer (head first,
   then the stack's final norms and layers top down, then the embedding: descending offsets, one
   contiguous front). Reported ranges gather into a pending bucket; once it holds bucket_values
   it starts a non-blocking reduction, and every later report calls MPI_Testall, which is what
   moves Open MPI's non-blocking collectives forward (it has no progress thread). So the
   reduction of layer l runs while layers l-1 .. 0 compute, as buckets do in PyTorch DDP.
     plain:  MPI_Iallreduce in place: every rank ends with the summed gradient. Open MPI's
             non-blocking collectives (coll/libnbc) pick their all-reduce algorithm by size;
             at 2 ranks its default for in place measured 1.5x slower than its ring (13 MiB;
             1.3x slower than out of place), the d=512 step 1-7% (bench/SCALING.md), so
             dist_init selects the ring (coll_libnbc_iallreduce_algorithm 1) unless the
             environment names an algorithm: in place, no second gradient buffer.
     ZeRO-1: MPI_Ireduce_scatter of the bucket: the piece of the bucket inside rank r's shard
             goes to rank r only (recvcounts = the bucket cut at shard bounds); the optimizer
             updates that shard, and MPI_Iallgatherv shares the updated parameters.
   Every MPI call is checked: the communicator returns errors (MPI_ERRORS_RETURN) and a failure
   prints the call and MPI's reason, then MPI_Abort ends every rank; a rank that dies makes
   mpirun end the job.
   A peer or a link that goes silent returns no error: over TCP a collective would wait while
   the kernel retransmits (many minutes). So every collective is non-blocking and waited for by
   polling (MPI_Testall, which is what MPI_Waitall does inside Open MPI anyway), and one that
   has not completed within --comm-timeout seconds (default 600, as PyTorch's NCCL watchdog;
   0 waits forever) prints "rank R: <call> has not completed in S s (a peer or the network is
   gone)" and calls MPI_Abort. That ends a job whose peer hangs; when a host's link is gone,
   mpirun cannot reach that host's daemon to finish the abort and waits for TCP to give up, so
   there the lost-host detection of mpirun itself (oob_tcp_keepalive_*, shorter than this
   timeout; tests/test_netns.sh) is what ends the job. */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include "train.h"

#include <signal.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#ifdef TR_MPI
#include <mpi.h>
#endif

enum { MAX_BUCKETS = 96 }; /* more launches than this in one backward: wait, then reuse */

struct dist {
    size_t n, bucket;
    int zero;
    size_t lo, hi;             /* the update range of this rank */
    nb_real *g, *gshard;       /* local gradients; ZeRO: the reduced shard */
    size_t pend_lo, pend_hi;   /* reported, not yet launched */
    int launched;
    double wait;
#ifdef TR_MPI
    MPI_Request req[MAX_BUCKETS];
    int *bcounts;               /* MAX_BUCKETS x ranks recvcounts of the launched buckets */
    int *scounts, *sdispls;     /* shard sizes and offsets (ranks) */
#endif
};

void dist_shard(const dist* d, int rank, size_t* lo, size_t* hi) {
    /* equal shards rounded up to 16 values, so every shard starts vector-aligned */
    const size_t chunk = ((d->n + (size_t)g_ranks - 1) / (size_t)g_ranks + 15) & ~(size_t)15;
    const size_t a = chunk * (size_t)rank, b = a + chunk;
    *lo = a < d->n ? a : d->n;
    *hi = b < d->n ? b : d->n;
}

void dist_update_range(const dist* d, size_t* lo, size_t* hi) { *lo = d->lo; *hi = d->hi; }

double dist_wait_seconds(dist* d) {
    const double w = d ? d->wait : 0;
    if (d) d->wait = 0;
    return w;
}

void dist_grads_begin(dist* d, nb_real* g) {
    d->g = g;
    d->pend_lo = d->pend_hi = d->n;
    d->launched = 0;
}

/* memory: running out on one rank ends the job (the others would wait in a collective) */
void* xcalloc(size_t n, size_t size) {
    void* p = calloc(n ? n : 1, size ? size : 1);
    if (!p) {
        g_same_everywhere = 0; /* this rank's own failure */
        fail("out of memory (%zu x %zu bytes)", n, size);
        dist_abort(1); /* nothing sensible can continue without memory */
    }
    return p;
}

#ifdef TR_MPI
/* ---------------------------------------------------------------------------------------- */

static int g_mpi_up = 0;
static double g_comm_timeout = 600; /* seconds; 0 = wait forever (dist_set_comm_timeout) */

static void check(int rc, const char* what) {
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (rc == MPI_SUCCESS) return;
    MPI_Error_string(rc, msg, &len);
    g_same_everywhere = 0; /* this rank's own failure */
    fail("%s failed: %s (a rank died or the network failed); ending the job", what, msg);
    MPI_Abort(MPI_COMM_WORLD, 1);
}

/* Wait for n requests of the collective `what`: MPI_Waitall, or with a timeout, by polling
   MPI_Testall (which drives Open MPI's progress as MPI_Waitall does) and checking the clock
   every 256 polls. */
static void wait_reqs(int n, MPI_Request* req, const char* what) {
    double t0;
    unsigned spins = 0;
    int done = 0;
    if (n <= 0) return;
    if (!(g_comm_timeout > 0)) {
        check(MPI_Waitall(n, req, MPI_STATUSES_IGNORE), what);
        return;
    }
    t0 = now_s();
    for (;;) {
        check(MPI_Testall(n, req, &done, MPI_STATUSES_IGNORE), what);
        if (done) return;
        if ((++spins & 255) == 0 && now_s() - t0 > g_comm_timeout) {
            g_same_everywhere = 0; /* this rank's own view */
            fflush(stdout);
            fail("%s has not completed in %g s (a peer or the network is gone; --comm-timeout); "
                 "ending the job", what, g_comm_timeout);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
    }
}

/* one non-blocking collective started by `rc`, then waited for */
static void collective(int rc, MPI_Request* req, const char* what) {
    check(rc, what);
    wait_reqs(1, req, what);
}

int dist_have_mpi(void) { return 1; }

void dist_set_comm_timeout(double seconds) { g_comm_timeout = seconds; }

int dist_init(int* argc, char*** argv) {
    int provided = 0;
    /* before MPI_Init, which reads Open MPI's parameters from the environment (other MPIs
       ignore the variable); the user's own choice stays */
    setenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm", "1", 0);
    /* only the main thread calls MPI, between OpenMP regions */
    if (MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) {
        fprintf(stderr, "train: error: MPI_Init_thread failed\n");
        return 1;
    }
    g_mpi_up = 1;
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    check(MPI_Comm_rank(MPI_COMM_WORLD, &g_rank), "MPI_Comm_rank");
    check(MPI_Comm_size(MPI_COMM_WORLD, &g_ranks), "MPI_Comm_size");
    /* a peer that dies mid-send must not take this rank with it through SIGPIPE: that death
       raced the peer's own and mpirun then blamed this rank ("rank 0 exited on signal 13");
       ignored, the write fails, and the peer's daemon reports what really happened */
    if (g_ranks > 1) signal(SIGPIPE, SIG_IGN);
    return 0;
}

void dist_finalize(void) {
    if (g_mpi_up) MPI_Finalize();
    g_mpi_up = 0;
}


void dist_abort(int code) {
    fflush(stdout);
    if (g_mpi_up && g_ranks > 1) MPI_Abort(MPI_COMM_WORLD, code);
    dist_finalize();
    exit(code);
}

int dist_agree(int rc) {
    int all = rc;
    MPI_Request r;
    if (g_ranks > 1)
        collective(MPI_Iallreduce(&rc, &all, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD, &r), &r,
                   "MPI_Iallreduce (agreement)");
    return all;
}

void dist_sum(double* x, int n) {
    MPI_Request r;
    if (g_ranks > 1)
        collective(MPI_Iallreduce(MPI_IN_PLACE, x, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD, &r), &r,
                   "MPI_Iallreduce (sums)");
}

void dist_max(double* x, int n) {
    MPI_Request r;
    if (g_ranks > 1)
        collective(MPI_Iallreduce(MPI_IN_PLACE, x, n, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD, &r), &r,
                   "MPI_Iallreduce (maxima)");
}

void dist_bcast(void* buf, size_t bytes) {
    char* p = (char*)buf;
    if (g_ranks < 2) return;
    while (bytes > 0) {
        const int k = bytes > (size_t)INT_MAX ? INT_MAX : (int)bytes;
        MPI_Request r;
        collective(MPI_Ibcast(p, k, MPI_BYTE, 0, MPI_COMM_WORLD, &r), &r, "MPI_Ibcast");
        p += k;
        bytes -= (size_t)k;
    }
}

dist* dist_create(size_t n, int zero, size_t bucket_values) {
    dist* d = (dist*)xcalloc(1, sizeof *d);
    int r;
    d->n = n;
    d->zero = zero && g_ranks > 1;
    d->bucket = bucket_values ? bucket_values : 1;
    d->scounts = (int*)xcalloc((size_t)g_ranks, sizeof(int));
    d->sdispls = (int*)xcalloc((size_t)g_ranks, sizeof(int));
    d->bcounts = (int*)xcalloc((size_t)MAX_BUCKETS * g_ranks, sizeof(int));
    for (r = 0; r < g_ranks; r++) {
        size_t lo, hi;
        dist_shard(d, r, &lo, &hi);
        if (hi > (size_t)INT_MAX) { /* MPI counts and offsets are int */
            fail("%zu parameters: too many for int MPI counts", n);
            dist_destroy(d);
            return NULL;
        }
        d->scounts[r] = (int)(hi - lo);
        d->sdispls[r] = (int)lo;
    }
    if (d->zero) {
        dist_shard(d, g_rank, &d->lo, &d->hi);
        d->gshard = (nb_real*)xcalloc(d->hi - d->lo, sizeof(nb_real));
    } else {
        d->lo = 0;
        d->hi = n;
    }
    return d;
}

void dist_destroy(dist* d) {
    if (!d) return;
    free(d->gshard); free(d->scounts); free(d->sdispls); free(d->bcounts);
    free(d);
}

static void progress(dist* d) {
    int flag;
    if (d->launched) check(MPI_Testall(d->launched, d->req, &flag, MPI_STATUSES_IGNORE), "MPI_Testall");
}

static void wait_all(dist* d) {
    const double t0 = now_s();
    wait_reqs(d->launched, d->req, d->zero ? "MPI_Ireduce_scatter (gradient buckets)"
                                           : "MPI_Iallreduce (gradient buckets)");
    d->launched = 0;
    d->wait += now_s() - t0;
}

/* start reducing [a, b) */
static void launch(dist* d, size_t a, size_t b) {
    while (a < b) {
        const size_t e = b - a > (size_t)(1 << 30) ? a + ((size_t)1 << 30) : b;
        int* cnt;
        int r;
        if (d->launched == MAX_BUCKETS) wait_all(d);
        cnt = d->bcounts + (size_t)d->launched * g_ranks;
        if (!d->zero) {
            check(MPI_Iallreduce(MPI_IN_PLACE, d->g + a, (int)(e - a), MPI_FLOAT, MPI_SUM,
                                 MPI_COMM_WORLD, &d->req[d->launched]), "MPI_Iallreduce");
        } else {
            size_t mine = a;
            for (r = 0; r < g_ranks; r++) { /* the bucket cut at the shard bounds */
                size_t lo, hi;
                dist_shard(d, r, &lo, &hi);
                if (lo < a) lo = a;
                if (hi > e) hi = e;
                cnt[r] = hi > lo ? (int)(hi - lo) : 0;
                if (r == g_rank && hi > lo) mine = lo;
            }
            check(MPI_Ireduce_scatter(d->g + a, d->gshard + (mine > d->lo ? mine - d->lo : 0), cnt,
                                      MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &d->req[d->launched]),
                  "MPI_Ireduce_scatter");
        }
        d->launched++;
        a = e;
    }
}

void dist_grads_ready(dist* d, size_t off, size_t count) {
    if (g_ranks < 2 || count == 0) return;
    if (off + count != d->pend_lo) { /* not adjacent (never with the stack's order): flush */
        if (d->pend_hi > d->pend_lo) launch(d, d->pend_lo, d->pend_hi);
        d->pend_hi = off + count;
    }
    d->pend_lo = off;
    if (d->pend_hi - d->pend_lo >= d->bucket) {
        launch(d, d->pend_lo, d->pend_hi);
        d->pend_hi = d->pend_lo;
    }
    progress(d);
}

nb_real* dist_grads_finish(dist* d) {
    if (g_ranks < 2) return d->g;
    if (d->pend_hi > d->pend_lo) launch(d, d->pend_lo, d->pend_hi);
    d->pend_lo = d->pend_hi = d->n;
    wait_all(d);
    return d->zero ? d->gshard : d->g;
}

void dist_params_gather(dist* d, nb_real* p) {
    double t0;
    MPI_Request r;
    if (!d->zero) return;
    t0 = now_s();
    collective(MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, p, d->scounts, d->sdispls,
                               MPI_FLOAT, MPI_COMM_WORLD, &r), &r, "MPI_Iallgatherv (parameters)");
    d->wait += now_s() - t0;
}

void dist_gather_shards(dist* d, nb_real* full, const nb_real* shard) {
    MPI_Request r;
    if (!d->zero) return;
    collective(MPI_Igatherv(shard, (int)(d->hi - d->lo), MPI_FLOAT, full, d->scounts, d->sdispls,
                            MPI_FLOAT, 0, MPI_COMM_WORLD, &r), &r, "MPI_Igatherv");
}

void dist_scatter_shards(dist* d, nb_real* shard, const nb_real* full) {
    MPI_Request r;
    if (!d->zero) {
        dist_bcast(shard, d->n * sizeof(nb_real));
        return;
    }
    collective(MPI_Iscatterv(full, d->scounts, d->sdispls, MPI_FLOAT, shard, (int)(d->hi - d->lo),
                             MPI_FLOAT, 0, MPI_COMM_WORLD, &r), &r, "MPI_Iscatterv");
}

#else
/* ---- one process: the same interface, nothing to communicate ------------------------------ */

int dist_have_mpi(void) { return 0; }
void dist_set_comm_timeout(double seconds) { (void)seconds; }
int dist_init(int* argc, char*** argv) { (void)argc; (void)argv; return 0; }
void dist_finalize(void) {}
void dist_abort(int code) { fflush(stdout); exit(code); }
int dist_agree(int rc) { return rc; }
void dist_sum(double* x, int n) { (void)x; (void)n; }
void dist_max(double* x, int n) { (void)x; (void)n; }
void dist_bcast(void* buf, size_t bytes) { (void)buf; (void)bytes; }

dist* dist_create(size_t n, int zero, size_t bucket_values) {
    dist* d = (dist*)xcalloc(1, sizeof *d);
    (void)zero;
    d->n = n;
    d->bucket = bucket_values;
    d->hi = n;
    return d;
}
void dist_destroy(dist* d) { free(d); }
void dist_grads_ready(dist* d, size_t off, size_t count) { (void)d; (void)off; (void)count; }
nb_real* dist_grads_finish(dist* d) { return d->g; }
void dist_params_gather(dist* d, nb_real* p) { (void)d; (void)p; }
void dist_gather_shards(dist* d, nb_real* full, const nb_real* shard) { (void)d; (void)full; (void)shard; }
void dist_scatter_shards(dist* d, nb_real* shard, const nb_real* full) { (void)d; (void)shard; (void)full; }
#endif
