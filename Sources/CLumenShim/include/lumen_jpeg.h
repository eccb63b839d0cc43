#ifndef LUMEN_JPEG_H
#define LUMEN_JPEG_H
// CLumenShim helpers for the JPEG codec and colour management.
#include <stddef.h>
#include <stdint.h>

/// lcms2's TYPE_CMYK_8_REV (inverted "Adobe" CMYK, 255 = no ink) is built from function-like
/// macros, which Swift does not import.
uint32_t lumen_lcms_type_cmyk_8_rev(void);

/// Decodes a baseline (sequential Huffman, 8-bit, one interleaved scan) greyscale or YCbCr JPEG
/// at 1/8 scale into `rgb` (`out_width`×`out_height`×3 bytes, which must be ceil(width / 8) ×
/// ceil(height / 8)). Luma is the blocks' DC terms; 2× subsampled chroma is the exact 2×2 mean
/// of each block. Returns 0 on success; non-zero when the data is outside that case or not
/// clean (progressive, arithmetic, CMYK, separate scans, bad codes, cut short), and the caller
/// should decode with TurboJPEG instead. `rgb` may be partly written then.
int lumen_jpeg_decode_eighth(const uint8_t *data, size_t size, uint8_t *rgb, int out_width, int out_height);

#endif
