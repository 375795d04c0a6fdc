/*
 * sinkwatch.c: the `sinkwatch` command, a dispatcher over subcommands.
 */
#include <stdio.h>
#include <string.h>

#include "config.h"
#include "metrics/swm.h"
#include "tools/analyze.h"
#include "tools/tools.h"
#ifdef SW_SERVE
#include "serve/serve.h"
#endif

static void
usage(FILE *f)
{
	fputs("usage: sinkwatch COMMAND [ARGS]\n"
	    "\n"
	    "commands:\n"
	    "  analyze FILE.h5:/dataset [options]  two-channel metrics of a saved attention tensor\n"
	    "  demo [--out FILE.h5]                write a demo tensor and analyze it\n"
	    "  sim --run ID [options]              stream a synthetic run to sinkwatchd\n"
	    "  tail RUN.h5                         print each step as it is committed\n"
	    "  report RUN.h5... | DIR [options]    entropy collapse attribution: one run, or a table of runs\n"
	    "  check RUN.h5...                     is a run file whole; clear a killed writer's flags\n"
	    "  audit RUN.h5 [options]              flip rates and head clusterings, sink kept vs dropped\n"
	    "  status [SECTION]                    ask a running sinkwatchd (or forwarder)\n"
	    "  forward [options]                   forwarder from training jobs to several sinkwatchd\n"
	    "  keygen [--out BASE]                 make a CURVE key pair (BASE.key, BASE.pub)\n"
	    "  serve [DATA_DIR...] [options]       read-only web dashboard (127.0.0.1:8710)\n"
	    "  help                                this text\n"
	    "  version                             print the version\n"
	    "\n"
	    "sinkwatch COMMAND --help shows a command's options.\n", f);
}

int
main(int argc, char **argv)
{
	if (argc < 2) {
		usage(stderr);
		return 2;
	}
	const char *cmd = argv[1];
	if (!strcmp(cmd, "analyze"))
		return sw_analyze_main(argc - 1, argv + 1);
	if (!strcmp(cmd, "demo"))
		return sw_demo_main(argc - 1, argv + 1);
	if (!strcmp(cmd, "sim"))
		return sw_sim_main(argc - 1, argv + 1);
	if (!strcmp(cmd, "tail"))
		return sw_tail_main(argc - 1, argv + 1);
	if (!strcmp(cmd, "report"))
		return sw_report_main(argc - 1, argv + 1);
	if (!strcmp(cmd, "check"))
		return sw_check_main(argc - 1, argv + 1);
	if (!strcmp(cmd, "audit"))
		return sw_audit_main(argc - 1, argv + 1);
	if (!strcmp(cmd, "status"))
		return sw_status_main(argc - 1, argv + 1);
	if (!strcmp(cmd, "forward"))
		return sw_forward_main(argc - 1, argv + 1);
	if (!strcmp(cmd, "keygen"))
		return sw_keygen_main(argc - 1, argv + 1);
	if (!strcmp(cmd, "serve")) {
#ifdef SW_SERVE
		return sw_serve_main(argc - 1, argv + 1);
#else
		fprintf(stderr, "sinkwatch serve: not built (configure --disable-serve, or "
		    "libmicrohttpd was missing)\n");
		return 2;
#endif
	}
	if (!strcmp(cmd, "help") || !strcmp(cmd, "--help") || !strcmp(cmd, "-h")) {
		usage(stdout);
		return 0;
	}
	if (!strcmp(cmd, "version") || !strcmp(cmd, "--version")) {
		printf("sinkwatch %s (metric contract %d)\n", PACKAGE_VERSION,
		    SWM_CONTRACT_VERSION);
		return 0;
	}
	fprintf(stderr, "sinkwatch: unknown command '%s'\n", cmd);
	usage(stderr);
	return 2;
}
