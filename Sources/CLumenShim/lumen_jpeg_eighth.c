// A JPEG decoder for one case only: a baseline (sequential Huffman, 8-bit) JPEG decoded at 1/8
// scale, which is what a thumbnail of a large photo needs. At 1/8 every 8x8 block becomes one
// pixel per block of the full-resolution plane, so only a few transform coefficients matter:
// the luma blocks' DC terms and, for subsampled chroma (one block per 16 luma pixels), the 2x2
// means of the block. The AC codes still have to be parsed to find where each block ends, but
// their values are skipped (luma) or folded straight into four accumulators (subsampled
// chroma): no coefficient blocks, no IDCT, no upsampling pass.
//
// Anything outside that case (progressive, arithmetic coding, 12-bit, CMYK, separate scans,
// restart markers out of place, a bad Huffman code, data that ends early) returns a non-zero
// status and the caller decodes with TurboJPEG instead, which keeps its error semantics.
#include "lumen_jpeg.h"
#include <math.h>
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
} HuffTable;

typedef struct {
    int id, h, v, tq;
    int dc, ac;  // table indices for the scan
    int fh, fv;  // output pixels per block horizontally / vertically (1 or 2)
    int pred;
    float weight[64][4];  // dequantised contribution of each coefficient to the 2x2 means
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

static inline __attribute__((always_inline)) uint8_t clamp_byte(float v) {
    v += 0.5f;
    if (v <= 0) return 0;
    if (v >= 255) return 255;
    return (uint8_t)v;
}

int lumen_jpeg_decode_eighth(const uint8_t *data, size_t size, uint8_t *rgb, int out_width, int out_height) {
    uint16_t quant[4][64];
    int have_quant[4] = {0};
    HuffTable *tables = calloc(8, sizeof(HuffTable));  // 0-3 DC, 4-7 AC
    Component comps[3];
    int ncomp = 0, width = 0, height = 0, restart_interval = 0, have_frame = 0;
    int status = -1;
    uint8_t *planes = NULL;
    if (!tables) return -1;

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
            if ((marker >= 0xC2 && marker <= 0xCF && marker != 0xC4 && marker != 0xC8 && marker != 0xCC)) goto done;
            break;  // APPn, COM and the like
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
    int pw = (width + 7) / 8, ph = (height + 7) / 8;
    if (pw != out_width || ph != out_height) goto done;
    // means[n - 1][i][u]: basis u averaged over cell i of n (n = 1 or 2 cells per block side).
    double means[2][2][8];
    for (int n = 1; n <= 2; n++) {
        for (int i = 0; i < 2; i++) {
            for (int u = 0; u < 8; u++) means[n - 1][i][u] = i < n ? basis_mean(n, i, u) : 0;
        }
    }
    for (int c = 0; c < ncomp; c++) {
        Component *k = &comps[c];
        if (!have_quant[k->tq]) goto done;
        k->fh = hmax / k->h;
        k->fv = vmax / k->v;
        // Below ~10 000 blocks the group table costs about what it saves.
        if (k->fh == 1 && k->fv == 1 && !tables[4 + k->ac].group && (long)pw * ph >= 10000) {
            if (build_groups(&tables[4 + k->ac]) != 0) goto done;
        }
        k->pred = 0;
        for (int pos = 0; pos < 64; pos++) {
            int row = pos / 8, col = pos % 8;
            for (int cell = 0; cell < 4; cell++) {
                int cy = cell / 2, cx = cell % 2;
                double w = (cy < k->fv && cx < k->fh) ? means[k->fh - 1][cx][col] * means[k->fv - 1][cy][row] : 0;
                k->weight[pos][cell] = (float)(w * quant[k->tq][pos]);
            }
        }
    }
    int mcus_x = (width + 8 * hmax - 1) / (8 * hmax);
    int mcus_y = (height + 8 * vmax - 1) / (8 * vmax);
    // Planes padded to whole MCUs, one byte per output pixel per component.
    int stride = mcus_x * 8 * hmax / 8;
    // One MCU row of output: each is converted to RGB as soon as it is complete, so the
    // planes never hold more than vmax rows.
    int rows = vmax;
    planes = malloc((size_t)stride * (size_t)rows * (size_t)ncomp);
    if (!planes) goto done;

    BitReader r = {p, end, 0, 0, 0, 0};
    int mcus_left = restart_interval;
    int expected_rst = 0;
    for (int my = 0; my < mcus_y; my++) {
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
                uint8_t *plane = planes + (size_t)c * stride * rows;
                int subsampled = k->fh > 1 || k->fv > 1;
                for (int by = 0; by < k->v; by++) {
                    for (int bx = 0; bx < k->h; bx++) {
                        int sym = decode_symbol(&r, dct);
                        if (sym < 0 || sym > 11) goto done;
                        if (sym) k->pred += receive_extend(&r, sym);
                        if (k->pred < -32768 || k->pred > 32767) goto done;  // not 8-bit data
                        int x0 = (mx * k->h + bx) * k->fh, y0 = by * k->fv;
                        int n = 1;
                        if (!subsampled) {
                            // Only the DC term shows at 1/8: skip the AC codes and their bits.
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
                            plane[(size_t)y0 * stride + x0] = clamp_byte((float)k->pred * k->weight[0][0] + 128);
                            continue;
                        }
                        float dc = (float)k->pred;
                        float acc[4] = {dc * k->weight[0][0], dc * k->weight[0][1], dc * k->weight[0][2], dc * k->weight[0][3]};
                        while (n < 64) {
                            int rs = decode_symbol(&r, act);
                            if (rs < 0) goto done;
                            int run = rs >> 4, s = rs & 15;
                            if (s == 0) {
                                if (run != 15) break;
                                n += 16;
                                continue;
                            }
                            n += run;
                            float v = (float)receive_extend(&r, s);
                            const float *w = k->weight[zigzag_to_natural[n]];
                            acc[0] += v * w[0]; acc[1] += v * w[1]; acc[2] += v * w[2]; acc[3] += v * w[3];
                            n++;
                        }
                        if (n > 64) goto done;
                        for (int cy = 0; cy < k->fv; cy++) {
                            for (int cx = 0; cx < k->fh; cx++) {
                                plane[(size_t)(y0 + cy) * stride + x0 + cx] = clamp_byte(acc[cy * 2 + cx] + 128);
                            }
                        }
                    }
                }
            }
            if (r.count < r.padding) goto done;  // decoded past the data: cut short or corrupt
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
                float luma = yp[x], b = (float)cb[x] - 128, rr = (float)cr[x] - 128;
                o[3 * x] = clamp_byte(luma + 1.402f * rr);
                o[3 * x + 1] = clamp_byte(luma - 0.344136f * b - 0.714136f * rr);
                o[3 * x + 2] = clamp_byte(luma + 1.772f * b);
            }
        }
    }

    status = 0;
done:
    free(planes);
    for (int i = 0; i < 8; i++) free(tables[i].group);
    free(tables);
    return status;
}
