// SPDX-License-Identifier: GPL-2.0
/*
 * npfnic-overcommit: an RDMA server whose registered memory is larger than
 * what its client uses, for seed 000's Table 5 (memory overcommitment).
 *
 * Server (-serve PORT): maps -region bytes of anonymous memory, registers
 * all of it as one memory region (pinned, or on demand with -odp), then
 * serves one client over RC: the client RDMA WRITEs into the first -ws
 * bytes of the region (its working set) and nothing else, one client
 * after another, each on a new QP, until the server is killed. Registering
 * pins every page of a pinned region, so the region's size is what the
 * server costs the guest; an on-demand region costs the pages the NIC
 * faults in, the working set. The server prints
 *   registered bytes=R odp=0|1 usec=T     (or "register failed: ...")
 * then "listening port=PORT pid=PID", and, as each client goes,
 *   served bytes=B
 *
 * Client (-c HOST:PORT): WRITEs -size bytes at a time, -depth of them
 * outstanding, -warmup times over the server's working set untimed (1),
 * then cycling through it for -t seconds (10; 0: none), and prints
 *   warmup bytes=B usec=T
 *   result bytes=B usec=T MBps=R
 *
 * The two exchange their QP's number, PSN and GID, and the server its
 * region's key, address and working set, over TCP.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

struct wire {
	uint32_t qpn, psn, rkey, pad;
	uint64_t addr, ws;
	uint8_t gid[16];
};

struct ctx {
	struct ibv_context *dev;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	int gid_index;
	enum ibv_mtu mtu;
	union ibv_gid gid;
};

static void die(const char *what)
{
	fprintf(stderr, "npfnic-overcommit: %s: %s\n", what, strerror(errno));
	exit(1);
}

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
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
	else if (*end == 'G' || *end == 'g')
		v <<= 30, end++;
	return *end ? -1 : v;
}

static void open_dev(struct ctx *c, const char *name)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_port_attr port;
	int i;

	if (!list)
		die("ibv_get_device_list");
	for (i = 0; list[i]; i++)
		if (!name || !strcmp(ibv_get_device_name(list[i]), name))
			break;
	if (!list[i]) {
		fprintf(stderr, "npfnic-overcommit: no ibverbs device %s\n", name ? name : "");
		exit(1);
	}
	c->dev = ibv_open_device(list[i]);
	ibv_free_device_list(list);
	if (!c->dev)
		die("ibv_open_device");
	c->pd = ibv_alloc_pd(c->dev);
	if (!c->pd)
		die("ibv_alloc_pd");
	if (ibv_query_port(c->dev, 1, &port))
		die("ibv_query_port");
	c->mtu = port.active_mtu;
	if (ibv_query_gid(c->dev, 1, c->gid_index, &c->gid))
		die("ibv_query_gid");
}

static void make_qp(struct ctx *c, int depth)
{
	struct ibv_qp_init_attr ia = {
		.qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = depth, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1 },
	};
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = 1,
		.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE,
	};

	c->cq = ibv_create_cq(c->dev, depth + 1, NULL, NULL, 0);
	if (!c->cq)
		die("ibv_create_cq");
	ia.send_cq = c->cq;
	ia.recv_cq = c->cq;
	c->qp = ibv_create_qp(c->pd, &ia);
	if (!c->qp)
		die("ibv_create_qp");
	if (ibv_modify_qp(c->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
		die("modify QP to INIT");
}

static void connect_qp(struct ctx *c, uint32_t my_psn, const struct wire *r)
{
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_RTR, .path_mtu = c->mtu, .dest_qp_num = r->qpn,
		.rq_psn = r->psn, .max_dest_rd_atomic = 1, .min_rnr_timer = 12,
		.ah_attr = {
			.is_global = 1, .port_num = 1,
			.grh = { .hop_limit = 64, .sgid_index = c->gid_index },
		},
	};

	memcpy(a.ah_attr.grh.dgid.raw, r->gid, 16);
	if (ibv_modify_qp(c->qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
			  IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
		die("modify QP to RTR");
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = my_psn;
	/* 1 s (4.096 us << 18) and 7 retries: a TCG peer stalls. */
	a.timeout = 18;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.max_rd_atomic = 1;
	if (ibv_modify_qp(c->qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
			  IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC))
		die("modify QP to RTS");
}

static void xfer(int fd, void *buf, size_t n, int out)
{
	char *p = buf;

	while (n) {
		ssize_t k = out ? write(fd, p, n) : read(fd, p, n);

		if (k <= 0) {
			if (k < 0 && errno == EINTR)
				continue;
			errno = k ? errno : ECONNRESET;
			die(out ? "write to the peer" : "read from the peer");
		}
		p += k;
		n -= k;
	}
}

static int serve(struct ctx *c, int port, long region, long ws, int odp)
{
	int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | (odp ? IBV_ACCESS_ON_DEMAND : 0);
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(port) };
	struct wire me = { 0 }, peer;
	struct ibv_mr *mr;
	int ls, fd, one = 1;
	double t0;
	char *mem;

	mem = mmap(NULL, region, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (mem == MAP_FAILED)
		die("mmap");
	t0 = now();
	mr = ibv_reg_mr(c->pd, mem, region, access);
	if (!mr) {
		printf("register failed: bytes=%ld odp=%d errno=%d (%s)\n", region, odp, errno, strerror(errno));
		fflush(stdout);
		return 1;
	}
	printf("registered bytes=%ld odp=%d usec=%.0f\n", region, odp, (now() - t0) * 1e6);
	fflush(stdout);
	ls = socket(AF_INET, SOCK_STREAM, 0);
	if (ls < 0 || setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) ||
	    bind(ls, (struct sockaddr *)&sa, sizeof(sa)) || listen(ls, 1))
		die("listen");
	printf("listening port=%d pid=%d\n", port, getpid());
	fflush(stdout);
	/* One client at a time, each on a QP of its own, until killed. */
	for (;;) {
		fd = accept(ls, NULL, NULL);
		if (fd < 0)
			die("accept");
		make_qp(c, 1);
		me.qpn = c->qp->qp_num;
		me.psn = lrand48() & 0xffffff;
		me.rkey = mr->rkey;
		me.addr = (uintptr_t)mem;
		me.ws = ws;
		memcpy(me.gid, c->gid.raw, 16);
		xfer(fd, &peer, sizeof(peer), 0);
		connect_qp(c, me.psn, &peer);
		xfer(fd, &me, sizeof(me), 1);
		/* The client's byte count arrives when it is done. */
		xfer(fd, &peer.addr, sizeof(peer.addr), 0);
		printf("served bytes=%llu\n", (unsigned long long)peer.addr);
		fflush(stdout);
		close(fd);
		if (ibv_destroy_qp(c->qp) || ibv_destroy_cq(c->cq))
			die("destroy the QP");
	}
}

static uint64_t write_loop(struct ctx *c, struct ibv_mr *mr, char *buf, long size, int depth,
			   const struct wire *peer, uint64_t *off, double secs, double *took)
{
	uint64_t bytes = 0, left = secs < 0 ? peer->ws / size : UINT64_MAX;
	struct ibv_wc wc[16];
	int posted = 0, i, n;
	double t0 = now(), t = 0;

	for (;;) {
		int more = secs < 0 ? left > 0 : t < secs;

		while (more && posted < depth) {
			struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = size, .lkey = mr->lkey };
			struct ibv_send_wr wr = {
				.sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
				.send_flags = IBV_SEND_SIGNALED,
				.wr.rdma = { .remote_addr = peer->addr + *off, .rkey = peer->rkey },
			}, *bad;

			if (ibv_post_send(c->qp, &wr, &bad))
				die("ibv_post_send");
			posted++;
			*off += size;
			if (*off + size > peer->ws)
				*off = 0;
			if (secs < 0)
				more = --left > 0;
		}
		if (!posted)
			break;
		n = ibv_poll_cq(c->cq, 16, wc);
		if (n < 0)
			die("ibv_poll_cq");
		for (i = 0; i < n; i++) {
			if (wc[i].status != IBV_WC_SUCCESS) {
				fprintf(stderr, "npfnic-overcommit: WRITE: %s\n", ibv_wc_status_str(wc[i].status));
				exit(1);
			}
			posted--;
			bytes += size;
		}
		t = now() - t0;
	}
	*took = t;
	return bytes;
}

static int client(struct ctx *c, const char *hostport, long size, int depth, int warmups, double secs)
{
	struct addrinfo hints = { .ai_family = AF_INET, .ai_socktype = SOCK_STREAM }, *ai;
	char host[256], *colon;
	struct wire me = { 0 }, peer;
	struct ibv_mr *mr;
	uint64_t off = 0, bytes;
	double t;
	char *buf;
	int fd;

	snprintf(host, sizeof(host), "%s", hostport);
	colon = strrchr(host, ':');
	if (!colon) {
		fprintf(stderr, "npfnic-overcommit: -c %s: want HOST:PORT\n", hostport);
		return 2;
	}
	*colon = 0;
	buf = aligned_alloc(4096, size);
	if (!buf)
		die("aligned_alloc");
	memset(buf, 0x5a, size);
	mr = ibv_reg_mr(c->pd, buf, size, IBV_ACCESS_LOCAL_WRITE);
	if (!mr)
		die("ibv_reg_mr");
	make_qp(c, depth);
	if (getaddrinfo(host, colon + 1, &hints, &ai))
		die("getaddrinfo");
	fd = socket(AF_INET, SOCK_STREAM, 0);
	if (fd < 0 || connect(fd, ai->ai_addr, ai->ai_addrlen))
		die("connect");
	freeaddrinfo(ai);
	me.qpn = c->qp->qp_num;
	me.psn = lrand48() & 0xffffff;
	memcpy(me.gid, c->gid.raw, 16);
	xfer(fd, &me, sizeof(me), 1);
	xfer(fd, &peer, sizeof(peer), 0);
	connect_qp(c, me.psn, &peer);
	if (peer.ws < (uint64_t)size) {
		fprintf(stderr, "npfnic-overcommit: working set %llu smaller than -size %ld\n",
			(unsigned long long)peer.ws, size);
		return 2;
	}
	/*
	 * Untimed passes over the working set first: a server's pages are
	 * present (pinned, or faulted in once) before the timed run, as in a
	 * server that has been running.
	 */
	for (; warmups > 0; warmups--) {
		bytes = write_loop(c, mr, buf, size, depth, &peer, &off, -1, &t);
		printf("warmup bytes=%llu usec=%.0f\n", (unsigned long long)bytes, t * 1e6);
	}
	bytes = 0;
	if (secs > 0) {
		bytes = write_loop(c, mr, buf, size, depth, &peer, &off, secs, &t);
		printf("result bytes=%llu usec=%.0f MBps=%.3f\n", (unsigned long long)bytes, t * 1e6, bytes / t / 1e6);
	}
	fflush(stdout);
	xfer(fd, &bytes, sizeof(bytes), 1);
	close(fd);
	return 0;
}

static void usage(void)
{
	fprintf(stderr, "usage: npfnic-overcommit [-d DEV] [-g GID_INDEX] -serve PORT -region BYTES -ws BYTES [-odp]\n"
		"       npfnic-overcommit [-d DEV] [-g GID_INDEX] -c HOST:PORT [-size BYTES] [-depth N] [-warmup PASSES] [-t SECONDS]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	struct ctx c = { 0 };
	const char *dev = NULL, *connect_to = NULL;
	long region = -1, ws = -1, size = 65536;
	int port = 0, odp = 0, depth = 8, warmups = 1, i;
	double secs = 10;

	for (i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

		if (!strcmp(a, "-odp")) {
			odp = 1;
			continue;
		}
		if (!v)
			usage();
		i++;
		if (!strcmp(a, "-d"))
			dev = v;
		else if (!strcmp(a, "-g"))
			c.gid_index = atoi(v);
		else if (!strcmp(a, "-serve"))
			port = atoi(v);
		else if (!strcmp(a, "-region"))
			region = parse_size(v);
		else if (!strcmp(a, "-ws"))
			ws = parse_size(v);
		else if (!strcmp(a, "-c"))
			connect_to = v;
		else if (!strcmp(a, "-size"))
			size = parse_size(v);
		else if (!strcmp(a, "-depth"))
			depth = atoi(v);
		else if (!strcmp(a, "-warmup"))
			warmups = atoi(v);
		else if (!strcmp(a, "-t"))
			secs = atof(v);
		else
			usage();
	}
	srand48(getpid() ^ (long)now());
	if (!!port == !!connect_to || size <= 0 || depth < 1 || depth > 1024 || warmups < 0 || secs < 0 ||
	    (!warmups && !secs))
		usage();
	if (port && (region <= 0 || ws <= 0 || ws > region || port > 65535))
		usage();
	open_dev(&c, dev);
	return port ? serve(&c, port, region, ws, odp) : client(&c, connect_to, size, depth, warmups, secs);
}
