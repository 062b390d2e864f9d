// SPDX-License-Identifier: GPL-2.0
/*
 * npfnic-mpibench: MPI throughput between two ranks, after the Intel MPI
 * Benchmarks' (IMB-MPI1) definitions, and an effective bandwidth in the
 * spirit of b_eff. It is not IMB (Debian does not package IMB): it follows
 * IMB's definitions of what is timed and what a throughput is, so that
 * seed 000's Figure 9 and Table 6 can be redrawn in a guest.
 *
 * The benchmarks (X is the message size, n the iterations, dt the time of
 * the n iterations, the slowest rank's for every benchmark but PingPong):
 *   PingPong   rank 0 sends X to rank 1, which sends it back;
 *              t = dt / 2n, throughput X / t
 *   Sendrecv   each rank MPI_Sendrecv's X to its right neighbour and from
 *              its left one (a ring of two here); t = dt / n, 2X / t
 *   Exchange   each rank MPI_Isend's X to both neighbours and MPI_Recv's X
 *              from both; t = dt / n, 4X / t
 *   Allreduce  MPI_Allreduce of X bytes of floats (MPI_SUM); IMB reports a
 *              collective's time only, here also X / t
 * Throughputs are in MB/s of 10^6 bytes.
 *
 * IMB's off_cache mode: every rank cycles through a working set of
 * buffers, one per iteration, allocated one by one and touched by the CPU
 * once, so that a registration cache (pin-down cache) must register many
 * of them, and a NIC with on-demand paging must fault on each the first
 * time it reaches it. -w sets the working set per direction.
 *
 * b_eff (-beff): each rank sends L bytes to both ring neighbours and
 * receives as much, by three methods (MPI_Sendrecv, MPI_Alltoallv, and
 * MPI_Irecv/MPI_Isend/MPI_Waitall); b(L) is the bytes all ranks sent over
 * the time, the best of the three methods; b_eff is b(L) averaged over 21
 * sizes, 1 B to 4 KiB by doubling and 8 steps from 4 KiB to -beff-max, as
 * b_eff's ring pattern averages them. With two ranks the ring is the one
 * pair and b_eff's random patterns are the same pattern.
 *
 * Output (rank 0), one line per measurement:
 *   result bench=NAME bytes=X iters=N bufs=B usec=T MBps=R
 *   beff bytes=L MBps=R
 *   b_eff MBps=R
 *   check errors=N             (-check: bytes received wrong, all ranks)
 */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

enum bench { PINGPONG, SENDRECV, EXCHANGE, ALLREDUCE, NBENCH };

static const char *const bench_names[NBENCH] = {
	"PingPong", "Sendrecv", "Exchange", "Allreduce",
};

/* The byte factor of each benchmark's throughput (IMB's). */
static const double bench_factor[NBENCH] = { 1, 2, 4, 1 };

struct opts {
	int benches[NBENCH];
	long sizes[64];
	int nsizes;
	long workset;	/* off_cache working set per direction, bytes */
	long budget;	/* bytes per size and direction that bound n */
	int maxiter, miniter, warmup;
	int beff;
	int check;	/* verify every received byte */
	long beff_max;
	int beff_iters;
};

static int rank, nranks;
static long check_errors;

static void die(const char *msg)
{
	if (rank == 0)
		fprintf(stderr, "npfnic-mpibench: %s\n", msg);
	MPI_Abort(MPI_COMM_WORLD, 2);
	exit(2);
}

static long parse_size(const char *s)
{
	char *end;
	long v = strtol(s, &end, 10);

	if (end == s || v < 0)
		return -1;
	if (*end == 'K' || *end == 'k')
		v <<= 10, end++;
	else if (*end == 'M' || *end == 'm')
		v <<= 20, end++;
	return *end ? -1 : v;
}

static void usage(void)
{
	die("usage: npfnic-mpibench [-b PingPong,Sendrecv,Exchange,Allreduce|none] [-s 4K,64K,1M] [-w WORKSET]\n"
	    "       [-budget BYTES] [-n MAXITER] [-min MINITER] [-warmup N] [-check] [-beff] [-beff-max BYTES] [-beff-iters N]");
}

static void parse(int argc, char **argv, struct opts *o)
{
	char *tok, *save;
	int i, b;

	memset(o, 0, sizeof(*o));
	for (b = 0; b < NBENCH; b++)
		o->benches[b] = 1;
	o->workset = 16L << 20;
	o->budget = 32L << 20;
	o->maxiter = 200;
	o->miniter = 4;
	o->warmup = 2;
	o->beff_max = 1L << 20;
	o->beff_iters = 20;
	for (i = 1; i < argc; i++) {
		const char *a = argv[i];
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;

		if (!strcmp(a, "-beff")) {
			o->beff = 1;
			continue;
		}
		if (!strcmp(a, "-check")) {
			o->check = 1;
			continue;
		}
		if (!v)
			usage();
		i++;
		if (!strcmp(a, "-b")) {
			char *list = strdup(v);

			for (b = 0; b < NBENCH; b++)
				o->benches[b] = 0;
			for (tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
				if (!strcmp(tok, "none"))
					continue;
				for (b = 0; b < NBENCH && strcasecmp(tok, bench_names[b]); b++)
					;
				if (b == NBENCH)
					usage();
				o->benches[b] = 1;
			}
			free(list);
		} else if (!strcmp(a, "-s")) {
			char *list = strdup(v);

			o->nsizes = 0;
			for (tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
				long s = parse_size(tok);

				if (s <= 0 || o->nsizes == 64)
					usage();
				o->sizes[o->nsizes++] = s;
			}
			free(list);
		} else if (!strcmp(a, "-w")) {
			o->workset = parse_size(v);
		} else if (!strcmp(a, "-budget")) {
			o->budget = parse_size(v);
		} else if (!strcmp(a, "-n")) {
			o->maxiter = atoi(v);
		} else if (!strcmp(a, "-min")) {
			o->miniter = atoi(v);
		} else if (!strcmp(a, "-warmup")) {
			o->warmup = atoi(v);
		} else if (!strcmp(a, "-beff-max")) {
			o->beff_max = parse_size(v);
		} else if (!strcmp(a, "-beff-iters")) {
			o->beff_iters = atoi(v);
		} else {
			usage();
		}
	}
	if (o->workset < 0 || o->budget <= 0 || o->maxiter < 1 || o->miniter < 1 ||
	    o->miniter > o->maxiter || o->warmup < 0 || o->beff_max < 4096 || o->beff_iters < 1)
		usage();
	if (!o->nsizes) {
		static const long def[] = { 4096, 16384, 65536, 262144, 1048576 };

		for (i = 0; i < 5; i++)
			o->sizes[i] = def[i];
		o->nsizes = 5;
	}
}

/* A working set: bufs buffers of size bytes each, allocated one by one. */
struct workset {
	char **buf;
	int n;
};

static void workset_alloc(struct workset *w, long size, long bytes, int maxbufs, int fill)
{
	int i;

	w->n = bytes / size;
	if (w->n < 1)
		w->n = 1;
	if (w->n > maxbufs)
		w->n = maxbufs;
	w->buf = calloc(w->n, sizeof(*w->buf));
	if (!w->buf)
		die("out of memory");
	for (i = 0; i < w->n; i++) {
		if (posix_memalign((void **)&w->buf[i], 4096, size))
			die("out of memory for the working set");
		/* The CPU backs every page first: what remains is the NIC's. */
		memset(w->buf[i], fill + i, size);
	}
}

static void workset_free(struct workset *w)
{
	int i;

	for (i = 0; i < w->n; i++)
		free(w->buf[i]);
	free(w->buf);
}

/*
 * -check: a received buffer must hold what its sender's buffer of the same
 * index holds, every byte (workset_alloc's fill: 'a' + rank + index).
 */
static void verify(const char *r, long size, int from, int index)
{
	char want = 'a' + from + index;
	long i;

	for (i = 0; i < size; i++) {
		if (r[i] != want) {
			if (check_errors++ < 5)
				fprintf(stderr, "npfnic-mpibench: rank %d: byte %ld of %ld from rank %d (buffer %d) is %#x, want %#x\n",
					rank, i, size, from, index, (unsigned char)r[i], (unsigned char)want);
			return;
		}
	}
}

/* One iteration of b on buffers s (send) and r (receive). */
static void step(enum bench b, char *s, char *r, long size)
{
	int right = (rank + 1) % nranks, left = (rank + nranks - 1) % nranks;
	MPI_Request req[2];

	switch (b) {
	case PINGPONG:
		if (rank == 0) {
			MPI_Send(s, size, MPI_BYTE, 1, 1, MPI_COMM_WORLD);
			MPI_Recv(r, size, MPI_BYTE, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
		} else if (rank == 1) {
			MPI_Recv(r, size, MPI_BYTE, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
			MPI_Send(s, size, MPI_BYTE, 0, 1, MPI_COMM_WORLD);
		}
		break;
	case SENDRECV:
		MPI_Sendrecv(s, size, MPI_BYTE, right, 2, r, size, MPI_BYTE, left, 2,
			     MPI_COMM_WORLD, MPI_STATUS_IGNORE);
		break;
	case EXCHANGE:
		/* Both halves of r: the left neighbour's X, then the right's. */
		MPI_Isend(s, size, MPI_BYTE, left, 3, MPI_COMM_WORLD, &req[0]);
		MPI_Isend(s, size, MPI_BYTE, right, 3, MPI_COMM_WORLD, &req[1]);
		MPI_Recv(r, size, MPI_BYTE, left, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
		MPI_Recv(r + size, size, MPI_BYTE, right, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
		MPI_Waitall(2, req, MPI_STATUSES_IGNORE);
		break;
	case ALLREDUCE:
		MPI_Allreduce(s, r, size / sizeof(float), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
		break;
	default:
		break;
	}
}

static void check_step(enum bench b, const char *r, long size, int index)
{
	int right = (rank + 1) % nranks, left = (rank + nranks - 1) % nranks;

	switch (b) {
	case PINGPONG:
		if (rank < 2)
			verify(r, size, 1 - rank, index);
		break;
	case SENDRECV:
		verify(r, size, left, index);
		break;
	case EXCHANGE:
		verify(r, size, left, index);
		verify(r + size, size, right, index);
		break;
	default:
		break;
	}
}

static void run_bench(const struct opts *o, enum bench b, long size)
{
	/* Exchange receives from both neighbours into one buffer. */
	long rsize = b == EXCHANGE ? 2 * size : size;
	struct workset ws, wr;
	double t0, dt, dtmax;
	long iters;
	int i;

	iters = o->budget / size;
	if (iters > o->maxiter)
		iters = o->maxiter;
	if (iters < o->miniter)
		iters = o->miniter;
	workset_alloc(&ws, size, o->workset, 4096, 'a' + rank);
	workset_alloc(&wr, rsize, o->workset, 4096, 'A' + rank);
	/* IMB's warm-up: a few untimed iterations on the first buffers. */
	for (i = 0; i < o->warmup; i++)
		step(b, ws.buf[i % ws.n], wr.buf[i % wr.n], size);
	MPI_Barrier(MPI_COMM_WORLD);
	t0 = MPI_Wtime();
	for (i = 0; i < iters; i++) {
		int k = (o->warmup + i) % ws.n;

		step(b, ws.buf[k], wr.buf[(o->warmup + i) % wr.n], size);
		if (o->check) {
			check_step(b, wr.buf[(o->warmup + i) % wr.n], size, k);
			/* The next use of the buffer must be written anew. */
			memset(wr.buf[(o->warmup + i) % wr.n], 0, b == EXCHANGE ? 2 * size : size);
		}
	}
	dt = MPI_Wtime() - t0;
	MPI_Reduce(&dt, &dtmax, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
	if (rank == 0) {
		/* PingPong's time is rank 0's: it alone sees whole round trips. */
		double t = b == PINGPONG ? dt / (2.0 * iters) : dtmax / iters;

		printf("result bench=%s bytes=%ld iters=%ld bufs=%d usec=%.2f MBps=%.3f\n",
		       bench_names[b], size, iters, ws.n, t * 1e6, bench_factor[b] * size / t / 1e6);
		fflush(stdout);
	}
	workset_free(&ws);
	workset_free(&wr);
}

/* b_eff's methods: each rank sends L to both neighbours, receives 2L. */
static double beff_one(int method, char *s, char *r, long len, int iters)
{
	int right = (rank + 1) % nranks, left = (rank + nranks - 1) % nranks;
	int *counts = calloc(nranks, sizeof(int)), *rcounts = calloc(nranks, sizeof(int));
	int *sdispl = calloc(nranks, sizeof(int)), *rdispl = calloc(nranks, sizeof(int));
	MPI_Request req[4];
	double t0, dt, dtmax;
	int i;

	if (!counts || !rcounts || !sdispl || !rdispl)
		die("out of memory");
	/* Alltoallv: the two neighbours' shares (one peer here gets both). */
	counts[right] += len;
	counts[left] += len;
	rcounts[left] += len;
	rcounts[right] += len;
	MPI_Barrier(MPI_COMM_WORLD);
	t0 = MPI_Wtime();
	for (i = 0; i < iters; i++) {
		switch (method) {
		case 0:
			MPI_Sendrecv(s, len, MPI_BYTE, right, 4, r, len, MPI_BYTE, left, 4,
				     MPI_COMM_WORLD, MPI_STATUS_IGNORE);
			MPI_Sendrecv(s, len, MPI_BYTE, left, 5, r + len, len, MPI_BYTE, right, 5,
				     MPI_COMM_WORLD, MPI_STATUS_IGNORE);
			break;
		case 1:
			MPI_Alltoallv(s, counts, sdispl, MPI_BYTE, r, rcounts, rdispl, MPI_BYTE,
				      MPI_COMM_WORLD);
			break;
		default:
			MPI_Irecv(r, len, MPI_BYTE, left, 6, MPI_COMM_WORLD, &req[0]);
			MPI_Irecv(r + len, len, MPI_BYTE, right, 7, MPI_COMM_WORLD, &req[1]);
			MPI_Isend(s, len, MPI_BYTE, right, 6, MPI_COMM_WORLD, &req[2]);
			MPI_Isend(s, len, MPI_BYTE, left, 7, MPI_COMM_WORLD, &req[3]);
			MPI_Waitall(4, req, MPI_STATUSES_IGNORE);
			break;
		}
	}
	dt = MPI_Wtime() - t0;
	MPI_Allreduce(&dt, &dtmax, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
	free(counts);
	free(rcounts);
	free(sdispl);
	free(rdispl);
	/* Every rank sent 2L per iteration. */
	return 2.0 * len * nranks * iters / dtmax / 1e6;
}

static void run_beff(const struct opts *o)
{
	long sizes[21];
	char *s, *r;
	double sum = 0;
	int i, m;

	for (i = 0; i <= 12; i++)
		sizes[i] = 1L << i;
	/* 8 geometric steps from 4 KiB to beff_max. */
	for (i = 13; i < 21; i++)
		sizes[i] = lround(4096 * pow((double)o->beff_max / 4096, (i - 12) / 8.0));
	s = malloc(2 * o->beff_max);
	r = malloc(2 * o->beff_max);
	if (!s || !r)
		die("out of memory");
	memset(s, 'b' + rank, 2 * o->beff_max);
	memset(r, 0, 2 * o->beff_max);
	for (i = 0; i < 21; i++) {
		double best = 0;

		for (m = 0; m < 3; m++) {
			double b = beff_one(m, s, r, sizes[i], o->beff_iters);

			if (b > best)
				best = b;
		}
		sum += best;
		if (rank == 0)
			printf("beff bytes=%ld MBps=%.3f\n", sizes[i], best);
	}
	if (rank == 0) {
		printf("b_eff MBps=%.3f\n", sum / 21);
		fflush(stdout);
	}
	free(s);
	free(r);
}

int main(int argc, char **argv)
{
	struct opts o;
	int b, i;

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &nranks);
	if (nranks < 2)
		die("needs at least 2 ranks");
	parse(argc, argv, &o);
	if (rank == 0) {
		printf("# npfnic-mpibench: IMB-MPI1's definitions (not IMB), %d ranks, off_cache working set %ld bytes per direction\n",
		       nranks, o.workset);
		fflush(stdout);
	}
	for (b = 0; b < NBENCH; b++) {
		if (!o.benches[b])
			continue;
		for (i = 0; i < o.nsizes; i++)
			run_bench(&o, b, o.sizes[i]);
	}
	if (o.beff)
		run_beff(&o);
	if (o.check) {
		long all = 0;

		MPI_Reduce(&check_errors, &all, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
		if (rank == 0)
			printf("check errors=%ld\n", all);
		MPI_Bcast(&all, 1, MPI_LONG, 0, MPI_COMM_WORLD);
		MPI_Finalize();
		return all ? 3 : 0;
	}
	MPI_Finalize();
	return 0;
}
