// kern_cuda_rope.cu - RoPE, adjacent and split-half pairing: kernel,
// launcher, C entry.
#include "kernels/cuda/kern_cuda_common.cuh"
#include "kernels/cuda/kern_cuda_rope.cuh"

// ---- kernel -----------------------------------------------------------------
// One block per token (grid-stride over tokens). The block first computes the
// token's n_rot/2 cos/sin pairs into shared memory - in double, like
// kern_ops.c: pos * theta_i reaches ~1e5 rad, where a float angle would be off
// by ~1e-2 - and then every thread rotates pairs of every head with them, so
// each angle costs one double sin/cos per token, not one per head (double
// math is slow on T4: 1/32 of the f32 rate).
template <bool ADJACENT>
static __global__ void rope_kernel(float *out, size_t out_stride, const float *x, size_t x_stride,
                                   int n_tok, int n_heads, int head_dim, int n_rot,
                                   const int32_t *__restrict__ pos, float base, float freq_scale,
                                   const float *__restrict__ freq_factors, float mscale) {
    extern __shared__ float rope_smem[]; // cos[half], then sin[half]
    const int half = n_rot / 2;
    float *cs = rope_smem, *sn = rope_smem + half;
    for (int t = blockIdx.x; t < n_tok; t += gridDim.x) {
        __syncthreads(); // the previous token's pairs are all rotated
        for (int i = threadIdx.x; i < half; i += blockDim.x) {
            // The CPU's expression, in the CPU's order.
            double theta = (double)pos[t] * freq_scale * pow((double)base, -2.0 * i / n_rot);
            if (freq_factors)
                theta /= freq_factors[i];
            double s, c;
            sincos(theta, &s, &c);
            cs[i] = (float)c;
            sn[i] = (float)s;
        }
        __syncthreads();
        const float *row = x + (size_t)t * x_stride;
        float *orow = out + (size_t)t * out_stride;
        for (int j = threadIdx.x; j < n_heads * half; j += blockDim.x) {
            const int h = j / half, i = j - h * half;
            const float *v = row + (size_t)h * head_dim;
            float *o = orow + (size_t)h * head_dim;
            const int i0 = ADJACENT ? 2 * i : i;
            const int i1 = ADJACENT ? 2 * i + 1 : i + half;
            const float a = v[i0], b = v[i1];
            // _rn intrinsics: no FMA contraction, so the rounding is the CPU's.
            float r0 = __fsub_rn(__fmul_rn(a, cs[i]), __fmul_rn(b, sn[i]));
            float r1 = __fadd_rn(__fmul_rn(a, sn[i]), __fmul_rn(b, cs[i]));
            if (mscale != 1.0f) { // LongRoPE's attn_factor, after the turn as on the CPU
                r0 = __fmul_rn(r0, mscale);
                r1 = __fmul_rn(r1, mscale);
            }
            o[i0] = r0;
            o[i1] = r1;
        }
        // Out of place, the dims that do not turn (from 2 * half on: an odd
        // n_rot's last one, partial rotation) are copied as they are.
        if (out != x) {
            const int tail = head_dim - 2 * half;
            for (int j = threadIdx.x; j < n_heads * tail; j += blockDim.x) {
                const size_t d = (size_t)(j / tail) * head_dim + 2 * half + j % tail;
                orow[d] = row[d];
            }
        }
    }
}

// ---- launcher ---------------------------------------------------------------
static int rope_launch(float *out, size_t out_stride, const float *x, size_t x_stride, int n_tok,
                       int n_heads, int head_dim, int n_rot, const int32_t *pos, float base,
                       float freq_scale, const float *freq_factors, float mscale,
                       kern_rope_mode mode, cudaStream_t stream) {
    // 256 threads: a llama-3-8b q row (32 heads x 64 pairs) is 8 pairs each.
    const int threads = kern_cuda_row_threads(n_heads * (n_rot / 2 > 0 ? n_rot / 2 : 1), 1, 256);
    const size_t smem = 2 * (size_t)(n_rot / 2) * sizeof(float);
    const unsigned grid = (unsigned)n_tok;
    if (mode == KERN_ROPE_ADJACENT)
        rope_kernel<true><<<grid, threads, smem, stream>>>(out, out_stride, x, x_stride, n_tok,
                                                           n_heads, head_dim, n_rot, pos, base,
                                                           freq_scale, freq_factors, mscale);
    else
        rope_kernel<false><<<grid, threads, smem, stream>>>(out, out_stride, x, x_stride, n_tok,
                                                            n_heads, head_dim, n_rot, pos, base,
                                                            freq_scale, freq_factors, mscale);
    return KERN_CUDA_LAUNCH_CHECK("rope_kernel");
}

// ---- entry ------------------------------------------------------------------
extern "C" int kern_cuda_rope(float *x, size_t row_stride, int n_tok, int n_heads, int head_dim,
                              int n_rot, const int32_t *pos, float base, float freq_scale,
                              const float *freq_factors, kern_rope_mode mode, cudaStream_t stream) {
    return kern_cuda_rope_ex(x, row_stride, n_tok, n_heads, head_dim, n_rot, pos, base, freq_scale,
                             freq_factors, 1.0f, mode, stream);
}

extern "C" int kern_cuda_rope_ex(float *x, size_t row_stride, int n_tok, int n_heads, int head_dim,
                                 int n_rot, const int32_t *pos, float base, float freq_scale,
                                 const float *freq_factors, float mscale, kern_rope_mode mode,
                                 cudaStream_t stream) {
    return kern_cuda_rope_to(x, row_stride, x, row_stride, n_tok, n_heads, head_dim, n_rot, pos,
                             base, freq_scale, freq_factors, mscale, mode, stream);
}

extern "C" int kern_cuda_rope_to(float *out, size_t out_stride, const float *x, size_t x_stride,
                                 int n_tok, int n_heads, int head_dim, int n_rot,
                                 const int32_t *pos, float base, float freq_scale,
                                 const float *freq_factors, float mscale, kern_rope_mode mode,
                                 cudaStream_t stream) {
    if (n_tok < 0 || n_heads < 0 || head_dim < 0 || n_rot < 0 || !(mscale > 0.0f))
        return BRISK_EINVAL;
    if (mode != KERN_ROPE_ADJACENT && mode != KERN_ROPE_SPLIT_HALF)
        return BRISK_EINVAL;
    if (n_rot > head_dim)
        n_rot = head_dim;
    if (n_rot / 2 > KERN_CUDA_ROPE_MAX_PAIRS)
        return BRISK_EINVAL;
    const bool in_place = out == x;
    if (in_place && out_stride != x_stride)
        return BRISK_EINVAL;
    // In place with nothing to turn there is nothing to do; out of place the
    // copy still has to happen.
    if (n_tok == 0 || n_heads == 0 || head_dim == 0 || (in_place && n_rot < 2))
        return BRISK_OK;
    const size_t width = (size_t)n_heads * (size_t)head_dim;
    if (x_stride < width || out_stride < width || !x || !out || (n_rot >= 2 && !pos))
        return BRISK_EINVAL;
    return rope_launch(out, out_stride, x, x_stride, n_tok, n_heads, head_dim, n_rot, pos, base,
                       freq_scale, freq_factors, mscale, mode, stream);
}
