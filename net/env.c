/*
 * env.c: the environment's settings for clients, tools and the daemon
 * (swnet.h): an option given wins, a variable set but empty counts as
 * unset. No ZeroMQ here, so the configuration's checks (daemon/conf.c) take
 * the same rule as the sockets.
 */
#include <stdlib.h>

#include "net/swnet.h"

static const char *
given_or_env(const char *given, const char *var)
{
	if (given && *given)
		return given;
	const char *e = getenv(var);
	return e && *e ? e : NULL;
}

const char *
swn_env_or(const char *given, const char *var, const char *dflt)
{
	const char *v = given_or_env(given, var);
	return v ? v : dflt;
}

void
swn_curve_env(const char **server_key, const char **key_file)
{
	*server_key = given_or_env(*server_key, SWN_ENV_SERVER_KEY);
	*key_file = given_or_env(*key_file, SWN_ENV_KEY_FILE);
}
