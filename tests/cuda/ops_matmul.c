/* ops_matmul.c - kern_cuda_matmul on every path (the tensor-core GEMV, cuBLAS,
 * brisk's W8A16 kernels, INT8 dequantised into cuBLAS), the dequantising
 * pass, and kern_cuda_weight_upload (whole, and fused row ranges) against the
 * CPU. The perf mode is perf_matmul.c.
 *
 *   MATMUL_UPLOAD  exact: the uploaded arrays, downloaded, against the CPU's
 *                  conversion of the same source rows (kern_types.h): F16 =
 *                  kern_quantize_row(F16) of the dequantised row; INT8 = the
 *                  Q8_0 blocks split into values and scales - the source's
 *                  own for Q8_0, kern_requantize_row_q8 for Q4_0 (exact),
 *                  kern_quantize_row(Q8_0) of the dequantised row otherwise.
 *                  Every source type, and shapes of two staging slices. A
 *                  fused weight (parts of three source types in row ranges
 *                  of one allocation) holds each part's bits exactly, its
 *                  views address them, and its size is the parts' sum.
 *   MATMUL_DEQUANT exact: kern_cuda_w8a16_dequant's halves against
 *                  kern_fp32_to_fp16(s * q), scales from 2^-24 to 2^15 (the
 *                  products' subnormals and overflows included).
 *   MATMUL         y against a double reference computed from exactly the
 *                  operands the GPU multiplies: the weights downloaded from the
 *                  device (F16 values; INT8 s * q, or f16(s * q) for the
 *                  tensor-core paths, which round each weight to f16 once -
 *                  kern_fp32_to_fp16 rounds as __float2half_rn does, bit for
 *                  bit) and x rounded to f16 by kern_fp32_to_fp16 (the GPU's
 *                  x16, bit for bit, whether the conversion pass or the GEMV
 *                  rounds it). What remains is the order and rounding of
 *                  the f32 sums, so the bounds are tight:
 *       1e-5  the W8A16 CUDA-core GEMV (n_tok <= 8): IEEE f32 FMAs, round to
 *             nearest; a lane sums 8 exact products, folds that into its
 *             total (<= n_in / 512 steps here), then a 5-level shuffle tree
 *             and <= 4 warp partials: a few dozen roundings of 2^-24 on any
 *             path, random in sign - ~1e-7..1e-6 in norm.
 *       5e-5  tensor cores (the tensor-core GEMV, cuBLAS, dequant + cuBLAS,
 *             SKINNY, TILED): the MMA units add exact products but align
 *             and truncate inside each step (Fasi et al., "Numerical
 *             behavior of NVIDIA tensor cores", 2021), a bias of up to
 *             about one f32 ulp of the running sum per 16-term step: <= 256
 *             steps in one chain at n_in = 4096 (the GEMV's chains are
 *             shorter: K is split among up to 8 warps whose partials are
 *             then added in f32), ~1e-5 if the running sum kept its sign
 *             throughout, ~1e-6 typically.
 *             (Without the f16 rounding of the weights in the reference the
 *             INT8 tensor-core error would be ~u16 / sqrt(3) = 2.8e-4: the
 *             bound tells the two apart.)
 *                  Every case runs the automatic choice (kern_cuda_matmul;
 *                  the line says which path it took), each path forced
 *                  through kern_cuda_matmul_ex (LEGACY - the kernels before
 *                  the GEMV and the dequant path, kept as the fallback -
 *                  GEMV where kern_cuda_gemv_fits, DEQUANT for INT8 with a
 *                  small workspace so that it runs in several chunks), and
 *                  for INT8 each W8A16 kernel forced (GEMV up to 8 tokens,
 *                  SKINNY, TILED64, TILED128). Half the cases have ldy >
 *                  n_out and x off 16-byte alignment: the padding must keep
 *                  its sentinel bytes (each changed float adds 1 to the
 *                  error), as must rows a kernel does not own.
 *   MATMUL args    exact: bad sizes, pointers, formats, workspace sizes,
 *                  forced paths that cannot run -> BRISK_EINVAL; n_tok = 0
 *                  -> 0 and nothing written. */
#include <cublas_v2.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/brisk_error.h"
#include "kernels/cpu/kern_kquant.h"
#include "kernels/cpu/kern_types.h"
#include "kernels/cuda/kern_cuda_buf.h"
#include "kernels/cuda/kern_cuda_gemv.cuh"
#include "kernels/cuda/kern_cuda_matmul.cuh"
#include "kernels/cuda/kern_cuda_w8a16.cuh"
#include "tests/cuda/cuda_test.h"

#define MM_GEMV_BOUND 1e-5
#define MM_TC_BOUND 5e-5
#define MM_SENTINEL 0x7f /* every byte of y before a call: 0x7f7f7f7f = 3.4e38 */

static const char *fmt_name(kern_cuda_wfmt fmt) {
    return fmt == KERN_CUDA_W_F16 ? "f16" : "int8";
}

/* ---- host copies of a weight ------------------------------------------------------ */

/* A weight as the GPU holds it: F16 values, or INT8 values and scales. */
typedef struct {
    kern_cuda_wfmt fmt;
    int n_out, n_in;
    uint16_t *h;
    int8_t *q;
    uint16_t *s;
} host_weight;

static host_weight host_weight_alloc(kern_cuda_wfmt fmt, int n_out, int n_in) {
    host_weight hw = {fmt, n_out, n_in, NULL, NULL, NULL};
    size_t n = (size_t)n_out * n_in;
    if (fmt == KERN_CUDA_W_F16) {
        hw.h = xmalloc(n * sizeof(uint16_t));
    } else {
        hw.q = xmalloc(n);
        hw.s = xmalloc(n / KERN_QK * sizeof(uint16_t));
    }
    return hw;
}

static void host_weight_free(host_weight *hw) {
    free(hw->h), free(hw->q), free(hw->s);
    hw->h = NULL, hw->q = NULL, hw->s = NULL;
}

static host_weight download_weight(const kern_cuda_weight *w) {
    host_weight hw = host_weight_alloc(w->fmt, w->n_out, w->n_in);
    size_t n = (size_t)w->n_out * w->n_in;
    if (w->fmt == KERN_CUDA_W_F16) {
        to_host(hw.h, w->data, n * sizeof(uint16_t));
    } else {
        to_host(hw.q, w->data, n);
        to_host(hw.s, w->scales, n / KERN_QK * sizeof(uint16_t));
    }
    return hw;
}

/* n_out rows of f (n_in floats each) as rows of type t. */
static uint8_t *make_src(kern_type t, const float *f, int n_out, int n_in) {
    size_t rb = kern_row_bytes(t, n_in);
    uint8_t *b = xmalloc(rb * (size_t)n_out);
    for (int r = 0; r < n_out; r++)
        kern_quantize_row(t, f + (size_t)r * n_in, b + (size_t)r * rb, n_in);
    return b;
}

/* n_out rows of n_in values of a type read from files only (Q5_*, the
 * K-quants, IQ4_*; brisk has no quantizer for them): random codes and
 * sub-block scales, the fp16 block scales (d, and dmin or m) random in
 * [2^-12, 2^-4), as in real files. */
static uint8_t *make_random_blocks(kern_type t, int n_out, int n_in) {
    size_t rb = kern_row_bytes(t, n_in), bb = kern_type_block_bytes(t);
    size_t n_blocks = rb / bb * (size_t)n_out;
    uint8_t *b = xmalloc(rb * (size_t)n_out);
    for (size_t i = 0; i < rb * (size_t)n_out; i++)
        b[i] = (uint8_t)(rng_u64() >> 56);
    int offs[2] = {-1, -1};
    switch (t) {
    case KERN_TYPE_Q5_1:
    case KERN_TYPE_Q4_K:
    case KERN_TYPE_Q5_K: offs[0] = 0, offs[1] = 2; break;
    case KERN_TYPE_Q2_K: offs[0] = 80, offs[1] = 82; break;
    case KERN_TYPE_Q3_K: offs[0] = 108; break;
    case KERN_TYPE_Q6_K: offs[0] = 208; break;
    default: offs[0] = 0; break; /* Q5_0, IQ4_NL, IQ4_XS */
    }
    for (size_t k = 0; k < n_blocks; k++)
        for (int j = 0; j < 2; j++)
            if (offs[j] >= 0) {
                float v = ldexpf(1.0f + (float)(rng_u64() >> 41) / (float)(1 << 23),
                                 -12 + (int)(rng_u64() % 8));
                uint16_t h = kern_fp32_to_fp16(v);
                memcpy(b + k * bb + (size_t)offs[j], &h, 2);
            }
    return b;
}

/* What kern_cuda_weight_upload must make of src, by the contract. */
static host_weight expect_upload(kern_cuda_wfmt fmt, kern_type t, const uint8_t *src, int n_out,
                                 int n_in) {
    host_weight e = host_weight_alloc(fmt, n_out, n_in);
    size_t rb = kern_row_bytes(t, n_in);
    int nb = n_in / KERN_QK;
    float *row = xmalloc((size_t)n_in * sizeof(float));
    kern_block_q8_0 *blk = xmalloc((size_t)(nb + 1) * sizeof(kern_block_q8_0));
    for (int r = 0; r < n_out; r++) {
        const uint8_t *sr = src + (size_t)r * rb;
        if (fmt == KERN_CUDA_W_F16) {
            kern_dequantize_row(t, sr, row, n_in);
            kern_quantize_row(KERN_TYPE_F16, row, e.h + (size_t)r * n_in, n_in);
            continue;
        }
        if (t == KERN_TYPE_Q8_0) {
            memcpy(blk, sr, rb);
        } else if (kern_int8_type(t) == KERN_TYPE_Q8_0 &&
                   kern_requantize_row_q8(t, sr, blk, n_in) == 0) {
            /* Q4_0, Q5_0, IQ4_NL, IQ4_XS: the codes carried over */
        } else {
            kern_dequantize_row(t, sr, row, n_in);
            kern_quantize_row(KERN_TYPE_Q8_0, row, blk, n_in);
        }
        for (int b = 0; b < nb; b++) {
            e.s[(size_t)r * nb + b] = blk[b].d;
            memcpy(e.q + (size_t)r * n_in + (size_t)b * KERN_QK, blk[b].qs, KERN_QK);
        }
    }
    free(row);
    free(blk);
    return e;
}

static size_t count_diff(const void *a, const void *b, size_t n, size_t elem) {
    size_t d = 0;
    for (size_t i = 0; i < n; i++)
        d += memcmp((const char *)a + i * elem, (const char *)b + i * elem, elem) != 0;
    return d;
}

/* ---- reference ---------------------------------------------------------------------- */

/* ref[t * n_out + o] = sum_i w[o][i] * x16[t][i] in double; w is the F16
 * value, or s * q, or with tc the f16 rounding of s * q (the tensor-core
 * kernels' operand). x16f: the f16 activations as floats. */
static void ref_matmul(const host_weight *hw, int tc, const float *x16f, int n_tok, float *ref) {
    int n_out = hw->n_out, n_in = hw->n_in, nb = n_in / KERN_QK;
    double *wr = xmalloc((size_t)n_in * sizeof(double));
    for (int o = 0; o < n_out; o++) {
        for (int i = 0; i < n_in; i++) {
            size_t k = (size_t)o * n_in + i;
            if (hw->fmt == KERN_CUDA_W_F16) {
                wr[i] = kern_fp16_to_fp32(hw->h[k]);
            } else {
                float w = kern_fp16_to_fp32(hw->s[(size_t)o * nb + i / KERN_QK]) * (float)hw->q[k];
                wr[i] = tc ? kern_fp16_to_fp32(kern_fp32_to_fp16(w)) : w; /* w is exact */
            }
        }
        for (int t = 0; t < n_tok; t++) {
            const float *xt = x16f + (size_t)t * n_in;
            double acc = 0.0;
            for (int i = 0; i < n_in; i++)
                acc += wr[i] * xt[i];
            ref[(size_t)t * n_out + o] = (float)acc;
        }
    }
    free(wr);
}

/* ---- one matmul case ------------------------------------------------------------------ */

static kern_cuda_matmul_ctx *g_mm;

/* One way of running a matmul: a kern_cuda_matmul_ex path, or (path < 0)
 * one of the W8A16 kernels forced through kern_cuda_w8a16. */
typedef struct {
    const char *name;
    int path;   /* kern_cuda_mm_path, or -1 */
    int kernel; /* kern_cuda_w8a16_kernel when path < 0 */
} mm_variant;

static const mm_variant k_variants[] = {
    {"auto", KERN_CUDA_MM_AUTO, 0},
    {"legacy", KERN_CUDA_MM_LEGACY, 0},
    {"gemv_tc", KERN_CUDA_MM_GEMV, 0},
    {"dequant", KERN_CUDA_MM_DEQUANT, 0},
    {"w8_gemv", -1, KERN_CUDA_W8A16_GEMV},
    {"w8_skinny", -1, KERN_CUDA_W8A16_SKINNY},
    {"w8_tiled64", -1, KERN_CUDA_W8A16_TILED64},
    {"w8_tiled128", -1, KERN_CUDA_W8A16_TILED128},
};

/* The path kern_cuda_matmul takes for this call (the rule in
 * kern_cuda_matmul.cuh; g_mm has a dequantisation workspace). */
static int auto_path(const kern_cuda_weight *w, const float *x, int n_tok) {
    if (kern_cuda_gemv_fits(w, x, n_tok, g_cc_major))
        return KERN_CUDA_MM_GEMV;
    if (w->fmt == KERN_CUDA_W_INT8 && n_tok >= KERN_CUDA_W8A16_DEQUANT_MIN_TOK)
        return KERN_CUDA_MM_DEQUANT;
    return KERN_CUDA_MM_LEGACY;
}

static const char *path_name(int path) {
    switch (path) {
    case KERN_CUDA_MM_GEMV: return "gemv_tc";
    case KERN_CUDA_MM_DEQUANT: return "dequant";
    case KERN_CUDA_MM_LEGACY: return "legacy";
    default: return "auto";
    }
}

/* Whether a variant multiplies the exact s * q of INT8 weights (the CUDA-core
 * W8A16 GEMV) rather than f16(s * q) (every tensor-core path). */
static int exact_int8(const mm_variant *v, const kern_cuda_weight *w, const float *x, int n_tok) {
    if (w->fmt != KERN_CUDA_W_INT8)
        return 0;
    if (v->path < 0)
        return v->kernel == KERN_CUDA_W8A16_GEMV;
    int path = v->path == KERN_CUDA_MM_AUTO ? auto_path(w, x, n_tok) : v->path;
    return path == KERN_CUDA_MM_LEGACY && n_tok <= KERN_CUDA_W8A16_GEMV_MAX_TOK;
}

/* Runs one call into a sentinel-filled y of n_tok rows of ldy and returns
 * the normalised error against ref plus the number of floats outside the
 * n_tok x n_out result that changed. */
static double run_case(const kern_cuda_weight *w, const mm_variant *v, const float *d_x,
                       const uint16_t *d_x16, int n_tok, size_t ldy, void *d_ws, size_t ws_bytes,
                       const float *ref, size_t *pad_bad) {
    int n_out = w->n_out;
    size_t ny = (size_t)n_tok * ldy;
    float *d_y = dev_alloc(ny * sizeof(float));
    must(kern_cuda_memset(d_y, MM_SENTINEL, ny * sizeof(float), g_stream), "kern_cuda_memset");
    if (v->path >= 0)
        must(kern_cuda_matmul_ex(g_mm, w, d_x, n_tok, d_y, ldy, d_ws, ws_bytes,
                                 (kern_cuda_mm_path)v->path),
             "kern_cuda_matmul_ex");
    else
        must(kern_cuda_w8a16(d_y, ldy, w->data, w->scales, d_x16, n_out, w->n_in, n_tok,
                             (kern_cuda_w8a16_kernel)v->kernel, 0, g_stream),
             "kern_cuda_w8a16");
    float *y = xmalloc(ny * sizeof(float)), *got = xmalloc((size_t)n_tok * n_out * sizeof(float));
    to_host(y, d_y, ny * sizeof(float));
    float sentinel;
    memset(&sentinel, MM_SENTINEL, sizeof sentinel);
    *pad_bad = 0;
    for (int t = 0; t < n_tok; t++) {
        memcpy(got + (size_t)t * n_out, y + (size_t)t * ldy, (size_t)n_out * sizeof(float));
        for (size_t o = (size_t)n_out; o < ldy; o++)
            *pad_bad += memcmp(&y[(size_t)t * ldy + o], &sentinel, sizeof(float)) != 0;
    }
    double err = norm_err(got, ref, (size_t)n_tok * n_out);
    dev_free(d_y);
    free(y), free(got);
    return err;
}

/* Every path and kernel that takes this weight and batch of tokens. */
static void matmul_case(const kern_cuda_weight *w, const char *src_name, int n_tok) {
    int n_out = w->n_out, n_in = w->n_in;
    size_t nx = (size_t)n_tok * n_in;
    /* Odd batches: rows padded (ldy > n_out), and x one float off 16-byte
     * alignment (the scalar f16 conversion; the tensor-core GEMV does not
     * take it, so AUTO runs the legacy path there). */
    size_t ldy = (size_t)n_out + (n_tok % 2 ? 5 : 0), x_off = n_tok % 2;
    float *x = xmalloc(nx * sizeof(float)), *x16f = xmalloc(nx * sizeof(float));
    uint16_t *x16 = xmalloc(nx * sizeof(uint16_t));
    fill(x, nx, 1.0f);
    for (size_t i = 0; i < nx; i++) {
        x16[i] = kern_fp32_to_fp16(x[i]);
        x16f[i] = kern_fp16_to_fp32(x16[i]);
    }
    float *d_xbuf = dev_alloc((nx + x_off) * sizeof(float));
    must(kern_cuda_upload(d_xbuf + x_off, x, nx * sizeof(float), g_stream), "kern_cuda_upload");
    const float *d_x = d_xbuf + x_off;
    uint16_t *d_x16 = dev_from(x16, nx * sizeof(uint16_t));
    size_t ws_bytes = kern_cuda_matmul_ws_bytes(n_in, n_tok);
    void *d_ws = dev_alloc(ws_bytes);

    host_weight hw = download_weight(w);
    float *ref = xmalloc((size_t)n_tok * n_out * sizeof(float));
    float *ref_tc =
        w->fmt == KERN_CUDA_W_INT8 ? xmalloc((size_t)n_tok * n_out * sizeof(float)) : NULL;
    ref_matmul(&hw, 0, x16f, n_tok, ref);
    if (ref_tc)
        ref_matmul(&hw, 1, x16f, n_tok, ref_tc);

    for (size_t k = 0; k < ARRAY_LEN(k_variants); k++) {
        const mm_variant *v = &k_variants[k];
        int int8 = w->fmt == KERN_CUDA_W_INT8;
        if ((v->path < 0 || v->path == KERN_CUDA_MM_DEQUANT) && !int8)
            continue; /* INT8 only */
        /* Under the sanitizers (--small) INT8's legacy path is one of the
         * W8A16 kernels forced below, run again: skipped, and the dequant
         * path (cuBLAS, slow under racecheck) at two token counts. */
        if (g_small && int8 && v->path == KERN_CUDA_MM_LEGACY)
            continue;
        if (g_small && v->path == KERN_CUDA_MM_DEQUANT && n_tok != 1 && n_tok != 17)
            continue;
        if (v->path == KERN_CUDA_MM_GEMV && !kern_cuda_gemv_fits(w, d_x, n_tok, g_cc_major))
            continue; /* before sm_80, past 16 tokens, or x unaligned */
        if (v->path < 0 && v->kernel == KERN_CUDA_W8A16_GEMV &&
            n_tok > KERN_CUDA_W8A16_GEMV_MAX_TOK)
            continue;
        int exact = exact_int8(v, w, d_x, n_tok);
        size_t pad_bad = 0;
        double err = run_case(w, v, d_x, d_x16, n_tok, ldy, d_ws, ws_bytes,
                              int8 && !exact ? ref_tc : ref, &pad_bad);
        report("MATMUL", err + (double)pad_bad, exact ? MM_GEMV_BOUND : MM_TC_BOUND,
               "%s<-%s,%s%s%s,n_out=%d,n_in=%d,n_tok=%d,ldy=%zu%s", fmt_name(w->fmt), src_name,
               v->name, v->path == KERN_CUDA_MM_AUTO ? "->" : "",
               v->path == KERN_CUDA_MM_AUTO ? path_name(auto_path(w, d_x, n_tok)) : "", n_out, n_in,
               n_tok, ldy, x_off ? ",x_unaligned" : "");
    }
    host_weight_free(&hw);
    dev_free(d_xbuf), dev_free(d_x16), dev_free(d_ws);
    free(x), free(x16f), free(x16), free(ref), free(ref_tc);
}

/* ---- upload ------------------------------------------------------------------------ */

/* Uploads n_out x n_in random values given as src_type into fmt and checks
 * the device arrays bit for bit. */
static void upload_case(kern_cuda_wfmt fmt, kern_type src_type, int n_out, int n_in) {
    size_t n = (size_t)n_out * n_in;
    float *f = xmalloc(n * sizeof(float));
    fill(f, n, 0.05f);
    uint8_t *src = kern_kq_is(src_type) ? make_random_blocks(src_type, n_out, n_in)
                                        : make_src(src_type, f, n_out, n_in);
    free(f);
    kern_cuda_weight w;
    must(kern_cuda_weight_upload(&w, fmt, src_type, src, n_out, n_in), "kern_cuda_weight_upload");
    host_weight e = expect_upload(fmt, src_type, src, n_out, n_in);
    host_weight got = download_weight(&w);
    size_t bad = 0;
    if (fmt == KERN_CUDA_W_F16) {
        bad = count_diff(got.h, e.h, n, sizeof(uint16_t));
    } else {
        bad = count_diff(got.q, e.q, n, 1) + count_diff(got.s, e.s, n / KERN_QK, sizeof(uint16_t));
    }
    /* The struct describes what was uploaded. */
    bad += w.fmt != fmt || w.n_out != n_out || w.n_in != n_in ||
           (fmt == KERN_CUDA_W_F16) != (w.scales == NULL);
    report("MATMUL_UPLOAD", (double)bad, 0.0, "%s<-%s,n_out=%d,n_in=%d; %zu values differ",
           fmt_name(fmt), kern_type_name(src_type), n_out, n_in, bad);
    kern_cuda_weight_free(&w);
    bad = w.data != NULL || w.scales != NULL || w.n_out != 0; /* freed and zeroed */
    if (bad)
        report("MATMUL_UPLOAD", (double)bad, 0.0, "free zeroes the weight");
    host_weight_free(&e), host_weight_free(&got);
    free(src);
}

/* ---- argument checks ------------------------------------------------------------------ */

static void matmul_invalid(void) {
    const int n_out = 64, n_in = 64, n_tok = 2;
    float *f = xmalloc((size_t)n_out * n_in * sizeof(float));
    fill(f, (size_t)n_out * n_in, 0.05f);
    kern_cuda_weight w8, w16;
    must(kern_cuda_weight_upload(&w8, KERN_CUDA_W_INT8, KERN_TYPE_F32, f, n_out, n_in), "upload");
    must(kern_cuda_weight_upload(&w16, KERN_CUDA_W_F16, KERN_TYPE_F32, f, n_out, n_in), "upload");
    size_t ws_bytes = kern_cuda_matmul_ws_bytes(n_in, n_tok);
    float *d_x = dev_random((size_t)n_tok * n_in, 1.0f);
    float *d_y = dev_alloc((size_t)n_tok * n_out * sizeof(float));
    void *d_ws = dev_alloc(ws_bytes);
    kern_cuda_weight odd = w8; /* n_in not a multiple of 32 */
    odd.n_in = 48;
    kern_cuda_weight no_scales = w8;
    no_scales.scales = NULL;
    kern_cuda_weight bad_fmt = w16;
    bad_fmt.fmt = (kern_cuda_wfmt)7;
    kern_cuda_weight unaligned = w8;
    unaligned.data = (char *)w8.data + 1;
    struct {
        const char *what;
        kern_cuda_matmul_ctx *ctx;
        const kern_cuda_weight *w;
        const float *x;
        int n_tok;
        float *y;
        size_t ldy;
        void *ws;
        size_t ws_bytes;
        int want;
    } cases[] = {
        {"ok,int8", g_mm, &w8, d_x, n_tok, d_y, n_out, d_ws, ws_bytes, BRISK_OK},
        {"ok,f16", g_mm, &w16, d_x, n_tok, d_y, n_out, d_ws, ws_bytes, BRISK_OK},
        {"ctx=NULL", NULL, &w8, d_x, n_tok, d_y, n_out, d_ws, ws_bytes, BRISK_EINVAL},
        {"w=NULL", g_mm, NULL, d_x, n_tok, d_y, n_out, d_ws, ws_bytes, BRISK_EINVAL},
        {"x=NULL", g_mm, &w8, NULL, n_tok, d_y, n_out, d_ws, ws_bytes, BRISK_EINVAL},
        {"y=NULL", g_mm, &w16, d_x, n_tok, NULL, n_out, d_ws, ws_bytes, BRISK_EINVAL},
        {"ws=NULL", g_mm, &w8, d_x, n_tok, d_y, n_out, NULL, ws_bytes, BRISK_EINVAL},
        {"ws_small", g_mm, &w16, d_x, n_tok, d_y, n_out, d_ws, ws_bytes - 1, BRISK_EINVAL},
        {"ldy<n_out", g_mm, &w8, d_x, n_tok, d_y, n_out - 1, d_ws, ws_bytes, BRISK_EINVAL},
        {"n_tok<0", g_mm, &w8, d_x, -1, d_y, n_out, d_ws, ws_bytes, BRISK_EINVAL},
        {"int8,n_in%32", g_mm, &odd, d_x, n_tok, d_y, n_out, d_ws, ws_bytes, BRISK_EINVAL},
        {"int8,scales=NULL", g_mm, &no_scales, d_x, n_tok, d_y, n_out, d_ws, ws_bytes,
         BRISK_EINVAL},
        {"int8,unaligned", g_mm, &unaligned, d_x, n_tok, d_y, n_out, d_ws, ws_bytes, BRISK_EINVAL},
        {"fmt=7", g_mm, &bad_fmt, d_x, n_tok, d_y, n_out, d_ws, ws_bytes, BRISK_EINVAL},
        {"n_tok=0,null_bufs", g_mm, &w8, NULL, 0, NULL, n_out, NULL, 0, BRISK_OK},
    };
    for (size_t c = 0; c < ARRAY_LEN(cases); c++) {
        int rc = kern_cuda_matmul(cases[c].ctx, cases[c].w, cases[c].x, cases[c].n_tok, cases[c].y,
                                  cases[c].ldy, cases[c].ws, cases[c].ws_bytes);
        report("MATMUL", rc != cases[c].want, 0.0, "args:%s -> %d (want %d)", cases[c].what, rc,
               cases[c].want);
    }
    must(kern_cuda_sync(g_stream), "kern_cuda_sync");

    /* kern_cuda_w8a16 directly: GEMV past its tokens, misaligned x16, a
     * bad kernel id. */
    const uint16_t *x16 = d_ws; /* any 16-byte aligned device memory */
    struct {
        const char *what;
        int n_tok, kernel;
        const uint16_t *x16;
        int want;
    } kc[] = {
        {"gemv,n_tok=9", 9, KERN_CUDA_W8A16_GEMV, x16, BRISK_EINVAL},
        {"x16_unaligned", 1, KERN_CUDA_W8A16_AUTO, x16 + 1, BRISK_EINVAL},
        {"kernel=9", 1, 9, x16, BRISK_EINVAL},
        {"n_tok=0", 0, KERN_CUDA_W8A16_GEMV, x16, BRISK_OK},
    };
    for (size_t c = 0; c < ARRAY_LEN(kc); c++) {
        int rc = kern_cuda_w8a16(d_y, n_out, w8.data, w8.scales, kc[c].x16, n_out, n_in,
                                 kc[c].n_tok, (kern_cuda_w8a16_kernel)kc[c].kernel, 0, g_stream);
        report("MATMUL", rc != kc[c].want, 0.0, "args:w8a16,%s -> %d (want %d)", kc[c].what, rc,
               kc[c].want);
    }

    /* Uploads: a bad request leaves the weight zeroed. */
    struct {
        const char *what;
        kern_cuda_wfmt fmt;
        kern_type type;
        const void *src;
        int n_out, n_in;
    } uc[] = {
        {"int8,n_in=48", KERN_CUDA_W_INT8, KERN_TYPE_F32, f, 4, 48},
        {"q4_0,n_in=40", KERN_CUDA_W_F16, KERN_TYPE_Q4_0, f, 4, 40},
        {"src=NULL", KERN_CUDA_W_F16, KERN_TYPE_F32, NULL, 4, 64},
        {"n_out=0", KERN_CUDA_W_F16, KERN_TYPE_F32, f, 0, 64},
        {"n_in=-32", KERN_CUDA_W_INT8, KERN_TYPE_F32, f, 4, -32},
        {"type=5", KERN_CUDA_W_F16, (kern_type)5, f, 4, 64},
        {"fmt=2", (kern_cuda_wfmt)2, KERN_TYPE_F32, f, 4, 64},
    };
    for (size_t c = 0; c < ARRAY_LEN(uc); c++) {
        kern_cuda_weight w;
        memset(&w, 0xab, sizeof w);
        int rc =
            kern_cuda_weight_upload(&w, uc[c].fmt, uc[c].type, uc[c].src, uc[c].n_out, uc[c].n_in);
        int zeroed = !w.data && !w.scales && !w.n_out && !w.n_in;
        report("MATMUL", (rc != BRISK_EINVAL) + !zeroed, 0.0, "args:upload,%s -> %d%s", uc[c].what,
               rc, zeroed ? "" : " (not zeroed)");
    }
    /* kern_cuda_matmul_ex: forced paths that cannot take the call. */
    kern_cuda_matmul_ctx *bare = NULL; /* no dequantisation workspace */
    must(kern_cuda_matmul_ctx_create(&bare, g_stream), "kern_cuda_matmul_ctx_create");
    struct {
        const char *what;
        kern_cuda_matmul_ctx *ctx;
        const kern_cuda_weight *w;
        const float *x;
        int n_tok, path, want;
    } pc[] = {
        {"path=9", g_mm, &w8, d_x, n_tok, 9, BRISK_EINVAL},
        {"path=-1", g_mm, &w8, d_x, n_tok, -1, BRISK_EINVAL},
        {"dequant,f16", g_mm, &w16, d_x, n_tok, KERN_CUDA_MM_DEQUANT, BRISK_EINVAL},
        {"dequant,no_ws", bare, &w8, d_x, n_tok, KERN_CUDA_MM_DEQUANT, BRISK_EINVAL},
        {"gemv,x_unaligned", g_mm, &w16, d_x + 1, n_tok, KERN_CUDA_MM_GEMV, BRISK_EINVAL},
        {"gemv,n_tok=17", g_mm, &w8, d_x, 17, KERN_CUDA_MM_GEMV, BRISK_EINVAL},
        {"dequant,ok", g_mm, &w8, d_x, n_tok, KERN_CUDA_MM_DEQUANT, BRISK_OK},
        {"legacy,ok", bare, &w16, d_x, n_tok, KERN_CUDA_MM_LEGACY, BRISK_OK},
        /* sm_80 and later only; below it kern_cuda_gemv_fits says no. */
        {"gemv", g_mm, &w16, d_x, n_tok, KERN_CUDA_MM_GEMV,
         g_cc_major >= 8 ? BRISK_OK : BRISK_EINVAL},
    };
    float *d_y17 = dev_alloc((size_t)17 * n_out * sizeof(float));
    void *d_ws17 = dev_alloc(kern_cuda_matmul_ws_bytes(n_in, 17));
    float *d_x17 = dev_random((size_t)17 * n_in, 1.0f);
    for (size_t c = 0; c < ARRAY_LEN(pc); c++) {
        const float *x = pc[c].n_tok == 17 ? d_x17 : pc[c].x;
        int rc =
            kern_cuda_matmul_ex(pc[c].ctx, pc[c].w, x, pc[c].n_tok, d_y17, n_out, d_ws17,
                                kern_cuda_matmul_ws_bytes(n_in, 17), (kern_cuda_mm_path)pc[c].path);
        report("MATMUL", rc != pc[c].want, 0.0, "args:path,%s -> %d (want %d)", pc[c].what, rc,
               pc[c].want);
    }
    must(kern_cuda_sync(g_stream), "kern_cuda_sync");
    kern_cuda_matmul_ctx_free(bare);
    dev_free(d_y17), dev_free(d_ws17), dev_free(d_x17);
    /* The GEMV and the dequantising pass directly. */
    report("MATMUL",
           kern_cuda_gemv(d_y, n_out, &w16, d_x, n_tok, 0, 7, g_stream) != BRISK_EINVAL ||
               kern_cuda_gemv(d_y, n_out - 1, &w16, d_x, n_tok, 0, 9, g_stream) != BRISK_EINVAL ||
               kern_cuda_gemv(NULL, n_out, &w16, d_x, n_tok, 0, 9, g_stream) != BRISK_EINVAL ||
               kern_cuda_gemv_fits(&odd, d_x, 1, 9) != 0 || kern_cuda_gemv_fits(&w16, d_x, 0, 9),
           0.0, "args:gemv (sm_70, ldy<n_out, y=NULL, int8 n_in%%32, n_tok=0)");
    report("MATMUL",
           kern_cuda_w8a16_dequant(d_ws, w8.data, w8.scales, 1, 48, g_stream) != BRISK_EINVAL ||
               kern_cuda_w8a16_dequant((uint16_t *)d_ws + 1, w8.data, w8.scales, 1, 64, g_stream) !=
                   BRISK_EINVAL ||
               kern_cuda_w8a16_dequant(d_ws, w8.data, w8.scales, 0, 64, g_stream) != BRISK_OK,
           0.0, "args:dequant (n_in%%32, out unaligned, 0 rows)");
    report("MATMUL",
           kern_cuda_matmul_ctx_dequant_ws(NULL, 64) != BRISK_EINVAL ||
               kern_cuda_matmul_ctx_dequant_ws(g_mm, 0) != BRISK_EINVAL,
           0.0, "args:dequant_ws");

    int sizes_bad = kern_cuda_matmul_ws_bytes(-1, 1) != (size_t)-1 ||
                    kern_cuda_matmul_ws_bytes(64, 0) != 0 ||
                    kern_cuda_weight_bytes(KERN_CUDA_W_INT8, 10, 48) != 0 ||
                    kern_cuda_weight_bytes(KERN_CUDA_W_F16, 10, 48) != 960 ||
                    kern_cuda_weight_bytes(KERN_CUDA_W_INT8, 10, 64) != 640 + 40;
    report("MATMUL", sizes_bad, 0.0, "args:ws_bytes,weight_bytes");

    kern_cuda_weight_free(&w8);
    kern_cuda_weight_free(&w16);
    kern_cuda_weight_free(NULL);
    dev_free(d_x), dev_free(d_y), dev_free(d_ws);
    free(f);
}

/* ---- the GEMV's split of K ---------------------------------------------------------- */

/* kern_cuda_gemv_ex with every split of K forced (1, 2, 4, 8 warps a tile;
 * with 3 rounds a row, 8 leaves warps without work, whose zero partials
 * still join the sum) against the tensor-core reference: the same bound,
 * since only the order of the f32 sums changes. */
static void test_gemv_split(void) {
    if (g_cc_major < 8)
        return; /* the GEMV needs sm_80 */
    const int n_out = 100, n_in = 320, n_tok = 5;
    for (int fmt = 0; fmt < 2; fmt++) {
        size_t n = (size_t)n_out * n_in, nx = (size_t)n_tok * n_in;
        float *f = xmalloc(n * sizeof(float)), *x = xmalloc(nx * sizeof(float));
        float *x16f = xmalloc(nx * sizeof(float));
        float *ref = xmalloc((size_t)n_tok * n_out * sizeof(float));
        float *got = xmalloc((size_t)n_tok * n_out * sizeof(float));
        fill(f, n, 0.05f);
        fill(x, nx, 1.0f);
        for (size_t i = 0; i < nx; i++)
            x16f[i] = kern_fp16_to_fp32(kern_fp32_to_fp16(x[i]));
        kern_cuda_weight w;
        must(kern_cuda_weight_upload(&w, (kern_cuda_wfmt)fmt, KERN_TYPE_F32, f, n_out, n_in),
             "kern_cuda_weight_upload");
        host_weight hw = download_weight(&w);
        ref_matmul(&hw, 1, x16f, n_tok, ref);
        float *d_x = dev_from(x, nx * sizeof(float));
        float *d_y = dev_alloc((size_t)n_tok * n_out * sizeof(float));
        for (int kw = 1; kw <= 8; kw *= 2) {
            must(
                kern_cuda_memset(d_y, MM_SENTINEL, (size_t)n_tok * n_out * sizeof(float), g_stream),
                "kern_cuda_memset");
            must(kern_cuda_gemv_ex(d_y, n_out, &w, d_x, n_tok, 132, g_cc_major, kw, g_stream),
                 "kern_cuda_gemv_ex");
            to_host(got, d_y, (size_t)n_tok * n_out * sizeof(float));
            report("MATMUL", norm_err(got, ref, (size_t)n_tok * n_out), MM_TC_BOUND,
                   "%s,gemv_tc,kw=%d,n_out=%d,n_in=%d,n_tok=%d", fmt_name(w.fmt), kw, n_out, n_in,
                   n_tok);
        }
        report("MATMUL",
               kern_cuda_gemv_ex(d_y, n_out, &w, d_x, n_tok, 132, g_cc_major, 3, g_stream) !=
                   BRISK_EINVAL,
               0.0, "args:gemv_ex,%s,kw=3", fmt_name(w.fmt));
        host_weight_free(&hw);
        kern_cuda_weight_free(&w);
        dev_free(d_x), dev_free(d_y);
        free(f), free(x), free(x16f), free(ref), free(got);
    }
}

/* ---- the dequantising pass ---------------------------------------------------------- */

/* kern_cuda_w8a16_dequant bit for bit against kern_fp32_to_fp16(s * q), with
 * scales spread over f16's range (2^-24 to 2^15) so that products fall on
 * subnormals (tiny scales) and past 65504 (huge ones: infinite), and every
 * int8 value. The
 * GEMV multiplies with the same helper (kern_w8_dequant4), so this pins its
 * operands too. */
static void test_dequant(void) {
    const int shapes[][2] = {{3, 32}, {64, 96}, {100, 4096}};
    for (size_t si = 0; si < CASES_LEN(shapes); si++) {
        int n_rows = shapes[si][0], n_in = shapes[si][1], nb = n_in / KERN_QK;
        size_t n = (size_t)n_rows * n_in;
        int8_t *q = xmalloc(n);
        uint16_t *sc = xmalloc((size_t)n_rows * nb * sizeof(uint16_t));
        uint16_t *want = xmalloc(n * sizeof(uint16_t)), *got = xmalloc(n * sizeof(uint16_t));
        for (size_t i = 0; i < n; i++)
            q[i] = (int8_t)(i < 256 ? (int)i - 128 : (int)(rng_u64() >> 56) - 128);
        for (int b = 0; b < n_rows * nb; b++) {
            /* 2^-24 .. 2^15 (exclusive; an f16 scale itself never
             * infinite): subnormal, normal and overflowing products */
            float v = ldexpf(1.0f + (float)(rng_u64() >> 41) / (float)(1 << 23),
                             -24 + (int)(rng_u64() % 39));
            sc[b] = kern_fp32_to_fp16(rng_u64() & 1 ? -v : v);
        }
        for (size_t i = 0; i < n; i++)
            want[i] = kern_fp32_to_fp16(kern_fp16_to_fp32(sc[i / KERN_QK]) * (float)q[i]);
        int8_t *d_q = dev_from(q, n);
        uint16_t *d_s = dev_from(sc, (size_t)n_rows * nb * sizeof(uint16_t));
        uint16_t *d_o = dev_alloc(n * sizeof(uint16_t));
        must(kern_cuda_w8a16_dequant(d_o, d_q, d_s, n_rows, n_in, g_stream),
             "kern_cuda_w8a16_dequant");
        to_host(got, d_o, n * sizeof(uint16_t));
        size_t bad = count_diff(got, want, n, sizeof(uint16_t));
        report("MATMUL_DEQUANT", (double)bad, 0.0, "rows=%d,n_in=%d; %zu of %zu halves differ",
               n_rows, n_in, bad, n);
        dev_free(d_q), dev_free(d_s), dev_free(d_o);
        free(q), free(sc), free(want), free(got);
    }
}

/* ---- fused weights: row ranges and views ---------------------------------------------- */

/* The fused QKV / gate-up weights: parts of different source types
 * uploaded into row ranges of one allocation (kern_cuda_weight_alloc +
 * kern_cuda_weight_upload_rows) hold exactly what each part uploaded alone
 * holds, views of the ranges (kern_cuda_weight_rows) address them, and the
 * size is the sum of the parts'. */
static void test_fused_upload(void) {
    const kern_type types[] = {KERN_TYPE_F16, KERN_TYPE_Q8_0, KERN_TYPE_F32};
    const int n_in = 128, rows[] = {96, 32, 32};
    for (int fmt = 0; fmt < 2; fmt++) {
        uint8_t *src[3];
        int n_out = 0;
        for (int p = 0; p < 3; p++) {
            size_t n = (size_t)rows[p] * n_in;
            float *f = xmalloc(n * sizeof(float));
            fill(f, n, 0.05f);
            src[p] = make_src(types[p], f, rows[p], n_in);
            free(f);
            n_out += rows[p];
        }
        kern_cuda_weight fused;
        must(kern_cuda_weight_alloc(&fused, (kern_cuda_wfmt)fmt, n_out, n_in), "weight_alloc");
        size_t bad = 0, sum = 0;
        for (int p = 0, r0 = 0; p < 3; r0 += rows[p], p++) {
            must(kern_cuda_weight_upload_rows(&fused, r0, types[p], src[p], rows[p]),
                 "weight_upload_rows");
            sum += kern_cuda_weight_bytes((kern_cuda_wfmt)fmt, rows[p], n_in);
        }
        for (int p = 0, r0 = 0; p < 3; r0 += rows[p], p++) {
            kern_cuda_weight alone, view;
            must(kern_cuda_weight_upload(&alone, (kern_cuda_wfmt)fmt, types[p], src[p], rows[p],
                                         n_in),
                 "kern_cuda_weight_upload");
            must(kern_cuda_weight_rows(&fused, r0, rows[p], &view), "kern_cuda_weight_rows");
            host_weight a = download_weight(&alone), v = download_weight(&view);
            size_t n = (size_t)rows[p] * n_in;
            if (fmt == KERN_CUDA_W_F16)
                bad += count_diff(a.h, v.h, n, sizeof(uint16_t));
            else
                bad += count_diff(a.q, v.q, n, 1) +
                       count_diff(a.s, v.s, n / KERN_QK, sizeof(uint16_t));
            host_weight_free(&a), host_weight_free(&v);
            kern_cuda_weight_free(&alone);
        }
        bad += kern_cuda_weight_bytes((kern_cuda_wfmt)fmt, n_out, n_in) != sum;
        /* Ranges outside the weight, and a view of nothing. */
        kern_cuda_weight view;
        bad += kern_cuda_weight_upload_rows(&fused, n_out - 1, types[1], src[1], 2) != BRISK_EINVAL;
        bad += kern_cuda_weight_upload_rows(&fused, -1, types[1], src[1], 1) != BRISK_EINVAL;
        bad += kern_cuda_weight_upload_rows(&fused, 0, types[1], NULL, 1) != BRISK_EINVAL;
        bad += kern_cuda_weight_rows(&fused, 1, n_out, &view) != BRISK_EINVAL || view.data;
        bad += kern_cuda_weight_rows(&fused, 0, 0, &view) != BRISK_EINVAL;
        bad += kern_cuda_weight_alloc(&view, KERN_CUDA_W_INT8, 4, 48) != BRISK_EINVAL || view.data;
        report("MATMUL_UPLOAD", (double)bad, 0.0, "%s,fused f16|q8_0|f32 rows 96|32|32; %zu differ",
               fmt_name((kern_cuda_wfmt)fmt), bad);
        kern_cuda_weight_free(&fused);
        for (int p = 0; p < 3; p++)
            free(src[p]);
    }
}

/* ---- test --------------------------------------------------------------------------- */

void test_matmul(void) {
    must(kern_cuda_matmul_ctx_create(&g_mm, g_stream), "kern_cuda_matmul_ctx_create");
    /* A small dequantisation workspace, so that the shapes below run in
     * several chunks (64 rows of 4096, 128 of 1536). */
    must(kern_cuda_matmul_ctx_dequant_ws(g_mm, (size_t)512 << 10),
         "kern_cuda_matmul_ctx_dequant_ws");

    const kern_type srcs[] = {KERN_TYPE_F32,  KERN_TYPE_F16,  KERN_TYPE_BF16,
                              KERN_TYPE_Q8_0, KERN_TYPE_Q4_0, KERN_TYPE_Q4_1};
    for (int fmt = 0; fmt < 2; fmt++)
        for (size_t si = 0; si < ARRAY_LEN(srcs); si++)
            upload_case((kern_cuda_wfmt)fmt, srcs[si], 100, 320);
    /* Two staging slices (32 MiB of output each). */
    upload_case(KERN_CUDA_W_F16, KERN_TYPE_F32, 4100, 4096);
    upload_case(KERN_CUDA_W_INT8, KERN_TYPE_Q8_0, 7800, 4096);
    /* The types converted at load on the CPU: uploaded from the file's
     * blocks (rows of 512, two super-blocks). */
    const kern_type file_only[] = {KERN_TYPE_Q5_0, KERN_TYPE_Q5_1,   KERN_TYPE_Q2_K,
                                   KERN_TYPE_Q3_K, KERN_TYPE_Q4_K,   KERN_TYPE_Q5_K,
                                   KERN_TYPE_Q6_K, KERN_TYPE_IQ4_NL, KERN_TYPE_IQ4_XS};
    for (int fmt = 0; fmt < 2; fmt++)
        for (size_t si = 0; si < ARRAY_LEN(file_only); si++)
            upload_case((kern_cuda_wfmt)fmt, file_only[si], 96, 512);
    test_fused_upload();
    test_dequant();
    test_gemv_split();

    /* (n_out, n_in): a chunk of 64 int8 ending mid-way (96) and one of 32
     * f16 ending after 8 (328: INT8 runs it at 320, its rows must be
     * multiples of 32), with partial 16-row tiles and 2 warps splitting K
     * in the GEMV - the two the sanitizer runs; odd row counts; SmolLM2's
     * 576 / 1536; long rows (llama's 4096: the GEMV splits them among 8
     * warps); 2008 rows (many tiles, a partial last block). Each shape's
     * weights come from another source type. */
    const int shapes[][2] = {{64, 96},    {100, 328},  {333, 64},   {576, 1536},
                             {1536, 576}, {100, 4096}, {2008, 1024}};
    /* Both sides of every boundary: W8A16 GEMV <= 8 < SKINNY (16-token
     * tiles <= 16 < 32-token tiles) <= 128 < TILED; the tensor-core GEMV
     * <= 16 (rows g + 8 of its MMA from 9 tokens on); dequant from 64; 300
     * tokens only on the small shapes (the double reference is the cost). */
    const int toks[] = {1, 3, 8, 9, 16, 17, 64, 100, 300};
    for (int fmt = 0; fmt < 2; fmt++)
        for (size_t si = 0; si < CASES_LEN(shapes); si++) {
            int n_out = shapes[si][0], n_in = shapes[si][1];
            if (fmt == KERN_CUDA_W_INT8)
                n_in -= n_in % KERN_QK;
            kern_type src_type = srcs[si % ARRAY_LEN(srcs)];
            size_t n = (size_t)n_out * n_in;
            float *f = xmalloc(n * sizeof(float));
            fill(f, n, 0.05f);
            uint8_t *src = make_src(src_type, f, n_out, n_in);
            kern_cuda_weight w;
            must(kern_cuda_weight_upload(&w, (kern_cuda_wfmt)fmt, src_type, src, n_out, n_in),
                 "kern_cuda_weight_upload");
            for (size_t ti = 0; ti < ARRAY_LEN(toks); ti++) {
                if (g_small && toks[ti] > 17)
                    continue;
                if (toks[ti] > 100 && n > 40000)
                    continue;
                matmul_case(&w, kern_type_name(src_type), toks[ti]);
            }
            kern_cuda_weight_free(&w);
            free(f), free(src);
        }
    matmul_invalid();
    kern_cuda_matmul_ctx_free(g_mm);
    g_mm = NULL;
}
