/* tk_netns — hosts in network namespaces on one software wire, for tests.
 *
 * Owns:    up to TK_NETNS_MAX network namespaces, each with a TAP device
 *          (address 10.SUBNET.0.K+1/24, up, lo up), and a hub process
 *          forked by the test that reads every frame a namespace sends and
 *          writes it to every other namespace's TAP after a fixed delay,
 *          dropping each copy with a given probability (xorshift, fixed
 *          seed).  The hub forwards every frame, broadcasts included: the
 *          namespaces are hosts on one LAN (a bridge with delay and loss,
 *          built from parts because the kernels this runs on may lack
 *          netem or modules).
 * Exposes: tk_netns_why_not, tk_netns_up, tk_netns_name, tk_netns_ip,
 *          tk_netns_down.
 * Callers: tests/test_node_netns.c, tests/test_node_lan.c.
 *
 * Needs root, /dev/net/tun and `ip netns`; tk_netns_why_not says what is
 * missing (the caller skips with that message).  TAP names carry the pid,
 * so tests running side by side do not collide.
 */
#ifndef TK_NETNS_H
#define TK_NETNS_H

#include <stdint.h>

#define TK_NETNS_MAX 8

/* NULL when namespaces can be made here, else why not (static string). */
const char *tk_netns_why_not(void);

/* n namespaces on subnet 10.SUBNET.0.0/24 (host k at 10.SUBNET.0.K+1) and
 * the hub (one-way delay_ns, loss in [0,1)).  0, or -1 with a line on
 * stderr (call tk_netns_down in any case). */
int tk_netns_up(int n, int subnet, uint64_t delay_ns, double loss);

/* Name of namespace k (for `ip netns exec NAME ...`); borrowed. */
const char *tk_netns_name(int k);
/* Path of the `ip` command (set by tk_netns_why_not). */
const char *tk_netns_ip(void);

/* Kills the hub, deletes the namespaces and closes the TAPs.  Safe to
 * call twice or after a failed tk_netns_up. */
void tk_netns_down(void);

#endif
