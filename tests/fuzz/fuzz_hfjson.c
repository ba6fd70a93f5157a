/* fuzz_hfjson.c - a hostile tokenizer.json and tokenizer_config.json
 * (models/tok_hfjson.c), as brisk reads them from a Hugging Face folder
 * given to --model: the JSON, the BPE model (vocab, merges in both forms,
 * added tokens), the pre-tokenizer and normalizer recognition, the config's
 * tokens and chat template; then the vocabulary brisk builds from what was
 * accepted (tok_vocab_create_from_gguf over the GGUF image) encodes and
 * decodes text.
 *
 * The input is tokenizer.json's text, then optionally a 0x1E byte and
 * tokenizer_config.json's text. Properties checked:
 *   - a refusal is a negative code with a one-line message;
 *   - an accepted pair gives a GGUF image that gguf_open_memory accepts and
 *     whose vocabulary either is refused with one line or encodes a fixed
 *     text (with and without special tokens) into ids of the vocabulary,
 *     which decode (ASan and UBSan watching). */
#include <stdlib.h>
#include <string.h>

#include "common/brisk_error.h"
#include "models/gguf.h"
#include "models/gguf_write.h"
#include "models/tok_hfjson.h"
#include "models/tokenizer.h"
#include "tests/fuzz/fuzz_util.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    fuzz_quiet_logs();
    return 0;
}

static void check_refusal(int rc, const char *err) {
    FUZZ_CHECK(rc < 0);
    FUZZ_CHECK(err[0] != '\0');
    FUZZ_CHECK(!strchr(err, '\n') && !strchr(err, '\r'));
}

static void use_vocab(const tok_vocab *v) {
    static const char text[] = "Hello  world, <s> 123 caf\xc3\xa9 \xf0\x9f\x98\x80\n\tend";
    int32_t ids[256];
    for (int special = 0; special < 2; special++) {
        int n = tok_encode(v, text, sizeof text - 1, special ? TOK_PARSE_SPECIAL : 0, ids, 256);
        FUZZ_CHECK(n >= 0);
        if (n > 256)
            continue; /* a vocabulary without byte tokens may drop text, not grow it */
        for (int i = 0; i < n; i++)
            FUZZ_CHECK(ids[i] >= 0 && ids[i] < tok_n_vocab(v));
        free(tok_decode_all(v, ids, n, 0));
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *sep = memchr(data, 0x1E, size);
    size_t tl = sep ? (size_t)(sep - data) : size;
    /* Copies: the parsers take lengths, the copies let ASan see every read. */
    char *tok = malloc(tl ? tl : 1);
    size_t cl = sep ? size - tl - 1 : 0;
    char *cfg = sep ? malloc(cl ? cl : 1) : NULL;
    gguf_writer *w = gguf_writer_create();
    if (!tok || (sep && !cfg) || !w)
        goto out;
    memcpy(tok, data, tl);
    if (sep)
        memcpy(cfg, sep + 1, cl);
    char err[512] = "";
    int rc = tok_hfjson_to_gguf_mem(tok, tl, cfg, cl, w, err, sizeof err);
    if (rc) {
        check_refusal(rc, err);
        goto out;
    }
    uint8_t *img = NULL;
    size_t len = 0;
    if (gguf_writer_to_buffer(w, &img, &len) < 0)
        goto out;
    gguf_file *gf = NULL;
    rc = gguf_open_memory(img, len, &gf, err, sizeof err);
    FUZZ_CHECK(rc == 0);
    tok_vocab *v = NULL;
    rc = tok_vocab_create_from_gguf(gf, &v, err, sizeof err);
    if (rc)
        check_refusal(rc, err);
    else
        use_vocab(v);
    tok_vocab_free(v);
    gguf_close(gf);
    free(img);
out:
    gguf_writer_free(w);
    free(tok);
    free(cfg);
    return 0;
}
