/*
 * conf.c: fuzz target of the daemon's config file parser
 * (swd_config_load, daemon/conf.c). Input: a config file. Properties: a
 * failure names FILE:LINE; an accepted file passes through
 * swd_config_print() and loads again to the same configuration.
 */
#define _GNU_SOURCE
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "daemon/conf.h"
#include "fuzz/fuzz.h"

/* Loads text as a config file (a memfd, so no file is left behind). */
static int
load(const void *text, size_t len, swd_config *c, char *err, size_t errlen)
{
	char path[64];
	int fd = memfd_create("sinkwatchd.conf", 0), rc;

	FUZZ_ASSERT(fd >= 0);
	FUZZ_ASSERT(len == 0 || write(fd, text, len) == (ssize_t)len);
	snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
	rc = swd_config_load(c, path, err, errlen);
	close(fd);
	return rc;
}

/* The same configuration (a string's bytes past its NUL do not count). */
static void
same(const swd_config *a, const swd_config *b)
{
	FUZZ_ASSERT(strcmp(a->listen, b->listen) == 0 && strcmp(a->control, b->control) == 0);
	FUZZ_ASSERT(strcmp(a->data_dir, b->data_dir) == 0);
	FUZZ_ASSERT(strcmp(a->subscribe, b->subscribe) == 0);
	FUZZ_ASSERT(strcmp(a->log_file, b->log_file) == 0 && a->log_level == b->log_level);
	FUZZ_ASSERT(a->budget_mb == b->budget_mb && a->max_message_mb == b->max_message_mb);
	FUZZ_ASSERT(a->flush_ms == b->flush_ms && a->step_timeout_ms == b->step_timeout_ms);
	FUZZ_ASSERT(a->pair_rows == b->pair_rows && a->pair_metrics == b->pair_metrics);
	FUZZ_ASSERT(a->drift_rows == b->drift_rows && a->workers == b->workers);
	FUZZ_ASSERT(a->batch == b->batch && a->chunk_steps == b->chunk_steps);
	FUZZ_ASSERT(a->max_runs == b->max_runs && a->max_open_steps == b->max_open_steps);
	FUZZ_ASSERT(a->run_idle_s == b->run_idle_s && a->umask == b->umask);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	swd_config c, c2;
	char err[512], err2[512];
	char *out = NULL;
	size_t outlen = 0;
	FILE *f;
	int rc;

	swd_config_defaults(&c);
	if (load(data, size, &c, err, sizeof err) != 0) {
		FUZZ_ASSERT(memchr(err, '\0', sizeof err) != NULL);
		FUZZ_ASSERT(strncmp(err, "/proc/self/fd/", 14) == 0 && strchr(err, ':') != NULL);
		return 0;
	}
	(void)swd_config_check(&c, err, sizeof err);
	FUZZ_ASSERT((f = open_memstream(&out, &outlen)) != NULL);
	swd_config_print(&c, f);
	FUZZ_ASSERT(fclose(f) == 0);
	swd_config_defaults(&c2);
	if ((rc = load(out, outlen, &c2, err2, sizeof err2)) != 0)
		fprintf(stderr, "printed config does not load: %s\n%s", err2, out);
	FUZZ_ASSERT(rc == 0);
	same(&c, &c2);
	free(out);
	return 0;
}
