/* tk_run — running `lpgossip node` processes and reading their models;
 * see tk_run.h. */
#include "tests/tk_run.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/tk.h"

#include "nn/nn_core.h"
#include "node/node_common.h"

int tk_dir_setup(char *dir, size_t len, const char *prefix)
{
    return tk_bin() && tk_mkdtemp(dir, len, prefix) == 0 ? 0 : -1;
}

void tk_dir_teardown(char *dir)
{
    tk_kill_all();
    if (getenv("TK_KEEP") && dir[0]) /* TK_KEEP=1: keep the logs to read */
        fprintf(stderr, "kept %s\n", dir);
    else
        tk_rmtree(dir);
    dir[0] = '\0';
}

int tk_topo_loopback(const char *path, int n, const char *graph, int *ports)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "tk_topo_loopback: cannot write %s\n", path);
        return -1;
    }
    fprintf(f, "description: test topology\nnodes:\n");
    for (int i = 0; i < n; i++) {
        int p = tk_free_port();
        if (p <= 0) {
            fprintf(stderr, "tk_topo_loopback: no free port for n%d\n", i);
            fclose(f);
            return -1;
        }
        if (ports)
            ports[i] = p;
        fprintf(f, "  - {id: n%d, endpoint: \"tcp://127.0.0.1:%d\"}\n", i, p);
    }
    fprintf(f, "%s", graph);
    return fclose(f) == 0 ? 0 : -1;
}

#define S_MAXARGS 64

pid_t tk_node(const char *topo, int rank, char *const *common, const char *extra,
              const char *log)
{
    char *args[S_MAXARGS], rk[16];
    int a = 0;
    snprintf(rk, sizeof rk, "%d", rank);
    args[a++] = "lpgossip";
    args[a++] = "node";
    args[a++] = "--topology";
    args[a++] = (char *)topo;
    args[a++] = "--rank";
    args[a++] = rk;
    for (int k = 0; common[k]; k++) {
        if (a >= S_MAXARGS - 2) {
            fprintf(stderr, "tk_node: more than %d arguments\n", S_MAXARGS - 2);
            return -1;
        }
        args[a++] = common[k];
    }
    if (extra)
        args[a++] = (char *)extra;
    args[a] = NULL;
    return tk_spawn(NULL, args, log, -1);
}

nn_model *tk_model_load(const char *path)
{
    char err[512];
    node_model_opts mo;
    if (node_model_opts_from_file(path, &mo, err, sizeof err) != 0) {
        fprintf(stderr, "tk_model_load: %s\n", err);
        return NULL;
    }
    nn_model *m = node_model_build(&mo, 1, 28, 28, 10, err, sizeof err);
    if (!m) {
        fprintf(stderr, "tk_model_load: %s\n", err);
        return NULL;
    }
    if (node_model_load(path, m, err, sizeof err) != 0) {
        fprintf(stderr, "tk_model_load: %s\n", err);
        nn_model_destroy(&m);
        return NULL;
    }
    return m;
}

double tk_model_spread(const char *dir, int n, double *dist)
{
    nn_model **m = nn_xcalloc((size_t)n, sizeof *m);
    double worst = -1;
    for (int k = 0; k < n; k++) {
        char p[700];
        snprintf(p, sizeof p, "%s/model-%d.safetensors", dir, k);
        if (!(m[k] = tk_model_load(p)))
            goto done;
    }
    size_t d = nn_model_params(m[0])->numel;
    double *avg = nn_xcalloc(d, sizeof(double)), norm = 0;
    for (int k = 0; k < n; k++)
        for (size_t e = 0; e < d; e++)
            avg[e] += nn_model_params(m[k])->data[e] / n;
    for (size_t e = 0; e < d; e++)
        norm += avg[e] * avg[e];
    worst = 0;
    for (int k = 0; k < n; k++) {
        double s = 0;
        for (size_t e = 0; e < d; e++) {
            double x = nn_model_params(m[k])->data[e] - avg[e];
            s += x * x;
        }
        double r = sqrt(s / norm);
        if (dist)
            dist[k] = r;
        worst = fmax(worst, r);
    }
    free(avg);
done:
    for (int k = 0; k < n; k++)
        nn_model_destroy(&m[k]);
    free(m);
    return worst;
}

int tk_cert_pubkey(const char *path, char out[41])
{
    const char *tag = "public-key = \"";
    char *txt = tk_slurp(path), *p = strstr(txt, tag);
    if (!p || strlen(p + strlen(tag)) < 40) {
        fprintf(stderr, "tk_cert_pubkey: no public key in %s\n", path);
        free(txt);
        return -1;
    }
    memcpy(out, p + strlen(tag), 40);
    out[40] = '\0';
    free(txt);
    return 0;
}

int tk_wait_log(const char *log, const char *what, double seconds)
{
    double t0 = nn_now();
    for (;;) {
        char *s = tk_slurp(log);
        int found = strstr(s, what) != NULL;
        free(s);
        if (found)
            return 1;
        if (nn_now() - t0 > seconds * tk_time_scale())
            return 0;
        usleep(50000);
    }
}
