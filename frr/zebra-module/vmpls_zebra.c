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
 *     - with netns VRFs, route install/update contexts with a next hop in
 *       another VRF (leaked by route targets): skip the kernel, SUCCESS.
 *     - route deletes go to the kernel unchanged: zebra encodes a delete
 *       with the prefix only, which removes the plain route.
 *  3. refuses to load (zebra exits with a clear message) into a zebra whose
 *     FRR version, or, when built with one, GNU build-id differs from the
 *     one this module was compiled against.
 *  4. with zebra -n (netns VRFs): a VRF interface per VRF (a veth pair named
 *     like the VRF, the same ifindex T in the VRF's namespace and in zebra's)
 *     whose ifindex T becomes the VRF's table id; removed with the VRF and at
 *     shutdown.
 *  5. avoids zebra 8.4's crash on SIGTERM with netns VRFs (a second
 *     route_table_finish() of a freed interface table in ns_terminate()).
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
#include "lib/if.h"
#include "lib/memory.h"

#include "zebra/zebra_dplane.h"
#include "zebra/zebra_mpls.h"
#include "zebra/rt_netlink.h"
#include "zebra/kernel_netlink.h"
#include "zebra/zebra_vrf.h"
#include "zebra/zebra_router.h"
#include "zebra/rib.h"

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

/* An rtnetlink socket of our own in zebra's (default) namespace; one per
 * pthread that uses it. */
struct vz_nl {
	int fd;
	uint32_t seq;
};

/* dataplane pthread: the stripped kernel copies of labelled routes */
static struct vz_nl vz_dp_nl = {.fd = -1};
static uint8_t vz_nl_buf[16384];
/* main pthread: the VRF interfaces */
static struct vz_nl vz_main_nl = {.fd = -1};

/* counters, shown in the log at shutdown */
static uint64_t vz_cnt_lsp, vz_cnt_pw, vz_cnt_nh, vz_cnt_route, vz_cnt_kerr,
	vz_cnt_leaked;

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
	int fd, err = 0;

	frr_with_privs (&zserv_privs) {
		fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
		if (fd < 0)
			err = errno;
	}
	if (fd < 0)
		return -err;
	if (bind(fd, (struct sockaddr *)&snl, sizeof(snl)) < 0) {
		err = errno;
		close(fd);
		return -err;
	}
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	return fd;
}

/*
 * Send one request, wait for its ack; returns 0 or -errno.  With a reply
 * buffer, the first answer that is not the ack (a GET's reply) is copied
 * there (truncated to reply_len).
 */
static int vz_nl_talk_reply(struct vz_nl *nl, struct nlmsghdr *n,
			    void *reply, size_t reply_len)
{
	uint8_t rbuf[8192];
	struct sockaddr_nl dst = {.nl_family = AF_NETLINK};
	uint32_t seq;
	ssize_t sent = 0;
	bool replied = false;

	if (nl->fd < 0)
		nl->fd = vz_nl_open();
	if (nl->fd < 0) {
		int err = nl->fd;

		nl->fd = -1;
		return err;
	}

	seq = ++nl->seq;
	n->nlmsg_seq = seq;
	n->nlmsg_pid = 0;
	n->nlmsg_flags |= NLM_F_ACK | NLM_F_REQUEST;

	frr_with_privs (&zserv_privs) {
		sent = sendto(nl->fd, n, n->nlmsg_len, 0,
			      (struct sockaddr *)&dst, sizeof(dst));
		if (sent < 0)
			sent = -errno;
	}
	if (sent < 0)
		return (int)sent;

	for (;;) {
		ssize_t len = recv(nl->fd, rbuf, sizeof(rbuf), 0);
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
			if (reply && !replied) {
				memcpy(reply, h,
				       MIN((size_t)h->nlmsg_len, reply_len));
				replied = true;
			}
		}
	}
}

static int vz_nl_talk(struct vz_nl *nl, struct nlmsghdr *n)
{
	return vz_nl_talk_reply(nl, n, NULL, 0);
}

static void vz_nl_close(struct vz_nl *nl)
{
	if (nl->fd >= 0) {
		close(nl->fd);
		nl->fd = -1;
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
 * Whether a next hop of a netns VRF's route is in another VRF: a route leaked
 * between VRFs of this router by route targets (a common-services VRF and its
 * customers on one PE).  The VRF namespace's kernel cannot send out of another
 * namespace's interface (it refuses: "Nexthop has invalid gateway", or finds
 * an unrelated interface of that index), so zebra would mark the route failed
 * and FPM would not carry it; vmpls forwards it, telling the VRF by the route
 * the leaked one was copied from.
 */
static bool vz_ng_leaves_vrf(const struct nexthop_group *ng, vrf_id_t vrf_id)
{
	struct nexthop *nh;

	if (!ng || !vrf_is_backend_netns())
		return false;
	for (ALL_NEXTHOPS_PTR(ng, nh))
		if (nh->vrf_id != vrf_id)
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

	/*
	 * A labelled route of a netns VRF (a VPN route) leaves the PE through
	 * the core, which the VRF namespace's kernel cannot reach: a plain copy
	 * there would send the customer's packets back to the customer side or
	 * nowhere.  vmpls forwards them from FPM; the kernel gets nothing.
	 */
	if (vrf_is_backend_netns()
	    && dplane_ctx_get_ns(ctx)->ns_id != NS_DEFAULT) {
		static atomic_bool logged;

		if (!atomic_exchange(&logged, true))
			zlog_notice("vmpls: labelled routes of netns VRFs (first: %pFX, vrf %u) go to FPM only, not to the VRF namespace's kernel, which cannot reach the core (logged once)",
				    dplane_ctx_get_dest(ctx),
				    dplane_ctx_get_vrf(ctx));
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
			(void)vz_nl_talk(&vz_dp_nl, d);
		len = vz_encode_stripped(RTM_NEWROUTE, ctx, vz_nl_buf,
					 sizeof(vz_nl_buf));
		if (len <= 0)
			return;
	}

	err = vz_nl_talk(&vz_dp_nl, n);
	if (err) {
		vz_cnt_kerr++;
		zlog_warn("vmpls: kernel refused the unlabelled copy of %pFX: %s (labels still go to FPM)",
			  dplane_ctx_get_dest(ctx), safe_strerror(-err));
	}
}

/* ------------------------------------------------------------------ */
/* VRF interfaces of netns VRFs (zebra -n)                              */

/*
 * For each VRF backed by a network namespace, a veth pair with the same
 * ifindex T at both ends: one end named like the VRF inside its namespace
 * (zread_vrf_label() looks for it there to install the VPN label's LSP), the
 * other, also named like the VRF, in zebra's own namespace (the LSP's
 * next hop is checked by ifindex there: nhlfe_nexthop_active()).  T also
 * becomes the VRF's table id, so FPM tells the VRFs apart (RTA_TABLE = T)
 * and the VPN label arrives as a pop to RTA_OIF = T.  Contract:
 * vpn-design.md, "The VRF interface and the table id".
 */
#define VZ_VRF_IFINDEX_FIRST 1000
#define VZ_VRF_IFINDEX_TRIES 4096

struct vz_vrf_if {
	struct vz_vrf_if *next;
	vrf_id_t vrf_id;
	ifindex_t ifindex;
	char name[IFNAMSIZ];
};

/* main pthread only */
static struct vz_vrf_if *vz_vrf_ifs;

static struct vz_vrf_if *vz_vrf_if_find(vrf_id_t vrf_id)
{
	struct vz_vrf_if *v;

	for (v = vz_vrf_ifs; v; v = v->next)
		if (v->vrf_id == vrf_id)
			return v;
	return NULL;
}

struct vz_link_req {
	struct nlmsghdr n;
	struct ifinfomsg ifi;
	char buf[512];
};

/* RTM_NEWLINK: the veth pair NAME (index T, here) / NAME (index T, in the
 * namespace ns_fd), both down (a veth cannot be opened before its peer is
 * linked to it: IFF_UP here fails with ENOTCONN) */
static int vz_veth_create(const char *name, ifindex_t ifindex, int ns_fd)
{
	struct vz_link_req req = {};
	struct rtattr *linkinfo, *data, *peer;
	struct ifinfomsg *peer_ifi;
	size_t max = sizeof(req);

	req.n.nlmsg_len = NLMSG_LENGTH(sizeof(struct ifinfomsg));
	req.n.nlmsg_type = RTM_NEWLINK;
	req.n.nlmsg_flags = NLM_F_CREATE | NLM_F_EXCL;
	req.ifi.ifi_family = AF_UNSPEC;
	req.ifi.ifi_index = ifindex;
	nl_attr_put(&req.n, max, IFLA_IFNAME, name, strlen(name) + 1);
	linkinfo = nl_attr_nest(&req.n, max, IFLA_LINKINFO);
	nl_attr_put(&req.n, max, IFLA_INFO_KIND, "veth", 5);
	data = nl_attr_nest(&req.n, max, IFLA_INFO_DATA);
	peer = nl_attr_nest(&req.n, max, 1 /* VETH_INFO_PEER */);
	/* not a plain nest (an ifinfomsg comes first): the kernel refuses it
	 * flagged NLA_F_NESTED */
	peer->rta_type &= ~NLA_F_NESTED;
	/* the peer's ifinfomsg comes first, then its attributes */
	peer_ifi = (struct ifinfomsg *)((char *)&req.n
					+ NLMSG_ALIGN(req.n.nlmsg_len));
	memset(peer_ifi, 0, sizeof(*peer_ifi));
	peer_ifi->ifi_family = AF_UNSPEC;
	peer_ifi->ifi_index = ifindex;
	req.n.nlmsg_len = NLMSG_ALIGN(req.n.nlmsg_len) + sizeof(*peer_ifi);
	nl_attr_put(&req.n, max, IFLA_IFNAME, name, strlen(name) + 1);
	nl_attr_put32(&req.n, max, IFLA_NET_NS_FD, ns_fd);
	nl_attr_nest_end(&req.n, peer);
	nl_attr_nest_end(&req.n, data);
	nl_attr_nest_end(&req.n, linkinfo);
	return vz_nl_talk(&vz_main_nl, &req.n);
}

/* up, without addresses: no IPv6 link-local (which would become a
 * connected fe80::/64 of the VRF over the VRF interface), set before the
 * link goes up */
static int vz_link_up(struct vz_nl *nl, ifindex_t ifindex)
{
	struct vz_link_req req = {};
	struct rtattr *spec, *inet6;
	uint8_t mode = IN6_ADDR_GEN_MODE_NONE;
	int err;

	req.n.nlmsg_len = NLMSG_LENGTH(sizeof(struct ifinfomsg));
	req.n.nlmsg_type = RTM_NEWLINK;
	req.ifi.ifi_family = AF_UNSPEC;
	req.ifi.ifi_index = ifindex;
	spec = nl_attr_nest(&req.n, sizeof(req), IFLA_AF_SPEC);
	inet6 = nl_attr_nest(&req.n, sizeof(req), AF_INET6);
	nl_attr_put(&req.n, sizeof(req), IFLA_INET6_ADDR_GEN_MODE, &mode,
		    sizeof(mode));
	nl_attr_nest_end(&req.n, inet6);
	nl_attr_nest_end(&req.n, spec);
	err = vz_nl_talk(nl, &req.n);
	if (err)
		return err;

	memset(&req, 0, sizeof(req));
	req.n.nlmsg_len = NLMSG_LENGTH(sizeof(struct ifinfomsg));
	req.n.nlmsg_type = RTM_NEWLINK;
	req.ifi.ifi_family = AF_UNSPEC;
	req.ifi.ifi_index = ifindex;
	req.ifi.ifi_flags = IFF_UP;
	req.ifi.ifi_change = IFF_UP;
	return vz_nl_talk(nl, &req.n);
}

/* both ends up: ours on our socket, the VRF's on a socket opened in the
 * VRF's namespace */
/* a socket in the VRF's namespace (CAP_SYS_ADMIN raised by the caller) */
static int vz_vrf_nl_open(struct vz_nl *nl, ns_id_t ns_id)
{
	struct sockaddr_nl snl = {.nl_family = AF_NETLINK};
	struct timeval tv = {.tv_sec = 2};
	int err;

	nl->fd = ns_socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE,
			   ns_id);
	if (nl->fd < 0)
		return -errno;
	if (bind(nl->fd, (struct sockaddr *)&snl, sizeof(snl)) < 0) {
		err = -errno;
		vz_nl_close(nl);
		return err;
	}
	setsockopt(nl->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	return 0;
}

static int vz_veth_up(ifindex_t ifindex, ns_id_t ns_id)
{
	struct vz_nl vrf_nl = {.fd = -1};
	int err;

	err = vz_link_up(&vz_main_nl, ifindex);
	if (err)
		return err;
	err = vz_vrf_nl_open(&vrf_nl, ns_id);
	if (err)
		return err;
	err = vz_link_up(&vrf_nl, ifindex);
	vz_nl_close(&vrf_nl);
	return err;
}

/* whether the VRF's namespace has an interface NAME with this ifindex */
static bool vz_vrf_has_link(ns_id_t ns_id, ifindex_t ifindex,
			    const char *name)
{
	struct vz_nl vrf_nl = {.fd = -1};
	struct vz_link_req req = {};
	union {
		struct nlmsghdr n;
		uint8_t b[4096];
	} reply = {};
	struct ifinfomsg *ifi;
	struct rtattr *a;
	int len;
	bool found = false;

	if (vz_vrf_nl_open(&vrf_nl, ns_id) != 0)
		return false;
	req.n.nlmsg_len = NLMSG_LENGTH(sizeof(struct ifinfomsg));
	req.n.nlmsg_type = RTM_GETLINK;
	req.ifi.ifi_family = AF_UNSPEC;
	req.ifi.ifi_index = ifindex;
	if (vz_nl_talk_reply(&vrf_nl, &req.n, &reply, sizeof(reply)) == 0
	    && reply.n.nlmsg_type == RTM_NEWLINK) {
		ifi = NLMSG_DATA(&reply.n);
		len = MIN(reply.n.nlmsg_len, sizeof(reply))
		      - NLMSG_LENGTH(sizeof(*ifi));
		for (a = IFLA_RTA(ifi); RTA_OK(a, len); a = RTA_NEXT(a, len))
			if (a->rta_type == IFLA_IFNAME)
				found = strncmp(RTA_DATA(a), name,
						RTA_PAYLOAD(a))
					== 0;
	}
	vz_nl_close(&vrf_nl);
	return found;
}

/* whether zebra's namespace has an interface with this ifindex */
static bool vz_ifindex_taken(ifindex_t ifindex)
{
	struct vz_link_req req = {};
	union {
		struct nlmsghdr n;
		uint8_t b[4096];
	} reply = {};

	req.n.nlmsg_len = NLMSG_LENGTH(sizeof(struct ifinfomsg));
	req.n.nlmsg_type = RTM_GETLINK;
	req.ifi.ifi_family = AF_UNSPEC;
	req.ifi.ifi_index = ifindex;
	return vz_nl_talk_reply(&vz_main_nl, &req.n, &reply, sizeof(reply))
		       == 0
	       && reply.n.nlmsg_type == RTM_NEWLINK;
}

static int vz_link_delete(ifindex_t ifindex)
{
	struct vz_link_req req = {};

	req.n.nlmsg_len = NLMSG_LENGTH(sizeof(struct ifinfomsg));
	req.n.nlmsg_type = RTM_DELLINK;
	req.ifi.ifi_family = AF_UNSPEC;
	req.ifi.ifi_index = ifindex;
	return vz_nl_talk(&vz_main_nl, &req.n);
}

/*
 * The ifindex of a veth named NAME in zebra's namespace (a VRF interface
 * left behind by a zebra that was killed), or 0 if there is none or it is
 * something else.
 */
static ifindex_t vz_stale_veth(const char *name)
{
	struct vz_link_req req = {};
	union {
		struct nlmsghdr n;
		uint8_t b[4096];
	} reply = {};
	struct ifinfomsg *ifi;
	struct rtattr *a, *info;
	int len, ilen;

	req.n.nlmsg_len = NLMSG_LENGTH(sizeof(struct ifinfomsg));
	req.n.nlmsg_type = RTM_GETLINK;
	req.ifi.ifi_family = AF_UNSPEC;
	nl_attr_put(&req.n, sizeof(req), IFLA_IFNAME, name, strlen(name) + 1);
	if (vz_nl_talk_reply(&vz_main_nl, &req.n, &reply, sizeof(reply)) != 0
	    || reply.n.nlmsg_type != RTM_NEWLINK)
		return 0;
	ifi = NLMSG_DATA(&reply.n);
	len = MIN(reply.n.nlmsg_len, sizeof(reply))
	      - NLMSG_LENGTH(sizeof(*ifi));
	for (a = IFLA_RTA(ifi); RTA_OK(a, len); a = RTA_NEXT(a, len)) {
		if (a->rta_type != IFLA_LINKINFO)
			continue;
		ilen = RTA_PAYLOAD(a);
		for (info = RTA_DATA(a); RTA_OK(info, ilen);
		     info = RTA_NEXT(info, ilen))
			if (info->rta_type == IFLA_INFO_KIND
			    && strncmp(RTA_DATA(info), "veth",
				       RTA_PAYLOAD(info))
				       == 0)
				return ifi->ifi_index;
	}
	return 0;
}

/*
 * zebra made the VRF's tables under table id 254 (zebra_vrf_enable()); move
 * them to T in zebra's table index so that everything keyed by
 * zvrf->table_id (routes of clients and connected routes, the release of the
 * tables when the VRF goes) finds them.  Runs before the VRF's first route.
 */
static void vz_vrf_set_table(struct zebra_vrf *zvrf, uint32_t table_id)
{
	afi_t afi;
	safi_t safi;

	for (afi = AFI_IP; afi <= AFI_IP6; afi++)
		for (safi = SAFI_UNICAST; safi <= SAFI_MULTICAST; safi++) {
			struct zebra_router_table *zrt = zebra_router_find_zrt(
				zvrf, zvrf->table_id, afi, safi);
			struct rib_table_info *info;

			if (!zrt)
				continue;
			RB_REMOVE(zebra_router_table_head, &zrouter.tables,
				  zrt);
			zrt->tableid = table_id;
			info = route_table_get_info(zrt->table);
			if (info)
				info->table_id = table_id;
			RB_INSERT(zebra_router_table_head, &zrouter.tables,
				  zrt);
		}
	zvrf->table_id = table_id;
}

static void vz_vrf_if_create(struct vrf *vrf)
{
	struct ns *ns = vrf->ns_ctxt;
	struct zebra_vrf *zvrf = vrf->info;
	struct vz_vrf_if *v;
	ifindex_t ifindex = VZ_VRF_IFINDEX_FIRST, stale;
	bool retried = false;
	int err = -EBUSY;

	if (!ns || ns->fd < 0 || !zvrf) {
		zlog_warn("vmpls: VRF %s: namespace not open, no VRF interface",
			  vrf->name);
		return;
	}
	if (strlen(vrf->name) >= IFNAMSIZ) {
		zlog_warn("vmpls: VRF %s: name longer than an interface name (%d), no VRF interface: its routes stay in table %u",
			  vrf->name, IFNAMSIZ - 1, zvrf->table_id);
		return;
	}
	while (ifindex < VZ_VRF_IFINDEX_FIRST + VZ_VRF_IFINDEX_TRIES) {
		frr_with_privs (&zserv_privs) {
			err = vz_veth_create(vrf->name, ifindex, ns->fd);
		}
		/*
		 * T taken: in the VRF's namespace the peer's registration
		 * answers EBUSY; in ours rtnl_newlink() finds the device by
		 * index first and, NLM_F_EXCL, answers EEXIST (another VRF's
		 * interface), which a name taken answers too.
		 */
		if (err == -EBUSY
		    || (err == -EEXIST && vz_ifindex_taken(ifindex))) {
			ifindex++;
			continue;
		}
		if (err == -EEXIST && !retried
		    && (stale = vz_stale_veth(vrf->name)) != 0) {
			bool pair;

			frr_with_privs (&zserv_privs) {
				pair = vz_vrf_has_link(ns->ns_id, stale,
						       vrf->name);
			}
			if (pair) {
				/*
				 * Taken over, not replaced: deleting it would
				 * reach zebra as the deletion of the VRF's
				 * interface (if_del) after the new one is
				 * made.
				 */
				zlog_notice("vmpls: VRF %s: taking over the VRF interface a previous zebra left behind (ifindex %d)",
					    vrf->name, stale);
				ifindex = stale;
				err = 0;
				break;
			}
			zlog_notice("vmpls: VRF %s: removing a veth %s a previous zebra left behind (ifindex %d), whose peer is not in the VRF",
				    vrf->name, vrf->name, stale);
			frr_with_privs (&zserv_privs) {
				vz_link_delete(stale);
			}
			retried = true;
			continue;
		}
		break;
	}
	if (err) {
		zlog_err("vmpls: VRF %s: could not create its VRF interface: %s; its routes stay in table %u and its VPN label has no LSP",
			 vrf->name, safe_strerror(-err), zvrf->table_id);
		return;
	}
	frr_with_privs (&zserv_privs) {
		err = vz_veth_up(ifindex, ns->ns_id);
	}
	if (err)
		/* zebra will not install the VPN label's LSP over a down
		 * interface; the table id is right all the same */
		zlog_err("vmpls: VRF %s: could not bring its VRF interface (ifindex %d) up: %s",
			 vrf->name, ifindex, safe_strerror(-err));

	v = XCALLOC(MTYPE_TMP, sizeof(*v));
	v->vrf_id = vrf->vrf_id;
	v->ifindex = ifindex;
	strlcpy(v->name, vrf->name, sizeof(v->name));
	v->next = vz_vrf_ifs;
	vz_vrf_ifs = v;
	vz_vrf_set_table(zvrf, ifindex);
	zlog_notice("vmpls: VRF %s: VRF interface %s (ifindex %d here and in the VRF's namespace), table id %d",
		    vrf->name, vrf->name, ifindex, ifindex);
}

static void vz_vrf_if_remove(struct vz_vrf_if *v, const char *why)
{
	struct vz_vrf_if **pp;
	int err;

	for (pp = &vz_vrf_ifs; *pp; pp = &(*pp)->next)
		if (*pp == v) {
			*pp = v->next;
			break;
		}
	/* deleting one end of a veth deletes both */
	frr_with_privs (&zserv_privs) {
		err = vz_link_delete(v->ifindex);
	}
	if (err && err != -ENODEV)
		zlog_warn("vmpls: VRF %s: could not remove its VRF interface (ifindex %d): %s",
			  v->name, v->ifindex, safe_strerror(-err));
	else
		zlog_notice("vmpls: VRF %s: VRF interface removed (%s)",
			    v->name, why);
	XFREE(MTYPE_TMP, v);
}

/*
 * The first interface zebra learns of a netns VRF (its namespace's `lo`, in
 * interface_list() right after zebra_vrf_enable(), before any of its routes)
 * is the moment to make the VRF interface and set the table id.
 */
static int vz_if_add(struct interface *ifp)
{
	struct vrf *vrf = ifp->vrf;

	if (!vrf_is_backend_netns() || !vrf || vrf->vrf_id == VRF_DEFAULT
	    || vrf->vrf_id == VRF_UNKNOWN)
		return 0;
	if (vz_vrf_if_find(vrf->vrf_id))
		return 0;
	vz_vrf_if_create(vrf);
	return 0;
}

/*
 * zebra forgets the VRF's own end when the VRF's namespace is deleted
 * (zebra_ns_delete() deletes every interface of the VRF before disabling
 * it) or the pair was removed from outside.
 */
static int vz_if_del(struct interface *ifp)
{
	struct vz_vrf_if *v;

	if (!ifp->vrf || ifp->vrf->vrf_id == VRF_DEFAULT)
		return 0;
	v = vz_vrf_if_find(ifp->vrf->vrf_id);
	if (v && strcmp(ifp->name, v->name) == 0)
		vz_vrf_if_remove(v, "the VRF or its interface went away");
	return 0;
}

/* zebra's SIGTERM handler, first thing after the RA stop */
static int vz_early_fini(void)
{
	while (vz_vrf_ifs)
		vz_vrf_if_remove(vz_vrf_ifs, "zebra stops");
	vz_nl_close(&vz_main_nl);
	return 0;
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
		} else if (vz_ng_leaves_vrf(dplane_ctx_get_ng(ctx),
					    dplane_ctx_get_vrf(ctx))) {
			vz_cnt_leaked++;
			vz_mark_done(ctx);
		}
		break;
	case DPLANE_OP_ROUTE_DELETE:
		/* a leaked route never reached the kernel (above) */
		if (vz_ng_leaves_vrf(dplane_ctx_get_ng(ctx),
				     dplane_ctx_get_vrf(ctx)))
			vz_mark_done(ctx);
		break;
	default:
		/* other route deletes (prefix only) and everything else:
		 * kernel */
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

/*
 * zebra 8.4's shutdown with namespaces open (zebra -n with netns VRFs)
 * crashes: sigint() runs zebra_ns_early_shutdown() on every namespace, which
 * frees its interface table (zebra_ns_disable_internal() ->
 * route_table_finish(zns->if_table), the pointer left dangling); then
 * zebra_finalize() -> ns_terminate() -> ns_delete() -> ns_disable() calls
 * zebra_ns_disabled() again for every namespace still open (ns->fd >= 0),
 * which finishes the freed table a second time: SIGSEGV in
 * route_table_finish().  Everything that second call does (the table, the
 * dataplane's and the kernel's sockets) is done by then, so closing the
 * namespace fds here, after zebra_ns_final_shutdown() and before
 * ns_terminate(), makes ns_disable() skip it and zebra exit 0.
 */
static int vz_ns_close_after_shutdown(struct ns *ns, void *in, void **out)
{
	(void)in;
	(void)out;
	if (ns->fd >= 0) {
		close(ns->fd);
		ns->fd = -1;
	}
	return NS_WALK_CONTINUE;
}

static int vz_fini(struct zebra_dplane_provider *prov, bool early)
{
	(void)prov;
	if (early)
		return 0;
	/* zebra_finalize(): after zebra_ns_final_shutdown(), on the main
	 * pthread, before ns_terminate() */
	if (vrf_is_backend_netns())
		ns_walk_func(vz_ns_close_after_shutdown, NULL, NULL);
	zlog_info("vmpls: %" PRIu64 " LSP, %" PRIu64 " PW, %" PRIu64
		  " labelled NHG, %" PRIu64
		  " labelled route contexts kept from the kernel (%" PRIu64
		  " unlabelled copies refused by it), %" PRIu64
		  " routes leaked between VRFs kept from the kernel",
		  vz_cnt_lsp, vz_cnt_pw, vz_cnt_nh, vz_cnt_route, vz_cnt_kerr,
		  vz_cnt_leaked);
	vz_nl_close(&vz_dp_nl);
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
	hook_register(if_add, vz_if_add);
	hook_register(if_del, vz_if_del);
	hook_register(frr_early_fini, vz_early_fini);
	return 0;
}

FRR_MODULE_SETUP(.name = "vmpls_zebra", .version = VMPLS_MOD_VERSION,
		 .description = "vmpls: MPLS to FPM without kernel MPLS",
		 .init = vz_module_init);
