/* log.h: the logs are net/log.h's (one home for the daemon and the forwarder). */
#include "net/log.h"
