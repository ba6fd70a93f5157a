/* cuda_model.h - what the files of test_cuda_model share: the rig (a backend
 * and its KV pool, built by hand), logits tables, the comparisons with their
 * margin rule, model loading (files, dummy shapes, the mini models), and the
 * family checks' entry.
 *
 * brisk_test.h's counters are per file: each file other than
 * test_cuda_model.c hands its counts back through its entry (see
 * cm_families_counts), and main adds them before its summary. */
#ifndef TEST_CUDA_MODEL_H
#define TEST_CUDA_MODEL_H

#include <stdint.h>

#include "kernels/cpu/kern_kv.h"
#include "kernels/cpu/kern_pool.h"
#include "models/backend.h"
#include "models/model.h"

/* A backend with a KV pool of n_seqs slots of ctx positions each, every
 * slot grown to ctx at open (no windows: one table for every layer). */
typedef struct cm_rig {
    model_backend *be;
    kv_cache *kv;
    int n_vocab;
} cm_rig;

/* The one thread pool of the test (all cores), created on first use and
 * freed by cm_pool_free at the end of main. */
kern_pool *cm_pool(void);
void cm_pool_free(void);

/* Opens a rig for m (borrowed: it must outlive the rig) on dev with the
 * device weight format w; the CPU's cache is f32 unless kv16, the GPU's
 * always f16. 0, or -1 with the reason printed (the rig is then safe to
 * close). */
int cm_rig_open(cm_rig *r, const model *m, model_device dev, model_weights_fmt w,
                int max_batch_tokens, int ctx, int n_seqs, int graphs, int kv16);
/* The same with the cache in dtype dt (kern_kv.h): the device must run it. */
int cm_rig_open_kv(cm_rig *r, const model *m, model_device dev, model_weights_fmt w,
                   int max_batch_tokens, int ctx, int n_seqs, int graphs, kern_kv_dtype dt);
void cm_rig_close(cm_rig *r);

int cm_argmax(const float *x, int n);

/* Logits of toks[0..n) at positions 0..n-1 of slot `slot`, evaluated in
 * chunks of `chunk` tokens; only the rows of positions p >= from with
 * (p - from) % stride == 0, and the last position, are kept: *n_rows of
 * them (malloc'ed, the caller frees; NULL after a failed forward, with the
 * reason printed). */
float *cm_logits(cm_rig *r, const int32_t *toks, int n, int chunk, int slot, int from, int stride,
                 int *n_rows);

/* Relative L2 error of row x against row ref (n floats). */
double cm_rel_err(const float *x, const float *ref, int n);

/* A position counts when the reference's top-1/top-2 margin exceeds
 * CM_MARGIN_K x bound x rms(row): at the bound, the two logits' errors
 * differ with an RMS of sqrt(2) x bound x rms, so such a margin is 7 of
 * those and no rounding within the bound flips it. Random weights give
 * near-ties (the margin of the top two of 128k logits is often ~0.1 rms):
 * those positions are not counted, and the count says how many were. */
#define CM_MARGIN_K 10.0

/* Whether row ref's margin is clear of bound (above). */
int cm_clear_margin(const float *ref, int nv, double bound);

/* Compares n rows of x with ref: the largest relative error (*worst), the
 * rows whose reference margin is clear (*counted) and, of those, how many
 * have another top-1 (returned). */
int cm_compare_rows(const float *ref, const float *x, int n, int nv, double bound, double *worst,
                    int *counted);

/* A GGUF file, or a dummy shape (seed 0, the synthetic vocabulary), in the
 * weight format f, converted on cm_pool(); NULL with the reason printed. */
model *cm_load(const char *path, model_weights_fmt f);
model *cm_load_dummy(const char *shape, model_weights_fmt f);

/* A mini model of a dummy shape's family (mini_model.c): the row, the
 * window pattern, soft-caps, q/k and post norms, biases, LongRoPE and
 * Phi-3's fused tensors of the shape at small widths (2 to 6 layers of 128,
 * a 512-token vocabulary), with a window of `window` positions where the
 * shape has one, written as a GGUF image with seeded random weights and
 * loaded in format f. *image gets the image, which must outlive the model
 * (free it after model_free). NULL with the reason printed. */
model *cm_mini_model(const char *shape, int window, model_weights_fmt f, void **image);

/* The family checks (families.c): for stories260K (when stories_gguf is
 * set), each family's dummy shape and its mini model, f16 and int8
 * weights: greedy agreement with the CPU over n positions, one batch
 * against chunked prefill, interleaved sequences against each alone, the
 * window's effect where the family has one, and the layer recipe. cpu_only:
 * the rehearsal without a GPU, on the mini models and stories260K, CPU f16
 * and int8 against CPU f32. The mixtures of experts' real shapes run only
 * with moe_only, which runs nothing but the mixture-of-experts cases (their
 * mini models too). */
void test_agreement(const char *stories_gguf, int cpu_only, int moe_only, int n);
/* The checks test_agreement counted: passed into *passed, failed returned. */
int cm_families_counts(int *passed);

/* The KV-cache dtypes (kv_dtypes.c, issue 38): for a few families, the
 * device's quantized caches (CUDA: int8, fp8; --cpu: q8_0, q4_0) against
 * its f16 cache on the same weights, prefill and decode: the quality rule
 * (top-1 agreement at clear margins) and a logit bound. Returns the checks
 * failed; *passed gets those passed. */
int test_kv_dtypes(int cpu_only, int *passed);

#endif
