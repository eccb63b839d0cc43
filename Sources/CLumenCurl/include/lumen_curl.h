#ifndef LUMEN_CURL_H
#define LUMEN_CURL_H
// CLumenCurl: typed entry points to libcurl's variadic functions, which Swift cannot call
// (`curl_easy_setopt`, `curl_multi_setopt` and `curl_easy_getinfo` take their value as `...`).
// Each wrapper passes exactly the C type libcurl reads for that kind of option.
#include <curl/curl.h>

/// `curl_easy_setopt` for a `long` option (`CURLOPTTYPE_LONG`: flags, counts, milliseconds).
CURLcode lumen_curl_easy_setopt_long(CURL *handle, CURLoption option, long value);

/// `curl_easy_setopt` for a `curl_off_t` option (`CURLOPTTYPE_OFF_T`: sizes such as
/// `CURLOPT_POSTFIELDSIZE_LARGE`).
CURLcode lumen_curl_easy_setopt_off_t(CURL *handle, CURLoption option, curl_off_t value);

/// `curl_easy_setopt` for a string option (`CURLOPTTYPE_STRINGPOINT`); libcurl copies the string.
CURLcode lumen_curl_easy_setopt_string(CURL *handle, CURLoption option, const char *value);

/// `curl_easy_setopt` for a pointer option (`CURLOPTTYPE_OBJECTPOINT`, `CURLOPTTYPE_SLISTPOINT`,
/// `CURLOPTTYPE_CBPOINT`): an error buffer, a header list, a callback's user data, the
/// private pointer. libcurl keeps the pointer: it must outlive the handle's use of it.
CURLcode lumen_curl_easy_setopt_pointer(CURL *handle, CURLoption option, void *value);

/// `curl_easy_setopt` for `CURLOPT_WRITEFUNCTION` and `CURLOPT_HEADERFUNCTION`, which share
/// the write callback's type.
CURLcode lumen_curl_easy_setopt_write_callback(CURL *handle, CURLoption option, curl_write_callback callback);

/// `curl_multi_setopt` for a `long` option.
CURLMcode lumen_curl_multi_setopt_long(CURLM *multi, CURLMoption option, long value);

/// `curl_easy_getinfo` for a `CURLINFO_LONG` item.
CURLcode lumen_curl_easy_getinfo_long(CURL *handle, CURLINFO info, long *value);

/// `curl_easy_getinfo` for a `CURLINFO_STRING` item; the string belongs to the handle.
CURLcode lumen_curl_easy_getinfo_string(CURL *handle, CURLINFO info, const char **value);

/// `curl_easy_setopt` for `CURLOPT_OPENSOCKETFUNCTION` (CurlDataLoader's connection policy:
/// the callback sees each resolved address before any connection to it).
CURLcode lumen_curl_easy_setopt_opensocket_callback(CURL *handle, curl_opensocket_callback callback);

/// The address `address` names, as network-order bytes in `bytes`: returns 4 for IPv4, 16 for
/// IPv6, 0 for any other family or a truncated address. (Reading `struct sockaddr_in6` out of
/// the `struct sockaddr` libcurl embeds is a cast in C, a dance of rebinding in Swift.)
int lumen_curl_sockaddr_bytes(const struct curl_sockaddr *address, unsigned char bytes[16]);

/// Opens the socket libcurl asked for in `address`, close-on-exec (libcurl's own opener
/// does the same, and a child process must not inherit a connection).
curl_socket_t lumen_curl_open_socket(const struct curl_sockaddr *address);

#endif
