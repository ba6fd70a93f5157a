/* model_internal.h - the model struct, shared by model.c (loading) and
 * forward.c (compute). Not part of the public interface. */
#ifndef MODEL_INTERNAL_H
#define MODEL_INTERNAL_H

#include "models/hf_folder.h"
#include "models/model.h"

struct model {
    model_config cfg;
    model_weights w;
    model_weights_fmt fmt;
    int x8; /* store int8 matrices in X8 form (model_load_opts.cpu_layout) */
    tok_vocab *vocab;
    gguf_file *gf;     /* owns the mmap that unconverted weights point into */
    gguf_file *tok_gf; /* dummy models: the file the vocabulary came from, or NULL */
    uint8_t *image;    /* a Hugging Face folder's GGUF image (hf_folder.h) gf reads, or NULL */
    /* and its matrices, read in place from the safetensors files it owns
     * (tensors model_find finds beside gf's), or NULL */
    model_hf_weights *hfw;
    /* model.c, during model_load_tensors: the folder conversions that run
     * together at its end; NULL otherwise */
    struct model_convert_batch *batch;
    void **owned; /* buffers of converted tensors, freed with the model */
    int n_owned;
    size_t cap_owned;
    int keep_stored;    /* model_load_opts.keep_stored */
    char file_type[32]; /* e.g. "Q4_K_M" (model_log_types); empty for dummy weights */
    uint8_t *arena;     /* the huge-page chunk large owned buffers are cut from */
    size_t arena_used, arena_cap;
    char *name;
    char *chat_template;
    model_generation gen; /* brisk.generation.* keys */
    int64_t n_params;
    size_t weight_bytes;
};

/* Shared by model.c and model_dummy.c. */
/* 64-byte aligned, freed with the model; from 256 KiB on cut from 2 MiB-aligned
 * chunks advised for transparent huge pages (model.c). */
void *model_alloc_owned(model *m, size_t bytes);
/* The configuration gf's metadata gives over its architecture row's
 * defaults, into *c (zeroed by the caller); the shapes the tensors tell
 * (n_vocab, tied_output) are left for the loader. 0 or a BRISK_E* code with
 * err set: the metadata is hostile input. */
int model_read_config(const gguf_file *gf, model_config *c, char *err, size_t err_len);
void model_count_bytes(model *m);
kern_type model_target_type(model_weights_fmt fmt, kern_type stored, int n_in);
/* Whether opts asks for, and this CPU runs fastest, the X8 form. */
int model_want_x8(const model_load_opts *opts);
/* Puts matrix mm (owned, writable, when in_place; else e.g. in the mmap) in
 * its X8 form if it has one and n_out is a multiple of 8. */
int model_make_x8(model *m, kern_pool *pool, model_matrix *mm, int in_place);
/* model_dummy.c: the model_load path for opts->dummy. */
int model_create_dummy(const model_load_opts *opts, model **out, char *err, size_t err_len);

/* Layer l's sliding window and RoPE base from the config: a local layer
 * (Gemma's pattern, or every layer of a windowed llama file) gets n_swa and
 * rope_base_swa; L->rope_base must already hold the global base. */
void model_layer_set_window(const model_config *c, int l, model_layer *L);

#endif
