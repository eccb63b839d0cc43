#include "lumen_jpeg.h"
#include <lcms2.h>

uint32_t lumen_lcms_type_cmyk_8_rev(void) { return TYPE_CMYK_8_REV; }
