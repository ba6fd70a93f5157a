/* kern_ops.h - CPU compute kernels: matmul for every weight type, and the
 * transformer ops (RMSNorm, RoPE, SiLU-gated MLP, softmax, attention).
 *
 * Every kernel has a plain C reference (`*_ref`) that is the definition of
 * its result; the SIMD paths (AVX2, AVX-512, AVX-512 VNNI) are chosen at run
 * time by kern_cpu_level() and tested against the reference on random data.
 * All pointers are borrowed; nothing here allocates except where stated. */
#ifndef KERN_OPS_H
#define KERN_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/cpu/kern_cpu.h"
#include "kernels/cpu/kern_kv.h"
#include "kernels/cpu/kern_pool.h"
#include "kernels/cpu/kern_types.h"

#ifdef __cplusplus /* the CUDA kernels include this header for kern_rope_mode */
extern "C" {
#endif

/* ---- matmul ---------------------------------------------------------------
 * y[t][o] = sum_i W[o][i] * x[t][i]   for t < n_tok, o < n_out.
 *   W: n_out rows of n_in values of type wt (F32, F16, BF16, Q8_0, Q8_0M,
 *      Q4_0 or Q4_1), each row kern_row_bytes(wt, n_in) bytes, rows back to
 *      back.
 *   x: n_tok rows of n_in floats (row stride n_in); y: n_tok rows of n_out
 *      floats (row stride n_out).
 *   n_in must be a multiple of 32 for the quantized types (and is, for every
 *   model shape).
 * Integer weights (Q8_0, Q8_0M, Q4_0, Q4_1): x is first quantized per row and
 * 32-block to int16 (d = max|x| / 32767, q = round(x / d), s = d * sum(q);
 * kern_matmul.c gives the exact rule) and each block's dot product is done in
 * integer x int16 -> exact int32, then accumulated in f32 as
 *     acc = fma(isum, d_w * d_x, acc)   (+ fma(m_w, s_x, acc) for Q8_0M, Q4_1).
 * A Q4_0 / Q4_1 block counts as the Q8_0 / Q8_0M block of q = nibble - 8 /
 * nibble with the same d (and m), which kern_requantize_row_q8 makes from it:
 * the Q4 matrix and its requantization give bit-identical y.
 * The int16 activations' error is ~2^-16 of a block's largest value, so the
 * result is within ~1e-4 relative of exact arithmetic on the integer weights
 * even with activation outliers (int8 activations were not: 25% logit error
 * on SmolLM2-135M).
 * F16/BF16 weights: converted to f32 in registers, f32 accumulation.
 *
 * Batch invariance (the scheduler relies on it): y[t][o] is bit-identical
 * whatever n_tok is, whatever the other rows of x hold and however many
 * threads run - every (t, o) is computed with the same instruction sequence
 * and the same reduction order.
 *
 * ws: caller-owned workspace of at least kern_matmul_ws_bytes(wt, n_in, n_tok)
 * bytes (holds the quantized activations: 2 * n_in + 12 * n_in / 32 bytes per
 * token for the integer types, plus 2 * n_in per token rounded up to 16
 * tokens on a CPU with AMX; 0 for the float types), 64-byte aligned.
 * pool may be NULL. */
size_t kern_matmul_ws_bytes(kern_type wt, int n_in, int n_tok);
void kern_matmul(kern_pool *pool, kern_type wt, const void *W, int n_out, int n_in, const float *x,
                 int n_tok, float *y, void *ws);
/* Several matrices over the same x in one pool run: y_p = x W_p^T for each
 * part (types may differ; n_in is shared). The activations are quantized
 * once, and the parts' rows form one row space cut into tasks, so a decode
 * step pays one dispatch and one join for q/k/v (or gate/up) instead of one
 * each. Every y_p is bit-identical to kern_matmul of that part alone. ws:
 * kern_matmul_ws_bytes of any part's type (all integer types need the same). */
#define KERN_MATMUL_MAX_PARTS 4
typedef struct kern_matmul_part {
    kern_type wt;
    const void *W;
    int n_out;
    float *y;
} kern_matmul_part;
void kern_matmul_multi(kern_pool *pool, const kern_matmul_part *parts, int n_parts, int n_in,
                       const float *x, int n_tok, void *ws);
/* The SIMD level whose kernel kern_matmul runs for weight type wt and n_tok
 * tokens on this CPU (kern_cpu_pick(): the fixed table, or the level itself). */
kern_level kern_matmul_level(kern_type wt, int n_tok);
/* A short name of that kernel, e.g. "avx512vnni x8 2-stream" (static). */
const char *kern_matmul_kernel_name(kern_type wt, int n_tok);
/* "q4_0x8: 1 token ..., 4 tokens ..., 64 tokens ..." into buf: the kernels a
 * weight type runs at decode, short-batch and prompt sizes (logs, bench). */
void kern_matmul_describe(kern_type wt, char *buf, int len);
/* Reference: single-threaded plain C, same arithmetic definition. */
void kern_matmul_ref(kern_type wt, const void *W, int n_out, int n_in, const float *x, int n_tok,
                     float *y);

/* ---- elementwise / row ops (one row; the model threads over rows) ------- */

/* dst[i] = kern_fp32_to_fp16(src[i]) (round to nearest even): the bits of
 * the scalar conversion for every input but NaN, which stays a NaN (F16C
 * quiets a signalling one). The KV cache's f16 store. */
void kern_fp32_to_fp16_row(uint16_t *dst, const float *src, int n);

/* out[i] = x[i] / sqrt(mean(x^2) + eps) * w[i]; out may alias x. */
void kern_rmsnorm(float *out, const float *x, const float *w, int n, float eps);
void kern_rmsnorm_ref(float *out, const float *x, const float *w, int n, float eps);

/* out[i] = silu(gate[i]) * up[i], silu(g) = g / (1 + exp(-g)); out may alias. */
void kern_silu_mul(float *out, const float *gate, const float *up, int n);
void kern_silu_mul_ref(float *out, const float *gate, const float *up, int n);
/* out[i] = gelu(gate[i]) * up[i] with GELU's tanh form,
 * gelu(x) = x / 2 * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 x^3))) (Gemma's
 * gelu_pytorch_tanh); out may alias gate. The AVX2 form computes the same
 * value as x / (1 + exp(-2 sqrt(2/pi) (x + 0.044715 x^3))). */
void kern_gelu_tanh_mul(float *out, const float *gate, const float *up, int n);
void kern_gelu_tanh_mul_ref(float *out, const float *gate, const float *up, int n);

/* In place, numerically stable (max subtracted). */
void kern_softmax(float *x, int n);
void kern_softmax_ref(float *x, int n);

/* ---- RoPE ----------------------------------------------------------------
 * Rotates the first n_rot dims of each of n_heads heads of head_dim floats
 * (x is n_heads * head_dim floats) for position pos.
 *   KERN_ROPE_ADJACENT: pairs (2i, 2i+1)           - llama.cpp "normal",
 *                       llama2.c, GGUF llama (q/k weights are permuted).
 *   KERN_ROPE_SPLIT_HALF: pairs (i, i + n_rot/2)   - GPT-NeoX, qwen2.
 * Pair i (i < n_rot/2) turns by angle
 *   pos * freq_scale * base^(-2i/n_rot) / (freq_factors ? freq_factors[i] : 1).
 * freq_scale is 1/linear-scaling-factor. */
typedef enum { KERN_ROPE_ADJACENT = 0, KERN_ROPE_SPLIT_HALF = 1 } kern_rope_mode;
void kern_rope(float *x, int n_heads, int head_dim, int n_rot, int pos, float base,
               float freq_scale, const float *freq_factors, kern_rope_mode mode);

/* ---- attention over a (possibly paged) KV cache ----------------------------
 * The cache for one layer and one sequence is seen through a block table:
 * the K row of position p and KV head g starts at
 *   k + block_table[p / block_size] * block_stride + (p % block_size) * row_stride + g * head_dim
 * (V likewise). A contiguous cache is one block of block_size >= n_ctx.
 * An f16 cache sets k16/v16 (IEEE half, same element offsets) and leaves k/v
 * NULL; the kernels convert each element to f32 as they load it.
 * A quantized cache (kern_kv.h: q8_0, q4_0; int8 and fp8 for the reference
 * and the CUDA tests) sets kq/vq, dtype and scale_off and leaves the float
 * pointers NULL; block_stride then counts BYTES and row_stride VALUES: the
 * codes of (p, g) start at byte
 *   block_table[p / block_size] * block_stride + e * bits / 8,
 *   e = (p % block_size) * row_stride + g * head_dim   (the value in its layer-block)
 * of kq, and value e's scale is the fp16 at byte scale_off + 2 * (e / group)
 * of the same layer-block. The kernels dequantize as they load (scale times
 * code, exact in f32), so a quantized view gives what an f32 view of the
 * dequantized values gives, bit for bit, at every level whose scores are
 * computed in floats (all but the integer dot of AVX-512 VNNI, whose error
 * test_kern_kv states). */
typedef struct kern_kv_view {
    float *k;
    float *v;
    const int32_t *block_table;
    int block_size;
    size_t block_stride; /* elements between blocks */
    size_t row_stride;   /* elements between positions in a block (>= n_kv_head * head_dim) */
    uint16_t *k16;       /* f16 storage (k and v NULL then) */
    uint16_t *v16;
    /* > 0: sliding-window attention - a query at position p attends to
     * positions (p - window, p] only (Gemma's local layers, Mistral); the
     * kernels give the positions before it zero weight. 0: all of [0, p]. */
    int window;
    /* > 0: attention-logit soft-capping (Gemma 2): each scaled score s
     * becomes softcap * tanh(s / softcap) before the softmax. */
    float softcap;
    uint8_t *kq; /* quantized storage (above); NULL for f32 and f16 */
    uint8_t *vq;
    kern_kv_dtype dtype; /* of kq/vq (unused for the float pointers) */
    size_t scale_off;    /* bytes from a layer-block's start to its scales */
} kern_kv_view;

/* The store op: the K and V rows of one position (kv_dim floats each) into
 * the view's row at position pos: copied (f32), rounded to nearest even
 * (f16, kern_fp32_to_fp16_row), or quantized by kern_kv_quantize's rule in
 * groups of kern_kv_group(dtype, head_dim) (quantized: the position's codes
 * and scales only, nothing else of the block). */
void kern_kv_store(const kern_kv_view *kv, int pos, const float *k, const float *v, int kv_dim,
                   int head_dim);

/* One query head against positions [0, n_ctx) of KV head kv_head:
 * out = softmax(q . K^T * scale) . V. q and out are head_dim floats;
 * scratch holds n_ctx floats. */
/* The SIMD width the attention runs at for this head size on this CPU
 * ("avx512", "avx2" or "scalar"): a static string. */
const char *kern_attention_level_name(int head_dim);
/* The same for a cache of this dtype ("avx512vnni" where the integer scores
 * run, "unsupported" for a dtype the CPU kernels do not read). */
const char *kern_attention_level_name_kv(int head_dim, kern_kv_dtype dtype);
void kern_attention_head(float *out, const float *q, const kern_kv_view *kv, int kv_head, int n_ctx,
                         int head_dim, float scale, float *scratch);
void kern_attention_head_ref(float *out, const float *q, const kern_kv_view *kv, int kv_head,
                             int n_ctx, int head_dim, float scale, float *scratch);

/* n_rows query rows of one head at consecutive positions pos0, pos0+1, ...
 * of one sequence; row r attends causally to positions [0, pos0 + r].
 * Row r of q starts at q + r * q_stride, of out at out + r * out_stride.
 * K and V rows are loaded once per tile of query rows, and every row is
 * computed with exactly the instruction sequence kern_attention_head uses
 * (which is this function with n_rows = 1), so results do not depend on how
 * a prompt is split into rows. scratch holds n_rows * (pos0 + n_rows) floats. */
void kern_attention_rows(float *out, size_t out_stride, const float *q, size_t q_stride, int n_rows,
                         int pos0, const kern_kv_view *kv, int kv_head, int head_dim, float scale,
                         float *scratch);

/* kern_attention_rows for the n_heads query heads that share KV head kv_head
 * (a GQA group: heads kv_head * n_heads ... of a model whose query heads per
 * KV head are n_heads). Head h of row r reads q + r * q_stride + h * head_dim
 * and writes out + r * out_stride + h * head_dim. Each K and V row load
 * serves every head of the group, and each (row, head) output is bit for bit
 * what kern_attention_head gives for it alone, for any n_heads and n_rows.
 * scratch holds n_heads * n_rows * (pos0 + n_rows) floats. */
void kern_attention_rows_gqa(float *out, size_t out_stride, const float *q, size_t q_stride,
                             int n_rows, int n_heads, int pos0, const kern_kv_view *kv, int kv_head,
                             int head_dim, float scale, float *scratch);

/* All n_heads query heads of the rows, over n_kv_heads KV heads (query head
 * h reads KV head h / (n_heads / n_kv_heads)): kern_attention_rows_gqa for
 * each group in order, the same bits, but the first group also brings the
 * whole cache rows (every KV head's K and V) into L2 as it walks them, so
 * that memory is read as whole contiguous rows once and the later groups
 * and the values pass find them in cache (a decode step of many sequences:
 * one task per sequence). scratch: n_heads / n_kv_heads * n_rows *
 * (pos0 + n_rows) floats. */
void kern_attention_rows_all(float *out, size_t out_stride, const float *q, size_t q_stride,
                             int n_rows, int n_heads, int n_kv_heads, int pos0,
                             const kern_kv_view *kv, int head_dim, float scale, float *scratch);

#ifdef __cplusplus
}
#endif

#endif
