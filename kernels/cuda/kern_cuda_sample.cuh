/* kern_cuda_sample.cuh - sampling on the GPU: bias, penalties, temperature,
 * top-k, top-p, min-p and the draw, so only token ids cross to the host
 * (C header; the kernels are in kern_cuda_sample.cu).
 *
 * Row r of the job list samples logits[rows[r].logit_row] (n_vocab floats,
 * never modified: the sampler works on a copy in the workspace) with the
 * CPU sampler's semantics and order (models/sampler.h; the bias and penalty
 * edits are the sampler's own list, model_sampler_edits, uploaded as is):
 *   0. mask (a row with mask_first >= 0): l[id] = -inf for every id whose
 *      bit is clear in the row's n_mask_row = (n_vocab + 31) / 32 words at
 *      mask + mask_first (bit i of word i / 32), model_sampler_mask's bits:
 *      a grammar's allowed tokens less the banned ones. The CPU sampler sets
 *      the same logits to -inf before its edits, so the row then samples as
 *      model_sampler_sample would; a row whose mask allows nothing has no
 *      candidate (id 0, below);
 *   1. logit bias:  l[id] += value for each (id, value) of the row's bias
 *      edits (ids distinct: the host sums duplicates; ids out of range are
 *      ignored);
 *   2. penalties: for each (id, count) of the row's penalty edits (distinct
 *      ids of the repetition window, count = occurrences in the presence /
 *      frequency window, which may be 0): l = l > 0 ? l / rep : l * rep
 *      (when rep != 1), then, when count > 0, l -= presence + frequency * count;
 *   3. temperature <= 0: greedy, the argmax with ties to the lowest id and NaN
 *      never chosen (kern_cuda_argmax's rule); done.
 *   4. else candidates are ids with l > -inf, at l / temperature;
 *   5. top_k > 0: keep the top_k largest (ties by lower id first);
 *   6. top_p < 1: order the kept candidates by (logit desc, id asc) and keep
 *      the shortest prefix whose probability (softmax over the kept set, in
 *      double) reaches top_p;
 *   7. min_p > 0: of those, keep the ones with exp(l - max) >= min_p (the
 *      first always stays);
 *   8. draw: with u = rows[r].u in [0, 1) (drawn on the host from the
 *      sequence's seeded generator, so a seed reproduces the output), walk the
 *      survivors in increasing id order subtracting exp(l - max) from
 *      u * sum(exp(l - max)) and take the first that makes it negative (the
 *      last survivor if rounding leaves it non-negative).
 *   9. draft verification (a row with q_row >= 0, speculative decoding):
 *      q + q_row * n_vocab holds the draft's distribution q (n_vocab floats)
 *      and draft_id its proposal x. The row's distribution p is the
 *      survivors' weights exp(l - max) over their sum (0 elsewhere); the
 *      kernel writes p(x) to p_out[row] and draws, with the same u and the
 *      same walk, over the weights max(0, p - q) instead, when they have any
 *      mass (else over p). Greedy: the argmax, and p_out[row] 1 if it is x,
 *      else 0; no candidate: id 0 and p_out 0. (models/sampler.h's
 *      model_sampler_sample_spec, in the GPU's own walk order.)
 * No candidate (every logit -inf or NaN): id 0, as on the CPU.
 * The walk order (ids ascending) is the GPU's own: a seed gives the same
 * tokens run after run on the GPU, not the CPU sampler's tokens, though both
 * draw from the same distribution.
 *   ids:    n_rows int32 out (device).
 *   logits: n_logit_rows rows of n_vocab floats (device).
 *   rows:   n_rows kern_cuda_sample_row (device).
 *   edit_ids, edit_vals: the n_edits bias and penalty edits the rows point
 *           into (device; NULL when n_edits is 0); a penalty edit's value is
 *           its count as a float.
 *   mask:   n_mask_words uint32 words the masked rows point into (device;
 *           NULL when n_mask_words is 0), one row's mask after another.
 *   q:      n_q_rows rows of n_vocab floats the draft rows point into
 *           (device; NULL when n_q_rows is 0); p_out: n_rows floats out
 *           (device; written for the draft rows only; NULL when n_q_rows is 0).
 *   ws:     kern_cuda_sample_ws_bytes(n_rows, n_vocab) bytes (device, 4-byte
 *           aligned, not overlapping logits): row r's edited copy and
 *           order-preserving keys live at ws + r * n_vocab * 4.
 * The rows are in device memory, so only the kernel can check them: a row
 * whose logit_row is outside [0, n_logit_rows), whose edit ranges are
 * negative or run past n_edits, or whose mask_first is below -1 or whose
 * mask runs past n_mask_words, or whose q_row is below -1 or not below
 * n_q_rows, or a draft row whose draft_id is outside the vocabulary, gets
 * id -1, and nothing is read through it. (n_logit_rows, n_edits,
 * n_mask_words and n_q_rows are arguments for that check.) A
 * candidate whose l / temperature is NaN (a NaN temperature, +inf / +inf) is
 * dropped.
 * Deterministic: the same inputs give the same ids (fixed reduction orders,
 * no float atomics). The double sums of steps 6 and 8 are in the GPU's own
 * fixed order, so they round differently from a sequential sum (~1e-16
 * relative): a top-p cut or a draw can differ from a sequential reference
 * only when top_p or u * sum lands that close to a cumulative boundary.
 * Returns 0; BRISK_EINVAL for n_vocab <= 0, n_rows < 0, n_edits < 0,
 * n_mask_words < 0, n_logit_rows < 1 with rows, a NULL pointer, rows not
 * 8-byte aligned, a misaligned or too small ws; or the launch error.
 * Asynchronous on stream. */
#ifndef KERN_CUDA_SAMPLE_CUH
#define KERN_CUDA_SAMPLE_CUH

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kern_cuda_sample_row {
    int32_t logit_row;
    float temperature;
    int32_t top_k;
    float top_p;
    float min_p;
    float repetition_penalty;
    float presence_penalty;
    float frequency_penalty;
    int32_t bias_first, n_bias; /* edits [bias_first, bias_first + n_bias) */
    int32_t pen_first, n_pen;   /* edits [pen_first, pen_first + n_pen) */
    int32_t mask_first;         /* the row's mask: words [mask_first, + n_mask_row); -1: none */
    int32_t q_row;              /* draft verification: its row of q; -1: a plain row */
    int32_t draft_id;           /* the draft's proposal (q_row >= 0) */
    double u;
} kern_cuda_sample_row;

/* (size_t)-1 for n_rows < 0 or n_vocab <= 0. */
size_t kern_cuda_sample_ws_bytes(int n_rows, int n_vocab);

int kern_cuda_sample(int32_t *ids, const float *logits, int n_logit_rows, int n_vocab,
                     const kern_cuda_sample_row *rows, int n_rows, const int32_t *edit_ids,
                     const float *edit_vals, int n_edits, const uint32_t *mask, int n_mask_words,
                     const float *q, int n_q_rows, float *p_out, void *ws, size_t ws_bytes,
                     cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
