/* spec_propose.h - the deterministic proposers of speculative decoding
 * (spec.h): prompt lookup (ngram) and suffix matching (suffix). Both are
 * pure functions of token histories: the same history gives the same
 * proposal, and a proposal only decides how many tokens a step may keep,
 * never which (spec_verify.h), so whatever they propose, from whatever
 * other request's output, a request's output stays its own.
 *
 * Threading: none; the engine thread owns the suffix index. */
#ifndef SCHED_SPEC_PROPOSE_H
#define SCHED_SPEC_PROPOSE_H

#include <stddef.h>
#include <stdint.h>

/* Prompt lookup (vLLM's ngram method): for n from max_n down to min_n,
 * looks for an earlier occurrence of the last n tokens of tokens[0, n_tokens)
 * (the latest one when there are several) and proposes the tokens that
 * followed it, up to k of them, into out. Returns how many (0: no match). */
int spec_ngram_propose(const int32_t *tokens, int n_tokens, int min_n, int max_n, int k,
                       int32_t *out);

/* ---- suffix matching -------------------------------------------------------
 *
 * The server-wide index is a trie of every suffix, up to `depth` tokens, of
 * the recent outputs added to it, each node counting the occurrences of its
 * path: a suffix tree cut at depth, which is what a continuation needs
 * (vLLM's suffix decoding keeps the same, per request and global). Memory
 * is bounded: nodes and the kept outputs together stay under max_bytes; the
 * oldest output is taken out (its counts subtracted, empty nodes freed)
 * while a new one would not fit. An output longer than the index can ever
 * hold is cut to its last tokens that fit.
 *
 * A proposal matches the longest suffix of the context (up to depth - 1
 * tokens) in the index and in the sequence's own tokens, then follows the
 * most frequent continuation (ties: the lower token id) while the product
 * of its frequencies (count of the child / count of the node) stays at or
 * above min_prob, for at most k tokens and never more than the matched
 * length times max_factor tokens; of the two sources the proposal whose
 * summed probability (its expected accepted tokens) is higher wins, the
 * sequence's own on a tie. */
typedef struct spec_suffix spec_suffix;

/* NULL when max_bytes cannot hold even the root's table (n_vocab entries)
 * or depth is outside 2..64. */
spec_suffix *spec_suffix_create(long long max_bytes, int depth, int n_vocab);
void spec_suffix_free(spec_suffix *x);
/* Adds an output (tokens outside [0, n_vocab) end it there). Returns 0, or
 * BRISK_ENOMEM when its tokens could not be kept (the index is unchanged). */
int spec_suffix_add(spec_suffix *x, const int32_t *tokens, int n);
/* Nodes in use and outputs held, for tests and the log. */
long spec_suffix_nodes(const spec_suffix *x);
int spec_suffix_outputs(const spec_suffix *x);
/* Bytes in use (nodes, kept outputs, the root table): <= max_bytes. */
long long spec_suffix_bytes(const spec_suffix *x);

typedef struct spec_suffix_opts {
    int k;            /* most tokens proposed */
    float min_prob;   /* stop when the path's probability falls below it (vLLM: 0.1) */
    float max_factor; /* at most matched length x this many tokens (vLLM: 1.0) */
} spec_suffix_opts;

/* Proposes from the index x (NULL: none) and from own[0, n_own) (the
 * sequence's prompt and output; its last tokens are the context). Returns
 * the number written to out (0: no match). */
int spec_suffix_propose(const spec_suffix *x, const int32_t *own, int n_own,
                        const spec_suffix_opts *o, int32_t *out);

#endif
