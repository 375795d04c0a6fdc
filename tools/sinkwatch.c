/*
 * sinkwatch.c: the `sinkwatch` command: main and the table of its
 * subcommands. Each entry is a command's name, its arguments and line of
 * help (the usage text is written from them) and its function, in a file
 * of its own (tools/cmd_*.c, serve/, forward/).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "metrics/swm.h"
#include "tools/analyze.h"
#include "tools/tools.h"
#ifdef SW_SERVE
#include "serve/serve.h"
#endif

struct sw_cmd_entry {
	const char *name;
	const char *alias[2];	/* other spellings, or NULL */
	const char *args;	/* after the name in the usage text */
	const char *help;
	int (*exec)(int argc, char **argv);
};

static int help_main(int argc, char **argv);
static int version_main(int argc, char **argv);
#ifndef SW_SERVE
static int serve_not_built(int argc, char **argv);
#define sw_serve_main serve_not_built
#endif

static const struct sw_cmd_entry sw_cmd_table[] = {
	{ "analyze", { NULL }, "FILE.h5:/dataset [options]",
	    "two-channel metrics of a saved attention tensor", sw_analyze_main },
	{ "demo", { NULL }, "[--steps N] | --tensor [--out F]",
	    "start sinkwatchd, stream a synthetic run, report it; --tensor: analyze a "
	    "demo tensor", sw_demo_main },
	{ "sim", { NULL }, "--run ID [options]", "stream a synthetic run to sinkwatchd",
	    sw_sim_main },
	{ "tail", { NULL }, "RUN.h5", "print each step as it is committed", sw_tail_main },
	{ "report", { NULL }, "RUN.h5... | DIR [options]",
	    "entropy collapse attribution: one run, or a table of runs", sw_report_main },
	{ "check", { NULL }, "RUN.h5...", "is a run file whole; clear a killed writer's flags",
	    sw_check_main },
	{ "audit", { NULL }, "RUN.h5 [options]",
	    "flip rates and head clusterings, sink kept vs dropped", sw_audit_main },
	{ "status", { NULL }, "[SECTION]", "ask a running sinkwatchd (or forwarder)",
	    sw_status_main },
	{ "forward", { NULL }, "[options]", "forwarder from training jobs to several sinkwatchd",
	    sw_forward_main },
	{ "keygen", { NULL }, "[--out BASE]", "make a CURVE key pair (BASE.key, BASE.pub)",
	    sw_keygen_main },
	{ "serve", { NULL }, "[DATA_DIR...] [options]",
	    "read-only web dashboard (127.0.0.1:8710)", sw_serve_main },
	{ "help", { "--help", "-h" }, "", "this text", help_main },
	{ "version", { "--version", NULL }, "", "print the version", version_main },
};
#define NCMDS (sizeof(sw_cmd_table) / sizeof(sw_cmd_table[0]))

static void
usage(FILE *f)
{
	fputs("usage: sinkwatch COMMAND [ARGS]\n\ncommands:\n", f);
	for (size_t i = 0; i < NCMDS; i++) {
		const struct sw_cmd_entry *e = &sw_cmd_table[i];
		char line[64];
		snprintf(line, sizeof(line), "%s%s%s", e->name, e->args[0] ? " " : "", e->args);
		fprintf(f, "  %-34s  %s\n", line, e->help);
	}
	fputs("\nsinkwatch COMMAND --help shows a command's options; see sinkwatch(1).\n", f);
}

static int
help_main(int argc, char **argv)
{
	(void)argc;
	(void)argv;
	usage(stdout);
	return 0;
}

static int
version_main(int argc, char **argv)
{
	(void)argc;
	(void)argv;
	printf("sinkwatch %s (metric contract %d)\n", PACKAGE_VERSION, SWM_CONTRACT_VERSION);
	return 0;
}

#ifndef SW_SERVE
static int
serve_not_built(int argc, char **argv)
{
	(void)argc;
	(void)argv;
	fprintf(stderr, "sinkwatch serve: not built (configure --disable-serve, or "
	    "libmicrohttpd was missing)\n");
	return 2;
}
#endif

/* The command whose --help was asked for: its usage ends with a pointer. */
static const char *help_cmd;

static void
help_pointer(void)
{
	if (help_cmd)
		printf("see sinkwatch(1), section %s\n", help_cmd);
}

static const struct sw_cmd_entry *
find_cmd(const char *name)
{
	for (size_t i = 0; i < NCMDS; i++) {
		const struct sw_cmd_entry *e = &sw_cmd_table[i];
		if (!strcmp(name, e->name))
			return e;
		for (size_t k = 0; k < sizeof(e->alias) / sizeof(e->alias[0]); k++)
			if (e->alias[k] && !strcmp(name, e->alias[k]))
				return e;
	}
	return NULL;
}

int
main(int argc, char **argv)
{
	if (argc < 2) {
		usage(stderr);
		return 2;
	}
	const struct sw_cmd_entry *e = find_cmd(argv[1]);
	if (e && argc == 3 && (!strcmp(argv[2], "--help") || !strcmp(argv[2], "-h")) &&
	    e->exec != help_main && e->exec != version_main) {
		/* a command's usage lines, then where all of it is said, once here;
		 * at exit, as some commands exit(0) after their usage */
		help_cmd = e->name;
		atexit(help_pointer);
		int rc = e->exec(argc - 1, argv + 1);
		if (rc != 0)
			help_cmd = NULL;
		return rc;
	}
	if (e)
		return e->exec(argc - 1, argv + 1);
	fprintf(stderr, "sinkwatch: unknown command '%s'\n", argv[1]);
	usage(stderr);
	return 2;
}
