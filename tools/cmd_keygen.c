/*
 * cmd_keygen.c: `sinkwatch keygen`. The CURVE client side of the tools that
 * talk to sinkwatchd (status) is net/curve.c's, as every client's.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <zmq.h>

#include "proto/swkeys.h"
#include "tools/tools.h"

/* Writes text to a new file of the mode given; refuses an existing one. */
static int
write_new(const char *path, int mode, const char *text)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
	if (fd < 0) {
		if (errno == EEXIST)
			return sw_tool_fail("keygen", "%s exists: not overwritten (remove it, or "
			    "give another --out)", path);
		return sw_tool_fail("keygen", "%s: %s", path, strerror(errno));
	}
	size_t n = strlen(text);
	/* the mode asked, whatever the umask */
	if (fchmod(fd, (mode_t)mode) != 0 || write(fd, text, n) != (ssize_t)n || fsync(fd) != 0) {
		int e = errno;
		close(fd);
		unlink(path);
		return sw_tool_fail("keygen", "%s: %s", path, strerror(e));
	}
	if (close(fd) != 0)
		return sw_tool_fail("keygen", "%s: %s", path, strerror(errno));
	return 0;
}

int
sw_keygen_main(int argc, char **argv)
{
	const char *base = "sinkwatch";
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--out") && i + 1 < argc)
			base = argv[++i];
		else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
			printf("usage: sinkwatch keygen [--out BASE]\n"
			    "writes a CURVE key pair: BASE.key (the secret key, mode 0600) and "
			    "BASE.pub (the public key);\nprints the public key. Default BASE: "
			    "sinkwatch. Existing files are not overwritten.\n");
			return 0;
		} else
			return sw_tool_fail("keygen", "unknown argument '%s' (try --help)", argv[i]);
	}
	if (!*base)
		return sw_tool_fail("keygen", "--out: an empty name");
	if (!zmq_has("curve"))
		return sw_tool_fail("keygen", "this libzmq was built without CURVE");
	char pub[SWP_KEY_LEN + 1], sec[SWP_KEY_LEN + 1];
	if (zmq_curve_keypair(pub, sec) != 0)
		return sw_tool_fail("keygen", "zmq_curve_keypair: %s", zmq_strerror(zmq_errno()));
	size_t bl = strlen(base);
	char *kp = malloc(bl + 5), *pp = malloc(bl + 5), text[512];
	if (!kp || !pp) {
		free(kp);
		free(pp);
		return sw_tool_fail("keygen", "out of memory");
	}
	snprintf(kp, bl + 5, "%s.key", base);
	snprintf(pp, bl + 5, "%s.pub", base);
	int rc = 0;
	if (access(kp, F_OK) == 0 || access(pp, F_OK) == 0) {
		rc = sw_tool_fail("keygen", "%s exists: not overwritten (remove it, or give another "
		    "--out)", access(kp, F_OK) == 0 ? kp : pp);
		goto out;
	}
	snprintf(text, sizeof(text), "# sinkwatch CURVE secret key: keep it private (mode 0600)\n"
	    "# its public key: %s\n%s\n", pub, sec);
	if ((rc = write_new(kp, 0600, text)) != 0)
		goto out;
	snprintf(text, sizeof(text), "# sinkwatch CURVE public key (of %s)\n%s\n", kp, pub);
	if ((rc = write_new(pp, 0644, text)) != 0) {
		unlink(kp);
		goto out;
	}
	printf("%s\n", pub);
	fprintf(stderr, "sinkwatch keygen: wrote %s (secret, 0600) and %s (public)\n", kp, pp);
out:
	memset(sec, 0, sizeof(sec));
	memset(text, 0, sizeof(text));
	free(kp);
	free(pp);
	return rc;
}
