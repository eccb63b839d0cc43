// A JPEG decoder for one case only: a baseline (sequential Huffman, 8-bit) JPEG decoded at 1/8
// or 1/4 scale, which is what a thumbnail of a large photo needs. At those scales every 8x8
// block of the full-resolution plane becomes 1x1 or 2x2 output pixels, each the mean of the
// block's IDCT over the pixels it covers, so only a few transform coefficients matter and each
// adds a fixed weight to a few accumulators: at 1/8 the luma blocks' DC terms; at 1/4 the
// coefficients whose frequencies are both in {0, 1, 3, 5, 7} (an even non-zero frequency sums
// to zero over half a block); for subsampled chroma the means over its share of an output
// pixel. The AC codes still have to be parsed to find where each block ends, but their values
// are skipped (DC-only blocks) or folded straight into the accumulators: no coefficient blocks,
// no IDCT.
//
// The result follows TurboJPEG's own reduced decode (libjpeg's jidctred.c transforms are these
// same means): chroma halved both ways is transformed at twice the scale instead of upsampled
// (jdmaster.c), and 4:2:2 chroma at 1/4 is upsampled across with libjpeg's "fancy" triangle
// filter (jdsample.c). Where libjpeg would only replicate a DC (4:2:2 or 4:4:0 at 1/8) the
// exact means are taken instead, which is closer to the true image.
//
// Anything outside that case (progressive, arithmetic coding, 12-bit, CMYK, separate scans,
// restart markers out of place, a bad Huffman code, data that ends early or goes on long
// after the last block, 4:4:0 at 1/4)
// returns a non-zero status and the caller decodes with TurboJPEG instead, which keeps its
// error semantics.
#include "lumen_jpeg.h"
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

// Position in the 8x8 block (row * 8 + column) of the k-th coefficient in zigzag order
// (the JPEG standard's figure A.6).
static const uint8_t zigzag_to_natural[64 + 16] = {
    0,  1,  8,  16, 9,  2,  3,  10, 17, 24, 32, 25, 18, 11, 4,  5,
    12, 19, 26, 33, 40, 48, 41, 34, 27, 20, 13, 6,  7,  14, 21, 28,
    35, 42, 49, 56, 57, 50, 43, 36, 29, 22, 15, 23, 30, 37, 44, 51,
    58, 59, 52, 45, 38, 31, 39, 46, 53, 60, 61, 54, 47, 55, 62, 63,
    // Overrun guard: a corrupt run lands here and is rejected after the block.
    63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63};

enum { LOOKAHEAD = 10, PAIRBITS = 13 };

// A group-table entry: as many AC symbols (with their magnitude bits) as fit in the next
// PAIRBITS bits, for blocks whose AC values are skipped. 0 means "decode the slow way".
enum {
    GROUP_BITS_MASK = 31,  // bits taken by the whole group
    GROUP_ADV_SHIFT = 5,   // coefficients the group advances (8 bits), not counting an EOB
    GROUP_EOB = 1 << 13,   // the group ends with the end of the block
};

// Four means at once (clang and GCC vector extension).
typedef float v4 __attribute__((vector_size(16)));

// A fast-AC entry: the one or two whole AC steps (code and magnitude bits) that the next
// FASTBITS bits begin with, for blocks whose AC values are kept. Each step is `run` zeros and
// then a coefficient of `value` (ZRL: a run of 15 before a zero), or the end of the block (run
// and value 0). `bits0` is the first step's length (0: decode the slow way), `bits` both
// steps' (the first's alone when there is no second, whose run, value and advance are then 0).
enum { FASTBITS = 12 };
enum {
    FAST_EOB0 = 1,    // the first step ends the block
    FAST_SECOND = 2,  // a second step follows within FASTBITS bits
    FAST_EOB1 = 4,    // the second step ends the block
};
typedef struct {
    int16_t value0, value1;
    uint8_t bits0, bits;
    uint8_t runs;  // run0 | run1 << 4
    uint8_t flags;
} FastAC;
// The second step's advance: its run and coefficient, 0 without a second step.
static inline __attribute__((always_inline)) int fast_advance1(FastAC e) {
    return e.flags & FAST_SECOND ? (e.runs >> 4) + 1 : 0;
}

typedef struct {
    int present;
    // The group table (see GROUP_*), indexed by the next PAIRBITS bits: built only for the AC
    // tables of blocks whose AC is skipped, and only for images large enough to repay it.
    uint32_t *group;
    // Fast table: the next LOOKAHEAD bits -> (code length << 8 | symbol), 0 for longer codes.
    uint16_t fast[1 << LOOKAHEAD];
    // Canonical decoding for longer codes: maxcode[l] is the largest code of length l (-1 if
    // none), valoffset[l] maps a code of length l to its index in symbols.
    int32_t maxcode[18];
    int32_t valoffset[17];
    uint8_t symbols[256];
    uint8_t counts[16];  // with `symbols` (zero past the last), the table's definition
    // For blocks whose AC values are kept: the next LOOKAHEAD bits -> a whole AC step.
    const FastAC *fastac;  // owned by the thread's cache (see fast_ac_for)
} HuffTable;

typedef struct {
    int id, h, v, tq;
    int dc, ac;  // table indices for the scan
    int fh, fv;  // means per block horizontally / vertically (1, 2 or 4): cell cy * fh + cx
    int uh;      // 2: the means are upsampled across with libjpeg's triangle filter; else 1
    int valid;   // with uh == 2: the means per row that hold image (libjpeg's downsampled_width)
    int pred;
    int qmax;    // the largest entry of the component's quantisation table
    // The dequantised contribution of each coefficient, in zigzag order, to each mean (four
    // per vector); the entries past 63 are zero, for a corrupt run that overshoots.
    v4 weight[80][4];
} Component;

typedef struct {
    const uint8_t *p, *end;
    uint64_t bits;
    int count;
    int hit_marker;
    int padding;  // zero bits fed in after the data ran out (a marker or the end)
} BitReader;

static int build_table(HuffTable *t, const uint8_t *counts, const uint8_t *symbols, int total) {
    free(t->group);
    memset(t, 0, sizeof *t);
    if (total > 256) return -1;
    memcpy(t->symbols, symbols, (size_t)total);
    memcpy(t->counts, counts, 16);
    int code = 0, k = 0;
    for (int len = 1; len <= 16; len++) {
        t->valoffset[len] = k - code;
        for (int i = 0; i < counts[len - 1]; i++, k++, code++) {
            if (code >= (1 << len)) return -1;  // over-subscribed lengths
            if (len <= LOOKAHEAD) {
                int shift = LOOKAHEAD - len;
                for (int f = 0; f < (1 << shift); f++) {
                    t->fast[(code << shift) | f] = (uint16_t)(len << 8 | symbols[k]);
                }
            }
        }
        t->maxcode[len] = counts[len - 1] ? code - 1 : -1;
        code <<= 1;
    }
    t->maxcode[17] = 0x7fffffff;
    t->present = 1;
    return 0;
}

// One symbol's share of a pair entry read from `bits` (the next `avail` bits, MSB first, in the
// low PAIRBITS bits): its bit count (code + magnitude), how far it advances, whether it ends
// the block. 0 when it does not fit in `avail` bits or needs the slow path.
static int pair_step(const HuffTable *t, unsigned bits, int avail, int *advance, int *eob) {
    unsigned f = t->fast[(bits & ((1u << PAIRBITS) - 1)) >> (PAIRBITS - LOOKAHEAD)];
    if (!f) return 0;
    int len = (int)(f >> 8), rs = (int)(f & 0xFF), run = rs >> 4, size = rs & 15;
    if (len + size > avail) return 0;
    *eob = size == 0 && run != 15;  // EOB (and the undefined r/0 codes, as libjpeg reads them)
    *advance = size ? run + 1 : (run == 15 ? 16 : 0);
    return len + size;
}

static int build_groups(HuffTable *t) {
    t->group = malloc(sizeof(uint32_t) << PAIRBITS);
    if (!t->group) return -1;
    for (unsigned i = 0; i < (1u << PAIRBITS); i++) {
        int used = 0, total = 0, end = 0;
        while (used < PAIRBITS) {
            int advance, eob;
            int bits = pair_step(t, i << used, PAIRBITS - used, &advance, &eob);
            if (!bits) break;
            used += bits;
            if (eob) { end = 1; break; }
            total += advance;
        }
        t->group[i] = used ? (uint32_t)used | (uint32_t)total << GROUP_ADV_SHIFT | (end ? GROUP_EOB : 0) : 0;
    }
    return 0;
}

static void build_fastac(const HuffTable *t, FastAC *table) {
    // First the single steps: codes of up to LOOKAHEAD bits whose magnitude fits too.
    for (unsigned i = 0; i < (1u << FASTBITS); i++) {
        FastAC e = {0, 0, 0, 0, 0, 0};
        unsigned f = t->fast[i >> (FASTBITS - LOOKAHEAD)];
        int len = (int)(f >> 8), rs = (int)(f & 0xFF), run = rs >> 4, size = rs & 15;
        if (f && len + size <= FASTBITS) {
            e.bits0 = e.bits = (uint8_t)(len + size);
            if (size) {
                int v = (int)(i >> (FASTBITS - len - size)) & ((1 << size) - 1);
                e.value0 = (int16_t)(v < (1 << (size - 1)) ? v + 1 - (1 << size) : v);
                e.runs = (uint8_t)run;
            } else if (run == 15) {
                e.runs = 15;  // ZRL
            } else {
                e.flags = FAST_EOB0;  // EOB, and the undefined r/0 codes, as libjpeg reads them
            }
        }
        table[i] = e;
    }
    // Then a second step wherever one fits in the bits the first leaves.
    for (unsigned i = 0; i < (1u << FASTBITS); i++) {
        FastAC *e = &table[i];
        if (!e->bits0 || (e->flags & FAST_EOB0)) continue;
        const FastAC *next = &table[(i << e->bits0) & ((1u << FASTBITS) - 1)];
        if (!next->bits0 || next->bits0 > FASTBITS - e->bits0) continue;
        e->bits = (uint8_t)(e->bits0 + next->bits0);
        e->runs |= (uint8_t)((next->runs & 15) << 4);
        e->value1 = next->value0;
        e->flags |= FAST_SECOND | ((next->flags & FAST_EOB0) ? FAST_EOB1 : 0);
    }
}

// Building a fast-AC table costs about as much as decoding 30 000 pixels, and most images
// share a few tables (the standard ones, or their encoder's), so each thread keeps the last
// few it built, freed when the thread ends. A decode looks up at most six (a DC and an AC
// table per component) and marks them with its serial number, so the one evicted for a new
// table is never one the decode still uses.
enum { FAST_CACHE = 8 };
typedef struct {
    uint8_t counts[16], symbols[256];
    unsigned long used;
    FastAC *table;
} CachedFastAC;
typedef struct {
    unsigned long serial;
    CachedFastAC entries[FAST_CACHE];
} FastACCache;

static pthread_key_t fast_cache_key;
static pthread_once_t fast_cache_once = PTHREAD_ONCE_INIT;
static int fast_cache_key_made;

static void free_fast_cache(void *p) {
    FastACCache *cache = p;
    for (int i = 0; i < FAST_CACHE; i++) free(cache->entries[i].table);
    free(cache);
}

static void make_fast_cache_key(void) {
    fast_cache_key_made = pthread_key_create(&fast_cache_key, free_fast_cache) == 0;
}

// This thread's cache, created on first use; NULL when it cannot be.
static FastACCache *thread_fast_cache(void) {
    pthread_once(&fast_cache_once, make_fast_cache_key);
    if (!fast_cache_key_made) return NULL;
    FastACCache *cache = pthread_getspecific(fast_cache_key);
    if (!cache) {
        cache = calloc(1, sizeof *cache);
        if (!cache) return NULL;
        if (pthread_setspecific(fast_cache_key, cache) != 0) {
            free(cache);
            return NULL;
        }
    }
    return cache;
}

static const FastAC *fast_ac_for(FastACCache *cache, const HuffTable *t, unsigned long serial) {
    CachedFastAC *victim = &cache->entries[0];
    for (int i = 0; i < FAST_CACHE; i++) {
        CachedFastAC *c = &cache->entries[i];
        if (c->table && !memcmp(c->counts, t->counts, 16) && !memcmp(c->symbols, t->symbols, 256)) {
            c->used = serial;
            return c->table;
        }
        if (c->used < victim->used) victim = c;
    }
    if (!victim->table) victim->table = malloc(sizeof(FastAC) << FASTBITS);
    if (!victim->table) return NULL;
    build_fastac(t, victim->table);
    memcpy(victim->counts, t->counts, 16);
    memcpy(victim->symbols, t->symbols, 256);
    victim->used = serial;
    return victim->table;
}

static inline __attribute__((always_inline)) void refill(BitReader *r) {
    // Fast path: the next 8 bytes hold no 0xFF, so whole bytes can be taken at once.
    if (r->end - r->p >= 8 && !r->hit_marker) {
        uint64_t v;
        memcpy(&v, r->p, 8);
        uint64_t x = ~v;  // a 0xFF byte in v is a zero byte in x
        if (!((x - 0x0101010101010101ULL) & ~x & 0x8080808080808080ULL)) {
            v = __builtin_bswap64(v);
            int take = (64 - r->count) >> 3;
            r->bits |= v >> r->count;
            r->count += take * 8;
            if (r->count < 64) r->bits &= ~(~0ULL >> r->count);
            r->p += take;
            return;
        }
    }
    while (r->count <= 56) {
        unsigned b = 0;
        if (!r->hit_marker && r->p < r->end) {
            b = *r->p;
            if (b == 0xFF) {
                if (r->p + 1 < r->end && r->p[1] == 0x00) {
                    r->p += 2;
                } else {
                    r->hit_marker = 1;  // a marker (or the end): feed zeros from here on
                    b = 0;
                }
            } else {
                r->p++;
            }
        } else {
            r->hit_marker = 1;
        }
        if (r->hit_marker) r->padding += 8;
        r->bits |= (uint64_t)b << (56 - r->count);
        r->count += 8;
    }
}

static inline __attribute__((always_inline)) int peek_count(BitReader *r, int n) {
    return (int)(r->bits >> (64 - n));
}

static inline __attribute__((always_inline)) void skip(BitReader *r, int n) {
    r->bits <<= n;
    r->count -= n;
}

// Decodes one Huffman symbol; -1 for an invalid code.
static inline __attribute__((always_inline)) int decode_symbol(BitReader *r, const HuffTable *t) {
    if (r->count < 16) refill(r);
    unsigned entry = t->fast[peek_count(r, LOOKAHEAD)];
    if (entry) {
        skip(r, (int)(entry >> 8));
        return (int)(entry & 0xFF);
    }
    int len = LOOKAHEAD + 1;
    int32_t code = peek_count(r, len);
    while (len <= 16 && code > t->maxcode[len]) {
        len++;
        code = peek_count(r, len);
    }
    if (len > 16) return -1;
    skip(r, len);
    return t->symbols[(t->valoffset[len] + code) & 0xFF];
}

// Reads `s` bits (1...15) as a signed JPEG magnitude.
static inline __attribute__((always_inline)) int receive_extend(BitReader *r, int s) {
    if (r->count < s) refill(r);
    int v = peek_count(r, s);
    skip(r, s);
    return v < (1 << (s - 1)) ? v - (1 << s) + 1 : v;
}

// The mean over output cell `i` (of `n` cells across 8 samples) of the 1-D IDCT basis `u`,
// including the normalisation C(u)/2.
static double basis_mean(int n, int i, int u) {
    double sum = 0;
    int width = 8 / n;
    for (int x = i * width; x < (i + 1) * width; x++) {
        sum += cos((2 * x + 1) * u * M_PI / 16);
    }
    double c = u == 0 ? sqrt(0.5) : 1;
    return c / 2 * sum / width;
}

// Four means (128 below their level) as rounded, clamped bytes.
static inline __attribute__((always_inline)) void to_bytes(v4 acc, uint8_t *out) {
    v4 v = acc + 128.5f;
#if __has_builtin(__builtin_elementwise_max) && __has_builtin(__builtin_convertvector)
    const v4 zero = {0, 0, 0, 0}, top = {255, 255, 255, 255};
    typedef int i4 __attribute__((vector_size(16)));
    typedef uint8_t u4 __attribute__((vector_size(4)));
    v = __builtin_elementwise_min(__builtin_elementwise_max(v, zero), top);
    u4 bytes = __builtin_convertvector(__builtin_convertvector(v, i4), u4);
    memcpy(out, &bytes, 4);
#else
    for (int i = 0; i < 4; i++) {
        float x = v[i] < 0 ? 0 : v[i];
        out[i] = (uint8_t)(int)(x > 255 ? 255 : x);
    }
#endif
}

// libjpeg passes its IDCT output through a range-limit table indexed by the value masked to
// ten bits (jdmaster.c, prepare_range_limit_table): that clamps values within 512 of the
// centre and wraps the rest around, so damaged data whose means land further out gives
// TurboJPEG other pixels than clamping does. An 8-bit image's means stay far inside (an IDCT
// overshoots the sample range by a few hundred at most); a block that does not is declined,
// so that TurboJPEG decodes the file and its pixels are the decode's.
enum { IDCT_RANGE = 500 };

// TurboJPEG's SIMD reduced IDCTs (2×2, 4×4) dequantise in 16-bit lanes, so a coefficient
// whose product with its quantiser leaves the int16 range wraps there and gives other pixels
// than exact arithmetic. An 8-bit image's dequantised coefficients stay near 1 024 at most;
// a block whose values could reach past 32 767 (bounded by the OR of their magnitudes times
// the table's largest entry) is damaged and declined, so TurboJPEG decodes the file.
static inline __attribute__((always_inline)) int beyond_dequantised_range(int magnitude, int pred, int qmax) {
    int dc = pred < 0 ? -pred : pred;
    return (long)(magnitude | dc) * qmax > 32767;
}

static inline __attribute__((always_inline)) int beyond_idct_range(v4 acc) {
    const v4 top = {IDCT_RANGE, IDCT_RANGE, IDCT_RANGE, IDCT_RANGE};
    typedef int i4 __attribute__((vector_size(16)));
    i4 out = (acc > top) | (acc < -top);
    return out[0] | out[1] | out[2] | out[3];
}

static inline __attribute__((always_inline)) uint8_t clamp_byte(float v) {
    v += 0.5f;
    if (v <= 0) return 0;
    if (v >= 255) return 255;
    return (uint8_t)v;
}

// Decodes the AC codes of one block whose values are kept, folding each coefficient into the
// means (`vectors` of four). Returns the position after the last coefficient (> 64 for a
// corrupt block), or -1 for a bad code. `vectors` is a constant at each call.
static inline __attribute__((always_inline)) int accumulate_ac(
    BitReader *r, const HuffTable *act, const v4 (*weight)[4], v4 *acc, int vectors, int *magnitude) {
    int n = 1;
    int bits = 0;  // the OR of the values' magnitudes: at least the largest, below twice it
    while (n < 64) {
        if (r->count < 16) refill(r);
        FastAC e = act->fastac[peek_count(r, FASTBITS)];
        if (__builtin_expect(e.bits0 != 0, 1)) {
            // The end of the block is a step of zero into position 64. A second step is taken
            // only inside this block: after a coefficient at 63 the next code is the next
            // block's.
            int k = n + (e.runs & 15);
            float v = e.value0;
            bits |= (e.value0 ^ (e.value0 >> 15)) | (e.value1 ^ (e.value1 >> 15));
            if (n < 48) {
                // The first step ends at 62 at most, so the second (if any) is this block's
                // too, and both are taken without a branch on whether there is one (that
                // branch would be mispredicted often): without one, the second adds a zero
                // and advances nothing. A second step past 63 is corrupt data, caught by
                // the caller as a block that ran past 64 (the weights are zero there).
                for (int i = 0; i < vectors; i++) acc[i] += v * weight[k][i];
                n = e.flags & FAST_EOB0 ? 64 : k + 1;
                k = n + (e.runs >> 4);
                v = e.value1;
                for (int i = 0; i < vectors; i++) acc[i] += v * weight[k][i];
                n = e.flags & FAST_EOB1 ? 64 : n + fast_advance1(e);
                skip(r, e.bits);
                continue;
            }
            for (int i = 0; i < vectors; i++) acc[i] += v * weight[k][i];
            n = e.flags & FAST_EOB0 ? 64 : k + 1;
            if ((e.flags & FAST_SECOND) && n + (e.runs >> 4) < 64) {
                k = n + (e.runs >> 4);
                v = e.value1;
                for (int i = 0; i < vectors; i++) acc[i] += v * weight[k][i];
                n = e.flags & FAST_EOB1 ? 64 : k + 1;
                skip(r, e.bits);
            } else {
                skip(r, e.bits0);
            }
            continue;
        }
        int run;
        float v;
        {
            int rs = decode_symbol(r, act);
            if (rs < 0) return -1;
            int s = rs & 15;
            run = rs >> 4;
            if (s == 0) {
                if (run != 15) break;
                n += 16;
                continue;
            }
            int value = receive_extend(r, s);
            bits |= value < 0 ? -value : value;
            v = (float)value;
        }
        n += run;
        const v4 *w = weight[n];
        for (int i = 0; i < vectors; i++) acc[i] += v * w[i];
        n++;
    }
    *magnitude = bits;
    return n;
}

int lumen_jpeg_decode_reduced(
    const uint8_t *data, size_t size, int denominator, uint8_t *rgb, int out_width, int out_height,
    const int *cancelled) {
    uint16_t quant[4][64];
    int have_quant[4] = {0};
    HuffTable *tables = calloc(8, sizeof(HuffTable));  // 0-3 DC, 4-7 AC
    Component comps[3];
    int ncomp = 0, width = 0, height = 0, restart_interval = 0, have_frame = 0;
    int status = -1;
    uint8_t *planes = NULL;
    if (!tables) return -1;
    if (denominator != 8 && denominator != 4) goto done;
    // Output pixels per block side of a full-resolution component.
    int scale = 8 / denominator;

    const uint8_t *p = data, *end = data + size;
    if (size < 4 || p[0] != 0xFF || p[1] != 0xD8) goto done;
    p += 2;
    // Marker segments up to the start of scan.
    for (;;) {
        while (p < end && *p != 0xFF) p++;
        while (p < end && *p == 0xFF) p++;
        if (p >= end) goto done;
        int marker = *p++;
        if (marker == 0xD8 || marker == 0xD9 || (marker >= 0xD0 && marker <= 0xD7) || marker == 0x01) goto done;
        if (end - p < 2) goto done;
        int length = p[0] << 8 | p[1];
        if (length < 2 || end - p < length) goto done;
        const uint8_t *s = p + 2, *send = p + length;
        p = send;
        switch (marker) {
        case 0xC0:
        case 0xC1: {
            if (have_frame || send - s < 6 || s[0] != 8) goto done;
            height = s[1] << 8 | s[2];
            width = s[3] << 8 | s[4];
            ncomp = s[5];
            if ((ncomp != 1 && ncomp != 3) || width == 0 || height == 0 || send - s < 6 + 3 * ncomp) goto done;
            for (int c = 0; c < ncomp; c++) {
                const uint8_t *q = s + 6 + 3 * c;
                comps[c].id = q[0];
                comps[c].h = q[1] >> 4;
                comps[c].v = q[1] & 15;
                comps[c].tq = q[2];
                if (comps[c].tq > 3) goto done;
            }
            // Components named R, G, B hold RGB, not YCbCr.
            if (ncomp == 3 && comps[0].id == 'R' && comps[1].id == 'G' && comps[2].id == 'B') goto done;
            have_frame = 1;
            break;
        }
        case 0xC4:
            while (s < send) {
                if (send - s < 17) goto done;
                int tc = s[0] >> 4, th = s[0] & 15;
                if (tc > 1 || th > 3) goto done;
                int total = 0;
                for (int i = 0; i < 16; i++) total += s[1 + i];
                if (send - s < 17 + total) goto done;
                // libjpeg refuses a DC table with a symbol over 15 ("Bogus Huffman table
                // definition") even when no code uses it: decline it, and TurboJPEG reports it.
                if (tc == 0) {
                    for (int i = 0; i < total; i++) {
                        if (s[17 + i] > 15) goto done;
                    }
                }
                if (build_table(&tables[tc * 4 + th], s + 1, s + 17, total) != 0) goto done;
                s += 17 + total;
            }
            break;
        case 0xDB:
            while (s < send) {
                int pq = s[0] >> 4, tq = s[0] & 15;
                if (pq > 1 || tq > 3 || send - s < 1 + 64 * (pq + 1)) goto done;
                for (int k = 0; k < 64; k++) {
                    quant[tq][zigzag_to_natural[k]] = pq ? (uint16_t)(s[1 + 2 * k] << 8 | s[2 + 2 * k]) : s[1 + k];
                }
                have_quant[tq] = 1;
                s += 1 + 64 * (pq + 1);
            }
            break;
        case 0xDD:
            if (send - s < 2) goto done;
            restart_interval = s[0] << 8 | s[1];
            break;
        case 0xDA: {
            if (!have_frame || send - s < 1 || s[0] != ncomp || send - s < 1 + 2 * ncomp + 3) goto done;
            for (int i = 0; i < ncomp; i++) {
                const uint8_t *q = s + 1 + 2 * i;
                if (q[0] != comps[i].id) goto done;  // scan order must be frame order
                comps[i].dc = q[1] >> 4;
                comps[i].ac = q[1] & 15;
                if (comps[i].dc > 3 || comps[i].ac > 3) goto done;
                if (!tables[comps[i].dc].present || !tables[4 + comps[i].ac].present) goto done;
            }
            const uint8_t *t = s + 1 + 2 * ncomp;
            if (t[0] != 0 || t[1] != 63 || t[2] != 0) goto done;  // full spectral range
            goto scan;
        }
        default:
            if ((marker >= 0xC2 && marker <= 0xCF && marker != 0xC4 && marker != 0xCC)) goto done;
            // Markers libjpeg refuses (jdmarker.c, read_markers): JPG (0xC8, "unsupported
            // process"), DHP, EXP, JPG0-JPG13 and the reserved codes ("unsupported marker").
            if (marker < 0xC0 || marker == 0xDE || marker == 0xDF || (marker >= 0xF0 && marker <= 0xFD)) goto done;
            break;  // APPn, COM, DAC, DNL and the like
        }
    }

scan:;
    // Sampling: luma 1x1, 2x1, 1x2 or 2x2; chroma 1x1. Anything else is left to TurboJPEG.
    int hmax = comps[0].h, vmax = comps[0].v;
    if (hmax < 1 || hmax > 2 || vmax < 1 || vmax > 2) goto done;
    for (int c = 1; c < ncomp; c++) {
        if (comps[c].h != 1 || comps[c].v != 1) goto done;
    }
    if (ncomp == 1) hmax = vmax = comps[0].h = comps[0].v = 1;  // a lone component is not interleaved
    if ((width + denominator - 1) / denominator != out_width || (height + denominator - 1) / denominator != out_height) goto done;
    // means[log2 n][i][u]: basis u averaged over cell i of n (n = 1, 2 or 4 cells per block side).
    double means[3][4][8];
    for (int l = 0; l < 3; l++) {
        for (int i = 0; i < 4; i++) {
            for (int u = 0; u < 8; u++) means[l][i][u] = i < (1 << l) ? basis_mean(1 << l, i, u) : 0;
        }
    }
    int mcus_x = (width + 8 * hmax - 1) / (8 * hmax);
    int mcus_y = (height + 8 * vmax - 1) / (8 * vmax);
    FastACCache *cache = thread_fast_cache();
    if (!cache) goto done;
    unsigned long serial = ++cache->serial;
    long luma_blocks = (long)((width + 7) / 8) * ((height + 7) / 8);
    for (int c = 0; c < ncomp; c++) {
        Component *k = &comps[c];
        if (!have_quant[k->tq]) goto done;
        // Output pixels a block covers across and down.
        int ph = hmax / k->h * scale, pv = vmax / k->v * scale;
        // libjpeg's choice (jdmaster.c): the transform size, doubled from the scale while both
        // sides would still need upsampling, and the upsampling left over.
        int ssize = scale;
        while (ssize < 8 && ph % (2 * ssize) == 0 && pv % (2 * ssize) == 0) ssize *= 2;
        k->uh = 1;
        if (ph == ssize && pv == ssize) {
            k->fh = k->fv = ssize;
        } else if (ssize == 1) {
            // libjpeg repeats the DC here; the exact means are closer to the image.
            k->fh = ph;
            k->fv = pv;
        } else if (ph == 2 * ssize && pv == ssize) {
            // 4:2:2 at 1/4: libjpeg's h2v1 fancy upsampling, which it uses only for rows of
            // more than two samples (jdsample.c), and repeats samples otherwise.
            k->fh = k->fv = ssize;
            k->uh = 2;
            k->valid = (int)(((long)width * k->h * ssize + hmax * 8 - 1) / (hmax * 8));
        } else {
            goto done;  // vertical upsampling (4:4:0 at 1/4) needs the neighbouring rows
        }
        k->pred = 0;
        k->qmax = 0;
        for (int i = 0; i < 64; i++) k->qmax = quant[k->tq][i] > k->qmax ? quant[k->tq][i] : k->qmax;
        int lh = k->fh == 4 ? 2 : k->fh - 1, lv = k->fv == 4 ? 2 : k->fv - 1;
        memset(k->weight, 0, sizeof k->weight);
        for (int z = 0; z < 64; z++) {
            int pos = zigzag_to_natural[z], row = pos / 8, col = pos % 8;
            for (int cell = 0; cell < k->fh * k->fv; cell++) {
                int cy = cell / k->fh, cx = cell % k->fh;
                k->weight[z][cell / 4][cell % 4] = (float)(means[lh][cx][col] * means[lv][cy][row] * quant[k->tq][pos]);
            }
        }
        HuffTable *act = &tables[4 + k->ac];
        if (k->fh == 1 && k->fv == 1) {
            // Below ~10 000 blocks the group table costs about what it saves.
            if (!act->group && luma_blocks >= 10000 && build_groups(act) != 0) goto done;
        } else if (!act->fastac && !(act->fastac = fast_ac_for(cache, act, serial))) {
            goto done;
        }
        // The DC difference's size code and magnitude in one look-up too: a table of sizes
        // reads as AC steps without runs (size 0 as an end of block of value 0). Only for
        // tables whose symbols are all sizes; a larger one goes the slow way and is rejected.
        HuffTable *dct = &tables[k->dc];
        int sizes_only = 1;
        for (int i = 0; i < 256; i++) sizes_only &= dct->symbols[i] <= 11;
        if (sizes_only && !dct->fastac && !(dct->fastac = fast_ac_for(cache, dct, serial))) goto done;
    }
    // Output pixels per MCU across and down; the planes are padded to whole MCUs.
    int stride = mcus_x * hmax * scale;
    int rows = vmax * scale;
    // One MCU row of output per component, and as much again for the means of components that
    // are upsampled: each row is converted to RGB as soon as it is complete.
    planes = malloc((size_t)stride * (size_t)rows * (size_t)ncomp * 2);
    if (!planes) goto done;

    BitReader r = {p, end, 0, 0, 0, 0};
    int mcus_left = restart_interval;
    int expected_rst = 0;
    for (int my = 0; my < mcus_y; my++) {
        if (lumen_flag_is_set(cancelled)) {
            status = LUMEN_DECODE_CANCELLED;
            goto done;
        }
        for (int mx = 0; mx < mcus_x; mx++) {
            if (restart_interval) {
                if (mcus_left == 0) {
                    // Byte-align, then expect RSTn right here: any whole byte still unread
                    // before the marker would be damaged data.
                    r.bits = 0;
                    r.count = 0;
                    r.padding = 0;
                    if (!r.hit_marker && (r.end - r.p < 2 || r.p[0] != 0xFF)) goto done;
                    const uint8_t *m = r.p;
                    while (m < r.end && *m == 0xFF) m++;
                    if (m >= r.end || *m != 0xD0 + expected_rst) goto done;
                    r.p = m + 1;
                    r.hit_marker = 0;
                    expected_rst = (expected_rst + 1) & 7;
                    for (int c = 0; c < ncomp; c++) comps[c].pred = 0;
                    mcus_left = restart_interval;
                }
                mcus_left--;
            }
            for (int c = 0; c < ncomp; c++) {
                Component *k = &comps[c];
                const HuffTable *dct = &tables[k->dc], *act = &tables[4 + k->ac];
                uint8_t *plane = planes + (size_t)(k->uh > 1 ? ncomp + c : c) * stride * rows;
                int cells = k->fh * k->fv;
                for (int by = 0; by < k->v; by++) {
                    for (int bx = 0; bx < k->h; bx++) {
                        if (r.count < 16) refill(&r);
                        FastAC dcstep = dct->fastac ? dct->fastac[peek_count(&r, FASTBITS)] : (FastAC){0, 0, 0, 0, 0, 0};
                        if (__builtin_expect(dcstep.bits0 != 0, 1)) {
                            skip(&r, dcstep.bits0);
                            k->pred += dcstep.value0;
                        } else {
                            int sym = decode_symbol(&r, dct);
                            if (sym < 0 || sym > 11) goto done;
                            if (sym) k->pred += receive_extend(&r, sym);
                        }
                        if (k->pred < -32768 || k->pred > 32767) goto done;  // not 8-bit data
                        int x0 = (mx * k->h + bx) * k->fh, y0 = by * k->fv;
                        int n = 1;
                        if (cells == 1) {
                            // Only the DC term shows: skip the AC codes and their bits.
                            // Several symbols per table look-up where they fit. A group is
                            // taken whole only if it stays inside the block: a block whose
                            // last coefficient is non-zero has no EOB, and the symbols after
                            // it belong to the next block (those steps go the slow way).
                            while (n < 64) {
                                if (r.count < 32) refill(&r);
                                uint32_t e = act->group ? act->group[peek_count(&r, PAIRBITS)] : 0;
                                int advance = (int)(e >> GROUP_ADV_SHIFT) & 255;
                                if (__builtin_expect(e != 0 && n + advance < 64, 1)) {
                                    skip(&r, (int)(e & GROUP_BITS_MASK));
                                    n += advance;
                                    if (e & GROUP_EOB) break;
                                    continue;
                                }
                                int rs = decode_symbol(&r, act);
                                if (rs < 0) goto done;
                                if (r.count < 16) refill(&r);
                                skip(&r, rs & 15);
                                if (rs & 15) {
                                    n += (rs >> 4) + 1;
                                } else if (rs == 0xF0) {
                                    n += 16;
                                } else {
                                    break;
                                }
                            }
                            if (n > 64) goto done;
                            float mean = (float)k->pred * k->weight[0][0][0];
                            if (mean > IDCT_RANGE || mean < -IDCT_RANGE) goto done;  // see beyond_idct_range
                            plane[(size_t)y0 * stride + x0] = clamp_byte(mean + 128);
                            continue;
                        }
                        float dc = (float)k->pred;
                        uint8_t cell[16];
                        uint8_t *o = plane + (size_t)y0 * stride + x0;
                        if (cells <= 4) {
                            v4 acc[1] = {dc * k->weight[0][0]};
                            int magnitude;
                            n = accumulate_ac(&r, act, (const v4 (*)[4])k->weight, acc, 1, &magnitude);
                            if (beyond_idct_range(acc[0]) || beyond_dequantised_range(magnitude, k->pred, k->qmax)) goto done;
                            to_bytes(acc[0], cell);
                        } else {
                            v4 acc[4] = {dc * k->weight[0][0], dc * k->weight[0][1], dc * k->weight[0][2], dc * k->weight[0][3]};
                            int magnitude;
                            n = accumulate_ac(&r, act, (const v4 (*)[4])k->weight, acc, 4, &magnitude);
                            if (beyond_idct_range(acc[0]) | beyond_idct_range(acc[1]) | beyond_idct_range(acc[2])
                                | beyond_idct_range(acc[3]) | beyond_dequantised_range(magnitude, k->pred, k->qmax)) goto done;
                            for (int i = 0; i < 4; i++) to_bytes(acc[i], cell + 4 * i);
                        }
                        if (n < 0 || n > 64) goto done;
                        if (k->fh == 2 && k->fv == 2) {
                            memcpy(o, cell, 2);
                            memcpy(o + stride, cell + 2, 2);
                        } else if (k->fh == 4) {
                            for (int cy = 0; cy < 4; cy++) memcpy(o + (size_t)cy * stride, cell + 4 * cy, 4);
                        } else {
                            // 2x1 or 1x2 (4:2:2, 4:4:0 at 1/8).
                            o[0] = cell[0];
                            o[k->fh == 2 ? 1 : stride] = cell[1];
                        }
                    }
                }
            }
            if (r.count < r.padding) goto done;  // decoded past the data: cut short or corrupt
        }
        // Upsampling across (libjpeg's h2v1_fancy_upsample, or plain repetition for rows of
        // at most two samples), from the means into the component's plane.
        for (int c = 0; c < ncomp; c++) {
            const Component *k = &comps[c];
            if (k->uh == 1) continue;
            int cw = k->valid;
            for (int row = 0; row < rows; row++) {
                const uint8_t *in = planes + (size_t)(ncomp + c) * stride * rows + (size_t)row * stride;
                uint8_t *o = planes + (size_t)c * stride * rows + (size_t)row * stride;
                if (cw <= 2) {
                    for (int i = 0; i < cw; i++) o[2 * i] = o[2 * i + 1] = in[i];
                    continue;
                }
                o[0] = in[0];
                o[1] = (uint8_t)((in[0] * 3 + in[1] + 2) >> 2);
                for (int i = 1; i < cw - 1; i++) {
                    int v = in[i] * 3;
                    o[2 * i] = (uint8_t)((v + in[i - 1] + 1) >> 2);
                    o[2 * i + 1] = (uint8_t)((v + in[i + 1] + 2) >> 2);
                }
                o[2 * cw - 2] = (uint8_t)((in[cw - 1] * 3 + in[cw - 2] + 1) >> 2);
                o[2 * cw - 1] = in[cw - 1];
            }
        }
        // Colour: JFIF YCbCr to RGB, or grey, for this MCU row's output rows.
        for (int row = 0; row < rows && my * rows + row < out_height; row++) {
            const uint8_t *yp = planes + (size_t)row * stride;
            uint8_t *o = rgb + (size_t)(my * rows + row) * out_width * 3;
            if (ncomp == 1) {
                for (int x = 0; x < out_width; x++) { o[3 * x] = o[3 * x + 1] = o[3 * x + 2] = yp[x]; }
                continue;
            }
            const uint8_t *cb = yp + (size_t)stride * rows, *cr = cb + (size_t)stride * rows;
            for (int x = 0; x < out_width; x++) {
                float luma = (float)yp[x] + 0.5f, b = (float)cb[x] - 128, rr = (float)cr[x] - 128;
                o[3 * x] = (uint8_t)(int)fminf(fmaxf(luma + 1.402f * rr, 0), 255);
                o[3 * x + 1] = (uint8_t)(int)fminf(fmaxf(luma - 0.344136f * b - 0.714136f * rr, 0), 255);
                o[3 * x + 2] = (uint8_t)(int)fminf(fmaxf(luma + 1.772f * b, 0), 255);
            }
        }
    }

    // Many whole bytes left between the last block and the marker mean the codes were misread
    // (damaged data that fell back in step), not padding: decline, as JPEGCodec does for
    // TurboJPEG's "extraneous bytes before marker 0xd9" warning from the same count (64).
    // The marker after the scan must be the end of the image: libjpeg reads on to it, and
    // refuses what it finds on the way (a second frame header: "two SOF markers"); anything
    // there is declined and left to TurboJPEG.
    {
        size_t left = r.hit_marker ? 0 : (size_t)r.count / 8;
        const uint8_t *m = r.p;
        for (; !r.hit_marker && m < r.end && left < 64; m++) {
            if (*m == 0xFF && m + 1 < r.end && m[1] != 0x00) break;  // the marker
            if (*m != 0x00 || m == r.p || m[-1] != 0xFF) left++;     // a stuffed FF 00 is one byte
        }
        if (left >= 64) goto done;
        while (m < r.end && *m == 0xFF) m++;
        if (m >= r.end || *m != 0xD9) goto done;
    }
    status = 0;
done:
    free(planes);
    for (int i = 0; i < 8; i++) free(tables[i].group);
    free(tables);
    return status;
}
