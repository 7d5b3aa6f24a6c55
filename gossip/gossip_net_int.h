/* gossip_net_int — inside the gossip_net module only: the net object and
 * the calls its two files make to each other.
 *
 * Owns:    nothing; declares struct gossip_net, set up and torn down by
 *          gossip_net.c (sockets, neighbour tables, discovery), read and
 *          updated by gossip_net_recv.c as it receives (the current
 *          message, the connection bookkeeping, the counters).
 * Exposes: struct gossip_net, GOSSIP_NET_FD_MAX, gossip_net_zerr,
 *          gossip_net_dealer_connect.
 * Callers: gossip_net.c, gossip_net_recv.c.  Not for other files: they
 *          see gossip_net.h.
 */
#ifndef GOSSIP_NET_INT_H
#define GOSSIP_NET_INT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <czmq.h>
#include <zmq.h>

#include "gossip/gossip_net.h"

#define GOSSIP_NET_FD_MAX 4096 /* connections tracked by fd below this (see s_reap) */

struct gossip_net {
    const topo *t;
    int         rank, n;
    void       *ctx;
    int         shared_ctx;  /* CZMQ's context (CURVE): not ours to terminate */
    int         curve;
    zactor_t   *auth;        /* zauth (CURVE) */
    void       *monitor;     /* PAIR fed by the ROUTER's socket monitor */
    void       *router;
    int         nout;
    int        *out_ranks;  /* nout */
    void      **dealers;    /* nout, DEALER to out_ranks[k] */
    int        *out_pos;    /* n: index into out_ranks or -1 */
    char       *is_in;      /* n: 1 for in-neighbours (union over the schedule) */
    /* the ROUTER connection each in-neighbour's last message came on: its
     * fd and when that fd was accepted, and a count of changes */
    int        *conn_fd;    /* n, -1: none yet */
    double     *conn_open;  /* n */
    uint64_t   *conn_gen;   /* n */
    zmq_pollitem_t *items;  /* 3 + nout: router, dealers, monitor, discovery's beacon */
    gossip_disc *disc;      /* `discovery: lan`, else NULL */
    char      (*dealer_ep)[TOPO_ENDPOINT_MAX]; /* nout: where DEALER k is connected, or "" */
    double     *dealer_since; /* nout: when DEALER k was connected to dealer_ep[k] */
    double     *dealer_heard; /* nout: when DEALER k last got its peer's message */
    double      probe_s;      /* discovery_probe_ms */
    double      next_probe;
    int         rr;         /* round-robin start among ready sockets */
    zmq_msg_t   cur;        /* payload handed out by the last recv */
    int         have_cur;
    size_t      max_msg;
    FILE       *log;
    unsigned    logged[6];
    /* ROUTER connections (s_reap, gossip_net_recv.c): per fd below
     * GOSSIP_NET_FD_MAX, when we learnt it was accepted (0: not open or
     * looked at) and when it last delivered a message that was its own
     * (s_delivered) */
    double     *fd_open, *fd_delivered;
    double      router_empty; /* a poll that began then found the ROUTER empty */
    double      next_reap;
    int         silent_close_ms; /* cfg: a connection silent this long is closed */
    char        endpoint[TOPO_ENDPOINT_MAX];
    gossip_net_stats st;
};

/* A message "gossip_net: WHAT WHERE: <zmq_strerror>" into err; returns -1. */
int gossip_net_zerr(char *err, size_t errlen, const char *what, const char *where);

/* Connects DEALER k to ep (first disconnecting it from where it was): 0,
 * or -1 with a message naming both nodes and the endpoint. */
int gossip_net_dealer_connect(gossip_net *net, int k, const char *ep, char *err, size_t errlen);

#endif
