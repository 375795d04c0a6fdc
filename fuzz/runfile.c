/*
 * runfile.c: fuzz target of the run-file readers (storage/reader.c), the
 * bytes a corrupt or hostile file hands them (issue 27). Input: a whole
 * file. It is written to a file of its own in /dev/shm (HDF5's core driver
 * cannot open for SWMR reading in 1.10.8, and the retry hang shows only on
 * the SWMR path) and read as the tools do: open, refresh, the rows and the
 * view, the head values of every committed step, the per-row statistics,
 * the sender table. Properties: no crash, no sanitizer report, no read
 * past what the reader sized, and bounded time and memory (the readers
 * check extents and attributes against the file before they allocate;
 * libFuzzer's -timeout and -rss_limit_mb stop the rest).
 */
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fuzz/fuzz.h"
#include "storage/runfile.h"

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static char path[64];
	if (!path[0])
		snprintf(path, sizeof(path), "/dev/shm/sw-fuzz-runfile-%ld.h5", (long)getpid());
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	FUZZ_ASSERT(fd >= 0);
	FUZZ_ASSERT(write(fd, data, size) == (ssize_t)size);
	close(fd);

	sw_reader *r;
	sw_runmeta m;
	char err[512];
	if (sw_reader_open(path, &r, &m, err, sizeof(err)) != 0) {
		FUZZ_ASSERT(strlen(err) > 0);	/* a refusal says why */
		unlink(path);
		return 0;
	}
	int64_t T = sw_reader_refresh(r, err, sizeof(err));
	if (T > 0) {
		sw_rows rows;
		if (sw_reader_rows(r, T, &rows, err, sizeof(err)) == 0) {
			sw_view v;
			if (sw_view_build(&rows, &v) == 0)
				sw_view_free(&v);
			sw_rows_free(&rows);
		}
		/* the readers bound T by the file's size: a buffer of it is small */
		size_t n = (size_t)T * m.layers * m.heads;
		double *buf = malloc(n * sizeof(double) + 1);
		FUZZ_ASSERT(buf != NULL);
		sw_reader_read(r, "sink_mass", 0, T, buf, n, err, sizeof(err));
		sw_reader_read(r, "step", 0, T, buf, (size_t)T, err, sizeof(err));
		free(buf);
		if (m.row_stats && m.rows) {
			size_t nr = (size_t)m.layers * m.heads * m.rows;
			swm_row *rs = malloc(nr * sizeof(*rs) + 1);
			FUZZ_ASSERT(rs != NULL);
			sw_reader_row_stats(r, 0, rs, nr, err, sizeof(err));
			free(rs);
		}
	}
	uint64_t *tab = NULL;
	size_t nf = 0;
	if (sw_reader_senders(r, &tab, &nf, err, sizeof(err)) > 0)
		FUZZ_ASSERT(nf >= SW_SENDER_FIELDS_OLD && nf <= SW_SENDER_FIELDS);
	free(tab);
	sw_reader_ended(r);
	sw_reader_close(&r);
	unlink(path);
	return 0;
}
