/* bench_watch — how soon `lpgossip watch` shows a change on 16 nodes:
 * 16 node HTTP servers (node_http over node_live) on loopback in this
 * process; every 0.37 s one of them publishes a new iteration; a watcher
 * polls all 16 /status as `lpgossip watch` does (parallel, --timeout 0.4,
 * --interval 0.5) and records when it first sees each change.  Prints the
 * poll time of 16 nodes and the delay from a change to the redraw that
 * shows it (goal: the largest under 1 s).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "nn/nn_core.h"
#include "node/node_http.h"
#include "node/node_live.h"
#include "node/node_watch.h"

#define N 16

static void s_sleep(double s)
{
    if (s > 0)
        nanosleep(&(struct timespec){(time_t)s, (long)(fmod(s, 1) * 1e9)}, NULL);
}

int main(void)
{
    static node_live_snap snap[N];
    node_live *live[N];
    node_http *http[N];
    node_watch_target t[N];
    char err[256], spec[32];
    for (int i = 0; i < N; i++) {
        snprintf(snap[i].node, sizeof snap[i].node, "n%d", i);
        snap[i].rank = i;
        snap[i].iterations = 1000;
        live[i] = node_live_new(&snap[i]);
        node_live_set_phase(live[i], NODE_LIVE_STEP);
        if (!(http[i] = node_http_new(live[i], "127.0.0.1", 0, err, sizeof err))) {
            fprintf(stderr, "bench_watch: %s\n", err);
            return 1;
        }
        snprintf(spec, sizeof spec, "127.0.0.1:%d", node_http_port(http[i]));
        if (node_watch_target_init(&t[i], spec, err, sizeof err) != 0)
            return 1;
    }
    const double interval = 0.5, timeout = 0.4, every = 0.37;
    double t0 = nn_now(), next_change = t0 + every, changed_at[N] = {0}, worst = 0, sum = 0;
    double poll_worst = 0;
    int changes = 0, seen = 0;
    char *body[N];
    while (nn_now() - t0 < 20) {
        double a = nn_now();
        while (a >= next_change) { /* the "training" side */
            int k = changes % N;
            snap[k].iteration++;
            node_live_publish(live[k], &snap[k], 1);
            if (!changed_at[k])
                changed_at[k] = next_change;
            changes++;
            next_change += every;
        }
        node_watch_poll(t, N, "/status", timeout, body);
        double drawn = nn_now();
        poll_worst = fmax(poll_worst, drawn - a);
        for (int i = 0; i < N; i++) {
            node_watch_update(&t[i], body[i]);
            free(body[i]);
            if (changed_at[i] && t[i].answered && t[i].iteration == snap[i].iteration) {
                double d = drawn - changed_at[i];
                worst = fmax(worst, d);
                sum += d;
                seen++;
                changed_at[i] = 0;
            }
        }
        s_sleep(interval - (nn_now() - a));
    }
    printf("watch on %d nodes (interval %.1f s, timeout %.1f s): poll of all %d at most %.1f ms; "
           "%d changes shown, delay mean %.0f ms, max %.0f ms (goal < 1000 ms)\n", N, interval,
           timeout, N, 1000 * poll_worst, seen, 1000 * sum / (seen ? seen : 1), 1000 * worst);
    for (int i = 0; i < N; i++) {
        node_http_destroy(&http[i]);
        node_live_destroy(&live[i]);
    }
    return 0;
}
