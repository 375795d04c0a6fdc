/*
 * conf.h: sinkwatchd's configuration, from one table: each option has a
 * name (the config-file key; the flag is --name with '_' as '-'), a type,
 * a default, limits, and whether it can change while running.
 */
#ifndef SWD_CONF_H
#define SWD_CONF_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define SWD_DEFAULT_LISTEN "tcp://127.0.0.1:5710"
#define SWD_DEFAULT_CONTROL "tcp://127.0.0.1:5711"
#define SWD_LIST_MAX 64	/* items of a repeatable option (subscribe) */

typedef struct swd_config {
	char listen[256];	/* ZeroMQ endpoint the SUB socket binds */
	char control[256];	/* control (status) endpoint, REP */
	char data_dir[1024];
	char connect[256];	/* "" binds listen; else the SUB connects here */
	char subscribe[SWD_LIST_MAX * 130];	/* run id prefixes, '\n'-separated ("" all) */
	char log_file[1024];	/* "" for stderr */
	int log_level;
	int64_t budget_mb;	/* in-flight memory budget */
	int64_t max_message_mb;	/* largest tensor frame accepted */
	int64_t flush_ms;	/* flush cadence */
	int64_t step_timeout_ms;/* an incomplete step is written after this */
	int64_t pair_rows;	/* rows per snapshot that get head-pair metrics */
	int64_t pair_metrics;	/* 0: no head-pair metrics */
	int64_t cross_layer_pairs;	/* 1: JS between heads of different layers */
	int64_t drift_rows;	/* rows per snapshot kept for drift_content */
	int64_t workers;	/* metric worker threads */
	char isa[16];		/* metric kernels: "auto", "avx512", "avx2", "generic" */
	int64_t batch;		/* messages drained per loop turn */
	int64_t chunk_steps;	/* HDF5 chunk length along the step axis */
	int64_t max_runs;	/* runs tracked at once */
	int64_t max_open_steps;	/* steps being assembled per run */
	int64_t run_idle_s;	/* a run silent this long is closed (file kept) */
	int64_t umask;		/* file mode creation mask of run files */
	char metrics_listen[160];	/* HOST:PORT of GET /metrics, "" none */
	int64_t new_runs_per_s;	/* new runs taken into the table a second (0: no limit) */
	int64_t new_runs_burst;	/* new runs taken at once before the rate applies */
	char curve_secret_file[1024];	/* the daemon's CURVE secret key, "" no CURVE */
	char curve_allow[1024];	/* the client public keys allowed, one a line */
	char connect_server_key[1024];	/* the forwarder's public key (or its file): the
					 * SUB is a CURVE client of it; "" plain */
	int64_t insecure_off_loopback;	/* 1: bind beyond loopback without CURVE */
} swd_config;

void swd_config_defaults(swd_config *c);

/*
 * Sets option name (config-file spelling, '-' accepted for '_') from the
 * string value. 0, or -1 with a message in err naming the option and why.
 */
int swd_config_set(swd_config *c, const char *name, const char *value,
    char *err, size_t errlen);

/* Reads a config file of "name = value" lines ('#' comments). 0, or -1
 * with "FILE:LINE: ..." in err. */
int swd_config_load(swd_config *c, const char *path, char *err, size_t errlen);

/* Writes the effective configuration as a loadable config file. */
void swd_config_print(const swd_config *c, FILE *f);

/*
 * Checks cross-option consistency, and that an endpoint beyond loopback has
 * CURVE keys (or insecure_off_loopback). 0, or -1 with err.
 */
int swd_config_check(const swd_config *c, char *err, size_t errlen);

/* The table, for --help and the man page test: name, help, default. */
size_t swd_config_count(void);
const char *swd_config_name(size_t i);
const char *swd_config_help(size_t i);
const char *swd_config_default(size_t i);
/* 1 if option i may change while running (SIGHUP applies it). */
int swd_config_runtime(size_t i);
/* 1 if option i has another value in b than in a. */
int swd_config_differs(const swd_config *a, const swd_config *b, size_t i);

/*
 * The daemon's configuration from its command line: the defaults, then the
 * file of --config, then every other --name value or --name=value over it.
 * Returns 0, or -1 with err naming the option or the file's line.
 */
int swd_read_config(int argc, char **argv, swd_config *c, char *err, size_t errlen);

#endif
