import Lumen

// Writes and reads disk-cache keys from a second process (used by the cache tests).
print("lumen-cache-probe")
