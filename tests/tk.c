/* tk — see tk.h. */
#include "tests/tk.h"

#include "gossip/gossip_defaults.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ftw.h>
#include <libgen.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    pid_t pid;
    int   status; /* valid when done */
    int   done;
} s_proc;

static s_proc s_tab[TK_MAXPROC];
static int    s_n;

double tk_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int tk_quick(void)
{
    const char *q = getenv("LPGOSSIP_QUICK");
    return q && q[0] && strcmp(q, "0") != 0;
}

double tk_time_scale(void)
{
    const char *e = getenv("LPGOSSIP_TEST_TIME_SCALE");
    char *end;
    double f = e ? strtod(e, &end) : 1.0;
    return e && end != e && *end == '\0' && f >= 1.0 && f <= 1000.0 ? f : 1.0;
}

const char *tk_bin(void)
{
    static char bin[1100];
    const char *env = getenv("LPGOSSIP_BIN");
    if (env && env[0]) {
        snprintf(bin, sizeof bin, "%s", env);
    } else {
        char exe[1024];
        ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
        if (n <= 0) {
            fprintf(stderr, "tk_bin: cannot read /proc/self/exe\n");
            return NULL;
        }
        exe[n] = '\0';
        snprintf(bin, sizeof bin, "%s/../lpgossip", dirname(exe));
    }
    if (access(bin, X_OK) != 0) {
        fprintf(stderr, "tk_bin: %s is not an executable: build it first (make all, or set "
                "LPGOSSIP_BIN)\n", bin);
        return NULL;
    }
    return bin;
}

const char *tk_bin_cmd(void)
{
    static char cmd[1400];
    const char *bin = tk_bin(), *wrap = getenv("LPGOSSIP_TEST_EXEC");
    if (!bin)
        return NULL;
    snprintf(cmd, sizeof cmd, "%s%s%s", wrap && wrap[0] ? wrap : "", wrap && wrap[0] ? " " : "",
             bin);
    return cmd;
}

/* The low end of the kernel's ephemeral range (32768 when unreadable). */
static int s_ephemeral_low(void)
{
    int lo = 32768, hi = 0;
    FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");
    if (f) {
        if (fscanf(f, "%d %d", &lo, &hi) != 2)
            lo = 32768;
        fclose(f);
    }
    return lo;
}

static int s_port_free(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return 0;
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons((uint16_t)port);
    int ok = bind(fd, (struct sockaddr *)&a, sizeof a) == 0;
    close(fd);
    return ok;
}

/* Ports come from below the ephemeral range, in turn from a start that
 * differs per process: a port the kernel picked (bind to port 0) is
 * ephemeral, and the kernel may hand it out again as the local end of some
 * process's outgoing connection (a node connecting to its neighbours)
 * before the node it was meant for binds it. */
int tk_free_port(void)
{
    static int next;
    int hi = s_ephemeral_low(), lo = hi > 12000 ? hi - 10000 : 1024;
    if (hi - lo < 100)
        return -1;
    if (!next)
        next = lo + (int)(((unsigned)getpid() * 2654435761u ^ (unsigned)time(NULL)) %
                          (unsigned)(hi - lo));
    for (int tries = 0; tries < hi - lo; tries++) {
        int p = next;
        next = next + 1 < hi ? next + 1 : lo;
        if (s_port_free(p))
            return p;
    }
    return -1;
}

int tk_mkdtemp(char *dir, size_t len, const char *prefix)
{
    int n = snprintf(dir, len, "/tmp/lpgossip-%s-XXXXXX", prefix);
    if (n < 0 || (size_t)n >= len || !mkdtemp(dir)) {
        if (len)
            dir[0] = '\0';
        return -1;
    }
    return 0;
}

static int s_rm(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

int tk_rmtree(const char *dir)
{
    if (!dir || !dir[0])
        return 0;
    return nftw(dir, s_rm, 16, FTW_DEPTH | FTW_PHYS);
}

char *tk_slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    char *s = NULL;
    long n = -1;
    if (f && fseek(f, 0, SEEK_END) == 0)
        n = ftell(f);
    if (f && n >= 0 && fseek(f, 0, SEEK_SET) == 0 && (s = malloc((size_t)n + 1))) {
        size_t got = fread(s, 1, (size_t)n, f);
        s[got] = '\0';
    }
    if (f)
        fclose(f);
    if (!s && (s = malloc(1)))
        s[0] = '\0';
    if (!s)
        abort();
    return s;
}

void tk_last_line(const char *path, char *buf, size_t size)
{
    char *s = tk_slurp(path);
    size_t end = strlen(s);
    buf[0] = '\0';
    while (end > 0) {
        while (end > 0 && s[end - 1] == '\n')
            end--;
        size_t start = end;
        while (start > 0 && s[start - 1] != '\n')
            start--;
        if (end > start && strncmp(s + start, "kernels:", 8) != 0) {
            snprintf(buf, size, "%.*s", (int)(end - start), s + start);
            break;
        }
        end = start;
    }
    free(s);
}

void tk_dump(const char *path)
{
    char *s = tk_slurp(path);
    fprintf(stderr, "---- %s\n%s\n", path, s);
    free(s);
}

/* Where the lpgossip binary sits in the command bin args: 0 when bin is it,
 * k when a launcher runs it as args[k] (`ip netns exec NS BIN ...`,
 * `unshare --net BIN ...`), -1 when it is not run. */
static int s_own_at(const char *bin, char *const *args, const char *own)
{
    if (strcmp(bin, own) == 0)
        return 0;
    for (int k = 1; args[k]; k++)
        if (strcmp(args[k], own) == 0)
            return k;
    return -1;
}

/* An emulated node's --timeout (its bound on every wait), --peer-timeout
 * (the silence after which it declares a neighbour down) and --start-window
 * (how long it waits for every neighbour before starting with a quorum),
 * given or by default, stretch like the tests' own waits.  argv[a]: the
 * binary's first argument ("node" or not); argv[n + 1] on: free slots for
 * two flags; the values go to out. */
static void s_stretch_waits(char **argv, size_t a, size_t n, char out[3][32])
{
    static const char *const flags[3] = {"--timeout", "--peer-timeout", "--start-window"};
    static const double defaults[3] = {0, GOSSIP_DEF_PEER_FLOOR_S, GOSSIP_DEF_START_WINDOW_S};
    const double f = tk_time_scale();
    if (f <= 1 || a > n || strcmp(argv[a], "node") != 0)
        return;
    int given[3] = {0, 0, 0};
    for (size_t k = a + 1; k + 1 <= n; k++)
        for (int w = 0; w < 3; w++)
            if (strcmp(argv[k], flags[w]) == 0 && argv[k + 1]) {
                snprintf(out[w], sizeof out[w], "%g", f * atof(argv[k + 1]));
                argv[k + 1] = out[w];
                given[w] = 1;
            }
    size_t end = n + 1;
    for (int w = 1; w < 3; w++)
        if (!given[w]) {
            snprintf(out[w], sizeof out[w], "%g", f * defaults[w]);
            argv[end++] = (char *)flags[w];
            argv[end++] = out[w];
        }
}

/* execv(bin, args); the lpgossip binary through $LPGOSSIP_TEST_EXEC when
 * that is set (an emulator: scripts/cross runs the tests of another
 * architecture under qemu-user, whose children are that architecture's
 * binaries too), also where a launcher runs it. */
static void s_exec(const char *bin, char *const *args)
{
    const char *wrap = getenv("LPGOSSIP_TEST_EXEC"), *own = tk_bin();
    const int p = wrap && wrap[0] && own ? s_own_at(bin, args, own) : -1;
    if (p < 0) {
        execv(bin, args);
        return;
    }
    size_t n = 0;
    while (args[n])
        n++;
    /* argv: the launcher's words, the emulator, the binary, its arguments */
    char **argv = calloc(n + 7, sizeof *argv);
    if (!argv)
        return;
    for (int k = 0; k < p; k++)
        argv[k] = args[k];
    argv[p] = (char *)wrap;
    argv[p + 1] = (char *)own;
    for (size_t k = (size_t)p + 1; k <= n; k++) /* args[n] is the NULL */
        argv[k + 1] = args[k];
    char stretched[3][32];
    s_stretch_waits(argv, (size_t)p + 2, n, stretched);
    if (p == 0)
        execvp(wrap, argv);
    else
        execv(bin, argv);
}

pid_t tk_spawn(const char *bin, char *const *args, const char *logpath, int env_rank)
{
    if (!bin)
        bin = tk_bin();
    if (!bin || s_n >= TK_MAXPROC)
        return -1;
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        if (logpath) {
            int fd = open(logpath, O_WRONLY | O_CREAT | O_TRUNC, 0644);
            if (fd >= 0) {
                dup2(fd, 1);
                dup2(fd, 2);
                close(fd);
            }
        }
        setenv("OPENBLAS_NUM_THREADS", "1", 1);
        unsetenv("SLURM_PROCID");
        unsetenv("OMPI_COMM_WORLD_RANK");
        unsetenv("PMI_RANK");
        if (env_rank >= 0) {
            char r[16];
            snprintf(r, sizeof r, "%d", env_rank);
            setenv("LPGOSSIP_RANK", r, 1);
        } else {
            unsetenv("LPGOSSIP_RANK");
        }
        s_exec(bin, args);
        _exit(127);
    }
    s_tab[s_n++] = (s_proc){pid, 0, 0};
    return pid;
}

static s_proc *s_find(pid_t pid)
{
    for (int k = 0; k < s_n; k++)
        if (s_tab[k].pid == pid)
            return &s_tab[k];
    return NULL;
}

/* Reaps p without blocking; 1 when it has ended. */
static int s_poll(s_proc *p)
{
    if (p->done)
        return 1;
    int ws;
    if (waitpid(p->pid, &ws, WNOHANG) != p->pid)
        return 0;
    p->status = WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + (WIFSIGNALED(ws) ? WTERMSIG(ws) : 0);
    p->done = 1;
    return 1;
}

int tk_wait(pid_t pid, double seconds)
{
    s_proc *p = s_find(pid);
    if (!p)
        return -1;
    double deadline = tk_now() + seconds * tk_time_scale();
    while (!s_poll(p)) {
        if (tk_now() >= deadline)
            return -1;
        usleep(10000);
    }
    return p->status;
}

int tk_wait_all(double seconds, int *status)
{
    double deadline = tk_now() + seconds * tk_time_scale();
    for (;;) {
        int left = 0;
        for (int k = 0; k < s_n; k++)
            left += !s_poll(&s_tab[k]);
        if (left == 0 || tk_now() >= deadline)
            break;
        usleep(10000);
    }
    int all = 1;
    for (int k = 0; k < s_n; k++) {
        status[k] = s_tab[k].done ? s_tab[k].status : -1;
        all &= s_tab[k].done;
    }
    return all ? 0 : -1;
}

void tk_kill(pid_t pid, int sig)
{
    s_proc *p = s_find(pid);
    if (!p || p->done)
        return;
    kill(pid, sig);
    if (sig == SIGKILL) {
        int ws;
        waitpid(pid, &ws, 0);
        p->status = 128 + SIGKILL;
        p->done = 1;
    }
}

void tk_kill_all(void)
{
    for (int k = 0; k < s_n; k++)
        tk_kill(s_tab[k].pid, SIGKILL);
    s_n = 0;
}
