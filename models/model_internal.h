/* model_internal.h - the model struct, shared by model.c (loading) and
 * forward.c (compute). Not part of the public interface. */
#ifndef MODEL_INTERNAL_H
#define MODEL_INTERNAL_H

#include "models/model.h"

struct model {
    model_config cfg;
    model_weights w;
    model_weights_fmt fmt;
    tok_vocab *vocab;
    gguf_file *gf;        /* owns the mmap that unconverted weights point into */
    void **owned;         /* buffers of converted tensors, freed with the model */
    int n_owned, cap_owned;
    char *name;
    char *chat_template;
    int64_t n_params;
    size_t weight_bytes;
};

#endif
