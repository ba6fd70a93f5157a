/* model_moe.h - the mixture-of-experts MLP on the CPU: routing, tokens
 * grouped by expert, and its readable reference.
 *
 * For each token x (a row of dim floats, already normalised):
 *   1. router logits r = x R^T (R: [n_expert][dim], f32);
 *   2. p = softmax(r) over all experts; the n_used largest p are chosen, a
 *      lower expert index first among equal p (so ties are deterministic);
 *      their weights are p, or p / sum of the chosen p when norm_topk;
 *   3. y = sum over the chosen experts e, in ascending e, of
 *      weight_e * down_e(act(gate_e x) * up_e x).
 *
 * The fast path (model_moe_ffn) runs step 3 expert by expert over the batch:
 * the rows of the tokens routed to expert e are gathered and multiplied by
 * e's matrices with kern_matmul, so that each expert's weights are read once
 * per call for all its tokens (a decode step of 4 sequences with top-8 of 128
 * reads about 29 experts, not 32). kern_matmul's rows are bit-identical
 * whatever the other rows are (kern_ops.h), and every token's sum runs over
 * its own experts in ascending order, so a token's result is the same bits
 * whatever else is in the batch, in whichever order.
 *
 * Thread-safety: a scratch is used by one call at a time; the weights are
 * read only. */
#ifndef MODEL_MOE_H
#define MODEL_MOE_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/cpu/kern_ops.h"
#include "models/model.h"

/* One layer's experts, borrowed from its model_layer (or a test's buffers). */
typedef struct model_moe_weights {
    const model_matrix *router; /* [n_expert][dim], KERN_TYPE_F32 */
    /* stacks of n_expert experts (model_matrix_expert): gate and up
     * [n_expert * hidden][dim], down [n_expert * dim][hidden] */
    const model_matrix *gate, *up, *down;
    int n_expert, n_used, dim, hidden;
    int norm_topk; /* model_config.moe_norm_topk */
    model_act act; /* the experts' activation */
} model_moe_weights;

/* Layer L's experts as model_moe_ffn takes them (pointers into L, borrowed). */
model_moe_weights model_moe_layer(const model_config *c, const model_layer *L);

/* Step 2 for one token: logits[n_expert] (read only) -> ids[n_used] (the
 * chosen experts, largest weight first, lower index first among equals) and
 * weights[n_used]. 1 <= n_used <= n_expert. NaN logits route to the lowest
 * unchosen indices rather than to nothing. */
void model_moe_route(const float *logits, int n_expert, int n_used, int norm_topk, int32_t *ids,
                     float *weights);

/* Scratch for up to max_tokens tokens of a layer shaped as w (any layer of
 * the model: they share shapes). NULL when out of memory. Owned by the
 * caller: model_moe_scratch_free. */
typedef struct model_moe_scratch model_moe_scratch;
model_moe_scratch *model_moe_scratch_create(const model_moe_weights *w, int max_tokens);
void model_moe_scratch_free(model_moe_scratch *s);
/* The kern_matmul workspace the experts of w need for n_tok tokens. */
size_t model_moe_ws_bytes(const model_moe_weights *w, int n_tok);

/* y[n_tok][dim] = the MLP of x[n_tok][dim] (steps 1-3), n_tok at most the
 * scratch's max_tokens and the scratch made for w's shape (else
 * BRISK_ERANGE, nothing written). y must not alias x. ws: caller-owned,
 * 64-byte aligned, at least model_moe_ws_bytes(w, n_tok) bytes. When ids_out is not NULL it receives each token's chosen experts
 * ([n_tok][n_used], as model_moe_route orders them): for tests and traces.
 * Returns 0. */
int model_moe_ffn(kern_pool *pool, const model_moe_weights *w, const float *x, int n_tok, float *y,
                  model_moe_scratch *s, void *ws, int32_t *ids_out);

/* The reference: one token at a time, every matrix row dequantized and
 * multiplied in double, the routing by model_moe_route on logits computed in
 * double; plain and slow, for tests. y[n_tok][dim]. BRISK_ENOMEM or 0. */
int model_moe_ffn_ref(const model_moe_weights *w, const float *x, int n_tok, float *y);

#endif
