/* Many rows (more than 256 per job): 128×128 register-blocked tiles, one per block, no split-K. */

/*
 * The same product for many rows: 128×128 tiles, k-steps of 8, 256 threads with 8×8 results each
 * (rows ty·4+i and 64+ty·4+i, columns likewise), so that each value loaded from shared memory
 * feeds 8 multiply-adds. Sums in k order, as in k_gemm.
 */
#define BIG_TILE 128
#define BIG_K 8
/* A 128×128 tile's results: thread (tx, ty) holds rows ty·4+i and 64+ty·4+i, columns likewise. */
template <typename real, int EPI>
__device__ __forceinline__ void store_big_tile(const GemmJob<real>& job, int row0, int col0, int tx, int ty, const real (&acc)[8][8]) {
#pragma unroll
    for (int r = 0; r < 8; r++) {
        const int gr = row0 + (r < 4 ? ty * 4 + r : 64 + ty * 4 + (r - 4));
        if (gr >= job.m) continue;
#pragma unroll
        for (int c = 0; c < 8; c++) {
            const int gc = col0 + (c < 4 ? tx * 4 + c : 64 + tx * 4 + (c - 4));
            if (gc < job.n) job.C[(size_t)gr * job.ldc + gc] = epilogue<real>(EPI, job, gr, gc, acc[r][c]);
        }
    }
}

template <typename real, bool TRANS_B, int EPI>
__global__ void __launch_bounds__(256) k_gemm_big(const GemmJob<real>* __restrict__ jobs) {
    const GemmJob<real> job = jobs[blockIdx.z];
    pdl_start();
    const int row0 = blockIdx.y * BIG_TILE, col0 = blockIdx.x * BIG_TILE;
    if (row0 >= job.m || col0 >= job.n) return;
    __shared__ __align__(16) real As[BIG_K][BIG_TILE];
    __shared__ __align__(16) real Bs[BIG_K][BIG_TILE];
    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
    real acc[8][8];
#pragma unroll
    for (int r = 0; r < 8; r++)
#pragma unroll
        for (int c = 0; c < 8; c++) acc[r][c] = 0;
    for (int k0 = 0; k0 < job.k; k0 += BIG_K) {
        /* A tile: 128 rows × 8 k, 4 values per thread (2 threads per row, 4 k each). */
        {
            const int r = threadIdx.x / 2, kq = (threadIdx.x % 2) * 4;
            const int gr = row0 + r;
#pragma unroll
            for (int q = 0; q < 4; q++) {
                const int gk = k0 + kq + q;
                As[kq + q][r] = (gr < job.m && gk < job.k) ? job.A[(size_t)gr * job.lda + gk] : (real)0;
            }
        }
        if (TRANS_B) { /* B is [n × k]: 128 columns × 8 k */
            const int c = threadIdx.x / 2, kq = (threadIdx.x % 2) * 4;
            const int gc = col0 + c;
#pragma unroll
            for (int q = 0; q < 4; q++) {
                const int gk = k0 + kq + q;
                Bs[kq + q][c] = (gc < job.n && gk < job.k) ? job.B[(size_t)gc * job.ldb + gk] : (real)0;
            }
        } else { /* B is [k × n]: 8 k rows × 128 columns, 4 consecutive columns per thread */
            const int kk = threadIdx.x / 32, c = (threadIdx.x % 32) * 4;
            const int gk = k0 + kk;
#pragma unroll
            for (int q = 0; q < 4; q++) {
                const int gc = col0 + c + q;
                Bs[kk][c + q] = (gc < job.n && gk < job.k) ? job.B[(size_t)gk * job.ldb + gc] : (real)0;
            }
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < BIG_K; kk++) {
            real a[8], b[8];
#pragma unroll
            for (int i = 0; i < 4; i++) {
                a[i] = As[kk][ty * 4 + i];
                a[4 + i] = As[kk][64 + ty * 4 + i];
                b[i] = Bs[kk][tx * 4 + i];
                b[4 + i] = Bs[kk][64 + tx * 4 + i];
            }
#pragma unroll
            for (int r = 0; r < 8; r++)
#pragma unroll
                for (int c = 0; c < 8; c++) acc[r][c] += a[r] * b[c];
        }
        __syncthreads();
    }
    store_big_tile<real, EPI>(job, row0, col0, tx, ty, acc);
}

/*
 * The many-rows product in float32 where every operand is 16-byte aligned with leading dimensions
 * that are multiples of 4 (checked on the host; k_gemm_big otherwise): the same 128×128 tiles and
 * 8×8 results per thread, with float4 global and shared-memory loads and two shared buffers, the
 * next k-step's tiles loaded into registers while the current one is multiplied (one barrier per
 * k-step). Sums in k order, as in k_gemm_big, so both give the same bits.
 */
#define BIG_LD (BIG_TILE + 4) /* padded rows: the transposed stores of the two k-halves in distinct banks */
template <bool TRANS_B, int EPI>
__global__ void __launch_bounds__(256, 2) k_gemm_big4(const GemmJob<float>* __restrict__ jobs) {
    const GemmJob<float> job = jobs[blockIdx.z];
    pdl_start();
    const int row0 = blockIdx.y * BIG_TILE, col0 = blockIdx.x * BIG_TILE;
    if (row0 >= job.m || col0 >= job.n) return;
    __shared__ __align__(16) float As[2][BIG_K][BIG_LD];
    __shared__ __align__(16) float Bs[2][BIG_K][BIG_LD];
    const int t = threadIdx.x, tx = t % 16, ty = t / 16;
    /* This thread's loads: A (and B if TRANS_B) row t/2, k-quarter (t%2)·4; B otherwise k row t/32,
       columns (t%32)·4. */
    const int lr = t / 2, lk = (t % 2) * 4, bk = t / 32, bc = (t % 32) * 4;
    /* elements k..k+3 (those below kmax) of row r (below rmax) of a row-major matrix */
    auto load4 = [&](const float* base, int ld, int r, int rmax, int k, int kmax) -> float4 {
        float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
        if (r >= rmax) return v;
        const float* p = base + (size_t)r * ld + k;
        if (k + 4 <= kmax) return __ldg((const float4*)p);
        if (k < kmax) v.x = p[0];
        if (k + 1 < kmax) v.y = p[1];
        if (k + 2 < kmax) v.z = p[2];
        return v;
    };
    auto fetch = [&](int k0, float4& a, float4& b) {
        a = load4(job.A, job.lda, row0 + lr, job.m, k0 + lk, job.k);
        if (TRANS_B) b = load4(job.B, job.ldb, col0 + lr, job.n, k0 + lk, job.k);
        else b = load4(job.B, job.ldb, k0 + bk, job.k, col0 + bc, job.n); /* B is [k × n] */
    };
    auto store = [&](int buf, const float4& a, const float4& b) {
        As[buf][lk][lr] = a.x, As[buf][lk + 1][lr] = a.y, As[buf][lk + 2][lr] = a.z, As[buf][lk + 3][lr] = a.w;
        if (TRANS_B) Bs[buf][lk][lr] = b.x, Bs[buf][lk + 1][lr] = b.y, Bs[buf][lk + 2][lr] = b.z, Bs[buf][lk + 3][lr] = b.w;
        else *(float4*)&Bs[buf][bk][bc] = b;
    };
    float acc[8][8];
#pragma unroll
    for (int r = 0; r < 8; r++)
#pragma unroll
        for (int c = 0; c < 8; c++) acc[r][c] = 0.f;
    float4 na, nb;
    fetch(0, na, nb);
    store(0, na, nb);
    __syncthreads();
    int buf = 0;
    for (int k0 = 0; k0 < job.k; k0 += BIG_K) {
        const bool more = k0 + BIG_K < job.k;
        if (more) fetch(k0 + BIG_K, na, nb);
#pragma unroll
        for (int kk = 0; kk < BIG_K; kk++) {
            const float4 a0 = *(const float4*)&As[buf][kk][ty * 4], a1 = *(const float4*)&As[buf][kk][64 + ty * 4];
            const float4 b0 = *(const float4*)&Bs[buf][kk][tx * 4], b1 = *(const float4*)&Bs[buf][kk][64 + tx * 4];
            const float a[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
            const float b[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
#pragma unroll
            for (int r = 0; r < 8; r++)
#pragma unroll
                for (int c = 0; c < 8; c++) acc[r][c] += a[r] * b[c];
        }
        if (more) store(buf ^ 1, na, nb);
        __syncthreads();
        buf ^= 1;
    }
    store_big_tile<float, EPI>(job, row0, col0, tx, ty, acc);
}
