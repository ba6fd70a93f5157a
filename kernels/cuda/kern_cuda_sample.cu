// kern_cuda_sample.cu - sampling on the GPU: a constrained row's mask,
// bias, penalties, greedy or temperature, top-k, top-p, min-p and the draw,
// one block per row; kernel, launcher, C entry.
//
// The row's survivors are always a prefix of one total order: (value desc,
// id asc). top-k, top-p and min-p each cut that order once, so the kernel
// finds cut points - a key and the last id kept at that key - instead of
// sorting 150K logits:
//   - values become order-preserving uint32 keys in the workspace (0 marks a
//     non-candidate), so later passes compare integers;
//   - top-k: a radix select over the keys (12 + 10 + 10 bit digits, counts in
//     shared memory), ties at the cut resolved in id order;
//   - the "head", the first min(k, SAMPLE_HEAD) of the order, is compacted
//     into shared memory and bitonic-sorted there; top-p and min-p are then
//     a scan of the head, and when the survivors lie in the head the draw is
//     too. Only a top-p set larger than the head (a flat distribution) takes
//     the slow path: a binary search on the key over the whole row.
//   - otherwise the draw walks the row in id order: each warp owns one
//     contiguous chunk (coalesced 32-element steps), so a warp prefix over
//     the chunk totals plus a shuffle scan inside a step is the id order.
// Every sum is in a fixed order and every count an integer, so a row gives
// the same id run after run; sums are double where the contract says so.
#include <limits.h>

#include "kernels/cuda/kern_cuda_common.cuh"
#include "kernels/cuda/kern_cuda_sample.cuh"

#define SAMPLE_MAX_THREADS 1024
#define SAMPLE_HEAD 4096  // candidates sorted in shared memory at most
#define SAMPLE_BINS0 4096 // first radix digit: key bits 31..20
#define SAMPLE_BINS 1024  // second and third digits: bits 19..10 and 9..0
#define SAMPLE_FULL 0xffffffffu

// 16 KiB + 4 KiB of counts during the selects, then the 32 KiB head.
struct sample_shared {
    union {
        struct {
            int h0[SAMPLE_BINS0];
            int h1[SAMPLE_BINS];
        } hist;
        unsigned long long head[SAMPLE_HEAD];
    } u;
    double d[KERN_CUDA_WARP];
    int i[KERN_CUDA_WARP];
    unsigned k[KERN_CUDA_WARP];
    int res[4];
};

// The block's geometry and the row's keys. Warp w owns ids [lo, hi), one
// contiguous chunk, so walking the warps in order walks the ids in order.
struct sample_ctx {
    unsigned *keys;
    int lane, warp, n_warps, lo, hi;
};

// A cut of the (value desc, id asc) order: keeps key > t, and key == t up to
// id. id INT_MAX keeps every key == t (then the cut is key >= t).
struct sample_cut {
    unsigned t;
    int id;
    bool on;
    __device__ __forceinline__ bool keeps(unsigned k, int i) const {
        return !on || k > t || (k == t && i <= id);
    }
};

// ---- keys -------------------------------------------------------------------
// Flipping the sign bit of a positive float and every bit of a negative one
// makes unsigned order the float order. -0 is made +0 first (equal floats,
// equal keys). Candidates have keys >= key(-inf) = 0x007fffff, so 0 (a NaN's
// pattern) is free to mark a non-candidate.
__device__ __forceinline__ unsigned sample_key(float v) {
    const unsigned u = __float_as_uint(v);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

__device__ __forceinline__ float sample_val(unsigned k) {
    return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}

// ---- reductions -------------------------------------------------------------
// Warps reduce with xor butterflies (every lane gets the same value: each
// step adds the same two operands), then every thread combines the warp
// results in warp order, so the block result is the same in every thread and
// on every run. Each helper starts with a barrier, so they can follow one
// another on the same scratch.

template <typename T> __device__ __forceinline__ T sample_warp_sum(T v) {
    for (int o = KERN_CUDA_WARP / 2; o > 0; o >>= 1)
        v += __shfl_xor_sync(SAMPLE_FULL, v, o);
    return v;
}

__device__ __forceinline__ int sample_warp_min(int v) {
    for (int o = KERN_CUDA_WARP / 2; o > 0; o >>= 1)
        v = min(v, __shfl_xor_sync(SAMPLE_FULL, v, o));
    return v;
}

__device__ __forceinline__ int sample_warp_max(int v) {
    for (int o = KERN_CUDA_WARP / 2; o > 0; o >>= 1)
        v = max(v, __shfl_xor_sync(SAMPLE_FULL, v, o));
    return v;
}

static __device__ int sample_block_sum(int v, sample_shared &sh, const sample_ctx &c) {
    v = sample_warp_sum(v);
    __syncthreads();
    if (c.lane == 0)
        sh.i[c.warp] = v;
    __syncthreads();
    int s = 0;
    for (int w = 0; w < c.n_warps; w++)
        s += sh.i[w];
    return s;
}

static __device__ int sample_block_min(int v, sample_shared &sh, const sample_ctx &c) {
    v = sample_warp_min(v);
    __syncthreads();
    if (c.lane == 0)
        sh.i[c.warp] = v;
    __syncthreads();
    int m = INT_MAX;
    for (int w = 0; w < c.n_warps; w++)
        m = min(m, sh.i[w]);
    return m;
}

// Block sum of per-warp chunk values that are already warp-uniform: *before
// gets the sum of the warps before this one, *through the sum through it
// (the same additions in the same order as the total, so the last warp's
// *through is the total). Returns the total.
static __device__ double sample_warp_prefix(double wv, sample_shared &sh, const sample_ctx &c,
                                            double *before, double *through) {
    __syncthreads();
    if (c.lane == 0)
        sh.d[c.warp] = wv;
    __syncthreads();
    double s = 0.0;
    for (int w = 0; w < c.n_warps; w++) {
        if (w == c.warp)
            *before = s;
        s += sh.d[w];
        if (w == c.warp)
            *through = s;
    }
    return s;
}

// Exclusive scan over the threads in thread order; *total the block's sum.
template <typename T> __device__ T sample_block_scan(T v, T *scratch, T *total) {
    const int lane = threadIdx.x % KERN_CUDA_WARP, warp = threadIdx.x / KERN_CUDA_WARP;
    const int n_warps = blockDim.x / KERN_CUDA_WARP;
    T x = v;
    for (int o = 1; o < KERN_CUDA_WARP; o <<= 1) {
        const T y = __shfl_up_sync(SAMPLE_FULL, x, o);
        if (lane >= o)
            x = y + x;
    }
    T ex = __shfl_up_sync(SAMPLE_FULL, x, 1);
    if (lane == 0)
        ex = 0;
    __syncthreads();
    if (lane == KERN_CUDA_WARP - 1)
        scratch[warp] = x;
    __syncthreads();
    T base = 0, s = 0;
    for (int w = 0; w < n_warps; w++) {
        if (w == warp)
            base = s;
        s += scratch[w];
    }
    *total = s;
    return base + ex;
}

// ---- row passes -------------------------------------------------------------

// Candidates (key != 0) for which pred(key, id) holds.
template <class P> __device__ int sample_count(const sample_ctx &c, sample_shared &sh, P pred) {
    int n = 0;
    for (int i = c.lo + c.lane; i < c.hi; i += KERN_CUDA_WARP) {
        const unsigned k = c.keys[i];
        n += k != 0 && pred(k, i);
    }
    return sample_block_sum(n, sh, c);
}

// sum of exp((double)value - max) over the candidates for which pred holds:
// lane sums, a butterfly per warp, warps in order.
template <class P>
__device__ double sample_mass(const sample_ctx &c, sample_shared &sh, double max_l, P pred) {
    double s = 0.0;
    for (int i = c.lo + c.lane; i < c.hi; i += KERN_CUDA_WARP) {
        const unsigned k = c.keys[i];
        if (k != 0 && pred(k, i))
            s += exp((double)sample_val(k) - max_l);
    }
    double before, through;
    return sample_warp_prefix(sample_warp_sum(s), sh, c, &before, &through);
}

// The id of the m-th (1-based, m <= the count) candidate in id order for
// which pred holds: per-warp counts, then the warp holding it walks its chunk
// in 32-id steps with ballots.
template <class P>
__device__ int sample_find_nth(const sample_ctx &c, sample_shared &sh, P pred, int m) {
    int n = 0;
    for (int i = c.lo + c.lane; i < c.hi; i += KERN_CUDA_WARP) {
        const unsigned k = c.keys[i];
        n += k != 0 && pred(k, i);
    }
    n = sample_warp_sum(n);
    __syncthreads();
    if (c.lane == 0)
        sh.i[c.warp] = n;
    if (threadIdx.x == 0)
        sh.res[3] = INT_MAX;
    __syncthreads();
    int base = 0;
    for (int w = 0; w < c.warp; w++)
        base += sh.i[w];
    if (base < m && m <= base + n) { // warp-uniform
        for (int i0 = c.lo; i0 < c.hi; i0 += KERN_CUDA_WARP) {
            const int i = i0 + c.lane;
            const unsigned k = i < c.hi ? c.keys[i] : 0u;
            unsigned b = __ballot_sync(SAMPLE_FULL, k != 0 && pred(k, i));
            const int nb = __popc(b);
            if (base + nb >= m) {
                for (int q = m - base; q > 1; q--)
                    b &= b - 1;
                if (c.lane == 0)
                    sh.res[3] = i0 + __ffs(b) - 1;
                break;
            }
            base += nb;
        }
    }
    __syncthreads();
    return sh.res[3];
}

// The bin of h (nbins counts) holding the kk-th largest key: threads own
// groups of bins counted from the top, a block scan gives each group the
// count above it, and the group that crosses kk walks its bins. *above: the
// count in the bins above the result.
static __device__ int sample_find_bin(sample_shared &sh, const int *h, int nbins, int kk,
                                      int *above) {
    const int g = (nbins + (int)blockDim.x - 1) / (int)blockDim.x;
    const int j0 = min(nbins, (int)threadIdx.x * g), j1 = min(nbins, j0 + g);
    int s = 0;
    for (int j = j0; j < j1; j++)
        s += h[nbins - 1 - j];
    __syncthreads();        // every thread has read the previous call's answer
    if (threadIdx.x == 0) { // an answer even for an inconsistent kk
        sh.res[0] = 0;
        sh.res[1] = 0;
    }
    int total;
    const int ex = sample_block_scan(s, sh.i, &total);
    if (ex < kk && kk <= ex + s) {
        int acc = ex;
        for (int j = j0; j < j1; j++) {
            const int v = h[nbins - 1 - j];
            if (acc + v >= kk) {
                sh.res[0] = nbins - 1 - j;
                sh.res[1] = acc;
                break;
            }
            acc += v;
        }
    }
    __syncthreads();
    *above = sh.res[1];
    return sh.res[0];
}

// The cut that keeps exactly kk candidates (1 <= kk <= count): the kk-th
// largest key by three radix digits (the first digit's counts h0 come from
// the first pass over the row), and when the kk-th key is tied, the id of
// the last tied candidate kept, in id order. A digit whose bin holds exactly
// the candidates still wanted ends the search early: the cut is then
// "key >= the bin's lowest key".
static __device__ sample_cut sample_select(const sample_ctx &c, sample_shared &sh, int kk) {
    int *h0 = sh.u.hist.h0, *h1 = sh.u.hist.h1;
    int above;
    int bin = sample_find_bin(sh, h0, SAMPLE_BINS0, kk, &above);
    int rem = kk - above;
    unsigned prefix = (unsigned)bin;
    if (h0[bin] == rem)
        return sample_cut{prefix << 20, INT_MAX, true};
    for (int digit = 1; digit <= 2; digit++) {
        const int shift = digit == 1 ? 20 : 10; // bits already fixed: key >> shift
        __syncthreads();                        // every thread has read h1[bin]
        for (int b = threadIdx.x; b < SAMPLE_BINS; b += blockDim.x)
            h1[b] = 0;
        __syncthreads();
        for (int i = c.lo + c.lane; i < c.hi; i += KERN_CUDA_WARP) {
            const unsigned k = c.keys[i];
            if (k != 0 && (k >> shift) == prefix)
                atomicAdd(&h1[(k >> (shift - 10)) & (SAMPLE_BINS - 1)], 1);
        }
        __syncthreads();
        bin = sample_find_bin(sh, h1, SAMPLE_BINS, rem, &above);
        rem -= above;
        prefix = (prefix << 10) | (unsigned)bin;
        if (h1[bin] == rem)
            return sample_cut{prefix << (shift - 10), INT_MAX, true};
    }
    const unsigned t = prefix;
    const int id = sample_find_nth(
        c, sh, [t](unsigned k, int) { return k == t; }, rem);
    return sample_cut{t, id, true};
}

// Descending bitonic sort of a[0, n), n a power of two, in shared memory.
static __device__ void sample_sort(unsigned long long *a, int n) {
    for (int k = 2; k <= n; k <<= 1)
        for (int j = k >> 1; j > 0; j >>= 1) {
            for (int i = threadIdx.x; i < n; i += blockDim.x) {
                const int l = i ^ j;
                if (l > i) {
                    const unsigned long long x = a[i], y = a[l];
                    if ((i & k) == 0 ? x < y : x > y) {
                        a[i] = y;
                        a[l] = x;
                    }
                }
            }
            __syncthreads();
        }
}

__device__ __forceinline__ int sample_pow2(int n) {
    int p = 1;
    while (p < n)
        p <<= 1;
    return p;
}

// The top-p cut when the top-p set is larger than the head: the largest key
// t with mass(kept, key >= t) / all >= top_p by binary search over the
// 32-bit keys (each step sums only the keys in [t, hi): the mass at or
// above hi is carried), then how many candidates tied at t it takes and the
// id of the last one.
template <class K>
__device__ sample_cut sample_topp_search(const sample_ctx &c, sample_shared &sh, double max_l,
                                         double all, double top_p, K kept) {
    unsigned long long lo = 0, hi = 1ull << 32;
    double above = 0.0; // mass of the kept keys >= hi
    while (hi - lo > 1) {
        const unsigned long long t = (lo + hi) / 2;
        const double s = sample_mass(
            c, sh, max_l, [&](unsigned k, int i) { return k >= t && k < hi && kept(k, i); });
        if ((above + s) / all >= top_p) {
            lo = t;
        } else {
            hi = t;
            above += s;
        }
    }
    const unsigned t = (unsigned)lo;
    auto tied = [&](unsigned k, int i) { return k == t && kept(k, i); };
    const int eq = sample_count(c, sh, tied);
    if (eq == 0) // NaN masses: nothing ever reached top_p
        return sample_cut{t, INT_MAX, true};
    // The tied candidates weigh the same: the q-th brings the mass to
    // above + q * w. Estimate q, then step to the smallest that reaches.
    const double w = exp((double)sample_val(t) - max_l);
    const double need = (top_p * all - above) / w;
    int q = need >= 1.0 && need < (double)eq ? (int)ceil(need) : (need < 1.0 ? 1 : eq);
    while (q > 1 && (above + (double)(q - 1) * w) / all >= top_p)
        q--;
    while (q < eq && !((above + (double)q * w) / all >= top_p))
        q++;
    if (q >= eq)
        return sample_cut{t, INT_MAX, true};
    return sample_cut{t, sample_find_nth(c, sh, tied, q), true};
}

// ---- kernel -----------------------------------------------------------------
// One block per row. The workspace row holds the edited copy of the logits
// (rows with a mask or edits), then each id's key. A row's cost: one pass
// for greedy; for sampling one pass to key the row (max, count and the first
// digit's counts on the way), the selects' passes, one to compact the head,
// and two for a draw over the whole row.
static __global__ __launch_bounds__(SAMPLE_MAX_THREADS) void sample_kernel(
    int32_t *__restrict__ ids, const float *__restrict__ logits, int n_logit_rows, int n_vocab,
    const kern_cuda_sample_row *__restrict__ rows, const int32_t *__restrict__ edit_ids,
    const float *__restrict__ edit_vals, int n_edits, const uint32_t *__restrict__ mask,
    int n_mask_words, const float *__restrict__ q, int n_q_rows, float *__restrict__ p_out,
    unsigned *__restrict__ ws) {
    __shared__ sample_shared sh;
    const int row = blockIdx.x;
    const kern_cuda_sample_row p = rows[row];
    // Words of one row's mask (n_vocab + 31 could overflow an int).
    const int n_mask_row = (n_vocab >> 5) + ((n_vocab & 31) != 0);
    // The row descriptor comes from device memory: check it before reading
    // anything through it (block-uniform).
    if (p.logit_row < 0 || p.logit_row >= n_logit_rows || p.n_bias < 0 || p.bias_first < 0 ||
        (long long)p.bias_first + p.n_bias > n_edits || p.n_pen < 0 || p.pen_first < 0 ||
        (long long)p.pen_first + p.n_pen > n_edits || p.mask_first < -1 ||
        (p.mask_first >= 0 && (long long)p.mask_first + n_mask_row > n_mask_words) ||
        p.q_row < -1 || p.q_row >= n_q_rows ||
        (p.q_row >= 0 && (p.draft_id < 0 || p.draft_id >= n_vocab || !p_out))) {
        if (threadIdx.x == 0)
            ids[row] = -1;
        return;
    }
    // Draft verification (kern_cuda_sample.cuh): the draft's distribution.
    const bool draft = p.q_row >= 0;
    const float *qrow = draft ? q + (size_t)p.q_row * (size_t)n_vocab : nullptr;

    sample_ctx c;
    c.lane = threadIdx.x % KERN_CUDA_WARP;
    c.warp = threadIdx.x / KERN_CUDA_WARP;
    c.n_warps = blockDim.x / KERN_CUDA_WARP;
    {
        const long long step = (long long)KERN_CUDA_WARP * c.n_warps;
        const long long chunk = ((long long)n_vocab + step - 1) / step * KERN_CUDA_WARP;
        c.lo = (int)min((long long)n_vocab, chunk * c.warp);
        c.hi = (int)min((long long)n_vocab, chunk * (c.warp + 1));
    }
    c.keys = ws + (size_t)row * (size_t)n_vocab;
    const float *src = logits + (size_t)p.logit_row * (size_t)n_vocab;

    // 0-2. The mask and the edits on a copy: the copy takes -inf where the
    // mask's bit is clear (before the edits, as the CPU sampler: -inf stays
    // -inf through a finite bias or penalty), then biases, then (after the
    // barrier) penalties, one thread per edit (ids are distinct within a
    // kind). __f*_rn: the CPU's float operations exactly, no fused
    // multiply-add. A warp's 32 consecutive ids share one or two mask words.
    const bool masked = p.mask_first >= 0;
    const bool edited = masked || p.n_bias > 0 || p.n_pen > 0;
    if (edited) {
        const uint32_t *m = masked ? mask + p.mask_first : nullptr;
        for (int i = c.lo + c.lane; i < c.hi; i += KERN_CUDA_WARP) {
            float v = src[i];
            if (masked && !((m[i >> 5] >> (i & 31)) & 1u))
                v = -INFINITY;
            c.keys[i] = __float_as_uint(v);
        }
        __syncthreads();
        for (int e = threadIdx.x; e < p.n_bias; e += blockDim.x) {
            const int id = edit_ids[p.bias_first + e];
            if (id >= 0 && id < n_vocab)
                c.keys[id] = __float_as_uint(
                    __fadd_rn(__uint_as_float(c.keys[id]), edit_vals[p.bias_first + e]));
        }
        __syncthreads();
        for (int e = threadIdx.x; e < p.n_pen; e += blockDim.x) {
            const int id = edit_ids[p.pen_first + e];
            if (id < 0 || id >= n_vocab)
                continue;
            float l = __uint_as_float(c.keys[id]);
            if (p.repetition_penalty != 1.0f)
                l = l > 0.0f ? __fdiv_rn(l, p.repetition_penalty)
                             : __fmul_rn(l, p.repetition_penalty);
            // A count of 0: in the repetition window only (model_sampling.pf_from).
            const float cnt = edit_vals[p.pen_first + e];
            if (cnt > 0.0f)
                l = __fsub_rn(l,
                              __fadd_rn(p.presence_penalty, __fmul_rn(p.frequency_penalty, cnt)));
            c.keys[id] = __float_as_uint(l);
        }
        __syncthreads();
    }
    auto logit = [&](int i) { return edited ? __uint_as_float(c.keys[i]) : src[i]; };

    // 3. Greedy: kern_cuda_argmax's rule (larger value, or equal at a lower
    // id; NaN never wins; NaN at id 0 gives 0, as the CPU loop does).
    if (p.temperature <= 0.0f) {
        float bv = -INFINITY;
        int bi = INT_MAX;
        for (int i = c.lo + c.lane; i < c.hi; i += KERN_CUDA_WARP) {
            const float v = logit(i);
            if (v > bv || (v == bv && i < bi)) {
                bv = v;
                bi = i;
            }
        }
        for (int o = KERN_CUDA_WARP / 2; o > 0; o >>= 1) {
            const float v = __shfl_xor_sync(SAMPLE_FULL, bv, o);
            const int i = __shfl_xor_sync(SAMPLE_FULL, bi, o);
            if (v > bv || (v == bv && i < bi)) {
                bv = v;
                bi = i;
            }
        }
        if (c.lane == 0) {
            sh.d[c.warp] = bv;
            sh.i[c.warp] = bi;
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            for (int w = 1; w < c.n_warps; w++) {
                const float v = (float)sh.d[w];
                if (v > bv || (v == bv && sh.i[w] < bi)) {
                    bv = v;
                    bi = sh.i[w];
                }
            }
            const int id = (bi == INT_MAX || isnan(logit(0))) ? 0 : bi;
            ids[row] = id;
            if (draft) // greedy: p is the argmax alone
                p_out[row] = id == p.draft_id ? 1.0f : 0.0f;
        }
        return;
    }

    // 4. Key the row: l / temperature for l > -inf (NaN after the division
    // is dropped too), key 0 otherwise. On the way: the count, the top
    // candidate (largest key, lowest id) and, when a select will follow, the
    // first digit's counts (integer atomics: the counts do not depend on the
    // order).
    const bool want_hist = p.top_k > 0 || p.top_p < 1.0f;
    if (want_hist) {
        for (int b = threadIdx.x; b < SAMPLE_BINS0; b += blockDim.x)
            sh.u.hist.h0[b] = 0;
        __syncthreads();
    }
    unsigned bk = 0;
    int bi = INT_MAX, cnt = 0;
    for (int i = c.lo + c.lane; i < c.hi; i += KERN_CUDA_WARP) {
        const float l = logit(i);
        unsigned k = 0;
        if (l > -INFINITY) {
            float v = __fdiv_rn(l, p.temperature);
            if (v == 0.0f)
                v = 0.0f; // -0 -> +0
            if (!isnan(v)) {
                k = sample_key(v);
                cnt++;
                if (k > bk) { // ids rise along a lane: the first of a key wins
                    bk = k;
                    bi = i;
                }
                if (want_hist)
                    atomicAdd(&sh.u.hist.h0[k >> 20], 1);
            }
        }
        c.keys[i] = k;
    }
    for (int o = KERN_CUDA_WARP / 2; o > 0; o >>= 1) {
        const unsigned k = __shfl_xor_sync(SAMPLE_FULL, bk, o);
        const int i = __shfl_xor_sync(SAMPLE_FULL, bi, o);
        if (k > bk || (k == bk && i < bi)) {
            bk = k;
            bi = i;
        }
    }
    __syncthreads();
    if (c.lane == 0) {
        sh.k[c.warp] = bk;
        sh.i[c.warp] = bi;
    }
    __syncthreads();
    for (int w = 0; w < c.n_warps; w++)
        if (sh.k[w] > bk || (sh.k[w] == bk && sh.i[w] < bi)) {
            bk = sh.k[w];
            bi = sh.i[w];
        }
    cnt = sample_block_sum(cnt, sh, c);
    if (cnt == 0) { // every logit -inf or NaN: id 0, as on the CPU
        if (threadIdx.x == 0) {
            ids[row] = 0;
            if (draft)
                p_out[row] = 0.0f;
        }
        return;
    }
    const int top = bi;
    const double max_l = (double)sample_val(bk);
    const int k_eff = (p.top_k > 0 && p.top_k < cnt) ? p.top_k : cnt;
    const bool use_topk = k_eff < cnt;
    const bool use_topp = p.top_p < 1.0f;
    const bool use_minp = p.min_p > 0.0f;
    const double top_p = p.top_p, min_p = p.min_p;
    // exp(x) >= min_p needs x >= log(min_p); below it by a margin far past
    // exp's and log's rounding the exp need not be taken.
    const double min_p_cut = use_minp ? log(min_p) - 1e-6 : 0.0;

    sample_cut cut_k = {0u, 0, false}, cut_p = {0u, 0, false};
    // 5. top-k larger than the head: its cut, for the passes over the row.
    if (use_topk && k_eff > SAMPLE_HEAD)
        cut_k = sample_select(c, sh, k_eff);
    auto kept = [&](unsigned k, int i) { return cut_k.keeps(k, i); };

    if (use_topp || (use_topk && k_eff <= SAMPLE_HEAD)) {
        // The head: the first hc of the order, in shared memory, sorted by
        // ((key << 32) | ~id) descending: value desc, id asc.
        const int hc = min(k_eff, SAMPLE_HEAD);
        const bool complete = hc == k_eff; // the head is the whole kept set
        const sample_cut cut_h = hc < cnt ? sample_select(c, sh, hc) : sample_cut{0u, 0, false};
        double all = 0.0;
        if (use_topp && !complete)
            all = sample_mass(c, sh, max_l, kept);
        unsigned long long *head = sh.u.head;
        const int np2 = sample_pow2(hc);
        __syncthreads(); // the selects are done with the counts
        for (int j = threadIdx.x; j < np2; j += blockDim.x)
            head[j] = 0; // below every entry: sorts last
        if (threadIdx.x == 0)
            sh.res[2] = 0;
        __syncthreads();
        for (int i0 = c.lo; i0 < c.hi; i0 += KERN_CUDA_WARP) {
            const int i = i0 + c.lane;
            const unsigned k = i < c.hi ? c.keys[i] : 0u;
            const bool in = k != 0 && cut_h.keeps(k, i);
            const unsigned b = __ballot_sync(SAMPLE_FULL, in);
            if (b) {
                int base = 0;
                if (c.lane == 0)
                    base = atomicAdd(&sh.res[2], __popc(b));
                base = __shfl_sync(SAMPLE_FULL, base, 0);
                const int pos = base + __popc(b & ((1u << c.lane) - 1u));
                if (in && pos < np2)
                    head[pos] = ((unsigned long long)k << 32) | (0xffffffffu - (unsigned)i);
            }
        }
        __syncthreads();
        sample_sort(head, np2);

        // 6-7. Scan the sorted head: thread t owns entries [t*per, t*per+per).
        const int per = (np2 + (int)blockDim.x - 1) / (int)blockDim.x;
        const int j0 = min(hc, (int)threadIdx.x * per), j1 = min(hc, j0 + per);
        double loc = 0.0;
        for (int j = j0; j < j1; j++)
            loc += exp((double)sample_val((unsigned)(head[j] >> 32)) - max_l);
        double tot;
        double cum = sample_block_scan(loc, sh.d, &tot);
        if (complete)
            all = tot;
        int jp = INT_MAX, jm = INT_MAX;
        for (int j = j0; j < j1; j++) {
            const double e = exp((double)sample_val((unsigned)(head[j] >> 32)) - max_l);
            cum += e;
            if (use_topp && jp == INT_MAX && cum / all >= top_p)
                jp = j;
            if (use_minp && jm == INT_MAX && j > 0 && !(e >= min_p))
                jm = j;
        }
        jp = sample_block_min(jp, sh, c);
        jm = sample_block_min(jm, sh, c);
        int n_s = complete ? hc : INT_MAX; // survivors: a prefix of the head
        if (jp != INT_MAX)
            n_s = min(n_s, jp + 1);
        if (jm != INT_MAX)
            n_s = min(n_s, jm);
        if (n_s != INT_MAX) {
            // 8. Draw in the head: re-key the survivors by id ascending
            // (((0x7fffffff - id) << 32) | key, descending), scan, find.
            const int ns2 = sample_pow2(n_s);
            __syncthreads();
            for (int j = threadIdx.x; j < ns2; j += blockDim.x) {
                const unsigned long long h = head[j];
                const unsigned id = 0xffffffffu - (unsigned)h;
                head[j] =
                    j < n_s ? ((unsigned long long)(0x7fffffffu - id) << 32) | (h >> 32) : 0ull;
            }
            __syncthreads();
            sample_sort(head, ns2);
            const int per2 = (ns2 + (int)blockDim.x - 1) / (int)blockDim.x;
            const int q0 = min(n_s, (int)threadIdx.x * per2), q1 = min(n_s, q0 + per2);
            double l2 = 0.0;
            for (int j = q0; j < q1; j++)
                l2 += exp((double)sample_val((unsigned)head[j]) - max_l);
            double total;
            double run = sample_block_scan(l2, sh.d, &total);
            // A draft row: p(x), then the draw over the residual
            // max(0, p - q) when it has any mass (else over p itself).
            double wsum = total;
            bool resid = false;
            if (draft) {
                if (threadIdx.x == 0)
                    p_out[row] = 0.0f; // x is not a survivor
                __syncthreads();
                double l3 = 0.0;
                for (int j = q0; j < q1; j++) {
                    const int id = (int)(0x7fffffffu - (unsigned)(head[j] >> 32));
                    const double pj = exp((double)sample_val((unsigned)head[j]) - max_l) / total;
                    if (id == p.draft_id)
                        p_out[row] = (float)pj;
                    l3 += fmax(0.0, pj - (double)qrow[id]);
                }
                double rtot;
                const double run3 = sample_block_scan(l3, sh.d, &rtot);
                if (rtot > 0.0) {
                    resid = true;
                    run = run3;
                    wsum = rtot;
                }
            }
            const double r = p.u * wsum;
            int hit = INT_MAX, last_w = -1;
            for (int j = q0; j < q1; j++) {
                double w = exp((double)sample_val((unsigned)head[j]) - max_l);
                if (resid)
                    w = fmax(0.0,
                             w / total - (double)qrow[0x7fffffffu - (unsigned)(head[j] >> 32)]);
                if (w > 0.0)
                    last_w = j;
                run += w;
                if (r < run) {
                    hit = j;
                    break;
                }
            }
            hit = sample_block_min(hit, sh, c);
            if (hit == INT_MAX) { // rounding left r >= 0: the last survivor (of the residual)
                const int m = sample_block_min(last_w >= 0 ? -last_w : INT_MAX, sh, c);
                hit = resid && m != INT_MAX ? -m : n_s - 1;
            }
            if (threadIdx.x == 0)
                ids[row] = (int)(0x7fffffffu - (unsigned)(head[hit] >> 32));
            return;
        }
        // The top-p set runs past the head (and min-p does not cut inside it).
        cut_p = sample_topp_search(c, sh, max_l, all, top_p, kept);
    }

    // 8. Draw over the whole row, ids ascending: survivors pass the cuts and
    // min-p (the top candidate always survives).
    auto survive = [&](unsigned k, int i, double &e) {
        if (k == 0 || !cut_k.keeps(k, i) || !cut_p.keeps(k, i))
            return false;
        const double x = (double)sample_val(k) - max_l;
        if (use_minp && i != top) {
            if (x < min_p_cut)
                return false;
            e = exp(x);
            return e >= min_p;
        }
        e = exp(x);
        return true;
    };
    // A draft row: p(x) and the residual's mass first; the draw then walks
    // the residual's weights (when it has any mass) instead of p's.
    double p_total = 0.0;
    bool resid = false;
    if (draft) {
        double s0 = 0.0;
        for (int i = c.lo + c.lane; i < c.hi; i += KERN_CUDA_WARP) {
            double e;
            if (survive(c.keys[i], i, e))
                s0 += e;
        }
        double b0, t0;
        p_total = sample_warp_prefix(sample_warp_sum(s0), sh, c, &b0, &t0);
        double ex = 0.0;
        if (threadIdx.x == 0)
            p_out[row] = survive(c.keys[p.draft_id], p.draft_id, ex) ? (float)(ex / p_total) : 0.0f;
        double s1 = 0.0;
        for (int i = c.lo + c.lane; i < c.hi; i += KERN_CUDA_WARP) {
            double e;
            if (survive(c.keys[i], i, e))
                s1 += fmax(0.0, e / p_total - (double)qrow[i]);
        }
        double b1, t1;
        resid = sample_warp_prefix(sample_warp_sum(s1), sh, c, &b1, &t1) > 0.0;
    }
    // The draw's weight of id i: p's (exp(l - max)) or the residual's.
    auto weigh = [&](int i, double &w) {
        double e;
        if (!survive(c.keys[i], i, e))
            return false;
        if (!resid) {
            w = e;
            return true;
        }
        w = e / p_total - (double)qrow[i];
        return w > 0.0;
    };
    double s = 0.0;
    int last = -1;
    for (int i = c.lo + c.lane; i < c.hi; i += KERN_CUDA_WARP) {
        double e;
        if (weigh(i, e)) {
            s += e;
            last = i;
        }
    }
    last = sample_warp_max(last);
    double before = 0.0, through = 0.0;
    const double total = sample_warp_prefix(sample_warp_sum(s), sh, c, &before, &through);
    // (sample_warp_prefix's barriers order this write after every read of sh.i)
    if (c.lane == 0)
        sh.i[c.warp] = last;
    __syncthreads();
    for (int w = 0; w < c.n_warps; w++)
        last = max(last, sh.i[w]);
    const double r = p.u * total;
    // The first warp whose running sum passes r walks its chunk: within a
    // 32-id step an inclusive shuffle scan, so the running sum grows in id
    // order.
    int hit = INT_MAX;
    if (through > r && (c.warp == 0 || before <= r)) {
        double run = before;
        for (int i0 = c.lo; i0 < c.hi; i0 += KERN_CUDA_WARP) {
            const int i = i0 + c.lane;
            double e = 0.0;
            const bool in = i < c.hi && weigh(i, e);
            double x = in ? e : 0.0;
            for (int o = 1; o < KERN_CUDA_WARP; o <<= 1) {
                const double y = __shfl_up_sync(SAMPLE_FULL, x, o);
                if (c.lane >= o)
                    x = y + x;
            }
            const unsigned b = __ballot_sync(SAMPLE_FULL, in && r < run + x);
            if (b) {
                hit = i0 + __ffs(b) - 1;
                break;
            }
            run += __shfl_sync(SAMPLE_FULL, x, KERN_CUDA_WARP - 1);
        }
    }
    hit = sample_block_min(hit, sh, c);
    if (hit == INT_MAX) {
        // Rounding: the walk's running sum ended at or below r though the
        // warp totals passed it (they agree to ~1e-16). The answer is then
        // the first survivor of the warps after it, whose totals start past r.
        // (When no warp walked - r >= total, or NaN sums - no warp starts past
        // r either, and the last survivor stands.)
        if (before > r)
            for (int i0 = c.lo; i0 < c.hi; i0 += KERN_CUDA_WARP) {
                const int i = i0 + c.lane;
                double e;
                const unsigned b = __ballot_sync(SAMPLE_FULL, i < c.hi && weigh(i, e));
                if (b) {
                    hit = i0 + __ffs(b) - 1;
                    break;
                }
            }
        hit = sample_block_min(hit, sh, c);
    }
    if (threadIdx.x == 0)
        ids[row] = hit != INT_MAX ? hit : (last >= 0 ? last : 0);
}

// ---- launcher ---------------------------------------------------------------
static int sample_launch(int32_t *ids, const float *logits, int n_logit_rows, int n_vocab,
                         const kern_cuda_sample_row *rows, int n_rows, const int32_t *edit_ids,
                         const float *edit_vals, int n_edits, const uint32_t *mask,
                         int n_mask_words, const float *q, int n_q_rows, float *p_out, void *ws,
                         cudaStream_t stream) {
    // About 16 ids a thread up to 1024 threads (a 152K vocabulary: 149).
    const int threads = kern_cuda_row_threads(n_vocab, 16, SAMPLE_MAX_THREADS);
    sample_kernel<<<(unsigned)n_rows, threads, 0, stream>>>(
        ids, logits, n_logit_rows, n_vocab, rows, edit_ids, edit_vals, n_edits, mask, n_mask_words,
        q, n_q_rows, p_out, static_cast<unsigned *>(ws));
    return KERN_CUDA_LAUNCH_CHECK("sample_kernel");
}

// ---- entry ------------------------------------------------------------------
extern "C" size_t kern_cuda_sample_ws_bytes(int n_rows, int n_vocab) {
    if (n_rows < 0 || n_vocab <= 0)
        return (size_t)-1;
    if (n_rows > 0 && (size_t)n_vocab > SIZE_MAX / sizeof(uint32_t) / (size_t)n_rows)
        return (size_t)-1;
    return (size_t)n_rows * (size_t)n_vocab * sizeof(uint32_t);
}

extern "C" int kern_cuda_sample(int32_t *ids, const float *logits, int n_logit_rows, int n_vocab,
                                const kern_cuda_sample_row *rows, int n_rows,
                                const int32_t *edit_ids, const float *edit_vals, int n_edits,
                                const uint32_t *mask, int n_mask_words, const float *q,
                                int n_q_rows, float *p_out, void *ws, size_t ws_bytes,
                                cudaStream_t stream) {
    if (n_vocab <= 0 || n_rows < 0 || n_edits < 0 || n_mask_words < 0 || n_q_rows < 0)
        return BRISK_EINVAL;
    if (n_q_rows > 0 && (!q || !p_out || !kern_cuda_aligned(q, sizeof(float))))
        return BRISK_EINVAL;
    if (n_rows == 0)
        return BRISK_OK;
    const size_t need = kern_cuda_sample_ws_bytes(n_rows, n_vocab);
    if (n_logit_rows < 1 || !ids || !logits || !rows || !ws || need == (size_t)-1 ||
        ws_bytes < need || !kern_cuda_aligned(ws, sizeof(uint32_t)) ||
        !kern_cuda_aligned(rows, sizeof(double)))
        return BRISK_EINVAL;
    if (n_edits > 0 && (!edit_ids || !edit_vals))
        return BRISK_EINVAL;
    if (n_mask_words > 0 && (!mask || !kern_cuda_aligned(mask, sizeof(uint32_t))))
        return BRISK_EINVAL;
    return sample_launch(ids, logits, n_logit_rows, n_vocab, rows, n_rows, edit_ids, edit_vals,
                         n_edits, mask, n_mask_words, q, n_q_rows, p_out, ws, stream);
}
