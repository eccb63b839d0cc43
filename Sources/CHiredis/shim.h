// hiredis (Debian's libhiredis-dev). Lumen calls redisCommandArgv only: binary-safe
// arguments with explicit lengths, so no key or value is ever parsed as a format string.
#include <hiredis/hiredis.h>
