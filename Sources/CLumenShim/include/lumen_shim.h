#ifndef LUMEN_SHIM_H
#define LUMEN_SHIM_H
// CLumenShim: C helpers for what Swift cannot call directly. Each header in this folder
// belongs to one codec; each function carries a comment saying why it exists.
#include <stdint.h>
#include <stddef.h>

/// lcms2's pixel-format constants (TYPE_RGB_8, …) are built from function-like macros,
/// which Swift does not import.
uint32_t lumen_lcms_type_rgb_8(void);
uint32_t lumen_lcms_type_rgba_8(void);
uint32_t lumen_lcms_type_cmyk_8(void);
uint32_t lumen_lcms_type_gray_8(void);

#endif
