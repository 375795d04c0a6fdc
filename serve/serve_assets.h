/* serve_assets.h: the page's files (contrib/web), built into the binary by
 * serve/embed.sh, so that the server needs no data directory of its own. */
#ifndef SW_SERVE_ASSETS_H
#define SW_SERVE_ASSETS_H

#include <stddef.h>

struct sw_asset {
	const char *name;		/* base name, "index.html" */
	const unsigned char *data;	/* NUL-terminated */
	size_t len;
};
extern const struct sw_asset sw_assets[];	/* ends with a NULL name */

#endif
