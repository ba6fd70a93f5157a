/* grammar.h - grammar-constrained decoding: a GBNF grammar (llama.cpp's
 * notation) compiled once, and a matcher per sequence that gives, at each
 * step, the set of tokens that keep the output inside the grammar.
 *
 * Grammar text (GBNF):
 *   rule-name ::= alternative ( "|" alternative )*
 *   elements: "literal" (escapes \n \r \t \\ \" \xHH \uHHHH \UHHHHHHHH),
 *   [a-z0-9_] and [^...] character classes, . (any character), rule
 *   references, ( ... ) groups, and the postfix operators * + ? {m} {m,}
 *   {m,n}; # starts a comment to the end of the line. The start rule is
 *   "root". Rule names are letters, digits and '-'.
 * The grammar works on Unicode code points; a token may end inside a
 * character (its remaining bytes must then be able to complete it).
 *
 * Limits (hostile input: every violation is an error naming it, never an
 * abort): model_grammar_limits. Left recursion (a rule that can reach
 * itself before consuming a character) is refused: a matcher could not
 * expand it.
 *
 * Ownership and threads: a compiled model_grammar is immutable and
 * reference-counted (atomically): any thread may compile, share and release
 * it. A matcher belongs to one sequence on one thread. */
#ifndef MODEL_GRAMMAR_H
#define MODEL_GRAMMAR_H

#include <stddef.h>
#include <stdint.h>

#include "models/tokenizer.h"

typedef struct model_grammar model_grammar;

typedef struct model_grammar_limits {
    size_t max_text;  /* bytes of grammar text (default 64 KiB) */
    int max_rules;    /* rules after expanding the repetition operators (4096) */
    int max_elements; /* compiled elements (1 << 18) */
    int max_nesting;  /* parenthesis depth (64) */
    int max_repeat;   /* the largest m or n of {m,n} (1000) */
    int max_stacks;   /* parse stacks a matcher may hold at once (4096) */
    /* Work one mask, or one accepted token, may take: counted in matcher
     * steps (a stack looked at for one byte, one step of expanding a stack),
     * the same on every machine and under any load, and the same whether
     * the masks it needs were already cached or not (MODEL_GRAMMAR_MAX_WORK). */
    long long max_work;
} model_grammar_limits;

/* The default per-token work limit: legitimate grammars stay far below it
 * (docs/API.md has the figures). */
#define MODEL_GRAMMAR_MAX_WORK (1LL << 23)

model_grammar_limits model_grammar_limits_default(void);

/* Compiles len bytes of GBNF. Returns 0 with *out (refcount 1), or
 * BRISK_EINVAL / BRISK_ENOMEM with a one-line reason in err. */
int model_grammar_compile(const char *text, size_t len, const model_grammar_limits *lim,
                          model_grammar **out, char *err, size_t err_len);
model_grammar *model_grammar_ref(model_grammar *g);
void model_grammar_unref(model_grammar *g);
int model_grammar_n_rules(const model_grammar *g);

/* GBNF for any JSON value (RFC 8259; objects at the top for json_object)
 * and for one of n literal strings: malloc'd NUL-terminated texts (NULL on
 * out of memory). */
char *model_grammar_json_text(int object_only);
char *model_grammar_choice_text(const char *const *choices, const size_t *lens, int n);
/* GBNF whose language is the whole-string matches of a regular expression
 * (grammar_regex.c says which constructs; the others are refused). Returns
 * 0 with *out malloc'd, or BRISK_EINVAL / BRISK_ENOMEM with a one-line
 * reason in err. */
int model_grammar_regex_text(const char *re, size_t len, char **out, char *err, size_t err_len);

/* How model_grammar_regex_expr writes a regular expression. */
typedef struct model_regex_opts {
    /* Each matched character as it appears between the quotes of a JSON
     * string ('"', '\' and controls as escapes), for JSON Schema's pattern;
     * and since other engines check those patterns, '.' also excludes \r,
     * U+2028 and U+2029 (ECMA-262's line terminators) and \D \W \S keep to
     * ASCII (where ECMA-262, Python and Rust agree): a subset of what each
     * engine takes. */
    int json_string;
    /* > 0: an unbounded repetition x{m,} becomes x{m,max(m,cap)}, a subset
     * of the language (to meet a length bound). */
    int cap_unbounded;
} model_regex_opts;

/* The regular expression as one GBNF expression (no rule of its own), in
 * *out (malloc'd); *min_len and *max_len (either may be NULL) get the
 * lengths in characters of the strings it matches (max -1: no bound).
 * o NULL: the defaults of model_grammar_regex_text. Errors as there. */
int model_grammar_regex_expr(const char *re, size_t len, const model_regex_opts *o, char **out,
                             long *min_len, long *max_len, char *err, size_t err_len);

/* The vocabulary as a trie of token bytes, for masks: built once per model
 * (immutable, any thread may read it). */
typedef struct model_grammar_vocab model_grammar_vocab;
model_grammar_vocab *model_grammar_vocab_create(const tok_vocab *v);
void model_grammar_vocab_free(model_grammar_vocab *gv);

typedef struct model_grammar_matcher model_grammar_matcher;

/* A matcher at the grammar's start. NULL on out of memory. */
model_grammar_matcher *model_grammar_matcher_create(model_grammar *g, const model_grammar_vocab *gv,
                                                    const model_grammar_limits *lim);
void model_grammar_matcher_free(model_grammar_matcher *m);

/* Fills mask (one bit per token of the vocabulary, bit i of mask[i / 32]):
 * the tokens whose bytes the grammar can take next, and the end-of-
 * generation tokens when the grammar is complete. Tokens without bytes
 * (control tokens) are never allowed otherwise. Returns the count allowed,
 * or a negative code (BRISK_ENOMEM; BRISK_ERANGE when the state grew past
 * max_stacks or the mask took more than max_work: the grammar is too
 * costly). Any thread may call it, one at a time per matcher; matchers of
 * one grammar share its caches (grammar_walk.c). */
int model_grammar_mask(model_grammar_matcher *m, uint32_t *mask);
/* model_grammar_mask within a budget, for a caller that must not wait (the
 * engine thread): the same result when the state's mask is cached or its
 * walk takes at most budget units (budget 0: a cache lookup only); else
 * BRISK_ENOSPC with no mask: also when another walk of this grammar is in
 * progress, or the state has more than 64 stacks, whose key alone costs
 * more. What an abandoned walk learned stays in the grammar's automaton, so
 * model_grammar_mask, which then computes the mask, starts further on. */
int model_grammar_mask_try(model_grammar_matcher *m, uint32_t *mask, long long budget);
/* The work units the last model_grammar_mask or accept call counted. */
long long model_grammar_last_work(const model_grammar_matcher *m);
/* Masks computed so far for this grammar's matchers, and those found in
 * its shared cache of masks by state (one state, one mask). */
void model_grammar_cache_counts(model_grammar *g, long long *lookups, long long *hits);
/* Advances over token id's bytes. Returns 0, BRISK_EINVAL if the grammar
 * cannot take them (the matcher is unchanged), or another negative code
 * (BRISK_ERANGE: past max_stacks or max_work).
 * An end-of-generation token is taken only when complete, and changes
 * nothing. */
int model_grammar_accept(model_grammar_matcher *m, int32_t id);
/* 1 when the grammar is complete here (end of generation allowed). */
int model_grammar_complete(const model_grammar_matcher *m);
/* 1 when nothing more may follow (complete, and no stack can continue). */
int model_grammar_finished(const model_grammar_matcher *m);

/* Advances over raw bytes (tests and the fuzz target): 0, or BRISK_EINVAL
 * when they leave the grammar (the matcher is then unchanged). */
int model_grammar_accept_bytes(model_grammar_matcher *m, const char *bytes, size_t n);
/* 1 if the bytes could be taken now (a character may stay pending), 0 if
 * not, or a negative code; the matcher does not change. */
int model_grammar_allows_bytes(model_grammar_matcher *m, const char *bytes, size_t n);

#endif
