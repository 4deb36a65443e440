/*
 * Indexed ping-pong for bench/compare (Open MPI and MPICH, built once with
 * each one's compiler wrapper): 2 ranks exchange one message made of a
 * HEAD-byte block and a LARGE-byte block living in two separate
 * allocations, described by an MPI_Type_create_hindexed over their
 * absolute addresses (MPI_Get_address) and sent as 1 element of that type
 * from MPI_BOTTOM with blocking MPI_Send/MPI_Recv. navette bench indexed
 * sends the same two blocks as one Madeleine message (pack/unpack).
 *
 *   mpirun -n 2 ... mpi-indexed [-i ITERATIONS] [-e HEAD] [-m heap|huge] LARGE...
 *
 * HEAD is 64 bytes unless -e says otherwise. The large blocks (the one
 * sent and the one received into) are malloc'd, or with -m huge mappings
 * of their own backed by transparent huge pages (../huge.h), as navette
 * bench indexed --memory huge has them. For each LARGE: a warm-up,
 * then ITERATIONS round trips under MPI_Wtime. Rank 0 prints one line per
 * size:
 *
 *   size=<HEAD+LARGE> head=<HEAD> large=<LARGE> iterations=<n> latency_us=<one-way µs> bandwidth_mbps=<10^6 B/s>
 *
 * One-way time is half the round trip; bandwidth is the message's bytes
 * over it. Without -i, the iteration count follows `navette bench`'s rule
 * on the message's bytes (1 GiB of traffic, between 8 and 100000 round
 * trips) and so does the warm-up (a tenth, between 2 and 100). Both blocks
 * carry a pattern that both ranks check once per size: corruption aborts.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../huge.h"

static long clamp(long v, long lo, long hi) { return v < lo ? lo : v > hi ? hi : v; }

static long default_iterations(long bytes)
{
    return clamp((1L << 30) / (bytes > 0 ? bytes : 1), 8, 100000);
}

/* Byte i of block b (0: head, 1: large) of a message of `size` bytes. */
static unsigned char pattern(long size, int b, long i)
{
    return (unsigned char)((i * 31) ^ size ^ (b * 101));
}

/* The two blocks of one side, the memory of each (the head's on the
 * heap, the large one's as -m says), and the datatype that names them. */
struct message {
    char *block[2];
    int len[2];
    enum memory memory[2];
    MPI_Datatype type;
};

static void make(struct message *m, long head, long large, enum memory memory)
{
    m->len[0] = (int)head;
    m->len[1] = (int)large;
    m->memory[0] = MEMORY_HEAP;
    m->memory[1] = memory;
    for (int b = 0; b < 2; b++) {
        m->block[b] = block_alloc(m->memory[b], (size_t)m->len[b]);
        if (m->block[b] == NULL)
            MPI_Abort(MPI_COMM_WORLD, 1);
    }
    MPI_Aint where[2];
    MPI_Get_address(m->block[0], &where[0]);
    MPI_Get_address(m->block[1], &where[1]);
    MPI_Type_create_hindexed(2, m->len, where, MPI_BYTE, &m->type);
    MPI_Type_commit(&m->type);
}

static void unmake(struct message *m)
{
    MPI_Type_free(&m->type);
    for (int b = 0; b < 2; b++)
        block_free(m->memory[b], m->block[b], (size_t)m->len[b]);
}

static void rounds(int rank, struct message *out, struct message *in, long count)
{
    int peer = 1 - rank;
    for (long i = 0; i < count; i++) {
        if (rank == 0) {
            MPI_Send(MPI_BOTTOM, 1, out->type, peer, 0, MPI_COMM_WORLD);
            MPI_Recv(MPI_BOTTOM, 1, in->type, peer, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else {
            MPI_Recv(MPI_BOTTOM, 1, in->type, peer, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Send(MPI_BOTTOM, 1, out->type, peer, 0, MPI_COMM_WORLD);
        }
    }
}

static void usage(int rank, const char *program)
{
    if (rank == 0)
        fprintf(stderr, "usage: mpirun -n 2 %s [-i ITERATIONS] [-e HEAD] [-m heap|huge] LARGE...\n", program);
    MPI_Abort(MPI_COMM_WORLD, 2);
}

int main(int argc, char **argv)
{
    int rank, ranks;
    long fixed_iterations = 0;
    long head = 64;
    enum memory memory = MEMORY_HEAP;
    int first = 1;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &ranks);
    while (first + 1 < argc && argv[first][0] == '-') {
        if (strcmp(argv[first], "-i") == 0)
            fixed_iterations = atol(argv[first + 1]);
        else if (strcmp(argv[first], "-e") == 0)
            head = atol(argv[first + 1]);
        else if (strcmp(argv[first], "-m") == 0) {
            if (parse_memory(argv[first + 1], &memory) != 0)
                usage(rank, argv[0]);
        } else
            usage(rank, argv[0]);
        first += 2;
    }
    if (ranks != 2 || first >= argc || head < 0 || head > (1L << 20))
        usage(rank, argv[0]);
    for (int a = first; a < argc; a++) {
        long large = atol(argv[a]);
        if (large < 0 || large > (1L << 30)) {
            if (rank == 0)
                fprintf(stderr, "bad size %s\n", argv[a]);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
        long size = head + large;
        struct message out, in;
        make(&out, head, large, memory);
        make(&in, head, large, memory);
        for (int b = 0; b < 2; b++) {
            for (long i = 0; i < out.len[b]; i++)
                out.block[b][i] = (char)pattern(size, b, i);
            memset(in.block[b], 0, in.len[b] > 0 ? (size_t)in.len[b] : 1);
        }
        long iterations = fixed_iterations > 0 ? fixed_iterations : default_iterations(size);
        rounds(rank, &out, &in, clamp(iterations / 10, 2, 100));
        MPI_Barrier(MPI_COMM_WORLD);
        double start = MPI_Wtime();
        rounds(rank, &out, &in, iterations);
        double one_way = (MPI_Wtime() - start) / (2.0 * (double)iterations);
        for (int b = 0; b < 2; b++) {
            for (long i = 0; i < in.len[b]; i++) {
                if ((unsigned char)in.block[b][i] != pattern(size, b, i)) {
                    fprintf(stderr, "rank %d: error: size=%ld: received data differs from what was sent\n",
                            rank, size);
                    MPI_Abort(MPI_COMM_WORLD, 3);
                }
            }
        }
        if (rank == 0) {
            printf("size=%ld head=%ld large=%ld iterations=%ld latency_us=%.4f "
                   "bandwidth_mbps=%.2f\n",
                   size, head, large, iterations, one_way * 1e6,
                   one_way > 0 ? (double)size / one_way / 1e6 : 0.0);
            fflush(stdout);
        }
        unmake(&out);
        unmake(&in);
    }
    MPI_Finalize();
    return 0;
}
