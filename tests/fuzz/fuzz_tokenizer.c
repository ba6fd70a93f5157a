/* fuzz_tokenizer.c - the tokenizers (models/tokenizer.c, tok_spm.c,
 * tok_bpe.c, tok_pretok.c) with real vocabularies: SentencePiece-style and
 * byte-level BPE under every pre-tokenizer (fuzz_vocab.h).
 *
 * Input: byte 0 picks the vocabulary, byte 1 the flags (bit 0 TOK_ADD_BOS,
 * bit 1 TOK_PARSE_SPECIAL, bit 2 decode mode, bit 3 TOK_CONTINUATION for the
 * streaming decoder); the rest is the text to encode, or in decode mode
 * token ids as little-endian u16 (mapped to [-8, n_vocab + 8): ids outside
 * the vocabulary included).
 *
 * Properties (those tests/unit/test_tokenizer.c asserts on its goldens and
 * random text, here on any input):
 *   encode: the count asked for first is the count written; every id is in
 *     the vocabulary; BOS comes first when asked for; plain encoding is
 *     lossless: decode(encode(s)) == s when every byte of s has a token
 *     (and, for SPM, s holds no "▁", which decodes to a space);
 *   decode: tok_decode_all never fails on any ids; the streaming decoder
 *     writes at most tok_decoder_max_out() bytes per token, only valid
 *     UTF-8, refuses exactly the ids outside the vocabulary, and gives what
 *     tok_decode_all gives whenever that is valid UTF-8;
 *   round trip: decode(encode(decode(ids))) == decode(ids) under the same
 *     lossless conditions. */
#include <stdlib.h>
#include <string.h>

#include "common/brisk_error.h"
#include "models/tok_internal.h"
#include "models/tokenizer.h"
#include "tests/fuzz/fuzz_util.h"
#include "tests/fuzz/fuzz_vocab.h"

#define FUZZ_TOK_MAX_BYTES 4096

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    fuzz_quiet_logs();
    if (fuzz_vocabs_init() < 0) {
        fprintf(stderr, "fuzz_tokenizer: cannot build the vocabularies\n");
        abort();
    }
    return 0;
}

/* Encodes into a malloc'd array; returns the count (or a negative code). */
static int encode(const tok_vocab *v, const char *s, size_t n, int flags, int32_t **ids) {
    *ids = NULL;
    int need = tok_encode(v, s, n, flags, NULL, 0);
    if (need < 0)
        return need;
    *ids = malloc((size_t)(need ? need : 1) * sizeof **ids);
    if (!*ids)
        return BRISK_ENOMEM;
    int got = tok_encode(v, s, n, flags, *ids, need);
    FUZZ_CHECK(got == need);
    return got;
}

/* Whether plain encoding of s must be lossless (see the top of the file). */
static int lossless(const tok_vocab *v, const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (v->byte_id[(unsigned char)s[i]] < 0 || s[i] == '\0')
            return 0;
    if (tok_vocab_type(v) == TOK_TYPE_SPM)
        for (size_t i = 0; i + 3 <= n; i++)
            if (!memcmp(s + i, "\xE2\x96\x81", 3))
                return 0;
    return 1;
}

/* Streams ids through tok_decoder and checks every step; returns the text
 * (malloc'd, *len bytes). */
static char *stream(const tok_vocab *v, const int32_t *ids, int n, int flags, size_t *len) {
    size_t max = tok_decoder_max_out(v);
    char *s = malloc(max * (size_t)(n + 1) + 4);
    if (!s)
        return NULL;
    tok_decoder d;
    tok_decoder_init(&d, v, flags);
    size_t o = 0;
    for (int i = 0; i < n; i++) {
        int r = tok_decoder_push(&d, ids[i], s + o, max);
        int valid = ids[i] >= 0 && ids[i] < tok_n_vocab(v);
        FUZZ_CHECK(valid ? r >= 0 : r == BRISK_EINVAL);
        if (r < 0)
            continue;
        FUZZ_CHECK((size_t)r <= max);
        FUZZ_CHECK(fuzz_utf8_valid(s + o, (size_t)r));
        o += (size_t)r;
    }
    int r = tok_decoder_flush(&d, s + o, 3);
    FUZZ_CHECK(r >= 0 && r <= 3);
    o += (size_t)r;
    FUZZ_CHECK(fuzz_utf8_valid(s, o));
    *len = o;
    return s;
}

/* decode_all's text, which has no NUL when no piece has one. */
static size_t decoded_len(const tok_vocab *v, const int32_t *ids, int n, int flags, const char *s) {
    size_t total = 0;
    for (int i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= tok_n_vocab(v))
            continue;
        int k = tok_token_to_piece(v, ids[i], flags, NULL, 0);
        FUZZ_CHECK(k >= 0);
        total += (size_t)k;
    }
    size_t l = strlen(s);
    FUZZ_CHECK(l <= total);
    return l;
}

static void check_decode(const tok_vocab *v, const int32_t *ids, int n, int flags) {
    int df = flags & TOK_PARSE_SPECIAL;
    char *all = tok_decode_all(v, ids, n, df);
    FUZZ_CHECK(all != NULL);
    size_t al = decoded_len(v, ids, n, df, all);
    size_t sl = 0;
    char *st = stream(v, ids, n, df | (flags & TOK_CONTINUATION), &sl);
    /* With TOK_CONTINUATION the first space is kept, unlike decode_all. */
    if (st && !(flags & TOK_CONTINUATION) && fuzz_utf8_valid(all, al)) {
        int has_nul = 0;
        for (int i = 0; i < n; i++)
            if (ids[i] >= 0 && ids[i] < tok_n_vocab(v)) {
                char p[256];
                int k = tok_token_to_piece(v, ids[i], df, p, sizeof p);
                if (k > (int)sizeof p || memchr(p, '\0', (size_t)(k > 0 ? k : 0)))
                    has_nul = 1;
            }
        if (!has_nul)
            FUZZ_CHECK(sl == al && !memcmp(st, all, al));
    }
    free(st);
    /* Round trip through the text the ids make. */
    char *plain = tok_decode_all(v, ids, n, 0);
    FUZZ_CHECK(plain != NULL);
    size_t pl = strlen(plain);
    int32_t *re = NULL;
    int m = encode(v, plain, pl, 0, &re);
    FUZZ_CHECK(m >= 0 || m == BRISK_ENOMEM);
    if (m >= 0 && lossless(v, plain, pl)) {
        char *back = tok_decode_all(v, re, m, 0);
        FUZZ_CHECK(back && strlen(back) == pl && !memcmp(back, plain, pl));
        free(back);
    }
    free(re);
    free(plain);
    free(all);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > FUZZ_TOK_MAX_BYTES)
        return 0;
    fuzz_in in = {data, size};
    const tok_vocab *v = fuzz_vocab(fuzz_u8(&in));
    uint8_t fb = fuzz_u8(&in);
    int flags = (fb & 1 ? TOK_ADD_BOS : 0) | (fb & 2 ? TOK_PARSE_SPECIAL : 0) |
                (fb & 8 ? TOK_CONTINUATION : 0);
    int32_t nv = tok_n_vocab(v);
    if (fb & 4) {
        int n = (int)(in.n / 2);
        int32_t *ids = malloc((size_t)(n ? n : 1) * sizeof *ids);
        if (!ids)
            return 0;
        for (int i = 0; i < n; i++)
            ids[i] = (int32_t)(fuzz_u16(&in) % (uint32_t)(nv + 16)) - 8;
        check_decode(v, ids, n, flags);
        free(ids);
        return 0;
    }
    const char *text = (const char *)in.p;
    size_t len = in.n;
    int32_t *ids = NULL;
    int ef = flags & (TOK_ADD_BOS | TOK_PARSE_SPECIAL);
    int n = encode(v, text, len, ef, &ids);
    FUZZ_CHECK(n >= 0 || n == BRISK_ENOMEM);
    if (n < 0)
        return 0;
    for (int i = 0; i < n; i++)
        FUZZ_CHECK(ids[i] >= 0 && ids[i] < nv);
    if ((ef & TOK_ADD_BOS) && tok_bos(v) >= 0)
        FUZZ_CHECK(n >= 1 && ids[0] == tok_bos(v));
    /* BOS is a control token that prints nothing in every vocab used here;
     * if one ever printed, the round trip would not hold with it. */
    int bos_quiet =
        !(ef & TOK_ADD_BOS) || tok_bos(v) < 0 || tok_token_to_piece(v, tok_bos(v), 0, NULL, 0) == 0;
    if (!(ef & TOK_PARSE_SPECIAL) && bos_quiet && lossless(v, text, len)) {
        char *back = tok_decode_all(v, ids, n, 0);
        FUZZ_CHECK(back && strlen(back) == len && !memcmp(back, text, len));
        free(back);
    }
    check_decode(v, ids, n, flags);
    free(ids);
    return 0;
}
