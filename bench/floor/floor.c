/*
 * The physical floor of shared memory, for bench/compare.
 *
 *   floor [-c CORE_A,CORE_B] SIZE...
 *
 * cacheline: two threads pinned to CORE_A and CORE_B pass one 64-byte cache
 * line back and forth (each waits for the other's value, then writes the
 * next); one-way time = round trip / 2. No shared-memory transport can
 * deliver a message faster than this hand-off. Best of 5 series.
 *
 * memcpy: one thread on CORE_A copies SIZE bytes between two buffers,
 * repeatedly; bandwidth = bytes copied per second (10^6 B/s). Best of 3
 * series, after a warm-up.
 *
 * Output, one line per figure:
 *   cacheline size=64 iterations=<round trips> latency_us=<one-way µs>
 *   memcpy size=<bytes> iterations=<copies> latency_us=<µs per copy> bandwidth_mbps=<MB/s>
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define LINE 64
#define ROUND_TRIPS 100000L
#define SERIES 5

static struct {
    _Alignas(LINE) _Atomic long value;
    char pad[LINE - sizeof(long)];
} line;

static int cores[2] = {0, 1};

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void pin(int core)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(core, &set);
    if (pthread_setaffinity_np(pthread_self(), sizeof set, &set) != 0)
        fprintf(stderr, "floor: cannot pin to core %d\n", core);
}

/* Waits for `expect`, then writes `expect + 1`; `count` times, by twos. */
static void bounce(long first, long count)
{
    for (long v = first; v < first + 2 * count; v += 2) {
        while (atomic_load_explicit(&line.value, memory_order_acquire) != v)
            ;
        atomic_store_explicit(&line.value, v + 1, memory_order_release);
    }
}

static void *responder(void *arg)
{
    (void)arg;
    pin(cores[1]);
    bounce(1, (SERIES + 1) * ROUND_TRIPS);
    return NULL;
}

static double cacheline(void)
{
    pthread_t thread;
    double best = 1e30;
    atomic_store(&line.value, 0);
    if (pthread_create(&thread, NULL, responder, NULL) != 0) {
        perror("floor: pthread_create");
        exit(1);
    }
    pin(cores[0]);
    /* The initiator waits for even values and writes odd ones. */
    bounce(0, ROUND_TRIPS); /* warm-up */
    for (int s = 1; s <= SERIES; s++) {
        double start = now();
        bounce(2 * s * ROUND_TRIPS, ROUND_TRIPS);
        double one_way = (now() - start) / (2.0 * ROUND_TRIPS);
        if (one_way < best)
            best = one_way;
    }
    pthread_join(thread, NULL);
    return best;
}

static long clamp(long v, long lo, long hi) { return v < lo ? lo : v > hi ? hi : v; }

static void copy_series(char *dst, const char *src, size_t size, long count)
{
    for (long i = 0; i < count; i++) {
        memcpy(dst, src, size);
        /* The copy must happen every time. */
        __asm__ volatile("" : : "r"(dst) : "memory");
    }
}

static void memcpy_bandwidth(size_t size)
{
    long count = clamp((long)((256UL << 20) / size), 16, 1000000);
    char *src = aligned_alloc(LINE, (size + LINE - 1) / LINE * LINE);
    char *dst = aligned_alloc(LINE, (size + LINE - 1) / LINE * LINE);
    if (src == NULL || dst == NULL) {
        perror("floor: aligned_alloc");
        exit(1);
    }
    memset(src, 0x5a, size);
    memset(dst, 0, size);
    copy_series(dst, src, size, clamp(count / 10, 2, 1000));
    double best = 1e30;
    for (int s = 0; s < 3; s++) {
        double start = now();
        copy_series(dst, src, size, count);
        double per_copy = (now() - start) / (double)count;
        if (per_copy < best)
            best = per_copy;
    }
    printf("memcpy size=%zu iterations=%ld latency_us=%.4f bandwidth_mbps=%.1f\n", size, count,
           best * 1e6, (double)size / best / 1e6);
    fflush(stdout);
    free(src);
    free(dst);
}

int main(int argc, char **argv)
{
    int first = 1;
    if (argc > 2 && strcmp(argv[1], "-c") == 0) {
        if (sscanf(argv[2], "%d,%d", &cores[0], &cores[1]) != 2) {
            fprintf(stderr, "floor: -c expects CORE_A,CORE_B\n");
            return 2;
        }
        first = 3;
    }
    double one_way = cacheline();
    printf("cacheline size=%d iterations=%ld latency_us=%.4f\n", LINE, ROUND_TRIPS, one_way * 1e6);
    fflush(stdout);
    for (int a = first; a < argc; a++) {
        long size = atol(argv[a]);
        if (size <= 0) {
            fprintf(stderr, "floor: bad size %s\n", argv[a]);
            return 2;
        }
        memcpy_bandwidth((size_t)size);
    }
    return 0;
}
