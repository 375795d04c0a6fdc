/* tools.h: the `sinkwatch` subcommands beyond analyze and demo. */
#ifndef SW_TOOLS_H
#define SW_TOOLS_H

int sw_sim_main(int argc, char **argv);
int sw_tail_main(int argc, char **argv);
int sw_report_main(int argc, char **argv);
int sw_status_main(int argc, char **argv);
int sw_check_main(int argc, char **argv);
int sw_audit_main(int argc, char **argv);
int sw_forward_main(int argc, char **argv);
int sw_keygen_main(int argc, char **argv);

/* "sinkwatch CMD: message" on stderr; returns 2 (tools/tool.c). */
int sw_tool_fail(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/*
 * When path does not exist but names a run file by its run id (DIR/ID.h5,
 * the id's '/' as typed, where the daemon wrote DIR/escaped(ID).h5), that
 * file, said on stderr, in a string to free; else NULL (tools/tool.c).
 */
char *sw_tool_run_path(const char *cmd, const char *path);

#endif
