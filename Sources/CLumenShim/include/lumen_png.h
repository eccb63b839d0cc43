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

#endif
