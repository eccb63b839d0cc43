#ifndef LUMEN_HTTPD_H
#define LUMEN_HTTPD_H
// CLumenHTTPD: typed entry points to libmicrohttpd's variadic functions, which Swift cannot
// call (`MHD_start_daemon`, `MHD_get_daemon_info`, `MHD_get_connection_info` take their
// arguments as `...`). LumenServer's MicroHTTPServer is the only caller.
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <microhttpd.h>

/// The daemon's settings, passed to `MHD_start_daemon` as options.
struct lumen_httpd_settings {
    /// Where to listen: an IPv4 or IPv6 socket address (port 0 for an ephemeral one).
    const struct sockaddr *address;
    /// Threads in the epoll pool (at least 1).
    unsigned int threads;
    /// The most connections open at once; more are refused at accept.
    unsigned int connection_limit;
    /// Seconds a connection may stay idle (a request sent too slowly, a kept-alive connection
    /// that sends nothing) before it is closed; 0 for never.
    unsigned int client_timeout;
    /// Bytes of memory per connection for the request line and headers: bounds their size.
    size_t connection_memory_limit;
};

/// Starts an epoll thread-pool daemon that allows suspending connections. URLs reach
/// `handler` exactly as sent (no percent-decoding: signatures cover the path as sent).
/// Returns NULL when the daemon cannot start (address in use, say).
struct MHD_Daemon *lumen_httpd_start(const struct lumen_httpd_settings *settings,
                                     MHD_AccessHandlerCallback handler, void *handler_context,
                                     MHD_RequestCompletedCallback completed, void *completed_context);

/// What a request's first callback finds as its context when its request line ended in a
/// bare LF rather than CR LF (see lumen_httpd.c); NULL otherwise.
const void *lumen_httpd_bare_lf_marker(void);

/// The port the daemon listens on (after binding port 0), or 0 when unknown.
uint16_t lumen_httpd_port(struct MHD_Daemon *daemon);

/// The client's address as text ("127.0.0.1", "::1") into `buffer`; an empty string when
/// unknown.
void lumen_httpd_client_address(struct MHD_Connection *connection, char *buffer, size_t length);


#endif
