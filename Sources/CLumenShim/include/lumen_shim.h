#ifndef LUMEN_SHIM_H
#define LUMEN_SHIM_H
// CLumenShim: C helpers for what Swift cannot call directly. Each header in this folder
// belongs to one codec; each function carries a comment saying why it exists.
#include <stdint.h>
#include <stddef.h>
#include <lcms2.h>

/// lcms2's pixel-format constants (TYPE_RGB_8, …) are built from function-like macros,
/// which Swift does not import.
uint32_t lumen_lcms_type_rgb_8(void);
uint32_t lumen_lcms_type_rgba_8(void);
uint32_t lumen_lcms_type_cmyk_8(void);
uint32_t lumen_lcms_type_gray_8(void);

/// A new lcms2 context whose allocations through it (profiles, tags, transforms) may hold at
/// most `budget` bytes at once; a request past it fails as if memory had run out, so lcms2
/// reports an error instead of allocating. Why C: lcms2's memory plug-in is a struct of C
/// callbacks that find their budget through the context's user data. Free the context with
/// ``lumen_lcms_context_free`` (not `cmsDeleteContext`). `NULL` when lcms2 fails.
///
/// The budget matters because lcms2 allocates and zero-fills a LUT tag's table from the size
/// its header declares before reading the data: a 176-byte PNG whose iCCP declares a
/// 255-point, 15-channel CLUT makes lcms2 touch ~500 MB.
cmsContext lumen_lcms_context_new(size_t budget);

/// Deletes a context from ``lumen_lcms_context_new`` and its budget.
void lumen_lcms_context_free(cmsContext context);

/// Resets this thread's peak (see ``lumen_lcms_peak_bytes``) to zero.
void lumen_lcms_reset_peak(void);

/// The most bytes one budgeted lcms2 context on this thread held at once since the last reset:
/// lets tests show that a hostile profile is refused within the budget.
size_t lumen_lcms_peak_bytes(void);

#endif
