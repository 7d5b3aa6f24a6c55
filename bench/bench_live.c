/* bench_live — what --metrics-port costs the training thread, measured
 * apart from the noise of whole runs: the time of node_live_publish of a
 * full snapshot (64 neighbours) with nobody reading, and while a reader
 * thread copies and formats snapshots back to back (far more often than a
 * scrape every second); and the HTTP thread's formatting time per scrape
 * (/metrics + /status).  Prints each, and the publish cost as a fraction
 * of a 10 ms iteration (the cnn's are longer: an upper bound).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/nn_core.h"
#include "node/node_live.h"

static volatile int s_stop;

static void s_fill(node_live_snap *s)
{
    memset(s, 0, sizeof *s);
    snprintf(s->node, sizeof s->node, "n1");
    s->nnb = NODE_LIVE_MAX_NB;
    for (int k = 0; k < s->nnb; k++) {
        snprintf(s->nb[k].id, sizeof s->nb[k].id, "n%d", k);
        snprintf(s->nb[k].endpoint, sizeof s->nb[k].endpoint, "tcp://10.0.0.%d:5555", k);
        s->nb[k].staleness = (uint64_t)k;
    }
}

static void *s_reader(void *arg)
{
    node_live *l = arg;
    node_live_snap *s = nn_xmalloc(sizeof *s);
    while (!s_stop) {
        node_live_phase p;
        double ps;
        size_t len;
        node_live_read(l, s, &p, &ps);
        free(node_live_prometheus(s, &len));
    }
    free(s);
    return NULL;
}

static double s_publish(node_live *l, node_live_snap *s, int n, long *taken)
{
    double a = nn_now();
    for (int i = 0; i < n; i++) {
        s->iteration++;
        *taken += node_live_publish(l, s, 0);
    }
    return (nn_now() - a) / n;
}

int main(void)
{
    node_live_snap *s = nn_xmalloc(sizeof *s);
    s_fill(s);
    node_live *l = node_live_new(s);
    const int n = 200000;
    long taken = 0, taken2 = 0;
    double alone = s_publish(l, s, n, &taken);
    pthread_t th;
    pthread_create(&th, NULL, s_reader, l);
    double contended = s_publish(l, s, n, &taken2);
    s_stop = 1;
    pthread_join(th, NULL);
    double a = nn_now();
    size_t bytes = 0, len;
    for (int i = 0; i < 1000; i++) {
        char *m = node_live_prometheus(s, &len), *j = node_live_json(s, "training", 0, &len);
        bytes = strlen(m) + strlen(j);
        free(m);
        free(j);
    }
    double fmt = (nn_now() - a) / 1000;
    printf("snapshot %zu bytes; publish %.2f us alone, %.2f us against a reader formatting "
           "back to back (%.1f%% dropped, taken next time)\n", sizeof *s, 1e6 * alone,
           1e6 * contended, 100.0 * (double)(n - taken2) / n);
    printf("scrape (/metrics + /status, %zu bytes) formatted in %.1f us on the HTTP thread\n",
           bytes, 1e6 * fmt);
    printf("ratio publish/iteration for a 10 ms iteration: %.5f (goal: the whole overhead "
           "<= 0.01)\n", contended / 0.010);
    node_live_destroy(&l);
    free(s);
    return 0;
}
