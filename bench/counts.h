/*
 * A comma-separated list of counts on a command line ("8,16"), for the C
 * programs of bench/ (mpi/multiseg.c, mpi/rpc_rate.c, floor/floor.c):
 * included by each, as they are built one file at a time.
 */
#ifndef NAVETTE_BENCH_COUNTS_H
#define NAVETTE_BENCH_COUNTS_H

#include <stdlib.h>

/* Reads `list` into `counts` (room for `room`), each from 1 to `most`:
 * how many, or -1 if the list is malformed, a count out of range or the
 * list too long. */
static int parse_counts(const char *list, long most, long *counts, int room)
{
    int n = 0;
    const char *p = list;
    while (*p) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 1 || v > most || n == room)
            return -1;
        counts[n++] = v;
        if (*end == ',')
            end++;
        else if (*end != '\0')
            return -1;
        p = end;
    }
    return n;
}

#endif
