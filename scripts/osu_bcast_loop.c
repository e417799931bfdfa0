/* OSU's osu_bcast timing loop, written out (the OSU sources are not in the package registries here).
 *
 * As osu_bcast (OSU Micro-Benchmarks, mpi/collective/osu_bcast.c): for each size, `skip` warm-up and
 * `iterations` timed MPI_Bcast calls from rank 0, a barrier after each, the call alone timed; each
 * rank's mean, then the average, minimum and maximum over ranks; 1000/100 iterations up to 8 KiB,
 * 100/10 above. Sizes 1 B .. MAX doubling. Prints "size avg_us min_us max_us" per line.
 *
 *     mpicc -O2 -o osu_bcast_loop osu_bcast_loop.c && mpiexec -n 2 ./osu_bcast_loop 1048576
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    long max_bytes = argc > 1 ? atol(argv[1]) : 1 << 20;
    char *buffer = malloc(max_bytes);
    for (long i = 0; i < max_bytes; i++) buffer[i] = (char)i;
    if (rank == 0) printf("# size_bytes avg_us min_us max_us (%d ranks)\n", size);
    for (long bytes = 1; bytes <= max_bytes; bytes *= 2) {
        int iterations = bytes > 8192 ? 100 : 1000, skip = bytes > 8192 ? 10 : 100;
        double timer = 0.0;
        MPI_Barrier(MPI_COMM_WORLD);
        for (int i = 0; i < iterations + skip; i++) {
            double t_start = MPI_Wtime();
            MPI_Bcast(buffer, (int)bytes, MPI_CHAR, 0, MPI_COMM_WORLD);
            double t_stop = MPI_Wtime();
            if (i >= skip) timer += t_stop - t_start;
            MPI_Barrier(MPI_COMM_WORLD);
        }
        double latency = timer * 1e6 / iterations, avg, min, max;
        MPI_Reduce(&latency, &min, 1, MPI_DOUBLE, MPI_MIN, 0, MPI_COMM_WORLD);
        MPI_Reduce(&latency, &max, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
        MPI_Reduce(&latency, &avg, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
        if (rank == 0) printf("%ld %.2f %.2f %.2f\n", bytes, avg / size, min, max);
    }
    free(buffer);
    MPI_Finalize();
    return 0;
}
