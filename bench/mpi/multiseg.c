/*
 * Multi-segment ping-pong for bench/compare (Open MPI and MPICH, built once
 * with each one's compiler wrapper): 2 ranks; each ping and each pong is S
 * segments of SIZE bytes, each sent by its own MPI_Isend on its own
 * duplicated communicator (segment k on communicator k, tag k), as navette
 * bench multiseg sends segment k on its own channel.
 *
 *   mpirun -n 2 ... mpi-multiseg [-i ITERATIONS] -s SEGMENTS[,SEGMENTS...] SIZE...
 *
 * One series: rank 0 posts its S MPI_Irecv for the pong, issues S
 * MPI_Isend, and MPI_Waitall's the 2S requests; rank 1 posts its S
 * MPI_Irecv, waits for them, then issues its S MPI_Isend and waits. For
 * each segment count, then each size: a warm-up, then ITERATIONS series
 * under MPI_Wtime. Rank 0 prints one line per (segments, size):
 *
 *   segments=<S> size=<bytes per segment> iterations=<n> latency_us=<one-way µs> bandwidth_mbps=<10^6 B/s>
 *
 * One-way time is half the round trip of a whole series; bandwidth is the
 * series' bytes (S * SIZE) over it. Without -i, the iteration count follows
 * `navette bench multiseg`'s rule: pingpong's (1 GiB of traffic, between 8
 * and 100000 round trips) on the series' bytes, divided among its S
 * messages, at least 8; the warm-up is a tenth, between 2 and 100, as in
 * bench/mpi/pingpong.c. Every segment carries a pattern of its own that
 * both ranks check once per size: corruption aborts the run.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../counts.h"

#define MAX_SEGMENTS 1024
#define MAX_COUNTS 16

static long clamp(long v, long lo, long hi) { return v < lo ? lo : v > hi ? hi : v; }

/* navette_cli::bench::series_iterations: pingpong's rule (1 GiB of
 * traffic, 8 to 100000 round trips) on the series' bytes, divided among its
 * segments, at least 8. */
static long default_iterations(long segments, long size)
{
    long bytes = segments * size;
    long per_series = clamp((1L << 30) / (bytes > 0 ? bytes : 1), 8, 100000);
    return clamp(per_series / segments, 8, per_series);
}

/* Byte i of segment k at this size, as navette bench multiseg sends it. */
static unsigned char pattern(long size, long k, long i)
{
    return (unsigned char)((i * 31) ^ size ^ (k * 101));
}

struct segments {
    int count;
    long size;
    MPI_Comm *comms;
    char **send;
    char **recv;
    MPI_Request *requests;
    /* Real statuses rather than MPI_STATUSES_IGNORE, which GCC mistakes for
     * an empty array with MPICH's header (-Wstringop-overflow). */
    MPI_Status *statuses;
};

static void series(int rank, const struct segments *s, long rounds)
{
    int peer = 1 - rank;
    int n = s->count;
    for (long r = 0; r < rounds; r++) {
        for (int k = 0; k < n; k++)
            MPI_Irecv(s->recv[k], (int)s->size, MPI_BYTE, peer, k, s->comms[k],
                      &s->requests[k]);
        if (rank == 1)
            MPI_Waitall(n, s->requests, s->statuses);
        for (int k = 0; k < n; k++)
            MPI_Isend(s->send[k], (int)s->size, MPI_BYTE, peer, k, s->comms[k],
                      &s->requests[n + k]);
        if (rank == 0)
            MPI_Waitall(2 * n, s->requests, s->statuses);
        else
            MPI_Waitall(n, s->requests + n, s->statuses);
    }
}

static void fill(const struct segments *s)
{
    for (int k = 0; k < s->count; k++) {
        for (long i = 0; i < s->size; i++)
            s->send[k][i] = (char)pattern(s->size, k, i);
        memset(s->recv[k], 0, s->size > 0 ? (size_t)s->size : 1);
    }
}

static int check(const struct segments *s)
{
    for (int k = 0; k < s->count; k++)
        for (long i = 0; i < s->size; i++)
            if ((unsigned char)s->recv[k][i] != pattern(s->size, k, i))
                return 0;
    return 1;
}

static void usage(int rank, const char *program)
{
    if (rank == 0)
        fprintf(stderr,
                "usage: mpirun -n 2 %s [-i ITERATIONS] -s SEGMENTS[,SEGMENTS...] SIZE...\n",
                program);
    MPI_Abort(MPI_COMM_WORLD, 2);
}

int main(int argc, char **argv)
{
    int rank, ranks;
    long fixed_iterations = 0;
    long counts[MAX_COUNTS];
    int ncounts = 0;
    int first = 1;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &ranks);
    while (first + 1 < argc && argv[first][0] == '-') {
        if (strcmp(argv[first], "-i") == 0)
            fixed_iterations = atol(argv[first + 1]);
        else if (strcmp(argv[first], "-s") == 0)
            ncounts = parse_counts(argv[first + 1], MAX_SEGMENTS, counts, MAX_COUNTS);
        else
            usage(rank, argv[0]);
        first += 2;
    }
    if (ranks != 2 || first >= argc || ncounts <= 0)
        usage(rank, argv[0]);
    int most = 0;
    for (int c = 0; c < ncounts; c++)
        most = (int)counts[c] > most ? (int)counts[c] : most;
    /* Every segment's communicator, made once: MPI_Comm_dup is collective
     * and not what is measured. */
    MPI_Comm *comms = malloc(sizeof(MPI_Comm) * (size_t)most);
    char **send = calloc((size_t)most, sizeof(char *));
    char **recv = calloc((size_t)most, sizeof(char *));
    MPI_Request *requests = malloc(sizeof(MPI_Request) * 2 * (size_t)most);
    MPI_Status *statuses = malloc(sizeof(MPI_Status) * 2 * (size_t)most);
    if (comms == NULL || send == NULL || recv == NULL || requests == NULL || statuses == NULL)
        MPI_Abort(MPI_COMM_WORLD, 1);
    for (int k = 0; k < most; k++)
        MPI_Comm_dup(MPI_COMM_WORLD, &comms[k]);
    for (int c = 0; c < ncounts; c++) {
        for (int a = first; a < argc; a++) {
            long size = atol(argv[a]);
            if (size < 0 || size > (1L << 24)) {
                if (rank == 0)
                    fprintf(stderr, "bad size %s\n", argv[a]);
                MPI_Abort(MPI_COMM_WORLD, 2);
            }
            struct segments s = {(int)counts[c], size, comms, send, recv, requests, statuses};
            /* Each segment in its own allocation, as in navette. */
            for (int k = 0; k < s.count; k++) {
                send[k] = malloc(size > 0 ? (size_t)size : 1);
                recv[k] = malloc(size > 0 ? (size_t)size : 1);
                if (send[k] == NULL || recv[k] == NULL)
                    MPI_Abort(MPI_COMM_WORLD, 1);
            }
            fill(&s);
            long bytes = (long)s.count * size;
            long iterations = fixed_iterations > 0 ? fixed_iterations
                                                   : default_iterations(s.count, size);
            series(rank, &s, clamp(iterations / 10, 2, 100));
            MPI_Barrier(MPI_COMM_WORLD);
            double start = MPI_Wtime();
            series(rank, &s, iterations);
            double one_way = (MPI_Wtime() - start) / (2.0 * (double)iterations);
            if (!check(&s)) {
                fprintf(stderr,
                        "rank %d: error: segments=%d size=%ld: received data differs from what was "
                        "sent\n",
                        rank, s.count, size);
                MPI_Abort(MPI_COMM_WORLD, 3);
            }
            if (rank == 0) {
                printf("segments=%d size=%ld iterations=%ld latency_us=%.4f "
                       "bandwidth_mbps=%.2f\n",
                       s.count, size, iterations, one_way * 1e6,
                       one_way > 0 ? (double)bytes / one_way / 1e6 : 0.0);
                fflush(stdout);
            }
            for (int k = 0; k < s.count; k++) {
                free(send[k]);
                free(recv[k]);
            }
        }
    }
    for (int k = 0; k < most; k++)
        MPI_Comm_free(&comms[k]);
    free(comms);
    free(send);
    free(recv);
    free(requests);
    free(statuses);
    MPI_Finalize();
    return 0;
}
