#include "lumen_png.h"
#include <stdlib.h>
#include <string.h>

// Each block carries its size in a 16-byte header (keeps malloc's alignment).
#define LUMEN_PNG_HEADER 16

static _Thread_local size_t live_bytes;
static _Thread_local size_t peak_bytes;

static void note_alloc(size_t n) {
    live_bytes += n;
    if (live_bytes > peak_bytes) peak_bytes = live_bytes;
}

static void *counting_malloc(size_t size) {
    if (size > SIZE_MAX - LUMEN_PNG_HEADER) return NULL;
    unsigned char *p = malloc(size + LUMEN_PNG_HEADER);
    if (p == NULL) return NULL;
    memcpy(p, &size, sizeof size);
    note_alloc(size);
    return p + LUMEN_PNG_HEADER;
}

static void counting_free(void *ptr) {
    if (ptr == NULL) return;
    unsigned char *p = (unsigned char *)ptr - LUMEN_PNG_HEADER;
    size_t size;
    memcpy(&size, p, sizeof size);
    live_bytes -= size;
    free(p);
}

static void *counting_realloc(void *ptr, size_t size) {
    if (ptr == NULL) return counting_malloc(size);
    if (size > SIZE_MAX - LUMEN_PNG_HEADER) return NULL;
    unsigned char *old = (unsigned char *)ptr - LUMEN_PNG_HEADER;
    size_t old_size;
    memcpy(&old_size, old, sizeof old_size);
    unsigned char *p = realloc(old, size + LUMEN_PNG_HEADER);
    if (p == NULL) return NULL;
    memcpy(p, &size, sizeof size);
    live_bytes -= old_size;
    note_alloc(size);
    return p + LUMEN_PNG_HEADER;
}

static void *counting_calloc(size_t count, size_t size) {
    if (size != 0 && count > SIZE_MAX / size) return NULL;
    void *p = counting_malloc(count * size);
    if (p != NULL) memset(p, 0, count * size);
    return p;
}

spng_ctx *lumen_spng_ctx_new(int flags) {
    struct spng_alloc alloc = {
        .malloc_fn = counting_malloc,
        .realloc_fn = counting_realloc,
        .calloc_fn = counting_calloc,
        .free_fn = counting_free,
    };
    return spng_ctx_new2(&alloc, flags);
}

void lumen_spng_reset_peak(void) { peak_bytes = live_bytes; }

size_t lumen_spng_peak_bytes(void) { return peak_bytes; }
