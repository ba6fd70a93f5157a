/* parity.h - the CUDA backend's parity checks with the CPU's features
 * (parity.c): embeddings (hidden states pooled by the engine) and the KV
 * blocks released behind sliding windows. */
#ifndef TEST_CUDA_PARITY_H
#define TEST_CUDA_PARITY_H

/* Runs every parity check on CUDA (cpu_only 0) or, as a rehearsal of the
 * same code without a GPU, on the CPU (cpu_only 1); stories_gguf is the
 * converted stories260K file or NULL (its cases are skipped). Prints one
 * line per check (PASS or FAIL, with its figures) and returns the number of
 * failed checks. */
int test_cuda_parity(const char *stories_gguf, int cpu_only);

#endif
