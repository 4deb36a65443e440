/*
 * Memory for the large blocks of the C programs of bench/ (mpi/indexed.c,
 * floor/floor.c), as navette bench --memory chooses it for navette:
 *
 *   heap  malloc'd (the process's allocator);
 *   huge  a mapping of its own, aligned to and made of whole 2 MiB pages,
 *         which the kernel is asked to back with transparent huge pages
 *         (madvise MADV_HUGEPAGE, before its first touch), as
 *         navette::HugeBuffer does.
 *
 * Included by each program (they are built one file at a time).
 */
#ifndef NAVETTE_BENCH_HUGE_H
#define NAVETTE_BENCH_HUGE_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define HUGE_PAGE (2UL << 20)

enum memory { MEMORY_HEAP, MEMORY_HUGE };

/* The memory named `name` ("heap" or "huge") into `memory`: 0, or -1 for
 * another name. */
static int parse_memory(const char *name, enum memory *memory)
{
    if (strcmp(name, "heap") == 0)
        *memory = MEMORY_HEAP;
    else if (strcmp(name, "huge") == 0)
        *memory = MEMORY_HUGE;
    else
        return -1;
    return 0;
}

/* The bytes a block of `bytes` takes in `memory` (what block_free needs). */
static size_t block_mapped(enum memory memory, size_t bytes)
{
    if (bytes == 0)
        bytes = 1;
    return memory == MEMORY_HUGE ? (bytes + HUGE_PAGE - 1) / HUGE_PAGE * HUGE_PAGE : bytes;
}

/* `bytes` zeroed bytes (at least one) in `memory`; NULL on failure. */
static void *block_alloc(enum memory memory, size_t bytes)
{
    size_t mapped = block_mapped(memory, bytes);
    if (memory == MEMORY_HEAP)
        return calloc(1, mapped);
    /* A huge page more, to find an aligned start inside; the rest is
     * given back. */
    char *base = mmap(NULL, mapped + HUGE_PAGE, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED)
        return NULL;
    char *start = (char *)(((uintptr_t)base + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1));
    if (start > base)
        munmap(base, (size_t)(start - base));
    size_t tail = HUGE_PAGE - (size_t)(start - base);
    if (tail > 0)
        munmap(start + mapped, tail);
    madvise(start, mapped, MADV_HUGEPAGE); /* advice: ordinary pages if refused */
    memset(start, 0, mapped);              /* touched after the advice */
    return start;
}

/* Frees a block of `bytes` from block_alloc(memory, bytes). */
static void block_free(enum memory memory, void *block, size_t bytes)
{
    if (block == NULL)
        return;
    if (memory == MEMORY_HEAP)
        free(block);
    else
        munmap(block, block_mapped(memory, bytes));
}

#endif
