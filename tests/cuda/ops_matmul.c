/* ops_matmul.c - kern_cuda_matmul (FP16 weights through cuBLAS, INT8 through
 * brisk's W8A16 kernels) and kern_cuda_weight_upload against the CPU.
 *
 * test:
 *   MATMUL_UPLOAD  exact: the uploaded arrays, downloaded, against the CPU's
 *                  conversion of the same source rows (kern_types.h): F16 =
 *                  kern_quantize_row(F16) of the dequantised row; INT8 = the
 *                  Q8_0 blocks split into values and scales - the source's
 *                  own for Q8_0, kern_requantize_row_q8 for Q4_0 (exact),
 *                  kern_quantize_row(Q8_0) of the dequantised row otherwise.
 *                  Every source type, and shapes of two staging slices.
 *   MATMUL         y against a double reference computed from exactly the
 *                  operands the GPU multiplies: the weights downloaded from the
 *                  device (F16 values; INT8 s * q, or f16(s * q) for the
 *                  tensor-core kernels, which round each weight to f16 once -
 *                  kern_fp32_to_fp16 rounds as __float2half_rn does, bit for
 *                  bit) and x rounded to f16 by kern_fp32_to_fp16 (the GPU's
 *                  x16, bit for bit). What remains is the order and rounding of
 *                  the f32 sums, so the bounds are tight:
 *       1e-5  GEMV (n_tok <= 8): IEEE f32 FMAs, round to nearest; a lane sums
 *             8 exact products, folds that into its total (<= n_in / 512
 *             steps here), then a 5-level shuffle tree and <= 4 warp
 *             partials: a few dozen roundings of 2^-24 on any path, random
 *             in sign - ~1e-7..1e-6 in norm.
 *       5e-5  tensor cores (cuBLAS, SKINNY, TILED): the MMA units add exact
 *             products but align and truncate inside each step (Fasi et al.,
 *             "Numerical behavior of NVIDIA tensor cores", 2021), a bias of up
 *             to about one f32 ulp of the running sum per 16-term step: <= 256
 *             steps in one chain at n_in = 4096, ~1e-5 if the running sum kept
 *             its sign throughout, ~1e-6 typically.
 *             (Without the f16 rounding of the weights in the reference the
 *             INT8 tensor-core error would be ~u16 / sqrt(3) = 2.8e-4: the
 *             bound tells the two apart.)
 *                  Every INT8 case runs each kernel (kern_cuda_w8a16 with the
 *                  kernel forced: GEMV up to 8 tokens, SKINNY, TILED64,
 *                  TILED128) and the automatic choice through
 *                  kern_cuda_matmul. Half the cases have ldy > n_out: the
 *                  padding must keep its sentinel bytes (each changed float
 *                  adds 1 to the error), as must rows a kernel does not own.
 *   MATMUL args    exact: bad sizes, pointers, formats, workspace sizes ->
 *                  BRISK_EINVAL; n_tok = 0 -> 0 and nothing written.
 * perf: cuBLAS's f16 peak on 8192^3 (the "matmul peak" every line compares
 * with), then llama-3-8b's weight shapes in F16 and INT8 at 1 to 4096 tokens
 * (bytes = weights + x read + y written, the least any implementation
 * moves), then each INT8 tensor-core kernel forced at 16 to 512 tokens, to
 * place the automatic choice's thresholds. */
#include <cublas_v2.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/brisk_error.h"
#include "kernels/cpu/kern_kquant.h"
#include "kernels/cpu/kern_types.h"
#include "kernels/cuda/kern_cuda_buf.h"
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

enum { K_AUTO = -1 }; /* else a kern_cuda_w8a16_kernel forced */

static const char *kernel_name(int k) {
    switch (k) {
    case KERN_CUDA_W8A16_GEMV: return "gemv";
    case KERN_CUDA_W8A16_SKINNY: return "skinny";
    case KERN_CUDA_W8A16_TILED64: return "tiled64";
    case KERN_CUDA_W8A16_TILED128: return "tiled128";
    default: return "auto";
    }
}

/* Runs one call into a sentinel-filled y of n_tok rows of ldy and returns
 * the normalised error against ref plus the number of floats outside the
 * n_tok x n_out result that changed. */
static double run_case(const kern_cuda_weight *w, int kernel, const float *d_x,
                       const uint16_t *d_x16, int n_tok, size_t ldy, void *d_ws, size_t ws_bytes,
                       const float *ref, size_t *pad_bad) {
    int n_out = w->n_out;
    size_t ny = (size_t)n_tok * ldy;
    float *d_y = dev_alloc(ny * sizeof(float));
    must(kern_cuda_memset(d_y, MM_SENTINEL, ny * sizeof(float), g_stream), "kern_cuda_memset");
    if (kernel == K_AUTO)
        must(kern_cuda_matmul(g_mm, w, d_x, n_tok, d_y, ldy, d_ws, ws_bytes), "kern_cuda_matmul");
    else
        must(kern_cuda_w8a16(d_y, ldy, w->data, w->scales, d_x16, n_out, w->n_in, n_tok,
                             (kern_cuda_w8a16_kernel)kernel, 0, g_stream),
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

/* Every kernel for one weight and one batch of tokens. */
static void matmul_case(const kern_cuda_weight *w, const char *src_name, int n_tok) {
    int n_out = w->n_out, n_in = w->n_in;
    size_t nx = (size_t)n_tok * n_in;
    /* Odd batches: rows padded (ldy > n_out), and x one float off 16-byte
     * alignment (the scalar f16 conversion). */
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

    /* F16: cuBLAS (auto only). INT8: auto, then each kernel forced. */
    const int kernels[] = {K_AUTO, KERN_CUDA_W8A16_GEMV, KERN_CUDA_W8A16_SKINNY,
                           KERN_CUDA_W8A16_TILED64, KERN_CUDA_W8A16_TILED128};
    size_t n_k = w->fmt == KERN_CUDA_W_F16 ? 1 : ARRAY_LEN(kernels);
    for (size_t k = 0; k < n_k; k++) {
        int kern = kernels[k];
        if (kern == KERN_CUDA_W8A16_GEMV && n_tok > KERN_CUDA_W8A16_GEMV_MAX_TOK)
            continue;
        /* Which operands this kernel multiplies: GEMV exact s * q, the
         * tensor-core kernels f16(s * q); auto picks GEMV up to 8 tokens. */
        int gemv = kern == KERN_CUDA_W8A16_GEMV ||
                   (kern == K_AUTO && n_tok <= KERN_CUDA_W8A16_GEMV_MAX_TOK);
        int tc = w->fmt == KERN_CUDA_W_F16 || !gemv;
        size_t pad_bad = 0;
        double err = run_case(w, kern, d_xbuf + x_off, d_x16, n_tok, ldy, d_ws, ws_bytes,
                              w->fmt == KERN_CUDA_W_INT8 && tc ? ref_tc : ref, &pad_bad);
        report("MATMUL", err + (double)pad_bad, tc ? MM_TC_BOUND : MM_GEMV_BOUND,
               "%s<-%s,%s,n_out=%d,n_in=%d,n_tok=%d,ldy=%zu%s", fmt_name(w->fmt), src_name,
               kernel_name(kern), n_out, n_in, n_tok, ldy, x_off ? ",x_unaligned" : "");
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

/* ---- test --------------------------------------------------------------------------- */

void test_matmul(void) {
    must(kern_cuda_matmul_ctx_create(&g_mm, g_stream), "kern_cuda_matmul_ctx_create");

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

    /* (n_out, n_in): tiny; odd row counts; SmolLM2's 576 / 1536; a long
     * row (llama's 4096: GEMV splits it among 2 or 4 warps). Each shape's
     * weights come from another source type. */
    const int shapes[][2] = {{64, 64},    {100, 320},  {333, 96},
                             {576, 1536}, {1536, 576}, {100, 4096}};
    /* Both sides of every kernel boundary: GEMV <= 8 < SKINNY (16-token
     * tiles <= 16 < 32-token tiles) <= 128 < TILED; 300 tokens only on the
     * small shapes (the double reference is the cost). */
    const int toks[] = {1, 3, 8, 9, 16, 17, 64, 100, 300};
    for (int fmt = 0; fmt < 2; fmt++)
        for (size_t si = 0; si < CASES_LEN(shapes); si++) {
            int n_out = shapes[si][0], n_in = shapes[si][1];
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

/* ---- perf ---------------------------------------------------------------------------- */

/* Device memory filled from a 16 MiB host pattern of random values of one
 * kind: timing on constant data would flatter the tensor cores (less
 * toggling, less power). */
enum { PAT_F16, PAT_I8, PAT_SCALE };

static void dev_pattern(void *d, size_t bytes, int kind) {
    const size_t chunk = (size_t)16 << 20;
    uint16_t *h = xmalloc(chunk);
    for (size_t i = 0; i < chunk / 2; i++) {
        uint16_t r = (uint16_t)(rng_u64() >> 40);
        if (kind == PAT_F16) /* |v| in [2^-6, 2^-2), either sign */
            h[i] = (uint16_t)((r & 0x8000u) | (0x2400u + (r % 0x1000u)));
        else if (kind == PAT_SCALE) /* [2^-8, 2^-7) */
            h[i] = (uint16_t)(0x1c00u + (r & 0x3ffu));
        else
            h[i] = r;
    }
    for (size_t off = 0; off < bytes; off += chunk) {
        size_t n = bytes - off < chunk ? bytes - off : chunk;
        must(kern_cuda_upload((char *)d + off, h, n, g_stream), "kern_cuda_upload");
    }
    must(kern_cuda_sync(g_stream), "kern_cuda_sync");
    free(h);
}

typedef struct {
    cublasHandle_t blas;
    void *a, *b, *c;
    int n;
} peak_ctx;

static int peak_call(void *p) {
    peak_ctx *k = p;
    const float alpha = 1.0f, beta = 0.0f;
    cublasStatus_t st = cublasGemmEx(k->blas, CUBLAS_OP_T, CUBLAS_OP_N, k->n, k->n, k->n, &alpha,
                                     k->a, CUDA_R_16F, k->n, k->b, CUDA_R_16F, k->n, &beta, k->c,
                                     CUDA_R_32F, k->n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    return st == CUBLAS_STATUS_SUCCESS ? 0 : BRISK_EIO;
}

/* Dense f16 matmul throughput of this GPU as cuBLAS reaches it: the
 * yardstick for every matmul line. */
static double matmul_peak(void) {
    peak_ctx k = {NULL, NULL, NULL, NULL, 8192};
    size_t nn = (size_t)k.n * k.n;
    if (cublasCreate(&k.blas) != CUBLAS_STATUS_SUCCESS ||
        cublasSetStream(k.blas, g_stream) != CUBLAS_STATUS_SUCCESS) {
        fprintf(stderr, "test_cuda_ops: cublasCreate failed\n");
        exit(1);
    }
    k.a = dev_alloc(nn * 2), k.b = dev_alloc(nn * 2), k.c = dev_alloc(nn * 4);
    dev_pattern(k.a, nn * 2, PAT_F16);
    dev_pattern(k.b, nn * 2, PAT_F16);
    double s = cuda_test_time(peak_call, &k, "cublasGemmEx");
    double peak = 2.0 * (double)nn * k.n / s;
    printf("matmul peak: %.1f TFLOP/s (cuBLAS f16 8192^3)\n", peak * 1e-12);
    dev_free(k.a), dev_free(k.b), dev_free(k.c);
    cublasDestroy(k.blas);
    return peak;
}

typedef struct {
    const kern_cuda_weight *w;
    const float *x;
    const uint16_t *x16;
    float *y;
    void *ws;
    size_t ws_bytes;
    int n_tok, kernel;
} mm_perf;

static int mm_perf_call(void *p) {
    const mm_perf *m = p;
    if (m->kernel == K_AUTO)
        return kern_cuda_matmul(g_mm, m->w, m->x, m->n_tok, m->y, (size_t)m->w->n_out, m->ws,
                                m->ws_bytes);
    return kern_cuda_w8a16(m->y, (size_t)m->w->n_out, m->w->data, m->w->scales, m->x16, m->w->n_out,
                           m->w->n_in, m->n_tok, (kern_cuda_w8a16_kernel)m->kernel, 0, g_stream);
}

/* A weight of random values made on the device (a host-side upload of the
 * 128256-row head would take seconds). */
static kern_cuda_weight perf_weight(kern_cuda_wfmt fmt, int n_out, int n_in) {
    kern_cuda_weight w = {fmt, n_out, n_in, NULL, NULL};
    size_t n = (size_t)n_out * n_in;
    if (fmt == KERN_CUDA_W_F16) {
        w.data = dev_alloc(n * 2);
        dev_pattern(w.data, n * 2, PAT_F16);
    } else {
        w.data = dev_alloc(n);
        w.scales = dev_alloc(n / KERN_QK * 2);
        dev_pattern(w.data, n, PAT_I8);
        dev_pattern(w.scales, n / KERN_QK * 2, PAT_SCALE);
    }
    return w;
}

void perf_matmul(double copy_bw) {
    double peak = matmul_peak();
    must(kern_cuda_matmul_ctx_create(&g_mm, g_stream), "kern_cuda_matmul_ctx_create");
    /* llama-3-8b: q/o (4096x4096), k/v (1024x4096), gate/up (14336x4096),
     * down (4096x14336), the head (128256x4096). */
    const int shapes[][2] = {
        {4096, 4096}, {1024, 4096}, {14336, 4096}, {4096, 14336}, {128256, 4096}};
    const int toks[] = {1, 8, 64, 512, 4096};
    const int max_tok = 4096, max_in = 14336, max_out = 128256;
    float *d_x = dev_random((size_t)max_tok * max_in, 1.0f);
    float *d_y = dev_alloc((size_t)max_tok * max_out * sizeof(float));
    size_t ws_bytes = kern_cuda_matmul_ws_bytes(max_in, max_tok);
    void *d_ws = dev_alloc(ws_bytes);
    uint16_t *d_x16 = dev_alloc((size_t)512 * max_in * 2);
    dev_pattern(d_x16, (size_t)512 * max_in * 2, PAT_F16);

    for (int fmt = 0; fmt < 2; fmt++)
        for (size_t si = 0; si < ARRAY_LEN(shapes); si++) {
            int n_out = shapes[si][0], n_in = shapes[si][1];
            kern_cuda_weight w = perf_weight((kern_cuda_wfmt)fmt, n_out, n_in);
            double wbytes = (double)kern_cuda_weight_bytes(w.fmt, n_out, n_in);
            for (size_t ti = 0; ti < ARRAY_LEN(toks); ti++) {
                int nt = toks[ti];
                mm_perf m = {&w, d_x, d_x16, d_y, d_ws, ws_bytes, nt, K_AUTO};
                double s = cuda_test_time(mm_perf_call, &m, "kern_cuda_matmul");
                double bytes = wbytes + (double)nt * n_in * 4 + (double)nt * n_out * 4;
                char shape[64];
                snprintf(shape, sizeof shape, "%dx%d,n_tok=%d", n_out, n_in, nt);
                perf_line_flops(fmt ? "matmul_int8" : "matmul_f16", shape, bytes,
                                2.0 * n_out * (double)n_in * nt, s, copy_bw, peak);
            }
            /* INT8: each tensor-core kernel forced over the range where
             * the automatic choice switches (x16 given: no conversion). */
            if (fmt == KERN_CUDA_W_INT8 && (si == 0 || si == 2)) {
                const int ktoks[] = {8, 16, 32, 64, 128, 256, 512};
                const int kerns[] = {KERN_CUDA_W8A16_GEMV, KERN_CUDA_W8A16_SKINNY,
                                     KERN_CUDA_W8A16_TILED64, KERN_CUDA_W8A16_TILED128};
                for (size_t ki = 0; ki < ARRAY_LEN(kerns); ki++)
                    for (size_t ti = 0; ti < ARRAY_LEN(ktoks); ti++) {
                        int nt = ktoks[ti];
                        if (kerns[ki] == KERN_CUDA_W8A16_GEMV && nt > 8)
                            continue;
                        mm_perf m = {&w, d_x, d_x16, d_y, d_ws, ws_bytes, nt, kerns[ki]};
                        double s = cuda_test_time(mm_perf_call, &m, "kern_cuda_w8a16");
                        double bytes = wbytes + (double)nt * n_in * 2 + (double)nt * n_out * 4;
                        char name[32], shape[64];
                        snprintf(name, sizeof name, "w8a16_%s", kernel_name(kerns[ki]));
                        snprintf(shape, sizeof shape, "%dx%d,n_tok=%d", n_out, n_in, nt);
                        perf_line_flops(name, shape, bytes, 2.0 * n_out * (double)n_in * nt, s,
                                        copy_bw, peak);
                    }
            }
            dev_free(w.data);
            dev_free(w.scales);
        }
    dev_free(d_x), dev_free(d_y), dev_free(d_ws), dev_free(d_x16);
    kern_cuda_matmul_ctx_free(g_mm);
    g_mm = NULL;
}
