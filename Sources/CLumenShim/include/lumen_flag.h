#ifndef LUMEN_FLAG_H
#define LUMEN_FLAG_H
// CLumenShim / cancellation: the flag a decode watches.

/// A decode's cancellation flag: an `int` that one thread sets (`lumen_flag_set`) while another
/// decodes and reads it between rows (`lumen_flag_is_set`). Why C: Swift's atomics cannot be
/// handed to C code as a plain address, and the decoders poll the flag in their C loops.
static inline void lumen_flag_set(int *flag) { __atomic_store_n(flag, 1, __ATOMIC_RELAXED); }
static inline int lumen_flag_is_set(const int *flag) { return flag && __atomic_load_n(flag, __ATOMIC_RELAXED); }

#endif
