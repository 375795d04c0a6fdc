/*
 * serve_http.c: the HTTP side of `sinkwatch serve` (serve.h): options,
 * the listening socket, libmicrohttpd with one internal thread (the only
 * thread that reads run files), and the rules every request passes in
 * this order: GET or HEAD; a Host header naming this server (DNS
 * rebinding); the access token when there is one; then a fixed route: the
 * page, a fixed list of static names, or /api/. No path from a request is
 * ever opened: run files are named by "D/FILE" ids that serve.c checks.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "config.h"
#include "serve/serve.h"
#include "serve/serve_assets.h"
#include "tools/tools.h"

#define SERVE_HOSTS 16

struct served {
	sw_srv *srv;
	char *hosts[SERVE_HOSTS];	/* accepted Host header values */
	size_t nhosts;
	char token[129];		/* "" for none */
	char *dyg_js, *dyg_css;		/* the dygraphs files, read at start */
	size_t dyg_js_len, dyg_css_len;
};

static volatile sig_atomic_t serve_stop;

static void
on_signal(int sig)
{
	(void)sig;
	serve_stop = 1;
}

static void
usage(FILE *f)
{
	fputs("usage: sinkwatch serve [DATA_DIR...] [--listen HOST:PORT] [--allow-remote]\n"
	    "        [--host NAME]... [--token-file FILE] [--stale SECONDS]\n"
	    "       sinkwatch serve [DATA_DIR...] --export DIR [--run NAME]...\n"
	    "\n"
	    "A read-only web dashboard over the run files of DATA_DIR (default\n"
	    "sinkwatch-data). --listen defaults to 127.0.0.1:8710; an address that is\n"
	    "not loopback needs --allow-remote and an access token (SINKWATCH_TOKEN,\n"
	    "--token-file, or one made and printed at start).\n"
	    "--export DIR writes a static copy of the runs (each --run NAME: a run\n"
	    "name, a file name or an id; all when none) that opens from file://\n"
	    "with no server, then exits.\n", f);
}

/* Reads a whole file (at most 16 MiB); NULL on failure. */
static char *
slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	char *buf = NULL;
	size_t cap = 0, n = 0;
	if (!f)
		return NULL;
	for (;;) {
		if (n == cap) {
			char *g = cap < (16u << 20) ? realloc(buf, cap = cap ? 2 * cap : 65536) : NULL;
			if (!g) {
				free(buf);
				fclose(f);
				return NULL;
			}
			buf = g;
		}
		size_t got = fread(buf + n, 1, cap - n, f);
		n += got;
		if (got == 0)
			break;
	}
	fclose(f);
	*len = n;
	return buf;
}

/* Compares in time independent of where a and b differ. */
static int
token_eq(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b);
	unsigned char d = (unsigned char)(la != lb);
	for (size_t i = 0; i < la && i < lb; i++)
		d |= (unsigned char)(a[i] ^ b[i]);
	return d == 0;
}

/* The value of cookie name in a Cookie header, copied into buf. */
static int
cookie_get(const char *hdr, const char *name, char *buf, size_t len)
{
	size_t nl = strlen(name);
	for (const char *p = hdr; p && *p;) {
		while (*p == ' ' || *p == ';')
			p++;
		const char *end = strchr(p, ';');
		size_t n = end ? (size_t)(end - p) : strlen(p);
		if (n > nl && !strncmp(p, name, nl) && p[nl] == '=') {
			snprintf(buf, len, "%.*s", (int)(n - nl - 1), p + nl + 1);
			return 1;
		}
		p = end;
	}
	return 0;
}

static const char *
conn_arg(void *ctx, const char *key)
{
	return MHD_lookup_connection_value(ctx, MHD_GET_ARGUMENT_KIND, key);
}

static void
security_headers(struct MHD_Response *resp)
{
	MHD_add_response_header(resp, "Content-Security-Policy",
	    "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; "
	    "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'");
	MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
	MHD_add_response_header(resp, "X-Frame-Options", "DENY");
	MHD_add_response_header(resp, "Referrer-Policy", "no-referrer");
	MHD_add_response_header(resp, "Cross-Origin-Resource-Policy", "same-origin");
}

static enum MHD_Result
send_buf(struct MHD_Connection *c, int status, const char *type, const void *data,
    size_t len, enum MHD_ResponseMemoryMode mode, const char *cookie, const char *disp)
{
	struct MHD_Response *resp = MHD_create_response_from_buffer(len, (void *)data, mode);
	if (!resp)
		return MHD_NO;
	MHD_add_response_header(resp, "Content-Type", type);
	MHD_add_response_header(resp, "Cache-Control", "no-store");
	security_headers(resp);
	if (cookie)
		MHD_add_response_header(resp, "Set-Cookie", cookie);
	if (disp && *disp)
		MHD_add_response_header(resp, "Content-Disposition", disp);
	enum MHD_Result ret = MHD_queue_response(c, (unsigned)status, resp);
	MHD_destroy_response(resp);
	return ret;
}

static enum MHD_Result
send_text(struct MHD_Connection *c, int status, const char *msg)
{
	return send_buf(c, status, "text/plain; charset=utf-8", msg, strlen(msg),
	    MHD_RESPMEM_PERSISTENT, NULL, NULL);
}

static const struct sw_asset *
asset(const char *name)
{
	for (const struct sw_asset *a = sw_assets; a->name; a++)
		if (!strcmp(a->name, name))
			return a;
	return NULL;
}

static const char *
asset_type(const char *name)
{
	const char *dot = strrchr(name, '.');
	if (dot && !strcmp(dot, ".js"))
		return "text/javascript; charset=utf-8";
	if (dot && !strcmp(dot, ".css"))
		return "text/css; charset=utf-8";
	return "text/html; charset=utf-8";
}

static enum MHD_Result
on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
    const char *version, const char *upload, size_t *upload_len, void **con_cls)
{
	struct served *sv = cls;
	char cookie[200] = "";
	const char *set_cookie = NULL;
	(void)version;
	(void)upload;

	/* read-only: GET and HEAD, and no body */
	if (strcmp(method, "GET") && strcmp(method, "HEAD"))
		return send_text(c, 405, "read-only: GET and HEAD only\n");
	if (!*con_cls) {	/* the first call, headers only */
		*con_cls = c;
		return MHD_YES;
	}
	if (*upload_len)
		return send_text(c, 400, "no request body\n");
	/* the Host header must name this server: a page of another origin
	 * that rebinds its name to 127.0.0.1 sends its own */
	const char *host = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Host");
	int host_ok = 0;
	for (size_t i = 0; host && i < sv->nhosts; i++)
		host_ok |= !strcasecmp(host, sv->hosts[i]);
	if (!host_ok)
		return send_text(c, 403, "Host header is not this server's\n");
	if (sv->token[0]) {
		const char *auth = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
		const char *q = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "token");
		const char *ck = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Cookie");
		char got[200] = "";
		int ok = 0;
		if (auth && !strncmp(auth, "Bearer ", 7))
			ok |= token_eq(auth + 7, sv->token);
		if (ck && cookie_get(ck, "sw_token", got, sizeof(got)))
			ok |= token_eq(got, sv->token);
		if (q && token_eq(q, sv->token)) {
			ok = 1;
			snprintf(cookie, sizeof(cookie),
			    "sw_token=%s; HttpOnly; SameSite=Strict; Path=/", sv->token);
			set_cookie = cookie;
		}
		if (!ok)
			return send_text(c, 401, "access token required\n");
	}
	if (!strcmp(url, "/") || !strcmp(url, "/index.html")) {
		const struct sw_asset *a = asset("index.html");
		return send_buf(c, 200, "text/html; charset=utf-8", a->data, a->len,
		    MHD_RESPMEM_PERSISTENT, set_cookie, NULL);
	}
	if (!strcmp(url, "/favicon.ico"))
		return send_buf(c, 204, "image/x-icon", "", 0, MHD_RESPMEM_PERSISTENT, NULL, NULL);
	if (!strncmp(url, "/static/", 8)) {
		const char *name = url + 8;
		if (!strcmp(name, "dygraph.min.js"))
			return send_buf(c, 200, "text/javascript; charset=utf-8", sv->dyg_js,
			    sv->dyg_js_len, MHD_RESPMEM_PERSISTENT, NULL, NULL);
		if (!strcmp(name, "dygraph.min.css"))
			return send_buf(c, 200, "text/css; charset=utf-8", sv->dyg_css,
			    sv->dyg_css_len, MHD_RESPMEM_PERSISTENT, NULL, NULL);
		const struct sw_asset *a = strcmp(name, "index.html") ? asset(name) : NULL;
		if (a)
			return send_buf(c, 200, asset_type(name), a->data, a->len,
			    MHD_RESPMEM_PERSISTENT, NULL, NULL);
		return send_text(c, 404, "not found\n");
	}
	if (!strncmp(url, "/api/", 5)) {
		sw_reply r;
		memset(&r, 0, sizeof(r));
		if (sw_srv_api(sv->srv, url, conn_arg, c, &r) != 0 || !r.body)
			return send_text(c, 500, "out of memory\n");
		return send_buf(c, r.status, r.type, r.body, r.len, MHD_RESPMEM_MUST_FREE,
		    set_cookie, r.disposition);
	}
	return send_text(c, 404, "not found\n");
}

/* Whether the address is loopback (127/8, ::1, ::ffff:127/104). */
static int
is_loopback(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET)
		return (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) == 127;
	if (sa->sa_family == AF_INET6) {
		const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
		return IN6_IS_ADDR_LOOPBACK(a) || (IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127);
	}
	return 0;
}

static int
is_wildcard(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET)
		return ((const struct sockaddr_in *)sa)->sin_addr.s_addr == htonl(INADDR_ANY);
	return sa->sa_family == AF_INET6 &&
	    IN6_IS_ADDR_UNSPECIFIED(&((const struct sockaddr_in6 *)sa)->sin6_addr);
}

/* Parses HOST:PORT ([V6]:PORT; localhost is 127.0.0.1) and binds it.
 * Returns the listening socket, the host part and the bound port. */
static int
listen_on(const char *spec, char *host, size_t hostlen, unsigned *port, int *loop, int *wild)
{
	const char *colon = strrchr(spec, ':');
	char h[128], p[16];
	struct addrinfo hints, *ai = NULL;

	if (!colon || colon == spec || strlen(colon + 1) >= sizeof(p) ||
	    (size_t)(colon - spec) >= sizeof(h)) {
		sw_tool_fail("serve", "--listen %s: HOST:PORT", spec);
		return -1;
	}
	snprintf(h, sizeof(h), "%.*s", (int)(colon - spec), spec);
	snprintf(p, sizeof(p), "%s", colon + 1);
	snprintf(host, hostlen, "%s", h);
	if (h[0] == '[' && h[strlen(h) - 1] == ']') {
		memmove(h, h + 1, strlen(h));
		h[strlen(h) - 1] = 0;
	}
	if (!strcmp(h, "localhost"))
		snprintf(h, sizeof(h), "127.0.0.1");
	memset(&hints, 0, sizeof(hints));
	hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV | AI_PASSIVE;
	hints.ai_socktype = SOCK_STREAM;
	int rc = getaddrinfo(h, p, &hints, &ai);
	if (rc != 0) {
		sw_tool_fail("serve", "--listen %s: %s (a numeric address, or localhost)", spec,
		    gai_strerror(rc));
		return -1;
	}
	*loop = is_loopback(ai->ai_addr);
	*wild = is_wildcard(ai->ai_addr);
	int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
	if (fd >= 0)
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (fd < 0 || bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, 64) != 0) {
		sw_tool_fail("serve", "--listen %s: %s", spec, strerror(errno));
		if (fd >= 0)
			close(fd);
		freeaddrinfo(ai);
		return -1;
	}
	freeaddrinfo(ai);
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	getsockname(fd, (struct sockaddr *)&ss, &sl);
	*port = ntohs(ss.ss_family == AF_INET ? ((struct sockaddr_in *)&ss)->sin_port :
	    ((struct sockaddr_in6 *)&ss)->sin6_port);
	return fd;
}

static int
add_host(struct served *sv, const char *name, unsigned port)
{
	char buf[300];
	if (sv->nhosts == SERVE_HOSTS)
		return -1;
	snprintf(buf, sizeof(buf), "%s:%u", name, port);
	return (sv->hosts[sv->nhosts++] = strdup(buf)) ? 0 : -1;
}

/* A token of 32 hex digits from /dev/urandom. */
static int
make_token(char *buf, size_t len)
{
	unsigned char b[16];
	int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
	if (fd < 0 || read(fd, b, sizeof(b)) != (ssize_t)sizeof(b)) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	close(fd);
	for (size_t i = 0; i < sizeof(b) && 2 * i + 2 < len; i++)
		snprintf(buf + 2 * i, 3, "%02x", b[i]);
	return 0;
}

/* The token of a file: its first line, 16 to 128 bytes of [A-Za-z0-9_-]. */
static int
read_token(const char *path, char *buf, size_t len)
{
	size_t n;
	char *t = slurp(path, &n);
	if (!t)
		return -1;
	size_t k = 0;
	while (k < n && k + 1 < len && t[k] != '\n' && t[k] != '\r')
		k++;
	memcpy(buf, t, k);
	buf[k] = 0;
	free(t);
	for (size_t i = 0; i < k; i++)
		if (!((buf[i] >= 'a' && buf[i] <= 'z') || (buf[i] >= 'A' && buf[i] <= 'Z') ||
		    (buf[i] >= '0' && buf[i] <= '9') || buf[i] == '-' || buf[i] == '_'))
			return -1;
	return k >= 16 ? 0 : -1;
}

/* --export DIR: the static copy of the runs named (all when none). */
static int
serve_export(struct served *sv, const char *dir, char **runs, size_t nruns)
{
	char err[1024], **ids;
	size_t nids;
	sw_page_lib lib = { sv->dyg_js, sv->dyg_css, sv->dyg_js_len, sv->dyg_css_len };

	if (sw_srv_pick(sv->srv, runs, nruns, &ids, &nids, err, sizeof(err)) != 0)
		return sw_tool_fail("serve", "%s%s", nruns ? "--run " : "", err);
	if (sw_srv_export(sv->srv, dir, ids, nids, &lib, err, sizeof(err)) != 0)
		return sw_tool_fail("serve", "--export: %s", err);
	printf("sinkwatch serve: %zu run%s exported: file://%s/index.html\n", nids,
	    nids == 1 ? "" : "s", dir);
	return 0;
}

/* The command line of `sinkwatch serve`. */
struct serve_opts {
	const char *listen_spec, *token_file, *export_dir;
	char *dirs[64], *names[SERVE_HOSTS], *runs[256];
	size_t ndirs, nnames, nruns;
	int allow_remote;
	double stale;
};

/* Reads the options into o: -1 to go on, or the exit status. */
static int
serve_args(int argc, char **argv, struct serve_opts *o)
{
	o->listen_spec = "127.0.0.1:8710";
	o->stale = 60;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		int more = i + 1 < argc;
		if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
			usage(stdout);
			return 0;
		} else if (!strcmp(a, "--listen") && more)
			o->listen_spec = argv[++i];
		else if (!strcmp(a, "--allow-remote"))
			o->allow_remote = 1;
		else if (!strcmp(a, "--host") && more && o->nnames < SERVE_HOSTS - 4)
			o->names[o->nnames++] = argv[++i];
		else if (!strcmp(a, "--token-file") && more)
			o->token_file = argv[++i];
		else if (!strcmp(a, "--export") && more)
			o->export_dir = argv[++i];
		else if (!strcmp(a, "--run") && more) {
			if (o->nruns == sizeof(o->runs) / sizeof(o->runs[0]))
				return sw_tool_fail("serve", "at most %zu --run", o->nruns);
			o->runs[o->nruns++] = argv[++i];
		}
		else if (!strcmp(a, "--stale") && more) {
			char *end;
			o->stale = strtod(argv[++i], &end);
			if (*end || !(o->stale > 0))
				return sw_tool_fail("serve", "--stale %s: seconds > 0", argv[i]);
		} else if (a[0] == '-') {
			usage(stderr);
			return sw_tool_fail("serve", "unknown option or missing value: %s", a);
		} else if (o->ndirs < 64)
			o->dirs[o->ndirs++] = argv[i];
		else
			return sw_tool_fail("serve", "at most 64 data directories");
	}
	if (o->nruns && !o->export_dir)
		return sw_tool_fail("serve", "--run chooses the runs of --export; the server "
		    "shows every run");
	if (o->ndirs == 0)
		o->dirs[o->ndirs++] = "sinkwatch-data";
	for (size_t i = 0; i < o->ndirs; i++)
		if (access(o->dirs[i], R_OK | X_OK) != 0)
			return sw_tool_fail("serve", "%s: %s", o->dirs[i], strerror(errno));
	return -1;
}

/* The listening socket, checked against what a non-loopback address needs
 * (--allow-remote, --host, a token), and the Host names allowed; the
 * socket, or -1 (said). */
static int
serve_listen(struct served *sv, const struct serve_opts *o, char *host, size_t hostlen,
    unsigned *port, int *loop)
{
	int wild;
	int fd = listen_on(o->listen_spec, host, hostlen, port, loop, &wild);
	if (fd < 0)
		return -1;
	if (!*loop) {
		if (!o->allow_remote) {
			close(fd);
			sw_tool_fail("serve", "--listen %s is not a loopback address: add "
			    "--allow-remote (an access token is then required)", o->listen_spec);
			return -1;
		}
		if (wild && o->nnames == 0) {
			close(fd);
			sw_tool_fail("serve", "--listen %s: name the host the browsers use with "
			    "--host NAME (the Host header is checked)", o->listen_spec);
			return -1;
		}
		if (!sv->token[0] && make_token(sv->token, sizeof(sv->token)) != 0) {
			close(fd);
			sw_tool_fail("serve", "no token: /dev/urandom: %s", strerror(errno));
			return -1;
		}
	}
	if (*loop) {
		add_host(sv, "127.0.0.1", *port);
		add_host(sv, "localhost", *port);
		add_host(sv, "[::1]", *port);
	}
	if (!wild && strcmp(host, "127.0.0.1") && strcmp(host, "localhost") &&
	    strcmp(host, "[::1]"))
		add_host(sv, host, *port);
	for (size_t i = 0; i < o->nnames; i++)
		add_host(sv, o->names[i], *port);
	return fd;
}

/* Serves on fd until SIGINT or SIGTERM; 0, or 2 (said). The address shown
 * carries the token where the user did not give it. */
static int
serve_run(struct served *sv, const struct serve_opts *o, int fd, const char *host,
    unsigned port, int loop, const char *env_token)
{
	/* the signals reach this thread only: MHD's thread inherits the mask */
	sigset_t block, old;
	sigemptyset(&block);
	sigaddset(&block, SIGINT);
	sigaddset(&block, SIGTERM);
	sigprocmask(SIG_BLOCK, &block, &old);
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	/* the run list's readers opened before the first request (and before
	 * MHD's thread exists: HDF5 is used by one thread at a time) */
	sw_srv_warm(sv->srv);
	/* one internal thread: every request, hence every HDF5 call, runs in it */
	struct MHD_Daemon *d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD |
	    MHD_USE_ERROR_LOG, 0, NULL, NULL, on_request, sv,
	    MHD_OPTION_LISTEN_SOCKET, (MHD_socket)fd,
	    MHD_OPTION_CONNECTION_LIMIT, (unsigned)256,
	    MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)60,
	    MHD_OPTION_END);
	if (!d) {
		close(fd);
		return sw_tool_fail("serve", "libmicrohttpd did not start");
	}
	const char *shown = loop ? "127.0.0.1" : o->nnames ? o->names[0] : host;
	if (!loop && !strcmp(shown, host) && !strcmp(host, "[::1]"))
		shown = "[::1]";
	if (sv->token[0] && (!env_token || strcmp(env_token, sv->token)) && !o->token_file)
		printf("sinkwatch serve: http://%s:%u/?token=%s\n", shown, port, sv->token);
	else
		printf("sinkwatch serve: http://%s:%u/\n", shown, port);
	fflush(stdout);
	while (!serve_stop)
		sigsuspend(&old);
	MHD_stop_daemon(d);
	close(fd);
	return 0;
}

int
sw_serve_main(int argc, char **argv)
{
	struct serve_opts o;
	struct served sv;
	char host[128];
	int rc = 2;

	memset(&o, 0, sizeof(o));
	memset(&sv, 0, sizeof(sv));
	if ((rc = serve_args(argc, argv, &o)) >= 0)
		return rc;
	rc = 2;
	if (!(sv.srv = sw_srv_new(o.dirs, o.ndirs, o.stale)))
		return sw_tool_fail("serve", "out of memory");
	if (!(sv.dyg_js = slurp(SW_DYGRAPHS_DIR "/dygraph.min.js", &sv.dyg_js_len)) ||
	    !(sv.dyg_css = slurp(SW_DYGRAPHS_DIR "/dygraph.min.css", &sv.dyg_css_len))) {
		sw_tool_fail("serve", "%s/dygraph.min.js: %s (Debian: libjs-dygraphs)",
		    SW_DYGRAPHS_DIR, strerror(errno));
		goto out;
	}
	if (o.export_dir) {
		rc = serve_export(&sv, o.export_dir, o.runs, o.nruns);
		goto out;
	}
	const char *env_token = getenv("SINKWATCH_TOKEN");
	if (o.token_file && read_token(o.token_file, sv.token, sizeof(sv.token)) != 0) {
		sw_tool_fail("serve", "--token-file %s: the first line must be 16 to 128 "
		    "letters, digits, - or _", o.token_file);
		goto out;
	}
	if (!o.token_file && env_token && *env_token)
		snprintf(sv.token, sizeof(sv.token), "%s", env_token);
	unsigned port;
	int loop;
	int fd = serve_listen(&sv, &o, host, sizeof(host), &port, &loop);
	if (fd >= 0)
		rc = serve_run(&sv, &o, fd, host, port, loop, env_token);
out:
	for (size_t i = 0; i < sv.nhosts; i++)
		free(sv.hosts[i]);
	free(sv.dyg_js);
	free(sv.dyg_css);
	sw_srv_free(&sv.srv);
	return rc;
}
