#include "lumen_shim.h"
#include <lcms2.h>

uint32_t lumen_lcms_type_rgb_8(void) { return TYPE_RGB_8; }
uint32_t lumen_lcms_type_rgba_8(void) { return TYPE_RGBA_8; }
uint32_t lumen_lcms_type_cmyk_8(void) { return TYPE_CMYK_8; }
uint32_t lumen_lcms_type_gray_8(void) { return TYPE_GRAY_8; }
