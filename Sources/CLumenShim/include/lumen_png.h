#ifndef LUMEN_PNG_H
#define LUMEN_PNG_H
// CLumenShim / PNG: a libspng context whose allocations are counted per thread.
//
// Why C: libspng's allocator callbacks carry no user pointer, so the only place to keep a
// per-decode count is thread-local storage, which Swift cannot declare. Lumen uses the count
// to show (in tests) that hostile PNGs are refused before libspng allocates their declared
// size. A decode runs synchronously on one thread, so the thread's counters describe it.
#include <stddef.h>
#include <spng.h>

/// A new libspng context (`flags` as for `spng_ctx_new`) whose allocations go through the
/// counting allocator. Free it with `spng_ctx_free`.
spng_ctx *lumen_spng_ctx_new(int flags);

/// Resets this thread's peak to its current live byte count.
void lumen_spng_reset_peak(void);

/// The most bytes libspng (and zlib under it) held at once on this thread since the last reset.
size_t lumen_spng_peak_bytes(void);


// CLumenShim / PNG rows: the image data of an 8-bit, non-interlaced PNG with 3 or 4 bytes per
// pixel, inflated with ISA-L and unfiltered one row at a time (lumen_png_rows.c says when it
// applies). It only succeeds where libspng would give the same samples; on any failure the
// caller decodes with libspng instead.
#include <stdint.h>

typedef struct lumen_png_rows lumen_png_rows;

/// A reader of `png`'s rows (`width` × `height`, `bytes_per_pixel` 3 or 4, from the IHDR
/// libspng parsed), or NULL when the file's layout is not one it reads. Close it with
/// `lumen_png_rows_close`.
lumen_png_rows *lumen_png_rows_open(const uint8_t *png, size_t length, uint32_t width, uint32_t height,
                                    unsigned bytes_per_pixel);

/// The next row's samples (valid until the next call), or NULL on any problem.
const uint8_t *lumen_png_rows_next(lumen_png_rows *rows);

/// After the last row: 0 when the image data ended exactly there, intact; -1 otherwise.
int lumen_png_rows_finish(lumen_png_rows *rows);

void lumen_png_rows_close(lumen_png_rows *rows);

#endif
