/* node_cert — see node_cert.h. */
#include "node/node_cert.h"

#include <czmq.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "nn/nn_core.h"

int node_cert_generate(const char *path, int force, char public_txt[41], char *err,
                       size_t errlen)
{
    char secret[1100];
    if (snprintf(secret, sizeof secret, "%s_secret", path) >= (int)sizeof secret)
        return nn_errf(err, errlen, "keygen: path too long: %s", path);
    if (!force && (access(path, F_OK) == 0 || access(secret, F_OK) == 0))
        return nn_errf(err, errlen, "keygen: %s or %s exists already (use --force to replace "
                       "it: the old key stops working)", path, secret);
    zcert_t *c = zcert_new();
    if (!c)
        return nn_errf(err, errlen, "keygen: cannot create a key pair");
    zcert_set_meta(c, "created-by", "lpgossip keygen");
    if (force)
        unlink(secret); /* a new file, created 0600: never the old file's mode */
    mode_t old = umask(077); /* the secret file is nobody else's business */
    int rc = zcert_save(c, path);
    umask(old);
    if (rc != 0 || chmod(secret, 0600) != 0) {
        zcert_destroy(&c);
        return nn_errf(err, errlen, "keygen: cannot write %s and %s", path, secret);
    }
    chmod(path, 0644);
    snprintf(public_txt, 41, "%s", zcert_public_txt(c));
    zcert_destroy(&c);
    return 0;
}

/* As ssh does with private keys: a secret key file that its group or
 * others may access is refused (the key may have leaked: anyone holding it
 * can speak for this node).  Judged on the open fd. */
static int s_check_secret_mode(int fd, const char *file, char *err, size_t errlen)
{
    struct stat st;
    if (fstat(fd, &st) != 0)
        return nn_errf(err, errlen, "--cert %s: cannot stat it", file);
    if (st.st_mode & 077)
        return nn_errf(err, errlen, "--cert %s: the secret key file has mode %04o: it must not "
                       "be accessible by group or others (run `chmod 600 %s`; if others may "
                       "have read it, make a new key pair with `lpgossip keygen`)", file,
                       (unsigned)(st.st_mode & 07777), file);
    return 0;
}

/* zcert_load of the file open on fd: through /proc/self/fd, so that what
 * CZMQ reads is the regular file checked here, not whatever the path names
 * a moment later (and never PATH_secret of that name: it does not exist). */
static zcert_t *s_load_fd(int fd, const char *file)
{
    char via[64];
    snprintf(via, sizeof via, "/proc/self/fd/%d", fd);
    return zcert_load(access(via, R_OK) == 0 ? via : file);
}

int node_cert_load(const char *path, uint8_t public_key[32], uint8_t secret_key[32], char *err,
                   size_t errlen)
{
    /* zcert_load reads PATH_secret when it exists, else PATH */
    char secret[1100], why[1400];
    if (snprintf(secret, sizeof secret, "%s_secret", path) >= (int)sizeof secret)
        return nn_errf(err, errlen, "--cert %s: path too long", path);
    const char *file = access(secret, F_OK) == 0 ? secret : path;
    int fd = nn_open_regular(file, NULL, why, sizeof why);
    if (fd < 0)
        return nn_errf(err, errlen, "--cert %s (write one with `lpgossip keygen NAME`)", why);
    if (s_check_secret_mode(fd, file, err, errlen) != 0) {
        close(fd);
        return -1;
    }
    zcert_t *c = s_load_fd(fd, file);
    close(fd);
    if (!c)
        return nn_errf(err, errlen, "--cert %s: not a certificate file", path);
    const uint8_t *pub = zcert_public_key(c), *sec = zcert_secret_key(c);
    int empty = 1;
    for (int i = 0; i < 32; i++)
        empty &= sec[i] == 0;
    if (empty) {
        zcert_destroy(&c);
        return nn_errf(err, errlen, "--cert %s holds no secret key: give the _secret file "
                       "(or the public one with its _secret next to it)", path);
    }
    memcpy(public_key, pub, 32);
    memcpy(secret_key, sec, 32);
    zcert_destroy(&c);
    return 0;
}
