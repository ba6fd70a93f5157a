// kern_cuda_w8_util.cuh - device helpers that turn W8A16's int8 weights and
// their f16 scales, and f32 activations, into the f16 operands of a
// tensor-core product; shared by the GEMV (kern_cuda_gemv.cu) and the
// dequantising pass in front of cuBLAS (kern_cuda_w8a16.cu). CUDA C++ only:
// included by .cu files, never by C code.
#ifndef KERN_CUDA_W8_UTIL_CUH
#define KERN_CUDA_W8_UTIL_CUH

#include <cuda_fp16.h>
#include <stdint.h>
#include <string.h>

static __device__ __forceinline__ __half2 kern_u32_as_h2(uint32_t u) {
    __half2 h;
    memcpy(&h, &u, sizeof h);
    return h;
}

static __device__ __forceinline__ uint32_t kern_h2_as_u32(__half2 h) {
    uint32_t u;
    memcpy(&u, &h, sizeof u);
    return u;
}

// Four int8 (one 32-bit word, byte j = element j) times the f16 scale held
// in both halves of s2, as two f16 pairs: *lo = (e0, e1), *hi = (e2, e3)
// (element 0 in the low half), each f16(s * q) rounded to nearest even -
// the operand the tensor-core kernels multiply, bit for bit what the CPU's
// kern_fp32_to_fp16(s * q) gives: q is exact in f16, and one IEEE f16
// product of exact operands rounds s * q once (f16 arithmetic keeps
// subnormals). A product beyond 65504 becomes infinite, as an F16 weight
// of that size would be.
//   The int8 become f16 without a conversion instruction: the xor makes
// each byte b = q + 128 (0..255), PRMT places it as the low byte of 0x64xx,
// which is the f16 1024 + b (f16 spacing in [1024, 2048) is 1), and one
// f16 subtraction of 1152 leaves q exactly.
static __device__ __forceinline__ void kern_w8_dequant4(uint32_t w, uint32_t s2, uint32_t *lo,
                                                        uint32_t *hi) {
    const uint32_t u = w ^ 0x80808080u;
    const __half2 bias = kern_u32_as_h2(0x64806480u); // 1152 in both halves
    const __half2 s = kern_u32_as_h2(s2);
    const __half2 q01 = __hsub2(kern_u32_as_h2(__byte_perm(u, 0x64646464u, 0x4140)), bias);
    const __half2 q23 = __hsub2(kern_u32_as_h2(__byte_perm(u, 0x64646464u, 0x4342)), bias);
    *lo = kern_h2_as_u32(__hmul2(q01, s));
    *hi = kern_h2_as_u32(__hmul2(q23, s));
}

// Two f32 activations as one f16 pair (a in the low half), rounded to
// nearest even with |x| past 65504 clamped to it rather than made infinite,
// NaN kept: kern_cuda_matmul's rounding of its input (mm_f16_sat), the same
// value for every input - rounding first and clamping the infinities after
// gives 65504 exactly where clamping first does (values in (65504, 65520)
// round down to it, larger ones overflow and are clamped).
static __device__ __forceinline__ uint32_t kern_f32x2_to_f16x2_sat(float a, float b) {
    const __half2 max2 = kern_u32_as_h2(0x7bff7bffu);  // 65504 twice
    const __half2 nmax2 = kern_u32_as_h2(0xfbfffbffu); // -65504 twice
    const __half2 h = __floats2half2_rn(a, b);
    return kern_h2_as_u32(__hmin2_nan(__hmax2_nan(h, nmax2), max2));
}

#endif
