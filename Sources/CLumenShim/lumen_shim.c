#include "lumen_shim.h"
#include <lcms2.h>

uint32_t lumen_lcms_type_rgb_8(void) { return TYPE_RGB_8; }
uint32_t lumen_lcms_type_rgba_8(void) { return TYPE_RGBA_8; }
uint32_t lumen_lcms_type_cmyk_8(void) { return TYPE_CMYK_8; }
uint32_t lumen_lcms_type_gray_8(void) { return TYPE_GRAY_8; }

// MARK: - lcms2 contexts with a memory budget

#include <lcms2_plugin.h>
#include <stdlib.h>
#include <string.h>

// Each block carries its size in a 16-byte header (keeps malloc's alignment).
#define LUMEN_LCMS_HEADER 16

typedef struct {
    size_t live;
    size_t budget;
} lumen_lcms_budget;

// The most any budgeted context on this thread has held since the last reset (for tests).
static _Thread_local size_t lcms_peak;

static void note_live(const lumen_lcms_budget *b) {
    if (b->live > lcms_peak) lcms_peak = b->live;
}

void lumen_lcms_reset_peak(void) { lcms_peak = 0; }

size_t lumen_lcms_peak_bytes(void) { return lcms_peak; }

static void *budget_malloc(cmsContext context, cmsUInt32Number size) {
    lumen_lcms_budget *b = cmsGetContextUserData(context);
    if (b == NULL || size > b->budget - b->live) return NULL;
    unsigned char *p = malloc((size_t)size + LUMEN_LCMS_HEADER);
    if (p == NULL) return NULL;
    size_t n = size;
    memcpy(p, &n, sizeof n);
    b->live += n;
    note_live(b);
    return p + LUMEN_LCMS_HEADER;
}

static void budget_free(cmsContext context, void *ptr) {
    if (ptr == NULL) return;
    unsigned char *p = (unsigned char *)ptr - LUMEN_LCMS_HEADER;
    size_t n;
    memcpy(&n, p, sizeof n);
    lumen_lcms_budget *b = cmsGetContextUserData(context);
    if (b != NULL) b->live -= n;
    free(p);
}

static void *budget_realloc(cmsContext context, void *ptr, cmsUInt32Number size) {
    if (ptr == NULL) return budget_malloc(context, size);
    unsigned char *old = (unsigned char *)ptr - LUMEN_LCMS_HEADER;
    size_t old_size;
    memcpy(&old_size, old, sizeof old_size);
    lumen_lcms_budget *b = cmsGetContextUserData(context);
    if (b == NULL || size > b->budget - (b->live - old_size)) return NULL;
    unsigned char *p = realloc(old, (size_t)size + LUMEN_LCMS_HEADER);
    if (p == NULL) return NULL;
    size_t n = size;
    memcpy(p, &n, sizeof n);
    b->live = b->live - old_size + n;
    note_live(b);
    return p + LUMEN_LCMS_HEADER;
}

static cmsPluginMemHandler budget_plugin = {
    .base = {
        .Magic = cmsPluginMagicNumber,
        .ExpectedVersion = LCMS_VERSION,
        .Type = cmsPluginMemHandlerSig,
        .Next = NULL,
    },
    .MallocPtr = budget_malloc,
    .FreePtr = budget_free,
    .ReallocPtr = budget_realloc,
};

cmsContext lumen_lcms_context_new(size_t budget) {
    lumen_lcms_budget *b = malloc(sizeof *b);
    if (b == NULL) return NULL;
    b->live = 0;
    b->budget = budget;
    cmsContext context = cmsCreateContext(&budget_plugin, b);
    if (context == NULL) free(b);
    return context;
}

void lumen_lcms_context_free(cmsContext context) {
    if (context == NULL) return;
    lumen_lcms_budget *b = cmsGetContextUserData(context);
    cmsDeleteContext(context);
    free(b);
}
