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

/*
 * CURVE on a client socket, before its connect: the daemon's public key
 * (the key, or a file holding it) and this client's secret key file, from
 * the arguments or else SINKWATCH_SERVER_KEY and SINKWATCH_CLIENT_KEY_FILE.
 * 1 when set, 0 when neither is given (no CURVE), -1 with err.
 */
int sw_tool_curve_client(void *sock, const char *server_key, const char *key_file, char *err,
    size_t errlen);

/* "sinkwatch CMD: message" on stderr; returns 2. */
int sw_tool_fail(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
