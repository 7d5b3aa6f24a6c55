/* topo_report — the report printed by `lpgossip topology FILE [--json]`.
 *
 * Owns:    topo_report: per graph of the schedule the edge count, in/out
 *          degrees, column and row sums, doubly stochastic or not, |lambda_2|
 *          and the spectral gap; for a schedule also the product over one
 *          period.  Text for people, one JSON object for scripts (the field
 *          list is in docs/topology.md).
 * Callers: node/node_cmd_topology.c, tests.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/nn_core.h"
#include "topology/topo.h"

typedef struct {
    int    edges;
    int   *in_deg, *out_deg;   /* n each */
    double col_err, row_err;   /* max |sum - 1| */
    double lambda2, gap;
} s_stats;

static int s_stats_of(const double *w, int n, s_stats *st)
{
    st->edges = 0;
    st->col_err = st->row_err = 0;
    st->in_deg = nn_xcalloc((size_t)n, sizeof(int));
    st->out_deg = nn_xcalloc((size_t)n, sizeof(int));
    for (int i = 0; i < n; i++) {
        double row = 0, col = 0;
        for (int j = 0; j < n; j++) {
            row += w[(size_t)i * n + j];
            col += w[(size_t)j * n + i];
            if (j != i && w[(size_t)i * n + j] > 0) {
                st->edges++;
                st->in_deg[i]++;
                st->out_deg[j]++;
            }
        }
        st->row_err = fmax(st->row_err, fabs(row - 1));
        st->col_err = fmax(st->col_err, fabs(col - 1));
    }
    st->lambda2 = topo_lambda2(w, n);
    st->gap = 1 - st->lambda2;
    return st->lambda2 < 0 ? -1 : 0;
}

static void s_stats_free(s_stats *st)
{
    free(st->in_deg);
    free(st->out_deg);
}

static void s_json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            fprintf(f, "\\%c", ch);
        else if (ch < 0x20)
            fprintf(f, "\\u%04x", ch);
        else
            fputc(ch, f);
    }
    fputc('"', f);
}

static void s_json_ints(FILE *f, const int *a, int n)
{
    fputc('[', f);
    for (int i = 0; i < n; i++)
        fprintf(f, "%s%d", i ? "," : "", a[i]);
    fputc(']', f);
}

/* "every node 3" or "1..7 (n0 7, n1 1, ...)" */
static void s_text_degrees(FILE *f, const topo *t, const int *d)
{
    int lo = d[0], hi = d[0];
    for (int i = 1; i < t->n; i++) {
        lo = d[i] < lo ? d[i] : lo;
        hi = d[i] > hi ? d[i] : hi;
    }
    if (lo == hi) {
        fprintf(f, "%d (every node)", lo);
        return;
    }
    fprintf(f, "%d..%d (", lo, hi);
    for (int i = 0; i < t->n && i < 24; i++)
        fprintf(f, "%s%s %d", i ? ", " : "", t->nodes[i].id, d[i]);
    fprintf(f, "%s)", t->n > 24 ? ", ..." : "");
}

/* The product of the graphs over one period (a schedule of p > 1 graphs). */
typedef struct {
    double l2, gap;     /* |lambda_2| and spectral gap of the product */
    double per_iter;    /* 1 - |lambda_2|^(1/p) */
} s_period;

/* Fills *pp for a schedule (all zero for one graph); -1 if lambda_2 failed. */
static int s_period_of(const topo *t, s_period *pp)
{
    int n = t->n, p = t->nsched;
    memset(pp, 0, sizeof *pp);
    if (p <= 1)
        return 0;
    double *prod = nn_xmalloc((size_t)n * (size_t)n * sizeof *prod);
    topo_period_product(t, prod);
    pp->l2 = topo_lambda2(prod, n);
    free(prod);
    pp->gap = 1 - pp->l2;
    pp->per_iter = 1 - pow(fmax(pp->l2, 0.0), 1.0 / p);
    return pp->l2 < 0 ? -1 : 0;
}

/* One element of the JSON "graphs" array: graph s of n nodes. */
static void s_json_graph(FILE *f, const s_stats *st, int s, int n)
{
    fprintf(f, "%s{\"index\":%d,\"edges\":%d,\"in_degree\":", s ? "," : "", s, st->edges);
    s_json_ints(f, st->in_deg, n);
    fprintf(f, ",\"out_degree\":");
    s_json_ints(f, st->out_deg, n);
    fprintf(f,
            ",\"column_stochastic\":%s,\"max_column_error\":%.9g,\"row_stochastic\":%s,"
            "\"max_row_error\":%.9g,\"lambda2\":%.12g,\"spectral_gap\":%.12g}",
            st->col_err <= TOPO_SUM_TOL ? "true" : "false", st->col_err,
            st->row_err <= TOPO_SUM_TOL ? "true" : "false", st->row_err, st->lambda2, st->gap);
}

/* The report as one JSON object and a newline (fields: docs/topology.md). */
static void s_report_json(FILE *f, const topo *t, const s_stats *st, const s_period *pp,
                          int doubly)
{
    int n = t->n, p = t->nsched;
    fprintf(f, "{\"file\":");
    s_json_str(f, t->name);
    fprintf(f, ",\"description\":");
    s_json_str(f, t->description);
    fprintf(f, ",\"n\":%d,\"security\":\"%s\",\"discovery\":\"%s\",\"discovery_port\":%d,"
            "\"nodes\":[", n, t->security_curve ? "curve" : "none",
            t->discovery == TOPO_DISCOVERY_LAN ? "lan" : "none", t->discovery_port);
    for (int i = 0; i < n; i++) {
        fprintf(f, "%s{\"id\":", i ? "," : "");
        s_json_str(f, t->nodes[i].id);
        fprintf(f, ",\"endpoint\":");
        s_json_str(f, t->nodes[i].endpoint);
        fprintf(f, ",\"key\":");
        s_json_str(f, t->nodes[i].pubkey);
        fprintf(f, "}");
    }
    fprintf(f, "],\"period\":%d,\"graphs\":[", p);
    for (int s = 0; s < p; s++)
        s_json_graph(f, &st[s], s, n);
    fprintf(f, "],\"doubly_stochastic\":%s,\"push_sum_required\":%s,\"period_product\":",
            doubly ? "true" : "false", doubly ? "false" : "true");
    if (p > 1)
        fprintf(f, "{\"lambda2\":%.12g,\"spectral_gap\":%.12g,\"gap_per_iteration\":%.12g}", pp->l2,
                pp->gap, pp->per_iter);
    else
        fprintf(f, "null");
    fprintf(f, "}\n");
}

/* The text lines of graph s of a schedule of p graphs. */
static void s_text_graph(FILE *f, const topo *t, const s_stats *st, int s, int p)
{
    if (p == 1)
        fprintf(f, "graph       ");
    else
        fprintf(f, "graph %-5d ", s);
    fprintf(f, "%d edges\n            in-degree ", st->edges);
    s_text_degrees(f, t, st->in_deg);
    fprintf(f, "\n            out-degree ");
    s_text_degrees(f, t, st->out_deg);
    fprintf(f, "\n            columns sum to 1 (max error %.1e); rows %s (max error %.1e)\n",
            st->col_err, st->row_err <= TOPO_SUM_TOL ? "sum to 1" : "do not sum to 1", st->row_err);
    fprintf(f, "            %s\n", st->row_err <= TOPO_SUM_TOL ? "doubly stochastic" : "column stochastic only");
    fprintf(f, "            |lambda_2| %.9f   spectral gap %.9f\n", st->lambda2, st->gap);
}

/* The report as text for people: nodes, security, schedule, each graph. */
static void s_report_text(FILE *f, const topo *t, const s_stats *st, const s_period *pp,
                          int doubly)
{
    int n = t->n, p = t->nsched;
    int with_ep = 0, with_key = 0;
    for (int i = 0; i < n; i++) {
        with_ep += t->nodes[i].endpoint[0] != 0;
        with_key += t->nodes[i].pubkey[0] != 0;
    }
    fprintf(f, "topology    %s\n", t->name);
    if (t->description[0])
        fprintf(f, "about       %s\n", t->description);
    fprintf(f, "nodes       %d:", n);
    for (int i = 0; i < n && i < 16; i++)
        fprintf(f, " %s", t->nodes[i].id);
    fprintf(f, "%s\n", n > 16 ? " ..." : "");
    if (with_ep || with_key)
        for (int i = 0; i < n; i++)
            fprintf(f, "            %-12s %s%s%s\n", t->nodes[i].id,
                    t->nodes[i].endpoint[0]                  ? t->nodes[i].endpoint
                    : t->discovery == TOPO_DISCOVERY_LAN ? "(found by discovery)"
                                                         : "(endpoint from launcher)",
                    t->nodes[i].pubkey[0] ? "  key " : "", t->nodes[i].pubkey);
    fprintf(f, "security    %s\n", t->security_curve ? "curve (CURVE keys of every node)" : "none");
    if (t->discovery == TOPO_DISCOVERY_LAN)
        fprintf(f, "discovery   lan (UDP broadcast beacons on port %d)\n", t->discovery_port);
    if (p == 1)
        fprintf(f, "schedule    static (one graph)\n");
    else
        fprintf(f, "schedule    %d graphs in turn (iteration t uses graph t mod %d)\n", p, p);
    for (int s = 0; s < p; s++)
        s_text_graph(f, t, &st[s], s, p);
    if (p > 1)
        fprintf(f,
                "period      product of the %d graphs: |lambda_2| %.9f   spectral gap %.9f\n"
                "            (per iteration: 1 - |lambda_2|^(1/%d) = %.9f)\n",
                p, pp->l2, pp->gap, p, pp->per_iter);
    fprintf(f, "mixing      %s\n",
            doubly ? "doubly stochastic: every algorithm works; push-sum weights stay 1"
                   : "not doubly stochastic: needs push-sum (rows do not sum to 1)");
}

int topo_report(const topo *t, FILE *f, int json)
{
    int n = t->n, p = t->nsched, rc = 0;
    s_stats *st = nn_xcalloc((size_t)p, sizeof *st);
    for (int s = 0; s < p; s++)
        if (s_stats_of(t->sched[s].w, n, &st[s]) != 0)
            rc = -1;
    s_period pp;
    if (s_period_of(t, &pp) != 0)
        rc = -1;
    if (rc == 0) {
        int doubly = topo_is_doubly_stochastic(t);
        if (json)
            s_report_json(f, t, st, &pp, doubly);
        else
            s_report_text(f, t, st, &pp, doubly);
        if (ferror(f))
            rc = -1;
    }
    for (int s = 0; s < p; s++)
        s_stats_free(&st[s]);
    free(st);
    return rc;
}
