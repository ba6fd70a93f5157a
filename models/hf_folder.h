/* hf_folder.h - a Hugging Face model folder (config.json, *.safetensors,
 * tokenizer.json, tokenizer_config.json, generation_config.json) turned into
 * the GGUF image model_load reads plus the weight matrices, read in place
 * from the safetensors files (model_hf_weight), so that the folder and the
 * GGUF the llama.cpp converter would write from it fill one model
 * description by one path.
 *
 * The translation is data: a table of the Hugging Face architectures brisk
 * runs (`architectures` in config.json) onto rows of the architecture table
 * (model_arch.h), a table of config.json keys onto the GGUF metadata keys,
 * and a table of tensor names. On the way it applies what llama.cpp's
 * converter changes: the q and k rows of Llama-style checkpoints are
 * permuted so that RoPE rotates adjacent pairs (the llama row's
 * KERN_ROPE_ADJACENT), Gemma's norm weights w become w + 1, an lm_head tied
 * to the embeddings is dropped, norms and biases are stored as F32. Weights
 * keep their dtype (F32, F16, BF16), so --weights converts them at load
 * exactly as it converts a GGUF's, in one pass from the safetensors
 * mapping into the model's buffers (the q/k permutation done on the way).
 * A mixture of experts' layer (Qwen3-MoE, Mixtral, OLMoE) becomes the GGUF's
 * router and ffn_{gate,up,down}_exps stacks: its experts, one tensor each or
 * transformers 5's fused 3-D tensors, are the parts of a stack, each read
 * where it lies into its rows of the stack's buffer.
 *
 * Every file of the folder is hostile input: a refusal is a negative
 * BRISK_E* code with one line in err naming the file and what is wrong; an
 * architecture, rope scaling, activation or tokenizer brisk does not run is
 * BRISK_EUNSUPPORTED naming it (and, for an architecture, listing those it
 * runs). The JSON stays here (cJSON): the engine never sees it. */
#ifndef HF_FOLDER_H
#define HF_FOLDER_H

#include <stddef.h>
#include <stdint.h>

#include "models/gguf.h"
#include "models/safetensors.h"

/* A GGUF tensor name's bytes, NUL included: "blk.N." and the longest table
 * name fit with room for 7-digit layer numbers. */
#define MODEL_HF_MAX_NAME 64

/* 1 when path is a directory, or a file named config.json (its folder is
 * the model); 0 otherwise (a GGUF or llama2.c file). */
int model_hf_is_folder(const char *path);

/* A weight matrix of the folder, read where it lies in the safetensors
 * mapping: the GGUF image holds the metadata and the small tensors (norms,
 * biases, rope factors: F32, converted on the way), and the model reads the
 * matrices from here straight into its own buffers, in the format --weights
 * asks for, so no byte of a matrix is copied before that conversion.
 *
 * t is what the image would hold for it: the GGUF name, type (F32, F16 or
 * BF16, the folder's dtype), ne = {columns, rows}, nbytes; t.data is inside
 * the mapping and NOT aligned (a safetensors tensor starts at any byte):
 * read it with memcpy or kern_cvt_row. Rows are read through
 * model_hf_src_row: a Llama-style q or k matrix (qk_heads > 0) is stored
 * with each head's rows in rotate-half order and read as adjacent pairs. */
typedef struct model_hf_weight {
    gguf_tensor t;
    int qk_heads;                 /* 0, or the heads whose rows model_hf_src_row reorders */
    const safetensors_file *file; /* the shard t.data is in */
    const safetensors_tensor *st; /* the folder's tensor (for a part: the one it lies in) */
    char name[MODEL_HF_MAX_NAME]; /* t.name's bytes */
    /* A mixture of experts' stack (ffn_{gate,up,down}_exps: t.ne = {columns,
     * rows, n_parts}, as the GGUF's 3-D tensor): its n_parts experts, each a
     * matrix of t.ne[1] rows read where it lies (t.data of a part points at
     * its first row: a per-expert tensor, or its slice of transformers 5's
     * fused experts.gate_up_proj / down_proj), in expert order; the stack's
     * own t.data is its first part's and is not read as one block. Owned by
     * the weight (model_hf_weights_free); NULL and 0 for a plain matrix. */
    struct model_hf_weight *parts;
    int n_parts;
} model_hf_weight;

/* The matrices of one folder and the safetensors files they lie in; owns
 * both. Freed with model_hf_weights_free, after the last read of a t.data
 * (the model frees it with itself: model_free). */
typedef struct model_hf_weights model_hf_weights;

/* Builds the GGUF image of the folder at path (a directory or its
 * config.json) into *image (malloc'ed, *len bytes; the caller frees it,
 * after the model or gguf_file read from it) and, unless vocab_only, its
 * matrices into *weights (the caller frees them; NULL with vocab_only:
 * `brisk tokenize` needs the metadata and tokenizer alone). weights may be
 * NULL only with vocab_only. 0 or a BRISK_E* code with err set (then
 * nothing is handed out). */
int model_hf_open(const char *path, int vocab_only, uint8_t **image, size_t *len,
                  model_hf_weights **weights, char *err, size_t err_len);
void model_hf_weights_free(model_hf_weights *w);

/* The matrix of GGUF name `name`, or NULL (also when w is NULL). */
const model_hf_weight *model_hf_weights_find(const model_hf_weights *w, const char *name);
/* How many matrices, and the i-th (sorted by name). */
int64_t model_hf_weights_count(const model_hf_weights *w);
const model_hf_weight *model_hf_weights_at(const model_hf_weights *w, int64_t i);
/* The matrix whose t is t, when t is one of w's (a pointer model_hf_weights_find
 * handed out), else NULL: tells the loader a folder's matrix from an image
 * tensor. */
const model_hf_weight *model_hf_weights_of(const model_hf_weights *w, const gguf_tensor *t);
/* The stored row that row r (in [0, t.ne[1])) of the matrix reads: r itself,
 * or for a q/k matrix, with hd = rows / qk_heads, row r = h*hd + 2i + j
 * reads stored row h*hd + j*hd/2 + i (the converter's permute). */
int64_t model_hf_src_row(const model_hf_weight *e, int64_t r);
/* The matrix's bytes (t.data, t.nbytes; a part's slice of its tensor) will
 * not be read again: their whole pages leave the resident set
 * (safetensors_release_pages). */
void model_hf_weight_release(const model_hf_weight *e);

/* The Hugging Face architectures brisk runs, "LlamaForCausalLM, ...", into
 * buf (always NUL-terminated when len > 0); returns buf. */
const char *model_hf_arch_list(char *buf, size_t len);

#endif
