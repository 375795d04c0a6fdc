/* log.h (net): levelled logs to stderr (or a file that SIGHUP reopens). */
#ifndef SWD_LOG_H
#define SWD_LOG_H

enum { LOG_ERR = 0, LOG_WARN, LOG_INFO, LOG_DEBUG };

/* Parses "error", "warn", "info", "debug"; -1 if none. */
int log_level_parse(const char *s);
const char *log_level_name(int level);
void log_set_level(int level);
/* The program named in each line (default "sinkwatchd"); name is kept, not copied. */
void log_set_ident(const char *name);
/* Sends the log to path (NULL: stderr). 0, or -1 with errno. */
int log_open(const char *path);
/* Reopens the log file (after rotation); a no-op for stderr. */
int log_reopen(void);
void log_msg(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define log_err(...) log_msg(LOG_ERR, __VA_ARGS__)
#define log_warn(...) log_msg(LOG_WARN, __VA_ARGS__)
#define log_info(...) log_msg(LOG_INFO, __VA_ARGS__)
#define log_debug(...) log_msg(LOG_DEBUG, __VA_ARGS__)

#endif
