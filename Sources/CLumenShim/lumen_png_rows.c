// PNG image data for the common case, inflated with ISA-L instead of zlib: an 8-bit,
// non-interlaced truecolour (3 bytes per pixel) or truecolour-with-alpha (4) image whose
// IDAT chunks are consecutive and followed by IEND or by the end of the file. ISA-L's
// inflate is about 2.5 times zlib's on photographic data, and zlib is most of a PNG decode.
//
// The reader only ever succeeds on data that libspng decodes to the same samples: every
// IDAT CRC is checked before anything is inflated, the zlib header must be one zlib accepts,
// the stream must end exactly after the last row with a matching Adler-32 and use all of the
// IDAT data, and every filter byte must be 0-4. On anything else (and on any other layout)
// it fails, and the caller decodes with libspng, which keeps its error semantics.
#include "lumen_png.h"
#include <isa-l/crc.h>
#include <isa-l/igzip_lib.h>
#include <stdlib.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

struct lumen_png_rows {
    struct inflate_state inflate;
    const uint8_t *png;
    size_t next_chunk;  // offset of the chunk after the IDAT being read
    size_t idat_end;    // offset just past the last IDAT chunk
    size_t row_bytes;   // width × bytes per pixel (without the filter byte)
    unsigned bpp;
    uint32_t rows_left;
    uint8_t *previous;  // the last row's samples (zeros before the first row), then padding
    uint8_t *current;   // the filter byte and filtered samples of the row being read, then padding
};

static uint32_t be32(const uint8_t *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

// The size of the chunk at `at` when all of it (length, type, data, CRC) lies in the first
// `length` bytes and its length is a valid one (below 2^31); -1 otherwise.
static int64_t chunk_size(const uint8_t *png, size_t length, size_t at) {
    if (length - at < 12) return -1;
    uint32_t size = be32(png + at);
    if (size > 0x7FFFFFFFu || length - at - 12 < size) return -1;
    return size;
}

static const uint8_t iend_chunk[12] = {0, 0, 0, 0, 'I', 'E', 'N', 'D', 0xAE, 0x42, 0x60, 0x82};

lumen_png_rows *lumen_png_rows_open(const uint8_t *png, size_t length, uint32_t width, uint32_t height,
                                    unsigned bytes_per_pixel) {
    if (png == NULL || length < 8 || width == 0 || height == 0) return NULL;
    if (bytes_per_pixel != 3 && bytes_per_pixel != 4) return NULL;
    // A row (with its filter byte) is inflated in one call, whose output size is 32-bit.
    if ((uint64_t)width * bytes_per_pixel + 1 > UINT32_MAX) return NULL;

    // The IHDR must say what the caller says: that size, 8 bits, truecolour (with alpha for
    // 4 bytes per pixel), not interlaced.
    if (length < 33 || be32(png + 8) != 13 || memcmp(png + 12, "IHDR", 4) != 0) return NULL;
    if (be32(png + 16) != width || be32(png + 20) != height || png[24] != 8) return NULL;
    if (png[25] != (bytes_per_pixel == 4 ? 6 : 2) || png[28] != 0) return NULL;

    // Find the first IDAT (the chunks before it were parsed and checked by libspng).
    size_t at = 8;
    for (;;) {
        int64_t size = chunk_size(png, length, at);
        if (size < 0) return NULL;
        if (memcmp(png + at + 4, "IDAT", 4) == 0) break;
        at += 12 + (size_t)size;
    }
    size_t first_idat = at;
    // Check every IDAT's CRC; they must be consecutive and end the file or precede IEND.
    while (length - at >= 12 && memcmp(png + at + 4, "IDAT", 4) == 0) {
        int64_t size = chunk_size(png, length, at);
        if (size < 0) return NULL;
        if (crc32_gzip_refl(0, png + at + 4, (uint64_t)size + 4) != be32(png + at + 8 + size)) return NULL;
        at += 12 + (size_t)size;
    }
    size_t tail = length - at;
    if (!(tail == 0 || (tail == 12 && memcmp(png + at, iend_chunk, 12) == 0))) return NULL;

    // The zlib header: deflate with the full 32K window (zlib judges a distance beyond a
    // smaller declared window by how its caller buffers output; libspng settles those), no
    // preset dictionary, a valid check. It must lie in the first IDAT.
    uint32_t first_size = be32(png + first_idat);
    if (first_size < 2) return NULL;
    const uint8_t *z = png + first_idat + 8;
    if ((z[0] & 0x0F) != 8 || (z[0] >> 4) != 7 || (z[1] & 0x20) != 0 || ((unsigned)z[0] << 8 | z[1]) % 31 != 0) return NULL;

    lumen_png_rows *r = malloc(sizeof *r);
    if (r == NULL) return NULL;
    size_t row_bytes = (size_t)width * bytes_per_pixel;
    // Padding: the unfilter loops read and write 4 bytes per pixel, and may read one more pixel.
    r->previous = calloc(1, row_bytes + 8);
    r->current = calloc(1, row_bytes + 8);
    if (r->previous == NULL || r->current == NULL) {
        free(r->previous);
        free(r->current);
        free(r);
        return NULL;
    }
    isal_inflate_init(&r->inflate);
    r->inflate.crc_flag = ISAL_ZLIB;
    r->inflate.next_in = (uint8_t *)(png + first_idat + 8);
    r->inflate.avail_in = first_size;
    r->png = png;
    r->next_chunk = first_idat + 12 + first_size;
    r->idat_end = at;
    r->row_bytes = row_bytes;
    r->bpp = bytes_per_pixel;
    r->rows_left = height;
    return r;
}

void lumen_png_rows_close(lumen_png_rows *r) {
    if (r == NULL) return;
    free(r->previous);
    free(r->current);
    free(r);
}

// Points the inflater at the data of the next IDAT chunk.
static void next_idat(lumen_png_rows *r) {
    uint32_t chunk = be32(r->png + r->next_chunk);
    r->inflate.next_in = (uint8_t *)(r->png + r->next_chunk + 8);
    r->inflate.avail_in = chunk;
    r->next_chunk += 12 + (size_t)chunk;
}

// One step of the inflater into its current output: moves on to the next IDAT when the
// current one is used up, else runs ISA-L once (with no input left a call may still flush
// output ISA-L holds back). -1 on an inflate error or when a call made no progress.
static int inflate_step(lumen_png_rows *r) {
    if (r->inflate.avail_in == 0 && r->next_chunk < r->idat_end) {
        next_idat(r);
        return 0;
    }
    uint32_t in = r->inflate.avail_in, out_left = r->inflate.avail_out;
    int status = isal_inflate(&r->inflate);
    if (status != ISAL_DECOMP_OK && status != ISAL_END_INPUT && status != ISAL_OUT_OVERFLOW) return -1;
    if (r->inflate.avail_in == in && r->inflate.avail_out == out_left && r->inflate.block_state != ISAL_BLOCK_FINISH) return -1;
    return 0;
}

// Inflates into [out, out + size); 0 when it was filled, -1 on any inflate problem or when
// the stream or the IDAT data ends first.
static int inflate_exactly(lumen_png_rows *r, uint8_t *out, size_t size) {
    r->inflate.next_out = out;
    r->inflate.avail_out = (uint32_t)size;
    while (r->inflate.avail_out > 0) {
        if (r->inflate.block_state == ISAL_BLOCK_FINISH || inflate_step(r) != 0) return -1;
    }
    return 0;
}

#if defined(__SSE2__)
// A pixel's samples widened to 16 bits. Always 4 bytes are read (the buffers have a byte of
// padding); for 3-byte pixels the fourth lane is the next pixel's first sample and is unused.
static inline __attribute__((always_inline)) __m128i load_pixel(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return _mm_unpacklo_epi8(_mm_cvtsi32_si128((int)v), _mm_setzero_si128());
}

// Stores a pixel's 4 lanes as bytes: for 3-byte pixels the fourth byte is scratch that the
// next pixel's store overwrites (or padding after the last).
static inline __attribute__((always_inline)) void store_pixel(uint8_t *p, __m128i v) {
    uint32_t t = (uint32_t)_mm_cvtsi128_si32(_mm_packus_epi16(_mm_and_si128(v, _mm_set1_epi16(0xFF)), v));
    memcpy(p, &t, 4);
}

static inline __attribute__((always_inline)) __m128i abs16(__m128i x) {
    return _mm_max_epi16(x, _mm_sub_epi16(_mm_setzero_si128(), x));
}

static inline __attribute__((always_inline)) __m128i select16(__m128i mask, __m128i yes, __m128i no) {
    return _mm_or_si128(_mm_and_si128(mask, yes), _mm_andnot_si128(mask, no));
}
#endif

// Undoes filter `type` of the filtered samples `in` (n bytes, whole pixels of `bpp` bytes)
// into `row`, which holds the previous row's samples on entry and this row's on return;
// -1 for an unknown type. Each pixel of the previous row is read before its place is
// written, and `in` is never written, so the loop carries its dependencies in registers.
// Always inlined with a constant `bpp` (3 or 4).
static inline __attribute__((always_inline)) int unfilter(unsigned type, const uint8_t *in, uint8_t *row, size_t n,
                                                          const unsigned bpp) {
    switch (type) {
    case 0:
        memcpy(row, in, n);
        return 0;
    case 1:
        memcpy(row, in, bpp);
        for (size_t i = bpp; i < n; i++) row[i] = (uint8_t)(in[i] + row[i - bpp]);
        return 0;
    case 2:
        for (size_t i = 0; i < n; i++) row[i] = (uint8_t)(in[i] + row[i]);
        return 0;
    case 3: {
#if defined(__SSE2__)
        __m128i left = _mm_setzero_si128(), up = load_pixel(row);
        for (size_t i = 0; i < n; i += bpp) {
            __m128i next_up = load_pixel(row + i + bpp);
            __m128i x = _mm_add_epi16(load_pixel(in + i), _mm_srli_epi16(_mm_add_epi16(left, up), 1));
            store_pixel(row + i, x);
            left = _mm_and_si128(x, _mm_set1_epi16(0xFF));
            up = next_up;
        }
#else
        for (size_t i = 0; i < bpp; i++) row[i] = (uint8_t)(in[i] + (row[i] >> 1));
        for (size_t i = bpp; i < n; i++) row[i] = (uint8_t)(in[i] + ((row[i - bpp] + row[i]) >> 1));
#endif
        return 0;
    }
    case 4: {
#if defined(__SSE2__)
        __m128i a = _mm_setzero_si128(), c = _mm_setzero_si128(), b = load_pixel(row);
        for (size_t i = 0; i < n; i += bpp) {
            __m128i next_b = load_pixel(row + i + bpp);
            __m128i pa = _mm_sub_epi16(b, c), pb = _mm_sub_epi16(a, c);
            __m128i pc = abs16(_mm_add_epi16(pa, pb));
            pa = abs16(pa);
            pb = abs16(pb);
            __m128i smallest = _mm_min_epi16(pc, _mm_min_epi16(pa, pb));
            __m128i predictor = select16(_mm_cmpeq_epi16(smallest, pa), a, select16(_mm_cmpeq_epi16(smallest, pb), b, c));
            __m128i x = _mm_and_si128(_mm_add_epi16(load_pixel(in + i), predictor), _mm_set1_epi16(0xFF));
            store_pixel(row + i, x);
            a = x;
            c = b;
            b = next_b;
        }
#else
        // The previous row's pixel to the left is gone by the time it is needed: keep it.
        uint8_t above_left[4] = {0, 0, 0, 0};
        for (size_t i = 0; i < n; i += bpp) {
            for (unsigned k = 0; k < bpp; k++) {
                int a = i ? row[i - bpp + k] : 0, b = row[i + k], c = above_left[k];
                int pa = abs(b - c), pb = abs(a - c), pc = abs(a + b - 2 * c);
                int predictor = (pa <= pb && pa <= pc) ? a : (pb <= pc ? b : c);
                above_left[k] = (uint8_t)b;
                row[i + k] = (uint8_t)(in[i + k] + predictor);
            }
        }
#endif
        return 0;
    }
    default:
        return -1;
    }
}

static int unfilter3(unsigned type, const uint8_t *in, uint8_t *row, size_t n) { return unfilter(type, in, row, n, 3); }
static int unfilter4(unsigned type, const uint8_t *in, uint8_t *row, size_t n) { return unfilter(type, in, row, n, 4); }

const uint8_t *lumen_png_rows_next(lumen_png_rows *r) {
    if (r->rows_left == 0) return NULL;
    if (inflate_exactly(r, r->current, r->row_bytes + 1) != 0) return NULL;
    int status = r->bpp == 3 ? unfilter3(r->current[0], r->current + 1, r->previous, r->row_bytes)
                             : unfilter4(r->current[0], r->current + 1, r->previous, r->row_bytes);
    if (status != 0) return NULL;
    r->rows_left -= 1;
    return r->previous;
}

int lumen_png_rows_finish(lumen_png_rows *r) {
    if (r->rows_left != 0) return -1;
    // The stream must end here (its Adler-32 checked by ISA-L) with no sample to spare, and
    // no IDAT byte may follow it.
    uint8_t spare;
    r->inflate.next_out = &spare;
    r->inflate.avail_out = 1;
    while (r->inflate.block_state != ISAL_BLOCK_FINISH) {
        if (inflate_step(r) != 0 || r->inflate.avail_out == 0) return -1;
    }
    if (r->inflate.avail_in != 0) return -1;
    for (size_t at = r->next_chunk; at < r->idat_end; at += 12 + (size_t)be32(r->png + at)) {
        if (be32(r->png + at) != 0) return -1;
    }
    return 0;
}
