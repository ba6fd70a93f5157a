/* kern_bench.h - measurement helpers for `brisk bench` and the kernel tests:
 * the machine's read bandwidth (the roofline of a decode step) and the speed
 * of one matmul shape. They allocate and free their own buffers (hundreds of
 * MiB) and print nothing. */
#ifndef KERN_BENCH_H
#define KERN_BENCH_H

#include <stddef.h>

#include "kernels/cpu/kern_pool.h"
#include "kernels/cpu/kern_types.h"

/* Read bandwidth in GB/s (1e9 bytes/s) of all pool threads reading one
 * random-filled buffer of `bytes` (choose well above the last-level cache,
 * e.g. 512 MiB), best of `reps`. Returns 0 if the buffer cannot be allocated. */
double kern_measure_read_bw(kern_pool *pool, size_t bytes, int reps);

/* Seconds per kern_matmul call (best of reps) for random weights of type wt
 * (n_out x n_in) and random activations (n_tok x n_in). The weights are
 * replicated into copies totalling >= 256 MiB and the calls rotate through
 * them, so each call reads W from DRAM as in a real decode step rather than
 * from cache. *gflops (may be NULL) gets 2*n_out*n_in*n_tok / seconds / 1e9
 * (GOP/s for Q8_0). Returns 0 on allocation failure. */
double kern_bench_matmul(kern_pool *pool, kern_type wt, int n_out, int n_in, int n_tok, int reps,
                         double *gflops);

/* Microseconds per kern_pool_run() of n_threads tiny tasks, averaged over
 * n_runs back-to-back dispatches (the per-call overhead of a decode step). */
double kern_bench_pool_dispatch(kern_pool *pool, int n_runs);

/* The AMX int8 peak (kern_bench_amx.c): every pool thread (pool NULL: the
 * caller alone) runs iters rounds of four independent TDPBSSD on tiles held
 * in registers, at the same time; returns the sum of the threads' GOP/s
 * (2 x 16 x 16 x 64 operations per instruction) and *gops_per_thread (may be
 * NULL) the mean. 0 (print nothing) when the CPU or the OS gives no AMX
 * (kern_cpu_detect()->amx), iters < 1 or on allocation failure; -1 when a
 * thread's accumulated tiles differ from iters x the scalar products of its
 * random operand tiles (a broken tile setup). About 0.1 s per 2^22 iters on a
 * 3 GHz Sapphire Rapids core. */
double kern_bench_amx_peak(kern_pool *pool, long iters, double *gops_per_thread);

#endif
