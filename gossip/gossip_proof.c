/* gossip_proof — ids on a plaintext port (gossip_link.h): a neighbour both
 * ways is heard over our ROUTER only once the connection under its id
 * proved it with our per-link token.
 *
 * Owns:    whether proofs are required; per neighbour (gossip_link_peer) the
 *          token, the proved connection, the held HELLO, rate-limit clocks.
 * Exposes: gossip_proof_unproven (the gate on our ROUTER), _router_trusted
 *          (may we answer over our ROUTER), _ask, _answer, _on_proof,
 *          gossip_link_set_prove/_token (harnesses).
 * Callers: gossip_recv (gate, LINK_REQ, LINK_PROOF), gossip_link (ctl over
 *          the ROUTER), gossip_member (HELLOs), gossip_join (STATE answers).
 */
#include "gossip/gossip_link_int.h"

#include <string.h>

#define S_LINK_EVERY   0.3   /* s between two LINK_REQ to the same peer */
#define S_LINK_ANSWER  0.05  /* s between two LINK_PROOF to the same peer */
#define S_LINK_LOG     20    /* unproven messages of a peer before it is logged */
#define S_LINK_UNSENT_LOG 5  /* unsent LINK_REQ/LINK_PROOF logged */

/* ---- ids on a plaintext port (gossip_link.h) ------------------------------ */

/* j's messages over our ROUTER need a proof of its id: a neighbour both
 * ways (our DEALER reaches the endpoint it is listed at), without CURVE
 * (which proves ids by the handshake). */
int gossip_proof_provable(const gossip_link *l, int j)
{
    return l->proof.prove && l->p[j].is_in && l->p[j].is_out;
}

/* l->ctl (a LINK_REQ or LINK_PROOF) to j over our DEALER; one the DEALER
 * does not take is counted, the first few after the start logged (before
 * it, a DEALER not connected yet is the rule). */
static void s_proof_send(gossip_link *l, int j, const char *what, double now)
{
    char err[512];
    int rc = gossip_net_try_send(l->net, j, l->ctl.data, l->ctl.len, err, sizeof err);
    if (rc > 0) {
        l->p[j].sent_dealer = now;
        return;
    }
    l->st.proofs_unsent++;
    if (l->running && l->proof.unsent_logged++ < S_LINK_UNSENT_LOG)
        gossip_link_log(l, "%s to %s (rank %d) not sent: %s", what, gossip_link_id(l, j), j,
                        rc < 0 ? err : "our connection to it takes nothing now (queue full or "
                                       "not connected)");
}

/* LINK_REQ with our token of the link to j over our DEALER (rate-limited):
 * j answers with a LINK_PROOF over its DEALER, which lands on our ROUTER
 * over j's own connection. */
void gossip_proof_ask(gossip_link *l, int j)
{
    gossip_link_peer *p = &l->p[j];
    double now = nn_now();
    if (!l->net || now - p->link_asked < S_LINK_EVERY)
        return;
    p->link_asked = now;
    gossip_msg_encode_link(GOSSIP_MSG_LINK_REQ, (uint32_t)l->rank, gossip_node_iter(l->g), l->fp,
                           p->token, &l->ctl);
    s_proof_send(l, j, "LINK_REQ", now);
}

/* LINK_REQ from j (over our ROUTER): its token back over our DEALER, which
 * we connected to where j is listed (rate-limited; a token from an impostor
 * under j's id goes to the real j, who refuses it). */
void gossip_proof_answer(gossip_link *l, int j, uint64_t token)
{
    gossip_link_peer *p = &l->p[j];
    double now = nn_now();
    if (!l->net || !p->is_out || !token || now - p->link_answered < S_LINK_ANSWER)
        return;
    p->link_answered = now;
    gossip_msg_encode_link(GOSSIP_MSG_LINK_PROOF, (uint32_t)l->rank, gossip_node_iter(l->g),
                           l->fp, token, &l->ctl);
    s_proof_send(l, j, "LINK_PROOF", now);
}

/* The connection under j's id on our ROUTER, now: gossip_net's count. */
static uint64_t s_conn(const gossip_link *l, int j)
{
    return l->net ? gossip_net_conn_gen(l->net, j) : 0;
}

/* Whatever goes to j over our ROUTER goes to the connection under j's id
 * there: only once it proved to be j's (a neighbour both ways), so that a
 * link an impostor cuts on one side is cut on both (no neighbour believes
 * its messages arrive where they are dropped). */
int gossip_proof_router_trusted(const gossip_link *l, int j)
{
    return !gossip_proof_provable(l, j) || (l->p[j].proved && l->p[j].proved_gen == s_conn(l, j));
}

/* A message of `kind` from j over our ROUTER: 1 when it must wait for the
 * proof of j's id (dropped and counted; a HELLO is held and handled once
 * the proof is in; a proof is asked for), 0 to handle it. */
int gossip_proof_unproven(gossip_link *l, int j, unsigned kind, uint64_t iter, const uint8_t *msg,
                      size_t len)
{
    gossip_link_peer *p = &l->p[j];
    if (!gossip_proof_provable(l, j) || kind == GOSSIP_MSG_LINK_REQ || kind == GOSSIP_MSG_LINK_PROOF)
        return 0;
    if (p->proved && p->proved_gen == s_conn(l, j))
        return 0;
    if (p->proved)
        gossip_link_log(l, "%s (rank %d) speaks over another connection to our port: it proves its id "
              "again", gossip_link_id(l, j), j);
    p->proved = 0;
    if (kind == GOSSIP_MSG_HELLO) {
        p->held_hello = 1;
        p->held_iter = iter;
        p->held_nonce = gossip_msg_hello_nonce(msg, len);
    }
    l->st.unproven++;
    if (++p->unproven == S_LINK_LOG)
        gossip_link_log(l, "%d messages under the id of %s (rank %d) over our ROUTER without the proof "
              "of its id (LINK_PROOF): dropped; whoever holds its id on our port is not the "
              "%s we reach at %s, or cannot answer", S_LINK_LOG, gossip_link_id(l, j), j, gossip_link_id(l, j),
              l->t->nodes[j].endpoint[0] ? l->t->nodes[j].endpoint : "its endpoint");
    gossip_proof_ask(l, j);
    return 1;
}

/* LINK_PROOF from j over our ROUTER: with our token, the connection under
 * j's id on our port is j's (the token went only to where j is listed). */
void gossip_proof_on_proof(gossip_link *l, int j, uint64_t token)
{
    gossip_link_peer *p = &l->p[j];
    if (!gossip_proof_provable(l, j))
        return;
    if (token != p->token) {
        gossip_recv_refuse(l, "LINK_PROOF under the id of %s (rank %d) with a wrong token: the connection "
                 "that holds its id on our port is not the %s we reach at its endpoint",
                 gossip_link_id(l, j), j, gossip_link_id(l, j));
        return;
    }
    if (p->proved && p->proved_gen == s_conn(l, j))
        return;
    p->proved = 1;
    p->proved_gen = s_conn(l, j);
    if (p->unproven >= S_LINK_LOG)
        gossip_link_log(l, "%s (rank %d) proved its id on our port (%llu messages dropped before)",
              gossip_link_id(l, j), j, (unsigned long long)p->unproven);
    if (p->held_hello) {
        p->held_hello = 0;
        gossip_member_on_hello(l, j, 1, p->held_iter, p->held_nonce);
    }
}

void gossip_link_set_prove(gossip_link *l, int on)
{
    l->proof.prove = on != 0;
}

uint64_t gossip_link_token(const gossip_link *l, int j)
{
    return l->p[j].token;
}
