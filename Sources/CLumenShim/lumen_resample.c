// AVX2+FMA inner loops for Resampler.convolve (see lumen_resample.h). Same arithmetic as the
// Swift loops except for the order of the sums and the fused multiply-adds (no rounding
// between the product and the sum), so results may differ from the Swift path by a level at
// most where a sum lands next to a rounding boundary. Byte expansion, premultiplication,
// unpremultiplication, rounding and clamping are the same operations in the same order.
#include "lumen_resample.h"

#if defined(__x86_64__) && (defined(__clang__) || defined(__GNUC__))
#include <immintrin.h>
#include <string.h>

#define LUMEN_AVX2 __attribute__((target("avx2,fma")))
#define LUMEN_AVX2_INLINE static inline __attribute__((always_inline, target("avx2,fma")))

int lumen_resample_avx2_available(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

// MARK: - Horizontal pass

// `count` RGB pixels as floats (alpha 255). Four pixels per step from a 16-byte load, which
// must stay inside the row: the last few pixels go one at a time.
LUMEN_AVX2_INLINE void expand_rgb(const uint8_t *s, intptr_t count, float *out) {
    const __m128i spread = _mm_setr_epi8(0, 1, 2, -1, 3, 4, 5, -1, 6, 7, 8, -1, 9, 10, 11, -1);
    const __m128i alpha = _mm_set1_epi32((int)0xFF000000u);
    intptr_t i = 0;
    for (; i + 6 <= count; i += 4) {  // reads bytes 3i ..< 3i + 16 <= 3 × count
        __m128i v = _mm_or_si128(_mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(s + 3 * i)), spread), alpha);
        _mm256_storeu_ps(out + 4 * i, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v)));
        _mm256_storeu_ps(out + 4 * i + 8, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(v, 8))));
    }
    for (; i < count; i++) {
        const uint8_t *p = s + 3 * i;
        _mm_storeu_ps(out + 4 * i, _mm_setr_ps((float)p[0], (float)p[1], (float)p[2], 255.0f));
    }
}

// Two RGBA pixels (as floats) premultiplied: colour × (alpha × 1/255), alpha kept.
LUMEN_AVX2_INLINE __m256 premultiply(__m256 v) {
    __m256 f = _mm256_mul_ps(_mm256_permute_ps(v, 0xFF), _mm256_set1_ps(1.0f / 255.0f));
    return _mm256_blend_ps(_mm256_mul_ps(v, f), v, 0x88);
}

LUMEN_AVX2_INLINE void expand_premultiplying(const uint8_t *s, intptr_t count, float *out) {
    intptr_t i = 0;
    for (; i + 4 <= count; i += 4) {
        __m128i v = _mm_loadu_si128((const __m128i *)(s + 4 * i));
        _mm256_storeu_ps(out + 4 * i, premultiply(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v))));
        _mm256_storeu_ps(out + 4 * i + 8, premultiply(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(v, 8)))));
    }
    for (; i < count; i++) {
        uint32_t px;
        memcpy(&px, s + 4 * i, 4);
        __m128 v = _mm_cvtepi32_ps(_mm_cvtepu8_epi32(_mm_cvtsi32_si128((int)px)));
        _mm_storeu_ps(out + 4 * i, _mm256_castps256_ps128(premultiply(_mm256_insertf128_ps(_mm256_setzero_ps(), v, 0))));
    }
}

void LUMEN_AVX2 lumen_resample_filter_row_avx2(const uint8_t *src, intptr_t width, int rgba, float *expanded,
                                               float *out, intptr_t count, const intptr_t *starts,
                                               const intptr_t *counts, const float *weights, intptr_t stride) {
    if (rgba) {
        expand_premultiplying(src, width, expanded);
    } else {
        expand_rgb(src, width, expanded);
    }
    // Two taps per FMA: two adjacent pixels times their two splatted weights, in two
    // independent accumulators (4 taps a step); the halves are summed at the end.
    for (intptr_t x = 0; x < count; x++) {
        const float *p = expanded + 4 * starts[x];
        const float *w = weights + 4 * x * stride;
        const intptr_t n = counts[x];
        __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
        for (intptr_t t = 0; t < n; t += 4) {
            a0 = _mm256_fmadd_ps(_mm256_loadu_ps(p + 4 * t), _mm256_loadu_ps(w + 4 * t), a0);
            a1 = _mm256_fmadd_ps(_mm256_loadu_ps(p + 4 * t + 8), _mm256_loadu_ps(w + 4 * t + 8), a1);
        }
        __m256 s = _mm256_add_ps(a0, a1);
        _mm_storeu_ps(out + 4 * x, _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1)));
    }
}

// MARK: - Vertical pass and store

// min(max(v, 0), 255) + 0.5, truncated: round to nearest, clamped (Resampler.byte).
LUMEN_AVX2_INLINE __m256i to_int(__m256 v) {
    v = _mm256_min_ps(_mm256_max_ps(v, _mm256_setzero_ps()), _mm256_set1_ps(255.0f));
    return _mm256_cvttps_epi32(_mm256_add_ps(v, _mm256_set1_ps(0.5f)));
}

// Two premultiplied pixels as straight RGBA integers: colour × (255 / alpha), alpha as is;
// all zero where the alpha is below 0.5 (Resampler.storeUnpremultiplying).
LUMEN_AVX2_INLINE __m256i unpremultiplied(__m256 v) {
    __m256 a = _mm256_permute_ps(v, 0xFF);
    __m256 c = _mm256_blend_ps(_mm256_mul_ps(v, _mm256_div_ps(_mm256_set1_ps(255.0f), a)), v, 0x88);
    __m256i transparent = _mm256_castps_si256(_mm256_cmp_ps(a, _mm256_set1_ps(0.5f), _CMP_LT_OQ));
    return _mm256_andnot_si256(transparent, to_int(c));
}

// Four pixels (two vectors of two) as 16 bytes, pixel order kept.
LUMEN_AVX2_INLINE __m128i pack4(__m256i lo, __m256i hi) {
    __m128i a = _mm_packus_epi32(_mm256_castsi256_si128(lo), _mm256_extracti128_si256(lo, 1));
    __m128i b = _mm_packus_epi32(_mm256_castsi256_si128(hi), _mm256_extracti128_si256(hi, 1));
    return _mm_packus_epi16(a, b);
}

void LUMEN_AVX2 lumen_resample_sum_rows_avx2(const float *const *rows, intptr_t n, const float *weights,
                                             intptr_t width, int rgba, uint8_t *dst) {
    const __m128i squeeze = _mm_setr_epi8(0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, -1, -1, -1, -1);
    intptr_t x = 0;
    // Four pixels a step, each sum kept in registers over all the taps: even and odd taps in
    // separate accumulators (four independent chains), two pixels per vector.
    for (; x + 4 <= width; x += 4) {
        __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
        __m256 b0 = _mm256_setzero_ps(), b1 = _mm256_setzero_ps();
        intptr_t t = 0;
        for (; t + 2 <= n; t += 2) {
            const float *r = rows[t] + 4 * x, *q = rows[t + 1] + 4 * x;
            __m256 w = _mm256_broadcast_ss(weights + 4 * t), v = _mm256_broadcast_ss(weights + 4 * t + 4);
            a0 = _mm256_fmadd_ps(_mm256_loadu_ps(r), w, a0);
            a1 = _mm256_fmadd_ps(_mm256_loadu_ps(r + 8), w, a1);
            b0 = _mm256_fmadd_ps(_mm256_loadu_ps(q), v, b0);
            b1 = _mm256_fmadd_ps(_mm256_loadu_ps(q + 8), v, b1);
        }
        if (t < n) {
            const float *r = rows[t] + 4 * x;
            __m256 w = _mm256_broadcast_ss(weights + 4 * t);
            a0 = _mm256_fmadd_ps(_mm256_loadu_ps(r), w, a0);
            a1 = _mm256_fmadd_ps(_mm256_loadu_ps(r + 8), w, a1);
        }
        __m256 lo = _mm256_add_ps(a0, b0), hi = _mm256_add_ps(a1, b1);
        if (rgba) {
            _mm_storeu_si128((__m128i *)(dst + 4 * x), pack4(unpremultiplied(lo), unpremultiplied(hi)));
        } else {
            __m128i bytes = _mm_shuffle_epi8(pack4(to_int(lo), to_int(hi)), squeeze);
            _mm_storel_epi64((__m128i *)(dst + 3 * x), bytes);
            int last = _mm_extract_epi32(bytes, 2);
            memcpy(dst + 3 * x + 8, &last, 4);
        }
    }
    // The last 1-3 pixels, one at a time (in the low half of a vector).
    for (; x < width; x++) {
        __m128 a = _mm_setzero_ps();
        for (intptr_t t = 0; t < n; t++) {
            a = _mm_fmadd_ps(_mm_loadu_ps(rows[t] + 4 * x), _mm_broadcast_ss(weights + 4 * t), a);
        }
        __m256 v = _mm256_insertf128_ps(_mm256_setzero_ps(), a, 0);
        __m128i bytes = pack4(rgba ? unpremultiplied(v) : to_int(v), _mm256_setzero_si256());
        uint32_t px = (uint32_t)_mm_cvtsi128_si32(bytes);
        if (rgba) {
            memcpy(dst + 4 * x, &px, 4);
        } else {
            memcpy(dst + 3 * x, &px, 3);
        }
    }
}

#else

// Not x86-64: the Swift loops are used; these are never called.
int lumen_resample_avx2_available(void) { return 0; }

void lumen_resample_filter_row_avx2(const uint8_t *src, intptr_t width, int rgba, float *expanded, float *out,
                                    intptr_t count, const intptr_t *starts, const intptr_t *counts,
                                    const float *weights, intptr_t stride) {
    (void)src; (void)width; (void)rgba; (void)expanded; (void)out; (void)count; (void)starts; (void)counts;
    (void)weights; (void)stride;
}

void lumen_resample_sum_rows_avx2(const float *const *rows, intptr_t n, const float *weights, intptr_t width,
                                  int rgba, uint8_t *dst) {
    (void)rows; (void)n; (void)weights; (void)width; (void)rgba; (void)dst;
}

#endif
