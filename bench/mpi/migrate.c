/*
 * Task migration the MPI way, after PM2's thread migration, for
 * bench/compare (Open MPI and MPICH, built once with each one's compiler
 * wrapper): 2 ranks ship a task's state (650 bytes: a small header and the
 * task's stack) back and forth. On arrival the task lands in a freshly
 * chosen slot, runs there (checks its state, counts the hop, updates a
 * checksum carried in the state) and is shipped on from that slot:
 *
 *   mpirun -n 2 ... mpi-migrate [-i ITERATIONS] [-z STATE_BYTES]
 *
 * Receiving: the next slot of a ring of 16 (never the slot the task left
 * from), posted with MPI_Recv from MPI_ANY_SOURCE for up to 64 KiB (the
 * receiver does not assume the state's size; MPI_Get_count tells it).
 * Rank 0 creates the task and, after a warm-up, times ITERATIONS round
 * trips (1000 unless -i says otherwise; warm-up a tenth, between 2 and
 * 100) under MPI_Wtime. It prints one line:
 *
 *   size=<state bytes> iterations=<round trips> migrations=<2n> latency_us=<µs per migration>
 *
 * One migration is one shipment of the state to the other rank, so
 * latency_us is half a round trip. The task checks its checksum and hop
 * count each time it runs: corruption or a lost hop aborts the run.
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TAG 11
#define SLOTS 16
#define MAX_STATE (64L << 10)

static long clamp(long v, long lo, long hi) { return v < lo ? lo : v > hi ? hi : v; }

/* The start of a task's state; its stack follows, up to the state's size. */
struct task {
    uint64_t id;
    uint64_t hops;
    uint64_t checksum;
};

static uint64_t mix(uint64_t checksum, uint64_t hops)
{
    return (checksum ^ hops) * 0x100000001b3ULL;
}

/* Runs the task that just arrived in `state` (`size` bytes): checks that it
 * is the one expected, after `hops` hops with this checksum, then counts
 * this hop. */
static void run_task(char *state, long size, uint64_t hops, uint64_t checksum, int rank)
{
    struct task t;
    memcpy(&t, state, sizeof t);
    if (t.id != 42 || t.hops != hops || t.checksum != checksum ||
        (unsigned char)state[size - 1] != 0xa5) {
        fprintf(stderr, "rank %d: error: the task arrived damaged (hop %llu)\n", rank,
                (unsigned long long)hops);
        MPI_Abort(MPI_COMM_WORLD, 3);
    }
    t.hops += 1;
    t.checksum = mix(t.checksum, t.hops);
    memcpy(state, &t, sizeof t);
}

int main(int argc, char **argv)
{
    int rank, ranks;
    long iterations = 1000;
    long size = 650;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &ranks);
    int bad = ranks != 2 || (argc - 1) % 2 != 0;
    for (int a = 1; !bad && a + 1 < argc; a += 2) {
        if (strcmp(argv[a], "-i") == 0)
            iterations = atol(argv[a + 1]);
        else if (strcmp(argv[a], "-z") == 0)
            size = atol(argv[a + 1]);
        else
            bad = 1;
    }
    if (bad || iterations < 1 || size < (long)sizeof(struct task) + 1 || size > MAX_STATE) {
        if (rank == 0)
            fprintf(stderr, "usage: mpirun -n 2 %s [-i ITERATIONS] [-z STATE_BYTES (25 to %ld)]\n",
                    argv[0], MAX_STATE);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    /* The slots tasks land in, made once (a PM2 node keeps its stacks'
     * area): which one is chosen at each arrival. */
    char *slots[SLOTS];
    for (int s = 0; s < SLOTS; s++) {
        slots[s] = malloc((size_t)MAX_STATE);
        if (slots[s] == NULL)
            MPI_Abort(MPI_COMM_WORLD, 1);
        memset(slots[s], 0, (size_t)MAX_STATE);
    }
    int slot = 0;
    int peer = 1 - rank;
    if (rank == 0) {
        struct task t = {42, 0, 0};
        memcpy(slots[0], &t, sizeof t);
        for (long i = sizeof t; i < size; i++)
            slots[0][i] = (char)(i * 7);
        slots[0][size - 1] = (char)0xa5;
    }
    long warm = clamp(iterations / 10, 2, 100);
    /* Both ranks follow the task's hops and checksum, to check it on arrival. */
    uint64_t hops = 0, checksum = 0;
    double start = 0;
    for (long r = 0; r < warm + iterations; r++) {
        if (r == warm) {
            MPI_Barrier(MPI_COMM_WORLD);
            start = MPI_Wtime();
        }
        for (int leg = 0; leg < 2; leg++) {
            /* Leg 0: rank 0 ships, rank 1 receives; leg 1: the way back. */
            if ((leg == 0) == (rank == 0)) {
                MPI_Send(slots[slot], (int)size, MPI_BYTE, peer, TAG, MPI_COMM_WORLD);
            } else {
                MPI_Status status;
                int count;
                slot = (slot + 1) % SLOTS;
                MPI_Recv(slots[slot], (int)MAX_STATE, MPI_BYTE, MPI_ANY_SOURCE, TAG,
                         MPI_COMM_WORLD, &status);
                MPI_Get_count(&status, MPI_BYTE, &count);
                if (count != size) {
                    fprintf(stderr, "rank %d: error: a state of %d bytes, %ld expected\n", rank,
                            count, size);
                    MPI_Abort(MPI_COMM_WORLD, 3);
                }
                run_task(slots[slot], size, hops, checksum, rank);
            }
            hops++;
            checksum = mix(checksum, hops);
        }
    }
    double per_migration = (MPI_Wtime() - start) / (2.0 * (double)iterations);
    if (rank == 0) {
        struct task t;
        memcpy(&t, slots[slot], sizeof t);
        if (t.hops != 2 * (uint64_t)(warm + iterations)) {
            fprintf(stderr, "error: the task made %llu hops, %ld expected\n",
                    (unsigned long long)t.hops, 2 * (warm + iterations));
            MPI_Abort(MPI_COMM_WORLD, 3);
        }
        printf("size=%ld iterations=%ld migrations=%ld latency_us=%.4f\n", size, iterations,
               2 * iterations, per_migration * 1e6);
        fflush(stdout);
    }
    for (int s = 0; s < SLOTS; s++)
        free(slots[s]);
    MPI_Finalize();
    return 0;
}
