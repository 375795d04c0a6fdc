/* tool.c: what every `sinkwatch` subcommand shares (see tools.h). */
#include <stdarg.h>
#include <stdio.h>

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
