/* conf.c: the option table and its parsers (see conf.h). */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/conf.h"
#include "net/log.h"
#include "net/swnet.h"
#include "proto/swkeys.h"
#include "proto/swproto.h"

enum otype { O_STR, O_INT, O_LEVEL, O_OCT, O_LIST, O_ISA };

struct opt {
	const char *name;
	enum otype type;
	size_t off, size;
	const char *dflt;
	int64_t min, max;
	int runtime;		/* may change while running (SIGHUP) */
	const char *help;
};

#define S(f) offsetof(swd_config, f), sizeof(((swd_config *)0)->f)

static const struct opt opts[] = {
	{ "listen", O_STR, S(listen), SWD_DEFAULT_LISTEN, 0, 0, 0,
	  "ZeroMQ endpoint the daemon binds to receive snapshots" },
	{ "control", O_STR, S(control), SWD_DEFAULT_CONTROL, 0, 0, 0,
	  "ZeroMQ endpoint of the status/control socket" },
	{ "data_dir", O_STR, S(data_dir), "./sinkwatch-data", 0, 0, 0,
	  "directory of the run files (created if missing)" },
	{ "connect", O_STR, S(connect), "", 0, 0, 0,
	  "connect the SUB socket to this endpoint (a sinkwatch forward) instead of binding listen" },
	{ "subscribe", O_LIST, S(subscribe), "", 0, 0, 0,
	  "only runs whose id starts with this prefix; repeatable (none: all)" },
	{ "log_file", O_STR, S(log_file), "", 0, 0, 1,
	  "log to this file instead of stderr (SIGHUP reopens it)" },
	{ "log_level", O_LEVEL, S(log_level), "info", 0, 3, 1,
	  "error, warn, info or debug" },
	{ "budget_mb", O_INT, S(budget_mb), "512", 1, 1 << 20, 0,
	  "in-flight memory budget in MiB; past it messages are dropped and counted" },
	{ "max_message_mb", O_INT, S(max_message_mb), "256", 1, 1 << 16, 0,
	  "largest tensor frame accepted, in MiB" },
	{ "flush_ms", O_INT, S(flush_ms), "500", 10, 60000, 0,
	  "flush cadence of the run files, in milliseconds" },
	{ "step_timeout_ms", O_INT, S(step_timeout_ms), "10000", 10, 86400000, 0,
	  "an incomplete step is written (missing layers NaN) this long after its last layer" },
	{ "pair_rows", O_INT, S(pair_rows), "8", 0, 1 << 20, 0,
	  "rows per snapshot that get head-pair metrics (0: every row)" },
	{ "pair_metrics", O_INT, S(pair_metrics), "1", 0, 1, 0,
	  "1: compute head-pair metrics and flip rates; 0: skip them" },
	{ "cross_layer_pairs", O_INT, S(cross_layer_pairs), "0", 0, 1, 0,
	  "1: also store JS keep/drop between heads of different layers (new run files; "
	  "costs (L*H)^2 pair work per step)" },
	{ "drift_rows", O_INT, S(drift_rows), "8", 0, 1 << 20, 0,
	  "rows per snapshot kept for drift_content (fixed probes)" },
	{ "workers", O_INT, S(workers), "2", 1, 64, 0,
	  "metric worker threads" },
	{ "isa", O_ISA, S(isa), "auto", 0, 0, 0,
	  "metric kernels: auto (the best this CPU has), avx512, avx2 or generic; one the CPU "
	  "lacks refuses the start" },
	{ "batch", O_INT, S(batch), "64", 1, 100000, 0,
	  "messages received per event-loop turn" },
	{ "chunk_steps", O_INT, S(chunk_steps), "64", 1, 1 << 20, 0,
	  "HDF5 chunk length along the step axis" },
	{ "max_runs", O_INT, S(max_runs), "256", 1, 1 << 20, 0,
	  "runs tracked at once; when full an idle one is closed, else new runs are refused" },
	{ "max_open_steps", O_INT, S(max_open_steps), "1024", 1, 1 << 20, 0,
	  "steps assembled at once per run; past it the one idle longest is written" },
	{ "umask", O_OCT, S(umask), "022", 0, 0777, 0,
	  "file mode creation mask of the run files (octal)" },
	{ "run_idle_s", O_INT, S(run_idle_s), "600", 1, 86400 * 365, 0,
	  "a run with no message for this long is written out and its file closed" },
	{ "metrics_listen", O_STR, S(metrics_listen), "", 0, 0, 0,
	  "HOST:PORT (loopback) serving Prometheus metrics at /metrics (empty: none)" },
	{ "new_runs_per_s", O_INT, S(new_runs_per_s), "10", 0, 1 << 20, 0,
	  "new runs taken a second, past the burst; past it they are refused (0: no limit)" },
	{ "new_runs_burst", O_INT, S(new_runs_burst), "100", 1, 1 << 20, 0,
	  "new runs taken at once before new_runs_per_s applies" },
	{ "curve_secret_file", O_STR, S(curve_secret_file), "", 0, 0, 0,
	  "the daemon's CURVE secret key file (sinkwatch keygen): CURVE on both sockets" },
	{ "curve_allow", O_STR, S(curve_allow), "", 0, 0, 1,
	  "file of the client public keys allowed, one a line (SIGHUP reads it again)" },
	{ "connect_server_key", O_STR, S(connect_server_key), "", 0, 0, 0,
	  "with connect: the forwarder's public key, or a file holding it; the SUB socket is then "
	  "a CURVE client with the key pair of curve_secret_file" },
	{ "insecure_off_loopback", O_INT, S(insecure_off_loopback), "0", 0, 1, 0,
	  "1: listen beyond loopback without CURVE (anyone reaching the port may send)" },
};
#define NOPTS (sizeof(opts) / sizeof(opts[0]))

size_t swd_config_count(void) { return NOPTS; }
int swd_config_runtime(size_t i) { return i < NOPTS ? opts[i].runtime : 0; }

/* Whether option i has another value in b than in a. */
int
swd_config_differs(const swd_config *a, const swd_config *b, size_t i)
{
	if (i >= NOPTS)
		return 0;
	const struct opt *o = &opts[i];
	const char *x = (const char *)a + o->off, *y = (const char *)b + o->off;
	return o->type == O_STR || o->type == O_LIST || o->type == O_ISA ? strcmp(x, y) != 0 :
	    memcmp(x, y, o->size) != 0;
}
const char *swd_config_name(size_t i) { return i < NOPTS ? opts[i].name : NULL; }
const char *swd_config_help(size_t i) { return i < NOPTS ? opts[i].help : NULL; }
const char *swd_config_default(size_t i) { return i < NOPTS ? opts[i].dflt : NULL; }

static const struct opt *
find(const char *name)
{
	char norm[64];
	size_t n = strlen(name);
	if (n >= sizeof(norm))
		return NULL;
	for (size_t i = 0; i <= n; i++)
		norm[i] = name[i] == '-' ? '_' : name[i];
	for (size_t i = 0; i < NOPTS; i++)
		if (!strcmp(opts[i].name, norm))
			return &opts[i];
	return NULL;
}

static int
set_opt(swd_config *c, const struct opt *o, const char *v, char *err, size_t errlen)
{
	char *dst = (char *)c + o->off;
	switch (o->type) {
	case O_STR:
		if (strlen(v) >= o->size) {
			snprintf(err, errlen, "%s: value longer than %zu bytes", o->name, o->size - 1);
			return -1;
		}
		memcpy(dst, v, strlen(v) + 1);
		return 0;
	case O_LIST: {
		/* each occurrence adds an item; items are kept '\n'-separated
		 * (no run id has a control byte) */
		size_t vl = strlen(v), have = strlen(dst), items = have ? 1 : 0;
		if (!vl)
			return 0;
		if (vl > SWP_RUN_MAX) {
			snprintf(err, errlen, "%s: '%.40s...' is longer than a run id (%d bytes)",
			    o->name, v, SWP_RUN_MAX);
			return -1;
		}
		for (const unsigned char *p = (const unsigned char *)v; *p; p++)
			if (*p < 0x20 || *p == 0x7f) {
				snprintf(err, errlen, "%s: byte 0x%02x at %zu: a run id has no control "
				    "bytes, so this prefix would match nothing", o->name, *p,
				    (size_t)((const char *)p - v));
				return -1;
			}
		for (const char *p = dst; *p; p++)
			items += *p == '\n';
		for (const char *p = dst; *p; ) {	/* the same prefix twice: once */
			size_t n = strcspn(p, "\n");
			if (n == vl && !memcmp(p, v, n))
				return 0;
			p += n + (p[n] == '\n');
		}
		if (items >= SWD_LIST_MAX || have + 1 + vl >= o->size) {
			snprintf(err, errlen, "%s: more than %d prefixes", o->name, SWD_LIST_MAX);
			return -1;
		}
		if (have)
			dst[have++] = '\n';
		memcpy(dst + have, v, vl + 1);
		return 0;
	}
	case O_ISA:
		/* whether the CPU has it is the start's check (sinkwatchd.c):
		 * this file does not link the metric core */
		if (strcmp(v, "auto") && strcmp(v, "avx512") && strcmp(v, "avx2") &&
		    strcmp(v, "generic")) {
			snprintf(err, errlen, "%s: '%s' is not auto, avx512, avx2 or generic",
			    o->name, v);
			return -1;
		}
		memcpy(dst, v, strlen(v) + 1);
		return 0;
	case O_LEVEL: {
		int l = log_level_parse(v);
		if (l < 0) {
			snprintf(err, errlen, "%s: '%s' is not error, warn, info or debug", o->name, v);
			return -1;
		}
		*(int *)dst = l;
		return 0;
	}
	case O_INT:
	case O_OCT: {
		char *end;
		errno = 0;
		long long x = strtoll(v, &end, o->type == O_OCT ? 8 : 10);
		if (errno || end == v || *end) {
			snprintf(err, errlen, "%s: '%s' is not %s", o->name, v,
			    o->type == O_OCT ? "an octal integer (like 022)" : "an integer");
			return -1;
		}
		if (x < o->min || x > o->max) {
			snprintf(err, errlen, "%s: %lld is outside [%lld, %lld]", o->name, x,
			    (long long)o->min, (long long)o->max);
			return -1;
		}
		*(int64_t *)dst = x;
		return 0;
	}
	}
	return -1;
}

void
swd_config_defaults(swd_config *c)
{
	char err[256];
	memset(c, 0, sizeof(*c));
	for (size_t i = 0; i < NOPTS; i++)
		set_opt(c, &opts[i], opts[i].dflt, err, sizeof(err));
}

int
swd_config_set(swd_config *c, const char *name, const char *value, char *err, size_t errlen)
{
	const struct opt *o = find(name);
	if (!o) {
		snprintf(err, errlen, "unknown option '%s'", name);
		return -1;
	}
	return set_opt(c, o, value, err, errlen);
}

static char *
trim(char *s)
{
	while (*s == ' ' || *s == '\t')
		s++;
	char *e = s + strlen(s);
	while (e > s && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\n' || e[-1] == '\r'))
		*--e = '\0';
	return s;
}

int
swd_config_load(swd_config *c, const char *path, char *err, size_t errlen)
{
	FILE *f = fopen(path, "r");
	char *line = NULL, msg[512];
	size_t cap = 0;
	ssize_t len;
	int lineno = 0, rc = 0;

	if (!f) {
		snprintf(err, errlen, "%s: %s", path, strerror(errno));
		return -1;
	}
	/* getline: a NUL inside a line, the last line without a newline too, is
	 * seen (fgets would cut the line there without a word) */
	while ((len = getline(&line, &cap, f)) >= 0) {
		lineno++;
		if (len > 2047) {
			snprintf(err, errlen, "%s:%d: line too long (%zd bytes, 2047 at most)", path,
			    lineno, len);
			rc = -1;
			break;
		}
		if (memchr(line, '\0', (size_t)len)) {
			snprintf(err, errlen, "%s:%d: NUL byte in the line", path, lineno);
			rc = -1;
			break;
		}
		char *hash = strchr(line, '#');
		if (hash)
			*hash = '\0';
		char *s = trim(line);
		if (!*s)
			continue;
		char *eq = strchr(s, '=');
		if (!eq) {
			snprintf(err, errlen, "%s:%d: expected 'name = value'", path, lineno);
			rc = -1;
			break;
		}
		*eq = '\0';
		char *name = trim(s), *value = trim(eq + 1);
		size_t vl = strlen(value);
		if (vl >= 2 && value[0] == '"' && value[vl - 1] == '"') {
			value[vl - 1] = '\0';
			value++;
		}
		if (swd_config_set(c, name, value, msg, sizeof(msg))) {
			snprintf(err, errlen, "%s:%d: %s", path, lineno, msg);
			rc = -1;
			break;
		}
	}
	free(line);
	fclose(f);
	return rc;
}

void
swd_config_print(const swd_config *c, FILE *f)
{
	fprintf(f, "# sinkwatchd effective configuration\n");
	for (size_t i = 0; i < NOPTS; i++) {
		const struct opt *o = &opts[i];
		const char *p = (const char *)c + o->off;
		fprintf(f, "# %s%s\n", o->help, o->runtime ? " (SIGHUP applies it)" : "");
		switch (o->type) {
		case O_STR:
		case O_ISA:
			fprintf(f, "%s = \"%s\"\n", o->name, p);
			break;
		case O_LIST:
			if (!*p)
				fprintf(f, "%s = \"\"\n", o->name);
			for (const char *q = p; *q; ) {	/* one line per item: loadable */
				int n = (int)strcspn(q, "\n");
				fprintf(f, "%s = \"%.*s\"\n", o->name, n, q);
				q += n + (q[n] == '\n');
			}
			break;
		case O_LEVEL:
			fprintf(f, "%s = %s\n", o->name, log_level_name(*(const int *)p));
			break;
		case O_INT:
			fprintf(f, "%s = %lld\n", o->name, (long long)*(const int64_t *)p);
			break;
		case O_OCT:
			fprintf(f, "%s = %03llo\n", o->name, (long long)*(const int64_t *)p);
			break;
		}
	}
}

/* Beyond loopback; an endpoint with no transport is left to the bind's error. */
static int
beyond(const char *ep)
{
	return strstr(ep, "://") && !swp_endpoint_local(ep);
}

/* The start refusal of an endpoint beyond loopback without keys. */
static int
check_curve(const swd_config *c, char *err, size_t errlen)
{
	if (!c->curve_secret_file[0] != !c->curve_allow[0]) {
		snprintf(err, errlen, "curve_secret_file and curve_allow go together: the daemon's "
		    "secret key and the client keys it allows");
		return -1;
	}
	if (c->connect_server_key[0] && !c->connect[0]) {
		snprintf(err, errlen, "connect_server_key is the key of a forwarder the daemon "
		    "connects to: give connect too");
		return -1;
	}
	if (c->connect_server_key[0] && !c->curve_secret_file[0]) {
		snprintf(err, errlen, "connect_server_key needs curve_secret_file (and curve_allow): "
		    "the daemon's own key pair, whose public key the forwarder allows "
		    "(its --curve-allow-daemons)");
		return -1;
	}
	if (c->insecure_off_loopback)
		return 0;
	/* behind a forwarder the SUB connects (listen is not used), with its own keys:
	 * the forwarder's key from connect_server_key or, as for every client,
	 * SINKWATCH_SERVER_KEY (sinkwatchd.c curve_client) */
	const char *srv = c->connect_server_key[0] ? c->connect_server_key : NULL, *kf = NULL;
	swn_curve_env(&srv, &kf);
	const char *ep = c->connect[0] && !srv && beyond(c->connect) ?
	    c->connect : !c->connect[0] && !c->curve_secret_file[0] && beyond(c->listen) ?
	    c->listen : !c->curve_secret_file[0] && beyond(c->control) ? c->control : NULL;
	if (ep && ep == c->connect) {
		snprintf(err, errlen, "%s is beyond loopback and the hop to it is plain: anyone on "
		    "the way could read or forge runs. Give --connect-server-key KEY (the "
		    "forwarder's public key) with --curve-secret-file FILE and --curve-allow FILE, "
		    "or --insecure-off-loopback 1", ep);
		return -1;
	}
	if (ep) {
		snprintf(err, errlen, "%s is beyond loopback and CURVE is off: anyone reaching it "
		    "could send runs and read the status. Give --curve-secret-file FILE and "
		    "--curve-allow FILE (keys from sinkwatch keygen), or --insecure-off-loopback 1 "
		    "to accept anyone", ep);
		return -1;
	}
	return 0;
}

int
swd_config_check(const swd_config *c, char *err, size_t errlen)
{
	if (check_curve(c, err, errlen) != 0)
		return -1;
	if (!c->listen[0] || !c->control[0] || !c->data_dir[0]) {
		snprintf(err, errlen, "listen, control and data_dir must not be empty");
		return -1;
	}
	if (c->connect[0] && !strcmp(c->connect, c->control)) {
		snprintf(err, errlen, "connect and control are the same endpoint (%s)", c->connect);
		return -1;
	}
	if (!c->connect[0] && !strcmp(c->listen, c->control)) {
		snprintf(err, errlen, "listen and control are the same endpoint (%s)", c->listen);
		return -1;
	}
	if (c->max_message_mb > c->budget_mb) {
		snprintf(err, errlen, "max_message_mb (%lld) is larger than budget_mb (%lld): "
		    "no such message could ever be accepted",
		    (long long)c->max_message_mb, (long long)c->budget_mb);
		return -1;
	}
	return 0;
}

/*
 * The configuration: defaults, then the config file, then the flags over
 * it. The same at start and at SIGHUP (which applies the options that may
 * change while running). 0, or -1 with err.
 */
int
swd_read_config(int argc, char **argv, swd_config *c, char *err, size_t errlen)
{
	const char *config_file = NULL;

	swd_config_defaults(c);
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--config") && i + 1 < argc)
			config_file = argv[++i];
		else if (!strncmp(argv[i], "--config=", 9))
			config_file = argv[i] + 9;
	}
	if (config_file && swd_config_load(c, config_file, err, errlen) != 0)
		return -1;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (!strcmp(a, "--config")) {
			i++;
		} else if (!strncmp(a, "--config=", 9) || !strcmp(a, "--check-config") ||
		    !strcmp(a, "--print-config")) {
			continue;
		} else if (!strncmp(a, "--", 2)) {
			char name[64];
			const char *eq = strchr(a, '='), *val;
			size_t nl = eq ? (size_t)(eq - a - 2) : strlen(a + 2);
			if (nl >= sizeof(name)) {
				snprintf(err, errlen, "unknown option '%s'", a);
				return -1;
			}
			memcpy(name, a + 2, nl);
			name[nl] = '\0';
			if (!find(name)) {	/* before its value: --versoin is a typo */
				snprintf(err, errlen, "unknown option '%.*s' (sinkwatchd --help lists "
				    "the options)", (int)(nl + 2), a);
				return -1;
			}
			if (eq)
				val = eq + 1;
			else if (i + 1 < argc)
				val = argv[++i];
			else {
				snprintf(err, errlen, "%s needs a value", a);
				return -1;
			}
			if (swd_config_set(c, name, val, err, errlen) != 0) {
				size_t n = strlen(err);
				snprintf(err + n, errlen - n, " (sinkwatchd --help lists the options)");
				return -1;
			}
		} else {
			snprintf(err, errlen, "unexpected argument '%s'", a);
			return -1;
		}
	}
	return 0;
}
