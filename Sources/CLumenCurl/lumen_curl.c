#include "lumen_curl.h"
#include <string.h>
#include <sys/socket.h>
#include <netinet/in.h>

CURLcode lumen_curl_easy_setopt_long(CURL *handle, CURLoption option, long value) {
    return curl_easy_setopt(handle, option, value);
}

CURLcode lumen_curl_easy_setopt_off_t(CURL *handle, CURLoption option, curl_off_t value) {
    return curl_easy_setopt(handle, option, value);
}

CURLcode lumen_curl_easy_setopt_string(CURL *handle, CURLoption option, const char *value) {
    return curl_easy_setopt(handle, option, value);
}

CURLcode lumen_curl_easy_setopt_pointer(CURL *handle, CURLoption option, void *value) {
    return curl_easy_setopt(handle, option, value);
}

CURLcode lumen_curl_easy_setopt_write_callback(CURL *handle, CURLoption option, curl_write_callback callback) {
    return curl_easy_setopt(handle, option, callback);
}

CURLMcode lumen_curl_multi_setopt_long(CURLM *multi, CURLMoption option, long value) {
    return curl_multi_setopt(multi, option, value);
}

CURLcode lumen_curl_easy_getinfo_long(CURL *handle, CURLINFO info, long *value) {
    return curl_easy_getinfo(handle, info, value);
}

CURLcode lumen_curl_easy_getinfo_string(CURL *handle, CURLINFO info, const char **value) {
    return curl_easy_getinfo(handle, info, value);
}

CURLcode lumen_curl_easy_setopt_opensocket_callback(CURL *handle, curl_opensocket_callback callback) {
    return curl_easy_setopt(handle, CURLOPT_OPENSOCKETFUNCTION, callback);
}

int lumen_curl_sockaddr_bytes(const struct curl_sockaddr *address, unsigned char bytes[16]) {
    // `addr` is declared a `struct sockaddr` but holds `addrlen` bytes of the family's own
    // struct (libcurl copies up to sizeof(struct sockaddr_storage)).
    const void *raw = &address->addr;
    if (address->family == AF_INET && address->addrlen >= sizeof(struct sockaddr_in)) {
        memcpy(bytes, &((const struct sockaddr_in *)raw)->sin_addr, 4);
        return 4;
    }
    if (address->family == AF_INET6 && address->addrlen >= sizeof(struct sockaddr_in6)) {
        memcpy(bytes, &((const struct sockaddr_in6 *)raw)->sin6_addr, 16);
        return 16;
    }
    return 0;
}

curl_socket_t lumen_curl_open_socket(const struct curl_sockaddr *address) {
#ifdef SOCK_CLOEXEC
    return socket(address->family, address->socktype | SOCK_CLOEXEC, address->protocol);
#else
    return socket(address->family, address->socktype, address->protocol);
#endif
}
