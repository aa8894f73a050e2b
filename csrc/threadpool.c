/* threadpool.c: a persistent pool of worker threads for the kernels.
 *
 * infer_parallel_run(fn, arg) runs fn(arg, ith, nth) once for every share
 * ith = 0..nth-1, nth = the configured thread count.  The caller takes part.  A
 * hand-off is one atomic store: the workers spin on the pool's state word for a
 * short while after each task (decode calls mat-vecs every few microseconds, so
 * they are usually still spinning) and only then sleep on a condition variable.
 *
 * Shares are claimed, not assigned: the state word packs (generation, next share)
 * and every participant claims shares with a compare-and-swap until none is left.
 * On a busy machine a worker that is not running simply claims nothing and the
 * caller runs its share; the caller only waits for shares that were started.  A
 * worker that wakes late sees a newer generation and cannot touch an old task.
 *
 * Callers from several host threads (Python threads with the GIL released) are
 * serialised by a mutex.  A call from inside a task runs serially on that thread.
 *
 * Default thread count: the CPUs this process may run on (Linux and Windows: its
 * affinity mask; elsewhere the online CPUs), divided by the SMT siblings of a core
 * when the OS reports them (Linux, Windows), i.e. physical cores.
 * INFER_NUM_THREADS overrides it.
 */
#if !defined(_WIN32) && !defined(_GNU_SOURCE)
#define _GNU_SOURCE  /* sched_getaffinity, CPU_COUNT */
#endif
#include "infer_kernels.h"
#include "atomics.h"

#include <errno.h>
#include <stdlib.h>

#ifdef _WIN32
#define WIN32_LEAN_AND_MEAN
#include <windows.h>
typedef HANDLE thread_t;
typedef SRWLOCK mutex_t;
typedef CONDITION_VARIABLE cond_t;
#define MUTEX_INITIALIZER SRWLOCK_INIT
#define COND_INITIALIZER CONDITION_VARIABLE_INIT
#define mutex_lock(m) AcquireSRWLockExclusive(m)
#define mutex_unlock(m) ReleaseSRWLockExclusive(m)
#define cond_wait(c, m) SleepConditionVariableSRW(c, m, INFINITE, 0)
#define cond_broadcast(c) WakeAllConditionVariable(c)
static double now_seconds(void) {
    LARGE_INTEGER f, c;
    QueryPerformanceFrequency(&f);
    QueryPerformanceCounter(&c);
    return (double)c.QuadPart / (double)f.QuadPart;
}
#else
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>
typedef pthread_t thread_t;
typedef pthread_mutex_t mutex_t;
typedef pthread_cond_t cond_t;
#define MUTEX_INITIALIZER PTHREAD_MUTEX_INITIALIZER
#define COND_INITIALIZER PTHREAD_COND_INITIALIZER
#define mutex_lock(m) pthread_mutex_lock(m)
#define mutex_unlock(m) pthread_mutex_unlock(m)
#define cond_wait(c, m) pthread_cond_wait(c, m)
#define cond_broadcast(c) pthread_cond_broadcast(c)
static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
#endif

/* Thread-local storage goes by compiler, not by OS: MinGW gcc ignores
 * __declspec(thread), and MSVC has neither __thread nor (before VS 2022) C11's
 * _Thread_local. */
#if defined(_MSC_VER)
#define THREAD_LOCAL __declspec(thread)
#else
#define THREAD_LOCAL __thread
#endif

#define MAX_THREADS 256
/* How long an idle worker spins before it sleeps. */
#define SPIN_SECONDS 200e-6

#define STATE(gen, next) ((gen) << 32 | (next))
#define STATE_GEN(s) ((s) >> 32)
#define STATE_NEXT(s) ((s) & 0xffffffff)

static struct {
    int n_threads;          /* configured count, including the caller; 0 = not yet set */
    int n_workers;          /* running worker threads */
    thread_t threads[MAX_THREADS];
    mutex_t run_lock;       /* one parallel_run (or resize) at a time */
    mutex_t sleep_lock;     /* guards sleeping workers and the condition variable */
    cond_t wake;
    infer_atomic_i64 state;       /* generation << 32 | next unclaimed share */
    infer_atomic_i64 shares_done; /* shares of the current generation finished */
    infer_atomic_i64 n_sleeping;
    infer_atomic_i64 stop;
    infer_task_fn fn;       /* the task of the current generation */
    void *arg;
    int64_t nth;
} pool = {0, 0, {0}, MUTEX_INITIALIZER, MUTEX_INITIALIZER, COND_INITIALIZER, 0, 0, 0, 0, NULL, NULL, 0};

static THREAD_LOCAL int inside_task;

static int count_online_cpus(void) {
#if defined(_WIN32)
    /* The process's affinity mask, as on Linux (it covers one processor group: at
     * most 64 logical processors, which is as many as a process gets by default). */
    DWORD_PTR process_mask, system_mask;
    int n = 0;
    if (GetProcessAffinityMask(GetCurrentProcess(), &process_mask, &system_mask))
        for (; process_mask; process_mask &= process_mask - 1) n++;
    if (n <= 0) {
        SYSTEM_INFO si;
        GetSystemInfo(&si);
        n = (int)si.dwNumberOfProcessors;
    }
    return n > 0 ? n : 1;
#else
    int n = 0;
#if defined(__linux__)
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) n = CPU_COUNT(&set);
#endif
    if (n <= 0) n = (int)sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? n : 1;
#endif
}

/* SMT threads per core as the OS reports them for the first core (Linux: cpu0's
 * siblings, "0,8" or "0-1" -> 2; Windows: the first core's processor mask). */
static int smt_per_core(void) {
#if defined(_WIN32)
    DWORD bytes = 0;
    GetLogicalProcessorInformation(NULL, &bytes);   /* fails, giving the size needed */
    SYSTEM_LOGICAL_PROCESSOR_INFORMATION *info = bytes ? malloc(bytes) : NULL;
    int count = 0;
    if (info && GetLogicalProcessorInformation(info, &bytes)) {
        for (DWORD i = 0; i < bytes / sizeof *info; i++) {
            if (info[i].Relationship != RelationProcessorCore) continue;
            for (ULONG_PTR m = info[i].ProcessorMask; m; m &= m - 1) count++;
            break;
        }
    }
    free(info);
    return count > 0 ? count : 1;
#elif defined(__linux__)
    FILE *f = fopen("/sys/devices/system/cpu/cpu0/topology/thread_siblings_list", "r");
    if (!f) return 1;
    int count = 0, a, b;
    char sep;
    while (fscanf(f, "%d", &a) == 1) {
        b = a;
        if (fscanf(f, "%c", &sep) == 1 && sep == '-') {
            if (fscanf(f, "%d", &b) != 1) b = a;
            if (fscanf(f, "%c", &sep) != 1) sep = '\n';
        }
        count += b - a + 1;
        if (sep != ',') break;
    }
    fclose(f);
    return count > 0 ? count : 1;
#else
    return 1;
#endif
}

/* INFER_NUM_THREADS as a whole positive decimal number, else 0 (ignored: atoi
 * read "1e3" as 1).  infer.kernels warns about the ignored and capped values. */
static long env_num_threads(void) {
    const char *env = getenv("INFER_NUM_THREADS");
    if (!env || !*env) return 0;
    char *end = NULL;
    errno = 0;
    long v = strtol(env, &end, 10);
    while (*end == ' ' || *end == '\t' || *end == '\n') end++;
    if (errno || *end || end == env || v < 1) return 0;
    return v;
}

int infer_default_num_threads(void) {
    long env = env_num_threads();
    if (env > 0) return env < MAX_THREADS ? (int)env : MAX_THREADS;
    int n = count_online_cpus() / smt_per_core();
    if (n < 1) n = 1;
    return n < MAX_THREADS ? n : MAX_THREADS;
}

/* Call with run_lock held. */
static void choose_default(void) {
    if (pool.n_threads == 0) pool.n_threads = infer_default_num_threads();
}

/* Claims and runs shares of generation gen until none is left. */
static void take_shares(int64_t gen) {
    for (;;) {
        const int64_t st = infer_atomic_load(&pool.state);
        if (STATE_GEN(st) != gen || STATE_NEXT(st) >= pool.nth) return;
        if (!infer_atomic_cas(&pool.state, st, st + 1)) continue;
        /* A claimed share keeps its generation's task alive: read it only now. */
        inside_task = 1;
        pool.fn(pool.arg, (int)STATE_NEXT(st), (int)pool.nth);
        inside_task = 0;
        infer_atomic_add(&pool.shares_done, 1);
    }
}

#ifdef _WIN32
static DWORD WINAPI worker_main(LPVOID p)
#else
static void *worker_main(void *p)
#endif
{
    int64_t seen = (int64_t)(intptr_t)p;  /* the generation when the thread was created */
    for (;;) {
        /* Spin, then sleep, until the generation changes. */
        int64_t gen = STATE_GEN(infer_atomic_load(&pool.state));
        if (gen == seen) {
            const double until = now_seconds() + SPIN_SECONDS;
            int spins = 0;
            while ((gen = STATE_GEN(infer_atomic_load(&pool.state))) == seen) {
                infer_cpu_relax();
                if (++spins % 256 == 0 && now_seconds() > until) break;
            }
            if (gen == seen) {
                mutex_lock(&pool.sleep_lock);
                infer_atomic_add(&pool.n_sleeping, 1);
                while ((gen = STATE_GEN(infer_atomic_load(&pool.state))) == seen)
                    cond_wait(&pool.wake, &pool.sleep_lock);
                infer_atomic_add(&pool.n_sleeping, -1);
                mutex_unlock(&pool.sleep_lock);
            }
        }
        seen = gen;
        if (infer_atomic_load(&pool.stop)) break;
        take_shares(gen);
    }
#ifdef _WIN32
    return 0;
#else
    return NULL;
#endif
}

/* Starts a new generation with the task fields already set, and wakes sleepers. */
static int64_t publish(void) {
    const int64_t gen = STATE_GEN(infer_atomic_load(&pool.state)) + 1;
    infer_atomic_store(&pool.shares_done, 0);
    infer_atomic_store(&pool.state, STATE(gen, 0));
    /* A worker about to sleep counts itself, then re-checks the state under
     * sleep_lock; both sides are sequentially consistent, so either it sees the new
     * generation or we see it sleeping.  The fence makes that store-then-load order
     * explicit: qemu-user on an x86 host lets an AArch64 STLR pass a later LDAR, and
     * the worker then slept through a generation (a selftest barrier timed out in CI). */
    infer_atomic_fence();
    if (infer_atomic_load(&pool.n_sleeping) > 0) {
        mutex_lock(&pool.sleep_lock);
        cond_broadcast(&pool.wake);
        mutex_unlock(&pool.sleep_lock);
    }
    return gen;
}

static void wait_done(void) {
    int spins = 0;
    while (infer_atomic_load(&pool.shares_done) < pool.nth) {
        infer_cpu_relax();
        /* A descheduled worker holding a share should get our core. */
        if (++spins % 4096 == 0) infer_yield_thread();
    }
}

static void stop_workers(void) {
    if (pool.n_workers == 0) return;
    infer_atomic_store(&pool.stop, 1);
    pool.nth = 0;
    publish();
    for (int i = 0; i < pool.n_workers; i++) {
#ifdef _WIN32
        WaitForSingleObject(pool.threads[i], INFINITE);
        CloseHandle(pool.threads[i]);
#else
        pthread_join(pool.threads[i], NULL);
#endif
    }
    pool.n_workers = 0;
    infer_atomic_store(&pool.stop, 0);
}

#ifndef _WIN32
/* A forked child has only the thread that forked: forget the parent's workers (a
 * task waiting at a barrier for their shares would hang) and its lock states. */
static void forget_workers_in_child(void) {
    pthread_mutex_t fresh_mutex = PTHREAD_MUTEX_INITIALIZER;
    pthread_cond_t fresh_cond = PTHREAD_COND_INITIALIZER;
    pool.run_lock = fresh_mutex;
    pool.sleep_lock = fresh_mutex;
    pool.wake = fresh_cond;
    pool.n_workers = 0;
    pool.n_sleeping = 0;
    inside_task = 0;
}
#endif

static void start_workers(int n) {
#ifndef _WIN32
    static int atfork_registered;
    if (!atfork_registered) {
        pthread_atfork(NULL, NULL, forget_workers_in_child);
        atfork_registered = 1;
    }
#endif
    /* Each worker starts from the current generation, not the one it sees when it
     * first runs: the first task may be published before it is scheduled. */
    void *gen = (void *)(intptr_t)STATE_GEN(infer_atomic_load(&pool.state));
    for (int i = 0; i < n; i++) {
#ifdef _WIN32
        pool.threads[i] = CreateThread(NULL, 0, worker_main, gen, 0, NULL);
        if (pool.threads[i] == NULL) break;
#else
        if (pthread_create(&pool.threads[i], NULL, worker_main, gen) != 0) break;
#endif
        pool.n_workers = i + 1;
    }
}

void infer_parallel_run(infer_task_fn fn, void *arg) {
    if (inside_task || pool.n_threads == 1) {
        fn(arg, 0, 1);
        return;
    }
    mutex_lock(&pool.run_lock);
    choose_default();
    if (pool.n_threads == 1) {
        mutex_unlock(&pool.run_lock);
        fn(arg, 0, 1);
        return;
    }
    if (pool.n_workers != pool.n_threads - 1) {
        stop_workers();
        start_workers(pool.n_threads - 1);
    }
    pool.fn = fn;
    pool.arg = arg;
    /* Shares = threads that exist: a task may wait at a barrier for all its shares,
     * so there must never be more shares than participants. */
    pool.nth = pool.n_workers + 1;
    take_shares(publish());
    wait_done();
    mutex_unlock(&pool.run_lock);
}

void infer_set_num_threads(int n) {
    if (n < 1) n = 1;
    if (n > MAX_THREADS) n = MAX_THREADS;
    if (inside_task) {   /* run_lock is held by this task's caller: resize on the next run */
        pool.n_threads = n;
        return;
    }
    mutex_lock(&pool.run_lock);
    pool.n_threads = n;
    if (pool.n_workers > n - 1) stop_workers();  /* surplus threads go now; new ones on use */
    mutex_unlock(&pool.run_lock);
}

int infer_get_num_threads(void) {
    /* Lock-free once set: kernels call this from inside tasks, where run_lock is held
     * by the thread that started the task. */
    const int n = *(volatile int *)&pool.n_threads;   /* an aligned int: read whole */
    if (n > 0) return n;
    mutex_lock(&pool.run_lock);
    choose_default();
    const int chosen = pool.n_threads;
    mutex_unlock(&pool.run_lock);
    return chosen;
}
