/* gossip_defaults — every default value of lpgossip's settings, in one place.
 *
 * Owns:    nothing: named constants, one line of meaning each.
 * Exposes: GOSSIP_DEF_* (values) and GOSSIP_DEF_STR (a value as the text of
 *          a help line, so that --help shows what the code uses).
 * Callers: gossip_config_default (gossip_node.c), the transport's config
 *          defaults (gossip_link_config_default, gossip_net_config_default),
 *          node/node_opts.c (the command-line defaults and their --help).
 *
 * It lives in gossip/ because that is the lowest module with defaults of its
 * own: node/ sits above it and may read it, gossip/ could not read a header
 * of node/.  Defaults of the layers below (nn_sgd_defaults: momentum 0.9,
 * weight decay 1e-4, Nesterov) stay with their code, which knows nothing of
 * the layers above.  A value that a help text shows must be a plain
 * literal: GOSSIP_DEF_STR prints it as written.
 */
#ifndef GOSSIP_DEFAULTS_H
#define GOSSIP_DEFAULTS_H

#define GOSSIP_DEF_STR_(x) #x
/* The literal of a default as a string, e.g. "[" GOSSIP_DEF_STR(GOSSIP_DEF_EPOCHS) "]". */
#define GOSSIP_DEF_STR(x) GOSSIP_DEF_STR_(x)

/* ---- the gossip algorithm (gossip_config, gossip_node.h) ---------------- */

/* --algo of the commands: Choco-SGD (a gossip_algo, gossip_node.h) */
#define GOSSIP_DEF_ALGO        GOSSIP_CHOCO
/* gossip_config_default's algorithm: dpsgd, the one that needs no options */
#define GOSSIP_DEF_CONFIG_ALGO GOSSIP_DPSGD
#define GOSSIP_DEF_COMPRESSOR "identity" /* compressor spec: send x uncompressed */
#define GOSSIP_DEF_ETA        1          /* consensus step without a sparsifier */
#define GOSSIP_DEF_ETA_SPARSE 0.01       /* consensus step with a sparsifier (99% top-k) */
#define GOSSIP_DEF_PUSH_SUM   1          /* psi weights and de-biasing on */
#define GOSSIP_DEF_SEED       1          /* compressor RNG and initial weights, data order */
/* --staleness of `lpgossip node` when not given (with push-sum or choco; 0
 * otherwise); simulate's is GOSSIP_DEF_STALENESS_SIM.  Chosen from the
 * measurements in results/stale.md (results/README.md "Bounded staleness"). */
#define GOSSIP_DEF_STALENESS     2
#define GOSSIP_DEF_STALENESS_SIM 0 /* simulate: synchronous rounds */
#define GOSSIP_DEF_GOSSIP_EVERY  1 /* local SGD steps per gossip round */
#define GOSSIP_DEF_SKEW          0 /* non-IID skew of the data partition: IID */

/* ---- the transport: liveness, start, rounds (gossip_link_config) -------- */

#define GOSSIP_DEF_TIMEOUT_S      60   /* bound on every wait and on a silent neighbour */
#define GOSSIP_DEF_PEER_FLOOR_S   5    /* a silent neighbour is down after at least this */
#define GOSSIP_DEF_PEER_FACTOR    20   /* ... or after this many of its message periods */
#define GOSSIP_DEF_PING_EVERY_S   0.5  /* PING a neighbour we sent nothing for this long */
#define GOSSIP_DEF_LINK_SEED      1    /* RNG of the --debug-drop fault injection */
#define GOSSIP_DEF_MIN_NODES      2    /* start quorum: this node + answering neighbours */
#define GOSSIP_DEF_START_WINDOW_S 5    /* start after this when the quorum holds */
#define GOSSIP_DEF_FRESH_WAIT     0.25 /* staleness: wait this x the round time for fresh messages */
#define GOSSIP_FRESH_WAIT_IN_ONLY 12   /* ... this x that for an in-neighbour we do not send to */
#define GOSSIP_FRESH_STEP_LIKE    2.0  /* ... whose step time is at most this x ours */
#define GOSSIP_DEF_LATE_AFTER     1.0  /* staleness: a neighbour far behind that held a round up
                                          this x the round time is mixed late; 0: never */
#define GOSSIP_DEF_DEFER_UPDATES  1    /* staleness, choco: defer updates on a backed-up path */
#define GOSSIP_DEF_YIELD_PACE     1.15 /* staleness: a node that holds its neighbours up yields
                                          steps so they keep 1/this of their pace; 0: never */

/* ---- the transport: sockets (gossip_net_config) ------------------------- */

#define GOSSIP_DEF_SEND_TIMEOUT_MS      60000 /* a blocked send gives up after this (ZMQ_SNDTIMEO) */
#define GOSSIP_DEF_LINGER_MS            1000  /* unsent messages kept this long at close */
#define GOSSIP_DEF_HWM                  256   /* messages queued per peer (ZeroMQ high-water mark) */
/* push-sum with bounded staleness: a message to a peer whose connection is
 * backed up is kept (gossip_node_keep), not queued behind the others, so
 * each DEALER queues at most this many messages and this many bytes in the
 * kernel (docs/gossip.md "Kept shares") */
#define GOSSIP_DEF_PS_DEALER_HWM        1
#define GOSSIP_DEF_PS_DEALER_SNDBUF     65536
/* and their ZMTP heartbeat waits this long: its PING queues behind up to two
 * messages per connection (425 KB each for the cnn in q8: 7-14 s at
 * 1 Mbit/s on a link two connections share); the node's own silence limits
 * (--peer-timeout) still declare a dead peer down */
#define GOSSIP_DEF_PS_DEALER_HEARTBEAT_MS 30000
#define GOSSIP_DEF_HEARTBEAT_IVL_MS     1000  /* ZMTP heartbeat interval */
#define GOSSIP_DEF_HEARTBEAT_TIMEOUT_MS 10000 /* a peer silent this long is dropped */
#define GOSSIP_DEF_DISCOVERY_IVL_MS     1000  /* `discovery: lan`: beacon interval */
#define GOSSIP_DEF_DISCOVERY_PROBE_MS   3000  /* `discovery: lan`: an unanswering endpoint gives way after this */
/* a ROUTER connection that delivered no message this long is closed
 * (gossip_net); the node uses its peer floor where that is longer */
#define GOSSIP_DEF_SILENT_CLOSE_MS      2000

/* ---- the run (node/node_opts.c) ----------------------------------------- */

#define GOSSIP_DEF_EPOCHS        5    /* passes over the training set */
#define GOSSIP_DEF_BATCH         32   /* samples per local step */
#define GOSSIP_DEF_LR            0.05 /* base learning rate */
#define GOSSIP_DEF_WARMUP_EPOCHS 1    /* linear warm-up from lr/10 */
#define GOSSIP_DEF_LR_DECAY      0.1  /* learning-rate factor at each milestone */
#define GOSSIP_DEF_MILESTONE1    0.5  /* first milestone, as a fraction of the epochs */
#define GOSSIP_DEF_MILESTONE2    0.75 /* second milestone, as a fraction of the epochs */
/* --eval-subset: 1000 test samples (+-1 point of accuracy at 90%, a tenth of
 * a 10000-sample test set's cost per progress evaluation). */
#define GOSSIP_DEF_EVAL_SUBSET   1000
/* --grad-guard: a local step whose gradient norm is over 100x its running
 * level is refused (node_trainer.h; docs/node.md "Gradient-norm guard"). */
#define GOSSIP_DEF_GRAD_GUARD    100
#define GOSSIP_DEF_METRICS_BIND  "127.0.0.1" /* --metrics-port listens here only */
#define GOSSIP_DEF_DEBUG_SLOW    1.0  /* --debug-slow: full speed */

#endif
