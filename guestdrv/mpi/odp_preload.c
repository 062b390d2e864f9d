// SPDX-License-Identifier: GPL-2.0
/*
 * libnpfnic-odp.so: every memory region a program registers on a device
 * with on-demand paging for RC becomes an ODP region (IBV_ACCESS_ON_DEMAND
 * added to its access flags), so that an unmodified program pins nothing.
 * Loaded with LD_PRELOAD; on a device without ODP (rdma_rxe in the 6.1
 * guest) the registration goes through unchanged.
 *
 * It stands in for what UCX 1.13, as Debian builds it against upstream
 * rdma-core, cannot do on npfnic: its "odp" registration method is
 * implicit ODP (one region over the whole address space, which npfnic
 * does not offer), and it asks for explicit ODP only for buffers mapped
 * with ucp_mem_map(UCP_MEM_MAP_NONBLOCK) and a UCX_IB_ODP_MAX_SIZE set by
 * hand, which MPI's messages never are. The driver's own transparent ODP
 * (odp=all) will make it unnecessary.
 *
 * UCX registers through ibv_reg_mr_iova2 (IBVERBS_1.8); programs built
 * against older headers call ibv_reg_mr (IBVERBS_1.1) or ibv_reg_mr_iova
 * (IBVERBS_1.7). All three are interposed. With NPFNIC_ODP_REPORT set,
 * the library prints at exit how many regions it made on demand.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <infiniband/verbs.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#define ODP_RC_NEEDED (IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | \
		       IBV_ODP_SUPPORT_WRITE | IBV_ODP_SUPPORT_READ)

typedef struct ibv_mr *(*reg_iova2_fn)(struct ibv_pd *, void *, size_t, uint64_t, unsigned int);
typedef struct ibv_mr *(*reg_fn)(struct ibv_pd *, void *, size_t, int);

static struct {
	pthread_mutex_t lock;
	struct ibv_context *ctx[16];
	int odp[16];
	int n;
	unsigned long made, kept;
} state = { .lock = PTHREAD_MUTEX_INITIALIZER };

/* Whether ctx's device pages RC regions on demand (asked once per context). */
static int odp_capable(struct ibv_context *ctx)
{
	struct ibv_device_attr_ex attr = { 0 };
	int i, odp;

	pthread_mutex_lock(&state.lock);
	for (i = 0; i < state.n; i++) {
		if (state.ctx[i] == ctx) {
			odp = state.odp[i];
			pthread_mutex_unlock(&state.lock);
			return odp;
		}
	}
	odp = !ibv_query_device_ex(ctx, NULL, &attr) &&
	      (attr.odp_caps.general_caps & IBV_ODP_SUPPORT) &&
	      (attr.odp_caps.per_transport_caps.rc_odp_caps & ODP_RC_NEEDED) == ODP_RC_NEEDED;
	if (state.n < 16) {
		state.ctx[state.n] = ctx;
		state.odp[state.n++] = odp;
	}
	pthread_mutex_unlock(&state.lock);
	return odp;
}

static unsigned int with_odp(struct ibv_pd *pd, unsigned int access)
{
	if (pd && odp_capable(pd->context)) {
		__atomic_add_fetch(&state.made, 1, __ATOMIC_RELAXED);
		return access | IBV_ACCESS_ON_DEMAND;
	}
	__atomic_add_fetch(&state.kept, 1, __ATOMIC_RELAXED);
	return access;
}

static void *real(const char *name, const char *version)
{
	void *f = dlvsym(RTLD_NEXT, name, version);

	if (!f) {
		fprintf(stderr, "libnpfnic-odp: no %s@%s in libibverbs\n", name, version);
		abort();
	}
	return f;
}

struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t length,
				uint64_t iova, unsigned int access)
{
	static reg_iova2_fn next;

	if (!next)
		next = (reg_iova2_fn)real("ibv_reg_mr_iova2", "IBVERBS_1.8");
	return next(pd, addr, length, iova, with_odp(pd, access));
}

#undef ibv_reg_mr_iova
struct ibv_mr *ibv_reg_mr_iova(struct ibv_pd *pd, void *addr, size_t length,
			       uint64_t iova, int access)
{
	return ibv_reg_mr_iova2(pd, addr, length, iova, access);
}

#undef ibv_reg_mr
struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t length, int access)
{
	return ibv_reg_mr_iova2(pd, addr, length, (uintptr_t)addr, access);
}

__attribute__((destructor)) static void report(void)
{
	if (getenv("NPFNIC_ODP_REPORT"))
		fprintf(stderr, "libnpfnic-odp: %lu memory regions on demand, %lu on devices without ODP\n",
			state.made, state.kept);
}
