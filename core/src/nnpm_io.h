/* Little-endian readers and writers of the .nnpm container, shared by the model families. */
#ifndef NNP_NNPM_IO_H
#define NNP_NNPM_IO_H

#include "internal.h"

#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ writer */

typedef struct writer {
    unsigned char* data;
    size_t size, cap;
    int failed;
} writer;

static inline void put_bytes(writer* w, const void* src, size_t n) {
    if (w->failed) return;
    if (w->size + n > w->cap) {
        size_t cap = w->cap ? w->cap : 4096;
        while (cap < w->size + n) cap *= 2;
        unsigned char* grown = realloc(w->data, cap);
        if (grown == NULL) {
            w->failed = 1;
            return;
        }
        w->data = grown;
        w->cap = cap;
    }
    memcpy(w->data + w->size, src, n);
    w->size += n;
}

static inline void put_u32(writer* w, uint32_t v) {
    unsigned char b[4] = {(unsigned char)v, (unsigned char)(v >> 8), (unsigned char)(v >> 16),
                          (unsigned char)(v >> 24)};
    put_bytes(w, b, 4);
}

static inline void put_u64(writer* w, uint64_t v) {
    put_u32(w, (uint32_t)v);
    put_u32(w, (uint32_t)(v >> 32));
}

static inline void put_f64(writer* w, double v) {
    uint64_t bits;
    memcpy(&bits, &v, 8);
    put_u64(w, bits);
}

static inline void put_f32s(writer* w, const float* v, size_t n) {
    for (size_t i = 0; i < n; i++) {
        uint32_t bits;
        memcpy(&bits, &v[i], 4);
        put_u32(w, bits);
    }
}

/* ------------------------------------------------------------------ reader */

typedef struct reader {
    const unsigned char* p;
    size_t left;
    int short_read;
} reader;

static inline int get_bytes(reader* r, void* dst, size_t n) {
    if (r->short_read || r->left < n) {
        r->short_read = 1;
        return 0;
    }
    memcpy(dst, r->p, n);
    r->p += n;
    r->left -= n;
    return 1;
}

static inline uint32_t get_u32(reader* r) {
    unsigned char b[4];
    if (!get_bytes(r, b, 4)) return 0;
    return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}

static inline uint64_t get_u64(reader* r) {
    uint64_t lo = get_u32(r);
    return lo | (uint64_t)get_u32(r) << 32;
}

static inline double get_f64(reader* r) {
    uint64_t bits = get_u64(r);
    double v;
    memcpy(&v, &bits, 8);
    return v;
}

static inline nnp_status get_floats(reader* r, size_t n, float** out) {
    if (r->left / 4 < n) {
        r->short_read = 1;
        return nnp_fail(NNP_ERR_FORMAT, "model file is truncated");
    }
    float* v = malloc(n * sizeof(float) + 1);
    if (v == NULL) return nnp_fail(NNP_ERR_MEMORY, "out of memory");
    for (size_t i = 0; i < n; i++) {
        uint32_t bits = get_u32(r);
        memcpy(&v[i], &bits, 4);
    }
    *out = v;
    return NNP_OK;
}

#endif
