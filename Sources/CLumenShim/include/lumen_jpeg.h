#ifndef LUMEN_JPEG_H
#define LUMEN_JPEG_H
// CLumenShim helpers for the JPEG codec and colour management.
#include <stdint.h>

/// lcms2's TYPE_CMYK_8_REV (inverted "Adobe" CMYK, 255 = no ink) is built from function-like
/// macros, which Swift does not import.
uint32_t lumen_lcms_type_cmyk_8_rev(void);

#endif
