// kern_cuda_kv_store.cu - the batch's new K/V rows into the paged cache (f16,
// or int8 / fp8 codes with a scale per head), and the projection bias add:
// kernels, launchers, C entries.
//
// f32 -> f16 must be bit for bit kern_fp32_to_fp16 (kernels/cpu/kern_types.c),
// which kern_quantize_row(KERN_TYPE_F16) uses. cvt.rn.f16.f32 (what
// __float2half_rn compiles to) is the same IEEE round-to-nearest-even for
// every non-NaN input: both send |x| >= 65520 (max half + half an ulp) to
// inf, round f16 subnormals to nearest even (2^-25 itself ties to 0), give
// +-0 for smaller values and f32 subnormals, and keep the sign of zeros and
// infinities. They differ only on NaN: the GPU returns the canonical 0x7fff
// for any NaN, the CPU keeps the sign and the top 10 payload bits (0x200
// when those are 0, so a NaN stays a NaN). kv_f16 therefore does NaNs by
// the CPU's rule and everything else with the hardware conversion.
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "kernels/cuda/kern_cuda_common.cuh"
#include "kernels/cuda/kern_cuda_kv_fmt.cuh"
#include "kernels/cuda/kern_cuda_kv_store.cuh"

// ---- helpers ------------------------------------------------------------------

typedef kern_cuda_vec<float, 4> kv_f4;    // 16 bytes of f32
typedef kern_cuda_vec<uint32_t, 2> kv_h4; // 8 bytes: four f16

static __device__ __forceinline__ uint32_t kv_f16(float f) {
    const uint32_t u = __float_as_uint(f), a = u & 0x7fffffffu;
    if (a > 0x7f800000u) { // NaN: kern_fp32_to_fp16's bits
        const uint32_t man = (a >> 13) & 0x3ffu;
        return ((u >> 16) & 0x8000u) | 0x7c00u | (man ? man : 0x200u);
    }
    return __half_as_ushort(__float2half_rn(f));
}

// ---- kernels ------------------------------------------------------------------
// One block per token (grid-stride over tokens): the slot is read once and a
// row of kv_dim elements is converted by the block's threads. With VEC (the
// launcher checked the f32 rows' 16-byte and the pools' 8-byte alignment and
// that kv_dim and ld are multiples of 4) four elements move as one float4
// load and one 8-byte store each, when the slot itself is a multiple of 4 (it
// is in device memory, so that is checked per token); else one at a time.
template <bool VEC>
static __global__ void kv_store_kernel(uint16_t *__restrict__ k16, uint16_t *__restrict__ v16,
                                       const float *__restrict__ k, const float *__restrict__ v,
                                       size_t ld, const int64_t *__restrict__ slots, int n_tok,
                                       int kv_dim) {
    for (int t = blockIdx.x; t < n_tok; t += gridDim.x) {
        const int64_t slot = slots[t];
        if (slot < 0)
            continue; // a padding row (block-uniform)
        const float *kr = k + (size_t)t * ld, *vr = v + (size_t)t * ld;
        uint16_t *kd = k16 + slot, *vd = v16 + slot;
        if (VEC && slot % 4 == 0) {
            for (int i = threadIdx.x; i < kv_dim / 4; i += blockDim.x) {
                const kv_f4 a = reinterpret_cast<const kv_f4 *>(kr)[i];
                const kv_f4 b = reinterpret_cast<const kv_f4 *>(vr)[i];
                kv_h4 ha, hb;
                ha.v[0] = kv_f16(a.v[0]) | (kv_f16(a.v[1]) << 16);
                ha.v[1] = kv_f16(a.v[2]) | (kv_f16(a.v[3]) << 16);
                hb.v[0] = kv_f16(b.v[0]) | (kv_f16(b.v[1]) << 16);
                hb.v[1] = kv_f16(b.v[2]) | (kv_f16(b.v[3]) << 16);
                reinterpret_cast<kv_h4 *>(kd)[i] = ha;
                reinterpret_cast<kv_h4 *>(vd)[i] = hb;
            }
        } else {
            for (int i = threadIdx.x; i < kv_dim; i += blockDim.x) {
                kd[i] = (uint16_t)kv_f16(kr[i]);
                vd[i] = (uint16_t)kv_f16(vr[i]);
            }
        }
    }
}

// The quantized store (kern_kv.h's int8 and fp8 rules, bit for bit): one
// block per token (grid-stride), one warp per KV head (the heads of a row
// split among the block's warps). A warp takes max|x| over its head's
// head_dim values (lanes strided, a shuffle max: exact in any order), then
//   d = amax / 127 (int8) or / 448 (fp8), id = d ? 1 / d : 0   (IEEE f32, as C)
//   scale = fp16(d) (kv_f16, the CPU's bits), code = round(x * id) pinned to
//   +-127 (NaN -> 0), or e4m3(x * id) rounded to nearest even, saturated.
// K then V. The slot encodes the block and the row: slot = block's byte
// offset + row (row < block_size <= block_stride; the host's cuda_stage).
template <int FMT>
static __global__ void
kv_store_q_kernel(uint8_t *__restrict__ kq, uint8_t *__restrict__ vq, const float *__restrict__ k,
                  const float *__restrict__ v, size_t ld, const int64_t *__restrict__ slots,
                  int n_tok, int n_kv_heads, int head_dim, size_t block_stride, size_t scale_off) {
    const int warp = threadIdx.x / KERN_CUDA_WARP, lane = threadIdx.x % KERN_CUDA_WARP;
    const int n_warps = blockDim.x / KERN_CUDA_WARP;
    const size_t kv_dim = (size_t)n_kv_heads * head_dim;
    for (int t = blockIdx.x; t < n_tok; t += gridDim.x) {
        const int64_t slot = slots[t];
        if (slot < 0)
            continue; // a padding row (block-uniform)
        const size_t r = (size_t)slot % block_stride, blk = (size_t)slot - r;
        for (int kvi = 0; kvi < 2; kvi++) {
            const float *x = (kvi ? v : k) + (size_t)t * ld;
            uint8_t *b = (kvi ? vq : kq) + blk;
            for (int g = warp; g < n_kv_heads; g += n_warps) {
                const float *xg = x + (size_t)g * head_dim;
                float amax = 0.0f;
                for (int i = lane; i < head_dim; i += KERN_CUDA_WARP)
                    amax = fmaxf(amax, fabsf(xg[i]));
                amax = kern_warp_max(amax);
                const float d = __fdiv_rn(amax, FMT == KVF_F8 ? 448.0f : 127.0f);
                const float id = d != 0.0f ? __fdiv_rn(1.0f, d) : 0.0f;
                uint8_t *c = b + r * kv_dim + (size_t)g * head_dim;
                for (int i = lane; i < head_dim; i += KERN_CUDA_WARP) {
                    const float y = __fmul_rn(xg[i], id);
                    uint8_t code;
                    if (FMT == KVF_F8) {
                        code = (uint8_t)__nv_cvt_float_to_fp8(y, __NV_SATFINITE, __NV_E4M3);
                    } else {
                        const float q = roundf(y);
                        code = (uint8_t)(int8_t)(q != q ? 0.0f : fminf(fmaxf(q, -127.0f), 127.0f));
                    }
                    c[i] = code;
                }
                if (lane == 0)
                    *reinterpret_cast<uint16_t *>(b + scale_off + 2 * (r * n_kv_heads + g)) =
                        (uint16_t)kv_f16(d);
            }
        }
    }
}

// Grid-stride over rows and columns; one IEEE f32 add per element, as on the
// CPU (an add alone is never contracted into an FMA).
static __global__ void add_bias_kernel(float *__restrict__ x, size_t ld,
                                       const float *__restrict__ b, int n_tok, int n) {
    for (int t = blockIdx.y; t < n_tok; t += gridDim.y) {
        float *xr = x + (size_t)t * ld;
        for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
            xr[i] = __fadd_rn(xr[i], b[i]);
    }
}

// ---- launchers ----------------------------------------------------------------

static int kv_store_launch(uint16_t *k16, uint16_t *v16, const float *k, const float *v, size_t ld,
                           const int64_t *slots, int n_tok, int kv_dim, cudaStream_t stream) {
    const bool vec = kern_cuda_aligned(k, 16) && kern_cuda_aligned(v, 16) &&
                     kern_cuda_aligned(k16, 8) && kern_cuda_aligned(v16, 8) && ld % 4 == 0 &&
                     kv_dim % 4 == 0;
    // A llama-3-8b row (8 KV heads of 128) is 256 float4s: one each.
    const int threads = kern_cuda_row_threads(vec ? kv_dim / 4 : kv_dim, 1, 256);
    const unsigned grid = kern_cuda_grid((size_t)n_tok, 1);
    if (vec)
        kv_store_kernel<true>
            <<<grid, threads, 0, stream>>>(k16, v16, k, v, ld, slots, n_tok, kv_dim);
    else
        kv_store_kernel<false>
            <<<grid, threads, 0, stream>>>(k16, v16, k, v, ld, slots, n_tok, kv_dim);
    return KERN_CUDA_LAUNCH_CHECK("kv_store_kernel");
}

static int kv_store_q_launch(uint8_t *kq, uint8_t *vq, int fmt, const float *k, const float *v,
                             size_t ld, const int64_t *slots, int n_tok, int n_kv_heads,
                             int head_dim, size_t block_stride, size_t scale_off,
                             cudaStream_t stream) {
    // A warp per head, at most 8 warps: llama-3-8b's 8 heads of 128 one each.
    const int threads = KERN_CUDA_WARP * (n_kv_heads < 8 ? n_kv_heads : 8);
    const unsigned grid = kern_cuda_grid((size_t)n_tok, 1);
    if (fmt == KVF_F8)
        kv_store_q_kernel<KVF_F8><<<grid, threads, 0, stream>>>(
            kq, vq, k, v, ld, slots, n_tok, n_kv_heads, head_dim, block_stride, scale_off);
    else
        kv_store_q_kernel<KVF_I8><<<grid, threads, 0, stream>>>(
            kq, vq, k, v, ld, slots, n_tok, n_kv_heads, head_dim, block_stride, scale_off);
    return KERN_CUDA_LAUNCH_CHECK("kv_store_q_kernel");
}

static int add_bias_launch(float *x, size_t ld, const float *b, int n_tok, int n,
                           cudaStream_t stream) {
    const int threads = kern_cuda_row_threads(n, 1, 256);
    const dim3 grid(kern_cuda_grid((size_t)n, threads), kern_cuda_grid((size_t)n_tok, 1));
    add_bias_kernel<<<grid, threads, 0, stream>>>(x, ld, b, n_tok, n);
    return KERN_CUDA_LAUNCH_CHECK("add_bias_kernel");
}

// ---- entries ------------------------------------------------------------------

extern "C" int kern_cuda_kv_store(uint16_t *k16, uint16_t *v16, const float *k, const float *v,
                                  size_t ld, const int64_t *slots, int n_tok, int kv_dim,
                                  cudaStream_t stream) {
    if (n_tok < 0 || kv_dim <= 0 || ld < (size_t)kv_dim)
        return BRISK_EINVAL;
    if (n_tok == 0)
        return BRISK_OK;
    if (!k16 || !v16 || !k || !v || !slots)
        return BRISK_EINVAL;
    return kv_store_launch(k16, v16, k, v, ld, slots, n_tok, kv_dim, stream);
}

extern "C" int kern_cuda_kv_store_q(uint8_t *kq, uint8_t *vq, kern_kv_dtype dtype, const float *k,
                                    const float *v, size_t ld, const int64_t *slots, int n_tok,
                                    int n_kv_heads, int head_dim, int block_size,
                                    size_t block_stride, size_t scale_off, cudaStream_t stream) {
    const int fmt = kvf_of(dtype);
    const size_t kv_dim = (size_t)n_kv_heads * (size_t)head_dim;
    if (n_tok < 0 || (fmt != KVF_I8 && fmt != KVF_F8) || n_kv_heads <= 0 || head_dim <= 0 ||
        head_dim % 16 != 0 || block_size <= 0 || ld < kv_dim ||
        scale_off < (size_t)block_size * kv_dim ||
        block_stride < scale_off + (size_t)block_size * (size_t)n_kv_heads * 2)
        return BRISK_EINVAL;
    if (n_tok == 0)
        return BRISK_OK;
    if (!kq || !vq || !k || !v || !slots)
        return BRISK_EINVAL;
    return kv_store_q_launch(kq, vq, fmt, k, v, ld, slots, n_tok, n_kv_heads, head_dim,
                             block_stride, scale_off, stream);
}

extern "C" int kern_cuda_add_bias(float *x, size_t ld, const float *b, int n_tok, int n,
                                  cudaStream_t stream) {
    if (n_tok < 0 || n <= 0 || ld < (size_t)n)
        return BRISK_EINVAL;
    if (n_tok == 0)
        return BRISK_OK;
    if (!x || !b)
        return BRISK_EINVAL;
    return add_bias_launch(x, ld, b, n_tok, n, stream);
}
