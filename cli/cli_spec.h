/* cli_spec.h - speculative decoding's options into the engine's plain
 * struct (scheduler/spec.h): vLLM's --speculative-config JSON, or
 * llama.cpp's --model-draft / --draft-max / --draft-min. The JSON is
 * hostile input like any other (fuzz_spec_config): every key is typed and
 * ranged, a key brisk does not implement is refused by name, and nothing
 * past this file sees JSON. */
#ifndef CLI_SPEC_H
#define CLI_SPEC_H

#include <stddef.h>

#include "scheduler/spec.h"

/* The most bytes of --speculative-config's text. */
#define CLI_SPEC_JSON_MAX 4096

/* Parses json (a JSON object, at most CLI_SPEC_JSON_MAX bytes) into *out,
 * over sched_spec_config_default(). Keys: method ("ngram", "suffix",
 * "draft_model"; absent with a model: draft_model), num_speculative_tokens
 * (1..SCHED_SPEC_MAX_TOKENS, required), prompt_lookup_min and
 * prompt_lookup_max (ngram; one given sets both, as vLLM), model (the
 * draft's GGUF), draft_tensor_parallel_size (1 only), and for suffix
 * suffix_decoding_max_tree_depth, suffix_decoding_max_spec_factor,
 * suffix_decoding_min_token_prob. out->draft_model points into *model_buf
 * (a malloc'd copy the caller frees, NULL when none). 0, or -1 with a
 * one-line reason in err. */
int cli_spec_parse_json(const char *json, sched_spec_config *out, char **model_buf, char *err,
                        size_t err_len);

/* The two forms into *out (its other fields kept: --spec-suffix-bytes,
 * --spec-max-batch-tokens and --spec-fixed-length fill them directly). json NULL: from the llama.cpp
 * options (draft_model NULL: no speculation unless json; draft_max and
 * draft_min < 0: not given). Both forms at once, or --draft-max/--draft-min
 * without --model-draft, is an error. 0 or -1 with a reason in err. */
int cli_spec_resolve(const char *json, const char *draft_model, int draft_max, int draft_min,
                     sched_spec_config *out, char **model_buf, char *err, size_t err_len);

#endif
