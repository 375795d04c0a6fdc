/* analyze.h: the `sinkwatch analyze` and `sinkwatch demo` subcommands. */
#ifndef SW_ANALYZE_H
#define SW_ANALYZE_H

/* Each returns the process exit status: 0, or 2 on any error. */
int sw_analyze_main(int argc, char **argv);
int sw_demo_main(int argc, char **argv);

/* Parses a whole decimal/float argument; 0 on success. */
int sw_parse_long(const char *s, long *out);
int sw_parse_double(const char *s, double *out);

#endif
