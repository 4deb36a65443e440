/*
 * The physical floor of shared memory, for bench/compare.
 *
 *   floor [-c CORE_A,CORE_B] SIZE...
 *   floor [-c CORE_A,CORE_B] series -s SEGMENTS[,SEGMENTS...] SIZE...
 *   floor [-c CORE_A,CORE_B] indexed [-m heap|huge] LARGE...
 *   floor [-c CORE_A,CORE_B] cores
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
 * series: the floor of multiseg, what any implementation of its pattern
 * must do and nothing else, written plainly. Two threads on CORE_A and
 * CORE_B; each ping and each pong is SEGMENTS segments of SIZE bytes. The
 * receiver posts its receives (tag, buffer, room); the sender appends each
 * segment (an 8-byte header, tag and length, then its bytes) to a staging
 * packet then copies the packet into the peer's next ring cell, or writes
 * the segments into the cell, writes the cell's stamp last (release) and
 * demotes the cell's lines (CLDEMOTE, where CPUID has it) for the reader;
 * or it writes each segment into a cell of its own and publishes it at
 * once (the fastest of the three is printed). The receiver spins on a
 * cell's stamp,
 * matches each segment to the first posted receive of its tag not yet
 * done, copies it there, and checks that all are done. Cells are whole
 * pages, 64 to a ring. One-way time = round trip / 2, best of 3 series
 * after a warm-up. A series too large for a cell of 1 MiB is left out.
 *
 * indexed: the floor of indexed over shared memory for an implementation
 * that copies the large block zero times itself, as the comparison asks
 * of navette: only the kernel moves it, by a single copy between the two
 * processes' memories (process_vm_readv / process_vm_writev). Two
 * processes (fork) on CORE_A and CORE_B pass a message of a 64-byte head
 * and a LARGE-byte block in separate memory back and forth. The sender
 * writes the head and its block's address into a shared mailbox, stamp
 * last. Whole: the receiver copies the head out, reads the block with one
 * process_vm_readv and acknowledges (a word the sender never waits for:
 * the reply says the same). Shared: the receiver posts where the block's
 * second half goes, reads the first half while the sender writes the
 * second (process_vm_writev), then waits for the sender's word that it
 * is written: each copies half, on its core. The fastest of the two is
 * printed (both go to stderr). One-way time = round trip / 2, best of 3 series after a
 * warm-up; the received blocks are checked once per size. The large
 * blocks are whole pages of the heap, or with -m huge mappings of each
 * process's own backed by transparent huge pages (../huge.h), as navette
 * bench indexed --memory huge and bench/mpi/indexed.c -m huge have them.
 *
 * cores: how many instructions each of CORE_A and CORE_B runs now: one
 * thread pinned to each in turn runs a loop of independent additions
 * (four chains, eight a turn) and reports additions per nanosecond, best
 * of 5 series of about 10 ms; then one thread on each runs it at once.
 * On a virtual machine a core's figure alone falls while the physical
 * core's other hyper-thread is busy (another guest's work) or its clock
 * is lowered; both figures together fall to about half of alone where the
 * host runs the two virtual cores as hyper-threads of one physical core
 * (each of two ranks, one per core, then slows the other while it
 * spins). Code bound by its instructions slows down in proportion, code
 * that waits on memory far less.
 *
 * Output, one line per figure:
 *   cacheline size=64 iterations=<round trips> latency_us=<one-way µs>
 *   memcpy size=<bytes> iterations=<copies> latency_us=<µs per copy> bandwidth_mbps=<MB/s>
 *   segments=<S> size=<bytes per segment> iterations=<round trips> latency_us=<one-way µs> bandwidth_mbps=<MB/s>
 * (the last as bench/mpi/multiseg.c prints it), with `indexed`
 *   size=<64+LARGE> head=64 large=<LARGE> iterations=<round trips> latency_us=<one-way µs> bandwidth_mbps=<MB/s>
 * (as bench/mpi/indexed.c prints it), and with `cores`
 *   core core=<id> adds_per_ns=<additions per ns, alone> together=<the same, both at once>
 */
#define _GNU_SOURCE
#include <cpuid.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../counts.h"
#include "../huge.h"

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

/* A size on the command line, from `least` bytes to 1 GiB; -1 (said on
 * stderr) if it is not one. */
static long size_arg(const char *text, long least)
{
    char *end;
    long size = strtol(text, &end, 10);
    if (end == text || *end != '\0' || size < least || size > (1L << 30)) {
        fprintf(stderr, "floor: bad size %s (%ld bytes to 1 GiB)\n", text, least);
        return -1;
    }
    return size;
}

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

/* ---- series: the floor of multiseg ---- */

#define RING_CELLS 64
/* A larger series is left out: its ring would take 64 cells of it per
 * side. */
#define MOST_CELL (1L << 20)

struct posted {
    uint32_t tag, room, len, done;
    unsigned char *buf;
};

/* One side of the series: what it sends, where it receives, its ring.
 * Aligned apart (two lines, as the hardware prefetches them in pairs): each
 * side writes its counters at every series, and the other must not pull
 * them in with what it reads. */
struct side {
    _Alignas(128) int core;
    unsigned char *ring; /* RING_CELLS cells this side writes */
    long sent, got;      /* cells written, cells read */
    int first;           /* the first posted receive not done */
    unsigned char *data, *bufs, *stage;
    struct posted *posted;
};

static struct {
    _Alignas(128) int segments;
    size_t size, cell;
    long round_trips;
    int demote;
    enum { STAGED, DIRECT, PER_SEGMENT } variant;
    struct side sides[2];
} series_run;

static size_t padded(size_t n) { return (n + 7) & ~(size_t)7; }

static void post(struct side *s)
{
    for (int k = 0; k < series_run.segments; k++)
        s->posted[k] = (struct posted){
            .tag = (uint32_t)k,
            .room = (uint32_t)series_run.size,
            .buf = s->bufs + (size_t)k * series_run.size,
        };
}

/* Writes segments [from, to) as a packet at `packet` (from byte 16 on);
 * returns the packet's end. */
static size_t put_segments(const struct side *s, unsigned char *packet, int from, int to)
{
    size_t z = series_run.size, at = 16;
    for (int k = from; k < to; k++) {
        uint32_t header[2] = {(uint32_t)k, (uint32_t)z};
        memcpy(packet + at, header, sizeof header);
        memcpy(packet + at + 8, s->data + (size_t)k * z, z);
        at += 8 + padded(z);
    }
    uint32_t count = (uint32_t)(to - from);
    memcpy(packet + 8, &count, sizeof count);
    return at;
}

/* Publishes `cell` (its stamp, last) as this side's next cell. */
static void publish(struct side *s, unsigned char *cell)
{
    atomic_store_explicit((_Atomic uint64_t *)cell, (uint64_t)++s->sent, memory_order_release);
}

static unsigned char *next_cell(const struct side *s)
{
    return s->ring + (size_t)(s->sent % RING_CELLS) * series_run.cell;
}

/* Staged: the packet is put together aside, then copied into one cell at
 * once (the reader's polls do not meet each store); direct: the segments
 * are written into the cell (one copy fewer); per segment: each segment
 * is a cell of its own, published as it is written (the reader starts on
 * the first while the writer writes the next). */
static void send_series(struct side *s)
{
    int n = series_run.segments;
    if (series_run.variant == PER_SEGMENT) {
        for (int k = 0; k < n; k++) {
            unsigned char *cell = next_cell(s);
            put_segments(s, cell, k, k + 1);
            publish(s, cell);
        }
        return;
    }
    unsigned char *cell = next_cell(s);
    __builtin_prefetch(cell, 1, 3);
    size_t at;
    if (series_run.variant == STAGED) {
        at = put_segments(s, s->stage, 0, n);
        memcpy(cell + 8, s->stage + 8, at - 8);
    } else {
        at = put_segments(s, cell, 0, n);
    }
    publish(s, cell);
    if (series_run.demote)
        for (size_t line = 0; line < at; line += LINE)
            __asm__ volatile("cldemote (%0)" : : "r"(cell + line) : "memory");
}

/* Lands the segments of the peer's next cell in `s`'s posted receives,
 * once it is published: how many. */
static int land_cell(struct side *s, const struct side *peer)
{
    int n = series_run.segments;
    unsigned char *cell = peer->ring + (size_t)(s->got % RING_CELLS) * series_run.cell;
    while (atomic_load_explicit((_Atomic uint64_t *)cell, memory_order_acquire) !=
           (uint64_t)s->got + 1)
        __builtin_ia32_pause();
    uint32_t count;
    memcpy(&count, cell + 8, sizeof count);
    size_t at = 16;
    for (uint32_t i = 0; i < count; i++) {
        uint32_t header[2];
        memcpy(header, cell + at, sizeof header);
        int j = s->first;
        while (j < n && (s->posted[j].done || s->posted[j].tag != header[0]))
            j++;
        if (j == n || header[1] > s->posted[j].room) {
            fprintf(stderr, "floor: a segment matched no receive\n");
            exit(1);
        }
        memcpy(s->posted[j].buf, cell + at + 8, header[1]);
        s->posted[j].len = header[1];
        s->posted[j].done = 1;
        while (s->first < n && s->posted[s->first].done)
            s->first++;
        at += 8 + padded(header[1]);
    }
    s->got++;
    return (int)count;
}

static void recv_series(struct side *s, const struct side *peer)
{
    int n = series_run.segments;
    s->first = 0;
    for (int landed = 0; landed < n;)
        landed += land_cell(s, peer);
    for (int k = 0; k < n; k++)
        if (!s->posted[k].done || s->posted[k].len != series_run.size) {
            fprintf(stderr, "floor: a receive of the series was not done\n");
            exit(1);
        }
}

static void *series_pong(void *arg)
{
    (void)arg;
    struct side *me = &series_run.sides[1], *peer = &series_run.sides[0];
    pin(me->core);
    for (long i = 0; i < 4 * series_run.round_trips; i++) {
        post(me);
        recv_series(me, peer);
        send_series(me);
    }
    return NULL;
}

static int has_cldemote(void)
{
    unsigned a, b, c, d;
    return __get_cpuid_count(7, 0, &a, &b, &c, &d) && (c & (1u << 25)) != 0;
}

/* `bytes` (at least one) on whole pages of their own, zeroed (NULL on
 * failure). */
static void *pages(size_t bytes)
{
    size_t rounded = bytes ? (bytes + 4095) / 4096 * 4096 : 4096;
    void *p = aligned_alloc(4096, rounded);
    if (p != NULL)
        memset(p, 0, rounded);
    return p;
}

static int series_setup(int segments, size_t size)
{
    /* Whole pages, so that no line of one cell is a neighbour the
     * hardware prefetches with the line another cell is polled on. */
    size_t cell = (16 + (size_t)segments * (8 + padded(size)) + 4095) / 4096 * 4096;
    if (cell > (size_t)MOST_CELL)
        return 0;
    series_run.segments = segments;
    series_run.size = size;
    series_run.cell = cell;
    series_run.round_trips = clamp(400000L / segments, 1000, 25000);
    for (int i = 0; i < 2; i++) {
        struct side *s = &series_run.sides[i];
        s->core = cores[i];
        s->sent = s->got = 0;
        size_t bytes = (size_t)segments * (size ? size : 1);
        /* Each buffer on pages of its own: small ones side by side would
         * share lines between the two threads. */
        s->ring = pages(RING_CELLS * cell);
        s->data = pages(bytes);
        s->bufs = pages(bytes);
        s->stage = pages(cell);
        s->posted = pages((size_t)segments * sizeof *s->posted);
        if (!s->ring || !s->data || !s->bufs || !s->stage || !s->posted) {
            perror("floor: series memory");
            exit(1);
        }
        for (size_t b = 0; b < bytes; b++)
            s->data[b] = (unsigned char)(b * 31 + (size_t)i);
    }
    return 1;
}

static void series_free(void)
{
    for (int i = 0; i < 2; i++) {
        struct side *s = &series_run.sides[i];
        free(s->ring);
        free(s->data);
        free(s->bufs);
        free(s->stage);
        free(s->posted);
    }
}

/* The best one-way time of a series written as `variant` (best of 3
 * after a warm-up). */
static double series_variant(int variant)
{
    series_run.variant = variant;
    for (int i = 0; i < 2; i++) {
        series_run.sides[i].sent = series_run.sides[i].got = 0;
        memset(series_run.sides[i].ring, 0, RING_CELLS * series_run.cell);
    }
    pthread_t thread;
    if (pthread_create(&thread, NULL, series_pong, NULL) != 0) {
        perror("floor: pthread_create");
        exit(1);
    }
    struct side *me = &series_run.sides[0], *peer = &series_run.sides[1];
    pin(me->core);
    double best = 1e30;
    for (int round = 0; round < 4; round++) {
        double start = now();
        for (long i = 0; i < series_run.round_trips; i++) {
            post(me);
            send_series(me);
            recv_series(me, peer);
        }
        double one_way = (now() - start) / (2.0 * (double)series_run.round_trips);
        if (round > 0 && one_way < best) /* the first is a warm-up */
            best = one_way;
    }
    pthread_join(thread, NULL);
    return best;
}

static void series(int segments, size_t size)
{
    if (!series_setup(segments, size))
        return;
    double best = series_variant(STAGED);
    double direct = series_variant(DIRECT);
    if (direct < best)
        best = direct;
    /* A series of cells fits the ring: a side writes a series only once
     * the peer has read the one before. */
    if (segments <= RING_CELLS) {
        double per_segment = series_variant(PER_SEGMENT);
        if (per_segment < best)
            best = per_segment;
    }
    printf("segments=%d size=%zu iterations=%ld latency_us=%.4f bandwidth_mbps=%.2f\n", segments,
           size, series_run.round_trips, best * 1e6, (double)segments * (double)size / best / 1e6);
    fflush(stdout);
    series_free();
}

static int series_main(int argc, char **argv, int first)
{
    long counts[16];
    int ncounts = -1;
    if (first + 1 < argc && strcmp(argv[first], "-s") == 0) {
        ncounts = parse_counts(argv[first + 1], 1024, counts, 16);
        first += 2;
    }
    if (ncounts < 1 || first >= argc) {
        fprintf(stderr, "usage: floor [-c CORE_A,CORE_B] series -s SEGMENTS[,SEGMENTS...] SIZE...\n");
        return 2;
    }
    series_run.demote = has_cldemote();
    for (int c = 0; c < ncounts; c++)
        for (int a = first; a < argc; a++) {
            long size = size_arg(argv[a], 0);
            if (size < 0)
                return 2;
            series((int)counts[c], (size_t)size);
        }
    return 0;
}

/* ---- indexed: the floor of a message whose large block only the kernel
 * copies ---- */

#define HEAD 64

/* One direction's mailbox, in memory both processes map. Each word on
 * lines of its own: the sender writes `req` (and what it publishes), the
 * receiver `cts` and `ack`, the sender `done`. */
struct mailbox {
    _Alignas(128) _Atomic uint64_t req;
    uint64_t src;
    unsigned char head[HEAD];
    _Alignas(128) _Atomic uint64_t cts;
    uint64_t dst;
    _Alignas(128) _Atomic uint64_t done;
    _Alignas(128) _Atomic uint64_t ack;
};

enum { WHOLE, SHARED };

static struct {
    size_t large;
    long round_trips;
    int variant;
    enum memory memory; /* of the large blocks (heap: pages of the heap) */
    pid_t pids[2];
    struct mailbox *to[2]; /* to[s]: the mailbox of messages sent to side s */
    unsigned char *send_head, *send_large, *recv_head, *recv_large;
} indexed_run;

/* The peer process, in its parent while it runs (0 in the peer itself,
 * which its parent's end kills: PR_SET_PDEATHSIG), and whether it ended
 * well before its parent looked for it. */
static pid_t indexed_child;
static int indexed_child_done;

/* Leaves at once: the peer process must not flush its parent's buffers. */
static void indexed_fail(const char *what)
{
    fprintf(stderr, "floor: %s\n", what);
    _exit(1);
}

static unsigned char indexed_byte(int from, int block, size_t i)
{
    return (unsigned char)((i * 31) ^ (size_t)(from * 77) ^ (size_t)(block * 101));
}

/* Waits until `word` holds `value`. The parent also watches its peer
 * process: one that ended well wrote all it had to (this wait then ends
 * at once), one that failed never writes again. */
static void wait_for(_Atomic uint64_t *word, uint64_t value)
{
    for (unsigned long spins = 1; atomic_load_explicit(word, memory_order_acquire) != value;
         spins++) {
        __builtin_ia32_pause();
        int status;
        if (indexed_child != 0 && spins % (1UL << 20) == 0 &&
            waitpid(indexed_child, &status, WNOHANG) == indexed_child) {
            indexed_child = 0;
            if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
                indexed_fail("the indexed peer process failed");
            indexed_child_done = 1;
        } else if (indexed_child == 0 && indexed_child_done && spins % (1UL << 20) == 0) {
            indexed_fail("the indexed peer process ended before its last message");
        }
    }
}

/* Moves `len` bytes between `local` and `remote` in process `pid`, by the
 * kernel: a read, or a write when `write` is set. Leaves on failure. */
static void kernel_copy(pid_t pid, void *local, uint64_t remote, size_t len, int write)
{
    while (len > 0) {
        struct iovec l = {local, len}, r = {(void *)(uintptr_t)remote, len};
        ssize_t n = write ? process_vm_writev(pid, &l, 1, &r, 1, 0)
                          : process_vm_readv(pid, &l, 1, &r, 1, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            perror(write ? "floor: process_vm_writev" : "floor: process_vm_readv");
            _exit(1);
        }
        if (n == 0)
            indexed_fail(write ? "process_vm_writev moved nothing" : "process_vm_readv moved nothing");
        local = (char *)local + n;
        remote += (uint64_t)n;
        len -= (size_t)n;
    }
}

/* Message `n`'s stamp, at both ends of a large block of at least 16
 * bytes: the receiver checks it, so that a copy skipped is seen. */
static void stamp(unsigned char *block, uint64_t n)
{
    if (indexed_run.large >= 16) {
        memcpy(block, &n, sizeof n);
        memcpy(block + indexed_run.large - sizeof n, &n, sizeof n);
    }
}

static void check_stamp(const unsigned char *block, uint64_t n)
{
    uint64_t first, last;
    if (indexed_run.large < 16)
        return;
    memcpy(&first, block, sizeof first);
    memcpy(&last, block + indexed_run.large - sizeof last, sizeof last);
    if (first != n || last != n)
        indexed_fail("a received block is not the message sent");
}

/* Message `n` from side `me` to the other side. */
static void indexed_send(int me, uint64_t n)
{
    struct mailbox *box = indexed_run.to[1 - me];
    /* The block of message n - 1 was read (the reply came after it, so
     * this never waits). */
    wait_for(&box->ack, n - 1);
    stamp(indexed_run.send_large, n);
    box->src = (uint64_t)(uintptr_t)indexed_run.send_large;
    memcpy(box->head, indexed_run.send_head, HEAD);
    atomic_store_explicit(&box->req, n, memory_order_release);
    if (indexed_run.variant == SHARED) {
        size_t half = indexed_run.large / 2;
        wait_for(&box->cts, n);
        kernel_copy(indexed_run.pids[1 - me], indexed_run.send_large + half, box->dst,
                    indexed_run.large - half, 1);
        atomic_store_explicit(&box->done, n, memory_order_release);
    }
}

/* Message `n` to side `me`, complete on return. */
static void indexed_recv(int me, uint64_t n)
{
    struct mailbox *box = indexed_run.to[me];
    pid_t peer = indexed_run.pids[1 - me];
    wait_for(&box->req, n);
    memcpy(indexed_run.recv_head, box->head, HEAD);
    if (indexed_run.variant == SHARED) {
        size_t half = indexed_run.large / 2;
        box->dst = (uint64_t)(uintptr_t)(indexed_run.recv_large + half);
        atomic_store_explicit(&box->cts, n, memory_order_release);
        kernel_copy(peer, indexed_run.recv_large, box->src, half, 0);
        wait_for(&box->done, n);
    } else {
        kernel_copy(peer, indexed_run.recv_large, box->src, indexed_run.large, 0);
    }
    check_stamp(indexed_run.recv_large, n);
    atomic_store_explicit(&box->ack, n, memory_order_release);
}

/* Checks the last message side `me` received from the other side, its
 * stamps put back to the pattern's bytes first. */
static void indexed_check(int me)
{
    int from = 1 - me;
    size_t large = indexed_run.large;
    for (size_t i = 0; i < HEAD; i++)
        if (indexed_run.recv_head[i] != indexed_byte(from, 0, i))
            indexed_fail("a received head differs from what was sent");
    for (size_t i = 0; i < large; i++) {
        int stamped = large >= 16 && (i < 8 || i >= large - 8);
        if (!stamped && indexed_run.recv_large[i] != indexed_byte(from, 1, i))
            indexed_fail("a received block differs from what was sent");
    }
}

/* Fills side `side`'s blocks to send, and clears those it receives into. */
static void indexed_fill(int side)
{
    for (size_t i = 0; i < indexed_run.large; i++)
        indexed_run.send_large[i] = indexed_byte(side, 1, i);
    for (size_t i = 0; i < HEAD; i++)
        indexed_run.send_head[i] = indexed_byte(side, 0, i);
    memset(indexed_run.recv_large, 0, indexed_run.large);
    memset(indexed_run.recv_head, 0, HEAD);
}

/* With -m huge, each side's large blocks in huge pages of its own, mapped
 * after the fork (a huge page shared copy-on-write with the other process
 * would be split on its first write); freed by unhuge_blocks. */
static void huge_blocks(void)
{
    if (indexed_run.memory != MEMORY_HUGE)
        return;
    indexed_run.send_large = block_alloc(MEMORY_HUGE, indexed_run.large);
    indexed_run.recv_large = block_alloc(MEMORY_HUGE, indexed_run.large);
    if (!indexed_run.send_large || !indexed_run.recv_large)
        indexed_fail("cannot map the large blocks in huge pages");
}

static void unhuge_blocks(void)
{
    if (indexed_run.memory != MEMORY_HUGE)
        return;
    block_free(MEMORY_HUGE, indexed_run.send_large, indexed_run.large);
    block_free(MEMORY_HUGE, indexed_run.recv_large, indexed_run.large);
    indexed_run.send_large = indexed_run.recv_large = NULL;
}

/* The best one-way time of `variant` (best of 3 after a warm-up): side 0
 * here, side 1 in a child process. */
static double indexed_variant(int variant)
{
    indexed_run.variant = variant;
    for (int s = 0; s < 2; s++)
        memset(indexed_run.to[s], 0, sizeof *indexed_run.to[s]);
    long trips = indexed_run.round_trips;
    indexed_run.pids[0] = getpid();
    /* The peer starts watching no one (see wait_for). */
    indexed_child = 0;
    indexed_child_done = 0;
    fflush(NULL);
    pid_t child = fork();
    if (child < 0) {
        perror("floor: fork");
        exit(1);
    }
    if (child == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        /* The parent may have ended before the line above. */
        if (getppid() != indexed_run.pids[0])
            _exit(1);
        pin(cores[1]);
        indexed_run.pids[1] = getpid();
        huge_blocks();
        indexed_fill(1);
        for (uint64_t n = 1; n <= (uint64_t)(4 * trips); n++) {
            indexed_recv(1, n);
            indexed_send(1, n);
        }
        indexed_check(1);
        _exit(0);
    }
    indexed_run.pids[1] = child;
    indexed_child = child;
    pin(cores[0]);
    huge_blocks();
    indexed_fill(0);
    double best = 1e30;
    uint64_t n = 0;
    for (int round = 0; round < 4; round++) {
        double start = now();
        for (long i = 0; i < trips; i++) {
            n++;
            indexed_send(0, n);
            indexed_recv(0, n);
        }
        double one_way = (now() - start) / (2.0 * (double)trips);
        if (round > 0 && one_way < best) /* the first is a warm-up */
            best = one_way;
    }
    indexed_check(0);
    if (indexed_child != 0) {
        int status;
        indexed_child = 0;
        if (waitpid(child, &status, 0) != child || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
            indexed_fail("the indexed peer process failed");
    }
    unhuge_blocks();
    return best;
}

static void indexed(size_t large)
{
    size_t size = HEAD + large;
    indexed_run.large = large;
    indexed_run.round_trips = clamp((long)((256UL << 20) / size), 8, 25000);
    indexed_run.send_head = pages(HEAD);
    indexed_run.recv_head = pages(HEAD);
    /* With -m huge, each side maps its own after the fork. */
    int heap = indexed_run.memory == MEMORY_HEAP;
    indexed_run.send_large = heap ? pages(large) : NULL;
    indexed_run.recv_large = heap ? pages(large) : NULL;
    if (!indexed_run.send_head || !indexed_run.recv_head ||
        (heap && (!indexed_run.send_large || !indexed_run.recv_large))) {
        perror("floor: indexed memory");
        exit(1);
    }
    double best = indexed_variant(WHOLE);
    double shared = indexed_variant(SHARED);
    /* Both, for whoever looks (bench/compare reads stdout only). */
    fprintf(stderr, "floor: indexed %zu: whole %.4f us, shared %.4f us\n", size, best * 1e6,
            shared * 1e6);
    if (shared < best)
        best = shared;
    printf("size=%zu head=%d large=%zu iterations=%ld latency_us=%.4f bandwidth_mbps=%.2f\n", size,
           HEAD, large, indexed_run.round_trips, best * 1e6, (double)size / best / 1e6);
    fflush(stdout);
    free(indexed_run.send_head);
    free(indexed_run.recv_head);
    free(indexed_run.send_large);
    free(indexed_run.recv_large);
}

static int indexed_main(int argc, char **argv, int first)
{
    indexed_run.memory = MEMORY_HEAP;
    if (first + 1 < argc && strcmp(argv[first], "-m") == 0) {
        if (parse_memory(argv[first + 1], &indexed_run.memory) != 0) {
            fprintf(stderr, "floor: -m expects heap or huge\n");
            return 2;
        }
        first += 2;
    }
    if (first >= argc) {
        fprintf(stderr, "usage: floor [-c CORE_A,CORE_B] indexed [-m heap|huge] LARGE...\n");
        return 2;
    }
    /* A peer may read and write this process's memory under Yama's
     * restricted ptrace too (without Yama, the call fails harmlessly). */
    prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY);
    void *shared = mmap(NULL, 2 * sizeof(struct mailbox), PROT_READ | PROT_WRITE,
                        MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (shared == MAP_FAILED) {
        perror("floor: mmap");
        return 1;
    }
    indexed_run.to[0] = shared;
    indexed_run.to[1] = (struct mailbox *)shared + 1;
    for (int a = first; a < argc; a++) {
        long large = size_arg(argv[a], 0);
        if (large < 0)
            return 2;
        indexed((size_t)large);
    }
    munmap(shared, 2 * sizeof(struct mailbox));
    return 0;
}

/* Additions per nanosecond on the calling thread's core: best of 5 series
 * of `turns` turns of 8 independent additions. */
static double adds_per_ns(long turns)
{
    double best = 0;
    for (int k = 0; k < SERIES; k++) {
        unsigned long a = 1, b = 2, c = 3, d = 4;
        double start = now();
        for (long i = 0; i < turns; i++)
            __asm__ volatile("add $1, %0\n\tadd $1, %1\n\tadd $1, %2\n\tadd $1, %3\n\t"
                             "add $1, %0\n\tadd $1, %1\n\tadd $1, %2\n\tadd $1, %3"
                             : "+r"(a), "+r"(b), "+r"(c), "+r"(d));
        double rate = 8.0 * (double)turns / ((now() - start) * 1e9);
        if (rate > best)
            best = rate;
    }
    return best;
}

/* One core's rate while the other core runs the same loop. */
struct together {
    int core;
    pthread_barrier_t *start;
    double rate;
};

static void *run_together(void *arg)
{
    struct together *t = arg;
    pin(t->core);
    adds_per_ns(1000000L);
    pthread_barrier_wait(t->start);
    t->rate = adds_per_ns(12000000L);
    return NULL;
}

/* `cores`: each core's additions per nanosecond alone, in turn, then
 * while both run at once (two hyper-threads of one physical core share
 * it: each then runs about half as much). */
static int cores_main(void)
{
    double alone[2];
    for (int k = 0; k < 2; k++) {
        pin(cores[k]);
        adds_per_ns(1000000L); /* warm-up: the clock ramps up */
        alone[k] = adds_per_ns(12000000L);
    }
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, 2);
    struct together both[2] = {{cores[0], &start, 0}, {cores[1], &start, 0}};
    pthread_t other;
    if (pthread_create(&other, NULL, run_together, &both[1]) != 0) {
        fprintf(stderr, "floor: cannot start a thread\n");
        return 1;
    }
    run_together(&both[0]);
    pthread_join(other, NULL);
    pthread_barrier_destroy(&start);
    for (int k = 0; k < 2; k++)
        printf("core core=%d adds_per_ns=%.3f together=%.3f\n", cores[k], alone[k], both[k].rate);
    return 0;
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
    if (first < argc && strcmp(argv[first], "series") == 0)
        return series_main(argc, argv, first + 1);
    if (first < argc && strcmp(argv[first], "indexed") == 0)
        return indexed_main(argc, argv, first + 1);
    if (first < argc && strcmp(argv[first], "cores") == 0)
        return cores_main();
    double one_way = cacheline();
    printf("cacheline size=%d iterations=%ld latency_us=%.4f\n", LINE, ROUND_TRIPS, one_way * 1e6);
    fflush(stdout);
    for (int a = first; a < argc; a++) {
        long size = size_arg(argv[a], 1);
        if (size < 0)
            return 2;
        memcpy_bandwidth((size_t)size);
    }
    return 0;
}
