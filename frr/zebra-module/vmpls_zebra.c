// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * vmpls_zebra: a zebra loadable module that lets an unmodified FRRouting
 * zebra hand its MPLS state to vmpls over FPM (dplane_fpm_nl) on a kernel
 * without the MPLS modules.
 *
 * Copyright (C) the vmpls authors.
 *
 * This program is free software; you can redistribute it and/or modify it
 * under the terms of the GNU General Public License as published by the Free
 * Software Foundation; either version 2 of the License, or (at your option)
 * any later version. See frr/zebra-module/LICENSE.
 *
 * It links into zebra (GPL-2.0-or-later) and is therefore GPL-2.0-or-later,
 * unlike the rest of the vmpls repository (MIT/Apache-2.0).
 *
 * What it does (see README.md next to this file):
 *  1. frr_late_init hook: zebra_mpls_turned_on(), so MPLS config and the
 *     label messages of ldpd/ospfd/isisd/staticd are accepted although
 *     /proc/sys/net/mpls does not exist.
 *  2. one dataplane provider at DPLANE_PRIO_PRE_KERNEL ("vmpls"):
 *     - LSP install/update/delete and pseudowire install/uninstall contexts:
 *       skip the kernel, status SUCCESS (they go on to FPM).
 *     - next-hop-group contexts whose next hops carry labels: the same.
 *     - route install/update contexts whose next hops carry labels: the
 *       module itself gives the kernel the route with the labels stripped
 *       (encoded by zebra's own netlink_route_multipath_msg_encode() on the
 *       context with the label pointers set aside for the duration of the
 *       call, sent on the module's own rtnetlink socket), then marks the
 *       context skip-kernel / SUCCESS; the context itself is untouched, so
 *       FPM (DPLANE_PRIO_POSTPROCESS) and zebra see the labels.
 *     - route deletes go to the kernel unchanged: zebra encodes a delete
 *       with the prefix only, which removes the plain route.
 *  3. refuses to load (zebra exits with a clear message) into a zebra whose
 *     FRR version, or, when built with one, GNU build-id differs from the
 *     one this module was compiled against.
 */

#include <zebra.h>

#include <link.h>
#include <elf.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>

#include "lib/libfrr.h"
#include "lib/module.h"
#include "lib/version.h"
#include "lib/hook.h"
#include "lib/log.h"
#include "lib/nexthop.h"
#include "lib/nexthop_group.h"
#include "lib/vrf.h"
#include "lib/ns.h"
#include "lib/privs.h"

#include "zebra/zebra_dplane.h"
#include "zebra/zebra_mpls.h"
#include "zebra/rt_netlink.h"

/* The FRR version the headers we were compiled with describe.  The build
 * script may override it (only to demonstrate the mismatch check). */
#ifdef VMPLS_FRR_VERSION_OVERRIDE
#define VMPLS_BUILT_FOR VMPLS_FRR_VERSION_OVERRIDE
#else
#define VMPLS_BUILT_FOR FRR_VERSION
#endif

#define VMPLS_MOD_VERSION "0.1.0"

/* FRR's version as numbers, for the API differences below: the headers have
 * it only as a string, scripts/build-zebra-module passes it from the package */
#if !defined(VMPLS_FRR_MAJOR) || !defined(VMPLS_FRR_MINOR)
#error "VMPLS_FRR_MAJOR/VMPLS_FRR_MINOR undefined: build with scripts/build-zebra-module"
#endif
#define VZ_FRR_AT_LEAST(major, minor)                                          \
	(VMPLS_FRR_MAJOR > (major)                                             \
	 || (VMPLS_FRR_MAJOR == (major) && VMPLS_FRR_MINOR >= (minor)))

/* FRR 9.0 renamed lib/thread.[ch] to lib/event.[ch], thread_master to
 * event_loop (the argument of the frr_late_init hook) */
#if VZ_FRR_AT_LEAST(9, 0)
typedef struct event_loop vz_event_loop;
#else
typedef struct thread_master vz_event_loop;
#endif

/* zebra's privileges (zebra/main.c): CAP_NET_ADMIN is raised around netlink
 * writes, as zebra's own kernel code does */
extern struct zebra_privs_t zserv_privs;

/* as zebra/rt_netlink.c's RSYSTEM_ROUTE (not in a header) */
#define VZ_SYSTEM_ROUTE(type)                                                  \
	((type) == ZEBRA_ROUTE_KERNEL || (type) == ZEBRA_ROUTE_CONNECT)

static const char *vz_prov_name = "vmpls";

/* rtnetlink socket of our own, used only from the dataplane pthread. */
static int vz_nl_fd = -1;
static uint32_t vz_nl_seq;
static uint8_t vz_nl_buf[16384];

/* counters, shown in the log at shutdown */
static uint64_t vz_cnt_lsp, vz_cnt_pw, vz_cnt_nh, vz_cnt_route, vz_cnt_kerr;

/* ------------------------------------------------------------------ */
/* version check                                                       */

#ifdef VMPLS_ZEBRA_BUILD_ID
struct vz_bid {
	char hex[2 * 64 + 1];
	bool found;
};

static int vz_phdr_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
	struct vz_bid *bid = arg;
	int i;

	(void)size;
	/* the first object is the executable itself */
	for (i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		const uint8_t *p, *end;

		if (ph->p_type != PT_NOTE)
			continue;
		p = (const uint8_t *)(info->dlpi_addr + ph->p_vaddr);
		end = p + ph->p_memsz;
		while (p + sizeof(ElfW(Nhdr)) <= end) {
			const ElfW(Nhdr) *nh = (const ElfW(Nhdr) *)p;
			const uint8_t *name = p + sizeof(*nh);
			const uint8_t *desc = name + ((nh->n_namesz + 3) & ~3U);

			if (desc + nh->n_descsz > end)
				break;
			if (nh->n_type == NT_GNU_BUILD_ID && nh->n_namesz == 4
			    && memcmp(name, "GNU", 4) == 0
			    && nh->n_descsz <= 64) {
				for (unsigned int k = 0; k < nh->n_descsz; k++)
					snprintf(bid->hex + 2 * k, 3, "%02x",
						 desc[k]);
				bid->found = true;
				return 1;
			}
			p = desc + ((nh->n_descsz + 3) & ~3U);
		}
	}
	return 1; /* only the executable */
}
#endif

/*
 * Runs from frrmod_load(), before anything of zebra's is touched.  It only
 * reads libfrr's module list (struct frrmod_runtime/frrmod_info, unchanged
 * since FRR 3.0): entry 0 is libfrr itself, entry 1 the daemon, each with
 * the FRR_VERSION it was compiled with.
 */
static int vz_version_ok(void)
{
	const struct frrmod_runtime *lib = frrmod_list;
	const struct frrmod_runtime *daemon = lib ? lib->next : NULL;
	const char *libv = (lib && lib->info) ? lib->info->version : "?";
	const char *dname = (daemon && daemon->info) ? daemon->info->name : "?";
	const char *dv = (daemon && daemon->info) ? daemon->info->version : "?";
	bool ok = true;

	if (!libv || strcmp(libv, VMPLS_BUILT_FOR) != 0 || !dv
	    || strcmp(dv, VMPLS_BUILT_FOR) != 0) {
		fprintf(stderr,
			"vmpls_zebra: FATAL: this module was compiled for FRRouting %s but is loaded into %s %s (libfrr %s); it reads zebra's internal structures and must be rebuilt for this version: run scripts/build-zebra-module\n",
			VMPLS_BUILT_FOR, dname ? dname : "?", dv ? dv : "?",
			libv ? libv : "?");
		zlog_err(
			"vmpls_zebra: compiled for FRRouting %s, loaded into %s %s (libfrr %s): refusing to load, rebuild with scripts/build-zebra-module",
			VMPLS_BUILT_FOR, dname ? dname : "?", dv ? dv : "?",
			libv ? libv : "?");
		ok = false;
	} else if (!dname || strcmp(dname, "zebra") != 0) {
		fprintf(stderr,
			"vmpls_zebra: FATAL: this is a zebra module, loaded into '%s'\n",
			dname ? dname : "?");
		ok = false;
	}

#ifdef VMPLS_ZEBRA_BUILD_ID
	if (ok && !getenv("VMPLS_ZEBRA_SKIP_BUILD_ID_CHECK")) {
		struct vz_bid bid = {};

		dl_iterate_phdr(vz_phdr_cb, &bid);
		if (bid.found && strcmp(bid.hex, VMPLS_ZEBRA_BUILD_ID) != 0) {
			fprintf(stderr,
				"vmpls_zebra: FATAL: FRRouting %s matches, but this zebra binary (build-id %s) is not the one the module was compiled against (build-id %s, package %s); rebuild with scripts/build-zebra-module (or set VMPLS_ZEBRA_SKIP_BUILD_ID_CHECK=1 at your own risk)\n",
				dv, bid.hex, VMPLS_ZEBRA_BUILD_ID,
#ifdef VMPLS_FRR_PACKAGE
				VMPLS_FRR_PACKAGE
#else
				"?"
#endif
			);
			zlog_err("vmpls_zebra: zebra build-id %s != %s: refusing to load",
				 bid.hex, VMPLS_ZEBRA_BUILD_ID);
			ok = false;
		}
	}
#endif
	return ok ? 0 : -1;
}

/* ------------------------------------------------------------------ */
/* kernel side: the stripped route                                     */

static int vz_nl_open(void)
{
	struct sockaddr_nl snl = {.nl_family = AF_NETLINK};
	struct timeval tv = {.tv_sec = 2};
	int fd;

	frr_with_privs (&zserv_privs) {
		fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
	}
	if (fd < 0)
		return -1;
	if (bind(fd, (struct sockaddr *)&snl, sizeof(snl)) < 0) {
		close(fd);
		return -1;
	}
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	return fd;
}

/* send one request, wait for its ack; returns 0 or -errno */
static int vz_nl_talk(struct nlmsghdr *n)
{
	uint8_t rbuf[8192];
	struct sockaddr_nl dst = {.nl_family = AF_NETLINK};
	uint32_t seq;
	ssize_t sent = 0;

	if (vz_nl_fd < 0)
		vz_nl_fd = vz_nl_open();
	if (vz_nl_fd < 0)
		return -errno;

	seq = ++vz_nl_seq;
	n->nlmsg_seq = seq;
	n->nlmsg_pid = 0;
	n->nlmsg_flags |= NLM_F_ACK | NLM_F_REQUEST;

	frr_with_privs (&zserv_privs) {
		sent = sendto(vz_nl_fd, n, n->nlmsg_len, 0,
			      (struct sockaddr *)&dst, sizeof(dst));
		if (sent < 0)
			sent = -errno;
	}
	if (sent < 0)
		return (int)sent;

	for (;;) {
		ssize_t len = recv(vz_nl_fd, rbuf, sizeof(rbuf), 0);
		struct nlmsghdr *h;

		if (len < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		for (h = (struct nlmsghdr *)rbuf; NLMSG_OK(h, (size_t)len);
		     h = NLMSG_NEXT(h, len)) {
			if (h->nlmsg_seq != seq)
				continue;
			if (h->nlmsg_type == NLMSG_ERROR) {
				struct nlmsgerr *e = NLMSG_DATA(h);

				return e->error;
			}
		}
	}
}

/* a label the kernel would need MPLS for (implicit-null is no label) */
static bool vz_nh_has_labels(const struct nexthop *nh)
{
	if (!nh->nh_label)
		return false;
	for (int i = 0; i < nh->nh_label->num_labels; i++)
		if (nh->nh_label->label[i] != MPLS_LABEL_IMPLICIT_NULL)
			return true;
	return false;
}

static bool vz_ng_has_labels(const struct nexthop_group *ng)
{
	struct nexthop *nh;

	if (!ng)
		return false;
	for (ALL_NEXTHOPS_PTR(ng, nh))
		if (vz_nh_has_labels(nh))
			return true;
	return false;
}

/*
 * Encode the context's route as zebra would for the kernel, but with every
 * next hop's label stack set aside (restored before returning: the context
 * leaves this function exactly as it came in), always with inline next hops
 * (no kernel next-hop object id: the labelled next-hop groups are not in the
 * kernel).
 */
static ssize_t vz_encode_stripped(int cmd, struct zebra_dplane_ctx *ctx,
				  uint8_t *buf, size_t len)
{
	struct nexthop_group *ng =
		(struct nexthop_group *)dplane_ctx_get_ng(ctx);
	struct nexthop *nh;
	struct mpls_label_stack **saved;
	size_t n = 0, i = 0;
	ssize_t r;

	for (ALL_NEXTHOPS_PTR(ng, nh))
		n++;
	saved = calloc(n ? n : 1, sizeof(*saved));
	if (!saved)
		return -1;
	for (ALL_NEXTHOPS_PTR(ng, nh)) {
		saved[i++] = nh->nh_label;
		nh->nh_label = NULL;
	}
	/* fpm=true: inline next hops; force_nhg=false: no RTA_NH_ID */
#if VZ_FRR_AT_LEAST(10, 0)
	/* force_rr=false: NLM_F_REPLACE where zebra's kernel path sets it */
	r = netlink_route_multipath_msg_encode(cmd, ctx, buf, len, true, false,
					       false);
#else
	r = netlink_route_multipath_msg_encode(cmd, ctx, buf, len, true, false);
#endif
	i = 0;
	for (ALL_NEXTHOPS_PTR(ng, nh))
		nh->nh_label = saved[i++];
	free(saved);
	return r;
}

static void vz_route_to_kernel(struct zebra_dplane_ctx *ctx)
{
	enum dplane_op_e op = dplane_ctx_get_op(ctx);
	struct nlmsghdr *n = (struct nlmsghdr *)vz_nl_buf;
	ssize_t len;
	int err;

	if (vrf_is_backend_netns()
	    && dplane_ctx_get_ns(ctx)->ns_id != NS_DEFAULT) {
		zlog_warn("vmpls: %pFX (vrf %u): labelled route in a netns VRF, not given to the kernel",
			  dplane_ctx_get_dest(ctx), dplane_ctx_get_vrf(ctx));
		return;
	}

	len = vz_encode_stripped(RTM_NEWROUTE, ctx, vz_nl_buf,
				 sizeof(vz_nl_buf));
	if (len <= 0) {
		zlog_warn("vmpls: %pFX: could not encode the stripped route",
			  dplane_ctx_get_dest(ctx));
		return;
	}

	/* IPv6 without kernel replace semantics: zebra deletes first too */
	if (op == DPLANE_OP_ROUTE_UPDATE && !(n->nlmsg_flags & NLM_F_REPLACE)
	    && !VZ_SYSTEM_ROUTE(dplane_ctx_get_old_type(ctx))) {
		uint8_t dbuf[1024];
		struct nlmsghdr *d = (struct nlmsghdr *)dbuf;

		if (vz_encode_stripped(RTM_DELROUTE, ctx, dbuf, sizeof(dbuf))
		    > 0)
			(void)vz_nl_talk(d);
		len = vz_encode_stripped(RTM_NEWROUTE, ctx, vz_nl_buf,
					 sizeof(vz_nl_buf));
		if (len <= 0)
			return;
	}

	err = vz_nl_talk(n);
	if (err) {
		vz_cnt_kerr++;
		zlog_warn("vmpls: kernel refused the unlabelled copy of %pFX: %s (labels still go to FPM)",
			  dplane_ctx_get_dest(ctx), safe_strerror(-err));
	}
}

/* ------------------------------------------------------------------ */
/* the provider                                                         */

static void vz_mark_done(struct zebra_dplane_ctx *ctx)
{
	dplane_ctx_set_skip_kernel(ctx);
	dplane_ctx_set_status(ctx, ZEBRA_DPLANE_REQUEST_SUCCESS);
}

static void vz_handle(struct zebra_dplane_ctx *ctx)
{
	if (dplane_ctx_get_status(ctx) != ZEBRA_DPLANE_REQUEST_SUCCESS)
		return;

	switch (dplane_ctx_get_op(ctx)) {
	case DPLANE_OP_LSP_INSTALL:
	case DPLANE_OP_LSP_UPDATE:
	case DPLANE_OP_LSP_DELETE:
		vz_cnt_lsp++;
		vz_mark_done(ctx);
		break;
	case DPLANE_OP_PW_INSTALL:
	case DPLANE_OP_PW_UNINSTALL:
		vz_cnt_pw++;
		vz_mark_done(ctx);
		break;
	case DPLANE_OP_NH_INSTALL:
	case DPLANE_OP_NH_UPDATE:
	case DPLANE_OP_NH_DELETE:
		if (vz_ng_has_labels(dplane_ctx_get_nhe_ng(ctx))) {
			vz_cnt_nh++;
			vz_mark_done(ctx);
		}
		break;
	case DPLANE_OP_ROUTE_INSTALL:
	case DPLANE_OP_ROUTE_UPDATE:
		if (dplane_ctx_is_skip_kernel(ctx))
			break;
		if (vz_ng_has_labels(dplane_ctx_get_ng(ctx))) {
			vz_cnt_route++;
			vz_route_to_kernel(ctx);
			vz_mark_done(ctx);
		}
		break;
	default:
		/* route deletes (prefix only) and everything else: kernel */
		break;
	}
}

static int vz_process(struct zebra_dplane_provider *prov)
{
	struct zebra_dplane_ctx *ctx;
	int counter, limit = dplane_provider_get_work_limit(prov);

	for (counter = 0; counter < limit; counter++) {
		ctx = dplane_provider_dequeue_in_ctx(prov);
		if (!ctx)
			break;
		vz_handle(ctx);
		dplane_provider_enqueue_out_ctx(prov, ctx);
	}
	if (counter >= limit)
		dplane_provider_work_ready();
	return 0;
}

static int vz_fini(struct zebra_dplane_provider *prov, bool early)
{
	(void)prov;
	if (early)
		return 0;
	zlog_info("vmpls: %" PRIu64 " LSP, %" PRIu64 " PW, %" PRIu64
		  " labelled NHG, %" PRIu64
		  " labelled route contexts kept from the kernel (%" PRIu64
		  " unlabelled copies refused by it)",
		  vz_cnt_lsp, vz_cnt_pw, vz_cnt_nh, vz_cnt_route, vz_cnt_kerr);
	if (vz_nl_fd >= 0) {
		close(vz_nl_fd);
		vz_nl_fd = -1;
	}
	return 0;
}

static int vz_late_init(vz_event_loop *loop)
{
	int rv;

	(void)loop;
	if (!mpls_enabled) {
		zebra_mpls_turned_on();
		zlog_notice("vmpls: MPLS turned on (labels go to FPM, not to the kernel)");
	}

	rv = dplane_provider_register(vz_prov_name, DPLANE_PRIO_PRE_KERNEL,
				      DPLANE_PROV_FLAGS_DEFAULT, NULL,
				      vz_process, vz_fini, NULL, NULL);
	if (rv != 0) {
		zlog_err("vmpls: dataplane provider registration failed: %d",
			 rv);
		fprintf(stderr, "vmpls_zebra: FATAL: dataplane provider registration failed (%d)\n", rv);
		exit(1);
	}
	return 0;
}

static int vz_module_init(void)
{
	if (vz_version_ok() != 0)
		return -1; /* libfrr: "initialisation failed", zebra exits 1 */

	hook_register(frr_late_init, vz_late_init);
	return 0;
}

FRR_MODULE_SETUP(.name = "vmpls_zebra", .version = VMPLS_MOD_VERSION,
		 .description = "vmpls: MPLS to FPM without kernel MPLS",
		 .init = vz_module_init);
