// ThreadSanitizer builds only (`-Xswiftc -DLUMEN_TSAN_MUTEX`): this module's unqualified
// `Mutex` is LumenConcurrency's `PThreadMutex`, a lock TSan can see (why: that file's header).
// Without the flag this file is empty and `Mutex` is `Synchronization.Mutex`. Every module
// that uses `Mutex` holds this same file; scripts/check-sanitizers.sh checks that they do.

#if LUMEN_TSAN_MUTEX
import LumenConcurrency

typealias Mutex<Value: ~Copyable> = PThreadMutex<Value>
#endif
