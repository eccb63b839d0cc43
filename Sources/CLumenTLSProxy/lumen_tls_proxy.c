#include "lumen_tls_proxy.h"

#if defined(__linux__)  // Lumen's tests use it on Linux only (OpenSSL from Debian's libssl-dev)

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <sched.h>

enum { MAX_CONNECTIONS = 64 };

struct lumen_tls_proxy {
    SSL_CTX *context;
    int listener;
    uint16_t port;
    uint16_t backend_port;
    pthread_t acceptor;
    int acceptor_started;
    pthread_mutex_t lock;
    pthread_cond_t changed;
    int stopping;
    int live;                       // connection threads running
    int clients[MAX_CONNECTIONS];   // their client sockets (-1: free slot)
    int backends[MAX_CONNECTIONS];  // their sockets to the backend (-1: none yet)
    long connections;
    long failed_handshakes;
};

struct connection {
    lumen_tls_proxy *proxy;
    int client;
    int slot;
};

static void set_error(char *error, size_t size, const char *what) {
    if (!error || size == 0) return;
    unsigned long code = ERR_get_error();
    char reason[200] = "";
    if (code) ERR_error_string_n(code, reason, sizeof reason);
    snprintf(error, size, "%s%s%s", what, code ? ": " : "", reason);
}

// A self-signed certificate for 127.0.0.1 and localhost, usable as its own CA.
static X509 *make_certificate(EVP_PKEY *key) {
    X509 *certificate = X509_new();
    if (!certificate) return NULL;
    X509_set_version(certificate, 2);
    ASN1_INTEGER_set(X509_get_serialNumber(certificate), 1);
    X509_gmtime_adj(X509_getm_notBefore(certificate), -3600);
    X509_gmtime_adj(X509_getm_notAfter(certificate), 86400);
    X509_set_pubkey(certificate, key);
    X509_NAME *name = X509_get_subject_name(certificate);
    X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, (const unsigned char *)"Lumen test server", -1, -1, 0);
    X509_set_issuer_name(certificate, name);
    X509V3_CTX v3;
    X509V3_set_ctx_nodb(&v3);
    X509V3_set_ctx(&v3, certificate, certificate, NULL, NULL, 0);
    const struct { int nid; const char *value; } extensions[] = {
        {NID_subject_alt_name, "IP:127.0.0.1,DNS:localhost"},
        {NID_basic_constraints, "critical,CA:TRUE"},
        {NID_key_usage, "critical,digitalSignature,keyCertSign"},
    };
    for (size_t i = 0; i < sizeof extensions / sizeof extensions[0]; i++) {
        X509_EXTENSION *extension = X509V3_EXT_conf_nid(NULL, &v3, extensions[i].nid, extensions[i].value);
        if (!extension || !X509_add_ext(certificate, extension, -1)) {
            X509_EXTENSION_free(extension);
            X509_free(certificate);
            return NULL;
        }
        X509_EXTENSION_free(extension);
    }
    if (!X509_sign(certificate, key, EVP_sha256())) {
        X509_free(certificate);
        return NULL;
    }
    return certificate;
}

static int write_all(int fd, const char *bytes, size_t count) {
    while (count > 0) {
        ssize_t n = send(fd, bytes, count, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return 0;
        bytes += n;
        count -= (size_t)n;
    }
    return 1;
}

// Relays one connection until either side closes or the proxy stops.
static void *serve(void *argument) {
    struct connection *connection = argument;
    lumen_tls_proxy *proxy = connection->proxy;
    // A client that went away must not end the process: SSL_write's SIGPIPE stays pending
    // on this thread instead, and the write fails with EPIPE.
    sigset_t pipe_signal;
    sigemptyset(&pipe_signal);
    sigaddset(&pipe_signal, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_signal, NULL);

    int backend = -1;
    SSL *ssl = SSL_new(proxy->context);
    if (ssl && SSL_set_fd(ssl, connection->client) == 1 && SSL_accept(ssl) == 1) {
        backend = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in address = {.sin_family = AF_INET, .sin_port = htons(proxy->backend_port)};
        address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        // Registered so that stop can wake a relay blocked writing to a backend that does not
        // read; refused once stopping (stop has already woken the others).
        pthread_mutex_lock(&proxy->lock);
        int admitted = backend >= 0 && !proxy->stopping;
        if (admitted) proxy->backends[connection->slot] = backend;
        pthread_mutex_unlock(&proxy->lock);
        if (admitted && connect(backend, (struct sockaddr *)&address, sizeof address) == 0) {
            char buffer[16384];
            for (;;) {
                if (SSL_pending(ssl) == 0) {
                    struct pollfd fds[2] = {{connection->client, POLLIN, 0}, {backend, POLLIN, 0}};
                    if (poll(fds, 2, -1) < 0) {
                        if (errno == EINTR) continue;
                        break;
                    }
                    if (fds[1].revents & (POLLIN | POLLHUP | POLLERR)) {
                        ssize_t n = recv(backend, buffer, sizeof buffer, 0);
                        if (n <= 0) break;
                        if (SSL_write(ssl, buffer, (int)n) <= 0) break;
                        continue;
                    }
                    if (!(fds[0].revents & (POLLIN | POLLHUP | POLLERR))) continue;
                }
                int n = SSL_read(ssl, buffer, sizeof buffer);
                if (n <= 0) break;
                if (!write_all(backend, buffer, (size_t)n)) break;
            }
        }
    } else {
        pthread_mutex_lock(&proxy->lock);
        proxy->failed_handshakes += 1;
        pthread_cond_broadcast(&proxy->changed);
        pthread_mutex_unlock(&proxy->lock);
    }
    if (ssl) SSL_free(ssl);

    pthread_mutex_lock(&proxy->lock);
    if (backend >= 0) close(backend);
    proxy->backends[connection->slot] = -1;
    close(connection->client);
    proxy->clients[connection->slot] = -1;
    proxy->live -= 1;
    pthread_cond_broadcast(&proxy->changed);
    pthread_mutex_unlock(&proxy->lock);
    free(connection);
    return NULL;
}

static void *accept_loop(void *argument) {
    lumen_tls_proxy *proxy = argument;
    for (;;) {
        int client = accept(proxy->listener, NULL, NULL);
        if (client < 0) {
            pthread_mutex_lock(&proxy->lock);
            int stopping = proxy->stopping;
            pthread_mutex_unlock(&proxy->lock);
            if (stopping) return NULL;  // stop shut the listener down
            if (errno != EINTR && errno != ECONNABORTED) sched_yield();  // out of descriptors, say: try again
            continue;
        }
        pthread_mutex_lock(&proxy->lock);
        int slot = -1;
        for (int i = 0; i < MAX_CONNECTIONS; i++) {
            if (proxy->clients[i] < 0) { slot = i; break; }
        }
        struct connection *connection = slot >= 0 ? malloc(sizeof *connection) : NULL;
        pthread_t thread;
        if (connection) {
            *connection = (struct connection){proxy, client, slot};
            proxy->clients[slot] = client;
            proxy->live += 1;
            proxy->connections += 1;
            if (pthread_create(&thread, NULL, serve, connection) == 0) {
                pthread_detach(thread);
            } else {
                proxy->clients[slot] = -1;
                proxy->live -= 1;
                free(connection);
                connection = NULL;
            }
        }
        pthread_mutex_unlock(&proxy->lock);
        if (!connection) close(client);
    }
}

lumen_tls_proxy *lumen_tls_proxy_start(uint16_t backend_port, const char *certificate_path,
                                       char *error, size_t error_size) {
    lumen_tls_proxy *proxy = calloc(1, sizeof *proxy);
    if (!proxy) return NULL;
    proxy->backend_port = backend_port;
    proxy->listener = -1;
    for (int i = 0; i < MAX_CONNECTIONS; i++) proxy->clients[i] = proxy->backends[i] = -1;
    pthread_mutex_init(&proxy->lock, NULL);
    pthread_cond_init(&proxy->changed, NULL);

    EVP_PKEY *key = EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-256");
    X509 *certificate = key ? make_certificate(key) : NULL;
    FILE *file = certificate ? fopen(certificate_path, "w") : NULL;
    int written = file && PEM_write_X509(file, certificate);
    if (file) fclose(file);
    proxy->context = written ? SSL_CTX_new(TLS_server_method()) : NULL;
    int ready = proxy->context && SSL_CTX_use_certificate(proxy->context, certificate) == 1
        && SSL_CTX_use_PrivateKey(proxy->context, key) == 1;
    X509_free(certificate);
    EVP_PKEY_free(key);
    if (!ready) {
        set_error(error, error_size, written ? "cannot set up the TLS context" : "cannot make or write the certificate");
        lumen_tls_proxy_stop(proxy);
        return NULL;
    }

    proxy->listener = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in address = {.sin_family = AF_INET, .sin_port = 0};
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof address;
    if (proxy->listener < 0 || bind(proxy->listener, (struct sockaddr *)&address, sizeof address) != 0
        || listen(proxy->listener, 64) != 0
        || getsockname(proxy->listener, (struct sockaddr *)&address, &length) != 0) {
        if (error && error_size > 0) snprintf(error, error_size, "cannot listen on 127.0.0.1: %s", strerror(errno));
        lumen_tls_proxy_stop(proxy);
        return NULL;
    }
    proxy->port = ntohs(address.sin_port);
    if (pthread_create(&proxy->acceptor, NULL, accept_loop, proxy) != 0) {
        if (error && error_size > 0) snprintf(error, error_size, "cannot start the accepting thread");
        lumen_tls_proxy_stop(proxy);
        return NULL;
    }
    proxy->acceptor_started = 1;
    return proxy;
}

uint16_t lumen_tls_proxy_port(const lumen_tls_proxy *proxy) { return proxy->port; }

long lumen_tls_proxy_connections(lumen_tls_proxy *proxy) {
    pthread_mutex_lock(&proxy->lock);
    long count = proxy->connections;
    pthread_mutex_unlock(&proxy->lock);
    return count;
}

long lumen_tls_proxy_wait_for_failed_handshakes(lumen_tls_proxy *proxy, long count, int timeout_ms) {
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += timeout_ms / 1000;
    deadline.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (deadline.tv_nsec >= 1000000000L) {
        deadline.tv_sec += 1;
        deadline.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&proxy->lock);
    while (proxy->failed_handshakes < count) {
        if (pthread_cond_timedwait(&proxy->changed, &proxy->lock, &deadline) == ETIMEDOUT) break;
    }
    long seen = proxy->failed_handshakes;
    pthread_mutex_unlock(&proxy->lock);
    return seen;
}

void lumen_tls_proxy_stop(lumen_tls_proxy *proxy) {
    if (!proxy) return;
    pthread_mutex_lock(&proxy->lock);
    proxy->stopping = 1;
    pthread_mutex_unlock(&proxy->lock);
    if (proxy->listener >= 0) {
        // Wakes the accepting thread's accept() with an error; it sees `stopping` and ends.
        shutdown(proxy->listener, SHUT_RDWR);
        if (proxy->acceptor_started) pthread_join(proxy->acceptor, NULL);
        close(proxy->listener);
    }
    pthread_mutex_lock(&proxy->lock);
    // Wakes every relay, whichever side it is blocked on.
    for (int i = 0; i < MAX_CONNECTIONS; i++) {
        if (proxy->clients[i] >= 0) shutdown(proxy->clients[i], SHUT_RDWR);
        if (proxy->backends[i] >= 0) shutdown(proxy->backends[i], SHUT_RDWR);
    }
    while (proxy->live > 0) pthread_cond_wait(&proxy->changed, &proxy->lock);
    pthread_mutex_unlock(&proxy->lock);
    SSL_CTX_free(proxy->context);
    pthread_mutex_destroy(&proxy->lock);
    pthread_cond_destroy(&proxy->changed);
    free(proxy);
}

#endif
