/*
 * dirlock.c: the data directory's lock (runfile.h), one flock() of the
 * lock file whose bytes the run locks (runlock.c) take with OFD locks:
 * Linux keeps the two kinds apart.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#include "storage/runfile.h"

int
sw_dirlock_open(const char *dir, int create, char *err, size_t errlen)
{
	char path[4096];
	if ((size_t)snprintf(path, sizeof(path), "%s/" SW_RUNLOCK_FILE, dir) >= sizeof(path)) {
		snprintf(err, errlen, "%.400s: a name too long", dir);
		errno = ENAMETOOLONG;
		return -1;
	}
	int fd = create ? open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644) :
	    open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		int e = errno;
		if (!create && e == ENOENT)
			err[0] = '\0';
		else
			snprintf(err, errlen, "%.400s: %s", path, strerror(e));
		errno = e;
	}
	return fd;
}

int
sw_dirlock_exclusive(int fd, const char *dir, char *err, size_t errlen)
{
	if (flock(fd, LOCK_EX | LOCK_NB) == 0)
		return 0;
	if (errno == EWOULDBLOCK)
		return 1;
	snprintf(err, errlen, "%.400s/" SW_RUNLOCK_FILE ": %s", dir, strerror(errno));
	return -1;
}

int
sw_dirlock_shared(int fd, const char *dir, char *err, size_t errlen)
{
	/* an exclusive holder (a daemon starting, sinkwatch check clearing)
	 * holds it for a moment: wait a little for it */
	int rc = -1;
	for (int tries = 0; tries < 300 && (rc = flock(fd, LOCK_SH | LOCK_NB)) != 0 &&
	    errno == EWOULDBLOCK; tries++)
		usleep(10000);
	if (rc == 0)
		return 0;
	snprintf(err, errlen, "%.400s/" SW_RUNLOCK_FILE ": %s", dir, errno == EWOULDBLOCK ?
	    "another process holds the data directory exclusively (sinkwatch check clearing "
	    "a file?): try again" : strerror(errno));
	return -1;
}
