#ifndef LUMEN_RESAMPLE_H
#define LUMEN_RESAMPLE_H
// CLumenShim / resampling: AVX2+FMA versions of the Resampler's inner loops (Resampler.swift
// keeps the ring of filtered rows and the portable Swift loops they replace).
//
// Why C: Swift cannot compile one function for AVX2 and choose it at run time; C can, with
// `__attribute__((target("avx2,fma")))`, without global compiler flags, so the package still
// runs on any x86-64. On other architectures the functions are stubs that must not be called:
// `lumen_resample_avx2_available` returns 0 there.
//
// Layouts are the Resampler's: a filtered pixel is 4 floats (RGBA; RGB has alpha 255), a
// weight is one float repeated 4 times, taps are padded with zero weights to a multiple of 4.
#include <stddef.h>
#include <stdint.h>

/// 1 when this CPU has AVX2 and FMA (and this is x86-64), else 0.
int lumen_resample_avx2_available(void);

/// One source row through the horizontal filter: `src`'s `width` pixels (3 bytes each, or 4
/// when `rgba`, then premultiplied by alpha / 255) are expanded into `expanded` (`width` + 3
/// pixels, the last 3 zero on entry and left so), then
/// `out[x] = Σ expanded[starts[x] + t] × weights[x × stride + t]` for `t` in 0 ..< `counts[x]`
/// rounded up to a multiple of 4, for `x` in 0 ..< `count`.
void lumen_resample_filter_row_avx2(const uint8_t *src, intptr_t width, int rgba, float *expanded, float *out,
                                    intptr_t count, const intptr_t *starts, const intptr_t *counts,
                                    const float *weights, intptr_t stride);

/// One output row: `acc[x] = Σ rows[t][x] × weights[t]` for `t` in 0 ..< `n`, `x` in
/// 0 ..< `width`, each rounded to nearest and clamped to 0…255 into `dst` (3 bytes a pixel; or
/// 4 when `rgba`, unpremultiplied, and transparent black where the alpha is below 0.5).
void lumen_resample_sum_rows_avx2(const float *const *rows, intptr_t n, const float *weights, intptr_t width,
                                  int rgba, uint8_t *dst);

#endif
