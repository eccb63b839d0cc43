#ifndef LUMEN_JPEG_H
#define LUMEN_JPEG_H
// CLumenShim helpers for the JPEG codec and colour management.
#include <stddef.h>
#include <stdint.h>
#include "lumen_flag.h"

/// lcms2's TYPE_CMYK_8_REV (inverted "Adobe" CMYK, 255 = no ink) is built from function-like
/// macros, which Swift does not import.
uint32_t lumen_lcms_type_cmyk_8_rev(void);

/// Decodes a baseline (sequential Huffman, 8-bit, one interleaved scan) greyscale or YCbCr JPEG
/// at 1/`denominator` scale (8 or 4) into `rgb` (`out_width`×`out_height`×3 bytes, which must
/// be ceil(width / denominator) × ceil(height / denominator)). Each output pixel is the exact
/// mean of the block's transform over the pixels it covers (what TurboJPEG's reduced transforms
/// compute too); chroma follows TurboJPEG's reduced decode (4:2:0 transformed at twice the
/// scale, 4:2:2 at 1/4 upsampled across with libjpeg's triangle filter), except that where
/// TurboJPEG repeats a DC (4:2:2, 4:4:0 at 1/8) the exact means are taken. Returns 0 on
/// success; non-zero when the data is outside that case or not clean (progressive,
/// arithmetic, CMYK, separate scans, bad codes, cut short, 64 or more bytes left after the
/// last block, 4:4:0 at 1/4), and the caller should decode with TurboJPEG instead. `rgb` may be partly written then.
///
/// `cancelled` (may be NULL) is a flag read before each row of MCUs (see `lumen_flag_set`):
/// once it is set the decode stops and returns ``LUMEN_DECODE_CANCELLED``.
int lumen_jpeg_decode_reduced(
    const uint8_t *data, size_t size, int denominator, uint8_t *rgb, int out_width, int out_height,
    const int *cancelled);

/// What a decoder returns when its cancellation flag stopped it.
enum { LUMEN_DECODE_CANCELLED = 2 };

#endif
