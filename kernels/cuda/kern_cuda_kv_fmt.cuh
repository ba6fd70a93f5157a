// kern_cuda_kv_fmt.cuh - reading the paged KV cache's formats on the GPU:
// f16, and the int8 / fp8 e4m3 codes with one fp16 scale per (position, KV
// head) of kern_kv.h (CUDA C++ only; the store and both attention kernels
// include it).
//
// Addressing, for position p of a block table row and KV head g, in a
// layer's pool (kv/kv_cache.h gives where the layer's block 0 starts):
//   blk = table[p / block_size] * block_stride    f16: elements; quantized: bytes
//   e   = (p % block_size) * row_stride + g * head_dim   (+ d for value d)
//   f16: the values at halves blk + e ...
//   quantized: the codes at bytes blk + e ... (one byte a value), the scale
//   at byte blk + scale_off + 2 * ((p % block_size) * n_kv_heads + g).
// A quantized value is fp16(scale) * code: exact in f32 (11 by at most 8
// significant bits), so a kernel reading codes computes on the same floats as
// kern_kv_dequantize and the CPU reference (kern_attention_head_ref) do.
// Codes of 8 values are 8-byte aligned: layer-blocks are 16-byte multiples
// and kern_kv_check keeps head_dim (hence kv_dim) a multiple of 16.
#ifndef KERN_CUDA_KV_FMT_CUH
#define KERN_CUDA_KV_FMT_CUH

#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/cpu/kern_kv.h"
#include "kernels/cuda/kern_cuda_common.cuh"

// The formats, as the kernels' template parameter FMT.
enum { KVF_F16 = 0, KVF_I8 = 1, KVF_F8 = 2 };

// FMT of a dtype; -1 for one the GPU does not read.
static inline int kvf_of(kern_kv_dtype t) {
    return t == KERN_KV_F16 ? KVF_F16 : t == KERN_KV_INT8 ? KVF_I8 : t == KERN_KV_FP8 ? KVF_F8 : -1;
}

// Eight values' raw bits as loaded: f16, eight halves; quantized, the eight
// codes in v[0] and v[1] (byte j of the pair = value j) and the scale as f32
// bits in v[2], so a load can be issued a phase before its conversion.
typedef kern_cuda_vec<uint32_t, 4> kvf_raw;

static __device__ __forceinline__ float kvf_h2f(uint32_t bits) {
    return __half2float(__ushort_as_half((unsigned short)(bits & 0xffffu)));
}

// A code byte's value (the integer, or the e4m3 number; e4m3 converts to
// f16 exactly).
template <int FMT> static __device__ __forceinline__ float kvf_code(uint32_t byte) {
    if (FMT == KVF_I8)
        return (float)(int8_t)(uint8_t)(byte & 0xffu);
    const __half_raw h = __nv_cvt_fp8_to_halfraw((__nv_fp8_storage_t)(byte & 0xffu), __NV_E4M3);
    return __half2float(__half(h));
}

// The raw bits of values e .. e + 7 of the layer-block at blk (see the
// top); sbyte: the scale's byte offset from blk (quantized only). VEC: f16
// rows 16-byte aligned (the launcher checked), else eight 2-byte loads.
template <int FMT, bool VEC>
static __device__ __forceinline__ kvf_raw kvf_load8(const void *__restrict__ pool, size_t blk,
                                                    size_t e, size_t sbyte) {
    kvf_raw r;
    if (FMT == KVF_F16) {
        const uint16_t *p = static_cast<const uint16_t *>(pool) + blk + e;
        if (VEC) {
            r = *reinterpret_cast<const kvf_raw *>(p);
        } else {
#pragma unroll
            for (int j = 0; j < 4; j++)
                r.v[j] = (uint32_t)p[2 * j] | ((uint32_t)p[2 * j + 1] << 16);
        }
    } else {
        const uint8_t *b = static_cast<const uint8_t *>(pool) + blk;
        const uint2 u = *reinterpret_cast<const uint2 *>(b + e);
        r.v[0] = u.x;
        r.v[1] = u.y;
        r.v[2] = __float_as_uint(kvf_h2f(*reinterpret_cast<const unsigned short *>(b + sbyte)));
        r.v[3] = 0u;
    }
    return r;
}

// The eight values as f32.
template <int FMT> static __device__ __forceinline__ void kvf_unpack8(const kvf_raw &r, float *f) {
    if (FMT == KVF_F16) {
#pragma unroll
        for (int j = 0; j < 4; j++) {
            f[2 * j] = kvf_h2f(r.v[j]);
            f[2 * j + 1] = kvf_h2f(r.v[j] >> 16);
        }
    } else {
        const float d = __uint_as_float(r.v[2]);
#pragma unroll
        for (int j = 0; j < 4; j++) {
            f[j] = d * kvf_code<FMT>(r.v[0] >> (8 * j));
            f[4 + j] = d * kvf_code<FMT>(r.v[1] >> (8 * j));
        }
    }
}

#endif
