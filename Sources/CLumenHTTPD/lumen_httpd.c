#include "lumen_httpd.h"
#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>

// The identity unescaper: libmicrohttpd percent-decodes the path by default, but a signature
// covers the path as sent, and `plain/` sources are decoded by Lumen itself, once.
static size_t lumen_httpd_unescape_nothing(void *context, struct MHD_Connection *connection, char *text) {
    (void)context; (void)connection;
    return strlen(text);
}

static char lumen_httpd_bare_lf;
const void *lumen_httpd_bare_lf_marker(void) { return &lumen_httpd_bare_lf; }

// Called with the request target once the request line is split. libmicrohttpd 0.9.75
// accepts a bare LF as a line end (RFC 9112 lets a recipient do so), which lets a request be
// read differently by a proxy in front; Lumen refuses it. The line is still in the read
// buffer, its terminator overwritten in place: CR LF becomes two NULs, a bare LF one NUL
// followed by the next line's first byte. A CRLF line can never look like a bare LF here
// (both bytes are always NUL); a bare LF at the very end of what arrived may be missed.
static void *lumen_httpd_uri_seen(void *context, const char *uri, struct MHD_Connection *connection) {
    (void)context; (void)connection;
    if (!uri) return NULL;
    const char *end = uri + strlen(uri);
    const char *version = end + 1;
    // The version either still follows the target after a space, or was split off with a NUL.
    const char *space = strrchr(uri, ' ');
    const char *terminator;
    if (space && strncmp(space + 1, "HTTP/", 5) == 0) {
        terminator = end;
    } else if (strncmp(version, "HTTP/", 5) == 0) {
        terminator = version + strlen(version);
    } else {
        return NULL; // HTTP/0.9 or an unexpected layout: nothing to say
    }
    return terminator[1] != 0 ? &lumen_httpd_bare_lf : NULL;
}

struct MHD_Daemon *lumen_httpd_start(const struct lumen_httpd_settings *s,
                                     MHD_AccessHandlerCallback handler, void *handler_context,
                                     MHD_RequestCompletedCallback completed, void *completed_context) {
    unsigned int flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME;
    if (s->address->sa_family == AF_INET6) flags |= MHD_USE_IPv6;
    return MHD_start_daemon(
        flags, 0, NULL, NULL, handler, handler_context,
        MHD_OPTION_SOCK_ADDR, s->address,
        MHD_OPTION_THREAD_POOL_SIZE, s->threads,
        MHD_OPTION_CONNECTION_LIMIT, s->connection_limit,
        MHD_OPTION_CONNECTION_TIMEOUT, s->client_timeout,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, s->connection_memory_limit,
        MHD_OPTION_NOTIFY_COMPLETED, completed, completed_context,
        MHD_OPTION_UNESCAPE_CALLBACK, lumen_httpd_unescape_nothing, NULL,
        MHD_OPTION_URI_LOG_CALLBACK, lumen_httpd_uri_seen, NULL,
        MHD_OPTION_STRICT_FOR_CLIENT, (int)1,
        MHD_OPTION_END);
}

uint16_t lumen_httpd_port(struct MHD_Daemon *daemon) {
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(daemon, MHD_DAEMON_INFO_BIND_PORT);
    return info ? info->port : 0;
}

void lumen_httpd_client_address(struct MHD_Connection *connection, char *buffer, size_t length) {
    if (length == 0) return;
    buffer[0] = 0;
    const union MHD_ConnectionInfo *info = MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    if (!info || !info->client_addr) return;
    const struct sockaddr *address = info->client_addr;
    if (address->sa_family == AF_INET) {
        inet_ntop(AF_INET, &((const struct sockaddr_in *)address)->sin_addr, buffer, (socklen_t)length);
    } else if (address->sa_family == AF_INET6) {
        inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)address)->sin6_addr, buffer, (socklen_t)length);
    }
}
