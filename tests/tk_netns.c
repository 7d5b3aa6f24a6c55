/* tk_netns — see tk_netns.h. */
#include "tests/tk_netns.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define S_QCAP 65536 /* frames in flight */

static int         s_n;
static char        s_ns[TK_NETNS_MAX][32];
static int         s_tap[TK_NETNS_MAX] = {-1, -1, -1, -1, -1, -1, -1, -1};
static pid_t       s_hub;
static const char *s_ip; /* path of `ip` */

typedef struct {
    uint64_t due;
    int      port;
    uint16_t len;
    uint8_t  data[1600];
} s_frame;

static uint64_t s_ns_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The hub: forever (until killed), frames from port p go to every other
 * port after delay_ns, each copy lost with probability loss.  Delays are
 * equal, so the queue is FIFO by due time. */
static void s_hub_loop(uint64_t delay_ns, double loss)
{
    s_frame *q = malloc(S_QCAP * sizeof *q);
    if (!q)
        _exit(1);
    size_t head = 0, count = 0;
    uint64_t rng = 0x9e3779b97f4a7c15ull;
    struct pollfd pf[TK_NETNS_MAX];
    for (int p = 0; p < s_n; p++)
        pf[p] = (struct pollfd){.fd = s_tap[p], .events = POLLIN};
    uint8_t buf[1600];
    for (;;) {
        uint64_t now = s_ns_now();
        int timeout = 100;
        if (count) {
            uint64_t due = q[head].due;
            timeout = due <= now ? 0 : (int)((due - now) / 1000000ull) + 1;
        }
        if (poll(pf, (nfds_t)s_n, timeout) < 0 && errno != EINTR)
            _exit(1);
        for (int p = 0; p < s_n; p++) {
            if (!(pf[p].revents & POLLIN))
                continue;
            ssize_t n = read(s_tap[p], buf, sizeof buf);
            if (n <= 0)
                continue;
            uint64_t due = s_ns_now() + delay_ns;
            for (int d = 0; d < s_n; d++) {
                if (d == p || count == S_QCAP)
                    continue;
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                if ((double)(rng >> 11) / 9007199254740992.0 < loss)
                    continue;
                s_frame *f = &q[(head + count++) % S_QCAP];
                f->due = due;
                f->port = d;
                f->len = (uint16_t)n;
                memcpy(f->data, buf, (size_t)n);
            }
        }
        now = s_ns_now();
        while (count && q[head].due <= now) {
            (void)!write(s_tap[q[head].port], q[head].data, q[head].len);
            head = (head + 1) % S_QCAP;
            count--;
        }
    }
}

static int s_run(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int s_run(const char *fmt, ...)
{
    char cmd[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    strncat(cmd, " >/dev/null 2>&1", sizeof cmd - strlen(cmd) - 1);
    return system(cmd);
}

const char *tk_netns_why_not(void)
{
    static const char *paths[] = {"/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"};
    if (geteuid() != 0)
        return "not root: creating network namespaces needs CAP_NET_ADMIN";
    for (size_t k = 0; k < sizeof paths / sizeof paths[0] && !s_ip; k++)
        if (access(paths[k], X_OK) == 0)
            s_ip = paths[k];
    if (!s_ip)
        return "no `ip` command (Debian package iproute2)";
    if (access("/dev/net/tun", R_OK | W_OK) != 0)
        return "no /dev/net/tun";
    char probe[48];
    snprintf(probe, sizeof probe, "lpg-probe-%d", (int)getpid());
    if (s_run("%s netns add %s", s_ip, probe) != 0)
        return "`ip netns add` fails here (no namespace support or permission)";
    s_run("%s netns del %s", s_ip, probe);
    return NULL;
}

/* TAP k, moved into namespace k with its address. */
static int s_host(int k, int subnet)
{
    char tap[IFNAMSIZ];
    snprintf(s_ns[k], sizeof s_ns[k], "lpg-%d-%d", (int)getpid() % 100000, k);
    snprintf(tap, sizeof tap, "lpgt%u-%u", (unsigned)getpid() % 100000u, (unsigned)k % 10u);
    struct ifreq ifr;
    memset(&ifr, 0, sizeof ifr);
    ifr.ifr_flags = IFF_TAP | IFF_NO_PI;
    memcpy(ifr.ifr_name, tap, strlen(tap) + 1);
    s_tap[k] = open("/dev/net/tun", O_RDWR);
    if (s_tap[k] < 0 || ioctl(s_tap[k], TUNSETIFF, &ifr) != 0) {
        fprintf(stderr, "tk_netns: cannot create TAP %s: %s\n", tap, strerror(errno));
        return -1;
    }
    if (s_run("%s netns add %s", s_ip, s_ns[k]) != 0 ||
        s_run("%s link set %s netns %s", s_ip, tap, s_ns[k]) != 0 ||
        s_run("%s -n %s addr add 10.%d.0.%d/24 dev %s", s_ip, s_ns[k], subnet, k + 1, tap) != 0 ||
        s_run("%s -n %s link set %s up", s_ip, s_ns[k], tap) != 0 ||
        s_run("%s -n %s link set lo up", s_ip, s_ns[k]) != 0) {
        fprintf(stderr, "tk_netns: cannot set up namespace %s\n", s_ns[k]);
        return -1;
    }
    return 0;
}

int tk_netns_up(int n, int subnet, uint64_t delay_ns, double loss)
{
    if (n < 2 || n > TK_NETNS_MAX || tk_netns_why_not()) {
        fprintf(stderr, "tk_netns: cannot make %d namespaces here\n", n);
        return -1;
    }
    s_n = n;
    for (int k = 0; k < n; k++)
        if (s_host(k, subnet) != 0)
            return -1;
    s_hub = fork();
    if (s_hub < 0)
        return -1;
    if (s_hub == 0)
        s_hub_loop(delay_ns, loss);
    return 0;
}

const char *tk_netns_name(int k)
{
    return k >= 0 && k < s_n ? s_ns[k] : "";
}

const char *tk_netns_ip(void)
{
    return s_ip;
}

void tk_netns_down(void)
{
    if (s_hub > 0) {
        kill(s_hub, SIGKILL);
        waitpid(s_hub, NULL, 0);
        s_hub = 0;
    }
    for (int k = 0; k < TK_NETNS_MAX; k++) {
        if (s_ns[k][0])
            s_run("%s netns del %s", s_ip, s_ns[k]);
        if (s_tap[k] >= 0)
            close(s_tap[k]);
        s_tap[k] = -1;
        s_ns[k][0] = '\0';
    }
    s_n = 0;
}
