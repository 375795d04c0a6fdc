/*
 * standalone.c: runs a fuzz target on the files named (a directory: every
 * file in it), for builds without libFuzzer. make check replays the seed
 * corpora and the regression inputs of fuzz/corpus with it.
 */
#include <dirent.h>
#include <errno.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz/fuzz.h"

static int
run_file(const char *path)
{
	FILE *f = fopen(path, "rb");
	unsigned char *buf = NULL;
	size_t len = 0, cap = 0, n;

	if (f == NULL) {
		fprintf(stderr, "%s: %s\n", path, strerror(errno));
		return 1;
	}
	do {
		if (len == cap) {
			unsigned char *p = realloc(buf, cap = cap ? 2 * cap : 65536);
			if (p == NULL) {
				fprintf(stderr, "%s: out of memory\n", path);
				free(buf);
				fclose(f);
				return 1;
			}
			buf = p;
		}
		n = fread(buf + len, 1, cap - len, f);
		len += n;
	} while (n > 0);
	if (ferror(f)) {
		fprintf(stderr, "%s: read error\n", path);
		free(buf);
		fclose(f);
		return 1;
	}
	fclose(f);
	/* an exact copy, so that a read past the input is one past a block */
	unsigned char *in = malloc(len ? len : 1);
	if (in == NULL) {
		free(buf);
		return 1;
	}
	memcpy(in, buf, len);
	free(buf);
	LLVMFuzzerTestOneInput(in, len);
	free(in);
	return 0;
}

static int
cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Every regular file of a directory, in name order. */
static int
run_dir(const char *dir, size_t *count)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	char **names = NULL;
	size_t n = 0, cap = 0;
	int bad = 0;

	if (d == NULL) {
		fprintf(stderr, "%s: %s\n", dir, strerror(errno));
		return 1;
	}
	while ((e = readdir(d)) != NULL) {
		if (e->d_name[0] == '.')
			continue;
		if (n == cap) {
			char **p = realloc(names, (cap = cap ? 2 * cap : 64) * sizeof *names);
			if (p == NULL)
				break;
			names = p;
		}
		size_t l = strlen(dir) + strlen(e->d_name) + 2;
		if ((names[n] = malloc(l)) == NULL)
			break;
		snprintf(names[n], l, "%s/%s", dir, e->d_name);
		n++;
	}
	closedir(d);
	if (n)
		qsort(names, n, sizeof *names, cmp);
	for (size_t i = 0; i < n; i++) {
		struct stat st;
		if (stat(names[i], &st) == 0 && S_ISREG(st.st_mode)) {
			bad |= run_file(names[i]);
			(*count)++;
		}
		free(names[i]);
	}
	free(names);
	return bad;
}

int
main(int argc, char **argv)
{
	size_t count = 0;
	int bad = 0;

	if (argc < 2) {
		fprintf(stderr, "usage: %s FILE|DIR...\n"
		    "(runs the target once per input; built without libFuzzer)\n", argv[0]);
		return 2;
	}
	for (int i = 1; i < argc; i++) {
		struct stat st;
		if (stat(argv[i], &st) == 0 && S_ISDIR(st.st_mode))
			bad |= run_dir(argv[i], &count);
		else {
			bad |= run_file(argv[i]);
			count++;
		}
	}
	printf("%s: %zu inputs run%s\n", argv[0], count, bad ? ", some unreadable" : "");
	return bad;
}
