/*
 * Open MPI ping-pong for bench/compare: 2 ranks, blocking MPI_Send/MPI_Recv.
 *
 *   mpirun -n 2 ... mpi-pingpong [-i ITERATIONS] SIZE...
 *
 * For each size (bytes): a warm-up, then ITERATIONS round trips under
 * MPI_Wtime. Rank 0 prints one line per size:
 *
 *   size=<bytes> iterations=<n> latency_us=<one-way µs> bandwidth_mbps=<10^6 B/s>
 *
 * One-way time is half the round trip; bandwidth is size / one-way time.
 * Without -i, the iteration count follows `navette bench`'s rule (1 GiB
 * of traffic per size, between 8 and 100000 round trips) and so does the
 * warm-up (a tenth, between 2 and 100), so both run the same exchanges.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static long clamp(long v, long lo, long hi) { return v < lo ? lo : v > hi ? hi : v; }

static long default_iterations(long size)
{
    return clamp((1L << 30) / (size > 0 ? size : 1), 8, 100000);
}

static void rounds(int rank, char *buf, long size, long count)
{
    for (long i = 0; i < count; i++) {
        if (rank == 0) {
            MPI_Send(buf, (int)size, MPI_BYTE, 1, 0, MPI_COMM_WORLD);
            MPI_Recv(buf, (int)size, MPI_BYTE, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else {
            MPI_Recv(buf, (int)size, MPI_BYTE, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Send(buf, (int)size, MPI_BYTE, 0, 0, MPI_COMM_WORLD);
        }
    }
}

int main(int argc, char **argv)
{
    int rank, ranks;
    long fixed_iterations = 0;
    int first = 1;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &ranks);
    if (argc > 2 && strcmp(argv[1], "-i") == 0) {
        fixed_iterations = atol(argv[2]);
        first = 3;
    }
    if (ranks != 2 || first >= argc) {
        if (rank == 0)
            fprintf(stderr, "usage: mpirun -n 2 %s [-i ITERATIONS] SIZE...\n", argv[0]);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    for (int a = first; a < argc; a++) {
        long size = atol(argv[a]);
        if (size < 0 || size > (1L << 30)) {
            if (rank == 0)
                fprintf(stderr, "bad size %s\n", argv[a]);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
        long iterations = fixed_iterations > 0 ? fixed_iterations : default_iterations(size);
        char *buf = malloc(size > 0 ? (size_t)size : 1);
        if (buf == NULL)
            MPI_Abort(MPI_COMM_WORLD, 1);
        memset(buf, 0x5a, size > 0 ? (size_t)size : 1);
        rounds(rank, buf, size, clamp(iterations / 10, 2, 100));
        MPI_Barrier(MPI_COMM_WORLD);
        double start = MPI_Wtime();
        rounds(rank, buf, size, iterations);
        double one_way = (MPI_Wtime() - start) / (2.0 * (double)iterations);
        if (rank == 0) {
            printf("size=%ld iterations=%ld latency_us=%.4f bandwidth_mbps=%.2f\n", size,
                   iterations, one_way * 1e6, one_way > 0 ? (double)size / one_way / 1e6 : 0.0);
            fflush(stdout);
        }
        free(buf);
    }
    MPI_Finalize();
    return 0;
}
