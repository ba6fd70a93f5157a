/* perf_matmul.c - `test_cuda_ops perf` for the weight matmuls (perf_matmul):
 *
 *   1. cuBLAS's f16 peak on 8192^3 (the "matmul peak" every line compares
 *      with);
 *   2. decode, old against new: llama-3-8b's weight shapes - q/o, k/v, the
 *      fused QKV (6144 rows), gate/up, the fused gate|up (28672), down, the
 *      head - at 1, 8 and 16 tokens in F16 and INT8, the legacy path (the
 *      f16 conversion pass + cuBLAS, or the W8A16 kernels) beside the
 *      tensor-core GEMV: us, GB/s and % of the read-only roofline each, with
 *      the GEMV's split of K at one token (the chosen kw, the blocks, the
 *      kernel's occupancy, and the time at each kw from 1 to 8), then
 *      one layer and one token of llama-3-8b added up both ways (7 separate
 *      matmuls against QKV | o | gate_up | down) beside the roofline's time;
 *   3. large batches: every shape at 16 to 512 tokens in F16 (cuBLAS), INT8
 *      on the W8A16 kernels and INT8 dequantised into cuBLAS, to place
 *      KERN_CUDA_W8A16_DEQUANT_MIN_TOK;
 *   4. the automatic choice (kern_cuda_matmul) at 1 to 4096 tokens, and the
 *      W8A16 tensor-core kernels forced at 8 to 512 tokens on 4096 x 4096.
 * bytes = weights + x read + y written, the least any implementation moves.
 * Every timed call reads its weight from DRAM as a decode step does: the
 * weight is copied until the copies fill 256 MiB (several times any L2)
 * and the calls rotate through them (the runs before 2026-11-27 timed one
 * copy, which a 60 MB L2 partly held: the head showed 105% of the copy
 * bandwidth). */
#include <cublas_v2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/brisk_error.h"
#include "kernels/cpu/kern_types.h"
#include "kernels/cuda/kern_cuda_buf.h"
#include "kernels/cuda/kern_cuda_gemv.cuh"
#include "kernels/cuda/kern_cuda_matmul.cuh"
#include "kernels/cuda/kern_cuda_w8a16.cuh"
#include "tests/cuda/cuda_test.h"

#define ROTATE_BYTES ((size_t)256 << 20)
#define MAX_COPIES 16

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

/* ---- weights in DRAM ------------------------------------------------------------------- */

/* Copies of one random weight (made on the device: a host-side upload of
 * the 128256-row head would take seconds) filling ROTATE_BYTES. */
typedef struct {
    kern_cuda_weight w[MAX_COPIES];
    int n;
} perf_weights;

static perf_weights perf_weights_make(kern_cuda_wfmt fmt, int n_out, int n_in) {
    perf_weights p;
    memset(&p, 0, sizeof p);
    size_t n = (size_t)n_out * n_in, bytes = kern_cuda_weight_bytes(fmt, n_out, n_in);
    p.n = (int)((ROTATE_BYTES + bytes - 1) / bytes);
    p.n = p.n < 1 ? 1 : p.n > MAX_COPIES ? MAX_COPIES : p.n;
    for (int i = 0; i < p.n; i++) {
        kern_cuda_weight *w = &p.w[i];
        *w = (kern_cuda_weight){fmt, n_out, n_in, NULL, NULL};
        w->data = dev_alloc(fmt == KERN_CUDA_W_F16 ? n * 2 : n);
        if (fmt == KERN_CUDA_W_INT8)
            w->scales = dev_alloc(n / KERN_QK * 2);
        if (i == 0) {
            dev_pattern(w->data, fmt == KERN_CUDA_W_F16 ? n * 2 : n,
                        fmt == KERN_CUDA_W_F16 ? PAT_F16 : PAT_I8);
            if (w->scales)
                dev_pattern(w->scales, n / KERN_QK * 2, PAT_SCALE);
        } else {
            must(kern_cuda_copy(w->data, p.w[0].data, fmt == KERN_CUDA_W_F16 ? n * 2 : n, g_stream),
                 "kern_cuda_copy");
            if (w->scales)
                must(kern_cuda_copy(w->scales, p.w[0].scales, n / KERN_QK * 2, g_stream),
                     "kern_cuda_copy");
        }
    }
    must(kern_cuda_sync(g_stream), "kern_cuda_sync");
    return p;
}

static void perf_weights_free(perf_weights *p) {
    for (int i = 0; i < p->n; i++) {
        dev_free(p->w[i].data);
        dev_free(p->w[i].scales);
    }
    p->n = 0;
}

/* ---- one timed matmul --------------------------------------------------------------- */

static kern_cuda_matmul_ctx *g_pmm;
static double g_peak_flops;

typedef struct {
    const perf_weights *pw;
    int next; /* the copy the next call reads */
    const float *x;
    const uint16_t *x16;
    float *y;
    void *ws;
    size_t ws_bytes;
    int n_tok;
    int path;   /* kern_cuda_mm_path, or -1: kern_cuda_w8a16 with kernel */
    int kernel; /* kern_cuda_w8a16_kernel */
} mm_perf;

static int mm_perf_call(void *p) {
    mm_perf *m = p;
    const kern_cuda_weight *w = &m->pw->w[m->next];
    m->next = (m->next + 1) % m->pw->n;
    if (m->path >= 0)
        return kern_cuda_matmul_ex(g_pmm, w, m->x, m->n_tok, m->y, (size_t)w->n_out, m->ws,
                                   m->ws_bytes, (kern_cuda_mm_path)m->path);
    return kern_cuda_w8a16(m->y, (size_t)w->n_out, w->data, w->scales, m->x16, w->n_out, w->n_in,
                           m->n_tok, (kern_cuda_w8a16_kernel)m->kernel, 0, g_stream);
}

/* Seconds per call. */
static double mm_time(mm_perf *m) {
    return cuda_test_time(mm_perf_call, m, "kern_cuda_matmul_ex");
}

/* The bytes a call must move at least (x as f32 or, given x16, f16). */
static double mm_bytes(const kern_cuda_weight *w, int n_tok, int x_bytes) {
    return (double)kern_cuda_weight_bytes(w->fmt, w->n_out, w->n_in) +
           (double)n_tok * w->n_in * x_bytes + (double)n_tok * w->n_out * 4;
}

/* ---- buffers shared by every section ---------------------------------------------- */

typedef struct {
    float *x, *y;
    uint16_t *x16;
    void *ws;
    size_t ws_bytes;
} perf_bufs;

/* llama-3-8b: q/o, k/v, QKV fused, gate/up, gate|up fused, down, head. */
static const int k_shapes[][2] = {{4096, 4096},  {1024, 4096},  {6144, 4096},  {14336, 4096},
                                  {28672, 4096}, {4096, 14336}, {128256, 4096}};
enum { S_QO, S_KV, S_QKV, S_GU1, S_GU2, S_DOWN, S_HEAD, N_SHAPES };

/* ---- 2. decode: legacy against the tensor-core GEMV -------------------------------- */

/* kern_cuda_gemv_ex at one token with the split of K forced. */
typedef struct {
    const perf_weights *pw;
    int next;
    const float *x;
    float *y;
    int kw, n_sm;
} gemv_split_ctx;

static int gemv_split_call(void *p) {
    gemv_split_ctx *c = p;
    const kern_cuda_weight *w = &c->pw->w[c->next];
    c->next = (c->next + 1) % c->pw->n;
    return kern_cuda_gemv_ex(c->y, (size_t)w->n_out, w, c->x, 1, c->n_sm, g_cc_major, c->kw,
                             g_stream);
}

static void perf_decode(const perf_bufs *b) {
    const int toks[] = {1, 8, 16};
    double t_old[2][N_SHAPES] = {{0}}, t_new[2][N_SHAPES] = {{0}}; /* n_tok = 1 */
    double wbytes[2][N_SHAPES] = {{0}};
    printf("decode GEMV, old (legacy path) vs new (tensor-core GEMV), weights read from DRAM; "
           "%% of the read-only roofline %.0f GB/s:\n",
           g_read_bw * 1e-9);
    for (int fmt = 0; fmt < 2; fmt++)
        for (int si = 0; si < N_SHAPES; si++) {
            perf_weights pw =
                perf_weights_make((kern_cuda_wfmt)fmt, k_shapes[si][0], k_shapes[si][1]);
            wbytes[fmt][si] =
                (double)kern_cuda_weight_bytes(pw.w[0].fmt, k_shapes[si][0], k_shapes[si][1]);
            for (size_t ti = 0; ti < ARRAY_LEN(toks); ti++) {
                int nt = toks[ti];
                mm_perf old = {
                    &pw, 0, b->x, b->x16, b->y, b->ws, b->ws_bytes, nt, KERN_CUDA_MM_LEGACY, 0};
                mm_perf neu = old;
                neu.path = KERN_CUDA_MM_GEMV;
                double so = mm_time(&old);
                int fits = kern_cuda_gemv_fits(&pw.w[0], b->x, nt, g_cc_major);
                double sn = fits ? mm_time(&neu) : 0.0;
                double by = mm_bytes(&pw.w[0], nt, 4);
                printf("  gemv_%-4s %6dx%-6d n=%-2d old %8.2f us %7.1f GB/s %5.1f%% of read",
                       fmt ? "int8" : "f16", k_shapes[si][0], k_shapes[si][1], nt, so * 1e6,
                       by / so * 1e-9, 100.0 * by / so / g_read_bw);
                if (fits)
                    printf(" | new %8.2f us %7.1f GB/s %5.1f%% of read | %.2fx\n", sn * 1e6,
                           by / sn * 1e-9, 100.0 * by / sn / g_read_bw, so / sn);
                else
                    printf(" | new: not on this device (sm_80+)\n");
                if (nt == 1) {
                    t_old[fmt][si] = so;
                    t_new[fmt][si] = fits ? sn : so;
                }
            }
            /* The split of K: the choice, the kernel's occupancy, and each
             * split timed at one token (the data gv_split is tuned from). */
            if (kern_cuda_gemv_fits(&pw.w[0], b->x, 1, g_cc_major)) {
                int kw = 0, blocks = 0, per_sm = 0, dev = 0, n_sm = 0;
                cuda_must(cudaGetDevice(&dev), "cudaGetDevice");
                cuda_must(cudaDeviceGetAttribute(&n_sm, cudaDevAttrMultiProcessorCount, dev),
                          "attribute");
                kern_cuda_gemv_plan(&pw.w[0], n_sm, &kw, &blocks, &per_sm);
                printf("    split: kw=%d (chosen), %d blocks, %d resident a SM x %d SMs;", kw,
                       blocks, per_sm, n_sm);
                for (int k = 1; k <= 8; k *= 2) {
                    gemv_split_ctx c = {&pw, 0, b->x, b->y, k, n_sm};
                    double s = cuda_test_time(gemv_split_call, &c, "kern_cuda_gemv_ex");
                    printf(" kw=%d %.2f us", k, s * 1e6);
                }
                printf("\n");
            }
            perf_weights_free(&pw);
        }
    /* One llama-3-8b token at batch 1 as the matmuls alone make it: 32
     * layers of q, k, v, o, gate, up, down (old) or QKV, o, gate|up, down
     * (new), then the head. */
    for (int fmt = 0; fmt < 2; fmt++) {
        double lo = 2 * t_old[fmt][S_QO] + 2 * t_old[fmt][S_KV] + 2 * t_old[fmt][S_GU1] +
                    t_old[fmt][S_DOWN];
        double ln = t_new[fmt][S_QKV] + t_new[fmt][S_QO] + t_new[fmt][S_GU2] + t_new[fmt][S_DOWN];
        double roof_layer =
            (wbytes[fmt][S_QKV] + wbytes[fmt][S_QO] + wbytes[fmt][S_GU2] + wbytes[fmt][S_DOWN]) /
            g_read_bw;
        double roof_tok = (32 * roof_layer + wbytes[fmt][S_HEAD] / g_read_bw);
        double to = 32 * lo + t_old[fmt][S_HEAD], tn = 32 * ln + t_new[fmt][S_HEAD];
        printf("decode_estimate %s n=1: layer old %.1f us (7 matmuls) new %.1f us (4, fused) "
               "roofline %.1f us; token (32 layers + head) old %.3f ms new %.3f ms roofline %.3f "
               "ms = %.1f%% / %.1f%% of the read roofline (matmuls only)\n",
               fmt ? "int8" : "f16", lo * 1e6, ln * 1e6, roof_layer * 1e6, to * 1e3, tn * 1e3,
               roof_tok * 1e3, 100.0 * roof_tok / to, 100.0 * roof_tok / tn);
    }
}

/* ---- 3. large batches: f16 vs int8 legacy vs int8 dequantised -------------------- */

static void perf_prefill(const perf_bufs *b) {
    const int toks[] = {16, 32, 64, 128, 256, 512};
    printf("large batches: f16 (cuBLAS) | int8 W8A16 kernels (legacy) | int8 dequantised + "
           "cuBLAS; int8 / f16 time ratios (dequant from %d tokens today):\n",
           KERN_CUDA_W8A16_DEQUANT_MIN_TOK);
    for (int si = 0; si < N_SHAPES; si++) {
        perf_weights p16 = perf_weights_make(KERN_CUDA_W_F16, k_shapes[si][0], k_shapes[si][1]);
        perf_weights p8 = perf_weights_make(KERN_CUDA_W_INT8, k_shapes[si][0], k_shapes[si][1]);
        for (size_t ti = 0; ti < ARRAY_LEN(toks); ti++) {
            int nt = toks[ti];
            mm_perf f = {&p16, 0, b->x, b->x16, b->y, b->ws, b->ws_bytes, nt, KERN_CUDA_MM_LEGACY,
                         0};
            mm_perf l = {&p8, 0, b->x, b->x16, b->y, b->ws, b->ws_bytes, nt, KERN_CUDA_MM_LEGACY,
                         0};
            mm_perf d = l;
            d.path = KERN_CUDA_MM_DEQUANT;
            double sf = mm_time(&f), sl = mm_time(&l), sd = mm_time(&d);
            double fl = 2.0 * k_shapes[si][0] * (double)k_shapes[si][1] * nt;
            printf("  prefill %6dx%-6d n=%-3d f16 %8.2f us %6.1f TFLOP/s | int8 legacy %8.2f us "
                   "%6.1f TFLOP/s %5.2fx | int8 dequant %8.2f us %6.1f TFLOP/s %5.2fx\n",
                   k_shapes[si][0], k_shapes[si][1], nt, sf * 1e6, fl / sf * 1e-12, sl * 1e6,
                   fl / sl * 1e-12, sl / sf, sd * 1e6, fl / sd * 1e-12, sd / sf);
        }
        perf_weights_free(&p16);
        perf_weights_free(&p8);
    }
}

/* ---- 4. the automatic choice, and the W8A16 tensor-core kernels ------------------- */

static void perf_auto(const perf_bufs *b, double copy_bw) {
    const int toks[] = {1, 8, 64, 512, 4096};
    const int shapes[] = {S_QO, S_KV, S_GU1, S_DOWN, S_HEAD};
    for (int fmt = 0; fmt < 2; fmt++)
        for (size_t k = 0; k < ARRAY_LEN(shapes); k++) {
            int si = shapes[k], n_out = k_shapes[si][0], n_in = k_shapes[si][1];
            perf_weights pw = perf_weights_make((kern_cuda_wfmt)fmt, n_out, n_in);
            for (size_t ti = 0; ti < ARRAY_LEN(toks); ti++) {
                int nt = toks[ti];
                mm_perf m = {&pw, 0, b->x, b->x16, b->y, b->ws, b->ws_bytes, nt, KERN_CUDA_MM_AUTO,
                             0};
                double s = mm_time(&m);
                char shape[64];
                snprintf(shape, sizeof shape, "%dx%d,n_tok=%d", n_out, n_in, nt);
                perf_line_flops(fmt ? "matmul_int8" : "matmul_f16", shape,
                                mm_bytes(&pw.w[0], nt, 4), 2.0 * n_out * (double)n_in * nt, s,
                                copy_bw, g_peak_flops);
            }
            /* INT8: each tensor-core kernel forced over the range where the
             * automatic choice switches (x16 given: no conversion). */
            if (fmt == KERN_CUDA_W_INT8 && si == S_QO) {
                const int ktoks[] = {8, 16, 32, 64, 128, 256, 512};
                const int kerns[] = {KERN_CUDA_W8A16_GEMV, KERN_CUDA_W8A16_SKINNY,
                                     KERN_CUDA_W8A16_TILED64, KERN_CUDA_W8A16_TILED128};
                const char *names[] = {"w8a16_gemv", "w8a16_skinny", "w8a16_tiled64",
                                       "w8a16_tiled128"};
                for (size_t ki = 0; ki < ARRAY_LEN(kerns); ki++)
                    for (size_t ti = 0; ti < ARRAY_LEN(ktoks); ti++) {
                        int nt = ktoks[ti];
                        if (kerns[ki] == KERN_CUDA_W8A16_GEMV && nt > 8)
                            continue;
                        mm_perf m = {&pw,   0,           b->x, b->x16, b->y,
                                     b->ws, b->ws_bytes, nt,   -1,     kerns[ki]};
                        double s = cuda_test_time(mm_perf_call, &m, "kern_cuda_w8a16");
                        char shape[64];
                        snprintf(shape, sizeof shape, "%dx%d,n_tok=%d", n_out, n_in, nt);
                        perf_line_flops(names[ki], shape, mm_bytes(&pw.w[0], nt, 2),
                                        2.0 * n_out * (double)n_in * nt, s, copy_bw, g_peak_flops);
                    }
            }
            perf_weights_free(&pw);
        }
}

void perf_matmul(double copy_bw) {
    if (!selected("matmul_gemv") && !selected("matmul_prefill") && !selected("matmul_auto"))
        return;
    g_peak_flops = matmul_peak();
    must(kern_cuda_matmul_ctx_create(&g_pmm, g_stream), "kern_cuda_matmul_ctx_create");
    must(kern_cuda_matmul_ctx_dequant_ws(g_pmm, KERN_CUDA_MM_DEQUANT_WS_BYTES),
         "kern_cuda_matmul_ctx_dequant_ws");
    const int max_tok = 4096, max_in = 14336, max_out = 128256;
    perf_bufs b;
    b.x = dev_random((size_t)max_tok * max_in, 1.0f);
    b.y = dev_alloc((size_t)max_tok * max_out * sizeof(float));
    b.ws_bytes = kern_cuda_matmul_ws_bytes(max_in, max_tok);
    b.ws = dev_alloc(b.ws_bytes);
    b.x16 = dev_alloc((size_t)512 * max_in * 2);
    dev_pattern(b.x16, (size_t)512 * max_in * 2, PAT_F16);

    if (selected("matmul_gemv"))
        perf_decode(&b);
    if (selected("matmul_prefill"))
        perf_prefill(&b);
    if (selected("matmul_auto"))
        perf_auto(&b, copy_bw);

    dev_free(b.x), dev_free(b.y), dev_free(b.ws), dev_free(b.x16);
    kern_cuda_matmul_ctx_free(g_pmm);
    g_pmm = NULL;
}
