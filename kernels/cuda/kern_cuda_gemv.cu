// kern_cuda_gemv.cu - the decode GEMV on tensor cores (F16 and INT8 weights,
// 1-16 tokens, f32 activations rounded in the kernel): kernel, launcher, C
// entry. The contract is in kern_cuda_gemv.cuh.
#include <cuda_fp16.h>

#include "kernels/cuda/kern_cuda_common.cuh"
#include "kernels/cuda/kern_cuda_gemv.cuh"
#include "kernels/cuda/kern_cuda_w8_util.cuh"

// ---- layout -------------------------------------------------------------------
// A decode step is bound by the bytes in flight, not by arithmetic: every
// weight byte is used once per token. So the kernel is shaped around loads.
//   A warp owns a tile of 16 weight rows and walks K in chunks: per chunk
// lane (g, t) (g = lane / 4, t = lane % 4) loads 16 bytes of row g and 16
// of row g + 8 - 8 f16 (a 32-wide chunk) or 16 int8 (a 64-wide chunk) at k
// offset t * 8 or t * 16 - so the warp reads 16 rows x 64 bytes a chunk.
// GV_U chunks make a round, loaded before any is used: 8 loads of 16 bytes
// a lane, 4 KiB a warp in flight.
//   The products run on mma.sync.m16n8k16 (f16 x f16 -> f32) with the
// weights as B (8 rows a column block, two per tile) and the tokens as A
// (rows g and g + 8 are tokens g and g + 8; absent tokens are zero). The
// 16 k slots of one MMA may hold any 16 of the chunk's k as long as A and B
// agree: lane t's slots {2t, 2t+1, 2t+8, 2t+9} hold the 4 consecutive k
// 4s .. 4s+3 of its own 16-byte piece in step s, so every lane feeds the
// MMA from its own load with no shuffles.
//   A block is GV_WARPS warps: kw of them split one tile's rounds (round r
// to warp r % kw), 8 / kw tiles a block; kw grows until there are about 32
// warps an SM or every warp has one round, so matrices of a few thousand
// rows still put loads in flight on every SM. The kw partial sums of a
// row meet in shared memory and are added in slot order.
//   The activations (a few KiB a token) are read as f32 through L1 by the
// lanes whose token exists and rounded to f16 pairs there; there is no
// separate conversion pass. Weights are read with ld.global.cs
// (evict-first: used once, they should not push the next layer's out of L2).
#define GV_WARPS 8
#define GV_THREADS (GV_WARPS * KERN_CUDA_WARP)
#define GV_ROWS 16 // weight rows of a warp tile
#define GV_U 4     // chunks a round

template <bool INT8> struct gv_fmt {
    static constexpr int CK = INT8 ? 64 : 32; // k a chunk
    static constexpr int TK = INT8 ? 16 : 8;  // k a lane loads a chunk (16 bytes)
    static constexpr int ES = INT8 ? 1 : 2;   // bytes a weight
};

// Word k (a constant after unrolling) of a 16-byte load.
static __device__ __forceinline__ uint32_t gv_word(const int4 &v, int k) {
    return (uint32_t)(k == 0 ? v.x : k == 1 ? v.y : k == 2 ? v.z : v.w);
}

// TK f32 of a token at p as TK / 2 f16 pairs (kern_cuda_matmul's rounding),
// or zeros where the token is absent or the chunk ends before this lane.
template <int TK>
static __device__ __forceinline__ void gv_load_x(uint32_t (&h)[TK / 2], const float *p, bool ok) {
    if (ok) {
#pragma unroll
        for (int i = 0; i < TK / 4; i++) {
            const float4 v = __ldg(reinterpret_cast<const float4 *>(p) + i);
            h[2 * i] = kern_f32x2_to_f16x2_sat(v.x, v.y);
            h[2 * i + 1] = kern_f32x2_to_f16x2_sat(v.z, v.w);
        }
    } else {
#pragma unroll
        for (int i = 0; i < TK / 2; i++)
            h[i] = 0u;
    }
}

// d += A B for one m16n8k16 step: A rows g / g + 8 in a0, a2 / a1, a3 (k
// slots 2t, 2t+1 / 2t+8, 2t+9), B column g in b0 / b1 (the same slots); d
// is (row g, columns 2t, 2t+1), (row g + 8, columns 2t, 2t+1).
static __device__ __forceinline__ void gv_mma(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                              uint32_t a3, uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
                 "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
#else
    // Never reached: kern_cuda_gemv_fits refuses devices below sm_80, the
    // first with this MMA shape; the build still compiles this file for sm_75.
    (void)d, (void)a0, (void)a1, (void)a2, (void)a3, (void)b0, (void)b1;
    __trap();
#endif
}

// ---- kernel -------------------------------------------------------------------
// q: the weight's values (F16 halves or int8), s: INT8 scales (else NULL).
template <bool INT8>
static __global__ __launch_bounds__(GV_THREADS) void gemv_kernel(float *__restrict__ y, size_t ldy,
                                                                 const uint8_t *__restrict__ q,
                                                                 const uint16_t *__restrict__ s,
                                                                 const float *__restrict__ x,
                                                                 int n_out, int n_in, int n_tok,
                                                                 int kw) {
    typedef gv_fmt<INT8> F;
    __shared__ float red[GV_WARPS][KERN_CUDA_GEMV_MAX_TOK][GV_ROWS]; // [warp][token][row]
    const int lane = threadIdx.x % KERN_CUDA_WARP, warp = threadIdx.x / KERN_CUDA_WARP;
    const int g = lane >> 2, t = lane & 3;
    const int tiles = GV_WARPS / kw; // tiles a block (block-uniform)
    const int tile = blockIdx.x * tiles + warp / kw, kslot = warp % kw;
    const int row0 = tile * GV_ROWS;

    // Rows g and g + 8 of the tile; past n_out (the last tile, or a tile
    // past the end in the last block) they read the last row and are never
    // stored, so the loop has no bounds tests but the chunk's.
    const size_t row_bytes = (size_t)n_in * F::ES;
    const uint8_t *w0 = q + (size_t)min(row0 + g, n_out - 1) * row_bytes;
    const uint8_t *w1 = q + (size_t)min(row0 + 8 + g, n_out - 1) * row_bytes;
    const uint16_t *s0 = NULL, *s1 = NULL;
    if (INT8) {
        s0 = s + (size_t)min(row0 + g, n_out - 1) * (size_t)(n_in / 32);
        s1 = s + (size_t)min(row0 + 8 + g, n_out - 1) * (size_t)(n_in / 32);
    }
    const bool has_a = g < n_tok, has_b = g + 8 < n_tok;
    const float *xa = x + (size_t)min(g, n_tok - 1) * (size_t)n_in;
    const float *xb = x + (size_t)min(g + 8, n_tok - 1) * (size_t)n_in;

    float acc[2][4];
#pragma unroll
    for (int j = 0; j < 2; j++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            acc[j][e] = 0.0f;

    const int n_chunks = (n_in + F::CK - 1) / F::CK;
    const int n_rounds = (n_chunks + GV_U - 1) / GV_U;
    for (int r = kslot; r < n_rounds; r += kw) {
        // Every load of the round first: 2 GV_U weight pieces (and for INT8
        // their scales) in flight before the first product.
        int4 wv[GV_U][2];
        uint32_t sc[GV_U][2];
#pragma unroll
        for (int u = 0; u < GV_U; u++) {
            const int k = (r * GV_U + u) * F::CK + t * F::TK;
            if (k < n_in) {
                wv[u][0] = __ldcs(reinterpret_cast<const int4 *>(w0 + (size_t)k * F::ES));
                wv[u][1] = __ldcs(reinterpret_cast<const int4 *>(w1 + (size_t)k * F::ES));
                if (INT8) {
                    const uint32_t a = __ldg(s0 + k / 32), b = __ldg(s1 + k / 32);
                    sc[u][0] = a | (a << 16);
                    sc[u][1] = b | (b << 16);
                }
            } else { // past the row's end: zero weights meet zero activations
                wv[u][0] = wv[u][1] = make_int4(0, 0, 0, 0);
                sc[u][0] = sc[u][1] = 0u;
            }
        }
#pragma unroll
        for (int u = 0; u < GV_U; u++) {
            const int kc = (r * GV_U + u) * F::CK;
            if (kc >= n_in) // warp-uniform: the round ends early (last round only)
                continue;
            const int k = kc + t * F::TK;
            uint32_t xa2[F::TK / 2], xb2[F::TK / 2];
            gv_load_x<F::TK>(xa2, xa + k, has_a && k < n_in);
            gv_load_x<F::TK>(xb2, xb + k, has_b && k < n_in);
#pragma unroll
            for (int st = 0; st < F::TK / 4; st++) { // MMA steps: 2 (F16) or 4 (INT8)
#pragma unroll
                for (int j = 0; j < 2; j++) {
                    uint32_t b0, b1;
                    if (INT8) {
                        kern_w8_dequant4(gv_word(wv[u][j], st), sc[u][j], &b0, &b1);
                    } else {
                        b0 = gv_word(wv[u][j], 2 * st);
                        b1 = gv_word(wv[u][j], 2 * st + 1);
                    }
                    gv_mma(acc[j], xa2[2 * st], xb2[2 * st], xa2[2 * st + 1], xb2[2 * st + 1], b0,
                           b1);
                }
            }
        }
    }

    // acc[j][e]: token g + 8 (e / 2), row row0 + 8 j + 2 t + e % 2.
    if (kw == 1) { // block-uniform: one warp a tile, no partials to add
#pragma unroll
        for (int j = 0; j < 2; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int tok = g + 8 * (e >> 1), row = row0 + 8 * j + 2 * t + (e & 1);
                if (tok < n_tok && row < n_out)
                    y[(size_t)tok * ldy + (size_t)row] = acc[j][e];
            }
        return;
    }
#pragma unroll
    for (int j = 0; j < 2; j++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            red[warp][g + 8 * (e >> 1)][8 * j + 2 * t + (e & 1)] = acc[j][e];
    __syncthreads();
    for (int i = threadIdx.x; i < tiles * KERN_CUDA_GEMV_MAX_TOK * GV_ROWS; i += blockDim.x) {
        const int tl = i / (KERN_CUDA_GEMV_MAX_TOK * GV_ROWS);
        const int tok = i / GV_ROWS % KERN_CUDA_GEMV_MAX_TOK, rr = i % GV_ROWS;
        const int row = (blockIdx.x * tiles + tl) * GV_ROWS + rr;
        if (tok < n_tok && row < n_out) {
            float sum = 0.0f;
            for (int k = 0; k < kw; k++)
                sum += red[tl * kw + k][tok][rr];
            y[(size_t)tok * ldy + (size_t)row] = sum;
        }
    }
}

// ---- launcher -----------------------------------------------------------------

// Warps splitting a tile's K: doubled while the grid has fewer than ~32
// warps an SM (loads in flight on every SM) and every warp keeps a round.
static int gv_split(int n_tiles, int n_rounds, int n_sm) {
    const long long want = (long long)(n_sm > 0 ? n_sm : 1) * 32;
    int kw = 1;
    while (kw < GV_WARPS && 2 * kw <= n_rounds && (long long)n_tiles * kw < want)
        kw *= 2;
    return kw;
}

// n_tiles and n_rounds of a weight (16-row tiles; rounds of GV_U chunks).
static void gv_shape(const kern_cuda_weight *w, int *n_tiles, int *n_rounds) {
    const int ck = w->fmt == KERN_CUDA_W_INT8 ? gv_fmt<true>::CK : gv_fmt<false>::CK;
    *n_tiles = (w->n_out + GV_ROWS - 1) / GV_ROWS;
    *n_rounds = ((w->n_in + ck - 1) / ck + GV_U - 1) / GV_U;
}

template <bool INT8>
static int gemv_launch(float *y, size_t ldy, const kern_cuda_weight *w, const float *x, int n_tok,
                       int kw, cudaStream_t stream) {
    int n_tiles, n_rounds;
    gv_shape(w, &n_tiles, &n_rounds);
    const int tiles = GV_WARPS / kw;
    const unsigned grid = (unsigned)((n_tiles + tiles - 1) / tiles);
    gemv_kernel<INT8><<<grid, GV_THREADS, 0, stream>>>(
        y, ldy, (const uint8_t *)w->data, INT8 ? w->scales : NULL, x, w->n_out, w->n_in, n_tok, kw);
    return KERN_CUDA_LAUNCH_CHECK("gemv_kernel");
}

// ---- entries ------------------------------------------------------------------

extern "C" int kern_cuda_gemv_fits(const kern_cuda_weight *w, const float *x, int n_tok,
                                   int cc_major) {
    if (!w || !x || !w->data || cc_major < 8 || n_tok < 1 || n_tok > KERN_CUDA_GEMV_MAX_TOK ||
        w->n_out <= 0 || w->n_in <= 0 || !kern_cuda_aligned(w->data, 16) ||
        !kern_cuda_aligned(x, 16))
        return 0;
    if (w->fmt == KERN_CUDA_W_F16)
        return w->n_in % 8 == 0;
    if (w->fmt == KERN_CUDA_W_INT8)
        return w->n_in % 32 == 0 && w->scales && kern_cuda_aligned(w->scales, 2);
    return 0;
}

extern "C" int kern_cuda_gemv_ex(float *y, size_t ldy, const kern_cuda_weight *w, const float *x,
                                 int n_tok, int n_sm, int cc_major, int kw, cudaStream_t stream) {
    if (!kern_cuda_gemv_fits(w, x, n_tok, cc_major) || !y || !kern_cuda_aligned(y, 4) ||
        ldy < (size_t)w->n_out || (kw != 0 && kw != 1 && kw != 2 && kw != 4 && kw != 8))
        return BRISK_EINVAL;
    if (kw == 0) {
        int n_tiles, n_rounds;
        gv_shape(w, &n_tiles, &n_rounds);
        kw = gv_split(n_tiles, n_rounds, n_sm);
    }
    if (w->fmt == KERN_CUDA_W_INT8)
        return gemv_launch<true>(y, ldy, w, x, n_tok, kw, stream);
    return gemv_launch<false>(y, ldy, w, x, n_tok, kw, stream);
}

extern "C" int kern_cuda_gemv(float *y, size_t ldy, const kern_cuda_weight *w, const float *x,
                              int n_tok, int n_sm, int cc_major, cudaStream_t stream) {
    return kern_cuda_gemv_ex(y, ldy, w, x, n_tok, n_sm, cc_major, 0, stream);
}

extern "C" void kern_cuda_gemv_plan(const kern_cuda_weight *w, int n_sm, int *kw, int *blocks,
                                    int *per_sm) {
    int n_tiles, n_rounds;
    gv_shape(w, &n_tiles, &n_rounds);
    *kw = gv_split(n_tiles, n_rounds, n_sm);
    const int tiles = GV_WARPS / *kw;
    *blocks = (n_tiles + tiles - 1) / tiles;
    *per_sm = 0;
    int b = 0;
    cudaError_t e =
        w->fmt == KERN_CUDA_W_INT8
            ? cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, gemv_kernel<true>, GV_THREADS, 0)
            : cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, gemv_kernel<false>, GV_THREADS, 0);
    if (e == cudaSuccess)
        *per_sm = b;
    else
        cudaGetLastError();
}
