/* log.c: see log.h. Thread-safe: one lock around each line. */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "net/log.h"

static int cur_level = LOG_INFO;
static FILE *out;
static char *out_path;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static const char *const names[] = { "error", "warn", "info", "debug" };

int
log_level_parse(const char *s)
{
	for (int i = 0; i < 4; i++)
		if (!strcmp(s, names[i]))
			return i;
	return -1;
}

const char *
log_level_name(int level)
{
	return level >= 0 && level < 4 ? names[level] : "?";
}

static const char *ident = "sinkwatchd";

void
log_set_ident(const char *name)
{
	ident = name;
}

void
log_set_level(int level)
{
	cur_level = level;
}

int
log_open(const char *path)
{
	FILE *f = NULL;
	if (path && *path && !(f = fopen(path, "a")))
		return -1;
	pthread_mutex_lock(&lock);
	if (out && out != stderr)
		fclose(out);
	out = f ? f : stderr;
	if (f)
		setvbuf(f, NULL, _IOLBF, 0);
	free(out_path);
	out_path = path && *path ? strdup(path) : NULL;
	pthread_mutex_unlock(&lock);
	return 0;
}

int
log_reopen(void)
{
	if (!out_path)
		return 0;
	char *p = strdup(out_path);
	int rc = p ? log_open(p) : -1;
	free(p);
	return rc;
}

void
log_msg(int level, const char *fmt, ...)
{
	if (level > cur_level)
		return;
	struct timespec ts;
	struct tm tm;
	char when[32];
	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%S", &tm);
	va_list ap;
	pthread_mutex_lock(&lock);
	FILE *f = out ? out : stderr;
	fprintf(f, "%s.%03ldZ %s %s: ", when, ts.tv_nsec / 1000000, ident,
	    log_level_name(level));
	va_start(ap, fmt);
	vfprintf(f, fmt, ap);
	va_end(ap);
	fputc('\n', f);
	fflush(f);
	pthread_mutex_unlock(&lock);
}
