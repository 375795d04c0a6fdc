/* tool.c: what every `sinkwatch` subcommand shares (see tools.h). */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "storage/runfile.h"
#include "tools/tools.h"

int
sw_tool_fail(const char *cmd, const char *fmt, ...)
{
	va_list ap;
	fprintf(stderr, "sinkwatch %s: ", cmd);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	return 2;
}

/* The '/' before cut in p, NULL when none (or cut is NULL). */
static char *
prev_slash(char *p, char *cut)
{
	while (cut && cut > p)
		if (*--cut == '/')
			return cut;
	return NULL;
}

/*
 * The run file that path names by its run id: path without ".h5" is
 * DIR/ID with the id's '/' left as they were typed; the daemon's file is
 * DIR/escaped(ID).h5 (sw_runfile_name). Tried with the id's last one, two,
 * ... components, so the id's file in path's directory and in the
 * directories above. 0 with the file in buf and the id in id, else -1.
 */
static int
run_path_escaped(const char *path, char *buf, size_t len, char *id, size_t idlen)
{
	char p[4096], name[SW_RUNFILE_NAME_MAX + 1];
	struct stat sb;
	size_t n = strlen(path);
	if (n < 4 || n >= sizeof(p) || strcmp(path + n - 3, ".h5") != 0)
		return -1;
	memcpy(p, path, n - 3);
	p[n - 3] = 0;
	for (char *cut = strrchr(p, '/'); ; cut = prev_slash(p, cut)) {
		const char *dir = cut ? p : ".", *rid = cut ? cut + 1 : p;
		if (cut)
			*cut = 0;
		int ok = rid[0] && sw_runfile_name(rid, name, sizeof(name)) > 0 &&
		    (size_t)snprintf(buf, len, "%s/%s", cut && !p[0] ? "" : dir, name) < len &&
		    stat(buf, &sb) == 0 && S_ISREG(sb.st_mode);
		if (ok && !cut)
			snprintf(buf, len, "%s", name);
		if (ok)
			snprintf(id, idlen, "%s", rid);
		if (cut)
			*cut = '/';
		if (ok)
			return 0;
		if (!cut)
			return -1;
	}
}

char *
sw_tool_run_path(const char *cmd, const char *path)
{
	struct stat sb;
	char id[4096], buf[4096];
	if (stat(path, &sb) == 0 || errno != ENOENT ||
	    run_path_escaped(path, buf, sizeof(buf), id, sizeof(id)) != 0)
		return NULL;
	fprintf(stderr, "sinkwatch %s: %s: no such file; reading %s, the file of run '%s' "
	    "(run ids are escaped into file names)\n", cmd, path, buf, id);
	return strdup(buf);
}
