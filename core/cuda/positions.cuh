/*
 * Positions for every family's CUDA evaluation: the periodic box (reduced form) and the minimum
 * image, where each particle sits in OpenMM's reordered buffers (k_inverse_order), and one
 * particle's position read from the caller's buffer in any of nnp_positions_format's layouts.
 */
#pragma once

#include "common.cuh"

template <typename real> struct Box {
    int periodic;
    real a[9]; /* reduced form, in the evaluation's length unit */
};

template <typename real> __device__ __forceinline__ void min_image(real& x, real& y, real& z, const Box<real>& box) {
    if (box.periodic) {
        real s = rint(z / box.a[8]);
        x -= s * box.a[6], y -= s * box.a[7], z -= s * box.a[8];
        s = rint(y / box.a[4]);
        x -= s * box.a[3], y -= s * box.a[4];
        s = rint(x / box.a[0]);
        x -= s * box.a[0];
    }
}

static __global__ void k_inverse_order(const int* __restrict__ order, int n, int* __restrict__ index_of) {
    pdl_start();
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) index_of[order[i]] = i;
}

/* The position of particle p (in the plan's particle order) in the evaluation's length unit (the
   caller's value × to_unit), read from the caller's buffer (OpenMM's reordered layout through
   index_of, or the plan's particle order), converted in double and rounded once to real. *at: the slot it came from; *finite: whether all three coordinates are
   finite. */
template <typename real>
__device__ __forceinline__ typename real4_of<real>::type load_position(const void* __restrict__ positions, int format,
                                                                       const int* __restrict__ index_of, int p,
                                                                       real to_unit, int* at, bool* finite) {
    const int i = index_of ? index_of[p] : p;
    double x, y, z;
    if (format == NNP_POSITIONS_FLOAT4) {
        float4 v = ((const float4*)positions)[i];
        x = v.x, y = v.y, z = v.z;
    } else if (format == NNP_POSITIONS_DOUBLE4) {
        nnp_double4 v = ((const nnp_double4*)positions)[i];
        x = v.x, y = v.y, z = v.z;
    } else {
        const double* v = (const double*)positions + 3 * (size_t)i;
        x = v[0], y = v[1], z = v[2];
    }
    *at = i;
    *finite = isfinite(x) && isfinite(y) && isfinite(z);
    typename real4_of<real>::type r;
    r.x = (real)(x * (double)to_unit), r.y = (real)(y * (double)to_unit), r.z = (real)(z * (double)to_unit);
    r.w = 0;
    return r;
}

