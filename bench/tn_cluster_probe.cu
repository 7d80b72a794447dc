// What one stage of TensorNet's few-atom evaluation costs in two designs (standalone; nvcc -O3
// -arch=sm_90 bench/tn_cluster_probe.cu -o tn_cluster_probe; scripts/gpu-test.sh cluster-probe).
// A stage here is what dominates a layer: a channel linear over an atom's 1 + 3 + 6 components
// (rows ordered I, A, S; k = F = 128 inputs, F outputs, one weight matrix per part) followed by a
// step per atom channel.
//  - chain: one programmatic dependent launch per stage, as the library runs it now: blocks of 64
//    rows x 8 outputs, the block's weights copied to shared memory before the wait, the rows read
//    from global memory (L2) after it.
//  - cluster AG x CG: one launch for all stages; each batch (molecule) is one thread-block cluster
//    of AG x CG blocks, block (ag, cg) owning the rows of atom group ag and the outputs of channel
//    group cg, its weight columns resident in shared memory; a stage reads its rows' inputs from
//    the shared memory of its atom group's CG blocks (distributed shared memory) and ends at a
//    cluster barrier. 1 x 8 and 1 x 16: every block reads every row; 2 x 4 and 4 x 4: a half or a
//    quarter of them. "barrier": a stage of 1 x 16 without the linear.
//  - push AG x CG: the same clusters, but each block holds the full rows (all F channels) of its
//    atom group in its own shared memory, so a linear reads only local shared memory, and stores its
//    results into the next buffer of every block of its atom group before the one cluster barrier of
//    the stage. Three linears: a thread per row x 8 outputs (push; "16x1 sync": 16 x 1 with
//    __syncthreads instead of the cluster barrier, so the blocks' own arithmetic; "16x1 bar": the
//    barrier alone), a warp per 16-row tile x 8 outputs on the tensor cores as three TF32 products
//    (push_tc), a warp per 4 rows x C outputs with k split over its lanes (push2).
// Prints each design's time per stage, from graph replays of S = 1 and S = 17 stages (argument:
// replays per timing, default 2,000; a few for compute-sanitizer).
#include <cooperative_groups.h>
#include <cuda_runtime.h>
#include <cstdio>
#include <cmath>
#include <cstdlib>
#include <vector>

namespace cg = cooperative_groups;

static int g_reps = 2000; // graph replays per timing

#define CHECK(x)                                                                                     \
  do {                                                                                               \
    cudaError_t e_ = (x);                                                                            \
    if (e_ != cudaSuccess) {                                                                         \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));           \
      exit(1);                                                                                       \
    }                                                                                                \
  } while (0)

constexpr int F = 128;

__device__ __forceinline__ int part_of_row(int r, int n) { return r < n ? 0 : (r < 4 * n ? 1 : 2); }
__device__ __forceinline__ float step_fn(float y) { return y / (1.0f + y * y); }
// acc[c] += the 4 inputs v times weight rows w, w + stride, w + 2 stride, w + 3 stride (CH outputs each)
template <int CH> __device__ __forceinline__ void fma4(float (&acc)[CH], const float4 v, const float* w, int stride) {
  const float xv[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int j = 0; j < 4; j++)
#pragma unroll
    for (int c = 0; c < CH; c++) acc[c] += xv[j] * w[j * stride + c];
}

// ---- chain: one launch per stage ----
__global__ void __launch_bounds__(128) k_chain(const float* __restrict__ W, const float* in, float* out, int n, int batches) {
  __shared__ float w[3][F][8];
  const int c0 = blockIdx.y * 8, R = 10 * n;
  for (int t = threadIdx.x; t < 3 * F * 8; t += 128) {
    const int p = t / (F * 8), k = t / 8 % F, c = t % 8;
    w[p][k][c] = W[(size_t)p * F * F + (size_t)k * F + c0 + c];
  }
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;");
  __syncthreads();
  const int r = blockIdx.x * 64 + threadIdx.x / 2, half = threadIdx.x % 2;
  if (r >= R * batches) return;
  const int p = part_of_row(r % R, n);
  const float4* x = reinterpret_cast<const float4*>(in + (size_t)r * F);
  float acc[4] = {0, 0, 0, 0};
#pragma unroll 4
  for (int k4 = 0; k4 < F / 4; k4++) {
    fma4(acc, x[k4], &w[p][4 * k4][4 * half], 8);
  }
  for (int c = 0; c < 4; c++) out[(size_t)r * F + c0 + 4 * half + c] = step_fn(acc[c]);
}

// ---- cluster: one launch, a cluster of AG x CG blocks per batch. Block (ag, cg) owns the rows of
// atom group ag (AG near-equal ranges of the batch's atoms; rows I, A, S of those atoms in that
// order) and the outputs of channel group cg; a linear reads its rows' inputs from the CG blocks of
// its atom group (AG = 1: every block reads every row). work = 0: the barriers alone. ----
template <int AG, int CG>
__global__ void __launch_bounds__(256) k_cluster(const float* __restrict__ W, float* out, int n, int stages, int work) {
  constexpr int C = F / CG, CH = C > 8 ? 8 : C, SPLIT = C / CH;
  extern __shared__ float4 smem4[];
  float* sm = reinterpret_cast<float*>(smem4);
  cg::cluster_group cl = cg::this_cluster();
  const int q = (int)cl.block_rank(), b = blockIdx.x / (AG * CG), ag = q / CG, cgr = q % CG;
  const int a0 = ag * n / AG, na = (ag + 1) * n / AG - a0, Ra = 10 * na, Rmax = 10 * ((n + AG - 1) / AG);
  float* w = sm;                 // [3][F][C]
  float* buf = sm + 3 * F * C;   // [2][Rmax][C]
  for (int t = threadIdx.x; t < 3 * F * C; t += blockDim.x) {
    const int p = t / (F * C), k = t / C % F, c = t % C;
    w[t] = W[(size_t)p * F * F + (size_t)k * F + cgr * C + c];
  }
  for (int t = threadIdx.x; t < Ra * C; t += blockDim.x) buf[t] = 0.01f * (float)((t * 7 + q * 13 + b) % 17) - 0.08f;
  cl.sync();
  for (int s = 0; s < stages; s++) {
    const float* src = buf + (s & 1) * Rmax * C;
    float* dst = buf + ((s + 1) & 1) * Rmax * C;
    for (int t = threadIdx.x; work && t < Ra * SPLIT; t += blockDim.x) {
      const int r = t / SPLIT, c0 = t % SPLIT * CH, p = part_of_row(r, na);
      const float* wp = w + (size_t)p * F * C + c0;
      float acc[CH];
#pragma unroll
      for (int c = 0; c < CH; c++) acc[c] = 0;
      for (int o = 0; o < CG; o++) {
        const float4* xs = reinterpret_cast<const float4*>(cl.map_shared_rank(const_cast<float*>(src), ag * CG + o) + (size_t)r * C);
#pragma unroll 2
        for (int k4 = 0; k4 < C / 4; k4++) {
          fma4(acc, xs[k4], wp + (size_t)(o * C + 4 * k4) * C, C);
        }
      }
#pragma unroll
      for (int c = 0; c < CH; c++) dst[r * C + c0 + c] = step_fn(acc[c]);
    }
    cl.sync();
  }
  const float* fin = buf + (stages & 1) * Rmax * C;
  for (int t = threadIdx.x; t < Ra * C; t += blockDim.x)
    out[((size_t)b * 10 * n + 10 * a0 + t / C) * F + cgr * C + t % C] = fin[t];
}


// ---- push AG x CG: one launch, a cluster of AG x CG blocks per batch as above, but each block keeps
// the full rows (all F channels) of its atom group in its own shared memory (two buffers, rows padded
// to F + 4 floats), so a linear reads only local shared memory, then stores its results (after the
// step) into the next buffer of every block of its atom group (st.shared::cluster) before one cluster
// barrier. AG = 16, CG = 1 needs no remote stores (every block holds all channels of its rows).
// Push: a block's part of the batch, its weight columns ([3][F][C]) and first rows, in shared memory. ----
template <int AG, int CG> struct Push {
  static constexpr int C = F / CG, LD = F + 4;
  int b, ag, cgr, a0, na, Ra, Rmax;
  float *w, *buf; // [3][F][C], [2][Rmax][LD]
  __device__ Push(const float* __restrict__ W, float* sm, int n, cg::cluster_group& cl) {
    const int q = (int)cl.block_rank();
    b = blockIdx.x / (AG * CG), ag = q / CG, cgr = q % CG;
    a0 = ag * n / AG, na = (ag + 1) * n / AG - a0, Ra = 10 * na, Rmax = 10 * ((n + AG - 1) / AG);
    w = sm, buf = sm + 3 * F * C;
    for (int t = threadIdx.x; t < 3 * F * C; t += blockDim.x) {
      const int p = t / (F * C), k = t / C % F, c = t % C;
      w[t] = W[(size_t)p * F * F + (size_t)k * F + cgr * C + c];
    }
    for (int t = threadIdx.x; t < Ra * F; t += blockDim.x) buf[t / F * LD + t % F] = 0.01f * (float)((t * 7 + ag * 13 + b) % 17) - 0.08f;
    cl.sync();
  }
  // the block's outputs of the last stage into out (rows of 10 n per batch, F channels)
  __device__ void finish(float* out, int n, int stages) const {
    const float* fin = buf + (stages & 1) * Rmax * LD;
    for (int t = threadIdx.x; t < Ra * C; t += blockDim.x)
      out[((size_t)b * 10 * n + 10 * a0 + t / C) * F + cgr * C + t % C] = fin[t / C * LD + cgr * C + t % C];
  }
};

// push: a thread takes one row x 8 outputs over all of k and stores its 8 results as two float4 into
// each block of its atom group.
template <int AG, int CG>
__global__ void __launch_bounds__(256) k_push(const float* __restrict__ W, float* out, int n, int stages, int work, int cluster_barrier) {
  constexpr int C = F / CG, C8 = C / 8, LD = F + 4;
  extern __shared__ float4 smem4[];
  cg::cluster_group cl = cg::this_cluster();
  const Push<AG, CG> P(W, reinterpret_cast<float*>(smem4), n, cl);
  const int cgr = P.cgr, na = P.na, Ra = P.Ra, Rmax = P.Rmax;
  const float* w = P.w;
  float* buf = P.buf;
  float* peer[CG];
#pragma unroll
  for (int o = 0; o < CG; o++) peer[o] = cl.map_shared_rank(buf, P.ag * CG + o);
  for (int s = 0; s < stages; s++) {
    const int si = (s & 1) * Rmax * LD, di = ((s + 1) & 1) * Rmax * LD;
    for (int t = threadIdx.x; work && t < Ra * C8; t += blockDim.x) {
      const int r = t % Ra, c0 = t / Ra * 8, p = part_of_row(r, na);
      const float4* x = reinterpret_cast<const float4*>(buf + si + r * LD);
      const float* wp = w + (size_t)p * F * C + c0;
      float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
#pragma unroll 4
      for (int k4 = 0; k4 < F / 4; k4++) fma4(acc, x[k4], wp + 4 * k4 * C, C);
      float4 lo = make_float4(step_fn(acc[0]), step_fn(acc[1]), step_fn(acc[2]), step_fn(acc[3]));
      float4 hi = make_float4(step_fn(acc[4]), step_fn(acc[5]), step_fn(acc[6]), step_fn(acc[7]));
      const int off = di + r * LD + cgr * C + c0;
#pragma unroll
      for (int o = 0; o < CG; o++) {
        *reinterpret_cast<float4*>(peer[o] + off) = lo;
        *reinterpret_cast<float4*>(peer[o] + off + 4) = hi;
      }
    }
    if (cluster_barrier) cl.sync();
    else __syncthreads();
  }
  P.finish(out, n, stages);
}

// ---- push_tc: push, the linear on the tensor cores as three TF32 products (x_lo w_hi + x_hi w_lo +
// x_hi w_hi, both split as they are read): a warp per 16-row tile of one part x 8 outputs, k in steps
// of 8 (mma.sync m16n8k8). ----
__device__ __forceinline__ unsigned tf32r(float x) {
  unsigned r;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
  return r;
}
__device__ __forceinline__ void mma8(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
  asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <int AG, int CG>
__global__ void __launch_bounds__(256) k_push_tc(const float* __restrict__ W, float* out, int n, int stages) {
  constexpr int C = F / CG, LD = F + 4, NT = C / 8;
  extern __shared__ float4 smem4[];
  cg::cluster_group cl = cg::this_cluster();
  const Push<AG, CG> P(W, reinterpret_cast<float*>(smem4), n, cl);
  const int cgr = P.cgr, na = P.na, Ra = P.Ra, Rmax = P.Rmax;
  const float* w = P.w;
  float* buf = P.buf;
  float* peer[CG];
#pragma unroll
  for (int o = 0; o < CG; o++) peer[o] = cl.map_shared_rank(buf, P.ag * CG + o);
  const int mt0 = (na + 15) / 16, mt1 = (3 * na + 15) / 16, mt2 = (6 * na + 15) / 16, items = (mt0 + mt1 + mt2) * NT;
  const int lane = threadIdx.x % 32, g = lane / 4, tq = lane % 4;
  for (int s = 0; s < stages; s++) {
    const float* src = buf + (s & 1) * Rmax * LD;
    const int di = ((s + 1) & 1) * Rmax * LD;
    for (int it = threadIdx.x / 32; it < items; it += blockDim.x / 32) {
      const int mt = it / NT, nt = it % NT;
      int p, rs, re, r0;
      if (mt < mt0) p = 0, rs = 0, re = na, r0 = mt * 16;
      else if (mt < mt0 + mt1) p = 1, rs = na, re = 4 * na, r0 = na + (mt - mt0) * 16;
      else p = 2, rs = 4 * na, re = 10 * na, r0 = 4 * na + (mt - mt0 - mt1) * 16;
      (void)rs;
      const int ra = r0 + g, rb = r0 + g + 8;
      const float* xa = src + (ra < re ? ra : r0) * LD;
      const float* xb = src + (rb < re ? rb : r0) * LD;
      const float* wp = w + (size_t)p * F * C + nt * 8 + g;
      float d[4] = {0, 0, 0, 0};
#pragma unroll 4
      for (int k0 = 0; k0 < F; k0 += 8) {
        const float av[4] = {xa[k0 + tq], xb[k0 + tq], xa[k0 + tq + 4], xb[k0 + tq + 4]};
        const float bv[2] = {wp[(k0 + tq) * C], wp[(k0 + tq + 4) * C]};
        unsigned ah[4], al[4], bh[2], bl[2];
#pragma unroll
        for (int j = 0; j < 4; j++) ah[j] = tf32r(av[j]), al[j] = tf32r(av[j] - __uint_as_float(ah[j]));
#pragma unroll
        for (int j = 0; j < 2; j++) bh[j] = tf32r(bv[j]), bl[j] = tf32r(bv[j] - __uint_as_float(bh[j]));
        mma8(d, al, bh[0], bh[1]);
        mma8(d, ah, bl[0], bl[1]);
        mma8(d, ah, bh[0], bh[1]);
      }
      const int col = cgr * C + nt * 8 + 2 * tq;
#pragma unroll
      for (int o = 0; o < CG; o++) {
        if (ra < re) *reinterpret_cast<float2*>(peer[o] + di + ra * LD + col) = make_float2(step_fn(d[0]), step_fn(d[1]));
        if (rb < re) *reinterpret_cast<float2*>(peer[o] + di + rb * LD + col) = make_float2(step_fn(d[2]), step_fn(d[3]));
      }
    }
    cl.sync();
  }
  P.finish(out, n, stages);
}

// ---- push2: push with a tiled linear: a warp per tile of 4 rows (of one part) x C outputs, its lane
// (ks, c4) taking outputs 4 c4 .. 4 c4 + 3 of the 4 rows over every KS-th group of 4 k (KS = 32 / (C /
// 4); 16 multiply-adds per 8 float4 loads), the KS partial sums added by xor shuffles, lane ks < 4
// then storing row ks of the tile to the atom group's blocks. ----
template <int AG, int CG>
__global__ void __launch_bounds__(512) k_push2(const float* __restrict__ W, float* out, int n, int stages) {
  constexpr int C = F / CG, LD = F + 4, C4 = C / 4, KS = 32 / C4;
  static_assert(C4 <= 32 && 32 % C4 == 0, "a warp's lanes cover the outputs");
  extern __shared__ float4 smem4[];
  cg::cluster_group cl = cg::this_cluster();
  const Push<AG, CG> P(W, reinterpret_cast<float*>(smem4), n, cl);
  const int cgr = P.cgr, na = P.na, Ra = P.Ra, Rmax = P.Rmax;
  const float* w = P.w;
  float* buf = P.buf;
  float* peer[CG];
#pragma unroll
  for (int o = 0; o < CG; o++) peer[o] = cl.map_shared_rank(buf, P.ag * CG + o);
  const int t0 = (na + 3) / 4, t1 = (3 * na + 3) / 4, t2 = (6 * na + 3) / 4, tiles = t0 + t1 + t2;
  const int lane = threadIdx.x % 32, c4 = lane % C4, ks = lane / C4;
  for (int s = 0; s < stages; s++) {
    const float* src = buf + (s & 1) * Rmax * LD;
    const int di = ((s + 1) & 1) * Rmax * LD;
    for (int tile = threadIdx.x / 32; tile < tiles; tile += blockDim.x / 32) {
      int p, re, r0;
      if (tile < t0) p = 0, re = na, r0 = 4 * tile;
      else if (tile < t0 + t1) p = 1, re = 4 * na, r0 = na + 4 * (tile - t0);
      else p = 2, re = 10 * na, r0 = 4 * na + 4 * (tile - t0 - t1);
      const float* xr[4];
#pragma unroll
      for (int i = 0; i < 4; i++) xr[i] = src + (r0 + i < re ? r0 + i : r0) * LD;
      const float* wp = w + (size_t)p * F * C + 4 * c4;
      float acc[4][4] = {};
#pragma unroll 2
      for (int k = 4 * ks; k < F; k += 4 * KS) {
        float4 xv[4], wv[4];
#pragma unroll
        for (int i = 0; i < 4; i++) xv[i] = *reinterpret_cast<const float4*>(xr[i] + k);
#pragma unroll
        for (int j = 0; j < 4; j++) wv[j] = *reinterpret_cast<const float4*>(wp + (size_t)(k + j) * C);
#pragma unroll
        for (int i = 0; i < 4; i++) {
          const float xs[4] = {xv[i].x, xv[i].y, xv[i].z, xv[i].w};
#pragma unroll
          for (int j = 0; j < 4; j++) {
            acc[i][0] += xs[j] * wv[j].x, acc[i][1] += xs[j] * wv[j].y;
            acc[i][2] += xs[j] * wv[j].z, acc[i][3] += xs[j] * wv[j].w;
          }
        }
      }
#pragma unroll
      for (int m = C4; m < 32; m *= 2)
#pragma unroll
        for (int i = 0; i < 4; i++)
#pragma unroll
          for (int c = 0; c < 4; c++) acc[i][c] += __shfl_xor_sync(0xffffffffu, acc[i][c], m);
      for (int i = ks; i < 4; i += KS) {
        const int r = r0 + i;
        if (r >= re) continue;
        float v[4];
#pragma unroll
        for (int ii = 0; ii < 4; ii++)
          if (ii == i) v[0] = acc[ii][0], v[1] = acc[ii][1], v[2] = acc[ii][2], v[3] = acc[ii][3];
        const float4 o4 = make_float4(step_fn(v[0]), step_fn(v[1]), step_fn(v[2]), step_fn(v[3]));
        const int off = di + r * LD + cgr * C + 4 * c4;
#pragma unroll
        for (int o = 0; o < CG; o++) *reinterpret_cast<float4*>(peer[o] + off) = o4;
      }
    }
    cl.sync();
  }
  P.finish(out, n, stages);
}

static float time_graph(cudaGraphExec_t g, cudaStream_t st, int reps) {
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  for (int i = 0; i < 20 && i < reps; i++) CHECK(cudaGraphLaunch(g, st));
  CHECK(cudaEventRecord(a, st));
  for (int i = 0; i < reps; i++) CHECK(cudaGraphLaunch(g, st));
  CHECK(cudaEventRecord(b, st));
  CHECK(cudaEventSynchronize(b));
  float ms = 0;
  CHECK(cudaEventElapsedTime(&ms, a, b));
  CHECK(cudaEventDestroy(a));
  CHECK(cudaEventDestroy(b));
  return 1000.0f * ms / reps;
}

// the launches that launch() makes on st, captured into a graph: µs per replay
template <typename Launch> static float time_captured(cudaStream_t st, Launch launch) {
  cudaGraph_t graph;
  CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
  launch();
  CHECK(cudaStreamEndCapture(st, &graph));
  cudaGraphExec_t g;
  CHECK(cudaGraphInstantiate(&g, graph, 0));
  const float t = time_graph(g, st, g_reps);
  CHECK(cudaGraphExecDestroy(g));
  CHECK(cudaGraphDestroy(graph));
  return t;
}

static float chain_us(const float* W, float* x0, float* x1, int n, int batches, int stages, cudaStream_t st) {
  const int rows = 10 * n * batches;
  return time_captured(st, [&] {
    for (int s = 0; s < stages; s++) {
      cudaLaunchConfig_t cfg = {};
      cfg.gridDim = dim3((rows + 63) / 64, F / 8);
      cfg.blockDim = dim3(128);
      cfg.stream = st;
      cudaLaunchAttribute attr[1];
      attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
      attr[0].val.programmaticStreamSerializationAllowed = 1;
      cfg.attrs = attr;
      cfg.numAttrs = s > 0 ? 1 : 0;
      CHECK(cudaLaunchKernelEx(&cfg, k_chain, W, (const float*)(s & 1 ? x1 : x0), s & 1 ? x0 : x1, n, batches));
    }
  });
}



// A launch of CL-block clusters, one per batch, into cfg (attr holds its cluster attribute); false
// where the GPU cannot run such a cluster of fn.
static bool cluster_launch(cudaLaunchConfig_t& cfg, cudaLaunchAttribute (&attr)[1], const void* fn, int CL, int batches, int threads,
                           size_t smem, cudaStream_t st) {
  CHECK(cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
  if (CL > 8) CHECK(cudaFuncSetAttribute(fn, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  cfg = {};
  cfg.gridDim = dim3(CL * batches);
  cfg.blockDim = dim3(threads);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = st;
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = CL;
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  int clusters = 0;
  if (cudaOccupancyMaxActiveClusters(&clusters, fn, &cfg) != cudaSuccess || clusters == 0) {
    cudaGetLastError();
    return false;
  }
  return true;
}

template <int AG, int CG>
static float cluster_us(const float* W, float* out, int n, int batches, int stages, cudaStream_t st, int work = 1) {
  constexpr int C = F / CG, CL = AG * CG;
  const size_t smem = sizeof(float) * (3 * F * C + 2 * 10 * (size_t)((n + AG - 1) / AG) * C);
  cudaLaunchConfig_t cfg;
  cudaLaunchAttribute attr[1];
  if (!cluster_launch(cfg, attr, (const void*)k_cluster<AG, CG>, CL, batches, 256, smem, st)) return -1;
  return time_captured(st, [&] { CHECK(cudaLaunchKernelEx(&cfg, k_cluster<AG, CG>, W, out, n, stages, work)); });
}

// µs per stage of k_cluster<AG, CG>: S = 17 less S = 1, over 16; -1 where such clusters cannot run
template <int AG, int CG>
static float cluster_stage_us(const float* W, float* out, int n, int batches, cudaStream_t st, int work = 1) {
  const float a = cluster_us<AG, CG>(W, out, n, batches, 17, st, work), b = cluster_us<AG, CG>(W, out, n, batches, 1, st, work);
  return a < 0 || b < 0 ? -1 : (a - b) / 16;
}


template <int AG, int CG>
static float push_us(const float* W, float* out, int n, int batches, int stages, cudaStream_t st, int work, int cb, int tc = 0) {
  constexpr int C = F / CG, CL = AG * CG;
  const size_t smem = sizeof(float) * (3 * F * C + 2 * (size_t)(10 * ((n + AG - 1) / AG)) * (F + 4));
  if (smem > 227 * 1024) return -1;
  const void* fn = tc == 2 ? (const void*)k_push2<AG, CG> : tc ? (const void*)k_push_tc<AG, CG> : (const void*)k_push<AG, CG>;
  cudaLaunchConfig_t cfg;
  cudaLaunchAttribute attr[1];
  if (!cluster_launch(cfg, attr, fn, CL, batches, tc == 2 ? 512 : 256, smem, st)) return -1;
  if (tc == 2) {
    return time_captured(st, [&] { CHECK(cudaLaunchKernelEx(&cfg, k_push2<AG, CG>, W, out, n, stages)); });
  }
  if (tc) return time_captured(st, [&] { CHECK(cudaLaunchKernelEx(&cfg, k_push_tc<AG, CG>, W, out, n, stages)); });
  return time_captured(st, [&] { CHECK(cudaLaunchKernelEx(&cfg, k_push<AG, CG>, W, out, n, stages, work, cb)); });
}
template <int AG, int CG>
static float push_stage_us(const float* W, float* out, int n, int batches, cudaStream_t st, int work = 1, int cb = 1, int tc = 0) {
  const float a = push_us<AG, CG>(W, out, n, batches, 17, st, work, cb, tc), b = push_us<AG, CG>(W, out, n, batches, 1, st, work, cb, tc);
  return a < 0 || b < 0 ? -1 : (a - b) / 16;
}

int main(int argc, char** argv) {
  if (argc > 1 && (g_reps = atoi(argv[1])) < 1) {
    fprintf(stderr, "usage: tn_cluster_probe [replays per timing, at least 1]\n");
    return 2;
  }
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  printf("%s, %d SMs\n", prop.name, prop.multiProcessorCount);
  const int max_atoms = 64, max_batches = 100;
  const size_t wcount = 3 * (size_t)F * F, xcount = 10 * (size_t)max_atoms * max_batches * F;
  std::vector<float> hw(wcount), hx(xcount);
  for (size_t i = 0; i < wcount; i++) hw[i] = 0.02f * (float)((i * 2654435761u) % 101) / 101.0f - 0.01f;
  for (size_t i = 0; i < xcount; i++) hx[i] = 0.1f * (float)((i * 40503u) % 97) / 97.0f - 0.05f;
  float *W, *x0, *x1;
  CHECK(cudaMalloc(&W, wcount * sizeof(float)));
  CHECK(cudaMalloc(&x0, xcount * sizeof(float)));
  CHECK(cudaMalloc(&x1, xcount * sizeof(float)));
  CHECK(cudaMemcpy(W, hw.data(), wcount * sizeof(float), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(x0, hx.data(), xcount * sizeof(float), cudaMemcpyHostToDevice));
  cudaStream_t st;
  CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  printf("µs per stage (a channel linear of 10 n rows x %d x %d + a step), from S = 17 less S = 1, graph replays\n", F, F);
  printf("%6s %8s | %8s | %8s %8s | %8s %8s | %8s\n", "atoms", "batches", "chain", "1x8", "1x16", "2x4", "4x4", "barrier");
  const int cases[][2] = {{22, 1}, {64, 1}, {22, 10}, {22, 100}};
  for (auto& cs : cases) {
    const int n = cs[0], bt = cs[1];
    const float ch = (chain_us(W, x0, x1, n, bt, 17, st) - chain_us(W, x0, x1, n, bt, 1, st)) / 16;
    printf("%6d %8d | %8.2f | %8.2f %8.2f | %8.2f %8.2f | %8.2f   (one stage's launch: cluster 1x16 %.2f µs)\n", n, bt, ch,
           cluster_stage_us<1, 8>(W, x1, n, bt, st), cluster_stage_us<1, 16>(W, x1, n, bt, st), cluster_stage_us<2, 4>(W, x1, n, bt, st),
           cluster_stage_us<4, 4>(W, x1, n, bt, st), cluster_stage_us<1, 16>(W, x1, n, bt, st, 0), cluster_us<1, 16>(W, x1, n, bt, 1, st));
  }
  printf("push (full rows local, results stored to the atom group's blocks, one cluster barrier per stage)\n");
  printf("%6s %8s | %8s %8s %8s %8s | %10s %10s\n", "atoms", "batches", "2x8", "4x4", "8x2", "16x1", "16x1 sync", "16x1 bar");
  for (auto& cs : cases) {
    const int n = cs[0], bt = cs[1];
    printf("%6d %8d | %8.2f %8.2f %8.2f %8.2f | %10.2f %10.2f\n", n, bt, push_stage_us<2, 8>(W, x1, n, bt, st),
           push_stage_us<4, 4>(W, x1, n, bt, st), push_stage_us<8, 2>(W, x1, n, bt, st), push_stage_us<16, 1>(W, x1, n, bt, st),
           push_stage_us<16, 1>(W, x1, n, bt, st, 1, 0), push_stage_us<16, 1>(W, x1, n, bt, st, 0, 1));
  }
  { // the two push kernels compute the same values (TF32 x 3 against float32 sums): max difference after 3 stages
    const size_t cnt = 10 * (size_t)22 * F;
    std::vector<float> ha(cnt), hb(cnt);
    push_us<4, 4>(W, x1, 22, 1, 3, st, 1, 1, false);
    CHECK(cudaMemcpy(ha.data(), x1, cnt * sizeof(float), cudaMemcpyDeviceToHost));
    for (int v = 1; v <= 2; v++) {
      push_us<4, 4>(W, x1, 22, 1, 3, st, 1, 1, v);
      CHECK(cudaMemcpy(hb.data(), x1, cnt * sizeof(float), cudaMemcpyDeviceToHost));
      double md = 0, mx = 0;
      for (size_t i = 0; i < cnt; i++) md = fmax(md, fabs((double)ha[i] - hb[i])), mx = fmax(mx, fabs((double)ha[i]));
      printf("push vs %s, 4x4, 22 atoms, 3 stages: max |difference| %.3g (max |value| %.3g)\n", v == 1 ? "push_tc" : "push2", md, mx);
    }
  }
  printf("push_tc (the same, the linear as three TF32 products on the tensor cores)\n");
  printf("%6s %8s | %8s %8s %8s %8s\n", "atoms", "batches", "2x8", "4x4", "8x2", "16x1");
  for (auto& cs : cases) {
    const int n = cs[0], bt = cs[1];
    printf("%6d %8d | %8.2f %8.2f %8.2f %8.2f\n", n, bt, push_stage_us<2, 8>(W, x1, n, bt, st, 1, 1, true),
           push_stage_us<4, 4>(W, x1, n, bt, st, 1, 1, true), push_stage_us<8, 2>(W, x1, n, bt, st, 1, 1, true),
           push_stage_us<16, 1>(W, x1, n, bt, st, 1, 1, true));
  }
  printf("push2 (the same, a warp per 4 rows x C outputs, k split over its lanes)\n");
  printf("%6s %8s | %8s %8s %8s %8s\n", "atoms", "batches", "2x8", "4x4", "8x2", "16x1");
  for (auto& cs : cases) {
    const int n = cs[0], bt = cs[1];
    printf("%6d %8d | %8.2f %8.2f %8.2f %8.2f\n", n, bt, push_stage_us<2, 8>(W, x1, n, bt, st, 1, 1, 2),
           push_stage_us<4, 4>(W, x1, n, bt, st, 1, 1, 2), push_stage_us<8, 2>(W, x1, n, bt, st, 1, 1, 2),
           push_stage_us<16, 1>(W, x1, n, bt, st, 1, 1, 2));
  }
  CHECK(cudaDeviceSynchronize());
  return 0;
}
