/*
 * RPC the MPI way, for bench/compare (Open MPI and MPICH, built once with
 * each one's compiler wrapper): 2 ranks; rank 0 is the client, rank 1 the
 * server. Each call carries an argument of S bytes, which neither side
 * knows before the call's header says so:
 *
 *   client: MPI_Send(header: 8 bytes holding S), MPI_Send(body: S bytes)
 *   server: MPI_Recv(header, MPI_ANY_SOURCE), then picks a buffer of S
 *           bytes, MPI_Recv(body) into it from the header's source
 *   server: replies the same way: header (S), then the S-byte body it got
 *   client: receives the reply the same way: header (MPI_ANY_SOURCE), then
 *           the body into a buffer picked after reading the header
 *
 * Always two messages each way (with S = 0 the body is an empty message).
 * The buffer for a body is picked once the header is read, from a buffer
 * the side keeps and grows when a header announces more bytes than it
 * holds (malloc'ed and touched then, so that growing happens in the
 * warm-up, never under the clock): the body lands in memory chosen after
 * the header, as an RPC server that does not know its calls in advance
 * must do, without timing malloc.
 *
 *   mpirun -n 2 ... mpi-rpc [-i ITERATIONS] [SIZE...]
 *
 * Sizes default to 0 64 1024 16384 262144 1048576. For each size: a
 * warm-up, then ITERATIONS calls under MPI_Wtime. Rank 0 prints one line
 * per size:
 *
 *   size=<S> iterations=<n> latency_us=<one-way µs>
 *
 * One-way time is half a call's round trip. Without -i, the iteration
 * count follows `navette bench`'s rule on the body's bytes (1 GiB of
 * traffic, between 8 and 100000 calls) and so does the warm-up (a tenth,
 * between 2 and 100), as bench/mpi/pingpong.c. The body carries a pattern
 * that the server checks on the last call and the client on the last
 * reply of each size: corruption aborts the run.
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TAG 7
#define MAX_SIZE (1L << 30)

static long clamp(long v, long lo, long hi) { return v < lo ? lo : v > hi ? hi : v; }

static long default_iterations(long size)
{
    return clamp((1L << 30) / (size > 0 ? size : 1), 8, 100000);
}

static unsigned char pattern(long size, long i) { return (unsigned char)((i * 31) ^ size ^ 0x5a); }

/* The memory a side receives bodies into, grown on demand. */
struct pool {
    char *buf;
    long capacity;
};

/* A buffer of at least `size` bytes, chosen now (after the header). */
static char *body_buffer(struct pool *p, long size)
{
    if (size > p->capacity) {
        free(p->buf);
        p->buf = malloc(size > 0 ? (size_t)size : 1);
        if (p->buf == NULL)
            MPI_Abort(MPI_COMM_WORLD, 1);
        memset(p->buf, 0, size > 0 ? (size_t)size : 1);
        p->capacity = size;
    }
    return p->buf;
}

/* Receives one call (or reply): header from anyone, then the body from the
 * header's sender into a buffer picked for its size. Returns the body and
 * sets *size and *source. */
static char *receive(struct pool *p, long *size, int *source)
{
    uint64_t header;
    MPI_Status status;
    MPI_Recv(&header, 8, MPI_BYTE, MPI_ANY_SOURCE, TAG, MPI_COMM_WORLD, &status);
    int count;
    MPI_Get_count(&status, MPI_BYTE, &count);
    if (count != 8 || header > (uint64_t)MAX_SIZE) {
        fprintf(stderr, "error: bad RPC header (%d bytes, size %llu)\n", count,
                (unsigned long long)header);
        MPI_Abort(MPI_COMM_WORLD, 3);
    }
    *size = (long)header;
    *source = status.MPI_SOURCE;
    char *body = body_buffer(p, *size);
    MPI_Recv(body, (int)*size, MPI_BYTE, *source, TAG, MPI_COMM_WORLD, &status);
    MPI_Get_count(&status, MPI_BYTE, &count);
    if (count != (int)*size) {
        fprintf(stderr, "error: RPC body of %d bytes, header said %ld\n", count, *size);
        MPI_Abort(MPI_COMM_WORLD, 3);
    }
    return body;
}

/* Sends one call (or reply): header, then body. */
static void send_call(const char *body, long size, int dest)
{
    uint64_t header = (uint64_t)size;
    MPI_Send(&header, 8, MPI_BYTE, dest, TAG, MPI_COMM_WORLD);
    MPI_Send(body, (int)size, MPI_BYTE, dest, TAG, MPI_COMM_WORLD);
}

static int intact(const char *body, long size)
{
    for (long i = 0; i < size; i++)
        if ((unsigned char)body[i] != pattern(size, i))
            return 0;
    return 1;
}

/* `count` calls of `size` bytes; the body last received. */
static const char *calls(int rank, const char *argument, struct pool *p, long size, long count)
{
    const char *body = NULL;
    for (long c = 0; c < count; c++) {
        long got;
        int source;
        if (rank == 0) {
            send_call(argument, size, 1);
            body = receive(p, &got, &source);
        } else {
            body = receive(p, &got, &source);
            send_call(body, got, source);
        }
        if (got != size) {
            fprintf(stderr, "rank %d: error: a call of %ld bytes, %ld expected\n", rank, got,
                    size);
            MPI_Abort(MPI_COMM_WORLD, 3);
        }
    }
    return body;
}

static void usage(int rank, const char *program)
{
    if (rank == 0)
        fprintf(stderr, "usage: mpirun -n 2 %s [-i ITERATIONS] [SIZE...]\n", program);
    MPI_Abort(MPI_COMM_WORLD, 2);
}

int main(int argc, char **argv)
{
    static const long defaults[] = {0, 64, 1024, 16384, 262144, 1048576};
    int rank, ranks;
    long fixed_iterations = 0;
    int first = 1;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &ranks);
    while (first + 1 < argc && argv[first][0] == '-') {
        if (strcmp(argv[first], "-i") == 0)
            fixed_iterations = atol(argv[first + 1]);
        else
            usage(rank, argv[0]);
        first += 2;
    }
    if (ranks != 2 || (first < argc && argv[first][0] == '-'))
        usage(rank, argv[0]);
    int nsizes = first < argc ? argc - first : (int)(sizeof defaults / sizeof defaults[0]);
    struct pool pool = {NULL, -1};
    for (int n = 0; n < nsizes; n++) {
        long size = first < argc ? atol(argv[first + n]) : defaults[n];
        if (size < 0 || size > MAX_SIZE) {
            if (rank == 0)
                fprintf(stderr, "bad size %s\n", argv[first + n]);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
        /* The client's argument (the server replies with what it got). */
        char *argument = malloc(size > 0 ? (size_t)size : 1);
        if (argument == NULL)
            MPI_Abort(MPI_COMM_WORLD, 1);
        for (long i = 0; i < size; i++)
            argument[i] = (char)pattern(size, i);
        long iterations = fixed_iterations > 0 ? fixed_iterations : default_iterations(size);
        calls(rank, argument, &pool, size, clamp(iterations / 10, 2, 100));
        MPI_Barrier(MPI_COMM_WORLD);
        double start = MPI_Wtime();
        const char *last = calls(rank, argument, &pool, size, iterations);
        double one_way = (MPI_Wtime() - start) / (2.0 * (double)iterations);
        if (!intact(last, size)) {
            fprintf(stderr, "rank %d: error: size=%ld: received data differs from what was sent\n",
                    rank, size);
            MPI_Abort(MPI_COMM_WORLD, 3);
        }
        if (rank == 0) {
            printf("size=%ld iterations=%ld latency_us=%.4f\n", size, iterations, one_way * 1e6);
            fflush(stdout);
        }
        free(argument);
    }
    free(pool.buf);
    MPI_Finalize();
    return 0;
}
