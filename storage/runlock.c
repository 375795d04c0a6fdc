/*
 * runlock.c: the lock a writer holds on a run while it writes the run's
 * files (runfile.h), so that two processes never write one run, whatever
 * their subscriptions (sinkwatchd(8), LOCKS).
 *
 * Why not HDF5's own lock: HDF5 1.10 takes an flock() on the file, but a
 * SWMR writer gives it up once SWMR writing starts (H5Fstart_swmr_write,
 * or an open with H5F_ACC_SWMR_WRITE), and a writer that resumes a file
 * must open it without locking at all, since every SWMR reader (a
 * dashboard, sinkwatch check) holds a shared flock that would refuse the
 * exclusive one. So a second writer would meet no lock.
 *
 * The lock is one byte of DIR/.sinkwatchd.lock, at an offset taken from a
 * 64-bit hash of the run id, write-locked with an open file description
 * lock (F_OFD_SETLK): it is taken before any generation of the run's name
 * is looked at or made, so creating, resuming and the generation search all
 * happen under it; it belongs to the descriptor, so HDF5 opening and
 * closing the run file (other descriptors) never drops it; the kernel
 * drops it when the process dies. It does not mix with the daemon's
 * flock() of the same file (Linux keeps the two kinds apart, except on
 * NFS, where SWMR does not work anyway). Within one process the same run
 * may be taken again: a count.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "storage/runfile.h"

#ifndef F_OFD_SETLK
#define F_OFD_SETLK 37	/* Linux 3.15; glibc defines it under _GNU_SOURCE */
#endif

struct lrun {
	uint64_t h;
	int refs;
};

/* One lock file (a data directory), open once per process. */
struct ldir {
	dev_t dev;
	ino_t ino;
	int fd;
	int ofd;		/* 1: OFD locks; 0: the kernel lacks them, POSIX locks */
	struct lrun *v;
	size_t n, cap;
	size_t users;		/* handles into it */
	struct ldir *next;
};

struct sw_runlock {
	struct ldir *d;
	uint64_t h;
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct ldir *dirs;

uint64_t
sw_runlock_offset(const char *run)
{
	uint64_t h = 0xcbf29ce484222325ull;	/* FNV-1a */
	for (const unsigned char *p = (const unsigned char *)run; *p; p++)
		h = (h ^ *p) * 0x100000001b3ull;
	return h >> 2;	/* an off_t, with room for the byte after it */
}

static int
setlk(struct ldir *d, uint64_t h, short type)
{
	struct flock fl;
	memset(&fl, 0, sizeof(fl));
	fl.l_type = type;
	fl.l_whence = SEEK_SET;
	fl.l_start = (off_t)h;
	fl.l_len = 1;
	if (d->ofd) {
		if (fcntl(d->fd, F_OFD_SETLK, &fl) == 0)
			return 0;
		if (errno != EINVAL)
			return -1;
		d->ofd = 0;	/* an old kernel: the process's locks, on a descriptor
				 * never closed while it holds one */
	}
	return fcntl(d->fd, F_SETLK, &fl);
}

static struct ldir *
dir_get(const char *dir, char *err, size_t errlen)
{
	char path[4096];
	struct stat sb;

	if ((size_t)snprintf(path, sizeof(path), "%s/" SW_RUNLOCK_FILE, dir) >= sizeof(path)) {
		snprintf(err, errlen, "%.200s: path too long", dir);
		return NULL;
	}
	/* a known file is never opened again: closing that second descriptor
	 * would drop the POSIX locks of the fallback */
	if (stat(path, &sb) == 0)
		for (struct ldir *d = dirs; d; d = d->next)
			if (d->dev == sb.st_dev && d->ino == sb.st_ino)
				return d;
	int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
	if (fd < 0 || fstat(fd, &sb) != 0) {
		snprintf(err, errlen, "%s: %s (the run lock file)", path, strerror(errno));
		if (fd >= 0)
			close(fd);
		return NULL;
	}
	struct ldir *d = calloc(1, sizeof(*d));
	if (!d) {
		close(fd);
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	d->dev = sb.st_dev;
	d->ino = sb.st_ino;
	d->fd = fd;
	d->ofd = 1;
	d->next = dirs;
	dirs = d;
	return d;
}

static void
dir_put(struct ldir *d)
{
	if (--d->users > 0)
		return;
	for (struct ldir **p = &dirs; *p; p = &(*p)->next)
		if (*p == d) {
			*p = d->next;
			break;
		}
	close(d->fd);
	free(d->v);
	free(d);
}

int
sw_runlock_take(const char *dir, const char *run, sw_runlock **out, char *err,
    size_t errlen)
{
	int rc = -1;

	*out = NULL;
	if (!dir || !run || !run[0]) {
		snprintf(err, errlen, "run lock: no directory or run id");
		return -1;
	}
	uint64_t h = sw_runlock_offset(run);
	pthread_mutex_lock(&mu);
	struct ldir *d = dir_get(dir, err, errlen);
	if (!d)
		goto done;
	d->users++;
	sw_runlock *l = malloc(sizeof(*l));
	size_t i;
	for (i = 0; i < d->n && d->v[i].h != h; i++)
		;
	if (!l || (i == d->n && d->n == d->cap)) {
		size_t cap = d->cap ? 2 * d->cap : 16;
		struct lrun *v = l ? realloc(d->v, cap * sizeof(*v)) : NULL;
		if (!v) {
			snprintf(err, errlen, "out of memory");
			free(l);
			dir_put(d);
			goto done;
		}
		d->v = v;
		d->cap = cap;
	}
	if (i == d->n) {
		if (setlk(d, h, F_WRLCK) != 0) {
			int held = errno == EAGAIN || errno == EACCES;
			snprintf(err, errlen, "run %.200s: %s (%s/" SW_RUNLOCK_FILE ", byte %llu)",
			    run, held ? "another process writes it (it holds the run's lock)" :
			    strerror(errno), dir, (unsigned long long)h);
			free(l);
			dir_put(d);
			rc = held ? SW_RUNFILE_LOCKED : -1;
			goto done;
		}
		d->v[d->n++] = (struct lrun){ h, 0 };
	}
	d->v[i].refs++;
	l->d = d;
	l->h = h;
	*out = l;
	rc = 0;
done:
	pthread_mutex_unlock(&mu);
	return rc;
}

void
sw_runlock_release(sw_runlock **lp)
{
	sw_runlock *l = *lp;
	if (!l)
		return;
	pthread_mutex_lock(&mu);
	struct ldir *d = l->d;
	for (size_t i = 0; i < d->n; i++)
		if (d->v[i].h == l->h) {
			if (--d->v[i].refs == 0) {
				setlk(d, l->h, F_UNLCK);
				d->v[i] = d->v[--d->n];
			}
			break;
		}
	dir_put(d);
	pthread_mutex_unlock(&mu);
	free(l);
	*lp = NULL;
}
