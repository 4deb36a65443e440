/*
 * RPC throughput the MPI way, for bench/compare (Open MPI and MPICH, built
 * once with each one's compiler wrapper, with -pthread): 2 ranks, under
 * MPI_Init_thread(MPI_THREAD_MULTIPLE). Rank 0, the client, runs T threads,
 * each making calls back to back, each call as in bench/mpi/rpc.c: a header
 * (8 bytes holding S) then an S-byte body, the reply the same way. Thread k
 * uses tag k, so that replies reach the thread that called. Rank 1, the
 * server, serves in one thread: MPI_Recv of a header from MPI_ANY_SOURCE
 * with MPI_ANY_TAG, then of the body from that source with the header's
 * tag into a buffer picked after reading the header (kept and grown when a
 * header announces more bytes than it holds), then the reply, header and
 * body, on that tag. A header on tag STOP (after every client thread has
 * finished) ends a run.
 *
 *   mpirun -n 2 ... mpi-rpc_rate [-i CALLS] [-t THREADS[,THREADS...]] [SIZE...]
 *
 * Threads default to 1,4,16 and sizes to 0. For each thread count, then
 * each size: every thread makes a warm-up of calls (a tenth of its calls,
 * between 2 and 100), all meet at a barrier, then each makes CALLS calls;
 * the clock runs from the first thread's start after the barrier until the
 * last thread is done (each thread reads MPI_Wtime itself). Without
 * -i, CALLS follows navette bench's rule on the body's bytes (1 GiB of
 * traffic, between 8 and 100000 calls) divided among the T threads, at
 * least 8 each, so that every thread count makes about as many calls.
 * Rank 0 prints one line per (threads, size):
 *
 *   threads=<T> size=<S> calls=<all threads' calls> seconds=<s> rate_per_s=<calls / s>
 *
 * Should the library not provide MPI_THREAD_MULTIPLE, rank 0 prints
 *
 *   unavailable: MPI_THREAD_MULTIPLE not provided (provided: <level>)
 *
 * and both ranks exit with status 77 (what bench/compare records as "not
 * available" rather than a failure). Bodies carry a pattern that the
 * server checks on every call and each thread on its last reply.
 */
#include <mpi.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../counts.h"

#define MAX_THREADS 256
#define MAX_COUNTS 16
#define STOP 30000
#define MAX_SIZE (1L << 30)
#define UNAVAILABLE 77

static long clamp(long v, long lo, long hi) { return v < lo ? lo : v > hi ? hi : v; }

/* navette_cli::bench::series_iterations with the threads as segments: the
 * rule on the body's bytes (1 GiB of traffic, 8 to 100000 calls), divided
 * among the threads, at least 8 each. */
static long default_calls(long threads, long size)
{
    long all = clamp((1L << 30) / (size > 0 ? size : 1), 8, 100000);
    return clamp(all / threads, 8, all);
}

static unsigned char pattern(long size, long tag, long i)
{
    return (unsigned char)((i * 31) ^ size ^ (tag * 101));
}

static void bad(const char *what, long value)
{
    fprintf(stderr, "error: %s (%ld)\n", what, value);
    MPI_Abort(MPI_COMM_WORLD, 3);
}

static void send_call(const char *body, long size, int dest, int tag)
{
    uint64_t header = (uint64_t)size;
    MPI_Send(&header, 8, MPI_BYTE, dest, tag, MPI_COMM_WORLD);
    MPI_Send(body, (int)size, MPI_BYTE, dest, tag, MPI_COMM_WORLD);
}

/* A body buffer of at least `size` bytes, chosen after the header. */
static char *body_buffer(char **buf, long *capacity, long size)
{
    if (size > *capacity) {
        free(*buf);
        *buf = malloc(size > 0 ? (size_t)size : 1);
        if (*buf == NULL)
            MPI_Abort(MPI_COMM_WORLD, 1);
        memset(*buf, 0, size > 0 ? (size_t)size : 1);
        *capacity = size;
    }
    return *buf;
}

/* One client thread. */
struct caller {
    pthread_t thread;
    int tag;
    long size, warm, calls;
    pthread_barrier_t *start;
    char *argument, *reply;
    long capacity;
    double began, ended;
};

static void call(struct caller *c)
{
    send_call(c->argument, c->size, 1, c->tag);
    uint64_t header;
    MPI_Status status;
    int count;
    MPI_Recv(&header, 8, MPI_BYTE, MPI_ANY_SOURCE, c->tag, MPI_COMM_WORLD, &status);
    MPI_Get_count(&status, MPI_BYTE, &count);
    if (count != 8 || header != (uint64_t)c->size)
        bad("a reply header that does not announce the call's size", (long)header);
    char *body = body_buffer(&c->reply, &c->capacity, (long)header);
    MPI_Recv(body, (int)header, MPI_BYTE, status.MPI_SOURCE, c->tag, MPI_COMM_WORLD, &status);
}

static void *caller_main(void *arg)
{
    struct caller *c = arg;
    for (long i = 0; i < c->warm; i++)
        call(c);
    pthread_barrier_wait(c->start);
    c->began = MPI_Wtime();
    for (long i = 0; i < c->calls; i++)
        call(c);
    c->ended = MPI_Wtime();
    for (long i = 0; i < c->size; i++)
        if ((unsigned char)c->reply[i] != pattern(c->size, c->tag, i))
            bad("a reply differs from the call's argument, at byte", i);
    return NULL;
}

/* Rank 1: serves calls until a header on tag STOP. */
static void serve(void)
{
    char *buf = NULL;
    long capacity = -1;
    for (;;) {
        uint64_t header;
        MPI_Status status;
        int count;
        MPI_Recv(&header, 8, MPI_BYTE, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &status);
        MPI_Get_count(&status, MPI_BYTE, &count);
        if (status.MPI_TAG == STOP)
            break;
        if (count != 8 || header > (uint64_t)MAX_SIZE)
            bad("a call header of the wrong length or size", count);
        int tag = status.MPI_TAG, source = status.MPI_SOURCE;
        long size = (long)header;
        char *body = body_buffer(&buf, &capacity, size);
        MPI_Recv(body, (int)size, MPI_BYTE, source, tag, MPI_COMM_WORLD, &status);
        MPI_Get_count(&status, MPI_BYTE, &count);
        if (count != size)
            bad("a call body that is not the size its header announced", count);
        for (long i = 0; i < size; i++)
            if ((unsigned char)body[i] != pattern(size, tag, i))
                bad("a call's body differs from what was sent, at byte", i);
        send_call(body, size, source, tag);
    }
    free(buf);
}

/* Rank 0: T threads calling; the seconds from the first thread's start
 * (after the barrier) to the last one's end. Each thread reads the clock
 * itself: the main thread may be scheduled long after the barrier. */
static double run_callers(long threads, long size, long calls)
{
    struct caller callers[MAX_THREADS];
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, (unsigned)threads + 1);
    for (long k = 0; k < threads; k++) {
        struct caller *c = &callers[k];
        c->tag = (int)k;
        c->size = size;
        c->calls = calls;
        c->warm = clamp(calls / 10, 2, 100);
        c->start = &start;
        c->argument = malloc(size > 0 ? (size_t)size : 1);
        c->reply = NULL;
        c->capacity = -1;
        if (c->argument == NULL)
            MPI_Abort(MPI_COMM_WORLD, 1);
        for (long i = 0; i < size; i++)
            c->argument[i] = (char)pattern(size, k, i);
        if (pthread_create(&c->thread, NULL, caller_main, c) != 0)
            bad("cannot start a thread", k);
    }
    pthread_barrier_wait(&start);
    double first = 0, last = 0;
    for (long k = 0; k < threads; k++) {
        pthread_join(callers[k].thread, NULL);
        if (k == 0 || callers[k].began < first)
            first = callers[k].began;
        if (k == 0 || callers[k].ended > last)
            last = callers[k].ended;
    }
    double seconds = last - first;
    for (long k = 0; k < threads; k++) {
        free(callers[k].argument);
        free(callers[k].reply);
    }
    pthread_barrier_destroy(&start);
    return seconds;
}

static const char *level_name(int level)
{
    switch (level) {
    case MPI_THREAD_SINGLE: return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED: return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED: return "MPI_THREAD_SERIALIZED";
    case MPI_THREAD_MULTIPLE: return "MPI_THREAD_MULTIPLE";
    default: return "unknown";
    }
}

static void usage(int rank, const char *program)
{
    if (rank == 0)
        fprintf(stderr,
                "usage: mpirun -n 2 %s [-i CALLS] [-t THREADS[,THREADS...]] [SIZE...]\n",
                program);
    MPI_Abort(MPI_COMM_WORLD, 2);
}

int main(int argc, char **argv)
{
    int rank, ranks, provided;
    long fixed_calls = 0;
    long counts[MAX_COUNTS] = {1, 4, 16};
    int ncounts = 3;
    int first = 1;

    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &ranks);
    if (provided < MPI_THREAD_MULTIPLE) {
        if (rank == 0) {
            printf("unavailable: MPI_THREAD_MULTIPLE not provided (provided: %s)\n",
                   level_name(provided));
            fflush(stdout);
        }
        MPI_Finalize();
        return UNAVAILABLE;
    }
    while (first + 1 < argc && argv[first][0] == '-') {
        if (strcmp(argv[first], "-i") == 0)
            fixed_calls = atol(argv[first + 1]);
        else if (strcmp(argv[first], "-t") == 0)
            ncounts = parse_counts(argv[first + 1], MAX_THREADS, counts, MAX_COUNTS);
        else
            usage(rank, argv[0]);
        first += 2;
    }
    if (ranks != 2 || ncounts <= 0 || (first < argc && argv[first][0] == '-'))
        usage(rank, argv[0]);
    int nsizes = first < argc ? argc - first : 1;
    for (int c = 0; c < ncounts; c++) {
        for (int n = 0; n < nsizes; n++) {
            long size = first < argc ? atol(argv[first + n]) : 0;
            if (size < 0 || size > MAX_SIZE) {
                if (rank == 0)
                    fprintf(stderr, "bad size %s\n", argv[first + n]);
                MPI_Abort(MPI_COMM_WORLD, 2);
            }
            long threads = counts[c];
            long calls = fixed_calls > 0 ? fixed_calls : default_calls(threads, size);
            MPI_Barrier(MPI_COMM_WORLD);
            if (rank == 1) {
                serve();
            } else {
                double seconds = run_callers(threads, size, calls);
                uint64_t stop = 0;
                MPI_Send(&stop, 8, MPI_BYTE, 1, STOP, MPI_COMM_WORLD);
                long all = threads * calls;
                printf("threads=%ld size=%ld calls=%ld seconds=%.6f rate_per_s=%.1f\n", threads,
                       size, all, seconds, seconds > 0 ? (double)all / seconds : 0.0);
                fflush(stdout);
            }
        }
    }
    MPI_Finalize();
    return 0;
}
