/* model_gen.h - a model's own sampling defaults (model_get_generation in
 * model.h), apart so that the API layer can name them without the model. */
#ifndef MODEL_GEN_H
#define MODEL_GEN_H

/* The model's own sampling defaults: a Hugging Face folder's
 * generation_config.json (hf_folder.c writes them as brisk.generation.*
 * keys of its GGUF image; a GGUF may carry the same keys). The server
 * applies each field a request leaves out, under --generation-config auto. */
enum {
    MODEL_GEN_TEMPERATURE = 1u << 0,
    MODEL_GEN_TOP_P = 1u << 1,
    MODEL_GEN_TOP_K = 1u << 2,
    MODEL_GEN_MIN_P = 1u << 3,
    MODEL_GEN_REPETITION_PENALTY = 1u << 4,
};
typedef struct model_generation {
    unsigned has;             /* MODEL_GEN_* bits of the fields given */
    float temperature;        /* [0, 100] */
    float top_p;              /* (0, 1] */
    int top_k;                /* >= 0; 0: off */
    float min_p;              /* [0, 1] */
    float repetition_penalty; /* (0, 10] */
} model_generation;

#endif
