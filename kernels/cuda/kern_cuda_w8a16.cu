// kern_cuda_w8a16.cu - INT8 weight-only matmul (W8A16): a GEMV-like kernel for
// a few tokens, two tensor-core (WMMA) kernels for more, the dequantising
// pass that feeds cuBLAS at large batches, launchers, C entries.
#include <cuda_fp16.h>
#include <limits.h>
#include <mma.h>

#include "kernels/cuda/kern_cuda_common.cuh"
#include "kernels/cuda/kern_cuda_w8_util.cuh"
#include "kernels/cuda/kern_cuda_w8a16.cuh"

using namespace nvcuda;

#define W8_QK 32  // weights per scale (the Q8_0 block) and the K step of the TC kernels
#define W8_LDS 40 // f16 row stride of the shared tiles: 32 + 8, see w8_mma_kblock
#define W8_FULL 0xffffffffu

typedef wmma::fragment<wmma::accumulator, 16, 16, 16, float> w8_acc;

// ---- helpers ------------------------------------------------------------------

static __device__ __forceinline__ float w8_h2f(uint16_t bits) {
    return __half2float(__ushort_as_half(bits));
}

// The four int8 of a word as exact floats without I2F (quarter rate): the
// xor makes each byte b + 128 (0..255), PRMT puts it under the exponent of
// 2^23 (0x4B0000xx = 2^23 + b + 128 as a float), and one FADD removes the
// 2^23 + 128. Every step is exact.
static __device__ __forceinline__ void w8_unpack4(uint32_t u, float *f) {
    u ^= 0x80808080u;
#pragma unroll
    for (int k = 0; k < 4; k++)
        f[k] = __uint_as_float(__byte_perm(u, 0x4bu, 0x4550u | (unsigned)k)) - 8388736.0f;
}

static __device__ __forceinline__ void w8_unpack16(const int4 &w, float *f) {
    w8_unpack4((uint32_t)w.x, f);
    w8_unpack4((uint32_t)w.y, f + 4);
    w8_unpack4((uint32_t)w.z, f + 8);
    w8_unpack4((uint32_t)w.w, f + 12);
}

// Word k (a constant after unrolling) of a 16-byte load.
static __device__ __forceinline__ uint32_t w8_word(const int4 &v, int k) {
    return (uint32_t)(k == 0 ? v.x : k == 1 ? v.y : k == 2 ? v.z : v.w);
}

// Eight f16 (one 16-byte load) as floats.
static __device__ __forceinline__ void w8_h8_to_f32(const int4 &v, float *f) {
    const uint32_t u[4] = {(uint32_t)v.x, (uint32_t)v.y, (uint32_t)v.z, (uint32_t)v.w};
#pragma unroll
    for (int k = 0; k < 4; k++) {
        f[2 * k] = w8_h2f((uint16_t)(u[k] & 0xffffu));
        f[2 * k + 1] = w8_h2f((uint16_t)(u[k] >> 16));
    }
}

static __device__ __forceinline__ uint32_t w8_pack_h2(float lo, float hi) {
    return (uint32_t)__half_as_ushort(__float2half_rn(lo)) |
           ((uint32_t)__half_as_ushort(__float2half_rn(hi)) << 16);
}

// Sixteen weights dequantised for the tensor cores: f16(s * q), where s * q
// is exact in f32 (11 + 8 significant bits) and the one rounding is the
// conversion's, to nearest even - the CPU's kern_fp32_to_fp16(s * q) bit for
// bit, which is what the tests rely on.
static __device__ __forceinline__ void w8_dequant16(const int4 &w, float s, uint4 *out) {
    float f[16];
    w8_unpack16(w, f);
    out[0] = make_uint4(w8_pack_h2(s * f[0], s * f[1]), w8_pack_h2(s * f[2], s * f[3]),
                        w8_pack_h2(s * f[4], s * f[5]), w8_pack_h2(s * f[6], s * f[7]));
    out[1] = make_uint4(w8_pack_h2(s * f[8], s * f[9]), w8_pack_h2(s * f[10], s * f[11]),
                        w8_pack_h2(s * f[12], s * f[13]), w8_pack_h2(s * f[14], s * f[15]));
}

// Sums each of v[0, V) over the warp (V a power of two <= 32) with V - 1 +
// log2(32 / V) shuffles instead of 5 V: every step halves the values a lane
// carries, the lanes with bit O set keeping the upper half of them (a
// reduce-scatter). Afterwards lane l holds the total of v[l / (32 / V)];
// v is clobbered. Template recursion, so that every index is a constant and
// v stays in registers.
template <int N, int O> struct w8_scatter {
    static __device__ __forceinline__ void step(float *v, int lane) {
        const bool upper = (lane & O) != 0;
#pragma unroll
        for (int i = 0; i < N / 2; i++) {
            const float send = upper ? v[i] : v[i + N / 2];
            const float keep = upper ? v[i + N / 2] : v[i];
            v[i] = keep + __shfl_xor_sync(W8_FULL, send, O);
        }
        w8_scatter<N / 2, O / 2>::step(v, lane);
    }
};
template <int O> struct w8_scatter<1, O> {
    static __device__ __forceinline__ void step(float *, int) {}
};

template <int V>
static __device__ __forceinline__ float w8_warp_sum_scatter(float (&v)[V], int lane) {
    w8_scatter<V, KERN_CUDA_WARP / 2>::step(v, lane);
    float r = v[0];
#pragma unroll
    for (int o = KERN_CUDA_WARP / 2 / V; o > 0; o /= 2)
        r += __shfl_xor_sync(W8_FULL, r, o);
    return r;
}

// One 32-wide K block of a warp's FM x FN fragments: A is the warp's rows of
// dequantised weights (row-major), B its tokens' x16 (row t = token, so B is
// col-major), both with row stride W8_LDS halves (80 bytes: the 8 rows of
// 16 bytes an 8x8 fragment piece reads fall on distinct banks, and every
// fragment start stays 32-byte aligned as WMMA requires).
template <int FM, int FN>
static __device__ __forceinline__ void w8_mma_kblock(w8_acc (&acc)[FM][FN],
                                                     const uint16_t *__restrict__ a,
                                                     const uint16_t *__restrict__ b) {
#pragma unroll
    for (int ks = 0; ks < W8_QK; ks += 16) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> fa[FM];
        wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> fb[FN];
#pragma unroll
        for (int m = 0; m < FM; m++)
            wmma::load_matrix_sync(
                fa[m], reinterpret_cast<const __half *>(a + m * 16 * W8_LDS + ks), W8_LDS);
#pragma unroll
        for (int n = 0; n < FN; n++)
            wmma::load_matrix_sync(
                fb[n], reinterpret_cast<const __half *>(b + n * 16 * W8_LDS + ks), W8_LDS);
#pragma unroll
        for (int m = 0; m < FM; m++)
#pragma unroll
            for (int n = 0; n < FN; n++)
                wmma::mma_sync(acc[m][n], fa[m], fb[n], acc[m][n]);
    }
}

template <int FM, int FN>
static __device__ __forceinline__ void w8_acc_zero(w8_acc (&acc)[FM][FN]) {
#pragma unroll
    for (int m = 0; m < FM; m++)
#pragma unroll
        for (int n = 0; n < FN; n++)
            wmma::fill_fragment(acc[m][n], 0.0f);
}

// ---- GEMV kernel (n_tok <= 8) ----------------------------------------------------
// A block of 4 warps. A row of n_in int8 is n_in / 16 "pieces" of 16 bytes;
// lane l of a warp takes pieces l, l + 32 kw, ... (one 16-byte load each), so
// a warp's loads cover 512 contiguous bytes. The kw warps of a row group
// split a row's pieces (kw = 1, 2 or 4 by the row length: long rows get
// more warps, so a matrix of few rows still has loads in flight on every
// SM); the 4 / kw row groups take R rows each.
//   Per piece a lane converts its 16 int8 once and reuses them for every
//   token; per token it loads the 16 matching x16 (L1-resident: the
//   activations are a few KiB) and reuses them for its R rows - more tokens,
//   more rows, so the L1 traffic per weight byte stays ~2-4x, not 2 n_tok.
//   U pieces are loaded before any is used: U * R 16-byte loads in flight per
//   lane (64 bytes), enough with ~32 warps an SM to cover DRAM latency.
// Weights and scales are read with ld.global.cs (evict-first: each byte is
// used once per call, and the next layer's weights should not be evicted for
// them); x16 with ld.global.nc (cached, shared by every warp).
#define GEMV_WARPS 4
#define GEMV_THREADS (GEMV_WARPS * KERN_CUDA_WARP)

template <int NT> struct gemv_shape {
    static constexpr int R = NT == 1 ? 1 : (NT <= 4 ? 2 : 4);
    static constexpr int U = 4 / R;
    static constexpr int V = R * NT; // sums a warp finishes with, [r * NT + t]
    static constexpr int VP = V <= 1 ? 1 : V <= 2 ? 2 : V <= 4 ? 4 : V <= 8 ? 8 : V <= 16 ? 16 : 32;
};

template <int NT>
static __global__ __launch_bounds__(GEMV_THREADS) void w8a16_gemv_kernel(
    float *__restrict__ y, size_t ldy, const int8_t *__restrict__ q, const uint16_t *__restrict__ s,
    const uint16_t *__restrict__ x, int n_out, int n_in, int kw) {
    typedef gemv_shape<NT> S;
    constexpr int R = S::R, U = S::U, V = S::V, VP = S::VP;
    __shared__ float s_part[GEMV_WARPS][V];
    const int lane = threadIdx.x % KERN_CUDA_WARP, warp = threadIdx.x / KERN_CUDA_WARP;
    const int kslot = warp % kw, groups = GEMV_WARPS / kw, group = warp / kw;
    const int row0 = (blockIdx.x * groups + group) * R;
    const int n_pieces = n_in / 16;

    // Rows past n_out (the last block) compute a copy of the last row and
    // are never stored: no bounds tests in the loop.
    const int4 *wr[R];
    const uint16_t *sr[R];
#pragma unroll
    for (int r = 0; r < R; r++) {
        const size_t row = (size_t)min(row0 + r, n_out - 1);
        wr[r] = reinterpret_cast<const int4 *>(q + row * (size_t)n_in);
        sr[r] = s + row * (size_t)(n_in / W8_QK);
    }
    float acc[VP];
#pragma unroll
    for (int i = 0; i < VP; i++)
        acc[i] = 0.0f;

    const int step = kw * KERN_CUDA_WARP;
    for (int p = kslot * KERN_CUDA_WARP + lane; p < n_pieces; p += U * step) {
        int4 wv[U][R];
        float sv[U][R];
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int pu = p + u * step;
#pragma unroll
            for (int r = 0; r < R; r++) {
                if (pu < n_pieces) {
                    wv[u][r] = __ldcs(wr[r] + pu);
                    sv[u][r] = w8_h2f(__ldcs(sr[r] + pu / 2));
                } else {
                    wv[u][r] = make_int4(0, 0, 0, 0);
                    sv[u][r] = 0.0f;
                }
            }
        }
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int pu = p + u * step;
            if (pu >= n_pieces) // only in a row's last round
                break;
                // Half a piece (8 weights) at a time: half the registers for
                // the converted weights and activations.
#pragma unroll
            for (int h = 0; h < 2; h++) {
                float wf[R][8];
#pragma unroll
                for (int r = 0; r < R; r++) {
                    w8_unpack4(w8_word(wv[u][r], 2 * h), wf[r]);
                    w8_unpack4(w8_word(wv[u][r], 2 * h + 1), wf[r] + 4);
                }
#pragma unroll
                for (int t = 0; t < NT; t++) {
                    const int4 *xp = reinterpret_cast<const int4 *>(x + (size_t)t * n_in) + 2 * pu;
                    float xf[8];
                    w8_h8_to_f32(__ldg(xp + h), xf);
#pragma unroll
                    for (int r = 0; r < R; r++) {
                        float d = 0.0f;
#pragma unroll
                        for (int i = 0; i < 8; i++)
                            d = fmaf(wf[r][i], xf[i], d);
                        acc[r * NT + t] = fmaf(sv[u][r], d, acc[r * NT + t]);
                    }
                }
            }
        }
    }

    const float total = w8_warp_sum_scatter<VP>(acc, lane);
    const int idx = lane / (KERN_CUDA_WARP / VP);
    const bool leader = lane % (KERN_CUDA_WARP / VP) == 0 && idx < V;
    if (kw == 1) { // block-uniform
        if (leader && row0 + idx / NT < n_out)
            y[(size_t)(idx % NT) * ldy + (size_t)(row0 + idx / NT)] = total;
        return;
    }
    // The kw partials of a row group, summed in slot order (deterministic).
    if (leader)
        s_part[warp][idx] = total;
    __syncthreads();
    for (int i = threadIdx.x; i < groups * V; i += blockDim.x) {
        const int g = i / V, j = i % V;
        float sum = 0.0f;
        for (int k = 0; k < kw; k++)
            sum += s_part[g * kw + k][j];
        const int row = (blockIdx.x * groups + g) * R + j / NT;
        if (row < n_out)
            y[(size_t)(j % NT) * ldy + (size_t)row] = sum;
    }
}

// ---- SKINNY kernel (tens of tokens) ---------------------------------------------
// A block computes 32 rows x BN tokens (BN = 16 or 32). Each of its 8 warps
// takes a contiguous eighth of the K blocks and all 32 x BN outputs (2 x
// BN/16 fragments), with its own tiles in shared memory - the warps never
// wait for each other until the end, where their partial tiles are summed
// in warp order. Per K block a lane loads 2 x 16 weight bytes (lane pairs
// cover a row's 32: full sectors), their 2 scales and BN / 8 16-byte pieces
// of x16, converts the weights to f16 into the warp's A tile and copies x16
// to its B tile. The loads run SK_G K blocks ahead in registers, so with 8
// warps a block and one block per 32 rows some 16 KiB of weights an SM are
// in flight even at 4096 rows.
#define SK_BM 32
#define SK_WK 8
#define SK_G 2
#define SK_LDC 36 // f32 row stride of the reduction tiles (16-byte multiple)

template <int BN> struct skinny_regs {
    int4 a[2];      // row 16 j + lane / 2, bytes 16 (lane % 2) .. +16 of the K block
    float s[2];     // those rows' scales
    int4 b[BN / 8]; // x16 piece c = lane + 32 j: token c / 4, values 8 (c % 4) .. +8
};

template <int BN> struct skinny_smem {
    union {
        struct {
            uint16_t a[SK_BM][W8_LDS];
            uint16_t b[BN][W8_LDS];
        } tile[SK_WK];
        float red[SK_WK][BN][SK_LDC]; // [warp][token][row]
    };
};

template <int BN>
static __device__ __forceinline__ void
skinny_load(skinny_regs<BN> &r, const int8_t *__restrict__ q, const uint16_t *__restrict__ s,
            const uint16_t *__restrict__ x, int row0, int tok0, int n_out, int n_in, int n_tok,
            int kb, int lane) {
#pragma unroll
    for (int j = 0; j < 2; j++) {
        const size_t row = (size_t)min(row0 + 16 * j + lane / 2, n_out - 1);
        r.a[j] = __ldg(reinterpret_cast<const int4 *>(q + row * (size_t)n_in + (size_t)kb * W8_QK) +
                       lane % 2);
        r.s[j] = w8_h2f(__ldg(s + row * (size_t)(n_in / W8_QK) + kb));
    }
#pragma unroll
    for (int j = 0; j < BN / 8; j++) {
        const int c = lane + KERN_CUDA_WARP * j;
        const size_t tok = (size_t)min(tok0 + c / 4, n_tok - 1);
        r.b[j] = __ldg(reinterpret_cast<const int4 *>(x + tok * (size_t)n_in + (size_t)kb * W8_QK) +
                       c % 4);
    }
}

template <int BN>
static __device__ __forceinline__ void skinny_stage(const skinny_regs<BN> &r, uint16_t (*a)[W8_LDS],
                                                    uint16_t (*b)[W8_LDS], int lane) {
#pragma unroll
    for (int j = 0; j < 2; j++) {
        uint4 h[2];
        w8_dequant16(r.a[j], r.s[j], h);
        uint16_t *dst = &a[16 * j + lane / 2][16 * (lane % 2)];
        reinterpret_cast<uint4 *>(dst)[0] = h[0];
        reinterpret_cast<uint4 *>(dst)[1] = h[1];
    }
#pragma unroll
    for (int j = 0; j < BN / 8; j++) {
        const int c = lane + KERN_CUDA_WARP * j;
        *reinterpret_cast<int4 *>(&b[c / 4][8 * (c % 4)]) = r.b[j];
    }
}

template <int BN>
static __global__ __launch_bounds__(SK_WK *KERN_CUDA_WARP) void w8a16_skinny_kernel(
    float *__restrict__ y, size_t ldy, const int8_t *__restrict__ q, const uint16_t *__restrict__ s,
    const uint16_t *__restrict__ x, int n_out, int n_in, int n_tok) {
    constexpr int FN = BN / 16;
    __shared__ __align__(128) skinny_smem<BN> sm;
    const int lane = threadIdx.x % KERN_CUDA_WARP, warp = threadIdx.x / KERN_CUDA_WARP;
    const int tok0 = blockIdx.x * BN, row0 = blockIdx.y * SK_BM;
    const int nkb = n_in / W8_QK;
    // Warp-uniform; a warp with an empty range (n_in < 256) adds zeros.
    const int kb_begin = (int)((long long)nkb * warp / SK_WK);
    const int kb_end = (int)((long long)nkb * (warp + 1) / SK_WK);
    uint16_t(*a)[W8_LDS] = sm.tile[warp].a;
    uint16_t(*b)[W8_LDS] = sm.tile[warp].b;

    w8_acc acc[2][FN];
    w8_acc_zero(acc);
    skinny_regs<BN> reg[SK_G];
#pragma unroll
    for (int g = 0; g < SK_G; g++)
        if (kb_begin + g < kb_end)
            skinny_load(reg[g], q, s, x, row0, tok0, n_out, n_in, n_tok, kb_begin + g, lane);
    for (int kb = kb_begin; kb < kb_end; kb += SK_G) {
#pragma unroll
        for (int g = 0; g < SK_G; g++) {
            const int k = kb + g;
            if (k < kb_end) {
                __syncwarp(); // the previous block's fragment loads are done
                skinny_stage(reg[g], a, b, lane);
                if (k + SK_G < kb_end) // refill the slot: in flight during the MMAs
                    skinny_load(reg[g], q, s, x, row0, tok0, n_out, n_in, n_tok, k + SK_G, lane);
                __syncwarp(); // the tiles are visible to the whole warp
                w8_mma_kblock<2, FN>(acc, &a[0][0], &b[0][0]);
            }
        }
    }

    __syncthreads(); // every warp is done with its tiles: the memory becomes red
#pragma unroll
    for (int m = 0; m < 2; m++)
#pragma unroll
        for (int n = 0; n < FN; n++)
            wmma::store_matrix_sync(&sm.red[warp][16 * n][16 * m], acc[m][n], SK_LDC,
                                    wmma::mem_col_major);
    __syncthreads();
    for (int i = threadIdx.x; i < BN * SK_BM; i += blockDim.x) {
        const int t = i / SK_BM, o = i % SK_BM;
        if (tok0 + t < n_tok && row0 + o < n_out) {
            float sum = 0.0f;
#pragma unroll
            for (int w = 0; w < SK_WK; w++)
                sum += sm.red[w][t][o];
            y[(size_t)(tok0 + t) * ldy + (size_t)(row0 + o)] = sum;
        }
    }
}

// ---- TILED kernel (many tokens) -------------------------------------------------
// A block computes BM rows x BN tokens with WGM x WGN warps, each a
// (BM / WGM) x (BN / WGN) sub-tile of 16x16 fragments. Per K block of 32 the
// block's threads load the next weight tile (thread i: half of row i / 2,
// 16 bytes, and its scale) and x16 tile (half of token i / 2, 32 bytes) into
// registers while the tensor cores work on the current one, then dequantise
// into the other of two shared buffers: one __syncthreads a K block. Rows and
// tokens past the ends load a copy of the last one and are never stored.
// The epilogue stages one fragment at a time through a per-warp 16x16 f32
// tile and writes it with 64-byte runs per token.
#define TL_LDC 20 // f32 row stride of the epilogue tile (16-byte multiple)

template <int BM, int BN, int WARPS> struct tiled_smem {
    union {
        struct {
            uint16_t a[2][BM][W8_LDS];
            uint16_t b[2][BN][W8_LDS];
        } t;
        float c[WARPS][16][TL_LDC]; // [warp][token][row]
    };
};

template <int BM, int BN, int WGM, int WGN>
static __global__ __launch_bounds__(WGM *WGN *KERN_CUDA_WARP) void w8a16_tiled_kernel(
    float *__restrict__ y, size_t ldy, const int8_t *__restrict__ q, const uint16_t *__restrict__ s,
    const uint16_t *__restrict__ x, int n_out, int n_in, int n_tok) {
    constexpr int WARPS = WGM * WGN, FM = BM / WGM / 16, FN = BN / WGN / 16;
    static_assert(BM * 2 == WARPS * KERN_CUDA_WARP && BN * 2 == WARPS * KERN_CUDA_WARP,
                  "each thread loads half a row of both tiles");
    __shared__ __align__(128) tiled_smem<BM, BN, WARPS> sm;
    const int tid = threadIdx.x, lane = tid % KERN_CUDA_WARP, warp = tid / KERN_CUDA_WARP;
    const int wm = warp % WGM, wn = warp / WGM;
    const int tok0 = blockIdx.x * BN, row0 = blockIdx.y * BM;
    const int nkb = n_in / W8_QK;
    const int lr = tid / 2, lh = tid % 2; // this thread's tile row (and token) and half

    const size_t row = (size_t)min(row0 + lr, n_out - 1);
    const int4 *qp = reinterpret_cast<const int4 *>(q + row * (size_t)n_in) + lh;
    const uint16_t *sp = s + row * (size_t)nkb;
    const int4 *xp =
        reinterpret_cast<const int4 *>(x + (size_t)min(tok0 + lr, n_tok - 1) * (size_t)n_in) +
        2 * lh;

    w8_acc acc[FM][FN];
    w8_acc_zero(acc);
    // K block kb in registers: 32 weight bytes of the row (2 int4), its
    // scale, 32 halves of the token's x16 (4 int4); this thread's halves.
    int4 ra, rb0, rb1;
    float rs;
    auto load = [&](int kb) {
        ra = __ldg(qp + 2 * (size_t)kb);
        rs = w8_h2f(__ldg(sp + kb));
        rb0 = __ldg(xp + 4 * (size_t)kb);
        rb1 = __ldg(xp + 4 * (size_t)kb + 1);
    };
    auto stage = [&](int buf) {
        uint4 h[2];
        w8_dequant16(ra, rs, h);
        uint4 *da = reinterpret_cast<uint4 *>(&sm.t.a[buf][lr][16 * lh]);
        int4 *db = reinterpret_cast<int4 *>(&sm.t.b[buf][lr][16 * lh]);
        da[0] = h[0];
        da[1] = h[1];
        db[0] = rb0;
        db[1] = rb1;
    };

    load(0);
    stage(0);
    __syncthreads();
    for (int kb = 0; kb < nkb; kb++) {
        const int cur = kb & 1;
        if (kb + 1 < nkb)
            load(kb + 1); // in flight during the MMAs
        w8_mma_kblock<FM, FN>(acc, &sm.t.a[cur][wm * FM * 16][0], &sm.t.b[cur][wn * FN * 16][0]);
        // The other buffer was last read in iteration kb - 1, before the
        // barrier that ended it.
        if (kb + 1 < nkb)
            stage(cur ^ 1);
        __syncthreads();
    }

    // The loop's last barrier freed the tiles: the memory becomes c.
    float *c = &sm.c[warp][0][0];
#pragma unroll
    for (int m = 0; m < FM; m++)
#pragma unroll
        for (int n = 0; n < FN; n++) {
            wmma::store_matrix_sync(c, acc[m][n], TL_LDC, wmma::mem_col_major);
            __syncwarp();
            const int o = row0 + (wm * FM + m) * 16 + lane % 16;
            const int tb = tok0 + (wn * FN + n) * 16;
#pragma unroll
            for (int k = 0; k < 8; k++) {
                const int tl = 2 * k + lane / 16;
                if (o < n_out && tb + tl < n_tok)
                    y[(size_t)(tb + tl) * ldy + (size_t)o] = c[tl * TL_LDC + lane % 16];
            }
            __syncwarp(); // read before the next fragment overwrites c
        }
}

// ---- dequantising pass (large batches) ------------------------------------------
// out = f16(s * q) for a run of whole rows, which are contiguous in q, s and
// out alike: piece p (16 int8, one 16-byte load) is q[16 p, 16 p + 16), its
// scale s[p / 2] (32 weights a scale), its output two 16-byte stores.
// Grid-stride; the int8 -> f16 product is kern_w8_dequant4's (no conversion
// instructions), bit for bit the tensor-core kernels' operand.
static __global__ void w8a16_dequant_kernel(uint4 *__restrict__ out, const int4 *__restrict__ q,
                                            const uint16_t *__restrict__ s, size_t n_pieces) {
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t p = (size_t)blockIdx.x * blockDim.x + threadIdx.x; p < n_pieces; p += stride) {
        const int4 w = __ldcs(q + p);
        const uint32_t sc = __ldg(s + p / 2);
        const uint32_t s2 = sc | (sc << 16);
        uint32_t h[8];
#pragma unroll
        for (int k = 0; k < 4; k++)
            kern_w8_dequant4(w8_word(w, k), s2, &h[2 * k], &h[2 * k + 1]);
        out[2 * p] = make_uint4(h[0], h[1], h[2], h[3]);
        out[2 * p + 1] = make_uint4(h[4], h[5], h[6], h[7]);
    }
}

// ---- launchers ----------------------------------------------------------------

template <int NT>
static int gemv_launch(float *y, size_t ldy, const int8_t *q, const uint16_t *s, const uint16_t *x,
                       int n_out, int n_in, cudaStream_t stream) {
    typedef gemv_shape<NT> S;
    // Warps a row's pieces are split among: enough pieces for a full
    // unrolled round per lane each, at most the block's 4.
    const int rounds = n_in / 16 / (KERN_CUDA_WARP * S::U);
    const int kw = rounds >= 4 ? 4 : rounds >= 2 ? 2 : 1;
    const int rows_per_block = S::R * (GEMV_WARPS / kw);
    const unsigned grid = (unsigned)((n_out + rows_per_block - 1) / rows_per_block);
    w8a16_gemv_kernel<NT><<<grid, GEMV_THREADS, 0, stream>>>(y, ldy, q, s, x, n_out, n_in, kw);
    return KERN_CUDA_LAUNCH_CHECK("w8a16_gemv_kernel");
}

static int gemv_dispatch(float *y, size_t ldy, const int8_t *q, const uint16_t *s,
                         const uint16_t *x, int n_out, int n_in, int n_tok, cudaStream_t stream) {
    switch (n_tok) {
    case 1: return gemv_launch<1>(y, ldy, q, s, x, n_out, n_in, stream);
    case 2: return gemv_launch<2>(y, ldy, q, s, x, n_out, n_in, stream);
    case 3: return gemv_launch<3>(y, ldy, q, s, x, n_out, n_in, stream);
    case 4: return gemv_launch<4>(y, ldy, q, s, x, n_out, n_in, stream);
    case 5: return gemv_launch<5>(y, ldy, q, s, x, n_out, n_in, stream);
    case 6: return gemv_launch<6>(y, ldy, q, s, x, n_out, n_in, stream);
    case 7: return gemv_launch<7>(y, ldy, q, s, x, n_out, n_in, stream);
    case 8: return gemv_launch<8>(y, ldy, q, s, x, n_out, n_in, stream);
    default: return BRISK_EINVAL;
    }
}

static int skinny_launch(float *y, size_t ldy, const int8_t *q, const uint16_t *s,
                         const uint16_t *x, int n_out, int n_in, int n_tok, cudaStream_t stream) {
    // 16-token tiles up to 16 tokens (no f16 MMAs on padding), 32 beyond.
    const int bn = n_tok <= 16 ? 16 : 32;
    const dim3 grid((unsigned)((n_tok + bn - 1) / bn), (unsigned)((n_out + SK_BM - 1) / SK_BM));
    if (bn == 16)
        w8a16_skinny_kernel<16>
            <<<grid, SK_WK * KERN_CUDA_WARP, 0, stream>>>(y, ldy, q, s, x, n_out, n_in, n_tok);
    else
        w8a16_skinny_kernel<32>
            <<<grid, SK_WK * KERN_CUDA_WARP, 0, stream>>>(y, ldy, q, s, x, n_out, n_in, n_tok);
    return KERN_CUDA_LAUNCH_CHECK("w8a16_skinny_kernel");
}

template <int BM, int BN, int WGM, int WGN>
static int tiled_launch(float *y, size_t ldy, const int8_t *q, const uint16_t *s, const uint16_t *x,
                        int n_out, int n_in, int n_tok, cudaStream_t stream) {
    // Tokens along x, so the blocks that share a weight tile run together
    // and read it from L2 rather than from DRAM again.
    const dim3 grid((unsigned)((n_tok + BN - 1) / BN), (unsigned)((n_out + BM - 1) / BM));
    w8a16_tiled_kernel<BM, BN, WGM, WGN>
        <<<grid, WGM * WGN * KERN_CUDA_WARP, 0, stream>>>(y, ldy, q, s, x, n_out, n_in, n_tok);
    return KERN_CUDA_LAUNCH_CHECK("w8a16_tiled_kernel");
}

static kern_cuda_w8a16_kernel w8_choose(int n_out, int n_tok, int n_sm) {
    if (n_tok <= KERN_CUDA_W8A16_GEMV_MAX_TOK)
        return KERN_CUDA_W8A16_GEMV;
    if (n_tok <= KERN_CUDA_W8A16_SKINNY_MAX_TOK)
        return KERN_CUDA_W8A16_SKINNY;
    // The big tile moves half the L2 traffic per MMA but only pays off when
    // it still gives every SM a block.
    const long long tiles128 = (long long)((n_out + 127) / 128) * ((n_tok + 127) / 128);
    return tiles128 >= (n_sm > 0 ? n_sm : 1) ? KERN_CUDA_W8A16_TILED128 : KERN_CUDA_W8A16_TILED64;
}

// ---- entries --------------------------------------------------------------------

extern "C" int kern_cuda_w8a16_dequant(uint16_t *out, const int8_t *q, const uint16_t *s,
                                       int n_rows, int n_in, cudaStream_t stream) {
    if (n_rows < 0 || n_in <= 0 || n_in % W8_QK != 0)
        return BRISK_EINVAL;
    if (n_rows == 0)
        return BRISK_OK;
    if (!out || !q || !s || !kern_cuda_aligned(out, 16) || !kern_cuda_aligned(q, 16) ||
        !kern_cuda_aligned(s, 2))
        return BRISK_EINVAL;
    const size_t n_pieces = (size_t)n_rows * (size_t)(n_in / 16);
    const int threads = 256;
    w8a16_dequant_kernel<<<kern_cuda_grid(n_pieces, threads, 8192), threads, 0, stream>>>(
        reinterpret_cast<uint4 *>(out), reinterpret_cast<const int4 *>(q), s, n_pieces);
    return KERN_CUDA_LAUNCH_CHECK("w8a16_dequant_kernel");
}

extern "C" int kern_cuda_w8a16(float *y, size_t ldy, const int8_t *q, const uint16_t *s,
                               const uint16_t *x16, int n_out, int n_in, int n_tok,
                               kern_cuda_w8a16_kernel kernel, int n_sm, cudaStream_t stream) {
    if (n_out <= 0 || n_in <= 0 || n_in % W8_QK != 0 || n_tok < 0 || ldy < (size_t)n_out)
        return BRISK_EINVAL;
    if (kernel < KERN_CUDA_W8A16_AUTO || kernel > KERN_CUDA_W8A16_TILED128)
        return BRISK_EINVAL;
    if (kernel == KERN_CUDA_W8A16_GEMV && n_tok > KERN_CUDA_W8A16_GEMV_MAX_TOK)
        return BRISK_EINVAL;
    if (n_tok == 0)
        return BRISK_OK;
    // 16-byte vector loads of q and x16 (rows stay aligned: n_in % 32 == 0).
    if (!y || !q || !s || !x16 || !kern_cuda_aligned(q, 16) || !kern_cuda_aligned(x16, 16) ||
        !kern_cuda_aligned(s, 2) || !kern_cuda_aligned(y, 4))
        return BRISK_EINVAL;
    if (kernel == KERN_CUDA_W8A16_AUTO)
        kernel = w8_choose(n_out, n_tok, n_sm);
    // Row tiles go along grid.y (at most 65535); tokens along x, which is
    // unbounded in practice (2^31 - 1).
    const int bm = kernel == KERN_CUDA_W8A16_SKINNY    ? SK_BM
                   : kernel == KERN_CUDA_W8A16_TILED64 ? 64
                                                       : 128;
    if (kernel != KERN_CUDA_W8A16_GEMV && (n_out + (long long)bm - 1) / bm > 65535)
        return BRISK_EINVAL;
    switch (kernel) {
    case KERN_CUDA_W8A16_GEMV: return gemv_dispatch(y, ldy, q, s, x16, n_out, n_in, n_tok, stream);
    case KERN_CUDA_W8A16_SKINNY:
        return skinny_launch(y, ldy, q, s, x16, n_out, n_in, n_tok, stream);
    case KERN_CUDA_W8A16_TILED64:
        return tiled_launch<64, 64, 2, 2>(y, ldy, q, s, x16, n_out, n_in, n_tok, stream);
    case KERN_CUDA_W8A16_TILED128:
        return tiled_launch<128, 128, 2, 4>(y, ldy, q, s, x16, n_out, n_in, n_tok, stream);
    default: return BRISK_EINVAL;
    }
}
