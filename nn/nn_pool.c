/* nn_pool — the persistent worker pool (nn_pool.h).
 *
 * Workers 1..nw wait on `go` for a new generation, then claim shares of the
 * job (bits of two atomic words tagged with the generation) until none is
 * left; the caller claims shares too, then waits on `done` until all nt are
 * finished.  Each thread first claims the share of its own index (the
 * caller 0, worker w share w), then any left: on timely threads share t
 * runs on the same core call after call, so a kernel split by samples reads
 * the rows the previous kernel's share t wrote in that core's caches; a
 * worker the scheduler has not run yet leaves its share to the others.
 * Which thread runs a share never changes what it computes.  One job at a
 * time: `busy` is taken with trylock, and a caller that cannot take it
 * runs all shares inline (same split, same results). */
#include "nn/nn_pool.h"
#include "nn/nn_core.h"

#include <assert.h>
#include <cblas.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

static struct {
    pthread_mutex_t mu, busy;
    pthread_cond_t  go, done;
    pthread_t       th[NN_POOL_MAX_THREADS];
    int             nw;       /* workers started: ids 1..nw */
    int             want;     /* set count, 0: follow OpenBLAS */
    unsigned        gen;      /* job generation */
    int             stop;
    nn_pool_fn      fn;
    void           *ctx;
    int             nt;       /* job width */
    uint64_t        claim[2]; /* gen << 32 | bit b: share 32 w + b claimed */
    int             finished; /* shares of the job done */
    unsigned        gen0[NN_POOL_MAX_THREADS]; /* generation at a worker's start */
} s_pool = {.mu = PTHREAD_MUTEX_INITIALIZER, .busy = PTHREAD_MUTEX_INITIALIZER,
            .go = PTHREAD_COND_INITIALIZER, .done = PTHREAD_COND_INITIALIZER};

/* How long a thread polls (a worker for a new job, the caller for the
 * job's end) before it sleeps on a condition variable: kernels come in
 * bursts with short serial gaps, and a wake-up through the kernel costs
 * more than a short conv chunk (tens of microseconds, far more for an idle
 * virtual CPU).  Measured in time, not polls, since a pause instruction
 * lasts 10 cycles on one CPU and 140 on another.  LPGOSSIP_POOL_SPIN_US
 * overrides the default (0: sleep at once). */
#ifndef S_SPIN_US
#define S_SPIN_US 1000
#endif

static void s_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ volatile("yield");
#endif
}

static double s_spin_s(void)
{
    static long spin_us = -1;
    long us = __atomic_load_n(&spin_us, __ATOMIC_RELAXED);
    if (us < 0) {
        const char *e = getenv("LPGOSSIP_POOL_SPIN_US");
        us = e && *e ? strtol(e, NULL, 10) : S_SPIN_US;
        us = us < 0 ? 0 : us > 1000000 ? 1000000 : us;
        __atomic_store_n(&spin_us, us, __ATOMIC_RELAXED);
    }
    return (double)us * 1e-6;
}

/* Polls until *p differs from v (unequal = 1) or reaches v (unequal = 0),
 * for at most the spin time; whether it did. */
static int s_poll(const unsigned *p, unsigned v, int unequal)
{
    const double budget = s_spin_s();
    if (budget <= 0)
        return 0;
    double until = 0;
    for (unsigned i = 0;; i++) {
        if ((__atomic_load_n(p, __ATOMIC_ACQUIRE) != v) == unequal)
            return 1;
        if ((i & 63) == 0) {
            double now = nn_now();
            if (until == 0)
                until = now + budget;
            else if (now > until)
                return 0;
        }
        s_relax();
    }
}

/* Claims share t of job `gen`: whether it was unclaimed. */
static int s_take(unsigned gen, int t)
{
    uint64_t *w = &s_pool.claim[t >> 5], bit = (uint64_t)1 << (t & 31);
    uint64_t c = __atomic_load_n(w, __ATOMIC_ACQUIRE);
    for (;;) {
        if ((unsigned)(c >> 32) != gen || (c & bit))
            return 0;
        if (__atomic_compare_exchange_n(w, &c, c | bit, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
            return 1;
    }
}

/* Share `pref` of job `gen` if unclaimed, else the lowest unclaimed one;
 * -1 when none is left or the job is not the current one (a late worker
 * never touches a newer job). */
static int s_claim(unsigned gen, int nt, int pref)
{
    if (pref < nt && s_take(gen, pref))
        return pref;
    for (int w = 0; 32 * w < nt; w++) {
        const int n = nt - 32 * w < 32 ? nt - 32 * w : 32;
        const uint32_t all = n == 32 ? 0xffffffffu : ((uint32_t)1 << n) - 1;
        uint64_t c = __atomic_load_n(&s_pool.claim[w], __ATOMIC_ACQUIRE);
        for (;;) {
            if ((unsigned)(c >> 32) != gen)
                return -1;
            const uint32_t open = ~(uint32_t)c & all;
            if (!open)
                break;
            const int b = __builtin_ctz(open);
            if (__atomic_compare_exchange_n(&s_pool.claim[w], &c, c | (uint64_t)1 << b, 0,
                                            __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
                return 32 * w + b;
        }
    }
    return -1;
}

/* Runs shares of job `gen`, `pref` (this thread's index) first, until none
 * is left; the last one done wakes the caller. */
static void s_work(unsigned gen, nn_pool_fn fn, void *ctx, int nt, int pref)
{
    int t;
    while ((t = s_claim(gen, nt, pref)) >= 0) {
        fn(ctx, t, nt);
        if (__atomic_add_fetch(&s_pool.finished, 1, __ATOMIC_ACQ_REL) == nt) {
            pthread_mutex_lock(&s_pool.mu);
            pthread_cond_signal(&s_pool.done);
            pthread_mutex_unlock(&s_pool.mu);
        }
    }
}

static void *s_worker(void *arg)
{
    const int id = (int)(size_t)arg;
    pthread_mutex_lock(&s_pool.mu);
    unsigned seen = s_pool.gen0[id]; /* a job posted since is this worker's too */
    for (;;) {
        pthread_mutex_unlock(&s_pool.mu);
        s_poll(&s_pool.gen, seen, 1);
        pthread_mutex_lock(&s_pool.mu);
        while (s_pool.gen == seen && !s_pool.stop)
            pthread_cond_wait(&s_pool.go, &s_pool.mu);
        if (s_pool.stop)
            break;
        seen = s_pool.gen;
        nn_pool_fn fn = s_pool.fn;
        void *ctx = s_pool.ctx;
        const int nt = s_pool.nt;
        pthread_mutex_unlock(&s_pool.mu);
        s_work(seen, fn, ctx, nt, id);
        pthread_mutex_lock(&s_pool.mu);
    }
    pthread_mutex_unlock(&s_pool.mu);
    return NULL;
}

static void s_stop_all(void)
{
    pthread_mutex_lock(&s_pool.busy);
    pthread_mutex_lock(&s_pool.mu);
    s_pool.stop = 1;
    pthread_cond_broadcast(&s_pool.go);
    const int nw = s_pool.nw;
    pthread_mutex_unlock(&s_pool.mu);
    for (int i = 1; i <= nw; i++)
        pthread_join(s_pool.th[i], NULL);
    pthread_mutex_lock(&s_pool.mu);
    s_pool.nw = 0;
    pthread_mutex_unlock(&s_pool.mu);
    pthread_mutex_unlock(&s_pool.busy);
}

/* Starts workers up to ids n-1 (caller holds busy). */
static void s_grow(int n)
{
    static int registered;
    if (!registered) {
        registered = 1;
        atexit(s_stop_all);
    }
    pthread_mutex_lock(&s_pool.mu);
    int nw = s_pool.nw;
    pthread_mutex_unlock(&s_pool.mu);
    while (nw + 1 < n && !s_pool.stop) {
        s_pool.gen0[nw + 1] = s_pool.gen; /* stable: gen changes under busy only */
        if (pthread_create(&s_pool.th[nw + 1], NULL, s_worker, (void *)(size_t)(nw + 1)) != 0)
            break;
        nw++;
        pthread_mutex_lock(&s_pool.mu);
        s_pool.nw = nw;
        pthread_mutex_unlock(&s_pool.mu);
    }
}

static int s_clamp(int n)
{
    return n < 1 ? 1 : n > NN_POOL_MAX_THREADS ? NN_POOL_MAX_THREADS : n;
}

static int s_threads_locked(void)
{
    return s_clamp(s_pool.want ? s_pool.want : openblas_get_num_threads());
}

void nn_pool_set_threads(int n)
{
    pthread_mutex_lock(&s_pool.busy);
    s_pool.want = n < 1 ? 0 : s_clamp(n);
    s_grow(s_threads_locked());
    pthread_mutex_unlock(&s_pool.busy);
}

int nn_pool_threads(void)
{
    int w = __atomic_load_n(&s_pool.want, __ATOMIC_RELAXED);
    return s_clamp(w ? w : openblas_get_num_threads());
}

void nn_pool_run(int nt, nn_pool_fn fn, void *ctx)
{
    assert(nt >= 1 && nt <= NN_POOL_MAX_THREADS);
    if (nt == 1 || pthread_mutex_trylock(&s_pool.busy) != 0) {
        for (int t = 0; t < nt; t++)
            fn(ctx, t, nt);
        return;
    }
    s_grow(nt);
    pthread_mutex_lock(&s_pool.mu);
    const unsigned gen = s_pool.gen + 1;
    s_pool.fn = fn;
    s_pool.ctx = ctx;
    s_pool.nt = nt;
    __atomic_store_n(&s_pool.finished, 0, __ATOMIC_RELEASE);
    __atomic_store_n(&s_pool.claim[0], (uint64_t)gen << 32, __ATOMIC_RELEASE);
    __atomic_store_n(&s_pool.claim[1], (uint64_t)gen << 32, __ATOMIC_RELEASE);
    __atomic_store_n(&s_pool.gen, gen, __ATOMIC_RELEASE);
    if (s_pool.nw > 0)
        pthread_cond_broadcast(&s_pool.go);
    pthread_mutex_unlock(&s_pool.mu);
    s_work(gen, fn, ctx, nt, 0);
    s_poll((const unsigned *)&s_pool.finished, (unsigned)nt, 0);
    pthread_mutex_lock(&s_pool.mu);
    while (__atomic_load_n(&s_pool.finished, __ATOMIC_ACQUIRE) < nt)
        pthread_cond_wait(&s_pool.done, &s_pool.mu);
    pthread_mutex_unlock(&s_pool.mu);
    pthread_mutex_unlock(&s_pool.busy);
}

static int s_fault; /* nn_pool_fault */

void nn_pool_fault(int on)
{
    __atomic_store_n(&s_fault, on != 0, __ATOMIC_RELAXED);
}

void nn_pool_share(size_t n, int t, int nt, size_t align, size_t *lo, size_t *hi)
{
    assert(nt >= 1 && t >= 0 && t < nt && align >= 1);
    size_t a = n * (size_t)t / (size_t)nt, b = n * (size_t)(t + 1) / (size_t)nt;
    a = a / align * align;
    b = t + 1 == nt ? n : b / align * align;
    if (t > 0 && a + align <= b && __atomic_load_n(&s_fault, __ATOMIC_RELAXED))
        a += align; /* the deliberate gap */
    *lo = a;
    *hi = b;
}
