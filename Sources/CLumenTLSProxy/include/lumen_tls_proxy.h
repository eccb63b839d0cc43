#ifndef LUMEN_TLS_PROXY_H
#define LUMEN_TLS_PROXY_H
// CLumenTLSProxy (Lumen's tests only, Linux): a TLS front for the plain loopback test server,
// so that the HTTP loaders can be tested over https without a network. It makes a self-signed
// certificate for 127.0.0.1 and localhost (a P-256 key, valid from an hour ago for a day, its
// own certificate authority), listens on an ephemeral port of 127.0.0.1, and relays each
// connection, decrypted, to a plain TCP port of 127.0.0.1. Built on OpenSSL's libssl.
#include <stddef.h>
#include <stdint.h>

typedef struct lumen_tls_proxy lumen_tls_proxy;

/// Starts a proxy to `backend_port` and writes its certificate (PEM) to `certificate_path`.
/// Returns NULL on failure, with a message in `error` (at most `error_size` bytes).
lumen_tls_proxy *lumen_tls_proxy_start(uint16_t backend_port, const char *certificate_path,
                                       char *error, size_t error_size);

/// The port the proxy listens on.
uint16_t lumen_tls_proxy_port(const lumen_tls_proxy *proxy);

/// Connections accepted so far.
long lumen_tls_proxy_connections(lumen_tls_proxy *proxy);

/// Waits until at least `count` handshakes have failed (a client that refused the
/// certificate, say: the proxy hears of it after the client gave up), or `timeout_ms` passed;
/// returns how many have failed.
long lumen_tls_proxy_wait_for_failed_handshakes(lumen_tls_proxy *proxy, long count, int timeout_ms);

/// Stops listening, closes every connection, waits for the proxy's threads and frees it.
void lumen_tls_proxy_stop(lumen_tls_proxy *proxy);

#endif
