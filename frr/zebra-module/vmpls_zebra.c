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
#include "zebra/zebra_ns.h"
#include "zebra/zebra_router.h"
#include "zebra/rib.h"
#include "zebra/zebra_pw.h"
#include "lib/json.h"
#include "lib/pw.h"

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
static const char *vz_prov_name_after_kernel = "vmpls-after-kernel";

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
	vz_cnt_leaked, vz_cnt_gone;

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

static void vz_vrf_lsps_recheck_later(void);
static void vz_vrf_lsps_recheck_stop(void);

/*
 * zread_vrf_label() drops bgpd's VPN label for good when it does not find the
 * VRF's interface by name in the VRF (bgpd does not send it again): for a VRF
 * created while zebra and bgpd run, bgpd's label comes as soon as zebra
 * announces the VRF, often before zebra has read the new pair's links from
 * netlink.  So the VRF's end is made known to zebra at once, as an interface
 * configured before it exists (netlink fills it in when its link comes, as it
 * does for those); the LSP's next hop, our end, is only usable once netlink
 * brought it, and the LSPs are evaluated again then.
 */
static void vz_vrf_if_announce(struct vrf *vrf, ifindex_t ifindex)
{
	struct interface *ifp;

	ifp = if_get_by_name(vrf->name, vrf->vrf_id, vrf->name);
	if (ifp->ifindex == IFINDEX_INTERNAL)
		if_set_index(ifp, ifindex);
	vz_vrf_lsps_recheck_later();
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
	/* after v is listed: if_get_by_name() calls the if_add hook */
	vz_vrf_if_announce(vrf, ifindex);
}

static void vz_vrf_if_unlink(struct vz_vrf_if *v)
{
	struct vz_vrf_if **pp;

	for (pp = &vz_vrf_ifs; *pp; pp = &(*pp)->next)
		if (*pp == v) {
			*pp = v->next;
			break;
		}
}

/* deletes the pair and frees v (no longer in vz_vrf_ifs) */
static void vz_vrf_if_delete(struct vz_vrf_if *v, const char *why)
{
	int err;

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

static void vz_vrf_if_remove(struct vz_vrf_if *v, const char *why)
{
	vz_vrf_if_unlink(v);
	vz_vrf_if_delete(v, why);
}

static void vz_vrf_if_remove_later(struct vz_vrf_if *v);

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
	if (v && strcmp(ifp->name, v->name) == 0) {
		vz_vrf_if_unlink(v);
		vz_vrf_if_remove_later(v);
	}
	return 0;
}

static void vz_pwc_stop(void);
static void vz_vrf_ifs_gone_flush(void);

/* zebra's SIGTERM handler, first thing after the RA stop */
static int vz_early_fini(void)
{
	vz_pwc_stop();
	vz_vrf_lsps_recheck_stop();
	vz_vrf_ifs_gone_flush();
	while (vz_vrf_ifs)
		vz_vrf_if_remove(vz_vrf_ifs, "zebra stops");
	vz_nl_close(&vz_main_nl);
	return 0;
}

/* ------------------------------------------------------------------ */
/* pseudowires: the channel to vmpls                                   */
/*
 * zebra's pseudowire code (zebra_pw.c) runs on the main pthread: it calls
 * hook pw_install before every dplane_pw_install() (install or change) and
 * hook pw_uninstall before dplane_pw_uninstall().  The module keeps the
 * installed set from those hooks (so a PW needs no copy across pthreads; the
 * provider only keeps the contexts from the kernel) and exports it to vmpls:
 * TCP to the router (default 127.0.0.1:2621, `-M vmpls_zebra:pw=ADDR:PORT`,
 * `pw=off` to disable), line-delimited JSON:
 *   -> {"op":"hello","frr":"8.4.4"}  {"op":"sync","pws":[...]}  (each connect)
 *   -> {"op":"install","pw":{...}}   {"op":"uninstall","name":"mpw0"}
 *   <- {"op":"status","name":"mpw0","up":false,"reason":"..."}
 * A PW forwards only while vmpls is connected and has not said it is down:
 * otherwise zebra_pw_install_failure(PW_NOT_FORWARDING) (zebra tells the
 * client, ldpd, which signals the RFC 4447 status to the remote PE and shows
 * it in `show l2vpn atom vc`), and the module, not zebra's 30 s retry timer,
 * installs it again (zebra_pw_update()) when vmpls says up.
 */

#if VZ_FRR_AT_LEAST(9, 0)
typedef struct event vz_event;
#define VZ_ARG(t) EVENT_ARG(t)
#define VZ_OFF(t) EVENT_OFF(t)
#define vz_add_read event_add_read
#define vz_add_write event_add_write
#define vz_add_timer event_add_timer
#define vz_add_event event_add_event
#else
typedef struct thread vz_event;
#define VZ_ARG(t) THREAD_ARG(t)
#define VZ_OFF(t) THREAD_OFF(t)
#define vz_add_read thread_add_read
#define vz_add_write thread_add_write
#define vz_add_timer thread_add_timer
#define vz_add_event thread_add_event
#endif

#define VZ_PW_DEFAULT_ADDR "127.0.0.1"
#define VZ_PW_DEFAULT_PORT 2621
#define VZ_PW_MAX_LINE 65536

struct vz_pw {
	struct vz_pw *next;
	char name[sizeof(((struct zebra_pw *)0)->ifname)];
	vrf_id_t vrf_id;
	uint32_t local_label, remote_label;
	int af;
	union g_addr peer;
	bool cw;
	int type;
	/* what vmpls last said: unknown until its first status */
	enum { VZ_PW_UNKNOWN, VZ_PW_UP, VZ_PW_DOWN } vmpls;
	char reason[128];
	/* the module made zebra mark it not forwarding (and owns the retry) */
	bool failed_by_us;
};

static struct {
	bool enabled;
	struct sockaddr_storage addr;
	socklen_t addrlen;
	char addr_str[160];
	int fd;
	bool connected;
	vz_event *t_read, *t_write, *t_timer, *t_reconcile;
	char *out;
	size_t out_len, out_cap;
	char in[VZ_PW_MAX_LINE];
	size_t in_len;
	struct vz_pw *pws;
	uint64_t connects, bad_lines;
	bool logged_refused;
} vz_pwc = {.fd = -1};

static vz_event_loop *vz_loop;

/*
 * VRF interfaces whose VRF went away, deleted from the main loop's next
 * round, not from the if_del hook: zebra_ns_delete() calls the hook while
 * its sockets in the VRF's namespace are still open, and zebra 10 reads
 * link messages on the dataplane pthread and handles them on the main one
 * later; the link messages of the VRF's own end then reached zebra after
 * the VRF was deleted, and if_get_by_name() made a VRF without a name with
 * the dead VRF's id, under which the next namespace with that NSID was
 * ignored ("NS notify : same NSID used by VRF ."): a VRF created after a
 * VRF deleted got no VRF interface, no routes.  By the next round,
 * zebra_ns_delete() has closed those sockets.
 */
static struct vz_vrf_if *vz_vrf_ifs_gone;
static vz_event *vz_t_vrf_ifs_gone;

static void vz_vrf_ifs_gone_flush(void)
{
	struct vz_vrf_if *v;

	VZ_OFF(vz_t_vrf_ifs_gone);
	while ((v = vz_vrf_ifs_gone)) {
		struct vz_vrf_if *live;

		vz_vrf_ifs_gone = v->next;
		/* the same ifindex made anew meanwhile: not ours to delete */
		for (live = vz_vrf_ifs; live; live = live->next)
			if (live->ifindex == v->ifindex)
				break;
		if (live) {
			XFREE(MTYPE_TMP, v);
			continue;
		}
		vz_vrf_if_delete(v, "the VRF or its interface went away");
	}
}

static void vz_vrf_ifs_gone_ev(vz_event *t)
{
	(void)t;
	vz_vrf_ifs_gone_flush();
}

static void vz_vrf_if_remove_later(struct vz_vrf_if *v)
{
	v->next = vz_vrf_ifs_gone;
	vz_vrf_ifs_gone = v;
	if (!vz_loop) {
		vz_vrf_ifs_gone_flush();
		return;
	}
	vz_add_event(vz_loop, vz_vrf_ifs_gone_ev, NULL, 0,
		     &vz_t_vrf_ifs_gone);
}

/*
 * The VPN labels' LSPs point at our ends of the VRF pairs; zebra evaluated
 * them when bgpd's label came, maybe before netlink brought those ends, and
 * does not look again by itself.  Every second, up to VZ_LSP_RECHECKS times,
 * until every VRF interface here is operative: then once more.
 */
#define VZ_LSP_RECHECKS 10
static vz_event *vz_t_lsps;
static int vz_lsp_rechecks;

static void vz_vrf_lsps_recheck_ev(vz_event *t)
{
	struct vz_vrf_if *v;
	struct interface *ifp;
	struct zebra_vrf *def_zvrf = zebra_vrf_lookup_by_id(VRF_DEFAULT);

	(void)t;
	for (v = vz_vrf_ifs; v; v = v->next) {
		ifp = if_lookup_by_index(v->ifindex, VRF_DEFAULT);
		if (!ifp || !if_is_operative(ifp))
			break;
	}
	if (v && ++vz_lsp_rechecks < VZ_LSP_RECHECKS) {
		vz_add_timer(vz_loop, vz_vrf_lsps_recheck_ev, NULL, 1, &vz_t_lsps);
		return;
	}
	if (v)
		zlog_warn("vmpls: VRF %s: its VRF interface (ifindex %d) is not up here after %d s; its VPN label's LSP may stay out",
			  v->name, v->ifindex, VZ_LSP_RECHECKS);
	if (def_zvrf)
		zebra_mpls_lsp_schedule(def_zvrf);
}

static void vz_vrf_lsps_recheck_later(void)
{
	if (!vz_loop)
		return;
	vz_lsp_rechecks = 0;
	VZ_OFF(vz_t_lsps);
	vz_add_timer(vz_loop, vz_vrf_lsps_recheck_ev, NULL, 1, &vz_t_lsps);
}

static void vz_vrf_lsps_recheck_stop(void)
{
	VZ_OFF(vz_t_lsps);
}

static void vz_pwc_connect(vz_event *t);
static void vz_pwc_disconnect(const char *why);
static void vz_pwc_reconcile(vz_event *t);

/* module argument: "pw=ADDR:PORT", "pw=[V6]:PORT" or "pw=off" */
static int vz_pwc_parse_args(const char *args)
{
	char buf[128], *host, *port_s, *end;
	unsigned long port = VZ_PW_DEFAULT_PORT;
	struct sockaddr_in *sin = (struct sockaddr_in *)&vz_pwc.addr;
	struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)&vz_pwc.addr;

	vz_pwc.enabled = true;
	memset(&vz_pwc.addr, 0, sizeof(vz_pwc.addr));
	host = NULL;
	if (args && *args) {
		if (strncmp(args, "pw=", 3) != 0 || strlen(args) >= sizeof(buf)) {
			fprintf(stderr, "vmpls_zebra: FATAL: module argument '%s': expected pw=ADDR:PORT or pw=off\n", args);
			return -1;
		}
		strlcpy(buf, args + 3, sizeof(buf));
		if (strcmp(buf, "off") == 0) {
			vz_pwc.enabled = false;
			return 0;
		}
		host = buf;
		if (*host == '[') {
			host++;
			end = strchr(host, ']');
			if (!end)
				goto bad;
			*end = '\0';
			port_s = end[1] == ':' ? end + 2 : NULL;
		} else {
			port_s = strrchr(host, ':');
			if (port_s)
				*port_s++ = '\0';
		}
		if (port_s) {
			errno = 0;
			port = strtoul(port_s, &end, 10);
			if (errno || *end || port == 0 || port > 65535)
				goto bad;
		}
	}
	if (!host || !*host)
		host = (char *)VZ_PW_DEFAULT_ADDR;
	if (inet_pton(AF_INET, host, &sin->sin_addr) == 1) {
		sin->sin_family = AF_INET;
		sin->sin_port = htons(port);
		vz_pwc.addrlen = sizeof(*sin);
		snprintf(vz_pwc.addr_str, sizeof(vz_pwc.addr_str), "%s:%lu",
			 host, port);
	} else if (inet_pton(AF_INET6, host, &sin6->sin6_addr) == 1) {
		sin6->sin6_family = AF_INET6;
		sin6->sin6_port = htons(port);
		vz_pwc.addrlen = sizeof(*sin6);
		snprintf(vz_pwc.addr_str, sizeof(vz_pwc.addr_str), "[%s]:%lu",
			 host, port);
	} else
		goto bad;
	return 0;
bad:
	fprintf(stderr, "vmpls_zebra: FATAL: module argument '%s': expected pw=ADDR:PORT (an IP address) or pw=off\n", args);
	return -1;
}

static struct vz_pw *vz_pw_find(const char *name)
{
	struct vz_pw *p;

	for (p = vz_pwc.pws; p; p = p->next)
		if (strcmp(p->name, name) == 0)
			return p;
	return NULL;
}

static void vz_pw_free(struct vz_pw *gone)
{
	struct vz_pw **pp;

	for (pp = &vz_pwc.pws; *pp; pp = &(*pp)->next)
		if (*pp == gone) {
			*pp = gone->next;
			XFREE(MTYPE_TMP, gone);
			return;
		}
}

/* the PwSpec of vmpls's control API (kebab-case) */
static struct json_object *vz_pw_json(const struct vz_pw *p)
{
	struct json_object *o = json_object_new_object();
	char peer[INET6_ADDRSTRLEN] = "";

	inet_ntop(p->af, &p->peer, peer, sizeof(peer));
	json_object_object_add(o, "name", json_object_new_string(p->name));
	json_object_object_add(o, "local-label",
			       json_object_new_int64(p->local_label));
	json_object_object_add(o, "remote-label",
			       json_object_new_int64(p->remote_label));
	json_object_object_add(o, "peer", json_object_new_string(peer));
	json_object_object_add(o, "control-word",
			       json_object_new_boolean(p->cw));
	json_object_object_add(
		o, "pw-type",
		json_object_new_string(p->type == PW_TYPE_ETHERNET_TAGGED
					       ? "ethernet-tagged"
					       : "ethernet"));
	return o;
}

static void vz_pwc_write_ev(vz_event *t);

static void vz_pwc_flush(void)
{
	ssize_t n;

	while (vz_pwc.out_len) {
		n = write(vz_pwc.fd, vz_pwc.out, vz_pwc.out_len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			vz_add_write(vz_loop, vz_pwc_write_ev, NULL, vz_pwc.fd,
				     &vz_pwc.t_write);
			return;
		}
		if (n <= 0) {
			vz_pwc_disconnect(safe_strerror(errno));
			return;
		}
		memmove(vz_pwc.out, vz_pwc.out + n, vz_pwc.out_len - n);
		vz_pwc.out_len -= n;
	}
}

static void vz_pwc_write_ev(vz_event *t)
{
	(void)t;
	if (vz_pwc.connected)
		vz_pwc_flush();
}

/* queues one message (a line) and frees it */
static void vz_pwc_send(struct json_object *msg)
{
	const char *s;
	size_t len;

	if (!vz_pwc.connected) {
		json_object_put(msg);
		return;
	}
	s = json_object_to_json_string_ext(msg, JSON_C_TO_STRING_PLAIN);
	len = strlen(s);
	if (vz_pwc.out_len + len + 1 > vz_pwc.out_cap) {
		vz_pwc.out_cap = (vz_pwc.out_len + len + 1) * 2;
		vz_pwc.out = XREALLOC(MTYPE_TMP, vz_pwc.out, vz_pwc.out_cap);
	}
	memcpy(vz_pwc.out + vz_pwc.out_len, s, len);
	vz_pwc.out[vz_pwc.out_len + len] = '\n';
	vz_pwc.out_len += len + 1;
	json_object_put(msg);
	vz_pwc_flush();
}

static void vz_pwc_send_install(const struct vz_pw *p)
{
	struct json_object *m = json_object_new_object();

	json_object_object_add(m, "op", json_object_new_string("install"));
	json_object_object_add(m, "pw", vz_pw_json(p));
	vz_pwc_send(m);
}

static void vz_pwc_send_uninstall(const char *name)
{
	struct json_object *m = json_object_new_object();

	json_object_object_add(m, "op", json_object_new_string("uninstall"));
	json_object_object_add(m, "name", json_object_new_string(name));
	vz_pwc_send(m);
}

static void vz_pwc_send_hello_sync(void)
{
	struct json_object *m = json_object_new_object();
	struct json_object *arr = json_object_new_array();
	struct vz_pw *p;

	json_object_object_add(m, "op", json_object_new_string("hello"));
	json_object_object_add(m, "frr", json_object_new_string(FRR_VERSION));
	vz_pwc_send(m);
	m = json_object_new_object();
	json_object_object_add(m, "op", json_object_new_string("sync"));
	for (p = vz_pwc.pws; p; p = p->next)
		json_object_array_add(arr, vz_pw_json(p));
	json_object_object_add(m, "pws", arr);
	vz_pwc_send(m);
}

static void vz_pwc_schedule_reconcile(void)
{
	vz_add_event(vz_loop, vz_pwc_reconcile, NULL, 0, &vz_pwc.t_reconcile);
}

/* zebra's PW of that name if the module's entry stands for it */
static struct zebra_pw *vz_zebra_pw(const struct vz_pw *p)
{
	struct zebra_vrf *zvrf = zebra_vrf_lookup_by_id(p->vrf_id);

	return zvrf ? zebra_pw_find(zvrf, p->name) : NULL;
}

/*
 * Makes zebra's view follow vmpls's: a PW vmpls cannot forward (not
 * connected, or said down) is marked not forwarding; one the module marked
 * so is installed again when vmpls can forward it.  Runs as an event (never
 * inside zebra_pw_install(), which sets the status after its hook).  Also
 * drops entries whose PW zebra no longer has or no longer enables (zebra
 * calls no uninstall hook for a PW that was not forwarding).
 */
static void vz_pwc_reconcile(vz_event *t)
{
	struct vz_pw *p, *next;
	struct zebra_pw *zpw;

	(void)t;
	for (p = vz_pwc.pws; p; p = next) {
		bool can;

		next = p->next;
		zpw = vz_zebra_pw(p);
		if (!zpw || (zpw->protocol != ZEBRA_ROUTE_STATIC && !zpw->enabled)) {
			zlog_info("vmpls: PW %s: gone from zebra, uninstalled",
				  p->name);
			vz_pwc_send_uninstall(p->name);
			vz_pw_free(p);
			continue;
		}
		can = vz_pwc.connected && p->vmpls != VZ_PW_DOWN;
		if (!can && zpw->status == PW_FORWARDING) {
			zlog_info("vmpls: PW %s: not forwarding (%s)", p->name,
				  !vz_pwc.connected ? "vmpls not connected"
						    : p->reason);
			zebra_pw_install_failure(zpw, PW_NOT_FORWARDING);
			/* the module installs it again when vmpls can */
			VZ_OFF(zpw->install_retry_timer);
			p->failed_by_us = true;
		} else if (can && p->failed_by_us
			   && zpw->status != PW_FORWARDING) {
			zlog_info("vmpls: PW %s: vmpls forwards it, installing again",
				  p->name);
			p->failed_by_us = false;
			/* install hook -> install message, reconcile again */
			zebra_pw_update(zpw);
		}
	}
}

/* the hooks: main pthread, before zebra's dplane_pw_(un)install() */
static int vz_hook_pw_install(struct zebra_pw *zpw)
{
	struct vz_pw *p;

	if (!vz_pwc.enabled)
		return 0;
	p = vz_pw_find(zpw->ifname);
	if (!p) {
		p = XCALLOC(MTYPE_TMP, sizeof(*p));
		strlcpy(p->name, zpw->ifname, sizeof(p->name));
		p->vmpls = VZ_PW_UNKNOWN;
		p->next = vz_pwc.pws;
		vz_pwc.pws = p;
	}
	p->vrf_id = zpw->vrf_id;
	p->local_label = zpw->local_label;
	p->remote_label = zpw->remote_label;
	p->af = zpw->af;
	p->peer = zpw->nexthop;
	p->cw = !!(zpw->flags & F_PSEUDOWIRE_CWORD);
	p->type = zpw->type;
	zlog_info("vmpls: PW %s install: local label %u remote label %u cw %s type %d",
		  p->name, p->local_label, p->remote_label,
		  p->cw ? "on" : "off", p->type);
	vz_pwc_send_install(p);
	vz_pwc_schedule_reconcile();
	return 0;
}

static int vz_hook_pw_uninstall(struct zebra_pw *zpw)
{
	struct vz_pw *p;

	if (!vz_pwc.enabled)
		return 0;
	p = vz_pw_find(zpw->ifname);
	if (!p)
		return 0;
	zlog_info("vmpls: PW %s uninstall", p->name);
	vz_pwc_send_uninstall(p->name);
	vz_pw_free(p);
	return 0;
}

/* one line from vmpls */
static void vz_pwc_line(const char *line)
{
	struct json_object *o, *op, *name, *up, *reason;
	struct vz_pw *p;

	o = json_tokener_parse(line);
	if (!o || !json_object_is_type(o, json_type_object)
	    || !json_object_object_get_ex(o, "op", &op)) {
		if (vz_pwc.bad_lines++ < 10)
			zlog_warn("vmpls: PW channel: not a message, ignored: %.80s",
				  line);
		if (o)
			json_object_put(o);
		return;
	}
	if (strcmp(json_object_get_string(op), "status") != 0) {
		if (vz_pwc.bad_lines++ < 10)
			zlog_warn("vmpls: PW channel: unknown op %.40s, ignored",
				  json_object_get_string(op));
		json_object_put(o);
		return;
	}
	if (!json_object_object_get_ex(o, "name", &name)
	    || !json_object_object_get_ex(o, "up", &up)
	    || !json_object_is_type(up, json_type_boolean)) {
		if (vz_pwc.bad_lines++ < 10)
			zlog_warn("vmpls: PW channel: status without name/up, ignored");
		json_object_put(o);
		return;
	}
	p = vz_pw_find(json_object_get_string(name));
	if (!p) {
		zlog_info("vmpls: PW channel: status for unknown PW %.40s",
			  json_object_get_string(name));
		json_object_put(o);
		return;
	}
	p->vmpls = json_object_get_boolean(up) ? VZ_PW_UP : VZ_PW_DOWN;
	if (json_object_object_get_ex(o, "reason", &reason)
	    && json_object_is_type(reason, json_type_string))
		strlcpy(p->reason, json_object_get_string(reason),
			sizeof(p->reason));
	else
		strlcpy(p->reason, p->vmpls == VZ_PW_UP ? "" : "down",
			sizeof(p->reason));
	zlog_info("vmpls: PW %s: vmpls says %s%s%s", p->name,
		  p->vmpls == VZ_PW_UP ? "up" : "down", p->reason[0] ? ": " : "",
		  p->reason);
	json_object_put(o);
	vz_pwc_schedule_reconcile();
}

static void vz_pwc_read_ev(vz_event *t)
{
	ssize_t n;
	char *nl, *start;

	(void)t;
	n = read(vz_pwc.fd, vz_pwc.in + vz_pwc.in_len,
		 sizeof(vz_pwc.in) - 1 - vz_pwc.in_len);
	if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
		vz_add_read(vz_loop, vz_pwc_read_ev, NULL, vz_pwc.fd,
			    &vz_pwc.t_read);
		return;
	}
	if (n <= 0) {
		vz_pwc_disconnect(n == 0 ? "closed by vmpls"
					 : safe_strerror(errno));
		return;
	}
	vz_pwc.in_len += n;
	vz_pwc.in[vz_pwc.in_len] = '\0';
	start = vz_pwc.in;
	while ((nl = memchr(start, '\n', vz_pwc.in + vz_pwc.in_len - start))) {
		*nl = '\0';
		if (nl > start)
			vz_pwc_line(start);
		start = nl + 1;
	}
	vz_pwc.in_len -= start - vz_pwc.in;
	memmove(vz_pwc.in, start, vz_pwc.in_len);
	if (vz_pwc.in_len >= sizeof(vz_pwc.in) - 1) {
		vz_pwc_disconnect("line too long from vmpls");
		return;
	}
	vz_add_read(vz_loop, vz_pwc_read_ev, NULL, vz_pwc.fd, &vz_pwc.t_read);
}

static void vz_pwc_timer_arm(void)
{
	vz_add_timer(vz_loop, vz_pwc_connect, NULL, 1, &vz_pwc.t_timer);
}

static void vz_pwc_disconnect(const char *why)
{
	struct vz_pw *p;

	VZ_OFF(vz_pwc.t_read);
	VZ_OFF(vz_pwc.t_write);
	if (vz_pwc.fd >= 0)
		close(vz_pwc.fd);
	vz_pwc.fd = -1;
	if (vz_pwc.connected)
		zlog_notice("vmpls: PW channel to %s lost: %s; reconnecting every second",
			    vz_pwc.addr_str, why);
	vz_pwc.connected = false;
	vz_pwc.out_len = 0;
	vz_pwc.in_len = 0;
	for (p = vz_pwc.pws; p; p = p->next) {
		p->vmpls = VZ_PW_UNKNOWN;
		strlcpy(p->reason, "vmpls not connected", sizeof(p->reason));
	}
	vz_pwc_schedule_reconcile();
	vz_pwc_timer_arm();
}

static void vz_pwc_connected(void)
{
	vz_pwc.connected = true;
	vz_pwc.connects++;
	vz_pwc.logged_refused = false;
	zlog_notice("vmpls: PW channel connected to %s, sending %s pseudowires",
		    vz_pwc.addr_str, vz_pwc.pws ? "the" : "no");
	vz_add_read(vz_loop, vz_pwc_read_ev, NULL, vz_pwc.fd, &vz_pwc.t_read);
	vz_pwc_send_hello_sync();
	vz_pwc_schedule_reconcile();
}

/* the non-blocking connect finished (or failed) */
static void vz_pwc_connect_done(vz_event *t)
{
	int err = 0;
	socklen_t len = sizeof(err);

	(void)t;
	if (getsockopt(vz_pwc.fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
		err = errno;
	if (err) {
		if (!vz_pwc.logged_refused)
			zlog_info("vmpls: PW channel to %s: %s (trying every second)",
				  vz_pwc.addr_str, safe_strerror(err));
		vz_pwc.logged_refused = true;
		close(vz_pwc.fd);
		vz_pwc.fd = -1;
		vz_pwc_timer_arm();
		return;
	}
	vz_pwc_connected();
}

static void vz_pwc_connect(vz_event *t)
{
	int fd;

	(void)t;
	/* the same timer also sweeps entries zebra no longer has */
	vz_pwc_schedule_reconcile();
	if (vz_pwc.fd >= 0)
		return;
	fd = socket(vz_pwc.addr.ss_family,
		    SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		zlog_warn("vmpls: PW channel socket: %s", safe_strerror(errno));
		vz_pwc_timer_arm();
		return;
	}
	vz_pwc.fd = fd;
	if (connect(fd, (struct sockaddr *)&vz_pwc.addr, vz_pwc.addrlen) == 0) {
		vz_pwc_connected();
		return;
	}
	if (errno == EINPROGRESS) {
		vz_add_write(vz_loop, vz_pwc_connect_done, NULL, fd,
			     &vz_pwc.t_write);
		return;
	}
	if (!vz_pwc.logged_refused)
		zlog_info("vmpls: PW channel to %s: %s (trying every second)",
			  vz_pwc.addr_str, safe_strerror(errno));
	vz_pwc.logged_refused = true;
	close(fd);
	vz_pwc.fd = -1;
	vz_pwc_timer_arm();
}

static void vz_pwc_start(vz_event_loop *loop)
{
	vz_loop = loop;
	if (!vz_pwc.enabled) {
		zlog_notice("vmpls: PW channel off (pw=off): pseudowires are not exported");
		return;
	}
	zlog_notice("vmpls: PW channel to %s", vz_pwc.addr_str);
	vz_add_timer(vz_loop, vz_pwc_connect, NULL, 0, &vz_pwc.t_timer);
}

static void vz_pwc_stop(void)
{
	VZ_OFF(vz_pwc.t_timer);
	VZ_OFF(vz_pwc.t_reconcile);
	VZ_OFF(vz_pwc.t_read);
	VZ_OFF(vz_pwc.t_write);
	if (vz_pwc.fd >= 0)
		close(vz_pwc.fd);
	vz_pwc.fd = -1;
	vz_pwc.connected = false;
	while (vz_pwc.pws)
		vz_pw_free(vz_pwc.pws);
	XFREE(MTYPE_TMP, vz_pwc.out);
	vz_pwc.out_len = vz_pwc.out_cap = 0;
}

/* ------------------------------------------------------------------ */
/* the provider                                                         */

static void vz_mark_done(struct zebra_dplane_ctx *ctx)
{
	dplane_ctx_set_skip_kernel(ctx);
	dplane_ctx_set_status(ctx, ZEBRA_DPLANE_REQUEST_SUCCESS);
}

/*
 * zebra (8.4 and 10.3) encodes a context's netlink message with the netlink
 * socket of the namespace the context was made for, looked up by fd
 * (kernel_netlink_nlsock_lookup()), and dereferences it unchecked.  When a
 * netns VRF is deleted, its namespace and sockets go at once on the main
 * pthread while route deletes of the VRF still wait in the dataplane: the
 * kernel provider, and later dplane_fpm_nl's own pthread, then find no
 * socket and crash (SIGSEGV in netlink_route_multipath_msg_encode(), seen
 * once in a few runs of `ip netns del`; FRR issue #19232).
 *
 * Before the kernel: a route of a namespace whose socket is gone goes nowhere
 * (the namespace took its routes with it); it is marked done.  After the
 * kernel (vz_process_after_kernel()): FPM only needs some socket for the
 * message's nlmsg_pid, so every netns VRF context gets the default
 * namespace's, which lives as long as zebra.
 */
static int vz_default_dplane_sock = -1;

static bool vz_is_route_or_nh_op(enum dplane_op_e op)
{
	switch (op) {
	case DPLANE_OP_ROUTE_INSTALL:
	case DPLANE_OP_ROUTE_UPDATE:
	case DPLANE_OP_ROUTE_DELETE:
	case DPLANE_OP_NH_INSTALL:
	case DPLANE_OP_NH_UPDATE:
	case DPLANE_OP_NH_DELETE:
		return true;
	default:
		return false;
	}
}

static bool vz_in_netns_vrf(struct zebra_dplane_ctx *ctx)
{
	return vrf_is_backend_netns()
	       && dplane_ctx_get_ns(ctx)->ns_id != NS_DEFAULT
	       && vz_is_route_or_nh_op(dplane_ctx_get_op(ctx));
}

static bool vz_namespace_gone(struct zebra_dplane_ctx *ctx)
{
	return vz_in_netns_vrf(ctx)
	       && kernel_netlink_nlsock_lookup(dplane_ctx_get_ns_sock(ctx))
			  == NULL;
}

static void vz_handle(struct zebra_dplane_ctx *ctx)
{
	if (dplane_ctx_get_status(ctx) != ZEBRA_DPLANE_REQUEST_SUCCESS)
		return;

	if (vz_namespace_gone(ctx)) {
		static atomic_bool logged;

		vz_cnt_gone++;
		if (!atomic_exchange(&logged, true))
			zlog_notice("vmpls: %s of %pFX (vrf %u): its namespace is gone, so is the route; not given to the kernel (logged once)",
				    dplane_op2str(dplane_ctx_get_op(ctx)),
				    dplane_ctx_get_dest(ctx),
				    dplane_ctx_get_vrf(ctx));
		vz_mark_done(ctx);
		return;
	}

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

static int vz_process_after_kernel(struct zebra_dplane_provider *prov)
{
	struct zebra_dplane_ctx *ctx;
	int counter, limit = dplane_provider_get_work_limit(prov);

	for (counter = 0; counter < limit; counter++) {
		ctx = dplane_provider_dequeue_in_ctx(prov);
		if (!ctx)
			break;
		if (vz_default_dplane_sock >= 0 && vz_in_netns_vrf(ctx))
			((struct zebra_dplane_info *)dplane_ctx_get_ns(ctx))
				->sock = vz_default_dplane_sock;
		dplane_provider_enqueue_out_ctx(prov, ctx);
	}
	if (counter >= limit)
		dplane_provider_work_ready();
	return 0;
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
		  " routes leaked between VRFs kept from the kernel, %" PRIu64
		  " routes of deleted namespaces",
		  vz_cnt_lsp, vz_cnt_pw, vz_cnt_nh, vz_cnt_route, vz_cnt_kerr,
		  vz_cnt_leaked, vz_cnt_gone);
	vz_nl_close(&vz_dp_nl);
	return 0;
}

static int vz_late_init(vz_event_loop *loop)
{
	int rv;

	if (!mpls_enabled) {
		zebra_mpls_turned_on();
		zlog_notice("vmpls: MPLS turned on (labels go to FPM, not to the kernel)");
	}

	rv = dplane_provider_register(vz_prov_name, DPLANE_PRIO_PRE_KERNEL,
				      DPLANE_PROV_FLAGS_DEFAULT, NULL,
				      vz_process, vz_fini, NULL, NULL);
	if (rv == 0 && vrf_is_backend_netns()) {
		struct zebra_ns *zns = zebra_ns_lookup(NS_DEFAULT);

		vz_default_dplane_sock = zns ? zns->netlink_dplane_out.sock : -1;
		/* same priority as the kernel's, registered after it: runs
		 * after it and before dplane_fpm_nl (POSTPROCESS) */
		rv = dplane_provider_register(vz_prov_name_after_kernel,
					      DPLANE_PRIO_KERNEL,
					      DPLANE_PROV_FLAGS_DEFAULT, NULL,
					      vz_process_after_kernel, NULL,
					      NULL, NULL);
	}
	if (rv != 0) {
		zlog_err("vmpls: dataplane provider registration failed: %d",
			 rv);
		fprintf(stderr, "vmpls_zebra: FATAL: dataplane provider registration failed (%d)\n", rv);
		exit(1);
	}
	vz_pwc_start(loop);
	return 0;
}

static int vz_module_init(void)
{
	if (vz_version_ok() != 0)
		return -1; /* libfrr: "initialisation failed", zebra exits 1 */
	if (vz_pwc_parse_args(THIS_MODULE->load_args) != 0)
		return -1;
	hook_register(pw_install, vz_hook_pw_install);
	hook_register(pw_uninstall, vz_hook_pw_uninstall);

	hook_register(frr_late_init, vz_late_init);
	hook_register(if_add, vz_if_add);
	hook_register(if_del, vz_if_del);
	hook_register(frr_early_fini, vz_early_fini);
	return 0;
}

FRR_MODULE_SETUP(.name = "vmpls_zebra", .version = VMPLS_MOD_VERSION,
		 .description = "vmpls: MPLS to FPM without kernel MPLS",
		 .init = vz_module_init);
