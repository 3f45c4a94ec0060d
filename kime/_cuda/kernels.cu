// kime's CUDA kernels: everything of the Laya forward pass that is not a GEMM (kime/graph.py's
// module docstring describes the computation step by step; the NumPy oracle is
// kime/_cpu/reference.py).
//
// Self-contained on purpose: no #include, so NVRTC compiles it without CUDA headers (a CuPy wheel
// on a machine without the CUDA toolkit has none), and a CPU-only machine can compile it to catch
// errors (tests/cuda/test_compile.py). Half precision is raw binary16 bits converted with PTX.
//
// The activation type `act_t` is fixed per module by -DKIME_HALF (FP16) or not (FP32). The
// residual stream `x` is always FP32, as under Laya's autocast (embedding and LayerNorm run in
// FP32 there and the residual adds FP16 outputs to FP32); GEMM inputs and outputs are `act_t`.
// Norm weights, biases and the act head are FP32. All arithmetic is FP32.
//
// Layout of a plan (kime/_cuda/layout.py): `cap` token slots; each row starts at a multiple of
// 16, its tail up to the next multiple of 16 is gap tokens, and the unused end of the plan is
// 16-token padding rows. Per token, `lo[t]` and `hi[t]` bound the row it belongs to (a gap token
// is a row of its own: lo = t, hi = t + 1). A token only ever reads tokens of its own row, so
// whatever fills the gaps and padding never changes a real row's bits.
//
// A parallel-layout batch (Laya's `parallel_layout`) also carries per token its position id
// `pos`, option id `opt` (0 shared, s + 1 in option slot s) and its row's reach `shift` (how far a
// position id may stray from its index). It runs the `_par` variants of rope and attention, which
// take those; a sequential batch runs the kernels without them, unchanged, so the choice is made
// once per batch (per captured graph), never per token.
//
// Determinism: every reduction runs in a fixed order that depends only on the row itself (block
// sums in a fixed tree; attention visits 16-aligned key chunks counted from the row's start), so
// a row gives the same bits wherever it sits in a batch.

typedef unsigned short half_t;  // IEEE binary16 bits
typedef unsigned int u32;

#ifdef KIME_HALF
typedef half_t act_t;
#else
typedef float act_t;
#endif

#define NEG_INF __int_as_float(0xff800000)
#define MAX_PER_THREAD 16  // a row of width d is held in registers: d <= 16 * blockDim.x

__device__ __forceinline__ float h2f(half_t h) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}

__device__ __forceinline__ half_t f2h(float f) {
    half_t h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
}

__device__ __forceinline__ float ld(const float* p) { return *p; }
__device__ __forceinline__ float ld(const half_t* p) { return h2f(*p); }
__device__ __forceinline__ void st(float* p, float v) { *p = v; }
__device__ __forceinline__ void st(half_t* p, float v) { *p = f2h(v); }

// torch's exact GELU in float32 (the same formula as kime/_cpu/_ops.pyx).
__device__ __forceinline__ float gelu(float v) { return 0.5f * v * (1.0f + erff(v * 0.70710678118654752f)); }

// Sum over the block, the same bits on every thread: a butterfly inside each warp, then the warp
// totals in warp order. `scratch` holds 32 floats.
__device__ float block_sum(float v, float* scratch) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    const int warps = (blockDim.x + 31) >> 5;
    __syncthreads();  // the previous call's readers are done with scratch
    if ((threadIdx.x & 31) == 0) scratch[threadIdx.x >> 5] = v;
    __syncthreads();
    float total = 0.0f;
    for (int w = 0; w < warps; ++w) total += scratch[w];
    return total;
}

// LayerNorm of a row held in registers (`v`, MAX_PER_THREAD strided slots per thread): two passes
// around the mean, as the reference. Writes act_t `out` and, when `keep` is set, FP32 `keep`.
__device__ void norm_row(float* v, int d, const float* w, const float* b, float eps, float* scratch,
                         act_t* out, float* keep) {
    float s = 0.0f;
#pragma unroll
    for (int j = 0; j < MAX_PER_THREAD; ++j) {
        const int i = threadIdx.x + j * blockDim.x;
        if (i < d) s += v[j];
    }
    const float mean = block_sum(s, scratch) / (float)d;
    float c = 0.0f;
#pragma unroll
    for (int j = 0; j < MAX_PER_THREAD; ++j) {
        const int i = threadIdx.x + j * blockDim.x;
        if (i < d) c += (v[j] - mean) * (v[j] - mean);
    }
    const float inv = 1.0f / sqrtf(block_sum(c, scratch) / (float)d + eps);
#pragma unroll
    for (int j = 0; j < MAX_PER_THREAD; ++j) {
        const int i = threadIdx.x + j * blockDim.x;
        if (i < d) {
            float y = (v[j] - mean) * inv * w[i];
            if (b) y += b[i];
            v[j] = y;
            if (out) st(out + i, y);
            if (keep) keep[i] = y;
        }
    }
}

// x[t] = LN(embedding[ids[t]]); h[t] = x[t] as act_t (layer 0 has no attention norm). One block
// per token.
extern "C" __global__ void embed_norm(const int* ids, const act_t* table, const float* w,
                                      const float* b, float eps, int d, float* x, act_t* h) {
    __shared__ float scratch[32];
    const long t = blockIdx.x;
    const act_t* row = table + (long)ids[t] * d;
    float v[MAX_PER_THREAD];
#pragma unroll
    for (int j = 0; j < MAX_PER_THREAD; ++j) {
        const int i = threadIdx.x + j * blockDim.x;
        v[j] = i < d ? ld(row + i) : 0.0f;
    }
    norm_row(v, d, w, b, eps, scratch, h + t * d, x + t * d);
}

// x[t] += y[t] (+ ybias); then h[t] = LN(x[t]) when `w` is given (the next sublayer's norm).
// One block per token; the residual add and the norm share one pass over x.
extern "C" __global__ void add_norm(float* x, const act_t* y, const float* ybias, const float* w,
                                    const float* b, float eps, int d, act_t* h) {
    __shared__ float scratch[32];
    const long t = blockIdx.x;
    float* xr = x + t * d;
    const act_t* yr = y + t * d;
    float v[MAX_PER_THREAD];
#pragma unroll
    for (int j = 0; j < MAX_PER_THREAD; ++j) {
        const int i = threadIdx.x + j * blockDim.x;
        if (i < d) {
            float s = xr[i] + ld(yr + i);
            if (ybias) s += ybias[i];
            xr[i] = s;
            v[j] = s;
        } else {
            v[j] = 0.0f;
        }
    }
    if (w) norm_row(v, d, w, b, eps, scratch, h + t * d, 0);
}

// The encoder's last residual add, its final norm, and the type embedding of the token's
// question: x[t] = LN_f(x[t] + y[t] + ybias) + type_emb[qtok[t]]; then h[t] = LN_1(x[t]) when
// `w1` is given (the first head layer's norm). One block per token.
extern "C" __global__ void final_norm(float* x, const act_t* y, const float* ybias,
                                      const float* fw, const float* fb, float eps,
                                      const float* type_emb, const int* qtok,
                                      const float* w1, const float* b1, float eps1, int d,
                                      act_t* h) {
    __shared__ float scratch[32];
    const long t = blockIdx.x;
    float* xr = x + t * d;
    const act_t* yr = y + t * d;
    const float* te = type_emb + (long)qtok[t] * d;
    float v[MAX_PER_THREAD];
#pragma unroll
    for (int j = 0; j < MAX_PER_THREAD; ++j) {
        const int i = threadIdx.x + j * blockDim.x;
        if (i < d) {
            float s = xr[i] + ld(yr + i);
            if (ybias) s += ybias[i];
            v[j] = s;
        } else {
            v[j] = 0.0f;
        }
    }
    norm_row(v, d, fw, fb, eps, scratch, 0, 0);
#pragma unroll
    for (int j = 0; j < MAX_PER_THREAD; ++j) {
        const int i = threadIdx.x + j * blockDim.x;
        if (i < d) {
            v[j] += te[i];
            xr[i] = v[j];
        }
    }
    if (w1) norm_row(v, d, w1, b1, eps1, scratch, h + t * d, 0);
}

// ModernBERT's MLP gate: out[t, c] = gelu(a + ba) * (g + bg) where in[t] = [a | g], width 2 * inter.
extern "C" __global__ void geglu(const act_t* in, const float* bias, int inter, long long n, act_t* out) {
    for (long e = blockIdx.x * (long)blockDim.x + threadIdx.x; e < n; e += (long)gridDim.x * blockDim.x) {
        const long t = e / inter;
        const int c = (int)(e - t * inter);
        float a = ld(in + t * 2 * inter + c);
        float g = ld(in + t * 2 * inter + inter + c);
        if (bias) {
            a += bias[c];
            g += bias[inter + c];
        }
        st(out + e, gelu(a) * g);
    }
}

// io[t, c] += bias[c], then ReLU when `relu` is set: the head's in_proj and linear1 epilogues.
extern "C" __global__ void bias_act(act_t* io, const float* bias, int width, long long n, int relu) {
    for (long e = blockIdx.x * (long)blockDim.x + threadIdx.x; e < n; e += (long)gridDim.x * blockDim.x) {
        float v = ld(io + e) + bias[e % width];
        if (relu) v = fmaxf(v, 0.0f);
        st(io + e, v);
    }
}

// Rotary embedding, rotate-half form, on q and k of token t's row of qkv [t, 3d] in place, at
// position `pos`; `cos`/`sin` are [positions, hd / 2] for the layer's theta. Adds the Wqkv bias
// first when there is one (to v too).
__device__ __forceinline__ void rope_token(act_t* qkv, const float* bias, const float* cos_t,
                                           const float* sin_t, int d, int hd, long t, int pos) {
    act_t* row = qkv + t * 3 * d;
    const int half = hd >> 1;
    const float* c_row = cos_t + (long)pos * half;
    const float* s_row = sin_t + (long)pos * half;
    for (int p = threadIdx.x; p < d; p += blockDim.x) {  // d pairs: d / 2 in q, d / 2 in k
        const int which = p / (d >> 1);
        const int r = p - which * (d >> 1);
        const int i = r % half;
        const int base = which * d + (r / half) * hd;
        float x1 = ld(row + base + i);
        float x2 = ld(row + base + i + half);
        if (bias) {
            x1 += bias[base + i];
            x2 += bias[base + i + half];
        }
        const float c = c_row[i], s = s_row[i];
        st(row + base + i, x1 * c - x2 * s);
        st(row + base + i + half, x2 * c + x1 * s);
    }
    if (bias)
        for (int i = threadIdx.x; i < d; i += blockDim.x) st(row + 2 * d + i, ld(row + 2 * d + i) + bias[2 * d + i]);
}

// RoPE at the token's index in its row (t - lo[t]). One block per token.
extern "C" __global__ void rope(act_t* qkv, const float* bias, const float* cos_t,
                                const float* sin_t, const int* lo, int d, int hd) {
    const long t = blockIdx.x;
    rope_token(qkv, bias, cos_t, sin_t, d, hd, t, (int)(t - lo[t]));
}

// RoPE at the token's position id (the parallel layout). One block per token.
extern "C" __global__ void rope_pos(act_t* qkv, const float* bias, const float* cos_t,
                                    const float* sin_t, const int* pos, int d, int hd) {
    const long t = blockIdx.x;
    rope_token(qkv, bias, cos_t, sin_t, d, hd, t, pos[t]);
}

// The key range a group of 16 queries starting at q0 visits: from the window's start, rounded
// down to a multiple of 16, to the end of its row's 16-aligned span. Rows start at multiples of
// 16, so the chunks are the same counted from the row's start wherever the row sits.
__device__ __forceinline__ void key_range(const int* lo, const int* hi, int q0, int hw, int* kb, int* ke) {
    const int s = lo[q0], e = hi[q0];
    const int span_end = s + ((e - s + 15) & ~15);
    *kb = max(s, q0 - hw) & ~15;
    *ke = (min(span_end, q0 + 16 + hw) + 15) & ~15;
}

// The parallel layout's mask: query (lo_q, hi_q, pos_q, opt_q) sees key k when k is in its row,
// not in another option than the query's (option 0 is shared), and within `hw` of it in position
// ids. Reads pos[k] and opt[k] only for a key of the row.
__device__ __forceinline__ bool parallel_key(int k, int lo_q, int hi_q, int pos_q, int opt_q,
                                             const int* pos, const int* opt, int hw) {
    if (k < lo_q || k >= hi_q) return false;
    const int opt_k = opt[k];
    if (opt_q > 0 && opt_k > 0 && opt_k != opt_q) return false;
    return abs(pos_q - pos[k]) <= hw;
}

// Attention over unpadded rows, one thread per query, FP32 math: the FP32 path and the fallback
// for head sizes the tensor-core kernel does not take. Query q sees key k when both are in the
// same row (lo[q] <= k < hi[q]) and |q - k| <= hw (hw is huge on global layers); with PAR (the
// parallel layout), when parallel_key says so, over a key range widened by the row's reach.
// Online softmax over 16-key chunks. qkv [t, 3d]; out [t, d]. Grid (cap / 64, heads), block 64.
template <int HD, bool PAR>
__device__ __forceinline__ void attention_simple_body(const act_t* qkv, const int* lo,
                                                      const int* hi, const int* pos,
                                                      const int* opt, const int* shift, int n_tok,
                                                      int d, float scale, int hw, act_t* out) {
    const int q = blockIdx.x * blockDim.x + threadIdx.x;
    if (q >= n_tok) return;
    const int head = blockIdx.y;
    const long ld3 = 3L * d;
    int kb, ke;
    key_range(lo, hi, q & ~15, PAR ? hw + shift[q & ~15] : hw, &kb, &ke);
    const int lo_q = lo[q], hi_q = hi[q];
    const int pos_q = PAR ? pos[q] : 0, opt_q = PAR ? opt[q] : 0;
    float qv[HD], acc[HD];
    const act_t* qp = qkv + q * ld3 + head * HD;
#pragma unroll
    for (int i = 0; i < HD; ++i) {
        qv[i] = ld(qp + i);
        acc[i] = 0.0f;
    }
    float m = NEG_INF, l = 0.0f;
    for (int kc = kb; kc < ke; kc += 16) {
        float s[16];
        float mx = NEG_INF;
#pragma unroll
        for (int j = 0; j < 16; ++j) {
            const int k = kc + j;
            const bool valid = PAR ? parallel_key(k, lo_q, hi_q, pos_q, opt_q, pos, opt, hw)
                                   : k >= lo_q && k < hi_q && abs(q - k) <= hw;
            float dot = 0.0f;
            if (valid) {
                const act_t* kp = qkv + k * ld3 + d + head * HD;
#pragma unroll
                for (int i = 0; i < HD; ++i) dot += qv[i] * ld(kp + i);
                dot *= scale;
            }
            s[j] = valid ? dot : NEG_INF;
            mx = fmaxf(mx, s[j]);
        }
        const float m_new = fmaxf(m, mx);
        const float base = m_new == NEG_INF ? 0.0f : m_new;
        const float alpha = expf(m - base);
        m = m_new;
        l *= alpha;
#pragma unroll
        for (int i = 0; i < HD; ++i) acc[i] *= alpha;
#pragma unroll
        for (int j = 0; j < 16; ++j) {
            if (s[j] == NEG_INF) continue;  // never multiply a masked value: 0 * inf is NaN
            const float p = expf(s[j] - base);
            l += p;
            const act_t* vp = qkv + (long)(kc + j) * ld3 + 2 * d + head * HD;
#pragma unroll
            for (int i = 0; i < HD; ++i) acc[i] += p * ld(vp + i);
        }
    }
    const float inv = 1.0f / l;
    act_t* op = out + (long)q * d + head * HD;
#pragma unroll
    for (int i = 0; i < HD; ++i) st(op + i, acc[i] * inv);
}

template <int HD>
__global__ void attention_simple(const act_t* qkv, const int* lo, const int* hi, int n_tok, int d,
                                 float scale, int hw, act_t* out) {
    attention_simple_body<HD, false>(qkv, lo, hi, 0, 0, 0, n_tok, d, scale, hw, out);
}

// The parallel layout's attention_simple.
template <int HD>
__global__ void attention_simple_par(const act_t* qkv, const int* lo, const int* hi,
                                     const int* pos, const int* opt, const int* shift, int n_tok,
                                     int d, float scale, int hw, act_t* out) {
    attention_simple_body<HD, true>(qkv, lo, hi, pos, opt, shift, n_tok, d, scale, hw, out);
}

#ifdef KIME_HALF
__device__ __forceinline__ u32 pack2(half_t a, half_t b) { return (u32)a | ((u32)b << 16); }

// D = A * B + D on tensor cores: A 16x16 f16 (row), B 16x8 f16 (col), D 16x8 f32.
__device__ __forceinline__ void mma16816(float* c, const u32* a, u32 b0, u32 b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Attention on tensor cores (sm_80+), FP16 inputs, FP32 scores and softmax: each warp owns 16
// queries of one row and one head and walks its keys in chunks of 32, staged in shared memory.
// V rows outside the warp's row are staged as zeros and masked scores are -inf, so nothing from
// another row can reach a result (not even a NaN through 0 * NaN). Same mask and chunk start as
// attention_simple, PAR the parallel layout's as there. Grid (cap / (16 * WARPS), heads), block
// 32 * WARPS.
template <int HD, int WARPS, bool PAR>
__device__ __forceinline__ void attention_mma_body(const half_t* qkv, const int* lo, const int* hi,
                                                   const int* pos, const int* opt,
                                                   const int* shift, int n_tok, int d,
                                                   float scale, int hw, half_t* out) {
#if __CUDA_ARCH__ >= 800
    constexpr int KC = 32;       // keys per chunk
    constexpr int KS = HD + 8;   // shared row stride in halves: conflict-free fragment reads
    constexpr int V8 = HD / 8;   // 16-byte vectors per row
    __shared__ __align__(16) half_t k_s[WARPS][KC * KS];
    __shared__ __align__(16) half_t v_s[WARPS][KC * KS];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int g = lane >> 2, tig = lane & 3;
    const int q0 = (blockIdx.x * WARPS + warp) * 16;
    if (q0 >= n_tok) return;  // warps never synchronise with each other
    const int head = blockIdx.y;
    const long ld3 = 3L * d;
    const half_t* Q = qkv + head * HD;
    const half_t* K = qkv + d + head * HD;
    const half_t* V = qkv + 2 * d + head * HD;
    int kb, ke;
    key_range(lo, hi, q0, PAR ? hw + shift[q0] : hw, &kb, &ke);
    const int row_lo = lo[q0], row_hi = hi[q0];
    const int qa = q0 + g, qb = q0 + g + 8;  // this thread's two query rows
    const int lo_a = lo[qa], hi_a = hi[qa], lo_b = lo[qb], hi_b = hi[qb];
    const int pos_a = PAR ? pos[qa] : 0, opt_a = PAR ? opt[qa] : 0;
    const int pos_b = PAR ? pos[qb] : 0, opt_b = PAR ? opt[qb] : 0;

    u32 qf[HD / 16][4];
#pragma unroll
    for (int kk = 0; kk < HD / 16; ++kk) {
        const int c = kk * 16 + tig * 2;
        qf[kk][0] = *(const u32*)(Q + qa * ld3 + c);
        qf[kk][1] = *(const u32*)(Q + qb * ld3 + c);
        qf[kk][2] = *(const u32*)(Q + qa * ld3 + c + 8);
        qf[kk][3] = *(const u32*)(Q + qb * ld3 + c + 8);
    }
    float o[HD / 8][4];
#pragma unroll
    for (int n = 0; n < HD / 8; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    float m_a = NEG_INF, m_b = NEG_INF, l_a = 0.0f, l_b = 0.0f;
    half_t* ks = k_s[warp];
    half_t* vs = v_s[warp];

    for (int kc = kb; kc < ke; kc += KC) {
        __syncwarp();
        for (int idx = lane; idx < KC * V8; idx += 32) {
            const int r = idx / V8, c = (idx - r * V8) * 8;
            const long key = kc + r;  // may run 16 past the row: the arena has slack rows
            uint4 kv = *(const uint4*)(K + key * ld3 + c);
            uint4 vv = make_uint4(0u, 0u, 0u, 0u);
            if (key >= row_lo && key < row_hi) vv = *(const uint4*)(V + key * ld3 + c);
            *(uint4*)(ks + r * KS + c) = kv;
            *(uint4*)(vs + r * KS + c) = vv;
        }
        __syncwarp();

        float s[KC / 8][4];
#pragma unroll
        for (int nt = 0; nt < KC / 8; ++nt) {
            s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
#pragma unroll
            for (int kk = 0; kk < HD / 16; ++kk) {
                const half_t* kr = ks + (nt * 8 + g) * KS + kk * 16 + tig * 2;
                mma16816(s[nt], qf[kk], *(const u32*)kr, *(const u32*)(kr + 8));
            }
        }
        float mx_a = NEG_INF, mx_b = NEG_INF;
#pragma unroll
        for (int nt = 0; nt < KC / 8; ++nt) {
#pragma unroll
            for (int j = 0; j < 2; ++j) {
                const int key = kc + nt * 8 + tig * 2 + j;
                const bool va = PAR ? parallel_key(key, lo_a, hi_a, pos_a, opt_a, pos, opt, hw)
                                    : key >= lo_a && key < hi_a && abs(qa - key) <= hw;
                const bool vb = PAR ? parallel_key(key, lo_b, hi_b, pos_b, opt_b, pos, opt, hw)
                                    : key >= lo_b && key < hi_b && abs(qb - key) <= hw;
                s[nt][j] = va ? s[nt][j] * scale : NEG_INF;
                s[nt][2 + j] = vb ? s[nt][2 + j] * scale : NEG_INF;
                mx_a = fmaxf(mx_a, s[nt][j]);
                mx_b = fmaxf(mx_b, s[nt][2 + j]);
            }
        }
        // The four lanes of a group hold one query row's 32 scores between them.
        mx_a = fmaxf(mx_a, __shfl_xor_sync(0xffffffffu, mx_a, 1));
        mx_a = fmaxf(mx_a, __shfl_xor_sync(0xffffffffu, mx_a, 2));
        mx_b = fmaxf(mx_b, __shfl_xor_sync(0xffffffffu, mx_b, 1));
        mx_b = fmaxf(mx_b, __shfl_xor_sync(0xffffffffu, mx_b, 2));
        const float mn_a = fmaxf(m_a, mx_a), mn_b = fmaxf(m_b, mx_b);
        const float base_a = mn_a == NEG_INF ? 0.0f : mn_a;
        const float base_b = mn_b == NEG_INF ? 0.0f : mn_b;
        const float al_a = expf(m_a - base_a), al_b = expf(m_b - base_b);
        m_a = mn_a;
        m_b = mn_b;
        l_a *= al_a;
        l_b *= al_b;
#pragma unroll
        for (int n = 0; n < HD / 8; ++n) {
            o[n][0] *= al_a;
            o[n][1] *= al_a;
            o[n][2] *= al_b;
            o[n][3] *= al_b;
        }
#pragma unroll
        for (int nt = 0; nt < KC / 8; ++nt) {
#pragma unroll
            for (int j = 0; j < 2; ++j) {
                s[nt][j] = expf(s[nt][j] - base_a);  // exp(-inf) = 0 for masked keys
                s[nt][2 + j] = expf(s[nt][2 + j] - base_b);
                l_a += s[nt][j];
                l_b += s[nt][2 + j];
            }
        }
        // O += P V: the score tiles of two 8-key n-tiles are the A fragment of one 16-key step.
#pragma unroll
        for (int kk = 0; kk < KC / 16; ++kk) {
            u32 pa[4];
            pa[0] = pack2(f2h(s[2 * kk][0]), f2h(s[2 * kk][1]));
            pa[1] = pack2(f2h(s[2 * kk][2]), f2h(s[2 * kk][3]));
            pa[2] = pack2(f2h(s[2 * kk + 1][0]), f2h(s[2 * kk + 1][1]));
            pa[3] = pack2(f2h(s[2 * kk + 1][2]), f2h(s[2 * kk + 1][3]));
            const half_t* vr = vs + (kk * 16 + tig * 2) * KS + g;
#pragma unroll
            for (int n = 0; n < HD / 8; ++n) {
                const u32 b0 = pack2(vr[n * 8], vr[KS + n * 8]);
                const u32 b1 = pack2(vr[8 * KS + n * 8], vr[9 * KS + n * 8]);
                mma16816(o[n], pa, b0, b1);
            }
        }
    }
    l_a += __shfl_xor_sync(0xffffffffu, l_a, 1);
    l_a += __shfl_xor_sync(0xffffffffu, l_a, 2);
    l_b += __shfl_xor_sync(0xffffffffu, l_b, 1);
    l_b += __shfl_xor_sync(0xffffffffu, l_b, 2);
    const float inv_a = 1.0f / l_a, inv_b = 1.0f / l_b;
    half_t* oa = out + (long)qa * d + head * HD + tig * 2;
    half_t* ob = out + (long)qb * d + head * HD + tig * 2;
#pragma unroll
    for (int n = 0; n < HD / 8; ++n) {
        *(u32*)(oa + n * 8) = pack2(f2h(o[n][0] * inv_a), f2h(o[n][1] * inv_a));
        *(u32*)(ob + n * 8) = pack2(f2h(o[n][2] * inv_b), f2h(o[n][3] * inv_b));
    }
#endif
}

template <int HD, int WARPS>
__global__ void __launch_bounds__(32 * WARPS) attention_mma(const half_t* qkv, const int* lo,
                                                            const int* hi, int n_tok, int d,
                                                            float scale, int hw, half_t* out) {
    attention_mma_body<HD, WARPS, false>(qkv, lo, hi, 0, 0, 0, n_tok, d, scale, hw, out);
}

// The parallel layout's attention_mma.
template <int HD, int WARPS>
__global__ void __launch_bounds__(32 * WARPS) attention_mma_par(const half_t* qkv, const int* lo,
                                                                const int* hi, const int* pos,
                                                                const int* opt, const int* shift,
                                                                int n_tok, int d, float scale,
                                                                int hw, half_t* out) {
    attention_mma_body<HD, WARPS, true>(qkv, lo, hi, pos, opt, shift, n_tok, d, scale, hw, out);
}
#endif  // KIME_HALF

// The scorer's LayerNorm at each option marker: out[k] = LN(x[mtok[k]]). One block per marker
// slot; slots past the batch's markers hold copies of marker 0.
extern "C" __global__ void gather_norm(const float* x, const int* mtok, const float* w,
                                       const float* b, float eps, int d, act_t* out) {
    __shared__ float scratch[32];
    const long k = blockIdx.x;
    const float* xr = x + (long)mtok[k] * d;
    float v[MAX_PER_THREAD];
#pragma unroll
    for (int j = 0; j < MAX_PER_THREAD; ++j) {
        const int i = threadIdx.x + j * blockDim.x;
        v[j] = i < d ? xr[i] : 0.0f;
    }
    norm_row(v, d, w, b, eps, scratch, out + k * d, 0);
}

// An embedding: out[r] = the mean of x over row r's slots, rfirst[r] up to hi[rfirst[r]] (x is
// the encoder's last hidden state, after its final norm). One block per row, a thread per column,
// the sum in double in slot order: the same bits in any batch. Rows past the batch repeat row 0;
// an empty row at the end of a full plan (rfirst == n) sums nothing, its count clamped at 1.
extern "C" __global__ void mean_pool(const float* x, const int* rfirst, const int* hi, int n,
                                     int d, float* out) {
    const long r = blockIdx.x;
    const int lo = rfirst[r], end = lo < n ? hi[lo] : lo;
    const double count = end > lo ? (double)(end - lo) : 1.0;
    for (int i = threadIdx.x; i < d; i += blockDim.x) {
        double s = 0.0;
        for (int t = lo; t < end; ++t) s += x[(long)t * d + i];
        out[r * d + i] = (float)(s / count);
    }
}

// One logit per marker: w3 . gelu(s1[k] + b1) + b3. One warp per marker, a fixed-order sum.
extern "C" __global__ void score(const act_t* s1, const float* b1, const float* w3, const float* b3,
                                 int d, int n, float* logits) {
    const int k = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    const int lane = threadIdx.x & 31;
    if (k >= n) return;
    const act_t* row = s1 + (long)k * d;
    float acc = 0.0f;
    for (int i = lane; i < d; i += 32) acc += w3[i] * gelu(ld(row + i) + b1[i]);
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
    if (lane == 0) logits[k] = acc + b3[0];
}

#define ACT_MAX 256  // hidden width and outputs of the act head a block holds in shared memory

// The act head of row r: features of the row's softmaxed logits, then
// softmax(W2 gelu(W0 [x[first token], features] + b0) + b2). `w0t` is W0 transposed,
// [d + 4, nh], so the block's threads read it coalesced. Rows without markers (padding) are
// skipped. One block per row slot.
extern "C" __global__ void act_head(const float* x, const float* logits, const int* mcu,
                                    const int* rfirst, const float* w0t, const float* b0,
                                    const float* w2, const float* b2, int d, int nh, int n_act,
                                    float* act) {
    __shared__ float feats[4];
    __shared__ float hid[ACT_MAX];
    __shared__ float outv[ACT_MAX];
    const int r = blockIdx.x;
    const int ma = mcu[r], mb = mcu[r + 1];
    if (ma == mb) return;
    if (threadIdx.x == 0) {
        const int n = mb - ma;
        float mx = logits[ma];
        for (int i = 1; i < n; ++i) mx = fmaxf(mx, logits[ma + i]);
        float sum = 0.0f;
        for (int i = 0; i < n; ++i) sum += expf(logits[ma + i] - mx);
        float top1 = 0.0f, top2 = 0.0f, ent = 0.0f;
        for (int i = 0; i < n; ++i) {
            const float p = expf(logits[ma + i] - mx) / sum;
            ent += p * logf(fmaxf(p, 1e-9f));
            if (p > top1) {
                top2 = top1;
                top1 = p;
            } else if (p > top2) {
                top2 = p;
            }
        }
        const float k = (float)(n > 2 ? n : 2);
        feats[0] = top1;
        feats[1] = n > 1 ? top1 - top2 : top1;
        feats[2] = -ent / logf(k);
        feats[3] = k / 255.0f;
    }
    __syncthreads();
    const float* xr = x + (long)rfirst[r] * d;
    for (int j = threadIdx.x; j < nh; j += blockDim.x) {
        float acc = b0[j];
        for (int i = 0; i < d; ++i) acc += w0t[(long)i * nh + j] * xr[i];
        for (int i = 0; i < 4; ++i) acc += w0t[(long)(d + i) * nh + j] * feats[i];
        hid[j] = gelu(acc);
    }
    __syncthreads();
    for (int c = threadIdx.x; c < n_act; c += blockDim.x) {
        float acc = b2[c];
        for (int j = 0; j < nh; ++j) acc += w2[(long)c * nh + j] * hid[j];
        outv[c] = acc;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        float mx = outv[0];
        for (int c = 1; c < n_act; ++c) mx = fmaxf(mx, outv[c]);
        float sum = 0.0f;
        for (int c = 0; c < n_act; ++c) sum += expf(outv[c] - mx);
        for (int c = 0; c < n_act; ++c) act[(long)r * n_act + c] = expf(outv[c] - mx) / sum;
    }
}
